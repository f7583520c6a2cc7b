//! `ledger bench-writer`: the writer's own work for batches of N postings, straight on a
//! database: no gRPC, no service, no queue. Each lane (a connection of its own, as the
//! writer's lanes) runs batches of already validated postings through the three steps of the
//! write path and times each: `storage::batch::load` (the key claim, the ledger's lock, the
//! snapshot: SQL), `domain::write::decide` (pure, in memory), `storage::batch::write` (the
//! inserts, the totals, the commit: SQL). With `ledger bench --batch N` against a server on
//! the same database, the three costs of a posting are known apart: gRPC and the service (the
//! difference), decide, and the SQL.
//!
//! Prints, as its last line, a JSON summary.

use ledger_core::account::{AccountCache, NewAccount};
use ledger_core::posting::{LegRequest, PostRequest};
use ledger_core::write::{decide, Command, NamedPostings, Rounds, WriteRequest};
use ledger_core::{Account, Direction, NormalBalance};
use ledger_server::storage::{self, accounts::Created, batch, Conn};
use ledger_server::BoxError;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// The caller the benchmark's postings are recorded for.
const CALLER: &str = "bench-writer";
/// Minor units each asset account is funded with (1,000,000.00 EUR).
const FUNDING_MINOR: i64 = 100_000_000;

/// Options of `ledger bench-writer`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchWriterArgs {
    /// PostgreSQL URL of a ledger database (migrated here if needed) that no server writes
    /// to while this runs, as its owner or the service's login.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    /// Postings per batch (as a PostBatch of N makes them).
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// Batches in flight at once, each on its own connection (as the writer's lanes).
    #[arg(long, default_value_t = ledger_server::writer::WRITER_LANES)]
    pub lanes: usize,
    /// How long to run, in seconds.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Asset accounts to transfer between.
    #[arg(long, default_value_t = 1000)]
    pub accounts: usize,
    /// Every posting also credits one shared account (a fees account).
    #[arg(long)]
    pub hot_account: bool,
    /// Prefix of the account codes.
    #[arg(long, default_value = "bw")]
    pub prefix: String,
}

/// Time spent in each step, summed over a lane's batches.
#[derive(Clone, Copy, Default)]
struct Steps {
    batches: u64,
    postings: u64,
    load: Duration,
    decide: Duration,
    write: Duration,
}

impl Steps {
    fn add(&mut self, o: Steps) {
        self.batches += o.batches;
        self.postings += o.postings;
        self.load += o.load;
        self.decide += o.decide;
        self.write += o.write;
    }
}

/// Runs the benchmark and prints its JSON summary.
pub async fn run(args: BenchWriterArgs) -> Result<(), BoxError> {
    let max = ledger_core::limits::MAX_BATCH_REQUESTS;
    if args.batch == 0 || args.batch > max || args.lanes == 0 || args.accounts < 2 {
        return Err(format!("--batch must be 1..={max} (MAX_BATCH_REQUESTS), --lanes at least 1, --accounts at least 2").into());
    }
    storage::migrate(&args.database_url).await?;
    let pool = storage::pool(&args.database_url, args.lanes + 1)?;
    let accounts = Arc::new(setup(&args, &mut pool.get().await?).await?);
    let cache = Arc::new(RwLock::new(AccountCache::default()));
    let run = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis()
    );
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(args.duration);
    let mut lanes = Vec::new();
    for lane in 0..args.lanes {
        let conn = pool.get().await?;
        let (args, accounts, cache) = (args.clone(), accounts.clone(), cache.clone());
        let keys = format!("{run}-{lane}");
        lanes.push(tokio::spawn(async move {
            run_lane(&conn, &args, &accounts, &cache, &keys, until).await
        }));
    }
    let mut total = Steps::default();
    for l in lanes {
        total.add(l.await??);
    }
    let seconds = started.elapsed().as_secs_f64();
    super::output::print_out(&format!("{}\n", summary(&args, total, seconds)))?;
    Ok(())
}

/// The accounts by code (created if missing), each asset account funded.
async fn setup(
    args: &BenchWriterArgs,
    conn: &mut Conn,
) -> Result<HashMap<String, Account>, BoxError> {
    let p = &args.prefix;
    let mut specs = vec![(format!("{p}:funding"), NormalBalance::Credit, true)];
    if args.hot_account {
        specs.push((format!("{p}:hot"), NormalBalance::Credit, true));
    }
    specs
        .extend((0..args.accounts).map(|i| (format!("{p}:acct:{i}"), NormalBalance::Debit, false)));
    let mut accounts = HashMap::new();
    for (code, normal, negative) in specs {
        let new =
            NewAccount::validate(&code, "EUR", 2, Some(normal), negative, Default::default())?;
        let a = match storage::accounts::create(conn, ledger_core::ledger::DEFAULT_LEDGER_ID, &new)
            .await?
        {
            Created::New(a) | Created::Existing(a) => a,
        };
        accounts.insert(code, a);
    }
    let fund: Vec<WriteRequest> = (0..args.accounts)
        .map(|i| {
            let to = format!("{p}:acct:{i}");
            let key = format!("fund-{}-{i}", std::process::id());
            request(
                &accounts,
                key,
                &[
                    (&to, Direction::Debit, FUNDING_MINOR),
                    (&format!("{p}:funding"), Direction::Credit, FUNDING_MINOR),
                ],
            )
        })
        .collect();
    for chunk in fund.chunks(ledger_server::writer::MAX_BATCH) {
        ledger_server::writer::apply_alone(conn, ledger_core::ledger::DEFAULT_LEDGER_ID, chunk)
            .await?;
    }
    Ok(accounts)
}

