-- Account events: one `account_outbox` row per account version UpdateAccount records, written
-- in the writer's batch transaction with the version, and published to the stream LEDGER on
-- `ledger.accounts.<ledger code>` by the outbox publisher, in event_id order per ledger.
--
-- Order. event_id is drawn from an identity (CACHE 1: every session takes the next value of
-- one sequence) when the row is inserted, and a ledger's rows are inserted only by its
-- writer's batch, which holds that ledger's advisory lock (LEDGER_LOCK_CLASS, id) until it
-- commits: the next batch of that ledger draws its ids after this one committed. So within a
-- ledger event_id order is commit order (the order the versions were recorded), and once
-- the publisher sees a ledger's row, every row of that ledger with a lower event_id is
-- committed too. Across ledgers the ids interleave; a rolled-back batch leaves a gap. Nothing
-- reads event_id as gapless.
--
-- Progress. `account_outbox_progress.published_event_id` is the last event of its ledger the
-- broker acknowledged: its rows at or below it are delivered, those above pending. A ledger
-- without a row has published none (the publisher adds the row with its first progress). It
-- only moves forward; outbox rows are never changed and only delivered ones are deleted
-- (retention), as for `outbox` (0002, 0013).

CREATE TABLE account_outbox (
  event_id      bigint GENERATED ALWAYS AS IDENTITY (CACHE 1),
  ledger_id     integer NOT NULL,
  account_id    bigint NOT NULL,
  terms_version bigint NOT NULL CHECK (terms_version >= 2),
  created_at    timestamptz NOT NULL,
  PRIMARY KEY (ledger_id, event_id),
  UNIQUE (account_id, terms_version),
  FOREIGN KEY (account_id, ledger_id) REFERENCES accounts (account_id, ledger_id),
  FOREIGN KEY (account_id, terms_version) REFERENCES account_terms (account_id, terms_version)
);

CREATE TABLE account_outbox_progress (
  ledger_id          integer PRIMARY KEY REFERENCES ledgers,
  published_event_id bigint NOT NULL CHECK (published_event_id >= 0),
  updated_at         timestamptz NOT NULL
);

CREATE FUNCTION account_outbox_progress_forward_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' AND NEW.ledger_id = OLD.ledger_id
     AND NEW.published_event_id >= OLD.published_event_id THEN
    RETURN NEW;
  END IF;
  RAISE EXCEPTION 'ledger: % of account_outbox_progress is not allowed: published_event_id only moves forward', TG_OP
    USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER account_outbox_progress_forward_only BEFORE UPDATE OR DELETE ON account_outbox_progress
  FOR EACH ROW EXECUTE FUNCTION account_outbox_progress_forward_only();
CREATE TRIGGER account_outbox_progress_no_truncate BEFORE TRUNCATE ON account_outbox_progress
  FOR EACH STATEMENT EXECUTE FUNCTION account_outbox_progress_forward_only();

-- Account outbox rows are never changed; only delivered ones may be deleted (retention).
CREATE FUNCTION account_outbox_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'ledger: % on account_outbox is not allowed: outbox rows are immutable and only delivered ones are deleted', TG_OP
    USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER account_outbox_immutable BEFORE UPDATE OR TRUNCATE ON account_outbox
  FOR EACH STATEMENT EXECUTE FUNCTION account_outbox_refuse_change();

CREATE FUNCTION account_outbox_delete_delivered_only() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  first_pending bigint;
  published bigint;
BEGIN
  SELECT d.event_id, coalesce(p.published_event_id, 0) INTO first_pending, published
    FROM deleted d LEFT JOIN account_outbox_progress p USING (ledger_id)
    WHERE d.event_id > coalesce(p.published_event_id, 0)
    ORDER BY d.event_id LIMIT 1;
  IF first_pending IS NOT NULL THEN
    RAISE EXCEPTION 'ledger: account_outbox row % is not delivered yet (its ledger is published up to %): only delivered events may be deleted', first_pending, published
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER account_outbox_delete_delivered_only AFTER DELETE ON account_outbox
  REFERENCING OLD TABLE AS deleted
  FOR EACH STATEMENT EXECUTE FUNCTION account_outbox_delete_delivered_only();

-- The writer appends rows (the default privileges of 0003 give SELECT and INSERT, and the
-- identity's sequence); the publisher records progress and deletes delivered rows.
GRANT SELECT, INSERT ON account_outbox, account_outbox_progress TO ledger_app;
GRANT USAGE, SELECT ON SEQUENCE account_outbox_event_id_seq TO ledger_app;
GRANT UPDATE ON account_outbox_progress TO ledger_app;
GRANT DELETE ON account_outbox TO ledger_app;
REVOKE UPDATE, TRUNCATE ON account_outbox FROM ledger_app;
REVOKE DELETE, TRUNCATE ON account_outbox_progress FROM ledger_app;

-- `ledger check --ledger L` sees only ledger L's rows of these too (0013).
CREATE VIEW ledger_scope.account_outbox AS
  SELECT * FROM public.account_outbox WHERE ledger_scope.scope() IS NULL OR ledger_id = ledger_scope.scope();
CREATE VIEW ledger_scope.account_outbox_progress AS
  SELECT * FROM public.account_outbox_progress WHERE ledger_scope.scope() IS NULL OR ledger_id = ledger_scope.scope();
GRANT SELECT ON ledger_scope.account_outbox, ledger_scope.account_outbox_progress TO ledger_app;
