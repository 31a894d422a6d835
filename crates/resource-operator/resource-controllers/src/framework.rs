//! The reconcile framework every kind plugs into: Controller wiring, finalizer, status by
//! server-side apply, conditions, Events, error classification and metrics.

use std::collections::hash_map::DefaultHasher;
use std::fmt::Debug;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::common::set_condition;
use api::{CommonStatus, Condition, FieldError, Phase};
use async_trait::async_trait;
use futures::{Future, StreamExt};
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, CustomResourceExt, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{Instrument, info, info_span, warn};

use crate::context::Context;
use crate::error::ReconcileError;
use crate::metrics::{OperationLabels, ReconcileLabels, ResourceLabels};
use crate::ownership::Owner;

/// Field manager of our status writes.
pub const FIELD_MANAGER: &str = "openstack-operator";
/// Annotation whose change forces a reconcile (e.g. `kubectl annotate ... reconcile=$(date)`).
pub const RECONCILE_ANNOTATION: &str = "openstack-operator.sunet.se/reconcile";
/// Where client-side `kubectl apply` keeps the last applied object; dropped from the cache.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// How a successful pass ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// OpenStack matches the spec.
    Ready {
        /// Condition reason, e.g. `Created`, `Updated`, `InSync`.
        reason: String,
        /// Detail.
        message: String,
    },
    /// Work is under way (e.g. an image import); look again after `requeue`.
    InProgress {
        /// Condition reason, e.g. `Importing`.
        reason: String,
        /// Detail.
        message: String,
        /// When to look again.
        requeue: Duration,
    },
    /// Not Ready and no retry helps until something changes (e.g. hash mismatch).
    Failed {
        /// Condition reason.
        reason: String,
        /// Detail.
        message: String,
    },
}

