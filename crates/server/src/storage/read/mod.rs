//! Read queries: postings by sequence, id and key, and lists of them; [`codec`] how rows
//! decode, [`named`] the postings a batch names, [`asof`] reads at a bitemporal cut-off.

mod asof;
mod codec;
mod named;
mod rollups;

pub use asof::*;
pub(crate) use codec::*;
pub use named::*;
pub use rollups::*;

use super::StorageError;
use deadpool_postgres::GenericClient;
use ledger_core::ledger::{self, LedgerId};
use ledger_core::record::{AppliedAsOf, Posting};
use ledger_core::search::PostingFilter;
use ledger_core::LedgerError;
use time::OffsetDateTime;
use uuid::Uuid;

const POSTING_COLUMNS: &str = "p.sequence, p.posting_id, p.caller, p.idempotency_key, p.effective_at,
     p.recorded_at, p.memo, p.metadata, p.voids_posting_id, p.void_reason, v.posting_id AS voided_by,
     p.hold, p.hold_expires_at, p.closes_hold_posting_id, p.close_kind,
     c.posting_id AS closed_by, c.close_kind AS closed_how,
     (SELECT h.hash FROM posting_hashes h WHERE h.sequence = p.sequence) AS hash";

/// The heads of postings by sequence, with the void and the closing posting of each (those
/// included by the cut-off: recorded by sequence `$2`, effective by `$3`). The void and the
/// closing posting are looked up per posting (LATERAL … LIMIT 1, on their unique indexes):
/// joined as whole tables, the planner merge-joined the index of every void in the journal
/// (each release of a hold is one), 14 ms per batch of void and capture targets in the
/// writer's load, under the write lock.
///
/// `lapsed`: a hold whose expiry time is by the cut-off on both clocks (by the earlier of the
/// recorded cut-off `$4` and `$3`; `$4` null: the ledger's present, the later of its clock and
/// its last batch) and that nothing recorded by `$2` closed: it is expired though its release
/// may not be recorded yet (see `TOTALS_AT`, which stops counting it in the same case).
const HEADS_SQL: &str = "SELECT {COLUMNS},
       CASE WHEN p.hold AND p.hold_expires_at <= least(coalesce($4::timestamptz,
                 (SELECT greatest(clock_timestamp(), last_recorded_at) FROM ledger_state s WHERE s.ledger_id = p.ledger_id)), $3)
            THEN NOT EXISTS (SELECT 1 FROM postings x WHERE x.closes_hold_posting_id = p.posting_id AND x.sequence <= $2)
            ELSE false END AS lapsed
     FROM postings p
     LEFT JOIN LATERAL (SELECT posting_id FROM postings
                        WHERE voids_posting_id = p.posting_id AND voids_posting_id IS NOT NULL
                          AND sequence <= $2 AND effective_at <= $3 LIMIT 1) v ON true
     LEFT JOIN LATERAL (SELECT posting_id, close_kind FROM postings
                        WHERE closes_hold_posting_id = p.posting_id
                          AND sequence <= $2 AND effective_at <= $3 LIMIT 1) c ON true
     WHERE p.sequence = ANY($1) ORDER BY p.sequence";

/// Every leg of postings by sequence: those that move money (entries) and those that do not
/// (hold_legs: of holds and releases); a posting's legs are in one of the two. Legs and
/// accounts are looked up per sequence and per leg (LATERAL): given the whole arrays, the
/// planner seq-scanned `entries` on stale statistics (a table that grew since its last
/// ANALYZE), in the writer's load of void and capture targets, under the write lock.
const LEGS_SQL: &str = "SELECT l.sequence, l.leg_index, a.code, a.scale, l.direction, l.amount::text AS amount
     FROM (SELECT DISTINCT seq FROM unnest($1::bigint[]) AS u(seq)) s
     CROSS JOIN LATERAL (
           SELECT sequence, leg_index, account_id, direction, amount FROM entries WHERE sequence = s.seq
           UNION ALL
           SELECT sequence, leg_index, account_id, direction, amount FROM hold_legs WHERE sequence = s.seq) l
     LEFT JOIN LATERAL (SELECT code, scale FROM accounts WHERE accounts.account_id = l.account_id LIMIT 1) a ON true
     ORDER BY l.sequence, l.leg_index";

