//! `decide` checked against a reference model of accounts that change, without PostgreSQL.
//!
//! Random batches of transfers and holds (some with conditions: the account's last posting,
//! its available balance), releases of holds, updates of accounts' terms (status, floor,
//! ceiling, debit limits over windows of seconds; some with a stale expected version), and
//! replays go through [`decide`] (its snapshots built by a small store that does what
//! `storage::batch::load` does, debit windows included) and through a model that keeps the
//! postings and versions as lists and applies the rules plainly: conditions, then status,
//! floor, ceiling and limits in leg order. Period closes join them (some not forward), and
//! transfers some back-dated (some into a closed period). Every outcome, every account's sums
//! and the version in force must agree.

use super::*;
use crate::account::{Account, Direction, Metadata, NormalBalance};
use crate::amount::Amount;
use crate::engine::Totals;
use crate::period::ValidClose;
use crate::posting::{Check, ConditionRequest, LegRequest, PostRequest, VoidRequest};
use crate::record::Posting;
use crate::terms::{AccountStatus, DebitLimit, DebitWindow, Terms, UpdateRequest};
use proptest::prelude::*;
use time::{Duration, OffsetDateTime};

/// (code, normal, allow_negative); ids are the index.
const ACCOUNTS: [(&str, NormalBalance, bool); 3] = [
    ("w", NormalBalance::Credit, true),
    ("a", NormalBalance::Debit, false),
    ("b", NormalBalance::Credit, false),
];

fn at(s: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap() + Duration::seconds(s)
}

fn account(id: usize) -> Account {
    let (code, normal, neg) = ACCOUNTS[id];
    Account {
        id: id as i64,
        ledger: 0,
        code: code.into(),
        currency: "EUR".into(),
        scale: 2,
        normal_balance: normal,
        allow_negative: neg,
        metadata: Metadata::new(),
        created_at: at(0),
    }
}

fn accounts() -> HashMap<String, Account> {
    (0..ACCOUNTS.len())
        .map(|i| (ACCOUNTS[i].0.to_owned(), account(i)))
        .collect()
}

/// A generated condition: the account's last posting (as generated: stale or not; as sent:
/// the sequence), or its available balance at least these cents.
#[derive(Clone, Debug)]
enum Cond {
    Stale(usize, bool),
    Last(usize, i64),
    Available(usize, i64),
}

/// A generated change: status (0 open, 1 frozen, 2 closed), floor, ceiling, limits
/// (cents, window seconds); `None`: not named.
#[derive(Clone, Debug)]
struct Change {
    status: Option<u8>,
    floor: Option<Option<i64>>,
    ceiling: Option<Option<i64>>,
    limits: Option<Vec<(i64, u32)>>,
}

