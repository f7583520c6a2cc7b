//! How journal rows decode: directions, postings' heads and legs, stored rejections; a row no
//! writer could have left is a corrupt row (`StorageError::Corrupt`), never a panic.

use super::super::accounts::metadata_from_json;
use super::super::StorageError;
use ledger_core::amount::{parse_stored, Amount};
use ledger_core::record::{CloseKind, Closes, HoldState, PostedLeg, Posting};
use ledger_core::{Direction, LedgerError, Reason};
use uuid::Uuid;

/// Direction as stored in a `"char"` column.
pub(crate) fn direction_to_sql(d: Direction) -> i8 {
    match d {
        Direction::Debit => b'D' as i8,
        Direction::Credit => b'C' as i8,
    }
}

pub(crate) fn direction_from_sql(c: i8) -> Option<Direction> {
    match c as u8 {
        b'D' => Some(Direction::Debit),
        b'C' => Some(Direction::Credit),
        _ => None,
    }
}

/// A posting's head row, without its legs.
pub(super) fn posting_head(h: &tokio_postgres::Row) -> Result<Posting, StorageError> {
    let sequence: i64 = h.get("sequence");
    let metadata = metadata_from_json(h.get("metadata"))
        .map_err(|e| StorageError::corrupt_posting(sequence, e))?;
    Ok(Posting {
        posting_id: h.get("posting_id"),
        sequence: sequence as u64,
        caller: h.get("caller"),
        idempotency_key: h.get("idempotency_key"),
        legs: Vec::new(),
        effective_at: time(h, "effective_at", sequence)?,
        recorded_at: time(h, "recorded_at", sequence)?,
        memo: h.get("memo"),
        metadata,
        voids_posting_id: h.get("voids_posting_id"),
        voided_by_posting_id: h.get("voided_by"),
        void_reason: h.get("void_reason"),
        hold: hold_state(h, sequence)?,
        closes: closes(h, sequence)?,
        hash: stored_hash(h.get("hash")).map_err(|e| StorageError::corrupt_posting(sequence, e))?,
    })
}

/// A time of posting `sequence`'s row; one the ledger's times cannot be (`infinity`, beyond
/// year 9999) makes the row corrupt rather than failing the read's task.
fn time(
    h: &tokio_postgres::Row,
    column: &str,
    sequence: i64,
) -> Result<time::OffsetDateTime, StorageError> {
    h.try_get(column)
        .map_err(|e| StorageError::corrupt_posting(sequence, format!("{column}: {e}")))
}

/// A posting's stored hash: 32 bytes, or none (not hashed yet).
pub(crate) fn stored_hash(h: Option<Vec<u8>>) -> Result<Option<[u8; 32]>, String> {
    h.map(|b| {
        <[u8; 32]>::try_from(b.as_slice())
            .map_err(|_| format!("its hash has {} bytes, not 32", b.len()))
    })
    .transpose()
}

pub(super) fn close_kind(
    text: Option<&str>,
    sequence: i64,
) -> Result<Option<CloseKind>, StorageError> {
    text.map(|k| {
        CloseKind::parse(k)
            .ok_or_else(|| StorageError::corrupt_posting(sequence, format!("close kind {k:?}")))
    })
    .transpose()
}

/// A hold's own facts, when the posting is one.
pub(super) fn hold_state(
    h: &tokio_postgres::Row,
    sequence: i64,
) -> Result<Option<HoldState>, StorageError> {
    if !h.get::<_, bool>("hold") {
        return Ok(None);
    }
    let how = close_kind(h.get("closed_how"), sequence)?;
    let closed_by = h.get::<_, Option<Uuid>>("closed_by").zip(how);
    let expires_at = h
        .try_get("hold_expires_at")
        .map_err(|e| StorageError::corrupt_posting(sequence, format!("hold_expires_at: {e}")))?;
    Ok(Some(HoldState {
        expires_at,
        closed_by,
        lapsed: h.get::<_, Option<bool>>("lapsed").unwrap_or(false),
    }))
}

/// The hold a posting closes, when it closes one.
pub(super) fn closes(
    h: &tokio_postgres::Row,
    sequence: i64,
) -> Result<Option<Closes>, StorageError> {
    let kind = close_kind(h.get("close_kind"), sequence)?;
    Ok(h.get::<_, Option<Uuid>>("closes_hold_posting_id")
        .zip(kind)
        .map(|(hold, kind)| Closes { hold, kind }))
}

/// The next leg of posting `sequence`, which must be its leg number `expected` (its account's
/// code and scale joined as `code`, `scale`).
pub(super) fn posting_leg(
    l: &tokio_postgres::Row,
    sequence: i64,
    expected: usize,
) -> Result<PostedLeg, StorageError> {
    let account = l
        .get::<_, Option<String>>("code")
        .zip(l.get::<_, Option<i16>>("scale"));
    leg_of(l, sequence, expected, account)
}

/// A leg row of posting `sequence` (number `expected`) on the account (code, scale) it names,
/// `None` when that account does not exist.
pub(super) fn leg_of(
    l: &tokio_postgres::Row,
    sequence: i64,
    expected: usize,
    account: Option<(String, i16)>,
) -> Result<PostedLeg, StorageError> {
    let corrupt = |detail: String| StorageError::corrupt_posting(sequence, detail);
    let (leg_sequence, index): (i64, i16) = (l.get("sequence"), l.get("leg_index"));
    if leg_sequence != sequence {
        return Err(StorageError::corrupt_posting(
            leg_sequence,
            "legs without a posting",
        ));
    }
    if usize::try_from(index).ok() != Some(expected) {
        return Err(corrupt(format!("leg {index} where leg {expected} belongs")));
    }
    let Some((code, scale)) = account else {
        return Err(corrupt(format!(
            "leg {index} names an account that does not exist"
        )));
    };
    let scale = scale as u8;
    let minor =
        parse_stored(l.get("amount"), scale).map_err(|e| corrupt(format!("leg {index}: {e}")))?;
    let direction = direction_from_sql(l.get("direction"))
        .ok_or_else(|| corrupt(format!("leg {index} has no direction")))?;
    Ok(PostedLeg {
        account: code,
        direction,
        amount: Amount::from_minor(minor, scale),
    })
}

/// A rejection read back from storage (of the decided key `key`).
pub(crate) fn stored_rejection(
    key: &str,
    reason: Option<String>,
    message: Option<String>,
    metadata: Option<serde_json::Value>,
) -> Result<LedgerError, StorageError> {
    let corrupt = |detail: String| StorageError::Corrupt {
        row: format!("decision of idempotency key {key:?}"),
        sequence: None,
        detail,
    };
    let (Some(reason), Some(message)) = (reason, message) else {
        return Err(corrupt(
            "a decided key with neither a posting nor a rejection".into(),
        ));
    };
    let reason = Reason::from_str_exact(&reason).ok_or_else(|| {
        corrupt(format!(
            "rejection reason {reason:?} is not one of the ledger's"
        ))
    })?;
    let metadata =
        metadata_from_json(metadata.unwrap_or_else(|| serde_json::json!({}))).map_err(corrupt)?;
    Ok(LedgerError {
        reason,
        message,
        metadata,
    })
}
