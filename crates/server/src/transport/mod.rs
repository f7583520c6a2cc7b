//! Our own HTTP/2 serve loop, in place of `tonic::transport::Server`: it holds at most a
//! bounded number of connections (below the open-file limit), backs off and says so when the
//! process runs out of descriptors, closes connections that never speak or stay idle, bounds
//! the streams of a connection and the bytes held for responses clients have not taken, and
//! cuts a response its client stops taking. Every bound is a named limit, gathered in
//! [`TransportLimits`], and quoted in the log line or the error it causes.
//!
//! Why not tonic's server: it wraps every service in its own `grpc-timeout` layer outside
//! ours (a passed deadline was answered `CANCELLED` without `ErrorInfo`), has no connection
//! cap, retries a failing `accept` at once (a core spinning at the file limit), advertises no
//! stream limit, and keeps every response a client does not read for as long as it likes.

mod conn;
pub mod deadline;
mod error;
mod files;
mod response;
mod tls;

pub use error::{StatusOf, TransportError};
pub use files::connection_cap;
pub use response::Delivery;
pub use tls::{PeerCertificate, TlsPem};

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

/// Connections held at once (limit MAX_CONNECTIONS); lowered further to fit the open-file
/// limit ([`connection_cap`]). The ledger serves internal services that keep a few long-lived
/// HTTP/2 connections each: a thousand is far above that and far below what the process can
/// hold (each costs a descriptor and at most [`MAX_CONCURRENT_STREAMS`] streams).
pub const MAX_CONNECTIONS: usize = 1024;

/// Streams one connection may have open at once (limit MAX_CONCURRENT_STREAMS, advertised in
/// SETTINGS): `ledger bench`'s 512 callers over its 4 connections fit, while one connection
/// can no longer open thousands of calls; a client past it waits for a stream of its own.
pub const MAX_CONCURRENT_STREAMS: u32 = 128;

/// Time from accepting a connection until its TLS handshake and the HTTP/2 client preface are
/// in (limit HANDSHAKE_TIMEOUT): both take a few round trips; a client still silent after
/// this long holds a descriptor and a connection slot for nothing.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Time a connection may stay without an open stream before it is closed with a GOAWAY
/// (limit IDLE_TIMEOUT): gRPC clients reconnect by themselves on their next call, which costs
/// a handshake, while an idle connection costs a slot of [`MAX_CONNECTIONS`].
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// Longest a ledger call may take when its client sends no deadline (limit REQUEST_TIMEOUT);
/// a client's `grpc-timeout` applies when it is shorter. Longer than a healthy call ever
/// takes, and than a write batch may (`BATCH_TIMEOUT`, 10 s, answers by itself first);
/// shorter than the drain at shutdown (`DRAIN_TIMEOUT`, 20 s, checked by `Tuning`), so a call
/// in flight when the shutdown begins ends within the drain.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// Longest a response may wait for its client to take it (limit RESPONSE_SEND_TIMEOUT),
/// counted from the moment its bytes are ready until the last of them is taken. A client that
/// has not taken a response by then is stuck or hostile: the response is dropped and its
/// connection closed. 30 s moves the largest response ([`MAX_RESPONSE_BYTES`]) at 0.5 MiB/s.
pub const RESPONSE_SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// Bytes held, server-wide, for responses their clients have not taken yet (limit
/// RESPONSE_BYTES_IN_FLIGHT). A response that does not fit is answered `UNAVAILABLE` at once
/// and its memory freed; the client retries later. Two of the largest responses
/// ([`MAX_RESPONSE_BYTES`]) fit, or thousands of typical answers (a few kilobytes); with the
/// pages being built ([`MAX_PAGES_IN_PROGRESS`]) the server stays under 256 MiB (measured by
/// `one_connection_that_never_reads_its_responses_cannot_take_the_servers_memory`).
pub const RESPONSE_BYTES_IN_FLIGHT: usize = 32 * 1024 * 1024;

