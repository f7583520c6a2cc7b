//! Accounts: create (idempotent by code), look up, list.

use super::StorageError;
use deadpool_postgres::GenericClient;
use ledger_core::account::AccountCache;
use ledger_core::ledger::LedgerId;
use ledger_core::{Account, LedgerError, Metadata, NewAccount, NormalBalance};
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::hash::Hash;
use std::sync::RwLock;
use tokio_postgres::Row;

/// The columns [`account_from_row`] reads, of `accounts` aliased `a` (the one list of them).
pub(crate) const ACCOUNT_COLUMNS: &str =
    "a.account_id, a.ledger_id, a.code, a.currency, a.scale, a.normal_balance, a.allow_negative, a.metadata, a.created_at";

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
        ledger: row.get("ledger_id"),
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
    ledger: LedgerId,
    a: &NewAccount,
) -> Result<Created, StorageError> {
    let tx = client.transaction().await?;
    let row = tx
        .query_opt(
            &format!(
                "INSERT INTO accounts AS a (ledger_id, code, currency, scale, normal_balance, allow_negative, metadata)
                 VALUES ($7, $1, $2, $3, $4, $5, $6)
                 ON CONFLICT (ledger_id, code) DO NOTHING RETURNING {ACCOUNT_COLUMNS}"
            ),
            &[
                &a.code,
                &a.currency,
                &i16::from(a.scale),
                &normal_to_sql(a.normal_balance),
                &a.allow_negative,
                &metadata_to_json(&a.metadata),
                &ledger,
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
            super::terms::insert_initial(&tx, &account).await?;
            tx.commit().await?;
            Ok(Created::New(account))
        }
        None => {
            drop(tx);
            let existing = get(&*client, ledger, &a.code)
                .await?
                .expect("an account that conflicted on code exists");
            Ok(Created::Existing(existing))
        }
    }
}

/// One account by code.
pub async fn get(
    client: &impl GenericClient,
    ledger: LedgerId,
    code: &str,
) -> Result<Option<Account>, StorageError> {
    let row = client
        .query_opt(
            &format!(
                "SELECT {ACCOUNT_COLUMNS} FROM accounts a WHERE a.ledger_id = $2 AND a.code = $1"
            ),
            &[&code, &ledger],
        )
        .await?;
    row.as_ref().map(account_from_row).transpose()
}

/// The accounts among `codes` that exist.
pub async fn get_many(
    client: &impl GenericClient,
    ledger: LedgerId,
    codes: &[String],
) -> Result<Vec<Account>, StorageError> {
    let rows = client
        .query(
            &format!("SELECT {ACCOUNT_COLUMNS} FROM accounts a WHERE a.ledger_id = $2 AND a.code = ANY($1)"),
            &[&codes, &ledger],
        )
        .await?;
    rows.iter().map(account_from_row).collect()
}

