//! Reads at a bitemporal cut-off: the fence, balances, trial-balance membership, statements.

use super::super::accounts::{account_from_row, ACCOUNT_COLUMNS};
use super::super::{StorageError, LEDGER_LOCK_CLASS};
use super::*;
use deadpool_postgres::GenericClient;
use ledger_core::amount::{parse_stored, Amount};
use ledger_core::engine::{available_of, balance_of};
use ledger_core::record::{rfc3339, AppliedAsOf, AsOf, Balance, Entry};
use ledger_core::{Account, LedgerError, Reason};
use time::OffsetDateTime;

/// The ledger's state as a reader sees it: the database clock and the last committed batch.
struct LedgerState {
    now: OffsetDateTime,
    last_sequence: i64,
    last_recorded: OffsetDateTime,
}

/// The clock, ledger `$2`'s last committed batch and, when `$1` is given, its last sequence
/// recorded by `$1`, all from one snapshot. `recorded_at` strictly increases with `sequence`
/// within a ledger, so the newest row of the (ledger, `recorded_at`) index at or before `$1` is
/// that sequence (one index probe; `max(sequence) … WHERE recorded_at <= $1` would read every
/// earlier posting).
const STATE_AND_SEQUENCE: &str = "
    SELECT clock_timestamp() AS now, last_sequence, last_recorded_at,
           CASE WHEN $1::timestamptz IS NULL THEN NULL
                ELSE coalesce((SELECT sequence FROM postings WHERE ledger_id = $2 AND recorded_at <= $1
                               ORDER BY recorded_at DESC LIMIT 1), $2::bigint << 40) END AS sequence_by
    FROM ledger_state WHERE ledger_id = $2";

async fn state_and_sequence(
    client: &impl GenericClient,
    ledger: LedgerId,
    at: Option<OffsetDateTime>,
) -> Result<(LedgerState, Option<i64>), StorageError> {
    let stmt = client.prepare_cached(STATE_AND_SEQUENCE).await?;
    let row = client.query_one(&stmt, &[&at, &ledger]).await?;
    Ok((
        LedgerState {
            now: row.get("now"),
            last_sequence: row.get("last_sequence"),
            last_recorded: row.get("last_recorded_at"),
        },
        row.get("sequence_by"),
    ))
}

/// Resolves a requested cut-off of ledger `ledger` into the one applied, fenced so the answer
/// can never change (each ledger has its own clock, sequence and fence).
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
    ledger: LedgerId,
    as_of: AsOf,
) -> Result<Result<AppliedAsOf, LedgerError>, StorageError> {
    let (state, sequence_by) = state_and_sequence(&*client, ledger, as_of.recorded_at).await?;
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
            .prepare_cached("SELECT pg_advisory_xact_lock_shared($1, $2)")
            .await?;
        let read = client.prepare_cached(STATE_AND_SEQUENCE).await?;
        let none: Option<OffsetDateTime> = None;
        let c: &tokio_postgres::Client = client;
        let (_, _, row, _) = futures_util::future::try_join4(
            c.batch_execute("BEGIN"),
            c.execute(&lock, &[&LEDGER_LOCK_CLASS, &ledger]),
            c.query_one(&read, &[&none, &ledger]),
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
                let (_, s) = state_and_sequence(&*client, ledger, Some(r)).await?;
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
    ledger: LedgerId,
    as_of: AsOf,
) -> Result<Option<AppliedAsOf>, StorageError> {
    let Some(r) = as_of.recorded_at else {
        return Ok(None);
    };
    let (state, sequence_by) = state_and_sequence(client, ledger, Some(r)).await?;
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
        SELECT least($2::bigint, coalesce((SELECT sequence FROM postings WHERE ledger_id = $5 AND recorded_at <= $1
                                           ORDER BY recorded_at DESC LIMIT 1), $5::bigint << 40)) AS m)
    SELECT a.account_id,
           (coalesce(p.debits_after, 0) + coalesce(x.d, 0))::text AS debits,
           (coalesce(p.credits_after, 0) + coalesce(x.c, 0))::text AS credits,
           coalesce(h.d, 0)::text AS held_debits, coalesce(h.c, 0)::text AS held_credits,
           coalesce(greatest(
             (SELECT max(e.sequence) FROM entries e WHERE e.account_id = a.account_id AND e.sequence <= $2),
             (SELECT max(l.sequence) FROM hold_legs l WHERE l.account_id = a.account_id AND l.sequence <= $2)), 0) AS last_sequence
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

/// Balances of accounts at a cut-off (of their ledger, the cut-off's), in the order given. Totals that cannot be (negative,
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
                &ledger::of_sequence(at.sequence as i64),
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
                last_sequence: r.get("last_sequence"),
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
    ledger: LedgerId,
    prefix: &str,
    after: Option<&str>,
    through: i64,
    limit: i64,
) -> Result<Vec<Account>, StorageError> {
    let rows = client
        .query(
            &format!(
                "SELECT {ACCOUNT_COLUMNS} FROM accounts a
                 WHERE a.ledger_id = $5 AND starts_with(a.code, $1) AND ($2::text IS NULL OR a.code > $2)
                   AND (EXISTS (SELECT 1 FROM entries e WHERE e.account_id = a.account_id AND e.sequence <= $3)
                        OR EXISTS (SELECT 1 FROM hold_legs l WHERE l.account_id = a.account_id AND l.sequence <= $3))
                 ORDER BY a.code LIMIT $4"
            ),
            &[&prefix, &after, &through, &limit, &ledger],
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
