//! Operations: named limits, the request size limit, the metrics endpoint, SIGTERM drain.

use crate::support::*;
use ledger_server::grpc::pb;
use ledger_server::server::OpsOptions;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tonic::Code;

// ---- Limits ---------------------------------------------------------------------------------

enum Call {
    Post(pb::PostRequest),
    Void(pb::VoidRequest),
    Create(pb::CreateAccountRequest),
    ListAccounts(u32),
    ListPostings(u32),
    ListBalances(u32),
    ListEntries(u32),
}

async fn call(t: &TestLedger, c: Call) -> Result<(), tonic::Status> {
    let mut cl = t.client.clone();
    match c {
        Call::Post(r) => cl.post(r).await.map(drop),
        Call::Void(r) => cl.void(r).await.map(drop),
        Call::Create(r) => cl.create_account(r).await.map(drop),
        Call::ListAccounts(n) => cl
            .list_accounts(pb::ListAccountsRequest {
                ledger: String::new(),
                prefix: String::new(),
                page_size: n,
                page_token: String::new(),
            })
            .await
            .map(drop),
        Call::ListPostings(n) => cl
            .list_postings(pb::ListPostingsRequest {
                ledger: String::new(),
                account: String::new(),
                page_size: n,
                page_token: String::new(),
                ..Default::default()
            })
            .await
            .map(drop),
        Call::ListBalances(n) => cl
            .list_balances(pb::ListBalancesRequest {
                ledger: String::new(),
                prefix: String::new(),
                as_of: None,
                page_size: n,
                page_token: String::new(),
            })
            .await
            .map(drop),
        Call::ListEntries(n) => cl
            .list_entries(pb::ListEntriesRequest {
                ledger: String::new(),
                account: "acct:0".into(),
                as_of: None,
                page_size: n,
                page_token: String::new(),
            })
            .await
            .map(drop),
    }
}

fn meta(entries: usize, key_bytes: usize, value_bytes: usize) -> HashMap<String, String> {
    (0..entries)
        .map(|i| {
            let k = format!("{i:0>width$}", width = key_bytes);
            (k, "v".repeat(value_bytes))
        })
        .collect()
}

fn post_with(key: &str, f: impl FnOnce(&mut pb::PostRequest)) -> pb::PostRequest {
    let mut r = transfer(key, "equity:world", "acct:0", "1.00");
    f(&mut r);
    r
}

fn many_legs(n: usize) -> Vec<pb::Leg> {
    (0..n)
        .map(|i| {
            if i % 2 == 0 {
                leg("acct:0", pb::Direction::Debit, "1.00")
            } else {
                leg("equity:world", pb::Direction::Credit, "1.00")
            }
        })
        .collect()
}

fn account_with(code: &str, metadata: HashMap<String, String>) -> pb::CreateAccountRequest {
    pb::CreateAccountRequest {
        ledger: String::new(),
        code: code.into(),
        currency: "EUR".into(),
        scale: 2,
        normal_balance: pb::NormalBalance::Debit as i32,
        allow_negative: false,
        metadata,
    }
}

/// Ok, or the error's reason and the limit's name in its message.
type Want = Result<(), (&'static str, &'static str)>;

