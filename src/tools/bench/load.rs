//! The load: the postings each call carries (a fixed plan, pseudo-random choices), sent by
//! callers in a closed loop or paced in an open one, holds closed as they are answered, spread
//! evenly over the run's ledgers (a caller keeps to one ledger; open loop, call i goes to
//! ledger i mod N), each call's postings of one ledger.

use super::stats::{histogram, Stats};
use hdrhistogram::Histogram;
use ledger_client::{Client, Decimal, Error, NewCapture, NewPosting, NewVoid, Posted};
use ledger_server::BoxError;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// Recent answered postings per caller that a duplicate may re-send.
const REPLAY_WINDOW: usize = 64;

/// A small, fast pseudo-random generator (splitmix64); benchmarks need no cryptography.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

/// Minor units of EUR (scale 2) as an amount.
pub(super) fn eur(minor: i64) -> Decimal {
    Decimal::new(minor, 2)
}

pub(super) struct Plan {
    pub(super) accounts: Vec<String>,
    pub(super) hot: Option<String>,
    pub(super) legs: usize,
    pub(super) duplicates: f64,
    /// Fraction of new postings sent as holds.
    pub(super) holds: f64,
    pub(super) run_id: String,
    pub(super) per_call: usize,
}

impl Plan {
    /// A new posting: one account pays, the others (and the hot account) receive.
    fn posting(&self, rng: &mut Rng, key: String) -> NewPosting {
        let receivers = self.legs - 1 - usize::from(self.hot.is_some());
        let payer = rng.below(self.accounts.len());
        let mut posting = NewPosting::new(key);
        let mut total = 0;
        for _ in 0..receivers {
            let mut to = rng.below(self.accounts.len() - 1);
            if to >= payer {
                to += 1;
            }
            let minor = 1 + rng.below(999) as i64;
            total += minor;
            posting = posting.debit(&self.accounts[to], eur(minor));
        }
        if let Some(hot) = &self.hot {
            let fee = 1 + rng.below(99) as i64;
            total += fee;
            posting = posting.debit(hot, eur(fee));
        }
        posting.credit(&self.accounts[payer], eur(total))
    }

    /// The next call's postings: each a re-send of a recent one (a duplicate) or a new one
    /// (a hold by chance `holds`).
    fn call(
        &self,
        rng: &mut Rng,
        recent: &[NewPosting],
        worker: usize,
        n: &mut u64,
    ) -> Vec<(NewPosting, bool)> {
        (0..self.per_call)
            .map(|_| {
                if !recent.is_empty() && rng.chance(self.duplicates) {
                    return (recent[rng.below(recent.len())].clone(), true);
                }
                *n += 1;
                let key = format!("{}-{worker}-{n}", self.run_id);
                let hold = rng.chance(self.holds);
                let posting = self.posting(rng, key);
                (if hold { posting.hold(None) } else { posting }, false)
            })
            .collect()
    }
}

/// What every caller shares.
pub(super) struct Shared {
    pub(super) plan: Plan,
    pub(super) stats: Stats,
    pub(super) hist: Mutex<Histogram<u64>>,
    /// Whether calls are `PostBatch` calls (`--batch`).
    pub(super) batch: bool,
    /// The run's ledgers, and the new postings recorded in each (as `stats.postings` counts
    /// them).
    pub(super) ledgers: Vec<String>,
    pub(super) ledger_postings: Vec<AtomicU64>,
}

/// What an answered call leaves to do.
#[derive(Default)]
struct Answered {
    /// Its new postings, worth re-sending later as duplicates.
    kept: Vec<NewPosting>,
    /// The holds it recorded, to close: each one's key and posting id.
    holds: Vec<(String, String)>,
}

impl Shared {
    /// Sends one call's postings on ledger `ledger` (`client` is on it) and counts their
    /// answers.
    async fn send(
        &self,
        client: &Client,
        ledger: usize,
        call: Vec<(NewPosting, bool)>,
    ) -> Answered {
        let answers: Vec<Result<Posted, Error>> = if self.batch {
            let postings = call.iter().map(|(p, _)| p.clone()).collect();
            match client.post_batch(postings).await {
                Ok(results) => results,
                Err(e) => call.iter().map(|_| Err(e.clone())).collect(),
            }
        } else {
            let (posting, _) = call.first().expect("one posting per call").clone();
            vec![client.post(posting).await]
        };
        let mut answered = Answered::default();
        for ((posting, dup), answer) in call.into_iter().zip(&answers) {
            if !self.stats.record(dup, posting.hold.is_some(), answer) {
                continue;
            }
            self.ledger_postings[ledger].fetch_add(1, Ordering::Relaxed);
            if let (Some(_), Ok(posted)) = (posting.hold, answer) {
                let key = posting.idempotency_key.clone();
                answered
                    .holds
                    .push((key, posted.posting.posting_id.clone()));
            }
            answered.kept.push(posting);
        }
        answered
    }

