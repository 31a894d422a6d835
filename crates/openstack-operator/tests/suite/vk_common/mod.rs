//! Shared by the virtual-kubelet suites (`e2e_virtual_kubelet`, `e2e_kubelet_api`): the Zun
//! tenant of the test cloud, the `openstack-operator virtual-kubelet` process, and a test's
//! namespace, node and cleanup.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use e2e::target::Target;
use e2e::wait::{Check, wait_for};
use futures::FutureExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, PodStatus};
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, ResourceExt};
use openstack::adapter::{ClientOptions, CloudSelector, ContainerAdapter, Core};
use openstack::container::{Container, ZunContainer};
use openstack::port::{PortAdapter, PortFilter, Ports};
use serde_json::json;

pub const BIN: &str = env!("CARGO_BIN_EXE_openstack-operator");
/// How long a step may take before the test calls it hung: a bound, not a speed requirement.
/// On 2 cores beside the other lanes a Zun container has taken over 180 s from create to
/// running (kuryr and Neutron queueing), failing two CI runs on a pod that was coming up.
pub const LONG: Duration = Duration::from_secs(300);
pub const POLL: Duration = Duration::from_millis(500);
pub const POD_UID: &str = "virtual-kubelet.sunet.se/pod-uid";
pub const NODE: &str = "virtual-kubelet.sunet.se/node";

/// The Zun tenant of the test cloud.
pub type Zun = e2e::ZunTenant;

/// The Zun tenant of the test cloud, or `None` (and a message) when the cloud has no Zun.
pub fn zun_env() -> Option<Zun> {
    let z = e2e::ZunTenant::from_env();
    if z.is_none() {
        eprintln!(
            "SKIPPED: no Zun in this cloud (ZUN_TENANT_CLOUD unset; `eval \"$(scripts/test-cloud env)\"` sets it when the test cloud runs Zun)"
        );
    }
    z
}

/// Zun as the tenant.
pub async fn zun_client(z: &Zun) -> anyhow::Result<ContainerAdapter> {
    z.client().await
}

/// Neutron as the tenant: the pods' ports and their security groups, which the node makes.
pub async fn neutron_clients(
    z: &Zun,
) -> anyhow::Result<(PortAdapter, std::sync::Arc<dyn openstack::Network>)> {
    let core = Core::connect(
        &CloudSelector::File {
            path: z.file.clone().into(),
            cloud: z.cloud.clone(),
        },
        ClientOptions {
            requests_per_second: 0,
            ..ClientOptions::default()
        },
    )
    .await
    .context("connecting to Neutron as the Zun tenant")?;
    Ok((
        PortAdapter::new(core.clone()),
        openstack::Cloud::from_core(core).network,
    ))
}

/// A running `openstack-operator virtual-kubelet` ([`e2e::VirtualKubelet`]) with the suites'
/// settings: fast polls and debug logs of the node's crates.
pub struct Vk {
    inner: e2e::VirtualKubelet,
    /// The kubelet API's port on 127.0.0.1.
    pub kubelet_port: u16,
}

impl Vk {
    /// Starts a node named `node`.
    pub fn start(target: &Target, z: &Zun, node: &str) -> anyhow::Result<Self> {
        Self::start_with(target, z, node, &[])
    }

    /// Starts a node named `node` with `extra` flags.
    pub fn start_with(
        target: &Target,
        z: &Zun,
        node: &str,
        extra: &[String],
    ) -> anyhow::Result<Self> {
        let mut args = vec![
            "--poll-interval-seconds",
            "1",
            "--status-interval-seconds",
            "2",
            "--log-level",
            "info,vk_zun=debug,vk_runtime=debug,vk_kubelet_api=debug",
        ];
        args.extend(extra.iter().map(String::as_str));
        let inner = e2e::VirtualKubelet::start(
            std::path::Path::new(BIN),
            target,
            z,
            node,
            &format!("vk-{node}"),
            &args,
        )?;
        let kubelet_port = inner.kubelet_port();
        Ok(Vk {
            inner,
            kubelet_port,
        })
    }

