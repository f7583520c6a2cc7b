//! The List* reads: pages bounded by count and bytes (see [`ledger_core::page`]), and page
//! tokens that pin what the first page saw (its cut-off, its position, a statement's running
//! totals, a trial balance's totals), authenticated so the server can trust them.

use super::replicas::{at_read, Cut};
use super::{page_size, Ledger};
use crate::storage::{self, StorageError};
use ledger_core::account::{validate_prefix, Account};
use ledger_core::ledger::{Ledger as Book, DEFAULT_LEDGER_ID};
use ledger_core::limits::{add_to_sum, MAX_LEGS, MAX_TOKEN_TOTALS, MAX_TRIAL_BALANCE_CURRENCIES};
use ledger_core::page::{Fill, WireSize};
use ledger_core::page_token::{self, Reader, Writer};
use ledger_core::record::{AppliedAsOf, AsOf, Balance, CurrencyTotal, Entry, Posting};
use ledger_core::search::PostingFilter;
use ledger_core::statement::{self, Cursor};
use ledger_core::{LedgerError, Reason};
use std::collections::BTreeMap;
use time::OffsetDateTime;

/// Rows read per query while a page fills (at most; one more tells whether more follow):
/// bounds the memory a page of large items takes before the byte limit ends it.
pub const PAGE_READ_CHUNK: usize = 100;

/// Accounts whose balances one query computes while summing a trial balance's totals.
const TOTALS_CHUNK: i64 = 5000;

/// Where a chunked read goes on from, for the kinds of pages.
trait Source {
    type Item: WireSize;
    /// Up to `ask` items after `after` (after the page's start when `None`).
    async fn read(
        &mut self,
        after: Option<&Self::Item>,
        ask: usize,
    ) -> Result<Vec<Self::Item>, LedgerError>;
}

/// Fills a page of at most `limit` items (with `reserved` bytes already taken) from `src`,
/// in chunks; returns its items and whether another page follows.
async fn fill<S: Source>(
    src: &mut S,
    limit: usize,
    reserved: usize,
) -> Result<(Vec<S::Item>, bool), LedgerError> {
    let mut page = Fill::new(limit, reserved);
    loop {
        let ask = page.room().min(PAGE_READ_CHUNK) + 1;
        let chunk = src.read(page.last(), ask).await?;
        let short = chunk.len() < ask;
        for item in chunk {
            if !page.offer(item) {
                return Ok((page.into_items(), true));
            }
        }
        if short {
            return Ok((page.into_items(), false));
        }
    }
}

struct Accounts<'a> {
    client: &'a crate::storage::Conn,
    book: &'a Book,
    prefix: &'a str,
    start: Option<String>,
}

impl Source for Accounts<'_> {
    type Item = Account;
    async fn read(
        &mut self,
        after: Option<&Account>,
        ask: usize,
    ) -> Result<Vec<Account>, LedgerError> {
        let after = after.map(|a| a.code.as_str()).or(self.start.as_deref());
        storage::accounts::list(self.client, self.book.id, self.prefix, after, ask as i64)
            .await
            .map_err(StorageError::into_ledger_error)
    }
}

struct Postings<'a> {
    client: &'a crate::storage::Conn,
    book: &'a Book,
    search: storage::read::Search<'a>,
    start: i64,
    upper: i64,
}

impl Source for Postings<'_> {
    type Item = Posting;
    async fn read(
        &mut self,
        after: Option<&Posting>,
        ask: usize,
    ) -> Result<Vec<Posting>, LedgerError> {
        let after = after.map_or(self.start, |p| p.sequence as i64);
        storage::read::list_postings(
            self.client,
            self.book.id,
            &self.search,
            (after, self.upper),
            ask as i64,
        )
        .await
        .map_err(StorageError::into_ledger_error)
    }
}

struct Balances<'a> {
    client: &'a crate::storage::Conn,
    ledger: ledger_core::ledger::LedgerId,
    prefix: &'a str,
    at: AppliedAsOf,
    start: Option<String>,
}

impl Source for Balances<'_> {
    type Item = Balance;
    async fn read(
        &mut self,
        after: Option<&Balance>,
        ask: usize,
    ) -> Result<Vec<Balance>, LedgerError> {
        let after = after.map(|b| b.account.as_str()).or(self.start.as_deref());
        let through = self.at.sequence as i64;
        let accounts = storage::read::accounts_with_legs(
            self.client,
            self.ledger,
            self.prefix,
            after,
            through,
            ask as i64,
        )
        .await
        .map_err(StorageError::into_ledger_error)?;
        storage::read::balances(self.client, &accounts, &self.at)
            .await
            .map_err(StorageError::into_ledger_error)
    }
}

