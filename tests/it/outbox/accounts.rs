//! Account events: every version `UpdateAccount` records reaches the stream once, on
//! `ledger.accounts.<ledger code>` with `Nats-Msg-Id` `account:<ledger>:<code>:<version>` and
//! an `AccountEvent` payload, in the order the ledger recorded the versions; a replay or a
//! refusal publishes nothing; relay crashes before the publish or before the progress leave
//! each event once; a refused event halts only its ledger's account events; retention prunes
//! only delivered rows; a stream of the version before gets their subjects and keeps its
//! events.

use super::*;
use async_nats::jetstream::consumer;
use futures_util::StreamExt;
use ledger_server::outbox::{account_msg_id, account_subject, subject, ALL_STREAM_SUBJECTS};
use ledger_server::storage::outbox::{prune_delivered_accounts, record_account_progress};

const EU: &str = "eu-books";

/// One message of the stream as stored: the payload left encoded (posting and account events
/// share the stream).
struct Raw {
    subject: String,
    msg_id: String,
    payload: Vec<u8>,
}

/// Every message of the stream `LEDGER`, in stream order.
async fn read_raw(nats: &NatsServer) -> Vec<Raw> {
    let js = nats.jetstream().await;
    let Ok(mut stream) = js.get_stream(ledger_server::outbox::STREAM).await else {
        return Vec::new();
    };
    let n = stream.info().await.unwrap().state.messages as usize;
    let mut out = Vec::with_capacity(n);
    if n == 0 {
        return out;
    }
    let consumer = stream
        .create_consumer(consumer::pull::Config {
            deliver_policy: consumer::DeliverPolicy::All,
            ack_policy: consumer::AckPolicy::None,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut seen = 0;
    while seen < n {
        let mut batch = consumer
            .fetch()
            .max_messages(n - seen)
            .expires(Duration::from_secs(2))
            .messages()
            .await
            .unwrap();
        let before = seen;
        while let Some(m) = batch.next().await {
            let m = m.unwrap();
            let msg_id = m
                .headers
                .as_ref()
                .and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID))
                .map(|v| v.as_str().to_owned())
                .expect("every event has a Nats-Msg-Id");
            seen += 1;
            // Digests (ledger.digests.*) share the stream; these tests count events.
            if !m
                .subject
                .starts_with(ledger_server::outbox::DIGEST_SUBJECT_PREFIX)
            {
                out.push(Raw {
                    subject: m.subject.to_string(),
                    msg_id,
                    payload: m.payload.to_vec(),
                });
            }
        }
        assert!(seen > before, "the stream has {n} messages");
    }
    out
}

/// The account events on ledger `code`'s subject: (Nats-Msg-Id, event).
fn account_events(raw: &[Raw], code: &str) -> Vec<(String, pb::AccountEvent)> {
    raw.iter()
        .filter(|m| m.subject == account_subject(code))
        .map(|m| {
            let ev = prost::Message::decode(m.payload.as_slice()).expect("an AccountEvent");
            (m.msg_id.clone(), ev)
        })
        .collect()
}

/// The Nats-Msg-Ids on ledger `code`'s posting subject.
fn posting_ids(raw: &[Raw], code: &str) -> Vec<String> {
    raw.iter()
        .filter(|m| m.subject == subject(code))
        .map(|m| m.msg_id.clone())
        .collect()
}

/// The versions `UpdateAccount` recorded in ledger `code`: (account, version), by account
/// and version.
async fn recorded(t: &TestLedger, code: &str) -> Vec<(String, u64)> {
    t.db()
        .await
        .query(
            "SELECT a.code, v.terms_version FROM account_terms v
             JOIN accounts a USING (account_id) JOIN ledgers l USING (ledger_id)
             WHERE l.code = $1 AND v.terms_version > 1 ORDER BY a.code, v.terms_version",
            &[&code],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get::<_, i64>(1) as u64))
        .collect()
}

