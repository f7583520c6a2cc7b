//! The outbox publisher: delivers every accepted posting's event to NATS JetStream, once into
//! the stream, in `sequence` order, through crashes and broker outages.
//!
//! The writer stores one `outbox` row per accepted posting in the posting's own transaction.
//! This module (apart from the server; `ledger relay` runs it alone, `ledger serve --nats-url`
//! in-process) is the other half:
//!
//! * **Election.** A dedicated database session takes the advisory lock
//!   [`PUBLISHER_LOCK`](crate::storage::PUBLISHER_LOCK) with `pg_try_advisory_lock`; the others
//!   stand by and try again every [`STANDBY_RETRY`]. When the active publisher dies, its session
//!   ends, the lock is released and a stand-by takes over. Every read and every progress write
//!   goes through that same session, so progress is only ever recorded while the lock is held.
//! * **Loop.** Read at most [`PUBLISH_BATCH`] pending rows after the recorded progress (by
//!   `sequence`, never by a serial id), load their postings, publish each to
//!   [`SUBJECT`] with header `Nats-Msg-Id` = posting id and a protobuf
//!   `ledger.v1.PostingEvent` payload, await every JetStream ack, then record progress up to
//!   the last event acknowledged without a gap before it.
//! * **Order.** Publishes of a batch are pipelined; each after the first carries
//!   `Nats-Expected-Last-Msg-Id` = the previous posting id, so if the broker refuses one event,
//!   it also refuses those after it instead of storing them out of order. (The broker checks
//!   duplicates first, so a re-publish after a crash is still acknowledged as a duplicate.)
//! * **Crashes.** Killed before the ack: the event is still pending and goes out after the
//!   restart. Killed after the ack but before the progress write: the re-publish carries the
//!   same `Nats-Msg-Id` and the broker drops it, provided the restart happens within the
//!   stream's duplicate window ([`DEFAULT_DUPLICATE_WINDOW`], `--nats-duplicate-window`).
//! * **Broker down or slow.** Retries with capped exponential backoff ([`BACKOFF_CAP`]); the
//!   writer never waits for the publisher, so `Post` is unaffected.
//! * **Refusal.** An event the broker refuses for a non-transient reason (say it exceeds the
//!   stream's maximum message size) halts the publisher at that event, loudly (an error log
//!   line on every retry, naming the sequence, posting and reason): events behind it wait, so
//!   the order consumers see is kept. It resumes by itself once the broker accepts the event
//!   (fix the stream's configuration). Nothing is skipped or parked.
//! * **Retention.** Delivered rows older than the retention are deleted in batches of
//!   [`PRUNE_BATCH`]; the database refuses to delete a row that is not delivered.
//! * **Observability.** [`backlog`] gives the pending count and the age of the oldest pending
//!   event; the active publisher logs it every [`BACKLOG_LOG_INTERVAL`].
//!
//! Events carry the posting as it was committed, with `voided_by_posting_id` left empty and a
//! hold pending: a void is announced by its own event (whose `voids_posting_id` names the
//! voided posting), and so are a hold's capture, release and expiry (whose
//! `captures_hold_posting_id` or `releases_hold_posting_id` name the hold). Every event's
//! posting says what it is (`kind`).
//!
//! Failpoints for crash tests: with `LEDGER_FAILPOINT=outbox-before-publish` the process aborts
//! after loading a batch of pending events, before publishing; with
//! `LEDGER_FAILPOINT=outbox-after-publish-before-progress` it aborts after the broker
//! acknowledged a batch, before recording progress.

mod publisher;

use crate::grpc::convert::posting_to_pb;
use crate::grpc::pb;
pub use crate::storage::outbox::Backlog;
use crate::storage::StorageError;
use ledger_core::record::Posting;
pub use publisher::run;
use std::time::Duration;

/// JetStream subject of posting events.
pub const SUBJECT: &str = "ledger.postings";
/// JetStream stream, created if missing.
pub const STREAM: &str = "LEDGER";
/// Subjects of the stream when the publisher creates it.
pub const STREAM_SUBJECTS: &str = "ledger.>";

/// Default de-duplication window of the stream the publisher creates. It must cover the
/// publisher's restart time (a crash between ack and progress re-publishes after the restart).
pub const DEFAULT_DUPLICATE_WINDOW: Duration = Duration::from_secs(120);
/// Default time delivered outbox rows are kept.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 86_400);
/// Events per publish batch (limit PUBLISH_BATCH): progress is recorded once per batch.
pub const PUBLISH_BATCH: usize = 500;
/// Outbox rows deleted per retention statement (limit PRUNE_BATCH).
pub const PRUNE_BATCH: i64 = 1_000;
/// Longest interval between retention runs.
pub const PRUNE_INTERVAL_MAX: Duration = Duration::from_secs(60);
/// How often the active publisher looks for new events when the outbox is empty.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// How often a stand-by publisher tries to take over.
pub const STANDBY_RETRY: Duration = Duration::from_secs(1);
/// First retry delay after a broker or database failure; it doubles up to [`BACKOFF_CAP`].
pub const BACKOFF_INITIAL: Duration = Duration::from_millis(100);
/// Longest retry delay.
pub const BACKOFF_CAP: Duration = Duration::from_secs(5);
/// Longest wait for the JetStream ack of a publish (and for other JetStream requests).
pub const ACK_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the active publisher logs the backlog.
pub const BACKLOG_LOG_INTERVAL: Duration = Duration::from_secs(30);
/// Environment variable naming a failpoint (crash tests only).
pub const FAILPOINT_ENV: &str = "LEDGER_FAILPOINT";

