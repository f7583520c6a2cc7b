//! Integration tests: the real server over gRPC on a real, migrated PostgreSQL database per test.

mod support;

mod access;
mod accounts;
mod append_only;
mod check;
mod asof;
mod embedded;
mod faults;
mod history;
mod idempotency;
mod outbox;
mod hostile;
mod ops;
mod posting;
mod reads;
mod server_surface;
mod void;
