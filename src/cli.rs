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
    },
    /// Apply migrations and exit.
    Migrate {
        #[command(flatten)]
        db: DbArgs,
    },
    /// Load a running server and report throughput and latency (JSON as the last line).
    Bench(crate::bench::BenchArgs),
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
        } => {
            let (url, pg) = database(&db).await?;
            let result = serve(listen, url, pool_size).await;
            if let Some(mut pg) = pg {
                tokio::task::spawn_blocking(move || pg.stop()).await??;
            }
            result?;
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
        Command::Bench(args) => {
            crate::bench::run(args).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn serve(listen: SocketAddr, database_url: String, pool_size: usize) -> Result<(), BoxError> {
    let server = server::start(ServerOptions {
        listen,
        database_url,
        pool_size,
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
