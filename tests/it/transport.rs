//! The transport against outsiders: deadlines answered `DEADLINE_EXCEEDED` with the ledger's
//! `ErrorInfo`, one connection that never reads its responses, silent connections beyond the
//! open-file limit. Clients here are raw HTTP/2 (the `h2` crate) where a gRPC client would get
//! in the way (tonic's client enforces `grpc-timeout` itself and would race the server).

use crate::support::*;
use bytes::Bytes;
use ledger_server::grpc::pb;
use prost::Message;
use std::net::SocketAddr;
use std::time::Duration;
use tonic::codegen::http;
use tonic::Code;

// ---- A raw HTTP/2 client ----------------------------------------------------------------

/// One HTTP/2 connection of the `h2` crate; its connection task runs until the server closes.
struct RawH2 {
    send: h2::client::SendRequest<Bytes>,
    conn: tokio::task::JoinHandle<Result<(), h2::Error>>,
}

/// Connects with this initial stream window (0: the server may send no response bytes until
/// the client releases capacity, which the attacker never does).
async fn raw_h2(addr: SocketAddr, stream_window: u32) -> RawH2 {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .expect("TCP connect");
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(stream_window)
        .handshake::<_, Bytes>(tcp)
        .await
        .expect("HTTP/2 handshake");
    RawH2 {
        send,
        conn: tokio::spawn(conn),
    }
}

fn grpc_frame(payload: &[u8]) -> Bytes {
    let mut b = Vec::with_capacity(payload.len() + 5);
    b.push(0);
    b.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    b.extend_from_slice(payload);
    b.into()
}

