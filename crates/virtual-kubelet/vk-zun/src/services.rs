//! Services of type LoadBalancer over the node's pods become Octavia load balancers.
//!
//! For a `type: LoadBalancer` Service whose selector picks pods of this node: one load
//! balancer named `k8s-svc-<service uid>` and tagged `k8s-node=<node>` (found by that tag and
//! name after a crash, so a lost create never makes a second one; a load balancer so tagged and
//! named whose Service this node no longer serves is deleted) with its VIP on the node's
//! subnet, in the node's project (a `--tenants` node: its tenant's, for the Services of the
//! tenant's namespaces only, refusing one that selects pods of another tenant's node too, see
//! [`decide`]); one listener and one pool per
//! Service port (TCP or UDP), both named `<protocol>-<port>`; the pool's members are the
//! node's *ready* pods' IPs (their Neutron port IPs) with the port's `targetPort`, kept in line
//! with readiness by one batch update. The VIP goes to `status.loadBalancer.ingress`. A
//! finalizer on the Service makes its deletion delete the load balancer (cascade) first.
//!
//! [`decide`] (whether the node serves a Service), [`desired`] (Service + pods → what Octavia
//! should hold) and [`plan`] (desired + observed → the next write) are pure; [`run`] does the I/O, polling: Octavia takes one write at a time
//! per load balancer (it is `PENDING_UPDATE` in between), so a pass makes at most one write
//! per Service and the next pass goes on.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use api::tenant::TENANT_LABEL;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use openstack::loadbalancer::{
    LoadBalancer, LoadBalancerCreate, LoadBalancers, Member, StatusTree, status,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::tenant::Tenant;

/// The Service finalizer: the load balancer is deleted before the Service goes.
pub const FINALIZER: &str = "virtual-kubelet.sunet.se/load-balancer";

/// The Octavia name of a Service's load balancer.
pub fn lb_name(service_uid: &str) -> String {
    format!("k8s-svc-{service_uid}")
}

/// One listener (and its pool) as it should be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredListener {
    /// `<protocol>-<port>`: the listener's and the pool's name.
    pub name: String,
    /// `TCP` or `UDP`.
    pub protocol: String,
    /// The Service port.
    pub port: u16,
    /// The ready pods, sorted.
    pub members: Vec<Member>,
}

/// What a Service needs of Octavia.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desired {
    /// The load balancer's name ([`lb_name`]).
    pub lb_name: String,
    /// One per Service port.
    pub listeners: Vec<DesiredListener>,
}

/// A Service field this node cannot map to Octavia.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct Refusal {
    /// The field, as a path (`spec.ports[0].protocol`).
    pub field: String,
    /// Why.
    pub reason: String,
}

fn is_ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Whether `pod` is on `node` and matches the Service's selector (a Service without a
/// selector has hand-made Endpoints, which this node does not follow).
pub fn selects(svc: &Service, pod: &Pod, node: &str) -> bool {
    let Some(sel) = svc.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return false;
    };
    !sel.is_empty()
        && pod.namespace() == svc.namespace()
        && pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
        && sel
            .iter()
            .all(|(k, v)| pod.labels().get(k).is_some_and(|x| x == v))
}

/// The container port a pod serves `target` on (a number, or a named container port).
fn target_port(pod: &Pod, target: &IntOrString) -> Option<u16> {
    match target {
        IntOrString::Int(n) => u16::try_from(*n).ok(),
        IntOrString::String(name) => pod
            .spec
            .as_ref()?
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok()),
    }
}

