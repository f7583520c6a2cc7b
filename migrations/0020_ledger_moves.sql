-- Moving a ledger to another cluster (SPEC "Ledgers on several PostgreSQL clusters",
-- `ledger move-ledger`). Insert-only, like the directory: a state is the latest row.
--
-- On every cluster: a ledger's fences. While its latest row has `fenced`, every write of the
-- ledger on that cluster is refused LEDGER_MOVING (the batch reads it under the ledger's
-- lock, so a write either committed before the fence or is refused after it). A move fences
-- its source before copying, and for good once the directory has switched (the copy left
-- there is read-only); the copy on its target is fenced until the switch.
CREATE TABLE ledger_fences (
  ledger_id integer NOT NULL REFERENCES ledgers,
  fence_no  integer NOT NULL CHECK (fence_no >= 1),
  move_id   uuid NOT NULL,
  fenced    boolean NOT NULL,
  at        timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (ledger_id, fence_no)
);
-- On `main`: every move, and how it ended (`done`: the directory switched, in the same
-- transaction as the placement of the new version; `undone`: the ledger stayed). A move
-- without an end is under way (or was cut off: its rerun finishes or undoes it).
CREATE TABLE ledger_moves (
  move_id      uuid PRIMARY KEY,
  ledger_id    integer NOT NULL REFERENCES ledgers,
  from_cluster text NOT NULL CHECK (from_cluster ~ '^[a-z0-9_-]{1,32}$'),
  to_cluster   text NOT NULL CHECK (to_cluster ~ '^[a-z0-9_-]{1,32}$'),
  caller       text NOT NULL,
  started_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX ledger_moves_by_ledger ON ledger_moves (ledger_id);
CREATE TABLE ledger_move_ends (
  move_id  uuid PRIMARY KEY REFERENCES ledger_moves,
  outcome  text NOT NULL CHECK (outcome IN ('done', 'undone')),
  ended_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TRIGGER ledger_fences_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON ledger_fences
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_moves_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON ledger_moves
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_move_ends_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON ledger_move_ends
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
GRANT SELECT, INSERT ON ledger_fences, ledger_moves, ledger_move_ends TO ledger_app;
REVOKE UPDATE, DELETE, TRUNCATE ON ledger_fences, ledger_moves, ledger_move_ends FROM ledger_app;
