//! `test-node`: registers a Node and runs the pods bound to it as containers on the local
//! Docker engine (`docs/test-node.md`).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use test_node::docker::{Docker, socket_path};
use test_node::netns::NetNs;
use test_node::{DockerProvider, Settings};
use tokio_util::sync::CancellationToken;
use vk_runtime::node::Identity;
use vk_runtime::{NodeConfig, OnShutdown};

/// The test cloud's state directory (`scripts/test-cloud`).
const TEST_CLOUD_DIR: &str = "/var/cache/openstack-operator/test-cloud";

#[derive(Parser, Debug)]
#[command(
    name = "test-node",
    about = "A Kubernetes node whose pods run as real containers on the local Docker engine"
)]
struct Args {
    /// The Node's name.
    #[arg(long, env = "TEST_NODE_NAME", default_value = "test-node")]
    node_name: String,
    /// The Docker engine (`unix:///path`); default: the test cloud's when it runs, else
    /// /var/run/docker.sock.
    #[arg(long, env = "DOCKER_HOST")]
    docker_host: Option<String>,
    /// The engine's network namespace (a file: `/run/netns/x`, `/proc/<pid>/ns/net`); default:
    /// the test cloud's when its engine is used, else the host's own.
    #[arg(long, env = "TEST_NODE_NETNS")]
    netns: Option<PathBuf>,
    /// Where pods' files live (bind-mounted into their containers).
    #[arg(long, env = "TEST_NODE_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// The Docker bridge network of the pods (created if missing).
    #[arg(long, default_value = "test-node")]
    network: String,
    /// Its subnet.
    #[arg(long, default_value = "10.244.0.0/16")]
    subnet: String,
    /// Its gateway: the node's address for pods (hostIP, relays).
    #[arg(long, default_value = "10.244.0.1")]
    gateway: Ipv4Addr,
    /// The first address of the Services' range (each Service gets the next one).
    #[arg(long, default_value = "10.245.0.0")]
    service_base: Ipv4Addr,
    /// The pod sandbox's image (runs `sleep infinity`); default: the pod's first image.
    #[arg(long, env = "TEST_NODE_SANDBOX_IMAGE")]
    sandbox_image: Option<String>,
    /// A host port relayed from `<gateway>:<port>` to `127.0.0.1:<port>` (the external
    /// services), or to `ADDR:<port>` as `ADDR:PORT` (Ceph on the gateway's own address);
    /// `PORT-PORT` for a range; repeatable or comma-separated.
    #[arg(
        long = "relay-port",
        env = "TEST_NODE_RELAY_PORTS",
        value_delimiter = ',',
        value_parser = relay
    )]
    relay_ports: Vec<Relay>,
    /// A line added to every pod's /etc/hosts (`10.244.0.1 db.example`); repeatable.
    #[arg(long = "extra-host")]
    extra_hosts: Vec<String>,
    /// How often all pods are synced, milliseconds.
    #[arg(long, default_value_t = 1000)]
    poll_interval_ms: u64,
    /// Also run the Deployment and Job controllers, binding their pods to this node, for an
    /// API server that runs no controllers (the Kubernetes API emulator).
    #[arg(long)]
    workload_controllers: bool,
    /// Delete the Node on exit (else it is marked NotReady and its pods keep running).
    #[arg(long)]
    delete_node_on_exit: bool,
}

/// The host addresses of one `--relay-port` item.
#[derive(Clone, Debug)]
struct Relay(Vec<SocketAddr>);

fn relay(item: &str) -> Result<Relay, String> {
    test_node::services::relay_targets(item).map(Relay)
}

fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let tc_sock = PathBuf::from(TEST_CLOUD_DIR).join("run/docker.sock");
    let socket = match &args.docker_host {
        Some(h) => socket_path(h).map_err(anyhow::Error::msg)?,
        None if tc_sock.exists() => tc_sock.clone(),
        None => PathBuf::from("/var/run/docker.sock"),
    };
    let netns_path = args.netns.clone().or_else(|| {
        let p = PathBuf::from(TEST_CLOUD_DIR).join("run/netns");
        (socket == tc_sock && p.exists()).then_some(p)
    });
    let ns = match &netns_path {
        Some(p) => NetNs::open(p).with_context(|| "--netns")?,
        None => NetNs::host(),
    };
    let state_dir = args.state_dir.clone().unwrap_or_else(|| {
        PathBuf::from("/var/cache/openstack-operator/test-node").join(&args.node_name)
    });
    let client = kube::Client::try_default()
        .await
        .context("no Kubernetes client configuration (KUBECONFIG)")?;
    let provider = DockerProvider::new(
        Docker::new(&socket),
        ns,
        client.clone(),
        Settings {
            node: args.node_name.clone(),
            state_dir,
            network: args.network.clone(),
            subnet: args.subnet.clone(),
            gateway: args.gateway,
            service_base: args.service_base,
            sandbox_image: args.sandbox_image.clone(),
            extra_hosts: args.extra_hosts.clone(),
            relays: args.relay_ports.iter().flat_map(|r| r.0.clone()).collect(),
        },
    )
    .await
    .map_err(anyhow::Error::msg)?;
    tracing::info!(
        node = %args.node_name,
        socket = %socket.display(),
        netns = ?netns_path,
        "test node starting"
    );
    let cfg = NodeConfig {
        identity: Identity {
            name: args.node_name.clone(),
            labels: [(
                "openstack-operator/test-node".to_string(),
                "true".to_string(),
            )]
            .into_iter()
            .collect(),
            taints: Vec::new(),
            kubelet_port: 10250,
            version: format!("v1.36.0-test-node-{}", env!("CARGO_PKG_VERSION")),
            os: "linux".into(),
            arch: arch().into(),
            internal_ip: args.gateway.to_string(),
            hostname: None,
        },
        lease_duration_s: 40,
        lease_renew: Duration::from_secs(10),
        status_interval: Duration::from_secs(10),
        status_max_age: Duration::from_secs(60),
        poll_interval: Duration::from_millis(args.poll_interval_ms.max(100)),
        on_shutdown: if args.delete_node_on_exit {
            OnShutdown::Delete
        } else {
            OnShutdown::NotReady
        },
    };
    let shutdown = CancellationToken::new();
    let s = shutdown.clone();
    tokio::spawn(async move {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(t) => t,
                Err(_) => return,
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        s.cancel();
    });
    if args.workload_controllers {
        tokio::spawn(test_node::workloads::run(
            client.clone(),
            args.node_name.clone(),
            Duration::from_secs(1),
            shutdown.clone(),
        ));
    }
    vk_runtime::run(client, cfg, provider as Arc<_>, shutdown)
        .await
        .context("the node stopped")?;
    Ok(())
}
