//! The ledger service: an append-only double-entry ledger over gRPC and PostgreSQL.
//!
//! The server's rooms, from the wire inwards:
//!
//! - [`transport`]: our HTTP/2 serve loop: connections, streams, deadlines, response bytes.
//! - [`access`]: the layer around the ledger service: drain, authentication and roles,
//!   contract errors for transport failures, one metric and log line per request.
//! - [`grpc`]: the thin adapter: proto ↔ domain conversion, the one error → status mapping.
//! - [`service`]: the ledger's operations: validation, account lookups, paged reads.
//! - [`writer`]: the write queue and its lanes: each batch load → decide → write.
//! - [`domain`]: the pure core: amounts, accounts, postings, every write rule (`decide`).
//! - [`storage`]: the only SQL: pool, migrations, the batch's load and write, reads, check.
//! - [`outbox`]: the publisher that delivers the outbox's events to NATS JetStream.
//! - [`embedded_pg`]: the private PostgreSQL of the default mode; [`embedded_recovery`]:
//!   `serve` starts it again when its postmaster dies, or exits.
//! - [`server`]: boots the rooms together; [`tuning`]: their knobs in one value;
//!   [`metrics`]: the Prometheus endpoint.
//!
//! Beside them, [`cli`] (the `ledger` command line) and [`tools`]: the client commands
//! (account, post, void, posting, balance, report, bench, bench-as-of), callers of a running
//! server like any other.

pub mod access;
pub mod cli;
pub mod domain;
pub mod embedded_pg;
pub mod embedded_recovery;
pub mod grpc;
pub mod metrics;
pub mod outbox;
pub mod server;
pub mod service;
pub mod storage;
pub mod tools;
pub mod transport;
pub mod tuning;
pub mod writer;

/// A failure of any kind, with its cause chain: what the process-level paths (start-up, the
/// command line, the tools) return.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
