//! Accounts: create (idempotent by code), look up, list.

use super::StorageError;
use deadpool_postgres::GenericClient;
use ledger_core::{Account, Metadata, NewAccount, NormalBalance};
use tokio_postgres::Row;

/// The columns [`account_from_row`] reads, of `accounts` aliased `a` (the one list of them).
pub(crate) const ACCOUNT_COLUMNS: &str =
    "a.account_id, a.code, a.currency, a.scale, a.normal_balance, a.allow_negative, a.metadata, a.created_at";

fn normal_to_sql(n: NormalBalance) -> &'static str {
    match n {
        NormalBalance::Debit => "debit",
        NormalBalance::Credit => "credit",
    }
}

/// Reads an account row. The table's CHECK constraints hold the code, currency, scale and
/// normal side; what they cannot hold (the metadata's shape) is reported as a corrupt row.
pub(crate) fn account_from_row(row: &Row) -> Result<Account, StorageError> {
    let code: String = row.get("code");
    let normal = match row.get::<_, &str>("normal_balance") {
        "debit" => NormalBalance::Debit,
        "credit" => NormalBalance::Credit,
        other => {
            return Err(StorageError::corrupt_account(
                &code,
                format!("normal_balance {other:?}"),
            ))
        }
    };
    let scale = u8::try_from(row.get::<_, i16>("scale"))
        .ok()
        .filter(|s| u32::from(*s) <= ledger_core::limits::MAX_SCALE)
        .ok_or_else(|| StorageError::corrupt_account(&code, "scale out of range"))?;
    let metadata = metadata_from_json(row.get("metadata"))
        .map_err(|e| StorageError::corrupt_account(&code, e))?;
    Ok(Account {
        id: row.get("account_id"),
        code,
        currency: row.get("currency"),
        scale,
        normal_balance: normal,
        allow_negative: row.get("allow_negative"),
        metadata,
        created_at: row.get("created_at"),
    })
}

/// Metadata as stored (a JSON object of strings).
pub(crate) fn metadata_to_json(m: &Metadata) -> serde_json::Value {
    serde_json::Value::Object(
        m.iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect(),
    )
}

/// Metadata read back; anything but an object of strings is a broken invariant.
pub(crate) fn metadata_from_json(v: serde_json::Value) -> Result<Metadata, String> {
    match v {
        serde_json::Value::Object(o) => o
            .into_iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => Ok((k, s)),
                other => Err(format!(
                    "metadata value {other} of key {k:?} is not a string"
                )),
            })
            .collect(),
        other => Err(format!("metadata {other} is not an object")),
    }
}

/// Result of [`create`].
pub enum Created {
    /// The account was made now.
    New(Account),
    /// An account with this code existed already (compare attributes to decide).
    Existing(Account),
}

/// Inserts the account and its zero totals, or returns the existing one with the same code
/// (the UNIQUE constraint on `code` decides races).
pub async fn create(
    client: &mut deadpool_postgres::Client,
    a: &NewAccount,
) -> Result<Created, StorageError> {
    let tx = client.transaction().await?;
    let row = tx
        .query_opt(
            &format!(
                "INSERT INTO accounts AS a (code, currency, scale, normal_balance, allow_negative, metadata)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (code) DO NOTHING RETURNING {ACCOUNT_COLUMNS}"
            ),
            &[
                &a.code,
                &a.currency,
                &i16::from(a.scale),
                &normal_to_sql(a.normal_balance),
                &a.allow_negative,
                &metadata_to_json(&a.metadata),
            ],
        )
        .await?;
    match row {
        Some(row) => {
            let account = account_from_row(&row)?;
            tx.execute(
                "INSERT INTO account_totals (account_id, debits, credits, version, last_sequence)
                 VALUES ($1, 0, 0, 0, 0)",
                &[&account.id],
            )
            .await?;
            tx.commit().await?;
            Ok(Created::New(account))
        }
        None => {
            drop(tx);
            let existing = get(&*client, &a.code)
                .await?
                .expect("an account that conflicted on code exists");
            Ok(Created::Existing(existing))
        }
    }
}

/// One account by code.
pub async fn get(client: &impl GenericClient, code: &str) -> Result<Option<Account>, StorageError> {
    let row = client
        .query_opt(
            &format!("SELECT {ACCOUNT_COLUMNS} FROM accounts a WHERE a.code = $1"),
            &[&code],
        )
        .await?;
    row.as_ref().map(account_from_row).transpose()
}

/// The accounts among `codes` that exist.
pub async fn get_many(
    client: &impl GenericClient,
    codes: &[String],
) -> Result<Vec<Account>, StorageError> {
    let rows = client
        .query(
            &format!("SELECT {ACCOUNT_COLUMNS} FROM accounts a WHERE a.code = ANY($1)"),
            &[&codes],
        )
        .await?;
    rows.iter().map(account_from_row).collect()
}

/// Accounts whose code starts with `prefix`, in code order, after `after` (exclusive).
pub async fn list(
    client: &impl GenericClient,
    prefix: &str,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<Account>, StorageError> {
    let rows = client
        .query(
            &format!(
                "SELECT {ACCOUNT_COLUMNS} FROM accounts a
                 WHERE starts_with(a.code, $1) AND ($2::text IS NULL OR a.code > $2)
                 ORDER BY a.code LIMIT $3"
            ),
            &[&prefix, &after, &limit],
        )
        .await?;
    rows.iter().map(account_from_row).collect()
}
