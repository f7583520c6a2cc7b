//! `decide` checked against a reference model, without PostgreSQL.
//!
//! Random batches of posts, holds (with and without expiry), captures (whole and partial),
//! voids (of postings, of voids, of holds, twice), the ledger's releases of expired holds
//! (those the expiry task sends, late in some batches, and stray ones not yet due), replays,
//! keys reused for other requests, overdrafts, back- and future-dated effective times and
//! duplicate keys inside a batch go through [`decide`] (its snapshots built by a small in-memory store that does what
//! `storage::batch::load` does; refusals without a key rerun the batch without them, as the
//! writer does) and through a model written separately from the contract: a map of keys, a
//! list of postings, balances and held amounts by summing legs. Every outcome, every posting's
//! facts, every balance and held amount must agree, and every plan must keep the journal's
//! invariants.

use super::*;
use crate::account::Direction;
use crate::account::{Account, Metadata, NormalBalance};
use crate::amount::Amount;
use crate::engine::Totals;
use crate::hold::{CaptureRequest, PostingTerms};
use crate::journal::{posting_hash, Chain, Frontier, PostingAtRecording, EMPTY_ROOT, GENESIS};
use crate::ledger::{self, LedgerId};
use crate::posting::{check_balanced, Leg, LegRequest, PostRequest, VoidRequest};
use crate::record::{CloseKind, HoldState, Posting};
use proptest::prelude::*;
use time::Duration;
use time::OffsetDateTime;

/// (code, currency, normal, allow_negative) of the model's accounts; ids are the index.
const ACCOUNTS: [(&str, &str, NormalBalance, bool); 6] = [
    ("w", "EUR", NormalBalance::Credit, true),
    ("a", "EUR", NormalBalance::Debit, false),
    ("b", "EUR", NormalBalance::Debit, false),
    ("c", "EUR", NormalBalance::Credit, false),
    ("uw", "USD", NormalBalance::Credit, true),
    ("u", "USD", NormalBalance::Debit, false),
];

/// Every posting's hash is the hash of its record at its recording chained to the one before
/// it, and the store's chain ends at the last with the root of a tree over them all, built
/// afresh here.
fn check_chain(store: &Store) -> Result<(), TestCaseError> {
    let mut prev = GENESIS;
    let mut tree = Frontier::new();
    for (i, p) in store.postings.iter().enumerate() {
        let at_recording = Posting {
            voided_by_posting_id: None,
            hold: p.hold.map(|h| HoldState {
                expires_at: h.expires_at,
                ..HoldState::default()
            }),
            ..p.clone()
        };
        let want = posting_hash(LEDGER_CODE, &prev, &PostingAtRecording::of(&at_recording));
        prop_assert_eq!(p.hash, Some(want), "posting {}'s hash", i);
        tree.append(&want);
        prev = want;
    }
    if let Some(chain) = &store.chain {
        prop_assert_eq!(chain.head, prev, "the chain's head");
        prop_assert_eq!(
            Some(chain.root()),
            tree.root().or(Some(EMPTY_ROOT)),
            "the root"
        );
    }
    Ok(())
}

fn start() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
}

/// The time `s` seconds after the start (batch `b` runs at second `b`).
fn at(s: i64) -> OffsetDateTime {
    start() + Duration::seconds(s)
}

fn accounts() -> HashMap<String, Account> {
    ACCOUNTS
        .iter()
        .enumerate()
        .map(|(id, &(code, currency, normal, neg))| {
            let a = Account {
                ledger: crate::ledger::DEFAULT_LEDGER_ID,
                id: id as i64,
                code: code.into(),
                currency: currency.into(),
                scale: 2,
                normal_balance: normal,
                allow_negative: neg,
                metadata: Metadata::new(),
                created_at: start(),
            };
            (code.to_owned(), a)
        })
        .collect()
}

/// A generated operation: what a caller (or the expiry task) sends. Targets are indexes of
/// the postings recorded so far (mod their count).
#[derive(Clone, Debug)]
enum Op {
    /// Transfers (from, to, cents) within one currency, an effective offset in days; a hold
    /// when `hold` is set, expiring that many seconds after the batch's clock if given (made
    /// absolute when first sent, so a resend is the same request).
    Post {
        caller: u8,
        key: u8,
        transfers: Vec<(usize, usize, i64)>,
        days: Option<i64>,
        memo: u8,
        hold: Option<Option<i64>>,
    },
    Void {
        caller: u8,
        key: u8,
        target: usize,
        reason: u8,
    },
    /// A capture of the whole hold, or of `quarters`/4 of each leg (at least a cent).
    Capture {
        caller: u8,
        key: u8,
        target: usize,
        quarters: Option<i64>,
    },
    /// The ledger's release of the target as an expired hold, due or not.
    Expire { target: usize },
    /// The `of`-th request sent so far, sent again as it was.
    Again { of: usize },
}

/// Keys per caller: few enough that keys are often reused for other requests.
const KEYS: u8 = 24;

