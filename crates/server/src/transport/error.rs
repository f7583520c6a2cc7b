//! What the transport answers by itself, in place of a call's handler: its own errors, in its
//! own terms (the deadline, the response budget). It knows nothing of the ledger: the layer
//! above maps each to the contract's status with a [`StatusOf`] handed to [`super::spawn`].

use super::deadline::Deadline;
use std::fmt;

/// Why the transport answered a call itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransportError {
    /// The call's `grpc-timeout` header does not follow the grammar (why, in words).
    MalformedTimeout(String),
    /// The call's deadline passed before its answer was ready.
    DeadlineExceeded(Deadline),
    /// A response of `bytes` does not fit in what is left of the bytes held for responses
    /// clients have not taken (`held` of `limit`, RESPONSE_BYTES_IN_FLIGHT).
    OverBudget {
        bytes: usize,
        held: usize,
        limit: usize,
    },
}

/// The status a transport error is answered with on the wire (the contract's, set by the
/// layer that knows it).
pub type StatusOf = fn(TransportError) -> tonic::Status;

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportError::MalformedTimeout(why) => f.write_str(why),
            TransportError::DeadlineExceeded(d) if d.by_client => {
                write!(f, "the caller's grpc-timeout ({:?}) passed", d.after)
            }
            TransportError::DeadlineExceeded(d) => {
                write!(f, "the server's limit REQUEST_TIMEOUT ({:?}) passed", d.after)
            }
            TransportError::OverBudget { bytes, held, limit } => write!(
                f,
                "a response of {bytes} bytes does not fit: {held} of {limit} bytes are held (limit RESPONSE_BYTES_IN_FLIGHT)"
            ),
        }
    }
}

impl std::error::Error for TransportError {}
