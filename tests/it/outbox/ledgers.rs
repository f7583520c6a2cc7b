//! Events of several ledgers: each ledger's on its own subject `ledger.postings.<code>`, in its
//! own sequence order, exactly once; the ledgers served in turn, so one does not hold up
//! another; progress, backlog and retention per ledger; and a stream of an earlier version
//! (subjects `ledger.>` or `ledger.postings`) brought to `ledger.postings.>`.
//!
//! A second ledger is made with SQL as `CreateLedger` makes one (the ledger, its state row,
//! its outbox progress row), so the publisher's side is tested on its own.

use super::*;
use ledger_core::ledger::{in_ledger, stored, DEFAULT_LEDGER_ID};
use ledger_server::outbox::{
    subject, ALL_STREAM_SUBJECTS, IDLE_POLL_MAX, PUBLISH_BATCH, STREAM, STREAM_SUBJECTS,
};

const EU: &str = "eu-books";

/// Creates ledger `code` with SQL, as `CreateLedger` does: the ledger, its state and its
/// outbox progress (nothing published yet). Its id.
async fn ledger_by_sql(t: &TestLedger, code: &str) -> i32 {
    let db = t.db().await;
    let id: i32 = db
        .query_one(
            "INSERT INTO ledgers (code, description, metadata) VALUES ($1, '', '{}')
             RETURNING ledger_id",
            &[&code],
        )
        .await
        .unwrap()
        .get(0);
    let start = stored(id, 0);
    db.execute(
        "INSERT INTO ledger_state (ledger_id, last_sequence, last_recorded_at)
         VALUES ($1, $2, 'epoch')",
        &[&id, &start],
    )
    .await
    .unwrap();
    db.execute(
        "INSERT INTO outbox_progress (ledger_id, published_sequence, updated_at)
         VALUES ($1, $2, now())",
        &[&id, &start],
    )
    .await
    .unwrap();
    id
}

/// `equity:world` and `acct:0` in ledger `ledger`.
async fn accounts_in(t: &mut TestLedger, ledger: &str) {
    for (code, normal, allow_negative) in [
        ("equity:world", pb::NormalBalance::Credit, true),
        ("acct:0", pb::NormalBalance::Debit, false),
    ] {
        t.client
            .create_account(pb::CreateAccountRequest {
                ledger: ledger.into(),
                code: code.into(),
                currency: "EUR".into(),
                scale: 2,
                normal_balance: normal as i32,
                allow_negative,
                metadata: Default::default(),
            })
            .await
            .unwrap();
    }
}

/// A transfer from the world to `acct:0` in ledger `ledger`.
fn transfer_in(ledger: &str, key: &str) -> pb::PostRequest {
    pb::PostRequest {
        ledger: ledger.into(),
        ..transfer(key, "equity:world", "acct:0", "1.00")
    }
}

/// Posts a transfer in ledger `ledger`.
async fn post_to(t: &mut TestLedger, ledger: &str, key: &str) {
    t.post(transfer_in(ledger, key)).await.unwrap();
}

/// Posts `n` transfers in each of `ledgers`, taking turns.
async fn post_in_turn(t: &mut TestLedger, ledgers: &[&str], prefix: &str, n: usize) {
    for i in 0..n {
        for ledger in ledgers {
            post_to(t, ledger, &format!("{prefix}-{i}")).await;
        }
    }
}

/// The postings of ledger `ledger`, in sequence order: (sequence within it, posting id).
async fn journal_of(t: &TestLedger, ledger: i32) -> Vec<(u64, String)> {
    t.db()
        .await
        .query(
            "SELECT sequence, posting_id::text FROM postings WHERE ledger_id = $1 ORDER BY sequence",
            &[&ledger],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (in_ledger(r.get(0)) as u64, r.get(1)))
        .collect()
}

/// Asserts the stream holds, on ledger `code`'s subject, exactly one event per posting of that
/// ledger, in its sequence order, each naming the ledger; returns them.
async fn assert_ledger_events(
    events: &[StreamEvent],
    t: &TestLedger,
    ledger: i32,
    code: &str,
) -> Vec<StreamEvent> {
    let mine: Vec<StreamEvent> = events
        .iter()
        .filter(|e| e.subject == subject(code))
        .cloned()
        .collect();
    let got: Vec<(u64, String)> = mine
        .iter()
        .map(|e| (e.posting.sequence, e.msg_id.clone()))
        .collect();
    assert_eq!(
        got,
        journal_of(t, ledger).await,
        "ledger {code}: one event per posting, in its sequence order"
    );
    for e in &mine {
        assert_eq!((e.ledger.as_str(), e.posting.ledger.as_str()), (code, code));
        assert_eq!(e.msg_id, e.posting.posting_id);
    }
    mine
}