/// What a batch's snapshot may hold that no sound journal would (the rows storage reads
/// back broken, or not at all): the postings and accounts are indexes (mod their count).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Damage {
    None,
    /// The load does not find a posting the lane read (not in `named`).
    LostPosting(usize),
    /// A named posting cannot be read (`corrupt_named`).
    CorruptPosting(usize),
    /// An account's row cannot be read (`corrupt_accounts`).
    CorruptAccount(usize),
    /// An account's totals are negative: no writer could have left them.
    ImpossibleTotals(usize),
    /// An account of another ledger than the batch's (the load never reads one: decide
    /// refuses it all the same).
    ForeignAccount(usize),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        8 => Just(Damage::None),
        1 => any::<usize>().prop_map(Damage::LostPosting),
        1 => any::<usize>().prop_map(Damage::CorruptPosting),
        1 => (0usize..6).prop_map(Damage::CorruptAccount),
        1 => (0usize..6).prop_map(Damage::ImpossibleTotals),
        1 => (0usize..6).prop_map(Damage::ForeignAccount),
    ]
}

/// A batch's damage made concrete: a posting (by the model's index) the snapshot lacks or
/// cannot read, an account it cannot read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Damaged {
    lost: Option<usize>,
    corrupt_posting: Option<usize>,
    corrupt_account: Option<usize>,
    impossible_totals: Option<usize>,
    foreign_account: Option<usize>,
}

impl Damaged {
    fn of(d: Damage, postings: usize) -> Damaged {
        let posting = |i: usize| i.checked_rem(postings);
        match d {
            Damage::None => Damaged::default(),
            Damage::LostPosting(i) => Damaged {
                lost: posting(i),
                ..Damaged::default()
            },
            Damage::CorruptPosting(i) => Damaged {
                corrupt_posting: posting(i),
                ..Damaged::default()
            },
            Damage::CorruptAccount(a) => Damaged {
                corrupt_account: Some(a),
                ..Damaged::default()
            },
            Damage::ImpossibleTotals(a) => Damaged {
                impossible_totals: Some(a),
                ..Damaged::default()
            },
            Damage::ForeignAccount(a) => Damaged {
                foreign_account: Some(a),
                ..Damaged::default()
            },
        }
    }

    /// The account no request may touch in this batch.
    fn account(&self) -> Option<usize> {
        self.corrupt_account
            .or(self.impossible_totals)
            .or(self.foreign_account)
    }
}

fn op() -> impl Strategy<Value = Op> {
    let transfer = (0usize..6, 0usize..6, 1i64..5_000).prop_map(|(f, t, c)| {
        // Within a currency: accounts 0..4 are EUR, 4..6 USD.
        let (lo, hi) = if f < 4 { (0, 4) } else { (4, 6) };
        let t = lo + (t % (hi - lo));
        let t = if t == f {
            lo + (f + 1 - lo) % (hi - lo)
        } else {
            t
        };
        (f, t, c)
    });
    let days = prop_oneof![Just(None), (-30i64..30).prop_map(Some)];
    let hold = prop_oneof![3 => Just(None), 1 => Just(Some(None)), 2 => (1i64..4).prop_map(|s| Some(Some(s)))];
    let post = (
        0u8..2,
        0u8..KEYS,
        prop::collection::vec(transfer, 1..4),
        days,
        0u8..2,
        hold,
    );
    let quarters = prop_oneof![Just(None), (1i64..=4).prop_map(Some)];
    prop_oneof![
        5 => post.prop_map(|(caller, key, transfers, days, memo, hold)| Op::Post { caller, key, transfers, days, memo, hold }),
        2 => (0u8..2, 0u8..KEYS, any::<usize>(), 0u8..2).prop_map(|(caller, key, target, reason)| Op::Void { caller, key, target, reason }),
        2 => (0u8..2, 0u8..KEYS, any::<usize>(), quarters).prop_map(|(caller, key, target, quarters)| Op::Capture { caller, key, target, quarters }),
        1 => any::<usize>().prop_map(|target| Op::Expire { target }),
        2 => any::<usize>().prop_map(|of| Op::Again { of }),
    ]
}

/// What the store holds: what `storage::batch::load` would read back.
#[derive(Default)]
struct Store {
    /// The ledger the store's journal belongs to (its stored sequences are in its range).
    ledger: LedgerId,
    decided: HashMap<(String, String), StoredDecision>,
    /// Totals every account had before the model's first posting (near
    /// [`MAX_TOTAL_MINOR`](crate::limits::MAX_TOTAL_MINOR) for account 0 in some runs).
    before: HashMap<i64, Totals>,
    postings: Vec<Posting>,
    totals: HashMap<i64, Totals>,
    next_key_id: i64,
    last: Option<(i64, OffsetDateTime)>,
    /// The ledger's chain as the last written plan left it (`None` until the first batch: a
    /// new ledger's is the genesis).
    chain: Option<Chain>,
}

/// The model ledger's code, hashed into its postings.
const LEDGER_CODE: &str = "model";

