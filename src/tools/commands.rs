//! The CLI's write and read commands, each a client of a running server:
//! `ledger account create|get|list`, `ledger post` (and holds), `ledger capture`,
//! `ledger void`, `ledger posting get`, `ledger balance`. `post`, `capture` and `void` need an
//! idempotency key, as every caller of the ledger does: a retry with the same key never makes
//! a second posting.

use super::output::{self, Format};
use super::{parse_time, ClientArgs, ToolError};
use ledger_server::grpc::convert::time_to_pb;
use ledger_server::grpc::pb;
use serde_json::{json, Value};
use std::path::PathBuf;
use time::OffsetDateTime;

/// The options every command takes: where the server is, and how to print.
#[derive(clap::Args, Debug, Clone)]
pub struct Common {
    #[command(flatten)]
    pub client: ClientArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// A normal balance side on the command line.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// balance = debits - credits (assets, expenses).
    Debit,
    /// balance = credits - debits (liabilities, equity, income).
    Credit,
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum AccountCommand {
    /// Creates an account; the same attributes again answer `created: false`.
    Create {
        /// The account's code (1..128 characters of a-z 0-9 : _ - .).
        code: String,
        /// Its currency (2..16 characters of A-Z 0-9).
        #[arg(long)]
        currency: String,
        /// Decimal places its amounts may carry (0..18).
        #[arg(long)]
        scale: u32,
        /// The side its balance grows on.
        #[arg(long, value_enum)]
        normal: Side,
        /// Whether its balance may go below zero.
        #[arg(long)]
        allow_negative: bool,
        /// Metadata entries (repeatable).
        #[arg(long = "meta", value_name = "KEY=VALUE", value_parser = parse_meta)]
        metadata: Vec<(String, String)>,
        #[command(flatten)]
        common: Common,
    },
    /// Shows one account.
    Get {
        /// The account's code.
        code: String,
        #[command(flatten)]
        common: Common,
    },
    /// Lists accounts by code prefix (every page).
    List {
        /// Only accounts whose code starts with this.
        #[arg(long, default_value = "")]
        prefix: String,
        #[command(flatten)]
        common: Common,
    },
}

/// `ledger post`: one balanced posting.
#[derive(clap::Args, Debug, Clone)]
pub struct PostArgs {
    /// The idempotency key (required): the same key on every retry of this posting, a new
    /// key for a new posting.
    #[arg(long)]
    pub key: Option<String>,
    /// Legs as ACCOUNT:DIRECTION:AMOUNT (direction `debit` or `credit`), e.g.
    /// `assets:bank:debit:100.00 equity:world:credit:100.00`.
    #[arg(value_name = "LEG")]
    pub legs: Vec<String>,
    /// The posting as JSON, as grpcurl sends a PostRequest (`legs`, `memo`, `effective_at`,
    /// `metadata`); `-` reads standard input.
    #[arg(long, conflicts_with = "legs")]
    pub file: Option<PathBuf>,
    /// A memo.
    #[arg(long)]
    pub memo: Option<String>,
    /// When it is effective (RFC 3339 or a date); default: when it is recorded.
    #[arg(long, value_parser = parse_time)]
    pub effective: Option<OffsetDateTime>,
    /// Metadata entries (repeatable).
    #[arg(long = "meta", value_name = "KEY=VALUE", value_parser = parse_meta)]
    pub metadata: Vec<(String, String)>,
    /// A hold: the legs reserve their amounts and move none, until `ledger capture`, a
    /// `ledger void` (the release) or the expiry.
    #[arg(long)]
    pub hold: bool,
    /// When the hold expires and the ledger releases it (RFC 3339 or a date; after now).
    /// Default: never.
    #[arg(long, value_parser = parse_time, requires = "hold")]
    pub hold_expires_at: Option<OffsetDateTime>,
    #[command(flatten)]
    pub common: Common,
}

/// `ledger capture`: moves a hold's money, all of it or less, and releases the rest.
#[derive(clap::Args, Debug, Clone)]
pub struct CaptureArgs {
    /// The hold to capture: its posting id.
    #[arg(
        long = "hold",
        value_name = "POSTING_ID",
        required_unless_present = "hold_key"
    )]
    pub hold_posting_id: Option<String>,
    /// Instead of its id: the hold you recorded under this idempotency key.
    #[arg(long, conflicts_with = "hold_posting_id")]
    pub hold_key: Option<String>,
    /// The idempotency key (required), as for `ledger post`.
    #[arg(long)]
    pub key: Option<String>,
    /// The legs to capture, as ACCOUNT:DIRECTION:AMOUNT: exactly the hold's accounts and
    /// directions, in its order, each at most the held amount. None: the whole hold.
    #[arg(value_name = "LEG")]
    pub legs: Vec<String>,
    /// A memo.
    #[arg(long, default_value = "")]
    pub memo: String,
    /// When the capture is effective (RFC 3339 or a date); default: when it is recorded.
    #[arg(long, value_parser = parse_time)]
    pub effective: Option<OffsetDateTime>,
    /// Metadata entries (repeatable).
    #[arg(long = "meta", value_name = "KEY=VALUE", value_parser = parse_meta)]
    pub metadata: Vec<(String, String)>,
    #[command(flatten)]
    pub common: Common,
}

