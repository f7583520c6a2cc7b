//! Each rule of `decide`, by name, on a hand-made snapshot.

use super::*;
use crate::account::Direction;
use crate::account::{Account, Metadata, NormalBalance};
use crate::amount::Amount;
use crate::engine::Totals;
use crate::posting::{LegRequest, PostRequest, VoidRequest};
use crate::record::{CloseKind, Closes, PostedLeg, Posting};
use time::Duration;
use time::OffsetDateTime;

fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
}

/// `w` (credit-normal, may go negative) and `a` (debit-normal, may not), EUR at scale 2.
fn accounts() -> HashMap<String, Account> {
    [
        ("w", NormalBalance::Credit, true),
        ("a", NormalBalance::Debit, false),
    ]
    .into_iter()
    .enumerate()
    .map(|(id, (code, normal, neg))| {
        let a = Account {
            ledger: crate::ledger::DEFAULT_LEDGER_ID,
            id: id as i64,
            code: code.into(),
            currency: "EUR".into(),
            scale: 2,
            normal_balance: normal,
            allow_negative: neg,
            metadata: Metadata::new(),
            created_at: t0(),
        };
        (code.to_owned(), a)
    })
    .collect()
}

/// A post of `cents` from `from` to `to` under `key`.
fn post(key: &str, from: &str, to: &str, cents: i128) -> WriteRequest {
    let leg = |account: &str, d| LegRequest {
        account: account.into(),
        direction: Some(d),
        amount: Amount::from_minor(cents, 2).to_string(),
    };
    let req = PostRequest {
        idempotency_key: key.into(),
        legs: vec![leg(to, Direction::Debit), leg(from, Direction::Credit)],
        effective_at: None,
        memo: String::new(),
        metadata: Metadata::new(),
        hold: false,
        hold_expires_at: None,
        conditions: Vec::new(),
    };
    WriteRequest {
        caller: "c".into(),
        command: Command::Post(req.validate(&accounts()).unwrap()),
    }
}

fn void(key: &str, target: &Posting) -> WriteRequest {
    let req = VoidRequest {
        idempotency_key: key.into(),
        posting_id: target.posting_id.to_string(),
        reason: "r".into(),
        effective_at: None,
    };
    WriteRequest {
        caller: "c".into(),
        command: Command::Void(req.validate().unwrap()),
    }
}

/// A recorded posting of 10.00 from `w` to `a` (sequence 1), as a void target.
fn target(voids: Option<Uuid>, voided_by: Option<Uuid>) -> Posting {
    let legs = [("a", Direction::Debit), ("w", Direction::Credit)]
        .map(|(account, direction)| PostedLeg {
            account: account.into(),
            direction,
            amount: Amount::from_minor(1000, 2),
        })
        .to_vec();
    Posting {
        posting_id: Uuid::now_v7(),
        sequence: 1,
        caller: "c".into(),
        idempotency_key: "t".into(),
        legs,
        effective_at: t0(),
        recorded_at: t0(),
        memo: String::new(),
        metadata: Metadata::new(),
        void_reason: voids.map(|_| "r".into()),
        voids_posting_id: voids,
        voided_by_posting_id: voided_by,
        hash: None,
        hold: None,
        closes: None,
    }
}

/// A snapshot with `a` holding `a_cents`, every key of `requests` claimed, and `targets`.
fn snapshot(requests: &[WriteRequest], a_cents: i128, targets: &[Posting]) -> Snapshot {
    let states = accounts()
        .into_values()
        .map(|acc| {
            let totals = if acc.code == "a" {
                Totals {
                    debits: a_cents,
                    credits: 0,
                    version: 1,
                    ..Totals::default()
                }
            } else {
                Totals {
                    debits: 0,
                    credits: a_cents,
                    version: 1,
                    ..Totals::default()
                }
            };
            (acc.id, AccountState::new(acc.clone(), totals))
        })
        .collect();
    Snapshot {
        clock: Clock {
            last_sequence: 1,
            last_recorded_at: t0(),
            now: t0(),
        },
        keys: (0..distinct_keys(requests).len() as i64)
            .map(KeyState::Claimed)
            .collect(),
        accounts: states,
        account_ids: accounts().into_values().map(|a| (a.code, a.id)).collect(),
        named: targets.iter().map(|p| (p.posting_id, p.clone())).collect(),
        corrupt_accounts: HashMap::new(),
        corrupt_named: HashMap::new(),
        expiring: Vec::new(),
        chain: None,
        closed_before: None,
    }
}

