//! The CLI's write and read commands, each a client of a running server:
//! `ledger account create|get|list`, `ledger post` (and holds), `ledger capture`,
//! `ledger void`, `ledger posting get`, `ledger balance`. `post`, `capture` and `void` need an
//! idempotency key, as every caller of the ledger does: a retry with the same key never makes
//! a second posting.

use super::output::{self, Format};
use super::post_file::PostFile;
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

/// `ledger post`: one balanced posting, or a file's list of them as one `PostBatch`.
#[derive(clap::Args, Debug, Clone)]
pub struct PostArgs {
    /// The idempotency key (required, unless the --file posting carries its own
    /// `idempotencyKey`; both may be given only when they are the same): the same key on every
    /// retry of this posting, a new key for a new posting. Not with a list in --file (each
    /// request carries its own).
    #[arg(long)]
    pub key: Option<String>,
    /// Legs as ACCOUNT:DIRECTION:AMOUNT, read from the right (the account code may hold
    /// colons): DIRECTION is `debit` or `credit` (also `d`, `dr`, `c`, `cr`, in any case),
    /// AMOUNT a positive decimal (`100.00`), e.g. `assets:bank:debit:100.00
    /// equity:world:credit:100.00`.
    #[arg(value_name = "LEG", value_parser = parse_leg)]
    pub legs: Vec<pb::Leg>,
    /// The posting in the JSON grpcurl sends (a PostRequest: `idempotencyKey`, `legs`, `memo`,
    /// `effectiveAt`, `metadata`, `hold`, `holdExpiresAt`; times in full RFC 3339), or a JSON
    /// list of them (or `{"requests": [...]}`, grpcurl's PostBatch body): sent as one
    /// PostBatch, each result printed, exit 1 if any request failed. `-` reads standard
    /// input. With one posting, --memo, --effective, --hold-expires-at replace the file's
    /// and --meta and --hold add to it; with a list, they are refused.
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
    /// The legs to capture, as ACCOUNT:DIRECTION:AMOUNT (as for `ledger post`): exactly the
    /// hold's accounts and directions, in its order, each at most the held amount. None: the
    /// whole hold.
    #[arg(value_name = "LEG", value_parser = parse_leg)]
    pub legs: Vec<pb::Leg>,
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
    match key.as_deref() {
        Some(k) if !k.is_empty() => Ok(k.to_owned()),
        _ => Err(Failure::Usage(format!(
            "ledger {command} needs --key KEY: {KEY_WHY}"
        ))),
    }
}

/// The key of a posting read from a file: `--key`, or the file's own `idempotencyKey` when
/// `--key` is absent; both only when they are the same.
fn file_key(flag: &Option<String>, file: &str) -> Result<String, Failure> {
    match (flag.as_deref().filter(|k| !k.is_empty()), file) {
        (None, "") => Err(Failure::Usage(format!(
            "ledger post needs --key KEY or an idempotencyKey in the --file posting: {KEY_WHY}"
        ))),
        (None, file) => Ok(file.to_owned()),
        (Some(k), "") => Ok(k.to_owned()),
        (Some(k), file) if k == file => Ok(k.to_owned()),
        (Some(k), file) => Err(Failure::Usage(format!(
            "--key {k:?} and the --file posting's idempotencyKey {file:?} differ: give one of them (without --key, the file's is used)"
        ))),
    }
}

/// The form of a leg, for messages.
const LEG_FORM: &str = "ACCOUNT:DIRECTION:AMOUNT (e.g. assets:bank:debit:100.00; DIRECTION is debit or credit, or d, dr, c, cr)";

