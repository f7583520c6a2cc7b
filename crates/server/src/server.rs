//! Boots the gRPC server: the ledger service (inside the access layer: auth, roles, deadlines,
//! metrics, drain), reflection (v1 and v1alpha), health, served by our transport (connection,
//! stream and response bounds); optionally TLS / mutual TLS and `/metrics`.

use crate::access::auth::{AuthFile, AuthPolicy};
use crate::access::{transport_status, Access, AccessState};
use crate::grpc::handlers::LedgerGrpc;
use crate::grpc::pb::ledger_server::LedgerServer;
use crate::grpc::sized::SizedLedger;
use crate::metrics::{PoolUse, METRICS_IO_TIMEOUT};
use crate::service::Ledger;
use crate::storage::{self, Pool};
use crate::transport::Transport;
use crate::tuning::Tuning;
use crate::writer::BatchObserver;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

pub use crate::access::DRAIN_TIMEOUT;
pub use crate::transport::TlsPem;

/// How often health re-checks the database.
pub const HEALTH_PROBE_INTERVAL: Duration = Duration::from_secs(2);
/// Longest one health check may take (limit HEALTH_PROBE_TIMEOUT): a database that does not
/// answer within it (a primary gone, a failover under way) is NOT_SERVING.
pub const HEALTH_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Options of the gRPC server.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    pub listen: SocketAddr,
    pub database_url: String,

    /// Access and operations: auth, TLS, metrics, database role.
    pub ops: OpsOptions,
    /// The operational knobs: pool, writer, cache, drain, transport (`Tuning::default()`, or
    /// as the command line built it).
    pub tuning: Tuning,
}

/// Access and operations options of the server (all off by default).
#[derive(Clone, Debug, Default)]
pub struct OpsOptions {
    /// `--auth-tokens`: callers and their roles.
    pub auth: Option<AuthFile>,
    /// `--tls-cert`/`--tls-key`/`--tls-client-ca`.
    pub tls: Option<TlsPem>,
    /// `--metrics-listen`: address of the Prometheus endpoint.
    pub metrics_listen: Option<SocketAddr>,
    /// `--db-role`: the database role the pool's connections act as (migrations run as the
    /// login user, the owner).
    pub db_role: Option<String>,
    /// The login user of the pool's connections instead of the URL's, whose user (the owner)
    /// runs the migrations: [`storage::roles::SERVICE_LOGIN`] with the embedded PostgreSQL.
    pub db_login: Option<String>,
    /// `--replica-url`: hot standbys that answer the as-of reads they can prove (each URL one
    /// read pool; a URL may name several hosts). Their connections log in as the pool's do.
    pub replica_urls: Vec<String>,
    /// `--cluster NAME=URL`: the other PostgreSQL clusters ledgers may be placed on (the
    /// `--database-url` is `main`); each migrated at start, its pool's connections logging in
    /// as the main pool's do.
    pub clusters: Vec<(String, String)>,
}

/// A running server.
pub struct RunningServer {
    pub local_addr: SocketAddr,
    /// The `/metrics` address, when metrics are on.
    pub metrics_addr: Option<SocketAddr>,
    access: Arc<AccessState>,
    health: tonic_health::server::HealthReporter,
    metrics_task: Option<tokio::task::JoinHandle<()>>,
    expiry_tasks: Vec<tokio::task::JoinHandle<()>>,
    clusters: Arc<storage::clusters::Clusters>,
    transport: Transport,
    drain_timeout: Duration,
}

impl RunningServer {
    /// Drains and stops: new ledger requests are refused with `UNAVAILABLE` and health says
    /// NOT_SERVING; in-flight requests finish (at most [`DRAIN_TIMEOUT`]); then the transport
    /// closes its connections, and the background tasks stop.
    pub async fn shutdown(self) -> Result<(), std::io::Error> {
        let began = tokio::time::Instant::now();
        self.access.begin_drain();
        set_health(&self.health, tonic_health::ServingStatus::NotServing).await;
        if !self.access.wait_idle(self.drain_timeout).await {
            tracing::warn!(
                in_flight = self.access.in_flight(),
                "requests still in flight after the drain timeout"
            );
        }
        let left = self.drain_timeout.saturating_sub(began.elapsed()) + Duration::from_secs(1);
        self.transport.close(left).await;
        // An in-process outbox publisher (`serve --nats-url`) was told to stop by the caller
        // when the drain began; the caller awaits it after this, before stopping the database.
        if let Some(t) = self.metrics_task {
            t.abort();
        }
        for t in &self.expiry_tasks {
            t.abort();
        }
        // Idle connections close now, cleanly, before the caller stops the database.
        self.clusters.close();
        Ok(())
    }

    /// The access layer's state (drain, requests in flight).
    pub fn access(&self) -> &Arc<AccessState> {
        &self.access
    }
}

/// The settings of the pool's connections (public so that a test connects exactly as the
/// service does).
pub fn pool_config(opts: &ServerOptions) -> Result<storage::ConnConfig, storage::StorageError> {
    storage::service_config(
        &opts.database_url,
        opts.ops.db_login.as_deref(),
        opts.ops.db_role.as_deref(),
    )
}

