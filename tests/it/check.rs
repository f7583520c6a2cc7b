//! `ledger check` passes on a sound ledger and names each kind of corruption.

use crate::faults::ledger_check;
use crate::support::*;

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
