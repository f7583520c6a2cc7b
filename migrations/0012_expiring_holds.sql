-- The open holds that have an expiry, by account and expiry time: the index the writer reads
-- a batch's due holds from. A hold stops counting against the funds rule at its expiry time,
-- before the ledger records its release (docs/decisions/2026-12-02-expired-holds-hold-nothing.md),
-- so each batch needs the open holds of its accounts whose expiry time has passed or will
-- pass while it records. The journal cannot say which holds are open without reading every
-- hold an account ever had (a hold is closed by another posting, never by a change of its
-- own row); this table can, on its primary key: one row per leg of an open hold with an
-- expiry, inserted with the hold and deleted, in the same transaction, with the posting that
-- closes it (capture, release or the expiry's release). It is derived state like
-- account_totals (not a journal table), written only by the writer's batch, and `ledger
-- check` verifies it against the journal.
CREATE TABLE expiring_holds (
  account_id      bigint NOT NULL,
  expires_at      timestamptz NOT NULL,
  hold_posting_id uuid NOT NULL,
  leg_index       smallint NOT NULL CHECK (leg_index >= 0),
  direction       "char" NOT NULL CHECK (direction IN ('D', 'C')),
  amount          numeric NOT NULL CHECK (amount > 0),
  PRIMARY KEY (account_id, expires_at, hold_posting_id, leg_index)
);

INSERT INTO expiring_holds (account_id, expires_at, hold_posting_id, leg_index, direction, amount)
SELECT l.account_id, h.hold_expires_at, h.posting_id, l.leg_index, l.direction, l.amount
FROM postings h JOIN hold_legs l ON l.sequence = h.sequence
WHERE h.hold AND h.hold_expires_at IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM postings c WHERE c.closes_hold_posting_id = h.posting_id);

GRANT SELECT, INSERT, DELETE ON expiring_holds TO ledger_app;
REVOKE UPDATE, TRUNCATE ON expiring_holds FROM ledger_app;
