//! `ledger ledgers create|get|list`: the ledgers of a deployment, each an isolated book with
//! its own accounts, postings and sequence (the other client commands work on one of them,
//! named by `--ledger`).

use super::super::output::{self, Format};
use super::super::ToolError;
use super::args::{LedgersCommand, LedgersCommon};
use super::{print, print_created, print_text};
use ledger_server::grpc::pb;
use serde_json::{json, Value};

pub async fn ledgers(cmd: LedgersCommand) -> Result<(), ToolError> {
    match cmd {
        LedgersCommand::Create {
            code,
            description,
            metadata,
            cluster,
            common,
        } => {
            let req = pb::CreateLedgerRequest {
                code,
                description,
                metadata: metadata.into_iter().collect(),
                cluster,
            };
            let r = common
                .client
                .connect()
                .await?
                .create_ledger(req)
                .await?
                .into_inner();
            let ledger = r.ledger.as_ref().map(output::ledger_json);
            print_created(common.format, "ledger", ledger, r.created)
        }
        LedgersCommand::Get { code, common } => {
            let l = common
                .client
                .connect()
                .await?
                .get_ledger(pb::GetLedgerRequest { code })
                .await?
                .into_inner();
            print(common.format, &output::ledger_json(&l))
        }
        LedgersCommand::List { page_size, common } => list(page_size, &common).await,
    }
}

/// Every page of `ListLedgers`, `page_size` a call: a table (code, created, description) or
/// `{"ledgers": [...]}`.
async fn list(page_size: u32, common: &LedgersCommon) -> Result<(), ToolError> {
    let mut client = common.client.connect().await?;
    let (mut all, mut token) = (Vec::new(), String::new());
    loop {
        let req = pb::ListLedgersRequest {
            page_size,
            page_token: token,
        };
        let page = client.list_ledgers(req).await?.into_inner();
        all.extend(page.ledgers);
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    if common.format == Format::Json {
        let ledgers: Vec<Value> = all.iter().map(output::ledger_json).collect();
        return print(Format::Json, &json!({ "ledgers": ledgers }));
    }
    let mut rows = vec![["CODE", "CREATED", "DESCRIPTION"]
        .map(String::from)
        .to_vec()];
    for l in &all {
        rows.push(vec![
            l.code.clone(),
            super::super::show_ts(&l.created_at),
            l.description.clone(),
        ]);
    }
    print_text(&output::columns(&rows))
}