/// A leg from `ACCOUNT:DIRECTION:AMOUNT`, read from the right (the account code may hold
/// colons). A leg that is not of that form is refused naming the form and the part that is
/// wrong, as clap's value parser for `LEG`.
pub fn parse_leg(s: &str) -> Result<pb::Leg, String> {
    let parts: Vec<&str> = s.rsplitn(3, ':').collect();
    let &[amount, direction, account] = parts.as_slice() else {
        return Err(format!(
            "leg {s:?} is not {LEG_FORM}: it has {} part(s) separated by colons, a leg needs three",
            parts.len()
        ));
    };
    let wrong = |part: &str, why: String| format!("leg {s:?} is not {LEG_FORM}: its {part} {why}");
    if account.is_empty() {
        return Err(wrong("ACCOUNT", "is empty".into()));
    }
    if !is_decimal(amount) {
        let hint = if ["debit", "credit"]
            .iter()
            .any(|d| amount.to_ascii_lowercase().contains(d))
        {
            " (the parts are separated by colons, not dashes)"
        } else {
            ""
        };
        return Err(wrong(
            "AMOUNT (after the last colon)",
            format!("{amount:?} is not a positive decimal such as 100.00{hint}"),
        ));
    }
    let direction = match direction.to_ascii_lowercase().as_str() {
        "debit" | "d" | "dr" => pb::Direction::Debit,
        "credit" | "c" | "cr" => pb::Direction::Credit,
        _ => {
            return Err(wrong(
                "DIRECTION (between the last two colons)",
                format!("{direction:?} is not debit or credit (or d, dr, c, cr)"),
            ))
        }
    };
    Ok(pb::Leg {
        account: account.into(),
        direction: direction as i32,
        amount: amount.into(),
    })
}

/// Digits, and optionally a point and more digits: the shape the ledger reads an amount in
/// (its scale and size it checks itself).
fn is_decimal(s: &str) -> bool {
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    match s.split_once('.') {
        Some((int, frac)) => digits(int) && digits(frac),
        None => digits(s),
    }
}

fn read_file(path: &PathBuf) -> Result<(String, String), Failure> {
    let (what, read) = if path.as_os_str() == "-" {
        (
            "standard input".to_owned(),
            std::io::read_to_string(std::io::stdin()),
        )
    } else {
        (path.display().to_string(), std::fs::read_to_string(path))
    };
    let text = read.map_err(|e| Failure::Usage(format!("cannot read --file {what}: {e}")))?;
    Ok((what, text))
}

/// What `ledger post` sends: one posting, or a file's list of them as one `PostBatch`.
#[derive(Debug, Clone, PartialEq)]
pub enum PostPlan {
    One(pb::PostRequest),
    Batch(Vec<pb::PostRequest>),
}

/// The request(s) `ledger post` sends, or the mistake in its arguments.
pub fn post_plan(a: &PostArgs) -> Result<PostPlan, Failure> {
    let Some(path) = &a.file else {
        let key = required_key(&a.key, "post")?;
        let req = pb::PostRequest {
            idempotency_key: key,
            legs: a.legs.clone(),
            ..Default::default()
        };
        return Ok(PostPlan::One(with_flags(a, req)));
    };
    let (what, text) = read_file(path)?;
    match super::post_file::parse(&what, &text).map_err(Failure::Usage)? {
        PostFile::One(mut req) => {
            req.idempotency_key = file_key(&a.key, &req.idempotency_key)?;
            Ok(PostPlan::One(with_flags(a, req)))
        }
        PostFile::Batch(requests) => {
            refuse_flags_for_one(a)?;
            Ok(PostPlan::Batch(requests))
        }
    }
}

/// One posting with the options of the command line applied.
fn with_flags(a: &PostArgs, mut req: pb::PostRequest) -> pb::PostRequest {
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
    req
}

