//! What to do with a pod's Docker containers, and the status Kubernetes shows, as pure
//! functions of the pod, the containers Docker reports and the time.
//!
//! The kubelet's rules (`pkg/kubelet/kuberuntime/kuberuntime_manager.go`
//! `computePodActions`, `pkg/kubelet/kubelet_pods.go` `getPhase`):
//! - init containers one at a time, in order; regular containers once all init
//!   containers exited 0;
//! - a container that exited is restarted per `restartPolicy` (init containers on failure
//!   unless `Never`) as a **new** container (attempt + 1; a fresh writable layer), after the
//!   kubelet's back-off: at once the first time, then 10 s doubling to 5 min
//!   ([`vk_zun::status::backoff`]) from the previous run's end;
//! - `terminated.reason` is `Completed` (exit 0), `OOMKilled`, or `Error`, with the message
//!   read from `terminationMessagePath` (or the log's tail with `FallbackToLogsOnError`);
//! - phase from the regular containers' states ([`vk_zun::status::phase_of`]); a failed init
//!   container with `restartPolicy: Never` fails the pod.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, Pod, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use vk_runtime::status::pod_condition;
use vk_zun::status::{backoff, phase_of};
use vk_zun::translate::Role;

/// `containerID` scheme in container statuses.
pub const ID_SCHEME: &str = "docker://";

/// Key of a pod container.
pub type Key = (Role, String);

/// A Docker container's run state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Run {
    /// Created, not started yet.
    Created,
    /// Running (or restarting, paused).
    Running,
    /// Exited.
    Exited {
        /// Exit code.
        code: i32,
        /// Killed for memory.
        oom: bool,
    },
    /// Anything else (`removing`, `dead`).
    Other(String),
}

/// One of the pod's containers as Docker shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// Docker's id.
    pub id: String,
    /// Init or main.
    pub role: Role,
    /// The pod container's name.
    pub name: String,
    /// Which run (the restart count when it was created).
    pub attempt: i32,
    /// State.
    pub run: Run,
    /// When it started (`State.StartedAt`), if it did.
    pub started_at: Option<jiff::Timestamp>,
    /// When it ended (`State.FinishedAt`), if it did.
    pub finished_at: Option<jiff::Timestamp>,
    /// The termination message (read by the caller once it exited).
    pub message: Option<String>,
}

impl Observed {
    fn key(&self) -> Key {
        (self.role, self.name.clone())
    }
    fn exited(&self) -> Option<i32> {
        match self.run {
            Run::Exited { code, .. } => Some(code),
            _ => None,
        }
    }
}

/// One step on Docker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create and start the init container with this index (attempt given).
    StartInit(usize, i32),
    /// Create and start this regular container (attempt given).
    StartMain(String, i32),
    /// Remove an old container (an earlier attempt, or a duplicate).
    Remove(String),
    /// Stop a running container (grace period, seconds) and remove it: the pod is going.
    Stop(String, u64),
}

/// The latest attempt of each pod container; the others come back for removal.
pub fn index(observed: &[Observed]) -> (BTreeMap<Key, Observed>, Vec<Observed>) {
    let mut sorted: Vec<&Observed> = observed.iter().collect();
    sorted.sort_by(|a, b| (b.attempt, &b.id).cmp(&(a.attempt, &a.id)));
    let mut latest = BTreeMap::new();
    let mut old = Vec::new();
    for o in sorted {
        match latest.entry(o.key()) {
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(o.clone());
            }
            std::collections::btree_map::Entry::Occupied(_) => old.push(o.clone()),
        }
    }
    (latest, old)
}

fn restart_policy(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always")
}

/// Whether the pod is in a terminal phase.
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The grace period of a pod being deleted, seconds.
pub fn grace_seconds(pod: &Pod) -> u64 {
    pod.metadata
        .deletion_grace_period_seconds
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
        })
        .unwrap_or(30)
        .max(0) as u64
}

