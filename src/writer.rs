//! The writer task: one per process, it takes whatever requests are queued (up to
//! [`MAX_BATCH`]) and runs them as one batch, load → decide → write: storage loads the
//! batch's snapshot ([`crate::storage::batch::load`]), the pure
//! [`crate::domain::write::decide`] turns it into a plan, storage writes the plan and commits
//! ([`crate::storage::batch::write`]); then every caller is answered. It never waits on a
//! timer: a short queue makes a small batch, and under load batches grow by themselves
//! (group commit).

use crate::domain::account::AccountCache;
use crate::domain::write::{decide, Outcome, WriteRequest};
use crate::domain::LedgerError;
use crate::storage::batch;
use crate::storage::{Pool, StorageError};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use tokio::sync::{mpsc, oneshot};

/// Requests applied in one transaction, at most (limit MAX_BATCH, by default): a batch's
/// arrays and its statements stay small enough to plan and send quickly.
pub const MAX_BATCH: usize = 1000;
/// Requests waiting for the writer, at most (limit MAX_WRITE_QUEUE, by default); beyond it
/// callers get `UNAVAILABLE`.
pub const MAX_WRITE_QUEUE: usize = 20_000;
/// Batches in flight at once, each on its own connection. The ledger's advisory lock still
/// applies them one at a time; a second lane has its next batch formed, sent and queued on the
/// lock while the first commits, so the lock passes from batch to batch without a round trip.
pub const WRITER_LANES: usize = 2;
/// Requests that must be waiting before a lane other than the first takes a batch (limit
/// EXTRA_LANE_MIN_QUEUE). Under light load one lane keeps batches whole and latency low; a
/// second lane only pays off once the queue is deep.
pub const EXTRA_LANE_MIN_QUEUE: usize = 64;
/// Longest a batch may take before the writer gives up on it and its connection (limit
/// BATCH_TIMEOUT): its callers are told `UNAVAILABLE` (the outcome is unknown; their retry
/// settles it), and the connection is closed, never returned to the pool.
pub const BATCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

// A full batch can always be queued whole.
const _: () = assert!(MAX_BATCH <= MAX_WRITE_QUEUE);

/// The writer's knobs (part of `crate::tuning::Tuning`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriterTuning {
    /// Batches in flight at once (`WRITER_LANES` by default).
    pub lanes: usize,
    /// Requests per batch at most (`MAX_BATCH`).
    pub batch_max: usize,
    /// Requests queued at most (`MAX_WRITE_QUEUE`).
    pub queue_max: usize,
    /// Longest a batch may take (`BATCH_TIMEOUT`).
    pub batch_timeout: std::time::Duration,
}

impl Default for WriterTuning {
    fn default() -> Self {
        WriterTuning {
            lanes: WRITER_LANES,
            batch_max: MAX_BATCH,
            queue_max: MAX_WRITE_QUEUE,
            batch_timeout: BATCH_TIMEOUT,
        }
    }
}

impl WriterTuning {
    /// Knobs that could not work are refused by name.
    pub fn check(&self) -> Result<(), String> {
        if self.lanes == 0 || self.batch_max == 0 || self.batch_timeout.is_zero() {
            return Err("WRITER_LANES, MAX_BATCH and BATCH_TIMEOUT must be above zero".into());
        }
        if self.batch_max > self.queue_max {
            return Err(format!(
                "MAX_BATCH ({}) must not be above MAX_WRITE_QUEUE ({})",
                self.batch_max, self.queue_max
            ));
        }
        Ok(())
    }
}

struct Job {
    request: WriteRequest,
    reply: oneshot::Sender<Outcome>,
}

/// A handle to submit requests to the writer task.
#[derive(Clone)]
pub struct Writer {
    queue: mpsc::Sender<Job>,
    queue_max: usize,
    /// Wakes the extra lanes when the queue is deep.
    deep: Arc<tokio::sync::Notify>,
}

/// Observes batches (metrics); called after each batch with its size and outcome.
pub type BatchObserver = Arc<dyn Fn(usize, bool) + Send + Sync>;

