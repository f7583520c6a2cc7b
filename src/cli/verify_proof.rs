//! `ledger verify-proof`: checks, offline (no server, no database), an inclusion or a
//! consistency proof as grpcurl prints `GetInclusionProof`'s or `GetConsistencyProof`'s
//! answer, against a digest the auditor holds; and, given `GetPosting`'s answer, recomputes
//! the posting's hash itself (docs/verifiable.md), so nothing the server says is trusted.
//! Exit 0 verified, 1 not verified (it says what did not match), 2 bad input.

use super::verify::parse_digest;
use crate::tools::output::print_out;
use ledger_core::journal::{self, from_hex, to_hex, Hash, PostingAtRecording, GENESIS};
use ledger_core::record::{PostedLeg, PostingKind};
use ledger_core::{Amount, Direction, Metadata};
use ledger_server::grpc::pb;
use ledger_server::storage::verify::HeldDigest;
use serde_json::{Map, Value};
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use time::OffsetDateTime;
use uuid::Uuid;

/// `ledger verify-proof`'s options.
#[derive(clap::Args, Debug)]
pub(super) struct VerifyProofArgs {
    /// The digest you hold (SEQ:ROOT, from GetDigest or the ledger.digests.<ledger> events,
    /// kept outside the ledger): an inclusion proof must be of that tree; a consistency proof
    /// must start from it.
    #[arg(long, value_name = "SEQ:ROOT", value_parser = parse_digest)]
    digest: HeldDigest,
    /// A consistency proof only: the later digest it must end at (SEQ:ROOT). Without it, the
    /// digest the proof proves is printed, to keep.
    #[arg(long, value_name = "SEQ:ROOT", value_parser = parse_digest)]
    to: Option<HeldDigest>,
    /// An inclusion proof only: GetPosting's answer for the posting (grpcurl's JSON; `-`:
    /// standard input). Its hash is recomputed from its fields and must be the proof's.
    #[arg(long, value_name = "FILE")]
    posting: Option<PathBuf>,
    /// With --posting: the hash of the posting before it in its ledger (64 hex digits; for
    /// sequence 1, 32 zero bytes, the default there).
    #[arg(long, value_name = "HEX", value_parser = parse_hash, requires = "posting")]
    prev_hash: Option<Hash>,
    /// The proof: the JSON grpcurl prints for GetInclusionProof or GetConsistencyProof
    /// (`-`: standard input).
    #[arg(value_name = "FILE")]
    file: PathBuf,
}

fn parse_hash(text: &str) -> Result<Hash, String> {
    from_hex(text)
}

/// What was checked: `Ok` the report of what was verified, `Err` what did not match.
type Checked = Result<String, String>;

/// `ledger verify-proof`: 0 verified, 1 not verified, 2 bad input (said on stderr).
pub(super) fn verify_proof_command(args: VerifyProofArgs) -> ExitCode {
    let (text, code) = match check(&args) {
        Ok(Ok(report)) => (report, ExitCode::SUCCESS),
        Ok(Err(why)) => (format!("NOT verified: {why}\n"), ExitCode::FAILURE),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "ledger verify-proof: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = print_out(&text) {
        let _ = writeln!(
            std::io::stderr(),
            "ledger verify-proof: cannot write to stdout: {e}"
        );
        return ExitCode::from(2);
    }
    code
}

/// Reads the proof and checks it as the kind it is; `Err`: bad input.
fn check(args: &VerifyProofArgs) -> Result<Checked, String> {
    if args.posting.as_deref() == Some(Path::new("-")) && args.file == Path::new("-") {
        return Err("the proof and --posting cannot both be read from standard input".into());
    }
    let map = read_json(&args.file)?;
    let proof = Obj::new(describe(&args.file), &map);
    let inclusion = ["postingHash", "leafIndex", "treeSize"]
        .iter()
        .any(|k| proof.field(k).is_some());
    let consistency = ["fromSequence", "toSequence", "fromRoot", "toRoot"]
        .iter()
        .any(|k| proof.field(k).is_some());
    match (inclusion, consistency) {
        (true, false) => inclusion_proof(args, &proof),
        (false, true) => consistency_proof(args, &proof),
        _ => Err(format!(
            "{} is neither an InclusionProof (leafIndex, treeSize, root, proof, postingHash) \
             nor a ConsistencyProof (fromSequence, toSequence, fromRoot, toRoot, proof) as \
             grpcurl prints them",
            proof.what
        )),
    }
}

