//! The outbox publisher: delivers every accepted posting's event, and every account version's
//! that `UpdateAccount` records, to NATS JetStream, once into the stream, in order within each
//! ledger, through crashes and broker outages.
//!
//! The writer stores one `outbox` row per accepted posting, and one `account_outbox` row per
//! account version, in the batch's own transaction. This module (apart from the server;
//! `ledger relay` runs it alone, `ledger serve --nats-url` in-process) is the other half:
//!
//! * **Election.** A dedicated database session takes the advisory lock
//!   [`PUBLISHER_LOCK`](crate::storage::PUBLISHER_LOCK) with `pg_try_advisory_lock`; the others
//!   stand by and try again every [`STANDBY_RETRY`]. When the active publisher dies, its session
//!   ends, the lock is released and a stand-by takes over. Every read and every progress write
//!   goes through that same session, so progress is only ever recorded while the lock is held.
//! * **Subjects.** A ledger's posting events go to [`subject`]`(code)` =
//!   `ledger.postings.<code>`, its account events to [`account_subject`]`(code)` =
//!   `ledger.accounts.<code>`, in the stream [`STREAM`] with subjects
//!   [`ALL_STREAM_SUBJECTS`] (`ledger.postings.>`, `ledger.accounts.>`). A stream made by an
//!   earlier version (subjects `ledger.>` or `ledger.postings`, [`OLD_STREAM_SUBJECTS`]; or
//!   `ledger.postings.>` alone) gets its subjects changed to these, keeping its events, when
//!   the publisher first finds it.
//! * **Rounds.** Each ledger has its own progress (`outbox_progress`, one row per ledger). A
//!   round takes the ledgers with events past their progress and serves each in turn, one
//!   batch of each kind each, starting after the ledger served last (round-robin): a ledger
//!   with a large backlog delays another by one batch of each kind at most. A batch is at most [`PUBLISH_BATCH`] of one
//!   ledger's pending rows after its progress (by `sequence`, never by a serial id), their
//!   postings loaded, each published with header `Nats-Msg-Id` = posting id and a protobuf
//!   `ledger.v1.PostingEvent` payload naming the ledger; every JetStream ack is awaited, then
//!   that ledger's progress is recorded up to the last event acknowledged without a gap.
//! * **Account events.** A ledger's account events are a second queue of its own, served in
//!   the same turn after its posting events' batch: at most [`PUBLISH_BATCH`] of its
//!   `account_outbox` rows after its own progress (`account_outbox_progress`), by `event_id`
//!   (commit order within a ledger), each with its account at that version, published with
//!   `Nats-Msg-Id` = [`account_msg_id`] (`account:<ledger>:<code>:<version>`) and a protobuf
//!   `ledger.v1.AccountEvent` payload, chained, acknowledged and recorded as posting events
//!   are. Crashes, refusals (which halt that ledger's account events alone) and retention are
//!   as below.
//! * **Order.** Batches go out one after another. The publishes of a batch are pipelined; each
//!   after the first carries `Nats-Expected-Last-Msg-Id` = the previous event's `Nats-Msg-Id`
//!   (the stream's last message, as only this batch is in flight), so if the broker
//!   refuses one event, it also refuses those after it instead of storing them out of order.
//!   The first event of a batch follows the ledger's acknowledged progress. (The broker checks
//!   duplicates first, so a re-publish after a crash is still acknowledged as a duplicate.)
//! * **Crashes.** Killed before the ack: the event is still pending and goes out after the
//!   restart. Killed after the ack but before the progress write: the re-publish carries the
//!   same `Nats-Msg-Id` and the broker drops it, provided the restart happens within the
//!   stream's duplicate window ([`DEFAULT_DUPLICATE_WINDOW`], `--nats-duplicate-window`).
//! * **Broker down or slow.** Retries with capped exponential backoff ([`BACKOFF_CAP`]); the
//!   writer never waits for the publisher, so `Post` is unaffected.
//! * **Refusal.** An event the broker refuses for a non-transient reason (say it exceeds the
//!   stream's maximum message size) halts its ledger's events of that kind at that event,
//!   loudly (an error log line on every retry, naming the ledger, the kind, the event and the
//!   reason): the ledger's events of that kind behind it wait, so the order its consumers see
//!   is kept, while its other kind and the other ledgers go on. It
//!   resumes by itself once the broker accepts the event (fix the stream's configuration).
//!   Nothing is skipped or parked.
//! * **Retention.** Delivered rows of both outboxes older than the retention are deleted in
//!   batches of [`PRUNE_BATCH`], each ledger's by its own progress; the database refuses to
//!   delete a row its ledger has not delivered.
//! * **Observability.** [`backlog`] gives the totals over every ledger (pending events of both
//!   kinds, the age of the oldest, the ledgers behind): the metrics show the totals alone, so
//!   they stay a fixed set however many ledgers there are. [`ledger_backlog`] gives one
//!   ledger's; the active publisher logs the totals and the [`BACKLOG_LOG_LEDGERS`] ledgers
//!   furthest behind every [`BACKLOG_LOG_INTERVAL`].
//!
//! Events carry the posting as it was committed, with `voided_by_posting_id` left empty and a
//! hold pending: a void is announced by its own event (whose `voids_posting_id` names the
//! voided posting), and so are a hold's capture, release and expiry (whose
//! `captures_hold_posting_id` or `releases_hold_posting_id` name the hold). Every event's
//! posting says what it is (`kind`), its ledger, and its sequence within that ledger.
//!
//! Failpoints for crash tests: with `LEDGER_FAILPOINT=outbox-before-publish` the process aborts
//! after loading a batch of pending events, before publishing; with
//! `LEDGER_FAILPOINT=outbox-after-publish-before-progress` it aborts after the broker
//! acknowledged a batch, before recording progress.

