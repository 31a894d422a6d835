//! End to end: `openstack-operator virtual-kubelet --tenants` serving two `ZunTenant`s of the
//! test cloud (projects `demo` on `ZUN_NETWORK` and `demo2` on `ZUN_NETWORK2`), each with an
//! application credential made for this test (named `tenants-...`, deleted after), against the
//! suite's Kubernetes API and real Zun and Neutron. Without Zun or the second tenant the test
//! says so and does nothing. Each tenant's node serves its own kubelet API on the port its Node
//! publishes: `logs` and `exec` reach each tenant's pod through its node's port (with a token
//! the emulator's TokenReview knows; on a real cluster, `E2E_KUBECONFIG`, that part is
//! skipped), and a node's port does not serve the other tenant's pod.

use crate::vk_common;

use std::collections::BTreeMap;
use std::fs::File;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use api::ZunTenant;
use e2e::wait::{Check, wait_for};
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod, Secret, Service as KubeService};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, CustomResourceExt, ResourceExt};
use openstack::adapter::{ClientOptions, CloudSelector, ContainerAdapter, Core, Request, Service};
use openstack::container::Container;
use openstack::port::{PortAdapter, PortFilter, Ports};
use serde_json::json;
use vk_common::{BIN, LONG, NODE, POD_UID, POLL};

/// One tenant of the test: its cloud entry, network, project and application credential.
struct TenantCloud {
    cloud: String,
    network_id: String,
    network: String,
    project_id: String,
    user_id: String,
    core: Core,
    cred_id: String,
    cred_secret: String,
}

async fn connect(file: &str, cloud: &str) -> anyhow::Result<Core> {
    Ok(Core::connect(
        &CloudSelector::File {
            path: file.into(),
            cloud: cloud.into(),
        },
        ClientOptions {
            requests_per_second: 0,
            ..ClientOptions::default()
        },
    )
    .await?)
}

impl TenantCloud {
    /// Makes an application credential `name` for the tenant's user (only the user may).
    async fn new(
        file: &str,
        admin: &Core,
        cloud: &str,
        user: &str,
        network: &str,
        network_id: &str,
        name: &str,
    ) -> anyhow::Result<Self> {
        let core = connect(file, cloud).await?;
        let project_id = core.current_project_id().context("the tenant's project")?;
        let users: Vec<serde_json::Value> = admin
            .send(&Request::get(Service::Identity, "list_users", "users").query("name", user))
            .await?
            .json_at("users")?;
        let user_id = users
            .first()
            .and_then(|u| u["id"].as_str())
            .with_context(|| format!("user {user} not found"))?
            .to_string();
        let made: serde_json::Value = core
            .send(
                &Request::post(
                    Service::Identity,
                    "create_application_credential",
                    format!("users/{user_id}/application_credentials"),
                )
                .json(&json!({"application_credential": {
                    "name": name, "description": "e2e_vk_tenants (deleted by the test)"}}))?
                .non_idempotent(),
            )
            .await?
            .json_at("application_credential")?;
        Ok(Self {
            cloud: cloud.into(),
            network_id: network_id.into(),
            network: network.into(),
            project_id,
            user_id,
            cred_id: made["id"].as_str().context("credential id")?.into(),
            cred_secret: made["secret"].as_str().context("credential secret")?.into(),
            core,
        })
    }

    async fn delete_credential(&self) {
        let r = Request::delete(
            Service::Identity,
            "delete_application_credential",
            format!(
                "users/{}/application_credentials/{}",
                self.user_id, self.cred_id
            ),
        );
        if let Err(e) = self.core.send(&r).await {
            eprintln!(
                "cleanup: deleting application credential {} failed: {e}",
                self.cred_id
            );
        }
    }

    fn zun(&self) -> ContainerAdapter {
        ContainerAdapter::new(self.core.clone())
    }

    fn ports(&self) -> PortAdapter {
        PortAdapter::new(self.core.clone())
    }
}

/// The `--tenants` process, killed on drop.
struct Process {
    child: Child,
    log: std::path::PathBuf,
}

impl Process {
    fn start(kubeconfig: &std::path::Path, name: &str, extra: &[&str]) -> anyhow::Result<Self> {
        let dir = e2e::operator::log_dir(std::path::Path::new(BIN));
        std::fs::create_dir_all(&dir)?;
        let log = dir.join(format!("{name}.log"));
        let f = File::create(&log)?;
        let child = Command::new(BIN)
            .args([
                "virtual-kubelet",
                "--tenants",
                "--internal-ip",
                "127.0.0.1",
                "--kubelet-address",
                "127.0.0.1",
                "--kubelet-port",
                &e2e::operator::free_local_addr()?.port().to_string(),
                "--tenant-kubelet-ports",
                "20",
                "--poll-interval-seconds",
                "1",
                "--status-interval-seconds",
                "2",
                "--log-level",
                "info,vk_zun=debug,vk_runtime=debug,vk_kubelet_api=debug",
            ])
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .env_remove("OS_CLOUD")
            .env_remove("OS_CLIENT_CONFIG_FILE")
            .env_remove("OS_AUTH_URL")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::from(f.try_clone()?))
            .stderr(Stdio::from(f))
            .spawn()
            .context("spawning the virtual kubelet")?;
        Ok(Self { child, log })
    }

    fn tail(&self) -> String {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn install_crd(client: &Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = ZunTenant::crd();
    let name = crd.metadata.name.clone().unwrap_or_default();
    crds.patch(
        &name,
        &PatchParams::apply("e2e").force(),
        &Patch::Apply(&crd),
    )
    .await?;
    wait_for(LONG, POLL, &format!("CRD {name} Established"), async || {
        let ok = crds
            .get(&name)
            .await?
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        Ok(if ok {
            Check::Done(())
        } else {
            Check::Pending("not established".into())
        })
    })
    .await
}

fn tenant_pod(name: &str, node: &str, tenant: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "tolerations": [
                {"key": "virtual-kubelet.io/provider", "operator": "Exists", "effect": "NoSchedule"},
                {"key": api::tenant::TENANT_LABEL, "operator": "Equal", "value": tenant, "effect": "NoSchedule"}],
            "containers": [{"name": "c", "image": "busybox", "env": [{"name": "WHO", "value": name}],
                            "command": ["sh", "-c", "echo started-$WHO; exec sleep 3600"]}]
        }
    }))?)
}

