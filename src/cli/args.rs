//! The option groups that several commands share: the database (`serve`, `migrate`,
//! `check`), the outbox publisher (`serve`, `relay`), and serve's access and operations.

use ledger_server::server;
use ledger_server::BoxError;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// `serve`'s database.
#[derive(clap::Args, Debug, Clone)]
pub(super) struct DbArgs {
    /// PostgreSQL URL the service logs in with (postgres://… or host=… dbname=…; its user
    /// runs pending migrations, so a login without the owner's rights needs `ledger migrate`
    /// first). Without it (or empty), `serve` runs its own PostgreSQL in --data-dir, started
    /// and stopped with the server.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub(super) database_url: Option<String>,
    /// Data directory of the embedded PostgreSQL (used without --database-url).
    #[arg(long, env = "LEDGER_DATA_DIR", default_value = "./ledger-data")]
    pub(super) data_dir: PathBuf,
    /// Directory of PostgreSQL's server programs for the embedded PostgreSQL (default: the
    /// newest /usr/lib/postgresql/<version>/bin, else PATH).
    #[arg(long, env = "LEDGER_PG_BIN")]
    pub(super) pg_bin: Option<PathBuf>,
}

/// `migrate`'s database.
#[derive(clap::Args, Debug, Clone)]
pub(super) struct MigrateDbArgs {
    /// PostgreSQL URL of the ledger's database, as its owner (migrations change the schema).
    /// Without it (or empty): the embedded PostgreSQL of --data-dir, the running server's if
    /// one holds the directory (left running), else started for this command and stopped.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// Data directory of the embedded PostgreSQL (used without --database-url).
    #[arg(long, env = "LEDGER_DATA_DIR", default_value = "./ledger-data")]
    data_dir: PathBuf,
    /// Directory of PostgreSQL's server programs for the embedded PostgreSQL.
    #[arg(long, env = "LEDGER_PG_BIN")]
    pg_bin: Option<PathBuf>,
    /// Another cluster to migrate as well, NAME=URL as for `serve --cluster` (repeatable;
    /// the environment variable holds several separated by spaces).
    #[arg(
        long = "cluster",
        env = "LEDGER_CLUSTERS",
        value_name = "NAME=URL",
        value_delimiter = ' ',
        value_parser = parse_cluster,
        hide_env_values = true
    )]
    pub(super) clusters: Vec<(String, String)>,
}

/// `check`'s and `verify`'s database.
#[derive(clap::Args, Debug, Clone)]
pub(super) struct CheckDbArgs {
    /// PostgreSQL URL of the ledger's database; any login that may read the journal (the
    /// command only reads, in one snapshot per ledger at most). Without it (or empty): the embedded PostgreSQL of
    /// --data-dir, the running server's if one holds the directory (left running), else started
    /// for this command and stopped.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// Data directory of the embedded PostgreSQL (used without --database-url).
    #[arg(long, env = "LEDGER_DATA_DIR", default_value = "./ledger-data")]
    data_dir: PathBuf,
    /// Directory of PostgreSQL's server programs for the embedded PostgreSQL.
    #[arg(long, env = "LEDGER_PG_BIN")]
    pg_bin: Option<PathBuf>,
    /// Another cluster to read as well, NAME=URL as for `serve --cluster` (repeatable; the
    /// environment variable holds several separated by spaces). With --ledger, only the
    /// cluster the directory places that ledger on is read.
    #[arg(
        long = "cluster",
        env = "LEDGER_CLUSTERS",
        value_name = "NAME=URL",
        value_delimiter = ' ',
        value_parser = parse_cluster,
        hide_env_values = true
    )]
    pub(super) clusters: Vec<(String, String)>,
}

impl From<MigrateDbArgs> for DbArgs {
    fn from(a: MigrateDbArgs) -> DbArgs {
        DbArgs {
            database_url: a.database_url,
            data_dir: a.data_dir,
            pg_bin: a.pg_bin,
        }
    }
}

impl From<CheckDbArgs> for DbArgs {
    fn from(a: CheckDbArgs) -> DbArgs {
        DbArgs {
            database_url: a.database_url,
            data_dir: a.data_dir,
            pg_bin: a.pg_bin,
        }
    }
}

/// An empty value (`DATABASE_URL=`) means "not set", as in most tools.
pub(super) fn set(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.trim().is_empty())
}

