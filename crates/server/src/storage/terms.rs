//! Account versions: the terms in force, as the writer loads them with the totals, and the
//! versions as readers ask for them (now, at a cut-off, all of them).

use super::accounts::{account_from_row, ACCOUNT_COLUMNS};
use super::StorageError;
use deadpool_postgres::GenericClient;
use ledger_core::amount::{format_minor, parse_stored};
use ledger_core::ledger::LedgerId;
use ledger_core::terms::{AccountStatus, AccountVersion, DebitLimit, Terms};
use ledger_core::Account;
use std::sync::LazyLock;
use time::OffsetDateTime;
use tokio_postgres::Row;

/// The columns [`terms_from_row`] reads, of `account_terms` aliased `v`.
pub(crate) const TERMS_COLUMNS: &str = "v.terms_version, v.status, v.balance_floor::text AS balance_floor, v.balance_ceiling::text AS balance_ceiling, v.debit_limits";

/// The columns [`version_from_row`] reads beyond [`TERMS_COLUMNS`].
pub(crate) const VERSION_COLUMNS: &str =
    "v.after_sequence, v.recorded_at AS v_recorded_at, v.caller AS v_caller, v.idempotency_key AS v_key, v.reason AS v_reason, v.changed";

/// A version's terms as stored, at the account's scale; anything the table's constraints
/// cannot hold (a limit's shape, an amount's digits) is a corrupt row.
pub(crate) fn terms_from_row(row: &Row, a: &Account) -> Result<Terms, StorageError> {
    let corrupt = |e: String| StorageError::corrupt_account(&a.code, format!("terms: {e}"));
    let status: &str = row.get("status");
    let status =
        AccountStatus::parse(status).ok_or_else(|| corrupt(format!("status {status:?}")))?;
    let amount = |col: &str| -> Result<Option<i128>, StorageError> {
        row.get::<_, Option<&str>>(col)
            .map(|t| parse_stored(t, a.scale).map_err(|e| corrupt(format!("{col}: {e}"))))
            .transpose()
    };
    let limits = limits_from_json(row.get("debit_limits"), a.scale).map_err(corrupt)?;
    Ok(Terms {
        version: row.get("terms_version"),
        status,
        floor: amount("balance_floor")?,
        ceiling: amount("balance_ceiling")?,
        debit_limits: limits,
    })
}

/// Debit limits as stored: `[{"amount": "500.00", "window_seconds": 86400}]`.
pub(crate) fn limits_to_json(limits: &[DebitLimit], scale: u8) -> serde_json::Value {
    serde_json::Value::Array(
        limits
            .iter()
            .map(|l| {
                serde_json::json!({
                    "amount": format_minor(l.amount, scale),
                    "window_seconds": l.window_seconds,
                })
            })
            .collect(),
    )
}

fn limits_from_json(v: serde_json::Value, scale: u8) -> Result<Vec<DebitLimit>, String> {
    let serde_json::Value::Array(items) = v else {
        return Err(format!("debit_limits {v} is not an array"));
    };
    items
        .iter()
        .map(|l| {
            let amount = l["amount"].as_str().ok_or("a limit without an amount")?;
            let window = l["window_seconds"]
                .as_u64()
                .and_then(|w| u32::try_from(w).ok())
                .ok_or("a limit without a window")?;
            Ok(DebitLimit {
                amount: parse_stored(amount, scale).map_err(|e| format!("limit amount: {e}"))?,
                window_seconds: window,
            })
        })
        .collect()
}

/// A version row (with [`TERMS_COLUMNS`] and the version's own columns).
pub(crate) fn version_from_row(row: &Row, a: &Account) -> Result<AccountVersion, StorageError> {
    Ok(AccountVersion {
        account_id: a.id,
        terms: terms_from_row(row, a)?,
        after_sequence: row.get("after_sequence"),
        recorded_at: row.get("v_recorded_at"),
        caller: row.get("v_caller"),
        idempotency_key: row.get("v_key"),
        reason: row.get("v_reason"),
        changed: row.get("changed"),
    })
}

