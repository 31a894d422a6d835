//! The virtual kubelet's loops for one node.
//!
//! One [`run`] serves one Node; a process serving several tenants runs one
//! per tenant (each with its own provider), sharing the Kubernetes client.
//!
//! - Node: created (or its labels and taints brought in line) at start;
//!   status written when it changes, and at least every `status_max_age`
//!   (the kubelet's `nodeStatusReportFrequency`, 1 min).
//! - Lease `kube-node-lease/<node>` renewed every `lease_renew` (10 s), so
//!   the node controller sees the node alive between status writes.
//! - Pods: a watch with `fieldSelector=spec.nodeName=<node>`; every
//!   `poll_interval` (and shortly after any pod event) the provider syncs
//!   all of them at once; a status is written only when it differs.
//! - Deletion: a pod with a deletionTimestamp is stopped within its grace
//!   period by the provider; once nothing is left, the pod object is
//!   deleted with `gracePeriodSeconds=0`, as the kubelet does.
//! - Shutdown: the node is cordoned (`spec.unschedulable`, marked by an
//!   annotation so that the next start uncordons it, and only then) and
//!   marked NotReady, or deleted by choice; pods are left running in the
//!   backend, and the next start takes them back.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Event, EventSource, Namespace, Node, NodeStatus, ObjectReference, Pod, Secret,
    ServiceAccount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions,
};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::node::{self, Identity};
use crate::provider::{EventType, Objects, PodUpdate, Provider};

/// Namespace of node leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";

/// Full passes running at once at most, when the provider lets them overlap: the one waiting
/// on a slow pod and the next one.
const MAX_FULL_PASSES: usize = 2;

/// Passes held back by slow ones are said at most this often.
const SKIP_WARN_EVERY: Duration = Duration::from_secs(30);

/// What to do with the Node on SIGTERM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnShutdown {
    /// Mark it NotReady (pods keep running and are taken back on restart).
    NotReady,
    /// Delete the Node object.
    Delete,
}

/// A node's configuration.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// Identity (name, labels, taints, port, version...).
    pub identity: Identity,
    /// Lease duration, seconds (kubelet: 40).
    pub lease_duration_s: i32,
    /// Lease renewal interval (kubelet: 10 s).
    pub lease_renew: Duration,
    /// How often the node's state is computed.
    pub status_interval: Duration,
    /// A status write at least this often even when nothing changed.
    pub status_max_age: Duration,
    /// How often the provider syncs all pods.
    pub poll_interval: Duration,
    /// Shutdown behaviour.
    pub on_shutdown: OnShutdown,
}

/// Errors that stop the node.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A Kubernetes call that must succeed at start failed.
    #[error("{context}: {source}")]
    Kube {
        /// What was being done.
        context: String,
        /// The error.
        source: kube::Error,
    },
}

fn kube_err(context: impl Into<String>) -> impl FnOnce(kube::Error) -> RuntimeError {
    move |source| RuntimeError::Kube {
        context: context.into(),
        source,
    }
}

/// [`Objects`] read from the API server.
pub struct KubeObjects {
    client: Client,
}

#[async_trait]
impl Objects for KubeObjects {
    async fn config_map(&self, ns: &str, name: &str) -> Result<Option<ConfigMap>, String> {
        Api::<ConfigMap>::namespaced(self.client.clone(), ns)
            .get_opt(name)
            .await
            .map_err(|e| format!("reading configmap {ns}/{name}: {e}"))
    }

    async fn secret(&self, ns: &str, name: &str) -> Result<Option<Secret>, String> {
        Api::<Secret>::namespaced(self.client.clone(), ns)
            .get_opt(name)
            .await
            .map_err(|e| format!("reading secret {ns}/{name}: {e}"))
    }

    async fn custom_object(
        &self,
        kind: &ApiResource,
        ns: &str,
        name: &str,
    ) -> Result<Option<serde_json::Value>, String> {
        let what = |e: &dyn std::fmt::Display| format!("reading {} {ns}/{name}: {e}", kind.kind);
        // A 404 (the object, or its CRD, is missing) is `None`.
        let found = Api::<DynamicObject>::namespaced_with(self.client.clone(), ns, kind)
            .get_opt(name)
            .await
            .map_err(|e| what(&e))?;
        found
            .map(serde_json::to_value)
            .transpose()
            .map_err(|e| what(&e))
    }