/// Loads postings (with legs, `voided_by` and a hold's state) by sequence, in sequence order,
/// as they are now. A posting that breaks an invariant (written behind the ledger's back) is
/// a [`StorageError::Corrupt`] naming its sequence.
pub async fn postings_by_sequence(
    client: &impl GenericClient,
    sequences: &[i64],
) -> Result<Vec<Posting>, StorageError> {
    postings_at(client, sequences, None).await
}

/// Like [`postings_by_sequence`], with the voids and closing postings included by the
/// cut-off `at` only (none: all of them).
pub async fn postings_at(
    client: &impl GenericClient,
    sequences: &[i64],
    at: Option<&AppliedAsOf>,
) -> Result<Vec<Posting>, StorageError> {
    if sequences.is_empty() {
        return Ok(Vec::new());
    }
    let heads_sql = HEADS_SQL.replace("{COLUMNS}", POSTING_COLUMNS);
    let (through, effective, recorded) = match at {
        Some(a) => (a.sequence as i64, a.effective_at, Some(a.recorded_at)),
        None => (
            i64::MAX,
            OffsetDateTime::new_utc(time::Date::MAX, time::Time::MIDNIGHT),
            None,
        ),
    };
    let head_params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
        [&sequences, &through, &effective, &recorded];
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&sequences];
    let (heads_stmt, legs_stmt) = futures_util::future::try_join(
        client.prepare_cached(heads_sql.as_str()),
        client.prepare_cached(LEGS_SQL),
    )
    .await?;
    let heads = client.query(&heads_stmt, &head_params);
    let legs = client.query(&legs_stmt, &params);
    let (heads, legs) = futures_util::future::try_join(heads, legs).await?;
    let mut legs = legs.into_iter().peekable();
    let mut out = Vec::with_capacity(heads.len());
    for h in heads {
        let mut p = posting_head(&h)?;
        let sequence = p.sequence as i64;
        while let Some(l) = legs.next_if(|l| l.get::<_, i64>("sequence") <= sequence) {
            p.legs.push(posting_leg(&l, sequence, p.legs.len())?);
        }
        p.check_sound()
            .map_err(|e| StorageError::corrupt_posting(sequence, e))?;
        out.push(p);
    }
    if let Some(l) = legs.next() {
        let sequence = l.get("sequence");
        return Err(StorageError::corrupt_posting(
            sequence,
            "legs without a posting",
        ));
    }
    Ok(out)
}

/// A posting of ledger `ledger` by id (one of another ledger is not found).
pub async fn posting_by_id(
    client: &impl GenericClient,
    ledger: LedgerId,
    id: Uuid,
) -> Result<Option<Posting>, StorageError> {
    let stmt = client
        .prepare_cached("SELECT sequence FROM postings WHERE posting_id = $1 AND ledger_id = $2")
        .await?;
    let row = client.query_opt(&stmt, &[&id, &ledger]).await?;
    match row {
        None => Ok(None),
        Some(r) => Ok(postings_by_sequence(client, &[r.get(0)]).await?.pop()),
    }
}

/// A posting by its caller's idempotency key in ledger `ledger`, or the stored rejection of
/// that key.
pub async fn posting_by_key(
    client: &impl GenericClient,
    ledger: LedgerId,
    caller: &str,
    key: &str,
) -> Result<Option<Result<Posting, LedgerError>>, StorageError> {
    let row = client
        .query_opt(
            "SELECT p.sequence, r.reason, r.message, r.metadata FROM idempotency_keys k
             LEFT JOIN postings p ON p.key_id = k.key_id
             LEFT JOIN rejections r ON r.ledger_id = k.ledger_id AND r.caller = k.caller
                                    AND r.idempotency_key = k.idempotency_key
             WHERE k.ledger_id = $3 AND k.caller = $1 AND k.idempotency_key = $2",
            &[&caller, &key, &ledger],
        )
        .await?;
    let Some(row) = row else { return Ok(None) };
    match row.get::<_, Option<i64>>("sequence") {
        Some(seq) => Ok(postings_by_sequence(client, &[seq]).await?.pop().map(Ok)),
        None => Ok(Some(Err(stored_rejection(
            key,
            row.get("reason"),
            row.get("message"),
            row.get("metadata"),
        )?))),
    }
}

