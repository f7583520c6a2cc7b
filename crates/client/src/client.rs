//! [`Client`]: the typed calls, each sent under the [`RetryPolicy`] and naming the client's
//! ledger, with the scales of the accounts it has read kept in memory by ledger and code (an
//! account's scale never changes, only its terms do) so that amounts convert at their scale.
//! `accounts.rs`: the calls about accounts (create, get now or as of, update, versions);
//! `ledgers.rs`: the calls about ledgers themselves (create, get, list).

mod accounts;
mod journal;
mod ledgers;
mod queries;

pub use queries::PostingPage;

use crate::amount::to_wire;
use crate::calls::{
    framed_len, Calls, ClientStats, Counters, MAX_BATCH_REQUESTS, MAX_BATCH_REQUEST_BYTES,
};
use crate::coalesce::{Coalesce, Coalescer, COALESCE_MAX_IN_FLIGHT};
use crate::connect::{connect, ConnectOptions, RawClient};
use crate::error::{Error, ErrorKind, Reason};
use crate::pb;
use crate::retry::RetryPolicy;
use crate::types::*;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// Accounts whose scale is kept in memory, at most, over every ledger (limit
/// MAX_CACHED_ACCOUNTS); emptied when full. Only their scale is needed (to write amounts),
/// and an account's scale never changes (its terms do, and are never kept), so a kept scale
/// never goes stale.
pub const MAX_CACHED_ACCOUNTS: usize = 10_000;

/// Items asked for per page when a call pages through a whole list (the ledger's largest).
pub const PAGE_SIZE: u32 = 1000;

/// How a [`Client`] reaches the ledger and behaves.
#[derive(Clone, Debug, Default)]
pub struct ClientOptions {
    /// Address, TLS and bearer token.
    pub connect: ConnectOptions,
    /// Retries of calls whose outcome is unknown.
    pub retry: RetryPolicy,
    /// `None`: every `post` is its own `Post` call.
    pub coalesce: Option<Coalesce>,
    /// The ledger the client's calls name (empty: [`DEFAULT_LEDGER`]); [`Client::ledger`]
    /// gives a client on another one.
    pub ledger: String,
}

impl ClientOptions {
    /// The server at `host:port` (plain) or an `http://` / `https://` URL.
    pub fn new(server: impl Into<String>) -> ClientOptions {
        ClientOptions {
            connect: ConnectOptions {
                server: server.into(),
                ..ConnectOptions::default()
            },
            ..ClientOptions::default()
        }
    }

    /// With a bearer token on every call.
    pub fn token(mut self, token: impl Into<String>) -> ClientOptions {
        self.connect.token = Some(token.into());
        self
    }

    /// With this retry policy.
    pub fn retry(mut self, retry: RetryPolicy) -> ClientOptions {
        self.retry = retry;
        self
    }

    /// With the calls on ledger `code` (1..64 of `a-z 0-9 _ -`; empty: [`DEFAULT_LEDGER`]);
    /// a bad code fails [`Client::connect`] before anything is sent.
    pub fn ledger(mut self, code: impl Into<String>) -> ClientOptions {
        self.ledger = code.into();
        self
    }

    /// Concurrent `post` calls sent together, at most `max_per_call` per `PostBatch`.
    pub fn coalesce(mut self, max_per_call: usize) -> ClientOptions {
        self.coalesce = Some(Coalesce {
            max_per_call,
            max_in_flight: COALESCE_MAX_IN_FLIGHT,
        });
        self
    }
}

/// The scales of the accounts a client has read, by ledger and code.
#[derive(Default)]
struct Accounts {
    by_ledger: HashMap<String, HashMap<String, u32>>,
    len: usize,
}

impl Accounts {
    fn scale(&self, ledger: &str, code: &str) -> Option<u32> {
        self.by_ledger.get(ledger)?.get(code).copied()
    }

    /// Keeps the scale of `a` as read on `ledger` (emptied first when MAX_CACHED_ACCOUNTS
    /// are kept).
    fn keep(&mut self, ledger: &str, a: &Account) {
        if self.len >= MAX_CACHED_ACCOUNTS {
            *self = Accounts::default();
        }
        let codes = self.by_ledger.entry(ledger.to_owned()).or_default();
        if codes.insert(a.code.clone(), a.scale).is_none() {
            self.len += 1;
        }
    }
}

type SharedAccounts = Arc<Mutex<Accounts>>;

