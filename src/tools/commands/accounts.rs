//! `ledger account create|get|list|update|versions`: an account's attributes, fixed at
//! creation, and the versions of its terms (status, floor, ceiling, debit limits), each
//! recorded by an update in the ledger's order with its postings.

use super::super::output::{self, Format};
use super::super::{show_ts, ToolError};
use super::args::{AccountCommand, Common, Side};
use super::terms_args::AccountUpdateArgs;
use super::{cut_off, print, print_created, print_text, required_key_for, Failure};
use ledger_core::limits::MAX_PAGE_SIZE;
use ledger_server::grpc::pb;
use serde_json::{json, Value};

/// What a key is for, in the message of an update without one.
const UPDATE_KEY_WHY: &str = "the idempotency key that makes a retry safe (send the same key again after a timeout or an error, and the ledger records the version once); choose one per change, e.g. --key freeze-alice-2026-12-01";

/// `ledger account …`; a mistake in the arguments of `update` is a usage error.
pub async fn account(cmd: AccountCommand) -> Result<(), Failure> {
    match cmd {
        AccountCommand::Create {
            code,
            currency,
            scale,
            normal,
            allow_negative,
            metadata,
            common,
        } => {
            let normal_balance = match normal {
                Side::Debit => pb::NormalBalance::Debit,
                Side::Credit => pb::NormalBalance::Credit,
            } as i32;
            let req = pb::CreateAccountRequest {
                ledger: common.ledger.code(),
                code,
                currency,
                scale,
                normal_balance,
                allow_negative,
                metadata: metadata.into_iter().collect(),
            };
            let mut client = common.client.connect().await?;
            let r = client.create_account(req).await?.into_inner();
            let account = r.account.as_ref().map(output::account_json);
            Ok(print_created(common.format, "account", account, r.created)?)
        }
        AccountCommand::Get {
            code,
            as_of,
            effective,
            common,
        } => {
            let req = pb::GetAccountRequest {
                ledger: common.ledger.code(),
                code,
                as_of: cut_off(as_of, effective),
            };
            let a = common.client.connect().await?.get_account(req).await?;
            Ok(print(
                common.format,
                &output::account_json(&a.into_inner()),
            )?)
        }
        AccountCommand::List { prefix, common } => Ok(list_accounts(&prefix, &common).await?),
        AccountCommand::Update(args) => update_account(args).await,
        AccountCommand::Versions { code, common } => Ok(versions(&code, &common).await?),
    }
}

