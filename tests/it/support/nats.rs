//! A real `nats-server -js` per test (on a free port, storing in its own temp directory,
//! killed and removed on drop), real `ledger relay` processes, and a reader of the stream.
#![allow(dead_code)]

use super::free_port;
use async_nats::jetstream::{self, consumer};
use futures_util::StreamExt;
use ledger_server::grpc::pb;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A directory under the temp dir, unique to this process and call.
fn unique_dir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "ledger-{what}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn nats_server_bin() -> &'static str {
    if Path::new("/usr/sbin/nats-server").exists() {
        "/usr/sbin/nats-server"
    } else {
        "nats-server"
    }
}

/// A JetStream-enabled nats-server of this test.
pub struct NatsServer {
    child: Option<Child>,
    dir: PathBuf,
    port: u16,
}

impl NatsServer {
    /// Starts a server and waits until JetStream answers.
    pub async fn start() -> NatsServer {
        let mut s = NatsServer {
            child: None,
            dir: unique_dir("nats"),
            port: free_port(),
        };
        s.start_again().await;
        s
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Kills the server (SIGKILL: a crash, not a goodbye) and waits until it is gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server again on the same port and store.
    pub async fn start_again(&mut self) {
        assert!(self.child.is_none(), "nats-server already running");
        let log = std::fs::File::create(self.dir.join("nats.log")).unwrap();
        let child = Command::new(nats_server_bin())
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-sd",
            ])
            .arg(self.dir.join("store"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("nats-server starts (apt-get install nats-server)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let last = match async_nats::connect(self.url()).await {
                Ok(client) => match client.request("$JS.API.INFO", "".into()).await {
                    Ok(_) => return,
                    Err(e) => e.to_string(),
                },
                Err(e) => e.to_string(),
            };
            assert!(
                Instant::now() < deadline,
                "nats-server not ready ({last}); log: {}",
                std::fs::read_to_string(self.dir.join("nats.log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A JetStream context on this server.
    pub async fn jetstream(&self) -> jetstream::Context {
        jetstream::new(
            async_nats::connect(self.url())
                .await
                .expect("nats connects"),
        )
    }

    /// Every message of the stream `LEDGER`, read with a JetStream consumer, in stream order.
    pub async fn read_stream(&self) -> Vec<StreamEvent> {
        read_stream_at(&self.url()).await
    }
}

/// Every message of the stream `LEDGER` of the server (or cluster) at `url`, read with a
/// JetStream consumer, in stream order.
pub async fn read_stream_at(url: &str) -> Vec<StreamEvent> {
    {
        let servers = ledger_server::outbox::nats_servers(url).unwrap();
        let js = jetstream::new(async_nats::connect(servers).await.expect("nats connects"));
        let mut stream = match js.get_stream(ledger_server::outbox::STREAM).await {
            Ok(s) => s,
            Err(_) => return Vec::new(),
        };
        let n = stream.info().await.unwrap().state.messages as usize;
        if n == 0 {
            return Vec::new();
        }
        let consumer = stream
            .create_consumer(consumer::pull::Config {
                deliver_policy: consumer::DeliverPolicy::All,
                ack_policy: consumer::AckPolicy::None,
                ..Default::default()
            })
            .await
            .unwrap();
        let (mut out, mut seen) = (Vec::with_capacity(n), 0);
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
                seen += 1;
                // Posting events only: digests (ledger.digests.*) share the stream.
                if m.subject
                    .starts_with(ledger_server::outbox::DIGEST_SUBJECT_PREFIX)
                {
                    continue;
                }
                let info = m.info().unwrap();
                let msg_id = m
                    .headers
                    .as_ref()
                    .and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID))
                    .map(|v| v.as_str().to_owned())
                    .unwrap_or_else(|| panic!("every event has a Nats-Msg-Id: {:?}", m.headers));
                let event: pb::PostingEvent =
                    prost::Message::decode(m.payload.as_ref()).expect("payload is a PostingEvent");
                out.push(StreamEvent {
                    stream_sequence: info.stream_sequence,
                    subject: m.subject.to_string(),
                    msg_id,
                    ledger: event.ledger,
                    posting: event.posting.expect("event holds a posting"),
                });
            }
            assert!(
                seen > before,
                "stream reports {n} messages, consumer got {seen}"
            );
        }
        out
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One message of the stream, decoded.
#[derive(Clone, Debug)]
pub struct StreamEvent {
    pub stream_sequence: u64,
    pub subject: String,
    pub msg_id: String,
    /// The `PostingEvent`'s ledger code.
    pub ledger: String,
    pub posting: pb::Posting,
}

/// A real `ledger relay` process, its log kept in a file; killed (SIGKILL) on drop.
pub struct Relay {
    child: Option<Child>,
    dir: PathBuf,
}

impl Relay {
    /// Starts `ledger relay` with these extra arguments and (optionally) a failpoint.
    pub fn start(
        database_url: &str,
        nats_url: &str,
        args: &[&str],
        failpoint: Option<&str>,
    ) -> Relay {
        let dir = unique_dir("relay");
        let log = std::fs::File::create(dir.join("relay.log")).unwrap();
        // LEDGER_RELAY_BIN: another build of the binary (measurements with a release build).
        let bin = std::env::var("LEDGER_RELAY_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_ledger").to_owned());
        let mut cmd = Command::new(bin);
        cmd.arg("relay")
            .args(["--database-url", database_url, "--nats-url", nats_url])
            .args(args)
            .env("LEDGER_LOG", "info")
            .env_remove(ledger_server::outbox::FAILPOINT_ENV)
            .env_remove("DATABASE_URL")
            .stdout(Stdio::null())
            .stderr(log);
        if let Some(fp) = failpoint {
            cmd.env(ledger_server::outbox::FAILPOINT_ENV, fp);
            // A failpoint aborts the process: no core file for that.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                    let none = libc::rlimit {
                        rlim_cur: 0,
                        rlim_max: 0,
                    };
                    libc::setrlimit(libc::RLIMIT_CORE, &none);
                    Ok(())
                });
            }
        }
        Relay {
            child: Some(cmd.spawn().expect("ledger relay starts")),
            dir,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// What it logged so far (colours removed).
    pub fn log(&self) -> String {
        strip_ansi(&std::fs::read_to_string(self.dir.join("relay.log")).unwrap_or_default())
    }

    /// SIGKILL, and wait for it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, and wait for its exit status.
    pub async fn terminate(&mut self) -> ExitStatus {
        unsafe { libc::kill(self.pid(), libc::SIGTERM) };
        self.wait_exit(Duration::from_secs(15)).await
    }

    /// Waits for it to exit by itself.
    pub async fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "relay still running after {timeout:?}; log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until its log contains `text`.
    pub async fn wait_for_log(&self, text: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.log().contains(text) {
            assert!(
                Instant::now() < deadline,
                "relay did not log {text:?} within {timeout:?}; log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Text without ANSI escape sequences (`ESC [ … letter`).
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The outbox backlog of a database over every ledger, read with
/// `ledger_server::outbox::backlog`.
pub async fn backlog(database_url: &str) -> ledger_server::outbox::Backlog {
    let pool = ledger_server::storage::pool(database_url, 1).unwrap();
    let client = pool.get().await.unwrap();
    ledger_server::outbox::backlog(&client).await.unwrap()
}

/// The outbox backlog of one ledger (by id), read with `ledger_server::outbox::ledger_backlog`.
pub async fn ledger_backlog(
    database_url: &str,
    ledger: i32,
) -> ledger_server::outbox::LedgerBacklog {
    let pool = ledger_server::storage::pool(database_url, 1).unwrap();
    let client = pool.get().await.unwrap();
    ledger_server::outbox::ledger_backlog(&client, ledger)
        .await
        .unwrap()
}

/// The last sequence (within the ledger `default`) whose event the broker acknowledged.
pub async fn published(database_url: &str) -> i64 {
    ledger_backlog(database_url, ledger_core::ledger::DEFAULT_LEDGER_ID)
        .await
        .published_sequence
}

/// Waits until every outbox event is delivered (panics after `timeout`).
pub async fn wait_delivered(database_url: &str, timeout: Duration) -> Duration {
    let began = Instant::now();
    loop {
        let b = backlog(database_url).await;
        if b.pending == 0 {
            return began.elapsed();
        }
        assert!(
            began.elapsed() < timeout,
            "{} events still pending after {timeout:?} ({b:?})",
            b.pending
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
