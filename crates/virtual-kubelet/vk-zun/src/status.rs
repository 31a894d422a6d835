//! What to do with a pod's Zun containers, and the status Kubernetes shows,
//! as pure functions of the pod, what Zun reports and the time.
//!
//! The kubelet's rules are followed: init containers one at a time, in
//! order; restarts per `restartPolicy` with the kubelet's back-off
//! ([`crate::restarts`]: the first restart at once, then 10 s doubling to
//! 5 min, reset after a 10 min run); phase from the container
//! states (`getPhase` in `pkg/kubelet/kubelet_pods.go`); a container whose
//! status names a Zun container that no longer exists was deleted behind
//! our back, which fails the pod.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, Pod, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use openstack::container::{ZunContainer, status as zs};

use crate::labels;
use crate::restarts::{self, Track};
use crate::translate::Role;
use vk_runtime::status::pod_condition;

/// `containerID` scheme in container statuses.
pub const ID_SCHEME: &str = "zun://";
/// Pod status reason when the node fails a pod.
pub const PROVIDER_FAILED: &str = "ProviderFailed";

/// Key of a pod container.
pub type Key = (Role, String);

/// One step on Zun.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create the init container with this index.
    CreateInit(usize),
    /// Create these main containers.
    CreateMain(Vec<String>),
    /// Start an exited container again.
    Restart {
        /// Zun id.
        id: String,
        /// Which pod container.
        key: Key,
    },
    /// Stop a running container, killing it after `grace_s`.
    Stop {
        /// Zun id.
        id: String,
        /// Grace period, seconds.
        grace_s: u64,
    },
    /// Delete a container Zun failed to create or start (`Error`) so that it is created
    /// again, as a kubelet retries a `CreateContainerError`; the create back-off applies.
    Replace {
        /// Zun id.
        id: String,
        /// Which pod container.
        key: Key,
    },
    /// Delete a (stopped or failed) container.
    Delete {
        /// Zun id.
        id: String,
    },
    /// Fail the pod: `(reason, message)`.
    Fail(String, String),
}

/// The pod's Zun containers by pod container; duplicates (a lost create
/// that was made again) come back separately, oldest kept.
pub fn index(observed: &[ZunContainer]) -> (BTreeMap<Key, ZunContainer>, Vec<ZunContainer>) {
    let mut sorted: Vec<&ZunContainer> = observed.iter().collect();
    sorted.sort_by(|a, b| (&a.created_at, &a.uuid).cmp(&(&b.created_at, &b.uuid)));
    let mut map = BTreeMap::new();
    let mut dups = Vec::new();
    for c in sorted {
        let role = if c.labels.get(labels::ROLE).map(String::as_str) == Some("init") {
            Role::Init
        } else {
            Role::Main
        };
        let name = c.labels.get(labels::CONTAINER).cloned().unwrap_or_default();
        let key = (role, name);
        match map.entry(key) {
            std::collections::btree_map::Entry::Occupied(_) => dups.push(c.clone()),
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(c.clone());
            }
        }
    }
    (map, dups)
}

/// The `restartCount` the pod's status shows for `key` (0 before any).
pub fn shown_restarts(pod: &Pod, key: &Key) -> i32 {
    prev_status(pod, key).map_or(0, |p| p.restart_count)
}

fn prev_status<'a>(pod: &'a Pod, key: &Key) -> Option<&'a ContainerStatus> {
    let st = pod.status.as_ref()?;
    let list = match key.0 {
        Role::Init => st.init_container_statuses.as_ref(),
        Role::Main => st.container_statuses.as_ref(),
    }?;
    list.iter().find(|c| c.name == key.1)
}