/// What Octavia should hold for `svc`, given the node's pods that it selects.
pub fn desired(svc: &Service, pods: &[&Pod]) -> Result<Desired, Refusal> {
    let spec = svc.spec.clone().unwrap_or_default();
    let mut listeners = Vec::new();
    for (i, p) in spec.ports.iter().flatten().enumerate() {
        let protocol = p.protocol.clone().unwrap_or_else(|| "TCP".into());
        if protocol != "TCP" && protocol != "UDP" {
            return Err(Refusal {
                field: format!("spec.ports[{i}].protocol"),
                reason: format!("{protocol} is not mapped to Octavia (TCP and UDP are)"),
            });
        }
        let port = u16::try_from(p.port).map_err(|_| Refusal {
            field: format!("spec.ports[{i}].port"),
            reason: format!("{} is not a port", p.port),
        })?;
        let target = p.target_port.clone().unwrap_or(IntOrString::Int(p.port));
        let mut members: Vec<Member> = pods
            .iter()
            .filter(|pod| is_ready(pod))
            .filter_map(|pod| {
                Some(Member {
                    address: pod.status.as_ref()?.pod_ip.clone()?,
                    protocol_port: target_port(pod, &target)?,
                    name: pod.name_any(),
                })
            })
            .collect();
        members.sort();
        listeners.push(DesiredListener {
            name: format!("{protocol}-{port}"),
            protocol,
            port,
            members,
        });
    }
    Ok(Desired {
        lb_name: lb_name(&svc.uid().unwrap_or_default()),
        listeners,
    })
}

/// The next write to bring Octavia to [`Desired`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// No load balancer yet.
    CreateLoadBalancer,
    /// Octavia is busy with the load balancer (`PENDING_*`): look again later.
    Wait(String),
    /// The load balancer failed in Octavia (`ERROR`): delete it, a later pass makes a new one.
    Recreate {
        /// The failed load balancer.
        lb_id: String,
    },
    /// A listener is missing.
    CreateListener {
        /// Its name.
        name: String,
        /// `TCP`/`UDP`.
        protocol: String,
        /// The port.
        port: u16,
    },
    /// A listener has no pool.
    CreatePool {
        /// The listener.
        listener_id: String,
        /// The pool's name.
        name: String,
        /// `TCP`/`UDP`.
        protocol: String,
    },
    /// A pool's members differ from the ready pods.
    SetMembers {
        /// The pool.
        pool_id: String,
        /// All members it should have.
        members: Vec<Member>,
    },
    /// A pool of a port the Service no longer has (deleted before its listener).
    DeletePool {
        /// The pool.
        id: String,
    },
    /// A listener of a port the Service no longer has.
    DeleteListener {
        /// The listener.
        id: String,
    },
    /// Octavia holds what the Service needs.
    Done,
}

/// The next write for `want`, given the load balancer found by name (`lb`) and its tree
/// (`tree`, read when `lb` is `ACTIVE`).
pub fn plan(want: &Desired, lb: Option<&LoadBalancer>, tree: Option<&StatusTree>) -> Step {
    let Some(lb) = lb else {
        return Step::CreateLoadBalancer;
    };
    match lb.provisioning_status.as_str() {
        status::ACTIVE => {}
        status::ERROR => {
            return Step::Recreate {
                lb_id: lb.id.clone(),
            };
        }
        other => return Step::Wait(format!("load balancer {} is {other}", lb.id)),
    }
    let Some(tree) = tree else {
        return Step::Wait(format!("load balancer {}: no status tree yet", lb.id));
    };
    for l in &tree.listeners {
        if !want.listeners.iter().any(|w| w.name == l.name) {
            return match l.pools.first() {
                Some(p) => Step::DeletePool { id: p.id.clone() },
                None => Step::DeleteListener { id: l.id.clone() },
            };
        }
    }
    for w in &want.listeners {
        let Some(l) = tree.listeners.iter().find(|l| l.name == w.name) else {
            return Step::CreateListener {
                name: w.name.clone(),
                protocol: w.protocol.clone(),
                port: w.port,
            };
        };
        let Some(pool) = l.pools.first() else {
            return Step::CreatePool {
                listener_id: l.id.clone(),
                name: w.name.clone(),
                protocol: w.protocol.clone(),
            };
        };
        let key = |m: &Member| (m.address.clone(), m.protocol_port);
        let mut have: Vec<_> = pool.members.iter().map(key).collect();
        have.sort();
        let want_keys: Vec<_> = w.members.iter().map(key).collect();
        if have != want_keys {
            return Step::SetMembers {
                pool_id: pool.id.clone(),
                members: w.members.clone(),
            };
        }
    }
    Step::Done
}