#[derive(Clone, Debug)]
enum Op {
    Post {
        key: u8,
        from: usize,
        to: usize,
        cents: i64,
        hold: bool,
        cond: Option<Cond>,
        /// Effective at this second (back-dated or not); `None`: when recorded.
        effective: Option<i64>,
    },
    Release {
        key: u8,
        hold: usize,
    },
    /// An update from the version in force (`expected` 0) or a later one.
    Update {
        key: u8,
        account: usize,
        expected: i64,
        change: Change,
    },
    /// A period close before this second (a close of a period not ended when the batch
    /// runs is not sent: decide refuses it unbound, see `rules.rs`).
    Close {
        key: u8,
        before: i64,
    },
    Again {
        of: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let acct = 0usize..3;
    let cond = prop_oneof![
        3 => Just(None),
        1 => (0usize..3, any::<bool>()).prop_map(|(a, s)| Some(Cond::Stale(a, s))),
        1 => (0usize..3, -500i64..3000).prop_map(|(a, c)| Some(Cond::Available(a, c))),
    ];
    let post = (
        0u8..20,
        acct.clone(),
        acct.clone(),
        1i64..1500,
        prop::bool::weighted(0.3),
        cond,
        prop_oneof![3 => Just(None), 1 => (-3i64..16).prop_map(Some)],
    )
        .prop_filter("two accounts", |(_, f, t, ..)| f != t)
        .prop_map(|(key, from, to, cents, hold, cond, effective)| Op::Post {
            key,
            from,
            to,
            cents,
            hold,
            cond,
            effective,
        });
    let amount = prop_oneof![Just(None), (-2000i64..4000).prop_map(Some)];
    let limits = prop::collection::vec((1i64..3000, 1u32..4), 0..3);
    let change = (
        prop_oneof![2 => Just(None), 2 => Just(Some(0u8)), 1 => Just(Some(1)), 1 => Just(Some(2))],
        prop_oneof![2 => Just(None), 1 => amount.clone().prop_map(Some)],
        prop_oneof![2 => Just(None), 1 => amount.prop_map(Some)],
        prop_oneof![1 => Just(None), 1 => limits.prop_map(Some)],
    )
        .prop_map(|(status, floor, ceiling, limits)| Change {
            status,
            floor,
            ceiling,
            limits,
        })
        .prop_filter("names a field", |c| {
            c.status.is_some() || c.floor.is_some() || c.ceiling.is_some() || c.limits.is_some()
        });
    prop_oneof![
        6 => post,
        1 => (0u8..20, any::<usize>()).prop_map(|(key, hold)| Op::Release { key, hold }),
        2 => (0u8..20, 1usize..3, prop_oneof![4 => Just(0i64), 1 => Just(1i64)], change)
            .prop_map(|(key, account, expected, change)| Op::Update { key, account, expected, change }),
        1 => (0u8..20, -3i64..16).prop_map(|(key, before)| Op::Close { key, before }),
        1 => any::<usize>().prop_map(|of| Op::Again { of }),
    ]
}

/// A model posting: legs (account, debit?, cents), a hold or not, released, the second and
/// the microsecond it was recorded at.
#[derive(Clone, Debug)]
struct MPosting {
    legs: Vec<(usize, bool, i64)>,
    hold: bool,
    released: bool,
    releases: bool,
    at: OffsetDateTime,
}

/// What a decided key answered: a posting (index), a version (account, version), a reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Done {
    Posting(usize),
    Version(usize, i64),
    /// A close before that second.
    Close(i64),
}

#[derive(Default)]
struct Model {
    keys: HashMap<String, (String, Result<Done, Reason>)>,
    postings: Vec<MPosting>,
    /// Per account, its terms in force.
    terms: Vec<Terms>,
    /// Per account, the model sequence (1-based) of its last posting; 0 none.
    last: Vec<i64>,
    /// The ledger's close: nothing effective before this second.
    closed_before: Option<i64>,
}

impl Model {
    fn new() -> Model {
        Model {
            terms: ACCOUNTS.iter().map(|a| Terms::initial(a.2)).collect(),
            last: vec![0; ACCOUNTS.len()],
            ..Model::default()
        }
    }

    /// (debits, credits, held debits, held credits).
    fn sums(&self, a: usize) -> [i64; 4] {
        let mut s = [0; 4];
        for p in &self.postings {
            let slot = match (p.hold, p.released, p.releases) {
                (false, _, false) => 0,
                (true, false, _) => 2,
                _ => continue,
            };
            for l in p.legs.iter().filter(|l| l.0 == a) {
                s[slot + usize::from(!l.1)] += l.2;
            }
        }
        s
    }

    fn available(a: usize, [d, c, hd, hc]: [i64; 4]) -> i64 {
        match ACCOUNTS[a].1 {
            NormalBalance::Debit => d - c - hc,
            NormalBalance::Credit => c - d - hd,
        }
    }

    fn raised(a: usize, [d, c, hd, hc]: [i64; 4]) -> i64 {
        match ACCOUNTS[a].1 {
            NormalBalance::Debit => d - c + hd,
            NormalBalance::Credit => c - d + hc,
        }
    }

    /// Debits moved on `a` recorded after `t − window`, its open held debits, and the
    /// debits of `extra` (the posting being decided: moved now, or held).
    fn debit_use(
        &self,
        a: usize,
        window: u32,
        t: OffsetDateTime,
        extra: &[(usize, bool, i64)],
    ) -> i64 {
        let cut = t - Duration::seconds(i64::from(window));
        let mut used = 0;
        for p in &self.postings {
            let moved = !p.hold && !p.releases && p.at > cut;
            let held = p.hold && !p.released;
            if moved || held {
                used += p
                    .legs
                    .iter()
                    .filter(|l| l.0 == a && l.1)
                    .map(|l| l.2)
                    .sum::<i64>();
            }
        }
        used + extra
            .iter()
            .filter(|l| l.0 == a && l.1)
            .map(|l| l.2)
            .sum::<i64>()
    }

