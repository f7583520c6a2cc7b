//! `ledger bench`: a load generator for a running ledger server, built on `ledger-client`'s
//! typed API.
//!
//! It creates its accounts (a funding account that may go negative, `--accounts` asset
//! accounts funded from it, and with `--hot-account` one shared fee account), then sends
//! postings over several HTTP/2 connections for `--duration` seconds: one `Post` per posting,
//! `PostBatch` calls of `--batch N` postings, or single posts that the client coalesces into
//! `PostBatch` calls (`--client-coalesce N`). Closed loop (`--concurrency` callers, each
//! sending its next call when the last one was answered) or, with `--rate`, open loop
//! (postings offered at a fixed rate, in calls of the batch's size; latency counts from the
//! intended send time, so a stalled server is not hidden by callers that stopped sending).
//! With `--holds F` a fraction F of the new postings are holds (the same legs); the caller
//! that sent one closes it as soon as it is answered, capturing every other hold whole and
//! releasing (voiding) the rest, so no hold it opened is left pending when it exits (unless
//! its close failed, which is counted). Holds, captures and releases each count as a posting.
//! It prints progress every second to stderr and, as the last line on stdout, one JSON object
//! with the results. The client's own retries are off: every error is counted.

use hdrhistogram::Histogram;
use ledger_client::{
    Client, ClientOptions, Decimal, Error, NewAccount, NewCapture, NewPosting, NewVoid,
    NormalBalance, Posted, Reason, RetryPolicy,
};
use ledger_server::BoxError;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// HTTP/2 connections the load is spread over (one client each).
pub const BENCH_CHANNELS: usize = 4;
/// Recent answered postings per caller that a duplicate may re-send.
const REPLAY_WINDOW: usize = 64;
/// Minor units each asset account is funded with (1,000,000.00 EUR).
const FUNDING_MINOR: i64 = 100_000_000;
/// Concurrent requests while creating and funding accounts.
const SETUP_CONCURRENCY: usize = 32;
/// Longest latency the histograms record (two minutes, in microseconds).
const MAX_LATENCY_MICROS: u64 = 120_000_000;

/// What the load consists of. Other scenarios add a value here and an arm in [`run`].
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// Transfers between random accounts (`Post`, or `PostBatch` with --batch).
    Post,
}

/// Options of `ledger bench`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    #[command(flatten)]
    pub client: crate::tools::ClientArgs,
    /// How long to send requests, in seconds.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Concurrent callers (closed loop), or the most calls in flight (open loop).
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Asset accounts to create and transfer between.
    #[arg(long, default_value_t = 1000)]
    pub accounts: usize,
    /// Every posting also touches one shared account (a fees account).
    #[arg(long)]
    pub hot_account: bool,
    /// Open loop: postings offered per second (in calls of --batch postings; latency from the
    /// intended send time).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Fraction of postings that re-send an earlier posting with its key (counted as replays).
    #[arg(long, default_value_t = 0.0)]
    pub duplicates: f64,
    /// Fraction (0..=1) of the new postings sent as holds (the same legs, no expiry). The caller
    /// that sent a hold closes it once it is answered: every other one is captured whole
    /// (Capture, key `<hold's key>:capture`), the rest released (Void, key `<hold's
    /// key>:release`). Holds, captures and releases each count as one posting in `postings`
    /// and `postings_per_sec`. With --batch holds travel in the PostBatch calls and their
    /// captures and releases are Capture and Void calls of their own; with --rate the rate
    /// paces new postings and holds, and closes follow their hold's answer, unpaced.
    #[arg(long, value_name = "F", default_value_t = 0.0)]
    pub holds: f64,
    /// Legs per posting (at least 2; with --hot-account one of them is the hot account).
    #[arg(long, default_value_t = 2)]
    pub legs: usize,
    /// Send PostBatch calls of N postings (1..=1000, MAX_BATCH_REQUESTS) instead of Post.
    #[arg(long, value_name = "N", conflicts_with = "client_coalesce")]
    pub batch: Option<usize>,
    /// Send single posts through the client's coalescing: concurrent posts travel together
    /// in PostBatch calls of at most N postings.
    #[arg(long, value_name = "N")]
    pub client_coalesce: Option<usize>,
    /// What to send.
    #[arg(long, value_enum, default_value_t = Scenario::Post)]
    pub scenario: Scenario,
    /// Prefix of the account codes (accounts are reused by later runs with the same prefix).
    #[arg(long, default_value = "bench")]
    pub prefix: String,
}