/// A page token's scope: what it pages over, and in which ledger (a token of one ledger's
/// page is refused on another's). The default ledger's scopes are those tokens had before
/// ledgers existed.
pub(super) fn scope(book: &Book, what: String) -> String {
    match book.id {
        DEFAULT_LEDGER_ID => what,
        id => format!("{what}@ledger:{id}"),
    }
}

fn invalid_token(what: &str) -> LedgerError {
    LedgerError::new(
        Reason::InvalidPageToken,
        format!("page_token holds an invalid {what}"),
    )
    .with("field", "page_token")
}

pub(super) fn write_at(w: &mut Writer, at: &AppliedAsOf) {
    w.int(at.recorded_at.unix_timestamp_nanos())
        .int(at.effective_at.unix_timestamp_nanos())
        .int(i128::from(at.sequence));
}

pub(super) fn read_at(r: &mut Reader) -> Result<AppliedAsOf, LedgerError> {
    let time =
        |n: i128| OffsetDateTime::from_unix_timestamp_nanos(n).map_err(|_| invalid_token("time"));
    Ok(AppliedAsOf {
        recorded_at: time(r.int()?)?,
        effective_at: time(r.int()?)?,
        sequence: r.int_as()?,
    })
}

/// A trial balance's totals, carried by its page token when there are few enough currencies.
fn write_totals(w: &mut Writer, totals: &[CurrencyTotal]) {
    let carried = totals.len() <= MAX_TOKEN_TOTALS;
    w.int(if carried { TOTALS_WITH_HELD } else { 0 });
    if carried {
        w.int(totals.len() as i128);
        for t in totals {
            w.text(&t.currency)
                .int(i128::from(t.scale))
                .int(t.debits)
                .int(t.credits)
                .int(t.held_debits)
                .int(t.held_credits);
        }
    }
}

/// How a token marks its carried totals: 1, money only (tokens of servers before holds, whose
/// cut-offs precede every hold); 2, with the held amounts.
const TOTALS_WITH_HELD: i128 = 2;

fn read_totals(r: &mut Reader) -> Result<Option<Vec<CurrencyTotal>>, LedgerError> {
    let held = match r.int()? {
        0 => return Ok(None),
        1 => false,
        TOTALS_WITH_HELD => true,
        _ => return Err(invalid_token("totals")),
    };
    let n: usize = r.int_as()?;
    if n > MAX_TOKEN_TOTALS {
        return Err(invalid_token("totals"));
    }
    let held_int = |r: &mut Reader| if held { r.int() } else { Ok(0) };
    (0..n)
        .map(|_| {
            Ok(CurrencyTotal {
                currency: r.text()?,
                scale: r.int_as()?,
                debits: r.int()?,
                credits: r.int()?,
                held_debits: held_int(r)?,
                held_credits: held_int(r)?,
            })
        })
        .collect::<Result<Vec<_>, LedgerError>>()
        .map(Some)
}

impl Ledger {
    /// Accounts by code prefix, a page at a time.
    pub async fn list_accounts(
        &self,
        book: &Book,
        prefix: &str,
        size: u32,
        token: &str,
    ) -> Result<(Vec<Account>, String), LedgerError> {
        validate_prefix(prefix)?;
        let limit = page_size(size)? as usize;
        let scope = scope(book, format!("accounts:{prefix}"));
        let start = match token {
            "" => None,
            t => {
                let mut r = page_token::open(&self.page_key, &scope, t)?;
                let code = r.text()?;
                r.finish()?;
                Some(code)
            }
        };
        let client = self.client_of(book).await?;
        let mut src = Accounts {
            client: &client,
            book,
            prefix,
            start,
        };
        let (page, more) = fill(&mut src, limit, 0).await?;
        let next = match page.last() {
            Some(last) if more => Writer::new().text(&last.code).seal(&self.page_key, &scope),
            _ => String::new(),
        };
        Ok((page, next))
    }

