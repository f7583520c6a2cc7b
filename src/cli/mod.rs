//! The `ledger` command line: serve, migrate, and the operator and client commands.

use ledger_server::embedded_pg::recovery::Keeper;
use ledger_server::embedded_pg::{EmbeddedPg, EmbeddedPgError, PgOptions};
use ledger_server::server::{self, ServerOptions};
mod tuning;

use clap::{Parser, Subcommand};
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tuning::TuningArgs;

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

/// `serve`'s database.
#[derive(clap::Args, Debug, Clone)]
struct DbArgs {
    /// PostgreSQL URL the service logs in with (postgres://… or host=… dbname=…; its user
    /// runs pending migrations, so a login without the owner's rights needs `ledger migrate`
    /// first). Without it (or empty), `serve` runs its own PostgreSQL in --data-dir, started
    /// and stopped with the server.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// Data directory of the embedded PostgreSQL (used without --database-url).
    #[arg(long, env = "LEDGER_DATA_DIR", default_value = "./ledger-data")]
    data_dir: PathBuf,
    /// Directory of PostgreSQL's server programs for the embedded PostgreSQL (default: the
    /// newest /usr/lib/postgresql/<version>/bin, else PATH).
    #[arg(long, env = "LEDGER_PG_BIN")]
    pg_bin: Option<PathBuf>,
}

/// `migrate`'s database.
#[derive(clap::Args, Debug, Clone)]
struct MigrateDbArgs {
    /// PostgreSQL URL of the ledger's database, as its owner (migrations change the schema).
    /// Without it (or empty): the embedded PostgreSQL of --data-dir, the running server's if
    /// one holds the directory (left running), else started for this command and stopped.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// Data directory of the embedded PostgreSQL (used without --database-url).
    #[arg(long, env = "LEDGER_DATA_DIR", default_value = "./ledger-data")]
    data_dir: PathBuf,
    /// Directory of PostgreSQL's server programs for the embedded PostgreSQL.
    #[arg(long, env = "LEDGER_PG_BIN")]
    pg_bin: Option<PathBuf>,
}

/// `check`'s database.
#[derive(clap::Args, Debug, Clone)]
struct CheckDbArgs {
    /// PostgreSQL URL of the ledger's database; any login that may read the journal (`check`
    /// only reads, in one snapshot). Without it (or empty): the embedded PostgreSQL of
    /// --data-dir, the running server's if one holds the directory (left running), else started
    /// for this command and stopped.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// Data directory of the embedded PostgreSQL (used without --database-url).
    #[arg(long, env = "LEDGER_DATA_DIR", default_value = "./ledger-data")]
    data_dir: PathBuf,
    /// Directory of PostgreSQL's server programs for the embedded PostgreSQL.
    #[arg(long, env = "LEDGER_PG_BIN")]
    pg_bin: Option<PathBuf>,
}

impl From<MigrateDbArgs> for DbArgs {
    fn from(a: MigrateDbArgs) -> DbArgs {
        DbArgs {
            database_url: a.database_url,
            data_dir: a.data_dir,
            pg_bin: a.pg_bin,
        }
    }
}

impl From<CheckDbArgs> for DbArgs {
    fn from(a: CheckDbArgs) -> DbArgs {
        DbArgs {
            database_url: a.database_url,
            data_dir: a.data_dir,
            pg_bin: a.pg_bin,
        }
    }
}

/// An empty value (`DATABASE_URL=`) means "not set", as in most tools.
fn set(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.trim().is_empty())
}

