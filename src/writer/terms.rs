//! The lane's step before a batch's transaction: the checks of captures and voids against
//! the terms of the postings they name ([`crate::domain::hold::PostingTerms`]: that the posting exists, whether it
//! is a hold, a hold's legs), which never change once recorded, so they are validation and
//! bind no key. The terms of every target in the batch are read in one statement, outside
//! the transaction and the write lock; `decide` checks the state (open, closed, voided)
//! against the snapshot.

use super::{PendingCapture, Queued};
use crate::domain::write::{Command, WriteRequest};
use crate::domain::{LedgerError, Reason};
use crate::storage::read::{terms_by_id, LoadedTerms};
use crate::storage::StorageError;
use std::collections::HashMap;
use uuid::Uuid;

/// The batch's requests, each ready for `decide` or refused by its target's terms (a posting
/// that does not exist, a capture its hold does not allow, a target that cannot be read).
pub(super) async fn checked(
    client: &crate::storage::Conn,
    queued: Vec<Queued>,
) -> Result<Vec<Result<WriteRequest, LedgerError>>, StorageError> {
    let mut ids: Vec<Uuid> = queued.iter().filter_map(target).collect();
    ids.sort_unstable();
    ids.dedup();
    let terms = terms_by_id(client, &ids).await?;
    Ok(queued.into_iter().map(|q| check(q, &terms)).collect())
}

/// The posting a queued request must find before the batch (a void's target, a capture's
/// hold); an expiry's hold was found by the expiry task, a post names none.
fn target(q: &Queued) -> Option<Uuid> {
    match q {
        Queued::Capture(c) => Some(c.hold),
        Queued::Ready(WriteRequest {
            command: Command::Void(v),
            ..
        }) => Some(v.target),
        Queued::Ready(_) => None,
    }
}

fn check(
    q: Queued,
    terms: &HashMap<Uuid, Result<LoadedTerms, LedgerError>>,
) -> Result<WriteRequest, LedgerError> {
    let Some(id) = target(&q) else {
        let Queued::Ready(r) = q else {
            unreachable!("a capture names its hold")
        };
        return Ok(r);
    };
    let found = terms
        .get(&id)
        .ok_or_else(|| not_found(id))?
        .as_ref()
        .map_err(Clone::clone)?;
    match q {
        Queued::Ready(r) => Ok(r),
        Queued::Capture(c) => capture(*c, found),
    }
}

/// A capture checked against its hold, the hold's accounts added to the request's.
fn capture(c: PendingCapture, hold: &LoadedTerms) -> Result<WriteRequest, LedgerError> {
    let mut accounts = c.accounts;
    for a in &hold.accounts {
        accounts.entry(a.code.clone()).or_insert_with(|| a.clone());
    }
    let valid = c.request.validate(&hold.terms, &accounts)?;
    Ok(WriteRequest {
        caller: c.caller,
        command: Command::Capture(valid),
    })
}

/// The refusal of a capture or void of a posting that does not exist.
pub fn not_found(id: Uuid) -> LedgerError {
    LedgerError::new(
        Reason::PostingNotFound,
        format!("posting {id} does not exist"),
    )
    .with("posting_id", id)
}
