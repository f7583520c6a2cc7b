//! The CLI as a client: its write and read commands against a running server, with a token
//! and over TLS, as a person or a script would use them.

use crate::access::Pki;
use crate::support::*;
use ledger_server::access::auth::{auth_line, new_token, AuthFile, Role};
use ledger_server::grpc::pb;
use ledger_server::server::{OpsOptions, TlsPem};
use serde_json::Value;
use std::process::Output;

/// Runs `ledger ARGS…` against `server` (`--server` appended) and returns its output.
pub(crate) async fn ledger(args: &[&str], server: &str) -> Output {
    ledger_with(args, server, &[]).await
}

/// [`ledger`] with the environment variables `env` set.
async fn ledger_with(args: &[&str], server: &str, env: &[(&str, &str)]) -> Output {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--server", server]);
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledger"));
    cmd.args(&all)
        .env_remove("LEDGER_SERVER")
        .env_remove("LEDGER_TOKEN")
        .env_remove("LEDGER_LEDGER");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().await.expect("ledger runs")
}

/// The JSON a command that succeeded printed.
pub(crate) fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

/// The `code` of each ledger in `ledger ledgers list --format json`'s answer.
fn codes_of(listed: &Value) -> Vec<&str> {
    let ledgers = listed["ledgers"].as_array().expect("a ledgers array");
    ledgers
        .iter()
        .map(|l| l["code"].as_str().unwrap())
        .collect()
}

pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test]
async fn the_cli_creates_accounts_posts_replays_voids_and_reads_a_balance() {
    let t = TestLedger::start().await;
    let s = t.server.as_ref().unwrap().local_addr.to_string();
    for (code, normal, neg) in [
        ("equity:world", "credit", true),
        ("assets:bank", "debit", false),
    ] {
        let mut args = vec![
            "account",
            "create",
            code,
            "--currency",
            "EUR",
            "--scale",
            "2",
            "--normal",
            normal,
            "--format",
            "json",
        ];
        if neg {
            args.push("--allow-negative");
        }
        assert_eq!(json(&ledger(&args, &s).await)["created"], true);
    }
    let legs = ["assets:bank:debit:100.00", "equity:world:credit:100.00"];
    let post = |key: &'static str| {
        let mut a = vec!["post", "--key", key, "--memo", "top-up", "--format", "json"];
        a.extend(legs);
        a
    };
    let first = json(&ledger(&post("cli-1"), &s).await);
    let again = json(&ledger(&post("cli-1"), &s).await);
    assert_eq!(
        (&first["replayed"], &again["replayed"]),
        (&Value::Bool(false), &Value::Bool(true))
    );
    let id = first["posting"]["postingId"].as_str().unwrap().to_owned();
    assert_eq!(
        again["posting"]["postingId"],
        id.as_str(),
        "the same posting"
    );
    let balance = json(&ledger(&["balance", "assets:bank", "--format", "json"], &s).await);
    assert_eq!(balance["balance"], "100.00");
    let void = json(
        &ledger(
            &[
                "void", &id, "--key", "undo-1", "--reason", "test", "--format", "json",
            ],
            &s,
        )
        .await,
    );
    assert_eq!(void["posting"]["voidsPostingId"], id.as_str());
    let got = json(
        &ledger(
            &["posting", "get", "--key", "cli-1", "--format", "json"],
            &s,
        )
        .await,
    );
    assert_eq!(got["voidedByPostingId"], void["posting"]["postingId"]);
    let before = json(
        &ledger(
            &[
                "balance",
                "assets:bank",
                "--as-of",
                "2020-01-01",
                "--format",
                "json",
            ],
            &s,
        )
        .await,
    );
    assert_eq!(before["balance"], "0.00");
    assert_eq!(
        before["asOf"]["recordedAt"], "2020-01-01T00:00:00Z",
        "a date is the start of its day, UTC"
    );
    let table = ledger(&["account", "list"], &s).await;
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.starts_with("CODE") && text.contains("assets:bank") && text.contains("equity:world"),
        "{text}"
    );
}

