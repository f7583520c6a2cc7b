//! The trial balance: every account with activity at one cut-off, and per-currency totals.

use super::table::{csv_line, heading, json_text, table};
use super::{
    applied_json, close_at, closed_json, connect, cut_off_words, in_ledger, requested, rpc_error,
    with_close, Common, Format, ReportError,
};
use ledger_client::{Balance, CurrencyTotal, TrialBalance};
use serde_json::{json, Value};

/// The trial balance, rendered.
pub(super) async fn trial_balance(
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
    let ledger = common.ledger.code();
    Ok(match common.format {
        Format::Csv => trial_balance_csv(&trial),
        Format::Table => {
            let table = trial_balance_table(&trial, prefix, &ledger);
            match cut {
                Some(at) => with_close(&client, &at, table).await?,
                None => table,
            }
        }
        Format::Json => {
            let close = match cut {
                Some(at) => close_at(&client, &at).await?,
                None => None,
            };
            let mut v = trial_balance_json(&trial, prefix, &ledger);
            v["closedPeriod"] = closed_json(close.as_ref());
            json_text(&v)
        }
    })
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
pub(super) fn held_cells(b: &Balance) -> [String; 3] {
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

/// Whether a currency's totals balance: its debits equal its credits, and so do its held
/// debits and credits (every hold balances per currency).
fn balanced(t: &CurrencyTotal) -> bool {
    t.debits == t.credits && t.held_debits == t.held_credits
}

/// Only a whole ledger must balance (a prefix selects part of it).
fn balance_mark(t: &CurrencyTotal, whole_ledger: bool) -> &'static str {
    match (whole_ledger, balanced(t)) {
        (false, _) => "",
        (true, true) => "balanced",
        (true, false) => "NOT BALANCED",
    }
}

pub(super) fn trial_balance_csv(trial: &TrialBalance) -> String {
    let mut out = String::from(
        "account,currency,debits,credits,balance,held_debits,held_credits,available\n",
    );
    for b in &trial.balances {
        out.push_str(&csv_line(&balance_cells(b)));
    }
    for t in &trial.totals {
        out.push_str(&csv_line(&total_cells(t, "")));
    }
    out
}

pub(super) fn trial_balance_table(trial: &TrialBalance, prefix: &str, ledger: &str) -> String {
    let of = if prefix.is_empty() {
        in_ledger(ledger)
    } else {
        format!(" of {prefix}*{}", in_ledger(ledger))
    };
    let Some(a) = trial.balances.first().map(|b| b.as_of) else {
        return format!("Trial balance{of}: no account has activity at this cut-off\n");
    };
    let mut out = format!("Trial balance{of} {}\n\n", cut_off_words(&a));
    let mut rows: Vec<[String; 8]> = vec![heading([
        "ACCOUNT",
        "CURRENCY",
        "DEBITS",
        "CREDITS",
        "BALANCE",
        "HELD_DEBITS",
        "HELD_CREDITS",
        "AVAILABLE",
    ])];
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

/// The trial balance as one JSON object (its `closedPeriod` set by the caller). `asOf` is
/// `null` when no account has activity at the cut-off; `balanced` is `null` under a prefix.
pub(super) fn trial_balance_json(trial: &TrialBalance, prefix: &str, ledger: &str) -> Value {
    let balances: Vec<Value> = trial
        .balances
        .iter()
        .map(|b| {
            json!({
                "account": b.account,
                "currency": b.currency,
                "debits": b.debits.to_string(),
                "credits": b.credits.to_string(),
                "balance": b.balance.to_string(),
                "heldDebits": b.held_debits.to_string(),
                "heldCredits": b.held_credits.to_string(),
                "available": b.available.to_string(),
            })
        })
        .collect();
    let totals: Vec<Value> = trial
        .totals
        .iter()
        .map(|t| {
            json!({
                "currency": t.currency,
                "debits": t.debits.to_string(),
                "credits": t.credits.to_string(),
                "heldDebits": t.held_debits.to_string(),
                "heldCredits": t.held_credits.to_string(),
                "balanced": prefix.is_empty().then(|| balanced(t)),
            })
        })
        .collect();
    json!({
        "report": "trial-balance",
        "ledger": ledger,
        "prefix": prefix,
        "asOf": trial.balances.first().map(|b| applied_json(&b.as_of)),
        "closedPeriod": null,
        "balances": balances,
        "totals": totals,
    })
}
