//! `openstack-operator virtual-kubelet`: a Node whose pods run as Zun containers.
//!
//! Credentials as the seed provider takes them (the `OS_*` variables of an
//! RC file) or clouds.yaml (`OS_CLOUD`, `OS_CLIENT_CONFIG_FILE`); the
//! Kubernetes API from `KUBECONFIG` or the in-cluster service account.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};
use k8s_openapi::api::core::v1::Taint;
use kube::Client;
use openstack::adapter::{ClientOptions, CloudSelector, ContainerAdapter, Core};
use tokio_util::sync::CancellationToken;
use tracing::info;
use vk_runtime::node::Identity;
use vk_runtime::{NodeConfig, OnShutdown};
use vk_zun::{Config, UnlimitedCapacity, ZunProvider};

use crate::logging::init_logging_with;
use crate::run::{LogFormat, shutdown_on_signal};

/// What to do with the Node when the process stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ShutdownMode {
    /// Cordon the node and mark it NotReady; pods keep running and are taken back (and the
    /// node uncordoned) on restart.
    NotReady,
    /// Delete the Node object; pods keep running in Zun.
    Delete,
}

/// Flags of the virtual kubelet.
#[derive(Args, Debug, Clone)]
pub struct VkArgs {
    /// Name of the Node to register.
    #[arg(long, env = "VK_NODE_NAME", default_value = "virtual-kubelet")]
    pub node_name: String,
    /// Neutron network (id or name) for pods that name none in the
    /// `virtual-kubelet.sunet.se/network` annotation.
    #[arg(long, env = "VK_NETWORK")]
    pub network: Option<String>,
    /// Zun image driver (`docker` or `glance`); Zun's default when unset.
    #[arg(long, env = "VK_IMAGE_DRIVER")]
    pub image_driver: Option<String>,
    /// Send each container's imagePullPolicy to Zun (admin-only in Zun's default policy).
    #[arg(long, env = "VK_SEND_IMAGE_PULL_POLICY")]
    pub send_image_pull_policy: bool,
    /// Zun availability zone to create in (and the node's topology zone).
    #[arg(long, env = "VK_AVAILABILITY_ZONE")]
    pub availability_zone: Option<String>,
    /// CPUs of a container that sets neither limit nor request.
    #[arg(long, default_value_t = 0.5)]
    pub default_cpu: f64,
    /// MiB of a container that sets neither limit nor request.
    #[arg(long, default_value_t = 512)]
    pub default_memory_mib: u64,
    /// The node's InternalIP (and pods' hostIP).
    #[arg(long, env = "VK_INTERNAL_IP", default_value = "127.0.0.1")]
    pub internal_ip: String,
    /// A resolvable DNS name to publish as the node's `Hostname` address (unset: none, so the
    /// API server, whose default address order tries Hostname first, uses the InternalIP).
    #[arg(long, env = "VK_HOSTNAME")]
    pub hostname: Option<String>,
    /// Port published as `status.daemonEndpoints.kubeletEndpoint.port`.
    #[arg(long, env = "KUBELET_PORT", default_value_t = 10250)]
    pub kubelet_port: i32,
    /// Seconds between two syncs of all pods with Zun (one Zun list each).
    #[arg(long, default_value_t = 5)]
    pub poll_interval_seconds: u64,
    /// Milliseconds between two reads of the pods in transition only (containers starting,
    /// stopping, deleted, a restart due: one GET per container, or one list when many); 0 turns
    /// it off, leaving them to the full syncs.
    #[arg(long, env = "VK_TRANSITION_POLL_MILLIS", default_value_t = 500)]
    pub transition_poll_millis: u64,
    /// Seconds a Zun call of the pod passes or the node's state may take before it is given
    /// up (logged and counted in vk_zun_slow_calls_total; the pod's pass goes on and the next
    /// one tries again), so that one call Zun does not answer holds back nothing else.
    #[arg(long, env = "VK_ZUN_CALL_TIMEOUT_SECONDS", default_value_t = 30)]
    pub zun_call_timeout_seconds: u64,
    /// Seconds between two GETs of a running container asking Docker, through Zun, whether it
    /// still runs (a few containers per pass, asked longest ago first): Zun's list shows an
    /// exit only after zun-compute's periodic state sync (60 s by default); 0 turns it off.
    #[arg(long, env = "VK_EXIT_CHECK_SECONDS", default_value_t = 10)]
    pub exit_check_seconds: u64,
    /// Pods whose Zun actions (create, stop, delete) run at the same time in a pass.
    #[arg(long, default_value_t = vk_zun::provider::DEFAULT_POD_CONCURRENCY)]
    pub pod_concurrency: usize,
    /// Seconds between two computations of the node's state.
    #[arg(long, default_value_t = 10)]
    pub status_interval_seconds: u64,
    /// What happens to the Node on SIGTERM.
    #[arg(long, value_enum, default_value = "not-ready")]
    pub on_shutdown: ShutdownMode,
    /// Delete the Node object on SIGTERM (as `--on-shutdown delete`); pods keep running in Zun.
    #[arg(long, env = "VK_REMOVE_NODE_ON_SHUTDOWN")]
    pub remove_node_on_shutdown: bool,
    /// Zun project whose quota sizes the node (default: the token's project).
    #[arg(long, env = "VK_PROJECT_ID")]
    pub project_id: Option<String>,
    /// The kubelet API: listen address (the port is --kubelet-port).
    #[arg(long, env = "KUBELET_ADDRESS", default_value = "0.0.0.0")]
    pub kubelet_address: std::net::IpAddr,
    /// Serving certificate of the kubelet API (PEM); with --tls-private-key-file.
    #[arg(long, env = "KUBELET_TLS_CERT_FILE", requires = "tls_private_key_file")]
    pub tls_cert_file: Option<std::path::PathBuf>,
    /// Its private key (PEM).
    #[arg(long, env = "KUBELET_TLS_KEY_FILE", requires = "tls_cert_file")]
    pub tls_private_key_file: Option<std::path::PathBuf>,
    /// Get the serving certificate from the cluster with a
    /// `kubernetes.io/kubelet-serving` CertificateSigningRequest (someone must
    /// approve it) and renew it before it expires, as the kubelet's flag of
    /// the same name does.
    #[arg(
        long,
        env = "KUBELET_ROTATE_SERVER_CERTIFICATES",
        conflicts_with = "tls_cert_file"
    )]
    pub rotate_server_certificates: bool,
    /// CA bundle that signs client certificates (the API server's kubelet
    /// client certificate); without it only bearer tokens authenticate.
    #[arg(long, env = "KUBELET_CLIENT_CA_FILE")]
    pub client_ca_file: Option<std::path::PathBuf>,
    /// With --tenants: every tenant's node serves its kubelet API on a port of its own (the one
    /// its Node publishes in `status.daemonEndpoints`), taken from --kubelet-port upward within
    /// this many ports; a restarted process keeps each node's port when it is free.
    #[arg(long, env = "VK_TENANT_KUBELET_PORTS", default_value_t = 100)]
    pub tenant_kubelet_ports: u16,
    /// Do not serve the kubelet API (logs, exec, stats).
    #[arg(long)]
    pub no_kubelet_api: bool,
    /// Serve every `ZunTenant` (virtual-kubelet.sunet.se/v1alpha1) as its own node, with the
    /// credentials of its Secret, its networks and namespaces, instead of one node with the
    /// process's credentials (--node-name, --network and --project-id are then not used).
    #[arg(long, env = "VK_TENANTS", conflicts_with_all = ["network", "project_id"])]
    pub tenants: bool,
    /// Give Services of type LoadBalancer over this node's pods an Octavia load balancer
    /// (listener and pool per port, members = the ready pods; with --tenants, each tenant's
    /// in its own project).
    #[arg(long, env = "VK_LOAD_BALANCERS")]
    pub load_balancers: bool,
    /// Enforce NetworkPolicies (ingress and egress) on this node's pods with Neutron security
    /// groups on their ports (one group per policy; with --tenants, in each tenant's project).
    #[arg(long, env = "VK_NETWORK_POLICIES")]
    pub network_policies: bool,
    /// Neutron subnet (id) of the load balancers' VIPs (default: the first IPv4 subnet of
    /// --network; with --tenants, of each tenant's default network).
    #[arg(long, env = "VK_LOAD_BALANCER_SUBNET", conflicts_with = "tenants")]
    pub load_balancer_subnet: Option<String>,
    /// Log filter (overridden by RUST_LOG).
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

