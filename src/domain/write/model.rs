//! `decide` checked against a reference model, without PostgreSQL.
//!
//! Random batches of posts, replays, keys reused for other requests, voids (of postings, of
//! voids, twice), overdrafts, back- and future-dated effective times and duplicate keys inside
//! a batch go through [`decide`] (its snapshots built by a small in-memory store that does
//! what `storage::batch::load` does) and through a model written separately: a map of keys, a
//! list of postings, balances by summing legs. Every outcome and every balance must agree,
//! and every plan must keep the journal's invariants.

use super::*;
use crate::domain::account::{Account, NormalBalance};
use crate::domain::posting::{LegRequest, PostRequest, VoidRequest};
use proptest::prelude::*;

/// (code, currency, normal, allow_negative) of the model's accounts; ids are the index.
const ACCOUNTS: [(&str, &str, NormalBalance, bool); 6] = [
    ("w", "EUR", NormalBalance::Credit, true),
    ("a", "EUR", NormalBalance::Debit, false),
    ("b", "EUR", NormalBalance::Debit, false),
    ("c", "EUR", NormalBalance::Credit, false),
    ("uw", "USD", NormalBalance::Credit, true),
    ("u", "USD", NormalBalance::Debit, false),
];

fn start() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
}

fn accounts() -> HashMap<String, Account> {
    ACCOUNTS
        .iter()
        .enumerate()
        .map(|(id, &(code, currency, normal, neg))| {
            let a = Account {
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

/// A generated operation: what a caller sends.
#[derive(Clone, Debug)]
enum Op {
    /// Transfers (from, to, cents) within one currency, an effective offset in days.
    Post {
        caller: u8,
        key: u8,
        transfers: Vec<(usize, usize, i64)>,
        days: Option<i64>,
        memo: u8,
    },
    /// A void of the `target`-th posting recorded so far (mod their count).
    Void {
        caller: u8,
        key: u8,
        target: usize,
        reason: u8,
    },
    /// The `of`-th request sent so far, sent again as it was.
    Again { of: usize },
}

fn op() -> impl Strategy<Value = Op> {
    let transfer = (0usize..6, 0usize..6, 1i64..5_000).prop_map(|(f, t, c)| {
        // Within a currency: accounts 0..4 are EUR, 4..6 USD.
        let (lo, hi) = if f < 4 { (0, 4) } else { (4, 6) };
        let t = lo + (t % (hi - lo));
        (
            f,
            if t == f {
                lo + (f + 1 - lo) % (hi - lo)
            } else {
                t
            },
            c,
        )
    });
    let days = prop_oneof![Just(None), (-30i64..30).prop_map(Some)];
    prop_oneof![
        5 => (0u8..2, 0u8..10, prop::collection::vec(transfer, 1..4), days, 0u8..2)
            .prop_map(|(caller, key, transfers, days, memo)| Op::Post { caller, key, transfers, days, memo }),
        2 => (0u8..2, 0u8..10, any::<usize>(), 0u8..2).prop_map(|(caller, key, target, reason)| Op::Void { caller, key, target, reason }),
        2 => any::<usize>().prop_map(|of| Op::Again { of }),
    ]
}

/// What the store holds: what `storage::batch::load` would read back.
#[derive(Default)]
struct Store {
    decided: HashMap<(String, String), StoredDecision>,
    postings: Vec<Posting>,
    totals: HashMap<i64, Totals>,
    next_key_id: i64,
    last: Option<(i64, OffsetDateTime)>,
}

impl Store {
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
        let accounts = accounts()
            .into_values()
            .map(|a| {
                (
                    a.id,
                    AccountState {
                        rule: Rule::of(&a),
                        totals: self.totals.get(&a.id).copied().unwrap_or_default(),
                    },
                )
            })
            .collect();
        let (last_sequence, last_recorded_at) =
            self.last.unwrap_or((0, OffsetDateTime::UNIX_EPOCH));
        Snapshot {
            clock: Clock {
                last_sequence,
                last_recorded_at,
                now,
            },
            keys,
            accounts,
            account_ids: accounts_by_code(),
            targets: self
                .postings
                .iter()
                .map(|p| (p.posting_id, p.clone()))
                .collect(),
            corrupt_accounts: HashMap::new(),
            corrupt_targets: HashMap::new(),
        }
    }

    /// What `storage::batch::write` would leave: the plan's rows, and each claimed key's
    /// decision (from the outcome of the first request with it).
    fn write(&mut self, plan: &Plan, requests: &[WriteRequest], snapshot: &Snapshot) {
        for p in &plan.postings {
            if let Some(target) = p.posting.voids_posting_id {
                let t = self
                    .postings
                    .iter_mut()
                    .find(|t| t.posting_id == target)
                    .unwrap();
                t.voided_by_posting_id = Some(p.posting.posting_id);
            }
            self.postings.push(p.posting.clone());
        }
        for t in &plan.totals {
            self.totals.insert(t.account_id, t.totals);
        }
        for (&i, key) in distinct_keys(requests).iter().zip(&snapshot.keys) {
            if let KeyState::Claimed(_) = key {
                let r = &requests[i];
                let outcome = plan.outcomes[i].clone().map(|d| d.posting);
                let d = StoredDecision {
                    operation: r.command.operation(),
                    fingerprint: *r.command.fingerprint(),
                    outcome,
                };
                self.decided
                    .insert((r.caller.clone(), r.command.key().to_owned()), d);
            }
        }
        self.last = plan.last().or(self.last);
    }
}

fn accounts_by_code() -> HashMap<String, i64> {
    ACCOUNTS
        .iter()
        .enumerate()
        .map(|(i, a)| (a.0.to_owned(), i as i64))
        .collect()
}

/// A model leg: (account, debit?, cents).
type MLeg = (usize, bool, i64);
/// A model posting: its legs, the posting it voids, whether it is voided.
type MPosting = (Vec<MLeg>, Option<usize>, bool);
/// What a request would record: its legs and the posting it voids, or why not.
type MLegs = Result<(Vec<MLeg>, Option<usize>), Reason>;

/// The reference model: keys, postings, balances by summing legs, the rules written plainly.
#[derive(Default)]
struct Model {
    /// (caller, key) → (what was asked, the outcome: a posting's index or a reason).
    keys: HashMap<(String, String), (String, Result<usize, Reason>)>,
    /// (legs as (account, debit?, cents), the posting it voids, whether it is voided).
    postings: Vec<MPosting>,
}

/// What the model answers a request with: the posting's index and whether it is a replay.
type ModelOutcome = Result<(usize, bool), Reason>;

impl Model {
    fn balance(&self, account: usize) -> (i64, i64) {
        let legs = self
            .postings
            .iter()
            .flat_map(|p| p.0.iter())
            .filter(|l| l.0 == account);
        legs.fold(
            (0, 0),
            |(d, c), l| if l.1 { (d + l.2, c) } else { (d, c + l.2) },
        )
    }

    fn answer(&mut self, caller: &str, key: &str, meaning: String, legs: MLegs) -> ModelOutcome {
        let k = (caller.to_owned(), key.to_owned());
        if let Some((asked, outcome)) = self.keys.get(&k) {
            return match (asked == &meaning, outcome) {
                (false, _) => Err(Reason::IdempotencyKeyReused),
                (true, Ok(i)) => Ok((*i, true)),
                (true, Err(r)) => Err(*r),
            };
        }
        let outcome = legs.and_then(|(legs, voids)| self.record(legs, voids));
        self.keys.insert(k, (meaning, outcome));
        outcome.map(|i| (i, false))
    }

    fn record(&mut self, legs: Vec<MLeg>, voids: Option<usize>) -> Result<usize, Reason> {
        for (id, &(_, _, normal, neg)) in ACCOUNTS.iter().enumerate() {
            let (mut d, mut c) = self.balance(id);
            for l in legs.iter().filter(|l| l.0 == id) {
                if l.1 {
                    d += l.2
                } else {
                    c += l.2
                }
            }
            let balance = if normal == NormalBalance::Debit {
                d - c
            } else {
                c - d
            };
            if !neg && balance < 0 && legs.iter().any(|l| l.0 == id) {
                return Err(Reason::InsufficientFunds);
            }
        }
        if let Some(t) = voids {
            self.postings[t].2 = true;
        }
        self.postings.push((legs, voids, false));
        Ok(self.postings.len() - 1)
    }

    fn void_legs(&self, target: usize) -> MLegs {
        let (legs, voids, voided) = &self.postings[target];
        match (voids, voided) {
            (Some(_), _) => Err(Reason::VoidOfVoid),
            (None, true) => Err(Reason::AlreadyVoided),
            (None, false) => Ok((
                legs.iter().map(|&(a, d, c)| (a, !d, c)).collect(),
                Some(target),
            )),
        }
    }
}

/// One generated request: for `decide`, and for the model (its meaning and legs).
struct Sent {
    request: WriteRequest,
    meaning: String,
    legs: MLegs,
}

fn legs_of(transfers: &[(usize, usize, i64)]) -> Vec<MLeg> {
    transfers
        .iter()
        .flat_map(|&(f, t, c)| [(t, true, c), (f, false, c)])
        .collect()
}

fn post(
    caller: u8,
    key: u8,
    transfers: &[(usize, usize, i64)],
    days: Option<i64>,
    memo: u8,
) -> Sent {
    let legs = legs_of(transfers);
    let effective_at = days.map(|d| start() + Duration::days(d));
    let req = PostRequest {
        idempotency_key: format!("k{key}"),
        legs: legs
            .iter()
            .map(|&(a, debit, cents)| LegRequest {
                account: ACCOUNTS[a].0.into(),
                direction: Some(if debit {
                    Direction::Debit
                } else {
                    Direction::Credit
                }),
                amount: Amount::from_minor(i128::from(cents), 2).to_string(),
            })
            .collect(),
        effective_at,
        memo: format!("m{memo}"),
        metadata: Metadata::new(),
    };
    let valid = req
        .validate(&accounts())
        .expect("the model's posts are valid");
    Sent {
        meaning: format!("post {legs:?} {days:?} {memo}"),
        request: WriteRequest {
            caller: format!("c{caller}"),
            command: Command::Post(valid),
        },
        legs: Ok((legs, None)),
    }
}

fn void(model: &Model, ids: &[Uuid], caller: u8, key: u8, target: usize, reason: u8) -> Sent {
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
        legs: model.void_legs(target),
    }
}

/// Checks a plan's outcomes and its invariants against the model's answers.
fn check(
    plan: &Plan,
    snapshot: &Snapshot,
    want: &[ModelOutcome],
    ids: &mut Vec<Uuid>,
) -> Result<(), TestCaseError> {
    plan.assert_sound(&snapshot.clock);
    for p in &plan.postings {
        let legs: Vec<Leg> = p
            .posting
            .legs
            .iter()
            .map(|l| {
                let a = &accounts()[&l.account];
                Leg {
                    account_id: a.id,
                    account_code: a.code.clone(),
                    currency: a.currency.clone(),
                    direction: l.direction,
                    amount: l.amount,
                }
            })
            .collect();
        prop_assert!(check_balanced(&legs).is_ok(), "balanced per currency");
    }
    for (got, want) in plan.outcomes.iter().zip(want) {
        match (got, want) {
            (Ok(d), Ok((i, replayed))) => {
                if *i == ids.len() {
                    ids.push(d.posting.posting_id);
                }
                prop_assert_eq!(d.posting.posting_id, ids[*i], "the model's posting");
                prop_assert_eq!(d.replayed, *replayed);
            }
            (Err(e), Err(r)) => prop_assert_eq!(e.reason, *r),
            (got, want) => prop_assert!(false, "decide {:?}, model {:?}", got, want),
        }
    }
    Ok(())
}

fn run(batches: Vec<Vec<Op>>) -> Result<(), TestCaseError> {
    let (mut store, mut model) = (Store::default(), Model::default());
    let mut ids: Vec<Uuid> = Vec::new(); // posting ids by the model's index
    let mut sent: Vec<Op> = Vec::new();
    for (b, ops) in batches.into_iter().enumerate() {
        let mut batch: Vec<Sent> = Vec::new();
        for op in ops {
            let op = match op {
                Op::Again { of } if !sent.is_empty() => sent[of % sent.len()].clone(),
                Op::Void { .. } | Op::Again { .. } if ids.is_empty() => continue,
                op => op,
            };
            sent.push(op.clone());
            batch.push(match op {
                Op::Post {
                    caller,
                    key,
                    transfers,
                    days,
                    memo,
                } => post(caller, key, &transfers, days, memo),
                Op::Void {
                    caller,
                    key,
                    target,
                    reason,
                } => void(&model, &ids, caller, key, target % ids.len(), reason),
                Op::Again { .. } => unreachable!(),
            });
        }
        if batch.is_empty() {
            continue;
        }
        // The model answers the batch in order (a void's legs as the model stood before it).
        let mut want = Vec::new();
        for s in &batch {
            let legs = match &s.legs {
                Ok((_, Some(t))) => model.void_legs(*t),
                other => other.clone(),
            };
            want.push(model.answer(
                &s.request.caller,
                s.request.command.key(),
                s.meaning.clone(),
                legs,
            ));
        }
        let requests: Vec<WriteRequest> = batch.into_iter().map(|s| s.request).collect();
        let now = start() + Duration::seconds(b as i64);
        let snapshot = store.snapshot(&requests, now);
        let new_ids: Vec<Uuid> = requests.iter().map(|_| Uuid::now_v7()).collect();
        let plan = decide(&snapshot, &requests, &new_ids);
        check(&plan, &snapshot, &want, &mut ids)?;
        store.write(&plan, &requests, &snapshot);
        for (id, &(_, _, normal, _)) in ACCOUNTS.iter().enumerate() {
            let t = store.totals.get(&(id as i64)).copied().unwrap_or_default();
            let (d, c) = model.balance(id);
            prop_assert_eq!(
                (t.debits, t.credits),
                (i128::from(d), i128::from(c)),
                "account {}",
                id
            );
            prop_assert_eq!(
                t.balance(normal),
                if normal == NormalBalance::Debit {
                    i128::from(d - c)
                } else {
                    i128::from(c - d)
                }
            );
        }
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
    fn decide_agrees_with_the_model_on_every_outcome_and_balance(
        batches in prop::collection::vec(prop::collection::vec(op(), 1..9), 1..7)
    ) {
        run(batches)?;
    }
}
