//! `ledger reconcile`: an external statement (a bank's CSV export) against an account's
//! postings in the ledger: the lines matched, those unmatched on each side, the totals and
//! their difference (docs/reconcile.md). Exit 0 when every line is matched and the totals
//! agree, 1 when anything is unmatched, 2 when it cannot run.
//!
//! `statement.rs` reads the CSV, `book.rs` makes the book's lines of the postings,
//! `matching.rs` matches them (pure), `render.rs` prints the outcome; here are the command's
//! options, its limits and the calls to the ledger.

mod book;
mod matching;
mod render;
mod statement;

use ledger_client::{Account, Client, ClientOptions, PostingFilter, RetryPolicy, PAGE_SIZE};
use matching::BookLine;
use statement::{Columns, RawLine};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::SystemTime;
use time::{Date, OffsetDateTime};

/// Lines a statement may have, at most (beyond: refused, naming the line; split it).
pub const MAX_STATEMENT_LINES: usize = 1_000_000;
/// Bytes a line of a statement may have, at most (refused before it is read whole).
pub const MAX_LINE_BYTES: usize = 16_384;
/// Book lines (legs on the account in the period) a reconciliation takes, at most.
pub const MAX_BOOK_LINES: usize = 1_000_000;
/// The largest `--date-tolerance`, in days.
pub const MAX_DATE_TOLERANCE_DAYS: u32 = 366;
/// A progress line on stderr every this many lines read (statement or book).
pub const PROGRESS_EVERY: usize = 10_000;

#[derive(clap::Args, Debug, Clone)]
#[command(after_help = AFTER_HELP)]
pub struct ReconcileArgs {
    #[command(flatten)]
    pub client: crate::tools::ClientArgs,
    #[command(flatten)]
    pub ledger: crate::tools::LedgerArg,
    /// The account whose postings the statement is matched against.
    #[arg(long)]
    pub account: String,
    /// The statement: a CSV file with a header line (`-`: standard input), in UTF-8, at most
    /// 1,000,000 lines (MAX_STATEMENT_LINES) of at most 16,384 bytes (MAX_LINE_BYTES).
    #[arg(long, value_name = "FILE")]
    pub statement: PathBuf,
    /// The column of each line's date: YYYY-MM-DD, or an RFC 3339 time (its day in UTC).
    /// Column names are compared without case.
    #[arg(long, default_value = "date", value_name = "NAME")]
    pub date_column: String,
    /// The column of each line's amount: a decimal (`-12.50`, `+3`), at most the account's
    /// scale in decimals. Positive is money INTO the account in its normal direction (it
    /// raises its balance: a debit on a debit-normal account such as assets:bank, a credit on
    /// a credit-normal one); negative lowers it. See --negate.
    #[arg(long, default_value = "amount", value_name = "NAME")]
    pub amount_column: String,
    /// The column of each line's reference (a line's may be empty); empty: the statement has
    /// none, every line is matched by amount and date.
    #[arg(long, default_value = "reference", value_name = "NAME")]
    pub reference_column: String,
    /// The postings' metadata key whose value is their reference.
    #[arg(long, default_value = "reference", value_name = "KEY")]
    pub reference_key: String,
    /// Flip the statement's signs: for a statement written from the other side (a customer's
    /// account at the bank kept as a liability here, say).
    #[arg(long)]
    pub negate: bool,
    /// Lines of the same amount match when their dates are at most this many days apart
    /// (0: the same day; at most 366, MAX_DATE_TOLERANCE_DAYS). References match whatever
    /// the dates.
    #[arg(long, default_value_t = 0, value_name = "DAYS", value_parser = parse_tolerance)]
    pub date_tolerance: u32,
    /// The period's first day, included (YYYY-MM-DD, UTC; on the effective clock, as `ledger
    /// report statement --from` takes a date): default the statement's first date. Every
    /// statement line must fall in the period.
    #[arg(long, value_name = "YYYY-MM-DD", value_parser = parse_day_arg)]
    pub from: Option<Date>,
    /// The day that ends the period, excluded (YYYY-MM-DD, UTC: `--to 2025-04-01` ends with
    /// March, as for `ledger report statement`). Default: the day after the statement's last
    /// date.
    #[arg(long, value_name = "YYYY-MM-DD", value_parser = parse_day_arg)]
    pub to: Option<Date>,
    /// The period's last day, included: `--to-end 2025-03-31` is `--to 2025-04-01`.
    #[arg(long, value_name = "YYYY-MM-DD", value_parser = parse_day_arg, conflicts_with = "to")]
    pub to_end: Option<Date>,
    /// Recorded cut-off (RFC 3339 or a date, which is its start): the postings as the ledger
    /// knew them then. Default: now.
    #[arg(long, value_parser = crate::tools::parse_time)]
    pub as_of: Option<OffsetDateTime>,
    /// The statement's field separator (one ASCII character; `;` for many European banks).
    #[arg(long, default_value = ",", value_name = "CHAR", value_parser = parse_delimiter)]
    pub delimiter: u8,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// What `ledger reconcile --help` ends with.
const AFTER_HELP: &str =
    "Signs: a positive amount is money INTO the account in its normal direction \
(it raises the balance: a debit on a debit-normal account such as assets:bank, a credit on a \
credit-normal one); negative lowers it; --negate flips the statement's. Lines match by \
reference (the same amount required; another amount is a mismatch), then by amount and date \
(--date-tolerance). Exit 0: every line matched and the totals agree; 1: anything unmatched or \
mismatched; 2: it could not run (the file, a line, the account, the server). \
docs/reconcile.md has the rules and an example.";

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Sections of aligned columns, the totals and the result.
    Table,
    /// One row per line with its status, then the totals' rows.
    Csv,
    /// One JSON object.
    Json,
}

