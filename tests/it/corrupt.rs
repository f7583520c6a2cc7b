//! A journal row written behind the ledger's back (here: a one-leg posting inserted with the
//! application role's own INSERT grant) fails only the requests that touch it, with
//! `DATA_LOSS` / `JOURNAL_CORRUPT` naming its sequence, and never stops the server.

use crate::ops::{sample, scrape};
use crate::support::*;
use ledger_core::posting::{LegRequest, PostRequest, VoidRequest};
use ledger_core::write::{Command, WriteRequest};
use ledger_core::Direction;
use ledger_server::grpc::pb;
use ledger_server::server::OpsOptions;
use tonic::Code;

/// Inserts, as `ledger_app`, a posting of one leg (5.00 debit on `acct:0`) keyed
/// (`anonymous`, `key`) right after the ledger's last sequence, and moves the account's totals
/// and the ledger's state on as a careful intruder would. Returns its sequence and id.
async fn insert_one_leg_posting(t: &TestLedger, key: &str) -> (i64, uuid::Uuid) {
    let db = t.db().await;
    db.batch_execute("SET ROLE ledger_app").await.unwrap();
    let id = uuid::Uuid::now_v7();
    let row = db
        .query_one(
            "WITH k AS (
               INSERT INTO idempotency_keys (ledger_id, caller, idempotency_key, operation, fingerprint, decided_at)
               VALUES (0, 'anonymous', $1, 'post', decode(repeat('00', 32), 'hex'), now()) RETURNING key_id),
             s AS (SELECT last_sequence + 1 AS seq, clock_timestamp() AS at FROM ledger_state)
             INSERT INTO postings (sequence, posting_id, caller, idempotency_key, effective_at,
                                   recorded_at, memo, metadata, key_id)
             SELECT s.seq, $2, 'anonymous', $1, s.at, s.at, '', '{}', k.key_id FROM s, k
             RETURNING sequence, recorded_at",
            &[&key, &id],
        )
        .await
        .expect("the application role may insert a posting");
    let (sequence, at): (i64, time::OffsetDateTime) = (row.get(0), row.get(1));
    db.execute(
        "INSERT INTO entries (sequence, leg_index, account_id, direction, amount, account_version,
                              debits_after, credits_after, recorded_at, effective_at)
         SELECT $1, 0, a.account_id, 'D', 5.00, t.version + 1, t.debits + 5, t.credits, $2, $2
         FROM accounts a JOIN account_totals t USING (account_id) WHERE a.code = 'acct:0'",
        &[&sequence, &at],
    )
    .await
    .unwrap();
    db.execute(
        "UPDATE account_totals t SET debits = t.debits + 5, version = t.version + 1, last_sequence = $1
         FROM accounts a WHERE a.account_id = t.account_id AND a.code = 'acct:0'",
        &[&sequence],
    )
    .await
    .unwrap();
    db.execute(
        "UPDATE ledger_state SET last_sequence = $1, last_recorded_at = $2",
        &[&sequence, &at],
    )
    .await
    .unwrap();
    (sequence, id)
}

#[track_caller]
fn assert_journal_corrupt(s: &tonic::Status, sequence: i64) {
    assert_error(s, Code::DataLoss, "JOURNAL_CORRUPT");
    let msg = s.message();
    assert!(
        msg.contains(&format!("sequence {sequence}")) && msg.contains("ledger check"),
        "{msg}"
    );
    let info = tonic_types::StatusExt::get_details_error_info(s).unwrap();
    assert_eq!(info.metadata.get("sequence"), Some(&sequence.to_string()));
}