/// Tenant A (the test cloud's `demo`, on `net1_id`) and tenant B (`cloud2`'s `demo2`, on
/// `net2_id`), each with an application credential named after `prefix`; A's credential is
/// deleted again when B's cannot be made.
async fn tenant_pair(
    z: &e2e::ZunTenant,
    admin: &Core,
    cloud2: &str,
    net2: &str,
    net1_id: &str,
    net2_id: &str,
    prefix: &str,
) -> anyhow::Result<(TenantCloud, TenantCloud)> {
    let cred_name = e2e::names::unique(prefix);
    let a = TenantCloud::new(
        &z.file, admin, &z.cloud, "demo", &z.network, net1_id, &cred_name,
    )
    .await?;
    match TenantCloud::new(&z.file, admin, cloud2, "demo2", net2, net2_id, &cred_name).await {
        Ok(b) => Ok((a, b)),
        Err(e) => {
            a.delete_credential().await;
            Err(e)
        }
    }
}

#[tokio::test]
async fn two_tenants_run_their_pods_in_their_own_projects_and_refuse_others() -> anyhow::Result<()>
{
    let Some(z) = vk_common::zun_env() else {
        return Ok(());
    };
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let (Some(cloud2), Some(net2), Some(net1_id), Some(net2_id)) = (
        var("ZUN_TENANT2_CLOUD"),
        var("ZUN_NETWORK2"),
        var("ZUN_NETWORK_ID"),
        var("ZUN_NETWORK2_ID"),
    ) else {
        eprintln!(
            "SKIPPED: the test cloud has no second Zun tenant (ZUN_TENANT2_CLOUD, ZUN_NETWORK2, ZUN_NETWORK_ID, ZUN_NETWORK2_ID)"
        );
        return Ok(());
    };
    let target = e2e::target::Target::from_env().await?;
    let client = target.client().await?;
    install_crd(&client).await?;
    let admin = connect(&z.file, "local-admin").await?;
    let (a, b) = tenant_pair(&z, &admin, &cloud2, &net2, &net1_id, &net2_id, "tenants").await?;
    let w = World {
        client: client.clone(),
        ta: e2e::names::unique("tenants-a"),
        tb: e2e::names::unique("tenants-b"),
        bad: e2e::names::unique("tenants-bad"),
        ns_a: e2e::names::unique("tenants-ns-a"),
        ns_b: e2e::names::unique("tenants-ns-b"),
        ns_sec: e2e::names::unique("tenants-sec"),
        ns_shared: None,
    };
    let result = std::panic::AssertUnwindSafe(body(&target, &w, &a, &b))
        .catch_unwind()
        .await;
    w.cleanup(&[&a, &b]).await;
    a.delete_credential().await;
    b.delete_credential().await;
    match result {
        Ok(r) => r,
        Err(p) => std::panic::resume_unwind(p),
    }
}

use futures::FutureExt;

struct World {
    client: Client,
    ta: String,
    tb: String,
    bad: String,
    ns_a: String,
    ns_b: String,
    ns_sec: String,
    /// A namespace bound to both tenants (the networking test's).
    ns_shared: Option<String>,
}

impl World {
    async fn cleanup(&self, clouds: &[&TenantCloud]) {
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        for ns in [&self.ns_a, &self.ns_b].into_iter().chain(&self.ns_shared) {
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
            for p in pods
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default()
            {
                let _ = pods.delete(&p.name_any(), &dp).await;
            }
        }
        let tenants: Api<ZunTenant> = Api::all(self.client.clone());
        for t in [&self.ta, &self.tb, &self.bad] {
            let _ = tenants.delete(t, &DeleteParams::default()).await;
            // No process runs now to release them (what they made is deleted below).
            let _ = tenants
                .patch(
                    t,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                )
                .await;
            let _ = Api::<Node>::all(self.client.clone())
                .delete(t, &DeleteParams::default())
                .await;
        }
        // What the nodes left (a failed test): containers, then ports of both tenant nodes.
        for c in clouds {
            let zun = c.zun();
            for node in [&self.ta, &self.tb] {
                let ours = BTreeMap::from([(NODE.to_string(), node.to_string())]);
                let deadline = tokio::time::Instant::now() + LONG;
                loop {
                    let left = zun.list_containers(&ours, None).await.unwrap_or_default();
                    if left.is_empty() || tokio::time::Instant::now() > deadline {
                        if !left.is_empty() {
                            eprintln!("cleanup: Zun containers of {node} left in {}", c.cloud);
                        }
                        break;
                    }
                    for x in left.iter().filter(|x| x.status != "Deleting") {
                        let _ = zun.delete_container(&x.uuid, true, false).await;
                    }
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
                let ports = c.ports();
                for p in ports
                    .list_ports(&PortFilter::default())
                    .await
                    .unwrap_or_default()
                {
                    if vk_zun::pod_port::pod_uid(node, &p.name).is_some() {
                        let _ = ports.delete_port(&p.id).await;
                    }
                }
                // Their security groups (ports gone, Neutron lets them go): a group left
                // behind counts against the project's quota of 10 in every later test.
                let net = openstack::Cloud::from_core(c.core.clone()).network;
                for g in net
                    .list_security_groups(&openstack::model::SecurityGroupFilter {
                        project_id: Some(c.project_id.clone()),
                        ..Default::default()
                    })
                    .await
                    .unwrap_or_default()
                {
                    if vk_zun::pod_port::pod_uid(node, &g.name).is_some() {
                        let _ = net.delete_security_group(&g.id).await;
                    }
                }
            }
        }
        for ns in [&self.ns_a, &self.ns_b, &self.ns_sec]
            .into_iter()
            .chain(&self.ns_shared)
        {
            let _ = Api::<Namespace>::all(self.client.clone())
                .delete(ns, &DeleteParams::default())
                .await;
        }
    }
}

async fn body(
    target: &e2e::target::Target,
    w: &World,
    a: &TenantCloud,
    b: &TenantCloud,
) -> anyhow::Result<()> {
    let client = &w.client;
    for ns in [&w.ns_a, &w.ns_b, &w.ns_sec] {
        let o: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &o)
            .await?;
    }
    // Tenant A's network puts a security group of its project (by name) on the pods' ports.
    let neutron_a = openstack::Cloud::from_core(a.core.clone()).network;
    let group = neutron_a
        .create_security_group(&openstack::model::SecurityGroupCreate {
            name: w.ta.clone(),
            description: Some("e2e_vk_tenants (deleted by the test)".into()),
            ..Default::default()
        })
        .await?;
    let r = tenants_and_pods(target, w, a, b, &w.ta).await;
    if let Err(e) = neutron_a.delete_security_group(&group.id).await
        && !e.is_not_found()
    {
        eprintln!("cleanup: deleting security group {} failed: {e}", group.id);
    }
    let ports_groups = r?;
    assert_eq!(
        ports_groups,
        vec![group.id.clone()],
        "tenant A's pod port carries the group its network names"
    );
    Ok(())
}

