//! Keeps the embedded PostgreSQL of `ledger serve` running: when its postmaster dies (killed,
//! OOM-killed, crashed), the server starts it again, and PostgreSQL's crash recovery replays
//! its WAL, so that every commit the ledger acknowledged is kept; the pool, the outbox
//! publisher and the expiry task reconnect by themselves, as they do to an external database
//! that restarted. When PostgreSQL is not back within [`EMBEDDED_PG_RECOVERY_MAX`], or cannot
//! start at all, the server exits non-zero (see [`RecoveryFailed`]): a supervisor sees the
//! process end and starts it again, instead of a live process that serves nothing.
//!
//! A [`Keeper`] owns the [`EmbeddedPg`], and with it the data directory's lock: only the lock's
//! holder ever starts or stops that PostgreSQL. It looks at the postmaster every
//! [`POSTMASTER_WATCH_INTERVAL`] on a thread of its own (every step is blocking: `/proc`,
//! `pg_ctl`). After a death it first waits (at most [`ORPHANS_EXIT_WAIT`]) for the dead
//! postmaster's backends to exit: they notice the death when they next wait, but one busy in
//! a long statement runs on, attached to the old shared memory, and PostgreSQL refuses to
//! start while it is ("pre-existing shared memory block is still in use"). Those still
//! running then are killed, stale lock files (`postmaster.pid`, the socket's) removed, and the
//! server started on the same data directory and unix socket; the service's login is a role
//! in the cluster and survives.

use crate::embedded_pg::{EmbeddedPg, EmbeddedPgError};
use std::fmt;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How often `ledger serve` looks whether the postmaster of its embedded PostgreSQL is alive.
pub const POSTMASTER_WATCH_INTERVAL: Duration = Duration::from_millis(100);

/// Longest from noticing the postmaster dead to PostgreSQL accepting connections again, its
/// crash recovery done (limit EMBEDDED_PG_RECOVERY_MAX); beyond it, or when PostgreSQL cannot
/// start, `ledger serve` exits with status 1. Crash recovery replays the WAL written since the
/// last checkpoint (at most `max_wal_size`, 1 GB by default); PostgreSQL was back 0.5–3.2 s
/// after a kill under load (measured, docs/decisions/2026-12-02-embedded-postgres-recovery.md).
/// A start after that exit waits longer (60 s), so a recovery too long for this bound still
/// completes there.
pub const EMBEDDED_PG_RECOVERY_MAX: Duration = Duration::from_secs(30);

/// Longest the recovery waits for the dead postmaster's backends to exit by themselves
/// before it kills them (limit ORPHANS_EXIT_WAIT); part of [`EMBEDDED_PG_RECOVERY_MAX`].
pub const ORPHANS_EXIT_WAIT: Duration = Duration::from_secs(1);

const _: () = assert!(ORPHANS_EXIT_WAIT.as_millis() < EMBEDDED_PG_RECOVERY_MAX.as_millis());

/// The embedded PostgreSQL died and was not back within [`EMBEDDED_PG_RECOVERY_MAX`]: the
/// server must exit non-zero. Its source is why PostgreSQL did not start.
#[derive(Debug)]
pub struct RecoveryFailed {
    /// From noticing the death to giving up.
    pub after: Duration,
    /// Why the start failed (`pg_ctl`'s output and the end of the server log).
    pub error: EmbeddedPgError,
}

impl fmt::Display for RecoveryFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the embedded PostgreSQL died and could not be started again within \
             EMBEDDED_PG_RECOVERY_MAX ({:?}; gave up after {:.1?}); exiting so that a \
             supervisor starts the ledger again",
            EMBEDDED_PG_RECOVERY_MAX, self.after
        )
    }
}

impl std::error::Error for RecoveryFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// Watches the embedded PostgreSQL of `ledger serve` and starts it again when it dies (see
/// the module's documentation). Stop it with [`Keeper::stop`], which stops PostgreSQL too.
pub struct Keeper {
    /// Dropped or sent to: the watch ends.
    stop: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<EmbeddedPg>,
    /// Gets the failure when the keeper gave up; `None` once it was received.
    gave_up: Option<tokio::sync::oneshot::Receiver<RecoveryFailed>>,
}

impl Keeper {
    /// Starts watching `pg` on a thread of its own.
    pub fn start(pg: EmbeddedPg) -> Result<Keeper, EmbeddedPgError> {
        let (stop, stopped) = mpsc::channel();
        let (failed, gave_up) = tokio::sync::oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("embedded-pg-keeper".into())
            .spawn(move || keep(pg, &stopped, failed))
            .map_err(|e| EmbeddedPgError::Io("cannot spawn the keeper's thread".into(), e))?;
        Ok(Keeper {
            stop,
            thread,
            gave_up: Some(gave_up),
        })
    }

