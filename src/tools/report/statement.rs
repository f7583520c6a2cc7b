//! An account's statement at one cut-off: its entries in journal order (ListEntries) with
//! the balance after each, and a TOTAL line.

use super::table::{csv_line, heading, json_text, table};
use super::trial::held_cells;
use super::{
    applied_json, close_at, closed_json, connect, cut_off_words, in_ledger, not_yet, requested,
    rpc_error, show_ts, under_heading, with_close, Common, Format, ReportError,
};
use ledger_client::{Balance, Direction, Entry};
use serde_json::{json, Value};

/// The statement, rendered. The cut-off is resolved once (by GetBalance) and the statement
/// asked at exactly that cut-off, so its closing balance is the balance printed with it.
pub(super) async fn statement(common: &Common, account: &str) -> Result<String, ReportError> {
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
        return Err(ReportError::exit_2(format!(
            "the statement of {account} closes at {closing} but its balance at the same cut-off is {}; the ledger is inconsistent",
            balance.balance
        )));
    }
    let ledger = common.ledger.code();
    let early = not_yet(account, created, &balance.as_of);
    Ok(match common.format {
        Format::Csv => statement_csv(&balance, &entries),
        Format::Table => {
            let of = format!("{account} ({}){}", balance.currency, in_ledger(&ledger));
            let mut table = statement_table(&of, &balance, &entries);
            if let Some(line) = early {
                table = under_heading(&table, &line);
            }
            with_close(&client, &balance.as_of, table).await?
        }
        Format::Json => {
            let close = close_at(&client, &balance.as_of).await?;
            let mut v = statement_json(&ledger, &balance, &entries);
            v["accountCreatedAt"] = show_ts(created).into();
            v["notYetCreated"] = early.is_some().into();
            v["closedPeriod"] = closed_json(close.as_ref());
            json_text(&v)
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

pub(super) fn statement_csv(balance: &Balance, entries: &[Entry]) -> String {
    let mut out = String::from(
        "sequence,posting_id,recorded_at,effective_at,debit,credit,balance_after,held_debits,held_credits,available\n",
    );
    let csv_order = |mut cells: [String; 10]| {
        // The table shows the times before the posting; the CSV, as it always has, after.
        cells[1..4].rotate_right(1);
        csv_line(&cells)
    };
    for e in entries {
        out.push_str(&csv_order(entry_cells(e)));
    }
    out.push_str(&csv_order(statement_total_cells(balance, "")));
    out
}

/// "1 entry", "2 entries".
pub(super) fn entries_word(n: usize) -> String {
    match n {
        1 => "1 entry".to_string(),
        n => format!("{n} entries"),
    }
}

/// The statement's table; `of` names the account, its currency and (unless `default`) its
/// ledger, as its heading says them.
pub(super) fn statement_table(of: &str, balance: &Balance, entries: &[Entry]) -> String {
    let mut out = format!("Statement of {of} {}\n\n", cut_off_words(&balance.as_of));
    let mut rows: Vec<[String; 10]> = vec![heading([
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
    ])];
    rows.extend(entries.iter().map(entry_cells));
    let body = rows.len();
    rows.push(statement_total_cells(balance, &entries_word(entries.len())));
    let right = [
        true, false, false, false, true, true, true, true, true, true,
    ];
    out.push_str(&table(&rows, &right, Some(body)));
    out
}

/// The statement as one JSON object (the caller adds `accountCreatedAt`, `notYetCreated` and
/// `closedPeriod`).
pub(super) fn statement_json(ledger: &str, balance: &Balance, entries: &[Entry]) -> Value {
    let entries: Vec<Value> = entries
        .iter()
        .map(|e| {
            let (d, c) = sides(e);
            json!({
                "sequence": e.sequence,
                "postingId": e.posting_id,
                "recordedAt": show_ts(e.recorded_at),
                "effectiveAt": show_ts(e.effective_at),
                "debit": (!d.is_empty()).then_some(d),
                "credit": (!c.is_empty()).then_some(c),
                "balanceAfter": e.balance_after.to_string(),
            })
        })
        .collect();
    json!({
        "report": "statement",
        "ledger": ledger,
        "account": balance.account,
        "currency": balance.currency,
        "asOf": applied_json(&balance.as_of),
        "entries": entries,
        "total": {
            "debits": balance.debits.to_string(),
            "credits": balance.credits.to_string(),
            "balance": balance.balance.to_string(),
            "heldDebits": balance.held_debits.to_string(),
            "heldCredits": balance.held_credits.to_string(),
            "available": balance.available.to_string(),
        },
    })
}