fn recorded_id(pod: &Pod, key: &Key) -> Option<String> {
    prev_status(pod, key)?
        .container_id
        .as_deref()?
        .strip_prefix(ID_SCHEME)
        .map(str::to_string)
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

fn is_deleting(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// The wait before retrying a create that failed `failures` times (`CreateContainerError`):
/// 10 s doubling to 5 min, the kubelet's container back-off.
pub fn backoff(failures: i32) -> jiff::SignedDuration {
    if failures <= 0 {
        return jiff::SignedDuration::ZERO;
    }
    let secs = 10i64
        .saturating_mul(1i64 << (failures - 1).min(10))
        .min(300);
    jiff::SignedDuration::from_secs(secs)
}

fn exited(c: &ZunContainer) -> bool {
    c.status == zs::STOPPED
}

fn running(c: &ZunContainer) -> bool {
    matches!(c.status.as_str(), zs::RUNNING | zs::RESTARTING | zs::PAUSED)
}

/// When the run of Zun container `uuid` that Zun shows ended was first seen ended: kept in the
/// status (`state.terminated`, or `lastState.terminated` while it waits in `CrashLoopBackOff`),
/// else `now` (this pass sees it first). Zun has no finish time of its own.
pub fn ended_at(pod: &Pod, key: &Key, uuid: &str, now: jiff::Timestamp) -> jiff::Timestamp {
    let id = format!("{ID_SCHEME}{uuid}");
    let Some(p) = prev_status(pod, key) else {
        return now;
    };
    let st = p.state.as_ref();
    let t = st.and_then(|s| s.terminated.as_ref()).or_else(|| {
        st.and_then(|s| s.waiting.as_ref())
            .filter(|w| w.reason.as_deref() == Some(CRASH_LOOP))
            .and(p.last_state.as_ref())
            .and_then(|l| l.terminated.as_ref())
    });
    t.filter(|t| t.container_id.as_deref() == Some(&id))
        .and_then(|t| t.finished_at.as_ref())
        .map_or(now, |f| f.0)
}

/// The waiting reason of a container in its crash back-off.
pub const CRASH_LOOP: &str = "CrashLoopBackOff";

fn should_restart(pod: &Pod, role: Role, code: Option<i32>) -> bool {
    match (role, restart_policy(pod)) {
        (Role::Init, "Never") => false,
        (Role::Init, _) => code != Some(0),
        (Role::Main, "Always") => true,
        (Role::Main, "OnFailure") => code != Some(0),
        _ => false,
    }
}

/// Whether an exited container may be started again now: no start of ours is still pending in
/// Zun, and its back-off is over ([`restarts::backing_off`]).
fn restart_due(
    pod: &Pod,
    key: &Key,
    c: &ZunContainer,
    tracks: &BTreeMap<Key, Track>,
    now: jiff::Timestamp,
) -> bool {
    let track = tracks.get(key);
    if track.is_some_and(|t| t.starting.is_some()) {
        return false;
    }
    restarts::backing_off(track, ended_at(pod, key, &c.uuid, now), now).is_none()
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

/// What to do for one pod this pass; `tracks` are the node's restart memory of its containers
/// ([`restarts::settle`]d against `observed`).
pub fn decide(
    pod: &Pod,
    observed: &[ZunContainer],
    tracks: &BTreeMap<Key, Track>,
    now: jiff::Timestamp,
) -> Vec<Action> {
    let (by_key, dups) = index(observed);
    let mut actions: Vec<Action> = dups
        .iter()
        .map(|d| {
            if running(d) {
                Action::Stop {
                    id: d.uuid.clone(),
                    grace_s: 0,
                }
            } else {
                Action::Delete { id: d.uuid.clone() }
            }
        })
        .collect();
    if is_deleting(pod) {
        for c in by_key.values() {
            if running(c) {
                if c.task_state.is_none() {
                    actions.push(Action::Stop {
                        id: c.uuid.clone(),
                        grace_s: grace_seconds(pod),
                    });
                }
            } else if c.status != zs::CREATING && c.status != zs::DELETING {
                actions.push(Action::Delete { id: c.uuid.clone() });
            }
        }
        return actions;
    }
    if is_terminal(pod) {
        return actions;
    }
    let Some(spec) = pod.spec.as_ref() else {
        return actions;
    };
    let init_names: Vec<String> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| c.name.clone())
        .collect();
    let main_names: Vec<String> = spec.containers.iter().map(|c| c.name.clone()).collect();
    let all_keys = init_names
        .iter()
        .map(|n| (Role::Init, n.clone()))
        .chain(main_names.iter().map(|n| (Role::Main, n.clone())));
    for key in all_keys {
        if let Some(id) = recorded_id(pod, &key)
            && !by_key.contains_key(&key)
        {
            actions.push(Action::Fail(
                PROVIDER_FAILED.into(),
                format!(
                    "Zun container {id} of container {:?} was deleted outside Kubernetes",
                    key.1
                ),
            ));
            return actions;
        }
    }
    for (i, name) in init_names.iter().enumerate() {
        let key = (Role::Init, name.clone());
        let Some(c) = by_key.get(&key) else {
            actions.push(Action::CreateInit(i));
            return actions;
        };
        if c.status == zs::ERROR {
            actions.push(Action::Replace {
                id: c.uuid.clone(),
                key,
            });
            return actions;
        }
        if !exited(c) {
            return actions;
        }
        let code = c.exit_code();
        if code == Some(0) {
            continue;
        }
        if should_restart(pod, Role::Init, code) && restart_due(pod, &key, c, tracks, now) {
            actions.push(Action::Restart {
                id: c.uuid.clone(),
                key,
            });
        }
        return actions;
    }
    let missing: Vec<String> = main_names
        .iter()
        .filter(|n| !by_key.contains_key(&(Role::Main, (*n).clone())))
        .cloned()
        .collect();
    if !missing.is_empty() {
        actions.push(Action::CreateMain(missing));
    }
    for name in &main_names {
        let key = (Role::Main, name.clone());
        if let Some(c) = by_key.get(&key)
            && c.status == zs::ERROR
        {
            actions.push(Action::Replace {
                id: c.uuid.clone(),
                key,
            });
        } else if let Some(c) = by_key.get(&key)
            && exited(c)
            && should_restart(pod, Role::Main, c.exit_code())
            && restart_due(pod, &key, c, tracks, now)
        {
            actions.push(Action::Restart {
                id: c.uuid.clone(),
                key,
            });
        }
    }
    actions
}

/// Whether the pod is in a transition that the node looks at between full passes
/// ([`crate::provider`]'s transition pass): a container being created, started (also a
/// restart Zun has not shown yet), stopped or deleted (Zun's state or a `task_state`), the
/// pod being deleted with containers left, or a restart falling due within `horizon` (the
/// next full pass would be late for it). A pod merely running, or waiting in a long back-off,
/// is not: its cost stays the full pass's one list.
pub fn in_transition(
    pod: &Pod,
    observed: &[ZunContainer],
    tracks: &BTreeMap<Key, Track>,
    now: jiff::Timestamp,
    horizon: jiff::SignedDuration,
) -> bool {
    if is_deleting(pod) {
        return !observed.is_empty();
    }
    if is_terminal(pod) {
        return false;
    }
    if tracks.values().any(|t| t.starting.is_some()) {
        return true;
    }
    let busy = |c: &ZunContainer| {
        c.task_state.is_some()
            || matches!(
                c.status.as_str(),
                zs::CREATING | zs::CREATED | zs::RESTARTING | zs::DELETING
            )
    };
    if observed.iter().any(busy) {
        return true;
    }
    let (by_key, _) = index(observed);
    by_key.iter().any(|(key, c)| {
        exited(c)
            && should_restart(pod, key.0, c.exit_code())
            && match restarts::backing_off(tracks.get(key), ended_at(pod, key, &c.uuid, now), now) {
                Some((until, _)) => until <= now + horizon,
                None => true,
            }
    })
}

/// What happened this pass, for rendering.
#[derive(Clone, Debug, Default)]
pub struct Pass {
    /// Containers started again this pass.
    pub restarted: BTreeSet<Key>,
    /// Containers that could not be created: `(reason, message)`.
    pub create_errors: BTreeMap<Key, (String, String)>,
    /// The pod failed: `(reason, message)`.
    pub failure: Option<(String, String)>,
    /// The pod's IPs when the node knows them before Zun shows them (the fixed IPs of the
    /// pod's own Neutron port).
    pub pod_ips: Vec<String>,
    /// `(started, ready)` of the regular containers that have probes, by name
    /// ([`crate::prober`]); the others are started and ready when running.
    pub probes: BTreeMap<String, (bool, bool)>,
    /// The node's restart memory of the pod's containers after this pass's restarts.
    pub tracks: BTreeMap<Key, Track>,
}

fn time(t: jiff::Timestamp) -> Time {
    Time(t)
}

/// Zun's `created_at` (`2026-12-01T05:00:00.000000`, UTC, maybe no offset).
pub fn zun_time(s: Option<&str>) -> Option<jiff::Timestamp> {
    let s = s?;
    s.parse::<jiff::Timestamp>().ok().or_else(|| {
        s.parse::<jiff::civil::DateTime>()
            .ok()
            .and_then(|d| d.to_zoned(jiff::tz::TimeZone::UTC).ok())
            .map(|z| z.timestamp())
    })
}

/// Reason for a Zun container that failed before running.
pub(crate) fn error_reason(msg: &str) -> &'static str {
    let m = msg.to_ascii_lowercase();
    if m.contains("image") {
        "ErrImagePull"
    } else {
        "CreateContainerError"
    }
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

fn prev_running_since(prev: Option<&ContainerStatus>, id: &str) -> Option<Time> {
    let p = prev?;
    (p.container_id.as_deref() == Some(&format!("{ID_SCHEME}{id}")))
        .then(|| p.state.as_ref()?.running.as_ref()?.started_at.clone())
        .flatten()
}

fn prev_terminated(prev: Option<&ContainerStatus>) -> Option<ContainerStateTerminated> {
    prev?.state.as_ref()?.terminated.clone()
}

fn terminated_from(
    c: &ZunContainer,
    prev: Option<&ContainerStatus>,
    finished: jiff::Timestamp,
) -> ContainerStateTerminated {
    let code = c.exit_code();
    let crash_looping = prev.and_then(|p| p.state.as_ref()?.waiting.as_ref()?.reason.as_deref())
        == Some(CRASH_LOOP);
    let started = prev_running_since(prev, &c.uuid)
        .or_else(|| prev_terminated(prev).and_then(|t| t.started_at))
        .or_else(|| {
            crash_looping
                .then(|| {
                    prev?
                        .last_state
                        .as_ref()?
                        .terminated
                        .as_ref()?
                        .started_at
                        .clone()
                })
                .flatten()
        })
        .or_else(|| zun_time(c.created_at.as_deref()).map(time));
    // The first-seen finish time ([`ended_at`]), so the status does not change on every pass.
    let finished = time(finished);
    ContainerStateTerminated {
        exit_code: code.unwrap_or(137),
        reason: Some(
            match code {
                Some(0) => "Completed",
                Some(_) => "Error",
                None => "Unknown",
            }
            .into(),
        ),
        message: code
            .is_none()
            .then(|| "Zun reported no exit code".to_string()),
        started_at: started,
        finished_at: Some(finished),
        container_id: Some(format!("{ID_SCHEME}{}", c.uuid)),
        signal: None,
    }
}

fn container_status(
    pod: &Pod,
    key: &Key,
    image: &str,
    c: Option<&ZunContainer>,
    pass: &Pass,
    inits_pending: bool,
    now: jiff::Timestamp,
) -> ContainerStatus {
    let prev = prev_status(pod, key);
    let track = pass.tracks.get(key);
    // The node's own count wins over a pod read that predates its last write (see `Track`).
    let mut restart_count = prev
        .map(|p| p.restart_count)
        .unwrap_or(0)
        .max(track.map_or(0, |t| t.restarts));
    let mut last_state = prev.and_then(|p| p.last_state.clone());
    let id = c.map(|c| format!("{ID_SCHEME}{}", c.uuid));
    let state = match c {
        None => match pass.create_errors.get(key) {
            Some((reason, msg)) => waiting(reason, Some(msg.clone())),
            None if recorded_id(pod, key).is_some() => ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 137,
                    reason: Some("ContainerStatusUnknown".into()),
                    message: Some("The container could not be located in Zun".into()),
                    finished_at: Some(time(now)),
                    container_id: prev.and_then(|p| p.container_id.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            None if key.0 == Role::Main && inits_pending => waiting("PodInitializing", None),
            None => waiting("ContainerCreating", None),
        },
        Some(c) if pass.restarted.contains(key) => {
            restart_count = prev
                .map(|p| p.restart_count)
                .unwrap_or(0)
                .saturating_add(1)
                .max(track.map_or(0, |t| t.restarts));
            last_state = Some(ContainerState {
                terminated: Some(terminated_from(c, prev, ended_at(pod, key, &c.uuid, now))),
                ..Default::default()
            });
            ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(time(now)),
                }),
                ..Default::default()
            }
        }
        Some(c) if running(c) => ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(prev_running_since(prev, &c.uuid).unwrap_or_else(|| time(now))),
            }),
            ..Default::default()
        },
        // Started by us, not yet shown so by Zun: running since the start was sent, as the
        // kubelet shows a container its `StartContainer` started.
        Some(c) if exited(c) && track.and_then(|t| t.starting.as_ref()).is_some() => {
            let since = track
                .and_then(|t| t.starting.as_ref())
                .map(|s| time(s.since));
            ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: prev_running_since(prev, &c.uuid).or(since),
                }),
                ..Default::default()
            }
        }
        Some(c) if exited(c) => {
            let finished = ended_at(pod, key, &c.uuid, now);
            let t = terminated_from(c, prev, finished);
            let waiting_for = restarts::backing_off(track, finished, now);
            match waiting_for {
                Some((_, delay))
                    if !is_terminal(pod)
                        && !is_deleting(pod)
                        && should_restart(pod, key.0, c.exit_code()) =>
                {
                    last_state = Some(ContainerState {
                        terminated: Some(t),
                        ..Default::default()
                    });
                    waiting(
                        CRASH_LOOP,
                        Some(format!(
                            "back-off {}s restarting failed container={} pod={}_{}({})",
                            delay.as_secs(),
                            key.1,
                            pod.metadata.name.as_deref().unwrap_or_default(),
                            pod.metadata.namespace.as_deref().unwrap_or_default(),
                            pod.metadata.uid.as_deref().unwrap_or_default(),
                        )),
                    )
                }
                _ => ContainerState {
                    terminated: Some(t),
                    ..Default::default()
                },
            }
        }
        Some(c) if c.status == zs::ERROR => {
            let msg = c
                .status_reason
                .clone()
                .unwrap_or_else(|| "Zun reported an error".into());
            waiting(error_reason(&msg), Some(msg))
        }
        Some(c) if c.status == zs::UNKNOWN || c.status == zs::DEAD => {
            waiting("ContainerStatusUnknown", c.status_reason.clone())
        }
        Some(c) if c.status == zs::DELETING || c.status == zs::DELETED => {
            match pass.create_errors.get(key) {
                // Being replaced this pass (`Action::Replace`).
                Some((reason, msg)) if !is_deleting(pod) => waiting(reason, Some(msg.clone())),
                _ => prev
                    .and_then(|p| p.state.clone())
                    .unwrap_or_else(|| waiting("ContainerCreating", None)),
            }
        }
        Some(_) => waiting("ContainerCreating", None),
    };
    let is_running = state.running.is_some();
    let (started, ready) = match key.0 {
        Role::Main => pass.probes.get(&key.1).copied().unwrap_or((true, true)),
        Role::Init => (true, false),
    };
    ContainerStatus {
        name: key.1.clone(),
        image: image.to_string(),
        image_id: String::new(),
        container_id: match c {
            // A container in Error is replaced (`Action::Replace`): recorded, its deletion
            // would read as one outside Kubernetes. Any other container going while the pod
            // stays keeps what was recorded, so that a deletion by someone else still shows.
            Some(c) if c.status == zs::ERROR => None,
            Some(c) if c.status == zs::DELETING && !is_deleting(pod) => {
                if pass.create_errors.contains_key(key) {
                    None
                } else {
                    prev.and_then(|p| p.container_id.clone())
                }
            }
            _ => id.or_else(|| prev.and_then(|p| p.container_id.clone())),
        },
        ready: is_running && key.0 == Role::Main && ready,
        started: Some(is_running && started),
        restart_count,
        state: Some(state),
        last_state,
        ..Default::default()
    }
}

