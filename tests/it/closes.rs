//! Period closes against a real server and database: back-dated postings and voids into a
//! closed period refused and bound to their keys, current ones accepted, no reopen, and the
//! close's trial balance what `ListBalances` answers at its cut-off.

use crate::support::*;
use ledger_server::grpc::convert::time_to_pb as ts;
use ledger_server::grpc::pb;
use ledger_server::grpc::pb::ledger_client::LedgerClient;
use time::{Duration, OffsetDateTime};
use tonic::transport::Channel;
use tonic::Code;

type Client = LedgerClient<Channel>;

async fn close(
    c: &mut Client,
    key: &str,
    before: OffsetDateTime,
) -> Result<pb::ClosePeriodResponse, tonic::Status> {
    c.close_period(pb::ClosePeriodRequest {
        ledger: String::new(),
        effective_before: Some(ts(before)),
        idempotency_key: key.into(),
        memo: format!("close {key}"),
    })
    .await
    .map(|r| r.into_inner())
}

fn dated(key: &str, amount: &str, at: OffsetDateTime) -> pb::PostRequest {
    pb::PostRequest {
        effective_at: Some(ts(at)),
        ..transfer(key, "equity:world", "acct:0", amount)
    }
}

#[tokio::test]
async fn a_closed_period_refuses_back_dated_postings_and_voids_bound_to_their_keys_and_never_reopens(
) {
    let t = TestLedger::start().await;
    let mut c = t.new_client().await;
    world_and_one_account(&mut c).await;
    let now = OffsetDateTime::now_utc();
    let (old, month_end) = (now - Duration::days(40), now - Duration::days(3));
    let early = c
        .post(dated("early", "10.00", old))
        .await
        .unwrap()
        .into_inner();
    c.post(transfer("late", "equity:world", "acct:0", "5.00"))
        .await
        .unwrap();

    let closed = close(&mut c, "close-1", month_end).await.unwrap();
    assert!(!closed.replayed);
    let again = close(&mut c, "close-1", month_end).await.unwrap();
    assert!(again.replayed, "a retry of the close replays it");
    assert_eq!(again.close, closed.close);

    let refused = c.post(dated("back", "1.00", old)).await.unwrap_err();
    assert_error(&refused, Code::FailedPrecondition, "PERIOD_CLOSED");
    let replay = c.post(dated("back", "1.00", old)).await.unwrap_err();
    assert_error(&replay, Code::FailedPrecondition, "PERIOD_CLOSED");
    let void_back = c
        .void(pb::VoidRequest {
            idempotency_key: "void-back".into(),
            posting_id: early.posting.as_ref().unwrap().posting_id.clone(),
            reason: "wrong".into(),
            effective_at: Some(ts(old)),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_error(&void_back, Code::FailedPrecondition, "PERIOD_CLOSED");
    // Corrections go into the open period: the same void effective now is recorded.
    c.void(pb::VoidRequest {
        idempotency_key: "void-now".into(),
        posting_id: early.posting.as_ref().unwrap().posting_id.clone(),
        reason: "wrong".into(),
        effective_at: None,
        ..Default::default()
    })
    .await
    .unwrap();
    c.post(dated("in-open", "2.00", month_end)).await.unwrap();

    for (key, before) in [
        ("same", month_end),
        ("behind", month_end - Duration::days(1)),
    ] {
        let e = close(&mut c, key, before).await.unwrap_err();
        assert_error(&e, Code::FailedPrecondition, "PERIOD_CLOSE_NOT_FORWARD");
    }
    let future = close(&mut c, "future", now + Duration::days(1))
        .await
        .unwrap_err();
    assert_error(&future, Code::InvalidArgument, "INVALID_FIELD");
    let later = close(&mut c, "close-2", now - Duration::days(1))
        .await
        .unwrap();
    let listed = c
        .list_period_closes(pb::ListPeriodClosesRequest {
            page_size: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.closes, vec![closed.close.clone().unwrap()]);
    let rest = c
        .list_period_closes(pb::ListPeriodClosesRequest {
            page_size: 1,
            page_token: listed.next_page_token,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(rest.closes, vec![later.close.unwrap()]);
    assert!(rest.next_page_token.is_empty());
}

#[tokio::test]
async fn a_closes_trial_balance_is_what_list_balances_answers_at_its_cut_off_with_the_digest_there()
{
    let t = TestLedger::start().await;
    let mut c = t.new_client().await;
    world_and_one_account(&mut c).await;
    let now = OffsetDateTime::now_utc();
    c.post(dated("a", "10.00", now - Duration::days(9)))
        .await
        .unwrap();
    c.post(dated("b", "7.50", now - Duration::days(2)))
        .await
        .unwrap();
    c.post(pb::PostRequest {
        hold: true,
        ..dated("h", "1.25", now - Duration::days(8))
    })
    .await
    .unwrap();
    let close = close(&mut c, "close", now - Duration::days(5))
        .await
        .unwrap()
        .close
        .unwrap();
    // Later postings, in the open period, do not move it.
    c.post(transfer("after", "equity:world", "acct:0", "3.00"))
        .await
        .unwrap();

    let effective = OffsetDateTime::from_unix_timestamp_nanos(
        i128::from(close.effective_before.as_ref().unwrap().seconds) * 1_000_000_000
            + i128::from(close.effective_before.as_ref().unwrap().nanos),
    )
    .unwrap()
        - Duration::microseconds(1);
    let at = pb::AsOf {
        recorded_at: close.recorded_at,
        effective_at: Some(ts(effective)),
    };
    let listed = c
        .list_balances(pb::ListBalancesRequest {
            as_of: Some(at),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(close.totals, listed.totals, "the trial balance's totals");
    assert_eq!(close.accounts, listed.balances.len() as u64);
    // Only "a" (10.00) and the hold (1.25) are effective before the close.
    let eur = &close.totals[0];
    let sums = (
        eur.debits.as_str(),
        eur.credits.as_str(),
        eur.held_debits.as_str(),
    );
    assert_eq!(sums, ("10.00", "10.00", "1.25"));
    // Its balances were recorded with it, one row per account, as ListBalances has them.
    let db = t.db().await;
    let rows = db
        .query(
            "SELECT a.code, b.debits::text, b.credits::text, b.held_debits::text FROM period_close_balances b
             JOIN accounts a USING (account_id) ORDER BY a.code",
            &[],
        )
        .await
        .unwrap();
    let stored: Vec<(String, String, String, String)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let want: Vec<(String, String, String, String)> = listed
        .balances
        .iter()
        .map(|b| {
            (
                b.account.clone(),
                b.debits.clone(),
                b.credits.clone(),
                b.held_debits.clone(),
            )
        })
        .collect();
    assert_eq!(stored, want);
    // The digest at its sequence.
    let digest = close.digest.unwrap();
    assert_eq!(digest.sequence, close.after_sequence);
    let proof = c
        .get_consistency_proof(pb::GetConsistencyProofRequest {
            from_sequence: digest.sequence,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(proof.from_root, digest.root);
}

#[tokio::test]
async fn ledger_report_marks_figures_of_a_closed_period_as_final_and_leaves_the_open_ones_unmarked()
{
    let t = TestLedger::start().await;
    let mut c = t.new_client().await;
    world_and_one_account(&mut c).await;
    let now = OffsetDateTime::now_utc();
    c.post(dated("a", "10.00", now - Duration::days(9)))
        .await
        .unwrap();
    close(&mut c, "close", now - Duration::days(5))
        .await
        .unwrap();
    let server = format!("http://{}", t.server.as_ref().unwrap().local_addr);
    let rfc = |t: OffsetDateTime| {
        t.format(&time::format_description::well_known::Rfc3339)
            .unwrap()
    };
    let report = |effective: String| {
        let server = server.clone();
        async move {
            let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledger"))
                .args([
                    "report",
                    "trial-balance",
                    "--server",
                    &server,
                    "--effective",
                    &effective,
                ])
                .env_remove("LEDGER_SERVER")
                .output()
                .await
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap()
        }
    };
    let closed = report(rfc(now - Duration::days(6))).await;
    let line = closed.lines().nth(1).unwrap();
    assert!(
        line.starts_with("CLOSED PERIOD: effective before"),
        "{closed}"
    );
    assert!(
        line.contains("key close") && line.contains("these figures are final"),
        "{closed}"
    );
    let open = report(rfc(now - Duration::days(1))).await;
    assert!(!open.contains("CLOSED PERIOD"), "{open}");
}

#[tokio::test]
async fn ledger_period_close_records_a_close_once_by_its_key_and_list_shows_it_and_a_missing_key_is_a_usage_error(
) {
    let t = TestLedger::start().await;
    let mut c = t.new_client().await;
    world_and_one_account(&mut c).await;
    let server = format!("http://{}", t.server.as_ref().unwrap().local_addr);
    let before = (OffsetDateTime::now_utc() - Duration::days(2))
        .date()
        .to_string();
    let cli = |args: Vec<String>| async move {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledger"))
            .args(&args)
            .env_remove("LEDGER_SERVER")
            .output()
            .await
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap() + &String::from_utf8(out.stderr).unwrap();
        (out.status.code(), text)
    };
    let close = |key: Option<&str>| {
        let mut a = vec![
            "period", "close", "--server", &server, "--before", &before, "--format", "json",
        ];
        if let Some(k) = key {
            a.extend(["--key", k]);
        }
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let (code, out) = cli(close(Some("month-end"))).await;
    assert_eq!(code, Some(0), "{out}");
    let first: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(first["replayed"], false);
    let (code, out) = cli(close(Some("month-end"))).await;
    assert_eq!(code, Some(0), "{out}");
    let again: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (again["replayed"].clone(), again["close"].clone()),
        (true.into(), first["close"].clone())
    );
    let (code, out) = cli(close(None)).await;
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("needs --key"), "{out}");
    let list: Vec<String> = ["period", "list", "--server", &server, "--format", "json"]
        .map(String::from)
        .to_vec();
    let (code, out) = cli(list).await;
    assert_eq!(code, Some(0), "{out}");
    let listed: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        listed["closes"],
        serde_json::json!([first["close"].clone()])
    );
}
