//! Holds (two-phase postings) against a real server and database: reservations, captures
//! whole and partial, releases, the ledger's releases of expired holds, replays, races, and
//! as-of answers on both clocks.

use crate::support::*;
use ledger_server::grpc::convert::{time_from_pb, time_to_pb as ts};
use ledger_server::grpc::pb;
use ledger_server::grpc::pb::ledger_client::LedgerClient;
use std::time::Duration as StdDuration;
use time::{Duration, OffsetDateTime};
use tonic::transport::Channel;
use tonic::Code;

type Client = LedgerClient<Channel>;

/// A time as the journal keeps it (microseconds).
fn micros(t: OffsetDateTime) -> OffsetDateTime {
    t.replace_nanosecond(t.nanosecond() / 1000 * 1000).unwrap()
}

fn odt(t: &Option<prost_types::Timestamp>) -> OffsetDateTime {
    time_from_pb("timestamp", t.as_ref().expect("timestamp")).unwrap()
}

/// A hold of `amount` paid by `from` to `to`.
fn hold(key: &str, from: &str, to: &str, amount: &str) -> pb::PostRequest {
    pb::PostRequest {
        hold: true,
        ..transfer(key, from, to, amount)
    }
}

fn hold_until(
    key: &str,
    from: &str,
    to: &str,
    amount: &str,
    until: OffsetDateTime,
) -> pb::PostRequest {
    pb::PostRequest {
        hold_expires_at: Some(ts(until)),
        ..hold(key, from, to, amount)
    }
}

async fn post(c: &mut Client, r: pb::PostRequest) -> Result<pb::PostResponse, tonic::Status> {
    c.post(r).await.map(|r| r.into_inner())
}

/// The posting a `Post` the ledger accepts records.
async fn posted(c: &mut Client, r: pb::PostRequest) -> pb::Posting {
    post(c, r).await.unwrap().posting.unwrap()
}

/// A capture of `hold` under `key`: the whole hold when `legs` is empty.
async fn capture(
    c: &mut Client,
    key: &str,
    hold: &str,
    legs: Vec<pb::Leg>,
) -> Result<pb::CaptureResponse, tonic::Status> {
    c.capture(pb::CaptureRequest {
        idempotency_key: key.into(),
        hold_posting_id: hold.into(),
        legs,
        ..Default::default()
    })
    .await
    .map(|r| r.into_inner())
}

/// The capturing posting of a capture the ledger accepts.
async fn captured(c: &mut Client, key: &str, hold: &str, legs: Vec<pb::Leg>) -> pb::Posting {
    capture(c, key, hold, legs).await.unwrap().posting.unwrap()
}

/// The capture legs of a hold paid by `from` to `to`, for `amount`.
fn legs(from: &str, to: &str, amount: &str) -> Vec<pb::Leg> {
    vec![
        leg(to, pb::Direction::Debit, amount),
        leg(from, pb::Direction::Credit, amount),
    ]
}

async fn void(c: &mut Client, key: &str, posting: &str) -> Result<pb::VoidResponse, tonic::Status> {
    c.void(pb::VoidRequest {
        ledger: String::new(),
        idempotency_key: key.into(),
        posting_id: posting.into(),
        reason: "released".into(),
        effective_at: None,
    })
    .await
    .map(|r| r.into_inner())
}

async fn get(
    c: &mut Client,
    id: &str,
    as_of: Option<pb::AsOf>,
) -> Result<pb::Posting, tonic::Status> {
    c.get_posting(pb::GetPostingRequest {
        ledger: String::new(),
        by: Some(pb::get_posting_request::By::PostingId(id.into())),
        as_of,
    })
    .await
    .map(|r| r.into_inner())
}

fn status(p: &pb::Posting) -> pb::HoldStatus {
    pb::HoldStatus::try_from(p.hold_status).unwrap()
}

/// (balance, held debits, held credits, available) of a balance.
fn money(b: &pb::Balance) -> [&str; 4] {
    [&b.balance, &b.held_debits, &b.held_credits, &b.available]
}

/// A ledger with `equity:world`, `acct:0..3`, and `acct:0` funded with `funds`.
async fn funded(funds: &str) -> TestLedger {
    let mut t = TestLedger::start().await;
    t.standard_accounts(3).await;
    t.post(transfer("fund", "equity:world", "acct:0", funds))
        .await
        .unwrap();
    t
}

async fn count(t: &TestLedger, sql: &str) -> i64 {
    t.db().await.query_one(sql, &[]).await.unwrap().get(0)
}

