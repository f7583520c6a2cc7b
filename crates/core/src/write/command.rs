//! What the writer is asked to do: commands, requests, their keys and operations.

use crate::error::LedgerError;
use crate::hold::{expiry_key, ValidCapture, LEDGER_CALLER};
use crate::period::{PeriodClose, ValidClose};
use crate::posting::{Fingerprint, ValidPost, ValidVoid};
use crate::record::{Decided, Posting};
use crate::terms::AccountVersion;
use crate::terms::ValidUpdate;
use std::collections::HashMap;
use uuid::Uuid;

/// What a caller asked the writer to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Post(ValidPost),
    Void(ValidVoid),
    Capture(ValidCapture),
    /// The ledger's own release of an expired hold (caller [`LEDGER_CALLER`]).
    Expire(ValidExpire),
    /// A new version of an account's terms.
    Update(Box<ValidUpdate>),
    /// A period close.
    Close(ValidClose),
}

/// The release of an expired hold, as the expiry task asks for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidExpire {
    pub idempotency_key: String,
    pub hold: Uuid,
    pub fingerprint: Fingerprint,
}

impl ValidExpire {
    /// The release of `hold`, under its own key (`expire:<hold>`).
    pub fn of(hold: Uuid) -> ValidExpire {
        let mut fingerprint = [0u8; 32];
        fingerprint[..16].copy_from_slice(hold.as_bytes());
        fingerprint[16..].copy_from_slice(b"expire/v1\0\0\0\0\0\0\0");
        ValidExpire {
            idempotency_key: expiry_key(hold),
            hold,
            fingerprint,
        }
    }

    /// The request the expiry task submits.
    pub fn request(hold: Uuid) -> WriteRequest {
        WriteRequest {
            caller: LEDGER_CALLER.to_owned(),
            command: Command::Expire(ValidExpire::of(hold)),
        }
    }
}

/// The operation a key was decided by (stored with the key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Post,
    Void,
    Capture,
    Expire,
    Update,
    Close,
}

impl Operation {
    /// As stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Post => "post",
            Operation::Void => "void",
            Operation::Capture => "capture",
            Operation::Expire => "expire",
            Operation::Update => "update",
            Operation::Close => "close",
        }
    }

    /// From its stored name.
    pub fn parse(s: &str) -> Option<Operation> {
        match s {
            "post" => Some(Operation::Post),
            "void" => Some(Operation::Void),
            "capture" => Some(Operation::Capture),
            "expire" => Some(Operation::Expire),
            "update" => Some(Operation::Update),
            "close" => Some(Operation::Close),
            _ => None,
        }
    }
}

impl Command {
    /// The caller's idempotency key.
    pub fn key(&self) -> &str {
        match self {
            Command::Post(p) => &p.idempotency_key,
            Command::Void(v) => &v.idempotency_key,
            Command::Capture(c) => &c.idempotency_key,
            Command::Expire(x) => &x.idempotency_key,
            Command::Update(u) => &u.idempotency_key,
            Command::Close(c) => &c.idempotency_key,
        }
    }

    pub fn operation(&self) -> Operation {
        match self {
            Command::Post(_) => Operation::Post,
            Command::Void(_) => Operation::Void,
            Command::Capture(_) => Operation::Capture,
            Command::Expire(_) => Operation::Expire,
            Command::Update(_) => Operation::Update,
            Command::Close(_) => Operation::Close,
        }
    }

    /// What the request means (two requests under one key are the same when these agree).
    pub fn fingerprint(&self) -> &Fingerprint {
        match self {
            Command::Post(p) => &p.fingerprint,
            Command::Void(v) => &v.fingerprint,
            Command::Capture(c) => &c.fingerprint,
            Command::Expire(x) => &x.fingerprint,
            Command::Update(u) => &u.fingerprint,
            Command::Close(c) => &c.fingerprint,
        }
    }

    /// The posting this request acts on, if any: a void's target, a capture's or an
    /// expiry's hold.
    pub fn target(&self) -> Option<Uuid> {
        match self {
            Command::Post(_) | Command::Update(_) | Command::Close(_) => None,
            Command::Void(v) => Some(v.target),
            Command::Capture(c) => Some(c.hold),
            Command::Expire(x) => Some(x.hold),
        }
    }
}

/// One request in a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteRequest {
    pub caller: String,
    pub command: Command,
}

/// The answer to one request.
pub type Outcome = Result<Written, LedgerError>;

/// The (account, window seconds) of the debit limits the batch's updates set: the load
/// reads their windows too ([`crate::terms::DebitWindow`]), so a posting decided after such
/// an update in the same batch finds them.
pub fn update_windows(requests: &[WriteRequest]) -> Vec<(i64, u32)> {
    let mut w: Vec<(i64, u32)> = requests
        .iter()
        .filter_map(|r| match &r.command {
            Command::Update(u) => u.change.debit_limits.as_ref().map(|l| (u.account_id, l)),
            _ => None,
        })
        .flat_map(|(id, limits)| limits.iter().map(move |l| (id, l.window_seconds)))
        .collect();
    w.sort_unstable();
    w.dedup();
    w
}

/// The first request of each distinct (caller, key), in batch order: the requests storage
/// claims keys for and [`Snapshot::keys`] follows. Later requests with a key already seen
/// in the batch are answered from the first.
pub fn distinct_keys(requests: &[WriteRequest]) -> Vec<usize> {
    let mut seen: HashMap<(&str, &str), ()> = HashMap::with_capacity(requests.len());
    (0..requests.len())
        .filter(|&i| {
            let r = &requests[i];
            seen.insert((r.caller.as_str(), r.command.key()), ())
                .is_none()
        })
        .collect()
}

/// What a write recorded: a posting, a version of an account's terms, or a period close.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Done {
    Posting(Posting),
    Version(AccountVersion),
    Close(PeriodClose),
}

/// The answer to any write request: what it recorded, and whether an earlier request did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    pub done: Done,
    pub replayed: bool,
}

impl Written {
    /// The posting recorded, if it is one.
    pub fn posting(&self) -> Option<&Posting> {
        match &self.done {
            Done::Posting(p) => Some(p),
            Done::Version(_) | Done::Close(_) => None,
        }
    }

    /// The answer to a request that records a posting (a post, void, capture or expiry).
    /// A version there is the writer's own bug: the key's operation decides which it is.
    pub fn posted(self) -> Decided {
        match self.done {
            Done::Posting(posting) => Decided {
                posting,
                replayed: self.replayed,
            },
            Done::Version(_) | Done::Close(_) => {
                panic!("a posting request was answered with an account version or a close")
            }
        }
    }

    /// The answer to an update; a posting there is the writer's own bug.
    pub fn updated(self) -> (AccountVersion, bool) {
        match self.done {
            Done::Version(v) => (v, self.replayed),
            _ => panic!("an account update was answered with a posting or a close"),
        }
    }

    /// The answer to a period close; anything else there is the writer's own bug.
    pub fn closed(self) -> (PeriodClose, bool) {
        match self.done {
            Done::Close(c) => (c, self.replayed),
            _ => panic!("a period close was answered with a posting or a version"),
        }
    }
}
