//! The Zun provider: one Zun list per pass for all pods of the node, the
//! actions [`crate::status::decide`] asks for, and the statuses
//! [`crate::status::render`] computes.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::ApiResource;
use openstack::Network;
use openstack::container::{Container, ZunContainer, status as zs};
use openstack::model::SecurityGroupFilter;
use openstack::port::{PortCreate, PortFilter, Ports};
use tracing::{Instrument as _, debug, info, warn};
use vk_runtime::provider::{
    Condition, EventType, NodeState, Objects, PodEvent, PodUpdate, Provider, ProviderError,
};

use crate::labels;
use crate::pod_port;
use crate::quantity;
use crate::status::{self, Action, Key, PROVIDER_FAILED, Pass};
use crate::translate::{self, Config, PodPort, Reference, Referenced, Role, TranslateError};

/// Node capacity used when the project's quota is unlimited (-1).
#[derive(Clone, Debug, PartialEq)]
pub struct UnlimitedCapacity {
    /// CPUs.
    pub cpu: f64,
    /// MiB.
    pub memory_mib: i64,
    /// Pods (containers).
    pub pods: i64,
}

impl Default for UnlimitedCapacity {
    fn default() -> Self {
        Self {
            cpu: 100.0,
            memory_mib: 256 * 1024,
            pods: 1000,
        }
    }
}

#[derive(Default)]
struct Memory {
    /// Events already recorded: (pod uid, reason, message).
    events: HashSet<(String, String, String)>,
    /// CPUs and MiB our own containers use (from the last list).
    own_usage: (f64, i64, i64),
    /// Failed creates per pod uid: (failures, when the last one failed, its errors),
    /// so a failing create is retried with the kubelet's back-off, not every pass.
    create_failures: HashMap<String, (i32, jiff::Timestamp, CreateErrors)>,
    /// Stopped containers whose listed `status_detail` carries no exit code, as one GET
    /// showed them, keyed by (uuid, the listed detail): Zun's list answers from its database,
    /// whose periodic state sync sets `Stopped` but leaves the detail at e.g. `Created`; a GET
    /// asks Docker and fills in `Exited(N)`. One GET per such transition, not per pass.
    refreshed: HashMap<(String, String), ZunContainer>,
    /// The pods' own Neutron ports by pod uid, as created or found (cleared when a create
    /// with it fails, so the next try looks again).
    pod_ports: HashMap<String, PodPort>,
    /// Neutron network ids by the name or id the pods give.
    network_ids: HashMap<String, String>,
    /// The node's CPU capacity as last computed (`resourceFieldRef: limits.cpu` without a limit).
    node_cpu: Option<f64>,
    /// When the node last looked for ports of pods that no longer exist.
    last_port_sweep: Option<std::time::Instant>,
    /// Stops sent, by container uuid: until when another stop is not sent (see [`stop_due`]).
    stops: HashMap<String, std::time::Instant>,
    /// The restart memory (crash back-off, starts Zun has not shown yet) of each pod's
    /// containers, by pod uid ([`crate::restarts`]); in memory only, as the kubelet's.
    tracks: HashMap<String, BTreeMap<Key, crate::restarts::Track>>,
    /// Pods in transition ([`status::in_transition`]) by uid: since when, and their Zun
    /// containers as the last pass left them (what the transition pass reads again).
    transitions: HashMap<String, (jiff::Timestamp, Vec<ZunContainer>)>,
    /// Running containers by uuid: when a GET last asked whether they still run
    /// ([`ZunProvider::with_exit_check`]).
    exit_checked: HashMap<String, std::time::Instant>,
    /// The last full pass's list took [`crate::timed::SLOW_CALL`] or more: Zun is queueing,
    /// and the GETs of the transition pass and the exit checks (the costliest reads: zun-api
    /// asks zun-compute, which asks Docker) wait until it answers again.
    zun_slow: bool,
}

/// Containers the list shows running that a full pass asks about with a GET, at most (the
/// ones asked longest ago first).
const EXIT_CHECKS_PER_PASS: usize = 2;

/// How often a running container is asked about with a GET, by default.
pub const DEFAULT_EXIT_CHECK: std::time::Duration = std::time::Duration::from_secs(10);

/// The pods whose pass runs now, by uid: a pass (full or transition) reads and acts on a pod
/// only while it holds the pod's [`Claim`], so two passes never act on one pod at once, and a
/// pass still waiting on a slow Zun call for one pod does not hold back the next pass of the
/// others.
#[derive(Default)]
struct InFlight(Mutex<HashSet<String>>);

impl InFlight {
    /// The pod's claim, or `None` while another pass holds it.
    fn claim(&self, uid: &str) -> Option<Claim<'_>> {
        let mut set = self.0.lock().unwrap_or_else(|p| p.into_inner());
        set.insert(uid.to_string()).then(|| Claim {
            owner: self,
            uid: uid.to_string(),
        })
    }
}

/// A pass's hold on one pod, released when dropped (also when the pass is cancelled).
struct Claim<'a> {
    owner: &'a InFlight,
    uid: String,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.owner
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.uid);
    }
}

/// How long a pod stays in the transition pass: one that takes longer (an image pulled for
/// minutes, a long `preStop`) is left to the full passes.
const TRANSITION_FOR: jiff::SignedDuration = jiff::SignedDuration::from_secs(60);

/// Up to this many containers in transition are read with one `GET /containers/{id}` each
/// (Zun asks Docker); more cost one list instead.
const TRANSITION_GETS: usize = 4;

/// The transition pass's interval, by default.
pub const DEFAULT_TRANSITION_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);

/// How long after a stop's grace period a container still listed as running gets no second
/// stop: Zun answers a stop at once and its compute marks the container `stopping` only when
/// it takes the request off the queue, so a list in between still shows it running.
const STOP_SETTLE: std::time::Duration = std::time::Duration::from_secs(30);

/// Whether a stop of `id` should be sent now (none sent, or the last one's window is over);
/// forgets windows that are over.
fn stop_due(
    stops: &mut HashMap<String, std::time::Instant>,
    id: &str,
    now: std::time::Instant,
) -> bool {
    stops.retain(|_, until| *until > now);
    !stops.contains_key(id)
}

/// How often the node lists its project's ports to delete those of pods that are gone.
const PORT_SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Per pod container: (reason, message) of a failed create.
type CreateErrors = BTreeMap<Key, (String, String)>;