impl BenchArgs {
    /// Options that could not make a run are refused by name.
    fn check(&self) -> Result<(), String> {
        use ledger_core::limits::{MAX_BATCH_REQUESTS, MAX_LEGS};
        if self.legs < 2 || self.legs > MAX_LEGS {
            return Err(format!(
                "--legs must be 2..={MAX_LEGS} (limit MAX_LEGS), got {}",
                self.legs
            ));
        }
        if self.accounts < 2 {
            return Err(format!(
                "--accounts must be at least 2, got {}",
                self.accounts
            ));
        }
        if !(0.0..=1.0).contains(&self.duplicates) {
            return Err(format!(
                "--duplicates must be within 0..=1, got {}",
                self.duplicates
            ));
        }
        if !(0.0..=1.0).contains(&self.holds) {
            return Err(format!(
                "--holds must be a fraction within 0..=1 (of the postings sent as holds), got {}",
                self.holds
            ));
        }
        if self.concurrency == 0 {
            return Err("--concurrency must be at least 1".into());
        }
        if matches!(self.rate, Some(r) if !(r > 0.0 && r.is_finite())) {
            return Err("--rate must be a positive number".into());
        }
        for (flag, n) in [
            ("--batch", self.batch),
            ("--client-coalesce", self.client_coalesce),
        ] {
            if matches!(n, Some(n) if n == 0 || n > MAX_BATCH_REQUESTS) {
                return Err(format!(
                    "{flag} must be 1..={MAX_BATCH_REQUESTS} (limit MAX_BATCH_REQUESTS)"
                ));
            }
        }
        Ok(())
    }

    /// Postings per call.
    fn per_call(&self) -> usize {
        self.batch.unwrap_or(1)
    }
}

/// Runs the benchmark and prints its results; the JSON summary is the last stdout line.
pub async fn run(args: BenchArgs) -> Result<(), BoxError> {
    args.check()?;
    let mut options = ClientOptions {
        connect: args.client.options()?,
        retry: RetryPolicy::never(),
        coalesce: None,
    };
    if let Some(n) = args.client_coalesce {
        options = options.coalesce(n);
    }
    let first = Client::connect(options).await?;
    let mut clients = vec![first.clone()];
    for _ in 1..BENCH_CHANNELS {
        clients.push(first.another_connection().await?);
    }
    let summary = match args.scenario {
        Scenario::Post => post_scenario(&args, &clients).await?,
    };
    crate::cli::print_out(&format!("{summary}\n"))?;
    Ok(())
}

/// Counters shared by the callers.
#[derive(Default)]
struct Stats {
    /// New postings recorded: ordinary ones, holds, captures and releases.
    postings: AtomicU64,
    replays: AtomicU64,
    rejected: AtomicU64,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
    /// Holds recorded (new), and hold posts that failed (errors; refusals for funds are
    /// `rejected`).
    holds: AtomicU64,
    hold_failures: AtomicU64,
    /// Holds closed by a capture or a release, and closes that failed (errors).
    captures: AtomicU64,
    capture_failures: AtomicU64,
    releases: AtomicU64,
    release_failures: AtomicU64,
    /// Closes begun: even ones capture, odd ones release.
    closes: AtomicU64,
}

impl Stats {
    fn error(&self, what: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_error.lock().unwrap();
        if first.is_none() {
            *first = Some(what);
        }
    }

    /// Counts one posting's answer (`hold`: it was sent as a hold); returns whether it is
    /// worth re-sending later (a new posting recorded).
    fn record(&self, duplicate: bool, hold: bool, answer: &Result<Posted, Error>) -> bool {
        if hold && !duplicate {
            let counter = match answer {
                Ok(posted) if !posted.replayed => Some(&self.holds),
                // Refused for funds: `rejected`, below, like any posting.
                Err(e) if e.reason() == Some(Reason::InsufficientFunds) => None,
                _ => Some(&self.hold_failures),
            };
            if let Some(c) = counter {
                c.fetch_add(1, Ordering::Relaxed);
            }
        }
        match answer {
            Ok(posted) => match (duplicate, posted.replayed) {
                (false, false) => {
                    self.postings.fetch_add(1, Ordering::Relaxed);
                    true
                }
                (true, true) => {
                    self.replays.fetch_add(1, Ordering::Relaxed);
                    false
                }
                (false, true) => {
                    self.error("a new key was answered as a replay".into());
                    false
                }
                (true, false) => {
                    self.error("a re-sent key made a second posting".into());
                    false
                }
            },
            // A state-dependent rejection (insufficient funds): decided, not an error.
            Err(e) if e.reason() == Some(Reason::InsufficientFunds) => {
                self.rejected.fetch_add(1, Ordering::Relaxed);
                false
            }
            Err(e) => {
                self.error(e.to_string());
                false
            }
        }
    }

