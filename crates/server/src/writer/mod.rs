//! The writer task: one per process, it takes whatever requests are queued (up to
//! [`MAX_BATCH`]) and runs them as one batch: the postings they name are read and the requests
//! admitted against them ([`ledger_core::write::admit`]), then the batch's rounds
//! ([`ledger_core::write::Rounds`]), load → decide → write: storage loads the snapshot
//! ([`crate::storage::batch::load`]), the pure [`ledger_core::write::decide`] turns it into a
//! plan, storage writes the plan and commits ([`crate::storage::batch::write`]); then every
//! caller is answered. It never waits on a
//! timer: a short queue makes a small batch, and under load batches grow by themselves
//! (group commit).
//!
//! A `PostBatch` call's requests travel as one job: admitted to the queue together or not at
//! all, taken by one lane together and decided in one batch, in their order (so each is
//! decided as if the caller had sent them one by one); other callers' jobs may share that
//! batch.

use crate::storage::{self, batch};
use crate::storage::{Pool, StorageError};
use ledger_core::account::AccountCache;
use ledger_core::hold::CaptureRequest;
use ledger_core::ledger::LedgerId;
use ledger_core::write::{
    admit, decide, named_by, Outcome, PendingCapture, Queued, Rounds, WriteRequest,
};
use ledger_core::Account;
use ledger_core::LedgerError;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use tokio::sync::{mpsc, oneshot, Semaphore, TryAcquireError};

/// Requests applied in one transaction, at most (limit MAX_BATCH, by default): a batch's
/// arrays and its statements stay small enough to plan and send quickly. A lane gathers jobs
/// up to it; one job larger than it alone (a `PostBatch` call, when MAX_BATCH is set below
/// `MAX_BATCH_REQUESTS`) is applied whole, never split, so that its requests are decided in
/// order in one transaction.
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

/// The answer to a job: an outcome per request, in order, or `UNAVAILABLE` for them all when
/// their batch failed.
type JobReply = oneshot::Sender<Result<Vec<Outcome>, LedgerError>>;

/// What one caller submitted: one request (`Post`, `Void`, `Capture`) or a call's requests
/// (`PostBatch`, an expiry round), which stay together from the queue to the answer.
struct Job {
    ledger: LedgerId,
    requests: Vec<Queued>,
    reply: JobReply,
}

/// A handle to submit requests to the writer task.
#[derive(Clone)]
pub struct Writer {
    queue: mpsc::UnboundedSender<Job>,
    /// Room in the queue, counted in requests (MAX_WRITE_QUEUE bounds requests, not jobs): a
    /// job takes its permits whole when it is queued, a lane gives them back when it takes
    /// the job.
    room: Arc<Semaphore>,
    queue_max: usize,
    /// Wakes the extra lanes when the queue is deep.
    deep: Arc<tokio::sync::Notify>,
}