/// Runs the tenants and their pods; returns the security groups of tenant A's pod's port.
async fn tenants_and_pods(
    target: &e2e::target::Target,
    w: &World,
    a: &TenantCloud,
    b: &TenantCloud,
    group_a: &str,
) -> anyhow::Result<Vec<String>> {
    let client = &w.client;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &w.ns_sec);
    let tenants: Api<ZunTenant> = Api::all(client.clone());
    for (t, c, ns, groups) in [
        (&w.ta, a, &w.ns_a, vec![group_a]),
        (&w.tb, b, &w.ns_b, vec![]),
    ] {
        let s: Secret = serde_json::from_value(json!({
            "metadata": {"name": t},
            "stringData": {"auth_url": "http://127.0.0.1:5000/v3",
                           "application_credential_id": c.cred_id,
                           "application_credential_secret": c.cred_secret}
        }))?;
        secrets.create(&PostParams::default(), &s).await?;
        let zt: ZunTenant = serde_json::from_value(json!({
            "apiVersion": "virtual-kubelet.sunet.se/v1alpha1", "kind": "ZunTenant",
            "metadata": {"name": t},
            "spec": {"credentials": {"secretRef": {"namespace": w.ns_sec, "name": t}},
                     "networks": [{"name": "pods", "network": c.network, "securityGroups": groups}],
                     "namespaces": [ns]}
        }))?;
        tenants.create(&PostParams::default(), &zt).await?;
    }
    // A tenant whose spec cannot work: its status names the field, no node is made.
    let bad: ZunTenant = serde_json::from_value(json!({
        "apiVersion": "virtual-kubelet.sunet.se/v1alpha1", "kind": "ZunTenant",
        "metadata": {"name": w.bad},
        "spec": {"credentials": {"secretRef": {"namespace": w.ns_sec, "name": w.ta}},
                 "networks": [{"name": "pods", "network": a.network}],
                 "defaultNetwork": "web", "namespaces": [w.ns_a]}
    }))?;
    tenants.create(&PostParams::default(), &bad).await?;

    let vk = Process::start(target.kubeconfig(), &w.ta, &[])?;
    let nodes: Api<Node> = Api::all(client.clone());
    for (t, c) in [(&w.ta, a), (&w.tb, b)] {
        let st = wait_for(LONG, POLL, &format!("tenant {t} Ready"), async || {
            let s = tenants.get(t).await?.status.unwrap_or_default();
            let ready = s
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.is_true());
            Ok(if ready {
                Check::Done(s)
            } else {
                Check::Pending(format!("{s:?}"))
            })
        })
        .await
        .with_context(|| vk.tail())?;
        assert_eq!(st.node_name.as_deref(), Some(t.as_str()));
        assert_eq!(st.project_id.as_deref(), Some(c.project_id.as_str()));
        let node = wait_for(LONG, POLL, &format!("node {t} Ready"), async || {
            let n = nodes.get_opt(t).await?;
            let ready = n
                .as_ref()
                .and_then(|n| n.status.as_ref()?.conditions.clone())
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            Ok(match n {
                Some(n) if ready => Check::Done(n),
                n => Check::Pending(format!("{:?}", n.and_then(|n| n.status))),
            })
        })
        .await
        .with_context(|| vk.tail())?;
        assert_eq!(node.labels()[api::tenant::TENANT_LABEL], *t);
        let taints = node
            .spec
            .clone()
            .unwrap_or_default()
            .taints
            .unwrap_or_default();
        assert!(
            taints.iter().any(|x| x.key == api::tenant::TENANT_LABEL
                && x.value.as_deref() == Some(t.as_str())
                && x.effect == "NoSchedule"),
            "{taints:?}"
        );
        // Capacity from the project's Zun quota (`containers` → pods).
        let cap = node.status.unwrap_or_default().capacity.unwrap_or_default();
        assert!(
            cap.contains_key("pods") && cap.contains_key("memory"),
            "{cap:?}"
        );
    }
    let bad_status = wait_for(LONG, POLL, "the bad tenant's InvalidSpec", async || {
        let s = tenants.get(&w.bad).await?.status.unwrap_or_default();
        let c = s
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready" && c.reason.as_deref() == Some("InvalidSpec"))
            .cloned();
        Ok(match c {
            Some(c) => Check::Done(c),
            None => Check::Pending(format!("{s:?}")),
        })
    })
    .await?;
    assert!(
        bad_status
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("spec.defaultNetwork"),
        "{bad_status:?}"
    );
    assert!(nodes.get_opt(&w.bad).await?.is_none(), "no node for it");

    // One pod per tenant, each in its tenant's namespace on its node.
    let pods_a: Api<Pod> = Api::namespaced(client.clone(), &w.ns_a);
    let pods_b: Api<Pod> = Api::namespaced(client.clone(), &w.ns_b);
    let pa = pods_a
        .create(&PostParams::default(), &tenant_pod("pa", &w.ta, &w.ta)?)
        .await?;
    let pb = pods_b
        .create(&PostParams::default(), &tenant_pod("pb", &w.tb, &w.tb)?)
        .await?;
    // A pod of tenant A's namespace bound (past the scheduler) to tenant B's node.
    let stray = pods_a
        .create(&PostParams::default(), &tenant_pod("stray", &w.tb, &w.tb)?)
        .await?;
    for (api, name) in [(&pods_a, "pa"), (&pods_b, "pb")] {
        wait_for(LONG, POLL, &format!("pod {name} Running"), async || {
            let s = api.get(name).await?.status.unwrap_or_default();
            Ok(if s.phase.as_deref() == Some("Running") {
                Check::Done(())
            } else {
                Check::Pending(format!("{s:?}"))
            })
        })
        .await
        .with_context(|| vk.tail())?;
    }
    kubelet_api_of_each_tenant_node(target, w, &vk).await?;
    let st = wait_for(LONG, POLL, "the stray pod refused", async || {
        let s = pods_a.get("stray").await?.status.unwrap_or_default();
        Ok(if s.phase.as_deref() == Some("Failed") {
            Check::Done(s)
        } else {
            Check::Pending(format!("{s:?}"))
        })
    })
    .await
    .with_context(|| vk.tail())?;
    assert_eq!(st.reason.as_deref(), Some(vk_zun::tenant::NOT_BOUND));
    let m = st.message.clone().unwrap_or_default();
    assert!(
        m.contains(&format!("{:?}", w.ns_a)) && m.contains(&format!("ZunTenant {:?}", w.tb)),
        "{m}"
    );
    let events: Api<Event> = Api::namespaced(client.clone(), &w.ns_a);
    let ev = events.list(&ListParams::default()).await?.items;
    assert!(
        ev.iter()
            .any(|e| e.reason.as_deref() == Some(vk_zun::tenant::NOT_BOUND)
                && e.involved_object.name.as_deref() == Some("stray")),
        "a Warning Event names the refusal"
    );

    let mut groups_a = Vec::new();
    // Each pod's container is in its own tenant's project (listed as that tenant, invisible
    // to the other) and its port on its tenant's network in that project.
    for (own, other, pod, node) in [(a, b, &pa, &w.ta), (b, a, &pb, &w.tb)] {
        let uid = pod.uid().unwrap_or_default();
        let by_uid = BTreeMap::from([(POD_UID.to_string(), uid.clone())]);
        let mine = own.zun().list_containers(&by_uid, None).await?;
        assert_eq!(mine.len(), 1, "{} in {}", pod.name_any(), own.cloud);
        assert_eq!(mine[0].labels[NODE], *node);
        assert!(
            other.zun().list_containers(&by_uid, None).await?.is_empty(),
            "{} is not in {}'s project",
            pod.name_any(),
            other.cloud
        );
        let port_name = vk_zun::pod_port::name(node, &uid);
        let ports = own
            .ports()
            .list_ports(&PortFilter {
                name: Some(port_name.clone()),
                ..Default::default()
            })
            .await?;
        assert_eq!(ports.len(), 1, "{port_name}");
        assert_eq!(ports[0].network_id, own.network_id);
        assert_eq!(ports[0].project_id, own.project_id);
        assert_eq!(ports[0].device_id, mine[0].uuid, "bound to the container");
        if *node == w.ta {
            groups_a = ports[0].security_groups.clone();
        }
    }
    // The refused pod never reached Zun or Neutron, in either project.
    let stray_uid = stray.uid().unwrap_or_default();
    for c in [a, b] {
        let by_uid = BTreeMap::from([(POD_UID.to_string(), stray_uid.clone())]);
        assert!(c.zun().list_containers(&by_uid, None).await?.is_empty());
        let ports = c.ports().list_ports(&PortFilter::default()).await?;
        assert!(
            !ports.iter().any(|p| p.name.ends_with(&stray_uid)),
            "no port for the refused pod"
        );
    }

    // Deleting the pods deletes their containers and ports in their projects.
    for (api, name) in [(&pods_a, "pa"), (&pods_b, "pb"), (&pods_a, "stray")] {
        api.delete(name, &DeleteParams::default()).await?;
    }
    for (api, name) in [(&pods_a, "pa"), (&pods_b, "pb"), (&pods_a, "stray")] {
        wait_for(
            LONG,
            POLL,
            &format!("pod {name} removed by its node"),
            async || {
                Ok(match api.get_opt(name).await? {
                    None => Check::Done(()),
                    Some(p) => Check::Pending(format!("{:?}", p.status.and_then(|s| s.phase))),
                })
            },
        )
        .await
        .with_context(|| vk.tail())?;
    }
    deleted_while_down(target, w, b, vk).await?;
    Ok(groups_a)
}

