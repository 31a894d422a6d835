//! The contract between the runtime and a provider (Zun, or a test double).
//!
//! The runtime owns everything Kubernetes: the Node, its Lease, the pod
//! watch, writing pod status (only when it changed), Events and removing a
//! deleted pod's object. A provider owns everything behind the node: it is
//! handed all pods bound to the node once per poll interval and answers,
//! per pod, the status Kubernetes should show, the Events to record and
//! whether a pod being deleted is gone from the backend.

use std::collections::BTreeMap;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ConfigMap, NodeAddress, Pod, PodStatus, Secret};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::ApiResource;

/// One node condition as the provider sees it (times are the runtime's job).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Condition {
    /// `Ready`, `MemoryPressure`, `DiskPressure`, `PIDPressure`, `NetworkUnavailable`.
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// CamelCase reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

impl Condition {
    /// A condition.
    pub fn new(type_: &str, status: bool, reason: &str, message: impl Into<String>) -> Self {
        Self {
            type_: type_.into(),
            status: if status { "True" } else { "False" }.into(),
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// What the provider says about its node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeState {
    /// Capacity (`cpu`, `memory`, `pods`).
    pub capacity: BTreeMap<String, Quantity>,
    /// Allocatable (capacity minus what others use).
    pub allocatable: BTreeMap<String, Quantity>,
    /// The five node conditions.
    pub conditions: Vec<Condition>,
    /// Extra addresses (the runtime adds its own InternalIP, and Hostname when configured).
    pub addresses: Vec<NodeAddress>,
    /// `topology.kubernetes.io/zone`, if known.
    pub zone: Option<String>,
}

/// Severity of an Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

/// An Event to record on a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodEvent {
    /// Normal or Warning.
    pub type_: EventType,
    /// CamelCase reason (`ProviderFailed`, `Created`, `Started`, `Killing`...).
    pub reason: String,
    /// Message (never secrets).
    pub message: String,
}

/// The provider's answer for one pod.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodUpdate {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The pod's uid.
    pub uid: String,
    /// The status to show (written only if it differs from the pod's).
    pub status: Option<PodStatus>,
    /// Events to record.
    pub events: Vec<PodEvent>,
    /// For a pod being deleted: nothing of it is left in the backend, so the
    /// runtime may remove the pod object.
    pub deleted: bool,
}

/// Errors a provider reports for a whole pass (a pod's own failures go
/// into its status and Events instead).
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The backend could not be listed or reached; retried next interval.
    #[error("backend unavailable: {0}")]
    Unavailable(String),
}

/// Read access to the pod's namespace objects a provider resolves at create
/// time (env `valueFrom`, `envFrom`).
#[async_trait]
pub trait Objects: Send + Sync {
    /// A ConfigMap, `None` if it does not exist.
    async fn config_map(&self, namespace: &str, name: &str) -> Result<Option<ConfigMap>, String>;
    /// A Secret, `None` if it does not exist.
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, String>;
    /// A namespaced custom object (e.g. an `OpenstackProject` naming the
    /// pod's network) as JSON, `None` if it (or its kind) does not exist.
    async fn custom_object(
        &self,
        kind: &ApiResource,
        namespace: &str,
        name: &str,
    ) -> Result<Option<serde_json::Value>, String>;

    /// A bound service-account token for a pod (the TokenRequest API,
    /// `POST .../serviceaccounts/{name}/token`), as the kubelet requests one for a
    /// projected `serviceAccountToken` volume source.
    async fn service_account_token(
        &self,
        namespace: &str,
        request: &TokenWanted,
    ) -> Result<IssuedToken, String> {
        let _ = request;
        Err(format!(
            "service account tokens of {namespace}: not offered by this node's API access"
        ))
    }
}

/// What a pod's projected `serviceAccountToken` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenWanted {
    /// The ServiceAccount.
    pub service_account: String,
    /// `audience` (none: the API server's own audiences).
    pub audience: Option<String>,
    /// `expirationSeconds`.
    pub expiration_seconds: i64,
    /// The pod the token is bound to: (name, uid).
    pub pod: (String, String),
}

/// A token the API server issued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IssuedToken {
    /// The token.
    pub token: String,
    /// When it expires (`status.expirationTimestamp`).
    pub expires: jiff::Timestamp,
}

/// A virtual kubelet's backend.
#[async_trait]
pub trait Provider: Send + Sync + 'static {
    /// Capacity, conditions and zone of the node (called every status
    /// interval; failures become conditions, not errors).
    async fn node_state(&self) -> NodeState;

    /// One pass over every pod bound to this node (the watch's complete
    /// view; `pods` includes terminating ones). The provider creates what is
    /// missing, restarts, stops and deletes, and may remove backend objects
    /// it made whose pod is not in `pods`, but only when `complete` (the
    /// watch has listed everything at least once).
    async fn sync(
        &self,
        pods: &[Pod],
        objects: &dyn Objects,
        complete: bool,
    ) -> Result<Vec<PodUpdate>, ProviderError>;

    /// [`Provider::sync`], handing each pod's update to `emit` as soon as it is known, so that
    /// a pod whose backend calls are slow does not hold back the other pods' statuses. The
    /// runtime calls this one; the default emits `sync`'s answers when it returns.
    async fn sync_each(
        &self,
        pods: &[Pod],
        objects: &dyn Objects,
        complete: bool,
        emit: &(dyn Fn(PodUpdate) + Send + Sync),
    ) -> Result<(), ProviderError> {
        for u in self.sync(pods, objects, complete).await? {
            emit(u);
        }
        Ok(())
    }

    /// Whether a pass may start while an earlier one still runs (`false`: passes, full and
    /// transition, run one at a time). A provider saying `true` keeps each pod out of a pass
    /// while another pass acts on it, so that a pod waiting on a slow backend call holds back
    /// only itself, not the next pass of every other pod.
    fn passes_may_overlap(&self) -> bool {
        false
    }

    /// How often [`Provider::sync_transitions`] runs between full passes (`None`: never).
    fn transition_interval(&self) -> Option<std::time::Duration> {
        None
    }

    /// A short pass over the pods the provider sees in transition (containers starting,
    /// stopping, being deleted, a restart due), reading only their backend objects; the other
    /// pods are left to [`Provider::sync`]. Answers as `sync` does, for those pods only.
    async fn sync_transitions(
        &self,
        pods: &[Pod],
        objects: &dyn Objects,
    ) -> Result<Vec<PodUpdate>, ProviderError> {
        let _ = (pods, objects);
        Ok(Vec::new())
    }
}
