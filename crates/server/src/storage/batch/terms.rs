//! What debit limits need of the batch's load: their windows.

use crate::storage::StorageError;
use ledger_core::amount::parse_stored;
use ledger_core::terms::DebitWindow;
use ledger_core::write::AccountState;
use ledger_core::LedgerError;
use std::collections::HashMap;
use tokio_postgres::Row;

/// What the debit limits of the batch's accounts need (`ledger_core::engine::DebitWindow`),
/// per account and distinct window of the limits in force and of those the batch's updates
/// set (`$4`, `$5`: `ledger_core::write::update_windows`): the account's debits recorded at
/// or before the earliest time the batch can record at less the window (the later of the
/// transaction's start and the last batch), and its debit legs after that up to the latest
/// time less the window (as in `EXPIRING_SQL`). Two probes of `postings (ledger_id,
/// recorded_at)` find the sequences there, one of `entries (account_id, sequence)` the
/// debits before, a range of it the legs between: nothing scans the account's history.
pub(super) const WINDOWS_SQL: &str = "WITH h AS (
        SELECT greatest(transaction_timestamp(), last_recorded_at) AS lo,
               greatest(clock_timestamp(), last_recorded_at) + ($2::bigint + 1) * interval '1 microsecond' AS hi
        FROM ledger_state WHERE ledger_id = $3),
     w AS (
        SELECT DISTINCT x.id, (l->>'window_seconds')::bigint AS secs
        FROM unnest($1::bigint[]) AS x(id)
        JOIN account_totals t ON t.account_id = x.id
        JOIN account_terms v ON v.account_id = x.id AND v.terms_version = t.terms_version
        CROSS JOIN LATERAL jsonb_array_elements(v.debit_limits) l
        UNION
        SELECT u.id, u.secs FROM unnest($4::bigint[], $5::bigint[]) AS u(id, secs)),
     c AS (
        SELECT w.id, w.secs,
          (SELECT p.sequence FROM postings p WHERE p.ledger_id = $3
             AND p.recorded_at <= h.lo - w.secs * interval '1 second'
           ORDER BY p.recorded_at DESC LIMIT 1) AS lo_seq,
          (SELECT p.sequence FROM postings p WHERE p.ledger_id = $3
             AND p.recorded_at <= h.hi - w.secs * interval '1 second'
           ORDER BY p.recorded_at DESC LIMIT 1) AS hi_seq
        FROM h CROSS JOIN w)
     SELECT c.id AS account_id, c.secs,
       coalesce((SELECT e.debits_after::text FROM entries e
                 WHERE e.account_id = c.id AND e.sequence <= c.lo_seq
                 ORDER BY e.sequence DESC LIMIT 1), '0') AS debits_before,
       ARRAY(SELECT e.recorded_at FROM entries e
             WHERE e.account_id = c.id AND e.sequence > coalesce(c.lo_seq, 0)
               AND e.sequence <= c.hi_seq AND e.direction = 'D' ORDER BY e.sequence) AS edge_at,
       ARRAY(SELECT e.amount::text FROM entries e
             WHERE e.account_id = c.id AND e.sequence > coalesce(c.lo_seq, 0)
               AND e.sequence <= c.hi_seq AND e.direction = 'D' ORDER BY e.sequence) AS edge_amount
     FROM c";

/// What the debit limits need, from the [`WINDOWS_SQL`] rows; a row that cannot be read
/// makes the account corrupt.
pub(super) fn windows(
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