/// The outbox publisher's settings (`serve` and `relay`).
#[derive(clap::Args, Debug, Clone)]
struct OutboxArgs {
    /// NATS server URL (e.g. nats://127.0.0.1:4222), or several, comma-separated, of one
    /// cluster (the publisher moves to another when one is lost). For `serve` it turns on the
    /// in-process outbox publisher; `relay` requires it.
    #[arg(long, env = "LEDGER_NATS_URL", hide_env_values = true)]
    nats_url: Option<String>,
    /// Replicas of the JetStream stream `LEDGER` when the publisher creates it (3 on a
    /// three-server cluster rides through the loss of one; an existing stream keeps its own).
    #[arg(long, env = "LEDGER_NATS_REPLICAS", default_value_t = ledger_server::outbox::DEFAULT_STREAM_REPLICAS)]
    nats_replicas: usize,
    /// Delivered outbox rows older than this are deleted (e.g. 7d, 12h, 30m, 0s).
    #[arg(long, env = "LEDGER_OUTBOX_RETENTION", default_value = "7d", value_parser = ledger_server::outbox::parse_duration)]
    outbox_retention: Duration,
    /// De-duplication window of the JetStream stream `LEDGER` when the publisher creates it.
    /// It must cover the publisher's restart time.
    #[arg(long, env = "LEDGER_NATS_DUPLICATE_WINDOW", default_value = "2m", value_parser = ledger_server::outbox::parse_duration)]
    nats_duplicate_window: Duration,
    /// Crash tests only: where the publisher aborts the process (outbox-before-publish,
    /// outbox-after-publish-before-progress). Never in production.
    #[arg(long, env = "LEDGER_FAILPOINT", hide = true)]
    failpoint: Option<String>,
}

impl OutboxArgs {
    /// The publisher's options; it logs in as `login` acting as `role` when given (those of
    /// the server's pool in `serve`).
    fn publisher(
        &self,
        database_url: &str,
        login: Option<&str>,
        role: Option<&str>,
    ) -> Result<Option<ledger_server::outbox::PublisherOptions>, BoxError> {
        let failpoint =
            ledger_server::outbox::Failpoint::parse_optional(self.failpoint.as_deref())?;
        let Some(nats_url) = set(self.nats_url.clone()) else {
            return Ok(None);
        };
        ledger_server::outbox::nats_servers(&nats_url)?;
        if self.nats_replicas == 0 {
            return Err("--nats-replicas must be at least 1".into());
        }
        Ok(Some(ledger_server::outbox::PublisherOptions {
            database_url: database_url.to_owned(),
            db_login: login.map(str::to_owned),
            db_role: role.map(str::to_owned),
            nats_url,
            replicas: self.nats_replicas,
            duplicate_window: self.nats_duplicate_window,
            retention: self.outbox_retention,
            failpoint,
        }))
    }
}

