//! Period closes: a close stops anything from being recorded with an effective time before its
//! `effective_before` (`PERIOD_CLOSED`); corrections go into the open period. A close is not a
//! posting and takes no sequence; closes only move forward, and there is no reopen. The rules
//! are in `write`'s decide; this is the request, the record and the refusals.

use crate::error::{LedgerError, Reason};
use crate::posting::{validate_idempotency_key, validate_text, Canon, Fingerprint};
use crate::record::rfc3339;
use time::OffsetDateTime;

/// A close as asked, validated: its cut-off, key and memo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidClose {
    pub effective_before: OffsetDateTime,
    pub idempotency_key: String,
    pub memo: String,
    pub fingerprint: Fingerprint,
}

impl ValidClose {
    /// A close of the period before `effective_before` under `key`; the key and memo checked
    /// as a posting's are.
    pub fn validate(
        effective_before: Option<OffsetDateTime>,
        key: &str,
        memo: &str,
    ) -> Result<ValidClose, LedgerError> {
        validate_idempotency_key(key)?;
        validate_text("memo", memo)?;
        let effective_before = effective_before.ok_or_else(|| {
            LedgerError::new(Reason::InvalidField, "ClosePeriod needs effective_before")
                .with("field", "effective_before")
        })?;
        let mut c = Canon::new("close/v1");
        c.field(&effective_before.unix_timestamp_nanos().to_be_bytes());
        c.field(memo.as_bytes());
        Ok(ValidClose {
            effective_before,
            idempotency_key: key.to_owned(),
            memo: memo.to_owned(),
            fingerprint: c.finish(),
        })
    }
}

/// A period close as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeriodClose {
    pub effective_before: OffsetDateTime,
    /// The ledger's last stored sequence when the close was decided (its postings before it
    /// are the closed period's as known then).
    pub after_sequence: i64,
    pub recorded_at: OffsetDateTime,
    pub caller: String,
    pub idempotency_key: String,
    pub memo: String,
}

/// The refusal of a posting, void, hold or capture effective at `effective_at`, before the
/// ledger's close at `closed_before`.
pub fn period_closed(effective_at: OffsetDateTime, closed_before: OffsetDateTime) -> LedgerError {
    LedgerError::new(
        Reason::PeriodClosed,
        format!(
            "effective_at {} is in a closed period: the ledger is closed before {}; record the correction in the open period",
            rfc3339(effective_at),
            rfc3339(closed_before)
        ),
    )
    .with("effective_at", rfc3339(effective_at))
    .with("closed_before", rfc3339(closed_before))
}

/// The refusal of a close that does not move the ledger's close forward.
pub fn not_forward(effective_before: OffsetDateTime, closed_before: OffsetDateTime) -> LedgerError {
    LedgerError::new(
        Reason::PeriodCloseNotForward,
        format!(
            "the ledger is closed before {} already: a close must be later (closes only move forward, there is no reopen), got {}",
            rfc3339(closed_before),
            rfc3339(effective_before)
        ),
    )
    .with("closed_before", rfc3339(closed_before))
}

/// The refusal of a close of a period that has not ended when it is decided.
pub fn in_future(effective_before: OffsetDateTime, now: OffsetDateTime) -> LedgerError {
    LedgerError::new(
        Reason::InvalidField,
        format!(
            "effective_before {} is after the close is recorded ({}): close a period once it has ended",
            rfc3339(effective_before),
            rfc3339(now)
        ),
    )
    .with("field", "effective_before")
}
