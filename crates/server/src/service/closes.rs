//! Period closes: `ClosePeriod` goes through the ledger's writer (decided in its sequence
//! order, like a posting); its trial balance at the cut-off is then recorded once (an as-of
//! answer, which never changes), with the digest at the close's sequence.

use super::lists::{add_balance, currency_totals, Sums};
use super::Ledger;
use crate::storage::{self, closes::Listed, StorageError};
use ledger_core::ledger::{self, Ledger as Book};
use ledger_core::limits::MAX_PAGE_SIZE;
use ledger_core::period::{PeriodClose, ValidClose};
use ledger_core::record::{AppliedAsOf, Balance, CurrencyTotal};
use ledger_core::write::Command;
use ledger_core::LedgerError;
use time::Duration;

/// A close's trial balance: how many accounts, per currency and scale (as `ListBalances`
/// totals them), and the digest (size, root) at its sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrialBalance {
    pub accounts: u64,
    pub totals: Vec<CurrencyTotal>,
    pub digest: (u64, [u8; 32]),
}

/// The cut-off a close's trial balance is at: as recorded when the close was, through its
/// sequence, on the effective clock just before `effective_before`.
pub fn cut_off(c: &PeriodClose) -> AppliedAsOf {
    AppliedAsOf {
        recorded_at: c.recorded_at,
        effective_at: c.effective_before - Duration::microseconds(1),
        sequence: c.after_sequence as u64,
    }
}

impl Ledger {
    /// Records a close of `book`'s period before `close.effective_before`, and its trial
    /// balance; a replay of the key answers the close it recorded.
    pub async fn close_period(
        &self,
        book: &Book,
        caller: &str,
        close: ValidClose,
    ) -> Result<(PeriodClose, TrialBalance, bool), LedgerError> {
        let (c, replayed) = self
            .writer
            .submit(book.id, caller.to_owned(), Command::Close(close))
            .await?
            .closed();
        let tb = self.trial_balance(book, &c).await?;
        Ok((c, tb, replayed))
    }

    /// `book`'s closes after the one before `after`, oldest first, each with its trial balance
    /// (recorded now for one whose recording was interrupted).
    pub async fn period_closes(
        &self,
        book: &Book,
        after: Option<time::OffsetDateTime>,
        limit: i64,
    ) -> Result<Vec<(PeriodClose, TrialBalance)>, LedgerError> {
        let client = self.client_of(book).await?;
        let listed = storage::closes::list(&client, book.id, after, limit)
            .await
            .map_err(StorageError::into_ledger_error)?;
        drop(client);
        let mut out = Vec::with_capacity(listed.len());
        for Listed {
            close,
            trial_balance,
        } in listed
        {
            let tb = match trial_balance.and_then(|t| stored(&t)) {
                Some(tb) => tb,
                None => self.trial_balance(book, &close).await?,
            };
            out.push((close, tb));
        }
        Ok(out)
    }

    /// The trial balance of a close, recorded if it is not yet.
    async fn trial_balance(
        &self,
        book: &Book,
        c: &PeriodClose,
    ) -> Result<TrialBalance, LedgerError> {
        let at = cut_off(c);
        let (ids, balances) = self.all_balances(book, &at).await?;
        let size = ledger::in_ledger(c.after_sequence) as u64;
        let digest = self.digest(book, Some(size)).await?;
        let tb = TrialBalance {
            accounts: balances.len() as u64,
            totals: totals(&balances)?,
            digest: (size, digest.root),
        };
        let json = totals_json(&tb.totals);
        let mut client = self.client_of(book).await?;
        storage::closes::record_trial_balance(
            &mut client,
            (book.id, c.effective_before),
            (&ids, &balances),
            (json, (size as i64, digest.root.to_vec())),
        )
        .await
        .map_err(StorageError::into_ledger_error)?;
        Ok(tb)
    }

    /// Every account with a leg by the cut-off and its balance there, in code order, a page
    /// of accounts at a time.
    async fn all_balances(
        &self,
        book: &Book,
        at: &AppliedAsOf,
    ) -> Result<(Vec<i64>, Vec<Balance>), LedgerError> {
        let client = self.client_of(book).await?;
        let (mut ids, mut out, mut after) = (Vec::new(), Vec::new(), None::<String>);
        loop {
            let page = storage::read::accounts_with_legs(
                &client,
                book.id,
                "",
                after.as_deref(),
                at.sequence as i64,
                i64::from(MAX_PAGE_SIZE),
            )
            .await
            .map_err(StorageError::into_ledger_error)?;
            let balances = storage::read::balances(&client, &page, at)
                .await
                .map_err(StorageError::into_ledger_error)?;
            ids.extend(page.iter().map(|a| a.id));
            out.extend(balances);
            match page.last() {
                Some(a) if page.len() == MAX_PAGE_SIZE as usize => after = Some(a.code.clone()),
                _ => return Ok((ids, out)),
            }
        }
    }
}

/// A close's trial balance totals, summed as `ListBalances` sums them.
fn totals(balances: &[Balance]) -> Result<Vec<CurrencyTotal>, LedgerError> {
    let mut sums = Sums::new();
    for b in balances {
        add_balance(&mut sums, b)?;
    }
    Ok(currency_totals(sums))
}

/// Totals as stored: minor units as strings, with the scale.
fn totals_json(totals: &[CurrencyTotal]) -> serde_json::Value {
    totals
        .iter()
        .map(|t| {
            serde_json::json!({
                "currency": t.currency, "scale": t.scale,
                "debits": t.debits.to_string(), "credits": t.credits.to_string(),
                "held_debits": t.held_debits.to_string(), "held_credits": t.held_credits.to_string(),
            })
        })
        .collect()
}

fn total_of(v: &serde_json::Value) -> Option<CurrencyTotal> {
    let minor = |k: &str| v.get(k)?.as_str()?.parse::<i128>().ok();
    Some(CurrencyTotal {
        currency: v.get("currency")?.as_str()?.to_owned(),
        scale: u8::try_from(v.get("scale")?.as_u64()?).ok()?,
        debits: minor("debits")?,
        credits: minor("credits")?,
        held_debits: minor("held_debits")?,
        held_credits: minor("held_credits")?,
    })
}

/// A trial balance as stored; `None` when its row cannot be read (then it is recomputed:
/// the answer at the cut-off is the same).
fn stored(
    (accounts, totals, size, root): &(i64, serde_json::Value, i64, Vec<u8>),
) -> Option<TrialBalance> {
    Some(TrialBalance {
        accounts: u64::try_from(*accounts).ok()?,
        totals: totals
            .as_array()?
            .iter()
            .map(total_of)
            .collect::<Option<_>>()?,
        digest: (
            u64::try_from(*size).ok()?,
            <[u8; 32]>::try_from(root.as_slice()).ok()?,
        ),
    })
}
