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
//! With `--ledgers N` (N > 1) it works on the ledgers `bench-1` … `bench-N` (created, or found
//! from an earlier run), each with the same accounts, and spreads the callers (or, open loop,
//! the calls) evenly over them; a call's postings are of one ledger. It prints progress
//! every second to stderr and, as the last line on stdout, one JSON object with the results
//! (`ledgers`, and each ledger's postings and rate in `per_ledger`). The client's own retries
//! are off: every error is counted.
//!
//! `args.rs` has the options, `setup.rs` makes the accounts, `load.rs` generates the load
//! (closed or open loop), `stats.rs` counts the answers and `summary.rs` reports them.

mod args;
mod load;
mod setup;
mod stats;
mod summary;

pub use args::{BenchArgs, Scenario, MAX_BENCH_LEDGERS};
use ledger_client::{Client, ClientOptions, NewLedger, RetryPolicy};
use ledger_server::BoxError;
use load::{closed_loop, open_loop, Shared};
use setup::setup;
use stats::{histogram, Stats};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use summary::{progress, summary};

/// HTTP/2 connections the load is spread over (one client each).
pub const BENCH_CHANNELS: usize = 4;

/// Runs the benchmark and prints its results; the JSON summary is the last stdout line.
pub async fn run(args: BenchArgs) -> Result<(), BoxError> {
    args.check()?;
    let mut options = ClientOptions {
        connect: args.client.options()?,
        retry: RetryPolicy::never(),
        coalesce: None,
        ledger: String::new(),
    };
    if let Some(n) = args.client_coalesce {
        options = options.coalesce(n);
    }
    let first = Client::connect(options).await?;
    let mut clients = vec![first.clone()];
    for _ in 1..BENCH_CHANNELS {
        clients.push(first.another_connection().await?);
    }
    let ledgers = args.ledger_codes();
    if ledgers.len() > 1 {
        create_ledgers(&first, &ledgers).await?;
    }
    // Per ledger, a client on it over each connection (they share the connections).
    let views: Vec<Vec<Client>> = ledgers
        .iter()
        .map(|l| clients.iter().map(|c| c.ledger(l)).collect())
        .collect();
    let summary = match args.scenario {
        Scenario::Post => post_scenario(&args, &ledgers, &views).await?,
    };
    super::output::print_out(&format!("{summary}\n"))?;
    Ok(())
}

/// The description of the ledgers a run with `--ledgers N` creates (the same on every run, so
/// a later run finds them).
const BENCH_LEDGER_DESCRIPTION: &str = "ledger bench";

/// Creates the run's ledgers, or finds them (CreateLedger is idempotent).
async fn create_ledgers(client: &Client, ledgers: &[String]) -> Result<(), BoxError> {
    let began = Instant::now();
    let mut created = 0;
    for code in ledgers {
        let l = NewLedger::new(code).description(BENCH_LEDGER_DESCRIPTION);
        let r = client
            .create_ledger(l)
            .await
            .map_err(|e| format!("creating ledger {code}: {e}"))?;
        created += usize::from(r.created);
    }
    eprintln!(
        "bench: {} ledgers ready ({created} created now) in {:.1} s",
        ledgers.len(),
        began.elapsed().as_secs_f64()
    );
    Ok(())
}

async fn post_scenario(
    args: &BenchArgs,
    ledgers: &[String],
    views: &[Vec<Client>],
) -> Result<serde_json::Value, BoxError> {
    let (plan, setup_postings) = setup(args, views).await?;
    let shared = Arc::new(Shared {
        plan,
        stats: Stats::default(),
        hist: Mutex::new(histogram()),
        batch: args.batch.is_some(),
        ledgers: ledgers.to_vec(),
        ledger_postings: ledgers.iter().map(|_| Default::default()).collect(),
    });
    // The connections (each ledger's clients share them): the first ledger's clients.
    let clients = &views[0];
    let calls_before: u64 = clients.iter().map(|c| c.stats().batch_calls).sum();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(args.duration);
    let ticker = progress(shared.clone(), started, stop.clone());
    match args.rate {
        None => closed_loop(&shared, views, args.concurrency, until).await,
        Some(rate) => open_loop(&shared, views, (rate, args.concurrency), (started, until)).await?,
    }
    let seconds = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    ticker.abort();
    let batch_calls = clients.iter().map(|c| c.stats().batch_calls).sum::<u64>() - calls_before;
    Ok(summary(args, &shared, seconds, setup_postings, batch_calls))
}
