//! The operator's commands: `relay` (the outbox publisher alone), `token new`, `migrate`,
//! `check`.

use super::args::{CheckDbArgs, OutboxArgs};
use super::database::{database, stop_embedded, Holding};
use super::serve::ShutdownSignal;
use crate::tools::output::print_out;
use ledger_server::BoxError;
use std::io::Write as _;
use std::process::ExitCode;

/// [`print_out`] for the commands of this module, whose errors are boxed.
fn print(text: &str) -> Result<(), BoxError> {
    print_out(text).map_err(|e| format!("cannot write to stdout: {e}").into())
}

/// `ledger relay`: the outbox publisher alone, until a shutdown signal.
pub(super) async fn relay(
    database_url: &str,
    outbox: OutboxArgs,
    metrics_listen: Option<std::net::SocketAddr>,
    signal: ShutdownSignal,
) -> Result<ExitCode, BoxError> {
    let Some(opts) = outbox.publisher(database_url, None, None)? else {
        return Err("ledger relay needs --nats-url (env LEDGER_NATS_URL)".into());
    };
    ledger_server::storage::migrate(database_url).await?;
    let _metrics = match metrics_listen {
        Some(addr) => {
            let pool = ledger_server::storage::pool(database_url, RELAY_METRICS_POOL)?;
            let main = ledger_core::ledger::MAIN_CLUSTER.to_owned();
            Some(ledger_server::server::serve_metrics(addr, vec![(main, pool)]).await?)
        }
        None => None,
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut publisher = tokio::spawn(ledger_server::outbox::run(opts, stopped));
    tokio::select! {
        _ = signal.received() => {
            tracing::info!("shutting down: the publisher stops after its current batch");
            let _ = stop.send(true);
            publisher.await??;
        }
        // It ends by itself only on a configuration error.
        r = &mut publisher => r??,
    }
    Ok(ExitCode::SUCCESS)
}

/// `ledger token new`: a new token, and the auth-file line that holds its hash (with the
/// ledgers it grants as a fourth column when `--ledgers` is given).
pub(super) fn token(caller: &str, role: &str, ledgers: Option<&str>) -> Result<ExitCode, BoxError> {
    use ledger_server::access::auth;
    auth::validate_caller(caller)?;
    let role = auth::Role::parse(role)
        .ok_or_else(|| format!("role {role:?} is not {}", auth::ROLE_NAMES))?;
    let grants = ledgers
        .map(|l| auth::parse_grants(l).map_err(|e| format!("--{e}")))
        .transpose()?;
    let token = auth::new_token();
    let line = match &grants {
        Some(g) => auth::auth_line_granting(caller, role, &token, g),
        None => auth::auth_line(caller, role, &token),
    };
    print(&format!("{token}\n{line}\n"))?;
    Ok(ExitCode::SUCCESS)
}

/// Applies the pending migrations of `main` (`url`) and of every other cluster named, and
/// says which.
pub(super) async fn migrate(
    url: &str,
    clusters: &[(String, String)],
) -> Result<ExitCode, BoxError> {
    ledger_server::server::check_clusters(clusters)?;
    let main = [("main".to_owned(), url.to_owned())];
    for (name, url) in main.iter().chain(clusters) {
        let applied = ledger_server::storage::migrate(url).await?;
        let applied = if applied.is_empty() {
            "none (up to date)".to_string()
        } else {
            applied.join(", ")
        };
        match clusters.is_empty() {
            true => print(&format!("migrations applied: {applied}\n"))?,
            false => print(&format!("cluster {name}: migrations applied: {applied}\n"))?,
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Connections the relay's metrics endpoint samples the outbox with, at most.
const RELAY_METRICS_POOL: usize = 1;

/// `ledger check`: 0 when every invariant holds, 1 on a violation, 2 when it could not run
/// (it says why on stderr).
pub(super) async fn check_command(db: CheckDbArgs, ledger: Option<String>) -> ExitCode {
    let result = async {
        let clusters = db.clusters.clone();
        let (url, pg) = database(&db.into(), "check", Holding::OrBorrow).await?;
        let ledger = ledger.as_deref();
        let result = super::clusters::each(&url, &clusters, ledger, |url| async move {
            check(&url, ledger).await
        })
        .await;
        stop_embedded(pg).await?;
        result
    }
    .await;
    result.unwrap_or_else(|e| {
        let _ = writeln!(
            std::io::stderr(),
            "ledger check could not run: {}",
            ledger_client::chain(&*e)
        );
        ExitCode::from(2)
    })
}

/// Prints the invariant report of one ledger (`None`: every ledger) of one database; the exit
/// code is 1 when any invariant is violated.
async fn check(url: &str, ledger: Option<&str>) -> Result<ExitCode, BoxError> {
    let mut client = ledger_server::storage::connect(url).await?;
    let scope = match ledger {
        None => None,
        Some(code) => {
            ledger_core::ledger::validate_ledger_code(code)
                .map_err(|e| format!("--ledger: {}", e.message))?;
            let found = ledger_server::storage::check::ledger_named(&client, code).await?;
            Some(found.ok_or_else(|| format!("--ledger: no ledger has the code {code:?}"))?)
        }
    };
    let findings = ledger_server::storage::check::run_in(&mut client, scope).await?;
    let title = match ledger {
        Some(code) => format!("ledger {code}"),
        None => String::from("every ledger"),
    };
    let (report, violated) = super::clusters::findings_report(&title, &findings);
    print(&report)?;
    Ok(if violated == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
