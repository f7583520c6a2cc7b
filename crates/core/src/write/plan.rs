//! What a batch's decision writes and answers, and what storage asserts before writing it.

use super::command::Outcome;
use super::snapshot::Clock;
use crate::account::Direction;
use crate::amount::Amount;
use crate::engine::Totals;
use crate::error::LedgerError;
use crate::journal::Chain;
use crate::period::PeriodClose;
use crate::record::{CloseKind, Posting};
use crate::terms::AccountVersion;
use time::OffsetDateTime;

/// One leg of a planned posting that moves money, with the account's totals after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedLeg {
    pub account_id: i64,
    pub direction: Direction,
    pub amount: Amount,
    pub after: Totals,
}

/// A posting the plan records: the record callers are answered with, the number of its key
/// and its legs' effects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedPosting {
    pub posting: Posting,
    pub key_id: i64,
    /// The legs that move money (journal entries), with their effects; empty for a hold or a
    /// release, whose legs (`posting.legs`) move nothing.
    pub legs: Vec<PlannedLeg>,
    /// For a posting that moves nothing (a hold, a release), its legs' account ids, in
    /// order; empty otherwise.
    pub held_accounts: Vec<i64>,
    /// For a posting that closes a hold with an expiry: that expiry and the hold's legs'
    /// account ids (the hold leaves the index of open expiring holds). A new hold with an
    /// expiry joins it with its own legs.
    pub closes_expiring: Option<(OffsetDateTime, Vec<i64>)>,
    /// The tree nodes its leaf completes, level 0 first (`crate::journal::Chain::append`);
    /// empty when the batch's chain is not caught up (then `posting.hash` is `None`).
    pub nodes: Vec<[u8; 32]>,
}

/// A version of an account's terms the plan records, with the number of its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedVersion {
    pub version: AccountVersion,
    pub key_id: i64,
}

/// A period close the plan records, with the number of its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedClose {
    pub close: PeriodClose,
    pub key_id: i64,
}

/// A state-dependent rejection the plan binds to its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedRejection {
    pub caller: String,
    pub key: String,
    pub error: LedgerError,
}

/// An account's totals after the batch, and the last sequence of the batch that touched it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FinalTotals {
    pub account_id: i64,
    pub scale: u8,
    pub totals: Totals,
    pub last_sequence: i64,
    /// The version of its terms in force after the batch.
    pub terms_version: i64,
}

/// What a batch writes and answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// In sequence order.
    pub postings: Vec<PlannedPosting>,
    /// In the order decided.
    pub versions: Vec<PlannedVersion>,
    /// In the order decided (each later than the one before).
    pub closes: Vec<PlannedClose>,
    pub rejections: Vec<PlannedRejection>,
    /// The accounts the postings and versions touch, by id.
    pub totals: Vec<FinalTotals>,
    /// The time the batch's postings are recorded from (their outbox rows carry it).
    pub base: OffsetDateTime,
    /// One per request, in order.
    pub outcomes: Vec<Outcome>,
    /// Requests refused without binding their keys, by index: they touch rows that break an
    /// invariant. A plan with any is never written (the batch's transaction claimed their
    /// keys): the writer runs the batch again without them.
    pub unbound: Vec<(usize, LedgerError)>,
    /// The ledger's chain after the plan's postings (`None`: not hashed, see
    /// `Snapshot::chain`): its root is the digest of the batch.
    pub chain: Option<Chain>,
}

impl Plan {
    /// The ledger's last sequence and recorded time after the plan, if it records anything.
    pub fn last(&self) -> Option<(i64, OffsetDateTime)> {
        self.postings
            .last()
            .map(|p| (p.posting.sequence as i64, p.posting.recorded_at))
    }

    /// Asserts what storage relies on before writing (a broken one is the ledger's own bug,
    /// so the process stops): sequences follow the clock without gaps, recorded times
    /// increase strictly after it, every posting is sound and balanced per currency, and
    /// nothing is refused unbound.
    pub fn assert_sound(&self, clock: &Clock) {
        assert!(
            self.unbound.is_empty(),
            "a plan with unbound refusals is written"
        );
        let mut last = (clock.last_sequence, clock.last_recorded_at);
        for p in &self.postings {
            let (seq, at) = (p.posting.sequence as i64, p.posting.recorded_at);
            assert_eq!(seq, last.0 + 1, "sequence {seq} follows {}", last.0);
            assert!(
                at > last.1 && at > clock.now,
                "posting {seq} recorded at {at}, not after {}",
                last.1
            );
            p.posting.assert_sound();
            let moves = p.posting.hold.is_none()
                && !matches!(p.posting.closes, Some(c) if c.kind != CloseKind::Capture);
            let want = if moves { p.posting.legs.len() } else { 0 };
            assert_eq!(
                p.legs.len(),
                want,
                "posting {seq}: the legs that move money"
            );
            let held = if moves { 0 } else { p.posting.legs.len() };
            assert_eq!(
                p.held_accounts.len(),
                held,
                "posting {seq}: the legs that move nothing"
            );
            assert_eq!(
                p.posting.hash.is_some(),
                self.chain.is_some(),
                "posting {seq}: hashed exactly when the chain is"
            );
            assert_eq!(
                p.nodes.is_empty(),
                p.posting.hash.is_none(),
                "posting {seq}: its nodes"
            );
            last = (seq, at);
        }
        if let (Some(c), Some((seq, _))) = (&self.chain, self.last()) {
            assert_eq!(
                c.frontier.size() as i64,
                crate::ledger::in_ledger(seq),
                "the chain ends at the plan's last posting"
            );
        }
    }
}
