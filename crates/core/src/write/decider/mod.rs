//! The rules of each kind of request, applied in batch order against the snapshot: posts,
//! holds, voids (of postings and of holds, which release them), captures, and the ledger's
//! releases of expired holds.
//!
//! Time: each request is decided at the time it would be recorded at (the batch's base time
//! plus a microsecond per posting before it). A hold whose expiry time has passed by then is
//! expired for it, its release recorded or not: a capture or void of it is refused, and it
//! holds nothing for the funds rule (it *lapses*), exactly as a read at a cut-off at that
//! recorded time (and any effective time after the expiry) shows it.

mod named;
mod period;
mod terms;

use crate::account::Metadata;
use crate::engine::{available_of, AccountState, Effect, Engine, LegEffect, Totals};
use crate::error::{LedgerError, Reason};
use crate::journal::Chain;
use crate::ledger;
use crate::posting::{check_balanced, check_expiry, HoldTerms, Leg, ValidPost};
use crate::record::{expired_by, CloseKind, Closes, HoldState, PostedLeg, Posting};
use crate::write::{
    Command, Done, ExpiringHold, FinalTotals, Outcome, Plan, PlannedClose, PlannedLeg,
    PlannedPosting, PlannedRejection, PlannedVersion, Snapshot, WriteRequest,
};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

/// Why a new request is not recorded.
pub enum Refusal {
    /// A rule of the ledger's state refused it (`INSUFFICIENT_FUNDS`, `HOLD_NOT_PENDING`, …):
    /// the refusal binds its key and is replayed.
    Bound(LedgerError),
    /// It touches a row that breaks an invariant (`JOURNAL_CORRUPT`), names a posting the
    /// snapshot does not hold, or the clock made it invalid after it was checked (a hold
    /// expiring before the batch's clock, an expiry not yet due): it binds nothing. Its key
    /// was claimed in the batch's transaction, so the writer runs the batch again without it.
    Unbound(LedgerError),
}

impl From<LedgerError> for Refusal {
    /// The engine's refusals: its rules bind (`INSUFFICIENT_FUNDS`, `LIMIT_EXCEEDED`), what it
    /// finds impossible (`JOURNAL_CORRUPT`) does not.
    fn from(e: LedgerError) -> Refusal {
        if e.binds_key() {
            Refusal::Bound(e)
        } else {
            Refusal::Unbound(e)
        }
    }
}

/// A recorded posting whose legs do not balance: a row written behind the ledger's back.
fn unbalanced_named(p: &Posting, e: &LedgerError) -> Refusal {
    Refusal::Unbound(LedgerError::journal_corrupt(
        &format!("posting {}", p.posting_id),
        Some(p.sequence as i64),
        &format!("its legs do not balance: {}", e.message),
    ))
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
            hash: None,
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
    /// The snapshot's corrupt accounts, and those whose totals or expiring holds are
    /// impossible ([`AccountState::check`]).
    corrupt_accounts: HashMap<i64, LedgerError>,
    base: OffsetDateTime,
    postings: Vec<PlannedPosting>,
    versions: Vec<PlannedVersion>,
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
    /// The ledger's chain, each posting appended as it is recorded (`None`: the journal is not
    /// hashed up to the ledger's last posting yet; `ledger migrate` hashes it).
    chain: Option<Chain>,
    /// The ledger's period close as the batch has it (a close it decides moves it).
    closed_before: Option<OffsetDateTime>,
    closes: Vec<PlannedClose>,
}

