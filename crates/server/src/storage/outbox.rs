//! The outbox publisher's SQL: election, pending events per ledger, progress per ledger,
//! backlog and retention.
//!
//! The writer inserts one `outbox` row per accepted posting in the batch transaction
//! (`storage::batch`), keyed by the posting's stored sequence, so each ledger's rows are one
//! contiguous range of the table's primary key (`ledger_core::ledger`). Each ledger has its
//! own row in `outbox_progress`: `published_sequence`, a stored sequence of that ledger, is
//! its last event the broker acknowledged. The publisher (`crate::outbox`) reads a ledger's
//! rows here in `sequence` order after its progress, and records that ledger's progress after
//! the broker acknowledged. Migrations `0002_outbox` and `0013_ledgers` make the database
//! refuse a progress that moves backwards and the deletion of an outbox row its ledger has not
//! delivered yet.

use super::{StorageError, PUBLISHER_LOCK};
use deadpool_postgres::GenericClient;
use ledger_core::ledger::{self, LedgerId};
use ledger_core::limits::SEQUENCE_BITS;
use std::time::Duration;
use time::OffsetDateTime;
use uuid::Uuid;

/// An outbox row not yet delivered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingEvent {
    /// The posting's stored sequence (its ledger is `ledger::of_sequence`).
    pub sequence: i64,
    pub posting_id: Uuid,
    pub created_at: OffsetDateTime,
}

/// A ledger with events waiting, and its recorded progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LedgerProgress {
    pub ledger: LedgerId,
    /// The stored sequence of its last event the broker acknowledged.
    pub published_sequence: i64,
}

/// What waits in the whole outbox, over every ledger: what `/metrics` shows (totals, so the
/// metrics stay a fixed set however many ledgers there are).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backlog {
    /// Events not yet acknowledged by the broker, of every ledger.
    pub pending: i64,
    /// How long the oldest of them has waited, whatever its ledger (`None` when there is none):
    /// the lag of the ledger furthest behind.
    pub oldest_age: Option<Duration>,
    /// Ledgers with at least one event waiting.
    pub ledgers_behind: i64,
}

/// What waits in the outbox of one ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerBacklog {
    pub ledger: LedgerId,
    pub code: String,
    /// Its events not yet acknowledged by the broker.
    pub pending: i64,
    /// How long the oldest of them has waited (`None` when there is none).
    pub oldest_age: Option<Duration>,
    /// Its last sequence (within the ledger, as callers see it) the broker acknowledged.
    pub published_sequence: i64,
}

/// The first stored sequence past ledger `ledger`'s range: its rows are
/// `stored(ledger, 0) < sequence < end_of(ledger)`.
fn end_of(ledger: LedgerId) -> i64 {
    ledger::stored(ledger, ledger::MAX_SEQUENCE_IN_LEDGER) + 1
}

/// Tries to take the session-scoped advisory lock that elects the one active publisher. It is
/// held until the session ends (the connection closes or the process dies).
pub async fn try_lock_publisher(client: &impl GenericClient) -> Result<bool, StorageError> {
    let row = client
        .query_one("SELECT pg_try_advisory_lock($1)", &[&PUBLISHER_LOCK])
        .await?;
    Ok(row.get(0))
}

/// The stored sequence of ledger `ledger`'s last event the broker acknowledged.
pub async fn published_sequence(
    client: &impl GenericClient,
    ledger: LedgerId,
) -> Result<i64, StorageError> {
    let row = client
        .query_one(
            "SELECT published_sequence FROM outbox_progress WHERE ledger_id = $1",
            &[&ledger],
        )
        .await?;
    Ok(row.get(0))
}

/// The ledgers with at least one event past their progress, by id. One probe of the outbox's
/// primary key per ledger (the first row past its progress, within its range).
pub async fn ledgers_pending(
    client: &impl GenericClient,
) -> Result<Vec<LedgerProgress>, StorageError> {
    let bits = SEQUENCE_BITS as i32;
    let rows = client
        .query(
            "SELECT p.ledger_id, p.published_sequence FROM outbox_progress p
             WHERE EXISTS (SELECT 1 FROM outbox o
                           WHERE o.sequence > p.published_sequence
                             AND o.sequence < ((p.ledger_id::bigint + 1) << $1))
             ORDER BY p.ledger_id",
            &[&bits],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| LedgerProgress {
            ledger: r.get(0),
            published_sequence: r.get(1),
        })
        .collect())
}