impl Writer {
    /// Starts the writer task on the current runtime. It ends when every handle is dropped.
    pub fn spawn(
        pool: Pool,
        accounts: Arc<RwLock<AccountCache>>,
        observer: Option<BatchObserver>,
        tuning: WriterTuning,
    ) -> Writer {
        let (tx, rx) = mpsc::channel(tuning.queue_max);
        let queue = Arc::new(tokio::sync::Mutex::new(rx));
        let deep = Arc::new(tokio::sync::Notify::new());
        for lane in 0..tuning.lanes.max(1) {
            let lane = Lane {
                pool: pool.clone(),
                queue: queue.clone(),
                accounts: accounts.clone(),
                observer: observer.clone(),
                gate: (lane > 0).then(|| deep.clone()),
                tuning,
            };
            tokio::spawn(lane.run());
        }
        Writer {
            queue: tx,
            queue_max: tuning.queue_max,
            deep,
        }
    }

    /// Submits one request and waits for its decision.
    pub async fn submit(&self, caller: String, command: crate::domain::write::Command) -> Outcome {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            request: WriteRequest { caller, command },
            reply,
        };
        self.queue.try_send(job).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => LedgerError::unavailable(format!(
                "the write queue is full ({} requests, limit MAX_WRITE_QUEUE)",
                self.queue_max
            )),
            mpsc::error::TrySendError::Closed(_) => {
                LedgerError::unavailable("the writer has stopped")
            }
        })?;
        if self.queue.max_capacity() - self.queue.capacity() >= EXTRA_LANE_MIN_QUEUE {
            self.deep.notify_one();
        }
        answer
            .await
            .map_err(|_| LedgerError::unavailable("the writer stopped before answering"))?
    }
}

/// The shared queue the lanes take batches from.
type Queue = Arc<tokio::sync::Mutex<mpsc::Receiver<Job>>>;

/// One lane: its share of the writer's context.
struct Lane {
    pool: Pool,
    queue: Queue,
    accounts: Arc<RwLock<AccountCache>>,
    observer: Option<BatchObserver>,
    /// Extra lanes wait on it for a deep queue.
    gate: Option<Arc<tokio::sync::Notify>>,
    tuning: WriterTuning,
}

impl Lane {
    /// Takes what is queued (waiting for the first request, never on a timer), applies it,
    /// answers, and repeats until every handle is dropped.
    async fn run(self) {
        let mut requests: Vec<WriteRequest> = Vec::with_capacity(self.tuning.batch_max);
        let mut replies: Vec<oneshot::Sender<Outcome>> = Vec::with_capacity(self.tuning.batch_max);
        // The lane keeps its connection between batches (its prepared statements stay cached,
        // and no pool check per batch); after a failed batch it takes a fresh one.
        let mut conn: Option<crate::storage::Conn> = None;
        loop {
            if !self.take(&mut requests, &mut replies).await {
                return;
            }
            if requests.is_empty() {
                continue;
            }
            let result = self.apply_on(&mut conn, &requests).await;
            if let Some(o) = &self.observer {
                o(requests.len(), result.is_ok());
            }
            requests.clear();
            answer(&mut replies, result);
        }
    }

    /// Takes up to `batch_max` jobs (waiting for the first), leaving out callers that gave up
    /// (deadline, cancel) before the write. An extra lane (with a gate) takes a batch only
    /// while the queue is deep. `false` once every handle is dropped.
    async fn take(
        &self,
        requests: &mut Vec<WriteRequest>,
        replies: &mut Vec<oneshot::Sender<Outcome>>,
    ) -> bool {
        let mut rx = self.queue.lock().await;
        if let Some(gate) = &self.gate {
            while rx.len() < EXTRA_LANE_MIN_QUEUE {
                drop(rx);
                gate.notified().await;
                rx = self.queue.lock().await;
            }
        }
        let mut keep = |job: Job| {
            if !job.reply.is_closed() {
                requests.push(job.request);
                replies.push(job.reply);
            }
        };
        match rx.recv().await {
            Some(job) => keep(job),
            None => return false,
        }
        // Up to batch_max requests taken from the queue (callers that gave up count too).
        for _ in 1..self.tuning.batch_max {
            match rx.try_recv() {
                Ok(job) => keep(job),
                Err(_) => break,
            }
        }
        true
    }

