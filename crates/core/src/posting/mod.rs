//! Posting and void requests: validation, and the fingerprint that says whether two requests
//! under one idempotency key mean the same thing.

use super::account::{
    truncate_for_message, validate_code, validate_metadata, Account, Direction, Metadata,
};
use super::amount::{format_minor, Amount, AmountError};
use super::error::{LedgerError, Reason};
use super::limits::*;

mod conditions;
use super::record::rfc3339;
use conditions::with_conditions;
pub use conditions::{
    amount_error, condition_codes, resolve_conditions, Check, Condition, ConditionRequest,
};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use time::OffsetDateTime;
use uuid::Uuid;

/// One leg as the caller sent it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LegRequest {
    pub account: String,
    /// `None` when the caller left the direction unspecified.
    pub direction: Option<Direction>,
    pub amount: String,
}

/// A `Post` as the caller sent it (after transport decoding).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostRequest {
    pub idempotency_key: String,
    pub legs: Vec<LegRequest>,
    pub effective_at: Option<OffsetDateTime>,
    pub memo: String,
    pub metadata: Metadata,
    /// A hold: the legs reserve their amounts and move none.
    pub hold: bool,
    /// A hold's expiry time (none: it stays open until captured or voided).
    pub hold_expires_at: Option<OffsetDateTime>,
    /// Post only if these hold when it is decided.
    pub conditions: Vec<ConditionRequest>,
}

/// A `Void` as the caller sent it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VoidRequest {
    pub idempotency_key: String,
    pub posting_id: String,
    pub reason: String,
    pub effective_at: Option<OffsetDateTime>,
}

/// A leg resolved against its account.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leg {
    pub account_id: i64,
    pub account_code: String,
    pub currency: String,
    pub direction: Direction,
    pub amount: Amount,
}

impl Leg {
    /// A leg of `amount` on `account`, on its `direction` side.
    pub fn on(account: &Account, direction: Direction, amount: Amount) -> Leg {
        Leg {
            account_id: account.id,
            account_code: account.code.clone(),
            currency: account.currency.clone(),
            direction,
            amount,
        }
    }
}

/// A request fingerprint: SHA-256 of the canonical meaning of a request.
pub type Fingerprint = [u8; 32];

/// A posting request that passed every validation that does not depend on ledger state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidPost {
    pub idempotency_key: String,
    pub legs: Vec<Leg>,
    pub effective_at: Option<OffsetDateTime>,
    pub memo: String,
    pub metadata: Metadata,
    /// Set for a hold.
    pub hold: Option<HoldTerms>,
    /// Checked when it is decided (empty: none).
    pub conditions: Vec<Condition>,
    pub fingerprint: Fingerprint,
}

/// A void request that passed validation (its target exists).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidVoid {
    pub idempotency_key: String,
    pub target: Uuid,
    pub reason: String,
    pub effective_at: Option<OffsetDateTime>,
    pub fingerprint: Fingerprint,
}

/// What makes a posting a hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HoldTerms {
    pub expires_at: Option<OffsetDateTime>,
}

/// A hold's expiry must lie after now (the server's clock when the request arrives).
pub fn check_expiry(
    expires_at: Option<OffsetDateTime>,
    now: OffsetDateTime,
) -> Result<(), LedgerError> {
    match expires_at {
        Some(t) if t <= now => Err(LedgerError::new(
            Reason::InvalidField,
            format!(
                "hold_expires_at {} is not after now ({})",
                rfc3339(t),
                rfc3339(now)
            ),
        )
        .with("field", "hold_expires_at")),
        Some(t) => validate_time("hold_expires_at", Some(t)),
        None => Ok(()),
    }
}

/// The idempotency key: 1..=255 bytes, printable (no control characters).
pub fn validate_idempotency_key(key: &str) -> Result<(), LedgerError> {
    if key.is_empty() {
        return Err(LedgerError::new(
            Reason::IdempotencyKeyRequired,
            "idempotency_key is required: 1..=255 printable characters chosen by the caller, the same on every retry",
        )
        .with("field", "idempotency_key"));
    }
    if key.len() > MAX_IDEMPOTENCY_KEY_BYTES {
        return Err(LedgerError::limit(
            "idempotency_key length in bytes",
            "MAX_IDEMPOTENCY_KEY_BYTES",
            MAX_IDEMPOTENCY_KEY_BYTES,
            key.len(),
        )
        .with("field", "idempotency_key"));
    }
    if key.chars().any(char::is_control) {
        return Err(LedgerError::new(
            Reason::IdempotencyKeyRequired,
            format!(
                "idempotency_key {:?} contains a control character; keys must be printable",
                truncate_for_message(key)
            ),
        )
        .with("field", "idempotency_key"));
    }
    Ok(())
}