/// Checks an inclusion proof against the held digest (and the posting, with --posting).
fn inclusion_proof(args: &VerifyProofArgs, proof: &Obj) -> Result<Checked, String> {
    if args.to.is_some() {
        return Err(format!(
            "--to is for a consistency proof; {} is an inclusion proof",
            proof.what
        ));
    }
    let leaf = proof.u64("leafIndex")?.unwrap_or(0);
    let size = proof.u64("treeSize")?.unwrap_or(0);
    let root = proof.hash("root")?;
    let path = proof.hashes("proof")?;
    let posting_hash = proof.hash("postingHash")?;
    let held = args.digest;
    if size != held.size {
        return Ok(Err(format!(
            "the proof is of the tree of size {size}, the digest you hold of size {}: ask for \
             the proof in your digest's tree (GetInclusionProof's digestSequence {})",
            held.size, held.size
        )));
    }
    if root != held.root {
        return Ok(Err(format!(
            "the proof's root {} is not the root of the digest you hold, {}: the tree of size {size} \
             the server proves against is not the one you hold a digest of",
            to_hex(&root),
            to_hex(&held.root)
        )));
    }
    let mut report = String::new();
    if let Some(file) = &args.posting {
        let (sequence, recomputed) = recompute(file, args.prev_hash)?;
        if sequence != leaf + 1 {
            return Ok(Err(format!(
                "the posting is sequence {sequence}, the proof is of leaf {leaf} (sequence {})",
                leaf + 1
            )));
        }
        if recomputed != posting_hash {
            return Ok(Err(format!(
                "the hash recomputed from {}, {}, is not the proof's postingHash {}",
                describe(file),
                to_hex(&recomputed),
                to_hex(&posting_hash)
            )));
        }
        report.push_str(&format!(
            "verified: the hash of posting {sequence} recomputed from {} is the proof's, {}\n",
            describe(file),
            to_hex(&recomputed)
        ));
    }
    if let Err(e) = journal::verify_inclusion(leaf, size, &posting_hash, &path, &held.root) {
        return Ok(Err(format!(
            "the audit path does not prove the posting: {e}"
        )));
    }
    report.push_str(&format!(
        "verified: the posting of sequence {} (hash {}) is in the tree of size {size} of the \
         digest you hold, {held}\n",
        leaf + 1,
        to_hex(&posting_hash)
    ));
    Ok(Ok(report))
}

/// Checks a consistency proof from the held digest (to --to's, when given) and prints the
/// digest it proves.
fn consistency_proof(args: &VerifyProofArgs, proof: &Obj) -> Result<Checked, String> {
    if args.posting.is_some() {
        return Err(format!(
            "--posting is for an inclusion proof; {} is a consistency proof",
            proof.what
        ));
    }
    let from = proof.u64("fromSequence")?.unwrap_or(0);
    let to = proof.u64("toSequence")?.unwrap_or(0);
    let from_root = proof.hash("fromRoot")?;
    let to_root = proof.hash("toRoot")?;
    let path = proof.hashes("proof")?;
    let (held, new) = (
        args.digest,
        HeldDigest {
            size: to,
            root: to_root,
        },
    );
    if from != held.size || from_root != held.root {
        return Ok(Err(format!(
            "the proof starts from the digest {}, not from the one you hold, {held}",
            HeldDigest {
                size: from,
                root: from_root
            }
        )));
    }
    if let Some(want) = args.to.filter(|w| *w != new) {
        return Ok(Err(format!(
            "the proof ends at the digest {new}, not at --to's {want}"
        )));
    }
    if let Err(e) = journal::verify_consistency(from, to, &held.root, &to_root, &path) {
        return Ok(Err(format!(
            "the proof does not show that the tree of size {to} extends the one you hold: {e}"
        )));
    }
    Ok(Ok(format!(
        "verified: the tree of size {to} extends the tree of size {from} you hold ({held})\n\
         proven digest {new}: keep it, and check the next consistency proof from it\n"
    )))
}

/// How a file is named in messages.
fn describe(path: &Path) -> String {
    if path == Path::new("-") {
        "standard input".into()
    } else {
        path.display().to_string()
    }
}

