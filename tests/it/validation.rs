//! Every string field of every request is checked before it reaches SQL: a NUL character
//! (which PostgreSQL's text cannot hold) is refused with a definite `INVALID_ARGUMENT` or
//! `NOT_FOUND` naming the field, never `UNAVAILABLE` ("retry") or `INTERNAL`.

use crate::support::*;
use ledger_server::grpc::pb;
use prost::Message;
use std::collections::{BTreeSet, HashMap};
use tonic::Code;

const NUL: &str = "a\0b";

/// Every string field of the requests of `ledger.v1.Ledger`, as `Method.field.subfield`
/// (map fields as `field.key` / `field.value`), read from the served descriptor set, so a
/// field added later without a row in the table below fails this test.
fn request_string_fields() -> BTreeSet<String> {
    let fds =
        prost_types::FileDescriptorSet::decode(ledger_server::grpc::FILE_DESCRIPTOR_SET).unwrap();
    let file = fds
        .file
        .iter()
        .find(|f| f.package() == "ledger.v1")
        .unwrap();
    let messages: HashMap<String, &prost_types::DescriptorProto> = file
        .message_type
        .iter()
        .map(|m| (format!(".ledger.v1.{}", m.name()), m))
        .collect();
    let mut out = BTreeSet::new();
    for method in &file.service[0].method {
        walk(
            &messages,
            messages[method.input_type()],
            method.name(),
            &mut out,
        );
    }
    out
}

fn walk(
    messages: &HashMap<String, &prost_types::DescriptorProto>,
    m: &prost_types::DescriptorProto,
    path: &str,
    out: &mut BTreeSet<String>,
) {
    use prost_types::field_descriptor_proto::Type;
    for f in &m.field {
        let here = format!("{path}.{}", f.name());
        match f.r#type() {
            Type::String => {
                out.insert(here);
            }
            Type::Message => {
                let name = f.type_name();
                if let Some(inner) = messages.get(name) {
                    walk(messages, inner, &here, out);
                } else if let Some(entry) = m
                    .nested_type
                    .iter()
                    .find(|n| name.ends_with(&format!(".{}", n.name())))
                {
                    walk(messages, entry, &here, out);
                }
            }
            _ => {}
        }
    }
}

fn meta(k: &str, v: &str) -> HashMap<String, String> {
    HashMap::from([(k.to_owned(), v.to_owned())])
}

fn account(
    code: &str,
    currency: &str,
    metadata: HashMap<String, String>,
) -> pb::CreateAccountRequest {
    pb::CreateAccountRequest {
        ledger: String::new(),
        code: code.into(),
        currency: currency.into(),
        scale: 2,
        normal_balance: pb::NormalBalance::Debit as i32,
        allow_negative: false,
        metadata,
    }
}

fn post(f: impl FnOnce(&mut pb::PostRequest)) -> pb::PostRequest {
    let mut r = transfer("k", "equity:world", "acct:0", "1.00");
    f(&mut r);
    r
}

fn void(f: impl FnOnce(&mut pb::VoidRequest)) -> pb::VoidRequest {
    let mut r = pb::VoidRequest {
        ledger: String::new(),
        idempotency_key: "v".into(),
        posting_id: uuid::Uuid::nil().to_string(),
        reason: "r".into(),
        effective_at: None,
    };
    f(&mut r);
    r
}

/// A capture of a new hold of 1.00 (world → acct:0), changed by `f`.
async fn capture(
    c: &mut ledger_server::grpc::pb::ledger_client::LedgerClient<tonic::transport::Channel>,
    f: impl FnOnce(&mut pb::CaptureRequest),
) -> Result<(), tonic::Status> {
    let mut hold = transfer(
        &uuid::Uuid::now_v7().to_string(),
        "equity:world",
        "acct:0",
        "1.00",
    );
    hold.hold = true;
    let hold = c.post(hold).await?.into_inner().posting.unwrap();
    let mut r = pb::CaptureRequest {
        idempotency_key: uuid::Uuid::now_v7().to_string(),
        hold_posting_id: hold.posting_id,
        legs: hold.legs,
        ..Default::default()
    };
    f(&mut r);
    ok(c.capture(r).await)
}

