//! The CLI's write and read commands, each a client of a running server:
//! `ledger account create|get|list|update|versions`, `ledger post` (and holds, and its
//! conditions), `ledger capture`, `ledger void`, `ledger posting get`, `ledger balance`, each
//! on the ledger of `--ledger` (env `LEDGER_LEDGER`, default `default`), and `ledger ledgers
//! create|get|list`, `ledger period close|list`. `post`, `capture`, `void`, `account update`
//! and `period close` need an idempotency key,
//! as every caller of the ledger does: a retry with the same key never writes twice.
//!
//! `args.rs` has their arguments (clap), `terms_args.rs` those of `ledger account update` and
//! of a post's conditions, `accounts.rs` `ledger account`, `post.rs` `ledger post` (one
//! posting, or a file's list as one `PostBatch`), `ledgers.rs` `ledger ledgers`; here are the
//! others, and what every command shares: its failure, the key a write needs, the printing of
//! an answer.

mod accounts;
mod args;
mod ledgers;
mod period;
mod post;
mod terms_args;

pub use accounts::{account, update_account, update_request};
pub use args::{
    parse_leg, AccountCommand, BalanceArgs, CaptureArgs, Common, LedgersCommand, LedgersCommon,
    PeriodCommand, PostArgs, PostingCommand, Side, VoidArgs,
};
pub use ledgers::ledgers;
pub use period::period;
pub use post::{post, post_plan, PostPlan};
pub use terms_args::{
    parse_debit_limit, parse_if_available, parse_if_last_sequence, AccountUpdateArgs, StatusArg,
};

use super::output::{self, Format};
use super::ToolError;
use ledger_server::grpc::convert::time_to_pb;
use ledger_server::grpc::pb;
use serde_json::{json, Value};
use time::OffsetDateTime;

/// Why a write command failed: a mistake in its own arguments, found before anything was
/// sent (exit 2, as clap's own usage errors), or the call (exit 1).
#[derive(Debug)]
pub enum Failure {
    Usage(String),
    Call(ToolError),
}

impl From<ToolError> for Failure {
    fn from(e: ToolError) -> Failure {
        Failure::Call(e)
    }
}

impl From<tonic::Status> for Failure {
    fn from(s: tonic::Status) -> Failure {
        Failure::Call(s.into())
    }
}

/// What a key is for, in the message of a write without one.
const KEY_WHY: &str = "the idempotency key that makes a retry safe (send the same key again after a timeout or an error, and the ledger records the posting once); choose one per posting, e.g. --key invoice-2026-0042";

/// The key a write needs, or the usage error that says why.
fn required_key(key: &Option<String>, command: &str) -> Result<String, Failure> {
    required_key_for(key, command, KEY_WHY)
}

/// The key a write needs, or the usage error that says `why` it needs one.
fn required_key_for(key: &Option<String>, command: &str, why: &str) -> Result<String, Failure> {
    match key.as_deref() {
        Some(k) if !k.is_empty() => Ok(k.to_owned()),
        _ => Err(Failure::Usage(format!(
            "ledger {command} needs --key KEY: {why}"
        ))),
    }
}

/// A cut-off from the `--as-of` and `--effective` options (none: now).
fn cut_off(as_of: Option<OffsetDateTime>, effective: Option<OffsetDateTime>) -> Option<pb::AsOf> {
    (as_of.is_some() || effective.is_some()).then(|| pb::AsOf {
        recorded_at: as_of.map(time_to_pb),
        effective_at: effective.map(time_to_pb),
    })
}

/// The answer to a write (post, void, capture): the posting and whether it was a replay.
fn posted_json(posting: Option<&pb::Posting>, replayed: bool) -> Value {
    let posting = posting.map(output::posting_json).unwrap_or(Value::Null);
    json!({ "posting": posting, "replayed": replayed })
}

fn print_posted(
    format: Format,
    posting: Option<&pb::Posting>,
    replayed: bool,
) -> Result<(), ToolError> {
    print(format, &posted_json(posting, replayed))
}

/// Prints a record: JSON, or its fields one a line.
fn print(format: Format, v: &Value) -> Result<(), ToolError> {
    let text = match format {
        Format::Json => output::json_text(v),
        Format::Table => output::fields(v),
    };
    print_text(&text)
}

/// The answer of a create call: `{"<what>": <it, or null>, "created": <created>}`.
fn print_created(
    format: Format,
    what: &str,
    it: Option<Value>,
    created: bool,
) -> Result<(), ToolError> {
    print(
        format,
        &json!({ what: it.unwrap_or(Value::Null), "created": created }),
    )
}

