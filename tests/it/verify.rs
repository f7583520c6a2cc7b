//! The verifiable journal from the auditor's side (docs/verifiable.md): every posting hash is
//! the documented encoding (recomputed here by an encoder of the test's own, written from the
//! page, not the core's); `ledger verify` recomputes the journal's hashes, tree and chain and
//! names the first posting each kind of tampering breaks; held digests are confirmed or
//! refused; and proofs served over gRPC verify offline with `ledger verify-proof`, and fail
//! against a rewritten history whose every hash was recomputed, as an attacker would.

use crate::support::*;
use ledger_server::grpc::convert::time_to_pb as ts;
use ledger_server::grpc::pb;
use sha2::{Digest as _, Sha256};
use std::path::PathBuf;
use std::process::Output;
use time::{Duration, OffsetDateTime};

// The encoding of docs/verifiable.md, table by table: big-endian, `str` is a u32 length and
// the UTF-8 bytes, `opt` a 00 or a 01 and the value, `time` i64 microseconds.

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u32).to_be_bytes());
    out.extend(s.as_bytes());
}

fn put_time(out: &mut Vec<u8>, t: &prost_types::Timestamp) {
    let micros = t.seconds * 1_000_000 + i64::from(t.nanos).div_euclid(1_000);
    out.extend(micros.to_be_bytes());
}

fn put_uuid(out: &mut Vec<u8>, id: &str) {
    out.extend(uuid::Uuid::parse_str(id).unwrap().as_bytes());
}

fn put_opt<T>(out: &mut Vec<u8>, v: Option<T>, put: impl FnOnce(&mut Vec<u8>, T)) {
    match v {
        None => out.push(0x00),
        Some(v) => {
            out.push(0x01);
            put(out, v);
        }
    }
}

fn non_empty(s: &str) -> Option<&str> {
    Some(s).filter(|s| !s.is_empty())
}

/// Fields 1 to 17 of the page's table, read from GetPosting's answer as the page says.
fn documented_encoding(p: &pb::Posting, prev: &[u8; 32]) -> Vec<u8> {
    let mut out = Vec::new();
    put_str(&mut out, "ledger.posting.v1");
    out.extend(prev);
    put_str(&mut out, non_empty(&p.ledger).unwrap_or("default"));
    out.extend(p.sequence.to_be_bytes());
    put_uuid(&mut out, &p.posting_id);
    put_str(&mut out, &p.caller);
    put_str(&mut out, &p.idempotency_key);
    put_time(&mut out, p.effective_at.as_ref().unwrap());
    put_time(&mut out, p.recorded_at.as_ref().unwrap());
    put_str(&mut out, &p.memo);
    let mut metadata: Vec<(&String, &String)> = p.metadata.iter().collect();
    metadata.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    out.extend((metadata.len() as u32).to_be_bytes());
    for (k, v) in metadata {
        put_str(&mut out, k);
        put_str(&mut out, v);
    }
    out.extend((p.legs.len() as u32).to_be_bytes());
    for leg in &p.legs {
        put_str(&mut out, &leg.account);
        out.push(match pb::Direction::try_from(leg.direction).unwrap() {
            pb::Direction::Debit => 0x01,
            pb::Direction::Credit => 0x02,
            other => panic!("a leg of direction {other:?}"),
        });
        put_str(&mut out, &leg.amount);
    }
    let kind = pb::PostingKind::try_from(p.kind).unwrap();
    let name = kind.as_str_name().strip_prefix("POSTING_KIND_").unwrap();
    put_str(&mut out, &name.to_lowercase());
    let voids = non_empty(&p.voids_posting_id);
    put_opt(&mut out, voids, put_uuid);
    put_opt(&mut out, voids.map(|_| p.void_reason.as_str()), put_str);
    put_opt(&mut out, p.hold_expires_at.as_ref(), put_time);
    let closes = match kind {
        pb::PostingKind::Capture => non_empty(&p.captures_hold_posting_id),
        pb::PostingKind::Release | pb::PostingKind::Expiry => {
            non_empty(&p.releases_hold_posting_id)
        }
        _ => None,
    };
    put_opt(&mut out, closes, put_uuid);
    out
}

