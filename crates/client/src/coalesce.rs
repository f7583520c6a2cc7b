//! Coalescing: concurrent `post` calls of one client travel together as `PostBatch` calls.
//!
//! A dispatcher task waits for the first post (no timer: an idle client wakes nobody), waits
//! for a free call slot (at most `max_in_flight` calls at once; posts arriving meanwhile
//! queue up), then takes whatever else is waiting, up to `max_per_call` posts and
//! `MAX_BATCH_REQUEST_BYTES`, and sends them as one call. A lone post goes at once, alone;
//! under load calls fill up by themselves, as the ledger's own write batches do. Each post
//! gets its own result; a call that fails (after the retry policy) fails each of its posts
//! with the call's error, and each may be sent again with its key.

use crate::calls::{framed_len, Calls, MAX_BATCH_REQUEST_BYTES};
use crate::error::{Error, ErrorKind};
use crate::pb;
use crate::types::Posted;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, Semaphore};

/// `PostBatch` calls a coalescing client has in flight at once, by default (limit
/// COALESCE_MAX_IN_FLIGHT): enough to keep the ledger's two writer lanes fed while one call's
/// answer travels back, few enough that waiting posts gather into full calls.
pub const COALESCE_MAX_IN_FLIGHT: usize = 4;
/// Posts waiting for the dispatcher, at most, per post allowed in one call (limit
/// COALESCE_QUEUE_CALLS): beyond it, `post` waits for room (back-pressure, not an error).
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
    // A post taken from the queue that would have passed the byte limit: the next call's first.
    let mut held: Option<Waiting> = None;
    loop {
        let first = match held.take() {
            Some(w) => w,
            None => match rx.recv().await {
                Some(w) => w,
                None => return,
            },
        };
        let slot = slots.clone().acquire_owned().await.expect("never closed");
        let mut bytes = first.bytes;
        let mut group = vec![first];
        while group.len() < c.max_per_call {
            let Ok(w) = rx.try_recv() else { break };
            if bytes + w.bytes > MAX_BATCH_REQUEST_BYTES {
                held = Some(w);
                break;
            }
            bytes += w.bytes;
            group.push(w);
        }
        let calls = calls.clone();
        tokio::spawn(async move {
            send(&calls, group).await;
            drop(slot);
        });
    }
}

/// One call for the group; each post gets its result, or the call's error.
async fn send(calls: &Calls, group: Vec<Waiting>) {
    let (requests, replies): (Vec<_>, Vec<_>) =
        group.into_iter().map(|w| (w.request, w.reply)).unzip();
    match calls.post_batch(requests).await {
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
