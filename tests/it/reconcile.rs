//! `ledger reconcile` against a real server: a bank's CSV statement matched to the postings
//! on `assets:bank` (debit-normal: money in is a debit), as a finance team runs it.

use crate::cli::stderr;
use crate::support::*;
use ledger_server::grpc::pb;
use serde_json::Value;
use std::path::PathBuf;
use std::process::Output;

const BANK: &str = "assets:bank";
const WORLD: &str = "equity:world";

/// A statement file, removed with its directory when dropped.
struct Statement(PathBuf);

impl Drop for Statement {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn statement(text: &str) -> Statement {
    let dir = std::env::temp_dir().join(format!(
        "ledger-reconcile-{}",
        uuid::Uuid::now_v7().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bank.csv");
    std::fs::write(&path, text).unwrap();
    Statement(path)
}

/// A server with `assets:bank` (EUR, debit-normal) and `equity:world` (may go negative).
async fn books() -> TestLedger {
    let mut t = TestLedger::start().await;
    t.account(WORLD, "EUR", 2, pb::NormalBalance::Credit, true)
        .await;
    t.account(BANK, "EUR", 2, pb::NormalBalance::Debit, true)
        .await;
    t
}

/// Noon (UTC) of `day` (YYYY-MM-DD).
fn noon(day: &str) -> prost_types::Timestamp {
    let d = time::Date::parse(
        day,
        time::macros::format_description!("[year]-[month]-[day]"),
    )
    .unwrap();
    let t = d.with_hms(12, 0, 0).unwrap().assume_utc();
    prost_types::Timestamp {
        seconds: t.unix_timestamp(),
        nanos: 0,
    }
}

/// A posting effective at noon of `day`: `amount` into the bank (from the world) when
/// positive, out of it when it starts with `-`; its metadata `reference` if given. Its id.
async fn book(t: &mut TestLedger, key: &str, day: &str, amount: &str, reference: &str) -> String {
    book_req(t, key, day, amount, reference, false).await
}

async fn book_req(
    t: &mut TestLedger,
    key: &str,
    day: &str,
    amount: &str,
    reference: &str,
    hold: bool,
) -> String {
    let (to, from, amount) = match amount.strip_prefix('-') {
        Some(out) => (WORLD, BANK, out),
        None => (BANK, WORLD, amount),
    };
    let mut req = transfer(key, from, to, amount);
    req.effective_at = Some(noon(day));
    req.hold = hold;
    if !reference.is_empty() {
        req.metadata.insert("reference".into(), reference.into());
    }
    let posted = t.post(req).await.expect("posted");
    posted.posting.unwrap().posting_id
}

/// Runs `ledger reconcile --account assets:bank --statement FILE ARGS…`.
async fn reconcile(t: &TestLedger, file: &Statement, args: &[&str]) -> Output {
    let mut all = vec![
        "reconcile",
        "--account",
        BANK,
        "--statement",
        file.0.to_str().unwrap(),
    ];
    all.extend(args);
    let server = t.server.as_ref().unwrap().local_addr.to_string();
    crate::cli::ledger(&all, &server).await
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("an exit code")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The JSON printed, whatever the exit code.
fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("JSON on stdout ({e}): {}\n{}", stdout(out), stderr(out)))
}

/// `field` of each element of the JSON array `list`.
fn each<'a>(v: &'a Value, list: &str, field: &str) -> Vec<&'a Value> {
    v[list]
        .as_array()
        .unwrap_or_else(|| panic!("{list} in {v}"))
        .iter()
        .map(|e| e.pointer(field).unwrap_or(&Value::Null))
        .collect()
}

const MARCH: [&str; 4] = ["--from", "2025-03-01", "--to", "2025-04-01"];