/// `List*` calls whose page is being built at once, server-wide (limit MAX_PAGES_IN_PROGRESS);
/// the others wait for their turn within their deadline. A page is in memory several times
/// over while it is built and encoded (rows, records, messages, the encoded bytes): before
/// pages were capped at `MAX_PAGE_BYTES` (4 MiB), a page of 800 accounts with the largest
/// metadata (15 MB encoded) raised the server's RSS by 80 to 100 MiB, and one at a time was
/// all 256 MiB allowed. Capped, a page costs about a quarter of that: four at a time keep the
/// attack of `one_connection_that_never_reads_its_responses_cannot_take_the_servers_memory`
/// under 256 MiB, with room. Raise it (`LEDGER_MAX_PAGES_IN_PROGRESS`) where memory is plenty.
pub const MAX_PAGES_IN_PROGRESS: usize = 4;

/// Largest encoded response message (limit MAX_RESPONSE_BYTES): a page larger than this
/// cannot be sent. At least this much of [`RESPONSE_BYTES_IN_FLIGHT`] must be free for it.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Bytes a response hands to HTTP/2 at a time (limit RESPONSE_CHUNK_BYTES): one DATA frame of
/// the default frame size. The rest stays in the response's slot, counted and cuttable.
pub const RESPONSE_CHUNK_BYTES: usize = 16 * 1024;

/// Bytes HTTP/2 buffers per stream beyond its window (limit SEND_BUFFER_BYTES). Outside the
/// response budget, so small: per connection at most [`MAX_CONCURRENT_STREAMS`] × (this +
/// [`RESPONSE_CHUNK_BYTES`]) = 8 MiB, freed when the connection closes.
pub const SEND_BUFFER_BYTES: usize = 48 * 1024;

/// Bytes of a request's headers (limit MAX_HEADER_LIST_BYTES), the common gRPC default: the
/// ledger reads only `authorization` (≤ 512 bytes) and `grpc-timeout`.
pub const MAX_HEADER_LIST_BYTES: u32 = 16 * 1024;

/// Pings on a connection that received nothing for this long (limit KEEPALIVE_INTERVAL), so a
/// peer that vanished (no FIN, no RST) does not hold its connection forever.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(60);

/// A ping unanswered for this long closes the connection (limit KEEPALIVE_TIMEOUT).
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// After a GOAWAY for idleness, the connection is dropped if it is still open this much later
/// (limit CLOSE_GRACE): a silent peer never answers the GOAWAY's ping.
pub const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Descriptors kept free, besides the pool's connections, for everything that is not a client
/// connection (limit FILES_RESERVED): the listener, the writer lanes' and the publisher's
/// database connections, NATS, `/metrics` and its scrapes, the runtime, logs, stdio.
pub const FILES_RESERVED: usize = 64;

/// Pause after `accept` failed for lack of descriptors or memory (limit ACCEPT_BACKOFF):
/// retrying at once spins a core, since the waiting connection keeps the listener readable.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// One warning of a kind per this interval at most, with the count of those left out
/// (limit WARN_INTERVAL): a flood of refusals must not become a flood of log lines.
pub const WARN_INTERVAL: Duration = Duration::from_secs(10);

// The budget holds the largest response: checked when the crate builds.
const _: () = assert!(RESPONSE_BYTES_IN_FLIGHT >= MAX_RESPONSE_BYTES);

/// The transport's limits (part of `crate::tuning::Tuning`). `Default` is the constants
/// above; `serve`'s flags (or their `LEDGER_*` variables of the same names) set them, and
/// tests lower the timeouts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportLimits {
    pub max_connections: usize,
    pub max_concurrent_streams: u32,
    pub handshake_timeout: Duration,
    pub idle_timeout: Duration,
    pub request_timeout: Duration,
    pub response_send_timeout: Duration,
    pub response_bytes_in_flight: usize,
    pub max_pages_in_progress: usize,
}

impl Default for TransportLimits {
    fn default() -> Self {
        TransportLimits {
            max_connections: MAX_CONNECTIONS,
            max_concurrent_streams: MAX_CONCURRENT_STREAMS,
            handshake_timeout: HANDSHAKE_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            request_timeout: REQUEST_TIMEOUT,
            response_send_timeout: RESPONSE_SEND_TIMEOUT,
            response_bytes_in_flight: RESPONSE_BYTES_IN_FLIGHT,
            max_pages_in_progress: MAX_PAGES_IN_PROGRESS,
        }
    }
}

