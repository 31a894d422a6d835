//! The verbs with their real-server semantics: create, get, list, update,
//! patch, delete, plus the background work the control plane would do
//! (garbage collection, namespace and CRD cleanup), run synchronously after
//! every write so tests see a settled state.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use crate::error::{ApiError, ApiResult, Cause};
use crate::patch::{self, Ownership, PatchKind};
use crate::resources::{self, Flavor, Registry, ResourceInfo, StorageKey};
use crate::schema;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{EventType, Store};
use crate::util::{self, finalizers, meta, meta_mut, meta_str, now_rfc3339};

/// Finalizer the garbage collector uses for foreground deletion.
pub const FOREGROUND: &str = "foregroundDeletion";
/// Finalizer the garbage collector uses for orphaning dependents.
pub const ORPHAN: &str = "orphan";
/// Finalizer the CRD controller uses to delete instances first.
pub const CRD_CLEANUP: &str = "customresourcecleanup.apiextensions.k8s.io";

/// `?fieldValidation=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    /// Drop unknown fields silently.
    Ignore,
    /// Drop unknown fields and warn (the server default).
    #[default]
    Warn,
    /// Reject unknown fields with 400.
    Strict,
}

/// Options common to all writes.
#[derive(Debug, Clone, Default)]
pub struct WriteOpts {
    /// `dryRun=All`: validate and return the result without persisting it.
    pub dry_run: bool,
    /// `fieldManager` (or one derived from the User-Agent).
    pub field_manager: String,
    /// `fieldValidation`.
    pub field_validation: FieldValidation,
    /// `force` (server-side apply).
    pub force: bool,
    /// The requester, where the server records it (a CSR's `spec.username`);
    /// `None` is the emulator's default admin.
    pub user: Option<crate::review::ReviewUser>,
}

/// Result of a write.
#[derive(Debug, Clone)]
pub struct WriteOutcome {
    /// The resulting object in the requested version.
    pub object: Value,
    /// Whether the write created the object (HTTP 201).
    pub created: bool,
    /// `Warning` headers to send.
    pub warnings: Vec<String>,
}

/// `DeleteOptions` fields we honour.
#[derive(Debug, Clone, Default)]
pub struct DeleteOpts {
    /// `Foreground`, `Background` or `Orphan`.
    pub propagation: Option<String>,
    /// Legacy `orphanDependents`.
    pub orphan_dependents: Option<bool>,
    /// `preconditions.uid`.
    pub precondition_uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub precondition_rv: Option<String>,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `gracePeriodSeconds` (pods honour it; see [`pod_grace_period`]).
    pub grace_period_seconds: Option<i64>,
}

/// Which part of an object a request addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sub {
    /// The main resource.
    Main,
    /// `/status`.
    Status,
    /// `/approval` (CertificateSigningRequests only).
    Approval,
}

/// The emulated cluster state: objects plus the served resources.
pub struct State {
    /// Objects, history and watchers.
    pub store: Store,
    /// Served resources (built-ins + CRDs).
    pub registry: Registry,
}

fn object_name(obj: &Value) -> String {
    meta_str(obj, "name").to_string()
}

/// Strip fields a client may not set and return the non-metadata content used for generation.
fn generation_content(obj: &Value, status_subresource: bool) -> Value {
    let mut c = obj.clone();
    if let Value::Object(m) = &mut c {
        m.remove("metadata");
        m.remove("apiVersion");
        m.remove("kind");
        if status_subresource {
            m.remove("status");
        }
    }
    c
}

