//! A batch of one ledger's pending events, of its postings or of its accounts: read from its
//! outbox after that ledger's progress of that kind, and made ready to publish.

use super::{
    account_event_payload, account_msg_id, account_subject, digest_msg_id, digest_payload,
    digest_subject, event_payload, subject, PUBLISH_BATCH,
};
use crate::storage::{outbox as store, read, Conn};
use crate::BoxError;
use ledger_core::ledger::{self, LedgerId};

/// The kinds of a ledger's events: each has its own outbox, progress, subject and halt, and
/// its own order (a posting's sequence; an account event's id; a digest's size, the stored
/// sequence of the batch's last posting).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Kind {
    Postings,
    Accounts,
    Digests,
}

impl Kind {
    /// The subject of ledger `code`'s events of this kind.
    pub fn subject(self, code: &str) -> String {
        match self {
            Kind::Postings => subject(code),
            Kind::Accounts => account_subject(code),
            Kind::Digests => digest_subject(code),
        }
    }

    /// How the logs name them.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Postings => "postings",
            Kind::Accounts => "accounts",
            Kind::Digests => "digests",
        }
    }
}

/// At most [`PUBLISH_BATCH`] events of one ledger and kind, in their order.
pub(super) struct Batch {
    pub kind: Kind,
    /// The progress each event's ack brings its ledger to: a stored sequence (postings) or an
    /// event id (accounts).
    pub marks: Vec<i64>,
    /// Each event as the logs name it: its posting's sequence within the ledger and id, or its
    /// account's code and version.
    pub names: Vec<String>,
    /// (`Nats-Msg-Id`, payload) of each.
    pub events: Vec<(String, Vec<u8>)>,
}

impl Batch {
    /// The batch of ledger `ledger` (code `code`) of this kind after its progress `progress`
    /// (none pending: `None`).
    pub async fn load(
        client: &Conn,
        kind: Kind,
        ledger: LedgerId,
        progress: i64,
        code: &str,
    ) -> Result<Option<Batch>, BoxError> {
        let batch = match kind {
            Kind::Postings => postings(client, progress, code).await?,
            Kind::Accounts => accounts(client, ledger, progress, code).await?,
            Kind::Digests => digests(client, ledger, progress, code).await?,
        };
        Ok(Some(batch).filter(|b| !b.events.is_empty()))
    }
}

/// The pending posting events of ledger `code` after its stored sequence `progress`, with
/// their postings.
async fn postings(client: &Conn, progress: i64, code: &str) -> Result<Batch, BoxError> {
    let pending = store::pending(client, progress, PUBLISH_BATCH as i64).await?;
    for (i, ev) in pending.iter().enumerate() {
        assert_eq!(
            ev.sequence,
            progress + 1 + i as i64,
            "outbox rows of ledger {code:?} must follow its published sequence {progress} without a gap"
        );
    }
    let marks: Vec<i64> = pending.iter().map(|e| e.sequence).collect();
    let postings = if marks.is_empty() {
        Vec::new()
    } else {
        read::postings_by_sequence(client, &marks).await?
    };
    assert_eq!(
        postings.len(),
        pending.len(),
        "outbox rows without postings"
    );
    let mut names = Vec::with_capacity(pending.len());
    let mut events = Vec::with_capacity(pending.len());
    for (ev, p) in pending.iter().zip(&postings) {
        assert_eq!(
            ev.posting_id, p.posting_id,
            "outbox row {} names another posting",
            ev.sequence
        );
        let sequence = ledger::in_ledger(ev.sequence);
        names.push(format!("sequence {sequence}, posting {}", p.posting_id));
        events.push((p.posting_id.to_string(), event_payload(p, code)));
    }
    Ok(Batch {
        kind: Kind::Postings,
        marks,
        names,
        events,
    })
}

/// The pending account events of ledger `ledger` (code `code`) after event `progress`, each
/// with its account at its version.
async fn accounts(
    client: &Conn,
    ledger: LedgerId,
    progress: i64,
    code: &str,
) -> Result<Batch, BoxError> {
    let pending = store::pending_accounts(client, ledger, progress, PUBLISH_BATCH as i64).await?;
    let mut batch = Batch {
        kind: Kind::Accounts,
        marks: Vec::with_capacity(pending.len()),
        names: Vec::with_capacity(pending.len()),
        events: Vec::with_capacity(pending.len()),
    };
    for ev in &pending {
        assert!(
            ev.event_id > batch.marks.last().copied().unwrap_or(progress),
            "account events of ledger {code:?} come in their order after its progress {progress}"
        );
        assert_eq!(
            ev.account.ledger, ledger,
            "account event {} names an account of another ledger",
            ev.event_id
        );
        let (account, version) = (&ev.account.code, ev.version.terms.version);
        batch.marks.push(ev.event_id);
        batch
            .names
            .push(format!("account {account:?} version {version}"));
        batch.events.push((
            account_msg_id(code, account, version),
            account_event_payload(&ev.account, &ev.version, code),
        ));
    }
    Ok(batch)
}

/// The digests of ledger `ledger` (code `code`) after the stored sequence `progress`: the
/// roots written on each batch's last posting, in order.
async fn digests(
    client: &Conn,
    ledger: LedgerId,
    progress: i64,
    code: &str,
) -> Result<Batch, BoxError> {
    let pending = store::pending_digests(client, ledger, progress, PUBLISH_BATCH as i64).await?;
    let mut batch = Batch {
        kind: Kind::Digests,
        marks: Vec::with_capacity(pending.len()),
        names: Vec::with_capacity(pending.len()),
        events: Vec::with_capacity(pending.len()),
    };
    for d in &pending {
        let size = ledger::in_ledger(d.sequence);
        batch.marks.push(d.sequence);
        batch.names.push(format!("digest of size {size}"));
        batch.events.push((
            digest_msg_id(code, size),
            digest_payload(code, size, &d.root, d.recorded_at),
        ));
    }
    Ok(batch)
}
