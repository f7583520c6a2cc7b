//! Hostile input: random bytes as every RPC's body (framed as gRPC and raw), random field
//! values through gRPC, and random bytes through decoding and validation. Never a crash, never
//! `INTERNAL` or `UNKNOWN`, and every error carries the ledger's `ErrorInfo`.
//!
//! Proptest reads `PROPTEST_CASES`; a long run is, e.g.:
//! `PROPTEST_CASES=200000 cargo test --release --test it hostile:: -- --nocapture`.

use crate::support::*;
use bytes::Bytes;
use http_body_util::BodyExt;
use ledger_server::access::METHODS;
use ledger_server::grpc::{convert, pb};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use prost::Message;
use std::collections::HashMap;
use std::time::Instant;
use tonic::codegen::{http, Service};
use tonic::transport::Channel;
use tonic::Code;
use tonic_types::StatusExt;

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn runner(default_cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases: cases(default_cases),
        failure_persistence: None,
        ..Config::default()
    })
}

/// Sends `body` as the raw HTTP/2 body of a gRPC call to `method`; the resulting status.
async fn raw_call(
    ch: &mut Channel,
    addr: std::net::SocketAddr,
    method: &str,
    body: Bytes,
) -> tonic::Status {
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}/ledger.v1.Ledger/{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(tonic::body::Body::new(http_body_util::Full::new(body)))
        .unwrap();
    std::future::poll_fn(|cx| ch.poll_ready(cx)).await.unwrap();
    let resp = ch
        .call(req)
        .await
        .expect("an HTTP answer: the server is up");
    assert_eq!(resp.status(), http::StatusCode::OK);
    let (parts, body) = resp.into_parts();
    if let Some(s) = tonic::Status::from_header_map(&parts.headers) {
        return s;
    }
    let collected = body.collect().await.expect("the response body");
    let trailers = collected.trailers().cloned().unwrap_or_default();
    tonic::Status::from_header_map(&trailers).expect("a grpc-status in the trailers")
}

fn frame(payload: &[u8]) -> Bytes {
    let mut b = Vec::with_capacity(payload.len() + 5);
    b.push(0);
    b.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    b.extend_from_slice(payload);
    b.into()
}

/// Not INTERNAL or UNKNOWN; an error has the ledger's ErrorInfo.
fn acceptable(s: &tonic::Status) -> Result<(), String> {
    if matches!(s.code(), Code::Internal | Code::Unknown) {
        return Err(format!("answered {s:?}"));
    }
    if s.code() != Code::Ok {
        match s.get_details_error_info() {
            Some(info) if info.domain == "ledger" => {}
            _ => return Err(format!("an error without the ledger's ErrorInfo: {s:?}")),
        }
    }
    Ok(())
}

/// The first result of a `PostBatch` whose error would not be acceptable as a call's answer
/// (as the status `Post` would have answered), or `Ok`.
fn first_unacceptable_result(r: pb::PostBatchResponse) -> Result<(), tonic::Status> {
    for result in r.results {
        if let Some(pb::post_batch_result::Outcome::Error(e)) = result.outcome {
            let s = crate::batch::as_status(&e);
            if acceptable(&s).is_err() {
                return Err(s);
            }
        }
    }
    Ok(())
}

