//! The calls themselves: one connection, each call sent under the retry policy, what was sent
//! (the counters behind [`ClientStats`]), and the bounds of a `PostBatch`. The typed
//! [`Client`](crate::Client) and the coalescing dispatcher both send through it.

use crate::connect::RawClient;
use crate::error::{Error, ErrorKind};
use crate::pb;
use crate::retry::{random, RetryPolicy};
use crate::types::Posted;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

/// Requests in one `PostBatch` call, at most (the ledger's limit MAX_BATCH_REQUESTS).
pub const MAX_BATCH_REQUESTS: usize = 1000;

/// Bytes of one `PostBatch` request, at most (the ledger's limit MAX_BATCH_REQUEST_BYTES).
pub const MAX_BATCH_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// What a client has sent so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Calls sent to the server, every attempt counted.
    pub attempts: u64,
    /// Attempts that repeated a call whose outcome was unknown.
    pub retries: u64,
    /// `PostBatch` calls sent (first attempts).
    pub batch_calls: u64,
    /// Postings sent in `PostBatch` calls (first attempts).
    pub batched_postings: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) attempts: AtomicU64,
    pub(crate) retries: AtomicU64,
    pub(crate) batch_calls: AtomicU64,
    pub(crate) batched_postings: AtomicU64,
}

/// The calls themselves: one connection and the retry policy (shared with the coalescer's
/// dispatcher).
pub(crate) struct Calls {
    pub(crate) raw: RawClient,
    pub(crate) retry: RetryPolicy,
    pub(crate) counters: Counters,
}

impl Calls {
    /// Sends `req` with `rpc`, again with the same request while the outcome is unknown and
    /// attempts remain (pausing as the policy says); the last error otherwise.
    pub(crate) async fn call<Req, T, F, Fut>(&self, req: Req, rpc: F) -> Result<T, Error>
    where
        Req: Clone,
        F: Fn(RawClient, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let mut attempt = 1;
        loop {
            let mut request = tonic::Request::new(req.clone());
            request.set_timeout(self.retry.attempt_timeout);
            self.counters.attempts.fetch_add(1, Ordering::Relaxed);
            let error = match rpc(self.raw.clone(), request).await {
                Ok(r) => return Ok(r.into_inner()),
                Err(s) => Error::from_status(&s),
            };
            if !error.is_retry_safe() || attempt >= self.retry.max_attempts {
                return Err(error);
            }
            tokio::time::sleep(self.retry.pause(attempt, random())).await;
            attempt += 1;
            self.counters.retries.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) async fn post(&self, req: pb::PostRequest) -> Result<Posted, Error> {
        let r = self
            .call(req, |mut c, r| async move { c.post(r).await })
            .await?;
        Posted::from_pb(r.posting, r.replayed)
    }

    /// One `PostBatch` call on `ledger` (retried whole): one result per request, in order,
    /// or the call's error. Every request names the same ledger (a batch writes one).
    pub(crate) async fn post_batch(
        &self,
        ledger: String,
        requests: Vec<pb::PostRequest>,
    ) -> Result<Vec<Result<Posted, Error>>, Error> {
        debug_assert!(requests.iter().all(|r| r.ledger == ledger));
        let n = requests.len();
        self.counters.batch_calls.fetch_add(1, Ordering::Relaxed);
        self.counters
            .batched_postings
            .fetch_add(n as u64, Ordering::Relaxed);
        let req = pb::PostBatchRequest { ledger, requests };
        let r = self
            .call(req, |mut c, r| async move { c.post_batch(r).await })
            .await?;
        if r.results.len() != n {
            return Err(Error::new(
                ErrorKind::Invalid,
                format!(
                    "the ledger answered {} results to {n} requests",
                    r.results.len()
                ),
            ));
        }
        Ok(r.results.into_iter().map(batch_result).collect())
    }
}

/// One `PostBatch` result as `post` would have answered it.
fn batch_result(r: pb::PostBatchResult) -> Result<Posted, Error> {
    match r.outcome {
        Some(pb::post_batch_result::Outcome::Response(p)) => Posted::from_pb(p.posting, p.replayed),
        Some(pb::post_batch_result::Outcome::Error(s)) => Err(Error::from_rpc_status(&s)),
        None => Err(Error::new(
            ErrorKind::Invalid,
            "the ledger answered a result without an outcome",
        )),
    }
}

/// Bytes a request takes inside a `PostBatchRequest`.
pub(crate) fn framed_len(r: &pb::PostRequest) -> usize {
    let len = prost::Message::encoded_len(r);
    1 + prost::length_delimiter_len(len) + len
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Reason, ERROR_DOMAIN};
    use std::sync::Mutex;
    use std::time::Duration;
    use tonic::Code;
    use tonic_types::StatusExt;

    type Answer = Result<pb::UpdateAccountResponse, tonic::Status>;

    /// Calls retried at most `max_attempts` times, with pauses of a millisecond or two.
    fn retrying(max_attempts: u32) -> Calls {
        Calls {
            raw: crate::connect::unconnected(),
            retry: RetryPolicy {
                max_attempts,
                first_backoff: Duration::from_millis(1),
                max_backoff: Duration::from_millis(2),
                ..RetryPolicy::default()
            },
            counters: Counters::default(),
        }
    }

