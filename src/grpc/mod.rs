//! The thin gRPC adapter: generated code, proto ↔ domain conversion, error mapping, and the
//! `ledger.v1.Ledger` service implementation that calls [`crate::service::Ledger`].

pub mod convert;
pub mod handlers;
pub mod status;

/// Generated protobuf and tonic code for `ledger.v1`.
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("ledger.v1");
}

/// The encoded descriptor set of `ledger.v1` (served by reflection).
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/ledger_descriptor.bin"));

/// The authenticated caller of a request (set by the auth layer; `anonymous` without one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller(pub String);

/// The caller name used when authentication is off.
pub const ANONYMOUS: &str = "anonymous";