#[test]
fn random_bytes_as_any_rpc_body_never_crash_the_server_or_answer_internal() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut t = rt.block_on(async {
        let mut t = TestLedger::start().await;
        t.standard_accounts(1).await;
        t
    });
    let addr = t.server.as_ref().unwrap().local_addr;
    let ch = rt.block_on(async {
        Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap()
    });
    let began = Instant::now();
    let inputs = std::cell::Cell::new(0u64);
    let strategy = (
        0..METHODS.len(),
        proptest::collection::vec(any::<u8>(), 0..700),
        any::<bool>(),
    );
    runner(48)
        .run(&strategy, |(m, bytes, framed)| {
            inputs.set(inputs.get() + 1);
            let body = if framed {
                frame(&bytes)
            } else {
                Bytes::from(bytes)
            };
            let s = rt.block_on(raw_call(&mut ch.clone(), addr, METHODS[m], body));
            acceptable(&s).map_err(|e| TestCaseError::fail(format!("{}: {e}", METHODS[m])))
        })
        .unwrap();
    // Every method once more with bad framing of each kind.
    for m in METHODS {
        for body in [
            Bytes::from_static(&[1, 0, 0, 0, 3, 1, 2, 3]), // compressed, no grpc-encoding
            Bytes::from_static(&[0, 0, 0, 0, 9, 1]),       // truncated message
            Bytes::from_static(&[0, 0xff, 0xff, 0xff, 0xff]), // 4 GiB announced
            Bytes::from_static(&[7]),                      // partial header
            frame(&[0xff; 64]),                            // not protobuf
        ] {
            inputs.set(inputs.get() + 1);
            let s = rt.block_on(raw_call(&mut ch.clone(), addr, m, body.clone()));
            acceptable(&s).unwrap_or_else(|e| panic!("{m} {body:?}: {e}"));
        }
    }
    // Still serving, and still correct.
    rt.block_on(async {
        t.post(transfer("after", "equity:world", "acct:0", "1.00"))
            .await
            .expect("served after the hostile bytes");
    });
    eprintln!(
        "hostile bytes over gRPC: {} inputs in {:.1} s",
        inputs.get(),
        began.elapsed().as_secs_f64()
    );
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-z0-9:_.-]{0,12}",
        Just("acct:0".to_owned()),
        Just("equity:world".to_owned()),
        "\\PC{0,300}",
    ]
}

fn amount() -> impl Strategy<Value = String> {
    prop_oneof![
        "-?[0-9]{0,40}(\\.[0-9]{0,25})?",
        "[0-9eE+.,-]{0,12}",
        any::<String>(),
        Just("1.00".to_owned()),
    ]
}

fn timestamp() -> impl Strategy<Value = Option<prost_types::Timestamp>> {
    proptest::option::of(
        (any::<i64>(), any::<i32>())
            .prop_map(|(seconds, nanos)| prost_types::Timestamp { seconds, nanos }),
    )
}

fn metadata() -> impl Strategy<Value = HashMap<String, String>> {
    proptest::collection::hash_map(text(), text(), 0..4)
}

fn legs() -> impl Strategy<Value = Vec<pb::Leg>> {
    proptest::collection::vec(
        (text(), any::<i32>(), amount()).prop_map(|(account, direction, amount)| pb::Leg {
            account,
            direction: direction % 4,
            amount,
        }),
        0..5,
    )
}

#[derive(Debug, Clone)]
struct Fields {
    key: String,
    code: String,
    currency: String,
    scale: u32,
    enum_value: i32,
    legs: Vec<pb::Leg>,
    at: Option<prost_types::Timestamp>,
    memo: String,
    metadata: HashMap<String, String>,
    page_size: u32,
    page_token: String,
}

fn fields() -> impl Strategy<Value = Fields> {
    (
        (
            text(),
            text(),
            "[A-Z0-9]{0,18}|\\PC{0,4}",
            any::<u32>(),
            any::<i32>(),
        ),
        (legs(), timestamp(), text(), metadata()),
        (
            prop_oneof![any::<u32>(), 0u32..1100],
            prop_oneof!["[0-9a-f]{0,600}", any::<String>()],
        ),
    )
        .prop_map(
            |(
                (key, code, currency, scale, enum_value),
                (legs, at, memo, metadata),
                (page_size, page_token),
            )| Fields {
                key,
                code,
                currency,
                scale: scale % 24,
                enum_value: enum_value % 4,
                legs,
                at,
                memo,
                metadata,
                page_size,
                page_token,
            },
        )
}

