//! `PostBatch`: each request answered exactly as `Post` would answer it, in order, one bad
//! request never failing the others; call-level faults (the number of requests, the size of
//! the message, a failed database batch, a full queue) fail the whole call and write nothing.

use crate::support::*;
use crate::throughput::{break_outbox, journal_counts};
use ledger_server::grpc::pb;
use prost::Message;
use std::collections::HashMap;
use tonic::Code;
use tonic_types::StatusExt;

/// A `PostBatch` of these requests.
pub fn batch(requests: Vec<pb::PostRequest>) -> pb::PostBatchRequest {
    pb::PostBatchRequest {
        ledger: String::new(),
        requests,
    }
}

/// A result's error as the status a failed `Post` call would carry (code, message, details).
pub fn as_status(e: &tonic_types::pb::Status) -> tonic::Status {
    tonic::Status::with_details(
        Code::from_i32(e.code),
        e.message.clone(),
        e.encode_to_vec().into(),
    )
}

/// A result as `Post`'s answer would be.
pub fn as_post_answer(r: pb::PostBatchResult) -> Result<pb::PostResponse, tonic::Status> {
    match r.outcome.expect("every result has an outcome") {
        pb::post_batch_result::Outcome::Response(p) => Ok(p),
        pb::post_batch_result::Outcome::Error(e) => Err(as_status(&e)),
    }
}

/// Answers from two ledgers made comparable: posting ids become their order of first
/// appearance (in answers and in error messages and metadata), and the ledger's clock is
/// dropped (`recorded_at`, and `effective_at` when it defaulted to it), and with it the
/// posting's hash (which covers them).
struct Normalized {
    ids: HashMap<String, String>,
}

impl Normalized {
    fn new() -> Normalized {
        Normalized {
            ids: HashMap::new(),
        }
    }

    fn id(&mut self, id: &str) -> String {
        let n = self.ids.len();
        self.ids
            .entry(id.to_owned())
            .or_insert_with(|| format!("<posting {n}>"))
            .clone()
    }

    fn text(&self, s: &str) -> String {
        self.ids
            .iter()
            .fold(s.to_owned(), |s, (id, name)| s.replace(id, name))
    }

    fn answer(&mut self, a: Result<pb::PostResponse, tonic::Status>) -> String {
        match a {
            Ok(mut r) => {
                let p = r.posting.as_mut().expect("a posting");
                p.posting_id = self.id(&p.posting_id);
                if p.effective_at == p.recorded_at {
                    p.effective_at = None;
                }
                p.recorded_at = None;
                assert_eq!(p.hash.len(), 64, "every posting is hashed");
                p.hash.clear();
                format!("{r:?}")
            }
            Err(s) => {
                let info = s.get_details_error_info().expect("ErrorInfo");
                let mut meta: Vec<(String, String)> = info
                    .metadata
                    .iter()
                    .map(|(k, v)| (k.clone(), self.text(v)))
                    .collect();
                meta.sort();
                format!(
                    "{:?} {} {} {}: {} {meta:?}",
                    s.code(),
                    info.domain,
                    info.reason,
                    self.text(s.message()),
                    s.details().len().min(1)
                )
            }
        }
    }
}

/// The same two ledgers: `equity:world` (may go negative), `acct:0` and `acct:1`, and one
/// posting made earlier under key "earlier" (acct:0 holds 10.00).
async fn two_ledgers_with_the_same_history() -> (TestLedger, TestLedger) {
    let mut a = TestLedger::start().await;
    let mut b = TestLedger::start().await;
    for t in [&mut a, &mut b] {
        t.standard_accounts(2).await;
        t.post(transfer("earlier", "equity:world", "acct:0", "10.00"))
            .await
            .unwrap();
    }
    (a, b)
}