fn owner_refs(obj: &Value) -> Vec<Value> {
    meta(obj)
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

impl State {
    /// A fresh state with the default namespaces.
    pub fn new(history_limit: usize) -> Self {
        let mut s = State {
            store: Store::new(history_limit),
            registry: Registry::new(Vec::new()),
        };
        s.ensure_default_namespaces();
        s
    }

    /// Create `default`, `kube-system`, `kube-public` and `kube-node-lease` if missing.
    pub fn ensure_default_namespaces(&mut self) {
        let key = StorageKey::new("", "namespaces");
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            if self.store.get(&key, "", ns).is_none() {
                let obj = json!({
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {
                        "name": ns,
                        "uid": uuid::Uuid::new_v4().to_string(),
                        "creationTimestamp": now_rfc3339(),
                        "labels": {"kubernetes.io/metadata.name": ns},
                    },
                    "spec": {"finalizers": ["kubernetes"]},
                    "status": {"phase": "Active"},
                });
                self.store.put(&key, obj, EventType::Added);
            }
        }
    }

    /// Rebuild the registry from the stored CRDs.
    pub fn rebuild_registry(&mut self) {
        let key = StorageKey::new("apiextensions.k8s.io", "customresourcedefinitions");
        let mut custom = Vec::new();
        for crd in self.store.list(&key, None) {
            match resources::from_crd(crd) {
                Ok(r) => custom.extend(r),
                Err(e) => {
                    tracing::warn!(crd = %object_name(crd), error = %e, "skipping unparsable CRD")
                }
            }
        }
        self.registry = Registry::new(custom);
    }

    /// Get one object in the version of `info`.
    pub fn get(&self, info: &ResourceInfo, ns: &str, name: &str) -> ApiResult<Value> {
        self.store
            .get(&info.storage, ns, name)
            .map(|o| info.from_stored(o))
            .ok_or_else(|| ApiError::not_found(&info.group, &info.plural, name))
    }

    /// List objects matching the selectors; returns items and the list resourceVersion.
    pub fn list(
        &self,
        info: &ResourceInfo,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
    ) -> (Vec<Value>, u64) {
        let items = self
            .store
            .list(&info.storage, ns)
            .into_iter()
            .filter(|o| matches(info, o, labels, fields))
            .map(|o| info.from_stored(o))
            .collect();
        (items, self.store.rv())
    }

    fn check_namespace(&self, info: &ResourceInfo, ns: &str, name: &str) -> ApiResult<()> {
        if !info.namespaced {
            return Ok(());
        }
        let nskey = StorageKey::new("", "namespaces");
        match self.store.get(&nskey, "", ns) {
            None => Err(ApiError::not_found("", "namespaces", ns)),
            Some(n) if !meta_str(n, "deletionTimestamp").is_empty() => Err(ApiError::forbidden(
                &info.group,
                &info.plural,
                name,
                &format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                ),
            )),
            Some(_) => Ok(()),
        }
    }

    fn check_crd_not_terminating(&self, info: &ResourceInfo) -> ApiResult<()> {
        if let Some(crd_name) = &info.crd_name {
            let key = StorageKey::new("apiextensions.k8s.io", "customresourcedefinitions");
            if let Some(crd) = self.store.get(&key, "", crd_name)
                && !meta_str(crd, "deletionTimestamp").is_empty()
            {
                return Err(ApiError::method_not_allowed(
                    "create not allowed while custom resource definition is terminating",
                ));
            }
        }
        Ok(())
    }

    /// Create an object from a request body (already decoded JSON in `info`'s version).
    pub fn create(
        &mut self,
        info: &ResourceInfo,
        ns: &str,
        body: Value,
        opts: &WriteOpts,
    ) -> ApiResult<WriteOutcome> {
        let mut obj = prepare_body(info, ns, body)?;
        let m = meta_mut(&mut obj);
        if !m
            .get("resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            return Err(ApiError::bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let mut name = m
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if name.is_empty() {
            let generate = m.get("generateName").and_then(Value::as_str).unwrap_or("");
            if generate.is_empty() {
                return Err(ApiError::invalid(
                    &info.group,
                    &info.kind,
                    "",
                    vec![Cause::new(
                        "FieldValueRequired",
                        "metadata.name",
                        "Required value: name or generateName is required",
                    )],
                ));
            }
            name = format!("{generate}{}", util::random_suffix());
            m.insert("name".into(), json!(name));
        }
        self.check_namespace(info, ns, &name)?;
        self.check_crd_not_terminating(info)?;
        if self.store.get(&info.storage, ns, &name).is_some() {
            return Err(ApiError::already_exists(&info.group, &info.plural, &name));
        }
        let mut stored = info.to_stored(obj);
        reset_system_meta(info, &mut stored);
        prepare_for_create(info, &mut stored);
        csr_admission(info, &mut stored, None, Sub::Main, opts)?;
        let warnings = self.admit(info, &mut stored, None, opts)?;
        if !opts.field_manager.is_empty() {
            let own = ownership(info, &opts.field_manager, Sub::Main);
            patch::track_update(None, &mut stored, &own);
        }
        self.finish_create(info, stored, opts, warnings)
    }

    fn finish_create(
        &mut self,
        info: &ResourceInfo,
        mut stored: Value,
        opts: &WriteOpts,
        warnings: Vec<String>,
    ) -> ApiResult<WriteOutcome> {
        if info.flavor == Flavor::Crd {
            set_crd_status(&mut stored, None);
        }
        if opts.dry_run {
            return Ok(WriteOutcome {
                object: info.from_stored(&stored),
                created: true,
                warnings,
            });
        }
        let committed = self.store.put(&info.storage, stored, EventType::Added);
        self.after_write(&info.storage);
        Ok(WriteOutcome {
            object: info.from_stored(&committed),
            created: true,
            warnings,
        })
    }

    /// PUT: replace an object (or its status).
    pub fn update(
        &mut self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        sub: Sub,
        body: Value,
        opts: &WriteOpts,
    ) -> ApiResult<WriteOutcome> {
        let mut obj = prepare_body(info, ns, body)?;
        let body_name = meta_str(&obj, "name").to_string();
        if body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let Some(old) = self.store.get(&info.storage, ns, name).cloned() else {
            if info.allow_create_on_update && sub == Sub::Main {
                meta_mut(&mut obj).remove("resourceVersion");
                return self.create(info, ns, obj, opts);
            }
            return Err(ApiError::not_found(&info.group, &info.plural, name));
        };
        let candidate = info.to_stored(obj);
        let manager = (!opts.field_manager.is_empty()).then_some(opts.field_manager.as_str());
        self.update_existing(info, old, candidate, sub, opts, manager)
    }

    /// PATCH an object (or its status); server-side apply may create it.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &mut self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        sub: Sub,
        kind: PatchKind,
        body: Value,
        opts: &WriteOpts,
    ) -> ApiResult<WriteOutcome> {
        let existing = self.store.get(&info.storage, ns, name).cloned();
        if kind == PatchKind::Apply {
            return self.apply(info, ns, name, sub, existing, body, opts);
        }
        let Some(old) = existing else {
            return Err(ApiError::not_found(&info.group, &info.plural, name));
        };
        // patches apply to the representation the client sees
        let mut target = info.from_stored(&old);
        match kind {
            PatchKind::Merge => {
                if !body.is_object() {
                    return Err(ApiError::bad_request("merge patch must be a JSON object"));
                }
                patch::merge_patch(&mut target, &body)
            }
            PatchKind::Strategic => {
                if !body.is_object() {
                    return Err(ApiError::bad_request(
                        "strategic merge patch must be a JSON object",
                    ));
                }
                patch::strategic_merge_patch(&mut target, &body)
            }
            PatchKind::Json => patch::json_patch(&mut target, &body)?,
            PatchKind::Apply => {
                return Err(ApiError::internal(
                    "apply patches take the server-side apply path",
                ));
            }
        }
        if meta_str(&target, "name") != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                meta_str(&target, "name")
            )));
        }
        let candidate = info.to_stored(target);
        let manager = (!opts.field_manager.is_empty()).then_some(opts.field_manager.as_str());
        self.update_existing(info, old, candidate, sub, opts, manager)
    }

    #[allow(clippy::too_many_arguments)]
    fn apply(
        &mut self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        sub: Sub,
        existing: Option<Value>,
        body: Value,
        opts: &WriteOpts,
    ) -> ApiResult<WriteOutcome> {
        if opts.field_manager.is_empty() {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "PatchOptions",
                "",
                vec![Cause::new(
                    "FieldValueRequired",
                    "fieldManager",
                    "Required value: is required for apply patch",
                )],
            ));
        }
        let Value::Object(bm) = &body else {
            return Err(ApiError::bad_request("apply patch must be an object"));
        };
        let av = bm.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kd = bm.get("kind").and_then(Value::as_str).unwrap_or("");
        if av.is_empty() || kd.is_empty() {
            return Err(ApiError::bad_request(
                "invalid object type: apply patches must set apiVersion and kind",
            ));
        }
        // the server refuses an applied configuration that carries managedFields (an object
        // read back and applied as is), before anything else about it
        if body
            .pointer("/metadata/managedFields")
            .is_some_and(|m| !m.is_null())
        {
            return Err(ApiError::bad_request("metadata.managedFields must be nil"));
        }
        // the server names the patch object as sent, before filling anything in
        let (patch_ns, patch_name) = (
            meta_str(&body, "namespace").to_string(),
            meta_str(&body, "name").to_string(),
        );
        let mut body = prepare_body(info, ns, body)?;
        let bname = meta_str(&body, "name").to_string();
        if bname.is_empty() {
            meta_mut(&mut body).insert("name".into(), json!(name));
        } else if bname != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({bname}) does not match the name on the URL ({name})"
            )));
        }
        if let Some(schema) = &info.schema
            && let Some(errors) = crate::typed::apply_patch_errors(&body, schema)
        {
            return Err(ApiError::unclassified(crate::typed::typed_patch_message(
                &patch_ns,
                &patch_name,
                &info.group,
                &info.version,
                &info.kind,
                &errors,
            )));
        }
        let own = ownership(info, &opts.field_manager, sub);
        match existing {
            None => {
                if sub != Sub::Main {
                    return Err(ApiError::not_found(&info.group, &info.plural, name));
                }
                let mut merged = patch::apply(None, &body, &own, opts.force)?;
                self.check_namespace(info, ns, name)?;
                self.check_crd_not_terminating(info)?;
                let managed = meta(&merged).and_then(|m| m.get("managedFields")).cloned();
                let mut stored = info.to_stored(std::mem::take(&mut merged));
                reset_system_meta(info, &mut stored);
                prepare_for_create(info, &mut stored);
                csr_admission(info, &mut stored, None, Sub::Main, opts)?;
                if let Some(mf) = managed {
                    meta_mut(&mut stored).insert("managedFields".into(), mf);
                }
                let warnings = self.admit(info, &mut stored, None, opts)?;
                self.finish_create(info, stored, opts, warnings)
            }
            Some(old) => {
                let live = info.from_stored(&old);
                let rv = meta_str(&body, "resourceVersion").to_string();
                let mut merged = patch::apply(Some(&live), &body, &own, opts.force)?;
                // a resourceVersion in the applied config is a precondition, not a field
                let mm = meta_mut(&mut merged);
                if rv.is_empty() {
                    mm.insert(
                        "resourceVersion".into(),
                        json!(meta_str(&old, "resourceVersion")),
                    );
                }
                let candidate = info.to_stored(merged);
                self.update_existing(info, old, candidate, sub, opts, None)
            }
        }
    }

    /// Shared update path: preconditions, subresource split, admission, generation, commit.
    fn update_existing(
        &mut self,
        info: &ResourceInfo,
        old: Value,
        candidate: Value,
        sub: Sub,
        opts: &WriteOpts,
        manager: Option<&str>,
    ) -> ApiResult<WriteOutcome> {
        let name = object_name(&old);
        let cand_rv = meta_str(&candidate, "resourceVersion");
        if !cand_rv.is_empty() && cand_rv != meta_str(&old, "resourceVersion") {
            return Err(ApiError::stale(&info.group, &info.plural, &name));
        }
        let cand_uid = meta_str(&candidate, "uid");
        if !cand_uid.is_empty() && cand_uid != meta_str(&old, "uid") {
            return Err(ApiError::invalid(
                &info.group,
                &info.kind,
                &name,
                vec![Cause::new(
                    "FieldValueInvalid",
                    "metadata.uid",
                    format!("Invalid value: {cand_uid:?}: field is immutable"),
                )],
            ));
        }
        let mut new = match sub {
            Sub::Status | Sub::Approval => {
                // a status write changes only .status (and its field ownership)
                let mut n = old.clone();
                match candidate.get("status") {
                    Some(s) => n["status"] = s.clone(),
                    None => {
                        if let Value::Object(m) = &mut n {
                            m.remove("status");
                        }
                    }
                }
                if let Some(mf) = meta(&candidate).and_then(|m| m.get("managedFields")) {
                    meta_mut(&mut n).insert("managedFields".into(), mf.clone());
                }
                n
            }
            Sub::Main => {
                let mut n = candidate;
                if info.status_subresource {
                    // a main-resource write cannot change .status
                    match old.get("status") {
                        Some(s) => n["status"] = s.clone(),
                        None => {
                            if let Value::Object(m) = &mut n {
                                m.remove("status");
                            }
                        }
                    }
                }
                let om = meta(&old).cloned().unwrap_or_default();
                let nm = meta_mut(&mut n);
                for f in [
                    "uid",
                    "creationTimestamp",
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                    "generation",
                    "namespace",
                    "name",
                ] {
                    match om.get(f) {
                        Some(v) => {
                            nm.insert(f.into(), v.clone());
                        }
                        None => {
                            nm.remove(f);
                        }
                    }
                }
                if !nm.contains_key("managedFields")
                    && let Some(mf) = om.get("managedFields")
                {
                    nm.insert("managedFields".into(), mf.clone());
                }
                nm.remove("selfLink");
                n
            }
        };
        meta_mut(&mut new).insert(
            "resourceVersion".into(),
            json!(meta_str(&old, "resourceVersion")),
        );
        csr_admission(info, &mut new, Some(&old), sub, opts)?;
        if !meta_str(&old, "deletionTimestamp").is_empty() {
            let before: HashSet<String> = finalizers(&old).into_iter().collect();
            let added: Vec<String> = finalizers(&new)
                .into_iter()
                .filter(|f| !before.contains(f))
                .collect();
            if !added.is_empty() {
                return Err(ApiError::invalid(
                    &info.group,
                    &info.kind,
                    &name,
                    vec![Cause::new(
                        "FieldValueForbidden",
                        "metadata.finalizers",
                        format!(
                            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                        ),
                    )],
                ));
            }
        }
        let warnings = self.admit(info, &mut new, Some(&old), opts)?;
        if info.generation
            && generation_content(&new, info.status_subresource)
                != generation_content(&old, info.status_subresource)
        {
            let g = meta(&old)
                .and_then(|m| m.get("generation"))
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta_mut(&mut new).insert("generation".into(), json!(g + 1));
        }
        if let Some(m) = manager {
            let own = ownership(info, m, sub);
            let old_served = info.from_stored(&old);
            let mut served = info.from_stored(&new);
            patch::track_update(Some(&old_served), &mut served, &own);
            let mf = meta(&served).and_then(|x| x.get("managedFields")).cloned();
            let nm = meta_mut(&mut new);
            match mf {
                Some(v) => nm.insert("managedFields".into(), v),
                None => nm.remove("managedFields"),
            };
        }
        if info.flavor == Flavor::Crd {
            set_crd_status(&mut new, Some(&old));
        }
        if new == old {
            // the real server skips no-op writes: no new resourceVersion, no watch event
            return Ok(WriteOutcome {
                object: info.from_stored(&old),
                created: false,
                warnings,
            });
        }
        if opts.dry_run {
            return Ok(WriteOutcome {
                object: info.from_stored(&new),
                created: false,
                warnings,
            });
        }
        let ns = meta_str(&old, "namespace").to_string();
        let committed = self.commit(&info.storage, &ns, &name, new);
        self.after_write(&info.storage);
        Ok(WriteOutcome {
            object: info.from_stored(&committed),
            created: false,
            warnings,
        })
    }

    /// Store an updated object, or remove it if it is being deleted, has no finalizers left and
    /// its deletion waits for nothing else (`shouldDeleteDuringUpdate` in the apiserver's
    /// `registry/generic/registry/store.go`: no finalizers and the stored object's
    /// `deletionGracePeriodSeconds` is 0). A pod in its graceful termination (a period above 0)
    /// stays through updates, its kubelet's status writes included, until the kubelet deletes
    /// it with period 0.
    fn commit(&mut self, key: &StorageKey, ns: &str, name: &str, new: Value) -> Value {
        let no_grace_left = self
            .store
            .get(key, ns, name)
            .and_then(meta)
            .and_then(|m| m.get("deletionGracePeriodSeconds"))
            .and_then(Value::as_i64)
            == Some(0);
        if !meta_str(&new, "deletionTimestamp").is_empty()
            && finalizers(&new).is_empty()
            && no_grace_left
        {
            let is_ns_blocked = key.resource == "namespaces"
                && key.group.is_empty()
                && new
                    .get("spec")
                    .and_then(|s| s.get("finalizers"))
                    .and_then(Value::as_array)
                    .is_some_and(|a| !a.is_empty());
            if !is_ns_blocked {
                return self
                    .store
                    .remove(key, ns, name, Some(new.clone()))
                    .unwrap_or(new);
            }
        }
        self.store.put(key, new, EventType::Modified)
    }

    /// Admission: kind-specific defaulting, CR schema pruning/defaulting/validation, metadata validation.
    fn admit(
        &self,
        info: &ResourceInfo,
        obj: &mut Value,
        old: Option<&Value>,
        opts: &WriteOpts,
    ) -> ApiResult<Vec<String>> {
        let name = object_name(obj);
        let mut causes = Vec::new();
        let mut warnings = Vec::new();
        if old.is_none()
            && let Some(c) = util::validate_name(&name, info.flavor == Flavor::Namespace)
        {
            causes.push(c);
        }
        if let Some(m) = meta(obj) {
            util::validate_labels_and_annotations(m, &mut causes);
        }
        match info.flavor {
            Flavor::Secret => fold_string_data(obj, &mut causes),
            Flavor::Namespace => {
                if obj.get("spec").and_then(|s| s.get("finalizers")).is_none() && old.is_none() {
                    obj["spec"] = json!({"finalizers": ["kubernetes"]});
                }
                if obj.get("status").and_then(|s| s.get("phase")).is_none() {
                    obj["status"] = json!({"phase": "Active"});
                }
                meta_mut(obj)
                    .entry("labels")
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
                    .map(|l| l.insert("kubernetes.io/metadata.name".into(), json!(name)));
            }
            Flavor::Pod => {
                if obj.get("status").and_then(|s| s.get("phase")).is_none() {
                    if !obj.get("status").is_some_and(Value::is_object) {
                        obj["status"] = json!({});
                    }
                    obj["status"]["phase"] = json!("Pending");
                }
            }
            Flavor::Crd => validate_crd(obj, old, &mut causes),
            Flavor::Custom => {
                if let Some(schema) = &info.schema {
                    let mut pruned = Vec::new();
                    schema::prune(obj, schema, "", true, &mut pruned);
                    if !pruned.is_empty() {
                        match opts.field_validation {
                            FieldValidation::Strict => {
                                let list: Vec<String> = pruned
                                    .iter()
                                    .map(|p| format!("unknown field \"{p}\""))
                                    .collect();
                                return Err(ApiError::bad_request(format!(
                                    "{}: {}",
                                    if list.len() == 1 {
                                        "strict decoding error"
                                    } else {
                                        "strict decoding errors"
                                    },
                                    list.join(", ")
                                )));
                            }
                            FieldValidation::Warn => {
                                warnings.extend(
                                    pruned.iter().map(|p| format!("unknown field \"{p}\"")),
                                );
                            }
                            FieldValidation::Ignore => {}
                        }
                    }
                    schema::apply_defaults(obj, schema, true);
                    schema::validate(obj, schema, "", true, &mut causes);
                    if causes.is_empty()
                        && let Some(raw) = &info.raw_schema
                    {
                        crate::cel::validate(obj, old, raw, &mut causes);
                    }
                }
            }
            Flavor::EventsV1 if old.is_none() => validate_events_v1(obj, &mut causes),
            // CSRs are checked in `csr_admission`, which knows the endpoint.
            Flavor::Plain | Flavor::CoreEvent | Flavor::EventsV1 | Flavor::Csr => {}
        }
        if !causes.is_empty() {
            return Err(ApiError::invalid(&info.group, &info.kind, &name, causes));
        }
        Ok(warnings)
    }

    /// Delete an object following DeleteOptions; returns the deleted (or now terminating) object.
    pub fn delete(
        &mut self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        opts: &DeleteOpts,
    ) -> ApiResult<Value> {
        let Some(old) = self.store.get(&info.storage, ns, name).cloned() else {
            return Err(ApiError::not_found(&info.group, &info.plural, name));
        };
        if let Some(uid) = &opts.precondition_uid
            && uid != meta_str(&old, "uid")
        {
            return Err(ApiError::conflict(
                &info.group,
                &info.plural,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(&old, "uid")
                ),
            ));
        }
        if let Some(rv) = &opts.precondition_rv
            && rv != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::conflict(
                &info.group,
                &info.plural,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta_str(&old, "resourceVersion")
                ),
            ));
        }
        let policy = match (&opts.propagation, opts.orphan_dependents) {
            (Some(p), _) => match p.as_str() {
                "Foreground" | "Background" | "Orphan" => Some(p.clone()),
                other => {
                    return Err(ApiError::invalid(
                        "meta.k8s.io",
                        "DeleteOptions",
                        "",
                        vec![Cause::new(
                            "FieldValueNotSupported",
                            "propagationPolicy",
                            format!(
                                "Unsupported value: {other:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
                            ),
                        )],
                    ));
                }
            },
            (None, Some(true)) => Some("Orphan".to_string()),
            (None, _) => None,
        };
        if opts.dry_run {
            return Ok(info.from_stored(&old));
        }
        if info.flavor == Flavor::Pod {
            let period = pod_grace_period(&old, opts.grace_period_seconds);
            if period > 0 {
                let out = self.mark_pod_terminating(&info.storage, &old, period);
                self.after_write(&info.storage);
                return Ok(info.from_stored(&out));
            }
        }
        let out = self.delete_stored(&info.storage, ns, name, policy.as_deref());
        self.after_write(&info.storage);
        Ok(out
            .map(|o| info.from_stored(&o))
            .unwrap_or_else(|| info.from_stored(&old)))
    }

    /// Graceful pod deletion (`BeforeDelete` in `k8s.io/apiserver/pkg/registry/rest/delete.go`):
    /// the pod stays with `deletionTimestamp = now + period` and `deletionGracePeriodSeconds`
    /// until its kubelet deletes it again with period 0; a later delete may only shorten
    /// the period, never lengthen it.
    fn mark_pod_terminating(&mut self, key: &StorageKey, old: &Value, period: i64) -> Value {
        let current = meta(old)
            .and_then(|m| m.get("deletionGracePeriodSeconds"))
            .and_then(Value::as_i64);
        let terminating = !meta_str(old, "deletionTimestamp").is_empty();
        if terminating && current.is_some_and(|c| c <= period) {
            return old.clone();
        }
        let mut new = old.clone();
        let at = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(period);
        let m = meta_mut(&mut new);
        m.insert(
            "deletionTimestamp".into(),
            json!(at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
        );
        m.insert("deletionGracePeriodSeconds".into(), json!(period));
        if let Some(g) = m.get("generation").and_then(Value::as_i64) {
            m.insert("generation".into(), json!(g + 1));
        }
        self.store.put(key, new, EventType::Modified)
    }

    /// Core deletion: add GC finalizers for the policy, then mark terminating or remove.
    fn delete_stored(
        &mut self,
        key: &StorageKey,
        ns: &str,
        name: &str,
        policy: Option<&str>,
    ) -> Option<Value> {
        let old = self.store.get(key, ns, name)?.clone();
        let mut new = old.clone();
        let mut fins = finalizers(&new);
        let extra = match policy {
            Some("Foreground") => Some(FOREGROUND),
            Some("Orphan") => Some(ORPHAN),
            _ => None,
        };
        if let Some(f) = extra
            && !fins.iter().any(|x| x == f)
        {
            fins.push(f.to_string());
            meta_mut(&mut new).insert("finalizers".into(), json!(fins));
        }
        let is_namespace = key.group.is_empty() && key.resource == "namespaces";
        let ns_blocked = is_namespace
            && new
                .get("spec")
                .and_then(|s| s.get("finalizers"))
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty());
        if fins.is_empty() && !ns_blocked {
            return self.store.remove(key, ns, name, None);
        }
        if meta_str(&new, "deletionTimestamp").is_empty() {
            let m = meta_mut(&mut new);
            if let Some(g) = m.get("generation").and_then(Value::as_i64)
                && g > 0
            {
                m.insert("generation".into(), json!(g + 1));
            }
            m.insert("deletionTimestamp".into(), json!(now_rfc3339()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            if is_namespace {
                new["status"] = json!({"phase": "Terminating"});
            }
            if key.group == "apiextensions.k8s.io" {
                set_condition(
                    &mut new,
                    "Terminating",
                    "True",
                    "InstanceDeletionPending",
                    "CustomResourceDefinition marked for deletion; instance deletion will begin soon",
                );
            }
        }
        if new == old {
            return Some(old);
        }
        Some(self.store.put(key, new, EventType::Modified))
    }

    /// Post-write hooks: registry refresh and controller work until nothing changes.
    fn after_write(&mut self, key: &StorageKey) {
        if key.group == "apiextensions.k8s.io" {
            self.rebuild_registry();
        }
        self.reconcile();
    }

    /// Emulate the garbage collector, namespace controller and CRD finalizer, synchronously.
    pub fn reconcile(&mut self) {
        let nskey = StorageKey::new("", "namespaces");
        let crdkey = StorageKey::new("apiextensions.k8s.io", "customresourcedefinitions");
        for _ in 0..64 {
            let mut changed = false;
            // Only what these controllers act on is copied: objects being deleted that carry
            // the orphan or foreground finalizer, dependents (objects with owner references),
            // terminating namespaces and CRDs. Copying every object on every write made each
            // write cost O(objects), and a mass deletion O(objects²).
            let mut owners: Vec<(StorageKey, Value)> = Vec::new();
            let mut with_refs: Vec<(StorageKey, Value)> = Vec::new();
            let mut terminating: Vec<(StorageKey, Value)> = Vec::new();
            for (k, v) in self.store.iter_all() {
                let deleting = !meta_str(v, "deletionTimestamp").is_empty();
                if deleting && finalizers(v).iter().any(|f| f == ORPHAN || f == FOREGROUND) {
                    owners.push((k.clone(), v.clone()));
                }
                if meta(v)
                    .and_then(|m| m.get("ownerReferences"))
                    .and_then(Value::as_array)
                    .is_some_and(|r| !r.is_empty())
                {
                    with_refs.push((k.clone(), v.clone()));
                }
                if deleting && (*k == nskey || *k == crdkey) {
                    terminating.push((k.clone(), v.clone()));
                }
            }
            let uids: HashSet<String> = if with_refs.is_empty() {
                HashSet::new()
            } else {
                self.store
                    .iter_all()
                    .map(|(_, v)| meta_str(v, "uid").to_string())
                    .collect()
            };
            // owners being deleted in the foreground or orphaning their dependents
            for (key, owner) in &owners {
                let fins = finalizers(owner);
                let uid = meta_str(owner, "uid").to_string();
                let ns = meta_str(owner, "namespace").to_string();
                let name = object_name(owner);
                let dependents: Vec<&(StorageKey, Value)> = with_refs
                    .iter()
                    .filter(|(_, d)| {
                        owner_refs(d)
                            .iter()
                            .any(|r| r.get("uid").and_then(Value::as_str) == Some(uid.as_str()))
                    })
                    .collect();
                if fins.iter().any(|f| f == ORPHAN) {
                    for (dk, d) in &dependents {
                        let mut nd = d.clone();
                        let refs: Vec<Value> = owner_refs(d)
                            .into_iter()
                            .filter(|r| r.get("uid").and_then(Value::as_str) != Some(uid.as_str()))
                            .collect();
                        set_owner_refs(&mut nd, refs);
                        self.store.put(dk, nd, EventType::Modified);
                    }
                    self.remove_finalizer(key, &ns, &name, ORPHAN);
                    changed = true;
                    break;
                }
                if fins.iter().any(|f| f == FOREGROUND) {
                    let mut acted = false;
                    for (dk, d) in &dependents {
                        if meta_str(d, "deletionTimestamp").is_empty() {
                            let blocking = owner_refs(d).iter().any(|r| {
                                r.get("uid").and_then(Value::as_str) == Some(uid.as_str())
                                    && r.get("blockOwnerDeletion").and_then(Value::as_bool)
                                        == Some(true)
                            });
                            let policy = if blocking { "Foreground" } else { "Background" };
                            let dns = meta_str(d, "namespace").to_string();
                            self.delete_stored(dk, &dns, &object_name(d), Some(policy));
                            acted = true;
                        }
                    }
                    let still_blocking = dependents.iter().any(|(dk, d)| {
                        self.store
                            .get(dk, meta_str(d, "namespace"), &object_name(d))
                            .is_some()
                            && owner_refs(d).iter().any(|r| {
                                r.get("uid").and_then(Value::as_str) == Some(uid.as_str())
                                    && r.get("blockOwnerDeletion").and_then(Value::as_bool)
                                        == Some(true)
                            })
                    });
                    if !acted && !still_blocking {
                        self.remove_finalizer(key, &ns, &name, FOREGROUND);
                        acted = true;
                    }
                    if acted {
                        changed = true;
                        break;
                    }
                }
            }
            if changed {
                continue;
            }
            // background collection: dependents whose owners are gone
            for (key, d) in &with_refs {
                let refs = owner_refs(d);
                if refs.is_empty() {
                    continue;
                }
                let (alive, dangling): (Vec<Value>, Vec<Value>) = refs.into_iter().partition(|r| {
                    r.get("uid")
                        .and_then(Value::as_str)
                        .is_some_and(|u| uids.contains(u))
                });
                if dangling.is_empty() {
                    continue;
                }
                let ns = meta_str(d, "namespace").to_string();
                let name = object_name(d);
                if alive.is_empty() {
                    if meta_str(d, "deletionTimestamp").is_empty() {
                        self.delete_stored(key, &ns, &name, Some("Background"));
                        changed = true;
                    }
                } else {
                    let mut nd = d.clone();
                    set_owner_refs(&mut nd, alive);
                    self.store.put(key, nd, EventType::Modified);
                    changed = true;
                }
            }
            if changed {
                continue;
            }
            // terminating namespaces: delete content, then the namespace
            for (_, n) in terminating.iter().filter(|(k, _)| *k == nskey) {
                let nsname = object_name(n);
                let content: Vec<(StorageKey, Value)> = self
                    .store
                    .iter_all()
                    .filter(|(_, v)| meta_str(v, "namespace") == nsname)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                for (k, v) in &content {
                    if meta_str(v, "deletionTimestamp").is_empty() {
                        self.delete_stored(k, &nsname, &object_name(v), Some("Background"));
                        changed = true;
                    }
                }
                if !self.store.namespace_has_objects(&nsname)
                    && let Some(cur) = self.store.get(&nskey, "", &nsname).cloned()
                {
                    let mut nn = cur;
                    nn["spec"] = json!({"finalizers": []});
                    self.commit(&nskey, "", &nsname, nn);
                    changed = true;
                }
            }
            if changed {
                continue;
            }
            // terminating CRDs: delete instances, then release the CRD
            for (_, crd) in terminating.iter().filter(|(k, _)| *k == crdkey) {
                if !finalizers(crd).iter().any(|f| f == CRD_CLEANUP) {
                    continue;
                }
                let group = crd
                    .pointer("/spec/group")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let plural = crd
                    .pointer("/spec/names/plural")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let ikey = StorageKey::new(group, plural);
                let instances: Vec<Value> =
                    self.store.list(&ikey, None).into_iter().cloned().collect();
                for i in &instances {
                    if meta_str(i, "deletionTimestamp").is_empty() {
                        self.delete_stored(
                            &ikey,
                            meta_str(i, "namespace"),
                            &object_name(i),
                            Some("Background"),
                        );
                        changed = true;
                    }
                }
                if self.store.list(&ikey, None).is_empty() {
                    self.remove_finalizer(&crdkey, "", &object_name(crd), CRD_CLEANUP);
                    self.rebuild_registry();
                    changed = true;
                }
            }
            if !changed {
                return;
            }
        }
        tracing::warn!("reconcile did not settle after 64 rounds");
    }

    fn remove_finalizer(&mut self, key: &StorageKey, ns: &str, name: &str, fin: &str) {
        let Some(cur) = self.store.get(key, ns, name).cloned() else {
            return;
        };
        let mut new = cur;
        let fins: Vec<String> = finalizers(&new).into_iter().filter(|f| f != fin).collect();
        let m = meta_mut(&mut new);
        if fins.is_empty() {
            m.remove("finalizers");
        } else {
            m.insert("finalizers".into(), json!(fins));
        }
        self.commit(key, ns, name, new);
    }
}

/// Creation rules of `events.k8s.io/v1` Events (checked on the stored core form,
/// reported with the events.k8s.io field names).
fn validate_events_v1(obj: &Value, causes: &mut Vec<Cause>) {
    let s = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or("");
    for (stored, field, limit) in [
        ("reportingComponent", "reportingController", 0usize),
        ("reportingInstance", "reportingInstance", 128),
        ("action", "action", 128),
        ("reason", "reason", 128),
    ] {
        let v = s(stored);
        if v.is_empty() {
            causes.push(Cause::new("FieldValueRequired", field, "Required value"));
        } else if limit > 0 && v.len() > limit {
            causes.push(Cause::new(
                "FieldValueTooLong",
                field,
                format!("Too long: may not be more than {limit} bytes"),
            ));
        }
    }
    if s("message").len() > 1024 {
        causes.push(Cause::new(
            "FieldValueTooLong",
            "note",
            "Too long: may not be more than 1024 bytes",
        ));
    }
    if s("eventTime").is_empty() {
        causes.push(Cause::new(
            "FieldValueRequired",
            "eventTime",
            "Required value",
        ));
    }
    let t = s("type");
    if t != "Normal" && t != "Warning" {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "type",
            format!("Invalid value: {t:?}: has invalid value: {t}"),
        ));
    }
}

