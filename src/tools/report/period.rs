//! An account's statement for a period of business time: the opening balance (legs effective
//! before `--from`), one line per leg on the account of the postings that moved money in the
//! period (effective in [from, to), recorded by the cut-off) with its memo and
//! counter-accounts and the running balance, and the closing balance (legs effective before
//! `--to`, or by the effective cut-off), all at one recorded cut-off: the one the first answer
//! applied. The last running balance must be the closing balance.

use super::money::{add, sub, sum, zero};
use super::statement::entries_word;
use super::table::{csv_line, heading, json_text, one_line, table};
use super::{
    applied_json, close_at, closed_json, connect, in_ledger, not_yet, requested_effective,
    requested_recorded, rpc_error, show_ts, under_heading, with_close, Common, Format, ReportError,
};
use ledger_client::{
    Amount, Applied, AsOf, Client, Direction, NormalBalance, Posting, PostingFilter, PostingKind,
};
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};
use time::OffsetDateTime;

/// The ledger's precision: its times are microseconds.
const MICROSECOND: Duration = Duration::from_micros(1);

/// The period of a statement, on the effective clock.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct PeriodArgs {
    /// The period's first effective instant, included (RFC 3339, or a date alone: the start of
    /// that day, UTC). The opening balance counts the legs effective before it. Default: the
    /// beginning (an opening balance of zero).
    #[arg(long, value_parser = crate::tools::parse_time)]
    pub from: Option<OffsetDateTime>,
    /// The effective instant that ends the period, excluded (RFC 3339, or a date alone: the
    /// start of that day, UTC, so `--to 2027-02-01` ends with January). The closing balance
    /// counts the legs effective before it. Default: the effective cut-off, included.
    #[arg(long, value_parser = crate::tools::parse_time, conflicts_with_all = ["effective", "effective_end"])]
    pub to: Option<OffsetDateTime>,
    /// The period ends with this day, its last instant included (UTC): `--to-end 2027-01-31`
    /// is `--to 2027-02-01`.
    #[arg(long, value_parser = parse_day_after, value_name = "YYYY-MM-DD", conflicts_with_all = ["to", "effective", "effective_end"])]
    pub to_end: Option<OffsetDateTime>,
    /// The lines' order: `journal` (by sequence) or `effective` (by effective time, then
    /// sequence); the running balance follows it, from the opening balance.
    #[arg(long, value_enum)]
    pub order: Option<Order>,
}

impl PeriodArgs {
    /// Whether the statement is one for a period (else it is the statement at a cut-off).
    pub fn given(&self) -> bool {
        self.from.is_some() || self.to.is_some() || self.to_end.is_some() || self.order.is_some()
    }
}

/// The order of a period statement's lines.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Journal order: by sequence, as the ledger recorded them.
    #[default]
    Journal,
    /// Business time: by effective time, then sequence.
    Effective,
}

/// `--to-end DAY`: the instant after the day's last one (the next day's start), excluded.
fn parse_day_after(s: &str) -> Result<OffsetDateTime, String> {
    crate::tools::parse_day_end(s).map(|t| t + MICROSECOND)
}

/// A time from the command line to the ledger's microsecond.
fn micros(t: OffsetDateTime) -> SystemTime {
    SystemTime::from(
        t.replace_nanosecond(t.nanosecond() / 1000 * 1000)
            .unwrap_or(t),
    )
}

/// One line: a leg on the account, and the balance after its whole posting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Line {
    pub sequence: u64,
    pub posting_id: String,
    pub kind: PostingKind,
    pub recorded_at: SystemTime,
    pub effective_at: SystemTime,
    pub direction: Direction,
    pub amount: Amount,
    pub balance: Amount,
    /// The accounts of the posting's other legs, in leg order, each once.
    pub counter: Vec<String>,
    pub memo: String,
}

/// A statement for a period, every figure at one cut-off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct PeriodStatement {
    pub ledger: String,
    pub account: String,
    pub currency: String,
    /// The cut-off of the closing balance: the recorded one of every figure, and the closing
    /// effective time.
    pub at: Applied,
    /// The period's first instant (`None`: the beginning).
    pub from: Option<SystemTime>,
    /// The instant that ends it, excluded (`None`: the cut-off's effective time, included).
    pub to: Option<SystemTime>,
    pub order: Order,
    pub opening: Amount,
    pub closing: Amount,
    pub lines: Vec<Line>,
}

