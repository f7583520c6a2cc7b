//! Ledgers: isolated books in one database. Each has its own accounts, postings, gapless
//! sequence, recorded clock, as-of fence, idempotency keys and events.
//!
//! A stored sequence names its ledger: it is `ledger id · 2^SEQUENCE_BITS + the sequence in
//! that ledger`, so every ledger's journal is one contiguous range of the journal's key, the
//! indexes over sequences serve one ledger's ranges as they are, and the ledger `default` (id
//! 0) keeps the sequences it had before ledgers existed. The schema checks the split
//! (`postings.ledger_id` is generated from the sequence). Callers only ever see the sequence in
//! the ledger ([`in_ledger`]); storage only ever sees stored ones ([`stored`]).

use crate::account::{truncate_for_message, validate_metadata, Metadata};
use crate::error::{LedgerError, Reason};
use crate::limits::{
    MAX_CLUSTER_NAME_CHARS, MAX_LEDGERS, MAX_LEDGER_CODE_CHARS, MAX_LEDGER_DESCRIPTION_BYTES,
    SEQUENCE_BITS,
};
use std::collections::BTreeSet;
use time::OffsetDateTime;

/// Storage's id of a ledger (0: `default`).
pub use crate::account::LedgerId;

/// The ledger every deployment starts with, and the one a request with no `ledger` names.
pub const DEFAULT_LEDGER: &str = "default";
/// The id of [`DEFAULT_LEDGER`].
pub const DEFAULT_LEDGER_ID: LedgerId = 0;
/// The largest sequence within one ledger.
pub const MAX_SEQUENCE_IN_LEDGER: i64 = (1 << SEQUENCE_BITS) - 1;

/// The stored sequence of the `n`th posting of ledger `ledger` (`n` = 0: before its first).
pub fn stored(ledger: LedgerId, n: i64) -> i64 {
    assert!(
        (0..=MAX_LEDGERS).contains(&ledger),
        "ledger id {ledger} out of range"
    );
    assert!(
        (0..=MAX_SEQUENCE_IN_LEDGER).contains(&n),
        "sequence {n} out of a ledger's range"
    );
    (i64::from(ledger) << SEQUENCE_BITS) | n
}

/// The sequence within its ledger of a stored sequence (what callers see).
pub fn in_ledger(stored: i64) -> i64 {
    stored & MAX_SEQUENCE_IN_LEDGER
}

/// The ledger a stored sequence belongs to.
pub fn of_sequence(stored: i64) -> LedgerId {
    (stored >> SEQUENCE_BITS) as LedgerId
}

/// The cluster of `--database-url`: it holds the directory of ledgers, and every ledger not
/// placed elsewhere.
pub const MAIN_CLUSTER: &str = "main";

/// A cluster's name: 1..=32 characters of `a-z 0-9 _ -`.
pub fn validate_cluster_name(name: &str) -> Result<(), LedgerError> {
    let ok = name
        .bytes()
        .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'));
    if name.is_empty() || name.len() > MAX_CLUSTER_NAME_CHARS || !ok {
        return Err(LedgerError::new(
            Reason::InvalidField,
            format!(
                "cluster {:?} must be 1..={MAX_CLUSTER_NAME_CHARS} characters of a-z 0-9 _ - (limit MAX_CLUSTER_NAME_CHARS)",
                truncate_for_message(name)
            ),
        )
        .with("field", "cluster"));
    }
    Ok(())
}

/// A ledger as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ledger {
    pub id: LedgerId,
    pub code: String,
    pub description: String,
    pub metadata: Metadata,
    pub created_at: OffsetDateTime,
    /// The cluster holding its journal ([`MAIN_CLUSTER`] unless placed elsewhere).
    pub cluster: String,
}

/// A validated request to create a ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewLedger {
    pub code: String,
    pub description: String,
    pub metadata: Metadata,
    /// The cluster to place it on.
    pub cluster: String,
}

impl NewLedger {
    /// Validates every attribute; the first problem found is the answer.
    pub fn validate(
        code: &str,
        description: &str,
        metadata: Metadata,
        cluster: &str,
    ) -> Result<NewLedger, LedgerError> {
        validate_ledger_code(code)?;
        let cluster = match cluster {
            "" => MAIN_CLUSTER,
            c => c,
        };
        validate_cluster_name(cluster)?;
        if description.len() > MAX_LEDGER_DESCRIPTION_BYTES {
            return Err(LedgerError::limit(
                "ledger description length in bytes",
                "MAX_LEDGER_DESCRIPTION_BYTES",
                MAX_LEDGER_DESCRIPTION_BYTES,
                description.len(),
            )
            .with("field", "description"));
        }
        if description.contains('\0') {
            return Err(LedgerError::new(
                Reason::InvalidField,
                "description contains a NUL character",
            )
            .with("field", "description"));
        }
        validate_metadata(&metadata)?;
        Ok(NewLedger {
            code: code.to_owned(),
            description: description.to_owned(),
            metadata,
            cluster: cluster.to_owned(),
        })
    }

    /// The attributes in which an existing ledger differs from this request (empty: identical).
    pub fn differences(&self, existing: &Ledger) -> Vec<&'static str> {
        let mut d = Vec::new();
        if self.description != existing.description {
            d.push("description");
        }
        if self.metadata != existing.metadata {
            d.push("metadata");
        }
        if self.cluster != existing.cluster {
            d.push("cluster");
        }
        d
    }

    /// `LEDGER_CONFLICT`: the code exists with other attributes.
    pub fn conflict(&self, existing: &Ledger) -> LedgerError {
        let differs = self.differences(existing).join(", ");
        LedgerError::new(
            Reason::LedgerConflict,
            format!(
                "ledger {:?} exists with another {differs}; ledgers never change",
                self.code
            ),
        )
        .with("ledger", &self.code)
    }
}