    async fn service_account_token(
        &self,
        ns: &str,
        w: &crate::provider::TokenWanted,
    ) -> Result<crate::provider::IssuedToken, String> {
        use k8s_openapi::api::authentication::v1::{
            BoundObjectReference, TokenRequest, TokenRequestSpec,
        };
        let sa = &w.service_account;
        let req = TokenRequest {
            spec: Some(TokenRequestSpec {
                audiences: w.audience.clone().map(|a| vec![a]),
                expiration_seconds: Some(w.expiration_seconds),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(w.pod.0.clone()),
                    uid: Some(w.pod.1.clone()),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let answer = Api::<ServiceAccount>::namespaced(self.client.clone(), ns)
            .create_token_request(sa, &Default::default(), &req)
            .await
            .map_err(|e| format!("requesting a token of serviceaccount {ns}/{sa}: {e}"))?;
        let status = answer
            .status
            .ok_or_else(|| format!("token of serviceaccount {ns}/{sa}: no status in the answer"))?;
        match (status.token, status.expiration_timestamp) {
            (Some(token), Some(expires)) => Ok(crate::provider::IssuedToken {
                token,
                expires: expires.0,
            }),
            _ => Err(format!(
                "token of serviceaccount {ns}/{sa}: no token or expiration in the answer"
            )),
        }
    }
}

/// Run one node until `shutdown` is cancelled.
pub async fn run(
    client: Client,
    cfg: NodeConfig,
    provider: Arc<dyn Provider>,
    shutdown: CancellationToken,
) -> Result<(), RuntimeError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let id = &cfg.identity;
    let state = provider.node_state().await;
    let node = register(&nodes, id, state.zone.as_deref()).await?;
    let now = jiff::Timestamp::now();
    let last_status = node::status(id, &state, node.status.as_ref(), now);
    write_node_status(&nodes, &id.name, &last_status)
        .await
        .map_err(kube_err(format!("writing the status of node {}", id.name)))?;
    let last_write = tokio::time::Instant::now();
    info!(node = %id.name, "node registered");

    let node_uid = node.metadata.uid.clone().unwrap_or_default();
    let lease_task = tokio::spawn(lease_loop(
        client.clone(),
        cfg.clone(),
        node_uid,
        shutdown.clone(),
    ));

    let (store, writer) = reflector::store::<Pod>();
    let wake = Arc::new(tokio::sync::Notify::new());
    let pods_api: Api<Pod> = Api::all(client.clone());
    let wcfg = watcher::Config::default().fields(&format!("spec.nodeName={}", id.name));
    let wake_w = wake.clone();
    let watch_task = tokio::spawn(async move {
        let stream = watcher(pods_api, wcfg)
            .default_backoff()
            .reflect(writer)
            .touched_objects();
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(_) => wake_w.notify_one(),
                Err(e) => warn!(error = %e, "pod watch error; retrying"),
            }
        }
    });