/// Waits until ledger `ledger` has no event waiting.
async fn wait_ledger_delivered(database_url: &str, ledger: i32) {
    let deadline = Instant::now() + DELIVERY;
    while ledger_backlog(database_url, ledger).await.pending > 0 {
        assert!(
            Instant::now() < deadline,
            "ledger {ledger} not delivered in {DELIVERY:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn events_of_two_ledgers_reach_their_own_subjects_each_in_order_once_through_a_relay_crash_and_a_broker_restart(
) {
    let mut nats = NatsServer::start().await;
    let mut t = TestLedger::start().await;
    let eu = ledger_by_sql(&t, EU).await;
    accounts_in(&mut t, "default").await;
    accounts_in(&mut t, EU).await;
    post_in_turn(&mut t, &["default", EU], "a", 10).await;

    let mut crashing = Relay::start(
        &t.database_url,
        &nats.url(),
        &[],
        Some("outbox-after-publish-before-progress"),
    );
    let status = crashing.wait_exit(DELIVERY).await;
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{}", crashing.log());
    let relay = Relay::start(&t.database_url, &nats.url(), &[], None);
    wait_delivered(&t.database_url, DELIVERY).await;
    assert!(
        relay.log().contains("duplicates=10"),
        "the batch acknowledged before the crash went again and the broker dropped it:\n{}",
        relay.log()
    );

    nats.kill();
    post_in_turn(&mut t, &["default", EU], "b", 10).await;
    let b = backlog(&t.database_url).await;
    assert_eq!((b.pending, b.ledgers_behind), (20, 2), "both ledgers wait");
    nats.start_again().await;
    wait_delivered(&t.database_url, DELIVERY).await;

    let events = nats.read_stream().await;
    assert_eq!(events.len(), 40, "every event once");
    let default = assert_ledger_events(&events, &t, DEFAULT_LEDGER_ID, "default").await;
    let books = assert_ledger_events(&events, &t, eu, EU).await;
    assert_eq!((default.len(), books.len()), (20, 20));
    assert_eq!(
        books.iter().map(|e| e.posting.sequence).collect::<Vec<_>>(),
        (1..=20).collect::<Vec<u64>>(),
        "a ledger's events carry its own sequences"
    );
    assert_eq!(
        ledger_backlog(&t.database_url, eu).await.published_sequence,
        20
    );
}

#[tokio::test]
async fn a_busy_ledger_delays_another_ledgers_event_by_one_batch_at_most() {
    let nats = NatsServer::start().await;
    let mut t = TestLedger::start().await;
    let eu = ledger_by_sql(&t, EU).await;
    accounts_in(&mut t, "default").await;
    accounts_in(&mut t, EU).await;
    let busy = 3 * PUBLISH_BATCH;
    let mut posters = Vec::new();
    for w in 0..8 {
        let mut client = t.new_client().await;
        posters.push(tokio::spawn(async move {
            for i in (w..busy).step_by(8) {
                client
                    .post(transfer_in("default", &format!("busy-{i}")))
                    .await
                    .unwrap();
            }
        }));
    }
    for p in posters {
        p.await.unwrap();
    }
    post_to(&mut t, EU, "lone").await;
    assert_eq!(backlog(&t.database_url).await.pending, busy as i64 + 1);

    let _relay = Relay::start(&t.database_url, &nats.url(), &[], None);
    wait_delivered(&t.database_url, Duration::from_secs(60)).await;
    let events = nats.read_stream().await;
    assert_ledger_events(&events, &t, DEFAULT_LEDGER_ID, "default").await;
    let lone = assert_ledger_events(&events, &t, eu, EU).await;
    assert_eq!(lone.len(), 1);
    // Posting events before it (the busy ledger's digests, a kind of their own, are left out
    // by read_stream).
    let behind = events
        .iter()
        .position(|e| e.stream_sequence == lone[0].stream_sequence)
        .unwrap();
    assert!(
        behind <= PUBLISH_BATCH,
        "the lone event of {EU} waited behind {behind} posting events of the busy ledger (at most one batch, {PUBLISH_BATCH})"
    );
}

#[tokio::test]
async fn an_event_the_broker_refuses_halts_only_its_own_ledger_and_the_others_go_on() {
    let nats = NatsServer::start().await;
    let js = nats.jetstream().await;
    let config = async_nats::jetstream::stream::Config {
        name: STREAM.into(),
        subjects: vec![STREAM_SUBJECTS.into()],
        max_message_size: 1024,
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    };
    js.create_stream(config.clone()).await.unwrap();
    let mut t = TestLedger::start().await;
    let eu = ledger_by_sql(&t, EU).await;
    accounts_in(&mut t, "default").await;
    accounts_in(&mut t, EU).await;
    t.post(transfer_in("default", "first")).await.unwrap();
    let mut big = transfer_in("default", "big");
    big.memo = "x".repeat(1000);
    let big = t.post(big).await.unwrap().posting.unwrap();
    t.post(transfer_in("default", "third")).await.unwrap();
    post_in_turn(&mut t, &[EU], "before", 3).await;

    let relay = Relay::start(&t.database_url, &nats.url(), &[], None);
    relay.wait_for_log("HALTED", DELIVERY).await;
    assert!(
        relay.log().contains(&big.posting_id),
        "names the refused event"
    );
    wait_ledger_delivered(&t.database_url, eu).await;
    post_in_turn(&mut t, &[EU], "while-halted", 3).await;
    wait_ledger_delivered(&t.database_url, eu).await;
    let halted = ledger_backlog(&t.database_url, DEFAULT_LEDGER_ID).await;
    assert_eq!(
        (halted.published_sequence, halted.pending),
        (1, 2),
        "the halted ledger waits at its refused event"
    );

    js.update_stream(async_nats::jetstream::stream::Config {
        max_message_size: -1,
        ..config
    })
    .await
    .unwrap();
    wait_delivered(&t.database_url, DELIVERY).await;
    let events = nats.read_stream().await;
    let default = assert_ledger_events(&events, &t, DEFAULT_LEDGER_ID, "default").await;
    assert_eq!(default[1].msg_id, big.posting_id);
    assert_eq!(assert_ledger_events(&events, &t, eu, EU).await.len(), 6);
}

/// Three postings of `default` and four synthetic outbox rows of ledger `eu-books` (made an
/// hour ago; no publisher reads them), `default` delivered up to 2 and `eu-books` up to 3.
async fn two_ledgers_partly_delivered() -> (TestLedger, i32, ledger_server::storage::Conn) {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    for i in 0..3 {
        t.post(transfer(&format!("d{i}"), "equity:world", "acct:0", "1.00"))
            .await
            .unwrap();
    }
    let eu = ledger_by_sql(&t, EU).await;
    let rows: Vec<i64> = (1..=4).map(|n| stored(eu, n)).collect();
    t.db()
        .await
        .execute(
            "INSERT INTO outbox (sequence, posting_id, created_at)
             SELECT s, gen_random_uuid(), now() - interval '1 hour' FROM unnest($1::bigint[]) s",
            &[&rows],
        )
        .await
        .unwrap();
    let pool = ledger_server::storage::pool(&t.database_url, 1).unwrap();
    let db = pool.get().await.unwrap();
    use ledger_server::storage::outbox::record_progress;
    assert!(record_progress(&db, stored(DEFAULT_LEDGER_ID, 2))
        .await
        .unwrap());
    assert!(record_progress(&db, stored(eu, 3)).await.unwrap());
    (t, eu, db)
}

#[tokio::test]
async fn progress_and_backlog_are_each_ledgers_own_and_the_totals_span_every_ledger() {
    let (t, eu, db) = two_ledgers_partly_delivered().await;
    use ledger_server::storage::outbox::{ledgers_pending, record_progress, LedgerProgress};
    let default = ledger_backlog(&t.database_url, DEFAULT_LEDGER_ID).await;
    assert_eq!(
        (
            default.code.as_str(),
            default.published_sequence,
            default.pending
        ),
        ("default", 2, 1),
        "{EU}'s progress moved only its own"
    );
    let books = ledger_backlog(&t.database_url, eu).await;
    assert_eq!(
        (books.code.as_str(), books.published_sequence, books.pending),
        (EU, 3, 1),
        "a ledger's progress is its own sequence"
    );
    assert!(books.oldest_age.unwrap() >= Duration::from_secs(3500));
    let total = backlog(&t.database_url).await;
    assert_eq!((total.pending, total.ledgers_behind), (2, 2));
    assert_eq!(
        total.oldest_age.map(|a| a.as_secs() / 60),
        books.oldest_age.map(|a| a.as_secs() / 60),
        "the total's age is the ledger furthest behind"
    );
    assert_eq!(
        ledgers_pending(&db).await.unwrap(),
        vec![
            LedgerProgress {
                ledger: DEFAULT_LEDGER_ID,
                published_sequence: 2
            },
            LedgerProgress {
                ledger: eu,
                published_sequence: stored(eu, 3)
            }
        ]
    );
    assert!(
        !record_progress(&db, stored(eu, 2)).await.unwrap(),
        "a ledger's progress does not move back"
    );
}

#[tokio::test]
async fn retention_prunes_each_ledger_by_its_own_progress_and_keeps_what_it_has_not_delivered() {
    let (t, eu, db) = two_ledgers_partly_delivered().await;
    use ledger_server::storage::outbox::prune_delivered;
    let left = async || -> Vec<i64> {
        t.db()
            .await
            .query("SELECT sequence FROM outbox ORDER BY sequence", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    let half_hour = Duration::from_secs(1800);
    assert_eq!(
        prune_delivered(&db, half_hour, 10).await.unwrap(),
        3,
        "{EU}'s delivered rows past the retention"
    );
    assert_eq!(left().await, vec![1, 2, 3, stored(eu, 4)]);
    assert_eq!(prune_delivered(&db, Duration::ZERO, 10).await.unwrap(), 2);
    assert_eq!(
        left().await,
        vec![3, stored(eu, 4)],
        "each ledger keeps what it has not delivered"
    );
    let refused = db
        .execute("DELETE FROM outbox WHERE sequence = $1", &[&stored(eu, 4)])
        .await
        .unwrap_err();
    let message = refused.as_db_error().unwrap().message();
    assert!(message.contains("is not delivered yet"), "{message}");
}

#[tokio::test]
async fn a_stream_of_an_earlier_version_gets_the_subjects_of_every_ledger_and_keeps_its_events() {
    for old in [vec!["ledger.>"], vec!["ledger.postings"]] {
        let nats = NatsServer::start().await;
        let js = nats.jetstream().await;
        js.create_stream(async_nats::jetstream::stream::Config {
            name: STREAM.into(),
            subjects: old.iter().map(|s| s.to_string()).collect(),
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        })
        .await
        .unwrap();
        let old_event = pb::PostingEvent {
            ledger: String::new(),
            posting: Some(pb::Posting {
                posting_id: "published-by-an-earlier-version".into(),
                sequence: 1,
                ..Default::default()
            }),
        };
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(
            async_nats::header::NATS_MESSAGE_ID,
            "published-by-an-earlier-version",
        );
        js.publish_with_headers(
            "ledger.postings",
            headers,
            prost::Message::encode_to_vec(&old_event).into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();

        let mut t = TestLedger::start().await;
        t.standard_accounts(1).await;
        for i in 0..2 {
            t.post(transfer(&format!("k{i}"), "equity:world", "acct:0", "1.00"))
                .await
                .unwrap();
        }
        let relay = Relay::start(&t.database_url, &nats.url(), &[], None);
        wait_delivered(&t.database_url, DELIVERY).await;
        let mut stream = js.get_stream(STREAM).await.unwrap();
        let subjects = stream.info().await.unwrap().config.subjects.clone();
        assert_eq!(subjects, ALL_STREAM_SUBJECTS, "was {old:?}");
        assert!(
            relay.log().contains("the stream's subjects changed"),
            "says so:\n{}",
            relay.log()
        );
        let events = nats.read_stream().await;
        assert_eq!(
            (events[0].subject.as_str(), events[0].msg_id.as_str()),
            ("ledger.postings", "published-by-an-earlier-version"),
            "the events of before stay"
        );
        assert_eq!(
            assert_ledger_events(&events, &t, DEFAULT_LEDGER_ID, "default")
                .await
                .len(),
            2
        );
        assert_eq!(events.len(), 3);
    }
}

/// Sequential scans of `outbox_progress`: one per look of the publisher for ledgers with
/// events waiting.
async fn looks_for_events(db: &tokio_postgres::Client) -> i64 {
    seq_scans(db, &["outbox_progress"]).await
}

#[tokio::test]
async fn an_idle_relay_beside_ten_thousand_ledgers_looks_for_events_seldom_and_still_delivers_the_next_one(
) {
    let nats = NatsServer::start().await;
    let mut t = TestLedger::start().await;
    let db = t.db().await;
    ten_thousand_ledgers_by_sql(&db).await;
    accounts_in(&mut t, "default").await;
    let relay = Relay::start(&t.database_url, &nats.url(), &[], None);
    relay
        .wait_for_log("outbox publisher active", DELIVERY)
        .await;
    let before = looks_for_events(&db).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let looks = looks_for_events(&db).await - before;
    // Each look probes 10,001 ledgers; every POLL_INTERVAL (50 ms) that was about 90 looks in
    // these 5.5 s. Paused IDLE_POLL_COST_RATIO times a look's time, they are a few.
    assert!(
        looks <= 25,
        "{looks} looks in 5.5 s while nothing was written"
    );
    post_to(&mut t, "default", "after-quiet").await;
    let posted = Instant::now();
    wait_ledger_delivered(&t.database_url, DEFAULT_LEDGER_ID).await;
    assert!(
        posted.elapsed() < IDLE_POLL_MAX + Duration::from_secs(2),
        "the event after the quiet spell waited {:?}",
        posted.elapsed()
    );
    let events = nats.read_stream().await;
    assert_eq!(events.len(), 1, "{}", relay.log());
}