impl VkArgs {
    /// The full sync's interval.
    pub fn poll_interval(&self) -> Duration {
        Duration::from_secs(self.poll_interval_seconds.max(1))
    }

    /// The transition pass's interval (`None`: off).
    pub fn transition_poll(&self) -> Option<Duration> {
        (self.transition_poll_millis > 0)
            .then(|| Duration::from_millis(self.transition_poll_millis))
    }

    /// A Zun call's deadline in the node's loops.
    pub fn zun_call_timeout(&self) -> Duration {
        Duration::from_secs(self.zun_call_timeout_seconds.max(1))
    }

    /// How often a running container is asked about (`None`: never).
    pub fn exit_check(&self) -> Option<Duration> {
        (self.exit_check_seconds > 0).then(|| Duration::from_secs(self.exit_check_seconds))
    }
}

/// `kubernetes.io/arch` of this build.
pub(crate) fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// Run the virtual kubelet until SIGTERM.
pub async fn run(args: VkArgs) -> anyhow::Result<()> {
    init_logging_with(args.log_format, &args.log_level)?;
    let token = CancellationToken::new();
    shutdown_on_signal(token.clone());
    if args.tenants {
        let client = Client::try_default()
            .await
            .context("connecting to Kubernetes (KUBECONFIG or in-cluster)")?;
        return crate::vk_tenants::run(args, client, token).await;
    }
    let selector = CloudSelector::from_env();
    let options = ClientOptions::from_env()?;
    let mut metrics_registry = prometheus_client::registry::Registry::default();
    options.metrics.register(&mut metrics_registry);
    let call_metrics = vk_zun::timed::CallMetrics::default();
    call_metrics.register(&mut metrics_registry);
    let core = Core::connect(&selector, options)
        .await
        .with_context(|| format!("connecting to OpenStack ({selector:?})"))?;
    let project_id = args
        .project_id
        .clone()
        .or_else(|| core.current_project_id());
    let ports = Arc::new(openstack::port::PortAdapter::new(core.clone()));
    let neutron = openstack::Cloud::from_core(core.clone()).network;
    if args.load_balancers || args.network_policies {
        let client = Client::try_default()
            .await
            .context("connecting to Kubernetes (KUBECONFIG or in-cluster)")?;
        let ctx = NodeNetworking {
            node: args.node_name.clone(),
            core: core.clone(),
            network: args.network.clone(),
            // The load balancers are the credentials' own (as before: no project filter).
            lb_project_id: None,
            project_id: project_id.clone(),
            tenant: None,
        };
        if args.load_balancers {
            ctx.start_load_balancers(&args, client.clone(), token.clone())
                .await?;
        }
        if args.network_policies {
            ctx.start_network_policies(&args, client, token.clone());
        }
    }
    let zun = Arc::new(ContainerAdapter::new(core));
    let zun_for_api: Arc<dyn openstack::container::Container> = zun.clone();
    let cfg = Config {
        node_name: args.node_name.clone(),
        network: args.network.clone(),
        image_driver: args.image_driver.clone(),
        send_pull_policy: args.send_image_pull_policy,
        default_cpu: args.default_cpu,
        default_memory_mib: args.default_memory_mib,
        availability_zone: args.availability_zone.clone(),
        host_ip: args.internal_ip.clone(),
        tenant: None,
    };
    let provider = Arc::new(
        ZunProvider::new(zun, cfg, project_id.clone(), UnlimitedCapacity::default())
            .with_pod_concurrency(args.pod_concurrency)
            .with_transition_poll(args.transition_poll(), args.poll_interval())
            .with_zun_calls(args.zun_call_timeout(), call_metrics)
            .with_exit_check(args.exit_check())
            .with_ports(ports, neutron),
    );
    let client = Client::try_default()
        .await
        .context("connecting to Kubernetes (KUBECONFIG or in-cluster)")?;
    let node = node_config(&args, &args.node_name, BTreeMap::new(), Vec::new());
    if !args.no_kubelet_api {
        let port = u16::try_from(args.kubelet_port)
            .with_context(|| format!("--kubelet-port {} is not a TCP port", args.kubelet_port))?;
        let addr = std::net::SocketAddr::new(args.kubelet_address, port);
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding the kubelet API to {addr}"))?;
        start_kubelet_api(
            &args,
            &args.node_name,
            listener,
            client.clone(),
            zun_for_api,
            metrics_registry,
            token.clone(),
        )
        .await
        .context("starting the kubelet API")?;
    }
    info!(node = %args.node_name, project = project_id.as_deref().unwrap_or("?"), "starting the virtual kubelet");
    vk_runtime::run(client, node, provider, token)
        .await
        .context("running the node")?;
    Ok(())
}