/// The Zun provider of one node (one tenant project).
pub struct ZunProvider {
    /// Zun, each call with its deadline ([`crate::timed`]).
    zun: Arc<dyn Container>,
    /// Zun without deadlines (what [`ZunProvider::with_zun_calls`] wraps again).
    raw_zun: Arc<dyn Container>,
    ports: Option<Arc<dyn Ports>>,
    neutron: Option<Arc<dyn Network>>,
    cfg: Config,
    project_id: Option<String>,
    unlimited: UnlimitedCapacity,
    pod_concurrency: usize,
    memory: Mutex<Memory>,
    /// Probes and `preStop` hooks ([`crate::prober`]).
    prober: crate::prober::Prober,
    volumes: Mutex<volume_sync::VolumeMemory>,
    /// The transition pass's interval (`None`: off) and the full passes' (a restart due
    /// within it is looked at in the transition pass).
    transition: (Option<std::time::Duration>, std::time::Duration),
    /// How often a running container is asked about with a GET (`None`: never).
    exit_check: Option<std::time::Duration>,
    /// The pods whose pass runs now.
    in_flight: InFlight,
    /// Held while a pass lists the node's containers: passes that overlap list one after the
    /// other, so a Zun that queues requests gets no more lists for being slow.
    listing: tokio::sync::Mutex<()>,
}

/// Pods whose pass runs at the same time, by default.
pub const DEFAULT_POD_CONCURRENCY: usize = 8;

impl ZunProvider {
    /// A provider creating pods in the project behind `zun`.
    pub fn new(
        zun: Arc<dyn Container>,
        cfg: Config,
        project_id: Option<String>,
        unlimited: UnlimitedCapacity,
    ) -> Self {
        Self {
            prober: crate::prober::Prober::new(zun.clone(), crate::prober::DEFAULT_MAX_CHECKS),
            zun: Arc::new(crate::timed::TimedZun::new(
                zun.clone(),
                crate::timed::DEFAULT_CALL_TIMEOUT,
                crate::timed::CallMetrics::default(),
            )),
            raw_zun: zun,
            ports: None,
            neutron: None,
            cfg,
            project_id,
            unlimited,
            pod_concurrency: DEFAULT_POD_CONCURRENCY,
            memory: Mutex::new(Memory::default()),
            volumes: Mutex::default(),
            transition: (
                Some(DEFAULT_TRANSITION_INTERVAL),
                std::time::Duration::from_secs(5),
            ),
            exit_check: Some(DEFAULT_EXIT_CHECK),
            in_flight: InFlight::default(),
            listing: tokio::sync::Mutex::new(()),
        }
    }

    /// Each Zun call of the pod passes and the node's state ends after `timeout` (see
    /// [`crate::timed`]); slow and timed-out calls are counted in `metrics`.
    pub fn with_zun_calls(
        mut self,
        timeout: std::time::Duration,
        metrics: crate::timed::CallMetrics,
    ) -> Self {
        self.zun = Arc::new(crate::timed::TimedZun::new(
            self.raw_zun.clone(),
            timeout,
            metrics,
        ));
        self
    }

    /// Running containers are asked about with a GET every `every` (`None`: never), a few per
    /// full pass: Zun's list answers from its database, which its compute brings in line with
    /// Docker only every `sync_container_state_interval` (60 s by default), so a container
    /// that exited on its own would show running until then; a GET asks Docker (and updates
    /// that database).
    pub fn with_exit_check(mut self, every: Option<std::time::Duration>) -> Self {
        self.exit_check = every;
        self
    }

    /// The running containers of `pods` the list shows as running whose exit check is due,
    /// at most [`EXIT_CHECKS_PER_PASS`], asked longest ago first; marked as checked now.
    fn exit_checks_due(&self, listed: &[ZunContainer]) -> HashSet<String> {
        let Some(every) = self.exit_check else {
            return HashSet::new();
        };
        let now = std::time::Instant::now();
        let mut m = self.mem();
        let running: HashSet<&str> = listed
            .iter()
            .filter(|c| c.status == zs::RUNNING && c.task_state.is_none())
            .map(|c| c.uuid.as_str())
            .collect();
        m.exit_checked.retain(|id, _| running.contains(id.as_str()));
        let mut due: Vec<(Option<std::time::Instant>, &str)> = running
            .iter()
            .map(|id| (m.exit_checked.get(*id).copied(), *id))
            .filter(|(last, _)| last.is_none_or(|t| now.duration_since(t) >= every))
            .collect();
        due.sort();
        due.truncate(EXIT_CHECKS_PER_PASS);
        let out: HashSet<String> = due.into_iter().map(|(_, id)| id.to_string()).collect();
        for id in &out {
            m.exit_checked.insert(id.clone(), now);
        }
        out
    }

    /// `observed` with each container of `due` as a GET shows it (a failed GET keeps the
    /// listed state: the next check tries again).
    async fn check_exits(
        &self,
        observed: Vec<ZunContainer>,
        due: &HashSet<String>,
    ) -> Vec<ZunContainer> {
        let mut out = Vec::with_capacity(observed.len());
        for c in observed {
            if !due.contains(&c.uuid) {
                out.push(c);
                continue;
            }
            match self.zun.get_container(&c.uuid).await {
                Ok(fresh) => {
                    if fresh.status != c.status {
                        debug!(zun = %c.uuid, listed = %c.status, now = %fresh.status, "a GET shows what the list does not yet");
                    }
                    out.push(fresh);
                }
                Err(e) => {
                    debug!(zun = %c.uuid, error = %e, "exit check failed; the listed state stands");
                    out.push(c);
                }
            }
        }
        out
    }

    /// Pods in transition (containers starting, stopping, deleted, a restart due) are read
    /// again every `every` (`None`: only in the full passes, every `full`).
    pub fn with_transition_poll(
        mut self,
        every: Option<std::time::Duration>,
        full: std::time::Duration,
    ) -> Self {
        self.transition = (every, full);
        self
    }

