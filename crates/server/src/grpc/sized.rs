//! `ledger.v1.Ledger` with each method's request size limit. tonic sets one decoding limit
//! per service, checked on the message's length before it is decoded; `PostBatch` has its
//! own, larger one ([`MAX_BATCH_REQUEST_BYTES`]), every other method the contract's
//! [`MAX_REQUEST_BYTES`]. So the ledger is served by two copies of the generated service
//! over one handler, and the call's path picks the copy.

use super::handlers::LedgerGrpc;
use super::pb::ledger_server::LedgerServer;
use crate::transport::MAX_RESPONSE_BYTES;
use ledger_core::limits::{MAX_BATCH_REQUEST_BYTES, MAX_BATCH_RESPONSE_BYTES, MAX_REQUEST_BYTES};
use std::convert::Infallible;
use std::task::{Context, Poll};
use tonic::body::Body;
use tonic::codegen::{http, Service};
use tonic::server::NamedService;

/// The path of `PostBatch` calls.
pub const POST_BATCH_PATH: &str = "/ledger.v1.Ledger/PostBatch";

// Whatever a PostBatch under its byte limit holds, its answer can be sent.
const _: () = assert!(MAX_BATCH_RESPONSE_BYTES <= MAX_RESPONSE_BYTES);

/// The ledger service, decoding each method's request under that method's limit.
#[derive(Clone)]
pub struct SizedLedger {
    single: LedgerServer<LedgerGrpc>,
    batch: LedgerServer<LedgerGrpc>,
}

impl SizedLedger {
    pub fn new(grpc: LedgerGrpc) -> SizedLedger {
        let server = |limit: usize| {
            LedgerServer::new(grpc.clone())
                .max_decoding_message_size(limit)
                .max_encoding_message_size(MAX_RESPONSE_BYTES)
        };
        SizedLedger {
            single: server(MAX_REQUEST_BYTES),
            batch: server(MAX_BATCH_REQUEST_BYTES),
        }
    }
}

/// The request size limit of a method, by name, for the error that quotes it.
pub fn request_limit(method: &str) -> (&'static str, usize) {
    if method == "PostBatch" {
        ("MAX_BATCH_REQUEST_BYTES", MAX_BATCH_REQUEST_BYTES)
    } else {
        ("MAX_REQUEST_BYTES", MAX_REQUEST_BYTES)
    }
}

impl NamedService for SizedLedger {
    const NAME: &'static str = <LedgerServer<LedgerGrpc> as NamedService>::NAME;
}