impl Progress {
    /// Ready with a reason and message.
    pub fn ready(reason: &str, message: impl Into<String>) -> Self {
        Progress::Ready {
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// A kind managed by the framework.
#[async_trait]
pub trait Managed:
    Resource<DynamicType = ()>
    + CustomResourceExt
    + Clone
    + Serialize
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
    /// The status type.
    type Status: CommonStatus + DeserializeOwned;
    /// The seed's per-kind condition type, e.g. `DomainReady`.
    const READY_CONDITION: &'static str;

    /// Current status.
    fn status(&self) -> Option<&Self::Status>;
    /// The `OpenstackCloud` named by `spec.cloudRef` (None: the operator's own cloud).
    fn cloud_ref(&self) -> Option<&str>;
    /// The API to write this object through (namespaced kinds need its namespace).
    fn api(client: kube::Client, obj: &Self) -> Api<Self>;
    /// Pure validation of the spec (CEL rules evaluated client-side + semantic checks).
    fn validate(&self) -> Vec<FieldError>;
    /// Makes OpenStack match the spec, recording IDs in `status` as soon as they exist.
    async fn apply(
        &self,
        ctx: &Context,
        status: &mut Self::Status,
    ) -> Result<Progress, ReconcileError>;
    /// Removes what the resource owns in OpenStack (or releases it, per deletion policy).
    async fn cleanup(&self, ctx: &Context, status: &mut Self::Status)
    -> Result<(), ReconcileError>;
}

/// The ownership identity of a resource.
pub fn owner_of<K: Resource>(obj: &K, ctx: &Context) -> Owner {
    Owner {
        cluster: ctx.config.cluster_id.clone(),
        uid: obj.meta().uid.clone().unwrap_or_default(),
    }
}

fn key_of<K: Resource<DynamicType = ()>>(obj: &K) -> String {
    format!(
        "{}/{}/{}",
        K::kind(&()),
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    )
}

/// Current time in RFC 3339 (UTC).
pub fn now() -> String {
    jiff::Timestamp::now().to_string()
}

/// Writes `status` by server-side apply when it differs from `before`.
async fn write_status<K: Managed>(
    api: &Api<K>,
    obj: &K,
    before: &K::Status,
    status: &K::Status,
) -> Result<(), kube::Error> {
    if before == status {
        return Ok(());
    }
    apply_status(api, obj, status).await
}

/// Drops from a watched object what no controller reads before the cache keeps it: with
/// server-side apply, managedFields were the largest part of each cached object (heaptrack,
/// `bench --only tenants`), and client-side `kubectl apply` keeps a second copy of the whole
/// object in an annotation. Nothing writes a cached object back whole (status and finalizers
/// are patched), so the API server's copy keeps both.
fn trim_for_cache<K: Resource>(obj: &mut K) {
    obj.managed_fields_mut().clear();
    obj.annotations_mut().remove(LAST_APPLIED);
}

/// Server-side apply of the whole status under our field manager.
async fn apply_status<K: Managed>(
    api: &Api<K>,
    obj: &K,
    status: &K::Status,
) -> Result<(), kube::Error> {
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    api.patch_status(
        &obj.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(patch),
    )
    .await
    .map(|_| ())
}

/// Writes `status` now, in the middle of a pass: for records that must be durable before an
/// OpenStack call is sent (an intent to create), so a crash right after the call leaves them
/// behind. The pass's own status write at the end supersedes it.
pub async fn save_status<K: Managed>(
    ctx: &Context,
    obj: &K,
    status: &K::Status,
) -> Result<(), ReconcileError> {
    Ok(apply_status(&K::api(ctx.client.clone(), obj), obj, status).await?)
}

/// Publishes an Event about `obj`; failures to publish are logged, never fatal.
pub async fn publish<K: Resource<DynamicType = ()>>(
    ctx: &Context,
    obj: &K,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(truncate(&note, 1000)),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = ctx.publish_event(&ev, &obj.object_ref(&())).await {
        warn!(error = %e, reason, "could not publish an Event");
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

fn apply_conditions<S: CommonStatus>(
    status: &mut S,
    kind_cond: &str,
    ok: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) {
    let now = now();
    let mut c = Condition::new(kind_cond, ok, reason, message);
    c.observed_generation = generation;
    set_condition(status.conditions_mut(), c.clone(), &now);
    c.type_ = "Ready".into();
    set_condition(status.conditions_mut(), c, &now);
}

fn phase_str(p: Option<Phase>) -> Option<String> {
    p.map(|p| p.to_string())
}

/// Keeps `lastSyncTime` from forcing a status write on every pass: it moves only with another
/// change or after half a resync period.
fn touch_sync_time<S: CommonStatus>(before: &S, status: &mut S, resync: Duration) {
    let mut probe = status.clone();
    *probe.last_sync_time_mut() = before.clone().last_sync_time_mut().clone();
    let stale = before
        .clone()
        .last_sync_time_mut()
        .as_deref()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .is_none_or(|t| {
            let age = jiff::Timestamp::now().duration_since(t);
            age.as_secs() >= i64::try_from(resync.as_secs() / 2).unwrap_or(i64::MAX)
        });
    if probe != *before || stale {
        *status.last_sync_time_mut() = Some(now());
    } else {
        *status.last_sync_time_mut() = before.clone().last_sync_time_mut().clone();
    }
}

/// How a pass that ended in an error is reported: its Event and the level of its log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureReport {
    /// Warning for a failure, Normal for a wait (the log line follows: WARN or INFO).
    pub event_type: EventType,
    /// The Event's reason.
    pub reason: &'static str,
}

/// Classifies a failed pass: waiting for something the spec refers to (a domain, a project
/// not Ready yet) is no failure, so it is a Normal `WaitingForDependency`; a bad spec is a
/// Warning `InvalidSpec`; anything else a Warning `CreateFailed` on an object never
/// reconciled before (`first_pass`), `UpdateFailed` after.
pub fn failure_report(e: &ReconcileError, first_pass: bool) -> FailureReport {
    let (event_type, reason) = match e {
        ReconcileError::DependencyMissing(_) => (EventType::Normal, "WaitingForDependency"),
        ReconcileError::InvalidSpec(_) => (EventType::Warning, "InvalidSpec"),
        ReconcileError::CloudBlocked(_) => (EventType::Warning, "Blocked"),
        _ if first_pass => (EventType::Warning, "CreateFailed"),
        _ => (EventType::Warning, "UpdateFailed"),
    };
    FailureReport { event_type, reason }
}

async fn apply_one<K: Managed>(
    obj: Arc<K>,
    ctx: &Context,
    api: &Api<K>,
) -> Result<Action, ReconcileError> {
    let before = obj.status().cloned().unwrap_or_default();
    let mut status = before.clone();
    let generation = obj.meta().generation;
    let key = key_of(&*obj);
    let errors = obj.validate();
    // The OpenstackCloud the pass ran in, named in its conditions.
    let mut pass_cloud = None;
    let result = if errors.is_empty() {
        match ctx
            .for_object(obj.cloud_ref(), obj.namespace().as_deref())
            .await
        {
            Ok(cctx) => {
                let r = obj.apply(&cctx, &mut status).await;
                forget_refused_cloud(&cctx, &r);
                pass_cloud = cctx.cloud_name.clone();
                r
            }
            Err(e) => Err(e.into()),
        }
    } else {
        Err(ReconcileError::InvalidSpec(errors))
    };
    let action = match &result {
        Ok(progress) => {
            ctx.note_success(&key);
            let (phase, ok, reason, message, requeue) = match progress {
                Progress::Ready { reason, message } => {
                    (Phase::Ready, true, reason, message, ctx.config.resync)
                }
                Progress::InProgress {
                    reason,
                    message,
                    requeue,
                } => (Phase::Provisioning, false, reason, message, *requeue),
                Progress::Failed { reason, message } => {
                    (Phase::Error, false, reason, message, ctx.config.resync)
                }
            };
            let message = &in_cloud(message, pass_cloud.as_deref());
            *status.phase_mut() = Some(phase);
            apply_conditions(
                &mut status,
                K::READY_CONDITION,
                ok,
                reason,
                message,
                generation,
            );
            *status.observed_generation_mut() = generation;
            if let Progress::Failed { reason, .. } = progress
                && before
                    .clone()
                    .conditions_mut()
                    .iter()
                    .all(|c| c.message.as_deref() != Some(message.as_str()))
            {
                publish(
                    ctx,
                    &*obj,
                    EventType::Warning,
                    reason,
                    "Reconcile",
                    message.clone(),
                )
                .await;
            }
            // A converged object of a kind with a drift check is not requeued: the check
            // reads the cloud once per period for all of them and asks for a pass only
            // where something differs.
            if matches!(progress, Progress::Ready { .. })
                && ctx.is_drift_checked(K::kind(&()).as_ref())
            {
                Action::await_change()
            } else {
                Action::requeue(requeue)
            }
        }
        Err(e) => {
            let failures = ctx.note_failure(&key);
            let phase = if matches!(e, ReconcileError::DependencyMissing(_)) {
                Phase::Pending
            } else {
                Phase::Error
            };
            *status.phase_mut() = Some(phase);
            let message = in_cloud(&e.to_string(), pass_cloud.as_deref());
            apply_conditions(
                &mut status,
                K::READY_CONDITION,
                false,
                e.reason(),
                &message,
                generation,
            );
            *status.observed_generation_mut() = generation;
            // One Event per distinct failure, not one per retry.
            let seen = before
                .clone()
                .conditions_mut()
                .iter()
                .any(|c| c.type_ == "Ready" && c.message.as_deref() == Some(message.as_str()));
            let report = failure_report(e, before.clone().phase_mut().is_none());
            if !seen {
                publish(
                    ctx,
                    &*obj,
                    report.event_type,
                    report.reason,
                    "Reconcile",
                    message.clone(),
                )
                .await;
            }
            if report.event_type == EventType::Warning {
                warn!(error = %message, reason = e.reason(), "reconcile failed");
            } else {
                info!(reason = e.reason(), "{message}");
            }
            let base = match &e {
                ReconcileError::DependencyMissing(_) => ctx.config.dependency_retry,
                e => e.retry_after(ctx.config.resync),
            };
            let delay = if e.is_transient() {
                base.saturating_mul(2u32.saturating_pow(failures.saturating_sub(1).min(6)))
                    .min(Duration::from_secs(300).max(base))
            } else {
                base
            };
            Action::requeue(delay)
        }
    };
    touch_sync_time(&before, &mut status, ctx.config.resync);
    ctx.metrics.set_phase(
        K::kind(&()).as_ref(),
        &key,
        phase_str(*status.phase_mut()).as_deref(),
    );
    write_status(api, &obj, &before, &status).await?;
    let op = if before.clone().phase_mut().is_none() {
        "create"
    } else {
        "update"
    };
    let outcome = match &result {
        Ok(_) => "success",
        Err(e) if e.is_transient() => "error",
        Err(_) => "permanent_error",
    };
    ctx.metrics
        .reconcile_total
        .get_or_create(&ReconcileLabels {
            resource: K::kind(&()).to_string(),
            operation: op.into(),
            status: outcome.into(),
        })
        .inc();
    Ok(action)
}

async fn cleanup_one<K: Managed>(
    obj: Arc<K>,
    ctx: &Context,
    api: &Api<K>,
) -> Result<Action, ReconcileError> {
    let before = obj.status().cloned().unwrap_or_default();
    let mut status = before.clone();
    *status.phase_mut() = Some(Phase::Deleting);
    let key = key_of(&*obj);
    // A spec that never passed validation was never applied, so nothing in OpenStack is ours
    // to remove, and looking it up by an invalid name can fail forever (Keystone answers 400
    // to a blank name), which would pin the finalizer. An object created before the spec
    // became invalid has its ID recorded and is cleaned up as usual; one whose create response
    // was lost carries our owner mark and is collected by the GC sweep once the resource is gone.
    if before.openstack_id().is_none() {
        let problems = obj.validate();
        if let Some(first) = problems.first() {
            info!(
                field = %first.path,
                "deleting a resource whose spec never passed validation: nothing to clean up in OpenStack"
            );
            ctx.metrics.set_phase(K::kind(&()).as_ref(), &key, None);
            return Ok(Action::await_change());
        }
    }
    // A resource whose cloud cannot be used keeps its finalizer (and says why) rather than
    // forgetting what it made there, unless it never recorded an object there: a resource
    // refused its cloud from the start made nothing (a create whose answer was lost carries
    // our owner mark and is the GC sweep's once the resource is gone).
    let result = match ctx
        .for_object(obj.cloud_ref(), obj.namespace().as_deref())
        .await
    {
        Ok(cctx) => {
            let r = obj.cleanup(&cctx, &mut status).await;
            forget_refused_cloud(&cctx, &r);
            r
        }
        Err(e) if before.openstack_id().is_none() => {
            info!(error = %e, "deleting a resource that never reached its cloud: nothing to clean up in OpenStack");
            Ok(())
        }
        Err(e) => Err(e.into()),
    };
    let outcome = match &result {
        Ok(()) => {
            ctx.metrics.set_phase(K::kind(&()).as_ref(), &key, None);
            "success"
        }
        Err(e) => {
            let message = e.to_string();
            apply_conditions(
                &mut status,
                K::READY_CONDITION,
                false,
                "DeleteFailed",
                &message,
                obj.meta().generation,
            );
            let seen = before
                .clone()
                .conditions_mut()
                .iter()
                .any(|c| c.message.as_deref() == Some(message.as_str()));
            if !seen {
                publish(
                    ctx,
                    &*obj,
                    EventType::Warning,
                    "DeleteFailed",
                    "Delete",
                    message,
                )
                .await;
            }
            if e.is_transient() {
                "error"
            } else {
                "permanent_error"
            }
        }
    };
    // A failed status write must not hide the cleanup error, and after a successful cleanup
    // the object may already be gone.
    if result.is_err() {
        touch_sync_time(&before, &mut status, ctx.config.resync);
        if let Err(e) = write_status(api, &obj, &before, &status).await {
            warn!(error = %e, "could not write status during deletion");
        }
    }
    ctx.metrics
        .reconcile_total
        .get_or_create(&ReconcileLabels {
            resource: K::kind(&()).to_string(),
            operation: "delete".into(),
            status: outcome.into(),
        })
        .inc();
    result.map(|()| Action::await_change())
}

/// A condition message of a pass in `cloud` (an `OpenstackCloud`), saying where: with several
/// clouds, "created" or "quota exceeded" alone does not say in which.
pub fn in_cloud(message: &str, cloud: Option<&str>) -> String {
    match cloud {
        None => message.to_string(),
        Some(c) => format!("{message} (OpenstackCloud {c})"),
    }
}

/// After an OpenStack refusal of an `OpenstackCloud`'s credentials (revoked, expired), the
/// next pass connects again from its Secret instead of reusing the refused client; until the
/// Secret is repaired that pass is `Blocked` with the reason.
fn forget_refused_cloud<T>(ctx: &Context, result: &Result<T, ReconcileError>) {
    if let (Some(name), Err(ReconcileError::OpenStack(openstack::Error::Unauthorized { .. }))) =
        (&ctx.cloud_name, result)
    {
        ctx.clouds.forget(name);
    }
}

/// Errors the framework hands to the error policy.
#[derive(Debug, thiserror::Error)]
pub enum FrameworkError {
    /// Finalizer handling or the reconcile itself failed.
    #[error(transparent)]
    Finalizer(#[from] Box<kube::runtime::finalizer::Error<ReconcileError>>),
}

/// Whether a pass of `obj` would be a periodic resync: the object is Ready at its current
/// generation and not being deleted (new, changed, failing and deleted objects are not).
pub fn is_resync<K: Managed>(obj: &K) -> bool {
    let Some(status) = obj.status() else {
        return false;
    };
    let mut s = status.clone();
    obj.meta().deletion_timestamp.is_none()
        && *s.phase_mut() == Some(Phase::Ready)
        && *s.observed_generation_mut() == obj.meta().generation
}

/// The share of the reconcile slots periodic resyncs may hold: half, so new and changed
/// objects always find a free slot however many converged objects are due (a fair queue:
/// 1,000 new tenants do not wait behind 10,000 resyncs).
pub fn resync_slots(concurrency: u16) -> usize {
    usize::from(concurrency / 2).max(1)
}

/// How long a resync that found no free resync slot waits: 1–5 s, spread so postponed
/// resyncs do not all come back at once.
fn postpone_delay() -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    Duration::from_millis(1000 + u64::from(nanos % 4000))
}

async fn reconcile<K: Managed>(
    obj: Arc<K>,
    ctx: Arc<Context>,
    api: Api<K>,
    resyncs: Arc<tokio::sync::Semaphore>,
) -> Result<Action, FrameworkError> {
    // A resync that would take one of the slots kept for new and changed objects is put
    // off instead of waiting in a slot (a waiting pass would hold the slot all the same).
    let _resync_permit = if is_resync(&*obj) {
        match resyncs.try_acquire_owned() {
            Ok(p) => Some(p),
            Err(_) => return Ok(Action::requeue(postpone_delay())),
        }
    } else {
        None
    };
    let kind = K::kind(&()).to_string();
    // The object's name is `object`, not `name`: the JSON log format writes the span's own
    // name under `name` in the same map, and a duplicate key loses one of the two.
    let span = info_span!("reconcile", kind = %kind, namespace = %obj.namespace().unwrap_or_default(), object = %obj.name_any());
    async move {
        let started = Instant::now();
        let gauge = ctx
            .metrics
            .in_progress
            .get_or_create(&ResourceLabels {
                resource: kind.clone(),
            })
            .clone();
        gauge.inc();
        let deleting = obj.meta().deletion_timestamp.is_some();
        let res = finalizer(&api, api::FINALIZER, obj, |event| async {
            match event {
                FinalizerEvent::Apply(o) => apply_one(o, &ctx, &api).await,
                FinalizerEvent::Cleanup(o) => cleanup_one(o, &ctx, &api).await,
            }
        })
        .await
        .map_err(|e| FrameworkError::Finalizer(Box::new(e)));
        gauge.dec();
        let op = if deleting { "delete" } else { "reconcile" };
        ctx.metrics
            .reconcile_duration
            .get_or_create(&OperationLabels {
                resource: kind.clone(),
                operation: op.into(),
            })
            .observe(started.elapsed().as_secs_f64());
        if res.is_ok() {
            info!(
                elapsed_ms = started.elapsed().as_millis() as u64,
                "reconciled"
            );
        }
        res
    }
    .instrument(span)
    .await
}

fn error_policy<K: Managed>(_obj: Arc<K>, err: &FrameworkError, _ctx: Arc<Context>) -> Action {
    warn!(error = %err, "reconcile did not complete; retrying");
    Action::requeue(Duration::from_secs(5))
}

/// What triggers a reconcile: spec (generation), finalizers, deletion and the manual
/// reconcile annotation. Status writes (ours) do not, so a pass never triggers itself.
fn trigger_hash<K: Resource>(obj: &K) -> Option<u64> {
    let m = obj.meta();
    let mut h = DefaultHasher::new();
    m.generation.hash(&mut h);
    m.finalizers.hash(&mut h);
    m.deletion_timestamp.is_some().hash(&mut h);
    m.annotations
        .as_ref()
        .and_then(|a| a.get(RECONCILE_ANNOTATION))
        .hash(&mut h);
    Some(h.finish())
}

/// Runs the controller of kind `K` until `shutdown` resolves. `ready` is called once the
/// object cache has synced.
pub async fn run<K>(
    ctx: Arc<Context>,
    api: Api<K>,
    concurrency: u16,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    ready: impl FnOnce() + Send + 'static,
) where
    K: Managed,
{
    run_with(ctx, api, concurrency, shutdown, ready, |c| c).await;
}

/// [`run`] with further triggers: `extend` adds watches of other kinds to the Controller
/// (e.g. [`crate::project::watch_domains`]), so an object waiting on another is reconciled
/// when that one changes rather than on its next retry.
pub async fn run_with<K>(
    ctx: Arc<Context>,
    api: Api<K>,
    concurrency: u16,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    ready: impl FnOnce() + Send + 'static,
    extend: impl FnOnce(Controller<K>) -> Controller<K>,
) where
    K: Managed,
{
    let (reader, writer) = reflector::store();
    // Readiness is taken from the first complete list (`InitDone`) seen by the stream itself.
    // A second `Store::wait_until_ready` waiter in another task is never woken: the store's
    // one-shot keeps only the last poller's waker, and the Controller polls it too.
    let mut ready = Some(ready);
    let stream = watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .modify(trim_for_cache)
        .reflect(writer)
        .inspect(move |event| {
            if matches!(event, Ok(watcher::Event::InitDone))
                && let Some(ready) = ready.take()
            {
                ready();
            }
        })
        .applied_objects()
        .predicate_filter(trigger_hash::<K>, Default::default());
    let api_for_reconcile = api.clone();
    let resyncs = Arc::new(tokio::sync::Semaphore::new(resync_slots(concurrency)));
    extend(Controller::for_stream(stream, reader))
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .graceful_shutdown_on(shutdown)
        .run(
            move |obj, ctx| {
                let api = K::api(api_for_reconcile.clone().into_client(), &obj);
                reconcile(obj, ctx, api, resyncs.clone())
            },
            error_policy::<K>,
            ctx,
        )
        .for_each(|_| futures::future::ready(()))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::{OpenstackProject, OpenstackProjectStatus};

    #[test]
    fn a_missing_dependency_is_a_normal_wait_not_a_warning() {
        let wait = ReconcileError::DependencyMissing("OpenstackDomain demo to be Ready".into());
        for first_pass in [true, false] {
            assert_eq!(
                failure_report(&wait, first_pass),
                FailureReport {
                    event_type: EventType::Normal,
                    reason: "WaitingForDependency"
                }
            );
        }
    }

    #[test]
    fn failures_are_warnings_named_after_the_operation() {
        let e = ReconcileError::NotOwned("project x belongs to another cluster".into());
        assert_eq!(
            failure_report(&e, true),
            FailureReport {
                event_type: EventType::Warning,
                reason: "CreateFailed"
            }
        );
        assert_eq!(failure_report(&e, false).reason, "UpdateFailed");
        let bad = ReconcileError::invalid("spec.name", "must not be empty");
        assert_eq!(
            failure_report(&bad, false),
            FailureReport {
                event_type: EventType::Warning,
                reason: "InvalidSpec"
            }
        );
    }

    fn project(generation: i64, status: Option<(Phase, i64)>, deleting: bool) -> OpenstackProject {
        let mut p: OpenstackProject = serde_json::from_value(serde_json::json!({
            "apiVersion": "sunet.se/v1alpha1",
            "kind": "OpenstackProject",
            "metadata": {"name": "p", "namespace": "ns", "generation": generation},
            "spec": {"name": "p.example.com", "domain": "d"},
        }))
        .unwrap_or_else(|e| panic!("a project: {e}"));
        p.status = status.map(|(phase, observed)| OpenstackProjectStatus {
            phase: Some(phase),
            observed_generation: Some(observed),
            ..Default::default()
        });
        if deleting {
            p.metadata.deletion_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
            );
        }
        p
    }

    #[test]
    fn only_ready_objects_at_their_generation_are_resyncs() {
        assert!(is_resync(&project(2, Some((Phase::Ready, 2)), false)));
        // New, changed, failing, deleted: never held back behind resyncs.
        assert!(!is_resync(&project(1, None, false)));
        assert!(!is_resync(&project(3, Some((Phase::Ready, 2)), false)));
        assert!(!is_resync(&project(2, Some((Phase::Error, 2)), false)));
        assert!(!is_resync(&project(2, Some((Phase::Ready, 2)), true)));
    }

    #[test]
    fn the_cache_drops_managed_fields_and_the_client_side_apply_copy_only() {
        let mut p: OpenstackProject = serde_json::from_value(serde_json::json!({
            "apiVersion": "sunet.se/v1alpha1",
            "kind": "OpenstackProject",
            "metadata": {
                "name": "p",
                "namespace": "ns",
                "annotations": {
                    LAST_APPLIED: "{\"spec\":{}}",
                    RECONCILE_ANNOTATION: "now",
                },
                "finalizers": ["f"],
                "managedFields": [{"manager": "kubectl", "operation": "Apply",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
            },
            "spec": {"name": "p.example.com", "domain": "d"},
        }))
        .unwrap_or_else(|e| panic!("a project: {e}"));
        trim_for_cache(&mut p);
        assert!(p.managed_fields().is_empty());
        assert_eq!(
            p.annotations().keys().collect::<Vec<_>>(),
            vec![RECONCILE_ANNOTATION]
        );
        assert_eq!(p.finalizers(), ["f"]);
        assert_eq!(p.spec.name, "p.example.com");
    }

    #[test]
    fn conditions_of_a_named_cloud_say_which() {
        assert_eq!(in_cloud("created", None), "created");
        assert_eq!(
            in_cloud("created", Some("site-b")),
            "created (OpenstackCloud site-b)"
        );
    }

    #[test]
    fn resyncs_get_half_of_the_slots_and_at_least_one() {
        assert_eq!(resync_slots(20), 10);
        assert_eq!(resync_slots(1), 1);
        assert_eq!(resync_slots(0), 1);
    }
}
