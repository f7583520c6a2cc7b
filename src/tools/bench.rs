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
//! It prints progress every second to stderr and, as the last line on stdout, one JSON object
//! with the results. The client's own retries are off: every error is counted.

use crate::BoxError;
use hdrhistogram::Histogram;
use ledger_client::{
    Client, ClientOptions, Decimal, Error, NewAccount, NewPosting, NormalBalance, Posted, Reason,
    RetryPolicy,
};
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
        use crate::domain::limits::{MAX_BATCH_REQUESTS, MAX_LEGS};
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
    postings: AtomicU64,
    replays: AtomicU64,
    rejected: AtomicU64,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl Stats {
    fn error(&self, what: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_error.lock().unwrap();
        if first.is_none() {
            *first = Some(what);
        }
    }

    /// Counts one posting's answer; returns whether it is worth re-sending later.
    fn record(&self, duplicate: bool, answer: &Result<Posted, Error>) -> bool {
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

    /// The next call's postings: each a re-send of a recent one (a duplicate) or a new one.
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
                (self.posting(rng, key), false)
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

impl Shared {
    /// Sends one call's postings and counts their answers; returns those worth re-sending.
    async fn send(&self, client: &Client, call: Vec<(NewPosting, bool)>) -> Vec<NewPosting> {
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
        call.into_iter()
            .zip(&answers)
            .filter(|((_, dup), answer)| self.stats.record(*dup, answer))
            .map(|((p, _), _)| p)
            .collect()
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
                let kept = shared.send(&client, call).await;
                local.saturating_record(t0.elapsed().as_micros().max(1) as u64);
                remember(&mut recent, kept, &mut rng);
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
            let kept = shared.send(&client, call).await;
            let micros = due.elapsed().as_micros().max(1) as u64;
            drop(permit);
            shared.hist.lock().unwrap().saturating_record(micros);
            remember(&mut recent.lock().unwrap(), kept, &mut Rng::new(seed));
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
            eprintln!(
                "bench: {:>5.1} s  {:>7} postings/s  total {}  replays {}  rejected {}  errors {}",
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

/// The run's JSON summary.
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
    serde_json::json!({
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
    })
}
