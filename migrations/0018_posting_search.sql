-- Posting search (SPEC "Finance queries", ListPostings' filters), each served by an index:
-- metadata by containment (GIN, jsonb_path_ops: metadata never changes, so its entries are
-- inserted once and never rewritten; postings without metadata are left out, so they cost it
-- nothing, and a filter, which has an entry, never matches them); the caller by (caller, sequence), which a stored
-- sequence makes per ledger and in the listing's order; the effective time of the postings
-- whose effective time differs from their recorded time by a partial index on those few (the
-- others are effective when recorded, so an effective range of them is a recorded range). A
-- recorded range needs none: recorded_at increases with sequence within a ledger, so it is a
-- range of sequences (postings_recorded_at_unique_in_ledger finds its two ends); an account
-- is entries_account_sequence and hold_legs_account_sequence, as before.
CREATE INDEX postings_metadata ON postings USING gin (metadata jsonb_path_ops)
  WHERE metadata <> '{}'::jsonb;
CREATE INDEX postings_caller_sequence ON postings (caller, sequence);
CREATE INDEX postings_irregular_effective ON postings (ledger_id, effective_at)
  WHERE effective_at <> recorded_at;
