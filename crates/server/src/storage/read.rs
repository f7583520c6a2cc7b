//! Read queries: postings, balances and statements at a bitemporal cut-off.

use super::accounts::{
    account_from_row, get_or_load, metadata_from_json, rows_by_id, Found, ACCOUNT_COLUMNS,
};
use super::{StorageError, LEDGER_WRITE_LOCK};
use deadpool_postgres::GenericClient;
use ledger_core::account::AccountCache;
use ledger_core::amount::{parse_stored, Amount};
use ledger_core::engine::{available_of, balance_of};
use ledger_core::record::{
    rfc3339, AppliedAsOf, AsOf, Balance, CloseKind, Closes, Entry, HoldState, PostedLeg, Posting,
};
use ledger_core::write::NamedPostings;
use ledger_core::{Account, Direction, LedgerError, Reason};
use std::collections::HashMap;
use std::sync::RwLock;
use time::OffsetDateTime;
use uuid::Uuid;

/// Direction as stored in a `"char"` column.
pub(crate) fn direction_to_sql(d: Direction) -> i8 {
    match d {
        Direction::Debit => b'D' as i8,
        Direction::Credit => b'C' as i8,
    }
}

pub(crate) fn direction_from_sql(c: i8) -> Option<Direction> {
    match c as u8 {
        b'D' => Some(Direction::Debit),
        b'C' => Some(Direction::Credit),
        _ => None,
    }
}

const POSTING_COLUMNS: &str = "p.sequence, p.posting_id, p.caller, p.idempotency_key, p.effective_at,
     p.recorded_at, p.memo, p.metadata, p.voids_posting_id, p.void_reason, v.posting_id AS voided_by,
     p.hold, p.hold_expires_at, p.closes_hold_posting_id, p.close_kind,
     c.posting_id AS closed_by, c.close_kind AS closed_how";

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
                 (SELECT greatest(clock_timestamp(), last_recorded_at) FROM ledger_state WHERE ledger_id = 1)), $3)
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

/// A posting's head row, without its legs.
fn posting_head(h: &tokio_postgres::Row) -> Result<Posting, StorageError> {
    let sequence: i64 = h.get("sequence");
    let metadata = metadata_from_json(h.get("metadata"))
        .map_err(|e| StorageError::corrupt_posting(sequence, e))?;
    Ok(Posting {
        posting_id: h.get("posting_id"),
        sequence: sequence as u64,
        caller: h.get("caller"),
        idempotency_key: h.get("idempotency_key"),
        legs: Vec::new(),
        effective_at: h.get("effective_at"),
        recorded_at: h.get("recorded_at"),
        memo: h.get("memo"),
        metadata,
        voids_posting_id: h.get("voids_posting_id"),
        voided_by_posting_id: h.get("voided_by"),
        void_reason: h.get("void_reason"),
        hold: hold_state(h, sequence)?,
        closes: closes(h, sequence)?,
    })
}

fn close_kind(text: Option<&str>, sequence: i64) -> Result<Option<CloseKind>, StorageError> {
    text.map(|k| {
        CloseKind::parse(k)
            .ok_or_else(|| StorageError::corrupt_posting(sequence, format!("close kind {k:?}")))
    })
    .transpose()
}

/// A hold's own facts, when the posting is one.
fn hold_state(h: &tokio_postgres::Row, sequence: i64) -> Result<Option<HoldState>, StorageError> {
    if !h.get::<_, bool>("hold") {
        return Ok(None);
    }
    let how = close_kind(h.get("closed_how"), sequence)?;
    let closed_by = h.get::<_, Option<Uuid>>("closed_by").zip(how);
    Ok(Some(HoldState {
        expires_at: h.get("hold_expires_at"),
        closed_by,
        lapsed: h.get::<_, Option<bool>>("lapsed").unwrap_or(false),
    }))
}

/// The hold a posting closes, when it closes one.
fn closes(h: &tokio_postgres::Row, sequence: i64) -> Result<Option<Closes>, StorageError> {
    let kind = close_kind(h.get("close_kind"), sequence)?;
    Ok(h.get::<_, Option<Uuid>>("closes_hold_posting_id")
        .zip(kind)
        .map(|(hold, kind)| Closes { hold, kind }))
}

