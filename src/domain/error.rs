//! Every way a ledger request can fail, with the reason the contract names.

use std::fmt;

/// The `google.rpc.ErrorInfo` reasons of the contract (and two documented additions for
/// malformed enum and timestamp fields, which the contract's list does not cover).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    IdempotencyKeyRequired,
    Unbalanced,
    InvalidAmount,
    AmountScale,
    InvalidAccountCode,
    InvalidCurrency,
    CurrencyMismatch,
    TooFewLegs,
    LimitExceeded,
    AsOfInFuture,
    InvalidPageToken,
    InvalidField,
    AccountNotFound,
    PostingNotFound,
    IdempotencyKeyReused,
    InsufficientFunds,
    AlreadyVoided,
    VoidOfVoid,
    AccountConflict,
    StorageUnavailable,
    Unauthenticated,
    PermissionDenied,
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
}

impl Reason {
    /// The reason string of the contract.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::IdempotencyKeyRequired => "IDEMPOTENCY_KEY_REQUIRED",
            Reason::Unbalanced => "UNBALANCED",
            Reason::InvalidAmount => "INVALID_AMOUNT",
            Reason::AmountScale => "AMOUNT_SCALE",
            Reason::InvalidAccountCode => "INVALID_ACCOUNT_CODE",
            Reason::InvalidCurrency => "INVALID_CURRENCY",
            Reason::CurrencyMismatch => "CURRENCY_MISMATCH",
            Reason::TooFewLegs => "TOO_FEW_LEGS",
            Reason::LimitExceeded => "LIMIT_EXCEEDED",
            Reason::AsOfInFuture => "AS_OF_IN_FUTURE",
            Reason::InvalidPageToken => "INVALID_PAGE_TOKEN",
            Reason::InvalidField => "INVALID_FIELD",
            Reason::AccountNotFound => "ACCOUNT_NOT_FOUND",
            Reason::PostingNotFound => "POSTING_NOT_FOUND",
            Reason::IdempotencyKeyReused => "IDEMPOTENCY_KEY_REUSED",
            Reason::InsufficientFunds => "INSUFFICIENT_FUNDS",
            Reason::AlreadyVoided => "ALREADY_VOIDED",
            Reason::VoidOfVoid => "VOID_OF_VOID",
            Reason::AccountConflict => "ACCOUNT_CONFLICT",
            Reason::StorageUnavailable => "STORAGE_UNAVAILABLE",
            Reason::Unauthenticated => "UNAUTHENTICATED",
            Reason::PermissionDenied => "PERMISSION_DENIED",
        }
    }

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
            | Reason::InvalidField => Class::InvalidArgument,
            Reason::AccountNotFound | Reason::PostingNotFound => Class::NotFound,
            Reason::IdempotencyKeyReused
            | Reason::InsufficientFunds
            | Reason::AlreadyVoided
            | Reason::VoidOfVoid
            | Reason::AccountConflict => Class::FailedPrecondition,
            Reason::StorageUnavailable => Class::Unavailable,
            Reason::Unauthenticated => Class::Unauthenticated,
            Reason::PermissionDenied => Class::PermissionDenied,
        }
    }
}

/// Every reason, for lookups and exhaustive tests.
pub const ALL_REASONS: [Reason; 22] = [
    Reason::IdempotencyKeyRequired,
    Reason::Unbalanced,
    Reason::InvalidAmount,
    Reason::AmountScale,
    Reason::InvalidAccountCode,
    Reason::InvalidCurrency,
    Reason::CurrencyMismatch,
    Reason::TooFewLegs,
    Reason::LimitExceeded,
    Reason::AsOfInFuture,
    Reason::InvalidPageToken,
    Reason::InvalidField,
    Reason::AccountNotFound,
    Reason::PostingNotFound,
    Reason::IdempotencyKeyReused,
    Reason::InsufficientFunds,
    Reason::AlreadyVoided,
    Reason::VoidOfVoid,
    Reason::AccountConflict,
    Reason::StorageUnavailable,
    Reason::Unauthenticated,
    Reason::PermissionDenied,
];

/// A failed request: a reason and a message a person can act on (with the offending value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerError {
    pub reason: Reason,
    pub message: String,
}

impl LedgerError {
    pub fn new(reason: Reason, message: impl Into<String>) -> LedgerError {
        LedgerError {
            reason,
            message: message.into(),
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
        for r in ALL_REASONS {
            assert_eq!(Reason::from_str_exact(r.as_str()), Some(r));
        }
        assert_eq!(Reason::from_str_exact("NOPE"), None);
    }
}
