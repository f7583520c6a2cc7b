//! Void: undo is a new entry, never an edit.

use crate::support::*;
use ledger_server::grpc::pb;
use tonic::Code;

fn void(key: &str, posting_id: &str) -> pb::VoidRequest {
    pb::VoidRequest {
        ledger: String::new(),
        idempotency_key: key.into(),
        posting_id: posting_id.into(),
        reason: "customer refund".into(),
        effective_at: None,
    }
}

#[tokio::test]
async fn void_records_a_compensating_posting_and_leaves_the_original_as_it_was() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    let original = t
        .post(transfer("p", "equity:world", "acct:0", "25.00"))
        .await
        .unwrap()
        .posting
        .unwrap();
    let v = t
        .client
        .void(void("v", &original.posting_id))
        .await
        .unwrap()
        .into_inner();
    assert!(!v.replayed);
    let vp = v.posting.unwrap();
    assert_eq!(vp.voids_posting_id, original.posting_id);
    assert_eq!(vp.void_reason, "customer refund");
    assert_eq!(vp.legs.len(), original.legs.len());
    for (a, b) in vp.legs.iter().zip(&original.legs) {
        assert_eq!(
            (a.account.as_str(), a.amount.as_str()),
            (b.account.as_str(), b.amount.as_str())
        );
        assert_ne!(a.direction, b.direction, "directions swapped");
    }
    let reread = t
        .client
        .get_posting(pb::GetPostingRequest {
            ledger: String::new(),
            by: Some(pb::get_posting_request::By::PostingId(
                original.posting_id.clone(),
            )),
            as_of: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reread.voided_by_posting_id, vp.posting_id);
    assert_eq!(
        pb::Posting {
            voided_by_posting_id: String::new(),
            ..reread
        },
        original,
        "the original is otherwise unchanged"
    );
    assert_eq!(t.balance("acct:0", None).await.balance, "0.00");
    assert_eq!(t.count("outbox").await, 2, "the void has its event");
    // Replay of the void: same answer, nothing new.
    let again = t
        .client
        .void(void("v", &original.posting_id))
        .await
        .unwrap()
        .into_inner();
    assert!(again.replayed);
    assert_eq!(again.posting.unwrap(), vp);
    assert_eq!(t.count("postings").await, 2);
}

#[tokio::test]
async fn a_posting_is_voided_once_and_a_void_is_never_voided() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    let p = t
        .post(transfer("p", "equity:world", "acct:0", "5.00"))
        .await
        .unwrap()
        .posting
        .unwrap();
    let v = t
        .client
        .void(void("v1", &p.posting_id))
        .await
        .unwrap()
        .into_inner()
        .posting
        .unwrap();
    let err = t.client.void(void("v2", &p.posting_id)).await.unwrap_err();
    assert_error(&err, Code::FailedPrecondition, "ALREADY_VOIDED");
    assert!(err.message().contains(&v.posting_id), "{}", err.message());
    let err = t.client.void(void("v3", &v.posting_id)).await.unwrap_err();
    assert_error(&err, Code::FailedPrecondition, "VOID_OF_VOID");
    // The refusal is bound to its key.
    let err2 = t.client.void(void("v2", &p.posting_id)).await.unwrap_err();
    assert_eq!(err2.message(), err2.message());
    assert_error(&err2, Code::FailedPrecondition, "ALREADY_VOIDED");
    assert_eq!(t.count("postings").await, 2);
}

#[tokio::test]
async fn two_concurrent_voids_with_different_keys_make_exactly_one() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    for round in 0..5 {
        let p = t
            .post(transfer(
                &format!("p{round}"),
                "equity:world",
                "acct:0",
                "5.00",
            ))
            .await
            .unwrap()
            .posting
            .unwrap();
        let mut a = t.new_client().await;
        let mut b = t.new_client().await;
        let (va, vb) = (
            void(&format!("a{round}"), &p.posting_id),
            void(&format!("b{round}"), &p.posting_id),
        );
        let (ra, rb) = tokio::join!(a.void(va), b.void(vb));
        let oks = [ra.is_ok(), rb.is_ok()].iter().filter(|x| **x).count();
        assert_eq!(oks, 1, "round {round}: {ra:?} {rb:?}");
        let loser = ra.err().or(rb.err()).unwrap();
        assert_error(&loser, Code::FailedPrecondition, "ALREADY_VOIDED");
    }
    let db = t.db().await;
    let voids: i64 = db
        .query_one(
            "SELECT count(*) FROM postings WHERE voids_posting_id IS NOT NULL",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(voids, 5);
    assert_eq!(t.balance("acct:0", None).await.balance, "0.00");
}

