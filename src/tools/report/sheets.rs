//! The balance sheet and the income statement, from the rollups of the account-code tree at
//! one cut-off (ListRollups). The top segments name the sections: `assets`, `liabilities`,
//! `equity`, `income`, `expenses`. A section's amount is made of its debits and credits, not
//! of its accounts' balances, so a contra account (a debit-normal one under `liabilities`,
//! say) counts against its section: assets and expenses are debits − credits; liabilities,
//! equity and income credits − debits. Accounts under any other top segment are `other`
//! (their net as debits − credits): not part of the identity
//! assets = liabilities + equity + (income − expenses), which they make differ.

use super::money::{add, sub, sum, zero};
use super::table::{csv_line, heading, json_text, table};
use super::{
    applied_json, close_at, closed_json, closed_mark, connect, cut_off_words, in_ledger, requested,
    rpc_error, under_heading, Common, Format, ReportError,
};
use ledger_client::{Amount, Rollup, RollupTotal, Rollups};
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// How deep the sheets go.
#[derive(clap::Args, Debug, Clone)]
pub struct TreeArgs {
    /// Lines down to this many segments below a section's top (1: `assets:bank`; 2: also
    /// `assets:bank:eur`; 0: the sections alone). At most 15.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=15))]
    pub depth: u32,
}

/// The side a section's amount grows on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    /// debits − credits.
    Debit,
    /// credits − debits.
    Credit,
}

/// The five top segments, and the side each is counted on.
const TOPS: [(&str, Side); 5] = [
    ("assets", Side::Debit),
    ("liabilities", Side::Credit),
    ("equity", Side::Credit),
    ("income", Side::Credit),
    ("expenses", Side::Debit),
];

/// One node's figures in one currency.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Figure {
    pub node: String,
    pub accounts: u64,
    pub debits: Amount,
    pub credits: Amount,
    /// Debits and credits on its section's side.
    pub amount: Amount,
}

/// A section in one currency: its amount (zero when no account is under it) and its lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Section {
    pub amount: Amount,
    pub debits: Amount,
    pub credits: Amount,
    pub lines: Vec<Figure>,
}

/// The sheets of one currency.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Books {
    pub currency: String,
    pub assets: Section,
    pub liabilities: Section,
    pub equity: Section,
    pub income: Section,
    pub expenses: Section,
    /// The top nodes outside the five, each a line, their net as debits − credits.
    pub other: Section,
    /// income − expenses: not yet closed into equity.
    pub earnings: Amount,
    /// assets − (liabilities + equity + earnings): zero when every account is under the five.
    pub difference: Amount,
}

/// What the sheets print, every currency at one cut-off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Sheets {
    pub ledger: String,
    pub depth: u32,
    pub at: ledger_client::Applied,
    pub books: Vec<Books>,
}

fn side_amount(side: Side, debits: Amount, credits: Amount) -> Result<Amount, ReportError> {
    match side {
        Side::Debit => sub(debits, credits),
        Side::Credit => sub(credits, debits),
    }
}

fn total_in<'a>(r: &'a Rollup, currency: &str) -> Option<&'a RollupTotal> {
    r.totals.iter().find(|t| t.currency == currency)
}

fn figure(r: &Rollup, t: &RollupTotal, side: Side) -> Result<Figure, ReportError> {
    Ok(Figure {
        node: r.node.clone(),
        accounts: r.account_count,
        debits: t.debits,
        credits: t.credits,
        amount: side_amount(side, t.debits, t.credits)?,
    })
}

/// Segments of a node (`assets:bank`: 2; the root: 0).
fn level(node: &str) -> usize {
    if node.is_empty() {
        0
    } else {
        node.split(':').count()
    }
}

