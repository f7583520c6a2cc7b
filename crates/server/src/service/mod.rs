//! The ledger's operations, independent of transport: validation, account lookups, the
//! writer, reads at cut-offs, and the paged List* reads ([`lists`]). The gRPC adapter calls
//! these and only converts. `PostBatch` is in [`batch`].

pub mod batch;
pub mod expiry;
pub mod lists;
pub mod replicas;

use crate::storage::{self, accounts::Created, Pool, StorageError};
use crate::writer::{BatchObserver, Writer, WriterTuning};
use ledger_core::account::AccountCache;
use ledger_core::account::{validate_code, Metadata};
use ledger_core::amount::format_minor;
use ledger_core::hold::CaptureRequest;
use ledger_core::limits::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE};
use ledger_core::posting::{parse_posting_id, validate_idempotency_key, PostRequest, VoidRequest};
use ledger_core::record::{rfc3339, AppliedAsOf, AsOf, Balance, Decided, Posting};
use ledger_core::write::Command;
use ledger_core::{Account, LedgerError, NewAccount, NormalBalance, Reason};
use replicas::Cut;
pub use replicas::Replicas;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// The ledger service.
pub struct Ledger {
    pool: Pool,
    writer: Writer,
    /// Accounts in memory, shared with the writer.
    accounts: Arc<RwLock<AccountCache>>,
    page_key: Vec<u8>,
    /// Hot standbys for as-of reads (`--replica-url`; none by default).
    replicas: Arc<Replicas>,
}

/// A storage failure as `UNAVAILABLE`, whatever it was (no connection to be had: the caller
/// retries). What a read or a write met in the journal is answered by
/// [`StorageError::into_ledger_error`] instead: a corrupt row is `JOURNAL_CORRUPT`.
pub(crate) fn unavailable(e: StorageError) -> LedgerError {
    LedgerError::unavailable(e)
}

/// A page size as requested (0: the default), checked against the limit.
pub fn page_size(requested: u32) -> Result<i64, LedgerError> {
    match requested {
        0 => Ok(i64::from(DEFAULT_PAGE_SIZE)),
        n if n > MAX_PAGE_SIZE => Err(LedgerError::limit(
            "page_size",
            "MAX_PAGE_SIZE",
            MAX_PAGE_SIZE,
            n,
        )),
        n => Ok(i64::from(n)),
    }
}

impl Ledger {
    /// A ledger over a migrated database, reading at cut-offs from `replicas` where they can,
    /// its writer tuned by `writer`, at most `accounts_cached_max` accounts in memory
    /// (`MAX_CACHED_ACCOUNTS`).
    pub async fn new(
        pool: Pool,
        replicas: Arc<Replicas>,
        observer: Option<BatchObserver>,
        writer: WriterTuning,
        accounts_cached_max: usize,
    ) -> Result<Ledger, StorageError> {
        let client = pool.get().await?;
        let page_key = storage::read::page_token_key(&client).await?;
        drop(client);
        let accounts = Arc::new(RwLock::new(AccountCache::new(accounts_cached_max)));
        let writer = Writer::spawn(pool.clone(), accounts.clone(), observer, writer);
        Ok(Ledger {
            pool,
            writer,
            accounts,
            page_key,
            replicas,
        })
    }

