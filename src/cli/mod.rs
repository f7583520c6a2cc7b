//! The `ledger` command line: serve, migrate, and the operator and client commands.
//!
//! `mod.rs` has the commands (clap) and their dispatch; `args.rs` the option groups that
//! several commands share (the database, the outbox publisher, serve's access); `database.rs`
//! the database a command uses (a URL, or the embedded PostgreSQL); `serve.rs` `ledger serve`;
//! `operator.rs` `relay`, `token`, `migrate` and `check`; `tuning.rs` serve's knobs;
//! `clusters.rs` `check` and `verify` over the clusters of a deployment.
//! `verify.rs` `ledger verify` and `verify_proof.rs` `ledger verify-proof` (docs/verifiable.md).

mod args;
mod clusters;
mod database;
mod operator;
mod serve;
mod tuning;
mod verify;
mod verify_proof;

use args::{set, CheckDbArgs, DbArgs, MigrateDbArgs, OpsArgs, OutboxArgs};
use clap::{Parser, Subcommand};
use database::{database, stop_embedded, Holding};
use ledger_server::embedded_pg::recovery::Keeper;
use ledger_server::BoxError;
use operator::{check_command, migrate, relay, token};
use serve::{serve, ShutdownSignal};
use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;
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
        /// Check one ledger (its accounts, postings, keys and events) instead of every ledger.
        #[arg(long)]
        ledger: Option<String>,
    },
    /// Recompute every posting's hash, the Merkle tree and the chain from the journal alone
    /// and compare them with the stored ones and with digests you hold: exit 0 when all
    /// match, 1 on a mismatch, 2 when it could not run.
    Verify(verify::VerifyArgs),
    /// Check an inclusion or a consistency proof (grpcurl's JSON) offline against a digest
    /// you hold: exit 0 verified, 1 not verified, 2 bad input.
    VerifyProof(verify_proof::VerifyProofArgs),
    /// Reports for people and spreadsheets at one cut-off: a trial balance, a statement (for
    /// a period), a balance sheet, an income statement.
    Report(crate::tools::report::ReportArgs),
    /// Matches a statement's lines (a bank's CSV export) to an account's postings: exit 0
    /// when all match and the totals agree, 1 when any is unmatched, 2 when it cannot run.
    Reconcile(crate::tools::reconcile::ReconcileArgs),
    /// Benchmark of as-of reads (GetBalance per kind of cut-off on an account with 1,000,000
    /// legs) and of the write path with and without the as-of index.
    BenchAsOf(crate::tools::bench_asof::BenchAsOfArgs),
    /// Benchmark of the finance queries (ListRollups per kind of cut-off, ListPostings per
    /// filter) on a book of 100,000 accounts and 1,000,000 postings.
    BenchFinance(crate::tools::bench_finance::BenchFinanceArgs),
    /// Benchmark of the pure decide step alone (no database, no network): decisions per
    /// second for batches of 1, 64 and 1,000 postings.
    BenchDecide(crate::tools::bench_decide::BenchDecideArgs),
    /// The writer's own work for batches of N postings straight on a database (no gRPC, no
    /// service): the key claim and snapshot, the decision and the writes, timed apart.
    BenchWriter(crate::tools::bench_writer::BenchWriterArgs),
    /// Accounts: create, get (now or at a cut-off), list, update (a new version of its
    /// terms: freeze, close, floor, ceiling, debit limits), versions.
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
    /// Ledgers (isolated books; the commands above take --ledger): create, get, list.
    Ledgers {
        #[command(subcommand)]
        command: crate::tools::commands::LedgersCommand,
    },
    /// Period closes of a ledger: close (role admin; no reopen), list.
    Period {
        #[command(subcommand)]
        command: crate::tools::commands::PeriodCommand,
    },
}

#[derive(Subcommand, Debug)]
enum TokenCommand {
    /// Prints a new random token (line 1) and its auth-file line (line 2, only a hash).
    New {
        /// The caller's name (recorded on its postings, scopes its idempotency keys).
        caller: String,
        /// `reader` (Get*/List* only), `writer` (every call but CreateLedger) or `admin`
        /// (every call).
        role: String,
        /// The ledgers the line grants: comma-separated ledger codes, or `*` for every
        /// ledger (a fourth column); without it, the line grants `default` alone.
        #[arg(long)]
        ledgers: Option<String>,
    },
}