/// The options that apply to one posting are refused with a file's list of them.
fn refuse_flags_for_one(a: &PostArgs) -> Result<(), Failure> {
    let given = [
        ("--key", a.key.is_some()),
        ("--memo", a.memo.is_some()),
        ("--effective", a.effective.is_some()),
        ("--meta", !a.metadata.is_empty()),
        ("--hold", a.hold),
        ("--hold-expires-at", a.hold_expires_at.is_some()),
    ];
    let given: Vec<&str> = given.iter().filter(|(_, g)| *g).map(|(f, _)| *f).collect();
    if given.is_empty() {
        return Ok(());
    }
    Err(Failure::Usage(format!(
        "{} apply to one posting; the --file holds a list of requests, sent as one PostBatch: give the idempotencyKey, memo, effectiveAt, metadata, hold and holdExpiresAt in each request",
        given.join(", ")
    )))
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

fn print_text(text: &str) -> Result<(), ToolError> {
    crate::cli::print_out(text).map_err(|e| ToolError(format!("cannot write to stdout: {e}")))
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

/// `ledger post`: one `Post`, or one `PostBatch` of a file's list.
pub async fn post(a: PostArgs) -> Result<(), Failure> {
    let plan = post_plan(&a)?;
    let mut client = a.common.client.connect().await?;
    match plan {
        PostPlan::One(req) => {
            let r = client.post(req).await?.into_inner();
            Ok(print_posted(
                a.common.format,
                r.posting.as_ref(),
                r.replayed,
            )?)
        }
        PostPlan::Batch(requests) => {
            let n = requests.len();
            let batch = pb::PostBatchRequest { requests };
            let r = client.post_batch(batch).await?.into_inner();
            post_batch_answer(a.common.format, n, &r.results)
        }
    }
}

/// Prints a `PostBatch`'s results, each what `ledger post` prints or the error with its
/// reason; fails (exit 1) when any request failed.
fn post_batch_answer(
    format: Format,
    n: usize,
    results: &[pb::PostBatchResult],
) -> Result<(), Failure> {
    if results.len() != n {
        let why = format!(
            "the ledger answered {} results to {n} requests",
            results.len()
        );
        return Err(ToolError(why).into());
    }
    let outcomes: Vec<BatchOutcome> = results.iter().map(batch_outcome).collect();
    let text = match format {
        Format::Json => {
            let results: Vec<Value> = outcomes.iter().map(|o| o.json.clone()).collect();
            output::json_text(&json!({ "results": results }))
        }
        Format::Table => batch_table(&outcomes),
    };
    print_text(&text)?;
    let failed = outcomes.iter().filter(|o| o.failed).count();
    if failed == 0 {
        return Ok(());
    }
    let why = format!("{failed} of {n} requests of the PostBatch failed (each result is printed above; the others were recorded, or replayed)");
    Err(ToolError(why).into())
}

/// One result: as grpcurl prints it, and as `ledger post` prints it.
struct BatchOutcome {
    failed: bool,
    json: Value,
    table: Value,
    headline: String,
}

fn batch_outcome(r: &pb::PostBatchResult) -> BatchOutcome {
    use pb::post_batch_result::Outcome;
    match &r.outcome {
        Some(Outcome::Response(p)) => {
            let posted = posted_json(p.posting.as_ref(), p.replayed);
            let key = p
                .posting
                .as_ref()
                .map_or("", |p| p.idempotency_key.as_str());
            let what = if p.replayed { "replayed" } else { "posted" };
            BatchOutcome {
                failed: false,
                json: json!({ "response": posted }),
                table: posted,
                headline: format!("{what} (key {key})"),
            }
        }
        Some(Outcome::Error(e)) => batch_error(e),
        None => BatchOutcome {
            failed: true,
            json: json!({}),
            table: json!({ "error": "the ledger answered a result without an outcome" }),
            headline: "failed".into(),
        },
    }
}

/// A failed request's result: its code, reason, message and facts.
fn batch_error(e: &tonic_types::pb::Status) -> BatchOutcome {
    use tonic_types::StatusExt as _;
    let code = tonic::Code::from_i32(e.code);
    let status = tonic::Status::with_details(
        code,
        e.message.clone(),
        prost::Message::encode_to_vec(e).into(),
    );
    let info = status.get_details_error_info();
    let reason = info.as_ref().map_or("", |i| i.reason.as_str());
    let metadata: std::collections::BTreeMap<_, _> =
        info.iter().flat_map(|i| i.metadata.iter()).collect();
    let details: Vec<Value> = info
        .iter()
        .map(|i| {
            json!({
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": i.reason,
                "domain": i.domain,
                "metadata": metadata,
            })
        })
        .collect();
    BatchOutcome {
        failed: true,
        json: json!({ "error": { "code": e.code, "message": e.message, "details": details } }),
        table: json!({ "error": format!("{code:?} {reason}: {}", e.message), "metadata": metadata }),
        headline: format!("failed, {reason}"),
    }
}

/// The results for people: each under a line naming it, then a count.
fn batch_table(outcomes: &[BatchOutcome]) -> String {
    let n = outcomes.len();
    let mut text = String::new();
    for (i, o) in outcomes.iter().enumerate() {
        text.push_str(&format!("# request {i} of {n}: {}\n", o.headline));
        text.push_str(&output::fields(&o.table));
        text.push('\n');
    }
    let failed = outcomes.iter().filter(|o| o.failed).count();
    text.push_str(&format!(
        "{n} requests: {} answered with a posting, {failed} failed\n",
        n - failed
    ));
    text
}

pub async fn void(a: VoidArgs) -> Result<(), Failure> {
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
            return Err(Failure::Usage(why.into()));
        }
    };
    let req = pb::VoidRequest {
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

pub async fn capture(a: CaptureArgs) -> Result<(), Failure> {
    let key = required_key(&a.key, "capture")?;
    let legs = a.legs;
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
        for (alias, d) in [
            ("D", pb::Direction::Debit),
            ("dr", pb::Direction::Debit),
            ("Debit", pb::Direction::Debit),
            ("c", pb::Direction::Credit),
            ("CR", pb::Direction::Credit),
        ] {
            let leg = parse_leg(&format!("a:{alias}:1")).unwrap();
            assert_eq!(leg.direction, d as i32, "{alias}");
        }
    }

    #[test]
    fn a_mistyped_leg_is_refused_naming_the_form_and_the_part_that_is_wrong() {
        for (leg, part) in [
            (
                "liabilities:wallet:carol-1-debit-1.00",
                "AMOUNT (after the last colon) \"carol-1-debit-1.00\"",
            ),
            (
                "a:sideways:1",
                "DIRECTION (between the last two colons) \"sideways\"",
            ),
            (
                "assets:bank:100.00",
                "DIRECTION (between the last two colons) \"bank\"",
            ),
            ("a:debit:-1.00", "AMOUNT (after the last colon) \"-1.00\""),
            ("a:debit:1,00", "AMOUNT (after the last colon) \"1,00\""),
            (":debit:1.00", "ACCOUNT is empty"),
            ("a:1", "2 part(s)"),
            ("100", "1 part(s)"),
        ] {
            let e = parse_leg(leg).unwrap_err();
            assert!(
                e.contains(LEG_FORM) && e.contains(part) && e.contains(&format!("{leg:?}")),
                "{leg}: {e}"
            );
        }
        let e = parse_leg("liabilities:wallet:carol-1-debit-1.00").unwrap_err();
        assert!(e.contains("separated by colons, not dashes"), "{e}");
    }

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

    #[test]
    fn a_files_key_is_used_without_key_and_a_different_key_is_refused() {
        let key = |flag: Option<&str>, file: &str| file_key(&flag.map(str::to_owned), file);
        assert_eq!(key(None, "f").unwrap(), "f");
        assert_eq!(key(Some("k"), "").unwrap(), "k");
        assert_eq!(key(Some("k"), "k").unwrap(), "k");
        let Err(Failure::Usage(e)) = key(Some("k"), "f") else {
            panic!("a usage error")
        };
        assert!(
            e.contains("\"k\"") && e.contains("\"f\"") && e.contains("differ"),
            "{e}"
        );
        assert!(matches!(key(None, ""), Err(Failure::Usage(_))));
    }
}
