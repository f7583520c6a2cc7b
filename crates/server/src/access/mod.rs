//! The access layer around the `ledger.v1.Ledger` service: drain refusal, authentication and
//! roles (sets the [`Caller`] extension: its name and granted ledgers), the turn of `List*`
//! calls (`MAX_PAGES_IN_PROGRESS`), contract errors for transport-level failures (oversized or
//! undecodable requests, and the transport's own errors: [`transport_status`]), and one metric
//! sample and one debug log line per request (with the code the client got, also when the
//! transport answered instead: a passed deadline, a full response budget).
//!
//! Health and reflection are not wrapped: they stay open.

pub mod auth;

use crate::grpc::status::to_status;
use crate::grpc::Caller;
use crate::transport::{Delivery, PeerCertificate, TransportError, TransportLimits};
use auth::{AuthPolicy, Presented};
use ledger_core::{LedgerError, Reason};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tonic::body::Body;
use tonic::codegen::http;
use tonic::server::NamedService;
use tonic::Code;

/// Longest wait for in-flight requests at shutdown (limit DRAIN_TIMEOUT, by default): the
/// drain refuses new requests, waits at most this long for the others, then the transport
/// closes what is still open.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(20);

/// The methods of `ledger.v1.Ledger` (metric labels are only ever one of these or `unknown`).
pub const METHODS: [&str; 23] = [
    "CreateAccount",
    "GetAccount",
    "UpdateAccount",
    "ListAccountVersions",
    "ListAccounts",
    "Post",
    "PostBatch",
    "Void",
    "Capture",
    "GetPosting",
    "ListPostings",
    "GetBalance",
    "ListBalances",
    "ListEntries",
    "ListRollups",
    "CreateLedger",
    "GetLedger",
    "ListLedgers",
    "GetDigest",
    "GetInclusionProof",
    "GetConsistencyProof",
    "ClosePeriod",
    "ListPeriodCloses",
];

/// Shared state of the access layer: the policy, the drain flag, requests in flight, the
/// turns of `List*` calls.
#[derive(Debug)]
pub struct AccessState {
    policy: AuthPolicy,
    draining: AtomicBool,
    in_flight: AtomicUsize,
    idle: tokio::sync::Notify,
    pages: Arc<tokio::sync::Semaphore>,
}

impl AccessState {
    /// `limits` gives MAX_PAGES_IN_PROGRESS.
    pub fn new(policy: AuthPolicy, limits: &TransportLimits) -> Arc<AccessState> {
        Arc::new(AccessState {
            policy,
            draining: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            idle: tokio::sync::Notify::new(),
            pages: Arc::new(tokio::sync::Semaphore::new(limits.max_pages_in_progress)),
        })
    }

