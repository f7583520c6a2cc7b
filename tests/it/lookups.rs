//! What the database is asked per request: voids and captures are checked against their
//! targets by the writer, for a whole batch at once, and a posting's void and closing posting
//! are looked up on their own index entries, however many voids the journal holds.

use crate::support::writes::{valid_transfer, void_of};
use crate::support::*;
use ledger_core::write::{Command, WriteRequest};
use ledger_server::grpc::pb;
use ledger_server::writer;
use std::time::Duration;

/// Index entries read through `index` so far, as this session sees them (its own reads
/// flushed first).
async fn index_entries_read(db: &deadpool_postgres::Client, index: &str) -> i64 {
    db.batch_execute("SELECT pg_stat_force_next_flush(); SELECT pg_stat_clear_snapshot()")
        .await
        .unwrap();
    db.query_one(
        "SELECT idx_tup_read FROM pg_stat_user_indexes WHERE indexrelname = $1",
        &[&index],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test]
async fn a_page_of_postings_looks_up_each_ones_void_on_its_index_not_every_void_in_the_journal() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    let pool = ledger_server::storage::pool(&t.database_url, 1).unwrap();
    let w = pool.get().await.unwrap();
    // 5,000 postings, each voided: as many entries in the index of voids.
    let mut voided = Vec::new();
    for round in 0..5 {
        let one = valid_transfer(&w, "one", "equity:world", "acct:0", "0.01").await;
        let posts: Vec<WriteRequest> = (0..1000)
            .map(|i| {
                let mut p = one.clone();
                let Command::Post(post) = &mut p.command else {
                    unreachable!("a transfer is a post")
                };
                post.idempotency_key = format!("p{round}-{i}");
                p
            })
            .collect();
        let out = writer::apply_alone(&w, 0, &posts).await.unwrap();
        let voids: Vec<WriteRequest> = out
            .iter()
            .enumerate()
            .map(|(i, o)| {
                let p = o.as_ref().unwrap().posting().unwrap();
                voided.push(p.sequence as i64);
                void_of(&p.posting_id, &format!("v{round}-{i}"))
            })
            .collect();
        let out = writer::apply_alone(&w, 0, &voids).await.unwrap();
        assert!(out.iter().all(|o| o.is_ok()), "{:?}", out.first());
    }
    t.db().await.batch_execute("ANALYZE").await.unwrap();
    // A page of the last 100 voided postings, each shown with its void.
    let page = &voided[voided.len() - 100..];
    let index = "postings_one_void_per_posting";
    let before = index_entries_read(&w, index).await;
    let postings = ledger_server::storage::read::postings_at(&w, page, None)
        .await
        .unwrap();
    let read = index_entries_read(&w, index).await - before;
    assert_eq!(postings.len(), 100);
    assert!(postings.iter().all(|p| p.voided_by_posting_id.is_some()));
    // Joined as whole tables, the planner merge-joined the whole index (5,000 entries here;
    // in the writer's load of void targets, 14 ms per batch under the write lock).
    assert!(
        read <= 2 * page.len() as i64,
        "{read} entries of {index} read for a page of {}",
        page.len()
    );
}

/// Transactions committed in the test's database so far (every backend's, once flushed:
/// a backend flushes its counts within a second of going idle).
async fn transactions(t: &TestLedger) -> i64 {
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let db = t.db().await;
    db.batch_execute("SELECT pg_stat_clear_snapshot()")
        .await
        .unwrap();
    db.query_one(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

/// A server without expiry rounds (nothing but the calls of a test commits).
async fn quiet_server(url: String) -> TestLedger {
    TestLedger::on_database_tuned(url, app_role_ops(), |tuning| {
        tuning.hold_expiry_poll = Duration::from_secs(3600);
    })
    .await
}

/// Every other hold captured whole, the rest released, all at once.
fn close_each(
    t: &TestLedger,
    holds: &[String],
) -> impl std::future::Future<Output = Vec<Result<(), tonic::Status>>> {
    let calls = holds.iter().enumerate().map(|(i, hold)| {
        let mut c = t.client.clone();
        let hold = hold.clone();
        async move {
            if i % 2 == 0 {
                let capture = pb::CaptureRequest {
                    idempotency_key: format!("capture-{i}"),
                    hold_posting_id: hold,
                    ..Default::default()
                };
                c.capture(capture).await.map(|_| ())
            } else {
                let release = pb::VoidRequest {
                    ledger: String::new(),
                    idempotency_key: format!("release-{i}"),
                    posting_id: hold,
                    reason: "released".into(),
                    effective_at: None,
                };
                c.void(release).await.map(|_| ())
            }
        }
    });
    futures_util::future::join_all(calls)
}

#[tokio::test]
async fn voids_and_captures_reach_the_writer_without_a_read_of_their_own() {
    let url = pg::shared_cluster().fresh_database().await;
    let mut t = quiet_server(url.clone()).await;
    t.standard_accounts(2).await;
    t.post(transfer("fund", "equity:world", "acct:0", "100.00"))
        .await
        .unwrap();
    let mut holds = Vec::new();
    for i in 0..100 {
        let hold = pb::PostRequest {
            hold: true,
            ..transfer(&format!("hold-{i}"), "acct:0", "acct:1", "0.50")
        };
        holds.push(t.post(hold).await.unwrap().posting.unwrap().posting_id);
    }
    // A fresh server: sessions that hold no counts of earlier work still to report (a busy
    // session reports its commits only when it is next idle).
    t.server.take().unwrap().shutdown().await.unwrap();
    let t = quiet_server(url).await;
    // The journal's write lock is taken, so the calls wait for the writer together.
    let locker = t.db().await;
    locker
        .execute(
            "SELECT pg_advisory_lock($1, 0)",
            &[&ledger_server::storage::LEDGER_LOCK_CLASS],
        )
        .await
        .unwrap();
    // What commits meanwhile without them (health probes, these reads), and then with them
    // waiting: the same time apart.
    let idle_from = transactions(&t).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_to = transactions(&t).await;
    let calls = tokio::spawn(close_each(&t, &holds));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let waiting = transactions(&t).await;
    locker
        .execute(
            "SELECT pg_advisory_unlock($1, 0)",
            &[&ledger_server::storage::LEDGER_LOCK_CLASS],
        )
        .await
        .unwrap();
    for answer in calls.await.unwrap() {
        answer.expect("each capture and release is recorded");
    }
    let idle = idle_to - idle_from;
    let extra = (waiting - idle_to) - idle;
    // Waiting for the writer, the calls read nothing: the lane reads the targets of a whole
    // batch in one round trip. Checked against its target before the writer, each call
    // committed a read of its own (three statements, each its own transaction).
    assert!(
        extra < 30,
        "100 calls waiting for the writer committed {extra} transactions beyond the {idle} of the same time without them"
    );
}
