//! The `ledger` command line: serve, migrate, and the operator and client commands.

use crate::embedded_pg::{EmbeddedPg, PgOptions};
use crate::server::{self, ServerOptions};
use crate::storage::DEFAULT_POOL_SIZE;
use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "ledger",
    version,
    about = "Append-only double-entry ledger service"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Debug, Clone)]
struct DbArgs {
    /// PostgreSQL URL. Without it, `serve` runs its own PostgreSQL in --data-dir.
    #[arg(long, env = "DATABASE_URL")]
    database_url: Option<String>,
    /// Data directory of the embedded PostgreSQL (used without --database-url).
    #[arg(long, env = "LEDGER_DATA_DIR", default_value = "./ledger-data")]
    data_dir: PathBuf,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the gRPC server.
    Serve {
        /// Address to listen on.
        #[arg(long, env = "LEDGER_LISTEN", default_value = "127.0.0.1:50051")]
        listen: SocketAddr,
        #[command(flatten)]
        db: DbArgs,
        /// Database connections in the pool (limit).
        #[arg(long, env = "LEDGER_POOL_SIZE", default_value_t = DEFAULT_POOL_SIZE)]
        pool_size: usize,
        #[command(flatten)]
        ops: OpsArgs,
    },
    /// Bearer tokens for `--auth-tokens`.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Apply migrations and exit.
    Migrate {
        #[command(flatten)]
        db: DbArgs,
    },
}

/// Access and operations options of `serve`.
#[derive(clap::Args, Debug, Clone)]
struct OpsArgs {
    /// Auth file (`CALLER ROLE sha256:<hex>` / `CALLER ROLE mtls` lines): turns authentication on.
    #[arg(long, env = "LEDGER_AUTH_TOKENS")]
    auth_tokens: Option<PathBuf>,
    /// Server certificate chain (PEM): turns TLS on (with --tls-key).
    #[arg(long, env = "LEDGER_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// Server private key (PEM).
    #[arg(long, env = "LEDGER_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// CA (PEM) that signs client certificates: turns mutual TLS on (needs --tls-cert).
    #[arg(long, env = "LEDGER_TLS_CLIENT_CA", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// Address of the Prometheus endpoint (`/metrics`); off without it.
    #[arg(long, env = "LEDGER_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// Database role the service acts as (`SET ROLE`); migrations run as the login user.
    /// Default: `ledger_app` with the embedded PostgreSQL, none with --database-url; "" for none.
    #[arg(long, env = "LEDGER_DB_ROLE")]
    db_role: Option<String>,
}

#[derive(Subcommand, Debug)]
enum TokenCommand {
    /// Prints a new random token (line 1) and its auth-file line (line 2, only a hash).
    New {
        /// The caller's name (recorded on its postings, scopes its idempotency keys).
        caller: String,
        /// `writer` (every call) or `reader` (Get*/List* only).
        role: String,
    },
}

impl OpsArgs {
    fn load(&self, embedded: bool) -> Result<server::OpsOptions, BoxError> {
        let auth = self
            .auth_tokens
            .as_deref()
            .map(crate::access::auth::AuthFile::load)
            .transpose()?;
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(server::TlsPem::load(
                cert,
                key,
                self.tls_client_ca.as_deref(),
            )?),
            _ => None,
        };
        let db_role = match self.db_role.as_deref() {
            Some("") => None,
            Some(r) => Some(r.to_owned()),
            None if embedded => Some(crate::storage::APP_ROLE.to_owned()),
            None => None,
        };
        Ok(server::OpsOptions {
            auth,
            tls,
            metrics_listen: self.metrics_listen,
            db_role,
        })
    }
}

/// Runs the command line; the exit code says whether it succeeded.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = rt.block_on(run(cli));
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ledger: {e}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("LEDGER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if std::env::var("LEDGER_LOG_FORMAT").as_deref() == Ok("json") {
        builder.json().init();
    } else {
        builder.init();
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The database to use: the given URL, or the embedded PostgreSQL started now (stopped when
/// the returned guard drops).
async fn database(db: &DbArgs) -> Result<(String, Option<EmbeddedPg>), BoxError> {
    match &db.database_url {
        Some(url) => Ok((url.clone(), None)),
        None => {
            let opts = PgOptions {
                data_dir: db.data_dir.clone(),
                fast_unsafe: false,
                port: 5432,
            };
            let pg = tokio::task::spawn_blocking(move || EmbeddedPg::start(opts)).await??;
            let url = pg.connection_string("ledger");
            tracing::info!(data_dir = %db.data_dir.display(), "using the embedded PostgreSQL");
            Ok((url, Some(pg)))
        }
    }
}

async fn run(cli: Cli) -> Result<ExitCode, BoxError> {
    match cli.command {
        Command::Serve {
            listen,
            db,
            pool_size,
            ops,
        } => {
            let ops = ops.load(db.database_url.is_none())?;
            let (url, pg) = database(&db).await?;
            let result = serve(listen, url, pool_size, ops).await;
            if let Some(mut pg) = pg {
                tokio::task::spawn_blocking(move || pg.stop()).await??;
            }
            result?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Token {
            command: TokenCommand::New { caller, role },
        } => {
            crate::access::auth::validate_caller(&caller)?;
            let role = crate::access::auth::Role::parse(&role)
                .ok_or_else(|| format!("role {role:?} is not `writer` or `reader`"))?;
            let token = crate::access::auth::new_token();
            println!("{token}");
            println!("{}", crate::access::auth::auth_line(&caller, role, &token));
            Ok(ExitCode::SUCCESS)
        }
        Command::Migrate { db } => {
            let (url, pg) = database(&db).await?;
            let applied = crate::storage::migrate(&url).await;
            if let Some(mut pg) = pg {
                tokio::task::spawn_blocking(move || pg.stop()).await??;
            }
            let applied = applied?;
            println!(
                "migrations applied: {}",
                if applied.is_empty() {
                    "none (up to date)".to_string()
                } else {
                    applied.join(", ")
                }
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn serve(
    listen: SocketAddr,
    database_url: String,
    pool_size: usize,
    ops: server::OpsOptions,
) -> Result<(), BoxError> {
    let server = server::start(ServerOptions {
        listen,
        database_url,
        pool_size,
        ops,
    })
    .await?;
    shutdown_signal().await;
    tracing::info!("shutting down: finishing in-flight requests");
    server.shutdown().await?;
    tracing::info!("stopped");
    Ok(())
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
