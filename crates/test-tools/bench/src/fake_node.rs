//! `openstack-operator-bench --fake-zun-node <NODE>`: the virtual kubelet's runtime and Zun
//! provider (the code `openstack-operator virtual-kubelet` runs) on the in-memory Zun, as a
//! process of its own so its memory can be read from `/proc`, for pod counts the test
//! cloud's Zun cannot hold. Kubernetes from `KUBECONFIG`. Differences from the binary: the
//! Zun client is the fake (no HTTP client, no token, no client metrics), no kubelet API, no
//! log subscriber, and the executable is the bench's (larger code; only touched pages count).
//! On SIGTERM it prints the fake's call counters as one JSON line on stdout.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Taint;
use openstack::fake::FakeZun;
use tokio_util::sync::CancellationToken;
use vk_runtime::node::Identity;
use vk_runtime::{NodeConfig, OnShutdown};
use vk_zun::{Config, UnlimitedCapacity, ZunProvider};

/// The Zun operations whose calls are reported.
const OPERATIONS: [&str; 9] = [
    "create_container",
    "get_container",
    "list_containers",
    "start_container",
    "stop_container",
    "delete_container",
    "get_quota",
    "list_services",
    "list_availability_zones",
];

/// The node's configuration, as `openstack-operator virtual-kubelet` with its defaults.
fn node_config(node: &str, poll_interval_s: u64) -> NodeConfig {
    NodeConfig {
        identity: Identity {
            name: node.to_string(),
            labels: BTreeMap::new(),
            taints: vec![Taint {
                key: "virtual-kubelet.io/provider".into(),
                value: Some("openstack".into()),
                effect: "NoSchedule".into(),
                ..Default::default()
            }],
            kubelet_port: 10250,
            version: "v1.36.0-vk-openstack-zun-bench-fake".into(),
            os: "linux".into(),
            arch: "amd64".into(),
            internal_ip: "127.0.0.1".into(),
            hostname: None,
        },
        lease_duration_s: 40,
        lease_renew: Duration::from_secs(10),
        status_interval: Duration::from_secs(10),
        status_max_age: Duration::from_secs(60),
        poll_interval: Duration::from_secs(poll_interval_s.max(1)),
        on_shutdown: OnShutdown::Delete,
    }
}

/// Cancels `token` on SIGTERM or SIGINT.
pub(crate) fn stop_on_signal(token: CancellationToken) {
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let terminated = async {
            match term.as_mut() {
                Some(t) => {
                    t.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminated => {}
        }
        token.cancel();
    });
}

/// Runs the node until SIGTERM/SIGINT.
pub async fn run(node: String, poll_interval_s: u64) -> anyhow::Result<()> {
    let zun = FakeZun::new();
    // No quota: the measurement is the node, not Zun's limits.
    zun.set_quota_limits(-1, -1, -1);
    let cfg = Config {
        node_name: node.clone(),
        network: Some("fake-net".into()),
        ..Config::default()
    };
    let provider = Arc::new(ZunProvider::new(
        Arc::new(zun.clone()),
        cfg,
        Some("fake-project".into()),
        UnlimitedCapacity::default(),
    ));
    let client = kube::Client::try_default()
        .await
        .context("connecting to Kubernetes (KUBECONFIG)")?;
    let node_cfg = node_config(&node, poll_interval_s);
    let token = CancellationToken::new();
    stop_on_signal(token.clone());
    vk_runtime::run(client, node_cfg, provider, token)
        .await
        .context("running the node")?;
    let mut calls: BTreeMap<&str, u64> = OPERATIONS.iter().map(|op| (*op, zun.calls(op))).collect();
    let named: u64 = calls.values().sum();
    let other = zun.total_calls().saturating_sub(named);
    if other > 0 {
        calls.insert("other", other);
    }
    let left: HashSet<String> = zun.containers().into_iter().map(|c| c.uuid).collect();
    println!(
        "{}",
        serde_json::json!({"calls": calls, "containers_left": left.len()})
    );
    Ok(())
}

/// `--fake-zun-tenants NODE=NAMESPACE,...`: one node per tenant in this process, each with
/// its own in-memory Zun and Neutron ports and a provider that admits only its namespace, as
/// `virtual-kubelet --tenants` runs them; until SIGTERM/SIGINT. Prints the summed call
/// counters as one JSON line on stdout.
pub async fn run_tenants(spec: &str, poll_interval_s: u64) -> anyhow::Result<()> {
    let pairs: Vec<(String, String)> = spec
        .split(',')
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.split_once('=')
                .map(|(n, ns)| (n.to_string(), ns.to_string()))
                .with_context(|| format!("--fake-zun-tenants: {p:?} is not NODE=NAMESPACE"))
        })
        .collect::<anyhow::Result<_>>()?;
    anyhow::ensure!(!pairs.is_empty(), "--fake-zun-tenants: no tenant");
    let client = kube::Client::try_default()
        .await
        .context("connecting to Kubernetes (KUBECONFIG)")?;
    let token = CancellationToken::new();
    stop_on_signal(token.clone());
    let mut zuns = Vec::new();
    let mut nodes = tokio::task::JoinSet::new();
    for (node, namespace) in pairs {
        let zun = FakeZun::new();
        zun.set_quota_limits(-1, -1, -1);
        let ports = openstack::port::FakePorts::new();
        ports.add_network("fake-net", "fake-net-id");
        let spec: api::tenant::ZunTenantSpec = serde_json::from_value(serde_json::json!({
            "credentials": {"secretRef": {"namespace": "unused", "name": "unused"}},
            "networks": [{"name": "pods", "network": "fake-net"}],
            "namespaces": [namespace]
        }))
        .context("the fake tenant's spec")?;
        let cfg = Config {
            node_name: node.clone(),
            network: None,
            tenant: Some(vk_zun::tenant::Tenant::from_spec(&node, &spec)),
            ..Config::default()
        };
        let provider = Arc::new(
            ZunProvider::new(
                Arc::new(zun.clone()),
                cfg,
                Some(format!("fake-project-{node}")),
                UnlimitedCapacity::default(),
            )
            .with_ports(Arc::new(ports), Arc::new(openstack::fake::FakeCloud::new())),
        );
        let label = api::tenant::TENANT_LABEL.to_string();
        let mut cfg = node_config(&node, poll_interval_s);
        cfg.identity.labels.insert(label.clone(), node.clone());
        cfg.identity.taints.push(Taint {
            key: label,
            value: Some(node.clone()),
            effect: "NoSchedule".into(),
            ..Default::default()
        });
        let (c, t) = (client.clone(), token.clone());
        nodes.spawn(async move { vk_runtime::run(c, cfg, provider, t).await });
        zuns.push(zun);
    }
    while let Some(done) = nodes.join_next().await {
        done.context("a node task failed")?
            .context("running a node")?;
    }
    let mut calls: BTreeMap<&str, u64> = BTreeMap::new();
    let mut total = 0;
    for zun in &zuns {
        for op in OPERATIONS {
            *calls.entry(op).or_default() += zun.calls(op);
        }
        total += zun.total_calls();
    }
    let named: u64 = calls.values().sum();
    if total > named {
        calls.insert("other", total - named);
    }
    let left: usize = zuns.iter().map(|z| z.containers().len()).sum();
    println!(
        "{}",
        serde_json::json!({"calls": calls, "containers_left": left})
    );
    Ok(())
}
