//! Kubernetes helpers: manifests by server-side apply, typed reads, status inspection,
//! reconcile requests, deletion.

use std::fmt::Debug;
use std::time::Duration;

use anyhow::Context as _;
use api::{
    Condition, OpenstackDomain, OpenstackFlavor, OpenstackImage, OpenstackNetwork, OpenstackProject,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::core::Status;
use kube::discovery::Scope;
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::target::FIELD_MANAGER;
use crate::wait::{Check, wait_for};

/// Annotation whose change makes the operator reconcile an object now.
pub const RECONCILE_ANNOTATION: &str = "openstack-operator.sunet.se/reconcile";

/// A kind the operator manages, as the suite sees it.
pub trait Managed:
    Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static
{
    /// The kind's own ready condition (`DomainReady`, ...), besides the `Ready` roll-up.
    const READY_CONDITION: &'static str;
    /// The API for objects of this kind (`namespace` is ignored for cluster-scoped kinds).
    fn api(client: Client, namespace: &str) -> Api<Self>;
}

impl Managed for OpenstackDomain {
    const READY_CONDITION: &'static str = "DomainReady";
    fn api(client: Client, _namespace: &str) -> Api<Self> {
        Api::all(client)
    }
}

impl Managed for OpenstackFlavor {
    const READY_CONDITION: &'static str = "FlavorReady";
    fn api(client: Client, _namespace: &str) -> Api<Self> {
        Api::all(client)
    }
}

impl Managed for OpenstackImage {
    const READY_CONDITION: &'static str = "ImageReady";
    fn api(client: Client, _namespace: &str) -> Api<Self> {
        Api::all(client)
    }
}

impl Managed for OpenstackNetwork {
    const READY_CONDITION: &'static str = "NetworkReady";
    fn api(client: Client, _namespace: &str) -> Api<Self> {
        Api::all(client)
    }
}

impl Managed for OpenstackProject {
    const READY_CONDITION: &'static str = "ProjectReady";
    fn api(client: Client, namespace: &str) -> Api<Self> {
        Api::namespaced(client, namespace)
    }
}

/// Why an apply failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The text is not a manifest.
    #[error("manifest: {0}")]
    Manifest(String),
    /// The server does not serve the document's kind.
    #[error("discovering {gvk:?}: {source}")]
    Discovery {
        /// The kind looked up.
        gvk: GroupVersionKind,
        /// The client's error.
        source: kube::Error,
    },
    /// The server refused the object.
    #[error("applying {kind} {name}: {source}")]
    Api {
        /// Kind of the document.
        kind: String,
        /// Name of the document.
        name: String,
        /// The client's error (with the server's Status for API errors).
        source: kube::Error,
    },
}

impl ApplyError {
    /// The server's Status, when the server answered with an error.
    pub fn status(&self) -> Option<&Status> {
        match self {
            ApplyError::Api {
                source: kube::Error::Api(s),
                ..
            } => Some(s),
            _ => None,
        }
    }

    /// The server's Status rendered with its causes (code, reason, message, fields).
    pub fn describe(&self) -> String {
        match self.status() {
            Some(s) => serde_json::to_string(s).unwrap_or_else(|_| s.message.clone()),
            None => self.to_string(),
        }
    }

    /// Whether, and how, the server refused the object for what it holds rather than for
    /// anything about the request or the server. A real kube-apiserver refuses an apply
    /// whose values do not fit the schema's types (or whose list-map keys repeat) while it
    /// builds the typed patch object, with a 500 and no reason; everything else it finds
    /// invalid is a 4xx, typically 422 Invalid.
    pub fn refusal(&self) -> Option<Refusal> {
        let s = self.status()?;
        if (400..500).contains(&s.code) {
            Some(Refusal::Invalid)
        } else if s.code == 500 && s.reason.is_empty() && s.message.starts_with(TYPED_PATCH_ERROR) {
            Some(Refusal::TypedPatch)
        } else {
            None
        }
    }
}