/// Free text stored with a posting (memo, void reason): at most 1,024 bytes, no NUL.
pub fn validate_text(field: &str, text: &str) -> Result<(), LedgerError> {
    if text.len() > MAX_MEMO_BYTES {
        return Err(LedgerError::limit(
            &format!("{field} length in bytes"),
            "MAX_MEMO_BYTES",
            MAX_MEMO_BYTES,
            text.len(),
        )
        .with("field", field));
    }
    if text.contains('\0') {
        return Err(LedgerError::new(
            Reason::InvalidField,
            format!("{field} contains a NUL character"),
        )
        .with("field", field));
    }
    Ok(())
}

/// A time a request carries lies in the range of a protobuf Timestamp
/// ([`super::limits::TIMESTAMP_RANGE`]), the same for every time field, naming `field` when
/// it does not (the gRPC conversion refuses such values first; this holds for every caller).
pub fn validate_time(field: &str, at: Option<OffsetDateTime>) -> Result<(), LedgerError> {
    use super::limits::{MAX_TIMESTAMP_SECONDS, MIN_TIMESTAMP_SECONDS, TIMESTAMP_RANGE};
    match at {
        Some(at)
            if !(MIN_TIMESTAMP_SECONDS..=MAX_TIMESTAMP_SECONDS).contains(&at.unix_timestamp()) =>
        {
            Err(LedgerError::new(
                Reason::InvalidField,
                format!(
                    "{field} {} is outside {TIMESTAMP_RANGE}",
                    super::record::rfc3339(at)
                ),
            )
            .with("field", field))
        }
        _ => Ok(()),
    }
}

impl PostRequest {
    /// Checks everything that needs no account: key, leg count, codes, directions, memo,
    /// metadata, effective time. Returns the distinct account codes to look up.
    pub fn check_shape(&self) -> Result<Vec<String>, LedgerError> {
        validate_idempotency_key(&self.idempotency_key)?;
        if self.legs.len() < MIN_LEGS {
            return Err(LedgerError::new(
                Reason::TooFewLegs,
                format!(
                    "a posting needs at least {MIN_LEGS} legs, got {} (limit MIN_LEGS)",
                    self.legs.len()
                ),
            )
            .with("field", "legs")
            .with("limit", "MIN_LEGS"));
        }
        if self.legs.len() > MAX_LEGS {
            return Err(
                LedgerError::limit("leg count", "MAX_LEGS", MAX_LEGS, self.legs.len())
                    .with("field", "legs"),
            );
        }
        validate_text("memo", &self.memo)?;
        validate_metadata(&self.metadata)?;
        validate_time("effective_at", self.effective_at)?;
        if self.hold_expires_at.is_some() && !self.hold {
            return Err(LedgerError::new(
                Reason::InvalidField,
                "hold_expires_at is for holds: send hold: true, or no hold_expires_at",
            )
            .with("field", "hold_expires_at"));
        }
        let mut codes = leg_codes(&self.legs)?;
        for code in condition_codes(&self.conditions)? {
            if !codes.contains(&code) {
                codes.push(code);
            }
        }
        Ok(codes)
    }

    /// Resolves legs against their accounts (looked up by the caller of this function),
    /// parses amounts at each account's scale, and checks that debits equal credits per
    /// currency. Calls [`PostRequest::check_shape`] first.
    pub fn validate(&self, accounts: &HashMap<String, Account>) -> Result<ValidPost, LedgerError> {
        self.check_shape()?;
        let legs = resolve_legs(&self.legs, accounts)?;
        check_balanced(&legs)?;
        let hold = self.hold.then_some(HoldTerms {
            expires_at: self.hold_expires_at,
        });
        let conditions = resolve_conditions(&self.conditions, accounts)?;
        let mut fingerprint =
            post_fingerprint(&legs, self.effective_at, &self.memo, &self.metadata, hold);
        if !conditions.is_empty() {
            fingerprint = with_conditions(&fingerprint, &conditions);
        }
        Ok(ValidPost {
            idempotency_key: self.idempotency_key.clone(),
            legs,
            effective_at: self.effective_at,
            memo: self.memo.clone(),
            metadata: self.metadata.clone(),
            hold,
            conditions,
            fingerprint,
        })
    }
}

