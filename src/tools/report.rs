//! `ledger report`: client commands for people and spreadsheets. They call a running server
//! over gRPC, page through everything at one cut-off, and print an aligned table (with totals)
//! or CSV with a header.

use crate::grpc::convert::time_to_pb;
use crate::grpc::pb;
use std::fmt::Write as _;
use std::process::ExitCode;
use time::OffsetDateTime;
use tonic_types::StatusExt;

/// Entries or balances asked for per page while paging through a report (the server's limit).
pub const REPORT_PAGE_SIZE: u32 = crate::domain::limits::MAX_PAGE_SIZE;

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

use crate::tools::show_ts;

/// A failure a person can act on.
#[derive(Debug)]
pub struct ReportError(String);

impl std::fmt::Display for ReportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ReportError {}

fn rpc_error(s: tonic::Status) -> ReportError {
    let reason = s
        .get_details_error_info()
        .map(|i| format!(" ({})", i.reason))
        .unwrap_or_default();
    ReportError(format!("{:?}{reason}: {}", s.code(), s.message()))
}

async fn connect(common: &Common) -> Result<ledger_client::RawClient, ReportError> {
    common
        .client
        .connect()
        .await
        .map_err(|e| ReportError(e.to_string()))
}

fn requested(common: &Common) -> Option<pb::AsOf> {
    (common.as_of.is_some() || common.effective.is_some()).then(|| pb::AsOf {
        recorded_at: common.as_of.map(time_to_pb),
        effective_at: common.effective.map(time_to_pb),
    })
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
    let mut client = connect(common).await?;
    let mut balances = Vec::new();
    let mut token = String::new();
    let totals = loop {
        let page = client
            .list_balances(pb::ListBalancesRequest {
                prefix: prefix.to_owned(),
                as_of: requested(common),
                page_size: REPORT_PAGE_SIZE,
                page_token: token,
            })
            .await
            .map_err(rpc_error)?
            .into_inner();
        balances.extend(page.balances);
        if page.next_page_token.is_empty() {
            break page.totals;
        }
        token = page.next_page_token;
    };
    let applied = balances.first().and_then(|b| b.as_of);
    let sequence = balances.first().map_or(0, |b| b.as_of_sequence);
    Ok(match common.format {
        Format::Csv => {
            let mut out = String::from("account,currency,debits,credits,balance\n");
            for b in &balances {
                let _ = writeln!(
                    out,
                    "{},{},{},{},{}",
                    b.account, b.currency, b.debits, b.credits, b.balance
                );
            }
            for t in &totals {
                let _ = writeln!(out, "TOTAL,{},{},{},", t.currency, t.debits, t.credits);
            }
            out
        }
        Format::Table => {
            let mut out = String::new();
            match &applied {
                Some(a) => {
                    let _ = writeln!(
                        out,
                        "Trial balance{} as recorded at {}, effective at {} (journal sequence {sequence})\n",
                        if prefix.is_empty() { String::new() } else { format!(" of {prefix}*") },
                        show_ts(&a.recorded_at),
                        show_ts(&a.effective_at),
                    );
                }
                None => {
                    let _ = writeln!(
                        out,
                        "Trial balance{}: no account has activity at this cut-off",
                        if prefix.is_empty() {
                            String::new()
                        } else {
                            format!(" of {prefix}*")
                        }
                    );
                    return Ok(out);
                }
            }
            let mut rows: Vec<[String; 5]> = vec![[
                "ACCOUNT".into(),
                "CURRENCY".into(),
                "DEBITS".into(),
                "CREDITS".into(),
                "BALANCE".into(),
            ]];
            for b in &balances {
                rows.push([
                    b.account.clone(),
                    b.currency.clone(),
                    b.debits.clone(),
                    b.credits.clone(),
                    b.balance.clone(),
                ]);
            }
            let body = rows.len();
            for t in &totals {
                // Only a whole ledger must balance; a prefix selects part of it.
                let mark = match (prefix.is_empty(), t.debits == t.credits) {
                    (false, _) => "",
                    (true, true) => "balanced",
                    (true, false) => "NOT BALANCED",
                };
                rows.push([
                    "TOTAL".into(),
                    t.currency.clone(),
                    t.debits.clone(),
                    t.credits.clone(),
                    mark.into(),
                ]);
            }
            out.push_str(&table(&rows, &[false, false, true, true, true], Some(body)));
            out
        }
    })
}

/// The statement, rendered. The cut-off is resolved once (by GetBalance) and the statement
/// asked at exactly that cut-off, so its closing balance is the balance printed with it.
pub async fn statement(common: &Common, account: &str) -> Result<String, ReportError> {
    let mut client = connect(common).await?;
    let balance = client
        .get_balance(pb::GetBalanceRequest {
            account: account.to_owned(),
            as_of: requested(common),
        })
        .await
        .map_err(rpc_error)?
        .into_inner();
    let mut entries = Vec::new();
    let mut token = String::new();
    loop {
        let page = client
            .list_entries(pb::ListEntriesRequest {
                account: account.to_owned(),
                as_of: balance.as_of,
                page_size: REPORT_PAGE_SIZE,
                page_token: token,
            })
            .await
            .map_err(rpc_error)?
            .into_inner();
        entries.extend(page.entries);
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let closing = entries
        .last()
        .map(|e| e.balance_after.as_str())
        .unwrap_or(balance.balance.as_str());
    if closing != balance.balance {
        return Err(ReportError(format!(
            "the statement of {account} closes at {closing} but its balance at the same cut-off is {}; the ledger is inconsistent",
            balance.balance
        )));
    }
    let debit = pb::Direction::Debit as i32;
    let applied = balance.as_of.unwrap_or_default();
    Ok(match common.format {
        Format::Csv => {
            let mut out = String::from(
                "sequence,posting_id,recorded_at,effective_at,debit,credit,balance_after\n",
            );
            for e in &entries {
                let (d, c) = if e.direction == debit {
                    (e.amount.as_str(), "")
                } else {
                    ("", e.amount.as_str())
                };
                let _ = writeln!(
                    out,
                    "{},{},{},{},{d},{c},{}",
                    e.sequence,
                    e.posting_id,
                    show_ts(&e.recorded_at),
                    show_ts(&e.effective_at),
                    e.balance_after
                );
            }
            out
        }
        Format::Table => {
            let mut out = String::new();
            let _ = writeln!(
                out,
                "Statement of {account} ({}) as recorded at {}, effective at {} (journal sequence {})\n",
                balance.currency,
                show_ts(&applied.recorded_at),
                show_ts(&applied.effective_at),
                balance.as_of_sequence,
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
            for e in &entries {
                let (d, c) = if e.direction == debit {
                    (e.amount.clone(), String::new())
                } else {
                    (String::new(), e.amount.clone())
                };
                rows.push([
                    e.sequence.to_string(),
                    show_ts(&e.recorded_at),
                    show_ts(&e.effective_at),
                    e.posting_id.clone(),
                    d,
                    c,
                    e.balance_after.clone(),
                ]);
            }
            let body = rows.len();
            rows.push([
                "TOTAL".into(),
                String::new(),
                String::new(),
                match entries.len() {
                    1 => "1 entry".to_string(),
                    n => format!("{n} entries"),
                },
                balance.debits.clone(),
                balance.credits.clone(),
                balance.balance.clone(),
            ]);
            out.push_str(&table(
                &rows,
                &[true, false, false, false, true, true, true],
                Some(body),
            ));
            out
        }
    })
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
