//! The heart of the service: the same request again is a success that does nothing.

use crate::support::*;
use ledger_server::grpc::pb;
use tonic::Code;

#[tokio::test]
async fn post_twice_with_same_key_records_one_posting() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    let req = transfer("pay-1", "equity:world", "acct:0", "10.00");
    let first = t.post(req.clone()).await.unwrap();
    let second = t.post(req).await.unwrap();
    assert!(!first.replayed);
    assert!(second.replayed);
    assert_eq!(
        first.posting, second.posting,
        "the same posting id, sequence and recorded_at"
    );
    assert_eq!(t.count("postings").await, 1);
    assert_eq!(t.count("entries").await, 2, "one row per leg");
    assert_eq!(t.count("outbox").await, 1, "one event");
    assert_eq!(t.balance("acct:0", None).await.balance, "10.00");
}

#[tokio::test]
async fn a_replay_matches_on_meaning_not_on_spelling() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    let first = t
        .post(transfer("k", "equity:world", "acct:0", "10.5"))
        .await
        .unwrap();
    let again = t
        .post(transfer("k", "equity:world", "acct:0", "10.50"))
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(first.posting, again.posting);
}

#[tokio::test]
async fn thirty_two_concurrent_identical_posts_make_one_posting() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let mut c = t.new_client().await;
        let req = transfer("double-click", "equity:world", "acct:0", "5.00");
        tasks.push(tokio::spawn(async move {
            c.post(req).await.map(|r| r.into_inner())
        }));
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap().expect("every caller gets OK"));
    }
    let fresh = answers.iter().filter(|a| !a.replayed).count();
    assert_eq!(fresh, 1, "exactly one caller made it");
    for a in &answers {
        assert_eq!(
            a.posting, answers[0].posting,
            "every caller gets the same posting"
        );
    }
    assert_eq!(t.count("postings").await, 1);
    assert_eq!(t.count("outbox").await, 1);
    assert_eq!(t.balance("acct:0", None).await.balance, "5.00");
}

#[tokio::test]
async fn same_key_with_a_different_amount_is_refused_and_writes_nothing() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    t.post(transfer("k1", "equity:world", "acct:0", "10.00"))
        .await
        .unwrap();
    let before = (
        t.count("postings").await,
        t.count("entries").await,
        t.count("idempotency_keys").await,
    );
    let err = t
        .post(transfer("k1", "equity:world", "acct:0", "11.00"))
        .await
        .unwrap_err();
    assert_error(&err, Code::FailedPrecondition, "IDEMPOTENCY_KEY_REUSED");
    assert!(
        err.message().contains("k1"),
        "names the key: {}",
        err.message()
    );
    let after = (
        t.count("postings").await,
        t.count("entries").await,
        t.count("idempotency_keys").await,
    );
    assert_eq!(before, after);
    // A void under a key used by a post is also a different request.
    let p = t
        .post(transfer("k2", "equity:world", "acct:0", "1.00"))
        .await
        .unwrap()
        .posting
        .unwrap();
    let err = t
        .client
        .void(pb::VoidRequest {
            ledger: String::new(),
            idempotency_key: "k1".into(),
            posting_id: p.posting_id,
            reason: "x".into(),
            effective_at: None,
        })
        .await
        .unwrap_err();
    assert_error(&err, Code::FailedPrecondition, "IDEMPOTENCY_KEY_REUSED");
}

#[tokio::test]
async fn insufficient_funds_is_rejected_whole_and_its_key_replays_the_rejection_after_funds_arrive()
{
    let mut t = TestLedger::start().await;
    t.standard_accounts(2).await;
    t.post(transfer("fund", "equity:world", "acct:0", "5.00"))
        .await
        .unwrap();
    // acct:0 pays 3 to acct:1 and 4 to the world: 7 > 5, so nothing of it happens.
    let req = pb::PostRequest {
        idempotency_key: "spend".into(),
        legs: vec![
            leg("acct:1", pb::Direction::Debit, "3.00"),
            leg("equity:world", pb::Direction::Debit, "4.00"),
            leg("acct:0", pb::Direction::Credit, "7.00"),
        ],
        ..Default::default()
    };
    let err = t.post(req.clone()).await.unwrap_err();
    assert_error(&err, Code::FailedPrecondition, "INSUFFICIENT_FUNDS");
    assert!(err.message().contains("acct:0"), "{}", err.message());
    assert_eq!(t.balance("acct:0", None).await.balance, "5.00");
    assert_eq!(t.balance("acct:1", None).await.balance, "0.00");
    assert_eq!(t.count("postings").await, 1);

    t.post(transfer("fund-more", "equity:world", "acct:0", "100.00"))
        .await
        .unwrap();
    let again = t.post(req).await.unwrap_err();
    assert_error(&again, Code::FailedPrecondition, "INSUFFICIENT_FUNDS");
    assert_eq!(
        again.message(),
        err.message(),
        "the same decision, word for word"
    );
    let facts = |s: &tonic::Status| {
        tonic_types::StatusExt::get_details_error_info(s)
            .unwrap()
            .metadata
    };
    assert_eq!(
        facts(&err).get("account").map(String::as_str),
        Some("acct:0")
    );
    assert_eq!(facts(&again), facts(&err), "and with the same facts");
    assert_eq!(t.count("postings").await, 2);
    assert_eq!(t.count("outbox").await, 2, "a rejection publishes nothing");
}

#[tokio::test]
async fn a_request_refused_by_validation_does_not_bind_its_key() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    let err = t
        .post(transfer("fix-me", "equity:world", "acct:404", "1.00"))
        .await
        .unwrap_err();
    assert_error(&err, Code::NotFound, "ACCOUNT_NOT_FOUND");
    let mut bad = transfer("fix-me", "equity:world", "acct:0", "1.00");
    bad.legs[0].amount = "2.00".into();
    assert_error(
        &t.post(bad).await.unwrap_err(),
        Code::InvalidArgument,
        "UNBALANCED",
    );
    let ok = t
        .post(transfer("fix-me", "equity:world", "acct:0", "1.00"))
        .await
        .unwrap();
    assert!(!ok.replayed);
}

#[tokio::test]
async fn keys_are_scoped_to_the_caller() {
    // Without authentication every call is `anonymous`; the scope is (caller, key) in the
    // database, which this checks directly.
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    let p = t
        .post(transfer("k", "equity:world", "acct:0", "1.00"))
        .await
        .unwrap()
        .posting
        .unwrap();
    assert_eq!(p.caller, "anonymous");
    let got = t
        .client
        .get_posting(pb::GetPostingRequest {
            ledger: String::new(),
            by: Some(pb::get_posting_request::By::IdempotencyKey("k".into())),
            as_of: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got, p);
    let db = t.db().await;
    let err = db
        .execute(
            "INSERT INTO idempotency_keys (ledger_id, caller, idempotency_key, operation, fingerprint, decided_at) VALUES (0, 'anonymous', 'k', 'post', '\\x0000000000000000000000000000000000000000000000000000000000000000', now())",
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION)
    );
    db.execute(
        "INSERT INTO idempotency_keys (ledger_id, caller, idempotency_key, operation, fingerprint, decided_at) VALUES (0, 'someone-else', 'k', 'post', '\\x0000000000000000000000000000000000000000000000000000000000000000', now())",
        &[],
    )
    .await
    .expect("another caller may use the same key");
}
