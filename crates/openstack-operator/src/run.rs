//! The `run` subcommand: configuration, clients, health and metrics servers, controllers.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use clap::{Args, ValueEnum};
use controllers::framework;
use controllers::{Config, Context};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, Client, CustomResourceExt};
use openstack::Cloud;
use openstack::adapter::{ClientOptions, CloudSelector};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// Log line format.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Garbage-collection mode.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum GcModeArg {
    /// Delete orphans.
    Delete,
    /// Report orphans only.
    Report,
    /// No garbage collection.
    Off,
}

/// A controller that can be switched on or off.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// OpenstackDomain.
    Domain,
    /// OpenstackFlavor.
    Flavor,
    /// OpenstackImage.
    Image,
    /// OpenstackNetwork.
    Network,
    /// OpenstackProject.
    Project,
}

/// Flags of `openstack-operator run`. Every flag can also be set by the environment
/// variable named in its help.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Namespace to watch for OpenstackProjects; empty = all namespaces (cluster-scoped kinds
    /// are always watched cluster-wide).
    #[arg(long, env = "WATCH_NAMESPACE", default_value = "")]
    watch_namespace: String,
    /// Address of /healthz and /readyz.
    #[arg(long, env = "HEALTH_ADDR", default_value = "0.0.0.0:8080")]
    health_addr: SocketAddr,
    /// Port of /metrics (the seed's METRICS_PORT), on all interfaces.
    #[arg(long, env = "METRICS_PORT", default_value_t = 9090)]
    metrics_port: u16,
    /// Address of /metrics; overrides --metrics-port.
    #[arg(long, env = "METRICS_ADDR")]
    metrics_addr: Option<SocketAddr>,
    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Log filter (tracing syntax, e.g. `info,openstack=debug`); RUST_LOG also works. A bare
    /// level applies to the operator's own crates; dependencies stay at `warn` unless named
    /// (e.g. `info,openstack_sdk=info`).
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    log_level: String,
    /// Objects of one kind reconciled at the same time.
    #[arg(long, env = "RECONCILE_CONCURRENCY", default_value_t = 20)]
    concurrency: u16,
    /// Seconds between comparisons of an unchanged object with OpenStack (drift detection).
    #[arg(long, env = "RESYNC_SECONDS", default_value_t = 300)]
    resync_seconds: u64,
    /// OpenStack requests in flight at most.
    #[arg(long, env = "OPENSTACK_MAX_CONCURRENT_CALLS", default_value_t = 10)]
    max_concurrent_calls: usize,
    /// OpenStack requests per second at most (0 = unlimited).
    #[arg(long, env = "OPENSTACK_REQUESTS_PER_SECOND", default_value_t = 20)]
    requests_per_second: u32,
    /// Timeout of one OpenStack request, in seconds.
    #[arg(long, env = "OPENSTACK_API_TIMEOUT_SECONDS", default_value_t = 30)]
    api_timeout_seconds: u64,
    /// Identifier of this cluster in the ownership marks put on OpenStack objects. Must be
    /// unique among the clusters/operators sharing a cloud.
    #[arg(long, env = "CLUSTER_ID", default_value = "default")]
    cluster_id: String,
    /// Roles an OpenstackProject may grant in spec.roleBindings (comma-separated).
    #[arg(
        long,
        env = "ALLOWED_ROLES",
        value_delimiter = ',',
        default_value = "member,reader"
    )]
    allowed_roles: Vec<String>,
    /// Let OpenstackProjects with spec.adopt take over existing Keystone projects.
    #[arg(long, env = "ALLOW_PROJECT_ADOPTION")]
    allow_project_adoption: bool,
    /// Take over objects carrying only the seed operator's tag without spec.adopt
    /// (migration from the seed).
    #[arg(long, env = "ADOPT_LEGACY")]
    adopt_legacy: bool,
    /// Namespaces whose ConfigMaps every OpenstackProject may name in federationRef
    /// (comma-separated); a project's own namespace is always allowed. Only ConfigMaps in
    /// these namespaces may create identity providers, change their remote IDs or name
    /// another domain in sso-domain: a project's own ConfigMap uses an existing IdP as it is.
    #[arg(long, env = "FEDERATION_NAMESPACES", value_delimiter = ',')]
    federation_namespaces: Vec<String>,
    /// Controllers to run (comma-separated); all by default.
    #[arg(
        long,
        env = "CONTROLLERS",
        value_enum,
        value_delimiter = ',',
        default_value = "domain,flavor,image,network,project"
    )]
    controllers: Vec<Kind>,
    /// Seconds before the first retry of a resource waiting for a missing dependency (doubling
    /// on each further failure). A project waiting for its OpenstackDomain is reconciled as
    /// soon as that domain changes, whatever this says.
    #[arg(long, env = "DEPENDENCY_RETRY_SECONDS", default_value_t = 15)]
    dependency_retry_seconds: u64,
    /// Seconds between polls of an image import in progress.
    #[arg(long, env = "IMAGE_POLL_SECONDS", default_value_t = 3)]
    image_poll_seconds: u64,
    /// Run the controllers only while holding a Lease, so several replicas can run with one
    /// active.
    #[arg(long, env = "LEADER_ELECTION")]
    leader_election: bool,
    /// Name of the Lease used for leader election.
    #[arg(
        long,
        env = "LEADER_ELECTION_LEASE",
        default_value = "openstack-operator"
    )]
    lease_name: String,
    /// Namespace of the Lease (the pod's namespace in a cluster).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    lease_namespace: String,
    /// Garbage collection of orphans: `delete` (within the safety valves), `report` (find and
    /// report, delete nothing) or `off`.
    #[arg(long, env = "GC_MODE", value_enum, default_value = "delete")]
    gc_mode: GcModeArg,
    /// Seconds between garbage-collection sweeps (the seed's CLUSTER_GC_INTERVAL_SECONDS).
    #[arg(long, env = "CLUSTER_GC_INTERVAL_SECONDS", default_value_t = 600)]
    gc_interval_seconds: u64,
    /// Seconds an orphan must stay orphaned before it is deleted.
    #[arg(long, env = "GC_GRACE_SECONDS", default_value_t = 300)]
    gc_grace_seconds: u64,
    /// Most orphans deleted per sweep; beyond it a Warning Event is raised and the rest wait.
    #[arg(long, env = "GC_MAX_DELETIONS", default_value_t = 20)]
    gc_max_deletions: usize,
    /// Namespace of the registry ConfigMap `openstack-operator-managed-resources`.
    #[arg(long, env = "REGISTRY_NAMESPACE", default_value = "openstack-operator")]
    registry_namespace: String,
    /// Seconds a leader's Lease stays valid without renewal; a new leader takes over within
    /// about this time after the old one dies.
    #[arg(long, env = "LEASE_DURATION_SECONDS", default_value_t = 15)]
    lease_duration_seconds: u64,
}

