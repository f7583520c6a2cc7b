//! Responses held for their clients. A response's bytes are encoded as soon as it is ready and
//! kept in a [`Slot`], counted against the server-wide [`Budget`]; HTTP/2 takes them a chunk
//! at a time as the client's window allows. The slot is shared with the connection, which
//! empties it when the client has not taken the response within `RESPONSE_SEND_TIMEOUT`:
//! hyper does not poll a body while the client's window is 0, so no timer inside the body
//! could ever fire, while the connection's own timer always does.

use super::conn::StreamGuard;
use super::error::{StatusOf, TransportError};
use super::RESPONSE_CHUNK_BYTES;
use http_body::{Body as _, Frame};
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tonic::body::Body;
use tonic::codegen::http::{HeaderMap, Response};
use tonic::codegen::Bytes;
use tonic::Code;

/// Bytes held for responses their clients have not taken, server-wide, at most `limit`.
#[derive(Debug)]
pub(super) struct Budget {
    limit: usize,
    held: AtomicUsize,
}

impl Budget {
    pub(super) fn new(limit: usize) -> Budget {
        Budget {
            limit,
            held: AtomicUsize::new(0),
        }
    }

    /// Takes `n` bytes if they fit under the limit.
    fn try_take(&self, n: usize) -> bool {
        self.held
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |h| {
                h.checked_add(n).filter(|t| *t <= self.limit)
            })
            .is_ok()
    }

    fn release(&self, n: usize) {
        let before = self.held.fetch_sub(n, Ordering::SeqCst);
        assert!(before >= n, "released {n} bytes of {before} held");
    }

    /// Bytes held now.
    pub(super) fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }
}

/// How the transport ended a response it did not deliver, if it did: a request extension the
/// access layer's metric reads, so a refused or abandoned response is not counted as its
/// handler's answer.
#[derive(Clone, Debug)]
pub struct Delivery(Arc<AtomicI32>);

impl Default for Delivery {
    fn default() -> Self {
        Delivery(Arc::new(AtomicI32::new(-1)))
    }
}

impl Delivery {
    /// The code the client got instead of the handler's answer, if the transport replaced it.
    pub fn replaced(&self) -> Option<Code> {
        let v = self.0.load(Ordering::SeqCst);
        (v >= 0).then(|| Code::from_i32(v))
    }

    pub(super) fn replace(&self, code: Code) {
        self.0.store(code as i32, Ordering::SeqCst);
    }
}

/// A response's bytes not yet taken by hyper, and the body they came from.
pub(super) struct Slot {
    state: Mutex<Held>,
    budget: Arc<Budget>,
    /// How a response refused mid-way is answered.
    status_of: StatusOf,
}

struct Held {
    /// The body's data frames not yet handed to hyper, in order: what is left of each, and
    /// the size of its allocation (counted until the frame is gone).
    queued: VecDeque<(Bytes, usize)>,
    /// Bytes of the frame hyper took last, whole: counted until it comes back for the next
    /// one (then the frame is in HTTP/2's hands, within SEND_BUFFER_BYTES).
    handed: usize,
    /// Bytes pulled from the body and not yet taken from the budget.
    uncounted: usize,
    /// Bytes taken from the budget: the queued frames and the handed one.
    counted: usize,
    trailers: Option<HeaderMap>,
    /// The handler's body, kept to the end: its drop ends the request's in-flight count.
    body: Body,
    body_done: bool,
    /// Since when this slot has held bytes without becoming empty.
    busy_since: Option<Instant>,
    delivery: Delivery,
    abandoned: bool,
}

/// The body hyper sends: the slot's chunks, then the trailers.
pub struct HeldBody {
    slot: Arc<Slot>,
    _stream: StreamGuard,
}

/// The next piece of the front frame for hyper: a frame of at most `max` bytes whole, else a
/// copy of its next `max` bytes. Copies keep HTTP/2 from holding a slice that pins the whole
/// frame's memory, and the frame goes away, all at once, after its last piece. Returns the
/// piece, whether it is the frame itself, and the frame's size once the frame is used up.
fn next_piece(queued: &mut VecDeque<(Bytes, usize)>, max: usize) -> Option<(Bytes, bool, usize)> {
    let (front, size) = queued.front_mut()?;
    if front.len() == *size && *size <= max {
        let (whole, size) = queued.pop_front().expect("front");
        return Some((whole, true, size));
    }
    let n = front.len().min(max);
    let piece = Bytes::copy_from_slice(&front.split_to(n));
    if !front.is_empty() {
        return Some((piece, false, 0));
    }
    let (_, size) = queued.pop_front().expect("front");
    Some((piece, false, size))
}

