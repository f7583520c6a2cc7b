//! `ledger-client` against real servers: amounts refused before any call, the retry policy
//! across a server killed mid-call, coalescing of concurrent posts, and the documented
//! example.

use crate::faults::assert_exactly_once;
use crate::ops::{sample, scrape};
use crate::support::*;
use ledger_client::{
    Client, ClientOptions, Decimal, ErrorKind, NewAccount, NewPosting, NormalBalance, Reason,
    RetryPolicy,
};
use std::process::{Child, Command};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn dec(s: &str) -> Decimal {
    Decimal::from_str(s).unwrap()
}

fn new_account(code: &str, scale: u32, normal: NormalBalance, negative: bool) -> NewAccount {
    NewAccount {
        code: code.into(),
        currency: "EUR".into(),
        scale,
        normal_balance: normal,
        allow_negative: negative,
        metadata: Default::default(),
    }
}

/// `ledger serve` as its own process on `port`, on the database `url`, with `extra` flags.
fn serve(url: &str, port: u16, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_ledger"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--database-url", url])
        .args(extra)
        .env("LEDGER_LOG", "warn")
        .spawn()
        .expect("ledger serve starts")
}

#[tokio::test]
async fn a_decimal_with_more_places_than_the_scale_is_refused_before_any_call() {
    let mut t = TestLedger::start().await;
    let addr = t.server.as_ref().unwrap().local_addr.to_string();
    let client = Client::connect(ClientOptions::new(&addr).retry(RetryPolicy::never()))
        .await
        .unwrap();
    for a in [
        new_account("equity:world", 2, NormalBalance::Credit, true),
        new_account("acct:0", 2, NormalBalance::Debit, false),
        new_account("dust:0", 18, NormalBalance::Debit, true),
    ] {
        client.create_account(a).await.unwrap();
    }
    // The server is gone: whatever the client answers now, it answers without a call.
    t.server.take().unwrap().shutdown().await.unwrap();
    let sent = client.stats().attempts;
    let post = |amount: &str, to: &str| {
        NewPosting::new("k")
            .debit(to, dec(amount))
            .credit("equity:world", dec(amount))
    };
    let e = client.post(post("1.005", "acct:0")).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Refused(Reason::AmountScale), "{e}");
    assert!(e.message.contains("3 decimal places"), "{e}");
    assert!(!e.is_retry_safe());
    let e = client
        .post(post("1000000000000", "dust:0"))
        .await
        .unwrap_err();
    assert_eq!(e.reason(), Some(Reason::InvalidAmount), "{e}");
    assert!(e.message.contains("MAX_AMOUNT_DIGITS"), "{e}");
    let e = client
        .post(NewPosting::new("").debit("acct:0", dec("1")))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Refused(Reason::IdempotencyKeyRequired));
    let results = client
        .post_batch(vec![post("0.001", "acct:0"), post("-1", "acct:0")])
        .await
        .expect("nothing to send: both refused here");
    assert_eq!(
        results[0].as_ref().unwrap_err().reason(),
        Some(Reason::AmountScale)
    );
    assert_eq!(
        results[1].as_ref().unwrap_err().reason(),
        Some(Reason::InvalidAmount)
    );
    assert_eq!(client.stats().attempts, sent, "no call was made");
    // A valid amount does make a call, which fails: the server really is gone.
    let e = client.post(post("1.00", "acct:0")).await.unwrap_err();
    assert!(e.is_retry_safe(), "{e}");
    assert_eq!(client.stats().attempts, sent + 1);
}

/// A retry policy patient enough to outlast a server restart (about 20 s at most).
fn patient() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 100,
        first_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(200),
        attempt_timeout: Duration::from_secs(5),
    }
}

