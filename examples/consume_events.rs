//! Reads posting events from the `LEDGER` stream with a durable JetStream consumer and prints
//! them: `cargo run --example consume_events -- nats://127.0.0.1:4222 [consumer-name]
//! [ledger-code]`. Every ledger's events by default (subjects `ledger.postings.>`), or one
//! ledger's (`ledger.postings.<ledger-code>`). A durable consumer keeps the filter it was made
//! with: give each filter its own consumer name (the default name says which ledger).
//!
//! An event is a protobuf `ledger.v1.PostingEvent` naming its ledger; its `Nats-Msg-Id` header
//! is the posting id. Each ledger's events come in its sequence order (a posting's `sequence`
//! is the one within its ledger); the order of two ledgers' events relative to each other means
//! nothing. Acknowledge an event only after your own side effect is durable; a redelivered
//! event has the same posting id, ledger and sequence, so de-duplicate by them.
//!
//! Not every posting moves money: a posting's `kind` says what it is. A hold reserves its legs
//! and moves nothing until its capture (which moves what it captures); its release (a void of
//! it) and its expiry (the ledger's release) move nothing either and name the hold in
//! `releases_hold_posting_id`. Each line says so.

use async_nats::jetstream::{self, consumer::pull};
use futures_util::StreamExt;
use ledger_client::pb::{Posting, PostingEvent, PostingKind};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut args = std::env::args().skip(1);
    // nats-url, consumer-name, ledger-code: each optional, in that order.
    let url = args
        .next()
        .unwrap_or_else(|| "nats://127.0.0.1:4222".into());
    let name = args.next();
    let ledger = args.next();
    let (filter, name) = match &ledger {
        Some(code) => (
            ledger_server::outbox::subject(code),
            name.unwrap_or_else(|| format!("consume-events-example-{code}")),
        ),
        None => (
            ledger_server::outbox::STREAM_SUBJECTS.to_owned(),
            name.unwrap_or_else(|| "consume-events-example".into()),
        ),
    };

    let js = jetstream::new(async_nats::connect(url).await?);
    let consumer = js
        .get_stream(ledger_server::outbox::STREAM)
        .await?
        .get_or_create_consumer(
            &name,
            pull::Config {
                durable_name: Some(name.clone()),
                filter_subject: filter,
                ..Default::default()
            },
        )
        .await?;
    let mut messages = consumer.messages().await?;
    while let Some(msg) = messages.next().await {
        let msg = msg?;
        let event: PostingEvent = prost::Message::decode(msg.payload.as_ref())?;
        let p = event.posting.ok_or("an event without a posting")?;
        println!("{}", line(&event.ledger, &p));
        msg.ack().await?;
    }
    Ok(())
}

/// One event as a line: ledger, sequence, id, what the posting is, its key, its legs, and
/// what it does with them (moves them or not, and the posting or hold it acts on).
fn line(ledger: &str, p: &Posting) -> String {
    let kind = p.kind();
    let what = match kind {
        PostingKind::Posting => "posting",
        PostingKind::Hold => "hold",
        PostingKind::Capture => "capture",
        PostingKind::Release => "release",
        PostingKind::Expiry => "expiry",
        PostingKind::Void => "void",
        PostingKind::Unspecified => "posting of a kind this consumer does not know",
    };
    let legs: Vec<String> = p
        .legs
        .iter()
        .map(|l| format!("{} {:?} {}", l.account, l.direction(), l.amount))
        .collect();
    let mut notes: Vec<String> = Vec::new();
    match kind {
        PostingKind::Hold => notes.push(match &p.hold_expires_at {
            Some(t) => format!("held, not moved, until captured, released or {t}"),
            None => "held, not moved, until captured or released".into(),
        }),
        PostingKind::Capture => notes.push(format!("captures hold {}", p.captures_hold_posting_id)),
        PostingKind::Release => notes.push(format!(
            "moves nothing: releases hold {}",
            p.releases_hold_posting_id
        )),
        PostingKind::Expiry => notes.push(format!(
            "moves nothing: hold {} expired",
            p.releases_hold_posting_id
        )),
        PostingKind::Void => notes.push(format!("voids {}", p.voids_posting_id)),
        PostingKind::Posting | PostingKind::Unspecified => {}
    }
    let notes = if notes.is_empty() {
        String::new()
    } else {
        format!(" ({})", notes.join("; "))
    };
    format!(
        "{ledger} #{} {} {what} key={} {}{notes}",
        p.sequence,
        p.posting_id,
        p.idempotency_key,
        legs.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ledger_client::pb::{Direction, Leg};

    fn posting(kind: PostingKind) -> Posting {
        let leg = |account: &str, d: Direction| Leg {
            account: account.into(),
            direction: d as i32,
            amount: "5.00".into(),
        };
        Posting {
            posting_id: "p".into(),
            sequence: 7,
            idempotency_key: "k".into(),
            legs: vec![leg("a", Direction::Debit), leg("b", Direction::Credit)],
            kind: kind as i32,
            ..Default::default()
        }
    }

    #[test]
    fn each_line_says_what_the_posting_is_and_whether_it_moves_money() {
        let cases = [
            (
                posting(PostingKind::Posting),
                "#7 p posting key=k a Debit 5.00, b Credit 5.00",
            ),
            (
                posting(PostingKind::Hold),
                "#7 p hold key=k a Debit 5.00, b Credit 5.00 (held, not moved, until captured or released)",
            ),
            (
                Posting {
                    captures_hold_posting_id: "h".into(),
                    ..posting(PostingKind::Capture)
                },
                "#7 p capture key=k a Debit 5.00, b Credit 5.00 (captures hold h)",
            ),
            (
                Posting {
                    releases_hold_posting_id: "h".into(),
                    voids_posting_id: "h".into(),
                    ..posting(PostingKind::Release)
                },
                "#7 p release key=k a Debit 5.00, b Credit 5.00 (moves nothing: releases hold h)",
            ),
            (
                Posting {
                    releases_hold_posting_id: "h".into(),
                    ..posting(PostingKind::Expiry)
                },
                "#7 p expiry key=k a Debit 5.00, b Credit 5.00 (moves nothing: hold h expired)",
            ),
            (
                Posting {
                    voids_posting_id: "q".into(),
                    ..posting(PostingKind::Void)
                },
                "#7 p void key=k a Debit 5.00, b Credit 5.00 (voids q)",
            ),
        ];
        for (p, want) in cases {
            assert_eq!(line("eu-books", &p), format!("eu-books {want}"));
        }
    }
}
