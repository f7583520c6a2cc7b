//! `ledger report`: client commands for people and spreadsheets, on one ledger (`--ledger`,
//! env `LEDGER_LEDGER`, default `default`). They call a running server
//! through `ledger-client`'s typed API (every page at one cut-off, amounts as exact
//! `ledger_client::Amount`s at the account's scale, printed exactly and compared exactly: the
//! ledger's totals reach 10^36 minor units, beyond a `Decimal`) and print an aligned table
//! (with totals) or CSV with a header. Every
//! balance is followed by what pending holds hold on it (held debits, held credits) and the
//! amount they leave available; the trial balance's totals add up the held amounts too.

use ledger_client::{
    pb, Applied, AsOf, Balance, Client, ClientOptions, CurrencyTotal, Direction, Entry,
    RetryPolicy, TrialBalance,
};
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::SystemTime;
use time::OffsetDateTime;

// Pages: `ledger-client` asks for PAGE_SIZE (the server's largest) items per page.

#[derive(clap::Args, Debug, Clone)]
pub struct ReportArgs {
    #[command(subcommand)]
    pub report: Report,
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum Report {
    /// Balances of every account with activity (optionally by code prefix), with their held
    /// and available amounts, and per-currency totals of debits, credits and held amounts, at
    /// one cut-off.
    TrialBalance {
        #[command(flatten)]
        common: Common,
        /// Only accounts whose code starts with this.
        #[arg(long, default_value = "")]
        prefix: String,
        /// Also the accounts with nothing by the effective cut-off (no debits, credits or
        /// holds yet: legs recorded, but effective later). Left out by default.
        #[arg(long)]
        all: bool,
    },
    /// An account's entries in journal order with the running balance, and its totals, held
    /// amounts and available amount, at one cut-off.
    Statement {
        /// The account code.
        account: String,
        #[command(flatten)]
        common: Common,
    },
}

#[derive(clap::Args, Debug, Clone)]
pub struct Common {
    #[command(flatten)]
    pub client: crate::tools::ClientArgs,
    #[command(flatten)]
    pub ledger: crate::tools::LedgerArg,
    /// Recorded cut-off (RFC 3339 or a date, which is its start): what the ledger knew at that
    /// time. Default: now.
    #[arg(long, value_parser = crate::tools::parse_time)]
    pub as_of: Option<OffsetDateTime>,
    /// Recorded cut-off at the end of a day: `--as-of-end 2026-12-01` is
    /// 2026-12-01T23:59:59.999999Z ("as known on Dec 1").
    #[arg(long, value_parser = crate::tools::parse_day_end, conflicts_with = "as_of", value_name = "YYYY-MM-DD")]
    pub as_of_end: Option<OffsetDateTime>,
    /// Effective cut-off (RFC 3339 or a date, which is its start): what had happened by that
    /// time. Default: the recorded cut-off.
    #[arg(long, value_parser = crate::tools::parse_time)]
    pub effective: Option<OffsetDateTime>,
    /// Effective cut-off at the end of a day: `--effective-end 2026-11-30` is
    /// 2026-11-30T23:59:59.999999Z ("the end of November").
    #[arg(long, value_parser = crate::tools::parse_day_end, conflicts_with = "effective", value_name = "YYYY-MM-DD")]
    pub effective_end: Option<OffsetDateTime>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Aligned columns with a heading and totals.
    Table,
    /// Comma-separated values with a header line.
    Csv,
}

use crate::tools::show_system_time as show_ts;
use crate::tools::show_ts as show_proto_ts;

/// A failure a person can act on.
#[derive(Debug)]
pub struct ReportError(String);

impl std::fmt::Display for ReportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ReportError {}

fn rpc_error(e: ledger_client::Error) -> ReportError {
    ReportError(e.to_string())
}

/// A client with the default retry policy: a report only reads, so every retry is safe.
async fn connect(common: &Common) -> Result<Client, ReportError> {
    let options = ClientOptions {
        connect: common
            .client
            .options()
            .map_err(|e| ReportError(e.to_string()))?,
        retry: RetryPolicy::default(),
        coalesce: None,
        ledger: common.ledger.code(),
    };
    Client::connect(options).await.map_err(rpc_error)
}

fn requested(common: &Common) -> AsOf {
    AsOf {
        recorded_at: common
            .as_of
            .or(common.as_of_end)
            .map(std::time::SystemTime::from),
        effective_at: common
            .effective
            .or(common.effective_end)
            .map(std::time::SystemTime::from),
    }
}

/// Runs a report, printing it to stdout.
pub async fn run(args: ReportArgs) -> Result<ExitCode, ReportError> {
    let text = match args.report {
        Report::TrialBalance {
            common,
            prefix,
            all,
        } => trial_balance(&common, &prefix, all).await?,
        Report::Statement { account, common } => statement(&common, &account).await?,
    };
    super::output::print_out(&text)
        .map_err(|e| ReportError(format!("cannot write the report to stdout: {e}")))?;
    Ok(ExitCode::SUCCESS)
}

/// The trial balance, rendered.
pub async fn trial_balance(
    common: &Common,
    prefix: &str,
    all: bool,
) -> Result<String, ReportError> {
    let client = connect(common).await?;
    let mut trial = client
        .trial_balance(prefix, requested(common))
        .await
        .map_err(rpc_error)?;
    let cut = trial.balances.first().map(|b| b.as_of);
    if !all {
        trial.balances.retain(|b| !nothing_yet(b));
    }
    Ok(match common.format {
        Format::Csv => trial_balance_csv(&trial),
        Format::Table => {
            let table = trial_balance_table(&trial, prefix, &common.ledger.code());
            match cut {
                Some(at) => with_close(&client, &at, table).await?,
                None => table,
            }
        }
    })
}

/// A table report with, under its heading line, the period close its cut-off falls in, if any.
async fn with_close(client: &Client, at: &Applied, table: String) -> Result<String, ReportError> {
    let closes = client.period_closes().await.map_err(rpc_error)?;
    Ok(match closed_mark(&closes, at) {
        Some(mark) => under_heading(&table, &mark),
        None => table,
    })
}

/// What a statement says of an account created after its recorded cut-off (its zero balance
/// there is not a balance it had: it did not exist yet).
fn not_yet(account: &str, created: SystemTime, at: &Applied) -> Option<String> {
    (created > at.recorded_at).then(|| {
        format!(
            "ACCOUNT NOT YET CREATED: {account} was created at {}, after this cut-off; it had no balance then",
            show_ts(created)
        )
    })
}

/// `table` with `line` under its heading line.
fn under_heading(table: &str, line: &str) -> String {
    match table.split_once('\n') {
        Some((heading, rest)) => format!("{heading}\n{line}\n{rest}"),
        None => format!("{table}\n{line}\n"),
    }
}

/// The close a cut-off's figures fall in: the last close recorded by the cut-off's recorded
/// time whose period (effective before) holds its effective time. Such figures never change.
fn closed_mark(closes: &[pb::PeriodClose], at: &Applied) -> Option<String> {
    let time =
        |t: &Option<prost_types::Timestamp>| t.as_ref().and_then(|t| SystemTime::try_from(*t).ok());
    let c = closes.iter().rev().find(|c| {
        let (before, recorded) = (time(&c.effective_before), time(&c.recorded_at));
        before.is_some_and(|b| at.effective_at < b) && recorded.is_some_and(|r| r <= at.recorded_at)
    })?;
    let digest = c.digest.as_ref().map_or(String::new(), |d| {
        format!(", digest {}:{}", d.sequence, d.root)
    });
    Some(format!(
        "CLOSED PERIOD: effective before {}, closed at {} by {} (key {}{digest}); these figures are final",
        show_proto_ts(&c.effective_before),
        show_proto_ts(&c.recorded_at),
        c.caller,
        c.idempotency_key,
    ))
}

/// An account listed at a cut-off (it has legs recorded by then) with nothing by its effective
/// time: no debits, credits or holds yet. A trial balance leaves it out unless `--all`; the
/// totals are the same either way.
fn nothing_yet(b: &Balance) -> bool {
    [b.debits, b.credits, b.held_debits, b.held_credits]
        .iter()
        .all(|a| a.minor() == 0)
}

/// A balance's held debits, held credits and available amount: the columns that follow its
/// balance in every report (holds change no balance until captured).
fn held_cells(b: &Balance) -> [String; 3] {
    [
        b.held_debits.to_string(),
        b.held_credits.to_string(),
        b.available.to_string(),
    ]
}

/// A trial balance's line of one account: code, currency, debits, credits, balance, held
/// debits, held credits, available.
fn balance_cells(b: &Balance) -> [String; 8] {
    let [hd, hc, av] = held_cells(b);
    [
        b.account.clone(),
        b.currency.clone(),
        b.debits.to_string(),
        b.credits.to_string(),
        b.balance.to_string(),
        hd,
        hc,
        av,
    ]
}

/// A currency's TOTAL line: `mark` where the balance goes, nothing under available.
fn total_cells(t: &CurrencyTotal, mark: &str) -> [String; 8] {
    [
        "TOTAL".into(),
        t.currency.clone(),
        t.debits.to_string(),
        t.credits.to_string(),
        mark.into(),
        t.held_debits.to_string(),
        t.held_credits.to_string(),
        String::new(),
    ]
}

/// Only a whole ledger must balance (a prefix selects part of it): its debits equal its
/// credits, and so do its held debits and credits (every hold balances per currency).
fn balance_mark(t: &CurrencyTotal, whole_ledger: bool) -> &'static str {
    match (
        whole_ledger,
        t.debits == t.credits && t.held_debits == t.held_credits,
    ) {
        (false, _) => "",
        (true, true) => "balanced",
        (true, false) => "NOT BALANCED",
    }
}

