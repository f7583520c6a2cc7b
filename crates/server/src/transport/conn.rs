//! One connection: the TLS handshake, the HTTP/2 preface, hyper's HTTP/2 server over the
//! routes, and the connection's own timer, which closes it when its client stays silent, stays
//! idle, or does not take a response in time.

use super::deadline::Deadline;
use super::error::StatusOf;
use super::response::{self, Delivery, HeldBody, Slot};
use super::tls::{peer_certificate, PeerCertificate};
use super::{
    Phase, Shared, TransportLimits, Warn, CLOSE_GRACE, KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT,
    MAX_HEADER_LIST_BYTES, SEND_BUFFER_BYTES,
};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{watch, OwnedSemaphorePermit};
use tonic::body::Body;
use tonic::codegen::http::{Request, Response};
use tonic::codegen::Service as _;
use tonic::Code;

/// The HTTP/2 client preface ("PRI * HTTP/2.0…"): 24 bytes before anything else.
const PREFACE_BYTES: usize = 24;

/// hyper's HTTP/2 server with the transport's limits.
pub(super) fn http2_builder(
    limits: &TransportLimits,
) -> hyper::server::conn::http2::Builder<TokioExecutor> {
    let mut b = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    b.timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_concurrent_streams)
        .max_header_list_size(MAX_HEADER_LIST_BYTES)
        .max_send_buf_size(SEND_BUFFER_BYTES)
        .keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT);
    b
}

/// What the connection's timer looks at.
pub(super) struct ConnState {
    peer: SocketAddr,
    accepted: Instant,
    preface_read: AtomicUsize,
    preface_seen: AtomicBool,
    open_streams: AtomicUsize,
    /// When the last open stream ended (or the connection was accepted).
    idle_since: Mutex<Instant>,
    slots: Mutex<Vec<Weak<Slot>>>,
    certificate: Mutex<Option<PeerCertificate>>,
}

impl ConnState {
    fn new(peer: SocketAddr) -> ConnState {
        let now = Instant::now();
        ConnState {
            peer,
            accepted: now,
            preface_read: AtomicUsize::new(0),
            preface_seen: AtomicBool::new(false),
            open_streams: AtomicUsize::new(0),
            idle_since: Mutex::new(now),
            slots: Mutex::new(Vec::new()),
            certificate: Mutex::new(None),
        }
    }

    fn read(&self, n: usize) {
        if self.preface_read.fetch_add(n, Ordering::SeqCst) + n >= PREFACE_BYTES {
            self.preface_seen.store(true, Ordering::SeqCst);
        }
    }

    pub(super) fn register(&self, slot: &Arc<Slot>) {
        let mut slots = self.slots.lock().expect("slots");
        // A busy connection answers thousands of calls between two ticks of its timer: forget
        // the finished ones now and then, not only at the tick.
        if slots.len() % 1024 == 1023 {
            slots.retain(|w| w.strong_count() > 0);
        }
        slots.push(Arc::downgrade(slot));
    }

    /// The slots still alive (forgetting the others).
    fn live_slots(&self) -> Vec<Arc<Slot>> {
        let mut slots = self.slots.lock().expect("slots");
        slots.retain(|w| w.strong_count() > 0);
        slots.iter().filter_map(Weak::upgrade).collect()
    }

    fn facts(&self, now: Instant, closing_since: Option<Instant>) -> Facts {
        let busiest = self
            .live_slots()
            .iter()
            .filter_map(|s| s.busy(now))
            .max_by_key(|(t, _)| *t);
        Facts {
            age: now - self.accepted,
            preface_seen: self.preface_seen.load(Ordering::SeqCst),
            open_streams: self.open_streams.load(Ordering::SeqCst),
            idle_for: now.saturating_duration_since(*self.idle_since.lock().expect("idle")),
            busiest_response: busiest,
            closing_for: closing_since.map(|t| now - t),
        }
    }
}

/// Counts a stream open from its request until hyper drops its response.
pub(super) struct StreamGuard(Arc<ConnState>);

impl StreamGuard {
    fn new(conn: Arc<ConnState>) -> StreamGuard {
        conn.open_streams.fetch_add(1, Ordering::SeqCst);
        StreamGuard(conn)
    }

    pub(super) fn conn(&self) -> &Arc<ConnState> {
        &self.0
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if self.0.open_streams.fetch_sub(1, Ordering::SeqCst) == 1 {
            *self.0.idle_since.lock().expect("idle") = Instant::now();
        }
    }
}

/// A connection's situation at one tick of its timer.
#[derive(Debug, Default)]
struct Facts {
    age: Duration,
    preface_seen: bool,
    open_streams: usize,
    idle_for: Duration,
    /// The response that has waited longest for its client: how long, and its bytes.
    busiest_response: Option<(Duration, usize)>,
    /// Since a GOAWAY for idleness was sent.
    closing_for: Option<Duration>,
}