    /// Counts the answer to a hold's capture (`capture`) or release: a new posting, or a
    /// failure (an error).
    fn record_close(&self, capture: bool, answer: &Result<Posted, Error>) {
        let (what, done, failed) = if capture {
            ("capture", &self.captures, &self.capture_failures)
        } else {
            ("release", &self.releases, &self.release_failures)
        };
        let failure = match answer {
            Ok(posted) if !posted.replayed => {
                self.postings.fetch_add(1, Ordering::Relaxed);
                done.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Ok(_) => format!("a new {what} key was answered as a replay"),
            Err(e) => format!("{what} of a hold: {e}"),
        };
        failed.fetch_add(1, Ordering::Relaxed);
        self.error(failure);
    }
}

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
fn eur(minor: i64) -> Decimal {
    Decimal::new(minor, 2)
}

struct Plan {
    accounts: Vec<String>,
    hot: Option<String>,
    legs: usize,
    duplicates: f64,
    /// Fraction of new postings sent as holds.
    holds: f64,
    run_id: String,
    per_call: usize,
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

/// A new run's id: the time in milliseconds and the process id, in hex.
fn run_id() -> Result<String, BoxError> {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis();
    Ok(format!("{ms:x}{:04x}", std::process::id() & 0xffff))
}

/// Runs `calls` with at most SETUP_CONCURRENCY in flight, over the clients in turn.
async fn in_parallel<F, Fut>(clients: &[Client], n: usize, call: F) -> Result<(), BoxError>
where
    F: Fn(Client, usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), Error>> + Send + 'static,
{
    let sem = Arc::new(Semaphore::new(SETUP_CONCURRENCY));
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let permit = sem.clone().acquire_owned().await?;
        let fut = call(clients[i % clients.len()].clone(), i);
        tasks.push(tokio::spawn(async move {
            let r = fut.await;
            drop(permit);
            r
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

/// Creates (or reuses) the accounts and funds each asset account; returns the plan and the
/// number of funding postings made.
async fn setup(args: &BenchArgs, clients: &[Client]) -> Result<(Plan, u64), BoxError> {
    let run_id = run_id()?;
    let p = &args.prefix;
    let funding = format!("{p}:funding");
    let accounts: Vec<String> = (0..args.accounts)
        .map(|i| format!("{p}:acct:{i}"))
        .collect();
    let hot = args.hot_account.then(|| format!("{p}:hot"));
    let account = |code: &str, normal, allow_negative| NewAccount {
        code: code.to_owned(),
        currency: "EUR".into(),
        scale: 2,
        normal_balance: normal,
        allow_negative,
        metadata: Default::default(),
    };
    let mut creates = vec![account(&funding, NormalBalance::Credit, true)];
    creates.extend(hot.iter().map(|h| account(h, NormalBalance::Debit, false)));
    creates.extend(
        accounts
            .iter()
            .map(|a| account(a, NormalBalance::Debit, false)),
    );
    let began = Instant::now();
    // The clients share the accounts they read: the answers to these are all they need.
    in_parallel(clients, creates.len(), |c, i| {
        let a = creates[i].clone();
        async move { c.create_account(a).await.map(drop) }
    })
    .await
    .map_err(|e| format!("creating accounts: {e}"))?;
    in_parallel(clients, accounts.len(), |c, i| {
        let fund = NewPosting::new(format!("{run_id}-fund-{i}"))
            .debit(&accounts[i], eur(FUNDING_MINOR))
            .credit(&funding, eur(FUNDING_MINOR))
            .memo("bench funding");
        async move { c.post(fund).await.map(drop) }
    })
    .await
    .map_err(|e| format!("funding accounts: {e}"))?;
    eprintln!(
        "bench: {} accounts ready and funded in {:.1} s (run {run_id})",
        accounts.len(),
        began.elapsed().as_secs_f64()
    );
    let plan = Plan {
        accounts,
        hot,
        legs: args.legs,
        duplicates: args.duplicates,
        holds: args.holds,
        run_id,
        per_call: args.per_call(),
    };
    Ok((plan, args.accounts as u64))
}

/// What every caller shares.
struct Shared {
    plan: Plan,
    stats: Stats,
    hist: Mutex<Histogram<u64>>,
    /// Whether calls are `PostBatch` calls (`--batch`).
    batch: bool,
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
    /// Sends one call's postings and counts their answers.
    async fn send(&self, client: &Client, call: Vec<(NewPosting, bool)>) -> Answered {
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
    async fn close_holds(&self, client: &Client, holds: Vec<(String, String)>) -> Vec<u64> {
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
            self.stats.record_close(capture, &answer);
            micros
        });
        futures_util::future::join_all(closes).await
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_MICROS, 3).expect("valid histogram bounds")
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

/// Closed loop: each caller sends its next call when the last one was answered.
async fn closed_loop(shared: &Arc<Shared>, clients: &[Client], callers: usize, until: Instant) {
    let mut workers = Vec::new();
    for w in 0..callers {
        let client = clients[w % clients.len()].clone();
        let shared = shared.clone();
        workers.push(tokio::spawn(async move {
            let mut rng = Rng::new(w as u64 + 1);
            let mut local = histogram();
            let mut recent: Vec<NewPosting> = Vec::new();
            let mut n = 0u64;
            while Instant::now() < until {
                let call = shared.plan.call(&mut rng, &recent, w, &mut n);
                let t0 = Instant::now();
                let answered = shared.send(&client, call).await;
                local.saturating_record(t0.elapsed().as_micros().max(1) as u64);
                for micros in shared.close_holds(&client, answered.holds).await {
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

/// Open loop: call i is due at start + i × per_call / rate, whatever happened before it.
async fn open_loop(
    shared: &Arc<Shared>,
    clients: &[Client],
    (rate, in_flight): (f64, usize),
    (started, until): (Instant, Instant),
) -> Result<(), BoxError> {
    let sem = Arc::new(Semaphore::new(in_flight));
    let recent = Arc::new(Mutex::new(Vec::<NewPosting>::new()));
    let mut rng = Rng::new(7);
    let mut tasks = tokio::task::JoinSet::new();
    let (thread, mut due_times) = pacer(started, until, rate / shared.plan.per_call as f64);
    let mut n = 0u64;
    let mut i = 0usize;
    while let Some(due) = due_times.recv().await {
        let call = shared
            .plan
            .call(&mut rng, &recent.lock().unwrap(), 0, &mut n);
        i += 1;
        let permit = sem.clone().acquire_owned().await?;
        let client = clients[i % clients.len()].clone();
        let (shared, recent) = (shared.clone(), recent.clone());
        let seed = rng.next();
        tasks.spawn(async move {
            let answered = shared.send(&client, call).await;
            let micros = due.elapsed().as_micros().max(1) as u64;
            let closes = shared.close_holds(&client, answered.holds).await;
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

/// Prints the postings per second, once a second, until stopped.
fn progress(
    shared: Arc<Shared>,
    started: Instant,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut last = 0;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.tick().await;
        while !stop.load(Ordering::Relaxed) {
            tick.tick().await;
            let s = &shared.stats;
            let now = s.postings.load(Ordering::Relaxed);
            let holds = if shared.plan.holds > 0.0 {
                format!(
                    "  holds {} captured {} released {}",
                    s.holds.load(Ordering::Relaxed),
                    s.captures.load(Ordering::Relaxed),
                    s.releases.load(Ordering::Relaxed),
                )
            } else {
                String::new()
            };
            eprintln!(
                "bench: {:>5.1} s  {:>7} postings/s  total {}  replays {}  rejected {}  errors {}{holds}",
                started.elapsed().as_secs_f64(),
                now - last,
                now,
                s.replays.load(Ordering::Relaxed),
                s.rejected.load(Ordering::Relaxed),
                s.errors.load(Ordering::Relaxed),
            );
            last = now;
        }
    })
}

async fn post_scenario(
    args: &BenchArgs,
    clients: &[Client],
) -> Result<serde_json::Value, BoxError> {
    let (plan, setup_postings) = setup(args, clients).await?;
    let shared = Arc::new(Shared {
        plan,
        stats: Stats::default(),
        hist: Mutex::new(histogram()),
        batch: args.batch.is_some(),
    });
    let calls_before: u64 = clients.iter().map(|c| c.stats().batch_calls).sum();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(args.duration);
    let ticker = progress(shared.clone(), started, stop.clone());
    match args.rate {
        None => closed_loop(&shared, clients, args.concurrency, until).await,
        Some(rate) => {
            open_loop(&shared, clients, (rate, args.concurrency), (started, until)).await?
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    ticker.abort();
    let batch_calls = clients.iter().map(|c| c.stats().batch_calls).sum::<u64>() - calls_before;
    Ok(summary(args, &shared, seconds, setup_postings, batch_calls))
}

/// The run's JSON summary. `postings` counts every new posting recorded (ordinary ones,
/// holds, captures and releases alike; not replays, not the setup's) and `postings_per_sec` is
/// it over `seconds`; `requests` counts calls answered (Post, PostBatch, Capture, Void), which
/// the latencies are of. The holds' own fields: [`hold_fields`].
fn summary(
    args: &BenchArgs,
    shared: &Shared,
    seconds: f64,
    setup_postings: u64,
    batch_calls: u64,
) -> serde_json::Value {
    let hist = shared.hist.lock().unwrap();
    let ms = |q: f64| {
        if hist.is_empty() {
            0.0
        } else {
            hist.value_at_quantile(q) as f64 / 1000.0
        }
    };
    let s = &shared.stats;
    let postings = s.postings.load(Ordering::Relaxed);
    if let Some(e) = s.first_error.lock().unwrap().as_ref() {
        eprintln!("bench: first error: {e}");
    }
    let mut summary = serde_json::json!({
        "postings": postings,
        "seconds": (seconds * 1000.0).round() / 1000.0,
        "postings_per_sec": (postings as f64 / seconds).round(),
        "p50_ms": ms(0.5),
        "p99_ms": ms(0.99),
        "p999_ms": ms(0.999),
        "errors": s.errors.load(Ordering::Relaxed),
        "replays": s.replays.load(Ordering::Relaxed),
        "rejected": s.rejected.load(Ordering::Relaxed),
        "setup_postings": setup_postings,
        "requests": hist.len(),
        "batch": args.batch,
        "client_coalesce": args.client_coalesce,
        "post_batch_calls": batch_calls,
        "concurrency": args.concurrency,
        "rate": args.rate,
        "accounts": args.accounts,
        "hot_account": args.hot_account,
        "legs": args.legs,
        "duplicates": args.duplicates,
        "run": shared.plan.run_id,
    });
    if let Some(fields) = summary.as_object_mut() {
        fields.extend(hold_fields(args, s));
    }
    summary
}

/// The summary's fields about holds: `holds_fraction` (--holds); `holds` recorded,
/// `captures` and `releases` of them (each also counted in `postings`); `hold_failures`,
/// `capture_failures`, `release_failures` (each also counted in `errors`; a hold refused for
/// funds is `rejected`); `holds_left_open`: holds recorded but neither captured nor released
/// because their close failed. Every hold is closed before the summary is printed, so none is
/// in flight then (a hold post that failed with an unknown outcome, such as a timeout, may
/// have been recorded all the same: it is a `hold_failures` and stays pending).
fn hold_fields(args: &BenchArgs, s: &Stats) -> serde_json::Map<String, serde_json::Value> {
    let n = |c: &AtomicU64| serde_json::Value::from(c.load(Ordering::Relaxed));
    let left_open = s
        .holds
        .load(Ordering::Relaxed)
        .saturating_sub(s.captures.load(Ordering::Relaxed) + s.releases.load(Ordering::Relaxed));
    [
        ("holds_fraction", args.holds.into()),
        ("holds", n(&s.holds)),
        ("captures", n(&s.captures)),
        ("releases", n(&s.releases)),
        ("hold_failures", n(&s.hold_failures)),
        ("capture_failures", n(&s.capture_failures)),
        ("release_failures", n(&s.release_failures)),
        ("holds_left_open", left_open.into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}
