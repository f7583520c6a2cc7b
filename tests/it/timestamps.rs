//! Every `google.protobuf.Timestamp` field of every request is read the same way: the proto's
//! own range (0001-01-01T00:00:00Z ..= 9999-12-31T23:59:59.999999999Z, nanos 0..=999,999,999)
//! is accepted, anything outside it is `INVALID_ARGUMENT` / `INVALID_FIELD` naming the field
//! (`ErrorInfo.metadata.field`, the path within the request: `as_of.recorded_at`).

use crate::batch::as_post_answer;
use crate::support::*;
use ledger_server::grpc::pb;
use prost::Message;
use prost_types::Timestamp;
use std::collections::{BTreeSet, HashMap};
use tonic::{Code, Status};
use tonic_types::StatusExt;

/// 0001-01-01T00:00:00Z, the first instant a Timestamp can hold.
const FIRST: Timestamp = Timestamp {
    seconds: -62_135_596_800,
    nanos: 0,
};
/// 9999-12-31T23:59:59.999999999Z, the last.
const LAST: Timestamp = Timestamp {
    seconds: 253_402_300_799,
    nanos: 999_999_999,
};

/// Values outside the proto's range, each with what it is.
fn out_of_range() -> [(&'static str, Timestamp); 6] {
    let ts = |seconds, nanos| Timestamp { seconds, nanos };
    [
        ("year 10000", ts(LAST.seconds + 1, 0)),
        ("before year 1", ts(FIRST.seconds - 1, 999_999_999)),
        ("negative nanos", ts(1_700_000_000, -1)),
        ("a billion nanos", ts(1_700_000_000, 1_000_000_000)),
        ("i64::MAX seconds", ts(i64::MAX, 0)),
        ("i64::MIN seconds", ts(i64::MIN, 0)),
    ]
}

/// Every Timestamp field of the requests of `ledger.v1.Ledger`, as `Method.field.subfield`,
/// read from the served descriptor set, so a field added later without a row below fails.
fn request_timestamp_fields() -> BTreeSet<String> {
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
        let input = messages[method.input_type()];
        walk(&messages, input, method.name(), &mut out);
    }
    out
}

fn walk(
    messages: &HashMap<String, &prost_types::DescriptorProto>,
    m: &prost_types::DescriptorProto,
    path: &str,
    out: &mut BTreeSet<String>,
) {
    for f in &m.field {
        let here = format!("{path}.{}", f.name());
        if f.type_name() == ".google.protobuf.Timestamp" {
            out.insert(here);
        } else if let Some(inner) = messages.get(f.type_name()) {
            walk(messages, inner, &here, out);
        }
    }
}