/// The codes and directions of requested legs are well formed; the distinct codes, in order.
pub fn leg_codes(legs: &[LegRequest]) -> Result<Vec<String>, LedgerError> {
    let mut codes = Vec::new();
    for (i, leg) in legs.iter().enumerate() {
        validate_code(&leg.account).map_err(|e| LedgerError {
            message: format!("leg {i}: {}", e.message),
            ..e.with("field", format!("legs[{i}].account"))
        })?;
        if leg.direction.is_none() {
            return Err(LedgerError::new(
                Reason::InvalidField,
                format!("leg {i}: direction must be DIRECTION_DEBIT or DIRECTION_CREDIT"),
            )
            .with("field", format!("legs[{i}].direction")));
        }
        if !codes.contains(&leg.account) {
            codes.push(leg.account.clone());
        }
    }
    Ok(codes)
}

/// Resolves requested legs against their accounts (looked up by the caller), parsing each
/// amount at its account's scale.
pub fn resolve_legs(
    legs: &[LegRequest],
    accounts: &HashMap<String, Account>,
) -> Result<Vec<Leg>, LedgerError> {
    let mut out = Vec::with_capacity(legs.len());
    for (i, leg) in legs.iter().enumerate() {
        let account = accounts.get(&leg.account).ok_or_else(|| {
            LedgerError::new(
                Reason::AccountNotFound,
                format!("leg {i}: account {:?} does not exist", leg.account),
            )
            .with("account", &leg.account)
            .with("field", format!("legs[{i}].account"))
        })?;
        let amount = Amount::parse_positive(&leg.amount, account.scale).map_err(|e| {
            let reason = match e {
                AmountError::TooManyDecimals { .. } => Reason::AmountScale,
                _ => Reason::InvalidAmount,
            };
            let err = LedgerError::new(
                reason,
                format!(
                    "leg {i}: amount {:?} for account {:?} {e}",
                    truncate_for_message(&leg.amount),
                    leg.account
                ),
            )
            .with("account", &leg.account)
            .with("field", format!("legs[{i}].amount"));
            match e {
                AmountError::TooLarge => err.with("limit", "MAX_AMOUNT_DIGITS"),
                _ => err,
            }
        })?;
        out.push(Leg {
            account_id: account.id,
            account_code: account.code.clone(),
            currency: account.currency.clone(),
            direction: leg.direction.expect("checked by check_shape"),
            amount,
        });
    }
    Ok(out)
}

/// Debits equal credits for every currency of the posting.
pub fn check_balanced(legs: &[Leg]) -> Result<(), LedgerError> {
    // (debits, credits, scale) per currency; sums of at most MAX_LEGS amounts of at most
    // MAX_AMOUNT_DIGITS digits cannot overflow i128.
    let mut sums: BTreeMap<&str, (i128, i128, u8)> = BTreeMap::new();
    for leg in legs {
        let e = sums
            .entry(leg.currency.as_str())
            .or_insert((0, 0, leg.amount.scale()));
        match leg.direction {
            Direction::Debit => e.0 += leg.amount.minor(),
            Direction::Credit => e.1 += leg.amount.minor(),
        }
        // One currency may be used by accounts of different scales; compare in the finest.
        if leg.amount.scale() != e.2 {
            return Err(LedgerError::new(
                Reason::CurrencyMismatch,
                format!(
                    "legs in {} use accounts of different scales ({} and {}); one currency must have one scale within a posting",
                    leg.currency,
                    e.2,
                    leg.amount.scale()
                ),
            )
            .with("currency", &leg.currency));
        }
    }
    let multi = sums.len() > 1;
    for (currency, (debits, credits, scale)) in &sums {
        if debits != credits {
            let (reason, prefix) = if multi {
                (
                    Reason::CurrencyMismatch,
                    "the posting mixes currencies and ",
                )
            } else {
                (Reason::Unbalanced, "")
            };
            return Err(LedgerError::new(
                reason,
                format!(
                    "{prefix}{currency} does not balance: debits {} ≠ credits {}",
                    format_minor(*debits, *scale),
                    format_minor(*credits, *scale)
                ),
            )
            .with("currency", currency));
        }
    }
    Ok(())
}

