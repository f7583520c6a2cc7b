//! A small migration runner: plain SQL files embedded at build time, applied in order under
//! an advisory lock, each recorded once in `schema_migrations`.

use super::{connect, StorageError, MIGRATION_LOCK};

/// The migrations, in order. A file, once released, is never edited: add a new one.
pub const MIGRATIONS: &[(&str, &str)] = &[
    (
        "0001_journal",
        include_str!("../../migrations/0001_journal.sql"),
    ),
    (
        "0002_outbox",
        include_str!("../../migrations/0002_outbox.sql"),
    ),
    (
        "0003_roles",
        include_str!("../../migrations/0003_roles.sql"),
    ),
    (
        "0004_batch_without_row_fks",
        include_str!("../../migrations/0004_batch_without_row_fks.sql"),
    ),
    (
        "0005_asof_stabbing",
        include_str!("../../migrations/0005_asof_stabbing.sql"),
    ),
    (
        "0006_check",
        include_str!("../../migrations/0006_check.sql"),
    ),
    (
        "0007_void_index_only_on_voids",
        include_str!("../../migrations/0007_void_index_only_on_voids.sql"),
    ),
    (
        "0008_postings_name_their_key_by_number",
        include_str!("../../migrations/0008_postings_name_their_key_by_number.sql"),
    ),
    (
        "0009_rejection_facts",
        include_str!("../../migrations/0009_rejection_facts.sql"),
    ),
];

/// Applies every migration not yet applied. Safe to run from several processes at once.
pub async fn migrate(database_url: &str) -> Result<Vec<String>, StorageError> {
    let mut client = connect(database_url).await?;
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    let result = apply(&mut client).await;
    let _ = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await;
    result
}

async fn apply(client: &mut tokio_postgres::Client) -> Result<Vec<String>, StorageError> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
               version text PRIMARY KEY,
               applied_at timestamptz NOT NULL DEFAULT clock_timestamp())",
        )
        .await?;
    let mut applied = Vec::new();
    for (version, sql) in MIGRATIONS {
        let tx = client.transaction().await?;
        let done = tx
            .query_opt(
                "SELECT 1 FROM schema_migrations WHERE version = $1",
                &[version],
            )
            .await?
            .is_some();
        if done {
            continue;
        }
        tx.batch_execute(sql)
            .await
            .map_err(|error| StorageError::Migration {
                version: (*version).to_owned(),
                error,
            })?;
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
