//! The CLI on accounts that change, against a running server: `ledger account update` (a
//! freeze, a floor, debit limits), `ledger account versions`, `ledger account get --as-of`,
//! and `ledger post --if-last-sequence / --if-available`, as an operator would run them.

use crate::cli::{json, ledger, stderr};
use crate::support::*;
use serde_json::Value;

/// `acct:0` (debit-normal, no negative balance) funded with 100.00 from `equity:world`; the
/// server's address.
async fn funded() -> (TestLedger, String) {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    t.post(transfer("fund", "equity:world", "acct:0", "100.00"))
        .await
        .unwrap();
    let s = t.server.as_ref().unwrap().local_addr.to_string();
    (t, s)
}

/// `ledger account update acct:0 --expected-version V --reason R --key K` with `more`, in JSON.
fn update<'a>(v: &'a str, reason: &'a str, key: &'a str, more: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "account",
        "update",
        "acct:0",
        "--expected-version",
        v,
        "--reason",
        reason,
        "--key",
        key,
    ];
    a.extend(more);
    a.extend(["--format", "json"]);
    a
}

/// Each value of `field` of the JSON objects of `list`.
fn each<'a>(list: &'a Value, field: &str) -> Vec<&'a Value> {
    let items = list.as_array().expect("a list");
    items.iter().map(|v| &v[field]).collect()
}

#[tokio::test]
async fn a_freeze_through_the_cli_refuses_a_post_with_account_frozen_exit_1_and_its_retry_is_a_replay(
) {
    let (mut t, s) = funded().await;
    let freeze = update("1", "fraud review", "freeze-1", &["--status", "frozen"]);
    let first = json(&ledger(&freeze, &s).await);
    assert_eq!(first["replayed"], false);
    let account = &first["account"];
    assert_eq!(
        (&account["version"], &account["status"]),
        (&Value::from("2"), &Value::from("ACCOUNT_STATUS_FROZEN"))
    );
    assert_eq!(account["versionInfo"]["reason"], "fraud review");
    assert_eq!(
        account["versionInfo"]["changed"],
        serde_json::json!(["status"])
    );
    let again = json(&ledger(&freeze, &s).await);
    assert_eq!(
        (&again["replayed"], &again["account"]["version"]),
        (&Value::Bool(true), &Value::from("2"))
    );
    let spend = [
        "post",
        "--key",
        "spend-1",
        "equity:world:debit:10.00",
        "acct:0:credit:10.00",
    ];
    let refused = ledger(&spend, &s).await;
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("FailedPrecondition ACCOUNT_FROZEN"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(t.balance("acct:0", None).await.balance, "100.00");
    let stale = ledger(&update("1", "cleared", "open-1", &["--status", "open"]), &s).await;
    assert_eq!(stale.status.code(), Some(1));
    assert!(
        stderr(&stale).contains("Aborted ACCOUNT_VERSION_MISMATCH"),
        "{}",
        stderr(&stale)
    );
    // The table: the account at its new version, a line per field, and the replay flag.
    let mut open = update("2", "cleared", "open-2", &["--status", "open"]);
    open.truncate(open.len() - 2);
    let out = ledger(&open, &s).await;
    let text = String::from_utf8_lossy(&out.stdout);
    for line in ["account.version", "account.status", "replayed"] {
        assert!(text.lines().any(|l| l.starts_with(line)), "{line}: {text}");
    }
    assert!(
        text.contains("ACCOUNT_STATUS_OPEN") && text.contains("false"),
        "{text}"
    );
}

#[tokio::test]
async fn account_versions_lists_versions_1_to_3_oldest_first_with_their_reasons_and_get_as_of_answers_the_one_then(
) {
    let (_t, s) = funded().await;
    let limits = [
        "--floor",
        "-50.00",
        "--debit-limit",
        "500.00/86400",
        "--debit-limit",
        "1000.00/604800",
    ];
    let v2 = json(&ledger(&update("1", "overdraft agreed", "terms-1", &limits), &s).await);
    assert_eq!(v2["account"]["balanceFloor"], "-50.00");
    let more = ["--status", "frozen", "--no-debit-limits"];
    json(&ledger(&update("2", "card lost", "freeze-1", &more), &s).await);
    let listed = json(&ledger(&["account", "versions", "acct:0", "--format", "json"], &s).await);
    let versions = &listed["versions"];
    assert_eq!(each(versions, "version"), ["1", "2", "3"]);
    let infos: Vec<&Value> = each(versions, "versionInfo");
    let field = |f: &str| infos.iter().map(|i| i[f].clone()).collect::<Vec<_>>();
    assert_eq!(field("reason"), ["", "overdraft agreed", "card lost"]);
    assert_eq!(
        field("changed"),
        [
            serde_json::json!([]),
            serde_json::json!(["balance_floor", "debit_limits"]),
            serde_json::json!(["status", "debit_limits"])
        ]
    );
    assert_eq!(field("afterSequence"), ["0", "1", "1"]);
    assert_eq!(each(versions, "balanceFloor"), ["0.00", "-50.00", "-50.00"]);
    let windows: Vec<usize> = each(versions, "debitLimits")
        .iter()
        .map(|l| l.as_array().unwrap().len())
        .collect();
    assert_eq!(windows, [0, 2, 0]);
    // The table: a header and a row per version, oldest first.
    let out = ledger(&["account", "versions", "acct:0"], &s).await;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows.len(), 4, "{text}");
    assert!(
        rows[0].starts_with("VERSION") && rows[0].contains("DEBIT_LIMITS"),
        "{text}"
    );
    assert!(
        rows[2].starts_with('2') && rows[2].contains("500.00/86400,1000.00/604800"),
        "{text}"
    );
    assert!(
        rows[3].starts_with('3') && rows[3].contains("frozen") && rows[3].ends_with("card lost"),
        "{text}"
    );
    // The version in force when version 2 was recorded, and now.
    let at = infos[1]["recordedAt"].as_str().unwrap();
    let get = |cut: &[&'static str]| {
        let mut a = vec!["account", "get", "acct:0", "--format", "json"];
        a.extend(cut);
        a
    };
    let then = json(&ledger(&[get(&[]), vec!["--as-of", at]].concat(), &s).await);
    assert_eq!(
        (&then["version"], &then["status"]),
        (&Value::from("2"), &Value::from("ACCOUNT_STATUS_OPEN"))
    );
    let before = ledger(&get(&["--as-of", "2020-01-01"]), &s).await;
    assert_eq!(before.status.code(), Some(1), "created after the cut-off");
    assert!(
        stderr(&before).contains("ACCOUNT_NOT_FOUND"),
        "{}",
        stderr(&before)
    );
    let now = json(&ledger(&get(&[]), &s).await);
    assert_eq!(
        (&now["version"], &now["status"]),
        (&Value::from("3"), &Value::from("ACCOUNT_STATUS_FROZEN"))
    );
}