/// The outbox publisher's settings (`serve` and `relay`).
#[derive(clap::Args, Debug, Clone)]
pub(super) struct OutboxArgs {
    /// NATS server URL (e.g. nats://127.0.0.1:4222), or several, comma-separated, of one
    /// cluster (the publisher moves to another when one is lost). For `serve` it turns on the
    /// in-process outbox publisher; `relay` requires it.
    #[arg(long, env = "LEDGER_NATS_URL", hide_env_values = true)]
    nats_url: Option<String>,
    /// Replicas of the JetStream stream `LEDGER` when the publisher creates it (3 on a
    /// three-server cluster rides through the loss of one; an existing stream keeps its own).
    #[arg(long, env = "LEDGER_NATS_REPLICAS", default_value_t = ledger_server::outbox::DEFAULT_STREAM_REPLICAS)]
    nats_replicas: usize,
    /// Delivered outbox rows older than this are deleted (e.g. 7d, 12h, 30m, 0s).
    #[arg(long, env = "LEDGER_OUTBOX_RETENTION", default_value = "7d", value_parser = ledger_server::outbox::parse_duration)]
    outbox_retention: Duration,
    /// De-duplication window of the JetStream stream `LEDGER` when the publisher creates it.
    /// It must cover the publisher's restart time.
    #[arg(long, env = "LEDGER_NATS_DUPLICATE_WINDOW", default_value = "2m", value_parser = ledger_server::outbox::parse_duration)]
    nats_duplicate_window: Duration,
    /// Crash tests only: where the publisher aborts the process (outbox-before-publish,
    /// outbox-after-publish-before-progress). Never in production.
    #[arg(long, env = "LEDGER_FAILPOINT", hide = true)]
    failpoint: Option<String>,
}

impl OutboxArgs {
    /// The publisher's options; it logs in as `login` acting as `role` when given (those of
    /// the server's pool in `serve`).
    pub(super) fn publisher(
        &self,
        database_url: &str,
        login: Option<&str>,
        role: Option<&str>,
    ) -> Result<Option<ledger_server::outbox::PublisherOptions>, BoxError> {
        let failpoint =
            ledger_server::outbox::Failpoint::parse_optional(self.failpoint.as_deref())?;
        let Some(nats_url) = set(self.nats_url.clone()) else {
            return Ok(None);
        };
        ledger_server::outbox::nats_servers(&nats_url)?;
        if self.nats_replicas == 0 {
            return Err("--nats-replicas must be at least 1".into());
        }
        Ok(Some(ledger_server::outbox::PublisherOptions {
            database_url: database_url.to_owned(),
            db_login: login.map(str::to_owned),
            db_role: role.map(str::to_owned),
            nats_url,
            replicas: self.nats_replicas,
            duplicate_window: self.nats_duplicate_window,
            retention: self.outbox_retention,
            failpoint,
        }))
    }
}

/// Access and operations options of `serve`.
#[derive(clap::Args, Debug, Clone)]
pub(super) struct OpsArgs {
    /// Auth file (`CALLER ROLE sha256:<hex>` / `CALLER ROLE mtls` lines): turns authentication on.
    #[arg(long, env = "LEDGER_AUTH_TOKENS")]
    auth_tokens: Option<PathBuf>,
    /// Server certificate chain (PEM): turns TLS on (with --tls-key).
    #[arg(long, env = "LEDGER_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// Server private key (PEM).
    #[arg(
        long,
        env = "LEDGER_TLS_KEY",
        requires = "tls_cert",
        hide_env_values = true
    )]
    tls_key: Option<PathBuf>,
    /// CA (PEM) that signs client certificates: turns mutual TLS on (needs --tls-cert).
    #[arg(long, env = "LEDGER_TLS_CLIENT_CA", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// Address of the Prometheus endpoint (`/metrics`); off without it.
    #[arg(long, env = "LEDGER_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// A hot standby (PostgreSQL URL, one host or several, `sslmode` as for --database-url)
    /// that answers the as-of reads it has replayed (GetBalance, ListBalances, ListEntries);
    /// everything else, and whatever it cannot prove, goes to the primary. Repeat for several
    /// standbys (the environment variable holds one URL).
    #[arg(
        long = "replica-url",
        env = "LEDGER_REPLICA_URL",
        hide_env_values = true
    )]
    replica_urls: Vec<String>,
    /// Another PostgreSQL cluster ledgers may be placed on (`CreateLedger`'s `cluster`), as
    /// NAME=URL: NAME 1..32 of a-z 0-9 _ - (not `main`: the cluster of --database-url, which
    /// holds the directory of ledgers), URL as for --database-url. Repeat for several; the
    /// environment variable holds several separated by spaces. Each is migrated at start.
    #[arg(
        long = "cluster",
        env = "LEDGER_CLUSTERS",
        value_name = "NAME=URL",
        value_delimiter = ' ',
        value_parser = parse_cluster,
        hide_env_values = true
    )]
    clusters: Vec<(String, String)>,
    /// Database role the service acts as (`SET ROLE`). Default: `ledger_app` with the embedded
    /// PostgreSQL (whose pool logs in as `ledger_svc`; migrations run as `postgres`), none with
    /// --database-url (whose user is the service's login); "" for none.
    #[arg(long, env = "LEDGER_DB_ROLE")]
    db_role: Option<String>,
}