    fn ledger(code: Code, reason: Reason) -> tonic::Status {
        let info = tonic_types::ErrorDetails::with_error_info(
            reason.as_str(),
            ERROR_DOMAIN,
            std::collections::HashMap::new(),
        );
        tonic::Status::with_error_details(code, reason.as_str(), info)
    }

    fn update() -> pb::UpdateAccountRequest {
        pb::UpdateAccountRequest {
            idempotency_key: "freeze/alice/1".into(),
            code: "wallet:alice".into(),
            expected_version: 3,
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["status".into()],
            }),
            status: pb::AccountStatus::Frozen as i32,
            reason: "fraud review".into(),
            ..pb::UpdateAccountRequest::default()
        }
    }

    /// An `UpdateAccount` sent under the retry policy, each attempt answered by the next of
    /// `answers`: the requests sent (each with its deadline), and the call's outcome.
    async fn scripted(
        calls: &Calls,
        answers: Vec<Answer>,
    ) -> (
        Vec<pb::UpdateAccountRequest>,
        Result<pb::UpdateAccountResponse, Error>,
    ) {
        let answers = Mutex::new(answers.into_iter());
        let sent = Mutex::new(Vec::new());
        let outcome = calls
            .call(
                update(),
                |_, r: tonic::Request<pb::UpdateAccountRequest>| {
                    assert!(r.metadata().get("grpc-timeout").is_some(), "a deadline");
                    sent.lock().unwrap().push(r.into_inner());
                    let answer = answers
                        .lock()
                        .unwrap()
                        .next()
                        .expect("one answer per attempt");
                    async move { answer.map(tonic::Response::new) }
                },
            )
            .await;
        (sent.into_inner().unwrap(), outcome)
    }

    #[tokio::test]
    async fn an_update_whose_outcome_is_unknown_is_sent_again_as_it_was_until_answered() {
        let calls = retrying(RetryPolicy::default().max_attempts);
        let answered = pb::UpdateAccountResponse {
            account: None,
            replayed: true,
        };
        let answers = vec![
            Err(tonic::Status::unavailable("connection reset")),
            Err(ledger(Code::Unavailable, Reason::StorageUnavailable)),
            Err(tonic::Status::deadline_exceeded("deadline")),
            Err(ledger(Code::DeadlineExceeded, Reason::DeadlineExceeded)),
            Ok(answered.clone()),
        ];
        let (sent, outcome) = scripted(&calls, answers).await;
        assert_eq!(outcome.unwrap(), answered);
        assert_eq!(sent.len(), 5);
        assert!(
            sent.iter().all(|r| *r == update()),
            "the same request, key and all"
        );
        let c = &calls.counters;
        assert_eq!(c.attempts.load(Ordering::Relaxed), 5);
        assert_eq!(c.retries.load(Ordering::Relaxed), 4);
    }

    #[tokio::test]
    async fn a_version_mismatch_and_every_other_answer_are_returned_at_once_never_retried() {
        let answers = [
            ledger(Code::Aborted, Reason::AccountVersionMismatch),
            tonic::Status::aborted("aborted, by a proxy"),
            ledger(Code::FailedPrecondition, Reason::AccountClosed),
            ledger(Code::FailedPrecondition, Reason::AccountNotEmpty),
            ledger(Code::FailedPrecondition, Reason::BalanceCeilingExceeded),
            ledger(Code::InvalidArgument, Reason::InvalidField),
        ];
        for status in answers {
            let calls = retrying(RetryPolicy::default().max_attempts);
            let want = Error::from_status(&status);
            let (sent, outcome) = scripted(&calls, vec![Err(status)]).await;
            assert_eq!(sent.len(), 1, "{want}");
            assert_eq!(outcome.unwrap_err(), want);
            assert_eq!(calls.counters.retries.load(Ordering::Relaxed), 0);
        }
        let calls = retrying(RetryPolicy::default().max_attempts);
        let mismatch = ledger(Code::Aborted, Reason::AccountVersionMismatch);
        let (_, outcome) = scripted(&calls, vec![Err(mismatch)]).await;
        let e = outcome.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Ledger(Reason::AccountVersionMismatch));
    }

    #[tokio::test]
    async fn an_unknown_outcome_is_returned_once_the_attempts_are_spent() {
        let calls = retrying(2);
        let unavailable = || Err(ledger(Code::Unavailable, Reason::StorageUnavailable));
        let (sent, outcome) = scripted(&calls, vec![unavailable(), unavailable()]).await;
        assert_eq!(sent.len(), 2);
        let e = outcome.unwrap_err();
        assert_eq!(e.reason(), Some(Reason::StorageUnavailable));
        assert!(
            e.is_retry_safe(),
            "the caller may send it again with the same key"
        );
        let (sent, _) = scripted(&retrying(1), vec![unavailable()]).await;
        assert_eq!(sent.len(), 1, "RetryPolicy::never sends once");
    }
}