/// The tag of the load balancers `node` made: with the `k8s-svc-` name, what makes one ours.
pub fn node_tag(node: &str) -> String {
    format!("k8s-node={node}")
}

/// The Service UID a load balancer's name carries, or `None` when it is not a Service's.
pub fn service_uid(lb_name: &str) -> Option<&str> {
    lb_name.strip_prefix("k8s-svc-").filter(|u| !u.is_empty())
}

/// What a node does with a Service this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Not this node's: no load balancer of its, no pod of its selected.
    Skip,
    /// Keep its load balancer in line with the node's pods.
    Serve,
    /// Deleted, or no longer a LoadBalancer: its load balancer goes, then the finalizer.
    Release,
    /// It selects pods of other tenants' nodes too: a load balancer is in one project, so it
    /// gets none (this node's is deleted) and a Warning Event.
    Refuse(Refusal),
}

/// The [`Decision`] for `svc`: `ours`, how many of the node's pods it selects; `other_nodes`,
/// the other tenants' nodes with pods it selects (always empty outside `--tenants`);
/// `has_lb`, whether the node has a load balancer for it.
pub fn decide(svc: &Service, ours: usize, other_nodes: &[String], has_lb: bool) -> Decision {
    let is_lb = svc.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer");
    let has_finalizer = svc.finalizers().iter().any(|f| f == FINALIZER);
    if svc.metadata.deletion_timestamp.is_some() || !is_lb {
        return if has_lb || has_finalizer {
            Decision::Release
        } else {
            Decision::Skip
        };
    }
    if !other_nodes.is_empty() && (ours > 0 || has_lb) {
        return Decision::Refuse(Refusal {
            field: "spec.selector".into(),
            reason: format!(
                "it selects pods of other tenants' nodes ({}) too: a load balancer lives in one tenant's project, so the Service gets none (bind its namespace to one tenant)",
                other_nodes.join(", ")
            ),
        });
    }
    if ours == 0 && !has_lb {
        return Decision::Skip;
    }
    Decision::Serve
}

/// Where and how [`run`] works.
#[derive(Clone, Debug)]
pub struct ServicesConfig {
    /// This node's name: only pods bound to it are members.
    pub node: String,
    /// The Neutron subnet load balancers take their VIP from.
    pub vip_subnet_id: String,
    /// The project the load balancers are in (`None`: the credentials' own).
    pub project_id: Option<String>,
    /// The tenant the node serves (`--tenants`): only Services of its namespaces are looked
    /// at, and one selecting pods of another tenant's node is refused. `None`: a single node.
    pub tenant: Option<Tenant>,
    /// Time between two passes.
    pub interval: Duration,
}

/// Keep the load balancers of the node's Services until `stop`.
pub async fn run(
    client: Client,
    lbs: Arc<dyn LoadBalancers>,
    cfg: ServicesConfig,
    stop: CancellationToken,
) {
    info!(node = %cfg.node, subnet = %cfg.vip_subnet_id, project = cfg.project_id.as_deref().unwrap_or("?"), "serving Services of type LoadBalancer with Octavia");
    let mut refused: BTreeMap<String, String> = BTreeMap::new();
    loop {
        if let Err(e) = pass(&client, lbs.as_ref(), &cfg, &mut refused).await {
            warn!(node = %cfg.node, error = %e, "Services pass failed; retrying");
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(cfg.interval) => {}
        }
    }
}

/// The node's load balancers (tagged [`node_tag`], named after a Service), by Service UID.
async fn ours_by_service(
    lbs: &dyn LoadBalancers,
    node: &str,
    project_id: Option<&str>,
) -> Result<BTreeMap<String, Vec<LoadBalancer>>, openstack::Error> {
    let mut out: BTreeMap<String, Vec<LoadBalancer>> = BTreeMap::new();
    for l in lbs.list_tagged(&node_tag(node), project_id).await? {
        if l.provisioning_status == status::DELETED {
            continue;
        }
        if let Some(uid) = service_uid(&l.name) {
            out.entry(uid.to_string()).or_default().push(l);
        }
    }
    for v in out.values_mut() {
        v.sort_by(|a, b| a.id.cmp(&b.id));
    }
    Ok(out)
}

