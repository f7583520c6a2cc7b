//! What debit limits need of the batch's load: their windows.

use crate::storage::StorageError;
use ledger_core::amount::parse_stored;
use ledger_core::ledger::LedgerId;
use ledger_core::terms::DebitWindow;
use ledger_core::write::{update_windows, AccountState, WriteRequest};
use ledger_core::LedgerError;
use std::collections::HashMap;
use tokio_postgres::Row;

/// What the debit limits of the batch's accounts need (`ledger_core::terms::DebitWindow`),
/// per (account, window) pair (`$1`, `$4`: the limits in force, as the totals' read found
/// them, and those the batch's updates set): the account's debits recorded at or before the
/// earliest time the batch can record at less the window (the later of the transaction's
/// start and the last batch), and its debit legs after that up to the latest time less the
/// window (as in `EXPIRING_SQL`). Per distinct window, two probes of `postings (ledger_id,
/// recorded_at)` find the sequences there (once, `MATERIALIZED`); per pair, one probe of
/// `entries (account_id, sequence)` the debits before and one range of it the legs between:
/// nothing scans the account's history. Sent only for a batch with such pairs, after the
/// first round trip (under the lock it took).
///
/// It runs on a generic plan, made once per connection with sequential scans priced out
/// ([`INDEXED_GENERIC_PLANS`]): planning it for each execution cost 2–3 ms a batch, most of what
/// debit limits cost. Every read in it is a probe of an index whose leading columns it fixes
/// (`postings (ledger_id, recorded_at)`, `entries (account_id, sequence)`). Made on small
/// tables without that setting, the generic plan scanned both (1.2 M rows in six batches of
/// `the_writer_does_not_scan_tables_that_grew_after_its_statements_were_prepared`, which runs it).
pub(super) const WINDOWS_SQL: &str = "WITH h AS (
        SELECT greatest(transaction_timestamp(), last_recorded_at) AS lo,
               greatest(clock_timestamp(), last_recorded_at) + ($2::bigint + 1) * interval '1 microsecond' AS hi
        FROM ledger_state WHERE ledger_id = $3),
     w AS (SELECT DISTINCT u.id, u.secs FROM unnest($1::bigint[], $4::bigint[]) AS u(id, secs)),
     c AS MATERIALIZED (
        SELECT s.secs,
          (SELECT p.sequence FROM postings p WHERE p.ledger_id = $3
             AND p.recorded_at <= h.lo - s.secs * interval '1 second'
           ORDER BY p.recorded_at DESC LIMIT 1) AS lo_seq,
          (SELECT p.sequence FROM postings p WHERE p.ledger_id = $3
             AND p.recorded_at <= h.hi - s.secs * interval '1 second'
           ORDER BY p.recorded_at DESC LIMIT 1) AS hi_seq
        FROM h CROSS JOIN (SELECT DISTINCT secs FROM w) s)
     SELECT w.id AS account_id, w.secs,
       coalesce((SELECT e.debits_after::text FROM entries e
                 WHERE e.account_id = w.id AND e.sequence <= c.lo_seq
                 ORDER BY e.sequence DESC LIMIT 1), '0') AS debits_before,
       edge.at AS edge_at, edge.amount AS edge_amount
     FROM w JOIN c USING (secs)
     CROSS JOIN LATERAL (
        SELECT coalesce(array_agg(e.recorded_at ORDER BY e.sequence), '{}') AS at,
               coalesce(array_agg(e.amount::text ORDER BY e.sequence), '{}') AS amount
        FROM entries e
        WHERE e.account_id = w.id AND e.sequence > coalesce(c.lo_seq, 0)
          AND e.sequence <= c.hi_seq AND e.direction = 'D') edge";

/// [`WINDOWS_SQL`]'s plan: generic, made once per connection with sequential scans priced
/// out, so it reads the tables by their indexes however small they were when it was made.
const INDEXED_GENERIC_PLANS: &str =
    "SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL enable_seqscan = off";
/// Back to the transaction's default after [`WINDOWS_SQL`].
const PLANS_PER_EXECUTION: &str =
    "SET LOCAL plan_cache_mode = force_custom_plan; SET LOCAL enable_seqscan = on";

/// The (account, window) pairs the batch's debit limits need, as columns: the windows of the
/// limits in force on its accounts and of those its updates set.
pub(super) fn window_pairs(
    states: &HashMap<i64, AccountState>,
    requests: &[WriteRequest],
) -> (Vec<i64>, Vec<i64>) {
    let mut pairs: Vec<(i64, u32)> = states
        .iter()
        .flat_map(|(id, s)| {
            s.terms
                .debit_limits
                .iter()
                .map(move |l| (*id, l.window_seconds))
        })
        .chain(update_windows(requests))
        .collect();
    pairs.sort_unstable();
    pairs.dedup();
    pairs.into_iter().map(|(id, w)| (id, i64::from(w))).unzip()
}

/// Reads the windows the batch's debit limits need into its accounts' states (one more round
/// trip, only when there are any).
pub(super) async fn load_windows(
    client: &deadpool_postgres::Client,
    ledger: LedgerId,
    requests: &[WriteRequest],
    states: &mut HashMap<i64, AccountState>,
    corrupt: &mut HashMap<i64, LedgerError>,
) -> Result<(), StorageError> {
    let (ids, secs) = window_pairs(states, requests);
    if ids.is_empty() {
        return Ok(());
    }
    let st = client.prepare_cached(WINDOWS_SQL).await?;
    let n = requests.len() as i64;
    // One round trip: the statement runs on its generic plan (see [`WINDOWS_SQL`]), the
    // transaction then back on plans per execution.
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] = [&ids, &n, &ledger, &secs];
    let (_, rows, _) = futures_util::try_join!(
        client.batch_execute(INDEXED_GENERIC_PLANS),
        client.query(&st, &params),
        client.batch_execute(PLANS_PER_EXECUTION),
    )?;
    windows(states, corrupt, &rows);
    Ok(())
}

/// What the debit limits need, from the [`WINDOWS_SQL`] rows; a row that cannot be read
/// makes the account corrupt.
fn windows(
    states: &mut HashMap<i64, AccountState>,
    corrupt: &mut HashMap<i64, LedgerError>,
    rows: &[Row],
) {
    for r in rows {
        let id: i64 = r.get("account_id");
        let Some(state) = states.get_mut(&id) else {
            continue;
        };
        let scale = state.account.scale;
        let window = (|| -> Result<DebitWindow, String> {
            let amounts: Vec<String> = r.get("edge_amount");
            let at: Vec<time::OffsetDateTime> = r.get("edge_at");
            let edge = at
                .into_iter()
                .zip(&amounts)
                .map(|(t, m)| parse_stored(m, scale).map(|m| (t, m)))
                .collect::<Result<_, _>>()?;
            Ok(DebitWindow {
                window_seconds: u32::try_from(r.get::<_, i64>("secs"))
                    .map_err(|e| e.to_string())?,
                debits_before: parse_stored(r.get("debits_before"), scale)?,
                edge,
            })
        })();
        match window {
            Ok(w) => state.windows.push(w),
            Err(e) => {
                let code = state.account.code.clone();
                states.remove(&id);
                let e = StorageError::corrupt_account(&code, format!("debit window: {e}"));
                corrupt.insert(id, e.into_ledger_error());
            }
        }
    }
}