/// What a request with an in-range edge value in the field must be answered.
#[derive(Debug, PartialEq)]
enum Want {
    /// Accepted; the answer carries the time back as sent, cut to the microsecond, when it
    /// echoes it (`Some`).
    Accepted,
    /// Refused by a rule about the time's meaning, not its range.
    Refused(Code, &'static str),
}

/// What an in-range edge (`FIRST` or `LAST`) in `field` is answered.
fn want_in_range(field: &str, edge: &Timestamp) -> Want {
    let first = edge == &FIRST;
    match field.rsplit_once('.').map_or(field, |(_, f)| f) {
        // A hold must expire after now.
        "hold_expires_at" if first => Want::Refused(Code::InvalidArgument, "INVALID_FIELD"),
        // A cut-off in the ledger's future; before year 2, nothing was recorded yet.
        "recorded_at" if !first => Want::Refused(Code::InvalidArgument, "AS_OF_IN_FUTURE"),
        "recorded_at" if field.starts_with("GetPosting.") => {
            Want::Refused(Code::NotFound, "POSTING_NOT_FOUND")
        }
        // A period can be closed once it has ended, not before.
        "effective_before" if !first => Want::Refused(Code::InvalidArgument, "INVALID_FIELD"),
        // No account existed in year 1, on either clock (a version applies from when it
        // is recorded).
        _ if first && field.starts_with("GetAccount.") => {
            Want::Refused(Code::NotFound, "ACCOUNT_NOT_FOUND")
        }
        _ => Want::Accepted,
    }
}

/// The answer to one request carrying `ts` in `field`, and the time it echoes, if any.
type Answer = Result<Option<Timestamp>, Status>;

/// Sends the request of `field` (`Method.path`) with `ts` there, everything else valid.
async fn send(t: &TestLedger, field: &str, ts: Timestamp) -> Answer {
    let mut c = t.client.clone();
    let (method, path) = field.split_once('.').unwrap();
    if method == "ListPostings" {
        return list_postings_in(t, path, ts).await;
    }
    if method.starts_with("Get") || method.starts_with("List") {
        return read_at(t, method, as_of(path, ts)).await;
    }
    let key = uuid::Uuid::now_v7().to_string();
    let mut post = transfer(&key, "equity:world", "acct:0", "1.00");
    match field {
        "Post.effective_at" | "PostBatch.requests.effective_at" => post.effective_at = Some(ts),
        "Post.hold_expires_at" | "PostBatch.requests.hold_expires_at" => {
            post.hold = true;
            post.hold_expires_at = Some(ts);
        }
        "Void.effective_at" | "Capture.effective_at" => return close(&mut c, method, ts).await,
        "ClosePeriod.effective_before" => {
            let r = pb::ClosePeriodRequest {
                idempotency_key: key,
                effective_before: Some(ts),
                ..Default::default()
            };
            let close = c.close_period(r).await?.into_inner().close.unwrap();
            return Ok(close.effective_before);
        }
        other => panic!("no row for the request timestamp field {other}: add one"),
    }
    let echo = |r: pb::PostResponse| {
        let p = r.posting.unwrap();
        Some(if post_hold(field) {
            p.hold_expires_at.unwrap()
        } else {
            p.effective_at.unwrap()
        })
    };
    if method == "PostBatch" {
        let batch = pb::PostBatchRequest {
            ledger: String::new(),
            requests: vec![post],
        };
        let mut results = c.post_batch(batch).await?.into_inner().results;
        return as_post_answer(results.remove(0)).map(echo);
    }
    Ok(echo(c.post(post).await?.into_inner()))
}

fn post_hold(field: &str) -> bool {
    field.ends_with("hold_expires_at")
}

/// A void of a new posting, or a capture of a new hold, effective at `ts`.
async fn close(c: &mut LedgerClient, method: &str, ts: Timestamp) -> Answer {
    let mut target = transfer(
        &uuid::Uuid::now_v7().to_string(),
        "equity:world",
        "acct:0",
        "1.00",
    );
    target.hold = method == "Capture";
    let target = c.post(target).await?.into_inner().posting.unwrap();
    let key = uuid::Uuid::now_v7().to_string();
    let posting = if method == "Void" {
        let req = pb::VoidRequest {
            ledger: String::new(),
            idempotency_key: key,
            posting_id: target.posting_id,
            reason: String::new(),
            effective_at: Some(ts),
        };
        c.void(req).await?.into_inner().posting
    } else {
        let req = pb::CaptureRequest {
            idempotency_key: key,
            hold_posting_id: target.posting_id,
            effective_at: Some(ts),
            ..Default::default()
        };
        c.capture(req).await?.into_inner().posting
    };
    Ok(posting.unwrap().effective_at)
}

type LedgerClient = pb::ledger_client::LedgerClient<tonic::transport::Channel>;

/// A cut-off with `ts` at `path` (`as_of.recorded_at` or `as_of.effective_at`).
fn as_of(path: &str, ts: Timestamp) -> pb::AsOf {
    match path {
        "as_of.recorded_at" => pb::AsOf {
            recorded_at: Some(ts),
            effective_at: None,
        },
        "as_of.effective_at" => pb::AsOf {
            recorded_at: None,
            effective_at: Some(ts),
        },
        other => panic!("no row for the cut-off field {other}: add one"),
    }
}

/// A listing of the postings in a range with `ts` at `path` (`recorded.start` …).
async fn list_postings_in(t: &TestLedger, path: &str, ts: Timestamp) -> Answer {
    let range = |start, end| Some(pb::TimeRange { start, end });
    let mut req = pb::ListPostingsRequest::default();
    match path {
        "recorded.start" => req.recorded = range(Some(ts), None),
        "recorded.end" => req.recorded = range(None, Some(ts)),
        "effective.start" => req.effective = range(Some(ts), None),
        "effective.end" => req.effective = range(None, Some(ts)),
        other => panic!("no row for the range field {other}: add one"),
    }
    t.client.clone().list_postings(req).await?;
    Ok(None)
}

/// A read at `as_of`; `GetBalance` echoes the applied effective cut-off.
async fn read_at(t: &TestLedger, method: &str, as_of: pb::AsOf) -> Answer {
    let mut c = t.client.clone();
    let echo = as_of.effective_at;
    let as_of = Some(as_of);
    match method {
        "GetAccount" => {
            c.get_account(pb::GetAccountRequest {
                ledger: String::new(),
                code: "acct:0".into(),
                as_of,
            })
            .await?;
            Ok(None)
        }
        "GetPosting" => {
            let by = Some(pb::get_posting_request::By::IdempotencyKey("fund".into()));
            c.get_posting(pb::GetPostingRequest {
                ledger: String::new(),
                by,
                as_of,
            })
            .await?;
            Ok(None)
        }
        "GetBalance" => {
            let account = "acct:0".into();
            let b = c
                .get_balance(pb::GetBalanceRequest {
                    ledger: String::new(),
                    account,
                    as_of,
                })
                .await?;
            let applied = b.into_inner().as_of.unwrap();
            Ok(echo.and(applied.effective_at))
        }
        "ListBalances" => {
            let req = pb::ListBalancesRequest {
                as_of,
                ..Default::default()
            };
            c.list_balances(req).await?;
            Ok(None)
        }
        "ListEntries" => {
            let req = pb::ListEntriesRequest {
                account: "acct:0".into(),
                as_of,
                ..Default::default()
            };
            c.list_entries(req).await?;
            Ok(None)
        }
        "ListRollups" => {
            let req = pb::ListRollupsRequest {
                depth: 1,
                as_of,
                ..Default::default()
            };
            let applied = c.list_rollups(req).await?.into_inner().as_of.unwrap();
            Ok(echo.and(applied.effective_at))
        }
        other => panic!("no row for the method {other}: add one"),
    }
}

/// The time as the ledger keeps it: cut to the microsecond.
fn to_micros(ts: &Timestamp) -> Timestamp {
    Timestamp {
        seconds: ts.seconds,
        nanos: ts.nanos / 1000 * 1000,
    }
}

/// The field an answer to `field`'s request names: the path within its request (a
/// `PostBatch` result names it as `Post` would, as the contract says a result is `Post`'s
/// answer).
fn named(field: &str) -> &str {
    let path = field.split_once('.').unwrap().1;
    path.strip_prefix("requests.").unwrap_or(path)
}

/// What is wrong with `answer` to `field` at the out-of-range value `ts`, if anything.
fn check_refused(field: &str, what: &str, answer: &Answer) -> Option<String> {
    let s = match answer {
        Err(s) => s,
        Ok(_) => return Some(format!("{field} at {what}: accepted")),
    };
    let info = s.get_details_error_info();
    let reason = info.as_ref().map(|i| i.reason.as_str());
    let named_field = info.as_ref().and_then(|i| i.metadata.get("field"));
    let wanted = named(field);
    let message_ok = s.message().contains(wanted) && s.message().contains("9999-12-31");
    if s.code() != Code::InvalidArgument
        || reason != Some("INVALID_FIELD")
        || named_field.map(String::as_str) != Some(wanted)
        || !message_ok
    {
        return Some(format!(
            "{field} at {what}: want InvalidArgument/INVALID_FIELD naming field {wanted} and the range, got {:?} {reason:?} field {named_field:?}: {}",
            s.code(),
            s.message()
        ));
    }
    None
}

/// What is wrong with `answer` to `field` at the in-range edge `ts`, if anything.
fn check_in_range(field: &str, ts: &Timestamp, answer: &Answer) -> Option<String> {
    let want = want_in_range(field, ts);
    match (&want, answer) {
        (Want::Accepted, Ok(Some(echoed))) if echoed != &to_micros(ts) => Some(format!(
            "{field} at {ts:?}: accepted but answered {echoed:?}"
        )),
        (Want::Accepted, Ok(_)) => None,
        (Want::Refused(code, reason), Err(s))
            if s.code() == *code && crate::support::reason(s) == *reason =>
        {
            None
        }
        (_, got) => Some(format!("{field} at {ts:?}: want {want:?}, got {got:?}")),
    }
}

#[tokio::test]
async fn every_timestamp_field_of_every_request_takes_the_protos_whole_range_and_names_itself_outside_it(
) {
    let mut t = TestLedger::start().await;
    world_and_one_account(&mut t.client).await;
    t.post(transfer("fund", "equity:world", "acct:0", "1000.00"))
        .await
        .unwrap();
    let fields = request_timestamp_fields();
    assert_eq!(fields.len(), 23, "the walk found the fields: {fields:?}");
    let mut wrong = Vec::new();
    for field in &fields {
        for (what, ts) in out_of_range() {
            let answer = send(&t, field, ts).await;
            wrong.extend(check_refused(field, what, &answer));
        }
        for edge in [FIRST, LAST] {
            let answer = send(&t, field, edge).await;
            wrong.extend(check_in_range(field, &edge, &answer));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