    /// The refusal of a transfer or hold by the account rules, in decide's order.
    fn refusal(
        &self,
        legs: &[(usize, bool, i64)],
        hold: bool,
        t: OffsetDateTime,
    ) -> Option<Reason> {
        for l in legs {
            match self.terms[l.0].status {
                AccountStatus::Open => {}
                AccountStatus::Frozen => return Some(Reason::AccountFrozen),
                AccountStatus::Closed => return Some(Reason::AccountClosed),
            }
        }
        let after = |a: usize| {
            let mut s = self.sums(a);
            for l in legs.iter().filter(|l| l.0 == a) {
                s[usize::from(hold) * 2 + usize::from(!l.1)] += l.2;
            }
            s
        };
        for l in legs {
            if let Some(f) = self.terms[l.0].floor {
                if i128::from(Model::available(l.0, after(l.0))) < f {
                    return Some(Reason::InsufficientFunds);
                }
            }
        }
        for l in legs {
            if let Some(c) = self.terms[l.0].ceiling {
                let (before, now) = (
                    Model::raised(l.0, self.sums(l.0)),
                    Model::raised(l.0, after(l.0)),
                );
                if i128::from(now) > c && now > before {
                    return Some(Reason::BalanceCeilingExceeded);
                }
            }
        }
        for l in legs.iter().filter(|l| l.1) {
            for limit in &self.terms[l.0].debit_limits {
                let before = self.debit_use(l.0, limit.window_seconds, t, &[]);
                let now = self.debit_use(l.0, limit.window_seconds, t, legs);
                if i128::from(now) > limit.amount && now > before {
                    return Some(Reason::DebitLimitExceeded);
                }
            }
        }
        None
    }

    fn condition(&self, c: &Cond) -> bool {
        match *c {
            Cond::Last(a, n) => self.last[a] == n,
            Cond::Available(a, cents) => Model::available(a, self.sums(a)) >= cents,
            Cond::Stale(..) => unreachable!("resolved when sent"),
        }
    }

    fn record(&mut self, p: MPosting) -> Done {
        let i = self.postings.len();
        for l in &p.legs {
            self.last[l.0] = i as i64 + 1;
        }
        self.postings.push(p);
        Done::Posting(i)
    }

    /// A new version of `a`'s terms, or its refusal.
    fn update(&mut self, a: usize, expected: i64, c: &Change) -> Result<Done, Reason> {
        let t = &self.terms[a];
        if t.status == AccountStatus::Closed {
            return Err(Reason::AccountClosed);
        }
        if t.version != expected {
            return Err(Reason::AccountVersionMismatch);
        }
        let next = Terms {
            version: t.version + 1,
            status: c.status.map_or(t.status, status),
            floor: c.floor.map_or(t.floor, |f| f.map(i128::from)),
            ceiling: c.ceiling.map_or(t.ceiling, |f| f.map(i128::from)),
            debit_limits: c
                .limits
                .as_ref()
                .map_or(t.debit_limits.clone(), |l| limits(l)),
        };
        let s = self.sums(a);
        if next.status == AccountStatus::Closed && (s[0] != s[1] || s[2] != 0 || s[3] != 0) {
            return Err(Reason::AccountNotEmpty);
        }
        if next
            .floor
            .is_some_and(|f| i128::from(Model::available(a, s)) < f)
        {
            return Err(Reason::InsufficientFunds);
        }
        if next
            .ceiling
            .is_some_and(|c| i128::from(Model::raised(a, s)) > c)
        {
            return Err(Reason::BalanceCeilingExceeded);
        }
        let v = next.version;
        self.terms[a] = next;
        Ok(Done::Version(a, v))
    }
}

fn status(s: u8) -> AccountStatus {
    [
        AccountStatus::Open,
        AccountStatus::Frozen,
        AccountStatus::Closed,
    ][usize::from(s)]
}

fn limits(l: &[(i64, u32)]) -> Vec<DebitLimit> {
    l.iter()
        .map(|&(cents, window_seconds)| DebitLimit {
            amount: i128::from(cents),
            window_seconds,
        })
        .collect()
}

/// The store: what `storage::batch::load` reads back.
#[derive(Default)]
struct Store {
    decided: HashMap<(String, String), StoredDecision>,
    postings: Vec<(Posting, bool)>,
    totals: HashMap<i64, Totals>,
    terms: HashMap<i64, Terms>,
    last_sequence: HashMap<i64, i64>,
    last: Option<(i64, OffsetDateTime)>,
    next_key_id: i64,
    closed_before: Option<OffsetDateTime>,
}