fn should_restart(pod: &Pod, role: Role, code: i32) -> bool {
    match (role, restart_policy(pod)) {
        (Role::Init, "Never") => false,
        (Role::Init, _) => code != 0,
        (Role::Main, "Always") => true,
        (Role::Main, "OnFailure") => code != 0,
        _ => false,
    }
}

/// When the next run of a container that ended at `finished` may start, its restart count
/// being `restarts` (the kubelet's back-off).
pub fn restart_at(finished: jiff::Timestamp, restarts: i32) -> jiff::Timestamp {
    finished + backoff(restarts)
}

fn due(o: &Observed, now: jiff::Timestamp) -> bool {
    match o.finished_at {
        Some(t) => now >= restart_at(t, o.attempt),
        None => true,
    }
}

/// What to do for one pod this pass (the pod not being deleted; see [`on_delete`]).
pub fn decide(pod: &Pod, observed: &[Observed], now: jiff::Timestamp) -> Vec<Action> {
    let (latest, old) = index(observed);
    // The run before the latest stays (its state is the status' `lastState`, its log
    // `logs --previous`); older runs go.
    let keep: Vec<&str> = latest
        .keys()
        .filter_map(|k| {
            old.iter()
                .filter(|o| o.key() == *k)
                .max_by_key(|o| o.attempt)
                .map(|o| o.id.as_str())
        })
        .collect();
    let mut actions: Vec<Action> = Vec::new();
    for o in old
        .iter()
        .filter(|o| !keep.contains(&o.id.as_str()) || o.run == Run::Running)
    {
        actions.push(match o.run {
            Run::Running => Action::Stop(o.id.clone(), 0),
            _ => Action::Remove(o.id.clone()),
        });
    }
    if is_terminal(pod) {
        return actions;
    }
    let Some(spec) = pod.spec.as_ref() else {
        return actions;
    };
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let Some(o) = latest.get(&(Role::Init, c.name.clone())) else {
            actions.push(Action::StartInit(i, 0));
            return actions;
        };
        match o.exited() {
            Some(0) => continue,
            Some(code) => {
                if should_restart(pod, Role::Init, code) && due(o, now) {
                    actions.push(Action::StartInit(i, o.attempt + 1));
                }
                return actions;
            }
            None => return actions,
        }
    }
    for c in &spec.containers {
        match latest.get(&(Role::Main, c.name.clone())) {
            None => actions.push(Action::StartMain(c.name.clone(), 0)),
            Some(o) => {
                if let Some(code) = o.exited()
                    && should_restart(pod, Role::Main, code)
                    && due(o, now)
                {
                    actions.push(Action::StartMain(c.name.clone(), o.attempt + 1));
                }
            }
        }
    }
    actions
}

/// What to do for a pod being deleted: stop what runs within the grace period, remove the
/// rest. Empty when nothing is left.
pub fn on_delete(pod: &Pod, observed: &[Observed]) -> Vec<Action> {
    observed
        .iter()
        .map(|o| match o.run {
            Run::Running => Action::Stop(o.id.clone(), grace_seconds(pod)),
            _ => Action::Remove(o.id.clone()),
        })
        .collect()
}

/// What else the status needs.
#[derive(Clone, Debug, Default)]
pub struct Extra {
    /// The pod's IP (its sandbox's on the Docker network).
    pub pod_ip: Option<String>,
    /// `(started, ready)` of regular containers with probes, by name; the others are started
    /// and ready while they run.
    pub probes: BTreeMap<String, (bool, bool)>,
    /// Containers that could not be created: `(reason, message)`.
    pub create_errors: BTreeMap<Key, (String, String)>,
    /// The pod failed: `(reason, message)`.
    pub failure: Option<(String, String)>,
}

fn waiting(reason: &str, message: Option<String>) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.into()),
            message,
        }),
        ..Default::default()
    }
}