#[tokio::test]
async fn each_limit_is_enforced_at_its_bound_and_named_in_the_error_beyond_it() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    let posted = t
        .post(transfer("target", "equity:world", "acct:0", "1.00"))
        .await
        .unwrap()
        .posting
        .unwrap();
    let void = |key: &str, reason_bytes: usize| pb::VoidRequest {
        ledger: String::new(),
        idempotency_key: key.into(),
        posting_id: posted.posting_id.clone(),
        reason: "r".repeat(reason_bytes),
        effective_at: None,
    };
    // (what, call, Ok or Err((reason, the limit's name in the message)))
    let table: Vec<(&str, Call, Want)> = vec![
        (
            "100 legs",
            Call::Post(post_with("l100", |r| r.legs = many_legs(100))),
            Ok(()),
        ),
        (
            "101 legs",
            Call::Post(post_with("l101", |r| r.legs = many_legs(101))),
            Err(("LIMIT_EXCEEDED", "MAX_LEGS")),
        ),
        (
            "memo 1024 B",
            Call::Post(post_with("m1024", |r| r.memo = "m".repeat(1024))),
            Ok(()),
        ),
        (
            "memo 1025 B",
            Call::Post(post_with("m1025", |r| r.memo = "m".repeat(1025))),
            Err(("LIMIT_EXCEEDED", "MAX_MEMO_BYTES")),
        ),
        (
            "memo of 342 three-byte chars (1026 B)",
            Call::Post(post_with("m-utf8", |r| r.memo = "€".repeat(342))),
            Err(("LIMIT_EXCEEDED", "MAX_MEMO_BYTES")),
        ),
        (
            "32 metadata entries",
            Call::Post(post_with("e32", |r| r.metadata = meta(32, 8, 8))),
            Ok(()),
        ),
        (
            "33 metadata entries",
            Call::Post(post_with("e33", |r| r.metadata = meta(33, 8, 8))),
            Err(("LIMIT_EXCEEDED", "MAX_METADATA_ENTRIES")),
        ),
        (
            "64 B metadata key",
            Call::Post(post_with("k64", |r| r.metadata = meta(1, 64, 1))),
            Ok(()),
        ),
        (
            "65 B metadata key",
            Call::Post(post_with("k65", |r| r.metadata = meta(1, 65, 1))),
            Err(("LIMIT_EXCEEDED", "MAX_METADATA_KEY_BYTES")),
        ),
        (
            "512 B metadata value",
            Call::Post(post_with("v512", |r| r.metadata = meta(1, 4, 512))),
            Ok(()),
        ),
        (
            "513 B metadata value",
            Call::Post(post_with("v513", |r| r.metadata = meta(1, 4, 513))),
            Err(("LIMIT_EXCEEDED", "MAX_METADATA_VALUE_BYTES")),
        ),
        (
            "255 B key",
            Call::Post(post_with(&"k".repeat(255), |_| {})),
            Ok(()),
        ),
        (
            "256 B key",
            Call::Post(post_with(&"k".repeat(256), |_| {})),
            Err(("LIMIT_EXCEEDED", "MAX_IDEMPOTENCY_KEY_BYTES")),
        ),
        (
            "31-digit amount",
            Call::Post(post_with("d31", |r| {
                let a = format!("{}.00", "9".repeat(29));
                r.legs = vec![
                    leg("acct:0", pb::Direction::Debit, &a),
                    leg("equity:world", pb::Direction::Credit, &a),
                ]
            })),
            Err(("INVALID_AMOUNT", "MAX_AMOUNT_DIGITS")),
        ),
        (
            "void reason 1025 B",
            Call::Void(void("vr1025", 1025)),
            Err(("LIMIT_EXCEEDED", "MAX_MEMO_BYTES")),
        ),
        (
            "account with 33 metadata entries",
            Call::Create(account_with("x:1", meta(33, 4, 4))),
            Err(("LIMIT_EXCEEDED", "MAX_METADATA_ENTRIES")),
        ),
        (
            "account code of 129 chars",
            Call::Create(account_with(&"a".repeat(129), HashMap::new())),
            Err(("INVALID_ACCOUNT_CODE", "MAX_ACCOUNT_CODE_CHARS")),
        ),
        ("ListAccounts page 1000", Call::ListAccounts(1000), Ok(())),
        (
            "ListAccounts page 1001",
            Call::ListAccounts(1001),
            Err(("LIMIT_EXCEEDED", "MAX_PAGE_SIZE")),
        ),
        (
            "ListPostings page 1001",
            Call::ListPostings(1001),
            Err(("LIMIT_EXCEEDED", "MAX_PAGE_SIZE")),
        ),
        (
            "ListBalances page 1001",
            Call::ListBalances(1001),
            Err(("LIMIT_EXCEEDED", "MAX_PAGE_SIZE")),
        ),
        (
            "ListEntries page 1001",
            Call::ListEntries(1001),
            Err(("LIMIT_EXCEEDED", "MAX_PAGE_SIZE")),
        ),
    ];
    for (what, c, want) in table {
        match (call(&t, c).await, want) {
            (Ok(()), Ok(())) => {}
            (Err(e), Err((reason, limit))) => {
                assert_error(&e, Code::InvalidArgument, reason);
                assert!(e.message().contains(limit), "{what}: {}", e.message());
                let info = tonic_types::StatusExt::get_details_error_info(&e).unwrap();
                assert_eq!(
                    info.metadata.get("limit").map(String::as_str),
                    Some(limit),
                    "{what}"
                );
            }
            (got, want) => panic!("{what}: got {got:?}, want {want:?}"),
        }
    }
}