fn get_posting(by: pb::get_posting_request::By) -> pb::GetPostingRequest {
    pb::GetPostingRequest {
        ledger: String::new(),
        by: Some(by),
        as_of: None,
    }
}

fn ok<T>(r: Result<tonic::Response<T>, tonic::Status>) -> Result<(), tonic::Status> {
    r.map(|_| ())
}

/// A `PostBatch` of one request with a NUL in one of its fields (`field` as in `Post`): the
/// call succeeds, and its one result is the error `Post` answers.
async fn call_in_batch(
    t: &TestLedger,
    field: &str,
) -> (Result<(), tonic::Status>, Code, &'static str) {
    let invalid = Code::InvalidArgument;
    let (req, reason) = match field {
        "idempotency_key" => (
            post(|r| r.idempotency_key = NUL.into()),
            "IDEMPOTENCY_KEY_REQUIRED",
        ),
        "legs.account" => (
            post(|r| r.legs[0].account = NUL.into()),
            "INVALID_ACCOUNT_CODE",
        ),
        "legs.amount" => (post(|r| r.legs[0].amount = NUL.into()), "INVALID_AMOUNT"),
        "memo" => (post(|r| r.memo = NUL.into()), "INVALID_FIELD"),
        "metadata.key" => (post(|r| r.metadata = meta(NUL, "v")), "INVALID_FIELD"),
        "metadata.value" => (post(|r| r.metadata = meta("k", NUL)), "INVALID_FIELD"),
        "ledger" => (post(|r| r.ledger = NUL.into()), "INVALID_FIELD"),
        "conditions.account" => (
            post(|r| r.conditions = condition(NUL, None)),
            "INVALID_ACCOUNT_CODE",
        ),
        "conditions.available_at_least" => (
            post(|r| r.conditions = condition("acct:0", Some(NUL))),
            "INVALID_AMOUNT",
        ),
        other => panic!("no row for PostBatch.requests.{other}: add one to this table"),
    };
    let batch = pb::PostBatchRequest {
        ledger: String::new(),
        requests: vec![req],
    };
    let result = match t.client.clone().post_batch(batch).await {
        Ok(r) => {
            let first = r.into_inner().results.remove(0);
            crate::batch::as_post_answer(first).map(drop)
        }
        Err(s) => Err(s),
    };
    (result, invalid, reason)
}

/// A condition on `account`: its available balance at least `amount`, or its last posting.
fn condition(account: &str, amount: Option<&str>) -> Vec<pb::Condition> {
    use pb::condition::Check;
    vec![pb::Condition {
        account: account.into(),
        check: Some(amount.map_or(Check::LastSequence(0), |a| {
            Check::AvailableAtLeast(a.into())
        })),
    }]
}

/// An update of `acct:0` from version 1 naming every field, edited by `f`.
fn update(f: impl FnOnce(&mut pb::UpdateAccountRequest)) -> pb::UpdateAccountRequest {
    let mut r = pb::UpdateAccountRequest {
        idempotency_key: "u".into(),
        code: "acct:0".into(),
        expected_version: 1,
        update_mask: Some(prost_types::FieldMask {
            paths: ["status", "balance_floor", "balance_ceiling", "debit_limits"]
                .map(String::from)
                .to_vec(),
        }),
        status: pb::AccountStatus::Open as i32,
        balance_floor: "0".into(),
        balance_ceiling: "10".into(),
        debit_limits: vec![pb::DebitLimit {
            amount: "1".into(),
            window_seconds: 60,
        }],
        reason: "why".into(),
        ledger: String::new(),
    };
    f(&mut r);
    r
}

