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
//!
//! Account events have an outbox of their own (`account_outbox`, migration
//! `0015_account_events`): one row per version `UpdateAccount` records, in the same batch
//! transaction, numbered by `event_id` (commit order within a ledger, not gapless), with each
//! ledger's progress in `account_outbox_progress` (no row: none published yet), under the same
//! rules. The backlog counts both.

use super::accounts::{account_from_row, ACCOUNT_COLUMNS};
use super::terms::{version_from_row, TERMS_COLUMNS, VERSION_COLUMNS};
use super::{StorageError, PUBLISHER_LOCK};
use deadpool_postgres::GenericClient;
use ledger_core::ledger::{self, LedgerId};
use ledger_core::limits::SEQUENCE_BITS;
use ledger_core::terms::AccountVersion;
use ledger_core::Account;
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

/// An account version waiting in `account_outbox`, with its account.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingAccountEvent {
    /// Its place in its ledger's order of account events.
    pub event_id: i64,
    pub created_at: OffsetDateTime,
    pub account: Account,
    pub version: AccountVersion,
}

/// A ledger with events waiting, of its postings, of its accounts or both, and the progress
/// of each kind that has some.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LedgerWaiting {
    pub ledger: LedgerId,
    /// Posting events wait: the stored sequence of its last one the broker acknowledged.
    pub postings: Option<i64>,
    /// Account events wait: the event id of its last one the broker acknowledged (0: none).
    pub accounts: Option<i64>,
    /// Digests wait: the stored sequence (the tree's size) of its last one the broker
    /// acknowledged (the ledger's first stored sequence less one: none).
    pub digests: Option<i64>,
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

/// The ledgers with at least one posting event past their progress, by id.
pub async fn ledgers_pending(
    client: &impl GenericClient,
) -> Result<Vec<LedgerProgress>, StorageError> {
    Ok(ledgers_waiting(client)
        .await?
        .into_iter()
        .filter_map(|w| {
            w.postings.map(|published_sequence| LedgerProgress {
                ledger: w.ledger,
                published_sequence,
            })
        })
        .collect())
}

/// The ledgers with at least one event past their progress (posting events, account events
/// or both), by id: the publisher's one look for work. One probe of each outbox's primary
/// key per ledger (the first row past its progress, within its ledger).
pub async fn ledgers_waiting(
    client: &impl GenericClient,
) -> Result<Vec<LedgerWaiting>, StorageError> {
    let bits = SEQUENCE_BITS as i32;
    let rows = client
        .query(
            "SELECT * FROM (
               SELECT p.ledger_id, p.published_sequence,
                      EXISTS (SELECT 1 FROM outbox o
                              WHERE o.sequence > p.published_sequence
                                AND o.sequence < ((p.ledger_id::bigint + 1) << $1)) AS postings,
                      coalesce(ap.published_event_id, 0) AS published_event_id,
                      EXISTS (SELECT 1 FROM account_outbox e
                              WHERE e.ledger_id = p.ledger_id
                                AND e.event_id > coalesce(ap.published_event_id, 0)) AS accounts,
                      coalesce(dp.published_sequence, p.ledger_id::bigint << $1) AS published_digest,
                      EXISTS (SELECT 1 FROM posting_hashes h
                              WHERE h.sequence > coalesce(dp.published_sequence, p.ledger_id::bigint << $1)
                                AND h.sequence < ((p.ledger_id::bigint + 1) << $1) AND h.root IS NOT NULL) AS digests
               FROM outbox_progress p LEFT JOIN account_outbox_progress ap USING (ledger_id)
               LEFT JOIN digest_progress dp USING (ledger_id)) w
             WHERE postings OR accounts OR digests
             ORDER BY ledger_id",
            &[&bits],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| LedgerWaiting {
            ledger: r.get(0),
            postings: r.get::<_, bool>(2).then(|| r.get(1)),
            accounts: r.get::<_, bool>(4).then(|| r.get(3)),
            digests: r.get::<_, bool>(6).then(|| r.get(5)),
        })
        .collect())
}