#[tokio::test]
async fn the_cli_holds_captures_in_part_releases_and_reads_a_hold_as_of_before_its_capture() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(2).await;
    t.post(transfer("fund", "equity:world", "acct:0", "50.00"))
        .await
        .unwrap();
    let s = t.server.as_ref().unwrap().local_addr.to_string();
    let legs = ["acct:1:debit:20.00", "acct:0:credit:20.00"];
    let hold = |key: &'static str| {
        let mut a = vec!["post", "--key", key, "--hold", "--format", "json"];
        a.extend(legs);
        a
    };
    let h = json(&ledger(&hold("auth-1"), &s).await);
    assert_eq!(h["posting"]["holdStatus"], "HOLD_STATUS_PENDING");
    let id = h["posting"]["postingId"].as_str().unwrap().to_owned();
    let b = json(&ledger(&["balance", "acct:0", "--format", "json"], &s).await);
    assert_eq!(
        (&b["heldCredits"], &b["available"]),
        (&Value::from("20.00"), &Value::from("30.00"))
    );
    let open_at = b["asOf"]["recordedAt"].as_str().unwrap().to_owned();
    let capture = [
        "capture",
        "--hold-key",
        "auth-1",
        "--key",
        "cap-1",
        "acct:1:debit:15.00",
        "acct:0:credit:15.00",
        "--format",
        "json",
    ];
    let c = json(&ledger(&capture, &s).await);
    assert_eq!(c["posting"]["capturesHoldPostingId"], id.as_str());
    assert_eq!(json(&ledger(&capture, &s).await)["replayed"], true);
    let then = json(
        &ledger(
            &[
                "posting", "get", &id, "--as-of", &open_at, "--format", "json",
            ],
            &s,
        )
        .await,
    );
    assert_eq!(then["holdStatus"], "HOLD_STATUS_PENDING");
    let now = json(&ledger(&["posting", "get", &id, "--format", "json"], &s).await);
    assert_eq!(now["capturedByPostingId"], c["posting"]["postingId"]);
    // A second hold, released by a void; an expiry without --hold is refused by the CLI.
    let h2 = json(&ledger(&hold("auth-2"), &s).await);
    let r = json(
        &ledger(
            &[
                "void",
                "--posting-key",
                "auth-2",
                "--key",
                "rel-2",
                "--format",
                "json",
            ],
            &s,
        )
        .await,
    );
    assert_eq!(r["posting"]["voidsPostingId"], h2["posting"]["postingId"]);
    let b = json(&ledger(&["balance", "acct:0", "--format", "json"], &s).await);
    assert_eq!(
        (&b["balance"], &b["available"]),
        (&Value::from("35.00"), &Value::from("35.00"))
    );
    let out = ledger(
        &[
            "post",
            "--key",
            "x",
            "--hold-expires-at",
            "2030-01-01",
            "acct:1:debit:1.00",
            "acct:0:credit:1.00",
        ],
        &s,
    )
    .await;
    assert!(
        !out.status.success() && stderr(&out).contains("--hold"),
        "{}",
        stderr(&out)
    );
}

/// 10^26 and 9·10^26 EUR at scale 2: 29 and 30 digits in minor units, beyond the 28 or 29
/// of a `rust_decimal::Decimal`, well within the ledger's totals (10^36 minor units).
const SMALL: &str = "100000000000000000000000000.00";
const LARGE: &str = "900000000000000000000000000.00";
const SUM: &str = "1000000000000000000000000000.00";

#[tokio::test]
async fn reports_print_totals_beyond_a_decimal_exactly_as_tables_and_csv() {
    let mut t = TestLedger::start().await;
    t.account("equity:world", "EUR", 2, pb::NormalBalance::Credit, true)
        .await;
    t.account("wallet:r", "EUR", 2, pb::NormalBalance::Debit, false)
        .await;
    for (key, amount) in [("big-1", SMALL), ("big-2", LARGE)] {
        t.post(transfer(key, "equity:world", "wallet:r", amount))
            .await
            .unwrap();
    }
    let s = t.server.as_ref().unwrap().local_addr.to_string();
    let report = |args: &'static [&'static str]| {
        let s = s.clone();
        async move {
            let out = ledger(args, &s).await;
            assert!(out.status.success(), "{args:?}: {}", stderr(&out));
            String::from_utf8(out.stdout).unwrap()
        }
    };
    let csv = report(&["report", "statement", "wallet:r", "--format", "csv"]).await;
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 4, "{csv}");
    assert!(
        lines[1].ends_with(&format!(",{SMALL},,{SMALL},,,")),
        "{csv}"
    );
    assert!(lines[2].ends_with(&format!(",{LARGE},,{SUM},,,")), "{csv}");
    assert_eq!(
        lines[3],
        format!("TOTAL,,,,{SUM},0.00,{SUM},0.00,0.00,{SUM}")
    );
    let table = report(&["report", "statement", "wallet:r"]).await;
    let words = |l: &str| l.split_whitespace().map(String::from).collect::<Vec<_>>();
    let total = words(table.lines().last().unwrap());
    assert_eq!(
        total,
        ["TOTAL", "2", "entries", SUM, "0.00", SUM, "0.00", "0.00", SUM],
        "{table}"
    );
    assert!(table.contains(&format!(" {LARGE}  ")), "{table}");

    let csv = report(&["report", "trial-balance", "--format", "csv"]).await;
    assert_eq!(
        csv.lines().collect::<Vec<_>>(),
        [
            "account,currency,debits,credits,balance,held_debits,held_credits,available"
                .to_string(),
            format!("equity:world,EUR,0.00,{SUM},{SUM},0.00,0.00,{SUM}"),
            format!("wallet:r,EUR,{SUM},0.00,{SUM},0.00,0.00,{SUM}"),
            format!("TOTAL,EUR,{SUM},{SUM},,0.00,0.00,"),
        ]
    );
    let table = report(&["report", "trial-balance"]).await;
    let total = words(table.lines().last().unwrap());
    assert_eq!(
        total,
        ["TOTAL", "EUR", SUM, SUM, "balanced", "0.00", "0.00"],
        "{table}"
    );
    // The same figures as the server's own answer.
    assert_eq!(t.balance("wallet:r", None).await.balance, SUM);
}