impl OpsArgs {
    pub(super) fn load(&self, embedded: bool) -> Result<server::OpsOptions, BoxError> {
        let auth = self
            .auth_tokens
            .as_deref()
            .map(ledger_server::access::auth::AuthFile::load)
            .transpose()?;
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(server::TlsPem::load(
                cert,
                key,
                self.tls_client_ca.as_deref(),
            )?),
            _ => None,
        };
        let db_role = match self.db_role.as_deref() {
            Some("") => None,
            Some(r) => Some(r.to_owned()),
            None if embedded => Some(ledger_server::storage::APP_ROLE.to_owned()),
            None => None,
        };
        // The embedded cluster trusts its socket: the service logs in as its own login there,
        // not as the superuser that owns the schema (which still runs the migrations).
        let db_login = embedded.then(|| ledger_server::storage::roles::SERVICE_LOGIN.to_owned());
        Ok(server::OpsOptions {
            auth,
            tls,
            metrics_listen: self.metrics_listen,
            db_role,
            db_login,
            replica_urls: self
                .replica_urls
                .iter()
                .filter(|u| !u.trim().is_empty())
                .cloned()
                .collect(),
            clusters: self.clusters.clone(),
        })
    }
}

/// `--cluster NAME=URL`: a cluster's name (checked as the ledger checks it) and its URL.
pub fn parse_cluster(s: &str) -> Result<(String, String), String> {
    let (name, url) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: give NAME=URL (east=postgres://…)"))?;
    ledger_core::ledger::validate_cluster_name(name).map_err(|e| e.message)?;
    if name == ledger_core::ledger::MAIN_CLUSTER {
        return Err("main is the cluster of --database-url; name the others".into());
    }
    if url.trim().is_empty() {
        return Err(format!("--cluster {name}= needs a URL"));
    }
    // Spaces separate clusters (in LEDGER_CLUSTERS and in one --cluster value), so the
    // keyword=value form (`host=… port=…`) would be cut into pieces that look like clusters.
    if !["postgres://", "postgresql://"]
        .iter()
        .any(|scheme| url.starts_with(scheme))
    {
        return Err(format!(
            "--cluster {name}={url}: give the URL in URI form (postgresql://user@host/db?…); \
             the keyword=value form has spaces, which separate clusters"
        ));
    }
    Ok((name.to_owned(), url.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::parse_cluster;

    #[test]
    fn a_cluster_is_a_name_and_a_postgresql_uri_and_anything_else_is_refused_with_the_reason() {
        let ok = "postgresql://svc@db-east/ledger?sslmode=verify-full";
        assert_eq!(
            parse_cluster(&format!("east={ok}")),
            Ok(("east".to_owned(), ok.to_owned()))
        );
        assert!(
            parse_cluster("e2=postgres://h1,h2/ledger?target_session_attrs=read-write").is_ok()
        );
        for (given, reason) in [
            ("east", "give NAME=URL"),
            (
                "main=postgresql://h/db",
                "main is the cluster of --database-url",
            ),
            ("East=postgresql://h/db", "cluster"),
            ("east=", "needs a URL"),
            ("east=host=/tmp", "URI form"),
            ("port=5432", "URI form"),
        ] {
            let e = parse_cluster(given).expect_err(given);
            assert!(e.contains(reason), "{given}: {e}");
        }
    }
}
