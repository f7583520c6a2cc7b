//! The finance queries' types: which postings a listing keeps, and rollups of the account
//! tree at a cut-off.

use super::reads::Applied;
use super::{time_to_pb, Metadata};
use crate::amount::{from_wire, Amount};
use crate::error::Error;
use crate::pb;
use std::time::SystemTime;

/// A range of time: `start` inclusive, `end` exclusive; `None` is unbounded on that side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeRange {
    pub start: Option<SystemTime>,
    pub end: Option<SystemTime>,
}

impl TimeRange {
    /// From `start` (inclusive) to `end` (exclusive).
    pub fn new(start: Option<SystemTime>, end: Option<SystemTime>) -> TimeRange {
        TimeRange { start, end }
    }

    pub(crate) fn to_pb(self) -> Option<pb::TimeRange> {
        (self.start.is_some() || self.end.is_some()).then(|| pb::TimeRange {
            start: self.start.map(time_to_pb),
            end: self.end.map(time_to_pb),
        })
    }
}

/// Which postings [`Client::postings`](crate::Client::postings) lists: all the filters given
/// must match (none: every posting).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PostingFilter {
    /// Only postings with a leg on this account.
    pub account: Option<String>,
    /// Only postings whose metadata holds every one of these entries.
    pub metadata: Metadata,
    /// Only postings recorded in this range.
    pub recorded: TimeRange,
    /// Only postings effective in this range.
    pub effective: TimeRange,
    /// Only postings recorded by this caller.
    pub caller: Option<String>,
}

impl PostingFilter {
    /// Every posting.
    pub fn new() -> PostingFilter {
        PostingFilter::default()
    }

    /// Only postings with a leg on `account`.
    pub fn account(mut self, account: impl Into<String>) -> PostingFilter {
        self.account = Some(account.into());
        self
    }

    /// Only postings whose metadata has `key` = `value` (with every other entry given).
    pub fn meta(mut self, key: impl Into<String>, value: impl Into<String>) -> PostingFilter {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// Only postings recorded in `[start, end)`.
    pub fn recorded(mut self, start: Option<SystemTime>, end: Option<SystemTime>) -> PostingFilter {
        self.recorded = TimeRange::new(start, end);
        self
    }

    /// Only postings effective in `[start, end)`.
    pub fn effective(
        mut self,
        start: Option<SystemTime>,
        end: Option<SystemTime>,
    ) -> PostingFilter {
        self.effective = TimeRange::new(start, end);
        self
    }

    /// Only postings recorded by `caller`.
    pub fn caller(mut self, caller: impl Into<String>) -> PostingFilter {
        self.caller = Some(caller.into());
        self
    }

    pub(crate) fn to_pb(
        &self,
        ledger: String,
        page_size: u32,
        page_token: String,
    ) -> pb::ListPostingsRequest {
        pb::ListPostingsRequest {
            ledger,
            account: self.account.clone().unwrap_or_default(),
            page_size,
            page_token,
            metadata: self.metadata.clone().into_iter().collect(),
            recorded: self.recorded.to_pb(),
            effective: self.effective.to_pb(),
            caller: self.caller.clone().unwrap_or_default(),
        }
    }
}

/// Totals of one currency over the accounts beneath a node (exact).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RollupTotal {
    pub currency: String,
    pub debits: Amount,
    pub credits: Amount,
    /// The sum of the accounts' balances, each in its own normal direction.
    pub balance: Amount,
    /// Held by holds open at the cut-off.
    pub held_debits: Amount,
    pub held_credits: Amount,
    /// The sum of the accounts' available balances.
    pub available: Amount,
}

impl RollupTotal {
    fn from_pb(t: pb::RollupTotal) -> Result<RollupTotal, Error> {
        Ok(RollupTotal {
            debits: from_wire("debits", &t.debits)?,
            credits: from_wire("credits", &t.credits)?,
            balance: from_wire("balance", &t.balance)?,
            held_debits: from_wire("held_debits", &t.held_debits)?,
            held_credits: from_wire("held_credits", &t.held_credits)?,
            available: from_wire("available", &t.available)?,
            currency: t.currency,
        })
    }
}

/// One node of the account-code tree: the accounts whose code is `node` or starts with
/// `node` and `:` (the empty node: every account).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rollup {
    pub node: String,
    /// Accounts beneath it with a leg recorded by the cut-off.
    pub account_count: u64,
    /// Per currency, in currency order.
    pub totals: Vec<RollupTotal>,
}

impl Rollup {
    pub(crate) fn from_pb(r: pb::Rollup) -> Result<Rollup, Error> {
        Ok(Rollup {
            node: r.node,
            account_count: r.account_count,
            totals: r
                .totals
                .into_iter()
                .map(RollupTotal::from_pb)
                .collect::<Result<_, _>>()?,
        })
    }
}

/// Every node of a rollup, in tree order, at one cut-off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rollups {
    pub rollups: Vec<Rollup>,
    /// The cut-off every node applied.
    pub as_of: Applied,
}
