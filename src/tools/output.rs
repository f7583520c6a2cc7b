//! How the client tools print the ledger's answers: `table` for people (aligned columns for a
//! list; for a single record a line per field it has, its name then its value, aligned, nested
//! names flattened, unset fields left out), `json` for programs, in the proto3 JSON mapping
//! that grpcurl prints (lowerCamelCase names, 64-bit integers and enums as strings, times in
//! RFC 3339, default values included); and [`print_out`], how every tool writes to stdout.

use super::show_ts;
use ledger_server::grpc::pb;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::io::Write as _;

/// How to print.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// For people: aligned columns for a list; for one record, a line per field it has (its
    /// name, then its value; unset fields left out).
    #[default]
    Table,
    /// For programs: one JSON object (proto3 JSON names, as grpcurl prints them).
    Json,
}

fn direction(d: i32) -> &'static str {
    pb::Direction::try_from(d).map_or("DIRECTION_UNSPECIFIED", |d| d.as_str_name())
}

fn normal(n: i32) -> &'static str {
    pb::NormalBalance::try_from(n).map_or("NORMAL_BALANCE_UNSPECIFIED", |n| n.as_str_name())
}

fn metadata(m: &std::collections::HashMap<String, String>) -> Value {
    let sorted: std::collections::BTreeMap<_, _> = m.iter().collect();
    json!(sorted)
}

fn status(s: i32) -> &'static str {
    pb::AccountStatus::try_from(s).map_or("ACCOUNT_STATUS_UNSPECIFIED", |s| s.as_str_name())
}

/// An account's status as its flag names it (`open`, `frozen`, `closed`), for tables.
pub fn status_word(s: i32) -> &'static str {
    match pb::AccountStatus::try_from(s) {
        Ok(pb::AccountStatus::Open) => "open",
        Ok(pb::AccountStatus::Frozen) => "frozen",
        Ok(pb::AccountStatus::Closed) => "closed",
        _ => "unspecified",
    }
}

/// Debit limits as `--debit-limit` takes them, comma-separated (`500.00/86400,…`); empty when
/// there are none.
pub fn debit_limits_text(limits: &[pb::DebitLimit]) -> String {
    let each: Vec<String> = limits
        .iter()
        .map(|l| format!("{}/{}", l.amount, l.window_seconds))
        .collect();
    each.join(",")
}

fn version_info_json(i: &pb::AccountVersionInfo) -> Value {
    json!({
        "recordedAt": show_ts(&i.recorded_at),
        "afterSequence": i.after_sequence.to_string(),
        "caller": i.caller,
        "reason": i.reason,
        "changed": i.changed,
        "idempotencyKey": i.idempotency_key,
    })
}

/// An account: its attributes, and the version of its terms with that version's facts.
pub fn account_json(a: &pb::Account) -> Value {
    let limits: Vec<Value> = a
        .debit_limits
        .iter()
        .map(|l| json!({ "amount": l.amount, "windowSeconds": l.window_seconds }))
        .collect();
    json!({
        "code": a.code,
        "currency": a.currency,
        "scale": a.scale,
        "normalBalance": normal(a.normal_balance),
        "allowNegative": a.allow_negative,
        "metadata": metadata(&a.metadata),
        "createdAt": show_ts(&a.created_at),
        "ledger": a.ledger,
        "version": a.version.to_string(),
        "status": status(a.status),
        "balanceFloor": a.balance_floor,
        "balanceCeiling": a.balance_ceiling,
        "debitLimits": limits,
        "versionInfo": a.version_info.as_ref().map_or(Value::Null, version_info_json),
    })
}

pub fn ledger_json(l: &pb::LedgerInfo) -> Value {
    json!({
        "code": l.code,
        "description": l.description,
        "metadata": metadata(&l.metadata),
        "createdAt": show_ts(&l.created_at),
        "cluster": l.cluster,
    })
}

fn leg_json(l: &pb::Leg) -> Value {
    json!({ "account": l.account, "direction": direction(l.direction), "amount": l.amount })
}

pub fn posting_json(p: &pb::Posting) -> Value {
    json!({
        "postingId": p.posting_id,
        "sequence": p.sequence.to_string(),
        "idempotencyKey": p.idempotency_key,
        "legs": p.legs.iter().map(leg_json).collect::<Vec<_>>(),
        "effectiveAt": show_ts(&p.effective_at),
        "recordedAt": show_ts(&p.recorded_at),
        "memo": p.memo,
        "metadata": metadata(&p.metadata),
        "voidsPostingId": p.voids_posting_id,
        "voidedByPostingId": p.voided_by_posting_id,
        "voidReason": p.void_reason,
        "caller": p.caller,
        "hold": p.hold,
        "holdExpiresAt": show_ts(&p.hold_expires_at),
        "holdStatus": pb::HoldStatus::try_from(p.hold_status).map_or("HOLD_STATUS_UNSPECIFIED", |s| s.as_str_name()),
        "capturedByPostingId": p.captured_by_posting_id,
        "releasedByPostingId": p.released_by_posting_id,
        "capturesHoldPostingId": p.captures_hold_posting_id,
        "releasesHoldPostingId": p.releases_hold_posting_id,
        "kind": pb::PostingKind::try_from(p.kind).map_or("POSTING_KIND_UNSPECIFIED", |k| k.as_str_name()),
        "ledger": p.ledger,
    })
}