fn parse_tolerance(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(d) if d <= MAX_DATE_TOLERANCE_DAYS => Ok(d),
        _ => Err(format!(
            "{s:?} is not a number of days from 0 to {MAX_DATE_TOLERANCE_DAYS} (MAX_DATE_TOLERANCE_DAYS)"
        )),
    }
}

fn parse_day_arg(s: &str) -> Result<Date, String> {
    let day = time::macros::format_description!("[year]-[month]-[day]");
    Date::parse(s, &day).map_err(|_| format!("{s:?} is not a day: give YYYY-MM-DD"))
}

fn parse_delimiter(s: &str) -> Result<u8, String> {
    match s.as_bytes() {
        [b] if b.is_ascii() && *b != b'"' && *b != b'\n' => Ok(*b),
        _ => Err(format!(
            "{s:?} is not one ASCII character (other than a quote)"
        )),
    }
}

/// The book's period, in days (UTC), both included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Period {
    pub first: Date,
    pub last: Date,
}

impl Period {
    /// The effective range of the book side: from the first day's start to the start of the
    /// day after the last.
    fn range(&self) -> Result<(SystemTime, SystemTime), String> {
        let end = self
            .last
            .next_day()
            .ok_or("--to is the last day a time can name")?;
        Ok((
            self.first.midnight().assume_utc().into(),
            end.midnight().assume_utc().into(),
        ))
    }
}

/// A reason it could not run (exit 2).
#[derive(Debug)]
pub struct ReconcileError(pub String);

impl From<String> for ReconcileError {
    fn from(s: String) -> ReconcileError {
        ReconcileError(s)
    }
}

impl From<ledger_client::Error> for ReconcileError {
    fn from(e: ledger_client::Error) -> ReconcileError {
        ReconcileError(e.to_string())
    }
}

/// Runs `ledger reconcile`: prints the outcome to stdout; 0 reconciled, 1 not, 2 could not
/// run (saying why on stderr).
pub async fn run(args: ReconcileArgs) -> ExitCode {
    match reconcile(&args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(ReconcileError(e)) => {
            let _ = writeln!(std::io::stderr(), "ledger reconcile: {e}");
            ExitCode::from(2)
        }
    }
}

/// A progress line on stderr.
fn progress(text: &str) {
    let _ = writeln!(std::io::stderr(), "ledger reconcile: {text}");
}