/// `ledger void`: the compensating posting of an earlier one.
#[derive(clap::Args, Debug, Clone)]
pub struct VoidArgs {
    /// The posting to void.
    #[arg(required_unless_present = "posting_key")]
    pub posting_id: Option<String>,
    /// Instead of its id: the posting you recorded under this idempotency key.
    #[arg(long, conflicts_with = "posting_id")]
    pub posting_key: Option<String>,
    /// The idempotency key (required), as for `ledger post`.
    #[arg(long)]
    pub key: Option<String>,
    /// Why.
    #[arg(long, default_value = "")]
    pub reason: String,
    /// When the void is effective (RFC 3339 or a date); default: when it is recorded.
    #[arg(long, value_parser = parse_time)]
    pub effective: Option<OffsetDateTime>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum PostingCommand {
    /// Shows one posting, by id or by your idempotency key.
    Get {
        /// The posting's id.
        #[arg(required_unless_present = "key")]
        posting_id: Option<String>,
        /// Your idempotency key instead of the id.
        #[arg(long, conflicts_with = "posting_id")]
        key: Option<String>,
        /// Recorded cut-off: the posting as the ledger knew it then (its void, a hold's
        /// state). Default: now.
        #[arg(long, value_parser = parse_time)]
        as_of: Option<OffsetDateTime>,
        /// Effective cut-off: the voids and closes effective by then. Default: the recorded
        /// cut-off.
        #[arg(long, value_parser = parse_time)]
        effective: Option<OffsetDateTime>,
        #[command(flatten)]
        common: Common,
    },
}

/// A cut-off from the `--as-of` and `--effective` options (none: now).
fn cut_off(as_of: Option<OffsetDateTime>, effective: Option<OffsetDateTime>) -> Option<pb::AsOf> {
    (as_of.is_some() || effective.is_some()).then(|| pb::AsOf {
        recorded_at: as_of.map(time_to_pb),
        effective_at: effective.map(time_to_pb),
    })
}

/// `ledger balance`: an account's balance at a cut-off.
#[derive(clap::Args, Debug, Clone)]
pub struct BalanceArgs {
    /// The account's code.
    pub account: String,
    /// Recorded cut-off: what the ledger knew then (RFC 3339 or a date). Default: now.
    #[arg(long, value_parser = parse_time)]
    pub as_of: Option<OffsetDateTime>,
    /// Effective cut-off: what had happened by then. Default: the recorded cut-off.
    #[arg(long, value_parser = parse_time)]
    pub effective: Option<OffsetDateTime>,
    #[command(flatten)]
    pub common: Common,
}

fn parse_meta(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("{s:?} is not KEY=VALUE"))
}

/// The key a write needs, or the error that says why.
fn required_key(key: &Option<String>, command: &str) -> Result<String, ToolError> {
    match key.as_deref() {
        Some(k) if !k.is_empty() => Ok(k.to_owned()),
        _ => Err(ToolError(format!(
            "ledger {command} needs --key KEY: the idempotency key that makes a retry safe (send the same key again after a timeout or an error, and the ledger records the posting once); choose one per posting, e.g. --key invoice-2026-0042"
        ))),
    }
}

/// A leg from `ACCOUNT:DIRECTION:AMOUNT` (the account code may hold colons).
pub fn parse_leg(s: &str) -> Result<pb::Leg, ToolError> {
    let bad = || {
        ToolError(format!(
            "leg {s:?} is not ACCOUNT:DIRECTION:AMOUNT (e.g. assets:bank:debit:100.00)"
        ))
    };
    let mut parts = s.rsplitn(3, ':');
    let (amount, direction, account) = (
        parts.next().ok_or_else(bad)?,
        parts.next().ok_or_else(bad)?,
        parts.next().ok_or_else(bad)?,
    );
    let direction = match direction.to_ascii_lowercase().as_str() {
        "debit" | "d" | "dr" => pb::Direction::Debit,
        "credit" | "c" | "cr" => pb::Direction::Credit,
        _ => {
            return Err(ToolError(format!(
                "leg {s:?}: direction {direction:?} is not debit or credit"
            )))
        }
    };
    Ok(pb::Leg {
        account: account.into(),
        direction: direction as i32,
        amount: amount.into(),
    })
}