/// How kube-apiserver's message starts when an apply patch does not fit the schema.
pub const TYPED_PATCH_ERROR: &str = "failed to create typed patch object (";

/// How the API server refused an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A 4xx (422 Invalid from validation, CEL rules, list-map duplicates on create).
    Invalid,
    /// The 500 of an apply patch that does not fit the schema (structured-merge-diff).
    TypedPatch,
}

/// Whether an error text names a field: the path itself; for a key of a list-map item
/// (`spec.subnets[1].name`), the item (`spec.subnets[1]`), where validation reports
/// duplicates and rules on the item; or the list with structured-merge-diff's
/// `duplicate entries for key` (`.spec.subnets: duplicate entries for key [name="s"]`),
/// which is how an apply patch's duplicate is reported.
pub fn names_field(text: &str, field: &str) -> bool {
    if text.contains(field) {
        return true;
    }
    let Some((item, _)) = field.rsplit_once('.') else {
        return false;
    };
    if !item.ends_with(']') {
        return false;
    }
    if text.contains(item) {
        return true;
    }
    item.rsplit_once('[')
        .is_some_and(|(list, _)| text.contains(&format!("{list}: duplicate entries for key")))
}

/// One applied object: where it lives and what it was applied as.
#[derive(Clone, Debug)]
pub struct Applied {
    /// Kind (`OpenstackDomain`, ...).
    pub kind: String,
    /// `metadata.name`.
    pub name: String,
    /// Namespace for namespaced kinds.
    pub namespace: Option<String>,
    /// The object the server returned.
    pub object: DynamicObject,
    /// The discovered API resource.
    pub resource: kube::discovery::ApiResource,
}

impl Applied {
    /// A dynamic API for this object's kind and namespace.
    pub fn api(&self, client: Client) -> Api<DynamicObject> {
        match &self.namespace {
            Some(ns) => Api::namespaced_with(client, ns, &self.resource),
            None => Api::all_with(client, &self.resource),
        }
    }
}

/// Server-side applies each document of a YAML stream (field manager `e2e`, no force);
/// namespaced documents without a namespace go into `default_namespace`.
pub async fn apply_yaml(
    client: &Client,
    default_namespace: &str,
    yaml: &str,
) -> Result<Vec<Applied>, ApplyError> {
    let docs = api::manifest::documents(yaml).map_err(|e| ApplyError::Manifest(e.to_string()))?;
    let mut out = Vec::new();
    for doc in docs {
        out.push(apply_value(client, default_namespace, doc).await?);
    }
    Ok(out)
}

/// Server-side applies one document (see [`apply_yaml`]).
pub async fn apply_value(
    client: &Client,
    default_namespace: &str,
    mut doc: Value,
) -> Result<Applied, ApplyError> {
    let api_version = doc["apiVersion"].as_str().unwrap_or_default().to_string();
    let kind = doc["kind"].as_str().unwrap_or_default().to_string();
    let name = doc["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if api_version.is_empty() || kind.is_empty() || name.is_empty() {
        return Err(ApplyError::Manifest(format!(
            "a document lacks apiVersion, kind or metadata.name: {doc}"
        )));
    }
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), api_version.clone()),
    };
    let gvk = GroupVersionKind {
        group,
        version,
        kind: kind.clone(),
    };
    let (resource, caps) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .map_err(|source| ApplyError::Discovery {
            gvk: gvk.clone(),
            source,
        })?;
    let namespace = match caps.scope {
        Scope::Cluster => None,
        Scope::Namespaced => {
            let ns = doc["metadata"]["namespace"]
                .as_str()
                .unwrap_or(default_namespace)
                .to_string();
            doc["metadata"]["namespace"] = json!(ns);
            Some(ns)
        }
    };
    let api: Api<DynamicObject> = match &namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let object = api
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(&doc),
        )
        .await
        .map_err(|source| ApplyError::Api {
            kind: kind.clone(),
            name: name.clone(),
            source,
        })?;
    Ok(Applied {
        kind,
        name,
        namespace,
        object,
        resource,
    })
}