impl Store {
    fn snapshot(
        &mut self,
        requests: &[WriteRequest],
        now: OffsetDateTime,
        damaged: Damaged,
    ) -> Snapshot {
        let keys = distinct_keys(requests)
            .into_iter()
            .map(|i| {
                let r = &requests[i];
                match self
                    .decided
                    .get(&(r.caller.clone(), r.command.key().to_owned()))
                {
                    Some(d) => KeyState::Decided(Box::new(d.clone())),
                    None => {
                        self.next_key_id += 1;
                        KeyState::Claimed(self.next_key_id)
                    }
                }
            })
            .collect();
        let accounts = accounts()
            .into_values()
            .map(|a| {
                let mut totals = self
                    .totals
                    .get(&a.id)
                    .or(self.before.get(&a.id))
                    .copied()
                    .unwrap_or_default();
                if damaged.impossible_totals == Some(a.id as usize) {
                    totals.debits = -1;
                }
                let mut account = Account {
                    ledger: self.ledger,
                    ..a.clone()
                };
                if damaged.foreign_account == Some(a.id as usize) {
                    account.ledger = self.ledger ^ 1;
                }
                (a.id, AccountState::new(account, totals))
            })
            .collect();
        let (last_sequence, last_recorded_at) = self
            .last
            .unwrap_or((ledger::stored(self.ledger, 0), OffsetDateTime::UNIX_EPOCH));
        Snapshot {
            clock: Clock {
                last_sequence,
                last_recorded_at,
                now,
            },
            keys,
            accounts,
            account_ids: ACCOUNTS
                .iter()
                .enumerate()
                .map(|(i, a)| (a.0.to_owned(), i as i64))
                .collect(),
            named: self
                .postings
                .iter()
                .enumerate()
                .filter(|(i, _)| damaged.lost != Some(*i))
                .map(|(_, p)| (p.posting_id, p.clone()))
                .collect(),
            corrupt_accounts: damaged
                .corrupt_account
                .map(|a| (a as i64, corrupt("an account")))
                .into_iter()
                .collect(),
            corrupt_named: damaged
                .corrupt_posting
                .map(|i| (self.postings[i].posting_id, corrupt("a posting")))
                .into_iter()
                .collect(),
            expiring: self.expiring(),
            chain: Some(
                self.chain
                    .clone()
                    .unwrap_or_else(|| Chain::genesis(LEDGER_CODE)),
            ),
            closed_before: None,
        }
    }

    /// Every open hold with an expiry, due or not (the load lists at least the due ones).
    fn expiring(&self) -> Vec<ExpiringHold> {
        self.postings
            .iter()
            .filter_map(|p| {
                let h = p.hold.filter(|h| h.closed_by.is_none())?;
                let legs = p
                    .legs
                    .iter()
                    .map(|l| HeldLeg {
                        account_id: accounts()[&l.account].id,
                        direction: l.direction,
                        amount: l.amount,
                    })
                    .collect();
                Some(ExpiringHold {
                    hold: p.posting_id,
                    expires_at: h.expires_at?,
                    legs,
                })
            })
            .collect()
    }

    /// What `storage::batch::write` would leave: the plan's rows (a void or a closing posting
    /// shows on its target when read back), and each claimed key's decision.
    fn write(&mut self, plan: &Plan, requests: &[WriteRequest], snapshot: &Snapshot) {
        self.chain = plan.chain.clone();
        for p in &plan.postings {
            let (id, voids, closes) = (
                p.posting.posting_id,
                p.posting.voids_posting_id,
                p.posting.closes,
            );
            let target = |t: Uuid, postings: &mut Vec<Posting>| {
                postings.iter_mut().position(|x| x.posting_id == t).unwrap()
            };
            if let Some(t) = voids {
                let i = target(t, &mut self.postings);
                self.postings[i].voided_by_posting_id = Some(id);
            }
            if let Some(c) = closes {
                let i = target(c.hold, &mut self.postings);
                self.postings[i]
                    .hold
                    .as_mut()
                    .expect("closes a hold")
                    .closed_by = Some((id, c.kind));
            }
            self.postings.push(p.posting.clone());
        }
        for t in &plan.totals {
            self.totals.insert(t.account_id, t.totals);
        }
        for (&i, key) in distinct_keys(requests).iter().zip(&snapshot.keys) {
            if let KeyState::Claimed(_) = key {
                let r = &requests[i];
                let d = StoredDecision {
                    operation: r.command.operation(),
                    fingerprint: *r.command.fingerprint(),
                    outcome: plan.outcomes[i].clone().map(|d| d.done),
                };
                self.decided
                    .insert((r.caller.clone(), r.command.key().to_owned()), d);
            }
        }
        self.last = plan.last().or(self.last);
    }
}

/// The refusal storage gives of a row it cannot read.
fn corrupt(row: &str) -> LedgerError {
    LedgerError::journal_corrupt(row, None, "the model broke it")
}

/// A model leg: (account, debit?, cents).
type MLeg = (usize, bool, i64);

/// What a model posting is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MKind {
    /// Moves its legs.
    Move,
    /// Reserves its legs: expiry second, and the posting that closed it and how.
    Hold {
        expires: Option<i64>,
        closed: Option<(usize, CloseKind)>,
    },
    /// Closes the hold with this index: a capture moves its legs, a release or an expiry
    /// moves nothing.
    Closes(usize, CloseKind),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct MPosting {
    legs: Vec<MLeg>,
    kind: MKind,
    voids: Option<usize>,
    voided: bool,
    /// Set on an expiry's release: effective at the hold's expiry.
    effective: Option<OffsetDateTime>,
}

impl MPosting {
    fn moves(&self) -> bool {
        matches!(
            self.kind,
            MKind::Move | MKind::Closes(_, CloseKind::Capture)
        )
    }

