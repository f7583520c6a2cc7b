//! The service's database login cannot undo what the database enforces.

use crate::support::*;
use std::process::Stdio;
use std::time::{Duration, Instant};

#[tokio::test]
async fn the_service_cannot_become_the_owner_nor_disable_or_drop_the_journals_triggers() {
    let t = TestLedger::start().await;
    let who = t
        .service_db()
        .await
        .query_one("SELECT session_user::text, current_user::text", &[])
        .await
        .unwrap();
    let (login, role): (String, String) = (who.get(0), who.get(1));
    assert_eq!(
        (login.as_str(), role.as_str()),
        (
            ledger_server::storage::roles::SERVICE_LOGIN,
            ledger_server::storage::APP_ROLE
        ),
        "the harness's server logs in as the embedded default does"
    );
    let attacks = [
        "SET ROLE postgres",
        "SET SESSION AUTHORIZATION postgres",
        "ALTER TABLE postings DISABLE TRIGGER postings_append_only",
        "ALTER TABLE entries DISABLE TRIGGER ALL",
        "DROP TRIGGER postings_append_only ON postings",
        "SET session_replication_role = replica",
        "RESET ROLE; ALTER TABLE postings DISABLE TRIGGER postings_append_only",
        "RESET ROLE; DROP TRIGGER entries_append_only ON entries",
        "RESET ROLE; DROP TABLE postings CASCADE",
        "RESET ROLE; ALTER TABLE postings OWNER TO ledger_svc",
        "CREATE OR REPLACE FUNCTION ledger_refuse_change() RETURNS trigger LANGUAGE plpgsql \
         AS $$ BEGIN RETURN NULL; END $$",
        "RESET ROLE; ALTER ROLE ledger_svc SUPERUSER",
        "RESET ROLE; GRANT postgres TO ledger_svc",
        "RESET ROLE; CREATE ROLE intruder SUPERUSER",
    ];
    for sql in attacks {
        // A session of its own for each: a refused statement leaves the next one unaffected.
        let db = t.service_db().await;
        let err = db.batch_execute(sql).await.err();
        let refusal = err.as_ref().and_then(|e| e.as_db_error());
        assert!(refusal.is_some(), "`{sql}` was allowed");
        assert_eq!(refusal.unwrap().code().code(), "42501", "{sql}: {:?}", err);
    }
    let owner = t.db().await;
    let enabled: i64 = owner
        .query_one(
            "SELECT count(*) FROM pg_trigger WHERE tgname LIKE '%\\_append\\_only' AND tgenabled = 'O'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        enabled, 16,
        "every append-only trigger (the journal's six tables, ledgers, ledger_placements, account_terms, posting_hashes, the three of period closes and the three of moves) is still there and enabled"
    );
}

/// The URL of the same database for the service login instead of the owner.
fn service_url(owner_url: &str) -> String {
    let login = format!("user={}", ledger_server::storage::roles::SERVICE_LOGIN);
    let url = owner_url.replace("user=postgres", &login);
    assert_ne!(url, owner_url, "the harness's URLs name user=postgres");
    url
}

/// A `ledger serve --database-url URL` process with its log in a file; killed if the test
/// ends without stopping it.
struct ServeProcess {
    child: tokio::process::Child,
    port: u16,
    log: std::path::PathBuf,
}

impl ServeProcess {
    fn start(url: &str) -> ServeProcess {
        let port = free_port();
        let log = std::env::temp_dir().join(format!("ledger-roles-{}.log", uuid::Uuid::now_v7()));
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledger"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--database-url", url])
            .env_remove("LEDGER_DB_ROLE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .expect("ledger serve starts");
        ServeProcess { child, port, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A client once the server listens; panics with its log if it exits first.
    async fn client(
        &mut self,
    ) -> ledger_server::grpc::pb::ledger_client::LedgerClient<tonic::transport::Channel> {
        let began = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("ledger serve exited ({status}):\n{}", self.log());
            }
            let url = format!("http://127.0.0.1:{}", self.port);
            if let Ok(ch) = tonic::transport::Channel::from_shared(url)
                .unwrap()
                .connect()
                .await
            {
                return ledger_server::grpc::pb::ledger_client::LedgerClient::new(ch);
            }
            assert!(
                began.elapsed() < Duration::from_secs(60),
                "not up:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (at most a minute) for the process to exit by itself.
    async fn exit_status(&mut self) -> std::process::ExitStatus {
        tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("ledger serve did not exit:\n{}", self.log()))
            .unwrap()
    }

    async fn stop(mut self) -> String {
        let pid = self.child.id().expect("running") as i32;
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let status = self.exit_status().await;
        assert!(status.success(), "{status}:\n{}", self.log());
        let log = self.log();
        let _ = std::fs::remove_file(&self.log);
        log
    }
}

#[tokio::test]
async fn serve_logged_in_as_the_service_login_works_when_migrations_are_current() {
    let owner = pg::shared_cluster().fresh_database().await;
    let mut server = ServeProcess::start(&service_url(&owner));
    let mut c = server.client().await;
    world_and_one_account(&mut c).await;
    c.post(transfer("k", "equity:world", "acct:0", "1.00"))
        .await
        .expect("a Post commits");
    let log = server.stop().await;
    assert!(!log.contains("WARN"), "nothing to warn about: {log}");
}

#[tokio::test]
async fn serve_logged_in_as_the_service_login_refuses_pending_migrations_until_the_owner_migrates()
{
    let cluster = pg::shared_cluster();
    let name = format!("t_{}", uuid::Uuid::now_v7().simple());
    let admin = ledger_server::storage::connect(&cluster.connection_string("postgres"))
        .await
        .unwrap();
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let owner = cluster.connection_string(&name);

    let mut refused = ServeProcess::start(&service_url(&owner));
    let status = refused.exit_status().await;
    let log = refused.log();
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("owner") && log.contains("ledger migrate --database-url"),
        "the refusal says who may migrate and how: {log}"
    );

    let migrate = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledger"))
        .args(["migrate", "--database-url", &owner])
        .output()
        .await
        .unwrap();
    assert!(migrate.status.success(), "{migrate:?}");
    let mut server = ServeProcess::start(&service_url(&owner));
    let mut c = server.client().await;
    world_and_one_account(&mut c).await;
    server.stop().await;
}