fn set_owner_refs(obj: &mut Value, refs: Vec<Value>) {
    let m = meta_mut(obj);
    if refs.is_empty() {
        m.remove("ownerReferences");
    } else {
        m.insert("ownerReferences".into(), Value::Array(refs));
    }
}

/// A CertificateSigningRequest's strategy and validation ([`crate::csr`]);
/// nothing for other kinds.
fn csr_admission(
    info: &ResourceInfo,
    obj: &mut Value,
    old: Option<&Value>,
    sub: Sub,
    opts: &WriteOpts,
) -> ApiResult<()> {
    if info.flavor != Flavor::Csr {
        return Ok(());
    }
    let endpoint = match sub {
        Sub::Main => crate::csr::Endpoint::Main,
        Sub::Status => crate::csr::Endpoint::Status,
        Sub::Approval => crate::csr::Endpoint::Approval,
    };
    match old {
        None => {
            let admin = crate::review::ReviewUser {
                username: "system:admin".into(),
                uid: String::new(),
                groups: vec!["system:masters".into(), "system:authenticated".into()],
            };
            crate::csr::prepare_create(obj, opts.user.as_ref().unwrap_or(&admin));
        }
        Some(old) => crate::csr::prepare_update(obj, old, endpoint),
    }
    let mut causes = Vec::new();
    crate::csr::validate(obj, old, endpoint, &mut causes);
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(
            &info.group,
            &info.kind,
            &object_name(obj),
            causes,
        ))
    }
}