/// The pools of the clusters of `--cluster`, each migrated first.
async fn other_clusters(
    opts: &ServerOptions,
) -> Result<Vec<(String, storage::Pool)>, crate::BoxError> {
    check_clusters(&opts.ops.clusters)?;
    let mut out = Vec::new();
    for (name, url) in &opts.ops.clusters {
        storage::migrate(url).await?;
        let cfg = storage::service_config(
            url,
            opts.ops.db_login.as_deref(),
            opts.ops.db_role.as_deref(),
        )?;
        out.push((name.clone(), storage::pool_with(cfg, &opts.tuning.pool)?));
    }
    Ok(out)
}

/// The names of `--cluster`: each valid, none `main` and none twice, at most `MAX_CLUSTERS`.
pub fn check_clusters(clusters: &[(String, String)]) -> Result<(), crate::BoxError> {
    use ledger_core::limits::MAX_CLUSTERS;
    if clusters.len() + 1 > MAX_CLUSTERS {
        return Err(format!(
            "{} clusters with main, over the limit of {MAX_CLUSTERS} (MAX_CLUSTERS)",
            clusters.len() + 1
        )
        .into());
    }
    let mut seen = std::collections::BTreeSet::new();
    for (name, _) in clusters {
        ledger_core::ledger::validate_cluster_name(name).map_err(|e| e.message)?;
        if name == ledger_core::ledger::MAIN_CLUSTER {
            return Err("--cluster main=URL: main is the cluster of --database-url".into());
        }
        if !seen.insert(name) {
            return Err(format!("--cluster {name}=… given twice").into());
        }
    }
    Ok(())
}

/// Migrates the database, then starts serving on `opts.listen` (port 0 picks a free port).
pub async fn start(opts: ServerOptions) -> Result<RunningServer, crate::BoxError> {
    storage::migrate(&opts.database_url).await?;
    opts.tuning.check()?;
    let others = other_clusters(&opts).await?;
    let pool = storage::pool_with(pool_config(&opts)?, &opts.tuning.pool)?;
    storage::roles::warn_if_login_can_escalate(&pool).await;
    let clusters = Arc::new(storage::clusters::Clusters::new(pool.clone(), others));
    let ops = opts.ops;
    let (metrics_addr, metrics_task, observer) = match ops.metrics_listen {
        Some(addr) => {
            let pools = clusters.all().map(|(n, p)| (n.to_owned(), p.clone()));
            let (addr, task) = serve_metrics(addr, pools.collect()).await?;
            let observer: BatchObserver = Arc::new(crate::metrics::write_batch);
            (Some(addr), Some(task), Some(observer))
        }
        None => (None, None, None),
    };
    let replicas = replicas(&ops, &opts.tuning, &pool)?;
    let ledger = Ledger::new(
        clusters.clone(),
        replicas,
        observer,
        opts.tuning.writer,
        opts.tuning.accounts_cached_max,
    );
    let ledger = Arc::new(ledger.await?);
    let expiry_tasks = start_expiry(&ledger, &opts.tuning).await;

    let mtls = ops.tls.as_ref().is_some_and(|t| t.client_ca.is_some());
    let access_enabled = ops.auth.is_some() || mtls;
    let access = AccessState::new(
        AuthPolicy {
            file: ops.auth,
            mtls,
        },
        &opts.tuning.transport,
    );

    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<LedgerServer<LedgerGrpc>>().await;
    tokio::spawn(probe_health(pool.clone(), health.clone(), access.clone()));

    let service = SizedLedger::new(LedgerGrpc::new(ledger));
    let routes = routes(health_service, Access::new(service, access.clone()))?;
    let listener = TcpListener::bind(opts.listen).await?;
    let local_addr = listener.local_addr()?;
    let transport = crate::transport::spawn(
        listener,
        routes,
        ops.tls.as_ref(),
        opts.tuning.transport.clone(),
        opts.tuning.pool.size,
        transport_status,
    )?;
    tracing::info!(%local_addr, tls = ops.tls.is_some(), auth = access_enabled, "ledger serving gRPC");
    Ok(RunningServer {
        local_addr,
        metrics_addr,
        access,
        health,
        metrics_task,
        expiry_tasks,
        clusters,
        transport,
        drain_timeout: opts.tuning.drain_timeout,
    })
}

/// Serves `/metrics` on `listen` (port 0 picks one) until the task is aborted, the gauges
/// sampled from each cluster's pool at each scrape, labelled `cluster` (`serve --metrics-listen`, `ledger relay`).
pub async fn serve_metrics(
    listen: SocketAddr,
    pools: Vec<(String, Pool)>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let pools = Arc::new(pools);
    crate::metrics::serve(listen, move || {
        let pools = pools.clone();
        async move {
            let each = pools.iter().map(|(name, pool)| sample_gauges(name, pool));
            futures_util::future::join_all(each).await;
        }
    })
    .await
}