/// The section under `top` in `currency`: its node's totals and its lines (nodes below it,
/// down to `depth` segments below, in tree order).
fn section(
    rollups: &[Rollup],
    top: &str,
    side: Side,
    currency: &str,
    depth: u32,
    scale: u32,
) -> Result<Section, ReportError> {
    let under = format!("{top}:");
    let mut lines = Vec::new();
    for r in rollups.iter().filter(|r| r.node.starts_with(&under)) {
        if let Some(t) = total_in(r, currency).filter(|_| level(&r.node) <= 1 + depth as usize) {
            lines.push(figure(r, t, side)?);
        }
    }
    let node = rollups.iter().find(|r| r.node == top);
    let Some((r, t)) = node.and_then(|r| Some((r, total_in(r, currency)?))) else {
        let z = zero(scale);
        return Ok(Section {
            amount: z,
            debits: z,
            credits: z,
            lines,
        });
    };
    let f = figure(r, t, side)?;
    Ok(Section {
        amount: f.amount,
        debits: f.debits,
        credits: f.credits,
        lines,
    })
}

/// The top nodes outside the five, in `currency`, as one section (debits − credits).
fn other(rollups: &[Rollup], currency: &str, scale: u32) -> Result<Section, ReportError> {
    let mut lines = Vec::new();
    for r in rollups.iter().filter(|r| level(&r.node) == 1) {
        if TOPS.iter().any(|(t, _)| *t == r.node) {
            continue;
        }
        if let Some(t) = total_in(r, currency) {
            lines.push(figure(r, t, Side::Debit)?);
        }
    }
    let of = |f: fn(&Figure) -> Amount| sum(lines.iter().map(f), scale);
    Ok(Section {
        amount: of(|f| f.amount)?,
        debits: of(|f| f.debits)?,
        credits: of(|f| f.credits)?,
        lines,
    })
}

/// One currency's sheets.
fn books(rollups: &[Rollup], currency: &str, depth: u32) -> Result<Books, ReportError> {
    let scale = rollups
        .iter()
        .filter_map(|r| total_in(r, currency))
        .map(|t| t.debits.scale().max(t.credits.scale()))
        .max()
        .unwrap_or(0);
    let [assets, liabilities, equity, income, expenses] =
        TOPS.map(|(top, side)| section(rollups, top, side, currency, depth, scale));
    let (assets, liabilities, equity) = (assets?, liabilities?, equity?);
    let (income, expenses) = (income?, expenses?);
    let earnings = sub(income.amount, expenses.amount)?;
    let right = add(add(liabilities.amount, equity.amount)?, earnings)?;
    Ok(Books {
        currency: currency.to_owned(),
        difference: sub(assets.amount, right)?,
        other: other(rollups, currency, scale)?,
        earnings,
        assets,
        liabilities,
        equity,
        income,
        expenses,
    })
}

/// The sheets of every currency of the rollups (nodes in tree order, down to `1 + depth`
/// segments), in currency order.
pub(super) fn sheets(rollups: &Rollups, ledger: &str, depth: u32) -> Result<Sheets, ReportError> {
    let nodes: Vec<Rollup> = rollups
        .rollups
        .iter()
        .filter(|r| !r.node.is_empty())
        .cloned()
        .collect();
    let currencies: BTreeSet<&str> = nodes
        .iter()
        .flat_map(|r| r.totals.iter().map(|t| t.currency.as_str()))
        .collect();
    Ok(Sheets {
        ledger: ledger.to_owned(),
        depth,
        at: rollups.as_of,
        books: currencies
            .into_iter()
            .map(|c| books(&nodes, c, depth))
            .collect::<Result<_, _>>()?,
    })
}

/// Which sheet to print.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sheet {
    BalanceSheet,
    IncomeStatement,
}

pub(super) async fn balance_sheet(common: &Common, tree: &TreeArgs) -> Result<String, ReportError> {
    render(common, tree, Sheet::BalanceSheet).await
}

pub(super) async fn income_statement(
    common: &Common,
    tree: &TreeArgs,
) -> Result<String, ReportError> {
    render(common, tree, Sheet::IncomeStatement).await
}

