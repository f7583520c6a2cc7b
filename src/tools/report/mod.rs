//! `ledger report`: client commands for people and spreadsheets, on one ledger (`--ledger`,
//! env `LEDGER_LEDGER`, default `default`). They call a running server
//! through `ledger-client`'s typed API (every page at one cut-off, amounts as exact
//! `ledger_client::Amount`s at the account's scale, printed exactly and compared exactly: the
//! ledger's totals reach 10^36 minor units, beyond a `Decimal`) and print an aligned table
//! (with totals), CSV with a header, or one JSON object. Every
//! balance is followed by what pending holds hold on it (held debits, held credits) and the
//! amount they leave available; the trial balance's totals add up the held amounts too.
//!
//! The reports: `trial.rs` the trial balance; `statement.rs` an account's statement at a
//! cut-off and `period.rs` its statement for a period (opening and closing balances);
//! `sheets.rs` the balance sheet and the income statement, from the rollups of the account
//! tree; `table.rs` the rendering they share; `money.rs` exact sums of amounts.

mod money;
mod period;
mod sheets;
mod statement;
mod table;
mod trial;

#[cfg(test)]
mod period_tests;
#[cfg(test)]
mod sheet_tests;
#[cfg(test)]
mod tests;

pub use period::{Order, PeriodArgs};
pub use sheets::TreeArgs;

use ledger_client::{pb, Applied, AsOf, Client, ClientOptions, RetryPolicy};
use serde_json::{json, Value};
use std::io::Write as _;
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
    /// amounts and available amount, at one cut-off; with --from, --to, --to-end or --order,
    /// its statement for a period: opening balance, the period's legs with memo and
    /// counter-accounts, closing balance.
    Statement {
        /// The account code.
        account: String,
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        period: PeriodArgs,
    },
    /// Assets, liabilities, equity and the current earnings (income − expenses) per currency,
    /// from the account tree (top segments assets, liabilities, equity, income, expenses), and
    /// the check assets = liabilities + equity + earnings, at one cut-off.
    BalanceSheet {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        tree: TreeArgs,
    },
    /// Income and expenses per currency, from the account tree, and the net income
    /// (income − expenses), at one cut-off.
    IncomeStatement {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        tree: TreeArgs,
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
    /// One JSON object (lowerCamelCase names, amounts as exact decimal strings, times in
    /// RFC 3339), its shape documented in docs/as-of.md.
    Json,
}

use crate::tools::show_system_time as show_ts;
use crate::tools::show_ts as show_proto_ts;

/// A failure a person can act on, and the exit status it ends the command with.
#[derive(Debug)]
pub struct ReportError {
    message: String,
    /// 1: a call failed or the report could not be written; 2: the command's own arguments
    /// name no report (a period that ends before it starts), or a report's own check failed
    /// (figures of the ledger that disagree: a bug, never a state of the books).
    exit: u8,
}

impl ReportError {
    fn new(message: impl Into<String>) -> ReportError {
        ReportError {
            message: message.into(),
            exit: 1,
        }
    }

    /// A mistake in the arguments, or a report's figures that fail its own check: exit 2.
    fn exit_2(message: impl Into<String>) -> ReportError {
        ReportError {
            message: message.into(),
            exit: 2,
        }
    }
}

impl std::fmt::Display for ReportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ReportError {}

fn rpc_error(e: ledger_client::Error) -> ReportError {
    ReportError::new(e.to_string())
}

/// A client with the default retry policy: a report only reads, so every retry is safe.
async fn connect(common: &Common) -> Result<Client, ReportError> {
    let options = ClientOptions {
        connect: common
            .client
            .options()
            .map_err(|e| ReportError::new(e.to_string()))?,
        retry: RetryPolicy::default(),
        coalesce: None,
        ledger: common.ledger.code(),
    };
    Client::connect(options).await.map_err(rpc_error)
}

/// The recorded cut-off asked for (`--as-of`, `--as-of-end`; `None`: now).
fn requested_recorded(common: &Common) -> Option<SystemTime> {
    common.as_of.or(common.as_of_end).map(SystemTime::from)
}

/// The effective cut-off asked for (`--effective`, `--effective-end`; `None`: the recorded).
fn requested_effective(common: &Common) -> Option<SystemTime> {
    common
        .effective
        .or(common.effective_end)
        .map(SystemTime::from)
}

