//! The upgrade to ledgers (migration 0013): a ledger recorded under the schema before it
//! migrates in place into the ledger `default` with the same ids, sequences, keys, times and
//! events, and every answer is the same after.
//!
//! The journal is written by the service, then taken back to the schema before 0013 by the
//! inverse of that migration and of those after it (checked against a database migrated only that far: the same
//! tables, columns, constraints, indexes, functions and triggers), then migrated again.

use crate::support::*;
use ledger_server::grpc::pb;
use ledger_server::grpc::pb::Direction::{Credit as C, Debit as D};
use ledger_server::storage::migrate::MIGRATIONS;

/// The inverse of 0015, 0014 and 0013 on a database that holds only the ledger `default`.
fn downgrade_sql() -> String {
    let sql = |v: &str| MIGRATIONS.iter().find(|(n, _)| n.starts_with(v)).unwrap().1;
    let outbox = sql("0002");
    let start = outbox
        .find("CREATE FUNCTION outbox_delete_delivered_only()")
        .unwrap();
    let end = start + outbox[start..].find("END $$;").unwrap() + "END $$;".len();
    let delete_rule = outbox[start..end].replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION");
    format!(
        "DROP TABLE ledger_move_ends, ledger_moves, ledger_fences;
         DELETE FROM schema_migrations WHERE version = '0020_ledger_moves';
         DROP TABLE ledger_placements;
         DELETE FROM schema_migrations WHERE version = '0019_ledger_placements';
         DROP INDEX postings_metadata, postings_irregular_effective, postings_caller_sequence;
         DELETE FROM schema_migrations WHERE version = '0018_posting_search';
         DROP TABLE period_close_trial_balances, period_close_balances, period_closes CASCADE;
         ALTER TABLE ledger_state DROP COLUMN closed_before;
         DELETE FROM schema_migrations WHERE version = '0017_period_closes';
         DROP TABLE posting_hashes, digest_progress CASCADE;
         DROP FUNCTION digest_progress_forward_only();
         ALTER TABLE ledger_state DROP COLUMN tree_size, DROP COLUMN tree_head, DROP COLUMN tree_frontier;
         DELETE FROM schema_migrations WHERE version = '0016_verifiable_journal';
         DROP TABLE account_outbox, account_outbox_progress CASCADE;
         DROP FUNCTION account_outbox_progress_forward_only(), account_outbox_refuse_change(),
           account_outbox_delete_delivered_only();
         DELETE FROM schema_migrations WHERE version = '0015_account_events';
         DROP TABLE account_terms CASCADE;
         ALTER TABLE account_totals DROP COLUMN terms_version;
         ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_operation_check;
         ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_operation_check
           CHECK (operation IN ('post', 'void', 'capture', 'expire'));
         DELETE FROM schema_migrations WHERE version = '0014_account_terms';
         DROP SCHEMA ledger_scope CASCADE;
         DROP FUNCTION ledger_published_sequence(integer);
         {published}
         {delete_rule}
         ALTER TABLE postings DROP CONSTRAINT postings_recorded_at_unique_in_ledger;
         ALTER TABLE postings DROP COLUMN ledger_id;
         ALTER TABLE postings ADD CONSTRAINT postings_recorded_at_key UNIQUE (recorded_at);
         ALTER TABLE rejections DROP CONSTRAINT rejections_pkey;
         ALTER TABLE rejections DROP COLUMN ledger_id;
         ALTER TABLE rejections ADD CONSTRAINT rejections_pkey PRIMARY KEY (caller, idempotency_key);
         ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_unique;
         ALTER TABLE idempotency_keys DROP COLUMN ledger_id;
         ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_unique UNIQUE (caller, idempotency_key);
         ALTER TABLE accounts DROP CONSTRAINT accounts_in_ledger;
         DROP INDEX accounts_code_pattern;
         ALTER TABLE accounts DROP CONSTRAINT accounts_code_unique_in_ledger;
         ALTER TABLE accounts DROP COLUMN ledger_id;
         ALTER TABLE accounts ADD CONSTRAINT accounts_code_key UNIQUE (code);
         CREATE INDEX accounts_code_pattern ON accounts (code text_pattern_ops);
         ALTER TABLE outbox_progress DROP CONSTRAINT outbox_progress_ledger_fkey,
           DROP CONSTRAINT outbox_progress_sequence_in_its_ledger;
         ALTER TABLE outbox_progress DISABLE TRIGGER outbox_progress_forward_only;
         UPDATE outbox_progress SET ledger_id = 1;
         ALTER TABLE outbox_progress ENABLE TRIGGER outbox_progress_forward_only;
         ALTER TABLE outbox_progress ALTER COLUMN ledger_id TYPE smallint;
         ALTER TABLE outbox_progress ADD CONSTRAINT outbox_progress_ledger_id_check CHECK (ledger_id = 1);
         ALTER TABLE ledger_state DROP CONSTRAINT ledger_state_ledger_fkey,
           DROP CONSTRAINT ledger_state_sequence_in_its_ledger;
         UPDATE ledger_state SET ledger_id = 1;
         ALTER TABLE ledger_state ALTER COLUMN ledger_id TYPE smallint;
         ALTER TABLE ledger_state ADD CONSTRAINT ledger_state_ledger_id_check CHECK (ledger_id = 1);
         DROP TABLE ledgers;
         DELETE FROM schema_migrations WHERE version = '0013_ledgers';",
        published = sql("0006"),
    )
}

