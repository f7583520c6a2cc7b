//! The posting hash: SHA-256 over a canonical encoding of a posting as it was recorded (every
//! field `GetPosting` returns that cannot change later) and the hash of the posting before it
//! in its ledger, so each ledger's journal is a hash chain. `docs/verifiable.md` describes the
//! encoding byte by byte for an auditor.

use crate::account::{Direction, Metadata};
use crate::ledger::in_ledger;
use crate::record::{PostedLeg, Posting, PostingKind};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use uuid::Uuid;

/// A SHA-256 digest: a posting hash, a Merkle tree node or root.
pub type Hash = [u8; 32];

/// The "previous hash" of a ledger's first posting: 32 zero bytes.
pub const GENESIS: Hash = [0; 32];

/// The domain tag that starts every encoding (a new encoding gets a new tag).
pub const DOMAIN_TAG: &str = "ledger.posting.v1";

/// A posting's facts at its recording: what the hash covers. Later state (`voided_by`, a hold's
/// status and the posting that closed it) is not here, so a posting's hash never changes.
///
/// Build it with [`PostingAtRecording::of`] from a [`Posting`] read from storage or planned by
/// the writer; the fields are public for a verifier that holds them from elsewhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PostingAtRecording<'a> {
    /// The sequence within the ledger (1, 2, 3 …; what `GetPosting` returns), not the stored one.
    pub sequence: u64,
    /// The posting's id.
    pub posting_id: Uuid,
    /// Who recorded it.
    pub caller: &'a str,
    /// The key it was recorded under.
    pub idempotency_key: &'a str,
    /// When it happened economically.
    pub effective_at: OffsetDateTime,
    /// When the ledger recorded it.
    pub recorded_at: OffsetDateTime,
    /// Its memo (empty: none).
    pub memo: &'a str,
    /// Its metadata; encoded sorted by key bytes whatever the order it was built in.
    pub metadata: &'a Metadata,
    /// Its legs in the order sent; each amount renders with its account's scale.
    pub legs: &'a [PostedLeg],
    /// What it is.
    pub kind: PostingKind,
    /// On a void (and on the release of a hold, which voids it): the posting it voids.
    pub voids_posting_id: Option<Uuid>,
    /// On a void: its reason. Encoded present exactly when `voids_posting_id` is (an absent
    /// reason of a void is the empty string, as `GetPosting` shows it).
    pub void_reason: Option<&'a str>,
    /// On a hold with an expiry: the expiry time.
    pub hold_expires_at: Option<OffsetDateTime>,
    /// On a capture, a release or an expiry: the hold it closes.
    pub closes_hold: Option<Uuid>,
}

impl<'a> PostingAtRecording<'a> {
    /// The facts of `p` at its recording. `p.sequence` may be the stored sequence (it is
    /// reduced to the sequence within the ledger) or already the sequence within the ledger.
    pub fn of(p: &'a Posting) -> PostingAtRecording<'a> {
        PostingAtRecording {
            sequence: in_ledger(p.sequence as i64) as u64,
            posting_id: p.posting_id,
            caller: &p.caller,
            idempotency_key: &p.idempotency_key,
            effective_at: p.effective_at,
            recorded_at: p.recorded_at,
            memo: &p.memo,
            metadata: &p.metadata,
            legs: &p.legs,
            kind: p.kind(),
            voids_posting_id: p.voids_posting_id,
            void_reason: p.void_reason.as_deref(),
            hold_expires_at: p.hold.and_then(|h| h.expires_at),
            closes_hold: p.closes.map(|c| c.hold),
        }
    }
}

impl<'a> From<&'a Posting> for PostingAtRecording<'a> {
    fn from(p: &'a Posting) -> PostingAtRecording<'a> {
        PostingAtRecording::of(p)
    }
}

/// The lower-case name of a kind, as the encoding carries it (`PostingKind` of the contract
/// without its `POSTING_KIND_` prefix).
pub fn kind_name(kind: PostingKind) -> &'static str {
    match kind {
        PostingKind::Posting => "posting",
        PostingKind::Hold => "hold",
        PostingKind::Capture => "capture",
        PostingKind::Release => "release",
        PostingKind::Expiry => "expiry",
        PostingKind::Void => "void",
    }
}

