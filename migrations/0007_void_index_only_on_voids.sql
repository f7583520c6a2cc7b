-- One void per posting, enforced by a UNIQUE index that holds only voids. The column's
-- UNIQUE constraint indexed every posting (NULL included), so each posting paid one more
-- index insert inside the writer's critical section; nearly every posting is not a void.
-- The rule is unchanged: two voids of one posting still violate a UNIQUE index.
CREATE UNIQUE INDEX postings_one_void_per_posting ON postings (voids_posting_id)
  WHERE voids_posting_id IS NOT NULL;
ALTER TABLE postings DROP CONSTRAINT postings_voids_posting_id_key;