mod batch;
mod broker;
mod publisher;

use crate::grpc::convert::{account_to_pb, posting_to_pb};
use crate::grpc::pb;
pub use crate::storage::outbox::{Backlog, LedgerBacklog};
use crate::storage::StorageError;
use ledger_core::ledger::LedgerId;
use ledger_core::record::Posting;
use ledger_core::terms::AccountVersion;
use ledger_core::Account;
pub use publisher::run;
use std::time::Duration;

/// The subjects of posting events begin so: a ledger's are on [`subject`]`(code)`.
pub const SUBJECT_PREFIX: &str = "ledger.postings";
/// The subjects of account events begin so: a ledger's are on [`account_subject`]`(code)`.
pub const ACCOUNT_SUBJECT_PREFIX: &str = "ledger.accounts";
/// JetStream stream, created if missing.
pub const STREAM: &str = "LEDGER";
/// Subjects of every ledger's posting events (one of [`ALL_STREAM_SUBJECTS`]).
pub const STREAM_SUBJECTS: &str = "ledger.postings.>";
/// Subjects of every ledger's account events (one of [`ALL_STREAM_SUBJECTS`]).
pub const ACCOUNT_STREAM_SUBJECTS: &str = "ledger.accounts.>";
/// The subjects of digests begin so: a ledger's are on [`digest_subject`]`(code)`.
pub const DIGEST_SUBJECT_PREFIX: &str = "ledger.digests";
/// Subjects of every ledger's digests (one of [`ALL_STREAM_SUBJECTS`]).
pub const DIGEST_STREAM_SUBJECTS: &str = "ledger.digests.>";
/// Subjects of the stream: every ledger's posting and account events and digests.
pub const ALL_STREAM_SUBJECTS: [&str; 3] = [
    STREAM_SUBJECTS,
    ACCOUNT_STREAM_SUBJECTS,
    DIGEST_STREAM_SUBJECTS,
];
/// Subjects an earlier version gave the stream (its events were all on `ledger.postings`):
/// the publisher replaces them by [`ALL_STREAM_SUBJECTS`] in a stream that has them.
pub const OLD_STREAM_SUBJECTS: [&str; 2] = ["ledger.>", "ledger.postings"];

/// The subject of ledger `ledger_code`'s posting events: `ledger.postings.<code>` (a ledger
/// code is of a-z 0-9 _ -, so it is one subject token).
pub fn subject(ledger_code: &str) -> String {
    format!("{SUBJECT_PREFIX}.{ledger_code}")
}

/// The subject of ledger `ledger_code`'s account events: `ledger.accounts.<code>`.
pub fn account_subject(ledger_code: &str) -> String {
    format!("{ACCOUNT_SUBJECT_PREFIX}.{ledger_code}")
}

/// The subject of ledger `ledger_code`'s digests: `ledger.digests.<code>`.
pub fn digest_subject(ledger_code: &str) -> String {
    format!("{DIGEST_SUBJECT_PREFIX}.{ledger_code}")
}

/// The `Nats-Msg-Id` of ledger `ledger_code`'s digest of size `size`: `digest:<ledger>:<size>`
/// (unique: a ledger has one tree of each size).
pub fn digest_msg_id(ledger_code: &str, size: i64) -> String {
    format!("digest:{ledger_code}:{size}")
}