impl Service<http::Request<Body>> for SizedLedger {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = <LedgerServer<LedgerGrpc> as Service<http::Request<Body>>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Both copies are always ready (the generated service holds no capacity).
        type Inner = LedgerServer<LedgerGrpc>;
        match <Inner as Service<http::Request<Body>>>::poll_ready(&mut self.single, cx) {
            Poll::Ready(Ok(())) => {
                <Inner as Service<http::Request<Body>>>::poll_ready(&mut self.batch, cx)
            }
            other => other,
        }
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        if req.uri().path() == POST_BATCH_PATH {
            self.batch.call(req)
        } else {
            self.single.call(req)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::MAX_RESPONSE_BYTES;
    use crate::grpc::convert::batch_result_to_pb;
    use crate::grpc::pb;
    use ledger_core::amount::Amount;
    use ledger_core::limits::{BATCH_GROWTH_PER_LEG, BATCH_RESULT_OVERHEAD, MAX_LEGS};
    use ledger_core::record::{PostedLeg, Posting};
    use ledger_core::{Direction, LedgerError, Reason};
    use prost::Message;

    #[test]
    fn the_client_crate_knows_the_ledgers_limits() {
        use ledger_core::limits as l;
        assert_eq!(ledger_client::MAX_BATCH_REQUESTS, l::MAX_BATCH_REQUESTS);
        assert_eq!(
            ledger_client::MAX_BATCH_REQUEST_BYTES,
            l::MAX_BATCH_REQUEST_BYTES
        );
        assert_eq!(
            ledger_client::MAX_AMOUNT_DIGITS as usize,
            l::MAX_AMOUNT_DIGITS
        );
        assert_eq!(ledger_client::MAX_SCALE, l::MAX_SCALE);
        assert_eq!(ledger_client::PAGE_SIZE, l::MAX_PAGE_SIZE);
        assert_eq!(ledger_client::MAX_RESPONSE_BYTES, MAX_RESPONSE_BYTES);
        // An attempt's deadline lets a write batch answer by itself first, and ends before
        // the server's own.
        assert!(ledger_client::ATTEMPT_TIMEOUT > crate::writer::BATCH_TIMEOUT);
        assert!(ledger_client::ATTEMPT_TIMEOUT < crate::transport::REQUEST_TIMEOUT);
    }

    /// Bytes a message takes as an element of a repeated field (tag, length, encoding).
    fn framed(len: usize) -> usize {
        1 + prost::length_delimiter_len(len) + len
    }

    #[test]
    fn a_batch_result_is_at_most_its_request_and_the_named_growth_per_leg_and_result() {
        // The most an answer can grow: the shortest legs (a one-letter account, amount "1")
        // rendered at scale 18, the longest caller, the latest times.
        let request = pb::PostRequest {
            idempotency_key: "k".repeat(255),
            legs: (0..MAX_LEGS)
                .map(|_| pb::Leg {
                    account: "a".into(),
                    direction: pb::Direction::Debit as i32,
                    amount: "1".into(),
                })
                .collect(),
            ..Default::default()
        };
        let at = time::OffsetDateTime::from_unix_timestamp(253_402_300_799).unwrap()
            + time::Duration::microseconds(999_999);
        let posting = Posting {
            posting_id: uuid::Uuid::now_v7(),
            sequence: u64::MAX,
            caller: "c".repeat(crate::grpc::MAX_CALLER_BYTES),
            idempotency_key: request.idempotency_key.clone(),
            legs: (0..MAX_LEGS)
                .map(|_| PostedLeg {
                    account: "a".into(),
                    direction: Direction::Debit,
                    amount: Amount::from_minor(10i128.pow(18), 18),
                })
                .collect(),
            effective_at: at,
            recorded_at: at,
            memo: String::new(),
            metadata: Default::default(),
            voids_posting_id: None,
            voided_by_posting_id: None,
            hash: None,
            void_reason: None,
            // The largest answer a Post can have: a hold, with its expiry, already closed.
            hold: Some(ledger_core::record::HoldState {
                expires_at: Some(at),
                closed_by: Some((
                    uuid::Uuid::now_v7(),
                    ledger_core::record::CloseKind::Capture,
                )),
                lapsed: false,
            }),
            closes: None,
        };
        let ledger = "l".repeat(ledger_core::limits::MAX_LEDGER_CODE_CHARS);
        let ok = batch_result_to_pb(
            Ok(ledger_core::write::Written {
                done: ledger_core::write::Done::Posting(posting),
                replayed: true,
            }),
            &ledger,
        );
        let bound =
            framed(request.encoded_len()) + MAX_LEGS * BATCH_GROWTH_PER_LEG + BATCH_RESULT_OVERHEAD;
        assert!(
            framed(ok.encoded_len()) <= bound,
            "{} > {bound}",
            framed(ok.encoded_len())
        );
        // Errors: the longest messages and facts an error carries.
        let quotes = "\"".repeat(255);
        let errors = [
            LedgerError::new(
                Reason::IdempotencyKeyReused,
                format!("idempotency key {quotes:?} was already used by caller {:?} for a different post request; send a new key for a new request", "c".repeat(128)),
            )
            .with("idempotency_key", &quotes),
            LedgerError::new(
                Reason::InsufficientFunds,
                format!("posting would take account {:?} below zero: balance {} after, debits {} credits {}", "a".repeat(128), "9".repeat(40), "9".repeat(40), "9".repeat(40)),
            )
            .with("account", "a".repeat(128)),
            LedgerError::limit("leg count", "MAX_LEGS", MAX_LEGS, usize::MAX).with("field", "legs"),
        ];
        for e in errors {
            let r = batch_result_to_pb(Err(e), &ledger);
            assert!(framed(r.encoded_len()) <= BATCH_RESULT_OVERHEAD, "{r:?}");
        }
    }
}
