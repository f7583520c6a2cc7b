//! The embedded PostgreSQL of `ledger serve` dies under load (its postmaster SIGKILLed): the
//! server brings it back within its bound and carries on, losing and doubling nothing; when
//! it cannot, it exits non-zero so that a supervisor restarts it.

use crate::embedded::{embedded_superuser, ledger_command, postmaster_pid, DataDir};
use crate::faults::is_unknown;
use crate::support::nats::{wait_delivered, NatsServer};
use crate::support::*;
use ledger_server::embedded_pg::recovery::{EMBEDDED_PG_RECOVERY_MAX, POSTMASTER_WATCH_INTERVAL};
use ledger_server::grpc::convert::time_to_pb;
use ledger_server::grpc::pb;
use ledger_server::grpc::pb::ledger_client::LedgerClient;
use ledger_server::server::{HEALTH_PROBE_INTERVAL, HEALTH_PROBE_TIMEOUT};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;

/// From the kill to serving again, at most: the server notices the death within its watch
/// interval, has PostgreSQL back within its bound, and health looks again within a probe.
fn serving_again_max() -> Duration {
    POSTMASTER_WATCH_INTERVAL
        + EMBEDDED_PG_RECOVERY_MAX
        + HEALTH_PROBE_INTERVAL
        + HEALTH_PROBE_TIMEOUT
}

/// A `ledger serve` process on the embedded PostgreSQL of a data directory, its stderr in a
/// file beside it (not inside: the data directory holds only what the server puts there);
/// SIGKILLed if the test ends without stopping it.
struct Server {
    child: Option<Child>,
    port: u16,
    log: PathBuf,
}

