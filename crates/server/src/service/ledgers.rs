//! Ledgers: which one a request names (and whether its caller may use it), and the
//! CreateLedger, GetLedger and ListLedgers operations.

use super::{page_size, unavailable, Ledger};
use crate::storage::{self, ledgers::Created, StorageError};
use ledger_core::ledger::{self, Grants, Ledger as Book, NewLedger};
use ledger_core::page_token::{self, Writer};
use ledger_core::{LedgerError, Metadata, Reason};
use std::collections::HashMap;
use std::sync::RwLock;

/// Ledgers held in memory by code (limit MAX_CACHED_LEDGERS): a ledger never changes once
/// created, so an entry never goes stale; when full the cache is emptied and refills.
pub const MAX_CACHED_LEDGERS: usize = 100_000;

/// The ledgers found so far, by code.
#[derive(Default)]
pub struct Directory {
    by_code: RwLock<HashMap<String, Book>>,
}

impl Directory {
    /// A directory holding these ledgers (at most MAX_CACHED_LEDGERS of them).
    pub fn of(known: Vec<Book>) -> Directory {
        let by_code = known
            .into_iter()
            .take(MAX_CACHED_LEDGERS)
            .map(|b| (b.code.clone(), b))
            .collect();
        Directory {
            by_code: RwLock::new(by_code),
        }
    }

    fn get(&self, code: &str) -> Option<Book> {
        self.by_code
            .read()
            .expect("ledger cache lock")
            .get(code)
            .cloned()
    }

    fn keep(&self, book: &Book) {
        let mut cache = self.by_code.write().expect("ledger cache lock");
        if cache.len() >= MAX_CACHED_LEDGERS {
            cache.clear();
        }
        cache.insert(book.code.clone(), book.clone());
    }
}

impl Ledger {
    /// The ledger a request's `ledger` field names (empty: `default`), if the caller is granted
    /// it and it exists. A caller not granted it gets `LEDGER_NOT_GRANTED` whether or not it
    /// exists; only a caller granted every ledger learns that one does not (`LEDGER_NOT_FOUND`).
    pub async fn ledger_for(&self, grants: &Grants, field: &str) -> Result<Book, LedgerError> {
        let code = ledger::requested(field)?;
        if !grants.allows(code) {
            return Err(grants.refusal(code));
        }
        if let Some(book) = self.ledgers.get(code) {
            return Ok(book);
        }
        let client = self.client().await?;
        let found = storage::ledgers::get(&client, code)
            .await
            .map_err(StorageError::into_ledger_error)?;
        let book = found.ok_or_else(|| grants.refusal(code))?;
        self.settle_placement(&book).await?;
        Ok(book)
    }

    /// Makes sure the ledger's own cluster has its rows (a create stopped after the
    /// directory's commit left them out; this finishes it, idempotently), then routes it there.
    async fn settle_placement(&self, book: &Book) -> Result<(), LedgerError> {
        if book.cluster != ledger::MAIN_CLUSTER {
            let Some(target) = self.clusters.named(&book.cluster) else {
                return Err(unavailable(StorageError::Pool(format!(
                    "ledger {:?} is on cluster {:?}, which this server was not started with (serve --cluster NAME=URL)",
                    book.code, book.cluster
                ))));
            };
            let mut on_target = target.get().await.map_err(|e| unavailable(e.into()))?;
            storage::ledgers::ensure_placed(&mut on_target, book)
                .await
                .map_err(StorageError::into_ledger_error)?;
        }
        self.clusters.place(book.id, &book.cluster);
        self.ledgers.keep(book);
        Ok(())
    }

    /// Creates a ledger, or finds the identical one (`created = false`); one with the same
    /// code and other attributes is `LEDGER_CONFLICT`. The caller must be granted the code.
    pub async fn create_ledger(
        &self,
        grants: &Grants,
        code: &str,
        description: &str,
        metadata: Metadata,
        cluster: &str,
    ) -> Result<(Book, bool), LedgerError> {
        let new = NewLedger::validate(code, description, metadata, cluster)?;
        if !grants.allows(&new.code) {
            return Err(grants.refusal(&new.code));
        }
        if self.clusters.named(&new.cluster).is_none() {
            return Err(LedgerError::new(
                Reason::InvalidField,
                format!(
                    "cluster {:?} is not one this server was started with (it has {}; serve --cluster NAME=URL adds one)",
                    new.cluster,
                    self.clusters.names().join(", ")
                ),
            )
            .with("field", "cluster"));
        };
        let mut client = self.client().await?;
        let created = storage::ledgers::create(&mut client, &new)
            .await
            .map_err(StorageError::into_ledger_error)?;
        let (book, fresh) = match created {
            Created::New(b) => (b, true),
            Created::Existing(b) if new.differences(&b).is_empty() => (b, false),
            Created::Existing(b) => return Err(new.conflict(&b)),
        };
        drop(client);
        // The directory's commit came first: a create stopped here is finished by its retry
        // or by the ledger's first use on any server.
        self.settle_placement(&book).await?;
        Ok((book, fresh))
    }

    /// One ledger by code (not empty).
    pub async fn get_ledger(&self, grants: &Grants, code: &str) -> Result<Book, LedgerError> {
        ledger::validate_ledger_code(code).map_err(|e| e.with("field", "code"))?;
        self.ledger_for(grants, code).await
    }

    /// The ledgers the caller is granted, in code order, a page at a time.
    pub async fn list_ledgers(
        &self,
        grants: &Grants,
        size: u32,
        token: &str,
    ) -> Result<(Vec<Book>, String), LedgerError> {
        let limit = page_size(size)?;
        let scope = "ledgers";
        let after = match token {
            "" => None,
            t => {
                let mut r = page_token::open(&self.page_key, scope, t)?;
                let code = r.text()?;
                r.finish()?;
                Some(code)
            }
        };
        let only: Option<Vec<String>> = match grants {
            Grants::All => None,
            Grants::Only(codes) => Some(codes.iter().cloned().collect()),
        };
        let client = self.client().await?;
        let mut page =
            storage::ledgers::list(&client, after.as_deref(), only.as_deref(), limit + 1)
                .await
                .map_err(StorageError::into_ledger_error)?;
        let more = page.len() as i64 > limit;
        page.truncate(limit as usize);
        let next = match page.last() {
            Some(last) if more => Writer::new().text(&last.code).seal(&self.page_key, scope),
            _ => String::new(),
        };
        Ok((page, next))
    }
}
