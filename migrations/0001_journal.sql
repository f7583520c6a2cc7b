-- The journal: accounts, idempotency keys, postings, legs, state-dependent rejections.
-- Journal tables are insert-only: triggers refuse UPDATE, DELETE and TRUNCATE.

CREATE FUNCTION ledger_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'ledger: % on journal table % is not allowed: the journal is append-only', TG_OP, TG_TABLE_NAME
    USING ERRCODE = 'insufficient_privilege';
END $$;

-- One row per ledger: the last committed sequence and recorded time, written by the writer
-- in the same transaction as each batch (readers use it to know which cut-offs are final).
CREATE TABLE ledger_state (
  ledger_id        smallint PRIMARY KEY CHECK (ledger_id = 1),
  last_sequence    bigint NOT NULL CHECK (last_sequence >= 0),
  last_recorded_at timestamptz NOT NULL
);
INSERT INTO ledger_state VALUES (1, 0, '1970-01-01T00:00:00Z');

CREATE TABLE accounts (
  account_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  code           text NOT NULL UNIQUE CHECK (code ~ '^[a-z0-9:_.-]{1,128}$'),
  currency       text NOT NULL CHECK (currency ~ '^[A-Z0-9]{2,16}$'),
  scale          smallint NOT NULL CHECK (scale BETWEEN 0 AND 18),
  normal_balance text NOT NULL CHECK (normal_balance IN ('debit', 'credit')),
  allow_negative boolean NOT NULL,
  metadata       jsonb NOT NULL,
  created_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX accounts_code_pattern ON accounts (code text_pattern_ops);

-- Running totals per account, maintained by the writer (not a journal table: it is derived
-- from the legs and `ledger check` verifies it against them).
CREATE TABLE account_totals (
  account_id    bigint PRIMARY KEY REFERENCES accounts,
  debits        numeric NOT NULL CHECK (debits >= 0),
  credits       numeric NOT NULL CHECK (credits >= 0),
  version       bigint NOT NULL CHECK (version >= 0),
  last_sequence bigint NOT NULL CHECK (last_sequence >= 0)
);

-- The idempotency constraint: one decision per (caller, key), ever.
CREATE TABLE idempotency_keys (
  caller          text NOT NULL,
  idempotency_key text NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
  operation       text NOT NULL CHECK (operation IN ('post', 'void')),
  fingerprint     bytea NOT NULL CHECK (length(fingerprint) = 32),
  decided_at      timestamptz NOT NULL,
  CONSTRAINT idempotency_keys_unique UNIQUE (caller, idempotency_key)
);

CREATE TABLE postings (
  sequence         bigint PRIMARY KEY CHECK (sequence > 0),
  posting_id       uuid NOT NULL UNIQUE,
  caller           text NOT NULL,
  idempotency_key  text NOT NULL,
  effective_at     timestamptz NOT NULL,
  recorded_at      timestamptz NOT NULL UNIQUE,
  memo             text NOT NULL,
  metadata         jsonb NOT NULL,
  -- A posting can be voided once: the UNIQUE constraint enforces it.
  voids_posting_id uuid UNIQUE REFERENCES postings (posting_id),
  void_reason      text,
  CHECK ((voids_posting_id IS NULL) = (void_reason IS NULL)),
  UNIQUE (caller, idempotency_key),
  FOREIGN KEY (caller, idempotency_key) REFERENCES idempotency_keys (caller, idempotency_key)
);

-- One row per leg. Totals after the leg make "balance as of sequence S" one index lookup.
CREATE TABLE entries (
  sequence        bigint NOT NULL REFERENCES postings,
  leg_index       smallint NOT NULL CHECK (leg_index >= 0),
  account_id      bigint NOT NULL REFERENCES accounts,
  direction       "char" NOT NULL CHECK (direction IN ('D', 'C')),
  amount          numeric NOT NULL CHECK (amount > 0),
  account_version bigint NOT NULL CHECK (account_version > 0),
  debits_after    numeric NOT NULL,
  credits_after   numeric NOT NULL,
  recorded_at     timestamptz NOT NULL,
  effective_at    timestamptz NOT NULL,
  PRIMARY KEY (sequence, leg_index),
  UNIQUE (account_id, account_version)
);
CREATE INDEX entries_account_sequence ON entries (account_id, sequence);

-- A state-dependent rejection (insufficient funds, already voided, …) bound to its key, so a
-- replay gets the same answer.
CREATE TABLE rejections (
  caller          text NOT NULL,
  idempotency_key text NOT NULL,
  reason          text NOT NULL,
  message         text NOT NULL,
  PRIMARY KEY (caller, idempotency_key),
  FOREIGN KEY (caller, idempotency_key) REFERENCES idempotency_keys (caller, idempotency_key)
);

-- Events to publish, written in the posting's transaction (transactional outbox).
CREATE TABLE outbox (
  sequence   bigint PRIMARY KEY REFERENCES postings,
  posting_id uuid NOT NULL,
  created_at timestamptz NOT NULL
);

DO $$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['accounts', 'idempotency_keys', 'postings', 'entries', 'rejections'] LOOP
    -- Statement-level, so even a statement that matches no row is refused.
    EXECUTE format('CREATE TRIGGER %I BEFORE UPDATE OR DELETE OR TRUNCATE ON %I FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change()', t || '_append_only', t);
  END LOOP;
END $$;

-- Secret for page-token integrity (tokens carry running totals; a tampered one must be refused).
CREATE TABLE ledger_secret (
  ledger_id      smallint PRIMARY KEY CHECK (ledger_id = 1),
  page_token_key bytea NOT NULL
);
INSERT INTO ledger_secret
  VALUES (1, decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex'));

-- Effective-time cut-offs: legs whose effective time differs from their recorded time.
CREATE INDEX entries_future_dated ON entries (account_id, effective_at)
  INCLUDE (sequence, direction, amount) WHERE effective_at > recorded_at;
CREATE INDEX entries_back_dated ON entries (account_id, sequence)
  INCLUDE (effective_at, direction, amount) WHERE effective_at < recorded_at;