/// Samples the gauges: pool use now, and the outbox backlog (skipped, with a warning, when the
/// database does not answer within METRICS_IO_TIMEOUT).
async fn sample_gauges(cluster: &str, pool: &Pool) {
    let s = pool.status();
    crate::metrics::pool_sampled(
        cluster,
        PoolUse {
            max: s.max_size,
            open: s.size,
            in_use: s.size.saturating_sub(s.available),
            waiting: s.waiting,
        },
    );
    let backlog = tokio::time::timeout(METRICS_IO_TIMEOUT, async {
        let client = pool.get().await.map_err(storage::StorageError::from)?;
        storage::outbox::backlog(&client).await
    })
    .await;
    match backlog {
        Ok(Ok(b)) => crate::metrics::outbox_sampled(cluster, b.pending, b.oldest_age),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, cluster, "metrics: cannot read the outbox backlog")
        }
        Err(_) => tracing::warn!(cluster, "metrics: the outbox backlog query timed out"),
    }
}

/// Releases the holds that expired while the server was stopped (before it serves), then
/// starts the expiry tasks, one per cluster. A release that cannot be recorded now is retried
/// by its task.
async fn start_expiry(
    ledger: &Arc<Ledger>,
    tuning: &crate::tuning::Tuning,
) -> Vec<tokio::task::JoinHandle<()>> {
    let names: Vec<String> = ledger
        .clusters()
        .names()
        .iter()
        .map(|n| n.to_string())
        .collect();
    // A round looks back past any batch still committing (each takes at most its timeout).
    let overlap = (3 * tuning.writer.batch_timeout).max(Duration::from_secs(30));
    let mut tasks = Vec::new();
    for cluster in names {
        match crate::service::expiry::release_all_due(ledger, &cluster).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                released = n,
                cluster,
                "released the holds that expired while the server was stopped"
            ),
            Err(e) => {
                tracing::warn!(error = %e, cluster, "not every expired hold could be released at start-up; the expiry task retries")
            }
        }
        tasks.push(tokio::spawn(crate::service::expiry::run(
            ledger.clone(),
            cluster,
            tuning.hold_expiry_poll,
            overlap,
        )));
    }
    tasks
}

/// The standbys' read pools (connections made lazily, so a standby that is down delays
/// nothing at start).
fn replicas(
    ops: &OpsOptions,
    tuning: &Tuning,
    primary: &Pool,
) -> Result<Arc<crate::service::Replicas>, storage::StorageError> {
    let pools = ops
        .replica_urls
        .iter()
        .map(|url| {
            storage::replica::replica_pool(
                url,
                ops.db_login.as_deref(),
                ops.db_role.as_deref(),
                &tuning.replicas,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    for p in &pools {
        tracing::info!(standby = %p.name, "as-of reads this standby has replayed are served there");
    }
    Ok(crate::service::Replicas::new(
        pools,
        primary.clone(),
        tuning.replicas,
    ))
}

/// What the transport serves: health and reflection (v1, and v1alpha for grpcurl 1.8) open,
/// the ledger inside its access layer.
fn routes(
    health: tonic_health::pb::health_server::HealthServer<
        impl tonic_health::pb::health_server::Health,
    >,
    ledger: Access<SizedLedger>,
) -> Result<tonic::service::Routes, tonic_reflection::server::Error> {
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(crate::grpc::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    Ok(tonic::service::Routes::new(health)
        .add_service(reflection().build_v1()?)
        .add_service(reflection().build_v1alpha()?)
        .add_service(ledger)
        .prepare())
}

/// Health reports SERVING while the database answers (within [`HEALTH_PROBE_TIMEOUT`]) and
/// migrations are current; NOT_SERVING while no primary answers (the pool's connections are
/// made with the URL's `target_session_attrs`, so a standby does not count), and SERVING again
/// once the pool reaches the new one.
async fn probe_health(
    pool: Pool,
    health: tonic_health::server::HealthReporter,
    access: Arc<AccessState>,
) {
    loop {
        tokio::time::sleep(HEALTH_PROBE_INTERVAL).await;
        if access.draining() {
            return;
        }
        let check = async {
            let c = pool.get().await.map_err(storage::StorageError::from)?;
            storage::migrate::is_current(&c).await
        };
        let ok = match tokio::time::timeout(HEALTH_PROBE_TIMEOUT, check).await {
            Ok(Ok(current)) => current,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "health: the database does not answer");
                false
            }
            Err(_) => {
                tracing::debug!(limit = ?HEALTH_PROBE_TIMEOUT, "health: no answer within HEALTH_PROBE_TIMEOUT");
                false
            }
        };
        let status = if ok {
            tonic_health::ServingStatus::Serving
        } else {
            tonic_health::ServingStatus::NotServing
        };
        set_health(&health, status).await;
    }
}

async fn set_health(
    health: &tonic_health::server::HealthReporter,
    status: tonic_health::ServingStatus,
) {
    health.set_service_status("", status).await;
    health.set_service_status("ledger.v1.Ledger", status).await;
}
