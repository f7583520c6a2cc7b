//! The thin gRPC adapter: generated code, proto ↔ domain conversion, error mapping, and the
//! `ledger.v1.Ledger` service implementation that calls [`crate::service::Ledger`].

pub mod convert;
pub mod handlers;
pub mod journal;
pub mod sized;
pub mod status;

/// The contract's generated protobuf and tonic code (`ledger.v1`), shared with the client
/// crate so server and clients use one set of types.
pub use ledger_client::pb;

/// The encoded descriptor set of `ledger.v1` (served by reflection).
pub use ledger_client::FILE_DESCRIPTOR_SET;

/// The authenticated caller of a request (set by the auth layer): its name, at most
/// [`MAX_CALLER_BYTES`] as the auth file's names are (`access::auth`), and the ledgers its
/// line grants. Without authentication it is [`Caller::anonymous`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
    pub grants: ledger_core::ledger::Grants,
}

impl Caller {
    /// The caller of every call when authentication is off: `anonymous`, granted every ledger.
    pub fn anonymous() -> Caller {
        Caller {
            name: ANONYMOUS.to_owned(),
            grants: ledger_core::ledger::Grants::All,
        }
    }
}

/// The caller name used when authentication is off.
pub const ANONYMOUS: &str = "anonymous";

/// Bytes of a caller name (limit MAX_CALLER_BYTES): the auth file's names are checked against
/// it, and every answer's size is bounded with it (`sized.rs`).
pub const MAX_CALLER_BYTES: usize = ledger_core::limits::MAX_CALLER_BYTES;
