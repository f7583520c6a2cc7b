//! Hot standbys as read pools (`--replica-url`): their knobs, their pools, and what a standby
//! has replayed. Which read goes where is the service's choice (`service::replicas`); the
//! proof that a standby may answer one is here and in [`super::read::resolve_replayed`].

use super::{Pool, PoolTuning, StorageError};
use deadpool_postgres::GenericClient;
use std::time::Duration;

/// Connections to each standby, at most (limit REPLICA_POOL_SIZE, by default).
pub const REPLICA_POOL_SIZE: usize = 8;
/// Longest a connection to a standby may take to open (limit REPLICA_CONNECT_TIMEOUT): a
/// standby that does not answer sooner is passed over.
pub const REPLICA_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest a read waits for a free connection to a standby (limit REPLICA_WAIT_TIMEOUT)
/// before the primary answers it instead.
pub const REPLICA_WAIT_TIMEOUT: Duration = Duration::from_millis(50);
/// Longest a read may take on a standby (limit REPLICA_READ_TIMEOUT) before the primary
/// answers it instead: a standby that lags, hangs or waits on a replay conflict never makes a
/// read wait longer than this, nor fail.
pub const REPLICA_READ_TIMEOUT: Duration = Duration::from_secs(1);
/// How often each standby's replay is sampled (limit REPLICA_PROBE_INTERVAL): a standby found
/// down or no longer in recovery is passed over until a probe finds it well again.
pub const REPLICA_PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// The standbys' knobs (part of `crate::tuning::Tuning`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaTuning {
    pub pool_size: usize,
    pub connect_timeout: Duration,
    pub wait_timeout: Duration,
    pub read_timeout: Duration,
    pub probe_interval: Duration,
}

impl Default for ReplicaTuning {
    fn default() -> Self {
        ReplicaTuning {
            pool_size: REPLICA_POOL_SIZE,
            connect_timeout: REPLICA_CONNECT_TIMEOUT,
            wait_timeout: REPLICA_WAIT_TIMEOUT,
            read_timeout: REPLICA_READ_TIMEOUT,
            probe_interval: REPLICA_PROBE_INTERVAL,
        }
    }
}

impl ReplicaTuning {
    /// Knobs that could not work are refused by name.
    pub fn check(&self) -> Result<(), String> {
        if self.pool_size == 0 || self.read_timeout.is_zero() || self.probe_interval.is_zero() {
            return Err(
                "REPLICA_POOL_SIZE, REPLICA_READ_TIMEOUT and REPLICA_PROBE_INTERVAL must be above zero"
                    .into(),
            );
        }
        Ok(())
    }
}

/// One standby's read pool, named by its hosts (never its password).
pub struct ReplicaPool {
    pub name: String,
    pub pool: Pool,
}

/// The pool of a standby: the service's login and role, the standby's own knobs.
pub fn replica_pool(
    url: &str,
    login: Option<&str>,
    role: Option<&str>,
    tuning: &ReplicaTuning,
) -> Result<ReplicaPool, StorageError> {
    let cfg = super::service_config(url, login, role)?;
    let name = cfg.hosts();
    let knobs = PoolTuning {
        size: tuning.pool_size,
        wait_timeout: tuning.wait_timeout,
        connect_timeout: tuning.connect_timeout,
    };
    Ok(ReplicaPool {
        name,
        pool: super::pool_with(cfg, &knobs)?,
    })
}

/// What a database has replayed (a standby) or committed (the primary).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Replayed {
    /// Postings in its copy of the journal (every ledger's last sequence, summed): what the
    /// replay lag in sequences is counted in.
    pub last_sequence: i64,
    pub in_recovery: bool,
    /// Seconds since the last transaction it replayed was committed on the primary, 0 when it
    /// has replayed all it received; `None` on a primary.
    pub lag_seconds: Option<f64>,
}

/// The ledger's head as this database has it, whether it is a standby, and its replay lag.
pub async fn replayed(client: &impl GenericClient) -> Result<Replayed, StorageError> {
    let row = client
        .query_one(
            "SELECT (SELECT coalesce(sum(last_sequence & 1099511627775), 0)::bigint FROM ledger_state)
                      AS last_sequence,
                    pg_is_in_recovery() AS in_recovery,
                    CASE WHEN NOT pg_is_in_recovery() THEN NULL
                         WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0.0
                         ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8
                    END AS lag_seconds",
            &[],
        )
        .await?;
    Ok(Replayed {
        last_sequence: row.get("last_sequence"),
        in_recovery: row.get("in_recovery"),
        lag_seconds: row.get("lag_seconds"),
    })
}

/// The last (stored) sequence of ledger `ledger` this database has (replayed): a read at a
/// cut-off of that ledger whose sequence is at most this has, in every later snapshot of this
/// database, every leg it counts.
pub async fn replayed_sequence(
    client: &impl GenericClient,
    ledger: ledger_core::ledger::LedgerId,
) -> Result<i64, StorageError> {
    let stmt = client
        .prepare_cached("SELECT last_sequence FROM ledger_state WHERE ledger_id = $1")
        .await?;
    Ok(client.query_one(&stmt, &[&ledger]).await?.get(0))
}