async fn pass(
    client: &Client,
    lbs: &dyn LoadBalancers,
    cfg: &ServicesConfig,
    refused: &mut BTreeMap<String, String>,
) -> anyhow_free::Result<()> {
    let served = |ns: &str| cfg.tenant.as_ref().is_none_or(|t| t.admit(ns).is_ok());
    let services: Vec<Service> = Api::<Service>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|s| served(&s.namespace().unwrap_or_default()))
        .filter(|s| {
            s.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
                || s.finalizers().iter().any(|f| f == FINALIZER)
        })
        .collect();
    let mut found = ours_by_service(lbs, &cfg.node, cfg.project_id.as_deref()).await?;
    // A single node looks at its own pods; a tenant's node also at the pods of its Services'
    // namespaces on the other tenants' nodes.
    let (pods, tenant_nodes): (Vec<Pod>, BTreeSet<String>) = match &cfg.tenant {
        None => (
            Api::<Pod>::all(client.clone())
                .list(&ListParams::default().fields(&format!("spec.nodeName={}", cfg.node)))
                .await?
                .items,
            BTreeSet::new(),
        ),
        Some(_) => {
            let mut pods = Vec::new();
            let namespaces: BTreeSet<String> =
                services.iter().filter_map(|s| s.namespace()).collect();
            for ns in &namespaces {
                pods.extend(
                    Api::<Pod>::namespaced(client.clone(), ns)
                        .list(&ListParams::default())
                        .await?
                        .items,
                );
            }
            let nodes = if namespaces.is_empty() {
                BTreeSet::new()
            } else {
                Api::<Node>::all(client.clone())
                    .list(&ListParams::default().labels(TENANT_LABEL))
                    .await?
                    .items
                    .iter()
                    .map(|n| n.name_any())
                    .filter(|n| n != &cfg.node)
                    .collect()
            };
            (pods, nodes)
        }
    };
    for svc in &services {
        let uid = svc.uid().unwrap_or_default();
        let ours: Vec<&Pod> = pods.iter().filter(|p| selects(svc, p, &cfg.node)).collect();
        let mut others: Vec<String> = tenant_nodes
            .iter()
            .filter(|n| pods.iter().any(|p| selects(svc, p, n)))
            .cloned()
            .collect();
        others.dedup();
        let mine = found.remove(&uid).unwrap_or_default();
        let what = format!("{}/{}", svc.namespace().unwrap_or_default(), svc.name_any());
        match decide(svc, ours.len(), &others, !mine.is_empty()) {
            Decision::Skip => {}
            Decision::Refuse(r) => {
                if refused.get(&uid) != Some(&r.to_string()) {
                    warn!(service = %what, refusal = %r, "Service not mapped to Octavia");
                    event(client, svc, "LoadBalancerRefused", &r.to_string()).await;
                    refused.insert(uid.clone(), r.to_string());
                }
                // Its load balancer (made before it selected another tenant's pods) goes.
                delete_all(lbs, &what, &mine).await?;
            }
            Decision::Release | Decision::Serve => {
                if let Err(e) = service(client, lbs, cfg, svc, &ours, &mine, refused).await {
                    warn!(service = %what, error = %e, "load balancer not in line yet");
                }
            }
        }
    }
    // What is left is ours for no Service this node serves: a Service deleted while no node
    // ran, its namespace unbound from the tenant, a finalizer removed by hand. Deleted.
    for (uid, left) in &found {
        delete_all(
            lbs,
            &format!("Service uid {uid} (gone or not this node's)"),
            left,
        )
        .await?;
    }
    Ok(())
}

