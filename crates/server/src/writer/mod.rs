//! The writer: the requests of every ledger, queued per ledger and applied in batches by
//! lanes. A lane takes the next ledger's queued jobs (up to [`MAX_BATCH`] requests, all of one
//! ledger) and runs them as one batch: the postings they name are read and the requests
//! admitted against them ([`ledger_core::write::admit`]), then the batch's rounds
//! ([`ledger_core::write::Rounds`]), load → decide → write: storage loads the snapshot
//! ([`crate::storage::batch::load`]), the pure [`ledger_core::write::decide`] turns it into a
//! plan, storage writes the plan and commits ([`crate::storage::batch::write`]); then every
//! caller is answered. It never waits on a timer: a short queue makes a small batch, and under
//! load batches grow by themselves (group commit).
//!
//! Which ledger a lane serves is the scheduler's ([`sched`], pure): ledgers with queued work
//! take turns (a busy ledger does not starve the others), one ledger has at most
//! [`WRITER_LANES`] lanes at once (the second only while its own queue holds
//! [`EXTRA_LANE_MIN_QUEUE`] requests), and [`MAX_WRITE_QUEUE`] bounds the requests queued over
//! all ledgers. The lanes ([`lane`]) are tasks started when a ledger has work and fewer than
//! [`MAX_WRITER_LANES`] run; each keeps its pooled connection between batches, serves any
//! ledger, and ends after [`LANE_IDLE_TIMEOUT`] with nothing to take.
//!
//! A `PostBatch` call's requests travel as one job: admitted to the queue together or not at
//! all, taken by one lane together and decided in one batch, in their order (so each is
//! decided as if the caller had sent them one by one); other callers' jobs of the same ledger
//! may share that batch.

mod lane;
mod sched;

use crate::storage::batch::{WindowDraft, WindowMemo};
use crate::storage::StorageError;
use crate::storage::{self, batch};
use lane::{Job, Shared};
use ledger_core::account::AccountCache;
use ledger_core::hold::CaptureRequest;
use ledger_core::ledger::LedgerId;
use ledger_core::write::{
    admit, decide, named_by, Outcome, PendingCapture, Queued, Rounds, WriteRequest,
};
use ledger_core::Account;
use ledger_core::LedgerError;
use sched::Refused;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;
use tokio::sync::oneshot;

/// Requests applied in one transaction, at most (limit MAX_BATCH, by default): a batch's
/// arrays and its statements stay small enough to plan and send quickly. A lane gathers jobs
/// of one ledger up to it; one job larger than it alone (a `PostBatch` call, when MAX_BATCH is
/// set below `MAX_BATCH_REQUESTS`) is applied whole, never split, so that its requests are
/// decided in order in one transaction.
pub const MAX_BATCH: usize = 1000;
/// Requests waiting for the writer over all ledgers, at most (limit MAX_WRITE_QUEUE, by
/// default); beyond it callers get `UNAVAILABLE`.
pub const MAX_WRITE_QUEUE: usize = 20_000;
/// Batches of one ledger in flight at once, each on its own lane and connection. The ledger's
/// advisory lock still applies them one at a time; a second lane has its next batch formed,
/// sent and queued on the lock while the first commits, so the lock passes from batch to
/// batch without a round trip.
pub const WRITER_LANES: usize = 2;
/// Requests that must be waiting on a ledger before a lane other than its first takes a batch
/// of it (limit EXTRA_LANE_MIN_QUEUE). Under light load one lane keeps batches whole and
/// latency low; a second lane only pays off once the queue is deep.
pub const EXTRA_LANE_MIN_QUEUE: usize = 64;
/// Lanes running in the process at once, over all ledgers (limit MAX_WRITER_LANES, by
/// default): each holds a pooled connection, so the pool must be larger.
pub const MAX_WRITER_LANES: usize = 4;
/// How long a lane waits with nothing to take before it ends and gives its connection back
/// (limit LANE_IDLE_TIMEOUT, by default).
pub const LANE_IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a batch may take before the writer gives up on it and its connection (limit
/// BATCH_TIMEOUT): its callers are told `UNAVAILABLE` (the outcome is unknown; their retry
/// settles it), and the connection is closed, never returned to the pool.
pub const BATCH_TIMEOUT: Duration = Duration::from_secs(10);

// A full batch can always be queued whole; one ledger's lanes fit the process's.
const _: () = assert!(MAX_BATCH <= MAX_WRITE_QUEUE);
const _: () = assert!(WRITER_LANES <= MAX_WRITER_LANES);

/// The writer's knobs (part of `crate::tuning::Tuning`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriterTuning {
    /// Batches of one ledger in flight at once (`WRITER_LANES` by default).
    pub lanes: usize,
    /// Lanes running in the process at once (`MAX_WRITER_LANES`).
    pub max_lanes: usize,
    /// Requests per batch at most (`MAX_BATCH`).
    pub batch_max: usize,
    /// Requests queued at most, over all ledgers (`MAX_WRITE_QUEUE`).
    pub queue_max: usize,
    /// Longest a batch may take (`BATCH_TIMEOUT`).
    pub batch_timeout: Duration,
    /// How long an idle lane lives (`LANE_IDLE_TIMEOUT`).
    pub lane_idle: Duration,
}