    fn is_open_hold(&self) -> bool {
        matches!(self.kind, MKind::Hold { closed: None, .. })
    }

    /// An open hold whose expiry time has passed at second `now`: it holds nothing any more,
    /// its release recorded or not.
    fn lapsed(&self, now: i64) -> bool {
        matches!(self.kind, MKind::Hold { closed: None, expires: Some(e) } if e <= now)
    }
}

/// What a request asks, for the model.
#[derive(Clone, Debug)]
enum Asks {
    Post {
        legs: Vec<MLeg>,
        hold: Option<Option<i64>>,
    },
    Void(usize),
    Capture {
        hold: usize,
        legs: Vec<MLeg>,
    },
    Expire(usize),
}

/// What a request with a new key would do.
enum Would {
    Record(MPosting),
    Refuse(Reason),
    /// Refused without binding the key (an expiry not due).
    Unbound,
}

/// The model's answer: the posting's index and whether it is a replay, or the reason; or
/// refused unbound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MAnswer {
    Outcome(Result<(usize, bool), Reason>),
    Unbound,
}

/// The reference model: keys, postings, sums of legs, the rules written plainly.
#[derive(Default)]
struct Model {
    /// (caller, key) → (what was asked, the outcome: a posting's index or a reason).
    keys: HashMap<(String, String), (String, Result<usize, Reason>)>,
    postings: Vec<MPosting>,
    /// The debits and credits account 0 had before the first posting, each.
    offset: i128,
}

impl Model {
    /// (debits, credits, held debits, held credits) of an account.
    fn sums(&self, account: usize) -> [i64; 4] {
        let mut s = [0; 4];
        for p in &self.postings {
            let slot = if p.moves() {
                0
            } else if p.is_open_hold() {
                2
            } else {
                continue;
            };
            for l in p.legs.iter().filter(|l| l.0 == account) {
                s[slot + usize::from(!l.1)] += l.2;
            }
        }
        s
    }

    /// [`Model::sums`] as the funds rule sees them at second `now`: without the holds that
    /// lapsed (their expiry time passed, their release not recorded).
    fn sums_at(&self, account: usize, now: i64) -> [i64; 4] {
        let mut s = self.sums(account);
        for p in self.postings.iter().filter(|p| p.lapsed(now)) {
            for l in p.legs.iter().filter(|l| l.0 == account) {
                s[2 + usize::from(!l.1)] -= l.2;
            }
        }
        s
    }

    /// The balance less what open holds would take from it.
    fn available(normal: NormalBalance, [d, c, hd, hc]: [i64; 4]) -> i64 {
        match normal {
            NormalBalance::Debit => d - c - hc,
            NormalBalance::Credit => c - d - hd,
        }
    }

    fn answer(&mut self, s: &Sent, now: i64, damaged: Damaged) -> MAnswer {
        let k = (s.request.caller.clone(), s.request.command.key().to_owned());
        if let Some((asked, outcome)) = self.keys.get(&k) {
            return MAnswer::Outcome(match (asked == &s.meaning, outcome) {
                (false, _) => Err(Reason::IdempotencyKeyReused),
                (true, Ok(i)) => Ok((*i, true)),
                (true, Err(r)) => Err(*r),
            });
        }
        let (meaning, asks) = (s.meaning.clone(), &s.asks);
        if self.damaged_for(asks, damaged) {
            return MAnswer::Unbound;
        }
        let outcome = match self.would(asks, now) {
            Would::Unbound => return MAnswer::Unbound,
            Would::Refuse(r) => Err(r),
            Would::Record(p) => self.record(p, now),
        };
        self.keys.insert(k, (meaning, outcome));
        MAnswer::Outcome(outcome.map(|i| (i, false)))
    }

    /// Whether a new request touches what the batch's snapshot cannot hold: the posting it
    /// names lost or corrupt, or an account of its legs or of that posting's legs corrupt.
    fn damaged_for(&self, asks: &Asks, d: Damaged) -> bool {
        let (named, legs): (Option<usize>, &[MLeg]) = match asks {
            Asks::Post { legs, .. } => (None, legs),
            Asks::Void(t) | Asks::Expire(t) => (Some(*t), &[]),
            Asks::Capture { hold, legs } => (Some(*hold), legs),
        };
        let named_legs = named.map_or(&[][..], |t| &self.postings[t].legs[..]);
        let on_account = legs
            .iter()
            .chain(named_legs)
            .any(|l| d.account() == Some(l.0));
        let lost = named.is_some() && (named == d.lost || named == d.corrupt_posting);
        on_account || lost
    }

