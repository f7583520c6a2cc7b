//! The only module that speaks SQL: connection pool, migrations, the writer's batch
//! transaction, and the read queries.

pub mod accounts;
pub mod batch;
pub mod check;
pub mod closes;
pub mod clusters;
pub mod conn;
pub mod fixture;
pub mod holds;
pub mod journal;
pub mod ledgers;
pub mod migrate;
pub mod moves;
pub mod outbox;
pub mod read;
pub mod replica;
pub mod roles;
pub mod terms;
pub mod tls;
pub mod verify;

use std::fmt;

pub use migrate::migrate;

/// The class of the advisory locks serializing the writers of each ledger: the lock of ledger
/// L is the two-key lock (LEDGER_LOCK_CLASS, L) (transaction-scoped, exclusive for a batch,
/// shared for a moment by readers that fence a cut-off of that ledger). A batch writes one
/// ledger, so it holds one of them, never two.
pub const LEDGER_LOCK_CLASS: i32 = 0x4c45_4447;
/// Advisory lock held while migrating.
pub const MIGRATION_LOCK: i64 = 0x4c45_4447_0002;
/// Advisory lock electing the one active outbox publisher.
pub const PUBLISHER_LOCK: i64 = 0x4c45_4447_0003;

/// Connections in the pool, by default (limit: `--pool-size`).
pub const DEFAULT_POOL_SIZE: usize = 16;
/// Longest a request waits for a pooled connection (limit POOL_WAIT_TIMEOUT): past it the
/// database is too slow or the pool too small, and the caller hears `UNAVAILABLE`.
pub const POOL_WAIT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// Longest a new database connection may take to be made, or a pooled one to be checked
/// (limit DB_CONNECT_TIMEOUT).
pub const DB_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Longest a batch's transaction may wait on its connection before PostgreSQL ends it (limit
/// BATCH_IDLE_TIMEOUT, the transaction's `idle_in_transaction_session_timeout`): a writer
/// whose connection went silent mid-batch (a network black hole) holds the ledger's write lock
/// until then; the next batch takes it on a fresh connection. Longer than a batch may take
/// (`BATCH_TIMEOUT`, 10 s), whose own end detaches the connection first.
pub const BATCH_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// The database pool's knobs (part of `crate::tuning::Tuning`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolTuning {
    /// Connections at most (`--pool-size`).
    pub size: usize,
    pub wait_timeout: std::time::Duration,
    pub connect_timeout: std::time::Duration,
}

impl Default for PoolTuning {
    fn default() -> Self {
        PoolTuning {
            size: DEFAULT_POOL_SIZE,
            wait_timeout: POOL_WAIT_TIMEOUT,
            connect_timeout: DB_CONNECT_TIMEOUT,
        }
    }
}

/// A storage failure. Whether the operation took effect may be unknown.
#[derive(Debug)]
pub enum StorageError {
    /// The database refused or the connection failed.
    Db(tokio_postgres::Error),
    /// No connection could be had from the pool.
    Pool(String),
    /// The connection string is not valid.
    Config(String),
    /// A migration failed.
    Migration {
        version: String,
        error: tokio_postgres::Error,
    },
    /// A row read from the journal breaks an invariant: it was written behind the ledger's
    /// back. Only the requests that touch it fail; the server goes on serving.
    Corrupt {
        /// Which row ("posting of sequence 7", "account \"a:b\"").
        row: String,
        /// The posting's sequence, when the row belongs to one.
        sequence: Option<i64>,
        /// The invariant it breaks.
        detail: String,
    },
    /// The ledger is fenced on this cluster: a move of it to another cluster is under way
    /// (or done: the directory has switched). Nothing was written.
    Moving {
        /// The ledger's code.
        ledger: String,
    },
}

impl fmt::Display for StorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageError::Db(e) => match e.as_db_error() {
                Some(db) => write!(f, "database error {}: {}", db.code().code(), db.message()),
                // The cause chain: "error connecting to server" alone does not say why.
                None => write!(f, "database connection error: {}", ledger_client::chain(e)),
            },
            StorageError::Pool(e) => write!(f, "no database connection: {e}"),
            StorageError::Config(e) => write!(f, "invalid database URL: {e}"),
            StorageError::Corrupt { row, detail, .. } => {
                write!(f, "corrupt journal row: {row}: {detail}")
            }
            StorageError::Moving { ledger } => {
                write!(f, "ledger {ledger:?} is being moved to another cluster")
            }
            StorageError::Migration { version, error } => {
                write!(
                    f,
                    "migration {version} failed: {}",
                    StorageError::db_display(error)
                )?;
                if error.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) {
                    f.write_str(
                        ". Migrations change the schema and need its owner's rights, which the \
                         service's login does not have: run `ledger migrate --database-url \
                         <the owner's URL>`, then start the service again (README \"Database \
                         roles\")",
                    )?;
                }
                Ok(())
            }
        }
    }
}

