//! Reads: postings by id and key, listings, balances and statements at recorded cut-offs.

use crate::support::*;
use ledger_server::grpc::pb;
use tonic::Code;

#[tokio::test]
async fn a_posting_reads_back_by_id_and_by_key() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    let mut r = transfer("key-1", "equity:world", "acct:0", "3.00");
    r.memo = "invoice 7".into();
    r.metadata.insert("order".into(), "42".into());
    let p = t.post(r).await.unwrap().posting.unwrap();
    let by_id = t
        .client
        .get_posting(pb::GetPostingRequest {
            ledger: String::new(),
            by: Some(pb::get_posting_request::By::PostingId(p.posting_id.clone())),
            as_of: None,
        })
        .await
        .unwrap()
        .into_inner();
    let by_key = t
        .client
        .get_posting(pb::GetPostingRequest {
            ledger: String::new(),
            by: Some(pb::get_posting_request::By::IdempotencyKey("key-1".into())),
            as_of: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(by_id, p);
    assert_eq!(by_key, p);
    assert_eq!(p.memo, "invoice 7");
    assert_eq!(p.metadata.get("order").map(String::as_str), Some("42"));
    let err = t
        .client
        .get_posting(pb::GetPostingRequest {
            ledger: String::new(),
            by: Some(pb::get_posting_request::By::IdempotencyKey("nope".into())),
            as_of: None,
        })
        .await
        .unwrap_err();
    assert_error(&err, Code::NotFound, "POSTING_NOT_FOUND");
}

#[tokio::test]
async fn list_postings_filters_by_account_and_pages_in_sequence_order() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(2).await;
    for i in 0..7 {
        let to = if i % 2 == 0 { "acct:0" } else { "acct:1" };
        t.post(transfer(&format!("k{i}"), "equity:world", to, "1"))
            .await
            .unwrap();
    }
    let mut seqs = Vec::new();
    let mut token = String::new();
    loop {
        let page = t
            .client
            .list_postings(pb::ListPostingsRequest {
                ledger: String::new(),
                account: "acct:0".into(),
                page_size: 2,
                page_token: token,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        seqs.extend(page.postings.iter().map(|p| p.sequence));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(seqs, vec![1, 3, 5, 7]);
}

#[tokio::test]
async fn a_recorded_cut_off_in_the_future_is_refused() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    let future = prost_types::Timestamp {
        seconds: 4_000_000_000,
        nanos: 0,
    };
    let err = t
        .client
        .get_balance(pb::GetBalanceRequest {
            ledger: String::new(),
            account: "acct:0".into(),
            as_of: Some(pb::AsOf {
                recorded_at: Some(future),
                effective_at: None,
            }),
        })
        .await
        .unwrap_err();
    assert_error(&err, Code::InvalidArgument, "AS_OF_IN_FUTURE");
}

#[tokio::test]
async fn statement_pages_cover_each_entry_once_with_a_running_balance() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(1).await;
    for i in 1..=9 {
        t.post(transfer(
            &format!("in{i}"),
            "equity:world",
            "acct:0",
            &format!("{i}.00"),
        ))
        .await
        .unwrap();
    }
    t.post(transfer("out", "acct:0", "equity:world", "5.00"))
        .await
        .unwrap();
    let mut entries = Vec::new();
    let mut token = String::new();
    loop {
        let page = t
            .client
            .list_entries(pb::ListEntriesRequest {
                ledger: String::new(),
                account: "acct:0".into(),
                as_of: None,
                page_size: 3,
                page_token: token,
            })
            .await
            .unwrap()
            .into_inner();
        entries.extend(page.entries);
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let seqs: Vec<u64> = entries.iter().map(|e| e.sequence).collect();
    assert_eq!(seqs, (1..=10).collect::<Vec<_>>());
    let mut running = 0i64;
    for e in &entries {
        let cents: i64 = e.amount.replace('.', "").parse().unwrap();
        running += if e.direction == pb::Direction::Debit as i32 {
            cents
        } else {
            -cents
        };
        let want = format!("{}.{:02}", running / 100, running % 100);
        assert_eq!(e.balance_after, want);
    }
    assert_eq!(entries.last().unwrap().balance_after, "40.00");
    let err = t
        .client
        .list_entries(pb::ListEntriesRequest {
            ledger: String::new(),
            account: "acct:0".into(),
            as_of: None,
            page_size: 3,
            page_token: "00".repeat(40),
        })
        .await
        .unwrap_err();
    assert_error(&err, Code::InvalidArgument, "INVALID_PAGE_TOKEN");
}

#[tokio::test]
async fn trial_balance_totals_are_equal_per_currency() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(3).await;
    for i in 0..3 {
        t.post(transfer(
            &format!("k{i}"),
            "equity:world",
            &format!("acct:{i}"),
            "2.50",
        ))
        .await
        .unwrap();
    }
    let page = t
        .client
        .list_balances(pb::ListBalancesRequest {
            ledger: String::new(),
            prefix: String::new(),
            as_of: None,
            page_size: 2,
            page_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page.balances.len(), 2);
    assert!(!page.next_page_token.is_empty());
    assert_eq!(page.totals.len(), 1);
    assert_eq!(page.totals[0].debits, "7.50");
    assert_eq!(page.totals[0].credits, "7.50");
}