/// Requests waiting for a lane.
fn queued(room: &Semaphore, queue_max: usize) -> usize {
    queue_max.saturating_sub(room.available_permits())
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
        let (tx, rx) = mpsc::unbounded_channel();
        let queue = Arc::new(tokio::sync::Mutex::new(Inbox { rx, held: None }));
        let room = Arc::new(Semaphore::new(tuning.queue_max));
        let deep = Arc::new(tokio::sync::Notify::new());
        for lane in 0..tuning.lanes.max(1) {
            let lane = Lane {
                pool: pool.clone(),
                queue: queue.clone(),
                room: room.clone(),
                accounts: accounts.clone(),
                observer: observer.clone(),
                gate: (lane > 0).then(|| deep.clone()),
                tuning,
            };
            tokio::spawn(lane.run());
        }
        Writer {
            queue: tx,
            room,
            queue_max: tuning.queue_max,
            deep,
        }
    }

    /// Submits one request and waits for its decision. A void's target must exist, which the
    /// lane checks before the batch (`POSTING_NOT_FOUND`, binding nothing).
    pub async fn submit(
        &self,
        ledger: LedgerId,
        caller: String,
        command: ledger_core::write::Command,
    ) -> Outcome {
        self.submit_one(ledger, Queued::Ready(WriteRequest { caller, command }))
            .await
    }

    /// Submits a capture of hold `hold` (its shape checked, its legs' accounts found) and
    /// waits for its decision: the lane checks it against the hold's terms before the batch
    /// ([`CaptureRequest::validate`]; its refusals bind nothing), `decide` against the hold's
    /// state.
    pub async fn submit_capture(
        &self,
        ledger: LedgerId,
        caller: String,
        hold: uuid::Uuid,
        request: CaptureRequest,
        accounts: HashMap<String, Account>,
    ) -> Outcome {
        self.submit_one(
            ledger,
            Queued::Capture(Box::new(PendingCapture {
                caller,
                hold,
                request,
                accounts,
            })),
        )
        .await
    }

    async fn submit_one(&self, ledger: LedgerId, request: Queued) -> Outcome {
        let mut outcomes = self.enqueue(ledger, vec![request]).await?;
        outcomes.pop().expect("one outcome for one request")
    }

    /// Submits a call's requests together (queued whole or refused whole, decided in one
    /// batch in this order) and waits for their decisions: one outcome per request, or
    /// `UNAVAILABLE` when they could not be queued or their batch failed (nothing of them
    /// may then be assumed).
    pub async fn submit_all(
        &self,
        ledger: LedgerId,
        caller: &str,
        commands: Vec<ledger_core::write::Command>,
    ) -> Result<Vec<Outcome>, LedgerError> {
        if commands.is_empty() {
            return Ok(Vec::new());
        }
        let requests = commands
            .into_iter()
            .map(|command| {
                Queued::Ready(WriteRequest {
                    caller: caller.to_owned(),
                    command,
                })
            })
            .collect();
        self.enqueue(ledger, requests).await
    }

    /// Queues one job if the queue has room for all its requests, and waits for its answer.
    async fn enqueue(
        &self,
        ledger: LedgerId,
        requests: Vec<Queued>,
    ) -> Result<Vec<Outcome>, LedgerError> {
        let n = requests.len();
        let admitted = u32::try_from(n)
            .map_err(|_| TryAcquireError::NoPermits)
            .and_then(|p| self.room.try_acquire_many(p));
        match admitted {
            Ok(permits) => permits.forget(),
            Err(_) => return Err(self.full(n)),
        }
        let (reply, answer) = oneshot::channel();
        if self
            .queue
            .send(Job {
                ledger,
                requests,
                reply,
            })
            .is_err()
        {
            self.room.add_permits(n);
            return Err(LedgerError::unavailable("the writer has stopped"));
        }
        if queued(&self.room, self.queue_max) >= EXTRA_LANE_MIN_QUEUE {
            self.deep.notify_one();
        }
        answer
            .await
            .map_err(|_| LedgerError::unavailable("the writer stopped before answering"))?
    }

    /// Why `n` requests could not be queued (nothing of them was).
    fn full(&self, n: usize) -> LedgerError {
        let max = self.queue_max;
        if n > max {
            return LedgerError::unavailable(format!(
                "the call's {n} requests can never fit the write queue ({max} requests, limit MAX_WRITE_QUEUE); nothing was queued"
            ));
        }
        let free = self.room.available_permits();
        let message = if n == 1 {
            format!("the write queue is full ({max} requests, limit MAX_WRITE_QUEUE)")
        } else {
            format!(
                "the write queue is full: room for {free} of the call's {n} requests ({max} at most, limit MAX_WRITE_QUEUE); nothing was queued, retry the whole call"
            )
        };
        LedgerError::unavailable(message)
    }
}

/// The shared queue the lanes take batches from, and the job a lane received but left for
/// the next batch (it would have passed `batch_max`).
struct Inbox {
    rx: mpsc::UnboundedReceiver<Job>,
    held: Option<Job>,
}

type Queue = Arc<tokio::sync::Mutex<Inbox>>;