pub fn balance_json(b: &pb::Balance) -> Value {
    let as_of = b.as_of.unwrap_or_default();
    json!({
        "account": b.account,
        "currency": b.currency,
        "debits": b.debits,
        "credits": b.credits,
        "balance": b.balance,
        "heldDebits": b.held_debits,
        "heldCredits": b.held_credits,
        "available": b.available,
        "asOfSequence": b.as_of_sequence.to_string(),
        "lastSequence": b.last_sequence.to_string(),
        "asOf": { "recordedAt": show_ts(&as_of.recorded_at), "effectiveAt": show_ts(&as_of.effective_at) },
    })
}

/// A JSON object with one more field.
pub fn with(mut v: Value, key: &str, value: Value) -> Value {
    if let Value::Object(m) = &mut v {
        m.insert(key.to_owned(), value);
    }
    v
}

/// A single record as lines of a field's name and value, aligned, nested values flattened
/// (`legs[0].amount`); only the fields it has ([`shown`]).
pub fn fields(v: &Value) -> String {
    let mut out = String::new();
    let mut lines: Vec<(String, String)> = Vec::new();
    flatten("", v, &mut lines);
    let width = lines.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in lines {
        let _ = writeln!(out, "{k:width$}  {v}");
    }
    out
}

fn flatten(name: &str, v: &Value, out: &mut Vec<(String, String)>) {
    let join = |k: &str| {
        if name.is_empty() {
            k.to_owned()
        } else {
            format!("{name}.{k}")
        }
    };
    match v {
        Value::Object(m) => {
            for (k, v) in m.iter().filter(|(k, v)| shown(k, v)) {
                flatten(&join(k), v, out);
            }
        }
        Value::Array(a) => {
            for (i, item) in a.iter().enumerate() {
                flatten(&format!("{name}[{i}]"), item, out);
            }
        }
        Value::String(s) => out.push((name.to_owned(), s.clone())),
        other => out.push((name.to_owned(), other.to_string())),
    }
}

/// Whether a record's field gets a line: not when it is unset (an empty text, map or list,
/// an enum left `…_UNSPECIFIED`, a null), nor a posting's `hold: false`, which its `kind`
/// already says.
fn shown(name: &str, v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::String(s) => !s.is_empty() && !is_unspecified(s),
        Value::Object(m) => !m.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Bool(false) => name != "hold",
        _ => true,
    }
}

/// An enum value left unset in the proto3 JSON mapping (`HOLD_STATUS_UNSPECIFIED`).
fn is_unspecified(s: &str) -> bool {
    s.ends_with("_UNSPECIFIED") && s.chars().all(|c| c.is_ascii_uppercase() || c == '_')
}

/// Rows as aligned columns, the first row being the header.
pub fn columns(rows: &[Vec<String>]) -> String {
    aligned(rows, &[], &[])
}

/// Rows as aligned columns, two spaces apart: those at the indices `right` right-aligned, a
/// rule of dashes before each row whose index is in `rules` (after the last row for the
/// index `rows.len()`).
pub fn aligned<R: AsRef<[String]>>(rows: &[R], right: &[usize], rules: &[usize]) -> String {
    let n = rows.iter().map(|r| r.as_ref().len()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.as_ref().get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
    let rule = format!("{}\n", rule.join("  "));
    let mut out = String::new();
    for (i, r) in rows.iter().enumerate() {
        if rules.contains(&i) {
            out.push_str(&rule);
        }
        let line: Vec<String> = r
            .as_ref()
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (s, w))| match right.contains(&c) {
                true => format!("{s:>w$}"),
                false => format!("{s:<w$}"),
            })
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    if rules.contains(&rows.len()) {
        out.push_str(&rule);
    }
    out
}

/// Pretty JSON with a final newline.
pub fn json_text(v: &Value) -> String {
    format!(
        "{}\n",
        serde_json::to_string_pretty(v).expect("JSON of plain values")
    )
}

/// Writes a command's output to stdout. A reader that stopped reading (`ledger report … |
/// head -3`) closed the pipe: the rest is dropped without a word and the command ends with the
/// status it would have had, as for a reader that read it all. Any other failure to write (say
/// a full disk under `> file`) is an error.
///
/// Why not the default SIGPIPE disposition, as C tools have: a client's sockets would raise it
/// too (a vectored write to a connection its peer closed), killing `check` or `bench` without
/// the error they report; Rust ignores SIGPIPE so such writes fail with an error instead.
pub fn print_out(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_prints_as_aligned_field_lines_with_nested_values_flattened() {
        let v = json!({ "a": "1", "legs": [{ "x": "y" }], "m": {}, "n": 5 });
        assert_eq!(fields(&v), "a          1\nlegs[0].x  y\nn          5\n");
        assert_eq!(
            columns(&[
                vec!["A".into(), "BB".into()],
                vec!["ccc".into(), "d".into()]
            ]),
            "A    BB\nccc  d\n"
        );
    }

    #[test]
    fn a_record_leaves_out_what_is_unset_and_a_postings_hold_false() {
        let v = json!({
            "p": { "memo": "", "metadata": {}, "legs": [], "hold": false, "holdStatus": "HOLD_STATUS_UNSPECIFIED",
                   "kind": "POSTING_KIND_POSTING", "sequence": "3" },
            "replayed": false, "allowNegative": false, "none": null,
        });
        assert_eq!(
            fields(&v),
            "p.kind         POSTING_KIND_POSTING\np.sequence     3\nreplayed       false\nallowNegative  false\n"
        );
    }
}
