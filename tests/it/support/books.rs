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
        ..Default::default()
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

/// Ledgers `many-1` … `many-10000`, made with SQL as `CreateLedger` makes them (the ledger,
/// its state and its outbox progress, nothing posted), and the statistics brought up to date.
pub async fn ten_thousand_ledgers_by_sql(db: &tokio_postgres::Client) {
    db.batch_execute(
        "WITH l AS (INSERT INTO ledgers (code, description, metadata)
                    SELECT 'many-' || g, 'the books of many-' || g, '{}' FROM generate_series(1, 10000) g RETURNING ledger_id),
              s AS (INSERT INTO ledger_state SELECT ledger_id, ledger_id::bigint << 40, 'epoch' FROM l RETURNING 1)
         INSERT INTO outbox_progress SELECT ledger_id, ledger_id::bigint << 40, now() FROM l;
         ANALYZE ledgers, ledger_state, outbox_progress;",
    )
    .await
    .expect("10,000 ledgers");
}

/// Sequential scans of `tables` so far, read after the statistics' flush (a backend reports
/// its counts at most a second late).
pub async fn seq_scans(db: &tokio_postgres::Client, tables: &[&str]) -> i64 {
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    db.query_one(
        "SELECT coalesce(sum(seq_scan), 0)::bigint FROM pg_stat_user_tables WHERE relname = ANY($1)",
        &[&tables],
    )
    .await
    .unwrap()
    .get(0)
}