/// The schema as text lines: schemas, columns, constraints, indexes, functions, triggers.
async fn schema_of(db: &tokio_postgres::Client) -> Vec<String> {
    let queries = [
        "SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema'",
        "SELECT concat_ws(':', table_schema, table_name, column_name, data_type, is_nullable, column_default, is_generated, generation_expression)
         FROM information_schema.columns WHERE table_schema NOT IN ('pg_catalog', 'information_schema')",
        "SELECT conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint
         WHERE connamespace = 'public'::regnamespace",
        "SELECT indexdef FROM pg_indexes WHERE schemaname = 'public'",
        "SELECT proname || '(' || pg_get_function_identity_arguments(oid) || ') ' || md5(prosrc) FROM pg_proc
         WHERE pronamespace = 'public'::regnamespace",
        "SELECT tgrelid::regclass || ' ' || pg_get_triggerdef(oid) FROM pg_trigger WHERE NOT tgisinternal",
    ];
    let mut lines = Vec::new();
    for q in queries {
        let mut rows: Vec<String> = db
            .query(q, &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        rows.sort();
        lines.extend(rows);
    }
    lines
}

/// Every row of the journal's tables, as JSON without the columns 0013 and 0014 added.
async fn rows_of(db: &tokio_postgres::Client) -> Vec<String> {
    let tables = [
        "accounts",
        "account_totals",
        "idempotency_keys",
        "postings",
        "entries",
        "hold_legs",
        "rejections",
        "outbox",
        "expiring_holds",
        "ledger_state",
        "outbox_progress",
    ];
    let mut all = Vec::new();
    for t in tables {
        let q = format!("SELECT t.tableoid::regclass || ' ' || (to_jsonb(t) - 'ledger_id' - 'terms_version' - 'tree_size' - 'tree_head' - 'tree_frontier' - 'closed_before')::text FROM {t} t ORDER BY 1");
        all.extend(
            db.query(&q, &[])
                .await
                .unwrap()
                .iter()
                .map(|r| r.get::<_, String>(0)),
        );
    }
    all
}

/// A journal with every kind of posting: transfers (one back-dated), a rejection, a void,
/// a hold captured, a hold released, an open hold with an expiry, a batch.
async fn write_journal(t: &mut TestLedger) {
    t.standard_accounts(3).await;
    t.post(transfer("fund", "equity:world", "acct:0", "100.00"))
        .await
        .unwrap();
    let back = time::OffsetDateTime::now_utc() - time::Duration::days(3);
    t.post(pb::PostRequest {
        effective_at: Some(ledger_server::grpc::convert::time_to_pb(back)),
        ..transfer("back", "equity:world", "acct:1", "7.00")
    })
    .await
    .unwrap();
    t.post(transfer("too-much", "acct:2", "acct:0", "1.00"))
        .await
        .unwrap_err();
    let p = t
        .post(transfer("wrong", "acct:0", "acct:2", "3.00"))
        .await
        .unwrap()
        .posting
        .unwrap();
    let void = pb::VoidRequest {
        idempotency_key: "undo".into(),
        posting_id: p.posting_id,
        reason: "typo".into(),
        ..Default::default()
    };
    t.client.void(void).await.unwrap();
    let hold = |key: &str, expires: Option<time::OffsetDateTime>| pb::PostRequest {
        hold: true,
        hold_expires_at: expires.map(ledger_server::grpc::convert::time_to_pb),
        ..transfer(key, "acct:0", "acct:1", "5.00")
    };
    let captured = t
        .post(hold("h-capture", None))
        .await
        .unwrap()
        .posting
        .unwrap();
    let capture = pb::CaptureRequest {
        idempotency_key: "capture".into(),
        hold_posting_id: captured.posting_id,
        legs: vec![leg("acct:1", D, "4.00"), leg("acct:0", C, "4.00")],
        ..Default::default()
    };
    t.client.capture(capture).await.unwrap();
    let released = t
        .post(hold("h-release", None))
        .await
        .unwrap()
        .posting
        .unwrap();
    let release = pb::VoidRequest {
        idempotency_key: "release".into(),
        posting_id: released.posting_id,
        ..Default::default()
    };
    t.client.void(release).await.unwrap();
    t.post(hold(
        "h-open",
        Some(time::OffsetDateTime::now_utc() + time::Duration::days(1)),
    ))
    .await
    .unwrap();
    let batch = pb::PostBatchRequest {
        requests: (0..5)
            .map(|i| transfer(&format!("b-{i}"), "equity:world", "acct:2", "1.00"))
            .collect(),
        ..Default::default()
    };
    t.client.post_batch(batch).await.unwrap();
}

/// What the service answers about the journal: accounts, postings (listed and by key),
/// balances now and at a cut-off in the middle, a trial balance there, statements.
async fn answers_of(t: &mut TestLedger, [middle, end]: [Option<pb::AsOf>; 2]) -> Vec<String> {
    let mut out = Vec::new();
    let c = &mut t.client;
    let accounts = c
        .list_accounts(pb::ListAccountsRequest {
            page_size: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    out.push(format!("{accounts:?}"));
    let postings = c
        .list_postings(pb::ListPostingsRequest {
            page_size: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    out.push(format!("{postings:?}"));
    for key in [
        "fund", "back", "too-much", "wrong", "undo", "capture", "h-open", "b-3",
    ] {
        let by = Some(pb::get_posting_request::By::IdempotencyKey(key.into()));
        let got = c
            .get_posting(pb::GetPostingRequest {
                by,
                ..Default::default()
            })
            .await;
        out.push(format!(
            "{key}: {:?}",
            got.map(|r| r.into_inner())
                .map_err(|s| (s.code(), reason(&s)))
        ));
    }
    for a in &accounts.accounts {
        for as_of in [end, middle] {
            let b = c
                .get_balance(pb::GetBalanceRequest {
                    account: a.code.clone(),
                    as_of,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            out.push(format!("{b:?}"));
        }
        let e = c
            .list_entries(pb::ListEntriesRequest {
                account: a.code.clone(),
                page_size: 1000,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        out.push(format!("{e:?}"));
    }
    let tb = c
        .list_balances(pb::ListBalancesRequest {
            as_of: middle,
            page_size: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    out.push(format!("{tb:?}"));
    out
}

#[tokio::test]
async fn a_ledger_recorded_before_ledgers_migrates_into_default_with_the_same_rows_and_answers() {
    let mut t = TestLedger::start().await;
    write_journal(&mut t).await;
    let db = t.db().await;
    let mut cuts = Vec::new();
    // Cut-offs in the middle and at the last posting (the present would move).
    for order in ["sequence OFFSET 4", "sequence DESC"] {
        let sql = format!("SELECT recorded_at FROM postings ORDER BY {order} LIMIT 1");
        let at: time::OffsetDateTime = db.query_one(&sql, &[]).await.unwrap().get(0);
        cuts.push(Some(pb::AsOf {
            recorded_at: Some(ledger_server::grpc::convert::time_to_pb(at)),
            effective_at: None,
        }));
    }
    let cuts: [Option<pb::AsOf>; 2] = cuts.try_into().unwrap();
    let answers = answers_of(&mut t, cuts).await;
    let rows = rows_of(&db).await;
    t.server.take().unwrap().shutdown().await.unwrap();

    // Back to the schema before 0013, with the journal in it.
    db.batch_execute(&downgrade_sql()).await.unwrap();
    let (_, fresh) = crate::upgrade::database_before("0013").await;
    assert_eq!(
        schema_of(&db).await,
        schema_of(&fresh).await,
        "the schema before 0013, exactly"
    );
    assert_eq!(
        rows_of(&db).await,
        rows,
        "the journal as that schema holds it"
    );

    // The upgrade: the same rows, in the ledger default, and the same answers.
    ledger_server::storage::migrate(&t.database_url)
        .await
        .unwrap();
    assert_eq!(
        rows_of(&db).await,
        rows,
        "ids, sequences, keys, times and events unchanged"
    );
    let in_default: i64 = db
        .query_one(
            "SELECT (SELECT count(*) FROM accounts WHERE ledger_id = 0) + (SELECT count(*) FROM postings WHERE ledger_id = 0)
                  - (SELECT count(*) FROM accounts) - (SELECT count(*) FROM postings)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(in_default, 0, "everything is in the ledger default");
    let mut t = TestLedger::on_database(t.database_url.clone()).await;
    assert_eq!(answers_of(&mut t, cuts).await, answers);
    let mut db = t.db().await;
    let findings = ledger_server::storage::check::run(&mut db).await.unwrap();
    assert!(findings.iter().all(|f| f.violations == 0), "{findings:?}");
    let replay = t
        .post(transfer("fund", "equity:world", "acct:0", "100.00"))
        .await
        .unwrap();
    assert!(replay.replayed, "a key decided before the upgrade replays");
    let next = t
        .post(transfer("after", "equity:world", "acct:0", "1.00"))
        .await
        .unwrap();
    let last: i64 = db
        .query_one("SELECT max(sequence) FROM postings", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        next.posting.unwrap().sequence as i64,
        last,
        "the sequence goes on where it was"
    );
}
