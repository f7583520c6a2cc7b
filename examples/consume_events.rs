//! Reads posting events from the `LEDGER` stream with a durable JetStream consumer and prints
//! them: `cargo run --example consume_events -- nats://127.0.0.1:4222 [consumer-name]`.
//!
//! An event is a protobuf `ledger.v1.PostingEvent`; its `Nats-Msg-Id` header is the posting id.
//! Acknowledge an event only after your own side effect is durable; a redelivered event has the
//! same posting id and sequence, so de-duplicate by them.

use async_nats::jetstream::{self, consumer::pull};
use futures_util::StreamExt;
use ledger_server::grpc::pb::PostingEvent;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "nats://127.0.0.1:4222".into());
    let name = args
        .next()
        .unwrap_or_else(|| "consume-events-example".into());

    let js = jetstream::new(async_nats::connect(url).await?);
    let consumer = js
        .get_stream(ledger_server::outbox::STREAM)
        .await?
        .get_or_create_consumer(
            &name,
            pull::Config {
                durable_name: Some(name.clone()),
                filter_subject: ledger_server::outbox::SUBJECT.into(),
                ..Default::default()
            },
        )
        .await?;
    let mut messages = consumer.messages().await?;
    while let Some(msg) = messages.next().await {
        let msg = msg?;
        let event: PostingEvent = prost::Message::decode(msg.payload.as_ref())?;
        let p = event.posting.ok_or("an event without a posting")?;
        let legs: Vec<String> = p
            .legs
            .iter()
            .map(|l| format!("{} {:?} {}", l.account, l.direction(), l.amount))
            .collect();
        println!(
            "#{} {} key={} {}{}",
            p.sequence,
            p.posting_id,
            p.idempotency_key,
            legs.join(", "),
            if p.voids_posting_id.is_empty() {
                String::new()
            } else {
                format!(" (voids {})", p.voids_posting_id)
            }
        );
        msg.ack().await?;
    }
    Ok(())
}