/// A validated posting of these legs (account, side, minor units at scale 2).
fn request(
    accounts: &HashMap<String, Account>,
    key: String,
    legs: &[(&str, Direction, i64)],
) -> WriteRequest {
    let req = PostRequest {
        idempotency_key: key,
        legs: legs
            .iter()
            .map(|(account, direction, minor)| LegRequest {
                account: (*account).to_owned(),
                direction: Some(*direction),
                amount: ledger_core::amount::format_minor(i128::from(*minor), 2),
            })
            .collect(),
        effective_at: None,
        memo: String::new(),
        metadata: Default::default(),
        hold: false,
        hold_expires_at: None,
        conditions: Vec::new(),
    };
    let valid = req
        .validate(accounts)
        .expect("the benchmark's postings are valid");
    WriteRequest {
        caller: CALLER.to_owned(),
        command: Command::Post(valid),
    }
}

/// Batch `b` of a lane: transfers between accounts picked in turn (a fee to the hot account
/// when there is one).
fn next_batch(
    args: &BenchWriterArgs,
    accounts: &HashMap<String, Account>,
    keys: &str,
    b: u64,
) -> Vec<WriteRequest> {
    let p = &args.prefix;
    (0..args.batch as u64)
        .map(|i| {
            let n = b * args.batch as u64 + i;
            let from = format!("{p}:acct:{}", n.wrapping_mul(7919) % args.accounts as u64);
            let to = format!(
                "{p}:acct:{}",
                (n.wrapping_mul(7919) + 1 + n % 7) % args.accounts as u64
            );
            let minor = 2 + (n % 998) as i64;
            let key = format!("{keys}-{n}");
            if args.hot_account {
                let hot = format!("{p}:hot");
                request(
                    accounts,
                    key,
                    &[
                        (&to, Direction::Debit, minor),
                        (&hot, Direction::Credit, 1),
                        (&from, Direction::Credit, minor - 1),
                    ],
                )
            } else {
                request(
                    accounts,
                    key,
                    &[
                        (&to, Direction::Debit, minor),
                        (&from, Direction::Credit, minor),
                    ],
                )
            }
        })
        .collect()
}

/// One lane's batches until `until`, each driven through its rounds as the writer drives
/// them (posts only: nothing to read before the batch, everything admitted), its load, decide
/// and write timed apart.
async fn run_lane(
    conn: &Conn,
    args: &BenchWriterArgs,
    accounts: &HashMap<String, Account>,
    cache: &RwLock<AccountCache>,
    keys: &str,
    until: Instant,
) -> Result<Steps, BoxError> {
    let mut steps = Steps::default();
    while Instant::now() < until {
        let requests = next_batch(args, accounts, keys, steps.batches);
        let rounds = Rounds::new(requests.into_iter().map(Ok).collect());
        steps.add(timed_batch(conn, rounds, cache).await?);
    }
    Ok(steps)
}

/// One batch's rounds, each step timed.
async fn timed_batch(
    conn: &Conn,
    mut rounds: Rounds,
    cache: &RwLock<AccountCache>,
) -> Result<Steps, BoxError> {
    let named = NamedPostings::default();
    let mut steps = Steps::default();
    loop {
        let t0 = Instant::now();
        let (plan, clock, t1) = {
            let Some(batch) = rounds.batch() else {
                return Ok(steps);
            };
            let ids: Vec<uuid::Uuid> = batch.iter().map(|_| uuid::Uuid::now_v7()).collect();
            let snapshot = match batch::load(
                conn,
                ledger_core::ledger::DEFAULT_LEDGER_ID,
                &batch,
                cache,
                &named,
                // Its accounts have no debit limits: there are no windows to remember.
                (
                    &std::sync::Mutex::new(batch::WindowMemo::default()),
                    &mut batch::WindowDraft::default(),
                ),
            )
            .await
            {
                Ok(s) => s,
                Err(e) => {
                    batch::rollback(conn).await;
                    return Err(e.into());
                }
            };
            let t1 = Instant::now();
            (decide(&snapshot, &batch, &ids), snapshot.clock, t1)
        };
        let t2 = Instant::now();
        steps.load += t1 - t0;
        steps.decide += t2 - t1;
        let Some(plan) = rounds.decided(plan) else {
            batch::rollback(conn).await;
            continue;
        };
        if let Err(e) = batch::write(conn, &plan, &clock).await {
            batch::rollback(conn).await;
            return Err(e.into());
        }
        steps.write += t2.elapsed();
        steps.batches += 1;
        steps.postings += plan.postings.len() as u64;
        return Ok(steps);
    }
}

/// The run's JSON summary: throughput, and each step's time per batch and per posting.
fn summary(args: &BenchWriterArgs, s: Steps, seconds: f64) -> serde_json::Value {
    let per_batch =
        |d: Duration| (d.as_secs_f64() * 1e3 / s.batches.max(1) as f64 * 1000.0).round() / 1000.0;
    let per_posting =
        |d: Duration| (d.as_secs_f64() * 1e6 / s.postings.max(1) as f64 * 10.0).round() / 10.0;
    serde_json::json!({
        "postings": s.postings,
        "seconds": (seconds * 1000.0).round() / 1000.0,
        "postings_per_sec": (s.postings as f64 / seconds).round(),
        "batches": s.batches,
        "batch": args.batch,
        "lanes": args.lanes,
        "hot_account": args.hot_account,
        "load_ms_per_batch": per_batch(s.load),
        "decide_ms_per_batch": per_batch(s.decide),
        "write_ms_per_batch": per_batch(s.write),
        "sql_us_per_posting": per_posting(s.load + s.write),
        "decide_us_per_posting": per_posting(s.decide),
    })
}
