//! `virtual-kubelet --tenants`: one process, one node per `ZunTenant`.
//!
//! Every `ZunTenant` becomes a node of its own (`vk_runtime::run` with its own Zun provider
//! and OpenStack session from the tenant's application-credential Secret), labelled and
//! tainted `virtual-kubelet.sunet.se/tenant=<tenant>`, whose provider admits only the pods
//! of the tenant's namespaces and gives them the tenant's networks. The Kubernetes client is
//! shared. A node is restarted when its tenant's spec or Secret changes (the runtime takes its
//! pods back without a Zun write). When the tenant is deleted its node stops and, while its
//! session still works, deletes everything it made in the tenant's project (load balancers,
//! containers, ports, security groups); its pods and its Node are deleted, as Kubernetes' pod
//! garbage collector does for a deleted node. A tenant whose node started carries
//! [`TENANT_FINALIZER`], so a tenant deleted while the process was down is released by the
//! next process, with a session from its Secret. The tenant's status says whether its node runs,
//! and why not.
//!
//! Each node serves its own kubelet API (logs, exec, attach, port-forward, stats), with the
//! tenant's Zun session and the same authentication and authorization as a single node, on a
//! port of its own: the API server reaches a node at its `status.addresses` and
//! `status.daemonEndpoints.kubeletEndpoint.port`, and all the tenant nodes share the process's
//! address, so the port is what tells them apart.
//!
//! With `--load-balancers` and `--network-policies` each node runs the same Services and
//! NetworkPolicy controllers as a single node, given its tenant's context
//! ([`crate::vk::NodeNetworking`]: session, project, tenant), so its load balancers and security
//! groups are in its project; a tenant that goes has its load balancers deleted with its
//! still-valid session after its node stopped, and Services of namespaces no tenant binds lose
//! the load-balancer finalizer.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use api::tenant::{
    KEY_APP_CRED_ID, KEY_APP_CRED_SECRET, KEY_AUTH_URL, KEY_REGION, TENANT_FINALIZER, TENANT_LABEL,
    ZunTenant, ZunTenantSpec, ZunTenantStatus,
};
use api::{Condition, ConditionStatus};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod, Secret, Taint};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, ResourceExt};
use openstack::adapter::{ClientOptions, CloudSelector, ContainerAdapter, Core};
use openstack::loadbalancer::LoadBalancers;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use vk_zun::tenant::Tenant;
use vk_zun::{Config, UnlimitedCapacity, ZunProvider};

use crate::vk::{LoadBalancing, NodeNetworking, VkArgs, node_config};

/// How often tenants are looked at without an event (a Secret changed, a node failed).
const RESYNC: Duration = Duration::from_secs(30);

/// A tenant's running node.
struct Running {
    /// The spec and the Secret's resourceVersion the node was started with.
    key: String,
    node: String,
    stop: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
    /// The node's kubelet API: its port and its server (ends with `stop`).
    kubelet_api: Option<(u16, JoinHandle<()>)>,
    /// Its Services controller (`--load-balancers`), whose load balancers go with the tenant.
    load_balancing: Option<LoadBalancing>,
    /// Its NetworkPolicy controller (`--network-policies`; ends with `stop`).
    network_policies: Option<JoinHandle<()>>,
    /// Its provider, whose containers, ports and groups go with the tenant.
    provider: Arc<ZunProvider>,
}

