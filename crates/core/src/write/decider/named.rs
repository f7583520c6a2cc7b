//! The rules of requests that name a recorded posting: voids (of postings and of holds,
//! which release them), captures and the ledger's releases of expired holds; and what a
//! snapshot must hold of that posting, or the request is refused unbound.

use super::{swapped, unbalanced_named, Closing, Decider, NewPosting, Refusal};
use crate::engine::{AccountState, Effect};
use crate::error::{LedgerError, Reason};
use crate::hold::ValidCapture;
use crate::ledger;
use crate::posting::{check_balanced, posting_not_found, Leg, ValidVoid};
use crate::record::{expired_by, rfc3339, CloseKind, Closes, Posting};
use crate::write::{Command, Snapshot};
use time::OffsetDateTime;
use uuid::Uuid;

impl<'a> Decider<'a> {
    /// The refusal of a new request that touches a corrupt row: an account of its legs, the
    /// posting it names, or an account of that posting's legs.
    pub(super) fn corrupt(&self, c: &Command) -> Option<LedgerError> {
        let account = |id: &i64| self.corrupt_accounts.get(id);
        let found = match (c, c.target()) {
            (Command::Post(p), _) => p
                .legs
                .iter()
                .map(|l| l.account_id)
                .chain(p.conditions.iter().map(|c| c.account_id))
                .find_map(|id| account(&id)),
            (Command::Update(u), _) => account(&u.account_id),
            (Command::Capture(cap), Some(target)) => cap
                .legs
                .iter()
                .find_map(|l| account(&l.account_id))
                .or_else(|| self.corrupt_named(target)),
            (_, Some(target)) => self.corrupt_named(target),
            (_, None) => None,
        };
        found.cloned()
    }

    pub(super) fn corrupt_named(&self, target: Uuid) -> Option<&LedgerError> {
        let s = self.snapshot;
        s.corrupt_named.get(&target).or_else(|| {
            s.named.get(&target).and_then(|t| {
                t.legs
                    .iter()
                    .filter_map(|l| s.account_ids.get(&l.account))
                    .find_map(|id| self.corrupt_accounts.get(id))
            })
        })
    }

    /// The ledger's release of an expired hold, once its expiry time has passed by the
    /// batch's clock (before, it binds nothing: a later batch records it).
    pub(super) fn expire(&self, hold: Uuid) -> Result<NewPosting, Refusal> {
        let h = self.named(hold)?;
        let expires_at = h.hold.and_then(|t| t.expires_at);
        if !expired_by(expires_at, self.snapshot.clock.now) {
            return Err(Refusal::Unbound(LedgerError::new(
                Reason::HoldNotPending,
                format!("hold {hold} is not due to expire"),
            )));
        }
        let (hold, held) = self.pending_hold(hold, Closing::AtExpiry)?;
        Ok(NewPosting {
            closes: Some(Closes {
                hold: hold.posting_id,
                kind: CloseKind::Expire,
            }),
            ..NewPosting::bare(swapped(&held), Effect::Release(held), expires_at)
        })
    }

    /// A void: of a hold, its release; of any other posting, its legs swapped.
    pub(super) fn void(&self, v: &ValidVoid) -> Result<NewPosting, Refusal> {
        let target = self.named(v.target)?;
        let refuse = |reason, why: String| {
            Err(Refusal::Bound(
                LedgerError::new(reason, why).with("posting_id", target.posting_id),
            ))
        };
        if let Some(of) = target.voids_posting_id {
            let why = format!(
                "posting {} is itself a void (of {of}); a void cannot be voided",
                target.posting_id
            );
            return refuse(Reason::VoidOfVoid, why);
        }
        if let Some(c) = target.closes.filter(|c| c.kind == CloseKind::Expire) {
            let why = format!(
                "posting {} is the release of expired hold {}; a release cannot be voided",
                target.posting_id, c.hold
            );
            return refuse(Reason::VoidOfVoid, why);
        }
        let voids = Some((target.posting_id, v.reason.clone()));
        if target.hold.is_some() {
            let (hold, held) = self.pending_hold(target.posting_id, Closing::ByCaller)?;
            let closes = Some(Closes {
                hold: hold.posting_id,
                kind: CloseKind::Release,
            });
            return Ok(NewPosting {
                voids,
                closes,
                ..NewPosting::bare(swapped(&held), Effect::Release(held), v.effective_at)
            });
        }
        let voided_by = target
            .voided_by_posting_id
            .or_else(|| self.voided_now.get(&target.posting_id).copied());
        if let Some(by) = voided_by {
            let why = format!(
                "posting {} was already voided by posting {by}",
                target.posting_id
            );
            return refuse(Reason::AlreadyVoided, why);
        }
        let legs = swapped(&self.resolved(target)?);
        Ok(NewPosting {
            voids,
            ..NewPosting::bare(legs, Effect::Move, v.effective_at)
        })
    }