    /// Postings in sequence order that `account` (when not empty) and `filter` keep. The
    /// first page fixes the last sequence the listing includes (its token carries it), so a
    /// token always gives the same page, however many postings are recorded meanwhile.
    pub async fn list_postings(
        &self,
        book: &Book,
        account: &str,
        filter: &PostingFilter,
        size: u32,
        token: &str,
    ) -> Result<(Vec<Posting>, String), LedgerError> {
        filter.validate()?;
        let limit = page_size(size)? as usize;
        let account_id = match account {
            "" => None,
            code => Some(self.get_account(book, code).await?.id),
        };
        let scope = scope(book, format!("postings:{account}{}", filter.scope()));
        let (start, upper) = match token {
            "" => (0, None),
            t => {
                let mut r = page_token::open(&self.page_key, &scope, t)?;
                let after = r.int_as()?;
                // A token of a server before search carries no end: the listing's present.
                let upper = if r.is_done() { None } else { Some(r.int_as()?) };
                r.finish()?;
                (after, upper)
            }
        };
        let client = self.client_of(book).await?;
        let upper = match upper {
            Some(u) => u,
            None => storage::read::last_sequence(&client, book.id)
                .await
                .map_err(StorageError::into_ledger_error)?,
        };
        let search = storage::read::Search { account_id, filter };
        let mut src = Postings {
            client: &client,
            book,
            search,
            start,
            upper,
        };
        let (page, more) = fill(&mut src, limit, 0).await?;
        let next = match page.last() {
            Some(last) if more => Writer::new()
                .int(i128::from(last.sequence))
                .int(i128::from(upper))
                .seal(&self.page_key, &scope),
            _ => String::new(),
        };
        Ok((page, next))
    }

    /// A trial balance: balances of accounts by prefix at a cut-off, a page at a time, and
    /// per-currency totals over every matching account. Later pages keep the first page's
    /// cut-off, and its totals, which the first page sums once and its token carries (a
    /// reader paging at size 1 does not sum every account per page). The accounts listed
    /// are those with a leg recorded by the cut-off (see
    /// `storage::read::accounts_with_legs`), so the whole answer is final once given.
    pub async fn list_balances(
        &self,
        book: &Book,
        prefix: &str,
        as_of: AsOf,
        size: u32,
        token: &str,
    ) -> Result<(Vec<Balance>, Vec<CurrencyTotal>, String), LedgerError> {
        validate_prefix(prefix)?;
        let limit = page_size(size)? as usize;
        let scope = scope(book, format!("balances:{prefix}"));
        let (cut, start, carried) = match token {
            "" => (Cut::Requested(as_of), None, None),
            t => {
                let mut r = page_token::open(&self.page_key, &scope, t)?;
                let (at, code, totals) = (read_at(&mut r)?, r.text()?, read_totals(&mut r)?);
                r.finish()?;
                (Cut::Applied(at), Some(code), totals)
            }
        };
        let read = at_read(|client, at| {
            let (prefix, start, carried) = (prefix.to_owned(), start.clone(), carried.clone());
            let ledger = book.id;
            Box::pin(async move {
                let totals = match carried {
                    Some(t) => t,
                    None => trial_totals(client, ledger, &prefix, at).await?,
                };
                let reserved = totals.iter().map(WireSize::wire_size).sum();
                let mut src = Balances {
                    client,
                    ledger,
                    prefix: &prefix,
                    at: *at,
                    start,
                };
                let (page, more) = fill(&mut src, limit, reserved).await?;
                Ok((page, more, totals))
            })
        });
        let (at, (page, more, totals)) = self.read_at(book, cut, read).await?;
        let next = match page.last() {
            Some(last) if more => {
                let mut w = Writer::new();
                write_at(&mut w, &at);
                w.text(&last.account);
                write_totals(&mut w, &totals);
                w.seal(&self.page_key, &scope)
            }
            _ => String::new(),
        };
        Ok((page, totals, next))
    }

