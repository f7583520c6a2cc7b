//! The group-commit write path: a batch decides each request on its own, a failed batch
//! answers everyone `UNAVAILABLE` and writes nothing, several servers share one database
//! safely, and `ledger bench` reports what it did.

use crate::support::writes::{valid_transfer, void_of};
use crate::support::*;
use ledger_core::write::WriteRequest;
use ledger_core::Reason;
use ledger_server::grpc::pb;
use ledger_server::writer;
use std::collections::HashMap;
use tonic::Code;

#[tokio::test]
async fn a_batch_answers_its_accepted_rejected_and_duplicate_postings_each_on_their_own() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(2).await;
    let funded = t
        .post(transfer("fund", "equity:world", "acct:0", "10.00"))
        .await
        .unwrap();
    let pool = ledger_server::storage::pool(&t.database_url, 2).unwrap();
    let db = pool.get().await.unwrap();
    let batch = vec![
        valid_transfer(&db, "pay", "acct:0", "acct:1", "4.00").await,
        // acct:1 holds 4.00 after the first request: 50.00 overdraws it.
        valid_transfer(&db, "overdraw", "acct:1", "acct:0", "50.00").await,
        valid_transfer(&db, "pay", "acct:0", "acct:1", "4.00").await,
        valid_transfer(&db, "fund", "equity:world", "acct:0", "10.00").await,
        valid_transfer(&db, "pay", "acct:0", "acct:1", "5.00").await,
    ];
    let out = writer::apply_alone(&db, 0, &batch)
        .await
        .expect("batch commits");
    assert_eq!(out.len(), batch.len());

    let accepted = out[0].as_ref().expect("first request accepted");
    assert!(!accepted.replayed);
    assert_eq!(accepted.posting().unwrap().sequence, 2);
    let rejected = out[1].as_ref().expect_err("overdraft rejected");
    assert_eq!(rejected.reason, Reason::InsufficientFunds, "{rejected}");
    let duplicate = out[2].as_ref().expect("duplicate in the batch answered");
    assert!(duplicate.replayed);
    assert_eq!(
        duplicate.posting(),
        accepted.posting(),
        "answered from the first"
    );
    let earlier = out[3].as_ref().expect("earlier key answered");
    assert!(earlier.replayed);
    assert_eq!(
        earlier.posting().unwrap().posting_id.to_string(),
        funded.posting.unwrap().posting_id
    );
    let reused = out[4].as_ref().expect_err("same key, other request");
    assert_eq!(reused.reason, Reason::IdempotencyKeyReused, "{reused}");

    assert_eq!(t.count("postings").await, 2, "fund and pay");
    assert_eq!(t.count("rejections").await, 1, "the overdraft is bound");
    assert_eq!(t.count("outbox").await, 2);
    assert_eq!(t.balance("acct:0", None).await.balance, "6.00");
    assert_eq!(t.balance("acct:1", None).await.balance, "4.00");
    // The rejection binds its key: the same request later gets the same error.
    let again = t
        .post(transfer("overdraw", "acct:1", "acct:0", "50.00"))
        .await
        .unwrap_err();
    assert_error(&again, Code::FailedPrecondition, "INSUFFICIENT_FUNDS");
}

#[tokio::test]
async fn two_batches_claiming_the_same_keys_in_opposite_orders_post_each_key_once() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(2).await;
    let pool = ledger_server::storage::pool(&t.database_url, 2).unwrap();
    let owner = t.db().await;
    for round in 0..3 {
        let mut forward = Vec::new();
        for k in 0..20 {
            let key = format!("r{round}-k{k}");
            let db = pool.get().await.unwrap();
            forward.push(valid_transfer(&db, &key, "equity:world", "acct:0", "1.00").await);
        }
        let backward: Vec<WriteRequest> = forward.iter().rev().cloned().collect();
        // A third transaction holds one key of the middle, so both claims (which run before
        // the ledger's lock) stop there with part of their keys inserted. When it rolls back,
        // a claim in request order would wait on the other in a cycle (a deadlock, one batch
        // failed); keys are inserted in one order for everyone, so the second claim waits on
        // the first and then finds its keys taken.
        owner.batch_execute("BEGIN").await.unwrap();
        owner
            .execute(
                "INSERT INTO idempotency_keys (ledger_id, caller, idempotency_key, operation, fingerprint, decided_at)
                 VALUES (0, $1, $2, 'post', sha256('held'::bytea), now())",
                &[&ledger_server::grpc::ANONYMOUS, &format!("r{round}-k10")],
            )
            .await
            .unwrap();
        let run = |reqs: Vec<WriteRequest>| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let db = pool.get().await.unwrap();
                writer::apply_alone(&db, 0, &reqs).await
            })
        };
        let (a, b) = (run(forward), run(backward));
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        owner.batch_execute("ROLLBACK").await.unwrap();
        let x = a.await.unwrap().expect("batch a commits");
        let y = b.await.unwrap().expect("batch b commits");
        for k in 0..20 {
            let first = x[k].as_ref().expect("accepted or replayed");
            let second = y[19 - k].as_ref().expect("accepted or replayed");
            assert_eq!(first.posting(), second.posting(), "one posting for key {k}");
            assert!(
                first.replayed != second.replayed,
                "exactly one of the two answers is the original"
            );
        }
    }
    assert_eq!(t.count("postings").await, 3 * 20);
}