/// A digest waiting to be published: the stored sequence of the batch's last posting (the
/// tree's size), the root there, and when that posting was recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingDigest {
    pub sequence: i64,
    pub root: [u8; 32],
    pub recorded_at: time::OffsetDateTime,
}

/// The digests of ledger `ledger` after the stored sequence `after`, in order, at most `limit`.
pub async fn pending_digests(
    client: &impl GenericClient,
    ledger: LedgerId,
    after: i64,
    limit: i64,
) -> Result<Vec<PendingDigest>, StorageError> {
    let end = (i64::from(ledger) + 1) << SEQUENCE_BITS;
    let rows = client
        .query(
            "SELECT h.sequence, h.root, p.recorded_at FROM posting_hashes h JOIN postings p USING (sequence)
             WHERE h.sequence > $1 AND h.sequence < $2 AND h.root IS NOT NULL ORDER BY h.sequence LIMIT $3",
            &[&after, &end, &limit],
        )
        .await?;
    rows.iter()
        .map(|r| {
            let sequence: i64 = r.get(0);
            let root: Vec<u8> = r.get(1);
            let root = <[u8; 32]>::try_from(root.as_slice()).map_err(|_| {
                StorageError::corrupt_posting(sequence, "its digest's root is not 32 bytes")
            })?;
            Ok(PendingDigest {
                sequence,
                root,
                recorded_at: r.get(2),
            })
        })
        .collect()
}

/// Records that every digest of ledger `ledger` up to the stored sequence `sequence` is
/// delivered; false (nothing changed) when its progress is already beyond (another publisher).
pub async fn record_digest_progress(
    client: &impl GenericClient,
    ledger: LedgerId,
    sequence: i64,
) -> Result<bool, StorageError> {
    let n = client
        .execute(
            "INSERT INTO digest_progress AS p (ledger_id, published_sequence, updated_at)
             VALUES ($1, $2, clock_timestamp())
             ON CONFLICT (ledger_id) DO UPDATE
               SET published_sequence = excluded.published_sequence, updated_at = excluded.updated_at
               WHERE p.published_sequence <= excluded.published_sequence",
            &[&ledger, &sequence],
        )
        .await?;
    Ok(n == 1)
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

/// The next at most `limit` account events of ledger `ledger` after event `after`, in event
/// order, each with its account and the version it announces.
pub async fn pending_accounts(
    client: &impl GenericClient,
    ledger: LedgerId,
    after: i64,
    limit: i64,
) -> Result<Vec<PendingAccountEvent>, StorageError> {
    let sql = format!(
        "SELECT o.event_id, o.created_at AS event_created_at, {ACCOUNT_COLUMNS}, {TERMS_COLUMNS},
                {VERSION_COLUMNS}
         FROM account_outbox o
         JOIN accounts a ON a.account_id = o.account_id
         JOIN account_terms v ON v.account_id = o.account_id AND v.terms_version = o.terms_version
         WHERE o.ledger_id = $1 AND o.event_id > $2 ORDER BY o.event_id LIMIT $3"
    );
    let rows = client.query(&sql, &[&ledger, &after, &limit]).await?;
    rows.iter()
        .map(|r| {
            let account = account_from_row(r)?;
            Ok(PendingAccountEvent {
                event_id: r.get("event_id"),
                created_at: r.get("event_created_at"),
                version: version_from_row(r, &account)?,
                account,
            })
        })
        .collect()
}

/// Records that every account event of ledger `ledger` up to event `event_id` is delivered.
/// Returns false (and changes nothing) when its recorded progress is already beyond it, which
/// only another publisher could have done: the caller must stop publishing.
pub async fn record_account_progress(
    client: &impl GenericClient,
    ledger: LedgerId,
    event_id: i64,
) -> Result<bool, StorageError> {
    let n = client
        .execute(
            "INSERT INTO account_outbox_progress AS p (ledger_id, published_event_id, updated_at)
             VALUES ($1, $2, clock_timestamp())
             ON CONFLICT (ledger_id) DO UPDATE
               SET published_event_id = excluded.published_event_id, updated_at = excluded.updated_at
               WHERE p.published_event_id <= excluded.published_event_id",
            &[&ledger, &event_id],
        )
        .await?;
    Ok(n == 1)
}

/// For each ledger's row `p` of `outbox_progress`: its events waiting, of both kinds, as
/// `b.pending`, and the seconds the oldest of them has waited as `b.age` (NULL: none), each
/// outbox counted on its primary key.
const PENDING_PER_LEDGER: &str = "CROSS JOIN LATERAL (
       SELECT count(*) AS pending, min(o.created_at) AS oldest FROM outbox o
       WHERE o.sequence > p.published_sequence
         AND o.sequence < ((p.ledger_id::bigint + 1) << $1)) po
     CROSS JOIN LATERAL (
       SELECT count(*) AS pending, min(e.created_at) AS oldest FROM account_outbox e
       WHERE e.ledger_id = p.ledger_id
         AND e.event_id > coalesce((SELECT ap.published_event_id FROM account_outbox_progress ap
                                    WHERE ap.ledger_id = p.ledger_id), 0)) pa
     CROSS JOIN LATERAL (
       SELECT po.pending + pa.pending AS pending,
              extract(epoch FROM clock_timestamp() - least(po.oldest, pa.oldest))::float8 AS age) b";