    /// Applies a batch on the lane's connection (a fresh one from the pool when it has none),
    /// at most `batch_timeout`: after a failure or the timeout the connection is not kept (its
    /// state is unknown) and, on the timeout, closed rather than returned to the pool.
    async fn apply_on(
        &self,
        conn: &mut Option<crate::storage::Conn>,
        requests: &[WriteRequest],
    ) -> Result<Vec<Outcome>, StorageError> {
        let client = match conn.take() {
            Some(c) => c,
            None => self.pool.get().await?,
        };
        let limit = self.tuning.batch_timeout;
        match tokio::time::timeout(limit, apply(&client, requests, &self.accounts)).await {
            Ok(r) => {
                if r.is_ok() {
                    *conn = Some(client);
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

/// Answers every caller: its outcome after the commit, or `UNAVAILABLE` when the batch failed
/// (nothing of it may be assumed; the caller's retry with its key settles it).
fn answer(replies: &mut Vec<oneshot::Sender<Outcome>>, result: Result<Vec<Outcome>, StorageError>) {
    match result {
        Ok(outcomes) => {
            assert_eq!(outcomes.len(), replies.len(), "one outcome per request");
            for (reply, outcome) in replies.drain(..).zip(outcomes) {
                let _ = reply.send(outcome);
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, batch = replies.len(), "write batch failed; callers told UNAVAILABLE");
            for reply in replies.drain(..) {
                let _ = reply.send(Err(LedgerError::unavailable(&e)));
            }
        }
    }
}

/// One batch, load → decide → write, on a connection: one outcome per request, in order, only
/// after the commit. Requests that touch rows breaking an invariant are refused
/// (`JOURNAL_CORRUPT`) and the batch runs again without them, since its transaction claimed
/// their keys; each round refuses at least one, so this ends. Any error means nothing of the
/// batch may be assumed: every caller must be told `UNAVAILABLE`.
pub async fn apply(
    client: &crate::storage::Conn,
    requests: &[WriteRequest],
    accounts: &RwLock<AccountCache>,
) -> Result<Vec<Outcome>, StorageError> {
    let mut refused: HashMap<usize, LedgerError> = HashMap::new();
    loop {
        let live: Vec<usize> = (0..requests.len())
            .filter(|i| !refused.contains_key(i))
            .collect();
        if live.is_empty() {
            return Ok(merge(requests.len(), Vec::new(), &live, refused));
        }
        let batch: std::borrow::Cow<[WriteRequest]> = if refused.is_empty() {
            std::borrow::Cow::Borrowed(requests)
        } else {
            live.iter().map(|&i| requests[i].clone()).collect()
        };
        let ids: Vec<uuid::Uuid> = batch.iter().map(|_| uuid::Uuid::now_v7()).collect();
        let plan = match round(client, &batch, &ids, accounts).await {
            Ok(p) => p,
            Err(e) => {
                batch::rollback(client).await;
                return Err(e);
            }
        };
        if plan.unbound.is_empty() {
            return Ok(merge(requests.len(), plan.outcomes, &live, refused));
        }
        batch::rollback(client).await;
        refused.extend(plan.unbound.into_iter().map(|(j, e)| (live[j], e)));
    }
}

/// [`apply`] with an account cache of its own, for tools and tests that write a batch
/// directly.
pub async fn apply_alone(
    client: &crate::storage::Conn,
    requests: &[WriteRequest],
) -> Result<Vec<Outcome>, StorageError> {
    apply(client, requests, &RwLock::new(AccountCache::default())).await
}

/// One round: load the snapshot, decide, and write the plan unless it refused requests
/// unbound (then the caller rolls back and runs again without them).
async fn round(
    client: &crate::storage::Conn,
    requests: &[WriteRequest],
    ids: &[uuid::Uuid],
    accounts: &RwLock<AccountCache>,
) -> Result<crate::domain::write::Plan, StorageError> {
    let snapshot = batch::load(client, requests, accounts).await?;
    let plan = decide(&snapshot, requests, ids);
    if plan.unbound.is_empty() {
        batch::write(client, &plan, &snapshot.clock).await?;
    }
    Ok(plan)
}

/// The outcomes of the `live` requests (in order) and of the `refused` ones, by index.
fn merge(
    n: usize,
    outcomes: Vec<Outcome>,
    live: &[usize],
    mut refused: HashMap<usize, LedgerError>,
) -> Vec<Outcome> {
    assert_eq!(outcomes.len(), live.len(), "one outcome per live request");
    let mut by_index: HashMap<usize, Outcome> = live.iter().copied().zip(outcomes).collect();
    (0..n)
        .map(|i| match refused.remove(&i) {
            Some(e) => Err(e),
            None => by_index.remove(&i).expect("an outcome for every request"),
        })
        .collect()
}
