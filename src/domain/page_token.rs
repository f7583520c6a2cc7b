//! Opaque, tamper-evident page tokens: a versioned list of integers and a keyed checksum,
//! hex-encoded. A token that was altered, truncated or made for another query is refused.

use super::error::{LedgerError, Reason};
use super::limits::MAX_PAGE_TOKEN_BYTES;
use sha2::{Digest, Sha256};

const VERSION: u8 = 1;
const MAC_BYTES: usize = 16;

fn mac(key: &[u8], scope: &str, body: &[u8]) -> [u8; MAC_BYTES] {
    let mut h = Sha256::new();
    h.update((key.len() as u64).to_be_bytes());
    h.update(key);
    h.update((scope.len() as u64).to_be_bytes());
    h.update(scope.as_bytes());
    h.update(body);
    let full: [u8; 32] = h.finalize().into();
    let mut out = [0u8; MAC_BYTES];
    out.copy_from_slice(&full[..MAC_BYTES]);
    out
}

/// Encodes `fields` for the query named by `scope` (e.g. the RPC and its filter), so a
/// token from one query is refused by another.
pub fn encode(key: &[u8], scope: &str, fields: &[i128], text: &str) -> String {
    let mut body = vec![VERSION, fields.len() as u8];
    for f in fields {
        body.extend_from_slice(&f.to_be_bytes());
    }
    body.extend_from_slice(text.as_bytes());
    let m = mac(key, scope, &body);
    body.extend_from_slice(&m);
    body.iter().map(|b| format!("{b:02x}")).collect()
}

/// A decoded token: its integer fields and its text (e.g. the last account code of a page).
pub type Decoded = (Vec<i128>, String);

/// Decodes a token made by [`encode`] with the same key and scope into `n` integer fields and
/// the text.
pub fn decode(key: &[u8], scope: &str, token: &str, n: usize) -> Result<Decoded, LedgerError> {
    let bad = || {
        LedgerError::new(
            Reason::InvalidPageToken,
            "page_token is not one this server issued for this query; pass the next_page_token of the previous page unchanged",
        )
    };
    if token.len() > MAX_PAGE_TOKEN_BYTES || token.len() % 2 != 0 || !token.is_ascii() {
        return Err(bad());
    }
    let bytes: Vec<u8> = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&token[i..i + 2], 16))
        .collect::<Result<_, _>>()
        .map_err(|_| bad())?;
    if bytes.len() < 2 + 16 * n + MAC_BYTES || bytes[0] != VERSION || usize::from(bytes[1]) != n {
        return Err(bad());
    }
    let (body, m) = bytes.split_at(bytes.len() - MAC_BYTES);
    // Constant-time compare: the checksum is a secret-keyed MAC.
    let want = mac(key, scope, body);
    let diff = want.iter().zip(m).fold(0u8, |acc, (a, b)| acc | (a ^ b));
    if diff != 0 {
        return Err(bad());
    }
    let (ints, text) = body[2..].split_at(16 * n);
    let text = String::from_utf8(text.to_vec()).map_err(|_| bad())?;
    let ints = ints
        .chunks_exact(16)
        .map(|c| i128::from_be_bytes(c.try_into().expect("16 bytes")))
        .collect();
    Ok((ints, text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_token_decodes_only_with_its_key_and_scope() {
        let t = encode(b"k", "entries:7", &[1, -2, 3], "acct:x");
        assert_eq!(
            decode(b"k", "entries:7", &t, 3).unwrap(),
            (vec![1, -2, 3], "acct:x".to_string())
        );
        assert!(decode(b"other", "entries:7", &t, 3).is_err());
        assert!(decode(b"k", "entries:8", &t, 3).is_err());
        assert!(decode(b"k", "entries:7", &t, 2).is_err());
        assert!(decode(b"k", "entries:7", "zz", 3).is_err());
        assert!(decode(b"k", "entries:7", "", 3).is_err());
    }

    proptest! {
        #[test]
        fn any_single_character_change_is_refused(fields in prop::collection::vec(any::<i128>(), 1..5), pos in any::<prop::sample::Index>(), c in "[0-9a-f]") {
            let t = encode(b"key", "s", &fields, "");
            let i = pos.index(t.len());
            let mut chars: Vec<char> = t.chars().collect();
            let new = c.chars().next().unwrap();
            prop_assume!(chars[i] != new);
            chars[i] = new;
            let tampered: String = chars.into_iter().collect();
            prop_assert_eq!(decode(b"key", "s", &tampered, fields.len()).unwrap_err().reason, Reason::InvalidPageToken);
        }
    }
}
