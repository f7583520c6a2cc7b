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

/// An update of `code`, read at version `expected`, of the fields `paths` that `edit` sets.
fn terms_update(
    key: &str,
    code: &str,
    expected: u64,
    paths: &[&str],
    edit: impl FnOnce(&mut pb::UpdateAccountRequest),
) -> pb::UpdateAccountRequest {
    let mut r = pb::UpdateAccountRequest {
        idempotency_key: key.into(),
        code: code.into(),
        expected_version: expected,
        reason: format!("check test {key}"),
        update_mask: Some(prost_types::FieldMask {
            paths: paths.iter().map(|p| (*p).to_owned()).collect(),
        }),
        ..Default::default()
    };
    edit(&mut r);
    r
}

/// A ledger whose accounts changed by versions, each rule met up to its edge (sequences in
/// brackets). acct:0: funded with 100.00 [1], a hold of 30.00 from it [2], frozen (v2) and
/// the hold captured [3] (a frozen account settles earlier holds), open again with a floor
/// of −50.00, a ceiling of 200.00 and a debit limit of 150.00 an hour (v3), paid 20.00 [4]
/// (balance 90.00, 120.00 debited within the hour) and paying out 100.00 [5] (balance
/// −10.00). acct:1: closed empty (v2). acct:2: paid 50.00 [6] and a hold of 30.00 to it [7],
/// then limited to 10.00 an hour (v2: an update does not weigh what was debited already)
/// and the hold captured [8] (a capture is not weighed against the limits: its hold was).
async fn ledger_with_versions() -> TestLedger {
    let mut t = TestLedger::start().await;
    let mut c = t.new_client().await;
    books(&mut c, "default").await;
    for code in ["acct:1", "acct:2"] {
        account_in(&mut c, "default", code, pb::NormalBalance::Debit, false).await;
    }
    let hold = |key: &str, from: &str, to: &str| pb::PostRequest {
        hold: true,
        ..transfer(key, from, to, "30.00")
    };
    let capture = |key: &str, hold: pb::PostResponse| pb::CaptureRequest {
        idempotency_key: key.into(),
        hold_posting_id: hold.posting.unwrap().posting_id,
        ..Default::default()
    };
    t.post(transfer("fund", "equity:world", "acct:0", "100.00"))
        .await
        .unwrap();
    let h = t
        .post(hold("hold", "acct:0", "equity:world"))
        .await
        .unwrap();
    let status = |s: pb::AccountStatus| move |r: &mut pb::UpdateAccountRequest| r.status = s as i32;
    let frozen = terms_update(
        "freeze",
        "acct:0",
        1,
        &["status"],
        status(pb::AccountStatus::Frozen),
    );
    c.update_account(frozen).await.unwrap();
    c.capture(capture("capture", h)).await.unwrap();
    let terms = terms_update(
        "terms",
        "acct:0",
        2,
        &["status", "balance_floor", "balance_ceiling", "debit_limits"],
        |r| {
            r.status = pb::AccountStatus::Open as i32;
            r.balance_floor = "-50.00".into();
            r.balance_ceiling = "200.00".into();
            r.debit_limits = vec![pb::DebitLimit {
                amount: "150.00".into(),
                window_seconds: 3600,
            }];
        },
    );
    c.update_account(terms).await.unwrap();
    t.post(transfer("in", "equity:world", "acct:0", "20.00"))
        .await
        .unwrap();
    t.post(transfer("out", "acct:0", "equity:world", "100.00"))
        .await
        .unwrap();
    let close = terms_update(
        "close",
        "acct:1",
        1,
        &["status"],
        status(pb::AccountStatus::Closed),
    );
    c.update_account(close).await.unwrap();
    t.post(transfer("in-2", "equity:world", "acct:2", "50.00"))
        .await
        .unwrap();
    let h2 = t
        .post(hold("hold-2", "equity:world", "acct:2"))
        .await
        .unwrap();
    let limit = terms_update("limit-2", "acct:2", 1, &["debit_limits"], |r| {
        r.debit_limits = vec![pb::DebitLimit {
            amount: "10.00".into(),
            window_seconds: 3600,
        }];
    });
    c.update_account(limit).await.unwrap();
    c.capture(capture("capture-2", h2)).await.unwrap();
    assert_eq!(t.balance("acct:0", None).await.balance, "-10.00");
    assert_eq!(t.balance("acct:2", None).await.balance, "80.00");
    t
}

