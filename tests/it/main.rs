//! Integration tests: the real server over gRPC on a real, migrated PostgreSQL database per test.

mod support;

mod accounts;
mod append_only;
mod embedded;
mod idempotency;
mod posting;
mod reads;
mod throughput;
mod void;
