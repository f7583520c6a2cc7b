//! Where an as-of read runs: on a hot standby when the standby can prove it has everything
//! the answer counts, else on the primary. The one place reads are routed: the reads
//! themselves (`storage::read`) run unchanged on whichever connection is chosen.
//!
//! The proof, on the standby's own connection, before the read:
//! - a requested recorded cut-off R: the standby resolves it itself
//!   ([`storage::read::resolve_replayed`]) when its copy of the ledger's last committed batch
//!   was recorded at or after R (then its answer is final and the primary's);
//! - a cut-off already applied (resolved on the primary: a read without `as_of.recorded_at`,
//!   whose fence stays on the primary, or a later page): its sequence S is at most the
//!   standby's replayed `last_sequence` ([`storage::replica::replayed_sequence`]). A standby's
//!   snapshots only move forward, so the read after the check sees every leg up to S.
//!
//! Anything else, or a standby that is down, not in recovery, slow (past
//! `REPLICA_READ_TIMEOUT`) or failing, goes to the primary: a standby never makes a read fail
//! or wait longer than its named limits. A probe samples every standby's replay (lag in
//! seconds and in sequences, for the metrics) every `REPLICA_PROBE_INTERVAL`.

use super::Ledger;
use crate::metrics::StandbySample;
use crate::storage::replica::{self, ReplicaPool, ReplicaTuning};
use crate::storage::{self, Conn, Pool};
use ledger_core::record::{AppliedAsOf, AsOf};
use ledger_core::{LedgerError, Reason};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// A read at a cut-off on a connection (boxed: it runs on the standby or on the primary, and
/// the server's futures must be `Send`). What it captures it owns: it may run twice.
pub(crate) type ReadFuture<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, LedgerError>> + Send + 'a>>;

/// Names a read for [`Ledger::read_at`] (a closure's signature is only inferred this general
/// where the bound is in sight).
pub(crate) fn at_read<T, F>(f: F) -> F
where
    F: for<'a> Fn(&'a Conn, &'a AppliedAsOf) -> ReadFuture<'a, T> + Sync,
{
    f
}

/// The cut-off of a read: as the caller asked it, or as resolved already (a page token's).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Cut {
    Requested(AsOf),
    Applied(AppliedAsOf),
}

/// One standby: its pool, and whether the last probe found it well and in recovery.
struct Standby {
    pool: ReplicaPool,
    usable: AtomicBool,
}

/// The standbys of `--replica-url` (none: every read on the primary).
#[derive(Default)]
pub struct Replicas {
    standbys: Vec<Arc<Standby>>,
    next: AtomicUsize,
    tuning: ReplicaTuning,
}

impl Replicas {
    /// The standbys' pools; a probe task samples them (and the primary's head) until the
    /// returned value is dropped.
    pub fn new(pools: Vec<ReplicaPool>, primary: Pool, tuning: ReplicaTuning) -> Arc<Replicas> {
        let standbys = pools
            .into_iter()
            .map(|pool| {
                Arc::new(Standby {
                    pool,
                    usable: AtomicBool::new(false),
                })
            })
            .collect();
        let replicas = Arc::new(Replicas {
            standbys,
            next: AtomicUsize::new(0),
            tuning,
        });
        if !replicas.standbys.is_empty() {
            tokio::spawn(probe(Arc::downgrade(&replicas), primary));
        }
        replicas
    }

    /// The next usable standby, round robin.
    fn pick(&self) -> Option<&Standby> {
        let n = self.standbys.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|i| &*self.standbys[(start + i) % n])
            .find(|s| s.usable.load(Ordering::Relaxed))
    }
}

/// Every `probe_interval`: each standby's replay and lag, and the primary's head, into the
/// metrics; a standby that does not answer within its connect timeout, or is not in
/// recovery (promoted, or pointed at a primary), is passed over until it is well again.
async fn probe(replicas: std::sync::Weak<Replicas>, primary: Pool) {
    loop {
        let Some(r) = replicas.upgrade() else { return };
        let limit = r.tuning.connect_timeout;
        let head = tokio::time::timeout(limit, async {
            let c = primary.get().await.map_err(storage::StorageError::from)?;
            replica::replayed(&c).await.map(|r| r.last_sequence)
        })
        .await;
        let head = head.ok().and_then(Result::ok);
        for s in &r.standbys {
            let sample = tokio::time::timeout(limit, async {
                let c = s
                    .pool
                    .pool
                    .get()
                    .await
                    .map_err(storage::StorageError::from)?;
                replica::replayed(&c).await
            })
            .await;
            let sample = sample.ok().and_then(Result::ok);
            let usable = sample.is_some_and(|x| x.in_recovery);
            if s.usable.swap(usable, Ordering::Relaxed) != usable {
                tracing::info!(standby = %s.pool.name, usable, limit = ?limit, "standby for as-of reads (REPLICA_CONNECT_TIMEOUT)");
            }
            crate::metrics::standby_sampled(&s.pool.name, standby_sample(sample, head));
        }
        let interval = r.tuning.probe_interval;
        drop(r);
        tokio::time::sleep(interval).await;
    }
}

