//! `ledger check` passes on a sound ledger and names each kind of corruption.

use crate::faults::ledger_check;
use crate::support::*;
use ledger_server::grpc::pb;

#[tokio::test]
async fn ledger_check_passes_on_a_sound_ledger_and_fails_on_each_corruption() {
    let corruptions: &[(&str, &str)] = &[
        (
            "UPDATE entries SET amount = amount + 1 WHERE sequence = 1 AND leg_index = 0",
            "every posting balances per currency",
        ),
        (
            "UPDATE account_totals SET debits = debits + 5",
            "stored account totals equal the sums of their legs",
        ),
        (
            "UPDATE entries SET debits_after = debits_after + 1 WHERE sequence = 2",
            "running totals after each leg chain",
        ),
        (
            "UPDATE ledger_state SET last_sequence = 99",
            "sequence is gapless",
        ),
        (
            "DELETE FROM outbox WHERE sequence = 2",
            "every posting has exactly one event",
        ),
        (
            "DELETE FROM entries WHERE sequence = 3 AND leg_index = 1",
            "every posting has at least two legs",
        ),
        (
            "UPDATE postings SET recorded_at = '2000-01-01' WHERE sequence = 3",
            "recorded_at strictly increases",
        ),
        (
            "INSERT INTO expiring_holds VALUES (2, now(), gen_random_uuid(), 0, 'D', 1)",
            "the index of expiring holds lists exactly",
        ),
    ];
    for (sql, invariant) in corruptions {
        let mut t = TestLedger::start().await;
        t.standard_accounts(2).await;
        t.post(transfer("a", "equity:world", "acct:0", "10.00"))
            .await
            .unwrap();
        t.post(transfer("b", "acct:0", "acct:1", "4.00"))
            .await
            .unwrap();
        t.post(transfer("c", "equity:world", "acct:1", "1.00"))
            .await
            .unwrap();
        let (ok, report) = ledger_check(&t.database_url).await;
        assert!(ok, "sound ledger: {report}");
        let db = t.db().await;
        // As the superuser, bypass the append-only triggers the way an attacker or a bug could.
        db.batch_execute(&format!(
            "SET session_replication_role = replica; {sql}; SET session_replication_role = origin;"
        ))
        .await
        .unwrap();
        let (ok, report) = ledger_check(&t.database_url).await;
        assert!(!ok, "{sql}: check passed:\n{report}");
        let line = report
            .lines()
            .find(|l| l.contains(invariant))
            .unwrap_or_else(|| panic!("{invariant} not in report:\n{report}"));
        assert!(line.starts_with("FAIL"), "{sql}: {line}\n{report}");
    }
}