impl Default for WriterTuning {
    fn default() -> Self {
        WriterTuning {
            lanes: WRITER_LANES,
            max_lanes: MAX_WRITER_LANES,
            batch_max: MAX_BATCH,
            queue_max: MAX_WRITE_QUEUE,
            batch_timeout: BATCH_TIMEOUT,
            lane_idle: LANE_IDLE_TIMEOUT,
        }
    }
}

impl WriterTuning {
    /// Knobs that could not work are refused by name.
    pub fn check(&self) -> Result<(), String> {
        let zero = [self.lanes, self.max_lanes, self.batch_max].contains(&0)
            || self.batch_timeout.is_zero()
            || self.lane_idle.is_zero();
        if zero {
            return Err("WRITER_LANES, MAX_WRITER_LANES, MAX_BATCH, BATCH_TIMEOUT and LANE_IDLE_TIMEOUT must be above zero".into());
        }
        if self.lanes > self.max_lanes {
            return Err(format!(
                "WRITER_LANES ({}) must not be above MAX_WRITER_LANES ({}): one ledger's lanes are some of the process's",
                self.lanes, self.max_lanes
            ));
        }
        if self.batch_max > self.queue_max {
            return Err(format!(
                "MAX_BATCH ({}) must not be above MAX_WRITE_QUEUE ({})",
                self.batch_max, self.queue_max
            ));
        }
        Ok(())
    }

    /// The scheduler's bounds.
    fn limits(&self) -> sched::Limits {
        sched::Limits {
            lanes: self.lanes,
            max_lanes: self.max_lanes,
            batch_max: self.batch_max,
            queue_max: self.queue_max,
            extra_min_queue: EXTRA_LANE_MIN_QUEUE,
        }
    }
}

/// A handle to submit requests to the writer. The lanes end once every handle is dropped and
/// the queue is empty.
#[derive(Clone)]
pub struct Writer {
    open: Arc<Open>,
}

