//! What every control-plane controller shares: configuration, the outcome of a pass mapped to
//! conditions, Events on transitions, metrics, and server-side apply.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use api::Condition;
use api::common::set_condition;
use controlplane_api::condition_types as ct;
use controlplane_api::status::Conditioned;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Resource, ResourceExt};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::warn;

/// Field manager of everything the control-plane controllers write.
pub const FIELD_MANAGER: &str = "openstack-operator-controlplane";

/// Controller settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// How often an external service is checked again while nothing changes.
    pub check_interval: Duration,
    /// Timeout of one external-service check.
    pub check_timeout: Duration,
    /// First delay before a failed Job is tried again; doubled per failure.
    pub job_retry_base: Duration,
    /// Longest delay between Job attempts.
    pub job_retry_max: Duration,
    /// How often a Ready object is looked at again (drift, the token probe, key rotation).
    pub resync: Duration,
    /// How long a Secret update may take to reach every pod's mounted volume (the kubelet's
    /// sync period plus its cache TTL); a credential key set is migrated only once older.
    pub secret_propagation: Duration,
    /// Identity API URL per Keystone (`namespace/name` → `http://host:port/v3`), for an
    /// operator that cannot resolve in-cluster Service names (tests, out-of-cluster runs).
    pub keystone_url_overrides: BTreeMap<String, String>,
    /// API URL per service CR (`service/namespace/name` → `http://host:port`, e.g.
    /// `placement/os/cloud-placement`), for the same reason.
    pub api_url_overrides: BTreeMap<String, String>,
    /// How many failed probes a Ready service shrugs off, and how long dependants keep going
    /// after a dependency left Ready.
    pub tolerance: crate::hysteresis::Tolerance,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            check_interval: Duration::from_secs(60),
            check_timeout: Duration::from_secs(10),
            job_retry_base: Duration::from_secs(30),
            job_retry_max: Duration::from_secs(600),
            resync: Duration::from_secs(300),
            secret_propagation: Duration::from_secs(180),
            keystone_url_overrides: BTreeMap::new(),
            api_url_overrides: BTreeMap::new(),
            tolerance: crate::hysteresis::Tolerance::default(),
        }
    }
}

/// Labels of the per-kind counters and histograms.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// Kind.
    pub kind: String,
    /// `success` or `error`.
    pub result: String,
}

/// Labels of the condition gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConditionLabels {
    /// Kind.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Object name.
    pub name: String,
    /// Condition type.
    pub condition: String,
}

/// Metrics of the control-plane controllers.
#[derive(Clone)]
pub struct Metrics {
    /// `controlplane_reconcile_total{kind,result}`.
    pub reconciles: Family<KindLabels, Counter>,
    /// `controlplane_reconcile_duration_seconds{kind,result}`.
    pub duration: Family<KindLabels, Histogram>,
    /// `controlplane_condition{kind,namespace,name,condition}`: 1 when True, else 0.
    pub conditions: Family<ConditionLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            reconciles: Family::default(),
            duration: Family::new_with_constructor(|| {
                Histogram::new([0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0])
            }),
            conditions: Family::default(),
        }
    }
}

impl Metrics {
    /// Registers the metrics.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "controlplane_reconcile",
            "Reconcile passes of the control-plane kinds",
            self.reconciles.clone(),
        );
        registry.register(
            "controlplane_reconcile_duration_seconds",
            "Duration of reconcile passes",
            self.duration.clone(),
        );
        registry.register(
            "controlplane_condition",
            "Conditions of control-plane objects (1 = True)",
            self.conditions.clone(),
        );
    }
}

/// Shared state of the control-plane controllers.
pub struct Ctx {
    /// Kubernetes client.
    pub client: kube::Client,
    /// Settings.
    pub config: Config,
    /// Metrics.
    pub metrics: Metrics,
    /// Probe outcomes and readiness of every object, for the hysteresis.
    pub memory: crate::hysteresis::Memory,
    reporter: Reporter,
}

impl Ctx {
    /// Builds the context.
    pub fn new(
        client: kube::Client,
        config: Config,
        metrics: Metrics,
        instance: Option<String>,
    ) -> Arc<Self> {
        Arc::new(Ctx {
            client,
            config,
            metrics,
            memory: crate::hysteresis::Memory::default(),
            reporter: Reporter {
                controller: "openstack-operator-controlplane".into(),
                instance,
            },
        })
    }

    /// Publishes an Event (a fresh recorder per Event, so a new message is never folded into
    /// an older series); failures are logged, never fatal.
    pub async fn event<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(note.chars().take(1000).collect()),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = Recorder::new(self.client.clone(), self.reporter.clone())
            .publish(&ev, &obj.object_ref(&()))
            .await
        {
            warn!(error = %e, reason, "could not publish an Event");
        }
    }
}

/// How a pass ended; mapped onto the five standard conditions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// Everything is in place and answers.
    Ready(String),
    /// Work under way.
    Reconciling {
        /// CamelCase reason.
        reason: String,
        /// Detail.
        message: String,
    },
    /// Waiting for something outside the object.
    Blocked {
        /// CamelCase reason.
        reason: String,
        /// Detail (names what blocks).
        message: String,
    },
    /// Something failed and is retried.
    Degraded {
        /// CamelCase reason.
        reason: String,
        /// Detail.
        message: String,
    },
    /// The spec is refused.
    InvalidSpec(String),
}

