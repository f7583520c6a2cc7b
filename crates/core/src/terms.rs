//! An account's terms, which change by versions: status, floor, ceiling, debit limits.
//!
//! An account's attributes (code, currency, scale, side) never change; its terms do, by an
//! `UpdateAccount` that records a new version, never an edit. Version 1 is the account's
//! creation: open, a floor of 0 unless it allows negative balances, no ceiling, no limits.
//! The writer decides an update in the ledger's sequence order with its postings, so every
//! posting is decided against exactly the version before it ([`crate::write`]).

use super::account::{validate_code, Account};
use super::amount::{format_minor, parse_minor, parse_signed};
use super::error::{LedgerError, Reason};
use super::limits::{MAX_DEBIT_LIMITS, MAX_LIMIT_WINDOW_SECONDS};
use super::posting::{amount_error, validate_idempotency_key, validate_text, Canon, Fingerprint};
use time::OffsetDateTime;

/// Whether postings may touch an account.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AccountStatus {
    Open,
    /// New postings and holds are refused; captures and releases of earlier holds go through.
    Frozen,
    /// Final: nothing touches it any more.
    Closed,
}

impl AccountStatus {
    /// As stored.
    pub fn as_str(self) -> &'static str {
        match self {
            AccountStatus::Open => "open",
            AccountStatus::Frozen => "frozen",
            AccountStatus::Closed => "closed",
        }
    }

    pub fn parse(s: &str) -> Option<AccountStatus> {
        [
            AccountStatus::Open,
            AccountStatus::Frozen,
            AccountStatus::Closed,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

/// At most `amount` (minor units) debited over any rolling window of `window_seconds` of
/// recorded time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DebitLimit {
    pub amount: i128,
    pub window_seconds: u32,
}

/// The terms of one version of an account.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Terms {
    /// 1 at creation, one more per update.
    pub version: i64,
    pub status: AccountStatus,
    /// The lowest the available balance may go (minor units, on the normal side); `None`: no
    /// floor.
    pub floor: Option<i128>,
    /// The highest the balance, with the open holds that would raise it, may go.
    pub ceiling: Option<i128>,
    pub debit_limits: Vec<DebitLimit>,
}

impl Terms {
    /// Version 1 of an account: open, a floor of 0 unless it allows negative balances.
    pub fn initial(allow_negative: bool) -> Terms {
        Terms {
            version: 1,
            status: AccountStatus::Open,
            floor: (!allow_negative).then_some(0),
            ceiling: None,
            debit_limits: Vec::new(),
        }
    }
}

/// One field of the terms an update may change (its `update_mask` path).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Field {
    Status,
    Floor,
    Ceiling,
    DebitLimits,
}

impl Field {
    pub const ALL: [Field; 4] = [
        Field::Status,
        Field::Floor,
        Field::Ceiling,
        Field::DebitLimits,
    ];

    /// Its `update_mask` path.
    pub fn path(self) -> &'static str {
        match self {
            Field::Status => "status",
            Field::Floor => "balance_floor",
            Field::Ceiling => "balance_ceiling",
            Field::DebitLimits => "debit_limits",
        }
    }
}

/// The new values of the fields an update names.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TermsChange {
    pub status: Option<AccountStatus>,
    pub floor: Option<Option<i128>>,
    pub ceiling: Option<Option<i128>>,
    pub debit_limits: Option<Vec<DebitLimit>>,
}

impl TermsChange {
    /// The next version: `terms` with the named fields replaced.
    pub fn apply(&self, terms: &Terms) -> Terms {
        Terms {
            version: terms.version + 1,
            status: self.status.unwrap_or(terms.status),
            floor: self.floor.unwrap_or(terms.floor),
            ceiling: self.ceiling.unwrap_or(terms.ceiling),
            debit_limits: self
                .debit_limits
                .clone()
                .unwrap_or_else(|| terms.debit_limits.clone()),
        }
    }

    /// The paths of the fields it names, in [`Field::ALL`] order.
    pub fn changed(&self) -> Vec<String> {
        let named = [
            self.status.is_some(),
            self.floor.is_some(),
            self.ceiling.is_some(),
            self.debit_limits.is_some(),
        ];
        Field::ALL
            .iter()
            .zip(named)
            .filter(|(_, n)| *n)
            .map(|(f, _)| f.path().to_owned())
            .collect()
    }
}

/// An `UpdateAccount` as the caller sent it (after transport decoding).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct UpdateRequest {
    pub idempotency_key: String,
    pub code: String,
    pub expected_version: u64,
    pub update_mask: Vec<String>,
    /// The status sent (`None`: unspecified).
    pub status: Option<AccountStatus>,
    pub floor: String,
    pub ceiling: String,
    /// (amount, window_seconds) per limit.
    pub debit_limits: Vec<(String, u32)>,
    pub reason: String,
}

