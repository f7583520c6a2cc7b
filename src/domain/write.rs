//! The write path's vocabulary and its pure decision step.
//!
//! The writer runs each batch as load → decide → write: storage loads a [`Snapshot`] (the
//! keys the batch claimed or found decided, the accounts' rules and totals, the void
//! targets, the ledger's last sequence and clock), [`decide`] turns the snapshot and the
//! requests into a [`Plan`], and storage writes the plan and commits. Every rule of the
//! write path lives here: idempotency (replays, keys reused for another request, duplicates
//! inside a batch), the void rules, the no-negative rule and the totals limit (through the
//! [`Engine`]), the refusal of requests that touch corrupt rows, and the time stamping
//! (sequence and `recorded_at`). No I/O, no async, no clock read: the clock and the new
//! posting ids are inputs.

use super::account::{Direction, Metadata};
use super::amount::Amount;
use super::engine::{Engine, Rule, Totals};
use super::error::{LedgerError, Reason};
use super::posting::{check_balanced, Fingerprint, Leg, ValidPost, ValidVoid};
use super::record::{Decided, PostedLeg, Posting};
use std::collections::HashMap;
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

/// What a caller asked the writer to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Post(ValidPost),
    Void(ValidVoid),
}

/// The operation a key was decided by (stored with the key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Post,
    Void,
}

impl Operation {
    /// As stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Post => "post",
            Operation::Void => "void",
        }
    }

    /// From its stored name.
    pub fn parse(s: &str) -> Option<Operation> {
        match s {
            "post" => Some(Operation::Post),
            "void" => Some(Operation::Void),
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
        }
    }

    pub fn operation(&self) -> Operation {
        match self {
            Command::Post(_) => Operation::Post,
            Command::Void(_) => Operation::Void,
        }
    }

    /// What the request means (two requests under one key are the same when these agree).
    pub fn fingerprint(&self) -> &Fingerprint {
        match self {
            Command::Post(p) => &p.fingerprint,
            Command::Void(v) => &v.fingerprint,
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
}

/// One leg of a planned posting, with the account's totals after it.
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
    pub legs: Vec<PlannedLeg>,
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
            assert_eq!(p.legs.len(), p.posting.legs.len());
            last = (seq, at);
        }
    }
}

/// Refusals of the requests that touch rows breaking an invariant (by request index), which
/// bind nothing: replays of unreadable decisions, posts on corrupt accounts, voids of corrupt
/// targets or of targets on corrupt accounts.
fn corrupt_refusals(
    s: &Snapshot,
    requests: &[WriteRequest],
    firsts: &[usize],
) -> Vec<(usize, LedgerError)> {
    let account = |id: &i64| s.corrupt_accounts.get(id);
    firsts
        .iter()
        .zip(&s.keys)
        .filter_map(|(&i, key)| {
            let refusal = match (key, &requests[i].command) {
                (KeyState::Unreadable(e), _) => Some(e),
                (KeyState::Decided(_), _) => None,
                (KeyState::Claimed(_), Command::Post(p)) => {
                    p.legs.iter().find_map(|l| account(&l.account_id))
                }
                (KeyState::Claimed(_), Command::Void(v)) => {
                    s.corrupt_targets.get(&v.target).or_else(|| {
                        s.targets.get(&v.target).and_then(|t| {
                            t.legs
                                .iter()
                                .filter_map(|l| s.account_ids.get(&l.account))
                                .find_map(account)
                        })
                    })
                }
            };
            refusal.map(|e| (i, e.clone()))
        })
        .collect()
}

/// How a batch decides its new requests, in order.
struct Decider<'a> {
    snapshot: &'a Snapshot,
    engine: Engine,
    base: OffsetDateTime,
    postings: Vec<PlannedPosting>,
    rejections: Vec<PlannedRejection>,
    /// Targets voided by this batch: target → its void.
    voided_now: HashMap<Uuid, Uuid>,
}