/// Each ledger's backlog (`only`: that ledger's alone), by the database clock, by ledger id:
/// its posting and account events waiting. Counts the pending rows of each ledger on each
/// outbox's primary key.
pub async fn ledger_backlogs(
    client: &impl GenericClient,
    only: Option<LedgerId>,
) -> Result<Vec<LedgerBacklog>, StorageError> {
    let bits = SEQUENCE_BITS as i32;
    let sql = format!(
        "SELECT p.ledger_id, l.code, p.published_sequence, b.pending, b.age
         FROM outbox_progress p JOIN ledgers l USING (ledger_id)
         {PENDING_PER_LEDGER}
         WHERE $2::integer IS NULL OR p.ledger_id = $2
         ORDER BY p.ledger_id"
    );
    let rows = client.query(&sql, &[&bits, &only]).await?;
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

/// The backlog of the whole outbox: every ledger's pending events (of postings and of
/// accounts), the age of the oldest (by the database clock) and how many ledgers have some.
/// The one query of it: `/metrics` shows it, the publisher logs it.
pub async fn backlog(client: &impl GenericClient) -> Result<Backlog, StorageError> {
    let bits = SEQUENCE_BITS as i32;
    let sql = format!(
        "SELECT coalesce(sum(b.pending), 0)::bigint, max(b.age), count(*) FILTER (WHERE b.pending > 0)
         FROM outbox_progress p
         {PENDING_PER_LEDGER}"
    );
    let row = client.query_one(&sql, &[&bits]).await?;
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

/// Deletes at most `limit` delivered account outbox rows older than `retention`, each by its
/// own ledger's progress, oldest first within a ledger; returns how many. Call it again while
/// it returns `limit`.
pub async fn prune_delivered_accounts(
    client: &impl GenericClient,
    retention: Duration,
    limit: i64,
) -> Result<u64, StorageError> {
    let retention_us = retention.as_micros().min(100 * 366 * 86_400 * 1_000_000) as i64;
    let n = client
        .execute(
            "DELETE FROM account_outbox WHERE (ledger_id, event_id) IN (
               SELECT d.ledger_id, d.event_id FROM account_outbox_progress p
               CROSS JOIN LATERAL (
                 SELECT o.ledger_id, o.event_id FROM account_outbox o
                 WHERE o.ledger_id = p.ledger_id
                   AND o.event_id <= p.published_event_id
                   AND o.created_at < clock_timestamp() - $1::bigint * interval '1 microsecond'
                 ORDER BY o.event_id LIMIT $2) d
               LIMIT $2)",
            &[&retention_us, &limit],
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
