//! The cluster's lifecycle: init (`initdb` on first use, else the checks of the cluster
//! found), start (adopting a server of ours still running, cleaning up after a crash), stop,
//! and start again on the same data directory and socket.

use super::dirs::{ensure_socket_dir, prepare_data_dir};
use super::lock::lock_data_dir;
use super::os::{
    chown, euid, is_postgres_in, kill_processes_in, lookup_user, may_signal, process_alive,
    processes_in, resume,
};
use super::programs::{find_bin_dir, read_pg_version, run};
use super::{io_err, EmbeddedPg, EmbeddedPgError, PgOptions, DEFAULT_DATABASE, PG_USER};
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

/// Seconds `pg_ctl` waits for a start or stop to complete.
const PG_CTL_TIMEOUT_SECS: u32 = 60;

/// Longest a start waits for the server to accept connections (crash recovery included).
const PG_START_TIMEOUT: Duration = Duration::from_secs(PG_CTL_TIMEOUT_SECS as u64);

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
        let run_as = if euid() == 0 {
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
        let expected_uid = self.run_as.as_ref().map_or_else(euid, |u| u.uid);
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
                    resume(pid);
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
                if may_signal(pid) && !self.is_our_postgres(pid) {
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
        resume(pid);
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