#[tokio::test]
async fn a_two_mib_request_is_refused_naming_the_limit_and_the_server_keeps_serving() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    let big = post_with("big", |r| r.memo = "m".repeat(2 * 1024 * 1024));
    let e = t.post(big).await.unwrap_err();
    assert_error(&e, Code::InvalidArgument, "LIMIT_EXCEEDED");
    assert!(e.message().contains("MAX_REQUEST_BYTES"), "{}", e.message());
    assert!(
        e.message().contains("the request is 2097"),
        "{}",
        e.message()
    );
    // Just over the limit, too (the memo alone is 1 MiB).
    let over = post_with("over", |r| r.memo = "m".repeat(1024 * 1024));
    let e = t.post(over).await.unwrap_err();
    assert_error(&e, Code::InvalidArgument, "LIMIT_EXCEEDED");
    // Same connection, next request: served.
    t.post(transfer("small", "equity:world", "acct:0", "1.00"))
        .await
        .expect("served after the refusal");
    assert_eq!(t.count("postings").await, 1);
}

// ---- Metrics --------------------------------------------------------------------------------

/// GET /metrics, as text.
pub async fn scrape(addr: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    out.split_once("\r\n\r\n").unwrap().1.to_owned()
}

/// The value of the sample named `name` whose labels include every `labels` pair (0 if none).
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, rest) = series.split_once('{').unwrap_or((series, ""));
            (n == name
                && labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\""))))
            .then(|| value.parse::<f64>().ok())
            .flatten()
        })
        .sum()
}