/// How long a tenant that goes may take to delete its load balancers, and again its containers.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs a node for every `ZunTenant` until `token` is cancelled.
pub async fn run(args: VkArgs, client: Client, token: CancellationToken) -> anyhow::Result<()> {
    let api: Api<ZunTenant> = Api::all(client.clone());
    let (store, writer) = reflector::store::<ZunTenant>();
    let wake = Arc::new(tokio::sync::Notify::new());
    let wake_w = wake.clone();
    let watch = tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .reflect(writer)
            .touched_objects();
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(_) => wake_w.notify_one(),
                Err(e) => warn!(error = %e, "ZunTenant watch error; retrying"),
            }
        }
    });
    let mut running: BTreeMap<String, Running> = BTreeMap::new();
    let mut tick = tokio::time::interval(RESYNC);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    info!("serving ZunTenants");
    loop {
        tokio::select! {
            _ = token.cancelled() => break,
            _ = tick.tick() => {}
            _ = wake.notified() => tokio::time::sleep(Duration::from_millis(200)).await,
        }
        if store.wait_until_ready().await.is_err() {
            continue;
        }
        let tenants = store.state();
        for t in &tenants {
            if t.metadata.deletion_timestamp.is_some() {
                finalize(&args, &client, t, &mut running).await;
            } else {
                reconcile(&args, &client, t, &mut running, &token).await;
            }
        }
        // A tenant gone without our finalizer (removed by hand): its node still goes with
        // what it made.
        let gone: Vec<String> = running
            .keys()
            .filter(|n| !tenants.iter().any(|t| &t.name_any() == *n))
            .cloned()
            .collect();
        for name in gone {
            if let Some(r) = running.remove(&name) {
                info!(tenant = %name, node = %r.node, "ZunTenant deleted: stopping its node");
                let node = r.node.clone();
                let provider = r.provider.clone();
                let lb = stop(r).await;
                release(
                    &client,
                    &node,
                    lb.as_ref().map(LoadBalancing::session),
                    &provider,
                )
                .await;
            }
        }
        if args.load_balancers {
            // Services of namespaces no tenant binds any more: nobody will delete a load
            // balancer for them (their nodes deleted theirs), so their finalizer goes.
            let bound: BTreeSet<String> = tenants
                .iter()
                .flat_map(|t| t.spec.namespaces.iter().cloned())
                .collect();
            if let Err(e) =
                vk_zun::services::drop_unserved_finalizers(&client, |ns| bound.contains(ns)).await
            {
                warn!(error = %e, "removing load-balancer finalizers of unbound namespaces failed");
            }
        }
    }
    watch.abort();
    // The process stops: the nodes stop as --on-shutdown says, their load balancers stay (a
    // restarted process serves them again).
    for (_, r) in std::mem::take(&mut running) {
        stop(r).await;
    }
    Ok(())
}

/// Deletes what `node` made in its tenant's project while its credentials still work (its
/// load balancers with `lb`, its pods' containers, ports and security groups with `provider`),
/// then its pods and its Node, as Kubernetes' pod garbage collector would for a deleted node:
/// the tenant goes (or its node is renamed), and no later node would find them as its own.
/// `true` when nothing is left.
async fn release(
    client: &Client,
    node: &str,
    lb: Option<(&dyn LoadBalancers, Option<&str>)>,
    provider: &ZunProvider,
) -> bool {
    let mut clean = true;
    if let Some((lbs, project_id)) = lb {
        match vk_zun::services::release_node(lbs, node, project_id, RELEASE_TIMEOUT).await {
            Ok(0) => info!(node, "the node's load balancers are deleted"),
            Ok(n) => {
                clean = false;
                warn!(
                    node,
                    left = n,
                    "load balancers of the node not deleted in time (tag k8s-node={node})"
                )
            }
            Err(e) => {
                clean = false;
                warn!(node, error = %e, "deleting the node's load balancers failed (tag k8s-node={node})")
            }
        }
    }
    match provider.release(RELEASE_TIMEOUT).await {
        Ok(0) => info!(
            node,
            "the node's containers, ports and security groups are deleted"
        ),
        Ok(n) => {
            clean = false;
            warn!(
                node,
                left = n,
                "containers, ports or security groups of the node not deleted in time (label or name prefix vk_{node}_)"
            )
        }
        Err(e) => {
            clean = false;
            warn!(node, error = %e, "deleting the node's containers, ports and security groups failed (label or name prefix vk_{node}_)")
        }
    }
    if let Err(e) = delete_pods_and_node(client, node).await {
        clean = false;
        warn!(node, error = %e, "deleting the node's pods and Node failed");
    }
    clean
}

