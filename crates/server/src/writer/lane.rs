//! The lanes: tokio tasks started on demand by the [`Sched`]uler (never more than
//! `max_lanes`), each looping take → apply → answer on a pooled connection it keeps between
//! batches, whatever ledger the batch is of. A lane that finds nothing waits on its own bell,
//! at most `lane_idle`; then it ends and its connection goes back to the pool.

use super::sched::{Batch, Next, Sched, Wake};
use super::{apply_checked, BatchObserver, WriterTuning};
use crate::storage::batch::WindowMemo;
use crate::storage::clusters::Clusters;
use crate::storage::{Conn, StorageError};
use ledger_core::account::AccountCache;
use ledger_core::ledger::LedgerId;
use ledger_core::write::{Outcome, Queued};
use ledger_core::LedgerError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use tokio::sync::{oneshot, Notify};

/// The answer to a job: an outcome per request, in order, or `UNAVAILABLE` for them all when
/// their batch failed.
pub(super) type JobReply = oneshot::Sender<Result<Vec<Outcome>, LedgerError>>;

/// What one caller submitted: one request (`Post`, `Void`, `Capture`) or a call's requests
/// (`PostBatch`, an expiry round), which stay together from the queue to the answer.
pub(super) struct Job {
    pub requests: Vec<Queued>,
    pub reply: JobReply,
}

/// An idle lane's bell: the scheduler hands it back to be rung when there is work.
#[derive(Clone, Default)]
pub(super) struct Bell(Arc<Notify>);

impl PartialEq for Bell {
    fn eq(&self, other: &Bell) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// What the handles and the lanes share.
pub(super) struct Shared {
    sched: Mutex<Sched<Job, Bell>>,
    /// The pools by cluster and which cluster holds each ledger.
    clusters: Arc<Clusters>,
    accounts: Arc<RwLock<AccountCache>>,
    /// Per ledger, what its lanes remember of its debit windows (`storage::batch::memo`).
    windows: Mutex<HashMap<LedgerId, Arc<Mutex<WindowMemo>>>>,
    observer: Option<BatchObserver>,
    tuning: WriterTuning,
}

impl Shared {
    pub fn new(
        clusters: Arc<Clusters>,
        accounts: Arc<RwLock<AccountCache>>,
        observer: Option<BatchObserver>,
        tuning: WriterTuning,
    ) -> Shared {
        Shared {
            sched: Mutex::new(Sched::new(tuning.limits())),
            clusters,
            accounts,
            windows: Mutex::default(),
            observer,
            tuning,
        }
    }

    /// Requests queued at most, over all ledgers.
    pub fn queue_max(&self) -> usize {
        self.tuning.queue_max
    }

    /// The scheduler, held only for its plain methods (never across an await). A lane that
    /// panicked left it as its last method did: every method leaves it whole.
    pub fn sched(&self) -> MutexGuard<'_, Sched<Job, Bell>> {
        self.sched.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Does what the scheduler answered: rings idle lanes, starts new ones.
    pub fn ring(self: &Arc<Self>, wakes: Vec<Wake<Bell>>) {
        for wake in wakes {
            match wake {
                Wake::Lane(bell) => bell.0.notify_one(),
                Wake::Spawn => {
                    tokio::spawn(run(self.clone()));
                }
            }
        }
    }

    /// Every handle is gone: idle lanes are rung, to end once nothing is left.
    pub fn close(&self) {
        let bells = self.sched().close();
        for bell in bells {
            bell.0.notify_one();
        }
    }
}

/// One lane, from its start (it was woken: the scheduler counted it) to its end.
async fn run(shared: Arc<Shared>) {
    let bell = Bell::default();
    // The lane keeps its connection between batches (its prepared statements stay cached,
    // and no pool check per batch), with the cluster it is to; after a failed batch, or for
    // a ledger on another cluster, it takes a fresh one.
    let mut conn: Option<(String, Conn)> = None;
    let mut done: Option<LedgerId> = None;
    let mut woken = true;
    loop {
        let (next, wakes) = {
            let mut s = shared.sched();
            let next = s.next(done.take(), woken, bell.clone());
            (next, s.wakes())
        };
        shared.ring(wakes);
        woken = false;
        match next {
            Next::Apply(batch) => {
                done = Some(batch.ledger);
                shared.apply(&mut conn, batch).await;
            }
            Next::Wait => {
                if !shared.wait(&bell).await {
                    return;
                }
                woken = true;
            }
            Next::End => return,
        }
    }
}

impl Shared {
    /// Waits for the bell, at most `lane_idle`: `false` when nothing came (the lane ends).
    async fn wait(&self, bell: &Bell) -> bool {
        let rung = tokio::time::timeout(self.tuning.lane_idle, bell.0.notified()).await;
        if rung.is_ok() {
            return true;
        }
        if self.sched().retire(bell) {
            return false;
        }
        // Rung as the wait ended: the ring is on its way (or stored), take it.
        bell.0.notified().await;
        true
    }

