//! The pure domain core: amounts, accounts, postings, validation, the batch decision engine.
//! No I/O, no async, no SQL, no transport types.

pub mod account;
pub mod amount;
pub mod engine;
pub mod error;
pub mod hold;
pub mod journal;
pub mod ledger;
pub mod limits;
pub mod page;
pub mod page_token;
pub mod period;
pub mod posting;
pub mod record;
pub mod rollup;
pub mod search;
pub mod statement;
pub mod terms;
pub mod write;

pub use account::{Account, Direction, Metadata, NewAccount, NormalBalance};
pub use amount::Amount;
pub use error::{LedgerError, Reason};