/// Whether a posting's legs moved money: a plain posting, a capture (what it captures) and a
/// void (of a posting that moved money). A hold's legs are held; a release (a void of a hold)
/// and an expiry move nothing.
pub(super) fn moves(kind: PostingKind) -> bool {
    match kind {
        PostingKind::Posting | PostingKind::Capture | PostingKind::Void => true,
        PostingKind::Hold | PostingKind::Release | PostingKind::Expiry => false,
    }
}

/// What the statement keeps of a listing: postings that moved money, recorded by `at`,
/// effective in [from, end). The server's filter, checked again: a server before the filters
/// answers every posting of the account.
pub(super) fn kept(p: &Posting, at: &Applied, from: Option<SystemTime>, end: SystemTime) -> bool {
    moves(p.kind)
        && p.recorded_at <= at.recorded_at
        && from.is_none_or(|f| p.effective_at >= f)
        && p.effective_at < end
}

/// The lines of `postings` on `account` in `order`, the running balance from `opening` in the
/// account's `normal` direction (each line shows the balance after its whole posting).
pub(super) fn lines(
    account: &str,
    normal: NormalBalance,
    opening: Amount,
    mut postings: Vec<Posting>,
    order: Order,
) -> Result<Vec<Line>, ReportError> {
    match order {
        Order::Journal => postings.sort_by_key(|p| p.sequence),
        Order::Effective => postings.sort_by_key(|p| (p.effective_at, p.sequence)),
    }
    let mut running = opening;
    let mut out = Vec::new();
    for p in postings {
        let counter = p.legs.iter().filter(|l| l.account != account).fold(
            Vec::<String>::new(),
            |mut seen, l| {
                if !seen.contains(&l.account) {
                    seen.push(l.account.clone());
                }
                seen
            },
        );
        let own: Vec<_> = p.legs.iter().filter(|l| l.account == account).collect();
        for l in &own {
            running = match (l.direction, normal) {
                (Direction::Debit, NormalBalance::Debit)
                | (Direction::Credit, NormalBalance::Credit) => add(running, l.amount)?,
                _ => sub(running, l.amount)?,
            };
        }
        out.extend(own.into_iter().map(|l| Line {
            sequence: p.sequence,
            posting_id: p.posting_id.clone(),
            kind: p.kind,
            recorded_at: p.recorded_at,
            effective_at: p.effective_at,
            direction: l.direction,
            amount: l.amount,
            balance: running,
            counter: counter.clone(),
            memo: p.memo.clone(),
        }));
    }
    Ok(out)
}

impl PeriodStatement {
    /// The last running balance must be the closing balance the ledger answered: anything else
    /// is a bug (of the ledger or of this report), never a state of the books.
    pub(super) fn check(&self) -> Result<(), ReportError> {
        let last = self.lines.last().map_or(self.opening, |l| l.balance);
        if last == self.closing {
            return Ok(());
        }
        Err(ReportError::exit_2(format!(
            "the statement of {} runs from its opening balance {} to {last}, but its closing balance at the same cut-off is {}; the ledger's answers disagree (a bug: report it)",
            self.account, self.opening, self.closing
        )))
    }

    /// The period's debits and credits (of its lines), exactly.
    fn totals(&self) -> Result<(Amount, Amount), ReportError> {
        let scale = self.closing.scale();
        let of = |d: Direction| {
            sum(
                self.lines
                    .iter()
                    .filter(|l| l.direction == d)
                    .map(|l| l.amount),
                scale,
            )
        };
        Ok((of(Direction::Debit)?, of(Direction::Credit)?))
    }
}

/// The period asked: its first instant and the instant that ends it (`--to` or `--to-end`),
/// to the microsecond; one that ends before it starts is a mistake in the arguments.
fn asked(period: &PeriodArgs) -> Result<(Option<SystemTime>, Option<SystemTime>), ReportError> {
    let from = period.from.map(micros);
    let to = period.to.or(period.to_end).map(micros);
    match (from, to) {
        (Some(f), Some(t)) if t <= f => Err(ReportError::exit_2(format!(
            "the period ends at {} (excluded), not after it starts at {}: give a --to after --from",
            show_ts(t),
            show_ts(f)
        ))),
        _ => Ok((from, to)),
    }
}

