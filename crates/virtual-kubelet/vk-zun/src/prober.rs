//! Runs the probes of a node's running containers and the `preStop` hooks of
//! containers being stopped (the I/O around [`crate::probes`]).
//!
//! One background task per provider wakes every [`TICK`], starts the checks
//! that are due (each through Zun exec, at most `max_checks` at a time over
//! the whole node; a check waits for a slot), and records what they change.
//! The provider tells it, every pass, which containers run
//! ([`Prober::observe`]) and reads back `started`/`ready` and the Events.
//! A liveness (or startup) failure kills the container here, with its
//! `preStop` hook and grace period; the provider's next pass sees it
//! stopped and restarts it per `restartPolicy`, counting the restart.
//! Readiness shows in the pod status on the provider's next pass (within
//! `--poll-interval-seconds`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use openstack::container::{Container, ZunContainer, status as zs};
use tokio::sync::Semaphore;
use tracing::{debug, info, warn};
use vk_runtime::provider::{EventType, PodEvent};

use crate::probes::{self, ContainerProbes, Handler, Kind, Outcome, ProbeSpec, Verdict};
use crate::status::Key;
use crate::translate::Role;

/// How often the driver looks for due checks.
pub const TICK: Duration = Duration::from_millis(250);
/// Checks running at the same time on one node, by default.
pub const DEFAULT_MAX_CHECKS: usize = 16;
/// How long the node waits for Zun's exec beyond the probe's `timeoutSeconds`
/// (Zun's API, RPC and Docker's exec take part of a second each; the check's
/// own timeout runs inside the container for httpGet and tcpSocket).
pub const EXEC_ALLOWANCE: Duration = Duration::from_secs(10);
/// Output of a failed check kept in its Event.
const OUTPUT_CHARS: usize = 200;

struct Run {
    pod_uid: String,
    container: String,
    zun_id: String,
    addr: String,
    probes: ContainerProbes,
    pre_stop: Option<Handler>,
    grace_s: u64,
}

#[derive(Default)]
struct Table {
    /// By (pod uid, container name).
    runs: HashMap<(String, String), Run>,
    /// Events for the provider's next pass of the pod.
    events: HashMap<String, Vec<PodEvent>>,
    /// Zun containers whose stop (hook, then stop) the node has begun.
    terminating: HashSet<String>,
}

struct Shared {
    zun: Arc<dyn Container>,
    table: Mutex<Table>,
    slots: Arc<Semaphore>,
}

impl Shared {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn event(&self, uid: &str, type_: EventType, reason: &str, message: String) {
        self.table()
            .events
            .entry(uid.to_string())
            .or_default()
            .push(PodEvent {
                type_,
                reason: reason.into(),
                message,
            });
    }
}

/// The probes and stop hooks of one node's containers.
pub struct Prober {
    shared: Arc<Shared>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Prober {
    fn drop(&mut self) {
        if let Some(t) = self.task.lock().unwrap_or_else(|p| p.into_inner()).take() {
            t.abort();
        }
    }
}

/// `started` and `ready` of a pod's containers that have probes, by name.
pub type Views = BTreeMap<String, (bool, bool)>;

/// The grace period of a pod, seconds (`terminationGracePeriodSeconds`, default 30).
fn pod_grace(pod: &Pod) -> u64 {
    pod.spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(30)
        .max(0) as u64
}

/// A container's address for checks that name no host.
fn addr_of(z: &ZunContainer) -> String {
    z.ips()
        .into_iter()
        .next()
        .unwrap_or_else(|| "127.0.0.1".into())
}

/// The container's `preStop` hook from the pod's spec.
pub fn pre_stop_of(pod: &Pod, container: &str) -> Option<Handler> {
    let c = pod
        .spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == container)?;
    probes::pre_stop(c).ok().flatten()
}

