//! The controller manager's part a one-node test cluster needs, for an API server that runs no
//! controllers (the emulator): Deployments and Jobs get their pods, bound to the test node
//! (the scheduler's one possible choice), and the status a real controller writes.
//!
//! What the real controllers do that this does not: no ReplicaSets (pods are owned by their
//! Deployment directly, labelled `pod-template-hash` as a ReplicaSet's would be), no
//! `minReadySeconds`, no `paused`, no revision history; Jobs run one pod at a time
//! (`completions`/`parallelism` 1, no indexed Jobs, no `activeDeadlineSeconds`, no
//! `podFailurePolicy`, no TTL); node selectors, affinity and spread constraints are not
//! weighed, since there is one node to bind to. The pure planning ([`plan_deployment`],
//! [`plan_job`]) is separate from the loop that applies it ([`run`]).

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus};
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// The label naming a pod's template (a ReplicaSet's, in a real cluster).
pub const TEMPLATE_HASH_LABEL: &str = "pod-template-hash";
/// The Deployment default of `progressDeadlineSeconds`.
const PROGRESS_DEADLINE_S: i32 = 600;
/// The Job default of `backoffLimit`.
const BACKOFF_LIMIT: i32 = 6;

/// A short, stable hash of a pod template (the ReplicaSet's name suffix).
pub fn template_hash(t: &PodTemplateSpec) -> String {
    let bytes = serde_json::to_vec(t).unwrap_or_default();
    let d = Sha256::digest(&bytes);
    d.iter()
        .take(5)
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
}

/// A pod name suffix of five characters from `seed` (as the API server's `generateName`).
pub fn suffix(seed: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    Sha256::digest(seed.as_bytes())
        .iter()
        .take(5)
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect()
}

fn ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

fn owned_by<'a>(pods: &'a [Pod], uid: &str) -> Vec<&'a Pod> {
    pods.iter()
        .filter(|p| {
            p.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == uid && o.controller == Some(true))
        })
        .collect()
}

