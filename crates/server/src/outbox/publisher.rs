//! The publisher loop: election, then rounds over the ledgers with pending events, each
//! ledger's batch of posting events, then of account events, read → published → acks
//! awaited → its progress recorded.

use super::batch::{Batch, Kind};
use super::broker::{publish_batch, BatchOutcome, Broker, Failure};
use super::{
    idle_pause, Backoff, Failpoint, PublisherOptions, BACKLOG_LOG_INTERVAL, BACKLOG_LOG_LEDGERS,
    PRUNE_BATCH, PRUNE_INTERVAL_MAX, STANDBY_RETRY,
};
use crate::storage::outbox::LedgerWaiting;
use crate::storage::{self, outbox as store};
use ledger_core::ledger::LedgerId;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio::sync::watch;

use crate::BoxError;

/// Runs the publisher until `shutdown` turns true (or its sender is dropped): stands by until
/// elected, then publishes; after losing its database session it stands by again. On shutdown
/// it stops after its current batch. Fails only on a bad configuration (an unknown failpoint).
pub async fn run(
    opts: PublisherOptions,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), BoxError> {
    if let Some(fp) = opts.failpoint {
        tracing::warn!(failpoint = ?fp, "outbox publisher failpoint armed: the process will abort there");
    }
    let mut backoff = Backoff::default();
    let mut standby_logged = false;
    loop {
        if stopping(&shutdown) {
            return Ok(());
        }
        let (pool, client) = match session(&opts).await {
            Ok(c) => c,
            Err(e) => {
                let delay = backoff.next_delay();
                tracing::warn!(error = %e, retry_in = ?delay, "outbox publisher: no database connection");
                if sleep_or_stop(&mut shutdown, delay).await {
                    return Ok(());
                }
                continue;
            }
        };
        match elect(&client, &mut shutdown, &mut standby_logged).await {
            Election::Stop => return Ok(()),
            Election::Failed => {}
            Election::Won => {
                standby_logged = false;
                backoff.reset();
                match Active::new(&opts, opts.failpoint)
                    .run(&client, &mut shutdown)
                    .await
                {
                    Ok(()) => {
                        tracing::info!("outbox publisher stopped");
                        return Ok(());
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "outbox publisher lost its database session; standing by again")
                    }
                }
            }
        }
        // Dropping the client ends the session, which releases the lock if we held it.
        drop(client);
        drop(pool);
        if sleep_or_stop(&mut shutdown, backoff.next_delay()).await {
            return Ok(());
        }
    }
}

/// A dedicated session (a pool of one, dropped with it): the publisher's lock is held by the
/// session.
async fn session(
    opts: &PublisherOptions,
) -> Result<(storage::Pool, crate::storage::Conn), storage::StorageError> {
    let cfg = storage::service_config(
        &opts.database_url,
        opts.db_login.as_deref(),
        opts.db_role.as_deref(),
    )?;
    let one = storage::PoolTuning {
        size: 1,
        ..Default::default()
    };
    let pool = storage::pool_with(cfg, &one)?;
    let client = pool.get().await?;
    Ok((pool, client))
}

/// How an election ended.
enum Election {
    Won,
    /// The session failed: stand by again on a new one.
    Failed,
    Stop,
}

/// Stands by until this session holds the publisher's lock.
async fn elect(
    client: &crate::storage::Conn,
    shutdown: &mut watch::Receiver<bool>,
    standby_logged: &mut bool,
) -> Election {
    loop {
        match store::try_lock_publisher(client).await {
            Ok(true) => return Election::Won,
            Ok(false) => {
                if !*standby_logged {
                    tracing::info!(retry_every = ?STANDBY_RETRY, "outbox publisher standing by: another publisher is active");
                    *standby_logged = true;
                }
                if sleep_or_stop(shutdown, STANDBY_RETRY).await {
                    return Election::Stop;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "outbox publisher: election failed");
                return Election::Failed;
            }
        }
    }
}

fn stopping(shutdown: &watch::Receiver<bool>) -> bool {
    *shutdown.borrow() || shutdown.has_changed().is_err()
}

/// Sleeps for `d`; true if the publisher must stop.
async fn sleep_or_stop(shutdown: &mut watch::Receiver<bool>, d: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = shutdown.wait_for(|v| *v) => {}
    }
    stopping(shutdown)
}

/// The active publisher's periodic chores: the backlog log lines and pruning.
struct Chores {
    prune_every: Duration,
    next_prune: Instant,
    next_log: Instant,
}

impl Chores {
    fn new(retention: Duration) -> Chores {
        Chores {
            prune_every: (retention / 10).clamp(Duration::from_secs(1), PRUNE_INTERVAL_MAX),
            next_prune: Instant::now(),
            next_log: Instant::now(),
        }
    }