/// An update that passed validation against its account.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidUpdate {
    pub idempotency_key: String,
    pub account_id: i64,
    pub account_code: String,
    pub expected_version: i64,
    pub change: TermsChange,
    pub reason: String,
    pub fingerprint: Fingerprint,
}

/// A recorded version of an account's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountVersion {
    pub account_id: i64,
    pub terms: Terms,
    /// The last stored sequence of the ledger decided before it (its ledger's base when none).
    pub after_sequence: i64,
    pub recorded_at: OffsetDateTime,
    /// Empty for version 1.
    pub caller: String,
    pub idempotency_key: String,
    pub reason: String,
    /// The `update_mask` paths it changed.
    pub changed: Vec<String>,
}

impl UpdateRequest {
    /// Checks everything that needs no ledger state, against the account it names.
    pub fn validate(&self, account: &Account) -> Result<ValidUpdate, LedgerError> {
        validate_idempotency_key(&self.idempotency_key)?;
        validate_code(&self.code)?;
        if self.expected_version == 0 || self.expected_version > i64::MAX as u64 {
            return Err(invalid(
                "expected_version",
                "expected_version is required: the account's version you read (1 or more)",
            ));
        }
        if self.reason.is_empty() {
            return Err(invalid(
                "reason",
                "reason is required: say why the account changes",
            ));
        }
        validate_text("reason", &self.reason)?;
        let change = self.change(account)?;
        let fingerprint =
            update_fingerprint(&account.code, self.expected_version, &change, &self.reason);
        Ok(ValidUpdate {
            idempotency_key: self.idempotency_key.clone(),
            account_id: account.id,
            account_code: account.code.clone(),
            expected_version: self.expected_version as i64,
            change,
            reason: self.reason.clone(),
            fingerprint,
        })
    }

    /// The change the mask names, each value parsed at the account's scale.
    fn change(&self, account: &Account) -> Result<TermsChange, LedgerError> {
        if self.update_mask.is_empty() {
            return Err(invalid(
                "update_mask",
                "update_mask names no field: send one or more of status, balance_floor, balance_ceiling, debit_limits",
            ));
        }
        let mut c = TermsChange::default();
        for path in &self.update_mask {
            let field = Field::ALL.into_iter().find(|f| f.path() == path);
            match field {
                Some(Field::Status) => c.status = Some(self.status.ok_or_else(|| invalid("status", "status must be ACCOUNT_STATUS_OPEN, _FROZEN or _CLOSED when update_mask names it"))?),
                Some(Field::Floor) => c.floor = Some(optional_signed("balance_floor", &self.floor, account.scale)?),
                Some(Field::Ceiling) => c.ceiling = Some(optional_signed("balance_ceiling", &self.ceiling, account.scale)?),
                Some(Field::DebitLimits) => c.debit_limits = Some(self.limits(account.scale)?),
                None => return Err(invalid("update_mask", &format!("update_mask path {:?} is not one of status, balance_floor, balance_ceiling, debit_limits", crate::account::truncate_for_message(path)))),
            }
        }
        if let (Some(Some(f)), Some(Some(ceiling))) = (c.floor, c.ceiling) {
            if f > ceiling {
                return Err(invalid(
                    "balance_floor",
                    &format!(
                        "balance_floor {} is above balance_ceiling {}",
                        format_minor(f, account.scale),
                        format_minor(ceiling, account.scale)
                    ),
                ));
            }
        }
        Ok(c)
    }

    fn limits(&self, scale: u8) -> Result<Vec<DebitLimit>, LedgerError> {
        if self.debit_limits.len() > MAX_DEBIT_LIMITS {
            return Err(LedgerError::limit(
                "debit limit count",
                "MAX_DEBIT_LIMITS",
                MAX_DEBIT_LIMITS,
                self.debit_limits.len(),
            )
            .with("field", "debit_limits"));
        }
        let mut limits = Vec::with_capacity(self.debit_limits.len());
        for (i, (amount, window)) in self.debit_limits.iter().enumerate() {
            let field = format!("debit_limits[{i}]");
            let amount = parse_minor(amount, scale)
                .map_err(|e| amount_error(&format!("{field}.amount"), amount, &e))?;
            if !(1..=MAX_LIMIT_WINDOW_SECONDS).contains(window) {
                return Err(invalid(&format!("{field}.window_seconds"), &format!("{field}.window_seconds is {window}, not in 1..={MAX_LIMIT_WINDOW_SECONDS} (limit MAX_LIMIT_WINDOW_SECONDS)")).with("limit", "MAX_LIMIT_WINDOW_SECONDS"));
            }
            limits.push(DebitLimit {
                amount,
                window_seconds: *window,
            });
        }
        Ok(limits)
    }
}

