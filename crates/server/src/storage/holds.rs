//! The holds the expiry task releases: open holds whose expiry time has passed.

use super::StorageError;
use deadpool_postgres::GenericClient;
use ledger_core::ledger::LedgerId;
use time::OffsetDateTime;
use uuid::Uuid;

/// The database's clock, and the open holds (of every ledger: their ledgers and ids) expiring
/// in `($1, now]` (`$1` null: from the start), oldest expiry first, at most `$2`.
const DUE_SQL: &str = "SELECT now() AS now, ARRAY(
       SELECT p.ledger_id FROM postings p
       WHERE p.hold AND p.hold_expires_at <= now() AND ($1::timestamptz IS NULL OR p.hold_expires_at > $1)
         AND NOT EXISTS (SELECT 1 FROM postings c WHERE c.closes_hold_posting_id = p.posting_id)
       ORDER BY p.hold_expires_at, p.sequence LIMIT $2) AS ledgers,
     ARRAY(
       SELECT p.posting_id FROM postings p
       WHERE p.hold AND p.hold_expires_at <= now() AND ($1::timestamptz IS NULL OR p.hold_expires_at > $1)
         AND NOT EXISTS (SELECT 1 FROM postings c WHERE c.closes_hold_posting_id = p.posting_id)
       ORDER BY p.hold_expires_at, p.sequence LIMIT $2) AS due";

/// Open holds whose expiry time has passed (their ledger and id), expiring after `from`
/// (none: any), at most `limit`; and the database's clock when it looked.
pub async fn due(
    client: &impl GenericClient,
    from: Option<OffsetDateTime>,
    limit: usize,
) -> Result<(Vec<(LedgerId, Uuid)>, OffsetDateTime), StorageError> {
    let st = client.prepare_cached(DUE_SQL).await?;
    let row = client.query_one(&st, &[&from, &(limit as i64)]).await?;
    let (ledgers, ids): (Vec<LedgerId>, Vec<Uuid>) = (row.get("ledgers"), row.get("due"));
    assert_eq!(
        ledgers.len(),
        ids.len(),
        "one ledger per due hold (one snapshot)"
    );
    Ok((ledgers.into_iter().zip(ids).collect(), row.get("now")))
}
