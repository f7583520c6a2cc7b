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

use std::ffi::{CStr, CString, OsStr};
use std::fmt;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub mod recovery;

/// Default port. With a unix-socket-only server it only names the socket file.
pub const DEFAULT_PORT: u16 = 5432;

/// Name of the database that [`EmbeddedPg::start`] creates if it is missing.
pub const DEFAULT_DATABASE: &str = "ledger";

/// The database superuser created by `initdb`, and the system user the server runs as when the
/// ledger runs as root.
const PG_USER: &str = "postgres";

/// The file in a data directory that its user holds locked.
pub const LOCK_FILE: &str = "ledger.lock";

/// Longest wait, for a process that found a data directory locked, for the holder to record
/// its pid (it does so right after taking the lock).
const HOLDER_RECORD_WAIT: Duration = Duration::from_secs(2);

/// Seconds `pg_ctl` waits for a start or stop to complete.
const PG_CTL_TIMEOUT_SECS: u32 = 60;

/// Longest a start waits for the server to accept connections (crash recovery included).
const PG_START_TIMEOUT: Duration = Duration::from_secs(PG_CTL_TIMEOUT_SECS as u64);

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

/// A data directory another live process holds: its PostgreSQL is that process's to start and
/// stop. What it is, and how to reach its PostgreSQL as a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InUse {
    /// The data directory (canonical).
    pub data_dir: PathBuf,
    /// The holder's pid, when it could be read from the lock file.
    pub pid: Option<i32>,
    /// The holder's command as it recorded it, e.g. `ledger serve`.
    pub holder: String,
    socket_dir: PathBuf,
    port: u16,
}

impl InUse {
    /// A connection string of the holder's PostgreSQL for database `dbname`, as the superuser
    /// (the same as [`EmbeddedPg::connection_string`] gives the holder).
    pub fn connection_string(&self, dbname: &str) -> String {
        connection_string(&self.socket_dir, self.port, PG_USER, dbname)
    }

    /// `` `ledger serve` (pid 123) ``, or without a pid when it could not be read.
    pub fn who(&self) -> String {
        match self.pid {
            Some(pid) => format!("`{}` (pid {pid})", self.holder),
            None => format!("`{}` (pid unknown)", self.holder),
        }
    }
}