/// The account-version RPCs' and conditions' string fields with a NUL, and the answer each
/// must get.
async fn call_account_rpc(
    c: &mut Client,
    field: &str,
) -> Option<(Result<(), tonic::Status>, Code, &'static str)> {
    let versions = |f: &dyn Fn(&mut pb::ListAccountVersionsRequest)| {
        let mut r = pb::ListAccountVersionsRequest {
            code: "acct:0".into(),
            ..Default::default()
        };
        f(&mut r);
        r
    };
    let (result, reason) = match field {
        "UpdateAccount.idempotency_key" => (
            ok(c.update_account(update(|r| r.idempotency_key = NUL.into()))
                .await),
            "IDEMPOTENCY_KEY_REQUIRED",
        ),
        "UpdateAccount.code" => (
            ok(c.update_account(update(|r| r.code = NUL.into())).await),
            "INVALID_ACCOUNT_CODE",
        ),
        "UpdateAccount.balance_floor" => (
            ok(c.update_account(update(|r| r.balance_floor = NUL.into()))
                .await),
            "INVALID_AMOUNT",
        ),
        "UpdateAccount.balance_ceiling" => (
            ok(c.update_account(update(|r| r.balance_ceiling = NUL.into()))
                .await),
            "INVALID_AMOUNT",
        ),
        "UpdateAccount.debit_limits.amount" => (
            ok(
                c.update_account(update(|r| r.debit_limits[0].amount = NUL.into()))
                    .await,
            ),
            "INVALID_AMOUNT",
        ),
        "UpdateAccount.reason" => (
            ok(c.update_account(update(|r| r.reason = NUL.into())).await),
            "INVALID_FIELD",
        ),
        "ListAccountVersions.code" => (
            ok(c.list_account_versions(versions(&|r| r.code = NUL.into()))
                .await),
            "INVALID_ACCOUNT_CODE",
        ),
        "ListAccountVersions.page_token" => (
            ok(
                c.list_account_versions(versions(&|r| r.page_token = NUL.into()))
                    .await,
            ),
            "INVALID_PAGE_TOKEN",
        ),
        "Post.conditions.account" => (
            ok(c.post(post(|r| r.conditions = condition(NUL, None))).await),
            "INVALID_ACCOUNT_CODE",
        ),
        "Post.conditions.available_at_least" => (
            ok(
                c.post(post(|r| r.conditions = condition("acct:0", Some(NUL))))
                    .await,
            ),
            "INVALID_AMOUNT",
        ),
        _ => return None,
    };
    Some((result, Code::InvalidArgument, reason))
}

/// A request of `rpc` naming a ledger with a NUL in its code: refused before any lookup.
async fn call_in_nul_ledger(c: &mut Client, rpc: &str) -> Result<(), tonic::Status> {
    let ledger = || NUL.to_owned();
    match rpc {
        "CreateAccount" => ok(c
            .create_account(pb::CreateAccountRequest {
                ledger: ledger(),
                ..account("a", "EUR", HashMap::new())
            })
            .await),
        "GetAccount" => ok(c
            .get_account(pb::GetAccountRequest {
                as_of: None,
                ledger: ledger(),
                code: "acct:0".into(),
            })
            .await),
        "ListAccounts" => ok(c
            .list_accounts(pb::ListAccountsRequest {
                ledger: ledger(),
                ..Default::default()
            })
            .await),
        "UpdateAccount" => ok(c.update_account(update(|r| r.ledger = ledger())).await),
        "ListAccountVersions" => ok(c
            .list_account_versions(pb::ListAccountVersionsRequest {
                ledger: ledger(),
                code: "acct:0".into(),
                ..Default::default()
            })
            .await),
        "Post" => ok(c.post(post(|r| r.ledger = ledger())).await),
        "PostBatch" => ok(c
            .post_batch(pb::PostBatchRequest {
                ledger: ledger(),
                requests: vec![post(|_| {})],
            })
            .await),
        "Void" => ok(c.void(void(|r| r.ledger = ledger())).await),
        "Capture" => capture(c, |r| r.ledger = ledger()).await,
        "GetPosting" => ok(c
            .get_posting(pb::GetPostingRequest {
                ledger: ledger(),
                ..get_posting(pb::get_posting_request::By::IdempotencyKey("k".into()))
            })
            .await),
        "ListPostings" => ok(c
            .list_postings(pb::ListPostingsRequest {
                ledger: ledger(),
                ..Default::default()
            })
            .await),
        "GetBalance" => ok(c
            .get_balance(pb::GetBalanceRequest {
                ledger: ledger(),
                account: "acct:0".into(),
                as_of: None,
            })
            .await),
        "ListBalances" => ok(c
            .list_balances(pb::ListBalancesRequest {
                ledger: ledger(),
                ..Default::default()
            })
            .await),
        "ListEntries" => ok(c
            .list_entries(pb::ListEntriesRequest {
                ledger: ledger(),
                account: "acct:0".into(),
                ..Default::default()
            })
            .await),
        "GetDigest" => ok(c
            .get_digest(pb::GetDigestRequest { ledger: ledger() })
            .await),
        "GetInclusionProof" => ok(c
            .get_inclusion_proof(pb::GetInclusionProofRequest {
                ledger: ledger(),
                ..Default::default()
            })
            .await),
        "GetConsistencyProof" => ok(c
            .get_consistency_proof(pb::GetConsistencyProofRequest {
                ledger: ledger(),
                from_sequence: 1,
                ..Default::default()
            })
            .await),
        "ClosePeriod" => ok(c.close_period(close(|r| r.ledger = ledger())).await),
        "ListPeriodCloses" => ok(c
            .list_period_closes(pb::ListPeriodClosesRequest {
                ledger: ledger(),
                ..Default::default()
            })
            .await),
        "ListRollups" => ok(c
            .list_rollups(pb::ListRollupsRequest {
                ledger: ledger(),
                ..Default::default()
            })
            .await),
        other => panic!("no row for {other}.ledger: add one to this table"),
    }
}

