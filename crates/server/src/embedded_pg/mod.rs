//! A private PostgreSQL cluster run as a child of the ledger.
//!
//! This is what `ledger serve` uses when no `DATABASE_URL` is given, and what the test harness
//! uses for its throw-away clusters. [`EmbeddedPg::start`] finds the PostgreSQL server binaries
//! installed on the machine, runs `initdb` on first use, starts the server with `pg_ctl`, and
//! makes sure the database `ledger` exists.
//!
//! Layout of a data directory `D`:
//!
//! * `D/pgdata`: the PostgreSQL cluster (`initdb` needs an empty directory of its own);
//! * `D/postgres.log`: the server log;
//! * `D/ledger.lock`: held (`flock`) by the process using the directory, naming it.
//!
//! One process uses a data directory at a time: [`EmbeddedPg::start`] takes an exclusive
//! `flock` on `D/ledger.lock` and records its pid and command there; it stops PostgreSQL only
//! while it holds that lock. Another process finds the directory [`InUse`] and may connect
//! to the running PostgreSQL as a client, never stopping it. The kernel releases the lock when
//! its holder ends, however it ends, so the PostgreSQL of a killed holder is adopted by the
//! next start.
//!
//! The server listens on a unix socket only (`listen_addresses=''`). Its socket lives in a short
//! directory `/tmp/ledger-pg-<8 hex>` (a hash of the canonical data directory path) rather than
//! inside the data directory, because a unix socket path must stay under 107 bytes. The port only
//! names the socket file (`.s.PGSQL.<port>`), so clusters with different data directories never
//! clash even when they use the same port.
//!
//! PostgreSQL refuses to run as root. When the ledger runs as root, every PostgreSQL program is
//! run as the unprivileged `postgres` system user (the Debian packages create it), and the data
//! directory is handed over to that user. Otherwise the programs run as the current user.
//!
//! Authentication is `trust` (the superuser `postgres` and the service's login `ledger_svc`,
//! which [`EmbeddedPg::start`] creates); access is guarded by the permissions of the socket
//! directory (mode 0700, owned by the user the server runs as; root gets through).
//!
//! All functions here are blocking (`std::process`); async callers should use
//! `tokio::task::spawn_blocking`.
//!
//! The parts: the lifecycle, init, start, stop, start again (`lifecycle.rs`); the data
//! directory's lock (`lock.rs`); the data and socket directories (`dirs.rs`); PostgreSQL's
//! programs, found and run (`programs.rs`); the system's users and processes (`os.rs`); the
//! database and login inside the cluster (`database.rs`); and the [`recovery`] of `ledger
//! serve`'s PostgreSQL after it died.

mod database;
mod dirs;
mod lifecycle;
mod lock;
mod os;
mod programs;
pub mod recovery;

pub use lock::InUse;
use std::fmt;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Default port. With a unix-socket-only server it only names the socket file.
pub const DEFAULT_PORT: u16 = 5432;

/// Name of the database that [`EmbeddedPg::start`] creates if it is missing.
pub const DEFAULT_DATABASE: &str = "ledger";

/// The database superuser created by `initdb`, and the system user the server runs as when the
/// ledger runs as root.
const PG_USER: &str = "postgres";

/// The file in a data directory that its user holds locked.
pub const LOCK_FILE: &str = "ledger.lock";

/// How to start an [`EmbeddedPg`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgOptions {
    /// Directory holding the cluster (`pgdata/`) and the server log (`postgres.log`). Created if
    /// missing; a relative path is resolved against the current directory.
    pub data_dir: PathBuf,
    /// For tests: `fsync=off` and `full_page_writes=off` (and `initdb --no-sync`). Data may be
    /// lost if the machine crashes; `synchronous_commit` stays on, so a crash of PostgreSQL alone
    /// loses no committed transaction.
    pub fast_unsafe: bool,
    /// Port number; it only names the unix socket (`.s.PGSQL.<port>`). Default 5432.
    pub port: u16,
    /// What this process is, e.g. `ledger serve`: the lock file records it for whoever finds
    /// the data directory in use, so they can tell the operator what to stop.
    pub holder: String,
    /// The directory of PostgreSQL's server programs (`--pg-bin`, env `LEDGER_PG_BIN`).
    /// `None`: the newest `/usr/lib/postgresql/<version>/bin` (the version that made an
    /// existing cluster first), else `PATH`.
    pub bin_dir: Option<PathBuf>,
}