/// Requests of every kind `Post` answers, on the history of
/// [`two_ledgers_with_the_same_history`], and what each is answered (in this order).
fn every_kind_of_request() -> (Vec<pb::PostRequest>, [&'static str; 11]) {
    let mut bad_time = transfer("bad-time", "equity:world", "acct:0", "1.00");
    bad_time.effective_at = Some(prost_types::Timestamp {
        seconds: 0,
        nanos: -5,
    });
    let requests = vec![
        transfer("pay", "acct:0", "acct:1", "4.00"), // accepted
        transfer("pay", "acct:0", "acct:1", "4.00"), // a duplicate inside the call
        transfer("earlier", "equity:world", "acct:0", "10.00"), // a replay of an earlier key
        transfer("bad", "acct:0", "acct:1", "1.005"), // validation: AMOUNT_SCALE
        transfer("nobody", "acct:0", "acct:9", "1.00"), // validation: ACCOUNT_NOT_FOUND
        bad_time,                                    // conversion: INVALID_FIELD
        transfer("overdraw", "acct:1", "acct:0", "50.00"), // INSUFFICIENT_FUNDS (acct:1 has 4.00)
        transfer("pay", "acct:0", "acct:1", "5.00"), // the key reused for another request
        transfer("bad", "acct:0", "acct:1", "1.00"), // a refused request's key, corrected: accepted
        transfer("spend", "acct:1", "acct:0", "4.00"), // spends what "pay" brought, before it in the call
        transfer("overdraw", "acct:1", "acct:0", "50.00"), // the bound rejection, answered again
    ];
    let kinds = [
        "accepted",
        "replayed",
        "replayed",
        "AMOUNT_SCALE",
        "ACCOUNT_NOT_FOUND",
        "INVALID_FIELD",
        "INSUFFICIENT_FUNDS",
        "IDEMPOTENCY_KEY_REUSED",
        "accepted",
        "accepted",
        "INSUFFICIENT_FUNDS",
    ];
    (requests, kinds)
}

/// What an answer is: accepted, replayed, or its error's reason.
fn kind(a: &Result<pb::PostResponse, tonic::Status>) -> String {
    match a {
        Ok(r) if r.replayed => "replayed".to_string(),
        Ok(_) => "accepted".to_string(),
        Err(s) => reason(s),
    }
}

/// A normalizer that names the posting recorded under "earlier" first.
async fn naming_earlier_first(t: &mut TestLedger) -> Normalized {
    let mut n = Normalized::new();
    let earlier = t
        .client
        .get_posting(pb::GetPostingRequest {
            ledger: String::new(),
            by: Some(pb::get_posting_request::By::IdempotencyKey(
                "earlier".into(),
            )),
            as_of: None,
        })
        .await
        .unwrap()
        .into_inner();
    n.id(&earlier.posting_id);
    n
}

#[tokio::test]
async fn a_batch_answers_each_request_exactly_as_post_answers_the_same_requests_one_by_one() {
    let (mut batched, mut one_by_one) = two_ledgers_with_the_same_history().await;
    let (requests, kinds) = every_kind_of_request();
    let results = batched
        .client
        .post_batch(batch(requests.clone()))
        .await
        .expect("the call succeeds")
        .into_inner()
        .results;
    assert_eq!(results.len(), requests.len(), "one result per request");
    let answers: Vec<_> = results.into_iter().map(as_post_answer).collect();
    let mut alone = Vec::new();
    for r in &requests {
        alone.push(one_by_one.post(r.clone()).await);
    }

    // What each is, so the comparison below compares what this test claims.
    let got: Vec<String> = answers.iter().map(kind).collect();
    assert_eq!(got, kinds);
    let mut na = naming_earlier_first(&mut batched).await;
    let mut nb = naming_earlier_first(&mut one_by_one).await;
    for (i, (a, b)) in answers.into_iter().zip(alone).enumerate() {
        assert_eq!(na.answer(a), nb.answer(b), "request {i}: {:?}", requests[i]);
    }
    for t in [&batched, &one_by_one] {
        assert_eq!(t.count("postings").await, 4, "earlier, pay, bad, spend");
        assert_eq!(
            t.count("rejections").await,
            1,
            "the overdraft binds its key"
        );
    }
    for acct in ["acct:0", "acct:1", "equity:world"] {
        assert_eq!(
            batched.balance(acct, None).await.balance,
            one_by_one.balance(acct, None).await.balance,
            "{acct}"
        );
    }
}

#[tokio::test]
async fn a_batch_of_max_batch_requests_is_decided_whole_in_order_and_one_more_is_refused_naming_the_limit(
) {
    const MAX: usize = ledger_core::limits::MAX_BATCH_REQUESTS;
    let mut t = TestLedger::start().await;
    t.standard_accounts(10).await;
    let requests = |n: usize, run: &str| {
        (0..n)
            .map(|i| {
                transfer(
                    &format!("{run}-{i}"),
                    "equity:world",
                    &format!("acct:{}", i % 10),
                    "1.00",
                )
            })
            .collect::<Vec<_>>()
    };
    let over = t
        .client
        .post_batch(batch(requests(MAX + 1, "over")))
        .await
        .unwrap_err();
    assert_error(&over, Code::InvalidArgument, "LIMIT_EXCEEDED");
    assert!(over.message().contains("MAX_BATCH_REQUESTS"), "{over:?}");
    assert!(over.message().contains("1001"), "{over:?}");
    let info = over.get_details_error_info().unwrap();
    assert_eq!(info.metadata["limit"], "MAX_BATCH_REQUESTS");
    assert_eq!(t.count("postings").await, 0, "nothing of a refused call");
    let none = t.client.post_batch(batch(vec![])).await.unwrap_err();
    assert_error(&none, Code::InvalidArgument, "INVALID_FIELD");

    let results = t
        .client
        .post_batch(batch(requests(MAX, "full")))
        .await
        .expect("a full batch is accepted")
        .into_inner()
        .results;
    assert_eq!(results.len(), MAX);
    let sequences: Vec<u64> = results
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let p = as_post_answer(r).expect("accepted").posting.unwrap();
            assert_eq!(p.idempotency_key, format!("full-{i}"), "in request order");
            p.sequence
        })
        .collect();
    // One write batch, in the call's order: consecutive sequences.
    assert_eq!(sequences, (1..=MAX as u64).collect::<Vec<_>>());
    assert_eq!(t.count("postings").await, MAX as i64);
    assert_eq!(t.balance("acct:3", None).await.balance, "100.00");
}