fn print_text(text: &str) -> Result<(), ToolError> {
    super::output::print_out(text).map_err(|e| ToolError(format!("cannot write to stdout: {e}")))
}

pub async fn void(a: VoidArgs) -> Result<(), Failure> {
    let key = required_key(&a.key, "void")?;
    let ledger = a.common.ledger.code();
    let mut client = a.common.client.connect().await?;
    let posting_id = match (a.posting_id, a.posting_key) {
        (Some(id), None) => id,
        (None, Some(k)) => {
            let by = Some(pb::get_posting_request::By::IdempotencyKey(k));
            let p = client
                .get_posting(pb::GetPostingRequest {
                    ledger: ledger.clone(),
                    by,
                    as_of: None,
                })
                .await?;
            p.into_inner().posting_id
        }
        _ => {
            let why = "ledger void takes a POSTING_ID or --posting-key KEY";
            return Err(Failure::Usage(why.into()));
        }
    };
    let req = pb::VoidRequest {
        ledger,
        idempotency_key: key,
        posting_id,
        reason: a.reason,
        effective_at: a.effective.map(time_to_pb),
    };
    let r = client.void(req).await?.into_inner();
    Ok(print_posted(
        a.common.format,
        r.posting.as_ref(),
        r.replayed,
    )?)
}

/// A posting's id: given, or found by the caller's idempotency key on `ledger`.
async fn posting_id(
    client: &mut super::RawClient,
    ledger: &str,
    id: Option<String>,
    key: Option<String>,
    usage: &str,
) -> Result<String, ToolError> {
    match (id, key) {
        (Some(id), None) => Ok(id),
        (None, Some(k)) => {
            let by = Some(pb::get_posting_request::By::IdempotencyKey(k));
            let p = client
                .get_posting(pb::GetPostingRequest {
                    ledger: ledger.to_owned(),
                    by,
                    as_of: None,
                })
                .await?;
            Ok(p.into_inner().posting_id)
        }
        _ => Err(ToolError(usage.into())),
    }
}

pub async fn capture(a: CaptureArgs) -> Result<(), Failure> {
    let key = required_key(&a.key, "capture")?;
    let legs = a.legs;
    let ledger = a.common.ledger.code();
    let mut client = a.common.client.connect().await?;
    let usage = "ledger capture takes --hold POSTING_ID or --hold-key KEY";
    let hold_posting_id =
        posting_id(&mut client, &ledger, a.hold_posting_id, a.hold_key, usage).await?;
    let req = pb::CaptureRequest {
        ledger,
        idempotency_key: key,
        hold_posting_id,
        legs,
        effective_at: a.effective.map(time_to_pb),
        memo: a.memo,
        metadata: a.metadata.into_iter().collect(),
    };
    let r = client.capture(req).await?.into_inner();
    Ok(print_posted(
        a.common.format,
        r.posting.as_ref(),
        r.replayed,
    )?)
}

pub async fn posting(cmd: PostingCommand) -> Result<(), ToolError> {
    let PostingCommand::Get {
        posting_id,
        key,
        as_of,
        effective,
        common,
    } = cmd;
    let by = match (posting_id, key) {
        (Some(id), None) => pb::get_posting_request::By::PostingId(id),
        (None, Some(k)) => pb::get_posting_request::By::IdempotencyKey(k),
        _ => {
            return Err(ToolError(
                "ledger posting get takes a POSTING_ID or --key KEY".into(),
            ))
        }
    };
    let p = common
        .client
        .connect()
        .await?
        .get_posting(pb::GetPostingRequest {
            ledger: common.ledger.code(),
            by: Some(by),
            as_of: cut_off(as_of, effective),
        })
        .await?
        .into_inner();
    print(common.format, &output::posting_json(&p))
}

pub async fn balance(a: BalanceArgs) -> Result<(), ToolError> {
    let as_of = cut_off(a.as_of, a.effective);
    let b = a
        .common
        .client
        .connect()
        .await?
        .get_balance(pb::GetBalanceRequest {
            ledger: a.common.ledger.code(),
            account: a.account,
            as_of,
        })
        .await?
        .into_inner();
    print(a.common.format, &output::balance_json(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_without_a_key_is_a_usage_error_saying_why_a_key_is_needed() {
        let Err(Failure::Usage(e)) = required_key(&None, "post") else {
            panic!("a usage error")
        };
        assert!(e.contains("--key") && e.contains("retry"), "{e}");
        assert!(matches!(
            required_key(&Some(String::new()), "void"),
            Err(Failure::Usage(_))
        ));
    }
}