    /// A capture of a pending hold: moves the captured legs, releases the hold's. (Its legs
    /// were checked against the hold's by `admit`, before the batch.)
    pub(super) fn capture(&self, c: &ValidCapture) -> Result<NewPosting, Refusal> {
        let (hold, held) = self.pending_hold(c.hold, Closing::ByCaller)?;
        Ok(NewPosting {
            memo: c.memo.clone(),
            metadata: c.metadata.clone(),
            closes: Some(Closes {
                hold: hold.posting_id,
                kind: CloseKind::Capture,
            }),
            ..NewPosting::bare(c.legs.clone(), Effect::Capture(held), c.effective_at)
        })
    }

    /// The recorded posting a request names, with its state now; one the snapshot does not
    /// hold, or one of another ledger than the batch's, is `POSTING_NOT_FOUND`, unbound (the
    /// lane found it; the load did not).
    pub(super) fn named(&self, id: Uuid) -> Result<&'a Posting, Refusal> {
        let snapshot: &'a Snapshot = self.snapshot;
        snapshot
            .named
            .get(&id)
            .filter(|p| ledger::of_sequence(p.sequence as i64) == self.ledger())
            .ok_or_else(|| Refusal::Unbound(posting_not_found(id)))
    }

    /// A hold still open, and its legs; else why not (`HOLD_NOT_PENDING`, naming its state
    /// and the posting that closed it, or its expiry time). A caller's capture or release
    /// also finds it closed once its expiry time has passed, recorded or not.
    pub(super) fn pending_hold(
        &self,
        id: Uuid,
        by: Closing,
    ) -> Result<(&'a Posting, Vec<Leg>), Refusal> {
        let hold = self.named(id)?;
        let Some(state) = hold.hold else {
            return Err(Refusal::Unbound(crate::hold::not_a_hold(id)));
        };
        let closed = state
            .closed_by
            .or_else(|| self.closed_now.get(&id).copied());
        let refuse = |why: String| {
            Err(Refusal::Bound(
                LedgerError::new(Reason::HoldNotPending, why).with("posting_id", id),
            ))
        };
        if let Some((by, kind)) = closed {
            let how = match kind {
                CloseKind::Capture => "captured",
                CloseKind::Release => "released",
                CloseKind::Expire => "expired",
            };
            return refuse(format!(
                "hold {id} is no longer pending: it was {how} by posting {by}"
            ));
        }
        let expired = state
            .expires_at
            .filter(|&t| expired_by(Some(t), self.now()));
        if let (Some(t), Closing::ByCaller) = (expired, by) {
            return refuse(format!(
                "hold {id} is no longer pending: it expired at {} (the ledger records its release)",
                rfc3339(t)
            ));
        }
        Ok((hold, self.resolved(hold)?))
    }

    /// A recorded posting's legs, resolved against the snapshot's accounts; a leg on an
    /// account the snapshot does not hold, or legs that do not balance, are a corrupt row.
    pub(super) fn resolved(&self, p: &Posting) -> Result<Vec<Leg>, Refusal> {
        let s = self.snapshot;
        let legs = p
            .legs
            .iter()
            .map(|l| {
                let state = s
                    .account_ids
                    .get(&l.account)
                    .and_then(|id| s.accounts.get(id));
                let Some(AccountState { account: a, .. }) = state else {
                    let row = format!("posting {}", p.posting_id);
                    let why = format!(
                        "a leg names account {:?}, which the batch did not load",
                        l.account
                    );
                    let e = LedgerError::journal_corrupt(&row, Some(p.sequence as i64), &why);
                    return Err(Refusal::Unbound(e));
                };
                Ok(Leg::on(a, l.direction, l.amount))
            })
            .collect::<Result<Vec<Leg>, Refusal>>()?;
        check_balanced(&legs).map_err(|e| unbalanced_named(p, &e))?;
        Ok(legs)
    }

    /// For a posting that closes a hold with an expiry: that expiry and the hold's legs'
    /// account ids (the hold leaves the index of open expiring holds).
    pub(super) fn closes_expiring(
        &self,
        new: &NewPosting,
    ) -> Result<Option<(OffsetDateTime, Vec<i64>)>, Refusal> {
        let Some(c) = new.closes else {
            return Ok(None);
        };
        let hold = self.named(c.hold)?;
        let Some(at) = hold.hold.and_then(|h| h.expires_at) else {
            return Ok(None);
        };
        let accounts = self.resolved(hold)?.iter().map(|l| l.account_id).collect();
        Ok(Some((at, accounts)))
    }
}