fn terminated(
    o: &Observed,
    code: i32,
    oom: bool,
    now: jiff::Timestamp,
) -> ContainerStateTerminated {
    ContainerStateTerminated {
        exit_code: code,
        reason: Some(
            if oom {
                "OOMKilled"
            } else if code == 0 {
                "Completed"
            } else {
                "Error"
            }
            .into(),
        ),
        message: o.message.clone().filter(|m| !m.is_empty()),
        started_at: o.started_at.map(Time),
        finished_at: Some(Time(o.finished_at.unwrap_or(now))),
        container_id: Some(format!("{ID_SCHEME}{}", o.id)),
        signal: None,
    }
}

fn prev_status<'a>(pod: &'a Pod, key: &Key) -> Option<&'a ContainerStatus> {
    let st = pod.status.as_ref()?;
    let list = match key.0 {
        Role::Init => st.init_container_statuses.as_ref(),
        Role::Main => st.container_statuses.as_ref(),
    }?;
    list.iter().find(|c| c.name == key.1)
}

#[allow(clippy::too_many_arguments)]
fn container_status(
    pod: &Pod,
    key: &Key,
    image: &str,
    latest: Option<&Observed>,
    previous: Option<&Observed>,
    extra: &Extra,
    inits_pending: bool,
    now: jiff::Timestamp,
) -> ContainerStatus {
    let prev = prev_status(pod, key);
    let restart_count = latest.map(|o| o.attempt).unwrap_or(0);
    // The run before this one: from Docker while it is still there, else as recorded.
    let last_state = match previous {
        Some(p) => match p.run {
            Run::Exited { code, oom } => Some(ContainerState {
                terminated: Some(terminated(p, code, oom, now)),
                ..Default::default()
            }),
            _ => None,
        },
        None => prev
            .and_then(|p| p.last_state.clone())
            .filter(|_| restart_count > 0),
    };
    let state = match latest {
        None => match extra.create_errors.get(key) {
            Some((reason, msg)) => waiting(reason, Some(msg.clone())),
            None if key.0 == Role::Main && inits_pending => waiting("PodInitializing", None),
            None => waiting("ContainerCreating", None),
        },
        Some(o) => match &o.run {
            Run::Running => ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(Time(o.started_at.unwrap_or(now))),
                }),
                ..Default::default()
            },
            Run::Exited { code, oom } => {
                let t = terminated(o, *code, *oom, now);
                if !is_terminal(pod) && should_restart(pod, key.0, *code) {
                    // Waiting for its next run: the kubelet shows the run that ended as
                    // lastState and `CrashLoopBackOff` while the back-off lasts.
                    let wait = backoff(o.attempt);
                    let msg = format!(
                        "back-off {}s restarting failed container={} pod={}",
                        wait.as_secs(),
                        key.1,
                        pod.metadata.name.as_deref().unwrap_or_default()
                    );
                    return ContainerStatus {
                        name: key.1.clone(),
                        image: image.to_string(),
                        image_id: String::new(),
                        container_id: Some(format!("{ID_SCHEME}{}", o.id)),
                        ready: false,
                        started: Some(false),
                        restart_count,
                        state: Some(if o.attempt > 0 || wait.as_secs() > 0 {
                            waiting("CrashLoopBackOff", Some(msg))
                        } else {
                            ContainerState {
                                terminated: Some(t.clone()),
                                ..Default::default()
                            }
                        }),
                        last_state: Some(ContainerState {
                            terminated: Some(t),
                            ..Default::default()
                        }),
                        ..Default::default()
                    };
                }
                ContainerState {
                    terminated: Some(t),
                    ..Default::default()
                }
            }
            Run::Created => waiting("ContainerCreating", None),
            Run::Other(s) => waiting("ContainerStatusUnknown", Some(format!("docker: {s}"))),
        },
    };
    let running = state.running.is_some();
    let (started, ready) = match key.0 {
        Role::Main => extra.probes.get(&key.1).copied().unwrap_or((true, true)),
        Role::Init => (true, false),
    };
    ContainerStatus {
        name: key.1.clone(),
        image: image.to_string(),
        image_id: String::new(),
        container_id: latest
            .map(|o| format!("{ID_SCHEME}{}", o.id))
            .or_else(|| prev.and_then(|p| p.container_id.clone())),
        ready: running && key.0 == Role::Main && ready,
        started: Some(running && started),
        restart_count,
        state: Some(state),
        last_state,
        ..Default::default()
    }
}