/// A digest's payload: the `Digest` message.
pub fn digest_payload(
    ledger_code: &str,
    size: i64,
    root: &[u8; 32],
    recorded_at: time::OffsetDateTime,
) -> Vec<u8> {
    prost::Message::encode_to_vec(&pb::Digest {
        ledger: ledger_code.to_owned(),
        sequence: size as u64,
        root: ledger_core::journal::to_hex(root),
        recorded_at: Some(crate::grpc::convert::time_to_pb(recorded_at)),
    })
}

/// The `Nats-Msg-Id` of the event of version `version` of account `account_code` of ledger
/// `ledger_code`: `account:<ledger>:<code>:<version>` (unique, as a version is recorded once;
/// never a posting id).
pub fn account_msg_id(ledger_code: &str, account_code: &str, version: i64) -> String {
    format!("account:{ledger_code}:{account_code}:{version}")
}

/// Default de-duplication window of the stream the publisher creates. It must cover the
/// publisher's restart time (a crash between ack and progress re-publishes after the restart).
pub const DEFAULT_DUPLICATE_WINDOW: Duration = Duration::from_secs(120);
/// Default time delivered outbox rows are kept.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 86_400);
/// Events per publish batch (limit PUBLISH_BATCH): progress is recorded once per batch.
pub const PUBLISH_BATCH: usize = 500;
/// Outbox rows deleted per retention statement, of either outbox (limit PRUNE_BATCH).
pub const PRUNE_BATCH: i64 = 1_000;
/// Longest interval between retention runs.
pub const PRUNE_INTERVAL_MAX: Duration = Duration::from_secs(60);
/// How often the active publisher looks for new events when the outbox is empty, at least
/// (limit POLL_INTERVAL): its shortest pause after a round that found none.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// After a round that found no events, the publisher pauses this many times as long as the
/// look took (limit IDLE_POLL_COST_RATIO): an idle publisher spends at most 1/50 (2 %) of its
/// time looking, however many ledgers it looks over (one index probe each: 11 ms with
/// 10,001 ledgers, measured).
pub const IDLE_POLL_COST_RATIO: u32 = 50;
/// The longest pause between looks of an idle publisher (limit IDLE_POLL_MAX): the most an
/// event written after a quiet spell waits before its ledger is looked at.
pub const IDLE_POLL_MAX: Duration = Duration::from_secs(2);

/// The pause after a round that found no events, whose look for them took `look`.
pub fn idle_pause(look: Duration) -> Duration {
    look.saturating_mul(IDLE_POLL_COST_RATIO)
        .clamp(POLL_INTERVAL, IDLE_POLL_MAX)
}
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
/// Ledgers the backlog log line names, at most: those furthest behind (limit
/// BACKLOG_LOG_LEDGERS).
pub const BACKLOG_LOG_LEDGERS: usize = 5;
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

/// The backlog of the whole outbox: pending events of every ledger, the age of the oldest
/// one, and how many ledgers have some.
pub async fn backlog(conn: &crate::storage::Conn) -> Result<Backlog, StorageError> {
    crate::storage::outbox::backlog(conn).await
}