/// Tenant B deleted while the process is down: its finalizer holds it, and the restarted
/// process deletes what B's node made (a pod's container, port and security group) with a
/// session from B's Secret, then B's pod and Node, then the finalizer.
async fn deleted_while_down(
    target: &e2e::target::Target,
    w: &World,
    b: &TenantCloud,
    vk: Process,
) -> anyhow::Result<()> {
    let client = &w.client;
    let tenants: Api<ZunTenant> = Api::all(client.clone());
    let pods_b: Api<Pod> = Api::namespaced(client.clone(), &w.ns_b);
    let mut pod = tenant_pod("pb2", &w.tb, &w.tb)?;
    if let Some(c) = pod.spec.as_mut().and_then(|s| s.containers.first_mut()) {
        c.ports = Some(vec![serde_json::from_value(
            json!({"containerPort": 8080}),
        )?]);
    }
    pods_b.create(&PostParams::default(), &pod).await?;
    wait_for(LONG, POLL, "pod pb2 Running", async || {
        let p = pods_b.get("pb2").await?;
        let phase = p.status.and_then(|s| s.phase).unwrap_or_default();
        Ok(if phase == "Running" {
            Check::Done(())
        } else {
            Check::Pending(phase)
        })
    })
    .await
    .with_context(|| vk.tail())?;
    let t = tenants.get(&w.tb).await?;
    assert!(
        t.finalizers()
            .iter()
            .any(|f| f == api::tenant::TENANT_FINALIZER),
        "a tenant whose node runs carries the finalizer: {:?}",
        t.finalizers()
    );
    drop(vk);
    tenants.delete(&w.tb, &DeleteParams::default()).await?;
    let held = tenants.get_opt(&w.tb).await?;
    assert!(
        held.is_some_and(|t| t.metadata.deletion_timestamp.is_some()),
        "the finalizer holds the tenant while no process runs"
    );
    let vk = Process::start(target.kubeconfig(), &format!("{}-restarted", w.ta), &[])?;
    wait_for(
        LONG,
        POLL,
        "B released by the restarted process",
        async || {
            let mut left = Vec::new();
            if tenants.get_opt(&w.tb).await?.is_some() {
                left.push("ZunTenant".to_string());
            }
            if pods_b.get_opt("pb2").await?.is_some() {
                left.push("pod pb2".into());
            }
            left.extend(node_leftovers(client, b, &w.tb).await?);
            Ok(if left.is_empty() {
                Check::Done(())
            } else {
                Check::Pending(left.join(", "))
            })
        },
    )
    .await
    .with_context(|| vk.tail())?;
    Ok(())
}

