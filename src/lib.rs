//! The ledger service: an append-only double-entry ledger over gRPC and PostgreSQL.

pub mod bench;
pub mod cli;
pub mod domain;
pub mod embedded_pg;
pub mod grpc;
pub mod server;
pub mod service;
pub mod storage;
pub mod writer;