/// Asks the rollups once (every page at one cut-off) and renders the sheet.
async fn render(common: &Common, tree: &TreeArgs, sheet: Sheet) -> Result<String, ReportError> {
    let client = connect(common).await?;
    let rollups = client
        .rollups("", 1 + tree.depth, requested(common))
        .await
        .map_err(rpc_error)?;
    let s = sheets(&rollups, &common.ledger.code(), tree.depth)?;
    if common.format == Format::Csv {
        return Ok(sheet_csv(&s, sheet));
    }
    let close = close_at(&client, &s.at).await?;
    Ok(match common.format {
        Format::Json => {
            let mut v = sheet_json(&s, sheet);
            v["closedPeriod"] = closed_json(close.as_ref());
            json_text(&v)
        }
        _ => {
            let table = sheet_table(&s, sheet);
            match close {
                Some(c) => under_heading(&table, &closed_mark(&c)),
                None => table,
            }
        }
    })
}

fn title(sheet: Sheet) -> &'static str {
    match sheet {
        Sheet::BalanceSheet => "Balance sheet",
        Sheet::IncomeStatement => "Income statement",
    }
}

/// A node as a table line: indented by its depth below its section's (`base` segments: 1
/// for the five, whose lines are below their top; 0 for `other`, whose lines are tops).
fn indented(node: &str, base: usize) -> String {
    format!("{}{node}", "  ".repeat(level(node).saturating_sub(base)))
}

type Row = [String; 3];

fn row(name: &str, currency: &str, amount: Amount) -> Row {
    [name.into(), currency.into(), amount.to_string()]
}

/// A section's rows: its total, then its lines (indented below `base` segments).
fn section_rows(name: &str, currency: &str, s: &Section, base: usize) -> Vec<Row> {
    let mut rows = vec![row(name, currency, s.amount)];
    rows.extend(
        s.lines
            .iter()
            .map(|f| row(&indented(&f.node, base), currency, f.amount)),
    );
    rows
}

/// One currency's rows of the body of a sheet.
fn body_rows(b: &Books, sheet: Sheet) -> Vec<Row> {
    let c = b.currency.as_str();
    let mut rows = Vec::new();
    if sheet == Sheet::BalanceSheet {
        rows.extend(section_rows("assets", c, &b.assets, 1));
        rows.extend(section_rows("liabilities", c, &b.liabilities, 1));
        rows.extend(section_rows("equity", c, &b.equity, 1));
        rows.push(row("earnings (income - expenses)", c, b.earnings));
        rows.push(row("  income", c, b.income.amount));
        rows.push(row("  expenses", c, b.expenses.amount));
        if !b.other.lines.is_empty() {
            rows.extend(section_rows("other (debits - credits)", c, &b.other, 0));
        }
    } else {
        rows.extend(section_rows("income", c, &b.income, 1));
        rows.extend(section_rows("expenses", c, &b.expenses, 1));
    }
    rows
}

/// The balance sheet's check of one currency, in words.
pub(super) fn check_words(b: &Books) -> String {
    let c = &b.currency;
    let mut line = format!(
        "Check {c}: assets {} = liabilities {} + equity {} + earnings {}; difference {}",
        b.assets.amount, b.liabilities.amount, b.equity.amount, b.earnings, b.difference
    );
    if b.difference.minor() != 0 {
        line.push_str(if b.other.lines.is_empty() {
            ": NOT BALANCED"
        } else {
            ": the accounts outside assets, liabilities, equity, income and expenses (other) are not in the identity"
        });
    }
    line
}

pub(super) fn sheet_table(s: &Sheets, sheet: Sheet) -> String {
    let heading_line = format!(
        "{}{} {}\n",
        title(sheet),
        in_ledger(&s.ledger),
        cut_off_words(&s.at)
    );
    if s.books.is_empty() {
        return format!("{heading_line}\nNo account has activity at this cut-off.\n");
    }
    let mut rows = vec![heading(["ACCOUNT", "CURRENCY", "AMOUNT"])];
    for b in &s.books {
        rows.extend(body_rows(b, sheet));
    }
    let body = rows.len();
    for b in &s.books {
        rows.push(match sheet {
            Sheet::BalanceSheet => row("DIFFERENCE", &b.currency, b.difference),
            Sheet::IncomeStatement => row("NET INCOME", &b.currency, b.earnings),
        });
    }
    let mut out = format!(
        "{heading_line}\n{}",
        table(&rows, &[false, false, true], Some(body))
    );
    if sheet == Sheet::BalanceSheet {
        out.push('\n');
        for b in &s.books {
            out.push_str(&check_words(b));
            out.push('\n');
        }
    }
    out
}

