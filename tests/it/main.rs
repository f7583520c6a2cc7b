//! Integration tests: the real server over gRPC on a real, migrated PostgreSQL database per test.

mod support;

mod access;
mod accounts;
mod append_only;
mod embedded;
mod hostile;
mod idempotency;
mod ops;
mod posting;
mod reads;
mod void;