impl VoidRequest {
    /// Validates the key, reason and effective time, and parses the target id.
    /// An id that is not a UUID names no posting: `POSTING_NOT_FOUND`.
    pub fn validate(&self) -> Result<ValidVoid, LedgerError> {
        validate_idempotency_key(&self.idempotency_key)?;
        validate_text("reason", &self.reason)?;
        validate_time("effective_at", self.effective_at)?;
        let target = parse_posting_id(&self.posting_id)?;
        let fingerprint = void_fingerprint(target, &self.reason, self.effective_at);
        Ok(ValidVoid {
            idempotency_key: self.idempotency_key.clone(),
            target,
            reason: self.reason.clone(),
            effective_at: self.effective_at,
            fingerprint,
        })
    }
}

/// The refusal of a request naming a posting that does not exist.
pub fn posting_not_found(id: Uuid) -> LedgerError {
    LedgerError::new(
        Reason::PostingNotFound,
        format!("posting {id} does not exist"),
    )
    .with("posting_id", id)
}

/// Parses a posting id; anything that is not one is reported as not found.
pub fn parse_posting_id(id: &str) -> Result<Uuid, LedgerError> {
    Uuid::try_parse(id).map_err(|_| {
        LedgerError::new(
            Reason::PostingNotFound,
            format!(
                "posting {:?} does not exist (not a posting id)",
                truncate_for_message(id)
            ),
        )
        .with("posting_id", truncate_for_message(id))
    })
}

/// Length-prefixed canonical encoding, so no two different requests share bytes.
pub(crate) struct Canon(Sha256);

impl Canon {
    pub(crate) fn new(kind: &str) -> Canon {
        let mut c = Canon(Sha256::new());
        c.field(kind.as_bytes());
        c
    }
    pub(crate) fn field(&mut self, bytes: &[u8]) {
        self.0.update((bytes.len() as u64).to_be_bytes());
        self.0.update(bytes);
    }
    fn time(&mut self, at: Option<OffsetDateTime>) {
        match at {
            None => self.field(b"none"),
            Some(t) => self.field(&t.unix_timestamp_nanos().to_be_bytes()),
        }
    }
    pub(crate) fn finish(self) -> Fingerprint {
        self.0.finalize().into()
    }
}

/// The fingerprint of a posting: legs in order (account, side, amount at the account's
/// scale), effective time, memo, metadata sorted by key. Transport details are not in it.
pub fn post_fingerprint(
    legs: &[Leg],
    effective_at: Option<OffsetDateTime>,
    memo: &str,
    metadata: &Metadata,
    hold: Option<HoldTerms>,
) -> Fingerprint {
    let mut c = Canon::new("post/v1");
    c.field(&(legs.len() as u64).to_be_bytes());
    for leg in legs {
        c.field(leg.account_code.as_bytes());
        c.field(match leg.direction {
            Direction::Debit => b"D",
            Direction::Credit => b"C",
        });
        c.field(&leg.amount.minor().to_be_bytes());
        c.field(&[leg.amount.scale()]);
    }
    c.time(effective_at);
    c.field(memo.as_bytes());
    c.field(&(metadata.len() as u64).to_be_bytes());
    for (k, v) in metadata {
        c.field(k.as_bytes());
        c.field(v.as_bytes());
    }
    // Only a hold adds to the canonical bytes, so postings keep the fingerprints their keys
    // were decided with.
    if let Some(h) = hold {
        c.field(b"hold");
        c.time(h.expires_at);
    }
    c.finish()
}

