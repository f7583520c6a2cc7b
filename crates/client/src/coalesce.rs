//! Coalescing: concurrent `post` calls of one client travel together as `PostBatch` calls.
//!
//! A dispatcher task waits for the first post (no timer: an idle client wakes nobody), waits
//! for a free call slot (at most `max_in_flight` calls at once; posts arriving meanwhile
//! queue up), then takes whatever else is waiting for the same ledger as the oldest post, up
//! to `max_per_call` posts and `MAX_BATCH_REQUEST_BYTES`, and sends them as one call: a
//! `PostBatch` writes one ledger, so posts to other ledgers wait for the next calls, in their
//! order (the oldest waiting post always leads the next call, so no ledger starves). A lone
//! post goes at once, alone; under load calls fill up by themselves, as the ledger's own
//! write batches do. Each post gets its own result; a call that fails (after the retry
//! policy) fails each of its posts with the call's error, and each may be sent again with its
//! key.

use crate::calls::{framed_len, Calls, MAX_BATCH_REQUEST_BYTES};
use crate::error::{Error, ErrorKind};
use crate::pb;
use crate::types::Posted;
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, Semaphore};

/// `PostBatch` calls a coalescing client has in flight at once, by default (limit
/// COALESCE_MAX_IN_FLIGHT): enough to keep the ledger's two writer lanes fed while one call's
/// answer travels back, few enough that waiting posts gather into full calls.
pub const COALESCE_MAX_IN_FLIGHT: usize = 4;
/// Posts waiting for the dispatcher, at most, per post allowed in one call (limit
/// COALESCE_QUEUE_CALLS): beyond it, `post` waits for room (back-pressure, not an error).
/// The dispatcher itself holds as many again while it sorts them by ledger.
pub const COALESCE_QUEUE_CALLS: usize = 8;

/// Coalescing of concurrent [`Client::post`](crate::Client::post) calls into `PostBatch` calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Coalesce {
    /// Posts in one `PostBatch` call, at most
    /// (1..=[`MAX_BATCH_REQUESTS`](crate::MAX_BATCH_REQUESTS)).
    pub max_per_call: usize,
    /// `PostBatch` calls in flight at once, at most (limit COALESCE_MAX_IN_FLIGHT by
    /// default); posts arriving meanwhile wait and go together in the next call.
    pub max_in_flight: usize,
}

/// A post waiting to be sent, and where its answer goes.
struct Waiting {
    request: pb::PostRequest,
    bytes: usize,
    reply: oneshot::Sender<Result<Posted, Error>>,
}

/// The sending side of a client's coalescing (the dispatcher ends when every clone of the
/// client is dropped).
#[derive(Clone)]
pub(crate) struct Coalescer {
    queue: mpsc::Sender<Waiting>,
}

impl Coalescer {
    pub(crate) fn spawn(calls: Arc<Calls>, c: Coalesce) -> Coalescer {
        let (queue, rx) = mpsc::channel(c.max_per_call * COALESCE_QUEUE_CALLS);
        tokio::spawn(dispatch(rx, calls, c));
        Coalescer { queue }
    }

