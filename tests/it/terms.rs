//! Accounts that change, against a real server and database: versions recorded by
//! `UpdateAccount` in the ledger's order, freezes, closes, floors, ceilings, debit limits over
//! rolling windows, conditions on postings, and accounts as of a cut-off.

use crate::support::*;
use ledger_server::grpc::convert::time_to_pb as ts;
use ledger_server::grpc::pb;
use ledger_server::grpc::pb::ledger_client::LedgerClient;
use std::time::Duration as StdDuration;
use time::OffsetDateTime;
use tonic::transport::Channel;
use tonic::Code;
use tonic_types::StatusExt;

type Client = LedgerClient<Channel>;

/// An update of `code` from `expected` naming the fields `edit` sets.
fn update(
    key: &str,
    code: &str,
    expected: u64,
    edit: impl FnOnce(&mut pb::UpdateAccountRequest),
) -> pb::UpdateAccountRequest {
    let mut r = pb::UpdateAccountRequest {
        idempotency_key: key.into(),
        code: code.into(),
        expected_version: expected,
        reason: format!("test {key}"),
        ..Default::default()
    };
    edit(&mut r);
    r
}

fn mask(r: &mut pb::UpdateAccountRequest, path: &str) {
    r.update_mask
        .get_or_insert_with(Default::default)
        .paths
        .push(path.into());
}

fn status(s: pb::AccountStatus) -> impl FnOnce(&mut pb::UpdateAccountRequest) {
    move |r| {
        mask(r, "status");
        r.status = s as i32;
    }
}

async fn apply(c: &mut Client, r: pb::UpdateAccountRequest) -> Result<pb::Account, tonic::Status> {
    c.update_account(r)
        .await
        .map(|r| r.into_inner().account.expect("the account"))
}

async fn post(c: &mut Client, r: pb::PostRequest) -> Result<pb::Posting, tonic::Status> {
    c.post(r)
        .await
        .map(|r| r.into_inner().posting.expect("a posting"))
}

async fn account(c: &mut Client, code: &str, as_of: Option<pb::AsOf>) -> pb::Account {
    c.get_account(pb::GetAccountRequest {
        code: code.into(),
        ledger: String::new(),
        as_of,
    })
    .await
    .expect("the account")
    .into_inner()
}

/// `acct:0` funded with 100.00 from `equity:world`.
async fn funded(t: &mut TestLedger) -> Client {
    let mut c = t.new_client().await;
    world_and_one_account(&mut c).await;
    post(&mut c, transfer("fund", "equity:world", "acct:0", "100.00"))
        .await
        .unwrap();
    c
}

#[tokio::test]
async fn a_frozen_account_refuses_postings_bound_to_their_keys_yet_lets_an_earlier_hold_be_captured(
) {
    let mut t = TestLedger::start().await;
    let mut c = funded(&mut t).await;
    let hold = c
        .post(pb::PostRequest {
            hold: true,
            ..transfer("hold", "acct:0", "equity:world", "30.00")
        })
        .await
        .unwrap()
        .into_inner()
        .posting
        .unwrap();
    let frozen = apply(
        &mut c,
        update("freeze", "acct:0", 1, status(pb::AccountStatus::Frozen)),
    )
    .await
    .unwrap();
    assert_eq!(
        (frozen.version, frozen.status),
        (2, pb::AccountStatus::Frozen as i32)
    );
    let spend = transfer("spend", "acct:0", "equity:world", "10.00");
    let e = post(&mut c, spend.clone()).await.unwrap_err();
    assert_error(&e, Code::FailedPrecondition, "ACCOUNT_FROZEN");
    let refused_hold = pb::PostRequest {
        hold: true,
        ..transfer("hold-2", "acct:0", "equity:world", "1.00")
    };
    assert_error(
        &post(&mut c, refused_hold).await.unwrap_err(),
        Code::FailedPrecondition,
        "ACCOUNT_FROZEN",
    );
    let captured = c
        .capture(pb::CaptureRequest {
            idempotency_key: "capture".into(),
            hold_posting_id: hold.posting_id.clone(),
            ..Default::default()
        })
        .await;
    assert!(
        captured.is_ok(),
        "a hold placed before the freeze settles: {captured:?}"
    );
    apply(
        &mut c,
        update("unfreeze", "acct:0", 2, status(pb::AccountStatus::Open)),
    )
    .await
    .unwrap();
    let again = post(&mut c, spend).await.unwrap_err();
    assert_error(&again, Code::FailedPrecondition, "ACCOUNT_FROZEN");
    assert!(
        post(
            &mut c,
            transfer("spend-2", "acct:0", "equity:world", "10.00")
        )
        .await
        .is_ok(),
        "open again: a new key is accepted"
    );
    assert_eq!(t.balance("acct:0", None).await.balance, "60.00");
}

