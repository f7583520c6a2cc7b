//! Accounts: codes, currencies, scales, metadata, and the rules on each.

use super::error::{LedgerError, Reason};
use super::limits::*;
use std::collections::{BTreeMap, HashMap};
use time::OffsetDateTime;

/// Which side of an account grows its balance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NormalBalance {
    Debit,
    Credit,
}

/// A leg's side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    Debit,
    Credit,
}

impl Direction {
    /// The opposite side (a void swaps every leg).
    pub fn swapped(self) -> Direction {
        match self {
            Direction::Debit => Direction::Credit,
            Direction::Credit => Direction::Debit,
        }
    }
}

/// Storage's id of a ledger, the book an account belongs to (see [`crate::ledger`], which
/// names it; defined here so accounts need not know ledgers).
pub type LedgerId = i32;

/// Metadata: a sorted map, so equal maps compare and hash equal.
pub type Metadata = BTreeMap<String, String>;

/// An account as stored. Attributes never change after creation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    /// Storage's internal id (legs refer to it; unique over every ledger).
    pub id: i64,
    /// The ledger the account belongs to (its code is unique within it).
    pub ledger: LedgerId,
    pub code: String,
    pub currency: String,
    pub scale: u8,
    pub normal_balance: NormalBalance,
    pub allow_negative: bool,
    pub metadata: Metadata,
    pub created_at: OffsetDateTime,
}

/// A validated request to create an account.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewAccount {
    pub code: String,
    pub currency: String,
    pub scale: u8,
    pub normal_balance: NormalBalance,
    pub allow_negative: bool,
    pub metadata: Metadata,
}

impl NewAccount {
    /// Validates every attribute; the first problem found is the answer.
    pub fn validate(
        code: &str,
        currency: &str,
        scale: u32,
        normal_balance: Option<NormalBalance>,
        allow_negative: bool,
        metadata: Metadata,
    ) -> Result<NewAccount, LedgerError> {
        validate_code(code)?;
        validate_currency(currency)?;
        if scale > MAX_SCALE {
            return Err(LedgerError::new(
                Reason::AmountScale,
                format!("scale {scale} is out of range 0..={MAX_SCALE} (limit MAX_SCALE)"),
            )
            .with("field", "scale")
            .with("limit", "MAX_SCALE"));
        }
        let normal_balance = normal_balance.ok_or_else(|| {
            LedgerError::new(
                Reason::InvalidField,
                "normal_balance must be NORMAL_BALANCE_DEBIT or NORMAL_BALANCE_CREDIT",
            )
            .with("field", "normal_balance")
        })?;
        validate_metadata(&metadata)?;
        Ok(NewAccount {
            code: code.to_owned(),
            currency: currency.to_owned(),
            scale: scale as u8,
            normal_balance,
            allow_negative,
            metadata,
        })
    }

    /// The attributes in which an existing account differs from this request (empty: identical).
    pub fn differences(&self, existing: &Account) -> Vec<&'static str> {
        let mut d = Vec::new();
        if self.currency != existing.currency {
            d.push("currency");
        }
        if self.scale != existing.scale {
            d.push("scale");
        }
        if self.normal_balance != existing.normal_balance {
            d.push("normal_balance");
        }
        if self.allow_negative != existing.allow_negative {
            d.push("allow_negative");
        }
        if self.metadata != existing.metadata {
            d.push("metadata");
        }
        d
    }
}

/// An account code: 1..=128 characters of `a-z 0-9 : _ - .`.
pub fn validate_code(code: &str) -> Result<(), LedgerError> {
    let ok_chars = code
        .bytes()
        .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b':' | b'_' | b'-' | b'.'));
    if code.is_empty() || code.len() > MAX_ACCOUNT_CODE_CHARS || !ok_chars {
        let e = LedgerError::new(
            Reason::InvalidAccountCode,
            format!(
                "account code {:?} must be 1..={MAX_ACCOUNT_CODE_CHARS} characters of a-z 0-9 : _ - . (limit MAX_ACCOUNT_CODE_CHARS)",
                truncate_for_message(code)
            ),
        )
        .with("account", truncate_for_message(code));
        return Err(if code.len() > MAX_ACCOUNT_CODE_CHARS {
            e.with("limit", "MAX_ACCOUNT_CODE_CHARS")
        } else {
            e
        });
    }
    Ok(())
}

