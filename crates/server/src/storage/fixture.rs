//! A load for benchmarks that writes the journal straight, in the shape the writer leaves it
//! (running totals and versions per leg, `account_totals`, `ledger_state`). It is the only
//! code besides the batch's write step that writes journal tables (the tidy test allows it by
//! name): `ledger bench-as-of` needs a history recorded over a year, and the writer records
//! everything now.

use super::StorageError;
use time::OffsetDateTime;

/// The as-of benchmark's history: one hot account with many legs, back- and future-dated ones
/// among them, against one counterpart.
#[derive(Clone, Debug)]
pub struct History {
    /// The account with many legs (debit-normal, may go negative).
    pub hot: &'static str,
    /// Its counterpart (credit-normal, may go negative).
    pub world: &'static str,
    /// Legs of the hot account.
    pub legs: i64,
    /// Legs of the hot account per posting (each posting has one balancing leg more).
    pub legs_per_posting: i64,
    /// Days the recorded times span, ending a minute ago.
    pub days: i64,
    /// Largest back- or future-dating, in days.
    pub max_shift_days: i64,
    /// Percent of postings back-dated, and the same percent future-dated.
    pub irregular_percent: i64,
}

/// The GiST index of migration 0005, as that migration creates it (not written twice).
fn as_of_index_ddl() -> &'static str {
    let migration = include_str!("../../../../migrations/0005_asof_stabbing.sql");
    let start = migration
        .find("CREATE INDEX entries_irregular_span")
        .expect("migration 0005 creates entries_irregular_span");
    let end = start + migration[start..].find(';').expect("its statement ends");
    &migration[start..end]
}

/// A connection to the database being loaded.
pub struct Fixture {
    db: tokio_postgres::Client,
}

impl Fixture {
    pub async fn open(database_url: &str) -> Result<Fixture, StorageError> {
        Ok(Fixture {
            db: super::connect(database_url).await?,
        })
    }

    /// Postings in the journal.
    pub async fn postings(&self) -> Result<i64, StorageError> {
        Ok(self
            .db
            .query_one("SELECT count(*) FROM postings", &[])
            .await?
            .get(0))
    }

    /// Legs of `account` whose effective time differs from their recorded time.
    pub async fn irregular_legs(&self, account: &str) -> Result<i64, StorageError> {
        let row = self
            .db
            .query_one(
                "SELECT count(*) FROM entries e JOIN accounts a USING (account_id)
                 WHERE a.code = $1 AND e.effective_at <> e.recorded_at",
                &[&account],
            )
            .await?;
        Ok(row.get(0))
    }

    /// The earliest and latest recorded, then effective, times of the journal.
    pub async fn time_bounds(&self) -> Result<[OffsetDateTime; 4], StorageError> {
        let r = self
            .db
            .query_one(
                "SELECT min(recorded_at), max(recorded_at), min(effective_at), max(effective_at) FROM postings",
                &[],
            )
            .await?;
        Ok([r.get(0), r.get(1), r.get(2), r.get(3)])
    }

    /// Creates or drops the as-of index (migration 0005's), then checkpoints.
    pub async fn set_as_of_index(&self, present: bool) -> Result<(), StorageError> {
        if present {
            let ddl = as_of_index_ddl().replacen("CREATE INDEX", "CREATE INDEX IF NOT EXISTS", 1);
            self.db.batch_execute(&ddl).await?;
        } else {
            self.db
                .batch_execute("DROP INDEX IF EXISTS entries_irregular_span")
                .await?;
        }
        self.db.batch_execute("CHECKPOINT").await?;
        Ok(())
    }

    /// Loads `h` into an empty journal: postings of `legs_per_posting` hot legs (debits and
    /// smaller credits) and one balancing credit on the counterpart, recorded evenly over
    /// `days` up to a minute ago, a share back- and a share future-dated by up to
    /// `max_shift_days`; running totals and versions computed as the writer does.
    pub async fn load_history(&self, h: &History) -> Result<(), StorageError> {
        let (hot, world) = (h.hot, h.world);
        self.db
            .batch_execute(&format!(
                "INSERT INTO accounts (ledger_id, code, currency, scale, normal_balance, allow_negative, metadata)
                   VALUES (0, '{hot}', 'EUR', 2, 'debit', true, '{{}}'), (0, '{world}', 'EUR', 2, 'credit', true, '{{}}');
                 INSERT INTO account_totals SELECT account_id, 0, 0, 0, 0 FROM accounts;"
            ))
            .await?;
        self.db.batch_execute(&history_sql(h)).await?;
        // Index-only scans need the visibility map; planning needs statistics.
        self.db.batch_execute("VACUUM ANALYZE entries").await?;
        self.db.batch_execute("VACUUM ANALYZE postings").await?;
        Ok(())
    }
}