/// Creates (or keeps) a namespace.
pub async fn ensure_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "openstack-operator-e2e"}}});
    api.patch(name, &PatchParams::apply(FIELD_MANAGER), &Patch::Apply(&ns))
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    Ok(())
}

/// The object's `.status` as JSON (`null` when absent).
pub fn status_json<K: Serialize>(obj: &K) -> Value {
    serde_json::to_value(obj)
        .map(|v| v["status"].clone())
        .unwrap_or(Value::Null)
}

/// The object's status conditions.
pub fn conditions<K: Serialize>(obj: &K) -> Vec<Condition> {
    serde_json::from_value(status_json(obj)["conditions"].clone()).unwrap_or_default()
}

/// One condition by type.
pub fn condition<K: Serialize>(obj: &K, type_: &str) -> Option<Condition> {
    conditions(obj).into_iter().find(|c| c.type_ == type_)
}

/// `status.phase`.
pub fn phase<K: Serialize>(obj: &K) -> Option<String> {
    status_json(obj)["phase"].as_str().map(str::to_string)
}

/// A one-line summary for timeout messages: generation, deletion, finalizers and status.
pub fn summary<K: Resource + Serialize>(obj: &K) -> String {
    let m = obj.meta();
    format!(
        "generation={:?} deletionTimestamp={:?} finalizers={:?} status={}",
        m.generation,
        m.deletion_timestamp.as_ref().map(|t| t.0.to_string()),
        m.finalizers.clone().unwrap_or_default(),
        status_json(obj)
    )
}

/// Whether the object is fully reconciled: phase Ready, its kind's condition and `Ready`
/// True, and `status.observedGeneration` equal to `metadata.generation`.
pub fn is_ready<K: Managed>(obj: &K) -> bool {
    let s = status_json(obj);
    let gen_ok = obj.meta().generation.is_some()
        && s["observedGeneration"].as_i64() == obj.meta().generation;
    let cond_ok = |t: &str| {
        condition(obj, t)
            .is_some_and(|c| c.is_true() && c.observed_generation == obj.meta().generation)
    };
    s["phase"] == "Ready" && gen_ok && cond_ok(K::READY_CONDITION) && cond_ok("Ready")
}

/// Polls `name` until `pred` holds; the timeout message shows the last observed summary.
pub async fn wait_object<K: Managed>(
    api: &Api<K>,
    name: &str,
    timeout: Duration,
    what: &str,
    pred: impl Fn(&K) -> bool,
) -> anyhow::Result<K> {
    let desc = format!("{} {name}: {what}", K::kind(&()));
    wait_for(
        timeout,
        Duration::from_millis(250),
        &desc,
        async || match api.get_opt(name).await? {
            Some(o) if pred(&o) => Ok(Check::Done(o)),
            Some(o) => Ok(Check::Pending(summary(&o))),
            None => Ok(Check::Pending("the object does not exist".into())),
        },
    )
    .await
}