    /// Starts the process (again, after [`Vk::kill`]).
    pub fn spawn(&mut self) -> anyhow::Result<()> {
        self.inner.spawn()
    }

    /// SIGKILL: no shutdown path runs.
    pub fn kill(&mut self) {
        self.inner.kill();
    }

    /// SIGTERM and wait for the exit.
    pub async fn terminate(&mut self) -> anyhow::Result<std::process::ExitStatus> {
        self.inner.terminate(LONG).await
    }

    /// The last 40 lines of its log.
    pub fn log_tail(&self) -> String {
        self.inner.log_tail(40)
    }

    /// The last `n` lines of its log.
    pub fn log_lines(&self, n: usize) -> String {
        self.inner.log_tail(n)
    }
}

/// One test's world: its Kubernetes API, Zun tenant, node name and namespace.
pub struct Case {
    /// The Kubernetes API.
    pub target: Target,
    /// A client of it.
    pub client: Client,
    /// Zun as the tenant.
    pub zun: ContainerAdapter,
    /// Neutron ports as the tenant.
    pub ports: PortAdapter,
    /// Neutron (security groups) as the tenant.
    pub neutron: std::sync::Arc<dyn openstack::Network>,
    /// The tenant.
    pub z: Zun,
    /// This test's node name.
    pub node: String,
    /// This test's namespace.
    pub ns: String,
}

/// A new namespace and node name, or `None` without Zun.
pub async fn case(prefix: &str) -> anyhow::Result<Option<Case>> {
    let Some(z) = zun_env() else { return Ok(None) };
    let target = Target::from_env().await?;
    let client = target.client().await?;
    let zun = zun_client(&z).await?;
    let (ports, neutron) = neutron_clients(&z).await?;
    let ns = e2e::names::unique(prefix);
    let nsobj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &nsobj)
        .await?;
    Ok(Some(Case {
        target,
        client,
        zun,
        ports,
        neutron,
        z,
        node: e2e::names::unique("vk"),
        ns,
    }))
}

impl Case {
    /// Pods of the namespace.
    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// A pod bound to the node, tolerating its taint.
    pub fn pod(&self, name: &str, spec: serde_json::Value) -> anyhow::Result<Pod> {
        let mut spec = spec;
        spec["nodeName"] = json!(self.node);
        spec["tolerations"] = json!([{"key": "virtual-kubelet.io/provider", "operator": "Equal",
                                      "value": "openstack", "effect": "NoSchedule"}]);
        Ok(serde_json::from_value(
            json!({"metadata": {"name": name}, "spec": spec}),
        )?)
    }

    /// Creates [`Case::pod`].
    pub async fn create(&self, name: &str, spec: serde_json::Value) -> anyhow::Result<Pod> {
        Ok(self
            .pods()
            .create(&PostParams::default(), &self.pod(name, spec)?)
            .await?)
    }

    /// Waits until `done` holds for the pod's status.
    pub async fn wait_pod(
        &self,
        name: &str,
        what: &str,
        vk: &Vk,
        done: impl Fn(&PodStatus) -> bool,
    ) -> anyhow::Result<PodStatus> {
        let pods = self.pods();
        wait_for(LONG, POLL, what, async || {
            let s = pods.get(name).await?.status.unwrap_or_default();
            Ok(if done(&s) {
                Check::Done(s)
            } else {
                Check::Pending(format!("{s:?}"))
            })
        })
        .await
        .with_context(|| format!("virtual kubelet log tail:\n{}", vk.log_tail()))
    }

    /// The Zun containers of a pod (by its uid label, on this node).
    pub async fn containers_of(&self, uid: &str) -> anyhow::Result<Vec<ZunContainer>> {
        let want = BTreeMap::from([
            (POD_UID.to_string(), uid.to_string()),
            (NODE.to_string(), self.node.clone()),
        ]);
        Ok(self.zun.list_containers(&want, None).await?)
    }

    /// The Neutron ports named for this test's node (the pods' ports).
    pub async fn node_ports(&self) -> anyhow::Result<Vec<openstack::port::Port>> {
        let all = self.ports.list_ports(&PortFilter::default()).await?;
        Ok(all
            .into_iter()
            .filter(|p| vk_zun::pod_port::pod_uid(&self.node, &p.name).is_some())
            .collect())
    }

