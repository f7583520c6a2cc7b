-- Period closes (SPEC "Period close"): a close is decided by the ledger's writer in its
-- sequence order, like an account version: it takes no sequence (after_sequence is the
-- ledger's last posting decided before it) and moves ledger_state.closed_before, which every
-- later batch reads under the lock: nothing is recorded effective before it (PERIOD_CLOSED).
-- Insert-only; closes only move forward (the primary key orders them, the writer refuses a
-- close not after the last).
--
-- The trial balance at a close's cut-off (recorded_at, just before effective_before, through
-- after_sequence) is recorded after the close commits, once, by the service: the balances in
-- period_close_balances, then its totals, account count and the digest at after_sequence in
-- period_close_trial_balances, whose row says the trial balance is complete. An as-of answer
-- never changes, so recording it later records what the ledger knew at the close.

CREATE TABLE period_closes (
  ledger_id        integer NOT NULL REFERENCES ledgers,
  effective_before timestamptz NOT NULL,
  after_sequence   bigint NOT NULL CHECK (after_sequence >= 0),
  recorded_at      timestamptz NOT NULL,
  caller           text NOT NULL,
  idempotency_key  text NOT NULL,
  memo             text NOT NULL,
  key_id           bigint NOT NULL UNIQUE,
  PRIMARY KEY (ledger_id, effective_before)
);

CREATE TABLE period_close_balances (
  ledger_id        integer NOT NULL,
  effective_before timestamptz NOT NULL,
  account_id       bigint NOT NULL REFERENCES accounts,
  debits           numeric NOT NULL,
  credits          numeric NOT NULL,
  held_debits      numeric NOT NULL,
  held_credits     numeric NOT NULL,
  PRIMARY KEY (ledger_id, effective_before, account_id),
  FOREIGN KEY (ledger_id, effective_before) REFERENCES period_closes
);

CREATE TABLE period_close_trial_balances (
  ledger_id        integer NOT NULL,
  effective_before timestamptz NOT NULL,
  accounts         bigint NOT NULL CHECK (accounts >= 0),
  -- [{"currency": "EUR", "debits": "…", "credits": "…", "held_debits": "…", "held_credits": "…"}]
  totals           jsonb NOT NULL CHECK (jsonb_typeof(totals) = 'array'),
  digest_size      bigint NOT NULL CHECK (digest_size >= 0),
  digest_root      bytea NOT NULL CHECK (octet_length(digest_root) = 32),
  PRIMARY KEY (ledger_id, effective_before),
  FOREIGN KEY (ledger_id, effective_before) REFERENCES period_closes
);

CREATE TRIGGER period_closes_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON period_closes
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER period_close_balances_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON period_close_balances
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER period_close_trial_balances_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON period_close_trial_balances
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
GRANT SELECT, INSERT ON period_closes, period_close_balances, period_close_trial_balances TO ledger_app;
REVOKE UPDATE, DELETE, TRUNCATE ON period_closes, period_close_balances, period_close_trial_balances FROM ledger_app;

ALTER TABLE ledger_state ADD COLUMN closed_before timestamptz;

ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_operation_check;
ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_operation_check
  CHECK (operation IN ('post', 'void', 'capture', 'expire', 'update', 'close'));

CREATE VIEW ledger_scope.period_closes AS
  SELECT * FROM public.period_closes WHERE ledger_scope.scope() IS NULL OR ledger_id = ledger_scope.scope();
GRANT SELECT ON ledger_scope.period_closes TO ledger_app;