/// A pod of `template`, owned by `owner`, bound to `node`.
pub fn pod_from_template(
    template: &PodTemplateSpec,
    name: &str,
    namespace: &str,
    node: &str,
    owner: OwnerReference,
    labels: BTreeMap<String, String>,
) -> Pod {
    let meta = template.metadata.clone().unwrap_or_default();
    let mut all = meta.labels.unwrap_or_default();
    all.extend(labels);
    let mut spec = template.spec.clone().unwrap_or_default();
    spec.node_name = Some(node.to_string());
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            labels: Some(all),
            annotations: meta.annotations,
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

fn owner_ref(api_version: &str, kind: &str, meta: &ObjectMeta) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// `maxSurge`/`maxUnavailable` of `replicas` (a percentage rounds up for surge, down for
/// unavailable, as the Deployment controller does).
fn scaled(v: Option<&IntOrString>, replicas: i32, default_pct: i32, round_up: bool) -> i32 {
    match v {
        Some(IntOrString::Int(n)) => *n,
        Some(IntOrString::String(s)) => {
            let pct: i32 = s.trim_end_matches('%').parse().unwrap_or(default_pct);
            let x = replicas * pct;
            if round_up { (x + 99) / 100 } else { x / 100 }
        }
        None => {
            let x = replicas * default_pct;
            if round_up { (x + 99) / 100 } else { x / 100 }
        }
    }
}

/// What to do for one Deployment.
#[derive(Debug, Default, PartialEq)]
pub struct DeploymentPlan {
    /// Pods of the current template to create.
    pub create: usize,
    /// Pods to delete (old template, excess, finished).
    pub delete: Vec<String>,
    /// The status to write (`None`: unchanged).
    pub status: Option<DeploymentStatus>,
}

fn cond(
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    now: Timestamp,
) -> DeploymentCondition {
    DeploymentCondition {
        type_: Some(type_.into()),
        status: Some(if status { "True" } else { "False" }.into()),
        reason: Some(reason.into()),
        message: Some(message),
        last_update_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// Keeps the times of a condition whose status and reason did not change (the transition
/// time always, the update time unless `touched`).
fn keep_times(
    old: &[DeploymentCondition],
    mut c: DeploymentCondition,
    touched: bool,
) -> DeploymentCondition {
    if let Some(o) = old.iter().find(|o| o.type_ == c.type_) {
        if o.status == c.status {
            c.last_transition_time = o.last_transition_time.clone();
        }
        if o.status == c.status && o.reason == c.reason && !touched {
            c.last_update_time = o.last_update_time.clone();
        }
    }
    c
}

/// The Deployment controller's step for `dep` given all pods of its namespace: a rolling
/// update within `maxSurge`/`maxUnavailable` (`Recreate`: old pods first), failed pods
/// replaced, the status of its pods.
pub fn plan_deployment(dep: &Deployment, pods: &[Pod], now: Timestamp) -> DeploymentPlan {
    let uid = dep.metadata.uid.clone().unwrap_or_default();
    let spec = &dep.spec;
    let replicas = spec.replicas.unwrap_or(1).max(0);
    let hash = template_hash(&spec.template);
    let owned = owned_by(pods, &uid);
    let mut delete = Vec::new();
    let mut live = Vec::new();
    for p in owned {
        if p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if matches!(phase(p), "Failed" | "Succeeded") {
            delete.push(p.metadata.name.clone().unwrap_or_default());
        } else {
            live.push(p);
        }
    }
    let is_new = |p: &&Pod| {
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(TEMPLATE_HASH_LABEL))
            == Some(&hash)
    };
    let (mut new, old): (Vec<&Pod>, Vec<&Pod>) = live.iter().copied().partition(is_new);
    // Not Ready first, so that scaling down keeps the Ready ones.
    new.sort_by_key(|p| ready(p));
    let recreate = spec.strategy.as_ref().and_then(|s| s.type_.as_deref()) == Some("Recreate");
    let ru = spec
        .strategy
        .as_ref()
        .and_then(|s| s.rolling_update.as_ref());
    let mut surge = scaled(ru.and_then(|r| r.max_surge.as_ref()), replicas, 25, true);
    let unavailable = scaled(
        ru.and_then(|r| r.max_unavailable.as_ref()),
        replicas,
        25,
        false,
    );
    if surge == 0 && unavailable == 0 {
        surge = 1;
    }
    let ready_total = live.iter().filter(|p| ready(p)).count() as i32;
    let mut create = 0;
    let n_new = new.len() as i32;
    if n_new > replicas {
        for p in new.iter().take((n_new - replicas) as usize) {
            delete.push(p.metadata.name.clone().unwrap_or_default());
        }
    }
    if recreate {
        for p in &old {
            delete.push(p.metadata.name.clone().unwrap_or_default());
        }
        if old.is_empty() && n_new < replicas {
            create = (replicas - n_new) as usize;
        }
    } else {
        let room = replicas + surge - live.len() as i32;
        if n_new < replicas && room > 0 {
            create = (replicas - n_new).min(room) as usize;
        }
        // Old pods that are not Ready go at once; Ready ones while enough stay available.
        let mut may_remove = ready_total - (replicas - unavailable);
        for p in &old {
            if !ready(p) {
                delete.push(p.metadata.name.clone().unwrap_or_default());
            } else if may_remove > 0 {
                may_remove -= 1;
                delete.push(p.metadata.name.clone().unwrap_or_default());
            }
        }
    }
    let updated = n_new.min(replicas);
    let new_ready = new.iter().filter(|p| ready(p)).count() as i32;
    let complete = updated == replicas && new_ready >= replicas && old.is_empty();
    let old_status = dep.status.clone().unwrap_or_default();
    let old_conds = old_status.conditions.clone().unwrap_or_default();
    let name = dep.metadata.name.clone().unwrap_or_default();
    let changed_counts = old_status.updated_replicas.unwrap_or(0) != updated
        || old_status.ready_replicas.unwrap_or(0) != ready_total
        || old_status.replicas.unwrap_or(0) != live.len() as i32;
    let available = ready_total >= replicas - unavailable;
    let available_c = keep_times(
        &old_conds,
        if available {
            cond(
                "Available",
                true,
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.".into(),
                now,
            )
        } else {
            cond(
                "Available",
                false,
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.".into(),
                now,
            )
        },
        false,
    );
    let deadline = spec
        .progress_deadline_seconds
        .unwrap_or(PROGRESS_DEADLINE_S);
    let last_progress = old_conds
        .iter()
        .find(|c| c.type_.as_deref() == Some("Progressing") && c.status.as_deref() == Some("True"))
        .and_then(|c| c.last_update_time.as_ref())
        .map(|t| t.0);
    let stalled = !complete
        && !changed_counts
        && last_progress.is_some_and(|t| now.duration_since(t).as_secs() > i64::from(deadline));
    let was_stalled = old_conds.iter().any(|c| {
        c.type_.as_deref() == Some("Progressing")
            && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
    });
    let progressing = if complete {
        cond(
            "Progressing",
            true,
            "NewReplicaSetAvailable",
            format!("ReplicaSet \"{name}-{hash}\" has successfully progressed."),
            now,
        )
    } else if stalled || (was_stalled && !changed_counts) {
        cond(
            "Progressing",
            false,
            "ProgressDeadlineExceeded",
            format!("ReplicaSet \"{name}-{hash}\" has timed out progressing."),
            now,
        )
    } else {
        cond(
            "Progressing",
            true,
            "ReplicaSetUpdated",
            format!("ReplicaSet \"{name}-{hash}\" is progressing."),
            now,
        )
    };
    let progressing = keep_times(&old_conds, progressing, changed_counts);
    let status = DeploymentStatus {
        observed_generation: dep.metadata.generation,
        replicas: Some(live.len() as i32),
        updated_replicas: Some(updated),
        ready_replicas: Some(ready_total),
        available_replicas: Some(ready_total),
        unavailable_replicas: Some((replicas - ready_total).max(0)),
        conditions: Some(vec![available_c, progressing]),
        ..DeploymentStatus::default()
    };
    DeploymentPlan {
        create,
        delete,
        status: (dep.status.as_ref() != Some(&status)).then_some(status),
    }
}

/// What to do for one Job.
#[derive(Debug, Default, PartialEq)]
pub struct JobPlan {
    /// Create the next pod.
    pub create: bool,
    /// Pods to delete (active pods of a Job that failed).
    pub delete: Vec<String>,
    /// The status to write (`None`: unchanged).
    pub status: Option<JobStatus>,
    /// When the next pod may start, if it must wait out the back-off.
    pub wait: Option<Duration>,
}

fn finished_at(p: &Pod) -> Option<Timestamp> {
    p.status
        .as_ref()?
        .container_statuses
        .iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
        .map(|t| t.0)
        .max()
}

fn job_cond(type_: &str, reason: &str, message: &str, now: Timestamp) -> JobCondition {
    JobCondition {
        type_: type_.into(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// The Job controller's step for `job` given all pods of its namespace: one pod at a time,
/// the next after a failure once the back-off (10 s doubling, at most 6 min) has passed;
/// `Complete` at the first success, `Failed` (`BackoffLimitExceeded`) after `backoffLimit`
/// retries.
pub fn plan_job(job: &Job, pods: &[Pod], now: Timestamp) -> JobPlan {
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let old = job.status.clone().unwrap_or_default();
    let finished = old
        .conditions
        .iter()
        .flatten()
        .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True");
    let owned = owned_by(pods, &uid);
    let succeeded = owned.iter().filter(|p| phase(p) == "Succeeded").count() as i32;
    let failed_pods: Vec<&&Pod> = owned.iter().filter(|p| phase(p) == "Failed").collect();
    let failed = failed_pods.len() as i32;
    let active: Vec<&&Pod> = owned
        .iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none() && !matches!(phase(p), "Succeeded" | "Failed")
        })
        .collect();
    let mut plan = JobPlan::default();
    let mut status = JobStatus {
        start_time: old.start_time.clone().or(Some(Time(now))),
        active: Some(active.len() as i32),
        succeeded: Some(succeeded),
        failed: Some(failed),
        ready: Some(active.iter().filter(|p| ready(p)).count() as i32),
        conditions: old.conditions.clone(),
        completion_time: old.completion_time.clone(),
        ..JobStatus::default()
    };
    if finished {
        plan.delete = active
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
    } else if succeeded > 0 {
        status.conditions = Some(vec![job_cond("Complete", "Completed", "", now)]);
        status.completion_time = Some(Time(now));
        status.active = Some(0);
    } else if failed
        > job
            .spec
            .as_ref()
            .and_then(|s| s.backoff_limit)
            .unwrap_or(BACKOFF_LIMIT)
    {
        status.conditions = Some(vec![job_cond(
            "Failed",
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
            now,
        )]);
        status.active = Some(0);
        plan.delete = active
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
    } else if active.is_empty() {
        let last = failed_pods.iter().filter_map(|p| finished_at(p)).max();
        let delay = if failed == 0 {
            0
        } else {
            (10u64 << (failed - 1).min(6)).min(360)
        };
        let since = last.map_or(u64::MAX, |t| {
            u64::try_from(now.duration_since(t).as_secs()).unwrap_or(0)
        });
        if since >= delay {
            plan.create = true;
            status.active = Some(1);
        } else {
            plan.wait = Some(Duration::from_secs(delay - since));
        }
    }
    // The status a real controller writes carries no condition while the Job runs.
    let unchanged = job.status.as_ref().is_some_and(|s| {
        s.active == status.active
            && s.succeeded == status.succeeded
            && s.failed == status.failed
            && s.ready == status.ready
            && s.conditions == status.conditions
            && s.start_time.is_some()
    });
    plan.status = (!unchanged).then_some(status);
    plan
}

/// Runs the Deployment and Job controllers for pods bound to `node` until `stop`, every
/// `period`.
pub async fn run(client: kube::Client, node: String, period: Duration, stop: CancellationToken) {
    info!(%node, "workload controllers (Deployments, Jobs) starting");
    loop {
        if let Err(e) = step(&client, &node).await {
            debug!(error = %e, "workload controllers: a step failed; next one soon");
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(period) => {}
        }
    }
}

async fn step(client: &kube::Client, node: &str) -> Result<(), kube::Error> {
    let now = Timestamp::now();
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let by_ns = |ns: &str| -> Vec<Pod> {
        pods.iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(ns))
            .cloned()
            .collect()
    };
    let pp = PatchParams::default();
    for dep in Api::<Deployment>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
    {
        if dep.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let ns = dep.metadata.namespace.clone().unwrap_or_default();
        let name = dep.metadata.name.clone().unwrap_or_default();
        let plan = plan_deployment(&dep, &by_ns(&ns), now);
        let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        {
            let spec = &dep.spec;
            let hash = template_hash(&spec.template);
            for i in 0..plan.create {
                let pod_name =
                    format!("{name}-{hash}-{}", suffix(&format!("{name}{hash}{now}{i}")));
                let pod = pod_from_template(
                    &spec.template,
                    &pod_name,
                    &ns,
                    node,
                    owner_ref("apps/v1", "Deployment", &dep.metadata),
                    BTreeMap::from([(TEMPLATE_HASH_LABEL.to_string(), hash.clone())]),
                );
                if let Err(e) = pods_api.create(&PostParams::default(), &pod).await {
                    warn!(deployment = %name, pod = %pod_name, error = %e, "creating a pod failed");
                }
            }
        }
        for p in &plan.delete {
            let _ = pods_api.delete(p, &DeleteParams::default()).await;
        }
        if let Some(st) = plan.status {
            let _ = Api::<Deployment>::namespaced(client.clone(), &ns)
                .patch_status(
                    &name,
                    &pp,
                    &Patch::Merge(serde_json::json!({ "status": st })),
                )
                .await;
        }
    }
    for job in Api::<Job>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
    {
        if job.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let ns = job.metadata.namespace.clone().unwrap_or_default();
        let name = job.metadata.name.clone().unwrap_or_default();
        let plan = plan_job(&job, &by_ns(&ns), now);
        let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        if plan.create
            && let Some(spec) = job.spec.as_ref()
        {
            let uid = job.metadata.uid.clone().unwrap_or_default();
            let pod_name = format!("{name}-{}", suffix(&format!("{uid}{now}")));
            let labels = BTreeMap::from([
                (
                    "batch.kubernetes.io/controller-uid".to_string(),
                    uid.clone(),
                ),
                ("batch.kubernetes.io/job-name".to_string(), name.clone()),
                ("controller-uid".to_string(), uid.clone()),
                ("job-name".to_string(), name.clone()),
            ]);
            let pod = pod_from_template(
                &spec.template,
                &pod_name,
                &ns,
                node,
                owner_ref("batch/v1", "Job", &job.metadata),
                labels,
            );
            if let Err(e) = pods_api.create(&PostParams::default(), &pod).await {
                warn!(job = %name, pod = %pod_name, error = %e, "creating a pod failed");
            }
        }
        for p in &plan.delete {
            let _ = pods_api.delete(p, &DeleteParams::default()).await;
        }
        if let Some(st) = plan.status {
            let _ = Api::<Job>::namespaced(client.clone(), &ns)
                .patch_status(
                    &name,
                    &pp,
                    &Patch::Merge(serde_json::json!({ "status": st })),
                )
                .await;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
