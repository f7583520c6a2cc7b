//! Ledgers: isolated books of one deployment, each with its own accounts, postings and
//! sequence. A ledger's code is checked here as the ledger checks it, so a bad code fails
//! before anything is sent.

use super::{time_from_pb, unexpected, Metadata};
use crate::error::{Error, Reason};
use crate::pb;
use std::time::SystemTime;

/// The ledger every deployment starts with, and the one a client names when it is given
/// none (an empty code is this one too).
pub const DEFAULT_LEDGER: &str = "default";

/// Characters of a ledger code, at most (the ledger's limit MAX_LEDGER_CODE_CHARS).
pub const MAX_LEDGER_CODE_CHARS: usize = 64;

/// Checks a ledger code as the ledger does: 1..=64 characters of `a-z 0-9 _ -` (limit
/// MAX_LEDGER_CODE_CHARS). Refused with `INVALID_FIELD`, field `ledger`.
pub fn validate_ledger_code(code: &str) -> Result<(), Error> {
    let ok_chars = code
        .bytes()
        .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'));
    if code.is_empty() || code.len() > MAX_LEDGER_CODE_CHARS || !ok_chars {
        let shown: String = code.chars().take(MAX_LEDGER_CODE_CHARS + 1).collect();
        return Err(Error::refused(
            Reason::InvalidField,
            format!(
                "ledger code {shown:?} must be 1..={MAX_LEDGER_CODE_CHARS} characters of a-z 0-9 _ - (limit MAX_LEDGER_CODE_CHARS)"
            ),
        )
        .with("field", "ledger")
        .with("limit", "MAX_LEDGER_CODE_CHARS"));
    }
    Ok(())
}

/// The ledger a code names: empty is [`DEFAULT_LEDGER`]; anything else must be a valid code.
pub(crate) fn ledger_or_default(code: &str) -> Result<&str, Error> {
    if code.is_empty() {
        return Ok(DEFAULT_LEDGER);
    }
    validate_ledger_code(code)?;
    Ok(code)
}

/// The ledger a record answered by the ledger belongs to (an empty field: `default`, as the
/// contract reads it).
pub(crate) fn answered_ledger(field: String) -> String {
    if field.is_empty() {
        DEFAULT_LEDGER.to_owned()
    } else {
        field
    }
}

/// A ledger to create. Its attributes are fixed at creation: creating it again with the same
/// ones finds it, with others is `LEDGER_CONFLICT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewLedger {
    /// 1..64 characters of `a-z 0-9 _ -`.
    pub code: String,
    /// At most 1,024 bytes.
    pub description: String,
    pub metadata: Metadata,
    /// The PostgreSQL cluster to place it on (empty: `main`), one the server was started with.
    pub cluster: String,
}

impl NewLedger {
    /// A ledger `code` without a description or metadata.
    pub fn new(code: impl Into<String>) -> NewLedger {
        NewLedger {
            code: code.into(),
            description: String::new(),
            metadata: Metadata::new(),
            cluster: String::new(),
        }
    }

    /// On that cluster (`serve --cluster NAME=URL`) rather than `main`.
    pub fn cluster(mut self, cluster: impl Into<String>) -> NewLedger {
        self.cluster = cluster.into();
        self
    }

    /// With a description.
    pub fn description(mut self, description: impl Into<String>) -> NewLedger {
        self.description = description.into();
        self
    }

    /// With one metadata entry.
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> NewLedger {
        self.metadata.insert(key.into(), value.into());
        self
    }
}

/// A ledger as the ledger stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ledger {
    pub code: String,
    pub description: String,
    pub metadata: Metadata,
    pub created_at: SystemTime,
    /// The cluster holding its journal (`main` unless placed elsewhere).
    pub cluster: String,
}

impl Ledger {
    pub(crate) fn from_pb(l: pb::LedgerInfo) -> Result<Ledger, Error> {
        Ok(Ledger {
            created_at: time_from_pb("created_at", l.created_at)?,
            code: l.code,
            description: l.description,
            metadata: l.metadata.into_iter().collect(),
            cluster: l.cluster,
        })
    }
}