/// Field ownership parameters for a write through `info`.
fn ownership<'a>(info: &ResourceInfo, manager: &'a str, sub: Sub) -> Ownership<'a> {
    Ownership {
        manager,
        subresource: match sub {
            Sub::Main => "",
            Sub::Status => "status",
            Sub::Approval => "approval",
        },
        api_version: info.api_version(),
        scope: match (sub, info.status_subresource) {
            (Sub::Status | Sub::Approval, _) => Some(true),
            (Sub::Main, true) => Some(false),
            (Sub::Main, false) => None,
        },
    }
}

/// Check apiVersion/kind/namespace of a request body and fill the namespace.
fn prepare_body(info: &ResourceInfo, ns: &str, body: Value) -> ApiResult<Value> {
    let Value::Object(mut m) = body else {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    };
    if let Some(av) = m.get("apiVersion").and_then(Value::as_str)
        && !av.is_empty()
        && av != info.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            info.api_version()
        )));
    }
    if let Some(k) = m.get("kind").and_then(Value::as_str)
        && !k.is_empty()
        && k != info.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind ({})",
            info.kind
        )));
    }
    let mut obj = Value::Object(std::mem::take(&mut m));
    let meta = meta_mut(&mut obj);
    if info.namespaced {
        let bns = meta.get("namespace").and_then(Value::as_str).unwrap_or("");
        if !bns.is_empty() && bns != ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        meta.insert("namespace".into(), json!(ns));
    } else {
        meta.remove("namespace");
    }
    Ok(obj)
}

