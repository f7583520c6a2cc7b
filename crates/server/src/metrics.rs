//! Prometheus metrics: what is recorded (requests, latencies, write batches) and the
//! `/metrics` endpoint of `--metrics-listen`, which has the gauges (outbox backlog, pool use)
//! sampled at scrape time by the sampler it is given.
//!
//! A leaf: the other rooms call it, it calls none of them (what it records comes in as plain
//! numbers). The recorder is process-global (the `metrics` facade has one); it is installed by
//! the first server started with a metrics address. Without one, recording is a no-op.

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tonic::Code;

/// Requests by method and gRPC code (counter).
pub const REQUESTS: &str = "ledger_grpc_requests_total";
/// Request latency by method (histogram, seconds).
pub const REQUEST_SECONDS: &str = "ledger_grpc_request_duration_seconds";
/// Requests per write batch (histogram).
pub const BATCH_SIZE: &str = "ledger_write_batch_size";
/// Write batches by result (counter).
pub const BATCHES: &str = "ledger_write_batches_total";
/// Requests per `PostBatch` call (histogram; its count is the number of calls).
pub const POST_BATCH_REQUESTS: &str = "ledger_post_batch_requests";
/// Events waiting in the outbox (gauge).
pub const OUTBOX_BACKLOG: &str = "ledger_outbox_backlog";
/// Age of the oldest event waiting in the outbox (gauge, seconds; 0 when empty).
pub const OUTBOX_OLDEST_AGE: &str = "ledger_outbox_oldest_event_age_seconds";
/// Journal rows found breaking an invariant by a read or a write batch (counter; anything
/// above 0 means someone wrote the database behind the ledger's back: run `ledger check`).
pub const JOURNAL_CORRUPT: &str = "ledger_journal_corrupt_rows_total";
/// As-of reads (GetBalance, ListBalances, ListEntries) by where they were served: `primary`
/// or `standby` (counter).
pub const ASOF_READS: &str = "ledger_asof_reads_total";
/// As-of reads offered to each standby by result: `served`, or passed to the primary because
/// it was `behind` the cut-off or `unavailable` (down, slow, failing) (counter).
pub const STANDBY_READS: &str = "ledger_standby_reads_total";
/// A standby's replay lag in seconds: since the last transaction it replayed committed on the
/// primary, 0 once it has replayed all it received (gauge).
pub const STANDBY_LAG_SECONDS: &str = "ledger_standby_replay_lag_seconds";
/// A standby's replay lag in the ledger's sequences: the primary's last sequence minus the
/// standby's copy of it (gauge).
pub const STANDBY_LAG_SEQUENCES: &str = "ledger_standby_replay_lag_sequences";
/// 1 while a standby answers its probe and is in recovery, else 0 (gauge).
pub const STANDBY_UP: &str = "ledger_standby_up";
/// How late the ledger recorded the release of an expired hold: its recorded time minus the
/// hold's expiry time (histogram, seconds).
pub const HOLD_RELEASE_LAG: &str = "ledger_hold_release_lag_seconds";
/// Releases of expired holds recorded later than `HOLD_EXPIRY_LAG_MAX` after the expiry
/// (counter).
pub const HOLD_RELEASES_LATE: &str = "ledger_hold_releases_late_total";
/// Debit limits' windows a write batch needed, by where they came from: `memory` (what its
/// lane remembered) or `read` (counter).
pub const DEBIT_WINDOWS: &str = "ledger_debit_windows_total";
/// Database pool connections (gauges).
pub const POOL_MAX: &str = "ledger_db_pool_max_connections";
pub const POOL_OPEN: &str = "ledger_db_pool_open_connections";
pub const POOL_IN_USE: &str = "ledger_db_pool_in_use_connections";
pub const POOL_WAITING: &str = "ledger_db_pool_waiting_requests";

/// Scrapes served at once, at most (limit MAX_METRICS_CONNECTIONS): a Prometheus server or
/// two scrape every few seconds; a flood of connections is closed at once.
pub const MAX_METRICS_CONNECTIONS: usize = 16;
/// Bytes of an HTTP request to the metrics endpoint, at most.
pub const MAX_METRICS_REQUEST_BYTES: usize = 8 * 1024;
/// Time to read a request or sample the database, at most.
pub const METRICS_IO_TIMEOUT: Duration = Duration::from_secs(5);

const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0];
/// Around the lag bound (`HOLD_EXPIRY_LAG_MAX`, 1 s) and the poll (250 ms), up to a restart.
const LAG_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the global recorder (once per process) and returns its handle.
pub fn install() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Full(REQUEST_SECONDS.into()), LATENCY_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(BATCH_SIZE.into()), BATCH_BUCKETS)
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full(POST_BATCH_REQUESTS.into()),
                        BATCH_BUCKETS,
                    )
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(HOLD_RELEASE_LAG.into()), LAG_BUCKETS)
                })
                .expect("non-empty buckets")
                .build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("another metrics recorder is installed; /metrics will be empty");
            }
            describe();
            handle
        })
        .clone()
}

