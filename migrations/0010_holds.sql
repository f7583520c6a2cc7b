-- Holds (two-phase postings). A hold is a posting whose legs reserve amounts without moving
-- them: they are kept in hold_legs (not in entries, whose running totals are money), and add
-- to the account's held totals. A capture, a release (the void of a hold) or the ledger's
-- release at the hold's expiry closes it: the closing posting names the hold, and a UNIQUE
-- constraint lets a hold be closed once. A hold's state is derived from the journal, never
-- stored in a column that changes.
ALTER TABLE postings
  ADD COLUMN hold boolean NOT NULL DEFAULT false,
  ADD COLUMN hold_expires_at timestamptz,
  ADD COLUMN closes_hold_posting_id uuid REFERENCES postings (posting_id),
  ADD COLUMN close_kind text CHECK (close_kind IN ('capture', 'release', 'expire')),
  ADD CONSTRAINT postings_close_names_its_kind CHECK ((closes_hold_posting_id IS NULL) = (close_kind IS NULL)),
  ADD CONSTRAINT postings_expiry_only_on_holds CHECK (hold OR hold_expires_at IS NULL),
  ADD CONSTRAINT postings_hold_closed_once UNIQUE (closes_hold_posting_id);

-- Holds that may still expire, by expiry time: what the expiry task scans.
CREATE INDEX postings_hold_expiry ON postings (hold_expires_at) WHERE hold AND hold_expires_at IS NOT NULL;

-- The legs of postings that move no money: holds, and releases (voids of holds, expiries).
CREATE TABLE hold_legs (
  sequence   bigint NOT NULL,
  leg_index  smallint NOT NULL CHECK (leg_index >= 0),
  account_id bigint NOT NULL,
  direction  "char" NOT NULL CHECK (direction IN ('D', 'C')),
  amount     numeric NOT NULL CHECK (amount > 0),
  PRIMARY KEY (sequence, leg_index)
);
CREATE INDEX hold_legs_account_sequence ON hold_legs (account_id, sequence);
CREATE TRIGGER hold_legs_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON hold_legs
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
GRANT SELECT, INSERT ON hold_legs TO ledger_app;
REVOKE UPDATE, DELETE, TRUNCATE ON hold_legs FROM ledger_app;

-- The held totals the funds rule needs now (derived, like the other totals, and verified by
-- `ledger check` against the open holds' legs).
ALTER TABLE account_totals
  ADD COLUMN held_debits numeric NOT NULL DEFAULT 0 CHECK (held_debits >= 0),
  ADD COLUMN held_credits numeric NOT NULL DEFAULT 0 CHECK (held_credits >= 0);

-- Keys are decided by captures and by the ledger's expiries too.
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_operation_check;
ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_operation_check
  CHECK (operation IN ('post', 'void', 'capture', 'expire'));