#[tokio::test]
async fn a_stale_expected_version_is_aborted_and_writes_nothing_and_of_two_racing_updates_one_wins()
{
    let mut t = TestLedger::start().await;
    let mut c = funded(&mut t).await;
    let before = t.count("account_terms").await;
    let stale = apply(
        &mut c,
        update("stale", "acct:0", 7, status(pb::AccountStatus::Frozen)),
    )
    .await
    .unwrap_err();
    assert_error(&stale, Code::Aborted, "ACCOUNT_VERSION_MISMATCH");
    assert!(stale.message().contains("version 1"), "{}", stale.message());
    assert_eq!(t.count("account_terms").await, before, "nothing written");
    let racers = (0..8).map(|i| {
        let mut c = c.clone();
        tokio::spawn(async move {
            apply(
                &mut c,
                update(
                    &format!("race-{i}"),
                    "acct:0",
                    1,
                    status(pb::AccountStatus::Frozen),
                ),
            )
            .await
        })
    });
    let results: Vec<_> = futures_util::future::join_all(racers).await;
    let won = results
        .iter()
        .filter(|r| r.as_ref().unwrap().is_ok())
        .count();
    assert_eq!(won, 1, "{results:?}");
    for r in results
        .iter()
        .filter_map(|r| r.as_ref().unwrap().as_ref().err())
    {
        assert_error(r, Code::Aborted, "ACCOUNT_VERSION_MISMATCH");
    }
    assert_eq!(account(&mut c, "acct:0", None).await.version, 2);
    assert_eq!(t.count("account_terms").await, before + 1);
}

#[tokio::test]
async fn an_update_racing_postings_splits_them_by_sequence_exactly_at_the_version() {
    let mut t = TestLedger::start().await;
    let mut c = funded(&mut t).await;
    let spenders = (0..40).map(|i| {
        let mut c = c.clone();
        tokio::spawn(async move {
            tokio::time::sleep(StdDuration::from_millis(i % 10)).await;
            post(
                &mut c,
                transfer(&format!("s-{i}"), "acct:0", "equity:world", "0.01"),
            )
            .await
        })
    });
    let spenders: Vec<_> = spenders.collect();
    tokio::time::sleep(StdDuration::from_millis(4)).await;
    let frozen = apply(
        &mut c,
        update("freeze", "acct:0", 1, status(pb::AccountStatus::Frozen)),
    )
    .await
    .unwrap();
    let after = frozen.version_info.unwrap().after_sequence;
    for s in spenders {
        match s.await.unwrap() {
            Ok(p) => assert!(
                p.sequence <= after,
                "posting {} after the freeze at {after}",
                p.sequence
            ),
            Err(e) => assert_error(&e, Code::FailedPrecondition, "ACCOUNT_FROZEN"),
        }
    }
    let db = t.db().await;
    let late: i64 = db
        .query_one(
            "SELECT count(*) FROM entries e JOIN accounts a USING (account_id)
             WHERE a.code = 'acct:0' AND (e.sequence & ((1::bigint << 40) - 1)) > $1",
            &[&(after as i64)],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        late, 0,
        "no entry on the account after the version that froze it"
    );
}

