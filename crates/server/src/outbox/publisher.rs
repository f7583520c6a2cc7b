//! The publisher loop: election, then read → publish → await acks → record progress.

use super::{
    event_payload, Backoff, Failpoint, PublisherOptions, ACK_TIMEOUT, BACKLOG_LOG_INTERVAL,
    POLL_INTERVAL, PRUNE_BATCH, PRUNE_INTERVAL_MAX, PUBLISH_BATCH, STANDBY_RETRY, STREAM,
    STREAM_SUBJECTS, SUBJECT,
};
use crate::storage::{self, outbox as store, read};
use async_nats::jetstream::{self, context::PublishErrorKind, stream};
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

/// Why a batch stopped before every event was acknowledged.
#[derive(Debug)]
enum Failure {
    /// The broker refused an event because the one before it is not the stream's last (an
    /// earlier event of the batch was a duplicate after a broker restart, or something else
    /// wrote to the stream): publish again from it, without the header.
    ChainBroken(String),
    /// Broker unreachable, slow, or the stream missing: retry after a backoff.
    Transient { error: String, stream_missing: bool },
    /// The broker refuses the event itself: halt here (loudly) and retry after a backoff.
    Refused(String),
}

fn classify(e: jetstream::context::PublishError) -> Failure {
    let error = e.to_string();
    match e.kind() {
        PublishErrorKind::WrongLastMessageId => Failure::ChainBroken(error),
        PublishErrorKind::StreamNotFound => Failure::Transient {
            error,
            stream_missing: true,
        },
        PublishErrorKind::TimedOut
        | PublishErrorKind::BrokenPipe
        | PublishErrorKind::MaxAckPending => Failure::Transient {
            error,
            stream_missing: false,
        },
        // An event larger than the broker's max_payload can never go out as it is.
        PublishErrorKind::WrongLastSequence
        | PublishErrorKind::MaxPayloadExceeded
        | PublishErrorKind::Other => Failure::Refused(error),
    }
}

#[derive(Debug, Default)]
struct BatchOutcome {
    /// Events acknowledged from the start of the batch, without a gap.
    acked: usize,
    /// Of those, how many the broker reported as duplicates (already in the stream).
    duplicates: usize,
    /// Why the rest was not acknowledged.
    failure: Option<Failure>,
}

/// Publishes a batch (pipelined), then awaits the acks in order; stops at the first failure.
async fn publish_batch(js: &jetstream::Context, events: &[(String, Vec<u8>)]) -> BatchOutcome {
    let mut acks = Vec::with_capacity(events.len());
    let mut send_failure = None;
    for (i, (id, payload)) in events.iter().enumerate() {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_ID, id.as_str());
        if i > 0 {
            headers.insert(
                async_nats::header::NATS_EXPECTED_LAST_MESSAGE_ID,
                events[i - 1].0.as_str(),
            );
        }
        // Sending can wait (the client's buffer is full while it is disconnected): bounded.
        let send = js.publish_with_headers(SUBJECT, headers, payload.clone().into());
        match tokio::time::timeout(ACK_TIMEOUT, send).await {
            Ok(Ok(ack)) => acks.push(ack),
            Ok(Err(e)) => {
                send_failure = Some(classify(e));
                break;
            }
            Err(_) => {
                send_failure = Some(Failure::Transient {
                    error: format!("publish not sent within {ACK_TIMEOUT:?}"),
                    stream_missing: false,
                });
                break;
            }
        }
    }
    let mut outcome = BatchOutcome::default();
    for ack in acks {
        match ack.await {
            Ok(ack) => {
                outcome.acked += 1;
                outcome.duplicates += usize::from(ack.duplicate);
            }
            Err(e) => {
                outcome.failure = Some(classify(e));
                return outcome;
            }
        }
    }
    outcome.failure = send_failure;
    outcome
}

/// The events of one batch: the outbox rows, their sequences, and (posting id, payload).
struct Batch {
    pending: Vec<store::PendingEvent>,
    sequences: Vec<i64>,
    events: Vec<(String, Vec<u8>)>,
}