fn documented_hash(p: &pb::Posting, prev: &[u8; 32]) -> [u8; 32] {
    Sha256::digest(documented_encoding(p, prev)).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// The worked example of docs/verifiable.md, as GetPosting would answer it.
fn worked_example() -> pb::Posting {
    let leg = |account: &str, direction: pb::Direction| pb::Leg {
        account: account.into(),
        direction: direction as i32,
        amount: "100.50".into(),
    };
    pb::Posting {
        posting_id: "01a23442-6b11-7682-9590-2608c7df6df2".into(),
        sequence: 1,
        idempotency_key: "topup-1001".into(),
        legs: vec![
            leg("cash:eur", pb::Direction::Debit),
            leg("wallet:alice", pb::Direction::Credit),
        ],
        effective_at: Some(prost_types::Timestamp {
            seconds: 1_799_157_720,
            nanos: 0,
        }),
        recorded_at: Some(prost_types::Timestamp {
            seconds: 1_799_157_720,
            nanos: 123_456_000,
        }),
        memo: "top-up".into(),
        metadata: [("order", "1001"), ("channel", "web")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into(),
        caller: "alice".into(),
        kind: pb::PostingKind::Posting as i32,
        ledger: "default".into(),
        ..Default::default()
    }
}

// Running the binary, and the files it reads.

async fn ledger(args: &[&str]) -> Output {
    ledger_reading(args, None).await
}

/// `ledger ARGS…` with `stdin` on its standard input.
async fn ledger_reading(args: &[&str], stdin: Option<&str>) -> Output {
    use tokio::io::AsyncWriteExt as _;
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledger"));
    cmd.args(args)
        .env_remove("DATABASE_URL")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("ledger runs");
    let mut input = child.stdin.take().unwrap();
    input
        .write_all(stdin.unwrap_or_default().as_bytes())
        .await
        .unwrap();
    drop(input);
    child.wait_with_output().await.unwrap()
}

/// Its exit code, and everything it printed (to show when an assertion fails).
fn outcome(out: &Output) -> (i32, String) {
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

async fn verify(t: &TestLedger, extra: &[&str]) -> (i32, String) {
    let mut args = vec!["verify", "--database-url", t.database_url.as_str()];
    args.extend(extra);
    outcome(&ledger(&args).await)
}

/// A directory of files, removed when dropped.
struct Files(PathBuf);

impl Files {
    fn new() -> Files {
        let dir = std::env::temp_dir().join(format!("ledger-verify-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        Files(dir)
    }

    fn put(&self, name: &str, text: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A message as grpcurl prints it: the proto3 JSON mapping of the served descriptors.
fn grpcurl_json<M: prost::Message>(name: &str, m: &M) -> String {
    let pool =
        prost_reflect::DescriptorPool::decode(ledger_server::grpc::FILE_DESCRIPTOR_SET).unwrap();
    let desc = pool.get_message_by_name(name).unwrap();
    let dynamic =
        prost_reflect::DynamicMessage::decode(desc, m.encode_to_vec().as_slice()).unwrap();
    serde_json::to_string_pretty(&dynamic).unwrap()
}

// The ledger's calls.

async fn digest(t: &mut TestLedger) -> String {
    let d = t
        .client
        .get_digest(pb::GetDigestRequest::default())
        .await
        .unwrap()
        .into_inner();
    format!("{}:{}", d.sequence, d.root)
}

async fn posting(t: &mut TestLedger, id: &str) -> pb::Posting {
    t.client
        .get_posting(pb::GetPostingRequest {
            by: Some(pb::get_posting_request::By::PostingId(id.into())),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}

async fn inclusion(t: &mut TestLedger, id: &str, size: u64) -> pb::InclusionProof {
    let req = pb::GetInclusionProofRequest {
        ledger: String::new(),
        posting_id: id.into(),
        digest_sequence: size,
    };
    t.client
        .get_inclusion_proof(req)
        .await
        .unwrap()
        .into_inner()
}

async fn consistency(t: &mut TestLedger, from: u64, to: u64) -> pb::ConsistencyProof {
    let req = pb::GetConsistencyProofRequest {
        ledger: String::new(),
        from_sequence: from,
        to_sequence: to,
    };
    t.client
        .get_consistency_proof(req)
        .await
        .unwrap()
        .into_inner()
}

/// Posts transfers `numbers` (key "ki", memo "posting i", one metadata entry each) and
/// returns their ids.
async fn transfers(t: &mut TestLedger, numbers: std::ops::RangeInclusive<usize>) -> Vec<String> {
    let mut ids = Vec::new();
    for i in numbers {
        let (from, to) = if i % 2 == 1 {
            ("equity:world", "acct:0")
        } else {
            ("acct:0", "acct:1")
        };
        let req = pb::PostRequest {
            memo: format!("posting {i}"),
            metadata: [("n".to_owned(), i.to_string())].into(),
            ..transfer(&format!("k{i}"), from, to, "1.00")
        };
        ids.push(t.post(req).await.unwrap().posting.unwrap().posting_id);
    }
    ids
}

/// A posting with memo and metadata, a void, a hold with an expiry and its capture in part,
/// a hold released by its void: each kind of field the encoding has. Their ids, in order.
async fn postings_of_every_kind(t: &mut TestLedger) -> Vec<String> {
    let back_dated = OffsetDateTime::now_utc() - Duration::days(3) + Duration::microseconds(7);
    let first = pb::PostRequest {
        memo: "top-up, ünïcode".into(),
        metadata: [
            ("order", "1001"),
            ("channel", "web"),
            ("Zeta", "upper case first"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into(),
        effective_at: Some(ts(back_dated)),
        ..transfer("top-up", "equity:world", "acct:0", "100.00")
    };
    let mut ids = vec![t.post(first).await.unwrap().posting.unwrap().posting_id];
    let paid = t.post(transfer("pay", "acct:0", "acct:1", "10.00")).await;
    ids.push(paid.unwrap().posting.unwrap().posting_id);
    let void = |key: &str, id: &str, reason: &str| pb::VoidRequest {
        idempotency_key: key.into(),
        posting_id: id.into(),
        reason: reason.into(),
        ..Default::default()
    };
    let voided = t.client.void(void("void", &ids[1], "sent twice")).await;
    ids.push(voided.unwrap().into_inner().posting.unwrap().posting_id);
    let hold = pb::PostRequest {
        hold: true,
        hold_expires_at: Some(ts(OffsetDateTime::now_utc() + Duration::days(1))),
        ..transfer("hold", "acct:0", "acct:1", "20.00")
    };
    let hold = t.post(hold).await.unwrap().posting.unwrap().posting_id;
    ids.push(hold.clone());
    let capture = pb::CaptureRequest {
        idempotency_key: "capture".into(),
        hold_posting_id: hold,
        legs: vec![
            leg("acct:1", pb::Direction::Debit, "15.00"),
            leg("acct:0", pb::Direction::Credit, "15.00"),
        ],
        memo: "captured in part".into(),
        ..Default::default()
    };
    let captured = t.client.capture(capture).await.unwrap().into_inner();
    ids.push(captured.posting.unwrap().posting_id);
    let open = pb::PostRequest {
        hold: true,
        ..transfer("hold-2", "acct:0", "acct:1", "5.00")
    };
    let open = t.post(open).await.unwrap().posting.unwrap().posting_id;
    ids.push(open.clone());
    let released = t.client.void(void("release", &open, "")).await;
    ids.push(released.unwrap().into_inner().posting.unwrap().posting_id);
    ids
}

#[tokio::test]
async fn every_posting_hash_is_the_documented_encoding_recomputed_here_chained_from_32_zero_bytes()
{
    // The test's encoder first gives the page's worked example its printed hash.
    assert_eq!(
        hex(&documented_hash(&worked_example(), &[0; 32])),
        "8b7535d816067c5e6417a1288dec92dfc1235490ef2ffd45ffafba19f3c3ec31"
    );
    let mut t = TestLedger::start().await;
    t.standard_accounts(2).await;
    let ids = postings_of_every_kind(&mut t).await;
    let mut prev = [0u8; 32];
    let mut kinds = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let p = posting(&mut t, id).await;
        assert_eq!(p.sequence, i as u64 + 1);
        let h = documented_hash(&p, &prev);
        assert_eq!(
            p.hash,
            hex(&h),
            "posting {} as GetPosting shows it: {p:?}",
            p.sequence
        );
        kinds.push(pb::PostingKind::try_from(p.kind).unwrap());
        prev = h;
    }
    use pb::PostingKind as K;
    let every = [
        K::Posting,
        K::Posting,
        K::Void,
        K::Hold,
        K::Capture,
        K::Hold,
        K::Release,
    ];
    assert_eq!(kinds, every);
    let (code, report) = verify(&t, &[]).await;
    assert_eq!(code, 0, "{report}");
}

#[tokio::test]
async fn ledger_verify_passes_on_a_clean_journal_and_names_the_first_posting_each_tampering_breaks()
{
    // (what, the attack as the superuser with the triggers off, the first broken sequence,
    // what the report says of it)
    let tamperings: &[(&str, &str, u64, &str)] = &[
        (
            "a rewritten memo",
            "UPDATE postings SET memo = 'rewritten' WHERE sequence = 2",
            2,
            "is not the hash recomputed from the journal",
        ),
        (
            "a rewritten amount",
            "UPDATE entries SET amount = amount + 1 WHERE sequence = 3",
            3,
            "is not the hash recomputed from the journal",
        ),
        (
            "a leg moved to another account of the ledger",
            "UPDATE entries SET account_id = (SELECT account_id FROM accounts WHERE code = 'acct:2')
             WHERE sequence = 2 AND leg_index = 0",
            2,
            "is not the hash recomputed from the journal",
        ),
        (
            "a time changed",
            "UPDATE postings SET effective_at = effective_at - interval '1 day' WHERE sequence = 3",
            3,
            "is not the hash recomputed from the journal",
        ),
        (
            "a deleted posting",
            "DELETE FROM entries WHERE sequence = 2; DELETE FROM outbox WHERE sequence = 2;
             DELETE FROM postings WHERE sequence = 2",
            2,
            "a gap",
        ),
        (
            "two postings' contents swapped",
            "UPDATE postings p SET memo = q.memo, metadata = q.metadata FROM postings q
             WHERE (p.sequence, q.sequence) IN ((2, 3), (3, 2))",
            2,
            "is not the hash recomputed from the journal",
        ),
        (
            "a leg deleted, so the posting cannot be read",
            "DELETE FROM entries WHERE sequence = 3 AND leg_index = 1",
            3,
            "cannot be read: corrupt journal row: posting of sequence 3",
        ),
        (
            "a stored hash deleted",
            "DELETE FROM posting_hashes WHERE sequence = 2",
            2,
            "posting_hashes has no row for it",
        ),
        (
            "a stored tree node changed",
            "UPDATE posting_hashes SET nodes = nodes || nodes WHERE sequence = 4",
            4,
            "its stored tree nodes",
        ),
        (
            "a stored digest root changed",
            "UPDATE posting_hashes SET root = hash WHERE sequence = 3",
            3,
            "its stored digest root",
        ),
        (
            "the chain's head changed",
            "UPDATE ledger_state SET tree_head = (SELECT hash FROM posting_hashes WHERE sequence = 3)",
            4,
            "the ledger's chain in ledger_state: tree_head",
        ),
    ];
    for (what, sql, sequence, why) in tamperings {
        let mut t = TestLedger::start().await;
        t.standard_accounts(3).await;
        transfers(&mut t, 1..=4).await;
        let (code, report) = verify(&t, &[]).await;
        assert_eq!(code, 0, "{what}: the clean journal: {report}");
        assert!(
            report.contains("ok    ledger default: postings 1..=4 verified"),
            "{report}"
        );
        t.db()
            .await
            .batch_execute(&format!(
                "SET session_replication_role = replica; {sql}; SET session_replication_role = origin;"
            ))
            .await
            .unwrap();
        let (code, report) = verify(&t, &[]).await;
        assert_eq!(code, 1, "{what}: {report}");
        let line = format!("FAIL  ledger default at sequence {sequence}: ");
        assert!(report.contains(&line), "{what}: {line:?} not in:\n{report}");
        assert!(report.contains(why), "{what}: {why:?} not in:\n{report}");
        assert!(report.contains("ledgers: 1 verified, 1 failed"), "{report}");
    }
}

#[tokio::test]
async fn a_held_digest_is_confirmed_by_its_root_and_refused_with_another() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(2).await;
    transfers(&mut t, 1..=2).await;
    let at_2 = digest(&mut t).await;
    transfers(&mut t, 3..=3).await;
    let at_3 = digest(&mut t).await;
    let (code, report) = verify(&t, &["--digest", &at_3, "--digest", &at_2]).await;
    assert_eq!(code, 0, "{report}");
    for d in [&at_2, &at_3] {
        assert!(
            report.contains(&format!("digest {d} confirmed")),
            "{report}"
        );
    }
    let other = format!("3:{}", &at_2[2..]);
    let (code, report) = verify(&t, &["--digest", &other]).await;
    assert_eq!(code, 1, "{report}");
    assert!(
        report.contains(&format!("digest {other} NOT confirmed"))
            && report.contains(&format!(
                "has the root {}, not the digest's {}",
                &at_3[2..],
                &at_2[2..]
            )),
        "both roots named: {report}"
    );
    let longer = format!("9:{}", &at_3[2..]);
    let (code, report) = verify(&t, &["--digest", &longer]).await;
    assert_eq!(code, 1, "{report}");
    assert!(
        report.contains("the tree of ledger default has size 3 only"),
        "{report}"
    );
    // A digest is of one ledger: with two, it needs --ledger.
    create_ledger(&mut t.client, "acme").await;
    let (code, report) = verify(&t, &["--digest", &at_3]).await;
    assert_eq!(code, 2, "{report}");
    assert!(report.contains("--digest needs --ledger"), "{report}");
    let (code, report) = verify(&t, &["--digest", &at_3, "--ledger", "default"]).await;
    assert_eq!(code, 0, "{report}");
    let (code, report) = verify(&t, &[]).await;
    assert_eq!(code, 0, "{report}");
    assert!(
        report.contains("ok    ledger acme: no posting hashed yet"),
        "{report}"
    );
    assert!(report.contains("ledgers: 2 verified, 0 failed"), "{report}");
}

#[tokio::test]
async fn ledger_verify_exits_2_saying_why_when_it_cannot_run_or_is_given_bad_input() {
    let unreachable = [
        "verify",
        "--database-url",
        "host=/nonexistent/dir dbname=x user=y",
    ];
    let (code, report) = outcome(&ledger(&unreachable).await);
    assert_eq!(code, 2, "{report}");
    assert!(report.contains("ledger verify could not run"), "{report}");
    let t = TestLedger::start().await;
    let (code, report) = verify(&t, &["--ledger", "nope"]).await;
    assert_eq!(code, 2, "{report}");
    assert!(
        report.contains("no ledger has the code \"nope\""),
        "{report}"
    );
    for bad in ["12", "x:00", "3:abc"] {
        let (code, report) = verify(&t, &["--digest", bad]).await;
        assert_eq!(code, 2, "{bad}: {report}");
        assert!(report.contains("a digest is SEQ:ROOT"), "{report}");
    }
}

#[tokio::test]
async fn a_ledger_hashed_part_way_is_verified_up_to_its_tree_size_and_a_hash_beyond_it_fails() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(2).await;
    transfers(&mut t, 1..=4).await;
    let db = t.db().await;
    // The chain as if hashing had stopped after posting 2: its head, and its frontier (the
    // node of level 1 that posting 2 completed).
    db.batch_execute(
        "UPDATE ledger_state SET tree_size = 2,
           tree_head = (SELECT hash FROM posting_hashes WHERE sequence = 2),
           tree_frontier = (SELECT substring(nodes FROM 33 FOR 32) FROM posting_hashes WHERE sequence = 2)
         WHERE ledger_id = 0",
    )
    .await
    .unwrap();
    let (code, report) = verify(&t, &[]).await;
    assert_eq!(code, 1, "{report}");
    assert!(
        report.contains(
            "at sequence 3: hashed (a posting_hashes row) beyond the chain's tree_size 2"
        ),
        "{report}"
    );
    db.batch_execute(
        "SET session_replication_role = replica; DELETE FROM posting_hashes WHERE sequence > 2",
    )
    .await
    .unwrap();
    let (code, report) = verify(&t, &[]).await;
    assert_eq!(code, 0, "{report}");
    assert!(
        report.contains("postings 1..=2 verified")
            && report.contains("hashing is not caught up: 2 of 4 postings hashed"),
        "{report}"
    );
}

#[tokio::test]
async fn a_consistency_proof_between_two_digests_verifies_offline_and_prints_the_digest_it_proves()
{
    let mut t = TestLedger::start().await;
    t.standard_accounts(2).await;
    transfers(&mut t, 1..=2).await;
    let held = digest(&mut t).await;
    transfers(&mut t, 3..=5).await;
    let now = digest(&mut t).await;
    let proof = grpcurl_json(
        "ledger.v1.ConsistencyProof",
        &consistency(&mut t, 2, 5).await,
    );
    let files = Files::new();
    let file = files.put("consistency.json", &proof);
    let run = |args: Vec<String>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        outcome(&ledger(&args).await)
    };
    let args = |digest: &str, more: &[&str]| -> Vec<String> {
        let mut a = vec!["verify-proof", "--digest", digest, &file];
        a.extend(more);
        a.into_iter().map(str::to_owned).collect()
    };
    let (code, report) = run(args(&held, &[])).await;
    assert_eq!(code, 0, "{report}");
    assert!(report.contains(&format!("proven digest {now}")), "{report}");
    let (code, report) = run(args(&held, &["--to", &now])).await;
    assert_eq!(code, 0, "{report}");
    let not_now = format!("5:{}", &held[2..]);
    let (code, report) = run(args(&held, &["--to", &not_now])).await;
    assert_eq!(code, 1, "{report}");
    assert!(
        report.contains(&format!("not at --to's {not_now}")),
        "{report}"
    );
    let (code, report) = run(args(&format!("2:{}", &now[2..]), &[])).await;
    assert_eq!(code, 1, "{report}");
    assert!(report.contains("not from the one you hold"), "{report}");
    // Read from standard input, with its sizes as JSON numbers rather than strings.
    let numbers = proof
        .replace("\"fromSequence\": \"2\"", "\"fromSequence\": 2")
        .replace("\"toSequence\": \"5\"", "\"toSequence\": 5");
    assert_ne!(numbers, proof, "grpcurl prints uint64 as strings");
    let stdin = ["verify-proof", "--digest", &held, "-"];
    let (code, report) = outcome(&ledger_reading(&stdin, Some(&numbers)).await);
    assert_eq!(code, 0, "{report}");
    let (code, report) = outcome(&ledger_reading(&stdin, Some("{\"fromSequence\": -2}")).await);
    assert_eq!(code, 2, "bad input: {report}");
    assert!(
        report.contains("fromSequence must be an unsigned 64-bit integer"),
        "{report}"
    );
}

/// Rewrites posting 2's memo and recomputes every hash, node, root and the chain from the
/// journal with the test's own encoder, as an attacker who can write the database would.
async fn rewrite_history(t: &mut TestLedger, ids: &[String]) {
    let db = t.db().await;
    db.batch_execute(
        "SET session_replication_role = replica;
         UPDATE postings SET memo = 'nothing to see' WHERE sequence = 2;
         DELETE FROM posting_hashes WHERE sequence < 1099511627776;",
    )
    .await
    .unwrap();
    let (mut prev, mut frontier) = ([0u8; 32], ledger_core::journal::Frontier::new());
    for id in ids {
        let p = posting(t, id).await;
        prev = documented_hash(&p, &prev);
        let nodes = frontier.append(&prev).concat();
        let root = frontier.root().unwrap().to_vec();
        db.execute(
            "INSERT INTO posting_hashes VALUES ($1, $2, $3, $4)",
            &[&(p.sequence as i64), &prev.to_vec(), &nodes, &root],
        )
        .await
        .unwrap();
    }
    db.execute(
        "UPDATE ledger_state SET tree_head = $1, tree_frontier = $2 WHERE ledger_id = 0",
        &[&prev.to_vec(), &frontier.to_bytes()],
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn an_inclusion_proof_verifies_against_the_held_digest_and_fails_against_a_rewritten_history()
{
    let mut t = TestLedger::start().await;
    t.standard_accounts(2).await;
    let mut ids = transfers(&mut t, 1..=1).await;
    let at_1 = digest(&mut t).await;
    ids.extend(transfers(&mut t, 2..=4).await);
    let held = digest(&mut t).await;
    let files = Files::new();
    let proof_of = |name: &str, p: &pb::InclusionProof| {
        files.put(name, &grpcurl_json("ledger.v1.InclusionProof", p))
    };
    let check = |digest: &str, file: &str, more: &[&str]| {
        let mut args = vec!["verify-proof", "--digest", digest, file];
        args.extend(more);
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            outcome(&ledger(&args).await)
        }
    };
    // Posting 1 in the tree of 1: leaf 0, no path (proto3 JSON leaves both out).
    let first = proof_of("first.json", &inclusion(&mut t, &ids[0], 1).await);
    assert!(!std::fs::read_to_string(&first)
        .unwrap()
        .contains("leafIndex"));
    let (code, report) = check(&at_1, &first, &[]).await;
    assert_eq!(code, 0, "{report}");
    // Posting 3 in the tree of 4, its hash recomputed from GetPosting's answer.
    let third = proof_of("third.json", &inclusion(&mut t, &ids[2], 4).await);
    let p3 = posting(&mut t, &ids[2]).await;
    let p2_hash = posting(&mut t, &ids[1]).await.hash;
    let p3_json = files.put("p3.json", &grpcurl_json("ledger.v1.Posting", &p3));
    let with_posting = [
        "--posting",
        p3_json.as_str(),
        "--prev-hash",
        p2_hash.as_str(),
    ];
    let (code, report) = check(&held, &third, &with_posting).await;
    assert_eq!(code, 0, "{report}");
    assert!(
        report.contains("the hash of posting 3 recomputed from"),
        "{report}"
    );
    let changed = files.put(
        "p3-changed.json",
        &std::fs::read_to_string(&p3_json)
            .unwrap()
            .replace("posting 3", "posting 33"),
    );
    let with_changed = [
        "--posting",
        changed.as_str(),
        "--prev-hash",
        p2_hash.as_str(),
    ];
    let (code, report) = check(&held, &third, &with_changed).await;
    assert_eq!(code, 1, "{report}");
    assert!(
        report.contains("is not the proof's postingHash"),
        "{report}"
    );
    let other = format!("4:{}", hex(&[7; 32]));
    let (code, report) = check(&other, &third, &[]).await;
    assert_eq!(code, 1, "{report}");
    // The attacker's history: verify cannot tell it from the journal alone, the held digest
    // can.
    rewrite_history(&mut t, &ids).await;
    let forged = digest(&mut t).await;
    assert_ne!(forged, held);
    let (code, report) = verify(&t, &[]).await;
    assert_eq!(
        code, 0,
        "a consistent rewrite of journal and hashes: {report}"
    );
    let (code, report) = verify(&t, &["--digest", &held]).await;
    assert_eq!(code, 1, "{report}");
    assert!(
        report.contains(&format!("digest {held} NOT confirmed")),
        "{report}"
    );
    let forged_proof = proof_of("forged.json", &inclusion(&mut t, &ids[2], 4).await);
    let (code, report) = check(&held, &forged_proof, &[]).await;
    assert_eq!(code, 1, "{report}");
    assert!(
        report.contains(&format!(
            "is not the root of the digest you hold, {}",
            &held[2..]
        )),
        "{report}"
    );
    let (code, report) = check(&forged, &forged_proof, &[]).await;
    assert_eq!(
        code, 0,
        "against the forged digest the forged proof holds: {report}"
    );
    let to_forged = files.put(
        "to-forged.json",
        &grpcurl_json(
            "ledger.v1.ConsistencyProof",
            &consistency(&mut t, 1, 4).await,
        ),
    );
    let (code, report) = check(&at_1, &to_forged, &["--to", &held]).await;
    assert_eq!(
        code, 1,
        "the forged tree does not end at the held digest: {report}"
    );
    let (size, root) = forged.split_once(':').unwrap();
    let not_a_proof = serde_json::json!({ "ledger": "default", "sequence": size, "root": root });
    let not_a_proof = files.put("digest.json", &not_a_proof.to_string());
    let (code, report) = check(&at_1, &not_a_proof, &[]).await;
    assert_eq!(code, 2, "a digest is not a proof: {report}");
    assert!(report.contains("is neither an InclusionProof"), "{report}");
}

/// The JSON of the worked example in docs/verifiable.md: the first `json` block after its
/// heading, as grpcurl prints GetPosting's answer.
fn worked_example_json() -> serde_json::Map<String, serde_json::Value> {
    let docs = include_str!("../../docs/verifiable.md");
    let section = docs.split("## Worked example").nth(1).expect("the section");
    let json = section.split("```json").nth(1).expect("a json block");
    serde_json::from_str(json.split("```").next().unwrap()).expect("the example is JSON")
}

#[tokio::test]
async fn the_documented_example_verifies_offline_as_the_one_posting_of_a_tree_and_bad_input_exits_2(
) {
    use serde_json::{json, Value};
    let hash = "8b7535d816067c5e6417a1288dec92dfc1235490ef2ffd45ffafba19f3c3ec31";
    let leaf = Sha256::digest([&[0u8][..], &unhex(hash)].concat());
    let root = hex(&leaf);
    // The tree of one posting: its root is the leaf's hash, its path empty (left out).
    let proof = json!({ "treeSize": "1", "root": root, "postingHash": hash }).to_string();
    let files = Files::new();
    let proof = files.put("proof.json", &proof);
    let digest = format!("1:{root}");
    let run = |posting: Value, more: &[&str]| {
        let posting = files.put("posting.json", &posting.to_string());
        let mut args = vec!["verify-proof", "--digest", &digest, "--posting", &posting];
        args.extend(more);
        args.push(&proof);
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            outcome(&ledger(&args).await)
        }
    };
    let example = worked_example_json();
    let (code, report) = run(Value::Object(example.clone()), &[]).await;
    assert_eq!(code, 0, "{report}");
    assert!(
        report.contains(&format!(
            "recomputed from {} is the proof's, {hash}",
            files.0.join("posting.json").display()
        )),
        "{report}"
    );
    // The proto field names and a number for the sequence read the same.
    let mut spelled = example.clone();
    for (camel, proto) in [("postingId", "posting_id"), ("recordedAt", "recorded_at")] {
        let v = spelled.remove(camel).unwrap();
        spelled.insert(proto.into(), v);
    }
    spelled.insert("sequence".into(), json!(1));
    let (code, report) = run(Value::Object(spelled), &[]).await;
    assert_eq!(code, 0, "{report}");
    let mut changed = example.clone();
    changed.insert("memo".into(), json!("top-up!"));
    let (code, report) = run(Value::Object(changed), &[]).await;
    assert_eq!(code, 1, "{report}");
    // Bad input: exit 2 naming the field and what it must be.
    let cases: &[(&str, Value, &str)] = &[
        (
            "sequence",
            json!(-1),
            "sequence must be an unsigned 64-bit integer",
        ),
        (
            "sequence",
            json!("2"),
            "--prev-hash is required with --posting for posting 2",
        ),
        (
            "kind",
            json!("POSTING_KIND_NONE"),
            "kind must be a PostingKind",
        ),
        (
            "recordedAt",
            json!("yesterday"),
            "recordedAt \"yesterday\" is not an RFC 3339",
        ),
        ("postingId", json!("x"), "postingId \"x\""),
        (
            "holdExpiresAt",
            json!("2027-01-06T00:00:00Z"),
            "only a hold has one",
        ),
        (
            "legs",
            json!([{ "account": "a", "direction": "DIRECTION_DEBIT", "amount": "1e2" }]),
            "legs[0]: amount \"1e2\" is not a decimal",
        ),
    ];
    for (field, value, want) in cases {
        let mut bad = example.clone();
        bad.insert((*field).into(), value.clone());
        let (code, report) = run(Value::Object(bad), &[]).await;
        assert_eq!(code, 2, "{field}: {report}");
        assert!(report.contains(want), "{field}: {want:?} not in {report}");
    }
    let (code, report) = run(Value::Object(example), &["--to", &digest]).await;
    assert_eq!(code, 2, "{report}");
    assert!(
        report.contains("--to is for a consistency proof"),
        "{report}"
    );
}