fn trial_balance_csv(trial: &TrialBalance) -> String {
    let mut out = String::from(
        "account,currency,debits,credits,balance,held_debits,held_credits,available\n",
    );
    for b in &trial.balances {
        let _ = writeln!(out, "{}", balance_cells(b).join(","));
    }
    for t in &trial.totals {
        let _ = writeln!(out, "{}", total_cells(t, "").join(","));
    }
    out
}

/// How a heading names a ledger: not at all for `default`, ` in ledger CODE` for another.
fn in_ledger(ledger: &str) -> String {
    if ledger == ledger_client::DEFAULT_LEDGER {
        String::new()
    } else {
        format!(" in ledger {ledger}")
    }
}

fn trial_balance_table(trial: &TrialBalance, prefix: &str, ledger: &str) -> String {
    let of = if prefix.is_empty() {
        in_ledger(ledger)
    } else {
        format!(" of {prefix}*{}", in_ledger(ledger))
    };
    let Some(a) = trial.balances.first().map(|b| b.as_of) else {
        return format!("Trial balance{of}: no account has activity at this cut-off\n");
    };
    let mut out = format!(
        "Trial balance{of} as recorded at {}, effective at {} (journal sequence {})\n\n",
        show_ts(a.recorded_at),
        show_ts(a.effective_at),
        a.sequence,
    );
    let mut rows: Vec<[String; 8]> = vec![[
        "ACCOUNT",
        "CURRENCY",
        "DEBITS",
        "CREDITS",
        "BALANCE",
        "HELD_DEBITS",
        "HELD_CREDITS",
        "AVAILABLE",
    ]
    .map(String::from)];
    rows.extend(trial.balances.iter().map(balance_cells));
    let body = rows.len();
    rows.extend(
        trial
            .totals
            .iter()
            .map(|t| total_cells(t, balance_mark(t, prefix.is_empty()))),
    );
    let right = [false, false, true, true, true, true, true, true];
    out.push_str(&table(&rows, &right, Some(body)));
    out
}