impl TransportLimits {
    /// Limits that could not work are refused by name.
    pub fn check(&self) -> Result<(), String> {
        let zero = [
            ("MAX_CONNECTIONS", self.max_connections == 0),
            ("MAX_CONCURRENT_STREAMS", self.max_concurrent_streams == 0),
            ("HANDSHAKE_TIMEOUT", self.handshake_timeout.is_zero()),
            ("IDLE_TIMEOUT", self.idle_timeout.is_zero()),
            ("REQUEST_TIMEOUT", self.request_timeout.is_zero()),
            (
                "RESPONSE_SEND_TIMEOUT",
                self.response_send_timeout.is_zero(),
            ),
            ("MAX_PAGES_IN_PROGRESS", self.max_pages_in_progress == 0),
        ];
        if let Some((name, _)) = zero.iter().find(|(_, z)| *z) {
            return Err(format!("{name} must be above zero"));
        }
        if self.response_bytes_in_flight < MAX_RESPONSE_BYTES {
            return Err(format!(
                "RESPONSE_BYTES_IN_FLIGHT ({} bytes) must hold at least one response of MAX_RESPONSE_BYTES ({MAX_RESPONSE_BYTES} bytes)",
                self.response_bytes_in_flight
            ));
        }
        Ok(())
    }

    /// How often a connection checks its timers: a quarter of the shortest timeout, so each
    /// fires within a quarter of its value late, between 50 ms and 1 s.
    fn check_interval(&self) -> Duration {
        let shortest = [
            self.handshake_timeout,
            self.idle_timeout,
            self.response_send_timeout,
        ]
        .into_iter()
        .min()
        .unwrap_or(HANDSHAKE_TIMEOUT);
        (shortest / 4).clamp(Duration::from_millis(50), Duration::from_secs(1))
    }
}

/// What the server asks of its connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Serving,
    /// Finish the open streams, take no new ones (GOAWAY), then close.
    Closing,
    /// Close now.
    Closed,
}

/// The kinds of warning that are rate-limited, each on its own.
#[derive(Clone, Copy, Debug)]
enum Warn {
    AtConnectionCap,
    AcceptFailed,
    NoPreface,
    ResponseStalled,
}

/// State every connection shares.
struct Shared {
    limits: TransportLimits,
    routes: tonic::service::Routes,
    http2: hyper::server::conn::http2::Builder<hyper_util::rt::TokioExecutor>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    budget: Arc<response::Budget>,
    /// How the transport's own errors are answered.
    status_of: StatusOf,
    warnings: [Mutex<Throttle>; 4],
}

impl Shared {
    /// Whether a warning of this kind is due now; `Some(n)`: due, `n` of them left out since
    /// the last one.
    fn warn_due(&self, kind: Warn) -> Option<u64> {
        let mut t = self.warnings[kind as usize]
            .lock()
            .expect("warning throttle");
        t.tick(Instant::now(), WARN_INTERVAL)
    }
}

/// At most one event per interval passes; the others are counted.
#[derive(Debug, Default)]
struct Throttle {
    last: Option<Instant>,
    left_out: u64,
}

impl Throttle {
    /// `Some(left out since the last one)` when this event passes.
    fn tick(&mut self, now: Instant, interval: Duration) -> Option<u64> {
        match self.last {
            Some(last) if now.duration_since(last) < interval => {
                self.left_out += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.left_out))
            }
        }
    }
}

/// The running transport.
pub struct Transport {
    phase: watch::Sender<Phase>,
    task: tokio::task::JoinHandle<()>,
    /// Connections it holds at most: [`MAX_CONNECTIONS`], or fewer for the file limit.
    pub connection_cap: usize,
}

/// Serves `routes` on `listener` (over TLS with `tls`) until [`Transport::close`], answering
/// its own errors with `status_of`. `pool_size` is the database pool's size, whose sockets
/// need room under the file limit.
pub fn spawn(
    listener: TcpListener,
    routes: tonic::service::Routes,
    tls: Option<&TlsPem>,
    limits: TransportLimits,
    pool_size: usize,
    status_of: StatusOf,
) -> Result<Transport, String> {
    limits.check()?;
    let open_files = files::raise_open_file_limit();
    let cap = connection_cap(limits.max_connections, open_files, pool_size)?;
    tracing::info!(
        connection_cap = cap,
        open_file_limit = open_files,
        ?limits,
        "transport: at most {cap} connections (limit MAX_CONNECTIONS, within the open-file limit of {open_files})"
    );
    let shared = Arc::new(Shared {
        http2: conn::http2_builder(&limits),
        tls: tls.map(tls::acceptor).transpose()?,
        budget: Arc::new(response::Budget::new(limits.response_bytes_in_flight)),
        status_of,
        warnings: Default::default(),
        routes,
        limits,
    });
    let (phase, watching) = watch::channel(Phase::Serving);
    let task = tokio::spawn(accept_loop(listener, shared, watching, cap));
    Ok(Transport {
        phase,
        task,
        connection_cap: cap,
    })
}