#[tokio::test]
async fn a_post_with_a_stale_if_last_sequence_fails_condition_failed_and_with_the_current_one_succeeds(
) {
    let (mut t, s) = funded().await;
    let balance = json(&ledger(&["balance", "acct:0", "--format", "json"], &s).await);
    assert_eq!(balance["lastSequence"], "1", "the funding");
    let spend = |key: &'static str, condition: [&'static str; 2]| {
        let mut a = vec!["post", "--key", key, "--format", "json"];
        a.extend(condition);
        a.extend(["equity:world:debit:5.00", "acct:0:credit:5.00"]);
        a
    };
    let stale = ledger(&spend("stale", ["--if-last-sequence", "acct:0=0"]), &s).await;
    assert_eq!(stale.status.code(), Some(1), "{}", stderr(&stale));
    assert!(
        stderr(&stale).contains("FailedPrecondition CONDITION_FAILED"),
        "{}",
        stderr(&stale)
    );
    let ok = json(&ledger(&spend("current", ["--if-last-sequence", "acct:0=1"]), &s).await);
    let sequence = ok["posting"]["sequence"].clone();
    let after = json(&ledger(&["balance", "acct:0", "--format", "json"], &s).await);
    assert_eq!(
        (&after["lastSequence"], &after["balance"]),
        (&sequence, &Value::from("95.00"))
    );
    let short = ledger(&spend("short", ["--if-available", "acct:0=95.01"]), &s).await;
    assert!(
        stderr(&short).contains("CONDITION_FAILED"),
        "{}",
        stderr(&short)
    );
    json(&ledger(&spend("enough", ["--if-available", "acct:0=95.00"]), &s).await);
    assert_eq!(t.balance("acct:0", None).await.balance, "90.00");
    // The table prints it too.
    let table = ledger(&["balance", "acct:0"], &s).await;
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.lines().any(|l| l.starts_with("lastSequence")),
        "{text}"
    );
}

