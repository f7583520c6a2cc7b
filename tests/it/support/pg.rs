//! Throw-away PostgreSQL clusters for the integration tests.
//!
//! * [`shared_cluster`]: one cluster per test process, started on first use in a fresh
//!   `/tmp/ledger-test-<pid>-<random>` directory with `fast_unsafe` settings. Each test takes its
//!   own database with [`SharedCluster::fresh_database`], a clone of a migrated template.
//! * [`private_cluster`]: a cluster of its own for destructive fault tests (restart, `SIGSTOP`),
//!   removed when dropped.
//!
//! Clusters left behind are cleaned up: at process exit (an `atexit` handler stops them at once
//! and removes their directories) and, should a test process be killed, by the next test process
//! (directories whose pid is gone are removed, their server stopped first).
#![allow(dead_code)]

use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once, OnceLock, TryLockError};
use std::time::{Duration, Instant};

use ledger_server::embedded_pg::{EmbeddedPg, PgOptions, DEFAULT_PORT};

/// The migrated database that every fresh database is cloned from.
pub const TEMPLATE_DB: &str = "ledger_template";

/// What the test clusters' lock files say holds them.
const HOLDER: &str = "the ledger's integration tests";

/// Prefix of the temp directories of test clusters, followed by `<pid>-<random>`.
const TEMP_PREFIX: &str = "ledger-test-";

/// The cluster shared by the tests of this process.
pub struct SharedCluster {
    pg: Mutex<EmbeddedPg>,
    data_dir: PathBuf,
    socket_dir: PathBuf,
    bin_dir: PathBuf,
    port: u16,
    /// Serializes template creation and cloning; `true` once the template is migrated.
    template_ready: tokio::sync::Mutex<bool>,
}

static SHARED: OnceLock<SharedCluster> = OnceLock::new();

/// Directories of private clusters of this process, removed at exit if still there.
static PRIVATE_DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// The cluster shared by all tests of this process, started on first use.
///
/// Blocks for a second or two on first use (`initdb` and start); later calls return at once.
pub fn shared_cluster() -> &'static SharedCluster {
    SHARED.get_or_init(|| {
        process_setup();
        let began = Instant::now();
        let data_dir = new_temp_dir();
        let pg = EmbeddedPg::start(PgOptions {
            data_dir: data_dir.clone(),
            fast_unsafe: true,
            port: DEFAULT_PORT,
            holder: HOLDER.to_owned(),
            bin_dir: None,
        })
        .unwrap_or_else(|err| {
            let _ = fs::remove_dir_all(&data_dir);
            panic!("cannot start the shared test PostgreSQL: {err}")
        });
        eprintln!(
            "test PostgreSQL in {} ready in {} ms",
            pg.data_dir().display(),
            began.elapsed().as_millis()
        );
        SharedCluster {
            data_dir: pg.data_dir().to_path_buf(),
            socket_dir: pg.socket_dir().to_path_buf(),
            bin_dir: pg.bin_dir().to_path_buf(),
            port: pg.port(),
            pg: Mutex::new(pg),
            template_ready: tokio::sync::Mutex::new(false),
        }
    })
}

impl SharedCluster {
    /// Creates a new database cloned from the migrated template and returns its tokio-postgres
    /// connection string. The template is built (created and migrated with
    /// `ledger_server::storage::migrate`) on the first call.
    pub async fn fresh_database(&self) -> String {
        let mut ready = self.template_ready.lock().await;
        if !*ready {
            self.build_template().await;
            *ready = true;
        }
        let name = format!("t_{}", uuid::Uuid::now_v7().simple());
        let admin = connect(&self.connection_string("postgres")).await;
        admin
            .run(&format!("CREATE DATABASE {name} TEMPLATE {TEMPLATE_DB}"))
            .await
            .unwrap_or_else(|err| panic!("cannot clone {TEMPLATE_DB} into {name}: {err}"));
        admin.close().await;
        drop(ready);
        self.connection_string(&name)
    }

    /// A tokio-postgres connection string for database `dbname` of this cluster.
    pub fn connection_string(&self, dbname: &str) -> String {
        format!(
            "host={} port={} user=postgres dbname={dbname}",
            self.socket_dir.display(),
            self.port
        )
    }