/// The bounds of a listing's sequences, (`lo`, `hi`]: after `$1` and at most `$2` (the
/// listing's last, fixed by its first page), narrowed by a recorded range [`$4`, `$5`):
/// `recorded_at` increases with sequence in a ledger, so the range is the sequences from the
/// first recorded at or after `$4` to the last recorded before `$5` (two probes of
/// `postings_recorded_at_unique_in_ledger`); and (`elo`, `ehi`], the sequences recorded in
/// the effective range [`$6`, `$7`). Read first, so that the listing's statement is planned
/// with them as constants: as parameters of one statement the planner guessed the range
/// small and intersected it with the metadata index (33 ms over 1,000,000 postings; 1 ms).
const BOUNDS_SQL: &str = "SELECT
   CASE WHEN $4::timestamptz IS NULL THEN $1::bigint
        ELSE greatest($1::bigint, coalesce((SELECT sequence - 1 FROM postings WHERE ledger_id = $3 AND recorded_at >= $4
                                            ORDER BY recorded_at LIMIT 1), $2::bigint)) END AS lo,
   CASE WHEN $5::timestamptz IS NULL THEN $2::bigint
        ELSE least($2::bigint, coalesce((SELECT sequence FROM postings WHERE ledger_id = $3 AND recorded_at < $5
                                         ORDER BY recorded_at DESC LIMIT 1), $3::bigint << 40)) END AS hi,
   CASE WHEN $6::timestamptz IS NULL THEN $3::bigint << 40
        ELSE coalesce((SELECT sequence - 1 FROM postings WHERE ledger_id = $3 AND recorded_at >= $6
                       ORDER BY recorded_at LIMIT 1), $2::bigint) END AS elo,
   CASE WHEN $7::timestamptz IS NULL THEN $2::bigint
        ELSE coalesce((SELECT sequence FROM postings WHERE ledger_id = $3 AND recorded_at < $7
                       ORDER BY recorded_at DESC LIMIT 1), $3::bigint << 40) END AS ehi";

/// The filters on a posting `q` besides its sequence (in (`$1`, `$2`]): metadata `$5`
/// (containment, on the partial GIN index of the postings with metadata: a filter has an
/// entry, so it matches none without), effective range [`$8`, `$9`), caller `$10`.
macro_rules! filters {
    () => {
        " q.ledger_id = $3 AND ($5::jsonb IS NULL OR (q.metadata <> '{}'::jsonb AND q.metadata @> $5::jsonb))
          AND ($8::timestamptz IS NULL OR q.effective_at >= $8) AND ($9::timestamptz IS NULL OR q.effective_at < $9)
          AND ($10::text IS NULL OR q.caller = $10) "
    };
}

/// A listing over every posting: the planner picks the index of the most selective filter
/// (metadata's GIN, the caller's) or the sequence's.
const SEARCH_SQL: &str = concat!(
    "SELECT q.sequence FROM postings q
     WHERE q.sequence > $1 AND q.sequence <= $2 AND $6::bigint IS NULL AND $7::bigint IS NULL
       AND $11::bigint IS NULL AND",
    filters!(),
    "ORDER BY q.sequence LIMIT $4"
);

