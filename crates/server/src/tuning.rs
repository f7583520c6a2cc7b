//! Every operational knob of the server in one value, [`Tuning`], built by the command line
//! (a flag, else its `LEDGER_*` environment variable, else the default named by the room it
//! belongs to) and passed down. Each knob stays defined in its room (the pool's in
//! `storage`, the writer's in `writer`, the connections' in `transport`); this value gathers
//! them and checks the ones that depend on each other. The contract's limits (legs, memo,
//! page size …) are not knobs: they are in `domain::limits`.

pub use crate::access::DRAIN_TIMEOUT;
use crate::storage::replica::ReplicaTuning;
use crate::storage::PoolTuning;
use crate::transport::TransportLimits;
use crate::writer::WriterTuning;
use std::time::Duration;

/// The server's knobs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tuning {
    pub pool: PoolTuning,
    pub writer: WriterTuning,
    /// Accounts kept in memory at most (`MAX_CACHED_ACCOUNTS`).
    pub accounts_cached_max: usize,
    /// Longest wait for in-flight requests at shutdown.
    pub drain_timeout: Duration,
    pub transport: TransportLimits,
    /// How often the expiry task looks for expired holds (`HOLD_EXPIRY_POLL`).
    pub hold_expiry_poll: Duration,
    /// The hot standbys' read pools (`--replica-url`).
    pub replicas: ReplicaTuning,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            pool: PoolTuning::default(),
            writer: WriterTuning::default(),
            accounts_cached_max: ledger_core::account::AccountCache::MAX_CACHED_ACCOUNTS,
            drain_timeout: DRAIN_TIMEOUT,
            transport: TransportLimits::default(),
            hold_expiry_poll: crate::service::expiry::HOLD_EXPIRY_POLL,
            replicas: ReplicaTuning::default(),
        }
    }
}

// The defaults agree with each other: a write batch gives up before the call's own limit, and
// a call in flight at shutdown ends within the drain.
const _: () = assert!(
    crate::writer::BATCH_TIMEOUT.as_millis() < crate::transport::REQUEST_TIMEOUT.as_millis()
);
const _: () = assert!(crate::transport::REQUEST_TIMEOUT.as_millis() < DRAIN_TIMEOUT.as_millis());

impl Tuning {
    /// Knobs that could not work, alone or together, are refused by name.
    pub fn check(&self) -> Result<(), String> {
        self.writer.check()?;
        self.transport.check()?;
        self.replicas.check()?;
        if self.pool.size <= self.writer.max_lanes {
            return Err(format!(
                "the pool ({} connections, --pool-size) must have more than MAX_WRITER_LANES ({}): each lane holds one",
                self.pool.size, self.writer.max_lanes
            ));
        }
        let batch = ledger_core::limits::MAX_BATCH_REQUESTS;
        if self.writer.queue_max < batch {
            return Err(format!(
                "MAX_WRITE_QUEUE ({}) must be at least MAX_BATCH_REQUESTS ({batch}): a full PostBatch call is queued whole",
                self.writer.queue_max
            ));
        }
        if self.transport.request_timeout >= self.drain_timeout {
            return Err(format!(
                "REQUEST_TIMEOUT ({:?}) must be below DRAIN_TIMEOUT ({:?}), so a call in flight at shutdown ends within the drain",
                self.transport.request_timeout, self.drain_timeout
            ));
        }
        if self.hold_expiry_poll.is_zero() {
            return Err("HOLD_EXPIRY_POLL must be above zero".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_agree_and_knobs_that_cannot_work_together_are_refused_by_name() {
        Tuning::default().check().unwrap();
        let mut t = Tuning::default();
        t.pool.size = t.writer.max_lanes;
        assert!(t.check().unwrap_err().contains("MAX_WRITER_LANES"));
        let mut t = Tuning::default();
        t.writer.lanes = t.writer.max_lanes + 1;
        assert!(t.check().unwrap_err().contains("MAX_WRITER_LANES"));
        let mut t = Tuning::default();
        t.writer.batch_max = t.writer.queue_max + 1;
        assert!(t.check().unwrap_err().contains("MAX_WRITE_QUEUE"));
        let mut t = Tuning::default();
        t.writer.queue_max = ledger_core::limits::MAX_BATCH_REQUESTS - 1;
        t.writer.batch_max = 100;
        assert!(t.check().unwrap_err().contains("MAX_BATCH_REQUESTS"));
        let mut t = Tuning::default();
        t.drain_timeout = t.transport.request_timeout;
        assert!(t.check().unwrap_err().contains("DRAIN_TIMEOUT"));
        let t = Tuning {
            hold_expiry_poll: Duration::ZERO,
            ..Tuning::default()
        };
        assert!(t.check().unwrap_err().contains("HOLD_EXPIRY_POLL"));
    }
}
