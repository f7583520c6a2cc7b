//! The ledger's operations, independent of transport: validation, account lookups, the
//! writer, reads at cut-offs, and the paged List* reads ([`lists`]). The gRPC adapter calls
//! these and only converts. `PostBatch` is in [`batch`].

pub mod batch;
pub mod closes;
pub mod expiry;
pub mod journal;
pub mod ledgers;
pub mod lists;
pub mod replicas;
pub mod rollups;

use crate::storage::{self, accounts::Created, clusters::Clusters, Pool, StorageError};
use crate::writer::{BatchObserver, Writer, WriterTuning};
use ledger_core::account::validate_code;
use ledger_core::account::AccountCache;
use ledger_core::amount::format_minor;
use ledger_core::hold::CaptureRequest;
use ledger_core::ledger::Ledger as Book;
use ledger_core::limits::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE};
use ledger_core::posting::{parse_posting_id, validate_idempotency_key, PostRequest, VoidRequest};
use ledger_core::record::{rfc3339, AppliedAsOf, AsOf, Balance, Decided, Posting};
use ledger_core::terms::{AccountVersion, UpdateRequest};
use ledger_core::write::Command;
use ledger_core::write::Written;
use ledger_core::{Account, LedgerError, NewAccount, Reason};
use replicas::Cut;
pub use replicas::Replicas;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// The ledger service.
pub struct Ledger {
    /// The cluster `main` (the directory) and the others (`--cluster`), and which holds each
    /// ledger, shared with the writer.
    clusters: Arc<Clusters>,
    writer: Writer,
    /// Accounts in memory, shared with the writer.
    accounts: Arc<RwLock<AccountCache>>,
    page_key: Vec<u8>,
    /// Hot standbys for as-of reads (`--replica-url`; none by default).
    replicas: Arc<Replicas>,
    /// Ledgers by code, as found (they never change).
    ledgers: ledgers::Directory,
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

/// The version a `ListAccountVersions` token says its page follows (none: the first page).
fn versions_after(token: &str) -> Result<i64, LedgerError> {
    if token.is_empty() {
        return Ok(0);
    }
    token.parse::<i64>().ok().filter(|v| *v > 0).ok_or_else(|| {
        LedgerError::new(
            Reason::InvalidPageToken,
            "page_token is not a token ListAccountVersions gave: send next_page_token unchanged",
        )
        .with("field", "page_token")
    })
}

impl Ledger {
    /// A ledger over a migrated database, reading at cut-offs from `replicas` where they can,
    /// its writer tuned by `writer`, at most `accounts_cached_max` accounts in memory
    /// (`MAX_CACHED_ACCOUNTS`).
    pub async fn new(
        clusters: Arc<Clusters>,
        replicas: Arc<Replicas>,
        observer: Option<BatchObserver>,
        writer: WriterTuning,
        accounts_cached_max: usize,
    ) -> Result<Ledger, StorageError> {
        let client = clusters.main().get().await?;
        let page_key = storage::read::page_token_key(&client).await?;
        // The ledgers known now, so the first calls do not each look theirs up.
        let known =
            storage::ledgers::list(&client, None, None, ledgers::MAX_CACHED_LEDGERS as i64).await?;
        drop(client);
        // Those on other clusters are left to their first use, which makes sure their cluster
        // has their rows (`Ledger::ledger_for`).
        let known: Vec<_> = known
            .into_iter()
            .filter(|l| l.cluster == ledger_core::ledger::MAIN_CLUSTER)
            .collect();
        let accounts = Arc::new(RwLock::new(AccountCache::new(accounts_cached_max)));
        let writer = Writer::spawn(clusters.clone(), accounts.clone(), observer, writer);
        Ok(Ledger {
            clusters,
            writer,
            accounts,
            page_key,
            replicas,
            ledgers: ledgers::Directory::of(known),
        })
    }

    /// The pool of the cluster `main` (health checks, metrics).
    pub fn pool(&self) -> &Pool {
        self.clusters.main()
    }

    /// The clusters and the ledgers' placements.
    pub fn clusters(&self) -> &Arc<Clusters> {
        &self.clusters
    }

    /// A connection to the cluster `main`, which holds the directory of ledgers.
    pub(crate) async fn client(&self) -> Result<crate::storage::Conn, LedgerError> {
        self.pool().get().await.map_err(|e| unavailable(e.into()))
    }

    /// The pool of the cluster holding `book`'s journal; `UNAVAILABLE` naming it when this
    /// server was not started with that cluster.
    pub(crate) fn pool_of(&self, book: &Book) -> Result<&Pool, LedgerError> {
        self.clusters.named(&book.cluster).ok_or_else(|| {
            LedgerError::new(
                Reason::StorageUnavailable,
                format!(
                    "ledger {:?} is on the cluster {:?}, which this server was not started with (serve --cluster {}=URL; it has {})",
                    book.code,
                    book.cluster,
                    book.cluster,
                    self.clusters.names().join(", ")
                ),
            )
            .with("cluster", &book.cluster)
        })
    }