#[tokio::test]
async fn the_metrics_endpoint_shows_counts_that_move_with_requests() {
    let mx = pg::shared_cluster().fresh_database().await;
    let mut t = TestLedger::start_with(OpsOptions {
        metrics_listen: Some("127.0.0.1:0".parse().unwrap()),
        clusters: vec![("mx".into(), mx)],
        ..app_role_ops()
    })
    .await;
    let addr = t.server.as_ref().unwrap().metrics_addr.expect("metrics on");
    t.standard_accounts(1).await;
    let before = scrape(addr).await;
    let not_found = [("method", "GetAccount"), ("code", "NOT_FOUND")];
    let ok_posts = [("method", "Post"), ("code", "OK")];
    for i in 0..3 {
        let e = t
            .client
            .get_account(pb::GetAccountRequest {
                as_of: None,
                ledger: String::new(),
                code: format!("missing:{i}"),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::NotFound);
        t.post(transfer(&format!("m{i}"), "equity:world", "acct:0", "1.00"))
            .await
            .unwrap();
    }
    // Two events waiting on the cluster `mx`, of a ledger placed there.
    t.client
        .create_ledger(pb::CreateLedgerRequest {
            code: "on-mx".into(),
            cluster: "mx".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    use crate::support::books::account_in;
    account_in(
        &mut t.client,
        "on-mx",
        "equity:world",
        pb::NormalBalance::Credit,
        true,
    )
    .await;
    account_in(
        &mut t.client,
        "on-mx",
        "acct:0",
        pb::NormalBalance::Debit,
        false,
    )
    .await;
    for i in 0..2 {
        let post = pb::PostRequest {
            ledger: "on-mx".into(),
            ..transfer(&format!("x{i}"), "equity:world", "acct:0", "1.00")
        };
        t.post(post).await.unwrap();
    }
    let after = scrape(addr).await;
    let moved = |name: &str, labels: &[(&str, &str)]| {
        sample(&after, name, labels) - sample(&before, name, labels)
    };
    // Other tests of this process record into the same (global) recorder: at least ours.
    assert!(
        moved("ledger_grpc_requests_total", &not_found) >= 3.0,
        "{after}"
    );
    assert!(
        moved("ledger_grpc_requests_total", &ok_posts) >= 3.0,
        "{after}"
    );
    assert!(
        moved(
            "ledger_grpc_request_duration_seconds_count",
            &[("method", "Post")]
        ) >= 3.0,
        "{after}"
    );
    assert!(
        sample(
            &after,
            "ledger_grpc_request_duration_seconds_bucket",
            &[("method", "Post"), ("le", "+Inf")]
        ) >= 3.0,
        "{after}"
    );
    assert!(
        moved("ledger_write_batch_size_count", &[]) >= 3.0,
        "{after}"
    );
    assert!(
        moved("ledger_write_batches_total", &[("result", "ok")]) >= 3.0,
        "{after}"
    );
    // Gauges are sampled from this server at scrape time, per cluster: events waiting on
    // `mx` are its own ledger's.
    let on_mx = [("cluster", "mx")];
    let main = [("cluster", "main")];
    assert_eq!(
        sample(&after, "ledger_outbox_backlog", &main),
        3.0,
        "{after}"
    );
    assert_eq!(
        sample(&after, "ledger_outbox_backlog", &on_mx),
        2.0,
        "{after}"
    );
    assert_eq!(
        sample(&after, "ledger_db_pool_max_connections", &on_mx),
        8.0,
        "{after}"
    );
    assert!(sample(&after, "ledger_outbox_oldest_event_age_seconds", &[]) >= 0.0);
    assert!(
        after.contains("ledger_outbox_oldest_event_age_seconds{cluster=\"main\"} "),
        "{after}"
    );
    assert_eq!(
        sample(&after, "ledger_db_pool_max_connections", &main),
        8.0,
        "{after}"
    );
    assert!(
        sample(&after, "ledger_db_pool_open_connections", &[]) >= 1.0,
        "{after}"
    );
}

// ---- Drain ----------------------------------------------------------------------------------

/// Starts the real binary on `url` with extra arguments and environment; waits until it
/// accepts connections.
pub async fn spawn_server(
    url: &str,
    args: &[&str],
    envs: &[(&str, &str)],
    stderr: Option<std::fs::File>,
) -> (tokio::process::Child, tonic::transport::Channel) {
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledger"));
    cmd.args([
        "serve",
        "--listen",
        &addr.to_string(),
        "--database-url",
        url,
    ])
    .args(args)
    .env("LEDGER_LOG", "warn")
    .stdin(std::process::Stdio::null())
    .kill_on_drop(true);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    if let Some(f) = stderr {
        cmd.stderr(f);
    }
    let child = cmd.spawn().unwrap();
    let began = Instant::now();
    loop {
        match tonic::transport::Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
        {
            Ok(c) => return (child, c),
            Err(_) if began.elapsed() < Duration::from_secs(15) => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => panic!("server did not come up: {e}"),
        }
    }
}

#[tokio::test]
async fn json_logs_have_one_line_per_request_with_the_caller_and_never_the_token() {
    let url = pg::shared_cluster().fresh_database().await;
    let token = ledger_server::access::auth::new_token();
    let auth_path = std::env::temp_dir().join(format!(
        "ledger-auth-{}",
        ledger_server::access::auth::new_token()
    ));
    std::fs::write(
        &auth_path,
        ledger_server::access::auth::auth_line(
            "svc-log",
            ledger_server::access::auth::Role::Writer,
            &token,
        ),
    )
    .unwrap();
    let log_path = auth_path.with_extension("log");
    let log = std::fs::File::create(&log_path).unwrap();
    let (mut child, channel) = spawn_server(
        &url,
        &["--auth-tokens", auth_path.to_str().unwrap()],
        &[("LEDGER_LOG", "trace"), ("LEDGER_LOG_FORMAT", "json")],
        Some(log),
    )
    .await;
    let mut client = pb::ledger_client::LedgerClient::new(channel);
    for i in 0..3 {
        let e = client
            .get_account(crate::access::bearer(
                pb::GetAccountRequest {
                    as_of: None,
                    ledger: String::new(),
                    code: format!("nope:{i}"),
                },
                &token,
            ))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::NotFound);
    }
    let e = client
        .get_account(crate::access::bearer(
            pb::GetAccountRequest {
                as_of: None,
                ledger: String::new(),
                code: "x".into(),
            },
            &format!("{token}0"),
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
    let pid = child.id().unwrap() as i32;
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let text = std::fs::read_to_string(&log_path).unwrap();
    let _ = std::fs::remove_file(&auth_path);
    let _ = std::fs::remove_file(&log_path);
    let secret = token
        .strip_prefix(ledger_server::access::auth::TOKEN_PREFIX)
        .unwrap();
    assert!(!text.contains(secret), "the token is in the log");
    let mut requests = Vec::new();
    for line in text.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        if v["fields"]["message"] == "request" {
            requests.push(v["fields"].clone());
        }
    }
    assert_eq!(requests.len(), 4, "{requests:?}");
    for r in &requests[..3] {
        assert_eq!(r["method"], "GetAccount");
        assert_eq!(r["code"], "NOT_FOUND");
        assert_eq!(r["caller"], "svc-log");
        assert!(r["duration_ms"].as_f64().is_some());
    }
    assert_eq!(requests[3]["code"], "UNAUTHENTICATED");
}

#[tokio::test]
async fn on_sigterm_a_request_in_flight_completes_new_ones_are_refused_and_the_process_exits_0() {
    let url = pg::shared_cluster().fresh_database().await;
    let (mut child, channel) = spawn_server(
        &url,
        &["--db-role", ledger_server::storage::APP_ROLE],
        &[],
        None,
    )
    .await;
    let mut client = pb::ledger_client::LedgerClient::new(channel);
    world_and_one_account(&mut client).await;

    // Hold the ledger's write lock so the next Post waits inside its batch.
    let db = ledger_server::storage::connect(&url).await.unwrap();
    db.execute(
        "SELECT pg_advisory_lock($1, 0)",
        &[&ledger_server::storage::LEDGER_LOCK_CLASS],
    )
    .await
    .unwrap();
    let mut c2 = client.clone();
    let in_flight = tokio::spawn(async move {
        c2.post(transfer("in-flight", "equity:world", "acct:0", "5.00"))
            .await
    });
    // Wait until the writer is blocked on the lock.
    let began = Instant::now();
    loop {
        let waiting: i64 = db
            .query_one(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if waiting > 0 {
            break;
        }
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "the Post never reached the lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let pid = child.id().expect("running") as i32;
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);

    // New requests are refused with UNAVAILABLE while the in-flight one waits.
    let began = Instant::now();
    let refused = loop {
        let r = client
            .get_account(pb::GetAccountRequest {
                as_of: None,
                ledger: String::new(),
                code: "acct:0".into(),
            })
            .await;
        match r {
            Err(e) if e.code() == Code::Unavailable => break e,
            _ if began.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            other => panic!("not refused while draining: {other:?}"),
        }
    };
    assert_error(&refused, Code::Unavailable, "STORAGE_UNAVAILABLE");
    assert!(!in_flight.is_finished());

    db.execute(
        "SELECT pg_advisory_unlock($1, 0)",
        &[&ledger_server::storage::LEDGER_LOCK_CLASS],
    )
    .await
    .unwrap();
    let posted = tokio::time::timeout(Duration::from_secs(10), in_flight)
        .await
        .expect("the in-flight Post finishes")
        .unwrap()
        .expect("the in-flight Post succeeds")
        .into_inner();
    assert!(!posted.replayed);
    let status = tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .expect("the process exits after the drain")
        .unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
    let n: i64 = db
        .query_one("SELECT count(*) FROM postings", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
}

/// One raw HTTP/1.1 exchange with the metrics endpoint: the status line.
async fn http_status(addr: std::net::SocketAddr, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out.lines().next().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn the_metrics_endpoint_answers_only_get_metrics_and_closes_each_connection() {
    let t = TestLedger::start_with(OpsOptions {
        metrics_listen: Some("127.0.0.1:0".parse().unwrap()),
        ..app_role_ops()
    })
    .await;
    let addr = t.server.as_ref().unwrap().metrics_addr.unwrap();
    let get = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(http_status(addr, &get("/metrics")).await, "HTTP/1.1 200 OK");
    assert_eq!(
        http_status(addr, &get("/other")).await,
        "HTTP/1.1 404 Not Found"
    );
    let post = "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n";
    assert_eq!(
        http_status(addr, post).await,
        "HTTP/1.1 405 Method Not Allowed"
    );
    assert!(http_status(addr, "not http at all\r\n\r\n")
        .await
        .starts_with("HTTP/1.1 400"));
}