/// A `PostBatch` of `requests` on `t`, its results as `Post` answers (or the call's error).
async fn send_batch(
    t: &TestLedger,
    requests: Vec<pb::PostRequest>,
) -> Result<Vec<Result<pb::PostResponse, tonic::Status>>, tonic::Status> {
    let r = t.client.clone().post_batch(batch(requests)).await?;
    Ok(r.into_inner()
        .results
        .into_iter()
        .map(as_post_answer)
        .collect())
}

#[tokio::test]
async fn a_batch_whose_database_batch_fails_answers_unavailable_writes_nothing_and_resent_records_each_once(
) {
    let mut t = TestLedger::start().await;
    t.standard_accounts(2).await;
    t.post(transfer("fund", "equity:world", "acct:0", "10.00"))
        .await
        .unwrap();
    let requests = vec![
        transfer("a", "acct:0", "acct:1", "1.00"),
        transfer("a", "acct:0", "acct:1", "1.00"),
        transfer("overdraw", "acct:1", "acct:0", "90.00"),
        transfer("bad", "acct:0", "acct:1", "0.001"),
        transfer("b", "equity:world", "acct:1", "2.00"),
    ];
    break_outbox(&t).await;
    let before = journal_counts(&t).await;
    let e = send_batch(&t, requests.clone()).await.unwrap_err();
    assert_error(&e, Code::Unavailable, "STORAGE_UNAVAILABLE");
    assert_eq!(
        journal_counts(&t).await,
        before,
        "nothing of the call is written"
    );

    t.db()
        .await
        .batch_execute("DROP TRIGGER test_refuse_outbox ON outbox")
        .await
        .unwrap();
    let first = send_batch(&t, requests.clone())
        .await
        .expect("the re-sent call succeeds");
    // The failed call decided nothing: the first request is new, not replayed.
    let kinds: Vec<String> = first.iter().map(kind).collect();
    assert_eq!(
        kinds,
        [
            "accepted",
            "replayed",
            "INSUFFICIENT_FUNDS",
            "AMOUNT_SCALE",
            "accepted"
        ]
    );
    // Sent a third time: every decision is the same, nothing is recorded twice.
    let again = send_batch(&t, requests).await.unwrap();
    for i in [0, 1, 4] {
        let (x, y) = (first[i].as_ref().unwrap(), again[i].as_ref().unwrap());
        assert!(y.replayed);
        assert_eq!(x.posting, y.posting, "request {i}: the same posting");
    }
    assert_eq!(reason(again[2].as_ref().unwrap_err()), "INSUFFICIENT_FUNDS");
    assert_eq!(
        t.count("postings").await,
        before[1] + 2,
        "a and b, once each"
    );
    assert_eq!(t.count("rejections").await, before[3] + 1);
    assert_eq!(t.balance("acct:1", None).await.balance, "3.00");
}