/// Replicas of the stream the publisher creates, by default (`--nats-replicas`).
pub const DEFAULT_STREAM_REPLICAS: usize = 1;

/// The servers of a `--nats-url` (comma-separated), each parsed.
pub fn nats_servers(url: &str) -> Result<Vec<async_nats::ServerAddr>, String> {
    url.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<async_nats::ServerAddr>()
                .map_err(|e| format!("--nats-url: {s:?} is not a NATS server address: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()
        .and_then(|v| {
            if v.is_empty() {
                Err("--nats-url names no server".into())
            } else {
                Ok(v)
            }
        })
}

/// How to run the publisher.
#[derive(Clone, Debug)]
pub struct PublisherOptions {
    pub database_url: String,
    /// The login of its session instead of the URL's user, and the role it acts as: those of
    /// the server's pool for `serve --nats-url` (it needs only `ledger_app`'s grants).
    pub db_login: Option<String>,
    pub db_role: Option<String>,
    /// One NATS server or several, comma-separated (a cluster): the client connects to one
    /// and moves to another when it is lost.
    pub nats_url: String,
    /// Replicas of the stream when the publisher creates it (`--nats-replicas`; 3 on a
    /// three-server cluster rides through the loss of one).
    pub replicas: usize,
    /// De-duplication window of the stream, when the publisher creates it.
    pub duplicate_window: Duration,
    /// Delivered outbox rows older than this are deleted.
    pub retention: Duration,
    /// A crash test's failpoint (`LEDGER_FAILPOINT`), never set in production.
    pub failpoint: Option<Failpoint>,
}

/// The backlog of the outbox: pending events and the age of the oldest one.
pub async fn backlog(conn: &crate::storage::Conn) -> Result<Backlog, StorageError> {
    crate::storage::outbox::backlog(conn).await
}

/// Spawns the publisher as a task of this process (`ledger serve --nats-url`). It stops after
/// its current batch once `shutdown` turns true.
pub fn spawn(
    opts: PublisherOptions,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if let Err(e) = run(opts, shutdown).await {
            tracing::error!(error = %e, "outbox publisher failed to start");
        }
    })
}

/// The event of a posting: the `ledger.v1.PostingEvent` payload, protobuf-encoded.
///
/// `voided_by_posting_id` is always empty and a hold is pending (even once its expiry time
/// has passed): the event describes the posting as committed, and a later void, capture,
/// release or expiry announces itself with its own event.
pub fn event_payload(p: &Posting) -> Vec<u8> {
    let mut committed = p.clone();
    committed.voided_by_posting_id = None;
    if let Some(h) = committed.hold.as_mut() {
        h.closed_by = None;
        h.lapsed = false;
    }
    let posting = posting_to_pb(&committed, ledger_core::ledger::DEFAULT_LEDGER);
    prost::Message::encode_to_vec(&pb::PostingEvent {
        ledger: String::new(),
        posting: Some(posting),
    })
}

/// A place where the publisher can be made to crash (tests), named by [`FAILPOINT_ENV`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failpoint {
    /// After loading a batch of pending events, before publishing any.
    BeforePublish,
    /// After the broker acknowledged a batch, before recording progress.
    AfterPublishBeforeProgress,
}

impl Failpoint {
    /// Parses a failpoint name.
    pub fn parse(s: &str) -> Result<Failpoint, String> {
        match s {
            "outbox-before-publish" => Ok(Failpoint::BeforePublish),
            "outbox-after-publish-before-progress" => Ok(Failpoint::AfterPublishBeforeProgress),
            other => Err(format!(
                "unknown {FAILPOINT_ENV} {other:?}: expected outbox-before-publish or \
                 outbox-after-publish-before-progress"
            )),
        }
    }

    /// The failpoint named, if any (an empty name arms none).
    pub fn parse_optional(s: Option<&str>) -> Result<Option<Failpoint>, String> {
        match s {
            None | Some("") => Ok(None),
            Some(s) => Failpoint::parse(s).map(Some),
        }
    }
}

