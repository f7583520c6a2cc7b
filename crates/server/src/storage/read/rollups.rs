//! Rollups at a cut-off: the accounts beneath a prefix summed per deepest node, currency,
//! scale and normal side, in one statement (one snapshot). `ledger_core::rollup` adds the
//! groups up the tree.

use super::super::StorageError;
use deadpool_postgres::GenericClient;
use ledger_core::amount::parse_stored;
use ledger_core::ledger::LedgerId;
use ledger_core::record::AppliedAsOf;
use ledger_core::rollup::{Group, RollupRequest};
use ledger_core::NormalBalance;

/// Per group of accounts beneath prefix `$5` with a leg recorded by sequence S = `$2`, cut to
/// `$6` segments: the count and the sums of their debits, credits and held amounts at the
/// cut-off (R = `$3`, E = `$1`), computed exactly as `TOTALS_AT` computes one account's, set
/// by set, so 100,000 accounts take one pass rather than 100,000 probes of each kind:
/// - the running totals at m (the last sequence recorded by min(S, E)): an account whose
///   `account_totals.last_sequence` (the last sequence that touched it) is at or before m has
///   no leg after m, so its stored totals are those at m — in the same snapshot, they include
///   exactly the legs the statement sees; only the others are probed for their last leg at or
///   before m (for a cut-off near now, hardly any);
/// - the irregular legs whose interval between their two times contains E (one stabbing scan
///   of `entries_irregular_span` over the ledger, grouped by account);
/// - the legs of holds open at the cut-off, as `TOTALS_AT` decides them.
///
/// Membership (a leg by S) is the trial balance's, so counts, like sums, never change once
/// answered: an account last touched at or before S has one, and so has one whose last leg
/// at or before m was found; only the others are probed.
const GROUPS_SQL: &str = "
WITH bound AS (
  SELECT least($2::bigint, coalesce((SELECT sequence FROM postings WHERE ledger_id = $4 AND recorded_at <= $1
                                     ORDER BY recorded_at DESC LIMIT 1), $4::bigint << 40)) AS m),
acc AS MATERIALIZED (
  SELECT a.account_id, a.code, a.currency, a.scale, a.normal_balance,
         t.last_sequence AS touched, t.debits AS t_debits, t.credits AS t_credits
  FROM accounts a JOIN account_totals t USING (account_id)
  WHERE a.ledger_id = $4
    AND ($5 = '' OR a.code = $5 OR (a.code ~>=~ ($5 || ':') AND a.code ~<~ ($5 || ';')))
    AND t.last_sequence > ($4::bigint << 40)),
gate AS (
  SELECT CASE WHEN $7::text IS NOT NULL THEN $7::text
              WHEN least(early, late) >= 2 * probes THEN 'probe' WHEN early <= late THEN 'early' ELSE 'late' END AS mode
  FROM (SELECT bound.m - ($4::bigint << 40) AS early,
               (SELECT last_sequence FROM ledger_state WHERE ledger_id = $4) - bound.m AS late,
               (SELECT count(*) FROM acc WHERE acc.touched > bound.m) AS probes
        FROM bound) c),
early AS (
  SELECT DISTINCT ON (e.account_id) e.account_id, e.debits_after, e.credits_after
  FROM entries e, bound, gate
  WHERE gate.mode = 'early' AND e.sequence > ($4::bigint << 40) AND e.sequence <= bound.m
  ORDER BY e.account_id, e.sequence DESC, e.account_version DESC),
late AS (
  SELECT e.account_id, sum(e.amount) FILTER (WHERE e.direction = 'D') AS d,
         sum(e.amount) FILTER (WHERE e.direction = 'C') AS c
  FROM entries e, bound, gate
  WHERE gate.mode = 'late' AND e.sequence > bound.m AND e.sequence < (($4::bigint + 1) << 40)
  GROUP BY e.account_id),
mgate AS (
  SELECT coalesce($8::boolean, $2::bigint - ($4::bigint << 40) < 2 * (SELECT count(*) FROM acc WHERE acc.touched > $2)) AS set_wise),