    let last_status = Arc::new(std::sync::Mutex::new(last_status));
    // The node's status has a task of its own, as its lease: pod passes waiting on a slow
    // backend do not hold it back.
    let status_task = tokio::spawn(status_loop(
        nodes.clone(),
        cfg.clone(),
        provider.clone(),
        last_status.clone(),
        last_write,
        shutdown.clone(),
    ));
    let passes = Passes {
        client: client.clone(),
        store,
        provider: provider.clone(),
        objects: Arc::new(KubeObjects {
            client: client.clone(),
        }),
    };
    let overlap = provider.passes_may_overlap();
    // Full passes run as tasks: up to MAX_FULL_PASSES at once when the provider keeps each
    // pod in one pass at a time (a pass still waiting on one pod's slow call then holds back
    // no other pod), else one pass of either kind at a time, as a loop would run them.
    let mut full: tokio::task::JoinSet<()> = tokio::task::JoinSet::new();
    let mut moving: tokio::task::JoinSet<()> = tokio::task::JoinSet::new();
    // A pass was due while none could start: it starts when one ends.
    let mut pending = false;
    // When passes were last said to be held back (said once per SKIP_WARN_EVERY).
    let mut warned: Option<tokio::time::Instant> = None;
    let mut poll_tick = tokio::time::interval(cfg.poll_interval);
    poll_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Pods in transition are looked at between full passes (a far-off tick when the provider
    // offers no such pass, so the branch stays idle).
    let fast = provider.transition_interval();
    let mut fast_tick = tokio::time::interval(fast.unwrap_or(Duration::from_secs(3600)));
    fast_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let full_room = |full: &tokio::task::JoinSet<()>, moving: &tokio::task::JoinSet<()>| {
        if overlap {
            full.len() < MAX_FULL_PASSES
        } else {
            full.is_empty() && moving.is_empty()
        }
    };
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = poll_tick.tick() => {
                if full_room(&full, &moving) {
                    full.spawn(passes.clone().full(Duration::ZERO));
                } else {
                    pending = true;
                    if overlap && warned.is_none_or(|t| t.elapsed() >= SKIP_WARN_EVERY) {
                        warned = Some(tokio::time::Instant::now());
                        warn!(
                            node = %id.name,
                            running = full.len(),
                            "pod passes still wait on the backend; the next starts when one ends"
                        );
                    }
                }
            }
            _ = fast_tick.tick(), if fast.is_some() => {
                let room = moving.is_empty() && (overlap || full.is_empty());
                if room {
                    moving.spawn(passes.clone().transitions());
                }
            }
            _ = wake.notified() => {
                if full_room(&full, &moving) {
                    // Let a burst of events settle into one pass.
                    full.spawn(passes.clone().full(Duration::from_millis(200)));
                } else {
                    pending = true;
                }
            }
            Some(done) = full.join_next(), if !full.is_empty() => {
                if let Err(e) = done {
                    warn!(error = %e, "a pod pass ended abnormally");
                }
                if pending && full_room(&full, &moving) {
                    pending = false;
                    full.spawn(passes.clone().full(Duration::ZERO));
                }
            }
            Some(done) = moving.join_next(), if !moving.is_empty() => {
                if let Err(e) = done {
                    warn!(error = %e, "a transition pass ended abnormally");
                }
                if pending && full_room(&full, &moving) {
                    pending = false;
                    full.spawn(passes.clone().full(Duration::ZERO));
                }
            }
        }
    }
    // Passes in flight stop where they are (as when the process is killed): pods keep running
    // in the backend and the next start takes them back.
    full.abort_all();
    moving.abort_all();
    watch_task.abort();
    lease_task.abort();
    if let Err(e) = status_task.await {
        warn!(error = %e, "the node status task ended abnormally");
    }
    let last_status = last_status
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    // Cordoned first, so that nothing is scheduled to the node while it is down (or between
    // the cordon and the deletion).
    if let Err(e) = cordon(&nodes, &id.name).await {
        warn!(node = %id.name, error = %e, "cordoning the node on shutdown failed");
    }
    match cfg.on_shutdown {
        OnShutdown::NotReady => {
            let s = node::not_ready(
                &last_status,
                "the virtual kubelet stopped; its pods keep running",
                jiff::Timestamp::now(),
            );
            write_node_status(&nodes, &id.name, &s)
                .await
                .map_err(kube_err("marking the node NotReady"))?;
            info!(node = %id.name, "node marked NotReady; pods left running");
        }
        OnShutdown::Delete => {
            match nodes.delete(&id.name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.is_not_found() => {}
                Err(e) => return Err(kube_err("deleting the node")(e)),
            }
            info!(node = %id.name, "node deleted; pods left running");
        }
    }
    Ok(())
}

async fn register(
    nodes: &Api<Node>,
    id: &Identity,
    zone: Option<&str>,
) -> Result<Node, RuntimeError> {
    let want = node::node_object(id, zone);
    match nodes
        .get_opt(&id.name)
        .await
        .map_err(kube_err(format!("reading node {}", id.name)))?
    {
        None => nodes
            .create(&PostParams::default(), &want)
            .await
            .map_err(kube_err(format!("creating node {}", id.name))),
        Some(existing) => {
            if existing
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(node::CORDONED_ON_SHUTDOWN))
            {
                info!(node = %id.name, "uncordoning the node its last shutdown cordoned");
            }
            let patch = node::register_patch(&existing, &want);
            nodes
                .patch(&id.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(kube_err(format!("updating node {}", id.name)))
        }
    }
}

/// Cordons the node (`spec.unschedulable`, as `kubectl cordon`) unless it is cordoned already,
/// and marks it as cordoned by us ([`node::CORDONED_ON_SHUTDOWN`]) so that the next start lifts
/// only our own cordon. A concurrent change of the node (409) is read again and retried.
async fn cordon(nodes: &Api<Node>, name: &str) -> Result<(), kube::Error> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let Some(current) = nodes.get_opt(name).await? else {
            return Ok(());
        };
        let Some(patch) = node::cordon_patch(&current) else {
            info!(node = %name, "node already cordoned (not by us): left so on restart");
            return Ok(());
        };
        match nodes
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                info!(node = %name, "node cordoned");
                return Ok(());
            }
            Err(kube::Error::Api(s)) if s.code == 409 && attempt < 5 => continue,
            Err(e) => return Err(e),
        }
    }
}