    /// An account's statement at a cut-off: entries in sequence order, each with the balance
    /// after its posting (see [`ledger_core::statement`]). The page token carries the
    /// cut-off, the position and the running totals, so every page continues the same
    /// statement.
    pub async fn list_entries(
        &self,
        book: &Book,
        account: &str,
        as_of: AsOf,
        size: u32,
        token: &str,
    ) -> Result<(Vec<Entry>, String), LedgerError> {
        let limit = page_size(size)? as usize;
        let account = self.get_account(book, account).await?;
        let scope = scope(book, format!("entries:{}", account.code));
        let (cut, from) = match token {
            "" => (Cut::Requested(as_of), Cursor::start()),
            t => {
                let mut r = page_token::open(&self.page_key, &scope, t)?;
                let at = read_at(&mut r)?;
                let from = Cursor {
                    sequence: r.int_as()?,
                    leg: r.int_as()?,
                    debits: r.int()?,
                    credits: r.int()?,
                };
                r.finish()?;
                (Cut::Applied(at), from)
            }
        };
        let read = statement::rows_to_read(limit) as i64;
        let rows = at_read(|client, at| {
            let (account, from) = (account.clone(), (from.sequence, from.leg));
            Box::pin(async move {
                storage::read::entries(client, &account, at, from, read)
                    .await
                    .map_err(StorageError::into_ledger_error)
            })
        });
        let (at, rows) = self.read_at(book, cut, rows).await?;
        let (out, next) =
            statement::page(&rows, limit, account.normal_balance, from).map_err(|sequence| {
                StorageError::corrupt_posting(
                    sequence,
                    format!("more than {MAX_LEGS} legs on account {:?}", account.code),
                )
                .into_ledger_error()
            })?;
        let next = match next {
            Some(c) => {
                let mut w = Writer::new();
                write_at(&mut w, &at);
                w.int(i128::from(c.sequence))
                    .int(i128::from(c.leg))
                    .int(c.debits)
                    .int(c.credits);
                w.seal(&self.page_key, &scope)
            }
            None => String::new(),
        };
        Ok((out, next))
    }
}

/// Per-currency totals over every account matching `prefix` at `at`, summed in chunks of
/// accounts; a trial balance over more than [`MAX_TRIAL_BALANCE_CURRENCIES`] is refused.
async fn trial_totals(
    client: &crate::storage::Conn,
    ledger: ledger_core::ledger::LedgerId,
    prefix: &str,
    at: &AppliedAsOf,
) -> Result<Vec<CurrencyTotal>, LedgerError> {
    let mut totals = Sums::new();
    let mut cursor: Option<String> = None;
    loop {
        let chunk = storage::read::accounts_with_legs(
            client,
            ledger,
            prefix,
            cursor.as_deref(),
            at.sequence as i64,
            TOTALS_CHUNK,
        )
        .await
        .map_err(StorageError::into_ledger_error)?;
        let Some(last) = chunk.last() else { break };
        cursor = Some(last.code.clone());
        for b in storage::read::balances(client, &chunk, at)
            .await
            .map_err(StorageError::into_ledger_error)?
        {
            add_balance(&mut totals, &b)?;
        }
        if totals.len() > MAX_TRIAL_BALANCE_CURRENCIES {
            return Err(LedgerError::limit(
                "currencies in the trial balance",
                "MAX_TRIAL_BALANCE_CURRENCIES",
                MAX_TRIAL_BALANCE_CURRENCIES,
                format!("more than {MAX_TRIAL_BALANCE_CURRENCIES} (narrow the prefix)"),
            ));
        }
    }
    Ok(currency_totals(totals))
}

/// A trial balance's sums per (currency, scale): debits, credits, held debits, held credits.
pub(super) type Sums = BTreeMap<(String, u8), [i128; 4]>;

/// Adds an account's balance to a trial balance's sums (refused past `MAX_SUM_MINOR`).
pub(super) fn add_balance(totals: &mut Sums, b: &Balance) -> Result<(), LedgerError> {
    let t = totals.entry((b.currency.clone(), b.scale)).or_default();
    let what = |side: &str| format!("the trial balance's {side} of {}", b.currency);
    add_to_sum(&mut t[0], b.debits, &what("debits"))?;
    add_to_sum(&mut t[1], b.credits, &what("credits"))?;
    add_to_sum(&mut t[2], b.held_debits, &what("held debits"))?;
    add_to_sum(&mut t[3], b.held_credits, &what("held credits"))
}

/// A trial balance's sums as its totals, in (currency, scale) order.
pub(super) fn currency_totals(totals: Sums) -> Vec<CurrencyTotal> {
    totals
        .into_iter()
        .map(
            |((currency, scale), [debits, credits, held_debits, held_credits])| CurrencyTotal {
                currency,
                scale,
                debits,
                credits,
                held_debits,
                held_credits,
            },
        )
        .collect()
}