/// The postings of ledger `code` by id, in sequence order.
async fn postings_of(t: &TestLedger, code: &str) -> Vec<String> {
    t.db()
        .await
        .query(
            "SELECT p.posting_id::text FROM postings p JOIN ledgers l USING (ledger_id)
             WHERE l.code = $1 ORDER BY p.sequence",
            &[&code],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Where a version stands in its ledger's order: when it was recorded and the last posting
/// decided before it (versions of one batch may share both; their accounts' versions then
/// keep their own order).
fn place(a: &pb::Account) -> (i64, i32, u64) {
    let info = a.version_info.as_ref().expect("the version's facts");
    let at = info.recorded_at.as_ref().expect("recorded_at");
    (at.seconds, at.nanos, info.after_sequence)
}

/// Asserts ledger `code`'s account subject holds exactly one event per version recorded, in
/// the order recorded (each account's versions one after another, the ledger's in the order
/// of their recording), each with its Msg-Id and naming its ledger; returns the events.
async fn assert_account_events(raw: &[Raw], t: &TestLedger, code: &str) -> Vec<pb::Account> {
    let events = account_events(raw, code);
    let accounts: Vec<pb::Account> = events
        .iter()
        .map(|(_, e)| e.account.clone().expect("the event holds the account"))
        .collect();
    let mut got: Vec<(String, u64)> = accounts
        .iter()
        .map(|a| (a.code.clone(), a.version))
        .collect();
    got.sort();
    assert_eq!(
        got,
        recorded(t, code).await,
        "ledger {code}: one event per version recorded"
    );
    assert!(
        accounts.windows(2).all(|w| place(&w[0]) <= place(&w[1])),
        "ledger {code}: in the order recorded"
    );
    for a in &accounts {
        let before: Vec<u64> = accounts
            .iter()
            .filter(|b| b.code == a.code)
            .map(|b| b.version)
            .collect();
        assert_eq!(before, (2..2 + before.len() as u64).collect::<Vec<_>>());
    }
    for (id, e) in &events {
        let a = e.account.as_ref().unwrap();
        assert_eq!((e.ledger.as_str(), a.ledger.as_str()), (code, code));
        assert_eq!(*id, account_msg_id(code, &a.code, a.version as i64));
        assert_eq!(*id, format!("account:{code}:{}:{}", a.code, a.version));
    }
    accounts
}

/// An update of account `code` of ledger `ledger` from version `expected`: frozen when the
/// next version is even, open again when it is odd.
fn toggle(ledger: &str, key: &str, code: &str, expected: u64) -> pb::UpdateAccountRequest {
    let mut r = pb::UpdateAccountRequest {
        idempotency_key: key.into(),
        code: code.into(),
        expected_version: expected,
        reason: format!("test {key}"),
        ledger: ledger.into(),
        status: if expected % 2 == 1 {
            pb::AccountStatus::Frozen as i32
        } else {
            pb::AccountStatus::Open as i32
        },
        ..Default::default()
    };
    r.update_mask
        .get_or_insert_with(Default::default)
        .paths
        .push("status".into());
    r
}

/// An update of account `code` of ledger `ledger` from version `expected` that lowers its
/// floor (it goes on taking postings).
fn lower_floor(ledger: &str, key: &str, code: &str, expected: u64) -> pb::UpdateAccountRequest {
    let mut r = toggle(ledger, key, code, expected);
    r.update_mask.as_mut().unwrap().paths = vec!["balance_floor".into()];
    r.balance_floor = format!("-{expected}.00");
    r
}

async fn apply(
    c: &mut pb::ledger_client::LedgerClient<tonic::transport::Channel>,
    r: pb::UpdateAccountRequest,
) -> Result<pb::UpdateAccountResponse, tonic::Status> {
    c.update_account(r).await.map(|r| r.into_inner())
}

/// `n` versions of account `code` of `ledger`, one after another, from version `from`.
async fn versions(t: &mut TestLedger, ledger: &str, code: &str, from: u64, n: u64) {
    for v in from..from + n {
        let key = format!("{code}-v{}", v + 1);
        apply(&mut t.client, toggle(ledger, &key, code, v))
            .await
            .unwrap();
    }
}

/// Waits until the database says the account events of ledger `default` are delivered up to
/// `n` of them.
async fn wait_account_progress(t: &TestLedger, n: usize) {
    let deadline = Instant::now() + DELIVERY;
    loop {
        let delivered: i64 = t
            .db()
            .await
            .query_one(
                "SELECT count(*) FROM account_outbox o
                 WHERE o.ledger_id = 0 AND o.event_id <= coalesce(
                   (SELECT published_event_id FROM account_outbox_progress WHERE ledger_id = 0), 0)",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if delivered as usize >= n {
            return;
        }
        assert!(Instant::now() < deadline, "{delivered} of {n} delivered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn every_version_update_account_records_reaches_its_ledgers_subject_once_in_the_order_recorded(
) {
    let nats = NatsServer::start().await;
    let mut t = TestLedger::start().await;
    books(&mut t.client, "default").await;
    books(&mut t.client, EU).await;
    let _relay = Relay::start(&t.database_url, &nats.url(), &[], None);
    let mut answers = Vec::new();
    for v in 1..=3u64 {
        for ledger in ["default", EU] {
            let post = pb::PostRequest {
                ledger: ledger.into(),
                ..transfer(&format!("p{v}"), "equity:world", "acct:0", "1.00")
            };
            t.post(post).await.unwrap();
            let r = lower_floor(ledger, &format!("s{v}"), "acct:0", v);
            let answer = apply(&mut t.client, r).await.unwrap();
            answers.push((ledger, answer.account.unwrap()));
        }
    }
    let mut writers = Vec::new();
    for ledger in ["default", EU] {
        for w in 0..8 {
            let code = format!("w:{w}");
            account_in(&mut t.client, ledger, &code, pb::NormalBalance::Debit, true).await;
            let mut c = t.new_client().await;
            writers.push(tokio::spawn(async move {
                for v in 1..=3u64 {
                    let key = format!("{code}-{v}");
                    apply(&mut c, toggle(ledger, &key, &code, v)).await.unwrap();
                }
            }));
        }
    }
    for w in writers {
        w.await.unwrap();
    }

    wait_delivered(&t.database_url, DELIVERY).await;
    let raw = read_raw(&nats).await;
    for ledger in ["default", EU] {
        let events = assert_account_events(&raw, &t, ledger).await;
        assert_eq!(events.len(), 3 + 8 * 3, "{ledger}");
        for (_, answer) in answers.iter().filter(|(l, _)| *l == ledger) {
            let event = events
                .iter()
                .find(|e| e.code == answer.code && e.version == answer.version)
                .unwrap();
            assert_eq!(
                event, answer,
                "the event is the account UpdateAccount answered"
            );
        }
        assert_eq!(
            posting_ids(&raw, ledger),
            postings_of(&t, ledger).await,
            "{ledger}'s posting events as before, on their own subject"
        );
    }
    assert_eq!(raw.len(), 2 * (3 + 8 * 3) + 2 * 3, "nothing else");
}

#[tokio::test]
async fn a_replayed_update_account_publishes_nothing() {
    let nats = NatsServer::start().await;
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    let _relay = Relay::start(&t.database_url, &nats.url(), &[], None);
    let first = apply(&mut t.client, toggle("", "freeze", "acct:0", 1))
        .await
        .unwrap();
    wait_delivered(&t.database_url, DELIVERY).await;
    let again = apply(&mut t.client, toggle("", "freeze", "acct:0", 1))
        .await
        .unwrap();
    assert!(again.replayed && !first.replayed);
    assert_eq!(again.account, first.account);
    versions(&mut t, "", "acct:0", 2, 1).await;

    wait_delivered(&t.database_url, DELIVERY).await;
    assert_eq!(t.count("account_outbox").await, 2);
    let events = assert_account_events(&read_raw(&nats).await, &t, "default").await;
    let got: Vec<u64> = events.iter().map(|a| a.version).collect();
    assert_eq!(got, [2, 3], "the replay added nothing");
    assert_eq!(events[0], first.account.unwrap());
}

#[tokio::test]
async fn a_refused_update_account_publishes_nothing() {
    let nats = NatsServer::start().await;
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    t.post(transfer("fund", "equity:world", "acct:0", "5.00"))
        .await
        .unwrap();
    let _relay = Relay::start(&t.database_url, &nats.url(), &[], None);
    let stale = apply(&mut t.client, toggle("", "stale", "acct:0", 7))
        .await
        .unwrap_err();
    assert_error(&stale, tonic::Code::Aborted, "ACCOUNT_VERSION_MISMATCH");
    let mut close = toggle("", "close", "acct:0", 1);
    close.status = pb::AccountStatus::Closed as i32;
    let with_balance = apply(&mut t.client, close).await.unwrap_err();
    assert_eq!(with_balance.code(), tonic::Code::FailedPrecondition);
    let mut no_reason = toggle("", "no-reason", "acct:0", 1);
    no_reason.reason.clear();
    let invalid = apply(&mut t.client, no_reason).await.unwrap_err();
    assert_eq!(invalid.code(), tonic::Code::InvalidArgument);
    let accepted = apply(&mut t.client, toggle("", "freeze", "acct:0", 1))
        .await
        .unwrap();

    wait_delivered(&t.database_url, DELIVERY).await;
    assert_eq!(t.count("account_outbox").await, 1);
    let raw = read_raw(&nats).await;
    let events = assert_account_events(&raw, &t, "default").await;
    assert_eq!(
        events,
        [accepted.account.unwrap()],
        "the accepted one alone"
    );
    assert_eq!(raw.len(), 2, "and the posting's event");
}

#[tokio::test]
async fn account_events_survive_a_relay_killed_between_commit_and_publish_each_once_after_restart()
{
    let nats = NatsServer::start().await;
    let mut t = TestLedger::start().await;
    t.standard_accounts(2).await;
    versions(&mut t, "", "acct:0", 1, 3).await;
    versions(&mut t, "", "acct:1", 1, 2).await;

    let mut crashing = Relay::start(
        &t.database_url,
        &nats.url(),
        &[],
        Some("outbox-before-publish"),
    );
    let status = crashing.wait_exit(DELIVERY).await;
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{}", crashing.log());
    assert!(read_raw(&nats).await.is_empty(), "nothing published");
    assert_eq!(backlog(&t.database_url).await.pending, 5, "all wait");

    let _relay = Relay::start(&t.database_url, &nats.url(), &[], None);
    wait_delivered(&t.database_url, DELIVERY).await;
    let raw = read_raw(&nats).await;
    assert_eq!(assert_account_events(&raw, &t, "default").await.len(), 5);
    assert_eq!(raw.len(), 5, "each once");
}

#[tokio::test]
async fn account_events_acknowledged_before_a_relay_crash_are_in_the_stream_once_after_restart() {
    let nats = NatsServer::start().await;
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    versions(&mut t, "", "acct:0", 1, 4).await;

    let mut crashing = Relay::start(
        &t.database_url,
        &nats.url(),
        &[],
        Some("outbox-after-publish-before-progress"),
    );
    let status = crashing.wait_exit(DELIVERY).await;
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{}", crashing.log());
    assert_eq!(read_raw(&nats).await.len(), 4, "acknowledged");
    assert_eq!(
        backlog(&t.database_url).await.pending,
        4,
        "but not recorded"
    );

    let relay = Relay::start(&t.database_url, &nats.url(), &[], None);
    wait_delivered(&t.database_url, DELIVERY).await;
    let raw = read_raw(&nats).await;
    assert_eq!(assert_account_events(&raw, &t, "default").await.len(), 4);
    assert_eq!(raw.len(), 4, "the re-publish was dropped by the broker");
    assert!(
        relay.log().contains("duplicates=4"),
        "the broker reported them as duplicates:\n{}",
        relay.log()
    );
}

#[tokio::test]
async fn an_account_event_the_broker_refuses_halts_only_its_ledgers_account_events_and_its_postings_go_on(
) {
    let nats = NatsServer::start().await;
    let js = nats.jetstream().await;
    let config = async_nats::jetstream::stream::Config {
        name: ledger_server::outbox::STREAM.into(),
        subjects: ALL_STREAM_SUBJECTS.map(String::from).to_vec(),
        max_message_size: 1024,
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    };
    js.create_stream(config.clone()).await.unwrap();
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    let metadata = (0..3).map(|i| (format!("k{i}"), "x".repeat(500))).collect();
    t.client
        .create_account(pb::CreateAccountRequest {
            code: "big".into(),
            currency: "EUR".into(),
            scale: 2,
            normal_balance: pb::NormalBalance::Debit as i32,
            allow_negative: true,
            metadata,
            ..Default::default()
        })
        .await
        .unwrap();
    versions(&mut t, "", "acct:0", 1, 1).await;
    versions(&mut t, "", "big", 1, 1).await;
    versions(&mut t, "", "acct:0", 2, 1).await;
    t.post(transfer("before", "equity:world", "acct:0", "1.00"))
        .await
        .unwrap();

    let relay = Relay::start(&t.database_url, &nats.url(), &[], None);
    relay.wait_for_log("HALTED", DELIVERY).await;
    assert!(
        relay.log().contains("account \"big\" version 2"),
        "names the refused event:\n{}",
        relay.log()
    );
    wait_account_progress(&t, 1).await;
    t.post(transfer("while-halted", "equity:world", "acct:0", "1.00"))
        .await
        .unwrap();
    let deadline = Instant::now() + DELIVERY;
    while published(&t.database_url).await < 2 {
        assert!(
            Instant::now() < deadline,
            "postings held up:\n{}",
            relay.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        backlog(&t.database_url).await.pending,
        2,
        "the refused account event and the one behind it wait"
    );

    js.update_stream(async_nats::jetstream::stream::Config {
        max_message_size: -1,
        ..config
    })
    .await
    .unwrap();
    wait_delivered(&t.database_url, DELIVERY).await;
    let raw = read_raw(&nats).await;
    let events = assert_account_events(&raw, &t, "default").await;
    let got: Vec<(&str, u64)> = events
        .iter()
        .map(|a| (a.code.as_str(), a.version))
        .collect();
    assert_eq!(got, [("acct:0", 2), ("big", 2), ("acct:0", 3)], "in order");
    assert_eq!(
        posting_ids(&raw, "default"),
        postings_of(&t, "default").await
    );
}

#[tokio::test]
async fn retention_prunes_delivered_account_events_in_bounded_batches_and_the_database_keeps_the_rest(
) {
    let nats = NatsServer::start().await;
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    versions(&mut t, "", "acct:0", 1, 3).await;
    let mut relay = Relay::start(&t.database_url, &nats.url(), &[], None);
    wait_delivered(&t.database_url, DELIVERY).await;
    assert!(relay.terminate().await.success());
    versions(&mut t, "", "acct:0", 4, 2).await;

    // As the service acts: the publisher needs only ledger_app's grants.
    let one = ledger_server::storage::PoolTuning {
        size: 1,
        ..Default::default()
    };
    let pool = ledger_server::storage::pool_with(t.service_config.clone(), &one).unwrap();
    let db = pool.get().await.unwrap();
    let hour = Duration::from_secs(3600);
    assert_eq!(prune_delivered_accounts(&db, hour, 10).await.unwrap(), 0);
    let mut batches = Vec::new();
    loop {
        let n = prune_delivered_accounts(&db, Duration::ZERO, 2)
            .await
            .unwrap();
        batches.push(n);
        if n < 2 {
            break;
        }
    }
    assert_eq!(batches, [2, 1], "delivered rows in batches of at most 2");
    assert_eq!(t.count("account_outbox").await, 2, "undelivered rows stay");

    let refusals = [
        "DELETE FROM account_outbox",
        "UPDATE account_outbox SET created_at = now()",
        "TRUNCATE account_outbox",
        "UPDATE account_outbox_progress SET published_event_id = 0",
        "DELETE FROM account_outbox_progress",
    ];
    let owner = t.db().await;
    for sql in refusals {
        let e = owner.batch_execute(sql).await.unwrap_err();
        let message = e.as_db_error().unwrap().message().to_owned();
        assert!(
            message.contains("not delivered yet")
                || message.contains("immutable")
                || message.contains("only moves forward"),
            "{sql}: {message}"
        );
    }
    let last: i64 = owner
        .query_one("SELECT max(event_id) FROM account_outbox", &[])
        .await
        .unwrap()
        .get(0);
    assert!(
        !record_account_progress(&db, 0, 1).await.unwrap(),
        "progress does not move back"
    );
    assert_eq!(t.count("account_outbox").await, 2);

    let _relay = Relay::start(
        &t.database_url,
        &nats.url(),
        &["--outbox-retention", "0s"],
        None,
    );
    wait_delivered(&t.database_url, DELIVERY).await;
    let deadline = Instant::now() + DELIVERY;
    while t.count("account_outbox").await > 0 {
        assert!(Instant::now() < deadline, "delivered rows not pruned");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let progress: i64 = owner
        .query_one(
            "SELECT published_event_id FROM account_outbox_progress WHERE ledger_id = 0",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(progress, last);
    let raw = read_raw(&nats).await;
    let got: Vec<u64> = account_events(&raw, "default")
        .iter()
        .map(|(_, e)| e.account.as_ref().unwrap().version)
        .collect();
    assert_eq!(got, [2, 3, 4, 5, 6], "each once, in order");
}

#[tokio::test]
async fn a_stream_of_the_version_before_account_events_gets_their_subjects_and_keeps_its_events() {
    let nats = NatsServer::start().await;
    let js = nats.jetstream().await;
    js.create_stream(async_nats::jetstream::stream::Config {
        name: ledger_server::outbox::STREAM.into(),
        subjects: vec![ledger_server::outbox::STREAM_SUBJECTS.into()],
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    t.post(transfer("fund", "equity:world", "acct:0", "1.00"))
        .await
        .unwrap();
    let mut relay = Relay::start(&t.database_url, &nats.url(), &[], None);
    wait_delivered(&t.database_url, DELIVERY).await;
    assert!(relay.terminate().await.success());
    // As the version before account events left it.
    let mut stream = js.get_stream(ledger_server::outbox::STREAM).await.unwrap();
    let mut config = stream.info().await.unwrap().config.clone();
    config.subjects = vec![ledger_server::outbox::STREAM_SUBJECTS.into()];
    js.update_stream(config).await.unwrap();
    versions(&mut t, "", "acct:0", 1, 2).await;

    let relay = Relay::start(&t.database_url, &nats.url(), &[], None);
    wait_delivered(&t.database_url, DELIVERY).await;
    let subjects = stream.info().await.unwrap().config.subjects.clone();
    assert_eq!(subjects, ALL_STREAM_SUBJECTS);
    assert!(
        relay.log().contains("the stream's subjects changed"),
        "says so:\n{}",
        relay.log()
    );
    let raw = read_raw(&nats).await;
    assert_eq!(
        posting_ids(&raw, "default"),
        postings_of(&t, "default").await,
        "the events of before stay"
    );
    assert_eq!(assert_account_events(&raw, &t, "default").await.len(), 2);
    assert_eq!(raw.len(), 3);
}
