//! What the operations side reads: the outbox backlog (metrics).
//!
//! MERGE NOTE: this counts every row in `outbox`. Once the publisher records its progress
//! (and deletes published rows only after retention), point [`outbox_backlog`] at the outbox
//! module's "unpublished events" query; the metrics code calls only this function.

use super::StorageError;
use time::OffsetDateTime;

/// Events waiting in the outbox, and when the oldest of them was written.
pub async fn outbox_backlog(
    client: &tokio_postgres::Client,
) -> Result<(i64, Option<OffsetDateTime>), StorageError> {
    let row = client
        .query_one("SELECT count(*), min(created_at) FROM outbox", &[])
        .await?;
    Ok((row.get(0), row.get(1)))
}