/// A client of the ledger: cheap to clone (clones share the connection, the accounts read and
/// the coalescer), safe to use from many tasks at once. Its calls name one ledger, the
/// options' ([`ClientOptions::ledger`]); [`Client::ledger`] is a client on another one over
/// the same connection.
#[derive(Clone)]
pub struct Client {
    calls: Arc<Calls>,
    accounts: SharedAccounts,
    coalescer: Option<Coalescer>,
    options: Arc<ClientOptions>,
    /// The ledger its calls name (never empty).
    ledger: Arc<str>,
}

impl Client {
    /// Connects (see [`connect`] for addresses and TLS). Coalescing, when asked for, starts its
    /// dispatcher on the current tokio runtime. A ledger code in the options that the ledger
    /// would refuse fails here, before anything is sent (`INVALID_FIELD`, field `ledger`).
    pub async fn connect(opts: ClientOptions) -> Result<Client, Error> {
        let ledger = ledger_or_default(&opts.ledger)?.into();
        Client::on_new_connection(Arc::new(opts), Arc::default(), ledger).await
    }

    /// A client over a new connection to the same server, with the same options, sharing the
    /// accounts this one has read (its own coalescing, when on), on this one's ledger. To
    /// spread load over several HTTP/2 connections without reading every account once per
    /// connection.
    pub async fn another_connection(&self) -> Result<Client, Error> {
        let (options, accounts) = (self.options.clone(), self.accounts.clone());
        Client::on_new_connection(options, accounts, self.ledger.clone()).await
    }

    async fn on_new_connection(
        options: Arc<ClientOptions>,
        accounts: SharedAccounts,
        ledger: Arc<str>,
    ) -> Result<Client, Error> {
        let coalesce = options.coalesce.map(check_coalesce).transpose()?;
        let calls = Arc::new(Calls {
            raw: connect(&options.connect).await?,
            retry: options.retry,
            counters: Counters::default(),
        });
        Ok(Client {
            coalescer: coalesce.map(|c| Coalescer::spawn(calls.clone(), c)),
            calls,
            accounts,
            options,
            ledger,
        })
    }