impl StorageError {
    /// What the caller is told: a corrupt journal row is `JOURNAL_CORRUPT` (logged as an error
    /// and counted, for someone must look), any other failure `UNAVAILABLE` (retry).
    pub fn into_ledger_error(self) -> ledger_core::LedgerError {
        match self {
            StorageError::Corrupt {
                row,
                sequence,
                detail,
            } => {
                tracing::error!(%row, ?sequence, %detail, "corrupt journal row: run `ledger check`");
                crate::metrics::journal_corrupt();
                ledger_core::LedgerError::journal_corrupt(&row, sequence, &detail)
            }
            StorageError::Moving { ledger } => ledger_core::LedgerError::new(
                ledger_core::Reason::LedgerMoving,
                format!("ledger {ledger:?} is being moved to another cluster (MoveLedger): nothing was written; retry with the same idempotency key"),
            )
            .with("ledger", &ledger),
            other => ledger_core::LedgerError::unavailable(other),
        }
    }

    /// A posting (its head or its legs) read back broken; `sequence` is stored (it names the
    /// ledger), the caller is told the sequence in that ledger.
    pub fn corrupt_posting(sequence: i64, detail: impl Into<String>) -> StorageError {
        let (ledger, n) = (
            ledger_core::ledger::of_sequence(sequence),
            ledger_core::ledger::in_ledger(sequence),
        );
        let row = match ledger {
            ledger_core::ledger::DEFAULT_LEDGER_ID => format!("posting of sequence {n}"),
            id => format!("posting of sequence {n} of ledger id {id}"),
        };
        StorageError::Corrupt {
            row,
            sequence: Some(n),
            detail: detail.into(),
        }
    }

    /// A ledger row read back broken.
    pub fn corrupt_ledger(code: &str, detail: impl Into<String>) -> StorageError {
        StorageError::Corrupt {
            row: format!("ledger {code:?}"),
            sequence: None,
            detail: detail.into(),
        }
    }

    /// An account (or its totals) read back broken.
    pub fn corrupt_account(code: &str, detail: impl Into<String>) -> StorageError {
        StorageError::Corrupt {
            row: format!("account {code:?}"),
            sequence: None,
            detail: detail.into(),
        }
    }

    fn db_display(e: &tokio_postgres::Error) -> String {
        match e.as_db_error() {
            Some(db) => format!("{}: {}", db.code().code(), db.message()),
            None => ledger_client::chain(e),
        }
    }

    /// The SQLSTATE of a database error, if it is one.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            StorageError::Db(e) | StorageError::Migration { error: e, .. } => {
                e.as_db_error().map(|d| d.code().code())
            }
            _ => None,
        }
    }
}

impl std::error::Error for StorageError {}

impl From<tokio_postgres::Error> for StorageError {
    fn from(e: tokio_postgres::Error) -> Self {
        StorageError::Db(e)
    }
}

impl From<deadpool_postgres::PoolError> for StorageError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => StorageError::Db(e),
            other => StorageError::Pool(other.to_string()),
        }
    }
}

/// The pool type the service uses.
pub type Pool = deadpool_postgres::Pool;

/// A pooled connection. Only storage speaks to the database driver: the other rooms hold
/// connections (and pools) only to hand them back to storage's functions.
pub type Conn = deadpool_postgres::Client;

pub use conn::ConnConfig;

/// Closes a connection instead of returning it to the pool: its state is unknown (a batch
/// that timed out may still hold the transaction).
pub fn discard(conn: Conn) {
    drop(deadpool_postgres::Object::take(conn));
}

/// Parses a database URL (`postgres://…` or `host=… dbname=…`, one host or several, with
/// `sslmode` and `sslrootcert`), with the ledger's defaults: its application name, a connect
/// timeout, TCP keepalives.
pub fn parse_config(database_url: &str) -> Result<ConnConfig, StorageError> {
    let mut cfg = ConnConfig::parse(database_url)?;
    let pg = &mut cfg.pg;
    if pg.get_application_name().is_none() {
        pg.application_name("ledger");
    }
    if pg.get_connect_timeout().is_none() {
        pg.connect_timeout(DB_CONNECT_TIMEOUT);
    }
    pg.keepalives(true);
    pg.keepalives_idle(std::time::Duration::from_secs(10));
    Ok(cfg)
}

/// Builds a pool of at most `size` connections (the other knobs at their defaults).
/// Connections are made lazily.
pub fn pool(database_url: &str, size: usize) -> Result<Pool, StorageError> {
    pool_as(database_url, size, None)
}

/// The database role the service runs as when it drops the owner's privileges (created by
/// migration 0003: no UPDATE, DELETE or TRUNCATE on journal tables).
pub const APP_ROLE: &str = "ledger_app";

