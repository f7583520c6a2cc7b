//! `ledger verify`: every ledger's posting hashes, tree nodes, digest roots and chain
//! recomputed from the journal alone and compared with the stored ones, and the digests the
//! auditor holds confirmed (docs/verifiable.md). Exit 0 when all match, 1 on a mismatch or a
//! digest not confirmed, 2 when it cannot run.

use super::args::CheckDbArgs;
use super::database::{database, stop_embedded, Holding};
use crate::tools::output::print_out;
use ledger_core::journal::{from_hex, to_hex};
use ledger_server::storage::verify::{self as store, DigestOutcome, HeldDigest, Verified};
use ledger_server::BoxError;
use std::io::Write as _;
use std::process::ExitCode;

/// `ledger verify`'s options.
#[derive(clap::Args, Debug)]
pub(super) struct VerifyArgs {
    #[command(flatten)]
    db: CheckDbArgs,
    /// Verify one ledger instead of every ledger.
    #[arg(long)]
    ledger: Option<String>,
    /// A digest you hold from elsewhere (GetDigest, the ledger.digests.<ledger> events), as
    /// SEQ:ROOT: the root of the tree of the first SEQ postings recomputed from the journal
    /// must be ROOT (64 hex digits). Repeatable. Needs --ledger unless the database has one
    /// ledger.
    #[arg(long, value_name = "SEQ:ROOT", value_parser = parse_digest)]
    digest: Vec<HeldDigest>,
}

/// A digest as `--digest` takes it: `SEQ:ROOT`, the tree's size and its root in hex.
pub(super) fn parse_digest(text: &str) -> Result<HeldDigest, String> {
    let form = "a digest is SEQ:ROOT, the tree's size (the digest's sequence), a colon and its \
                root in 64 hex digits, e.g. 12:8b7535d816067c5e6417a1288dec92dfc1235490ef2ffd45ffafba19f3c3ec31";
    let Some((size, root)) = text.split_once(':') else {
        return Err(format!("{text:?} has no colon: {form}"));
    };
    if size.is_empty() || !size.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "the size {size:?} of {text:?} is not a number of digits: {form}"
        ));
    }
    let size = size
        .parse()
        .map_err(|e| format!("the size {size:?} of {text:?}: {e}"))?;
    let root = from_hex(root).map_err(|e| format!("the root of {text:?}: {e}: {form}"))?;
    Ok(HeldDigest { size, root })
}

/// `ledger verify`: 0 when everything matches, 1 on a mismatch or a digest not confirmed, 2
/// when it could not run (it says why on stderr).
pub(super) async fn verify_command(args: VerifyArgs) -> ExitCode {
    let VerifyArgs { db, ledger, digest } = args;
    let result = async {
        let clusters = db.clusters.clone();
        if !clusters.is_empty() && ledger.is_none() && !digest.is_empty() {
            return Err(
                "--digest needs --ledger when clusters are named: a digest is of one \
                        ledger, on one cluster"
                    .into(),
            );
        }
        let (url, pg) = database(&db.into(), "verify", Holding::OrBorrow).await?;
        let (ledger, digest) = (ledger.as_deref(), &digest);
        let result = super::clusters::each(&url, &clusters, ledger, |url| async move {
            verify(&url, ledger, digest).await
        })
        .await;
        stop_embedded(pg).await?;
        result
    }
    .await;
    result.unwrap_or_else(|e| {
        let _ = writeln!(
            std::io::stderr(),
            "ledger verify could not run: {}",
            ledger_client::chain(&*e)
        );
        ExitCode::from(2)
    })
}

fn print(text: &str) -> Result<(), BoxError> {
    print_out(text).map_err(|e| format!("cannot write to stdout: {e}").into())
}