impl Store {
    fn clock(&self, now: OffsetDateTime) -> Clock {
        let (last_sequence, last_recorded_at) =
            self.last.unwrap_or((0, OffsetDateTime::UNIX_EPOCH));
        Clock {
            last_sequence,
            last_recorded_at,
            now,
        }
    }

    /// An account's debit windows as `WINDOWS_SQL` reads them.
    fn windows(
        &self,
        id: i64,
        terms: &Terms,
        clock: &Clock,
        requests: &[WriteRequest],
    ) -> Vec<DebitWindow> {
        let lo = clock.now.max(clock.last_recorded_at);
        let hi = lo + Duration::microseconds(requests.len() as i64 + 1);
        let mut seen: Vec<u32> = terms
            .debit_limits
            .iter()
            .map(|l| l.window_seconds)
            .collect();
        seen.extend(
            update_windows(requests)
                .into_iter()
                .filter(|w| w.0 == id)
                .map(|w| w.1),
        );
        seen.sort_unstable();
        seen.dedup();
        let debits = |p: &Posting| -> i128 {
            let code = ACCOUNTS[id as usize].0;
            p.legs
                .iter()
                .filter(|l| l.account == code && l.direction == Direction::Debit)
                .map(|l| l.amount.minor())
                .sum()
        };
        seen.into_iter()
            .map(|w| {
                let (lo_cut, hi_cut) = (
                    lo - Duration::seconds(i64::from(w)),
                    hi - Duration::seconds(i64::from(w)),
                );
                let moved = self
                    .postings
                    .iter()
                    .filter(|(_, moved)| *moved)
                    .map(|(p, _)| p);
                let mut window = DebitWindow {
                    window_seconds: w,
                    debits_before: 0,
                    edge: Vec::new(),
                };
                for p in moved {
                    let d = debits(p);
                    if p.recorded_at <= lo_cut {
                        window.debits_before += d;
                    } else if p.recorded_at <= hi_cut && d > 0 {
                        window.edge.push((p.recorded_at, d));
                    }
                }
                window
            })
            .collect()
    }

    fn snapshot(&mut self, requests: &[WriteRequest], now: OffsetDateTime) -> Snapshot {
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
        let clock = self.clock(now);
        let accounts = (0..ACCOUNTS.len() as i64)
            .map(|id| {
                let totals = self.totals.get(&id).copied().unwrap_or_default();
                let mut s = AccountState::new(account(id as usize), totals);
                s.terms = self.terms.get(&id).cloned().unwrap_or(s.terms);
                s.last_sequence = self.last_sequence.get(&id).copied().unwrap_or(0);
                s.windows = self.windows(id, &s.terms, &clock, requests);
                (id, s)
            })
            .collect();
        Snapshot {
            clock,
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
                .map(|(p, _)| (p.posting_id, p.clone()))
                .collect(),
            corrupt_accounts: HashMap::new(),
            corrupt_named: HashMap::new(),
            expiring: Vec::new(),
            chain: None,
            closed_before: self.closed_before,
        }
    }

