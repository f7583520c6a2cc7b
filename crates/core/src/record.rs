//! What the ledger answers with: recorded postings, balances, entries, cut-offs.

use super::account::{Direction, Metadata};
use super::amount::Amount;
use time::OffsetDateTime;
use uuid::Uuid;

/// A time as the ledger's messages print it: RFC 3339 (`2027-01-05T14:02:00Z`).
pub fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| t.to_string())
}

/// One leg of a recorded posting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostedLeg {
    pub account: String,
    pub direction: Direction,
    pub amount: Amount,
}

/// A posting as the journal holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Posting {
    pub posting_id: Uuid,
    pub sequence: u64,
    pub caller: String,
    pub idempotency_key: String,
    pub legs: Vec<PostedLeg>,
    pub effective_at: OffsetDateTime,
    pub recorded_at: OffsetDateTime,
    pub memo: String,
    pub metadata: Metadata,
    pub voids_posting_id: Option<Uuid>,
    pub voided_by_posting_id: Option<Uuid>,
    pub void_reason: Option<String>,
    /// Set on a hold: its legs are held, not moved.
    pub hold: Option<HoldState>,
    /// Set on a posting that closes a hold: which, and how.
    pub closes: Option<Closes>,
    /// Its hash in its ledger's chain (`crate::journal`); `None` for a posting recorded before
    /// the journal was hashed, until it is.
    pub hash: Option<[u8; 32]>,
}

/// How a posting closes a hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CloseKind {
    /// A capture: moves the captured amounts, releases the rest.
    Capture,
    /// A void of the hold: releases it, moves nothing.
    Release,
    /// The ledger's own release at the hold's expiry time.
    Expire,
}

impl CloseKind {
    /// As stored.
    pub fn as_str(self) -> &'static str {
        match self {
            CloseKind::Capture => "capture",
            CloseKind::Release => "release",
            CloseKind::Expire => "expire",
        }
    }

    pub fn parse(s: &str) -> Option<CloseKind> {
        [CloseKind::Capture, CloseKind::Release, CloseKind::Expire]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// The hold a posting closes, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Closes {
    pub hold: Uuid,
    pub kind: CloseKind,
}

/// A hold's own facts: its expiry and, once closed, the posting that closed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct HoldState {
    pub expires_at: Option<OffsetDateTime>,
    pub closed_by: Option<(Uuid, CloseKind)>,
    /// Its expiry time had passed at the cut-off it was read at (on both clocks, see
    /// [`expired_by`]) and no capture or void had closed it: it is expired and holds nothing,
    /// though the ledger's release may not be recorded yet (then `closed_by` is `None`).
    pub lapsed: bool,
}

/// Whether a hold expiring at `expires_at` has expired by `at`: at a cut-off (R, E), `at` is
/// the earlier of R and E; for the writer, the time the request is recorded at.
pub fn expired_by(expires_at: Option<OffsetDateTime>, at: OffsetDateTime) -> bool {
    expires_at.is_some_and(|t| t <= at)
}

/// A hold's state, as the contract names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldStatus {
    Pending,
    Captured,
    Released,
    Expired,
}

impl HoldState {
    pub fn status(&self) -> HoldStatus {
        match self.closed_by {
            None if self.lapsed => HoldStatus::Expired,
            None => HoldStatus::Pending,
            Some((_, CloseKind::Capture)) => HoldStatus::Captured,
            Some((_, CloseKind::Release)) => HoldStatus::Released,
            Some((_, CloseKind::Expire)) => HoldStatus::Expired,
        }
    }
}

/// What a posting is, as the contract names it (`PostingKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PostingKind {
    /// A plain transfer: its legs move money.
    Posting,
    /// A hold: its legs are held, not moved.
    Hold,
    /// The capture of a hold.
    Capture,
    /// The release of a hold by a void of it.
    Release,
    /// The ledger's release of an expired hold.
    Expiry,
    /// The void of a posting that moved money.
    Void,
}