/// Readiness: caches synced for every controller and the cloud connected.
struct Health {
    expected: usize,
    synced: AtomicUsize,
    cloud: AtomicBool,
    /// A follower waiting for the Lease: ready to take over, nothing to sync.
    standby: AtomicBool,
}

impl Health {
    fn ready(&self) -> bool {
        self.cloud.load(Ordering::SeqCst)
            && (self.standby.load(Ordering::SeqCst)
                || self.synced.load(Ordering::SeqCst) >= self.expected)
    }
}

fn init_logging(args: &RunArgs) -> anyhow::Result<()> {
    crate::logging::init_logging_with(args.log_format, &args.log_level)
}

pub(crate) async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(h): State<Arc<Health>>) -> impl IntoResponse {
    if h.ready() {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

pub(crate) async fn metrics(State(r): State<Arc<Registry>>) -> impl IntoResponse {
    let mut out = String::new();
    match prometheus_client::encoding::text::encode(&mut out, &r) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            out,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

pub(crate) async fn serve(
    addr: SocketAddr,
    app: Router,
    token: CancellationToken,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    info!(%addr, "listening");
    axum::serve(listener, app)
        .with_graceful_shutdown(token.cancelled_owned())
        .await
        .context("HTTP server")
}

/// Waits until the CRD is served, so a controller never watches a kind the server lacks.
pub(crate) async fn wait_for_crd(
    client: &Client,
    crd: &CustomResourceDefinition,
    token: &CancellationToken,
) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.metadata.name.clone().unwrap_or_default();
    let mut logged = false;
    loop {
        if let Some(found) = api
            .get_opt(&name)
            .await
            .with_context(|| format!("reading CRD {name}"))?
        {
            let established = found
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            if established {
                return Ok(());
            }
        }
        if !logged {
            warn!(crd = %name, "waiting for the CRD to be installed and established (apply deploy/crds)");
            logged = true;
        }
        tokio::select! {
            _ = token.cancelled() => anyhow::bail!("shut down while waiting for CRD {name}"),
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
        }
    }
}

async fn connect_cloud(options: ClientOptions, token: &CancellationToken) -> anyhow::Result<Cloud> {
    let mut delay = Duration::from_secs(1);
    loop {
        match Cloud::connect(&CloudSelector::Env, options.clone()).await {
            Ok(c) => return Ok(c),
            Err(e) if e.is_transient() => {
                warn!(error = %e, "cannot reach OpenStack yet; retrying");
            }
            Err(e) => {
                return Err(anyhow::anyhow!(e).context(
                    "connecting to OpenStack (check OS_CLOUD and OS_CLIENT_CONFIG_FILE)",
                ));
            }
        }
        tokio::select! {
            _ = token.cancelled() => anyhow::bail!("shut down while connecting to OpenStack"),
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(30));
    }
}

/// Cancel `token` on SIGTERM or Ctrl-C.
pub(crate) fn shutdown_on_signal(token: CancellationToken) {
    tokio::spawn(async move {
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(e) => {
                    warn!(error = %e, "cannot listen for SIGTERM");
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::select! {
            _ = term => info!("SIGTERM received; shutting down"),
            _ = tokio::signal::ctrl_c() => info!("interrupt received; shutting down"),
        }
        token.cancel();
    });
}

/// Runs the operator until SIGTERM.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    init_logging(&args)?;
    info!(version = env!("CARGO_PKG_VERSION"), controllers = ?args.controllers, watch_namespace = %args.watch_namespace, "starting openstack-operator");
    let token = CancellationToken::new();
    shutdown_on_signal(token.clone());

    let mut registry = Registry::default();
    let os_metrics = openstack::adapter::Metrics::new();
    os_metrics.register(&mut registry);
    let ctl_metrics = controllers::metrics::Metrics::default();
    ctl_metrics.register(&mut registry);
    let gc_metrics = controllers::gc::GcMetrics::default();
    gc_metrics.register(&mut registry);
    // The seed's `openstack_operator_info{version, cloud}`, so dashboards keep working.
    registry.register(
        "openstack_operator",
        "Operator version and the clouds.yaml entry it uses",
        Info::new(vec![
            ("version".to_string(), env!("CARGO_PKG_VERSION").to_string()),
            (
                "cloud".to_string(),
                std::env::var("OS_CLOUD").unwrap_or_default(),
            ),
        ]),
    );
    let registry = Arc::new(registry);

    let mut kinds: Vec<Kind> = args.controllers.clone();
    kinds.sort();
    kinds.dedup();
    let health = Arc::new(Health {
        expected: kinds.len(),
        synced: AtomicUsize::new(0),
        cloud: AtomicBool::new(false),
        standby: AtomicBool::new(false),
    });
    let health_app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(health.clone());
    let metrics_app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(registry.clone());
    let metrics_addr = args
        .metrics_addr
        .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], args.metrics_port)));
    let mut servers = tokio::task::JoinSet::new();
    servers.spawn(serve(args.health_addr, health_app, token.clone()));
    servers.spawn(serve(metrics_addr, metrics_app, token.clone()));

    let client = Client::try_default()
        .await
        .context("connecting to Kubernetes (KUBECONFIG or in-cluster)")?;
    let options = ClientOptions {
        max_concurrent: args.max_concurrent_calls.max(1),
        requests_per_second: args.requests_per_second,
        timeout: Duration::from_secs(args.api_timeout_seconds.max(1)),
        metrics: os_metrics,
        ..ClientOptions::default()
    };
    // Each OpenstackCloud gets a client of its own from these options (its own limits and
    // its name on the per-cloud metrics); the operator's own cloud is `(default)` there.
    let cloud_options = options.clone();
    let rotation_options = options.clone();
    let own_options = ClientOptions {
        metrics: options.metrics.with_cloud("(default)"),
        ..options
    };
    let cloud = connect_cloud(own_options, &token).await?;
    health.cloud.store(true, Ordering::SeqCst);
    info!("connected to OpenStack");

    let config = Config {
        cluster_id: args.cluster_id.clone(),
        resync: Duration::from_secs(args.resync_seconds.max(10)),
        allowed_roles: args
            .allowed_roles
            .iter()
            .map(|r| r.trim().to_string())
            .filter(|r| !r.is_empty())
            .collect(),
        allow_project_adoption: args.allow_project_adoption,
        adopt_legacy: args.adopt_legacy,
        federation_namespaces: args
            .federation_namespaces
            .iter()
            .cloned()
            .collect::<BTreeSet<_>>(),
        image_poll: Duration::from_secs(args.image_poll_seconds.max(1)),
        dependency_retry: Duration::from_secs(args.dependency_retry_seconds.max(1)),
    };
    let instance = Some(instance_name());
    let ctx = Arc::new(
        Context::new(client.clone(), cloud, config, ctl_metrics, instance)
            .with_cloud_options(cloud_options),
    );

    // With leader election, wait for the Lease before touching anything; losing it later
    // stops the controllers and ends the process, so a restart comes back as a follower.
    let lost_leadership = Arc::new(AtomicBool::new(false));
    let mut lease_task = None;
    if args.leader_election {
        let identity = format!("{}-{}", instance_name(), std::process::id());
        let manager =
            kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &args.lease_name)
                .with_namespace(&args.lease_namespace)
                .with_identity(&identity)
                .with_duration(args.lease_duration_seconds.max(2))
                .with_grace(2)
                .build()
                .await
                .context("setting up leader election")?;
        let (mut leader, handle) = manager.watch().await;
        lease_task = Some(handle);
        info!(lease = %args.lease_name, namespace = %args.lease_namespace, %identity, "waiting for leadership");
        health.standby.store(true, Ordering::SeqCst);
        while !*leader.borrow_and_update() {
            tokio::select! {
                _ = token.cancelled() => return Ok(()),
                changed = leader.changed() => { changed.context("leader election stopped")?; }
            }
        }
        health.standby.store(false, Ordering::SeqCst);
        info!(%identity, "acquired leadership");
        let (token, lost) = (token.clone(), lost_leadership.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = token.cancelled() => break,
                    changed = leader.changed() => {
                        if changed.is_err() || !*leader.borrow_and_update() {
                            warn!("lost leadership; stopping the controllers");
                            lost.store(true, Ordering::SeqCst);
                            token.cancel();
                            break;
                        }
                    }
                }
            }
            // Dropping the receiver makes the lease manager release the Lease.
            drop(leader);
        });
    }

    let mut controllers = tokio::task::JoinSet::new();
    // The sweeper runs only here, after leadership (if any) was acquired.
    let gc_config = controllers::gc::GcConfig {
        mode: match args.gc_mode {
            GcModeArg::Delete => controllers::gc::GcMode::Delete,
            GcModeArg::Report => controllers::gc::GcMode::Report,
            GcModeArg::Off => controllers::gc::GcMode::Off,
        },
        interval: Duration::from_secs(args.gc_interval_seconds.max(1)),
        grace: Duration::from_secs(args.gc_grace_seconds),
        max_deletions: args.gc_max_deletions,
        registry_namespace: args.registry_namespace.clone(),
    };
    {
        let (ctx, token) = (ctx.clone(), token.clone());
        let sweeper = controllers::gc::Sweeper::new(gc_config, gc_metrics);
        tokio::spawn(async move { sweeper.run(&ctx, token).await });
    }
    {
        // Credential rotation of the OpenstackClouds asking for it, on the leader only.
        let (ctx, token) = (ctx.clone(), token.clone());
        let rotator = controllers::rotation::run::Rotator::new(rotation_options);
        tokio::spawn(async move { rotator.run(ctx, token).await });
    }
    let domain_watch = kinds.contains(&Kind::Domain);
    for kind in kinds {
        let crd = match kind {
            Kind::Domain => api::OpenstackDomain::crd(),
            Kind::Flavor => api::OpenstackFlavor::crd(),
            Kind::Image => api::OpenstackImage::crd(),
            Kind::Network => api::OpenstackNetwork::crd(),
            Kind::Project => api::OpenstackProject::crd(),
        };
        wait_for_crd(&client, &crd, &token).await?;
        let (ctx, token, health) = (ctx.clone(), token.clone(), health.clone());
        let ready = move || {
            health.synced.fetch_add(1, Ordering::SeqCst);
        };
        let shutdown = token.clone().cancelled_owned();
        let c = client.clone();
        let concurrency = args.concurrency;
        match kind {
            Kind::Domain => controllers.spawn(framework::run::<api::OpenstackDomain>(
                ctx,
                Api::all(c),
                concurrency,
                shutdown,
                ready,
            )),
            Kind::Flavor => controllers.spawn(framework::run::<api::OpenstackFlavor>(
                ctx,
                Api::all(c),
                concurrency,
                shutdown,
                ready,
            )),
            Kind::Image => controllers.spawn(framework::run::<api::OpenstackImage>(
                ctx,
                Api::all(c),
                concurrency,
                shutdown,
                ready,
            )),
            Kind::Network => controllers.spawn(framework::run::<api::OpenstackNetwork>(
                ctx,
                Api::all(c),
                concurrency,
                shutdown,
                ready,
            )),
            Kind::Project => {
                let api: Api<api::OpenstackProject> = if args.watch_namespace.is_empty() {
                    Api::all(c)
                } else {
                    Api::namespaced(c, &args.watch_namespace)
                };
                controllers.spawn(controllers::project::run_controller(
                    ctx,
                    api,
                    concurrency,
                    shutdown,
                    ready,
                    domain_watch,
                ))
            }
        };
        info!(?kind, "controller started");
    }
    while let Some(res) = controllers.join_next().await {
        if let Err(e) = res {
            warn!(error = %e, "a controller task failed");
        }
        // A controller stops only on shutdown; make sure everything else stops too.
        token.cancel();
    }
    while let Some(res) = servers.join_next().await {
        match res {
            Ok(Err(e)) => warn!(error = %e, "server stopped with an error"),
            Err(e) => warn!(error = %e, "server task failed"),
            Ok(Ok(())) => {}
        }
    }
    if let Some(handle) = lease_task {
        // Give the lease manager a moment to release the Lease for a fast hand-over.
        let _ = tokio::time::timeout(Duration::from_secs(5), handle).await;
    }
    if lost_leadership.load(Ordering::SeqCst) {
        anyhow::bail!("lost leadership");
    }
    info!("stopped");
    Ok(())
}

pub(crate) fn instance_name() -> String {
    std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "openstack-operator".to_string())
}
