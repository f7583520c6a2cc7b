//! Printing a reconciliation: a table for people, CSV for spreadsheets (one row per line with
//! its status, then the totals), JSON for programs. Amounts are exact (`Amount`s at the
//! account's scale, in the statement's sign convention: positive raises the balance).

use super::matching::{BookLine, Outcome, StatementLine};
use super::{Format, Period};
use ledger_client::{Account, Amount, NormalBalance, PostingKind};
use serde_json::{json, Value};
use std::fmt::Write as _;
use time::OffsetDateTime;

/// What was reconciled, and how it came out.
pub struct Report<'a> {
    pub account: &'a Account,
    pub ledger: String,
    /// The statement's name (its path, `-` for standard input).
    pub statement: String,
    pub period: Period,
    pub as_of: Option<OffsetDateTime>,
    pub tolerance: u32,
    pub negated: bool,
    pub lines: &'a [StatementLine],
    pub book: &'a [BookLine],
    pub outcome: &'a Outcome,
}

/// The report in `format`.
pub fn render(format: Format, r: &Report) -> String {
    match format {
        Format::Table => table(r),
        Format::Csv => csv_text(r),
        Format::Json => crate::tools::output::json_text(&json_value(r)),
    }
}

impl Report<'_> {
    fn amount(&self, minor: i128) -> String {
        Amount::new(minor, self.account.scale).to_string()
    }

    fn statement_cells(&self, s: usize) -> [String; 4] {
        let l = &self.lines[s];
        [
            l.line.to_string(),
            l.day.to_string(),
            self.amount(l.amount),
            l.reference.clone(),
        ]
    }

    fn book_cells(&self, b: usize) -> [String; 7] {
        let l = &self.book[b];
        [
            l.posting_id.clone(),
            l.sequence.to_string(),
            l.leg.to_string(),
            l.day.to_string(),
            self.amount(l.amount),
            l.reference.clone(),
            kind(l.kind).to_owned(),
        ]
    }

    /// The result line: reconciled, or what is not.
    fn verdict(&self) -> String {
        let o = self.outcome;
        if o.reconciled() {
            return "RECONCILED: every line matched, the totals agree".into();
        }
        format!(
            "NOT RECONCILED: {} unmatched statement line(s), {} unmatched book line(s), {} mismatched reference(s), difference {}",
            o.unmatched_statement.len(),
            o.unmatched_book.len(),
            o.mismatched.len(),
            self.amount(o.difference())
        )
    }
}

/// A posting kind's name in every format.
fn kind(k: PostingKind) -> &'static str {
    match k {
        PostingKind::Posting => "posting",
        PostingKind::Hold => "hold",
        PostingKind::Capture => "capture",
        PostingKind::Release => "release",
        PostingKind::Expiry => "expiry",
        PostingKind::Void => "void",
    }
}

fn normal(n: NormalBalance) -> &'static str {
    match n {
        NormalBalance::Debit => "debit-normal",
        NormalBalance::Credit => "credit-normal",
    }
}

/// The heading: what against what, over which period, as known when.
fn heading(r: &Report) -> String {
    let a = r.account;
    let ledger = if r.ledger == ledger_client::DEFAULT_LEDGER {
        String::new()
    } else {
        format!(" in ledger {}", r.ledger)
    };
    let known = r.as_of.map_or("now".to_owned(), |t| {
        format!("by {}", crate::tools::show_time(t))
    });
    let negated = if r.negated {
        "; statement amounts negated (--negate)"
    } else {
        ""
    };
    format!(
        "Reconciliation of {} ({}, {}){ledger} against {}\nPeriod {} to {} (effective, UTC days, both included), as recorded {known}; date tolerance {} day(s); positive amounts raise the balance{negated}\n",
        a.code,
        a.currency,
        normal(a.normal_balance),
        r.statement,
        r.period.first,
        r.period.last,
        r.tolerance,
    )
}

/// The columns of a pair: the statement line's, then the book line's.
const PAIR_HEAD: [&str; 11] = [
    "LINE",
    "DATE",
    "AMOUNT",
    "REFERENCE",
    "POSTING_ID",
    "SEQUENCE",
    "LEG",
    "EFFECTIVE",
    "BOOK_AMOUNT",
    "BOOK_REFERENCE",
    "KIND",
];

/// The columns of a book line.
const BOOK_HEAD: [&str; 7] = [
    "POSTING_ID",
    "SEQUENCE",
    "LEG",
    "EFFECTIVE",
    "AMOUNT",
    "REFERENCE",
    "KIND",
];