fn describe() {
    metrics::describe_counter!(
        REQUESTS,
        "gRPC requests to ledger.v1.Ledger by method and code"
    );
    metrics::describe_histogram!(
        REQUEST_SECONDS,
        metrics::Unit::Seconds,
        "latency of ledger.v1.Ledger requests by method"
    );
    metrics::describe_histogram!(BATCH_SIZE, "requests per write batch (one transaction)");
    metrics::describe_counter!(BATCHES, "write batches by result (ok, failed)");
    metrics::describe_histogram!(
        POST_BATCH_REQUESTS,
        "requests per PostBatch call (the count is the number of calls)"
    );
    metrics::describe_gauge!(OUTBOX_BACKLOG, "events in the outbox not yet published");
    metrics::describe_gauge!(
        OUTBOX_OLDEST_AGE,
        metrics::Unit::Seconds,
        "age of the oldest unpublished outbox event (0 when none)"
    );
    metrics::describe_counter!(
        ASOF_READS,
        "as-of reads by where they were served (primary, standby)"
    );
    metrics::describe_counter!(
        STANDBY_READS,
        "as-of reads offered to a standby by result (served, behind, unavailable)"
    );
    metrics::describe_gauge!(
        STANDBY_LAG_SECONDS,
        metrics::Unit::Seconds,
        "a standby's replay lag (0 once it replayed all it received)"
    );
    metrics::describe_gauge!(
        STANDBY_LAG_SEQUENCES,
        "the primary's last sequence minus a standby's replayed one"
    );
    metrics::describe_gauge!(STANDBY_UP, "1 while a standby is usable for as-of reads");
    metrics::describe_histogram!(
        HOLD_RELEASE_LAG,
        metrics::Unit::Seconds,
        "recorded time of the release of an expired hold minus its expiry time"
    );
    metrics::describe_counter!(
        HOLD_RELEASES_LATE,
        "releases of expired holds recorded later than HOLD_EXPIRY_LAG_MAX after the expiry"
    );
    metrics::describe_gauge!(POOL_MAX, "database pool size limit");
    metrics::describe_gauge!(POOL_OPEN, "database connections open in the pool");
    metrics::describe_gauge!(POOL_IN_USE, "database connections lent out");
    metrics::describe_gauge!(POOL_WAITING, "requests waiting for a database connection");
}

/// The canonical name of a gRPC code (`OK`, `INVALID_ARGUMENT`, …).
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// Records one finished request.
pub fn request(method: &'static str, code: Code, elapsed: Duration) {
    metrics::counter!(REQUESTS, "method" => method, "code" => code_name(code)).increment(1);
    metrics::histogram!(REQUEST_SECONDS, "method" => method).record(elapsed.as_secs_f64());
}

/// Records one `PostBatch` call of `requests` requests (refused calls too).
pub fn post_batch(requests: usize) {
    metrics::histogram!(POST_BATCH_REQUESTS).record(requests as f64);
}

/// Records the release of an expired hold, recorded `lag` after its expiry (late: beyond
/// the bound).
pub fn hold_released(lag: Duration, late: bool) {
    metrics::histogram!(HOLD_RELEASE_LAG).record(lag.as_secs_f64());
    if late {
        metrics::counter!(HOLD_RELEASES_LATE).increment(1);
    }
}

/// Records one corrupt journal row met by a request.
pub fn journal_corrupt() {
    metrics::counter!(JOURNAL_CORRUPT).increment(1);
}

/// Records the debit windows one batch needed: `remembered` from its lane's memory, `read`
/// from the journal.
pub fn debit_windows(remembered: usize, read: usize) {
    for (source, n) in [("memory", remembered), ("read", read)] {
        if n > 0 {
            metrics::counter!(DEBIT_WINDOWS, "source" => source).increment(n as u64);
        }
    }
}

/// Records one as-of read: where it was served, and (with standbys) what the standby it was
/// offered to did with it (`None`: it served it).
pub fn read_served(by: &'static str, standby: Option<&str>, passed_over: Option<&'static str>) {
    metrics::counter!(ASOF_READS, "served_by" => by).increment(1);
    if let Some(name) = standby {
        let result = passed_over.unwrap_or("served");
        metrics::counter!(STANDBY_READS, "standby" => name.to_owned(), "result" => result)
            .increment(1);
    }
}

/// What a probe of a standby found.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StandbySample {
    /// It answered and is in recovery: usable for as-of reads.
    pub up: bool,
    /// Its replay lag in seconds, when it answered with one.
    pub lag_seconds: Option<f64>,
    /// The primary's last sequence minus its copy of it, when both answered.
    pub lag_sequences: Option<i64>,
}

/// Records a probe of a standby.
pub fn standby_sampled(name: &str, s: StandbySample) {
    metrics::gauge!(STANDBY_UP, "standby" => name.to_owned()).set(f64::from(u8::from(s.up)));
    if let Some(lag) = s.lag_seconds {
        metrics::gauge!(STANDBY_LAG_SECONDS, "standby" => name.to_owned()).set(lag.max(0.0));
    }
    if let Some(behind) = s.lag_sequences {
        metrics::gauge!(STANDBY_LAG_SEQUENCES, "standby" => name.to_owned())
            .set(behind.max(0) as f64);
    }
}