/// The statement, rendered. The cut-off is resolved once (by GetBalance) and the statement
/// asked at exactly that cut-off, so its closing balance is the balance printed with it.
pub async fn statement(common: &Common, account: &str) -> Result<String, ReportError> {
    let client = connect(common).await?;
    let balance = client
        .balance(account, requested(common))
        .await
        .map_err(rpc_error)?;
    let entries = client
        .entries(account, balance.as_of.as_of())
        .await
        .map_err(rpc_error)?;
    let created = client.account(account).await.map_err(rpc_error)?.created_at;
    let closing = entries.last().map_or(balance.balance, |e| e.balance_after);
    if closing != balance.balance {
        return Err(ReportError(format!(
            "the statement of {account} closes at {closing} but its balance at the same cut-off is {}; the ledger is inconsistent",
            balance.balance
        )));
    }
    Ok(match common.format {
        Format::Csv => statement_csv(&balance, &entries),
        Format::Table => {
            let of = format!(
                "{account} ({}){}",
                balance.currency,
                in_ledger(&common.ledger.code())
            );
            let table = statement_table(&of, &balance, &entries);
            let table = match not_yet(account, created, &balance.as_of) {
                Some(line) => under_heading(&table, &line),
                None => table,
            };
            with_close(&client, &balance.as_of, table).await?
        }
    })
}

/// An entry's amount in the debit or the credit column.
fn sides(e: &Entry) -> (String, String) {
    match e.direction {
        Direction::Debit => (e.amount.to_string(), String::new()),
        Direction::Credit => (String::new(), e.amount.to_string()),
    }
}