impl fmt::Display for InUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the data directory {} is in use by {}; stop it or choose another --data-dir",
            self.data_dir.display(),
            self.who()
        )
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
    /// Starts PostgreSQL on `opts.data_dir`, creating the cluster on first use.
    ///
    /// Binaries are taken from the directory in `$LEDGER_PG_BIN` if set, else from the newest
    /// `/usr/lib/postgresql/<version>/bin` (the version that made an existing cluster is
    /// preferred), else from `PATH`. On first run `initdb` creates `data_dir/pgdata`
    /// (`--auth=trust -U postgres --encoding=UTF8 --locale=C`). The server is started with
    /// `pg_ctl start -w`, listening only on the unix socket in [`socket_dir`](Self::socket_dir);
    /// then the database `ledger` is created if missing.
    ///
    /// A second start on the same directory reuses the data. After an unclean stop (even a
    /// `SIGKILL` of the postmaster) leftover server processes and stale lock files are cleaned
    /// up and PostgreSQL runs its crash recovery. If a server of ours is already running on the
    /// directory (say the previous ledger process was killed) it is adopted.
    ///
    /// Fails with [`EmbeddedPgError::InUse`] when another live process holds the directory
    /// (before touching the cluster). Creates the service's login
    /// ([`SERVICE_LOGIN`](crate::storage::roles::SERVICE_LOGIN)) if missing.
    ///
    /// Blocking: call it from `tokio::task::spawn_blocking` in async code.
    pub fn start(opts: PgOptions) -> Result<EmbeddedPg, EmbeddedPgError> {
        let began = Instant::now();
        // Binaries first: without them nothing else matters (and nothing gets created).
        let existing_version = read_pg_version(&opts.data_dir.join("pgdata"));
        let bin_dir = find_bin_dir(opts.bin_dir.as_deref(), existing_version.as_deref())?;
        let run_as = if unsafe { libc::geteuid() } == 0 {
            Some(lookup_user(PG_USER)?.ok_or_else(|| {
                EmbeddedPgError::UserNotFound(format!(
                    "running as root, but there is no `{PG_USER}` system user to run PostgreSQL \
                     as (PostgreSQL refuses to run as root). Install the Debian package \
                     postgresql (apt-get install postgresql), which creates it, or set \
                     DATABASE_URL to use an external PostgreSQL"
                ))
            })?)
        } else {
            None
        };

        let data_dir = prepare_data_dir(&opts.data_dir, run_as.as_ref())?;
        let lock = lock_data_dir(&data_dir, &opts.holder, opts.port)?;
        let pgdata = data_dir.join("pgdata");

        let mut pg = EmbeddedPg {
            socket_dir: Self::socket_dir_for(&data_dir),
            log_file: data_dir.join("postgres.log"),
            bin_dir,
            data_dir,
            pgdata,
            port: opts.port,
            fast_unsafe: opts.fast_unsafe,
            run_as,
            remove_on_drop: false,
            _lock: lock,
        };

        match existing_version {
            Some(version) => pg.check_existing_cluster(&version)?,
            None => pg.initdb()?,
        }
        pg.start_server(Instant::now() + PG_START_TIMEOUT)?;
        pg.create_database_if_missing(DEFAULT_DATABASE)?;
        pg.create_service_login()?;
        tracing::info!(
            data_dir = %pg.data_dir.display(),
            socket_dir = %pg.socket_dir.display(),
            elapsed_ms = began.elapsed().as_millis() as u64,
            "embedded PostgreSQL ready"
        );
        Ok(pg)
    }

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

    /// The pid of the postmaster: the first line of `pgdata/postmaster.pid`, if that file
    /// exists. For fault tests (`SIGSTOP`/`SIGCONT`/`SIGKILL`); after a crash the file may name a
    /// process that is gone, see [`is_running`](Self::is_running).
    pub fn postmaster_pid(&self) -> Option<i32> {
        read_lock_pid(&self.pgdata.join("postmaster.pid"))
    }

    /// Whether the postmaster named in `postmaster.pid` is alive (a zombie counts as dead).
    pub fn is_running(&self) -> bool {
        self.postmaster_pid().is_some_and(process_alive)
    }

    /// Stops the server (`pg_ctl stop -m fast -w`: sessions are cut, a shutdown checkpoint is
    /// written) and removes the socket directory. Does nothing if the server is not running, so
    /// it may be called any number of times.
    pub fn stop(&mut self) -> Result<(), EmbeddedPgError> {
        let stopped = self.pg_ctl_stop("fast")?;
        let _ = fs::remove_dir(&self.socket_dir);
        if stopped {
            tracing::info!(data_dir = %self.data_dir.display(), "embedded PostgreSQL stopped");
        }
        Ok(())
    }

    /// Stops the server like a crash would (`pg_ctl stop -m immediate -w`: no checkpoint; the
    /// next start runs crash recovery). Does nothing if the server is not running.
    pub fn stop_immediate(&mut self) -> Result<(), EmbeddedPgError> {
        if self.pg_ctl_stop("immediate")? {
            tracing::info!(
                data_dir = %self.data_dir.display(),
                "embedded PostgreSQL stopped (immediate)"
            );
        }
        Ok(())
    }

    /// Starts the server again on the same data directory and socket after
    /// [`stop`](Self::stop), [`stop_immediate`](Self::stop_immediate) or a crash. Does nothing
    /// if it is running.
    pub fn start_again(&mut self) -> Result<(), EmbeddedPgError> {
        self.start_again_by(Instant::now() + PG_START_TIMEOUT)
    }

    /// [`start_again`](Self::start_again), but fails when the server does not accept
    /// connections (its crash recovery done) by `deadline`; a server still starting then is
    /// left running (to be stopped or adopted).
    pub fn start_again_by(&mut self, deadline: Instant) -> Result<(), EmbeddedPgError> {
        self.start_server(deadline)?;
        tracing::info!(data_dir = %self.data_dir.display(), "embedded PostgreSQL started again");
        Ok(())
    }

    /// How many live PostgreSQL processes work in the cluster directory: the server's, or,
    /// after its postmaster died, the backends that have not noticed yet (they keep the old
    /// shared memory, so that a new postmaster refuses to start while one runs).
    pub fn server_processes(&self) -> usize {
        processes_in(&self.pgdata).len()
    }

    /// Crash-like restart for fault tests: `pg_ctl stop -m immediate`, then start again on the
    /// same data directory and socket (PostgreSQL runs crash recovery). Clients see their
    /// connections dropped.
    pub fn restart_immediate(&mut self) -> Result<(), EmbeddedPgError> {
        self.stop_immediate()?;
        self.start_again()
    }

    /// Creates database `name` (owned by `postgres`) unless it exists.
    pub fn create_database_if_missing(&self, name: &str) -> Result<(), EmbeddedPgError> {
        let conn_string = self.connection_string("postgres");
        let name = name.to_owned();
        on_own_runtime("creating the database", async move {
            create_database_async(&conn_string, &name).await
        })
    }

    /// Creates the service's login and the application role unless they exist
    /// ([`crate::storage::roles::ensure_service_login`]): the embedded default's pool logs in
    /// as that login, which cannot become the superuser that owns the schema.
    pub fn create_service_login(&self) -> Result<(), EmbeddedPgError> {
        let conn_string = self.connection_string("postgres");
        on_own_runtime("creating the service's login", async move {
            let client = crate::storage::connect(&conn_string)
                .await
                .map_err(|e| format!("cannot connect with `{conn_string}`: {e}"))?;
            crate::storage::roles::ensure_service_login(&client)
                .await
                .map_err(|e| format!("cannot create the service's login: {e}"))
        })
    }

    /// Runs `initdb` into an empty `pgdata`.
    fn initdb(&self) -> Result<(), EmbeddedPgError> {
        let began = Instant::now();
        match fs::symlink_metadata(&self.pgdata) {
            Ok(meta) => {
                if !meta.is_dir() {
                    return Err(EmbeddedPgError::DataDir(format!(
                        "{} exists and is not a directory; remove it or choose another data \
                         directory",
                        self.pgdata.display()
                    )));
                }
                let mut entries = fs::read_dir(&self.pgdata)
                    .map_err(io_err(format!("cannot list {}", self.pgdata.display())))?;
                if entries.next().is_some() {
                    return Err(EmbeddedPgError::DataDir(format!(
                        "{} is not empty but holds no PostgreSQL cluster (no PG_VERSION file), \
                         maybe from an interrupted first start; remove it and start again",
                        self.pgdata.display()
                    )));
                }
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                fs::DirBuilder::new()
                    .mode(0o700)
                    .create(&self.pgdata)
                    .map_err(io_err(format!("cannot create {}", self.pgdata.display())))?;
            }
            Err(err) => {
                return Err(EmbeddedPgError::Io(
                    format!("cannot inspect {}", self.pgdata.display()),
                    err,
                ))
            }
        }
        fs::set_permissions(&self.pgdata, fs::Permissions::from_mode(0o700))
            .map_err(io_err(format!("cannot chmod {}", self.pgdata.display())))?;
        if let Some(user) = &self.run_as {
            chown(&self.pgdata, user)?;
        }

        let mut cmd = self.pg_command("initdb");
        cmd.arg("-D")
            .arg(&self.pgdata)
            .args([
                "--auth=trust",
                "-U",
                PG_USER,
                "--encoding=UTF8",
                "--locale=C",
            ])
            .arg("--no-instructions");
        if self.fast_unsafe {
            cmd.arg("--no-sync");
        }
        run(cmd)?;
        tracing::info!(
            data_dir = %self.data_dir.display(),
            elapsed_ms = began.elapsed().as_millis() as u64,
            "initialized a new PostgreSQL cluster"
        );
        Ok(())
    }

    /// Checks that an existing cluster can be run by our binaries and user.
    fn check_existing_cluster(&self, version: &str) -> Result<(), EmbeddedPgError> {
        let binaries = self.server_major_version()?;
        if binaries != version {
            return Err(EmbeddedPgError::DataDir(format!(
                "the cluster in {} was made by PostgreSQL {version}, but the binaries in {} are \
                 PostgreSQL {binaries}. Install PostgreSQL {version} (apt-get install \
                 postgresql-{version}) or point LEDGER_PG_BIN at its bin directory, or start \
                 with an empty --data-dir",
                self.pgdata.display(),
                self.bin_dir.display()
            )));
        }
        let meta = fs::metadata(&self.pgdata)
            .map_err(io_err(format!("cannot inspect {}", self.pgdata.display())))?;
        let expected_uid = self
            .run_as
            .as_ref()
            .map_or_else(|| unsafe { libc::geteuid() }, |u| u.uid);
        if meta.uid() != expected_uid {
            return Err(EmbeddedPgError::DataDir(format!(
                "the cluster in {} belongs to uid {}, but PostgreSQL would run as uid \
                 {expected_uid}; run the ledger as the user that created it, or choose another \
                 --data-dir",
                self.pgdata.display(),
                meta.uid()
            )));
        }
        Ok(())
    }

    /// The major version of the `postgres` binary, e.g. `"15"`.
    fn server_major_version(&self) -> Result<String, EmbeddedPgError> {
        let mut cmd = self.pg_command("postgres");
        cmd.arg("-V");
        let out = run(cmd)?;
        let text = String::from_utf8_lossy(&out.stdout);
        // "postgres (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)"
        let version = text
            .split_once(')')
            .map(|(_, rest)| rest.trim())
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or("");
        let major = version.split(['.', 'b', 'r', 'd']).next().unwrap_or("");
        if major.is_empty() {
            return Err(EmbeddedPgError::DataDir(format!(
                "cannot read the version of {}: {text}",
                self.bin_dir.join("postgres").display()
            )));
        }
        Ok(major.to_owned())
    }

    /// Starts the postmaster unless it is running, cleaning up after an unclean stop first; it
    /// must accept connections by `deadline`.
    fn start_server(&mut self, deadline: Instant) -> Result<(), EmbeddedPgError> {
        ensure_socket_dir(&self.socket_dir, self.run_as.as_ref())?;
        if let Some(user) = &self.run_as {
            // pg_ctl opens the log as the server's user.
            if self.log_file.exists() {
                chown(&self.log_file, user)?;
            }
        }

        if let Some(pid) = self.postmaster_pid() {
            if self.is_our_postgres(pid) {
                let socket = self.socket_dir.join(format!(".s.PGSQL.{}", self.port));
                if socket.exists() {
                    // Still running from an earlier process of ours: use it as it is.
                    unsafe { libc::kill(pid, libc::SIGCONT) };
                    tracing::info!(
                        data_dir = %self.data_dir.display(),
                        pid,
                        "embedded PostgreSQL was already running; adopting it"
                    );
                    return Ok(());
                }
                // Running with another socket or port: restart it with ours.
                tracing::info!(pid, "restarting a PostgreSQL started with other settings");
                self.pg_ctl_stop("fast")?;
            }
        }

        match self.pg_ctl_start(deadline) {
            Ok(()) => Ok(()),
            Err(first) => {
                if self.is_running() || Instant::now() >= deadline {
                    return Err(first);
                }
                // One more try after cleaning up again: a crashed server's children may have
                // been on their way out during the first attempt.
                tracing::warn!(error = %first, "PostgreSQL did not start; retrying once");
                std::thread::sleep(Duration::from_millis(500));
                self.pg_ctl_start(deadline)
            }
        }
    }

    /// `pg_ctl start -w` after removing what an unclean stop left behind, waiting until
    /// `deadline` (whole seconds, at least one).
    fn pg_ctl_start(&self, deadline: Instant) -> Result<(), EmbeddedPgError> {
        let began = Instant::now();
        self.clean_after_crash();
        let wait_secs = deadline
            .saturating_duration_since(Instant::now())
            .as_secs()
            .max(1);

        let mut server_opts = format!(
            "-k {} -c listen_addresses='' -p {} -c max_connections=200 -c shared_buffers=128MB",
            self.socket_dir.display(),
            self.port
        );
        if self.fast_unsafe {
            server_opts.push_str(" -c fsync=off -c full_page_writes=off -c synchronous_commit=on");
        }
        let mut cmd = self.pg_command("pg_ctl");
        cmd.arg("start")
            .arg("-w")
            .arg("-t")
            .arg(wait_secs.to_string())
            .arg("-D")
            .arg(&self.pgdata)
            .arg("-l")
            .arg(&self.log_file)
            .arg("-o")
            .arg(server_opts);
        match run(cmd) {
            Ok(_) => {
                tracing::debug!(
                    elapsed_ms = began.elapsed().as_millis() as u64,
                    "pg_ctl start done"
                );
                Ok(())
            }
            Err(EmbeddedPgError::Command {
                command,
                status,
                mut output,
            }) => {
                output.push_str(&format!(
                    "\n--- last lines of {} ---\n{}",
                    self.log_file.display(),
                    log_tail(&self.log_file, 25)
                ));
                Err(EmbeddedPgError::Command {
                    command,
                    status,
                    output,
                })
            }
            Err(other) => Err(other),
        }
    }

    /// After a crash (postmaster killed), kills its surviving children and removes lock files
    /// that name a process which is not our postmaster but would look alive to PostgreSQL (a
    /// zombie nobody reaps, or a reused pid). Lock files of dead processes are left for
    /// PostgreSQL, which removes them itself.
    fn clean_after_crash(&self) {
        let lock_files = [
            self.pgdata.join("postmaster.pid"),
            self.socket_dir.join(format!(".s.PGSQL.{}.lock", self.port)),
        ];
        if self
            .postmaster_pid()
            .is_some_and(|pid| self.is_our_postgres(pid))
        {
            return;
        }
        let killed = kill_processes_in(&self.pgdata);
        if killed > 0 {
            tracing::warn!(
                killed,
                "killed leftover PostgreSQL processes of a crashed server"
            );
        }
        for lock in &lock_files {
            if let Some(pid) = read_lock_pid(lock) {
                // `kill(pid, 0)` succeeds for zombies and for unrelated processes with a reused
                // pid; PostgreSQL would then refuse to start.
                if unsafe { libc::kill(pid, 0) } == 0 && !self.is_our_postgres(pid) {
                    tracing::warn!(pid, lock = %lock.display(), "removing stale lock file");
                    let _ = fs::remove_file(lock);
                }
            }
        }
    }

    /// Whether `pid` is a live (non-zombie) postgres process working in our cluster directory.
    fn is_our_postgres(&self, pid: i32) -> bool {
        process_alive(pid) && is_postgres_in(pid, &self.pgdata)
    }

    /// `pg_ctl stop -m <mode> -w`; returns whether a server was stopped.
    fn pg_ctl_stop(&mut self, mode: &str) -> Result<bool, EmbeddedPgError> {
        let Some(pid) = self
            .postmaster_pid()
            .filter(|&pid| self.is_our_postgres(pid))
        else {
            return Ok(false);
        };
        // A postmaster stopped by a fault test could not act on the shutdown signal.
        unsafe { libc::kill(pid, libc::SIGCONT) };
        let mut cmd = self.pg_command("pg_ctl");
        cmd.arg("stop")
            .arg("-w")
            .arg("-t")
            .arg(PG_CTL_TIMEOUT_SECS.to_string())
            .arg("-m")
            .arg(mode)
            .arg("-D")
            .arg(&self.pgdata);
        match run(cmd) {
            Ok(_) => Ok(true),
            // It may have gone away between our check and pg_ctl's.
            Err(_) if !self.is_running() => Ok(true),
            Err(err) => Err(err),
        }
    }

    /// A command for PostgreSQL program `program` of our bin dir, run as the server's user in
    /// the data directory with a clean PostgreSQL environment.
    fn pg_command(&self, program: &str) -> Command {
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

impl Drop for EmbeddedPg {
    fn drop(&mut self) {
        if self.remove_on_drop {
            let _ = self.stop_immediate();
            let _ = fs::remove_dir_all(&self.data_dir);
            let _ = fs::remove_dir_all(&self.socket_dir);
        } else if let Err(err) = self.stop() {
            tracing::warn!(error = %err, "fast stop of embedded PostgreSQL failed; stopping it immediately");
            let _ = self.stop_immediate();
        }
    }
}

/// Runs `work` to its end on a private single-threaded runtime on a thread of its own, so it
/// works whether or not the caller is inside a tokio runtime.
fn on_own_runtime(
    what: &str,
    work: impl std::future::Future<Output = Result<(), String>> + Send + 'static,
) -> Result<(), EmbeddedPgError> {
    let worker = std::thread::Builder::new()
        .name("embedded-pg-admin".into())
        .spawn(move || -> Result<(), String> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot build a tokio runtime: {e}"))?;
            rt.block_on(work)
        })
        .map_err(io_err("cannot spawn a thread"))?;
    match worker.join() {
        Ok(result) => result.map_err(EmbeddedPgError::Database),
        Err(_) => Err(EmbeddedPgError::Database(format!(
            "the thread {what} panicked"
        ))),
    }
}

