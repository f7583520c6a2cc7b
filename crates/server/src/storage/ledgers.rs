//! Ledgers: create (idempotent by code, with the ledger's state and outbox rows), look up,
//! list. A ledger never changes once created (a trigger refuses updates).

use super::accounts::{metadata_from_json, metadata_to_json};
use super::StorageError;
use deadpool_postgres::GenericClient;
use ledger_core::ledger::{self, Ledger, LedgerId, NewLedger};
use tokio_postgres::Row;

/// A ledger's columns and its cluster: its placement of the highest version (none: `main`).
const LEDGER_COLUMNS: &str = "l.ledger_id, l.code, l.description, l.metadata, l.created_at,
     coalesce((SELECT p.cluster FROM ledger_placements p WHERE p.ledger_id = l.ledger_id
               ORDER BY p.version DESC LIMIT 1), 'main') AS cluster";

fn ledger_from_row(row: &Row) -> Result<Ledger, StorageError> {
    let code: String = row.get("code");
    let metadata = metadata_from_json(row.get("metadata"))
        .map_err(|e| StorageError::corrupt_ledger(&code, e))?;
    Ok(Ledger {
        id: row.get("ledger_id"),
        code,
        description: row.get("description"),
        metadata,
        created_at: row.get("created_at"),
        cluster: row.get("cluster"),
    })
}

/// A ledger created by this call, or the one that already had the code.
pub enum Created {
    New(Ledger),
    Existing(Ledger),
}

/// Creates a ledger with its state row (no posting yet: its stored sequence 0 is
/// `ledger id << 40`) and its outbox progress, in one transaction; or finds the ledger the
/// code already names. An existing code is looked up first, so a repeated create never
/// spends an id (ids are bounded by `MAX_LEDGERS`).
pub async fn create(
    client: &mut deadpool_postgres::Client,
    new: &NewLedger,
) -> Result<Created, StorageError> {
    if let Some(existing) = get(&*client, &new.code).await? {
        return Ok(Created::Existing(existing));
    }
    let tx = client.transaction().await?;
    let row = tx
        .query_opt(
            &format!(
                "INSERT INTO ledgers AS l (code, description, metadata) VALUES ($1, $2, $3)
                 ON CONFLICT (code) DO NOTHING RETURNING {LEDGER_COLUMNS}"
            ),
            &[
                &new.code,
                &new.description,
                &metadata_to_json(&new.metadata),
            ],
        )
        .await?;
    let Some(row) = row else {
        drop(tx);
        let existing = get(&*client, &new.code).await?;
        return Ok(Created::Existing(
            existing.expect("a ledger that conflicted on code exists"),
        ));
    };
    let mut created = ledger_from_row(&row)?;
    if new.cluster != ledger::MAIN_CLUSTER {
        tx.execute(
            "INSERT INTO ledger_placements (ledger_id, version, cluster) VALUES ($1, 1, $2)",
            &[&created.id, &new.cluster],
        )
        .await?;
        created.cluster = new.cluster.clone();
    }
    state_rows(&tx, created.id).await?;
    tx.commit().await?;
    Ok(Created::New(created))
}

/// A ledger's state row (no posting yet: its stored sequence 0 is `ledger id << 40`) and its
/// outbox progress; none when it has them.
async fn state_rows(tx: &impl GenericClient, id: LedgerId) -> Result<(), StorageError> {
    let start = ledger::stored(id, 0);
    tx.execute(
        "INSERT INTO ledger_state (ledger_id, last_sequence, last_recorded_at)
         VALUES ($1, $2, '1970-01-01T00:00:00Z') ON CONFLICT DO NOTHING",
        &[&id, &start],
    )
    .await?;
    tx.execute(
        "INSERT INTO outbox_progress (ledger_id, published_sequence, updated_at)
         VALUES ($1, $2, clock_timestamp()) ON CONFLICT DO NOTHING",
        &[&id, &start],
    )
    .await?;
    Ok(())
}

/// On the cluster a ledger is placed on (not `main`): its row, with the id, code and
/// attributes the directory gave it, and its state rows, unless they are there (a retry of a
/// create that stopped after the directory's commit finishes it here).
pub async fn ensure_placed(
    client: &mut deadpool_postgres::Client,
    l: &Ledger,
) -> Result<(), StorageError> {
    let tx = client.transaction().await?;
    tx.execute(
        "INSERT INTO ledgers (ledger_id, code, description, metadata, created_at)
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
        &[
            &l.id,
            &l.code,
            &l.description,
            &metadata_to_json(&l.metadata),
            &l.created_at,
        ],
    )
    .await?;
    // A cluster that already knew this id or code as another ledger (it was some other
    // deployment's) must not be written into.
    let clash = tx
        .query_opt(
            "SELECT code FROM ledgers WHERE (ledger_id = $1) <> (code = $2) LIMIT 1",
            &[&l.id, &l.code],
        )
        .await?;
    if let Some(row) = clash {
        let other: String = row.get(0);
        return Err(StorageError::Corrupt {
            row: format!("ledger {:?} (id {}) on its cluster", l.code, l.id),
            sequence: None,
            detail: format!("that cluster has another ledger {other:?} with its id or code"),
        });
    }
    state_rows(&tx, l.id).await?;
    tx.commit().await?;
    Ok(())
}

/// The ledger with this code.
pub async fn get(client: &impl GenericClient, code: &str) -> Result<Option<Ledger>, StorageError> {
    let st = client
        .prepare_cached(&format!(
            "SELECT {LEDGER_COLUMNS} FROM ledgers l WHERE l.code = $1"
        ))
        .await?;
    let row = client.query_opt(&st, &[&code]).await?;
    row.as_ref().map(ledger_from_row).transpose()
}

/// The ledger with this id.
pub async fn by_id(
    client: &impl GenericClient,
    id: LedgerId,
) -> Result<Option<Ledger>, StorageError> {
    let st = client
        .prepare_cached(&format!(
            "SELECT {LEDGER_COLUMNS} FROM ledgers l WHERE l.ledger_id = $1"
        ))
        .await?;
    let row = client.query_opt(&st, &[&id]).await?;
    row.as_ref().map(ledger_from_row).transpose()
}

/// Ledgers in code order after `after` (exclusive), at most `limit`; `only`: just those
/// codes (a caller's grants).
pub async fn list(
    client: &impl GenericClient,
    after: Option<&str>,
    only: Option<&[String]>,
    limit: i64,
) -> Result<Vec<Ledger>, StorageError> {
    let rows = client
        .query(
            &format!(
                "SELECT {LEDGER_COLUMNS} FROM ledgers l
                 WHERE ($1::text IS NULL OR l.code > $1) AND ($2::text[] IS NULL OR l.code = ANY($2))
                 ORDER BY l.code LIMIT $3"
            ),
            &[&after, &only, &limit],
        )
        .await?;
    rows.iter().map(ledger_from_row).collect()
}
