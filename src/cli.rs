//! The `ledger` command line: serve, migrate, and the operator and client commands.

use crate::embedded_pg::{EmbeddedPg, PgOptions};
use crate::server::{self, ServerOptions};
use crate::storage::DEFAULT_POOL_SIZE;
use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

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

/// The outbox publisher's settings (`serve` and `relay`).
#[derive(clap::Args, Debug, Clone)]
struct OutboxArgs {
    /// NATS server URL (e.g. nats://127.0.0.1:4222). For `serve` it turns on the in-process
    /// outbox publisher; `relay` requires it.
    #[arg(long, env = "LEDGER_NATS_URL")]
    nats_url: Option<String>,
    /// Delivered outbox rows older than this are deleted (e.g. 7d, 12h, 30m, 0s).
    #[arg(long, env = "LEDGER_OUTBOX_RETENTION", default_value = "7d", value_parser = crate::outbox::parse_duration)]
    outbox_retention: Duration,
    /// De-duplication window of the JetStream stream `LEDGER` when the publisher creates it.
    /// It must cover the publisher's restart time.
    #[arg(long, env = "LEDGER_NATS_DUPLICATE_WINDOW", default_value = "2m", value_parser = crate::outbox::parse_duration)]
    nats_duplicate_window: Duration,
}

impl OutboxArgs {
    fn publisher(&self, database_url: &str) -> Option<crate::outbox::PublisherOptions> {
        Some(crate::outbox::PublisherOptions {
            database_url: database_url.to_owned(),
            nats_url: self.nats_url.clone()?,
            duplicate_window: self.nats_duplicate_window,
            retention: self.outbox_retention,
        })
    }
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
        outbox: OutboxArgs,
        #[command(flatten)]
        ops: OpsArgs,
    },
    /// Run the outbox publisher alone: deliver posting events to NATS JetStream.
    Relay {
        /// PostgreSQL URL of the ledger's database (required: the relay never starts the
        /// embedded PostgreSQL, which belongs to `serve`).
        #[arg(long, env = "DATABASE_URL")]
        database_url: String,
        #[command(flatten)]
        outbox: OutboxArgs,
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
    /// Load a running server and report throughput and latency (JSON as the last line).
    Bench(crate::bench::BenchArgs),
    /// Verify the journal's invariants on a live database; exit 1 on any violation.
    Check {
        #[command(flatten)]
        db: DbArgs,
    },
    /// Reports for people and spreadsheets (a client of a running server).
    Report(crate::report::ReportArgs),
    /// Benchmark of as-of reads (GetBalance per kind of cut-off on an account with 1,000,000
    /// legs) and of the write path with and without the as-of index.
    BenchAsOf(crate::bench_asof::BenchAsOfArgs),
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
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
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

/// Stops the embedded PostgreSQL, if this command started one (it stops last).
async fn stop_embedded(pg: Option<EmbeddedPg>) -> Result<(), BoxError> {
    if let Some(mut pg) = pg {
        tokio::task::spawn_blocking(move || pg.stop()).await??;
    }
    Ok(())
}

async fn run(cli: Cli) -> Result<ExitCode, BoxError> {
    match cli.command {
        Command::Serve {
            listen,
            db,
            pool_size,
            outbox,
            ops,
        } => {
            let ops = ops.load(db.database_url.is_none())?;
            let (url, pg) = database(&db).await?;
            let result = serve(listen, url, pool_size, outbox, ops).await;
            stop_embedded(pg).await?;
            result?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Relay {
            database_url,
            outbox,
        } => {
            let Some(opts) = outbox.publisher(&database_url) else {
                return Err("ledger relay needs --nats-url (env LEDGER_NATS_URL)".into());
            };
            crate::storage::migrate(&database_url).await?;
            let (stop, stopped) = tokio::sync::watch::channel(false);
            let mut publisher = tokio::spawn(crate::outbox::run(opts, stopped));
            tokio::select! {
                _ = shutdown_signal() => {
                    tracing::info!("shutting down: the publisher stops after its current batch");
                    let _ = stop.send(true);
                    publisher.await??;
                }
                // It ends by itself only on a configuration error.
                r = &mut publisher => r??,
            }
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
            stop_embedded(pg).await?;
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
        Command::Check { db } => {
            let (url, pg) = database(&db).await?;
            let result = check(&url).await;
            stop_embedded(pg).await?;
            result
        }
        Command::Report(args) => Ok(crate::report::run(args).await?),
        Command::BenchAsOf(args) => crate::bench_asof::run(args).await,
    }
}

/// Prints the invariant report; the exit code is 1 when any invariant is violated.
async fn check(url: &str) -> Result<ExitCode, BoxError> {
    let mut client = crate::storage::connect(url).await?;
    let findings = crate::storage::check::run(&mut client).await?;
    let mut violated = 0;
    for f in &findings {
        if f.violations == 0 {
            println!("ok    {}", f.name);
        } else {
            violated += 1;
            println!("FAIL  {} ({} violations)", f.name, f.violations);
            for e in &f.examples {
                println!("        {e}");
            }
        }
    }
    println!("{} invariants checked, {violated} violated", findings.len());
    Ok(if violated == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

async fn serve(
    listen: SocketAddr,
    database_url: String,
    pool_size: usize,
    outbox: OutboxArgs,
    ops: server::OpsOptions,
) -> Result<(), BoxError> {
    let publisher_opts = outbox.publisher(&database_url);
    let server = server::start(ServerOptions {
        listen,
        database_url,
        pool_size,
        ops,
        transport: crate::transport::TransportLimits::from_env()?,
    })
    .await?;
    // The outbox publisher in-process (--nats-url); it stops after its current batch.
    let (stop_publisher, publisher_stopped) = tokio::sync::watch::channel(false);
    let publisher = match publisher_opts {
        Some(opts) => Some(crate::outbox::spawn(opts, publisher_stopped)),
        None => {
            tracing::info!("no --nats-url: the outbox publisher is off; events wait in the outbox until `ledger relay` or `ledger serve --nats-url` delivers them");
            None
        }
    };
    shutdown_signal().await;
    tracing::info!("shutting down: finishing in-flight requests");
    let _ = stop_publisher.send(true);
    server.shutdown().await?;
    if let Some(p) = publisher {
        let _ = p.await;
    }
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