    /// The transition pass: the pods [`status::in_transition`] named at their last pass, read
    /// again (one GET per container, or one list when there are many) and synced as in a full
    /// pass; no other pod is looked at.
    async fn transition_pass(
        &self,
        pods: &[Pod],
        objects: &dyn Objects,
    ) -> Result<Vec<PodUpdate>, ProviderError> {
        let now = jiff::Timestamp::now();
        let due: Vec<(&Pod, Vec<ZunContainer>)> = {
            let m = self.mem();
            if m.zun_slow {
                return Ok(Vec::new());
            }
            pods.iter()
                .filter_map(|p| {
                    let (since, seen) = m.transitions.get(p.metadata.uid.as_deref()?)?;
                    (now.duration_since(*since) < TRANSITION_FOR).then(|| (p, seen.clone()))
                })
                .collect()
        };
        // Pods a full pass is working on are left to it.
        let mut claims = Vec::with_capacity(due.len());
        let due: Vec<(&Pod, Vec<ZunContainer>)> = due
            .into_iter()
            .filter(|(p, _)| {
                let claim = self
                    .in_flight
                    .claim(p.metadata.uid.as_deref().unwrap_or_default());
                let held = claim.is_some();
                claims.extend(claim);
                held
            })
            .collect();
        if due.is_empty() {
            return Ok(Vec::new());
        }
        let unavailable = |e: openstack::Error| ProviderError::Unavailable(e.to_string());
        let n: usize = due.iter().map(|(_, seen)| seen.len()).sum();
        let mut fresh: Vec<(&Pod, Vec<ZunContainer>)> = Vec::with_capacity(due.len());
        if n <= TRANSITION_GETS {
            for (pod, seen) in due {
                let mut now_seen = Vec::with_capacity(seen.len());
                for c in seen {
                    match self.zun.get_container(&c.uuid).await {
                        Ok(c) => now_seen.push(c),
                        Err(e) if e.is_not_found() => {}
                        Err(e) => return Err(unavailable(e)),
                    }
                }
                fresh.push((pod, now_seen));
            }
        } else {
            let listing = self.listing.lock().await;
            let all = self
                .zun
                .list_containers(&labels::ours(&self.cfg.node_name), None)
                .await
                .map_err(unavailable)?;
            let all = self.refresh_stale_stops(all).await;
            drop(listing);
            for (pod, _) in due {
                let uid = pod.metadata.uid.as_deref().unwrap_or_default();
                let mine = all
                    .iter()
                    .filter(|c| c.labels.get(labels::POD_UID).map(String::as_str) == Some(uid))
                    .cloned()
                    .collect();
                fresh.push((pod, mine));
            }
        }
        let mut out = Vec::with_capacity(fresh.len());
        for (pod, observed) in fresh {
            let span = tracing::info_span!(
                "sync_pod",
                kind = "Pod",
                namespace = pod.metadata.namespace.as_deref().unwrap_or_default(),
                object = pod.metadata.name.as_deref().unwrap_or_default(),
            );
            out.push(
                self.sync_pod(pod, observed, objects, now)
                    .instrument(span)
                    .await,
            );
        }
        Ok(out)
    }

    /// Create each pod's Neutron port before its containers (when the pod's network is
    /// known), so the pod IP is in the containers' env; the node deletes the port with the pod
    /// and sweeps ports of pods that are gone. A pod whose first container declares ports gets
    /// its own security group on its port (through `neutron`), letting those ports in.
    pub fn with_ports(mut self, ports: Arc<dyn Ports>, neutron: Arc<dyn Network>) -> Self {
        self.ports = Some(ports);
        self.neutron = Some(neutron);
        self
    }

    /// The pod's port (found or created), or `None` when the node creates no ports or the
    /// pod's network is not known (Zun then picks one and makes the port). A network that
    /// cannot be resolved here is left to the translation to report.
    async fn pod_port(
        &self,
        ports: &dyn Ports,
        pod: &Pod,
        uid: &str,
        refs: &Referenced,
    ) -> Result<Option<PodPort>, String> {
        if let Some(p) = self.mem().pod_ports.get(uid) {
            return Ok(Some(p.clone()));
        }
        let Ok(Some(net)) = translate::pod_network(pod, refs, &self.cfg) else {
            return Ok(None);
        };
        let cached = self.mem().network_ids.get(&net).cloned();
        let network_id = match cached {
            Some(id) => id,
            None => {
                let id = ports
                    .network_id(&net)
                    .await
                    .map_err(|e| format!("the pod's network {net:?}: {e}"))?;
                self.mem().network_ids.insert(net.clone(), id.clone());
                id
            }
        };
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let port_name = pod_port::name(&self.cfg.node_name, uid);
        let description = pod_port::description(&self.cfg.node_name, ns, name, uid);
        let exposed = pod_port::exposed(pod);
        let mut groups = self.tenant_groups(pod).await?;
        if let (Some(neutron), false) = (&self.neutron, exposed.is_empty()) {
            groups.push(
                pod_port::ensure_group(
                    neutron.as_ref(),
                    self.project_id.as_deref(),
                    &port_name,
                    &description,
                    &exposed,
                )
                .await
                .map_err(|e| format!("creating the pod's security group {port_name:?}: {e}"))?,
            );
        }
        // None: Neutron puts the project's `default` group on the port.
        let security_groups = (!groups.is_empty()).then_some(groups);
        let port = pod_port::ensure(
            ports,
            self.project_id.as_deref(),
            PortCreate {
                network_id,
                name: port_name.clone(),
                description,
                security_groups,
            },
        )
        .await
        .map_err(|e| format!("creating the pod's Neutron port on network {net:?}: {e}"))?;
        if port.fixed_ips.is_empty() {
            return Err(format!(
                "the pod's Neutron port {} on network {net:?} has no fixed IP (does the network have a subnet?)",
                port.id
            ));
        }
        let p = PodPort {
            id: port.id,
            ips: port.fixed_ips,
        };
        self.mem().pod_ports.insert(uid.to_string(), p.clone());
        Ok(Some(p))
    }

    /// The IDs of the security groups the pod's tenant network lists (none outside tenant
    /// mode), names resolved in the project once per node.
    async fn tenant_groups(&self, pod: &Pod) -> Result<Vec<String>, String> {
        let Some(t) = &self.cfg.tenant else {
            return Ok(Vec::new());
        };
        let net = t.network_for(pod).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        for g in &net.security_groups {
            let key = format!("security group {g}");
            if let Some(id) = self.mem().network_ids.get(&key).cloned() {
                out.push(id);
                continue;
            }
            let Some(neutron) = &self.neutron else {
                return Err(format!(
                    "ZunTenant {:?} network {:?} lists security group {g:?} but this node has no Neutron client",
                    t.name, net.name
                ));
            };
            let found = neutron
                .list_security_groups(&SecurityGroupFilter {
                    project_id: self.project_id.clone(),
                    ..Default::default()
                })
                .await
                .map_err(|e| format!("listing security groups for {g:?}: {e}"))?;
            let hits: Vec<_> = found
                .iter()
                .filter(|s| &s.id == g || &s.name == g)
                .collect();
            let id = match hits.as_slice() {
                [one] => one.id.clone(),
                [] => {
                    return Err(format!(
                        "security group {g:?} of ZunTenant {:?} network {:?} is not in the project",
                        t.name, net.name
                    ));
                }
                _ => {
                    return Err(format!(
                        "security group name {g:?} of ZunTenant {:?} network {:?} is ambiguous in the project: give its ID",
                        t.name, net.name
                    ));
                }
            };
            self.mem().network_ids.insert(key, id.clone());
            out.push(id);
        }
        Ok(out)
    }