    /// From now on, new ledger requests are refused with `UNAVAILABLE`.
    pub fn begin_drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Requests whose response has not been fully sent yet.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Waits until no request is in flight, at most `timeout`; returns whether it got there.
    pub async fn wait_idle(&self, timeout: Duration) -> bool {
        let wait = async {
            loop {
                let notified = self.idle.notified();
                if self.in_flight() == 0 {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(timeout, wait).await.is_ok()
    }
}

struct InFlight(Arc<AccessState>);

impl InFlight {
    fn new(state: Arc<AccessState>) -> InFlight {
        state.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(state)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// The ledger service wrapped in the access layer.
#[derive(Clone)]
pub struct Access<S> {
    inner: S,
    state: Arc<AccessState>,
}

impl<S> Access<S> {
    pub fn new(inner: S, state: Arc<AccessState>) -> Access<S> {
        Access { inner, state }
    }
}

impl<S: NamedService> NamedService for Access<S> {
    const NAME: &'static str = S::NAME;
}

fn method_of(path: &str) -> &'static str {
    let last = path.rsplit('/').next().unwrap_or("");
    METHODS
        .iter()
        .copied()
        .find(|m| *m == last)
        .unwrap_or("unknown")
}

/// A call that builds a page waits for its turn (MAX_PAGES_IN_PROGRESS).
fn builds_a_page(method: &str) -> bool {
    method.starts_with("List")
}

fn presented(req: &http::Request<Body>) -> Presented<'_> {
    let certificate_identity = req
        .extensions()
        .get::<PeerCertificate>()
        .map(|c| auth::certificate_identity(&c.0));
    Presented {
        authorization: req
            .headers()
            .get(http::header::AUTHORIZATION)
            .map(|v| v.as_bytes()),
        certificate_identity,
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S> tonic::codegen::Service<http::Request<Body>> for Access<S>
where
    S: tonic::codegen::Service<
            http::Request<Body>,
            Response = http::Response<Body>,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<Body>) -> Self::Future {
        let started = Instant::now();
        let method = method_of(req.uri().path());
        let state = self.state.clone();
        let admitted = admit(&state, &req);
        let mut probe = Probe {
            method,
            caller: String::new(),
            started,
            code: None,
            delivery: req.extensions().get::<Delivery>().cloned(),
            turn: None,
            _in_flight: InFlight::new(state.clone()),
        };
        let caller = match admitted {
            Ok(admitted) => admitted,
            Err(e) => {
                let resp = to_status(e).into_http::<Body>();
                return Box::pin(async move { Ok(probe.wrap(resp)) });
            }
        };
        probe.caller.clone_from(&caller.name);
        req.extensions_mut().insert(caller);
        let turn = builds_a_page(method).then(|| state.pages.clone());
        // The usual tower pattern: the clone that was made ready serves this call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        // The transport bounds the whole call, waiting for the turn included, by its deadline.
        Box::pin(async move {
            if let Some(pages) = turn {
                probe.turn = Some(pages.acquire_owned().await.expect("never closed"));
            }
            let resp = inner.call(req).await?;
            Ok(probe.wrap(contract_errors(method, resp)))
        })
    }
}

/// The caller of a call, or why it is refused: the server is draining, or the credentials do
/// not allow it.
fn admit(state: &AccessState, req: &http::Request<Body>) -> Result<Caller, LedgerError> {
    if state.draining() {
        return Err(LedgerError::new(
            Reason::StorageUnavailable,
            "the server is shutting down and takes no new requests; retry (with the same idempotency key) on another instance or after the restart",
        ));
    }
    let rpc = req.uri().path().rsplit('/').next().unwrap_or("");
    state.policy.authorize(rpc, presented(req))
}

/// The contract's answer to an error of the transport (handed to it at start): a malformed
/// `grpc-timeout` is an invalid field, a passed deadline `DEADLINE_EXCEEDED` (the outcome is
/// unknown), a response over the budget `UNAVAILABLE` (retry later).
pub fn transport_status(e: TransportError) -> tonic::Status {
    to_status(transport_error(e))
}

fn transport_error(e: TransportError) -> LedgerError {
    match e {
        TransportError::MalformedTimeout(why) => {
            LedgerError::new(Reason::InvalidField, why).with("field", "grpc-timeout")
        }
        TransportError::DeadlineExceeded(d) if d.by_client => {
            LedgerError::deadline_exceeded(format!("{:?}, the caller's grpc-timeout", d.after))
        }
        TransportError::DeadlineExceeded(d) => LedgerError::deadline_exceeded(format!(
            "{:?}, the server's limit REQUEST_TIMEOUT",
            d.after
        ))
        .with("limit", "REQUEST_TIMEOUT"),
        TransportError::OverBudget { bytes, held, limit } => LedgerError::new(
            Reason::StorageUnavailable,
            format!(
                "the server holds {held} bytes of responses its clients have not taken yet; this response of {bytes} bytes is over the limit of {limit} bytes (RESPONSE_BYTES_IN_FLIGHT); retry (with the same idempotency key) later",
            ),
        )
        .with("limit", "RESPONSE_BYTES_IN_FLIGHT"),
    }
}

fn header_code(headers: &http::HeaderMap) -> Option<Code> {
    headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok())
        .map(Code::from_i32)
}

/// The ledger's handlers only return contract errors; a trailers-only `OUT_OF_RANGE`,
/// `INTERNAL` or `UNKNOWN` comes from tonic's decoding of the request (too large for the
/// method's limit, not a valid message, bad framing) and is answered as the contract error it
/// is.
fn contract_errors(method: &str, resp: http::Response<Body>) -> http::Response<Body> {
    let Some(code) = header_code(resp.headers()) else {
        return resp;
    };
    let detail = || {
        resp.headers()
            .get("grpc-message")
            .and_then(|v| v.to_str().ok())
            .map(percent_decode)
            .unwrap_or_default()
    };
    let e = match code {
        Code::OutOfRange => {
            // tonic says "… found {len} bytes, the limit is …".
            let detail = detail();
            let found = detail
                .split_once("found ")
                .and_then(|(_, rest)| rest.split(' ').next())
                .and_then(|n| n.parse::<u64>().ok());
            let (name, limit) = crate::grpc::sized::request_limit(method);
            LedgerError::limit(
                "the request",
                name,
                format!("{limit} bytes"),
                match found {
                    Some(n) => format!("{n} bytes"),
                    None => format!("larger ({detail})"),
                },
            )
        }
        Code::Internal | Code::Unknown => LedgerError::new(
            Reason::InvalidField,
            format!("the request is not a valid message: {}", detail()),
        ),
        _ => return resp,
    };
    to_status(e).into_http::<Body>()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Some(v) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Follows one request to the end of its response: records its metric and its log line once.
struct Probe {
    method: &'static str,
    caller: String,
    started: Instant,
    code: Option<Code>,
    /// The transport's word on the response, when it refused or dropped it.
    delivery: Option<Delivery>,
    /// A `List*` call's turn (MAX_PAGES_IN_PROGRESS): held while its page is built and until
    /// it is encoded (the body's first frame), not while the client takes it.
    turn: Option<tokio::sync::OwnedSemaphorePermit>,
    _in_flight: InFlight,
}

impl Probe {
    fn wrap(mut self, resp: http::Response<Body>) -> http::Response<Body> {
        self.code = header_code(resp.headers());
        resp.map(|body| Body::new(Observed { body, probe: self }))
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        // The transport replaced the answer (budget full, client too slow), or no status was
        // seen: the client went away before the end of the response.
        let code = self
            .delivery
            .as_ref()
            .and_then(Delivery::replaced)
            .or(self.code)
            .unwrap_or(Code::Cancelled);
        let elapsed = self.started.elapsed();
        crate::metrics::request(self.method, code, elapsed);
        tracing::debug!(
            method = self.method,
            code = crate::metrics::code_name(code),
            duration_ms = elapsed.as_secs_f64() * 1e3,
            caller = %self.caller,
            "request"
        );
    }
}

#[pin_project::pin_project]
struct Observed {
    #[pin]
    body: Body,
    probe: Probe,
}

impl http_body::Body for Observed {
    type Data = tonic::codegen::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let frame = this.body.poll_frame(cx);
        if frame.is_ready() {
            this.probe.turn = None;
        }
        if let Poll::Ready(Some(Ok(f))) = &frame {
            if let Some(code) = f.trailers_ref().and_then(header_code) {
                this.probe.code = Some(code);
            }
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_are_named_by_the_last_path_segment_or_unknown() {
        assert_eq!(method_of("/ledger.v1.Ledger/Post"), "Post");
        assert_eq!(method_of("/ledger.v1.Ledger/ListEntries"), "ListEntries");
        assert_eq!(method_of("/ledger.v1.Ledger/Nope"), "unknown");
        assert_eq!(method_of(""), "unknown");
    }

    #[test]
    fn a_passed_deadline_says_the_outcome_is_unknown_and_names_who_set_it() {
        use crate::transport::deadline::Deadline;
        let client = Deadline::of(Some(b"200m"), Duration::from_secs(15)).unwrap();
        let e = transport_error(client.exceeded());
        assert_eq!(e.reason, Reason::DeadlineExceeded);
        assert!(
            e.message.contains("200ms, the caller's grpc-timeout"),
            "{}",
            e.message
        );
        assert!(e.message.contains("unknown") && e.message.contains("same idempotency key"));
        let server = Deadline::of(None, Duration::from_secs(15))
            .unwrap()
            .exceeded();
        let server = transport_error(server);
        assert!(
            server.message.contains("REQUEST_TIMEOUT"),
            "{}",
            server.message
        );
        assert_eq!(server.metadata["limit"], "REQUEST_TIMEOUT");
    }

    #[test]
    fn a_malformed_grpc_timeout_is_an_invalid_field_named_grpc_timeout() {
        use crate::transport::deadline::Deadline;
        let e = Deadline::of(Some(b"soon"), Duration::from_secs(15)).unwrap_err();
        let e = transport_error(e);
        assert_eq!(e.reason, Reason::InvalidField);
        assert_eq!(e.metadata["field"], "grpc-timeout");
        assert!(
            e.message.starts_with("the grpc-timeout header \"soon\""),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_response_over_the_budget_is_unavailable_and_names_the_limit_and_the_bytes() {
        let e = transport_error(TransportError::OverBudget {
            bytes: 300,
            held: 900,
            limit: 1000,
        });
        assert_eq!(e.reason, Reason::StorageUnavailable);
        assert_eq!(e.metadata["limit"], "RESPONSE_BYTES_IN_FLIGHT");
        assert_eq!(
            e.message,
            "the server holds 900 bytes of responses its clients have not taken yet; this response of 300 bytes is over the limit of 1000 bytes (RESPONSE_BYTES_IN_FLIGHT); retry (with the same idempotency key) later"
        );
        let s = transport_status(TransportError::OverBudget {
            bytes: 300,
            held: 900,
            limit: 1000,
        });
        assert_eq!(s.code(), Code::Unavailable);
    }

    #[test]
    fn percent_decoding_keeps_what_it_cannot_decode() {
        assert_eq!(percent_decode("a%20b"), "a b");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
    }
}