#[tokio::test]
async fn serve_logged_in_as_a_superuser_warns_that_its_sessions_could_disable_the_triggers() {
    let owner = pg::shared_cluster().fresh_database().await;
    let mut server = ServeProcess::start(&owner);
    server.client().await;
    let log = server.stop().await;
    let warning = log
        .lines()
        .find(|l| l.contains("WARN") && l.contains("superuser"))
        .unwrap_or_else(|| panic!("no warning about the superuser login: {log}"));
    assert!(
        warning.contains("postgres") && warning.contains("trigger"),
        "{warning}"
    );
}

#[tokio::test]
async fn the_readmes_steps_for_an_existing_postgresql_give_a_service_that_cannot_disable_the_triggers(
) {
    // README "Database roles", as an administrator (roles are cluster-wide: tolerate a rerun).
    let cluster = pg::shared_cluster();
    let admin = ledger_server::storage::connect(&cluster.connection_string("postgres"))
        .await
        .unwrap();
    let db = format!("t_{}", uuid::Uuid::now_v7().simple());
    for sql in [
        "CREATE ROLE ledger_owner LOGIN".to_owned(),
        "CREATE ROLE ledger_svc_ext LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION \
         NOBYPASSRLS IN ROLE ledger_app"
            .to_owned(),
        format!("CREATE DATABASE {db} OWNER ledger_owner"),
    ] {
        if let Err(e) = admin.batch_execute(&sql).await {
            assert_eq!(e.code().map(|c| c.code()), Some("42710"), "{sql}: {e}");
        }
    }
    let owner = cluster
        .connection_string(&db)
        .replace("user=postgres", "user=ledger_owner");
    let service = owner.replace("user=ledger_owner", "user=ledger_svc_ext");

    let migrate = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledger"))
        .args(["migrate", "--database-url", &owner])
        .output()
        .await
        .unwrap();
    assert!(migrate.status.success(), "the owner migrates: {migrate:?}");
    let mut server = ServeProcess::start(&service);
    let mut c = server.client().await;
    world_and_one_account(&mut c).await;
    c.post(transfer("k", "equity:world", "acct:0", "1.00"))
        .await
        .expect("a Post commits");
    let log = server.stop().await;
    assert!(!log.contains("WARN"), "nothing to warn about: {log}");

    for sql in [
        "SET ROLE ledger_owner",
        "ALTER TABLE postings DISABLE TRIGGER postings_append_only",
        "DROP TRIGGER postings_append_only ON postings",
        "DROP TABLE postings CASCADE",
    ] {
        let session = ledger_server::storage::connect(&service).await.unwrap();
        let err = session.batch_execute(sql).await.expect_err(sql);
        assert_eq!(err.code().map(|c| c.code()), Some("42501"), "{sql}: {err}");
    }
}

/// A SIGTERM that arrives while the server is still starting (its port already open, the
/// rest of its start-up not yet done) stops it as gracefully as one that arrives later: the
/// handler is installed before anything starts, so the signal is never the process's death.
#[tokio::test]
async fn a_sigterm_as_soon_as_the_port_opens_stops_the_server_gracefully_every_time() {
    let owner = pg::shared_cluster().fresh_database().await;
    for round in 0..12 {
        let mut server = ServeProcess::start(&owner);
        let began = Instant::now();
        while tokio::net::TcpStream::connect(("127.0.0.1", server.port))
            .await
            .is_err()
        {
            assert!(
                began.elapsed() < Duration::from_secs(60),
                "not up:\n{}",
                server.log()
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let pid = server.child.id().expect("running") as i32;
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let status = server.exit_status().await;
        assert!(
            status.success(),
            "round {round}: {status}:\n{}",
            server.log()
        );
    }
}