fn run(requests: &[WriteRequest], s: &Snapshot) -> Plan {
    let ids: Vec<Uuid> = requests.iter().map(|_| Uuid::now_v7()).collect();
    let plan = decide(s, requests, &ids);
    if plan.unbound.is_empty() {
        plan.assert_sound(&s.clock);
    }
    plan
}

fn reasons(plan: &Plan) -> Vec<Result<bool, Reason>> {
    plan.outcomes
        .iter()
        .map(|o| o.as_ref().map(|d| d.replayed).map_err(|e| e.reason))
        .collect()
}

use Reason::*;

#[test]
fn each_rule_of_decide_by_name() {
    let voided = target(None, Some(Uuid::now_v7()));
    let a_void = target(Some(Uuid::now_v7()), None);
    let open = target(None, None);
    // (rule, requests, cents on `a`, void targets, outcomes (replayed?), refusals bound)
    type Case = (
        &'static str,
        Vec<WriteRequest>,
        i128,
        Vec<Posting>,
        Vec<Result<bool, Reason>>,
        usize,
    );
    let cases: Vec<Case> = vec![
        (
            "a posting within the funds is recorded",
            vec![post("k", "a", "w", 500)],
            1000,
            vec![],
            vec![Ok(false)],
            0,
        ),
        (
            "an overdraft is refused and binds its key",
            vec![post("k", "a", "w", 1500)],
            1000,
            vec![],
            vec![Err(InsufficientFunds)],
            1,
        ),
        (
            "a duplicate in the batch replays the first",
            vec![post("k", "a", "w", 500), post("k", "a", "w", 500)],
            1000,
            vec![],
            vec![Ok(false), Ok(true)],
            0,
        ),
        (
            "a duplicate of a refusal replays the refusal",
            vec![post("k", "a", "w", 1500), post("k", "a", "w", 1500)],
            1000,
            vec![],
            vec![Err(InsufficientFunds), Err(InsufficientFunds)],
            1,
        ),
        (
            "a key reused in the batch for another request is refused",
            vec![post("k", "a", "w", 500), post("k", "a", "w", 400)],
            1000,
            vec![],
            vec![Ok(false), Err(IdempotencyKeyReused)],
            0,
        ),
        (
            "the funds are those after the earlier postings of the batch",
            vec![post("k1", "a", "w", 600), post("k2", "a", "w", 600)],
            1000,
            vec![],
            vec![Ok(false), Err(InsufficientFunds)],
            1,
        ),
        (
            "a void of an open posting is recorded",
            vec![void("v", &open)],
            1000,
            vec![open.clone()],
            vec![Ok(false)],
            0,
        ),
        (
            "a void of a void is refused",
            vec![void("v", &a_void)],
            1000,
            vec![a_void.clone()],
            vec![Err(VoidOfVoid)],
            1,
        ),
        (
            "a void of a voided posting is refused",
            vec![void("v", &voided)],
            1000,
            vec![voided.clone()],
            vec![Err(AlreadyVoided)],
            1,
        ),
        (
            "a second void in the batch is refused",
            vec![void("v1", &open), void("v2", &open)],
            1000,
            vec![open.clone()],
            vec![Ok(false), Err(AlreadyVoided)],
            1,
        ),
        (
            "a void that would overdraw is refused for funds",
            vec![void("v", &open)],
            500,
            vec![open.clone()],
            vec![Err(InsufficientFunds)],
            1,
        ),
    ];
    for (name, requests, a_cents, targets, want, bound) in cases {
        let s = snapshot(&requests, a_cents, &targets);
        let plan = run(&requests, &s);
        assert_eq!(reasons(&plan), want, "{name}");
        assert_eq!(
            plan.rejections.len(),
            bound,
            "{name}: refusals bound to their keys"
        );
    }
}

