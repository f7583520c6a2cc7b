//! What the cluster holds for the ledger: the database `ledger` and the service's login, each
//! made on a private runtime (so that it works whether or not the caller is in one).

use super::{io_err, quote_ident, EmbeddedPg, EmbeddedPgError};
use std::time::{Duration, Instant};

impl EmbeddedPg {
    /// Creates database `name` (owned by `postgres`) unless it exists.
    pub fn create_database_if_missing(&self, name: &str) -> Result<(), EmbeddedPgError> {
        let conn_string = self.connection_string("postgres");
        let name = name.to_owned();
        on_own_runtime("creating the database", async move {
            create_database_async(&conn_string, &name).await
        })
    }

    /// Creates the service's login and the application role unless they exist
    /// ([`crate::storage::roles::ensure_service_login`]): the embedded default's pool logs in
    /// as that login, which cannot become the superuser that owns the schema.
    pub fn create_service_login(&self) -> Result<(), EmbeddedPgError> {
        let conn_string = self.connection_string("postgres");
        on_own_runtime("creating the service's login", async move {
            let client = crate::storage::connect(&conn_string)
                .await
                .map_err(|e| format!("cannot connect with `{conn_string}`: {e}"))?;
            crate::storage::roles::ensure_service_login(&client)
                .await
                .map_err(|e| format!("cannot create the service's login: {e}"))
        })
    }
}

/// Runs `work` to its end on a private single-threaded runtime on a thread of its own, so it
/// works whether or not the caller is inside a tokio runtime.
fn on_own_runtime(
    what: &str,
    work: impl std::future::Future<Output = Result<(), String>> + Send + 'static,
) -> Result<(), EmbeddedPgError> {
    let worker = std::thread::Builder::new()
        .name("embedded-pg-admin".into())
        .spawn(move || -> Result<(), String> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot build a tokio runtime: {e}"))?;
            rt.block_on(work)
        })
        .map_err(io_err("cannot spawn a thread"))?;
    match worker.join() {
        Ok(result) => result.map_err(EmbeddedPgError::Database),
        Err(_) => Err(EmbeddedPgError::Database(format!(
            "the thread {what} panicked"
        ))),
    }
}

/// Connects to the maintenance database and creates `name` unless it exists.
async fn create_database_async(conn_string: &str, name: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let (client, connection) = loop {
        match tokio_postgres::connect(conn_string, tokio_postgres::NoTls).await {
            Ok(pair) => break pair,
            Err(err) if Instant::now() < deadline => {
                tracing::debug!(error = %err, "PostgreSQL not accepting connections yet");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(err) => return Err(format!("cannot connect with `{conn_string}`: {err}")),
        }
    };
    let connection = tokio::spawn(connection);
    let result = async {
        let exists = client
            .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
            .await
            .map_err(|e| format!("cannot list databases: {e}"))?
            .is_some();
        if !exists {
            let sql = format!("CREATE DATABASE {}", quote_ident(name));
            match client.batch_execute(&sql).await {
                Ok(()) => tracing::info!(database = name, "created database"),
                // Someone else created it in the meantime.
                Err(err)
                    if err.code() == Some(&tokio_postgres::error::SqlState::DUPLICATE_DATABASE) => {
                }
                Err(err) => return Err(format!("cannot create database {name}: {err}")),
            }
        }
        Ok(())
    }
    .await;
    drop(client);
    let _ = connection.await;
    result
}