/// What a node's Services and NetworkPolicy controllers work with: the single node's, or one
/// tenant's (`--tenants`: its session, project and tenant), so that both modes run the same
/// controllers.
pub(crate) struct NodeNetworking {
    /// The node's name.
    pub node: String,
    /// Its OpenStack session.
    pub core: Core,
    /// The network whose first IPv4 subnet takes the VIPs (without --load-balancer-subnet).
    pub network: Option<String>,
    /// The project the node's load balancers are listed in (`None`: what the credentials see).
    pub lb_project_id: Option<String>,
    /// The project of the ports and security groups.
    pub project_id: Option<String>,
    /// The tenant (`--tenants`).
    pub tenant: Option<vk_zun::tenant::Tenant>,
}

/// The Services controller of a node, for [`vk_zun::services::release_node`] when its tenant
/// goes.
pub(crate) struct LoadBalancing {
    /// The node's Octavia session.
    pub lbs: Arc<dyn openstack::loadbalancer::LoadBalancers>,
    /// The project its load balancers are listed in.
    pub project_id: Option<String>,
    /// The controller (ends with the node's stop token).
    pub task: tokio::task::JoinHandle<()>,
}

impl LoadBalancing {
    /// The Octavia session and project its load balancers are listed in.
    pub fn session(&self) -> (&dyn openstack::loadbalancer::LoadBalancers, Option<&str>) {
        (self.lbs.as_ref(), self.project_id.as_deref())
    }
}