/// Accounts whose code starts with `prefix`, in code order, after `after` (exclusive).
pub async fn list(
    client: &impl GenericClient,
    ledger: LedgerId,
    prefix: &str,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<Account>, StorageError> {
    let rows = client
        .query(
            &format!(
                "SELECT {ACCOUNT_COLUMNS} FROM accounts a
                 WHERE a.ledger_id = $4 AND starts_with(a.code, $1) AND ($2::text IS NULL OR a.code > $2)
                 ORDER BY a.code LIMIT $3"
            ),
            &[&prefix, &after, &limit, &ledger],
        )
        .await?;
    rows.iter().map(account_from_row).collect()
}

/// How the account cache finds an account: by id (recorded legs name ids) or by code
/// (requests name codes).
pub trait AccountKey: Clone + Eq + Hash {
    fn cached(&self, cache: &AccountCache) -> Option<Account>;
    /// The key of an account row (also of one that cannot be read).
    fn of_row(row: &Row) -> Self;
}

/// An account by its id in its ledger (ids are unique in a cluster, not across clusters).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ById(pub LedgerId, pub i64);

impl AccountKey for ById {
    fn cached(&self, cache: &AccountCache) -> Option<Account> {
        cache.by_id(self.0, self.1).cloned()
    }

    fn of_row(row: &Row) -> ById {
        ById(row.get("ledger_id"), row.get("account_id"))
    }
}

/// [`get_or_load`] by the ids of accounts of `ledger`, answered by id.
pub async fn get_or_load_ids<F, Fut>(
    cache: &RwLock<AccountCache>,
    ledger: LedgerId,
    ids: &[i64],
    fetch: F,
) -> Result<Found<i64>, StorageError>
where
    F: FnOnce(Vec<i64>) -> Fut,
    Fut: Future<Output = Result<Vec<Row>, StorageError>>,
{
    let keys: Vec<ById> = ids.iter().map(|&id| ById(ledger, id)).collect();
    let found = get_or_load(cache, &keys, |missing| {
        fetch(missing.into_iter().map(|k| k.1).collect())
    })
    .await?;
    Ok(found.into_iter().map(|(k, a)| (k.1, a)).collect())
}

impl AccountKey for (LedgerId, String) {
    fn cached(&self, cache: &AccountCache) -> Option<Account> {
        cache.by_code(self.0, &self.1).cloned()
    }

    fn of_row(row: &Row) -> (LedgerId, String) {
        (row.get("ledger_id"), row.get("code"))
    }
}

/// The accounts under `keys`, as a lookup answers them: each one found, or the refusal of a
/// row that cannot be read (`JOURNAL_CORRUPT`); keys of no account are absent.
pub type Found<K> = HashMap<K, Result<Account, LedgerError>>;

/// The account cache's read-through, the one way accounts are looked up (accounts never
/// change, so a cached one is never stale): those under `keys` the cache holds are taken from
/// it at once (another lookup may empty it, when full, before the caller is done); `fetch`
/// reads the rows ([`ACCOUNT_COLUMNS`]) of those it misses (distinct; it is not called when
/// none is), which are then added to it.
pub async fn get_or_load<K, F, Fut>(
    cache: &RwLock<AccountCache>,
    keys: &[K],
    fetch: F,
) -> Result<Found<K>, StorageError>
where
    K: AccountKey,
    F: FnOnce(Vec<K>) -> Fut,
    Fut: Future<Output = Result<Vec<Row>, StorageError>>,
{
    let mut found: Found<K> = HashMap::with_capacity(keys.len());
    let mut missing: Vec<K> = Vec::new();
    {
        let cache = cache.read().expect("account cache lock");
        let mut seen = HashSet::with_capacity(keys.len());
        for k in keys.iter().filter(|k| seen.insert(*k)) {
            match k.cached(&cache) {
                Some(a) => {
                    found.insert(k.clone(), Ok(a));
                }
                None => missing.push(k.clone()),
            }
        }
    }
    if missing.is_empty() {
        return Ok(found);
    }
    let mut fresh = Vec::new();
    for r in fetch(missing).await? {
        let account = account_from_row(&r).map_err(StorageError::into_ledger_error);
        if let Ok(a) = &account {
            fresh.push(a.clone());
        }
        found.insert(K::of_row(&r), account);
    }
    let n = fresh.len();
    cache.write().expect("account cache lock").fill(fresh, n);
    Ok(found)
}

/// The rows of the accounts among `keys` (all of one ledger), for [`get_or_load`].
pub async fn rows_by_code(
    client: &impl GenericClient,
    keys: &[(LedgerId, String)],
) -> Result<Vec<Row>, StorageError> {
    let Some(&(ledger, _)) = keys.first() else {
        return Ok(Vec::new());
    };
    assert!(
        keys.iter().all(|k| k.0 == ledger),
        "account codes of one ledger"
    );
    let codes: Vec<&str> = keys.iter().map(|k| k.1.as_str()).collect();
    let sql = format!(
        "SELECT {ACCOUNT_COLUMNS} FROM accounts a WHERE a.ledger_id = $2 AND a.code = ANY($1)"
    );
    let st = client.prepare_cached(&sql).await?;
    Ok(client.query(&st, &[&codes, &ledger]).await?)
}

/// The rows of the accounts among `ids`, each looked up on its primary key, for
/// [`get_or_load`].
pub async fn rows_by_id(
    client: &impl GenericClient,
    ids: &[i64],
) -> Result<Vec<Row>, StorageError> {
    let st = client.prepare_cached(&accounts_by_id_sql()).await?;
    Ok(client.query(&st, &[&ids]).await?)
}

/// The accounts of the ids `$1`, each on its primary key whatever the statistics say.
pub(crate) fn accounts_by_id_sql() -> String {
    format!(
        "SELECT r.* FROM unnest($1::bigint[]) AS x(id)
         CROSS JOIN LATERAL (SELECT {ACCOUNT_COLUMNS} FROM accounts a WHERE a.account_id = x.id LIMIT 1) r"
    )
}