/// The one transaction that writes the history's postings, legs, totals and state, with
/// deterministic pseudo-random choices (a seeded generator in one session).
fn history_sql(h: &History) -> String {
    let postings = (h.legs + h.legs_per_posting - 1) / h.legs_per_posting;
    let step_us = h.days * 86_400_000_000 / postings.max(1);
    let shift_us = h.max_shift_days * 86_400_000_000;
    let (pct, hl, legs, hot, world) = (
        h.irregular_percent,
        h.legs_per_posting,
        h.legs,
        h.hot,
        h.world,
    );
    format!(
        "BEGIN;
         SELECT setseed(0.42);
         CREATE TEMP TABLE bench_p ON COMMIT DROP AS
           SELECT s AS sequence,
                  date_trunc('second', now()) - interval '1 minute'
                    - ({postings} - s) * interval '{step_us} microseconds' AS recorded_at,
                  (random() * 100)::int AS kind,
                  1 + (random() * {shift_us})::bigint AS shift
           FROM generate_series(1, {postings}) s;
         INSERT INTO idempotency_keys (ledger_id, caller, idempotency_key, operation, fingerprint, decided_at)
           SELECT 0, 'bench', 'load-' || sequence, 'post', sha256(('load-' || sequence)::bytea), recorded_at FROM bench_p;
         INSERT INTO postings (sequence, posting_id, caller, idempotency_key, effective_at, recorded_at, memo, metadata, key_id)
           SELECT sequence, gen_random_uuid(), 'bench', 'load-' || sequence,
                  CASE WHEN kind < {pct} THEN recorded_at - shift * interval '1 microsecond'
                       WHEN kind < 2 * {pct} THEN recorded_at + shift * interval '1 microsecond'
                       ELSE recorded_at END,
                  recorded_at, '', '{{}}', k.key_id
           FROM bench_p JOIN idempotency_keys k ON k.caller = 'bench' AND k.idempotency_key = 'load-' || sequence;
         CREATE TEMP TABLE bench_l ON COMMIT DROP AS
           SELECT p.sequence, j AS leg_index, a.account_id,
                  CASE WHEN j % 2 = 0 THEN 'D' ELSE 'C' END::\"char\" AS direction,
                  CASE WHEN j % 2 = 0 THEN round(10 + (random() * 9000)::int::numeric / 100, 2)
                       ELSE round(0.01 + (random() * 900)::int::numeric / 100, 2) END AS amount,
                  p.recorded_at, p.effective_at
           FROM postings p CROSS JOIN generate_series(0, {hl} - 1) j
           JOIN accounts a ON a.code = '{hot}'
           WHERE p.sequence * {hl} - ({hl} - 1 - j) <= {legs};
         INSERT INTO bench_l
           SELECT l.sequence, max(l.leg_index) + 1, w.account_id, 'C',
                  sum(CASE WHEN l.direction = 'D' THEN l.amount ELSE -l.amount END),
                  min(l.recorded_at), min(l.effective_at)
           FROM bench_l l JOIN accounts w ON w.code = '{world}'
           GROUP BY l.sequence, w.account_id;
         INSERT INTO entries (sequence, leg_index, account_id, direction, amount, account_version,
                              debits_after, credits_after, recorded_at, effective_at)
           SELECT sequence, leg_index, account_id, direction, amount,
                  row_number() OVER w,
                  sum(CASE WHEN direction = 'D' THEN amount ELSE 0 END) OVER w,
                  sum(CASE WHEN direction = 'C' THEN amount ELSE 0 END) OVER w,
                  recorded_at, effective_at
           FROM bench_l
           WINDOW w AS (PARTITION BY account_id ORDER BY sequence, leg_index);
         UPDATE account_totals t SET debits = x.d, credits = x.c, version = x.v, last_sequence = x.s
           FROM (SELECT account_id, coalesce(sum(amount) FILTER (WHERE direction = 'D'), 0) AS d,
                        coalesce(sum(amount) FILTER (WHERE direction = 'C'), 0) AS c,
                        count(*) AS v, max(sequence) AS s
                 FROM entries GROUP BY account_id) x
           WHERE t.account_id = x.account_id;
         UPDATE ledger_state SET last_sequence = {postings},
           last_recorded_at = (SELECT max(recorded_at) FROM postings);
         COMMIT;"
    )
}