/// Deletes load balancers (cascade), skipping those being deleted already.
async fn delete_all(
    lbs: &dyn LoadBalancers,
    what: &str,
    found: &[LoadBalancer],
) -> Result<(), openstack::Error> {
    for l in found {
        if l.provisioning_status == status::PENDING_DELETE {
            continue;
        }
        match lbs.delete_load_balancer(&l.id).await {
            Ok(()) => info!(service = %what, lb = %l.id, "deleting its load balancer"),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Deletes every load balancer `node` made in the project (tagged [`node_tag`], named after a
/// Service) and waits, up to `timeout`, until Octavia lists none: a tenant that goes (or a node
/// renamed) leaves no load balancer behind while its credentials still work. `Ok(n)`: how many
/// are left (0: all gone).
pub async fn release_node(
    lbs: &dyn LoadBalancers,
    node: &str,
    project_id: Option<&str>,
    timeout: Duration,
) -> Result<usize, openstack::Error> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let found: Vec<LoadBalancer> = ours_by_service(lbs, node, project_id)
            .await?
            .into_values()
            .flatten()
            .collect();
        if found.is_empty() || tokio::time::Instant::now() >= deadline {
            return Ok(found.len());
        }
        // An LB busy with a write (PENDING_UPDATE) answers 409: the next round retries.
        for l in &found {
            if l.provisioning_status == status::PENDING_DELETE {
                continue;
            }
            if let Err(e) = lbs.delete_load_balancer(&l.id).await
                && !e.is_not_found()
            {
                debug!(node, lb = %l.id, error = %e, "load balancer not deleted yet");
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Removes [`FINALIZER`] from the Services of namespaces `bound` says no node serves any more
/// (a namespace unbound from every tenant), so that deleting them does not wait for a node
/// that will never come; the load balancers were deleted by their node ([`run`] deletes those
/// of namespaces it no longer serves, [`release_node`] those of a tenant that goes).
pub async fn drop_unserved_finalizers(
    client: &Client,
    bound: impl Fn(&str) -> bool,
) -> Result<usize, kube::Error> {
    let mut n = 0;
    for svc in Api::<Service>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
    {
        let ns = svc.namespace().unwrap_or_default();
        if bound(&ns) || !svc.finalizers().iter().any(|f| f == FINALIZER) {
            continue;
        }
        remove_finalizer_of(client, &svc).await?;
        info!(service = %format!("{ns}/{}", svc.name_any()), "no tenant serves its namespace: load-balancer finalizer removed");
        n += 1;
    }
    Ok(n)
}

async fn remove_finalizer_of(client: &Client, svc: &Service) -> Result<(), kube::Error> {
    let rest: Vec<String> = svc
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    Api::<Service>::namespaced(client.clone(), &svc.namespace().unwrap_or_default())
        .patch(
            &svc.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": rest,
                "resourceVersion": svc.resource_version()}})),
        )
        .await?;
    Ok(())
}

/// Errors of one pass (Kubernetes or Octavia), said in the log.
mod anyhow_free {
    /// Kubernetes or OpenStack.
    #[derive(Debug, thiserror::Error)]
    pub enum Error {
        /// The Kubernetes API.
        #[error("kubernetes: {0}")]
        Kube(#[from] kube::Error),
        /// Octavia.
        #[error("octavia: {0}")]
        OpenStack(#[from] openstack::Error),
    }
    /// A pass's result.
    pub type Result<T> = std::result::Result<T, Error>;
}

async fn service(
    client: &Client,
    lbs: &dyn LoadBalancers,
    cfg: &ServicesConfig,
    svc: &Service,
    ours: &[&Pod],
    found: &[LoadBalancer],
    refused: &mut BTreeMap<String, String>,
) -> anyhow_free::Result<()> {
    let ns = svc.namespace().unwrap_or_default();
    let name = svc.name_any();
    let uid = svc.uid().unwrap_or_default();
    let api: Api<Service> = Api::namespaced(client.clone(), &ns);
    let is_lb = svc.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer");
    if svc.metadata.deletion_timestamp.is_some() || !is_lb {
        // Deleted, or no longer a LoadBalancer: the load balancer goes, then the finalizer.
        delete_all(lbs, &format!("{ns}/{name}"), found).await?;
        if found.is_empty() {
            remove_finalizer_of(client, svc).await?;
            if is_lb {
                info!(service = %format!("{ns}/{name}"), "load balancer gone; finalizer removed");
            }
        }
        return Ok(());
    }
    if !svc.finalizers().iter().any(|f| f == FINALIZER) {
        let mut all = svc.finalizers().to_vec();
        all.push(FINALIZER.into());
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": all,
                "resourceVersion": svc.resource_version()}})),
        )
        .await?;
    }
    let want = match desired(svc, ours) {
        Ok(w) => {
            refused.remove(&uid);
            w
        }
        Err(r) => {
            if refused.get(&uid) != Some(&r.to_string()) {
                warn!(service = %format!("{ns}/{name}"), refusal = %r, "Service not mapped to Octavia");
                event(client, svc, "LoadBalancerRefused", &r.to_string()).await;
                refused.insert(uid, r.to_string());
            }
            return Ok(());
        }
    };
    let lb = found.first();
    let tree = match lb {
        Some(l) if l.provisioning_status == status::ACTIVE => Some(lbs.status_tree(&l.id).await?),
        _ => None,
    };
    let step = plan(&want, lb, tree.as_ref());
    debug!(service = %format!("{ns}/{name}"), ?step, "load balancer step");
    match step {
        Step::CreateLoadBalancer => {
            let l = lbs
                .create_load_balancer(&LoadBalancerCreate {
                    name: want.lb_name.clone(),
                    description: format!("Service {ns}/{name} (virtual kubelet node {})", cfg.node),
                    vip_subnet_id: cfg.vip_subnet_id.clone(),
                    tags: vec![node_tag(&cfg.node)],
                })
                .await?;
            info!(service = %format!("{ns}/{name}"), lb = %l.id, "load balancer created");
        }
        Step::Recreate { lb_id } => {
            warn!(service = %format!("{ns}/{name}"), lb = %lb_id, "load balancer in ERROR: deleting it to make a new one");
            event(
                client,
                svc,
                "LoadBalancerFailed",
                &format!("Octavia load balancer {lb_id} is in ERROR; replacing it"),
            )
            .await;
            lbs.delete_load_balancer(&lb_id).await?;
        }
        Step::Wait(why) => debug!(service = %format!("{ns}/{name}"), %why, "waiting for Octavia"),
        Step::CreateListener {
            name: l,
            protocol,
            port,
        } => {
            if let Some(lb) = lb {
                lbs.create_listener(&lb.id, &l, &protocol, port).await?;
            }
        }
        Step::CreatePool {
            listener_id,
            name: p,
            protocol,
        } => {
            lbs.create_pool(&listener_id, &p, &protocol).await?;
        }
        Step::SetMembers { pool_id, members } => {
            info!(service = %format!("{ns}/{name}"), pool = %pool_id, members = members.len(), "pool members follow the ready pods");
            lbs.set_members(&pool_id, &members).await?;
        }
        Step::DeletePool { id } => lbs.delete_pool(&id).await?,
        Step::DeleteListener { id } => lbs.delete_listener(&id).await?,
        Step::Done => {}
    }
    let vip = lb.and_then(|l| l.vip_address.clone());
    if let Some(vip) = vip {
        let have = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|l| l.ingress.as_ref())
            .and_then(|i| i.first())
            .and_then(|i| i.ip.clone());
        if have.as_deref() != Some(vip.as_str()) {
            api.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"ip": vip}]}}})),
            )
            .await?;
        }
    }
    Ok(())
}

