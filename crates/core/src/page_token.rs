//! Opaque, authenticated page tokens.
//!
//! A token is `base64url(VERSION ‖ body ‖ tag)`: the body is a sequence of typed fields
//! (integers as zigzag LEB128, texts length-prefixed) written and read back in the same order
//! by the query that made it, and the tag is HMAC-SHA256 (the `hmac` crate) keyed by the
//! ledger's secret over the query's scope (the RPC and its filter) and the version and body,
//! truncated to [`TAG_BYTES`]. A token that was altered, truncated, made by another ledger,
//! for another query or by an earlier version is refused with `INVALID_PAGE_TOKEN`. Tokens
//! carry running totals and cut-offs the server trusts, so the tag is what makes them safe to
//! hand out.

use super::error::{LedgerError, Reason};
use super::limits::MAX_PAGE_TOKEN_BYTES;
use base64::Engine as _;
use hmac::{KeyInit, Mac};

/// Version 1 was a hex token with a hand-made keyed hash; it is refused.
const VERSION: u8 = 2;
/// Bytes of the HMAC-SHA256 tag kept (128 bits: forging one takes 2^128 tries).
pub const TAG_BYTES: usize = 16;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

fn mac(key: &[u8], scope: &str, body: &[u8]) -> HmacSha256 {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes a key of any length");
    m.update(&(scope.len() as u64).to_be_bytes());
    m.update(scope.as_bytes());
    m.update(body);
    m
}

fn invalid() -> LedgerError {
    LedgerError::new(
        Reason::InvalidPageToken,
        "page_token is not one this server issued for this query; pass the next_page_token of the previous page unchanged",
    )
    .with("field", "page_token")
}

/// Writes a token's fields, then seals them.
pub struct Writer {
    body: Vec<u8>,
}

impl Default for Writer {
    fn default() -> Self {
        Writer::new()
    }
}

impl Writer {
    pub fn new() -> Writer {
        Writer {
            body: vec![VERSION],
        }
    }

    /// Appends an integer.
    pub fn int(&mut self, v: i128) -> &mut Writer {
        let mut z = ((v << 1) ^ (v >> 127)) as u128;
        loop {
            let byte = (z & 0x7f) as u8;
            z >>= 7;
            if z == 0 {
                self.body.push(byte);
                return self;
            }
            self.body.push(byte | 0x80);
        }
    }

    /// Appends a text.
    pub fn text(&mut self, s: &str) -> &mut Writer {
        self.int(s.len() as i128);
        self.body.extend_from_slice(s.as_bytes());
        self
    }

    /// The token, for the query named by `scope`. Asserts it fits [`MAX_PAGE_TOKEN_BYTES`]:
    /// the callers bound what they write.
    pub fn seal(&self, key: &[u8], scope: &str) -> String {
        let tag = mac(key, scope, &self.body).finalize().into_bytes();
        let mut all = self.body.clone();
        all.extend_from_slice(&tag[..TAG_BYTES]);
        let token = B64.encode(all);
        assert!(
            token.len() <= MAX_PAGE_TOKEN_BYTES,
            "a page token of {} bytes (limit MAX_PAGE_TOKEN_BYTES)",
            token.len()
        );
        token
    }
}

/// Reads back the fields of a token, in the order they were written.
#[derive(Debug)]
pub struct Reader {
    body: Vec<u8>,
    at: usize,
}

/// Checks a token made by [`Writer::seal`] with the same key and scope.
pub fn open(key: &[u8], scope: &str, token: &str) -> Result<Reader, LedgerError> {
    if token.len() > MAX_PAGE_TOKEN_BYTES {
        return Err(invalid());
    }
    let all = B64.decode(token).map_err(|_| invalid())?;
    if all.len() < 1 + TAG_BYTES || all[0] != VERSION {
        return Err(invalid());
    }
    let (body, tag) = all.split_at(all.len() - TAG_BYTES);
    mac(key, scope, body)
        .verify_truncated_left(tag)
        .map_err(|_| invalid())?;
    Ok(Reader {
        body: body.to_vec(),
        at: 1,
    })
}

