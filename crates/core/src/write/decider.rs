//! The rules of each kind of request, applied in batch order against the snapshot: posts,
//! holds, voids (of postings and of holds, which release them), captures, and the ledger's
//! releases of expired holds.
//!
//! Time: each request is decided at the time it would be recorded at (the batch's base time
//! plus a microsecond per posting before it). A hold whose expiry time has passed by then is
//! expired for it, its release recorded or not: a capture or void of it is refused, and it
//! holds nothing for the funds rule (it *lapses*), exactly as a read at a cut-off at that
//! recorded time (and any effective time after the expiry) shows it.

use super::{
    Command, ExpiringHold, FinalTotals, KeyState, Outcome, Plan, PlannedLeg, PlannedPosting,
    PlannedRejection, Snapshot, WriteRequest,
};
use crate::account::Metadata;
use crate::engine::{Change, Engine, LegEffect, Totals};
use crate::error::{LedgerError, Reason};
use crate::hold::{check_expiry, within_hold, HoldTerms, PostingTerms, ValidCapture};
use crate::posting::{check_balanced, Leg, ValidPost, ValidVoid};
use crate::record::{expired_by, rfc3339, CloseKind, Closes, HoldState, PostedLeg, Posting};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

/// Refusals that bind nothing, by request index: requests that touch rows breaking an
/// invariant (replays of unreadable decisions, posts on corrupt accounts, voids, captures
/// and expiries of corrupt targets or targets on corrupt accounts), and requests the clock
/// made invalid after they were checked (a hold expiring before the batch's clock, an expiry
/// not yet due, which a later batch records). Their keys were claimed in the batch's
/// transaction, so the writer runs the batch again without them.
pub fn unbound_refusals(
    s: &Snapshot,
    requests: &[WriteRequest],
    firsts: &[usize],
) -> Vec<(usize, LedgerError)> {
    firsts
        .iter()
        .zip(&s.keys)
        .filter_map(|(&i, key)| {
            let refusal = match key {
                KeyState::Unreadable(e) => Some(e.clone()),
                KeyState::Decided(_) => None,
                KeyState::Claimed(_) => {
                    corrupt(s, &requests[i].command).or_else(|| untimely(s, &requests[i].command))
                }
            };
            refusal.map(|e| (i, e))
        })
        .collect()
}

/// The refusal of a new request that touches a corrupt row.
fn corrupt(s: &Snapshot, c: &Command) -> Option<LedgerError> {
    let account = |id: &i64| s.corrupt_accounts.get(id);
    let found = match (c, c.target()) {
        (Command::Post(p), _) => p.legs.iter().find_map(|l| account(&l.account_id)),
        (_, Some(target)) => s.corrupt_targets.get(&target).or_else(|| {
            s.targets.get(&target).and_then(|t| {
                t.legs
                    .iter()
                    .filter_map(|l| s.account_ids.get(&l.account))
                    .find_map(account)
            })
        }),
        (_, None) => None,
    };
    found.cloned()
}

/// The refusal of a new request the batch's clock makes invalid, or of a capture its hold
/// does not allow (checked by the lane before the batch; checked again against the snapshot's
/// hold).
fn untimely(s: &Snapshot, c: &Command) -> Option<LedgerError> {
    let now = s.clock.now;
    match c {
        Command::Post(p) => p.hold.and_then(|h| check_expiry(h.expires_at, now).err()),
        Command::Expire(x) => {
            let due = s
                .targets
                .get(&x.hold)
                .and_then(|h| h.hold)
                .and_then(|h| h.expires_at);
            match due {
                Some(t) if t <= now => None,
                _ => Some(LedgerError::new(
                    Reason::HoldNotPending,
                    format!("hold {} is not due to expire", x.hold),
                )),
            }
        }
        Command::Capture(cap) => {
            let hold = s.targets.get(&cap.hold)?;
            within_hold(&cap.legs, &PostingTerms::of(hold)).err()
        }
        Command::Void(_) => None,
    }
}

/// A posting being made, before it has a sequence.
struct NewPosting {
    /// The legs the posting shows.
    legs: Vec<Leg>,
    /// What it does to the totals: moves the legs, holds them, or releases a hold's legs.
    effect: Effect,
    effective_at: Option<OffsetDateTime>,
    memo: String,
    metadata: Metadata,
    voids: Option<(Uuid, String)>,
    hold: Option<HoldTerms>,
    closes: Option<Closes>,
}

enum Effect {
    Move,
    Hold,
    /// Moves the legs and releases these (the hold's).
    Capture(Vec<Leg>),
    /// Releases these (the hold's); moves nothing.
    Release(Vec<Leg>),
}

