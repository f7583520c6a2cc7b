//! `ledger bench-as-of`: the as-of scenario. Loads one account with many legs (back-dated and
//! future-dated ones among them) straight into the journal tables, in the shape the writer
//! leaves them (running totals per leg, versions, `ledger_state`, `account_totals`), then
//! measures over gRPC:
//! - `GetBalance` latency (p50/p99) for each kind of cut-off: none, recorded only, effective
//!   only, both;
//! - the write path (`Post` throughput with concurrent callers, a tenth of the postings back-
//!   or future-dated) with and without the as-of structure (the GiST index
//!   `entries_irregular_span`), alternating runs.
//!
//! Prints a readable summary and, as its last line, a JSON summary.

use hdrhistogram::Histogram;
use ledger_server::embedded_pg::{EmbeddedPg, PgOptions};
use ledger_server::grpc::pb;
use ledger_server::grpc::pb::ledger_client::LedgerClient;
use ledger_server::server::{self, OpsOptions, ServerOptions};
use ledger_server::storage::fixture::{Fixture, History};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

use ledger_server::BoxError;

/// The hot account the scenario loads and queries.
pub const HOT: &str = "bench:hot";
/// Its counterpart (credit-normal, may go negative).
pub const WORLD: &str = "bench:world";
/// Legs of the hot account per loaded posting (plus one balancing leg on the counterpart).
pub const HOT_LEGS_PER_POSTING: i64 = 10;
/// Days of history the loaded legs span (recorded times), ending a little before now.
pub const HISTORY_DAYS: i64 = 365;
/// Largest back- or future-dating of a loaded posting, in days.
pub const MAX_SHIFT_DAYS: i64 = 30;

#[derive(clap::Args, Debug, Clone)]
pub struct BenchAsOfArgs {
    /// PostgreSQL URL of an EMPTY database to load (its journal is filled). Without it, a
    /// private PostgreSQL is started in --data-dir and removed afterwards.
    #[arg(long, env = "BENCH_DATABASE_URL")]
    pub database_url: Option<String>,
    /// Where the private PostgreSQL lives (without --database-url).
    #[arg(long, default_value = "/tmp/ledger-bench-asof")]
    pub data_dir: PathBuf,
    /// Legs of the hot account.
    #[arg(long, default_value_t = 1_000_000)]
    pub legs: i64,
    /// Percent of loaded postings back-dated, and the same percent future-dated.
    #[arg(long, default_value_t = 5)]
    pub irregular_percent: i64,
    /// GetBalance calls measured per kind of cut-off (after a warm-up).
    #[arg(long, default_value_t = 2000)]
    pub samples: u64,
    /// Seconds of each write-path run.
    #[arg(long, default_value_t = 8)]
    pub write_seconds: u64,
    /// Write-path runs with and without the structure (alternating).
    #[arg(long, default_value_t = 2)]
    pub write_rounds: u32,
    /// Concurrent posting callers in the write-path runs.
    #[arg(long, default_value_t = 64)]
    pub writers: usize,
}

/// Runs the scenario.
pub async fn run(args: BenchAsOfArgs) -> Result<ExitCode, BoxError> {
    let (url, dir) = (args.database_url.clone(), args.data_dir.clone());
    on_bench_database(url, dir, "ledger bench-as-of", |url, ops| async move {
        scenario(&args, &url, ops).await
    })
    .await
}

/// Runs `scenario` on the database of `database_url`, or without one on a private
/// PostgreSQL started in `data_dir` and removed afterwards. The private PostgreSQL keeps
/// `fsync` on (durable), as a deployment would, and the server logs in on it as `ledger
/// serve` does on the embedded one.
pub(crate) async fn on_bench_database<F, Fut>(
    database_url: Option<String>,
    data_dir: PathBuf,
    holder: &str,
    scenario: F,
) -> Result<ExitCode, BoxError>
where
    F: FnOnce(String, OpsOptions) -> Fut,
    Fut: std::future::Future<Output = Result<(), BoxError>>,
{
    let (url, pg) = match database_url {
        Some(url) => (url, None),
        None => {
            let mut opts = PgOptions::new(data_dir);
            opts.fast_unsafe = false;
            opts.holder = holder.into();
            let pg = tokio::task::spawn_blocking(move || EmbeddedPg::start(opts)).await??;
            pg.create_database_if_missing("ledger")?;
            let url = pg.connection_string("ledger");
            (url, Some(pg))
        }
    };
    let ops = match pg {
        Some(_) => OpsOptions {
            db_login: Some(ledger_server::storage::roles::SERVICE_LOGIN.to_owned()),
            db_role: Some(ledger_server::storage::APP_ROLE.to_owned()),
            ..Default::default()
        },
        None => Default::default(),
    };
    let result = scenario(url, ops).await;
    if let Some(mut pg) = pg {
        pg.set_remove_on_drop(true);
        tokio::task::spawn_blocking(move || pg.stop()).await??;
    }
    result?;
    Ok(ExitCode::SUCCESS)
}

