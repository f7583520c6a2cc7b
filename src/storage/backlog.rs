//! What the operations side reads: the outbox backlog (metrics).

use super::StorageError;
use time::OffsetDateTime;

/// Events not yet delivered (after the publisher's progress), and when the oldest of them
/// was written.
pub async fn outbox_backlog(
    client: &tokio_postgres::Client,
) -> Result<(i64, Option<OffsetDateTime>), StorageError> {
    let row = client
        .query_one(
            "SELECT count(*), min(o.created_at) FROM outbox o
             WHERE o.sequence > (SELECT coalesce(max(published_sequence), 0) FROM outbox_progress)",
            &[],
        )
        .await?;
    Ok((row.get(0), row.get(1)))
}