/// What `node` left: its Node, and in `c`'s project its Zun containers and the ports and
/// security groups named for its pods.
async fn node_leftovers(
    client: &Client,
    c: &TenantCloud,
    node: &str,
) -> anyhow::Result<Vec<String>> {
    let mut left = Vec::new();
    if Api::<Node>::all(client.clone())
        .get_opt(node)
        .await?
        .is_some()
    {
        left.push("Node".to_string());
    }
    let ours = BTreeMap::from([(NODE.to_string(), node.to_string())]);
    for x in c.zun().list_containers(&ours, None).await? {
        left.push(format!("container {} ({})", x.uuid, x.status));
    }
    for p in c.ports().list_ports(&PortFilter::default()).await? {
        if vk_zun::pod_port::pod_uid(node, &p.name).is_some() {
            left.push(format!("port {}", p.name));
        }
    }
    for g in openstack::Cloud::from_core(c.core.clone())
        .network
        .list_security_groups(&openstack::model::SecurityGroupFilter {
            project_id: Some(c.project_id.clone()),
            ..Default::default()
        })
        .await?
    {
        if vk_zun::pod_port::pod_uid(node, &g.name).is_some() {
            left.push(format!("group {}", g.name));
        }
    }
    Ok(left)
}

const KUBELET_TOKEN: &str = "vk-tenants-apiserver";

/// `logs` and `exec` on each tenant's pod through its own node's kubelet port (the port its
/// Node publishes, on the address it publishes), as the API server reaches a node; the other
/// tenant's node does not serve the pod.
async fn kubelet_api_of_each_tenant_node(
    target: &e2e::target::Target,
    w: &World,
    vk: &Process,
) -> anyhow::Result<()> {
    use futures::AsyncReadExt as _;
    use kube::api::{AttachParams, LogParams};
    use kube::core::kubelet_debug::KubeletDebugParams;
    use kube_emulator::review::{AllowRule, AuthConfig, ReviewUser};
    use tokio::io::AsyncReadExt as _;
    let Some(emu) = target.emulator() else {
        eprintln!(
            "SKIPPED (kubelet API part): the kubelet ports need TokenReview rules, which only the emulator takes"
        );
        return Ok(());
    };
    emu.set_auth(AuthConfig {
        tokens: [(
            KUBELET_TOKEN.to_string(),
            ReviewUser {
                username: "apiserver".into(),
                ..Default::default()
            },
        )]
        .into_iter()
        .collect(),
        rules: [&w.ta, &w.tb]
            .into_iter()
            .map(|node| AllowRule {
                subject: "apiserver".into(),
                verbs: vec!["*".into()],
                resource: "nodes".into(),
                subresource: "*".into(),
                name: node.clone(),
            })
            .collect(),
    });
    let nodes: Api<Node> = Api::all(w.client.clone());
    let mut clients = BTreeMap::new();
    for node in [&w.ta, &w.tb] {
        let status = nodes.get(node).await?.status.unwrap_or_default();
        let port = status
            .daemon_endpoints
            .and_then(|d| d.kubelet_endpoint)
            .map(|e| e.port)
            .context("no daemonEndpoints")?;
        let address = status
            .addresses
            .unwrap_or_default()
            .into_iter()
            .find(|a| a.type_ == "InternalIP")
            .map(|a| a.address)
            .context("no InternalIP")?;
        let mut cfg = kube::Config::new(format!("https://{address}:{port}").parse()?);
        // Without --tls-cert-file each node serves a self-signed certificate.
        cfg.accept_invalid_certs = true;
        cfg.headers.push((
            http::header::AUTHORIZATION,
            format!("Bearer {KUBELET_TOKEN}").parse()?,
        ));
        eprintln!("node {node}: kubelet API at {address}:{port}");
        clients.insert(node.clone(), (port, Client::try_from(cfg)?));
    }
    assert_ne!(
        clients[&w.ta].0, clients[&w.tb].0,
        "each tenant node publishes its own kubelet port"
    );
    for (node, other, ns, pod) in [(&w.ta, &w.tb, &w.ns_a, "pa"), (&w.tb, &w.ta, &w.ns_b, "pb")] {
        let client = &clients[node].1;
        let at = KubeletDebugParams {
            name: pod,
            namespace: ns,
            pod_uid: None,
        };
        // $WHO is the pod's own name in its container's env: the exec ran in that container.
        let ap = AttachParams::default().stderr(false);
        let mut p = client
            .kubelet_node_exec(&at, "c", ["sh", "-c", "echo exec-in-$WHO"], &ap)
            .await
            .with_context(|| vk.tail())?;
        let mut out = String::new();
        p.stdout()
            .context("stdout")?
            .read_to_string(&mut out)
            .await?;
        let status = p.take_status().context("status")?.await;
        assert_eq!(out, format!("exec-in-{pod}\n"), "{status:?}");
        let logs = wait_for(LONG, POLL, &format!("the logs of {pod}"), async || {
            let mut r = client
                .kubelet_node_logs(&at, "c", &LogParams::default())
                .await?;
            let mut text = String::new();
            r.read_to_string(&mut text).await?;
            Ok(if text.contains(&format!("started-{pod}")) {
                Check::Done(text)
            } else {
                Check::Pending(text)
            })
        })
        .await
        .with_context(|| vk.tail())?;
        eprintln!("logs of {pod} through node {node}: {logs:?}");
        // The other tenant's node does not serve this pod (it is not bound there).
        let e = clients[other]
            .1
            .kubelet_node_logs(&at, "c", &LogParams::default())
            .await
            .err()
            .with_context(|| format!("node {other} served the logs of {pod}"))?;
        match &e {
            kube::Error::Api(s) => assert_eq!(s.code, 404, "{e}"),
            other => panic!("{other}"),
        }
    }
    Ok(())
}