/// A time as the encoding carries it: microseconds since the Unix epoch. PostgreSQL keeps
/// whole microseconds, so a recorded time has none below; a time that does is truncated toward
/// negative infinity (`…00.0000019Z` is 1 µs, `…59.9999991Z` before the epoch is −1 µs).
pub fn micros(t: OffsetDateTime) -> i64 {
    // `time` keeps years within ±9999: about ±3.2e17 µs, well inside an i64.
    t.unix_timestamp_nanos().div_euclid(1_000) as i64
}

/// The canonical encoding builder: big-endian integers, length-prefixed strings.
struct Encoder(Vec<u8>);

impl Encoder {
    fn str(&mut self, s: &str) {
        self.0.extend_from_slice(&(s.len() as u32).to_be_bytes());
        self.0.extend_from_slice(s.as_bytes());
    }

    fn time(&mut self, t: OffsetDateTime) {
        self.0.extend_from_slice(&micros(t).to_be_bytes());
    }

    fn uuid(&mut self, u: Uuid) {
        self.0.extend_from_slice(u.as_bytes());
    }

    fn count(&mut self, n: usize) {
        self.0.extend_from_slice(&(n as u32).to_be_bytes());
    }

    fn opt<T>(&mut self, v: Option<T>, put: impl FnOnce(&mut Encoder, T)) {
        match v {
            None => self.0.push(0x00),
            Some(x) => {
                self.0.push(0x01);
                put(self, x);
            }
        }
    }
}

/// The canonical encoding of posting `p` of ledger `ledger_code` after a posting of hash
/// `prev` ([`GENESIS`] for the ledger's first): the bytes [`posting_hash`] digests, in the
/// order and form `docs/verifiable.md` tables.
pub fn encode(ledger_code: &str, prev: &Hash, p: &PostingAtRecording) -> Vec<u8> {
    let mut e = Encoder(Vec::with_capacity(256));
    e.str(DOMAIN_TAG);
    e.0.extend_from_slice(prev);
    e.str(ledger_code);
    e.0.extend_from_slice(&p.sequence.to_be_bytes());
    e.uuid(p.posting_id);
    e.str(p.caller);
    e.str(p.idempotency_key);
    e.time(p.effective_at);
    e.time(p.recorded_at);
    e.str(p.memo);
    // A BTreeMap of Strings iterates in key byte order (str's order is its bytes').
    e.count(p.metadata.len());
    for (k, v) in p.metadata {
        e.str(k);
        e.str(v);
    }
    e.count(p.legs.len());
    for leg in p.legs {
        e.str(&leg.account);
        e.0.push(match leg.direction {
            Direction::Debit => 0x01,
            Direction::Credit => 0x02,
        });
        e.str(&leg.amount.to_string());
    }
    e.str(kind_name(p.kind));
    e.opt(p.voids_posting_id, Encoder::uuid);
    let reason = p.voids_posting_id.map(|_| p.void_reason.unwrap_or(""));
    e.opt(reason, Encoder::str);
    e.opt(p.hold_expires_at, Encoder::time);
    e.opt(p.closes_hold, Encoder::uuid);
    e.0
}

/// The posting hash: SHA-256 of [`encode`].
pub fn posting_hash(ledger_code: &str, prev: &Hash, p: &PostingAtRecording) -> Hash {
    Sha256::digest(encode(ledger_code, prev, p)).into()
}

/// Lower-case hex of a hash (64 characters).
pub fn to_hex(h: &Hash) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(64);
    for b in h {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

/// A hash from exactly 64 hex characters, lower or upper case.
pub fn from_hex(text: &str) -> Result<Hash, String> {
    let count = text.chars().count();
    if count != 64 {
        return Err(format!("a hash is 64 hexadecimal characters, got {count}"));
    }
    let nibble = |(i, c): (usize, char)| {
        c.to_digit(16).map(|d| d as u8).ok_or_else(|| {
            format!("character {c:?} at position {i} of a hash is not a hexadecimal digit")
        })
    };
    let nibbles = text
        .chars()
        .enumerate()
        .map(nibble)
        .collect::<Result<Vec<u8>, String>>()?;
    let mut out = GENESIS;
    for (i, pair) in nibbles.chunks_exact(2).enumerate() {
        out[i] = pair[0] << 4 | pair[1];
    }
    Ok(out)
}