    /// The connection pool (health checks, metrics).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    pub(crate) async fn client(&self) -> Result<crate::storage::Conn, LedgerError> {
        self.pool.get().await.map_err(|e| unavailable(e.into()))
    }

    /// Creates an account, or finds the identical one (`created = false`).
    pub async fn create_account(
        &self,
        code: &str,
        currency: &str,
        scale: u32,
        normal_balance: Option<NormalBalance>,
        allow_negative: bool,
        metadata: Metadata,
    ) -> Result<(Account, bool), LedgerError> {
        let new = NewAccount::validate(
            code,
            currency,
            scale,
            normal_balance,
            allow_negative,
            metadata,
        )?;
        let mut client = self.client().await?;
        match storage::accounts::create(&mut client, &new)
            .await
            .map_err(StorageError::into_ledger_error)?
        {
            Created::New(a) => Ok((a, true)),
            Created::Existing(a) => {
                let diff = new.differences(&a);
                if diff.is_empty() {
                    Ok((a, false))
                } else {
                    Err(LedgerError::new(
                        Reason::AccountConflict,
                        format!(
                            "account {:?} already exists with a different {}; attributes are fixed at creation",
                            a.code,
                            diff.join(", ")
                        ),
                    )
                    .with("account", &a.code))
                }
            }
        }
    }

    /// Accounts by code, through the account cache; missing codes are absent from the map,
    /// and an account whose row cannot be read is its refusal (`JOURNAL_CORRUPT`).
    async fn accounts(&self, codes: &[String]) -> Result<HashMap<String, Account>, LedgerError> {
        let found = storage::accounts::get_or_load(&self.accounts, codes, |missing| async move {
            let client = self.pool.get().await?;
            storage::accounts::rows_by_code(&client, &missing).await
        })
        .await
        .map_err(StorageError::into_ledger_error)?;
        found
            .into_iter()
            .map(|(code, a)| a.map(|a| (code, a)))
            .collect()
    }

    /// One account by code.
    pub async fn get_account(&self, code: &str) -> Result<Account, LedgerError> {
        validate_code(code)?;
        self.accounts(&[code.to_owned()])
            .await?
            .remove(code)
            .ok_or_else(|| {
                LedgerError::new(
                    Reason::AccountNotFound,
                    format!("account {code:?} does not exist"),
                )
                .with("account", code)
            })
    }

    /// Records a posting, or returns the decision already made for its key.
    pub async fn post(&self, caller: &str, req: PostRequest) -> Result<Decided, LedgerError> {
        let codes = req.check_shape()?;
        let accounts = self.accounts(&codes).await?;
        let valid = req.validate(&accounts)?;
        self.writer
            .submit(
                ledger_core::ledger::DEFAULT_LEDGER_ID,
                caller.to_owned(),
                Command::Post(valid),
            )
            .await
    }

    /// Records the compensating posting of an earlier one.
    pub async fn void(&self, caller: &str, req: VoidRequest) -> Result<Decided, LedgerError> {
        let valid = req.validate()?;
        self.writer
            .submit(
                ledger_core::ledger::DEFAULT_LEDGER_ID,
                caller.to_owned(),
                Command::Void(valid),
            )
            .await
    }

    /// Captures a hold: moves all of it or less, releases the rest, closes it. The writer's
    /// lane checks it against the hold (read for the whole batch at once).
    pub async fn capture(&self, caller: &str, req: CaptureRequest) -> Result<Decided, LedgerError> {
        let (hold, codes) = req.check_shape()?;
        let accounts = self.accounts(&codes).await?;
        self.writer
            .submit_capture(
                ledger_core::ledger::DEFAULT_LEDGER_ID,
                caller.to_owned(),
                hold,
                req,
                accounts,
            )
            .await
    }

    /// A posting by id, as it is now.
    async fn posting(&self, id: uuid::Uuid) -> Result<Posting, LedgerError> {
        let client = self.client().await?;
        storage::read::posting_by_id(&client, id)
            .await
            .map_err(StorageError::into_ledger_error)?
            .ok_or_else(|| ledger_core::posting::posting_not_found(id))
    }

    /// A posting by id, at a cut-off.
    pub async fn get_posting(&self, posting_id: &str, as_of: AsOf) -> Result<Posting, LedgerError> {
        let id = parse_posting_id(posting_id)?;
        let p = self.posting(id).await?;
        self.at_cut_off(p, as_of).await
    }

    /// `p` as the journal showed it at the cut-off (its void, the state of a hold): none
    /// asked, as it is now; recorded after the cut-off, not found.
    async fn at_cut_off(&self, p: Posting, as_of: AsOf) -> Result<Posting, LedgerError> {
        if as_of == AsOf::default() {
            return Ok(p);
        }
        let at = self.resolve(as_of).await?;
        if p.sequence > at.sequence {
            return Err(LedgerError::new(
                Reason::PostingNotFound,
                format!(
                    "posting {} was recorded at {}, after the cut-off (recorded {}, sequence {})",
                    p.posting_id,
                    rfc3339(p.recorded_at),
                    rfc3339(at.recorded_at),
                    at.sequence
                ),
            )
            .with("posting_id", p.posting_id));
        }
        let client = self.client().await?;
        let mut then = storage::read::postings_at(&client, &[p.sequence as i64], Some(&at))
            .await
            .map_err(StorageError::into_ledger_error)?;
        Ok(then.pop().expect("the posting exists"))
    }

    /// A posting by the caller's idempotency key (a key decided as a rejection answers with it).
    pub async fn get_posting_by_key(
        &self,
        caller: &str,
        key: &str,
        as_of: AsOf,
    ) -> Result<Posting, LedgerError> {
        validate_idempotency_key(key)?;
        let client = self.client().await?;
        let found = storage::read::posting_by_key(&client, caller, key)
            .await
            .map_err(StorageError::into_ledger_error)?;
        drop(client);
        match found {
            Some(Ok(p)) => self.at_cut_off(p, as_of).await,
            Some(Err(rejected)) => Err(LedgerError::new(
                Reason::PostingNotFound,
                format!("idempotency key {key:?} made no posting: it was rejected with {rejected}"),
            )
            .with("idempotency_key", key)),
            None => Err(LedgerError::new(
                Reason::PostingNotFound,
                format!("no posting has idempotency key {key:?} for caller {caller:?}"),
            )
            .with("idempotency_key", key)),
        }
    }

    pub(crate) async fn resolve(&self, as_of: AsOf) -> Result<AppliedAsOf, LedgerError> {
        let mut client = self.client().await?;
        storage::read::resolve_as_of(&mut client, as_of)
            .await
            .map_err(StorageError::into_ledger_error)?
    }

    /// An account's balance at a cut-off.
    pub async fn get_balance(&self, account: &str, as_of: AsOf) -> Result<Balance, LedgerError> {
        let account = self.get_account(account).await?;
        let read = replicas::at_read(move |c, at| {
            let account = account.clone();
            Box::pin(async move {
                storage::read::balances(c, std::slice::from_ref(&account), at)
                    .await
                    .map_err(StorageError::into_ledger_error)
            })
        });
        let (_, mut b) = self.read_at(Cut::Requested(as_of), read).await?;
        Ok(b.pop().expect("one balance"))
    }
}

/// Renders minor units at a scale (re-exported for adapters).
pub fn render(minor: i128, scale: u8) -> String {
    format_minor(minor, scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unavailable_answers_unavailable_for_every_storage_failure_and_a_read_says_journal_corrupt_for_a_corrupt_row(
    ) {
        let failures = [
            StorageError::Pool("timed out waiting for a connection".into()),
            StorageError::Config("no host".into()),
            StorageError::corrupt_posting(7, "no legs"),
            StorageError::corrupt_account("a:b", "negative totals"),
        ];
        for e in failures {
            let shown = e.to_string();
            let answer = unavailable(e);
            assert_eq!(answer.reason, Reason::StorageUnavailable, "{shown}");
            assert!(answer.message.contains(&shown), "{}", answer.message);
        }
        let read = StorageError::corrupt_posting(7, "no legs").into_ledger_error();
        assert_eq!(read.reason, Reason::JournalCorrupt);
        assert_eq!(read.metadata["sequence"], "7");
    }
}
