//! The docs' runnable examples, run as written: every ```` ```sh quickstart ```` block of the
//! README (and of the as-of guide) against a fresh server, with the test server's address in
//! place of `127.0.0.1:50051` and the directory of the binary under test in place of
//! `$PWD/target/release`. The blocks of one file run in one `bash -euo pipefail`, so any
//! command that fails (exits non-zero) fails the test, and the docs cannot drift from the CLI.

use crate::support::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The info string that marks a block as runnable.
const MARK: &str = "```sh quickstart";
/// The server address the docs name (the default of `ledger serve`).
const DOC_SERVER: &str = "127.0.0.1:50051";
/// Where the docs say the binary is after the build.
const DOC_BIN_DIR: &str = "$PWD/target/release";

/// The bodies of the marked blocks of a Markdown text, in order.
fn marked_blocks(markdown: &str) -> Vec<String> {
    blocks_marked(markdown, MARK)
}

/// The bodies of the blocks of a Markdown text whose opening line is `mark`, in order.
fn blocks_marked(markdown: &str, mark: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in markdown.lines() {
        match current.as_mut() {
            None if line.trim_end() == mark => current = Some(Vec::new()),
            None => {}
            Some(_) if line.starts_with("```") => {
                blocks.push(current.take().unwrap().join("\n"));
            }
            Some(body) => body.push(line),
        }
    }
    assert!(current.is_none(), "a {mark} block is not closed");
    blocks
}

/// Runs the marked blocks of `doc` (relative to the crate's root) against a fresh server and
/// returns their standard output; panics, showing the trace, when a command fails.
async fn run_marked_blocks(doc: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(doc);
    let text = std::fs::read_to_string(&path).expect("the doc is readable");
    let blocks = marked_blocks(&text);
    assert!(!blocks.is_empty(), "{doc} has no {MARK} block");
    let t = TestLedger::start().await;
    let server = t.server.as_ref().unwrap().local_addr.to_string();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_ledger"));
    let bin_dir = bin.parent().unwrap().to_str().unwrap().to_owned();
    let mut script = String::from("set -x\n");
    for block in &blocks {
        assert!(
            block.contains(DOC_SERVER) && block.contains(DOC_BIN_DIR),
            "a {MARK} block of {doc} names the server as {DOC_SERVER} and the binary's directory as {DOC_BIN_DIR}, so this test can put its own in their place:\n{block}"
        );
        script.push_str(
            &block
                .replace(DOC_SERVER, &server)
                .replace(DOC_BIN_DIR, &bin_dir),
        );
        script.push('\n');
    }
    // A directory of its own, as the checkout is for a person: the blocks may write nothing
    // there.
    let dir = std::env::temp_dir().join(format!(
        "ledger-readme-{}-{}",
        std::process::id(),
        doc.replace('/', "-")
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let run = tokio::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(&dir)
        .env_remove("LEDGER_SERVER")
        .env_remove("LEDGER_TOKEN")
        .env_remove("LEDGER_CA_CERT")
        .env_remove("LEDGER_CLIENT_CERT")
        .env_remove("LEDGER_CLIENT_KEY")
        .env_remove("LEDGER_TLS_DOMAIN")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .unwrap_or_else(|_| panic!("the {MARK} blocks of {doc} did not finish within 120 s"))
        .expect("bash runs");
    // Where a person runs the blocks is the checkout: nothing may be left there.
    let left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        left.is_empty(),
        "{doc}'s {MARK} blocks write {left:?} where they are run (the checkout, for a person): write to a temporary directory"
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "a command of {doc}'s {MARK} blocks failed ({}); the trace (each command after `+`) ends:\n{}\n--- stdout ends:\n{}",
        out.status,
        tail(&String::from_utf8_lossy(&out.stderr), 40),
        tail(&stdout, 40),
    );
    stdout
}

fn tail(s: &str, lines: usize) -> String {
    let all: Vec<&str> = s.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The values of the `NAME  value` lines of table output, in order.
fn values<'a>(stdout: &'a str, name: &str) -> Vec<&'a str> {
    stdout
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some(name)).then(|| words.next().unwrap_or(""))
        })
        .collect()
}