#[tokio::test]
async fn hold_reserves_funds_and_moves_none() {
    let mut t = funded("50.00").await;
    let h = post(&mut t.client, hold("h", "acct:0", "acct:1", "20.00"))
        .await
        .unwrap();
    let p = h.posting.unwrap();
    assert!(p.hold && !h.replayed);
    assert_eq!(status(&p), pb::HoldStatus::Pending);
    assert_eq!(p.legs.len(), 2, "a hold shows its legs");
    assert_eq!(
        money(&t.balance("acct:0", None).await),
        ["50.00", "0.00", "20.00", "30.00"]
    );
    assert_eq!(
        money(&t.balance("acct:1", None).await),
        ["0.00", "20.00", "0.00", "0.00"]
    );
    // Nothing moved: the hold is a posting with an event, but no entry.
    let entries = format!(
        "SELECT count(*) FROM entries WHERE sequence = {}",
        p.sequence
    );
    assert_eq!(count(&t, &entries).await, 0);
    assert_eq!(
        count(
            &t,
            &format!(
                "SELECT count(*) FROM hold_legs WHERE sequence = {}",
                p.sequence
            )
        )
        .await,
        2
    );
    assert_eq!(
        count(
            &t,
            &format!(
                "SELECT count(*) FROM outbox WHERE sequence = {}",
                p.sequence
            )
        )
        .await,
        1
    );
    let statement = t
        .client
        .list_entries(pb::ListEntriesRequest {
            account: "acct:0".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(statement.entries.len(), 1, "only the funding moved money");
    let postings = t
        .client
        .list_postings(pb::ListPostingsRequest {
            account: "acct:0".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(postings.postings.len(), 2, "ListPostings shows the hold");
    // The held amount counts at once: more than the available balance is refused.
    let over = t
        .post(transfer("over", "acct:0", "acct:2", "30.01"))
        .await
        .unwrap_err();
    assert_error(&over, Code::FailedPrecondition, "INSUFFICIENT_FUNDS");
    assert!(
        over.message()
            .contains("available balance of 30.00 EUR (20.00 EUR held by open holds)"),
        "{}",
        over.message()
    );
    t.post(transfer("all", "acct:0", "acct:2", "30.00"))
        .await
        .unwrap();
    assert_eq!(
        money(&t.balance("acct:0", None).await),
        ["20.00", "0.00", "20.00", "0.00"]
    );
}

#[tokio::test]
async fn a_partial_capture_moves_what_it_takes_and_releases_the_rest() {
    let mut t = funded("50.00").await;
    let h = posted(&mut t.client, hold("h", "acct:0", "acct:1", "20.00")).await;
    let c = capture(
        &mut t.client,
        "c",
        &h.posting_id,
        legs("acct:0", "acct:1", "15.00"),
    )
    .await
    .unwrap();
    let cp = c.posting.unwrap();
    assert_eq!(cp.captures_hold_posting_id, h.posting_id);
    assert!(!cp.hold && !c.replayed);
    assert_eq!(cp.legs, legs("acct:0", "acct:1", "15.00"));
    let h = get(&mut t.client, &h.posting_id, None).await.unwrap();
    assert_eq!(status(&h), pb::HoldStatus::Captured);
    assert_eq!(h.captured_by_posting_id, cp.posting_id);
    assert!(h.released_by_posting_id.is_empty());
    assert_eq!(
        money(&t.balance("acct:0", None).await),
        ["35.00", "0.00", "0.00", "35.00"]
    );
    assert_eq!(
        money(&t.balance("acct:1", None).await),
        ["15.00", "0.00", "0.00", "15.00"]
    );
    // With no legs, the whole hold.
    let h2 = posted(&mut t.client, hold("h2", "acct:0", "acct:1", "5.00")).await;
    let c2 = captured(&mut t.client, "c2", &h2.posting_id, vec![]).await;
    assert_eq!(c2.legs, legs("acct:0", "acct:1", "5.00"));
    assert_eq!(
        money(&t.balance("acct:0", None).await),
        ["30.00", "0.00", "0.00", "30.00"]
    );
}

#[tokio::test]
async fn a_capture_of_more_than_held_is_refused_and_writes_nothing() {
    let mut t = funded("50.00").await;
    let h = posted(&mut t.client, hold("h", "acct:0", "acct:1", "20.00")).await;
    let (postings, keys) = (t.count("postings").await, t.count("idempotency_keys").await);
    let e = capture(
        &mut t.client,
        "c",
        &h.posting_id,
        legs("acct:0", "acct:1", "20.01"),
    )
    .await
    .unwrap_err();
    assert_error(&e, Code::FailedPrecondition, "CAPTURE_EXCEEDS_HOLD");
    assert!(
        e.message()
            .contains("asks for 20.01 but the hold holds 20.00"),
        "{}",
        e.message()
    );
    assert_eq!(
        (t.count("postings").await, t.count("idempotency_keys").await),
        (postings, keys)
    );
    assert_eq!(
        status(&get(&mut t.client, &h.posting_id, None).await.unwrap()),
        pb::HoldStatus::Pending
    );
    // The key was not bound: the same key with a capture within the hold is taken.
    capture(
        &mut t.client,
        "c",
        &h.posting_id,
        legs("acct:0", "acct:1", "20.00"),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_capture_naming_other_accounts_directions_or_legs_is_refused() {
    let mut t = funded("50.00").await;
    let h = posted(&mut t.client, hold("h", "acct:0", "acct:1", "20.00")).await;
    let cases = [
        ("another account", legs("acct:0", "acct:2", "5.00")),
        ("swapped directions", legs("acct:1", "acct:0", "5.00")),
        (
            "a leg missing",
            vec![leg("acct:1", pb::Direction::Debit, "5.00")],
        ),
        (
            "a leg more",
            [
                legs("acct:0", "acct:1", "5.00"),
                legs("acct:0", "acct:1", "1.00"),
            ]
            .concat(),
        ),
    ];
    for (what, legs) in cases {
        let e = capture(&mut t.client, what, &h.posting_id, legs)
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{what}: {e:?}");
        assert_eq!(reason(&e), "CAPTURE_LEGS_MISMATCH", "{what}");
    }
    assert_eq!(
        status(&get(&mut t.client, &h.posting_id, None).await.unwrap()),
        pb::HoldStatus::Pending
    );
}

#[tokio::test]
async fn only_a_hold_can_be_captured() {
    let mut t = funded("50.00").await;
    let p = posted(&mut t.client, transfer("p", "acct:0", "acct:1", "1.00")).await;
    let e = capture(&mut t.client, "c", &p.posting_id, vec![])
        .await
        .unwrap_err();
    assert_error(&e, Code::FailedPrecondition, "NOT_A_HOLD");
    let e = capture(
        &mut t.client,
        "c",
        &uuid::Uuid::now_v7().to_string(),
        vec![],
    )
    .await
    .unwrap_err();
    assert_error(&e, Code::NotFound, "POSTING_NOT_FOUND");
}

#[tokio::test]
async fn a_hold_is_closed_once_and_a_second_close_names_the_posting_that_closed_it() {
    let mut t = funded("50.00").await;
    let h = posted(&mut t.client, hold("h", "acct:0", "acct:1", "20.00")).await;
    let first = captured(&mut t.client, "c1", &h.posting_id, vec![]).await;
    for again in 0..2 {
        // A second capture, and its retry: the refusal is bound to the key.
        let e = capture(&mut t.client, "c2", &h.posting_id, vec![])
            .await
            .unwrap_err();
        assert_error(&e, Code::FailedPrecondition, "HOLD_NOT_PENDING");
        let want = format!("it was captured by posting {}", first.posting_id);
        assert!(e.message().contains(&want), "{again}: {}", e.message());
    }
    let e = void(&mut t.client, "v", &h.posting_id).await.unwrap_err();
    assert_error(&e, Code::FailedPrecondition, "HOLD_NOT_PENDING");
    // A released hold: neither captured nor released again.
    let h2 = posted(&mut t.client, hold("h2", "acct:0", "acct:1", "20.00")).await;
    let release = void(&mut t.client, "r", &h2.posting_id)
        .await
        .unwrap()
        .posting
        .unwrap();
    assert_eq!(release.voids_posting_id, h2.posting_id);
    assert_eq!(
        money(&t.balance("acct:0", None).await),
        ["30.00", "0.00", "0.00", "30.00"]
    );
    let h2 = get(&mut t.client, &h2.posting_id, None).await.unwrap();
    assert_eq!(
        (status(&h2), h2.released_by_posting_id.as_str()),
        (pb::HoldStatus::Released, release.posting_id.as_str())
    );
    let e = capture(&mut t.client, "c3", &h2.posting_id, vec![])
        .await
        .unwrap_err();
    assert!(
        e.message().contains(&format!(
            "it was released by posting {}",
            release.posting_id
        )),
        "{}",
        e.message()
    );
    let e = void(&mut t.client, "r2", &h2.posting_id).await.unwrap_err();
    assert_error(&e, Code::FailedPrecondition, "HOLD_NOT_PENDING");
    // A void of the capture is an ordinary void: the money moves back.
    void(&mut t.client, "undo", &first.posting_id)
        .await
        .unwrap();
    assert_eq!(
        money(&t.balance("acct:0", None).await),
        ["50.00", "0.00", "0.00", "50.00"]
    );
}

#[tokio::test]
async fn six_holds_of_1000_on_a_balance_of_5000_accept_five_and_the_refused_one_is_never_captured()
{
    let mut t = funded("5000.00").await;
    let mut held = Vec::new();
    for i in 0..5 {
        held.push(
            posted(
                &mut t.client,
                hold(&format!("h{i}"), "acct:0", "acct:1", "1000.00"),
            )
            .await,
        );
    }
    let sixth = post(&mut t.client, hold("h5", "acct:0", "acct:1", "1000.00"))
        .await
        .unwrap_err();
    assert_error(&sixth, Code::FailedPrecondition, "INSUFFICIENT_FUNDS");
    assert_eq!(
        money(&t.balance("acct:0", None).await),
        ["5000.00", "0.00", "5000.00", "0.00"]
    );
    // Funds come back; the refused hold stays refused (its key is bound) and made no posting.
    void(&mut t.client, "r0", &held[0].posting_id)
        .await
        .unwrap();
    let again = post(&mut t.client, hold("h5", "acct:0", "acct:1", "1000.00"))
        .await
        .unwrap_err();
    assert_error(&again, Code::FailedPrecondition, "INSUFFICIENT_FUNDS");
    let by_key = t
        .client
        .get_posting(pb::GetPostingRequest {
            ledger: String::new(),
            by: Some(pb::get_posting_request::By::IdempotencyKey("h5".into())),
            as_of: None,
        })
        .await
        .unwrap_err();
    assert_error(&by_key, Code::NotFound, "POSTING_NOT_FOUND");
    assert_eq!(
        t.count("hold_legs").await,
        5 * 2 + 2,
        "five holds and one release"
    );
}

#[tokio::test]
async fn replays_of_a_hold_a_capture_and_a_release_answer_the_same_posting() {
    let mut t = funded("50.00").await;
    let first = post(&mut t.client, hold("h", "acct:0", "acct:1", "20.00"))
        .await
        .unwrap();
    let h = first.posting.clone().unwrap();
    let h2 = posted(&mut t.client, hold("h2", "acct:0", "acct:1", "10.00")).await;
    let c = capture(
        &mut t.client,
        "c",
        &h.posting_id,
        legs("acct:0", "acct:1", "5.00"),
    )
    .await
    .unwrap();
    let r = void(&mut t.client, "r", &h2.posting_id).await.unwrap();
    let postings = t.count("postings").await;
    let again = post(&mut t.client, hold("h", "acct:0", "acct:1", "20.00"))
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.posting.unwrap().posting_id, h.posting_id);
    let c2 = capture(
        &mut t.client,
        "c",
        &h.posting_id,
        legs("acct:0", "acct:1", "5.00"),
    )
    .await
    .unwrap();
    assert!(c2.replayed);
    assert_eq!(c2.posting, c.posting);
    let r2 = void(&mut t.client, "r", &h2.posting_id).await.unwrap();
    assert!(r2.replayed);
    assert_eq!(r2.posting, r.posting);
    assert_eq!(t.count("postings").await, postings, "no second posting");
    // The same key for a hold of another amount, or a capture of another amount, is refused.
    let e = post(&mut t.client, hold("h", "acct:0", "acct:1", "20.01"))
        .await
        .unwrap_err();
    assert_error(&e, Code::FailedPrecondition, "IDEMPOTENCY_KEY_REUSED");
    let e = capture(
        &mut t.client,
        "c",
        &h.posting_id,
        legs("acct:0", "acct:1", "6.00"),
    )
    .await
    .unwrap_err();
    assert_error(&e, Code::FailedPrecondition, "IDEMPOTENCY_KEY_REUSED");
}

#[tokio::test]
async fn thirty_two_concurrent_captures_of_one_hold_make_one_capture() {
    let mut t = funded("50.00").await;
    let h = posted(&mut t.client, hold("h", "acct:0", "acct:1", "20.00")).await;
    let mut tasks = Vec::new();
    for i in 0..32 {
        let mut c = t.new_client().await;
        let id = h.posting_id.clone();
        tasks.push(tokio::spawn(async move {
            capture(&mut c, &format!("c{i}"), &id, vec![]).await
        }));
    }
    let mut won = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => won += 1,
            Err(e) => assert_error(&e, Code::FailedPrecondition, "HOLD_NOT_PENDING"),
        }
    }
    assert_eq!(won, 1);
    let closes = format!(
        "SELECT count(*) FROM postings WHERE closes_hold_posting_id = '{}'",
        h.posting_id
    );
    assert_eq!(count(&t, &closes).await, 1);
    assert_eq!(
        money(&t.balance("acct:0", None).await),
        ["30.00", "0.00", "0.00", "30.00"]
    );
}

#[tokio::test]
async fn a_capture_racing_a_release_of_one_hold_lets_exactly_one_win() {
    let mut t = funded("500.00").await;
    for round in 0..10 {
        let h = posted(
            &mut t.client,
            hold(&format!("h{round}"), "acct:0", "acct:1", "20.00"),
        )
        .await;
        let (mut a, mut b) = (t.new_client().await, t.new_client().await);
        let (id_a, id_b) = (h.posting_id.clone(), h.posting_id.clone());
        let cap = tokio::spawn(async move {
            capture(&mut a, &format!("c{round}"), &id_a, vec![])
                .await
                .map(|_| ())
        });
        let rel =
            tokio::spawn(
                async move { void(&mut b, &format!("r{round}"), &id_b).await.map(|_| ()) },
            );
        let (cap, rel) = (cap.await.unwrap(), rel.await.unwrap());
        assert!(
            cap.is_ok() != rel.is_ok(),
            "round {round}: exactly one wins: {cap:?} {rel:?}"
        );
        let lost = cap.err().or(rel.err()).unwrap();
        assert_error(&lost, Code::FailedPrecondition, "HOLD_NOT_PENDING");
    }
    let b = t.balance("acct:0", None).await;
    assert_eq!(b.held_credits, "0.00");
    assert_eq!(t.count("postings").await, 1 + 10 + 10);
}

#[tokio::test]
async fn concurrent_holds_never_reserve_more_than_the_available_balance() {
    let mut t = funded("100.00").await;
    let mut tasks = Vec::new();
    for i in 0..50 {
        let mut c = t.new_client().await;
        tasks.push(tokio::spawn(async move {
            post(&mut c, hold(&format!("h{i}"), "acct:0", "acct:1", "3.00")).await
        }));
    }
    let mut accepted = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => accepted += 1,
            Err(e) => assert_error(&e, Code::FailedPrecondition, "INSUFFICIENT_FUNDS"),
        }
    }
    assert_eq!(accepted, 33, "100.00 holds 33 holds of 3.00");
    assert_eq!(
        money(&t.balance("acct:0", None).await),
        ["100.00", "0.00", "99.00", "1.00"]
    );
}

/// Waits for the ledger to record the release of the expired hold; its release posting.
async fn released(c: &mut Client, hold: &str, within: StdDuration) -> pb::Posting {
    let began = std::time::Instant::now();
    loop {
        let h = get(c, hold, None).await.unwrap();
        if status(&h) == pb::HoldStatus::Expired && !h.released_by_posting_id.is_empty() {
            return get(c, &h.released_by_posting_id, None).await.unwrap();
        }
        assert!(
            began.elapsed() < within,
            "hold {hold} not released within {within:?}"
        );
        tokio::time::sleep(StdDuration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_hold_expiring_in_a_second_is_released_by_the_ledger_within_the_bound() {
    let mut t = funded("50.00").await;
    let until = OffsetDateTime::now_utc() + Duration::seconds(1);
    let h = posted(
        &mut t.client,
        hold_until("h", "acct:0", "acct:1", "20.00", until),
    )
    .await;
    assert_eq!(odt(&h.hold_expires_at), micros(until));
    let release = released(&mut t.client, &h.posting_id, StdDuration::from_secs(5)).await;
    assert_eq!(release.caller, "ledger");
    assert_eq!(release.idempotency_key, format!("expire:{}", h.posting_id));
    assert_eq!(
        release.effective_at, h.hold_expires_at,
        "effective at the expiry"
    );
    let lag = odt(&release.recorded_at) - odt(&h.hold_expires_at);
    assert!(
        lag > Duration::ZERO && lag <= ledger_core::limits::HOLD_EXPIRY_LAG_MAX,
        "lag {lag}"
    );
    assert_eq!(
        money(&t.balance("acct:0", None).await),
        ["50.00", "0.00", "0.00", "50.00"]
    );
    let e = capture(&mut t.client, "late", &h.posting_id, vec![])
        .await
        .unwrap_err();
    assert!(
        e.message().contains("it was expired by posting"),
        "{}",
        e.message()
    );
    let e = void(&mut t.client, "undo", &release.posting_id)
        .await
        .unwrap_err();
    assert_error(&e, Code::FailedPrecondition, "VOID_OF_VOID");
    assert_eq!(
        t.count("outbox").await,
        3,
        "funding, hold and release each have their event"
    );
}

/// A ledger whose expiry task does not run (it polls once an hour): what the writer does at
/// the expiry time, before any release is recorded.
async fn without_expiry_task(url: String) -> TestLedger {
    TestLedger::on_database_tuned(url, app_role_ops(), |t| {
        t.hold_expiry_poll = StdDuration::from_secs(3600);
    })
    .await
}

#[tokio::test]
async fn a_capture_or_release_after_the_expiry_time_is_refused_before_the_release_is_recorded() {
    let mut t = without_expiry_task(pg::shared_cluster().fresh_database().await).await;
    t.standard_accounts(2).await;
    t.post(transfer("fund", "equity:world", "acct:0", "50.00"))
        .await
        .unwrap();
    let until = OffsetDateTime::now_utc() + Duration::milliseconds(300);
    let h = posted(
        &mut t.client,
        hold_until("h", "acct:0", "acct:1", "20.00", until),
    )
    .await;
    tokio::time::sleep(StdDuration::from_millis(500)).await;
    for retry in 0..2 {
        let e = capture(&mut t.client, "c", &h.posting_id, vec![])
            .await
            .unwrap_err();
        assert_error(&e, Code::FailedPrecondition, "HOLD_NOT_PENDING");
        assert!(
            e.message().contains("expired at"),
            "{retry}: {}",
            e.message()
        );
        let e = void(&mut t.client, "r", &h.posting_id).await.unwrap_err();
        assert_error(&e, Code::FailedPrecondition, "HOLD_NOT_PENDING");
    }
    assert_eq!(
        t.count("postings").await,
        2,
        "no release recorded yet, no capture"
    );
    assert_eq!(
        t.count("rejections").await,
        2,
        "both refusals are bound to their keys"
    );
    // Past its expiry it holds nothing, before the ledger records its release.
    assert_eq!(t.balance("acct:0", None).await.held_credits, "0.00");
    // A hold must expire after now.
    let past = OffsetDateTime::now_utc() - Duration::seconds(1);
    let e = post(
        &mut t.client,
        hold_until("old", "acct:0", "acct:1", "1.00", past),
    )
    .await
    .unwrap_err();
    assert_error(&e, Code::InvalidArgument, "INVALID_FIELD");
    let e = post(
        &mut t.client,
        pb::PostRequest {
            hold_expires_at: Some(ts(until)),
            ..transfer("nohold", "acct:0", "acct:1", "1.00")
        },
    )
    .await
    .unwrap_err();
    assert_error(&e, Code::InvalidArgument, "INVALID_FIELD");
}

#[tokio::test]
async fn holds_that_expired_while_the_server_was_stopped_are_released_at_start_up_in_one_batch() {
    let url = pg::shared_cluster().fresh_database().await;
    let mut t = without_expiry_task(url.clone()).await;
    t.standard_accounts(2).await;
    t.post(transfer("fund", "equity:world", "acct:0", "50.00"))
        .await
        .unwrap();
    let until = OffsetDateTime::now_utc() + Duration::milliseconds(500);
    let mut holds = Vec::new();
    for i in 0..3 {
        holds.push(
            posted(
                &mut t.client,
                hold_until(&format!("h{i}"), "acct:0", "acct:1", "5.00", until),
            )
            .await,
        );
    }
    t.server.take().unwrap().shutdown().await.unwrap();
    tokio::time::sleep(StdDuration::from_millis(700)).await;
    // Batches of at most 2 requests: the three releases are still one job, applied whole.
    let mut t = TestLedger::on_database_tuned(url, app_role_ops(), |t| {
        t.hold_expiry_poll = StdDuration::from_secs(3600);
        t.writer.batch_max = 2;
    })
    .await;
    let mut releases = Vec::new();
    for h in &holds {
        let h = get(&mut t.client, &h.posting_id, None).await.unwrap();
        assert_eq!(
            status(&h),
            pb::HoldStatus::Expired,
            "released before serving"
        );
        releases.push(
            get(&mut t.client, &h.released_by_posting_id, None)
                .await
                .unwrap(),
        );
    }
    releases.sort_by_key(|r| r.sequence);
    let times: Vec<OffsetDateTime> = releases.iter().map(|r| odt(&r.recorded_at)).collect();
    for w in times.windows(2) {
        assert_eq!(
            w[1] - w[0],
            Duration::microseconds(1),
            "one batch: consecutive times {times:?}"
        );
    }
    assert_eq!(t.balance("acct:0", None).await.available, "50.00");
}

#[tokio::test]
async fn as_of_on_the_recorded_clock_shows_the_holds_open_then_and_their_state_then() {
    let mut t = funded("50.00").await;
    let before = t.balance("acct:0", None).await.as_of.unwrap().recorded_at;
    let h = posted(&mut t.client, hold("h", "acct:0", "acct:1", "20.00")).await;
    let open = t.balance("acct:0", None).await.as_of.unwrap().recorded_at;
    capture(
        &mut t.client,
        "c",
        &h.posting_id,
        legs("acct:0", "acct:1", "15.00"),
    )
    .await
    .unwrap();
    let after = t.balance("acct:0", None).await.as_of.unwrap().recorded_at;
    let at = |r: &Option<prost_types::Timestamp>| {
        Some(pb::AsOf {
            recorded_at: *r,
            effective_at: None,
        })
    };
    assert_eq!(
        money(&t.balance("acct:0", at(&before)).await),
        ["50.00", "0.00", "0.00", "50.00"]
    );
    assert_eq!(
        money(&t.balance("acct:0", at(&open)).await),
        ["50.00", "0.00", "20.00", "30.00"]
    );
    assert_eq!(
        money(&t.balance("acct:0", at(&after)).await),
        ["35.00", "0.00", "0.00", "35.00"]
    );
    let e = get(&mut t.client, &h.posting_id, at(&before))
        .await
        .unwrap_err();
    assert_error(&e, Code::NotFound, "POSTING_NOT_FOUND");
    let then = get(&mut t.client, &h.posting_id, at(&open)).await.unwrap();
    assert_eq!(
        (status(&then), then.captured_by_posting_id.as_str()),
        (pb::HoldStatus::Pending, "")
    );
    assert_eq!(
        status(&get(&mut t.client, &h.posting_id, at(&after)).await.unwrap()),
        pb::HoldStatus::Captured
    );
    // The trial balance's totals carry the held amounts per currency.
    let totals = |r| pb::ListBalancesRequest {
        prefix: "acct:".into(),
        as_of: at(r),
        page_size: 1,
        ..Default::default()
    };
    let mut pages = t
        .client
        .list_balances(totals(&open))
        .await
        .unwrap()
        .into_inner();
    let eur = pages.totals.clone();
    assert_eq!(
        (eur[0].held_debits.as_str(), eur[0].held_credits.as_str()),
        ("20.00", "20.00")
    );
    // Later pages carry the same totals.
    while !pages.next_page_token.is_empty() {
        let next = pb::ListBalancesRequest {
            page_token: pages.next_page_token.clone(),
            ..totals(&open)
        };
        pages = t.client.list_balances(next).await.unwrap().into_inner();
        assert_eq!(pages.totals, eur);
    }
}

#[tokio::test]
async fn as_of_on_the_effective_clock_places_a_back_dated_hold_and_capture_at_their_times() {
    let mut t = funded("50.00").await;
    let now = OffsetDateTime::now_utc();
    let h = posted(
        &mut t.client,
        pb::PostRequest {
            effective_at: Some(ts(now - Duration::days(2))),
            ..hold("h", "acct:0", "acct:1", "20.00")
        },
    )
    .await;
    let c = t
        .client
        .capture(pb::CaptureRequest {
            idempotency_key: "c".into(),
            hold_posting_id: h.posting_id.clone(),
            effective_at: Some(ts(now - Duration::days(1))),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .posting
        .unwrap();
    assert_eq!(odt(&c.effective_at), micros(now - Duration::days(1)));
    let at = |e: OffsetDateTime| {
        Some(pb::AsOf {
            recorded_at: None,
            effective_at: Some(ts(e)),
        })
    };
    // The funding is effective now: before it, acct:0 had nothing but the hold's reservation.
    assert_eq!(
        money(&t.balance("acct:0", at(now - Duration::hours(36))).await),
        ["0.00", "0.00", "20.00", "-20.00"]
    );
    assert_eq!(
        money(&t.balance("acct:0", at(now - Duration::hours(12))).await),
        ["-20.00", "0.00", "0.00", "-20.00"]
    );
    assert_eq!(
        money(&t.balance("acct:0", at(now - Duration::days(3))).await),
        ["0.00", "0.00", "0.00", "0.00"]
    );
    assert_eq!(
        status(
            &get(&mut t.client, &h.posting_id, at(now - Duration::hours(36)))
                .await
                .unwrap()
        ),
        pb::HoldStatus::Pending
    );
    assert_eq!(
        status(
            &get(&mut t.client, &h.posting_id, at(now - Duration::hours(12)))
                .await
                .unwrap()
        ),
        pb::HoldStatus::Captured
    );
    assert_eq!(
        money(&t.balance("acct:0", None).await),
        ["30.00", "0.00", "0.00", "30.00"]
    );
}

#[tokio::test]
async fn twenty_copies_of_one_capture_racing_make_one_capture_and_nineteen_replays() {
    let mut t = funded("50.00").await;
    let h = posted(&mut t.client, hold("h", "acct:0", "acct:1", "20.00")).await;
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let mut c = t.new_client().await;
        let id = h.posting_id.clone();
        tasks.push(tokio::spawn(async move {
            capture(&mut c, "same", &id, vec![]).await.unwrap()
        }));
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    assert_eq!(
        answers.iter().filter(|a| !a.replayed).count(),
        1,
        "one capture"
    );
    assert!(
        answers.iter().all(|a| a.posting == answers[0].posting),
        "every copy answers the same posting"
    );
    assert_eq!(t.count("postings").await, 3);
}

/// A cut-off of the recorded time `r` and the effective time `e` (either may be absent).
fn cut(r: Option<prost_types::Timestamp>, e: Option<prost_types::Timestamp>) -> Option<pb::AsOf> {
    Some(pb::AsOf {
        recorded_at: r,
        effective_at: e,
    })
}

/// The held debits and credits of the trial balance of `acct:` at the cut-off (one currency).
async fn held_in_the_trial_balance(t: &mut TestLedger, at: pb::AsOf) -> [String; 2] {
    let req = pb::ListBalancesRequest {
        prefix: "acct:".into(),
        as_of: Some(at),
        ..Default::default()
    };
    let trial = t.client.list_balances(req).await.unwrap().into_inner();
    let eur = &trial.totals[0];
    [eur.held_debits.clone(), eur.held_credits.clone()]
}

#[tokio::test]
async fn an_expired_hold_reads_expired_and_holds_nothing_on_both_clocks_before_its_release_is_recorded(
) {
    let url = pg::shared_cluster().fresh_database().await;
    let mut t = without_expiry_task(url.clone()).await;
    t.standard_accounts(2).await;
    t.post(transfer("fund", "equity:world", "acct:0", "50.00"))
        .await
        .unwrap();
    let until = OffsetDateTime::now_utc() + Duration::milliseconds(400);
    let h = posted(
        &mut t.client,
        hold_until("h", "acct:0", "acct:1", "20.00", until),
    )
    .await;
    let open = t.balance("acct:0", None).await;
    assert_eq!(money(&open), ["50.00", "0.00", "20.00", "30.00"]);
    let open = open.as_of.unwrap().recorded_at;
    tokio::time::sleep(StdDuration::from_millis(600)).await;
    let releases = "SELECT count(*) FROM postings WHERE close_kind = 'expire'";
    assert_eq!(count(&t, releases).await, 0, "no release recorded yet");
    // Now: expired, nothing held, on the hold and on both of its accounts.
    let now = get(&mut t.client, &h.posting_id, None).await.unwrap();
    assert_eq!(
        (status(&now), now.released_by_posting_id.as_str()),
        (pb::HoldStatus::Expired, ""),
        "expired, its release not recorded yet"
    );
    let b = t.balance("acct:0", None).await;
    assert_eq!(money(&b), ["50.00", "0.00", "0.00", "50.00"]);
    assert_eq!(
        money(&t.balance("acct:1", None).await),
        ["0.00", "0.00", "0.00", "0.00"]
    );
    let later = b.as_of.unwrap();
    assert_eq!(
        held_in_the_trial_balance(&mut t, later).await,
        ["0.00", "0.00"]
    );
    // At a cut-off the expiry counts once both clocks have passed it: recorded before it, or
    // effective before it, the hold was pending and held.
    let before_expiry = Some(ts(until - Duration::milliseconds(1)));
    for (r, e, want, held) in [
        (open, None, pb::HoldStatus::Pending, "20.00"),
        (
            later.recorded_at,
            before_expiry,
            pb::HoldStatus::Pending,
            "20.00",
        ),
        (
            later.recorded_at,
            Some(ts(until)),
            pb::HoldStatus::Expired,
            "0.00",
        ),
        (later.recorded_at, None, pb::HoldStatus::Expired, "0.00"),
    ] {
        let then = get(&mut t.client, &h.posting_id, cut(r, e)).await.unwrap();
        let b = t.balance("acct:0", cut(r, e)).await;
        assert_eq!(
            (status(&then), b.held_credits.as_str()),
            (want, held),
            "{r:?} {e:?}"
        );
    }
    // The release, recorded when a server with the expiry task starts, changes no answer given.
    t.server.take().unwrap().shutdown().await.unwrap();
    let mut t = TestLedger::on_database(url.clone()).await;
    let now = get(&mut t.client, &h.posting_id, None).await.unwrap();
    assert_eq!(status(&now), pb::HoldStatus::Expired);
    assert!(!now.released_by_posting_id.is_empty(), "released now");
    assert_eq!(t.balance("acct:0", Some(later)).await, b, "the same answer");
    let then = get(&mut t.client, &h.posting_id, Some(later))
        .await
        .unwrap();
    assert_eq!(
        (status(&then), then.released_by_posting_id.as_str()),
        (pb::HoldStatus::Expired, ""),
        "at that cut-off the release was not recorded yet"
    );
    let (ok, report) = crate::faults::ledger_check(&url).await;
    assert!(ok, "{report}");
}

#[tokio::test]
async fn what_an_expired_hold_held_may_be_spent_before_its_release_is_recorded() {
    let url = pg::shared_cluster().fresh_database().await;
    let mut t = without_expiry_task(url.clone()).await;
    t.standard_accounts(2).await;
    t.post(transfer("fund", "equity:world", "acct:0", "50.00"))
        .await
        .unwrap();
    let until = OffsetDateTime::now_utc() + Duration::milliseconds(300);
    posted(
        &mut t.client,
        hold_until("h", "acct:0", "acct:1", "20.00", until),
    )
    .await;
    let e = post(
        &mut t.client,
        transfer("early", "acct:0", "acct:1", "45.00"),
    )
    .await
    .unwrap_err();
    assert_error(&e, Code::FailedPrecondition, "INSUFFICIENT_FUNDS");
    tokio::time::sleep(StdDuration::from_millis(500)).await;
    let pay = post(&mut t.client, transfer("pay", "acct:0", "acct:1", "45.00"))
        .await
        .expect("the expired hold holds nothing for the funds rule");
    assert!(!pay.replayed);
    let releases = "SELECT count(*) FROM postings WHERE close_kind = 'expire'";
    assert_eq!(
        count(&t, releases).await,
        0,
        "its release is not recorded yet"
    );
    let e = post(&mut t.client, transfer("more", "acct:0", "acct:1", "5.01"))
        .await
        .unwrap_err();
    assert_error(&e, Code::FailedPrecondition, "INSUFFICIENT_FUNDS");
    let (ok, report) = crate::faults::ledger_check(&url).await;
    assert!(ok, "before the release is recorded: {report}");
    // The release is still recorded (here at start-up), and the books agree.
    t.server.take().unwrap().shutdown().await.unwrap();
    let mut t = TestLedger::on_database(url.clone()).await;
    assert_eq!(count(&t, releases).await, 1);
    assert_eq!(
        money(&t.balance("acct:0", None).await),
        ["5.00", "0.00", "0.00", "5.00"]
    );
    let (ok, report) = crate::faults::ledger_check(&url).await;
    assert!(ok, "{report}");
}

/// The lines of a JSON log whose message names `what`.
fn lines_naming(log: &str, what: &str) -> Vec<serde_json::Value> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| {
            v["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(what))
        })
        .collect()
}

#[tokio::test]
async fn late_releases_log_one_line_per_round_with_counts_and_their_lag_is_a_metric() {
    let url = pg::shared_cluster().fresh_database().await;
    let mut t = without_expiry_task(url.clone()).await;
    t.standard_accounts(2).await;
    t.post(transfer("fund", "equity:world", "acct:0", "50.00"))
        .await
        .unwrap();
    let until = OffsetDateTime::now_utc() + Duration::milliseconds(500);
    let holds = 40;
    let requests = (0..holds)
        .map(|i| hold_until(&format!("h{i}"), "acct:0", "acct:1", "0.50", until))
        .collect();
    let results = t
        .client
        .post_batch(pb::PostBatchRequest {
            ledger: String::new(),
            requests,
        })
        .await
        .unwrap()
        .into_inner()
        .results;
    assert!(results
        .iter()
        .all(|r| matches!(r.outcome, Some(pb::post_batch_result::Outcome::Response(_)))));
    t.server.take().unwrap().shutdown().await.unwrap();
    // Stopped past the expiry and the lag bound: every release comes late, at start-up.
    let wait = until + Duration::milliseconds(1500) - OffsetDateTime::now_utc();
    tokio::time::sleep(wait.try_into().unwrap()).await;
    let log_path = std::env::temp_dir().join(format!("ledger-late-{}.log", uuid::Uuid::now_v7()));
    let metrics: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let (mut child, _channel) = crate::ops::spawn_server(
        &url,
        &["--metrics-listen", &metrics.to_string()],
        &[("LEDGER_LOG", "warn"), ("LEDGER_LOG_FORMAT", "json")],
        Some(std::fs::File::create(&log_path).unwrap()),
    )
    .await;
    let text = crate::ops::scrape(metrics).await;
    let pid = child.id().unwrap() as i32;
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    tokio::time::timeout(StdDuration::from_secs(15), child.wait())
        .await
        .unwrap()
        .unwrap();
    let log = std::fs::read_to_string(&log_path).unwrap();
    let _ = std::fs::remove_file(&log_path);
    let late = lines_naming(&log, "HOLD_EXPIRY_LAG_MAX");
    assert_eq!(late.len(), 1, "one line for the round:\n{log}");
    assert_eq!(late[0]["level"], "WARN");
    assert_eq!(late[0]["fields"]["late"], holds, "{}", late[0]);
    assert_eq!(late[0]["fields"]["released"], holds, "{}", late[0]);
    let sample = |name: &str| crate::ops::sample(&text, name, &[]);
    assert_eq!(
        sample("ledger_hold_release_lag_seconds_count"),
        f64::from(holds),
        "{text}"
    );
    assert!(
        sample("ledger_hold_release_lag_seconds_sum") > f64::from(holds) * 1.0,
        "each over a second late: {text}"
    );
    assert_eq!(
        sample("ledger_hold_releases_late_total"),
        f64::from(holds),
        "{text}"
    );
}

#[tokio::test]
async fn a_release_names_the_hold_it_closes_whether_a_void_or_the_ledgers_expiry_made_it() {
    let mut t = funded("50.00").await;
    let h1 = posted(&mut t.client, hold("h1", "acct:0", "acct:1", "5.00")).await;
    let r = void(&mut t.client, "r", &h1.posting_id)
        .await
        .unwrap()
        .posting
        .unwrap();
    assert_eq!(
        (
            r.releases_hold_posting_id.as_str(),
            r.voids_posting_id.as_str()
        ),
        (h1.posting_id.as_str(), h1.posting_id.as_str())
    );
    let until = OffsetDateTime::now_utc() + Duration::milliseconds(300);
    let h2 = posted(
        &mut t.client,
        hold_until("h2", "acct:0", "acct:1", "5.00", until),
    )
    .await;
    let x = released(&mut t.client, &h2.posting_id, StdDuration::from_secs(5)).await;
    assert_eq!(
        (
            x.releases_hold_posting_id.as_str(),
            x.voids_posting_id.as_str()
        ),
        (h2.posting_id.as_str(), ""),
        "an expiry release is no void, and names its hold"
    );
    // A capture and a plain posting release nothing.
    let h3 = posted(&mut t.client, hold("h3", "acct:0", "acct:1", "5.00")).await;
    let c = captured(&mut t.client, "c", &h3.posting_id, vec![]).await;
    assert_eq!(c.releases_hold_posting_id, "");
    assert_eq!(h3.releases_hold_posting_id, "");
}

fn kind(p: &pb::Posting) -> pb::PostingKind {
    pb::PostingKind::try_from(p.kind).unwrap()
}

#[tokio::test]
async fn every_posting_says_what_it_is_in_each_answer_and_in_list_postings() {
    use pb::PostingKind as K;
    let mut t = funded("50.00").await;
    let h1 = posted(&mut t.client, hold("h1", "acct:0", "acct:1", "5.00")).await;
    let c = captured(&mut t.client, "c", &h1.posting_id, vec![]).await;
    let v = void(&mut t.client, "v", &c.posting_id)
        .await
        .unwrap()
        .posting
        .unwrap();
    let h2 = posted(&mut t.client, hold("h2", "acct:0", "acct:1", "5.00")).await;
    let r = void(&mut t.client, "r", &h2.posting_id)
        .await
        .unwrap()
        .posting
        .unwrap();
    let until = OffsetDateTime::now_utc() + Duration::milliseconds(300);
    let h3 = posted(
        &mut t.client,
        hold_until("h3", "acct:0", "acct:1", "5.00", until),
    )
    .await;
    let x = released(&mut t.client, &h3.posting_id, StdDuration::from_secs(5)).await;
    let answers = [&h1, &c, &v, &h2, &r, &h3, &x].map(kind);
    assert_eq!(
        answers,
        [
            K::Hold,
            K::Capture,
            K::Void,
            K::Hold,
            K::Release,
            K::Hold,
            K::Expiry
        ]
    );
    let listed: Vec<K> = t
        .client
        .list_postings(pb::ListPostingsRequest {
            account: "acct:0".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .postings
        .iter()
        .map(kind)
        .collect();
    assert_eq!(
        listed,
        [
            K::Posting,
            K::Hold,
            K::Capture,
            K::Void,
            K::Hold,
            K::Release,
            K::Hold,
            K::Expiry
        ]
    );
    let again = get(&mut t.client, &c.posting_id, None).await.unwrap();
    assert_eq!(kind(&again), K::Capture, "GetPosting too");
}