/// The pending events after `progress`, at most [`PUBLISH_BATCH`], with their postings (none
/// pending: `None`).
async fn load_batch(
    client: &crate::storage::Conn,
    progress: i64,
) -> Result<Option<Batch>, BoxError> {
    let pending = store::pending(client, progress, PUBLISH_BATCH as i64).await?;
    if pending.is_empty() {
        return Ok(None);
    }
    for (i, ev) in pending.iter().enumerate() {
        assert_eq!(
            ev.sequence,
            progress + 1 + i as i64,
            "outbox rows must follow the published sequence {progress} without a gap"
        );
    }
    let sequences: Vec<i64> = pending.iter().map(|e| e.sequence).collect();
    let postings = read::postings_by_sequence(client, &sequences).await?;
    assert_eq!(
        postings.len(),
        pending.len(),
        "outbox rows without postings"
    );
    let events = pending
        .iter()
        .zip(&postings)
        .map(|(ev, p)| {
            assert_eq!(
                ev.posting_id, p.posting_id,
                "outbox row {} names another posting",
                ev.sequence
            );
            (p.posting_id.to_string(), event_payload(p))
        })
        .collect();
    Ok(Some(Batch {
        pending,
        sequences,
        events,
    }))
}

/// The active publisher's periodic chores: the backlog log line and pruning.
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
            // One bounded statement per turn, so pruning a large backlog of delivered rows
            // interleaves with publishing.
            let n = store::prune_delivered(client, retention, PRUNE_BATCH).await?;
            if n > 0 {
                tracing::info!(deleted = n, retention = ?retention, "outbox: delivered events past retention removed");
            }
            if n < PRUNE_BATCH as u64 {
                self.next_prune = Instant::now() + self.prune_every;
            }
        }
        Ok(())
    }
}

/// The broker connection of the active publisher.
struct Broker {
    js: jetstream::Context,
    stream_ready: bool,
}

/// The active publisher's state.
struct Active<'a> {
    opts: &'a PublisherOptions,
    failpoint: Option<Failpoint>,
    broker: Option<Broker>,
    backoff: Backoff,
}

impl<'a> Active<'a> {
    fn new(opts: &'a PublisherOptions, failpoint: Option<Failpoint>) -> Self {
        Active {
            opts,
            failpoint,
            broker: None,
            backoff: Backoff::default(),
        }
    }

