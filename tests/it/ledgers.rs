//! Ledgers: isolated books in one deployment. Each has its own accounts, keys, gapless
//! sequence, clock, as-of fence and write lock; nothing of one is seen from another.

use crate::support::*;
use ledger_server::grpc::pb;
use ledger_server::grpc::pb::ledger_client::LedgerClient;
use tonic::transport::Channel;
use tonic::Code;

type Client = LedgerClient<Channel>;

fn post_in(ledger: &str, key: &str, amount: &str) -> pb::PostRequest {
    pb::PostRequest {
        ledger: ledger.into(),
        ..transfer(key, "equity:world", "acct:0", amount)
    }
}

async fn balance_in(
    c: &mut Client,
    ledger: &str,
    account: &str,
    as_of: Option<pb::AsOf>,
) -> pb::Balance {
    c.get_balance(pb::GetBalanceRequest {
        ledger: ledger.into(),
        account: account.into(),
        as_of,
    })
    .await
    .expect("balance")
    .into_inner()
}

#[tokio::test]
async fn a_ledger_is_created_once_answered_the_same_again_and_refused_with_other_attributes() {
    let mut t = TestLedger::start().await;
    let first = create_ledger(&mut t.client, "acme").await;
    assert!(first.created);
    let again = create_ledger(&mut t.client, "acme").await;
    assert!(!again.created);
    assert_eq!(
        again.ledger, first.ledger,
        "the same ledger, the same created_at"
    );
    let other = t
        .client
        .create_ledger(pb::CreateLedgerRequest {
            code: "acme".into(),
            description: "another description".into(),
            metadata: Default::default(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_error(&other, Code::FailedPrecondition, "LEDGER_CONFLICT");
    let got = t
        .client
        .get_ledger(pb::GetLedgerRequest {
            code: "acme".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(Some(got), first.ledger);
    let default = t
        .client
        .get_ledger(pb::GetLedgerRequest {
            code: "default".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        default.code, "default",
        "every deployment starts with the ledger default"
    );
    for bad in ["", "Acme", "a.b", &"x".repeat(65)] {
        let e = t
            .client
            .create_ledger(pb::CreateLedgerRequest {
                code: bad.into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_error(&e, Code::InvalidArgument, "INVALID_FIELD");
    }
    let missing = t
        .client
        .get_ledger(pb::GetLedgerRequest {
            code: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_error(&missing, Code::NotFound, "LEDGER_NOT_FOUND");
    assert_eq!(
        t.count("ledgers").await,
        2,
        "a repeated or refused create adds no ledger"
    );
}

/// The UNIQUE on `ledgers.code` decides the race: the losers' inserts conflict (measured: 7 of
/// 50 got that far, each spending an id of the identity) and they answer the winner's ledger.
#[tokio::test]
async fn fifty_callers_creating_one_ledger_at_once_make_one_ledger_and_all_get_it() {
    let t = TestLedger::start().await;
    let mut racers = Vec::new();
    for _ in 0..50 {
        let mut c = t.new_client().await;
        racers.push(tokio::spawn(
            async move { create_ledger(&mut c, "raced").await },
        ));
    }
    let mut answers = Vec::new();
    for r in racers {
        answers.push(r.await.expect("a racer"));
    }
    let created = answers.iter().filter(|a| a.created).count();
    assert_eq!(created, 1, "one creates it, the others find it");
    let first = answers[0].ledger.clone().expect("a ledger");
    assert!(
        answers.iter().all(|a| a.ledger.as_ref() == Some(&first)),
        "every caller gets the same ledger"
    );
    let db = t.db().await;
    let rows: i64 = db
        .query_one(
            "SELECT (SELECT count(*) FROM ledgers WHERE code = 'raced')
                  + (SELECT count(*) FROM ledger_state s JOIN ledgers l USING (ledger_id) WHERE l.code = 'raced')
                  + (SELECT count(*) FROM outbox_progress p JOIN ledgers l USING (ledger_id) WHERE l.code = 'raced')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 3, "one ledger row, one state row, one progress row");
}

#[tokio::test]
async fn ledgers_are_listed_in_code_order_a_page_at_a_time() {
    let mut t = TestLedger::start().await;
    for code in ["zeta", "alpha", "mid"] {
        create_ledger(&mut t.client, code).await;
    }
    let seen = ledger_codes(&mut t.client, 2).await;
    assert_eq!(seen, ["alpha", "default", "mid", "zeta"]);
}

#[tokio::test]
async fn the_same_account_code_and_key_in_two_ledgers_make_two_accounts_and_two_postings_with_balances_apart(
) {
    let mut t = TestLedger::start().await;
    books(&mut t.client, "default").await;
    books(&mut t.client, "acme").await;
    let a = t
        .client
        .post(post_in("", "pay-1", "10.00"))
        .await
        .unwrap()
        .into_inner();
    let b = t
        .client
        .post(post_in("acme", "pay-1", "3.00"))
        .await
        .unwrap()
        .into_inner();
    assert!(
        !a.replayed && !b.replayed,
        "the same key in two ledgers is two decisions"
    );
    let (a, b) = (a.posting.unwrap(), b.posting.unwrap());
    assert_ne!(a.posting_id, b.posting_id);
    assert_eq!((a.ledger.as_str(), a.sequence), ("default", 1));
    assert_eq!(
        (b.ledger.as_str(), b.sequence),
        ("acme", 1),
        "each ledger counts from 1"
    );
    assert_eq!(
        balance_in(&mut t.client, "", "acct:0", None).await.balance,
        "10.00"
    );
    assert_eq!(
        balance_in(&mut t.client, "acme", "acct:0", None)
            .await
            .balance,
        "3.00"
    );
    let replay = t
        .client
        .post(post_in("acme", "pay-1", "3.00"))
        .await
        .unwrap()
        .into_inner();
    assert!(replay.replayed);
    assert_eq!(replay.posting.unwrap().posting_id, b.posting_id);
    let account = t
        .client
        .get_account(pb::GetAccountRequest {
            as_of: None,
            ledger: "acme".into(),
            code: "acct:0".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(account.ledger, "acme");
    assert_eq!(t.count("accounts").await, 4);
    assert_eq!(t.count("postings").await, 2);
}

#[tokio::test]
async fn a_posting_naming_an_account_of_another_ledger_is_refused_and_writes_nothing() {
    let mut t = TestLedger::start().await;
    books(&mut t.client, "default").await;
    create_ledger(&mut t.client, "acme").await;
    account_in(
        &mut t.client,
        "acme",
        "acme:only",
        pb::NormalBalance::Debit,
        true,
    )
    .await;
    let cross = pb::PostRequest {
        ledger: "acme".into(),
        ..transfer("x-1", "equity:world", "acme:only", "1.00")
    };
    let e = t.client.post(cross).await.unwrap_err();
    assert_error(&e, Code::NotFound, "ACCOUNT_NOT_FOUND");
    let e = t
        .client
        .post(transfer("x-2", "equity:world", "acme:only", "1.00"))
        .await
        .unwrap_err();
    assert_error(&e, Code::NotFound, "ACCOUNT_NOT_FOUND");
    assert_eq!(t.count("postings").await, 0);
    assert_eq!(
        t.count("idempotency_keys").await,
        0,
        "a refusal before the writer binds no key"
    );
}

#[tokio::test]
async fn a_posting_of_another_ledger_cannot_be_read_voided_or_captured_from_this_one() {
    let mut t = TestLedger::start().await;
    books(&mut t.client, "default").await;
    books(&mut t.client, "acme").await;
    let p = t
        .client
        .post(post_in("", "p-1", "5.00"))
        .await
        .unwrap()
        .into_inner()
        .posting
        .unwrap();
    let by_id = pb::GetPostingRequest {
        ledger: "acme".into(),
        by: Some(pb::get_posting_request::By::PostingId(p.posting_id.clone())),
        as_of: None,
    };
    let e = t.client.get_posting(by_id).await.unwrap_err();
    assert_error(&e, Code::NotFound, "POSTING_NOT_FOUND");
    let by_key = pb::GetPostingRequest {
        ledger: "acme".into(),
        by: Some(pb::get_posting_request::By::IdempotencyKey("p-1".into())),
        as_of: None,
    };
    let e = t.client.get_posting(by_key).await.unwrap_err();
    assert_error(&e, Code::NotFound, "POSTING_NOT_FOUND");
    let void = pb::VoidRequest {
        ledger: "acme".into(),
        idempotency_key: "v-1".into(),
        posting_id: p.posting_id.clone(),
        reason: "wrong books".into(),
        effective_at: None,
    };
    let e = t.client.void(void).await.unwrap_err();
    assert_error(&e, Code::NotFound, "POSTING_NOT_FOUND");
    let listed = t
        .client
        .list_postings(pb::ListPostingsRequest {
            ledger: "acme".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(listed.postings.is_empty(), "{listed:?}");
    assert_eq!(t.count("postings").await, 1);
}

#[tokio::test]
async fn sequences_start_at_one_and_stay_gapless_per_ledger_under_concurrent_writers_of_four_ledgers(
) {
    let mut t = TestLedger::start().await;
    let ledgers = ["l-1", "l-2", "l-3", "l-4"];
    for l in ledgers {
        books(&mut t.client, l).await;
    }
    let mut tasks = Vec::new();
    for (w, l) in ledgers.iter().cycle().take(16).enumerate() {
        let mut c = t.new_client().await;
        let l = l.to_string();
        tasks.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            for i in 0..15 {
                let p = c
                    .post(post_in(&l, &format!("w{w}-{i}"), "1.00"))
                    .await
                    .unwrap()
                    .into_inner();
                seqs.push(p.posting.unwrap().sequence);
            }
            (l, seqs)
        }));
    }
    let mut per: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    for task in tasks {
        let (l, seqs) = task.await.unwrap();
        per.entry(l).or_default().extend(seqs);
    }
    for (l, mut seqs) in per {
        seqs.sort_unstable();
        assert_eq!(
            seqs,
            (1..=60).collect::<Vec<u64>>(),
            "ledger {l}: 1..=60, no gap, no repeat"
        );
        let listed = t
            .client
            .list_postings(pb::ListPostingsRequest {
                ledger: l.clone(),
                page_size: 1000,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let listed: Vec<u64> = listed.postings.iter().map(|p| p.sequence).collect();
        assert_eq!(
            listed,
            (1..=60).collect::<Vec<u64>>(),
            "ledger {l} lists its own postings in order"
        );
    }
    let db = t.db().await;
    let gaps: i64 = db
        .query_one(
            "SELECT count(*) FROM (SELECT ledger_id, sequence - lag(sequence) OVER (PARTITION BY ledger_id ORDER BY sequence) AS step
                                  FROM postings) s WHERE step <> 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(gaps, 0);
}

#[tokio::test]
async fn as_of_answers_in_one_ledger_stay_the_same_while_another_ledger_is_written() {
    let mut t = TestLedger::start().await;
    books(&mut t.client, "quiet").await;
    books(&mut t.client, "busy").await;
    t.client
        .post(post_in("quiet", "q-1", "7.00"))
        .await
        .unwrap();
    let cut = balance_in(&mut t.client, "quiet", "acct:0", None).await;
    let as_of = cut.as_of;
    assert_eq!(cut.as_of_sequence, 1);
    for i in 0..20 {
        t.client
            .post(post_in("busy", &format!("b-{i}"), "1.00"))
            .await
            .unwrap();
    }
    let again = balance_in(&mut t.client, "quiet", "acct:0", as_of).await;
    assert_eq!((again.balance.as_str(), again.as_of_sequence), ("7.00", 1));
    let now = balance_in(&mut t.client, "quiet", "acct:0", None).await;
    assert_eq!(
        now.as_of_sequence, 1,
        "another ledger's postings do not move this one's sequence"
    );
    let busy = balance_in(&mut t.client, "busy", "acct:0", None).await;
    assert_eq!((busy.balance.as_str(), busy.as_of_sequence), ("20.00", 20));
}

#[tokio::test]
async fn a_batch_of_one_ledger_commits_while_another_ledgers_write_lock_is_held() {
    let mut t = TestLedger::start().await;
    books(&mut t.client, "held").await;
    books(&mut t.client, "free").await;
    let db = t.db().await;
    let held: i32 = db
        .query_one("SELECT ledger_id FROM ledgers WHERE code = 'held'", &[])
        .await
        .unwrap()
        .get(0);
    db.execute(
        "SELECT pg_advisory_lock($1, $2)",
        &[&ledger_server::storage::LEDGER_LOCK_CLASS, &held],
    )
    .await
    .unwrap();
    let mut blocked_client = t.new_client().await;
    let blocked =
        tokio::spawn(async move { blocked_client.post(post_in("held", "h-1", "1.00")).await });
    let batch = pb::PostBatchRequest {
        ledger: "free".into(),
        requests: (0..10)
            .map(|i| transfer(&format!("f-{i}"), "equity:world", "acct:0", "1.00"))
            .collect(),
    };
    let answer = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        t.client.post_batch(batch),
    )
    .await
    .expect("the free ledger's batch does not wait for the held ledger's lock")
    .unwrap()
    .into_inner();
    assert_eq!(answer.results.len(), 10);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(
        !blocked.is_finished(),
        "the held ledger's post waits for its lock"
    );
    db.execute(
        "SELECT pg_advisory_unlock($1, $2)",
        &[&ledger_server::storage::LEDGER_LOCK_CLASS, &held],
    )
    .await
    .unwrap();
    let p = blocked
        .await
        .unwrap()
        .unwrap()
        .into_inner()
        .posting
        .unwrap();
    assert_eq!((p.ledger.as_str(), p.sequence), ("held", 1));
}

#[tokio::test]
async fn a_batch_request_naming_another_ledger_is_refused_alone() {
    let mut t = TestLedger::start().await;
    books(&mut t.client, "acme").await;
    let mut other = post_in("globex", "g-1", "1.00");
    other.ledger = "globex".into();
    let batch = pb::PostBatchRequest {
        ledger: "acme".into(),
        requests: vec![
            post_in("acme", "a-1", "1.00"),
            other,
            post_in("", "a-2", "1.00"),
        ],
    };
    let results = t
        .client
        .post_batch(batch)
        .await
        .unwrap()
        .into_inner()
        .results;
    use pb::post_batch_result::Outcome;
    let kinds: Vec<&str> = results
        .iter()
        .map(|r| match r.outcome.as_ref().unwrap() {
            Outcome::Response(_) => "ok",
            Outcome::Error(s) => {
                if s.code == Code::InvalidArgument as i32 {
                    "invalid"
                } else {
                    "other"
                }
            }
        })
        .collect();
    assert_eq!(kinds, ["ok", "invalid", "ok"]);
}

#[tokio::test]
async fn a_page_token_of_one_ledger_is_refused_on_another() {
    let mut t = TestLedger::start().await;
    books(&mut t.client, "default").await;
    books(&mut t.client, "acme").await;
    for i in 0..3 {
        t.client
            .post(post_in("", &format!("d-{i}"), "1.00"))
            .await
            .unwrap();
    }
    let page = t
        .client
        .list_postings(pb::ListPostingsRequest {
            page_size: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!page.next_page_token.is_empty());
    let e = t
        .client
        .list_postings(pb::ListPostingsRequest {
            ledger: "acme".into(),
            page_size: 1,
            page_token: page.next_page_token,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_error(&e, Code::InvalidArgument, "INVALID_PAGE_TOKEN");
}

#[tokio::test]
async fn a_request_naming_a_ledger_that_does_not_exist_is_ledger_not_found_and_writes_nothing() {
    let mut t = TestLedger::start().await;
    let e = t
        .client
        .post(post_in("nowhere", "k", "1.00"))
        .await
        .unwrap_err();
    assert_error(&e, Code::NotFound, "LEDGER_NOT_FOUND");
    let e = t
        .client
        .create_account(pb::CreateAccountRequest {
            ledger: "Bad Code".into(),
            code: "a".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_error(&e, Code::InvalidArgument, "INVALID_FIELD");
    assert_eq!(t.count("idempotency_keys").await, 0);
}

/// Full scans of the tables that hold a row per ledger, so far (statistics flushed).
async fn ledger_table_scans(db: &tokio_postgres::Client) -> i64 {
    seq_scans(db, &["ledgers", "ledger_state", "outbox_progress"]).await
}

#[tokio::test]
async fn ten_thousand_ledgers_in_one_database_leave_a_write_to_one_of_them_on_its_own_rows() {
    let mut t = TestLedger::start().await;
    let db = t.db().await;
    ten_thousand_ledgers_by_sql(&db).await;
    books(&mut t.client, "many-5000").await;
    let before = ledger_table_scans(&db).await;
    for i in 0..50 {
        let p = t
            .client
            .post(post_in("many-5000", &format!("k-{i}"), "1.00"))
            .await
            .unwrap();
        assert_eq!(p.into_inner().posting.unwrap().sequence, i + 1);
    }
    let after = ledger_table_scans(&db).await;
    assert_eq!(
        after - before,
        0,
        "a write reads its ledger's rows by key, never all ledgers'"
    );
    let all = ledger_codes(&mut t.client, 1000).await;
    assert_eq!(all.len(), 10_001, "every ledger listed once, default too");
}

#[tokio::test]
async fn a_hold_expiring_in_one_ledger_is_released_in_that_ledger_with_its_next_sequence() {
    let mut t = TestLedger::start().await;
    books(&mut t.client, "default").await;
    books(&mut t.client, "acme").await;
    t.client.post(post_in("", "d-1", "1.00")).await.unwrap();
    let until = time::OffsetDateTime::now_utc() + time::Duration::milliseconds(700);
    let hold = pb::PostRequest {
        hold: true,
        hold_expires_at: Some(ledger_server::grpc::convert::time_to_pb(until)),
        ..post_in("acme", "h-1", "2.00")
    };
    let h = t
        .client
        .post(hold)
        .await
        .unwrap()
        .into_inner()
        .posting
        .unwrap();
    assert_eq!((h.ledger.as_str(), h.sequence), ("acme", 1));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let release = loop {
        let by = Some(pb::get_posting_request::By::PostingId(h.posting_id.clone()));
        let now = t
            .client
            .get_posting(pb::GetPostingRequest {
                ledger: "acme".into(),
                by,
                as_of: None,
            })
            .await
            .unwrap()
            .into_inner();
        if !now.released_by_posting_id.is_empty() {
            break now.released_by_posting_id;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the hold was not released"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let by = Some(pb::get_posting_request::By::PostingId(release));
    let r = t
        .client
        .get_posting(pb::GetPostingRequest {
            ledger: "acme".into(),
            by,
            as_of: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (r.ledger.as_str(), r.sequence, r.kind()),
        ("acme", 2, pb::PostingKind::Expiry)
    );
    let d = balance_in(&mut t.client, "", "acct:0", None).await;
    assert_eq!(
        d.as_of_sequence, 1,
        "the default ledger's sequence did not move"
    );
}
