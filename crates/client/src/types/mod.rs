//! The contract's requests and answers as Rust types: amounts as exact [`Amount`]s (legs
//! take a `Decimal` too), times as [`SystemTime`], directions and sides as enums, absent ids
//! as `None`. Conversions from the wire fail with an error rather than guess (text that is no
//! amount, a time out of range).

use crate::amount::{from_wire, to_wire_signed, Amount};
use crate::error::{Error, ErrorKind};
use crate::pb;
use std::collections::BTreeMap;
use std::time::SystemTime;

mod account;
mod ledger;
mod queries;
mod reads;

pub use account::{
    Account, AccountStatus, AccountUpdate, AccountVersionInfo, DebitLimit, NewAccount,
};

pub(crate) use ledger::ledger_or_default;
pub use ledger::{
    validate_ledger_code, CreatedLedger, Ledger, LedgerPage, NewLedger, DEFAULT_LEDGER,
    MAX_LEDGER_CODE_CHARS,
};
pub use queries::{PostingFilter, Rollup, RollupTotal, Rollups, TimeRange};
pub use reads::{Applied, AsOf, Balance, CurrencyTotal, Entry, TrialBalance};

/// Metadata entries (up to 32; keys 1..64 bytes, values ≤ 512 bytes).
pub type Metadata = BTreeMap<String, String>;

/// The side of a leg.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Adds to the account's debits.
    Debit,
    /// Adds to the account's credits.
    Credit,
}

/// The side an account's balance grows on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NormalBalance {
    /// balance = debits − credits (assets, expenses).
    Debit,
    /// balance = credits − debits (liabilities, equity, income).
    Credit,
}

impl Direction {
    pub(crate) fn to_pb(self) -> i32 {
        match self {
            Direction::Debit => pb::Direction::Debit as i32,
            Direction::Credit => pb::Direction::Credit as i32,
        }
    }

    fn from_pb(v: i32) -> Result<Direction, Error> {
        match pb::Direction::try_from(v) {
            Ok(pb::Direction::Debit) => Ok(Direction::Debit),
            Ok(pb::Direction::Credit) => Ok(Direction::Credit),
            _ => Err(unexpected("direction", v)),
        }
    }
}

impl NormalBalance {
    pub(crate) fn to_pb(self) -> i32 {
        match self {
            NormalBalance::Debit => pb::NormalBalance::Debit as i32,
            NormalBalance::Credit => pb::NormalBalance::Credit as i32,
        }
    }

    fn from_pb(v: i32) -> Result<NormalBalance, Error> {
        match pb::NormalBalance::try_from(v) {
            Ok(pb::NormalBalance::Debit) => Ok(NormalBalance::Debit),
            Ok(pb::NormalBalance::Credit) => Ok(NormalBalance::Credit),
            _ => Err(unexpected("normal_balance", v)),
        }
    }
}

pub(super) fn unexpected(field: &str, v: impl std::fmt::Debug) -> Error {
    Error::new(
        ErrorKind::Invalid,
        format!("the ledger answered {field} {v:?}, which this client does not know"),
    )
}

pub(crate) fn time_to_pb(t: SystemTime) -> prost_types::Timestamp {
    t.into()
}

pub(crate) fn time_from_pb(
    field: &str,
    t: Option<prost_types::Timestamp>,
) -> Result<SystemTime, Error> {
    let t = t.ok_or_else(|| unexpected(field, "nothing"))?;
    SystemTime::try_from(t).map_err(|_| unexpected(field, t))
}

pub(super) fn id(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

/// One leg: an account, a side, a positive amount (at most the account's scale in
/// decimals; sent with exactly that scale; answered with it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leg {
    pub account: String,
    pub direction: Direction,
    pub amount: Amount,
}

impl Leg {
    fn from_pb(l: pb::Leg) -> Result<Leg, Error> {
        Ok(Leg {
            direction: Direction::from_pb(l.direction)?,
            amount: from_wire("amount", &l.amount)?,
            account: l.account,
        })
    }
}

/// A posting to record: balanced legs under the caller's idempotency key (the same key on
/// every retry; the client's own retries keep it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewPosting {
    /// 1..255 printable characters, chosen by the caller.
    pub idempotency_key: String,
    /// 2..100 legs; per currency, debits equal credits.
    pub legs: Vec<Leg>,
    /// Business time; `None`: when it is recorded.
    pub effective_at: Option<SystemTime>,
    /// At most 1,024 bytes.
    pub memo: String,
    pub metadata: Metadata,
    /// `Some`: a hold (two-phase posting) that reserves its legs until captured, released
    /// or expired; the time is when it expires (`Some(None)`: it never expires).
    pub hold: Option<Option<SystemTime>>,
    /// Recorded only if each of these holds when the ledger decides it (at most 8), else
    /// `CONDITION_FAILED`, which binds the key.
    pub conditions: Vec<Condition>,
}