impl Held {
    fn new(body: Body, delivery: Delivery) -> Held {
        Held {
            queued: VecDeque::new(),
            handed: 0,
            uncounted: 0,
            counted: 0,
            trailers: None,
            body,
            body_done: false,
            busy_since: None,
            delivery,
            abandoned: false,
        }
    }

    /// Takes one frame from the handler's body, if it has one ready.
    fn pull(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match Pin::new(&mut self.body).poll_frame(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(None) => self.body_done = true,
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => {
                    self.uncounted += data.len();
                    self.queued.push_back((data.clone(), data.len()));
                }
                Err(frame) => {
                    self.trailers = frame.into_trailers().ok();
                    self.body_done = true;
                }
            },
            Poll::Ready(Some(Err(status))) => {
                self.trailers = Some(trailers_of(&status));
                self.body_done = true;
            }
        }
        Poll::Ready(())
    }

    /// Everything the handler's body has ready now (all of a unary answer).
    fn fill(&mut self, cx: &mut Context<'_>) {
        while !self.body_done && self.pull(cx).is_ready() {}
    }

    fn mark(&mut self, now: Instant) {
        self.busy_since = match self.counted {
            0 => None,
            _ => self.busy_since.or(Some(now)),
        };
    }

    /// Counts the bytes pulled since the last count; `false` (and nothing counted) when they do
    /// not fit in the budget.
    fn count_new(&mut self, budget: &Budget) -> bool {
        if !budget.try_take(self.uncounted) {
            return false;
        }
        self.counted += std::mem::take(&mut self.uncounted);
        true
    }

    /// Drops everything held: the bytes, the trailers, the handler's body.
    fn drop_all(&mut self, budget: &Budget, code: Code) {
        budget.release(self.counted);
        self.counted = 0;
        self.uncounted = 0;
        self.handed = 0;
        self.queued.clear();
        self.trailers = None;
        self.delivery.replace(code);
        self.body = Body::empty();
        self.body_done = true;
        self.busy_since = None;
    }
}

/// A status as trailers (`grpc-status`, `grpc-message`, `grpc-status-details-bin`).
fn trailers_of(status: &tonic::Status) -> HeaderMap {
    let mut map = HeaderMap::new();
    if status.add_header(&mut map).is_err() {
        // Only a message that cannot be a header value gets here: the code alone then.
        map.insert("grpc-status", (status.code() as i32).into());
    }
    map
}

/// Why the transport refuses a response: the budget is full.
fn over_budget(bytes: usize, budget: &Budget) -> TransportError {
    TransportError::OverBudget {
        bytes,
        held: budget.held(),
        limit: budget.limit,
    }
}

/// Encodes a handler's response now and holds it in a slot the connection can see; a response
/// that does not fit in the budget is freed at once and answered `UNAVAILABLE`.
pub(super) async fn hold(
    resp: Response<Body>,
    budget: &Arc<Budget>,
    stream: StreamGuard,
    delivery: Delivery,
    status_of: StatusOf,
) -> Response<HeldBody> {
    let (parts, body) = resp.into_parts();
    let mut held = Held::new(body, delivery);
    std::future::poll_fn(|cx| {
        held.fill(cx);
        Poll::Ready(())
    })
    .await;
    let (parts, mut held) = if held.count_new(budget) {
        (parts, held)
    } else {
        let refusal = over_budget(held.uncounted, budget);
        held.drop_all(budget, Code::Unavailable);
        let (parts, body) = status_of(refusal).into_http::<Body>().into_parts();
        let mut empty = Held::new(body, held.delivery.clone());
        empty.fill(&mut Context::from_waker(std::task::Waker::noop()));
        (parts, empty)
    };
    held.mark(Instant::now());
    let slot = Arc::new(Slot {
        state: Mutex::new(held),
        budget: budget.clone(),
        status_of,
    });
    stream.conn().register(&slot);
    Response::from_parts(
        parts,
        HeldBody {
            slot,
            _stream: stream,
        },
    )
}

