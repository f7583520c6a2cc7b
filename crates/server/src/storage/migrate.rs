//! A small migration runner: plain SQL files embedded at build time, applied in order under
//! an advisory lock, each recorded once in `schema_migrations`.

use super::{connect, StorageError, MIGRATION_LOCK};

/// The migrations, in order. A file, once released, is never edited: add a new one.
pub const MIGRATIONS: &[(&str, &str)] = &[
    (
        "0001_journal",
        include_str!("../../../../migrations/0001_journal.sql"),
    ),
    (
        "0002_outbox",
        include_str!("../../../../migrations/0002_outbox.sql"),
    ),
    (
        "0003_roles",
        include_str!("../../../../migrations/0003_roles.sql"),
    ),
    (
        "0004_batch_without_row_fks",
        include_str!("../../../../migrations/0004_batch_without_row_fks.sql"),
    ),
    (
        "0005_asof_stabbing",
        include_str!("../../../../migrations/0005_asof_stabbing.sql"),
    ),
    (
        "0006_check",
        include_str!("../../../../migrations/0006_check.sql"),
    ),
    (
        "0007_void_index_only_on_voids",
        include_str!("../../../../migrations/0007_void_index_only_on_voids.sql"),
    ),
    (
        "0008_postings_name_their_key_by_number",
        include_str!("../../../../migrations/0008_postings_name_their_key_by_number.sql"),
    ),
    (
        "0009_rejection_facts",
        include_str!("../../../../migrations/0009_rejection_facts.sql"),
    ),
    (
        "0010_holds",
        include_str!("../../../../migrations/0010_holds.sql"),
    ),
    (
        "0011_closes_without_row_fk",
        include_str!("../../../../migrations/0011_closes_without_row_fk.sql"),
    ),
    (
        "0012_expiring_holds",
        include_str!("../../../../migrations/0012_expiring_holds.sql"),
    ),
    (
        "0013_ledgers",
        include_str!("../../../../migrations/0013_ledgers.sql"),
    ),
    (
        "0014_account_terms",
        include_str!("../../../../migrations/0014_account_terms.sql"),
    ),
    (
        "0015_account_events",
        include_str!("../../../../migrations/0015_account_events.sql"),
    ),
    (
        "0016_verifiable_journal",
        include_str!("../../../../migrations/0016_verifiable_journal.sql"),
    ),
    (
        "0017_period_closes",
        include_str!("../../../../migrations/0017_period_closes.sql"),
    ),
    (
        "0018_posting_search",
        include_str!("../../../../migrations/0018_posting_search.sql"),
    ),
    (
        "0019_ledger_placements",
        include_str!("../../../../migrations/0019_ledger_placements.sql"),
    ),
    (
        "0020_ledger_moves",
        include_str!("../../../../migrations/0020_ledger_moves.sql"),
    ),
];

/// Applies every migration not yet applied. Safe to run from several processes at once.
///
/// On a current database it only reads, so a login without the owner's rights (the service's)
/// may start on it; a migration it may not apply fails with a message saying to run
/// `ledger migrate` with the owner's URL.
pub async fn migrate(database_url: &str) -> Result<Vec<String>, StorageError> {
    let mut client = connect(database_url).await?;
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    let result = match pending(&client).await {
        Ok(pending) if pending.is_empty() => Ok(Vec::new()),
        Ok(pending) => apply(&mut client, &pending).await,
        Err(e) => Err(e),
    };
    // A journal recorded before hashing existed is hashed now, in chunks (resumable).
    let result = match result {
        Ok(applied) => hash_backlogs(database_url).await.map(|_| applied),
        Err(e) => Err(e),
    };
    let _ = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await;
    result
}

/// Hashes the journal recorded before hashing existed ([`super::journal::hash_backlogs`]), on a
/// connection of its own.
async fn hash_backlogs(database_url: &str) -> Result<u64, StorageError> {
    let pool = super::pool(database_url, 1)?;
    let mut client = pool.get().await?;
    super::journal::hash_backlogs(&mut client).await
}

/// The migrations not yet recorded in `schema_migrations` (all of them before it exists), in
/// order. Reads only.
async fn pending(
    client: &tokio_postgres::Client,
) -> Result<Vec<&'static (&'static str, &'static str)>, StorageError> {
    let exists: bool = client
        .query_one("SELECT to_regclass('schema_migrations') IS NOT NULL", &[])
        .await?
        .get(0);
    let applied: Vec<String> = if exists {
        client
            .query("SELECT version FROM schema_migrations", &[])
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect()
    } else {
        Vec::new()
    };
    Ok(MIGRATIONS
        .iter()
        .filter(|(version, _)| !applied.iter().any(|a| a == version))
        .collect())
}

/// Applies `pending` in order, each in its own transaction (the caller holds the migration
/// lock, so nobody applies them meanwhile).
async fn apply(
    client: &mut tokio_postgres::Client,
    pending: &[&(&str, &str)],
) -> Result<Vec<String>, StorageError> {
    let as_migration = |version: &str| {
        let version = version.to_owned();
        move |error| StorageError::Migration { version, error }
    };
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
               version text PRIMARY KEY,
               applied_at timestamptz NOT NULL DEFAULT clock_timestamp())",
        )
        .await
        .map_err(as_migration(pending[0].0))?;
    let mut applied = Vec::new();
    for (version, sql) in pending {
        let tx = client.transaction().await?;
        tx.batch_execute(sql).await.map_err(as_migration(version))?;
        tx.execute(
            "INSERT INTO schema_migrations (version) VALUES ($1)",
            &[version],
        )
        .await?;
        tx.commit().await?;
        tracing::info!(version, "migration applied");
        applied.push((*version).to_owned());
    }
    Ok(applied)
}

/// Whether every migration is applied (health reports SERVING only then).
pub async fn is_current(client: &tokio_postgres::Client) -> Result<bool, StorageError> {
    let row = client
        .query_one(
            "SELECT count(*) FROM schema_migrations WHERE version = ANY($1)",
            &[&MIGRATIONS.iter().map(|(v, _)| *v).collect::<Vec<_>>()],
        )
        .await?;
    Ok(row.get::<_, i64>(0) == MIGRATIONS.len() as i64)
}