#[test]
fn a_key_decided_earlier_replays_its_decision_or_refuses_another_request() {
    let first = post("k", "a", "w", 500);
    let recorded = target(None, None);
    let mut s = snapshot(std::slice::from_ref(&first), 1000, &[]);
    s.keys = vec![KeyState::Decided(Box::new(StoredDecision {
        operation: Operation::Post,
        fingerprint: *first.command.fingerprint(),
        outcome: Ok(Done::Posting(recorded.clone())),
    }))];
    let plan = run(std::slice::from_ref(&first), &s);
    let d = plan.outcomes[0].as_ref().unwrap();
    assert!(d.replayed && d.posting() == Some(&recorded) && plan.postings.is_empty());
    let other = post("k", "a", "w", 400);
    let plan = run(std::slice::from_ref(&other), &s);
    assert_eq!(reasons(&plan), [Err(IdempotencyKeyReused)]);
    assert!(plan.rejections.is_empty(), "a reused key binds nothing new");
}

#[test]
fn sequences_follow_the_clock_and_times_come_strictly_after_it_and_the_last_batch() {
    let requests = [
        post("k1", "a", "w", 100),
        post("k2", "a", "w", 100),
        post("k3", "a", "w", 100),
    ];
    let mut s = snapshot(&requests, 1000, &[]);
    s.clock.last_recorded_at = t0() + Duration::seconds(5); // a batch numbered ahead of the clock
    let plan = run(&requests, &s);
    let got: Vec<(u64, OffsetDateTime)> = plan
        .postings
        .iter()
        .map(|p| (p.posting.sequence, p.posting.recorded_at))
        .collect();
    let base = t0() + Duration::seconds(5) + Duration::microseconds(1);
    assert_eq!(
        got,
        [
            (2, base),
            (3, base + Duration::microseconds(1)),
            (4, base + Duration::microseconds(2))
        ]
    );
    assert!(
        plan.postings
            .iter()
            .all(|p| p.posting.effective_at == p.posting.recorded_at),
        "effective when recorded by default"
    );
    assert_eq!(plan.last(), Some((4, base + Duration::microseconds(2))));
}

#[test]
fn a_posting_is_applied_whole_so_its_legs_on_one_account_net_before_the_rule() {
    let net = PostRequest {
        idempotency_key: "net".into(),
        legs: [
            ("a", Direction::Credit, 5000),
            ("a", Direction::Debit, 5000),
            ("a", Direction::Debit, 100),
            ("w", Direction::Credit, 100),
        ]
        .map(|(account, d, cents)| LegRequest {
            account: account.into(),
            direction: Some(d),
            amount: Amount::from_minor(cents, 2).to_string(),
        })
        .to_vec(),
        effective_at: None,
        memo: String::new(),
        metadata: Metadata::new(),
        hold: false,
        hold_expires_at: None,
        conditions: Vec::new(),
    };
    let r = WriteRequest {
        caller: "c".into(),
        command: Command::Post(net.validate(&accounts()).unwrap()),
    };
    let s = snapshot(std::slice::from_ref(&r), 3000, &[]);
    assert_eq!(reasons(&run(std::slice::from_ref(&r), &s)), [Ok(false)]);
}

#[test]
fn requests_touching_corrupt_rows_are_refused_unbound_and_nothing_is_planned() {
    let open = target(None, None);
    let requests = [post("k", "a", "w", 100), void("v", &open)];
    let corrupt = LedgerError::journal_corrupt("account \"a\"", None, "broken");
    let mut s = snapshot(&requests, 1000, std::slice::from_ref(&open));
    s.corrupt_accounts.insert(1, corrupt.clone());
    let plan = run(&requests, &s);
    let refused: Vec<usize> = plan.unbound.iter().map(|(i, _)| *i).collect();
    assert_eq!(
        refused,
        [0, 1],
        "the post's account and the void target's account"
    );
    assert!(plan.postings.is_empty() && plan.rejections.is_empty() && plan.outcomes.is_empty());
    let mut s = snapshot(&requests[1..], 1000, &[]);
    s.corrupt_named.insert(open.posting_id, corrupt.clone());
    assert_eq!(
        run(&requests[1..], &s).unbound.len(),
        1,
        "an unreadable void target"
    );
    let mut s = snapshot(&requests[..1], 1000, &[]);
    s.keys = vec![KeyState::Unreadable(corrupt)];
    assert_eq!(
        run(&requests[..1], &s).unbound.len(),
        1,
        "an unreadable earlier decision"
    );
}

