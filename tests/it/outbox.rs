//! The transactional outbox: every accepted posting's event reaches a real NATS JetStream
//! exactly once, in sequence order, through publisher crashes, broker outages and refusals.
//! These tests use the ledger `default`; `ledgers` has those of several ledgers, `accounts`
//! the events of account versions.

mod accounts;
mod digests;
mod ledgers;

use crate::support::nats::*;
use crate::support::*;
use ledger_server::grpc::pb;
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

const DELIVERY: Duration = Duration::from_secs(20);

/// Every posting of the database, in sequence order: (sequence, posting id).
async fn postings(t: &TestLedger) -> Vec<(i64, String)> {
    t.db()
        .await
        .query(
            "SELECT sequence, posting_id::text FROM postings ORDER BY sequence",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// Asserts the stream holds exactly one event per posting, in sequence order, each with its
/// posting id as `Nats-Msg-Id` on subject `ledger.postings.default`, naming its ledger.
async fn assert_stream_matches_journal(nats: &NatsServer, t: &TestLedger) -> Vec<StreamEvent> {
    let events = nats.read_stream().await;
    let journal = postings(t).await;
    let got: Vec<(i64, String)> = events
        .iter()
        .map(|e| (e.posting.sequence as i64, e.msg_id.clone()))
        .collect();
    assert_eq!(
        got.len(),
        journal.len(),
        "one event per posting (events {}, postings {})",
        got.len(),
        journal.len()
    );
    assert_eq!(got, journal, "events in sequence order, one per posting");
    let hashes: Vec<String> = t
        .db()
        .await
        .query(
            "SELECT encode(h.hash, 'hex') FROM postings p LEFT JOIN posting_hashes h USING (sequence) ORDER BY p.sequence",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, Option<String>>(0).unwrap_or_default())
        .collect();
    let carried: Vec<String> = events.iter().map(|e| e.posting.hash.clone()).collect();
    assert_eq!(carried, hashes, "each event carries its posting's hash");
    for e in &events {
        assert_eq!(e.subject, "ledger.postings.default");
        assert_eq!(
            (e.ledger.as_str(), e.posting.ledger.as_str()),
            ("default", "default")
        );
        assert_eq!(e.msg_id, e.posting.posting_id);
        assert!(e.posting.voided_by_posting_id.is_empty());
    }
    events
}

fn void(key: &str, posting_id: &str) -> pb::VoidRequest {
    pb::VoidRequest {
        ledger: String::new(),
        idempotency_key: key.into(),
        posting_id: posting_id.into(),
        reason: "refund".into(),
        effective_at: None,
    }
}

#[tokio::test]
async fn relay_killed_between_commit_and_publish_delivers_the_event_once_after_restart() {
    let nats = NatsServer::start().await;
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    let posted = t
        .post(transfer("k1", "equity:world", "acct:0", "10.00"))
        .await
        .unwrap()
        .posting
        .unwrap();

    let mut crashing = Relay::start(
        &t.database_url,
        &nats.url(),
        &[],
        Some("outbox-before-publish"),
    );
    let status = crashing.wait_exit(DELIVERY).await;
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{}", crashing.log());
    assert!(nats.read_stream().await.is_empty());
    assert_eq!(backlog(&t.database_url).await.pending, 1);

    let _relay = Relay::start(&t.database_url, &nats.url(), &[], None);
    wait_delivered(&t.database_url, DELIVERY).await;
    let events = assert_stream_matches_journal(&nats, &t).await;
    assert_eq!(events.len(), 1);
    assert_eq!(
        events[0].posting, posted,
        "the event carries the posting as committed"
    );
}

#[tokio::test]
async fn relay_killed_after_ack_before_progress_leaves_each_event_once_in_the_stream() {
    let nats = NatsServer::start().await;
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    for i in 0..5 {
        t.post(transfer(&format!("k{i}"), "equity:world", "acct:0", "1.00"))
            .await
            .unwrap();
    }

    let mut crashing = Relay::start(
        &t.database_url,
        &nats.url(),
        &[],
        Some("outbox-after-publish-before-progress"),
    );
    let status = crashing.wait_exit(DELIVERY).await;
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{}", crashing.log());
    assert_stream_matches_journal(&nats, &t).await;
    let b = backlog(&t.database_url).await;
    assert_eq!(
        (published(&t.database_url).await, b.pending),
        (0, 5),
        "acknowledged but not recorded"
    );

    let relay = Relay::start(&t.database_url, &nats.url(), &[], None);
    wait_delivered(&t.database_url, DELIVERY).await;
    assert_eq!(published(&t.database_url).await, 5);
    let events = assert_stream_matches_journal(&nats, &t).await;
    assert_eq!(events.len(), 5, "the re-publish was dropped by the broker");
    assert!(
        relay.log().contains("duplicates=5"),
        "the broker reported the re-published events as duplicates:\n{}",
        relay.log()
    );
}

#[tokio::test]
async fn relay_sigkilled_repeatedly_while_postings_flow_delivers_every_posting_once_in_order() {
    let nats = NatsServer::start().await;
    let mut t = TestLedger::start().await;
    t.standard_accounts(4).await;
    let posting_for = Duration::from_secs(4);
    let mut posters = Vec::new();
    for w in 0..4 {
        let mut client = t.new_client().await;
        posters.push(tokio::spawn(async move {
            let began = Instant::now();
            let mut n = 0;
            while began.elapsed() < posting_for {
                client
                    .post(transfer(
                        &format!("w{w}-{n}"),
                        "equity:world",
                        &format!("acct:{w}"),
                        "0.01",
                    ))
                    .await
                    .unwrap();
                n += 1;
            }
            n
        }));
    }
    let mut kills = 0;
    let began = Instant::now();
    // Pseudo-random lifetimes between 150 and 750 ms.
    let mut seed = u64::from(std::process::id()) | 1;
    while began.elapsed() < posting_for {
        let mut relay = Relay::start(&t.database_url, &nats.url(), &[], None);
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        tokio::time::sleep(Duration::from_millis(150 + seed % 600)).await;
        relay.kill();
        kills += 1;
    }
    let mut posted = 0;
    for p in posters {
        posted += p.await.unwrap();
    }
    let mid = published(&t.database_url).await;
    assert!(
        mid > 0,
        "the killed relays published some events before the final one"
    );

    let _relay = Relay::start(&t.database_url, &nats.url(), &[], None);
    wait_delivered(&t.database_url, DELIVERY).await;
    let events = assert_stream_matches_journal(&nats, &t).await;
    assert_eq!(events.len(), posted);
    eprintln!(
        "{posted} postings, relay SIGKILLed {kills} times, {mid} published before the last start"
    );
}

/// Starts `ledger serve` on a database with the in-process publisher (when `nats_url` is set);
/// its log goes to the returned file.
fn serve(
    database_url: &str,
    port: u16,
    nats_url: Option<&str>,
) -> (std::process::Child, std::path::PathBuf) {
    let log = std::env::temp_dir().join(format!("ledger-serve-{}-{port}.log", std::process::id()));
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ledger"));
    cmd.args([
        "serve",
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--database-url",
        database_url,
    ])
    .env("LEDGER_LOG", "info")
    .env_remove("LEDGER_NATS_URL")
    .env_remove(ledger_server::outbox::FAILPOINT_ENV)
    .stdout(std::process::Stdio::null())
    .stderr(std::fs::File::create(&log).unwrap());
    if let Some(url) = nats_url {
        cmd.args(["--nats-url", url]);
    }
    (cmd.spawn().expect("ledger serve starts"), log)
}

async fn stop(mut child: std::process::Child) {
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "exit {status:?}");
            return;
        }
        assert!(Instant::now() < deadline, "server did not stop on SIGTERM");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Posts `n` transfers one after another; returns each latency.
async fn timed_posts(
    client: &mut pb::ledger_client::LedgerClient<tonic::transport::Channel>,
    prefix: &str,
    n: usize,
) -> Vec<Duration> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let began = Instant::now();
        client
            .post(transfer(
                &format!("{prefix}-{i}"),
                "equity:world",
                "acct:0",
                "1.00",
            ))
            .await
            .expect("post succeeds whatever the broker does");
        out.push(began.elapsed());
    }
    out.sort();
    out
}

