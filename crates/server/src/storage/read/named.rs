//! The postings a batch's voids, captures and expiries name: read by the lane as recorded,
//! before the batch; their state now, read by the load under the write lock.

use super::super::accounts::{get_or_load_ids, rows_by_id, Found};
use super::super::StorageError;
use super::*;
use deadpool_postgres::GenericClient;
use ledger_core::account::AccountCache;
use ledger_core::record::Posting;
use ledger_core::write::NamedPostings;
use ledger_core::{Account, LedgerError};
use std::collections::HashMap;
use std::sync::RwLock;
use uuid::Uuid;

/// The postings a batch's voids, captures and expiries name, by id, as recorded: their
/// heads without their state (no void, no closing posting: those are read under the write
/// lock, [`TARGET_STATES_SQL`]). Each is looked up on its unique index (LATERAL … LIMIT 1),
/// whatever the statistics say.
const TARGET_HEADS_SQL: &str = "SELECT p.sequence, p.posting_id, p.caller, p.idempotency_key, p.effective_at,
            p.recorded_at, p.memo, p.metadata, p.voids_posting_id, p.void_reason, NULL::uuid AS voided_by,
            p.hold, p.hold_expires_at, p.closes_hold_posting_id, p.close_kind,
            NULL::uuid AS closed_by, NULL::text AS closed_how, NULL::bool AS lapsed,
            (SELECT h.hash FROM posting_hashes h WHERE h.sequence = p.sequence) AS hash
     FROM unnest($1::uuid[]) AS x(id)
     CROSS JOIN LATERAL (SELECT * FROM postings WHERE posting_id = x.id AND ledger_id = $2 LIMIT 1) p
     ORDER BY p.sequence";

/// The legs of those postings (entries or hold legs); their accounts come from the account
/// cache (read only when it misses them).
const TARGET_LEGS_SQL: &str = "SELECT l.sequence, l.leg_index, l.account_id, l.direction, l.amount::text AS amount
     FROM unnest($1::uuid[]) AS x(id)
     CROSS JOIN LATERAL (SELECT sequence FROM postings WHERE posting_id = x.id AND ledger_id = $2 LIMIT 1) p
     CROSS JOIN LATERAL (
           SELECT sequence, leg_index, account_id, direction, amount FROM entries WHERE sequence = p.sequence
           UNION ALL
           SELECT sequence, leg_index, account_id, direction, amount FROM hold_legs WHERE sequence = p.sequence) l
     ORDER BY l.sequence, l.leg_index";

/// Accounts by id, whole (those the cache does not hold).
/// The state of those postings now, read under the write lock: the void of each and the
/// posting that closed it (a hold), each looked up on its unique index.
pub(crate) const TARGET_STATES_SQL: &str = "SELECT x.id, v.posting_id AS voided_by, c.posting_id AS closed_by, c.close_kind AS closed_how
     FROM unnest($1::uuid[]) AS x(id)
     LEFT JOIN LATERAL (SELECT posting_id FROM postings
                        WHERE voids_posting_id = x.id AND voids_posting_id IS NOT NULL LIMIT 1) v ON true
     LEFT JOIN LATERAL (SELECT posting_id, close_kind FROM postings
                        WHERE closes_hold_posting_id = x.id LIMIT 1) c ON true";

/// A target's state now, from its [`TARGET_STATES_SQL`] row: its void, and the posting that
/// closed it when it is a hold.
pub(crate) fn with_state(
    mut p: Posting,
    row: &tokio_postgres::Row,
) -> Result<Posting, StorageError> {
    let sequence = p.sequence as i64;
    p.voided_by_posting_id = row.get("voided_by");
    let how = close_kind(row.get("closed_how"), sequence)?;
    let closed_by = row.get::<_, Option<Uuid>>("closed_by").zip(how);
    if let Some(h) = &mut p.hold {
        h.closed_by = closed_by;
    }
    Ok(p)
}

/// Reads the [`NamedPostings`] of ledger `ledger` by id (distinct), as recorded (their state
/// left out; a posting of another ledger is not found): two statements, sent together; their
/// legs' accounts through the account cache.
pub async fn named_postings(
    client: &impl GenericClient,
    ledger: LedgerId,
    ids: &[Uuid],
    cache: &RwLock<AccountCache>,
) -> Result<NamedPostings, StorageError> {
    if ids.is_empty() {
        return Ok(NamedPostings::default());
    }
    let (heads_st, legs_st) = futures_util::future::try_join(
        client.prepare_cached(TARGET_HEADS_SQL),
        client.prepare_cached(TARGET_LEGS_SQL),
    )
    .await?;
    let (heads, legs) = futures_util::future::try_join(
        client.query(&heads_st, &[&ids, &ledger]),
        client.query(&legs_st, &[&ids, &ledger]),
    )
    .await?;
    let accounts = leg_accounts(client, &legs, cache).await?;
    let mut legs_of: HashMap<i64, Vec<&tokio_postgres::Row>> = HashMap::new();
    for l in &legs {
        legs_of.entry(l.get("sequence")).or_default().push(l);
    }
    let mut t = NamedPostings::default();
    for h in &heads {
        let id: Uuid = h.get("posting_id");
        let rows = legs_of.remove(&h.get("sequence")).unwrap_or_default();
        match target(h, &rows, &accounts) {
            Ok(p) => {
                for l in &rows {
                    if let Some(Ok(a)) = accounts.get(&l.get("account_id")) {
                        t.accounts.insert(a.code.clone(), a.clone());
                    }
                }
                t.postings.insert(id, p);
            }
            Err(e) => {
                t.corrupt.insert(id, e);
            }
        }
    }
    Ok(t)
}

/// The accounts the leg rows name, by id, through the account cache.
async fn leg_accounts(
    client: &impl GenericClient,
    legs: &[tokio_postgres::Row],
    cache: &RwLock<AccountCache>,
) -> Result<Found<i64>, StorageError> {
    let ids: Vec<i64> = legs.iter().map(|l| l.get("account_id")).collect();
    let Some(ledger) = legs
        .first()
        .map(|l| ledger_core::ledger::of_sequence(l.get("sequence")))
    else {
        return Ok(Found::new());
    };
    get_or_load_ids(cache, ledger, &ids, |missing| async move {
        rows_by_id(client, &missing).await
    })
    .await
}

/// One target from its head and leg rows, on the accounts its legs name.
fn target(
    head: &tokio_postgres::Row,
    legs: &[&tokio_postgres::Row],
    accounts: &HashMap<i64, Result<Account, LedgerError>>,
) -> Result<Posting, LedgerError> {
    let mut p = posting_head(head).map_err(StorageError::into_ledger_error)?;
    let sequence = p.sequence as i64;
    for (i, l) in legs.iter().enumerate() {
        let account = match accounts.get(&l.get("account_id")) {
            Some(Ok(a)) => Some((a.code.clone(), i16::from(a.scale))),
            Some(Err(e)) => return Err(e.clone()),
            None => None,
        };
        let leg = leg_of(l, sequence, i, account).map_err(StorageError::into_ledger_error)?;
        p.legs.push(leg);
    }
    p.check_sound()
        .map_err(|e| StorageError::corrupt_posting(sequence, e).into_ledger_error())?;
    Ok(p)
}
