//! Accounts: idempotent creation by code, conflicts, lookups, listing.

use crate::support::*;
use ledger_server::grpc::pb;
use tonic::Code;

fn create(code: &str, currency: &str, scale: u32) -> pb::CreateAccountRequest {
    pb::CreateAccountRequest {
        ledger: String::new(),
        code: code.into(),
        currency: currency.into(),
        scale,
        normal_balance: pb::NormalBalance::Debit as i32,
        allow_negative: false,
        metadata: [("owner".to_string(), "alice".to_string())].into(),
    }
}

#[tokio::test]
async fn creating_an_identical_account_again_is_a_success_that_creates_nothing() {
    let mut t = TestLedger::start().await;
    let a = t
        .client
        .create_account(create("liabilities:wallet:alice", "EUR", 2))
        .await
        .unwrap()
        .into_inner();
    assert!(a.created);
    let b = t
        .client
        .create_account(create("liabilities:wallet:alice", "EUR", 2))
        .await
        .unwrap()
        .into_inner();
    assert!(!b.created);
    assert_eq!(a.account, b.account);
    assert_eq!(t.count("accounts").await, 1);
    let got = t
        .client
        .get_account(pb::GetAccountRequest {
            as_of: None,
            ledger: String::new(),
            code: "liabilities:wallet:alice".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(Some(got), a.account);
}

#[tokio::test]
async fn creating_an_account_with_different_attributes_is_a_conflict() {
    let mut t = TestLedger::start().await;
    t.client
        .create_account(create("a", "EUR", 2))
        .await
        .unwrap();
    let err = t
        .client
        .create_account(create("a", "USD", 2))
        .await
        .unwrap_err();
    assert_error(&err, Code::FailedPrecondition, "ACCOUNT_CONFLICT");
    assert!(err.message().contains("currency"), "{}", err.message());
    let err = t
        .client
        .create_account(pb::CreateAccountRequest {
            allow_negative: true,
            ..create("a", "EUR", 2)
        })
        .await
        .unwrap_err();
    assert_error(&err, Code::FailedPrecondition, "ACCOUNT_CONFLICT");
}

#[tokio::test]
async fn invalid_accounts_are_refused_with_their_reason() {
    let mut t = TestLedger::start().await;
    let table = [
        (create("", "EUR", 2), "INVALID_ACCOUNT_CODE"),
        (create("UPPER", "EUR", 2), "INVALID_ACCOUNT_CODE"),
        (create(&"a".repeat(129), "EUR", 2), "INVALID_ACCOUNT_CODE"),
        (create("a", "eur", 2), "INVALID_CURRENCY"),
        (create("a", "E", 2), "INVALID_CURRENCY"),
        (create("a", "EUR", 19), "AMOUNT_SCALE"),
        (
            pb::CreateAccountRequest {
                normal_balance: 0,
                ..create("a", "EUR", 2)
            },
            "INVALID_FIELD",
        ),
    ];
    for (r, want) in table {
        let err = t.client.create_account(r.clone()).await.unwrap_err();
        assert_error(&err, Code::InvalidArgument, want);
    }
    let err = t
        .client
        .get_account(pb::GetAccountRequest {
            as_of: None,
            ledger: String::new(),
            code: "missing".into(),
        })
        .await
        .unwrap_err();
    assert_error(&err, Code::NotFound, "ACCOUNT_NOT_FOUND");
}

#[tokio::test]
async fn list_accounts_pages_through_a_prefix_once_each() {
    let mut t = TestLedger::start().await;
    for i in 0..25 {
        t.client
            .create_account(create(&format!("assets:{i:02}"), "EUR", 2))
            .await
            .unwrap();
    }
    t.client
        .create_account(create("liabilities:x", "EUR", 2))
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let page = t
            .client
            .list_accounts(pb::ListAccountsRequest {
                ledger: String::new(),
                prefix: "assets:".into(),
                page_size: 10,
                page_token: token,
            })
            .await
            .unwrap()
            .into_inner();
        assert!(page.accounts.len() <= 10);
        seen.extend(page.accounts.into_iter().map(|a| a.code));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let want: Vec<String> = (0..25).map(|i| format!("assets:{i:02}")).collect();
    assert_eq!(seen, want);
    let err = t
        .client
        .list_accounts(pb::ListAccountsRequest {
            ledger: String::new(),
            prefix: "".into(),
            page_size: 1001,
            page_token: String::new(),
        })
        .await
        .unwrap_err();
    assert_error(&err, Code::InvalidArgument, "LIMIT_EXCEEDED");
    assert!(err.message().contains("MAX_PAGE_SIZE"));
    let err = t
        .client
        .list_accounts(pb::ListAccountsRequest {
            ledger: String::new(),
            prefix: "assets:".into(),
            page_size: 10,
            page_token: "deadbeef".into(),
        })
        .await
        .unwrap_err();
    assert_error(&err, Code::InvalidArgument, "INVALID_PAGE_TOKEN");
}