/// A section's CSV lines: its total (node: its top, none for `other`), then its lines.
fn section_csv(out: &mut String, name: &str, currency: &str, s: &Section) {
    let cells = |node: &str, f: (Amount, Amount, Amount)| {
        let [a, d, c] = [f.0, f.1, f.2].map(|x| x.to_string());
        csv_line(&[name, node, currency, &a, &d, &c])
    };
    let top = if name == "other" { "" } else { name };
    out.push_str(&cells(top, (s.amount, s.debits, s.credits)));
    for f in &s.lines {
        out.push_str(&cells(&f.node, (f.amount, f.debits, f.credits)));
    }
}

pub(super) fn sheet_csv(s: &Sheets, sheet: Sheet) -> String {
    let mut out = String::from("section,node,currency,amount,debits,credits\n");
    let computed =
        |name: &str, c: &str, a: Amount| csv_line(&[name, "", c, &a.to_string(), "", ""]);
    for b in &s.books {
        let c = b.currency.as_str();
        if sheet == Sheet::BalanceSheet {
            section_csv(&mut out, "assets", c, &b.assets);
            section_csv(&mut out, "liabilities", c, &b.liabilities);
            section_csv(&mut out, "equity", c, &b.equity);
            out.push_str(&computed("earnings", c, b.earnings));
            if !b.other.lines.is_empty() {
                section_csv(&mut out, "other", c, &b.other);
            }
            out.push_str(&computed("difference", c, b.difference));
        } else {
            section_csv(&mut out, "income", c, &b.income);
            section_csv(&mut out, "expenses", c, &b.expenses);
            out.push_str(&computed("net_income", c, b.earnings));
        }
    }
    out
}

fn section_json(s: &Section) -> Value {
    let lines: Vec<Value> = s
        .lines
        .iter()
        .map(|f| {
            json!({
                "node": f.node,
                "accountCount": f.accounts,
                "amount": f.amount.to_string(),
                "debits": f.debits.to_string(),
                "credits": f.credits.to_string(),
            })
        })
        .collect();
    json!({
        "amount": s.amount.to_string(),
        "debits": s.debits.to_string(),
        "credits": s.credits.to_string(),
        "lines": lines,
    })
}

fn books_json(b: &Books, sheet: Sheet) -> Value {
    match sheet {
        Sheet::BalanceSheet => json!({
            "currency": b.currency,
            "assets": section_json(&b.assets),
            "liabilities": section_json(&b.liabilities),
            "equity": section_json(&b.equity),
            "earnings": {
                "amount": b.earnings.to_string(),
                "income": b.income.amount.to_string(),
                "expenses": b.expenses.amount.to_string(),
            },
            "other": section_json(&b.other),
            "difference": b.difference.to_string(),
            "balanced": b.difference.minor() == 0,
        }),
        Sheet::IncomeStatement => json!({
            "currency": b.currency,
            "income": section_json(&b.income),
            "expenses": section_json(&b.expenses),
            "netIncome": b.earnings.to_string(),
        }),
    }
}

/// A sheet as one JSON object (the caller sets `closedPeriod`).
pub(super) fn sheet_json(s: &Sheets, sheet: Sheet) -> Value {
    let report = match sheet {
        Sheet::BalanceSheet => "balance-sheet",
        Sheet::IncomeStatement => "income-statement",
    };
    json!({
        "report": report,
        "ledger": s.ledger,
        "depth": s.depth,
        "asOf": applied_json(&s.at),
        "closedPeriod": null,
        "currencies": s.books.iter().map(|b| books_json(b, sheet)).collect::<Vec<_>>(),
    })
}
