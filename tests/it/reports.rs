//! `ledger report` for finance against a real server: the balance sheet and the income
//! statement of books with known figures (accounts under the five tops, a back-dated fee, a
//! captured hold and a pending one) print exactly those figures and the identity holds with a
//! difference of 0; a statement for a period has its opening and closing balances, and in
//! effective order its running balance is the balance in business time; CSV and JSON parse.

use crate::cli::{json, ledger, stderr};
use crate::support::*;
use ledger_server::grpc::pb;
use serde_json::Value;
use time::format_description::well_known::Rfc3339;
use time::{Duration, OffsetDateTime};

/// The books: their start (a midnight, UTC, ten days ago), the server, and the moment after
/// everything but the back-dated fee was recorded.
struct Books {
    t: TestLedger,
    server: String,
    start: OffsetDateTime,
    before_fee: String,
}

impl Books {
    /// Day `n` of the books as a date alone (its start, UTC).
    fn date(&self, n: i64) -> String {
        (self.start + Duration::days(n)).date().to_string()
    }

    /// `ledger ARGS… --server S`: its standard output, the command having succeeded.
    async fn report(&self, args: &[&str]) -> String {
        let out = ledger(args, &self.server).await;
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        String::from_utf8(out.stdout).unwrap()
    }
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap()
}

fn ts(t: OffsetDateTime) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: t.unix_timestamp(),
        nanos: t.nanosecond() as i32,
    }
}

fn shown(t: &prost_types::Timestamp) -> String {
    let nanos = i128::from(t.seconds) * 1_000_000_000 + i128::from(t.nanos);
    rfc3339(OffsetDateTime::from_unix_timestamp_nanos(nanos).unwrap())
}

/// A transfer of `amount` from `from` to `to`, effective `at` (none: when recorded).
fn move_at(
    key: &str,
    (from, to): (&str, &str),
    amount: &str,
    at: Option<OffsetDateTime>,
    memo: &str,
) -> pb::PostRequest {
    pb::PostRequest {
        effective_at: at.map(ts),
        memo: memo.into(),
        ..transfer(key, from, to, amount)
    }
}

const BANK: &str = "assets:bank";
const RECEIVABLES: &str = "assets:receivables";
const PAYABLES: &str = "liabilities:payables";
const CAPITAL: &str = "equity:capital";
const SALES: &str = "income:sales";
const FEES: &str = "expenses:fees";
const RENT: &str = "expenses:rent";

