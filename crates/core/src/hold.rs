//! Holds (two-phase postings): a hold reserves funds without moving them; a capture moves
//! all of it or less and releases the rest; a void releases it; the ledger releases it by
//! itself at its expiry time. The checks of a capture against its hold are here: a hold's
//! legs never change, so they are validation (they bind no key), made by the writer's lane before
//! the batch's transaction, against the holds of the whole batch read at once.

use super::account::{truncate_for_message, validate_metadata, Account, Metadata};
use super::error::{LedgerError, Reason};
use super::limits::MAX_LEGS;
use super::posting::{
    capture_fingerprint, check_balanced, leg_codes, parse_posting_id, resolve_legs,
    validate_idempotency_key, validate_text, validate_time, Fingerprint, Leg, LegRequest,
};
use super::record::{PostedLeg, Posting};
use std::collections::HashMap;
use time::OffsetDateTime;
use uuid::Uuid;

/// The caller recorded on the releases of expired holds (reserved: no auth-file line may use
/// it, as `anonymous`).
pub const LEDGER_CALLER: &str = "ledger";

/// The idempotency key of the release of an expired hold.
pub fn expiry_key(hold: Uuid) -> String {
    format!("expire:{hold}")
}

/// What the checks before the batch need of the posting a capture or a void names, all of
/// which never changes once it is recorded: that it exists, whether it is a hold, and a
/// hold's legs; not its state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostingTerms {
    pub posting_id: Uuid,
    /// The held legs when the posting is a hold; `None` when it is not one.
    pub held: Option<Vec<PostedLeg>>,
}

impl PostingTerms {
    /// The terms of a posting read whole.
    pub fn of(p: &Posting) -> PostingTerms {
        PostingTerms {
            posting_id: p.posting_id,
            held: p.hold.map(|_| p.legs.clone()),
        }
    }
}

/// A `Capture` as the caller sent it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaptureRequest {
    pub idempotency_key: String,
    pub hold_posting_id: String,
    /// Empty: the whole hold.
    pub legs: Vec<LegRequest>,
    pub effective_at: Option<OffsetDateTime>,
    pub memo: String,
    pub metadata: Metadata,
}

/// A capture checked against its hold: the legs it moves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidCapture {
    pub idempotency_key: String,
    pub hold: Uuid,
    pub legs: Vec<Leg>,
    pub effective_at: Option<OffsetDateTime>,
    pub memo: String,
    pub metadata: Metadata,
    pub fingerprint: Fingerprint,
}

impl CaptureRequest {
    /// Checks what needs no hold: key, memo, metadata, effective time, the hold's id, the
    /// legs' shape. Returns the hold's id and the distinct account codes of the legs.
    pub fn check_shape(&self) -> Result<(Uuid, Vec<String>), LedgerError> {
        validate_idempotency_key(&self.idempotency_key)?;
        validate_text("memo", &self.memo)?;
        validate_metadata(&self.metadata)?;
        validate_time("effective_at", self.effective_at)?;
        if self.legs.len() > MAX_LEGS {
            return Err(
                LedgerError::limit("leg count", "MAX_LEGS", MAX_LEGS, self.legs.len())
                    .with("field", "legs"),
            );
        }
        let hold = parse_posting_id(&self.hold_posting_id)
            .map_err(|e| e.with("field", "hold_posting_id"))?;
        Ok((hold, leg_codes(&self.legs)?))
    }

    /// The capture of `hold` (loaded by the caller, with the accounts of its legs and of the
    /// request's): `NOT_A_HOLD` for another posting; the whole hold when no legs are given;
    /// else exactly the hold's legs in its order (`CAPTURE_LEGS_MISMATCH`), each at most the
    /// held amount (`CAPTURE_EXCEEDS_HOLD`), balanced per currency.
    pub fn validate(
        &self,
        hold: &PostingTerms,
        accounts: &HashMap<String, Account>,
    ) -> Result<ValidCapture, LedgerError> {
        let (id, _) = self.check_shape()?;
        let Some(held) = &hold.held else {
            return Err(not_a_hold(hold.posting_id));
        };
        let legs = if self.legs.is_empty() {
            held_legs(held, accounts)?
        } else {
            self.within(hold, accounts)?
        };
        check_balanced(&legs)?;
        let fingerprint =
            capture_fingerprint(id, &legs, self.effective_at, &self.memo, &self.metadata);
        Ok(ValidCapture {
            idempotency_key: self.idempotency_key.clone(),
            hold: id,
            legs,
            effective_at: self.effective_at,
            memo: self.memo.clone(),
            metadata: self.metadata.clone(),
            fingerprint,
        })
    }

    /// The requested legs, checked leg by leg against the held ones.
    fn within(
        &self,
        hold: &PostingTerms,
        accounts: &HashMap<String, Account>,
    ) -> Result<Vec<Leg>, LedgerError> {
        let asked = resolve_legs(&self.legs, accounts)?;
        within_hold(&asked, hold)?;
        Ok(asked)
    }
}

/// Whether `captured` is within `hold`: exactly its legs (accounts and directions, in its
/// order), each amount at most the held one.
pub fn within_hold(captured: &[Leg], hold: &PostingTerms) -> Result<(), LedgerError> {
    let Some(held) = &hold.held else {
        return Err(not_a_hold(hold.posting_id));
    };
    let same_shape = captured.len() == held.len()
        && captured
            .iter()
            .zip(held)
            .all(|(a, h)| a.account_code == h.account && a.direction == h.direction);
    if !same_shape {
        let shape = |legs: Vec<String>| legs.join(", ");
        let held_shape = shape(
            held.iter()
                .map(|l| format!("{} {:?}", l.account, l.direction))
                .collect(),
        );
        let asked_shape = shape(
            captured
                .iter()
                .map(|l| format!("{} {:?}", l.account_code, l.direction))
                .collect(),
        );
        return Err(LedgerError::new(
            Reason::CaptureLegsMismatch,
            format!("a capture names exactly the hold's legs in its order ({held_shape}); this one names {asked_shape}"),
        )
        .with("posting_id", hold.posting_id)
        .with("field", "legs"));
    }
    let over = captured
        .iter()
        .zip(held)
        .enumerate()
        .find(|(_, (a, h))| a.amount.minor() > h.amount.minor());
    if let Some((i, (a, h))) = over {
        return Err(LedgerError::new(
            Reason::CaptureExceedsHold,
            format!(
                "leg {i} ({}) asks for {} but the hold holds {}",
                truncate_for_message(&a.account_code),
                a.amount,
                h.amount
            ),
        )
        .with("posting_id", hold.posting_id)
        .with("account", &a.account_code)
        .with("field", format!("legs[{i}].amount")));
    }
    Ok(())
}

pub fn not_a_hold(posting_id: Uuid) -> LedgerError {
    LedgerError::new(
        Reason::NotAHold,
        format!(
            "posting {posting_id} is not a hold; only a hold (Post with hold: true) can be captured"
        ),
    )
    .with("posting_id", posting_id)
}

/// A hold's legs, resolved against their accounts (which must be in `accounts`).
fn held_legs(
    held: &[PostedLeg],
    accounts: &HashMap<String, Account>,
) -> Result<Vec<Leg>, LedgerError> {
    held.iter()
        .map(|l| {
            let a = accounts.get(&l.account).ok_or_else(|| {
                LedgerError::new(
                    Reason::AccountNotFound,
                    format!("the hold's account {:?} does not exist", l.account),
                )
                .with("account", &l.account)
            })?;
            Ok(Leg::on(a, l.direction, l.amount))
        })
        .collect()
}
