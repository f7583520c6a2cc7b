//! The default mode: `ledger serve` without a database URL runs its own PostgreSQL.

use crate::support::*;
use ledger_server::grpc::pb;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn serve(data_dir: &std::path::Path, port: u16) -> Child {
    serve_with(data_dir, port, &[])
}

fn serve_with(data_dir: &std::path::Path, port: u16, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_ledger"))
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(data_dir)
        .args(extra)
        .env_remove("DATABASE_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("ledger serve starts")
}

async fn sigterm_and_wait(mut child: Child) {
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "exit status {status:?}");
            return;
        }
        assert!(Instant::now() < deadline, "server did not stop on SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn postmaster_alive(data_dir: &std::path::Path) -> bool {
    let pid_file = data_dir.join("pgdata/postmaster.pid");
    let Ok(text) = std::fs::read_to_string(pid_file) else {
        return false;
    };
    let Some(pid) = text
        .lines()
        .next()
        .and_then(|l| l.trim().parse::<i32>().ok())
    else {
        return false;
    };
    // A zombie awaiting its reaper is not running.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.split(") ").nth(1).is_some_and(|s| s.starts_with('Z')),
        Err(_) => false,
    }
}

#[tokio::test]
async fn embedded_default_starts_as_root_keeps_data_across_a_restart_and_leaves_no_postgres_running(
) {
    let dir =
        std::env::temp_dir().join(format!("ledger-embedded-{}", uuid::Uuid::now_v7().simple()));
    let port = free_port();
    let child = serve(&dir, port);
    let mut c = client_when_up(port, Duration::from_secs(60)).await;
    world_and_one_account(&mut c).await;
    c.post(transfer("k", "equity:world", "acct:0", "12.34"))
        .await
        .unwrap();
    drop(c);
    sigterm_and_wait(child).await;
    assert!(
        !postmaster_alive(&dir),
        "PostgreSQL stopped with the server"
    );

    let child = serve(&dir, port);
    let mut c = client_when_up(port, Duration::from_secs(60)).await;
    let b = c
        .get_balance(pb::GetBalanceRequest {
            ledger: String::new(),
            account: "acct:0".into(),
            as_of: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(b.balance, "12.34", "data kept across the restart");
    let replay = c
        .post(transfer("k", "equity:world", "acct:0", "12.34"))
        .await
        .unwrap()
        .into_inner();
    assert!(replay.replayed);
    drop(c);
    sigterm_and_wait(child).await;
    assert!(!postmaster_alive(&dir));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn embedded_postgres_recovers_after_the_server_and_then_postgres_are_killed() {
    let dir =
        std::env::temp_dir().join(format!("ledger-embedded-{}", uuid::Uuid::now_v7().simple()));
    let port = free_port();
    let mut child = serve(&dir, port);
    let mut c = client_when_up(port, Duration::from_secs(60)).await;
    world_and_one_account(&mut c).await;
    c.post(transfer("k1", "equity:world", "acct:0", "1.00"))
        .await
        .unwrap();
    drop(c);
    // Kill the server: its PostgreSQL is left running; the next start must cope.
    child.kill().unwrap();
    child.wait().unwrap();
    let child = serve(&dir, port);
    let mut c = client_when_up(port, Duration::from_secs(60)).await;
    c.post(transfer("k2", "equity:world", "acct:0", "2.00"))
        .await
        .unwrap();
    drop(c);
    // Now kill PostgreSQL itself (an unclean stop), then the server; start again.
    let pid: i32 = std::fs::read_to_string(dir.join("pgdata/postmaster.pid"))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let mut child = child;
    child.kill().unwrap();
    child.wait().unwrap();
    let child = serve(&dir, port);
    let mut c = client_when_up(port, Duration::from_secs(60)).await;
    let b = c
        .get_balance(pb::GetBalanceRequest {
            ledger: String::new(),
            account: "acct:0".into(),
            as_of: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(b.balance, "3.00", "every acknowledged posting survived");
    drop(c);
    sigterm_and_wait(child).await;
    assert!(!postmaster_alive(&dir));
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- A data directory in use: commands beside a live server ------------------------------

/// A data directory of one test, removed when dropped, with any PostgreSQL still running in it
/// (a test that failed half-way leaves none behind).
pub(crate) struct DataDir(pub(crate) std::path::PathBuf);

impl DataDir {
    pub(crate) fn new() -> DataDir {
        DataDir(
            std::env::temp_dir().join(format!("ledger-embedded-{}", uuid::Uuid::now_v7().simple())),
        )
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        if let Some(pid) = postmaster_pid(&self.0) {
            let pgdata = std::fs::canonicalize(self.0.join("pgdata")).ok();
            let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok();
            if pgdata.is_some() && cwd == pgdata {
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A `ledger serve` process, SIGKILLed if the test ends without stopping it.
struct Serve(Option<Child>);

impl Serve {
    fn start(data_dir: &std::path::Path, port: u16) -> Serve {
        Serve(Some(serve(data_dir, port)))
    }

    fn pid(&self) -> u32 {
        self.0.as_ref().expect("running").id()
    }

    async fn stop(mut self) {
        sigterm_and_wait(self.0.take().expect("running")).await;
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The pid in `pgdata/postmaster.pid`, if the postmaster it names is alive.
pub(crate) fn postmaster_pid(data_dir: &std::path::Path) -> Option<i32> {
    let text = std::fs::read_to_string(data_dir.join("pgdata/postmaster.pid")).ok()?;
    let pid = text.lines().next()?.trim().parse::<i32>().ok()?;
    postmaster_alive(data_dir).then_some(pid)
}

/// Runs `ledger ARGS` to its end (at most two minutes: a debug build on a loaded machine).
pub(crate) async fn ledger_command(args: &[&std::ffi::OsStr]) -> std::process::Output {
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledger"))
        .args(args)
        .env_remove("DATABASE_URL")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the command ends within two minutes")
        .expect("the command runs")
}

/// The server on `port` still answers as before: its PostgreSQL is the same process
/// (`postmaster`), health says SERVING after the probe had time to look again, and a Post
/// commits.
async fn assert_still_serving(data_dir: &std::path::Path, postmaster: i32, port: u16, key: &str) {
    // Long enough for the health probe to have seen a stopped database (it looks every 2 s).
    tokio::time::sleep(ledger_server::server::HEALTH_PROBE_INTERVAL * 3).await;
    assert_eq!(
        postmaster_pid(data_dir),
        Some(postmaster),
        "the server's PostgreSQL is still the one it started"
    );
    let channel = tonic::transport::Channel::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect()
        .await
        .expect("the server still accepts connections");
    let health = tonic_health::pb::health_client::HealthClient::new(channel.clone())
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("health answers")
        .into_inner();
    assert_eq!(
        health.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32,
        "health after the command"
    );
    pb::ledger_client::LedgerClient::new(channel)
        .post(transfer(key, "equity:world", "acct:0", "1.00"))
        .await
        .expect("a Post after the command commits");
}

/// `check` or `migrate` on the data directory of a live `ledger serve`, then the server must
/// be as it was.
async fn command_beside_a_live_server(command: &str) -> String {
    let dir = DataDir::new();
    let port = free_port();
    let server = Serve::start(&dir.0, port);
    let mut c = client_when_up(port, Duration::from_secs(60)).await;
    world_and_one_account(&mut c).await;
    let postmaster = postmaster_pid(&dir.0).expect("the server's PostgreSQL runs");

    let out = ledger_command(&[command.as_ref(), "--data-dir".as_ref(), dir.0.as_os_str()]).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "ledger {command}: {:?}\n{stderr}",
        out.status
    );
    assert_still_serving(&dir.0, postmaster, port, &format!("after-{command}")).await;
    assert!(
        stderr.contains(&format!("ledger serve` (pid {})", server.pid()))
            && stderr.contains("stays running"),
        "ledger {command} says whose PostgreSQL it used: {stderr}"
    );
    server.stop().await;
    assert!(
        !postmaster_alive(&dir.0),
        "the server stopped its PostgreSQL"
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn check_beside_a_live_server_leaves_its_postgres_running_and_the_server_serving() {
    let stdout = command_beside_a_live_server("check").await;
    assert!(
        stdout.contains("invariants checked, 0 violated"),
        "{stdout}"
    );
}

#[tokio::test]
async fn migrate_beside_a_live_server_leaves_its_postgres_running_and_the_server_serving() {
    let stdout = command_beside_a_live_server("migrate").await;
    assert!(stdout.contains("none (up to date)"), "{stdout}");
}

#[tokio::test]
async fn a_second_serve_on_a_data_dir_in_use_refuses_at_once_naming_the_first_ones_pid() {
    let dir = DataDir::new();
    let port = free_port();
    let first = Serve::start(&dir.0, port);
    let mut c = client_when_up(port, Duration::from_secs(60)).await;
    world_and_one_account(&mut c).await;
    let postmaster = postmaster_pid(&dir.0).expect("the first server's PostgreSQL runs");

    // Another port: the refusal is about the data directory, not a clash of addresses.
    let other_port = free_port();
    let began = Instant::now();
    let second = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledger"))
        .args(["serve", "--listen", &format!("127.0.0.1:{other_port}")])
        .arg("--data-dir")
        .arg(&dir.0)
        .env_remove("DATABASE_URL")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    // "At once": it does no work before refusing; 10 s is for a loaded 2-core machine.
    let out = tokio::time::timeout(Duration::from_secs(10), second)
        .await
        .expect("the second serve exits at once instead of serving")
        .unwrap();
    let took = began.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{:?}\n{stderr}", out.status);
    assert!(
        stderr.contains(&format!(
            "is in use by `ledger serve` (pid {})",
            first.pid()
        )),
        "the refusal names the first server's pid: {stderr}"
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", other_port)).is_err(),
        "the second serve never listened"
    );
    eprintln!("the second serve refused in {took:?}");
    assert_still_serving(&dir.0, postmaster, port, "after-second-serve").await;
    first.stop().await;
}

// ---- The embedded default's database login ------------------------------------------------

/// A superuser session on the embedded PostgreSQL of `data_dir`, to look at it from outside.
pub(crate) async fn embedded_superuser(data_dir: &std::path::Path) -> tokio_postgres::Client {
    let socket_dir = ledger_server::embedded_pg::EmbeddedPg::socket_dir_for(
        &std::fs::canonicalize(data_dir).unwrap(),
    );
    let url = format!(
        "host={} port=5432 user=postgres dbname=ledger application_name=test-probe",
        socket_dir.display()
    );
    ledger_server::storage::connect(&url)
        .await
        .expect("the embedded PostgreSQL answers")
}

#[tokio::test]
async fn the_embedded_server_and_its_outbox_publisher_log_in_as_a_login_that_is_no_superuser() {
    let dir = DataDir::new();
    let port = free_port();
    // A broker nobody listens on: the publisher still takes its database session and lock.
    let nats = format!("nats://127.0.0.1:{}", free_port());
    let server = Serve(Some(serve_with(&dir.0, port, &["--nats-url", &nats])));
    let mut c = client_when_up(port, Duration::from_secs(60)).await;
    world_and_one_account(&mut c).await;
    c.post(transfer("k", "equity:world", "acct:0", "1.00"))
        .await
        .unwrap();
    let db = embedded_superuser(&dir.0).await;
    let publisher_lock = ledger_server::storage::PUBLISHER_LOCK & 0xffff_ffff;
    let began = Instant::now();
    let publisher = loop {
        let row = db
            .query_opt(
                "SELECT a.usename::text FROM pg_locks l JOIN pg_stat_activity a USING (pid)
                 WHERE l.locktype = 'advisory' AND l.granted AND l.objid = $1::bigint::oid",
                &[&publisher_lock],
            )
            .await
            .unwrap();
        if let Some(row) = row {
            break row.get::<_, String>(0);
        }
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "the publisher never took its lock"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(publisher, "ledger_svc", "the outbox publisher's login");
    let logins: Vec<String> = db
        .query(
            "SELECT DISTINCT usename::text FROM pg_stat_activity
             WHERE datname = 'ledger' AND backend_type = 'client backend'
               AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(logins, ["ledger_svc"], "every session of the server");
    let role = db
        .query_one(
            "SELECT rolcanlogin, rolsuper, rolcreaterole, rolcreatedb, rolreplication,
                    rolbypassrls, pg_has_role(oid, 'ledger_app', 'MEMBER'),
                    pg_has_role(oid, 'postgres', 'MEMBER')
             FROM pg_roles WHERE rolname = 'ledger_svc'",
            &[],
        )
        .await
        .unwrap();
    let facts: Vec<bool> = (0..8).map(|i| role.get(i)).collect();
    assert_eq!(
        facts,
        [true, false, false, false, false, false, true, false],
        "LOGIN, no SUPERUSER/CREATEROLE/CREATEDB/REPLICATION/BYPASSRLS, a member of ledger_app \
         and not of postgres"
    );
    server.stop().await;
}

#[tokio::test]
async fn check_after_the_server_was_killed_adopts_its_orphaned_postgres_and_stops_it() {
    let dir = DataDir::new();
    let port = free_port();
    let mut server = Serve::start(&dir.0, port);
    let mut c = client_when_up(port, Duration::from_secs(60)).await;
    world_and_one_account(&mut c).await;
    drop(c);
    // SIGKILL: the lock goes with the process, its PostgreSQL stays behind without an owner.
    let mut child = server.0.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(postmaster_alive(&dir.0), "PostgreSQL outlived its server");

    let out = ledger_command(&["check".as_ref(), "--data-dir".as_ref(), dir.0.as_os_str()]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}\n{stderr}", out.status);
    assert!(
        !stderr.contains("stays running"),
        "nobody else holds it: {stderr}"
    );
    assert!(
        !postmaster_alive(&dir.0),
        "check stopped the PostgreSQL it adopted: {stderr}"
    );
}
