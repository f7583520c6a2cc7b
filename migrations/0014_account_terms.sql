-- Accounts that change: each account's terms (status, floor, ceiling, debit limits) by
-- versions, insert-only. Version 1 is the account's creation; UpdateAccount records the
-- next, decided by the writer in the ledger's sequence order with its postings:
-- after_sequence is the ledger's last posting decided before it (a version takes no
-- sequence of its own), and it applies to every posting after that. account_totals names
-- the version in force, so the writer reads it with the totals, under the ledger's lock.

CREATE TABLE account_terms (
  account_id      bigint NOT NULL REFERENCES accounts,
  terms_version   bigint NOT NULL CHECK (terms_version >= 1),
  status          text NOT NULL CHECK (status IN ('open', 'frozen', 'closed')),
  balance_floor   numeric,
  balance_ceiling numeric,
  -- [{"amount": minor units as a string, "window_seconds": n}, ...]
  debit_limits    jsonb NOT NULL CHECK (jsonb_typeof(debit_limits) = 'array'),
  after_sequence  bigint NOT NULL CHECK (after_sequence >= 0),
  recorded_at     timestamptz NOT NULL,
  caller          text NOT NULL,
  idempotency_key text NOT NULL,
  reason          text NOT NULL,
  changed         text[] NOT NULL,
  -- The key the version was decided under (none for version 1).
  key_id          bigint UNIQUE,
  PRIMARY KEY (account_id, terms_version),
  CHECK ((terms_version = 1) = (key_id IS NULL))
);
CREATE TRIGGER account_terms_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON account_terms
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
GRANT SELECT, INSERT ON account_terms TO ledger_app;
REVOKE UPDATE, DELETE, TRUNCATE ON account_terms FROM ledger_app;

INSERT INTO account_terms (account_id, terms_version, status, balance_floor, balance_ceiling,
                           debit_limits, after_sequence, recorded_at, caller, idempotency_key,
                           reason, changed)
  SELECT account_id, 1, 'open', CASE WHEN allow_negative THEN NULL ELSE 0 END, NULL, '[]',
         ledger_id::bigint << 40, created_at, '', '', '', '{}'
  FROM accounts;

ALTER TABLE account_totals ADD COLUMN terms_version bigint NOT NULL DEFAULT 1 CHECK (terms_version >= 1);

ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_operation_check;
ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_operation_check
  CHECK (operation IN ('post', 'void', 'capture', 'expire', 'update'));

CREATE VIEW ledger_scope.account_terms AS
  SELECT v.* FROM public.account_terms v JOIN public.accounts a USING (account_id)
  WHERE ledger_scope.scope() IS NULL OR a.ledger_id = ledger_scope.scope();
GRANT SELECT ON ledger_scope.account_terms TO ledger_app;
