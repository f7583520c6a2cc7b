//! What the run reports: progress once a second on stderr, and the JSON summary.

use super::args::BenchArgs;
use super::load::Shared;
use super::stats::Stats;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Prints the postings per second, once a second, until stopped.
pub(super) fn progress(
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

/// The run's JSON summary. `postings` counts every new posting recorded (ordinary ones,
/// holds, captures and releases alike; not replays, not the setup's) and `postings_per_sec` is
/// it over `seconds`; `requests` counts calls answered (Post, PostBatch, Capture, Void), which
/// the latencies are of. `ledgers` is how many the load was spread over and `per_ledger` each
/// one's `ledger`, `postings` and `postings_per_sec` (they add up to the totals). The holds'
/// own fields: [`hold_fields`].
pub(super) fn summary(
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
        "debit_limits": args.debit_limits,
        "run": shared.plan.run_id,
        "ledgers": shared.ledgers.len(),
        "per_ledger": per_ledger(shared, seconds),
    });
    if let Some(fields) = summary.as_object_mut() {
        fields.extend(hold_fields(args, s));
    }
    summary
}

/// Each ledger's new postings and rate, in the run's order; also told on stderr.
fn per_ledger(shared: &Shared, seconds: f64) -> Vec<serde_json::Value> {
    let rates: Vec<(String, u64, f64)> = shared
        .ledgers
        .iter()
        .zip(&shared.ledger_postings)
        .map(|(l, n)| {
            let n = n.load(Ordering::Relaxed);
            (l.clone(), n, (n as f64 / seconds).round())
        })
        .collect();
    let total: u64 = rates.iter().map(|(_, n, _)| n).sum();
    let each: Vec<String> = rates
        .iter()
        .map(|(l, _, r)| format!("{l} {r} postings/s"))
        .collect();
    eprintln!(
        "bench: {} ledger(s): {}; total {} postings/s",
        rates.len(),
        each.join(", "),
        (total as f64 / seconds).round()
    );
    rates
        .into_iter()
        .map(|(ledger, postings, rate)| {
            serde_json::json!({ "ledger": ledger, "postings": postings, "postings_per_sec": rate })
        })
        .collect()
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
