//! Accounts: the attributes fixed at creation (code, currency, scale, side, metadata), and the
//! terms that change by versions (status, balance floor and ceiling, debit limits), each
//! version recorded with who changed what and why. [`AccountUpdate`] is the request for the
//! next version; it is checked here, before anything is sent, as far as it can be without the
//! ledger's state.

use super::{ledger, time_from_pb, unexpected, Metadata, NormalBalance};
use crate::amount::{from_wire, to_wire, to_wire_signed, Amount};
use crate::error::{Error, Reason};
use crate::pb;
use std::time::SystemTime;

/// An account to create. Every attribute is fixed at creation. Built with
/// [`NewAccount::new`] and its setters, or as a struct literal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewAccount {
    /// 1..128 characters of `a-z 0-9 : _ - .`.
    pub code: String,
    /// 2..16 characters of `A-Z 0-9`.
    pub currency: String,
    /// Decimal places its amounts carry (0..18).
    pub scale: u32,
    /// The side its balance grows on.
    pub normal_balance: NormalBalance,
    /// Whether its balance may go below zero.
    pub allow_negative: bool,
    /// Up to 32 entries.
    pub metadata: Metadata,
}

impl NewAccount {
    /// An account `code` of `currency` carrying `scale` decimals, growing on the
    /// `normal_balance` side; its balance may not go below zero and it has no metadata
    /// ([`NewAccount::allow_negative`], [`NewAccount::metadata`] change that).
    pub fn new(
        code: impl Into<String>,
        currency: impl Into<String>,
        scale: u32,
        normal_balance: NormalBalance,
    ) -> NewAccount {
        NewAccount {
            code: code.into(),
            currency: currency.into(),
            scale,
            normal_balance,
            allow_negative: false,
            metadata: Metadata::new(),
        }
    }

    /// Whether its balance may go below zero (a funding source, a clearing account).
    pub fn allow_negative(mut self, allow: bool) -> NewAccount {
        self.allow_negative = allow;
        self
    }

    /// With one metadata entry.
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> NewAccount {
        self.metadata.insert(key.into(), value.into());
        self
    }
}

/// Whether postings may touch an account.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AccountStatus {
    /// Postings and holds may touch it.
    Open,
    /// New postings and holds touching it are refused (`ACCOUNT_FROZEN`); captures and
    /// releases of holds placed before still go through.
    Frozen,
    /// Final: every later posting touching it, and every later update, is `ACCOUNT_CLOSED`.
    /// Only an account with a zero balance and nothing held closes (`ACCOUNT_NOT_EMPTY`).
    Closed,
}

impl AccountStatus {
    pub(crate) fn to_pb(self) -> i32 {
        match self {
            AccountStatus::Open => pb::AccountStatus::Open as i32,
            AccountStatus::Frozen => pb::AccountStatus::Frozen as i32,
            AccountStatus::Closed => pb::AccountStatus::Closed as i32,
        }
    }

    fn from_pb(v: i32) -> Result<AccountStatus, Error> {
        match pb::AccountStatus::try_from(v) {
            Ok(pb::AccountStatus::Open) => Ok(AccountStatus::Open),
            Ok(pb::AccountStatus::Frozen) => Ok(AccountStatus::Frozen),
            Ok(pb::AccountStatus::Closed) => Ok(AccountStatus::Closed),
            Ok(pb::AccountStatus::Unspecified) | Err(_) => Err(unexpected("status", v)),
        }
    }
}

/// At most `amount` debited from an account over any rolling window of `window_seconds` of
/// recorded time (the debit legs of postings when recorded, those of open holds until they
/// are released).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DebitLimit {
    /// Positive, at most the account's scale in decimals (answered with exactly it).
    pub amount: Amount,
    /// 1..=31,622,400 (366 days).
    pub window_seconds: u32,
}

impl DebitLimit {
    /// At most `amount` (a `Decimal` or an [`Amount`]) over any `window_seconds`.
    pub fn new(amount: impl Into<Amount>, window_seconds: u32) -> DebitLimit {
        DebitLimit {
            amount: amount.into(),
            window_seconds,
        }
    }

    fn from_pb(i: usize, l: pb::DebitLimit) -> Result<DebitLimit, Error> {
        Ok(DebitLimit {
            amount: from_wire(&format!("debit_limits[{i}].amount"), &l.amount)?,
            window_seconds: l.window_seconds,
        })
    }

