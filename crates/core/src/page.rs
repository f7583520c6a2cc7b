//! Pages of List* answers: at most the page size in items, and at most [`MAX_PAGE_BYTES`]
//! encoded. Within the documented limits one item can be large (an account with 32 metadata
//! entries of the largest size is about 19 kB, a posting of 100 legs with a full memo and
//! metadata about 40 kB), so 1,000 of them would be larger than any response should be; a
//! page ends early, with a next page token, when the next item would take it past the limit.

use super::account::Account;
use super::limits::{
    MAX_ACCOUNT_CODE_CHARS, MAX_CALLER_BYTES, MAX_CURRENCY_CHARS, MAX_DEBIT_LIMITS,
    MAX_IDEMPOTENCY_KEY_BYTES, MAX_LEDGER_CODE_CHARS, MAX_MEMO_BYTES, MAX_PAGE_BYTES,
    MAX_PAGE_SIZE,
};
use super::record::{Balance, CurrencyTotal, Entry, Posting};
use super::rollup::Rollup;

/// An upper bound of the bytes an item takes in a response's protobuf encoding. Each field
/// is counted at its content plus [`FIELD_OVERHEAD`] (tag and length), which bounds the
/// encoding of any field under 2 MiB; the tests check it against the real encoding.
pub trait WireSize {
    fn wire_size(&self) -> usize;
}

/// Bytes of a field's tag and length prefix, at most (1 + a varint of up to 3 bytes).
pub const FIELD_OVERHEAD: usize = 4;
/// Bytes of a rendered amount, at most (39 digits of an i128, a sign, a point, the zeros of
/// a scale of 18).
pub const AMOUNT_TEXT_MAX: usize = 64;
/// Bytes of a varint or a fixed scalar field, at most (tag and a 10-byte varint).
const SCALAR: usize = 11;
/// Bytes of a timestamp field, at most (seconds and nanos varints in a sub-message).
const TIMESTAMP: usize = 24;
/// Bytes of a UUID rendered as text.
const UUID_TEXT: usize = 36;
/// Bytes of the ledger code an account or a posting carries, at most.
const LEDGER_CODE: usize = FIELD_OVERHEAD + MAX_LEDGER_CODE_CHARS;

fn text(s: &str) -> usize {
    FIELD_OVERHEAD + s.len()
}

fn map(m: &std::collections::BTreeMap<String, String>) -> usize {
    m.iter()
        .map(|(k, v)| FIELD_OVERHEAD + text(k) + text(v))
        .sum()
}

impl WireSize for Account {
    fn wire_size(&self) -> usize {
        FIELD_OVERHEAD
            + text(&self.code)
            + text(&self.currency)
            + 3 * SCALAR
            + map(&self.metadata)
            + TIMESTAMP
            + LEDGER_CODE
            + ACCOUNT_VERSION_MAX
    }
}

/// The most an account's version adds to its message: version and status, floor and
/// ceiling, its debit limits, and the version's facts (time, sequence, caller, reason, the
/// paths changed, key).
const ACCOUNT_VERSION_MAX: usize = 2 * SCALAR
    + 2 * (FIELD_OVERHEAD + AMOUNT_TEXT_MAX)
    + MAX_DEBIT_LIMITS * (2 * FIELD_OVERHEAD + AMOUNT_TEXT_MAX + SCALAR)
    + FIELD_OVERHEAD
    + TIMESTAMP
    + SCALAR
    + FIELD_OVERHEAD
    + MAX_CALLER_BYTES
    + FIELD_OVERHEAD
    + MAX_MEMO_BYTES
    + 4 * (FIELD_OVERHEAD + 16)
    + FIELD_OVERHEAD
    + MAX_IDEMPOTENCY_KEY_BYTES;

impl WireSize for Posting {
    fn wire_size(&self) -> usize {
        let legs: usize = self
            .legs
            .iter()
            .map(|l| {
                2 * FIELD_OVERHEAD + l.account.len() + SCALAR + FIELD_OVERHEAD + AMOUNT_TEXT_MAX
            })
            .sum();
        FIELD_OVERHEAD
            + 3 * (FIELD_OVERHEAD + UUID_TEXT)
            + SCALAR
            + text(&self.idempotency_key)
            + legs
            + 2 * TIMESTAMP
            + text(&self.memo)
            + map(&self.metadata)
            + self.void_reason.as_deref().map_or(0, text)
            + text(&self.caller)
            + HOLD_FIELDS
            + LEDGER_CODE
    }
}

/// A posting's kind and hold fields, at most: the kind, the flag, the expiry, the status, and
/// the ids of the postings that closed it or that it closes (captures or releases; a posting
/// names at most two of these four).
const HOLD_FIELDS: usize = 3 * SCALAR + TIMESTAMP + 3 * (FIELD_OVERHEAD + UUID_TEXT);