async fn every_rpc(t: &TestLedger, f: Fields) -> Vec<(&'static str, Result<(), tonic::Status>)> {
    let mut c = t.client.clone();
    let as_of = Some(pb::AsOf {
        recorded_at: f.at,
        effective_at: f.at,
    });
    let post = pb::PostRequest {
        conditions: Vec::new(),
        ledger: String::new(),
        idempotency_key: f.key.clone(),
        legs: f.legs.clone(),
        effective_at: f.at,
        memo: f.memo.clone(),
        metadata: f.metadata.clone(),
        hold: f.scale.is_multiple_of(3),
        hold_expires_at: f.at,
    };
    let requests = vec![post.clone(), post.clone()];
    vec![
        ("Post", c.post(post).await.map(drop)),
        (
            "PostBatch",
            c.post_batch(pb::PostBatchRequest {
                ledger: String::new(),
                requests,
            })
            .await
            .and_then(|r| first_unacceptable_result(r.into_inner())),
        ),
        (
            "Capture",
            c.capture(pb::CaptureRequest {
                ledger: String::new(),
                idempotency_key: f.key.clone(),
                hold_posting_id: f.code.clone(),
                legs: f.legs.clone(),
                effective_at: f.at,
                memo: f.memo.clone(),
                metadata: f.metadata.clone(),
            })
            .await
            .map(drop),
        ),
        (
            "Void",
            c.void(pb::VoidRequest {
                ledger: String::new(),
                idempotency_key: f.key.clone(),
                posting_id: f.code.clone(),
                reason: f.memo.clone(),
                effective_at: f.at,
            })
            .await
            .map(drop),
        ),
        (
            "CreateAccount",
            c.create_account(pb::CreateAccountRequest {
                ledger: String::new(),
                code: f.code.clone(),
                currency: f.currency.clone(),
                scale: f.scale,
                normal_balance: f.enum_value,
                allow_negative: f.scale.is_multiple_of(2),
                metadata: f.metadata.clone(),
            })
            .await
            .map(drop),
        ),
        (
            "GetAccount",
            c.get_account(pb::GetAccountRequest {
                as_of: None,
                ledger: String::new(),
                code: f.code.clone(),
            })
            .await
            .map(drop),
        ),
        (
            "ListAccounts",
            c.list_accounts(pb::ListAccountsRequest {
                ledger: String::new(),
                prefix: f.code.clone(),
                page_size: f.page_size,
                page_token: f.page_token.clone(),
            })
            .await
            .map(drop),
        ),
        (
            "GetPosting",
            c.get_posting(pb::GetPostingRequest {
                ledger: String::new(),
                by: Some(if f.scale.is_multiple_of(2) {
                    pb::get_posting_request::By::PostingId(f.code.clone())
                } else {
                    pb::get_posting_request::By::IdempotencyKey(f.key.clone())
                }),
                as_of: None,
            })
            .await
            .map(drop),
        ),
        (
            "ListPostings",
            c.list_postings(pb::ListPostingsRequest {
                ledger: String::new(),
                account: f.code.clone(),
                page_size: f.page_size,
                page_token: f.page_token.clone(),
                ..Default::default()
            })
            .await
            .map(drop),
        ),
        (
            "GetBalance",
            c.get_balance(pb::GetBalanceRequest {
                ledger: String::new(),
                account: f.code.clone(),
                as_of,
            })
            .await
            .map(drop),
        ),
        (
            "ListBalances",
            c.list_balances(pb::ListBalancesRequest {
                ledger: String::new(),
                prefix: f.code.clone(),
                as_of,
                page_size: f.page_size,
                page_token: f.page_token.clone(),
            })
            .await
            .map(drop),
        ),
        (
            "ListEntries",
            c.list_entries(pb::ListEntriesRequest {
                ledger: String::new(),
                account: f.code.clone(),
                as_of,
                page_size: f.page_size,
                page_token: f.page_token.clone(),
            })
            .await
            .map(drop),
        ),
    ]
}

#[test]
fn random_field_values_through_grpc_never_answer_internal_or_unknown() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let t = rt.block_on(async {
        let mut t = TestLedger::start().await;
        t.standard_accounts(1).await;
        t
    });
    let began = Instant::now();
    let inputs = std::cell::Cell::new(0u64);
    runner(32)
        .run(&fields(), |f| {
            for (rpc, r) in rt.block_on(every_rpc(&t, f)) {
                inputs.set(inputs.get() + 1);
                let s = match r {
                    Ok(()) => continue,
                    Err(s) => s,
                };
                acceptable(&s).map_err(|e| TestCaseError::fail(format!("{rpc}: {e}")))?;
            }
            Ok(())
        })
        .unwrap();
    eprintln!(
        "hostile field values over gRPC: {} calls in {:.1} s",
        inputs.get(),
        began.elapsed().as_secs_f64()
    );
}