/// Parses a duration such as `500ms`, `30s`, `2m`, `12h`, `7d` (a bare number is seconds).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits.parse().map_err(|_| {
        format!("invalid duration {s:?}: expected a number and a unit (ms, s, m, h, d), e.g. 2m")
    })?;
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "" | "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => {
            return Err(format!(
                "invalid duration {s:?}: unit {unit:?} is not one of ms, s, m, h, d"
            ))
        }
    };
    n.checked_mul(unit_ms)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("invalid duration {s:?}: too large"))
}

/// Capped exponential backoff: [`BACKOFF_INITIAL`], doubling, at most [`BACKOFF_CAP`].
#[derive(Debug)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            next: BACKOFF_INITIAL,
        }
    }
}

impl Backoff {
    /// The delay before the next retry (and doubles the one after).
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(BACKOFF_CAP);
        d
    }

    /// Back to the first delay after a success.
    pub fn reset(&mut self) {
        self.next = BACKOFF_INITIAL;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units_and_refuse_anything_else() {
        let cases: &[(&str, Result<Duration, ()>)] = &[
            ("500ms", Ok(Duration::from_millis(500))),
            ("30s", Ok(Duration::from_secs(30))),
            ("45", Ok(Duration::from_secs(45))),
            ("2m", Ok(Duration::from_secs(120))),
            ("12h", Ok(Duration::from_secs(12 * 3600))),
            ("7d", Ok(Duration::from_secs(7 * 86_400))),
            ("0s", Ok(Duration::ZERO)),
            ("", Err(())),
            ("m", Err(())),
            ("2w", Err(())),
            ("-1s", Err(())),
            ("1.5s", Err(())),
            ("99999999999999999999d", Err(())),
        ];
        for (input, want) in cases {
            let got = parse_duration(input);
            match want {
                Ok(d) => assert_eq!(got.as_ref(), Ok(d), "{input:?}"),
                Err(()) => assert!(got.is_err(), "{input:?} gave {got:?}"),
            }
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_and_resets() {
        let mut b = Backoff::default();
        let delays: Vec<Duration> = (0..10).map(|_| b.next_delay()).collect();
        assert_eq!(delays[0], BACKOFF_INITIAL);
        assert_eq!(delays[1], BACKOFF_INITIAL * 2);
        assert!(delays.windows(2).all(|w| w[1] >= w[0]));
        assert_eq!(*delays.last().unwrap(), BACKOFF_CAP);
        b.reset();
        assert_eq!(b.next_delay(), BACKOFF_INITIAL);
    }

    #[test]
    fn failpoints_parse_by_name_and_unknown_names_are_refused() {
        assert_eq!(
            Failpoint::parse("outbox-before-publish"),
            Ok(Failpoint::BeforePublish)
        );
        assert_eq!(
            Failpoint::parse("outbox-after-publish-before-progress"),
            Ok(Failpoint::AfterPublishBeforeProgress)
        );
        assert!(Failpoint::parse("outbox-typo").is_err());
    }

    #[test]
    fn an_event_shows_the_posting_as_committed_not_voided_and_its_hold_pending() {
        use ledger_core::amount::Amount;
        use ledger_core::record::{CloseKind, HoldState, PostedLeg};
        use ledger_core::Direction;
        let t = time::macros::datetime!(2026-11-30 12:00 UTC);
        let p = Posting {
            posting_id: uuid::Uuid::now_v7(),
            sequence: 7,
            caller: "anonymous".into(),
            idempotency_key: "k".into(),
            legs: vec![
                PostedLeg {
                    account: "a".into(),
                    direction: Direction::Debit,
                    amount: Amount::from_minor(100, 2),
                },
                PostedLeg {
                    account: "b".into(),
                    direction: Direction::Credit,
                    amount: Amount::from_minor(100, 2),
                },
            ],
            effective_at: t,
            recorded_at: t,
            memo: "m".into(),
            metadata: Default::default(),
            voids_posting_id: None,
            voided_by_posting_id: Some(uuid::Uuid::now_v7()),
            void_reason: None,
            hold: Some(HoldState {
                expires_at: Some(t),
                closed_by: Some((uuid::Uuid::now_v7(), CloseKind::Capture)),
                lapsed: true,
            }),
            closes: None,
        };
        let ev: pb::PostingEvent = prost::Message::decode(event_payload(&p).as_slice()).unwrap();
        let got = ev.posting.unwrap();
        let mut want = posting_to_pb(&p, ledger_core::ledger::DEFAULT_LEDGER);
        assert!(!want.voided_by_posting_id.is_empty() && !want.captured_by_posting_id.is_empty());
        want.voided_by_posting_id.clear();
        want.captured_by_posting_id.clear();
        want.hold_status = pb::HoldStatus::Pending as i32;
        assert_eq!(got, want);
        assert_eq!(
            got.kind,
            pb::PostingKind::Hold as i32,
            "and says what it is"
        );
    }
}
