//! The rules of account versions and of conditions: an update records the next version of
//! an account's terms (which the postings decided after it obey); a condition refuses a
//! posting unless the account is still as the caller read it.

use super::{Decider, Refusal};
use crate::account::Account;
use crate::amount::format_minor;
use crate::engine::insufficient;
use crate::error::{LedgerError, Reason};
use crate::ledger;
use crate::posting::{Check, Condition};
use crate::terms::ceiling_exceeded;
use crate::terms::{AccountStatus, AccountVersion, Terms, ValidUpdate};
use crate::write::{PlannedVersion, WriteRequest};

impl Decider<'_> {
    /// Records the next version of an account's terms, or refuses it (bound): the account is
    /// closed, its version is not the one expected, or the new terms do not fit its state
    /// (closing with a balance or holds, a floor above what is available, a ceiling below the
    /// balance).
    pub(super) fn update(
        &mut self,
        r: &WriteRequest,
        key_id: i64,
        u: &ValidUpdate,
    ) -> Result<AccountVersion, Refusal> {
        if let Some(e) = self.corrupt_accounts.get(&u.account_id) {
            return Err(Refusal::Unbound(e.clone()));
        }
        let (account, terms) = self.terms_of(u.account_id)?;
        let account = account.clone();
        if terms.status == AccountStatus::Closed {
            return Err(Refusal::Bound(closed(&account.code)));
        }
        if terms.version != u.expected_version {
            return Err(Refusal::Bound(mismatch(
                &account.code,
                terms.version,
                u.expected_version,
            )));
        }
        let next = u.change.apply(terms);
        self.fits(&account, &next).map_err(Refusal::Bound)?;
        let version = AccountVersion {
            account_id: u.account_id,
            terms: next.clone(),
            after_sequence: self.last_sequence(),
            recorded_at: self.now(),
            caller: r.caller.clone(),
            idempotency_key: u.idempotency_key.clone(),
            reason: u.reason.clone(),
            changed: u.change.changed(),
        };
        self.engine.set_terms(u.account_id, next);
        let last = self.snapshot.accounts[&u.account_id].last_sequence;
        self.touched.entry(u.account_id).or_insert(last);
        self.versions.push(PlannedVersion {
            version: version.clone(),
            key_id,
        });
        Ok(version)
    }

    /// The account and its terms in force, as the batch has them.
    fn terms_of(&self, id: i64) -> Result<(&Account, &Terms), Refusal> {
        let state = self.snapshot.accounts.get(&id);
        match (state, self.engine.terms(id)) {
            (Some(s), Some(t)) => Ok((&s.account, t)),
            _ => Err(not_loaded(id)),
        }
    }

    /// The last stored sequence decided so far (the batch's postings included).
    fn last_sequence(&self) -> i64 {
        self.snapshot.clock.last_sequence + self.postings.len() as i64
    }

    /// New terms fit the account's state now: closed only empty, the available balance at
    /// or above the floor, the balance (with the holds that would raise it) at or below the
    /// ceiling.
    fn fits(&self, a: &Account, next: &Terms) -> Result<(), LedgerError> {
        let t = self.engine.totals(a.id).unwrap_or_default();
        if next.status == AccountStatus::Closed {
            let balance = t.balance(a.normal_balance);
            if balance != 0 || t.held_debits != 0 || t.held_credits != 0 {
                return Err(not_empty(a, balance, t.held_debits + t.held_credits));
            }
        }
        let available = self.engine.available_now(a.id).unwrap_or_default();
        if let Some(floor) = next.floor.filter(|f| available < *f) {
            let balance = t.balance(a.normal_balance);
            return Err(insufficient(a, floor, (balance, available), available));
        }
        let raised = self.engine.raised(a, &t);
        if let Some(ceiling) = next.ceiling.filter(|c| raised > *c) {
            return Err(ceiling_exceeded(a, ceiling, raised, raised));
        }
        Ok(())
    }

    /// Every condition of a posting holds now, or it is refused (bound) naming the first
    /// that does not.
    pub(super) fn conditions(&self, conditions: &[Condition]) -> Result<(), Refusal> {
        for (i, c) in conditions.iter().enumerate() {
            let Some(state) = self.snapshot.accounts.get(&c.account_id) else {
                return Err(not_loaded(c.account_id));
            };
            let a = &state.account;
            let failed = match c.check {
                Check::LastSequence(n) => {
                    let stored = self
                        .touched
                        .get(&c.account_id)
                        .copied()
                        .unwrap_or(state.last_sequence);
                    let last = ledger::in_ledger(stored) as u64;
                    (last != n).then(|| format!("its last posting is sequence {last}, not {n}"))
                }
                Check::AvailableAtLeast(m) => {
                    let available = self.engine.available_now(c.account_id).unwrap_or_default();
                    (available < m).then(|| {
                        format!(
                            "its available balance is {} {cur}, less than {} {cur}",
                            format_minor(available, a.scale),
                            format_minor(m, a.scale),
                            cur = a.currency
                        )
                    })
                }
            };
            if let Some(why) = failed {
                let e = LedgerError::new(
                    Reason::ConditionFailed,
                    format!("condition {i} on account {} does not hold: {why}", a.code),
                )
                .with("account", &a.code)
                .with("field", format!("conditions[{i}]"));
                return Err(Refusal::Bound(e));
            }
        }
        Ok(())
    }
}

/// A request naming an account the batch did not load: it binds nothing.
fn not_loaded(id: i64) -> Refusal {
    Refusal::Unbound(LedgerError::journal_corrupt(
        &format!("account #{id}"),
        None,
        "a request names it, but the batch did not load it",
    ))
}

fn closed(code: &str) -> LedgerError {
    LedgerError::new(
        Reason::AccountClosed,
        format!("account {code} is closed, which is final: it takes no update"),
    )
    .with("account", code)
}

fn mismatch(code: &str, current: i64, expected: i64) -> LedgerError {
    LedgerError::new(
        Reason::AccountVersionMismatch,
        format!("account {code} is at version {current}, not the expected_version {expected}: read it again and decide again"),
    )
    .with("account", code)
    .with("version", current)
}

fn not_empty(a: &Account, balance: i128, held: i128) -> LedgerError {
    LedgerError::new(
        Reason::AccountNotEmpty,
        format!(
            "account {} has a balance of {} {cur} and holds {} {cur}: only an account with zero balance and nothing held closes",
            a.code,
            format_minor(balance, a.scale),
            format_minor(held, a.scale),
            cur = a.currency
        ),
    )
    .with("account", &a.code)
}
