//! The `ledger` command line: [`cli`] parses it (serve, the operator commands, the client
//! commands, the benchmarks) and [`tools`] are the client commands and benchmarks, callers of a
//! running server like any other (over gRPC through `ledger-client`), or of the writer's steps
//! directly (`bench-writer`, `bench-decide`).

pub mod cli;
pub mod tools;

pub use ledger_server::BoxError;
