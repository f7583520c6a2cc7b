-- A posting that closes a hold names it in closes_hold_posting_id. That column's foreign key
-- re-verified, row by row inside the writer's critical section, the hold the writer had just
-- read, and locked the hold's row (FOR KEY SHARE) for every capture and release; a release
-- paid it twice (its void names the same hold). Measured with `ledger bench --holds 0.5`: the
-- postings insert took 1.97 s of database time per 10 s with it, 1.40 s without, and 9,676
-- against 11,408 postings/s (docs/decisions/2026-12-01-performance-holds-targets-in-the-lane.md).
-- What keeps the rule, as for the foreign keys migration 0004 dropped: only the writer inserts
-- postings and it closes only a hold it read and found open; postings refuse DELETE and
-- TRUNCATE, so a hold cannot vanish; a release names its hold through its void as well, which
-- the constraint below makes the database check and whose foreign key stays; `ledger check`
-- verifies that every closing posting names an earlier hold.
ALTER TABLE postings DROP CONSTRAINT postings_closes_hold_posting_id_fkey;
ALTER TABLE postings ADD CONSTRAINT postings_release_is_the_void_of_its_hold
  CHECK (close_kind IS DISTINCT FROM 'release' OR voids_posting_id = closes_hold_posting_id);