    /// Resolves when the keeper gave up (PostgreSQL is stopped then; the server must exit);
    /// never while PostgreSQL runs or comes back. Cancel-safe.
    pub async fn gave_up(&mut self) -> RecoveryFailed {
        if let Some(receiver) = self.gave_up.as_mut() {
            if let Ok(failed) = receiver.await {
                self.gave_up = None;
                return failed;
            }
            self.gave_up = None;
        }
        std::future::pending().await
    }

    /// Ends the watch (after a recovery under way), then stops PostgreSQL.
    pub async fn stop(self) -> Result<(), EmbeddedPgError> {
        let _ = self.stop.send(());
        let thread = self.thread;
        tokio::task::spawn_blocking(move || {
            let mut pg = thread
                .join()
                .map_err(|_| EmbeddedPgError::Database("the keeper's thread panicked".into()))?;
            pg.stop()
        })
        .await
        .map_err(|e| EmbeddedPgError::Database(format!("stopping PostgreSQL: {e}")))?
    }
}

/// The keeper's thread: every [`POSTMASTER_WATCH_INTERVAL`] until told to stop, the postmaster
/// is looked at and, dead, started again. Gives `pg` back when it ends: told to stop, or
/// after giving up (then PostgreSQL is stopped and `gave_up` told why).
fn keep(
    mut pg: EmbeddedPg,
    stop: &mpsc::Receiver<()>,
    gave_up: tokio::sync::oneshot::Sender<RecoveryFailed>,
) -> EmbeddedPg {
    loop {
        match stop.recv_timeout(POSTMASTER_WATCH_INTERVAL) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => return pg,
        }
        if pg.is_running() {
            continue;
        }
        if let Err(failed) = recover(&mut pg) {
            tracing::error!(
                error = %ledger_client::chain(&failed),
                "the embedded PostgreSQL is not back; stopping"
            );
            // Whatever started stops, so that nothing half-recovered outlives the process
            // (the next start runs crash recovery again).
            if let Err(e) = pg.stop_immediate() {
                tracing::warn!(error = %e, "cannot stop what is left of the embedded PostgreSQL");
            }
            let _ = gave_up.send(failed);
            return pg;
        }
    }
}

/// Starts PostgreSQL again after its postmaster died: waits for the old backends (at most
/// [`ORPHANS_EXIT_WAIT`]), then starts the server, which must accept connections within
/// [`EMBEDDED_PG_RECOVERY_MAX`] of the death being noticed.
fn recover(pg: &mut EmbeddedPg) -> Result<(), RecoveryFailed> {
    let noticed = Instant::now();
    tracing::warn!(
        data_dir = %pg.data_dir().display(),
        "the embedded PostgreSQL's postmaster died; starting it again (crash recovery) within \
         EMBEDDED_PG_RECOVERY_MAX ({EMBEDDED_PG_RECOVERY_MAX:?}); until then requests answer \
         UNAVAILABLE"
    );
    wait_for_orphans(pg, noticed + ORPHANS_EXIT_WAIT);
    match pg.start_again_by(noticed + EMBEDDED_PG_RECOVERY_MAX) {
        Ok(()) => {
            tracing::info!(
                elapsed_ms = noticed.elapsed().as_millis() as u64,
                "the embedded PostgreSQL is back after its crash recovery (bound \
                 EMBEDDED_PG_RECOVERY_MAX = {EMBEDDED_PG_RECOVERY_MAX:?})"
            );
            Ok(())
        }
        Err(error) => Err(RecoveryFailed {
            after: noticed.elapsed(),
            error,
        }),
    }
}

/// Waits until no process of the dead server works in the cluster directory, or `until`; the
/// ones left then are killed by the start.
fn wait_for_orphans(pg: &EmbeddedPg, until: Instant) {
    let mut left = pg.server_processes();
    if left == 0 {
        return;
    }
    tracing::info!(
        left,
        "waiting for the dead postmaster's backends to exit (at most ORPHANS_EXIT_WAIT, \
         {ORPHANS_EXIT_WAIT:?})"
    );
    while left > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
        left = pg.server_processes();
    }
    if left > 0 {
        tracing::warn!(
            left,
            "backends of the dead postmaster still run after ORPHANS_EXIT_WAIT \
             ({ORPHANS_EXIT_WAIT:?}); killing them"
        );
    }
}