/// Decodes `bytes` as every request type and runs the transport-free validation on whatever
/// decodes. Must never panic.
fn decode_and_validate(bytes: &[u8], accounts: &HashMap<String, ledger_core::Account>) {
    let key = b"k".repeat(32);
    if let Ok(r) = pb::PostRequest::decode(bytes) {
        if let Ok(p) = convert::post_from_pb(r) {
            if p.check_shape().is_ok() {
                let _ = p.validate(accounts);
            }
        }
    }
    if let Ok(r) = pb::CaptureRequest::decode(bytes) {
        if let Ok(c) = convert::capture_from_pb(r) {
            let _ = c.check_shape();
        }
    }
    if let Ok(r) = pb::VoidRequest::decode(bytes) {
        if let Ok(v) = convert::void_from_pb(r) {
            let _ = v.validate();
        }
    }
    if let Ok(r) = pb::CreateAccountRequest::decode(bytes) {
        let _ = ledger_core::NewAccount::validate(
            &r.code,
            &r.currency,
            r.scale,
            convert::normal_from_pb(r.normal_balance),
            r.allow_negative,
            convert::metadata(r.metadata),
        );
    }
    if let Ok(r) = pb::GetAccountRequest::decode(bytes) {
        let _ = ledger_core::account::validate_code(&r.code);
    }
    if let Ok(r) = pb::GetPostingRequest::decode(bytes) {
        if let Some(pb::get_posting_request::By::PostingId(id)) = r.by {
            let _ = ledger_core::posting::parse_posting_id(&id);
        }
    }
    for (size, token, as_of) in [
        pb::ListAccountsRequest::decode(bytes).map(|r| (r.page_size, r.page_token, None)),
        pb::ListPostingsRequest::decode(bytes).map(|r| (r.page_size, r.page_token, None)),
        pb::ListBalancesRequest::decode(bytes).map(|r| (r.page_size, r.page_token, r.as_of)),
        pb::ListEntriesRequest::decode(bytes).map(|r| (r.page_size, r.page_token, r.as_of)),
        pb::GetBalanceRequest::decode(bytes).map(|r| (0, String::new(), r.as_of)),
    ]
    .into_iter()
    .flatten()
    {
        let _ = ledger_server::service::page_size(size);
        if let Ok(mut r) = ledger_core::page_token::open(&key, "scope", &token) {
            let _ = (r.int(), r.text(), r.int_as::<u8>());
        }
        let _ = convert::as_of_from_pb(as_of);
    }
}

#[test]
fn random_bytes_through_decoding_and_validation_never_panic() {
    let accounts: HashMap<String, ledger_core::Account> = [
        ("acct:0", 2u8, false),
        ("equity:world", 2, true),
        ("btc", 8, false),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (code, scale, neg))| {
        (
            code.to_owned(),
            ledger_core::Account {
                ledger: ledger_core::ledger::DEFAULT_LEDGER_ID,
                id: i as i64 + 1,
                code: code.into(),
                currency: if scale == 8 { "BTC" } else { "EUR" }.into(),
                scale,
                normal_balance: ledger_core::NormalBalance::Debit,
                allow_negative: neg,
                metadata: Default::default(),
                created_at: time::OffsetDateTime::UNIX_EPOCH,
            },
        )
    })
    .collect();
    // Random bytes, and mutations of valid encodings (which reach deeper than pure noise).
    let valid = pb::PostRequest {
        idempotency_key: "k".into(),
        legs: vec![
            leg("acct:0", pb::Direction::Debit, "1.00"),
            leg("equity:world", pb::Direction::Credit, "1.00"),
        ],
        effective_at: Some(prost_types::Timestamp {
            seconds: 1,
            nanos: 0,
        }),
        memo: "m".into(),
        metadata: [("a".to_owned(), "b".to_owned())].into(),
        ..Default::default()
    }
    .encode_to_vec();
    let mutated =
        proptest::collection::vec((0..valid.len(), any::<u8>()), 0..6).prop_map(move |edits| {
            let mut v = valid.clone();
            for (i, b) in edits {
                v[i] = b;
            }
            v
        });
    let strategy = prop_oneof![proptest::collection::vec(any::<u8>(), 0..512), mutated];
    let began = Instant::now();
    let inputs = std::cell::Cell::new(0u64);
    runner(5000)
        .run(&strategy, |bytes| {
            inputs.set(inputs.get() + 1);
            decode_and_validate(&bytes, &accounts);
            Ok(())
        })
        .unwrap();
    eprintln!(
        "hostile bytes through decoding and validation: {} inputs in {:.1} s",
        inputs.get(),
        began.elapsed().as_secs_f64()
    );
}
