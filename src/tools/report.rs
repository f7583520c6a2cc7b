//! `ledger report`: client commands for people and spreadsheets. They call a running server
//! through `ledger-client`'s typed API (every page at one cut-off, amounts as decimals at the
//! account's scale) and print an aligned table (with totals) or CSV with a header.

use ledger_client::{
    AsOf, Balance, Client, ClientOptions, Direction, Entry, RetryPolicy, TrialBalance,
};
use std::fmt::Write as _;
use std::process::ExitCode;
use time::OffsetDateTime;

// Pages: `ledger-client` asks for PAGE_SIZE (the server's largest) items per page.

#[derive(clap::Args, Debug, Clone)]
pub struct ReportArgs {
    #[command(subcommand)]
    pub report: Report,
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum Report {
    /// Balances of every account with activity (optionally by code prefix) and per-currency
    /// totals of debits and credits, at one cut-off.
    TrialBalance {
        #[command(flatten)]
        common: Common,
        /// Only accounts whose code starts with this.
        #[arg(long, default_value = "")]
        prefix: String,
    },
    /// An account's entries in journal order with the running balance, at one cut-off.
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
    /// Recorded cut-off (RFC 3339 or a date): what the ledger knew at that time. Default: now.
    #[arg(long, value_parser = crate::tools::parse_time)]
    pub as_of: Option<OffsetDateTime>,
    /// Effective cut-off (RFC 3339 or a date): what had happened by that time. Default: the
    /// recorded cut-off.
    #[arg(long, value_parser = crate::tools::parse_time)]
    pub effective: Option<OffsetDateTime>,
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
    };
    Client::connect(options).await.map_err(rpc_error)
}

fn requested(common: &Common) -> AsOf {
    AsOf {
        recorded_at: common.as_of.map(std::time::SystemTime::from),
        effective_at: common.effective.map(std::time::SystemTime::from),
    }
}

/// Runs a report, printing it to stdout.
pub async fn run(args: ReportArgs) -> Result<ExitCode, ReportError> {
    let text = match args.report {
        Report::TrialBalance { common, prefix } => trial_balance(&common, &prefix).await?,
        Report::Statement { account, common } => statement(&common, &account).await?,
    };
    crate::cli::print_out(&text)
        .map_err(|e| ReportError(format!("cannot write the report to stdout: {e}")))?;
    Ok(ExitCode::SUCCESS)
}

/// The trial balance, rendered.
pub async fn trial_balance(common: &Common, prefix: &str) -> Result<String, ReportError> {
    let client = connect(common).await?;
    let trial = client
        .trial_balance(prefix, requested(common))
        .await
        .map_err(rpc_error)?;
    Ok(match common.format {
        Format::Csv => trial_balance_csv(&trial),
        Format::Table => trial_balance_table(&trial, prefix),
    })
}

fn trial_balance_csv(trial: &TrialBalance) -> String {
    let mut out = String::from("account,currency,debits,credits,balance\n");
    for b in &trial.balances {
        let _ = writeln!(
            out,
            "{},{},{},{},{}",
            b.account, b.currency, b.debits, b.credits, b.balance
        );
    }
    for t in &trial.totals {
        let _ = writeln!(out, "TOTAL,{},{},{},", t.currency, t.debits, t.credits);
    }
    out
}

fn trial_balance_table(trial: &TrialBalance, prefix: &str) -> String {
    let of = if prefix.is_empty() {
        String::new()
    } else {
        format!(" of {prefix}*")
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
    let mut rows: Vec<[String; 5]> = vec![[
        "ACCOUNT".into(),
        "CURRENCY".into(),
        "DEBITS".into(),
        "CREDITS".into(),
        "BALANCE".into(),
    ]];
    rows.extend(trial.balances.iter().map(|b| {
        [
            b.account.clone(),
            b.currency.clone(),
            b.debits.to_string(),
            b.credits.to_string(),
            b.balance.to_string(),
        ]
    }));
    let body = rows.len();
    for t in &trial.totals {
        // Only a whole ledger must balance; a prefix selects part of it.
        let mark = match (prefix.is_empty(), t.debits == t.credits) {
            (false, _) => "",
            (true, true) => "balanced",
            (true, false) => "NOT BALANCED",
        };
        rows.push([
            "TOTAL".into(),
            t.currency.clone(),
            t.debits.to_string(),
            t.credits.to_string(),
            mark.into(),
        ]);
    }
    out.push_str(&table(&rows, &[false, false, true, true, true], Some(body)));
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
    let closing = entries.last().map_or(balance.balance, |e| e.balance_after);
    if closing != balance.balance {
        return Err(ReportError(format!(
            "the statement of {account} closes at {closing} but its balance at the same cut-off is {}; the ledger is inconsistent",
            balance.balance
        )));
    }
    Ok(match common.format {
        Format::Csv => statement_csv(&entries),
        Format::Table => statement_table(account, &balance, &entries),
    })
}

/// An entry's amount in the debit or the credit column.
fn sides(e: &Entry) -> (String, String) {
    match e.direction {
        Direction::Debit => (e.amount.to_string(), String::new()),
        Direction::Credit => (String::new(), e.amount.to_string()),
    }
}

fn statement_csv(entries: &[Entry]) -> String {
    let mut out =
        String::from("sequence,posting_id,recorded_at,effective_at,debit,credit,balance_after\n");
    for e in entries {
        let (d, c) = sides(e);
        let _ = writeln!(
            out,
            "{},{},{},{},{d},{c},{}",
            e.sequence,
            e.posting_id,
            show_ts(e.recorded_at),
            show_ts(e.effective_at),
            e.balance_after
        );
    }
    out
}

fn statement_table(account: &str, balance: &Balance, entries: &[Entry]) -> String {
    let applied = balance.as_of;
    let mut out = format!(
        "Statement of {account} ({}) as recorded at {}, effective at {} (journal sequence {})\n\n",
        balance.currency,
        show_ts(applied.recorded_at),
        show_ts(applied.effective_at),
        applied.sequence,
    );
    let mut rows: Vec<[String; 7]> = vec![[
        "SEQUENCE".into(),
        "RECORDED_AT".into(),
        "EFFECTIVE_AT".into(),
        "POSTING_ID".into(),
        "DEBIT".into(),
        "CREDIT".into(),
        "BALANCE".into(),
    ]];
    rows.extend(entries.iter().map(|e| {
        let (d, c) = sides(e);
        [
            e.sequence.to_string(),
            show_ts(e.recorded_at),
            show_ts(e.effective_at),
            e.posting_id.clone(),
            d,
            c,
            e.balance_after.to_string(),
        ]
    }));
    let body = rows.len();
    rows.push([
        "TOTAL".into(),
        String::new(),
        String::new(),
        match entries.len() {
            1 => "1 entry".to_string(),
            n => format!("{n} entries"),
        },
        balance.debits.to_string(),
        balance.credits.to_string(),
        balance.balance.to_string(),
    ]);
    let right = [true, false, false, false, true, true, true];
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
}