/// A tenant being deleted: its node stops and [`release`]s what it made (with the running
/// node's session, else with a session from the tenant's Secret: the process was down when
/// the tenant was deleted), then [`TENANT_FINALIZER`] goes. Until then the tenant stays, its
/// status saying what holds it, and the next pass tries again.
async fn finalize(
    args: &VkArgs,
    client: &Client,
    t: &ZunTenant,
    running: &mut BTreeMap<String, Running>,
) {
    let name = t.name_any();
    if !t.finalizers().iter().any(|f| f == TENANT_FINALIZER) {
        if let Some(r) = running.remove(&name) {
            info!(tenant = %name, node = %r.node, "ZunTenant being deleted: stopping its node");
            stop(r).await;
        }
        return;
    }
    let clean = match running.remove(&name) {
        Some(r) => {
            info!(tenant = %name, node = %r.node, "ZunTenant being deleted: stopping its node and deleting what it made");
            let node = r.node.clone();
            let provider = r.provider.clone();
            let lb = stop(r).await;
            release(
                client,
                &node,
                lb.as_ref().map(LoadBalancing::session),
                &provider,
            )
            .await
        }
        None => match release_offline(args, client, t).await {
            Ok(clean) => clean,
            Err(msg) => {
                let msg = format!(
                    "the tenant's node cannot delete what it made: {msg}; the finalizer {TENANT_FINALIZER} stays (remove it by hand to leave them)"
                );
                set_status(client, t, None, None, "ReleaseBlocked", &msg, false).await;
                return;
            }
        },
    };
    if !clean {
        let msg = "some of what the tenant's node made is not deleted yet (see the process's log); retrying";
        set_status(client, t, None, None, "Releasing", msg, false).await;
        return;
    }
    if let Err(e) = patch_finalizers(client, t, false).await {
        warn!(tenant = %name, error = %e, "removing the tenant's finalizer failed; retrying");
    } else {
        info!(tenant = %name, "released; finalizer removed");
    }
}

/// [`release`] for a tenant deleted while the process was down: a session from its Secret,
/// its node name from its status. `Err`: why no session can be had.
async fn release_offline(args: &VkArgs, client: &Client, t: &ZunTenant) -> Result<bool, String> {
    let name = t.name_any();
    let node = t
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_else(|| t.spec.node_name_or(&name).to_string());
    let secret = read_secret(client, &t.spec).await?;
    let selector = selector(&secret, &t.spec)?;
    let core = Core::connect(&selector, ClientOptions::default())
        .await
        .map_err(|e| format!("connecting with the application credential: {e}"))?;
    let project_id = core.current_project_id();
    info!(tenant = %name, node = %node, "ZunTenant deleted while no node ran: deleting what its node made");
    let lbs = openstack::loadbalancer::LoadBalancerAdapter::new(core.clone());
    let lb = args
        .load_balancers
        .then_some((&lbs as &dyn LoadBalancers, project_id.as_deref()));
    let cfg = Config {
        node_name: node.clone(),
        ..Default::default()
    };
    let provider = ZunProvider::new(
        Arc::new(ContainerAdapter::new(core.clone())),
        cfg,
        project_id.clone(),
        UnlimitedCapacity::default(),
    )
    .with_ports(
        Arc::new(openstack::port::PortAdapter::new(core.clone())),
        openstack::Cloud::from_core(core).network,
    );
    Ok(release(client, &node, lb, &provider).await)
}

/// Adds (`on`) or removes [`TENANT_FINALIZER`] (at the tenant's resourceVersion: a concurrent
/// change makes it fail and the next pass try again).
async fn patch_finalizers(client: &Client, t: &ZunTenant, on: bool) -> Result<(), kube::Error> {
    let mut finalizers: Vec<String> = t
        .finalizers()
        .iter()
        .filter(|f| *f != TENANT_FINALIZER)
        .cloned()
        .collect();
    if on {
        finalizers.push(TENANT_FINALIZER.to_string());
    }
    let patch = serde_json::json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": t.resource_version(),
    }});
    Api::<ZunTenant>::all(client.clone())
        .patch(
            &t.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map(|_| ())
}

