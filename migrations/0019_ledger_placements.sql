-- Ledgers on several PostgreSQL clusters (SPEC "Ledgers on several PostgreSQL clusters").
-- The cluster `main` (the server's --database-url) holds the directory: every ledger's row in
-- `ledgers`, and here the cluster holding its journal when that is not `main`. Insert-only:
-- a ledger's placement is its row of the highest version (none: `main`), so a later version
-- (a move) never rewrites an earlier one. Every cluster carries the whole schema; a ledger
-- placed on another cluster has its `ledgers` row there too, with the same id (a stored
-- sequence names its ledger, so ids are unique across clusters: `main` allocates them).
CREATE TABLE ledger_placements (
  ledger_id  integer NOT NULL REFERENCES ledgers,
  version    integer NOT NULL CHECK (version >= 1),
  cluster    text NOT NULL CHECK (cluster ~ '^[a-z0-9_-]{1,32}$'),
  placed_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (ledger_id, version)
);
CREATE TRIGGER ledger_placements_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON ledger_placements
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
GRANT SELECT, INSERT ON ledger_placements TO ledger_app;
REVOKE UPDATE, DELETE, TRUNCATE ON ledger_placements FROM ledger_app;