/// Capital of 1000.00 (day 0); a sale of 300.00 on credit (day 2); rent of 80.00 invoiced
/// (day 3), 30.00 of it paid (day 3, noon) and 20.00 through a hold (day 4) captured (day 4,
/// noon); the customer pays 100.00 (day 5); a pending hold of 7.00 (now); rent of 10.00 on
/// day 8; then, recorded last, a fee of 2.00 back-dated to day 2, noon.
async fn books() -> Books {
    let mut t = TestLedger::start().await;
    use pb::NormalBalance::{Credit, Debit};
    for (code, normal) in [
        (BANK, Debit),
        (RECEIVABLES, Debit),
        (PAYABLES, Credit),
        (CAPITAL, Credit),
        (SALES, Credit),
        (FEES, Debit),
        (RENT, Debit),
    ] {
        t.account(code, "EUR", 2, normal, false).await;
    }
    let now = OffsetDateTime::now_utc();
    let start = (now - Duration::days(10)).date().midnight().assume_utc();
    let day = |n: i64, hours: i64| Some(start + Duration::days(n) + Duration::hours(hours));
    let moves = [
        ("capital", (CAPITAL, BANK), "1000.00", day(0, 0), "capital"),
        (
            "sale",
            (SALES, RECEIVABLES),
            "300.00",
            day(2, 0),
            "invoice o-17",
        ),
        (
            "rent",
            (PAYABLES, RENT),
            "80.00",
            day(3, 0),
            "rent, invoice 9",
        ),
        (
            "pay",
            (BANK, PAYABLES),
            "30.00",
            day(3, 12),
            "supplier, invoice 9",
        ),
    ];
    for (key, accounts, amount, at, memo) in moves {
        t.post(move_at(key, accounts, amount, at, memo))
            .await
            .unwrap();
    }
    let hold = pb::PostRequest {
        hold: true,
        ..move_at(
            "hold",
            (BANK, PAYABLES),
            "20.00",
            day(4, 0),
            "hold for the supplier",
        )
    };
    let hold = t.post(hold).await.unwrap().posting.unwrap();
    t.client
        .capture(pb::CaptureRequest {
            idempotency_key: "capture".into(),
            hold_posting_id: hold.posting_id,
            effective_at: day(4, 12).map(ts),
            memo: "captured".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let later = [
        (
            "paid",
            (RECEIVABLES, BANK),
            "100.00",
            day(5, 0),
            "order o-17",
        ),
        ("late", (BANK, RENT), "10.00", day(8, 0), "late rent"),
    ];
    for (key, accounts, amount, at, memo) in later {
        t.post(move_at(key, accounts, amount, at, memo))
            .await
            .unwrap();
    }
    let pending = pb::PostRequest {
        hold: true,
        ..move_at("pending", (BANK, PAYABLES), "7.00", None, "pending")
    };
    let last = t.post(pending).await.unwrap().posting.unwrap();
    let before_fee = shown(last.recorded_at.as_ref().unwrap());
    let fee = move_at("fee", (BANK, FEES), "2.00", day(2, 12), "bank fee");
    t.post(fee).await.unwrap();
    let server = t.server.as_ref().unwrap().local_addr.to_string();
    Books {
        t,
        server,
        start,
        before_fee,
    }
}

/// A table's lines after its heading (and the blank line under it).
fn body(table: &str) -> Vec<&str> {
    table
        .lines()
        .skip_while(|l| !l.is_empty())
        .skip(1)
        .collect()
}

const BALANCE_SHEET: &str = "\
ACCOUNT                       CURRENCY   AMOUNT
----------------------------  --------  -------
assets                        EUR       1238.00
  assets:bank                 EUR       1038.00
  assets:receivables          EUR        200.00
liabilities                   EUR         30.00
  liabilities:payables        EUR         30.00
equity                        EUR       1000.00
  equity:capital              EUR       1000.00
earnings (income - expenses)  EUR        208.00
  income                      EUR        300.00
  expenses                    EUR         92.00
----------------------------  --------  -------
DIFFERENCE                    EUR          0.00

Check EUR: assets 1238.00 = liabilities 30.00 + equity 1000.00 + earnings 208.00; difference 0.00";

const INCOME_STATEMENT: &str = "\
ACCOUNT          CURRENCY  AMOUNT
---------------  --------  ------
income           EUR       300.00
  income:sales   EUR       300.00
expenses         EUR        92.00
  expenses:fees  EUR         2.00
  expenses:rent  EUR        90.00
---------------  --------  ------
NET INCOME       EUR       208.00";

#[tokio::test]
async fn the_balance_sheet_and_income_statement_print_the_books_figures_and_the_identity_holds() {
    let b = books().await;
    let sheet = b.report(&["report", "balance-sheet"]).await;
    assert!(
        sheet.starts_with("Balance sheet as recorded at "),
        "{sheet}"
    );
    assert_eq!(body(&sheet).join("\n"), BALANCE_SHEET, "{sheet}");
    let income = b.report(&["report", "income-statement"]).await;
    assert!(
        income.starts_with("Income statement as recorded at "),
        "{income}"
    );
    assert_eq!(body(&income).join("\n"), INCOME_STATEMENT, "{income}");

    // As known before the fee was recorded: 2.00 more in the bank and in the earnings.
    let known = b
        .report(&["report", "balance-sheet", "--as-of", &b.before_fee])
        .await;
    assert!(
        known.contains(&format!("as recorded at {}", b.before_fee)),
        "{known}"
    );
    let check = known.lines().last().unwrap();
    assert_eq!(
        check,
        "Check EUR: assets 1240.00 = liabilities 30.00 + equity 1000.00 + earnings 210.00; difference 0.00"
    );
    // At the end of day 5 (business time): the rent of day 8 not yet.
    let day5 = b
        .report(&["report", "balance-sheet", "--effective-end", &b.date(5)])
        .await;
    assert_eq!(
        day5.lines().last().unwrap(),
        "Check EUR: assets 1248.00 = liabilities 30.00 + equity 1000.00 + earnings 218.00; difference 0.00",
        "{day5}"
    );
    // Depth 0: the sections alone, the same figures.
    let flat = b.report(&["report", "balance-sheet", "--depth", "0"]).await;
    assert!(!flat.contains("assets:bank"), "{flat}");
    assert_eq!(flat.lines().last(), sheet.lines().last());
}

#[tokio::test]
async fn the_sheets_as_csv_and_json_parse_to_the_same_figures() {
    let b = books().await;
    let csv = b
        .report(&["report", "balance-sheet", "--format", "csv"])
        .await;
    let rows: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    assert_eq!(
        rows[0],
        ["section", "node", "currency", "amount", "debits", "credits"]
    );
    assert!(rows.iter().all(|r| r.len() == 6), "{csv}");
    for want in [
        ["assets", "assets", "EUR", "1238.00", "1400.00", "162.00"],
        ["assets", BANK, "EUR", "1038.00", "1100.00", "62.00"],
        ["liabilities", PAYABLES, "EUR", "30.00", "50.00", "80.00"],
        ["earnings", "", "EUR", "208.00", "", ""],
        ["difference", "", "EUR", "0.00", "", ""],
    ] {
        assert!(rows.contains(&want.to_vec()), "{want:?} in\n{csv}");
    }
    let csv = b
        .report(&["report", "income-statement", "--format", "csv"])
        .await;
    assert_eq!(csv.lines().last().unwrap(), "net_income,,EUR,208.00,,");

    let v = json(&ledger(&["report", "balance-sheet", "--format", "json"], &b.server).await);
    assert_eq!(v["report"], "balance-sheet");
    assert_eq!(v["closedPeriod"], Value::Null);
    let eur = &v["currencies"][0];
    assert_eq!(eur["assets"]["amount"], "1238.00");
    assert_eq!(eur["assets"]["lines"][0]["node"], BANK);
    assert_eq!(eur["earnings"]["amount"], "208.00");
    assert_eq!(
        (&eur["difference"], &eur["balanced"]),
        (&"0.00".into(), &true.into())
    );
    let v = json(
        &ledger(
            &["report", "income-statement", "--format", "json"],
            &b.server,
        )
        .await,
    );
    assert_eq!(v["currencies"][0]["netIncome"], "208.00");
    assert_eq!(v["currencies"][0]["expenses"]["amount"], "92.00");
    assert!(v["asOf"]["recordedAt"].is_string() && v["asOf"]["sequence"].is_number());

    // The trial balance and the statement at a cut-off have JSON too.
    let v = json(&ledger(&["report", "trial-balance", "--format", "json"], &b.server).await);
    assert_eq!(v["report"], "trial-balance");
    assert_eq!(v["balances"].as_array().unwrap().len(), 7);
    assert_eq!(v["totals"][0]["balanced"], true);
    assert_eq!(v["totals"][0]["heldDebits"], "7.00", "the pending hold");
    let v = json(
        &ledger(
            &["report", "statement", BANK, "--format", "json"],
            &b.server,
        )
        .await,
    );
    assert_eq!(
        v["entries"].as_array().unwrap().len(),
        6,
        "no hold is an entry"
    );
    assert_eq!(v["total"]["balance"], "1038.00");
    assert_eq!(v["total"]["available"], "1031.00");
    assert_eq!(v["notYetCreated"], false);
}

#[tokio::test]
async fn accounts_outside_the_five_tops_are_other_and_make_the_difference_which_the_check_says() {
    let mut t = TestLedger::start().await;
    create_ledger(&mut t.client, "acme").await;
    account_in(
        &mut t.client,
        "acme",
        "world",
        pb::NormalBalance::Credit,
        true,
    )
    .await;
    account_in(
        &mut t.client,
        "acme",
        "assets:cash",
        pb::NormalBalance::Debit,
        false,
    )
    .await;
    let req = pb::PostRequest {
        ledger: "acme".into(),
        ..transfer("fund", "world", "assets:cash", "5.00")
    };
    t.post(req).await.unwrap();
    let s = t.server.as_ref().unwrap().local_addr.to_string();
    let out = ledger(&["report", "balance-sheet", "--ledger", "acme"], &s).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let sheet = String::from_utf8(out.stdout).unwrap();
    assert!(
        sheet.starts_with("Balance sheet in ledger acme as recorded at"),
        "{sheet}"
    );
    let words: Vec<Vec<&str>> = sheet
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    for want in [
        vec!["other", "(debits", "-", "credits)", "EUR", "-5.00"],
        vec!["world", "EUR", "-5.00"],
        vec!["DIFFERENCE", "EUR", "5.00"],
    ] {
        assert!(words.contains(&want), "{want:?} in\n{sheet}");
    }
    assert!(sheet.lines().last().unwrap().ends_with(
        "difference 5.00: the accounts outside assets, liabilities, equity, income and expenses (other) are not in the identity"
    ), "{sheet}");
    let v = json(
        &ledger(
            &[
                "report",
                "balance-sheet",
                "--ledger",
                "acme",
                "--format",
                "json",
            ],
            &s,
        )
        .await,
    );
    assert_eq!(v["currencies"][0]["balanced"], false);
    assert_eq!(v["currencies"][0]["other"]["amount"], "-5.00");
}

/// (sequence-less) lines of a statement's CSV: kind, debit, credit, balance, counter-accounts,
/// memo; the OPENING and CLOSING lines by their names.
fn statement_rows(csv: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut reader = csv.lines().skip(1).peekable();
    while let Some(line) = reader.next() {
        let mut line = line.to_owned();
        // A memo with a line break is quoted across lines (none here but the check).
        while line.matches('"').count() % 2 == 1 {
            line.push('\n');
            line.push_str(reader.next().expect("a quoted field ends"));
        }
        rows.push(split_csv(&line));
    }
    rows
}

/// One CSV line's fields (RFC 4180 quoting).
fn split_csv(line: &str) -> Vec<String> {
    let (mut fields, mut field, mut quoted) = (Vec::new(), String::new(), false);
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(std::mem::take(&mut field)),
            (c, _) => field.push(c),
        }
    }
    fields.push(field);
    fields
}