/// A file's (or standard input's) JSON object.
fn read_json(path: &Path) -> Result<Map<String, Value>, String> {
    let what = describe(path);
    let text = if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| format!("cannot read {what}: {e}"))?;
        text
    } else {
        std::fs::read_to_string(path).map_err(|e| format!("cannot read {what}: {e}"))?
    };
    match serde_json::from_str(&text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(format!(
            "{what} holds a JSON {}, not an object as grpcurl prints an answer",
            json_type(&other)
        )),
        Err(e) => Err(format!("{what} is not JSON: {e}")),
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A JSON object read in the proto3 JSON mapping: a field by its lowerCamelCase name or its
/// proto name, `null` or absent as the field's default.
struct Obj<'a> {
    what: String,
    map: &'a Map<String, Value>,
}

impl<'a> Obj<'a> {
    fn new(what: String, map: &'a Map<String, Value>) -> Obj<'a> {
        Obj { what, map }
    }

    fn field(&self, camel: &str) -> Option<&'a Value> {
        let snake: String = camel
            .chars()
            .flat_map(|c| match c.is_ascii_uppercase() {
                true => vec!['_', c.to_ascii_lowercase()],
                false => vec![c],
            })
            .collect();
        self.map
            .get(camel)
            .or_else(|| self.map.get(&snake))
            .filter(|v| !v.is_null())
    }

    fn bad(&self, name: &str, want: &str, got: &Value) -> String {
        format!("{}: {name} must be {want}, got {got}", self.what)
    }

    /// A uint64: a JSON number or a string of digits.
    fn u64(&self, name: &str) -> Result<Option<u64>, String> {
        let want = "an unsigned 64-bit integer (a JSON number or a string of digits)";
        match self.field(name) {
            None => Ok(None),
            Some(v @ Value::Number(n)) => {
                n.as_u64().map(Some).ok_or_else(|| self.bad(name, want, v))
            }
            Some(v @ Value::String(s))
                if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) =>
            {
                s.parse().map(Some).map_err(|_| self.bad(name, want, v))
            }
            Some(v) => Err(self.bad(name, want, v)),
        }
    }

    /// A string; `None` when absent or empty (proto3's default).
    fn str(&self, name: &str) -> Result<Option<&'a str>, String> {
        match self.field(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str()).filter(|s| !s.is_empty())),
            Some(v) => Err(self.bad(name, "a string", v)),
        }
    }

    fn string(&self, name: &str) -> Result<String, String> {
        Ok(self.str(name)?.unwrap_or_default().to_owned())
    }

    /// A required hash (64 hex digits).
    fn hash(&self, name: &str) -> Result<Hash, String> {
        let text = self
            .str(name)?
            .ok_or_else(|| format!("{}: {name} is missing (a hash of 64 hex digits)", self.what))?;
        from_hex(text).map_err(|e| format!("{}: {name}: {e}", self.what))
    }

    /// A list of hashes (absent: empty).
    fn hashes(&self, name: &str) -> Result<Vec<Hash>, String> {
        let Some(v) = self.field(name) else {
            return Ok(Vec::new());
        };
        let Value::Array(items) = v else {
            return Err(self.bad(name, "a list of hashes", v));
        };
        let each = |(i, h): (usize, &Value)| match h.as_str() {
            Some(s) => from_hex(s).map_err(|e| format!("{}: {name}[{i}]: {e}", self.what)),
            None => Err(self.bad(&format!("{name}[{i}]"), "a hash of 64 hex digits", h)),
        };
        items.iter().enumerate().map(each).collect()
    }

    fn uuid(&self, name: &str) -> Result<Option<Uuid>, String> {
        self.str(name)?
            .map(|s| Uuid::parse_str(s).map_err(|e| format!("{}: {name} {s:?}: {e}", self.what)))
            .transpose()
    }

    /// A google.protobuf.Timestamp: an RFC 3339 string.
    fn time(&self, name: &str) -> Result<Option<OffsetDateTime>, String> {
        let rfc3339 = &time::format_description::well_known::Rfc3339;
        self.str(name)?
            .map(|s| {
                OffsetDateTime::parse(s, rfc3339).map_err(|e| {
                    format!("{}: {name} {s:?} is not an RFC 3339 time: {e}", self.what)
                })
            })
            .transpose()
    }

    fn required<T>(&self, name: &str, v: Option<T>) -> Result<T, String> {
        v.ok_or_else(|| format!("{}: {name} is missing", self.what))
    }
}