#[tokio::test]
async fn the_retry_policy_against_a_server_killed_mid_call_and_restarted_ends_with_one_posting_per_key(
) {
    const TASKS: usize = 8;
    const POSTS: usize = 150;
    let url = pg::shared_cluster().fresh_database().await;
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut server = serve(&url, port, &[]);
    let mut raw = client_when_up(port, Duration::from_secs(30)).await;
    world_and_one_account(&mut raw).await;
    // Half the tasks post one by one, half through a coalescing client (PostBatch calls).
    let plain = Client::connect(ClientOptions::new(&addr).retry(patient()))
        .await
        .unwrap();
    let coalescing = Client::connect(ClientOptions::new(&addr).retry(patient()).coalesce(16))
        .await
        .unwrap();
    let answered = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for c in 0..TASKS {
        let client = if c % 2 == 0 {
            plain.clone()
        } else {
            coalescing.clone()
        };
        let answered = answered.clone();
        tasks.push(tokio::spawn(async move {
            for j in 0..POSTS {
                let one = dec("1.00");
                let p = NewPosting::new(format!("c{c}-{j}"))
                    .debit("acct:0", one)
                    .credit("equity:world", one);
                client
                    .post(p)
                    .await
                    .unwrap_or_else(|e| panic!("c{c}-{j}: {e}"));
                answered.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for _ in 0..3 {
        let since = answered.load(Ordering::Relaxed);
        let start = Instant::now();
        while answered.load(Ordering::Relaxed) < since + 60 {
            assert!(start.elapsed() < Duration::from_secs(60), "no progress");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        server.kill().unwrap(); // SIGKILL, with calls in flight
        server.wait().unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        server = serve(&url, port, &[]);
    }
    for t in tasks {
        t.await.unwrap();
    }
    server.kill().unwrap();
    server.wait().unwrap();
    let retries = plain.stats().retries + coalescing.stats().retries;
    assert!(retries > 0, "the kills hit calls in flight");
    assert!(coalescing.stats().batch_calls > 0);
    assert_exactly_once(&url, TASKS, POSTS).await;
}

/// Task `i` of the coalescing test: posts its own posting (every 20th an overdraft of acct:0,
/// which may not go negative; the last two one posting under one key) once every task is
/// ready, and checks that the answer is its own. Returns the shared key's answers.
async fn one_task(
    client: Client,
    start: Arc<tokio::sync::Barrier>,
    i: usize,
) -> Option<ledger_client::Posted> {
    let overdraft = i % 20 == 7;
    let (key, from, to, amount) = match i {
        _ if overdraft => (
            format!("over-{i}"),
            "acct:0",
            "equity:world",
            dec("1000000"),
        ),
        198 | 199 => ("twice".to_string(), "equity:world", "acct:0", dec("2.00")),
        _ => (
            format!("t-{i}"),
            "equity:world",
            "acct:0",
            Decimal::new(i as i64 + 1, 2),
        ),
    };
    let p = NewPosting::new(&key).debit(to, amount).credit(from, amount);
    start.wait().await;
    let answer = client.post(p).await;
    if overdraft {
        let e = answer.expect_err("an overdraft");
        assert_eq!(e.reason(), Some(Reason::InsufficientFunds), "task {i}: {e}");
        return None;
    }
    let posted = answer.unwrap_or_else(|e| panic!("task {i}: {e}"));
    assert_eq!(
        posted.posting.idempotency_key, key,
        "task {i} got its own answer"
    );
    assert!(
        posted.posting.legs.iter().all(|l| l.amount == amount),
        "task {i}"
    );
    if key == "twice" {
        return Some(posted);
    }
    assert!(!posted.replayed, "task {i}");
    None
}

#[tokio::test]
async fn coalescing_under_200_concurrent_tasks_sends_fewer_calls_than_posts_and_each_task_gets_its_own_answer(
) {
    const TASKS: usize = 200;
    let url = pg::shared_cluster().fresh_database().await;
    let (port, metrics_port) = (free_port(), free_port());
    let metrics = format!("127.0.0.1:{metrics_port}");
    let mut server = serve(&url, port, &["--metrics-listen", &metrics]);
    let mut raw = client_when_up(port, Duration::from_secs(30)).await;
    world_and_one_account(&mut raw).await;
    let client = Client::connect(ClientOptions::new(format!("127.0.0.1:{port}")).coalesce(64))
        .await
        .unwrap();
    for code in ["equity:world", "acct:0"] {
        client.account(code).await.unwrap();
    }
    let metrics_addr = metrics.parse().unwrap();
    let before = scrape(metrics_addr).await;
    let start = Arc::new(tokio::sync::Barrier::new(TASKS));
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| tokio::spawn(one_task(client.clone(), start.clone(), i)))
        .collect();
    let mut twice = Vec::new();
    for t in tasks {
        if let Some(p) = t.await.unwrap() {
            twice.push(p);
        }
    }
    assert_eq!(
        twice[0].posting, twice[1].posting,
        "one posting for the shared key"
    );
    assert_eq!(twice.iter().filter(|p| p.replayed).count(), 1);

    let after = scrape(metrics_addr).await;
    let moved = |name: &str, labels: &[(&str, &str)]| {
        sample(&after, name, labels) - sample(&before, name, labels)
    };
    let calls = moved("ledger_grpc_requests_total", &[("method", "PostBatch")]);
    assert!(
        calls >= 1.0 && calls < TASKS as f64,
        "{calls} PostBatch calls for {TASKS} posts"
    );
    assert_eq!(
        moved("ledger_grpc_requests_total", &[("method", "Post")]),
        0.0
    );
    assert_eq!(moved("ledger_post_batch_requests_sum", &[]), TASKS as f64);
    let stats = client.stats();
    assert_eq!(stats.batch_calls as f64, calls);
    assert_eq!(stats.batched_postings, TASKS as u64);
    eprintln!("{TASKS} concurrent posts went in {calls} PostBatch calls");
    server.kill().unwrap();
    server.wait().unwrap();
    let db = ledger_server::storage::connect(&url).await.unwrap();
    let n: i64 = db
        .query_one("SELECT count(*) FROM postings", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        n,
        (TASKS - TASKS / 20 - 1) as i64,
        "every post but the overdrafts, the shared key once"
    );
}

/// The example of the docs (README.md, docs/client.md, the crate's doc): the body of its
/// `main`, with the server's address passed in. Returns what it posted and read.
async fn documented_example(
    server: &str,
) -> Result<(ledger_client::Posted, ledger_client::Balance), ledger_client::Error> {
    // example:begin
    use ledger_client::{
        AsOf, Client, ClientOptions, Decimal, NewAccount, NewPosting, NormalBalance,
    };
    // example:main
    let ledger = Client::connect(ClientOptions::new(server)).await?;
    // An account's attributes never change: creating one that exists as asked finds it (safe on every run).
    for account in [
        NewAccount::new("assets:bank", "EUR", 2, NormalBalance::Debit),
        NewAccount::new("liabilities:wallet:alice", "EUR", 2, NormalBalance::Credit)
            .metadata("owner", "alice"),
    ] {
        ledger.create_account(account).await?;
    }
    let amount = Decimal::new(1250, 2); // 12.50, at most the account's scale
    let payment = NewPosting::new("order-1042/payment") // the same key on every retry
        .debit("assets:bank", amount)
        .credit("liabilities:wallet:alice", amount);
    let posted = ledger.post(payment).await?; // retried while its outcome is unknown
    println!(
        "{} at sequence {}",
        posted.posting.posting_id, posted.posting.sequence
    );
    let wallet = ledger
        .balance("liabilities:wallet:alice", AsOf::now())
        .await?;
    println!("alice holds {} {}", wallet.balance, wallet.currency); // exact, at its scale
                                                                    // example:end
    Ok((posted, wallet))
}

/// The lines of this file between `// example:MARK` and the next marker, unindented, with
/// the docs' server address in place of the test's.
fn example_lines(mark: &str) -> Vec<String> {
    include_str!("client.rs")
        .lines()
        .skip_while(|l| !l.ends_with(&format!("// example:{mark}")))
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with("// example:"))
        .map(|l| {
            l.strip_prefix("    ").unwrap_or(l).replace(
                "ClientOptions::new(server)",
                "ClientOptions::new(\"127.0.0.1:50051\")",
            )
        })
        .collect()
}

/// The example as the docs show it: a whole program around the test's lines.
fn example_program() -> Vec<String> {
    let mut program = example_lines("begin");
    program.push("#[tokio::main]".into());
    program.push("async fn main() -> Result<(), ledger_client::Error> {".into());
    program.extend(example_lines("main"));
    program.extend(["Ok(())".into(), "}".into()]);
    program
}

/// Code without its layout (rustfmt folds this test's copy of the lines differently).
fn tokens(lines: &[String]) -> String {
    let text: String = lines.concat().split_whitespace().collect();
    text.replace(",)", ")")
        .replace(",}", "}")
        .replace(",]", "]")
}

/// The lines of the first ```` ```LANG ```` block of a markdown text.
fn block(md: &str, lang: &str) -> Vec<String> {
    md.lines()
        .skip_while(|l| l.trim_end() != format!("```{lang}"))
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn the_client_example_of_the_docs_runs_as_written_on_a_fresh_server_and_again() {
    let t = TestLedger::start().await;
    let addr = t.server.as_ref().unwrap().local_addr.to_string();
    let (posted, wallet) = documented_example(&addr)
        .await
        .expect("the example runs on a fresh server");
    assert_eq!((posted.posting.sequence, posted.replayed), (1, false));
    assert_eq!(wallet.balance.exact(), "12.50");
    let (again, wallet) = documented_example(&addr)
        .await
        .expect("and again on the same server: it creates nothing twice");
    assert!(again.replayed, "the same key answers the same posting");
    assert_eq!(again.posting, posted.posting);
    assert_eq!(wallet.balance.exact(), "12.50");
    assert_eq!(t.count("accounts").await, 2);
    assert_eq!(t.count("postings").await, 1);

    // The copies are the same lines: this test's, docs/client.md's, the README's, the crate
    // doc's (which `cargo test --doc -p ledger-client` compiles as the whole program).
    let root = env!("CARGO_MANIFEST_DIR");
    let ours = example_program();
    for doc in ["docs/client.md", "README.md"] {
        let md = std::fs::read_to_string(format!("{root}/{doc}")).unwrap();
        assert_eq!(tokens(&block(&md, "rust")), tokens(&ours), "{doc}");
    }
    let lib = std::fs::read_to_string(format!("{root}/crates/client/src/lib.rs")).unwrap();
    let crate_doc: String = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        tokens(&block(&crate_doc, "no_run")),
        tokens(&ours),
        "crates/client/src/lib.rs"
    );
    assert!(ours.len() >= 20, "{ours:?}");
}

/// The `NAME = …` line of a TOML text's `[SECTION]`.
fn toml_line<'a>(toml: &'a str, section: &str, name: &str) -> Option<&'a str> {
    toml.lines()
        .skip_while(|l| l.trim() != format!("[{section}]"))
        .skip(1)
        .take_while(|l| !l.starts_with('['))
        .find(|l| l.split('=').next().map(str::trim) == Some(name))
}

/// The target triple this test was built for (what `rustc -vV` calls the host).
fn host_triple() -> String {
    let out = std::process::Command::new("rustc")
        .arg("-vV")
        .output()
        .expect("rustc runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let host = text
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc -vV names the host");
    host.trim().to_owned()
}

#[test]
fn the_client_docs_dependency_lines_name_the_crate_and_the_tokio_its_example_is_built_with() {
    let root = env!("CARGO_MANIFEST_DIR");
    let md = std::fs::read_to_string(format!("{root}/docs/client.md")).unwrap();
    let deps = block(&md, "toml").join("\n");
    let crate_manifest =
        std::fs::read_to_string(format!("{root}/crates/client/Cargo.toml")).unwrap();
    assert!(crate_manifest.contains("name = \"ledger-client\"\n"));
    assert!(
        crate_manifest.contains("publish = false\n"),
        "say how else to get it"
    );
    // The path: the crate's directory of a checkout named `ledger` beside the program.
    let line = toml_line(&deps, "dependencies", "ledger-client").expect("ledger-client");
    assert_eq!(
        line,
        r#"ledger-client = { path = "../ledger/crates/client" }"#
    );
    // The tokio the doc example is compiled with (ledger-client's dev-dependency).
    let tokio = toml_line(&deps, "dependencies", "tokio").expect("tokio");
    assert_eq!(
        Some(tokio),
        toml_line(&crate_manifest, "dev-dependencies", "tokio"),
        "crates/client/Cargo.toml's [dev-dependencies] tokio is the docs' line"
    );
    // The lines resolve as a program's manifest: the crate by that name at that path, tokio
    // with those features (cargo resolves offline from the crates this build fetched).
    let dir = std::env::temp_dir().join(format!("ledger-client-user-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("app/src")).unwrap();
    std::os::unix::fs::symlink(root, dir.join("ledger")).ok();
    let manifest =
        format!("[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n{deps}\n");
    std::fs::write(dir.join("app/Cargo.toml"), manifest).unwrap();
    std::fs::write(dir.join("app/src/main.rs"), "fn main() {}\n").unwrap();
    // Resolved against the workspace's lock: the versions this build fetched, not the newest
    // the registry's index happens to know.
    std::fs::copy(format!("{root}/Cargo.lock"), dir.join("app/Cargo.lock")).unwrap();
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--offline", "--format-version", "1"])
        // Only this machine's packages: the others (wasm's bumpalo, say) are never fetched by
        // a build here, so an offline resolve of every platform's fails on a fresh machine.
        .args(["--filter-platform", &host_triple()])
        .current_dir(dir.join("app"))
        .output()
        .expect("cargo runs");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let resolved = |name: &str| {
        meta["packages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == name)
    };
    assert!(resolved("ledger-client") && resolved("tokio"), "{meta}");
}

#[tokio::test]
async fn a_hold_through_the_client_reserves_funds_and_a_partial_capture_posts_part_and_releases_the_rest(
) {
    use ledger_client::{AsOf, Direction, HoldStatus, NewCapture, PostingBy};
    let t = TestLedger::start().await;
    let addr = t.server.as_ref().unwrap().local_addr.to_string();
    let client = Client::connect(ClientOptions::new(&addr)).await.unwrap();
    for a in [
        new_account("equity:world", 2, NormalBalance::Credit, true),
        new_account("acct:card", 2, NormalBalance::Debit, false),
        new_account("acct:shop", 2, NormalBalance::Debit, false),
    ] {
        client.create_account(a).await.unwrap();
    }
    let fund = NewPosting::new("fund")
        .debit("acct:card", dec("100.00"))
        .credit("equity:world", dec("100.00"));
    client.post(fund).await.unwrap();
    let expires = std::time::SystemTime::now() + Duration::from_secs(3600);
    let auth = NewPosting::new("auth")
        .debit("acct:shop", dec("30"))
        .credit("acct:card", dec("30"))
        .hold(Some(expires));
    let hold = client.post(auth).await.unwrap().posting;
    let open = hold.hold.clone().expect("a hold");
    assert_eq!(open.status, HoldStatus::Pending);
    let card = client.balance("acct:card", AsOf::now()).await.unwrap();
    assert_eq!(
        (
            card.balance.exact().as_str(),
            card.held_credits.exact().as_str(),
            card.available.exact().as_str()
        ),
        ("100.00", "30.00", "70.00"),
        "a hold reserves funds and moves none"
    );
    let capture = NewCapture::new("settle", &hold.posting_id)
        .leg("acct:shop", Direction::Debit, dec("12.5"))
        .leg("acct:card", Direction::Credit, dec("12.5"));
    let captured = client.capture(capture.clone()).await.unwrap();
    assert_eq!(
        captured.posting.captures_hold_posting_id.as_deref(),
        Some(hold.posting_id.as_str())
    );
    assert!(client.capture(capture).await.unwrap().replayed, "a replay");
    let card = client.balance("acct:card", AsOf::now()).await.unwrap();
    assert_eq!(
        (
            card.balance.exact().as_str(),
            card.held_credits.exact().as_str(),
            card.available.exact().as_str()
        ),
        ("87.50", "0.00", "87.50"),
        "the capture posts 12.50 and releases the rest"
    );
    let closed = client
        .posting(PostingBy::Id(hold.posting_id.clone()))
        .await
        .unwrap()
        .hold
        .unwrap();
    assert_eq!(closed.status, HoldStatus::Captured);
    assert_eq!(closed.expires_at, open.expires_at);
    assert_eq!(
        closed.captured_by_posting_id.as_deref(),
        Some(captured.posting.posting_id.as_str())
    );
    let before = AsOf {
        recorded_at: Some(captured.posting.recorded_at - Duration::from_micros(1)),
        effective_at: None,
    };
    let then = client
        .posting_as_of(PostingBy::Id(hold.posting_id), before)
        .await
        .unwrap();
    assert_eq!(then.hold.unwrap().status, HoldStatus::Pending, "as it was");
    let again = client
        .capture(NewCapture::new(
            "settle-again",
            captured.posting.captures_hold_posting_id.unwrap(),
        ))
        .await
        .unwrap_err();
    assert_eq!(again.reason(), Some(Reason::HoldNotPending));
    assert!(!again.is_retry_safe());
}

#[tokio::test]
async fn the_client_tells_what_each_posting_is_and_which_hold_a_release_closes() {
    use ledger_client::{NewCapture, NewVoid, PostingKind};
    let t = TestLedger::start().await;
    let addr = t.server.as_ref().unwrap().local_addr.to_string();
    let client = Client::connect(ClientOptions::new(&addr)).await.unwrap();
    for a in [
        new_account("equity:world", 2, NormalBalance::Credit, true),
        new_account("acct:card", 2, NormalBalance::Debit, false),
    ] {
        client.create_account(a).await.unwrap();
    }
    let post = |key: &str| {
        NewPosting::new(key)
            .debit("acct:card", dec("10.00"))
            .credit("equity:world", dec("10.00"))
    };
    let fund = client.post(post("fund")).await.unwrap().posting;
    let hold = client.post(post("h").hold(None)).await.unwrap().posting;
    let capture = client
        .capture(NewCapture::new("c", &hold.posting_id))
        .await
        .unwrap()
        .posting;
    let void_of = |key: &str, id: &str| NewVoid {
        idempotency_key: key.into(),
        posting_id: id.into(),
        reason: String::new(),
        effective_at: None,
    };
    let void = client
        .void(void_of("v", &capture.posting_id))
        .await
        .unwrap();
    let hold2 = client.post(post("h2").hold(None)).await.unwrap().posting;
    let release = client.void(void_of("r", &hold2.posting_id)).await.unwrap();
    assert_eq!(
        [&fund, &hold, &capture, &void.posting, &release.posting].map(|p| p.kind),
        [
            PostingKind::Posting,
            PostingKind::Hold,
            PostingKind::Capture,
            PostingKind::Void,
            PostingKind::Release
        ]
    );
    assert_eq!(
        release.posting.releases_hold_posting_id.as_deref(),
        Some(hold2.posting_id.as_str())
    );
    assert_eq!(void.posting.releases_hold_posting_id, None);
}

#[test]
fn the_client_knows_every_reason_the_ledger_can_answer_and_no_other() {
    let ledger: Vec<&str> = ledger_core::error::ALL_REASONS
        .iter()
        .map(|r| r.as_str())
        .collect();
    let client: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(client, ledger);
}

// Ledgers through the client. `a_ledger_code_the_ledger_would_refuse_fails_before_any_call`
// runs on any server; the others need the ledger RPCs and isolation (issue 25) on the server.

#[tokio::test]
async fn a_ledger_code_the_ledger_would_refuse_fails_before_any_call() {
    use ledger_client::{AsOf, NewCapture, NewLedger, NewVoid, PostingBy};
    let mut t = TestLedger::start().await;
    let addr = t.server.as_ref().unwrap().local_addr.to_string();
    let e = Client::connect(ClientOptions::new(&addr).ledger("Acme"))
        .await
        .err()
        .expect("a bad default ledger fails connect");
    assert_eq!(e.kind, ErrorKind::Refused(Reason::InvalidField), "{e}");
    assert_eq!(e.metadata["field"], "ledger");
    let client = Client::connect(ClientOptions::new(&addr).retry(RetryPolicy::never()))
        .await
        .unwrap();
    assert_eq!(client.ledger_code(), "default");
    assert_eq!(
        client.ledger("").ledger_code(),
        "default",
        "empty is default"
    );
    // The server is gone: whatever the client answers now, it answers without a call.
    t.server.take().unwrap().shutdown().await.unwrap();
    let sent = client.stats().attempts;
    let bad = client.ledger("no spaces");
    let posting = || {
        NewPosting::new("k")
            .debit("a", dec("1"))
            .credit("b", dec("1"))
    };
    let void = NewVoid {
        idempotency_key: "v".into(),
        posting_id: "p".into(),
        reason: String::new(),
        effective_at: None,
    };
    let errors = [
        bad.create_account(new_account("a", 2, NormalBalance::Debit, false))
            .await
            .err(),
        bad.account("a").await.err(),
        bad.post(posting()).await.err(),
        bad.post_batch(vec![posting()]).await.err(),
        bad.void(void).await.err(),
        bad.capture(NewCapture::new("c", "p")).await.err(),
        bad.posting(PostingBy::Key("k".into())).await.err(),
        bad.balance("a", AsOf::now()).await.err(),
        bad.trial_balance("", AsOf::now()).await.err(),
        bad.entries("a", AsOf::now()).await.err(),
        client.get_ledger("UPPER").await.err(),
        client.create_ledger(NewLedger::new("")).await.err(),
        client
            .create_ledger(NewLedger::new("x".repeat(65)))
            .await
            .err(),
    ];
    for (i, e) in errors.into_iter().enumerate() {
        let e = e.unwrap_or_else(|| panic!("call {i} refused"));
        assert_eq!(e.kind, ErrorKind::Refused(Reason::InvalidField), "{i}: {e}");
        assert_eq!(e.metadata["field"], "ledger", "{i}");
        assert!(e.message.contains("MAX_LEDGER_CODE_CHARS"), "{i}: {e}");
    }
    assert_eq!(client.stats().attempts, sent, "no call was made");
}

#[test]
fn the_clients_rule_for_ledger_codes_is_the_ledgers() {
    use ledger_core::ledger::{validate_ledger_code, DEFAULT_LEDGER};
    assert_eq!(
        ledger_client::MAX_LEDGER_CODE_CHARS,
        ledger_core::limits::MAX_LEDGER_CODE_CHARS
    );
    assert_eq!(ledger_client::DEFAULT_LEDGER, DEFAULT_LEDGER);
    let long = "a".repeat(ledger_client::MAX_LEDGER_CODE_CHARS);
    let longer = format!("{long}b");
    for code in [
        "", "default", "acme", "a-b_c9", "Acme", "a b", "a.b", "a:b", "é", "-", "_", &long, &longer,
    ] {
        assert_eq!(
            ledger_client::validate_ledger_code(code).is_ok(),
            validate_ledger_code(code).is_ok(),
            "{code:?}"
        );
    }
}

#[tokio::test]
async fn the_clients_default_ledger_and_a_per_call_ledger_keep_one_account_code_apart() {
    use ledger_client::{AsOf, NewLedger, PostingBy};
    let t = TestLedger::start().await;
    let addr = t.server.as_ref().unwrap().local_addr.to_string();
    let admin = Client::connect(ClientOptions::new(&addr)).await.unwrap();
    for code in ["acme", "globex"] {
        admin.create_ledger(NewLedger::new(code)).await.unwrap();
    }
    let acme = Client::connect(ClientOptions::new(&addr).ledger("acme"))
        .await
        .unwrap();
    let globex = acme.ledger("globex");
    assert_eq!(
        (acme.ledger_code(), globex.ledger_code()),
        ("acme", "globex")
    );
    // The same codes in both ledgers, at other scales: each amount converts at its own.
    for (client, scale) in [(&acme, 2), (&globex, 0)] {
        for a in [
            new_account("equity:world", scale, NormalBalance::Credit, true),
            new_account("assets:bank", scale, NormalBalance::Debit, false),
        ] {
            let (account, created) = client.create_account(a).await.unwrap();
            assert!(created, "{} in {}", account.code, client.ledger_code());
            assert_eq!(account.ledger, client.ledger_code());
        }
    }
    let pay = |amount: &str| {
        NewPosting::new("pay-1")
            .debit("assets:bank", dec(amount))
            .credit("equity:world", dec(amount))
    };
    // One key in two ledgers: two postings (keys are scoped by ledger), each its ledger's first.
    let in_acme = acme.post(pay("12.50")).await.unwrap();
    let in_globex = globex.post(pay("7")).await.unwrap();
    assert!(!in_acme.replayed && !in_globex.replayed);
    assert_ne!(in_acme.posting.posting_id, in_globex.posting.posting_id);
    assert_eq!(
        (
            in_acme.posting.ledger.as_str(),
            in_globex.posting.ledger.as_str()
        ),
        ("acme", "globex")
    );
    assert_eq!(
        (in_acme.posting.sequence, in_globex.posting.sequence),
        (1, 1)
    );
    let e = globex.post(pay("0.5")).await.unwrap_err();
    assert_eq!(e.reason(), Some(Reason::AmountScale), "globex's scale: {e}");
    let bank = |c: &Client| {
        let c = c.clone();
        async move { c.balance("assets:bank", AsOf::now()).await }
    };
    assert_eq!(bank(&acme).await.unwrap().balance.to_string(), "12.50");
    assert_eq!(bank(&globex).await.unwrap().balance.to_string(), "7");
    let e = bank(&acme.ledger("")).await.unwrap_err();
    assert_eq!(
        e.reason(),
        Some(Reason::AccountNotFound),
        "not in default: {e}"
    );
    let by_key = acme.posting(PostingBy::Key("pay-1".into())).await.unwrap();
    assert_eq!(by_key.posting_id, in_acme.posting.posting_id);
    let by_key = globex
        .posting(PostingBy::Key("pay-1".into()))
        .await
        .unwrap();
    assert_eq!(by_key.posting_id, in_globex.posting.posting_id);
    let e = globex
        .posting(PostingBy::Id(in_acme.posting.posting_id.clone()))
        .await
        .unwrap_err();
    assert_eq!(e.reason(), Some(Reason::PostingNotFound), "{e}");
    for (client, n) in [(&acme, 2), (&globex, 2), (&admin, 0)] {
        let trial = client.trial_balance("", AsOf::now()).await.unwrap();
        assert_eq!(trial.balances.len(), n, "{}", client.ledger_code());
    }
    let entries = globex.entries("assets:bank", AsOf::now()).await.unwrap();
    assert_eq!(entries.len(), 1);
}

#[tokio::test]
async fn creating_a_ledger_again_finds_it_and_other_attributes_are_a_conflict() {
    use ledger_client::NewLedger;
    let t = TestLedger::start().await;
    let addr = t.server.as_ref().unwrap().local_addr.to_string();
    let client = Client::connect(ClientOptions::new(&addr)).await.unwrap();
    let acme = || {
        NewLedger::new("acme")
            .description("Acme Corp")
            .metadata("region", "eu")
    };
    let first = client.create_ledger(acme()).await.unwrap();
    assert!(first.created);
    assert_eq!(
        (
            first.ledger.code.as_str(),
            first.ledger.description.as_str()
        ),
        ("acme", "Acme Corp")
    );
    assert_eq!(first.ledger.metadata["region"], "eu");
    let again = client.create_ledger(acme()).await.unwrap();
    assert!(!again.created);
    assert_eq!(again.ledger, first.ledger, "the ledger as first stored");
    let e = client
        .create_ledger(NewLedger::new("acme").description("Acme Inc"))
        .await
        .unwrap_err();
    assert_eq!(e.reason(), Some(Reason::LedgerConflict), "{e}");
    assert!(!e.is_retry_safe());
    assert_eq!(client.get_ledger("acme").await.unwrap(), first.ledger);
    let e = client.get_ledger("nobody").await.unwrap_err();
    assert_eq!(e.reason(), Some(Reason::LedgerNotFound), "{e}");
    let default = client.get_ledger("default").await.unwrap();
    assert_eq!(default.code, "default");
}

#[tokio::test]
async fn list_ledgers_pages_through_every_ledger_in_code_order() {
    use ledger_client::NewLedger;
    let t = TestLedger::start().await;
    let addr = t.server.as_ref().unwrap().local_addr.to_string();
    let client = Client::connect(ClientOptions::new(&addr)).await.unwrap();
    for code in ["paging-c", "paging-a", "paging-b"] {
        client.create_ledger(NewLedger::new(code)).await.unwrap();
    }
    let all: Vec<String> = client
        .list_all_ledgers()
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.code)
        .collect();
    assert_eq!(all, ["default", "paging-a", "paging-b", "paging-c"]);
    for size in [1, 2, 3] {
        let (mut codes, mut token, mut pages) = (Vec::new(), String::new(), 0);
        loop {
            let page = client.list_ledgers(size, &token).await.unwrap();
            assert!(page.ledgers.len() <= size as usize, "page size {size}");
            codes.extend(page.ledgers.into_iter().map(|l| l.code));
            pages += 1;
            if page.next_page_token.is_empty() {
                break;
            }
            token = page.next_page_token;
        }
        assert_eq!(codes, all, "page size {size}");
        assert!(
            pages >= all.len().div_ceil(size as usize),
            "page size {size}"
        );
    }
}

#[tokio::test]
async fn coalesced_posts_to_two_ledgers_travel_in_post_batch_calls_of_one_ledger_each() {
    use ledger_client::{AsOf, NewLedger};
    const TASKS: usize = 100;
    let t = TestLedger::start().await;
    let addr = t.server.as_ref().unwrap().local_addr.to_string();
    let client = Client::connect(ClientOptions::new(&addr).coalesce(64))
        .await
        .unwrap();
    let ledgers = ["left", "right"];
    for code in ledgers {
        client.create_ledger(NewLedger::new(code)).await.unwrap();
        let on = client.ledger(code);
        for a in [
            new_account("equity:world", 2, NormalBalance::Credit, true),
            new_account("acct:0", 2, NormalBalance::Debit, false),
        ] {
            on.create_account(a).await.unwrap();
        }
    }
    let start = Arc::new(tokio::sync::Barrier::new(TASKS));
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let on = client.ledger(ledgers[i % 2]);
            let start = start.clone();
            tokio::spawn(async move {
                let amount = Decimal::new(i as i64 + 1, 2);
                let p = NewPosting::new(format!("t-{i}"))
                    .debit("acct:0", amount)
                    .credit("equity:world", amount);
                start.wait().await;
                let posted = on.post(p).await.unwrap_or_else(|e| panic!("task {i}: {e}"));
                assert_eq!(posted.posting.ledger, on.ledger_code(), "task {i}");
                assert_eq!(posted.posting.idempotency_key, format!("t-{i}"));
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let stats = client.stats();
    assert_eq!(stats.batched_postings, TASKS as u64);
    assert!(stats.batch_calls >= 2, "one call per ledger at least");
    for (k, code) in ledgers.iter().enumerate() {
        // Task i posted i + 1 cents to ledger i mod 2.
        let cents: i64 = (0..TASKS as i64)
            .filter(|i| i % 2 == k as i64)
            .map(|i| i + 1)
            .sum();
        let b = client
            .ledger(code)
            .balance("acct:0", AsOf::now())
            .await
            .unwrap();
        assert_eq!(b.balance, Decimal::new(cents, 2), "{code}");
        assert_eq!(
            b.as_of.sequence,
            (TASKS / 2) as u64,
            "{code}: its own sequence"
        );
    }
}