/// The answer to [`Client::create_ledger`](crate::Client::create_ledger).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreatedLedger {
    /// The ledger as stored.
    pub ledger: Ledger,
    /// False when an identical ledger already existed.
    pub created: bool,
}

impl CreatedLedger {
    pub(crate) fn from_pb(r: pb::CreateLedgerResponse) -> Result<CreatedLedger, Error> {
        let ledger = r.ledger.ok_or_else(|| unexpected("ledger", "nothing"))?;
        Ok(CreatedLedger {
            ledger: Ledger::from_pb(ledger)?,
            created: r.created,
        })
    }
}

/// One page of [`Client::list_ledgers`](crate::Client::list_ledgers): ledgers in code order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerPage {
    pub ledgers: Vec<Ledger>,
    /// Give it to the next call for the next page; empty on the last page.
    pub next_page_token: String,
}

impl LedgerPage {
    pub(crate) fn from_pb(r: pb::ListLedgersResponse) -> Result<LedgerPage, Error> {
        Ok(LedgerPage {
            ledgers: r
                .ledgers
                .into_iter()
                .map(Ledger::from_pb)
                .collect::<Result<_, _>>()?,
            next_page_token: r.next_page_token,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn a_ledger_code_is_1_to_64_of_lowercase_letters_digits_underscore_and_dash() {
        for good in [
            "default",
            "acme",
            "a",
            "bench-1",
            "eu_2026",
            &"x".repeat(64),
        ] {
            assert!(validate_ledger_code(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "Acme",
            "acme corp",
            "acme.eu",
            "é",
            "a/b",
            &"x".repeat(65),
        ] {
            let e = validate_ledger_code(bad).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Refused(Reason::InvalidField), "{bad}");
            assert_eq!(e.metadata["field"], "ledger");
            assert!(e.message.contains("MAX_LEDGER_CODE_CHARS"), "{e}");
            assert!(!e.is_retry_safe());
        }
    }

    #[test]
    fn an_empty_ledger_is_the_default_one_asked_for_and_answered() {
        assert_eq!(ledger_or_default("").unwrap(), DEFAULT_LEDGER);
        assert_eq!(ledger_or_default("acme").unwrap(), "acme");
        assert!(ledger_or_default("ACME").is_err());
        assert_eq!(answered_ledger(String::new()), DEFAULT_LEDGER);
        assert_eq!(answered_ledger("acme".into()), "acme");
    }

    #[test]
    fn a_ledger_reads_from_the_wire_and_a_create_without_its_ledger_is_an_error() {
        let info = pb::LedgerInfo {
            code: "acme".into(),
            description: "Acme Corp".into(),
            metadata: [("region".to_owned(), "eu".to_owned())].into(),
            created_at: Some(SystemTime::UNIX_EPOCH.into()),
            cluster: "east".into(),
        };
        let created = CreatedLedger::from_pb(pb::CreateLedgerResponse {
            ledger: Some(info.clone()),
            created: true,
        })
        .unwrap();
        assert_eq!(
            created.ledger,
            Ledger {
                code: "acme".into(),
                description: "Acme Corp".into(),
                metadata: [("region".to_owned(), "eu".to_owned())].into(),
                created_at: SystemTime::UNIX_EPOCH,
                cluster: "east".into(),
            }
        );
        assert!(created.created);
        let e = CreatedLedger::from_pb(pb::CreateLedgerResponse::default()).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Invalid);
        let page = LedgerPage::from_pb(pb::ListLedgersResponse {
            ledgers: vec![info],
            next_page_token: "t".into(),
        })
        .unwrap();
        assert_eq!(
            (page.ledgers.len(), page.next_page_token.as_str()),
            (1, "t")
        );
        let NewLedger {
            code,
            description,
            metadata,
            cluster,
        } = NewLedger::new("acme")
            .description("d")
            .metadata("k", "v")
            .cluster("east");
        assert_eq!((code.as_str(), description.as_str()), ("acme", "d"));
        assert_eq!(cluster, "east");
        assert_eq!(metadata["k"], "v");
    }
}