/// A posting's facts at its recording, owned, as read from GetPosting's JSON.
struct Recorded {
    ledger: String,
    sequence: u64,
    posting_id: Uuid,
    caller: String,
    idempotency_key: String,
    effective_at: OffsetDateTime,
    recorded_at: OffsetDateTime,
    memo: String,
    metadata: Metadata,
    legs: Vec<PostedLeg>,
    kind: PostingKind,
    voids_posting_id: Option<Uuid>,
    void_reason: String,
    hold_expires_at: Option<OffsetDateTime>,
    closes_hold: Option<Uuid>,
}

/// The posting of GetPosting's JSON in `file`: its sequence and its recomputed hash.
fn recompute(file: &Path, prev: Option<Hash>) -> Result<(u64, Hash), String> {
    let map = read_json(file)?;
    posting_hash(&Obj::new(describe(file), &map), prev)
}

/// The sequence and the recomputed hash of the posting GetPosting's JSON `p` holds, after the
/// posting of hash `prev` (none: 32 zero bytes, for sequence 1 only).
fn posting_hash(p: &Obj, prev: Option<Hash>) -> Result<(u64, Hash), String> {
    let r = recorded(p)?;
    let prev = match (prev, r.sequence) {
        (Some(h), _) => h,
        (None, 1) => GENESIS,
        (None, n) => {
            return Err(format!(
                "--prev-hash is required with --posting for posting {n}: the hash of posting {} \
                 of the ledger (its GetPosting hash, or the one you recomputed)",
                n - 1
            ))
        }
    };
    let at = PostingAtRecording {
        sequence: r.sequence,
        posting_id: r.posting_id,
        caller: &r.caller,
        idempotency_key: &r.idempotency_key,
        effective_at: r.effective_at,
        recorded_at: r.recorded_at,
        memo: &r.memo,
        metadata: &r.metadata,
        legs: &r.legs,
        kind: r.kind,
        voids_posting_id: r.voids_posting_id,
        void_reason: r.voids_posting_id.map(|_| r.void_reason.as_str()),
        hold_expires_at: r.hold_expires_at,
        closes_hold: r.closes_hold,
    };
    Ok((r.sequence, journal::posting_hash(&r.ledger, &prev, &at)))
}

/// Reads the fields the hash covers, as docs/verifiable.md says each is read.
fn recorded(p: &Obj) -> Result<Recorded, String> {
    let kind = kind(p)?;
    let (captures, releases) = (
        p.uuid("capturesHoldPostingId")?,
        p.uuid("releasesHoldPostingId")?,
    );
    let closes_hold = match kind {
        PostingKind::Capture if releases.is_none() => captures,
        PostingKind::Release | PostingKind::Expiry if captures.is_none() => releases,
        _ if captures.is_none() && releases.is_none() => None,
        _ => {
            return Err(format!(
                "{}: a posting of kind {kind:?} names the hold it captures or releases in the \
                 wrong field (capturesHoldPostingId is a capture's, releasesHoldPostingId a \
                 release's or an expiry's)",
                p.what
            ))
        }
    };
    let hold_expires_at = p.time("holdExpiresAt")?;
    if hold_expires_at.is_some() && kind != PostingKind::Hold {
        return Err(format!(
            "{}: holdExpiresAt on a posting of kind {kind:?}: only a hold has one",
            p.what
        ));
    }
    let sequence = p.required("sequence", p.u64("sequence")?.filter(|n| *n > 0))?;
    Ok(Recorded {
        ledger: p.str("ledger")?.unwrap_or("default").to_owned(),
        sequence,
        posting_id: p.required("postingId", p.uuid("postingId")?)?,
        caller: p.string("caller")?,
        idempotency_key: p.string("idempotencyKey")?,
        effective_at: p.required("effectiveAt", p.time("effectiveAt")?)?,
        recorded_at: p.required("recordedAt", p.time("recordedAt")?)?,
        memo: p.string("memo")?,
        metadata: metadata(p)?,
        legs: legs(p)?,
        kind,
        voids_posting_id: p.uuid("voidsPostingId")?,
        void_reason: p.string("voidReason")?,
        hold_expires_at,
        closes_hold,
    })
}