/// The next leg of posting `sequence`, which must be its leg number `expected` (its account's
/// code and scale joined as `code`, `scale`).
fn posting_leg(
    l: &tokio_postgres::Row,
    sequence: i64,
    expected: usize,
) -> Result<PostedLeg, StorageError> {
    let account = l
        .get::<_, Option<String>>("code")
        .zip(l.get::<_, Option<i16>>("scale"));
    leg_of(l, sequence, expected, account)
}

/// A leg row of posting `sequence` (number `expected`) on the account (code, scale) it names,
/// `None` when that account does not exist.
fn leg_of(
    l: &tokio_postgres::Row,
    sequence: i64,
    expected: usize,
    account: Option<(String, i16)>,
) -> Result<PostedLeg, StorageError> {
    let corrupt = |detail: String| StorageError::corrupt_posting(sequence, detail);
    let (leg_sequence, index): (i64, i16) = (l.get("sequence"), l.get("leg_index"));
    if leg_sequence != sequence {
        return Err(StorageError::corrupt_posting(
            leg_sequence,
            "legs without a posting",
        ));
    }
    if usize::try_from(index).ok() != Some(expected) {
        return Err(corrupt(format!("leg {index} where leg {expected} belongs")));
    }
    let Some((code, scale)) = account else {
        return Err(corrupt(format!(
            "leg {index} names an account that does not exist"
        )));
    };
    let scale = scale as u8;
    let minor =
        parse_stored(l.get("amount"), scale).map_err(|e| corrupt(format!("leg {index}: {e}")))?;
    let direction = direction_from_sql(l.get("direction"))
        .ok_or_else(|| corrupt(format!("leg {index} has no direction")))?;
    Ok(PostedLeg {
        account: code,
        direction,
        amount: Amount::from_minor(minor, scale),
    })
}

/// A posting by id.
pub async fn posting_by_id(
    client: &impl GenericClient,
    id: Uuid,
) -> Result<Option<Posting>, StorageError> {
    let stmt = client
        .prepare_cached("SELECT sequence FROM postings WHERE posting_id = $1")
        .await?;
    let row = client.query_opt(&stmt, &[&id]).await?;
    match row {
        None => Ok(None),
        Some(r) => Ok(postings_by_sequence(client, &[r.get(0)]).await?.pop()),
    }
}

/// The postings a batch's voids, captures and expiries name, by id, as recorded: their
/// heads without their state (no void, no closing posting: those are read under the write
/// lock, [`TARGET_STATES_SQL`]). Each is looked up on its unique index (LATERAL … LIMIT 1),
/// whatever the statistics say.
const TARGET_HEADS_SQL: &str = "SELECT p.sequence, p.posting_id, p.caller, p.idempotency_key, p.effective_at,
            p.recorded_at, p.memo, p.metadata, p.voids_posting_id, p.void_reason, NULL::uuid AS voided_by,
            p.hold, p.hold_expires_at, p.closes_hold_posting_id, p.close_kind,
            NULL::uuid AS closed_by, NULL::text AS closed_how, NULL::bool AS lapsed
     FROM unnest($1::uuid[]) AS x(id)
     CROSS JOIN LATERAL (SELECT * FROM postings WHERE posting_id = x.id LIMIT 1) p
     ORDER BY p.sequence";

/// The legs of those postings (entries or hold legs); their accounts come from the account
/// cache (read only when it misses them).
const TARGET_LEGS_SQL: &str = "SELECT l.sequence, l.leg_index, l.account_id, l.direction, l.amount::text AS amount
     FROM unnest($1::uuid[]) AS x(id)
     CROSS JOIN LATERAL (SELECT sequence FROM postings WHERE posting_id = x.id LIMIT 1) p
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