    /// The cluster itself, e.g. for [`EmbeddedPg::postmaster_pid`]. Tests that stop or restart
    /// it would disturb the other tests: use [`private_cluster`] for that.
    pub fn cluster(&self) -> &Mutex<EmbeddedPg> {
        &self.pg
    }

    /// Directory of the unix socket (`psql -h` / `pgbench -h`).
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// Port naming the socket (`-p`).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Directory of `psql`, `pgbench`, `pg_ctl`, ...
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// The cluster's data directory (a temp dir removed at exit).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Creates and migrates the template, then makes sure no session is left in it (a clone
    /// fails while the template has sessions).
    async fn build_template(&self) {
        let began = Instant::now();
        let admin = connect(&self.connection_string("postgres")).await;
        // Left over by an earlier attempt that failed half-way?
        let exists = admin
            .client
            .query_opt(
                "SELECT 1 FROM pg_database WHERE datname = $1",
                &[&TEMPLATE_DB],
            )
            .await
            .expect("cannot list databases")
            .is_some();
        if exists {
            admin
                .run(&format!(
                    "ALTER DATABASE {TEMPLATE_DB} WITH IS_TEMPLATE false ALLOW_CONNECTIONS true"
                ))
                .await
                .expect("cannot unmark the old template");
            admin
                .run(&format!("DROP DATABASE {TEMPLATE_DB} WITH (FORCE)"))
                .await
                .expect("cannot drop the old template");
        }
        admin
            .run(&format!("CREATE DATABASE {TEMPLATE_DB}"))
            .await
            .expect("cannot create the template database");

        let template = self.connection_string(TEMPLATE_DB);
        ledger_server::storage::migrate(&template)
            .await
            .unwrap_or_else(|err| panic!("migrating {TEMPLATE_DB} failed: {err}"));

        // No new sessions from now on, and none left over from the migration.
        admin
            .run(&format!(
                "ALTER DATABASE {TEMPLATE_DB} WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"
            ))
            .await
            .expect("cannot mark the template");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let sessions = admin
                .client
                .query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE datname = $1 AND pid <> pg_backend_pid()",
                    &[&TEMPLATE_DB],
                )
                .await
                .expect("cannot end sessions in the template");
            if sessions.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "sessions in {TEMPLATE_DB} do not go away"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        admin.close().await;
        eprintln!(
            "test template database migrated in {} ms",
            began.elapsed().as_millis()
        );
    }
}

/// Starts a cluster of its own, with the migrated database `ledger`, for tests that stop,
/// restart or freeze PostgreSQL. Returns it with the connection string of `ledger`; dropping it
/// stops the server at once and deletes its directories.
pub async fn private_cluster() -> (EmbeddedPg, String) {
    process_setup();
    let data_dir = new_temp_dir();
    PRIVATE_DIRS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .push(data_dir.clone());
    let options = PgOptions {
        data_dir: data_dir.clone(),
        fast_unsafe: true,
        port: DEFAULT_PORT,
        holder: HOLDER.to_owned(),
        bin_dir: None,
    };
    let mut pg = tokio::task::spawn_blocking(move || EmbeddedPg::start(options))
        .await
        .expect("the task starting PostgreSQL panicked")
        .unwrap_or_else(|err| {
            let _ = fs::remove_dir_all(&data_dir);
            panic!("cannot start a private test PostgreSQL: {err}")
        });
    pg.set_remove_on_drop(true);
    let conn = pg.connection_string("ledger");
    ledger_server::storage::migrate(&conn)
        .await
        .unwrap_or_else(|err| panic!("migrating the private cluster's database failed: {err}"));
    (pg, conn)
}

/// Once per process: clean up after killed test processes and register the exit handler.
fn process_setup() {
    static SETUP: Once = Once::new();
    SETUP.call_once(|| {
        remove_stale_test_dirs();
        // SAFETY: registers a plain `extern "C" fn` that never unwinds.
        unsafe { libc::atexit(cleanup_at_exit) };
    });
}

