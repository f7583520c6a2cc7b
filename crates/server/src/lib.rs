//! The ledger service: an append-only double-entry ledger over gRPC and PostgreSQL. It knows
//! the ledger's rules only through `ledger-core`, which decides every write.
//!
//! The rooms, from the wire inwards:
//!
//! - [`transport`]: our HTTP/2 serve loop: connections, streams, deadlines, response bytes.
//! - [`access`]: the layer around the ledger service: drain, authentication and roles,
//!   contract errors for transport failures, one metric and log line per request.
//! - [`grpc`]: the thin adapter: proto ↔ core conversion, the one error → status mapping.
//! - [`service`]: the ledger's operations: validation, account lookups, paged reads.
//! - [`writer`]: the write queue and its lanes: each batch load → decide → write.
//! - [`storage`]: the only SQL: pool, migrations, the batch's load and write, reads, check.
//! - [`outbox`]: the publisher that delivers the outbox's events to NATS JetStream.
//! - [`embedded_pg`]: the private PostgreSQL of the default mode.
//! - [`server`]: boots the rooms together; [`tuning`]: their knobs in one value;
//!   [`metrics`]: the Prometheus endpoint.

pub mod access;
pub mod embedded_pg;
pub mod grpc;
pub mod metrics;
pub mod outbox;
pub mod server;
pub mod service;
pub mod storage;
pub mod transport;
pub mod tuning;
pub mod writer;

/// A failure of any kind, with its cause chain: what the process-level paths (start-up, the
/// command line, the tools) return.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
