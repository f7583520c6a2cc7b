//! `check` and `verify` over the clusters of a deployment (`--cluster NAME=URL`): which
//! cluster's database each ledger is read from, as the directory on `main` says, and the
//! directory's own invariants across them.

use ledger_core::ledger::MAIN_CLUSTER;
use ledger_server::storage::check::Finding;
use ledger_server::BoxError;
use std::future::Future;
use std::process::ExitCode;

/// The databases to read, by cluster name: for one ledger (`--ledger`), the cluster the
/// directory places it on; otherwise `main` and every `--cluster`.
async fn targets(
    main: &str,
    others: &[(String, String)],
    ledger: Option<&str>,
) -> Result<Vec<(String, String)>, BoxError> {
    ledger_server::server::check_clusters(others)?;
    let mut all = vec![(MAIN_CLUSTER.to_owned(), main.to_owned())];
    all.extend(others.iter().cloned());
    let Some(code) = ledger else {
        return Ok(all);
    };
    ledger_core::ledger::validate_ledger_code(code)
        .map_err(|e| format!("--ledger: {}", e.message))?;
    let client = ledger_server::storage::connect(main).await?;
    let found = ledger_server::storage::check::placed_on(&client, code).await?;
    let cluster = found.ok_or_else(|| format!("--ledger: no ledger has the code {code:?}"))?;
    all.into_iter()
        .find(|(name, _)| *name == cluster)
        .map(|t| vec![t])
        .ok_or_else(|| {
            format!(
                "ledger {code:?} is on the cluster {:?}: name its database with --cluster {}=URL",
                cluster, cluster
            )
            .into()
        })
}

/// Runs `one` on the database of every cluster to read (under a `cluster NAME` line when
/// clusters are named), then, when every ledger was in scope, checks the directory across
/// them and says which ledgers were on clusters not named (not read). Exit 1 when any run or
/// the directory found a violation.
pub(super) async fn each<F, Fut>(
    main: &str,
    others: &[(String, String)],
    ledger: Option<&str>,
    mut one: F,
) -> Result<ExitCode, BoxError>
where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = Result<ExitCode, BoxError>>,
{
    let targets = targets(main, others, ledger).await?;
    let mut failed = false;
    for (name, url) in &targets {
        if !others.is_empty() {
            print(&format!("cluster {name}\n"))?;
        }
        failed |= one(url.clone()).await? != ExitCode::SUCCESS;
    }
    if ledger.is_none() {
        let (findings, unread) = ledger_server::storage::check::placements_over(&targets).await?;
        if !others.is_empty() {
            let (report, violated) = findings_report("the directory of ledgers", &findings);
            print(&report)?;
            failed |= violated > 0;
        }
        if !unread.is_empty() {
            let names: Vec<String> = unread.iter().map(|(c, n)| format!("{n} on {c}")).collect();
            print(&format!(
                "not read: ledger {}; name each cluster with --cluster NAME=URL\n",
                names.join(", ")
            ))?;
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// A report of findings under a title: `ok` or `FAIL` (with examples) per invariant, then the
/// count; and how many were violated.
pub(super) fn findings_report(title: &str, findings: &[Finding]) -> (String, usize) {
    use std::fmt::Write as _;
    let mut violated = 0;
    let mut report = format!("{title}\n");
    for f in findings {
        if f.violations == 0 {
            let _ = writeln!(report, "ok    {}", f.name);
        } else {
            violated += 1;
            let _ = writeln!(report, "FAIL  {} ({} violations)", f.name, f.violations);
            for e in &f.examples {
                let _ = writeln!(report, "        {e}");
            }
        }
    }
    let _ = writeln!(
        report,
        "{} invariants checked, {violated} violated",
        findings.len()
    );
    (report, violated)
}

fn print(text: &str) -> Result<(), BoxError> {
    crate::tools::output::print_out(text).map_err(|e| format!("cannot write to stdout: {e}").into())
}