/// The headings of `ledger --help`, each with its commands, in order: what a client of a
/// running server uses apart from what runs or checks the server and the benchmarks.
const HELP_GROUPS: &[(&str, &[&str])] = &[
    (
        "Client commands (each a client of a running server: --server, --token, --ca-cert; --ledger)",
        &[
            "account", "post", "capture", "void", "posting", "balance", "report", "reconcile",
            "ledgers", "period",
        ],
    ),
    (
        "Server and operations",
        &["serve", "relay", "migrate", "check", "token"],
    ),
    (
        "Verifying the journal (docs/verifiable.md)",
        &["verify", "verify-proof"],
    ),
    (
        "Benchmarks (docs/performance.md)",
        &["bench", "bench-as-of", "bench-finance", "bench-writer", "bench-decide"],
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

async fn run(cli: Cli) -> Result<ExitCode, BoxError> {
    match cli.command {
        Command::Serve {
            listen,
            db,
            outbox,
            ops,
            tuning,
        } => serve_command(listen, db, outbox, ops, tuning).await,
        Command::Relay {
            database_url,
            outbox,
            metrics_listen,
        } => {
            relay(
                &database_url,
                outbox,
                metrics_listen,
                ShutdownSignal::listen()?,
            )
            .await
        }
        Command::Token {
            command:
                TokenCommand::New {
                    caller,
                    role,
                    ledgers,
                },
        } => token(&caller, &role, ledgers.as_deref()),
        Command::Migrate { db } => {
            let clusters = db.clusters.clone();
            let (url, pg) = database(&db.into(), "migrate", Holding::OrBorrow).await?;
            let result = migrate(&url, &clusters).await;
            stop_embedded(pg).await?;
            result
        }
        Command::Bench(args) => {
            crate::tools::bench::run(args).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Check { db, ledger } => Ok(check_command(db, ledger).await),
        Command::Verify(args) => Ok(verify::verify_command(args).await),
        Command::VerifyProof(args) => Ok(verify_proof::verify_proof_command(args)),
        Command::Report(args) => Ok(crate::tools::report::run(args).await?),
        Command::Reconcile(args) => Ok(crate::tools::reconcile::run(args).await),
        Command::BenchAsOf(args) => crate::tools::bench_asof::run(args).await,
        Command::BenchFinance(args) => crate::tools::bench_finance::run(args).await,
        Command::BenchDecide(args) => crate::tools::bench_decide::run(&args),
        Command::BenchWriter(args) => {
            crate::tools::bench_writer::run(args).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Account { command } => {
            let name = command.name();
            let r = crate::tools::commands::account(command).await;
            write(&["account", name], r)
        }
        Command::Post(args) => write(&["post"], crate::tools::commands::post(args).await),
        Command::Capture(args) => write(&["capture"], crate::tools::commands::capture(args).await),
        Command::Void(args) => write(&["void"], crate::tools::commands::void(args).await),
        Command::Posting { command } => client(crate::tools::commands::posting(command).await),
        Command::Balance(args) => client(crate::tools::commands::balance(args).await),
        Command::Ledgers { command } => client(crate::tools::commands::ledgers(command).await),
        Command::Period { command } => {
            write(&["period"], crate::tools::commands::period(command).await)
        }
    }
}

/// `ledger serve`: until its signal, with the embedded PostgreSQL unless --database-url.
async fn serve_command(
    listen: SocketAddr,
    db: DbArgs,
    outbox: OutboxArgs,
    ops: OpsArgs,
    tuning: TuningArgs,
) -> Result<ExitCode, BoxError> {
    let signal = ShutdownSignal::listen()?;
    let ops = ops.load(set(db.database_url.clone()).is_none())?;
    let tuning = tuning.tuning()?;
    let (url, pg) = database(&db, "serve", Holding::Exclusive).await?;
    // The embedded PostgreSQL is started again when it dies, or the server exits.
    let mut keeper = pg.map(Keeper::start).transpose()?;
    let result = serve(listen, url, tuning, outbox, ops, keeper.as_mut(), signal).await;
    if let Some(keeper) = keeper {
        keeper.stop().await?;
    }
    result?;
    Ok(ExitCode::SUCCESS)
}

/// A client command's result as the process's: success, or its error.
fn client(r: Result<(), crate::tools::ToolError>) -> Result<ExitCode, BoxError> {
    r.map(|()| ExitCode::SUCCESS).map_err(Into::into)
}

/// A write command's result as the process's: success; a mistake in its arguments, as clap
/// reports its own (`error: …`, the usage of the command at `path`, exit 2); or the call's
/// error (exit 1).
fn write(
    path: &[&str],
    r: Result<(), crate::tools::commands::Failure>,
) -> Result<ExitCode, BoxError> {
    use crate::tools::commands::Failure;
    match r {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(Failure::Usage(message)) => {
            let mut cmd = command();
            cmd.build();
            let mut sub = &mut cmd;
            for name in path {
                sub = sub
                    .find_subcommand_mut(name)
                    .expect("a write command of the command line");
            }
            let _ = sub
                .error(clap::error::ErrorKind::ValueValidation, message)
                .print();
            Ok(ExitCode::from(USAGE_EXIT))
        }
        Err(Failure::Call(e)) => Err(e.into()),
    }
}

/// The exit status of a mistake in a command's own arguments (clap's, and the write commands'
/// own checks: a missing --key, an unreadable or malformed --file, an update that changes
/// nothing).
const USAGE_EXIT: u8 = 2;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docs_configuration_lists_every_flag_and_variable_of_serve_and_relay() {
        let docs = include_str!("../../docs/configuration.md");
        let cmd = <Cli as clap::CommandFactory>::command();
        let mut missing = Vec::new();
        for name in ["serve", "relay"] {
            let sub = cmd.find_subcommand(name).expect("a command");
            for arg in sub.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                if long == "help" || arg.is_hide_set() {
                    continue;
                }
                if !docs.contains(&format!("`--{long}`")) {
                    missing.push(format!("{name} --{long}"));
                }
                if let Some(env) = arg.get_env() {
                    if !docs.contains(&format!("`{}`", env.to_string_lossy())) {
                        missing.push(format!("{name} {}", env.to_string_lossy()));
                    }
                }
            }
        }
        assert!(
            missing.is_empty(),
            "not in docs/configuration.md: {missing:?}"
        );
    }

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