/// A posting is applied whole: the no-negative rule holds between postings, not between the
/// legs of one. A posting that pays 50.00 out of a no-negative account holding 30.00 and pays
/// 50.00 back into it in the same posting nets to zero there, so it is accepted; the
/// statement shows the balance after the posting on both of its lines, and `ledger check`
/// agrees that the account was never below zero.
#[tokio::test]
async fn a_posting_that_nets_to_zero_on_a_no_negative_account_keeps_statement_and_check_agreed() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(2).await;
    t.post(transfer("fund", "equity:world", "acct:0", "30.00"))
        .await
        .unwrap();
    let netting = pb::PostRequest {
        legs: vec![
            leg("acct:0", pb::Direction::Credit, "50.00"),
            leg("acct:0", pb::Direction::Debit, "50.00"),
            leg("acct:1", pb::Direction::Debit, "1.00"),
            leg("equity:world", pb::Direction::Credit, "1.00"),
        ],
        ..transfer("net", "equity:world", "acct:0", "0")
    };
    t.post(netting)
        .await
        .expect("a posting netting to zero is accepted");
    let entries = t
        .client
        .list_entries(pb::ListEntriesRequest {
            account: "acct:0".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .entries;
    let after: Vec<&str> = entries.iter().map(|e| e.balance_after.as_str()).collect();
    assert_eq!(after, ["30.00", "30.00", "30.00"], "{entries:?}");
    let (ok, report) = ledger_check(&t.database_url).await;
    assert!(ok, "{report}");
    // The rule still refuses a posting that leaves the account below zero.
    let overdraw = pb::PostRequest {
        legs: vec![
            leg("acct:0", pb::Direction::Credit, "50.00"),
            leg("acct:0", pb::Direction::Debit, "10.00"),
            leg("equity:world", pb::Direction::Debit, "40.00"),
        ],
        ..transfer("over", "equity:world", "acct:0", "0")
    };
    let e = t.post(overdraw).await.unwrap_err();
    assert_error(&e, tonic::Code::FailedPrecondition, "INSUFFICIENT_FUNDS");
}

/// A ledger with each kind of hold: captured in part, released, expired, open.
async fn ledger_with_holds() -> TestLedger {
    use time::{Duration, OffsetDateTime};
    let mut t = TestLedger::start().await;
    t.standard_accounts(2).await;
    t.post(transfer("fund", "equity:world", "acct:0", "50.00"))
        .await
        .unwrap();
    let hold = |key: &str, amount: &str| pb::PostRequest {
        hold: true,
        ..transfer(key, "acct:0", "acct:1", amount)
    };
    let h1 = t.post(hold("h1", "20.00")).await.unwrap().posting.unwrap();
    let capture = pb::CaptureRequest {
        idempotency_key: "c".into(),
        hold_posting_id: h1.posting_id,
        legs: vec![
            leg("acct:1", pb::Direction::Debit, "15.00"),
            leg("acct:0", pb::Direction::Credit, "15.00"),
        ],
        ..Default::default()
    };
    t.client.capture(capture).await.unwrap();
    let h2 = t.post(hold("h2", "10.00")).await.unwrap().posting.unwrap();
    let release = pb::VoidRequest {
        ledger: String::new(),
        idempotency_key: "r".into(),
        posting_id: h2.posting_id,
        reason: "released".into(),
        effective_at: None,
    };
    t.client.void(release).await.unwrap();
    let soon = OffsetDateTime::now_utc() + Duration::milliseconds(200);
    t.post(pb::PostRequest {
        hold_expires_at: Some(ledger_server::grpc::convert::time_to_pb(soon)),
        ..hold("h3", "5.00")
    })
    .await
    .unwrap();
    t.post(hold("h4", "1.00")).await.unwrap();
    let db = t.db().await;
    for _ in 0..100 {
        let expired: i64 = db
            .query_one(
                "SELECT count(*) FROM postings WHERE close_kind = 'expire'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if expired == 1 {
            return t;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("hold h3 was not released by the ledger");
}

#[tokio::test]
async fn ledger_check_verifies_held_totals_and_every_close_of_a_hold() {
    let seq =
        |key: &str| format!("(SELECT sequence FROM postings WHERE idempotency_key = '{key}')");
    let corruptions = [
        (
            "UPDATE account_totals SET held_credits = held_credits + 1".to_owned(),
            "stored held totals equal the legs of the open holds",
        ),
        (
            format!("UPDATE entries SET amount = 25.00 WHERE sequence = {}", seq("c")),
            "every capture is within its hold",
        ),
        (
            format!("DELETE FROM entries WHERE sequence = {} AND leg_index = 1", seq("c")),
            "every capture is within its hold",
        ),
        (
            format!(
                "ALTER TABLE postings DROP CONSTRAINT postings_hold_closed_once,
                   DROP CONSTRAINT postings_release_is_the_void_of_its_hold;
                 UPDATE postings SET closes_hold_posting_id = (SELECT posting_id FROM postings WHERE idempotency_key = 'h1')
                 WHERE sequence = {}",
                seq("r")
            ),
            "every hold is closed at most once",
        ),
        (
            // A capture naming no posting (no foreign key refuses it: migration 0011).
            format!(
                "ALTER TABLE postings DROP CONSTRAINT postings_hold_closed_once;
                 UPDATE postings SET closes_hold_posting_id = gen_random_uuid() WHERE sequence = {}",
                seq("c")
            ),
            "every hold is closed at most once",
        ),
        (
            "UPDATE postings SET effective_at = effective_at + interval '1 second' WHERE close_kind = 'expire'".to_owned(),
            "every release of an expired hold is the ledger's",
        ),
        (
            format!("UPDATE hold_legs SET direction = 'D' WHERE sequence = {}", seq("r")),
            "release",
        ),
        (
            "INSERT INTO hold_legs SELECT sequence, leg_index + 10, account_id, direction, amount FROM entries WHERE sequence = 1".to_owned(),
            "never both",
        ),
        (
            format!("UPDATE hold_legs SET amount = amount + 1 WHERE sequence = {} AND leg_index = 0", seq("h4")),
            "every posting balances per currency",
        ),
    ];
    for (sql, invariant) in corruptions {
        let t = ledger_with_holds().await;
        let (ok, report) = ledger_check(&t.database_url).await;
        assert!(ok, "sound ledger with holds: {report}");
        let db = t.db().await;
        db.batch_execute(&format!(
            "SET session_replication_role = replica; {sql}; SET session_replication_role = origin;"
        ))
        .await
        .unwrap();
        let (ok, report) = ledger_check(&t.database_url).await;
        assert!(!ok, "{sql}: check passed:\n{report}");
        let failed = report
            .lines()
            .any(|l| l.starts_with("FAIL") && l.contains(invariant));
        assert!(
            failed,
            "{sql}: no FAIL line naming {invariant:?}:\n{report}"
        );
    }
}

/// `ledger check` with its arguments: whether it passed, its exit code, its report.
async fn check_with(url: &str, args: &[&str]) -> (Option<i32>, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledger"))
        .args(["check", "--database-url", url])
        .args(args)
        .output()
        .await
        .unwrap();
    let mut report = String::from_utf8_lossy(&out.stdout).into_owned();
    report.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code(), report)
}

#[tokio::test]
async fn ledger_check_checks_one_ledger_or_every_one_and_finds_a_leg_that_crosses_ledgers() {
    let mut t = TestLedger::start().await;
    for ledger in ["default", "acme"] {
        books(&mut t.client, ledger).await;
        let post = pb::PostRequest {
            ledger: ledger.into(),
            ..transfer("k", "equity:world", "acct:0", "5.00")
        };
        t.post(post).await.unwrap();
    }
    for args in [&[][..], &["--ledger", "acme"], &["--ledger", "default"]] {
        let (code, report) = check_with(&t.database_url, args).await;
        assert_eq!(code, Some(0), "{args:?}: {report}");
    }
    let (code, report) = check_with(&t.database_url, &["--ledger", "nope"]).await;
    assert_eq!(code, Some(2), "an unknown ledger: {report}");
    assert!(
        report.contains("no ledger has the code \"nope\""),
        "{report}"
    );
    // acme's posting's first leg moved onto default's acct:0, behind the ledger's back.
    let db = t.db().await;
    db.batch_execute(
        "SET session_replication_role = replica;
         UPDATE entries SET account_id = (SELECT account_id FROM accounts WHERE ledger_id = 0 AND code = 'acct:0'),
                            account_version = 99
         WHERE sequence = (SELECT max(sequence) FROM postings p JOIN ledgers l USING (ledger_id) WHERE l.code = 'acme')
           AND leg_index = 0;
         SET session_replication_role = origin;",
    )
    .await
    .unwrap();
    let (code, report) = check_with(&t.database_url, &[]).await;
    assert_eq!(code, Some(1), "{report}");
    let crossing = report
        .lines()
        .find(|l| l.contains("nothing crosses ledgers"))
        .unwrap();
    assert!(crossing.starts_with("FAIL"), "{report}");
    let (code, report) = check_with(&t.database_url, &["--ledger", "acme"]).await;
    assert_eq!(
        code,
        Some(1),
        "acme's own check finds its leg on a foreign account: {report}"
    );
    let (code, report) = check_with(&t.database_url, &["--ledger", "default"]).await;
    assert_eq!(code, Some(0), "default's own rows are sound: {report}");
    assert!(report.starts_with("ledger default"), "{report}");
}
