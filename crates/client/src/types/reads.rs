//! The answers of reads at a cut-off: balances, trial balances, statements, and the cut-off
//! they applied.

use super::{time_from_pb, time_to_pb, Direction};
use crate::amount::{from_wire, Amount};
use crate::error::Error;
use crate::pb;
use std::time::SystemTime;

/// A bitemporal cut-off; both `None` means now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AsOf {
    /// What the ledger knew at this time (not in the future).
    pub recorded_at: Option<SystemTime>,
    /// What had happened by this time (default: `recorded_at`).
    pub effective_at: Option<SystemTime>,
}

impl AsOf {
    /// Now.
    pub fn now() -> AsOf {
        AsOf::default()
    }

    pub(crate) fn to_pb(self) -> Option<pb::AsOf> {
        (self.recorded_at.is_some() || self.effective_at.is_some()).then(|| pb::AsOf {
            recorded_at: self.recorded_at.map(time_to_pb),
            effective_at: self.effective_at.map(time_to_pb),
        })
    }
}

/// The cut-off an answer applied, both times filled in, and the journal's last sequence it
/// includes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Applied {
    pub recorded_at: SystemTime,
    pub effective_at: SystemTime,
    pub sequence: u64,
}

impl Applied {
    /// The same cut-off, to ask again at exactly it.
    pub fn as_of(&self) -> AsOf {
        AsOf {
            recorded_at: Some(self.recorded_at),
            effective_at: Some(self.effective_at),
        }
    }
}

/// An account's balance at a cut-off; every amount exact, with the account's scale.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Balance {
    pub account: String,
    pub currency: String,
    pub debits: Amount,
    pub credits: Amount,
    /// debits − credits for debit-normal accounts, credits − debits for credit-normal ones.
    pub balance: Amount,
    /// Debits and credits reserved by pending holds (not in `balance`).
    pub held_debits: Amount,
    pub held_credits: Amount,
    /// The balance with every pending hold's reduction applied (what no-negative checks).
    pub available: Amount,
    /// The last posting that touched the account (moved or held on it) by the cut-off; 0:
    /// none. What [`NewPosting::if_last_sequence`](crate::NewPosting::if_last_sequence)
    /// names.
    pub last_sequence: u64,
    pub as_of: Applied,
}

impl Balance {
    pub(crate) fn from_pb(b: pb::Balance) -> Result<Balance, Error> {
        let at = b.as_of.unwrap_or_default();
        Ok(Balance {
            debits: from_wire("debits", &b.debits)?,
            credits: from_wire("credits", &b.credits)?,
            balance: from_wire("balance", &b.balance)?,
            held_debits: from_wire("held_debits", &b.held_debits)?,
            held_credits: from_wire("held_credits", &b.held_credits)?,
            available: from_wire("available", &b.available)?,
            as_of: Applied {
                recorded_at: time_from_pb("as_of.recorded_at", at.recorded_at)?,
                effective_at: time_from_pb("as_of.effective_at", at.effective_at)?,
                sequence: b.as_of_sequence,
            },
            last_sequence: b.last_sequence,
            account: b.account,
            currency: b.currency,
        })
    }
}

/// Totals of one currency over a set of accounts (exact: they may pass 10^36 minor units).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CurrencyTotal {
    pub currency: String,
    pub debits: Amount,
    pub credits: Amount,
    /// Held by pending holds (not in `debits`/`credits`).
    pub held_debits: Amount,
    pub held_credits: Amount,
}

impl CurrencyTotal {
    pub(crate) fn from_pb(t: pb::CurrencyTotal) -> Result<CurrencyTotal, Error> {
        Ok(CurrencyTotal {
            debits: from_wire("debits", &t.debits)?,
            credits: from_wire("credits", &t.credits)?,
            held_debits: from_wire("held_debits", &t.held_debits)?,
            held_credits: from_wire("held_credits", &t.held_credits)?,
            currency: t.currency,
        })
    }
}

/// A trial balance: every account with activity by the cut-off (by code prefix), and the
/// per-currency totals over all of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrialBalance {
    pub balances: Vec<Balance>,
    pub totals: Vec<CurrencyTotal>,
}

/// One line of a statement: a leg on the account, and the balance after its posting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub posting_id: String,
    pub sequence: u64,
    pub recorded_at: SystemTime,
    pub effective_at: SystemTime,
    pub direction: Direction,
    pub amount: Amount,
    pub balance_after: Amount,
}

impl Entry {
    pub(crate) fn from_pb(e: pb::Entry) -> Result<Entry, Error> {
        Ok(Entry {
            recorded_at: time_from_pb("recorded_at", e.recorded_at)?,
            effective_at: time_from_pb("effective_at", e.effective_at)?,
            direction: Direction::from_pb(e.direction)?,
            amount: from_wire("amount", &e.amount)?,
            balance_after: from_wire("balance_after", &e.balance_after)?,
            posting_id: e.posting_id,
            sequence: e.sequence,
        })
    }
}
