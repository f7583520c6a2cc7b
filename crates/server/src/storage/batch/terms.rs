//! What debit limits need of the batch's load: their windows.

use super::memo::{Known, WindowDraft, WindowMemo, LOOKAHEAD};
use crate::storage::StorageError;
use ledger_core::amount::parse_stored;
use ledger_core::ledger;
use ledger_core::terms::DebitWindow;
use ledger_core::write::{update_windows, AccountState, Clock, WriteRequest};
use ledger_core::LedgerError;
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use time::{Duration, OffsetDateTime};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

/// What the debit limits of the batch's accounts need (`ledger_core::terms::DebitWindow`),
/// per (account, window) pair (`$1`, `$4`: those the lane's [`WindowMemo`] does not answer of
/// the limits in force, as the totals' read found them, and those the batch's updates set):
/// the account's debits recorded at or before the cut `$2` less the window (`$2`: the batch's
/// earliest recorded time), its debit legs after that up to its latest cut (`$5`, its latest
/// time, less the window, as in `EXPIRING_SQL`) and on, `$6` µs further (the memo's
/// `LOOKAHEAD`, not past `$2`: recorded, all of them), and when its first entry after those was
/// recorded (`next_at`, what the memo keeps). Per distinct window, two probes of `postings
/// (ledger_id, recorded_at)` find the sequences there (once, `MATERIALIZED`); per pair, a probe
/// of `entries (account_id, sequence)` the debits before, one range of it the legs after, one
/// probe the next entry: nothing scans the account's history. Sent only for a batch with such
/// pairs, after the first round trip (under the lock it took).
///
/// It runs on a generic plan, made once per connection with sequential scans priced out
/// ([`INDEXED_GENERIC_PLANS`]): planning it for each execution cost 2–3 ms a batch, most of what
/// debit limits cost. Every read in it is a probe of an index whose leading columns it fixes
/// (`postings (ledger_id, recorded_at)`, `entries (account_id, sequence)`). Made on small
/// tables without that setting, the generic plan scanned both (1.2 M rows in six batches of
/// `the_writer_does_not_scan_tables_that_grew_after_its_statements_were_prepared`, which runs it).
pub(super) const WINDOWS_SQL: &str = "WITH w AS (SELECT DISTINCT u.id, u.secs FROM unnest($1::bigint[], $4::bigint[]) AS u(id, secs)),
     c AS MATERIALIZED (
        SELECT s.secs,
          (SELECT p.sequence FROM postings p WHERE p.ledger_id = $3
             AND p.recorded_at <= $2::timestamptz - s.secs * interval '1 second'
           ORDER BY p.recorded_at DESC LIMIT 1) AS lo_seq,
          (SELECT p.sequence FROM postings p WHERE p.ledger_id = $3
             AND p.recorded_at <= least($5::timestamptz + $6::bigint * interval '1 microsecond',
                                        $2::timestamptz + s.secs * interval '1 second')
                                  - s.secs * interval '1 second'
           ORDER BY p.recorded_at DESC LIMIT 1) AS ahead_seq
        FROM (SELECT DISTINCT secs FROM w) s)
     SELECT w.id AS account_id, w.secs,
       coalesce((SELECT e.debits_after::text FROM entries e
                 WHERE e.account_id = w.id AND e.sequence <= c.lo_seq
                 ORDER BY e.sequence DESC LIMIT 1), '0') AS debits_before,
       edge.at AS edge_at, edge.amount AS edge_amount,
       (SELECT e.recorded_at FROM entries e
        WHERE e.account_id = w.id AND e.sequence > coalesce(c.ahead_seq, 0)
        ORDER BY e.sequence LIMIT 1) AS next_at
     FROM w JOIN c USING (secs)
     CROSS JOIN LATERAL (
        SELECT coalesce(array_agg(e.recorded_at ORDER BY e.sequence), '{}') AS at,
               coalesce(array_agg(e.amount::text ORDER BY e.sequence), '{}') AS amount
        FROM entries e
        WHERE e.account_id = w.id AND e.sequence > coalesce(c.lo_seq, 0)
          AND e.sequence <= c.ahead_seq AND e.direction = 'D') edge";

/// [`WINDOWS_SQL`]'s plan: generic, made once per connection with sequential scans priced
/// out, so it reads the tables by their indexes however small they were when it was made.
const INDEXED_GENERIC_PLANS: &str =
    "SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL enable_seqscan = off";
