-- The last sequence whose event the outbox publisher has delivered (0 until the outbox
-- progress table exists). `ledger check` counts a posting's event as present when its outbox
-- row is pending or its sequence is at or below this.
CREATE FUNCTION ledger_published_sequence() RETURNS bigint LANGUAGE plpgsql STABLE AS $$
DECLARE s bigint;
BEGIN
  IF to_regclass('outbox_progress') IS NULL THEN
    RETURN 0;
  END IF;
  EXECUTE 'SELECT coalesce(max(published_sequence), 0) FROM outbox_progress' INTO s;
  RETURN s;
END $$;
