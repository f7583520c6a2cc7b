//! Period closes as stored (migration 0017): read back by key (a replay), listed, and their
//! trial balances recorded once after the close commits.

use super::StorageError;
use deadpool_postgres::GenericClient;
use ledger_core::ledger::LedgerId;
use ledger_core::period::PeriodClose;
use ledger_core::record::Balance;
use std::collections::HashMap;
use time::OffsetDateTime;
use tokio_postgres::Row;

const CLOSE_COLUMNS: &str =
    "c.effective_before, c.after_sequence, c.recorded_at, c.caller, c.idempotency_key, c.memo, c.key_id";

/// The closes decided under these keys (by key number).
pub async fn by_key(
    client: &impl GenericClient,
    keys: &[i64],
) -> Result<HashMap<i64, PeriodClose>, StorageError> {
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    let sql = format!("SELECT {CLOSE_COLUMNS} FROM period_closes c WHERE c.key_id = ANY($1)");
    let rows = client.query(&sql, &[&keys]).await?;
    Ok(rows
        .iter()
        .map(|r| (r.get("key_id"), close_of(r)))
        .collect())
}

fn close_of(r: &Row) -> PeriodClose {
    PeriodClose {
        effective_before: r.get("effective_before"),
        after_sequence: r.get("after_sequence"),
        recorded_at: r.get("recorded_at"),
        caller: r.get("caller"),
        idempotency_key: r.get("idempotency_key"),
        memo: r.get("memo"),
    }
}

/// A close with its trial balance's summary, once recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    pub close: PeriodClose,
    /// (accounts, totals as stored JSON, digest size, digest root); `None` until recorded.
    pub trial_balance: Option<(i64, serde_json::Value, i64, Vec<u8>)>,
}

/// A ledger's closes after the one before `after` (exclusive), oldest first.
pub async fn list(
    client: &impl GenericClient,
    ledger: LedgerId,
    after: Option<OffsetDateTime>,
    limit: i64,
) -> Result<Vec<Listed>, StorageError> {
    let sql = format!(
        "SELECT {CLOSE_COLUMNS}, t.accounts, t.totals, t.digest_size, t.digest_root
         FROM period_closes c LEFT JOIN period_close_trial_balances t USING (ledger_id, effective_before)
         WHERE c.ledger_id = $1 AND ($2::timestamptz IS NULL OR c.effective_before > $2)
         ORDER BY c.effective_before LIMIT $3"
    );
    let rows = client.query(&sql, &[&ledger, &after, &limit]).await?;
    Ok(rows
        .iter()
        .map(|r| Listed {
            close: close_of(r),
            trial_balance: r.get::<_, Option<i64>>("accounts").map(|n| {
                (
                    n,
                    r.get("totals"),
                    r.get("digest_size"),
                    r.get("digest_root"),
                )
            }),
        })
        .collect())
}

/// Records a close's trial balance: its balances (account ids in `ids`, in order), then its
/// summary, in one transaction; a second recording of the same close changes nothing.
pub async fn record_trial_balance(
    client: &mut deadpool_postgres::Client,
    (ledger, before): (LedgerId, OffsetDateTime),
    (ids, balances): (&[i64], &[Balance]),
    (totals, digest): (serde_json::Value, (i64, Vec<u8>)),
) -> Result<(), StorageError> {
    let tx = client.transaction().await?;
    let text = |f: fn(&Balance) -> i128| -> Vec<String> {
        balances
            .iter()
            .map(|b| ledger_core::amount::format_minor(f(b), b.scale))
            .collect()
    };
    tx.execute(
        "INSERT INTO period_close_balances (ledger_id, effective_before, account_id, debits, credits, held_debits, held_credits)
         SELECT $1, $2, u.a, u.d::numeric, u.c::numeric, u.hd::numeric, u.hc::numeric
         FROM unnest($3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[]) AS u(a, d, c, hd, hc)
         ON CONFLICT DO NOTHING",
        &[
            &ledger,
            &before,
            &ids,
            &text(|b| b.debits),
            &text(|b| b.credits),
            &text(|b| b.held_debits),
            &text(|b| b.held_credits),
        ],
    )
    .await?;
    tx.execute(
        "INSERT INTO period_close_trial_balances (ledger_id, effective_before, accounts, totals, digest_size, digest_root)
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        &[&ledger, &before, &(ids.len() as i64), &totals, &digest.0, &digest.1],
    )
    .await?;
    tx.commit().await?;
    Ok(())
}