/// The pod status after this pass.
pub fn render(
    pod: &Pod,
    observed: &[Observed],
    extra: &Extra,
    host_ip: &str,
    now: jiff::Timestamp,
) -> PodStatus {
    let prev = pod.status.clone().unwrap_or_default();
    if is_terminal(pod) && extra.failure.is_none() {
        return prev;
    }
    let (latest, old) = index(observed);
    let previous = |key: &Key, attempt: i32| {
        old.iter()
            .filter(|o| o.key() == *key && o.attempt < attempt)
            .max_by_key(|o| o.attempt)
    };
    let spec = pod.spec.clone().unwrap_or_default();
    let inits = spec.init_containers.clone().unwrap_or_default();
    let inits_done = inits.iter().all(|c| {
        latest
            .get(&(Role::Init, c.name.clone()))
            .is_some_and(|o| o.exited() == Some(0))
    });
    let status_of = |role: Role, c: &k8s_openapi::api::core::v1::Container, pending: bool| {
        let key = (role, c.name.clone());
        let l = latest.get(&key);
        container_status(
            pod,
            &key,
            c.image.as_deref().unwrap_or_default(),
            l,
            l.and_then(|l| previous(&key, l.attempt)),
            extra,
            pending,
            now,
        )
    };
    let init_statuses: Vec<ContainerStatus> = inits
        .iter()
        .map(|c| status_of(Role::Init, c, false))
        .collect();
    let statuses: Vec<ContainerStatus> = spec
        .containers
        .iter()
        .map(|c| status_of(Role::Main, c, !inits_done))
        .collect();
    let policy = restart_policy(pod).to_string();
    let init_failed = policy == "Never"
        && inits.iter().any(|c| {
            latest
                .get(&(Role::Init, c.name.clone()))
                .and_then(Observed::exited)
                .is_some_and(|code| code != 0)
        });
    let phase = if extra.failure.is_some() || init_failed {
        "Failed"
    } else if !inits_done {
        "Pending"
    } else {
        phase_of(&statuses, &policy)
    };
    let terminal = matches!(phase, "Succeeded" | "Failed");
    let ready = !terminal && !statuses.is_empty() && statuses.iter().all(|s| s.ready);
    let not_ready = if terminal {
        "PodCompleted"
    } else {
        "ContainersNotReady"
    };
    let conditions = vec![
        pod_condition(pod, "PodScheduled", true, None, now),
        pod_condition(
            pod,
            "Initialized",
            inits_done,
            (!inits_done).then_some("ContainersNotInitialized"),
            now,
        ),
        pod_condition(
            pod,
            "ContainersReady",
            ready,
            (!ready).then_some(not_ready),
            now,
        ),
        pod_condition(pod, "Ready", ready, (!ready).then_some(not_ready), now),
    ];
    let pod_ip = extra.pod_ip.clone().or(prev.pod_ip.clone());
    PodStatus {
        phase: Some(phase.into()),
        conditions: Some(conditions),
        host_ip: Some(host_ip.into()),
        host_ips: Some(vec![HostIP { ip: host_ip.into() }]),
        pod_ip: pod_ip.clone(),
        pod_ips: pod_ip.map(|ip| vec![PodIP { ip }]),
        start_time: prev.start_time.clone().or(Some(Time(now))),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        container_statuses: Some(statuses),
        reason: extra.failure.as_ref().map(|f| f.0.clone()),
        message: extra.failure.as_ref().map(|f| f.1.clone()),
        qos_class: prev.qos_class.clone(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests;
