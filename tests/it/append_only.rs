//! The journal is append-only, and the database itself says so.

use crate::support::*;

#[tokio::test]
async fn update_delete_and_truncate_on_journal_tables_fail() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    t.post(transfer("k", "equity:world", "acct:0", "1.00"))
        .await
        .unwrap();
    let db = t.db().await;
    let attacks = [
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
    ];
    for sql in attacks {
        let err = db.batch_execute(sql).await.expect_err(sql);
        let msg = err
            .as_db_error()
            .map(|e| e.message().to_owned())
            .unwrap_or_default();
        assert!(msg.contains("append-only"), "{sql}: {msg}");
    }
    assert_eq!(t.count("postings").await, 1);
    assert_eq!(t.count("entries").await, 2);
    assert_eq!(t.balance("acct:0", None).await.balance, "1.00");
}