    fn would(&self, asks: &Asks, now: i64) -> Would {
        let posting = |legs: Vec<MLeg>, kind| MPosting {
            legs,
            kind,
            voids: None,
            voided: false,
            effective: None,
        };
        match asks {
            Asks::Post { legs, hold: None } => Would::Record(posting(legs.clone(), MKind::Move)),
            // A hold sent again after its expiry time passed (its first sending bound no key):
            // no longer valid, which binds nothing.
            Asks::Post {
                hold: Some(Some(e)),
                ..
            } if *e <= now => Would::Unbound,
            Asks::Post {
                legs,
                hold: Some(expires),
            } => Would::Record(posting(
                legs.clone(),
                MKind::Hold {
                    expires: *expires,
                    closed: None,
                },
            )),
            Asks::Void(t) => self.void(*t, now),
            Asks::Capture { hold, legs } => match self.pending(*hold, now) {
                Err(r) => Would::Refuse(r),
                Ok(()) => Would::Record(posting(
                    legs.clone(),
                    MKind::Closes(*hold, CloseKind::Capture),
                )),
            },
            Asks::Expire(t) => match self.postings[*t].kind {
                MKind::Hold {
                    expires: Some(e),
                    closed,
                } if e <= now => match closed {
                    Some(_) => Would::Refuse(Reason::HoldNotPending),
                    None => Would::Record(MPosting {
                        effective: Some(at(e)),
                        ..posting(
                            swapped(&self.postings[*t].legs),
                            MKind::Closes(*t, CloseKind::Expire),
                        )
                    }),
                },
                _ => Would::Unbound,
            },
        }
    }

    /// A hold a caller may still close: not closed, not past its expiry.
    fn pending(&self, hold: usize, now: i64) -> Result<(), Reason> {
        match self.postings[hold].kind {
            MKind::Hold {
                closed: None,
                expires,
            } if expires.is_none_or(|e| e > now) => Ok(()),
            MKind::Hold { .. } => Err(Reason::HoldNotPending),
            _ => unreachable!("captures are sent for holds only"),
        }
    }

    fn void(&self, t: usize, now: i64) -> Would {
        let target = &self.postings[t];
        let legs = swapped(&target.legs);
        let void = |kind| MPosting {
            legs,
            kind,
            voids: Some(t),
            voided: false,
            effective: None,
        };
        match target.kind {
            _ if target.voids.is_some() => Would::Refuse(Reason::VoidOfVoid),
            MKind::Closes(_, CloseKind::Expire) => Would::Refuse(Reason::VoidOfVoid),
            MKind::Hold { .. } => match self.pending(t, now) {
                Err(r) => Would::Refuse(r),
                Ok(()) => Would::Record(void(MKind::Closes(t, CloseKind::Release))),
            },
            _ if target.voided => Would::Refuse(Reason::AlreadyVoided),
            _ => Would::Record(void(MKind::Move)),
        }
    }

    /// Records `p` unless it would take a no-negative account it touches below zero
    /// available at second `now` (holds lapsed by then hold nothing): a posting that moves
    /// money or holds does; a capture or a release never is refused for funds.
    fn record(&mut self, p: MPosting, now: i64) -> Result<usize, Reason> {
        let checked = matches!(p.kind, MKind::Move | MKind::Hold { .. });
        if p.moves() && self.past_limit(&p) {
            return Err(Reason::LimitExceeded);
        }
        for (id, &(_, _, normal, neg)) in ACCOUNTS.iter().enumerate() {
            let mut s = self.sums_at(id, now);
            let slot = if p.moves() { 0 } else { 2 };
            for l in p.legs.iter().filter(|l| l.0 == id) {
                s[slot + usize::from(!l.1)] += l.2;
            }
            let touched = p.legs.iter().any(|l| l.0 == id);
            if checked && touched && !neg && Model::available(normal, s) < 0 {
                return Err(Reason::InsufficientFunds);
            }
        }
        let i = self.postings.len();
        if let Some(t) = p.voids {
            self.postings[t].voided = true;
        }
        if let MKind::Closes(h, how) = p.kind {
            if let MKind::Hold { closed, .. } = &mut self.postings[h].kind {
                *closed = Some((i, how));
            }
        }
        self.postings.push(p);
        Ok(i)
    }
}

impl Model {
    /// Whether moving `p`'s legs would take account 0's debits or credits past
    /// `MAX_TOTAL_MINOR` (the others start at zero and stay far below it).
    fn past_limit(&self, p: &MPosting) -> bool {
        let s = self.sums(0);
        let (mut d, mut c) = (i128::from(s[0]), i128::from(s[1]));
        for l in p.legs.iter().filter(|l| l.0 == 0) {
            if l.1 {
                d += i128::from(l.2);
            } else {
                c += i128::from(l.2);
            }
        }
        let max = crate::limits::MAX_TOTAL_MINOR;
        self.offset + d > max || self.offset + c > max
    }
}

fn swapped(legs: &[MLeg]) -> Vec<MLeg> {
    legs.iter().map(|&(a, d, c)| (a, !d, c)).collect()
}

/// One generated request: for `decide`, and for the model (its meaning and what it asks).
struct Sent {
    request: WriteRequest,
    meaning: String,
    asks: Asks,
}

fn leg_requests(legs: &[MLeg]) -> Vec<LegRequest> {
    legs.iter()
        .map(|&(a, debit, cents)| LegRequest {
            account: ACCOUNTS[a].0.into(),
            direction: Some(if debit {
                Direction::Debit
            } else {
                Direction::Credit
            }),
            amount: Amount::from_minor(i128::from(cents), 2).to_string(),
        })
        .collect()
}