impl Posting {
    /// What the posting is, from its own facts (never from later postings).
    pub fn kind(&self) -> PostingKind {
        match (self.hold, self.closes, self.voids_posting_id) {
            (Some(_), _, _) => PostingKind::Hold,
            (None, Some(c), _) => match c.kind {
                CloseKind::Capture => PostingKind::Capture,
                CloseKind::Release => PostingKind::Release,
                CloseKind::Expire => PostingKind::Expiry,
            },
            (None, None, Some(_)) => PostingKind::Void,
            (None, None, None) => PostingKind::Posting,
        }
    }

    /// The hold a release (a void of the hold, or the ledger's release at its expiry) closes.
    pub fn releases_hold(&self) -> Option<Uuid> {
        self.closes
            .filter(|c| c.kind != CloseKind::Capture)
            .map(|c| c.hold)
    }

    /// The invariants every recorded posting keeps, or the first one it breaks.
    pub fn check_sound(&self) -> Result<(), String> {
        if self.sequence == 0 {
            return Err("sequence 0".into());
        }
        if self.legs.len() < 2 {
            return Err(format!("{} legs, at least 2 required", self.legs.len()));
        }
        if self.voids_posting_id.is_some() && self.voided_by_posting_id.is_some() {
            return Err("a void that is itself voided".into());
        }
        if self.voids_posting_id.is_some() != self.void_reason.is_some() {
            return Err("a void reason without a void, or the reverse".into());
        }
        if let Some(leg) = self.legs.iter().find(|l| l.amount.minor() <= 0) {
            return Err(format!("a leg of {}", leg.amount));
        }
        if self.hold.is_some() && (self.voids_posting_id.is_some() || self.closes.is_some()) {
            return Err("a hold that is a void or closes a hold".into());
        }
        match self.closes {
            Some(c) if c.kind == CloseKind::Release && self.voids_posting_id != Some(c.hold) => {
                Err("a release of a hold that is not its void".into())
            }
            Some(c) if c.kind != CloseKind::Release && self.voids_posting_id.is_some() => {
                Err("a capture or expiry that is a void".into())
            }
            _ => Ok(()),
        }
    }

    /// Asserts the invariants before the writer records the posting: breaking one there is
    /// the ledger's own bug, so the process stops.
    pub fn assert_sound(&self) {
        if let Err(e) = self.check_sound() {
            panic!("posting {} about to be written: {e}", self.posting_id);
        }
    }
}

/// A bitemporal cut-off as applied: legs recorded ≤ `recorded_at` and effective ≤ `effective_at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppliedAsOf {
    pub recorded_at: OffsetDateTime,
    pub effective_at: OffsetDateTime,
    /// The last journal sequence recorded at or before `recorded_at`.
    pub sequence: u64,
}

/// A cut-off as requested.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AsOf {
    pub recorded_at: Option<OffsetDateTime>,
    pub effective_at: Option<OffsetDateTime>,
}

/// An account's balance at a cut-off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Balance {
    pub account: String,
    pub currency: String,
    pub scale: u8,
    pub debits: i128,
    pub credits: i128,
    pub balance: i128,
    /// Sums of the legs of the holds open at the cut-off.
    pub held_debits: i128,
    pub held_credits: i128,
    /// The balance less what the open holds would take from it.
    pub available: i128,
    pub as_of: AppliedAsOf,
    /// The last stored sequence by the cut-off that moved or held on the account (0: none).
    pub last_sequence: i64,
}

/// One line of an account statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub posting_id: Uuid,
    pub sequence: u64,
    pub recorded_at: OffsetDateTime,
    pub effective_at: OffsetDateTime,
    pub direction: Direction,
    pub amount: Amount,
    /// Signed balance after this entry, over the entries the cut-off includes.
    pub balance_after: i128,
}

/// Debits and credits of one currency over a set of accounts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CurrencyTotal {
    pub currency: String,
    pub scale: u8,
    pub debits: i128,
    pub credits: i128,
    pub held_debits: i128,
    pub held_credits: i128,
}

/// The answer to a write: the posting, and whether it was decided by an earlier request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decided {
    pub posting: Posting,
    pub replayed: bool,
}
