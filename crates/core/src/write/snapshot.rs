//! What storage loads for a batch's decision, under the ledger's write lock.

use super::command::Done;
use super::command::Operation;
use crate::account::Direction;
use crate::amount::Amount;
pub use crate::engine::AccountState;
use crate::error::LedgerError;
use crate::journal::Chain;
use crate::posting::Fingerprint;
use crate::record::Posting;
use std::collections::HashMap;
use time::OffsetDateTime;
use uuid::Uuid;

/// The ledger's clock as the batch found it, under the write lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clock {
    pub last_sequence: i64,
    pub last_recorded_at: OffsetDateTime,
    /// The database's clock, read under the lock.
    pub now: OffsetDateTime,
}

impl Clock {
    /// The time the batch's first posting is recorded at (the next ones a microsecond
    /// apart): strictly after the clock any fenced reader saw, and after the last batch.
    pub fn base(&self) -> OffsetDateTime {
        let tick = time::Duration::microseconds(1);
        (self.now + tick).max(self.last_recorded_at + tick)
    }
}

/// How the batch found a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyState {
    /// Claimed by this batch; the number is the key's, which its posting names.
    Claimed(i64),
    /// Decided earlier.
    Decided(Box<StoredDecision>),
    /// Decided earlier, but its decision cannot be read: the row breaks an invariant.
    Unreadable(LedgerError),
}

/// A key's decision as stored: by which operation and fingerprint, with what outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredDecision {
    pub operation: Operation,
    pub fingerprint: Fingerprint,
    pub outcome: Result<Done, LedgerError>,
}

/// Everything a batch's decision needs, loaded by storage under the ledger's write lock.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub clock: Clock,
    /// One per [`distinct_keys`] of the batch, in that order.
    pub keys: Vec<KeyState>,
    /// The accounts the batch's new requests touch: their posts' and captures' legs, and the
    /// legs of the postings they name.
    pub accounts: HashMap<i64, AccountState>,
    /// Account ids by code, for the legs of the postings the requests name (recorded legs
    /// name their accounts by code).
    pub account_ids: HashMap<String, i64>,
    /// The recorded postings the batch's new voids, captures and expiries name (voided
    /// postings and holds), by id, each with its state now (voided, closed).
    pub named: HashMap<Uuid, Posting>,
    /// Accounts whose rows break an invariant, with the refusal of requests touching them.
    pub corrupt_accounts: HashMap<i64, LedgerError>,
    /// Named postings that cannot be read, with the refusal of requests naming them.
    pub corrupt_named: HashMap<Uuid, LedgerError>,
    /// The open holds with an expiry that have legs on the batch's accounts, their legs there:
    /// at least those due by the last time the batch can record at ([`Clock::base`] plus a
    /// microsecond per request; later ones are ignored). A hold stops
    /// counting against the funds rule at its expiry time, before its release is recorded.
    pub expiring: Vec<ExpiringHold>,
    /// The ledger's chain after its last posting (`crate::journal`), or `None` while the
    /// journal is not hashed that far (a journal from before hashing, until `ledger migrate`
    /// has hashed it): the batch's postings are then left for it to hash.
    pub chain: Option<Chain>,
    /// The ledger's last period close's `effective_before`, if it has one
    /// ([`crate::period`]): nothing is recorded effective before it.
    pub closed_before: Option<OffsetDateTime>,
}

/// An open hold with an expiry, as the batch's accounts hold it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpiringHold {
    pub hold: Uuid,
    pub expires_at: OffsetDateTime,
    /// Its legs on the batch's accounts (its legs elsewhere are not loaded).
    pub legs: Vec<HeldLeg>,
}

/// One leg of a hold, on an account of the batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldLeg {
    pub account_id: i64,
    pub direction: Direction,
    pub amount: Amount,
}