    /// Closes holds, concurrently: every other close (over the whole run) captures its hold
    /// whole, the rest release theirs, each under a key derived from the hold's. Returns each
    /// call's latency in µs.
    async fn close_holds(
        &self,
        client: &Client,
        ledger: usize,
        holds: Vec<(String, String)>,
    ) -> Vec<u64> {
        let closes = holds.into_iter().map(|(key, hold)| async move {
            let capture = self
                .stats
                .closes
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(2);
            let t0 = Instant::now();
            let answer = if capture {
                client
                    .capture(NewCapture::new(format!("{key}:capture"), hold))
                    .await
            } else {
                let release = NewVoid {
                    idempotency_key: format!("{key}:release"),
                    posting_id: hold,
                    reason: "bench release".into(),
                    effective_at: None,
                };
                client.void(release).await
            };
            let micros = t0.elapsed().as_micros().max(1) as u64;
            if self.stats.record_close(capture, &answer) {
                self.ledger_postings[ledger].fetch_add(1, Ordering::Relaxed);
            }
            micros
        });
        futures_util::future::join_all(closes).await
    }
}

/// Keeps answered postings for later duplicates (a bounded window).
fn remember(recent: &mut Vec<NewPosting>, kept: Vec<NewPosting>, rng: &mut Rng) {
    for p in kept {
        if recent.len() < REPLAY_WINDOW {
            recent.push(p);
        } else {
            let slot = rng.below(REPLAY_WINDOW);
            recent[slot] = p;
        }
    }
}

/// Closed loop: each caller sends its next call when the last one was answered. Caller `w`
/// works on ledger `w` mod N (`views`: each ledger's clients, one per connection).
pub(super) async fn closed_loop(
    shared: &Arc<Shared>,
    views: &[Vec<Client>],
    callers: usize,
    until: Instant,
) {
    let mut workers = Vec::new();
    for w in 0..callers {
        let ledger = w % views.len();
        let clients = &views[ledger];
        let client = clients[(w / views.len()) % clients.len()].clone();
        let shared = shared.clone();
        workers.push(tokio::spawn(async move {
            let mut rng = Rng::new(w as u64 + 1);
            let mut local = histogram();
            let mut recent: Vec<NewPosting> = Vec::new();
            let mut n = 0u64;
            while Instant::now() < until {
                let call = shared.plan.call(&mut rng, &recent, w, &mut n);
                let t0 = Instant::now();
                let answered = shared.send(&client, ledger, call).await;
                local.saturating_record(t0.elapsed().as_micros().max(1) as u64);
                for micros in shared.close_holds(&client, ledger, answered.holds).await {
                    local.saturating_record(micros);
                }
                remember(&mut recent, answered.kept, &mut rng);
            }
            shared.hist.lock().unwrap().add(&local).unwrap();
        }));
    }
    for w in workers {
        let _ = w.await;
    }
}

/// The pacer: a thread that wakes at each call's due time. The runtime's timer rounds every
/// sleep up to its next millisecond tick, which made each send up to 1 ms late; counted from
/// the due time, that lateness was the generator's own, yet reported as the server's latency.
/// A thread's sleep wakes within tens of µs.
fn pacer(
    started: Instant,
    until: Instant,
    calls_per_sec: f64,
) -> (
    std::thread::JoinHandle<()>,
    tokio::sync::mpsc::UnboundedReceiver<Instant>,
) {
    let (ticks, due_times) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let thread = std::thread::spawn(move || {
        for n in 0u64.. {
            let due = started + Duration::from_secs_f64(n as f64 / calls_per_sec);
            if due >= until {
                break;
            }
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            if ticks.send(due).is_err() {
                break;
            }
        }
    });
    (thread, due_times)
}

/// Open loop: call i is due at start + i × per_call / rate, whatever happened before it, on
/// ledger i mod N (`views`: each ledger's clients, one per connection).
pub(super) async fn open_loop(
    shared: &Arc<Shared>,
    views: &[Vec<Client>],
    (rate, in_flight): (f64, usize),
    (started, until): (Instant, Instant),
) -> Result<(), BoxError> {
    let sem = Arc::new(Semaphore::new(in_flight));
    // Per ledger, its recent postings (a duplicate is re-sent to its own ledger).
    let recent: Vec<Arc<Mutex<Vec<NewPosting>>>> = views.iter().map(|_| Arc::default()).collect();
    let mut rng = Rng::new(7);
    let mut tasks = tokio::task::JoinSet::new();
    let (thread, mut due_times) = pacer(started, until, rate / shared.plan.per_call as f64);
    let mut n = 0u64;
    let mut i = 0usize;
    while let Some(due) = due_times.recv().await {
        let ledger = i % views.len();
        let recent = recent[ledger].clone();
        let call = shared
            .plan
            .call(&mut rng, &recent.lock().unwrap(), 0, &mut n);
        let clients = &views[ledger];
        let client = clients[(i / views.len()) % clients.len()].clone();
        i += 1;
        let permit = sem.clone().acquire_owned().await?;
        let shared = shared.clone();
        let seed = rng.next();
        tasks.spawn(async move {
            let answered = shared.send(&client, ledger, call).await;
            let micros = due.elapsed().as_micros().max(1) as u64;
            let closes = shared.close_holds(&client, ledger, answered.holds).await;
            drop(permit);
            let mut hist = shared.hist.lock().unwrap();
            hist.saturating_record(micros);
            closes.into_iter().for_each(|m| hist.saturating_record(m));
            drop(hist);
            remember(
                &mut recent.lock().unwrap(),
                answered.kept,
                &mut Rng::new(seed),
            );
        });
        while tasks.try_join_next().is_some() {}
    }
    thread.join().map_err(|_| "the pacer thread panicked")?;
    while tasks.join_next().await.is_some() {}
    Ok(())
}
