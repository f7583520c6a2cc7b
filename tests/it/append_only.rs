//! The journal is append-only, and the database itself says so.

use crate::support::*;
use ledger_server::grpc::pb;

#[tokio::test]
async fn update_delete_and_truncate_on_journal_tables_fail() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    t.post(transfer("k", "equity:world", "acct:0", "1.00"))
        .await
        .unwrap();
    let hold = pb::PostRequest {
        hold: true,
        ..transfer("h", "acct:0", "equity:world", "0.50")
    };
    t.post(hold).await.unwrap();
    let db = t.db().await;
    let attacks = [
        "UPDATE hold_legs SET amount = 1000",
        "DELETE FROM hold_legs",
        "TRUNCATE hold_legs",
        "UPDATE postings SET hold = false",
        "UPDATE postings SET memo = 'changed'",
        "DELETE FROM postings",
        "TRUNCATE postings CASCADE",
        "UPDATE entries SET amount = 1000",
        "DELETE FROM entries",
        "TRUNCATE entries",
        "UPDATE idempotency_keys SET fingerprint = '\\x00'",
        "DELETE FROM idempotency_keys",
        "TRUNCATE idempotency_keys CASCADE",
        "UPDATE accounts SET currency = 'USD'",
        "DELETE FROM accounts",
        "TRUNCATE accounts CASCADE",
        "DELETE FROM rejections",
        "TRUNCATE rejections",
        "UPDATE posting_hashes SET hash = sha256('x')",
        "DELETE FROM posting_hashes",
        "TRUNCATE posting_hashes",
        "UPDATE period_closes SET effective_before = now()",
        "DELETE FROM period_closes",
        "DELETE FROM period_close_balances",
        "UPDATE period_close_trial_balances SET accounts = 0",
    ];
    for sql in attacks {
        let err = db.batch_execute(sql).await.expect_err(sql);
        let msg = err
            .as_db_error()
            .map(|e| e.message().to_owned())
            .unwrap_or_default();
        assert!(msg.contains("append-only"), "{sql}: {msg}");
    }
    assert_eq!(t.count("postings").await, 2);
    assert_eq!(t.count("entries").await, 2);
    assert_eq!(t.count("hold_legs").await, 2);
    assert_eq!(t.count("posting_hashes").await, 2);
    assert_eq!(t.balance("acct:0", None).await.available, "0.50");
}

/// The journal itself lets a hold be closed once: a second posting naming the same hold is
/// refused by the UNIQUE constraint, whoever writes it.
#[tokio::test]
async fn the_database_refuses_a_second_close_of_one_hold() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    t.post(transfer("k", "equity:world", "acct:0", "1.00"))
        .await
        .unwrap();
    let hold = pb::PostRequest {
        hold: true,
        ..transfer("h", "acct:0", "equity:world", "0.50")
    };
    let h = t.post(hold).await.unwrap().posting.unwrap();
    t.client
        .void(pb::VoidRequest {
            ledger: String::new(),
            idempotency_key: "r".into(),
            posting_id: h.posting_id.clone(),
            reason: "released".into(),
            effective_at: None,
        })
        .await
        .unwrap();
    let db = t.db().await;
    // A copy of the release under another key and sequence, as a bug or an intruder would.
    let copy = format!(
        "INSERT INTO idempotency_keys (ledger_id, caller, idempotency_key, operation, fingerprint, decided_at)
           SELECT 0, caller, 'r2', operation, fingerprint, decided_at FROM idempotency_keys WHERE idempotency_key = 'r';
         INSERT INTO postings (sequence, posting_id, caller, idempotency_key, effective_at, recorded_at, memo, metadata,
                               key_id, closes_hold_posting_id, close_kind)
           SELECT 99, gen_random_uuid(), caller, 'r2', effective_at, recorded_at + interval '1 second', memo, metadata,
                  (SELECT key_id FROM idempotency_keys WHERE idempotency_key = 'r2'), '{}', 'capture'
           FROM postings WHERE idempotency_key = 'r'",
        h.posting_id
    );
    let err = db.batch_execute(&copy).await.expect_err("a second close");
    let db_err = err.as_db_error().expect("a database error");
    assert_eq!(db_err.code().code(), "23505", "{}", db_err.message());
    assert_eq!(db_err.constraint(), Some("postings_hold_closed_once"));
}

/// A release names the hold it closes twice, as the posting it voids and as the hold it
/// closes; the database refuses one whose two names differ (so the void's foreign key vouches
/// for the hold a release closes).
#[tokio::test]
async fn the_database_refuses_a_release_that_is_not_the_void_of_the_hold_it_closes() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    let funding = t
        .post(transfer("k", "equity:world", "acct:0", "1.00"))
        .await
        .unwrap()
        .posting
        .unwrap();
    let hold = pb::PostRequest {
        hold: true,
        ..transfer("h", "acct:0", "equity:world", "0.50")
    };
    let h = t.post(hold).await.unwrap().posting.unwrap();
    let db = t.db().await;
    // A release of the open hold that voids the funding posting instead, as a bug or an
    // intruder would write it.
    let forged = format!(
        "INSERT INTO idempotency_keys (ledger_id, caller, idempotency_key, operation, fingerprint, decided_at)
           SELECT 0, caller, 'forged', 'void', fingerprint, decided_at FROM idempotency_keys WHERE idempotency_key = 'h';
         INSERT INTO postings (sequence, posting_id, caller, idempotency_key, effective_at, recorded_at, memo, metadata,
                               key_id, voids_posting_id, void_reason, closes_hold_posting_id, close_kind)
           SELECT 99, gen_random_uuid(), caller, 'forged', effective_at, recorded_at + interval '1 second', '', '{{}}',
                  (SELECT key_id FROM idempotency_keys WHERE idempotency_key = 'forged'), '{}', 'forged', '{}', 'release'
           FROM postings WHERE idempotency_key = 'h'",
        funding.posting_id, h.posting_id
    );
    let err = db
        .batch_execute(&forged)
        .await
        .expect_err("a forged release");
    let db_err = err.as_db_error().expect("a database error");
    assert_eq!(db_err.code().code(), "23514", "{}", db_err.message());
    assert_eq!(
        db_err.constraint(),
        Some("postings_release_is_the_void_of_its_hold")
    );
}