/// A period close a day back, with `f` applied.
fn close(f: impl FnOnce(&mut pb::ClosePeriodRequest)) -> pb::ClosePeriodRequest {
    let day_back = time::OffsetDateTime::now_utc() - time::Duration::days(1);
    let mut r = pb::ClosePeriodRequest {
        idempotency_key: "close".into(),
        effective_before: Some(ledger_server::grpc::convert::time_to_pb(day_back)),
        ..Default::default()
    };
    f(&mut r);
    r
}

/// The verifiable journal's and period closes' own string fields with a NUL, and the answer
/// each must get.
async fn call_journal_rpc(
    c: &mut Client,
    field: &str,
) -> Option<(Result<(), tonic::Status>, Code, &'static str)> {
    Some(match field {
        "GetInclusionProof.posting_id" => (
            ok(c.get_inclusion_proof(pb::GetInclusionProofRequest {
                posting_id: NUL.into(),
                ..Default::default()
            })
            .await),
            Code::NotFound,
            "POSTING_NOT_FOUND",
        ),
        "ClosePeriod.idempotency_key" => (
            ok(c.close_period(close(|r| r.idempotency_key = NUL.into()))
                .await),
            Code::InvalidArgument,
            "IDEMPOTENCY_KEY_REQUIRED",
        ),
        "ClosePeriod.memo" => (
            ok(c.close_period(close(|r| r.memo = NUL.into())).await),
            Code::InvalidArgument,
            "INVALID_FIELD",
        ),
        "ListPostings.caller" => (
            ok(c.list_postings(pb::ListPostingsRequest {
                caller: NUL.into(),
                ..Default::default()
            })
            .await),
            Code::InvalidArgument,
            "INVALID_FIELD",
        ),
        "ListPostings.metadata.key" => (
            ok(c.list_postings(pb::ListPostingsRequest {
                metadata: meta(NUL, "v"),
                ..Default::default()
            })
            .await),
            Code::InvalidArgument,
            "INVALID_FIELD",
        ),
        "ListPostings.metadata.value" => (
            ok(c.list_postings(pb::ListPostingsRequest {
                metadata: meta("k", NUL),
                ..Default::default()
            })
            .await),
            Code::InvalidArgument,
            "INVALID_FIELD",
        ),
        "ListRollups.prefix" => (
            ok(c.list_rollups(pb::ListRollupsRequest {
                prefix: NUL.into(),
                ..Default::default()
            })
            .await),
            Code::InvalidArgument,
            "INVALID_ACCOUNT_CODE",
        ),
        "ListRollups.page_token" => (
            ok(c.list_rollups(pb::ListRollupsRequest {
                page_token: NUL.into(),
                ..Default::default()
            })
            .await),
            Code::InvalidArgument,
            "INVALID_PAGE_TOKEN",
        ),
        "ListPeriodCloses.page_token" => (
            ok(c.list_period_closes(pb::ListPeriodClosesRequest {
                page_token: NUL.into(),
                ..Default::default()
            })
            .await),
            Code::InvalidArgument,
            "INVALID_PAGE_TOKEN",
        ),
        _ => return None,
    })
}

