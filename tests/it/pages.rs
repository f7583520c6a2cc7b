//! Pages within the documented limits stay within the response limit: a page ends early,
//! with a next page token, when the next item would take it past `MAX_PAGE_BYTES`, and
//! paging on returns every item exactly once.

use crate::support::*;
use ledger_core::limits::{
    MAX_LEGS, MAX_MEMO_BYTES, MAX_METADATA_ENTRIES, MAX_METADATA_KEY_BYTES,
    MAX_METADATA_VALUE_BYTES, MAX_PAGE_BYTES, MAX_PAGE_SIZE,
};
use ledger_server::grpc::pb;
use prost::Message;
use std::collections::HashMap;

/// Metadata at every limit: 32 entries of 64-byte keys and 512-byte values.
fn full_metadata(tag: &str) -> HashMap<String, String> {
    (0..MAX_METADATA_ENTRIES)
        .map(|i| {
            let key = format!("{tag}{i:02}");
            let key = format!("{key}{}", "k".repeat(MAX_METADATA_KEY_BYTES - key.len()));
            (key, "v".repeat(MAX_METADATA_VALUE_BYTES))
        })
        .collect()
}

#[tokio::test]
async fn a_thousand_accounts_with_full_metadata_page_within_the_byte_limit_each_once() {
    let t = TestLedger::start().await;
    let mut c = t.client.clone();
    let n = 1000;
    let mut creates = futures_util::stream::FuturesUnordered::new();
    for i in 0..n {
        let mut c = c.clone();
        creates.push(async move {
            c.create_account(pb::CreateAccountRequest {
                ledger: String::new(),
                code: format!("meta:{i:04}"),
                currency: "EUR".into(),
                scale: 2,
                normal_balance: pb::NormalBalance::Debit as i32,
                allow_negative: false,
                metadata: full_metadata("m"),
            })
            .await
            .unwrap()
        });
        if creates.len() >= 32 {
            futures_util::StreamExt::next(&mut creates).await;
        }
    }
    while futures_util::StreamExt::next(&mut creates).await.is_some() {}
    let (mut token, mut seen, mut pages) = (String::new(), Vec::new(), 0);
    loop {
        let page = c
            .list_accounts(pb::ListAccountsRequest {
                ledger: String::new(),
                prefix: "meta:".into(),
                page_size: MAX_PAGE_SIZE,
                page_token: token,
            })
            .await
            .expect("a page within the limits is answered")
            .into_inner();
        assert!(
            page.encoded_len() <= MAX_PAGE_BYTES,
            "{} bytes",
            page.encoded_len()
        );
        assert!(!page.accounts.is_empty());
        seen.extend(page.accounts.iter().map(|a| a.code.clone()));
        pages += 1;
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    let want: Vec<String> = (0..n).map(|i| format!("meta:{i:04}")).collect();
    assert_eq!(seen, want, "every account once, in order");
    assert!(pages > 1, "the byte limit ended the first page early");
}

#[tokio::test]
async fn postings_of_a_hundred_legs_with_full_memo_and_metadata_page_within_the_byte_limit() {
    let mut t = TestLedger::start().await;
    let long = |side: &str| format!("{side}:{}", "x".repeat(120));
    let (from, to) = (long("from"), long("to"));
    t.account(&from, "EUR", 2, pb::NormalBalance::Credit, true)
        .await;
    t.account(&to, "EUR", 2, pb::NormalBalance::Debit, true)
        .await;
    let n = 700;
    let mut posts = futures_util::stream::FuturesUnordered::new();
    for i in 0..n {
        let mut c = t.client.clone();
        let legs = (0..MAX_LEGS)
            .map(|l| {
                let (account, d) = if l % 2 == 0 {
                    (&to, pb::Direction::Debit)
                } else {
                    (&from, pb::Direction::Credit)
                };
                leg(account, d, "123456789012345678.99")
            })
            .collect();
        posts.push(async move {
            c.post(pb::PostRequest {
                idempotency_key: format!("big-{i}"),
                legs,
                effective_at: None,
                memo: "m".repeat(MAX_MEMO_BYTES),
                metadata: full_metadata("p"),
                ..Default::default()
            })
            .await
            .unwrap()
        });
        if posts.len() >= 32 {
            futures_util::StreamExt::next(&mut posts).await;
        }
    }
    while futures_util::StreamExt::next(&mut posts).await.is_some() {}
    let (mut token, mut seen) = (String::new(), Vec::new());
    loop {
        let page = t
            .client
            .list_postings(pb::ListPostingsRequest {
                ledger: String::new(),
                account: to.clone(),
                page_size: MAX_PAGE_SIZE,
                page_token: token,
                ..Default::default()
            })
            .await
            .expect("a page within the limits is answered")
            .into_inner();
        assert!(
            page.encoded_len() <= MAX_PAGE_BYTES,
            "{} bytes",
            page.encoded_len()
        );
        seen.extend(page.postings.iter().map(|p| p.sequence));
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    assert_eq!(
        seen,
        (1..=n as u64).collect::<Vec<_>>(),
        "every posting once, in order"
    );
}

/// The totals of a trial balance are summed once, on its first page, and carried by the page
/// token: later pages do not sum every matching account again (at page size 1 over 50,000
/// accounts that cost 484 ms a page). Shown by changing the stored running totals behind the
/// ledger's back after the first page: later pages still answer the first page's totals.
#[tokio::test]
async fn later_trial_balance_pages_carry_the_totals_of_the_first_instead_of_summing_again() {
    let mut t = TestLedger::start().await;
    t.standard_accounts(5).await;
    for i in 0..5 {
        t.post(transfer(
            &format!("k{i}"),
            "equity:world",
            &format!("acct:{i}"),
            "1.00",
        ))
        .await
        .unwrap();
    }
    let page = |token: String| pb::ListBalancesRequest {
        ledger: String::new(),
        prefix: String::new(),
        as_of: None,
        page_size: 1,
        page_token: token,
    };
    let first = t
        .client
        .list_balances(page(String::new()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(first.totals.len(), 1);
    assert_eq!(
        (
            first.totals[0].debits.as_str(),
            first.totals[0].credits.as_str()
        ),
        ("5.00", "5.00")
    );
    t.db()
        .await
        .batch_execute(
            "SET session_replication_role = replica;
             UPDATE entries SET debits_after = debits_after + 100;
             SET session_replication_role = origin;",
        )
        .await
        .unwrap();
    let (mut token, mut pages) = (first.next_page_token, 1);
    while !token.is_empty() {
        let next = t
            .client
            .list_balances(page(token))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            next.totals, first.totals,
            "page {pages}: the first page's totals"
        );
        token = next.next_page_token;
        pages += 1;
    }
    assert_eq!(pages, 6, "one account a page");
}

#[tokio::test]
async fn a_trial_balance_over_more_currencies_than_a_token_carries_sums_them_on_each_page() {
    use ledger_core::limits::MAX_TOKEN_TOTALS;
    let mut t = TestLedger::start().await;
    let n = MAX_TOKEN_TOTALS + 1;
    for i in 0..n {
        let cur = format!("C{i:03}");
        t.account(
            &format!("w:{i:03}"),
            &cur,
            0,
            pb::NormalBalance::Credit,
            true,
        )
        .await;
        t.account(
            &format!("a:{i:03}"),
            &cur,
            0,
            pb::NormalBalance::Debit,
            false,
        )
        .await;
        t.post(transfer(
            &format!("k{i}"),
            &format!("w:{i:03}"),
            &format!("a:{i:03}"),
            "7",
        ))
        .await
        .unwrap();
    }
    let (mut token, mut listed) = (String::new(), 0);
    loop {
        let page = t
            .client
            .list_balances(pb::ListBalancesRequest {
                page_size: 50,
                page_token: token,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(page.totals.len(), n);
        assert!(page
            .totals
            .iter()
            .all(|c| c.debits == "7" && c.credits == "7"));
        listed += page.balances.len();
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    assert_eq!(listed, 2 * n);
}

/// The token of version 1 (hex, a hand-made keyed SHA-256), made with the ledger's own key:
/// refused since version 2 (HMAC-SHA256), with `INVALID_PAGE_TOKEN`.
fn version_1_token(key: &[u8], scope: &str, text: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut body = vec![1u8, 0];
    body.extend_from_slice(text.as_bytes());
    let mut h = Sha256::new();
    h.update((key.len() as u64).to_be_bytes());
    h.update(key);
    h.update((scope.len() as u64).to_be_bytes());
    h.update(scope.as_bytes());
    h.update(&body);
    body.extend_from_slice(&h.finalize()[..16]);
    body.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn a_page_token_of_the_earlier_version_is_refused() {
    let mut t = TestLedger::start().await;
    world_and_one_account(&mut t.client).await;
    let key: Vec<u8> = t
        .db()
        .await
        .query_one("SELECT page_token_key FROM ledger_secret", &[])
        .await
        .unwrap()
        .get(0);
    let e = t
        .client
        .list_accounts(pb::ListAccountsRequest {
            ledger: String::new(),
            prefix: String::new(),
            page_size: 1,
            page_token: version_1_token(&key, "accounts:", "acct:0"),
        })
        .await
        .unwrap_err();
    assert_error(&e, tonic::Code::InvalidArgument, "INVALID_PAGE_TOKEN");
}