impl<'a> Decider<'a> {
    fn new(s: &'a Snapshot) -> Decider<'a> {
        let (totals, rules) = s
            .accounts
            .iter()
            .map(|(&id, a)| ((id, a.totals), (id, a.rule.clone())))
            .unzip();
        // Strictly after the clock any fenced reader saw, and after the last batch.
        let tick = Duration::microseconds(1);
        let base = (s.clock.now + tick).max(s.clock.last_recorded_at + tick);
        Decider {
            snapshot: s,
            engine: Engine::new(totals, rules),
            base,
            postings: Vec::new(),
            rejections: Vec::new(),
            voided_now: HashMap::new(),
        }
    }

    /// Decides a request whose key this batch claimed: a posting, or a rejection bound to
    /// the key.
    fn decide_new(
        &mut self,
        r: &WriteRequest,
        key_id: i64,
        id: Uuid,
    ) -> Result<Posting, LedgerError> {
        let decided = match &r.command {
            Command::Post(p) => self.record(r, key_id, id, p.legs.clone(), NewPosting::of_post(p)),
            Command::Void(v) => self
                .void_legs(v)
                .and_then(|(legs, new)| self.record(r, key_id, id, legs, new)),
        };
        if let Err(e) = &decided {
            assert!(
                e.binds_key(),
                "writer rejection {e} must be state-dependent"
            );
            self.rejections.push(PlannedRejection {
                caller: r.caller.clone(),
                key: r.command.key().to_owned(),
                error: e.clone(),
            });
        }
        decided
    }

    /// A void's legs (its target's, directions swapped), or why the target cannot be voided.
    fn void_legs(&self, v: &ValidVoid) -> Result<(Vec<Leg>, NewPosting), LedgerError> {
        let target = self
            .snapshot
            .targets
            .get(&v.target)
            .unwrap_or_else(|| panic!("void target {} was checked to exist", v.target));
        if let Some(of) = target.voids_posting_id {
            return Err(LedgerError::new(
                Reason::VoidOfVoid,
                format!(
                    "posting {} is itself a void (of {of}); a void cannot be voided",
                    target.posting_id
                ),
            )
            .with("posting_id", target.posting_id));
        }
        let voided_by = target
            .voided_by_posting_id
            .or_else(|| self.voided_now.get(&target.posting_id).copied());
        if let Some(by) = voided_by {
            return Err(LedgerError::new(
                Reason::AlreadyVoided,
                format!(
                    "posting {} was already voided by posting {by}",
                    target.posting_id
                ),
            )
            .with("posting_id", target.posting_id));
        }
        let legs = target.legs.iter().map(|l| self.swapped(l)).collect();
        Ok((legs, NewPosting::of_void(v, target)))
    }

    /// A target's leg with its direction swapped, resolved against its account.
    fn swapped(&self, l: &PostedLeg) -> Leg {
        let id = self.snapshot.account_ids[&l.account];
        let rule = &self.snapshot.accounts[&id].rule;
        Leg {
            account_id: id,
            account_code: rule.code.clone(),
            currency: rule.currency.clone(),
            direction: l.direction.swapped(),
            amount: l.amount,
        }
    }

    /// Applies legs (whole, or refused whole) and records the posting at the next sequence.
    fn record(
        &mut self,
        r: &WriteRequest,
        key_id: i64,
        id: Uuid,
        legs: Vec<Leg>,
        new: NewPosting,
    ) -> Result<Posting, LedgerError> {
        let effects = self.engine.apply(&legs)?;
        check_balanced(&legs)
            .unwrap_or_else(|e| panic!("unbalanced posting reached the writer: {e}"));
        let n = self.postings.len() as i64;
        let recorded_at = self.base + Duration::microseconds(n);
        let posting = new.into_posting(
            self.snapshot.clock.last_sequence + n + 1,
            id,
            recorded_at,
            r,
            &legs,
        );
        if let Some(target) = posting.voids_posting_id {
            self.voided_now.insert(target, id);
        }
        let planned = legs
            .iter()
            .zip(&effects)
            .map(|(l, e)| PlannedLeg {
                account_id: l.account_id,
                direction: l.direction,
                amount: l.amount,
                after: e.after,
            })
            .collect();
        self.postings.push(PlannedPosting {
            posting: posting.clone(),
            key_id,
            legs: planned,
        });
        Ok(posting)
    }

    /// The plan: the final totals of every account a posting touched, and the outcomes.
    fn into_plan(self, outcomes: Vec<Outcome>) -> Plan {
        let mut last_of: HashMap<i64, i64> = HashMap::new();
        for p in &self.postings {
            for l in &p.legs {
                last_of.insert(l.account_id, p.posting.sequence as i64);
            }
        }
        let accounts = &self.snapshot.accounts;
        let totals = self.engine.into_totals();
        let mut totals: Vec<FinalTotals> = last_of
            .into_iter()
            .map(|(id, last_sequence)| FinalTotals {
                account_id: id,
                scale: accounts[&id].rule.scale,
                totals: totals[&id],
                last_sequence,
            })
            .collect();
        totals.sort_unstable_by_key(|t| t.account_id);
        Plan {
            postings: self.postings,
            rejections: self.rejections,
            totals,
            base: self.base,
            outcomes,
            unbound: Vec::new(),
        }
    }
}

/// A posting before it has a sequence.
struct NewPosting {
    effective_at: Option<OffsetDateTime>,
    memo: String,
    metadata: Metadata,
    voids: Option<(Uuid, String)>,
}

impl NewPosting {
    fn of_post(p: &ValidPost) -> NewPosting {
        NewPosting {
            effective_at: p.effective_at,
            memo: p.memo.clone(),
            metadata: p.metadata.clone(),
            voids: None,
        }
    }

    fn of_void(v: &ValidVoid, target: &Posting) -> NewPosting {
        NewPosting {
            effective_at: v.effective_at,
            memo: String::new(),
            metadata: Metadata::new(),
            voids: Some((target.posting_id, v.reason.clone())),
        }
    }

    /// The record: effective when recorded unless the request said otherwise.
    fn into_posting(
        self,
        sequence: i64,
        id: Uuid,
        recorded_at: OffsetDateTime,
        r: &WriteRequest,
        legs: &[Leg],
    ) -> Posting {
        Posting {
            posting_id: id,
            sequence: sequence as u64,
            caller: r.caller.clone(),
            idempotency_key: r.command.key().to_owned(),
            legs: legs
                .iter()
                .map(|l| PostedLeg {
                    account: l.account_code.clone(),
                    direction: l.direction,
                    amount: l.amount,
                })
                .collect(),
            effective_at: self.effective_at.unwrap_or(recorded_at),
            recorded_at,
            memo: self.memo,
            metadata: self.metadata,
            voids_posting_id: self.voids.as_ref().map(|v| v.0),
            voided_by_posting_id: None,
            void_reason: self.voids.map(|v| v.1),
        }
    }
}

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
    let unbound = corrupt_refusals(s, requests, &firsts);
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