    /// The security groups named for this test's node (the pods' groups).
    pub async fn node_groups(&self) -> anyhow::Result<Vec<openstack::model::SecurityGroup>> {
        let all = self
            .neutron
            .list_security_groups(&Default::default())
            .await?;
        Ok(all
            .into_iter()
            .filter(|g| vk_zun::pod_port::pod_uid(&self.node, &g.name).is_some())
            .collect())
    }

    /// Runs a test's body, then [`Case::cleanup`], also when the body failed or panicked
    /// (an assertion), so that no Zun container outlives its test.
    pub async fn guarded(
        &self,
        body: impl Future<Output = anyhow::Result<()>>,
    ) -> anyhow::Result<()> {
        let result = std::panic::AssertUnwindSafe(body).catch_unwind().await;
        self.cleanup().await;
        match result {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// Deletes the pods, every Zun container of the node and the node.
    pub async fn cleanup(&self) {
        for p in self
            .pods()
            .list(&Default::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            let _ = self
                .pods()
                .delete(
                    &p.name_any(),
                    &DeleteParams {
                        grace_period_seconds: Some(0),
                        ..Default::default()
                    },
                )
                .await;
        }
        // Zun deletes asynchronously and a delete can fail (a container still starting is
        // stopped, then started, then not removable): delete until none of the node's is
        // left. Failures are said, not hidden: a container left behind costs the shared cloud.
        let ours = BTreeMap::from([(NODE.to_string(), self.node.clone())]);
        let deadline = tokio::time::Instant::now() + LONG;
        loop {
            let left = match self.zun.list_containers(&ours, None).await {
                Ok(left) => left,
                Err(e) => {
                    eprintln!(
                        "cleanup: listing the Zun containers of node {} failed: {e}",
                        self.node
                    );
                    break;
                }
            };
            if left.is_empty() {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                let ids: Vec<&str> = left.iter().map(|c| c.uuid.as_str()).collect();
                eprintln!(
                    "cleanup: Zun containers of node {} still there: {ids:?}",
                    self.node
                );
                break;
            }
            for c in left.iter().filter(|c| c.status != "Deleting") {
                if let Err(e) = self.zun.delete_container(&c.uuid, true, false).await {
                    eprintln!("cleanup: deleting Zun container {} failed: {e}", c.uuid);
                }
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        // The pods' ports: the node deletes them with their pods; what a failed test left
        // is deleted here (after the containers, which Zun unbinds from them).
        match self.node_ports().await {
            Ok(left) => {
                for p in left {
                    if let Err(e) = self.ports.delete_port(&p.id).await
                        && !e.is_not_found()
                    {
                        eprintln!("cleanup: deleting port {} ({}) failed: {e}", p.id, p.name);
                    }
                }
            }
            Err(e) => eprintln!(
                "cleanup: listing the ports of node {} failed: {e}",
                self.node
            ),
        }
        match self.node_groups().await {
            Ok(left) => {
                for g in left {
                    if let Err(e) = self.neutron.delete_security_group(&g.id).await
                        && !e.is_not_found()
                    {
                        eprintln!(
                            "cleanup: deleting security group {} ({}) failed: {e}",
                            g.id, g.name
                        );
                    }
                }
            }
            Err(e) => eprintln!(
                "cleanup: listing the security groups of node {} failed: {e}",
                self.node
            ),
        }
        let _ = Api::<Node>::all(self.client.clone())
            .delete(&self.node, &DeleteParams::default())
            .await;
    }
}

/// The pod's phase.
pub fn phase(s: &PodStatus) -> &str {
    s.phase.as_deref().unwrap_or("")
}

/// The first container's status.
pub fn main_state(s: &PodStatus) -> k8s_openapi::api::core::v1::ContainerStatus {
    s.container_statuses
        .clone()
        .unwrap_or_default()
        .into_iter()
        .next()
        .unwrap_or_default()
}