impl Slot {
    /// How long the slot has held bytes, and how many, if it holds any.
    pub(super) fn busy(&self, now: Instant) -> Option<(Duration, usize)> {
        let s = self.state.lock().expect("slot");
        s.busy_since
            .map(|t| (now.saturating_duration_since(t), s.counted))
    }

    /// The client did not take the response in time: free it. The client gets nothing more on
    /// this stream (its connection is closing).
    pub(super) fn abandon(&self) {
        let mut s = self.state.lock().expect("slot");
        s.drop_all(&self.budget, Code::Cancelled);
        s.abandoned = true;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let s = self.state.get_mut().expect("slot");
        self.budget.release(s.counted);
    }
}

/// The response was dropped by the transport (its client took none of it in time).
#[derive(Debug)]
pub struct Abandoned;

impl std::fmt::Display for Abandoned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the response was not taken by the client in time (limit RESPONSE_SEND_TIMEOUT)"
        )
    }
}

impl std::error::Error for Abandoned {}

impl http_body::Body for HeldBody {
    type Data = Bytes;
    type Error = Abandoned;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Abandoned>>> {
        let slot = &self.slot;
        let mut s = slot.state.lock().expect("slot");
        // Hyper is back for more: the chunk it took went on to HTTP/2.
        slot.budget.release(s.handed);
        s.counted -= std::mem::take(&mut s.handed);
        let out = loop {
            if s.abandoned {
                break Poll::Ready(Some(Err(Abandoned)));
            }
            if let Some((piece, whole, size)) = next_piece(&mut s.queued, RESPONSE_CHUNK_BYTES) {
                if whole {
                    s.handed = size;
                } else if size > 0 {
                    slot.budget.release(size);
                    s.counted -= size;
                }
                break Poll::Ready(Some(Ok(Frame::data(piece))));
            }
            if let Some(t) = s.trailers.take() {
                break Poll::Ready(Some(Ok(Frame::trailers(t))));
            }
            if s.body_done {
                break Poll::Ready(None);
            }
            // A streaming answer: its next frame, counted like the first ones.
            if s.pull(cx).is_pending() {
                break Poll::Pending;
            }
            if !s.count_new(&slot.budget) {
                let refusal = over_budget(s.uncounted, &slot.budget);
                s.drop_all(&slot.budget, Code::Unavailable);
                s.trailers = Some(trailers_of(&(slot.status_of)(refusal)));
            }
        };
        s.mark(Instant::now());
        out
    }

    fn is_end_stream(&self) -> bool {
        let s = self.slot.state.lock().expect("slot");
        s.body_done && s.queued.is_empty() && s.trailers.is_none() && !s.abandoned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_frame_goes_whole_and_a_large_one_in_copied_pieces_freed_after_the_last() {
        let small = Bytes::from_static(b"abc");
        let big = Bytes::from((0..10u8).collect::<Vec<_>>());
        let mut q: VecDeque<(Bytes, usize)> = [(small.clone(), 3), (big.clone(), 10)].into();
        assert_eq!(next_piece(&mut q, 4), Some((small, true, 3)));
        let mut pieces = Vec::new();
        while let Some((p, whole, freed)) = next_piece(&mut q, 4) {
            assert!(!whole);
            pieces.push((p.len(), freed));
            assert_ne!(p.as_ptr(), big.as_ptr(), "a copy, not a slice of the frame");
        }
        assert_eq!(pieces, [(4, 0), (4, 0), (2, 10)]);
        assert!(q.is_empty());
    }

    #[test]
    fn the_budget_takes_what_fits_and_gives_it_back() {
        let b = Budget::new(10);
        assert!(b.try_take(6));
        assert!(!b.try_take(5));
        assert!(b.try_take(4));
        assert_eq!(b.held(), 10);
        b.release(6);
        assert!(b.try_take(0));
        assert_eq!(b.held(), 4);
    }

    #[test]
    fn a_delivery_says_nothing_until_the_transport_replaced_the_answer() {
        let d = Delivery::default();
        assert_eq!(d.replaced(), None);
        d.clone().replace(Code::Unavailable);
        assert_eq!(d.replaced(), Some(Code::Unavailable));
    }
}