/// The ledger RPCs' own string fields with a NUL, and the answer each must get.
async fn call_ledger_rpc(
    c: &mut Client,
    field: &str,
) -> Option<(Result<(), tonic::Status>, Code, &'static str)> {
    let create = |f: &dyn Fn(&mut pb::CreateLedgerRequest)| {
        let mut r = pb::CreateLedgerRequest {
            code: "books".into(),
            ..Default::default()
        };
        f(&mut r);
        r
    };
    let invalid = (Code::InvalidArgument, "INVALID_FIELD");
    let result = match field {
        "CreateLedger.code" => ok(c.create_ledger(create(&|r| r.code = NUL.into())).await),
        "CreateLedger.description" => ok(c
            .create_ledger(create(&|r| r.description = NUL.into()))
            .await),
        "CreateLedger.cluster" => ok(c.create_ledger(create(&|r| r.cluster = NUL.into())).await),
        "CreateLedger.metadata.key" => ok(c
            .create_ledger(create(&|r| r.metadata = meta(NUL, "v")))
            .await),
        "CreateLedger.metadata.value" => ok(c
            .create_ledger(create(&|r| r.metadata = meta("k", NUL)))
            .await),
        "GetLedger.code" => ok(c
            .get_ledger(pb::GetLedgerRequest { code: NUL.into() })
            .await),
        "ListLedgers.page_token" => {
            let r = c
                .list_ledgers(pb::ListLedgersRequest {
                    page_token: NUL.into(),
                    ..Default::default()
                })
                .await;
            return Some((ok(r), Code::InvalidArgument, "INVALID_PAGE_TOKEN"));
        }
        _ => return None,
    };
    Some((result, invalid.0, invalid.1))
}

type Client = ledger_server::grpc::pb::ledger_client::LedgerClient<tonic::transport::Channel>;

