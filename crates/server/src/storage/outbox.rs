//! The outbox publisher's SQL: election, pending events, progress, backlog and retention.
//!
//! The writer inserts one `outbox` row per accepted posting in the batch transaction
//! (`storage::batch`). The publisher (`crate::outbox`) reads them here in `sequence` order after
//! `outbox_progress.published_sequence`, and records progress after the broker acknowledged.
//! Migration `0002_outbox` makes the database refuse a progress that moves backwards and the
//! deletion of an outbox row that is not delivered yet.

use super::{StorageError, PUBLISHER_LOCK};
use deadpool_postgres::GenericClient;
use std::time::Duration;
use time::OffsetDateTime;
use uuid::Uuid;

/// An outbox row not yet delivered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingEvent {
    pub sequence: i64,
    pub posting_id: Uuid,
    pub created_at: OffsetDateTime,
}

/// What waits in the outbox: the backlog size and the age of its oldest event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backlog {
    /// Events not yet acknowledged by the broker.
    pub pending: i64,
    /// How long the oldest of them has waited (`None` when there is none).
    pub oldest_age: Option<Duration>,
    /// The last sequence whose event the broker acknowledged.
    pub published_sequence: i64,
}

/// Tries to take the session-scoped advisory lock that elects the one active publisher. It is
/// held until the session ends (the connection closes or the process dies).
pub async fn try_lock_publisher(client: &impl GenericClient) -> Result<bool, StorageError> {
    let row = client
        .query_one("SELECT pg_try_advisory_lock($1)", &[&PUBLISHER_LOCK])
        .await?;
    Ok(row.get(0))
}

/// The last sequence whose event the broker acknowledged.
pub async fn published_sequence(client: &impl GenericClient) -> Result<i64, StorageError> {
    let row = client
        .query_one(
            "SELECT published_sequence FROM outbox_progress WHERE ledger_id = 0",
            &[],
        )
        .await?;
    Ok(row.get(0))
}

/// The next at most `limit` pending events after sequence `after`, in sequence order.
pub async fn pending(
    client: &impl GenericClient,
    after: i64,
    limit: i64,
) -> Result<Vec<PendingEvent>, StorageError> {
    let rows = client
        .query(
            "SELECT sequence, posting_id, created_at FROM outbox
             WHERE sequence > $1 ORDER BY sequence LIMIT $2",
            &[&after, &limit],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| PendingEvent {
            sequence: r.get(0),
            posting_id: r.get(1),
            created_at: r.get(2),
        })
        .collect())
}

/// Records that every event up to `sequence` is delivered. Returns false (and changes
/// nothing) when the recorded progress is already beyond it, which only another publisher
/// could have done: the caller must stop publishing.
pub async fn record_progress(
    client: &impl GenericClient,
    sequence: i64,
) -> Result<bool, StorageError> {
    let n = client
        .execute(
            "UPDATE outbox_progress SET published_sequence = $1, updated_at = clock_timestamp()
             WHERE ledger_id = 0 AND published_sequence <= $1",
            &[&sequence],
        )
        .await?;
    Ok(n == 1)
}

/// The backlog: pending events and the age of the oldest (by the database clock). The one
/// query of it: the publisher logs it, `/metrics` shows it.
pub async fn backlog(client: &impl GenericClient) -> Result<Backlog, StorageError> {
    let row = client
        .query_one(
            "SELECT p.published_sequence, count(o.sequence),
                    extract(epoch FROM clock_timestamp() - min(o.created_at))::float8
             FROM outbox_progress p
             LEFT JOIN outbox o ON o.sequence > p.published_sequence
             WHERE p.ledger_id = 0
             GROUP BY p.published_sequence",
            &[],
        )
        .await?;
    let age: Option<f64> = row.get(2);
    Ok(Backlog {
        published_sequence: row.get(0),
        pending: row.get(1),
        oldest_age: age.map(|s| Duration::from_secs_f64(s.max(0.0))),
    })
}

/// Deletes at most `limit` delivered outbox rows older than `retention` (oldest first);
/// returns how many. Call it again while it returns `limit`.
pub async fn prune_delivered(
    client: &impl GenericClient,
    retention: Duration,
    limit: i64,
) -> Result<u64, StorageError> {
    // At most a century: PostgreSQL intervals are bounded.
    let retention_us = retention.as_micros().min(100 * 366 * 86_400 * 1_000_000) as i64;
    let n = client
        .execute(
            "DELETE FROM outbox WHERE sequence IN (
               SELECT o.sequence FROM outbox o, outbox_progress p
               WHERE p.ledger_id = 0 AND o.sequence <= p.published_sequence
                 AND o.created_at < clock_timestamp() - $1::bigint * interval '1 microsecond'
               ORDER BY o.sequence LIMIT $2)",
            &[&retention_us, &limit],
        )
        .await?;
    Ok(n)
}