impl Reader {
    /// The next integer.
    pub fn int(&mut self) -> Result<i128, LedgerError> {
        let mut z: u128 = 0;
        for shift in (0..128).step_by(7) {
            let byte = *self.body.get(self.at).ok_or_else(invalid)?;
            self.at += 1;
            z |= u128::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(((z >> 1) as i128) ^ -((z & 1) as i128));
            }
        }
        Err(invalid())
    }

    /// The next integer, which must fit `T`.
    pub fn int_as<T: TryFrom<i128>>(&mut self) -> Result<T, LedgerError> {
        T::try_from(self.int()?).map_err(|_| invalid())
    }

    /// The next text.
    pub fn text(&mut self) -> Result<String, LedgerError> {
        let len: usize = self.int_as()?;
        let end = self.at.checked_add(len).ok_or_else(invalid)?;
        let bytes = self.body.get(self.at..end).ok_or_else(invalid)?;
        self.at = end;
        String::from_utf8(bytes.to_vec()).map_err(|_| invalid())
    }

    /// Whether every field was read (a token of an older server may hold fewer).
    pub fn is_done(&self) -> bool {
        self.at == self.body.len()
    }

    /// Every field was read: a token with more than its query writes is not one of ours.
    pub fn finish(self) -> Result<(), LedgerError> {
        if self.at == self.body.len() {
            Ok(())
        } else {
            Err(invalid())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn token(fields: &[i128], text: &str) -> String {
        let mut w = Writer::new();
        for f in fields {
            w.int(*f);
        }
        w.text(text);
        w.seal(b"key", "entries:7")
    }

    #[test]
    fn a_token_opens_only_with_its_key_and_scope() {
        let t = token(&[1, -2, i128::MAX, i128::MIN], "acct:x");
        let mut r = open(b"key", "entries:7", &t).unwrap();
        assert_eq!(r.int().unwrap(), 1);
        assert_eq!(r.int().unwrap(), -2);
        assert_eq!(r.int().unwrap(), i128::MAX);
        assert_eq!(r.int().unwrap(), i128::MIN);
        assert_eq!(r.text().unwrap(), "acct:x");
        r.finish().unwrap();
        assert!(open(b"other", "entries:7", &t).is_err());
        assert!(open(b"key", "entries:8", &t).is_err());
        assert!(open(b"key", "entries:7", "zz").is_err());
        assert!(open(b"key", "entries:7", "").is_err());
    }

    #[test]
    fn a_token_read_past_its_fields_or_not_to_its_end_is_refused() {
        let t = token(&[5], "");
        let mut r = open(b"key", "entries:7", &t).unwrap();
        assert_eq!(r.int().unwrap(), 5);
        assert_eq!(r.text().unwrap(), "");
        assert!(r.int().is_err(), "past the end");
        let r = open(b"key", "entries:7", &t).unwrap();
        assert!(r.finish().is_err(), "fields left unread");
    }

    #[test]
    fn a_version_1_token_is_refused() {
        // The earlier format: hex of version 1, field count, fields, keyed SHA-256.
        let v1 = format!("0101{}{}", "00".repeat(15), "07");
        let v1 = format!("{v1}{}", "ab".repeat(16));
        let e = open(b"key", "entries:7", &v1).unwrap_err();
        assert_eq!(e.reason, Reason::InvalidPageToken);
    }

    proptest! {
        #[test]
        fn any_single_character_change_is_refused(fields in prop::collection::vec(any::<i128>(), 1..5), pos in any::<prop::sample::Index>(), c in "[A-Za-z0-9_-]") {
            let t = token(&fields, "");
            let i = pos.index(t.len());
            let mut chars: Vec<char> = t.chars().collect();
            let new = c.chars().next().unwrap();
            prop_assume!(chars[i] != new);
            chars[i] = new;
            let tampered: String = chars.into_iter().collect();
            let outcome = open(b"key", "entries:7", &tampered).and_then(|mut r| {
                for _ in &fields { r.int()?; }
                r.text()?;
                r.finish()
            });
            prop_assert_eq!(outcome.unwrap_err().reason, Reason::InvalidPageToken);
        }

        #[test]
        fn integers_read_back_as_written(v in any::<i128>()) {
            let mut w = Writer::new();
            w.int(v);
            let mut r = open(b"k", "s", &w.seal(b"k", "s")).unwrap();
            prop_assert_eq!(r.int().unwrap(), v);
            r.finish().unwrap();
        }
    }
}