impl NewPosting {
    /// A posting without legs yet, under `idempotency_key`.
    pub fn new(idempotency_key: impl Into<String>) -> NewPosting {
        NewPosting {
            idempotency_key: idempotency_key.into(),
            legs: Vec::new(),
            effective_at: None,
            memo: String::new(),
            metadata: Metadata::new(),
            hold: None,
            conditions: Vec::new(),
        }
    }

    /// A hold rather than a posting: its legs are reserved (held, not in the balance) until
    /// a capture posts them, a void releases them, or `expires_at` passes (`None`: never).
    pub fn hold(mut self, expires_at: Option<SystemTime>) -> NewPosting {
        self.hold = Some(expires_at);
        self
    }

    /// With a debit leg of `amount` (a `Decimal` or an [`Amount`]) on `account`.
    pub fn debit(self, account: impl Into<String>, amount: impl Into<Amount>) -> NewPosting {
        self.leg(account, Direction::Debit, amount)
    }

    /// With a credit leg of `amount` (a `Decimal` or an [`Amount`]) on `account`.
    pub fn credit(self, account: impl Into<String>, amount: impl Into<Amount>) -> NewPosting {
        self.leg(account, Direction::Credit, amount)
    }

    /// With one more leg.
    pub fn leg(
        mut self,
        account: impl Into<String>,
        direction: Direction,
        amount: impl Into<Amount>,
    ) -> NewPosting {
        self.legs.push(Leg {
            account: account.into(),
            direction,
            amount: amount.into(),
        });
        self
    }

    /// With a memo.
    pub fn memo(mut self, memo: impl Into<String>) -> NewPosting {
        self.memo = memo.into();
        self
    }

    /// Effective (business time) at `at`.
    pub fn effective_at(mut self, at: SystemTime) -> NewPosting {
        self.effective_at = Some(at);
        self
    }

    /// With one metadata entry.
    pub fn meta(mut self, key: impl Into<String>, value: impl Into<String>) -> NewPosting {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// Recorded only if `account`'s last posting is still sequence `sequence` when the ledger
    /// decides it (0: the account has none yet): the optimistic lock of a caller that
    /// computed the posting from a [`Balance`] it read (its `last_sequence`).
    pub fn if_last_sequence(mut self, account: impl Into<String>, sequence: u64) -> NewPosting {
        self.conditions.push(Condition {
            account: account.into(),
            check: ConditionCheck::LastSequence(sequence),
        });
        self
    }

    /// Recorded only if `account`'s available balance is at least `amount` (a `Decimal` or
    /// an [`Amount`], of either sign, at most the account's scale in decimals) when the
    /// ledger decides it.
    pub fn if_available_at_least(
        mut self,
        account: impl Into<String>,
        amount: impl Into<Amount>,
    ) -> NewPosting {
        self.conditions.push(Condition {
            account: account.into(),
            check: ConditionCheck::AvailableAtLeast(amount.into()),
        });
        self
    }
}

/// A condition on an account's state when a posting is decided (the account is of the
/// posting's ledger).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Condition {
    /// The account's code.
    pub account: String,
    /// What must hold of it.
    pub check: ConditionCheck,
}

/// What a [`Condition`] checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionCheck {
    /// The account's last posting ([`Balance::last_sequence`]; 0: none yet) is still this
    /// one.
    LastSequence(u64),
    /// Its available balance is at least this.
    AvailableAtLeast(Amount),
}

impl Condition {
    /// The condition as the ledger takes it (number `i` of its posting), an amount written
    /// at its account's `scale`.
    pub(crate) fn to_pb(&self, i: usize, scale: u32) -> Result<pb::Condition, Error> {
        use pb::condition::Check;
        let check = match self.check {
            ConditionCheck::LastSequence(n) => Check::LastSequence(n),
            ConditionCheck::AvailableAtLeast(a) => Check::AvailableAtLeast(
                to_wire_signed(a, scale, &self.account)
                    .map_err(|e| e.with("field", format!("conditions[{i}].available_at_least")))?,
            ),
        };
        Ok(pb::Condition {
            account: self.account.clone(),
            check: Some(check),
        })
    }
}

