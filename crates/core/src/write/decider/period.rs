//! The rules of period closes: a close moves the ledger's close forward (never back, never
//! past the time it is recorded), and nothing after it is recorded effective before it but
//! the ledger's own releases of expired holds (effective at their expiry, which the ledger
//! does not choose).

use super::{Decider, Refusal};
use crate::period::{in_future, not_forward, period_closed, PeriodClose, ValidClose};
use crate::write::{PlannedClose, WriteRequest};
use time::OffsetDateTime;

impl Decider<'_> {
    /// Records a close, or refuses it: bound when it does not move the ledger's close
    /// forward, unbound when its period has not ended (the same request is valid later).
    pub(super) fn close(
        &mut self,
        r: &WriteRequest,
        key_id: i64,
        c: &ValidClose,
    ) -> Result<PeriodClose, Refusal> {
        let now = self.now();
        if c.effective_before > now {
            return Err(Refusal::Unbound(in_future(c.effective_before, now)));
        }
        if let Some(before) = self.closed_before.filter(|b| c.effective_before <= *b) {
            return Err(Refusal::Bound(not_forward(c.effective_before, before)));
        }
        let close = PeriodClose {
            effective_before: c.effective_before,
            after_sequence: self.snapshot.clock.last_sequence + self.postings.len() as i64,
            recorded_at: now,
            caller: r.caller.clone(),
            idempotency_key: c.idempotency_key.clone(),
            memo: c.memo.clone(),
        };
        self.closed_before = Some(c.effective_before);
        self.closes.push(PlannedClose {
            close: close.clone(),
            key_id,
        });
        Ok(close)
    }

    /// Refuses (bound) a posting effective before the ledger's close; `None`: effective when
    /// recorded, which is never before it.
    pub(super) fn in_open_period(
        &self,
        effective_at: Option<OffsetDateTime>,
    ) -> Result<(), Refusal> {
        let at = effective_at.unwrap_or(self.now());
        match self.closed_before {
            Some(before) if at < before => Err(Refusal::Bound(period_closed(at, before))),
            _ => Ok(()),
        }
    }
}