/// Back to the transaction's default after [`WINDOWS_SQL`].
const PLANS_PER_EXECUTION: &str =
    "SET LOCAL plan_cache_mode = force_custom_plan; SET LOCAL enable_seqscan = on";

/// The (account, window) pairs the batch's debit limits need, distinct: the windows of the
/// limits in force on its accounts and of those its updates set.
fn window_pairs(states: &HashMap<i64, AccountState>, requests: &[WriteRequest]) -> Vec<(i64, u32)> {
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
    pairs
}

/// Reads the windows the batch's debit limits need into its accounts' states: from the lane's
/// `memo` where it knows them, the others in one more round trip (only when there are any).
pub(super) async fn load_windows(
    client: &deadpool_postgres::Client,
    (clock, requests): (&Clock, &[WriteRequest]),
    states: &mut HashMap<i64, AccountState>,
    corrupt: &mut HashMap<i64, LedgerError>,
    (memo, draft): (&Mutex<WindowMemo>, &mut WindowDraft),
) -> Result<(), StorageError> {
    let lo = clock.now.max(clock.last_recorded_at);
    let hi = lo + Duration::microseconds(requests.len() as i64 + 1);
    let cut = |at: OffsetDateTime, secs: u32| at - Duration::seconds(i64::from(secs));
    let (ids, secs) = {
        let memo = memo.lock().unwrap_or_else(PoisonError::into_inner);
        let mut touched: Vec<i64> = states.keys().copied().collect();
        touched.sort_unstable();
        draft.begin(clock.base(), touched);
        let mut unknown = Vec::new();
        let pairs = window_pairs(states, requests);
        for &(id, w) in &pairs {
            match memo.window(draft, (id, w), (cut(lo, w), cut(hi, w))) {
                Some(window) => {
                    if let Some(state) = states.get_mut(&id) {
                        state.windows.push(window);
                    }
                }
                None => unknown.push((id, i64::from(w))),
            }
        }
        crate::metrics::debit_windows(pairs.len() - unknown.len(), unknown.len());
        unknown.into_iter().unzip::<_, _, Vec<i64>, Vec<i64>>()
    };
    if ids.is_empty() {
        return Ok(());
    }
    let st = client.prepare_cached(WINDOWS_SQL).await?;
    let ahead = LOOKAHEAD.whole_microseconds() as i64;
    let ledger = ledger::of_sequence(clock.last_sequence);
    let params: [&(dyn ToSql + Sync); 6] = [&ids, &lo, &ledger, &secs, &hi, &ahead];
    // One round trip: the statement runs on its generic plan (see [`WINDOWS_SQL`]), the
    // transaction then back on plans per execution.
    let (_, rows, _) = futures_util::try_join!(
        client.batch_execute(INDEXED_GENERIC_PLANS),
        client.query(&st, &params),
        client.batch_execute(PLANS_PER_EXECUTION),
    )?;
    for r in &rows {
        let id: i64 = r.get("account_id");
        let Some(state) = states.get_mut(&id) else {
            continue;
        };
        match window_of(r, state.account.scale) {
            Ok((w, next_at)) => {
                let known = Known::read(&w, cut(lo, w.window_seconds), next_at);
                draft.learnt((id, w.window_seconds), known);
                state.windows.push(w);
            }
            Err(e) => {
                let code = state.account.code.clone();
                states.remove(&id);
                let e = StorageError::corrupt_account(&code, format!("debit window: {e}"));
                corrupt.insert(id, e.into_ledger_error());
            }
        }
    }
    Ok(())
}

/// A [`WINDOWS_SQL`] row: the window, and when the account's next entry was recorded.
fn window_of(r: &Row, scale: u8) -> Result<(DebitWindow, Option<OffsetDateTime>), String> {
    let amounts: Vec<String> = r.get("edge_amount");
    let at: Vec<OffsetDateTime> = r.get("edge_at");
    let edge = at
        .into_iter()
        .zip(&amounts)
        .map(|(t, m)| parse_stored(m, scale).map(|m| (t, m)))
        .collect::<Result<_, _>>()?;
    let window = DebitWindow {
        window_seconds: u32::try_from(r.get::<_, i64>("secs")).map_err(|e| e.to_string())?,
        debits_before: parse_stored(r.get("debits_before"), scale)?,
        edge,
    };
    Ok((window, r.get("next_at")))
}
