//! PostgreSQL's programs: where they are found (`--pg-bin`, the newest
//! `/usr/lib/postgresql/<version>/bin`, `PATH`), and how they are run: as the server's user,
//! in the data directory, in a clean environment, their output kept for the error.

use super::{io_err, EmbeddedPg, EmbeddedPgError};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Environment variables of libpq and PostgreSQL programs that would change what our commands
/// do; they are removed from the environment of every child.
const PG_ENV_VARS: &[&str] = &[
    "PGDATA",
    "PGHOST",
    "PGHOSTADDR",
    "PGPORT",
    "PGUSER",
    "PGDATABASE",
    "PGOPTIONS",
    "PGPASSWORD",
    "PGPASSFILE",
    "PGSERVICE",
    "PGSERVICEFILE",
    "PGSSLMODE",
    "PGCLIENTENCODING",
    "PGTZ",
    "PGDATESTYLE",
    "PG_OOM_ADJUST_FILE",
    "PG_OOM_ADJUST_VALUE",
];

impl EmbeddedPg {
    /// A command for PostgreSQL program `program` of our bin dir, run as the server's user in
    /// the data directory with a clean PostgreSQL environment.
    pub(super) fn pg_command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin_dir.join(program));
        cmd.current_dir(&self.data_dir)
            .stdin(Stdio::null())
            .env("LC_ALL", "C")
            .env("LANG", "C");
        for var in PG_ENV_VARS {
            cmd.env_remove(var);
        }
        if let Some(user) = &self.run_as {
            // std drops the supplementary groups of root before setuid.
            cmd.uid(user.uid)
                .gid(user.gid)
                .env("HOME", &user.home)
                .env("USER", &user.name)
                .env("LOGNAME", &user.name);
        }
        cmd
    }
}

/// Finds the directory with `initdb`, `pg_ctl` and `postgres`.
pub(super) fn find_bin_dir(
    given: Option<&Path>,
    preferred_major: Option<&str>,
) -> Result<PathBuf, EmbeddedPgError> {
    let complete = |dir: &Path| {
        ["initdb", "pg_ctl", "postgres"]
            .iter()
            .all(|program| is_executable(&dir.join(program)))
    };

    if let Some(dir) = given.filter(|d| !d.as_os_str().is_empty()) {
        if complete(dir) {
            return Ok(dir.to_path_buf());
        }
        return Err(EmbeddedPgError::BinariesNotFound(format!(
            "--pg-bin (LEDGER_PG_BIN) is {}, but that directory does not hold the PostgreSQL server \
             programs initdb, pg_ctl and postgres. Point it at e.g. /usr/lib/postgresql/15/bin, \
             or unset it; or install the Debian package postgresql (apt-get install postgresql); \
             or set DATABASE_URL to use an external PostgreSQL",
            dir.display()
        )));
    }

    // Debian layout: /usr/lib/postgresql/<major>/bin.
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let major = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            complete(&bin).then_some((major, bin))
        })
        .collect();
    versions.sort();
    if let Some(preferred) = preferred_major.and_then(|v| v.parse::<u32>().ok()) {
        if let Some((_, bin)) = versions.iter().find(|(major, _)| *major == preferred) {
            return Ok(bin.clone());
        }
    }
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }

    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default();
    if let Some(dir) = on_path.into_iter().find(|dir| complete(dir)) {
        return Ok(dir);
    }

    Err(EmbeddedPgError::BinariesNotFound(
        "the PostgreSQL server programs (initdb, pg_ctl, postgres) were not found in \
         /usr/lib/postgresql/*/bin or on PATH. Install the Debian package postgresql \
         (apt-get install postgresql), or set LEDGER_PG_BIN to the directory holding them, or \
         set DATABASE_URL to use an external PostgreSQL"
            .into(),
    ))
}

/// Whether `path` is a regular file with an execute bit.
fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.mode() & 0o111 != 0)
}

/// The major version in `pgdata/PG_VERSION`, if the cluster exists.
pub(super) fn read_pg_version(pgdata: &Path) -> Option<String> {
    let text = fs::read_to_string(pgdata.join("PG_VERSION")).ok()?;
    let version = text.trim();
    (!version.is_empty()).then(|| version.to_owned())
}

/// Runs `cmd`, capturing its output; a non-zero exit becomes [`EmbeddedPgError::Command`].
pub(super) fn run(mut cmd: Command) -> Result<Output, EmbeddedPgError> {
    let command_line = describe(&cmd);
    let out = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(io_err(format!("cannot run `{command_line}`")))?;
    if out.status.success() {
        return Ok(out);
    }
    let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
    output.push_str(&String::from_utf8_lossy(&out.stderr));
    Err(EmbeddedPgError::Command {
        command: command_line,
        status: out.status.to_string(),
        output,
    })
}

/// The command line of `cmd` for messages.
fn describe(cmd: &Command) -> String {
    let mut line = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        line.push(' ');
        let arg = arg.to_string_lossy();
        if arg.contains(' ') || arg.is_empty() {
            line.push_str(&format!("\"{arg}\""));
        } else {
            line.push_str(&arg);
        }
    }
    line
}
