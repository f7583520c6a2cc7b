-- As-of at an effective cut-off E: a leg whose effective time differs from its recorded time
-- changes a recorded-order running balance exactly when E lies between its two times
-- (future-dated: recorded <= E < effective; back-dated: effective <= E < recorded). One GiST
-- index over that half-open interval answers "which irregular legs of this account span E"
-- by a stabbing query, whose cost follows the number of legs spanning E rather than every
-- irregular leg before or after it (which the two partial btree indexes of 0001 scanned).
-- btree_gist is a trusted extension: the database owner may create it.
CREATE EXTENSION IF NOT EXISTS btree_gist;

CREATE INDEX entries_irregular_span ON entries USING gist (
  account_id,
  tstzrange(least(effective_at, recorded_at), greatest(effective_at, recorded_at), '[)')
) INCLUDE (sequence, direction, amount, effective_at, recorded_at)
  WHERE effective_at <> recorded_at;

DROP INDEX entries_future_dated;
DROP INDEX entries_back_dated;