/// An exclusive `flock` on a data directory's [`LOCK_FILE`], released when dropped or when
/// the process ends (the file is closed on exec, so PostgreSQL, which outlives a killed
/// holder, never holds it).
#[derive(Debug)]
struct DataDirLock {
    _file: fs::File,
}

/// Takes the data directory's lock and records `pid`, `holder` and `port` in it, one a line;
/// [`EmbeddedPgError::InUse`] when a live process holds it.
fn lock_data_dir(data_dir: &Path, holder: &str, port: u16) -> Result<DataDirLock, EmbeddedPgError> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let path = data_dir.join(LOCK_FILE);
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(&path)
        .map_err(io_err(format!(
            "cannot open the lock file {}",
            path.display()
        )))?;
    // SAFETY: a valid open descriptor; LOCK_NB makes the call return at once.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(EmbeddedPgError::Io(
                format!("cannot lock {}", path.display()),
                err,
            ));
        }
        return Err(EmbeddedPgError::InUse(read_holder(data_dir, &path, port)));
    }
    let record = format!("{}\n{holder}\n{port}\n", std::process::id());
    file.set_len(0)
        .and_then(|()| file.write_all_at(record.as_bytes(), 0))
        .map_err(io_err(format!(
            "cannot write the lock file {}",
            path.display()
        )))?;
    Ok(DataDirLock { _file: file })
}

