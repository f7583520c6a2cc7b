//! Digests: the root of a ledger's tree after each write batch reaches the stream once, on
//! `ledger.digests.<ledger>` with `Nats-Msg-Id` `digest:<ledger>:<size>`, sizes increasing,
//! through a relay killed after the broker acknowledged them and before their progress.

use super::*;
use async_nats::jetstream::consumer;
use futures_util::StreamExt;
use ledger_server::outbox::{digest_msg_id, digest_subject, DIGEST_SUBJECT_PREFIX, STREAM};

/// The digests in the stream, in stream order: (Nats-Msg-Id, digest).
async fn digests(nats: &NatsServer) -> Vec<(String, pb::Digest)> {
    let js = nats.jetstream().await;
    let Ok(stream) = js.get_stream(STREAM).await else {
        return Vec::new();
    };
    let consumer = stream
        .create_consumer(consumer::pull::Config {
            deliver_policy: consumer::DeliverPolicy::All,
            ack_policy: consumer::AckPolicy::None,
            filter_subject: format!("{DIGEST_SUBJECT_PREFIX}.>"),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut out = Vec::new();
    loop {
        let mut batch = consumer
            .fetch()
            .max_messages(1000)
            .expires(Duration::from_millis(500))
            .messages()
            .await
            .unwrap();
        let before = out.len();
        while let Some(m) = batch.next().await {
            let m = m.unwrap();
            let id = m
                .headers
                .as_ref()
                .and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID));
            let id = id.map(|v| v.as_str().to_owned()).expect("a Nats-Msg-Id");
            assert_eq!(m.subject.as_str(), digest_subject("default"));
            out.push((
                id,
                prost::Message::decode(m.payload.as_ref()).expect("a Digest"),
            ));
        }
        if out.len() == before {
            return out;
        }
    }
}

/// Waits until the relay has recorded the digest of `size` postings of `default`.
async fn wait_digests(t: &TestLedger, size: i64) {
    let deadline = Instant::now() + DELIVERY;
    loop {
        let row = t
            .db()
            .await
            .query_opt(
                "SELECT published_sequence FROM digest_progress WHERE ledger_id = 0",
                &[],
            )
            .await
            .unwrap();
        if row.is_some_and(|r| r.get::<_, i64>(0) >= size) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "digests not published within {DELIVERY:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn each_batchs_digest_reaches_the_stream_once_in_order_through_a_relay_crash_before_its_progress(
) {
    let nats = NatsServer::start().await;
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    for i in 0..12 {
        t.post(transfer(&format!("p{i}"), "equity:world", "acct:0", "1.00"))
            .await
            .unwrap();
    }
    // The postings' events count as delivered: the relay's first batch is the digests.
    t.db()
        .await
        .batch_execute(
            "UPDATE outbox_progress SET published_sequence = (SELECT max(sequence) FROM postings)
             WHERE ledger_id = 0",
        )
        .await
        .unwrap();
    let mut crashing = Relay::start(
        &t.database_url,
        &nats.url(),
        &[],
        Some("outbox-after-publish-before-progress"),
    );
    let status = crashing.wait_exit(DELIVERY).await;
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{}", crashing.log());
    assert_eq!(digests(&nats).await.len(), 12, "acknowledged, not recorded");
    let relay = Relay::start(&t.database_url, &nats.url(), &[], None);
    wait_digests(&t, 12).await;
    let got = digests(&nats).await;
    // One write batch per sequential post: a digest of every size 1..=12, each once.
    let sizes: Vec<u64> = got.iter().map(|(_, d)| d.sequence).collect();
    assert_eq!(sizes, (1..=12).collect::<Vec<u64>>(), "{}", relay.log());
    assert!(
        relay.log().contains("duplicates=12"),
        "the re-published digests were dropped by the broker:\n{}",
        relay.log()
    );
    let mut c = t.new_client().await;
    for (id, d) in &got {
        assert_eq!(id, &digest_msg_id("default", d.sequence as i64));
        assert_eq!(d.ledger, "default");
        let proof = c
            .get_consistency_proof(pb::GetConsistencyProofRequest {
                from_sequence: d.sequence,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            proof.from_root, d.root,
            "the digest of size {} is the tree's",
            d.sequence
        );
    }
}