/// The versions recorded under keys (the replays of updates), each with its account and
/// the number of its key.
pub(crate) static VERSION_BY_KEY_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {ACCOUNT_COLUMNS}, {TERMS_COLUMNS}, {VERSION_COLUMNS}, v.key_id
         FROM unnest($1::bigint[]) AS x(key_id) JOIN account_terms v ON v.key_id = x.key_id
         JOIN accounts a ON a.account_id = v.account_id"
    )
});

/// A row of [`VERSION_BY_KEY_SQL`]: the version, of the account it names.
pub(crate) fn keyed_version(row: &Row) -> Result<AccountVersion, StorageError> {
    version_from_row(row, &account_from_row(row)?)
}

/// An account with the version in force at `at` (now: `None`), if the account existed then.
pub async fn get_as_of(
    client: &impl GenericClient,
    ledger: LedgerId,
    code: &str,
    at: Option<OffsetDateTime>,
) -> Result<Option<(Account, AccountVersion)>, StorageError> {
    let sql = format!(
        "SELECT {ACCOUNT_COLUMNS}, {TERMS_COLUMNS}, {VERSION_COLUMNS}
         FROM accounts a CROSS JOIN LATERAL (
             SELECT * FROM account_terms v WHERE v.account_id = a.account_id
               AND ($3::timestamptz IS NULL OR v.recorded_at <= $3)
             ORDER BY v.terms_version DESC LIMIT 1) v
         WHERE a.ledger_id = $2 AND a.code = $1"
    );
    let row = client.query_opt(&sql, &[&code, &ledger, &at]).await?;
    row.map(|r| {
        let a = account_from_row(&r)?;
        let v = version_from_row(&r, &a)?;
        Ok((a, v))
    })
    .transpose()
}

/// The version in force now of each account, by id (one that has none is a corrupt row).
pub async fn current_versions(
    client: &impl GenericClient,
    accounts: &[Account],
) -> Result<std::collections::HashMap<i64, AccountVersion>, StorageError> {
    let ids: Vec<i64> = accounts.iter().map(|a| a.id).collect();
    let sql = format!(
        "SELECT t.account_id, {TERMS_COLUMNS}, {VERSION_COLUMNS}
         FROM unnest($1::bigint[]) AS x(id) JOIN account_totals t ON t.account_id = x.id
         JOIN account_terms v ON v.account_id = t.account_id AND v.terms_version = t.terms_version"
    );
    let rows = client.query(&sql, &[&ids]).await?;
    let by_id: std::collections::HashMap<i64, &Row> =
        rows.iter().map(|r| (r.get("account_id"), r)).collect();
    let mut out = std::collections::HashMap::new();
    for a in accounts {
        let row = by_id.get(&a.id).ok_or_else(|| {
            StorageError::corrupt_account(&a.code, "no row of the version of its terms in force")
        })?;
        out.insert(a.id, version_from_row(row, a)?);
    }
    Ok(out)
}

/// An account's versions after `after` (a version number), oldest first, at most `limit`.
pub async fn list_versions(
    client: &impl GenericClient,
    account: &Account,
    after: i64,
    limit: i64,
) -> Result<Vec<AccountVersion>, StorageError> {
    let sql = format!(
        "SELECT {TERMS_COLUMNS}, {VERSION_COLUMNS} FROM account_terms v
         WHERE v.account_id = $1 AND v.terms_version > $2 ORDER BY v.terms_version LIMIT $3"
    );
    let rows = client.query(&sql, &[&account.id, &after, &limit]).await?;
    rows.iter().map(|r| version_from_row(r, account)).collect()
}

/// Version 1 of a new account, in its creating transaction.
pub(crate) async fn insert_initial(
    tx: &impl GenericClient,
    a: &Account,
) -> Result<(), StorageError> {
    let t = Terms::initial(a.allow_negative);
    tx.execute(
        "INSERT INTO account_terms (account_id, terms_version, status, balance_floor, balance_ceiling,
             debit_limits, after_sequence, recorded_at, caller, idempotency_key, reason, changed)
         VALUES ($1, 1, 'open', $2::text::numeric, NULL, '[]', $3, $4, '', '', '', '{}')",
        &[
            &a.id,
            &t.floor.map(|f| format_minor(f, a.scale)),
            &(i64::from(a.ledger) << ledger_core::limits::SEQUENCE_BITS),
            &a.created_at,
        ],
    )
    .await?;
    Ok(())
}
