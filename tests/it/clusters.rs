//! Ledgers on several PostgreSQL clusters: each ledger's journal on its own cluster only, and
//! a cluster that is down makes only its own ledgers unavailable.

use crate::support::*;
use ledger_server::grpc::pb;
use ledger_server::server::OpsOptions;
use pb::ledger_client::LedgerClient;
use std::time::{Duration, Instant};
use tonic::transport::Channel;
use tonic::Code;

async fn create_ledger(c: &mut LedgerClient<Channel>, code: &str, cluster: &str) -> pb::LedgerInfo {
    c.create_ledger(pb::CreateLedgerRequest {
        code: code.into(),
        cluster: cluster.into(),
        ..Default::default()
    })
    .await
    .expect("ledger created")
    .into_inner()
    .ledger
    .unwrap()
}

async fn two_accounts(c: &mut LedgerClient<Channel>, ledger: &str) {
    for (code, normal) in [
        ("cash", pb::NormalBalance::Debit),
        ("world", pb::NormalBalance::Credit),
    ] {
        c.create_account(pb::CreateAccountRequest {
            ledger: ledger.into(),
            code: code.into(),
            currency: "EUR".into(),
            scale: 2,
            normal_balance: normal as i32,
            allow_negative: true,
            metadata: Default::default(),
        })
        .await
        .expect("account created");
    }
}

fn post_in(ledger: &str, key: &str) -> tonic::Request<pb::PostRequest> {
    let mut req = transfer(key, "world", "cash", "1.00");
    req.ledger = ledger.into();
    let mut r = tonic::Request::new(req);
    r.set_timeout(Duration::from_secs(2));
    r
}