#[tokio::test]
async fn a_floor_allows_an_overdraft_and_a_ceiling_caps_the_balance_with_incoming_holds() {
    let mut t = TestLedger::start().await;
    let mut c = funded(&mut t).await;
    let overdraft = apply(
        &mut c,
        update("od", "acct:0", 1, |r| {
            mask(r, "balance_floor");
            r.balance_floor = "-50.00".into();
        }),
    )
    .await
    .unwrap();
    assert_eq!(overdraft.balance_floor, "-50.00");
    post(&mut c, transfer("a", "acct:0", "equity:world", "150.00"))
        .await
        .unwrap();
    let under = post(&mut c, transfer("b", "acct:0", "equity:world", "0.01"))
        .await
        .unwrap_err();
    assert_error(&under, Code::FailedPrecondition, "INSUFFICIENT_FUNDS");
    assert!(
        under.message().contains("floor of -50.00"),
        "{}",
        under.message()
    );
    let high = apply(
        &mut c,
        update("cap-too-high", "acct:0", 2, |r| {
            mask(r, "balance_floor");
            r.balance_floor = "0".into();
        }),
    )
    .await
    .unwrap_err();
    assert_error(&high, Code::FailedPrecondition, "INSUFFICIENT_FUNDS");
    apply(
        &mut c,
        update("cap", "acct:0", 2, |r| {
            mask(r, "balance_ceiling");
            r.balance_ceiling = "20.00".into();
        }),
    )
    .await
    .unwrap();
    let incoming = pb::PostRequest {
        hold: true,
        ..transfer("in-hold", "equity:world", "acct:0", "60.00")
    };
    post(&mut c, incoming).await.unwrap();
    let over = post(&mut c, transfer("in", "equity:world", "acct:0", "10.01"))
        .await
        .unwrap_err();
    assert_error(&over, Code::FailedPrecondition, "BALANCE_CEILING_EXCEEDED");
    post(&mut c, transfer("in-2", "equity:world", "acct:0", "10.00"))
        .await
        .unwrap();
    let replay = post(&mut c, transfer("in", "equity:world", "acct:0", "10.01"))
        .await
        .unwrap_err();
    assert_error(
        &replay,
        Code::FailedPrecondition,
        "BALANCE_CEILING_EXCEEDED",
    );
}

#[tokio::test]
async fn a_debit_limit_counts_debits_in_its_window_and_open_holds_and_frees_what_leaves_it() {
    let mut t = TestLedger::start().await;
    let mut c = funded(&mut t).await;
    account_in(&mut c, "default", "acct:1", pb::NormalBalance::Debit, false).await;
    apply(
        &mut c,
        update("limit", "acct:1", 1, |r| {
            mask(r, "debit_limits");
            r.debit_limits = vec![
                pb::DebitLimit {
                    amount: "10.00".into(),
                    window_seconds: 2,
                },
                pb::DebitLimit {
                    amount: "25.00".into(),
                    window_seconds: 3600,
                },
            ];
        }),
    )
    .await
    .unwrap();
    // acct:1 is debit-normal: what it receives is a debit leg, so here the limits cap what
    // it receives from equity:world.
    post(&mut c, transfer("d1", "equity:world", "acct:1", "6.00"))
        .await
        .unwrap();
    let hold = c
        .post(pb::PostRequest {
            hold: true,
            ..transfer("h1", "equity:world", "acct:1", "3.00")
        })
        .await
        .unwrap()
        .into_inner()
        .posting
        .unwrap();
    let over = post(&mut c, transfer("d2", "equity:world", "acct:1", "1.01"))
        .await
        .unwrap_err();
    assert_error(&over, Code::FailedPrecondition, "DEBIT_LIMIT_EXCEEDED");
    let info = over.get_details_error_info().unwrap();
    assert_eq!(info.metadata["limit"], "debit_limits[0]");
    assert_eq!(info.metadata["left"], "1.00");
    c.void(pb::VoidRequest {
        idempotency_key: "release".into(),
        posting_id: hold.posting_id,
        ..Default::default()
    })
    .await
    .unwrap();
    post(&mut c, transfer("d3", "equity:world", "acct:1", "4.00"))
        .await
        .unwrap();
    assert_error(
        &post(&mut c, transfer("d4", "equity:world", "acct:1", "0.01"))
            .await
            .unwrap_err(),
        Code::FailedPrecondition,
        "DEBIT_LIMIT_EXCEEDED",
    );
    tokio::time::sleep(StdDuration::from_millis(2100)).await;
    post(&mut c, transfer("d5", "equity:world", "acct:1", "10.00"))
        .await
        .expect("the debits of 2 s ago left the window");
    tokio::time::sleep(StdDuration::from_millis(2100)).await;
    let hour = post(&mut c, transfer("d6", "equity:world", "acct:1", "6.00"))
        .await
        .unwrap_err();
    assert_error(&hour, Code::FailedPrecondition, "DEBIT_LIMIT_EXCEEDED");
    assert_eq!(
        hour.get_details_error_info().unwrap().metadata["limit"],
        "debit_limits[1]"
    );
}