fn requested(common: &Common) -> AsOf {
    AsOf {
        recorded_at: requested_recorded(common),
        effective_at: requested_effective(common),
    }
}

/// Runs a report, printing it to stdout. A failure with exit status 2 is printed here.
pub async fn run(args: ReportArgs) -> Result<ExitCode, ReportError> {
    let text = match render(args).await {
        Ok(text) => text,
        Err(e) if e.exit != 1 => {
            let _ = writeln!(std::io::stderr(), "ledger: {e}");
            return Ok(ExitCode::from(e.exit));
        }
        Err(e) => return Err(e),
    };
    super::output::print_out(&text)
        .map_err(|e| ReportError::new(format!("cannot write the report to stdout: {e}")))?;
    Ok(ExitCode::SUCCESS)
}

async fn render(args: ReportArgs) -> Result<String, ReportError> {
    match args.report {
        Report::TrialBalance {
            common,
            prefix,
            all,
        } => trial::trial_balance(&common, &prefix, all).await,
        Report::Statement {
            account,
            common,
            period,
        } if period.given() => period::statement(&common, &account, &period).await,
        Report::Statement {
            account, common, ..
        } => statement::statement(&common, &account).await,
        Report::BalanceSheet { common, tree } => sheets::balance_sheet(&common, &tree).await,
        Report::IncomeStatement { common, tree } => sheets::income_statement(&common, &tree).await,
    }
}

/// The period close a cut-off's figures fall in, if any (asked of the server).
async fn close_at(client: &Client, at: &Applied) -> Result<Option<pb::PeriodClose>, ReportError> {
    let closes = client.period_closes().await.map_err(rpc_error)?;
    Ok(closed_by(&closes, at).cloned())
}

/// A table report with, under its heading line, the period close its cut-off falls in, if any.
async fn with_close(client: &Client, at: &Applied, table: String) -> Result<String, ReportError> {
    Ok(match close_at(client, at).await? {
        Some(c) => under_heading(&table, &closed_mark(&c)),
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
fn closed_by<'a>(closes: &'a [pb::PeriodClose], at: &Applied) -> Option<&'a pb::PeriodClose> {
    let time =
        |t: &Option<prost_types::Timestamp>| t.as_ref().and_then(|t| SystemTime::try_from(*t).ok());
    closes.iter().rev().find(|c| {
        let (before, recorded) = (time(&c.effective_before), time(&c.recorded_at));
        before.is_some_and(|b| at.effective_at < b) && recorded.is_some_and(|r| r <= at.recorded_at)
    })
}

/// The line a table prints under its heading for the close its figures fall in.
fn closed_mark(c: &pb::PeriodClose) -> String {
    let digest = c.digest.as_ref().map_or(String::new(), |d| {
        format!(", digest {}:{}", d.sequence, d.root)
    });
    format!(
        "CLOSED PERIOD: effective before {}, closed at {} by {} (key {}{digest}); these figures are final",
        show_proto_ts(&c.effective_before),
        show_proto_ts(&c.recorded_at),
        c.caller,
        c.idempotency_key,
    )
}

/// A close as the JSON reports give it (`null`: the figures are in no closed period).
fn closed_json(c: Option<&pb::PeriodClose>) -> Value {
    let Some(c) = c else { return Value::Null };
    json!({
        "effectiveBefore": show_proto_ts(&c.effective_before),
        "recordedAt": show_proto_ts(&c.recorded_at),
        "caller": c.caller,
        "idempotencyKey": c.idempotency_key,
        "digest": c.digest.as_ref().map(|d| json!({"sequence": d.sequence, "root": d.root})),
    })
}

/// How a heading names a ledger: not at all for `default`, ` in ledger CODE` for another.
fn in_ledger(ledger: &str) -> String {
    if ledger == ledger_client::DEFAULT_LEDGER {
        String::new()
    } else {
        format!(" in ledger {ledger}")
    }
}

/// A heading's cut-off: `as recorded at R, effective at E (journal sequence N)`.
fn cut_off_words(a: &Applied) -> String {
    format!(
        "as recorded at {}, effective at {} (journal sequence {})",
        show_ts(a.recorded_at),
        show_ts(a.effective_at),
        a.sequence,
    )
}

/// A cut-off as the JSON reports give it.
fn applied_json(a: &Applied) -> Value {
    json!({
        "recordedAt": show_ts(a.recorded_at),
        "effectiveAt": show_ts(a.effective_at),
        "sequence": a.sequence,
    })
}