    /// Publishes until shutdown (`Ok`) or until the database session fails (`Err`: the lock
    /// may be lost, so stand by again).
    async fn run(
        &mut self,
        client: &crate::storage::Conn,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<(), BoxError> {
        let mut progress = store::published_sequence(client).await?;
        tracing::info!(published_sequence = progress, nats_url = %self.opts.nats_url, "outbox publisher active");
        let mut chores = Chores::new(self.opts.retention);
        loop {
            if stopping(shutdown) {
                return Ok(());
            }
            chores.run(client, self.opts.retention).await?;
            let pause = self.turn(client, &mut progress).await?;
            if let Some(d) = pause {
                if sleep_or_stop(shutdown, d).await {
                    return Ok(());
                }
            }
        }
    }

    /// One turn: the pending events from `progress` on, published, progress recorded. The
    /// pause before the next turn (none: at once).
    async fn turn(
        &mut self,
        client: &crate::storage::Conn,
        progress: &mut i64,
    ) -> Result<Option<Duration>, BoxError> {
        let Some(batch) = load_batch(client, *progress).await? else {
            return Ok(Some(POLL_INTERVAL));
        };
        if self.failpoint == Some(Failpoint::BeforePublish) {
            tracing::error!(
                first_sequence = batch.sequences[0],
                "failpoint outbox-before-publish: aborting"
            );
            std::process::abort();
        }
        let js = match self.broker().await {
            Ok(js) => js,
            Err(e) => {
                let delay = self.backoff.next_delay();
                tracing::warn!(error = %e, retry_in = ?delay, pending_from = batch.sequences[0], "outbox publisher: broker unavailable");
                return Ok(Some(delay));
            }
        };
        let outcome = publish_batch(&js, &batch.events).await;
        if outcome.acked > 0 {
            self.record(client, &outcome, &batch.sequences, progress)
                .await?;
        }
        let Some(failure) = outcome.failure else {
            self.backoff.reset();
            return Ok(None);
        };
        let at = &batch.pending[outcome.acked];
        Ok(self.after(failure, outcome.acked, at))
    }

    /// Records the progress of the acknowledged events.
    async fn record(
        &self,
        client: &crate::storage::Conn,
        outcome: &BatchOutcome,
        sequences: &[i64],
        progress: &mut i64,
    ) -> Result<(), BoxError> {
        if self.failpoint == Some(Failpoint::AfterPublishBeforeProgress) {
            tracing::error!(
                acked = outcome.acked,
                "failpoint outbox-after-publish-before-progress: aborting"
            );
            std::process::abort();
        }
        let last = sequences[outcome.acked - 1];
        if !store::record_progress(client, last).await? {
            return Err(format!(
                "the recorded progress is beyond sequence {last}: another publisher is active"
            )
            .into());
        }
        *progress = last;
        tracing::debug!(
            published = outcome.acked,
            duplicates = outcome.duplicates,
            published_sequence = last,
            "outbox events published"
        );
        if outcome.duplicates > 0 {
            tracing::info!(
                duplicates = outcome.duplicates,
                published_sequence = last,
                "events already in the stream were re-published (after a crash); the broker dropped the copies"
            );
        }
        Ok(())
    }

    /// What a failure at event `at` (after `acked` acknowledged ones) means: the pause before
    /// publishing again from it (none: at once).
    fn after(
        &mut self,
        failure: Failure,
        acked: usize,
        at: &store::PendingEvent,
    ) -> Option<Duration> {
        if let Failure::ChainBroken(error) = &failure {
            if acked > 0 {
                tracing::debug!(%error, sequence = at.sequence, "publishing again from the first event the broker did not take");
                return None;
            }
        }
        let delay = self.backoff.next_delay();
        match failure {
            Failure::ChainBroken(error) => {
                tracing::warn!(%error, sequence = at.sequence, retry_in = ?delay, "outbox publisher: the broker refused the first event of a batch as out of order");
            }
            Failure::Transient {
                error,
                stream_missing,
            } => {
                // The client reconnects by itself (a dropped one would too, and flush its
                // queue later): keep it, but create the stream again if it went missing.
                if let (true, Some(b)) = (stream_missing, &mut self.broker) {
                    b.stream_ready = false;
                }
                tracing::warn!(%error, sequence = at.sequence, retry_in = ?delay, "outbox publisher: broker unavailable or slow; retrying");
            }
            Failure::Refused(error) => tracing::error!(
                %error,
                sequence = at.sequence,
                posting_id = %at.posting_id,
                retry_in = ?delay,
                "outbox publisher HALTED: the broker refuses this event; the events behind it wait so their order is kept. Fix the stream (e.g. its max message size); publishing resumes once the broker accepts it"
            ),
        }
        Some(delay)
    }

    /// The JetStream context, connecting and creating the stream if needed.
    async fn broker(&mut self) -> Result<jetstream::Context, BoxError> {
        if self.broker.is_none() {
            let servers = super::nats_servers(&self.opts.nats_url)?;
            let client = async_nats::ConnectOptions::new()
                .name("ledger-outbox")
                .connection_timeout(ACK_TIMEOUT)
                .connect(servers)
                .await?;
            let js = jetstream::context::ContextBuilder::new()
                .timeout(ACK_TIMEOUT)
                .build(client);
            self.broker = Some(Broker {
                js,
                stream_ready: false,
            });
        }
        let broker = self.broker.as_mut().expect("connected");
        if !broker.stream_ready {
            ensure_stream(&broker.js, self.opts.duplicate_window, self.opts.replicas).await?;
            broker.stream_ready = true;
        }
        Ok(broker.js.clone())
    }
}

/// Creates the stream if missing; warns when an existing one de-duplicates over a shorter
/// window than configured.
async fn ensure_stream(
    js: &jetstream::Context,
    duplicate_window: Duration,
    replicas: usize,
) -> Result<(), BoxError> {
    let mut s = js
        .get_or_create_stream(stream::Config {
            name: STREAM.to_string(),
            subjects: vec![STREAM_SUBJECTS.to_string()],
            storage: stream::StorageType::File,
            duplicate_window,
            num_replicas: replicas,
            ..Default::default()
        })
        .await?;
    let info = s.info().await?;
    if info.config.duplicate_window < duplicate_window {
        tracing::warn!(
            stream = STREAM,
            stream_window = ?info.config.duplicate_window,
            configured = ?duplicate_window,
            "the existing stream de-duplicates over a shorter window than configured: a publisher restart longer than it may publish an event twice"
        );
    }
    if info.config.num_replicas != replicas {
        tracing::warn!(
            stream = STREAM,
            stream_replicas = info.config.num_replicas,
            configured = replicas,
            "the existing stream has another number of replicas than --nats-replicas; the broker keeps its own (change it with the nats CLI)"
        );
    }
    tracing::info!(
        stream = STREAM,
        replicas = info.config.num_replicas,
        messages = info.state.messages,
        duplicate_window = ?info.config.duplicate_window,
        "JetStream stream ready"
    );
    Ok(())
}

async fn log_backlog(client: &crate::storage::Conn) -> Result<(), BoxError> {
    let b = store::backlog(client).await?;
    tracing::info!(
        pending = b.pending,
        oldest_age_ms = b.oldest_age.map(|d| d.as_millis() as u64).unwrap_or(0),
        published_sequence = b.published_sequence,
        "outbox backlog"
    );
    Ok(())
}