#[test]
#[should_panic(expected = "sequence")]
fn a_plan_with_a_gap_in_its_sequence_is_never_written() {
    let requests = [post("k", "a", "w", 100)];
    let s = snapshot(&requests, 1000, &[]);
    let mut plan = run(&requests, &s);
    plan.postings[0].posting.sequence += 1;
    plan.assert_sound(&s.clock);
}

/// A hold of 10.00 paid by `a` to `w` (sequence 1), expiring at `expires`, closed by `closed`.
fn hold_target(expires: Option<OffsetDateTime>, closed: Option<(Uuid, CloseKind)>) -> Posting {
    let legs = [("w", Direction::Debit), ("a", Direction::Credit)]
        .map(|(account, direction)| PostedLeg {
            account: account.into(),
            direction,
            amount: Amount::from_minor(1000, 2),
        })
        .to_vec();
    Posting {
        hold: Some(crate::record::HoldState {
            expires_at: expires,
            closed_by: closed,
            lapsed: false,
        }),
        legs,
        ..target(None, None)
    }
}

/// A hold of `cents` paid by `from` to `to`, expiring at `expires`.
fn hold(
    key: &str,
    from: &str,
    to: &str,
    cents: i128,
    expires: Option<OffsetDateTime>,
) -> WriteRequest {
    let mut r = post(key, from, to, cents);
    let Command::Post(p) = &mut r.command else {
        unreachable!()
    };
    let req = PostRequest {
        idempotency_key: key.into(),
        legs: p
            .legs
            .iter()
            .map(|l| LegRequest {
                account: l.account_code.clone(),
                direction: Some(l.direction),
                amount: l.amount.to_string(),
            })
            .collect(),
        effective_at: None,
        memo: String::new(),
        metadata: Metadata::new(),
        hold: true,
        hold_expires_at: expires,
        conditions: Vec::new(),
    };
    r.command = Command::Post(req.validate(&accounts()).unwrap());
    r
}

/// A capture of the whole hold.
fn capture(key: &str, hold: &Posting) -> WriteRequest {
    let req = crate::hold::CaptureRequest {
        idempotency_key: key.into(),
        hold_posting_id: hold.posting_id.to_string(),
        legs: Vec::new(),
        effective_at: None,
        memo: String::new(),
        metadata: Metadata::new(),
    };
    WriteRequest {
        caller: "c".into(),
        command: Command::Capture(
            req.validate(&crate::hold::PostingTerms::of(hold), &accounts())
                .unwrap(),
        ),
    }
}

/// A snapshot as [`snapshot`], with the open holds among `targets` held on their accounts,
/// and those with an expiry listed as expiring (as the load lists them, due or not).
fn snapshot_with_holds(requests: &[WriteRequest], a_cents: i128, targets: &[Posting]) -> Snapshot {
    let mut s = snapshot(requests, a_cents, targets);
    let open: Vec<&Posting> = targets
        .iter()
        .filter(|t| t.hold.is_some_and(|h| h.closed_by.is_none()))
        .collect();
    s.expiring = open
        .iter()
        .filter_map(|t| {
            let expires_at = t.hold.and_then(|h| h.expires_at)?;
            let legs = t
                .legs
                .iter()
                .map(|l| HeldLeg {
                    account_id: s.account_ids[&l.account],
                    direction: l.direction,
                    amount: l.amount,
                })
                .collect();
            Some(ExpiringHold {
                hold: t.posting_id,
                expires_at,
                legs,
            })
        })
        .collect();
    for leg in open.iter().flat_map(|t| &t.legs) {
        let totals = &mut s
            .accounts
            .get_mut(&s.account_ids[&leg.account])
            .unwrap()
            .totals;
        match leg.direction {
            Direction::Debit => totals.held_debits += leg.amount.minor(),
            Direction::Credit => totals.held_credits += leg.amount.minor(),
        }
    }
    s
}