#[tokio::test]
async fn conditions_refuse_a_stale_last_sequence_or_too_little_available_bound_to_the_key() {
    let mut t = TestLedger::start().await;
    let mut c = funded(&mut t).await;
    let last = t.balance("acct:0", None).await.last_sequence;
    assert_eq!(last, 1, "the funding");
    let cond = |check| pb::Condition {
        account: "acct:0".into(),
        check: Some(check),
    };
    use pb::condition::Check;
    let with = |key: &str, c: Vec<pb::Condition>| pb::PostRequest {
        conditions: c,
        ..transfer(key, "acct:0", "equity:world", "5.00")
    };
    let stale = post(&mut c, with("stale", vec![cond(Check::LastSequence(0))]))
        .await
        .unwrap_err();
    assert_error(&stale, Code::FailedPrecondition, "CONDITION_FAILED");
    let ok = post(
        &mut c,
        with("current", vec![cond(Check::LastSequence(last))]),
    )
    .await
    .unwrap();
    assert_eq!(t.balance("acct:0", None).await.last_sequence, ok.sequence);
    let short = post(
        &mut c,
        with("short", vec![cond(Check::AvailableAtLeast("95.01".into()))]),
    )
    .await
    .unwrap_err();
    assert_error(&short, Code::FailedPrecondition, "CONDITION_FAILED");
    assert!(short.message().contains("95.00"), "{}", short.message());
    post(
        &mut c,
        with(
            "enough",
            vec![cond(Check::AvailableAtLeast("95.00".into()))],
        ),
    )
    .await
    .unwrap();
    let replayed = post(&mut c, with("stale", vec![cond(Check::LastSequence(0))]))
        .await
        .unwrap_err();
    assert_error(&replayed, Code::FailedPrecondition, "CONDITION_FAILED");
    let reused = post(&mut c, with("stale", vec![cond(Check::LastSequence(9))]))
        .await
        .unwrap_err();
    assert_error(&reused, Code::FailedPrecondition, "IDEMPOTENCY_KEY_REUSED");
}

#[tokio::test]
async fn an_account_closes_only_empty_and_closing_is_final() {
    let mut t = TestLedger::start().await;
    let mut c = funded(&mut t).await;
    let close = |key: &str, v| update(key, "acct:0", v, status(pb::AccountStatus::Closed));
    assert_error(
        &apply(&mut c, close("close-1", 1)).await.unwrap_err(),
        Code::FailedPrecondition,
        "ACCOUNT_NOT_EMPTY",
    );
    let hold = c
        .post(pb::PostRequest {
            hold: true,
            ..transfer("hold", "acct:0", "equity:world", "100.00")
        })
        .await
        .unwrap()
        .into_inner()
        .posting
        .unwrap();
    c.capture(pb::CaptureRequest {
        idempotency_key: "cap".into(),
        hold_posting_id: hold.posting_id,
        legs: vec![
            leg("equity:world", pb::Direction::Debit, "90.00"),
            leg("acct:0", pb::Direction::Credit, "90.00"),
        ],
        ..Default::default()
    })
    .await
    .unwrap();
    post(&mut c, transfer("rest", "acct:0", "equity:world", "10.00"))
        .await
        .unwrap();
    assert_eq!(t.balance("acct:0", None).await.balance, "0.00");
    let incoming = c
        .post(pb::PostRequest {
            hold: true,
            ..transfer("incoming", "equity:world", "acct:0", "5.00")
        })
        .await
        .unwrap()
        .into_inner()
        .posting
        .unwrap();
    let held = apply(&mut c, close("close-held", 1)).await.unwrap_err();
    assert_error(&held, Code::FailedPrecondition, "ACCOUNT_NOT_EMPTY");
    assert!(held.message().contains("holds 5.00"), "{}", held.message());
    c.void(pb::VoidRequest {
        idempotency_key: "release".into(),
        posting_id: incoming.posting_id,
        ..Default::default()
    })
    .await
    .unwrap();
    let closed = apply(&mut c, close("close-2", 1)).await.unwrap();
    assert_eq!(closed.status, pb::AccountStatus::Closed as i32);
    assert_error(
        &post(&mut c, transfer("in", "equity:world", "acct:0", "1.00"))
            .await
            .unwrap_err(),
        Code::FailedPrecondition,
        "ACCOUNT_CLOSED",
    );
    assert_error(
        &apply(
            &mut c,
            update("reopen", "acct:0", 2, status(pb::AccountStatus::Open)),
        )
        .await
        .unwrap_err(),
        Code::FailedPrecondition,
        "ACCOUNT_CLOSED",
    );
    let replay = apply(&mut c, close("close-2", 1)).await.unwrap();
    assert_eq!(replay.version, 2, "a replay answers the version recorded");
}