/// One request with a NUL in one field, and the answer it must get.
async fn call(t: &TestLedger, field: &str) -> (Result<(), tonic::Status>, Code, &'static str) {
    use pb::get_posting_request::By;
    if let Some(field) = field.strip_prefix("PostBatch.requests.") {
        return call_in_batch(t, field).await;
    }
    let mut c = t.client.clone();
    if let Some(rpc) = field.strip_suffix(".ledger") {
        let result = call_in_nul_ledger(&mut c, rpc).await;
        return (result, Code::InvalidArgument, "INVALID_FIELD");
    }
    if let Some(answer) = call_ledger_rpc(&mut c, field).await {
        return answer;
    }
    if let Some(answer) = call_journal_rpc(&mut c, field).await {
        return answer;
    }
    if let Some(answer) = call_account_rpc(&mut c, field).await {
        return answer;
    }
    let (result, code, reason) = match field {
        "CreateAccount.code" => (
            ok(c.create_account(account(NUL, "EUR", HashMap::new())).await),
            Code::InvalidArgument,
            "INVALID_ACCOUNT_CODE",
        ),
        "CreateAccount.currency" => (
            ok(c.create_account(account("x", NUL, HashMap::new())).await),
            Code::InvalidArgument,
            "INVALID_CURRENCY",
        ),
        "CreateAccount.metadata.key" => (
            ok(c.create_account(account("x", "EUR", meta(NUL, "v"))).await),
            Code::InvalidArgument,
            "INVALID_FIELD",
        ),
        "CreateAccount.metadata.value" => (
            ok(c.create_account(account("x", "EUR", meta("k", NUL))).await),
            Code::InvalidArgument,
            "INVALID_FIELD",
        ),
        "GetAccount.code" => (
            ok(c.get_account(pb::GetAccountRequest {
                as_of: None,
                ledger: String::new(),
                code: NUL.into(),
            })
            .await),
            Code::InvalidArgument,
            "INVALID_ACCOUNT_CODE",
        ),
        "ListAccounts.prefix" => (
            ok(c.list_accounts(pb::ListAccountsRequest {
                prefix: NUL.into(),
                ..Default::default()
            })
            .await),
            Code::InvalidArgument,
            "INVALID_FIELD",
        ),
        "ListAccounts.page_token" => (
            ok(c.list_accounts(pb::ListAccountsRequest {
                page_token: NUL.into(),
                ..Default::default()
            })
            .await),
            Code::InvalidArgument,
            "INVALID_PAGE_TOKEN",
        ),
        "Post.idempotency_key" => (
            ok(c.post(post(|r| r.idempotency_key = NUL.into())).await),
            Code::InvalidArgument,
            "IDEMPOTENCY_KEY_REQUIRED",
        ),
        "Post.legs.account" => (
            ok(c.post(post(|r| r.legs[0].account = NUL.into())).await),
            Code::InvalidArgument,
            "INVALID_ACCOUNT_CODE",
        ),
        "Post.legs.amount" => (
            ok(c.post(post(|r| r.legs[0].amount = NUL.into())).await),
            Code::InvalidArgument,
            "INVALID_AMOUNT",
        ),
        "Post.memo" => (
            ok(c.post(post(|r| r.memo = NUL.into())).await),
            Code::InvalidArgument,
            "INVALID_FIELD",
        ),
        "Post.metadata.key" => (
            ok(c.post(post(|r| r.metadata = meta(NUL, "v"))).await),
            Code::InvalidArgument,
            "INVALID_FIELD",
        ),
        "Post.metadata.value" => (
            ok(c.post(post(|r| r.metadata = meta("k", NUL))).await),
            Code::InvalidArgument,
            "INVALID_FIELD",
        ),
        "Void.idempotency_key" => (
            ok(c.void(void(|r| r.idempotency_key = NUL.into())).await),
            Code::InvalidArgument,
            "IDEMPOTENCY_KEY_REQUIRED",
        ),
        "Void.posting_id" => (
            ok(c.void(void(|r| r.posting_id = NUL.into())).await),
            Code::NotFound,
            "POSTING_NOT_FOUND",
        ),
        "Void.reason" => (
            ok(c.void(void(|r| r.reason = NUL.into())).await),
            Code::InvalidArgument,
            "INVALID_FIELD",
        ),
        "Capture.idempotency_key" => (
            capture(&mut c, |r| r.idempotency_key = NUL.into()).await,
            Code::InvalidArgument,
            "IDEMPOTENCY_KEY_REQUIRED",
        ),
        "Capture.hold_posting_id" => (
            capture(&mut c, |r| r.hold_posting_id = NUL.into()).await,
            Code::NotFound,
            "POSTING_NOT_FOUND",
        ),
        "Capture.legs.account" => (
            capture(&mut c, |r| r.legs[0].account = NUL.into()).await,
            Code::InvalidArgument,
            "INVALID_ACCOUNT_CODE",
        ),
        "Capture.legs.amount" => (
            capture(&mut c, |r| r.legs[0].amount = NUL.into()).await,
            Code::InvalidArgument,
            "INVALID_AMOUNT",
        ),
        "Capture.memo" => (
            capture(&mut c, |r| r.memo = NUL.into()).await,
            Code::InvalidArgument,
            "INVALID_FIELD",
        ),
        "Capture.metadata.key" => (
            capture(&mut c, |r| r.metadata = meta(NUL, "v")).await,
            Code::InvalidArgument,
            "INVALID_FIELD",
        ),
        "Capture.metadata.value" => (
            capture(&mut c, |r| r.metadata = meta("k", NUL)).await,
            Code::InvalidArgument,
            "INVALID_FIELD",
        ),
        "GetPosting.posting_id" => (
            ok(c.get_posting(get_posting(By::PostingId(NUL.into()))).await),
            Code::NotFound,
            "POSTING_NOT_FOUND",
        ),
        "GetPosting.idempotency_key" => (
            ok(c.get_posting(get_posting(By::IdempotencyKey(NUL.into())))
                .await),
            Code::InvalidArgument,
            "IDEMPOTENCY_KEY_REQUIRED",
        ),
        "ListPostings.account" => (
            ok(c.list_postings(pb::ListPostingsRequest {
                account: NUL.into(),
                ..Default::default()
            })
            .await),
            Code::InvalidArgument,
            "INVALID_ACCOUNT_CODE",
        ),
        "ListPostings.page_token" => (
            ok(c.list_postings(pb::ListPostingsRequest {
                page_token: NUL.into(),
                ..Default::default()
            })
            .await),
            Code::InvalidArgument,
            "INVALID_PAGE_TOKEN",
        ),
        "GetBalance.account" => (
            ok(c.get_balance(pb::GetBalanceRequest {
                ledger: String::new(),
                account: NUL.into(),
                as_of: None,
            })
            .await),
            Code::InvalidArgument,
            "INVALID_ACCOUNT_CODE",
        ),
        "ListBalances.prefix" => (
            ok(c.list_balances(pb::ListBalancesRequest {
                prefix: NUL.into(),
                ..Default::default()
            })
            .await),
            Code::InvalidArgument,
            "INVALID_FIELD",
        ),
        "ListBalances.page_token" => (
            ok(c.list_balances(pb::ListBalancesRequest {
                page_token: NUL.into(),
                ..Default::default()
            })
            .await),
            Code::InvalidArgument,
            "INVALID_PAGE_TOKEN",
        ),
        "ListEntries.account" => (
            ok(c.list_entries(pb::ListEntriesRequest {
                account: NUL.into(),
                ..Default::default()
            })
            .await),
            Code::InvalidArgument,
            "INVALID_ACCOUNT_CODE",
        ),
        "ListEntries.page_token" => (
            ok(c.list_entries(pb::ListEntriesRequest {
                account: "acct:0".into(),
                page_token: NUL.into(),
                ..Default::default()
            })
            .await),
            Code::InvalidArgument,
            "INVALID_PAGE_TOKEN",
        ),
        other => panic!("no row for the request string field {other}: add one to this table"),
    };
    (result, code, reason)
}