#[tokio::test]
async fn the_readmes_quickstart_runs_as_written() {
    let out = run_marked_blocks("README.md").await;
    // What the README says the commands answer.
    assert_eq!(
        values(&out, "replayed"),
        ["false", "false", "true", "false", "false"],
        "the funding, the payment, its replay, the void; acme's funding:\n{out}"
    );
    assert_eq!(
        values(&out, "created"),
        ["true", "true", "true", "false", "true", "true"],
        "two accounts; the ledger acme, found again; its two accounts:\n{out}"
    );
    let voided_by = values(&out, "voidedByPostingId");
    assert!(
        voided_by.len() == 1 && !voided_by[0].is_empty(),
        "the payment shows its void: {voided_by:?}"
    );
    assert_eq!(
        values(&out, "balance"),
        ["100.00", "100.00"],
        "the wallet's balance; acme's bank"
    );
    assert!(
        out.contains("Trial balance in ledger acme"),
        "acme's trial balance is printed:\n{out}"
    );
    assert!(
        out.contains("Statement of liabilities:wallet:alice-"),
        "the statement is printed:\n{out}"
    );
}

#[tokio::test]
async fn the_as_of_guides_walkthrough_runs_as_written() {
    let out = run_marked_blocks("docs/as-of.md").await;
    // Now; what the ledger said at the close; 31 December as known now; as known at the
    // close; every leg.
    assert_eq!(
        values(&out, "balance"),
        ["98.00", "100.00", "98.00", "100.00", "88.00"],
        "the balances the guide's comments give:\n{out}"
    );
    assert!(
        out.contains("carol.csv") && out.contains("tb.csv"),
        "the reports are written:\n{out}"
    );
}

#[tokio::test]
async fn the_post_batch_recipe_runs_as_written_each_request_answered_as_post_would() {
    let out = run_marked_blocks("docs/post-batch.md").await;
    for line in [
        "# request 0 of 4: posted (key topup-",
        "# request 1 of 4: replayed (key topup-",
        "# request 2 of 4: failed, INVALID_AMOUNT",
        "# request 3 of 4: failed, INSUFFICIENT_FUNDS",
        "4 requests: 2 answered with a posting, 2 failed",
        "ledger post exited 1",
    ] {
        assert!(out.contains(line), "{line:?} in:\n{out}");
    }
    assert_eq!(values(&out, "replayed"), ["false", "true"], "{out}");
    assert_eq!(values(&out, "metadata.field"), ["legs[0].amount"], "{out}");
    assert_eq!(
        values(&out, "balance"),
        ["20.00"],
        "the top-up, once:\n{out}"
    );
}

/// docs/clients.md's runnable blocks: the shell that makes the Python stubs, then the Python.
const CLIENTS_SH: &str = "```sh clients";
const CLIENTS_PY: &str = "```python clients";

#[tokio::test]
async fn the_python_clients_guide_runs_as_written_against_a_fresh_server() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("docs/clients.md")).expect("docs/clients.md");
    let (sh, py) = (
        blocks_marked(&text, CLIENTS_SH),
        blocks_marked(&text, CLIENTS_PY),
    );
    assert!(
        sh.len() == 1 && py.len() == 1,
        "one {CLIENTS_SH} and one {CLIENTS_PY} block"
    );
    assert!(
        sh[0].contains(DOC_SERVER),
        "the shell block names the server as {DOC_SERVER}"
    );
    let t = TestLedger::start().await;
    let server = t.server.as_ref().unwrap().local_addr.to_string();
    // The Python in the shell of the stubs, as a person pastes it; run where the checkout's
    // `proto` is (a link to it), which must be all that is left there afterwards.
    let script = format!(
        "{}\npython3 - <<'PYTHON'\n{}\nPYTHON\n",
        sh[0].replace(DOC_SERVER, &server),
        py[0]
    );
    let dir =
        std::env::temp_dir().join(format!("ledger-clients-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(root.join("proto"), dir.join("proto")).unwrap();
    let run = tokio::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(&dir)
        .env_remove("PYTHONPATH")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the Python guide finishes within 120 s")
        .expect("bash runs");
    std::fs::remove_file(dir.join("proto")).unwrap();
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "docs/clients.md's blocks failed ({}; the Python packages come from scripts/ensure-deps.sh):\n{}\n--- stdout:\n{stdout}",
        out.status,
        tail(&stderr, 40)
    );
    assert!(left.is_empty(), "the guide leaves {left:?} where it is run");
    let lines: Vec<&str> = stdout.lines().collect();
    let posted = values(&stdout, "posted");
    assert_eq!(posted.len(), 1, "{stdout}");
    assert!(
        lines.iter().any(|l| l.ends_with("replayed False"))
            && lines.contains(&format!("again {} replayed True", posted[0]).as_str())
            && lines.contains(&"refused FAILED_PRECONDITION INSUFFICIENT_FUNDS True")
            && lines.contains(&"balance 25.00 EUR"),
        "what the guide says it prints:\n{stdout}"
    );
}

