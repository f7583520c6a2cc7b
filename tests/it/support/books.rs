//! Ledgers for tests: create one, give it the two accounts the tests post between, list every
//! ledger a page at a time.

use ledger_server::grpc::pb;
use ledger_server::grpc::pb::ledger_client::LedgerClient;
use tonic::transport::Channel;

type Client = LedgerClient<Channel>;

pub async fn create_ledger(c: &mut Client, code: &str) -> pb::CreateLedgerResponse {
    c.create_ledger(pb::CreateLedgerRequest {
        code: code.into(),
        description: format!("the books of {code}"),
        metadata: Default::default(),
    })
    .await
    .expect("ledger created")
    .into_inner()
}

pub async fn account_in(
    c: &mut Client,
    ledger: &str,
    code: &str,
    normal: pb::NormalBalance,
    negative: bool,
) {
    c.create_account(pb::CreateAccountRequest {
        ledger: ledger.into(),
        code: code.into(),
        currency: "EUR".into(),
        scale: 2,
        normal_balance: normal as i32,
        allow_negative: negative,
        metadata: Default::default(),
    })
    .await
    .expect("account created");
}

/// A ledger with `equity:world` and `acct:0`, the accounts the tests post between.
pub async fn books(c: &mut Client, ledger: &str) {
    if ledger != "default" {
        create_ledger(c, ledger).await;
    }
    account_in(c, ledger, "equity:world", pb::NormalBalance::Credit, true).await;
    account_in(c, ledger, "acct:0", pb::NormalBalance::Debit, false).await;
}

/// The codes of every ledger the client sees, `page_size` a page; no page is larger.
pub async fn ledger_codes(c: &mut Client, page_size: u32) -> Vec<String> {
    let (mut seen, mut token) = (Vec::new(), String::new());
    loop {
        let req = pb::ListLedgersRequest {
            page_size,
            page_token: token,
        };
        let page = c.list_ledgers(req).await.unwrap().into_inner();
        assert!(
            page.ledgers.len() <= page_size as usize,
            "a page of at most {page_size}"
        );
        seen.extend(page.ledgers.into_iter().map(|l| l.code));
        if page.next_page_token.is_empty() {
            return seen;
        }
        token = page.next_page_token;
    }
}