    /// The limit with its amount written at `scale`; refused errors name `field`.
    fn to_pb(self, i: usize, scale: u32, account: &str) -> Result<pb::DebitLimit, Error> {
        let field = format!("debit_limits[{i}].amount");
        Ok(pb::DebitLimit {
            amount: to_wire(self.amount, scale, account).map_err(|e| e.with("field", field))?,
            window_seconds: self.window_seconds,
        })
    }
}

/// Who recorded an account version, when, why, and what it changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountVersionInfo {
    /// When the ledger recorded it (version 1: the account's `created_at`).
    pub recorded_at: SystemTime,
    /// The last posting of the ledger decided before it (0: none); it applies from the next.
    pub after_sequence: u64,
    /// The caller that recorded it (`None` for version 1).
    pub caller: Option<String>,
    /// The reason the update gave.
    pub reason: String,
    /// The fields it changed, as `update_mask` paths (`"status"`, `"balance_floor"`,
    /// `"balance_ceiling"`, `"debit_limits"`), in order.
    pub changed: Vec<String>,
    /// The idempotency key it was recorded under (`None` for version 1).
    pub idempotency_key: Option<String>,
}

impl AccountVersionInfo {
    fn from_pb(v: pb::AccountVersionInfo) -> Result<AccountVersionInfo, Error> {
        Ok(AccountVersionInfo {
            recorded_at: time_from_pb("version_info.recorded_at", v.recorded_at)?,
            after_sequence: v.after_sequence,
            caller: super::id(v.caller),
            reason: v.reason,
            changed: v.changed,
            idempotency_key: super::id(v.idempotency_key),
        })
    }
}

/// An account as the ledger stores it: its attributes, fixed at creation, and the version of
/// its terms in force at the read's cut-off (now, unless read as of another time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    /// The ledger it belongs to (its code is unique within it).
    pub ledger: String,
    /// 1..128 characters of `a-z 0-9 : _ - .`.
    pub code: String,
    /// 2..16 characters of `A-Z 0-9`.
    pub currency: String,
    /// Decimal places its amounts carry (0..18).
    pub scale: u32,
    /// The side its balance grows on.
    pub normal_balance: NormalBalance,
    /// Whether it was created allowing a negative balance (its floor at creation: none if so,
    /// else zero; [`Account::balance_floor`] is the floor in force).
    pub allow_negative: bool,
    /// Its metadata, fixed at creation.
    pub metadata: Metadata,
    /// When it was created.
    pub created_at: SystemTime,
    /// The version of the terms below: 1 at creation, one more per update (what
    /// [`AccountUpdate::new`] expects).
    pub version: u64,
    /// Open, frozen or closed.
    pub status: AccountStatus,
    /// The lowest its available balance may go, on its normal side (`-500.00`: an overdraft
    /// of 500); `None`: no floor.
    pub balance_floor: Option<Amount>,
    /// The highest its balance (with the open holds that would raise it) may go; `None`: no
    /// ceiling.
    pub balance_ceiling: Option<Amount>,
    /// At most these debits over rolling windows (at most 4).
    pub debit_limits: Vec<DebitLimit>,
    /// Who recorded this version, when and why (`None` when the answer does not carry it:
    /// `GetAccount` and `ListAccountVersions` do).
    pub version_info: Option<AccountVersionInfo>,
}

impl Account {
    pub(crate) fn from_pb(a: pb::Account) -> Result<Account, Error> {
        let debit_limits = a.debit_limits.into_iter().enumerate();
        Ok(Account {
            normal_balance: NormalBalance::from_pb(a.normal_balance)?,
            created_at: time_from_pb("created_at", a.created_at)?,
            status: AccountStatus::from_pb(a.status)?,
            balance_floor: optional_amount("balance_floor", &a.balance_floor)?,
            balance_ceiling: optional_amount("balance_ceiling", &a.balance_ceiling)?,
            debit_limits: debit_limits
                .map(|(i, l)| DebitLimit::from_pb(i, l))
                .collect::<Result<_, _>>()?,
            version_info: a
                .version_info
                .map(AccountVersionInfo::from_pb)
                .transpose()?,
            version: a.version,
            ledger: ledger::answered_ledger(a.ledger),
            code: a.code,
            currency: a.currency,
            scale: a.scale,
            allow_negative: a.allow_negative,
            metadata: a.metadata.into_iter().collect(),
        })
    }
}

