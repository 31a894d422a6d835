//! The `control-plane` subcommand: the control-plane operator (OpenStackExternalService,
//! Keystone, OpenStackCluster). It needs no OpenStack credentials: it deploys OpenStack.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use clap::{Args, ValueEnum};
use controlplane_controllers::{Config, Ctx, Metrics};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client, CustomResourceExt};
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::logging::init_logging_with;
use crate::run::{
    LogFormat, healthz, instance_name, metrics, serve, shutdown_on_signal, wait_for_crd,
};

/// How long stopping controllers may take before they are aborted.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

/// A control-plane controller.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq, PartialOrd, Ord)]
pub enum CpKind {
    /// OpenStackExternalService.
    ExternalService,
    /// Keystone.
    Keystone,
    /// Placement.
    Placement,
    /// Nova.
    Nova,
    /// Cinder.
    Cinder,
    /// Glance.
    Glance,
    /// Neutron.
    Neutron,
    /// Horizon.
    Horizon,
    /// OpenStackCluster.
    Cluster,
}

/// Flags of `openstack-operator control-plane`.
#[derive(Args, Debug)]
pub struct ControlPlaneArgs {
    /// Namespace to watch; empty = all namespaces.
    #[arg(long, env = "WATCH_NAMESPACE", default_value = "")]
    watch_namespace: String,
    /// Address of /healthz and /readyz.
    #[arg(long, env = "HEALTH_ADDR", default_value = "0.0.0.0:8081")]
    health_addr: SocketAddr,
    /// Address of /metrics.
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:9091")]
    metrics_addr: SocketAddr,
    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Log filter (tracing syntax).
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    log_level: String,
    /// Controllers to run (comma-separated); all by default.
    #[arg(
        long,
        env = "CONTROLLERS",
        value_enum,
        value_delimiter = ',',
        default_value = "external-service,keystone,placement,glance,neutron,horizon,nova,cinder,cluster"
    )]
    controllers: Vec<CpKind>,
    /// Seconds between checks of an unchanged external service.
    #[arg(long, env = "CHECK_INTERVAL_SECONDS", default_value_t = 60)]
    check_interval_seconds: u64,
    /// Timeout of one external-service check or token probe, in seconds.
    #[arg(long, env = "CHECK_TIMEOUT_SECONDS", default_value_t = 10)]
    check_timeout_seconds: u64,
    /// Seconds before the first retry of a failed Job (doubled per failure).
    #[arg(long, env = "JOB_RETRY_BASE_SECONDS", default_value_t = 30)]
    job_retry_base_seconds: u64,
    /// Longest delay between Job attempts, in seconds.
    #[arg(long, env = "JOB_RETRY_MAX_SECONDS", default_value_t = 600)]
    job_retry_max_seconds: u64,
    /// Seconds a Secret update may take to reach every pod's mounted volume (the kubelet's sync
    /// period plus its cache TTL): a new credential key set is migrated only once it is older.
    #[arg(long, env = "SECRET_PROPAGATION_SECONDS", default_value_t = 180)]
    secret_propagation_seconds: u64,
    /// Seconds between looks at a Ready object (drift, token probe, key rotation).
    #[arg(long, env = "RESYNC_SECONDS", default_value_t = 300)]
    resync_seconds: u64,
    /// Identity URL of a Keystone for an operator outside the cluster network:
    /// `NAMESPACE/NAME=http://host:port/v3` (repeatable).
    #[arg(
        long = "keystone-url",
        env = "KEYSTONE_URL_OVERRIDES",
        value_delimiter = ','
    )]
    keystone_urls: Vec<String>,
    /// API URL of a service CR for an operator outside the cluster network:
    /// `SERVICE/NAMESPACE/NAME=http://host:port`, e.g. `placement/os/cloud-placement=...`
    /// (repeatable).
    #[arg(long = "api-url", env = "API_URL_OVERRIDES", value_delimiter = ',')]
    api_urls: Vec<String>,
    /// Address of the validating admission webhook (HTTPS, `/validate`); none disables it.
    /// The cross-object checks it makes are in docs/control-plane.md ("Admission").
    #[arg(long, env = "WEBHOOK_ADDR")]
    webhook_addr: Option<SocketAddr>,
    /// PEM certificate chain the webhook serves (e.g. a cert-manager `tls.crt`).
    #[arg(
        long,
        env = "WEBHOOK_CERT_FILE",
        default_value = "/tmp/k8s-webhook-server/serving-certs/tls.crt"
    )]
    webhook_cert_file: std::path::PathBuf,
    /// PEM private key of the webhook's certificate.
    #[arg(
        long,
        env = "WEBHOOK_KEY_FILE",
        default_value = "/tmp/k8s-webhook-server/serving-certs/tls.key"
    )]
    webhook_key_file: std::path::PathBuf,
}