/// For each (statement, invariant, example): on a fresh [`ledger_with_versions`], which
/// `ledger check` passes, the statement written as the owner with the journal's triggers
/// off makes it exit 1 with a FAIL line naming the invariant and an example saying `example`.
async fn each_breaks(cases: &[(String, &str, &str)]) {
    for (sql, invariant, example) in cases {
        let t = ledger_with_versions().await;
        let (code, report) = check_with(&t.database_url, &[]).await;
        assert_eq!(
            code,
            Some(0),
            "the ledger with versions is sound:\n{report}"
        );
        t.db()
            .await
            .batch_execute(&format!(
                "SET session_replication_role = replica; {sql}; SET session_replication_role = origin;"
            ))
            .await
            .unwrap();
        let (code, report) = check_with(&t.database_url, &[]).await;
        assert_eq!(code, Some(1), "{sql}:\n{report}");
        let failed = report
            .lines()
            .any(|l| l.starts_with("FAIL") && l.contains(invariant));
        assert!(
            failed,
            "{sql}: no FAIL line naming {invariant:?}:\n{report}"
        );
        assert!(
            report.contains(example),
            "{sql}: no example {example:?}:\n{report}"
        );
    }
}

/// `account_terms` rows of account `code` at version `v`.
fn version_of(code: &str, v: i64) -> String {
    format!("account_id = (SELECT account_id FROM accounts WHERE code = '{code}') AND terms_version = {v}")
}

const VERSIONS: &str = "every account's terms are versions 1, 2, 3";

#[tokio::test]
async fn a_journal_with_frozen_closed_floored_capped_and_limited_accounts_passes_ledger_check() {
    let t = ledger_with_versions().await;
    for args in [&[][..], &["--ledger", "default"]] {
        let (code, report) = check_with(&t.database_url, args).await;
        assert_eq!(code, Some(0), "{args:?}:\n{report}");
        for rule in [
            VERSIONS,
            "after it closed",
            "at or above the floor",
            "past a debit limit",
        ] {
            let line = report.lines().find(|l| l.contains(rule));
            assert!(
                matches!(line, Some(l) if l.starts_with("ok")),
                "{rule}:\n{report}"
            );
        }
    }
}

#[tokio::test]
async fn ledger_check_finds_a_missing_or_skipped_version_totals_naming_another_and_versions_out_of_order(
) {
    let acct0 = "(SELECT account_id FROM accounts WHERE code = 'acct:0')";
    each_breaks(&[
        (
            format!("UPDATE account_terms SET terms_version = 4 WHERE {}", version_of("acct:0", 3)),
            VERSIONS,
            "account acct:0: 3 versions numbered 1..4, its totals name version 3",
        ),
        (
            format!("DELETE FROM account_terms WHERE {}", version_of("equity:world", 1)),
            VERSIONS,
            "account equity:world: 0 versions",
        ),
        (
            format!("UPDATE account_totals SET terms_version = 2 WHERE account_id = {acct0}"),
            VERSIONS,
            "its totals name version 2",
        ),
        (
            format!("UPDATE account_terms SET after_sequence = 1 WHERE {}", version_of("acct:0", 3)),
            VERSIONS,
            "account acct:0 version 3 is decided after sequence 1 of ledger id 0: before version 2 (after sequence 2)",
        ),
        (
            format!("UPDATE account_terms SET balance_floor = -1 WHERE {}", version_of("acct:2", 1)),
            VERSIONS,
            "account acct:2 version 1 is open, floor -1, ceiling none, limits []: not its creation (open, floor 0,",
        ),
    ])
    .await;
}

#[tokio::test]
async fn ledger_check_finds_postings_on_an_account_after_the_version_that_closed_it() {
    each_breaks(&[(
        format!(
            "UPDATE account_terms SET status = 'closed' WHERE {}",
            version_of("acct:0", 3)
        ),
        "no posting touches an account after it closed",
        "posting 4 (a posting) touches account acct:0, closed at version 3 (after sequence 3)",
    )])
    .await;
}