/// Verifies the ledgers (one, or every one) and prints a line per ledger and per digest as
/// each is done, then the summary.
async fn verify(
    url: &str,
    ledger: Option<&str>,
    digests: &[HeldDigest],
) -> Result<ExitCode, BoxError> {
    if let Some(code) = ledger {
        ledger_core::ledger::validate_ledger_code(code)
            .map_err(|e| format!("--ledger: {}", e.message))?;
    }
    let mut client = store::connect(url).await?;
    let ledgers = store::ledgers(&client, ledger).await?;
    if let (Some(code), true) = (ledger, ledgers.is_empty()) {
        return Err(format!("--ledger: no ledger has the code {code:?}").into());
    }
    if !digests.is_empty() && ledger.is_none() && ledgers.len() != 1 {
        let codes: Vec<&str> = ledgers.iter().take(5).map(|(_, c)| c.as_str()).collect();
        return Err(format!(
            "--digest needs --ledger: a digest is of one ledger, and the database has {} \
             ({}{})",
            ledgers.len(),
            codes.join(", "),
            if ledgers.len() > codes.len() {
                ", …"
            } else {
                ""
            }
        )
        .into());
    }
    let (mut failed, mut confirmed, mut unconfirmed) = (0, 0, 0);
    for (id, code) in &ledgers {
        let v = store::verify_ledger(&mut client, (*id, code), digests).await?;
        let mut text = ledger_line(&v);
        for (d, outcome) in &v.digests {
            text.push_str(&digest_line(d, outcome, &v.code));
            match outcome {
                DigestOutcome::Confirmed => confirmed += 1,
                _ => unconfirmed += 1,
            }
        }
        failed += usize::from(v.first.is_some());
        print(&text)?;
    }
    let mut summary = format!("ledgers: {} verified, {failed} failed", ledgers.len());
    if !digests.is_empty() {
        summary.push_str(&format!(
            "; digests: {confirmed} confirmed, {unconfirmed} not confirmed"
        ));
    }
    print(&format!("{summary}\n"))?;
    Ok(if failed + unconfirmed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// A ledger's line: `ok` and what was verified, or `FAIL` and the first posting that does not
/// match.
fn ledger_line(v: &Verified) -> String {
    let verified = match v.verified {
        0 => "no posting verified".to_string(),
        n => format!("postings 1..={n} verified"),
    };
    if let Some(m) = &v.first {
        return format!(
            "FAIL  ledger {} at sequence {}: {m} ({verified})\n",
            v.code, m.sequence
        );
    }
    let root = to_hex(&v.root);
    let mut line = match v.verified {
        0 => format!(
            "ok    ledger {}: no posting hashed yet (the empty tree, root {root})",
            v.code
        ),
        n => format!(
            "ok    ledger {}: postings 1..={n} verified (hashes, tree nodes, digest roots, \
             chain), root {root}",
            v.code
        ),
    };
    if v.behind() {
        line.push_str(&format!(
            "; hashing is not caught up: {} of {} postings hashed, the rest not verified \
             (`ledger migrate` hashes them)",
            v.tree_size, v.last_sequence
        ));
    }
    line.push('\n');
    line
}

/// A held digest's line.
fn digest_line(d: &HeldDigest, outcome: &DigestOutcome, code: &str) -> String {
    let why = match outcome {
        DigestOutcome::Confirmed => {
            return format!(
                "digest {d} confirmed: the journal's tree of size {} of ledger {code} has that \
                 root\n",
                d.size
            )
        }
        DigestOutcome::Differs { recomputed } => format!(
            "the journal's tree of size {} of ledger {code} has the root {}, not the \
             digest's {}",
            d.size,
            to_hex(recomputed),
            to_hex(&d.root)
        ),
        DigestOutcome::Beyond { tree_size } => format!(
            "the tree of ledger {code} has size {tree_size} only: a digest of a longer \
             journal is held, so postings were removed (or are not hashed yet)"
        ),
        DigestOutcome::Unreached { broken_at } => format!(
            "the journal of ledger {code} cannot be recomputed up to it: it breaks at \
             sequence {broken_at}"
        ),
    };
    format!("digest {d} NOT confirmed: {why}\n")
}