/// An answered amount that may be absent (empty: none).
fn optional_amount(field: &str, text: &str) -> Result<Option<Amount>, Error> {
    if text.is_empty() {
        return Ok(None);
    }
    from_wire(field, text).map(Some)
}

/// The next version of an account's terms: the fields named change (`Some`), the others stay
/// as they are. Recorded under the caller's idempotency key like a posting (the same key on
/// every retry; the client's own retries keep it), and only if the account is still at
/// `expected_version` (else `ABORTED` / `ACCOUNT_VERSION_MISMATCH`: read it again and decide
/// again). Built with [`AccountUpdate::new`] and its setters, or as a struct literal.
///
/// ```
/// use ledger_client::{AccountStatus, AccountUpdate, Decimal};
/// let overdraft = AccountUpdate::new("overdraft/alice/1", "wallet:alice", 3, "approved")
///     .floor(Decimal::new(-50000, 2)) // -500.00
///     .debit_limit(Decimal::new(20000, 2), 86_400); // 200.00 a day
/// let unfreeze = AccountUpdate::new("wallet:bob/open-2", "wallet:bob", 7, "review closed")
///     .status(AccountStatus::Open)
///     .clear_ceiling();
/// assert_eq!(unfreeze.balance_ceiling, Some(None));
/// assert!(overdraft.status.is_none(), "not named: unchanged");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountUpdate {
    /// 1..255 printable characters, chosen by the caller.
    pub idempotency_key: String,
    /// The account's code.
    pub code: String,
    /// The version the caller read ([`Account::version`]), at least 1.
    pub expected_version: u64,
    /// Why, 1..1,024 bytes (recorded with the version).
    pub reason: String,
    /// `Some`: the new status.
    pub status: Option<AccountStatus>,
    /// `Some(Some(a))`: the new floor; `Some(None)`: no floor any more; `None`: unchanged.
    pub balance_floor: Option<Option<Amount>>,
    /// `Some(Some(a))`: the new ceiling; `Some(None)`: no ceiling any more; `None`:
    /// unchanged.
    pub balance_ceiling: Option<Option<Amount>>,
    /// `Some(limits)`: the new limits (`Some(vec![])`: none any more); `None`: unchanged.
    pub debit_limits: Option<Vec<DebitLimit>>,
}

impl AccountUpdate {
    /// An update of account `code`, which the caller read at `expected_version`, under
    /// `idempotency_key`, for `reason`; it changes nothing yet (name a change with the
    /// setters: an update must name one).
    pub fn new(
        idempotency_key: impl Into<String>,
        code: impl Into<String>,
        expected_version: u64,
        reason: impl Into<String>,
    ) -> AccountUpdate {
        AccountUpdate {
            idempotency_key: idempotency_key.into(),
            code: code.into(),
            expected_version,
            reason: reason.into(),
            status: None,
            balance_floor: None,
            balance_ceiling: None,
            debit_limits: None,
        }
    }

    /// With a new status.
    pub fn status(mut self, status: AccountStatus) -> AccountUpdate {
        self.status = Some(status);
        self
    }

    /// With a new floor (a `Decimal` or an [`Amount`], of either sign, at most the account's
    /// scale in decimals).
    pub fn floor(mut self, floor: impl Into<Amount>) -> AccountUpdate {
        self.balance_floor = Some(Some(floor.into()));
        self
    }

    /// With no floor any more (the available balance may go as low as anything).
    pub fn clear_floor(mut self) -> AccountUpdate {
        self.balance_floor = Some(None);
        self
    }

    /// With a new ceiling (a `Decimal` or an [`Amount`], of either sign, at most the
    /// account's scale in decimals).
    pub fn ceiling(mut self, ceiling: impl Into<Amount>) -> AccountUpdate {
        self.balance_ceiling = Some(Some(ceiling.into()));
        self
    }

    /// With no ceiling any more.
    pub fn clear_ceiling(mut self) -> AccountUpdate {
        self.balance_ceiling = Some(None);
        self
    }

    /// With one more debit limit in the new limits (which replace all the account's limits:
    /// name each one to keep): at most `amount` over any `window_seconds`.
    pub fn debit_limit(mut self, amount: impl Into<Amount>, window_seconds: u32) -> AccountUpdate {
        let limits = self.debit_limits.get_or_insert_with(Vec::new);
        limits.push(DebitLimit::new(amount, window_seconds));
        self
    }

