//! Errors by the contract's reasons, and whether a retry with the same key is safe.

use std::collections::BTreeMap;
use std::fmt;
use tonic_types::StatusExt;

/// The `google.rpc.ErrorInfo` domain of the ledger's errors.
pub const ERROR_DOMAIN: &str = "ledger";

macro_rules! reasons {
    ($($variant:ident => $name:literal,)+) => {
        /// The contract's error reasons (`ErrorInfo.reason`, domain `ledger`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Reason {
            $(#[doc = $name] $variant,)+
        }

        impl Reason {
            /// Every reason this client knows.
            pub const ALL: &'static [Reason] = &[$(Reason::$variant,)+];

            /// The reason as the contract spells it.
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

impl Reason {
    /// The reason named `s`, if this client knows it.
    pub fn parse(s: &str) -> Option<Reason> {
        Reason::ALL.iter().copied().find(|r| r.as_str() == s)
    }

    /// Whether sending the same request again with the same idempotency key is safe and may
    /// succeed: the outcome was unknown (the storage failed, the deadline passed). Every
    /// other reason is a definite answer that a retry would only repeat.
    pub fn is_retry_safe(self) -> bool {
        matches!(self, Reason::StorageUnavailable | Reason::DeadlineExceeded)
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What kind of failure an [`Error`] is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The ledger answered with one of the contract's errors.
    Ledger(Reason),
    /// The ledger answered with a reason this client does not know (a newer server).
    UnknownReason(String),
    /// A status without the ledger's `ErrorInfo`: from the transport, a proxy, or a deadline
    /// that passed on this side.
    Transport(tonic::Code),
    /// The server could not be reached.
    Connect,
    /// The client refused the request or an option before sending anything, or the ledger
    /// answered something this client cannot read (no decimal number, an unknown enum value).
    Invalid,
    /// An exact amount the ledger answered does not fit a `rust_decimal::Decimal`
    /// ([`crate::Amount::decimal`]: beyond `Decimal::MAX` units of its last place); the
    /// `Amount` itself still has it exactly ([`crate::Amount::exact`]).
    BeyondDecimal,
    /// The client refused the request before sending it, for the reason the ledger would
    /// have given (an amount with more decimals than its account's scale, a value beyond a
    /// named limit): nothing was sent, nothing happened.
    Refused(Reason),
}

/// A failed call or connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    /// What went wrong, for a person (the server's message, or the cause chain).
    pub message: String,
    /// The error's facts (`ErrorInfo.metadata`: `account`, `limit`, `field`,
    /// `idempotency_key`, `posting_id`, `sequence`, as applicable).
    pub metadata: BTreeMap<String, String>,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
            metadata: BTreeMap::new(),
        }
    }

    /// A request the client refuses before sending it, for `reason`.
    pub(crate) fn refused(reason: Reason, message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Refused(reason), message)
    }

    /// With one more fact (`limit`, `account`, `field`).
    pub(crate) fn with(mut self, key: &str, value: impl Into<String>) -> Error {
        self.metadata.insert(key.to_owned(), value.into());
        self
    }

    /// The error one result of a `PostBatch` carries (the status `Post` would have failed
    /// with).
    pub fn from_rpc_status(s: &tonic_types::pb::Status) -> Error {
        let status = tonic::Status::with_details(
            tonic::Code::from_i32(s.code),
            s.message.clone(),
            prost::Message::encode_to_vec(s).into(),
        );
        Error::from_status(&status)
    }

    /// The error of a failed call.
    pub fn from_status(s: &tonic::Status) -> Error {
        let info = s
            .get_details_error_info()
            .filter(|i| i.domain == ERROR_DOMAIN);
        let Some(info) = info else {
            return Error::new(ErrorKind::Transport(s.code()), with_causes(s));
        };
        let kind = match Reason::parse(&info.reason) {
            Some(r) => ErrorKind::Ledger(r),
            None => ErrorKind::UnknownReason(info.reason.clone()),
        };
        Error {
            kind,
            message: s.message().to_owned(),
            metadata: info.metadata.into_iter().collect(),
        }
    }

    /// The contract's reason, when the ledger gave one this client knows, or the client
    /// refused the request for it.
    pub fn reason(&self) -> Option<Reason> {
        match self.kind {
            ErrorKind::Ledger(r) | ErrorKind::Refused(r) => Some(r),
            _ => None,
        }
    }

    /// Whether the same request may be sent again with the same idempotency key: the outcome
    /// is unknown (storage unavailable, a deadline passed, the connection dropped or could
    /// not be made, the call was cancelled), and a retry never makes a second effect.
    pub fn is_retry_safe(&self) -> bool {
        use tonic::Code;
        match &self.kind {
            ErrorKind::Ledger(r) => r.is_retry_safe(),
            ErrorKind::Transport(c) => matches!(
                c,
                Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown
            ),
            ErrorKind::Connect => true,
            ErrorKind::UnknownReason(_)
            | ErrorKind::Invalid
            | ErrorKind::BeyondDecimal
            | ErrorKind::Refused(_) => false,
        }
    }
}

/// A status's message followed by its causes (a transport error's says only "transport
/// error"; the cause says which: refused, reset, a TLS alert), each once.
fn with_causes(s: &tonic::Status) -> String {
    let mut message = s.message().to_owned();
    let mut cause = std::error::Error::source(s);
    while let Some(c) = cause {
        let text = c.to_string();
        if !message.ends_with(&text) {
            message = format!("{message}: {text}");
        }
        cause = c.source();
    }
    message
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ErrorKind::Ledger(r) => write!(f, "{r}: {}", self.message),
            ErrorKind::UnknownReason(r) => write!(f, "{r}: {}", self.message),
            ErrorKind::Refused(r) => write!(
                f,
                "{r} (refused by the client, nothing sent): {}",
                self.message
            ),
            ErrorKind::Transport(c) => write!(f, "{c:?}: {}", self.message),
            ErrorKind::Connect | ErrorKind::Invalid | ErrorKind::BeyondDecimal => {
                f.write_str(&self.message)
            }
        }
    }
}

impl std::error::Error for Error {}

impl From<tonic::Status> for Error {
    fn from(s: tonic::Status) -> Error {
        Error::from_status(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_parse_back_from_their_names_and_only_unknown_outcomes_are_retry_safe() {
        for &r in Reason::ALL {
            assert_eq!(Reason::parse(r.as_str()), Some(r));
        }
        let safe: Vec<&str> = Reason::ALL
            .iter()
            .filter(|r| r.is_retry_safe())
            .map(|r| r.as_str())
            .collect();
        assert_eq!(safe, ["STORAGE_UNAVAILABLE", "DEADLINE_EXCEEDED"]);
    }

    #[test]
    fn a_status_without_the_ledgers_error_info_is_a_transport_error() {
        let e = Error::from_status(&tonic::Status::unavailable("connection reset"));
        assert_eq!(e.kind, ErrorKind::Transport(tonic::Code::Unavailable));
        assert!(e.is_retry_safe());
        let e = Error::from_status(&tonic::Status::invalid_argument("no"));
        assert!(!e.is_retry_safe());
    }
}
