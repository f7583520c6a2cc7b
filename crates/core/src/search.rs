//! Posting search: the filters of `ListPostings` (all must match), validated, and the scope a
//! page token of a filtered listing is sealed to (a token of one filter is refused on another).

use crate::account::{validate_metadata, Metadata};
use crate::error::{LedgerError, Reason};
use crate::limits::{MAX_CALLER_BYTES, MAX_FILTER_METADATA};
use time::OffsetDateTime;

/// A range of time: `start` inclusive, `end` exclusive, either unbounded when `None`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeRange {
    pub start: Option<OffsetDateTime>,
    pub end: Option<OffsetDateTime>,
}

impl TimeRange {
    /// Whether `t` lies in the range.
    pub fn contains(&self, t: OffsetDateTime) -> bool {
        self.start.is_none_or(|s| s <= t) && self.end.is_none_or(|e| t < e)
    }

    fn validate(&self, field: &str) -> Result<(), LedgerError> {
        match (self.start, self.end) {
            (Some(s), Some(e)) if s > e => Err(LedgerError::new(
                Reason::InvalidField,
                format!(
                    "{field}.start must not be after {field}.end (start inclusive, end exclusive)"
                ),
            )
            .with("field", field)),
            _ => Ok(()),
        }
    }

    fn scope(&self) -> String {
        let t = |x: Option<OffsetDateTime>| {
            x.map_or(String::new(), |t| t.unix_timestamp_nanos().to_string())
        };
        format!("{}..{}", t(self.start), t(self.end))
    }
}

/// What a listing keeps besides the account (which the service resolves to its id).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PostingFilter {
    /// Entries the posting's metadata must all hold.
    pub metadata: Metadata,
    pub recorded: TimeRange,
    pub effective: TimeRange,
    /// The caller that recorded it.
    pub caller: Option<String>,
}

impl PostingFilter {
    /// At most [`MAX_FILTER_METADATA`] entries, each as metadata may be; ranges that start no
    /// later than they end; a caller as callers may be.
    pub fn validate(&self) -> Result<(), LedgerError> {
        if self.metadata.len() > MAX_FILTER_METADATA {
            return Err(LedgerError::limit(
                "metadata filter entries",
                "MAX_FILTER_METADATA",
                MAX_FILTER_METADATA,
                self.metadata.len(),
            )
            .with("field", "metadata"));
        }
        validate_metadata(&self.metadata)?;
        self.recorded.validate("recorded")?;
        self.effective.validate("effective")?;
        match self.caller.as_deref() {
            Some(c) if c.len() > MAX_CALLER_BYTES => Err(LedgerError::limit(
                "caller length in bytes",
                "MAX_CALLER_BYTES",
                MAX_CALLER_BYTES,
                c.len(),
            )
            .with("field", "caller")),
            Some(c) if c.contains('\0') => Err(LedgerError::new(
                Reason::InvalidField,
                "caller contains a NUL character",
            )
            .with("field", "caller")),
            _ => Ok(()),
        }
    }

    /// Whether no filter is set.
    pub fn is_empty(&self) -> bool {
        *self == PostingFilter::default()
    }

    /// The filter as a page token's scope: empty without filters (so an unfiltered listing's
    /// tokens keep their scope), else every field, each length-prefixed.
    pub fn scope(&self) -> String {
        if self.is_empty() {
            return String::new();
        }
        let mut s = String::from("|filter");
        let mut part = |x: &str| s.push_str(&format!(":{}:{x}", x.len()));
        for (k, v) in &self.metadata {
            part(k);
            part(v);
        }
        part(&self.recorded.scope());
        part(&self.effective.scope());
        part(self.caller.as_deref().unwrap_or("\0none"));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Option<OffsetDateTime> {
        Some(OffsetDateTime::from_unix_timestamp(s).unwrap())
    }

    #[test]
    fn filters_are_refused_with_the_field_and_the_limit_they_break() {
        let meta = |n: usize| (0..n).map(|i| (format!("k{i}"), "v".to_owned())).collect();
        let range = |s, e| TimeRange {
            start: at(s),
            end: at(e),
        };
        let cases: Vec<(&str, PostingFilter, Option<&str>)> = vec![
            ("nothing", PostingFilter::default(), None),
            (
                "16 entries",
                PostingFilter {
                    metadata: meta(16),
                    ..Default::default()
                },
                None,
            ),
            (
                "17 entries",
                PostingFilter {
                    metadata: meta(17),
                    ..Default::default()
                },
                Some("MAX_FILTER_METADATA"),
            ),
            (
                "an empty key",
                PostingFilter {
                    metadata: [(String::new(), "v".into())].into(),
                    ..Default::default()
                },
                Some("MAX_METADATA_KEY_BYTES"),
            ),
            (
                "an empty range",
                PostingFilter {
                    recorded: range(5, 5),
                    ..Default::default()
                },
                None,
            ),
            (
                "a backward range",
                PostingFilter {
                    effective: range(6, 5),
                    ..Default::default()
                },
                Some("effective.start"),
            ),
            (
                "a long caller",
                PostingFilter {
                    caller: Some("c".repeat(129)),
                    ..Default::default()
                },
                Some("MAX_CALLER_BYTES"),
            ),
            (
                "a NUL caller",
                PostingFilter {
                    caller: Some("a\0".into()),
                    ..Default::default()
                },
                Some("NUL"),
            ),
        ];
        for (what, f, want) in cases {
            let got = f.validate().err().map(|e| e.message);
            match (got, want) {
                (None, None) => {}
                (Some(m), Some(w)) => assert!(m.contains(w), "{what}: {m}"),
                (got, want) => panic!("{what}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn two_different_filters_never_share_a_scope_and_no_filter_keeps_the_old_one() {
        assert_eq!(PostingFilter::default().scope(), "");
        let a = PostingFilter {
            metadata: [("a:1".into(), "b".into())].into(),
            ..Default::default()
        };
        let b = PostingFilter {
            metadata: [("a".into(), "1:b".into())].into(),
            ..Default::default()
        };
        let c = PostingFilter {
            caller: Some(String::new()),
            ..Default::default()
        };
        let d = PostingFilter {
            recorded: TimeRange {
                start: at(1),
                end: None,
            },
            ..Default::default()
        };
        let e = PostingFilter {
            recorded: TimeRange {
                start: None,
                end: at(1),
            },
            ..Default::default()
        };
        let scopes: std::collections::BTreeSet<String> =
            [&a, &b, &c, &d, &e].iter().map(|f| f.scope()).collect();
        assert_eq!(scopes.len(), 5);
    }

    #[test]
    fn a_range_holds_its_start_and_not_its_end() {
        let r = TimeRange {
            start: at(10),
            end: at(20),
        };
        assert!(r.contains(at(10).unwrap()) && r.contains(at(19).unwrap()));
        assert!(!r.contains(at(20).unwrap()) && !r.contains(at(9).unwrap()));
        assert!(TimeRange::default().contains(at(0).unwrap()));
    }
}