fn head(names: &[&str], more: &[&str]) -> Vec<String> {
    names.iter().chain(more).map(|s| s.to_string()).collect()
}

fn table(r: &Report) -> String {
    let mut out = heading(r);
    pair_sections(r, &mut out);
    let o = r.outcome;
    let rows = o.unmatched_statement.iter();
    let rows = rows.map(|&s| r.statement_cells(s).to_vec()).collect();
    let columns = head(&PAIR_HEAD[..4], &[]);
    section(
        &mut out,
        "UNMATCHED STATEMENT LINES",
        columns,
        rows,
        &[0, 2],
    );
    let rows = o.unmatched_book.iter().map(|&b| r.book_cells(b).to_vec());
    let columns = head(&BOOK_HEAD, &[]);
    section(
        &mut out,
        "UNMATCHED BOOK LINES",
        columns,
        rows.collect(),
        &[1, 2, 4],
    );
    let rows = o.reversed.iter().flat_map(|&(p, v)| [p, v]);
    let rows = rows.map(|b| r.book_cells(b).to_vec()).collect();
    let title =
        "REVERSED IN THE BOOK (lines of a posting and of its void, neither on the statement)";
    section(&mut out, title, head(&BOOK_HEAD, &[]), rows, &[1, 2, 4]);
    out.push_str(&totals_table(r));
    let _ = writeln!(out, "\n{}", r.verdict());
    out
}

/// The sections of pairs: matched, and mismatched.
fn pair_sections(r: &Report, out: &mut String) {
    let o = r.outcome;
    let matched = o.matched.iter().map(|&(s, b, how)| {
        let mut row = pair_row(r, s, b);
        row.extend([how.name().to_owned(), days_apart(r, s, b).to_string()]);
        row
    });
    let columns = head(&PAIR_HEAD, &["MATCHED_BY", "DAYS_APART"]);
    let right = [0, 2, 5, 6, 8, 12];
    section(out, "MATCHED", columns, matched.collect(), &right);
    let mismatched = o.mismatched.iter().map(|&(s, b)| {
        let mut row = pair_row(r, s, b);
        row.push(r.amount(r.lines[s].amount - r.book[b].amount));
        row
    });
    let columns = head(&PAIR_HEAD, &["DIFFERENCE"]);
    let title = "MISMATCHED (the same reference, another amount)";
    section(
        out,
        title,
        columns,
        mismatched.collect(),
        &[0, 2, 5, 6, 8, 11],
    );
}

/// A pair's statement cells, then its book cells.
fn pair_row(r: &Report, s: usize, b: usize) -> Vec<String> {
    let mut row = r.statement_cells(s).to_vec();
    row.extend(r.book_cells(b));
    row
}

fn days_apart(r: &Report, s: usize, b: usize) -> i64 {
    (r.lines[s].day - r.book[b].day).whole_days().abs()
}

/// A titled section with its count: its rows under `head`, or `none`.
fn section(
    out: &mut String,
    title: &str,
    head: Vec<String>,
    rows: Vec<Vec<String>>,
    right: &[usize],
) {
    let _ = writeln!(
        out,
        "\n{title}: {}",
        if rows.is_empty() {
            "none".to_owned()
        } else {
            rows.len().to_string()
        }
    );
    if rows.is_empty() {
        return;
    }
    let mut all = vec![head];
    all.extend(rows);
    out.push_str(&aligned(&all, right));
}

fn totals_table(r: &Report) -> String {
    let o = r.outcome;
    let rows = vec![
        vec![String::new(), "LINES".into(), "SUM".into()],
        vec![
            "statement".into(),
            r.lines.len().to_string(),
            r.amount(o.statement_sum),
        ],
        vec![
            "book".into(),
            r.book.len().to_string(),
            r.amount(o.book_sum),
        ],
        vec!["difference".into(), String::new(), r.amount(o.difference())],
    ];
    format!(
        "\nTOTALS (statement less book)\n{}",
        aligned(&rows, &[1, 2])
    )
}

/// Rows as aligned columns (the columns at `right` right-aligned), a rule under the first.
fn aligned(rows: &[Vec<String>], right: &[usize]) -> String {
    crate::tools::output::aligned(rows, right, &[1])
}

/// The CSV's columns: a line's status, its statement side, its book side, how it matched.
const CSV_HEADER: [&str; 13] = [
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
    "matched_by",
];