/// A recorded journal entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Posting {
    /// The ledger it belongs to; `sequence` counts within it.
    pub ledger: String,
    pub posting_id: String,
    /// 1, 2, 3 … in commit order within its ledger, without gaps.
    pub sequence: u64,
    pub idempotency_key: String,
    /// Its legs, amounts with their account's scale.
    pub legs: Vec<Leg>,
    pub effective_at: SystemTime,
    pub recorded_at: SystemTime,
    pub memo: String,
    pub metadata: Metadata,
    /// On a void: the posting it compensates.
    pub voids_posting_id: Option<String>,
    /// On a voided posting: the void that compensates it.
    pub voided_by_posting_id: Option<String>,
    /// On a void: the reason given.
    pub void_reason: Option<String>,
    /// Who recorded it.
    pub caller: String,
    /// What it is: a plain transfer, a hold, a capture, a release, an expiry or a void.
    pub kind: PostingKind,
    /// On a hold: its state at the read's cut-off.
    pub hold: Option<Hold>,
    /// On a capture: the hold it captures.
    pub captures_hold_posting_id: Option<String>,
    /// On a release (a void of a hold, or the ledger's release of an expired hold): the hold
    /// it closes.
    pub releases_hold_posting_id: Option<String>,
    /// Its hash in its ledger's chain (64 hex digits, docs/verifiable.md); `None` for a posting
    /// not hashed yet.
    pub hash: Option<String>,
}

/// What a posting is: how its legs act on the accounts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PostingKind {
    /// A plain transfer: its legs move money.
    Posting,
    /// A hold: its legs are held, not moved.
    Hold,
    /// The capture of a hold: moves what it captures, releases the rest.
    Capture,
    /// The release of a hold by a void of it: moves nothing.
    Release,
    /// The ledger's release of an expired hold: moves nothing.
    Expiry,
    /// The void of a posting that moved money: its legs with directions swapped.
    Void,
}

impl PostingKind {
    fn from_pb(v: i32) -> Result<PostingKind, Error> {
        match pb::PostingKind::try_from(v) {
            Ok(pb::PostingKind::Posting) => Ok(PostingKind::Posting),
            Ok(pb::PostingKind::Hold) => Ok(PostingKind::Hold),
            Ok(pb::PostingKind::Capture) => Ok(PostingKind::Capture),
            Ok(pb::PostingKind::Release) => Ok(PostingKind::Release),
            Ok(pb::PostingKind::Expiry) => Ok(PostingKind::Expiry),
            Ok(pb::PostingKind::Void) => Ok(PostingKind::Void),
            Ok(pb::PostingKind::Unspecified) | Err(_) => Err(unexpected("kind", v)),
        }
    }
}

/// Where a hold stands at a read's cut-off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldStatus {
    /// Its legs are held: neither in the balance nor released.
    Pending,
    /// A capture posted (part of) its legs; the rest was released.
    Captured,
    /// A void released it.
    Released,
    /// Its expiry released it.
    Expired,
}

/// A hold's state, on the hold posting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    pub status: HoldStatus,
    /// When it expires, if ever.
    pub expires_at: Option<SystemTime>,
    /// The capture that closed it.
    pub captured_by_posting_id: Option<String>,
    /// The void or expiry release that closed it.
    pub released_by_posting_id: Option<String>,
}

impl Hold {
    fn from_pb(p: &mut pb::Posting) -> Result<Option<Hold>, Error> {
        if !p.hold {
            return Ok(None);
        }
        let status = match pb::HoldStatus::try_from(p.hold_status) {
            Ok(pb::HoldStatus::Pending) => HoldStatus::Pending,
            Ok(pb::HoldStatus::Captured) => HoldStatus::Captured,
            Ok(pb::HoldStatus::Released) => HoldStatus::Released,
            Ok(pb::HoldStatus::Expired) => HoldStatus::Expired,
            _ => return Err(unexpected("hold_status", p.hold_status)),
        };
        let expires_at = match p.hold_expires_at.take() {
            None => None,
            t => Some(time_from_pb("hold_expires_at", t)?),
        };
        Ok(Some(Hold {
            status,
            expires_at,
            captured_by_posting_id: id(std::mem::take(&mut p.captured_by_posting_id)),
            released_by_posting_id: id(std::mem::take(&mut p.released_by_posting_id)),
        }))
    }
}

