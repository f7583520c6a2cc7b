//! How every database connection of the ledger is made and driven: the URL's settings with
//! its TLS ([`ConnConfig`]), and the task that drives a connection, which treats a commit the
//! server could not replicate as a lost connection.
//!
//! Why: when a commit's wait for the synchronous standby is cancelled (the session is
//! cancelled, by `statement_timeout` or an operator, while the standby is gone), PostgreSQL
//! answers the COMMIT with success and a WARNING notice, "… committed locally, but might not
//! have been replicated to the standby". tokio-postgres hands a notice to the connection's
//! task, not to the statement, so the writer would answer OK for a batch that a failover
//! (pg_rewind) may later remove. The notice reaches the connection's task before the COMMIT's
//! completion does (the protocol sends it first, and the task returns each notice before it
//! reads on), so the task ends there: the connection closes, the COMMIT in flight fails, and
//! its callers are told `UNAVAILABLE` (their retries with their keys settle the outcome).

use super::tls::{split_tls_params, Tls};
use super::StorageError;
use futures_util::future::BoxFuture;
use std::str::FromStr;
use tokio_postgres::{AsyncMessage, Client, Connection};

/// The settings of a connection: tokio-postgres's, and the TLS the URL asked for.
#[derive(Clone)]
pub struct ConnConfig {
    pub pg: tokio_postgres::Config,
    pub tls: Tls,
}

impl std::fmt::Debug for ConnConfig {
    /// Hosts, database and user only: never the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ConnConfig({} db={:?} user={:?} {:?})",
            self.hosts(),
            self.pg.get_dbname(),
            self.pg.get_user(),
            self.tls
        )
    }
}

impl ConnConfig {
    /// Parses a database URL (`postgres://…` or `host=… dbname=…`), `sslmode` and
    /// `sslrootcert` included.
    pub fn parse(database_url: &str) -> Result<ConnConfig, StorageError> {
        let (rest, params) = split_tls_params(database_url)?;
        let mut pg = tokio_postgres::Config::from_str(&rest)
            .map_err(|e| StorageError::Config(e.to_string()))?;
        pg.ssl_mode(params.mode.driver());
        Ok(ConnConfig {
            pg,
            tls: Tls::new(&params)?,
        })
    }

    /// `host:port` of each host, comma-separated: a name for logs and metrics that holds no
    /// secret.
    pub fn hosts(&self) -> String {
        let ports = self.pg.get_ports();
        self.pg
            .get_hosts()
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let host = match h {
                    tokio_postgres::config::Host::Tcp(h) => h.clone(),
                    tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
                };
                let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
                format!("{host}:{port}")
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// One connection, driven by a task of its own (see the module's doc).
    pub async fn connect(&self) -> Result<Client, StorageError> {
        let (client, connection) = self.pg.connect(self.tls.clone()).await?;
        tokio::spawn(drive(connection));
        Ok(client)
    }
}

/// Drives a connection until it closes, logging the server's notices. A notice that a commit
/// might not have been replicated ends it at once (see the module's doc).
async fn drive<S, T>(mut connection: Connection<S, T>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        let message = std::future::poll_fn(|cx| connection.poll_message(cx)).await;
        match message {
            Some(Ok(AsyncMessage::Notice(n))) if unreplicated_commit(&n) => {
                tracing::warn!(
                    notice = %n.message(),
                    detail = n.detail().unwrap_or(""),
                    "a commit the server could not replicate: closing its connection, so the \
                     statement fails (UNAVAILABLE) instead of answering OK"
                );
                return;
            }
            Some(Ok(AsyncMessage::Notice(n))) => {
                tracing::debug!(severity = n.severity(), notice = %n.message(), "database notice")
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                tracing::debug!(error = %e, "database connection closed");
                return;
            }
            None => return,
        }
    }
}

/// Whether a notice says a commit happened on this server only: the WARNINGs of
/// `SyncRepWaitForLSN` when its wait is cancelled or the session terminated (their DETAIL
/// reads "The transaction has already committed locally, but might not have been replicated
/// to the standby."). PostgreSQL words them in the server's `lc_messages`; the ledger expects
/// English (C) messages, as PostgreSQL's own tools parse them.
pub fn unreplicated_commit(notice: &tokio_postgres::error::DbError) -> bool {
    let detail = notice.detail().unwrap_or("");
    detail.contains("committed locally")
        || notice
            .message()
            .contains("wait for synchronous replication")
}

/// The pool's way of making connections: [`ConnConfig::connect`]'s, for deadpool.
pub(super) struct PoolConnect(pub Tls);

impl deadpool_postgres::Connect for PoolConnect {
    fn connect(
        &self,
        pg_config: &tokio_postgres::Config,
    ) -> BoxFuture<'_, Result<(Client, tokio::task::JoinHandle<()>), tokio_postgres::Error>> {
        let (pg, tls) = (pg_config.clone(), self.0.clone());
        Box::pin(async move {
            let (client, connection) = pg.connect(tls).await?;
            Ok((client, tokio::spawn(drive(connection))))
        })
    }
}