    /// A client whose calls name ledger `code` (empty: [`DEFAULT_LEDGER`]): cheap (no new
    /// connection; it shares this one's connection, accounts read and coalescing, whose
    /// `PostBatch` calls never mix ledgers). A code the ledger would refuse fails each of its
    /// calls before anything is sent (`INVALID_FIELD`, field `ledger`).
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), ledger_client::Error> {
    /// use ledger_client::{AsOf, Client, ClientOptions, NewLedger};
    /// let acme = Client::connect(ClientOptions::new("127.0.0.1:50051").ledger("acme")).await?;
    /// acme.create_ledger(NewLedger::new("globex").description("Globex")).await?;
    /// let globex = acme.ledger("globex"); // the same connection
    /// let a = acme.balance("assets:bank", AsOf::now()).await?; // acme's
    /// let g = globex.balance("assets:bank", AsOf::now()).await?; // globex's, apart
    /// assert_eq!((acme.ledger_code(), globex.ledger_code()), ("acme", "globex"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn ledger(&self, code: &str) -> Client {
        let code = if code.is_empty() {
            DEFAULT_LEDGER
        } else {
            code
        };
        Client {
            ledger: code.into(),
            ..self.clone()
        }
    }

    /// The ledger this client's calls name.
    pub fn ledger_code(&self) -> &str {
        &self.ledger
    }

    /// The ledger for a request's `ledger` field, checked as the ledger checks it.
    fn ledger_field(&self) -> Result<String, Error> {
        validate_ledger_code(&self.ledger)?;
        Ok(self.ledger.to_string())
    }

    /// The generated client over the same connection, for calls this API does not cover.
    pub fn raw(&self) -> RawClient {
        self.calls.raw.clone()
    }

    /// What this client (and its clones) sent so far.
    pub fn stats(&self) -> ClientStats {
        let c = &self.calls.counters;
        ClientStats {
            attempts: c.attempts.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
            batch_calls: c.batch_calls.load(Ordering::Relaxed),
            batched_postings: c.batched_postings.load(Ordering::Relaxed),
        }
    }

    /// The scale of an account (read once, then kept: it never changes).
    async fn scale(&self, code: &str) -> Result<u32, Error> {
        let kept = self
            .accounts
            .lock()
            .expect("accounts lock")
            .scale(&self.ledger, code);
        match kept {
            Some(scale) => Ok(scale),
            None => Ok(self.account(code).await?.scale),
        }
    }

    /// Keeps the scale of an account read on this client's ledger.
    fn remember(&self, a: &Account) {
        let mut accounts = self.accounts.lock().expect("accounts lock");
        accounts.keep(&self.ledger, a);
    }

    /// The posting as the ledger takes it: each amount written at its account's scale
    /// (accounts not yet known are read first), conditions too. Refused before any `Post` is
    /// sent: a missing key, an amount the account cannot carry exactly or beyond the ledger's
    /// digits.
    async fn wire(&self, p: &NewPosting) -> Result<pb::PostRequest, Error> {
        if p.idempotency_key.is_empty() {
            return Err(Error::refused(
                Reason::IdempotencyKeyRequired,
                "idempotency_key is required: the same key on every retry of this posting",
            ));
        }
        Ok(pb::PostRequest {
            ledger: self.ledger_field()?,
            idempotency_key: p.idempotency_key.clone(),
            legs: self.wire_legs(&p.legs).await?,
            effective_at: p.effective_at.map(time_to_pb),
            memo: p.memo.clone(),
            metadata: p.metadata.clone().into_iter().collect(),
            hold: p.hold.is_some(),
            hold_expires_at: p.hold.flatten().map(time_to_pb),
            conditions: self.wire_conditions(&p.conditions).await?,
        })
    }

    /// Conditions with each amount written at its account's scale.
    async fn wire_conditions(&self, conditions: &[Condition]) -> Result<Vec<pb::Condition>, Error> {
        let mut wire = Vec::with_capacity(conditions.len());
        for (i, c) in conditions.iter().enumerate() {
            let scale = match c.check {
                ConditionCheck::AvailableAtLeast(_) => self.scale(&c.account).await?,
                // No amount to write: nothing to read.
                ConditionCheck::LastSequence(_) => 0,
            };
            wire.push(c.to_pb(i, scale)?);
        }
        Ok(wire)
    }

    /// Legs with each amount written at its account's scale.
    async fn wire_legs(&self, legs: &[Leg]) -> Result<Vec<pb::Leg>, Error> {
        let mut wire = Vec::with_capacity(legs.len());
        for leg in legs {
            let scale = self.scale(&leg.account).await?;
            wire.push(pb::Leg {
                account: leg.account.clone(),
                direction: leg.direction.to_pb(),
                amount: to_wire(leg.amount, scale, &leg.account)?,
            });
        }
        Ok(wire)
    }

    /// Records a posting on this client's ledger, or answers the one already recorded there
    /// under its key (`replayed: true`). Calls whose outcome is unknown are retried with the
    /// same key. With coalescing on, it travels in a `PostBatch` with the posts of other tasks
    /// to the same ledger.
    pub async fn post(&self, posting: NewPosting) -> Result<Posted, Error> {
        let req = self.wire(&posting).await?;
        match &self.coalescer {
            Some(c) => c.post(req).await,
            None => self.calls.post(req).await,
        }
    }

    /// Records up to [`MAX_BATCH_REQUESTS`] postings on this client's ledger in one
    /// `PostBatch` call (retried whole
    /// while its outcome is unknown): one result per posting, in order, each what `post` would
    /// have answered, so one bad posting (refused here or by the ledger) never fails the
    /// others. `Err` is the call's own failure.
    pub async fn post_batch(
        &self,
        postings: Vec<NewPosting>,
    ) -> Result<Vec<Result<Posted, Error>>, Error> {
        check_batch(postings.len())?;
        let ledger = self.ledger_field()?;
        let mut results: Vec<Option<Result<Posted, Error>>> = Vec::with_capacity(postings.len());
        let mut wire = Vec::with_capacity(postings.len());
        for p in &postings {
            match self.wire(p).await {
                Ok(r) => {
                    wire.push(r);
                    results.push(None);
                }
                // A definite answer for this posting alone; an unknown one fails the call.
                Err(e) if !e.is_retry_safe() => results.push(Some(Err(e))),
                Err(e) => return Err(e),
            }
        }
        check_batch_bytes(&wire)?;
        let mut sent = if wire.is_empty() {
            Vec::new()
        } else {
            self.calls.post_batch(ledger, wire).await?
        }
        .into_iter();
        Ok(results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| sent.next().expect("one result per request sent")))
            .collect())
    }

    /// Records the compensating posting of an earlier one (retried with the same key).
    pub async fn void(&self, v: NewVoid) -> Result<Posted, Error> {
        let req = pb::VoidRequest {
            ledger: self.ledger_field()?,
            idempotency_key: v.idempotency_key,
            posting_id: v.posting_id,
            reason: v.reason,
            effective_at: v.effective_at.map(time_to_pb),
        };
        let r = self
            .calls
            .call(req, |mut c, r| async move { c.void(r).await })
            .await?;
        Posted::from_pb(r.posting, r.replayed)
    }

    /// Captures a pending hold, whole (no legs) or in part (retried with the same key).
    pub async fn capture(&self, c: NewCapture) -> Result<Posted, Error> {
        if c.idempotency_key.is_empty() {
            return Err(Error::refused(
                Reason::IdempotencyKeyRequired,
                "idempotency_key is required: the same key on every retry of this capture",
            ));
        }
        let req = pb::CaptureRequest {
            ledger: self.ledger_field()?,
            legs: self.wire_legs(&c.legs).await?,
            idempotency_key: c.idempotency_key,
            hold_posting_id: c.hold_posting_id,
            effective_at: c.effective_at.map(time_to_pb),
            memo: c.memo,
            metadata: c.metadata.into_iter().collect(),
        };
        let r = self
            .calls
            .call(req, |mut c, r| async move { c.capture(r).await })
            .await?;
        Posted::from_pb(r.posting, r.replayed)
    }

    /// A posting by its id, or by this caller's idempotency key, as it stands now.
    pub async fn posting(&self, by: PostingBy) -> Result<Posting, Error> {
        self.posting_as_of(by, AsOf::now()).await
    }

    /// A posting as the ledger saw it at a cut-off (a hold's status then; a posting
    /// recorded after the cut-off is POSTING_NOT_FOUND).
    pub async fn posting_as_of(&self, by: PostingBy, as_of: AsOf) -> Result<Posting, Error> {
        let by = Some(match by {
            PostingBy::Id(id) => pb::get_posting_request::By::PostingId(id),
            PostingBy::Key(key) => pb::get_posting_request::By::IdempotencyKey(key),
        });
        let req = pb::GetPostingRequest {
            ledger: self.ledger_field()?,
            by,
            as_of: as_of.to_pb(),
        };
        let p = self
            .calls
            .call(req, |mut c, r| async move { c.get_posting(r).await })
            .await?;
        Posting::from_pb(p)
    }

    /// An account's balance at a cut-off.
    pub async fn balance(&self, account: &str, as_of: AsOf) -> Result<Balance, Error> {
        let req = pb::GetBalanceRequest {
            ledger: self.ledger_field()?,
            account: account.into(),
            as_of: as_of.to_pb(),
        };
        let b = self
            .calls
            .call(req, |mut c, r| async move { c.get_balance(r).await })
            .await?;
        Balance::from_pb(b)
    }

    /// The whole trial balance at one cut-off (every page; later pages keep the first's
    /// cut-off, so the balances and totals agree).
    pub async fn trial_balance(&self, prefix: &str, as_of: AsOf) -> Result<TrialBalance, Error> {
        let ledger = self.ledger_field()?;
        let mut balances = Vec::new();
        let mut page_token = String::new();
        loop {
            let req = pb::ListBalancesRequest {
                ledger: ledger.clone(),
                prefix: prefix.into(),
                as_of: as_of.to_pb(),
                page_size: PAGE_SIZE,
                page_token,
            };
            let page = self
                .calls
                .call(req, |mut c, r| async move { c.list_balances(r).await })
                .await?;
            for b in page.balances {
                balances.push(Balance::from_pb(b)?);
            }
            if page.next_page_token.is_empty() {
                let totals = page.totals.into_iter().map(CurrencyTotal::from_pb);
                return Ok(TrialBalance {
                    balances,
                    totals: totals.collect::<Result<_, _>>()?,
                });
            }
            page_token = page.next_page_token;
        }
    }

    /// An account's entries in journal order at one cut-off (every page), each with the
    /// balance after its posting. Ask at a [`Balance`]'s `as_of` to get the statement that
    /// closes at that balance.
    pub async fn entries(&self, account: &str, as_of: AsOf) -> Result<Vec<Entry>, Error> {
        let ledger = self.ledger_field()?;
        let mut entries = Vec::new();
        let mut page_token = String::new();
        loop {
            let req = pb::ListEntriesRequest {
                ledger: ledger.clone(),
                account: account.into(),
                as_of: as_of.to_pb(),
                page_size: PAGE_SIZE,
                page_token,
            };
            let page = self
                .calls
                .call(req, |mut c, r| async move { c.list_entries(r).await })
                .await?;
            for e in page.entries {
                entries.push(Entry::from_pb(e)?);
            }
            if page.next_page_token.is_empty() {
                return Ok(entries);
            }
            page_token = page.next_page_token;
        }
    }
}