/// The pod status after this pass. `observed` is what Zun shows, with this
/// pass's creates added.
pub fn render(
    pod: &Pod,
    observed: &[ZunContainer],
    pass: &Pass,
    host_ip: &str,
    now: jiff::Timestamp,
) -> PodStatus {
    let prev = pod.status.clone().unwrap_or_default();
    if is_terminal(pod) && pass.failure.is_none() {
        return prev;
    }
    let (by_key, _) = index(observed);
    let spec = pod.spec.clone().unwrap_or_default();
    let inits = spec.init_containers.clone().unwrap_or_default();
    let inits_done = inits.iter().all(|c| {
        by_key
            .get(&(Role::Init, c.name.clone()))
            .is_some_and(|z| exited(z) && z.exit_code() == Some(0))
    });
    let init_statuses: Vec<ContainerStatus> = inits
        .iter()
        .map(|c| {
            let key = (Role::Init, c.name.clone());
            container_status(
                pod,
                &key,
                c.image.as_deref().unwrap_or_default(),
                by_key.get(&key),
                pass,
                false,
                now,
            )
        })
        .collect();
    let statuses: Vec<ContainerStatus> = spec
        .containers
        .iter()
        .map(|c| {
            let key = (Role::Main, c.name.clone());
            container_status(
                pod,
                &key,
                c.image.as_deref().unwrap_or_default(),
                by_key.get(&key),
                pass,
                !inits_done,
                now,
            )
        })
        .collect();
    let policy = restart_policy(pod).to_string();
    let init_failed = policy == "Never"
        && init_statuses.iter().any(|s| {
            s.state
                .as_ref()
                .and_then(|st| st.terminated.as_ref())
                .is_some_and(|t| t.exit_code != 0)
        });
    let phase = if pass.failure.is_some() || init_failed {
        "Failed"
    } else if !inits_done {
        "Pending"
    } else {
        phase_of(&statuses, &policy)
    };
    let all_ready = !statuses.is_empty() && statuses.iter().all(|s| s.ready);
    let pod_ready = all_ready && !matches!(phase, "Succeeded" | "Failed");
    let terminal = phase == "Succeeded" || phase == "Failed";
    let not_ready_reason = if terminal {
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
            pod_ready,
            (!pod_ready).then_some(not_ready_reason),
            now,
        ),
        pod_condition(
            pod,
            "Ready",
            pod_ready,
            (!pod_ready).then_some(not_ready_reason),
            now,
        ),
    ];
    let ips: Vec<String> = spec
        .containers
        .iter()
        .filter_map(|c| by_key.get(&(Role::Main, c.name.clone())))
        .flat_map(|z| z.ips())
        .take(1)
        .collect();
    let pod_ips: Vec<String> = if !pass.pod_ips.is_empty() {
        pass.pod_ips.clone()
    } else if !ips.is_empty() {
        ips
    } else {
        prev.pod_ip.clone().into_iter().collect()
    };
    let pod_ip = pod_ips.first().cloned();
    PodStatus {
        phase: Some(phase.into()),
        conditions: Some(conditions),
        host_ip: Some(host_ip.into()),
        host_ips: Some(vec![HostIP { ip: host_ip.into() }]),
        pod_ip: pod_ip.clone(),
        pod_ips: (!pod_ips.is_empty())
            .then(|| pod_ips.into_iter().map(|ip| PodIP { ip }).collect()),
        start_time: prev.start_time.clone().or_else(|| Some(time(now))),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        container_statuses: Some(statuses),
        reason: pass.failure.as_ref().map(|f| f.0.clone()),
        message: pass.failure.as_ref().map(|f| f.1.clone()),
        qos_class: prev.qos_class.clone(),
        ..Default::default()
    }
}

/// The kubelet's `getPhase` for regular containers.
pub fn phase_of(statuses: &[ContainerStatus], policy: &str) -> &'static str {
    let mut waiting = 0;
    let mut running = 0;
    let mut stopped = 0;
    let mut succeeded = 0;
    for s in statuses {
        let st = s.state.clone().unwrap_or_default();
        if st.running.is_some() {
            running += 1;
        } else if let Some(t) = &st.terminated {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if st.waiting.is_some() {
            if s.last_state
                .as_ref()
                .and_then(|l| l.terminated.as_ref())
                .is_some()
            {
                stopped += 1;
            } else {
                waiting += 1;
            }
        } else {
            waiting += 1;
        }
    }
    if waiting > 0 {
        "Pending"
    } else if running > 0 {
        "Running"
    } else if stopped > 0 {
        if policy == "Always" {
            "Running"
        } else if stopped == succeeded {
            "Succeeded"
        } else if policy == "Never" {
            "Failed"
        } else {
            "Running"
        }
    } else {
        "Pending"
    }
}

#[cfg(test)]
mod tests;
