//! The write path's vocabulary and its pure, total decision step.
//!
//! The writer runs each batch as admit → load → decide → write: the lane reads the postings
//! the batch's requests name and [`admit`] refuses what never changes (a posting that does not
//! exist or cannot be read, a capture its hold does not allow); storage loads a [`Snapshot`]
//! (the keys the batch claimed or found decided, the accounts and their totals, the named
//! postings' state, the ledger's last sequence and clock); [`decide`] turns the snapshot and
//! the requests into a [`Plan`]; storage writes the plan and commits. [`Rounds`] runs the
//! batch again without the requests a plan refused unbound. Every rule of the write path
//! lives here: idempotency (replays, keys reused for another request, duplicates inside a
//! batch), the void and hold rules, the no-negative rule and the totals limit (through the
//! [`Engine`](crate::engine::Engine)), the refusal of requests that touch corrupt rows, and
//! the time stamping (sequence and `recorded_at`). `decide` is total: for any snapshot it
//! returns a plan (a request naming what the snapshot lacks or cannot be is refused
//! unbound), never panics. No I/O, no async, no clock read: the clock and the new posting ids
//! are inputs.

mod admit;
mod command;
mod decider;
mod plan;
mod round;
mod snapshot;

pub use admit::{admit, named_by, NamedPostings, PendingCapture, Queued};
pub use command::{
    distinct_keys, update_windows, Command, Done, Operation, Outcome, ValidExpire, WriteRequest,
    Written,
};
pub use plan::{
    FinalTotals, Plan, PlannedClose, PlannedLeg, PlannedPosting, PlannedRejection, PlannedVersion,
};
pub use round::Rounds;
pub use snapshot::{
    AccountState, Clock, ExpiringHold, HeldLeg, KeyState, Snapshot, StoredDecision,
};

use crate::error::{LedgerError, Reason};
use crate::posting::Fingerprint;

use decider::{Decider, Refusal};
use std::collections::HashMap;
use uuid::Uuid;

/// How the first request of a key was decided.
struct Decision<'a> {
    operation: Operation,
    fingerprint: &'a Fingerprint,
    /// The request of this batch that decided it now (`None`: decided earlier).
    decided_by: Option<usize>,
    outcome: Result<Done, LedgerError>,
}

/// Decides a batch: the new requests in order against the snapshot, every request answered
/// from its key's decision. `new_ids` holds at least one id per request (the postings' ids,
/// taken in order). A plan that refuses any request unbound (`Plan::unbound`) plans nothing
/// else: the batch runs again without those requests ([`Rounds`]).
pub fn decide(s: &Snapshot, requests: &[WriteRequest], new_ids: &[Uuid]) -> Plan {
    let firsts = distinct_keys(requests);
    assert_eq!(
        firsts.len(),
        s.keys.len(),
        "one key state per distinct key of the batch"
    );
    assert!(new_ids.len() >= requests.len(), "an id for every request");
    let mut d = Decider::new(s);
    let mut ids = new_ids.iter().copied();
    let mut unbound = Vec::new();
    let mut decisions: HashMap<(&str, &str), Decision> = HashMap::with_capacity(firsts.len());
    for (&i, key) in firsts.iter().zip(&s.keys) {
        let r = &requests[i];
        let outcome = match key {
            KeyState::Claimed(key_id) => {
                let id = ids.next().expect("an id for every request");
                match d.decide_new(r, *key_id, id) {
                    Ok(done) => Ok(done),
                    Err(Refusal::Bound(e)) => Err(e),
                    Err(Refusal::Unbound(e)) => {
                        unbound.push((i, e));
                        continue;
                    }
                }
            }
            KeyState::Decided(stored) => {
                let decision = Decision {
                    operation: stored.operation,
                    fingerprint: &stored.fingerprint,
                    decided_by: None,
                    outcome: stored.outcome.clone(),
                };
                decisions.insert((r.caller.as_str(), r.command.key()), decision);
                continue;
            }
            KeyState::Unreadable(e) => {
                unbound.push((i, e.clone()));
                continue;
            }
        };
        let decision = Decision {
            operation: r.command.operation(),
            fingerprint: r.command.fingerprint(),
            decided_by: Some(i),
            outcome,
        };
        decisions.insert((r.caller.as_str(), r.command.key()), decision);
    }
    if !unbound.is_empty() {
        return d.into_plan(Vec::new(), unbound);
    }
    let outcomes = requests
        .iter()
        .enumerate()
        .map(|(i, r)| answer(r, i, &decisions[&(r.caller.as_str(), r.command.key())]))
        .collect();
    d.into_plan(outcomes, Vec::new())
}

/// The answer to request `i` from its key's decision: the decision itself for the request
/// that made it; for any other, a replay of it when the request means the same, else
/// `IDEMPOTENCY_KEY_REUSED`.
fn answer(r: &WriteRequest, i: usize, d: &Decision) -> Outcome {
    if d.decided_by == Some(i) {
        return d.outcome.clone().map(|done| Written {
            done,
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
    d.outcome.clone().map(|done| Written {
        done,
        replayed: true,
    })
}

#[cfg(test)]
mod model;
#[cfg(test)]
mod model_terms;
#[cfg(test)]
mod rules;
