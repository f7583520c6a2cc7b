//! The step before a batch's transaction: the postings its voids, captures and expiries name
//! are read as recorded (none of it changes once written), for the whole batch at once,
//! outside the transaction and the write lock; against them, the checks that bind no key: the
//! posting exists and can be read, and a capture's legs agree with its hold's
//! ([`CaptureRequest::validate`]). Under the lock, storage loads only the named postings'
//! state and `decide` checks it.

use super::command::{Command, WriteRequest};
use crate::account::Account;
use crate::error::LedgerError;
use crate::hold::{CaptureRequest, PostingTerms};
use crate::posting::posting_not_found;
use crate::record::Posting;
use std::collections::HashMap;
use uuid::Uuid;

/// A request as the writer's queue holds it: ready for `decide`, or a capture still to be
/// checked against its hold's terms.
#[derive(Clone, Debug)]
pub enum Queued {
    Ready(WriteRequest),
    Capture(Box<PendingCapture>),
}

/// A capture whose shape was checked and whose legs' accounts were found, before its hold's
/// terms are read.
#[derive(Clone, Debug)]
pub struct PendingCapture {
    pub caller: String,
    pub hold: Uuid,
    pub request: CaptureRequest,
    /// The accounts the request's legs name, by code.
    pub accounts: HashMap<String, Account>,
}

impl Queued {
    /// The posting it names: a void's target, a capture's or an expiry's hold.
    pub fn named(&self) -> Option<Uuid> {
        match self {
            Queued::Capture(c) => Some(c.hold),
            Queued::Ready(r) => r.command.target(),
        }
    }
}

/// The postings a batch's requests name, as recorded; those that cannot be read, with the
/// refusal of requests naming them; and the accounts of their legs, by code.
#[derive(Clone, Debug, Default)]
pub struct NamedPostings {
    pub postings: HashMap<Uuid, Posting>,
    pub corrupt: HashMap<Uuid, LedgerError>,
    pub accounts: HashMap<String, Account>,
}

/// The ids of the postings the queued requests name, sorted and distinct: what the lane reads.
pub fn named_by(queued: &[Queued]) -> Vec<Uuid> {
    let mut ids: Vec<Uuid> = queued.iter().filter_map(Queued::named).collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Each queued request ready for `decide`, or refused by what it names, binding nothing: a
/// posting that does not exist or cannot be read, a capture its hold does not allow.
pub fn admit(queued: Vec<Queued>, named: &NamedPostings) -> Vec<Result<WriteRequest, LedgerError>> {
    queued.into_iter().map(|q| admit_one(q, named)).collect()
}

fn admit_one(q: Queued, named: &NamedPostings) -> Result<WriteRequest, LedgerError> {
    let Some(id) = q.named() else {
        return match q {
            Queued::Ready(r) => Ok(r),
            Queued::Capture(c) => Err(posting_not_found(c.hold)),
        };
    };
    if let Some(e) = named.corrupt.get(&id) {
        return Err(e.clone());
    }
    let Some(found) = named.postings.get(&id) else {
        return Err(posting_not_found(id));
    };
    match q {
        Queued::Ready(r) => Ok(r),
        Queued::Capture(c) => capture(*c, &PostingTerms::of(found), named),
    }
}

/// A capture checked against its hold, the hold's accounts added to the request's.
fn capture(
    c: PendingCapture,
    hold: &PostingTerms,
    named: &NamedPostings,
) -> Result<WriteRequest, LedgerError> {
    let mut accounts = c.accounts;
    for l in hold.held.iter().flatten() {
        if let Some(a) = named.accounts.get(&l.account) {
            accounts.entry(a.code.clone()).or_insert_with(|| a.clone());
        }
    }
    let valid = c.request.validate(hold, &accounts)?;
    Ok(WriteRequest {
        caller: c.caller,
        command: Command::Capture(valid),
    })
}