members AS (
  SELECT DISTINCT z.account_id FROM mgate, (
    SELECT e.account_id FROM entries e WHERE e.sequence > ($4::bigint << 40) AND e.sequence <= $2
    UNION ALL
    SELECT l.account_id FROM hold_legs l WHERE l.sequence > ($4::bigint << 40) AND l.sequence <= $2) z
  WHERE mgate.set_wise),
irregular AS (
  SELECT e.account_id,
         sum(CASE WHEN e.effective_at < e.recorded_at THEN e.amount ELSE -e.amount END) FILTER (WHERE e.direction = 'D') AS d,
         sum(CASE WHEN e.effective_at < e.recorded_at THEN e.amount ELSE -e.amount END) FILTER (WHERE e.direction = 'C') AS c
  FROM entries e
  WHERE e.effective_at <> e.recorded_at
    AND tstzrange(least(e.effective_at, e.recorded_at), greatest(e.effective_at, e.recorded_at), '[)') @> $1::timestamptz
    AND e.sequence <= $2 AND e.sequence > ($4::bigint << 40)
  GROUP BY e.account_id),
held AS (
  SELECT l.account_id, sum(l.amount) FILTER (WHERE l.direction = 'D') AS d,
         sum(l.amount) FILTER (WHERE l.direction = 'C') AS c
  FROM hold_legs l JOIN postings hp ON hp.sequence = l.sequence
  LEFT JOIN LATERAL (SELECT c.effective_at FROM postings c
                     WHERE c.closes_hold_posting_id = hp.posting_id AND c.sequence <= $2 LIMIT 1) hc ON true
  WHERE l.sequence <= $2 AND l.sequence > ($4::bigint << 40) AND hp.hold AND hp.effective_at <= $1
    AND l.account_id IN (SELECT account_id FROM acc)
    AND CASE WHEN hc.effective_at IS NOT NULL THEN hc.effective_at > $1
             ELSE hp.hold_expires_at IS NULL OR hp.hold_expires_at > least($3::timestamptz, $1) END
  GROUP BY l.account_id),
totals AS (
  SELECT acc.code, acc.currency, acc.scale, acc.normal_balance,
         CASE WHEN acc.touched <= bound.m THEN acc.t_debits
              WHEN gate.mode = 'late' THEN acc.t_debits - coalesce(z.d, 0)
              ELSE coalesce(p.debits_after, y.debits_after, 0) END + coalesce(x.d, 0) AS d,
         CASE WHEN acc.touched <= bound.m THEN acc.t_credits
              WHEN gate.mode = 'late' THEN acc.t_credits - coalesce(z.c, 0)
              ELSE coalesce(p.credits_after, y.credits_after, 0) END + coalesce(x.c, 0) AS c,
         coalesce(h.d, 0) AS hd, coalesce(h.c, 0) AS hc
  FROM acc CROSS JOIN bound CROSS JOIN gate CROSS JOIN mgate
  LEFT JOIN LATERAL (SELECT debits_after, credits_after FROM entries e
                     WHERE gate.mode = 'probe' AND acc.touched > bound.m AND e.account_id = acc.account_id AND e.sequence <= bound.m
                     ORDER BY e.sequence DESC, e.account_version DESC LIMIT 1) p ON true
  LEFT JOIN early y ON y.account_id = acc.account_id
  LEFT JOIN late z ON z.account_id = acc.account_id
  LEFT JOIN irregular x ON x.account_id = acc.account_id
  LEFT JOIN held h ON h.account_id = acc.account_id
  WHERE acc.touched <= $2 OR p.debits_after IS NOT NULL OR y.debits_after IS NOT NULL
     OR (gate.mode = 'late' AND (acc.t_debits - coalesce(z.d, 0) > 0 OR acc.t_credits - coalesce(z.c, 0) > 0))
     OR (mgate.set_wise AND acc.account_id IN (SELECT account_id FROM members))
     OR (NOT mgate.set_wise
         AND (EXISTS (SELECT 1 FROM entries e WHERE e.account_id = acc.account_id AND e.sequence <= $2)
              OR EXISTS (SELECT 1 FROM hold_legs l WHERE l.account_id = acc.account_id AND l.sequence <= $2))))
