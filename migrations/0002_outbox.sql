-- The outbox publisher's progress, and the rules that keep the outbox honest.
--
-- `published_sequence` is the last sequence whose event the broker acknowledged (JetStream
-- ack). Events are published in sequence order, so every outbox row with a sequence at or
-- below it is delivered and every row above it is pending. It only moves forward.

CREATE TABLE outbox_progress (
  ledger_id          smallint PRIMARY KEY CHECK (ledger_id = 1),
  published_sequence bigint NOT NULL CHECK (published_sequence >= 0),
  updated_at         timestamptz NOT NULL
);
INSERT INTO outbox_progress VALUES (1, 0, clock_timestamp());

CREATE FUNCTION outbox_progress_forward_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' AND NEW.ledger_id = OLD.ledger_id
     AND NEW.published_sequence >= OLD.published_sequence THEN
    RETURN NEW;
  END IF;
  RAISE EXCEPTION 'ledger: % of outbox_progress is not allowed: published_sequence only moves forward', TG_OP
    USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER outbox_progress_forward_only BEFORE UPDATE OR DELETE ON outbox_progress
  FOR EACH ROW EXECUTE FUNCTION outbox_progress_forward_only();
CREATE TRIGGER outbox_progress_no_truncate BEFORE TRUNCATE ON outbox_progress
  FOR EACH STATEMENT EXECUTE FUNCTION outbox_progress_forward_only();

-- Outbox rows are never changed; only delivered ones may be deleted (retention).
CREATE FUNCTION outbox_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'ledger: % on outbox is not allowed: outbox rows are immutable and only delivered ones are deleted', TG_OP
    USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER outbox_immutable BEFORE UPDATE OR TRUNCATE ON outbox
  FOR EACH STATEMENT EXECUTE FUNCTION outbox_refuse_change();

CREATE FUNCTION outbox_delete_delivered_only() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  published bigint;
  first_pending bigint;
BEGIN
  SELECT published_sequence INTO published FROM outbox_progress WHERE ledger_id = 1;
  SELECT min(sequence) INTO first_pending FROM deleted WHERE sequence > published;
  IF first_pending IS NOT NULL THEN
    RAISE EXCEPTION 'ledger: outbox row % is not delivered yet (published up to %): only delivered events may be deleted', first_pending, published
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER outbox_delete_delivered_only AFTER DELETE ON outbox
  REFERENCING OLD TABLE AS deleted
  FOR EACH STATEMENT EXECUTE FUNCTION outbox_delete_delivered_only();