/// The contract's `PostingKind`, by name or number.
fn kind(p: &Obj) -> Result<PostingKind, String> {
    let v = p.required("kind", p.field("kind"))?;
    let contract = match v {
        Value::String(s) => pb::PostingKind::from_str_name(s),
        Value::Number(n) => n
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .and_then(|n| pb::PostingKind::try_from(n).ok()),
        _ => None,
    };
    Ok(match contract {
        Some(pb::PostingKind::Posting) => PostingKind::Posting,
        Some(pb::PostingKind::Hold) => PostingKind::Hold,
        Some(pb::PostingKind::Capture) => PostingKind::Capture,
        Some(pb::PostingKind::Release) => PostingKind::Release,
        Some(pb::PostingKind::Expiry) => PostingKind::Expiry,
        Some(pb::PostingKind::Void) => PostingKind::Void,
        Some(pb::PostingKind::Unspecified) | None => {
            return Err(p.bad(
                "kind",
                "a PostingKind (POSTING_KIND_POSTING, _HOLD, _CAPTURE, _RELEASE, _EXPIRY, _VOID)",
                v,
            ))
        }
    })
}

/// The metadata: an object of strings.
fn metadata(p: &Obj) -> Result<Metadata, String> {
    let Some(v) = p.field("metadata") else {
        return Ok(Metadata::new());
    };
    let Value::Object(entries) = v else {
        return Err(p.bad("metadata", "an object of strings", v));
    };
    entries
        .iter()
        .map(|(k, v)| match v.as_str() {
            Some(s) => Ok((k.clone(), s.to_owned())),
            None => Err(p.bad(&format!("metadata[{k:?}]"), "a string", v)),
        })
        .collect()
}

/// The legs, in their order: account, direction, and the amount exactly as shown.
fn legs(p: &Obj) -> Result<Vec<PostedLeg>, String> {
    let Some(v) = p.field("legs") else {
        return Ok(Vec::new());
    };
    let Value::Array(items) = v else {
        return Err(p.bad("legs", "a list of legs", v));
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Value::Object(map) = item else {
            return Err(p.bad(&format!("legs[{i}]"), "an object", item));
        };
        let leg = Obj::new(format!("{}: legs[{i}]", p.what), map);
        let direction = leg.required("direction", leg.field("direction"))?;
        let direction = match direction.as_str().and_then(pb::Direction::from_str_name) {
            Some(pb::Direction::Debit) => Direction::Debit,
            Some(pb::Direction::Credit) => Direction::Credit,
            _ if direction.as_u64() == Some(pb::Direction::Debit as u64) => Direction::Debit,
            _ if direction.as_u64() == Some(pb::Direction::Credit as u64) => Direction::Credit,
            _ => {
                return Err(leg.bad(
                    "direction",
                    "DIRECTION_DEBIT or DIRECTION_CREDIT",
                    direction,
                ))
            }
        };
        let amount = leg.required("amount", leg.str("amount")?)?;
        out.push(PostedLeg {
            account: leg.string("account")?,
            direction,
            amount: shown_amount(&leg, amount)?,
        });
    }
    Ok(out)
}

/// An amount as GetPosting shows it (at its account's scale: as many decimals as shown),
/// refused unless it renders back exactly as shown: the hash covers the rendering.
fn shown_amount(leg: &Obj, text: &str) -> Result<Amount, String> {
    let decimals = text.split_once('.').map_or(0, |(_, d)| d.len());
    let scale = u8::try_from(decimals)
        .ok()
        .filter(|s| u32::from(*s) <= ledger_core::limits::MAX_SCALE);
    let amount = scale.and_then(|s| {
        let minor = ledger_core::amount::parse_minor(text, s).ok()?;
        Some(Amount::from_minor(minor, s))
    });
    match amount {
        Some(a) if a.to_string() == text => Ok(a),
        _ => Err(format!(
            "{}: amount {text:?} is not a decimal as GetPosting shows amounts (digits, and \
             the account's scale of decimals after a point, at most {})",
            leg.what,
            ledger_core::limits::MAX_SCALE
        )),
    }
}
