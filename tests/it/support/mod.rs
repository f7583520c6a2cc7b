//! Test support: a real PostgreSQL per test process, a fresh migrated database per test, and
//! the real server booted on port 0.

#![allow(dead_code)]

pub mod books;
pub mod ha;
pub mod nats;
pub mod pg;
pub mod proxy;
pub mod writes;

use ledger_server::grpc::pb;
use ledger_server::grpc::pb::ledger_client::LedgerClient;
use ledger_server::server::{self, RunningServer, ServerOptions};
use tonic::transport::Channel;
use tonic_types::StatusExt;

pub use books::{
    account_in, books, create_ledger, ledger_codes, seq_scans, ten_thousand_ledgers_by_sql,
};

/// A server on its own fresh database, and a client to it.
pub struct TestLedger {
    pub server: Option<RunningServer>,
    /// The owner's URL (the server migrates with it; `db()` attacks with it).
    pub database_url: String,
    pub client: LedgerClient<Channel>,
    /// The settings of the server's pool: its login and role.
    pub service_config: ledger_server::storage::ConnConfig,
}

impl TestLedger {
    /// Boots a server on a fresh database.
    pub async fn start() -> TestLedger {
        let url = pg::shared_cluster().fresh_database().await;
        Self::on_database(url).await
    }

    /// Boots a server on an existing database.
    pub async fn on_database(url: String) -> TestLedger {
        Self::on_database_with(url, app_role_ops()).await
    }

    /// Boots a server on a fresh database with these access and operations options.
    pub async fn start_with(ops: server::OpsOptions) -> TestLedger {
        let url = pg::shared_cluster().fresh_database().await;
        Self::on_database_with(url, ops).await
    }

    /// Boots a server on a fresh database with its knobs changed by `tune`.
    pub async fn start_tuned(tune: impl FnOnce(&mut ledger_server::tuning::Tuning)) -> TestLedger {
        let url = pg::shared_cluster().fresh_database().await;
        Self::on_database_tuned(url, app_role_ops(), tune).await
    }

    /// Boots a server on an existing database with these options. The client is plain
    /// (no TLS, no token); TLS tests make their own.
    pub async fn on_database_with(url: String, ops: server::OpsOptions) -> TestLedger {
        Self::on_database_tuned(url, ops, |_| {}).await
    }

    /// [`TestLedger::on_database_with`], with the server's knobs changed by `tune`.
    pub async fn on_database_tuned(
        url: String,
        ops: server::OpsOptions,
        tune: impl FnOnce(&mut ledger_server::tuning::Tuning),
    ) -> TestLedger {
        let tls = ops.tls.is_some();
        let mut tuning = ledger_server::tuning::Tuning {
            pool: ledger_server::storage::PoolTuning {
                size: 8,
                ..Default::default()
            },
            ..Default::default()
        };
        tune(&mut tuning);
        let options = ServerOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            database_url: url.clone(),
            tuning,
            ops,
        };
        let service_config = server::pool_config(&options).expect("the pool's settings");
        let server = server::start(options).await.expect("server starts");
        let client = if tls {
            LedgerClient::new(Channel::from_static("http://unused.invalid").connect_lazy())
        } else {
            connect(server.local_addr).await
        };
        TestLedger {
            server: Some(server),
            database_url: url,
            client,
            service_config,
        }
    }

    /// A new client connection (for concurrent callers).
    pub async fn new_client(&self) -> LedgerClient<Channel> {
        connect(self.server.as_ref().unwrap().local_addr).await
    }

    /// A direct database connection (to inspect or attack the tables).
    pub async fn db(&self) -> tokio_postgres::Client {
        ledger_server::storage::connect(&self.database_url)
            .await
            .expect("db connects")
    }

    /// A database session exactly as the server's pool opens them (its login, its role).
    pub async fn service_db(&self) -> tokio_postgres::Client {
        self.service_config
            .connect()
            .await
            .expect("the service's login connects")
    }

    /// Rows in a table.
    pub async fn count(&self, table: &str) -> i64 {
        self.db()
            .await
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await
            .unwrap()
            .get(0)
    }

    /// Creates an account (panics on error).
    pub async fn account(
        &mut self,
        code: &str,
        currency: &str,
        scale: u32,
        normal: pb::NormalBalance,
        allow_negative: bool,
    ) {
        self.client
            .create_account(pb::CreateAccountRequest {
                ledger: String::new(),
                code: code.into(),
                currency: currency.into(),
                scale,
                normal_balance: normal as i32,
                allow_negative,
                metadata: Default::default(),
            })
            .await
            .expect("account created");
    }

    /// A funding source that may go negative, and `n` EUR asset accounts `acct:0..n`.
    pub async fn standard_accounts(&mut self, n: usize) {
        self.account("equity:world", "EUR", 2, pb::NormalBalance::Credit, true)
            .await;
        for i in 0..n {
            self.account(
                &format!("acct:{i}"),
                "EUR",
                2,
                pb::NormalBalance::Debit,
                false,
            )
            .await;
        }
    }

    pub async fn post(&mut self, req: pb::PostRequest) -> Result<pb::PostResponse, tonic::Status> {
        self.client.post(req).await.map(|r| r.into_inner())
    }

    pub async fn balance(&mut self, account: &str, as_of: Option<pb::AsOf>) -> pb::Balance {
        self.client
            .get_balance(pb::GetBalanceRequest {
                ledger: String::new(),
                account: account.into(),
                as_of,
            })
            .await
            .expect("balance")
            .into_inner()
    }
}

