//! `ledger-client`: the Rust client of the ledger service, so that nobody hand-rolls
//! retries around a ledger.
//!
//! - [`Client`]: typed calls (amounts given as [`Decimal`] or [`Amount`], written exactly at
//!   each account's scale, never rounded; answered as exact [`Amount`]s, a `Decimal` where
//!   one holds the value; times as [`std::time::SystemTime`]), the [`RetryPolicy`] built in
//!   (a call whose outcome is unknown is sent again as it was, with the same idempotency key,
//!   a bounded number of times, with exponential backoff and jitter), and optional
//!   coalescing of concurrent [`Client::post`] calls into `PostBatch` calls
//!   ([`ClientOptions::coalesce`]: at most N posts per call, no timer when idle, one ledger
//!   per call);
//! - ledgers: every call names the client's ledger ([`ClientOptions::ledger`], by default
//!   [`DEFAULT_LEDGER`]); [`Client::ledger`] is a cheap client on another ledger over the
//!   same connection (accounts are kept by ledger and code); [`Client::create_ledger`],
//!   [`Client::get_ledger`], [`Client::list_ledgers`] manage them, and a ledger code is
//!   checked as the ledger checks it ([`validate_ledger_code`]) before anything is sent;
//! - accounts: their attributes are fixed at creation, their terms (status, balance floor
//!   and ceiling, debit limits) change by versions: [`Client::update_account`] records the
//!   next one ([`AccountUpdate`], only if the account is still at the version the caller read:
//!   `ACCOUNT_VERSION_MISMATCH` otherwise, an answer never retried), [`Client::account_as_of`]
//!   reads the version in force at a cut-off, [`Client::account_versions`] every version with
//!   who changed what and why; a posting may carry conditions on its accounts
//!   ([`NewPosting::if_last_sequence`], [`NewPosting::if_available_at_least`]);
//! - [`connect()`]: reaching a server by `host:port` or URL, with TLS, mutual TLS and a bearer
//!   token ([`ConnectOptions`]);
//! - [`Error`]: every failure by the contract's [`Reason`], saying whether a retry with the
//!   same idempotency key is safe ([`Error::is_retry_safe`]);
//! - [`pb`]: the contract's messages and the generated gRPC client (and, with the `server`
//!   feature, the server stubs the ledger itself is built on, so both sides share one set of
//!   types).
//!
//! # Example
//!
//! A program that creates two accounts (or finds them, when a run before made them), records
//! a payment and reads a balance; the README and `docs/client.md` show it, with the lines of
//! its `Cargo.toml` (the crate by path or git, and tokio with `macros` and
//! `rt-multi-thread`). It is `no_run` here because it needs a ledger server at
//! 127.0.0.1:50051: `tests/it/client.rs`
//! (`the_client_example_of_the_docs_runs_as_written_on_a_fresh_server_and_again`) runs the
//! same lines against a fresh server, twice, and checks that they are the ones in the docs.
//!
//! ```no_run
//! use ledger_client::{AsOf, Client, ClientOptions, Decimal, NewAccount, NewPosting, NormalBalance};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), ledger_client::Error> {
//!     let ledger = Client::connect(ClientOptions::new("127.0.0.1:50051")).await?;
//!     // An account's attributes never change: creating one that exists as asked finds it (safe on every run).
//!     for account in [
//!         NewAccount::new("assets:bank", "EUR", 2, NormalBalance::Debit),
//!         NewAccount::new("liabilities:wallet:alice", "EUR", 2, NormalBalance::Credit)
//!             .metadata("owner", "alice"),
//!     ] {
//!         ledger.create_account(account).await?;
//!     }
//!     let amount = Decimal::new(1250, 2); // 12.50, at most the account's scale
//!     let payment = NewPosting::new("order-1042/payment") // the same key on every retry
//!         .debit("assets:bank", amount)
//!         .credit("liabilities:wallet:alice", amount);
//!     let posted = ledger.post(payment).await?; // retried while its outcome is unknown
//!     println!("{} at sequence {}", posted.posting.posting_id, posted.posting.sequence);
//!     let wallet = ledger.balance("liabilities:wallet:alice", AsOf::now()).await?;
//!     println!("alice holds {} {}", wallet.balance, wallet.currency); // exact, at its scale
//!     Ok(())
//! }
//! ```

mod amount;
mod calls;
mod client;
mod coalesce;
mod connect;
mod error;
mod retry;
mod types;

pub use amount::{from_wire, to_wire, to_wire_signed, Amount, MAX_AMOUNT_DIGITS, MAX_SCALE};
pub use calls::{ClientStats, MAX_BATCH_REQUESTS, MAX_BATCH_REQUEST_BYTES};
pub use client::{Client, ClientOptions, PostingBy, PostingPage, MAX_CACHED_ACCOUNTS, PAGE_SIZE};
pub use coalesce::{Coalesce, COALESCE_MAX_IN_FLIGHT, COALESCE_QUEUE_CALLS};
pub use connect::{
    chain, connect, server_url, Bearer, ConnectOptions, RawClient, CONNECT_TIMEOUT,
    MAX_RESPONSE_BYTES,
};
pub use error::{Error, ErrorKind, Reason, ERROR_DOMAIN};
pub use retry::{
    RetryPolicy, ATTEMPT_TIMEOUT, RETRY_FIRST_BACKOFF, RETRY_MAX_ATTEMPTS, RETRY_MAX_BACKOFF,
};
pub use rust_decimal::Decimal;
pub use types::{
    validate_ledger_code, Account, AccountStatus, AccountUpdate, AccountVersionInfo, Applied, AsOf,
    Balance, Condition, ConditionCheck, CreatedLedger, CurrencyTotal, DebitLimit, Direction, Entry,
    Hold, HoldStatus, Ledger, LedgerPage, Leg, Metadata, NewAccount, NewCapture, NewLedger,
    NewPosting, NewVoid, NormalBalance, Posted, Posting, PostingFilter, PostingKind, Rollup,
    RollupTotal, Rollups, TimeRange, TrialBalance, DEFAULT_LEDGER, MAX_LEDGER_CODE_CHARS,
};

/// The contract `ledger.v1`: messages and the gRPC client (server stubs with `server`).
/// `google.rpc.Status` (a `PostBatch` result's error) is `tonic_types::pb::Status`.
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("ledger.v1");
}

/// The encoded descriptor set of `ledger.v1` (served by reflection).
#[cfg(feature = "server")]
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/ledger_descriptor.bin"));