/// Starts a call to `ledger.v1.Ledger/{method}` with these extra headers; `None` when the
/// connection has no stream to give within `wait`.
async fn start_call(
    h2: &h2::client::SendRequest<Bytes>,
    method: &str,
    msg: Bytes,
    headers: &[(&str, &str)],
    wait: Duration,
) -> Option<h2::client::ResponseFuture> {
    let mut req = http::Request::builder()
        .method("POST")
        .uri(format!("http://ledger.test/ledger.v1.Ledger/{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut ready = tokio::time::timeout(wait, h2.clone().ready())
        .await
        .ok()?
        .ok()?;
    let (resp, mut body) = ready.send_request(req.body(()).unwrap(), false).ok()?;
    body.send_data(grpc_frame(&msg), true).ok()?;
    Some(resp)
}

/// Reads a call's answer to its end and returns its status.
async fn status_of(resp: h2::client::ResponseFuture) -> tonic::Status {
    let resp = resp.await.expect("response headers");
    let (parts, mut body) = resp.into_parts();
    if let Some(s) = tonic::Status::from_header_map(&parts.headers) {
        return s;
    }
    while let Some(chunk) = body.data().await {
        let chunk = chunk.expect("response body");
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    let trailers = body.trailers().await.expect("trailers").unwrap_or_default();
    tonic::Status::from_header_map(&trailers).expect("a grpc-status in the trailers")
}

// ---- The real binary -----------------------------------------------------------------------

/// The `ledger` binary serving on a test database, with its own process id (its RSS and CPU
/// are its own, not the test process's).
struct Spawned {
    child: tokio::process::Child,
    addr: SocketAddr,
}

impl Spawned {
    fn pid(&self) -> i32 {
        self.child.id().expect("running") as i32
    }
}

/// Starts `ledger serve` on `url` with extra environment and, if given, a soft = hard limit of
/// open files; waits until it answers.
async fn spawn_ledger(
    url: &str,
    envs: &[(&str, &str)],
    nofile: Option<u64>,
    stderr: Option<std::fs::File>,
) -> Spawned {
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledger"));
    cmd.args([
        "serve",
        "--listen",
        &addr.to_string(),
        "--database-url",
        url,
    ])
    .args(["--db-role", ledger_server::storage::APP_ROLE])
    .env("LEDGER_LOG", "warn")
    .envs(envs.iter().copied())
    .stdin(std::process::Stdio::null())
    .kill_on_drop(true);
    if let Some(f) = stderr {
        cmd.stderr(f);
    }
    if let Some(n) = nofile {
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit {
                    rlim_cur: n,
                    rlim_max: n,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let child = cmd.spawn().expect("ledger starts");
    let _ = client_when_up(addr.port(), Duration::from_secs(30)).await;
    Spawned { child, addr }
}

// ---- Deadlines (D5) ----------------------------------------------------------------------

/// Holds every journal table locked (ACCESS EXCLUSIVE) until dropped: every call that reads or
/// writes the journal waits, so a deadline surely passes first.
async fn lock_the_journal(t: &TestLedger) -> tokio_postgres::Client {
    let db = t.db().await;
    db.batch_execute(
        "BEGIN; LOCK TABLE accounts, account_terms, account_totals, postings, entries, idempotency_keys, \
         rejections, outbox, ledger_state, ledgers IN ACCESS EXCLUSIVE MODE",
    )
    .await
    .expect("journal locked");
    db
}

/// One valid call of every RPC (each needs the journal: nothing is answered from a cache).
fn one_call_of_each_rpc(posting_id: &str) -> Vec<(&'static str, Bytes)> {
    ledger_server::access::METHODS
        .iter()
        .map(|&m| {
            let body =
                one_write_call(m, posting_id).unwrap_or_else(|| one_read_call(m, posting_id));
            (m, Bytes::from(body))
        })
        .collect()
}

fn one_write_call(method: &str, posting_id: &str) -> Option<Vec<u8>> {
    Some(match method {
        "CreateAccount" => pb::CreateAccountRequest {
            ledger: String::new(),
            code: "acct:new".into(),
            currency: "EUR".into(),
            scale: 2,
            normal_balance: pb::NormalBalance::Debit as i32,
            allow_negative: false,
            metadata: Default::default(),
        }
        .encode_to_vec(),
        "Post" => transfer("late", "equity:world", "acct:0", "1.00").encode_to_vec(),
        "PostBatch" => pb::PostBatchRequest {
            ledger: String::new(),
            // The same request as Post's: whichever is decided first, one posting.
            requests: vec![transfer("late", "equity:world", "acct:0", "1.00")],
        }
        .encode_to_vec(),
        "Void" => pb::VoidRequest {
            ledger: String::new(),
            idempotency_key: "late-void".into(),
            posting_id: posting_id.into(),
            reason: "r".into(),
            effective_at: None,
        }
        .encode_to_vec(),
        "Capture" => pb::CaptureRequest {
            idempotency_key: "late-capture".into(),
            hold_posting_id: posting_id.into(),
            ..Default::default()
        }
        .encode_to_vec(),
        "CreateLedger" => pb::CreateLedgerRequest {
            code: "late".into(),
            ..Default::default()
        }
        .encode_to_vec(),
        "UpdateAccount" => pb::UpdateAccountRequest {
            idempotency_key: "late-update".into(),
            code: "acct:0".into(),
            expected_version: 1,
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["status".into()],
            }),
            status: pb::AccountStatus::Open as i32,
            reason: "r".into(),
            ..Default::default()
        }
        .encode_to_vec(),
        "ClosePeriod" => pb::ClosePeriodRequest {
            idempotency_key: "late-close".into(),
            effective_before: Some(prost_types::Timestamp {
                seconds: 1_000_000_000,
                nanos: 0,
            }),
            ..Default::default()
        }
        .encode_to_vec(),
        _ => return None,
    })
}

fn one_read_call(method: &str, posting_id: &str) -> Vec<u8> {
    let (account, prefix, token) = ("acct:0".to_string(), String::new(), String::new());
    match method {
        "GetAccount" => pb::GetAccountRequest {
            as_of: None,
            ledger: String::new(),
            code: "acct:not-cached".into(),
        }
        .encode_to_vec(),
        "ListAccounts" => pb::ListAccountsRequest {
            ledger: String::new(),
            prefix,
            page_size: 10,
            page_token: token,
        }
        .encode_to_vec(),
        "GetPosting" => pb::GetPostingRequest {
            ledger: String::new(),
            by: Some(pb::get_posting_request::By::PostingId(posting_id.into())),
            as_of: None,
        }
        .encode_to_vec(),
        "ListPostings" => pb::ListPostingsRequest {
            ledger: String::new(),
            account,
            page_size: 10,
            page_token: token,
            ..Default::default()
        }
        .encode_to_vec(),
        "GetBalance" => pb::GetBalanceRequest {
            ledger: String::new(),
            account,
            as_of: None,
        }
        .encode_to_vec(),
        "ListBalances" => pb::ListBalancesRequest {
            ledger: String::new(),
            prefix,
            as_of: None,
            page_size: 10,
            page_token: token,
        }
        .encode_to_vec(),
        "ListEntries" => pb::ListEntriesRequest {
            ledger: String::new(),
            account,
            as_of: None,
            page_size: 10,
            page_token: token,
        }
        .encode_to_vec(),
        "GetLedger" => pb::GetLedgerRequest {
            code: "not-cached".into(),
        }
        .encode_to_vec(),
        "ListAccountVersions" => pb::ListAccountVersionsRequest {
            code: "acct:0".into(),
            page_size: 10,
            ..Default::default()
        }
        .encode_to_vec(),
        "ListLedgers" => pb::ListLedgersRequest {
            page_size: 10,
            page_token: token,
        }
        .encode_to_vec(),
        "GetDigest" => pb::GetDigestRequest::default().encode_to_vec(),
        "GetInclusionProof" => pb::GetInclusionProofRequest {
            posting_id: posting_id.into(),
            ..Default::default()
        }
        .encode_to_vec(),
        "GetConsistencyProof" => pb::GetConsistencyProofRequest {
            from_sequence: 1,
            ..Default::default()
        }
        .encode_to_vec(),
        "ListPeriodCloses" => pb::ListPeriodClosesRequest::default().encode_to_vec(),
        "ListRollups" => pb::ListRollupsRequest {
            depth: 2,
            ..Default::default()
        }
        .encode_to_vec(),
        other => panic!("no call of {other}"),
    }
}

/// A call of `method` with these headers over a fresh raw connection; its status, at most
/// `wait` later (a generous bound: the answers checked here come within a second when healthy).
async fn raw_status(
    addr: SocketAddr,
    method: &str,
    body: Bytes,
    headers: &[(&str, &str)],
    wait: Duration,
) -> tonic::Status {
    let h2 = raw_h2(addr, 1 << 20).await;
    let call = start_call(&h2.send, method, body, headers, wait)
        .await
        .expect("a stream");
    tokio::time::timeout(wait, status_of(call))
        .await
        .unwrap_or_else(|_| panic!("{method}: no answer within {wait:?}"))
}

/// Requests the metrics endpoint counted as answered DEADLINE_EXCEEDED, so far.
async fn counted_deadline_exceeded(metrics: SocketAddr) -> f64 {
    let text = crate::ops::scrape(metrics).await;
    crate::ops::sample(
        &text,
        "ledger_grpc_requests_total",
        &[("code", "DEADLINE_EXCEEDED")],
    )
}

#[track_caller]
fn assert_deadline_exceeded(method: &str, s: &tonic::Status, set_by: &str) {
    assert_error(s, Code::DeadlineExceeded, "DEADLINE_EXCEEDED");
    for words in [
        set_by,
        "outcome of a write is unknown",
        "retry with the same idempotency key",
    ] {
        assert!(s.message().contains(words), "{method}: {}", s.message());
    }
}

#[tokio::test]
async fn a_call_whose_deadline_passes_is_answered_deadline_exceeded_with_error_info_on_every_rpc() {
    let mut t = TestLedger::start_with(ledger_server::server::OpsOptions {
        metrics_listen: Some("127.0.0.1:0".parse().unwrap()),
        ..app_role_ops()
    })
    .await;
    t.standard_accounts(1).await;
    let first = transfer("first", "equity:world", "acct:0", "5.00");
    let posted = t.post(first).await.unwrap().posting.unwrap();
    let server = t.server.as_ref().unwrap();
    let (addr, metrics) = (server.local_addr, server.metrics_addr.unwrap());
    let counted_before = counted_deadline_exceeded(metrics).await;
    let lock = lock_the_journal(&t).await;
    let calls = one_call_of_each_rpc(&posted.posting_id);
    let timeout = [("grpc-timeout", "300m")];
    let answers = futures_util::future::join_all(calls.iter().map(|(method, body)| {
        raw_status(
            addr,
            method,
            body.clone(),
            &timeout,
            Duration::from_secs(30),
        )
    }))
    .await;
    let summary: Vec<String> = calls
        .iter()
        .zip(&answers)
        .map(|((m, _), s)| format!("{m}: {:?} {:?}", s.code(), s.message()))
        .collect();
    eprintln!("answers at a passed deadline:\n{}", summary.join("\n"));
    for ((method, _), s) in calls.iter().zip(&answers) {
        assert_deadline_exceeded(method, s, "300ms, the caller's grpc-timeout");
    }
    // The metric says what the clients got.
    let counted = counted_deadline_exceeded(metrics).await;
    assert!(
        counted - counted_before >= 10.0,
        "{counted_before} -> {counted}"
    );
    // Once the journal is free again, the retry of the Post with its key is safe: one posting.
    lock.batch_execute("ROLLBACK").await.unwrap();
    let late = || transfer("late", "equity:world", "acct:0", "1.00");
    let retried = t.post(late()).await.expect("the retry").posting.unwrap();
    let again = t.post(late()).await.unwrap().posting.unwrap();
    assert_eq!(retried.posting_id, again.posting_id);
    // The first posting and the late one; the Void, queued in the writer when its caller gave
    // up, may have been written once the journal was free (its outcome was unknown), once.
    let db = t.db().await;
    let kinds = db
        .query_one(
            "SELECT count(*) FILTER (WHERE voids_posting_id IS NULL), count(*) FILTER (WHERE voids_posting_id IS NOT NULL) FROM postings",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(kinds.get::<_, i64>(0), 2);
    assert!(kinds.get::<_, i64>(1) <= 1);
}

#[tokio::test]
async fn without_a_client_deadline_a_call_ends_at_the_servers_request_timeout() {
    let t = TestLedger::start().await;
    // The real binary, with REQUEST_TIMEOUT lowered from 15 s to 1 s.
    let mut server = spawn_ledger(
        &t.database_url,
        &[("LEDGER_REQUEST_TIMEOUT", "1s")],
        None,
        None,
    )
    .await;
    let lock = lock_the_journal(&t).await;
    let began = std::time::Instant::now();
    let req = pb::GetBalanceRequest {
        ledger: String::new(),
        account: "acct:0".into(),
        as_of: None,
    };
    let s = raw_status(
        server.addr,
        "GetBalance",
        req.encode_to_vec().into(),
        &[],
        Duration::from_secs(30),
    )
    .await;
    assert_deadline_exceeded("GetBalance", &s, "the server's limit REQUEST_TIMEOUT");
    assert!(began.elapsed() >= Duration::from_secs(1));
    // A client's own deadline, when longer than the server's limit, does not extend it.
    let s = raw_status(
        server.addr,
        "GetBalance",
        req.encode_to_vec().into(),
        &[("grpc-timeout", "1M")],
        Duration::from_secs(30),
    )
    .await;
    assert!(s.message().contains("REQUEST_TIMEOUT"), "{}", s.message());
    lock.batch_execute("ROLLBACK").await.unwrap();
    let _ = server.child.kill().await;
}

#[tokio::test]
async fn a_malformed_grpc_timeout_is_refused_naming_the_header() {
    let t = TestLedger::start().await;
    let addr = t.server.as_ref().unwrap().local_addr;
    let req = pb::GetAccountRequest {
        as_of: None,
        ledger: String::new(),
        code: "acct:0".into(),
    }
    .encode_to_vec();
    for bad in ["soon", "123456789m", "5", "5x"] {
        let s = raw_status(
            addr,
            "GetAccount",
            req.clone().into(),
            &[("grpc-timeout", bad)],
            Duration::from_secs(30),
        )
        .await;
        assert_error(&s, Code::InvalidArgument, "INVALID_FIELD");
        assert!(
            s.message().contains("grpc-timeout"),
            "{bad}: {}",
            s.message()
        );
    }
}

// ---- One connection that never reads (D7) ---------------------------------------------------

/// A field of `/proc/<pid>/status` in kB (e.g. `VmRSS`, `VmHWM`).
fn status_kib(pid: i32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// 32 metadata entries of 64-byte keys and 512-byte values: the largest account the limits
/// allow (about 18.6 kB encoded).
fn big_metadata() -> std::collections::HashMap<String, String> {
    (0..32)
        .map(|i| (format!("{i:0>64}"), "v".repeat(512)))
        .collect()
}

/// Creates `n` accounts with the largest metadata, eight calls at a time.
async fn create_big_accounts(addr: SocketAddr, n: usize) {
    let client = connect(addr).await;
    let mut set = tokio::task::JoinSet::new();
    for worker in 0..8 {
        let mut c = client.clone();
        set.spawn(async move {
            for i in (worker..n).step_by(8) {
                c.create_account(pb::CreateAccountRequest {
                    ledger: String::new(),
                    code: format!("big:{i:04}"),
                    currency: "EUR".into(),
                    scale: 2,
                    normal_balance: pb::NormalBalance::Debit as i32,
                    allow_negative: false,
                    metadata: big_metadata(),
                })
                .await
                .expect("account created");
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
}

/// The process's RSS every 100 ms until `until` resolves; the highest seen, in MiB.
async fn peak_rss_mib_while<F: std::future::Future>(pid: i32, until: F) -> (u64, F::Output) {
    let mut peak = 0;
    let mut until = std::pin::pin!(until);
    loop {
        peak = peak.max(status_kib(pid, "VmRSS") / 1024);
        tokio::select! {
            out = &mut until => return (peak.max(status_kib(pid, "VmRSS") / 1024), out),
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}

/// A page of 800 accounts of [`big_metadata`]: about 15 MB encoded, under the encoder's
/// 16 MiB limit (MAX_RESPONSE_BYTES), so a response the server must hold; a page of 1,000
/// (19 MB) fails to encode and would be freed at once.
fn big_page() -> pb::ListAccountsRequest {
    pb::ListAccountsRequest {
        ledger: String::new(),
        prefix: "big:".into(),
        page_size: 800,
        page_token: String::new(),
    }
}

/// What the attacker saw: calls opened, answers in HEADERS by kind, whether the server closed.
struct Attack {
    opened: usize,
    answered: std::collections::BTreeMap<String, usize>,
    closed: bool,
}

/// Opens `streams` big-page calls on `h2` (window 0) and never reads; waits at most 60 s
/// (against RESPONSE_SEND_TIMEOUT = 10 s, on a loaded machine) for the server to close.
async fn never_read_big_pages(h2: RawH2, streams: usize) -> Attack {
    let page = Bytes::from(big_page().encode_to_vec());
    let mut calls = Vec::new();
    for _ in 0..streams {
        let wait = Duration::from_secs(10);
        match start_call(&h2.send, "ListAccounts", page.clone(), &[], wait).await {
            Some(r) => calls.push(r),
            None => break,
        }
    }
    let closed = tokio::time::timeout(Duration::from_secs(60), h2.conn)
        .await
        .is_ok();
    let opened = calls.len();
    // Refusals come in HEADERS (not flow-controlled); held calls die with the connection.
    let mut answered = std::collections::BTreeMap::new();
    for call in calls {
        if let Ok(Ok(resp)) = tokio::time::timeout(Duration::from_secs(1), call).await {
            if let Some(s) = tonic::Status::from_header_map(resp.headers()) {
                let budget = s.message().contains("(RESPONSE_BYTES_IN_FLIGHT)");
                let limit = if budget {
                    " (RESPONSE_BYTES_IN_FLIGHT)"
                } else {
                    ""
                };
                let kind = format!("{:?}/{}{limit}", s.code(), reason(&s));
                *answered.entry(kind).or_default() += 1;
            }
        }
    }
    Attack {
        opened,
        answered,
        closed,
    }
}

#[tokio::test]
async fn one_connection_that_never_reads_its_responses_cannot_take_the_servers_memory() {
    let streams: usize = std::env::var("LEDGER_ATTACK_STREAMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let url = pg::shared_cluster().fresh_database().await;
    // RESPONSE_SEND_TIMEOUT lowered from 30 s so the test ends sooner; still long enough for a
    // few of the 15 MB pages to be built one after the other on a loaded machine.
    let envs = [("LEDGER_RESPONSE_SEND_TIMEOUT", "10s")];
    let mut server = spawn_ledger(&url, &envs, None, None).await;
    let pid = server.pid();
    create_big_accounts(server.addr, 1000).await;
    let before = status_kib(pid, "VmRSS") / 1024;
    let attacker = raw_h2(server.addr, 0).await;
    // One small call first: the server's SETTINGS are in by its answer.
    let probe = pb::GetAccountRequest {
        as_of: None,
        ledger: String::new(),
        code: "x".into(),
    }
    .encode_to_vec();
    let wait = Duration::from_secs(5);
    let probe = start_call(&attacker.send, "GetAccount", probe.into(), &[], wait).await;
    assert_eq!(status_of(probe.unwrap()).await.code(), Code::NotFound);
    let advertised = attacker.send.current_max_send_streams();
    let (peak, attack) = peak_rss_mib_while(pid, never_read_big_pages(attacker, streams)).await;
    eprintln!(
        "{streams} streams wanted, {} opened (server advertises {advertised}), answered in headers: {:?}; RSS {before} MiB before, peak {peak} MiB, VmHWM {} MiB; connection closed by the server: {}",
        attack.opened, attack.answered, status_kib(pid, "VmHWM") / 1024, attack.closed
    );
    assert!(peak < 256, "RSS reached {peak} MiB (from {before} MiB)");
    assert_eq!(advertised, 128, "MAX_CONCURRENT_STREAMS");
    let refused = attack
        .answered
        .get("Unavailable/STORAGE_UNAVAILABLE (RESPONSE_BYTES_IN_FLIGHT)");
    assert!(
        refused.is_some(),
        "nothing refused for the budget: {:?}",
        attack.answered
    );
    assert!(
        attack.closed,
        "the server kept the connection of a client that takes nothing"
    );

    // Everyone else is still served, pages as large included.
    let mut other = connect(server.addr)
        .await
        .max_decoding_message_size(ledger_server::transport::MAX_RESPONSE_BYTES);
    let a = other
        .get_account(pb::GetAccountRequest {
            as_of: None,
            ledger: String::new(),
            code: "big:0001".into(),
        })
        .await;
    assert_eq!(a.expect("GetAccount").into_inner().metadata.len(), 32);
    let listed = other.list_accounts(big_page()).await.expect("a big page");
    let listed = listed.into_inner();
    // The page ends at MAX_PAGE_BYTES, with a token for the rest.
    assert!(!listed.accounts.is_empty() && !listed.next_page_token.is_empty());
    assert!(
        listed.accounts.len() < 800,
        "{} accounts",
        listed.accounts.len()
    );
    let _ = server.child.kill().await;
}

// ---- Silent connections and the open-file limit (D8) ----------------------------------------

/// CPU time (user + system) the process used so far.
fn cpu_time(pid: i32) -> Duration {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("proc stat");
    // Fields after the command name (which may contain spaces, inside parentheses): the 12th
    // and 13th of those are utime and stime, in clock ticks.
    let rest = &text[text.rfind(')').expect("stat format") + 2..];
    let f: Vec<u64> = rest
        .split(' ')
        .skip(11)
        .take(2)
        .map(|v| v.parse().expect("a tick count"))
        .collect();
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis((f[0] + f[1]) * 1000 / hz)
}

/// Open file descriptors of the process.
fn open_files(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Cores the process kept busy over `over` (user + system time / wall time).
async fn cores_busy(pid: i32, over: Duration) -> f64 {
    let (cpu, wall) = (cpu_time(pid), std::time::Instant::now());
    tokio::time::sleep(over).await;
    (cpu_time(pid) - cpu).as_secs_f64() / wall.elapsed().as_secs_f64()
}

/// `n` TCP connections that never send a byte.
async fn silent_connections(addr: SocketAddr, n: usize) -> Vec<tokio::net::TcpStream> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        // Connecting completes in the kernel's listen backlog, accepted or not.
        let s = tokio::time::timeout(
            Duration::from_secs(10),
            tokio::net::TcpStream::connect(addr),
        )
        .await
        .expect("connect within 10 s")
        .expect("connect");
        out.push(s);
    }
    out
}

/// How many of `conns` the server has closed within `wait` (reading, past what the server
/// sent first, its HTTP/2 SETTINGS, ends in EOF or an error).
async fn closed_by_server(conns: Vec<tokio::net::TcpStream>, wait: Duration) -> usize {
    use tokio::io::AsyncReadExt;
    let reads = conns.into_iter().map(|mut c| async move {
        let mut sink = Vec::new();
        tokio::time::timeout(wait, c.read_to_end(&mut sink))
            .await
            .is_ok()
    });
    futures_util::future::join_all(reads)
        .await
        .into_iter()
        .filter(|closed| *closed)
        .count()
}

/// `n` GetBalance calls at once from `client`: enough to need more of the pool's sockets than
/// a quiet server has open. The errors, if any.
async fn concurrent_reads(
    client: &pb::ledger_client::LedgerClient<tonic::transport::Channel>,
    n: usize,
) -> Vec<tonic::Status> {
    let calls = (0..n).map(|_| {
        let mut c = client.clone();
        async move {
            c.get_balance(pb::GetBalanceRequest {
                ledger: String::new(),
                account: "acct:0".into(),
                as_of: None,
            })
            .await
        }
    });
    futures_util::future::join_all(calls)
        .await
        .into_iter()
        .filter_map(Result::err)
        .collect()
}

/// A new client's first answer, or why there was none within `wait`.
async fn new_client_answer(addr: SocketAddr, wait: Duration) -> Result<Duration, String> {
    let began = std::time::Instant::now();
    let answer = async {
        let mut c = connect(addr).await;
        c.get_account(pb::GetAccountRequest {
            as_of: None,
            ledger: String::new(),
            code: "acct:0".into(),
        })
        .await
    };
    match tokio::time::timeout(wait, answer).await {
        Ok(Ok(_)) => Ok(began.elapsed()),
        Ok(Err(e)) => Err(format!("answered {e:?}")),
        Err(_) => Err(format!("no answer within {wait:?}")),
    }
}

fn temp_log(name: &str) -> (std::path::PathBuf, std::fs::File) {
    let path = std::env::temp_dir().join(format!(
        "ledger-{name}-{}.log",
        ledger_server::access::auth::new_token()
    ));
    let f = std::fs::File::create(&path).unwrap();
    (path, f)
}

#[tokio::test]
async fn silent_connections_beyond_the_file_limit_lock_out_no_one_and_are_closed_after_the_handshake_timeout(
) {
    let url = pg::shared_cluster().fresh_database().await;
    let (log_path, log) = temp_log("silent");
    // 256 open files (soft = hard), HANDSHAKE_TIMEOUT lowered from 10 s to 2 s.
    let server = spawn_ledger(
        &url,
        &[("LEDGER_HANDSHAKE_TIMEOUT", "2s")],
        Some(256),
        Some(log),
    )
    .await;
    let pid = server.pid();
    let mut existing = connect(server.addr).await;
    world_and_one_account(&mut existing).await;
    let files_before = open_files(pid);

    let silent = silent_connections(server.addr, 300).await;
    let files_during = open_files(pid);
    // A new client now waits behind the silent connections. Generous bound: once they are
    // closed after 2 s it is answered; 60 s leaves room for a loaded machine and fails only
    // if the client is locked out.
    let new_client = tokio::spawn(new_client_answer(server.addr, Duration::from_secs(60)));
    // 32 reads at once need more database sockets than the quiet server had open.
    let existing_errors = concurrent_reads(&existing, 32).await;
    let cpu = cores_busy(pid, Duration::from_secs(3)).await;
    let new_client = new_client.await.unwrap();
    let closed = closed_by_server(silent, Duration::from_secs(30)).await;
    let text = std::fs::read_to_string(&log_path).unwrap();
    let _ = std::fs::remove_file(&log_path);
    eprintln!(
        "files: {files_before} before, {files_during} with 300 silent connections; CPU {cpu:.2} cores; \
         existing client: {} errors; new client: {new_client:?}; silent connections closed by the server: {closed} of 300",
        existing_errors.len()
    );
    assert!(
        cpu < 0.25,
        "the server kept {cpu:.2} cores busy with silent connections"
    );
    assert!(existing_errors.is_empty(), "{:?}", existing_errors.first());
    assert!(new_client.is_ok(), "a new client: {new_client:?}");
    assert_eq!(closed, 300, "silent connections left open");
    assert!(
        files_during < 256,
        "{files_during} files open: at the limit"
    );
    assert!(
        text.contains("limit HANDSHAKE_TIMEOUT") && text.contains("limit MAX_CONNECTIONS"),
        "{text}"
    );
    // Rate-limited: at most one line per kind per WARN_INTERVAL (10 s) of the test.
    let lines = text
        .lines()
        .filter(|l| l.contains("limit HANDSHAKE_TIMEOUT"))
        .count();
    assert!(lines <= 4, "{lines} lines about HANDSHAKE_TIMEOUT:\n{text}");
}

/// Sets the soft open-file limit of another process (root may).
fn set_open_file_limit(pid: i32, soft: u64, hard: u64) {
    let lim = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: prlimit reads `lim` and writes nothing (old limit: null).
    let rc = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, &lim, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
}

#[tokio::test]
async fn out_of_file_descriptors_the_accept_loop_backs_off_and_says_so_instead_of_spinning() {
    let url = pg::shared_cluster().fresh_database().await;
    let (log_path, log) = temp_log("emfile");
    let server = spawn_ledger(
        &url,
        &[("LEDGER_HANDSHAKE_TIMEOUT", "2s")],
        Some(256),
        Some(log),
    )
    .await;
    let pid = server.pid();
    let mut existing = connect(server.addr).await;
    world_and_one_account(&mut existing).await;
    // Something else took the descriptors: the process may open only a few more than it has.
    let limit = open_files(pid) as u64 + 8;
    set_open_file_limit(pid, limit, 256);
    let silent = silent_connections(server.addr, 40).await;
    let cpu = cores_busy(pid, Duration::from_secs(3)).await;
    set_open_file_limit(pid, 256, 256);
    let new_client = new_client_answer(server.addr, Duration::from_secs(60)).await;
    let closed = closed_by_server(silent, Duration::from_secs(30)).await;
    let text = std::fs::read_to_string(&log_path).unwrap();
    let _ = std::fs::remove_file(&log_path);
    eprintln!(
        "soft limit {limit} for 3 s: CPU {cpu:.2} cores; then new client: {new_client:?}; silent closed: {closed} of 40"
    );
    assert!(
        cpu < 0.25,
        "the server kept {cpu:.2} cores busy at the file limit"
    );
    let warned = text
        .lines()
        .filter(|l| l.contains("limit RLIMIT_NOFILE"))
        .count();
    assert!(
        (1..=2).contains(&warned),
        "{warned} warnings about the file limit:\n{text}"
    );
    assert!(text.contains("ACCEPT_BACKOFF"), "{text}");
    assert!(
        new_client.is_ok(),
        "a new client once descriptors are free: {new_client:?}"
    );
    assert_eq!(closed, 40, "silent connections left open");
}