#[tokio::test]
async fn broker_outage_does_not_slow_posts_and_every_event_arrives_once_when_it_returns() {
    let mut nats = NatsServer::start().await;
    let url = pg::shared_cluster().fresh_database().await;
    let port = free_port();
    let (server, log) = serve(&url, port, Some(&nats.url()));
    let mut client = client_when_up(port, Duration::from_secs(20)).await;
    world_and_one_account(&mut client).await;
    let up = timed_posts(&mut client, "up", 40).await;
    wait_delivered(&url, DELIVERY).await;

    nats.kill();
    let down = timed_posts(&mut client, "down", 40).await;
    let (p50_up, p50_down) = (up[up.len() / 2], down[down.len() / 2]);
    let max_down = *down.last().unwrap();
    eprintln!("Post latency with broker up: p50 {p50_up:?}, max {:?}; broker down: p50 {p50_down:?}, max {max_down:?}", up.last().unwrap());
    assert!(
        p50_down <= (p50_up * 3).max(p50_up + Duration::from_millis(50)),
        "broker down slowed posts: p50 {p50_down:?} vs {p50_up:?}"
    );
    assert!(
        max_down < Duration::from_secs(1),
        "a post took {max_down:?} while the broker was down"
    );
    assert_eq!(backlog(&url).await.pending, 40, "events wait in the outbox");

    tokio::time::sleep(Duration::from_secs(1)).await;
    nats.start_again().await;
    let restarted = Instant::now();
    wait_delivered(&url, DELIVERY).await;
    eprintln!(
        "backlog of 40 drained {:?} after the broker came back",
        restarted.elapsed()
    );

    let events = nats.read_stream().await;
    assert_eq!(events.len(), 80, "every event once");
    let sequences: Vec<u64> = events.iter().map(|e| e.posting.sequence).collect();
    assert_eq!(sequences, (1..=80).collect::<Vec<u64>>());
    let ids: std::collections::HashSet<&str> = events.iter().map(|e| e.msg_id.as_str()).collect();
    assert_eq!(ids.len(), 80);
    stop(server).await;
    let log_text = strip_ansi(&std::fs::read_to_string(&log).unwrap());
    let _ = std::fs::remove_file(&log);
    assert!(log_text.contains("outbox publisher active"), "{log_text}");
}