/// The columns of a statement row the tests compare: kind, debit, credit, balance,
/// counter-accounts, memo (the sequence, times and id vary).
fn figures(row: &[String]) -> Vec<&str> {
    let mut cells = vec![row[0].as_str()];
    if row[0].parse::<u64>().is_ok() {
        cells[0] = "line";
    }
    cells.extend(row[4..].iter().map(String::as_str));
    cells
}

#[tokio::test]
async fn a_statement_for_a_period_opens_and_closes_at_the_balances_in_journal_or_business_time() {
    let mut b = books().await;
    let (from, to) = (b.date(1), b.date(6));
    let period = ["report", "statement", BANK, "--from", &from, "--to", &to];
    let csv = b
        .report(&[&period[..], &["--format", "csv"]].concat())
        .await;
    assert_eq!(
        csv.lines().next().unwrap(),
        "sequence,recorded_at,effective_at,posting_id,kind,debit,credit,balance,counter_accounts,memo"
    );
    let rows = statement_rows(&csv);
    let got: Vec<Vec<&str>> = rows.iter().map(|r| figures(r)).collect();
    // Journal order: the fee, recorded last, comes last; neither hold is a line (the
    // capture is), nor what is effective outside [day 1, day 6).
    let journal: Vec<Vec<&str>> = vec![
        vec!["OPENING", "", "", "", "1000.00", "", ""],
        vec![
            "line",
            "posting",
            "",
            "30.00",
            "970.00",
            PAYABLES,
            "supplier, invoice 9",
        ],
        vec![
            "line", "capture", "", "20.00", "950.00", PAYABLES, "captured",
        ],
        vec![
            "line",
            "posting",
            "100.00",
            "",
            "1050.00",
            RECEIVABLES,
            "order o-17",
        ],
        vec!["line", "posting", "", "2.00", "1048.00", FEES, "bank fee"],
        vec!["CLOSING", "", "100.00", "52.00", "1048.00", "", ""],
    ];
    assert_eq!(got, journal, "{csv}");
    // The closing balance is the balance effective before --to, as GetBalance says.
    let asof = pb::AsOf {
        recorded_at: None,
        effective_at: Some(ts(b.start + Duration::days(6) - Duration::microseconds(1))),
    };
    assert_eq!(b.t.balance(BANK, Some(asof)).await.balance, "1048.00");

    // In business time the fee of day 2 comes first, and the running balance is the balance
    // at each effective time.
    let csv = b
        .report(&[&period[..], &["--order", "effective", "--format", "csv"]].concat())
        .await;
    let rows = statement_rows(&csv);
    let balances: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r[8].as_str(), r[7].as_str()))
        .collect();
    assert_eq!(
        balances,
        [
            ("", "1000.00"),
            (FEES, "998.00"),
            (PAYABLES, "968.00"),
            (PAYABLES, "948.00"),
            (RECEIVABLES, "1048.00"),
            ("", "1048.00"),
        ],
        "{csv}"
    );
    let effective: Vec<&str> = rows[1..5].iter().map(|r| r[2].as_str()).collect();
    let mut sorted = effective.clone();
    sorted.sort();
    assert_eq!(effective, sorted, "by effective time: {csv}");
}