/// Reads, fetches, matches and prints; whether it reconciled.
async fn reconcile(args: &ReconcileArgs) -> Result<bool, ReconcileError> {
    let name = args.statement.display().to_string();
    let columns = Columns {
        date: args.date_column.clone(),
        amount: args.amount_column.clone(),
        reference: Some(args.reference_column.clone()).filter(|r| !r.is_empty()),
        delimiter: args.delimiter,
    };
    let raw = statement::read(&args.statement, &columns, |n| {
        progress(&format!("{n} lines of {name} read"))
    })?;
    let last = match (args.to, args.to_end) {
        (Some(to), _) => Some(
            to.previous_day()
                .ok_or_else(|| ReconcileError("--to is the first day a date can name".into()))?,
        ),
        (None, end) => end,
    };
    let period = period(&name, args.from, last, &raw)?;
    let client = connect(args).await?;
    let account = client.account(&args.account).await?;
    let lines = statement::at_scale(&name, raw, account.scale, args.negate, &account.code)?;
    let book = fetch_book(&client, &account, period, args.as_of, &args.reference_key).await?;
    if lines.len() + book.len() >= PROGRESS_EVERY {
        progress(&format!(
            "matching {} statement lines against {} book lines",
            lines.len(),
            book.len()
        ));
    }
    let outcome = matching::reconcile(&lines, &book, args.date_tolerance);
    let report = render::Report {
        account: &account,
        ledger: args.ledger.code(),
        statement: name,
        period,
        as_of: args.as_of,
        tolerance: args.date_tolerance,
        negated: args.negate,
        lines: &lines,
        book: &book,
        outcome: &outcome,
    };
    let text = render::render(args.format, &report);
    crate::tools::output::print_out(&text)
        .map_err(|e| ReconcileError(format!("cannot write to stdout: {e}")))?;
    Ok(outcome.reconciled())
}

/// The period: from `first` to `last`, each by default the statement's first or last date;
/// every statement line must fall in it.
fn period(
    name: &str,
    first: Option<Date>,
    last: Option<Date>,
    raw: &[RawLine],
) -> Result<Period, String> {
    let (Some(first), Some(last)) = (
        first.or(raw.iter().map(|r| r.day).min()),
        last.or(raw.iter().map(|r| r.day).max()),
    ) else {
        return Err(format!(
            "{name} has no lines after its header: give --from and --to (or --to-end) to list the book's lines of a period"
        ));
    };
    if first > last {
        return Err(format!(
            "the period is empty: it starts on {first} (--from) after its last day {last} (--to excluded, --to-end included)"
        ));
    }
    if let Some(r) = raw.iter().find(|r| r.day < first || r.day > last) {
        return Err(format!(
            "{name} line {}: date {} is outside the period {first} to {last} (both included; --from, --to, --to-end); give a period that holds every line, or leave them out to use the statement's first and last dates",
            r.line, r.day
        ));
    }
    Ok(Period { first, last })
}

/// A client with the default retry policy: reconciling only reads, so every retry is safe.
async fn connect(args: &ReconcileArgs) -> Result<Client, ReconcileError> {
    let options = ClientOptions {
        connect: args
            .client
            .options()
            .map_err(|e| ReconcileError(e.to_string()))?,
        retry: RetryPolicy::default(),
        coalesce: None,
        ledger: args.ledger.code(),
    };
    Ok(Client::connect(options).await?)
}

/// The book lines of the account's postings effective in the period and recorded by the
/// cut-off, page by page, at most [`MAX_BOOK_LINES`].
async fn fetch_book(
    client: &Client,
    account: &Account,
    period: Period,
    as_of: Option<OffsetDateTime>,
    reference_key: &str,
) -> Result<Vec<BookLine>, ReconcileError> {
    let (start, end) = period.range()?;
    // A cut-off includes what was recorded at it; the filter's end is exclusive (times are
    // kept to the microsecond).
    let recorded_end = as_of.map(|t| SystemTime::from(t + time::Duration::microseconds(1)));
    let filter = PostingFilter::new()
        .account(account.code.clone())
        .effective(Some(start), Some(end))
        .recorded(None, recorded_end);
    let (mut book, mut token, mut shown) = (Vec::new(), String::new(), 0);
    loop {
        let page = client.list_postings(&filter, PAGE_SIZE, &token).await?;
        for p in &page.postings {
            book::lines_of(p, account, reference_key, &mut book)?;
        }
        if book.len() > MAX_BOOK_LINES {
            return Err(ReconcileError(format!(
                "account {} has more than {MAX_BOOK_LINES} legs in the period (MAX_BOOK_LINES); reconcile a shorter one (--from, --to)",
                account.code
            )));
        }
        if book.len() / PROGRESS_EVERY > shown {
            shown = book.len() / PROGRESS_EVERY;
            progress(&format!(
                "{} book lines of {} read",
                book.len(),
                account.code
            ));
        }
        if page.next_page_token.is_empty() {
            return Ok(book);
        }
        token = page.next_page_token;
    }
}