async fn scenario(args: &BenchAsOfArgs, url: &str, ops: OpsOptions) -> Result<(), BoxError> {
    ledger_server::storage::migrate(url).await?;
    let db = Fixture::open(url).await?;
    let (load_secs, irregular) = load(&db, args).await?;
    let server = server::start(ServerOptions {
        listen: "127.0.0.1:0".parse()?,
        database_url: url.to_owned(),
        ops,
        tuning: Default::default(),
    })
    .await?;
    let endpoint = format!("http://{}", server.local_addr);
    let client = LedgerClient::new(Channel::from_shared(endpoint.clone())?.connect().await?);
    let reads = read_latencies(client, &db, args).await?;
    let write = write_rates(&db, &endpoint, args).await?;
    server.shutdown().await?;
    let summary = format!(
        r#"{{"scenario":"as-of","legs":{},"irregular_legs":{irregular},"load_seconds":{load_secs:.1},"get_balance":[{}],"write":{write}}}"#,
        args.legs,
        reads.join(","),
    );
    super::output::print_out(&format!("{summary}\n"))?;
    Ok(())
}

/// Loads the history into an empty database: its seconds, and how many legs are back- or
/// future-dated.
async fn load(db: &Fixture, args: &BenchAsOfArgs) -> Result<(f64, i64), BoxError> {
    let existing = db.postings().await?;
    if existing > 0 {
        return Err(
            format!("the database already holds {existing} postings; give an empty one").into(),
        );
    }
    let t = Instant::now();
    db.load_history(&History {
        hot: HOT,
        world: WORLD,
        legs: args.legs,
        legs_per_posting: HOT_LEGS_PER_POSTING,
        days: HISTORY_DAYS,
        max_shift_days: MAX_SHIFT_DAYS,
        irregular_percent: args.irregular_percent,
    })
    .await?;
    let load_secs = t.elapsed().as_secs_f64();
    let irregular = db.irregular_legs(HOT).await?;
    eprintln!(
        "loaded {} legs on {HOT} ({irregular} back- or future-dated) in {load_secs:.1} s",
        args.legs
    );
    Ok((load_secs, irregular))
}