/// A statement's line of one entry: sequence, times, posting, debit or credit, the balance
/// after it, and nothing under the held columns (holds are not entries).
fn entry_cells(e: &Entry) -> [String; 10] {
    let (d, c) = sides(e);
    [
        e.sequence.to_string(),
        show_ts(e.recorded_at),
        show_ts(e.effective_at),
        e.posting_id.clone(),
        d,
        c,
        e.balance_after.to_string(),
        String::new(),
        String::new(),
        String::new(),
    ]
}

/// A statement's TOTAL line: the account's debits, credits and closing balance, and what
/// its pending holds hold and leave available, at the statement's cut-off.
fn statement_total_cells(balance: &Balance, entries: &str) -> [String; 10] {
    let [hd, hc, av] = held_cells(balance);
    [
        "TOTAL".into(),
        String::new(),
        String::new(),
        entries.into(),
        balance.debits.to_string(),
        balance.credits.to_string(),
        balance.balance.to_string(),
        hd,
        hc,
        av,
    ]
}

fn statement_csv(balance: &Balance, entries: &[Entry]) -> String {
    let mut out = String::from(
        "sequence,posting_id,recorded_at,effective_at,debit,credit,balance_after,held_debits,held_credits,available\n",
    );
    let csv_order = |mut cells: [String; 10]| {
        // The table shows the times before the posting; the CSV, as it always has, after.
        cells[1..4].rotate_right(1);
        cells.join(",")
    };
    for e in entries {
        let _ = writeln!(out, "{}", csv_order(entry_cells(e)));
    }
    let _ = writeln!(out, "{}", csv_order(statement_total_cells(balance, "")));
    out
}

/// The statement's table; `of` names the account, its currency and (unless `default`) its
/// ledger, as its heading says them.
fn statement_table(of: &str, balance: &Balance, entries: &[Entry]) -> String {
    let applied = balance.as_of;
    let mut out = format!(
        "Statement of {of} as recorded at {}, effective at {} (journal sequence {})\n\n",
        show_ts(applied.recorded_at),
        show_ts(applied.effective_at),
        applied.sequence,
    );
    let mut rows: Vec<[String; 10]> = vec![[
        "SEQUENCE",
        "RECORDED_AT",
        "EFFECTIVE_AT",
        "POSTING_ID",
        "DEBIT",
        "CREDIT",
        "BALANCE",
        "HELD_DEBITS",
        "HELD_CREDITS",
        "AVAILABLE",
    ]
    .map(String::from)];
    rows.extend(entries.iter().map(entry_cells));
    let body = rows.len();
    let count = match entries.len() {
        1 => "1 entry".to_string(),
        n => format!("{n} entries"),
    };
    rows.push(statement_total_cells(balance, &count));
    let right = [
        true, false, false, false, true, true, true, true, true, true,
    ];
    out.push_str(&table(&rows, &right, Some(body)));
    out
}