impl Ledger {
    /// Resolves `cut` and runs `read` at it: on a standby that proves it can answer, else on
    /// the primary (so `read` may run twice). Returns the applied cut-off with the answer.
    pub(crate) async fn read_at<T, F>(
        &self,
        book: &ledger_core::ledger::Ledger,
        cut: Cut,
        read: F,
    ) -> Result<(AppliedAsOf, T), LedgerError>
    where
        F: for<'a> Fn(&'a Conn, &'a AppliedAsOf) -> ReadFuture<'a, T> + Sync,
        T: Send,
    {
        let cut = match cut {
            Cut::Requested(as_of) if as_of.recorded_at.is_none() => {
                Cut::Applied(self.resolve(book, as_of).await?)
            }
            other => other,
        };
        let standby = match book.cluster == ledger_core::ledger::MAIN_CLUSTER {
            true => self.replicas.pick(),
            false => None,
        };
        if let Some(standby) = standby {
            let limit = self.replicas.tuning.read_timeout;
            let name = standby.pool.name.as_str();
            match tokio::time::timeout(limit, on_standby(standby, book.id, cut, &read)).await {
                Ok(Ok(Some(answer))) => {
                    crate::metrics::read_served("standby", Some(name), None);
                    return Ok(answer);
                }
                Ok(Ok(None)) => crate::metrics::read_served("primary", Some(name), Some("behind")),
                Ok(Err(e)) => {
                    tracing::debug!(standby = name, error = %e, "standby read failed; the primary answers");
                    crate::metrics::read_served("primary", Some(name), Some("unavailable"));
                }
                Err(_) => {
                    standby.usable.store(false, Ordering::Relaxed);
                    tracing::debug!(standby = name, limit = ?limit, "standby read past REPLICA_READ_TIMEOUT; the primary answers");
                    crate::metrics::read_served("primary", Some(name), Some("unavailable"));
                }
            }
        } else {
            crate::metrics::read_served("primary", None, None);
        }
        let at = match cut {
            Cut::Requested(as_of) => self.resolve(book, as_of).await?,
            Cut::Applied(at) => at,
        };
        let client = self.client_of(book).await?;
        Ok((at, read(&client, &at).await?))
    }
}

/// A probe's findings for the metrics: the standby's replay (`None`: it did not answer)
/// against the primary's last sequence (`None`: unknown).
fn standby_sample(sample: Option<replica::Replayed>, head: Option<i64>) -> StandbySample {
    StandbySample {
        up: sample.is_some_and(|s| s.in_recovery),
        lag_seconds: sample.and_then(|s| s.lag_seconds),
        lag_sequences: sample.zip(head).map(|(s, head)| head - s.last_sequence),
    }
}

/// The read on `standby`, if it proves it has replayed `cut` (`None`: it has not). A standby
/// that fails is passed over until the probe finds it well again.
async fn on_standby<T, F>(
    standby: &Standby,
    ledger: ledger_core::ledger::LedgerId,
    cut: Cut,
    read: &F,
) -> Result<Option<(AppliedAsOf, T)>, LedgerError>
where
    F: for<'a> Fn(&'a Conn, &'a AppliedAsOf) -> ReadFuture<'a, T> + Sync,
    T: Send,
{
    let passed_over = |e: storage::StorageError| {
        standby.usable.store(false, Ordering::Relaxed);
        e.into_ledger_error()
    };
    let client = standby
        .pool
        .pool
        .get()
        .await
        .map_err(|e| passed_over(e.into()))?;
    let at = match cut {
        Cut::Requested(as_of) => storage::read::resolve_replayed(&client, ledger, as_of)
            .await
            .map_err(passed_over)?,
        Cut::Applied(at) => {
            let replayed = replica::replayed_sequence(&client, ledger)
                .await
                .map_err(passed_over)?;
            (replayed >= at.sequence as i64).then_some(at)
        }
    };
    let Some(at) = at else { return Ok(None) };
    match read(&client, &at).await {
        Ok(answer) => Ok(Some((at, answer))),
        // Any other refusal the primary gives as well, when it answers in the standby's place.
        Err(e) => {
            if e.reason == Reason::StorageUnavailable {
                standby.usable.store(false, Ordering::Relaxed);
            }
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standby_is_up_only_in_recovery_and_lags_by_the_primarys_head_less_its_copy() {
        let replayed = |in_recovery| replica::Replayed {
            last_sequence: 7,
            in_recovery,
            lag_seconds: Some(1.5),
        };
        let s = standby_sample(Some(replayed(true)), Some(10));
        assert_eq!(
            s,
            StandbySample {
                up: true,
                lag_seconds: Some(1.5),
                lag_sequences: Some(3)
            }
        );
        assert!(!standby_sample(Some(replayed(false)), Some(10)).up);
        assert_eq!(
            standby_sample(Some(replayed(true)), None).lag_sequences,
            None
        );
        assert_eq!(standby_sample(None, Some(10)), StandbySample::default());
    }
}