/// A listing by effective time, in two parts merged in sequence order. A posting effective in
/// the range and recorded in it is one of the sequences (`$6`, `$7`] (`elo`, `ehi`), read
/// along the primary key; one effective in it and recorded outside it has two times that
/// differ, so it is on the partial index `postings_irregular_effective`, which holds only
/// those (few), sorted afterwards (`+ 0`: in sequence order along the primary key, the
/// planner expected them everywhere and scanned 100,000 postings for a page). One index over
/// every effective time left the planner to guess where in sequence order the range's
/// postings lie: it scanned the primary key, 712,000 postings for one day's page of a year.
const EFFECTIVE_SEARCH_SQL: &str = concat!(
    "SELECT s.sequence FROM (
       (SELECT q.sequence FROM postings q
        WHERE q.sequence > greatest($1, $6::bigint) AND q.sequence <= least($2, $7::bigint) AND $11::bigint IS NULL AND",
    filters!(),
    "ORDER BY q.sequence LIMIT $4)
       UNION ALL
       (SELECT q.sequence FROM postings q
        WHERE q.effective_at <> q.recorded_at AND (q.sequence + 0 <= $6 OR q.sequence + 0 > $7)
          AND q.sequence + 0 > $1 AND q.sequence + 0 <= $2 AND",
    filters!(),
    "ORDER BY q.sequence + 0 LIMIT $4)) s
     ORDER BY s.sequence LIMIT $4"
);

/// A listing of an account's postings: those whose legs moved its money (entries) and those
/// whose legs moved none (holds and releases, in hold_legs), each side read along its
/// (account, sequence) index and merged in order, distinct postings (a posting may have many
/// legs on one account), then the other filters on each posting.
const ACCOUNT_SEARCH_SQL: &str = concat!(
    "SELECT q.sequence FROM (SELECT DISTINCT s.sequence FROM (
         SELECT e.sequence FROM entries e WHERE e.account_id = $11 AND e.sequence > $1 AND e.sequence <= $2
         UNION ALL
         SELECT l.sequence FROM hold_legs l WHERE l.account_id = $11 AND l.sequence > $1 AND l.sequence <= $2) s
       ORDER BY s.sequence) a
     JOIN postings q ON q.sequence = a.sequence WHERE $6::bigint IS NULL AND $7::bigint IS NULL AND",
    filters!(),
    "ORDER BY q.sequence LIMIT $4"
);

/// What a listing keeps: an account (its id) and the filters of [`PostingFilter`].
pub struct Search<'a> {
    pub account_id: Option<i64>,
    pub filter: &'a PostingFilter,
}

/// Postings of ledger `ledger` in sequence order after `after` and at most `upper` (stored
/// sequences) that `search` keeps, at most `limit`.
pub async fn list_postings(
    client: &impl GenericClient,
    ledger: LedgerId,
    search: &Search<'_>,
    (after, upper): (i64, i64),
    limit: i64,
) -> Result<Vec<Posting>, StorageError> {
    let f = search.filter;
    let after = after.max(ledger::stored(ledger, 0));
    let metadata = (!f.metadata.is_empty()).then(|| serde_json::json!(f.metadata));
    let by_effective = f.effective.start.is_some() || f.effective.end.is_some();
    let sql = match (search.account_id, by_effective) {
        (Some(_), _) => ACCOUNT_SEARCH_SQL,
        (None, true) => EFFECTIVE_SEARCH_SQL,
        (None, false) => SEARCH_SQL,
    };
    let bounds = client.prepare_cached(BOUNDS_SQL).await?;
    let r = client
        .query_one(
            &bounds,
            &[
                &after,
                &upper,
                &ledger,
                &f.recorded.start,
                &f.recorded.end,
                &f.effective.start,
                &f.effective.end,
            ],
        )
        .await?;
    let (lo, hi): (i64, i64) = (r.get("lo"), r.get("hi"));
    // Only the listing by effective time reads them (the others take them as NULL).
    let (elo, ehi): (Option<i64>, Option<i64>) = match sql == EFFECTIVE_SEARCH_SQL {
        true => (Some(r.get("elo")), Some(r.get("ehi"))),
        false => (None, None),
    };
    let stmt = client.prepare_cached(sql).await?;
    let rows = client
        .query(
            &stmt,
            &[
                &lo,
                &hi,
                &ledger,
                &limit,
                &metadata,
                &elo,
                &ehi,
                &f.effective.start,
                &f.effective.end,
                &f.caller,
                &search.account_id,
            ],
        )
        .await?;
    let seqs: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
    postings_by_sequence(client, &seqs).await
}

/// The ledger's last committed sequence (stored): where a listing's first page ends it.
pub async fn last_sequence(
    client: &impl GenericClient,
    ledger: LedgerId,
) -> Result<i64, StorageError> {
    let stmt = client
        .prepare_cached("SELECT last_sequence FROM ledger_state WHERE ledger_id = $1")
        .await?;
    Ok(client.query_one(&stmt, &[&ledger]).await?.get(0))
}

/// The key that makes page tokens tamper-evident.
pub async fn page_token_key(client: &impl GenericClient) -> Result<Vec<u8>, StorageError> {
    Ok(client
        .query_one(
            "SELECT page_token_key FROM ledger_secret WHERE ledger_id = 1",
            &[],
        )
        .await?
        .get(0))
}