impl Transport {
    /// Stops accepting (the listener closes), sends every connection a GOAWAY and lets its
    /// open streams finish; after `grace`, closes what is still open.
    pub async fn close(self, grace: Duration) {
        let _ = self.phase.send(Phase::Closing);
        let mut task = self.task;
        if tokio::time::timeout(grace, &mut task).await.is_err() {
            tracing::warn!(
                ?grace,
                "connections still open after the drain timeout (limit DRAIN_TIMEOUT); closing them"
            );
            let _ = self.phase.send(Phase::Closed);
            let _ = task.await;
        }
    }
}

/// Accepts connections while there is a slot for them; ends, once told to, when every
/// connection has ended.
async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut phase: watch::Receiver<Phase>,
    cap: usize,
) {
    let slots = Arc::new(Semaphore::new(cap));
    loop {
        let Some(slot) = free_slot(&slots, &shared, &mut phase, cap).await else {
            break;
        };
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = phase.wait_for(|p| *p != Phase::Serving) => break,
        };
        match accepted {
            Ok((tcp, peer)) => conn::spawn(tcp, peer, slot, shared.clone(), phase.clone()),
            Err(e) => files::after_accept_error(e, &shared).await,
        }
    }
    // New clients are refused by the kernel from here on, instead of waiting in a backlog
    // nobody accepts from.
    drop(listener);
    let _all_ended = slots.acquire_many(cap as u32).await;
}

/// A connection slot, waiting (and saying so) while all are taken; `None` once told to stop.
async fn free_slot(
    slots: &Arc<Semaphore>,
    shared: &Shared,
    phase: &mut watch::Receiver<Phase>,
    cap: usize,
) -> Option<OwnedSemaphorePermit> {
    if let Ok(slot) = slots.clone().try_acquire_owned() {
        return Some(slot);
    }
    if let Some(left_out) = shared.warn_due(Warn::AtConnectionCap) {
        tracing::warn!(
            connections = cap,
            left_out,
            "all {cap} connections are taken (limit MAX_CONNECTIONS); new connections wait in the listen backlog"
        );
    }
    tokio::select! {
        slot = slots.clone().acquire_owned() => Some(slot.expect("the semaphore is never closed")),
        _ = phase.wait_for(|p| *p != Phase::Serving) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throttle_lets_one_event_per_interval_pass_and_counts_the_rest() {
        let mut t = Throttle::default();
        let t0 = Instant::now();
        assert_eq!(t.tick(t0, WARN_INTERVAL), Some(0));
        assert_eq!(t.tick(t0 + Duration::from_secs(1), WARN_INTERVAL), None);
        assert_eq!(t.tick(t0 + Duration::from_secs(9), WARN_INTERVAL), None);
        assert_eq!(t.tick(t0 + Duration::from_secs(10), WARN_INTERVAL), Some(2));
        assert_eq!(t.tick(t0 + Duration::from_secs(11), WARN_INTERVAL), None);
    }

    #[test]
    fn limits_that_could_not_work_are_refused_by_name() {
        let l = TransportLimits {
            max_pages_in_progress: 0,
            ..TransportLimits::default()
        };
        assert!(l.check().unwrap_err().contains("MAX_PAGES_IN_PROGRESS"));
        let l = TransportLimits {
            response_bytes_in_flight: 1000,
            ..TransportLimits::default()
        };
        assert!(l.check().unwrap_err().contains("MAX_RESPONSE_BYTES"));
    }

    #[test]
    fn the_default_limits_pass_their_own_check() {
        TransportLimits::default().check().unwrap();
    }

    #[test]
    fn connections_check_their_timers_a_quarter_of_the_shortest_timeout_apart() {
        assert_eq!(
            TransportLimits::default().check_interval(),
            Duration::from_secs(1)
        );
        let l = TransportLimits {
            handshake_timeout: Duration::from_secs(2),
            ..Default::default()
        };
        assert_eq!(l.check_interval(), Duration::from_millis(500));
    }
}