    /// Deletes the pod's port (the containers are gone); `true` once no port of the pod is
    /// left (and its security group, when it has one). Ports are found by name when this
    /// process did not make them.
    async fn delete_pod_port(&self, ports: &dyn Ports, pod: &Pod, uid: &str) -> bool {
        let cached = self.mem().pod_ports.get(uid).map(|p| p.id.clone());
        let ids = match cached {
            Some(id) => vec![id],
            None => match ports
                .list_ports(&PortFilter {
                    name: Some(pod_port::name(&self.cfg.node_name, uid)),
                    project_id: self.project_id.clone(),
                    network_id: None,
                })
                .await
            {
                Ok(found) => found.into_iter().map(|p| p.id).collect(),
                Err(e) => {
                    warn!(pod_uid = %uid, error = %e, "cannot look up the pod's port; retrying next pass");
                    return false;
                }
            },
        };
        for id in ids {
            match ports.delete_port(&id).await {
                Ok(()) => info!(port = %id, pod_uid = %uid, "deleted the pod's Neutron port"),
                Err(e) if e.is_not_found() => {}
                Err(e) => {
                    warn!(port = %id, error = %e, "deleting the pod's port failed; retrying next pass");
                    return false;
                }
            }
        }
        if let Some(neutron) = &self.neutron
            && !pod_port::exposed(pod).is_empty()
            && let Err(e) = pod_port::delete_groups(
                neutron.as_ref(),
                self.project_id.as_deref(),
                &pod_port::name(&self.cfg.node_name, uid),
            )
            .await
        {
            warn!(pod_uid = %uid, error = %e, "deleting the pod's security group failed; retrying next pass");
            return false;
        }
        self.mem().pod_ports.remove(uid);
        true
    }

    /// Deletes the ports and then the security groups named for this node whose pod is
    /// neither in `live` nor still has Zun containers (`busy`): what a crash between a port's
    /// create and its pod's end left. `Ok(n)`: how many it found but could not delete (a group
    /// still in use by a port deleted just now or not yet: the next sweep retries).
    async fn sweep_ports(
        &self,
        ports: &dyn Ports,
        live: &BTreeSet<String>,
        busy: &BTreeSet<String>,
    ) -> Result<usize, openstack::Error> {
        let all = ports
            .list_ports(&PortFilter {
                project_id: self.project_id.clone(),
                ..Default::default()
            })
            .await?;
        let mut left = 0;
        for p in pod_port::leaked(&self.cfg.node_name, &all, live, busy) {
            info!(port = %p.id, name = %p.name, "deleting a Neutron port whose pod is gone");
            if let Err(e) = ports.delete_port(&p.id).await
                && !e.is_not_found()
            {
                warn!(port = %p.id, error = %e, "leaked port delete failed; retrying next sweep");
                left += 1;
            }
        }
        let Some(neutron) = &self.neutron else {
            return Ok(left);
        };
        let groups = neutron
            .list_security_groups(&SecurityGroupFilter {
                project_id: self.project_id.clone(),
                ..Default::default()
            })
            .await?;
        for g in groups
            .iter()
            .filter(|g| pod_port::is_leaked(&self.cfg.node_name, &g.name, live, busy))
        {
            info!(group = %g.id, name = %g.name, "deleting a security group whose pod is gone");
            if let Err(e) = neutron.delete_security_group(&g.id).await
                && !e.is_not_found()
            {
                warn!(group = %g.id, error = %e, "leaked security group delete failed; retrying next sweep");
                left += 1;
            }
        }
        Ok(left)
    }