    async fn run(
        &mut self,
        client: &crate::storage::Conn,
        retention: Duration,
    ) -> Result<(), BoxError> {
        if Instant::now() >= self.next_log {
            log_backlog(client).await?;
            self.next_log = Instant::now() + BACKLOG_LOG_INTERVAL;
        }
        if Instant::now() >= self.next_prune {
            // One bounded statement per outbox per turn, so pruning a large backlog of
            // delivered rows interleaves with publishing.
            let n = store::prune_delivered(client, retention, PRUNE_BATCH).await?;
            let a = store::prune_delivered_accounts(client, retention, PRUNE_BATCH).await?;
            if n > 0 || a > 0 {
                tracing::info!(deleted = n, deleted_account_events = a, retention = ?retention, "outbox: delivered events past retention removed");
            }
            if n.max(a) < PRUNE_BATCH as u64 {
                self.next_prune = Instant::now() + self.prune_every;
            }
        }
        Ok(())
    }
}

/// A ledger's kind of events the broker refused one of: not served again before `until`.
struct Halt {
    backoff: Backoff,
    until: Instant,
}

/// The ledgers of a round in turn: those after `cursor` (the ledger served last) first, then
/// the others from the lowest id. `ledgers` are by id.
fn in_turn(mut ledgers: Vec<LedgerWaiting>, cursor: Option<LedgerId>) -> Vec<LedgerWaiting> {
    let served = ledgers.partition_point(|l| Some(l.ledger) <= cursor);
    ledgers.rotate_left(served);
    ledgers
}

/// A ledger's kinds of events waiting, each with its progress.
fn kinds(w: &LedgerWaiting) -> impl Iterator<Item = (Kind, i64)> {
    [
        (Kind::Postings, w.postings),
        (Kind::Accounts, w.accounts),
        (Kind::Digests, w.digests),
    ]
    .into_iter()
    .filter_map(|(kind, progress)| progress.map(|p| (kind, p)))
}

/// The active publisher's state.
struct Active<'a> {
    opts: &'a PublisherOptions,
    failpoint: Option<Failpoint>,
    broker: Broker,
    /// After a broker failure that concerns every ledger (unreachable, slow).
    backoff: Backoff,
    /// Ledger codes by id (a ledger's code never changes).
    codes: HashMap<LedgerId, String>,
    /// The ledger served last.
    cursor: Option<LedgerId>,
    /// Ledgers' kinds of events halted at an event the broker refuses.
    halted: HashMap<(LedgerId, Kind), Halt>,
}

impl<'a> Active<'a> {
    fn new(opts: &'a PublisherOptions, failpoint: Option<Failpoint>) -> Self {
        Active {
            opts,
            failpoint,
            broker: Broker::default(),
            backoff: Backoff::default(),
            codes: HashMap::new(),
            cursor: None,
            halted: HashMap::new(),
        }
    }

