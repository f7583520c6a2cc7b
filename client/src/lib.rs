//! `ledger-client`: the Rust client of the ledger service.
//!
//! - [`pb`]: the contract's messages and the generated gRPC client (and, with the `server`
//!   feature, the server stubs the ledger itself is built on, so both sides share one set of
//!   types);
//! - [`connect()`]: reaching a server by `host:port` or URL, with TLS, mutual TLS and a bearer
//!   token;
//! - [`Error`]: every failure by the contract's [`Reason`], saying whether a retry with the
//!   same idempotency key is safe.

mod connect;
mod error;

pub use connect::{
    chain, connect, server_url, Bearer, ConnectOptions, RawClient, CONNECT_TIMEOUT,
    MAX_RESPONSE_BYTES,
};
pub use error::{Error, ErrorKind, Reason, ERROR_DOMAIN};

/// The contract `ledger.v1`: messages and the gRPC client (server stubs with `server`).
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("ledger.v1");
}

/// The encoded descriptor set of `ledger.v1` (served by reflection).
#[cfg(feature = "server")]
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/ledger_descriptor.bin"));