#[test]
fn marked_blocks_are_found_and_others_left_alone() {
    let md = "a\n```sh\nnot this\n```\n```sh quickstart\none\ntwo\n```\n```\nnor this\n```\n```sh quickstart\nthree\n```\n";
    assert_eq!(marked_blocks(md), ["one\ntwo", "three"]);
}

/// A gRPC code as the docs spell it: `INVALID_ARGUMENT`.
fn code_name(code: tonic::Code) -> String {
    let mut name = String::new();
    for (i, c) in format!("{code:?}").chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            name.push('_');
        }
        name.push(c.to_ascii_uppercase());
    }
    name
}

#[test]
fn the_error_guide_lists_every_reason_under_its_grpc_code() {
    use ledger_core::error::ALL_REASONS;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/errors.md");
    let text = std::fs::read_to_string(path).expect("docs/errors.md is readable");
    // Each table row of a reason, with the code it is listed under: the section's
    // (`### INVALID_ARGUMENT: …`), or the row's first column in the section without one.
    let mut listed: Vec<(String, String)> = Vec::new();
    let mut section: Option<String> = None;
    for line in text.lines() {
        if let Some(heading) = line.strip_prefix("### ") {
            section = heading
                .split_once(':')
                .map(|(code, _)| code.to_owned())
                .filter(|c| c.chars().all(|c| c.is_ascii_uppercase() || c == '_'));
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 3 || !line.starts_with('|') {
            continue;
        }
        let unquote = |s: &str| s.trim_matches('`').to_owned();
        match &section {
            Some(code) => listed.push((unquote(cells[1]), code.clone())),
            None => listed.push((unquote(cells[2]), unquote(cells[1]))),
        }
    }
    for reason in ALL_REASONS {
        let want = code_name(ledger_server::grpc::status::code(reason.class()));
        let rows: Vec<&String> = listed
            .iter()
            .filter(|(r, _)| r == reason.as_str())
            .map(|(_, code)| code)
            .collect();
        assert_eq!(
            rows,
            [&want],
            "docs/errors.md lists {} once, under {want}",
            reason.as_str()
        );
    }
}

/// The comment of each value of the proto's `enum ErrorReason`, by value name: the lines
/// between the value before it and it, joined with spaces.
fn error_reason_comments() -> Vec<(String, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("proto/ledger/v1/error_reason.proto");
    let text = std::fs::read_to_string(path).expect("the proto is readable");
    let body = text
        .split_once("enum ErrorReason {")
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(body, _)| body)
        .expect("error_reason.proto has enum ErrorReason { … }");
    let mut out = Vec::new();
    let mut comment: Vec<&str> = Vec::new();
    for line in body.lines().map(str::trim) {
        if let Some(c) = line.strip_prefix("//") {
            comment.push(c.trim());
        } else if let Some((name, _)) = line.split_once(" = ") {
            out.push((name.to_owned(), comment.join(" ")));
            comment.clear();
        }
    }
    out
}

#[test]
fn the_proto_says_of_each_reason_its_grpc_code_and_whether_it_binds_the_key() {
    use ledger_core::error::ALL_REASONS;
    let comments = error_reason_comments();
    assert_eq!(
        comments.len(),
        ALL_REASONS.len() + 1,
        "the zero value and every reason"
    );
    for reason in ALL_REASONS {
        let comment = comments
            .iter()
            .find(|(name, _)| name == reason.as_str())
            .map(|(_, c)| c.as_str())
            .unwrap_or_else(|| panic!("error_reason.proto has no comment for {reason:?}"));
        let code = code_name(ledger_server::grpc::status::code(reason.class()));
        assert!(
            comment.starts_with(&format!("{code}. ")),
            "{}'s comment starts with its code {code}: {comment}",
            reason.as_str()
        );
        let binds = ledger_core::LedgerError::new(*reason, "").binds_key();
        let says = (
            comment.contains("Binds the idempotency key"),
            comment.contains("Binds no key"),
        );
        assert_eq!(
            says,
            (binds, !binds),
            "{}'s comment says whether it binds the key (it does: {binds}): {comment}",
            reason.as_str()
        );
    }
}