/// Deletes the pods bound to `node` (at once: their containers are gone) and the Node.
async fn delete_pods_and_node(client: &Client, node: &str) -> Result<(), kube::Error> {
    let pods: Api<Pod> = Api::all(client.clone());
    let bound = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await?;
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    for p in bound.items {
        let ns = p.namespace().unwrap_or_default();
        match Api::<Pod>::namespaced(client.clone(), &ns)
            .delete(&p.name_any(), &now)
            .await
        {
            Ok(_) => {
                info!(node, pod = %format!("{ns}/{}", p.name_any()), "deleted the pod of a node that goes")
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    match Api::<Node>::all(client.clone())
        .delete(node, &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Stops a node (it shuts down as the process's `--on-shutdown` says) and waits for it and its
/// controllers; returns its Services controller's session, for [`release`].
async fn stop(r: Running) -> Option<LoadBalancing> {
    r.stop.cancel();
    if let Some((_, server)) = r.kubelet_api {
        // The port is free once the server has returned, for the node's next start.
        let _ = server.await;
    }
    if let Some(t) = r.network_policies {
        let _ = t.await;
    }
    let lb = match r.load_balancing {
        Some(mut lb) => {
            let _ = (&mut lb.task).await;
            Some(lb)
        }
        None => None,
    };
    match r.task.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            warn!(node = %r.node, error = %format!("{e:#}"), "node stopped with an error")
        }
        Err(e) => warn!(node = %r.node, error = %e, "node task failed"),
    }
    lb
}

/// Brings one tenant's node in line with its spec and Secret, and its status with that.
async fn reconcile(
    args: &VkArgs,
    client: &Client,
    t: &ZunTenant,
    running: &mut BTreeMap<String, Running>,
    token: &CancellationToken,
) {
    let name = t.name_any();
    let generation = t.metadata.generation;
    let node = t.spec.node_name_or(&name).to_string();
    let errors = t.spec.validate(&name);
    if !errors.is_empty() {
        if let Some(r) = running.remove(&name) {
            stop(r).await;
        }
        let msg = api::validation::summarize(&errors);
        set_status(client, t, None, None, "InvalidSpec", &msg, false).await;
        return;
    }
    let secret = match read_secret(client, &t.spec).await {
        Ok(s) => s,
        Err(msg) => {
            // A node already running keeps its session; a new one cannot start.
            if !running.contains_key(&name) {
                set_status(client, t, None, None, "CredentialsUnavailable", &msg, false).await;
            }
            return;
        }
    };
    let key = format!(
        "{}|{}",
        serde_json::to_string(&t.spec).unwrap_or_default(),
        secret.metadata.resource_version.clone().unwrap_or_default()
    );
    if let Some(r) = running.get(&name) {
        if r.key == key && !r.task.is_finished() {
            return;
        }
        if let Some(r) = running.remove(&name) {
            let old_node = r.node.clone();
            let failed = r.task.is_finished();
            if old_node != node {
                // The new node would not find the old one's workloads as its own.
                let provider = r.provider.clone();
                let lb = stop(r).await;
                release(
                    client,
                    &old_node,
                    lb.as_ref().map(LoadBalancing::session),
                    &provider,
                )
                .await;
            } else {
                stop(r).await;
            }
            if failed {
                info!(tenant = %name, node = %old_node, "restarting the tenant's node after it stopped");
            } else {
                info!(tenant = %name, node = %old_node, "the tenant changed: restarting its node");
            }
        }
    }
    let selector = match selector(&secret, &t.spec) {
        Ok(s) => s,
        Err(msg) => {
            set_status(client, t, None, None, "CredentialsUnavailable", &msg, false).await;
            return;
        }
    };
    // The node's /metrics shows its own tenant's OpenStack calls.
    let options = ClientOptions::default();
    let mut metrics = prometheus_client::registry::Registry::default();
    options.metrics.register(&mut metrics);
    let call_metrics = vk_zun::timed::CallMetrics::default();
    call_metrics.register(&mut metrics);
    let core = match Core::connect(&selector, options).await {
        Ok(c) => c,
        Err(e) => {
            let msg = format!("connecting with the application credential: {e}");
            set_status(client, t, None, None, "OpenStackUnavailable", &msg, false).await;
            return;
        }
    };
    // From here on the node makes things in the project: the tenant's deletion waits until
    // they are deleted (see [`finalize`]).
    if !t.finalizers().iter().any(|f| f == TENANT_FINALIZER)
        && let Err(e) = patch_finalizers(client, t, true).await
    {
        warn!(tenant = %name, error = %e, "adding the tenant's finalizer failed; retrying");
        return;
    }
    let project_id = core.current_project_id();
    let tenant = Tenant::from_spec(&name, &t.spec);
    let networking = NodeNetworking {
        node: node.clone(),
        core: core.clone(),
        network: t.spec.default_network().map(|n| n.network.clone()),
        lb_project_id: project_id.clone(),
        project_id: project_id.clone(),
        tenant: Some(tenant.clone()),
    };
    let cfg = Config {
        node_name: node.clone(),
        network: None,
        image_driver: args.image_driver.clone(),
        send_pull_policy: args.send_image_pull_policy,
        default_cpu: args.default_cpu,
        default_memory_mib: args.default_memory_mib,
        availability_zone: t.spec.availability_zone.clone(),
        host_ip: args.internal_ip.clone(),
        tenant: Some(tenant),
    };
    let ports = Arc::new(openstack::port::PortAdapter::new(core.clone()));
    let neutron = openstack::Cloud::from_core(core.clone()).network;
    let zun = Arc::new(ContainerAdapter::new(core));
    let zun_for_api: Arc<dyn openstack::container::Container> = zun.clone();
    let provider = Arc::new(
        ZunProvider::new(zun, cfg, project_id.clone(), UnlimitedCapacity::default())
            .with_pod_concurrency(args.pod_concurrency)
            .with_transition_poll(args.transition_poll(), args.poll_interval())
            .with_zun_calls(args.zun_call_timeout(), call_metrics)
            .with_exit_check(args.exit_check())
            .with_ports(ports, neutron),
    );
    let node_provider = provider.clone();
    let labels = BTreeMap::from([(TENANT_LABEL.to_string(), name.clone())]);
    let taints = vec![Taint {
        key: TENANT_LABEL.into(),
        value: Some(name.clone()),
        effect: "NoSchedule".into(),
        ..Default::default()
    }];
    let mut ncfg = node_config(args, &node, labels, taints);
    let stop_token = token.child_token();
    let kubelet_api = if args.no_kubelet_api {
        None
    } else {
        let taken: BTreeSet<u16> = running
            .values()
            .filter_map(|r| r.kubelet_api.as_ref().map(|(p, _)| *p))
            .collect();
        match start_tenant_kubelet_api(
            args,
            client,
            &node,
            &taken,
            zun_for_api,
            metrics,
            stop_token.clone(),
        )
        .await
        {
            Ok(api) => {
                ncfg.identity.kubelet_port = i32::from(api.0);
                Some(api)
            }
            Err(e) => {
                warn!(tenant = %name, node = %node, error = %format!("{e:#}"), "the node runs without its kubelet API (no logs, exec or stats)");
                None
            }
        }
    };
    // The tenant's Services and NetworkPolicies, with its session in its project.
    let mut notes = Vec::new();
    let load_balancing = if args.load_balancers {
        match networking
            .start_load_balancers(args, client.clone(), stop_token.clone())
            .await
        {
            Ok(lb) => Some(lb),
            Err(e) => {
                let e = format!("{e:#}");
                warn!(tenant = %name, node = %node, error = %e, "the node runs without load balancers");
                notes.push(format!("; no load balancers: {e}"));
                None
            }
        }
    } else {
        None
    };
    let network_policies = args
        .network_policies
        .then(|| networking.start_network_policies(args, client.clone(), stop_token.clone()));
    let (c, s) = (client.clone(), stop_token.clone());
    let task = tokio::spawn(async move {
        vk_runtime::run(c, ncfg, node_provider, s)
            .await
            .map_err(anyhow::Error::from)
    });
    info!(tenant = %name, node = %node, project = project_id.as_deref().unwrap_or("?"), generation = ?generation, "started the tenant's node");
    let msg = format!(
        "node {node} serves project {} for namespaces {}{}",
        project_id.as_deref().unwrap_or("?"),
        t.spec.namespaces.join(", "),
        notes.concat()
    );
    set_status(
        client,
        t,
        Some(&node),
        project_id.as_deref(),
        "NodeRunning",
        &msg,
        true,
    )
    .await;
    running.insert(
        name,
        Running {
            key,
            node,
            stop: stop_token,
            task,
            kubelet_api,
            load_balancing,
            network_policies,
            provider,
        },
    );
}

/// The ports to try for a tenant node's kubelet API, in order: the port its Node publishes
/// (`previous`) first, so that a restart keeps the address the API server has, then the rest
/// of `[base, base + count)`; ports of the other running nodes (`taken`) are left out.
fn port_candidates(
    base: u16,
    count: u16,
    previous: Option<i32>,
    taken: &BTreeSet<u16>,
) -> Vec<u16> {
    let range: Vec<u16> = (0..count).filter_map(|i| base.checked_add(i)).collect();
    let previous = previous
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| range.contains(p));
    previous
        .into_iter()
        .chain(range.iter().copied().filter(|p| Some(*p) != previous))
        .filter(|p| !taken.contains(p))
        .collect()
}

/// Binds a port for `node`'s kubelet API (see [`port_candidates`]) and serves it until `stop`.
async fn start_tenant_kubelet_api(
    args: &VkArgs,
    client: &Client,
    node: &str,
    taken: &BTreeSet<u16>,
    zun: Arc<dyn openstack::container::Container>,
    metrics: prometheus_client::registry::Registry,
    stop: CancellationToken,
) -> anyhow::Result<(u16, JoinHandle<()>)> {
    let base = u16::try_from(args.kubelet_port)
        .with_context(|| format!("--kubelet-port {} is not a TCP port", args.kubelet_port))?;
    let previous = Api::<Node>::all(client.clone())
        .get_opt(node)
        .await
        .ok()
        .flatten()
        .and_then(|n| n.status?.daemon_endpoints?.kubelet_endpoint)
        .map(|e| e.port);
    let mut listener = None;
    for port in port_candidates(base, args.tenant_kubelet_ports, previous, taken) {
        let addr = std::net::SocketAddr::new(args.kubelet_address, port);
        // A port another program holds is passed over.
        if let Ok(l) = tokio::net::TcpListener::bind(addr).await {
            listener = Some((port, l));
            break;
        }
    }
    let (port, listener) = listener.with_context(|| {
        format!(
            "no free port for the kubelet API in {base}..{} (--kubelet-port, --tenant-kubelet-ports)",
            u32::from(base) + u32::from(args.tenant_kubelet_ports)
        )
    })?;
    let server =
        crate::vk::start_kubelet_api(args, node, listener, client.clone(), zun, metrics, stop)
            .await?;
    Ok((port, server))
}

/// The tenant's credentials Secret, or why it cannot be used.
async fn read_secret(client: &Client, spec: &ZunTenantSpec) -> Result<Secret, String> {
    let r = &spec.credentials.secret_ref;
    Api::<Secret>::namespaced(client.clone(), &r.namespace)
        .get_opt(&r.name)
        .await
        .map_err(|e| {
            format!(
                "spec.credentials.secretRef: reading Secret {}/{}: {e}",
                r.namespace, r.name
            )
        })?
        .ok_or_else(|| {
            format!(
                "spec.credentials.secretRef: Secret {}/{} not found",
                r.namespace, r.name
            )
        })
}

/// The OpenStack session a tenant's Secret describes; a missing key is named.
fn selector(secret: &Secret, spec: &ZunTenantSpec) -> Result<CloudSelector, String> {
    let r = &spec.credentials.secret_ref;
    let data = secret.data.clone().unwrap_or_default();
    let get = |k: &str| -> Option<String> {
        data.get(k)
            .and_then(|v| String::from_utf8(v.0.clone()).ok())
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let need = |k: &str| {
        get(k).ok_or_else(|| {
            format!(
                "spec.credentials.secretRef: Secret {}/{} has no key {k:?} (it needs {KEY_AUTH_URL}, {KEY_APP_CRED_ID}, {KEY_APP_CRED_SECRET})",
                r.namespace, r.name
            )
        })
    };
    Ok(CloudSelector::ApplicationCredential {
        auth_url: need(KEY_AUTH_URL)?,
        id: need(KEY_APP_CRED_ID)?,
        secret: need(KEY_APP_CRED_SECRET)?.into(),
        region: get(KEY_REGION),
    })
}

/// Writes the tenant's `Ready` condition (transition time kept while the status holds).
async fn set_status(
    client: &Client,
    t: &ZunTenant,
    node: Option<&str>,
    project: Option<&str>,
    reason: &str,
    message: &str,
    ready: bool,
) {
    let name = t.name_any();
    let prev = t.status.clone().unwrap_or_default();
    let mut conditions = prev.conditions.clone();
    let mut c = Condition::new(
        "Ready",
        if ready {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        },
        reason,
        message,
    );
    c.observed_generation = t.metadata.generation;
    let now = jiff::Timestamp::now().to_string();
    api::common::set_condition(&mut conditions, c, &now);
    let next = ZunTenantStatus {
        conditions,
        node_name: node.map(str::to_string).or(prev.node_name.clone()),
        project_id: project.map(str::to_string).or(prev.project_id.clone()),
        observed_generation: t.metadata.generation,
    };
    if next == prev {
        return;
    }
    // Said once per change, not on every pass over the tenants.
    if !ready {
        warn!(tenant = %name, reason, message, "the tenant's node does not run");
    }
    let patch = serde_json::json!({ "status": next });
    if let Err(e) = Api::<ZunTenant>::all(client.clone())
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        warn!(tenant = %name, error = %e, "writing the tenant's status failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn spec() -> ZunTenantSpec {
        serde_json::from_value(serde_json::json!({
            "credentials": {"secretRef": {"namespace": "vk", "name": "tenant-a"}},
            "networks": [{"name": "pods", "network": "n"}]
        }))
        .unwrap()
    }

    fn secret(keys: &[(&str, &str)]) -> Secret {
        Secret {
            data: Some(
                keys.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn a_node_keeps_its_kubelet_port_and_others_get_free_ones() {
        let none = BTreeSet::new();
        assert_eq!(
            port_candidates(10250, 3, None, &none),
            [10250, 10251, 10252]
        );
        assert_eq!(
            port_candidates(10250, 3, Some(10252), &none),
            [10252, 10250, 10251],
            "the published port first"
        );
        assert_eq!(
            port_candidates(10250, 3, Some(9999), &BTreeSet::from([10250])),
            [10251, 10252],
            "a port out of range is not kept; another node's is skipped"
        );
        assert_eq!(
            port_candidates(10250, 3, Some(10251), &BTreeSet::from([10251])),
            [10250, 10252],
            "a port another node holds now is not taken"
        );
        assert_eq!(port_candidates(65535, 3, None, &none), [65535]);
    }

    #[test]
    fn the_secret_gives_an_application_credential_or_names_the_missing_key() {
        let s = secret(&[
            (KEY_AUTH_URL, "http://k:5000/v3"),
            (KEY_APP_CRED_ID, "id1"),
            (KEY_APP_CRED_SECRET, "s3cret\n"),
        ]);
        match selector(&s, &spec()).unwrap() {
            CloudSelector::ApplicationCredential {
                auth_url,
                id,
                secret,
                region,
            } => {
                use secrecy::ExposeSecret;
                assert_eq!(
                    (
                        auth_url.as_str(),
                        id.as_str(),
                        secret.expose_secret(),
                        region
                    ),
                    ("http://k:5000/v3", "id1", "s3cret", None)
                );
            }
            other => panic!("{other:?}"),
        }
        let e = selector(
            &secret(&[(KEY_AUTH_URL, "u"), (KEY_APP_CRED_ID, "id1")]),
            &spec(),
        )
        .unwrap_err();
        assert!(
            e.starts_with("spec.credentials.secretRef: Secret vk/tenant-a has no key \"application_credential_secret\""),
            "{e}"
        );
    }
}
