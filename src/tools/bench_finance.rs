//! `ledger bench-finance`: the finance queries on a large book. Loads a chart of accounts
//! under the five top segments with two-leg postings between them (back- and future-dated
//! ones and open holds among them) straight into the journal tables, in the shape the writer
//! leaves them, then measures over gRPC the latency (p50/p99) of:
//! - `ListRollups` of the whole tree (depth 2) at each kind of cut-off (none, recorded only,
//!   effective only, both), and of one group (`liabilities:payables`, depth 1) at both;
//! - `ListPostings` by each filter: one order's metadata, one day's effective range, one
//!   caller in one hour's recorded range, an account and its order.
//!
//! Prints a readable summary and, as its last line, a JSON summary.

use super::bench_asof::{on_bench_database, ts, uniform, XorShift};
use hdrhistogram::Histogram;
use ledger_server::grpc::pb;
use ledger_server::grpc::pb::ledger_client::LedgerClient;
use ledger_server::server::{self, OpsOptions, ServerOptions};
use ledger_server::storage::fixture::{Chart, Fixture};
use ledger_server::BoxError;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;
use tonic::transport::Channel;

#[derive(clap::Args, Debug, Clone)]
pub struct BenchFinanceArgs {
    /// PostgreSQL URL of an EMPTY database to load (its journal is filled). Without it, a
    /// private PostgreSQL is started in --data-dir and removed afterwards.
    #[arg(long, env = "BENCH_DATABASE_URL")]
    pub database_url: Option<String>,
    /// Where the private PostgreSQL lives (without --database-url).
    #[arg(long, default_value = "/tmp/ledger-bench-finance")]
    pub data_dir: PathBuf,
    /// Accounts of the chart.
    #[arg(long, default_value_t = 100_000)]
    pub accounts: i64,
    /// Postings (two legs each) between them.
    #[arg(long, default_value_t = 1_000_000)]
    pub postings: i64,
    /// Days the recorded times span, ending a minute ago.
    #[arg(long, default_value_t = 365)]
    pub days: i64,
    /// Calls measured per query (after a warm-up of a tenth more).
    #[arg(long, default_value_t = 40)]
    pub samples: u64,
}

/// Runs the scenario (on a private PostgreSQL without `--database-url`, as `bench-as-of`).
pub async fn run(args: BenchFinanceArgs) -> Result<ExitCode, BoxError> {
    let (url, dir) = (args.database_url.clone(), args.data_dir.clone());
    on_bench_database(url, dir, "ledger bench-finance", |url, ops| async move {
        scenario(&args, &url, ops).await
    })
    .await
}

async fn scenario(args: &BenchFinanceArgs, url: &str, ops: OpsOptions) -> Result<(), BoxError> {
    ledger_server::storage::migrate(url).await?;
    let db = Fixture::open(url).await?;
    if db.postings().await? > 0 {
        return Err("the database already holds postings; give an empty one".into());
    }
    let t = Instant::now();
    db.load_chart(&Chart {
        accounts: args.accounts,
        postings: args.postings,
        days: args.days,
        irregular_percent: 2,
        hold_percent: 1,
    })
    .await?;
    let load_secs = t.elapsed().as_secs_f64();
    eprintln!(
        "loaded {} accounts and {} postings in {load_secs:.1} s",
        args.accounts, args.postings
    );
    let server = server::start(ServerOptions {
        listen: "127.0.0.1:0".parse()?,
        database_url: url.to_owned(),
        ops,
        tuning: Default::default(),
    })
    .await?;
    let endpoint = format!("http://{}", server.local_addr);
    let client = LedgerClient::new(Channel::from_shared(endpoint)?.connect().await?);
    let bounds = db.time_bounds().await?;
    let mut rows = rollup_latencies(client.clone(), bounds, args).await?;
    rows.extend(search_latencies(client, bounds, args).await?);
    server.shutdown().await?;
    let summary = format!(
        r#"{{"scenario":"finance","accounts":{},"postings":{},"load_seconds":{load_secs:.1},"queries":[{}]}}"#,
        args.accounts,
        args.postings,
        rows.join(","),
    );
    super::output::print_out(&format!("{summary}\n"))?;
    Ok(())
}

/// One query's latencies: a readable line on stderr, a JSON object returned.
fn row(query: &str, h: &Histogram<u64>) -> String {
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let (p50, p99, max) = (ms(0.5), ms(0.99), h.max() as f64 / 1000.0);
    eprintln!(
        "{query:<34}: p50 {p50:8.2} ms  p99 {p99:8.2} ms  max {max:8.2} ms  ({} calls)",
        h.len()
    );
    format!(
        r#"{{"query":"{query}","p50_ms":{p50:.3},"p99_ms":{p99:.3},"max_ms":{max:.3},"calls":{}}}"#,
        h.len()
    )
}