/// Records one write batch of `size` requests (the writer's `BatchObserver`).
pub fn write_batch(size: usize, ok: bool) {
    metrics::histogram!(BATCH_SIZE).record(size as f64);
    metrics::counter!(BATCHES, "result" => if ok { "ok" } else { "failed" }).increment(1);
}

/// The database pool's use at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolUse {
    pub max: usize,
    pub open: usize,
    pub in_use: usize,
    pub waiting: usize,
}

/// Records the use now of the pool of a cluster (label `cluster`: `main` or a `--cluster`).
pub fn pool_sampled(cluster: &str, p: PoolUse) {
    let c = cluster.to_owned();
    metrics::gauge!(POOL_MAX, "cluster" => c.clone()).set(p.max as f64);
    metrics::gauge!(POOL_OPEN, "cluster" => c.clone()).set(p.open as f64);
    metrics::gauge!(POOL_IN_USE, "cluster" => c.clone()).set(p.in_use as f64);
    metrics::gauge!(POOL_WAITING, "cluster" => c).set(p.waiting as f64);
}

/// Records a cluster's outbox backlog now: events waiting, and how long the oldest has
/// (`None`: none waits).
pub fn outbox_sampled(cluster: &str, pending: i64, oldest_age: Option<Duration>) {
    let c = cluster.to_owned();
    metrics::gauge!(OUTBOX_BACKLOG, "cluster" => c.clone()).set(pending as f64);
    let age = oldest_age.map_or(0.0, |d| d.as_secs_f64());
    metrics::gauge!(OUTBOX_OLDEST_AGE, "cluster" => c).set(age);
}

/// Serves `GET /metrics` on `listen` (port 0 picks one) until the task is aborted; `sample`
/// records the gauges before each scrape (within [`METRICS_IO_TIMEOUT`], its own business).
pub async fn serve<S, F>(
    listen: SocketAddr,
    sample: S,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)>
where
    S: Fn() -> F + Clone + Send + Sync + 'static,
    F: Future<Output = ()> + Send,
{
    let handle = install();
    let listener = TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "serving Prometheus metrics at /metrics");
    let task = tokio::spawn(async move {
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_METRICS_CONNECTIONS));
        let mut upkeep = tokio::time::interval(Duration::from_secs(5));
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        // A scraper past the cap is closed at once (limit MAX_METRICS_CONNECTIONS).
                        let Ok(slot) = slots.clone().try_acquire_owned() else { continue };
                        let (handle, sample) = (handle.clone(), sample.clone());
                        tokio::spawn(async move {
                            if let Err(e) = answer(stream, handle, sample).await {
                                tracing::debug!(error = %e, "metrics request failed");
                            }
                            drop(slot);
                        });
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "metrics listener: accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                _ = upkeep.tick() => handle.run_upkeep(),
            }
        }
    });
    Ok((addr, task))
}

/// One HTTP/1.1 connection (hyper's server): `GET /metrics` gets the exposition, anything
/// else 404 or 405; a request head must arrive within [`METRICS_IO_TIMEOUT`], and every answer
/// closes the connection (scrapes are seconds apart).
async fn answer<S, F>(
    stream: TcpStream,
    handle: PrometheusHandle,
    sample: S,
) -> Result<(), hyper::Error>
where
    S: Fn() -> F + Clone + Send + Sync + 'static,
    F: Future<Output = ()> + Send,
{
    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let (handle, sample) = (handle.clone(), sample.clone());
        async move { Ok::<_, std::convert::Infallible>(exposition(&req, &handle, sample).await) }
    });
    hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(METRICS_IO_TIMEOUT)
        .max_buf_size(MAX_METRICS_REQUEST_BYTES)
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
        .await
}

async fn exposition<S, F>(
    req: &hyper::Request<hyper::body::Incoming>,
    handle: &PrometheusHandle,
    sample: S,
) -> hyper::Response<http_body_util::Full<tonic::codegen::Bytes>>
where
    S: Fn() -> F,
    F: Future<Output = ()>,
{
    let (status, body) = match (req.method(), req.uri().path()) {
        (&hyper::Method::GET, "/metrics") => {
            sample().await;
            handle.run_upkeep();
            (hyper::StatusCode::OK, handle.render())
        }
        (_, "/metrics") => (
            hyper::StatusCode::METHOD_NOT_ALLOWED,
            "only GET\n".to_owned(),
        ),
        _ => (
            hyper::StatusCode::NOT_FOUND,
            "metrics are at /metrics\n".to_owned(),
        ),
    };
    hyper::Response::builder()
        .status(status)
        .header("content-type", "text/plain; version=0.0.4; charset=utf-8")
        .header("connection", "close")
        .body(http_body_util::Full::new(tonic::codegen::Bytes::from(body)))
        .expect("a response of constant headers")
}
