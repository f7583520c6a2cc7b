//! Accounts: create (idempotent by code), look up, list.

use super::StorageError;
use crate::domain::{Account, Metadata, NewAccount, NormalBalance};
use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

const COLUMNS: &str =
    "account_id, code, currency, scale, normal_balance, allow_negative, metadata, created_at";

fn normal_to_sql(n: NormalBalance) -> &'static str {
    match n {
        NormalBalance::Debit => "debit",
        NormalBalance::Credit => "credit",
    }
}

/// Reads an account row; asserts the stored attributes are sound.
pub(crate) fn account_from_row(row: &Row) -> Account {
    let normal: &str = row.get("normal_balance");
    let scale: i16 = row.get("scale");
    assert!(
        (0..=18).contains(&scale),
        "stored scale {scale} out of range"
    );
    let metadata: serde_json::Value = row.get("metadata");
    Account {
        id: row.get("account_id"),
        code: row.get("code"),
        currency: row.get("currency"),
        scale: scale as u8,
        normal_balance: match normal {
            "debit" => NormalBalance::Debit,
            "credit" => NormalBalance::Credit,
            other => panic!("stored normal_balance {other:?}"),
        },
        allow_negative: row.get("allow_negative"),
        metadata: metadata_from_json(metadata),
        created_at: row.get("created_at"),
    }
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
pub(crate) fn metadata_from_json(v: serde_json::Value) -> Metadata {
    match v {
        serde_json::Value::Object(o) => o
            .into_iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => (k, s),
                other => panic!("stored metadata value {other} is not a string"),
            })
            .collect(),
        other => panic!("stored metadata {other} is not an object"),
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
                "INSERT INTO accounts (code, currency, scale, normal_balance, allow_negative, metadata)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (code) DO NOTHING RETURNING {COLUMNS}"
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
            let account = account_from_row(&row);
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
            &format!("SELECT {COLUMNS} FROM accounts WHERE code = $1"),
            &[&code],
        )
        .await?;
    Ok(row.as_ref().map(account_from_row))
}

/// The accounts among `codes` that exist.
pub async fn get_many(
    client: &impl GenericClient,
    codes: &[String],
) -> Result<Vec<Account>, StorageError> {
    let rows = client
        .query(
            &format!("SELECT {COLUMNS} FROM accounts WHERE code = ANY($1)"),
            &[&codes],
        )
        .await?;
    Ok(rows.iter().map(account_from_row).collect())
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
                "SELECT {COLUMNS} FROM accounts
                 WHERE starts_with(code, $1) AND ($2::text IS NULL OR code > $2)
                 ORDER BY code LIMIT $3"
            ),
            &[&prefix, &after, &limit],
        )
        .await?;
    Ok(rows.iter().map(account_from_row).collect())
}