type Bounds = [time::OffsetDateTime; 4];

async fn rollup_latencies(
    mut client: LedgerClient<Channel>,
    [r_lo, r_hi, e_lo, e_hi]: Bounds,
    args: &BenchFinanceArgs,
) -> Result<Vec<String>, BoxError> {
    let mut rng = XorShift(0x5eed_f1a4_0000_0001);
    let mut out = Vec::new();
    let kinds = [
        ("none", "", 2),
        ("recorded", "", 2),
        ("effective", "", 2),
        ("both", "", 2),
        ("both", "liabilities:payables", 1),
    ];
    for (kind, prefix, depth) in kinds {
        let mut h = Histogram::<u64>::new(3)?;
        for i in 0..(args.samples + args.samples / 10) {
            let (r, e) = (uniform(&mut rng, r_lo, r_hi), uniform(&mut rng, e_lo, e_hi));
            let as_of = match kind {
                "none" => None,
                "recorded" => Some(pb::AsOf {
                    recorded_at: Some(ts(r)),
                    effective_at: None,
                }),
                "effective" => Some(pb::AsOf {
                    recorded_at: None,
                    effective_at: Some(ts(e)),
                }),
                _ => Some(pb::AsOf {
                    recorded_at: Some(ts(r)),
                    effective_at: Some(ts(e)),
                }),
            };
            let req = pb::ListRollupsRequest {
                prefix: prefix.into(),
                depth,
                as_of,
                page_size: 1000,
                ..Default::default()
            };
            let start = Instant::now();
            client.list_rollups(req).await?;
            if i >= args.samples / 10 {
                h.record(start.elapsed().as_micros() as u64)?;
            }
        }
        let name = match prefix {
            "" => format!("ListRollups root depth 2, {kind}"),
            p => format!("ListRollups {p} depth 1, {kind}"),
        };
        out.push(row(&name, &h));
    }
    Ok(out)
}

async fn search_latencies(
    mut client: LedgerClient<Channel>,
    [r_lo, r_hi, e_lo, e_hi]: Bounds,
    args: &BenchFinanceArgs,
) -> Result<Vec<String>, BoxError> {
    let mut rng = XorShift(0x5eed_5ea4_0000_0002);
    let orders = (args.postings / 20).max(1) as u64;
    let mut out = Vec::new();
    for kind in [
        "metadata",
        "effective day",
        "caller, recorded hour",
        "account and metadata",
    ] {
        let mut h = Histogram::<u64>::new(3)?;
        for i in 0..(args.samples * 5 + args.samples / 2) {
            let order = format!("o-{}", rng.next() % orders);
            let (r, e) = (uniform(&mut rng, r_lo, r_hi), uniform(&mut rng, e_lo, e_hi));
            let range = |t: time::OffsetDateTime, d: time::Duration| {
                Some(pb::TimeRange {
                    start: Some(ts(t)),
                    end: Some(ts(t + d)),
                })
            };
            let mut req = pb::ListPostingsRequest {
                page_size: 100,
                ..Default::default()
            };
            match kind {
                "metadata" => req.metadata = [("order".to_owned(), order)].into(),
                "effective day" => req.effective = range(e, time::Duration::days(1)),
                "caller, recorded hour" => {
                    req.caller = "svc-a".into();
                    req.recorded = range(r, time::Duration::hours(1));
                }
                _ => {
                    let n = rng.next() % (args.accounts as u64);
                    req.account = account_code(n);
                    req.metadata = [("order".to_owned(), order)].into();
                }
            }
            let start = Instant::now();
            client.list_postings(req).await?;
            if i >= args.samples / 2 {
                h.record(start.elapsed().as_micros() as u64)?;
            }
        }
        out.push(row(&format!("ListPostings by {kind}"), &h));
    }
    Ok(out)
}

/// The code the chart gives account `n` (`storage::fixture`'s groups, by `n % 10`).
fn account_code(n: u64) -> String {
    let group = [
        "assets:bank",
        "assets:receivables",
        "liabilities:payables",
        "liabilities:customers",
        "liabilities:customers",
        "income:fees",
        "income:interest",
        "expenses:cloud",
        "expenses:payroll",
        "equity:capital",
    ][(n % 10) as usize];
    format!("{group}:a{n}")
}