#[tokio::test]
async fn a_nul_in_any_string_field_of_any_request_is_refused_as_invalid_before_it_reaches_sql() {
    let mut t = TestLedger::start().await;
    world_and_one_account(&mut t.client).await;
    let fields = request_string_fields();
    assert!(
        fields.len() >= 25,
        "the walk found the request fields: {fields:?}"
    );
    let mut wrong = Vec::new();
    for field in &fields {
        let (result, code, reason) = call(&t, field).await;
        match result {
            Err(s) if s.code() == code && crate::support::reason(&s) == reason => {
                let info = tonic_types::StatusExt::get_details_error_info(&s).unwrap();
                let facts = ["field", "account", "posting_id"];
                if !facts.iter().any(|f| info.metadata.contains_key(*f)) {
                    wrong.push(format!("{field}: no fact names the field: {info:?}"));
                }
            }
            other => wrong.push(format!("{field}: want {code:?}/{reason}, got {other:?}")),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // Only the holds the Capture rows captured (one each), and their keys.
    let holds = fields.iter().filter(|f| f.starts_with("Capture.")).count() as i64;
    assert_eq!(t.count("postings").await, holds);
    assert_eq!(t.count("idempotency_keys").await, holds, "no key bound");
}

#[tokio::test]
async fn a_prefix_that_no_account_code_can_start_with_is_refused_naming_the_field() {
    let mut t = TestLedger::start().await;
    world_and_one_account(&mut t.client).await;
    for prefix in ["Assets:", "a b", &"a".repeat(129)] {
        let e = t
            .client
            .list_accounts(pb::ListAccountsRequest {
                prefix: prefix.into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_error(&e, Code::InvalidArgument, "INVALID_FIELD");
        assert!(e.message().contains("prefix"), "{}", e.message());
    }
    let ok = t
        .client
        .list_accounts(pb::ListAccountsRequest {
            prefix: "acct:".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ok.accounts.len(), 1);
}