impl NodeNetworking {
    /// The subnet of the VIPs: --load-balancer-subnet, else the first IPv4 subnet of the
    /// node's network.
    async fn vip_subnet(&self, args: &VkArgs) -> anyhow::Result<String> {
        use openstack::port::Ports as _;
        if let Some(s) = &args.load_balancer_subnet {
            return Ok(s.clone());
        }
        let net = self
            .network
            .as_deref()
            .context("--load-balancers needs --load-balancer-subnet or --network")?;
        let net_id = openstack::port::PortAdapter::new(self.core.clone())
            .network_id(net)
            .await?;
        let subnets = openstack::Cloud::from_core(self.core.clone())
            .network
            .list_subnets(&openstack::model::SubnetFilter {
                network_id: Some(net_id.clone()),
                ..Default::default()
            })
            .await?;
        subnets
            .into_iter()
            .find(|s| s.ip_version == 4)
            .map(|s| s.id)
            .with_context(|| {
                format!("network {net} ({net_id}) has no IPv4 subnet for load balancer VIPs")
            })
    }

    /// Start the Services' load balancers ([`vk_zun::services`]) until `stop`.
    pub async fn start_load_balancers(
        &self,
        args: &VkArgs,
        client: Client,
        stop: CancellationToken,
    ) -> anyhow::Result<LoadBalancing> {
        let subnet = self.vip_subnet(args).await?;
        let lbs: Arc<dyn openstack::loadbalancer::LoadBalancers> = Arc::new(
            openstack::loadbalancer::LoadBalancerAdapter::new(self.core.clone()),
        );
        let cfg = vk_zun::services::ServicesConfig {
            node: self.node.clone(),
            vip_subnet_id: subnet,
            project_id: self.lb_project_id.clone(),
            tenant: self.tenant.clone(),
            interval: Duration::from_secs(args.poll_interval_seconds.max(1)),
        };
        let task = tokio::spawn(vk_zun::services::run(client, lbs.clone(), cfg, stop));
        Ok(LoadBalancing {
            lbs,
            project_id: self.lb_project_id.clone(),
            task,
        })
    }