/// The fields of a JSON PostRequest as grpcurl takes it (proto names or lowerCamelCase).
fn post_from_json(v: &Value) -> Result<pb::PostRequest, ToolError> {
    let field = |a: &str, b: &str| v.get(a).or_else(|| v.get(b));
    let text = |x: Option<&Value>| x.and_then(Value::as_str).unwrap_or_default().to_owned();
    let legs = field("legs", "legs")
        .and_then(Value::as_array)
        .ok_or_else(|| ToolError("the JSON posting has no \"legs\" array".into()))?
        .iter()
        .map(|l| {
            let d = text(l.get("direction"));
            let d = d.strip_prefix("DIRECTION_").unwrap_or(&d);
            parse_leg(&format!(
                "{}:{d}:{}",
                text(l.get("account")),
                text(l.get("amount"))
            ))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let effective_at = match field("effective_at", "effectiveAt").and_then(Value::as_str) {
        Some(t) => Some(time_to_pb(parse_time(t).map_err(ToolError)?)),
        None => None,
    };
    let metadata = field("metadata", "metadata")
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), text(Some(v)))).collect())
        .unwrap_or_default();
    Ok(pb::PostRequest {
        idempotency_key: text(field("idempotency_key", "idempotencyKey")),
        legs,
        effective_at,
        memo: text(field("memo", "memo")),
        metadata,
        ..Default::default()
    })
}

fn read_file(path: &PathBuf) -> Result<String, ToolError> {
    let read = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    };
    read.map_err(|e| ToolError(format!("cannot read {}: {e}", path.display())))
}

/// The request `ledger post` sends.
pub fn post_request(a: &PostArgs) -> Result<pb::PostRequest, ToolError> {
    let mut req = match &a.file {
        Some(path) => {
            let v: Value = serde_json::from_str(&read_file(path)?)
                .map_err(|e| ToolError(format!("{} is not JSON: {e}", path.display())))?;
            post_from_json(&v)?
        }
        None => pb::PostRequest {
            legs: a
                .legs
                .iter()
                .map(|l| parse_leg(l))
                .collect::<Result<_, _>>()?,
            ..Default::default()
        },
    };
    req.idempotency_key = required_key(&a.key, "post")?;
    if let Some(m) = &a.memo {
        req.memo.clone_from(m);
    }
    if let Some(t) = a.effective {
        req.effective_at = Some(time_to_pb(t));
    }
    req.metadata.extend(a.metadata.iter().cloned());
    req.hold |= a.hold;
    if let Some(t) = a.hold_expires_at {
        req.hold_expires_at = Some(time_to_pb(t));
    }
    Ok(req)
}

/// Prints a record: JSON, or its fields one a line.
/// The answer to a write (post, void, capture): the posting and whether it was a replay.
fn print_posted(
    format: Format,
    posting: Option<&pb::Posting>,
    replayed: bool,
) -> Result<(), ToolError> {
    let posting = posting.map(output::posting_json).unwrap_or(Value::Null);
    print(format, &json!({ "posting": posting, "replayed": replayed }))
}

fn print(format: Format, v: &Value) -> Result<(), ToolError> {
    let text = match format {
        Format::Json => output::json_text(v),
        Format::Table => output::fields(v),
    };
    crate::cli::print_out(&text).map_err(|e| ToolError(format!("cannot write to stdout: {e}")))
}

pub async fn account(cmd: AccountCommand) -> Result<(), ToolError> {
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
                code,
                currency,
                scale,
                normal_balance,
                allow_negative,
                metadata: metadata.into_iter().collect(),
            };
            let r = common
                .client
                .connect()
                .await?
                .create_account(req)
                .await?
                .into_inner();
            let account = r
                .account
                .as_ref()
                .map(output::account_json)
                .unwrap_or(Value::Null);
            print(
                common.format,
                &json!({ "account": account, "created": r.created }),
            )
        }
        AccountCommand::Get { code, common } => {
            let a = common
                .client
                .connect()
                .await?
                .get_account(pb::GetAccountRequest { code })
                .await?
                .into_inner();
            print(common.format, &output::account_json(&a))
        }
        AccountCommand::List { prefix, common } => list_accounts(&prefix, &common).await,
    }
}

async fn list_accounts(prefix: &str, common: &Common) -> Result<(), ToolError> {
    let mut client = common.client.connect().await?;
    let (mut all, mut token) = (Vec::new(), String::new());
    loop {
        let req = pb::ListAccountsRequest {
            prefix: prefix.to_owned(),
            page_size: ledger_core::limits::MAX_PAGE_SIZE,
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
    let mut rows = vec![["CODE", "CURRENCY", "SCALE", "NORMAL", "NEGATIVE"]
        .map(String::from)
        .to_vec()];
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
        ]);
    }
    crate::cli::print_out(&output::columns(&rows))
        .map_err(|e| ToolError(format!("cannot write to stdout: {e}")))
}