/// Mistakes in the flags of `account update`, `post` and `account get`, and what the message
/// names: the flag, and what is wrong with its value.
fn flag_mistakes() -> Vec<(Vec<&'static str>, Vec<&'static str>)> {
    let up = |more: &[&'static str]| {
        let mut a = vec![
            "account",
            "update",
            "acct:0",
            "--expected-version",
            "1",
            "--reason",
            "r",
            "--key",
            "k",
        ];
        a.extend(more);
        a
    };
    let post = |more: &[&'static str]| {
        let mut a = vec![
            "post",
            "--key",
            "k",
            "acct:0:debit:1.00",
            "equity:world:credit:1.00",
        ];
        a.extend(more);
        a
    };
    vec![
        (
            up(&["--debit-limit", "500.00"]),
            vec!["--debit-limit", "AMOUNT/WINDOW_SECONDS", "no \"/\""],
        ),
        (
            up(&["--debit-limit", "500.00/0"]),
            vec!["--debit-limit", "WINDOW_SECONDS \"0\""],
        ),
        (
            up(&["--debit-limit", "500.00/31622401"]),
            vec!["--debit-limit", "MAX_LIMIT_WINDOW_SECONDS"],
        ),
        (
            up(&["--debit-limit", "lots/60"]),
            vec!["--debit-limit", "AMOUNT \"lots\""],
        ),
        (
            up(&["--status", "paused"]),
            vec!["--status", "'paused'", "open, frozen, closed"],
        ),
        (
            up(&[]),
            vec!["required", "--status", "--no-floor", "--no-debit-limits"],
        ),
        (
            up(&["--floor", "-5.00", "--no-floor"]),
            vec!["--floor", "--no-floor", "cannot be used with"],
        ),
        (
            up(&["--debit-limit", "1/60", "--no-debit-limits"]),
            vec!["--debit-limit", "--no-debit-limits"],
        ),
        (
            up(&["--ceiling", "a lot"]),
            vec!["--ceiling", "\"a lot\"", "--no-ceiling"],
        ),
        (
            vec![
                "account",
                "update",
                "acct:0",
                "--expected-version",
                "0",
                "--reason",
                "r",
                "--key",
                "k",
                "--no-floor",
            ],
            vec!["--expected-version", "'0'"],
        ),
        (
            vec!["account", "update", "acct:0", "--reason", "r", "--no-floor"],
            vec!["--expected-version"],
        ),
        (
            vec![
                "account",
                "update",
                "acct:0",
                "--expected-version",
                "1",
                "--no-floor",
            ],
            vec!["--reason"],
        ),
        (
            vec![
                "account",
                "update",
                "acct:0",
                "--expected-version",
                "1",
                "--reason",
                "r",
                "--no-floor",
            ],
            vec!["needs --key", "retry"],
        ),
        (
            post(&["--if-last-sequence", "acct:0"]),
            vec!["--if-last-sequence", "ACCOUNT=N", "no \"=\""],
        ),
        (
            post(&["--if-last-sequence", "acct:0=latest"]),
            vec!["--if-last-sequence", "\"latest\""],
        ),
        (
            post(&["--if-available", "acct:0=1,00"]),
            vec!["--if-available", "\"1,00\""],
        ),
        (
            vec!["account", "get", "acct:0", "--as-of", "yesterday"],
            vec!["--as-of", "RFC 3339"],
        ),
    ]
}

#[tokio::test]
async fn each_flag_mistake_exits_2_naming_the_flag_and_what_is_wrong_and_sends_nothing() {
    let (t, s) = funded().await;
    let (terms, keys) = (
        t.count("account_terms").await,
        t.count("idempotency_keys").await,
    );
    let mut wrong = Vec::new();
    for (args, names) in flag_mistakes() {
        let out = ledger(&args, &s).await;
        let err = stderr(&out);
        if out.status.code() != Some(2) || !names.iter().all(|n| err.contains(n)) {
            wrong.push(format!(
                "{args:?}: want exit 2 naming {names:?}, got {:?}: {err}",
                out.status.code()
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert_eq!(t.count("account_terms").await, terms, "no update was sent");
    assert_eq!(t.count("idempotency_keys").await, keys, "no post was sent");
}
