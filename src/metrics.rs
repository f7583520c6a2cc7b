//! Prometheus metrics: what is recorded (requests, latencies, write batches) and the
//! `/metrics` endpoint of `--metrics-listen`, which samples the gauges (outbox backlog, pool
//! use) at scrape time.
//!
//! The recorder is process-global (the `metrics` facade has one); it is installed by the first
//! server started with a metrics address. Without one, recording is a no-op.

use crate::storage::{self, Pool};
use crate::writer::BatchObserver;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
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
/// Database pool connections (gauges).
pub const POOL_MAX: &str = "ledger_db_pool_max_connections";
pub const POOL_OPEN: &str = "ledger_db_pool_open_connections";
pub const POOL_IN_USE: &str = "ledger_db_pool_in_use_connections";
pub const POOL_WAITING: &str = "ledger_db_pool_waiting_requests";

/// Bytes of an HTTP request to the metrics endpoint, at most.
pub const MAX_METRICS_REQUEST_BYTES: usize = 8 * 1024;
/// Time to read a request or sample the database, at most.
pub const METRICS_IO_TIMEOUT: Duration = Duration::from_secs(5);

const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0];

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

/// Records one corrupt journal row met by a request.
pub fn journal_corrupt() {
    metrics::counter!(JOURNAL_CORRUPT).increment(1);
}

/// The writer's hook: batch sizes and results.
pub fn batch_observer() -> BatchObserver {
    Arc::new(|size, ok| {
        metrics::histogram!(BATCH_SIZE).record(size as f64);
        metrics::counter!(BATCHES, "result" => if ok { "ok" } else { "failed" }).increment(1);
    })
}

/// Samples the gauges: pool use now, and the outbox backlog (skipped, with a warning, when the
/// database does not answer in time).
async fn sample(pool: &Pool) {
    let s = pool.status();
    metrics::gauge!(POOL_MAX).set(s.max_size as f64);
    metrics::gauge!(POOL_OPEN).set(s.size as f64);
    metrics::gauge!(POOL_IN_USE).set(s.size.saturating_sub(s.available) as f64);
    metrics::gauge!(POOL_WAITING).set(s.waiting as f64);
    let backlog = tokio::time::timeout(METRICS_IO_TIMEOUT, async {
        let client = pool.get().await.map_err(storage::StorageError::from)?;
        storage::outbox::backlog(&client).await
    })
    .await;
    match backlog {
        Ok(Ok(b)) => {
            metrics::gauge!(OUTBOX_BACKLOG).set(b.pending as f64);
            let age = b.oldest_age.map_or(0.0, |d| d.as_secs_f64());
            metrics::gauge!(OUTBOX_OLDEST_AGE).set(age);
        }
        Ok(Err(e)) => tracing::warn!(error = %e, "metrics: cannot read the outbox backlog"),
        Err(_) => tracing::warn!("metrics: the outbox backlog query timed out"),
    }
}

/// Serves `GET /metrics` on `listen` (port 0 picks one) until the task is aborted.
pub async fn serve(
    listen: SocketAddr,
    pool: Pool,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let handle = install();
    let listener = TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "serving Prometheus metrics at /metrics");
    let task = tokio::spawn(async move {
        let mut upkeep = tokio::time::interval(Duration::from_secs(5));
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        let (handle, pool) = (handle.clone(), pool.clone());
                        tokio::spawn(async move {
                            if let Err(e) = answer(stream, &handle, &pool).await {
                                tracing::debug!(error = %e, "metrics request failed");
                            }
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

/// One HTTP/1.x exchange: `GET /metrics` gets the exposition, anything else 404 or 405.
async fn answer(
    mut stream: TcpStream,
    handle: &PrometheusHandle,
    pool: &Pool,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let head_read = tokio::time::timeout(METRICS_IO_TIMEOUT, async {
        let mut chunk = [0u8; 1024];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < MAX_METRICS_REQUEST_BYTES {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        Ok::<_, std::io::Error>(())
    })
    .await;
    if !matches!(head_read, Ok(Ok(()))) {
        return Ok(());
    }
    let line = buf.split(|b| *b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|b| *b == b' ');
    let (method, path) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let path = path.split(|b| *b == b'?').next().unwrap_or_default();
    let (status, body) = match (method, path) {
        (b"GET", b"/metrics") => {
            sample(pool).await;
            handle.run_upkeep();
            ("200 OK", handle.render())
        }
        (_, b"/metrics") => ("405 Method Not Allowed", "only GET\n".to_owned()),
        _ => ("404 Not Found", "metrics are at /metrics\n".to_owned()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}
