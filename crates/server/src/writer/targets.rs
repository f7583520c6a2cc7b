//! The lane's step before a batch's transaction: the postings the batch's voids, captures and
//! expiries name are read as recorded (heads, legs and their accounts: none of it changes once
//! written), in one round trip for the whole batch, outside the transaction and the write
//! lock. Against them, the checks that bind no key: that the posting exists, and a capture's
//! legs against its hold's ([`ledger_core::hold::CaptureRequest::validate`]). Under the lock,
//! `load` reads only their state (voided, closed) and their accounts' totals; `decide` checks
//! the state.

use super::{PendingCapture, Queued};
use crate::storage::read::{targets_by_id, Targets};
use crate::storage::StorageError;
use ledger_core::account::AccountCache;
use ledger_core::hold::PostingTerms;
use ledger_core::posting::posting_not_found;
use ledger_core::write::{Command, WriteRequest};
use ledger_core::LedgerError;
use std::sync::RwLock;
use uuid::Uuid;

/// The batch's requests, each ready for `decide` or refused by its target (a posting that does
/// not exist or cannot be read, a capture its hold does not allow), and the targets.
pub(super) async fn checked(
    client: &crate::storage::Conn,
    queued: Vec<Queued>,
    accounts: &RwLock<AccountCache>,
) -> Result<(Vec<Result<WriteRequest, LedgerError>>, Targets), StorageError> {
    let mut ids: Vec<Uuid> = queued.iter().filter_map(target).collect();
    ids.sort_unstable();
    ids.dedup();
    let targets = targets_by_id(client, &ids, accounts).await?;
    let checked = queued.into_iter().map(|q| check(q, &targets)).collect();
    Ok((checked, targets))
}

/// The posting a queued request names: a void's target, a capture's hold, an expiry's hold.
fn target(q: &Queued) -> Option<Uuid> {
    match q {
        Queued::Capture(c) => Some(c.hold),
        Queued::Ready(r) => r.command.target(),
    }
}

fn check(q: Queued, targets: &Targets) -> Result<WriteRequest, LedgerError> {
    let Some(id) = target(&q) else {
        let Queued::Ready(r) = q else {
            unreachable!("a capture names its hold")
        };
        return Ok(r);
    };
    if let Some(e) = targets.corrupt.get(&id) {
        return Err(e.clone());
    }
    let Some(found) = targets.postings.get(&id) else {
        return Err(posting_not_found(id));
    };
    match q {
        Queued::Ready(r) => Ok(r),
        Queued::Capture(c) => capture(*c, &PostingTerms::of(found), targets),
    }
}

/// A capture checked against its hold, the hold's accounts added to the request's.
fn capture(
    c: PendingCapture,
    hold: &PostingTerms,
    targets: &Targets,
) -> Result<WriteRequest, LedgerError> {
    let mut accounts = c.accounts;
    for l in hold.held.iter().flatten() {
        if let Some(a) = targets.accounts.get(&l.account) {
            accounts.entry(a.code.clone()).or_insert_with(|| a.clone());
        }
    }
    let valid = c.request.validate(hold, &accounts)?;
    Ok(WriteRequest {
        caller: c.caller,
        command: Command::Capture(valid),
    })
}