/// The finance benchmark's book: a chart of `accounts` accounts under the five top segments
/// (assets, liabilities, equity, income, expenses; two levels of groups below them), and
/// `postings` two-leg postings between random accounts recorded evenly over `days` up to a
/// minute ago, a share back- and a share future-dated by up to 20 days, a share holds (open);
/// each with metadata `order` (20 postings per order) and one of two callers.
#[derive(Clone, Debug)]
pub struct Chart {
    pub accounts: i64,
    pub postings: i64,
    pub days: i64,
    /// Percent of postings back-dated, and the same percent future-dated.
    pub irregular_percent: i64,
    /// Percent of postings that are open holds.
    pub hold_percent: i64,
}

/// The top segment and the group of account `i` of a chart, and its normal side.
const CHART_GROUPS: &str = "CASE i % 10
    WHEN 0 THEN 'assets:bank' WHEN 1 THEN 'assets:receivables' WHEN 2 THEN 'liabilities:payables'
    WHEN 3 THEN 'liabilities:customers' WHEN 4 THEN 'liabilities:customers' WHEN 5 THEN 'income:fees'
    WHEN 6 THEN 'income:interest' WHEN 7 THEN 'expenses:cloud' WHEN 8 THEN 'expenses:payroll'
    ELSE 'equity:capital' END";

impl Fixture {
    /// Loads `c` into an empty journal (one transaction), then vacuums and analyzes.
    pub async fn load_chart(&self, c: &Chart) -> Result<(), StorageError> {
        self.db.batch_execute(&chart_sql(c)).await?;
        for t in [
            "accounts",
            "account_totals",
            "entries",
            "postings",
            "hold_legs",
            "idempotency_keys",
        ] {
            self.db
                .batch_execute(&format!("VACUUM ANALYZE {t}"))
                .await?;
        }
        Ok(())
    }
}