    /// Applies a batch, leaving out callers that gave up (deadline, cancel) before the write,
    /// and answers the others.
    async fn apply(&self, conn: &mut Option<(String, Conn)>, batch: Batch<Job>) {
        let mut requests = Vec::with_capacity(batch.requests);
        let mut replies = Vec::with_capacity(batch.jobs.len());
        for job in batch.jobs {
            if !job.reply.is_closed() {
                replies.push((job.reply, job.requests.len()));
                requests.extend(job.requests);
            }
        }
        if requests.is_empty() {
            return;
        }
        let n = requests.len();
        let result = self.apply_on(conn, batch.ledger, requests).await;
        if let Some(o) = &self.observer {
            o(n, result.is_ok());
        }
        answer(&mut replies, result);
    }

    /// What the lanes remember of `ledger`'s debit windows.
    fn windows_of(&self, ledger: LedgerId) -> Arc<Mutex<WindowMemo>> {
        let mut all = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
        all.entry(ledger).or_default().clone()
    }

    /// Applies a batch on the lane's connection (a fresh one from the pool when it has none),
    /// at most `batch_timeout`: after a failure or the timeout the connection is not kept (its
    /// state is unknown) and, on the timeout, closed rather than returned to the pool.
    async fn apply_on(
        &self,
        conn: &mut Option<(String, Conn)>,
        ledger: LedgerId,
        requests: Vec<Queued>,
    ) -> Result<Vec<Outcome>, StorageError> {
        let cluster = self.clusters.cluster_of(ledger);
        let client = match conn.take() {
            Some((c, client)) if c == cluster => client,
            _ => match self.clusters.named(&cluster) {
                Some(pool) => pool.get().await?,
                None => {
                    return Err(StorageError::Pool(format!(
                        "ledger {ledger} is on the cluster {cluster:?}, which this server was not started with"
                    )))
                }
            },
        };
        let limit = self.tuning.batch_timeout;
        let windows = self.windows_of(ledger);
        let applied = apply_checked(&client, ledger, requests, (&self.accounts, &windows));
        match tokio::time::timeout(limit, applied).await {
            Ok(r) => {
                if r.is_ok() {
                    *conn = Some((cluster, client));
                }
                r
            }
            Err(_) => {
                crate::storage::discard(client);
                Err(StorageError::Pool(format!(
                    "the write batch took longer than {limit:?} (limit BATCH_TIMEOUT)"
                )))
            }
        }
    }
}

/// Answers every caller: its outcomes after the commit, or `UNAVAILABLE` when the batch failed
/// (nothing of it may be assumed; the caller's retry with its keys settles it).
fn answer(replies: &mut Vec<(JobReply, usize)>, result: Result<Vec<Outcome>, StorageError>) {
    match result {
        Ok(outcomes) => {
            let expected: usize = replies.iter().map(|(_, n)| n).sum();
            assert_eq!(outcomes.len(), expected, "one outcome per request");
            let mut outcomes = outcomes.into_iter();
            for (reply, n) in replies.drain(..) {
                let _ = reply.send(Ok(outcomes.by_ref().take(n).collect()));
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, batch = replies.len(), "write batch failed; callers told UNAVAILABLE");
            // A fenced ledger says so (LEDGER_MOVING); anything else is an unknown outcome.
            let error = match e {
                StorageError::Moving { .. } => e.into_ledger_error(),
                e => LedgerError::unavailable(&e),
            };
            for (reply, _) in replies.drain(..) {
                let _ = reply.send(Err(error.clone()));
            }
        }
    }
}