/// Waits until [`is_ready`] holds.
pub async fn wait_ready<K: Managed>(
    api: &Api<K>,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<K> {
    wait_object(
        api,
        name,
        timeout,
        &format!(
            "phase Ready, {} and Ready True at the current generation",
            K::READY_CONDITION
        ),
        is_ready::<K>,
    )
    .await
}

/// Waits until the condition `type_` has `status` (`True`/`False`) and `reason`, at the
/// current generation.
pub async fn wait_condition<K: Managed>(
    api: &Api<K>,
    name: &str,
    type_: &str,
    status: bool,
    reason: &str,
    timeout: Duration,
) -> anyhow::Result<K> {
    let what = format!(
        "condition {type_}={} with reason {reason}",
        if status { "True" } else { "False" }
    );
    wait_object(api, name, timeout, &what, |o: &K| {
        condition(o, type_).is_some_and(|c| {
            c.is_true() == status
                && c.reason.as_deref() == Some(reason)
                && c.observed_generation == o.meta().generation
        })
    })
    .await
}

/// Sets the reconcile annotation to the current time (a JSON merge patch), which makes the
/// operator reconcile the object now; returns the value set.
pub async fn request_reconcile<K: Managed>(api: &Api<K>, name: &str) -> anyhow::Result<String> {
    // Nanoseconds keep two requests within one second distinct.
    let now = jiff::Timestamp::now().to_string();
    let patch = json!({"metadata": {"annotations": {RECONCILE_ANNOTATION: now}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("annotating {} {name}", K::kind(&())))?;
    Ok(now)
}

/// Changes the spec by a JSON merge patch (for edits a re-apply cannot express, such as
/// removing one map key, use `null` as the value).
pub async fn merge_spec<K: Managed>(
    api: &Api<K>,
    name: &str,
    spec_patch: Value,
) -> anyhow::Result<K> {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": spec_patch})),
    )
    .await
    .with_context(|| format!("patching the spec of {} {name}", K::kind(&())))
}

/// Deletes an object (absent is fine) and waits until it is gone; the timeout message shows
/// its finalizers and status.
pub async fn delete_and_wait<K: Managed>(
    api: &Api<K>,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("deleting {} {name}", K::kind(&()))),
    }
    wait_gone(api, name, timeout).await
}

/// Waits until an object no longer exists.
pub async fn wait_gone<K: Managed>(
    api: &Api<K>,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    let desc = format!("{} {name} to be gone", K::kind(&()));
    wait_for(
        timeout,
        Duration::from_millis(250),
        &desc,
        async || match api.get_opt(name).await? {
            None => Ok(Check::Done(())),
            Some(o) => Ok(Check::Pending(summary(&o))),
        },
    )
    .await
}

/// Deletes a dynamic object (absent is fine) and waits until it is gone.
pub async fn delete_dynamic_and_wait(
    api: &Api<DynamicObject>,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("deleting {name}")),
    }
    wait_for(
        timeout,
        Duration::from_millis(250),
        &format!("{name} to be gone"),
        async || match api.get_opt(name).await? {
            None => Ok(Check::Done(())),
            Some(o) => Ok(Check::Pending(format!(
                "deletionTimestamp={:?} finalizers={:?} status={}",
                o.metadata
                    .deletion_timestamp
                    .as_ref()
                    .map(|t| t.0.to_string()),
                o.finalizers(),
                o.data.get("status").cloned().unwrap_or(Value::Null)
            ))),
        },
    )
    .await
}

/// Removes every finalizer of a dynamic object (last resort when the operator cannot).
pub async fn strip_finalizers(api: &Api<DynamicObject>, name: &str) -> anyhow::Result<()> {
    let patch = json!({"metadata": {"finalizers": null}});
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing the finalizers of {name}")),
    }
}

/// One Event about an object, as the suite inspects it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventInfo {
    /// `Normal` or `Warning`.
    pub type_: String,
    /// Reason, e.g. `Created`.
    pub reason: String,
    /// The note/message.
    pub message: String,
}

/// The Events (core/v1 view, any namespace) whose involved object has this name and kind.
pub async fn events_for(client: &Client, kind: &str, name: &str) -> anyhow::Result<Vec<EventInfo>> {
    let api: Api<k8s_openapi::api::core::v1::Event> = Api::all(client.clone());
    let lp = kube::api::ListParams::default().fields(&format!("involvedObject.name={name}"));
    let list = api
        .list(&lp)
        .await
        .with_context(|| format!("listing the Events of {name}"))?;
    Ok(list
        .items
        .into_iter()
        .filter(|e| e.involved_object.kind.as_deref() == Some(kind))
        .map(|e| EventInfo {
            type_: e.type_.unwrap_or_default(),
            reason: e.reason.unwrap_or_default(),
            message: e.message.unwrap_or_default(),
        })
        .collect())
}