#[tokio::test]
async fn lines_with_the_reference_and_amount_of_a_posting_match_it_by_reference_whatever_their_dates(
) {
    let mut t = books().await;
    let inv1 = book(&mut t, "k1", "2025-03-03", "100.00", "INV-1").await;
    let inv2 = book(&mut t, "k2", "2025-03-04", "250.00", "INV-2").await;
    let pay9 = book(&mut t, "k3", "2025-03-05", "-40.00", "PAY-9").await;
    let file = statement(
        "date,amount,reference,description\n\
         2025-03-06,100.00,INV-1,three days after the ledger\n\
         2025-03-04,250,INV-2,\n\
         2025-03-10T09:00:00+01:00,-40.00,PAY-9,a payment out\n",
    );
    let out = reconcile(&t, &file, &[&MARCH[..], &["--format", "json"]].concat()).await;
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let v = json_of(&out);
    assert_eq!(each(&v, "matched", "/matchedBy"), ["reference"; 3]);
    assert_eq!(
        each(&v, "matched", "/book/postingId"),
        [&inv1, &inv2, &pay9]
    );
    assert_eq!(each(&v, "matched", "/statement/line"), [2, 3, 4]);
    assert_eq!(each(&v, "matched", "/daysApart"), [3, 0, 5]);
    assert_eq!(
        each(&v, "matched", "/book/amount"),
        ["100.00", "250.00", "-40.00"]
    );
    assert_eq!(v["totals"]["statementSum"], "310.00");
    assert_eq!(v["totals"]["bookSum"], "310.00");
    assert_eq!(v["totals"]["difference"], "0.00");
    assert_eq!(v["reconciled"], true);
}

#[tokio::test]
async fn a_date_one_day_off_matches_with_a_tolerance_of_one_day_and_not_with_none() {
    let mut t = books().await;
    let id = book(&mut t, "k1", "2025-03-03", "75.00", "").await;
    let file = statement("date,amount,reference\n2025-03-04,75.00,\n");
    let strict = reconcile(&t, &file, &[&MARCH[..], &["--format", "json"]].concat()).await;
    assert_eq!(code(&strict), 1, "{}", stderr(&strict));
    let v = json_of(&strict);
    assert_eq!(each(&v, "unmatchedStatement", "/line"), [2]);
    assert_eq!(each(&v, "unmatchedBook", "/postingId"), [&id]);
    assert!(v["matched"].as_array().unwrap().is_empty());
    assert_eq!(
        v["totals"]["difference"], "0.00",
        "the sums agree, the lines do not"
    );
    let args = [&MARCH[..], &["--date-tolerance", "1", "--format", "json"]].concat();
    let tolerant = reconcile(&t, &file, &args).await;
    assert_eq!(code(&tolerant), 0, "{}", stderr(&tolerant));
    let v = json_of(&tolerant);
    assert_eq!(each(&v, "matched", "/matchedBy"), ["amount-and-date"]);
    assert_eq!(each(&v, "matched", "/daysApart"), [1]);
    assert_eq!(each(&v, "matched", "/book/postingId"), [&id]);
}

#[tokio::test]
async fn duplicate_lines_on_either_side_are_each_matched_once_and_the_extra_one_is_left() {
    let mut t = books().await;
    let mut twenties = Vec::new();
    for k in ["a", "b"] {
        twenties.push(book(&mut t, k, "2025-03-03", "20.00", "").await);
    }
    let mut thirties = Vec::new();
    for k in ["c", "d", "e"] {
        thirties.push(book(&mut t, k, "2025-03-04", "30.00", "").await);
    }
    let file = statement(
        "date,amount,reference\n\
         2025-03-03,20.00,\n2025-03-03,20.00,\n2025-03-03,20.00,\n\
         2025-03-04,30.00,\n2025-03-04,30.00,\n",
    );
    let out = reconcile(&t, &file, &[&MARCH[..], &["--format", "json"]].concat()).await;
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let v = json_of(&out);
    assert_eq!(each(&v, "matched", "/statement/line"), [2, 3, 5, 6]);
    let matched = each(&v, "matched", "/book/postingId");
    let want = [&twenties[0], &twenties[1], &thirties[0], &thirties[1]];
    assert_eq!(matched, want, "each book line once, in sequence order");
    assert_eq!(each(&v, "unmatchedStatement", "/line"), [4]);
    assert_eq!(each(&v, "unmatchedBook", "/postingId"), [&thirties[2]]);
    assert_eq!(v["totals"]["statementSum"], "120.00");
    assert_eq!(v["totals"]["bookSum"], "130.00");
    assert_eq!(v["totals"]["difference"], "-10.00");
}