/// `--tenants --load-balancers --network-policies` with the two tenants: a LoadBalancer
/// Service over tenant A's pods gets its load balancer in A's project (listed as A and by the
/// admin with A's project; B sees none) with members following the pods' readiness; a
/// NetworkPolicy with ingress and egress (an `ipBlock` with `except`, a pod peer) becomes a
/// security group in A's project with exactly the expected rules on A's pod ports; a Service
/// selecting pods of both tenants (a namespace bound to both) is refused with an Event and gets
/// no load balancer in either project; deleting tenant A deletes its load balancer and frees
/// the Service of its finalizer. Skipped without Octavia or the second tenant.
#[tokio::test]
async fn tenant_load_balancers_and_network_policies_stay_in_their_projects() -> anyhow::Result<()> {
    let Some(z) = vk_common::zun_env() else {
        return Ok(());
    };
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let (Some(cloud2), Some(net2), Some(net1_id), Some(net2_id), Some(_)) = (
        var("ZUN_TENANT2_CLOUD"),
        var("ZUN_NETWORK2"),
        var("ZUN_NETWORK_ID"),
        var("ZUN_NETWORK2_ID"),
        var("OCTAVIA_API_URL"),
    ) else {
        eprintln!(
            "SKIPPED: the test cloud has no second Zun tenant or no Octavia (ZUN_TENANT2_CLOUD, ZUN_NETWORK2, ZUN_NETWORK_ID, ZUN_NETWORK2_ID, OCTAVIA_API_URL)"
        );
        return Ok(());
    };
    let t0 = std::time::Instant::now();
    let target = e2e::target::Target::from_env().await?;
    let client = target.client().await?;
    install_crd(&client).await?;
    let admin = connect(&z.file, "local-admin").await?;
    let (a, b) = tenant_pair(
        &z,
        &admin,
        &cloud2,
        &net2,
        &net1_id,
        &net2_id,
        "tenants-net",
    )
    .await?;
    let w = World {
        client: client.clone(),
        ta: e2e::names::unique("tnet-a"),
        tb: e2e::names::unique("tnet-b"),
        bad: e2e::names::unique("tnet-unused"),
        ns_a: e2e::names::unique("tnet-ns-a"),
        ns_b: e2e::names::unique("tnet-ns-b"),
        ns_sec: e2e::names::unique("tnet-sec"),
        ns_shared: Some(e2e::names::unique("tnet-shared")),
    };
    let mut left = Leftovers::default();
    let result = std::panic::AssertUnwindSafe(networking(&target, &w, &a, &b, &admin, &mut left))
        .catch_unwind()
        .await;
    w.cleanup(&[&a, &b]).await;
    left.cleanup(&[&a, &b]).await;
    a.delete_credential().await;
    b.delete_credential().await;
    eprintln!("tenant networking test took {:?}", t0.elapsed());
    match result {
        Ok(r) => r,
        Err(p) => std::panic::resume_unwind(p),
    }
}

/// What a failed networking run may leave in the projects: load balancers and groups by name.
#[derive(Default)]
struct Leftovers {
    lb_names: Vec<String>,
    group_names: Vec<String>,
}

impl Leftovers {
    async fn cleanup(&self, clouds: &[&TenantCloud]) {
        use openstack::loadbalancer::LoadBalancers as _;
        for c in clouds {
            let lbs = openstack::loadbalancer::LoadBalancerAdapter::new(c.core.clone());
            for n in &self.lb_names {
                for l in lbs.list_load_balancers(n).await.unwrap_or_default() {
                    let _ = lbs.delete_load_balancer(&l.id).await;
                }
            }
            let net = openstack::Cloud::from_core(c.core.clone()).network;
            for n in &self.group_names {
                for g in net
                    .list_security_groups(&openstack::model::SecurityGroupFilter {
                        name: Some(n.clone()),
                        project_id: Some(c.project_id.clone()),
                        ..Default::default()
                    })
                    .await
                    .unwrap_or_default()
                {
                    // In use by another test's port: Neutron refuses, and that is right.
                    let _ = net.delete_security_group(&g.id).await;
                }
            }
        }
    }
}

/// A busybox httpd pod of `tenant` on its node, labelled `app=<app>`, whose readiness is the
/// file /www/ready.html (there at start).
fn web_pod(name: &str, node: &str, tenant: &str, app: &str) -> anyhow::Result<Pod> {
    let mut p = tenant_pod(name, node, tenant)?;
    p.metadata.labels = Some([("app".to_string(), app.to_string())].into());
    let spec = p.spec.as_mut().context("spec")?;
    spec.containers[0] = serde_json::from_value(json!({"name": "c", "image": "busybox",
        "command": ["sh", "-c",
            "mkdir -p /www; echo ok > /www/ready.html; exec httpd -f -p 8080 -h /www"],
        "ports": [{"name": "web", "containerPort": 8080}],
        "readinessProbe": {"httpGet": {"port": "web", "path": "/ready.html"},
            "periodSeconds": 1, "failureThreshold": 1}}))?;
    Ok(p)
}

/// The members (`ip:port`) of the load balancer named `name` that `cloud` lists, once ACTIVE;
/// also its project.
async fn lb_members(
    cloud: &TenantCloud,
    name: &str,
) -> anyhow::Result<Option<(String, BTreeSet<String>)>> {
    use openstack::loadbalancer::LoadBalancers as _;
    let lbs = openstack::loadbalancer::LoadBalancerAdapter::new(cloud.core.clone());
    let found = lbs.list_load_balancers(name).await?;
    let Some(lb) = found.first() else {
        return Ok(None);
    };
    if lb.provisioning_status != "ACTIVE" {
        return Ok(None);
    }
    let tree = lbs.status_tree(&lb.id).await?;
    Ok(Some((
        lb.project_id.clone(),
        tree.listeners
            .iter()
            .flat_map(|l| l.pools.iter())
            .flat_map(|p| p.members.iter())
            .map(|m| format!("{}:{}", m.address, m.protocol_port))
            .collect(),
    )))
}

fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

use std::collections::BTreeSet;

