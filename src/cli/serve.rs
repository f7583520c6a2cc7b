//! `ledger serve`: the server, with the outbox publisher in-process (`--nats-url`), until a
//! shutdown signal or until the keeper of the embedded PostgreSQL gave up.

use super::args::OutboxArgs;
use ledger_server::embedded_pg::recovery::Keeper;
use ledger_server::server::{self, ServerOptions};
use ledger_server::BoxError;
use std::net::SocketAddr;

/// Serves until a shutdown signal, or until the `keeper` of the embedded PostgreSQL gave up
/// (then, drained and stopped like at a signal, it returns why: the process exits 1).
pub(super) async fn serve(
    listen: SocketAddr,
    database_url: String,
    tuning: ledger_server::tuning::Tuning,
    outbox: OutboxArgs,
    ops: server::OpsOptions,
    keeper: Option<&mut Keeper>,
    signal: ShutdownSignal,
) -> Result<(), BoxError> {
    // The in-process publishers, one per cluster (each elected in its own database), log in
    // as the pool does.
    let mut publisher_opts = Vec::new();
    let main = [("main".to_owned(), database_url.clone())];
    for (_, url) in main.iter().chain(&ops.clusters) {
        let opts = outbox.publisher(url, ops.db_login.as_deref(), ops.db_role.as_deref())?;
        publisher_opts.extend(opts);
    }
    let server = server::start(ServerOptions {
        listen,
        database_url,
        ops,
        tuning,
    })
    .await?;
    // The outbox publisher in-process (--nats-url); it stops after its current batch.
    let (stop_publisher, publisher_stopped) = tokio::sync::watch::channel(false);
    if publisher_opts.is_empty() {
        tracing::info!("no --nats-url: the outbox publisher is off; events wait in the outbox until `ledger relay` or `ledger serve --nats-url` delivers them");
    }
    let publishers: Vec<_> = publisher_opts
        .into_iter()
        .map(|opts| ledger_server::outbox::spawn(opts, publisher_stopped.clone()))
        .collect();
    let gave_up = tokio::select! {
        _ = signal.received() => None,
        failed = keeper_gave_up(keeper) => Some(failed),
    };
    tracing::info!("shutting down: finishing in-flight requests");
    let _ = stop_publisher.send(true);
    server.shutdown().await?;
    for p in publishers {
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

/// SIGTERM and Ctrl-C (SIGINT), listened for from the moment it is made: made before anything
/// starts, so a signal that arrives while the server is still starting is kept (the server
/// stops as soon as it is up) instead of killing the process by the signal's default action.
pub(super) struct ShutdownSignal {
    term: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl ShutdownSignal {
    pub(super) fn listen() -> std::io::Result<ShutdownSignal> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(ShutdownSignal {
            term: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    /// Resolves once either signal has arrived (also before this was awaited).
    pub(super) async fn received(mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.interrupt.recv() => {}
        }
    }
}