impl PgOptions {
    /// Durable options (`fast_unsafe = false`) on the default port for `data_dir`, held by
    /// this program (its name).
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        let program = std::env::args_os()
            .next()
            .map(PathBuf::from)
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "ledger".to_owned());
        PgOptions {
            data_dir: data_dir.into(),
            fast_unsafe: false,
            port: DEFAULT_PORT,
            holder: program,
            bin_dir: None,
        }
    }
}

/// Why the embedded PostgreSQL could not be started or stopped.
#[derive(Debug)]
pub enum EmbeddedPgError {
    /// `initdb`, `pg_ctl` or `postgres` could not be found; the message says where we looked and
    /// how to fix it.
    BinariesNotFound(String),
    /// The ledger runs as root but there is no `postgres` system user to run PostgreSQL as.
    UserNotFound(String),
    /// The data directory cannot be used (not reachable by the server's user, not a cluster,
    /// made by another PostgreSQL version, ...); the message says why and what to do.
    DataDir(String),
    /// A file system or process operation failed: what we were doing, and the OS error.
    Io(String, io::Error),
    /// A PostgreSQL program failed.
    Command {
        /// The command line that failed.
        command: String,
        /// How it ended (exit code or signal).
        status: String,
        /// Its stdout and stderr, and the end of the server log when relevant.
        output: String,
    },
    /// The server started but a database or role could not be checked or created.
    Database(String),
    /// Another live process holds the data directory (see [`InUse`]).
    InUse(InUse),
}

impl fmt::Display for EmbeddedPgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EmbeddedPgError::BinariesNotFound(msg)
            | EmbeddedPgError::UserNotFound(msg)
            | EmbeddedPgError::DataDir(msg) => f.write_str(msg),
            EmbeddedPgError::Io(context, err) => write!(f, "{context}: {err}"),
            EmbeddedPgError::Command {
                command,
                status,
                output,
            } => {
                write!(f, "`{command}` failed ({status})")?;
                let output = output.trim();
                if !output.is_empty() {
                    write!(f, ":\n{output}")?;
                }
                Ok(())
            }
            EmbeddedPgError::Database(msg) => write!(f, "embedded PostgreSQL: {msg}"),
            EmbeddedPgError::InUse(in_use) => in_use.fmt(f),
        }
    }
}

impl std::error::Error for EmbeddedPgError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EmbeddedPgError::Io(_, err) => Some(err),
            _ => None,
        }
    }
}

/// Shorthand to wrap an [`io::Error`] with what we were doing.
fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> EmbeddedPgError {
    let context = context.into();
    move |err| EmbeddedPgError::Io(context, err)
}

/// The unprivileged system user that PostgreSQL runs as when we are root.
#[derive(Debug, Clone)]
struct RunAs {
    name: String,
    uid: u32,
    gid: u32,
    home: PathBuf,
}

/// An exclusive `flock` on a data directory's [`LOCK_FILE`], released when dropped or when
/// the process ends (the file is closed on exec, so PostgreSQL, which outlives a killed
/// holder, never holds it).
#[derive(Debug)]
struct DataDirLock {
    _file: fs::File,
}