/// The codes of these ledgers: (id, code).
pub async fn ledger_codes(
    client: &impl GenericClient,
    ledgers: &[LedgerId],
) -> Result<Vec<(LedgerId, String)>, StorageError> {
    let rows = client
        .query(
            "SELECT ledger_id, code FROM ledgers WHERE ledger_id = ANY($1)",
            &[&ledgers],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// The next at most `limit` pending events of the ledger of stored sequence `after`, after it,
/// in sequence order.
pub async fn pending(
    client: &impl GenericClient,
    after: i64,
    limit: i64,
) -> Result<Vec<PendingEvent>, StorageError> {
    let end = end_of(ledger::of_sequence(after));
    let rows = client
        .query(
            "SELECT sequence, posting_id, created_at FROM outbox
             WHERE sequence > $1 AND sequence < $2 ORDER BY sequence LIMIT $3",
            &[&after, &end, &limit],
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

/// Records that every event of its ledger up to stored sequence `sequence` is delivered.
/// Returns false (and changes nothing) when that ledger's recorded progress is already beyond
/// it, which only another publisher could have done: the caller must stop publishing.
pub async fn record_progress(
    client: &impl GenericClient,
    sequence: i64,
) -> Result<bool, StorageError> {
    let n = client
        .execute(
            "UPDATE outbox_progress SET published_sequence = $1, updated_at = clock_timestamp()
             WHERE ledger_id = $2 AND published_sequence <= $1",
            &[&sequence, &ledger::of_sequence(sequence)],
        )
        .await?;
    Ok(n == 1)
}

/// Each ledger's backlog (`only`: that ledger's alone), by the database clock, by ledger id.
/// Counts the pending rows of each ledger on the outbox's primary key.
pub async fn ledger_backlogs(
    client: &impl GenericClient,
    only: Option<LedgerId>,
) -> Result<Vec<LedgerBacklog>, StorageError> {
    let bits = SEQUENCE_BITS as i32;
    let rows = client
        .query(
            "SELECT p.ledger_id, l.code, p.published_sequence, b.pending, b.age
             FROM outbox_progress p JOIN ledgers l USING (ledger_id)
             CROSS JOIN LATERAL (
               SELECT count(*) AS pending,
                      extract(epoch FROM clock_timestamp() - min(o.created_at))::float8 AS age
               FROM outbox o
               WHERE o.sequence > p.published_sequence
                 AND o.sequence < ((p.ledger_id::bigint + 1) << $1)) b
             WHERE $2::integer IS NULL OR p.ledger_id = $2
             ORDER BY p.ledger_id",
            &[&bits, &only],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| LedgerBacklog {
            ledger: r.get(0),
            code: r.get(1),
            published_sequence: ledger::in_ledger(r.get(2)),
            pending: r.get(3),
            oldest_age: age(r.get(4)),
        })
        .collect())
}

fn age(seconds: Option<f64>) -> Option<Duration> {
    seconds.map(|s| Duration::from_secs_f64(s.max(0.0)))
}

/// The backlog of ledger `ledger`.
pub async fn ledger_backlog(
    client: &impl GenericClient,
    ledger: LedgerId,
) -> Result<LedgerBacklog, StorageError> {
    ledger_backlogs(client, Some(ledger))
        .await?
        .pop()
        .ok_or_else(|| StorageError::Corrupt {
            row: format!("outbox progress of ledger {ledger}"),
            sequence: None,
            detail: "every ledger has its row in outbox_progress".into(),
        })
}

/// The backlog of the whole outbox: every ledger's pending events, the age of the oldest
/// (by the database clock) and how many ledgers have some. The one query of it: `/metrics`
/// shows it, the publisher logs it.
pub async fn backlog(client: &impl GenericClient) -> Result<Backlog, StorageError> {
    let bits = SEQUENCE_BITS as i32;
    let row = client
        .query_one(
            "SELECT coalesce(sum(b.pending), 0)::bigint, max(b.age), count(*) FILTER (WHERE b.pending > 0)
             FROM outbox_progress p
             CROSS JOIN LATERAL (
               SELECT count(*) AS pending,
                      extract(epoch FROM clock_timestamp() - min(o.created_at))::float8 AS age
               FROM outbox o
               WHERE o.sequence > p.published_sequence
                 AND o.sequence < ((p.ledger_id::bigint + 1) << $1)) b",
            &[&bits],
        )
        .await?;
    Ok(Backlog {
        pending: row.get(0),
        oldest_age: age(row.get(1)),
        ledgers_behind: row.get(2),
    })
}

/// Deletes at most `limit` delivered outbox rows older than `retention`, each by its own
/// ledger's progress (a ledger behind keeps what it has not delivered; the others are pruned
/// all the same), oldest first within a ledger; returns how many. Call it again while it
/// returns `limit`.
pub async fn prune_delivered(
    client: &impl GenericClient,
    retention: Duration,
    limit: i64,
) -> Result<u64, StorageError> {
    // At most a century: PostgreSQL intervals are bounded.
    let retention_us = retention.as_micros().min(100 * 366 * 86_400 * 1_000_000) as i64;
    let bits = SEQUENCE_BITS as i32;
    let n = client
        .execute(
            "DELETE FROM outbox WHERE sequence IN (
               SELECT d.sequence FROM outbox_progress p
               CROSS JOIN LATERAL (
                 SELECT o.sequence FROM outbox o
                 WHERE o.sequence >= (p.ledger_id::bigint << $3)
                   AND o.sequence <= p.published_sequence
                   AND o.created_at < clock_timestamp() - $1::bigint * interval '1 microsecond'
                 ORDER BY o.sequence LIMIT $2) d
               LIMIT $2)",
            &[&retention_us, &limit, &bits],
        )
        .await?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ledgers_rows_end_where_the_next_ledgers_begin() {
        assert_eq!(end_of(0), ledger::stored(1, 0));
        assert_eq!(end_of(7), ledger::stored(8, 0));
        assert_eq!(ledger::of_sequence(end_of(7) - 1), 7);
    }
}