/// A new, empty `/tmp/ledger-test-<pid>-<random>`.
fn new_temp_dir() -> PathBuf {
    let random = uuid::Uuid::now_v7().simple().to_string();
    let dir = std::env::temp_dir().join(format!(
        "{TEMP_PREFIX}{}-{}",
        std::process::id(),
        &random[random.len() - 8..]
    ));
    fs::create_dir(&dir)
        .unwrap_or_else(|err| panic!("cannot create the test directory {}: {err}", dir.display()));
    dir
}

/// Exit handler: stops the clusters of this process at once and removes their directories.
extern "C" fn cleanup_at_exit() {
    // Nothing may unwind out of an `extern "C"` function.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if let Some(shared) = SHARED.get() {
            let stopped = match shared.pg.try_lock() {
                Ok(mut pg) => pg.stop_immediate().is_ok(),
                Err(TryLockError::Poisoned(poisoned)) => {
                    poisoned.into_inner().stop_immediate().is_ok()
                }
                Err(TryLockError::WouldBlock) => false,
            };
            if !stopped {
                stop_cluster_in(&shared.data_dir);
            }
            remove_cluster_dirs(&shared.data_dir);
        }
        let private = match PRIVATE_DIRS.try_lock() {
            Ok(dirs) => dirs.clone(),
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner().clone(),
            Err(TryLockError::WouldBlock) => Vec::new(),
        };
        for dir in private.iter().filter(|dir| dir.exists()) {
            stop_cluster_in(dir);
            remove_cluster_dirs(dir);
        }
    }));
}

/// Removes the `/tmp/ledger-test-<pid>-*` directories of processes that are gone, stopping
/// their server first.
fn remove_stale_test_dirs() {
    let Ok(entries) = fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    let me = std::process::id();
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|name| name.strip_prefix(TEMP_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me || process_alive(pid as i32) {
            continue;
        }
        let dir = entry.path();
        stop_cluster_in(&dir);
        remove_cluster_dirs(&dir);
        eprintln!("removed the leftover test cluster {}", dir.display());
    }
}

/// Stops at once (`SIGQUIT`, then `SIGKILL` after 5 s) the postmaster of the cluster in
/// `data_dir/pgdata`, if it is running. Works without an [`EmbeddedPg`].
fn stop_cluster_in(data_dir: &Path) {
    let pgdata =
        fs::canonicalize(data_dir.join("pgdata")).unwrap_or_else(|_| data_dir.join("pgdata"));
    let Some(pid) = fs::read_to_string(pgdata.join("postmaster.pid"))
        .ok()
        .and_then(|text| text.lines().next()?.trim().parse::<i32>().ok())
    else {
        return;
    };
    let ours = fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == pgdata);
    if !ours || !process_alive(pid) {
        return;
    }
    unsafe {
        libc::kill(pid, libc::SIGCONT);
        libc::kill(pid, libc::SIGQUIT);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while process_alive(pid) {
        if Instant::now() > deadline {
            unsafe { libc::kill(pid, libc::SIGKILL) };
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Removes a test cluster's data directory and its socket directory.
fn remove_cluster_dirs(data_dir: &Path) {
    let canonical = fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let _ = fs::remove_dir_all(EmbeddedPg::socket_dir_for(&canonical));
    let _ = fs::remove_dir_all(data_dir);
}

/// Whether process `pid` exists and is not a zombie.
fn process_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    let exists = unsafe { libc::kill(pid, 0) } == 0
        || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    exists
        && fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next())
                .is_some_and(|state| state != 'Z' && state != 'X')
        })
}

/// A short-lived connection on the current runtime.
struct Conn {
    client: tokio_postgres::Client,
    task: tokio::task::JoinHandle<Result<(), tokio_postgres::Error>>,
}

impl Conn {
    /// Runs one statement.
    async fn run(&self, sql: &str) -> Result<(), tokio_postgres::Error> {
        self.client.batch_execute(sql).await
    }

    /// Closes the session and waits until the server has it ended.
    async fn close(self) {
        drop(self.client);
        let _ = self.task.await;
    }
}

/// Connects to `conn_string`, panicking with the reason if it fails.
async fn connect(conn_string: &str) -> Conn {
    let (client, connection) = tokio_postgres::connect(conn_string, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|err| {
            panic!("cannot connect to the test PostgreSQL ({conn_string}): {err}")
        });
    Conn {
        client,
        task: tokio::spawn(connection),
    }
}
