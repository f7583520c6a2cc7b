//! The write path's vocabulary and its pure decision step.
//!
//! The writer runs each batch as load → decide → write: storage loads a [`Snapshot`] (the
//! keys the batch claimed or found decided, the accounts' rules and totals, the void
//! targets, the ledger's last sequence and clock), [`decide`] turns the snapshot and the
//! requests into a [`Plan`], and storage writes the plan and commits. Every rule of the
//! write path lives here: idempotency (replays, keys reused for another request, duplicates
//! inside a batch), the void rules, the no-negative rule and the totals limit (through the
//! [`Engine`](super::engine::Engine)), the refusal of requests that touch corrupt rows, and the time stamping
//! (sequence and `recorded_at`). No I/O, no async, no clock read: the clock and the new
//! posting ids are inputs.

use super::account::Direction;
use super::amount::Amount;
use super::engine::{Rule, Totals};
use super::error::{LedgerError, Reason};
use super::hold::{expiry_key, ValidCapture, LEDGER_CALLER};
use super::posting::{Fingerprint, ValidPost, ValidVoid};
use super::record::{CloseKind, Decided, Posting};
use std::collections::HashMap;
use time::OffsetDateTime;
use uuid::Uuid;

/// What a caller asked the writer to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Post(ValidPost),
    Void(ValidVoid),
    Capture(ValidCapture),
    /// The ledger's own release of an expired hold (caller [`LEDGER_CALLER`]).
    Expire(ValidExpire),
}

/// The release of an expired hold, as the expiry task asks for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidExpire {
    pub idempotency_key: String,
    pub hold: Uuid,
    pub fingerprint: Fingerprint,
}

impl ValidExpire {
    /// The release of `hold`, under its own key (`expire:<hold>`).
    pub fn of(hold: Uuid) -> ValidExpire {
        let mut fingerprint = [0u8; 32];
        fingerprint[..16].copy_from_slice(hold.as_bytes());
        fingerprint[16..].copy_from_slice(b"expire/v1\0\0\0\0\0\0\0");
        ValidExpire {
            idempotency_key: expiry_key(hold),
            hold,
            fingerprint,
        }
    }

    /// The request the expiry task submits.
    pub fn request(hold: Uuid) -> WriteRequest {
        WriteRequest {
            caller: LEDGER_CALLER.to_owned(),
            command: Command::Expire(ValidExpire::of(hold)),
        }
    }
}

/// The operation a key was decided by (stored with the key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Post,
    Void,
    Capture,
    Expire,
}

impl Operation {
    /// As stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Post => "post",
            Operation::Void => "void",
            Operation::Capture => "capture",
            Operation::Expire => "expire",
        }
    }

    /// From its stored name.
    pub fn parse(s: &str) -> Option<Operation> {
        match s {
            "post" => Some(Operation::Post),
            "void" => Some(Operation::Void),
            "capture" => Some(Operation::Capture),
            "expire" => Some(Operation::Expire),
            _ => None,
        }
    }
}

impl Command {
    /// The caller's idempotency key.
    pub fn key(&self) -> &str {
        match self {
            Command::Post(p) => &p.idempotency_key,
            Command::Void(v) => &v.idempotency_key,
            Command::Capture(c) => &c.idempotency_key,
            Command::Expire(x) => &x.idempotency_key,
        }
    }

    pub fn operation(&self) -> Operation {
        match self {
            Command::Post(_) => Operation::Post,
            Command::Void(_) => Operation::Void,
            Command::Capture(_) => Operation::Capture,
            Command::Expire(_) => Operation::Expire,
        }
    }

    /// What the request means (two requests under one key are the same when these agree).
    pub fn fingerprint(&self) -> &Fingerprint {
        match self {
            Command::Post(p) => &p.fingerprint,
            Command::Void(v) => &v.fingerprint,
            Command::Capture(c) => &c.fingerprint,
            Command::Expire(x) => &x.fingerprint,
        }
    }

    /// The posting this request acts on, if any: a void's target, a capture's or an
    /// expiry's hold.
    pub fn target(&self) -> Option<Uuid> {
        match self {
            Command::Post(_) => None,
            Command::Void(v) => Some(v.target),
            Command::Capture(c) => Some(c.hold),
            Command::Expire(x) => Some(x.hold),
        }
    }
}

/// One request in a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteRequest {
    pub caller: String,
    pub command: Command,
}

/// The answer to one request.
pub type Outcome = Result<Decided, LedgerError>;

/// The first request of each distinct (caller, key), in batch order: the requests storage
/// claims keys for and [`Snapshot::keys`] follows. Later requests with a key already seen
/// in the batch are answered from the first.
pub fn distinct_keys(requests: &[WriteRequest]) -> Vec<usize> {
    let mut seen: HashMap<(&str, &str), ()> = HashMap::with_capacity(requests.len());
    (0..requests.len())
        .filter(|&i| {
            let r = &requests[i];
            seen.insert((r.caller.as_str(), r.command.key()), ())
                .is_none()
        })
        .collect()
}

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
    pub outcome: Result<Posting, LedgerError>,
}

/// An account's rules and totals as the batch found them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountState {
    pub rule: Rule,
    pub totals: Totals,
}

