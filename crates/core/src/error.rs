//! Every way a ledger request can fail, with the reason the contract names.

use std::collections::BTreeMap;
use std::fmt;

/// Declares [`Reason`] and [`ALL_REASONS`] from one list, so no reason can be missing from
/// the list that stored rejections are parsed with.
macro_rules! reasons {
    ($($variant:ident => $name:literal,)+) => {
        /// The `google.rpc.ErrorInfo` reasons of the contract (and the documented addition
        /// `INVALID_FIELD` for malformed enum, timestamp and text fields).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Reason {
            $($variant,)+
        }

        /// Every reason, for lookups and exhaustive tests.
        pub const ALL_REASONS: &[Reason] = &[$(Reason::$variant,)+];

        impl Reason {
            /// The reason string of the contract.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Reason::$variant => $name,)+
                }
            }
        }
    };
}

reasons! {
    IdempotencyKeyRequired => "IDEMPOTENCY_KEY_REQUIRED",
    Unbalanced => "UNBALANCED",
    InvalidAmount => "INVALID_AMOUNT",
    AmountScale => "AMOUNT_SCALE",
    InvalidAccountCode => "INVALID_ACCOUNT_CODE",
    InvalidCurrency => "INVALID_CURRENCY",
    CurrencyMismatch => "CURRENCY_MISMATCH",
    TooFewLegs => "TOO_FEW_LEGS",
    LimitExceeded => "LIMIT_EXCEEDED",
    AsOfInFuture => "AS_OF_IN_FUTURE",
    InvalidPageToken => "INVALID_PAGE_TOKEN",
    InvalidField => "INVALID_FIELD",
    AccountNotFound => "ACCOUNT_NOT_FOUND",
    PostingNotFound => "POSTING_NOT_FOUND",
    IdempotencyKeyReused => "IDEMPOTENCY_KEY_REUSED",
    InsufficientFunds => "INSUFFICIENT_FUNDS",
    AlreadyVoided => "ALREADY_VOIDED",
    VoidOfVoid => "VOID_OF_VOID",
    AccountConflict => "ACCOUNT_CONFLICT",
    StorageUnavailable => "STORAGE_UNAVAILABLE",
    Unauthenticated => "UNAUTHENTICATED",
    PermissionDenied => "PERMISSION_DENIED",
    DeadlineExceeded => "DEADLINE_EXCEEDED",
    JournalCorrupt => "JOURNAL_CORRUPT",
    HoldNotPending => "HOLD_NOT_PENDING",
    CaptureExceedsHold => "CAPTURE_EXCEEDS_HOLD",
    NotAHold => "NOT_A_HOLD",
    CaptureLegsMismatch => "CAPTURE_LEGS_MISMATCH",
}

/// The class of an error, which the gRPC adapter maps to a status code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    InvalidArgument,
    NotFound,
    FailedPrecondition,
    Unavailable,
    Unauthenticated,
    PermissionDenied,
    DeadlineExceeded,
    DataLoss,
}

impl Reason {
    /// Parses a stored reason (state-dependent rejections are stored by this name).
    pub fn from_str_exact(s: &str) -> Option<Reason> {
        ALL_REASONS.iter().copied().find(|r| r.as_str() == s)
    }

    /// The status class of this reason.
    pub fn class(self) -> Class {
        match self {
            Reason::IdempotencyKeyRequired
            | Reason::Unbalanced
            | Reason::InvalidAmount
            | Reason::AmountScale
            | Reason::InvalidAccountCode
            | Reason::InvalidCurrency
            | Reason::CurrencyMismatch
            | Reason::TooFewLegs
            | Reason::LimitExceeded
            | Reason::AsOfInFuture
            | Reason::InvalidPageToken
            | Reason::InvalidField
            | Reason::CaptureLegsMismatch => Class::InvalidArgument,
            Reason::AccountNotFound | Reason::PostingNotFound => Class::NotFound,
            Reason::IdempotencyKeyReused
            | Reason::InsufficientFunds
            | Reason::AlreadyVoided
            | Reason::VoidOfVoid
            | Reason::AccountConflict
            | Reason::HoldNotPending
            | Reason::CaptureExceedsHold
            | Reason::NotAHold => Class::FailedPrecondition,
            Reason::StorageUnavailable => Class::Unavailable,
            Reason::Unauthenticated => Class::Unauthenticated,
            Reason::PermissionDenied => Class::PermissionDenied,
            Reason::DeadlineExceeded => Class::DeadlineExceeded,
            Reason::JournalCorrupt => Class::DataLoss,
        }
    }
}

