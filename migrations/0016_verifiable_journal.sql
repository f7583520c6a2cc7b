-- A verifiable journal (docs/verifiable.md): every posting's hash, chained to the previous
-- posting of its ledger, and an RFC 9162 Merkle tree over each ledger's postings in sequence
-- order, both computed by the core (`ledger_core::journal`) and written by the writer's batch
-- with the postings.
--
-- posting_hashes: one row per posting (sequence as stored, so a ledger's rows are one range of
-- the primary key). `hash` is the posting's hash; `nodes` the tree nodes its leaf completes,
-- level 0 (the leaf hash) first, then each complete subtree it closes (its leaf index is
-- sequence - 1 within the ledger: leaf i closes the subtrees of levels 1..k when i + 1 is a
-- multiple of 2^k), so any complete subtree is read by its last leaf's primary key: a root,
-- an inclusion or a consistency proof is O(log n) reads. `root`, on a batch's last posting:
-- the tree's root at that size (a digest), published on ledger.digests.<ledger>.
--
-- ledger_state carries the chain's head: tree_size (postings hashed; equal to the ledger's
-- last sequence within it once hashing has caught up), the last hash and the frontier (the
-- roots of the complete subtrees of the tree's binary decomposition, largest first). A
-- journal from before this migration has tree_size 0 and is hashed by `ledger migrate` in
-- chunks (each under the ledger's lock for one chunk only, resumable: it goes on from
-- tree_size); until it has caught up the writer leaves new postings to it.

CREATE TABLE posting_hashes (
  sequence bigint PRIMARY KEY,
  hash     bytea NOT NULL CHECK (octet_length(hash) = 32),
  nodes    bytea NOT NULL CHECK (octet_length(nodes) >= 32 AND octet_length(nodes) % 32 = 0),
  root     bytea CHECK (octet_length(root) = 32)
);
CREATE TRIGGER posting_hashes_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON posting_hashes
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
GRANT SELECT, INSERT ON posting_hashes TO ledger_app;
REVOKE UPDATE, DELETE, TRUNCATE ON posting_hashes FROM ledger_app;

ALTER TABLE ledger_state
  ADD COLUMN tree_size bigint NOT NULL DEFAULT 0 CHECK (tree_size >= 0),
  ADD COLUMN tree_head bytea NOT NULL DEFAULT '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea
    CHECK (octet_length(tree_head) = 32),
  ADD COLUMN tree_frontier bytea NOT NULL DEFAULT ''::bytea CHECK (octet_length(tree_frontier) % 32 = 0);

-- Digests published: the last stored sequence whose digest the broker acknowledged, per
-- ledger (as account_outbox_progress, 0015): only moves forward.
CREATE TABLE digest_progress (
  ledger_id          integer PRIMARY KEY REFERENCES ledgers,
  published_sequence bigint NOT NULL CHECK (published_sequence >= 0),
  updated_at         timestamptz NOT NULL
);
CREATE FUNCTION digest_progress_forward_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' AND NEW.ledger_id = OLD.ledger_id
     AND NEW.published_sequence >= OLD.published_sequence THEN
    RETURN NEW;
  END IF;
  RAISE EXCEPTION 'ledger: % of digest_progress is not allowed: published_sequence only moves forward', TG_OP
    USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER digest_progress_forward_only BEFORE UPDATE OR DELETE ON digest_progress
  FOR EACH ROW EXECUTE FUNCTION digest_progress_forward_only();
CREATE TRIGGER digest_progress_no_truncate BEFORE TRUNCATE ON digest_progress
  FOR EACH STATEMENT EXECUTE FUNCTION digest_progress_forward_only();
GRANT SELECT, INSERT, UPDATE ON digest_progress TO ledger_app;
REVOKE DELETE, TRUNCATE ON digest_progress FROM ledger_app;

-- `ledger check --ledger L` sees only ledger L's rows (0013).
CREATE VIEW ledger_scope.posting_hashes AS
  SELECT * FROM public.posting_hashes
  WHERE ledger_scope.scope() IS NULL OR (sequence >> 40)::integer = ledger_scope.scope();
GRANT SELECT ON ledger_scope.posting_hashes TO ledger_app;