/// A code prefix (`ListAccounts`, `ListBalances`): 0..=128 characters of an account code's
/// alphabet. Anything else could match no account, so it is refused rather than searched for
/// (and a NUL never reaches SQL).
pub fn validate_prefix(prefix: &str) -> Result<(), LedgerError> {
    let ok_chars = prefix
        .bytes()
        .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b':' | b'_' | b'-' | b'.'));
    if prefix.len() > MAX_ACCOUNT_CODE_CHARS || !ok_chars {
        return Err(LedgerError::new(
            Reason::InvalidField,
            format!(
                "prefix {:?} must be 0..={MAX_ACCOUNT_CODE_CHARS} characters of a-z 0-9 : _ - . (the start of an account code; limit MAX_ACCOUNT_CODE_CHARS)",
                truncate_for_message(prefix)
            ),
        )
        .with("field", "prefix"));
    }
    Ok(())
}

/// A currency: 2..=16 characters of `A-Z 0-9`.
pub fn validate_currency(currency: &str) -> Result<(), LedgerError> {
    let ok = (2..=MAX_CURRENCY_CHARS).contains(&currency.len())
        && currency
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit());
    if !ok {
        return Err(LedgerError::new(
            Reason::InvalidCurrency,
            format!(
                "currency {:?} must be 2..={MAX_CURRENCY_CHARS} characters of A-Z 0-9",
                truncate_for_message(currency)
            ),
        )
        .with("field", "currency"));
    }
    Ok(())
}

/// Metadata limits: at most 32 entries, keys of 1..=64 bytes, values of at most 512 bytes.
pub fn validate_metadata(metadata: &Metadata) -> Result<(), LedgerError> {
    if metadata.len() > MAX_METADATA_ENTRIES {
        return Err(LedgerError::limit(
            "metadata entry count",
            "MAX_METADATA_ENTRIES",
            MAX_METADATA_ENTRIES,
            metadata.len(),
        )
        .with("field", "metadata"));
    }
    for (k, v) in metadata {
        if k.is_empty() || k.len() > MAX_METADATA_KEY_BYTES {
            return Err(LedgerError::limit(
                &format!("metadata key {:?} length in bytes", truncate_for_message(k)),
                "MAX_METADATA_KEY_BYTES (keys must not be empty)",
                MAX_METADATA_KEY_BYTES,
                k.len(),
            )
            .with("limit", "MAX_METADATA_KEY_BYTES")
            .with("field", "metadata"));
        }
        if v.len() > MAX_METADATA_VALUE_BYTES {
            return Err(LedgerError::limit(
                &format!("metadata value of key {k:?} length in bytes"),
                "MAX_METADATA_VALUE_BYTES",
                MAX_METADATA_VALUE_BYTES,
                v.len(),
            )
            .with("field", "metadata"));
        }
        if k.contains('\0') || v.contains('\0') {
            return Err(LedgerError::new(
                Reason::InvalidField,
                format!("metadata key {k:?} or its value contains a NUL character"),
            )
            .with("field", "metadata"));
        }
    }
    Ok(())
}