/// A PostgreSQL server on a private data directory, reachable over a unix socket.
///
/// Dropping it stops the server (`pg_ctl stop -m fast`, errors ignored).
#[derive(Debug)]
pub struct EmbeddedPg {
    /// Directory with `initdb`, `pg_ctl`, `postgres`, `psql`, `pgbench`.
    bin_dir: PathBuf,
    /// Canonical data directory given in the options.
    data_dir: PathBuf,
    /// `data_dir/pgdata`, the cluster proper.
    pgdata: PathBuf,
    /// `data_dir/postgres.log`.
    log_file: PathBuf,
    /// `/tmp/ledger-pg-<hash>`.
    socket_dir: PathBuf,
    port: u16,
    fast_unsafe: bool,
    /// `Some` when we are root and run PostgreSQL as the `postgres` user.
    run_as: Option<RunAs>,
    /// Remove the data and socket directories when dropped (test clusters).
    remove_on_drop: bool,
    /// Held while we may start and stop the server; released after [`Drop`] stopped it.
    _lock: DataDirLock,
}

impl EmbeddedPg {
    /// The socket directory used for the (canonical) data directory `data_dir`:
    /// `/tmp/ledger-pg-<8 hex digits of a hash of the path>`.
    pub fn socket_dir_for(data_dir: &Path) -> PathBuf {
        PathBuf::from(format!(
            "/tmp/ledger-pg-{:08x}",
            fnv1a32(data_dir.as_os_str().as_bytes())
        ))
    }

    /// A tokio-postgres connection string for database `dbname`, e.g.
    /// `host=/tmp/ledger-pg-1a2b3c4d port=5432 user=postgres dbname=ledger`.
    pub fn connection_string(&self, dbname: &str) -> String {
        connection_string(&self.socket_dir, self.port, PG_USER, dbname)
    }

    /// Directory holding the server's unix socket (`.s.PGSQL.<port>`).
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// The data directory given in the options (canonical form).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The PostgreSQL cluster directory, `data_dir/pgdata`.
    pub fn pgdata_dir(&self) -> &Path {
        &self.pgdata
    }

    /// The server log, `data_dir/postgres.log`.
    pub fn log_file(&self) -> &Path {
        &self.log_file
    }

    /// The port, which names the socket file.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Directory of the PostgreSQL binaries in use (`pg_ctl`, `psql`, `pgbench`, ...).
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// Makes [`Drop`] stop the server at once (`-m immediate`) and delete the data directory and
    /// the socket directory. For throw-away test clusters.
    pub fn set_remove_on_drop(&mut self, remove: bool) {
        self.remove_on_drop = remove;
    }
}

/// A libpq-style connection string over the socket in `socket_dir`.
fn connection_string(socket_dir: &Path, port: u16, user: &str, dbname: &str) -> String {
    format!(
        "host={} port={port} user={} dbname={}",
        socket_dir.display(),
        quote_conn_value(user),
        quote_conn_value(dbname)
    )
}

/// 32-bit FNV-1a: a stable hash for naming the socket directory.
fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, &byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    })
}

/// Quotes an SQL identifier.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Quotes a value of a libpq-style `key=value` connection string when needed.
fn quote_conn_value(value: &str) -> String {
    if !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'))
    {
        value.to_owned()
    } else {
        format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_dir_is_short_and_stable() {
        let a = EmbeddedPg::socket_dir_for(Path::new("/var/lib/ledger"));
        let b = EmbeddedPg::socket_dir_for(Path::new("/var/lib/ledger"));
        let c = EmbeddedPg::socket_dir_for(Path::new("/var/lib/ledger2"));
        assert_eq!(a, b);
        assert_ne!(a, c);
        let socket = a.join(".s.PGSQL.65535");
        assert!(socket.as_os_str().len() < 107, "{}", socket.display());
        assert!(a.to_str().unwrap().starts_with("/tmp/ledger-pg-"));
    }

    #[test]
    fn connection_values_are_quoted_when_needed() {
        assert_eq!(quote_conn_value("ledger"), "ledger");
        assert_eq!(quote_conn_value("a b"), "'a b'");
        assert_eq!(quote_conn_value("it's"), "'it\\'s'");
        assert_eq!(quote_ident("we\"ird"), "\"we\"\"ird\"");
    }
}
