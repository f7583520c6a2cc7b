-- The application role. Migrations run as the owner (the login user of --database-url);
-- the service's pool acts as `ledger_app` (--db-role), which may read everything and append
-- to the journal, but has no UPDATE, DELETE or TRUNCATE on journal tables (on top of the
-- append-only triggers of 0001).
--
-- NOLOGIN: the service logs in as the owner and takes the role with SET ROLE (a startup
-- option). A deployment that wants a separate login grants LOGIN and a password itself.
--
-- Creating a role needs CREATEROLE (or a superuser). An owner without it gets an error saying
-- so; an administrator then runs `CREATE ROLE ledger_app NOLOGIN` once and migrates again.
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ledger_app') THEN
    CREATE ROLE ledger_app NOLOGIN;
  END IF;
EXCEPTION
  -- Two databases of one cluster migrating at once: the other one created it.
  WHEN duplicate_object OR unique_violation THEN NULL;
  WHEN insufficient_privilege THEN
    RAISE EXCEPTION 'ledger: the application role ledger_app does not exist and % may not create it',
      current_user
      USING HINT = 'As a user with CREATEROLE run: CREATE ROLE ledger_app NOLOGIN; then migrate again.';
END $$;

-- Roles are cluster-wide, grants are per database.
GRANT USAGE ON SCHEMA public TO ledger_app;
GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA public TO ledger_app;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO ledger_app;

-- Derived state the writer maintains (not journal tables).
GRANT UPDATE ON account_totals, ledger_state TO ledger_app;
-- The outbox: published rows are removed by the publisher after retention.
GRANT UPDATE, DELETE ON outbox TO ledger_app;
-- The publisher's own tables, where they exist (added by the outbox migration).
DO $$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['outbox_progress', 'outbox_parked'] LOOP
    IF to_regclass(t) IS NOT NULL THEN
      EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I TO ledger_app', t);
    END IF;
  END LOOP;
END $$;

-- Nothing beyond reading and appending, even should an earlier grant have given more.
REVOKE UPDATE, DELETE, TRUNCATE ON accounts, idempotency_keys, postings, entries, rejections
  FROM ledger_app;
REVOKE ALL ON schema_migrations FROM ledger_app;
GRANT SELECT ON schema_migrations TO ledger_app;

-- Tables of later migrations: readable and appendable by default; anything more is granted
-- by the migration that adds them.
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT ON TABLES TO ledger_app;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO ledger_app;
