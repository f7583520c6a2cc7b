//! The ledger service: an append-only double-entry ledger over gRPC and PostgreSQL.

pub mod access;
pub mod bench;
pub mod bench_asof;
pub mod cli;
pub mod domain;
pub mod embedded_pg;
pub mod grpc;
pub mod metrics;
pub mod outbox;
pub mod report;
pub mod server;
pub mod service;
pub mod storage;
pub mod tools;
pub mod transport;
pub mod tuning;
pub mod writer;
