//! The default mode: `ledger serve` without a database URL runs its own PostgreSQL.

use crate::support::*;
use ledger::grpc::pb;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn serve(data_dir: &std::path::Path, port: u16) -> Child {
    Command::new(env!("CARGO_BIN_EXE_ledger"))
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(data_dir)
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