/// The tables a batch writes to, which grow with every request.
const JOURNAL_TABLES: [&str; 6] = [
    "idempotency_keys",
    "postings",
    "entries",
    "rejections",
    "outbox",
    "posting_hashes",
];

/// Rows in each journal table, in the order of [`JOURNAL_TABLES`].
pub async fn journal_counts(t: &TestLedger) -> Vec<i64> {
    let mut counts = Vec::new();
    for table in JOURNAL_TABLES {
        counts.push(t.count(table).await);
    }
    counts
}

/// The tables that grow with use: the journal's, and the accounts with their totals.
fn growing_tables() -> Vec<&'static str> {
    let mut tables = JOURNAL_TABLES.to_vec();
    tables.extend(["accounts", "account_totals"]);
    tables
}

/// Rows that sequential scans read from each growing table (see [`growing_tables`]), as this
/// connection's backend counts them (its pending counters are flushed first).
async fn rows_scanned(db: &deadpool_postgres::Client) -> HashMap<String, i64> {
    let tables = growing_tables();
    db.batch_execute("SELECT pg_stat_force_next_flush()")
        .await
        .unwrap();
    db.batch_execute("SELECT pg_stat_clear_snapshot()")
        .await
        .unwrap();
    let scanned: HashMap<String, i64> = db
        .query(
            "SELECT relname::text, coalesce(seq_tup_read, 0) FROM pg_stat_user_tables
         WHERE relname = ANY($1)",
            &[&tables],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(scanned.len(), tables.len(), "a counter per growing table");
    scanned
}

#[tokio::test]
async fn the_services_sessions_plan_every_statement_afresh_and_never_jit_compile_one() {
    let t = TestLedger::start().await;
    let db = t.service_db().await;
    for (setting, want) in [("plan_cache_mode", "force_custom_plan"), ("jit", "off")] {
        let got: String = db
            .query_one(&format!("SHOW {setting}"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(got, want, "{setting}");
    }
}

#[tokio::test]
async fn the_writer_does_not_scan_tables_that_grew_after_its_statements_were_prepared() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(4).await;
    // The account every posting debits has two debit limits: every batch reads their windows
    // (`WINDOWS_SQL`, on a generic plan).
    t.client
        .update_account(pb::UpdateAccountRequest {
            code: "equity:world".into(),
            expected_version: 1,
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["debit_limits".into()],
            }),
            debit_limits: vec![
                pb::DebitLimit {
                    amount: "1000000.00".into(),
                    window_seconds: 60,
                },
                pb::DebitLimit {
                    amount: "1000000.00".into(),
                    window_seconds: 86_400,
                },
            ],
            idempotency_key: "limits".into(),
            reason: "two windows to read".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let pool = ledger_server::storage::pool(&t.database_url, 1).unwrap();
    let w = pool.get().await.unwrap();
    // The writer's connection prepares its statements while the tables are small (a cached
    // plan is chosen after a few executions), and sees a replay (the decided-key lookup),
    // voids (the void's foreign key check reads `postings`) and debit limits' windows.
    // Statistics are taken while the tables are small, as autovacuum does on a new ledger.
    t.db().await.batch_execute("ANALYZE").await.unwrap();
    let mut warm = Vec::new();
    for i in 0..8 {
        let to = format!("acct:{}", i % 4);
        let req = valid_transfer(&w, &format!("warm-{i}"), "equity:world", &to, "1.00").await;
        let again = req.clone();
        let mut batch = vec![req, again];
        if i >= 2 {
            batch.push(void_of(&warm[i - 2], &format!("warm-void-{i}")));
        }
        let out = writer::apply_alone(&w, 0, &batch).await.unwrap();
        assert!(out[1].as_ref().unwrap().replayed);
        assert!(out.iter().all(|o| o.is_ok()), "{out:?}");
        warm.push(out[0].as_ref().unwrap().posting().unwrap().posting_id);
    }
    // The tables grow behind its back (no ANALYZE, as between autovacuum runs): 50,000 keys,
    // postings, legs and posting hashes of another caller (numbered far beyond the ledger's
    // own), and 100,000 accounts.
    t.db()
        .await
        .batch_execute(
            "INSERT INTO idempotency_keys (ledger_id, caller, idempotency_key, operation, fingerprint, decided_at)
               SELECT 0, 'other', 'key-' || g, 'post', sha256(g::text::bytea), now()
               FROM generate_series(1, 50000) g;
             INSERT INTO postings (sequence, posting_id, caller, idempotency_key, effective_at, recorded_at, memo, metadata, key_id)
               SELECT 1000000000 + g, gen_random_uuid(), 'other', 'key-' || g, now(),
                      '2000-01-01'::timestamptz + g * interval '1 microsecond', '', '{}', k.key_id
               FROM generate_series(1, 50000) g
               JOIN idempotency_keys k ON k.caller = 'other' AND k.idempotency_key = 'key-' || g;
             INSERT INTO entries (sequence, leg_index, account_id, direction, amount, account_version,
                                  debits_after, credits_after, recorded_at, effective_at)
               SELECT sequence, 0, (SELECT max(account_id) FROM accounts), 'D', 1,
                      1000000000 + sequence, 0, 0, recorded_at, effective_at
               FROM postings WHERE caller = 'other';
             INSERT INTO posting_hashes (sequence, hash, nodes)
               SELECT sequence, sha256(sequence::text::bytea), sha256(sequence::text::bytea)
               FROM postings WHERE caller = 'other';
             WITH a AS (
               INSERT INTO accounts (ledger_id, code, currency, scale, normal_balance, allow_negative, metadata)
               SELECT 0, 'grown:' || g, 'EUR', 2, 'debit', false, '{}' FROM generate_series(1, 100000) g
               RETURNING account_id)
             INSERT INTO account_totals (account_id, debits, credits, version, last_sequence)
               SELECT account_id, 0, 0, 0, 0 FROM a;",
        )
        .await
        .unwrap();

    let before = rows_scanned(&w).await;
    let mut target = warm[7];
    for i in 0..6 {
        let mut reqs = Vec::new();
        for j in 0..20 {
            let to = format!("acct:{}", j % 4);
            reqs.push(
                valid_transfer(&w, &format!("grown-{i}-{j}"), "equity:world", &to, "0.10").await,
            );
        }
        // A key decided before: its stored decision is looked up.
        reqs.push(
            valid_transfer(
                &w,
                &format!("warm-{i}"),
                "equity:world",
                &format!("acct:{}", i % 4),
                "1.00",
            )
            .await,
        );
        // A void: of the last warm posting, then of the previous batch's first posting.
        reqs.push(void_of(&target, &format!("grown-void-{i}")));
        let out = writer::apply_alone(&w, 0, &reqs).await.unwrap();
        assert!(out.iter().all(|o| o.is_ok()), "{out:?}");
        assert!(out[out.len() - 2].as_ref().unwrap().replayed);
        target = out[0].as_ref().unwrap().posting().unwrap().posting_id;
    }
    let after = rows_scanned(&w).await;
    let scanned: HashMap<&str, i64> = after
        .iter()
        .map(|(table, n)| (table.as_str(), n - before.get(table).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    // Before plans were made per execution, the claim's cached plan read every key on every
    // batch (here 6 x 50,000 rows). A statement that reads a growing table on a generic plan
    // fails here too: the postings insert (its void's foreign key check read 250,298 postings)
    // or the totals read (600,030 totals rows). The tables are large enough (100,000 accounts)
    // that a plan made for each execution reads them by index.
    assert!(
        scanned.is_empty(),
        "in 6 batches the writer read by sequential scans: {scanned:?}"
    );
}

/// Makes every batch that writes a posting fail inside its transaction (at the outbox row).
pub async fn break_outbox(t: &TestLedger) {
    t.db()
        .await
        .batch_execute(
            "CREATE FUNCTION test_refuse_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN RAISE EXCEPTION 'test: outbox refused'; END $$;
             CREATE TRIGGER test_refuse_outbox BEFORE INSERT ON outbox
               FOR EACH ROW EXECUTE FUNCTION test_refuse_outbox();",
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn a_failed_batch_writes_nothing_and_answers_every_caller_unavailable() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(3).await;
    t.post(transfer("fund", "equity:world", "acct:0", "10.00"))
        .await
        .unwrap();
    break_outbox(&t).await;
    let before = journal_counts(&t).await;

    // Directly: one batch holding an acceptable, a rejected and a duplicate request.
    let pool = ledger_server::storage::pool(&t.database_url, 2).unwrap();
    let db = pool.get().await.unwrap();
    let batch = vec![
        valid_transfer(&db, "a", "acct:0", "acct:1", "1.00").await,
        valid_transfer(&db, "b", "acct:2", "acct:1", "1.00").await,
        valid_transfer(&db, "a", "acct:0", "acct:1", "1.00").await,
    ];
    let err = writer::apply_alone(&db, 0, &batch)
        .await
        .expect_err("the batch transaction fails");
    assert!(err.to_string().contains("outbox refused"), "{err}");
    // The connection is usable again (the failed transaction was rolled back).
    db.query_one("SELECT 1", &[]).await.unwrap();

    // Through the server: concurrent callers all get UNAVAILABLE.
    let mut calls = Vec::new();
    for i in 0..6 {
        let mut client = t.new_client().await;
        calls.push(tokio::spawn(async move {
            client
                .post(transfer(&format!("c{i}"), "equity:world", "acct:1", "1.00"))
                .await
        }));
    }
    for c in calls {
        let status = c.await.unwrap().expect_err("batch failed");
        assert_error(&status, Code::Unavailable, "STORAGE_UNAVAILABLE");
    }
    let after = journal_counts(&t).await;
    assert_eq!(before, after, "nothing of a failed batch is written");

    // Once the database accepts again, retries with the same keys make one posting each.
    t.db()
        .await
        .batch_execute("DROP TRIGGER test_refuse_outbox ON outbox")
        .await
        .unwrap();
    for i in 0..6 {
        let r = t
            .post(transfer(&format!("c{i}"), "equity:world", "acct:1", "1.00"))
            .await
            .expect("retry succeeds");
        assert!(!r.replayed, "the failed attempt decided nothing");
    }
    assert_eq!(t.count("postings").await, before[1] + 6);
    assert_eq!(t.balance("acct:1", None).await.balance, "6.00");
}

#[tokio::test]
async fn two_servers_on_one_database_keep_the_sequence_gapless_and_balances_exact() {
    const ACCOUNTS: usize = 6;
    const CALLERS_PER_SERVER: usize = 6;
    const POSTS_PER_CALLER: usize = 40;
    let mut a = TestLedger::start().await;
    a.standard_accounts(ACCOUNTS).await;
    let b = TestLedger::on_database(a.database_url.clone()).await;

    let mut tasks = Vec::new();
    for (s, server) in [&a, &b].into_iter().enumerate() {
        for c in 0..CALLERS_PER_SERVER {
            let mut client = server.new_client().await;
            tasks.push(tokio::spawn(async move {
                // Accepted legs seen by this caller: account -> signed minor units.
                let mut moved: HashMap<String, i64> = HashMap::new();
                for n in 0..POSTS_PER_CALLER {
                    let i = (s * 31 + c * 7 + n * 3) % ACCOUNTS;
                    let j = (i + 1 + n % (ACCOUNTS - 1)) % ACCOUNTS;
                    let cents = 100 + (n as i64 % 7) * 25;
                    let amount = format!("{}.{:02}", cents / 100, cents % 100);
                    // Every third posting moves money between accounts (may be refused).
                    let from = if n % 3 == 2 {
                        format!("acct:{j}")
                    } else {
                        "equity:world".into()
                    };
                    let to = format!("acct:{i}");
                    let key = format!("s{s}-c{c}-{n}");
                    match client.post(transfer(&key, &from, &to, &amount)).await {
                        Ok(r) => {
                            assert!(!r.into_inner().replayed);
                            *moved.entry(to).or_default() += cents;
                            *moved.entry(from).or_default() -= cents;
                        }
                        Err(s) => assert_error(&s, Code::FailedPrecondition, "INSUFFICIENT_FUNDS"),
                    }
                }
                moved
            }));
        }
    }
    let mut expected: HashMap<String, i64> = HashMap::new();
    for t in tasks {
        for (acct, cents) in t.await.unwrap() {
            *expected.entry(acct).or_default() += cents;
        }
    }

    let db = a.db().await;
    let row = db
        .query_one(
            "SELECT count(*), coalesce(min(sequence), 0), coalesce(max(sequence), 0),
                    count(*) FILTER (WHERE recorded_at <= prev) AS out_of_order
             FROM (SELECT sequence, recorded_at, lag(recorded_at) OVER (ORDER BY sequence) AS prev
                   FROM postings) p",
            &[],
        )
        .await
        .unwrap();
    let (n, min, max, out_of_order): (i64, i64, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    assert!(n > (2 * CALLERS_PER_SERVER * POSTS_PER_CALLER / 2) as i64);
    assert_eq!((min, max), (1, n), "sequence is 1..=n without gaps");
    assert_eq!(out_of_order, 0, "recorded_at increases with sequence");
    let outbox: i64 = db
        .query_one("SELECT count(*) FROM outbox", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(outbox, n, "one event per posting");

    let mut b = b;
    for i in 0..ACCOUNTS {
        let code = format!("acct:{i}");
        let cents = expected.get(&code).copied().unwrap_or(0);
        let want = format!("{}.{:02}", cents / 100, cents % 100);
        assert_eq!(
            a.balance(&code, None).await.balance,
            want,
            "{code} via server a"
        );
        assert_eq!(
            b.balance(&code, None).await.balance,
            want,
            "{code} via server b"
        );
    }
    // The stored running totals agree with the sum of the legs.
    let mismatched: i64 = db
        .query_one(
            "SELECT count(*) FROM account_totals t
             LEFT JOIN (SELECT account_id,
                               sum(amount) FILTER (WHERE direction = 'D') AS d,
                               sum(amount) FILTER (WHERE direction = 'C') AS c
                        FROM entries GROUP BY account_id) e USING (account_id)
             WHERE t.debits <> coalesce(e.d, 0) OR t.credits <> coalesce(e.c, 0)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(mismatched, 0, "account totals equal the sums of their legs");
}

/// Runs `ledger bench` against the test server with `args` (space-separated) after `--target`;
/// asserts the summary's fields and that the journal grew by exactly the postings it reports
/// (with the funding postings of its setup); returns the summary (its last line of output).
async fn run_bench(t: &TestLedger, args: &str) -> serde_json::Value {
    let before = t.count("postings").await;
    let addr = t.server.as_ref().unwrap().local_addr;
    let target = format!("http://{addr}");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledger"))
        .args(["bench", "--server", &target])
        .args(args.split_whitespace())
        .env("LEDGER_LOG", "warn")
        .output()
        .await
        .expect("ledger bench runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ledger bench failed: {stderr}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let last = stdout.lines().last().expect("a summary line");
    let summary: serde_json::Value = serde_json::from_str(last).expect("last line is JSON");
    for field in [
        "postings",
        "seconds",
        "postings_per_sec",
        "p50_ms",
        "p99_ms",
        "p999_ms",
        "errors",
        "replays",
    ] {
        assert!(summary.get(field).is_some(), "{field} missing in {last}");
    }
    assert_eq!(summary["errors"].as_i64(), Some(0), "{last}\n{stderr}");
    let postings = summary["postings"].as_i64().unwrap();
    let setup = summary["setup_postings"].as_i64().unwrap();
    assert_eq!(
        t.count("postings").await,
        before + setup + postings,
        "the journal grew by the postings reported (and the funding postings of the setup)"
    );
    summary
}

#[tokio::test]
async fn bench_smoke_run_reports_exactly_what_it_wrote() {
    let t = TestLedger::start().await;
    let summary = run_bench(
        &t,
        "--duration 2 --concurrency 8 --accounts 20 --hot-account --legs 3 --duplicates 0.1",
    )
    .await;
    assert!(summary["postings"].as_i64().unwrap() > 0, "{summary}");
}

#[tokio::test]
async fn bench_open_loop_offers_rate_times_duration_requests_and_reports_what_it_wrote() {
    let t = TestLedger::start().await;
    let summary = run_bench(&t, "--duration 2 --rate 150 --concurrency 64 --accounts 10").await;
    // Requests are due at i / rate for every i with a due time inside the run: exactly 300.
    assert_eq!(summary["requests"].as_i64(), Some(300), "{summary}");
    let answered = ["postings", "replays", "rejected"]
        .iter()
        .map(|f| summary[f].as_i64().unwrap())
        .sum::<i64>();
    assert_eq!(
        answered, 300,
        "every offered request was answered: {summary}"
    );
}

/// Postings answered (new, replayed or rejected) in a summary.
fn answered(summary: &serde_json::Value) -> i64 {
    ["postings", "replays", "rejected"]
        .iter()
        .map(|f| summary[f].as_i64().unwrap())
        .sum()
}

#[tokio::test]
async fn bench_with_batch_10_sends_post_batch_calls_of_10_and_reports_exactly_what_it_wrote() {
    let t = TestLedger::start().await;
    let summary = run_bench(
        &t,
        "--duration 2 --concurrency 8 --accounts 20 --hot-account --legs 3 --duplicates 0.1 --batch 10",
    )
    .await;
    let calls = summary["requests"].as_i64().unwrap();
    assert!(calls > 0, "{summary}");
    assert_eq!(summary["batch"].as_i64(), Some(10), "{summary}");
    assert_eq!(
        summary["post_batch_calls"].as_i64(),
        Some(calls),
        "{summary}"
    );
    assert_eq!(
        answered(&summary),
        10 * calls,
        "ten postings per call: {summary}"
    );
    assert!(summary["replays"].as_i64().unwrap() > 0, "{summary}");
    // Open loop: 300 postings/s in calls of 10 for 2 s are 60 calls.
    let summary = run_bench(
        &t,
        "--duration 2 --rate 300 --batch 10 --accounts 10 --prefix open",
    )
    .await;
    assert_eq!(summary["requests"].as_i64(), Some(60), "{summary}");
    assert_eq!(answered(&summary), 600, "{summary}");
}

#[tokio::test]
async fn bench_with_client_coalescing_sends_fewer_post_batch_calls_than_postings() {
    let t = TestLedger::start().await;
    let summary = run_bench(
        &t,
        "--duration 2 --concurrency 64 --accounts 20 --client-coalesce 16",
    )
    .await;
    let postings = summary["postings"].as_i64().unwrap();
    let calls = summary["post_batch_calls"].as_i64().unwrap();
    assert!(calls > 0 && calls < postings, "{summary}");
    assert_eq!(
        summary["requests"].as_i64(),
        Some(answered(&summary)),
        "{summary}"
    );
}

/// Holds in the journal (recorded, captured, released) and holds no posting closes yet.
async fn hold_counts(t: &TestLedger) -> [i64; 4] {
    let row = t
        .db()
        .await
        .query_one(
            "SELECT count(*) FILTER (WHERE hold),
                    count(*) FILTER (WHERE close_kind = 'capture'),
                    count(*) FILTER (WHERE close_kind = 'release'),
                    count(*) FILTER (WHERE hold AND NOT EXISTS
                      (SELECT 1 FROM postings c WHERE c.closes_hold_posting_id = p.posting_id))
             FROM postings p",
            &[],
        )
        .await
        .unwrap();
    [0, 1, 2, 3].map(|i| row.get(i))
}

/// A `--holds` run's summary against the journal: holds recorded, half captured and half
/// released (every other close), none left pending, nothing held on any account.
async fn assert_holds_closed(t: &TestLedger, before: [i64; 4], summary: &serde_json::Value) {
    let field = |f: &str| {
        summary[f]
            .as_i64()
            .unwrap_or_else(|| panic!("{f}: {summary}"))
    };
    let (holds, captures, releases) = (field("holds"), field("captures"), field("releases"));
    assert!(holds > 0 && releases > 0, "{summary}");
    assert_eq!(captures + releases, holds, "every hold closed: {summary}");
    assert!((0..=1).contains(&(captures - releases)), "{summary}");
    for f in [
        "hold_failures",
        "capture_failures",
        "release_failures",
        "holds_left_open",
    ] {
        assert_eq!(field(f), 0, "{f}: {summary}");
    }
    let after = hold_counts(t).await;
    assert_eq!(
        [0, 1, 2].map(|i| after[i] - before[i]),
        [holds, captures, releases],
        "the journal has the holds, captures and releases the summary reports: {summary}"
    );
    assert_eq!(after[3], 0, "no hold is left pending when the bench exits");
    let held: i64 = t
        .db()
        .await
        .query_one(
            "SELECT count(*) FROM account_totals WHERE held_debits <> 0 OR held_credits <> 0",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(held, 0, "nothing is held on any account");
}

#[tokio::test]
async fn bench_with_holds_captures_half_releases_the_rest_and_leaves_none_pending() {
    let t = TestLedger::start().await;
    // One Post per posting, with duplicates: a re-sent hold is a replay, closed once.
    let before = hold_counts(&t).await;
    let summary = run_bench(
        &t,
        "--duration 2 --concurrency 8 --accounts 20 --hot-account --legs 3 --duplicates 0.1 --holds 0.5",
    )
    .await;
    assert_holds_closed(&t, before, &summary).await;
    assert_eq!(summary["holds_fraction"].as_f64(), Some(0.5), "{summary}");
    // Each call is one posting: Post (ordinary or a hold), Capture or Void.
    assert_eq!(
        summary["requests"].as_i64(),
        Some(answered(&summary)),
        "{summary}"
    );
    // PostBatch calls of 10 carry the holds; their captures and releases are calls of their own.
    let before = hold_counts(&t).await;
    let summary = run_bench(
        &t,
        "--duration 2 --concurrency 4 --accounts 20 --batch 10 --holds 0.5 --prefix batch",
    )
    .await;
    assert_holds_closed(&t, before, &summary).await;
    let closes = summary["captures"].as_i64().unwrap() + summary["releases"].as_i64().unwrap();
    let calls = summary["post_batch_calls"].as_i64().unwrap();
    assert_eq!(
        summary["requests"].as_i64(),
        Some(calls + closes),
        "{summary}"
    );
    assert_eq!(answered(&summary) - closes, 10 * calls, "{summary}");
    // Open loop, every posting a hold.
    let before = hold_counts(&t).await;
    let summary = run_bench(
        &t,
        "--duration 1 --rate 100 --accounts 10 --holds 1 --prefix open",
    )
    .await;
    assert_holds_closed(&t, before, &summary).await;
    assert_eq!(summary["holds"].as_i64(), Some(100), "{summary}");
    let (ok, report) = crate::faults::ledger_check(&t.database_url).await;
    assert!(ok, "{report}");
}

#[tokio::test]
async fn bench_writer_times_the_writers_steps_alone_and_writes_a_journal_that_checks() {
    let url = pg::shared_cluster().fresh_database().await;
    for hot in [false, true] {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledger"))
            .args(["bench-writer", "--database-url", &url])
            .args(["--batch", "10", "--duration", "1", "--accounts", "20"])
            .args(hot.then_some("--hot-account"))
            .env("LEDGER_LOG", "warn")
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let stdout = String::from_utf8(out.stdout).unwrap();
        let summary: serde_json::Value =
            serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
        assert!(summary["postings"].as_i64().unwrap() >= 10, "{summary}");
        assert_eq!(
            summary["postings"].as_i64().unwrap(),
            10 * summary["batches"].as_i64().unwrap(),
            "{summary}"
        );
        for step in [
            "load_ms_per_batch",
            "decide_ms_per_batch",
            "write_ms_per_batch",
        ] {
            assert!(summary[step].as_f64().unwrap() > 0.0, "{step}: {summary}");
        }
    }
    let (ok, report) = crate::faults::ledger_check(&url).await;
    assert!(ok, "{report}");
}

#[tokio::test]
async fn bench_refuses_fewer_than_two_legs() {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledger"))
        .args(["bench", "--server", "127.0.0.1:9", "--legs", "1"])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--legs"));
}

#[tokio::test]
async fn bench_refuses_a_holds_fraction_outside_0_to_1() {
    for fraction in ["1.5", "-0.1", "NaN"] {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledger"))
            .args(["bench", "--server", "127.0.0.1:9"])
            .arg(format!("--holds={fraction}"))
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{fraction}");
        assert!(
            stderr.contains("--holds must be a fraction within 0..=1"),
            "{fraction}: {stderr}"
        );
    }
}