    /// Sends `request` in the next call and waits for its own result.
    pub(crate) async fn post(&self, request: pb::PostRequest) -> Result<Posted, Error> {
        let (reply, answer) = oneshot::channel();
        let bytes = framed_len(&request);
        let stopped = || {
            Error::new(
                ErrorKind::Connect,
                "the client's coalescing dispatcher stopped",
            )
        };
        self.queue
            .send(Waiting {
                request,
                bytes,
                reply,
            })
            .await
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

/// The dispatcher: forms calls from whatever is waiting and sends each on its own task.
async fn dispatch(mut rx: mpsc::Receiver<Waiting>, calls: Arc<Calls>, c: Coalesce) {
    let slots = Arc::new(Semaphore::new(c.max_in_flight));
    // Posts taken from the queue and not yet sent (another ledger's, or past a call's
    // limits), oldest first.
    let mut waiting: VecDeque<Waiting> = VecDeque::new();
    let most_waiting = c.max_per_call * COALESCE_QUEUE_CALLS;
    loop {
        if waiting.is_empty() {
            match rx.recv().await {
                Some(w) => waiting.push_back(w),
                None => return,
            }
        }
        let slot = slots.clone().acquire_owned().await.expect("never closed");
        while waiting.len() < most_waiting {
            let Ok(w) = rx.try_recv() else { break };
            waiting.push_back(w);
        }
        let group = next_call(&mut waiting, c.max_per_call);
        let calls = calls.clone();
        tokio::spawn(async move {
            send(&calls, group).await;
            drop(slot);
        });
    }
}

/// The posts of the next call: the oldest waiting post, then the others of its ledger in
/// their order, up to `max_per_call` posts and MAX_BATCH_REQUEST_BYTES (the first that would
/// pass a limit and every later one of that ledger wait, so a ledger's posts go in order).
/// The rest stay waiting, in their order.
fn next_call(waiting: &mut VecDeque<Waiting>, max_per_call: usize) -> Vec<Waiting> {
    let first = waiting.pop_front().expect("a post waits");
    let mut bytes = first.bytes;
    let mut group = vec![first];
    let mut full = false;
    let mut rest = VecDeque::with_capacity(waiting.len());
    for w in waiting.drain(..) {
        if full || w.request.ledger != group[0].request.ledger {
            rest.push_back(w);
        } else if group.len() >= max_per_call || bytes + w.bytes > MAX_BATCH_REQUEST_BYTES {
            full = true;
            rest.push_back(w);
        } else {
            bytes += w.bytes;
            group.push(w);
        }
    }
    *waiting = rest;
    group
}

/// One call for the group; each post gets its result, or the call's error.
async fn send(calls: &Calls, group: Vec<Waiting>) {
    let ledger = group[0].request.ledger.clone();
    let (requests, replies): (Vec<_>, Vec<_>) =
        group.into_iter().map(|w| (w.request, w.reply)).unzip();
    match calls.post_batch(ledger, requests).await {
        Ok(results) => {
            for (reply, result) in replies.into_iter().zip(results) {
                let _ = reply.send(result);
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(ledger: &str, key: &str, bytes: usize) -> Waiting {
        let request = pb::PostRequest {
            ledger: ledger.into(),
            idempotency_key: key.into(),
            ..Default::default()
        };
        Waiting {
            request,
            bytes,
            reply: oneshot::channel().0,
        }
    }

    fn keys<'a>(ws: impl IntoIterator<Item = &'a Waiting>) -> Vec<&'a str> {
        ws.into_iter()
            .map(|w| w.request.idempotency_key.as_str())
            .collect()
    }

    #[test]
    fn a_call_carries_posts_of_one_ledger_only_the_others_wait_in_their_order() {
        let mut q: VecDeque<Waiting> = [
            waiting("a", "a1", 10),
            waiting("b", "b1", 10),
            waiting("a", "a2", 10),
            waiting("c", "c1", 10),
            waiting("b", "b2", 10),
            waiting("a", "a3", 10),
        ]
        .into();
        let first = next_call(&mut q, 2);
        assert_eq!(
            keys(&first),
            ["a1", "a2"],
            "at most 2, of the oldest's ledger"
        );
        let second = next_call(&mut q, 2);
        assert_eq!(keys(&second), ["b1", "b2"], "then the oldest left leads");
        assert_eq!(keys(&next_call(&mut q, 2)), ["c1"]);
        assert_eq!(keys(&next_call(&mut q, 2)), ["a3"]);
        assert!(q.is_empty());
    }

    #[test]
    fn a_post_past_the_byte_limit_waits_and_so_do_the_later_ones_of_its_ledger() {
        let big = MAX_BATCH_REQUEST_BYTES / 2 + 1;
        let mut q: VecDeque<Waiting> = [
            waiting("a", "a1", big),
            waiting("a", "a2", big),
            waiting("b", "b1", 10),
            waiting("a", "a3", 10),
        ]
        .into();
        assert_eq!(keys(&next_call(&mut q, 100)), ["a1"]);
        assert_eq!(keys(&q), ["a2", "b1", "a3"]);
        assert_eq!(keys(&next_call(&mut q, 100)), ["a2", "a3"]);
        assert_eq!(keys(&next_call(&mut q, 100)), ["b1"]);
    }
}