/// A decimal string at `scale` that may be signed; empty means none.
fn optional_signed(field: &str, text: &str, scale: u8) -> Result<Option<i128>, LedgerError> {
    if text.is_empty() {
        return Ok(None);
    }
    parse_signed(text, scale)
        .map(Some)
        .map_err(|e| amount_error(field, text, &e))
}

fn invalid(field: &str, message: &str) -> LedgerError {
    LedgerError::new(Reason::InvalidField, message).with("field", field)
}

/// The fingerprint of an update: the account, the version it expects, the fields it names
/// with their new values, and its reason.
pub fn update_fingerprint(code: &str, expected: u64, c: &TermsChange, reason: &str) -> Fingerprint {
    let mut canon = Canon::new("update/v1");
    canon.field(code.as_bytes());
    canon.field(&expected.to_be_bytes());
    if let Some(s) = c.status {
        canon.field(b"status");
        canon.field(s.as_str().as_bytes());
    }
    for (name, v) in [("floor", c.floor), ("ceiling", c.ceiling)] {
        if let Some(v) = v {
            canon.field(name.as_bytes());
            canon.field(&v.map_or_else(|| b"none".to_vec(), |m| m.to_be_bytes().to_vec()));
        }
    }
    if let Some(limits) = &c.debit_limits {
        canon.field(b"limits");
        canon.field(&(limits.len() as u64).to_be_bytes());
        for l in limits {
            canon.field(&l.amount.to_be_bytes());
            canon.field(&l.window_seconds.to_be_bytes());
        }
    }
    canon.field(reason.as_bytes());
    canon.finish()
}

/// What a debit limit over a window of `window_seconds` needs of an account's journal for a
/// batch: its total debits recorded at or before a cut-off no later than the batch's first
/// time less the window, and its debit legs recorded after that cut-off but at or before the
/// batch's last possible time less the window (in recorded order). The debits of the window
/// (t − window, t] of any time t of the batch are then its debits now less these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DebitWindow {
    pub window_seconds: u32,
    pub debits_before: i128,
    pub edge: Vec<(OffsetDateTime, i128)>,
}

impl DebitWindow {
    /// The debits recorded at or before `cut` (within what the window was loaded for).
    pub fn debits_until(&self, cut: OffsetDateTime) -> i128 {
        self.debits_before
            + self
                .edge
                .iter()
                .take_while(|(at, _)| *at <= cut)
                .map(|(_, m)| m)
                .sum::<i128>()
    }
}

/// The refusal of a posting that would take `a`'s balance (with the holds that would raise
/// it) from `before` to `after`, above its ceiling.
pub fn ceiling_exceeded(a: &Account, ceiling: i128, before: i128, after: i128) -> LedgerError {
    LedgerError::new(
        Reason::BalanceCeilingExceeded,
        format!(
            "account {} has a balance ceiling of {c} {cur}; its balance with the open holds that would raise it is {} {cur}, and this would make it {} {cur}",
            a.code,
            format_minor(before, a.scale),
            format_minor(after, a.scale),
            c = format_minor(ceiling, a.scale),
            cur = a.currency,
        ),
    )
    .with("account", &a.code)
    .with("limit", "balance_ceiling")
}