/// Cuts user input quoted in an error message to a readable length.
pub fn truncate_for_message(s: &str) -> String {
    const MAX: usize = 80;
    if s.chars().count() <= MAX {
        s.to_owned()
    } else {
        let cut: String = s.chars().take(MAX).collect();
        format!("{cut}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn account_attributes_are_validated_with_the_reason_named() {
        let long_code = "a".repeat(129);
        type Case<'a> = (&'a str, &'a str, u32, Option<NormalBalance>, Option<Reason>);
        let table: &[Case] = &[
            ("assets:cash", "EUR", 2, Some(NormalBalance::Debit), None),
            ("a", "BTC", 18, Some(NormalBalance::Credit), None),
            (
                "",
                "EUR",
                2,
                Some(NormalBalance::Debit),
                Some(Reason::InvalidAccountCode),
            ),
            (
                "Assets",
                "EUR",
                2,
                Some(NormalBalance::Debit),
                Some(Reason::InvalidAccountCode),
            ),
            (
                "a b",
                "EUR",
                2,
                Some(NormalBalance::Debit),
                Some(Reason::InvalidAccountCode),
            ),
            (
                &long_code,
                "EUR",
                2,
                Some(NormalBalance::Debit),
                Some(Reason::InvalidAccountCode),
            ),
            (
                "a",
                "E",
                2,
                Some(NormalBalance::Debit),
                Some(Reason::InvalidCurrency),
            ),
            (
                "a",
                "eur",
                2,
                Some(NormalBalance::Debit),
                Some(Reason::InvalidCurrency),
            ),
            (
                "a",
                "ABCDEFGHIJKLMNOPQ",
                2,
                Some(NormalBalance::Debit),
                Some(Reason::InvalidCurrency),
            ),
            (
                "a",
                "EUR",
                19,
                Some(NormalBalance::Debit),
                Some(Reason::AmountScale),
            ),
            ("a", "EUR", 2, None, Some(Reason::InvalidField)),
        ];
        for (code, cur, scale, nb, want) in table {
            let got = NewAccount::validate(code, cur, *scale, *nb, false, Metadata::new())
                .err()
                .map(|e| e.reason);
            assert_eq!(got, *want, "{code:?} {cur:?} {scale}");
        }
    }

    #[test]
    fn metadata_over_its_limits_is_refused_naming_the_limit() {
        let mut m = Metadata::new();
        for i in 0..33 {
            m.insert(format!("k{i}"), "v".into());
        }
        let e = validate_metadata(&m).unwrap_err();
        assert_eq!(e.reason, Reason::LimitExceeded);
        assert!(e.message.contains("MAX_METADATA_ENTRIES"), "{}", e.message);
        let m: Metadata = [("k".repeat(65), "v".to_string())].into();
        assert!(validate_metadata(&m)
            .unwrap_err()
            .message
            .contains("MAX_METADATA_KEY_BYTES"));
        let m: Metadata = [("k".to_string(), "v".repeat(513))].into();
        assert!(validate_metadata(&m)
            .unwrap_err()
            .message
            .contains("MAX_METADATA_VALUE_BYTES"));
        let m: Metadata = [("k".to_string(), "v".repeat(512))].into();
        assert!(validate_metadata(&m).is_ok());
    }
}

/// Accounts kept in memory, by (ledger, code) and by (ledger, id) (an id is unique in its
/// ledger's cluster, not across clusters): they never change once created (a trigger
/// refuses updates), so an entry never goes stale. The service looks accounts up by code to
/// validate requests, the writer by id for their rules; one cache serves both.
#[derive(Debug)]
pub struct AccountCache {
    by_id: HashMap<(LedgerId, i64), Account>,
    id_of: HashMap<(LedgerId, String), i64>,
    max: usize,
}

impl Default for AccountCache {
    fn default() -> Self {
        AccountCache::new(AccountCache::MAX_CACHED_ACCOUNTS)
    }
}

impl AccountCache {
    /// Accounts held at most (limit MAX_CACHED_ACCOUNTS); when a fill would pass it the cache
    /// is emptied first and refills from the requests that follow.
    pub const MAX_CACHED_ACCOUNTS: usize = 100_000;

    /// A cache of at most `max` accounts.
    pub fn new(max: usize) -> AccountCache {
        AccountCache {
            by_id: HashMap::new(),
            id_of: HashMap::new(),
            max,
        }
    }

    /// The account `code` of ledger `ledger`.
    pub fn by_code(&self, ledger: LedgerId, code: &str) -> Option<&Account> {
        // A borrowed key for the lookup would need a key type of its own; codes are short.
        self.id_of
            .get(&(ledger, code.to_owned()))
            .map(|id| &self.by_id[&(ledger, *id)])
    }

    /// The account `id` of ledger `ledger`.
    pub fn by_id(&self, ledger: LedgerId, id: i64) -> Option<&Account> {
        self.by_id.get(&(ledger, id))
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Adds accounts just read, emptying the cache first if they would take it past its limit.
    pub fn fill(&mut self, accounts: impl IntoIterator<Item = Account>, count: usize) {
        if self.by_id.len() + count > self.max {
            self.by_id.clear();
            self.id_of.clear();
        }
        for a in accounts {
            self.id_of.insert((a.ledger, a.code.clone()), a.id);
            self.by_id.insert((a.ledger, a.id), a);
        }
    }
}

#[cfg(test)]
mod cache_tests {
    use super::*;

    fn account(id: i64) -> Account {
        Account {
            id,
            ledger: crate::ledger::DEFAULT_LEDGER_ID,
            code: format!("a:{id}"),
            currency: "EUR".into(),
            scale: 2,
            normal_balance: NormalBalance::Debit,
            allow_negative: false,
            metadata: Metadata::new(),
            created_at: OffsetDateTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn the_account_cache_empties_only_when_a_fill_would_take_it_past_its_limit() {
        let mut cache = AccountCache::default();
        let max = AccountCache::MAX_CACHED_ACCOUNTS as i64;
        cache.fill((0..max - 10).map(account), (max - 10) as usize);
        cache.fill((max - 10..max).map(account), 10);
        assert_eq!(
            cache.len(),
            AccountCache::MAX_CACHED_ACCOUNTS,
            "room enough: kept"
        );
        assert_eq!(cache.by_code(0, "a:7").map(|a| a.id), Some(7));
        cache.fill([account(max)], 1);
        assert_eq!(cache.len(), 1, "past the limit: emptied first");
        assert_eq!(
            cache.by_id(0, max).map(|a| a.code.as_str()),
            Some(format!("a:{max}").as_str())
        );
    }
}