#[test]
fn each_hold_rule_by_name() {
    let (past, later) = (t0() - Duration::seconds(1), t0() + Duration::seconds(1));
    let open = hold_target(None, None);
    let expired = hold_target(Some(past), None);
    // The batch records from t0 + 1 µs (its clock reads t0): this hold expires with its second
    // posting.
    let expiring_in_batch = hold_target(Some(t0() + Duration::microseconds(2)), None);
    let captured = hold_target(None, Some((Uuid::now_v7(), CloseKind::Capture)));
    let expired_captured = hold_target(Some(past), Some((Uuid::now_v7(), CloseKind::Capture)));
    let release = Posting {
        closes: Some(Closes {
            hold: open.posting_id,
            kind: CloseKind::Expire,
        }),
        ..target(None, None)
    };
    // (rule, requests, cents on `a`, targets, outcomes (replayed?), refusals bound)
    type Case = (
        &'static str,
        Vec<WriteRequest>,
        i128,
        Vec<Posting>,
        Vec<Result<bool, Reason>>,
        usize,
    );
    let cases: Vec<Case> = vec![
        (
            "a hold within the available balance is recorded",
            vec![hold("h", "a", "w", 500, Some(later))],
            1000,
            vec![],
            vec![Ok(false)],
            0,
        ),
        (
            "a hold beyond the available balance is refused and binds",
            vec![hold("h", "a", "w", 1500, None)],
            1000,
            vec![],
            vec![Err(InsufficientFunds)],
            1,
        ),
        (
            "a hold counts at once against the later postings of the batch",
            vec![hold("h", "a", "w", 600, None), post("p", "a", "w", 600)],
            1000,
            vec![],
            vec![Ok(false), Err(InsufficientFunds)],
            1,
        ),
        (
            "an open hold's amount is not available",
            vec![post("p", "a", "w", 600)],
            1500,
            vec![open.clone()],
            vec![Err(InsufficientFunds)],
            1,
        ),
        (
            "a capture of an open hold is recorded",
            vec![capture("c", &open)],
            1000,
            vec![open.clone()],
            vec![Ok(false)],
            0,
        ),
        (
            "a capture is never refused for funds (they were reserved)",
            vec![capture("c", &open)],
            1000,
            vec![open.clone()],
            vec![Ok(false)],
            0,
        ),
        (
            "a capture after the expiry time is refused and binds, release recorded or not",
            vec![capture("c", &expired), void("v", &expired)],
            1000,
            vec![expired.clone()],
            vec![Err(HoldNotPending), Err(HoldNotPending)],
            2,
        ),
        (
            "a second capture in the batch is refused",
            vec![capture("c1", &open), capture("c2", &open)],
            1000,
            vec![open.clone()],
            vec![Ok(false), Err(HoldNotPending)],
            1,
        ),
        (
            "a release in the batch closes the hold for a capture after it",
            vec![void("v", &open), capture("c", &open)],
            1000,
            vec![open.clone()],
            vec![Ok(false), Err(HoldNotPending)],
            1,
        ),
        (
            "a capture of a closed hold is refused",
            vec![capture("c", &captured)],
            1000,
            vec![captured.clone()],
            vec![Err(HoldNotPending)],
            1,
        ),
        (
            "the expiry of a due hold is recorded",
            vec![ValidExpire::request(expired.posting_id)],
            1000,
            vec![expired.clone()],
            vec![Ok(false)],
            0,
        ),
        (
            "the expiry of a hold closed first is refused and binds",
            vec![ValidExpire::request(expired_captured.posting_id)],
            1000,
            vec![expired_captured.clone()],
            vec![Err(HoldNotPending)],
            1,
        ),
        (
            "a void of the ledger's release is refused",
            vec![void("v", &release)],
            1000,
            vec![release.clone()],
            vec![Err(VoidOfVoid)],
            1,
        ),
        (
            "an expired hold holds nothing for the funds rule before its release is recorded",
            vec![post("p", "a", "w", 1400)],
            1500,
            vec![expired.clone()],
            vec![Ok(false)],
            0,
        ),
        (
            "an expired hold released in the batch is not taken off twice",
            vec![
                ValidExpire::request(expired.posting_id),
                post("p", "a", "w", 2000),
                post("q", "a", "w", 1500),
            ],
            1500,
            vec![expired.clone()],
            vec![Ok(false), Err(InsufficientFunds), Ok(false)],
            1,
        ),
        (
            "a hold stops counting at its expiry time: the request recorded then no longer sees it",
            vec![post("p1", "a", "w", 100), post("p2", "a", "w", 600)],
            1500,
            vec![expiring_in_batch.clone()],
            vec![Ok(false), Ok(false)],
            0,
        ),
        (
            "a capture that would be recorded at or after the expiry time is refused",
            vec![post("p1", "a", "w", 100), capture("c", &expiring_in_batch)],
            1500,
            vec![expiring_in_batch.clone()],
            vec![Ok(false), Err(HoldNotPending)],
            1,
        ),
        (
            "a hold captured before its expiry time does not lapse at it",
            vec![capture("c", &expiring_in_batch), post("p", "a", "w", 1400)],
            1500,
            vec![expiring_in_batch.clone()],
            vec![Ok(false), Err(InsufficientFunds)],
            1,
        ),
    ];
    for (name, requests, a_cents, targets, want, bound) in cases {
        let s = snapshot_with_holds(&requests, a_cents, &targets);
        let plan = run(&requests, &s);
        assert!(plan.unbound.is_empty(), "{name}: {:?}", plan.unbound);
        assert_eq!(reasons(&plan), want, "{name}");
        assert_eq!(
            plan.rejections.len(),
            bound,
            "{name}: refusals bound to their keys"
        );
    }
}