/// A ledger code: 1..=64 characters of `a-z 0-9 _ -`.
pub fn validate_ledger_code(code: &str) -> Result<(), LedgerError> {
    let ok_chars = code
        .bytes()
        .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'));
    if code.is_empty() || code.len() > MAX_LEDGER_CODE_CHARS || !ok_chars {
        return Err(LedgerError::new(
            Reason::InvalidField,
            format!(
                "ledger code {:?} must be 1..={MAX_LEDGER_CODE_CHARS} characters of a-z 0-9 _ - (limit MAX_LEDGER_CODE_CHARS)",
                truncate_for_message(code)
            ),
        )
        .with("field", "ledger"));
    }
    Ok(())
}

/// The ledger a request's `ledger` field names: empty is [`DEFAULT_LEDGER`].
pub fn requested(field: &str) -> Result<&str, LedgerError> {
    if field.is_empty() {
        return Ok(DEFAULT_LEDGER);
    }
    validate_ledger_code(field)?;
    Ok(field)
}

/// The ledgers a caller may use: every one (auth off, or `*` in the auth file) or the ones
/// its line names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Grants {
    All,
    Only(BTreeSet<String>),
}

impl Grants {
    /// `default` alone: what an auth-file line without a fourth column grants.
    pub fn default_only() -> Grants {
        Grants::Only(BTreeSet::from([DEFAULT_LEDGER.to_owned()]))
    }

    /// Whether the ledger `code` is granted.
    pub fn allows(&self, code: &str) -> bool {
        match self {
            Grants::All => true,
            Grants::Only(codes) => codes.contains(code),
        }
    }

    /// The answer for a ledger the caller may not use or that does not exist: only a caller
    /// granted every ledger learns which codes exist (`LEDGER_NOT_FOUND`); anyone else gets
    /// `LEDGER_NOT_GRANTED` either way.
    pub fn refusal(&self, code: &str) -> LedgerError {
        let code = truncate_for_message(code);
        match self {
            Grants::All => LedgerError::new(
                Reason::LedgerNotFound,
                format!("no ledger has the code {code:?}"),
            )
            .with("ledger", code),
            Grants::Only(_) => LedgerError::new(
                Reason::LedgerNotGranted,
                format!(
                    "the caller is not granted the ledger {code:?} (the auth file's fourth column)"
                ),
            )
            .with("ledger", code),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_sequence_splits_into_its_ledger_and_its_sequence_in_it() {
        for (ledger, n) in [
            (0, 0),
            (0, 1),
            (0, MAX_SEQUENCE_IN_LEDGER),
            (1, 1),
            (MAX_LEDGERS, MAX_SEQUENCE_IN_LEDGER),
        ] {
            let s = stored(ledger, n);
            assert!(s >= 0);
            assert_eq!((of_sequence(s), in_ledger(s)), (ledger, n));
        }
        assert_eq!(
            stored(DEFAULT_LEDGER_ID, 42),
            42,
            "the default ledger keeps its sequences"
        );
    }

    #[test]
    fn ledger_codes_are_checked_against_the_alphabet_and_the_length() {
        let cases = [
            ("default", true),
            ("acme_eu-2", true),
            (&"a".repeat(MAX_LEDGER_CODE_CHARS), true),
            (&"a".repeat(MAX_LEDGER_CODE_CHARS + 1), false),
            ("", false),
            ("Acme", false),
            ("a.b", false),
            ("a:b", false),
            ("a b", false),
            ("é", false),
        ];
        for (code, ok) in cases {
            assert_eq!(validate_ledger_code(code).is_ok(), ok, "{code:?}");
        }
        assert_eq!(requested("").unwrap(), DEFAULT_LEDGER);
        assert_eq!(requested("acme").unwrap(), "acme");
        assert_eq!(requested("A").unwrap_err().reason, Reason::InvalidField);
    }

    #[test]
    fn only_a_caller_granted_every_ledger_learns_that_one_does_not_exist() {
        assert_eq!(Grants::All.refusal("nope").reason, Reason::LedgerNotFound);
        assert_eq!(
            Grants::default_only().refusal("nope").reason,
            Reason::LedgerNotGranted
        );
        assert!(Grants::default_only().allows(DEFAULT_LEDGER));
        assert!(!Grants::default_only().allows("acme"));
        assert!(Grants::All.allows("acme"));
    }

    #[test]
    fn a_ledger_request_is_refused_for_a_long_description_and_differs_by_attribute() {
        let long = "x".repeat(MAX_LEDGER_DESCRIPTION_BYTES + 1);
        assert_eq!(
            NewLedger::validate("a", &long, Metadata::new(), "")
                .unwrap_err()
                .reason,
            Reason::LimitExceeded
        );
        let new = NewLedger::validate("a", "books", Metadata::new(), "").unwrap();
        let existing = Ledger {
            id: 1,
            code: "a".into(),
            description: "other".into(),
            metadata: Metadata::new(),
            created_at: OffsetDateTime::UNIX_EPOCH,
            cluster: MAIN_CLUSTER.into(),
        };
        assert_eq!(new.differences(&existing), ["description"]);
        let east = NewLedger::validate("a", "other", Metadata::new(), "east").unwrap();
        assert_eq!(east.differences(&existing), ["cluster"]);
        assert_eq!(
            NewLedger::validate("a", "", Metadata::new(), "East!")
                .unwrap_err()
                .reason,
            Reason::InvalidField
        );
        assert_eq!(new.conflict(&existing).reason, Reason::LedgerConflict);
    }
}