/// The statement for a period, rendered.
pub(super) async fn statement(
    common: &Common,
    account: &str,
    period: &PeriodArgs,
) -> Result<String, ReportError> {
    let (from, to) = asked(period)?;
    let client = connect(common).await?;
    // The first answer fixes the cut-off: every other read is at its recorded time.
    let closing = client
        .balance(
            account,
            AsOf {
                recorded_at: requested_recorded(common),
                effective_at: to.map(|t| t - MICROSECOND).or(requested_effective(common)),
            },
        )
        .await
        .map_err(rpc_error)?;
    let at = closing.as_of;
    let end = to.unwrap_or(at.effective_at + MICROSECOND);
    if let Some(f) = from.filter(|f| end <= *f) {
        return Err(ReportError::exit_2(format!(
            "the period starts at {} (--from), after its end, the effective cut-off {}: give an --effective or --to after it",
            show_ts(f),
            show_ts(at.effective_at)
        )));
    }
    let opening = match from {
        Some(f) => {
            let cut = AsOf {
                recorded_at: Some(at.recorded_at),
                effective_at: Some(f - MICROSECOND),
            };
            let b = client.balance(account, cut).await.map_err(rpc_error)?;
            b.balance
        }
        None => zero(closing.balance.scale()),
    };
    let filter = PostingFilter::new()
        .account(account)
        .effective(from, Some(end))
        .recorded(None, Some(at.recorded_at + MICROSECOND));
    let mut postings = client.postings(&filter).await.map_err(rpc_error)?;
    postings.retain(|p| kept(p, &at, from, end));
    let acct = client.account(account).await.map_err(rpc_error)?;
    let order = period.order.unwrap_or_default();
    let s = PeriodStatement {
        ledger: common.ledger.code(),
        account: account.to_owned(),
        currency: closing.currency.clone(),
        lines: lines(account, acct.normal_balance, opening, postings, order)?,
        at,
        from,
        to,
        order,
        opening,
        closing: closing.balance,
    };
    s.check()?;
    render(&client, common.format, &s, acct.created_at).await
}

/// The statement in `format`, with what a table or JSON says of an account created after the
/// cut-off and of the close its figures fall in.
async fn render(
    client: &Client,
    format: Format,
    s: &PeriodStatement,
    created: SystemTime,
) -> Result<String, ReportError> {
    let early = not_yet(&s.account, created, &s.at);
    Ok(match format {
        Format::Csv => period_csv(s)?,
        Format::Table => {
            let mut table = period_table(s)?;
            if let Some(line) = early {
                table = under_heading(&table, &line);
            }
            with_close(client, &s.at, table).await?
        }
        Format::Json => {
            let close = close_at(client, &s.at).await?;
            let mut v = period_json(s)?;
            v["accountCreatedAt"] = show_ts(created).into();
            v["notYetCreated"] = early.is_some().into();
            v["closedPeriod"] = closed_json(close.as_ref());
            json_text(&v)
        }
    })
}

/// How a line names its posting's kind.
fn kind_word(kind: PostingKind) -> &'static str {
    match kind {
        PostingKind::Posting => "posting",
        PostingKind::Hold => "hold",
        PostingKind::Capture => "capture",
        PostingKind::Release => "release",
        PostingKind::Expiry => "expiry",
        PostingKind::Void => "void",
    }
}

fn order_word(order: Order) -> &'static str {
    match order {
        Order::Journal => "journal",
        Order::Effective => "effective",
    }
}

/// The period as the heading says it.
pub(super) fn period_words(s: &PeriodStatement) -> String {
    let e = show_ts(s.at.effective_at);
    match (s.from.map(show_ts), s.to.map(show_ts)) {
        (Some(f), Some(t)) => format!("effective from {f} (included) to {t} (excluded)"),
        (Some(f), None) => format!("effective from {f} to {e} (both included)"),
        (None, Some(t)) => format!("effective before {t}"),
        (None, None) => format!("effective up to {e} (included)"),
    }
}