#[tokio::test]
async fn a_write_without_a_key_is_refused_before_anything_is_sent_saying_why() {
    let t = TestLedger::start().await;
    let s = t.server.as_ref().unwrap().local_addr.to_string();
    for args in [
        vec!["post", "a:debit:1", "b:credit:1"],
        vec!["void", "0190f0a0-0000-7000-8000-000000000000"],
    ] {
        let out = ledger(&args, &s).await;
        assert!(!out.status.success());
        assert!(stderr(&out).contains("needs --key"), "{}", stderr(&out));
    }
    assert_eq!(t.count("idempotency_keys").await, 0);
}

#[tokio::test]
async fn the_cli_answers_with_the_servers_reason_and_a_down_server_as_refusing_connections() {
    let t = TestLedger::start().await;
    let s = t.server.as_ref().unwrap().local_addr.to_string();
    let out = ledger(&["balance", "nobody:here"], &s).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("ACCOUNT_NOT_FOUND"),
        "{}",
        stderr(&out)
    );
    let down = format!("127.0.0.1:{}", free_port());
    for args in [vec!["balance", "a"], vec!["report", "trial-balance"]] {
        let out = ledger(&args, &down).await;
        assert!(
            stderr(&out).contains(&format!("connection refused at {down}")),
            "{}",
            stderr(&out)
        );
    }
    let out = ledger(&["balance", "a"], "no-port").await;
    assert!(stderr(&out).contains("host:port"), "{}", stderr(&out));
}