    /// With no debit limits any more.
    pub fn clear_debit_limits(mut self) -> AccountUpdate {
        self.debit_limits = Some(Vec::new());
        self
    }

    /// The `update_mask` paths of the fields it names, in the contract's order.
    pub(crate) fn update_mask(&self) -> Vec<String> {
        let named = [
            ("status", self.status.is_some()),
            ("balance_floor", self.balance_floor.is_some()),
            ("balance_ceiling", self.balance_ceiling.is_some()),
            ("debit_limits", self.debit_limits.is_some()),
        ];
        named
            .into_iter()
            .filter(|(_, n)| *n)
            .map(|(path, _)| path.to_owned())
            .collect()
    }

    /// What needs no ledger state, refused here as the ledger would refuse it (nothing sent):
    /// the key, the version, the reason, at least one change.
    pub(crate) fn check(&self) -> Result<(), Error> {
        if self.idempotency_key.is_empty() {
            return Err(Error::refused(
                Reason::IdempotencyKeyRequired,
                "idempotency_key is required: the same key on every retry of this update",
            ));
        }
        let refuse = |field: &str, why: &str| {
            Err(Error::refused(Reason::InvalidField, why).with("field", field))
        };
        if self.expected_version == 0 {
            return refuse(
                "expected_version",
                "expected_version is required: the account's version you read (1 or more)",
            );
        }
        if self.reason.is_empty() {
            return refuse("reason", "reason is required: say why the account changes");
        }
        if self.update_mask().is_empty() {
            return refuse(
                "update_mask",
                "the update names no change: set one or more of status, balance_floor, balance_ceiling, debit_limits",
            );
        }
        Ok(())
    }