/// Postings of the ledger `code` in the database of `url` (by the ledger's id there).
async fn postings_in(url: &str, code: &str) -> i64 {
    let db = ledger_server::storage::connect(url).await.unwrap();
    db.query_one(
        "SELECT count(*) FROM postings p JOIN ledgers l USING (ledger_id) WHERE l.code = $1",
        &[&code],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test]
async fn two_clusters_two_ledgers_each_ledgers_rows_are_only_on_its_own_cluster() {
    let east = pg::shared_cluster().fresh_database().await;
    let t = TestLedger::start_with(OpsOptions {
        clusters: vec![("east".into(), east.clone())],
        ..app_role_ops()
    })
    .await;
    let c = &mut t.client.clone();
    let acme = create_ledger(c, "acme", "east").await;
    let globex = create_ledger(c, "globex", "").await;
    assert_eq!(
        (acme.cluster.as_str(), globex.cluster.as_str()),
        ("east", "main")
    );
    for ledger in ["acme", "globex"] {
        two_accounts(c, ledger).await;
        for n in 0..5 {
            c.post(post_in(ledger, &format!("k{n}")))
                .await
                .expect("posted");
        }
        let b = c
            .get_balance(pb::GetBalanceRequest {
                ledger: ledger.into(),
                account: "cash".into(),
                as_of: None,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(b.balance, "5.00", "{ledger}");
    }
    assert_eq!(
        postings_in(&east, "acme").await,
        5,
        "acme's postings are on east"
    );
    assert_eq!(
        postings_in(&t.database_url, "acme").await,
        0,
        "and none on main"
    );
    assert_eq!(
        postings_in(&t.database_url, "globex").await,
        5,
        "globex's are on main"
    );
    assert_eq!(postings_in(&east, "globex").await, 0, "and none on east");
    let main_db = t.db().await;
    let accounts_of_acme_on_main: i64 = main_db
        .query_one("SELECT count(*) FROM accounts WHERE ledger_id = (SELECT ledger_id FROM ledgers WHERE code = 'acme')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(accounts_of_acme_on_main, 0);
    // The directory says where; an identical create finds it, another cluster conflicts, an
    // unknown cluster is refused naming those there are.
    let again = c
        .create_ledger(pb::CreateLedgerRequest {
            code: "acme".into(),
            cluster: "east".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!again.created);
    let e = c
        .create_ledger(pb::CreateLedgerRequest {
            code: "acme".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_error(&e, Code::FailedPrecondition, "LEDGER_CONFLICT");
    let e = c
        .create_ledger(pb::CreateLedgerRequest {
            code: "initech".into(),
            cluster: "west".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_error(&e, Code::InvalidArgument, "INVALID_FIELD");
    assert!(
        e.message().contains("east") && e.message().contains("main"),
        "{}",
        e.message()
    );
    let listed = c
        .list_ledgers(pb::ListLedgersRequest::default())
        .await
        .unwrap()
        .into_inner();
    let placed: Vec<(String, String)> = listed
        .ledgers
        .into_iter()
        .map(|l| (l.code, l.cluster))
        .collect();
    assert!(
        placed.contains(&("acme".into(), "east".into())),
        "{placed:?}"
    );
    // A cluster that knows the code as another ledger (some other deployment's) is not
    // written into: the create is refused and nothing of it lands there.
    let intruder = ledger_server::storage::connect(&east).await.unwrap();
    intruder
        .execute(
            "INSERT INTO ledgers (ledger_id, code, description, metadata) VALUES (9999, 'hooli', '', '{}')",
            &[],
        )
        .await
        .unwrap();
    let e = c
        .create_ledger(pb::CreateLedgerRequest {
            code: "hooli".into(),
            cluster: "east".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_error(&e, Code::DataLoss, "JOURNAL_CORRUPT");
    assert!(e.message().contains("another ledger"), "{}", e.message());
    // A second server started with the same clusters finds acme where it is.
    let second = TestLedger::on_database_with(
        t.database_url.clone(),
        OpsOptions {
            clusters: vec![("east".into(), east.clone())],
            ..app_role_ops()
        },
    )
    .await;
    second
        .client
        .clone()
        .post(post_in("acme", "from-the-second"))
        .await
        .expect("posted by the second");
    assert_eq!(postings_in(&east, "acme").await, 6);
}

#[tokio::test]
async fn with_one_cluster_stopped_its_ledgers_answer_unavailable_in_time_and_the_others_keep_writing(
) {
    let (mut east_pg, east) = pg::private_cluster().await;
    let t = TestLedger::start_with(OpsOptions {
        clusters: vec![("east".into(), east.clone())],
        ..app_role_ops()
    })
    .await;
    let c = &mut t.client.clone();
    create_ledger(c, "acme", "east").await;
    create_ledger(c, "globex", "").await;
    two_accounts(c, "acme").await;
    two_accounts(c, "globex").await;
    c.post(post_in("acme", "before"))
        .await
        .expect("acme posts while east is up");
    let mut east_pg = tokio::task::spawn_blocking(move || {
        east_pg.stop_immediate().unwrap();
        east_pg
    })
    .await
    .unwrap();
    // acme: UNAVAILABLE within the call's deadline, retry-safe; globex: unaffected.
    let started = Instant::now();
    let e = c.post(post_in("acme", "during")).await.unwrap_err();
    assert!(
        matches!(e.code(), Code::Unavailable | Code::DeadlineExceeded),
        "{e:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "answered in {:?}",
        started.elapsed()
    );
    for n in 0..20 {
        c.post(post_in("globex", &format!("g{n}")))
            .await
            .expect("globex posts while east is down");
    }
    // A ledger created on east now is in the directory but not yet on east: refused
    // UNAVAILABLE, and finished by its first use once east is back.
    let e = c
        .create_ledger(pb::CreateLedgerRequest {
            code: "initech".into(),
            cluster: "east".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    let east_pg = tokio::task::spawn_blocking(move || {
        east_pg.start_again().unwrap();
        east_pg
    })
    .await
    .unwrap();
    // The retry of the refused key posts it once east is back.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match c.post(post_in("acme", "during")).await {
            Ok(_) => break,
            Err(e) if e.code() == Code::Unavailable && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await
            }
            Err(e) => panic!("acme after east came back: {e:?}"),
        }
    }
    c.post(post_in("acme", "during")).await.expect("a replay");
    two_accounts(c, "initech").await;
    c.post(post_in("initech", "first"))
        .await
        .expect("initech posts on east");
    assert_eq!(postings_in(&east, "initech").await, 1);
    assert_eq!(
        postings_in(&east, "acme").await,
        2,
        "before and during, once each"
    );
    assert_eq!(postings_in(&t.database_url, "globex").await, 20);
    drop(east_pg);
}

/// The URI form (`postgresql://…`, as `--cluster` takes it) of a test database's keyword=value
/// connection string.
fn uri(conninfo: &str) -> String {
    let get = |key: &str| {
        conninfo
            .split(' ')
            .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("{conninfo:?} has no {key}"))
    };
    format!(
        "postgresql://{}@/{}?host={}&port={}",
        get("user"),
        get("dbname"),
        get("host"),
        get("port")
    )
}

/// `ledger <command> --database-url URL` with the arguments: its exit code and its output.
async fn ledger_over(command: &str, main: &str, args: &[&str]) -> (Option<i32>, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledger"))
        .args([command, "--database-url", main])
        .args(args)
        .env_remove("LEDGER_CLUSTERS")
        .output()
        .await
        .unwrap();
    let mut report = String::from_utf8_lossy(&out.stdout).into_owned();
    report.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code(), report)
}

#[tokio::test]
async fn check_and_verify_read_every_cluster_named_and_find_a_ledgers_rows_on_the_wrong_one() {
    let east = pg::shared_cluster().fresh_database().await;
    let t = TestLedger::start_with(OpsOptions {
        clusters: vec![("east".into(), east.clone())],
        ..app_role_ops()
    })
    .await;
    let c = &mut t.client.clone();
    create_ledger(c, "acme", "east").await;
    for ledger in ["acme", "default"] {
        two_accounts(c, ledger).await;
        for n in 0..3 {
            c.post(post_in(ledger, &format!("k{n}"))).await.unwrap();
        }
    }
    let main = t.database_url.as_str();
    let cluster = format!("east={}", uri(&east));
    for command in ["check", "verify"] {
        let (code, out) = ledger_over(command, main, &["--cluster", &cluster]).await;
        assert_eq!(code, Some(0), "{command}:\n{out}");
        assert!(
            out.contains("cluster main\n") && out.contains("cluster east\n"),
            "{command} reads both clusters:\n{out}"
        );
        assert!(
            out.contains("ok    a ledger's journal rows are only on the cluster"),
            "{out}"
        );
        // Without the cluster it says what it did not read.
        let (code, out) = ledger_over(command, main, &[]).await;
        assert_eq!(code, Some(0), "{command}:\n{out}");
        assert!(
            out.contains("not read: ledger acme on east"),
            "{command}:\n{out}"
        );
        // One ledger is read where the directory places it, or refused naming the flag.
        let (code, out) =
            ledger_over(command, main, &["--ledger", "acme", "--cluster", &cluster]).await;
        assert_eq!(code, Some(0), "{command} --ledger acme:\n{out}");
        assert!(
            out.contains("cluster east\n") && !out.contains("cluster main\n"),
            "{out}"
        );
        let (code, out) = ledger_over(command, main, &["--ledger", "acme"]).await;
        assert_eq!(
            code,
            Some(2),
            "{command} --ledger acme without east:\n{out}"
        );
        assert!(out.contains("--cluster east=URL"), "{out}");
    }
    // A row of acme's journal written on main (by hand, as the schema's owner) is found.
    t.db()
        .await
        .execute(
            "INSERT INTO accounts (ledger_id, code, currency, scale, normal_balance, \
             allow_negative, metadata) SELECT ledger_id, 'stray', 'EUR', 2, 'debit', true, '{}' \
             FROM ledgers WHERE code = 'acme'",
            &[],
        )
        .await
        .unwrap();
    let (code, out) = ledger_over("check", main, &["--cluster", &cluster]).await;
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("FAIL  a ledger's journal rows are only on the cluster")
            && out.contains("cluster main holds journal rows of ledger \"acme\""),
        "{out}"
    );
}

/// Acme's journal with one of everything a move must carry: postings, a void, an open hold
/// with an expiry, a new account version and the refusal it causes (a rejection), and events
/// not yet published (no publisher runs here).
async fn one_of_everything(c: &mut LedgerClient<Channel>, ledger: &str) {
    two_accounts(c, ledger).await;
    let mut first = None;
    for n in 0..3 {
        let r = c.post(post_in(ledger, &format!("p{n}"))).await.unwrap();
        first.get_or_insert(r.into_inner().posting.unwrap().posting_id);
    }
    c.void(pb::VoidRequest {
        ledger: ledger.into(),
        posting_id: first.unwrap(),
        idempotency_key: "void-p0".into(),
        reason: "typo".into(),
        ..Default::default()
    })
    .await
    .expect("voided");
    let expires = time::OffsetDateTime::now_utc() + time::Duration::days(30);
    let mut hold = post_in(ledger, "hold").into_inner();
    hold.hold = true;
    hold.hold_expires_at = Some(prost_types::Timestamp {
        seconds: expires.unix_timestamp(),
        nanos: 0,
    });
    c.post(hold).await.expect("held");
    c.update_account(pb::UpdateAccountRequest {
        ledger: ledger.into(),
        code: "cash".into(),
        expected_version: 1,
        update_mask: Some(prost_types::FieldMask {
            paths: vec!["debit_limits".into()],
        }),
        debit_limits: vec![pb::DebitLimit {
            amount: "10.00".into(),
            window_seconds: 60,
        }],
        idempotency_key: "limit".into(),
        reason: "fraud review".into(),
        ..Default::default()
    })
    .await
    .expect("a new version");
    let mut big = transfer("too-much", "world", "cash", "100.00");
    big.ledger = ledger.into();
    let e = c.post(big).await.unwrap_err();
    assert_error(&e, Code::FailedPrecondition, "DEBIT_LIMIT_EXCEEDED");
}

#[tokio::test]
async fn a_ledger_copied_under_a_fence_has_every_row_on_the_other_cluster_and_writes_wait_unbound()
{
    use ledger_server::storage::{ledgers, moves, verify};
    let east = pg::shared_cluster().fresh_database().await;
    let t = TestLedger::start_with(OpsOptions {
        clusters: vec![("east".into(), east.clone())],
        ..app_role_ops()
    })
    .await;
    let c = &mut t.client.clone();
    create_ledger(c, "acme", "").await;
    // East's own ledger takes account ids and key ids there that acme has on main.
    create_ledger(c, "local", "east").await;
    one_of_everything(c, "local").await;
    one_of_everything(c, "acme").await;
    let mut src = verify::connect(&t.database_url).await.unwrap();
    let mut dst = verify::connect(&east).await.unwrap();
    let book = ledgers::get(&src, "acme").await.unwrap().unwrap();
    let m = moves::Move {
        id: uuid::Uuid::now_v7(),
        ledger: book.id,
        from: "main".into(),
        to: "east".into(),
    };
    moves::set_fence(&mut src, book.id, m.id, true)
        .await
        .unwrap();
    let e = c.post(post_in("acme", "during")).await.unwrap_err();
    assert_error(&e, Code::Unavailable, "LEDGER_MOVING");
    assert!(
        e.message().contains("retry with the same idempotency key"),
        "{}",
        e.message()
    );
    ledgers::ensure_placed(&mut dst, &book).await.unwrap();
    let rows = moves::copy(&mut src, &mut dst, &m)
        .await
        .expect("copied and verified");
    assert!(rows > 20, "{rows} rows");
    assert_eq!(
        moves::fence_of(&dst, book.id).await.unwrap(),
        Some((m.id, true))
    );
    // The copy verifies on its own (hashes, tree, chain) and has the same head.
    let there = verify::verify_ledger(&mut dst, (book.id, "acme"), &[])
        .await
        .unwrap();
    let here = verify::verify_ledger(&mut src, (book.id, "acme"), &[])
        .await
        .unwrap();
    assert!(there.first.is_none(), "{:?}", there.first);
    assert_eq!((there.verified, there.root), (here.verified, here.root));
    assert_eq!(
        postings_in(&east, "acme").await,
        postings_in(main_of(&t), "acme").await
    );
    // Every invariant holds on east for both ledgers: acme's accounts got east's own ids.
    for ledger in ["acme", "local"] {
        let (code, out) = ledger_over("check", &uri(&east), &["--ledger", ledger]).await;
        assert_eq!(code, Some(0), "{ledger} on east:\n{out}");
    }
    // The fenced copy is no second home: check over both clusters passes.
    let cluster = format!("east={}", uri(&east));
    let (code, out) = ledger_over("check", main_of(&t), &["--cluster", &cluster]).await;
    assert_eq!(code, Some(0), "{out}");
    // A second copy is refused by the rows already there, and changes nothing.
    assert!(moves::copy(&mut src, &mut dst, &m).await.is_err());
    assert_eq!(
        postings_in(&east, "acme").await,
        postings_in(main_of(&t), "acme").await
    );
    // The fence lifted, the refused key was never bound: its retry is accepted.
    moves::set_fence(&mut src, book.id, m.id, false)
        .await
        .unwrap();
    c.post(post_in("acme", "during"))
        .await
        .expect("accepted after the fence");
}

fn main_of(t: &TestLedger) -> &str {
    &t.database_url
}