impl<'a> Decider<'a> {
    /// A decider over the snapshot. Accounts whose rows cannot be (impossible totals,
    /// expiring holds beyond what they hold) join the corrupt ones, and so do accounts of
    /// another ledger than the batch's (`ACCOUNT_NOT_FOUND`: no posting crosses ledgers):
    /// requests touching them are refused unbound.
    pub fn new(s: &'a Snapshot) -> Decider<'a> {
        let mut corrupt_accounts = s.corrupt_accounts.clone();
        let mut valid: Vec<(i64, AccountState)> = Vec::with_capacity(s.accounts.len());
        let ledger = ledger::of_sequence(s.clock.last_sequence);
        for (&id, a) in &s.accounts {
            if corrupt_accounts.contains_key(&id) {
                continue;
            }
            if a.account.ledger != ledger {
                corrupt_accounts.insert(id, foreign(&a.account.code));
                continue;
            }
            match a.check() {
                Ok(()) => valid.push((id, a.clone())),
                Err(e) => {
                    corrupt_accounts.insert(id, e);
                }
            }
        }
        let mut d = Decider {
            snapshot: s,
            engine: Engine::new(valid),
            corrupt_accounts,
            base: s.clock.base(),
            postings: Vec::new(),
            versions: Vec::new(),
            rejections: Vec::new(),
            voided_now: HashMap::new(),
            closed_now: HashMap::new(),
            touched: HashMap::new(),
            due: BinaryHeap::new(),
            holds: Vec::new(),
            lapsed: HashMap::new(),
            chain: s.chain.clone(),
            closed_before: s.closed_before,
            closes: Vec::new(),
        };
        d.expiring_holds(&s.expiring);
        d
    }

    /// The snapshot's open expiring holds, each to lapse at its expiry time; one whose legs
    /// exceed what its accounts hold makes those accounts corrupt.
    fn expiring_holds(&mut self, expiring: &[ExpiringHold]) {
        let mut held: HashMap<i64, (i128, i128)> = HashMap::new();
        for h in expiring {
            let legs = self.expiring_legs(h);
            for l in &legs {
                let sums = held.entry(l.account_id).or_default();
                match l.direction {
                    crate::account::Direction::Debit => sums.0 += l.amount.minor(),
                    crate::account::Direction::Credit => sums.1 += l.amount.minor(),
                }
            }
            self.expires(h.hold, h.expires_at, legs);
        }
        for (id, due) in held {
            if let Some(e) = self.beyond_due(id, due) {
                self.corrupt_accounts.insert(id, e);
            }
        }
    }

    /// What no writer could have left, given the legs of an account's due holds (`d`ebit and
    /// `c`redit): more due than held, or a no-negative account's available balance below zero
    /// even without them (its funds rule let it spend only what they no longer hold).
    fn beyond_due(&self, id: i64, (d, c): (i128, i128)) -> Option<LedgerError> {
        let t = self.engine.totals(id)?;
        let a = &self.snapshot.accounts[&id].account;
        let why = if d > t.held_debits || c > t.held_credits {
            format!("its expiring holds hold {d}/{c} (debit/credit), its totals {t:?}")
        } else {
            let available = available_of(
                a.normal_balance,
                t.debits,
                t.credits,
                t.held_debits - d,
                t.held_credits - c,
            );
            let floor = self.snapshot.accounts[&id].terms.floor;
            if floor.is_none_or(|f| available >= f) {
                return None;
            }
            format!("below the floor of its terms, with {d}/{c} of its holds expired: {t:?}")
        };
        let row = format!("account {:?}", a.code);
        Some(LedgerError::journal_corrupt(&row, None, &why).with("account", &a.code))
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
                let a = &self.snapshot.accounts.get(&l.account_id)?.account;
                Some(Leg::on(a, l.direction, l.amount))
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
            let (hold, mut legs) = std::mem::take(&mut self.holds[i]);
            if self.closed_now.contains_key(&hold) {
                continue;
            }
            // Its legs on corrupt accounts stay as they are: every request touching those
            // is refused.
            legs.retain(|l| !self.corrupt_accounts.contains_key(&l.account_id));
            if self.engine.lapse(&legs, 1).is_ok() {
                self.lapsed.insert(hold, legs);
            }
        }
    }

    /// Decides a request whose key this batch claimed: a posting, or its refusal (bound to
    /// the key, which the plan records, or unbound).
    pub fn decide_new(&mut self, r: &WriteRequest, key_id: i64, id: Uuid) -> Result<Done, Refusal> {
        self.lapse_due();
        self.engine.at(self.now());
        let decided = match &r.command {
            Command::Update(u) => self.update(r, key_id, u).map(Done::Version),
            Command::Close(c) => self.close(r, key_id, c).map(Done::Close),
            c => self
                .posting_of(c)
                .and_then(|new| self.record(r, key_id, id, new))
                .map(Done::Posting),
        };
        if let Err(Refusal::Bound(e)) = &decided {
            self.rejections.push(PlannedRejection {
                caller: r.caller.clone(),
                key: r.command.key().to_owned(),
                error: e.clone(),
            });
        }
        decided
    }

    /// The posting a request would record, before the totals: its own rules, after the
    /// checks that bind nothing (corrupt rows, the clock).
    fn posting_of(&self, c: &Command) -> Result<NewPosting, Refusal> {
        if let Some(e) = self.corrupt(c) {
            return Err(Refusal::Unbound(e));
        }
        match c {
            Command::Post(p) => {
                if let Some(e) = p
                    .hold
                    .and_then(|h| check_expiry(h.expires_at, self.snapshot.clock.now).err())
                {
                    return Err(Refusal::Unbound(e));
                }
                self.conditions(&p.conditions)?;
                Ok(NewPosting::of_post(p))
            }
            Command::Void(v) => self.void(v),
            Command::Capture(c) => self.capture(c),
            Command::Expire(x) => self.expire(x.hold),
            Command::Update(_) | Command::Close(_) => {
                unreachable!("an update or a close records no posting")
            }
        }
    }