    /// Deletes everything this node made in its project, for a tenant that goes (no later node
    /// would find it as its own, and its credentials may not outlive it): its Zun containers,
    /// then, once Zun has deleted them, their ports and security groups. Waits up to `timeout`
    /// for Zun's asynchronous deletes. `Ok(n)`: how many containers (or, with none left,
    /// ports and groups) are left (0: all gone).
    pub async fn release(&self, timeout: std::time::Duration) -> Result<usize, openstack::Error> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = self
                .zun
                .list_containers(&labels::ours(&self.cfg.node_name), None)
                .await?;
            if left.is_empty() {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(left.len());
            }
            for c in left.iter().filter(|c| c.status != zs::DELETING) {
                if let Err(e) = self.zun.delete_container(&c.uuid, true, false).await
                    && !e.is_not_found()
                {
                    debug!(zun = %c.uuid, error = %e, "container not deleted yet");
                }
            }
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        }
        self.mem().pod_ports.clear();
        match &self.ports {
            Some(ports) => {
                let none = BTreeSet::new();
                self.sweep_ports(ports.as_ref(), &none, &none).await
            }
            None => Ok(0),
        }
    }

    /// How many pods' passes (their Zun creates, stops, deletes) run at the same time
    /// (at least 1).
    pub fn with_pod_concurrency(mut self, n: usize) -> Self {
        self.pod_concurrency = n.max(1);
        self
    }

    /// Replaces each listed stopped container that shows no exit code by what a GET says
    /// (cached per listed state, so a container costs one GET when it stops). A failed GET
    /// keeps the listed state; the next pass tries again.
    async fn refresh_stale_stops(&self, listed: Vec<ZunContainer>) -> Vec<ZunContainer> {
        let key = |c: &ZunContainer| (c.uuid.clone(), c.status_detail.clone().unwrap_or_default());
        let stale = |c: &ZunContainer| c.status == zs::STOPPED && c.exit_code().is_none();
        let mut out = Vec::with_capacity(listed.len());
        let mut keep = HashSet::new();
        for c in listed {
            if !stale(&c) {
                out.push(c);
                continue;
            }
            let k = key(&c);
            keep.insert(k.clone());
            if let Some(hit) = self.mem().refreshed.get(&k).cloned() {
                out.push(hit);
                continue;
            }
            match self.zun.get_container(&c.uuid).await {
                Ok(fresh) => {
                    debug!(zun = %c.uuid, detail = ?fresh.status_detail, "refreshed a stopped container");
                    if fresh.exit_code().is_some() {
                        self.mem().refreshed.insert(k, fresh.clone());
                    }
                    out.push(fresh);
                }
                Err(e) => {
                    debug!(zun = %c.uuid, error = %e, "could not refresh a stopped container");
                    out.push(c);
                }
            }
        }
        self.mem().refreshed.retain(|k, _| keep.contains(k));
        out
    }

    fn mem(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keep an event only the first time it is seen for this pod.
    fn once(&self, uid: &str, events: &mut Vec<PodEvent>, e: PodEvent) {
        if self
            .mem()
            .events
            .insert((uid.to_string(), e.reason.clone(), e.message.clone()))
        {
            events.push(e);
        }
    }

    async fn referenced(&self, pod: &Pod, objects: &dyn Objects) -> Result<Referenced, String> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let mut out = Referenced::default();
        for r in translate::references(pod) {
            match r {
                Reference::ConfigMap(n) => {
                    if let Some(cm) = objects.config_map(&ns, &n).await? {
                        out.config_maps.insert(n, cm);
                    }
                }
                Reference::Secret(n) => {
                    if let Some(s) = objects.secret(&ns, &n).await? {
                        out.secrets.insert(n, s);
                    }
                }
                Reference::OpenstackProject(n) => {
                    let kind = ApiResource::erase::<api::OpenstackProject>(&());
                    if let Some(v) = objects.custom_object(&kind, &ns, &n).await? {
                        let p: api::OpenstackProject = serde_json::from_value(v)
                            .map_err(|e| format!("reading OpenstackProject {ns}/{n}: {e}"))?;
                        out.projects.insert(n, p);
                    }
                }
            }
        }
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    async fn create(
        &self,
        pod: &Pod,
        uid: &str,
        objects: &dyn Objects,
        wanted: &[Key],
        observed: &mut Vec<ZunContainer>,
        pass: &mut Pass,
        events: &mut Vec<PodEvent>,
    ) {
        let mut refs = match self.referenced(pod, objects).await {
            Ok(r) => r,
            Err(e) => {
                for k in wanted {
                    pass.create_errors
                        .insert(k.clone(), ("CreateContainerConfigError".into(), e.clone()));
                }
                return;
            }
        };
        refs.node_cpu = self.mem().node_cpu;
        if let Some(ports) = &self.ports {
            match self.pod_port(ports.as_ref(), pod, uid, &refs).await {
                Ok(p) => refs.port = p,
                Err(m) => {
                    warn!(error = %m, "the pod's port");
                    for k in wanted {
                        pass.create_errors
                            .insert(k.clone(), ("CreateContainerError".into(), m.clone()));
                    }
                    self.once(
                        uid,
                        events,
                        PodEvent {
                            type_: EventType::Warning,
                            reason: "Failed".into(),
                            message: format!("Error: {m}"),
                        },
                    );
                    return;
                }
            }
        }
        let t = match translate::translate(pod, &refs, &self.cfg) {
            Ok(t) => t,
            Err(TranslateError::MissingReference(m)) => {
                for k in wanted {
                    pass.create_errors
                        .insert(k.clone(), ("CreateContainerConfigError".into(), m.clone()));
                }
                self.once(
                    uid,
                    events,
                    PodEvent {
                        type_: EventType::Warning,
                        reason: "Failed".into(),
                        message: format!("Error: {m}"),
                    },
                );
                return;
            }
            Err(e @ TranslateError::Unsupported { .. }) => {
                pass.failure = Some((PROVIDER_FAILED.into(), e.to_string()));
                return;
            }
        };
        for p in t.init.iter().chain(t.main.iter()) {
            let key = (p.role, p.container.clone());
            if !wanted.contains(&key) {
                continue;
            }
            let mut req = p.create.clone();
            // Its volume files are written between create and start (`volume_sync`).
            if crate::volumes::mounts_volumes(pod, p.role, &p.container) {
                req.run = false;
            }
            match self.zun.create_container(&req).await {
                Ok(c) => {
                    info!(pod = %pod.metadata.name.as_deref().unwrap_or_default(), container = %p.container, zun = %c.uuid, "created Zun container");
                    events.push(PodEvent {
                        type_: EventType::Normal,
                        reason: "Created".into(),
                        message: format!(
                            "Created container {} as Zun container {}",
                            p.container, c.uuid
                        ),
                    });
                    observed.push(c);
                }
                Err(e) => {
                    warn!(container = %p.container, error = %e, "Zun create failed");
                    // The port may be what Zun refused (deleted behind our back): look again
                    // next time.
                    if p.create.nets.iter().any(|n| n.port.is_some()) {
                        self.mem().pod_ports.remove(uid);
                    }
                    let msg = e.message().to_string();
                    pass.create_errors
                        .insert(key.clone(), ("CreateContainerError".into(), msg.clone()));
                    self.once(
                        uid,
                        events,
                        PodEvent {
                            type_: EventType::Warning,
                            reason: "Failed".into(),
                            message: format!("Error creating container {}: {msg}", p.container),
                        },
                    );
                }
            }
        }
    }

    /// Starts an exited container again, keeping the ending run's log for
    /// `logs --previous` first ([`crate::run_logs`]); a log Zun cannot give is
    /// logged and does not hold the restart back.
    async fn restart(&self, uid: &str, id: &str) -> openstack::Result<()> {
        let store = crate::run_logs::global();
        let since = store.run_start(id);
        let opts = openstack::container::LogOptions {
            tail: Some(crate::run_logs::MAX_LINES),
            timestamps: true,
            since: since.map(|t| t.as_second()),
        };
        let previous = match self.zun.container_logs(id, &opts).await {
            Ok(text) => crate::run_logs::run_of(&text, since),
            Err(e) => {
                warn!(zun = %id, error = %e, "cannot keep the ending run's log");
                String::new()
            }
        };
        let started = jiff::Timestamp::now();
        self.zun.start_container(id).await?;
        store.record_restart(uid, id, previous, started);
        Ok(())
    }

    /// Asks Zun to delete container `id`, marking it `Deleting` in `observed`: Zun deletes
    /// asynchronously, and the pod goes (or the container is made again) once a list no
    /// longer shows it. A failure is logged and retried next pass.
    async fn send_delete(&self, id: &str, observed: &mut Vec<ZunContainer>) {
        match self.zun.delete_container(id, true, false).await {
            Ok(()) => {
                for c in observed.iter_mut().filter(|c| c.uuid == id) {
                    c.status = openstack::container::status::DELETING.into();
                }
            }
            Err(e) if e.is_not_found() => observed.retain(|c| c.uuid != id),
            Err(e) => warn!(zun = %id, error = %e, "delete failed; retrying next pass"),
        }
    }

    async fn sync_pod(
        &self,
        pod: &Pod,
        mut observed: Vec<ZunContainer>,
        objects: &dyn Objects,
        now: jiff::Timestamp,
    ) -> PodUpdate {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let mut update = PodUpdate {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: uid.clone(),
            ..Default::default()
        };
        let mut pass = Pass::default();
        let mut events = Vec::new();
        let deleting = pod.metadata.deletion_timestamp.is_some();
        // A pod of a namespace its tenant does not list fails before anything reaches
        // OpenStack; one whose containers exist already (the namespace was unbound after they
        // were made) is left to its owner to delete, as a kubelet keeps running pods.
        let refused = match (&self.cfg.tenant, observed.is_empty()) {
            (Some(t), true) => t.admit(&update.namespace).err(),
            _ => None,
        };
        if !deleting && !status::is_terminal(pod) {
            if let Some(m) = refused {
                pass.failure = Some((crate::tenant::NOT_BOUND.into(), m));
            } else if let Err(e) = translate::validate(pod) {
                pass.failure = Some((PROVIDER_FAILED.into(), e.to_string()));
            }
        }
        let mut tracks = self.mem().tracks.get(&uid).cloned().unwrap_or_default();
        {
            let (by_key, _) = status::index(&observed);
            for (k, t) in tracks.iter_mut() {
                crate::restarts::settle(t, by_key.get(k), now);
            }
        }
        let actions = if pass.failure.is_some() {
            Vec::new()
        } else {
            status::decide(pod, &observed, &tracks, now)
        };
        let backing_off = {
            let m = self.mem();
            m.create_failures
                .get(&uid)
                .and_then(|(n, at, errs)| (now < *at + status::backoff(*n)).then(|| errs.clone()))
        };
        let mut tried_create = false;
        for a in actions {
            if matches!(a, Action::CreateInit(_) | Action::CreateMain(_)) {
                if let Some(errs) = &backing_off {
                    pass.create_errors.extend(errs.clone());
                    continue;
                }
                tried_create = true;
            }
            match a {
                Action::CreateInit(i) => {
                    let name = pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.init_containers.as_ref())
                        .and_then(|c| c.get(i))
                        .map(|c| c.name.clone())
                        .unwrap_or_default();
                    self.create(
                        pod,
                        &uid,
                        objects,
                        &[(Role::Init, name)],
                        &mut observed,
                        &mut pass,
                        &mut events,
                    )
                    .await;
                }
                Action::CreateMain(names) => {
                    let keys: Vec<Key> = names.into_iter().map(|n| (Role::Main, n)).collect();
                    self.create(
                        pod,
                        &uid,
                        objects,
                        &keys,
                        &mut observed,
                        &mut pass,
                        &mut events,
                    )
                    .await;
                }
                Action::Restart { id, key } => match self.restart(&uid, &id).await {
                    Ok(()) => {
                        if let Some(c) = observed.iter().find(|c| c.uuid == id) {
                            let finished = status::ended_at(pod, &key, &id, now);
                            let shown = status::shown_restarts(pod, &key);
                            let t = crate::restarts::restarted(
                                tracks.get(&key),
                                c,
                                finished,
                                now,
                                shown,
                            );
                            tracks.insert(key.clone(), t);
                        }
                        events.push(PodEvent {
                            type_: EventType::Normal,
                            reason: "Started".into(),
                            message: format!("Restarted container {}", key.1),
                        });
                        pass.restarted.insert(key);
                    }
                    Err(e) => warn!(zun = %id, error = %e, "restart failed; retrying next pass"),
                },
                Action::Stop { id, grace_s } => {
                    let name = observed
                        .iter()
                        .find(|c| c.uuid == id)
                        .and_then(|c| c.labels.get(labels::CONTAINER).cloned())
                        .unwrap_or_default();
                    if self.prober.is_terminating(&id) {
                        continue;
                    }
                    // A container with a preStop hook is stopped in the background: the hook
                    // may take the whole grace period, which a pass must not wait for.
                    if let (true, Some(hook), Some(z)) = (
                        deleting,
                        crate::prober::pre_stop_of(pod, &name),
                        observed.iter().find(|c| c.uuid == id),
                    ) {
                        self.prober.terminate(&uid, z, &name, Some(hook), grace_s);
                        events.push(PodEvent {
                            type_: EventType::Normal,
                            reason: "Killing".into(),
                            message: format!(
                                "Stopping container {name} (preStop hook, then grace period {grace_s}s)"
                            ),
                        });
                        continue;
                    }
                    if !stop_due(&mut self.mem().stops, &id, std::time::Instant::now()) {
                        debug!(zun = %id, "a stop was sent already; waiting for Zun to act on it");
                        continue;
                    }
                    let sent = self.zun.stop_container(&id, grace_s).await;
                    if sent.is_ok() {
                        let until = std::time::Instant::now()
                            + std::time::Duration::from_secs(grace_s)
                            + STOP_SETTLE;
                        self.mem().stops.insert(id.clone(), until);
                    }
                    match sent {
                        Ok(()) => events.push(PodEvent {
                            type_: EventType::Normal,
                            reason: "Killing".into(),
                            message: format!("Stopping container {name} (grace period {grace_s}s)"),
                        }),
                        Err(e) if e.is_not_found() || e.is_conflict() => {
                            debug!(zun = %id, error = %e, "stop not needed")
                        }
                        Err(e) => warn!(zun = %id, error = %e, "stop failed; retrying next pass"),
                    }
                }
                Action::Replace { id, key } => {
                    // Counts as a failed create, so the new one waits for the back-off.
                    tried_create = true;
                    let reason = observed
                        .iter()
                        .find(|c| c.uuid == id)
                        .and_then(|c| c.status_reason.clone())
                        .unwrap_or_else(|| "Zun reported an error".into());
                    pass.create_errors.insert(
                        key.clone(),
                        (status::error_reason(&reason).into(), reason.clone()),
                    );
                    info!(
                        zun = %id,
                        container = %key.1,
                        reason = %reason,
                        "Zun container in Error: deleting it to create it again"
                    );
                    events.push(PodEvent {
                        type_: EventType::Warning,
                        reason: "Failed".into(),
                        message: format!(
                            "Zun container {id} of container {} failed: {reason}; creating it again",
                            key.1
                        ),
                    });
                    self.send_delete(&id, &mut observed).await;
                }
                Action::Delete { id } => self.send_delete(&id, &mut observed).await,
                Action::Fail(reason, message) => pass.failure = Some((reason, message)),
            }
        }
        if deleting {
            self.forget_volumes(&uid);
        } else if pass.failure.is_none() && !status::is_terminal(pod) {
            self.sync_volumes(pod, &uid, &observed, objects, &mut pass, &mut events, now)
                .await;
        }
        if tried_create {
            let mut m = self.mem();
            // Only Zun's refusals and failures back off; a missing ConfigMap costs no Zun call.
            let zun_failed = pass
                .create_errors
                .values()
                .any(|(reason, _)| reason == "CreateContainerError" || reason == "ErrImagePull");
            if !zun_failed {
                m.create_failures.remove(&uid);
            } else {
                let n = m.create_failures.get(&uid).map(|f| f.0).unwrap_or(0) + 1;
                m.create_failures
                    .insert(uid.clone(), (n, now, pass.create_errors.clone()));
            }
        }
        if let Some((reason, message)) = &pass.failure {
            self.once(
                &uid,
                &mut events,
                PodEvent {
                    type_: EventType::Warning,
                    reason: reason.clone(),
                    message: message.clone(),
                },
            );
        }
        for c in &observed {
            if c.status == openstack::container::status::ERROR {
                let msg = c.status_reason.clone().unwrap_or_default();
                self.once(
                    &uid,
                    &mut events,
                    PodEvent {
                        type_: EventType::Warning,
                        reason: "Failed".into(),
                        message: format!(
                            "Zun container {} of container {} failed: {msg}",
                            c.uuid,
                            c.labels.get(labels::CONTAINER).cloned().unwrap_or_default()
                        ),
                    },
                );
            }
        }
        // Containers restarted this pass or whose start Zun has not shown yet: not probed yet.
        let mut not_yet = pass.restarted.clone();
        not_yet.extend(
            tracks
                .iter()
                .filter(|(_, t)| t.starting.is_some())
                .map(|(k, _)| k.clone()),
        );
        let views = self.prober.observe(pod, &observed, &not_yet, now);
        pass.probes = views;
        for e in self.prober.take_events(&uid) {
            self.once(&uid, &mut events, e);
        }
        update.events = events;
        let horizon = jiff::SignedDuration::try_from(self.transition.1).unwrap_or_default();
        let moving = self.transition.0.is_some()
            && status::in_transition(pod, &observed, &tracks, now, horizon);
        {
            let mut m = self.mem();
            if deleting {
                m.tracks.remove(&uid);
            } else {
                m.tracks.insert(uid.clone(), tracks.clone());
            }
            if moving {
                let since = m.transitions.get(&uid).map_or(now, |t| t.0);
                m.transitions.insert(uid.clone(), (since, observed.clone()));
            } else {
                m.transitions.remove(&uid);
            }
        }
        pass.tracks = tracks;
        if deleting {
            update.deleted = observed.is_empty();
            if update.deleted
                && let Some(ports) = &self.ports
            {
                update.deleted = self.delete_pod_port(ports.as_ref(), pod, &uid).await;
            }
        } else {
            if let Some(p) = self.mem().pod_ports.get(&uid) {
                pass.pod_ips = p.ips.clone();
            }
            update.status = Some(status::render(
                pod,
                &observed,
                &pass,
                &self.cfg.host_ip,
                now,
            ));
        }
        update
    }
}

