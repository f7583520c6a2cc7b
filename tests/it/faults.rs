//! Faults: crashes, restarts, cut connections and an ambiguous commit. The promise: every
//! request acknowledged OK is in the journal exactly once; every request that got an error or
//! no answer, retried with its key, ends with exactly one effect.

use crate::support::proxy::Proxy;
use crate::support::*;
use ledger_server::grpc::pb;
use ledger_server::grpc::pb::ledger_client::LedgerClient;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::transport::Channel;
use tonic::Code;

/// Runs `ledger check` on a database; returns whether it passed and its report.
pub async fn ledger_check(url: &str) -> (bool, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledger"))
        .args(["check", "--database-url", url])
        .output()
        .await
        .unwrap();
    let mut report = String::from_utf8_lossy(&out.stdout).into_owned();
    report.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), report)
}

/// Whether an error leaves the outcome unknown (so the caller must retry with its key).
pub fn is_unknown(s: &tonic::Status) -> bool {
    matches!(
        s.code(),
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown
    )
}

/// Posts `req` again (same key) while its outcome is unknown, pausing `pause` between tries,
/// until it is answered or `within` has passed. The last error is returned when the answer is
/// a definite error, or still unknown at the deadline.
pub async fn post_until_settled(
    t: &mut TestLedger,
    req: pb::PostRequest,
    within: Duration,
    pause: Duration,
) -> Result<pb::PostResponse, tonic::Status> {
    let deadline = Instant::now() + within;
    loop {
        match t.post(req.clone()).await {
            Err(s) if is_unknown(&s) && Instant::now() < deadline => {
                tokio::time::sleep(pause).await
            }
            answer => return answer,
        }
    }
}

/// A lazily connecting client (survives server restarts).
fn lazy_client(addr: &str) -> LedgerClient<Channel> {
    let ch = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(1))
        .connect_lazy();
    LedgerClient::new(ch)
}

/// Counters of a load run.
#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    replayed: AtomicU64,
    unknown: AtomicU64,
}

