//! Integration tests: the real server over gRPC on a real, migrated PostgreSQL database per test.

mod support;

mod accounts;
mod append_only;
mod asof;
mod check;
mod embedded;
mod faults;
mod history;
mod idempotency;
mod outbox;
mod posting;
mod reads;
mod server_surface;
mod throughput;
mod void;
