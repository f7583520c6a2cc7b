//! Client commands piped into a reader that stops reading (`ledger report … | head -3`).

use crate::support::*;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::Stdio;
use std::time::Duration;

/// The write end of a pipe whose read end is already closed: every write to it fails with
/// `EPIPE` (and raises SIGPIPE), as a write after `head` exited does.
fn pipe_without_reader() -> OwnedFd {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 returns.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both descriptors are new and owned by nothing else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    write
}

/// Runs `ledger ARGS` with its stdout going into a pipe nobody reads.
async fn run_into_a_closed_pipe(args: &[&str]) -> std::process::Output {
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledger"))
        .args(args)
        .env_remove("DATABASE_URL")
        .env("LEDGER_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::from(pipe_without_reader()))
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        // Not `output()`, which would replace stdout with a pipe of its own.
        .spawn()
        .expect("the command starts")
        .wait_with_output();
    tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the command ends within two minutes")
        .expect("the command's output")
}

#[tokio::test]
async fn client_commands_whose_reader_closed_the_pipe_exit_quietly_with_their_own_status() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(2).await;
    t.post(transfer("k", "equity:world", "acct:0", "1.00"))
        .await
        .unwrap();
    let server = format!("http://{}", t.server.as_ref().unwrap().local_addr);
    let url = t.database_url.clone();
    let commands: [&[&str]; 6] = [
        &["report", "trial-balance", "--server", &server],
        &[
            "report",
            "trial-balance",
            "--server",
            &server,
            "--format",
            "csv",
        ],
        &["report", "statement", "acct:0", "--server", &server],
        &["check", "--database-url", &url],
        &["migrate", "--database-url", &url],
        &["token", "new", "payments", "writer"],
    ];
    for args in commands {
        let out = run_into_a_closed_pipe(args).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "ledger {args:?} says nothing about the closed pipe: {stderr}"
        );
        // Not killed by a signal (SIGPIPE, or SIGABRT under panic = "abort"), not a panic's 101:
        // the command's own status, success for each of these.
        assert_eq!(
            out.status.code(),
            Some(0),
            "ledger {args:?}: {:?}\n{stderr}",
            out.status
        );
    }
}