#[tokio::test]
async fn ledger_check_finds_a_new_posting_or_hold_on_a_frozen_account_but_lets_captures_through() {
    each_breaks(&[
        (
            format!(
                "UPDATE account_terms SET status = 'frozen' WHERE {}",
                version_of("acct:0", 3)
            ),
            "nor a new posting or hold while it is frozen",
            "posting 5 (a posting) touches account acct:0, frozen at version 3",
        ),
        (
            format!(
                "UPDATE account_terms SET after_sequence = 1 WHERE {}",
                version_of("acct:0", 2)
            ),
            "nor a new posting or hold while it is frozen",
            "posting 2 (a hold) touches account acct:0, frozen at version 2 (after sequence 1)",
        ),
    ])
    .await;
}

#[tokio::test]
async fn ledger_check_finds_a_balance_below_the_floor_or_raised_above_the_ceiling_of_the_version_in_force(
) {
    let rule = "at or above the floor of the version in force";
    each_breaks(&[
        (
            format!("UPDATE account_terms SET balance_floor = 0 WHERE {}", version_of("acct:0", 3)),
            rule,
            "account acct:0 after posting 5: balance -10.00, below the floor 0 of version 3",
        ),
        (
            format!("UPDATE account_terms SET balance_ceiling = 80 WHERE {}", version_of("acct:0", 3)),
            rule,
            "account acct:0 after posting 4: balance 90.00, raised above the ceiling 80 of version 3",
        ),
    ])
    .await;
}

#[tokio::test]
async fn ledger_check_finds_debits_over_a_debit_limit_in_the_window_ending_at_a_posting_under_it() {
    each_breaks(&[(
        format!(
            "UPDATE account_terms SET debit_limits = '[{{\"amount\": \"150.00\", \"window_seconds\": 60}}, {{\"amount\": \"110.00\", \"window_seconds\": 3600}}]' WHERE {}",
            version_of("acct:0", 3)
        ),
        "no posting debited an account past a debit limit of the version in force",
        "120.00 debited in the 3600 s up to it, over debit_limits[1] 110.00 of version 3",
    )])
    .await;
}

#[tokio::test]
async fn ledger_check_of_one_ledger_weighs_only_the_versions_of_its_own_accounts() {
    let mut t = TestLedger::start().await;
    let mut c = t.new_client().await;
    for ledger in ["default", "acme"] {
        books(&mut c, ledger).await;
        let fund = pb::PostRequest {
            ledger: ledger.into(),
            ..transfer("fund", "equity:world", "acct:0", "5.00")
        };
        t.post(fund).await.unwrap();
        let freeze = pb::UpdateAccountRequest {
            ledger: ledger.into(),
            ..terms_update("freeze", "acct:0", 1, &["status"], |r| {
                r.status = pb::AccountStatus::Frozen as i32
            })
        };
        c.update_account(freeze).await.unwrap();
    }
    let (code, report) = check_with(&t.database_url, &[]).await;
    assert_eq!(code, Some(0), "{report}");
    // acme's freeze moved before its funding: the funding is a posting on a frozen account.
    t.db()
        .await
        .batch_execute(
            "SET session_replication_role = replica;
             UPDATE account_terms SET after_sequence = after_sequence - 1
             WHERE terms_version = 2 AND account_id = (SELECT a.account_id FROM accounts a
               JOIN ledgers l USING (ledger_id) WHERE l.code = 'acme' AND a.code = 'acct:0');
             SET session_replication_role = origin;",
        )
        .await
        .unwrap();
    for (args, expected) in [
        (&[][..], Some(1)),
        (&["--ledger", "acme"], Some(1)),
        (&["--ledger", "default"], Some(0)),
    ] {
        let (code, report) = check_with(&t.database_url, args).await;
        assert_eq!(code, expected, "{args:?}:\n{report}");
        if expected == Some(1) {
            assert!(
                report.contains("posting 1 (a posting) touches account acct:0, frozen at version 2 (after sequence 0)"),
                "{args:?}:\n{report}"
            );
        }
    }
}