/// A Warning Event on the Service (failures to post it are only logged).
async fn event(client: &Client, svc: &Service, reason: &str, message: &str) {
    crate::events::warning(client, svc, "virtual-kubelet-services", reason, message).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use openstack::loadbalancer::{StatusListener, StatusPool};

    fn svc(ports: serde_json::Value) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1"},
            "spec": {"type": "LoadBalancer", "selector": {"app": "web"}, "ports": ports}
        }))
        .unwrap()
    }

    fn pod(name: &str, ip: &str, ready: bool, node: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "labels": {"app": "web"}},
            "spec": {"nodeName": node, "containers": [{"name": "c",
                "ports": [{"name": "http", "containerPort": 8080}]}]},
            "status": {"podIP": ip, "conditions": [{"type": "Ready",
                "status": if ready { "True" } else { "False" }}]}
        }))
        .unwrap()
    }

    fn m(ip: &str, port: u16, name: &str) -> Member {
        Member {
            address: ip.into(),
            protocol_port: port,
            name: name.into(),
        }
    }

    #[test]
    fn members_are_the_ready_pods_with_the_target_port_by_name_or_number() {
        let s = svc(json!([{"port": 80, "targetPort": "http"},
                           {"port": 53, "protocol": "UDP", "targetPort": 5353}]));
        let (a, b) = (
            pod("a", "10.0.0.2", true, "n"),
            pod("b", "10.0.0.1", false, "n"),
        );
        let d = desired(&s, &[&a, &b]).unwrap();
        assert_eq!(d.lb_name, "k8s-svc-u1");
        assert_eq!(d.listeners[0].name, "TCP-80");
        assert_eq!(d.listeners[0].members, vec![m("10.0.0.2", 8080, "a")]);
        assert_eq!(d.listeners[1].name, "UDP-53");
        assert_eq!(d.listeners[1].members, vec![m("10.0.0.2", 5353, "a")]);
    }

    #[test]
    fn sctp_is_refused_naming_the_field() {
        let s = svc(json!([{"port": 80}, {"port": 9, "protocol": "SCTP"}]));
        let r = desired(&s, &[]).unwrap_err();
        assert_eq!(r.field, "spec.ports[1].protocol");
    }

    #[test]
    fn selection_needs_the_labels_the_namespace_and_this_node() {
        let s = svc(json!([{"port": 80}]));
        assert!(selects(&s, &pod("a", "10.0.0.2", true, "n"), "n"));
        assert!(!selects(&s, &pod("a", "10.0.0.2", true, "other"), "n"));
        let mut p = pod("a", "10.0.0.2", true, "n");
        p.metadata.labels = Some(BTreeMap::from([("app".into(), "db".into())]));
        assert!(!selects(&s, &p, "n"));
    }

    #[test]
    fn a_node_serves_its_services_and_refuses_those_spanning_tenants() {
        let s = svc(json!([{"port": 80}]));
        let others = vec!["tenant-b".to_string()];
        assert_eq!(decide(&s, 0, &[], false), Decision::Skip, "no pod, no LB");
        assert_eq!(decide(&s, 2, &[], false), Decision::Serve);
        // Pods gone: its load balancer stays (no members) while the Service does.
        assert_eq!(decide(&s, 0, &[], true), Decision::Serve);
        match decide(&s, 1, &others, false) {
            Decision::Refuse(r) => {
                assert_eq!(r.field, "spec.selector");
                assert!(r.reason.contains("tenant-b"), "{}", r.reason);
            }
            d => panic!("{d:?}"),
        }
        // Another tenant's Service: not this node's business.
        assert_eq!(decide(&s, 0, &others, false), Decision::Skip);
        let mut gone = s.clone();
        gone.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        assert_eq!(decide(&gone, 1, &[], true), Decision::Release);
        assert_eq!(decide(&gone, 1, &[], false), Decision::Skip);
        gone.metadata.finalizers = Some(vec![FINALIZER.into()]);
        assert_eq!(decide(&gone, 0, &[], false), Decision::Release);
        let mut cluster_ip = s.clone();
        if let Some(spec) = cluster_ip.spec.as_mut() {
            spec.type_ = Some("ClusterIP".into());
        }
        assert_eq!(decide(&cluster_ip, 1, &[], true), Decision::Release);
        assert_eq!(service_uid("k8s-svc-u1"), Some("u1"));
        assert_eq!(service_uid("other"), None);
        assert_eq!(node_tag("n"), "k8s-node=n");
    }

    #[tokio::test]
    async fn releasing_a_node_deletes_only_its_tagged_service_load_balancers() {
        let lbs = openstack::loadbalancer::FakeLoadBalancers::new();
        for (name, node) in [
            ("k8s-svc-a", "n1"),
            ("k8s-svc-b", "n2"),
            ("hand-made", "n1"),
        ] {
            lbs.create_load_balancer(&LoadBalancerCreate {
                name: name.into(),
                tags: vec![node_tag(node)],
                ..Default::default()
            })
            .await
            .unwrap();
        }
        let left = release_node(&lbs, "n1", None, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(left, 0);
        let mut names: Vec<String> = lbs.load_balancers().into_iter().map(|l| l.name).collect();
        names.sort();
        assert_eq!(names, ["hand-made", "k8s-svc-b"]);
    }

    fn lb(status: &str) -> LoadBalancer {
        LoadBalancer {
            id: "lb".into(),
            name: "k8s-svc-u1".into(),
            vip_address: Some("192.0.2.1".into()),
            provisioning_status: status.into(),
            operating_status: "ONLINE".into(),
            ..Default::default()
        }
    }

    fn want(members: Vec<Member>) -> Desired {
        Desired {
            lb_name: "k8s-svc-u1".into(),
            listeners: vec![DesiredListener {
                name: "TCP-80".into(),
                protocol: "TCP".into(),
                port: 80,
                members,
            }],
        }
    }

    fn tree(listeners: Vec<StatusListener>) -> StatusTree {
        StatusTree {
            id: "lb".into(),
            provisioning_status: "ACTIVE".into(),
            listeners,
        }
    }

    fn listener(pools: Vec<StatusPool>) -> StatusListener {
        StatusListener {
            id: "l".into(),
            name: "TCP-80".into(),
            provisioning_status: "ACTIVE".into(),
            pools,
        }
    }

    fn pool(members: Vec<Member>) -> StatusPool {
        StatusPool {
            id: "p".into(),
            name: "TCP-80".into(),
            provisioning_status: "ACTIVE".into(),
            members,
        }
    }

    #[test]
    fn the_plan_builds_the_tree_one_write_at_a_time() {
        let w = want(vec![m("10.0.0.2", 8080, "a")]);
        assert_eq!(plan(&w, None, None), Step::CreateLoadBalancer);
        assert!(matches!(
            plan(&w, Some(&lb("PENDING_CREATE")), None),
            Step::Wait(_)
        ));
        let active = lb("ACTIVE");
        assert!(matches!(
            plan(&w, Some(&active), Some(&tree(vec![]))),
            Step::CreateListener { port: 80, .. }
        ));
        assert!(matches!(
            plan(&w, Some(&active), Some(&tree(vec![listener(vec![])]))),
            Step::CreatePool { .. }
        ));
        assert_eq!(
            plan(
                &w,
                Some(&active),
                Some(&tree(vec![listener(vec![pool(vec![])])]))
            ),
            Step::SetMembers {
                pool_id: "p".into(),
                members: vec![m("10.0.0.2", 8080, "a")]
            }
        );
        // Names are not compared: Octavia may show the member with another name.
        assert_eq!(
            plan(
                &w,
                Some(&active),
                Some(&tree(vec![listener(vec![pool(vec![m(
                    "10.0.0.2", 8080, "x"
                )])])]))
            ),
            Step::Done
        );
    }

    #[test]
    fn an_unready_pod_leaves_the_pool_and_a_failed_lb_is_replaced() {
        let active = lb("ACTIVE");
        let t = tree(vec![listener(vec![pool(vec![
            m("10.0.0.1", 8080, "a"),
            m("10.0.0.2", 8080, "b"),
        ])])]);
        assert_eq!(
            plan(
                &want(vec![m("10.0.0.2", 8080, "b")]),
                Some(&active),
                Some(&t)
            ),
            Step::SetMembers {
                pool_id: "p".into(),
                members: vec![m("10.0.0.2", 8080, "b")]
            }
        );
        assert_eq!(
            plan(&want(vec![]), Some(&lb("ERROR")), None),
            Step::Recreate { lb_id: "lb".into() }
        );
    }

    #[test]
    fn a_removed_port_loses_its_pool_then_its_listener() {
        let active = lb("ACTIVE");
        let none = Desired {
            lb_name: "k8s-svc-u1".into(),
            listeners: vec![],
        };
        assert_eq!(
            plan(
                &none,
                Some(&active),
                Some(&tree(vec![listener(vec![pool(vec![])])]))
            ),
            Step::DeletePool { id: "p".into() }
        );
        assert_eq!(
            plan(&none, Some(&active), Some(&tree(vec![listener(vec![])]))),
            Step::DeleteListener { id: "l".into() }
        );
    }
}