/// Which posting [`Client::posting`] reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PostingBy {
    /// By its id.
    Id(String),
    /// By the idempotency key this caller recorded it under.
    Key(String),
}

fn check_coalesce(c: Coalesce) -> Result<Coalesce, Error> {
    if c.max_per_call == 0 || c.max_per_call > MAX_BATCH_REQUESTS {
        return Err(Error::new(
            ErrorKind::Invalid,
            format!(
                "coalescing takes 1..={MAX_BATCH_REQUESTS} posts per call (limit MAX_BATCH_REQUESTS), not {}",
                c.max_per_call
            ),
        ));
    }
    if c.max_in_flight == 0 {
        return Err(Error::new(
            ErrorKind::Invalid,
            "coalescing needs at least one call in flight (COALESCE_MAX_IN_FLIGHT)",
        ));
    }
    Ok(c)
}

fn check_batch(n: usize) -> Result<(), Error> {
    if n == 0 || n > MAX_BATCH_REQUESTS {
        return Err(Error::refused(
            if n == 0 { Reason::InvalidField } else { Reason::LimitExceeded },
            format!("a PostBatch carries 1..={MAX_BATCH_REQUESTS} postings (limit MAX_BATCH_REQUESTS), not {n}"),
        )
        .with("limit", "MAX_BATCH_REQUESTS"));
    }
    Ok(())
}