fn trim(s: &str) -> String {
    let s = s.trim();
    match s.char_indices().nth(OUTPUT_CHARS) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// Runs `h` in container `zun_id` (address `addr`) within `timeout_s`.
async fn run_check(
    zun: &dyn Container,
    zun_id: &str,
    addr: &str,
    h: &Handler,
    timeout_s: i64,
) -> Outcome {
    let Some(cmd) = probes::command(h, addr, timeout_s) else {
        if let Handler::Sleep(s) = h {
            tokio::time::sleep(Duration::from_secs((*s).min(timeout_s.max(0) as u64))).await;
        }
        return Outcome::Success;
    };
    let wait = Duration::from_secs(timeout_s.max(1) as u64) + EXEC_ALLOWANCE;
    match tokio::time::timeout(wait, zun.exec(zun_id, &cmd)).await {
        // httpGet and tcpSocket checks end inside the container within timeoutSeconds, so a
        // wait past the allowance is Zun's delay, not the container's; an exec command has no
        // bound of its own, and like the kubelet's a timed-out one fails.
        Err(_) if matches!(h, Handler::Exec(_)) => {
            Outcome::Failure(format!("timed out after {}s", wait.as_secs()))
        }
        Err(_) => Outcome::Errored(format!(
            "Zun's exec did not answer within {}s",
            wait.as_secs()
        )),
        Ok(Err(e)) => Outcome::Errored(format!("Zun exec: {}", trim(e.message()))),
        Ok(Ok(out)) if out.exit_code == Some(0) => Outcome::Success,
        Ok(Ok(out)) => Outcome::Failure(match out.exit_code {
            Some(c) => format!("exit code {c}: {}", trim(&out.output)),
            None => format!("no exit code: {}", trim(&out.output)),
        }),
    }
}

impl Prober {
    /// The prober of a node on `zun`, running at most `max_checks` checks at a time.
    pub fn new(zun: Arc<dyn Container>, max_checks: usize) -> Self {
        Self {
            shared: Arc::new(Shared {
                zun,
                table: Mutex::new(Table::default()),
                slots: Arc::new(Semaphore::new(max_checks.max(1))),
            }),
            task: Mutex::new(None),
        }
    }

    /// Starts the background task (once; needs a Tokio runtime).
    fn ensure_running(&self) {
        let mut t = self.task.lock().unwrap_or_else(|p| p.into_inner());
        if t.is_none() {
            t.replace(tokio::spawn(drive(Arc::downgrade(&self.shared))));
        }
    }

    /// Brings the runs in line with what Zun shows for `pod` this pass
    /// (`restarted`: containers the node started again that Zun does not show running yet,
    /// unprobed until it does, then a new run each) and
    /// answers `started`/`ready` of its containers that have probes.
    pub fn observe(
        &self,
        pod: &Pod,
        observed: &[ZunContainer],
        restarted: &BTreeSet<Key>,
        now: jiff::Timestamp,
    ) -> Views {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let mut views = Views::new();
        let Some(spec) = pod.spec.as_ref() else {
            return views;
        };
        let deleting = pod.metadata.deletion_timestamp.is_some();
        let mut t = self.shared.table();
        for c in &spec.containers {
            // The pod was validated: a refused probe never gets here.
            let specs: Vec<ProbeSpec> = probes::probes_of(c).unwrap_or_default();
            let key = (uid.clone(), c.name.clone());
            let z = observed.iter().find(|z| {
                z.labels.get(crate::labels::CONTAINER) == Some(&c.name)
                    && z.labels.get(crate::labels::ROLE).map(String::as_str) != Some("init")
            });
            let Some(z) = z else {
                t.runs.remove(&key);
                continue;
            };
            // Started by the node (this pass, or a start Zun has not shown yet): not probed
            // until Zun shows it running (a check in a container still stopped would fail and
            // kill it), no longer being terminated, and started/ready as a new run is.
            if restarted.contains(&(Role::Main, c.name.clone())) {
                t.runs.remove(&key);
                t.terminating.remove(&z.uuid);
                if !specs.is_empty() && !deleting {
                    let fresh = ContainerProbes::new(&specs, now);
                    views.insert(c.name.clone(), (fresh.started(), fresh.ready()));
                }
                continue;
            }
            let running = z.status == zs::RUNNING;
            if !running {
                t.runs.remove(&key);
                // Stopped: a later stop (the pod's deletion after a restart) runs its hook again.
                t.terminating.remove(&z.uuid);
                continue;
            }
            if specs.is_empty() || deleting {
                t.runs.remove(&key);
                continue;
            }
            if !t.runs.contains_key(&key) {
                t.runs.insert(
                    key.clone(),
                    Run {
                        pod_uid: uid.clone(),
                        container: c.name.clone(),
                        zun_id: z.uuid.clone(),
                        addr: addr_of(z),
                        probes: ContainerProbes::new(&specs, now),
                        pre_stop: probes::pre_stop(c).ok().flatten(),
                        grace_s: pod_grace(pod),
                    },
                );
            }
            if let Some(r) = t.runs.get(&key) {
                views.insert(c.name.clone(), (r.probes.started(), r.probes.ready()));
            }
        }
        let any = !t.runs.is_empty();
        drop(t);
        if any {
            self.ensure_running();
        }
        views
    }

    /// The Events the probes recorded for pod `uid` since the last call.
    pub fn take_events(&self, uid: &str) -> Vec<PodEvent> {
        self.shared.table().events.remove(uid).unwrap_or_default()
    }

    /// Whether the node is stopping this Zun container already (its hook may still run).
    pub fn is_terminating(&self, zun_id: &str) -> bool {
        self.shared.table().terminating.contains(zun_id)
    }

    /// Stops a container in the background: its `preStop` hook first (within
    /// the grace period), then Zun's stop with what is left of it (at least 2 s).
    pub fn terminate(
        &self,
        pod_uid: &str,
        z: &ZunContainer,
        container: &str,
        pre_stop: Option<Handler>,
        grace_s: u64,
    ) {
        terminate(
            &self.shared,
            pod_uid,
            &z.uuid,
            &addr_of(z),
            container,
            pre_stop,
            grace_s,
        );
    }

    /// Forgets the pods not in `live`.
    pub fn retain_pods(&self, live: &BTreeSet<String>) {
        let mut t = self.shared.table();
        t.runs.retain(|(uid, _), _| live.contains(uid));
        t.events.retain(|uid, _| live.contains(uid));
    }
}

fn terminate(
    shared: &Arc<Shared>,
    pod_uid: &str,
    zun_id: &str,
    addr: &str,
    container: &str,
    pre_stop: Option<Handler>,
    grace_s: u64,
) {
    if !shared.table().terminating.insert(zun_id.to_string()) {
        return;
    }
    let (shared, uid, id, addr, name) = (
        shared.clone(),
        pod_uid.to_string(),
        zun_id.to_string(),
        addr.to_string(),
        container.to_string(),
    );
    tokio::spawn(async move {
        let begun = std::time::Instant::now();
        if let Some(h) = &pre_stop {
            // The hook has the whole grace period; the kubelet, too, does not cut it shorter.
            let grace = i64::try_from(grace_s).unwrap_or(i64::MAX);
            let out = match h {
                Handler::Sleep(_) => run_check(shared.zun.as_ref(), &id, &addr, h, grace).await,
                _ => {
                    let wait = Duration::from_secs(grace_s.max(1));
                    match tokio::time::timeout(
                        wait,
                        run_check(shared.zun.as_ref(), &id, &addr, h, grace),
                    )
                    .await
                    {
                        Ok(o) => o,
                        Err(_) => Outcome::Failure(format!(
                            "did not finish within the grace period ({grace_s}s)"
                        )),
                    }
                }
            };
            match out {
                Outcome::Success => info!(zun = %id, container = %name, "preStop hook ran"),
                Outcome::Failure(m) | Outcome::Errored(m) => {
                    warn!(zun = %id, container = %name, error = %m, "preStop hook failed");
                    shared.event(
                        &uid,
                        EventType::Warning,
                        "FailedPreStopHook",
                        format!("PreStopHook failed for container {name}: {m}"),
                    );
                }
            }
        }
        let left = probes::remaining_grace(grace_s, begun.elapsed().as_secs());
        match shared.zun.stop_container(&id, left).await {
            Ok(()) => info!(zun = %id, container = %name, grace_s = left, "stopping container"),
            Err(e) if e.is_not_found() || e.is_conflict() => {
                debug!(zun = %id, error = %e, "stop not needed")
            }
            Err(e) => {
                warn!(zun = %id, error = %e, "stop failed; retrying next pass");
                // The next pass asks again (and runs the hook again).
                shared.table().terminating.remove(&id);
            }
        }
    });
}

/// The background loop: start due checks, until the prober is dropped.
async fn drive(shared: Weak<Shared>) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(s) = shared.upgrade() else { return };
        let now = jiff::Timestamp::now();
        let due: Vec<(String, String, String, String, ProbeSpec)> = {
            let mut t = s.table();
            t.runs
                .values_mut()
                .flat_map(|r| {
                    let (uid, name, id, addr) = (
                        r.pod_uid.clone(),
                        r.container.clone(),
                        r.zun_id.clone(),
                        r.addr.clone(),
                    );
                    r.probes
                        .start_due(now)
                        .into_iter()
                        .map(move |p| (uid.clone(), name.clone(), id.clone(), addr.clone(), p))
                })
                .collect()
        };
        for (uid, name, id, addr, spec) in due {
            let s = s.clone();
            tokio::spawn(async move {
                // A slot bounds the Zun execs of the whole node; a check waits for one.
                let Ok(_slot) = s.slots.clone().acquire_owned().await else {
                    return;
                };
                let out =
                    run_check(s.zun.as_ref(), &id, &addr, &spec.handler, spec.timeout_s).await;
                finished(&s, &uid, &name, &id, spec.kind, out);
            });
        }
    }
}

