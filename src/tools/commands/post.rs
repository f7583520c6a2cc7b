//! `ledger post`: what it sends (one posting from its flags or a file, or a file's list as one
//! `PostBatch`), and how it prints a batch's results.

use super::super::output::{self, Format};
use super::super::post_file::{self, PostFile};
use super::super::{parse_ledger_code, ToolError};
use super::args::PostArgs;
use super::{posted_json, print_posted, print_text, required_key, Failure, KEY_WHY};
use ledger_server::grpc::convert::time_to_pb;
use ledger_server::grpc::pb;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::PathBuf;

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

/// The ledger of the postings of a file: `--ledger` (or `LEDGER_LEDGER`), or the one the file
/// names (in its requests' `ledger`, or its PostBatchRequest's), `default` when neither
/// names one. Refused: a file naming several ledgers (a PostBatch writes one), or one other
/// than `--ledger`'s, or a code the ledger would refuse.
fn file_ledger<'a>(
    flag: Option<&str>,
    named: impl IntoIterator<Item = &'a str>,
) -> Result<String, Failure> {
    let named: BTreeSet<&str> = named.into_iter().filter(|l| !l.is_empty()).collect();
    let mut named = named.into_iter();
    let (file, other) = (named.next(), named.next());
    if let (Some(a), Some(b)) = (file, other) {
        return Err(Failure::Usage(format!(
            "the --file names the ledgers {a:?} and {b:?}: a PostBatch writes one ledger; name it in --ledger or in the file, once"
        )));
    }
    match (flag, file) {
        (Some(f), Some(file)) if f != file => Err(Failure::Usage(format!(
            "--ledger {f:?} (or LEDGER_LEDGER) and the --file's ledger {file:?} differ: give one of them"
        ))),
        (Some(f), _) => Ok(f.to_owned()),
        (None, Some(file)) => parse_ledger_code(file)
            .map_err(|e| Failure::Usage(format!("the --file's ledger: {e}"))),
        (None, None) => Ok(ledger_core::ledger::DEFAULT_LEDGER.to_owned()),
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

/// What `ledger post` sends: one posting, or a file's list of them as one `PostBatch` (whose
/// requests name its ledger too).
#[derive(Debug, Clone, PartialEq)]
pub enum PostPlan {
    One(pb::PostRequest),
    Batch(pb::PostBatchRequest),
}

/// The request(s) `ledger post` sends, or the mistake in its arguments.
pub fn post_plan(a: &PostArgs) -> Result<PostPlan, Failure> {
    let Some(path) = &a.file else {
        let key = required_key(&a.key, "post")?;
        let req = pb::PostRequest {
            ledger: a.common.ledger.code(),
            idempotency_key: key,
            legs: a.legs.clone(),
            ..Default::default()
        };
        return Ok(PostPlan::One(with_flags(a, req)));
    };
    let (what, text) = read_file(path)?;
    let flag = a.common.ledger.given();
    match post_file::parse(&what, &text).map_err(Failure::Usage)? {
        PostFile::One(mut req) => {
            req.idempotency_key = file_key(&a.key, &req.idempotency_key)?;
            req.ledger = file_ledger(flag, [req.ledger.as_str()])?;
            Ok(PostPlan::One(with_flags(a, req)))
        }
        PostFile::Batch {
            ledger,
            mut requests,
        } => {
            refuse_flags_for_one(a)?;
            let named = requests.iter().map(|r| r.ledger.as_str());
            let ledger = file_ledger(flag, named.chain([ledger.as_str()]))?;
            for r in &mut requests {
                r.ledger.clone_from(&ledger);
            }
            Ok(PostPlan::Batch(pb::PostBatchRequest { ledger, requests }))
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
    req.conditions.extend(a.conditions());
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
        ("--if-last-sequence", !a.if_last_sequence.is_empty()),
        ("--if-available", !a.if_available.is_empty()),
    ];
    let given: Vec<&str> = given.iter().filter(|(_, g)| *g).map(|(f, _)| *f).collect();
    if given.is_empty() {
        return Ok(());
    }
    Err(Failure::Usage(format!(
        "{} apply to one posting; the --file holds a list of requests, sent as one PostBatch: give the idempotencyKey, memo, effectiveAt, metadata, hold, holdExpiresAt and conditions in each request",
        given.join(", ")
    )))
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
        PostPlan::Batch(batch) => {
            let n = batch.requests.len();
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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_files_ledger_is_used_without_ledger_and_two_different_ledgers_are_refused() {
        let usage = |r: Result<String, Failure>| match r {
            Err(Failure::Usage(e)) => e,
            other => panic!("a usage error, not {other:?}"),
        };
        assert_eq!(file_ledger(None, ["", ""]).unwrap(), "default");
        assert_eq!(file_ledger(None, ["acme", "", "acme"]).unwrap(), "acme");
        assert_eq!(file_ledger(Some("acme"), [""]).unwrap(), "acme");
        assert_eq!(file_ledger(Some("acme"), ["acme"]).unwrap(), "acme");
        let e = usage(file_ledger(Some("acme"), ["globex"]));
        assert!(
            e.contains("\"acme\"") && e.contains("\"globex\"") && e.contains("differ"),
            "{e}"
        );
        let e = usage(file_ledger(None, ["acme", "globex"]));
        assert!(e.contains("writes one ledger"), "{e}");
        let e = usage(file_ledger(None, ["Not A Code"]));
        assert!(e.contains("MAX_LEDGER_CODE_CHARS"), "{e}");
    }
}