fn post(
    caller: u8,
    key: u8,
    transfers: &[(usize, usize, i64)],
    days: Option<i64>,
    memo: u8,
    hold: Option<Option<i64>>,
) -> Sent {
    let legs: Vec<MLeg> = transfers
        .iter()
        .flat_map(|&(f, t, c)| [(t, true, c), (f, false, c)])
        .collect();
    let req = PostRequest {
        idempotency_key: format!("k{key}"),
        legs: leg_requests(&legs),
        effective_at: days.map(|d| start() + Duration::days(d)),
        memo: format!("m{memo}"),
        metadata: Metadata::new(),
        hold: hold.is_some(),
        hold_expires_at: hold.flatten().map(at),
        conditions: Vec::new(),
    };
    let valid = req
        .validate(&accounts())
        .expect("the model's posts are valid");
    Sent {
        meaning: format!("post {legs:?} {days:?} {memo} {hold:?}"),
        request: WriteRequest {
            caller: format!("c{caller}"),
            command: Command::Post(valid),
        },
        asks: Asks::Post { legs, hold },
    }
}

fn void(ids: &[Uuid], caller: u8, key: u8, target: usize, reason: u8) -> Sent {
    let req = VoidRequest {
        idempotency_key: format!("k{key}"),
        posting_id: ids[target].to_string(),
        reason: format!("r{reason}"),
        effective_at: None,
    };
    Sent {
        meaning: format!("void {target} {reason}"),
        request: WriteRequest {
            caller: format!("c{caller}"),
            command: Command::Void(req.validate().unwrap()),
        },
        asks: Asks::Void(target),
    }
}

/// A capture of the hold `target` (as the store holds it), validated as the service does.
fn capture(
    model: &Model,
    store: &Store,
    (caller, key): (u8, u8),
    target: usize,
    quarters: Option<i64>,
) -> Sent {
    let held = &model.postings[target].legs;
    let legs: Vec<MLeg> = match quarters {
        None => held.clone(),
        Some(q) => held
            .iter()
            .map(|&(a, d, c)| (a, d, (c * q / 4).max(1)))
            .collect(),
    };
    let req = CaptureRequest {
        idempotency_key: format!("k{key}"),
        hold_posting_id: store.postings[target].posting_id.to_string(),
        legs: if quarters.is_some() {
            leg_requests(&legs)
        } else {
            Vec::new()
        },
        effective_at: None,
        memo: String::new(),
        metadata: Metadata::new(),
    };
    let valid = req
        .validate(&PostingTerms::of(&store.postings[target]), &accounts())
        .expect("the model's captures are valid");
    Sent {
        // "The whole hold" and its legs written out mean the same.
        meaning: format!("capture {target} {legs:?}"),
        request: WriteRequest {
            caller: format!("c{caller}"),
            command: Command::Capture(valid),
        },
        asks: Asks::Capture { hold: target, legs },
    }
}

fn expire(ids: &[Uuid], target: usize) -> Sent {
    Sent {
        meaning: format!("expire {target}"),
        request: ValidExpire::request(ids[target]),
        asks: Asks::Expire(target),
    }
}

/// The op as sent now (targets resolved, a hold's expiry made absolute), or `None` when it
/// cannot be sent yet (nothing recorded to target).
fn resolve(op: Op, sent: &[Op], model: &Model, now: i64) -> Option<Op> {
    let n = model.postings.len();
    match op {
        Op::Again { of } => sent.get(of.checked_rem(sent.len())?).cloned(),
        Op::Post {
            caller,
            key,
            transfers,
            days,
            memo,
            hold,
        } => {
            let hold = hold.map(|e| e.map(|s| now + s));
            Some(Op::Post {
                caller,
                key,
                transfers,
                days,
                memo,
                hold,
            })
        }
        Op::Void {
            caller,
            key,
            target,
            reason,
        } => Some(Op::Void {
            caller,
            key,
            target: target.checked_rem(n)?,
            reason,
        }),
        Op::Capture {
            caller,
            key,
            target,
            quarters,
        } => {
            // The `target`-th hold (a capture of another posting is refused before the batch).
            let holds: Vec<usize> = (0..n)
                .filter(|&i| matches!(model.postings[i].kind, MKind::Hold { .. }))
                .collect();
            let target = holds[target.checked_rem(holds.len())?];
            Some(Op::Capture {
                caller,
                key,
                target,
                quarters,
            })
        }
        Op::Expire { target } => Some(Op::Expire {
            target: target.checked_rem(n)?,
        }),
    }
}

fn sent_of(op: &Op, model: &Model, store: &Store, ids: &[Uuid]) -> Sent {
    match *op {
        Op::Post {
            caller,
            key,
            ref transfers,
            days,
            memo,
            hold,
        } => post(caller, key, transfers, days, memo, hold),
        Op::Void {
            caller,
            key,
            target,
            reason,
        } => void(ids, caller, key, target, reason),
        Op::Capture {
            caller,
            key,
            target,
            quarters,
        } => capture(model, store, (caller, key), target, quarters),
        Op::Expire { target } => expire(ids, target),
        Op::Again { .. } => unreachable!("resolved"),
    }
}