/// A line's cells: sequence, times, posting, kind, debit or credit, balance, counter-accounts,
/// memo (on one line).
fn line_cells(l: &Line) -> [String; 10] {
    let (d, c) = match l.direction {
        Direction::Debit => (l.amount.to_string(), String::new()),
        Direction::Credit => (String::new(), l.amount.to_string()),
    };
    [
        l.sequence.to_string(),
        show_ts(l.recorded_at),
        show_ts(l.effective_at),
        l.posting_id.clone(),
        kind_word(l.kind).into(),
        d,
        c,
        l.balance.to_string(),
        l.counter.join(" "),
        l.memo.clone(),
    ]
}

/// The OPENING and CLOSING lines: the balance, and on the closing one the period's debits,
/// credits and (in a table) how many entries.
fn edge_cells(
    name: &str,
    count: &str,
    totals: Option<(Amount, Amount)>,
    balance: Amount,
) -> [String; 10] {
    let (d, c) = totals.map_or((String::new(), String::new()), |(d, c)| {
        (d.to_string(), c.to_string())
    });
    [
        name.into(),
        String::new(),
        String::new(),
        count.into(),
        String::new(),
        d,
        c,
        balance.to_string(),
        String::new(),
        String::new(),
    ]
}

const PERIOD_COLUMNS: [&str; 10] = [
    "SEQUENCE",
    "RECORDED_AT",
    "EFFECTIVE_AT",
    "POSTING_ID",
    "KIND",
    "DEBIT",
    "CREDIT",
    "BALANCE",
    "COUNTER_ACCOUNTS",
    "MEMO",
];

pub(super) fn period_table(s: &PeriodStatement) -> Result<String, ReportError> {
    let order = match s.order {
        Order::Journal => "",
        Order::Effective => ", in effective order",
    };
    let mut out = format!(
        "Statement of {} ({}){} {}, as recorded at {} (journal sequence {}){order}\n\n",
        s.account,
        s.currency,
        in_ledger(&s.ledger),
        period_words(s),
        show_ts(s.at.recorded_at),
        s.at.sequence,
    );
    let mut rows = vec![
        heading(PERIOD_COLUMNS),
        edge_cells("OPENING", "", None, s.opening),
    ];
    rows.extend(s.lines.iter().map(|l| {
        let mut cells = line_cells(l);
        cells[9] = one_line(&cells[9]);
        cells
    }));
    let body = rows.len();
    let count = entries_word(s.lines.len());
    rows.push(edge_cells("CLOSING", &count, Some(s.totals()?), s.closing));
    let right = [
        true, false, false, false, false, true, true, true, false, false,
    ];
    out.push_str(&table(&rows, &right, Some(body)));
    Ok(out)
}

pub(super) fn period_csv(s: &PeriodStatement) -> Result<String, ReportError> {
    let mut out = csv_line(&PERIOD_COLUMNS.map(str::to_lowercase));
    out.push_str(&csv_line(&edge_cells("OPENING", "", None, s.opening)));
    for l in &s.lines {
        out.push_str(&csv_line(&line_cells(l)));
    }
    out.push_str(&csv_line(&edge_cells(
        "CLOSING",
        "",
        Some(s.totals()?),
        s.closing,
    )));
    Ok(out)
}

/// The statement for a period as one JSON object (the caller adds `accountCreatedAt`,
/// `notYetCreated` and `closedPeriod`).
pub(super) fn period_json(s: &PeriodStatement) -> Result<Value, ReportError> {
    let (debits, credits) = s.totals()?;
    let lines: Vec<Value> = s
        .lines
        .iter()
        .map(|l| {
            let amount = |d: Direction| (l.direction == d).then(|| l.amount.to_string());
            json!({
                "sequence": l.sequence,
                "postingId": l.posting_id,
                "kind": kind_word(l.kind),
                "recordedAt": show_ts(l.recorded_at),
                "effectiveAt": show_ts(l.effective_at),
                "debit": amount(Direction::Debit),
                "credit": amount(Direction::Credit),
                "balance": l.balance.to_string(),
                "counterAccounts": l.counter,
                "memo": l.memo,
            })
        })
        .collect();
    Ok(json!({
        "report": "statement",
        "ledger": s.ledger,
        "account": s.account,
        "currency": s.currency,
        "asOf": applied_json(&s.at),
        "from": s.from.map(show_ts),
        "to": s.to.map(show_ts),
        "order": order_word(s.order),
        "openingBalance": s.opening.to_string(),
        "closingBalance": s.closing.to_string(),
        "debits": debits.to_string(),
        "credits": credits.to_string(),
        "lines": lines,
    }))
}