struct Health {
    expected: usize,
    started: std::sync::atomic::AtomicUsize,
    failed: AtomicBool,
}

async fn readyz(State(h): State<Arc<Health>>) -> impl IntoResponse {
    if !h.failed.load(Ordering::SeqCst) && h.started.load(Ordering::SeqCst) >= h.expected {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

fn api<K>(client: &Client, ns: &str) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    if ns.is_empty() {
        Api::all(client.clone())
    } else {
        Api::namespaced(client.clone(), ns)
    }
}

/// What a service controller watches besides its own kind.
fn watched(client: &Client, ns: &str) -> controlplane_controllers::service::Watched {
    controlplane_controllers::service::Watched {
        externals: api(client, ns),
        keystones: api(client, ns),
        jobs: api::<Job>(client, ns),
        deployments: api::<Deployment>(client, ns),
        secrets: api::<Secret>(client, ns),
    }
}

/// Runs the control-plane controllers until SIGTERM.
pub async fn run(args: ControlPlaneArgs) -> anyhow::Result<()> {
    init_logging_with(args.log_format, &args.log_level)?;
    let mut overrides = BTreeMap::new();
    for o in &args.keystone_urls {
        let (k, v) = o
            .split_once('=')
            .with_context(|| format!("--keystone-url {o:?}: expected NAMESPACE/NAME=URL"))?;
        if !k.contains('/') || !(v.starts_with("http://") || v.starts_with("https://")) {
            anyhow::bail!("--keystone-url {o:?}: expected NAMESPACE/NAME=http(s)://host:port/v3");
        }
        overrides.insert(k.to_string(), v.to_string());
    }
    let mut api_overrides = BTreeMap::new();
    for o in &args.api_urls {
        let (k, v) = o
            .split_once('=')
            .with_context(|| format!("--api-url {o:?}: expected SERVICE/NAMESPACE/NAME=URL"))?;
        if k.split('/').count() != 3 || !(v.starts_with("http://") || v.starts_with("https://")) {
            anyhow::bail!("--api-url {o:?}: expected SERVICE/NAMESPACE/NAME=http(s)://host:port");
        }
        api_overrides.insert(k.to_string(), v.to_string());
    }
    let mut kinds = args.controllers.clone();
    kinds.sort();
    kinds.dedup();
    info!(version = env!("CARGO_PKG_VERSION"), controllers = ?kinds, "starting the control-plane operator");
    let token = CancellationToken::new();
    shutdown_on_signal(token.clone());
    let mut registry = Registry::default();
    let m = Metrics::default();
    m.register(&mut registry);
    let registry = Arc::new(registry);
    let health = Arc::new(Health {
        expected: kinds.len(),
        started: Default::default(),
        failed: AtomicBool::new(false),
    });
    let mut servers = tokio::task::JoinSet::new();
    servers.spawn(serve(
        args.health_addr,
        Router::new()
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .with_state(health.clone()),
        token.clone(),
    ));
    servers.spawn(serve(
        args.metrics_addr,
        Router::new()
            .route("/metrics", get(metrics))
            .with_state(registry),
        token.clone(),
    ));

    let client = Client::try_default()
        .await
        .context("connecting to Kubernetes (KUBECONFIG or in-cluster)")?;
    let webhook_failed = Arc::new(AtomicBool::new(false));
    if let Some(addr) = args.webhook_addr {
        let cfg = crate::webhook::WebhookConfig {
            addr,
            cert: args.webhook_cert_file.clone(),
            key: args.webhook_key_file.clone(),
        };
        // A webhook that cannot start (unreadable certificate, address in use) stops the
        // operator: with failurePolicy Fail, the API server would refuse every write anyway.
        let webhook_client = client.clone();
        let webhook_stop = token.clone();
        let failed = webhook_failed.clone();
        servers.spawn(async move {
            let r = crate::webhook::serve(cfg, webhook_client, webhook_stop.clone()).await;
            if let Err(e) = &r {
                error!(error = %format!("{e:#}"), "the admission webhook cannot serve; stopping");
                failed.store(true, Ordering::SeqCst);
                webhook_stop.cancel();
            }
            r
        });
    }
    let config = Config {
        check_interval: Duration::from_secs(args.check_interval_seconds.max(1)),
        check_timeout: Duration::from_secs(args.check_timeout_seconds.max(1)),
        job_retry_base: Duration::from_secs(args.job_retry_base_seconds.max(1)),
        job_retry_max: Duration::from_secs(args.job_retry_max_seconds.max(1)),
        resync: Duration::from_secs(args.resync_seconds.max(5)),
        secret_propagation: Duration::from_secs(args.secret_propagation_seconds),
        keystone_url_overrides: overrides,
        api_url_overrides: api_overrides,
        tolerance: controlplane_controllers::hysteresis::Tolerance::default(),
    };
    let ctx = Ctx::new(client.clone(), config, m, Some(instance_name()));
    let ns = args.watch_namespace.clone();
    let mut tasks = tokio::task::JoinSet::new();
    for kind in kinds {
        if token.is_cancelled() {
            break;
        }
        let crd = match kind {
            CpKind::ExternalService => controlplane_api::OpenStackExternalService::crd(),
            CpKind::Keystone => controlplane_api::Keystone::crd(),
            CpKind::Placement => controlplane_api::Placement::crd(),
            CpKind::Nova => controlplane_api::Nova::crd(),
            CpKind::Cinder => controlplane_api::Cinder::crd(),
            CpKind::Glance => controlplane_api::Glance::crd(),
            CpKind::Neutron => controlplane_api::Neutron::crd(),
            CpKind::Horizon => controlplane_api::Horizon::crd(),
            CpKind::Cluster => controlplane_api::OpenStackCluster::crd(),
        };
        wait_for_crd(&client, &crd, &token).await?;
        let shutdown = token.clone().cancelled_owned();
        let ctx = ctx.clone();
        match kind {
            CpKind::ExternalService => tasks.spawn(controlplane_controllers::external::run(
                ctx,
                api(&client, &ns),
                api::<Secret>(&client, &ns),
                shutdown,
            )),
            CpKind::Keystone => {
                wait_for_crd(
                    &client,
                    &controlplane_api::OpenStackExternalService::crd(),
                    &token,
                )
                .await?;
                tasks.spawn(controlplane_controllers::keystone::run(
                    ctx,
                    api(&client, &ns),
                    watched(&client, &ns),
                    shutdown,
                ))
            }
            CpKind::Placement => {
                for crd in [
                    controlplane_api::OpenStackExternalService::crd(),
                    controlplane_api::Keystone::crd(),
                ] {
                    wait_for_crd(&client, &crd, &token).await?;
                }
                tasks.spawn(controlplane_controllers::placement::run(
                    ctx,
                    api(&client, &ns),
                    watched(&client, &ns),
                    shutdown,
                ))
            }
            CpKind::Nova => {
                for crd in [
                    controlplane_api::OpenStackExternalService::crd(),
                    controlplane_api::Keystone::crd(),
                    controlplane_api::Placement::crd(),
                ] {
                    wait_for_crd(&client, &crd, &token).await?;
                }
                tasks.spawn(controlplane_controllers::nova::run(
                    ctx,
                    api(&client, &ns),
                    watched(&client, &ns),
                    shutdown,
                ))
            }
            CpKind::Cinder => {
                for crd in [
                    controlplane_api::OpenStackExternalService::crd(),
                    controlplane_api::Keystone::crd(),
                ] {
                    wait_for_crd(&client, &crd, &token).await?;
                }
                tasks.spawn(controlplane_controllers::cinder::run(
                    ctx,
                    api(&client, &ns),
                    watched(&client, &ns),
                    shutdown,
                ))
            }
            CpKind::Glance | CpKind::Neutron | CpKind::Horizon => {
                for crd in [
                    controlplane_api::OpenStackExternalService::crd(),
                    controlplane_api::Keystone::crd(),
                ] {
                    wait_for_crd(&client, &crd, &token).await?;
                }
                let w = watched(&client, &ns);
                match kind {
                    CpKind::Glance => tasks.spawn(controlplane_controllers::glance::run(
                        ctx,
                        api(&client, &ns),
                        w,
                        shutdown,
                    )),
                    CpKind::Neutron => tasks.spawn(controlplane_controllers::neutron::run(
                        ctx,
                        api(&client, &ns),
                        w,
                        shutdown,
                    )),
                    _ => tasks.spawn(controlplane_controllers::horizon::run(
                        ctx,
                        api(&client, &ns),
                        w,
                        shutdown,
                    )),
                }
            }
            CpKind::Cluster => {
                for crd in [
                    controlplane_api::Keystone::crd(),
                    controlplane_api::Placement::crd(),
                    controlplane_api::Nova::crd(),
                    controlplane_api::Cinder::crd(),
                    controlplane_api::Glance::crd(),
                    controlplane_api::Neutron::crd(),
                    controlplane_api::Horizon::crd(),
                ] {
                    wait_for_crd(&client, &crd, &token).await?;
                }
                tasks.spawn(controlplane_controllers::cluster::run(
                    ctx,
                    api(&client, &ns),
                    api(&client, &ns),
                    api(&client, &ns),
                    controlplane_controllers::cluster::ComputeKinds {
                        novas: api(&client, &ns),
                        cinders: api(&client, &ns),
                    },
                    controlplane_controllers::cluster::NetworkImageApis {
                        glances: api(&client, &ns),
                        neutrons: api(&client, &ns),
                        horizons: api(&client, &ns),
                    },
                    shutdown,
                ))
            }
        };
        health.started.fetch_add(1, Ordering::SeqCst);
        info!(?kind, "control-plane controller started");
    }
    // Once stopping, the controllers get a bounded grace period to finish their reconciles
    // (within the pod's terminationGracePeriodSeconds, 30 s); one that does not stop (seen
    // with a controller started after the stop was signalled) is aborted, so the process
    // always exits.
    let grace = async {
        token.cancelled().await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    tokio::pin!(grace);
    loop {
        tokio::select! {
            res = tasks.join_next() => {
                let Some(res) = res else { break };
                if let Err(e) = res {
                    warn!(error = %e, "a control-plane controller task failed");
                    health.failed.store(true, Ordering::SeqCst);
                }
                token.cancel();
            }
            () = &mut grace => {
                warn!(grace = ?SHUTDOWN_GRACE, "controllers still running after the grace period; aborting them");
                tasks.abort_all();
                while tasks.join_next().await.is_some() {}
                break;
            }
        }
    }
    while let Some(res) = servers.join_next().await {
        if let Ok(Err(e)) = res {
            warn!(error = %e, "server stopped with an error");
        }
    }
    // A non-zero exit makes the failure visible (CrashLoopBackOff, the container's last
    // state) instead of a silent, clean stop.
    if webhook_failed.load(Ordering::SeqCst) {
        anyhow::bail!("the admission webhook could not serve (see the error above)");
    }
    info!("stopped");
    Ok(())
}
