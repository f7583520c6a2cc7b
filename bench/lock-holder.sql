-- What the holders of the ledgers' write locks are doing: run with psql against the ledger's
-- database while a load runs (for example `ledger bench --hot-account`), e.g.
--   psql -h <socket dir> -p <port> -U postgres -d ledger -X -q -f bench/lock-holder.sql
-- It samples pg_locks and pg_stat_activity 4,000 times about 2 ms apart (about 10 s) and
-- prints, for the sessions holding a ledger's write lock (LEDGER_LOCK_CLASS 0x4c45_4447 as
-- classid 1279607879, the ledger id as objid, objsubid 2 for a two-key lock), how often they
-- were in each state, wait event and statement. Under
-- extended-protocol pipelining a statement's row also counts the planning of the next one.
-- "idle in transaction" is time the lock is held while the database waits for the writer.
CREATE TEMP TABLE lock_holder_samples (state text, wait_event text, query text);
DO $$
BEGIN
  FOR i IN 1..4000 LOOP
    PERFORM pg_stat_clear_snapshot();
    INSERT INTO lock_holder_samples
      SELECT a.state, a.wait_event, left(regexp_replace(a.query, '\s+', ' ', 'g'), 50)
      FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
      WHERE l.locktype = 'advisory' AND l.granted AND l.mode = 'ExclusiveLock'
        AND l.classid = 1279607879 AND l.objsubid = 2;
    PERFORM pg_sleep(0.002);
  END LOOP;
END $$;
SELECT count(*) AS samples_with_a_holder FROM lock_holder_samples;
SELECT state, wait_event, query, count(*) AS samples,
       round(100.0 * count(*) / sum(count(*)) OVER (), 1) AS pct
  FROM lock_holder_samples GROUP BY 1, 2, 3 ORDER BY 4 DESC LIMIT 20;