async fn networking(
    target: &e2e::target::Target,
    w: &World,
    a: &TenantCloud,
    b: &TenantCloud,
    admin: &Core,
    left: &mut Leftovers,
) -> anyhow::Result<()> {
    use openstack::loadbalancer::LoadBalancers as _;
    let client = &w.client;
    let shared = w.ns_shared.clone().context("shared namespace")?;
    for ns in [&w.ns_a, &w.ns_b, &w.ns_sec, &shared] {
        let o: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &o)
            .await?;
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &w.ns_sec);
    let tenants: Api<ZunTenant> = Api::all(client.clone());
    for (t, c, ns) in [(&w.ta, a, &w.ns_a), (&w.tb, b, &w.ns_b)] {
        let s: Secret = serde_json::from_value(json!({
            "metadata": {"name": t},
            "stringData": {"auth_url": "http://127.0.0.1:5000/v3",
                           "application_credential_id": c.cred_id,
                           "application_credential_secret": c.cred_secret}
        }))?;
        secrets.create(&PostParams::default(), &s).await?;
        let zt: ZunTenant = serde_json::from_value(json!({
            "apiVersion": "virtual-kubelet.sunet.se/v1alpha1", "kind": "ZunTenant",
            "metadata": {"name": t},
            "spec": {"credentials": {"secretRef": {"namespace": w.ns_sec, "name": t}},
                     "networks": [{"name": "pods", "network": c.network}],
                     "namespaces": [ns, &shared]}
        }))?;
        tenants.create(&PostParams::default(), &zt).await?;
    }
    let vk = Process::start(
        target.kubeconfig(),
        &w.ta,
        &["--load-balancers", "--network-policies"],
    )?;
    let nodes: Api<Node> = Api::all(client.clone());
    for t in [&w.ta, &w.tb] {
        wait_for(LONG, POLL, &format!("node {t} Ready"), async || {
            let n = nodes.get_opt(t).await?;
            let ready = n
                .as_ref()
                .and_then(|n| n.status.as_ref()?.conditions.clone())
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            Ok(if ready {
                Check::Done(())
            } else {
                Check::Pending(format!("{:?}", n.and_then(|n| n.status)))
            })
        })
        .await
        .with_context(|| vk.tail())?;
    }
    let t0 = std::time::Instant::now();
    let pods_a: Api<Pod> = Api::namespaced(client.clone(), &w.ns_a);
    let pods_shared: Api<Pod> = Api::namespaced(client.clone(), &shared);
    for name in ["web1", "web2"] {
        pods_a
            .create(&PostParams::default(), &web_pod(name, &w.ta, &w.ta, "web")?)
            .await?;
    }
    // A Service over pods of both tenants (its namespace is bound to both).
    for (name, node) in [("mix-a", &w.ta), ("mix-b", &w.tb)] {
        pods_shared
            .create(&PostParams::default(), &web_pod(name, node, node, "mix")?)
            .await?;
    }
    let svc = |name: &str, app: &str| -> anyhow::Result<KubeService> {
        Ok(serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"type": "LoadBalancer", "selector": {"app": app},
                     "ports": [{"name": "http", "port": 80, "targetPort": "web"}]}
        }))?)
    };
    let svcs_a: Api<KubeService> = Api::namespaced(client.clone(), &w.ns_a);
    let svcs_shared: Api<KubeService> = Api::namespaced(client.clone(), &shared);
    let web = svcs_a
        .create(&PostParams::default(), &svc("web", "web")?)
        .await?;
    let mix = svcs_shared
        .create(&PostParams::default(), &svc("mix", "mix")?)
        .await?;
    let lb_name = vk_zun::services::lb_name(&web.uid().context("uid")?);
    let mix_lb = vk_zun::services::lb_name(&mix.uid().context("uid")?);
    left.lb_names = vec![lb_name.clone(), mix_lb.clone()];

    let mut ips = BTreeSet::new();
    for name in ["web1", "web2"] {
        let p = wait_for(LONG, POLL, &format!("pod {name} Ready"), async || {
            let p = pods_a.get(name).await?;
            Ok(if is_ready(&p) {
                Check::Done(p)
            } else {
                Check::Pending(format!("{:?}", p.status))
            })
        })
        .await
        .with_context(|| vk.tail())?;
        ips.insert(
            p.status
                .and_then(|s| s.pod_ip)
                .context("podIP")?
                .to_string(),
        );
    }
    eprintln!("tenant A's pods Ready after {:?}", t0.elapsed());
    let both: BTreeSet<String> = ips.iter().map(|ip| format!("{ip}:8080")).collect();
    let (project, _) = wait_for(
        LONG,
        POLL,
        "A's load balancer ACTIVE with both pods",
        async || {
            let m = lb_members(a, &lb_name).await?;
            Ok(match m {
                Some((p, m)) if m == both => Check::Done((p, m)),
                m => Check::Pending(format!("{m:?}")),
            })
        },
    )
    .await
    .with_context(|| vk.tail())?;
    eprintln!(
        "load balancer ACTIVE in A's project after {:?}",
        t0.elapsed()
    );
    assert_eq!(project, a.project_id, "made in tenant A's project");
    // Tenant B does not see it; the admin finds it in A's project only.
    let lbs_b = openstack::loadbalancer::LoadBalancerAdapter::new(b.core.clone());
    assert!(lbs_b.list_load_balancers(&lb_name).await?.is_empty());
    let lbs_admin = openstack::loadbalancer::LoadBalancerAdapter::new(admin.clone());
    let all = lbs_admin.list_load_balancers(&lb_name).await?;
    assert_eq!(
        all.iter()
            .map(|l| l.project_id.as_str())
            .collect::<Vec<_>>(),
        [a.project_id.as_str()],
        "exactly one load balancer, in A's project"
    );
    assert!(all[0].tags.contains(&vk_zun::services::node_tag(&w.ta)));
    let vip = all[0].vip_address.clone().context("vip")?;
    wait_for(LONG, POLL, "the Service's ingress is the VIP", async || {
        let ip = svcs_a
            .get("web")
            .await?
            .status
            .and_then(|s| s.load_balancer?.ingress?.into_iter().next()?.ip);
        Ok(if ip.as_deref() == Some(vip.as_str()) {
            Check::Done(())
        } else {
            Check::Pending(format!("{ip:?}"))
        })
    })
    .await?;

    // web1's readiness fails: its member leaves A's pool.
    let web1 = pods_a.get("web1").await?;
    let web1_ip = web1
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .context("ip")?;
    let by_uid = BTreeMap::from([(POD_UID.to_string(), web1.uid().unwrap_or_default())]);
    let zun_a = a.zun();
    let id = zun_a
        .list_containers(&by_uid, None)
        .await?
        .first()
        .context("web1's container")?
        .uuid
        .clone();
    zun_a
        .exec(&id, &["rm".to_string(), "/www/ready.html".to_string()])
        .await?;
    let rest: BTreeSet<String> = both
        .iter()
        .filter(|m| !m.starts_with(&format!("{web1_ip}:")))
        .cloned()
        .collect();
    wait_for(LONG, POLL, "web1's member gone from A's pool", async || {
        let m = lb_members(a, &lb_name).await?;
        Ok(match m {
            Some((_, m)) if m == rest => Check::Done(()),
            m => Check::Pending(format!("{m:?}")),
        })
    })
    .await
    .with_context(|| vk.tail())?;
    eprintln!("unready pod left A's pool after {:?}", t0.elapsed());

    // The Service over both tenants' pods: refused, no load balancer anywhere.
    let events: Api<Event> = Api::namespaced(client.clone(), &shared);
    let ev = wait_for(LONG, POLL, "the mixed Service refused", async || {
        let ev = events.list(&ListParams::default()).await?.items;
        Ok(
            match ev.into_iter().find(|e| {
                e.reason.as_deref() == Some("LoadBalancerRefused")
                    && e.involved_object.name.as_deref() == Some("mix")
            }) {
                Some(e) => Check::Done(e),
                None => Check::Pending("no Event yet".into()),
            },
        )
    })
    .await
    .with_context(|| vk.tail())?;
    let m = ev.message.unwrap_or_default();
    assert!(m.contains("spec.selector"), "{m}");
    assert!(
        lbs_admin.list_load_balancers(&mix_lb).await?.is_empty(),
        "no load balancer for the mixed Service in any project"
    );

    // A NetworkPolicy with ingress and egress over A's web pods.
    let pols: Api<NetworkPolicy> = Api::namespaced(client.clone(), &w.ns_a);
    let pol: NetworkPolicy = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"podSelector": {"matchLabels": {"app": "web"}},
                 "policyTypes": ["Ingress", "Egress"],
                 "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}],
                              "ports": [{"port": 8080}]}],
                 "egress": [{"to": [{"ipBlock": {"cidr": "192.0.2.0/24",
                                                 "except": ["192.0.2.128/25"]}}],
                             "ports": [{"port": 443}]},
                            {"to": [{"podSelector": {"matchLabels": {"app": "web"}}}],
                             "ports": [{"protocol": "UDP", "port": 53}]}]}
    }))?;
    let pol = pols.create(&PostParams::default(), &pol).await?;
    let group = vk_zun::netpol_sync::group_name(&pol.uid().context("uid")?);
    left.group_names = vec![
        group.clone(),
        vk_zun::netpol_sync::OPEN_INGRESS.into(),
        vk_zun::netpol_sync::OPEN_EGRESS.into(),
    ];
    let mut want: BTreeSet<String> = [
        "ingress IPv4 tcp 8080-8080 10.0.0.0/8".to_string(),
        "egress IPv4 tcp 443-443 192.0.2.0/25".to_string(),
    ]
    .into();
    for ip in &ips {
        want.insert(format!("egress IPv4 udp 53-53 {ip}/32"));
    }
    let net_a = openstack::Cloud::from_core(a.core.clone()).network;
    let group_id = wait_for(
        LONG,
        POLL,
        "the policy's group in A's project",
        async || {
            let found = net_a
                .list_security_groups(&openstack::model::SecurityGroupFilter {
                    name: Some(group.clone()),
                    project_id: Some(a.project_id.clone()),
                    ..Default::default()
                })
                .await?;
            let Some(g) = found.first() else {
                return Ok(Check::Pending("no group".into()));
            };
            let rules: BTreeSet<String> = net_a
                .list_security_group_rules(&g.id)
                .await?
                .iter()
                .map(|r| {
                    format!(
                        "{} {} {} {}-{} {}",
                        r.direction,
                        r.ethertype,
                        r.protocol.as_deref().unwrap_or("any"),
                        r.port_range_min.unwrap_or(0),
                        r.port_range_max.unwrap_or(0),
                        r.remote_ip_prefix.as_deref().unwrap_or("any")
                    )
                })
                .collect();
            Ok(if rules == want {
                Check::Done(g.id.clone())
            } else {
                Check::Pending(format!("{rules:?}"))
            })
        },
    )
    .await
    .with_context(|| vk.tail())?;
    // Both directions isolated: A's web pods' ports carry the policy's group only.
    for name in ["web1", "web2"] {
        let uid = pods_a.get(name).await?.uid().unwrap_or_default();
        let port_name = vk_zun::pod_port::name(&w.ta, &uid);
        wait_for(
            LONG,
            POLL,
            &format!("{name}'s port carries the policy group only"),
            async || {
                let ports = a
                    .ports()
                    .list_ports(&PortFilter {
                        name: Some(port_name.clone()),
                        ..Default::default()
                    })
                    .await?;
                let groups = ports
                    .first()
                    .map(|p| p.security_groups.clone())
                    .unwrap_or_default();
                Ok(if groups == [group_id.clone()] {
                    Check::Done(())
                } else {
                    Check::Pending(format!("{groups:?}"))
                })
            },
        )
        .await
        .with_context(|| vk.tail())?;
    }
    let net_b = openstack::Cloud::from_core(b.core.clone()).network;
    assert!(
        net_b
            .list_security_groups(&openstack::model::SecurityGroupFilter {
                name: Some(group.clone()),
                ..Default::default()
            })
            .await?
            .is_empty(),
        "tenant B's project has no group of the policy"
    );
    eprintln!(
        "policy's group in line in A's project after {:?}",
        t0.elapsed()
    );

    // Tenant A goes: its node deletes its load balancer, and the Service (its namespace bound
    // to no tenant now) loses its finalizer and can be deleted.
    tenants.delete(&w.ta, &DeleteParams::default()).await?;
    wait_for(LONG, POLL, "A's load balancer deleted", async || {
        let l = lbs_admin.list_load_balancers(&lb_name).await?;
        Ok(if l.iter().all(|l| l.provisioning_status == "DELETED") {
            Check::Done(())
        } else {
            Check::Pending(format!(
                "{:?}",
                l.iter().map(|l| &l.provisioning_status).collect::<Vec<_>>()
            ))
        })
    })
    .await
    .with_context(|| vk.tail())?;
    svcs_a.delete("web", &DeleteParams::default()).await?;
    wait_for(LONG, POLL, "the Service gone", async || {
        Ok(match svcs_a.get_opt("web").await? {
            None => Check::Done(()),
            Some(s) => Check::Pending(format!("finalizers {:?}", s.finalizers())),
        })
    })
    .await
    .with_context(|| vk.tail())?;
    eprintln!("tenant A's load balancer released after {:?}", t0.elapsed());
    // Nothing else of A's node stays: its pods (web1, web2, mix-a), their containers, ports
    // and security groups in A's project, and its Node; B's pod is untouched.
    wait_for(
        LONG,
        POLL,
        "A's pods, containers, ports and groups gone",
        async || {
            let mut left = Vec::new();
            for p in pods_a.list(&ListParams::default()).await?.items {
                left.push(format!("pod {}", p.name_any()));
            }
            for p in pods_shared.list(&ListParams::default()).await?.items {
                if p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(w.ta.as_str()) {
                    left.push(format!("pod {}", p.name_any()));
                }
            }
            left.extend(node_leftovers(client, a, &w.ta).await?);
            Ok(if left.is_empty() {
                Check::Done(())
            } else {
                Check::Pending(left.join(", "))
            })
        },
    )
    .await
    .with_context(|| vk.tail())?;
    assert!(
        pods_shared.get_opt("mix-b").await?.is_some(),
        "tenant B's pod stays"
    );
    eprintln!(
        "tenant A's node released everything after {:?}",
        t0.elapsed()
    );
    Ok(())
}
