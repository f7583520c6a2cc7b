//! The writer task: one per process, it takes whatever requests are queued (up to
//! [`MAX_BATCH`]), applies them in one transaction through [`crate::storage::batch`], commits once,
//! then answers each caller. It never waits on a timer: a short queue makes a small batch,
//! and under load batches grow by themselves (group commit).

use crate::domain::LedgerError;
use crate::storage::batch::{self, Command, Outcome, WriteRequest};
use crate::storage::{Pool, StorageError};
use tokio::sync::{mpsc, oneshot};

/// Requests applied in one transaction, at most.
pub const MAX_BATCH: usize = 1000;
/// Requests waiting for the writer, at most; beyond it callers get `UNAVAILABLE`.
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

struct Job {
    request: WriteRequest,
    reply: oneshot::Sender<Outcome>,
}

/// A handle to submit requests to the writer task.
#[derive(Clone)]
pub struct Writer {
    queue: mpsc::Sender<Job>,
    /// Wakes the extra lanes when the queue is deep.
    deep: std::sync::Arc<tokio::sync::Notify>,
}

/// Observes batches (metrics); called after each batch with its size and outcome.
pub type BatchObserver = std::sync::Arc<dyn Fn(usize, bool) + Send + Sync>;

impl Writer {
    /// Starts the writer task on the current runtime. It ends when every handle is dropped.
    pub fn spawn(pool: Pool, observer: Option<BatchObserver>) -> Writer {
        let (tx, rx) = mpsc::channel(MAX_WRITE_QUEUE);
        let rx = std::sync::Arc::new(tokio::sync::Mutex::new(rx));
        let lanes = std::env::var("LEDGER_WRITER_LANES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(WRITER_LANES);
        let deep = std::sync::Arc::new(tokio::sync::Notify::new());
        for lane in 0..lanes.max(1) {
            let gate = (lane > 0).then(|| deep.clone());
            tokio::spawn(run(pool.clone(), rx.clone(), observer.clone(), gate));
        }
        Writer { queue: tx, deep }
    }

    /// Submits one request and waits for its decision.
    pub async fn submit(&self, caller: String, command: Command) -> Outcome {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            request: WriteRequest { caller, command },
            reply,
        };
        self.queue.try_send(job).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => LedgerError::unavailable(format!(
                "the write queue is full ({MAX_WRITE_QUEUE} requests, limit MAX_WRITE_QUEUE)"
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

/// One lane: takes what is queued (waiting for the first request, never on a timer), applies
/// it, answers, and repeats until every handle is dropped.
async fn run(
    pool: Pool,
    rx_shared: std::sync::Arc<tokio::sync::Mutex<mpsc::Receiver<Job>>>,
    observer: Option<BatchObserver>,
    gate: Option<std::sync::Arc<tokio::sync::Notify>>,
) {
    let mut requests: Vec<WriteRequest> = Vec::with_capacity(MAX_BATCH);
    let mut replies: Vec<oneshot::Sender<Outcome>> = Vec::with_capacity(MAX_BATCH);
    // The writer keeps its connection between batches (its prepared statements stay cached,
    // and no pool check per batch); after a failed batch it takes a fresh one.
    let mut conn: Option<deadpool_postgres::Client> = None;
    // Accounts' rules never change: each lane keeps them across batches.
    let mut accounts = batch::AccountCache::default();
    loop {
        {
            let mut rx = rx_shared.lock().await;
            // An extra lane takes a batch only while the queue is deep.
            if let Some(gate) = &gate {
                while rx.len() < EXTRA_LANE_MIN_QUEUE {
                    drop(rx);
                    gate.notified().await;
                    rx = rx_shared.lock().await;
                }
            }
            let mut take = |job: Job| {
                // Callers that gave up (deadline, cancel) are left out before the write.
                if !job.reply.is_closed() {
                    requests.push(job.request);
                    replies.push(job.reply);
                }
            };
            match rx.recv().await {
                Some(job) => take(job),
                None => return,
            }
            // Up to MAX_BATCH requests taken from the queue (callers that gave up count too).
            for _ in 1..MAX_BATCH {
                match rx.try_recv() {
                    Ok(job) => take(job),
                    Err(_) => break,
                }
            }
        }
        if requests.is_empty() {
            continue;
        }
        let client = match conn.take() {
            Some(c) => Ok(c),
            None => pool.get().await.map_err(StorageError::from),
        };
        let result = match client {
            Ok(mut client) => {
                let apply = batch::apply_cached(&mut client, &requests, &mut accounts);
                match tokio::time::timeout(BATCH_TIMEOUT, apply).await {
                    Ok(r) => {
                        if r.is_ok() {
                            conn = Some(client);
                        }
                        r
                    }
                    Err(_) => {
                        // Detach the connection from the pool and close it: its state is unknown.
                        drop(deadpool_postgres::Object::take(client));
                        Err(StorageError::Pool(format!(
                            "the write batch took longer than {BATCH_TIMEOUT:?} (limit BATCH_TIMEOUT)"
                        )))
                    }
                }
            }
            Err(e) => Err(e),
        };
        if let Some(o) = &observer {
            o(requests.len(), result.is_ok());
        }
        requests.clear();
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
}