async fn write_node_status(
    nodes: &Api<Node>,
    name: &str,
    s: &NodeStatus,
) -> Result<(), kube::Error> {
    let patch = serde_json::json!({ "status": s });
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

async fn lease_loop(
    client: Client,
    cfg: NodeConfig,
    node_uid: String,
    shutdown: CancellationToken,
) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let name = cfg.identity.name.clone();
    let mut tick = tokio::time::interval(cfg.lease_renew);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Err(e) = renew_lease(&client, &leases, &cfg, &name, &node_uid).await {
            warn!(lease = %name, error = %e, "lease renewal failed; retrying");
        }
    }
}

async fn renew_lease(
    client: &Client,
    leases: &Api<Lease>,
    cfg: &NodeConfig,
    name: &str,
    node_uid: &str,
) -> Result<(), kube::Error> {
    let now = MicroTime(jiff::Timestamp::now());
    match leases.get_opt(name).await? {
        Some(mut l) => {
            let spec = l.spec.get_or_insert_with(Default::default);
            spec.renew_time = Some(now);
            spec.holder_identity = Some(name.to_string());
            spec.lease_duration_seconds = Some(cfg.lease_duration_s);
            leases.replace(name, &PostParams::default(), &l).await?;
        }
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    namespace: Some(LEASE_NAMESPACE.into()),
                    // As the kubelet: the Node owns its Lease.
                    owner_references: (!node_uid.is_empty()).then(|| {
                        vec![OwnerReference {
                            api_version: "v1".into(),
                            kind: "Node".into(),
                            name: name.to_string(),
                            uid: node_uid.to_string(),
                            ..Default::default()
                        }]
                    }),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(name.to_string()),
                    lease_duration_seconds: Some(cfg.lease_duration_s),
                    renew_time: Some(now),
                    ..Default::default()
                }),
            };
            match leases.create(&PostParams::default(), &lease).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.is_not_found() => {
                    // The namespace is missing (a bare test cluster).
                    let ns = Namespace {
                        metadata: ObjectMeta {
                            name: Some(LEASE_NAMESPACE.into()),
                            ..Default::default()
                        },
                        ..Default::default()
                    };
                    let _ = Api::<Namespace>::all(client.clone())
                        .create(&PostParams::default(), &ns)
                        .await;
                    leases.create(&PostParams::default(), &lease).await?;
                }
                Err(e) => return Err(e),
            }
        }
    }
    debug!(lease = %name, "lease renewed");
    Ok(())
}

