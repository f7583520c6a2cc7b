//! The ledger's operations, independent of transport: validation, account lookups, the
//! writer, reads at cut-offs, pagination. The gRPC adapter calls these and only converts.

use crate::domain::account::{validate_code, validate_prefix, Metadata};
use crate::domain::amount::format_minor;
use crate::domain::limits::{DEFAULT_PAGE_SIZE, MAX_LEGS, MAX_PAGE_SIZE};
use crate::domain::page_token;
use crate::domain::posting::{
    parse_posting_id, validate_idempotency_key, PostRequest, VoidRequest,
};
use crate::domain::record::{AppliedAsOf, AsOf, Balance, CurrencyTotal, Decided, Entry, Posting};
use crate::domain::statement::{self, Cursor};
use crate::domain::{Account, LedgerError, NewAccount, NormalBalance, Reason};
use crate::storage::{self, accounts::Created, batch::Command, Pool, StorageError};
use crate::writer::{BatchObserver, Writer};
use std::collections::{BTreeMap, HashMap};
use std::sync::RwLock;
use time::OffsetDateTime;

/// Accounts kept in memory (they never change), at most.
pub const MAX_CACHED_ACCOUNTS: usize = 100_000;

/// Accounts whose balances one query computes while summing a trial balance's totals.
const TOTALS_CHUNK: i64 = 5000;

/// The ledger service.
pub struct Ledger {
    pool: Pool,
    writer: Writer,
    accounts: RwLock<HashMap<String, Account>>,
    page_key: Vec<u8>,
}

