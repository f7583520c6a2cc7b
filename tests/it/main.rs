//! Integration tests: the real server over gRPC on a real, migrated PostgreSQL database per test.

mod support;

mod access;
mod accounts;
mod append_only;
mod asof;
mod batch;
mod check;
mod cli;
mod client;
mod corrupt;
mod embedded;
mod embedded_recovery;
mod faults;
mod ha;
mod history;
mod holds;
mod hostile;
mod idempotency;
mod lookups;
pub mod ops;
mod outbox;
mod pages;
mod pipes;
mod posting;
mod readme;
mod reads;
mod roles;
mod rooms;
mod server_surface;
mod throughput;
mod tidy;
mod timestamps;
mod transport;
mod upgrade;
mod validation;
mod void;
