//! Boots the gRPC server: the ledger service, reflection (v1 and v1alpha), health.

use crate::domain::limits::MAX_REQUEST_BYTES;
use crate::grpc::handlers::LedgerGrpc;
use crate::grpc::pb::ledger_server::LedgerServer;
use crate::service::Ledger;
use crate::storage::{self, Pool};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::transport::server::TcpIncoming;

/// Longest wait for in-flight requests at shutdown (limit DRAIN_TIMEOUT).
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(20);

/// How often health re-checks the database.
pub const HEALTH_PROBE_INTERVAL: Duration = Duration::from_secs(2);

/// Options of the gRPC server.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    pub listen: SocketAddr,
    pub database_url: String,
    pub pool_size: usize,
}

/// A running server.
pub struct RunningServer {
    pub local_addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
}

impl RunningServer {
    /// Stops accepting, lets in-flight requests finish (at most [`DRAIN_TIMEOUT`]), and waits
    /// for the server to end.
    pub async fn shutdown(self) -> Result<(), tonic::transport::Error> {
        let _ = self.shutdown.send(true);
        let mut task = self.task;
        match tokio::time::timeout(DRAIN_TIMEOUT, &mut task).await {
            Ok(r) => r.expect("server task"),
            Err(_) => {
                tracing::warn!(timeout = ?DRAIN_TIMEOUT, "connections still open after the drain timeout; closing them");
                task.abort();
                Ok(())
            }
        }
    }
}

/// Migrates the database, then starts serving on `opts.listen` (port 0 picks a free port).
pub async fn start(
    opts: ServerOptions,
) -> Result<RunningServer, Box<dyn std::error::Error + Send + Sync>> {
    storage::migrate(&opts.database_url).await?;
    let pool = storage::pool(&opts.database_url, opts.pool_size)?;
    let ledger = Arc::new(Ledger::new(pool.clone(), None).await?);

    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<LedgerServer<LedgerGrpc>>().await;
    tokio::spawn(probe_health(pool.clone(), health.clone()));

    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::grpc::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::grpc::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;

    let service = LedgerServer::new(LedgerGrpc::new(ledger))
        .max_decoding_message_size(MAX_REQUEST_BYTES)
        .max_encoding_message_size(16 * MAX_REQUEST_BYTES);

    let listener = TcpListener::bind(opts.listen).await?;
    let local_addr = listener.local_addr()?;
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    let (tx, mut rx) = watch::channel(false);
    let task = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(service)
            .serve_with_incoming_shutdown(incoming, async move {
                let _ = rx.wait_for(|v| *v).await;
            }),
    );
    tracing::info!(%local_addr, "ledger serving gRPC");
    Ok(RunningServer {
        local_addr,
        shutdown: tx,
        task,
    })
}

/// Health reports SERVING while the database answers and migrations are current.
async fn probe_health(pool: Pool, health: tonic_health::server::HealthReporter) {
    loop {
        tokio::time::sleep(HEALTH_PROBE_INTERVAL).await;
        let ok = match pool.get().await {
            Ok(c) => matches!(storage::migrate::is_current(&c).await, Ok(true)),
            Err(_) => false,
        };
        let status = if ok {
            tonic_health::ServingStatus::Serving
        } else {
            tonic_health::ServingStatus::NotServing
        };
        health.set_service_status("", status).await;
        health.set_service_status("ledger.v1.Ledger", status).await;
    }
}