impl Posting {
    pub(crate) fn from_pb(mut p: pb::Posting) -> Result<Posting, Error> {
        let hold = Hold::from_pb(&mut p)?;
        Ok(Posting {
            kind: PostingKind::from_pb(p.kind)?,
            hold,
            captures_hold_posting_id: id(p.captures_hold_posting_id),
            releases_hold_posting_id: id(p.releases_hold_posting_id),
            legs: p
                .legs
                .into_iter()
                .map(Leg::from_pb)
                .collect::<Result<_, _>>()?,
            effective_at: time_from_pb("effective_at", p.effective_at)?,
            recorded_at: time_from_pb("recorded_at", p.recorded_at)?,
            ledger: ledger::answered_ledger(p.ledger),
            posting_id: p.posting_id,
            sequence: p.sequence,
            idempotency_key: p.idempotency_key,
            memo: p.memo,
            metadata: p.metadata.into_iter().collect(),
            voids_posting_id: id(p.voids_posting_id),
            voided_by_posting_id: id(p.voided_by_posting_id),
            void_reason: id(p.void_reason),
            caller: p.caller,
            hash: id(p.hash),
        })
    }
}

/// The answer to a post or a void.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Posted {
    pub posting: Posting,
    /// True when the key had already been decided: this is the original posting.
    pub replayed: bool,
}

impl Posted {
    pub(crate) fn from_pb(posting: Option<pb::Posting>, replayed: bool) -> Result<Posted, Error> {
        let posting = posting.ok_or_else(|| unexpected("posting", "nothing"))?;
        Ok(Posted {
            posting: Posting::from_pb(posting)?,
            replayed,
        })
    }
}

/// A void to record: the compensating posting of `posting_id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewVoid {
    pub idempotency_key: String,
    pub posting_id: String,
    /// At most 1,024 bytes.
    pub reason: String,
    /// `None`: when it is recorded.
    pub effective_at: Option<SystemTime>,
}

/// A capture of a pending hold: its legs posted, whole or in part (the rest released).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewCapture {
    pub idempotency_key: String,
    pub hold_posting_id: String,
    /// Empty: the whole hold. Otherwise exactly the hold's legs (accounts and directions in
    /// its order), each amount at most the held one, balanced per currency.
    pub legs: Vec<Leg>,
    /// `None`: when it is recorded.
    pub effective_at: Option<SystemTime>,
    /// At most 1,024 bytes.
    pub memo: String,
    pub metadata: Metadata,
}

impl NewCapture {
    /// The whole of hold `hold_posting_id`, under `idempotency_key`.
    pub fn new(idempotency_key: impl Into<String>, hold_posting_id: impl Into<String>) -> Self {
        NewCapture {
            idempotency_key: idempotency_key.into(),
            hold_posting_id: hold_posting_id.into(),
            legs: Vec::new(),
            effective_at: None,
            memo: String::new(),
            metadata: Metadata::new(),
        }
    }

