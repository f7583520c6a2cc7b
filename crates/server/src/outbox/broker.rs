//! The publisher's side of NATS JetStream: the connection, the stream (created if missing, its
//! subjects brought to this version's), and the pipelined publish of one ledger's batch.

use super::{
    PublisherOptions, ACCOUNT_SUBJECT_PREFIX, ACK_TIMEOUT, ALL_STREAM_SUBJECTS,
    OLD_STREAM_SUBJECTS, STREAM, SUBJECT_PREFIX,
};
use crate::BoxError;
use async_nats::jetstream::{self, context::PublishErrorKind, stream};
use std::time::Duration;

/// Why a batch stopped before every event was acknowledged.
#[derive(Debug)]
pub(super) enum Failure {
    /// The broker refused an event because the one before it is not the stream's last (an
    /// earlier event of the batch was a duplicate after a broker restart, or something else
    /// wrote to the stream): publish again from it, without the header.
    ChainBroken(String),
    /// Broker unreachable, slow, or the stream missing: retry after a backoff.
    Transient { error: String, stream_missing: bool },
    /// The broker refuses the event itself: halt its ledger here (loudly) and retry after a
    /// backoff.
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
pub(super) struct BatchOutcome {
    /// Events acknowledged from the start of the batch, without a gap.
    pub acked: usize,
    /// Of those, how many the broker reported as duplicates (already in the stream).
    pub duplicates: usize,
    /// Why the rest was not acknowledged.
    pub failure: Option<Failure>,
}

/// Publishes one ledger's batch to its `subject` (pipelined), then awaits the acks in order;
/// stops at the first failure. `events` are (`Nats-Msg-Id`, payload) in their order.
pub(super) async fn publish_batch(
    js: &jetstream::Context,
    subject: &str,
    events: &[(String, Vec<u8>)],
) -> BatchOutcome {
    let mut acks = Vec::with_capacity(events.len());
    let mut send_failure = None;
    for (i, (id, payload)) in events.iter().enumerate() {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_ID, id.as_str());
        if i > 0 {
            // The previous event of this ledger: with one batch in flight at a time, the
            // stream's last message once it is stored.
            headers.insert(
                async_nats::header::NATS_EXPECTED_LAST_MESSAGE_ID,
                events[i - 1].0.as_str(),
            );
        }
        // Sending can wait (the client's buffer is full while it is disconnected): bounded.
        let send = js.publish_with_headers(subject.to_owned(), headers, payload.clone().into());
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

/// The broker connection of the active publisher.
#[derive(Default)]
pub(super) struct Broker {
    js: Option<jetstream::Context>,
    stream_ready: bool,
}

impl Broker {
    /// The JetStream context, connecting and creating (or updating) the stream if needed.
    pub async fn context(
        &mut self,
        opts: &PublisherOptions,
    ) -> Result<jetstream::Context, BoxError> {
        if self.js.is_none() {
            let servers = super::nats_servers(&opts.nats_url)?;
            let client = async_nats::ConnectOptions::new()
                .name("ledger-outbox")
                .connection_timeout(ACK_TIMEOUT)
                .connect(servers)
                .await?;
            self.js = Some(
                jetstream::context::ContextBuilder::new()
                    .timeout(ACK_TIMEOUT)
                    .build(client),
            );
            self.stream_ready = false;
        }
        let js = self.js.clone().expect("connected");
        if !self.stream_ready {
            ensure_stream(&js, opts.duplicate_window, opts.replicas).await?;
            self.stream_ready = true;
        }
        Ok(js)
    }

    /// The stream went missing: make it again before the next publish. The client reconnects
    /// by itself (a dropped one would too, and flush its queue later), so it is kept.
    pub fn stream_lost(&mut self) {
        self.stream_ready = false;
    }
}

/// The subjects the stream should have instead of `existing`, or `None` when it has this
/// version's already: an earlier version's ([`OLD_STREAM_SUBJECTS`]) give way to
/// [`ALL_STREAM_SUBJECTS`], those missing are added; subjects an operator added stay.
pub(super) fn migrated_subjects(existing: &[String]) -> Option<Vec<String>> {
    if ALL_STREAM_SUBJECTS
        .iter()
        .all(|s| existing.iter().any(|e| e == s))
    {
        return None;
    }
    let mut subjects: Vec<String> = existing
        .iter()
        .filter(|s| !OLD_STREAM_SUBJECTS.contains(&s.as_str()))
        .cloned()
        .collect();
    for s in ALL_STREAM_SUBJECTS {
        if !subjects.iter().any(|e| e == s) {
            subjects.push(s.to_owned());
        }
    }
    Some(subjects)
}

/// Creates the stream if missing and gives an existing one this version's subjects (keeping
/// its events); warns when it de-duplicates over a shorter window than configured.
async fn ensure_stream(
    js: &jetstream::Context,
    duplicate_window: Duration,
    replicas: usize,
) -> Result<(), BoxError> {
    let mut s = js
        .get_or_create_stream(stream::Config {
            name: STREAM.to_string(),
            subjects: ALL_STREAM_SUBJECTS.map(str::to_owned).to_vec(),
            storage: stream::StorageType::File,
            duplicate_window,
            num_replicas: replicas,
            ..Default::default()
        })
        .await?;
    let mut info = s.info().await?.clone();
    if let Some(subjects) = migrated_subjects(&info.config.subjects) {
        info = update_subjects(js, info, subjects).await;
    }
    warn_on_differences(&info.config, duplicate_window, replicas);
    tracing::info!(
        stream = STREAM,
        subjects = ?info.config.subjects,
        replicas = info.config.num_replicas,
        messages = info.state.messages,
        duplicate_window = ?info.config.duplicate_window,
        "JetStream stream ready"
    );
    Ok(())
}

/// Gives the stream `info` describes the `subjects` instead of its own, keeping its events;
/// the stream's info after (before, if the broker refused).
async fn update_subjects(
    js: &jetstream::Context,
    info: stream::Info,
    subjects: Vec<String>,
) -> stream::Info {
    let before = info.config.subjects.clone();
    let config = stream::Config {
        subjects: subjects.clone(),
        ..info.config.clone()
    };
    match js.update_stream(config).await {
        Ok(updated) => {
            if before
                .iter()
                .any(|s| OLD_STREAM_SUBJECTS.contains(&s.as_str()))
            {
                tracing::warn!(
                    stream = STREAM,
                    ?before,
                    after = ?subjects,
                    "the stream's subjects changed: events are published per ledger on {SUBJECT_PREFIX}.<ledger code> now (a breaking change; the events published before stay in the stream on {SUBJECT_PREFIX})"
                );
            } else {
                tracing::info!(
                    stream = STREAM,
                    ?before,
                    after = ?subjects,
                    "the stream's subjects changed: account events are published per ledger on {ACCOUNT_SUBJECT_PREFIX}.<ledger code> now (the events in the stream stay)"
                );
            }
            updated
        }
        // Its subjects may still take ours (say `>`): publishing tells, and a stream that
        // takes none of them brings us back here.
        Err(e) => {
            tracing::error!(
                stream = STREAM,
                subjects = ?before,
                error = %e,
                "cannot give the stream the subjects {ALL_STREAM_SUBJECTS:?}; change them with the nats CLI"
            );
            info
        }
    }
}

fn warn_on_differences(config: &stream::Config, duplicate_window: Duration, replicas: usize) {
    if config.duplicate_window < duplicate_window {
        tracing::warn!(
            stream = STREAM,
            stream_window = ?config.duplicate_window,
            configured = ?duplicate_window,
            "the existing stream de-duplicates over a shorter window than configured: a publisher restart longer than it may publish an event twice"
        );
    }
    if config.num_replicas != replicas {
        tracing::warn!(
            stream = STREAM,
            stream_replicas = config.num_replicas,
            configured = replicas,
            "the existing stream has another number of replicas than --nats-replicas; the broker keeps its own (change it with the nats CLI)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn an_earlier_versions_stream_subjects_give_way_to_every_ledgers_and_an_operators_stay() {
        let all = ["ledger.postings.>", "ledger.accounts.>", "ledger.digests.>"];
        assert_eq!(migrated_subjects(&v(&all)), None);
        assert_eq!(
            migrated_subjects(&v(&[
                "ledger.digests.>",
                "ledger.accounts.>",
                "ledger.postings.>"
            ])),
            None
        );
        assert_eq!(migrated_subjects(&v(&["ledger.>"])), Some(v(&all)));
        assert_eq!(migrated_subjects(&v(&["ledger.postings"])), Some(v(&all)));
        assert_eq!(
            migrated_subjects(&v(&["ledger.postings.>"])),
            Some(v(&all)),
            "the stream of the version before account events gets their subjects and digests'"
        );
        assert_eq!(
            migrated_subjects(&v(&["ledger.postings.>", "ledger.accounts.>"])),
            Some(v(&all)),
            "the stream of the version before digests gets theirs"
        );
        assert_eq!(
            migrated_subjects(&v(&["audit.>", "ledger.postings"])),
            Some(v(&[
                "audit.>",
                "ledger.postings.>",
                "ledger.accounts.>",
                "ledger.digests.>"
            ]))
        );
        assert_eq!(
            migrated_subjects(&v(&[
                "audit.>",
                "ledger.postings.>",
                "ledger.accounts.>",
                "ledger.digests.>"
            ])),
            None
        );
    }
}