/// Decides the batch as the writer does: a round that refuses requests unbound is run again
/// without them. The plan written, and the indexes refused unbound.
fn decide_as_the_writer(
    store: &mut Store,
    requests: &[WriteRequest],
    now: OffsetDateTime,
    damaged: Damaged,
) -> (Option<Written>, Vec<Outcome>, Vec<usize>) {
    let mut rounds = Rounds::new(requests.iter().cloned().map(Ok).collect());
    let written = loop {
        let (plan, snapshot, batch) = {
            let Some(batch) = rounds.batch() else {
                break None;
            };
            let snapshot = store.snapshot(&batch, now, damaged);
            let ids: Vec<Uuid> = batch.iter().map(|_| Uuid::now_v7()).collect();
            let plan = decide(&snapshot, &batch, &ids);
            if !plan.unbound.is_empty() {
                assert!(
                    plan.postings.is_empty() && plan.rejections.is_empty(),
                    "an unbound plan plans nothing"
                );
            }
            (plan, snapshot, batch.into_owned())
        };
        if let Some(plan) = rounds.decided(plan) {
            break Some(Written {
                plan,
                snapshot,
                batch,
            });
        }
    };
    let unbound = rounds.unbound().to_vec();
    let outcomes = written
        .as_ref()
        .map_or(Vec::new(), |w| w.plan.outcomes.clone());
    (written, rounds.outcomes(outcomes), unbound)
}

/// The round a batch was written by: its plan, its snapshot, its requests.
struct Written {
    plan: Plan,
    snapshot: Snapshot,
    batch: Vec<WriteRequest>,
}

/// Checks the outcomes of the live requests and the unbound ones against the model's answers.
fn check_outcomes(
    written: Option<&Written>,
    outcomes: &[Outcome],
    unbound: &[usize],
    want: &[MAnswer],
    ids: &mut Vec<Uuid>,
) -> Result<(), TestCaseError> {
    let mut unbound = unbound.to_vec();
    unbound.sort_unstable();
    let want_unbound: Vec<usize> = (0..want.len())
        .filter(|&i| want[i] == MAnswer::Unbound)
        .collect();
    prop_assert_eq!(&unbound, &want_unbound, "refused unbound");
    prop_assert_eq!(outcomes.len(), want.len(), "an outcome per request");
    for (i, got) in outcomes.iter().enumerate() {
        let MAnswer::Outcome(want) = want[i] else {
            prop_assert!(got.is_err(), "an unbound refusal is an error");
            continue;
        };
        match (got, want) {
            (Ok(d), Ok((n, replayed))) => {
                if n == ids.len() {
                    ids.push(d.posting().expect("a posting").posting_id);
                }
                prop_assert_eq!(
                    d.posting().expect("a posting").posting_id,
                    ids[n],
                    "the model's posting"
                );
                prop_assert_eq!(d.replayed, replayed);
            }
            (Err(e), Err(r)) => prop_assert_eq!(e.reason, r, "{}", e),
            (got, want) => prop_assert!(false, "decide {:?}, model {:?}", got, want),
        }
    }
    for p in written.iter().flat_map(|w| &w.plan.postings) {
        let legs: Vec<Leg> = p
            .posting
            .legs
            .iter()
            .map(|l| {
                let a = &accounts()[&l.account];
                Leg::on(a, l.direction, l.amount)
            })
            .collect();
        prop_assert!(check_balanced(&legs).is_ok(), "balanced per currency");
    }
    Ok(())
}

/// Every posting's facts as read back, every account's sums, against the model.
fn check_store(store: &Store, model: &Model, ids: &[Uuid]) -> Result<(), TestCaseError> {
    prop_assert_eq!(store.postings.len(), model.postings.len());
    let index = |id: Uuid| ids.iter().position(|&x| x == id).unwrap();
    for (i, (p, m)) in store.postings.iter().zip(&model.postings).enumerate() {
        prop_assert_eq!(p.posting_id, ids[i]);
        prop_assert_eq!(
            p.sequence as i64,
            ledger::stored(store.ledger, i as i64 + 1),
            "gapless from 1 in its ledger"
        );
        let legs: Vec<MLeg> = p
            .legs
            .iter()
            .map(|l| {
                (
                    accounts()[&l.account].id as usize,
                    l.direction == Direction::Debit,
                    l.amount.minor() as i64,
                )
            })
            .collect();
        let kind = match (p.hold, p.closes) {
            (Some(h), None) => MKind::Hold {
                expires: h.expires_at.map(|t| (t - start()).whole_seconds()),
                closed: h.closed_by.map(|(by, k)| (index(by), k)),
            },
            (None, Some(c)) => MKind::Closes(index(c.hold), c.kind),
            (None, None) => MKind::Move,
            (Some(_), Some(_)) => return Err(TestCaseError::fail("a hold that closes a hold")),
        };
        let effective = m.effective.is_some().then_some(p.effective_at);
        let got = MPosting {
            legs,
            kind,
            voids: p.voids_posting_id.map(index),
            voided: p.voided_by_posting_id.is_some(),
            effective,
        };
        prop_assert_eq!(&got, m, "posting {}", i);
    }
    check_chain(store)?;
    for (id, &(_, _, normal, _)) in ACCOUNTS.iter().enumerate() {
        let key = id as i64;
        let t = store.totals.get(&key).or(store.before.get(&key));
        let t = t.copied().unwrap_or_default();
        let mut s = model.sums(id).map(i128::from);
        if id == 0 {
            s[0] += model.offset;
            s[1] += model.offset;
        }
        prop_assert_eq!(
            [t.debits, t.credits, t.held_debits, t.held_credits],
            s,
            "account {}",
            id
        );
        prop_assert_eq!(
            t.available(normal),
            i128::from(Model::available(normal, model.sums(id)))
        );
    }
    Ok(())
}