#[tokio::test]
async fn report_balance_and_post_authenticate_with_a_token_over_tls() {
    let pki = Pki::new();
    let token = new_token();
    let auth = AuthFile::parse(&auth_line("ops", Role::Writer, &token)).unwrap();
    let t = TestLedger::start_with(OpsOptions {
        auth: Some(auth),
        tls: Some(TlsPem {
            client_ca: None,
            ..pki.server.clone()
        }),
        ..app_role_ops()
    })
    .await;
    let dir = std::env::temp_dir().join(format!("ledger-cli-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let server = format!("localhost:{}", t.server.as_ref().unwrap().local_addr.port());
    let ca = ca.to_str().unwrap();
    let secured = |extra: &[&'static str]| {
        let mut a: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        a.extend([
            "--ca-cert".into(),
            ca.to_owned(),
            "--token".into(),
            token.clone(),
        ]);
        a
    };
    let run = |args: Vec<String>| {
        let server = server.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            ledger(&args, &server).await
        }
    };
    for code in ["equity:world", "assets:bank"] {
        let out = run(secured(&[
            "account",
            "create",
            code,
            "--currency",
            "EUR",
            "--scale",
            "2",
            "--normal",
            "credit",
            "--allow-negative",
        ]))
        .await;
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let out = run(secured(&[
        "post",
        "--key",
        "tls-1",
        "assets:bank:debit:5.00",
        "equity:world:credit:5.00",
    ]))
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run(secured(&["report", "trial-balance", "--format", "csv"])).await;
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("assets:bank,EUR,5.00"),
        "{}",
        stderr(&out)
    );
    // Without the token: the server's refusal, by reason.
    let out = run(vec![
        "balance".into(),
        "assets:bank".into(),
        "--ca-cert".into(),
        ca.to_owned(),
    ])
    .await;
    assert!(stderr(&out).contains("UNAUTHENTICATED"), "{}", stderr(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn help_never_shows_the_values_of_environment_variables_that_can_hold_secrets() {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledger"))
        .args(["balance", "--help"])
        .env("LEDGER_TOKEN", "ldg_secret_token_value")
        .env("LEDGER_CLIENT_KEY", "/secret/key.pem")
        .output()
        .await
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--token"), "{help}");
    assert!(
        !help.contains("ldg_secret_token_value") && !help.contains("/secret/key.pem"),
        "{help}"
    );
}

/// `ledger ARGS…` with `env` set, no `--server`.
async fn ledger_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledger"));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().await.expect("ledger runs")
}

#[tokio::test]
async fn operator_commands_hide_secret_environment_values_and_describe_their_own_database_url() {
    let secret = [
        ("DATABASE_URL", "postgres://u:s3cret@h/db"),
        ("LEDGER_NATS_URL", "nats://n:s3cret@h:4222"),
    ];
    for command in ["serve", "relay", "migrate", "check"] {
        let out = ledger_env(&[command, "--help"], &secret).await;
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(help.contains("--database-url"), "{command}: {help}");
        assert!(
            !help.contains("s3cret"),
            "{command} shows a secret:\n{help}"
        );
    }
    let migrate = ledger_env(&["migrate", "--help"], &[]).await;
    assert!(String::from_utf8_lossy(&migrate.stdout).contains("as its owner"));
    let check = ledger_env(&["check", "--help"], &[]).await;
    assert!(String::from_utf8_lossy(&check.stdout).contains("only reads"));
}

#[tokio::test]
async fn check_exits_2_with_the_cause_when_it_cannot_run_and_1_on_a_violation() {
    let out = ledger_env(
        &[
            "check",
            "--database-url",
            "host=/nonexistent/dir dbname=x user=y",
        ],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("could not run") && err.contains("No such file or directory"),
        "{err}"
    );
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    t.post(transfer("k", "equity:world", "acct:0", "1.00"))
        .await
        .unwrap();
    let url = t.database_url.clone();
    assert_eq!(
        ledger_env(&["check", "--database-url", &url], &[])
            .await
            .status
            .code(),
        Some(0)
    );
    t.db()
        .await
        .batch_execute("SET session_replication_role = replica; UPDATE account_totals SET debits = debits + 1; SET session_replication_role = origin;")
        .await
        .unwrap();
    assert_eq!(
        ledger_env(&["check", "--database-url", &url], &[])
            .await
            .status
            .code(),
        Some(1)
    );
}

#[tokio::test]
async fn an_empty_database_url_means_not_set() {
    let dir = std::env::temp_dir().join(format!(
        "ledger-empty-url-{}",
        uuid::Uuid::now_v7().simple()
    ));
    let d = dir.to_str().unwrap();
    let out = ledger_env(&["migrate", "--data-dir", d], &[("DATABASE_URL", "")]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("migrations applied"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_relay_serves_the_outbox_backlog_on_its_metrics_endpoint() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    t.post(transfer("k", "equity:world", "acct:0", "1.00"))
        .await
        .unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    // A broker that is not there: the relay keeps retrying, the backlog stays and is shown.
    let mut relay = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledger"))
        .args([
            "relay",
            "--database-url",
            &t.database_url,
            "--nats-url",
            &format!("nats://127.0.0.1:{}", free_port()),
            "--metrics-listen",
            &listen,
        ])
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let text = loop {
        if let Ok(s) = tokio::net::TcpStream::connect(&listen).await {
            drop(s);
            break crate::ops::scrape(listen.parse().unwrap()).await;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the relay's metrics endpoint came up"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(
        crate::ops::sample(&text, "ledger_outbox_backlog", &[]),
        1.0,
        "{text}"
    );
    relay.kill().await.unwrap();
}

#[tokio::test]
async fn bench_decide_reports_decisions_per_second_for_each_batch_size() {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledger"))
        .args([
            "bench-decide",
            "--batches",
            "1,3",
            "--seconds",
            "0.05",
            "--repeat",
            "1",
            "--accounts",
            "4",
        ])
        .output()
        .await
        .unwrap();
    let v = json(&out);
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[1]["batch"], 3);
    assert!(
        results
            .iter()
            .all(|r| r["decisions_per_s"].as_f64().unwrap() > 0.0),
        "{v}"
    );
}

#[tokio::test]
async fn a_server_that_wants_a_client_certificate_says_so_when_none_is_given() {
    let pki = Pki::new();
    let t = TestLedger::start_with(OpsOptions {
        auth: Some(AuthFile::parse("svc-m writer mtls").unwrap()),
        tls: Some(TlsPem {
            client_ca: Some(pki.ca_pem.clone().into_bytes()),
            ..pki.server.clone()
        }),
        ..app_role_ops()
    })
    .await;
    let dir = std::env::temp_dir().join(format!("ledger-cli-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let server = format!("localhost:{}", t.server.as_ref().unwrap().local_addr.port());
    let out = ledger(
        &["balance", "a", "--ca-cert", ca.to_str().unwrap()],
        &server,
    )
    .await;
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("give --client-cert and --client-key") && !err.contains("Unknown Unknown"),
        "what to do, and the code once: {err}"
    );
}

/// A file of this text in a directory of its own, removed with it when dropped.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn to_str(&self) -> Option<&str> {
        self.0.to_str()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn temp_file(name: &str, text: &str) -> TempFile {
    let dir = std::env::temp_dir().join(format!("ledger-cli-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    TempFile(path)
}

/// A PostRequest as grpcurl sends it: `amount` from `from` to `to` under `key`.
fn request_json(key: &str, from: &str, to: &str, amount: &str) -> Value {
    serde_json::json!({
        "idempotencyKey": key,
        "legs": [
            { "account": to, "direction": "DIRECTION_DEBIT", "amount": amount },
            { "account": from, "direction": "DIRECTION_CREDIT", "amount": amount },
        ],
    })
}

/// The usage errors of the write commands: the arguments, and what the message must name.
/// `files` are a malformed file, one posting with its own key, a list of postings.
fn usage_error_cases(files: [&str; 3]) -> Vec<(Vec<&str>, Vec<&str>)> {
    let [bad_json, keyed, listed] = files;
    let id = "0190f0a0-0000-7000-8000-000000000000";
    let world = "equity:world:credit:1.00";
    let form = "ACCOUNT:DIRECTION:AMOUNT";
    vec![
        // A dash where a colon belongs: the amount part is what is wrong.
        (
            vec![
                "post",
                "--key",
                "k",
                "liabilities:wallet:carol-1-debit-1.00",
                world,
            ],
            vec![form, "AMOUNT", "\"carol-1-debit-1.00\"", "not dashes"],
        ),
        (
            vec!["post", "--key", "k", "acct:0:sideways:1.00", world],
            vec![form, "DIRECTION", "\"sideways\"", "d, dr, c, cr"],
        ),
        (
            vec!["post", "--key", "k", "wallet:1.00", world],
            vec![form, "\"wallet:1.00\"", "2 part(s)"],
        ),
        (
            vec!["capture", "--hold", id, "--key", "k", "acct:0:debit:1,00"],
            vec![form, "AMOUNT", "\"1,00\""],
        ),
        (
            vec!["post", "acct:0:debit:1.00", world],
            vec!["needs --key", "retry"],
        ),
        (vec!["void", id], vec!["needs --key"]),
        (vec!["capture", "--hold", id], vec!["needs --key"]),
        (
            vec!["post", "--file", bad_json],
            vec![bad_json, "'memmo' at line 2", "DIRECTION_DEBIT"],
        ),
        (
            vec!["post", "--file", keyed, "--key", "other"],
            vec!["\"other\"", "\"from-file\"", "differ"],
        ),
        (
            vec!["post", "--file", "/nonexistent/post.json", "--key", "k"],
            vec!["cannot read", "/nonexistent/post.json"],
        ),
        (
            vec!["post", "--file", listed, "--memo", "m"],
            vec!["--memo", "one posting", "PostBatch"],
        ),
    ]
}

#[tokio::test]
async fn cli_usage_errors_exit_2_naming_the_form_and_the_part_that_is_wrong_and_send_nothing() {
    let mut t = TestLedger::start().await;
    world_and_one_account(&mut t.client).await;
    let s = t.server.as_ref().unwrap().local_addr.to_string();
    let one = request_json("from-file", "equity:world", "acct:0", "1.00").to_string();
    let list = format!("[{one}]");
    let bad_json = temp_file("bad.json", "{\"legs\": [],\n \"memmo\": \"x\"}");
    let keyed = temp_file("one.json", &one);
    let listed = temp_file("list.json", &list);
    let cases = usage_error_cases([
        bad_json.to_str().unwrap(),
        keyed.to_str().unwrap(),
        listed.to_str().unwrap(),
    ]);
    let mut wrong = Vec::new();
    for (args, names) in &cases {
        let out = ledger(args, &s).await;
        let err = stderr(&out);
        if out.status.code() != Some(2) || !names.iter().all(|n| err.contains(n)) {
            wrong.push(format!(
                "{args:?}: want exit 2 naming {names:?}, got {:?}: {err}",
                out.status.code()
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert_eq!(t.count("idempotency_keys").await, 0, "nothing was sent");
}

#[tokio::test]
async fn a_file_posting_without_key_is_recorded_under_its_own_key_every_field_read() {
    let mut t = TestLedger::start().await;
    world_and_one_account(&mut t.client).await;
    let s = t.server.as_ref().unwrap().local_addr.to_string();
    let mut hold = request_json("from-file", "equity:world", "acct:0", "2.00");
    hold["hold"] = true.into();
    hold["holdExpiresAt"] = "2999-01-01T00:00:00Z".into();
    hold["metadata"] = serde_json::json!({ "order": "42" });
    let file = temp_file("hold.json", &hold.to_string());
    let f = file.to_str().unwrap();
    let posted = json(&ledger(&["post", "--file", f, "--format", "json"], &s).await);
    let p = &posted["posting"];
    assert_eq!(p["idempotencyKey"], "from-file");
    assert_eq!(
        (&p["hold"], &p["holdExpiresAt"], &p["metadata"]["order"]),
        (
            &Value::Bool(true),
            &Value::from("2999-01-01T00:00:00Z"),
            &Value::from("42")
        ),
        "{posted}"
    );
    // The same key given as --key too is the same request: a replay.
    let again = ledger(
        &[
            "post",
            "--file",
            f,
            "--key",
            "from-file",
            "--format",
            "json",
        ],
        &s,
    )
    .await;
    assert_eq!(json(&again)["replayed"], true);
}

#[tokio::test]
async fn a_file_list_is_one_post_batch_each_result_printed_exit_1_when_any_request_failed() {
    let mut t = TestLedger::start().await;
    world_and_one_account(&mut t.client).await;
    let s = t.server.as_ref().unwrap().local_addr.to_string();
    let requests = serde_json::json!([
        request_json("b-fund", "equity:world", "acct:0", "10.00"),
        request_json("b-fund", "equity:world", "acct:0", "10.00"), // the same key again
        request_json("b-bad", "equity:world", "acct:0", "1.005"),  // more decimals than 2
        request_json("b-over", "acct:0", "equity:world", "50.00"), // acct:0 holds 10.00
    ]);
    let file = temp_file("batch.json", &requests.to_string());
    let f = file.to_str().unwrap();
    let out = ledger(&["post", "--file", f, "--format", "json"], &s).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("2 of 4 requests"), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let results = v["results"].as_array().unwrap();
    let answer = |i: usize| &results[i];
    assert_eq!(answer(0)["response"]["replayed"], false, "{v}");
    assert_eq!(answer(1)["response"]["replayed"], true, "{v}");
    assert_eq!(
        answer(0)["response"]["posting"]["postingId"],
        answer(1)["response"]["posting"]["postingId"]
    );
    for (i, reason, code) in [(2, "AMOUNT_SCALE", 3), (3, "INSUFFICIENT_FUNDS", 9)] {
        let e = &answer(i)["error"];
        assert_eq!(e["code"], code, "{v}");
        assert_eq!(e["details"][0]["reason"], reason, "{v}");
        assert_eq!(
            e["details"][0]["@type"],
            "type.googleapis.com/google.rpc.ErrorInfo"
        );
    }
    // One call: its postings were written by one transaction.
    let transactions: i64 = t
        .db()
        .await
        .query_one("SELECT count(DISTINCT xmin::text) FROM postings", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(transactions, 1);
    // The table: each result under a line naming it, what `post` prints or the error.
    let table = ledger(&["post", "--file", f], &s).await;
    let text = String::from_utf8_lossy(&table.stdout);
    for line in [
        "# request 0 of 4: replayed (key b-fund)",
        "# request 2 of 4: failed, AMOUNT_SCALE",
        "# request 3 of 4: failed, INSUFFICIENT_FUNDS",
        "4 requests: 2 answered with a posting, 2 failed",
    ] {
        assert!(text.contains(line), "{line:?} in:\n{text}");
    }
    assert!(
        text.lines()
            .any(|l| l.starts_with("error") && l.contains("InvalidArgument AMOUNT_SCALE")),
        "{text}"
    );
    assert_eq!(table.status.code(), Some(1));
    // All accepted (or replayed): exit 0; grpcurl's PostBatch body is taken too.
    let body =
        serde_json::json!({ "requests": [request_json("b-2", "equity:world", "acct:0", "1.00")] });
    let file = temp_file("body.json", &body.to_string());
    let out = ledger(&["post", "--file", file.to_str().unwrap()], &s).await;
    assert!(out.status.success(), "{}", stderr(&out));
}

#[tokio::test]
async fn ledger_help_lists_the_client_commands_apart_from_the_server_operations_and_benchmarks() {
    let out = ledger_env(&["--help"], &[]).await;
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    // Each heading (a line ending in a colon) and the commands listed under it.
    let mut sections: Vec<(String, Vec<String>)> = Vec::new();
    for line in help.lines() {
        if !line.starts_with(' ') && line.ends_with(':') {
            sections.push((line.to_owned(), Vec::new()));
        } else if let (Some(last), Some(name)) = (sections.last_mut(), line.strip_prefix("  ")) {
            last.1
                .extend(name.split_whitespace().next().map(str::to_owned));
        }
    }
    let under = |heading: &str| -> Vec<String> {
        sections
            .iter()
            .find(|(h, _)| h.starts_with(heading))
            .map(|(_, names)| names.clone())
            .unwrap_or_else(|| panic!("a heading {heading:?} in:\n{help}"))
    };
    assert_eq!(
        under("Client commands"),
        [
            "account",
            "post",
            "capture",
            "void",
            "posting",
            "balance",
            "report",
            "reconcile",
            "ledgers",
            "period"
        ],
        "{help}"
    );
    assert_eq!(
        under("Server and operations"),
        ["serve", "relay", "migrate", "check", "token"]
    );
    assert_eq!(
        under("Benchmarks"),
        [
            "bench",
            "bench-as-of",
            "bench-finance",
            "bench-writer",
            "bench-decide"
        ]
    );
}

/// A table's record lines as (name, value): each line is a name, two spaces or more, a value.
fn record_lines(out: &Output) -> Vec<(String, String)> {
    assert!(out.status.success(), "{}", stderr(out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let (name, value) = l
                .split_once("  ")
                .unwrap_or_else(|| panic!("not a name and a value: {l:?}"));
            (name.to_owned(), value.trim_start().to_owned())
        })
        .collect()
}

#[tokio::test]
async fn table_output_shows_what_a_posting_is_and_only_the_fields_it_has_as_help_says() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(2).await;
    t.post(transfer("fund", "equity:world", "acct:0", "50.00"))
        .await
        .unwrap();
    let s = t.server.as_ref().unwrap().local_addr.to_string();
    let legs = ["acct:1:debit:2.00", "acct:0:credit:2.00"];
    let post = |key: &'static str, hold: bool| {
        let mut a = vec!["post", "--key", key];
        if hold {
            a.push("--hold");
        }
        a.extend(legs);
        a
    };
    let value = |lines: &[(String, String)], name: &str| {
        lines
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let plain = record_lines(&ledger(&post("p", false), &s).await);
    let hold = record_lines(&ledger(&post("h", true), &s).await);
    let id = value(&hold, "posting.postingId").unwrap();
    let release = record_lines(&ledger(&["void", &id, "--key", "r"], &s).await);
    for (what, lines) in [("plain", &plain), ("hold", &hold), ("release", &release)] {
        assert!(
            lines
                .iter()
                .all(|(n, v)| !n.is_empty() && !v.is_empty() && !v.ends_with("UNSPECIFIED")),
            "{what}: only fields that are set: {lines:?}"
        );
    }
    assert_eq!(
        value(&plain, "posting.kind").as_deref(),
        Some("POSTING_KIND_POSTING")
    );
    for absent in [
        "posting.voidsPostingId",
        "posting.holdStatus",
        "posting.hold",
        "posting.memo",
    ] {
        assert_eq!(value(&plain, absent), None, "{absent}: {plain:?}");
    }
    assert_eq!(
        (
            value(&hold, "posting.kind").as_deref(),
            value(&hold, "posting.holdStatus").as_deref()
        ),
        (Some("POSTING_KIND_HOLD"), Some("HOLD_STATUS_PENDING"))
    );
    assert_eq!(
        (
            value(&release, "posting.kind").as_deref(),
            value(&release, "posting.releasesHoldPostingId")
        ),
        (Some("POSTING_KIND_RELEASE"), Some(id.clone()))
    );
    assert_eq!(value(&release, "replayed").as_deref(), Some("false"));
    // The help says what the output is.
    let help = ledger_env(&["posting", "get", "--help"], &[]).await;
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        !help.contains("field: value") && help.contains("a line per field it has"),
        "{help}"
    );
}

// Ledgers through the CLI. `a_bad_ledger_code_or_a_file_naming_two_ledgers_is_refused_before_anything_is_sent`
// runs on any server; the others need the ledger RPCs and isolation (issue 25) on the server.

#[tokio::test]
async fn a_bad_ledger_code_or_a_file_naming_two_ledgers_is_refused_before_anything_is_sent() {
    // No accounts: a request that reached the server would fail there (exit 1), not exit 2.
    let t = TestLedger::start().await;
    let s = t.server.as_ref().unwrap().local_addr.to_string();
    let request = |ledger: &str| {
        let mut r = request_json("k", "equity:world", "acct:0", "1.00");
        r["ledger"] = ledger.into();
        r
    };
    let two = temp_file(
        "two.json",
        &serde_json::json!([request("acme"), request("globex")]).to_string(),
    );
    let acme = temp_file("acme.json", &request("acme").to_string());
    let code = "MAX_LEDGER_CODE_CHARS";
    type Env<'a> = &'a [(&'a str, &'a str)];
    let cases: Vec<(Vec<&str>, Env, &str)> = vec![
        (vec!["balance", "acct:0", "--ledger", "Acme"], &[], code),
        (
            vec!["account", "list"],
            &[("LEDGER_LEDGER", "not a code")],
            code,
        ),
        (vec!["ledgers", "create", "Acme"], &[], code),
        (vec!["ledgers", "get", "a/b"], &[], code),
        (
            vec!["report", "trial-balance", "--ledger", "x.y"],
            &[],
            code,
        ),
        (
            vec!["post", "--file", two.to_str().unwrap()],
            &[],
            "writes one ledger",
        ),
        (
            vec![
                "post",
                "--file",
                acme.to_str().unwrap(),
                "--ledger",
                "globex",
            ],
            &[],
            "differ",
        ),
    ];
    let mut wrong = Vec::new();
    for (args, env, names) in &cases {
        let out = ledger_with(args, &s, env).await;
        let err = stderr(&out);
        if out.status.code() != Some(2) || !err.contains(names) {
            wrong.push(format!(
                "{args:?} {env:?}: want exit 2 naming {names:?}, got {:?}: {err}",
                out.status.code()
            ));
        }
    }
    for (args, names) in [
        (
            vec!["--ledgers", "0"],
            "--ledgers must be 1..=1000 (limit MAX_BENCH_LEDGERS)",
        ),
        (
            vec!["--ledgers", "2", "--ledger", "acme"],
            "names the one ledger",
        ),
        (
            vec!["--ledgers", "3", "--concurrency", "2"],
            "every ledger needs a caller",
        ),
    ] {
        let out = ledger_with(&[&["bench"], args.as_slice()].concat(), &s, &[]).await;
        let err = stderr(&out);
        if out.status.success() || !err.contains(names) {
            wrong.push(format!(
                "bench {args:?}: want a refusal naming {names:?}: {err}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert_eq!(t.count("idempotency_keys").await, 0, "nothing was sent");
}

#[tokio::test]
async fn the_cli_creates_gets_and_lists_ledgers_and_a_second_identical_create_finds_the_first() {
    let t = TestLedger::start().await;
    let s = t.server.as_ref().unwrap().local_addr.to_string();
    let create = |code: &'static str, description: &'static str| {
        let mut a = vec!["ledgers", "create", code, "--format", "json"];
        a.extend(["--description", description, "--metadata", "region=eu"]);
        a
    };
    let first = json(&ledger(&create("acme", "Acme Corp"), &s).await);
    assert_eq!(first["created"], true, "{first}");
    let l = &first["ledger"];
    assert_eq!(
        (&l["code"], &l["description"]),
        (&"acme".into(), &"Acme Corp".into())
    );
    assert_eq!(l["metadata"]["region"], "eu");
    let again = json(&ledger(&create("acme", "Acme Corp"), &s).await);
    assert_eq!(again["created"], false);
    assert_eq!(again["ledger"], first["ledger"], "as first stored");
    let conflict = ledger(&create("acme", "Acme Inc"), &s).await;
    assert_eq!(conflict.status.code(), Some(1));
    assert!(
        stderr(&conflict).contains("LEDGER_CONFLICT"),
        "{}",
        stderr(&conflict)
    );
    let got = json(&ledger(&["ledgers", "get", "acme", "--format", "json"], &s).await);
    assert_eq!(got, first["ledger"]);
    let table = record_lines(&ledger(&["ledgers", "get", "acme"], &s).await);
    assert!(table.contains(&("code".into(), "acme".into())), "{table:?}");
    let missing = ledger(&["ledgers", "get", "nobody"], &s).await;
    assert!(
        stderr(&missing).contains("LEDGER_NOT_FOUND"),
        "{}",
        stderr(&missing)
    );
    json(&ledger(&create("globex", "Globex"), &s).await);
    let list = ["ledgers", "list", "--page-size", "1", "--format", "json"];
    let listed = json(&ledger(&list, &s).await);
    let codes = codes_of(&listed);
    assert_eq!(
        codes,
        ["acme", "default", "globex"],
        "every page, in code order"
    );
    let table = ledger(&["ledgers", "list"], &s).await;
    let text = String::from_utf8_lossy(&table.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("CODE") && lines.len() == 4, "{text}");
    assert!(
        lines[1].starts_with("acme") && lines[1].ends_with("Acme Corp"),
        "{text}"
    );
}

#[tokio::test]
async fn ledger_and_ledger_ledger_env_keep_posts_and_balances_of_two_ledgers_apart() {
    let t = TestLedger::start().await;
    let s = t.server.as_ref().unwrap().local_addr.to_string();
    for code in ["acme", "globex"] {
        json(&ledger(&["ledgers", "create", code, "--format", "json"], &s).await);
        for (account, normal) in [("equity:world", "credit"), ("assets:bank", "debit")] {
            let mut args = vec!["account", "create", account, "--currency", "EUR"];
            args.extend(["--scale", "2", "--normal", normal, "--allow-negative"]);
            args.extend(["--ledger", code, "--format", "json"]);
            let created = json(&ledger(&args, &s).await);
            assert_eq!(created["account"]["ledger"], code, "{created}");
        }
    }
    let post = ["post", "--key", "k-1", "--format", "json"];
    let acme = [
        "assets:bank:debit:100.00",
        "equity:world:credit:100.00",
        "--ledger",
        "acme",
    ];
    let globex = ["assets:bank:debit:30.00", "equity:world:credit:30.00"];
    let env = [("LEDGER_LEDGER", "globex")];
    // One key in two ledgers: two postings; the env names the ledger as --ledger does.
    let in_acme = json(&ledger(&[&post[..], &acme].concat(), &s).await);
    let in_globex = json(&ledger_with(&[&post[..], &globex].concat(), &s, &env).await);
    assert_eq!(
        (&in_acme["replayed"], &in_globex["replayed"]),
        (&false.into(), &false.into())
    );
    assert_eq!(in_acme["posting"]["ledger"], "acme");
    assert_eq!(in_globex["posting"]["ledger"], "globex");
    assert_ne!(
        in_acme["posting"]["postingId"],
        in_globex["posting"]["postingId"]
    );
    let balance = ["balance", "assets:bank", "--format", "json"];
    let in_acme = [&balance[..], &["--ledger", "acme"]].concat();
    assert_eq!(json(&ledger(&in_acme, &s).await)["balance"], "100.00");
    assert_eq!(
        json(&ledger_with(&balance, &s, &env).await)["balance"],
        "30.00"
    );
    // The flag wins over the environment, as for every option.
    assert_eq!(
        json(&ledger_with(&in_acme, &s, &env).await)["balance"],
        "100.00"
    );
    let default = ledger(&balance, &s).await;
    assert!(
        stderr(&default).contains("ACCOUNT_NOT_FOUND"),
        "{}",
        stderr(&default)
    );
    let got = [
        "posting", "get", "--key", "k-1", "--ledger", "globex", "--format", "json",
    ];
    let got = json(&ledger(&got, &s).await);
    assert_eq!(got["postingId"], in_globex["posting"]["postingId"]);
    let report = ledger(&["report", "trial-balance", "--ledger", "globex"], &s).await;
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(report.status.success(), "{}", stderr(&report));
    assert!(
        text.starts_with("Trial balance in ledger globex as recorded at"),
        "{text}"
    );
    assert!(text.contains("30.00") && !text.contains("100.00"), "{text}");
}

#[tokio::test]
async fn bench_with_two_ledgers_creates_them_spreads_its_load_and_reports_each_ones_rate() {
    let t = TestLedger::start().await;
    let s = t.server.as_ref().unwrap().local_addr.to_string();
    let bench = [
        "bench",
        "--ledgers",
        "2",
        "--duration",
        "2",
        "--concurrency",
        "4",
    ];
    let bench = [&bench[..], &["--accounts", "10"]].concat();
    for run in 0..2 {
        let out = ledger(&bench, &s).await;
        let err = stderr(&out);
        assert!(out.status.success(), "run {run}: {err}");
        let created = if run == 0 {
            "2 created now"
        } else {
            "0 created now"
        };
        assert!(
            err.contains(&format!("2 ledgers ready ({created})")),
            "run {run}: {err}"
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let summary: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
        assert_eq!(
            (&summary["ledgers"], &summary["errors"]),
            (&2.into(), &0.into())
        );
        let per: Vec<(&str, u64)> = summary["per_ledger"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                (
                    l["ledger"].as_str().unwrap(),
                    l["postings"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            per.iter().map(|(l, _)| *l).collect::<Vec<_>>(),
            ["bench-1", "bench-2"]
        );
        assert!(
            per.iter().all(|(_, n)| *n > 0),
            "load on every ledger: {summary}"
        );
        let total: u64 = per.iter().map(|(_, n)| n).sum();
        assert_eq!(summary["postings"].as_u64(), Some(total), "{summary}");
        assert!(
            err.contains("bench-1") && err.contains("postings/s"),
            "{err}"
        );
    }
    let listed = json(&ledger(&["ledgers", "list", "--format", "json"], &s).await);
    let codes = codes_of(&listed);
    assert_eq!(codes, ["bench-1", "bench-2", "default"]);
}