impl NewPosting {
    fn of_post(p: &ValidPost) -> NewPosting {
        NewPosting {
            legs: p.legs.clone(),
            effect: if p.hold.is_some() {
                Effect::Hold
            } else {
                Effect::Move
            },
            effective_at: p.effective_at,
            memo: p.memo.clone(),
            metadata: p.metadata.clone(),
            voids: None,
            hold: p.hold,
            closes: None,
        }
    }

    /// A posting of nothing but its legs and effect (a void, a release).
    fn bare(legs: Vec<Leg>, effect: Effect, effective_at: Option<OffsetDateTime>) -> NewPosting {
        NewPosting {
            legs,
            effect,
            effective_at,
            memo: String::new(),
            metadata: Metadata::new(),
            voids: None,
            hold: None,
            closes: None,
        }
    }

    /// The record: effective when recorded unless the request said otherwise.
    fn into_posting(
        self,
        sequence: i64,
        id: Uuid,
        recorded_at: OffsetDateTime,
        r: &WriteRequest,
    ) -> Posting {
        Posting {
            posting_id: id,
            sequence: sequence as u64,
            caller: r.caller.clone(),
            idempotency_key: r.command.key().to_owned(),
            legs: self
                .legs
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
            hold: self.hold.map(|h| HoldState {
                expires_at: h.expires_at,
                closed_by: None,
                lapsed: false,
            }),
            closes: self.closes,
        }
    }
}

/// Who closes a hold.
#[derive(Clone, Copy)]
enum Closing {
    /// A caller: a capture, a void.
    ByCaller,
    /// The ledger, at the hold's expiry.
    AtExpiry,
}

/// How a batch decides its new requests, in order.
pub struct Decider<'a> {
    snapshot: &'a Snapshot,
    engine: Engine,
    base: OffsetDateTime,
    postings: Vec<PlannedPosting>,
    rejections: Vec<PlannedRejection>,
    /// Postings voided by this batch: target → its void.
    voided_now: HashMap<Uuid, Uuid>,
    /// Holds closed by this batch: hold → the posting that closed it, and how.
    closed_now: HashMap<Uuid, (Uuid, CloseKind)>,
    /// Accounts the postings touched (money or held), with the last sequence that did.
    touched: HashMap<i64, i64>,
    /// Open holds with an expiry not lapsed yet, soonest first: (expiry, index in `holds`).
    due: BinaryHeap<Reverse<(OffsetDateTime, usize)>>,
    /// Those holds: id, and legs on the batch's accounts.
    holds: Vec<(Uuid, Vec<Leg>)>,
    /// Holds that lapsed in this batch (their expiry time passed), with the legs lapsed.
    lapsed: HashMap<Uuid, Vec<Leg>>,
}

