//! Upgrading a ledger recorded under an earlier schema: its journal keeps its meaning.

use crate::support::*;
use ledger_core::posting::{LegRequest, PostRequest};
use ledger_core::{Direction, Metadata};
use ledger_server::storage::migrate::MIGRATIONS;
use std::collections::HashMap;

/// An empty database of the shared cluster (not migrated).
async fn empty_database() -> String {
    let cluster = pg::shared_cluster();
    let name = format!("u_{}", uuid::Uuid::now_v7().simple());
    let (admin, conn) = tokio_postgres::connect(
        &cluster.connection_string("postgres"),
        tokio_postgres::NoTls,
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    cluster.connection_string(&name)
}

/// The one number a counting query returns.
async fn count(db: &tokio_postgres::Client, sql: &str) -> i64 {
    db.query_one(sql, &[]).await.unwrap().get(0)
}

/// `ledger check` finds nothing wrong.
async fn assert_checks_clean(db: &mut tokio_postgres::Client) {
    let findings = ledger_server::storage::check::run(db).await.unwrap();
    let broken: Vec<_> = findings.iter().filter(|f| f.violations > 0).collect();
    assert!(broken.is_empty(), "{broken:?}");
}

/// A database migrated up to, not including, 0008; its URL and a connection to it.
async fn database_before_0008() -> (String, tokio_postgres::Client) {
    database_before("0008").await
}

/// A database migrated up to, not including, the migration whose name starts with
/// `version`; its URL and a connection to it.
pub(crate) async fn database_before(version: &str) -> (String, tokio_postgres::Client) {
    let url = empty_database().await;
    let (mut db, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let before: Vec<_> = MIGRATIONS
        .iter()
        .take_while(|(v, _)| !v.starts_with(version))
        .collect();
    assert!(before.len() < MIGRATIONS.len(), "{version} is a migration");
    db.batch_execute(
        "CREATE TABLE schema_migrations (version text PRIMARY KEY,
           applied_at timestamptz NOT NULL DEFAULT clock_timestamp())",
    )
    .await
    .unwrap();
    for (version, sql) in before {
        let tx = db.transaction().await.unwrap();
        tx.batch_execute(sql).await.unwrap();
        tx.execute(
            "INSERT INTO schema_migrations (version) VALUES ($1)",
            &[version],
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
    }
    (url, db)
}

#[tokio::test]
async fn postings_recorded_before_0008_are_numbered_by_their_own_keys_and_still_replay() {
    let (url, mut db) = database_before_0008().await;
    // A journal written under it: two accounts, one posting (key "old"), one rejected key.
    db.batch_execute(
        "INSERT INTO accounts (code, currency, scale, normal_balance, allow_negative, metadata) VALUES
           ('acct:a', 'EUR', 2, 'debit', false, '{}'), ('equity:w', 'EUR', 2, 'credit', true, '{}');
         INSERT INTO account_totals SELECT account_id, 0, 0, 0, 0 FROM accounts;",
    )
    .await
    .unwrap();
    let request = PostRequest {
        idempotency_key: "old".into(),
        legs: vec![
            LegRequest {
                account: "acct:a".into(),
                direction: Some(Direction::Debit),
                amount: "1.00".into(),
            },
            LegRequest {
                account: "equity:w".into(),
                direction: Some(Direction::Credit),
                amount: "1.00".into(),
            },
        ],
        effective_at: None,
        memo: String::new(),
        metadata: Metadata::new(),
        hold: false,
        hold_expires_at: None,
        conditions: Vec::new(),
    };
    // The accounts as the service reads them (that schema has no ledgers: all are default's).
    let accounts: HashMap<String, ledger_core::Account> = db
        .query(
            "SELECT account_id, code, normal_balance, allow_negative, created_at FROM accounts",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| {
            let code: String = r.get("code");
            let normal = match r.get::<_, &str>("normal_balance") {
                "debit" => ledger_core::NormalBalance::Debit,
                _ => ledger_core::NormalBalance::Credit,
            };
            let a = ledger_core::Account {
                id: r.get("account_id"),
                ledger: ledger_core::ledger::DEFAULT_LEDGER_ID,
                code: code.clone(),
                currency: "EUR".into(),
                scale: 2,
                normal_balance: normal,
                allow_negative: r.get("allow_negative"),
                metadata: Metadata::new(),
                created_at: r.get("created_at"),
            };
            (code, a)
        })
        .collect();
    let fingerprint = request.validate(&accounts).unwrap().fingerprint;
    db.execute(
        "WITH k AS (
           INSERT INTO idempotency_keys (caller, idempotency_key, operation, fingerprint, decided_at)
           VALUES ($2, 'rejected', 'post', $1, now()), ($2, 'old', 'post', $1, now()) RETURNING 1),
         r AS (INSERT INTO rejections VALUES ($2, 'rejected', 'INSUFFICIENT_FUNDS', 'test') RETURNING 1),
         p AS (
           INSERT INTO postings (sequence, posting_id, caller, idempotency_key, effective_at, recorded_at, memo, metadata)
           VALUES (1, gen_random_uuid(), $2, 'old', now(), now(), '', '{}') RETURNING *),
         e AS (
           INSERT INTO entries (sequence, leg_index, account_id, direction, amount, account_version,
                                debits_after, credits_after, recorded_at, effective_at)
           SELECT 1, l.i, a.account_id, l.d, 1.00, 1, l.da, l.ca, p.recorded_at, p.effective_at
           FROM p, (VALUES (0, 'acct:a', 'D'::\"char\", 1.00, 0.00), (1, 'equity:w', 'C'::\"char\", 0.00, 1.00))
                AS l(i, code, d, da, ca)
           JOIN accounts a USING (code) RETURNING 1),
         o AS (INSERT INTO outbox SELECT sequence, posting_id, recorded_at FROM p RETURNING 1),
         s AS (UPDATE ledger_state SET last_sequence = 1, last_recorded_at = (SELECT recorded_at FROM p) RETURNING 1)
         UPDATE account_totals t SET debits = CASE WHEN a.code = 'acct:a' THEN 1.00 ELSE 0 END,
                credits = CASE WHEN a.code = 'acct:a' THEN 0 ELSE 1.00 END, version = 1, last_sequence = 1
         FROM accounts a WHERE a.account_id = t.account_id",
        &[&fingerprint.as_slice(), &ledger_server::grpc::ANONYMOUS],
    )
    .await
    .unwrap();
    let old_id: uuid::Uuid = db
        .query_one("SELECT posting_id FROM postings", &[])
        .await
        .unwrap()
        .get(0);

    // Upgrade: the posting is numbered by its own key, and the ledger still checks clean.
    ledger_server::storage::migrate(&url).await.unwrap();
    let linked = count(
        &db,
        "SELECT count(*) FROM postings p JOIN idempotency_keys k
           ON k.key_id = p.key_id AND k.caller = p.caller AND k.idempotency_key = p.idempotency_key",
    )
    .await;
    assert_eq!(linked, 1);
    assert_checks_clean(&mut db).await;

    // The service answers the old key from its posting, and numbers a new key anew.
    let mut t = TestLedger::on_database(url).await;
    let again = t
        .post(transfer("old", "equity:w", "acct:a", "1.00"))
        .await
        .unwrap();
    assert!(again.replayed);
    let p = again.posting.unwrap();
    assert_eq!((p.sequence, p.posting_id), (1, old_id.to_string()));
    let new = t
        .post(transfer("new", "equity:w", "acct:a", "2.00"))
        .await
        .unwrap();
    assert!(!new.replayed);
    assert_eq!(new.posting.unwrap().sequence, 2);
    let keys = count(
        &db,
        "SELECT count(DISTINCT key_id) FROM postings WHERE idempotency_key IN ('old', 'new')",
    )
    .await;
    assert_eq!(keys, 2);
    assert_checks_clean(&mut db).await;
}

#[tokio::test]
async fn the_upgrade_to_0008_refuses_a_posting_without_a_claimed_key_and_changes_nothing() {
    let (url, db) = database_before_0008().await;
    db.batch_execute(
        "INSERT INTO postings (sequence, posting_id, caller, idempotency_key, effective_at, recorded_at, memo, metadata)
         VALUES (1, gen_random_uuid(), 'test', 'never-claimed', now(), now(), '', '{}')",
    )
    .await
    .unwrap();
    let err = ledger_server::storage::migrate(&url)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("1 posting(s) have no claimed idempotency key"),
        "{err}"
    );
    // The failed migration's transaction left nothing behind.
    let applied = count(
        &db,
        "SELECT count(*) FROM schema_migrations WHERE version LIKE '0008%'",
    )
    .await;
    assert_eq!(applied, 0);
    let column = count(
        &db,
        "SELECT count(*) FROM information_schema.columns
         WHERE table_name IN ('postings', 'idempotency_keys') AND column_name = 'key_id'",
    )
    .await;
    assert_eq!(column, 0);
}

#[tokio::test]
async fn the_upgrade_to_0012_indexes_the_open_holds_with_an_expiry_and_checks_clean() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(2).await;
    t.post(transfer("fund", "equity:world", "acct:0", "50.00"))
        .await
        .unwrap();
    let later = time::OffsetDateTime::now_utc() + time::Duration::hours(1);
    let hold = |key: &str, expires: bool| ledger_server::grpc::pb::PostRequest {
        hold: true,
        hold_expires_at: expires.then(|| ledger_server::grpc::convert::time_to_pb(later)),
        ..transfer(key, "acct:0", "acct:1", "5.00")
    };
    let open = t.post(hold("open", true)).await.unwrap().posting.unwrap();
    let closed = t.post(hold("closed", true)).await.unwrap().posting.unwrap();
    t.post(hold("never", false)).await.unwrap();
    t.client
        .void(ledger_server::grpc::pb::VoidRequest {
            idempotency_key: "release".into(),
            posting_id: closed.posting_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    t.server.take().unwrap().shutdown().await.unwrap();
    // The ledger as it was before 0012.
    let mut db = t.db().await;
    db.batch_execute(
        "DROP TABLE expiring_holds CASCADE;
         DELETE FROM schema_migrations WHERE version = '0012_expiring_holds'",
    )
    .await
    .unwrap();
    ledger_server::storage::migrate(&t.database_url)
        .await
        .unwrap();
    let rows: Vec<(String, i16)> = db
        .query(
            "SELECT hold_posting_id::text, leg_index FROM expiring_holds ORDER BY leg_index",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        rows,
        [(open.posting_id.clone(), 0), (open.posting_id, 1)],
        "the open hold's legs, not the released one's nor those of a hold that never expires"
    );
    assert_checks_clean(&mut db).await;
}

/// Every posting's stored hash, in sequence order.
async fn stored_hashes(db: &tokio_postgres::Client) -> Vec<(i64, Vec<u8>, Vec<u8>)> {
    db.query(
        "SELECT sequence, hash, nodes FROM posting_hashes ORDER BY sequence",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}

#[tokio::test]
async fn a_journal_recorded_before_hashing_is_hashed_by_migrate_in_chunks_and_a_stopped_run_resumes(
) {
    let mut t = TestLedger::start().await;
    t.standard_accounts(3).await;
    // More postings than one chunk of the hashing (HASH_CHUNK), in batches.
    let n = ledger_server::storage::journal::HASH_CHUNK as usize * 2 + 345;
    for b in 0..n.div_ceil(100) {
        let posts = (0..100.min(n - b * 100))
            .map(|i| {
                transfer(
                    &format!("p{b}-{i}"),
                    "equity:world",
                    &format!("acct:{}", i % 3),
                    "0.01",
                )
            })
            .collect();
        t.client
            .post_batch(crate::batch::batch(posts))
            .await
            .unwrap();
    }
    t.server.take().unwrap().shutdown().await.unwrap();
    let db = t.db().await;
    let written = stored_hashes(&db).await;
    let state = "SELECT tree_size, tree_head, tree_frontier FROM ledger_state WHERE ledger_id = 0";
    let head: (i64, Vec<u8>, Vec<u8>) = db
        .query_one(state, &[])
        .await
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .unwrap();
    assert_eq!(written.len(), n, "the writer hashed every posting");

    // As before 0016: nothing hashed. `migrate` hashes the whole journal, in order.
    let forget = |from: i64| {
        format!(
            "ALTER TABLE posting_hashes DISABLE TRIGGER posting_hashes_append_only;
             DELETE FROM posting_hashes WHERE sequence > {from};
             ALTER TABLE posting_hashes ENABLE TRIGGER posting_hashes_append_only;"
        )
    };
    db.batch_execute(&forget(0)).await.unwrap();
    db.batch_execute(
        "UPDATE ledger_state SET tree_size = 0, tree_head = '\\x0000000000000000000000000000000000000000000000000000000000000000', tree_frontier = ''",
    )
    .await
    .unwrap();
    ledger_server::storage::migrate(&t.database_url)
        .await
        .unwrap();
    let hashed = stored_hashes(&db).await;
    let pairs = |v: &[(i64, Vec<u8>, Vec<u8>)]| -> Vec<(i64, Vec<u8>, Vec<u8>)> { v.to_vec() };
    assert_eq!(
        pairs(&hashed),
        pairs(&written),
        "the same hashes and nodes as the writer's"
    );
    let again: (i64, Vec<u8>, Vec<u8>) = db
        .query_one(state, &[])
        .await
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .unwrap();
    assert_eq!(again, head, "the same chain");

    // A run stopped after its first chunk: the next one goes on from where it stopped.
    let chunk = ledger_server::storage::journal::HASH_CHUNK;
    db.batch_execute(&forget(chunk)).await.unwrap();
    let nodes: std::collections::HashMap<u64, Vec<u8>> = stored_hashes(&db)
        .await
        .into_iter()
        .map(|(s, _, n)| (s as u64 - 1, n))
        .collect();
    let frontier = ledger_core::journal::Frontier::from_nodes(chunk as u64, &|id| {
        let bytes = nodes.get(&id.last_leaf())?;
        bytes
            .get(id.level as usize * 32..id.level as usize * 32 + 32)?
            .try_into()
            .ok()
    })
    .unwrap();
    let at_chunk = &written[chunk as usize - 1];
    db.execute(
        "UPDATE ledger_state SET tree_size = $1, tree_head = $2, tree_frontier = $3 WHERE ledger_id = 0",
        &[&chunk, &at_chunk.1, &frontier.to_bytes()],
    )
    .await
    .unwrap();
    ledger_server::storage::migrate(&t.database_url)
        .await
        .unwrap();
    assert_eq!(pairs(&stored_hashes(&db).await), pairs(&written));
}