    /// A connection to the cluster holding `book`'s journal (`UNAVAILABLE` when it cannot
    /// be had: that cluster is down, and only its ledgers wait).
    pub(crate) async fn client_of(&self, book: &Book) -> Result<crate::storage::Conn, LedgerError> {
        self.pool_of(book)?
            .get()
            .await
            .map_err(|e| unavailable(e.into()))
    }

    /// Creates an account (validated) in `book`, or finds the identical one (`created = false`).
    pub async fn create_account(
        &self,
        book: &Book,
        new: NewAccount,
    ) -> Result<(Account, bool), LedgerError> {
        let mut client = self.client_of(book).await?;
        match storage::accounts::create(&mut client, book.id, &new)
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

    /// Accounts of `book` by code, through the account cache; missing codes (an account of
    /// another ledger is missing) are absent from the map, and an account whose row cannot be
    /// read is its refusal (`JOURNAL_CORRUPT`).
    async fn accounts(
        &self,
        book: &Book,
        codes: &[String],
    ) -> Result<HashMap<String, Account>, LedgerError> {
        let keys: Vec<(ledger_core::ledger::LedgerId, String)> =
            codes.iter().map(|c| (book.id, c.clone())).collect();
        let pool = self.pool_of(book)?;
        let found = storage::accounts::get_or_load(&self.accounts, &keys, |missing| async move {
            let client = pool.get().await?;
            storage::accounts::rows_by_code(&client, &missing).await
        })
        .await
        .map_err(StorageError::into_ledger_error)?;
        found
            .into_iter()
            .map(|((_, code), a)| a.map(|a| (code, a)))
            .collect()
    }

    /// One account of `book` by code.
    pub async fn get_account(&self, book: &Book, code: &str) -> Result<Account, LedgerError> {
        validate_code(code)?;
        self.accounts(book, &[code.to_owned()])
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

    /// Records a posting in `book`, or returns the decision already made for its key.
    pub async fn post(
        &self,
        book: &Book,
        caller: &str,
        req: PostRequest,
    ) -> Result<Decided, LedgerError> {
        let codes = req.check_shape()?;
        let accounts = self.accounts(book, &codes).await?;
        let valid = req.validate(&accounts)?;
        self.writer
            .submit(book.id, caller.to_owned(), Command::Post(valid))
            .await
            .map(Written::posted)
    }

    /// Records the next version of an account's terms in `book` (decided by the writer in
    /// the ledger's order), or returns the decision already made for its key: the account,
    /// the version, and whether it was replayed.
    pub async fn update_account(
        &self,
        book: &Book,
        caller: &str,
        req: UpdateRequest,
    ) -> Result<(Account, AccountVersion, bool), LedgerError> {
        let account = self.get_account(book, &req.code).await?;
        let valid = req.validate(&account)?;
        let (version, replayed) = self
            .writer
            .submit(book.id, caller.to_owned(), Command::Update(Box::new(valid)))
            .await?
            .updated();
        Ok((account, version, replayed))
    }

    /// An account of `book` with the version of its terms in force at the cut-off (now when
    /// none is given): a version takes effect when recorded, on both clocks.
    pub async fn get_account_version(
        &self,
        book: &Book,
        code: &str,
        as_of: AsOf,
    ) -> Result<(Account, AccountVersion), LedgerError> {
        validate_code(code)?;
        // A cut-off is resolved as every as-of read's is (refused in the future, fenced
        // after a batch in flight): a version moves the recorded clock like a posting, so
        // the answer at a resolved cut-off is final.
        let at = if as_of == AsOf::default() {
            None
        } else {
            let applied = self.resolve(book, as_of).await?;
            Some(applied.recorded_at.min(applied.effective_at))
        };
        let client = self.client_of(book).await?;
        storage::terms::get_as_of(&client, book.id, code, at)
            .await
            .map_err(StorageError::into_ledger_error)?
            .ok_or_else(|| {
                LedgerError::new(
                    Reason::AccountNotFound,
                    format!("account {code:?} does not exist at the cut-off"),
                )
                .with("account", code)
            })
    }

    /// The version in force now of each account, by id.
    pub async fn current_versions(
        &self,
        accounts: &[Account],
    ) -> Result<HashMap<i64, AccountVersion>, LedgerError> {
        let Some(ledger) = accounts.first().map(|a| a.ledger) else {
            return Ok(HashMap::new());
        };
        let pool = self.clusters.pool_of(ledger).ok_or_else(|| {
            LedgerError::new(
                Reason::StorageUnavailable,
                "the cluster of these accounts' ledger is not one this server was started with",
            )
        })?;
        let client = pool.get().await.map_err(|e| unavailable(e.into()))?;
        storage::terms::current_versions(&client, accounts)
            .await
            .map_err(StorageError::into_ledger_error)
    }

    /// A page of an account's versions, oldest first, and the token of the next page (empty
    /// on the last). The token is the last version of the page before: a number, which shows
    /// nothing beyond what any caller of the account may list.
    pub async fn account_versions(
        &self,
        book: &Book,
        code: &str,
        requested: u32,
        token: &str,
    ) -> Result<(Account, Vec<AccountVersion>, String), LedgerError> {
        let after = versions_after(token)?;
        let size = page_size(requested).map_err(|e| e.with("field", "page_size"))?;
        let account = self.get_account(book, code).await?;
        let client = self.client_of(book).await?;
        let versions = storage::terms::list_versions(&client, &account, after, size)
            .await
            .map_err(StorageError::into_ledger_error)?;
        let next = match versions.last() {
            Some(v) if versions.len() as i64 == size => v.terms.version.to_string(),
            _ => String::new(),
        };
        Ok((account, versions, next))
    }

    /// Records the compensating posting of an earlier one (of the same ledger).
    pub async fn void(
        &self,
        book: &Book,
        caller: &str,
        req: VoidRequest,
    ) -> Result<Decided, LedgerError> {
        let valid = req.validate()?;
        self.writer
            .submit(book.id, caller.to_owned(), Command::Void(valid))
            .await
            .map(Written::posted)
    }

    /// Captures a hold: moves all of it or less, releases the rest, closes it. The writer's
    /// lane checks it against the hold (read for the whole batch at once).
    pub async fn capture(
        &self,
        book: &Book,
        caller: &str,
        req: CaptureRequest,
    ) -> Result<Decided, LedgerError> {
        let (hold, codes) = req.check_shape()?;
        let accounts = self.accounts(book, &codes).await?;
        self.writer
            .submit_capture(book.id, caller.to_owned(), hold, req, accounts)
            .await
            .map(Written::posted)
    }

    /// A posting of `book` by id, as it is now.
    async fn posting(&self, book: &Book, id: uuid::Uuid) -> Result<Posting, LedgerError> {
        let client = self.client_of(book).await?;
        storage::read::posting_by_id(&client, book.id, id)
            .await
            .map_err(StorageError::into_ledger_error)?
            .ok_or_else(|| ledger_core::posting::posting_not_found(id))
    }

    /// A posting by id, at a cut-off.
    pub async fn get_posting(
        &self,
        book: &Book,
        posting_id: &str,
        as_of: AsOf,
    ) -> Result<Posting, LedgerError> {
        let id = parse_posting_id(posting_id)?;
        let p = self.posting(book, id).await?;
        self.at_cut_off(book, p, as_of).await
    }

    /// `p` as the journal showed it at the cut-off (its void, the state of a hold): none
    /// asked, as it is now; recorded after the cut-off, not found.
    async fn at_cut_off(
        &self,
        book: &Book,
        p: Posting,
        as_of: AsOf,
    ) -> Result<Posting, LedgerError> {
        if as_of == AsOf::default() {
            return Ok(p);
        }
        let at = self.resolve(book, as_of).await?;
        if p.sequence > at.sequence {
            return Err(LedgerError::new(
                Reason::PostingNotFound,
                format!(
                    "posting {} was recorded at {}, after the cut-off (recorded {}, sequence {})",
                    p.posting_id,
                    rfc3339(p.recorded_at),
                    rfc3339(at.recorded_at),
                    ledger_core::ledger::in_ledger(at.sequence as i64)
                ),
            )
            .with("posting_id", p.posting_id));
        }
        let client = self.client_of(book).await?;
        let mut then = storage::read::postings_at(&client, &[p.sequence as i64], Some(&at))
            .await
            .map_err(StorageError::into_ledger_error)?;
        Ok(then.pop().expect("the posting exists"))
    }

    /// A posting by the caller's idempotency key (a key decided as a rejection answers with it).
    pub async fn get_posting_by_key(
        &self,
        book: &Book,
        caller: &str,
        key: &str,
        as_of: AsOf,
    ) -> Result<Posting, LedgerError> {
        validate_idempotency_key(key)?;
        let client = self.client_of(book).await?;
        let found = storage::read::posting_by_key(&client, book.id, caller, key)
            .await
            .map_err(StorageError::into_ledger_error)?;
        drop(client);
        match found {
            Some(Ok(p)) => self.at_cut_off(book, p, as_of).await,
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

    pub(crate) async fn resolve(
        &self,
        book: &Book,
        as_of: AsOf,
    ) -> Result<AppliedAsOf, LedgerError> {
        let mut client = self.client_of(book).await?;
        storage::read::resolve_as_of(&mut client, book.id, as_of)
            .await
            .map_err(StorageError::into_ledger_error)?
    }

    /// An account's balance at a cut-off.
    pub async fn get_balance(
        &self,
        book: &Book,
        account: &str,
        as_of: AsOf,
    ) -> Result<Balance, LedgerError> {
        let account = self.get_account(book, account).await?;
        let read = replicas::at_read(move |c, at| {
            let account = account.clone();
            Box::pin(async move {
                storage::read::balances(c, std::slice::from_ref(&account), at)
                    .await
                    .map_err(StorageError::into_ledger_error)
            })
        });
        let (_, mut b) = self.read_at(book, Cut::Requested(as_of), read).await?;
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