#[tokio::test]
async fn a_period_statement_is_at_one_recorded_cut_off_and_its_table_and_json_say_so() {
    let b = books().await;
    let (from, to) = (b.date(1), b.date(6));
    let period = ["report", "statement", BANK, "--from", &from, "--to", &to];
    // As known before the fee was recorded: no fee, closing 2.00 higher.
    let known = b
        .report(&[&period[..], &["--as-of", &b.before_fee, "--format", "csv"]].concat())
        .await;
    let last = statement_rows(&known).pop().unwrap();
    assert_eq!(
        figures(&last),
        ["CLOSING", "", "100.00", "50.00", "1050.00", "", ""],
        "{known}"
    );
    assert!(!known.contains("bank fee"), "{known}");
    // --to-end DAY ends the period with that day: the same as --to the next day.
    let through = [
        "report",
        "statement",
        BANK,
        "--from",
        &from,
        "--to-end",
        &b.date(5),
    ];
    let same = b
        .report(&[&through[..], &["--format", "csv", "--as-of", &b.before_fee]].concat())
        .await;
    assert_eq!(same, known);

    let table = b.report(&period).await;
    let heading = table.lines().next().unwrap();
    assert!(
        heading.starts_with(&format!(
            "Statement of {BANK} (EUR) effective from {from}T00:00:00Z (included) to {to}T00:00:00Z (excluded), as recorded at"
        )),
        "{table}"
    );
    let words = |l: &str| l.split_whitespace().map(String::from).collect::<Vec<_>>();
    let rows: Vec<Vec<String>> = table.lines().map(words).collect();
    assert!(rows.contains(&words("OPENING 1000.00")), "{table}");
    assert!(
        rows.contains(&words("CLOSING 4 entries 100.00 52.00 1048.00")),
        "{table}"
    );

    let v = json(
        &ledger(
            &[&period[..], &["--order", "effective", "--format", "json"]].concat(),
            &b.server,
        )
        .await,
    );
    assert_eq!(v["order"], "effective");
    assert_eq!(v["from"], format!("{from}T00:00:00Z"));
    assert_eq!(v["to"], format!("{to}T00:00:00Z"));
    assert_eq!(
        (&v["openingBalance"], &v["closingBalance"]),
        (&"1000.00".into(), &"1048.00".into())
    );
    assert_eq!(
        (&v["debits"], &v["credits"]),
        (&"100.00".into(), &"52.00".into())
    );
    let lines = v["lines"].as_array().unwrap();
    let kinds: Vec<&str> = lines.iter().map(|l| l["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["posting", "posting", "capture", "posting"]);
    assert_eq!(lines[0]["memo"], "bank fee");
    assert_eq!(lines[0]["counterAccounts"], serde_json::json!([FEES]));
    assert_eq!(lines[3]["balance"], "1048.00");
    assert_eq!(v["notYetCreated"], false);

    // A period that ends before it starts is a mistake in the arguments: exit 2, saying so.
    let out = ledger(
        &["report", "statement", BANK, "--from", &to, "--to", &from],
        &b.server,
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("give a --to after --from"),
        "{}",
        stderr(&out)
    );
    // The statement at a cut-off (no period) is as it was: ListEntries' lines and TOTAL.
    let plain = b
        .report(&["report", "statement", BANK, "--format", "csv"])
        .await;
    assert!(
        plain.starts_with(
            "sequence,posting_id,recorded_at,effective_at,debit,credit,balance_after,"
        ),
        "{plain}"
    );
    assert!(
        plain
            .lines()
            .last()
            .unwrap()
            .starts_with("TOTAL,,,,1100.00,62.00,1038.00,"),
        "{plain}"
    );
}