/// A storage failure as the caller's answer: `JOURNAL_CORRUPT` for a row that breaks an
/// invariant (only this request fails), `UNAVAILABLE` otherwise.
fn unavailable(e: StorageError) -> LedgerError {
    e.into_ledger_error()
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

/// Cuts a page read with one row more than `limit` back to `limit` rows, and returns the next
/// page's token made from its last row, or an empty token when this page is the last.
fn cut_page<T>(page: &mut Vec<T>, limit: i64, token: impl FnOnce(&T) -> String) -> String {
    if page.len() as i64 > limit {
        page.truncate(limit as usize);
        token(page.last().expect("a page of at least one row"))
    } else {
        String::new()
    }
}

fn nanos(t: OffsetDateTime) -> i128 {
    t.unix_timestamp_nanos()
}

fn from_nanos(n: i128) -> Result<OffsetDateTime, LedgerError> {
    OffsetDateTime::from_unix_timestamp_nanos(n)
        .map_err(|_| LedgerError::new(Reason::InvalidPageToken, "page_token holds an invalid time"))
}

impl Ledger {
    /// A ledger over a migrated database.
    pub async fn new(pool: Pool, observer: Option<BatchObserver>) -> Result<Ledger, StorageError> {
        let client = pool.get().await?;
        let page_key = storage::read::page_token_key(&client).await?;
        drop(client);
        let writer = Writer::spawn(pool.clone(), observer);
        Ok(Ledger {
            pool,
            writer,
            accounts: RwLock::new(HashMap::new()),
            page_key,
        })
    }

    /// The connection pool (health checks, metrics).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    async fn client(&self) -> Result<deadpool_postgres::Client, LedgerError> {
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
            .map_err(unavailable)?
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
                    ))
                }
            }
        }
    }

    /// Accounts by code, from memory or storage; missing codes are absent from the map.
    async fn accounts(&self, codes: &[String]) -> Result<HashMap<String, Account>, LedgerError> {
        let mut found = HashMap::with_capacity(codes.len());
        let mut missing = Vec::new();
        {
            let cache = self.accounts.read().expect("account cache lock");
            for c in codes {
                match cache.get(c) {
                    Some(a) => {
                        found.insert(c.clone(), a.clone());
                    }
                    None => missing.push(c.clone()),
                }
            }
        }
        if !missing.is_empty() {
            let client = self.client().await?;
            let loaded = storage::accounts::get_many(&client, &missing)
                .await
                .map_err(unavailable)?;
            let mut cache = self.accounts.write().expect("account cache lock");
            if cache.len() + loaded.len() > MAX_CACHED_ACCOUNTS {
                cache.clear();
            }
            for a in loaded {
                cache.insert(a.code.clone(), a.clone());
                found.insert(a.code.clone(), a);
            }
        }
        Ok(found)
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
            })
    }

    /// Accounts by code prefix, a page at a time.
    pub async fn list_accounts(
        &self,
        prefix: &str,
        size: u32,
        token: &str,
    ) -> Result<(Vec<Account>, String), LedgerError> {
        validate_prefix(prefix)?;
        let limit = page_size(size)?;
        let scope = format!("accounts:{prefix}");
        let after = if token.is_empty() {
            None
        } else {
            Some(page_token::decode(&self.page_key, &scope, token, 0)?.1)
        };
        let client = self.client().await?;
        let mut page = storage::accounts::list(&client, prefix, after.as_deref(), limit + 1)
            .await
            .map_err(unavailable)?;
        let next = cut_page(&mut page, limit, |last| {
            page_token::encode(&self.page_key, &scope, &[], &last.code)
        });
        Ok((page, next))
    }

    /// Records a posting, or returns the decision already made for its key.
    pub async fn post(&self, caller: &str, req: PostRequest) -> Result<Decided, LedgerError> {
        let codes = req.check_shape()?;
        let accounts = self.accounts(&codes).await?;
        let valid = req.validate(&accounts)?;
        self.writer
            .submit(caller.to_owned(), Command::Post(valid))
            .await
    }

    /// Records the compensating posting of an earlier one.
    pub async fn void(&self, caller: &str, req: VoidRequest) -> Result<Decided, LedgerError> {
        let valid = req.validate()?;
        let client = self.client().await?;
        let exists = storage::read::posting_by_id(&client, valid.target)
            .await
            .map_err(unavailable)?;
        drop(client);
        if exists.is_none() {
            return Err(LedgerError::new(
                Reason::PostingNotFound,
                format!("posting {} does not exist", valid.target),
            ));
        }
        self.writer
            .submit(caller.to_owned(), Command::Void(valid))
            .await
    }

    /// A posting by id.
    pub async fn get_posting(&self, posting_id: &str) -> Result<Posting, LedgerError> {
        let id = parse_posting_id(posting_id)?;
        let client = self.client().await?;
        storage::read::posting_by_id(&client, id)
            .await
            .map_err(unavailable)?
            .ok_or_else(|| {
                LedgerError::new(
                    Reason::PostingNotFound,
                    format!("posting {id} does not exist"),
                )
            })
    }

    /// A posting by the caller's idempotency key (a key decided as a rejection answers with it).
    pub async fn get_posting_by_key(
        &self,
        caller: &str,
        key: &str,
    ) -> Result<Posting, LedgerError> {
        validate_idempotency_key(key)?;
        let client = self.client().await?;
        match storage::read::posting_by_key(&client, caller, key)
            .await
            .map_err(unavailable)?
        {
            Some(Ok(p)) => Ok(p),
            Some(Err(rejected)) => Err(LedgerError::new(
                Reason::PostingNotFound,
                format!("idempotency key {key:?} made no posting: it was rejected with {rejected}"),
            )),
            None => Err(LedgerError::new(
                Reason::PostingNotFound,
                format!("no posting has idempotency key {key:?} for caller {caller:?}"),
            )),
        }
    }

    /// Postings in sequence order, optionally only those touching an account.
    pub async fn list_postings(
        &self,
        account: &str,
        size: u32,
        token: &str,
    ) -> Result<(Vec<Posting>, String), LedgerError> {
        let limit = page_size(size)?;
        let account_id = if account.is_empty() {
            None
        } else {
            Some(self.get_account(account).await?.id)
        };
        let scope = format!("postings:{account}");
        let after = if token.is_empty() {
            0
        } else {
            page_token::decode(&self.page_key, &scope, token, 1)?.0[0] as i64
        };
        let client = self.client().await?;
        let mut page = storage::read::list_postings(&client, account_id, after, limit + 1)
            .await
            .map_err(unavailable)?;
        let next = cut_page(&mut page, limit, |last| {
            page_token::encode(&self.page_key, &scope, &[i128::from(last.sequence)], "")
        });
        Ok((page, next))
    }

    async fn resolve(&self, as_of: AsOf) -> Result<AppliedAsOf, LedgerError> {
        let mut client = self.client().await?;
        storage::read::resolve_as_of(&mut client, as_of)
            .await
            .map_err(unavailable)?
    }

    /// An account's balance at a cut-off.
    pub async fn get_balance(&self, account: &str, as_of: AsOf) -> Result<Balance, LedgerError> {
        let account = self.get_account(account).await?;
        let mut client = self.client().await?;
        let at = storage::read::resolve_as_of(&mut client, as_of)
            .await
            .map_err(unavailable)??;
        let mut b = storage::read::balances(&client, std::slice::from_ref(&account), &at)
            .await
            .map_err(unavailable)?;
        Ok(b.pop().expect("one balance"))
    }

    fn applied_from_token(ints: &[i128]) -> Result<AppliedAsOf, LedgerError> {
        Ok(AppliedAsOf {
            recorded_at: from_nanos(ints[0])?,
            effective_at: from_nanos(ints[1])?,
            sequence: u64::try_from(ints[2]).map_err(|_| {
                LedgerError::new(
                    Reason::InvalidPageToken,
                    "page_token holds an invalid sequence",
                )
            })?,
        })
    }

    fn applied_to_token(at: &AppliedAsOf) -> [i128; 3] {
        [
            nanos(at.recorded_at),
            nanos(at.effective_at),
            i128::from(at.sequence),
        ]
    }

    /// A trial balance: balances of accounts by prefix at a cut-off, a page at a time, and
    /// per-currency totals over every matching account. Later pages keep the first page's
    /// cut-off. The accounts listed are those with a leg recorded by the cut-off (see
    /// `storage::read::accounts_with_legs`), so the whole answer is final once given.
    pub async fn list_balances(
        &self,
        prefix: &str,
        as_of: AsOf,
        size: u32,
        token: &str,
    ) -> Result<(Vec<Balance>, Vec<CurrencyTotal>, String), LedgerError> {
        validate_prefix(prefix)?;
        let limit = page_size(size)?;
        let scope = format!("balances:{prefix}");
        let (at, after) = if token.is_empty() {
            (self.resolve(as_of).await?, None)
        } else {
            let (ints, code) = page_token::decode(&self.page_key, &scope, token, 3)?;
            (Self::applied_from_token(&ints)?, Some(code))
        };
        let client = self.client().await?;
        let through = at.sequence as i64;
        let mut page = storage::read::accounts_with_legs(
            &client,
            prefix,
            after.as_deref(),
            through,
            limit + 1,
        )
        .await
        .map_err(unavailable)?;
        let next = cut_page(&mut page, limit, |last| {
            page_token::encode(
                &self.page_key,
                &scope,
                &Self::applied_to_token(&at),
                &last.code,
            )
        });
        let balances = storage::read::balances(&client, &page, &at)
            .await
            .map_err(unavailable)?;
        // Totals over every matching account, not only this page.
        let mut totals: BTreeMap<(String, u8), (i128, i128)> = BTreeMap::new();
        let mut cursor: Option<String> = None;
        loop {
            let chunk = storage::read::accounts_with_legs(
                &client,
                prefix,
                cursor.as_deref(),
                through,
                TOTALS_CHUNK,
            )
            .await
            .map_err(unavailable)?;
            if chunk.is_empty() {
                break;
            }
            cursor = chunk.last().map(|a| a.code.clone());
            for b in storage::read::balances(&client, &chunk, &at)
                .await
                .map_err(unavailable)?
            {
                let t = totals.entry((b.currency.clone(), b.scale)).or_default();
                t.0 += b.debits;
                t.1 += b.credits;
            }
        }
        let totals = totals
            .into_iter()
            .map(|((currency, scale), (debits, credits))| CurrencyTotal {
                currency,
                scale,
                debits,
                credits,
            })
            .collect();
        Ok((balances, totals, next))
    }

    /// An account's statement at a cut-off: entries in sequence order with the running balance
    /// over the entries the cut-off includes. The page token carries the cut-off and the
    /// running totals, so every page continues the same statement.
    pub async fn list_entries(
        &self,
        account: &str,
        as_of: AsOf,
        size: u32,
        token: &str,
    ) -> Result<(Vec<Entry>, String), LedgerError> {
        let limit = page_size(size)?;
        let account = self.get_account(account).await?;
        let scope = format!("entries:{}", account.code);
        let (at, after, debits, credits) = if token.is_empty() {
            (self.resolve(as_of).await?, (0i64, -1i16), 0i128, 0i128)
        } else {
            let (ints, _) = page_token::decode(&self.page_key, &scope, token, 7)?;
            let bad = || {
                LedgerError::new(
                    Reason::InvalidPageToken,
                    "page_token holds an invalid position",
                )
            };
            let seq = i64::try_from(ints[3]).map_err(|_| bad())?;
            let leg = i16::try_from(ints[4]).map_err(|_| bad())?;
            (
                Self::applied_from_token(&ints)?,
                (seq, leg),
                ints[5],
                ints[6],
            )
        };
        let client = self.client().await?;
        let from = Cursor {
            sequence: after.0,
            leg: after.1,
            debits,
            credits,
        };
        let read = statement::rows_to_read(limit as usize) as i64;
        let rows = storage::read::entries(&client, &account, &at, after, read)
            .await
            .map_err(unavailable)?;
        let (out, next) = statement::page(&rows, limit as usize, account.normal_balance, from)
            .map_err(|sequence| {
                StorageError::corrupt_posting(
                    sequence,
                    format!("more than {MAX_LEGS} legs on account {:?}", account.code),
                )
                .into_ledger_error()
            })?;
        let next = match next {
            Some(c) => {
                let [r, ef, s] = Self::applied_to_token(&at);
                page_token::encode(
                    &self.page_key,
                    &scope,
                    &[
                        r,
                        ef,
                        s,
                        i128::from(c.sequence),
                        i128::from(c.leg),
                        c.debits,
                        c.credits,
                    ],
                    "",
                )
            }
            None => String::new(),
        };
        Ok((out, next))
    }
}

/// Renders minor units at a scale (re-exported for adapters).
pub fn render(minor: i128, scale: u8) -> String {
    format_minor(minor, scale)
}