/// Who holds the lock file at `path`. The holder writes its record just after taking the
/// lock, so a record that names no live process is read again (at most
/// [`HOLDER_RECORD_WAIT`]).
fn read_holder(data_dir: &Path, path: &Path, default_port: u16) -> InUse {
    let deadline = Instant::now() + HOLDER_RECORD_WAIT;
    let record = loop {
        let record = fs::read_to_string(path)
            .ok()
            .and_then(|text| parse_lock_record(&text));
        let live = record
            .as_ref()
            .is_some_and(|(pid, _, _)| process_alive(*pid));
        if live || Instant::now() >= deadline {
            break record.filter(|_| live);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (pid, holder, port) = match record {
        Some((pid, holder, port)) => (Some(pid), holder, port),
        None => (None, "another process".to_owned(), default_port),
    };
    InUse {
        data_dir: data_dir.to_path_buf(),
        pid,
        holder,
        socket_dir: EmbeddedPg::socket_dir_for(data_dir),
        port,
    }
}

/// The pid, command and port of a lock file's text (`<pid>\n<command>\n<port>\n`).
fn parse_lock_record(text: &str) -> Option<(i32, String, u16)> {
    let mut lines = text.lines();
    let pid = lines
        .next()?
        .trim()
        .parse::<i32>()
        .ok()
        .filter(|&p| p > 0)?;
    let holder = lines.next()?.trim().to_owned();
    let port = lines.next()?.trim().parse::<u16>().ok()?;
    (!holder.is_empty()).then_some((pid, holder, port))
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

/// Connects to the maintenance database and creates `name` unless it exists.
async fn create_database_async(conn_string: &str, name: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let (client, connection) = loop {
        match tokio_postgres::connect(conn_string, tokio_postgres::NoTls).await {
            Ok(pair) => break pair,
            Err(err) if Instant::now() < deadline => {
                tracing::debug!(error = %err, "PostgreSQL not accepting connections yet");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(err) => return Err(format!("cannot connect with `{conn_string}`: {err}")),
        }
    };
    let connection = tokio::spawn(connection);
    let result = async {
        let exists = client
            .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
            .await
            .map_err(|e| format!("cannot list databases: {e}"))?
            .is_some();
        if !exists {
            let sql = format!("CREATE DATABASE {}", quote_ident(name));
            match client.batch_execute(&sql).await {
                Ok(()) => tracing::info!(database = name, "created database"),
                // Someone else created it in the meantime.
                Err(err)
                    if err.code() == Some(&tokio_postgres::error::SqlState::DUPLICATE_DATABASE) => {
                }
                Err(err) => return Err(format!("cannot create database {name}: {err}")),
            }
        }
        Ok(())
    }
    .await;
    drop(client);
    let _ = connection.await;
    result
}

/// Resolves, creates and (as root) hands over the data directory; returns its canonical path.
fn prepare_data_dir(data_dir: &Path, run_as: Option<&RunAs>) -> Result<PathBuf, EmbeddedPgError> {
    let absolute = if data_dir.is_absolute() {
        data_dir.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(io_err("cannot read the current directory"))?
            .join(data_dir)
    };
    if let Some(user) = run_as {
        // Before creating anything: the parts of the path that exist already must let the
        // server's user through.
        check_traversable(&absolute, user)?;
    }
    fs::create_dir_all(&absolute).map_err(io_err(format!(
        "cannot create the data directory {}",
        absolute.display()
    )))?;
    let data_dir = fs::canonicalize(&absolute).map_err(io_err(format!(
        "cannot resolve the data directory {}",
        absolute.display()
    )))?;
    let meta = fs::metadata(&data_dir)
        .map_err(io_err(format!("cannot inspect {}", data_dir.display())))?;
    if !meta.is_dir() {
        return Err(EmbeddedPgError::DataDir(format!(
            "the data directory {} is not a directory",
            data_dir.display()
        )));
    }
    let Some(user) = run_as else {
        return Ok(data_dir);
    };

    check_traversable(&data_dir, user)?;
    if meta.uid() != user.uid {
        // Refuse to hand over a directory full of other things (say --data-dir /var/lib).
        let ours = ["pgdata", "postgres.log", LOCK_FILE];
        let foreign = fs::read_dir(&data_dir)
            .map_err(io_err(format!("cannot list {}", data_dir.display())))?
            .filter_map(Result::ok)
            .any(|entry| {
                !ours
                    .iter()
                    .any(|name| entry.file_name() == OsStr::new(name))
            });
        if foreign && !data_dir.join("pgdata").exists() {
            return Err(EmbeddedPgError::DataDir(format!(
                "the data directory {} is not empty and does not look like a ledger data \
                 directory; it would have to be handed over to the `{}` user. Choose a new or \
                 empty directory, e.g. --data-dir /var/lib/ledger",
                data_dir.display(),
                user.name
            )));
        }
        chown(&data_dir, user)?;
    }
    Ok(data_dir)
}

/// Checks that `user` can traverse every existing ancestor of `dir` (PostgreSQL runs as that
/// user).
fn check_traversable(dir: &Path, user: &RunAs) -> Result<(), EmbeddedPgError> {
    for ancestor in dir.ancestors().skip(1) {
        let meta = match fs::metadata(ancestor) {
            Ok(meta) => meta,
            // Will be created (by root, mode 0755).
            Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
            Err(err) => {
                return Err(EmbeddedPgError::Io(
                    format!("cannot inspect {}", ancestor.display()),
                    err,
                ))
            }
        };
        let mode = meta.mode();
        // Only the primary group counts: std clears supplementary groups before setuid.
        let can_search = if meta.uid() == user.uid {
            mode & 0o100 != 0
        } else if meta.gid() == user.gid {
            mode & 0o010 != 0
        } else {
            mode & 0o001 != 0
        };
        if !can_search {
            return Err(EmbeddedPgError::DataDir(format!(
                "the data directory {} cannot be reached by the `{}` user that PostgreSQL runs \
                 as (PostgreSQL refuses to run as root): {} (mode {:04o}, owner uid {}) does \
                 not let it through. Choose a --data-dir under /var/lib or /tmp (e.g. \
                 /var/lib/ledger), or make {} traversable (chmod o+x)",
                dir.display(),
                user.name,
                ancestor.display(),
                mode & 0o7777,
                meta.uid(),
                ancestor.display()
            )));
        }
    }
    Ok(())
}

/// Creates the socket directory (mode 0700, owned by the server's user) or checks an existing
/// one.
fn ensure_socket_dir(dir: &Path, run_as: Option<&RunAs>) -> Result<(), EmbeddedPgError> {
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
        Err(err) => {
            return Err(EmbeddedPgError::Io(
                format!("cannot create the socket directory {}", dir.display()),
                err,
            ))
        }
    }
    let meta =
        fs::symlink_metadata(dir).map_err(io_err(format!("cannot inspect {}", dir.display())))?;
    if !meta.is_dir() {
        return Err(EmbeddedPgError::DataDir(format!(
            "the socket directory {} exists but is not a directory; remove it",
            dir.display()
        )));
    }
    let owner = run_as.map_or_else(|| unsafe { libc::geteuid() }, |u| u.uid);
    if meta.uid() != owner {
        match run_as {
            Some(user) => chown(dir, user)?,
            None => {
                return Err(EmbeddedPgError::DataDir(format!(
                    "the socket directory {} belongs to uid {}, not to us; remove it",
                    dir.display(),
                    meta.uid()
                )))
            }
        }
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .map_err(io_err(format!("cannot chmod {}", dir.display())))
}

/// Finds the directory with `initdb`, `pg_ctl` and `postgres`.
fn find_bin_dir(
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
fn read_pg_version(pgdata: &Path) -> Option<String> {
    let text = fs::read_to_string(pgdata.join("PG_VERSION")).ok()?;
    let version = text.trim();
    (!version.is_empty()).then(|| version.to_owned())
}

/// Looks a system user up by name.
fn lookup_user(name: &str) -> Result<Option<RunAs>, EmbeddedPgError> {
    let c_name = CString::new(name)
        .map_err(|_| EmbeddedPgError::UserNotFound(format!("invalid user name {name:?}")))?;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        // SAFETY: all pointers are valid for the call; `buf` outlives the use of `pwd`'s
        // string fields below.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = unsafe {
            libc::getpwnam_r(
                c_name.as_ptr(),
                &mut pwd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut result,
            )
        };
        if rc == libc::ERANGE && buf.len() < 1024 * 1024 {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if rc != 0 {
            return Err(EmbeddedPgError::Io(
                format!("cannot look up the system user {name}"),
                io::Error::from_raw_os_error(rc),
            ));
        }
        if result.is_null() {
            return Ok(None);
        }
        let home = if pwd.pw_dir.is_null() {
            PathBuf::from("/")
        } else {
            // SAFETY: getpwnam_r succeeded, so pw_dir points to a C string inside `buf`.
            let dir = unsafe { CStr::from_ptr(pwd.pw_dir) };
            PathBuf::from(OsStr::from_bytes(dir.to_bytes()))
        };
        return Ok(Some(RunAs {
            name: name.to_owned(),
            uid: pwd.pw_uid,
            gid: pwd.pw_gid,
            home,
        }));
    }
}

/// Gives `path` (not following a symlink) to `user`.
fn chown(path: &Path, user: &RunAs) -> Result<(), EmbeddedPgError> {
    std::os::unix::fs::lchown(path, Some(user.uid), Some(user.gid)).map_err(io_err(format!(
        "cannot give {} to the `{}` user",
        path.display(),
        user.name
    )))
}

/// Runs `cmd`, capturing its output; a non-zero exit becomes [`EmbeddedPgError::Command`].
fn run(mut cmd: Command) -> Result<Output, EmbeddedPgError> {
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

/// The last `lines` lines of the log file, or a note that it cannot be read.
fn log_tail(path: &Path, lines: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(err) => format!("(cannot read it: {err})"),
    }
}

/// The pid on the first line of a PostgreSQL lock file.
fn read_lock_pid(path: &Path) -> Option<i32> {
    let text = fs::read_to_string(path).ok()?;
    let pid = text.lines().next()?.trim().parse::<i32>().ok()?;
    // A negative pid marks a single-user backend.
    Some(pid.abs()).filter(|&pid| pid > 0)
}

/// Whether process `pid` exists and is not a zombie.
fn process_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    let exists = unsafe { libc::kill(pid, 0) } == 0
        || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    if !exists {
        return false;
    }
    // Killed postmasters are not always reaped (their parent is init); a zombie is dead.
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// Whether `pid` runs a `postgres` executable with `dir` as its working directory (every
/// PostgreSQL server process works in its cluster directory).
fn is_postgres_in(pid: i32, dir: &Path) -> bool {
    let cwd = fs::read_link(format!("/proc/{pid}/cwd"));
    let exe = fs::read_link(format!("/proc/{pid}/exe"));
    match (cwd, exe) {
        (Ok(cwd), Ok(exe)) => {
            cwd == dir
                && exe
                    .file_name()
                    .is_some_and(|name| name.as_bytes().starts_with(b"postgres"))
        }
        _ => false,
    }
}

/// The live postgres processes working in `dir`.
fn processes_in(dir: &Path) -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| process_alive(pid) && is_postgres_in(pid, dir))
        .collect()
}

/// SIGKILLs every live postgres process working in `dir` and waits (up to 5 s) for them to go.
/// Returns how many there were.
fn kill_processes_in(dir: &Path) -> usize {
    let pids = processes_in(dir);
    for &pid in &pids {
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|&pid| process_alive(pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    pids.len()
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
    fn a_lock_record_names_pid_command_and_port_or_nothing() {
        assert_eq!(
            parse_lock_record("123\nledger serve\n5432\n"),
            Some((123, "ledger serve".to_owned(), 5432))
        );
        for torn in [
            "",
            "123\n",
            "123\nledger serve\n",
            "x\nledger\n5432\n",
            "0\na\n1\n",
        ] {
            assert_eq!(parse_lock_record(torn), None, "{torn:?}");
        }
    }

    #[test]
    fn connection_values_are_quoted_when_needed() {
        assert_eq!(quote_conn_value("ledger"), "ledger");
        assert_eq!(quote_conn_value("a b"), "'a b'");
        assert_eq!(quote_conn_value("it's"), "'it\\'s'");
        assert_eq!(quote_ident("we\"ird"), "\"we\"\"ird\"");
    }
}