/// The grace period of a pod deletion (`podStrategy.CheckGracefulDelete` in
/// `pkg/registry/core/pod/strategy.go`): the request's `gracePeriodSeconds`, else the pod's
/// `terminationGracePeriodSeconds` (defaulted to 30 by the real server on create); 0 for a
/// pod not bound to a node or already Succeeded/Failed; a negative value becomes 1.
pub fn pod_grace_period(pod: &Value, requested: Option<i64>) -> i64 {
    let spec = pod.get("spec");
    let mut period = requested.unwrap_or_else(|| {
        spec.and_then(|s| s.get("terminationGracePeriodSeconds"))
            .and_then(Value::as_i64)
            .unwrap_or(30)
    });
    let node = spec
        .and_then(|s| s.get("nodeName"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let phase = pod
        .get("status")
        .and_then(|s| s.get("phase"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if node.is_empty() || phase == "Succeeded" || phase == "Failed" {
        period = 0;
    }
    if period < 0 {
        period = 1;
    }
    period
}

/// Set the fields the server owns on create.
fn reset_system_meta(info: &ResourceInfo, obj: &mut Value) {
    let m = meta_mut(obj);
    m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    m.insert("creationTimestamp".into(), json!(now_rfc3339()));
    m.remove("deletionTimestamp");
    m.remove("deletionGracePeriodSeconds");
    m.remove("resourceVersion");
    m.remove("selfLink");
    if info.generation {
        m.insert("generation".into(), json!(1));
    } else {
        m.remove("generation");
    }
}

/// Kind-specific create normalisation (`PrepareForCreate` in the real strategies).
fn prepare_for_create(info: &ResourceInfo, obj: &mut Value) {
    let drop_status = match info.flavor {
        Flavor::Custom | Flavor::Crd => info.status_subresource,
        Flavor::Pod | Flavor::Namespace => true,
        _ => info.plural == "services",
    };
    if drop_status && let Value::Object(m) = obj {
        m.remove("status");
    }
    if info.flavor == Flavor::Crd {
        let m = meta_mut(obj);
        let mut fins: Vec<Value> = m
            .get("finalizers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if !fins.iter().any(|f| f == CRD_CLEANUP) {
            fins.push(json!(CRD_CLEANUP));
        }
        m.insert("finalizers".into(), Value::Array(fins));
    }
}

/// Whether a stored object matches label and field selectors.
pub fn matches(
    info: &ResourceInfo,
    obj: &Value,
    labels: &LabelSelector,
    fields: &FieldSelector,
) -> bool {
    if !labels.matches(obj) {
        return false;
    }
    if fields.0.is_empty() {
        return true;
    }
    let translated = FieldSelector(
        fields
            .0
            .iter()
            .map(|r| crate::selectors::FieldReq {
                path: info.stored_field_path(&r.path),
                value: r.value.clone(),
                negated: r.negated,
            })
            .collect(),
    );
    translated.matches(obj)
}

/// Secret `stringData` is write-only: merge it into base64 `data`.
fn fold_string_data(obj: &mut Value, causes: &mut Vec<Cause>) {
    let Value::Object(m) = obj else { return };
    if let Some(sd) = m.remove("stringData") {
        match sd {
            Value::Object(sd) => {
                let data = m.entry("data").or_insert_with(|| json!({}));
                if !data.is_object() {
                    *data = json!({});
                }
                for (k, v) in sd {
                    let s = v.as_str().unwrap_or_default();
                    data[k] = json!(util::base64_encode(s.as_bytes()));
                }
            }
            Value::Null => {}
            _ => causes.push(Cause::new(
                "FieldValueTypeInvalid",
                "stringData",
                "Invalid value: must be a map of strings",
            )),
        }
    }
    if let Some(Value::Object(data)) = m.get("data") {
        for (k, v) in data {
            if v.as_str().is_none_or(|s| util::base64_decode(s).is_none()) {
                causes.push(Cause::new(
                    "FieldValueInvalid",
                    format!("data[{k}]"),
                    "Invalid value: illegal base64 data",
                ));
            }
        }
    }
    m.entry("type").or_insert_with(|| json!("Opaque"));
}

fn set_condition(obj: &mut Value, type_: &str, status: &str, reason: &str, message: &str) {
    if !obj.get("status").is_some_and(Value::is_object) {
        obj["status"] = json!({});
    }
    let conds = obj["status"]
        .as_object_mut()
        .map(|s| s.entry("conditions").or_insert_with(|| json!([])));
    let Some(Value::Array(conds)) = conds else {
        return;
    };
    if let Some(c) = conds
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
    {
        if c.get("status").and_then(Value::as_str) != Some(status) {
            c["lastTransitionTime"] = json!(now_rfc3339());
        }
        c["status"] = json!(status);
        c["reason"] = json!(reason);
        c["message"] = json!(message);
    } else {
        conds.push(json!({
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": now_rfc3339(),
        }));
    }
}

/// What the CRD controllers would write into a CRD's status.
fn set_crd_status(obj: &mut Value, old: Option<&Value>) {
    let mut names = obj
        .pointer("/spec/names")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let Value::Object(n) = &mut names {
        let kind = n
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        n.entry("singular")
            .or_insert_with(|| json!(kind.to_lowercase()));
        n.entry("listKind")
            .or_insert_with(|| json!(format!("{kind}List")));
    }
    if let Some(o) = old
        && let Some(s) = o.get("status")
    {
        obj["status"] = s.clone();
    }
    set_condition(
        obj,
        "NamesAccepted",
        "True",
        "NoConflicts",
        "no conflicts found",
    );
    set_condition(
        obj,
        "Established",
        "True",
        "InitialNamesAccepted",
        "the initial names have been accepted",
    );
    obj["status"]["acceptedNames"] = names;
    let mut stored: Vec<Value> = obj
        .pointer("/status/storedVersions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(sv) = obj
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|vs| {
            vs.iter()
                .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        })
        .and_then(|v| v.get("name"))
        .cloned()
        && !stored.contains(&sv)
    {
        stored.push(sv);
    }
    obj["status"]["storedVersions"] = Value::Array(stored);
}

/// The subset of CRD validation that catches real mistakes in test fixtures.
fn validate_crd(obj: &Value, old: Option<&Value>, causes: &mut Vec<Cause>) {
    let name = object_name(obj);
    let group = obj
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or("");
    let plural = obj
        .pointer("/spec/names/plural")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = obj
        .pointer("/spec/names/kind")
        .and_then(Value::as_str)
        .unwrap_or("");
    if group.is_empty() {
        causes.push(Cause::new(
            "FieldValueRequired",
            "spec.group",
            "Required value",
        ));
    } else if !group.contains('.') {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "spec.group",
            format!("Invalid value: {group:?}: should be a domain with at least one dot"),
        ));
    }
    if plural.is_empty() {
        causes.push(Cause::new(
            "FieldValueRequired",
            "spec.names.plural",
            "Required value",
        ));
    } else if !util::is_dns_subdomain(plural) || plural.contains('.') {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "spec.names.plural",
            format!("Invalid value: {plural:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'"),
        ));
    }
    if kind.is_empty() {
        causes.push(Cause::new(
            "FieldValueRequired",
            "spec.names.kind",
            "Required value",
        ));
    }
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "metadata.name",
            format!("Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    match obj.pointer("/spec/scope").and_then(Value::as_str) {
        Some("Namespaced") | Some("Cluster") => {}
        other => causes.push(Cause::new(
            "FieldValueNotSupported",
            "spec.scope",
            format!(
                "Unsupported value: {:?}: supported values: \"Cluster\", \"Namespaced\"",
                other.unwrap_or("")
            ),
        )),
    }
    if let Some(o) = old {
        let old_scope = o.pointer("/spec/scope");
        if old_scope != obj.pointer("/spec/scope") {
            causes.push(Cause::new(
                "FieldValueInvalid",
                "spec.scope",
                "Invalid value: field is immutable",
            ));
        }
    }
    let versions = obj
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        causes.push(Cause::new(
            "FieldValueRequired",
            "spec.versions",
            "Required value: must have exactly one version marked as storage version",
        ));
    }
    let storage_count = versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .count();
    if !versions.is_empty() && storage_count != 1 {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "spec.versions",
            "Invalid value: must have exactly one version marked as storage version",
        ));
    }
    let shared_schema = versions.windows(2).all(|w| {
        w[0].pointer("/schema/openAPIV3Schema") == w[1].pointer("/schema/openAPIV3Schema")
    });
    for (i, v) in versions.iter().enumerate() {
        match v.pointer("/schema/openAPIV3Schema") {
            None => causes.push(Cause::new(
                "FieldValueRequired",
                format!("spec.versions[{i}].schema.openAPIV3Schema"),
                "Required value: schemas are required",
            )),
            Some(s) => {
                if let Err(e) = schema::Schema::parse(s) {
                    causes.push(Cause::new(
                        "FieldValueInvalid",
                        format!("spec.versions[{i}].schema.{e}"),
                        "Invalid value: invalid schema",
                    ));
                } else if let schema_errors = crate::crd_schema::schema_causes(
                    s,
                    &if shared_schema {
                        "spec.validation.openAPIV3Schema".to_string()
                    } else {
                        format!("spec.versions[{i}].schema.openAPIV3Schema")
                    },
                ) && !schema_errors.is_empty()
                {
                    // the server skips CEL checks of a schema that has schema errors
                    if i == 0 || !shared_schema {
                        causes.extend(schema_errors);
                    }
                } else if let Err(e) = crate::cel::compile_all(s) {
                    causes.push(Cause::new(
                        "FieldValueInvalid",
                        format!("spec.versions[{i}].schema.openAPIV3Schema"),
                        format!("Invalid value: compilation failed: {e}"),
                    ));
                } else if i == 0 || !shared_schema {
                    // the server validates a schema all versions share once, under the
                    // internal API's spec.validation
                    let prefix = if shared_schema {
                        "spec.validation.".to_string()
                    } else {
                        format!("spec.versions[{i}].schema.")
                    };
                    causes.extend(crate::cel_cost::budget_causes(s, &prefix));
                }
            }
        }
    }
}

/// Build an empty `metadata`-only JSON map (helper for callers building lists).
pub fn list_meta(rv: u64) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("resourceVersion".into(), json!(rv.to_string()));
    m
}