/// A failed request: a reason, a message a person can act on (with the offending value), and
/// the same facts for programs (`ErrorInfo.metadata`: `account`, `limit`, `field`,
/// `idempotency_key`, `posting_id`, `sequence`, as applicable).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerError {
    pub reason: Reason,
    pub message: String,
    pub metadata: BTreeMap<String, String>,
}

impl LedgerError {
    pub fn new(reason: Reason, message: impl Into<String>) -> LedgerError {
        LedgerError {
            reason,
            message: message.into(),
            metadata: BTreeMap::new(),
        }
    }

    /// The same error with one more machine-readable fact.
    pub fn with(mut self, key: &str, value: impl fmt::Display) -> LedgerError {
        self.metadata.insert(key.to_owned(), value.to_string());
        self
    }

    /// The caller's deadline passed before the answer: the outcome of a write is unknown.
    pub fn deadline_exceeded(deadline: impl fmt::Display) -> LedgerError {
        LedgerError::new(
            Reason::DeadlineExceeded,
            format!("the call's deadline ({deadline}) passed before the ledger answered; the outcome of a write is unknown: retry with the same idempotency key"),
        )
    }

    /// A journal row breaks an invariant: someone wrote the database behind the ledger's back.
    /// `row` names it ("posting of sequence 7", "account \"a:b\""); `sequence` is the
    /// posting's, when the row belongs to one.
    pub fn journal_corrupt(row: &str, sequence: Option<i64>, detail: &str) -> LedgerError {
        let e = LedgerError::new(
            Reason::JournalCorrupt,
            format!("the journal's {row} breaks an invariant ({detail}): it was written behind the ledger's back; run `ledger check` and restore it from a backup"),
        );
        match sequence {
            Some(s) => e.with("sequence", s),
            None => e,
        }
    }

    /// A storage failure: the outcome may be unknown, so the caller retries with its key.
    pub fn unavailable(detail: impl fmt::Display) -> LedgerError {
        LedgerError::new(
            Reason::StorageUnavailable,
            format!("storage unavailable ({detail}); the outcome is unknown: retry with the same idempotency key"),
        )
    }

    /// A named limit was exceeded; the message names the limit and its value.
    pub fn limit(
        what: &str,
        limit_name: &str,
        limit: impl fmt::Display,
        got: impl fmt::Display,
    ) -> LedgerError {
        LedgerError::new(
            Reason::LimitExceeded,
            format!("{what} is {got}, over the limit of {limit} ({limit_name})"),
        )
        .with("limit", limit_name)
    }

    /// Whether a decided rejection binds the idempotency key (state-dependent rejections do,
    /// validation failures do not).
    pub fn binds_key(&self) -> bool {
        matches!(
            self.reason,
            Reason::InsufficientFunds
                | Reason::AlreadyVoided
                | Reason::VoidOfVoid
                | Reason::LimitExceeded
                | Reason::HoldNotPending
        )
    }
}

impl fmt::Display for LedgerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.reason.as_str(), self.message)
    }
}

impl std::error::Error for LedgerError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_round_trips_through_its_stored_name() {
        for &r in ALL_REASONS {
            assert_eq!(Reason::from_str_exact(r.as_str()), Some(r));
        }
        assert_eq!(Reason::from_str_exact("NOPE"), None);
    }

    #[test]
    fn the_reason_list_holds_every_reason_once() {
        let mut names: Vec<&str> = ALL_REASONS.iter().map(|r| r.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL_REASONS.len(), "reason names are distinct");
    }
}