/// GetBalance latencies per kind of cut-off, as JSON objects.
async fn read_latencies(
    mut client: LedgerClient<Channel>,
    db: &Fixture,
    args: &BenchAsOfArgs,
) -> Result<Vec<String>, BoxError> {
    let [r_lo, r_hi, e_lo, e_hi] = db.time_bounds().await?;
    let mut rng = XorShift(0x5eed_1234_abcd_0001);
    let mut reads = Vec::new();
    for kind in ["none", "recorded", "effective", "both"] {
        let mut h = Histogram::<u64>::new(3)?;
        for i in 0..(args.samples + args.samples / 10) {
            let (r, e) = (uniform(&mut rng, r_lo, r_hi), uniform(&mut rng, e_lo, e_hi));
            let (r, e) = match kind {
                "none" => (None, None),
                "recorded" => (Some(r), None),
                "effective" => (None, Some(e)),
                _ => (Some(r), Some(e)),
            };
            let as_of = (kind != "none").then(|| pb::AsOf {
                recorded_at: r.map(ts),
                effective_at: e.map(ts),
            });
            let start = Instant::now();
            client
                .get_balance(pb::GetBalanceRequest {
                    ledger: String::new(),
                    account: HOT.into(),
                    as_of,
                })
                .await?;
            // The first tenth warms caches and connections.
            if i >= args.samples / 10 {
                h.record(start.elapsed().as_micros() as u64)?;
            }
        }
        let (p50, p99, max) = (
            h.value_at_quantile(0.5) as f64 / 1000.0,
            h.value_at_quantile(0.99) as f64 / 1000.0,
            h.max() as f64 / 1000.0,
        );
        eprintln!("GetBalance cut-off {kind:<9}: p50 {p50:.2} ms  p99 {p99:.2} ms  max {max:.2} ms  ({} calls)", h.len());
        reads.push(format!(r#"{{"cut_off":"{kind}","p50_ms":{p50:.3},"p99_ms":{p99:.3},"max_ms":{max:.3},"calls":{}}}"#, h.len()));
    }
    Ok(reads)
}

/// The write path with and without the as-of index, alternating, as a JSON object (`null`
/// without write rounds).
async fn write_rates(
    db: &Fixture,
    endpoint: &str,
    args: &BenchAsOfArgs,
) -> Result<String, BoxError> {
    let (mut with, mut without) = (Vec::new(), Vec::new());
    let mut round = 0u64;
    for r in 0..args.write_rounds {
        for indexed in [true, false] {
            db.set_as_of_index(indexed).await?;
            round += 1;
            let rate = post_rate(endpoint, args, round).await?;
            let how = if indexed {
                "with the index   "
            } else {
                "without the index"
            };
            eprintln!("write round {} {how}: {rate:.0} postings/s", r + 1);
            if indexed {
                with.push(rate)
            } else {
                without.push(rate)
            }
        }
    }
    db.set_as_of_index(true).await?;
    if args.write_rounds == 0 {
        return Ok("null".to_string());
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let (with, without) = (mean(&with), mean(&without));
    let slowdown = if without > 0.0 {
        (1.0 - with / without) * 100.0
    } else {
        0.0
    };
    eprintln!("write path: {with:.0} postings/s with the index, {without:.0} without ({slowdown:+.1}% slower with it)");
    Ok(format!(
        r#"{{"with_index_per_s":{with:.0},"without_index_per_s":{without:.0},"slowdown_percent":{slowdown:.1},"writers":{},"seconds_per_run":{},"rounds":{}}}"#,
        args.writers, args.write_seconds, args.write_rounds
    ))
}

/// Postings per second over `write_seconds`, from `writers` concurrent callers on 4 channels,
/// each posting hot ← world; one in ten back-dated, one in ten future-dated.
async fn post_rate(endpoint: &str, args: &BenchAsOfArgs, round: u64) -> Result<f64, BoxError> {
    let mut channels = Vec::new();
    for _ in 0..4 {
        channels.push(Channel::from_shared(endpoint.to_owned())?.connect().await?);
    }
    let deadline = Instant::now() + Duration::from_secs(args.write_seconds);
    let mut tasks = Vec::new();
    for w in 0..args.writers {
        let mut client = LedgerClient::new(channels[w % channels.len()].clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                let now = time::OffsetDateTime::now_utc();
                let effective_at = match n % 10 {
                    3 => Some(ts(now - time::Duration::hours(1 + (n % 48) as i64))),
                    7 => Some(ts(now + time::Duration::hours(1 + (n % 48) as i64))),
                    _ => None,
                };
                client
                    .post(pb::PostRequest {
                        idempotency_key: format!("bench-{round}-{w}-{n}"),
                        legs: vec![
                            pb::Leg {
                                account: HOT.into(),
                                direction: pb::Direction::Debit as i32,
                                amount: "1.25".into(),
                            },
                            pb::Leg {
                                account: WORLD.into(),
                                direction: pb::Direction::Credit as i32,
                                amount: "1.25".into(),
                            },
                        ],
                        effective_at,
                        memo: String::new(),
                        metadata: Default::default(),
                        ..Default::default()
                    })
                    .await?;
                n += 1;
            }
            Ok::<u64, tonic::Status>(n)
        }));
    }
    let start = Instant::now();
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

pub(crate) fn ts(t: time::OffsetDateTime) -> prost_types::Timestamp {
    let n = t.unix_timestamp_nanos();
    prost_types::Timestamp {
        seconds: n.div_euclid(1_000_000_000) as i64,
        nanos: (n.rem_euclid(1_000_000_000) / 1000 * 1000) as i32,
    }
}

pub(crate) struct XorShift(pub(crate) u64);

impl XorShift {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

pub(crate) fn uniform(
    rng: &mut XorShift,
    lo: time::OffsetDateTime,
    hi: time::OffsetDateTime,
) -> time::OffsetDateTime {
    let span = (hi - lo).whole_microseconds().max(1) as u64;
    lo + time::Duration::microseconds((rng.next() % span) as i64)
}