/// What the timer does about it.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Fine,
    /// No HTTP/2 preface within HANDSHAKE_TIMEOUT: drop.
    NoPreface,
    /// A response not taken within RESPONSE_SEND_TIMEOUT: free it and drop the connection.
    Stalled {
        waited: Duration,
        bytes: usize,
    },
    /// No open stream for IDLE_TIMEOUT: GOAWAY.
    Idle,
    /// The GOAWAY went unanswered for CLOSE_GRACE: drop.
    CloseOverdue,
}

fn verdict(f: &Facts, l: &TransportLimits) -> Verdict {
    if f.closing_for.is_some_and(|t| t >= CLOSE_GRACE) {
        return Verdict::CloseOverdue;
    }
    if !f.preface_seen && f.age >= l.handshake_timeout {
        return Verdict::NoPreface;
    }
    if let Some((waited, bytes)) = f.busiest_response {
        if waited >= l.response_send_timeout {
            return Verdict::Stalled { waited, bytes };
        }
    }
    if f.open_streams == 0 && f.idle_for >= l.idle_timeout && f.closing_for.is_none() {
        return Verdict::Idle;
    }
    Verdict::Fine
}

/// Serves one accepted connection on a task of its own; `slot` is released when it ends.
pub(super) fn spawn(
    tcp: TcpStream,
    peer: SocketAddr,
    slot: OwnedSemaphorePermit,
    shared: Arc<Shared>,
    phase: watch::Receiver<Phase>,
) {
    tokio::spawn(async move {
        let _slot = slot;
        let _ = tcp.set_nodelay(true);
        let state = Arc::new(ConnState::new(peer));
        let Some(acceptor) = shared.tls.clone() else {
            return serve(Preface::new(tcp, state.clone()), state, shared, phase).await;
        };
        let deadline =
            tokio::time::Instant::from_std(state.accepted + shared.limits.handshake_timeout);
        match tokio::time::timeout_at(deadline, acceptor.accept(tcp)).await {
            Ok(Ok(tls)) => {
                *state.certificate.lock().expect("certificate") = peer_certificate(&tls);
                serve(Preface::new(tls, state.clone()), state, shared, phase).await
            }
            Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
            Err(_) => no_preface(&shared, peer),
        }
    });
}

fn no_preface(shared: &Shared, peer: SocketAddr) {
    if let Some(left_out) = shared.warn_due(Warn::NoPreface) {
        tracing::warn!(
            %peer,
            left_out,
            timeout = ?shared.limits.handshake_timeout,
            "closed a connection that did not complete its handshake and HTTP/2 preface in time (limit HANDSHAKE_TIMEOUT)"
        );
    }
}

/// Runs hyper on the connection until it ends, the server says so, or its timer closes it.
async fn serve<IO>(
    io: IO,
    state: Arc<ConnState>,
    shared: Arc<Shared>,
    mut phase: watch::Receiver<Phase>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = ConnService {
        shared: shared.clone(),
        state: state.clone(),
    };
    let mut conn = pin!(shared.http2.serve_connection(TokioIo::new(io), service));
    let tick = shared.limits.check_interval();
    let mut graceful = false;
    let mut idle_close: Option<Instant> = None;
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(peer = %state.peer, error = %e, "connection ended");
                }
                return;
            }
            changed = phase.changed() => {
                let now = if changed.is_ok() { *phase.borrow() } else { Phase::Closed };
                match now {
                    Phase::Serving => {}
                    Phase::Closing if !graceful => {
                        graceful = true;
                        conn.as_mut().graceful_shutdown();
                    }
                    Phase::Closing => {}
                    Phase::Closed => return,
                }
            }
            _ = tokio::time::sleep(tick) => {
                let facts = state.facts(Instant::now(), idle_close);
                match verdict(&facts, &shared.limits) {
                    Verdict::Fine => {}
                    Verdict::Idle if graceful => {}
                    Verdict::Idle => {
                        tracing::debug!(peer = %state.peer, "closing an idle connection (limit IDLE_TIMEOUT)");
                        graceful = true;
                        idle_close = Some(Instant::now());
                        conn.as_mut().graceful_shutdown();
                    }
                    Verdict::CloseOverdue => return,
                    Verdict::NoPreface => return no_preface(&shared, state.peer),
                    Verdict::Stalled { waited, bytes } => return stalled(&shared, &state, waited, bytes),
                }
            }
        }
    }
}

/// A response its client did not take in time: every response of the connection is freed,
/// and the connection (dropped by the caller) goes with them.
fn stalled(shared: &Shared, state: &ConnState, waited: Duration, bytes: usize) {
    for slot in state.live_slots() {
        slot.abandon();
    }
    if let Some(left_out) = shared.warn_due(Warn::ResponseStalled) {
        tracing::warn!(
            peer = %state.peer,
            left_out,
            bytes,
            waited = ?waited,
            "closing a connection whose client has not taken a response of {bytes} bytes within {:?} (limit RESPONSE_SEND_TIMEOUT)",
            shared.limits.response_send_timeout
        );
    }
}