/// The writer while a handle exists; its drop (the last handle's) tells the lanes.
struct Open(Arc<Shared>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Observes batches (metrics); called after each batch with its size and outcome.
pub type BatchObserver = Arc<dyn Fn(usize, bool) + Send + Sync>;

impl Writer {
    /// A writer on `clusters` (each ledger's batches on its cluster's pool); its lanes are
    /// started on the current runtime as work comes.
    pub fn spawn(
        clusters: Arc<crate::storage::clusters::Clusters>,
        accounts: Arc<RwLock<AccountCache>>,
        observer: Option<BatchObserver>,
        tuning: WriterTuning,
    ) -> Writer {
        let shared = Shared::new(clusters, accounts, observer, tuning);
        Writer {
            open: Arc::new(Open(Arc::new(shared))),
        }
    }

    /// Lanes running now (started, busy or idle).
    pub fn lanes_running(&self) -> usize {
        self.open.0.sched().running()
    }

    /// Submits one request of `ledger` and waits for its decision. A void's target must
    /// exist, which the lane checks before the batch (`POSTING_NOT_FOUND`, binding nothing).
    pub async fn submit(
        &self,
        ledger: LedgerId,
        caller: String,
        command: ledger_core::write::Command,
    ) -> Outcome {
        self.submit_one(ledger, Queued::Ready(WriteRequest { caller, command }))
            .await
    }

    /// Submits a capture of hold `hold` of `ledger` (its shape checked, its legs' accounts
    /// found) and waits for its decision: the lane checks it against the hold's terms before
    /// the batch ([`CaptureRequest::validate`]; its refusals bind nothing), `decide` against
    /// the hold's state.
    pub async fn submit_capture(
        &self,
        ledger: LedgerId,
        caller: String,
        hold: uuid::Uuid,
        request: CaptureRequest,
        accounts: HashMap<String, Account>,
    ) -> Outcome {
        let capture = PendingCapture {
            caller,
            hold,
            request,
            accounts,
        };
        self.submit_one(ledger, Queued::Capture(Box::new(capture)))
            .await
    }

    async fn submit_one(&self, ledger: LedgerId, request: Queued) -> Outcome {
        let mut outcomes = self.enqueue(ledger, vec![request]).await?;
        outcomes.pop().expect("one outcome for one request")
    }

    /// Submits a call's requests of `ledger` together (queued whole or refused whole, decided
    /// in one batch in this order) and waits for their decisions: one outcome per request, or
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

    /// Queues one job on its ledger if the queue has room for all its requests, and waits for
    /// its answer.
    async fn enqueue(
        &self,
        ledger: LedgerId,
        requests: Vec<Queued>,
    ) -> Result<Vec<Outcome>, LedgerError> {
        let shared = &self.open.0;
        let n = requests.len();
        let (reply, answer) = oneshot::channel();
        let wakes = {
            let mut s = shared.sched();
            if let Err(refused) = s.push(ledger, Job { requests, reply }, n) {
                return Err(full(refused, n, shared.queue_max()));
            }
            s.wakes()
        };
        shared.ring(wakes);
        answer
            .await
            .map_err(|_| LedgerError::unavailable("the writer stopped before answering"))?
    }
}

/// Why `n` requests could not be queued (nothing of them was), the queue holding `max`.
fn full(refused: Refused, n: usize, max: usize) -> LedgerError {
    let message = match refused {
        Refused::Never => format!(
            "the call's {n} requests can never fit the write queue ({max} requests, limit MAX_WRITE_QUEUE); nothing was queued"
        ),
        Refused::Full { .. } if n == 1 => {
            format!("the write queue is full ({max} requests, limit MAX_WRITE_QUEUE)")
        }
        Refused::Full { free } => format!(
            "the write queue is full: room for {free} of the call's {n} requests ({max} at most, limit MAX_WRITE_QUEUE); nothing was queued, retry the whole call"
        ),
    };
    LedgerError::unavailable(message)
}

/// One batch of `ledger` on a connection: the postings its requests name read (outside the transaction:
/// they never change once recorded) and the requests admitted against them, then its rounds,
/// load → decide → write, until a plan refuses nothing unbound: one outcome per request, in
/// order, only after the commit. Any error means nothing of the batch may be assumed: every
/// caller must be told `UNAVAILABLE`.
async fn apply_checked(
    client: &crate::storage::Conn,
    ledger: LedgerId,
    queued: Vec<Queued>,
    (accounts, windows): (&RwLock<AccountCache>, &Mutex<WindowMemo>),
) -> Result<Vec<Outcome>, StorageError> {
    // Storage does not take the ledger yet: every batch is of the default one.
    let named = storage::read::named_postings(client, ledger, &named_by(&queued), accounts).await?;
    let mut rounds = Rounds::new(admit(queued, &named));
    loop {
        let mut draft = WindowDraft::default();
        let (plan, clock) = {
            let Some(batch) = rounds.batch() else {
                return Ok(rounds.outcomes(Vec::new()));
            };
            let ids: Vec<uuid::Uuid> = batch.iter().map(|_| uuid::Uuid::now_v7()).collect();
            let snapshot = match batch::load(
                client,
                ledger,
                &batch,
                accounts,
                &named,
                (windows, &mut draft),
            )
            .await
            {
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
        // The plan's ledger is its clock's (read from that ledger's state row).
        if let Err(e) = batch::write(client, &plan, &clock).await {
            batch::rollback(client).await;
            return Err(e);
        }
        let mut memo = windows.lock().unwrap_or_else(PoisonError::into_inner);
        memo.commit(draft);
        return Ok(rounds.outcomes(plan.outcomes));
    }
}

/// A batch of `ledger` as a lane applies it (admitted, then its rounds), with an account
/// cache of its own, for tools and tests that write a batch directly.
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
        (
            &RwLock::new(AccountCache::default()),
            &Mutex::new(WindowMemo::default()),
        ),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use ledger_core::write::{Command, ValidExpire};

    /// A writer on a database that refuses every connection (nothing listens on port 1):
    /// every batch fails, and its callers are told so.
    fn unreachable(tuning: WriterTuning) -> Writer {
        let pool = crate::storage::pool("postgres://ledger@127.0.0.1:1/ledger", 8).unwrap();
        let clusters = Arc::new(crate::storage::clusters::Clusters::new(pool, Vec::new()));
        Writer::spawn(clusters, Default::default(), None, tuning)
    }

    fn expiry() -> Vec<Command> {
        vec![Command::Expire(ValidExpire::of(uuid::Uuid::now_v7()))]
    }

    /// Calls on ledgers 0..ledgers, `calls` of them at once; each must be told UNAVAILABLE.
    async fn fail_calls(writer: &Writer, calls: i32, ledgers: i32) {
        let calls: Vec<_> = (0..calls)
            .map(|i| {
                let w = writer.clone();
                tokio::spawn(async move { w.submit_all(i % ledgers, "test", expiry()).await })
            })
            .collect();
        for call in calls {
            let e = call.await.unwrap().unwrap_err();
            assert_eq!(e.reason, ledger_core::Reason::StorageUnavailable);
            assert!(writer.lanes_running() <= 3, "MAX_WRITER_LANES");
        }
    }

    #[tokio::test]
    async fn lanes_start_for_work_no_more_than_max_lanes_and_end_after_lane_idle_with_nothing_to_take(
    ) {
        let writer = unreachable(WriterTuning {
            max_lanes: 3,
            lane_idle: Duration::from_millis(200),
            ..Default::default()
        });
        assert_eq!(writer.lanes_running(), 0, "no lane before any work");
        fail_calls(&writer, 40, 6).await;
        assert!((1..=3).contains(&writer.lanes_running()));
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert_eq!(writer.lanes_running(), 0, "idle lanes ended");
        fail_calls(&writer, 1, 1).await;
        assert_eq!(writer.lanes_running(), 1, "a lane started again");
    }

    #[tokio::test]
    async fn the_lanes_end_once_every_handle_is_dropped_without_waiting_lane_idle() {
        let writer = unreachable(WriterTuning {
            lane_idle: Duration::from_secs(3600),
            ..Default::default()
        });
        fail_calls(&writer, 8, 2).await;
        let shared = writer.open.0.clone();
        assert!(shared.sched().running() >= 1);
        drop(writer);
        for _ in 0..100 {
            if shared.sched().running() == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{} lanes still run", shared.sched().running());
    }
}