#[test]
fn requests_the_clock_made_invalid_are_refused_unbound() {
    let due_later = hold_target(Some(t0() + Duration::seconds(1)), None);
    let plain = target(None, None);
    let cases = [
        (
            "a hold expiring by the batch's clock",
            hold("h", "a", "w", 100, Some(t0())),
            vec![],
            InvalidField,
        ),
        (
            "an expiry not due yet",
            ValidExpire::request(due_later.posting_id),
            vec![due_later.clone()],
            HoldNotPending,
        ),
        (
            "an expiry of a posting that is no hold",
            ValidExpire::request(plain.posting_id),
            vec![plain.clone()],
            HoldNotPending,
        ),
    ];
    for (name, request, targets, reason) in cases {
        let requests = [post("p", "w", "a", 100), request];
        let s = snapshot_with_holds(&requests, 1000, &targets);
        let plan = run(&requests, &s);
        let unbound: Vec<(usize, Reason)> =
            plan.unbound.iter().map(|(i, e)| (*i, e.reason)).collect();
        assert_eq!(unbound, [(1, reason)], "{name}");
        assert!(
            plan.postings.is_empty() && plan.rejections.is_empty(),
            "{name}: nothing planned"
        );
    }
}

fn close(key: &str, before: time::OffsetDateTime) -> WriteRequest {
    WriteRequest {
        caller: "c".into(),
        command: Command::Close(
            crate::period::ValidClose::validate(Some(before), key, "month end").unwrap(),
        ),
    }
}

#[test]
fn a_close_of_a_period_not_ended_is_refused_unbound_and_a_back_dated_void_after_a_close_is_refused()
{
    let future = [close("c1", t0() + time::Duration::hours(1))];
    let plan = run(&future, &snapshot(&future, 0, &[]));
    assert_eq!(plan.unbound.len(), 1, "a future close binds nothing");
    assert_eq!(plan.unbound[0].1.reason, InvalidField);

    let open = target(None, None);
    let mut back_dated = void("v", &open);
    if let Command::Void(v) = &mut back_dated.command {
        v.effective_at = Some(t0() - time::Duration::days(2));
    }
    let requests = vec![
        close("c2", t0() - time::Duration::days(1)),
        back_dated,
        void("v2", &open),
    ];
    let plan = run(
        &requests,
        &snapshot(&requests, 1000, std::slice::from_ref(&open)),
    );
    assert_eq!(
        reasons(&plan),
        vec![Ok(false), Err(PeriodClosed), Ok(false)],
        "the close, the back-dated void refused, the void effective now recorded"
    );
    assert_eq!(plan.closes.len(), 1);
    assert_eq!(plan.rejections.len(), 1, "PERIOD_CLOSED binds its key");
}