/// The options every test server runs with unless it says otherwise: the embedded default's
/// database settings, the service's own login acting as the application role (migrations run
/// as the owner of the URL), so every test also checks that their privileges suffice.
pub fn app_role_ops() -> server::OpsOptions {
    server::OpsOptions {
        db_login: Some(ledger_server::storage::roles::SERVICE_LOGIN.to_owned()),
        db_role: Some(ledger_server::storage::APP_ROLE.to_owned()),
        ..Default::default()
    }
}

/// Connects a client.
pub async fn connect(addr: std::net::SocketAddr) -> LedgerClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("client connects");
    LedgerClient::new(channel)
}

/// A leg.
pub fn leg(account: &str, direction: pb::Direction, amount: &str) -> pb::Leg {
    pb::Leg {
        account: account.into(),
        direction: direction as i32,
        amount: amount.into(),
    }
}

/// A two-leg transfer: debit `to`, credit `from`.
pub fn transfer(key: &str, from: &str, to: &str, amount: &str) -> pb::PostRequest {
    pb::PostRequest {
        idempotency_key: key.into(),
        legs: vec![
            leg(to, pb::Direction::Debit, amount),
            leg(from, pb::Direction::Credit, amount),
        ],
        effective_at: None,
        memo: String::new(),
        metadata: Default::default(),
        ..Default::default()
    }
}

/// The `ErrorInfo` reason of a status.
pub fn reason(s: &tonic::Status) -> String {
    let info = s
        .get_details_error_info()
        .unwrap_or_else(|| panic!("status without ErrorInfo: {s:?}"));
    assert_eq!(info.domain, "ledger");
    info.reason
}

/// Asserts a status has this code and reason.
#[track_caller]
pub fn assert_error(s: &tonic::Status, code: tonic::Code, want: &str) {
    assert_eq!(s.code(), code, "{s:?}");
    assert_eq!(reason(s), want, "{s:?}");
    assert!(!s.message().is_empty());
}

/// Creates `equity:world` (credit-normal, may go negative) and `acct:0` (debit-normal, may
/// not), EUR at scale 2: the two accounts most tests post between.
pub async fn world_and_one_account(c: &mut LedgerClient<Channel>) {
    books(c, "default").await;
}

/// A free TCP port on loopback (bound then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A client to a server process on `port`, once it accepts connections (at most `wait`).
pub async fn client_when_up(port: u16, wait: std::time::Duration) -> LedgerClient<Channel> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        if let Ok(ch) = Channel::from_shared(format!("http://127.0.0.1:{port}"))
            .unwrap()
            .connect()
            .await
        {
            return LedgerClient::new(ch);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "server on port {port} did not come up"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
