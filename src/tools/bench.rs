//! `ledger bench`: a load generator for a running ledger server.
//!
//! It creates its accounts (a funding account that may go negative, `--accounts` asset
//! accounts funded from it, and with `--hot-account` one shared fee account), then sends `Post`
//! requests over several HTTP/2 channels for `--duration` seconds: closed loop (`--concurrency`
//! callers, each sending its next request when the last one was answered) or, with `--rate`,
//! open loop (requests offered at a fixed rate; latency counts from the intended send time, so
//! a stalled server is not hidden by callers that stopped sending). It prints progress every
//! second to stderr and, as the last line on stdout, one JSON object with the results.

use crate::grpc::pb;
use hdrhistogram::Histogram;
use ledger_client::RawClient;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// HTTP/2 connections the load is spread over.
pub const BENCH_CHANNELS: usize = 4;
/// Recent answered requests per caller that a duplicate may re-send.
const REPLAY_WINDOW: usize = 64;
/// Minor units each asset account is funded with (1,000,000.00 EUR).
const FUNDING_MINOR: u64 = 100_000_000;
/// Concurrent requests while creating and funding accounts.
const SETUP_CONCURRENCY: usize = 32;

/// What the load consists of. Other scenarios add a value here and an arm in [`run`].
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// Transfers between random accounts (`Post`).
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
    /// Concurrent callers (closed loop), or the most requests in flight (open loop).
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Asset accounts to create and transfer between.
    #[arg(long, default_value_t = 1000)]
    pub accounts: usize,
    /// Every posting also touches one shared account (a fees account).
    #[arg(long)]
    pub hot_account: bool,
    /// Open loop: postings offered per second (latency from the intended send time).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Fraction of requests that re-send an earlier request with its key (counted as replays).
    #[arg(long, default_value_t = 0.0)]
    pub duplicates: f64,
    /// Legs per posting (at least 2; with --hot-account one of them is the hot account).
    #[arg(long, default_value_t = 2)]
    pub legs: usize,
    /// What to send.
    #[arg(long, value_enum, default_value_t = Scenario::Post)]
    pub scenario: Scenario,
    /// Prefix of the account codes (accounts are reused by later runs with the same prefix).
    #[arg(long, default_value = "bench")]
    pub prefix: String,
}

use crate::BoxError;