/// Aligned columns (right-aligned where `right`), with a rule under the heading and before
/// row `rule_before` (the totals).
fn table<const N: usize>(
    rows: &[[String; N]],
    right: &[bool; N],
    rule_before: Option<usize>,
) -> String {
    let mut widths = [0usize; N];
    for r in rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let rule: String = widths
        .iter()
        .map(|w| "-".repeat(*w))
        .collect::<Vec<_>>()
        .join("  ");
    let mut out = String::new();
    for (i, r) in rows.iter().enumerate() {
        if i == 1 || (Some(i) == rule_before && i < rows.len()) {
            out.push_str(&rule);
            out.push('\n');
        }
        let cells: Vec<String> = r
            .iter()
            .zip(widths.iter().zip(right))
            .map(|(c, (w, right))| {
                if *right {
                    format!("{c:>w$}")
                } else {
                    format!("{c:<w$}")
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_aligns_columns_and_rules_off_the_heading_and_totals() {
        let rows = [
            ["A".to_string(), "AMOUNT".to_string()],
            ["x".to_string(), "1.00".to_string()],
            ["longer".to_string(), "100.00".to_string()],
            ["TOTAL".to_string(), "101.00".to_string()],
        ];
        let t = table(&rows, &[false, true], Some(3));
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines,
            vec![
                "A       AMOUNT",
                "------  ------",
                "x         1.00",
                "longer  100.00",
                "------  ------",
                "TOTAL   101.00",
            ]
        );
    }

    use ledger_client::{Amount, Applied};
    use std::time::{Duration, SystemTime};

    /// 2027-01-15T08:00:00Z plus `secs`.
    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn eur(minor: i128) -> Amount {
        Amount::new(minor, 2)
    }

    fn cut() -> Applied {
        Applied {
            recorded_at: at(60),
            effective_at: at(60),
            sequence: 4,
        }
    }

    /// A balance of EUR minor units: debits, credits, balance, held debits, held credits,
    /// available.
    fn bal(account: &str, [d, c, b, hd, hc, av]: [i128; 6]) -> Balance {
        Balance {
            account: account.into(),
            currency: "EUR".into(),
            debits: eur(d),
            credits: eur(c),
            balance: eur(b),
            held_debits: eur(hd),
            held_credits: eur(hc),
            available: eur(av),
            as_of: cut(),
            last_sequence: 0,
        }
    }

    fn total([d, c, hd, hc]: [i128; 4]) -> CurrencyTotal {
        CurrencyTotal {
            currency: "EUR".into(),
            debits: eur(d),
            credits: eur(c),
            held_debits: eur(hd),
            held_credits: eur(hc),
        }
    }

    /// a:0 paid 30.25 of the 100.00 it got from w, and a pending hold of 10.00 from a:0 to w.
    fn with_hold() -> TrialBalance {
        TrialBalance {
            balances: vec![
                bal("a:0", [10000, 3025, 6975, 0, 1000, 5975]),
                bal("a:1", [3025, 0, 3025, 0, 0, 3025]),
                bal("w", [0, 10000, 10000, 1000, 0, 9000]),
            ],
            totals: vec![total([13025, 13025, 1000, 1000])],
        }
    }

    fn entry(sequence: u64, direction: Direction, amount: i128, after: i128) -> Entry {
        Entry {
            posting_id: format!("p{sequence}"),
            sequence,
            recorded_at: at(sequence),
            effective_at: at(sequence),
            direction,
            amount: eur(amount),
            balance_after: eur(after),
        }
    }

    const HEAD: &str = "as recorded at 2027-01-15T08:01:00Z, effective at 2027-01-15T08:01:00Z (journal sequence 4)";

    /// A case: its name, what was rendered, what should have been.
    type Case = (&'static str, String, String);

    fn trial_balance_cases() -> Vec<Case> {
        let mut unbalanced = with_hold();
        unbalanced.totals[0].held_credits = eur(900);
        // The ledger's largest totals (MAX_TOTAL_MINOR, 10^36 minor units), one unit apart.
        let max = 10i128.pow(36);
        let largest = TrialBalance {
            balances: vec![bal("a:0", [max, 1, max - 1, 0, 0, max - 1])],
            totals: vec![total([max, max - 1, 0, 0])],
        };
        vec![
            (
                "trial balance, csv, the ledger's largest totals, exactly",
                trial_balance_csv(&largest),
                "account,currency,debits,credits,balance,held_debits,held_credits,available
a:0,EUR,10000000000000000000000000000000000.00,0.01,9999999999999999999999999999999999.99,0.00,0.00,9999999999999999999999999999999999.99
TOTAL,EUR,10000000000000000000000000000000000.00,9999999999999999999999999999999999.99,,0.00,0.00,
"
                .into(),
            ),
            (
                "trial balance, table, the largest totals one unit apart do not balance",
                trial_balance_table(&largest, "", "default").lines().last().unwrap().into(),
                "TOTAL    EUR       10000000000000000000000000000000000.00  9999999999999999999999999999999999.99                           NOT BALANCED         0.00          0.00".into(),
            ),
            (
                "trial balance, csv",
                trial_balance_csv(&with_hold()),
                "account,currency,debits,credits,balance,held_debits,held_credits,available
a:0,EUR,100.00,30.25,69.75,0.00,10.00,59.75
a:1,EUR,30.25,0.00,30.25,0.00,0.00,30.25
w,EUR,0.00,100.00,100.00,10.00,0.00,90.00
TOTAL,EUR,130.25,130.25,,10.00,10.00,
"
                .into(),
            ),
            (
                "trial balance, table, whole ledger",
                trial_balance_table(&with_hold(), "", "default"),
                format!(
                    "Trial balance {HEAD}

ACCOUNT  CURRENCY  DEBITS  CREDITS   BALANCE  HELD_DEBITS  HELD_CREDITS  AVAILABLE
-------  --------  ------  -------  --------  -----------  ------------  ---------
a:0      EUR       100.00    30.25     69.75         0.00         10.00      59.75
a:1      EUR        30.25     0.00     30.25         0.00          0.00      30.25
w        EUR         0.00   100.00    100.00        10.00          0.00      90.00
-------  --------  ------  -------  --------  -----------  ------------  ---------
TOTAL    EUR       130.25   130.25  balanced        10.00         10.00
"
                ),
            ),
            (
                "trial balance, table, held amounts that do not balance",
                trial_balance_table(&unbalanced, "", "default"),
                format!(
                    "Trial balance {HEAD}

ACCOUNT  CURRENCY  DEBITS  CREDITS       BALANCE  HELD_DEBITS  HELD_CREDITS  AVAILABLE
-------  --------  ------  -------  ------------  -----------  ------------  ---------
a:0      EUR       100.00    30.25         69.75         0.00         10.00      59.75
a:1      EUR        30.25     0.00         30.25         0.00          0.00      30.25
w        EUR         0.00   100.00        100.00        10.00          0.00      90.00
-------  --------  ------  -------  ------------  -----------  ------------  ---------
TOTAL    EUR       130.25   130.25  NOT BALANCED        10.00          9.00
"
                ),
            ),
        ]
    }

    fn prefix_and_statement_cases() -> Vec<Case> {
        let statement = [
            entry(1, Direction::Debit, 10000, 10000),
            entry(3, Direction::Credit, 3025, 6975),
        ];
        let a0 = bal("a:0", [10000, 3025, 6975, 0, 1000, 5975]);
        vec![
            (
                "trial balance, table, a prefix (no mark)",
                trial_balance_table(
                    &TrialBalance {
                        balances: vec![bal("w", [0, 10000, 10000, 1000, 0, 9000])],
                        totals: vec![total([0, 10000, 1000, 0])],
                    },
                    "w",
                    "acme",
                ),
                format!(
                    "Trial balance of w* in ledger acme {HEAD}

ACCOUNT  CURRENCY  DEBITS  CREDITS  BALANCE  HELD_DEBITS  HELD_CREDITS  AVAILABLE
-------  --------  ------  -------  -------  -----------  ------------  ---------
w        EUR         0.00   100.00   100.00        10.00          0.00      90.00
-------  --------  ------  -------  -------  -----------  ------------  ---------
TOTAL    EUR         0.00   100.00                 10.00          0.00
"
                ),
            ),
            (
                "statement, csv",
                statement_csv(&a0, &statement),
                "sequence,posting_id,recorded_at,effective_at,debit,credit,balance_after,held_debits,held_credits,available
1,p1,2027-01-15T08:00:01Z,2027-01-15T08:00:01Z,100.00,,100.00,,,
3,p3,2027-01-15T08:00:03Z,2027-01-15T08:00:03Z,,30.25,69.75,,,
TOTAL,,,,100.00,30.25,69.75,0.00,10.00,59.75
"
                .into(),
            ),
            (
                "statement, table",
                statement_table("a:0 (EUR)", &a0, &statement),
                format!(
                    "Statement of a:0 (EUR) {HEAD}

SEQUENCE  RECORDED_AT           EFFECTIVE_AT          POSTING_ID   DEBIT  CREDIT  BALANCE  HELD_DEBITS  HELD_CREDITS  AVAILABLE
--------  --------------------  --------------------  ----------  ------  ------  -------  -----------  ------------  ---------
       1  2027-01-15T08:00:01Z  2027-01-15T08:00:01Z  p1          100.00           100.00
       3  2027-01-15T08:00:03Z  2027-01-15T08:00:03Z  p3                   30.25    69.75
--------  --------------------  --------------------  ----------  ------  ------  -------  -----------  ------------  ---------
   TOTAL                                              2 entries   100.00   30.25    69.75         0.00         10.00      59.75
"
                ),
            ),
            (
                "statement, csv, no entries yet",
                statement_csv(&bal("a:1", [0, 0, 0, 500, 0, 0]), &[]),
                "sequence,posting_id,recorded_at,effective_at,debit,credit,balance_after,held_debits,held_credits,available
TOTAL,,,,0.00,0.00,0.00,5.00,0.00,0.00
"
                .into(),
            ),
        ]
    }

    #[test]
    fn reports_render_held_and_available_amounts_in_every_format() {
        for (name, got, want) in trial_balance_cases()
            .into_iter()
            .chain(prefix_and_statement_cases())
        {
            assert_eq!(got, want, "{name}:\n{got}");
        }
    }
}