#[tokio::test]
async fn reads_of_a_corrupt_posting_answer_data_loss_and_everything_else_keeps_serving() {
    let mut t = TestLedger::start_with(OpsOptions {
        metrics_listen: Some("127.0.0.1:0".parse().unwrap()),
        ..app_role_ops()
    })
    .await;
    let metrics = t.server.as_ref().unwrap().metrics_addr.unwrap();
    t.standard_accounts(1).await;
    let good = t
        .post(transfer("good", "equity:world", "acct:0", "10.00"))
        .await
        .unwrap()
        .posting
        .unwrap();
    let (sequence, id) = insert_one_leg_posting(&t, "intruded").await;
    let before = sample(
        &scrape(metrics).await,
        "ledger_journal_corrupt_rows_total",
        &[],
    );

    let by_id = t
        .client
        .get_posting(pb::GetPostingRequest {
            ledger: String::new(),
            by: Some(pb::get_posting_request::By::PostingId(id.to_string())),
            as_of: None,
        })
        .await
        .unwrap_err();
    assert_journal_corrupt(&by_id, sequence);
    let by_key = t
        .client
        .get_posting(pb::GetPostingRequest {
            ledger: String::new(),
            by: Some(pb::get_posting_request::By::IdempotencyKey(
                "intruded".into(),
            )),
            as_of: None,
        })
        .await
        .unwrap_err();
    assert_journal_corrupt(&by_key, sequence);
    let page = t
        .client
        .list_postings(pb::ListPostingsRequest {
            ledger: String::new(),
            account: String::new(),
            page_size: 10,
            page_token: String::new(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_journal_corrupt(&page, sequence);

    // Everything that does not touch the row still works, reads and writes alike.
    let again = t
        .client
        .get_posting(pb::GetPostingRequest {
            ledger: String::new(),
            by: Some(pb::get_posting_request::By::PostingId(good.posting_id)),
            as_of: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.sequence, good.sequence);
    let next = t
        .post(transfer("after", "equity:world", "acct:0", "1.00"))
        .await
        .unwrap()
        .posting
        .unwrap();
    assert_eq!(next.sequence, sequence as u64 + 1);
    let after = sample(
        &scrape(metrics).await,
        "ledger_journal_corrupt_rows_total",
        &[],
    );
    assert!(after - before >= 3.0, "the metric counts each met: {after}");
}

#[tokio::test]
async fn writes_touching_a_corrupt_posting_are_refused_without_binding_their_keys() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    t.post(transfer("fund", "equity:world", "acct:0", "10.00"))
        .await
        .unwrap();
    let (sequence, id) = insert_one_leg_posting(&t, "intruded").await;

    // A replay of the intruder's key, and a void of its posting.
    let replay = t
        .post(transfer("intruded", "equity:world", "acct:0", "1.00"))
        .await
        .unwrap_err();
    assert_journal_corrupt(&replay, sequence);
    let void = t
        .client
        .void(pb::VoidRequest {
            ledger: String::new(),
            idempotency_key: "undo".into(),
            posting_id: id.to_string(),
            reason: "r".into(),
            effective_at: None,
        })
        .await
        .unwrap_err();
    assert_journal_corrupt(&void, sequence);

    // The void's key is not bound: a corrected request may use it.
    let reused = t
        .post(transfer("undo", "equity:world", "acct:0", "2.00"))
        .await
        .unwrap();
    assert!(!reused.replayed);
}

/// Requests for one batch: a void of `target`, then posts `p0..pN` of 1.00 each.
async fn mixed_batch(
    pool: &ledger_server::storage::Pool,
    target: uuid::Uuid,
    posts: usize,
) -> Vec<WriteRequest> {
    let db = pool.get().await.unwrap();
    let codes = vec!["equity:world".to_string(), "acct:0".to_string()];
    let accounts = ledger_server::storage::accounts::get_many(&db, 0, &codes)
        .await
        .unwrap()
        .into_iter()
        .map(|a| (a.code.clone(), a))
        .collect();
    let void = VoidRequest {
        idempotency_key: "undo".into(),
        posting_id: target.to_string(),
        reason: "r".into(),
        effective_at: None,
    };
    let mut out = vec![WriteRequest {
        caller: "anonymous".into(),
        command: Command::Void(void.validate().unwrap()),
    }];
    for i in 0..posts {
        let leg = |account: &str, d| LegRequest {
            account: account.into(),
            direction: Some(d),
            amount: "1.00".into(),
        };
        let post = PostRequest {
            idempotency_key: format!("p{i}"),
            legs: vec![
                leg("acct:0", Direction::Debit),
                leg("equity:world", Direction::Credit),
            ],
            effective_at: None,
            memo: String::new(),
            metadata: Default::default(),
            hold: false,
            hold_expires_at: None,
            conditions: Vec::new(),
        };
        out.push(WriteRequest {
            caller: "anonymous".into(),
            command: Command::Post(post.validate(&accounts).unwrap()),
        });
    }
    out
}

#[tokio::test]
async fn a_batch_with_a_void_of_a_corrupt_posting_refuses_that_void_and_commits_the_rest() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    t.post(transfer("fund", "equity:world", "acct:0", "10.00"))
        .await
        .unwrap();
    let (sequence, id) = insert_one_leg_posting(&t, "intruded").await;
    let pool = ledger_server::storage::pool(&t.database_url, 2).unwrap();
    let batch = mixed_batch(&pool, id, 3).await;
    let client = pool.get().await.unwrap();
    let outcomes = ledger_server::writer::apply_alone(&client, 0, &batch)
        .await
        .expect("the batch commits");
    let refused = outcomes[0].as_ref().unwrap_err();
    assert_eq!(refused.reason, ledger_core::Reason::JournalCorrupt);
    assert!(refused.message.contains(&format!("sequence {sequence}")));
    for (i, o) in outcomes[1..].iter().enumerate() {
        let d = o.as_ref().unwrap_or_else(|e| panic!("post p{i}: {e}"));
        assert_eq!(
            d.posting().unwrap().sequence,
            sequence as u64 + 1 + i as u64
        );
    }
    let bound: i64 = t
        .db()
        .await
        .query_one(
            "SELECT count(*) FROM idempotency_keys WHERE idempotency_key = 'undo'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(bound, 0, "the refused void's key is not claimed");
}

#[tokio::test]
async fn a_posting_whose_time_was_rewritten_to_infinity_is_answered_journal_corrupt_not_a_crash() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    let p = t
        .post(transfer("p", "equity:world", "acct:0", "1.00"))
        .await
        .unwrap()
        .posting
        .unwrap();
    t.db()
        .await
        .batch_execute(
            "ALTER TABLE postings DISABLE TRIGGER USER;
             UPDATE postings SET effective_at = 'infinity';
             ALTER TABLE postings ENABLE TRIGGER USER;",
        )
        .await
        .unwrap();
    let got = t
        .client
        .get_posting(pb::GetPostingRequest {
            ledger: String::new(),
            by: Some(pb::get_posting_request::By::PostingId(p.posting_id)),
            as_of: None,
        })
        .await
        .unwrap_err();
    assert_journal_corrupt(&got, p.sequence as i64);
    // The server goes on serving.
    t.post(transfer("q", "equity:world", "acct:0", "1.00"))
        .await
        .unwrap();
}