/// Like [`pool`], but every connection acts as database role `role` (see [`service_config`]).
pub fn pool_as(database_url: &str, size: usize, role: Option<&str>) -> Result<Pool, StorageError> {
    let tuning = PoolTuning {
        size,
        ..PoolTuning::default()
    };
    pool_with(service_config(database_url, None, role)?, &tuning)
}

/// The settings of the service's connections: `database_url`, logged in as `login` instead of
/// the URL's user when given, acting as database role `role` (`SET ROLE` given as a startup
/// option, so it is the session's default and survives `RESET ALL`/`DISCARD ALL`; the login
/// must be a member of `role`).
///
/// `login` keeps the URL's host, database and password: it is for a cluster that lets the
/// login in without one, as the embedded PostgreSQL does over its private socket, while the
/// URL's user (the owner) runs the migrations.
///
/// Every connection also runs with `plan_cache_mode=force_custom_plan`: a cached statement is
/// planned on each execution, for its arguments and the tables' current size. The default lets
/// PostgreSQL switch to a generic plan after five executions and keep it; a generic plan made
/// while the journal was small keeps scanning it after it has grown (measured on the writer:
/// throughput fell from 10,000 to 4,300 postings/s within 20 s of a fresh start). Planning
/// costs about 0.15 ms per statement (measured on the batch's legs insert).
///
/// And with `jit=off`: on statistics taken while the journal was small, a lookup of a few
/// hundred legs is estimated above `jit_optimize_above_cost`, and PostgreSQL spent about 100 ms
/// compiling it with LLVM, inside the writer's lock (holds in `bench --holds 0.5` at 9-15 % of
/// plain posts). The ledger's statements are short lookups and inserts; JIT never pays.
pub fn service_config(
    database_url: &str,
    login: Option<&str>,
    role: Option<&str>,
) -> Result<ConnConfig, StorageError> {
    let mut config = parse_config(database_url)?;
    let cfg = &mut config.pg;
    let mut options = cfg.get_options().unwrap_or_default().to_owned();
    options.push_str(" -c plan_cache_mode=force_custom_plan -c jit=off");
    if let Some(login) = login {
        check_role_name("login", login)?;
        cfg.user(login);
    }
    if let Some(role) = role {
        check_role_name("role", role)?;
        options.push_str(&format!(" -c role={role}"));
    }
    cfg.options(options.trim_start());
    Ok(config)
}

/// Longest database role name (PostgreSQL's NAMEDATALEN - 1).
pub const MAX_ROLE_NAME_BYTES: usize = 63;

/// A role name goes into a startup option unquoted: only `a-z 0-9 _`, at most
/// [`MAX_ROLE_NAME_BYTES`].
fn check_role_name(what: &str, name: &str) -> Result<(), StorageError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_ROLE_NAME_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        return Ok(());
    }
    Err(StorageError::Config(format!(
        "database {what} {name:?} must be 1..={MAX_ROLE_NAME_BYTES} (MAX_ROLE_NAME_BYTES) \
         characters of a-z 0-9 _"
    )))
}

/// Builds a pool with these settings and knobs. Connections are made lazily.
///
/// Failover: deadpool never retries a query that failed (its caller hears `UNAVAILABLE`); a
/// connection is checked with a query before it is lent again (`RecyclingMethod::Verified`;
/// the default only looks at whether the socket closed), and a broken one is dropped and
/// replaced through the URL's hosts in turn, so with `target_session_attrs=read-write` the
/// pool finds the new primary by itself.
pub fn pool_with(mut cfg: ConnConfig, tuning: &PoolTuning) -> Result<Pool, StorageError> {
    cfg.pg.connect_timeout(tuning.connect_timeout);
    let mgr = deadpool_postgres::Manager::from_connect(
        cfg.pg,
        conn::PoolConnect(cfg.tls),
        deadpool_postgres::ManagerConfig {
            recycling_method: deadpool_postgres::RecyclingMethod::Verified,
        },
    );
    deadpool_postgres::Pool::builder(mgr)
        .max_size(tuning.size)
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .wait_timeout(Some(tuning.wait_timeout))
        .create_timeout(Some(tuning.connect_timeout))
        .recycle_timeout(Some(tuning.connect_timeout))
        .build()
        .map_err(|e| StorageError::Pool(e.to_string()))
}

/// Opens one connection outside any pool (migrations, `ledger check`), with the URL's TLS.
pub async fn connect(database_url: &str) -> Result<tokio_postgres::Client, StorageError> {
    parse_config(database_url)?.connect().await
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_lock_holder_script_samples_the_ledgers_write_lock() {
        // pg_locks shows a two-key advisory lock as classid, objid and objsubid 2.
        let classid = super::LEDGER_LOCK_CLASS as u32;
        let script = include_str!("../../../../bench/lock-holder.sql");
        let filter = format!("l.classid = {classid} AND l.objsubid = 2");
        assert!(
            script.contains(&filter),
            "bench/lock-holder.sql must filter on {filter}"
        );
    }
}
