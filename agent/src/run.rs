//! Wiring: start-up steps in order, then the long-lived tasks under one CancellationToken.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use fleetbus_schemas::jetstream::Layout;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::bootstrap::{self, BootstrapError};
use crate::bus::connect::{self, NatsError};
use crate::bus::{self, layout::LayoutError};
use crate::config::Config;
use crate::context::Context;
use crate::health::{self, HealthError, Readiness};
use crate::identity::{self, IdentityError};
use crate::kube::client::{self, KubeClientError};
use crate::kubeconfig::{self, KubeconfigError};
use crate::metrics::Metrics;
use crate::nodes;
use crate::registry::record::MemberState;
use crate::registry::{self, publisher, watcher, Registry, RegistryError};

/// Why the agent stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No Kubernetes client could be built.
    #[error(transparent)]
    KubeClient(#[from] KubeClientError),
    /// CRDs or namespace could not be prepared.
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    /// The cluster identity could not be read.
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// NATS refused us or is unsuitable.
    #[error(transparent)]
    Nats(#[from] NatsError),
    /// The registry bucket or a stream could not be created, or exists with another configuration.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// The metrics server failed.
    #[error(transparent)]
    Health(#[from] HealthError),
    /// A registry step at start-up failed for good.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// A long-lived task failed for good.
    #[error(transparent)]
    Task(#[from] TaskError),
    /// The published kubeconfig cannot be built from our own configuration.
    #[error(transparent)]
    Kubeconfig(#[from] KubeconfigError),
    /// This cluster's ClusterProperties say it has another name.
    #[error(transparent)]
    ClusterProperty(#[from] crate::inventory::IdentityPropertyError),
    /// A task panicked.
    #[error("task {0} panicked")]
    Panicked(&'static str),
}

impl RunError {
    /// Whether restarting the agent later could help (e.g. for a supervisor's backoff).
    pub fn is_transient(&self) -> bool {
        match self {
            RunError::KubeClient(e) => e.is_transient(),
            RunError::Bootstrap(e) => e.is_transient(),
            RunError::Identity(e) => e.is_transient(),
            RunError::Nats(e) => e.is_transient(),
            RunError::Layout(e) => e.is_transient(),
            RunError::Health(e) => e.is_transient(),
            RunError::Registry(e) => e.is_transient(),
            RunError::Task(e) => e.is_transient(),
            RunError::Kubeconfig(e) => e.is_transient(),
            RunError::ClusterProperty(e) => e.is_transient(),
            RunError::Panicked(_) => false,
        }
    }
}

/// This cluster's copy-mark key, read or made (retried while the error is
/// transient). Refused for good (RBAC, the namespace being deleted), sync
/// goes on with a key of this run (`copy_mark::ephemeral`), said loudly.
async fn copy_mark(
    client: &kube::Client,
    namespace: &str,
    metrics: &Metrics,
) -> crate::mark::CopyMark {
    match retry(
        "read the copy-mark key",
        || crate::copy_mark::load(client, namespace),
        crate::copy_mark::CopyMarkError::is_transient,
    )
    .await
    {
        Ok(mark) => mark,
        Err(error) => {
            tracing::error!(error = %crate::report(&error), "cannot store this cluster's copy-mark key; marking copies with a key of this run only");
            metrics.copy_mark_ephemeral.set(1);
            crate::copy_mark::ephemeral()
        }
    }
}

/// How long start-up waits for a freshly applied CRD to be served.
const CRD_SERVE_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs the agent until `shutdown` fires (then leaves the fleet gracefully)
/// or a non-transient error occurs.
pub async fn run(cfg: Config, shutdown: CancellationToken) -> Result<(), RunError> {
    let metrics = Arc::new(Metrics::new());
    let readiness = Arc::new(Readiness::default());
    // Serve /healthz from the first moment, /readyz turns 200 later.
    let (addr, serve) = health::bind(
        cfg.metrics_addr,
        readiness.clone(),
        metrics.clone(),
        shutdown.child_token(),
    )
    .await?;
    tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    let health_task = tokio::spawn(serve.instrument(tracing::info_span!("health", %addr)));

    let started = tokio::select! {
        _ = shutdown.cancelled() => None,
        r = start(&cfg, metrics, readiness) => Some(r?),
    };
    let result = match started {
        Some((reg, server)) => run_tasks(reg, server, &shutdown).await,
        None => Ok(()),
    };
    shutdown.cancel();
    match health_task.await {
        Ok(r) => r?,
        Err(_) => return Err(RunError::Panicked("health")),
    }
    result
}

/// The start-up sequence. Each step that can fail transiently is retried.
async fn start(
    cfg: &Config,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
) -> Result<(Arc<Registry>, Option<kubeconfig::ServerInfo>), RunError> {
    let (client, kube_config) = client::build(cfg.kubeconfig.as_deref()).await?;
    let server = if cfg.publish_kubeconfig {
        Some(kubeconfig::ServerInfo::from_config(
            &kube_config,
            cfg.advertise_server.as_deref(),
        )?)
    } else {
        None
    };
    let cluster_id = retry(
        "read cluster identity",
        || identity::cluster_id(&client),
        IdentityError::is_transient,
    )
    .await?;
    tracing::info!(cluster = %cfg.cluster_name, cluster_id = %cluster_id, "identified local cluster");
    if cfg.install_crds {
        retry(
            "install CRDs",
            || bootstrap::install_crds(&client),
            BootstrapError::is_transient,
        )
        .await?;
    }
    bootstrap::wait_served(&client, CRD_SERVE_TIMEOUT).await?;
    retry(
        "ensure namespace",
        || bootstrap::ensure_namespace(&client, &cfg.namespace),
        BootstrapError::is_transient,
    )
    .await?;
    claim_name(&client, cfg).await?;
    let mark = copy_mark(&client, &cfg.namespace, &metrics).await;
    readiness
        .kube
        .store(true, std::sync::atomic::Ordering::Relaxed);

    let nats_client = retry(
        "connect to NATS",
        || {
            connect::connect(
                &cfg.nats_url,
                &cfg.nats_auth,
                &cfg.cluster_name,
                readiness.clone(),
            )
        },
        NatsError::is_transient,
    )
    .await?;
    let server_version = nats_client.server_info().version;
    connect::check_server_version(&server_version)?;
    tracing::info!(version = %server_version, "NATS server version accepted");
    let js = async_nats::jetstream::new(nats_client);
    // Every stream and bucket name, limit and replica count comes from the
    // schemas layout; --replicas must match the NATS deployment (1 or 3+).
    let layout = Layout::new(cfg.subject_prefix.clone(), cfg.replicas);
    let ensured = retry(
        "set up the bus layout",
        || bus::layout::ensure(&js, &layout),
        LayoutError::is_transient,
    )
    .await?;

    let ctx = Arc::new(Context::new(
        cfg.clone(),
        cluster_id,
        (client, kube_config),
        (js, layout),
        metrics,
        readiness,
        mark,
    ));
    let reg = Arc::new(Registry::new(ctx, ensured.kv, ensured.beats));
    reg.note_bucket_incarnation(&ensured.bucket_incarnation);
    // The first record carries the metadata; the Node watch keeps it current.
    match crate::metadata::gather(&reg.ctx.client).await {
        Ok(md) => reg.update_local_info(|i| i.metadata = md),
        Err(error) => tracing::warn!(
            error = %crate::report(&error),
            transient = error.is_transient(),
            "could not detect cluster metadata yet; the Node watch will"
        ),
    }
    retry(
        "read this cluster's labels and features",
        || registry::preload_local(&reg),
        RegistryError::is_transient,
    )
    .await?;
    // Our own record goes in before the watch starts: the bucket is then never
    // empty, so the watch always delivers a "caught up" entry.
    retry(
        "publish the cluster record",
        || publisher::publish(&reg, MemberState::Active),
        RegistryError::is_transient,
    )
    .await?;
    // Likewise our first beat, before the beats watch starts.
    retry(
        "put the first beat",
        || publisher::put_beat(&reg, publisher::current_interval(&reg)),
        RegistryError::is_transient,
    )
    .await?;
    Ok((reg, server))
}

/// Refuses to start when the cluster's `cluster.clusterset.k8s.io`
/// ClusterProperty names it otherwise than `--cluster-name`, and claims the
/// name when it has none. Without the CRD there is nothing to check yet:
/// the inventory task claims it once the CRD is served.
async fn claim_name(client: &kube::Client, cfg: &Config) -> Result<(), RunError> {
    let served = retry(
        "discover the ClusterProperty kind",
        || async {
            crate::inventory::identity::served(client)
                .await
                .map_err(|source| crate::inventory::IdentityPropertyError::Kube {
                    action: "discover",
                    name: crate::inventory::identity::CRD.to_owned(),
                    source,
                })
        },
        crate::inventory::IdentityPropertyError::is_transient,
    )
    .await?;
    if let Some(ar) = served {
        retry(
            "claim this cluster's name in its ClusterSet",
            || crate::inventory::identity::claim(client, &ar, &cfg.cluster_name),
            crate::inventory::IdentityPropertyError::is_transient,
        )
        .await?;
    }
    Ok(())
}

/// Runs the long-lived tasks; the first to fail stops the others.
async fn run_tasks(
    reg: Arc<Registry>,
    server: Option<kubeconfig::ServerInfo>,
    shutdown: &CancellationToken,
) -> Result<(), RunError> {
    let cancel = shutdown.child_token();
    let mut tasks = tokio::task::JoinSet::new();
    // Which task a JoinError (a panic) belongs to.
    let mut names = std::collections::HashMap::new();
    let span = tracing::Span::current();
    let mut spawn = |name: &'static str, f: TaskFuture| {
        let handle = tasks.spawn(named(name, f).instrument(span.clone()));
        names.insert(handle.id(), name);
    };
    spawn("watcher", task(watcher::run(reg.clone(), cancel.clone())));
    spawn(
        "beats_watcher",
        task(watcher::run_beats(reg.clone(), cancel.clone())),
    );
    spawn(
        "reconciler",
        task(registry::run_reconciler(reg.clone(), cancel.clone())),
    );
    spawn("nodes", task(nodes::run(reg.clone(), cancel.clone())));
    spawn(
        "api_probe",
        task(registry::run_api_probe(reg.clone(), cancel.clone())),
    );
    spawn("sync", task(crate::sync::run(reg.clone(), cancel.clone())));
    spawn(
        "label_cmd",
        task(registry::label_cmd::run(reg.clone(), cancel.clone())),
    );
    // Cancelled like the others, the publisher then publishes the leave record.
    spawn(
        "publisher",
        task(publisher::run(reg.clone(), cancel.clone())),
    );
    {
        let (reg, cancel) = (reg.clone(), cancel.clone());
        spawn(
            "inventory",
            task(async move {
                crate::inventory::run(reg, cancel).await;
                Ok::<(), TaskError>(())
            }),
        );
    }
    {
        let (reg, cancel) = (reg.clone(), cancel.clone());
        spawn(
            "services",
            task(async move {
                crate::services::run(reg, cancel).await;
                Ok::<(), TaskError>(())
            }),
        );
    }
    if let Some(server) = server {
        let (reg, cancel) = (reg.clone(), cancel.clone());
        spawn(
            "kubeconfig",
            task(async move {
                kubeconfig::run(reg, server, cancel).await;
                Ok::<(), TaskError>(())
            }),
        );
    }
    let mut result = Ok(());
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((name, Ok(()))) => tracing::debug!(task = name, "task finished"),
            Ok((name, Err(e))) => {
                tracing::error!(task = name, error = %crate::report(&e), "task failed");
                if result.is_ok() {
                    result = Err(RunError::Task(e));
                }
            }
            Err(e) => {
                let name = names.get(&e.id()).copied().unwrap_or("registry");
                tracing::error!(task = name, "task panicked");
                if result.is_ok() {
                    result = Err(RunError::Panicked(name));
                }
            }
        }
        // One task ending means the agent is stopping: stop the rest.
        cancel.cancel();
    }
    result
}

/// Why a long-lived task stopped for good.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// A registry task (publisher, watcher, reconciler, probes).
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The sync task.
    #[error(transparent)]
    Sync(#[from] crate::sync::SyncError),
}

impl TaskError {
    /// Whether restarting the agent later could help.
    pub fn is_transient(&self) -> bool {
        match self {
            TaskError::Registry(e) => e.is_transient(),
            TaskError::Sync(e) => e.is_transient(),
        }
    }
}

/// A long-lived task.
type TaskFuture = std::pin::Pin<Box<dyn Future<Output = Result<(), TaskError>> + Send>>;

/// Boxes a task whose error converts into [`TaskError`].
fn task<F, E>(f: F) -> TaskFuture
where
    F: Future<Output = Result<(), E>> + Send + 'static,
    E: Into<TaskError>,
{
    Box::pin(async move { f.await.map_err(Into::into) })
}

async fn named(name: &'static str, f: TaskFuture) -> (&'static str, Result<(), TaskError>) {
    (name, f.await)
}

/// Retries `op` with exponential backoff (capped at 5s) while `transient` says so.
async fn retry<T, E, F, Fut>(what: &'static str, op: F, transient: fn(&E) -> bool) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: std::error::Error,
{
    op.retry(
        ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(200))
            .with_max_delay(Duration::from_secs(5))
            .without_max_times(),
    )
    .when(transient)
    .notify(|e: &E, delay| {
        tracing::warn!(step = what, error = %crate::report(e), ?delay, "start-up step failed; retrying");
    })
    .await
}