fn csv_text(r: &Report) -> String {
    let o = r.outcome;
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(CSV_HEADER).expect("CSV into memory");
    let blank4 = || std::array::from_fn::<String, 4, _>(|_| String::new());
    let blank7 = || std::array::from_fn::<String, 7, _>(|_| String::new());
    let mut row = |status: &str, s: [String; 4], b: [String; 7], how: &str| {
        let mut cells = vec![status.to_owned()];
        cells.extend(s);
        cells.extend(b);
        cells.push(how.to_owned());
        w.write_record(&cells).expect("CSV into memory");
    };
    for &(s, b, how) in &o.matched {
        row("matched", r.statement_cells(s), r.book_cells(b), how.name());
    }
    for &(s, b) in &o.mismatched {
        row("mismatched", r.statement_cells(s), r.book_cells(b), "");
    }
    for &s in &o.unmatched_statement {
        row("unmatched_statement", r.statement_cells(s), blank7(), "");
    }
    for &b in &o.unmatched_book {
        row("unmatched_book", blank4(), r.book_cells(b), "");
    }
    for &(p, v) in &o.reversed {
        row("reversed", blank4(), r.book_cells(p), "");
        row("reversed", blank4(), r.book_cells(v), "");
    }
    let sum = |minor: i128| {
        let mut s = blank4();
        s[2] = r.amount(minor);
        s
    };
    row("statement_total", sum(o.statement_sum), blank7(), "");
    let mut book = blank7();
    book[4] = r.amount(o.book_sum);
    row("book_total", blank4(), book, "");
    row("difference", sum(o.difference()), blank7(), "");
    String::from_utf8(w.into_inner().expect("CSV into memory")).expect("UTF-8 cells")
}

fn statement_json(r: &Report, s: usize) -> Value {
    let l = &r.lines[s];
    json!({ "line": l.line, "date": l.day.to_string(), "amount": r.amount(l.amount), "reference": l.reference })
}

fn book_json(r: &Report, b: usize) -> Value {
    let l = &r.book[b];
    json!({
        "postingId": l.posting_id,
        "sequence": l.sequence.to_string(),
        "leg": l.leg,
        "effectiveDate": l.day.to_string(),
        "effectiveAt": crate::tools::show_system_time(l.effective_at),
        "amount": r.amount(l.amount),
        "reference": l.reference,
        "kind": kind(l.kind),
    })
}

fn json_value(r: &Report) -> Value {
    let o = r.outcome;
    let matched: Vec<Value> = o
        .matched
        .iter()
        .map(|&(s, b, how)| {
            json!({
                "statement": statement_json(r, s), "book": book_json(r, b),
                "matchedBy": how.name(), "daysApart": days_apart(r, s, b),
            })
        })
        .collect();
    let mismatched: Vec<Value> = o
        .mismatched
        .iter()
        .map(|&(s, b)| {
            json!({
                "statement": statement_json(r, s), "book": book_json(r, b),
                "difference": r.amount(r.lines[s].amount - r.book[b].amount),
            })
        })
        .collect();
    let reversed: Vec<Value> = o
        .reversed
        .iter()
        .map(|&(p, v)| json!({ "posting": book_json(r, p), "void": book_json(r, v) }))
        .collect();
    json!({
        "account": r.account.code,
        "currency": r.account.currency,
        "scale": r.account.scale,
        "normalBalance": normal(r.account.normal_balance),
        "ledger": r.ledger,
        "statement": r.statement,
        "period": { "firstDay": r.period.first.to_string(), "lastDay": r.period.last.to_string() },
        "asOf": r.as_of.map(crate::tools::show_time),
        "dateToleranceDays": r.tolerance,
        "negated": r.negated,
        "matched": matched,
        "mismatched": mismatched,
        "unmatchedStatement": o.unmatched_statement.iter().map(|&s| statement_json(r, s)).collect::<Vec<_>>(),
        "unmatchedBook": o.unmatched_book.iter().map(|&b| book_json(r, b)).collect::<Vec<_>>(),
        "reversed": reversed,
        "totals": {
            "statementLines": r.lines.len(),
            "statementSum": r.amount(o.statement_sum),
            "bookLines": r.book.len(),
            "bookSum": r.amount(o.book_sum),
            "difference": r.amount(o.difference()),
        },
        "reconciled": o.reconciled(),
    })
}