/// The backlog of one ledger: its pending events, the age of the oldest, its progress.
pub async fn ledger_backlog(
    conn: &crate::storage::Conn,
    ledger: LedgerId,
) -> Result<LedgerBacklog, StorageError> {
    crate::storage::outbox::ledger_backlog(conn, ledger).await
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

/// The event of a posting of ledger `ledger_code`: the `ledger.v1.PostingEvent` payload,
/// protobuf-encoded, naming the ledger, its posting's sequence the one within that ledger.
///
/// `voided_by_posting_id` is always empty and a hold is pending (even once its expiry time
/// has passed): the event describes the posting as committed, and a later void, capture,
/// release or expiry announces itself with its own event.
pub fn event_payload(p: &Posting, ledger_code: &str) -> Vec<u8> {
    let mut committed = p.clone();
    committed.voided_by_posting_id = None;
    if let Some(h) = committed.hold.as_mut() {
        h.closed_by = None;
        h.lapsed = false;
    }
    let posting = posting_to_pb(&committed, ledger_code);
    prost::Message::encode_to_vec(&pb::PostingEvent {
        ledger: ledger_code.to_owned(),
        posting: Some(posting),
    })
}

/// The event of version `v` of account `a` of ledger `ledger_code`: the
/// `ledger.v1.AccountEvent` payload, protobuf-encoded, the account as `GetAccount` shows it
/// at that version (its terms and the version's own facts), naming the ledger.
pub fn account_event_payload(a: &Account, v: &AccountVersion, ledger_code: &str) -> Vec<u8> {
    prost::Message::encode_to_vec(&pb::AccountEvent {
        account: Some(account_to_pb(a, v, ledger_code)),
        ledger: ledger_code.to_owned(),
    })
}

/// A place where the publisher can be made to crash (tests), named by [`FAILPOINT_ENV`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failpoint {
    /// After loading a batch of pending events (of postings or accounts), before publishing
    /// any.
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
    fn an_idle_publisher_pauses_fifty_times_as_long_as_its_look_took_within_its_bounds() {
        let ms = Duration::from_millis;
        let cases = [
            (Duration::ZERO, POLL_INTERVAL),
            (ms(1), ms(50)),
            (ms(11), ms(550)),
            (ms(30), ms(1500)),
            (ms(40), IDLE_POLL_MAX),
            (Duration::from_secs(3600), IDLE_POLL_MAX),
            (Duration::MAX, IDLE_POLL_MAX),
        ];
        for (look, pause) in cases {
            assert_eq!(idle_pause(look), pause, "a look of {look:?}");
        }
    }

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
    fn each_ledger_has_its_subject_under_the_streams_subjects() {
        assert_eq!(subject("default"), "ledger.postings.default");
        assert_eq!(subject("eu-books_2"), "ledger.postings.eu-books_2");
        assert_eq!(account_subject("eu-books_2"), "ledger.accounts.eu-books_2");
        assert_eq!(digest_subject("eu-books_2"), "ledger.digests.eu-books_2");
        assert_eq!(
            ALL_STREAM_SUBJECTS,
            [
                format!("{SUBJECT_PREFIX}.>"),
                format!("{ACCOUNT_SUBJECT_PREFIX}.>"),
                format!("{DIGEST_SUBJECT_PREFIX}.>")
            ],
            "the stream takes every ledger's subjects of all three kinds"
        );
    }

    #[test]
    fn an_account_event_is_the_account_at_its_version_and_its_id_names_ledger_code_and_version() {
        use ledger_core::terms::{AccountStatus, Terms};
        let t = time::macros::datetime!(2026-12-03 12:00 UTC);
        let a = Account {
            id: 7,
            ledger: 3,
            code: "liabilities:wallet:alice".into(),
            currency: "EUR".into(),
            scale: 2,
            normal_balance: ledger_core::NormalBalance::Credit,
            allow_negative: false,
            metadata: Default::default(),
            created_at: t,
        };
        let v = AccountVersion {
            account_id: 7,
            terms: Terms {
                version: 3,
                status: AccountStatus::Frozen,
                floor: Some(-5_000),
                ceiling: None,
                debit_limits: vec![],
            },
            after_sequence: ledger_core::ledger::stored(3, 12),
            recorded_at: t,
            caller: "ops".into(),
            idempotency_key: "freeze".into(),
            reason: "fraud".into(),
            changed: vec!["status".into()],
        };
        let ev: pb::AccountEvent =
            prost::Message::decode(account_event_payload(&a, &v, "eu-books").as_slice()).unwrap();
        assert_eq!(ev.ledger, "eu-books");
        let got = ev.account.unwrap();
        assert_eq!(got, account_to_pb(&a, &v, "eu-books"));
        assert_eq!(
            (got.version, got.status, got.balance_floor.as_str()),
            (3, pb::AccountStatus::Frozen as i32, "-50.00")
        );
        assert_eq!(got.version_info.unwrap().after_sequence, 12);
        assert_eq!(
            account_msg_id("eu-books", &a.code, 3),
            "account:eu-books:liabilities:wallet:alice:3"
        );
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
    fn an_event_shows_the_posting_of_its_ledger_as_committed_not_voided_and_its_hold_pending() {
        use ledger_core::amount::Amount;
        use ledger_core::record::{CloseKind, HoldState, PostedLeg};
        use ledger_core::Direction;
        let t = time::macros::datetime!(2026-11-30 12:00 UTC);
        let p = Posting {
            posting_id: uuid::Uuid::now_v7(),
            sequence: ledger_core::ledger::stored(3, 7) as u64,
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
            hash: None,
            void_reason: None,
            hold: Some(HoldState {
                expires_at: Some(t),
                closed_by: Some((uuid::Uuid::now_v7(), CloseKind::Capture)),
                lapsed: true,
            }),
            closes: None,
        };
        let ev: pb::PostingEvent =
            prost::Message::decode(event_payload(&p, "eu-books").as_slice()).unwrap();
        assert_eq!(ev.ledger, "eu-books", "the event names its ledger");
        let got = ev.posting.unwrap();
        assert_eq!(
            (got.ledger.as_str(), got.sequence),
            ("eu-books", 7),
            "and so does its posting, with its sequence within that ledger"
        );
        let mut want = posting_to_pb(&p, "eu-books");
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