/// The fingerprint of a capture: the hold, the legs it captures (resolved, so "the whole
/// hold" and the hold's legs written out mean the same), effective time, memo, metadata.
pub fn capture_fingerprint(
    hold: Uuid,
    legs: &[Leg],
    effective_at: Option<OffsetDateTime>,
    memo: &str,
    metadata: &Metadata,
) -> Fingerprint {
    let mut c = Canon::new("capture/v1");
    c.field(hold.as_bytes());
    c.field(&post_fingerprint(legs, effective_at, memo, metadata, None));
    c.finish()
}

/// The fingerprint of a void: target, reason, effective time.
pub fn void_fingerprint(
    target: Uuid,
    reason: &str,
    effective_at: Option<OffsetDateTime>,
) -> Fingerprint {
    let mut c = Canon::new("void/v1");
    c.field(target.as_bytes());
    c.field(reason.as_bytes());
    c.time(effective_at);
    c.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::account::NormalBalance;

    fn account(id: i64, code: &str, currency: &str, scale: u8) -> Account {
        Account {
            ledger: crate::ledger::DEFAULT_LEDGER_ID,
            id,
            code: code.into(),
            currency: currency.into(),
            scale,
            normal_balance: NormalBalance::Debit,
            allow_negative: false,
            metadata: Metadata::new(),
            created_at: OffsetDateTime::UNIX_EPOCH,
        }
    }

    fn accounts() -> HashMap<String, Account> {
        [
            account(1, "a", "EUR", 2),
            account(2, "b", "EUR", 2),
            account(3, "c", "USD", 2),
            account(4, "d", "USD", 2),
            account(5, "e", "JPY", 0),
        ]
        .into_iter()
        .map(|a| (a.code.clone(), a))
        .collect()
    }

    fn leg(account: &str, d: Direction, amount: &str) -> LegRequest {
        LegRequest {
            account: account.into(),
            direction: Some(d),
            amount: amount.into(),
        }
    }

    fn post(key: &str, legs: Vec<LegRequest>) -> PostRequest {
        PostRequest {
            idempotency_key: key.into(),
            legs,
            effective_at: None,
            memo: String::new(),
            metadata: Metadata::new(),
            hold: false,
            hold_expires_at: None,
            conditions: Vec::new(),
        }
    }

    use Direction::{Credit as C, Debit as D};

    #[test]
    fn posting_validation_names_the_reason_for_each_bad_request() {
        let many: Vec<LegRequest> = (0..101)
            .map(|i| leg("a", if i % 2 == 0 { D } else { C }, "1"))
            .collect();
        let table: Vec<(&str, PostRequest, Option<Reason>)> = vec![
            (
                "balanced",
                post("k", vec![leg("a", D, "1.00"), leg("b", C, "1")]),
                None,
            ),
            (
                "missing key",
                post("", vec![leg("a", D, "1"), leg("b", C, "1")]),
                Some(Reason::IdempotencyKeyRequired),
            ),
            (
                "control char key",
                post("k\n", vec![leg("a", D, "1"), leg("b", C, "1")]),
                Some(Reason::IdempotencyKeyRequired),
            ),
            (
                "key too long",
                post(&"k".repeat(256), vec![leg("a", D, "1"), leg("b", C, "1")]),
                Some(Reason::LimitExceeded),
            ),
            (
                "one leg",
                post("k", vec![leg("a", D, "1")]),
                Some(Reason::TooFewLegs),
            ),
            ("no legs", post("k", vec![]), Some(Reason::TooFewLegs)),
            ("101 legs", post("k", many), Some(Reason::LimitExceeded)),
            (
                "unbalanced",
                post("k", vec![leg("a", D, "1"), leg("b", C, "2")]),
                Some(Reason::Unbalanced),
            ),
            (
                "zero",
                post("k", vec![leg("a", D, "0"), leg("b", C, "0")]),
                Some(Reason::InvalidAmount),
            ),
            (
                "negative",
                post("k", vec![leg("a", D, "-1"), leg("b", C, "-1")]),
                Some(Reason::InvalidAmount),
            ),
            (
                "garbage",
                post("k", vec![leg("a", D, "ten"), leg("b", C, "10")]),
                Some(Reason::InvalidAmount),
            ),
            (
                "exponent",
                post("k", vec![leg("a", D, "1e2"), leg("b", C, "100")]),
                Some(Reason::InvalidAmount),
            ),
            (
                "overflow",
                post(
                    "k",
                    vec![
                        leg("a", D, "99999999999999999999999999999999"),
                        leg("b", C, "99999999999999999999999999999999"),
                    ],
                ),
                Some(Reason::InvalidAmount),
            ),
            (
                "too many decimals",
                post("k", vec![leg("a", D, "1.001"), leg("b", C, "1.001")]),
                Some(Reason::AmountScale),
            ),
            (
                "decimals on scale 0",
                post("k", vec![leg("e", D, "1.5"), leg("e", C, "1.5")]),
                Some(Reason::AmountScale),
            ),
            (
                "unknown account",
                post("k", vec![leg("a", D, "1"), leg("zzz", C, "1")]),
                Some(Reason::AccountNotFound),
            ),
            (
                "bad code",
                post("k", vec![leg("a", D, "1"), leg("Bad Code", C, "1")]),
                Some(Reason::InvalidAccountCode),
            ),
            (
                "two currencies balanced each",
                post(
                    "k",
                    vec![
                        leg("a", D, "1"),
                        leg("b", C, "1"),
                        leg("c", D, "2"),
                        leg("d", C, "2"),
                    ],
                ),
                None,
            ),
            (
                "two currencies crossed",
                post("k", vec![leg("a", D, "1"), leg("c", C, "1")]),
                Some(Reason::CurrencyMismatch),
            ),
            (
                "direction missing",
                post(
                    "k",
                    vec![
                        LegRequest {
                            account: "a".into(),
                            direction: None,
                            amount: "1".into(),
                        },
                        leg("b", C, "1"),
                    ],
                ),
                Some(Reason::InvalidField),
            ),
            (
                "memo too long",
                PostRequest {
                    memo: "m".repeat(1025),
                    ..post("k", vec![leg("a", D, "1"), leg("b", C, "1")])
                },
                Some(Reason::LimitExceeded),
            ),
            (
                "memo with NUL",
                PostRequest {
                    memo: "a\0b".into(),
                    ..post("k", vec![leg("a", D, "1"), leg("b", C, "1")])
                },
                Some(Reason::InvalidField),
            ),
        ];
        let accts = accounts();
        for (name, req, want) in table {
            let got = req.validate(&accts).err();
            assert_eq!(got.as_ref().map(|e| e.reason), want, "{name}: {got:?}");
            if let Some(e) = got {
                assert!(
                    !e.message.is_empty(),
                    "{name}: message must say what was wrong"
                );
            }
        }
    }

    #[test]
    fn fingerprint_ignores_amount_spelling_but_not_meaning() {
        let accts = accounts();
        let a = post("k", vec![leg("a", D, "1.5"), leg("b", C, "1.50")])
            .validate(&accts)
            .unwrap();
        let b = post("k", vec![leg("a", D, "1.50"), leg("b", C, "001.5")])
            .validate(&accts)
            .unwrap();
        assert_eq!(a.fingerprint, b.fingerprint);
        let c = post("k", vec![leg("a", D, "1.51"), leg("b", C, "1.51")])
            .validate(&accts)
            .unwrap();
        assert_ne!(a.fingerprint, c.fingerprint);
        let d = post("k", vec![leg("b", C, "1.5"), leg("a", D, "1.5")])
            .validate(&accts)
            .unwrap();
        assert_ne!(
            a.fingerprint, d.fingerprint,
            "leg order is part of the meaning"
        );
        let mut e = post("k", vec![leg("a", D, "1.5"), leg("b", C, "1.5")]);
        e.memo = "x".into();
        assert_ne!(a.fingerprint, e.validate(&accts).unwrap().fingerprint);
        let mut f = post("k", vec![leg("a", D, "1.5"), leg("b", C, "1.5")]);
        f.effective_at = Some(OffsetDateTime::UNIX_EPOCH);
        assert_ne!(a.fingerprint, f.validate(&accts).unwrap().fingerprint);
        let mut g = post("other-key", vec![leg("a", D, "1.5"), leg("b", C, "1.5")]);
        g.metadata.insert("x".into(), "y".into());
        let mut h = g.clone();
        h.metadata.insert("a".into(), "b".into());
        assert_ne!(
            g.validate(&accts).unwrap().fingerprint,
            h.validate(&accts).unwrap().fingerprint
        );
    }
}