/// Runs the benchmark and prints its results; the JSON summary is the last stdout line.
pub async fn run(args: BenchArgs) -> Result<(), BoxError> {
    if args.legs < 2 || args.legs > crate::domain::limits::MAX_LEGS {
        return Err(format!(
            "--legs must be 2..={} (limit MAX_LEGS), got {}",
            crate::domain::limits::MAX_LEGS,
            args.legs
        )
        .into());
    }
    if args.accounts < 2 {
        return Err(format!("--accounts must be at least 2, got {}", args.accounts).into());
    }
    if !(0.0..=1.0).contains(&args.duplicates) {
        return Err(format!("--duplicates must be within 0..=1, got {}", args.duplicates).into());
    }
    if args.concurrency == 0 {
        return Err("--concurrency must be at least 1".into());
    }
    if matches!(args.rate, Some(r) if !(r > 0.0 && r.is_finite())) {
        return Err("--rate must be a positive number".into());
    }
    let mut channels = Vec::with_capacity(BENCH_CHANNELS);
    for _ in 0..BENCH_CHANNELS {
        channels.push(args.client.connect().await?);
    }
    let summary = match args.scenario {
        Scenario::Post => post_scenario(&args, &channels).await?,
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

fn minor_to_decimal(minor: u64) -> String {
    format!("{}.{:02}", minor / 100, minor % 100)
}

struct Plan {
    accounts: Vec<String>,
    hot: Option<String>,
    legs: usize,
    duplicates: f64,
    run_id: String,
}

impl Plan {
    /// A new posting: one account pays, the others (and the hot account) receive.
    fn posting(&self, rng: &mut Rng, key: String) -> pb::PostRequest {
        let receivers = self.legs - 1 - usize::from(self.hot.is_some());
        let payer = rng.below(self.accounts.len());
        let mut legs = Vec::with_capacity(self.legs);
        let mut total = 0u64;
        for _ in 0..receivers {
            let mut to = rng.below(self.accounts.len() - 1);
            if to >= payer {
                to += 1;
            }
            let minor = 1 + rng.below(999) as u64;
            total += minor;
            legs.push(pb::Leg {
                account: self.accounts[to].clone(),
                direction: pb::Direction::Debit as i32,
                amount: minor_to_decimal(minor),
            });
        }
        if let Some(hot) = &self.hot {
            let fee = 1 + rng.below(99) as u64;
            total += fee;
            legs.push(pb::Leg {
                account: hot.clone(),
                direction: pb::Direction::Debit as i32,
                amount: minor_to_decimal(fee),
            });
        }
        legs.push(pb::Leg {
            account: self.accounts[payer].clone(),
            direction: pb::Direction::Credit as i32,
            amount: minor_to_decimal(total),
        });
        pb::PostRequest {
            idempotency_key: key,
            legs,
            effective_at: None,
            memo: String::new(),
            metadata: Default::default(),
            ..Default::default()
        }
    }
}

/// Creates (or reuses) the accounts and funds each asset account; returns the plan and the
/// number of funding postings made.
async fn setup(args: &BenchArgs, channels: &[RawClient]) -> Result<(Plan, u64), BoxError> {
    let run_id = format!(
        "{:x}{:04x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis(),
        std::process::id() & 0xffff
    );
    let p = &args.prefix;
    let funding = format!("{p}:funding");
    let accounts: Vec<String> = (0..args.accounts)
        .map(|i| format!("{p}:acct:{i}"))
        .collect();
    let hot = args.hot_account.then(|| format!("{p}:hot"));
    let account =
        |code: &str, normal: pb::NormalBalance, allow_negative: bool| pb::CreateAccountRequest {
            code: code.to_owned(),
            currency: "EUR".into(),
            scale: 2,
            normal_balance: normal as i32,
            allow_negative,
            metadata: Default::default(),
        };
    let mut creates = vec![account(&funding, pb::NormalBalance::Credit, true)];
    if let Some(h) = &hot {
        creates.push(account(h, pb::NormalBalance::Debit, false));
    }
    creates.extend(
        accounts
            .iter()
            .map(|a| account(a, pb::NormalBalance::Debit, false)),
    );
    let began = Instant::now();
    let sem = Arc::new(Semaphore::new(SETUP_CONCURRENCY));
    let mut tasks = Vec::new();
    for (i, req) in creates.into_iter().enumerate() {
        let mut client = channels[i % channels.len()].clone();
        let permit = sem.clone().acquire_owned().await?;
        tasks.push(tokio::spawn(async move {
            let r = client.create_account(req).await;
            drop(permit);
            r.map(|_| ())
        }));
    }
    for t in tasks {
        t.await?.map_err(|s| format!("creating accounts: {s}"))?;
    }
    let mut tasks = Vec::new();
    for (i, a) in accounts.iter().enumerate() {
        let mut client = channels[i % channels.len()].clone();
        let permit = sem.clone().acquire_owned().await?;
        let req = pb::PostRequest {
            idempotency_key: format!("{run_id}-fund-{i}"),
            legs: vec![
                pb::Leg {
                    account: a.clone(),
                    direction: pb::Direction::Debit as i32,
                    amount: minor_to_decimal(FUNDING_MINOR),
                },
                pb::Leg {
                    account: funding.clone(),
                    direction: pb::Direction::Credit as i32,
                    amount: minor_to_decimal(FUNDING_MINOR),
                },
            ],
            effective_at: None,
            memo: "bench funding".into(),
            metadata: Default::default(),
            ..Default::default()
        };
        tasks.push(tokio::spawn(async move {
            let r = client.post(req).await;
            drop(permit);
            r.map(|_| ())
        }));
    }
    let funded = tasks.len() as u64;
    for t in tasks {
        t.await?.map_err(|s| format!("funding accounts: {s}"))?;
    }
    eprintln!(
        "bench: {} accounts ready and funded in {:.1} s (run {run_id})",
        accounts.len(),
        began.elapsed().as_secs_f64()
    );
    Ok((
        Plan {
            accounts,
            hot,
            legs: args.legs,
            duplicates: args.duplicates,
            run_id,
        },
        funded,
    ))
}

/// Sends one request and records its outcome; returns whether it is worth re-sending later.
async fn send(
    client: &mut RawClient,
    req: pb::PostRequest,
    duplicate: bool,
    stats: &Stats,
) -> bool {
    match client.post(req).await {
        Ok(resp) => {
            let resp = resp.into_inner();
            match (duplicate, resp.replayed) {
                (false, false) => {
                    stats.postings.fetch_add(1, Ordering::Relaxed);
                    true
                }
                (true, true) => {
                    stats.replays.fetch_add(1, Ordering::Relaxed);
                    false
                }
                (false, true) => {
                    stats.error("a new key was answered as a replay".into());
                    false
                }
                (true, false) => {
                    stats.error("a re-sent key made a second posting".into());
                    false
                }
            }
        }
        Err(s) if s.code() == tonic::Code::FailedPrecondition => {
            // A state-dependent rejection (insufficient funds): decided, not an error.
            stats.rejected.fetch_add(1, Ordering::Relaxed);
            false
        }
        Err(s) => {
            stats.error(format!("{:?}: {}", s.code(), s.message()));
            false
        }
    }
}

async fn post_scenario(
    args: &BenchArgs,
    channels: &[RawClient],
) -> Result<serde_json::Value, BoxError> {
    let (plan, setup_postings) = setup(args, channels).await?;
    let plan = Arc::new(plan);
    let stats = Arc::new(Stats::default());
    let hist = Arc::new(Mutex::new(Histogram::<u64>::new_with_bounds(
        1,
        120_000_000,
        3,
    )?));
    let stop = Arc::new(AtomicBool::new(false));
    let duration = Duration::from_secs_f64(args.duration);
    let started = Instant::now();
    let deadline = started + duration;

    let progress = {
        let stats = stats.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut last = 0;
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let now = stats.postings.load(Ordering::Relaxed);
                eprintln!(
                    "bench: {:>5.1} s  {:>7} postings/s  total {}  replays {}  rejected {}  errors {}",
                    started.elapsed().as_secs_f64(),
                    now - last,
                    now,
                    stats.replays.load(Ordering::Relaxed),
                    stats.rejected.load(Ordering::Relaxed),
                    stats.errors.load(Ordering::Relaxed),
                );
                last = now;
            }
        })
    };

    match args.rate {
        None => {
            let mut workers = Vec::new();
            for w in 0..args.concurrency {
                let mut client = channels[w % channels.len()].clone();
                let (plan, stats, hist) = (plan.clone(), stats.clone(), hist.clone());
                workers.push(tokio::spawn(async move {
                    let mut rng = Rng::new(w as u64 + 1);
                    let mut local = Histogram::<u64>::new_with_bounds(1, 120_000_000, 3).unwrap();
                    let mut recent: Vec<pb::PostRequest> = Vec::new();
                    let mut n = 0u64;
                    while Instant::now() < deadline {
                        let (req, dup) = next_request(&plan, &mut rng, &recent, w, &mut n);
                        let t0 = Instant::now();
                        let keep = send(&mut client, req.clone(), dup, &stats).await;
                        local.saturating_record(t0.elapsed().as_micros().max(1) as u64);
                        remember(&mut recent, keep.then_some(req), &mut rng);
                    }
                    hist.lock().unwrap().add(&local).unwrap();
                }));
            }
            for w in workers {
                w.await?;
            }
        }
        Some(rate) => {
            // Open loop: request i is due at start + i/rate, whatever happened before it.
            let sem = Arc::new(Semaphore::new(args.concurrency));
            let recent = Arc::new(Mutex::new(Vec::<pb::PostRequest>::new()));
            let mut rng = Rng::new(7);
            let mut tasks = tokio::task::JoinSet::new();
            // The pacer: a thread that wakes at each request's due time. The runtime's timer
            // rounds every sleep up to its next millisecond tick, which made each send up to
            // 1 ms late; counted from the due time, that lateness was the generator's own,
            // yet reported as the server's latency. A thread's sleep wakes within tens of µs.
            let (ticks, mut due_times) = tokio::sync::mpsc::unbounded_channel::<Instant>();
            let pacer = std::thread::spawn(move || {
                for n in 0u64.. {
                    let due = started + Duration::from_secs_f64(n as f64 / rate);
                    if due >= deadline {
                        break;
                    }
                    std::thread::sleep(due.saturating_duration_since(Instant::now()));
                    if ticks.send(due).is_err() {
                        break;
                    }
                }
            });
            let mut i = 0u64;
            while let Some(due) = due_times.recv().await {
                let (req, dup) = {
                    let r = recent.lock().unwrap();
                    let mut n = i;
                    next_request(&plan, &mut rng, &r, 0, &mut n)
                };
                i += 1;
                let permit = sem.clone().acquire_owned().await?;
                let mut client = channels[i as usize % channels.len()].clone();
                let (stats, hist, recent) = (stats.clone(), hist.clone(), recent.clone());
                let seed = rng.next();
                tasks.spawn(async move {
                    let keep = send(&mut client, req.clone(), dup, &stats).await;
                    let micros = due.elapsed().as_micros().max(1) as u64;
                    drop(permit);
                    hist.lock().unwrap().saturating_record(micros);
                    remember(
                        &mut recent.lock().unwrap(),
                        keep.then_some(req),
                        &mut Rng::new(seed),
                    );
                });
                while tasks.try_join_next().is_some() {}
            }
            pacer.join().map_err(|_| "the pacer thread panicked")?;
            while tasks.join_next().await.is_some() {}
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    progress.abort();

    let hist = hist.lock().unwrap();
    let ms = |q: f64| {
        if hist.is_empty() {
            0.0
        } else {
            hist.value_at_quantile(q) as f64 / 1000.0
        }
    };
    let postings = stats.postings.load(Ordering::Relaxed);
    if let Some(e) = stats.first_error.lock().unwrap().as_ref() {
        eprintln!("bench: first error: {e}");
    }
    Ok(serde_json::json!({
        "postings": postings,
        "seconds": (seconds * 1000.0).round() / 1000.0,
        "postings_per_sec": (postings as f64 / seconds).round(),
        "p50_ms": ms(0.5),
        "p99_ms": ms(0.99),
        "p999_ms": ms(0.999),
        "errors": stats.errors.load(Ordering::Relaxed),
        "replays": stats.replays.load(Ordering::Relaxed),
        "rejected": stats.rejected.load(Ordering::Relaxed),
        "setup_postings": setup_postings,
        "requests": hist.len(),
        "concurrency": args.concurrency,
        "rate": args.rate,
        "accounts": args.accounts,
        "hot_account": args.hot_account,
        "legs": args.legs,
        "duplicates": args.duplicates,
        "run": plan.run_id,
    }))
}

/// The next request: a re-send of a recent one (a duplicate), or a new posting.
fn next_request(
    plan: &Plan,
    rng: &mut Rng,
    recent: &[pb::PostRequest],
    worker: usize,
    n: &mut u64,
) -> (pb::PostRequest, bool) {
    if !recent.is_empty() && rng.chance(plan.duplicates) {
        return (recent[rng.below(recent.len())].clone(), true);
    }
    *n += 1;
    let key = format!("{}-{worker}-{n}", plan.run_id);
    (plan.posting(rng, key), false)
}

/// Keeps an answered request for later duplicates (a bounded window).
fn remember(recent: &mut Vec<pb::PostRequest>, req: Option<pb::PostRequest>, rng: &mut Rng) {
    if let Some(req) = req {
        if recent.len() < REPLAY_WINDOW {
            recent.push(req);
        } else {
            let slot = rng.below(REPLAY_WINDOW);
            recent[slot] = req;
        }
    }
}