#[tokio::test]
async fn the_database_refuses_a_second_void_of_one_posting() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    let p = t
        .post(transfer("p", "equity:world", "acct:0", "5.00"))
        .await
        .unwrap()
        .posting
        .unwrap();
    t.client.void(void("v1", &p.posting_id)).await.unwrap();
    let db = t.db().await;
    let err = db
        .execute(
            "WITH k AS (
               INSERT INTO idempotency_keys (ledger_id, caller, idempotency_key, operation, fingerprint, decided_at)
               SELECT 0, caller, 'v2', 'void', fingerprint, now() FROM idempotency_keys WHERE idempotency_key = 'p'
               RETURNING caller, idempotency_key, key_id)
             INSERT INTO postings (sequence, posting_id, caller, idempotency_key, effective_at, recorded_at, memo, metadata, voids_posting_id, void_reason, key_id)
             SELECT 99, gen_random_uuid(), caller, idempotency_key, now(), now(), '', '{}', $1::uuid, 'again', key_id FROM k",
            &[&uuid::Uuid::parse_str(&p.posting_id).unwrap()],
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION),
        "{err:?}"
    );
    assert_eq!(
        err.as_db_error().and_then(|e| e.constraint()),
        Some("postings_one_void_per_posting"),
        "{err:?}"
    );
}

#[tokio::test]
async fn voiding_an_unknown_posting_is_not_found_and_binds_no_key() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    let err = t
        .client
        .void(void("v", "0190b5a0-0000-7000-8000-000000000000"))
        .await
        .unwrap_err();
    assert_error(&err, Code::NotFound, "POSTING_NOT_FOUND");
    let err = t.client.void(void("v", "not-a-uuid")).await.unwrap_err();
    assert_error(&err, Code::NotFound, "POSTING_NOT_FOUND");
    let err = t.client.void(void("", "not-a-uuid")).await.unwrap_err();
    assert_error(&err, Code::InvalidArgument, "IDEMPOTENCY_KEY_REQUIRED");
    let p = t
        .post(transfer("p", "equity:world", "acct:0", "5.00"))
        .await
        .unwrap()
        .posting
        .unwrap();
    t.client
        .void(void("v", &p.posting_id))
        .await
        .expect("the key is still free");
}

#[tokio::test]
async fn a_void_that_would_overdraw_is_refused() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(2).await;
    t.post(transfer("fund", "equity:world", "acct:0", "10.00"))
        .await
        .unwrap();
    let p = t
        .post(transfer("move", "acct:0", "acct:1", "10.00"))
        .await
        .unwrap()
        .posting
        .unwrap();
    t.post(transfer("spend", "acct:1", "equity:world", "10.00"))
        .await
        .unwrap();
    let err = t
        .client
        .void(void("undo-move", &p.posting_id))
        .await
        .unwrap_err();
    assert_error(&err, Code::FailedPrecondition, "INSUFFICIENT_FUNDS");
    assert!(err.message().contains("acct:1"), "{}", err.message());
}

#[tokio::test]
async fn as_of_before_a_void_shows_the_posting_and_after_shows_it_undone() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    let before_any = t.balance("acct:0", None).await;
    assert_eq!(
        (before_any.balance.as_str(), before_any.as_of_sequence),
        ("0.00", 0)
    );
    let p = t
        .post(transfer("p", "equity:world", "acct:0", "7.00"))
        .await
        .unwrap()
        .posting
        .unwrap();
    let between = t.balance("acct:0", None).await;
    let v = t
        .client
        .void(void("v", &p.posting_id))
        .await
        .unwrap()
        .into_inner()
        .posting
        .unwrap();
    let after = t.balance("acct:0", None).await;
    assert_eq!(after.balance, "0.00");
    assert_eq!(after.as_of_sequence, v.sequence);
    // Re-ask for the earlier cut-offs: the answers have not changed.
    let again = t.balance("acct:0", between.as_of).await;
    assert_eq!(again, between);
    assert_eq!(again.balance, "7.00");
    let zero = t.balance("acct:0", before_any.as_of).await;
    assert_eq!(zero, before_any);
    let at_post = t
        .balance(
            "acct:0",
            Some(pb::AsOf {
                recorded_at: p.recorded_at,
                effective_at: None,
            }),
        )
        .await;
    assert_eq!(
        (at_post.balance.as_str(), at_post.as_of_sequence),
        ("7.00", p.sequence)
    );
}