fn q(s: String) -> Quantity {
    Quantity(s)
}

#[async_trait]
impl Provider for ZunProvider {
    async fn node_state(&self) -> NodeState {
        let mut conditions = Vec::new();
        let mut capacity = BTreeMap::new();
        let mut allocatable = BTreeMap::new();
        let quota = match &self.project_id {
            Some(p) => self.zun.get_quota(p).await.map(Some),
            None => Ok(None),
        };
        let zones = self.zun.list_availability_zones().await;
        let services = self.zun.list_services().await;
        let (own_cpu, own_mem, own_n) = self.mem().own_usage;
        let u = &self.unlimited;
        let (mut cpu_cap, mut mem_cap, mut pods_cap) = (u.cpu, u.memory_mib, u.pods);
        let (mut cpu_free, mut mem_free, mut pods_free) = (u.cpu, u.memory_mib, u.pods);
        let mut ready = Condition::new("Ready", true, "KubeletReady", "Zun is reachable");
        let mut mem_pressure = Condition::new(
            "MemoryPressure",
            false,
            "KubeletHasSufficientMemory",
            "the project's Zun memory quota has room",
        );
        let mut disk_pressure = Condition::new(
            "DiskPressure",
            false,
            "KubeletHasNoDiskPressure",
            "the project's Zun disk quota has room",
        );
        let mut pid_pressure = Condition::new(
            "PIDPressure",
            false,
            "KubeletHasSufficientPID",
            "the project's Zun container quota has room",
        );
        match &quota {
            Ok(Some(qt)) => {
                // Our own pods count against allocatable through the
                // scheduler already; only what others use is taken off.
                let free = |v: &openstack::container::ZunQuotaValue, own: f64| {
                    (v.limit - (v.in_use - own).max(0.0)).max(0.0)
                };
                if qt.cpu.is_limited() {
                    cpu_cap = qt.cpu.limit;
                    cpu_free = free(&qt.cpu, own_cpu);
                }
                if qt.memory.is_limited() {
                    mem_cap = qt.memory.limit as i64;
                    mem_free = free(&qt.memory, own_mem as f64) as i64;
                    if qt.memory.in_use >= qt.memory.limit {
                        mem_pressure = Condition::new(
                            "MemoryPressure",
                            true,
                            "QuotaExhausted",
                            format!(
                                "the project's Zun memory quota ({} MiB) is used up",
                                qt.memory.limit
                            ),
                        );
                    }
                }
                if qt.containers.is_limited() {
                    pods_cap = qt.containers.limit as i64;
                    pods_free = free(&qt.containers, own_n as f64) as i64;
                    if qt.containers.in_use >= qt.containers.limit {
                        pid_pressure = Condition::new(
                            "PIDPressure",
                            true,
                            "QuotaExhausted",
                            format!(
                                "the project's Zun container quota ({}) is used up",
                                qt.containers.limit
                            ),
                        );
                    }
                }
                if qt.disk.is_limited() && qt.disk.in_use >= qt.disk.limit {
                    disk_pressure = Condition::new(
                        "DiskPressure",
                        true,
                        "QuotaExhausted",
                        format!(
                            "the project's Zun disk quota ({} GiB) is used up",
                            qt.disk.limit
                        ),
                    );
                }
            }
            Ok(None) => {}
            // Reading quotas may be admin-only: capacity stays the
            // configured one and the node says why.
            Err(openstack::Error::Forbidden { .. }) => {
                debug!(
                    "the Zun quota is not readable with these credentials; using the configured capacity"
                );
            }
            Err(e) => {
                ready = Condition::new(
                    "Ready",
                    false,
                    "ZunUnavailable",
                    format!("cannot read the Zun quota: {e}"),
                );
            }
        }
        if let Err(e) = &zones {
            ready = Condition::new(
                "Ready",
                false,
                "ZunUnavailable",
                format!("cannot list Zun availability zones: {e}"),
            );
        }
        match &services {
            Ok(list) => {
                let computes: Vec<_> = list.iter().filter(|s| s.binary == "zun-compute").collect();
                if !computes.is_empty() && !computes.iter().any(|s| s.state == "up" && !s.disabled)
                {
                    ready = Condition::new(
                        "Ready",
                        false,
                        "ZunComputeDown",
                        "no zun-compute service is up and enabled",
                    );
                }
            }
            // Listing services is admin-only by default: without it, the
            // API answering is what we know.
            Err(openstack::Error::Forbidden { .. }) => {}
            Err(e) => debug!(error = %e, "cannot list Zun services"),
        }
        self.mem().node_cpu = Some(cpu_cap);
        capacity.insert("cpu".into(), q(quantity::cpu_string(cpu_cap)));
        capacity.insert("memory".into(), q(quantity::mib_string(mem_cap)));
        capacity.insert("pods".into(), q(pods_cap.to_string()));
        allocatable.insert("cpu".into(), q(quantity::cpu_string(cpu_free)));
        allocatable.insert("memory".into(), q(quantity::mib_string(mem_free)));
        allocatable.insert("pods".into(), q(pods_free.to_string()));
        let zone = self
            .cfg
            .availability_zone
            .clone()
            .or_else(|| zones.ok().and_then(|z| z.into_iter().next()));
        conditions.push(ready);
        conditions.push(mem_pressure);
        conditions.push(disk_pressure);
        conditions.push(pid_pressure);
        conditions.push(Condition::new(
            "NetworkUnavailable",
            false,
            "NeutronPortPerContainer",
            "each container gets a Neutron port on the tenant network",
        ));
        NodeState {
            capacity,
            allocatable,
            conditions,
            addresses: Vec::new(),
            zone,
        }
    }