// Parsed once per process: the size of its largest variant (serve's knobs) costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum Command {
    /// Run the gRPC server.
    Serve {
        /// Address to listen on.
        #[arg(long, env = "LEDGER_LISTEN", default_value = "127.0.0.1:50051")]
        listen: SocketAddr,
        #[command(flatten)]
        db: DbArgs,
        #[command(flatten)]
        outbox: OutboxArgs,
        #[command(flatten)]
        ops: OpsArgs,
        #[command(flatten)]
        tuning: TuningArgs,
    },
    /// Run the outbox publisher alone: deliver posting events to NATS JetStream.
    Relay {
        /// PostgreSQL URL of the ledger's database (required: the relay never starts the
        /// embedded PostgreSQL, which belongs to `serve`).
        #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
        database_url: String,
        #[command(flatten)]
        outbox: OutboxArgs,
        /// Address of the Prometheus endpoint (`/metrics`: the outbox backlog and the age of
        /// its oldest event); off without it.
        #[arg(long, env = "LEDGER_METRICS_LISTEN")]
        metrics_listen: Option<SocketAddr>,
    },
    /// Bearer tokens for `--auth-tokens`.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Apply migrations and exit.
    Migrate {
        #[command(flatten)]
        db: MigrateDbArgs,
    },
    /// Load a running server and report throughput and latency (JSON as the last line).
    Bench(crate::tools::bench::BenchArgs),
    /// Verify the journal's invariants on a live database: exit 0 when all hold, 1 on any
    /// violation, 2 when the check could not run.
    Check {
        #[command(flatten)]
        db: CheckDbArgs,
    },
    /// Reports for people and spreadsheets: a trial balance, a statement, at one cut-off.
    Report(crate::tools::report::ReportArgs),
    /// Benchmark of as-of reads (GetBalance per kind of cut-off on an account with 1,000,000
    /// legs) and of the write path with and without the as-of index.
    BenchAsOf(crate::tools::bench_asof::BenchAsOfArgs),
    /// Benchmark of the pure decide step alone (no database, no network): decisions per
    /// second for batches of 1, 64 and 1,000 postings.
    BenchDecide(crate::tools::bench_decide::BenchDecideArgs),
    /// The writer's own work for batches of N postings straight on a database (no gRPC, no
    /// service): the key claim and snapshot, the decision and the writes, timed apart.
    BenchWriter(crate::tools::bench_writer::BenchWriterArgs),
    /// Accounts: create, get, list.
    Account {
        #[command(subcommand)]
        command: crate::tools::commands::AccountCommand,
    },
    /// Records one balanced posting (needs --key), or a --file's list of them as one PostBatch.
    Post(crate::tools::commands::PostArgs),
    /// Captures a hold: moves all of it or less, releases the rest (needs --key).
    Capture(crate::tools::commands::CaptureArgs),
    /// Records the compensating posting of an earlier one, or releases a hold (needs --key).
    Void(crate::tools::commands::VoidArgs),
    /// Postings: get one by id or by your idempotency key.
    Posting {
        #[command(subcommand)]
        command: crate::tools::commands::PostingCommand,
    },
    /// An account's balance at a cut-off.
    Balance(crate::tools::commands::BalanceArgs),
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
    #[arg(
        long,
        env = "LEDGER_TLS_KEY",
        requires = "tls_cert",
        hide_env_values = true
    )]
    tls_key: Option<PathBuf>,
    /// CA (PEM) that signs client certificates: turns mutual TLS on (needs --tls-cert).
    #[arg(long, env = "LEDGER_TLS_CLIENT_CA", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// Address of the Prometheus endpoint (`/metrics`); off without it.
    #[arg(long, env = "LEDGER_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// A hot standby (PostgreSQL URL, one host or several, `sslmode` as for --database-url)
    /// that answers the as-of reads it has replayed (GetBalance, ListBalances, ListEntries);
    /// everything else, and whatever it cannot prove, goes to the primary. Repeat for several
    /// standbys (the environment variable holds one URL).
    #[arg(
        long = "replica-url",
        env = "LEDGER_REPLICA_URL",
        hide_env_values = true
    )]
    replica_urls: Vec<String>,
    /// Database role the service acts as (`SET ROLE`). Default: `ledger_app` with the embedded
    /// PostgreSQL (whose pool logs in as `ledger_svc`; migrations run as `postgres`), none with
    /// --database-url (whose user is the service's login); "" for none.
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
            .map(ledger_server::access::auth::AuthFile::load)
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
            None if embedded => Some(ledger_server::storage::APP_ROLE.to_owned()),
            None => None,
        };
        // The embedded cluster trusts its socket: the service logs in as its own login there,
        // not as the superuser that owns the schema (which still runs the migrations).
        let db_login = embedded.then(|| ledger_server::storage::roles::SERVICE_LOGIN.to_owned());
        Ok(server::OpsOptions {
            auth,
            tls,
            metrics_listen: self.metrics_listen,
            db_role,
            db_login,
            replica_urls: self
                .replica_urls
                .iter()
                .filter(|u| !u.trim().is_empty())
                .cloned()
                .collect(),
        })
    }
}

/// The headings of `ledger --help`, each with its commands, in order: what a client of a
/// running server uses apart from what runs or checks the server and the benchmarks.
const HELP_GROUPS: &[(&str, &[&str])] = &[
    (
        "Client commands (each a client of a running server: --server, --token, --ca-cert)",
        &[
            "account", "post", "capture", "void", "posting", "balance", "report",
        ],
    ),
    (
        "Server and operations",
        &["serve", "relay", "migrate", "check", "token"],
    ),
    (
        "Benchmarks (docs/performance.md)",
        &["bench", "bench-as-of", "bench-writer", "bench-decide"],
    ),
];

/// The command line, with `--help` listing the commands under [`HELP_GROUPS`]' headings.
fn command() -> clap::Command {
    use std::fmt::Write as _;
    let cmd = <Cli as clap::CommandFactory>::command();
    let width = HELP_GROUPS
        .iter()
        .flat_map(|(_, names)| names.iter().map(|n| n.len()))
        .max()
        .unwrap_or(0);
    let mut list = String::new();
    for (heading, names) in HELP_GROUPS {
        let _ = writeln!(list, "{heading}:");
        for name in *names {
            let about = cmd
                .find_subcommand(name)
                .and_then(|c| c.get_about())
                .map(|a| a.to_string())
                .unwrap_or_default();
            let _ = writeln!(list, "  {name:width$}  {about}");
        }
        list.push('\n');
    }
    cmd.help_template(format!(
        "{{about-with-newline}}\n{{usage-heading}} {{usage}}\n\n{list}Options:\n{{options}}\n\n\
         `ledger help COMMAND` or `ledger COMMAND --help` shows a command's options; \
         docs/configuration.md lists them all.\n"
    ))
}