/// Writes the node's status every `status_interval` when it changed, and at least every
/// `status_max_age`, until `shutdown`; `last` is the status last written.
async fn status_loop(
    nodes: Api<Node>,
    cfg: NodeConfig,
    provider: Arc<dyn Provider>,
    last: Arc<std::sync::Mutex<NodeStatus>>,
    mut last_write: tokio::time::Instant,
    shutdown: CancellationToken,
) {
    let id = &cfg.identity;
    let mut tick = tokio::time::interval(cfg.status_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let step = async {
            let state = provider.node_state().await;
            let now = jiff::Timestamp::now();
            let prev = last.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let next = node::status(id, &state, Some(&prev), now);
            if !node::changed(&prev, &next) && last_write.elapsed() < cfg.status_max_age {
                return false;
            }
            match write_node_status(&nodes, &id.name, &next).await {
                Ok(()) => {
                    *last.lock().unwrap_or_else(|p| p.into_inner()) = next;
                    true
                }
                Err(e) => {
                    warn!(error = %e, "node status write failed; retrying");
                    false
                }
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            wrote = step => {
                if wrote {
                    last_write = tokio::time::Instant::now();
                }
            }
        }
    }
}

/// What a pass needs; cloned into each pass's task.
#[derive(Clone)]
struct Passes {
    client: Client,
    store: Store<Pod>,
    provider: Arc<dyn Provider>,
    objects: Arc<dyn Objects>,
}

impl Passes {
    /// One full pass after `settle`: each pod's update is written as the provider hands it
    /// over, while it still works on the others.
    async fn full(self, settle: Duration) {
        if !settle.is_zero() {
            tokio::time::sleep(settle).await;
        }
        let complete = self.store.wait_until_ready().now_or_never_ready();
        let pods: Vec<Pod> = self.store.state().iter().map(|p| (**p).clone()).collect();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<PodUpdate>();
        let produce = async {
            let emit = move |u: PodUpdate| {
                // The receiver lives until this pass ends.
                let _ = tx.send(u);
            };
            self.provider
                .sync_each(&pods, self.objects.as_ref(), complete, &emit)
                .await
        };
        let consume = async {
            while let Some(u) = rx.recv().await {
                self.apply(&pods, &u).await;
            }
        };
        let (result, ()) = tokio::join!(produce, consume);
        if let Err(e) = result {
            warn!(error = %e, "provider sync failed; retrying next interval");
        }
    }

    /// The provider's short pass over its pods in transition; updates written as in a full
    /// pass.
    async fn transitions(self) {
        if !self.store.wait_until_ready().now_or_never_ready() {
            return;
        }
        let pods: Vec<Pod> = self.store.state().iter().map(|p| (**p).clone()).collect();
        match self
            .provider
            .sync_transitions(&pods, self.objects.as_ref())
            .await
        {
            Ok(updates) => {
                for u in updates {
                    self.apply(&pods, &u).await;
                }
            }
            Err(e) => debug!(error = %e, "transition pass failed; the next full pass covers it"),
        }
    }

    /// Writes `u` over the pod as the watch shows it now (a pass may end well after it
    /// started), or as the pass saw it.
    async fn apply(&self, seen: &[Pod], u: &PodUpdate) {
        let key = reflector::ObjectRef::<Pod>::new(&u.name).within(&u.namespace);
        let now = self
            .store
            .get(&key)
            .filter(|p| p.metadata.uid.as_deref() == Some(&u.uid))
            .map(|p| (*p).clone());
        let Some(pod) = now.or_else(|| {
            seen.iter()
                .find(|p| p.metadata.uid.as_deref() == Some(&u.uid))
                .cloned()
        }) else {
            return;
        };
        apply_update(&self.client, &pod, u).await;
    }
}

/// `Store::wait_until_ready` as a non-blocking check.
trait ReadyNow {
    fn now_or_never_ready(self) -> bool;
}

impl<F: std::future::Future> ReadyNow for F {
    fn now_or_never_ready(self) -> bool {
        futures::FutureExt::now_or_never(self).is_some()
    }
}

async fn apply_update(client: &Client, pod: &Pod, u: &PodUpdate) {
    let api: Api<Pod> = Api::namespaced(client.clone(), &u.namespace);
    for e in &u.events {
        record_event(client, pod, e).await;
    }
    if let Some(status) = &u.status
        && pod.status.as_ref() != Some(status)
    {
        let mut next = pod.clone();
        next.status = Some(status.clone());
        next.metadata.managed_fields = None;
        match api
            .replace_status(&u.name, &PostParams::default(), &next)
            .await
        {
            Ok(_) => debug!(pod = %u.name, "pod status written"),
            Err(kube::Error::Api(s)) if s.code == 409 || s.is_not_found() => {
                debug!(pod = %u.name, "pod changed meanwhile; next pass")
            }
            Err(e) => warn!(pod = %u.name, error = %e, "pod status write failed"),
        }
    }
    if u.deleted {
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(u.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&u.name, &dp).await {
            Ok(_) => info!(pod = %u.name, "pod deleted"),
            Err(kube::Error::Api(s)) if s.is_not_found() || s.code == 409 => {}
            Err(e) => warn!(pod = %u.name, error = %e, "pod delete failed"),
        }
    }
}

async fn record_event(client: &Client, pod: &Pod, e: &crate::provider::PodEvent) {
    let ns = pod.namespace().unwrap_or_default();
    let now = jiff::Timestamp::now();
    let ev = Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}.", pod.name_any())),
            namespace: Some(ns.clone()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: pod.metadata.name.clone(),
            namespace: Some(ns.clone()),
            uid: pod.metadata.uid.clone(),
            resource_version: pod.metadata.resource_version.clone(),
            ..Default::default()
        },
        reason: Some(e.reason.clone()),
        message: Some(e.message.clone()),
        type_: Some(
            match e.type_ {
                EventType::Normal => "Normal",
                EventType::Warning => "Warning",
            }
            .into(),
        ),
        source: Some(EventSource {
            component: Some("virtual-kubelet".into()),
            host: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        }),
        reporting_component: Some("virtual-kubelet".into()),
        reporting_instance: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        ..Default::default()
    };
    if let Err(err) = Api::<Event>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &ev)
        .await
    {
        warn!(pod = %pod.name_any(), reason = %e.reason, error = %err, "event not recorded");
    }
}