    /// Each pass claims its pods ([`InFlight`]).
    fn passes_may_overlap(&self) -> bool {
        true
    }

    fn transition_interval(&self) -> Option<std::time::Duration> {
        self.transition.0
    }

    async fn sync_transitions(
        &self,
        pods: &[Pod],
        objects: &dyn Objects,
    ) -> Result<Vec<PodUpdate>, ProviderError> {
        self.transition_pass(pods, objects).await
    }

    async fn sync(
        &self,
        pods: &[Pod],
        objects: &dyn Objects,
        complete: bool,
    ) -> Result<Vec<PodUpdate>, ProviderError> {
        let out = Mutex::new(Vec::with_capacity(pods.len()));
        self.sync_each(pods, objects, complete, &|u| {
            out.lock().unwrap_or_else(|p| p.into_inner()).push(u)
        })
        .await?;
        Ok(out.into_inner().unwrap_or_else(|p| p.into_inner()))
    }

    async fn sync_each(
        &self,
        pods: &[Pod],
        objects: &dyn Objects,
        complete: bool,
        emit: &(dyn Fn(PodUpdate) + Send + Sync),
    ) -> Result<(), ProviderError> {
        // Each pod is claimed before the list is read, so that what its pass acts on is never
        // older than what another pass did to it; a pod still held by an earlier pass (waiting
        // on Zun) is left to that pass.
        let mut claimed = Vec::with_capacity(pods.len());
        for pod in pods {
            let Some(uid) = pod.metadata.uid.as_deref() else {
                continue;
            };
            match self.in_flight.claim(uid) {
                Some(c) => claimed.push((pod, c)),
                None => {
                    debug!(pod = %pod.metadata.name.as_deref().unwrap_or_default(), "an earlier pass still works on the pod; skipped")
                }
            }
        }
        let listing = self.listing.lock().await;
        let asked = std::time::Instant::now();
        let all = self
            .zun
            .list_containers(&labels::ours(&self.cfg.node_name), None)
            .await
            .map_err(|e| ProviderError::Unavailable(e.to_string()))?;
        // A slow list means Zun is queueing: the exit checks and the transition pass, which
        // only hurry what the full passes show, wait for a pass that finds it answering.
        let zun_answers = asked.elapsed() < crate::timed::SLOW_CALL;
        {
            let mut m = self.mem();
            m.zun_slow = !zun_answers;
            m.own_usage = all.iter().fold((0.0, 0, 0), |(c, mm, n), z| {
                let mib = z
                    .memory
                    .as_deref()
                    .map(|s| s.trim_end_matches(['M', 'm']))
                    .and_then(|s| s.parse::<i64>().ok())
                    .unwrap_or(0);
                (c + z.cpu.unwrap_or(0.0), mm + mib, n + 1)
            });
        }
        let all = self.refresh_stale_stops(all).await;
        drop(listing);
        let mut by_uid: BTreeMap<String, Vec<ZunContainer>> = BTreeMap::new();
        for c in all {
            let uid = c.labels.get(labels::POD_UID).cloned().unwrap_or_default();
            by_uid.entry(uid).or_default().push(c);
        }
        let now = jiff::Timestamp::now();
        let live: BTreeSet<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
        let mut work = Vec::with_capacity(claimed.len());
        for (pod, claim) in claimed {
            let observed = by_uid.remove(&claim.uid).unwrap_or_default();
            // The span names the pod in every log line of its pass, the OpenStack client's
            // request lines included (fields as the operator's reconcile span).
            let span = tracing::info_span!(
                "sync_pod",
                kind = "Pod",
                namespace = pod.metadata.namespace.as_deref().unwrap_or_default(),
                object = pod.metadata.name.as_deref().unwrap_or_default(),
            );
            work.push((pod, claim, observed, span));
        }
        // Pods held by an earlier pass keep their containers out of the orphans.
        for p in pods {
            if let Some(uid) = p.metadata.uid.as_deref() {
                by_uid.remove(uid);
            }
        }
        let exit_checks = if !zun_answers {
            HashSet::new()
        } else {
            let live_running: Vec<ZunContainer> = work
                .iter()
                .filter(|(p, ..)| p.metadata.deletion_timestamp.is_none())
                .flat_map(|(_, _, observed, _)| observed.iter().cloned())
                .collect();
            self.exit_checks_due(&live_running)
        };
        // Pods are independent: their Zun actions (a create takes a second or more) overlap,
        // up to `pod_concurrency` pods at a time; the client's own limits still apply. Each
        // pod's update goes out as soon as its pass is done, so one pod waiting on a slow Zun
        // call holds back no other pod's status.
        // (The futures are made first: a closure inside the stream trips the async-trait
        // future's lifetime inference.)
        let passes: Vec<_> = work
            .into_iter()
            .map(|(pod, claim, observed, span)| {
                let checks = &exit_checks;
                async move {
                    let _claim = claim;
                    let observed = self.check_exits(observed, checks).await;
                    self.sync_pod(pod, observed, objects, now).await
                }
                .instrument(span)
            })
            .collect();
        let mut done = futures::stream::iter(passes).buffer_unordered(self.pod_concurrency);
        while let Some(u) = done.next().await {
            emit(u);
        }
        if complete {
            let busy: BTreeSet<String> = by_uid.keys().cloned().collect();
            for (uid, list) in by_uid {
                // Zun deletes asynchronously: one delete per orphan, not one per pass.
                for c in list.into_iter().filter(|c| c.status != zs::DELETING) {
                    info!(zun = %c.uuid, pod_uid = %uid, "deleting Zun container whose pod is gone");
                    if let Err(e) = self.zun.delete_container(&c.uuid, true, false).await
                        && !e.is_not_found()
                    {
                        warn!(zun = %c.uuid, error = %e, "orphan delete failed; retrying next pass");
                    }
                }
            }
            if let Some(ports) = &self.ports {
                let due = self
                    .mem()
                    .last_port_sweep
                    .is_none_or(|t| t.elapsed() >= PORT_SWEEP_EVERY);
                if due {
                    // Marked first: a pass overlapping this one does not sweep as well.
                    self.mem().last_port_sweep = Some(std::time::Instant::now());
                    if let Err(e) = self.sweep_ports(ports.as_ref(), &live, &busy).await {
                        warn!(error = %e, "cannot list ports or security groups to sweep; retrying later");
                    }
                }
            }
            let mut m = self.mem();
            m.events.retain(|(uid, _, _)| live.contains(uid));
            m.create_failures.retain(|uid, _| live.contains(uid));
            m.pod_ports.retain(|uid, _| live.contains(uid));
            m.tracks.retain(|uid, _| live.contains(uid));
            m.transitions.retain(|uid, _| live.contains(uid));
            drop(m);
            self.prober.retain_pods(&live);
            crate::run_logs::global().retain_pods(&live);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
mod volume_sync;