#[tokio::test]
async fn a_batch_over_its_byte_limit_is_refused_whole_naming_it_while_two_mib_pass_the_single_post_limit(
) {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    // 32 metadata entries of 64 + 512 bytes: about 18 KiB per request.
    let heavy = |key: String| {
        let mut r = transfer(&key, "equity:world", "acct:0", "1.00");
        r.metadata = (0..32)
            .map(|i| (format!("{i:064}"), "v".repeat(512)))
            .collect();
        r
    };
    let two_mib: Vec<_> = (0..120).map(|i| heavy(format!("ok-{i}"))).collect();
    assert!(batch(two_mib.clone()).encoded_len() > 2 * 1024 * 1024);
    let results = t
        .client
        .post_batch(batch(two_mib))
        .await
        .expect("over 1 MiB, under the batch's own limit")
        .into_inner()
        .results;
    assert!(results.into_iter().all(|r| as_post_answer(r).is_ok()));

    let too_big: Vec<_> = (0..240).map(|i| heavy(format!("big-{i}"))).collect();
    let size = batch(too_big.clone()).encoded_len();
    assert!(size > ledger_core::limits::MAX_BATCH_REQUEST_BYTES);
    let e = t.client.post_batch(batch(too_big)).await.unwrap_err();
    assert_error(&e, Code::InvalidArgument, "LIMIT_EXCEEDED");
    assert!(e.message().contains("MAX_BATCH_REQUEST_BYTES"), "{e:?}");
    assert!(e.message().contains(&format!("{size} bytes")), "{e:?}");
    assert_eq!(t.count("postings").await, 120);
    // A single Post keeps the contract's 1 MiB.
    let mut big = transfer("one-big", "equity:world", "acct:0", "1.00");
    big.memo = "m".repeat(1024 * 1024);
    let e = t.post(big).await.unwrap_err();
    assert!(e.message().contains("MAX_REQUEST_BYTES"), "{e:?}");
}

/// Caller `c`'s single posts to acct:20..40 (they keep the writer busy meanwhile).
async fn noise(mut client: pb::ledger_client::LedgerClient<tonic::transport::Channel>, c: usize) {
    for n in 0..40 {
        let to = format!("acct:{}", 20 + (c * 40 + n) % 20);
        let key = format!("noise-{c}-{n}");
        client
            .post(transfer(&key, "equity:world", &to, "1.00"))
            .await
            .unwrap();
    }
}

/// Caller `c`'s calls of 7 chained transfers among acct:0..20: each account starts empty in
/// its call, so every request may only spend what the one before it brought. Each call must
/// get consecutive sequences (one write batch, nobody else's posting in between).
async fn chains(mut client: pb::ledger_client::LedgerClient<tonic::transport::Channel>, c: usize) {
    for n in 0..10 {
        let acct = |k: usize| format!("acct:{}", (c + k) % 20);
        let key = |k: usize| format!("chain-{c}-{n}-{k}");
        let mut reqs = vec![transfer(&key(0), "equity:world", &acct(0), "3.00")];
        for k in 1..6 {
            reqs.push(transfer(&key(k), &acct(k - 1), &acct(k), "3.00"));
        }
        reqs.push(transfer(&key(6), &acct(5), "equity:world", "3.00"));
        let results = client.post_batch(batch(reqs)).await.unwrap().into_inner();
        let sequences: Vec<u64> = results
            .results
            .into_iter()
            .enumerate()
            .map(|(k, r)| {
                let p =
                    as_post_answer(r).unwrap_or_else(|e| panic!("chain {c}-{n} step {k}: {e:?}"));
                p.posting.unwrap().sequence
            })
            .collect();
        let first = sequences[0];
        assert_eq!(sequences, (first..first + 7).collect::<Vec<_>>());
    }
}