#[tokio::test]
async fn an_account_as_of_answers_the_version_in_force_on_both_clocks() {
    let mut t = TestLedger::start().await;
    let mut c = funded(&mut t).await;
    let micros = |t: OffsetDateTime| t.replace_nanosecond(t.nanosecond() / 1000 * 1000).unwrap();
    let v1_at = micros(OffsetDateTime::now_utc());
    tokio::time::sleep(StdDuration::from_millis(5)).await;
    let v2 = apply(
        &mut c,
        update("v2", "acct:0", 1, status(pb::AccountStatus::Frozen)),
    )
    .await
    .unwrap();
    tokio::time::sleep(StdDuration::from_millis(5)).await;
    let v2_at = micros(OffsetDateTime::now_utc());
    tokio::time::sleep(StdDuration::from_millis(5)).await;
    let v3 = apply(
        &mut c,
        update("v3", "acct:0", 2, |r| {
            status(pb::AccountStatus::Open)(r);
            mask(r, "balance_floor");
            r.balance_floor = "-5.00".into();
        }),
    )
    .await
    .unwrap();
    assert_eq!((v2.version, v3.version), (2, 3));
    let at = |recorded: Option<OffsetDateTime>, effective: Option<OffsetDateTime>| {
        Some(pb::AsOf {
            recorded_at: recorded.map(ts),
            effective_at: effective.map(ts),
        })
    };
    assert_eq!(
        account(&mut c, "acct:0", at(Some(v1_at), None))
            .await
            .version,
        1
    );
    assert_eq!(
        account(&mut c, "acct:0", at(Some(v2_at), None))
            .await
            .version,
        2
    );
    assert_eq!(account(&mut c, "acct:0", None).await.version, 3);
    assert_eq!(
        account(&mut c, "acct:0", at(None, Some(v2_at)))
            .await
            .version,
        2,
        "effective clock"
    );
    assert_eq!(
        account(&mut c, "acct:0", at(None, Some(v1_at)))
            .await
            .version,
        1
    );
    let now = account(&mut c, "acct:0", None).await;
    assert_eq!(
        (now.status, now.balance_floor.as_str()),
        (pb::AccountStatus::Open as i32, "-5.00")
    );
    let versions = c
        .list_account_versions(pb::ListAccountVersionsRequest {
            code: "acct:0".into(),
            page_size: 2,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let seen: Vec<u64> = versions.versions.iter().map(|v| v.version).collect();
    assert_eq!(seen, vec![1, 2]);
    let info = versions.versions[1].version_info.clone().unwrap();
    assert_eq!(
        (info.reason.as_str(), info.changed),
        ("test v2", vec!["status".to_owned()])
    );
    assert_eq!(info.caller, "anonymous");
    let rest = c
        .list_account_versions(pb::ListAccountVersionsRequest {
            code: "acct:0".into(),
            page_size: 2,
            page_token: versions.next_page_token,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        rest.versions.iter().map(|v| v.version).collect::<Vec<_>>(),
        vec![3]
    );
    assert!(rest.next_page_token.is_empty());
}

#[tokio::test]
async fn postings_decided_in_the_batch_of_the_update_that_sets_a_debit_limit_obey_it() {
    let mut t = TestLedger::start().await;
    let mut c = funded(&mut t).await;
    account_in(&mut c, "default", "acct:1", pb::NormalBalance::Debit, false).await;
    for round in 0..5 {
        let mut u = c.clone();
        let limit = apply(
            &mut u,
            update(&format!("limit-{round}"), "acct:1", 1 + round, |r| {
                mask(r, "debit_limits");
                r.debit_limits = vec![pb::DebitLimit {
                    amount: "1.00".into(),
                    window_seconds: 3600 + round as u32,
                }];
            }),
        );
        let debits = (0..20).map(|i| {
            let mut c = c.clone();
            tokio::spawn(async move {
                post(
                    &mut c,
                    transfer(&format!("d-{round}-{i}"), "equity:world", "acct:1", "0.01"),
                )
                .await
            })
        });
        let (limit, debits) = tokio::join!(limit, futures_util::future::join_all(debits));
        limit.unwrap();
        for d in debits {
            if let Err(e) = d.unwrap() {
                assert_error(&e, Code::FailedPrecondition, "DEBIT_LIMIT_EXCEEDED");
            }
        }
    }
}

#[tokio::test]
async fn fifty_callers_sending_one_update_under_one_key_record_one_version_and_all_get_it() {
    let mut t = TestLedger::start().await;
    let c = funded(&mut t).await;
    let before = t.count("account_terms").await;
    let racers = (0..50).map(|_| {
        let mut c = c.clone();
        tokio::spawn(async move {
            c.update_account(update(
                "one-key",
                "acct:0",
                1,
                status(pb::AccountStatus::Frozen),
            ))
            .await
            .map(|r| r.into_inner())
        })
    });
    let answers: Vec<pb::UpdateAccountResponse> = futures_util::future::join_all(racers)
        .await
        .into_iter()
        .map(|r| r.unwrap().expect("every sender is answered the version"))
        .collect();
    assert!(answers
        .iter()
        .all(|a| a.account.as_ref().unwrap().version == 2));
    assert_eq!(
        answers.iter().filter(|a| !a.replayed).count(),
        1,
        "one decided it"
    );
    assert_eq!(
        t.count("account_terms").await,
        before + 1,
        "one version recorded"
    );
}

#[tokio::test]
async fn one_key_reused_for_the_same_change_of_another_account_is_refused_not_replayed() {
    let mut t = TestLedger::start().await;
    let mut c = funded(&mut t).await;
    account_in(&mut c, "default", "acct:1", pb::NormalBalance::Debit, false).await;
    apply(
        &mut c,
        update("same", "acct:0", 1, status(pb::AccountStatus::Frozen)),
    )
    .await
    .unwrap();
    let other = apply(
        &mut c,
        update("same", "acct:1", 1, status(pb::AccountStatus::Frozen)),
    )
    .await
    .unwrap_err();
    assert_error(&other, Code::FailedPrecondition, "IDEMPOTENCY_KEY_REUSED");
    assert_eq!(
        account(&mut c, "acct:1", None).await.version,
        1,
        "acct:1 unchanged"
    );
}

#[tokio::test]
async fn conditions_in_a_post_batch_see_the_requests_before_them_in_the_call() {
    let mut t = TestLedger::start().await;
    let mut c = funded(&mut t).await;
    let at_least = |key: &str, amount: &str| pb::PostRequest {
        conditions: vec![pb::Condition {
            account: "acct:0".into(),
            check: Some(pb::condition::Check::AvailableAtLeast(amount.into())),
        }],
        ..transfer(key, "acct:0", "equity:world", "60.00")
    };
    let results = c
        .post_batch(pb::PostBatchRequest {
            ledger: String::new(),
            requests: vec![at_least("first", "60.00"), at_least("second", "60.00")],
        })
        .await
        .unwrap()
        .into_inner()
        .results;
    let mut answers = results.into_iter().map(crate::batch::as_post_answer);
    assert!(
        answers.next().unwrap().is_ok(),
        "100.00 available: the first posts"
    );
    let second = answers.next().unwrap().unwrap_err();
    assert_error(&second, Code::FailedPrecondition, "CONDITION_FAILED");
    assert!(second.message().contains("40.00"), "{}", second.message());
}

/// The debits of `accepted` (recorded at, minor units) in the window of `secs` seconds ending
/// at `t`: recorded in `(t − secs, t]`.
fn window_at(accepted: &[(OffsetDateTime, i64)], secs: i64, t: OffsetDateTime) -> i64 {
    let from = t - time::Duration::seconds(secs);
    accepted
        .iter()
        .filter(|(at, _)| *at > from && *at <= t)
        .map(|(_, m)| m)
        .sum()
}

#[tokio::test]
async fn a_debit_limit_stays_exact_while_two_servers_debit_the_account_and_debits_leave_its_window()
{
    // acct:1 may be debited 5.00 a second; two servers, two callers each, debit it 0.50–1.50
    // at a time for three seconds. Each server's lanes remember windows between batches; every
    // answer must be what the journal says at the time it was decided.
    let a = TestLedger::start().await;
    let mut c = a.new_client().await;
    world_and_one_account(&mut c).await;
    account_in(&mut c, "default", "acct:1", pb::NormalBalance::Debit, false).await;
    apply(
        &mut c,
        update("limit", "acct:1", 1, |r| {
            mask(r, "debit_limits");
            r.debit_limits = vec![pb::DebitLimit {
                amount: "5.00".into(),
                window_seconds: 1,
            }];
        }),
    )
    .await
    .unwrap();
    let b = TestLedger::on_database(a.database_url.clone()).await;
    let mut callers = Vec::new();
    for (s, server) in [&a, &b].into_iter().enumerate() {
        for k in 0..2 {
            let mut c = server.new_client().await;
            callers.push(tokio::spawn(async move {
                let mut answers = Vec::new();
                let end = std::time::Instant::now() + StdDuration::from_secs(3);
                let mut n = 0;
                while std::time::Instant::now() < end {
                    let cents = 50 + ((s * 7 + k * 13 + n * 29) % 101) as i64;
                    let amount = format!("{}.{:02}", cents / 100, cents % 100);
                    let key = format!("s{s}-k{k}-{n}");
                    let sent = OffsetDateTime::now_utc();
                    let got = post(&mut c, transfer(&key, "equity:world", "acct:1", &amount)).await;
                    answers.push((sent, OffsetDateTime::now_utc(), cents, got));
                    n += 1;
                    tokio::time::sleep(StdDuration::from_millis(20 + (n as u64 * 37) % 60)).await;
                }
                answers
            }));
        }
    }
    let mut answers = Vec::new();
    for c in callers {
        answers.extend(c.await.unwrap());
    }
    let accepted: Vec<(OffsetDateTime, i64)> = answers
        .iter()
        .filter_map(|(_, _, cents, got)| {
            let p = got.as_ref().ok()?;
            let at = p.recorded_at.as_ref().unwrap();
            let at = OffsetDateTime::from_unix_timestamp_nanos(
                i128::from(at.seconds) * 1_000_000_000 + i128::from(at.nanos),
            )
            .unwrap();
            Some((at, *cents))
        })
        .collect();
    let mut refused = 0;
    for (sent, answered, cents, got) in &answers {
        match got {
            Ok(p) => {
                let at = accepted.iter().find(|(t, _)| {
                    let r = p.recorded_at.as_ref().unwrap();
                    t.unix_timestamp() == r.seconds && t.nanosecond() as i32 == r.nanos
                });
                let (at, _) = at.unwrap();
                assert!(
                    window_at(&accepted, 1, *at) <= 500,
                    "accepted over the limit at {at}"
                );
            }
            Err(e) => {
                assert_error(e, Code::FailedPrecondition, "DEBIT_LIMIT_EXCEEDED");
                refused += 1;
                // What was left when it was decided: the window's debits at some time between
                // sending and the answer (the window changes only where a debit enters or
                // leaves it).
                let left = e.get_details_error_info().unwrap().metadata["left"].clone();
                let left: f64 = left.parse().unwrap();
                let used = 500 - (left * 100.0).round() as i64;
                let margin = time::Duration::milliseconds(2);
                let (from, to) = (*sent - margin, *answered + margin);
                let mut times = vec![from];
                for (t, _) in &accepted {
                    for edge in [*t, *t + time::Duration::seconds(1)] {
                        if edge > from && edge <= to {
                            times.push(edge);
                        }
                    }
                }
                let seen: Vec<i64> = times.iter().map(|t| window_at(&accepted, 1, *t)).collect();
                assert!(
                    seen.contains(&used) || (used >= 500 && seen.iter().any(|u| *u + cents > 500)),
                    "refused {cents} with {used} used in the window; the journal had {seen:?} between sending and the answer"
                );
            }
        }
    }
    assert!(
        refused > 0 && accepted.len() > 10,
        "{refused} refused, {} accepted",
        accepted.len()
    );
}