SELECT array_to_string((string_to_array(code, ':'))[1:$6], ':') AS node, currency, scale, normal_balance,
       count(*) AS accounts, sum(d)::text AS debits, sum(c)::text AS credits,
       sum(hd)::text AS held_debits, sum(hc)::text AS held_credits
FROM totals GROUP BY 1, 2, 3, 4";

/// How `GROUPS_SQL` finds each account's running totals at m, when not last touched by m.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtM {
    /// The cheapest by the counts: probes unless the postings before m, or after it, number
    /// under two per account to probe (a set-wise pass over them costs about what two
    /// postings' legs cost).
    Cheapest,
    /// One probe per account of its last leg at or before m.
    Probe,
    /// One pass over the legs at or before m, the last of each account.
    Early,
    /// One pass over the legs after m, taken from the stored totals.
    Late,
}

/// How `GROUPS_SQL` decides which accounts have a leg by S, when not last touched by S.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Membership {
    /// Set-wise when the postings by S number under two per account to decide.
    Cheapest,
    /// One probe per account.
    Probe,
    /// One pass over the legs by S.
    SetWise,
}

/// The groups of `req` at `at` (any order). Sums that cannot be (negative, beyond 128 bits or
/// with more decimals than their scale) are a corrupt row of that node.
pub async fn rollup_groups(
    client: &impl GenericClient,
    ledger: LedgerId,
    req: &RollupRequest,
    at: &AppliedAsOf,
) -> Result<Vec<Group>, StorageError> {
    rollup_groups_by(
        client,
        ledger,
        req,
        at,
        (AtM::Cheapest, Membership::Cheapest),
    )
    .await
}

/// [`rollup_groups`], each way of summing chosen (every way gives the same groups: a test
/// compares them).
pub async fn rollup_groups_by(
    client: &impl GenericClient,
    ledger: LedgerId,
    req: &RollupRequest,
    at: &AppliedAsOf,
    (at_m, membership): (AtM, Membership),
) -> Result<Vec<Group>, StorageError> {
    let mode = match at_m {
        AtM::Cheapest => None,
        AtM::Probe => Some("probe"),
        AtM::Early => Some("early"),
        AtM::Late => Some("late"),
    };
    let set_wise = match membership {
        Membership::Cheapest => None,
        Membership::Probe => Some(false),
        Membership::SetWise => Some(true),
    };
    let stmt = client.prepare_cached(GROUPS_SQL).await?;
    let levels = req.levels() as i32;
    let rows = client
        .query(
            &stmt,
            &[
                &at.effective_at,
                &(at.sequence as i64),
                &at.recorded_at,
                &ledger,
                &req.prefix(),
                &levels,
                &mode,
                &set_wise,
            ],
        )
        .await?;
    rows.iter().map(group_from_row).collect()
}

fn group_from_row(r: &tokio_postgres::Row) -> Result<Group, StorageError> {
    let node: String = r.get("node");
    let corrupt =
        |e: String| StorageError::corrupt_account(&node, format!("the rollup's sums: {e}"));
    let scale = u8::try_from(r.get::<_, i16>("scale")).map_err(|e| corrupt(e.to_string()))?;
    let normal = match r.get::<_, &str>("normal_balance") {
        "debit" => NormalBalance::Debit,
        "credit" => NormalBalance::Credit,
        other => return Err(corrupt(format!("normal_balance {other:?}"))),
    };
    let sum = |c: &str| parse_stored(r.get(c), scale).map_err(corrupt);
    let (debits, credits) = (sum("debits")?, sum("credits")?);
    let (held_debits, held_credits) = (sum("held_debits")?, sum("held_credits")?);
    if [debits, credits, held_debits, held_credits]
        .iter()
        .any(|s| *s < 0)
    {
        return Err(corrupt("a negative sum".into()));
    }
    Ok(Group {
        currency: r.get("currency"),
        scale,
        normal,
        accounts: r.get::<_, i64>("accounts") as u64,
        debits,
        credits,
        held_debits,
        held_credits,
        node,
    })
}