#[tokio::test]
async fn a_batch_is_decided_whole_in_its_order_under_concurrent_load_so_each_request_sees_the_ones_before_it(
) {
    // Write batches of at most 4 requests: a call of 7 is still applied whole, in order.
    let mut t = TestLedger::start_tuned(|t| t.writer.batch_max = 4).await;
    t.standard_accounts(40).await;
    let mut tasks = Vec::new();
    for c in 0..8 {
        tasks.push(tokio::spawn(noise(t.new_client().await, c)));
        tasks.push(tokio::spawn(chains(t.new_client().await, c)));
    }
    for task in tasks {
        task.await.unwrap();
    }
    for i in 0..20 {
        assert_eq!(t.balance(&format!("acct:{i}"), None).await.balance, "0.00");
    }
    // Each call's postings were written by one transaction (one write batch).
    let transactions: Vec<i64> = t
        .db()
        .await
        .query(
            "SELECT count(DISTINCT xmin::text) FROM postings WHERE idempotency_key LIKE 'chain-%'
             GROUP BY split_part(idempotency_key, '-', 2), split_part(idempotency_key, '-', 3)",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(transactions, vec![1; 80], "one transaction per call");
}

/// The answer of a call submitted to `writer` now; returns once it is queued (150 ms later).
async fn queue(
    writer: &ledger_server::writer::Writer,
    commands: Vec<ledger_core::write::Command>,
) -> tokio::task::JoinHandle<Result<Vec<ledger_core::write::Outcome>, ledger_core::LedgerError>> {
    let w = writer.clone();
    let handle = tokio::spawn(async move { w.submit_all(0, "anonymous", commands).await });
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    handle
}

/// A post for driving the writer directly: `amount` from `from` to `to`.
fn post_command(
    accounts: &HashMap<String, ledger_core::Account>,
    key: &str,
    from: &str,
    to: &str,
) -> ledger_core::write::Command {
    use ledger_core::posting::{LegRequest, PostRequest};
    use ledger_core::Direction;
    let leg = |account: &str, d| LegRequest {
        account: account.into(),
        direction: Some(d),
        amount: "1.00".into(),
    };
    let req = PostRequest {
        idempotency_key: key.into(),
        legs: vec![leg(to, Direction::Debit), leg(from, Direction::Credit)],
        effective_at: None,
        memo: String::new(),
        metadata: Default::default(),
        hold: false,
        hold_expires_at: None,
        conditions: Vec::new(),
    };
    ledger_core::write::Command::Post(req.validate(accounts).expect("valid"))
}

/// The accounts of `standard_accounts(6)` by code, and a writer of its own on the test's
/// database (one lane, batches of at most 4, a queue of 12) whose batch sizes are recorded.
async fn observed_writer(
    t: &TestLedger,
) -> (
    HashMap<String, ledger_core::Account>,
    ledger_server::writer::Writer,
    std::sync::Arc<std::sync::Mutex<Vec<usize>>>,
) {
    let pool = ledger_server::storage::pool(&t.database_url, 2).unwrap();
    let codes: Vec<String> = ["equity:world".to_string()]
        .into_iter()
        .chain((0..6).map(|i| format!("acct:{i}")))
        .collect();
    let accounts =
        ledger_server::storage::accounts::get_many(&pool.get().await.unwrap(), 0, &codes)
            .await
            .unwrap()
            .into_iter()
            .map(|a| (a.code.clone(), a))
            .collect();
    let batches = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = batches.clone();
    let writer = ledger_server::writer::Writer::spawn(
        std::sync::Arc::new(ledger_server::storage::clusters::Clusters::new(
            pool,
            Vec::new(),
        )),
        Default::default(),
        Some(std::sync::Arc::new(move |size, _ok| {
            seen.lock().unwrap().push(size)
        })),
        ledger_server::writer::WriterTuning {
            lanes: 1,
            batch_max: 4,
            queue_max: 12,
            ..Default::default()
        },
    );
    (accounts, writer, batches)
}

#[tokio::test]
async fn a_call_is_queued_whole_or_refused_whole_naming_max_write_queue_and_decided_in_one_batch() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(6).await;
    let (accounts, writer, batches) = observed_writer(&t).await;
    let cmd = |key: &str, from: &str, to: &str| post_command(&accounts, key, from, to);
    let single = |key: &str| cmd(key, "equity:world", "acct:0");
    // The journal is locked: the lane's first batch waits, and what follows stays queued.
    let lock = t.db().await;
    lock.batch_execute("BEGIN; LOCK TABLE ledger_state IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let first = queue(&writer, vec![single("first")]).await;
    let mut singles = Vec::new();
    for i in 0..3 {
        singles.push(queue(&writer, vec![single(&format!("q{i}"))]).await);
    }
    // A chain larger than the lane's batch_max: each request spends what the one before it
    // brought, so only its own order decides it.
    let mut chain = vec![cmd("chain-0", "equity:world", "acct:1")];
    for k in 1..5 {
        chain.push(cmd(
            &format!("chain-{k}"),
            &format!("acct:{k}"),
            &format!("acct:{}", k + 1),
        ));
    }
    chain.push(cmd("chain-5", "acct:5", "equity:world"));
    let chain = queue(&writer, chain).await;
    // 9 of 12 requests waiting: a call of 4 does not fit, nor one larger than the queue.
    let four = (0..4).map(|i| single(&format!("four-{i}"))).collect();
    let e = writer.submit_all(0, "anonymous", four).await.unwrap_err();
    assert_eq!(e.reason, ledger_core::Reason::StorageUnavailable);
    assert!(e.message.contains("MAX_WRITE_QUEUE"), "{}", e.message);
    assert!(
        e.message.contains("room for 3 of the call's 4"),
        "{}",
        e.message
    );
    let huge = (0..13).map(|i| single(&format!("huge-{i}"))).collect();
    let e = writer.submit_all(0, "anonymous", huge).await.unwrap_err();
    assert!(e.message.contains("can never fit"), "{}", e.message);
    let pair = queue(&writer, vec![single("pair-0"), single("pair-1")]).await;

    lock.batch_execute("ROLLBACK").await.unwrap();
    for h in [first].into_iter().chain(singles).chain([chain, pair]) {
        let outcomes = h.await.unwrap().expect("decided");
        assert!(outcomes.iter().all(|o| o.is_ok()), "{outcomes:?}");
    }
    // The singles fill a batch up to batch_max; the chain is held for the next one and
    // applied whole, alone; the pair follows.
    assert_eq!(*batches.lock().unwrap(), [1, 3, 6, 2]);
    assert_eq!(
        t.count("postings").await,
        12,
        "nothing of the refused calls"
    );
    let refused: i64 = t
        .db()
        .await
        .query_one(
            "SELECT count(*) FROM idempotency_keys WHERE idempotency_key LIKE 'four-%' OR idempotency_key LIKE 'huge-%'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(refused, 0);
}

#[tokio::test]
async fn batch_calls_and_their_requests_per_call_are_counted_in_the_metrics() {
    use crate::ops::{sample, scrape};
    let mut t = TestLedger::start_with(ledger_server::server::OpsOptions {
        metrics_listen: Some("127.0.0.1:0".parse().unwrap()),
        ..app_role_ops()
    })
    .await;
    let addr = t.server.as_ref().unwrap().metrics_addr.expect("metrics on");
    t.standard_accounts(1).await;
    let before = scrape(addr).await;
    for n in [3, 7] {
        let reqs = (0..n)
            .map(|i| transfer(&format!("m{n}-{i}"), "equity:world", "acct:0", "1.00"))
            .collect();
        t.client.post_batch(batch(reqs)).await.unwrap();
    }
    let after = scrape(addr).await;
    let moved = |name: &str, labels: &[(&str, &str)]| {
        sample(&after, name, labels) - sample(&before, name, labels)
    };
    // The recorder is the process's: other tests' calls may count too.
    let calls = [("method", "PostBatch"), ("code", "OK")];
    assert!(
        moved("ledger_grpc_requests_total", &calls) >= 2.0,
        "{after}"
    );
    assert!(
        moved("ledger_post_batch_requests_count", &[]) >= 2.0,
        "{after}"
    );
    assert!(
        moved("ledger_post_batch_requests_sum", &[]) >= 10.0,
        "{after}"
    );
}