fn finished(s: &Arc<Shared>, uid: &str, name: &str, zun_id: &str, kind: Kind, out: Outcome) {
    let mut t = s.table();
    let key = (uid.to_string(), name.to_string());
    let Some(r) = t.runs.get_mut(&key).filter(|r| r.zun_id == zun_id) else {
        return;
    };
    let verdict = r.probes.finish(kind, &out);
    let kill = match &verdict {
        Verdict::Kill { grace_s, .. } => Some((
            r.addr.clone(),
            r.pre_stop.clone(),
            grace_s.map(|g| g.max(0) as u64).unwrap_or(r.grace_s),
        )),
        _ => None,
    };
    let mut events = Vec::new();
    let unhealthy = match &out {
        Outcome::Failure(m) => {
            debug!(pod_uid = %uid, container = %name, probe = kind.title(), error = %m, "probe failed");
            Some(format!("{} probe failed: {m}", kind.title()))
        }
        Outcome::Errored(m) => {
            warn!(pod_uid = %uid, container = %name, probe = kind.title(), error = %m, "probe errored; its result is not counted");
            Some(format!("{} probe errored: {m}", kind.title()))
        }
        Outcome::Success => None,
    };
    if let Some(message) = unhealthy {
        events.push(PodEvent {
            type_: EventType::Warning,
            reason: "Unhealthy".into(),
            message,
        });
    }
    match verdict {
        Verdict::Ready(r) => {
            info!(pod_uid = %uid, container = %name, ready = r, "readiness changed")
        }
        Verdict::Started => info!(pod_uid = %uid, container = %name, "startup probe succeeded"),
        Verdict::Kill { kind, .. } => events.push(PodEvent {
            type_: EventType::Normal,
            reason: "Killing".into(),
            message: format!(
                "Container {name} failed {} probe, will be restarted",
                kind.title().to_ascii_lowercase()
            ),
        }),
        Verdict::None => {}
    }
    t.events.entry(uid.to_string()).or_default().extend(events);
    drop(t);
    if let Some((addr, hook, grace)) = kill {
        info!(pod_uid = %uid, container = %name, zun = %zun_id, "probe failed its threshold; killing the container");
        terminate(s, uid, zun_id, &addr, name, hook, grace);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openstack::fake::FakeZun;

    fn tcp() -> Handler {
        Handler::Tcp {
            host: None,
            port: 8080,
        }
    }

    #[tokio::test]
    async fn a_check_zun_cannot_run_is_errored_not_failed() {
        let z = FakeZun::new();
        z.fail_next("exec", openstack::Error::transient("zun-api: 503"));
        let out = run_check(&z, "any", "10.0.0.1", &tcp(), 1).await;
        assert!(
            matches!(out, Outcome::Errored(ref m) if m.contains("503")),
            "{out:?}"
        );
        // A container Zun does not know: its exec is refused, the check not run.
        let exec = Handler::Exec(vec!["true".into()]);
        let out = run_check(&z, "gone", "10.0.0.1", &exec, 1).await;
        assert!(matches!(out, Outcome::Errored(_)), "{out:?}");
    }
}