impl<'a> Decider<'a> {
    pub fn new(s: &'a Snapshot) -> Decider<'a> {
        let (totals, rules) = s
            .accounts
            .iter()
            .map(|(&id, a)| ((id, a.totals), (id, a.rule.clone())))
            .unzip();
        let base = s.clock.base();
        let mut d = Decider {
            snapshot: s,
            engine: Engine::new(totals, rules),
            base,
            postings: Vec::new(),
            rejections: Vec::new(),
            voided_now: HashMap::new(),
            closed_now: HashMap::new(),
            touched: HashMap::new(),
            due: BinaryHeap::new(),
            holds: Vec::new(),
            lapsed: HashMap::new(),
        };
        for h in &s.expiring {
            let legs = d.expiring_legs(h);
            d.expires(h.hold, h.expires_at, legs);
        }
        d
    }

    /// The time the next posting of the batch is recorded at: the request being decided
    /// is decided then.
    fn now(&self) -> OffsetDateTime {
        self.base + Duration::microseconds(self.postings.len() as i64)
    }

    /// An expiring hold's legs on the batch's accounts (legs on accounts the batch did not
    /// load are no concern of its funds rule).
    fn expiring_legs(&self, h: &ExpiringHold) -> Vec<Leg> {
        h.legs
            .iter()
            .filter_map(|l| {
                let rule = &self.snapshot.accounts.get(&l.account_id)?.rule;
                Some(Leg {
                    account_id: l.account_id,
                    account_code: rule.code.clone(),
                    currency: rule.currency.clone(),
                    direction: l.direction,
                    amount: l.amount,
                })
            })
            .collect()
    }

    /// An open hold that lapses at `at` if nothing closes it first.
    fn expires(&mut self, hold: Uuid, at: OffsetDateTime, legs: Vec<Leg>) {
        self.due.push(Reverse((at, self.holds.len())));
        self.holds.push((hold, legs));
    }

    /// Every open hold whose expiry time has passed by [`Decider::now`] lapses: it holds
    /// nothing for the funds rule from now on.
    fn lapse_due(&mut self) {
        let now = self.now();
        while let Some(&Reverse((at, i))) = self.due.peek() {
            if !expired_by(Some(at), now) {
                break;
            }
            self.due.pop();
            let (hold, legs) = std::mem::take(&mut self.holds[i]);
            if self.closed_now.contains_key(&hold) {
                continue;
            }
            self.engine.lapse(&legs, 1);
            self.lapsed.insert(hold, legs);
        }
    }

    /// Decides a request whose key this batch claimed: a posting, or a rejection bound to
    /// the key.
    pub fn decide_new(
        &mut self,
        r: &WriteRequest,
        key_id: i64,
        id: Uuid,
    ) -> Result<Posting, LedgerError> {
        self.lapse_due();
        let new = match &r.command {
            Command::Post(p) => Ok(NewPosting::of_post(p)),
            Command::Void(v) => self.void(v),
            Command::Capture(c) => self.capture(c),
            Command::Expire(x) => {
                self.pending_hold(x.hold, Closing::AtExpiry)
                    .map(|(hold, held)| NewPosting {
                        closes: Some(Closes {
                            hold: hold.posting_id,
                            kind: CloseKind::Expire,
                        }),
                        ..NewPosting::bare(
                            swapped(&held),
                            Effect::Release(held),
                            hold.hold.and_then(|h| h.expires_at),
                        )
                    })
            }
        };
        let decided = new.and_then(|new| self.record(r, key_id, id, new));
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

    /// A void: of a hold, its release; of any other posting, its legs swapped.
    fn void(&self, v: &ValidVoid) -> Result<NewPosting, LedgerError> {
        let target = self.target(v.target);
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
        if let Some(c) = target.closes.filter(|c| c.kind == CloseKind::Expire) {
            return Err(LedgerError::new(
                Reason::VoidOfVoid,
                format!(
                    "posting {} is the release of expired hold {}; a release cannot be voided",
                    target.posting_id, c.hold
                ),
            )
            .with("posting_id", target.posting_id));
        }
        let voids = Some((target.posting_id, v.reason.clone()));
        if target.hold.is_some() {
            let (hold, held) = self.pending_hold(target.posting_id, Closing::ByCaller)?;
            let closes = Some(Closes {
                hold: hold.posting_id,
                kind: CloseKind::Release,
            });
            return Ok(NewPosting {
                voids,
                closes,
                ..NewPosting::bare(swapped(&held), Effect::Release(held), v.effective_at)
            });
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
        let legs = swapped(&self.resolved(target));
        Ok(NewPosting {
            voids,
            ..NewPosting::bare(legs, Effect::Move, v.effective_at)
        })
    }

    /// A capture of a pending hold: moves the captured legs, releases the hold's.
    fn capture(&self, c: &ValidCapture) -> Result<NewPosting, LedgerError> {
        let (hold, held) = self.pending_hold(c.hold, Closing::ByCaller)?;
        Ok(NewPosting {
            memo: c.memo.clone(),
            metadata: c.metadata.clone(),
            closes: Some(Closes {
                hold: hold.posting_id,
                kind: CloseKind::Capture,
            }),
            ..NewPosting::bare(c.legs.clone(), Effect::Capture(held), c.effective_at)
        })
    }

    fn target(&self, id: Uuid) -> &'a Posting {
        self.snapshot
            .targets
            .get(&id)
            .unwrap_or_else(|| panic!("target {id} was checked to exist"))
    }

    /// A hold still open, and its legs; else why not (`HOLD_NOT_PENDING`, naming its state
    /// and the posting that closed it, or its expiry time). A caller's capture or release
    /// also finds it closed once its expiry time has passed, recorded or not.
    fn pending_hold(&self, id: Uuid, by: Closing) -> Result<(&'a Posting, Vec<Leg>), LedgerError> {
        let hold = self.target(id);
        let state = hold
            .hold
            .unwrap_or_else(|| panic!("posting {id} was checked to be a hold"));
        let closed = state
            .closed_by
            .or_else(|| self.closed_now.get(&id).copied());
        let refuse =
            |why: String| Err(LedgerError::new(Reason::HoldNotPending, why).with("posting_id", id));
        if let Some((by, kind)) = closed {
            let how = match kind {
                CloseKind::Capture => "captured",
                CloseKind::Release => "released",
                CloseKind::Expire => "expired",
            };
            return refuse(format!(
                "hold {id} is no longer pending: it was {how} by posting {by}"
            ));
        }
        let expired = state
            .expires_at
            .filter(|&t| expired_by(Some(t), self.now()));
        if let (Some(t), Closing::ByCaller) = (expired, by) {
            return refuse(format!(
                "hold {id} is no longer pending: it expired at {} (the ledger records its release)",
                rfc3339(t)
            ));
        }
        Ok((hold, self.resolved(hold)))
    }

    /// A recorded posting's legs, resolved against the snapshot's accounts.
    fn resolved(&self, p: &Posting) -> Vec<Leg> {
        p.legs
            .iter()
            .map(|l| {
                let id = self.snapshot.account_ids[&l.account];
                let rule = &self.snapshot.accounts[&id].rule;
                Leg {
                    account_id: id,
                    account_code: rule.code.clone(),
                    currency: rule.currency.clone(),
                    direction: l.direction,
                    amount: l.amount,
                }
            })
            .collect()
    }

    /// Applies the posting to the totals (whole, or refused whole) and records it at the next
    /// sequence.
    fn record(
        &mut self,
        r: &WriteRequest,
        key_id: i64,
        id: Uuid,
        new: NewPosting,
    ) -> Result<Posting, LedgerError> {
        let effects = self.apply(&new)?;
        check_balanced(&new.legs)
            .unwrap_or_else(|e| panic!("unbalanced posting reached the writer: {e}"));
        let n = self.postings.len() as i64;
        let sequence = self.snapshot.clock.last_sequence + n + 1;
        let released: Vec<i64> = match &new.effect {
            Effect::Capture(h) | Effect::Release(h) => h.iter().map(|l| l.account_id).collect(),
            _ => Vec::new(),
        };
        for account in new.legs.iter().map(|l| l.account_id).chain(released) {
            self.touched.insert(account, sequence);
        }
        let held_accounts = if effects.is_empty() {
            new.legs.iter().map(|l| l.account_id).collect()
        } else {
            Vec::new()
        };
        let legs = new
            .legs
            .iter()
            .zip(&effects)
            .map(|(l, e)| PlannedLeg {
                account_id: l.account_id,
                direction: l.direction,
                amount: l.amount,
                after: e.after,
            })
            .collect();
        let closes_expiring = new.closes.and_then(|c| {
            let hold = self.target(c.hold);
            let at = hold.hold.and_then(|h| h.expires_at)?;
            Some((
                at,
                self.resolved(hold).iter().map(|l| l.account_id).collect(),
            ))
        });
        let opened = new
            .hold
            .and_then(|h| h.expires_at)
            .map(|t| (t, new.legs.clone()));
        let posting = new.into_posting(sequence, id, self.now(), r);
        if let Some((at, legs)) = opened {
            self.expires(posting.posting_id, at, legs);
        }
        self.remember(&posting);
        self.postings.push(PlannedPosting {
            posting: posting.clone(),
            key_id,
            legs,
            held_accounts,
            closes_expiring,
        });
        Ok(posting)
    }

    /// Applies the posting's effect to the totals, whole or not at all. A lapsed hold closed
    /// now (by its expiry's release) stops being lapsed as it leaves the held totals.
    fn apply(&mut self, new: &NewPosting) -> Result<Vec<LegEffect>, LedgerError> {
        let change = match &new.effect {
            Effect::Move => Change::Move(&new.legs),
            Effect::Hold => Change::Hold(&new.legs),
            Effect::Capture(held) => Change::Capture {
                captured: &new.legs,
                hold: held,
            },
            Effect::Release(held) => Change::Release(held),
        };
        let unlapsed = new.closes.and_then(|c| self.lapsed.remove(&c.hold));
        if let Some(legs) = &unlapsed {
            self.engine.lapse(legs, -1);
        }
        let applied = self.engine.change(change);
        if let (Err(_), Some(legs), Some(c)) = (&applied, unlapsed, new.closes) {
            self.engine.lapse(&legs, 1);
            self.lapsed.insert(c.hold, legs);
        }
        applied
    }

    /// What later requests of the batch must see: voids and closed holds.
    fn remember(&mut self, p: &Posting) {
        if let Some(target) = p.voids_posting_id {
            self.voided_now.insert(target, p.posting_id);
        }
        if let Some(c) = p.closes {
            self.closed_now.insert(c.hold, (p.posting_id, c.kind));
        }
    }

    /// The plan: the final totals of every account a posting touched, and the outcomes.
    pub fn into_plan(self, outcomes: Vec<Outcome>) -> Plan {
        let accounts = &self.snapshot.accounts;
        let totals: HashMap<i64, Totals> = self.engine.into_totals();
        let mut totals: Vec<FinalTotals> = self
            .touched
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

/// Legs with their directions swapped (a void's, a release's).
fn swapped(legs: &[Leg]) -> Vec<Leg> {
    legs.iter()
        .map(|l| Leg {
            direction: l.direction.swapped(),
            ..l.clone()
        })
        .collect()
}