/// One lane: its share of the writer's context.
struct Lane {
    pool: Pool,
    queue: Queue,
    /// The queue's room (given back as jobs are taken).
    room: Arc<Semaphore>,
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
        let mut requests: Vec<Queued> = Vec::with_capacity(self.tuning.batch_max);
        let mut replies: Vec<(JobReply, usize)> = Vec::with_capacity(self.tuning.batch_max);
        // The lane keeps its connection between batches (its prepared statements stay cached,
        // and no pool check per batch); after a failed batch it takes a fresh one.
        let mut conn: Option<crate::storage::Conn> = None;
        loop {
            let Some(ledger) = self.take(&mut requests, &mut replies).await else {
                return;
            };
            if requests.is_empty() {
                continue;
            }
            let n = requests.len();
            let result = self
                .apply_on(&mut conn, ledger, std::mem::take(&mut requests))
                .await;
            if let Some(o) = &self.observer {
                o(n, result.is_ok());
            }
            answer(&mut replies, result);
        }
    }

    /// Takes jobs of up to `batch_max` requests in all (waiting for the first; a first job
    /// larger than that alone is taken whole), leaving out callers that gave up (deadline,
    /// cancel) before the write. A job that would pass `batch_max` is held for the next batch.
    /// An extra lane (with a gate) takes a batch only while the queue is deep. `false` once
    /// every handle is dropped. The batch's jobs are of one ledger (the first job's, which
    /// is returned); `None` once every handle is dropped.
    async fn take(
        &self,
        requests: &mut Vec<Queued>,
        replies: &mut Vec<(JobReply, usize)>,
    ) -> Option<LedgerId> {
        let mut inbox = self.queue.lock().await;
        if let Some(gate) = &self.gate {
            while queued(&self.room, self.tuning.queue_max) < EXTRA_LANE_MIN_QUEUE {
                drop(inbox);
                gate.notified().await;
                inbox = self.queue.lock().await;
            }
        }
        let first = match inbox.held.take() {
            Some(job) => job,
            None => inbox.rx.recv().await?,
        };
        // Requests taken from the queue (callers that gave up count too).
        let mut taken = first.requests.len();
        let ledger = first.ledger;
        self.keep(first, requests, replies);
        while taken < self.tuning.batch_max {
            let Ok(job) = inbox.rx.try_recv() else { break };
            if job.ledger != ledger || taken + job.requests.len() > self.tuning.batch_max {
                inbox.held = Some(job);
                break;
            }
            taken += job.requests.len();
            self.keep(job, requests, replies);
        }
        Some(ledger)
    }

    /// A job taken from the queue: its room is given back, and its requests join the batch
    /// unless its caller gave up.
    fn keep(&self, job: Job, requests: &mut Vec<Queued>, replies: &mut Vec<(JobReply, usize)>) {
        self.room.add_permits(job.requests.len());
        if !job.reply.is_closed() {
            replies.push((job.reply, job.requests.len()));
            requests.extend(job.requests);
        }
    }

    /// Applies a batch on the lane's connection (a fresh one from the pool when it has none),
    /// at most `batch_timeout`: after a failure or the timeout the connection is not kept (its
    /// state is unknown) and, on the timeout, closed rather than returned to the pool.
    async fn apply_on(
        &self,
        conn: &mut Option<crate::storage::Conn>,
        ledger: LedgerId,
        requests: Vec<Queued>,
    ) -> Result<Vec<Outcome>, StorageError> {
        let client = match conn.take() {
            Some(c) => c,
            None => self.pool.get().await?,
        };
        let limit = self.tuning.batch_timeout;
        let applied = apply_checked(&client, ledger, requests, &self.accounts);
        match tokio::time::timeout(limit, applied).await {
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
            for (reply, _) in replies.drain(..) {
                let _ = reply.send(Err(LedgerError::unavailable(&e)));
            }
        }
    }
}

/// One batch on a connection: the postings its requests name read (outside the transaction:
/// they never change once recorded) and the requests admitted against them, then its rounds,
/// load → decide → write, until a plan refuses nothing unbound: one outcome per request, in
/// order, only after the commit. Any error means nothing of the batch may be assumed: every
/// caller must be told `UNAVAILABLE`.
async fn apply_checked(
    client: &crate::storage::Conn,
    ledger: LedgerId,
    queued: Vec<Queued>,
    accounts: &RwLock<AccountCache>,
) -> Result<Vec<Outcome>, StorageError> {
    let named = storage::read::named_postings(client, ledger, &named_by(&queued), accounts).await?;
    let mut rounds = Rounds::new(admit(queued, &named));
    loop {
        let (plan, clock) = {
            let Some(batch) = rounds.batch() else {
                return Ok(rounds.outcomes(Vec::new()));
            };
            let ids: Vec<uuid::Uuid> = batch.iter().map(|_| uuid::Uuid::now_v7()).collect();
            let snapshot = match batch::load(client, ledger, &batch, accounts, &named).await {
                Ok(s) => s,
                Err(e) => {
                    batch::rollback(client).await;
                    return Err(e);
                }
            };
            (decide(&snapshot, &batch, &ids), snapshot.clock)
        };
        let Some(plan) = rounds.decided(plan) else {
            batch::rollback(client).await;
            continue;
        };
        if let Err(e) = batch::write(client, &plan, &clock).await {
            batch::rollback(client).await;
            return Err(e);
        }
        return Ok(rounds.outcomes(plan.outcomes));
    }
}

/// A batch as a lane applies it (admitted, then its rounds), with an
/// account cache of its own, for tools and tests that write a batch directly.
pub async fn apply_alone(
    client: &crate::storage::Conn,
    ledger: LedgerId,
    requests: &[WriteRequest],
) -> Result<Vec<Outcome>, StorageError> {
    let queued = requests.iter().cloned().map(Queued::Ready).collect();
    apply_checked(
        client,
        ledger,
        queued,
        &RwLock::new(AccountCache::default()),
    )
    .await
}