fn chart_sql(c: &Chart) -> String {
    let (n, p, pct, holds) = (c.accounts, c.postings, c.irregular_percent, c.hold_percent);
    let step_us = c.days * 86_400_000_000 / p.max(1);
    let orders = (p / 20).max(1);
    format!(
        "BEGIN;
         SELECT setseed(0.17);
         INSERT INTO accounts (ledger_id, code, currency, scale, normal_balance, allow_negative, metadata)
           SELECT 0, {CHART_GROUPS} || ':a' || i, 'EUR', 2,
                  CASE WHEN i % 10 IN (0, 1, 7, 8) THEN 'debit' ELSE 'credit' END, true, '{{}}'
           FROM generate_series(0, {n} - 1) i;
         INSERT INTO account_terms (account_id, terms_version, status, balance_floor, balance_ceiling,
                                    debit_limits, after_sequence, recorded_at, caller, idempotency_key, reason, changed)
           SELECT account_id, 1, 'open', NULL, NULL, '[]', 0, created_at, '', '', '', '{{}}' FROM accounts;
         CREATE TEMP TABLE chart_ids ON COMMIT DROP AS
           SELECT row_number() OVER (ORDER BY account_id) - 1 AS n, account_id FROM accounts;
         CREATE INDEX ON chart_ids (n);
         CREATE TEMP TABLE chart_p ON COMMIT DROP AS
           SELECT s AS sequence,
                  date_trunc('second', now()) - interval '1 minute' - ({p} - s) * interval '{step_us} microseconds' AS recorded_at,
                  (random() * 100)::int AS kind, 1 + (random() * 86400e6 * 20)::bigint AS shift,
                  (random() * ({n} - 1))::int AS da, (random() * ({n} - 1))::int AS ca,
                  round(0.01 + (random() * 100000)::int::numeric / 100, 2) AS amount,
                  CASE WHEN s % 2 = 0 THEN 'svc-a' ELSE 'svc-b' END AS caller
           FROM generate_series(1, {p}) s;
         UPDATE chart_p SET ca = (ca + 1) % {n} WHERE ca = da;
         INSERT INTO idempotency_keys (ledger_id, caller, idempotency_key, operation, fingerprint, decided_at)
           SELECT 0, caller, 'load-' || sequence, 'post', sha256(('load-' || sequence)::bytea), recorded_at FROM chart_p;
         INSERT INTO postings (sequence, posting_id, caller, idempotency_key, effective_at, recorded_at, memo, metadata, key_id, hold)
           SELECT sequence, gen_random_uuid(), b.caller, 'load-' || sequence,
                  CASE WHEN kind < {pct} THEN recorded_at - shift * interval '1 microsecond'
                       WHEN kind < 2 * {pct} THEN recorded_at + shift * interval '1 microsecond' ELSE recorded_at END,
                  recorded_at, 'order o-' || (sequence % {orders}),
                  jsonb_build_object('order', 'o-' || (sequence % {orders})), k.key_id, kind >= 100 - {holds}
           FROM chart_p b JOIN idempotency_keys k ON k.caller = b.caller AND k.idempotency_key = 'load-' || sequence;
         CREATE TEMP TABLE chart_l ON COMMIT DROP AS
           SELECT p.sequence, 0 AS leg_index, d.account_id, 'D'::\"char\" AS direction, b.amount, p.recorded_at, p.effective_at, p.hold
           FROM chart_p b JOIN postings p USING (sequence) JOIN chart_ids d ON d.n = b.da
           UNION ALL
           SELECT p.sequence, 1, k.account_id, 'C'::\"char\", b.amount, p.recorded_at, p.effective_at, p.hold
           FROM chart_p b JOIN postings p USING (sequence) JOIN chart_ids k ON k.n = b.ca;
         INSERT INTO hold_legs (sequence, leg_index, account_id, direction, amount)
           SELECT sequence, leg_index, account_id, direction, amount FROM chart_l WHERE hold;
         INSERT INTO entries (sequence, leg_index, account_id, direction, amount, account_version,
                              debits_after, credits_after, recorded_at, effective_at)
           SELECT sequence, leg_index, account_id, direction, amount, row_number() OVER w,
                  sum(CASE WHEN direction = 'D' THEN amount ELSE 0 END) OVER w,
                  sum(CASE WHEN direction = 'C' THEN amount ELSE 0 END) OVER w, recorded_at, effective_at
           FROM chart_l WHERE NOT hold WINDOW w AS (PARTITION BY account_id ORDER BY sequence, leg_index);
         INSERT INTO account_totals (account_id, debits, credits, version, last_sequence, held_debits, held_credits)
           SELECT a.account_id, coalesce(e.d, 0), coalesce(e.c, 0), coalesce(e.v, 0),
                  greatest(coalesce(e.s, 0), coalesce(h.s, 0)), coalesce(h.d, 0), coalesce(h.c, 0)
           FROM accounts a
           LEFT JOIN (SELECT account_id, sum(amount) FILTER (WHERE direction = 'D') AS d,
                             sum(amount) FILTER (WHERE direction = 'C') AS c, count(*) AS v, max(sequence) AS s
                      FROM entries GROUP BY account_id) e USING (account_id)
           LEFT JOIN (SELECT account_id, sum(amount) FILTER (WHERE direction = 'D') AS d,
                             sum(amount) FILTER (WHERE direction = 'C') AS c, max(sequence) AS s
                      FROM hold_legs GROUP BY account_id) h USING (account_id);
         UPDATE ledger_state SET last_sequence = {p}, last_recorded_at = (SELECT max(recorded_at) FROM postings)
           WHERE ledger_id = 0;
         COMMIT;"
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_as_of_index_is_migration_0005s_own_statement() {
        let ddl = super::as_of_index_ddl();
        assert!(ddl.starts_with("CREATE INDEX entries_irregular_span ON entries USING gist"));
        assert!(ddl.contains("WHERE effective_at <> recorded_at") && !ddl.contains(';'));
    }
}