    /// With one leg of a partial capture (give every leg of the hold, in its order).
    pub fn leg(
        mut self,
        account: impl Into<String>,
        direction: Direction,
        amount: impl Into<Amount>,
    ) -> Self {
        self.legs.push(Leg {
            account: account.into(),
            direction,
            amount: amount.into(),
        });
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 10^27 EUR at scale 2: 30 digits, beyond a `Decimal`, within the ledger's totals.
    const SUM: &str = "1000000000000000000000000000.00";

    fn big_balance() -> pb::Balance {
        pb::Balance {
            account: "wallet:r".into(),
            currency: "EUR".into(),
            debits: SUM.into(),
            credits: "0.00".into(),
            balance: SUM.into(),
            held_debits: "0.00".into(),
            held_credits: "0.00".into(),
            available: SUM.into(),
            as_of_sequence: 2,
            last_sequence: 1,
            as_of: Some(pb::AsOf {
                recorded_at: Some(time_to_pb(SystemTime::UNIX_EPOCH)),
                effective_at: Some(time_to_pb(SystemTime::UNIX_EPOCH)),
            }),
        }
    }

    #[test]
    fn answered_amounts_beyond_a_decimal_read_back_exactly_as_strings() {
        let b = Balance::from_pb(big_balance()).expect("an exact balance");
        assert_eq!((b.last_sequence, b.as_of.sequence), (1, 2));
        assert_eq!(b.balance.to_string(), SUM);
        assert_eq!(b.debits.to_string(), SUM);
        assert_eq!(b.credits.to_string(), "0.00");
        let exact = [
            b.debits,
            b.credits,
            b.balance,
            b.held_debits,
            b.held_credits,
            b.available,
        ]
        .map(|a| a.exact());
        assert_eq!(exact, [SUM, "0.00", SUM, "0.00", "0.00", SUM]);
        // A Decimal where one holds the value, a precise error where none does.
        assert_eq!(b.credits.decimal().unwrap().to_string(), "0.00");
        let e = b.balance.decimal().unwrap_err();
        assert_eq!(e.kind, ErrorKind::BeyondDecimal);
        assert_eq!(e.metadata["amount"], SUM);

        let t = CurrencyTotal::from_pb(pb::CurrencyTotal {
            currency: "EUR".into(),
            debits: SUM.into(),
            credits: SUM.into(),
            held_debits: "0.00".into(),
            held_credits: "-0.01".into(),
        })
        .unwrap();
        assert_eq!(
            (t.debits.exact(), t.held_credits.exact()),
            (SUM.into(), "-0.01".into())
        );
        let at = Some(time_to_pb(SystemTime::UNIX_EPOCH));
        let e = Entry::from_pb(pb::Entry {
            posting_id: "p".into(),
            sequence: 2,
            recorded_at: at,
            effective_at: at,
            direction: pb::Direction::Debit as i32,
            amount: "900000000000000000000000000.00".into(),
            balance_after: SUM.into(),
        })
        .unwrap();
        assert_eq!(e.amount.exact(), "900000000000000000000000000.00");
        assert_eq!(e.balance_after.exact(), SUM);
        let leg = Leg::from_pb(pb::Leg {
            account: "wallet:r".into(),
            direction: pb::Direction::Credit as i32,
            amount: SUM.into(),
        })
        .unwrap();
        assert_eq!(leg.amount.exact(), SUM);
        // Text that is no amount names its field.
        let mut broken = big_balance();
        broken.available = "1e30".into();
        let e = Balance::from_pb(broken).unwrap_err();
        assert_eq!(e.metadata["field"], "available", "{e}");
    }

    #[test]
    fn a_new_account_has_defaults_and_setters_and_equals_its_struct_literal() {
        let plain = NewAccount::new("assets:bank", "EUR", 2, NormalBalance::Debit);
        assert_eq!(
            plain,
            NewAccount {
                code: "assets:bank".into(),
                currency: "EUR".into(),
                scale: 2,
                normal_balance: NormalBalance::Debit,
                allow_negative: false,
                metadata: Metadata::new(),
            }
        );
        let world = NewAccount::new("equity:world", "EUR", 2, NormalBalance::Credit)
            .allow_negative(true)
            .metadata("owner", "treasury")
            .metadata("desk", "eu");
        assert!(world.allow_negative);
        assert_eq!(
            world.metadata.into_iter().collect::<Vec<_>>(),
            [
                ("desk".into(), "eu".into()),
                ("owner".into(), "treasury".into())
            ]
        );
    }

    #[test]
    fn conditions_are_sent_with_their_check_and_amounts_at_the_accounts_scale() {
        let p = NewPosting::new("k")
            .debit("wallet:a", rust_decimal::Decimal::new(5, 0))
            .credit("wallet:b", rust_decimal::Decimal::new(5, 0))
            .if_last_sequence("wallet:a", 0)
            .if_available_at_least("wallet:a", rust_decimal::Decimal::new(-1000, 1));
        assert_eq!(
            p.conditions,
            [
                Condition {
                    account: "wallet:a".into(),
                    check: ConditionCheck::LastSequence(0),
                },
                Condition {
                    account: "wallet:a".into(),
                    check: ConditionCheck::AvailableAtLeast(Amount::new(-100, 0)),
                },
            ]
        );
        use pb::condition::Check;
        let wire: Vec<_> = p
            .conditions
            .iter()
            .enumerate()
            .map(|(i, c)| c.to_pb(i, 2).unwrap())
            .collect();
        assert_eq!(
            wire,
            [
                pb::Condition {
                    account: "wallet:a".into(),
                    check: Some(Check::LastSequence(0)),
                },
                pb::Condition {
                    account: "wallet:a".into(),
                    check: Some(Check::AvailableAtLeast("-100.00".into())),
                },
            ]
        );
        let at_least = |a: Amount| Condition {
            account: "wallet:b".into(),
            check: ConditionCheck::AvailableAtLeast(a),
        };
        let zero = at_least(Amount::new(0, 0)).to_pb(0, 3).unwrap();
        assert_eq!(zero.check, Some(Check::AvailableAtLeast("0.000".into())));
        let e = at_least(Amount::new(1, 3)).to_pb(4, 2).unwrap_err();
        assert_eq!(e.reason(), Some(crate::Reason::AmountScale));
        assert_eq!(e.metadata["field"], "conditions[4].available_at_least");
        assert_eq!(e.metadata["account"], "wallet:b");
        assert!(NewPosting::new("k").conditions.is_empty());
    }
}
