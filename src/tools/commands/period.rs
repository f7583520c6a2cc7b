//! `ledger period close|list`: a ledger's period closes (docs/verifiable.md, "Period close").
//! A close needs the role `admin` and an idempotency key; nothing is recorded effective before
//! it afterwards, and there is no reopen.

use super::super::output::{columns, Format};
use super::super::{show_ts, ToolError};
use super::args::{Common, PeriodCommand};
use super::{print, print_text, required_key_for, Failure};
use ledger_server::grpc::convert::time_to_pb;
use ledger_server::grpc::pb;
use serde_json::{json, Value};

/// Why `ledger period close` needs a key.
const CLOSE_KEY_WHY: &str =
    "a close is idempotent by its key: a retry with the same key answers the close it recorded";

pub async fn period(cmd: PeriodCommand) -> Result<(), Failure> {
    match cmd {
        PeriodCommand::Close {
            before,
            key,
            memo,
            common,
        } => {
            let key = required_key_for(&key, "period close", CLOSE_KEY_WHY)?;
            let req = pb::ClosePeriodRequest {
                ledger: common.ledger.code(),
                effective_before: Some(time_to_pb(before)),
                idempotency_key: key,
                memo: memo.unwrap_or_default(),
            };
            let r = common
                .client
                .connect()
                .await?
                .close_period(req)
                .await?
                .into_inner();
            let close = r.close.as_ref().map_or(Value::Null, close_json);
            Ok(print(
                common.format,
                &json!({ "close": close, "replayed": r.replayed }),
            )?)
        }
        PeriodCommand::List { common } => Ok(list(&common).await?),
    }
}

/// A close as the commands print it.
fn close_json(c: &pb::PeriodClose) -> Value {
    let totals: Vec<Value> = c
        .totals
        .iter()
        .map(|t| json!({"currency": t.currency, "debits": t.debits, "credits": t.credits}))
        .collect();
    json!({
        "ledger": c.ledger,
        "effectiveBefore": show_ts(&c.effective_before),
        "afterSequence": c.after_sequence,
        "recordedAt": show_ts(&c.recorded_at),
        "caller": c.caller,
        "idempotencyKey": c.idempotency_key,
        "memo": c.memo,
        "accounts": c.accounts,
        "totals": totals,
        "digest": c.digest.as_ref().map(|d| json!({"sequence": d.sequence, "root": d.root})),
    })
}

/// Every close of the ledger, oldest first: a table or `{"closes": [...]}`.
async fn list(common: &Common) -> Result<(), ToolError> {
    let mut client = common.client.connect().await?;
    let (mut all, mut token) = (Vec::new(), String::new());
    loop {
        let req = pb::ListPeriodClosesRequest {
            ledger: common.ledger.code(),
            page_size: 0,
            page_token: token,
        };
        let page = client.list_period_closes(req).await?.into_inner();
        all.extend(page.closes);
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    if common.format == Format::Json {
        let closes: Vec<Value> = all.iter().map(close_json).collect();
        return print(Format::Json, &json!({ "closes": closes }));
    }
    let mut rows = vec![[
        "EFFECTIVE_BEFORE",
        "RECORDED_AT",
        "AFTER_SEQUENCE",
        "ACCOUNTS",
        "BY",
        "KEY",
        "DIGEST_ROOT",
    ]
    .map(String::from)
    .to_vec()];
    for c in &all {
        rows.push(vec![
            show_ts(&c.effective_before),
            show_ts(&c.recorded_at),
            c.after_sequence.to_string(),
            c.accounts.to_string(),
            c.caller.clone(),
            c.idempotency_key.clone(),
            c.digest
                .as_ref()
                .map(|d| d.root.clone())
                .unwrap_or_default(),
        ]);
    }
    print_text(&columns(&rows))
}