/// The refusal of a posting that would debit `a` by `more` past its limit `i`, with `used`
/// of it used.
pub(crate) fn limit_exceeded(
    a: &Account,
    i: usize,
    limit: &DebitLimit,
    used: i128,
    more: i128,
) -> LedgerError {
    let left = (limit.amount - used).max(0);
    LedgerError::new(
        Reason::DebitLimitExceeded,
        format!(
            "account {} has a debit limit (debit_limits[{i}]) of {} {cur} per {} s; {} {cur} is left in the window ending now (debits recorded in it and open holds count), and this posting debits {} {cur}",
            a.code,
            format_minor(limit.amount, a.scale),
            limit.window_seconds,
            format_minor(left, a.scale),
            format_minor(more, a.scale),
            cur = a.currency,
        ),
    )
    .with("account", &a.code)
    .with("limit", format!("debit_limits[{i}]"))
    .with("left", format_minor(left, a.scale))
    .with("window_seconds", limit.window_seconds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::account::{Metadata, NormalBalance};

    fn account() -> Account {
        Account {
            id: 7,
            ledger: 0,
            code: "wallet:alice".into(),
            currency: "EUR".into(),
            scale: 2,
            normal_balance: NormalBalance::Credit,
            allow_negative: false,
            metadata: Metadata::new(),
            created_at: OffsetDateTime::UNIX_EPOCH,
        }
    }

    fn request(mask: &[&str]) -> UpdateRequest {
        UpdateRequest {
            idempotency_key: "k".into(),
            code: "wallet:alice".into(),
            expected_version: 1,
            update_mask: mask.iter().map(|s| s.to_string()).collect(),
            status: Some(AccountStatus::Frozen),
            floor: "-500.00".into(),
            ceiling: "1000".into(),
            debit_limits: vec![("200.00".into(), 86_400)],
            reason: "fraud review".into(),
        }
    }

    #[test]
    fn update_requests_are_validated_with_the_field_named() {
        type Case = (fn(&mut UpdateRequest), Option<(Reason, &'static str)>);
        let table: &[Case] = &[
            (|_| {}, None),
            (
                |r| r.expected_version = 0,
                Some((Reason::InvalidField, "expected_version")),
            ),
            (|r| r.reason.clear(), Some((Reason::InvalidField, "reason"))),
            (
                |r| r.update_mask.clear(),
                Some((Reason::InvalidField, "update_mask")),
            ),
            (
                |r| r.update_mask.push("currency".into()),
                Some((Reason::InvalidField, "update_mask")),
            ),
            (|r| r.status = None, Some((Reason::InvalidField, "status"))),
            (
                |r| r.floor = "-1.001".into(),
                Some((Reason::AmountScale, "balance_floor")),
            ),
            (
                |r| r.ceiling = "x".into(),
                Some((Reason::InvalidAmount, "balance_ceiling")),
            ),
            (
                |r| r.floor = "2000".into(),
                Some((Reason::InvalidField, "balance_floor")),
            ),
            (
                |r| r.debit_limits[0].1 = 0,
                Some((Reason::InvalidField, "debit_limits[0].window_seconds")),
            ),
            (
                |r| r.debit_limits[0].1 = MAX_LIMIT_WINDOW_SECONDS + 1,
                Some((Reason::InvalidField, "debit_limits[0].window_seconds")),
            ),
            (
                |r| r.debit_limits = vec![("1".into(), 60); MAX_DEBIT_LIMITS + 1],
                Some((Reason::LimitExceeded, "debit_limits")),
            ),
            (
                |r| r.idempotency_key.clear(),
                Some((Reason::IdempotencyKeyRequired, "idempotency_key")),
            ),
        ];
        for (i, (edit, want)) in table.iter().enumerate() {
            let mut r = request(&["status", "balance_floor", "balance_ceiling", "debit_limits"]);
            edit(&mut r);
            let got = r.validate(&account()).err().map(|e| {
                let field = e.metadata.get("field").cloned().unwrap_or_default();
                (e.reason, field)
            });
            let want = want.map(|(r, f)| (r, f.to_owned()));
            assert_eq!(got, want, "case {i}");
        }
    }

    #[test]
    fn an_update_changes_only_the_fields_its_mask_names() {
        let v = request(&["balance_floor", "debit_limits"])
            .validate(&account())
            .unwrap();
        let next = v.change.apply(&Terms::initial(false));
        assert_eq!(next.version, 2);
        assert_eq!(next.status, AccountStatus::Open, "not named: kept");
        assert_eq!(next.floor, Some(-50_000));
        assert_eq!(next.ceiling, None);
        assert_eq!(
            next.debit_limits,
            vec![DebitLimit {
                amount: 20_000,
                window_seconds: 86_400
            }]
        );
        assert_eq!(v.change.changed(), vec!["balance_floor", "debit_limits"]);
        let mut cleared = request(&["balance_floor"]);
        cleared.floor.clear();
        let c = cleared.validate(&account()).unwrap().change;
        assert_eq!(
            c.apply(&Terms::initial(false)).floor,
            None,
            "empty clears the floor"
        );
    }

    #[test]
    fn an_update_fingerprint_is_its_meaning() {
        let a = request(&["status"]).validate(&account()).unwrap();
        let mut spelled = request(&["status"]);
        spelled.floor = "-500".into();
        assert_eq!(
            a.fingerprint,
            spelled.validate(&account()).unwrap().fingerprint,
            "unnamed fields do not count"
        );
        let mut other = request(&["status"]);
        other.reason = "other".into();
        assert_ne!(
            a.fingerprint,
            other.validate(&account()).unwrap().fingerprint
        );
        let mut version = request(&["status"]);
        version.expected_version = 2;
        assert_ne!(
            a.fingerprint,
            version.validate(&account()).unwrap().fingerprint
        );
    }
}