impl WireSize for Balance {
    fn wire_size(&self) -> usize {
        FIELD_OVERHEAD
            + text(&self.account)
            + text(&self.currency)
            + 6 * (FIELD_OVERHEAD + AMOUNT_TEXT_MAX)
            + 2 * SCALAR
            + FIELD_OVERHEAD
            + 2 * TIMESTAMP
    }
}

impl WireSize for CurrencyTotal {
    fn wire_size(&self) -> usize {
        FIELD_OVERHEAD + text(&self.currency) + 4 * (FIELD_OVERHEAD + AMOUNT_TEXT_MAX)
    }
}

impl WireSize for Rollup {
    fn wire_size(&self) -> usize {
        let totals: usize = self
            .totals
            .iter()
            .map(|t| 2 * FIELD_OVERHEAD + t.currency.len() + 6 * (FIELD_OVERHEAD + AMOUNT_TEXT_MAX))
            .sum();
        FIELD_OVERHEAD + text(&self.node) + SCALAR + totals
    }
}

impl WireSize for Entry {
    fn wire_size(&self) -> usize {
        ENTRY_WIRE_MAX
    }
}

/// An entry's bytes, at most: its fields are all of bounded size.
pub const ENTRY_WIRE_MAX: usize = FIELD_OVERHEAD
    + (FIELD_OVERHEAD + UUID_TEXT)
    + 2 * SCALAR
    + 2 * TIMESTAMP
    + 2 * (FIELD_OVERHEAD + AMOUNT_TEXT_MAX);

/// A balance's bytes, at most (its texts are bounded by the code and currency limits).
pub const BALANCE_WIRE_MAX: usize = FIELD_OVERHEAD
    + (FIELD_OVERHEAD + MAX_ACCOUNT_CODE_CHARS)
    + (FIELD_OVERHEAD + MAX_CURRENCY_CHARS)
    + 6 * (FIELD_OVERHEAD + AMOUNT_TEXT_MAX)
    + SCALAR
    + FIELD_OVERHEAD
    + 2 * TIMESTAMP;

// A full page of statement lines or balances always fits: only accounts and postings, whose
// size depends on metadata, memos and legs, can end a page early.
const _: () = assert!(ENTRY_WIRE_MAX * MAX_PAGE_SIZE as usize <= MAX_PAGE_BYTES);
const _: () = assert!(BALANCE_WIRE_MAX * MAX_PAGE_SIZE as usize <= MAX_PAGE_BYTES / 2);

/// A page being filled: it takes items while it has room in count and bytes.
#[derive(Debug)]
pub struct Fill<T> {
    items: Vec<T>,
    bytes: usize,
    limit: usize,
}

impl<T: WireSize> Fill<T> {
    /// A page of at most `limit` items, of which `reserved` bytes are already spoken for (a
    /// trial balance's totals).
    pub fn new(limit: usize, reserved: usize) -> Fill<T> {
        Fill {
            items: Vec::new(),
            bytes: reserved,
            limit,
        }
    }

    /// Items the page can still take, by count.
    pub fn room(&self) -> usize {
        self.limit - self.items.len()
    }

    /// Takes `item` if the page has room for it; `false` means the page is full and `item`
    /// starts the next one. The first item is always taken, so every page moves on.
    pub fn offer(&mut self, item: T) -> bool {
        let size = item.wire_size();
        let fits = self.bytes + size <= MAX_PAGE_BYTES || self.items.is_empty();
        if self.items.len() == self.limit || !fits {
            return false;
        }
        self.bytes += size;
        self.items.push(item);
        true
    }

    /// The last item taken.
    pub fn last(&self) -> Option<&T> {
        self.items.last()
    }

    /// The page's items.
    pub fn into_items(self) -> Vec<T> {
        self.items
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Sized(usize);
    impl WireSize for Sized {
        fn wire_size(&self) -> usize {
            self.0
        }
    }

    #[test]
    fn a_page_ends_at_its_size_or_when_the_next_item_would_pass_the_byte_limit() {
        let mut f = Fill::new(3, 0);
        assert!(f.offer(Sized(1)) && f.offer(Sized(1)) && f.offer(Sized(1)));
        assert!(!f.offer(Sized(1)), "full by count");
        let mut f = Fill::new(1000, 0);
        assert!(f.offer(Sized(MAX_PAGE_BYTES - 10)));
        assert!(!f.offer(Sized(11)), "full by bytes");
        assert!(f.offer(Sized(10)), "an item that fits is taken");
        let mut f = Fill::new(1000, MAX_PAGE_BYTES);
        assert!(
            f.offer(Sized(MAX_PAGE_BYTES)),
            "the first item is always taken"
        );
        assert!(!f.offer(Sized(0)));
    }
}