#[tokio::test]
async fn serve_without_a_nats_url_says_that_events_wait_in_the_outbox() {
    let url = pg::shared_cluster().fresh_database().await;
    let port = free_port();
    let (server, log) = serve(&url, port, None);
    client_when_up(port, Duration::from_secs(20)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let log_text = loop {
        let text = strip_ansi(&std::fs::read_to_string(&log).unwrap());
        if text.contains("events wait in the outbox") || Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    stop(server).await;
    let _ = std::fs::remove_file(&log);
    assert!(log_text.contains("events wait in the outbox"), "{log_text}");
}

#[tokio::test]
async fn two_relays_at_once_one_is_active_and_a_stand_by_takes_over_when_it_dies() {
    let nats = NatsServer::start().await;
    let mut t = TestLedger::start().await;
    t.standard_accounts(2).await;
    let mut a = Relay::start(&t.database_url, &nats.url(), &[], None);
    let mut b = Relay::start(&t.database_url, &nats.url(), &[], None);
    let mut c1 = t.new_client().await;
    let mut c2 = t.new_client().await;
    let (r1, r2) = tokio::join!(
        async {
            for i in 0..60 {
                c1.post(transfer(&format!("a{i}"), "equity:world", "acct:0", "1.00"))
                    .await
                    .unwrap();
            }
        },
        async {
            for i in 0..60 {
                c2.post(transfer(&format!("b{i}"), "equity:world", "acct:1", "1.00"))
                    .await
                    .unwrap();
            }
        }
    );
    let _ = (r1, r2);
    wait_delivered(&t.database_url, DELIVERY).await;
    assert_stream_matches_journal(&nats, &t).await;

    let active_a = a.log().contains("outbox publisher active");
    let active_b = b.log().contains("outbox publisher active");
    assert!(
        active_a != active_b,
        "exactly one active:\nA:\n{}\nB:\n{}",
        a.log(),
        b.log()
    );
    let (active, standby) = if active_a {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    assert!(standby.log().contains("standing by"), "{}", standby.log());

    active.kill();
    let killed = Instant::now();
    t.post(transfer("after-kill", "equity:world", "acct:0", "1.00"))
        .await
        .unwrap();
    wait_delivered(&t.database_url, DELIVERY).await;
    let takeover = killed.elapsed();
    eprintln!("stand-by took over and delivered {takeover:?} after the active relay was killed");
    assert!(standby.log().contains("outbox publisher active"));
    let events = assert_stream_matches_journal(&nats, &t).await;
    assert_eq!(events.len(), 121);
}

#[tokio::test]
async fn replayed_post_and_void_publish_nothing() {
    let nats = NatsServer::start().await;
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    let _relay = Relay::start(&t.database_url, &nats.url(), &[], None);
    let req = transfer("once", "equity:world", "acct:0", "5.00");
    let p = t.post(req.clone()).await.unwrap();
    let again = t.post(req).await.unwrap();
    assert!(again.replayed);
    let p = p.posting.unwrap();
    let v = t
        .client
        .void(void("undo", &p.posting_id))
        .await
        .unwrap()
        .into_inner();
    let v_again = t
        .client
        .void(void("undo", &p.posting_id))
        .await
        .unwrap()
        .into_inner();
    assert!(v_again.replayed);
    let v = v.posting.unwrap();

    wait_delivered(&t.database_url, DELIVERY).await;
    assert_eq!(t.count("outbox").await, 2);
    let events = assert_stream_matches_journal(&nats, &t).await;
    assert_eq!(events.len(), 2);
    assert_eq!(
        events[0].posting, p,
        "the voided posting's event as committed (voided_by empty)"
    );
    assert_eq!(events[1].posting, v);
    assert_eq!(
        events[1].posting.voids_posting_id, p.posting_id,
        "the void announces itself"
    );
}

#[tokio::test]
async fn rejected_posting_publishes_nothing() {
    let nats = NatsServer::start().await;
    let mut t = TestLedger::start().await;
    t.standard_accounts(2).await;
    let _relay = Relay::start(&t.database_url, &nats.url(), &[], None);
    let overdraft = transfer("overdraft", "acct:0", "acct:1", "5.00");
    let e = t.post(overdraft.clone()).await.unwrap_err();
    assert_error(&e, tonic::Code::FailedPrecondition, "INSUFFICIENT_FUNDS");
    let e = t.post(overdraft).await.unwrap_err();
    assert_error(&e, tonic::Code::FailedPrecondition, "INSUFFICIENT_FUNDS");
    let funded = t
        .post(transfer("fund", "equity:world", "acct:0", "1.00"))
        .await
        .unwrap()
        .posting
        .unwrap();

    wait_delivered(&t.database_url, DELIVERY).await;
    assert_eq!(t.count("outbox").await, 1);
    let events = assert_stream_matches_journal(&nats, &t).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].posting.posting_id, funded.posting_id);
}

#[tokio::test]
async fn retention_removes_delivered_rows_only_in_bounded_batches() {
    let nats = NatsServer::start().await;
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    for i in 0..3 {
        t.post(transfer(&format!("d{i}"), "equity:world", "acct:0", "1.00"))
            .await
            .unwrap();
    }
    let mut relay = Relay::start(&t.database_url, &nats.url(), &[], None);
    wait_delivered(&t.database_url, DELIVERY).await;
    assert!(
        relay.terminate().await.success(),
        "relay exits 0 on SIGTERM"
    );
    for i in 0..2 {
        t.post(transfer(&format!("p{i}"), "equity:world", "acct:0", "1.00"))
            .await
            .unwrap();
    }

    let pool = ledger_server::storage::pool(&t.database_url, 1).unwrap();
    let db = pool.get().await.unwrap();
    use ledger_server::storage::outbox::prune_delivered;
    let hour = Duration::from_secs(3600);
    assert_eq!(
        prune_delivered(&db, hour, 10).await.unwrap(),
        0,
        "younger than the retention"
    );
    let mut batches = Vec::new();
    loop {
        let n = prune_delivered(&db, Duration::ZERO, 2).await.unwrap();
        batches.push(n);
        if n < 2 {
            break;
        }
    }
    assert_eq!(
        batches,
        vec![2, 1],
        "delivered rows in batches of at most 2"
    );
    let left: Vec<i64> = db
        .query("SELECT sequence FROM outbox ORDER BY sequence", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, vec![4, 5], "undelivered rows stay");

    let refused = db.execute("DELETE FROM outbox", &[]).await.unwrap_err();
    let message = refused.as_db_error().unwrap().message();
    assert!(
        message.contains("outbox row 4 is not delivered"),
        "{message}"
    );
    let refused = db
        .execute("UPDATE outbox_progress SET published_sequence = 1", &[])
        .await
        .unwrap_err();
    let message = refused.as_db_error().unwrap().message();
    assert!(message.contains("only moves forward"), "{message}");
    assert_eq!(t.count("outbox").await, 2);

    // The relay prunes by itself: with a retention of 0s every delivered row goes.
    let _relay = Relay::start(
        &t.database_url,
        &nats.url(),
        &["--outbox-retention", "0s"],
        None,
    );
    wait_delivered(&t.database_url, DELIVERY).await;
    let deadline = Instant::now() + DELIVERY;
    while t.count("outbox").await > 0 {
        assert!(Instant::now() < deadline, "delivered rows not pruned");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_stream_matches_journal(&nats, &t).await;
}

#[tokio::test]
async fn an_event_the_broker_refuses_halts_the_publisher_in_order_until_the_stream_accepts_it() {
    let nats = NatsServer::start().await;
    let js = nats.jetstream().await;
    let config = async_nats::jetstream::stream::Config {
        name: ledger_server::outbox::STREAM.into(),
        subjects: vec![ledger_server::outbox::STREAM_SUBJECTS.into()],
        max_message_size: 1024,
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    };
    js.create_stream(config.clone()).await.unwrap();
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    let small = |k: &str| transfer(k, "equity:world", "acct:0", "1.00");
    let first = t.post(small("first")).await.unwrap().posting.unwrap();
    let mut big = small("big");
    big.memo = "x".repeat(1000);
    let big = t.post(big).await.unwrap().posting.unwrap();
    let third = t.post(small("third")).await.unwrap().posting.unwrap();

    let relay = Relay::start(&t.database_url, &nats.url(), &[], None);
    relay.wait_for_log("HALTED", DELIVERY).await;
    assert!(
        relay.log().contains(&big.posting_id),
        "names the refused event"
    );
    let events = nats.read_stream().await;
    assert_eq!(events.len(), 1, "nothing after the refused event");
    assert_eq!(events[0].msg_id, first.posting_id);
    let b = backlog(&t.database_url).await;
    assert_eq!((published(&t.database_url).await, b.pending), (1, 2));
    assert!(b.oldest_age.is_some());
    assert_eq!(b.ledgers_behind, 1);

    js.update_stream(async_nats::jetstream::stream::Config {
        max_message_size: -1,
        ..config
    })
    .await
    .unwrap();
    wait_delivered(&t.database_url, DELIVERY).await;
    let events = assert_stream_matches_journal(&nats, &t).await;
    let ids: Vec<&str> = events.iter().map(|e| e.msg_id.as_str()).collect();
    assert_eq!(
        ids,
        vec![
            first.posting_id.as_str(),
            &big.posting_id,
            &third.posting_id
        ]
    );
}

/// Measurement, not a test (`cargo test --test it outbox::measure -- --ignored --nocapture`):
/// builds a backlog of `LEDGER_MEASURE_EVENTS` (default 20,000) postings with no publisher,
/// then times one `ledger relay` draining it (`LEDGER_RELAY_BIN=target/release/ledger` to time
/// a release build of the relay).
#[tokio::test]
#[ignore]
async fn measure_backlog_drain_rate() {
    let n: usize = std::env::var("LEDGER_MEASURE_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let nats = NatsServer::start().await;
    let mut t = TestLedger::start().await;
    t.standard_accounts(16).await;
    let workers = 32;
    let mut tasks = Vec::new();
    for w in 0..workers {
        let mut client = t.new_client().await;
        tasks.push(tokio::spawn(async move {
            for i in (w..n).step_by(workers) {
                client
                    .post(transfer(
                        &format!("m{i}"),
                        "equity:world",
                        &format!("acct:{}", i % 16),
                        "0.01",
                    ))
                    .await
                    .unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(backlog(&t.database_url).await.pending, n as i64);
    let _relay = Relay::start(&t.database_url, &nats.url(), &[], None);
    let took = wait_delivered(&t.database_url, Duration::from_secs(600)).await;
    eprintln!(
        "drained {n} events in {took:?} (relay start included): {:.0} events/s",
        n as f64 / took.as_secs_f64()
    );
    assert_eq!(nats.read_stream().await.len(), n);
}

#[tokio::test]
async fn relay_refuses_a_bad_configuration_with_a_reason() {
    let url = pg::shared_cluster().fresh_database().await;
    let cases: &[(&[&str], Option<&str>, &str)] = &[
        (&["--database-url", &url], None, "--nats-url"),
        (
            &[
                "--database-url",
                &url,
                "--nats-url",
                "nats://127.0.0.1:1",
                "--outbox-retention",
                "2w",
            ],
            None,
            "unit \"w\"",
        ),
        (
            &["--database-url", &url, "--nats-url", "nats://127.0.0.1:1"],
            Some("outbox-typo"),
            "unknown LEDGER_FAILPOINT",
        ),
    ];
    for (args, failpoint, want) in cases {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ledger"));
        cmd.arg("relay")
            .args(*args)
            .env_remove("LEDGER_NATS_URL")
            .env_remove("DATABASE_URL")
            .env_remove(ledger_server::outbox::FAILPOINT_ENV);
        if let Some(fp) = failpoint {
            cmd.env(ledger_server::outbox::FAILPOINT_ENV, fp);
        }
        let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap();
        let stderr = strip_ansi(&String::from_utf8_lossy(&out.stderr));
        assert!(!out.status.success(), "{args:?} {failpoint:?} succeeded");
        assert!(stderr.contains(want), "{args:?} {failpoint:?}: {stderr}");
    }
}

#[tokio::test]
async fn a_deleted_stream_is_created_again_and_publishing_goes_on() {
    let nats = NatsServer::start().await;
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    let _relay = Relay::start(&t.database_url, &nats.url(), &[], None);
    t.post(transfer("before", "equity:world", "acct:0", "1.00"))
        .await
        .unwrap();
    wait_delivered(&t.database_url, DELIVERY).await;
    assert_eq!(nats.read_stream().await.len(), 1);

    let js = nats.jetstream().await;
    js.delete_stream(ledger_server::outbox::STREAM)
        .await
        .unwrap();
    let after = t
        .post(transfer("after", "equity:world", "acct:0", "1.00"))
        .await
        .unwrap()
        .posting
        .unwrap();
    wait_delivered(&t.database_url, DELIVERY).await;
    let events = nats.read_stream().await;
    assert_eq!(
        events.len(),
        1,
        "the new stream holds the events after its creation"
    );
    assert_eq!(events[0].posting, after);
}

#[tokio::test]
async fn each_kind_of_hold_posting_reaches_nats_once_and_replays_publish_nothing() {
    let nats = NatsServer::start().await;
    let mut t = TestLedger::start().await;
    t.standard_accounts(2).await;
    let _relay = Relay::start(&t.database_url, &nats.url(), &[], None);
    t.post(transfer("fund", "equity:world", "acct:0", "50.00"))
        .await
        .unwrap();
    let hold = |key: &str| pb::PostRequest {
        hold: true,
        ..transfer(key, "acct:0", "acct:1", "5.00")
    };
    let h1 = t.post(hold("h1")).await.unwrap().posting.unwrap();
    let capture = pb::CaptureRequest {
        idempotency_key: "c".into(),
        hold_posting_id: h1.posting_id.clone(),
        ..Default::default()
    };
    let c = t
        .client
        .capture(capture.clone())
        .await
        .unwrap()
        .into_inner();
    assert!(
        t.client
            .capture(capture)
            .await
            .unwrap()
            .into_inner()
            .replayed
    );
    let h2 = t.post(hold("h2")).await.unwrap().posting.unwrap();
    let r = t
        .client
        .void(void("r", &h2.posting_id))
        .await
        .unwrap()
        .into_inner();
    assert!(
        t.client
            .void(void("r", &h2.posting_id))
            .await
            .unwrap()
            .into_inner()
            .replayed
    );
    let soon = time::OffsetDateTime::now_utc() + time::Duration::milliseconds(200);
    let h3 = t
        .post(pb::PostRequest {
            hold_expires_at: Some(ledger_server::grpc::convert::time_to_pb(soon)),
            ..hold("h3")
        })
        .await
        .unwrap()
        .posting
        .unwrap();
    let began = Instant::now();
    while t.count("postings").await < 7 {
        assert!(began.elapsed() < DELIVERY, "hold h3 was not released");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_delivered(&t.database_url, DELIVERY).await;
    let events = assert_stream_matches_journal(&nats, &t).await;
    assert_eq!(
        events.len(),
        7,
        "fund, three holds, a capture, a release, an expiry"
    );
    let e = |i: usize| &events[i].posting;
    assert_eq!(
        *e(1),
        h1,
        "the hold as committed: pending, no capture named"
    );
    assert_eq!(e(1).hold_status, pb::HoldStatus::Pending as i32);
    assert_eq!(*e(2), c.posting.unwrap());
    assert_eq!(e(2).captures_hold_posting_id, h1.posting_id);
    assert_eq!(*e(4), r.posting.unwrap());
    assert_eq!(e(4).voids_posting_id, h2.posting_id);
    assert_eq!(*e(5), h3);
    assert_eq!(
        (e(6).caller.as_str(), e(6).idempotency_key.clone()),
        ("ledger", format!("expire:{}", h3.posting_id))
    );
}

#[tokio::test]
async fn every_event_says_what_its_posting_is_and_a_release_names_the_hold_it_closes() {
    use pb::PostingKind as K;
    let nats = NatsServer::start().await;
    let mut t = TestLedger::start().await;
    t.standard_accounts(2).await;
    let _relay = Relay::start(&t.database_url, &nats.url(), &[], None);
    t.post(transfer("fund", "equity:world", "acct:0", "50.00"))
        .await
        .unwrap();
    let hold = |key: &str| pb::PostRequest {
        hold: true,
        ..transfer(key, "acct:0", "acct:1", "5.00")
    };
    let h1 = t.post(hold("h1")).await.unwrap().posting.unwrap();
    let c = t
        .client
        .capture(pb::CaptureRequest {
            idempotency_key: "c".into(),
            hold_posting_id: h1.posting_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .posting
        .unwrap();
    t.client.void(void("v", &c.posting_id)).await.unwrap();
    let h2 = t.post(hold("h2")).await.unwrap().posting.unwrap();
    t.client.void(void("r", &h2.posting_id)).await.unwrap();
    let soon = time::OffsetDateTime::now_utc() + time::Duration::milliseconds(200);
    let h3 = t
        .post(pb::PostRequest {
            hold_expires_at: Some(ledger_server::grpc::convert::time_to_pb(soon)),
            ..hold("h3")
        })
        .await
        .unwrap()
        .posting
        .unwrap();
    let began = Instant::now();
    while t.count("postings").await < 8 {
        assert!(began.elapsed() < DELIVERY, "hold h3 was not released");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_delivered(&t.database_url, DELIVERY).await;
    let events = assert_stream_matches_journal(&nats, &t).await;
    let kinds: Vec<K> = events
        .iter()
        .map(|e| K::try_from(e.posting.kind).unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            K::Posting,
            K::Hold,
            K::Capture,
            K::Void,
            K::Hold,
            K::Release,
            K::Hold,
            K::Expiry
        ]
    );
    let released: Vec<(&str, &str)> = events
        .iter()
        .map(|e| {
            (
                e.posting.releases_hold_posting_id.as_str(),
                e.posting.voids_posting_id.as_str(),
            )
        })
        .collect();
    assert_eq!(
        released[5],
        (h2.posting_id.as_str(), h2.posting_id.as_str())
    );
    assert_eq!(
        released[7],
        (h3.posting_id.as_str(), ""),
        "the expiry's release"
    );
    assert!(
        [0, 1, 2, 3, 4, 6].iter().all(|&i| released[i].0.is_empty()),
        "only releases name a hold they release: {released:?}"
    );
    assert_eq!(
        events[6].posting.hold_status,
        pb::HoldStatus::Pending as i32,
        "the hold as committed, though it has expired by now"
    );
}