/// Everything a batch's decision needs, loaded by storage under the ledger's write lock.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub clock: Clock,
    /// One per [`distinct_keys`] of the batch, in that order.
    pub keys: Vec<KeyState>,
    /// The accounts the batch's new requests touch (posts' legs, void targets' legs).
    pub accounts: HashMap<i64, AccountState>,
    /// Account ids by code, for the accounts of void targets (whose legs name codes).
    pub account_ids: HashMap<String, i64>,
    /// The void targets of the batch's new requests, by id.
    pub targets: HashMap<Uuid, Posting>,
    /// Accounts whose rows break an invariant, with the refusal of requests touching them.
    pub corrupt_accounts: HashMap<i64, LedgerError>,
    /// Void targets that cannot be read, with the refusal of voids of them.
    pub corrupt_targets: HashMap<Uuid, LedgerError>,
    /// The open holds with an expiry that have legs on the batch's accounts, their legs there:
    /// at least those due by the last time the batch can record at ([`Clock::base`] plus a
    /// microsecond per request; later ones are ignored). A hold stops
    /// counting against the funds rule at its expiry time, before its release is recorded.
    pub expiring: Vec<ExpiringHold>,
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
}

/// What a batch writes and answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// In sequence order.
    pub postings: Vec<PlannedPosting>,
    pub rejections: Vec<PlannedRejection>,
    /// The accounts the postings touch, by id.
    pub totals: Vec<FinalTotals>,
    /// The time the batch's postings are recorded from (their outbox rows carry it).
    pub base: OffsetDateTime,
    /// One per request, in order.
    pub outcomes: Vec<Outcome>,
    /// Requests refused without binding their keys, by index: they touch rows that break an
    /// invariant. A plan with any is never written (the batch's transaction claimed their
    /// keys): the writer runs the batch again without them.
    pub unbound: Vec<(usize, LedgerError)>,
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
            last = (seq, at);
        }
    }
}

mod decider;

use decider::{unbound_refusals, Decider};

/// How the first request of a key was decided.
struct Decision<'a> {
    operation: Operation,
    fingerprint: &'a Fingerprint,
    /// The request of this batch that decided it now (`None`: decided earlier).
    decided_by: Option<usize>,
    outcome: Result<Posting, LedgerError>,
}

/// Decides a batch: the new requests in order against the snapshot, every request answered
/// from its key's decision. `new_ids` holds at least one id per request (the postings' ids,
/// taken in order).
pub fn decide(s: &Snapshot, requests: &[WriteRequest], new_ids: &[Uuid]) -> Plan {
    let firsts = distinct_keys(requests);
    assert_eq!(
        firsts.len(),
        s.keys.len(),
        "one key state per distinct key of the batch"
    );
    assert!(new_ids.len() >= requests.len(), "an id for every request");
    let unbound = unbound_refusals(s, requests, &firsts);
    let mut d = Decider::new(s);
    if !unbound.is_empty() {
        return Plan {
            unbound,
            ..d.into_plan(Vec::new())
        };
    }
    let mut ids = new_ids.iter().copied();
    let mut decisions: HashMap<(&str, &str), Decision> = HashMap::with_capacity(firsts.len());
    for (&i, key) in firsts.iter().zip(&s.keys) {
        let r = &requests[i];
        let decision = match key {
            KeyState::Claimed(key_id) => {
                let id = ids.next().expect("an id for every request");
                Decision {
                    operation: r.command.operation(),
                    fingerprint: r.command.fingerprint(),
                    decided_by: Some(i),
                    outcome: d.decide_new(r, *key_id, id),
                }
            }
            KeyState::Decided(stored) => Decision {
                operation: stored.operation,
                fingerprint: &stored.fingerprint,
                decided_by: None,
                outcome: stored.outcome.clone(),
            },
            KeyState::Unreadable(_) => unreachable!("refused above"),
        };
        decisions.insert((r.caller.as_str(), r.command.key()), decision);
    }
    let outcomes = requests
        .iter()
        .enumerate()
        .map(|(i, r)| answer(r, i, &decisions[&(r.caller.as_str(), r.command.key())]))
        .collect();
    d.into_plan(outcomes)
}

/// The answer to request `i` from its key's decision: the decision itself for the request
/// that made it; for any other, a replay of it when the request means the same, else
/// `IDEMPOTENCY_KEY_REUSED`.
fn answer(r: &WriteRequest, i: usize, d: &Decision) -> Outcome {
    if d.decided_by == Some(i) {
        return d.outcome.clone().map(|posting| Decided {
            posting,
            replayed: false,
        });
    }
    if d.operation != r.command.operation() || d.fingerprint != r.command.fingerprint() {
        return Err(LedgerError::new(
            Reason::IdempotencyKeyReused,
            format!(
                "idempotency key {:?} was already used by caller {:?} for a different {} request; send a new key for a new request",
                r.command.key(),
                r.caller,
                d.operation.as_str()
            ),
        )
        .with("idempotency_key", r.command.key()));
    }
    d.outcome.clone().map(|posting| Decided {
        posting,
        replayed: true,
    })
}

#[cfg(test)]
mod model;
#[cfg(test)]
mod rules;