/// Runs the command line; the exit code says whether it succeeded.
pub fn main() -> ExitCode {
    use clap::FromArgMatches as _;
    let cli = Cli::from_arg_matches(&command().get_matches()).unwrap_or_else(|e| e.exit());
    init_logging();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = rt.block_on(run(cli));
    match result {
        Ok(code) => code,
        Err(e) => {
            // Not eprintln!, which panics when stderr is a closed pipe.
            let _ = writeln!(std::io::stderr(), "ledger: {}", ledger_client::chain(&*e));
            ExitCode::FAILURE
        }
    }
}

/// Writes a command's output to stdout. A reader that stopped reading (`ledger report … |
/// head -3`) closed the pipe: the rest is dropped without a word and the command ends with the
/// status it would have had, as for a reader that read it all. Any other failure to write (say
/// a full disk under `> file`) is an error.
///
/// Why not the default SIGPIPE disposition, as C tools have: a client's sockets would raise it
/// too (a vectored write to a connection its peer closed), killing `check` or `bench` without
/// the error they report; Rust ignores SIGPIPE so such writes fail with an error instead.
pub fn print_out(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// [`print_out`] for the commands of this module, whose errors are boxed.
fn print(text: &str) -> Result<(), BoxError> {
    print_out(text).map_err(|e| format!("cannot write to stdout: {e}").into())
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

use ledger_server::BoxError;

/// Whether a command may use the embedded PostgreSQL of a data directory another process
/// holds (see [`database`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Holding {
    /// Only its own: `serve` refuses a data directory in use.
    Exclusive,
    /// Its own, or the holder's as a client (`check`, `migrate`), leaving it running.
    OrBorrow,
}

/// The database to use: the given URL, or the embedded PostgreSQL started now (stopped when
/// the returned guard drops), or, for [`Holding::OrBorrow`], the running one of the process
/// holding the data directory (no guard: it is not ours to stop).
async fn database(
    db: &DbArgs,
    command: &str,
    holding: Holding,
) -> Result<(String, Option<EmbeddedPg>), BoxError> {
    if let Some(url) = set(db.database_url.clone()) {
        return Ok((url, None));
    }
    let opts = PgOptions {
        data_dir: db.data_dir.clone(),
        fast_unsafe: false,
        port: 5432,
        holder: format!("ledger {command}"),
        bin_dir: db.pg_bin.clone(),
    };
    match tokio::task::spawn_blocking(move || EmbeddedPg::start(opts)).await? {
        Ok(pg) => {
            tracing::info!(data_dir = %db.data_dir.display(), "using the embedded PostgreSQL");
            Ok((pg.connection_string("ledger"), Some(pg)))
        }
        Err(EmbeddedPgError::InUse(in_use)) if holding == Holding::OrBorrow => {
            let url = in_use.connection_string("ledger");
            let _ = writeln!(
                std::io::stderr(),
                "ledger: using the PostgreSQL of the running {} in {}; it stays running \
                 (the same as --database-url '{url}')",
                in_use.who(),
                in_use.data_dir.display()
            );
            Ok((url, None))
        }
        Err(e) => Err(e.into()),
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
            outbox,
            ops,
            tuning,
        } => {
            let ops = ops.load(set(db.database_url.clone()).is_none())?;
            let tuning = tuning.tuning()?;
            let (url, pg) = database(&db, "serve", Holding::Exclusive).await?;
            // The embedded PostgreSQL is started again when it dies, or the server exits.
            let mut keeper = pg.map(Keeper::start).transpose()?;
            let result = serve(listen, url, tuning, outbox, ops, keeper.as_mut()).await;
            if let Some(keeper) = keeper {
                keeper.stop().await?;
            }
            result?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Relay {
            database_url,
            outbox,
            metrics_listen,
        } => relay(&database_url, outbox, metrics_listen).await,
        Command::Token {
            command: TokenCommand::New { caller, role },
        } => token(&caller, &role),
        Command::Migrate { db } => {
            let (url, pg) = database(&db.into(), "migrate", Holding::OrBorrow).await?;
            let result = migrate(&url).await;
            stop_embedded(pg).await?;
            result
        }
        Command::Bench(args) => {
            crate::tools::bench::run(args).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Check { db } => Ok(check_command(db.into()).await),
        Command::Report(args) => Ok(crate::tools::report::run(args).await?),
        Command::BenchAsOf(args) => crate::tools::bench_asof::run(args).await,
        Command::BenchDecide(args) => crate::tools::bench_decide::run(&args),
        Command::BenchWriter(args) => {
            crate::tools::bench_writer::run(args).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Account { command } => client(crate::tools::commands::account(command).await),
        Command::Post(args) => write("post", crate::tools::commands::post(args).await),
        Command::Capture(args) => write("capture", crate::tools::commands::capture(args).await),
        Command::Void(args) => write("void", crate::tools::commands::void(args).await),
        Command::Posting { command } => client(crate::tools::commands::posting(command).await),
        Command::Balance(args) => client(crate::tools::commands::balance(args).await),
    }
}

/// `ledger relay`: the outbox publisher alone, until a shutdown signal.
async fn relay(
    database_url: &str,
    outbox: OutboxArgs,
    metrics_listen: Option<std::net::SocketAddr>,
) -> Result<ExitCode, BoxError> {
    let Some(opts) = outbox.publisher(database_url, None, None)? else {
        return Err("ledger relay needs --nats-url (env LEDGER_NATS_URL)".into());
    };
    ledger_server::storage::migrate(database_url).await?;
    let _metrics = match metrics_listen {
        Some(addr) => {
            let pool = ledger_server::storage::pool(database_url, RELAY_METRICS_POOL)?;
            Some(ledger_server::metrics::serve(addr, pool).await?)
        }
        None => None,
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut publisher = tokio::spawn(ledger_server::outbox::run(opts, stopped));
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

/// `ledger token new`: a new token, and the auth-file line that holds its hash.
fn token(caller: &str, role: &str) -> Result<ExitCode, BoxError> {
    ledger_server::access::auth::validate_caller(caller)?;
    let role = ledger_server::access::auth::Role::parse(role)
        .ok_or_else(|| format!("role {role:?} is not `writer` or `reader`"))?;
    let token = ledger_server::access::auth::new_token();
    let line = ledger_server::access::auth::auth_line(caller, role, &token);
    print(&format!("{token}\n{line}\n"))?;
    Ok(ExitCode::SUCCESS)
}

/// Applies the pending migrations and says which.
async fn migrate(url: &str) -> Result<ExitCode, BoxError> {
    let applied = ledger_server::storage::migrate(url).await?;
    let applied = if applied.is_empty() {
        "none (up to date)".to_string()
    } else {
        applied.join(", ")
    };
    print(&format!("migrations applied: {applied}\n"))?;
    Ok(ExitCode::SUCCESS)
}

/// Connections the relay's metrics endpoint samples the outbox with, at most.
const RELAY_METRICS_POOL: usize = 1;

/// `ledger check`: 0 when every invariant holds, 1 on a violation, 2 when it could not run
/// (it says why on stderr).
async fn check_command(db: DbArgs) -> ExitCode {
    let result = async {
        let (url, pg) = database(&db, "check", Holding::OrBorrow).await?;
        let result = check(&url).await;
        stop_embedded(pg).await?;
        result
    }
    .await;
    result.unwrap_or_else(|e| {
        let _ = writeln!(
            std::io::stderr(),
            "ledger check could not run: {}",
            ledger_client::chain(&*e)
        );
        ExitCode::from(2)
    })
}

/// A client command's result as the process's: success, or its error.
fn client(r: Result<(), crate::tools::ToolError>) -> Result<ExitCode, BoxError> {
    r.map(|()| ExitCode::SUCCESS).map_err(Into::into)
}

/// A write command's result as the process's: success; a mistake in its arguments, as clap
/// reports its own (`error: …`, the usage, exit 2); or the call's error (exit 1).
fn write(name: &str, r: Result<(), crate::tools::commands::Failure>) -> Result<ExitCode, BoxError> {
    use crate::tools::commands::Failure;
    match r {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(Failure::Usage(message)) => {
            let mut cmd = command();
            cmd.build();
            let sub = cmd
                .find_subcommand_mut(name)
                .expect("a write command of the command line");
            let _ = sub
                .error(clap::error::ErrorKind::ValueValidation, message)
                .print();
            Ok(ExitCode::from(USAGE_EXIT))
        }
        Err(Failure::Call(e)) => Err(e.into()),
    }
}

/// The exit status of a mistake in a command's own arguments (clap's, and the write commands'
/// own checks: a missing --key, an unreadable or malformed --file).
const USAGE_EXIT: u8 = 2;

/// Prints the invariant report; the exit code is 1 when any invariant is violated.
async fn check(url: &str) -> Result<ExitCode, BoxError> {
    use std::fmt::Write as _;
    let mut client = ledger_server::storage::connect(url).await?;
    let findings = ledger_server::storage::check::run(&mut client).await?;
    let mut violated = 0;
    let mut report = String::new();
    for f in &findings {
        if f.violations == 0 {
            let _ = writeln!(report, "ok    {}", f.name);
        } else {
            violated += 1;
            let _ = writeln!(report, "FAIL  {} ({} violations)", f.name, f.violations);
            for e in &f.examples {
                let _ = writeln!(report, "        {e}");
            }
        }
    }
    let _ = writeln!(
        report,
        "{} invariants checked, {violated} violated",
        findings.len()
    );
    print(&report)?;
    Ok(if violated == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Serves until a shutdown signal, or until the `keeper` of the embedded PostgreSQL gave up
/// (then, drained and stopped like at a signal, it returns why: the process exits 1).
async fn serve(
    listen: SocketAddr,
    database_url: String,
    tuning: ledger_server::tuning::Tuning,
    outbox: OutboxArgs,
    ops: server::OpsOptions,
    keeper: Option<&mut Keeper>,
) -> Result<(), BoxError> {
    // The in-process publisher logs in as the pool does.
    let publisher_opts = outbox.publisher(
        &database_url,
        ops.db_login.as_deref(),
        ops.db_role.as_deref(),
    )?;
    let server = server::start(ServerOptions {
        listen,
        database_url,
        ops,
        tuning,
    })
    .await?;
    // The outbox publisher in-process (--nats-url); it stops after its current batch.
    let (stop_publisher, publisher_stopped) = tokio::sync::watch::channel(false);
    let publisher = match publisher_opts {
        Some(opts) => Some(ledger_server::outbox::spawn(opts, publisher_stopped)),
        None => {
            tracing::info!("no --nats-url: the outbox publisher is off; events wait in the outbox until `ledger relay` or `ledger serve --nats-url` delivers them");
            None
        }
    };
    let gave_up = tokio::select! {
        _ = shutdown_signal() => None,
        failed = keeper_gave_up(keeper) => Some(failed),
    };
    tracing::info!("shutting down: finishing in-flight requests");
    let _ = stop_publisher.send(true);
    server.shutdown().await?;
    if let Some(p) = publisher {
        let _ = p.await;
    }
    if let Some(failed) = gave_up {
        return Err(failed.into());
    }
    tracing::info!("stopped");
    Ok(())
}

/// Resolves when the keeper gave up; never without one (an external database).
async fn keeper_gave_up(
    keeper: Option<&mut Keeper>,
) -> ledger_server::embedded_pg::recovery::RecoveryFailed {
    match keeper {
        Some(keeper) => keeper.gave_up().await,
        None => std::future::pending().await,
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_lists_every_command_under_exactly_one_heading() {
        let cmd = <Cli as clap::CommandFactory>::command();
        let mut listed: Vec<&str> = HELP_GROUPS
            .iter()
            .flat_map(|(_, n)| n.iter().copied())
            .collect();
        let mut commands: Vec<&str> = cmd.get_subcommands().map(|c| c.get_name()).collect();
        listed.sort_unstable();
        commands.sort_unstable();
        assert_eq!(listed, commands, "every command once in HELP_GROUPS");
    }
}