impl Server {
    fn start(data_dir: &Path, port: u16, extra: &[&str]) -> Server {
        let log = data_dir.with_extension("serve.log");
        let child = Command::new(env!("CARGO_BIN_EXE_ledger"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .arg("--data-dir")
            .arg(data_dir)
            .args(extra)
            .env_remove("DATABASE_URL")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("ledger serve starts");
        Server {
            child: Some(child),
            port,
            log,
        }
    }

    /// The server's log so far.
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// How it ended, once it has.
    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.as_mut().expect("started").try_wait().unwrap()
    }

    /// SIGTERM, then it must end with success (within 30 s).
    async fn stop(mut self) {
        let pid = self.child.as_ref().expect("started").id() as i32;
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = self.exited() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "no stop on SIGTERM:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(status.success(), "{status:?}:\n{}", self.log());
        self.child = None;
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

/// A connection string of the embedded PostgreSQL of `data_dir`, as its superuser.
fn superuser_url(data_dir: &Path) -> String {
    let socket_dir = ledger_server::embedded_pg::EmbeddedPg::socket_dir_for(
        &std::fs::canonicalize(data_dir).unwrap(),
    );
    format!(
        "host={} port=5432 user=postgres dbname=ledger",
        socket_dir.display()
    )
}

/// A client that connects when first used and again after a failure.
fn lazy_client(port: u16) -> LedgerClient<Channel> {
    let channel = Channel::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(1))
        .connect_lazy();
    LedgerClient::new(channel)
}

/// Callers posting one key after another, each retried with its key until it is acknowledged.
#[derive(Default)]
struct Load {
    /// The acknowledged keys.
    acked: Mutex<Vec<String>>,
    /// Answers that left the outcome unknown (then retried).
    unknown: AtomicU64,
    /// Set: each caller stops after settling the key it is on.
    stop: AtomicBool,
}

impl Load {
    fn acked(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    /// Posts `req` until it is acknowledged (at most two minutes), then records its key.
    async fn post_until_acked(&self, c: &mut LedgerClient<Channel>, req: pb::PostRequest) {
        let began = Instant::now();
        loop {
            let mut call = tonic::Request::new(req.clone());
            call.set_timeout(Duration::from_secs(3));
            match c.post(call).await {
                Ok(_) => break,
                Err(s) if is_unknown(&s) => {
                    self.unknown.fetch_add(1, Ordering::Relaxed);
                    assert!(
                        began.elapsed() < Duration::from_secs(120),
                        "{}: no answer: {s:?}",
                        req.idempotency_key
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(s) => panic!("{}: a definite failure: {s:?}", req.idempotency_key),
            }
        }
        self.acked.lock().unwrap().push(req.idempotency_key);
    }

    /// `callers` callers posting 1.00 from the world to acct:0 until told to stop.
    fn run(self: &Arc<Self>, port: u16, callers: usize) -> tokio::task::JoinHandle<()> {
        let tasks: Vec<_> = (0..callers)
            .map(|c| {
                let load = self.clone();
                tokio::spawn(async move {
                    let mut client = lazy_client(port);
                    for j in 0.. {
                        if load.stop.load(Ordering::Relaxed) {
                            return;
                        }
                        let req = transfer(&format!("c{c}-{j}"), "equity:world", "acct:0", "1.00");
                        load.post_until_acked(&mut client, req).await;
                    }
                })
            })
            .collect();
        tokio::spawn(async move {
            for t in tasks {
                t.await.unwrap();
            }
        })
    }

    /// Waits until `n` more keys are acknowledged, so that a kill lands while posts are in
    /// flight.
    async fn until_progress(&self, n: usize) {
        let (since, began) = (self.acked(), Instant::now());
        while self.acked() < since + n {
            assert!(began.elapsed() < Duration::from_secs(60), "no progress");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// The server's health for the whole server, or `None` when it does not answer.
async fn health(port: u16) -> Option<i32> {
    let channel = Channel::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(1));
    let channel = channel.connect().await.ok()?;
    let mut check = tonic::Request::new(tonic_health::pb::HealthCheckRequest {
        service: String::new(),
    });
    check.set_timeout(Duration::from_secs(1));
    let answer = tonic_health::pb::health_client::HealthClient::new(channel)
        .check(check)
        .await
        .ok()?;
    Some(answer.into_inner().status)
}

/// How long after a kill the server served again.
struct Recovery {
    /// The first Post accepted on the new postmaster.
    posted: Duration,
    /// Health SERVING after that Post.
    serving: Duration,
}

/// SIGKILLs the postmaster of the server's PostgreSQL; then, within [`serving_again_max`] of
/// the kill, a new postmaster must run, a probe Post (its own key, retried) be accepted and
/// health say SERVING. (A Post may still commit just after the kill, on a backend that has not
/// noticed yet: only one after the new postmaster counts.)
async fn kill_postmaster_and_time_recovery(
    dir: &Path,
    server: &mut Server,
    load: &Load,
    round: usize,
) -> Recovery {
    let postmaster = postmaster_pid(dir).expect("the server's PostgreSQL runs");
    unsafe { libc::kill(postmaster, libc::SIGKILL) };
    let killed = Instant::now();
    let bound = serving_again_max();
    let within_bound = |server: &mut Server, what: &str| {
        assert!(
            server.exited().is_none(),
            "the server exited:\n{}",
            server.log()
        );
        assert!(
            killed.elapsed() < bound,
            "{what} within {bound:?} of the kill; server log:\n{}",
            server.log()
        );
    };
    while postmaster_pid(dir).is_none_or(|now| now == postmaster) {
        within_bound(server, "no PostgreSQL started again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut probe = lazy_client(server.port);
    let req = transfer(&format!("probe-{round}"), "equity:world", "acct:0", "1.00");
    loop {
        let mut call = tonic::Request::new(req.clone());
        call.set_timeout(Duration::from_secs(1));
        match probe.post(call).await {
            Ok(_) => break,
            Err(s) if is_unknown(&s) => within_bound(server, &format!("no Post accepted ({s:?})")),
            Err(s) => panic!("the probe Post failed: {s:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    load.acked.lock().unwrap().push(req.idempotency_key);
    let posted = killed.elapsed();
    while health(server.port).await != Some(ServingStatus::Serving as i32) {
        within_bound(server, "health not SERVING");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Recovery {
        posted,
        serving: killed.elapsed(),
    }
}

/// A superuser session spinning in a loop that never waits (so it does not notice the
/// postmaster's death; nor does it use memory or disk): after a kill it stays behind, attached
/// to the old shared memory.
async fn busy_backend(dir: &Path) -> tokio::task::JoinHandle<()> {
    let busy = embedded_superuser(dir).await;
    let task = tokio::spawn(async move {
        let _ = busy
            .batch_execute("DO $busy$ BEGIN LOOP END LOOP; END $busy$")
            .await;
    });
    let db = embedded_superuser(dir).await;
    let began = Instant::now();
    while db
        .query_one(
            "SELECT count(*) FROM pg_stat_activity
             WHERE state = 'active' AND query LIKE 'DO $busy$%' AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get::<_, i64>(0)
        == 0
    {
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "the busy query never ran"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    task
}

/// A hold of 1.00 on acct:0 that expires in a second; its posting id.
async fn expiring_hold(c: &mut LedgerClient<Channel>) -> String {
    let until = time::OffsetDateTime::now_utc() + time::Duration::seconds(1);
    let req = pb::PostRequest {
        hold: true,
        hold_expires_at: Some(time_to_pb(until)),
        ..transfer("expiring-hold", "equity:world", "acct:0", "1.00")
    };
    let posting = c.post(req).await.unwrap().into_inner().posting.unwrap();
    posting.posting_id
}

/// Every acknowledged key recorded once, no other posting of the callers, the balance their
/// sum, `ledger check` passing (beside the live server).
async fn assert_each_acknowledged_key_recorded_once(dir: &Path, load: &Load) {
    let db = embedded_superuser(dir).await;
    let mut acked = load.acked.lock().unwrap().clone();
    acked.sort();
    let mut recorded: Vec<String> = db
        .query(
            "SELECT idempotency_key FROM postings WHERE idempotency_key ~ '^(c|probe-)'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    recorded.sort();
    assert_eq!(recorded.len(), acked.len(), "postings of the callers");
    assert_eq!(recorded, acked, "each acknowledged key once, and no other");
    let balance: String = db
        .query_one(
            "SELECT (debits - credits)::text FROM account_totals JOIN accounts USING (account_id)
             WHERE code = 'acct:0'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(balance, format!("{}.00", acked.len()));
    let out = ledger_command(&["check".as_ref(), "--data-dir".as_ref(), dir.as_os_str()]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(", 0 violated"),
        "ledger check: {:?}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// After the recoveries: the expiry task released the hold that expired after the last kill,
/// the server's sessions are its service login's, and the outbox publisher delivered every
/// event.
async fn assert_the_background_work_carried_on(dir: &Path, hold: &str) {
    let db = embedded_superuser(dir).await;
    let began = Instant::now();
    while db
        .query_one(
            "SELECT count(*) FROM postings WHERE closes_hold_posting_id = $1::text::uuid",
            &[&hold],
        )
        .await
        .unwrap()
        .get::<_, i64>(0)
        == 0
    {
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "the hold was never released"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let logins: Vec<String> = db
        .query(
            "SELECT DISTINCT usename::text FROM pg_stat_activity
             WHERE datname = 'ledger' AND backend_type = 'client backend'
               AND application_name <> 'test-probe' AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        logins,
        ["ledger_svc"],
        "the server's sessions after the recoveries"
    );
    wait_delivered(&superuser_url(dir), Duration::from_secs(60)).await;
}

#[tokio::test]
async fn a_sigkilled_embedded_postgres_under_load_is_back_within_its_bound_losing_and_doubling_nothing(
) {
    let dir = DataDir::new();
    let port = free_port();
    let nats = NatsServer::start().await;
    let mut server = Server::start(&dir.0, port, &["--nats-url", &nats.url()]);
    let mut c = client_when_up(port, Duration::from_secs(60)).await;
    world_and_one_account(&mut c).await;
    let load = Arc::new(Load::default());
    let callers = load.run(port, 8);
    let mut recoveries = Vec::new();
    let mut hold = String::new();
    for round in 0..3 {
        load.until_progress(40).await;
        // The first kill leaves a backend behind that still holds the old shared memory.
        let busy = if round == 0 {
            Some(busy_backend(&dir.0).await)
        } else {
            None
        };
        if round == 2 {
            hold = expiring_hold(&mut c).await;
        }
        let r = kill_postmaster_and_time_recovery(&dir.0, &mut server, &load, round).await;
        eprintln!(
            "recovery {round}: a Post accepted {:?} after the kill, health SERVING after {:?}",
            r.posted, r.serving
        );
        recoveries.push(r);
        if let Some(busy) = busy {
            busy.abort();
        }
    }
    assert!(
        server
            .log()
            .contains("backends of the dead postmaster still run after ORPHANS_EXIT_WAIT"),
        "the first kill left the busy backend behind, to be killed:\n{}",
        server.log()
    );
    load.until_progress(40).await;
    load.stop.store(true, Ordering::Relaxed);
    callers.await.unwrap();
    assert!(
        load.unknown.load(Ordering::Relaxed) > 0,
        "the kills hit posts in flight"
    );
    let slowest = recoveries.iter().map(|r| r.serving).max().unwrap();
    eprintln!(
        "{} keys acknowledged, {} unknown outcomes retried; serving again at most {slowest:?} \
         after a kill",
        load.acked(),
        load.unknown.load(Ordering::Relaxed)
    );
    assert_each_acknowledged_key_recorded_once(&dir.0, &load).await;
    assert_the_background_work_carried_on(&dir.0, &hold).await;
    server.stop().await;
    assert_eq!(
        postmaster_pid(&dir.0),
        None,
        "the server stopped its PostgreSQL"
    );
}

#[tokio::test]
async fn an_embedded_postgres_that_cannot_start_again_makes_the_server_exit_non_zero_naming_the_bound(
) {
    let dir = DataDir::new();
    let port = free_port();
    let mut server = Server::start(&dir.0, port, &[]);
    let mut c = client_when_up(port, Duration::from_secs(60)).await;
    world_and_one_account(&mut c).await;
    // PostgreSQL refuses to start on a data directory others may read.
    let pgdata = dir.0.join("pgdata");
    std::fs::set_permissions(&pgdata, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let postmaster = postmaster_pid(&dir.0).expect("the server's PostgreSQL runs");
    unsafe { libc::kill(postmaster, libc::SIGKILL) };
    let killed = Instant::now();
    let bound = serving_again_max();
    let status = loop {
        if let Some(status) = server.exited() {
            break status;
        }
        assert!(
            killed.elapsed() < bound,
            "the server neither recovered nor exited within {bound:?}; log:\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let log = server.log();
    eprintln!("exited {status:?} {:?} after the kill", killed.elapsed());
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains("EMBEDDED_PG_RECOVERY_MAX") && log.contains("invalid permissions"),
        "the exit names the bound and PostgreSQL's reason: {log}"
    );
    assert_eq!(postmaster_pid(&dir.0), None, "no PostgreSQL left running");
}