fn check_batch_bytes(requests: &[pb::PostRequest]) -> Result<(), Error> {
    let bytes: usize = requests.iter().map(framed_len).sum();
    if bytes > MAX_BATCH_REQUEST_BYTES {
        return Err(Error::refused(
            Reason::LimitExceeded,
            format!("the PostBatch would be {bytes} bytes, over the limit of {MAX_BATCH_REQUEST_BYTES} (MAX_BATCH_REQUEST_BYTES); send fewer postings per call"),
        )
        .with("limit", "MAX_BATCH_REQUEST_BYTES"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn account(code: &str, scale: u32) -> Account {
        Account {
            ledger: String::new(),
            code: code.into(),
            currency: "EUR".into(),
            scale,
            normal_balance: NormalBalance::Debit,
            allow_negative: false,
            metadata: Metadata::new(),
            created_at: SystemTime::UNIX_EPOCH,
            version: 1,
            status: AccountStatus::Open,
            balance_floor: None,
            balance_ceiling: None,
            debit_limits: Vec::new(),
            version_info: None,
        }
    }

    #[test]
    fn accounts_are_kept_by_ledger_and_code_so_one_code_in_two_ledgers_stays_apart() {
        let mut kept = Accounts::default();
        kept.keep("acme", &account("assets:bank", 2));
        kept.keep("globex", &account("assets:bank", 0));
        kept.keep("acme", &account("assets:bank", 2));
        assert_eq!(kept.scale("acme", "assets:bank"), Some(2));
        assert_eq!(kept.scale("globex", "assets:bank"), Some(0));
        assert!(kept.scale(DEFAULT_LEDGER, "assets:bank").is_none());
        assert_eq!(kept.len, 2, "the same account kept twice counts once");
    }

    #[test]
    fn the_accounts_kept_are_emptied_when_max_cached_accounts_are_kept_over_all_ledgers() {
        let mut kept = Accounts::default();
        for i in 0..MAX_CACHED_ACCOUNTS {
            let ledger = if i % 2 == 0 { "a" } else { "b" };
            kept.keep(ledger, &account(&format!("acct:{i}"), 2));
        }
        assert_eq!(kept.len, MAX_CACHED_ACCOUNTS);
        kept.keep("c", &account("one:more", 2));
        assert_eq!(kept.len, 1);
        assert!(kept.scale("a", "acct:0").is_none());
        assert!(kept.scale("c", "one:more").is_some());
    }
}