async fn list_accounts(prefix: &str, common: &Common) -> Result<(), ToolError> {
    let mut client = common.client.connect().await?;
    let (mut all, mut token) = (Vec::new(), String::new());
    loop {
        let req = pb::ListAccountsRequest {
            ledger: common.ledger.code(),
            prefix: prefix.to_owned(),
            page_size: MAX_PAGE_SIZE,
            page_token: token,
        };
        let page = client.list_accounts(req).await?.into_inner();
        all.extend(page.accounts);
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    if common.format == Format::Json {
        let accounts: Vec<Value> = all.iter().map(output::account_json).collect();
        return print(Format::Json, &json!({ "accounts": accounts }));
    }
    let head = [
        "CODE", "CURRENCY", "SCALE", "NORMAL", "NEGATIVE", "STATUS", "VERSION",
    ];
    let mut rows = vec![head.map(String::from).to_vec()];
    for a in &all {
        let side = if a.normal_balance == pb::NormalBalance::Credit as i32 {
            "credit"
        } else {
            "debit"
        };
        rows.push(vec![
            a.code.clone(),
            a.currency.clone(),
            a.scale.to_string(),
            side.into(),
            if a.allow_negative { "allowed" } else { "no" }.into(),
            output::status_word(a.status).into(),
            a.version.to_string(),
        ]);
    }
    print_text(&output::columns(&rows))
}

/// The `UpdateAccount` that `ledger account update` sends: its update_mask names exactly the
/// terms given, in the proto's order; or the mistake in its arguments.
pub fn update_request(a: &AccountUpdateArgs) -> Result<pb::UpdateAccountRequest, Failure> {
    let key = required_key_for(&a.key, "account update", UPDATE_KEY_WHY)?;
    let mut req = pb::UpdateAccountRequest {
        idempotency_key: key,
        code: a.code.clone(),
        expected_version: a.expected_version,
        reason: a.reason.clone(),
        ledger: a.common.ledger.code(),
        ..Default::default()
    };
    let mut paths = Vec::new();
    if let Some(s) = a.status {
        paths.push("status");
        req.status = s.pb() as i32;
    }
    if a.floor.is_some() || a.no_floor {
        paths.push("balance_floor");
        req.balance_floor = a.floor.clone().unwrap_or_default();
    }
    if a.ceiling.is_some() || a.no_ceiling {
        paths.push("balance_ceiling");
        req.balance_ceiling = a.ceiling.clone().unwrap_or_default();
    }
    if !a.debit_limits.is_empty() || a.no_debit_limits {
        paths.push("debit_limits");
        req.debit_limits = a.debit_limits.clone();
    }
    if paths.is_empty() {
        return Err(Failure::Usage(
            "ledger account update changes at least one of --status, --floor or --no-floor, --ceiling or --no-ceiling, --debit-limit or --no-debit-limits".into(),
        ));
    }
    req.update_mask = Some(prost_types::FieldMask {
        paths: paths.into_iter().map(String::from).collect(),
    });
    Ok(req)
}

/// `ledger account update`: the account at its new version, and whether it was a replay.
pub async fn update_account(a: AccountUpdateArgs) -> Result<(), Failure> {
    let req = update_request(&a)?;
    let mut client = a.common.client.connect().await?;
    let r = client.update_account(req).await?.into_inner();
    let account = r.account.as_ref().map_or(Value::Null, output::account_json);
    let answer = json!({ "account": account, "replayed": r.replayed });
    Ok(print(a.common.format, &answer)?)
}

/// `ledger account versions`: every page of `ListAccountVersions`, oldest first, as a table
/// or `{"versions": [...]}` (each the account at that version).
async fn versions(code: &str, common: &Common) -> Result<(), ToolError> {
    let mut client = common.client.connect().await?;
    let (mut all, mut token) = (Vec::new(), String::new());
    loop {
        let req = pb::ListAccountVersionsRequest {
            code: code.to_owned(),
            ledger: common.ledger.code(),
            page_size: MAX_PAGE_SIZE,
            page_token: token,
        };
        let page = client.list_account_versions(req).await?.into_inner();
        all.extend(page.versions);
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    if common.format == Format::Json {
        let versions: Vec<Value> = all.iter().map(output::account_json).collect();
        return print(Format::Json, &json!({ "versions": versions }));
    }
    print_text(&output::columns(&version_rows(&all)))
}

/// A version a row: its terms (`none` for no floor, ceiling or limits), then its facts (`-`
/// where version 1 has none), the reason last (free text).
fn version_rows(all: &[pb::Account]) -> Vec<Vec<String>> {
    let head = [
        "VERSION",
        "STATUS",
        "FLOOR",
        "CEILING",
        "DEBIT_LIMITS",
        "RECORDED_AT",
        "AFTER_SEQUENCE",
        "CALLER",
        "CHANGED",
        "REASON",
    ];
    let mut rows = vec![head.map(String::from).to_vec()];
    let or_none = |s: &str| if s.is_empty() { "none" } else { s }.to_owned();
    let or_dash = |s: String| if s.is_empty() { "-".to_owned() } else { s };
    for a in all {
        let info = a.version_info.clone().unwrap_or_default();
        rows.push(vec![
            a.version.to_string(),
            output::status_word(a.status).into(),
            or_none(&a.balance_floor),
            or_none(&a.balance_ceiling),
            or_none(&output::debit_limits_text(&a.debit_limits)),
            show_ts(&info.recorded_at),
            info.after_sequence.to_string(),
            or_dash(info.caller),
            or_dash(info.changed.join(",")),
            or_dash(info.reason),
        ]);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[derive(clap::Parser)]
    struct Line {
        #[command(flatten)]
        update: AccountUpdateArgs,
    }

    fn request(flags: &[&str]) -> Result<pb::UpdateAccountRequest, Failure> {
        let base = [
            "update",
            "acct:0",
            "--expected-version",
            "3",
            "--reason",
            "why",
        ];
        let args = base.iter().chain(flags);
        update_request(&Line::try_parse_from(args).expect("flags clap takes").update)
    }

    #[test]
    fn an_updates_mask_names_exactly_the_terms_given_in_the_protos_order() {
        let paths = |r: &pb::UpdateAccountRequest| r.update_mask.clone().unwrap().paths;
        let r = request(&[
            "--key",
            "k",
            "--debit-limit",
            "1/60",
            "--no-floor",
            "--status",
            "frozen",
        ])
        .unwrap();
        assert_eq!(paths(&r), ["status", "balance_floor", "debit_limits"]);
        assert_eq!(
            (r.status, r.balance_floor.as_str()),
            (pb::AccountStatus::Frozen as i32, "")
        );
        assert_eq!(
            (r.expected_version, r.reason.as_str(), r.code.as_str()),
            (3, "why", "acct:0")
        );
        let r = request(&["--key", "k", "--ceiling", "10.00"]).unwrap();
        assert_eq!(
            (paths(&r), r.balance_ceiling.as_str()),
            (vec!["balance_ceiling".to_owned()], "10.00")
        );
        let r = request(&["--key", "k", "--no-debit-limits", "--floor", "-5.00"]).unwrap();
        assert_eq!(paths(&r), ["balance_floor", "debit_limits"]);
        assert!(r.debit_limits.is_empty() && r.balance_floor == "-5.00");
        let Err(Failure::Usage(e)) = request(&["--no-ceiling"]) else {
            panic!("a usage error without --key")
        };
        assert!(e.contains("needs --key") && e.contains("retry"), "{e}");
    }
}