    fn write(&mut self, plan: &Plan, requests: &[WriteRequest], snapshot: &Snapshot) {
        for p in &plan.postings {
            if let Some(c) = p.posting.closes {
                let held = self
                    .postings
                    .iter_mut()
                    .find(|(x, _)| x.posting_id == c.hold)
                    .unwrap();
                held.0.hold.as_mut().unwrap().closed_by = Some((p.posting.posting_id, c.kind));
            }
            self.postings.push((p.posting.clone(), !p.legs.is_empty()));
        }
        for t in &plan.totals {
            self.totals.insert(t.account_id, t.totals);
            self.last_sequence.insert(t.account_id, t.last_sequence);
        }
        for v in &plan.versions {
            self.terms
                .insert(v.version.account_id, v.version.terms.clone());
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
        if let Some(c) = plan.closes.last() {
            self.closed_before = Some(c.close.effective_before);
        }
        let recorded = plan
            .versions
            .iter()
            .map(|v| v.version.recorded_at)
            .chain(plan.closes.iter().map(|c| c.close.recorded_at))
            .max();
        self.last = match (plan.last(), self.last) {
            (Some(l), _) => Some((l.0, recorded.map_or(l.1, |r| r.max(l.1)))),
            (None, Some(l)) => Some((l.0, recorded.map_or(l.1, |r| r.max(l.1)))),
            (None, None) => recorded.map(|r| (0, r)),
        };
    }
}

/// One generated request, for `decide` and for the model.
struct Sent {
    request: WriteRequest,
    meaning: String,
    op: Op,
}

fn leg_requests(legs: &[(usize, bool, i64)]) -> Vec<LegRequest> {
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

fn transfer_legs(from: usize, to: usize, cents: i64) -> Vec<(usize, bool, i64)> {
    vec![(to, true, cents), (from, false, cents)]
}

/// The journal as the test runs it: the store, the model, posting ids by model index.
struct Book {
    store: Store,
    model: Model,
    ids: Vec<Uuid>,
    sent: Vec<Op>,
}

impl Book {
    fn new() -> Result<Book, TestCaseError> {
        let mut book = Book {
            store: Store::default(),
            model: Model::new(),
            ids: Vec::new(),
            sent: Vec::new(),
        };
        let fund = (1..3)
            .map(|to| Op::Post {
                key: 100 + to as u8,
                from: 0,
                to,
                cents: 5_000,
                hold: false,
                cond: None,
                effective: None,
            })
            .collect();
        book.batch(0, fund)?;
        Ok(book)
    }

    /// The op as sent now: targets, stale sequences and versions made concrete.
    fn resolve(&self, op: Op) -> Option<Op> {
        Some(match op {
            Op::Again { of } => self.sent.get(of.checked_rem(self.sent.len())?)?.clone(),
            Op::Post {
                key,
                from,
                to,
                cents,
                hold,
                cond: Some(Cond::Stale(a, stale)),
                effective,
            } => {
                let n = self.model.last[a] + i64::from(stale);
                Op::Post {
                    key,
                    from,
                    to,
                    cents,
                    hold,
                    cond: Some(Cond::Last(a, n)),
                    effective,
                }
            }
            Op::Release { key, hold } => {
                let holds: Vec<usize> = (0..self.model.postings.len())
                    .filter(|&i| self.model.postings[i].hold)
                    .collect();
                Op::Release {
                    key,
                    hold: holds[hold.checked_rem(holds.len())?],
                }
            }
            Op::Update {
                key,
                account,
                expected,
                change,
            } => {
                let expected = self.model.terms[account].version + expected;
                Op::Update {
                    key,
                    account,
                    expected,
                    change,
                }
            }
            op => op,
        })
    }

    /// The request of a resolved op, validated as the service does (`None`: the service
    /// refuses it before the writer).
    fn sent_of(&self, op: &Op) -> Option<Sent> {
        let (command, meaning) = match op {
            Op::Post {
                key,
                from,
                to,
                cents,
                hold,
                cond,
                effective,
            } => {
                let conditions = cond.iter().map(condition_request).collect();
                let req = PostRequest {
                    idempotency_key: format!("k{key}"),
                    legs: leg_requests(&transfer_legs(*from, *to, *cents)),
                    effective_at: effective.map(at),
                    memo: String::new(),
                    metadata: Metadata::new(),
                    hold: *hold,
                    hold_expires_at: None,
                    conditions,
                };
                let meaning = format!("post {from} {to} {cents} {hold} {cond:?} {effective:?}");
                (Command::Post(req.validate(&accounts()).ok()?), meaning)
            }
            Op::Release { key, hold } => {
                let req = VoidRequest {
                    idempotency_key: format!("k{key}"),
                    posting_id: self.ids[*hold].to_string(),
                    reason: String::new(),
                    effective_at: None,
                };
                (
                    Command::Void(req.validate().ok()?),
                    format!("release {hold}"),
                )
            }
            Op::Update {
                key,
                account,
                expected,
                change,
            } => {
                let req = update_request(*key, *account, *expected, change);
                let valid = req.validate(&accounts()[ACCOUNTS[*account].0]).ok()?;
                (
                    Command::Update(Box::new(valid)),
                    format!("update {account} {expected} {change:?}"),
                )
            }
            Op::Close { key, before } => {
                let close = ValidClose::validate(Some(at(*before)), &format!("k{key}"), "")
                    .expect("a valid close");
                (Command::Close(close), format!("close {before}"))
            }
            Op::Again { .. } => unreachable!("resolved"),
        };
        let request = WriteRequest {
            caller: "c".into(),
            command,
        };
        Some(Sent {
            request,
            meaning,
            op: op.clone(),
        })
    }
}

fn condition_request(c: &Cond) -> ConditionRequest {
    let (a, check) = match *c {
        Cond::Last(a, n) => (a, Check::LastSequence(n as u64)),
        Cond::Available(a, cents) => (
            a,
            Check::AvailableAtLeast(Amount::from_minor(i128::from(cents.abs()), 2).to_string()),
        ),
        Cond::Stale(..) => unreachable!("resolved when sent"),
    };
    let check = match (check, c) {
        (Check::AvailableAtLeast(text), Cond::Available(_, cents)) if *cents < 0 => {
            Check::AvailableAtLeast(format!("-{text}"))
        }
        (check, _) => check,
    };
    ConditionRequest {
        account: ACCOUNTS[a].0.into(),
        check: Some(check),
    }
}

fn update_request(key: u8, account: usize, expected: i64, c: &Change) -> UpdateRequest {
    let cents = |m: Option<i64>| {
        m.map_or(String::new(), |m| {
            let text = Amount::from_minor(i128::from(m.abs()), 2).to_string();
            if m < 0 {
                format!("-{text}")
            } else {
                text
            }
        })
    };
    let mut mask = Vec::new();
    let mut r = UpdateRequest {
        idempotency_key: format!("k{key}"),
        code: ACCOUNTS[account].0.into(),
        expected_version: expected as u64,
        reason: "model".into(),
        ..UpdateRequest::default()
    };
    if let Some(s) = c.status {
        mask.push("status");
        r.status = Some(status(s));
    }
    if let Some(f) = c.floor {
        mask.push("balance_floor");
        r.floor = cents(f);
    }
    if let Some(f) = c.ceiling {
        mask.push("balance_ceiling");
        r.ceiling = cents(f);
    }
    if let Some(l) = &c.limits {
        mask.push("debit_limits");
        r.debit_limits = l.iter().map(|&(m, w)| (cents(Some(m)), w)).collect();
    }
    r.update_mask = mask.into_iter().map(String::from).collect();
    r
}

impl Model {
    /// What a request with a new key does, at time `t`; `k` the postings recorded so far
    /// in the batch.
    fn decide(&mut self, op: &Op, t: OffsetDateTime) -> Result<Done, Reason> {
        match op {
            Op::Post {
                from,
                to,
                cents,
                hold,
                cond,
                effective,
                ..
            } => {
                if cond.as_ref().is_some_and(|c| !self.condition(c)) {
                    return Err(Reason::ConditionFailed);
                }
                let when = effective.map_or(t, at);
                if self.closed_before.is_some_and(|b| when < at(b)) {
                    return Err(Reason::PeriodClosed);
                }
                let legs = transfer_legs(*from, *to, *cents);
                if let Some(r) = self.refusal(&legs, *hold, t) {
                    return Err(r);
                }
                Ok(self.record(MPosting {
                    legs,
                    hold: *hold,
                    released: false,
                    releases: false,
                    at: t,
                }))
            }
            Op::Release { hold, .. } => {
                if self.postings[*hold].released {
                    return Err(Reason::HoldNotPending);
                }
                self.postings[*hold].released = true;
                let legs = self.postings[*hold]
                    .legs
                    .iter()
                    .map(|&(a, d, c)| (a, !d, c))
                    .collect();
                Ok(self.record(MPosting {
                    legs,
                    hold: false,
                    released: false,
                    releases: true,
                    at: t,
                }))
            }
            Op::Update {
                account,
                expected,
                change,
                ..
            } => self.update(*account, *expected, change),
            Op::Close { before, .. } => {
                if self.closed_before.is_some_and(|b| *before <= b) {
                    return Err(Reason::PeriodCloseNotForward);
                }
                self.closed_before = Some(*before);
                Ok(Done::Close(*before))
            }
            Op::Again { .. } => unreachable!("resolved"),
        }
    }

    /// The answer to a request: a replay, a reused key, or a new decision.
    fn answer(&mut self, s: &Sent, t: OffsetDateTime) -> Result<(Done, bool), Reason> {
        let key = s.request.command.key().to_owned();
        if let Some((meaning, outcome)) = self.keys.get(&key) {
            if meaning != &s.meaning {
                return Err(Reason::IdempotencyKeyReused);
            }
            return outcome.map(|d| (d, true));
        }
        let outcome = self.decide(&s.op, t);
        self.keys.insert(key, (s.meaning.clone(), outcome));
        outcome.map(|d| (d, false))
    }
}

impl Book {
    /// One batch at second `second`: decided, written, checked against the model.
    fn batch(&mut self, second: i64, ops: Vec<Op>) -> Result<(), TestCaseError> {
        let mut sent = Vec::new();
        for op in ops {
            let Some(op) = self.resolve(op) else { continue };
            if matches!(op, Op::Close { before, .. } if before > second) {
                continue;
            }
            if let Some(s) = self.sent_of(&op) {
                self.sent.push(op);
                sent.push(s);
            }
        }
        if sent.is_empty() {
            return Ok(());
        }
        let requests: Vec<WriteRequest> = sent.iter().map(|s| s.request.clone()).collect();
        let now = at(second);
        let snapshot = self.store.snapshot(&requests, now);
        let ids: Vec<Uuid> = requests.iter().map(|_| Uuid::now_v7()).collect();
        let plan = decide(&snapshot, &requests, &ids);
        prop_assert!(
            plan.unbound.is_empty(),
            "refused unbound: {:?}",
            plan.unbound
        );
        plan.assert_sound(&snapshot.clock);
        let mut recorded = 0i64;
        let base = snapshot.clock.base();
        for (i, s) in sent.iter().enumerate() {
            let t = base + Duration::microseconds(recorded);
            let want = self.model.answer(s, t);
            if let Ok((Done::Posting(_), false)) = want {
                recorded += 1;
            }
            self.check(&plan.outcomes[i], want)?;
        }
        self.store.write(&plan, &requests, &snapshot);
        self.check_sums()
    }

    fn check(
        &mut self,
        got: &Outcome,
        want: Result<(Done, bool), Reason>,
    ) -> Result<(), TestCaseError> {
        match (got, want) {
            (Ok(w), Ok((Done::Posting(n), replayed))) => {
                let p = w
                    .posting()
                    .ok_or_else(|| TestCaseError::fail("a version, not a posting"))?;
                if n == self.ids.len() {
                    self.ids.push(p.posting_id);
                }
                prop_assert_eq!(p.posting_id, self.ids[n]);
                prop_assert_eq!(w.replayed, replayed);
            }
            (Ok(w), Ok((Done::Version(a, v), replayed))) => {
                let super::Done::Version(got) = &w.done else {
                    return Err(TestCaseError::fail("a posting, not a version"));
                };
                prop_assert_eq!((got.account_id, got.terms.version), (a as i64, v));
                prop_assert_eq!(w.replayed, replayed);
            }
            (Ok(w), Ok((Done::Close(before), replayed))) => {
                let super::Done::Close(got) = &w.done else {
                    return Err(TestCaseError::fail("not a close"));
                };
                prop_assert_eq!(got.effective_before, at(before));
                prop_assert_eq!(w.replayed, replayed);
            }
            (Err(e), Err(r)) => prop_assert_eq!(e.reason, r, "{}", e),
            (got, want) => prop_assert!(false, "decide {:?}, model {:?}", got, want),
        }
        Ok(())
    }

    fn check_sums(&self) -> Result<(), TestCaseError> {
        for (a, &(_, _, negative)) in ACCOUNTS.iter().enumerate() {
            let t = self
                .store
                .totals
                .get(&(a as i64))
                .copied()
                .unwrap_or_default();
            let s = self.model.sums(a).map(i128::from);
            prop_assert_eq!(
                [t.debits, t.credits, t.held_debits, t.held_credits],
                s,
                "account {}",
                a
            );
            let terms = self
                .store
                .terms
                .get(&(a as i64))
                .cloned()
                .unwrap_or(Terms::initial(negative));
            prop_assert_eq!(&terms, &self.model.terms[a], "terms of account {}", a);
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Accounts that change: every outcome of `decide`, every account's sums and the terms
    /// in force agree with the model.
    #[test]
    fn decide_agrees_with_the_model_of_accounts_that_change(
        batches in prop::collection::vec(prop::collection::vec(op(), 1..6), 1..16)
    ) {
        let mut book = Book::new()?;
        for (b, ops) in batches.into_iter().enumerate() {
            // Batches a second apart: debit limits' windows of 1..3 s see debits leave them.
            book.batch(b as i64 + 1, ops)?;
        }
    }
}