    /// The request as the ledger takes it, amounts written at the account's `scale`.
    pub(crate) fn to_pb(
        &self,
        ledger: String,
        scale: u32,
    ) -> Result<pb::UpdateAccountRequest, Error> {
        self.check()?;
        let code = &self.code;
        let signed = |field: &str, v: Option<Option<Amount>>| match v.flatten() {
            None => Ok(String::new()),
            Some(a) => to_wire_signed(a, scale, code).map_err(|e| e.with("field", field)),
        };
        let limits = self.debit_limits.as_deref().unwrap_or_default().iter();
        Ok(pb::UpdateAccountRequest {
            idempotency_key: self.idempotency_key.clone(),
            code: code.clone(),
            expected_version: self.expected_version,
            update_mask: Some(prost_types::FieldMask {
                paths: self.update_mask(),
            }),
            status: self
                .status
                .map_or(pb::AccountStatus::Unspecified as i32, AccountStatus::to_pb),
            balance_floor: signed("balance_floor", self.balance_floor)?,
            balance_ceiling: signed("balance_ceiling", self.balance_ceiling)?,
            debit_limits: limits
                .enumerate()
                .map(|(i, l)| l.to_pb(i, scale, code))
                .collect::<Result<_, _>>()?,
            reason: self.reason.clone(),
            ledger,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::types::time_to_pb;
    use rust_decimal::Decimal;
    use std::str::FromStr;
    use std::time::Duration;

    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).unwrap()
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    /// Version 3 of a credit-normal wallet: frozen, an overdraft of 500.00, no ceiling, two
    /// debit limits.
    fn wire_account() -> pb::Account {
        pb::Account {
            code: "wallet:alice".into(),
            currency: "EUR".into(),
            scale: 2,
            normal_balance: pb::NormalBalance::Credit as i32,
            allow_negative: false,
            metadata: [("owner".to_owned(), "alice".to_owned())].into(),
            created_at: Some(time_to_pb(at(0))),
            ledger: String::new(),
            version: 3,
            status: pb::AccountStatus::Frozen as i32,
            balance_floor: "-500.00".into(),
            balance_ceiling: String::new(),
            debit_limits: vec![
                pb::DebitLimit {
                    amount: "200.00".into(),
                    window_seconds: 86_400,
                },
                pb::DebitLimit {
                    amount: "1000000000000000000000000000.00".into(),
                    window_seconds: 31_622_400,
                },
            ],
            version_info: Some(pb::AccountVersionInfo {
                recorded_at: Some(time_to_pb(at(60))),
                after_sequence: 41,
                caller: "ops".into(),
                reason: "fraud review".into(),
                changed: vec!["status".into()],
                idempotency_key: "freeze/alice/1".into(),
            }),
        }
    }

    #[test]
    fn an_account_reads_its_version_and_terms_from_the_wire_exactly() {
        let a = Account::from_pb(wire_account()).unwrap();
        assert_eq!((a.ledger.as_str(), a.version), ("default", 3));
        assert_eq!(a.status, AccountStatus::Frozen);
        let floor = a.balance_floor.expect("a floor");
        assert_eq!(
            (floor.exact(), floor.minor()),
            ("-500.00".to_owned(), -50000)
        );
        assert_eq!(a.balance_ceiling, None, "empty: no ceiling");
        assert_eq!(
            a.debit_limits,
            [
                DebitLimit::new(d("200.00"), 86_400),
                DebitLimit::new(Amount::new(10i128.pow(29), 2), 31_622_400),
            ]
        );
        assert_eq!(
            a.debit_limits[1].amount.exact(),
            "1000000000000000000000000000.00",
            "beyond a Decimal, exactly"
        );
        assert_eq!(
            a.version_info,
            Some(AccountVersionInfo {
                recorded_at: at(60),
                after_sequence: 41,
                caller: Some("ops".into()),
                reason: "fraud review".into(),
                changed: vec!["status".into()],
                idempotency_key: Some("freeze/alice/1".into()),
            })
        );
        // Version 1 has no caller nor key; an answer may carry no version info at all.
        let mut first = wire_account();
        first.version = 1;
        first.balance_ceiling = "1000.00".into();
        first.version_info = Some(pb::AccountVersionInfo {
            recorded_at: Some(time_to_pb(at(0))),
            ..pb::AccountVersionInfo::default()
        });
        let a = Account::from_pb(first.clone()).unwrap();
        let info = a.version_info.unwrap();
        assert_eq!((info.caller, info.idempotency_key), (None, None));
        assert_eq!(a.balance_ceiling.map(|c| c.exact()), Some("1000.00".into()));
        first.version_info = None;
        assert_eq!(Account::from_pb(first).unwrap().version_info, None);
    }

    #[test]
    fn an_answered_account_the_client_cannot_read_is_an_error_naming_its_field() {
        type Edit = fn(&mut pb::Account);
        let cases: [(Edit, &str); 6] = [
            (
                |a| a.status = pb::AccountStatus::Unspecified as i32,
                "status",
            ),
            (|a| a.status = 99, "status"),
            (|a| a.balance_floor = "-5OO".into(), "balance_floor"),
            (|a| a.balance_ceiling = "1e3".into(), "balance_ceiling"),
            (
                |a| a.debit_limits[1].amount = "x".into(),
                "debit_limits[1].amount",
            ),
            (
                |a| a.version_info.as_mut().unwrap().recorded_at = None,
                "version_info.recorded_at",
            ),
        ];
        for (edit, field) in cases {
            let mut a = wire_account();
            edit(&mut a);
            let e = Account::from_pb(a).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Invalid, "{field}: {e}");
            assert!(e.message.contains(field), "{field}: {e}");
            assert!(!e.is_retry_safe());
        }
    }

    #[test]
    fn statuses_convert_both_ways() {
        for s in [
            AccountStatus::Open,
            AccountStatus::Frozen,
            AccountStatus::Closed,
        ] {
            assert_eq!(AccountStatus::from_pb(s.to_pb()).unwrap(), s);
        }
        assert_eq!(
            AccountStatus::Frozen.to_pb(),
            pb::AccountStatus::Frozen as i32
        );
    }

    fn update() -> AccountUpdate {
        AccountUpdate::new("k", "wallet:alice", 3, "why")
    }

    #[test]
    fn an_update_mask_names_exactly_the_fields_changed_in_the_contracts_order() {
        let cases: [(AccountUpdate, &[&str]); 7] = [
            (update().status(AccountStatus::Closed), &["status"]),
            (update().floor(d("-500")), &["balance_floor"]),
            (update().clear_floor(), &["balance_floor"]),
            (update().clear_ceiling(), &["balance_ceiling"]),
            (update().debit_limit(d("1"), 60), &["debit_limits"]),
            (update().clear_debit_limits(), &["debit_limits"]),
            (
                // Named in any order, sent in the contract's.
                update()
                    .clear_debit_limits()
                    .ceiling(d("10"))
                    .floor(d("0"))
                    .status(AccountStatus::Open),
                &["status", "balance_floor", "balance_ceiling", "debit_limits"],
            ),
        ];
        for (u, mask) in cases {
            let req = u.to_pb("default".into(), 2).unwrap();
            assert_eq!(req.update_mask.unwrap().paths, mask, "{u:?}");
        }
        assert!(update().update_mask().is_empty());
    }

    #[test]
    fn an_update_is_written_at_the_accounts_scale_and_a_cleared_field_is_sent_empty() {
        let u = update()
            .status(AccountStatus::Frozen)
            .floor(d("-500"))
            .ceiling(Amount::new(1_000_000, 3))
            .debit_limit(d("200"), 86_400)
            .debit_limit(d("0.5"), 60);
        let req = u.to_pb("acme".into(), 2).unwrap();
        let want = pb::UpdateAccountRequest {
            idempotency_key: "k".into(),
            code: "wallet:alice".into(),
            expected_version: 3,
            update_mask: Some(prost_types::FieldMask {
                paths: ["status", "balance_floor", "balance_ceiling", "debit_limits"]
                    .map(String::from)
                    .into(),
            }),
            status: pb::AccountStatus::Frozen as i32,
            balance_floor: "-500.00".into(),
            balance_ceiling: "1000.00".into(),
            debit_limits: vec![
                pb::DebitLimit {
                    amount: "200.00".into(),
                    window_seconds: 86_400,
                },
                pb::DebitLimit {
                    amount: "0.50".into(),
                    window_seconds: 60,
                },
            ],
            reason: "why".into(),
            ledger: "acme".into(),
        };
        assert_eq!(req, want);
        // Cleared: named in the mask, sent empty; not named: not in the mask, sent empty too.
        let req = update()
            .clear_floor()
            .clear_debit_limits()
            .to_pb("default".into(), 2)
            .unwrap();
        assert_eq!(
            req.update_mask.unwrap().paths,
            ["balance_floor", "debit_limits"]
        );
        assert_eq!(req.status, pb::AccountStatus::Unspecified as i32);
        assert_eq!(
            (req.balance_floor, req.balance_ceiling),
            (String::new(), String::new())
        );
        assert!(req.debit_limits.is_empty());
        // The builder is the struct literal.
        assert_eq!(
            update().clear_ceiling().status(AccountStatus::Open),
            AccountUpdate {
                idempotency_key: "k".into(),
                code: "wallet:alice".into(),
                expected_version: 3,
                reason: "why".into(),
                status: Some(AccountStatus::Open),
                balance_floor: None,
                balance_ceiling: Some(None),
                debit_limits: None,
            }
        );
    }

    #[test]
    fn an_update_the_ledger_would_refuse_is_refused_before_anything_is_sent() {
        let frozen = || update().status(AccountStatus::Frozen);
        let cases: [(AccountUpdate, Reason, &str); 8] = [
            (
                AccountUpdate::new("", "wallet:alice", 3, "why").status(AccountStatus::Open),
                Reason::IdempotencyKeyRequired,
                "",
            ),
            (
                AccountUpdate::new("k", "wallet:alice", 0, "why").status(AccountStatus::Open),
                Reason::InvalidField,
                "expected_version",
            ),
            (
                AccountUpdate::new("k", "wallet:alice", 3, "").status(AccountStatus::Open),
                Reason::InvalidField,
                "reason",
            ),
            (update(), Reason::InvalidField, "update_mask"),
            (
                frozen().floor(d("-1.005")),
                Reason::AmountScale,
                "balance_floor",
            ),
            (
                frozen().ceiling(Amount::new(10i128.pow(30), 2)),
                Reason::InvalidAmount,
                "balance_ceiling",
            ),
            (
                frozen().debit_limit(d("1"), 60).debit_limit(d("0"), 60),
                Reason::InvalidAmount,
                "debit_limits[1].amount",
            ),
            (
                frozen().debit_limit(d("-5"), 60),
                Reason::InvalidAmount,
                "debit_limits[0].amount",
            ),
        ];
        for (u, reason, field) in cases {
            let e = u.to_pb("default".into(), 2).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Refused(reason), "{field}: {e}");
            assert_eq!(
                e.metadata.get("field").map(String::as_str).unwrap_or(""),
                field,
                "{e}"
            );
            assert!(!e.is_retry_safe());
        }
    }
}