impl State {
    /// The Ready condition's reason and message.
    pub fn summary(&self) -> (&str, &str) {
        match self {
            State::Ready(m) => ("Ready", m),
            State::Reconciling { reason, message }
            | State::Blocked { reason, message }
            | State::Degraded { reason, message } => (reason, message),
            State::InvalidSpec(m) => ("InvalidSpec", m),
        }
    }
}

/// Writes the standard conditions for `state` (each one present, True or False).
pub fn set_state<S: Conditioned>(status: &mut S, state: &State, generation: Option<i64>) {
    let now = jiff::Timestamp::now().to_string();
    let (reason, message) = state.summary();
    let flags = [
        (ct::READY, matches!(state, State::Ready(_))),
        (ct::RECONCILING, matches!(state, State::Reconciling { .. })),
        (ct::BLOCKED, matches!(state, State::Blocked { .. })),
        (ct::DEGRADED, matches!(state, State::Degraded { .. })),
        (ct::INVALID_SPEC, matches!(state, State::InvalidSpec(_))),
    ];
    for (type_, on) in flags {
        let c = if type_ == ct::READY || on {
            Condition::new(type_, on, reason, message)
        } else {
            Condition::new(type_, false, "AsExpected", "")
        };
        set(status, c, generation, &now);
    }
    *status.observed_generation_mut() = generation;
}

/// Upserts one condition with the generation it was computed from.
pub fn set<S: Conditioned>(status: &mut S, mut c: Condition, generation: Option<i64>, now: &str) {
    c.observed_generation = generation;
    set_condition(status.conditions_mut(), c, now);
}

/// Publishes a Warning when `after` newly shows Blocked/Degraded/InvalidSpec (or the same with
/// another message), and records the condition gauges.
pub async fn after_pass<K, S>(ctx: &Ctx, obj: &K, before: &S, after: &S)
where
    K: Resource<DynamicType = ()>,
    S: Conditioned,
{
    let kind = K::kind(&()).to_string();
    for type_ in [ct::BLOCKED, ct::DEGRADED, ct::INVALID_SPEC] {
        let now = after.condition(type_).filter(|c| c.is_true());
        let was = before.condition(type_).filter(|c| c.is_true());
        if let Some(c) = now
            && was.map(|w| &w.message) != Some(&c.message)
        {
            ctx.event(
                obj,
                EventType::Warning,
                type_,
                c.message.clone().unwrap_or_default(),
            )
            .await;
        }
    }
    for c in after.conditions() {
        ctx.metrics
            .conditions
            .get_or_create(&ConditionLabels {
                kind: kind.clone(),
                namespace: obj.meta().namespace.clone().unwrap_or_default(),
                name: obj.meta().name.clone().unwrap_or_default(),
                condition: c.type_.clone(),
            })
            .set(i64::from(c.is_true()));
    }
}

/// Writes `status` by server-side apply when it differs from `before`.
pub async fn write_status<K, S>(
    api: &Api<K>,
    obj: &K,
    before: &S,
    status: &S,
) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    S: Serialize + PartialEq,
{
    if before == status {
        return Ok(());
    }
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

/// Server-side apply of an object we own.
pub async fn apply<K>(api: &Api<K>, obj: &K) -> Result<K, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug,
{
    api.patch(
        &obj.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await
}

/// Errors that end a pass early (the pass is retried by the error policy).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The object lacks what the API server always sets.
    #[error("object has no {0}")]
    Incomplete(&'static str),
}

/// The error policy: log and look again soon.
pub fn error_policy<K>(
    _obj: Arc<K>,
    err: &Error,
    _ctx: Arc<Ctx>,
) -> kube::runtime::controller::Action {
    warn!(error = %err, "control-plane reconcile failed; retrying");
    kube::runtime::controller::Action::requeue(Duration::from_secs(5))
}

/// Records a pass in the metrics.
pub fn observe(ctx: &Ctx, kind: &str, ok: bool, started: std::time::Instant) {
    let labels = KindLabels {
        kind: kind.into(),
        result: if ok { "success" } else { "error" }.into(),
    };
    ctx.metrics.reconciles.get_or_create(&labels).inc();
    ctx.metrics
        .duration
        .get_or_create(&labels)
        .observe(started.elapsed().as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::*;
    use controlplane_api::ServiceStatus;

    #[test]
    fn one_state_sets_all_five_conditions() {
        let mut s = ServiceStatus::default();
        set_state(
            &mut s,
            &State::Blocked {
                reason: "ExternalServiceNotReady".into(),
                message: "external service db (database) not Authenticated: denied".into(),
            },
            Some(3),
        );
        assert_eq!(s.conditions.len(), 5);
        assert!(s.condition(ct::BLOCKED).is_some_and(Condition::is_true));
        assert!(!s.condition(ct::READY).is_some_and(Condition::is_true));
        assert_eq!(
            s.condition(ct::READY).and_then(|c| c.message.as_deref()),
            Some("external service db (database) not Authenticated: denied")
        );
        assert_eq!(s.observed_generation, Some(3));
        set_state(&mut s, &State::Ready("ok".into()), Some(3));
        assert!(s.condition(ct::READY).is_some_and(Condition::is_true));
        assert!(!s.condition(ct::BLOCKED).is_some_and(Condition::is_true));
    }
}