pub async fn post(a: PostArgs) -> Result<(), ToolError> {
    let req = post_request(&a)?;
    let r = a
        .common
        .client
        .connect()
        .await?
        .post(req)
        .await?
        .into_inner();
    print_posted(a.common.format, r.posting.as_ref(), r.replayed)
}

pub async fn void(a: VoidArgs) -> Result<(), ToolError> {
    let key = required_key(&a.key, "void")?;
    let mut client = a.common.client.connect().await?;
    let posting_id = match (a.posting_id, a.posting_key) {
        (Some(id), None) => id,
        (None, Some(k)) => {
            let by = Some(pb::get_posting_request::By::IdempotencyKey(k));
            let p = client
                .get_posting(pb::GetPostingRequest { by, as_of: None })
                .await?;
            p.into_inner().posting_id
        }
        _ => {
            let why = "ledger void takes a POSTING_ID or --posting-key KEY";
            return Err(ToolError(why.into()));
        }
    };
    let req = pb::VoidRequest {
        idempotency_key: key,
        posting_id,
        reason: a.reason,
        effective_at: a.effective.map(time_to_pb),
    };
    let r = client.void(req).await?.into_inner();
    print_posted(a.common.format, r.posting.as_ref(), r.replayed)
}

/// A posting's id: given, or found by the caller's idempotency key.
async fn posting_id(
    client: &mut super::RawClient,
    id: Option<String>,
    key: Option<String>,
    usage: &str,
) -> Result<String, ToolError> {
    match (id, key) {
        (Some(id), None) => Ok(id),
        (None, Some(k)) => {
            let by = Some(pb::get_posting_request::By::IdempotencyKey(k));
            let p = client
                .get_posting(pb::GetPostingRequest { by, as_of: None })
                .await?;
            Ok(p.into_inner().posting_id)
        }
        _ => Err(ToolError(usage.into())),
    }
}

pub async fn capture(a: CaptureArgs) -> Result<(), ToolError> {
    let key = required_key(&a.key, "capture")?;
    let legs = a
        .legs
        .iter()
        .map(|l| parse_leg(l))
        .collect::<Result<_, _>>()?;
    let mut client = a.common.client.connect().await?;
    let usage = "ledger capture takes --hold POSTING_ID or --hold-key KEY";
    let hold_posting_id = posting_id(&mut client, a.hold_posting_id, a.hold_key, usage).await?;
    let req = pb::CaptureRequest {
        idempotency_key: key,
        hold_posting_id,
        legs,
        effective_at: a.effective.map(time_to_pb),
        memo: a.memo,
        metadata: a.metadata.into_iter().collect(),
    };
    let r = client.capture(req).await?.into_inner();
    print_posted(a.common.format, r.posting.as_ref(), r.replayed)
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
    fn legs_parse_from_the_right_so_account_codes_may_hold_colons() {
        let l = parse_leg("liabilities:wallet:alice:credit:100.00").unwrap();
        assert_eq!(
            (l.account.as_str(), l.direction, l.amount.as_str()),
            (
                "liabilities:wallet:alice",
                pb::Direction::Credit as i32,
                "100.00"
            )
        );
        assert_eq!(
            parse_leg("a:D:1").unwrap().direction,
            pb::Direction::Debit as i32
        );
        for bad in ["a:1", "a:sideways:1", "100"] {
            assert!(parse_leg(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_json_posting_reads_as_grpcurl_would_send_it() {
        let v: Value = serde_json::from_str(r#"{"idempotencyKey":"k","memo":"m","effective_at":"2026-12-31","metadata":{"a":"b"},
            "legs":[{"account":"x","direction":"DIRECTION_DEBIT","amount":"1.00"},{"account":"y","direction":"credit","amount":"1.00"}]}"#).unwrap();
        let r = post_from_json(&v).unwrap();
        assert_eq!(
            (r.idempotency_key.as_str(), r.memo.as_str(), r.legs.len()),
            ("k", "m", 2)
        );
        assert_eq!(r.legs[1].direction, pb::Direction::Credit as i32);
        assert_eq!(r.metadata.get("a").map(String::as_str), Some("b"));
        assert!(r.effective_at.is_some());
    }

    #[test]
    fn a_write_without_a_key_is_refused_saying_why_a_key_is_needed() {
        let e = required_key(&None, "post").unwrap_err();
        assert!(e.0.contains("--key") && e.0.contains("retry"), "{e}");
        assert!(required_key(&Some(String::new()), "void").is_err());
    }
}