/// Waits until the load has had `n` more requests answered OK than `since` (at most 30 s), so a
/// fault injected next lands while requests are in flight, however fast the server is.
async fn until_progress(tally: &Tally, since: u64, n: u64) {
    let start = Instant::now();
    while tally.ok.load(Ordering::Relaxed) < since + n {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the load made no progress"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `clients` callers each post `per_client` transfers of 1.00 from the world to acct:0, each
/// with its own key, retrying every unknown outcome with the same key until it is OK.
async fn load(addr: String, clients: usize, per_client: usize, tally: Arc<Tally>) {
    let mut tasks = Vec::new();
    for c in 0..clients {
        let addr = addr.clone();
        let tally = tally.clone();
        tasks.push(tokio::spawn(async move {
            let mut client = lazy_client(&addr);
            for j in 0..per_client {
                let key = format!("c{c}-{j}");
                let deadline = Instant::now() + Duration::from_secs(90);
                let mut attempts = 0;
                loop {
                    attempts += 1;
                    let mut req =
                        tonic::Request::new(transfer(&key, "equity:world", "acct:0", "1.00"));
                    req.set_timeout(Duration::from_secs(3));
                    match client.post(req).await {
                        Ok(r) => {
                            tally.ok.fetch_add(1, Ordering::Relaxed);
                            if r.into_inner().replayed {
                                tally.replayed.fetch_add(1, Ordering::Relaxed);
                            }
                            break;
                        }
                        Err(s) if is_unknown(&s) => {
                            tally.unknown.fetch_add(1, Ordering::Relaxed);
                            assert!(
                                Instant::now() < deadline,
                                "{key}: no definite answer after {attempts} attempts: {s:?}"
                            );
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        Err(s) => panic!("{key}: definite failure {s:?}"),
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// After a run: exactly one posting per key, the balance is their sum, `ledger check` passes.
pub async fn assert_exactly_once(url: &str, clients: usize, per_client: usize) {
    let db = ledger_server::storage::connect(url).await.unwrap();
    let n = (clients * per_client) as i64;
    let row = db
        .query_one(
            "SELECT count(*), count(DISTINCT idempotency_key) FROM postings",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, i64>(0), row.get::<_, i64>(1)),
        (n, n),
        "one posting per key"
    );
    let bal: String = db
        .query_one("SELECT (debits - credits)::text FROM account_totals JOIN accounts USING (account_id) WHERE code = 'acct:0'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(bal, format!("{n}.00"));
    let (ok, report) = ledger_check(url).await;
    assert!(ok, "ledger check failed:\n{report}");
}

#[tokio::test]
async fn an_ambiguous_commit_answers_unavailable_and_the_retry_finds_the_posting() {
    let (pg, url) = pg::private_cluster().await;
    let mut t = TestLedger::on_database(url.clone()).await;
    t.standard_accounts(1).await;
    let admin = ledger_server::storage::connect(&url).await.unwrap();
    // Commits now wait for a standby that does not exist.
    admin
        .batch_execute("ALTER SYSTEM SET synchronous_standby_names = 'ghost'")
        .await
        .unwrap();
    admin
        .batch_execute("SELECT pg_reload_conf()")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut c = t.new_client().await;
    let pending = tokio::spawn(async move {
        c.post(transfer("ambiguous", "equity:world", "acct:0", "9.00"))
            .await
    });
    // Wait until the writer's COMMIT is waiting for the standby, then kill that backend: the
    // transaction is committed locally but the server never hears so.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let killed: i64 = admin
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE wait_event = 'SyncRep'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if killed > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the commit never waited for the standby"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let answer = pending.await.unwrap();
    let err = answer.expect_err("an unknown outcome must never be OK");
    assert_error(&err, Code::Unavailable, "STORAGE_UNAVAILABLE");
    admin
        .batch_execute("ALTER SYSTEM RESET synchronous_standby_names")
        .await
        .unwrap();
    admin
        .batch_execute("SELECT pg_reload_conf()")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let retry = t
        .post(transfer("ambiguous", "equity:world", "acct:0", "9.00"))
        .await
        .expect("the retry settles it");
    assert!(retry.replayed, "the first attempt had committed locally");
    assert_eq!(t.count("postings").await, 1);
    assert_eq!(t.balance("acct:0", None).await.balance, "9.00");
    drop(pg);
}

#[tokio::test]
async fn a_connection_cut_during_a_batch_answers_unavailable_and_the_retry_posts_once() {
    let (proxy, direct, through) = Proxy::to_fresh_database().await;
    let mut t = TestLedger::on_database(through).await;
    t.standard_accounts(1).await;
    // Hold the ledger's write lock from outside: the writer's batch stops inside its transaction.
    let blocker = ledger_server::storage::connect(&direct).await.unwrap();
    blocker
        .execute(
            "SELECT pg_advisory_lock($1, 0)",
            &[&ledger_server::storage::LEDGER_LOCK_CLASS],
        )
        .await
        .unwrap();
    let mut c = t.new_client().await;
    let pending = tokio::spawn(async move {
        c.post(transfer("cut", "equity:world", "acct:0", "4.00"))
            .await
    });
    let admin = ledger_server::storage::connect(&direct).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while admin
        .query_one(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
            &[],
        )
        .await
        .unwrap()
        .get::<_, i64>(0)
        == 0
    {
        assert!(
            Instant::now() < deadline,
            "the batch never waited for the lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.cut();
    let err = pending.await.unwrap().expect_err("a cut batch is not OK");
    assert_error(&err, Code::Unavailable, "STORAGE_UNAVAILABLE");
    blocker
        .execute(
            "SELECT pg_advisory_unlock($1, 0)",
            &[&ledger_server::storage::LEDGER_LOCK_CLASS],
        )
        .await
        .unwrap();
    let retry = t
        .post(transfer("cut", "equity:world", "acct:0", "4.00"))
        .await
        .expect("retry works once connections are back");
    assert!(!retry.replayed, "the cut batch had not committed");
    let again = t
        .post(transfer("cut", "equity:world", "acct:0", "4.00"))
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(t.count("postings").await, 1);
    let (ok, report) = ledger_check(&direct).await;
    assert!(ok, "{report}");
}

#[tokio::test]
async fn sigkill_of_the_server_under_load_with_retrying_clients_loses_and_doubles_nothing() {
    let url = pg::shared_cluster().fresh_database().await;
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let spawn = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_ledger"))
            .args(["serve", "--listen", &addr, "--database-url", &url])
            .env("LEDGER_LOG", "warn")
            .spawn()
            .unwrap()
    };
    let mut server = spawn();
    let mut c = lazy_client(&addr);
    let start = Instant::now();
    loop {
        if c.get_account(pb::GetAccountRequest {
            as_of: None,
            ledger: String::new(),
            code: "x".into(),
        })
        .await
        .is_err_and(|s| s.code() == Code::NotFound)
        {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    world_and_one_account(&mut c).await;
    let tally = Arc::new(Tally::default());
    let run = tokio::spawn(load(addr.clone(), 8, 200, tally.clone()));
    for _ in 0..3 {
        until_progress(&tally, tally.ok.load(Ordering::Relaxed), 40).await;
        server.kill().unwrap(); // SIGKILL
        server.wait().unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        server = spawn();
    }
    run.await.unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(
        tally.unknown.load(Ordering::Relaxed) > 0,
        "the kills hit requests in flight"
    );
    assert_exactly_once(&url, 8, 200).await;
}

#[tokio::test]
async fn an_immediate_postgres_restart_under_load_loses_and_doubles_nothing() {
    let (pg, url) = pg::private_cluster().await;
    let mut t = TestLedger::on_database(url.clone()).await;
    world_and_one_account(&mut t.client).await;
    let addr = t.server.as_ref().unwrap().local_addr.to_string();
    let tally = Arc::new(Tally::default());
    let run = tokio::spawn(load(addr, 6, 150, tally.clone()));
    let pg = Arc::new(std::sync::Mutex::new(pg));
    for _ in 0..2 {
        until_progress(&tally, tally.ok.load(Ordering::Relaxed), 40).await;
        let pg = pg.clone();
        tokio::task::spawn_blocking(move || pg.lock().unwrap().restart_immediate().unwrap())
            .await
            .unwrap();
    }
    run.await.unwrap();
    assert_exactly_once(&url, 6, 150).await;
}

#[tokio::test]
async fn terminating_the_pool_connections_under_load_loses_and_doubles_nothing() {
    let mut t = TestLedger::start().await;
    world_and_one_account(&mut t.client).await;
    let addr = t.server.as_ref().unwrap().local_addr.to_string();
    let tally = Arc::new(Tally::default());
    let run = tokio::spawn(load(addr, 6, 60, tally.clone()));
    let admin = t.db().await;
    let mut killed = 0i64;
    while !run.is_finished() {
        tokio::time::sleep(Duration::from_millis(150)).await;
        killed += admin
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                 WHERE datname = current_database() AND application_name = 'ledger' AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0);
    }
    run.await.unwrap();
    assert!(killed > 0);
    assert_exactly_once(&t.database_url, 6, 60).await;
}

fn cluster_pids(postmaster: i32) -> Vec<i32> {
    let mut pids = vec![postmaster];
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit(") ")
            .next()
            .and_then(|s| s.split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if ppid == Some(postmaster) {
            pids.push(pid);
        }
    }
    pids
}

#[tokio::test]
async fn a_stopped_database_ends_requests_at_their_deadline_and_nothing_is_lost() {
    let (pg, url) = pg::private_cluster().await;
    let mut t = TestLedger::on_database(url.clone()).await;
    t.standard_accounts(1).await;
    t.post(transfer("before", "equity:world", "acct:0", "1.00"))
        .await
        .unwrap();
    let pids = cluster_pids(pg.postmaster_pid().unwrap());
    for p in &pids {
        unsafe { libc::kill(*p, libc::SIGSTOP) };
    }
    let mut req = tonic::Request::new(transfer("during", "equity:world", "acct:0", "2.00"));
    req.set_timeout(Duration::from_millis(800));
    let started = Instant::now();
    let answer = t.client.post(req).await;
    let took = started.elapsed();
    for p in &pids {
        unsafe { libc::kill(*p, libc::SIGCONT) };
    }
    let err = answer.expect_err("no answer while the database is stopped");
    assert!(is_unknown(&err), "{err:?}");
    assert!(
        took < Duration::from_secs(3),
        "the request ended near its deadline, took {took:?}"
    );
    // Retry until settled: exactly one posting for the key.
    post_until_settled(
        &mut t,
        transfer("during", "equity:world", "acct:0", "2.00"),
        Duration::from_secs(30),
        Duration::from_millis(100),
    )
    .await
    .unwrap_or_else(|s| panic!("{s:?}"));
    assert_eq!(t.count("postings").await, 2);
    assert_eq!(t.balance("acct:0", None).await.balance, "3.00");
    let (ok, report) = ledger_check(&url).await;
    assert!(ok, "{report}");
}

#[tokio::test]
async fn a_stalled_connection_ends_requests_at_their_deadline_and_the_retry_posts_once() {
    let (proxy, direct, through) = Proxy::to_fresh_database().await;
    let mut t = TestLedger::on_database(through).await;
    t.standard_accounts(1).await;
    proxy.stall();
    let mut req = tonic::Request::new(transfer("stalled", "equity:world", "acct:0", "5.00"));
    req.set_timeout(Duration::from_millis(800));
    let started = Instant::now();
    let err = t
        .client
        .post(req)
        .await
        .expect_err("no answer through a stalled connection");
    assert!(is_unknown(&err), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
    proxy.cut();
    proxy.resume();
    post_until_settled(
        &mut t,
        transfer("stalled", "equity:world", "acct:0", "5.00"),
        Duration::from_secs(60),
        Duration::from_millis(200),
    )
    .await
    .unwrap_or_else(|s| panic!("{s:?}"));
    assert_eq!(t.count("postings").await, 1);
    let (ok, report) = ledger_check(&direct).await;
    assert!(ok, "{report}");
}