#[tokio::test]
async fn a_malformed_line_is_refused_naming_the_file_and_the_line_and_exits_2() {
    let mut t = books().await;
    book(&mut t, "k1", "2025-03-03", "75.00", "").await;
    let cases = [
        (
            "date,amount,reference\n2025-03-03,75.00,\n2025-03-04,\"12,50\",x\n",
            &[][..],
            "bank.csv line 3: amount \"12,50\" is not a decimal number",
        ),
        (
            "date,amount,reference\n2025-03-03,75.001,\n",
            &[][..],
            "bank.csv line 2: amount 75.001 has more decimal places than the account's scale (refused, never rounded) (account assets:bank has scale 2)",
        ),
        (
            "date,amount,reference\n2025-03-03,75.00,\n03/04/2025,1,\n",
            &[][..],
            "bank.csv line 3: date \"03/04/2025\" is not a date",
        ),
        (
            "Datum;Betrag\n2025-03-03;75.00\n",
            &["--delimiter", ";"][..],
            "bank.csv line 1: the header has no column \"date\" (its columns: Datum, Betrag)",
        ),
        (
            "date,amount,reference\n2025-03-03,75.00,\n2025-04-01,1,\n",
            &MARCH[..],
            "bank.csv line 3: date 2025-04-01 is outside the period 2025-03-01 to 2025-03-31 (both included",
        ),
    ];
    for (text, args, want) in cases {
        let file = statement(text);
        let out = reconcile(&t, &file, args).await;
        let e = stderr(&out);
        assert_eq!(code(&out), 2, "{e}");
        assert!(
            e.contains("ledger reconcile: ") && e.contains(want),
            "{e}\nwanted: {want}"
        );
        assert!(e.contains(file.0.to_str().unwrap()), "names the file: {e}");
        assert!(out.stdout.is_empty(), "no report: {}", stdout(&out));
    }
    let file = statement("date,amount,reference\n2025-03-03,75.00,\n");
    let server = t.server.as_ref().unwrap().local_addr.to_string();
    let path = file.0.to_str().unwrap();
    let args = ["reconcile", "--account", "assets:nope", "--statement", path];
    let out = crate::cli::ledger(&args, &server).await;
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("ACCOUNT_NOT_FOUND"),
        "{}",
        stderr(&out)
    );
    let closed = format!("127.0.0.1:{}", free_port());
    let out = crate::cli::ledger(&args, &closed).await;
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let missing = [
        "reconcile",
        "--account",
        BANK,
        "--statement",
        "/nonexistent/bank.csv",
    ];
    let out = crate::cli::ledger(&missing, &server).await;
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("cannot read the statement /nonexistent/bank.csv"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn unmatched_lines_on_both_sides_are_listed_and_exit_1() {
    let mut t = books().await;
    book(&mut t, "k1", "2025-03-03", "100.00", "INV-1").await;
    let lost = book(&mut t, "k2", "2025-03-04", "-12.34", "").await;
    let mismatch = book(&mut t, "k3", "2025-03-05", "50.00", "INV-7").await;
    let file = statement(
        "date,amount,reference\n\
         2025-03-03,100.00,INV-1\n\
         2025-03-06,-9.99,BANK-FEE\n\
         2025-03-05,55.00,INV-7\n",
    );
    let out = reconcile(&t, &file, &MARCH).await;
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let table = stdout(&out);
    let has = |s: &str| assert!(table.contains(s), "{s:?} in:\n{table}");
    has("Reconciliation of assets:bank (EUR, debit-normal) against");
    has("Period 2025-03-01 to 2025-03-31");
    has("MATCHED: 1");
    has("MISMATCHED (the same reference, another amount): 1");
    has("UNMATCHED STATEMENT LINES: 1");
    has("UNMATCHED BOOK LINES: 1");
    let row = |first: &str| {
        table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(first))
            .unwrap_or_else(|| panic!("a row of {first} in:\n{table}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(row("3"), ["3", "2025-03-06", "-9.99", "BANK-FEE"]);
    assert_eq!(row(&lost)[3..5], ["2025-03-04", "-12.34"]);
    let mismatched = row("4");
    assert!(mismatched.contains(&mismatch.as_str()), "{mismatched:?}");
    assert_eq!(mismatched.last(), Some(&"5.00"), "the difference");
    has("NOT RECONCILED: 1 unmatched statement line(s), 1 unmatched book line(s), 1 mismatched reference(s), difference 7.35");
}

#[tokio::test]
async fn everything_matched_exits_0_with_holds_and_releases_left_out_and_a_void_cancelling_its_posting(
) {
    let mut t = books().await;
    book(&mut t, "k1", "2025-03-03", "100.00", "INV-1").await;
    let hold = book_req(&mut t, "h1", "2025-03-03", "-30.00", "", true).await;
    let capture = t
        .client
        .capture(pb::CaptureRequest {
            idempotency_key: "c1".into(),
            hold_posting_id: hold.clone(),
            legs: vec![
                leg(WORLD, pb::Direction::Debit, "25.00"),
                leg(BANK, pb::Direction::Credit, "25.00"),
            ],
            effective_at: Some(noon("2025-03-04")),
            ..Default::default()
        })
        .await
        .expect("captured")
        .into_inner();
    let released = book_req(&mut t, "h2", "2025-03-03", "-8.00", "", true).await;
    let oops = book(&mut t, "k2", "2025-03-05", "-60.00", "").await;
    for (key, id) in [("v1", &released), ("v2", &oops)] {
        t.client
            .void(pb::VoidRequest {
                idempotency_key: key.into(),
                posting_id: id.clone(),
                reason: "test".into(),
                effective_at: Some(noon("2025-03-06")),
                ..Default::default()
            })
            .await
            .expect("voided");
    }
    let file = statement("date,amount,reference\n2025-03-03,100.00,INV-1\n2025-03-04,-25.00,\n");
    let out = reconcile(&t, &file, &[&MARCH[..], &["--format", "json"]].concat()).await;
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let v = json_of(&out);
    let capture_id = capture.posting.unwrap().posting_id;
    assert_eq!(each(&v, "matched", "/book/kind"), ["posting", "capture"]);
    assert_eq!(each(&v, "matched", "/book/postingId")[1], &capture_id);
    assert_eq!(each(&v, "reversed", "/posting/postingId"), [&oops]);
    assert_eq!(each(&v, "reversed", "/void/kind"), ["void"]);
    assert_eq!(
        v["totals"]["bookLines"], 4,
        "the posting, the capture, the voided and its void"
    );
    assert_eq!(v["totals"]["bookSum"], "75.00");
    let table = reconcile(&t, &file, &MARCH).await;
    assert_eq!(code(&table), 0);
    assert!(stdout(&table).contains("RECONCILED: every line matched, the totals agree"));
}

#[tokio::test]
async fn csv_and_json_outputs_parse_with_every_line_and_the_totals() {
    let mut t = books().await;
    let a = book(&mut t, "k1", "2025-03-03", "100.00", "INV-1").await;
    let b = book(&mut t, "k2", "2025-03-04", "-0.05", "").await;
    let file = statement(
        "date,amount,reference\n2025-03-03,100.00,INV-1\n2025-03-09,7.00,\"ref, with a comma\"\n",
    );
    let out = reconcile(&t, &file, &[&MARCH[..], &["--format", "csv"]].concat()).await;
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let mut reader = csv::Reader::from_reader(out.stdout.as_slice());
    let header: Vec<String> = reader
        .headers()
        .unwrap()
        .iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        header,
        [
            "status",
            "line",
            "date",
            "amount",
            "reference",
            "posting_id",
            "sequence",
            "leg",
            "effective_date",
            "book_amount",
            "book_reference",
            "kind",
            "matched_by"
        ]
    );
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    let cell = |r: &csv::StringRecord, name: &str| {
        r[header.iter().position(|h| h == name).unwrap()].to_owned()
    };
    let statuses: Vec<String> = rows.iter().map(|r| cell(r, "status")).collect();
    assert_eq!(
        statuses,
        [
            "matched",
            "unmatched_statement",
            "unmatched_book",
            "statement_total",
            "book_total",
            "difference"
        ]
    );
    assert_eq!(cell(&rows[0], "posting_id"), a);
    assert_eq!(cell(&rows[0], "matched_by"), "reference");
    assert_eq!(cell(&rows[1], "reference"), "ref, with a comma");
    assert_eq!(cell(&rows[2], "posting_id"), b);
    assert_eq!(cell(&rows[2], "book_amount"), "-0.05");
    assert_eq!(cell(&rows[3], "amount"), "107.00");
    assert_eq!(cell(&rows[4], "book_amount"), "99.95");
    assert_eq!(cell(&rows[5], "amount"), "7.05");
    let out = reconcile(&t, &file, &[&MARCH[..], &["--format", "json"]].concat()).await;
    assert_eq!(code(&out), 1);
    let v = json_of(&out);
    assert_eq!(v["account"], BANK);
    assert_eq!(v["period"]["firstDay"], "2025-03-01");
    assert_eq!(v["period"]["lastDay"], "2025-03-31", "--to excluded");
    assert_eq!(
        each(&v, "unmatchedStatement", "/reference"),
        ["ref, with a comma"]
    );
    assert_eq!(each(&v, "unmatchedBook", "/amount"), ["-0.05"]);
    assert_eq!(v["totals"]["statementLines"], 2);
    assert_eq!(v["totals"]["difference"], "7.05");
    assert_eq!(v["reconciled"], false);
}

#[tokio::test]
async fn the_period_and_the_as_of_cut_off_bound_the_book_side_and_negate_flips_the_statement() {
    let mut t = books().await;
    book(&mut t, "k0", "2025-02-28", "5.00", "").await;
    let march = book(&mut t, "k1", "2025-03-03", "10.00", "").await;
    book(&mut t, "k2", "2025-04-01", "5.00", "").await;
    let balance = t.balance(BANK, None).await;
    let known = balance.as_of.unwrap().recorded_at.unwrap();
    let known = time::OffsetDateTime::from_unix_timestamp_nanos(
        i128::from(known.seconds) * 1_000_000_000 + i128::from(known.nanos),
    )
    .unwrap();
    let known = known
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    book(&mut t, "k3", "2025-03-04", "1.00", "").await;
    let file = statement("date,amount,reference\n2025-03-03,-10.00,\n");
    let args = [
        &MARCH[..],
        &["--as-of", &known, "--negate", "--format", "json"],
    ]
    .concat();
    let out = reconcile(&t, &file, &args).await;
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let v = json_of(&out);
    assert_eq!(each(&v, "matched", "/book/postingId"), [&march]);
    assert_eq!(v["negated"], true);
    assert_eq!(
        v["totals"]["bookLines"], 1,
        "February, April and what was recorded later left out"
    );
    let out = reconcile(&t, &file, &[&MARCH[..], &["--format", "json"]].concat()).await;
    assert_eq!(code(&out), 1, "not negated, -10.00 is money out");
    let v = json_of(&out);
    assert_eq!(each(&v, "unmatchedBook", "/amount"), ["10.00", "1.00"]);
    let out = reconcile(&t, &file, &["--format", "json"]).await;
    let v = json_of(&out);
    assert_eq!(
        v["period"]["lastDay"], "2025-03-03",
        "the statement's own dates by default"
    );
    let to_end = [
        "--from",
        "2025-03-01",
        "--to-end",
        "2025-03-31",
        "--format",
        "json",
    ];
    let v = json_of(&reconcile(&t, &file, &to_end).await);
    assert_eq!(v["period"]["lastDay"], "2025-03-31");
    assert_eq!(
        v["totals"]["bookLines"], 2,
        "--to-end 2025-03-31 is --to 2025-04-01"
    );
}
