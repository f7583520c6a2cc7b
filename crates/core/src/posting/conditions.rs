//! Conditions on a posting: the account's last posting, or its available balance, checked
//! when the posting is decided (the rule is `decide`'s); here their shape, their accounts, and
//! their part of the posting's fingerprint.

use super::{Canon, Fingerprint};
use crate::account::{truncate_for_message, validate_code, Account};
use crate::amount::{parse_signed, AmountError};
use crate::error::{LedgerError, Reason};
use crate::limits::MAX_CONDITIONS;
use std::collections::HashMap;

/// A condition as the caller sent it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionRequest {
    pub account: String,
    /// `None`: neither check was sent.
    pub check: Option<Check<String>>,
}

/// What a condition checks: the account's last posting (its sequence within the ledger; 0:
/// none), or its available balance at least this (a decimal as sent, or minor units).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check<A> {
    LastSequence(u64),
    AvailableAtLeast(A),
}

/// A condition resolved against its account.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Condition {
    pub account_id: i64,
    pub account_code: String,
    pub check: Check<i128>,
}

/// The refusal of a decimal `text` sent in `field`.
pub fn amount_error(field: &str, text: &str, e: &AmountError) -> LedgerError {
    let reason = match e {
        AmountError::TooManyDecimals { .. } => Reason::AmountScale,
        _ => Reason::InvalidAmount,
    };
    LedgerError::new(
        reason,
        format!("{field} {:?} {e}", truncate_for_message(text)),
    )
    .with("field", field)
}

/// The conditions' codes are well formed and each names one check; the codes, in order.
pub fn condition_codes(conditions: &[ConditionRequest]) -> Result<Vec<String>, LedgerError> {
    if conditions.len() > MAX_CONDITIONS {
        return Err(LedgerError::limit(
            "condition count",
            "MAX_CONDITIONS",
            MAX_CONDITIONS,
            conditions.len(),
        )
        .with("field", "conditions"));
    }
    let mut codes = Vec::with_capacity(conditions.len());
    for (i, c) in conditions.iter().enumerate() {
        validate_code(&c.account).map_err(|e| LedgerError {
            message: format!("condition {i}: {}", e.message),
            ..e.with("field", format!("conditions[{i}].account"))
        })?;
        if c.check.is_none() {
            return Err(LedgerError::new(
                Reason::InvalidField,
                format!("condition {i}: send last_sequence or available_at_least"),
            )
            .with("field", format!("conditions[{i}]")));
        }
        codes.push(c.account.clone());
    }
    Ok(codes)
}

/// Resolves conditions against their accounts (looked up by the caller), parsing each
/// amount at its account's scale.
pub fn resolve_conditions(
    conditions: &[ConditionRequest],
    accounts: &HashMap<String, Account>,
) -> Result<Vec<Condition>, LedgerError> {
    let mut out = Vec::with_capacity(conditions.len());
    for (i, c) in conditions.iter().enumerate() {
        let field = format!("conditions[{i}]");
        let account = accounts.get(&c.account).ok_or_else(|| {
            LedgerError::new(
                Reason::AccountNotFound,
                format!("condition {i}: account {:?} does not exist", c.account),
            )
            .with("account", &c.account)
            .with("field", format!("{field}.account"))
        })?;
        let check = match c.check.as_ref().expect("checked by condition_codes") {
            Check::LastSequence(n) => Check::LastSequence(*n),
            Check::AvailableAtLeast(text) => {
                Check::AvailableAtLeast(parse_signed(text, account.scale).map_err(|e| {
                    amount_error(&format!("{field}.available_at_least"), text, &e)
                        .with("account", &account.code)
                })?)
            }
        };
        out.push(Condition {
            account_id: account.id,
            account_code: account.code.clone(),
            check,
        });
    }
    Ok(out)
}

/// A posting's fingerprint with its conditions (only a posting with conditions has one of
/// these, so postings without keep the fingerprints their keys were decided with).
pub(super) fn with_conditions(post: &Fingerprint, conditions: &[Condition]) -> Fingerprint {
    let mut c = Canon::new("conditions/v1");
    c.field(post);
    c.field(&(conditions.len() as u64).to_be_bytes());
    for cond in conditions {
        c.field(cond.account_code.as_bytes());
        match cond.check {
            Check::LastSequence(n) => {
                c.field(b"last_sequence");
                c.field(&n.to_be_bytes());
            }
            Check::AvailableAtLeast(m) => {
                c.field(b"available_at_least");
                c.field(&m.to_be_bytes());
            }
        }
    }
    c.finish()
}