/// Reads the [`NamedPostings`] by id (distinct), as recorded (their state left out): two
/// statements, sent together; their legs' accounts through the account cache.
pub async fn named_postings(
    client: &impl GenericClient,
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
        client.query(&heads_st, &[&ids]),
        client.query(&legs_st, &[&ids]),
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
    get_or_load(cache, &ids, |missing| async move {
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

/// A posting by its caller's idempotency key, or the stored rejection of that key.
pub async fn posting_by_key(
    client: &impl GenericClient,
    caller: &str,
    key: &str,
) -> Result<Option<Result<Posting, LedgerError>>, StorageError> {
    let row = client
        .query_opt(
            "SELECT p.sequence, r.reason, r.message, r.metadata FROM idempotency_keys k
             LEFT JOIN postings p ON p.key_id = k.key_id
             LEFT JOIN rejections r ON r.caller = k.caller AND r.idempotency_key = k.idempotency_key
             WHERE k.caller = $1 AND k.idempotency_key = $2",
            &[&caller, &key],
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

/// A rejection read back from storage (of the decided key `key`).
pub(crate) fn stored_rejection(
    key: &str,
    reason: Option<String>,
    message: Option<String>,
    metadata: Option<serde_json::Value>,
) -> Result<LedgerError, StorageError> {
    let corrupt = |detail: String| StorageError::Corrupt {
        row: format!("decision of idempotency key {key:?}"),
        sequence: None,
        detail,
    };
    let (Some(reason), Some(message)) = (reason, message) else {
        return Err(corrupt(
            "a decided key with neither a posting nor a rejection".into(),
        ));
    };
    let reason = Reason::from_str_exact(&reason).ok_or_else(|| {
        corrupt(format!(
            "rejection reason {reason:?} is not one of the ledger's"
        ))
    })?;
    let metadata =
        metadata_from_json(metadata.unwrap_or_else(|| serde_json::json!({}))).map_err(corrupt)?;
    Ok(LedgerError {
        reason,
        message,
        metadata,
    })
}

/// The postings touching an account after `$2`, at most `$3`: those whose legs moved its
/// money (entries) and those whose legs moved none (holds and releases, in hold_legs), each
/// side read along its (account, sequence) index, distinct postings (a posting may have many
/// legs on one account).
const ACCOUNT_POSTINGS_SQL: &str = "SELECT sequence FROM (
       (SELECT DISTINCT sequence FROM entries WHERE account_id = $1 AND sequence > $2 ORDER BY sequence LIMIT $3)
       UNION
       (SELECT DISTINCT sequence FROM hold_legs WHERE account_id = $1 AND sequence > $2 ORDER BY sequence LIMIT $3)) s
     ORDER BY sequence LIMIT $3";

/// Postings in sequence order after `after`, optionally only those touching an account.
pub async fn list_postings(
    client: &impl GenericClient,
    account_id: Option<i64>,
    after: i64,
    limit: i64,
) -> Result<Vec<Posting>, StorageError> {
    let rows = match account_id {
        Some(id) => {
            client
                .query(ACCOUNT_POSTINGS_SQL, &[&id, &after, &limit])
                .await?
        }
        None => {
            let sql =
                "SELECT sequence FROM postings WHERE sequence > $1 ORDER BY sequence LIMIT $2";
            client.query(sql, &[&after, &limit]).await?
        }
    };
    let seqs: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
    postings_by_sequence(client, &seqs).await
}

/// The ledger's state as a reader sees it: the database clock and the last committed batch.
struct LedgerState {
    now: OffsetDateTime,
    last_sequence: i64,
    last_recorded: OffsetDateTime,
}

/// The clock, the last committed batch and, when `$1` is given, the last sequence recorded by
/// `$1`, all from one snapshot. `recorded_at` strictly increases with `sequence`, so the
/// newest row of the `recorded_at` index at or before `$1` is that sequence (one index probe;
/// `max(sequence) … WHERE recorded_at <= $1` would read every earlier posting).
const STATE_AND_SEQUENCE: &str = "
    SELECT clock_timestamp() AS now, last_sequence, last_recorded_at,
           CASE WHEN $1::timestamptz IS NULL THEN NULL
                ELSE coalesce((SELECT sequence FROM postings WHERE recorded_at <= $1
                               ORDER BY recorded_at DESC LIMIT 1), 0) END AS sequence_by
    FROM ledger_state WHERE ledger_id = 1";

async fn state_and_sequence(
    client: &impl GenericClient,
    at: Option<OffsetDateTime>,
) -> Result<(LedgerState, Option<i64>), StorageError> {
    let stmt = client.prepare_cached(STATE_AND_SEQUENCE).await?;
    let row = client.query_one(&stmt, &[&at]).await?;
    Ok((
        LedgerState {
            now: row.get("now"),
            last_sequence: row.get("last_sequence"),
            last_recorded: row.get("last_recorded_at"),
        },
        row.get("sequence_by"),
    ))
}

/// Resolves a requested cut-off into the one applied, fenced so the answer can never change.
///
/// A recorded cut-off at or before the last committed batch is final: every later batch
/// records after it (one statement answers). A cut-off after it (the ledger was idle, or a
/// batch is in flight) takes the writers' advisory lock in shared mode for a moment, so a
/// batch in flight (whose `recorded_at` may fall before the cut-off) commits first; then,
/// still holding it, reads the clock and the state afresh (a new statement, so a new snapshot
/// that sees that batch); batches after it read the clock after the lock and record strictly
/// after it (see the writer). Without a recorded cut-off the ledger answers for its present:
/// the later of its clock and the last batch's `recorded_at` (the writer may number a large
/// batch a little ahead of the clock, and a caller must see the posting it was just answered
/// with). A cut-off after both is refused.
pub async fn resolve_as_of(
    client: &mut deadpool_postgres::Client,
    as_of: AsOf,
) -> Result<Result<AppliedAsOf, LedgerError>, StorageError> {
    let (state, sequence_by) = state_and_sequence(&*client, as_of.recorded_at).await?;
    if let Some(r) = as_of.recorded_at {
        if r > state.now && r > state.last_recorded {
            return Ok(Err(LedgerError::new(
                Reason::AsOfInFuture,
                format!("as_of.recorded_at {} is in the future (the ledger's clock reads {}); the ledger cannot answer for a time it has not reached", rfc3339(r), rfc3339(state.now)),
            )));
        }
    }
    let wanted = as_of
        .recorded_at
        .unwrap_or(state.now.max(state.last_recorded));
    let (recorded_at, sequence) = if wanted <= state.last_recorded {
        let sequence = match sequence_by {
            Some(s) => s,
            None => state.last_sequence, // wanted == last_recorded
        };
        (wanted, sequence)
    } else {
        // The fence: BEGIN, the shared lock, a fresh read under it, COMMIT, pipelined (sent
        // together, executed in order, each statement after the previous one finished).
        let lock = client
            .prepare_cached("SELECT pg_advisory_xact_lock_shared($1)")
            .await?;
        let read = client.prepare_cached(STATE_AND_SEQUENCE).await?;
        let none: Option<OffsetDateTime> = None;
        let c: &tokio_postgres::Client = client;
        let (_, _, row, _) = futures_util::future::try_join4(
            c.batch_execute("BEGIN"),
            c.execute(&lock, &[&LEDGER_WRITE_LOCK]),
            c.query_one(&read, &[&none]),
            c.batch_execute("COMMIT"),
        )
        .await?;
        let state = LedgerState {
            now: row.get("now"),
            last_sequence: row.get("last_sequence"),
            last_recorded: row.get("last_recorded_at"),
        };
        match as_of.recorded_at {
            None => (state.now.max(state.last_recorded), state.last_sequence),
            Some(r) if r >= state.last_recorded => (r, state.last_sequence),
            Some(r) => {
                // A batch committed while we waited, recorded after r: look r up again.
                let (_, s) = state_and_sequence(&*client, Some(r)).await?;
                (r, s.expect("a sequence for a given time"))
            }
        }
    };
    let effective_at = as_of.effective_at.unwrap_or(recorded_at);
    Ok(Ok(AppliedAsOf {
        recorded_at,
        effective_at,
        sequence: sequence as u64,
    }))
}

/// On a hot standby: the cut-off `as_of` resolves to, when this database has replayed past
/// its recorded cut-off R (its own copy of the ledger's last committed batch was recorded at
/// or after R), else `None` (the primary must answer). Such a cut-off is final on the primary
/// too (every later batch records after R), and the standby holds every batch recorded by R,
/// so it gives exactly the primary's answer. Never takes the fence (a standby cannot).
pub async fn resolve_replayed(
    client: &impl GenericClient,
    as_of: AsOf,
) -> Result<Option<AppliedAsOf>, StorageError> {
    let Some(r) = as_of.recorded_at else {
        return Ok(None);
    };
    let (state, sequence_by) = state_and_sequence(client, Some(r)).await?;
    if r > state.last_recorded {
        return Ok(None);
    }
    Ok(Some(AppliedAsOf {
        recorded_at: r,
        effective_at: as_of.effective_at.unwrap_or(r),
        sequence: sequence_by.expect("a sequence for a given time") as u64,
    }))
}

/// Debits and credits of accounts at a cut-off (S = `$2`, the last sequence recorded by R =
/// `$4`; E = `$1`), computed without summing history, and their held amounts: the legs of the
/// holds recorded by S and effective by E that were open at the cut-off, neither closed by a
/// posting recorded by S and effective by E nor expired by it. A hold with expiry time T that
/// nothing recorded by S closed is expired at (R, E) when T ≤ R and T ≤ E: the ledger's clock
/// had reached its expiry, and its release is effective at T, whether or not the release is
/// recorded by R (the writer's funds rule stops counting it at the same time).
///
/// Let m = min(S, the last sequence recorded by E). A leg with sequence ≤ m was recorded by E
/// (and by R); a leg with sequence in (m, S] was recorded after E. So the included legs
/// (sequence ≤ S, effective ≤ E) are: the running totals of the account's last leg at or
/// before m, minus the legs ≤ m effective after E (future-dated: recorded ≤ E < effective),
/// plus the legs in (m, S] effective by E (back-dated: effective ≤ E < recorded). Both
/// corrections are exactly the irregular legs with sequence ≤ S whose half-open interval
/// between their two times contains E, signed by their kind: one stabbing query on the GiST
/// index `entries_irregular_span` (migration 0005).
const TOTALS_AT: &str = "
    WITH bound AS (
        SELECT least($2::bigint, coalesce((SELECT sequence FROM postings WHERE recorded_at <= $1
                                           ORDER BY recorded_at DESC LIMIT 1), 0)) AS m)
    SELECT a.account_id,
           (coalesce(p.debits_after, 0) + coalesce(x.d, 0))::text AS debits,
           (coalesce(p.credits_after, 0) + coalesce(x.c, 0))::text AS credits,
           coalesce(h.d, 0)::text AS held_debits, coalesce(h.c, 0)::text AS held_credits
    FROM unnest($3::bigint[]) WITH ORDINALITY AS a(account_id, ord)
    CROSS JOIN bound
    LEFT JOIN LATERAL (
        SELECT debits_after, credits_after FROM entries e
        WHERE e.account_id = a.account_id AND e.sequence <= bound.m
        ORDER BY e.sequence DESC, e.account_version DESC LIMIT 1) p ON true
    LEFT JOIN LATERAL (
        SELECT sum(CASE WHEN e.effective_at < e.recorded_at THEN e.amount ELSE -e.amount END)
                   FILTER (WHERE e.direction = 'D') AS d,
               sum(CASE WHEN e.effective_at < e.recorded_at THEN e.amount ELSE -e.amount END)
                   FILTER (WHERE e.direction = 'C') AS c
        FROM entries e
        WHERE e.account_id = a.account_id AND e.effective_at <> e.recorded_at
          AND tstzrange(least(e.effective_at, e.recorded_at), greatest(e.effective_at, e.recorded_at), '[)') @> $1::timestamptz
          AND e.sequence <= $2) x ON true
    LEFT JOIN LATERAL (
        SELECT sum(l.amount) FILTER (WHERE l.direction = 'D') AS d,
               sum(l.amount) FILTER (WHERE l.direction = 'C') AS c
        FROM hold_legs l JOIN postings hp ON hp.sequence = l.sequence
        LEFT JOIN LATERAL (SELECT c.effective_at FROM postings c
                           WHERE c.closes_hold_posting_id = hp.posting_id AND c.sequence <= $2 LIMIT 1) hc ON true
        WHERE l.account_id = a.account_id AND l.sequence <= $2 AND hp.hold AND hp.effective_at <= $1
          AND CASE WHEN hc.effective_at IS NOT NULL THEN hc.effective_at > $1
                   ELSE hp.hold_expires_at IS NULL OR hp.hold_expires_at > least($4::timestamptz, $1) END) h ON true
    ORDER BY a.ord";

/// Balances of accounts at a cut-off, in the order given. Totals that cannot be (negative,
/// or more decimals than the account's scale) are a corrupt row of that account.
pub async fn balances(
    client: &impl GenericClient,
    accounts: &[Account],
    at: &AppliedAsOf,
) -> Result<Vec<Balance>, StorageError> {
    if accounts.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<i64> = accounts.iter().map(|a| a.id).collect();
    let stmt = client.prepare_cached(TOTALS_AT).await?;
    let rows = client
        .query(
            &stmt,
            &[
                &at.effective_at,
                &(at.sequence as i64),
                &ids,
                &at.recorded_at,
            ],
        )
        .await?;
    assert_eq!(
        rows.len(),
        accounts.len(),
        "one totals row per account asked"
    );
    accounts
        .iter()
        .zip(rows)
        .map(|(a, r)| {
            assert_eq!(r.get::<_, i64>("account_id"), a.id);
            let corrupt = |e: String| StorageError::corrupt_account(&a.code, e);
            let debits = parse_stored(r.get("debits"), a.scale).map_err(corrupt)?;
            let credits = parse_stored(r.get("credits"), a.scale).map_err(corrupt)?;
            let held_debits = parse_stored(r.get("held_debits"), a.scale).map_err(corrupt)?;
            let held_credits = parse_stored(r.get("held_credits"), a.scale).map_err(corrupt)?;
            if debits < 0 || credits < 0 {
                return Err(corrupt(format!(
                    "its legs sum to negative totals at {at:?}"
                )));
            }
            Ok(Balance {
                account: a.code.clone(),
                currency: a.currency.clone(),
                scale: a.scale,
                debits,
                credits,
                balance: balance_of(a.normal_balance, debits, credits),
                held_debits,
                held_credits,
                available: available_of(
                    a.normal_balance,
                    debits,
                    credits,
                    held_debits,
                    held_credits,
                ),
                as_of: *at,
            })
        })
        .collect()
}

/// Accounts whose code starts with `prefix`, in code order after `after` (exclusive), that
/// have a leg with sequence ≤ `through`: the accounts a trial balance at that recorded
/// cut-off lists. Membership depends only on the journal up to the cut-off, so the list, like
/// the balances, never changes once answered (an account created later, or created earlier
/// and first used later, does not appear at that cut-off).
pub async fn accounts_with_legs(
    client: &impl GenericClient,
    prefix: &str,
    after: Option<&str>,
    through: i64,
    limit: i64,
) -> Result<Vec<Account>, StorageError> {
    let rows = client
        .query(
            &format!(
                "SELECT {ACCOUNT_COLUMNS} FROM accounts a
                 WHERE starts_with(a.code, $1) AND ($2::text IS NULL OR a.code > $2)
                   AND (EXISTS (SELECT 1 FROM entries e WHERE e.account_id = a.account_id AND e.sequence <= $3)
                        OR EXISTS (SELECT 1 FROM hold_legs l WHERE l.account_id = a.account_id AND l.sequence <= $3))
                 ORDER BY a.code LIMIT $4"
            ),
            &[&prefix, &after, &through, &limit],
        )
        .await?;
    rows.iter().map(account_from_row).collect()
}

/// An account's entries included by a cut-off, in sequence order, after `(after_sequence,
/// after_leg)`. The bounds are repeated on both tables so each index scan starts at the page
/// (with the row comparison alone, PostgreSQL scanned `postings` from the first sequence:
/// 45 ms for a page in the middle of a 1,000,000-leg statement, 2 ms with them).
/// `balance_after` is left at 0: the caller computes the running balance.
pub async fn entries(
    client: &impl GenericClient,
    account: &Account,
    at: &AppliedAsOf,
    after: (i64, i16),
    limit: i64,
) -> Result<Vec<(Entry, i16)>, StorageError> {
    let rows = client
        .query(
            "SELECT e.sequence, e.leg_index, p.posting_id, e.recorded_at, e.effective_at, e.direction, e.amount::text AS amount
             FROM entries e JOIN postings p USING (sequence)
             WHERE e.account_id = $1 AND e.sequence >= $2 AND (e.sequence, e.leg_index) > ($2, $3)
               AND e.sequence <= $4 AND e.effective_at <= $5
               AND p.sequence >= $2 AND p.sequence <= $4
             ORDER BY e.sequence, e.leg_index LIMIT $6",
            &[&account.id, &after.0, &after.1, &(at.sequence as i64), &at.effective_at, &limit],
        )
        .await?;
    rows.iter()
        .map(|r| {
            let sequence: i64 = r.get("sequence");
            let leg: i16 = r.get("leg_index");
            let corrupt =
                |e: String| StorageError::corrupt_posting(sequence, format!("leg {leg}: {e}"));
            let minor = parse_stored(r.get("amount"), account.scale).map_err(corrupt)?;
            let direction = direction_from_sql(r.get("direction"))
                .ok_or_else(|| corrupt("no direction".into()))?;
            let entry = Entry {
                posting_id: r.get("posting_id"),
                sequence: sequence as u64,
                recorded_at: r.get("recorded_at"),
                effective_at: r.get("effective_at"),
                direction,
                amount: Amount::from_minor(minor, account.scale),
                balance_after: 0,
            };
            Ok((entry, leg))
        })
        .collect()
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