    /// Publishes until shutdown (`Ok`) or until the database session fails (`Err`: the lock
    /// may be lost, so stand by again).
    async fn run(
        &mut self,
        client: &crate::storage::Conn,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<(), BoxError> {
        let b = store::backlog(client).await?;
        tracing::info!(pending = b.pending, ledgers_behind = b.ledgers_behind, nats_url = %self.opts.nats_url, "outbox publisher active");
        let mut chores = Chores::new(self.opts.retention);
        loop {
            if stopping(shutdown) {
                return Ok(());
            }
            chores.run(client, self.opts.retention).await?;
            let pause = self.round(client, shutdown).await?;
            if let Some(d) = pause {
                if sleep_or_stop(shutdown, d).await {
                    return Ok(());
                }
            }
        }
    }

    /// One round: one batch of each kind of events pending of each ledger (but those halted),
    /// the ledgers in turn, its posting events before its account events.
    /// The pause before the next round (none: at once).
    async fn round(
        &mut self,
        client: &crate::storage::Conn,
        shutdown: &watch::Receiver<bool>,
    ) -> Result<Option<Duration>, BoxError> {
        let now = Instant::now();
        let waiting = store::ledgers_waiting(client).await?;
        let look = now.elapsed();
        let due: Vec<(LedgerId, Vec<(Kind, i64)>)> = in_turn(waiting, self.cursor)
            .iter()
            .map(|w| {
                let due = kinds(w).filter(|(kind, _)| {
                    let halt = self.halted.get(&(w.ledger, *kind));
                    halt.is_none_or(|h| h.until <= now)
                });
                (w.ledger, due.collect::<Vec<_>>())
            })
            .filter(|(_, due)| !due.is_empty())
            .collect();
        if due.is_empty() {
            return Ok(Some(idle_pause(look)));
        }
        let ledgers: Vec<LedgerId> = due.iter().map(|(l, _)| *l).collect();
        self.learn_codes(client, &ledgers).await?;
        for (ledger, kinds) in due {
            if stopping(shutdown) {
                return Ok(None);
            }
            for (kind, progress) in kinds {
                if let Some(pause) = self.turn(client, ledger, kind, progress).await? {
                    return Ok(Some(pause));
                }
            }
            self.cursor = Some(ledger);
        }
        Ok(None)
    }

    /// Reads the codes of the ledgers not known yet.
    async fn learn_codes(
        &mut self,
        client: &crate::storage::Conn,
        ledgers: &[LedgerId],
    ) -> Result<(), BoxError> {
        let unknown: Vec<LedgerId> = ledgers
            .iter()
            .copied()
            .filter(|id| !self.codes.contains_key(id))
            .collect();
        if !unknown.is_empty() {
            self.codes
                .extend(store::ledger_codes(client, &unknown).await?);
        }
        match unknown.iter().find(|id| !self.codes.contains_key(id)) {
            Some(id) => Err(format!("ledger {id} has outbox progress but no code").into()),
            None => Ok(()),
        }
    }

    /// One batch of one ledger's events of one kind: its pending ones from its progress on,
    /// published, its progress recorded. A pause means every ledger must wait (the broker is
    /// unavailable).
    async fn turn(
        &mut self,
        client: &crate::storage::Conn,
        ledger: LedgerId,
        kind: Kind,
        progress: i64,
    ) -> Result<Option<Duration>, BoxError> {
        let code = self.codes[&ledger].clone();
        let Some(batch) = Batch::load(client, kind, ledger, progress, &code).await? else {
            return Ok(None);
        };
        if self.failpoint == Some(Failpoint::BeforePublish) {
            tracing::error!(ledger = %code, events = kind.as_str(), first = %batch.names[0], "failpoint outbox-before-publish: aborting");
            std::process::abort();
        }
        let js = match self.broker.context(self.opts).await {
            Ok(js) => js,
            Err(e) => {
                let delay = self.backoff.next_delay();
                tracing::warn!(error = %e, retry_in = ?delay, ledger = %code, events = kind.as_str(), pending_from = %batch.names[0], "outbox publisher: broker unavailable");
                return Ok(Some(delay));
            }
        };
        let outcome = publish_batch(&js, &kind.subject(&code), &batch.events).await;
        if outcome.acked > 0 {
            self.record(client, &outcome, &batch, ledger, &code).await?;
        }
        let Some(failure) = outcome.failure else {
            self.backoff.reset();
            self.halted.remove(&(ledger, kind));
            return Ok(None);
        };
        Ok(self.after(failure, outcome.acked, &batch, ledger, &code))
    }

    /// Records the progress of the acknowledged events of ledger `code`.
    async fn record(
        &self,
        client: &crate::storage::Conn,
        outcome: &BatchOutcome,
        batch: &Batch,
        ledger: LedgerId,
        code: &str,
    ) -> Result<(), BoxError> {
        if self.failpoint == Some(Failpoint::AfterPublishBeforeProgress) {
            tracing::error!(
                acked = outcome.acked,
                ledger = %code,
                events = batch.kind.as_str(),
                "failpoint outbox-after-publish-before-progress: aborting"
            );
            std::process::abort();
        }
        let (last, published) = (
            batch.marks[outcome.acked - 1],
            &batch.names[outcome.acked - 1],
        );
        let recorded = match batch.kind {
            Kind::Postings => store::record_progress(client, last).await?,
            Kind::Accounts => store::record_account_progress(client, ledger, last).await?,
            Kind::Digests => store::record_digest_progress(client, ledger, last).await?,
        };
        if !recorded {
            return Err(format!(
                "the recorded progress of ledger {code:?}'s {} events is beyond {published}: another publisher is active",
                batch.kind.as_str()
            )
            .into());
        }
        let events = batch.kind.as_str();
        tracing::debug!(ledger = %code, events, published = outcome.acked, duplicates = outcome.duplicates, up_to = %published, "outbox events published");
        if outcome.duplicates > 0 {
            tracing::info!(
                ledger = %code,
                events,
                duplicates = outcome.duplicates,
                up_to = %published,
                "events already in the stream were re-published (after a crash); the broker dropped the copies"
            );
        }
        Ok(())
    }

    /// What a failure at the batch's event `acked` (after the `acked` acknowledged ones) of
    /// ledger `code` means: the pause of every ledger (none: the next goes on; these events
    /// are published again from there in the next round, or after their own backoff when
    /// halted).
    fn after(
        &mut self,
        failure: Failure,
        acked: usize,
        batch: &Batch,
        ledger: LedgerId,
        code: &str,
    ) -> Option<Duration> {
        let (event, events) = (&batch.names[acked], batch.kind.as_str());
        let error = match failure {
            Failure::ChainBroken(error) if acked > 0 => {
                tracing::debug!(%error, ledger = %code, events, event = %event, "publishing again from the first event the broker did not take");
                return None;
            }
            Failure::Transient {
                error,
                stream_missing,
            } => {
                if stream_missing {
                    self.broker.stream_lost();
                }
                let delay = self.backoff.next_delay();
                tracing::warn!(%error, ledger = %code, events, event = %event, retry_in = ?delay, "outbox publisher: broker unavailable or slow; retrying");
                return Some(delay);
            }
            Failure::ChainBroken(error) | Failure::Refused(error) => error,
        };
        let halt = self
            .halted
            .entry((ledger, batch.kind))
            .or_insert_with(|| Halt {
                backoff: Backoff::default(),
                until: Instant::now(),
            });
        let delay = halt.backoff.next_delay();
        halt.until = Instant::now() + delay;
        tracing::error!(
            %error,
            ledger = %code,
            events,
            event = %event,
            retry_in = ?delay,
            "outbox publisher HALTED this ledger's events of this kind: the broker refuses this event; the ledger's events of this kind behind it wait so their order is kept (the other ledgers, and its other kind, go on). Fix the stream (e.g. its max message size); publishing resumes once the broker accepts it"
        );
        None
    }
}

/// Logs the backlog: the totals, then the ledgers furthest behind (at most
/// [`BACKLOG_LOG_LEDGERS`]).
async fn log_backlog(client: &crate::storage::Conn) -> Result<(), BoxError> {
    let mut ledgers = store::ledger_backlogs(client, None).await?;
    let pending: i64 = ledgers.iter().map(|l| l.pending).sum();
    let oldest = ledgers.iter().filter_map(|l| l.oldest_age).max();
    ledgers.retain(|l| l.pending > 0);
    tracing::info!(
        pending,
        oldest_age_ms = oldest.map(|d| d.as_millis() as u64).unwrap_or(0),
        ledgers_behind = ledgers.len(),
        "outbox backlog"
    );
    ledgers.sort_by_key(|l| std::cmp::Reverse(l.oldest_age));
    for l in ledgers.iter().take(BACKLOG_LOG_LEDGERS) {
        tracing::info!(
            ledger = %l.code,
            pending = l.pending,
            oldest_age_ms = l.oldest_age.map(|d| d.as_millis() as u64).unwrap_or(0),
            published_sequence = l.published_sequence,
            "outbox backlog of a ledger behind"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledgers(ids: &[LedgerId]) -> Vec<LedgerWaiting> {
        ids.iter()
            .map(|&ledger| LedgerWaiting {
                ledger,
                postings: Some(ledger_core::ledger::stored(ledger, 0)),
                accounts: None,
                digests: None,
            })
            .collect()
    }

    fn order(ids: &[LedgerId], cursor: Option<LedgerId>) -> Vec<LedgerId> {
        in_turn(ledgers(ids), cursor)
            .iter()
            .map(|l| l.ledger)
            .collect()
    }

    #[test]
    fn a_round_begins_after_the_ledger_served_last_and_wraps_around() {
        assert_eq!(order(&[0, 3, 7], None), [0, 3, 7]);
        assert_eq!(order(&[0, 3, 7], Some(0)), [3, 7, 0]);
        assert_eq!(order(&[0, 3, 7], Some(4)), [7, 0, 3]);
        assert_eq!(order(&[0, 3, 7], Some(7)), [0, 3, 7]);
        assert_eq!(order(&[], Some(7)), Vec::<LedgerId>::new());
    }

    #[test]
    fn a_ledgers_posting_events_are_served_before_its_account_events_and_only_kinds_waiting() {
        let w = |postings, accounts| LedgerWaiting {
            ledger: 3,
            postings,
            accounts,
            digests: None,
        };
        let got = |w: LedgerWaiting| kinds(&w).collect::<Vec<_>>();
        assert_eq!(
            got(w(Some(9), Some(4))),
            [(Kind::Postings, 9), (Kind::Accounts, 4)]
        );
        assert_eq!(got(w(None, Some(0))), [(Kind::Accounts, 0)]);
        assert_eq!(got(w(Some(9), None)), [(Kind::Postings, 9)]);
    }
}