    /// Applies the posting to the totals (whole, or refused whole) and records it at the next
    /// sequence.
    fn record(
        &mut self,
        r: &WriteRequest,
        key_id: i64,
        id: Uuid,
        new: NewPosting,
    ) -> Result<Posting, Refusal> {
        if !matches!(r.command, Command::Expire(_)) {
            self.in_open_period(new.effective_at)?;
        }
        let closes_expiring = self.closes_expiring(&new)?;
        let effects = self.apply(&new)?;
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
        let legs = planned_legs(&new.legs, &effects);
        let opened = new
            .hold
            .and_then(|h| h.expires_at)
            .map(|t| (t, new.legs.clone()));
        let mut posting = new.into_posting(sequence, id, self.now(), r);
        if let Some((at, legs)) = opened {
            self.expires(posting.posting_id, at, legs);
        }
        self.remember(&posting);
        let nodes = self.chain.as_mut().map(|c| {
            let (hash, nodes) = c.append(&posting);
            posting.hash = Some(hash);
            nodes
        });
        self.postings.push(PlannedPosting {
            posting: posting.clone(),
            key_id,
            legs,
            held_accounts,
            closes_expiring,
            nodes: nodes.unwrap_or_default(),
        });
        Ok(posting)
    }

    /// The batch's ledger: the one whose state its clock was read from.
    pub(super) fn ledger(&self) -> ledger::LedgerId {
        ledger::of_sequence(self.snapshot.clock.last_sequence)
    }

    /// Applies the posting's effect to the totals, whole or not at all. A lapsed hold closed
    /// now (by its expiry's release) stops being lapsed as it leaves the held totals.
    fn apply(&mut self, new: &NewPosting) -> Result<Vec<LegEffect>, Refusal> {
        if let Err(e) = check_balanced(&new.legs) {
            let e = LedgerError::journal_corrupt(
                "request",
                None,
                &format!("an unbalanced posting reached the writer: {}", e.message),
            );
            return Err(Refusal::Unbound(e));
        }
        let unlapsed = new.closes.and_then(|c| self.lapsed.remove(&c.hold));
        if let Some(legs) = &unlapsed {
            self.engine.lapse(legs, -1)?;
        }
        let applied = self.engine.change(&new.effect, &new.legs);
        if let (Err(_), Some(legs), Some(c)) = (&applied, unlapsed, new.closes) {
            self.engine.lapse(&legs, 1)?;
            self.lapsed.insert(c.hold, legs);
        }
        Ok(applied?)
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
    pub fn into_plan(self, outcomes: Vec<Outcome>, unbound: Vec<(usize, LedgerError)>) -> Plan {
        if !unbound.is_empty() {
            return Plan {
                postings: Vec::new(),
                versions: Vec::new(),
                closes: Vec::new(),
                rejections: Vec::new(),
                totals: Vec::new(),
                base: self.base,
                outcomes: Vec::new(),
                unbound,
                chain: None,
            };
        }
        let accounts = &self.snapshot.accounts;
        let versions: HashMap<i64, i64> = self
            .touched
            .keys()
            .map(|id| (*id, self.engine.terms(*id).map_or(1, |t| t.version)))
            .collect();
        let totals: HashMap<i64, Totals> = self.engine.into_totals();
        let mut totals: Vec<FinalTotals> = self
            .touched
            .into_iter()
            .map(|(id, last_sequence)| FinalTotals {
                account_id: id,
                scale: accounts[&id].account.scale,
                totals: totals[&id],
                last_sequence,
                terms_version: versions[&id],
            })
            .collect();
        totals.sort_unstable_by_key(|t| t.account_id);
        Plan {
            postings: self.postings,
            versions: self.versions,
            closes: self.closes,
            rejections: self.rejections,
            totals,
            base: self.base,
            outcomes,
            unbound,
            chain: self.chain,
        }
    }
}

/// The legs that moved money, each with the account's totals after it.
/// An account of another ledger, as a request of this one sees it: not there.
fn foreign(code: &str) -> LedgerError {
    LedgerError::new(
        Reason::AccountNotFound,
        format!("account {code:?} does not exist in the batch's ledger"),
    )
    .with("account", code)
}

fn planned_legs(legs: &[Leg], effects: &[LegEffect]) -> Vec<PlannedLeg> {
    legs.iter()
        .zip(effects)
        .map(|(l, e)| PlannedLeg {
            account_id: l.account_id,
            direction: l.direction,
            amount: l.amount,
            after: e.after,
        })
        .collect()
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