/// The first batch: funds for the no-negative accounts, so later requests are not all
/// refused for funds.
fn funding() -> Vec<Op> {
    [(0, 1), (0, 2), (3, 0), (4, 5)]
        .into_iter()
        .enumerate()
        .map(|(key, (from, to))| Op::Post {
            caller: 9,
            key: key as u8,
            transfers: vec![(from, to, 10_000)],
            days: None,
            memo: 0,
            hold: None,
        })
        .collect()
}

/// One ledger's journal as the test runs it: the store decide reads and writes, the model
/// it is checked against, the posting ids by the model's index, the ops sent so far.
struct Book {
    store: Store,
    model: Model,
    ids: Vec<Uuid>,
    sent: Vec<Op>,
}

impl Book {
    /// A ledger's journal, funded; account 0 starts with `room` cents below
    /// `MAX_TOTAL_MINOR` on each side when given.
    fn new(ledger: LedgerId, room: Option<i64>) -> Result<Book, TestCaseError> {
        let mut book = Book {
            store: Store {
                ledger,
                ..Store::default()
            },
            model: Model::default(),
            ids: Vec::new(),
            sent: Vec::new(),
        };
        if let Some(room) = room {
            book.model.offset = crate::limits::MAX_TOTAL_MINOR - i128::from(room);
            let near = Totals {
                debits: book.model.offset,
                credits: book.model.offset,
                ..Totals::default()
            };
            book.store.before.insert(0, near);
        }
        book.batch(0, false, Damage::None, funding())?;
        Ok(book)
    }

    /// One batch at second `now` (with whether the expiry task is late for it, sending none
    /// of its releases, and what its snapshot breaks), decided and checked against the model.
    fn batch(
        &mut self,
        now: i64,
        late: bool,
        damage: Damage,
        ops: Vec<Op>,
    ) -> Result<(), TestCaseError> {
        let Book {
            store,
            model,
            ids,
            sent,
        } = self;
        let damaged = Damaged::of(damage, model.postings.len());
        // The expiry task: a release of every open hold that is due, unless it is late.
        let due = (0..model.postings.len()).filter(|&i| !late && model.postings[i].lapsed(now));
        let mut batch: Vec<Sent> = due.map(|i| expire(ids, i)).collect();
        for op in ops {
            let Some(op) = resolve(op, sent, model, now) else {
                continue;
            };
            batch.push(sent_of(&op, model, store, ids));
            sent.push(op);
        }
        if batch.is_empty() {
            return Ok(());
        }
        let want: Vec<MAnswer> = batch
            .iter()
            .map(|s| model.answer(s, now, damaged))
            .collect();
        let requests: Vec<WriteRequest> = batch.into_iter().map(|s| s.request).collect();
        let (written, outcomes, unbound) = decide_as_the_writer(store, &requests, at(now), damaged);
        check_outcomes(written.as_ref(), &outcomes, &unbound, &want, ids)?;
        if let Some(w) = &written {
            w.plan.assert_sound(&w.snapshot.clock);
            store.write(&w.plan, &w.batch, &w.snapshot);
        }
        check_store(store, model, ids)
    }
}

/// Runs the batches (each with the ledger it goes to, by index into `ledgers`, whether the
/// expiry task is late for it, and what its snapshot breaks) after a funding batch per
/// ledger. Each ledger's journal is decided on its own: its sequences count from 1 in its
/// range, whatever the other ledgers record.
fn run(
    batches: Vec<(usize, bool, Damage, Vec<Op>)>,
    room: Option<i64>,
    ledgers: &[LedgerId],
) -> Result<(), TestCaseError> {
    let mut books = ledgers
        .iter()
        .map(|&l| Book::new(l, room))
        .collect::<Result<Vec<_>, _>>()?;
    for (b, (which, late, damage, ops)) in batches.into_iter().enumerate() {
        let n = books.len();
        books[which % n].batch(b as i64 + 1, late, damage, ops)?;
    }
    Ok(())
}

/// How many random histories the model test runs (`LEDGER_MODEL_CASES` overrides).
fn cases() -> u32 {
    std::env::var("LEDGER_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]
    #[test]
    fn decide_agrees_with_the_model_on_every_outcome_posting_and_balance(
        batches in prop::collection::vec((Just(0usize), prop::bool::weighted(0.3), damage(), prop::collection::vec(op(), 1..9)), 1..8),
        room in prop_oneof![3 => Just(None), 1 => (0i64..60_000).prop_map(Some)],
    ) {
        run(batches, room, &[ledger::DEFAULT_LEDGER_ID])?;
    }

    #[test]
    fn decide_agrees_with_the_model_over_several_ledgers_each_numbered_from_one_in_its_range(
        batches in prop::collection::vec((0usize..3, prop::bool::weighted(0.3), damage(), prop::collection::vec(op(), 1..9)), 1..12),
    ) {
        run(batches, None, &[ledger::DEFAULT_LEDGER_ID, 1, crate::limits::MAX_LEDGERS])?;
    }
}