    /// Start the NetworkPolicy controller ([`vk_zun::netpol_sync`]) until `stop`.
    pub fn start_network_policies(
        &self,
        args: &VkArgs,
        client: Client,
        stop: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let ports: Arc<dyn openstack::port::Ports> =
            Arc::new(openstack::port::PortAdapter::new(self.core.clone()));
        let neutron = openstack::Cloud::from_core(self.core.clone()).network;
        let cfg = vk_zun::netpol_sync::NetpolConfig {
            node: self.node.clone(),
            project_id: self.project_id.clone(),
            tenant: self.tenant.clone(),
            interval: Duration::from_secs(args.poll_interval_seconds.max(1)),
        };
        tokio::spawn(vk_zun::netpol_sync::run(client, ports, neutron, cfg, stop))
    }
}

/// The node `name` as the flags configure it, with `labels` and `taints` besides the
/// provider's taint.
pub(crate) fn node_config(
    args: &VkArgs,
    name: &str,
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
) -> NodeConfig {
    let mut all = vec![Taint {
        key: "virtual-kubelet.io/provider".into(),
        value: Some("openstack".into()),
        effect: "NoSchedule".into(),
        ..Default::default()
    }];
    all.extend(taints);
    NodeConfig {
        identity: Identity {
            name: name.to_string(),
            labels,
            taints: all,
            kubelet_port: args.kubelet_port,
            version: format!("v1.36.0-vk-openstack-zun-{}", env!("CARGO_PKG_VERSION")),
            os: "linux".into(),
            arch: arch().into(),
            internal_ip: args.internal_ip.clone(),
            hostname: args.hostname.clone(),
        },
        lease_duration_s: 40,
        lease_renew: Duration::from_secs(10),
        status_interval: Duration::from_secs(args.status_interval_seconds.max(1)),
        status_max_age: Duration::from_secs(60),
        poll_interval: Duration::from_secs(args.poll_interval_seconds.max(1)),
        on_shutdown: match args.on_shutdown {
            _ if args.remove_node_on_shutdown => OnShutdown::Delete,
            ShutdownMode::NotReady => OnShutdown::NotReady,
            ShutdownMode::Delete => OnShutdown::Delete,
        },
    }
}

/// Serve node `node`'s kubelet API on `listener` until `stop` (the task ends then, and the
/// port is free again). In `--tenants` mode every tenant's node has its own listener.
pub(crate) async fn start_kubelet_api(
    args: &VkArgs,
    node: &str,
    listener: tokio::net::TcpListener,
    client: Client,
    zun: Arc<dyn openstack::container::Container>,
    registry: prometheus_client::registry::Registry,
    stop: CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    use vk_kubelet_api::serving_cert::{ReloadableCert, keep_current};
    use vk_kubelet_api::{auth, kube_pods::KubePods, tls};
    let cert = Arc::new(ReloadableCert::empty());
    match (&args.tls_cert_file, &args.tls_private_key_file) {
        (Some(c), Some(k)) => cert.set(tls::load_serving(c, k)?)?,
        _ if args.rotate_server_certificates => {
            // Handshakes fail until the request is approved and issued, as on a
            // kubelet with serverTLSBootstrap.
            let addresses = vec![args.internal_ip.clone(), node.to_string()];
            tokio::spawn(keep_current(
                client.clone(),
                node.to_string(),
                addresses,
                cert.clone(),
                Duration::from_secs(60),
                stop.clone(),
            ));
        }
        _ => {
            info!(
                node = %node,
                "no --tls-cert-file or --rotate-server-certificates: made a self-signed serving certificate for the kubelet API (local demos only; the API server must skip kubelet TLS verification)"
            );
            cert.set(tls::self_signed(
                node,
                std::slice::from_ref(&args.internal_ip),
            )?)?;
        }
    }
    let client_ca = args
        .client_ca_file
        .as_deref()
        .map(|p| tls::load_certs(p, "client CA"))
        .transpose()?;
    let tls_cfg = tls::server_config_with(cert, client_ca)?;
    let api = Arc::new(vk_kubelet_api::KubeletApi::new(
        node.to_string(),
        Arc::new(KubePods::new(client.clone(), node.to_string())),
        Arc::new(vk_zun::kubelet::ZunKubelet::new(zun, node.to_string())),
        Arc::new(auth::CachedReviewer::new(auth::KubeReviewer::new(client))),
        registry,
    ));
    let addr = listener.local_addr().context("the kubelet API's address")?;
    info!(%node, %addr, "kubelet API listening (HTTPS)");
    Ok(tokio::spawn(tls::serve(
        listener,
        tls_cfg,
        api.router(),
        stop,
    )))
}