/// The routes as hyper's service on one connection: each request carries the connection's
/// client certificate and a [`Delivery`]; each response is held in a slot of the connection.
#[derive(Clone)]
struct ConnService {
    shared: Arc<Shared>,
    state: Arc<ConnState>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl hyper::service::Service<Request<Incoming>> for ConnService {
    type Response = Response<HeldBody>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Response<HeldBody>, Infallible>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let stream = StreamGuard::new(self.state.clone());
        let delivery = Delivery::default();
        let mut req = req.map(Body::new);
        req.extensions_mut().insert(delivery.clone());
        if let Some(c) = self.state.certificate.lock().expect("certificate").clone() {
            req.extensions_mut().insert(c);
        }
        let header = req.headers().get("grpc-timeout").map(|v| v.as_bytes());
        let deadline = Deadline::of(header, self.shared.limits.request_timeout);
        let routes = self.shared.routes.clone();
        let budget = self.shared.budget.clone();
        let status_of = self.shared.status_of;
        Box::pin(async move {
            let resp = match deadline {
                Ok(deadline) => answer(routes, req, deadline, &delivery, status_of).await,
                Err(e) => status_of(e).into_http(),
            };
            Ok(response::hold(resp, &budget, stream, delivery, status_of).await)
        })
    }
}

/// The routes' answer to `req`, or `DEADLINE_EXCEEDED` once its deadline passed (then the
/// call is dropped, after `delivery` says so for the access layer's metric).
async fn answer(
    mut routes: tonic::service::Routes,
    req: Request<Body>,
    deadline: Deadline,
    delivery: &Delivery,
    status_of: StatusOf,
) -> Response<Body> {
    let call = async move {
        let ready = std::future::poll_fn(|cx| {
            tonic::codegen::Service::<Request<Body>>::poll_ready(&mut routes, cx)
        });
        match ready.await {
            Ok(()) => routes.call(req).await,
            Err(e) => Err(e),
        }
    };
    let mut call = pin!(call);
    tokio::select! {
        answered = call.as_mut() => match answered {
            Ok(resp) => resp,
            Err(never) => match never {},
        },
        _ = tokio::time::sleep(deadline.after) => {
            // Before the call (and the access layer's probe in it) is dropped, below.
            delivery.replace(Code::DeadlineExceeded);
            status_of(deadline.exceeded()).into_http()
        }
    }
}

/// The connection's bytes, watched until the HTTP/2 preface has been read.
#[pin_project::pin_project]
struct Preface<IO> {
    #[pin]
    io: IO,
    state: Arc<ConnState>,
}

impl<IO> Preface<IO> {
    fn new(io: IO, state: Arc<ConnState>) -> Preface<IO> {
        Preface { io, state }
    }
}

impl<IO: AsyncRead> AsyncRead for Preface<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.project();
        let before = buf.filled().len();
        let r = this.io.poll_read(cx, buf);
        if !this.state.preface_seen.load(Ordering::Relaxed) {
            this.state.read(buf.filled().len() - before);
        }
        r
    }
}

impl<IO: AsyncWrite> AsyncWrite for Preface<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.project().io.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.project().io.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.project().io.poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.project().io.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> TransportLimits {
        TransportLimits::default()
    }

    #[test]
    fn a_connection_without_a_preface_by_the_handshake_timeout_is_dropped() {
        let l = limits();
        let mut f = Facts {
            age: l.handshake_timeout - Duration::from_millis(1),
            ..Facts::default()
        };
        assert_eq!(verdict(&f, &l), Verdict::Fine);
        f.age = l.handshake_timeout;
        assert_eq!(verdict(&f, &l), Verdict::NoPreface);
        f.preface_seen = true;
        assert_eq!(verdict(&f, &l), Verdict::Fine);
    }

    #[test]
    fn a_connection_is_idle_only_without_open_streams_and_closed_once() {
        let l = limits();
        let mut f = Facts {
            preface_seen: true,
            idle_for: l.idle_timeout,
            open_streams: 1,
            ..Facts::default()
        };
        assert_eq!(verdict(&f, &l), Verdict::Fine);
        f.open_streams = 0;
        assert_eq!(verdict(&f, &l), Verdict::Idle);
        f.closing_for = Some(Duration::from_secs(1));
        assert_eq!(verdict(&f, &l), Verdict::Fine);
        f.closing_for = Some(CLOSE_GRACE);
        assert_eq!(verdict(&f, &l), Verdict::CloseOverdue);
    }

    #[test]
    fn a_response_waiting_past_the_send_timeout_stalls_its_connection() {
        let l = limits();
        let mut f = Facts {
            preface_seen: true,
            open_streams: 1,
            busiest_response: Some((l.response_send_timeout - Duration::from_millis(1), 9)),
            ..Facts::default()
        };
        assert_eq!(verdict(&f, &l), Verdict::Fine);
        f.busiest_response = Some((l.response_send_timeout, 9));
        assert_eq!(
            verdict(&f, &l),
            Verdict::Stalled {
                waited: l.response_send_timeout,
                bytes: 9
            }
        );
    }
}
