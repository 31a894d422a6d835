//! A read-only view of a [`Cloud`] that records the writes it is asked for instead of sending
//! them: the port behind `openstack-operator plan`.
//!
//! Running the reconcilers themselves on it (rather than a second planner) is what makes a plan
//! say what a pass would do: reads go to the real cloud, every write becomes an [`Intent`] in
//! the [`Journal`] and answers with the object the service would have returned, so the pass
//! goes on as it would. Objects created that way get a placeholder ID ([`is_new_id`]) and live
//! in an overlay that later reads of the same plan see (a project's group on a project not
//! created yet, the domain a project names, made by an OpenstackDomain of the same plan).
//!
//! Read-only by construction: the wrapped cloud is reached only through its read methods;
//! no write method of this type calls the wrapped one (the unit tests check it on a fake that
//! counts writes). The same holds for the users and application credentials of tenant
//! credentials ([`tenant`]).

mod tenant;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::error::{Error, Result};
use crate::model::*;
use crate::traits::{BlockStorage, Cloud, Compute, Identity, Image, Network};

/// Prefix of the IDs given to objects a plan would create.
pub const NEW_ID_PREFIX: &str = "known-after-apply-";

/// Whether `id` is a placeholder of an object a plan would create.
pub fn is_new_id(id: &str) -> bool {
    id.starts_with(NEW_ID_PREFIX)
}

/// What a write would do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// A new object (or link, such as a role assignment).
    Create,
    /// A change of an existing object.
    Update,
    /// A removal.
    Delete,
}

/// One field of a write: its value before (when known) and after.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FieldChange {
    /// Field name as the service calls it (e.g. `description`, `cores`).
    pub field: String,
    /// Value read from the cloud before; `None` when the object is new or was not read.
    pub old: Option<Value>,
    /// Value the write sets; `None` when the write removes the field.
    pub new: Option<Value>,
}

/// One write the reconciler asked for.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Intent {
    /// Create, update or delete.
    pub op: Op,
    /// Service (`identity`, `compute`, `image`, `network`, `block-storage`).
    pub service: &'static str,
    /// What is written, e.g. `project`, `security group rule`, `role assignment`.
    pub kind: &'static str,
    /// Human label: the name, or a summary for objects without one (a rule, an assignment).
    pub label: String,
    /// The existing object's ID; `None` for a create or a placeholder.
    pub id: Option<String>,
    /// The fields written (for a create: every field set; for a delete: none).
    pub changes: Vec<FieldChange>,
}

#[derive(Default)]
struct State {
    intents: Vec<Intent>,
    /// Objects read, by (kind, id), as JSON: the "before" of an update and the label of a
    /// delete.
    seen: HashMap<(&'static str, String), Value>,
    /// Objects this plan would create, by kind.
    overlay: HashMap<&'static str, Vec<Value>>,
    /// Objects this plan would delete, by (kind, id): a later read of the same plan must not
    /// find them (a pass that loops, as a credential rotation does, would delete them again).
    deleted: HashSet<(&'static str, String)>,
    /// Role assignments this plan would grant (project, actor, role): a grant is a PUT, so
    /// the same one asked twice in a plan is one change.
    granted: HashSet<(String, Actor, String)>,
    /// Role assignments this plan would revoke: granted again, they are a change although
    /// the cloud still holds them.
    revoked: HashSet<(String, Actor, String)>,
}

/// The writes a dry run was asked for, in order.
#[derive(Default)]
pub struct Journal {
    state: Mutex<State>,
    next: AtomicU64,
}

impl Journal {
    /// Removes and returns the intents recorded so far (per resource of a plan).
    pub fn take(&self) -> Vec<Intent> {
        std::mem::take(&mut self.lock().intents)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn new_id(&self, kind: &str) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("{NEW_ID_PREFIX}{}-{n}", kind.replace(' ', "-"))
    }

    fn remember<T: Serialize>(&self, kind: &'static str, obj: &T) {
        if let Ok(v) = serde_json::to_value(obj)
            && let Some(id) = v.get("id").and_then(Value::as_str)
        {
            let id = id.to_string();
            self.lock().seen.insert((kind, id), v);
        }
    }

    fn remember_as<T: Serialize>(&self, kind: &'static str, id: &str, obj: &T) {
        if let Ok(v) = serde_json::to_value(obj) {
            self.lock().seen.insert((kind, id.to_string()), v);
        }
    }

    fn seen(&self, kind: &'static str, id: &str) -> Option<Value> {
        let st = self.lock();
        st.seen.get(&(kind, id.to_string())).cloned().or_else(|| {
            st.overlay
                .get(kind)
                .and_then(|objs| objs.iter().find(|o| id_of(o) == Some(id)).cloned())
        })
    }

    fn overlay<T: DeserializeOwned>(&self, kind: &'static str) -> Vec<T> {
        self.lock()
            .overlay
            .get(kind)
            .map(|objs| {
                objs.iter()
                    .filter_map(|o| serde_json::from_value(o.clone()).ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn overlay_get<T: DeserializeOwned>(&self, kind: &'static str, id: &str) -> Result<T> {
        let st = self.lock();
        st.overlay
            .get(kind)
            .and_then(|objs| objs.iter().find(|o| id_of(o) == Some(id)))
            .and_then(|o| serde_json::from_value(o.clone()).ok())
            .ok_or_else(|| Error::not_found(format!("{kind} {id} (dry run)")))
    }

    fn overlay_put(&self, kind: &'static str, obj: Value) {
        let mut st = self.lock();
        let objs = st.overlay.entry(kind).or_default();
        match objs.iter_mut().find(|o| id_of(o) == id_of(&obj)) {
            Some(o) => *o = obj,
            None => objs.push(obj),
        }
    }

    fn overlay_remove(&self, kind: &'static str, id: &str) {
        if let Some(objs) = self.lock().overlay.get_mut(kind) {
            objs.retain(|o| id_of(o) != Some(id));
        }
    }

    fn record(&self, intent: Intent) {
        self.lock().intents.push(intent);
    }

    fn is_deleted(&self, kind: &'static str, id: &str) -> bool {
        self.lock().deleted.contains(&(kind, id.to_string()))
    }

    /// Records a write to Kubernetes a pass would make besides its status and Events (the
    /// Secret a tenant credential is delivered in): `plan`'s read-only client calls it. The
    /// label names the object (`namespace/name`); `changes` must never carry a secret.
    pub fn record_kubernetes(
        &self,
        op: Op,
        kind: &'static str,
        label: String,
        changes: Vec<FieldChange>,
    ) {
        self.link(op, KUBERNETES, kind, label, changes);
    }

    /// Records a create of `req` and returns the object the service would answer, with a
    /// placeholder ID unless the request names one (`id` field).
    fn create<T: Serialize + DeserializeOwned + Default>(
        &self,
        service: &'static str,
        kind: &'static str,
        req: &impl Serialize,
    ) -> Result<T> {
        let req = to_object(req);
        let id = req
            .get("id")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| self.new_id(kind));
        let mut obj = to_object(&T::default());
        for (k, v) in &req {
            if obj.contains_key(k) && !v.is_null() {
                obj.insert(k.clone(), v.clone());
            }
        }
        obj.insert("id".into(), Value::String(id));
        let obj = Value::Object(obj);
        let out: T = serde_json::from_value(obj.clone())
            .map_err(|e| Error::bad_request(format!("dry run of a {kind} create: {e}")))?;
        self.overlay_put(kind, obj);
        self.record(Intent {
            op: Op::Create,
            service,
            kind,
            label: label_of(kind, &Value::Object(req.clone()), None),
            id: None,
            changes: set_fields(&req, None),
        });
        Ok(out)
    }

    /// Records an update of `id` by `req` (its non-null fields) and returns the object as it
    /// would be after it.
    fn update<T: Serialize + DeserializeOwned + Default>(
        &self,
        service: &'static str,
        kind: &'static str,
        id: &str,
        req: &impl Serialize,
    ) -> Result<T> {
        let req = to_object(req);
        let before = self.seen(kind, id);
        let mut after = before
            .as_ref()
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_else(|| to_object(&T::default()));
        for (k, v) in &req {
            if !v.is_null() {
                after.insert(k.clone(), v.clone());
            }
        }
        after.insert("id".into(), Value::String(id.to_string()));
        let after = Value::Object(after);
        self.record(Intent {
            op: Op::Update,
            service,
            kind,
            label: label_of(kind, before.as_ref().unwrap_or(&after), Some(id)),
            id: (!is_new_id(id)).then(|| id.to_string()),
            changes: set_fields(&req, before.as_ref()),
        });
        if is_new_id(id) {
            self.overlay_put(kind, after.clone());
        } else {
            self.lock()
                .seen
                .insert((kind, id.to_string()), after.clone());
        }
        serde_json::from_value(after)
            .map_err(|e| Error::bad_request(format!("dry run of a {kind} update: {e}")))
    }

    /// Records a delete of `id`.
    fn delete(&self, service: &'static str, kind: &'static str, id: &str) -> Result<()> {
        let before = self.seen(kind, id);
        self.record(Intent {
            op: Op::Delete,
            service,
            kind,
            label: label_of(kind, before.as_ref().unwrap_or(&Value::Null), Some(id)),
            id: (!is_new_id(id)).then(|| id.to_string()),
            changes: Vec::new(),
        });
        self.overlay_remove(kind, id);
        self.lock().deleted.insert((kind, id.to_string()));
        Ok(())
    }

    /// Records a write that is neither an object's create nor its field update (a link, a
    /// membership, a tag set, an import).
    fn link(
        &self,
        op: Op,
        service: &'static str,
        kind: &'static str,
        label: String,
        changes: Vec<FieldChange>,
    ) {
        self.record(Intent {
            op,
            service,
            kind,
            label,
            id: None,
            changes,
        });
    }

    /// Records a project's quota update (`kind`: "compute quota", …) as old → new limits,
    /// from the quota read before it.
    fn quota_update(
        &self,
        service: &'static str,
        kind: &'static str,
        project_id: &str,
        limits: &QuotaUpdate,
    ) {
        let before = self.seen(kind, project_id);
        self.link(
            Op::Update,
            service,
            kind,
            format!("project {}", self.name_of("project", project_id)),
            quota_changes(before, limits),
        );
    }

    /// A name for an ID: the object's name when it was read or is planned, else the ID.
    fn name_of(&self, kind: &'static str, id: &str) -> String {
        self.seen(kind, id)
            .and_then(|v| v.get("name").and_then(Value::as_str).map(str::to_string))
            .unwrap_or_else(|| shown_id(id))
    }
}

fn id_of(v: &Value) -> Option<&str> {
    v.get("id").and_then(Value::as_str)
}

/// `id`, or "(known after apply)" for a placeholder.
pub fn shown_id(id: &str) -> String {
    if is_new_id(id) {
        "(known after apply)".to_string()
    } else {
        id.to_string()
    }
}

fn to_object(v: &impl Serialize) -> Map<String, Value> {
    match serde_json::to_value(v) {
        Ok(Value::Object(m)) => m,
        Ok(other) => {
            let mut m = Map::new();
            m.insert("value".into(), other);
            m
        }
        Err(_) => Map::new(),
    }
}

/// The non-null fields of a request, with their value in `before` when it was read.
fn set_fields(req: &Map<String, Value>, before: Option<&Value>) -> Vec<FieldChange> {
    req.iter()
        .filter(|(k, v)| !v.is_null() && k.as_str() != "id")
        .filter(|(_, v)| !matches!(v, Value::Array(a) if a.is_empty()))
        .filter(|(_, v)| !matches!(v, Value::Object(o) if o.is_empty()))
        .map(|(k, v)| FieldChange {
            field: k.clone(),
            old: before.and_then(|b| b.get(k)).cloned(),
            new: Some(v.clone()),
        })
        .filter(|c| c.old.as_ref() != c.new.as_ref())
        .collect()
}

/// A label for an object: its name, or a summary for kinds without one.
fn label_of(kind: &str, obj: &Value, id: Option<&str>) -> String {
    let s = |k: &str| obj.get(k).and_then(Value::as_str).map(str::to_string);
    let n = |k: &str| obj.get(k).and_then(Value::as_i64);
    if kind == "security group rule" {
        let ports = match (n("port_range_min"), n("port_range_max")) {
            (Some(a), Some(b)) if a == b => format!(" port {a}"),
            (Some(a), Some(b)) => format!(" ports {a}-{b}"),
            _ => String::new(),
        };
        let remote = s("remote_ip_prefix")
            .or_else(|| s("remote_group_id").map(|g| format!("group {}", shown_id(&g))))
            .unwrap_or_else(|| "anywhere".into());
        if obj.get("direction").is_some() {
            return format!(
                "{} {} {}{} {} {}",
                s("direction").unwrap_or_default(),
                s("ethertype").unwrap_or_default(),
                s("protocol").unwrap_or_else(|| "any".into()),
                ports,
                if s("direction").as_deref() == Some("egress") {
                    "to"
                } else {
                    "from"
                },
                remote
            );
        }
    }
    s("name")
        .filter(|n| !n.is_empty())
        .or_else(|| id.map(shown_id))
        .unwrap_or_default()
}

fn quota_limits(q: &QuotaSet) -> Value {
    Value::Object(q.iter().map(|(k, v)| (k.clone(), json!(v.limit))).collect())
}

fn quota_changes(before: Option<Value>, limits: &QuotaUpdate) -> Vec<FieldChange> {
    limits
        .iter()
        .map(|(k, v)| FieldChange {
            field: k.clone(),
            old: before.as_ref().and_then(|b| b.get(k)).cloned(),
            new: Some(json!(v)),
        })
        .collect()
}

/// The dry-run view of `inner` and the journal of what it was asked to write.
pub fn dry_run(inner: Cloud) -> (Cloud, Arc<Journal>) {
    let journal = Arc::new(Journal::default());
    let d = Arc::new(DryRun {
        inner,
        j: journal.clone(),
    });
    let cloud = Cloud {
        identity: d.clone(),
        compute: d.clone(),
        image: d.clone(),
        network: d.clone(),
        block_storage: d,
    };
    (cloud, journal)
}

struct DryRun {
    inner: Cloud,
    j: Arc<Journal>,
}

impl DryRun {
    /// A read of one object: placeholders from the overlay, others from the cloud (and the
    /// overlay when the cloud has none: an object with a caller-chosen ID this plan creates).
    async fn get<T: Serialize + DeserializeOwned>(
        &self,
        kind: &'static str,
        id: &str,
        read: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        if is_new_id(id) {
            return self.j.overlay_get(kind, id);
        }
        match read.await {
            Ok(v) => {
                self.j.remember(kind, &v);
                Ok(v)
            }
            Err(e) if e.is_not_found() => self.j.overlay_get(kind, id).map_err(|_| e),
            Err(e) => Err(e),
        }
    }

    /// A list: the cloud's objects (unless a placeholder is in the filter) and the planned
    /// ones matching the filter's set scalar fields.
    async fn list<T: Serialize + DeserializeOwned>(
        &self,
        kind: &'static str,
        filter: &impl Serialize,
        read: impl std::future::Future<Output = Result<Vec<T>>>,
    ) -> Result<Vec<T>> {
        let f = to_object(filter);
        let placeholder = f.values().any(|v| v.as_str().is_some_and(is_new_id));
        let mut out = if placeholder { Vec::new() } else { read.await? };
        for v in &out {
            self.j.remember(kind, v);
        }
        let planned: Vec<Value> = self.j.overlay(kind);
        for o in planned {
            let matches = f.iter().all(|(k, want)| match want {
                Value::String(_) | Value::Bool(_) | Value::Number(_) => o.get(k) == Some(want),
                _ => true,
            });
            if matches && let Ok(t) = serde_json::from_value(o) {
                out.push(t);
            }
        }
        Ok(out)
    }

    /// A find by name: the cloud's (unless the scope is a placeholder), else a planned one.
    async fn find<T: Serialize + DeserializeOwned>(
        &self,
        kind: &'static str,
        scope: Option<(&str, &str)>,
        name: &str,
        read: impl std::future::Future<Output = Result<Option<T>>>,
    ) -> Result<Option<T>> {
        let in_placeholder = scope.is_some_and(|(_, v)| is_new_id(v));
        if !in_placeholder && let Some(v) = read.await? {
            self.j.remember(kind, &v);
            return Ok(Some(v));
        }
        let planned: Vec<Value> = self.j.overlay(kind);
        Ok(planned
            .into_iter()
            .find(|o| {
                o.get("name").and_then(Value::as_str) == Some(name)
                    && scope.is_none_or(|(k, v)| o.get(k).and_then(Value::as_str) == Some(v))
            })
            .and_then(|o| serde_json::from_value(o).ok()))
    }

    fn actor_label(&self, actor: &Actor) -> String {
        match actor {
            Actor::User(id) => format!("user {}", self.j.name_of("user", id)),
            Actor::Group(id) => format!("group {}", self.j.name_of("group", id)),
        }
    }

    fn role_label(&self, role_id: &str) -> String {
        self.j.name_of("role", role_id)
    }
}

const IDENTITY: &str = "identity";
const COMPUTE: &str = "compute";
const IMAGE: &str = "image";
const NETWORK: &str = "network";
const BLOCK_STORAGE: &str = "block-storage";
const KUBERNETES: &str = "kubernetes";

#[async_trait]
impl Identity for DryRun {
    fn tenant_users(&self) -> Option<Arc<dyn crate::tenant_user::TenantUsers>> {
        let inner = self.inner.identity.tenant_users()?;
        Some(Arc::new(tenant::DryRunTenantUsers::new(
            inner,
            self.inner.identity.clone(),
            self.j.clone(),
        )))
    }
    async fn get_domain(&self, id: &str) -> Result<Domain> {
        self.get("domain", id, self.inner.identity.get_domain(id))
            .await
    }
    async fn find_domain(&self, name: &str) -> Result<Option<Domain>> {
        self.find("domain", None, name, self.inner.identity.find_domain(name))
            .await
    }
    async fn list_domains(&self) -> Result<Vec<Domain>> {
        self.list("domain", &(), self.inner.identity.list_domains())
            .await
    }
    async fn create_domain(&self, req: &DomainCreate) -> Result<Domain> {
        self.j.create(IDENTITY, "domain", req)
    }
    async fn update_domain(&self, id: &str, req: &DomainUpdate) -> Result<Domain> {
        self.j.update(IDENTITY, "domain", id, req)
    }
    async fn delete_domain(&self, id: &str) -> Result<()> {
        self.j.delete(IDENTITY, "domain", id)
    }
    async fn set_domain_tags(&self, id: &str, tags: &[String]) -> Result<()> {
        self.j
            .update::<Domain>(IDENTITY, "domain", id, &json!({ "tags": tags }))
            .map(|_| ())
    }

    async fn get_project(&self, id: &str) -> Result<Project> {
        self.get("project", id, self.inner.identity.get_project(id))
            .await
    }
    async fn find_project(&self, domain_id: &str, name: &str) -> Result<Option<Project>> {
        self.find(
            "project",
            Some(("domain_id", domain_id)),
            name,
            self.inner.identity.find_project(domain_id, name),
        )
        .await
    }
    async fn list_projects(&self, filter: &ProjectFilter) -> Result<Vec<Project>> {
        self.list("project", filter, self.inner.identity.list_projects(filter))
            .await
    }
    async fn create_project(&self, req: &ProjectCreate) -> Result<Project> {
        self.j.create(IDENTITY, "project", req)
    }
    async fn update_project(&self, id: &str, req: &ProjectUpdate) -> Result<Project> {
        self.j.update(IDENTITY, "project", id, req)
    }
    async fn delete_project(&self, id: &str) -> Result<()> {
        self.j.delete(IDENTITY, "project", id)
    }

    async fn get_group(&self, id: &str) -> Result<Group> {
        self.get("group", id, self.inner.identity.get_group(id))
            .await
    }
    async fn find_group(&self, domain_id: &str, name: &str) -> Result<Option<Group>> {
        self.find(
            "group",
            Some(("domain_id", domain_id)),
            name,
            self.inner.identity.find_group(domain_id, name),
        )
        .await
    }
    async fn list_groups(&self, domain_id: Option<&str>) -> Result<Vec<Group>> {
        self.list(
            "group",
            &json!({ "domain_id": domain_id }),
            self.inner.identity.list_groups(domain_id),
        )
        .await
    }
    async fn create_group(&self, req: &GroupCreate) -> Result<Group> {
        self.j.create(IDENTITY, "group", req)
    }
    async fn update_group(&self, id: &str, req: &GroupUpdate) -> Result<Group> {
        self.j.update(IDENTITY, "group", id, req)
    }
    async fn delete_group(&self, id: &str) -> Result<()> {
        self.j.delete(IDENTITY, "group", id)
    }
    async fn list_group_users(&self, group_id: &str) -> Result<Vec<User>> {
        if is_new_id(group_id) {
            return Ok(Vec::new());
        }
        let users = self.inner.identity.list_group_users(group_id).await?;
        for u in &users {
            self.j.remember("user", u);
        }
        Ok(users)
    }
    async fn add_user_to_group(&self, group_id: &str, user_id: &str) -> Result<()> {
        let label = format!(
            "user {} in group {}",
            self.j.name_of("user", user_id),
            self.j.name_of("group", group_id)
        );
        self.j
            .link(Op::Create, IDENTITY, "group membership", label, Vec::new());
        Ok(())
    }
    async fn remove_user_from_group(&self, group_id: &str, user_id: &str) -> Result<()> {
        let label = format!(
            "user {} in group {}",
            self.j.name_of("user", user_id),
            self.j.name_of("group", group_id)
        );
        self.j
            .link(Op::Delete, IDENTITY, "group membership", label, Vec::new());
        Ok(())
    }

    async fn get_user(&self, id: &str) -> Result<User> {
        self.get("user", id, self.inner.identity.get_user(id)).await
    }
    async fn find_user(&self, domain_id: &str, name: &str) -> Result<Option<User>> {
        self.find(
            "user",
            Some(("domain_id", domain_id)),
            name,
            self.inner.identity.find_user(domain_id, name),
        )
        .await
    }

    async fn find_role(&self, name: &str) -> Result<Option<Role>> {
        let r = self.inner.identity.find_role(name).await?;
        if let Some(r) = &r {
            self.j.remember("role", r);
        }
        Ok(r)
    }
    async fn list_roles(&self) -> Result<Vec<Role>> {
        let roles = self.inner.identity.list_roles().await?;
        for r in &roles {
            self.j.remember("role", r);
        }
        Ok(roles)
    }

    async fn list_project_role_assignments(&self, project_id: &str) -> Result<Vec<RoleAssignment>> {
        if is_new_id(project_id) {
            return Ok(Vec::new());
        }
        self.inner
            .identity
            .list_project_role_assignments(project_id)
            .await
    }
    async fn list_domain_role_assignments(&self, domain_id: &str) -> Result<Vec<RoleAssignment>> {
        if is_new_id(domain_id) {
            return Ok(Vec::new());
        }
        // The wrapped port's own (one request), not the trait's per-project default.
        self.inner
            .identity
            .list_domain_role_assignments(domain_id)
            .await
    }
    async fn grant_project_role(
        &self,
        project_id: &str,
        actor: &Actor,
        role_id: &str,
    ) -> Result<()> {
        let key = (project_id.to_string(), actor.clone(), role_id.to_string());
        let (planned, revoked) = {
            let st = self.j.lock();
            (st.granted.contains(&key), st.revoked.contains(&key))
        };
        if planned {
            return Ok(());
        }
        // A grant is idempotent: one already in the cloud is no change (the tenant
        // credential's user is granted its roles at each new credential).
        let actor_id = match actor {
            Actor::User(id) | Actor::Group(id) => id,
        };
        if !revoked && !is_new_id(project_id) && !is_new_id(actor_id) {
            let held = self
                .inner
                .identity
                .list_project_role_assignments(project_id)
                .await?;
            if held
                .iter()
                .any(|a| a.actor == *actor && a.role_id == role_id)
            {
                return Ok(());
            }
        }
        let label = format!(
            "role {} for {} on project {}",
            self.role_label(role_id),
            self.actor_label(actor),
            self.j.name_of("project", project_id)
        );
        self.j
            .link(Op::Create, IDENTITY, "role assignment", label, Vec::new());
        self.j.lock().granted.insert(key);
        Ok(())
    }
    async fn revoke_project_role(
        &self,
        project_id: &str,
        actor: &Actor,
        role_id: &str,
    ) -> Result<()> {
        let label = format!(
            "role {} for {} on project {}",
            self.role_label(role_id),
            self.actor_label(actor),
            self.j.name_of("project", project_id)
        );
        self.j
            .link(Op::Delete, IDENTITY, "role assignment", label, Vec::new());
        let key = (project_id.to_string(), actor.clone(), role_id.to_string());
        let mut st = self.j.lock();
        st.granted.remove(&key);
        st.revoked.insert(key);
        Ok(())
    }

    async fn get_identity_provider(&self, id: &str) -> Result<IdentityProvider> {
        self.get(
            "identity provider",
            id,
            self.inner.identity.get_identity_provider(id),
        )
        .await
    }
    async fn create_identity_provider(
        &self,
        req: &IdentityProviderCreate,
    ) -> Result<IdentityProvider> {
        self.j.create(IDENTITY, "identity provider", req)
    }
    async fn update_identity_provider(
        &self,
        id: &str,
        req: &IdentityProviderUpdate,
    ) -> Result<IdentityProvider> {
        self.j.update(IDENTITY, "identity provider", id, req)
    }
    async fn delete_identity_provider(&self, id: &str) -> Result<()> {
        self.j.delete(IDENTITY, "identity provider", id)
    }

    async fn get_mapping(&self, id: &str) -> Result<Mapping> {
        if let Some(v) = self.j.seen("mapping", id)
            && let Ok(m) = serde_json::from_value::<Mapping>(v.clone())
            && self
                .j
                .lock()
                .overlay
                .get("mapping")
                .is_some_and(|o| o.iter().any(|x| id_of(x) == Some(id)))
        {
            return Ok(m);
        }
        match self.inner.identity.get_mapping(id).await {
            Ok(m) => {
                self.j.remember("mapping", &m);
                Ok(m)
            }
            Err(e) if e.is_not_found() => self.j.overlay_get("mapping", id).map_err(|_| e),
            Err(e) => Err(e),
        }
    }
    async fn create_mapping(&self, id: &str, rules: &MappingRules) -> Result<Mapping> {
        let m = Mapping {
            id: id.to_string(),
            rules: rules.clone(),
        };
        let v = serde_json::to_value(&m).unwrap_or(Value::Null);
        self.j.overlay_put("mapping", v);
        self.j.link(
            Op::Create,
            IDENTITY,
            "mapping",
            id.to_string(),
            mapping_changes(None, rules),
        );
        Ok(m)
    }
    async fn update_mapping(&self, id: &str, rules: &MappingRules) -> Result<Mapping> {
        let before = self.j.seen("mapping", id);
        let m = Mapping {
            id: id.to_string(),
            rules: rules.clone(),
        };
        self.j.link(
            Op::Update,
            IDENTITY,
            "mapping",
            id.to_string(),
            mapping_changes(before.as_ref(), rules),
        );
        let v = serde_json::to_value(&m).unwrap_or(Value::Null);
        self.j.overlay_put("mapping", v);
        Ok(m)
    }
    async fn delete_mapping(&self, id: &str) -> Result<()> {
        self.j.delete(IDENTITY, "mapping", id)
    }

    async fn get_federation_protocol(
        &self,
        idp_id: &str,
        protocol_id: &str,
    ) -> Result<FederationProtocol> {
        let key = format!("{idp_id}/{protocol_id}");
        match self
            .inner
            .identity
            .get_federation_protocol(idp_id, protocol_id)
            .await
        {
            Ok(p) => {
                self.j.remember_as("federation protocol", &key, &p);
                Ok(p)
            }
            Err(e) if e.is_not_found() => self
                .j
                .overlay_get("federation protocol", &key)
                .map_err(|_| e),
            Err(e) => Err(e),
        }
    }
    async fn create_federation_protocol(
        &self,
        idp_id: &str,
        protocol_id: &str,
        mapping_id: &str,
    ) -> Result<FederationProtocol> {
        let key = format!("{idp_id}/{protocol_id}");
        let mut v = to_object(&FederationProtocol::default());
        v.insert("id".into(), json!(protocol_id));
        v.insert("mapping_id".into(), json!(mapping_id));
        let p: FederationProtocol = serde_json::from_value(Value::Object(v.clone()))
            .map_err(|e| Error::bad_request(format!("dry run of a protocol create: {e}")))?;
        v.insert("id".into(), json!(key));
        self.j.overlay_put("federation protocol", Value::Object(v));
        self.j.link(
            Op::Create,
            IDENTITY,
            "federation protocol",
            key,
            vec![FieldChange {
                field: "mapping_id".into(),
                old: None,
                new: Some(json!(mapping_id)),
            }],
        );
        Ok(p)
    }
    async fn update_federation_protocol(
        &self,
        idp_id: &str,
        protocol_id: &str,
        mapping_id: &str,
    ) -> Result<FederationProtocol> {
        let key = format!("{idp_id}/{protocol_id}");
        let old = self
            .j
            .seen("federation protocol", &key)
            .and_then(|v| v.get("mapping_id").cloned());
        self.j.link(
            Op::Update,
            IDENTITY,
            "federation protocol",
            key,
            vec![FieldChange {
                field: "mapping_id".into(),
                old,
                new: Some(json!(mapping_id)),
            }],
        );
        let mut v = to_object(&FederationProtocol::default());
        v.insert("id".into(), json!(protocol_id));
        v.insert("mapping_id".into(), json!(mapping_id));
        serde_json::from_value(Value::Object(v))
            .map_err(|e| Error::bad_request(format!("dry run of a protocol update: {e}")))
    }
    async fn delete_federation_protocol(&self, idp_id: &str, protocol_id: &str) -> Result<()> {
        self.j.link(
            Op::Delete,
            IDENTITY,
            "federation protocol",
            format!("{idp_id}/{protocol_id}"),
            Vec::new(),
        );
        Ok(())
    }
}

/// A mapping's rules as a field change: one entry per rule added or removed.
fn mapping_changes(before: Option<&Value>, rules: &MappingRules) -> Vec<FieldChange> {
    let new: Vec<Value> = serde_json::to_value(rules)
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default();
    let old: Vec<Value> = before
        .and_then(|b| b.get("rules"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut out = Vec::new();
    for r in &old {
        if !new.contains(r) {
            out.push(FieldChange {
                field: "rules[]".into(),
                old: Some(r.clone()),
                new: None,
            });
        }
    }
    for r in &new {
        if !old.contains(r) {
            out.push(FieldChange {
                field: "rules[]".into(),
                old: None,
                new: Some(r.clone()),
            });
        }
    }
    out
}

#[async_trait]
impl Compute for DryRun {
    async fn get_flavor(&self, id: &str) -> Result<Flavor> {
        self.get("flavor", id, self.inner.compute.get_flavor(id))
            .await
    }
    async fn list_flavors(&self) -> Result<Vec<Flavor>> {
        self.list("flavor", &(), self.inner.compute.list_flavors())
            .await
    }
    async fn find_flavor(&self, name: &str) -> Result<Option<Flavor>> {
        self.find("flavor", None, name, self.inner.compute.find_flavor(name))
            .await
    }
    async fn create_flavor(&self, req: &FlavorCreate) -> Result<Flavor> {
        self.j.create(COMPUTE, "flavor", req)
    }
    async fn update_flavor_description(&self, id: &str, description: &str) -> Result<Flavor> {
        self.j.update(
            COMPUTE,
            "flavor",
            id,
            &json!({ "description": description }),
        )
    }
    async fn delete_flavor(&self, id: &str) -> Result<()> {
        self.j.delete(COMPUTE, "flavor", id)
    }

    async fn get_flavor_extra_specs(&self, id: &str) -> Result<BTreeMap<String, String>> {
        if is_new_id(id) || self.j.overlay_get::<Value>("flavor", id).is_ok() {
            return Ok(self
                .j
                .seen("flavor extra specs", id)
                .and_then(|v| serde_json::from_value(v).ok())
                .unwrap_or_default());
        }
        let specs = self.inner.compute.get_flavor_extra_specs(id).await?;
        self.j.remember_as("flavor extra specs", id, &specs);
        Ok(specs)
    }
    async fn set_flavor_extra_specs(
        &self,
        id: &str,
        specs: &BTreeMap<String, String>,
    ) -> Result<()> {
        let before = self.j.seen("flavor extra specs", id);
        let changes = specs
            .iter()
            .map(|(k, v)| FieldChange {
                field: format!("extra_specs.{k}"),
                old: before.as_ref().and_then(|b| b.get(k)).cloned(),
                new: Some(json!(v)),
            })
            .filter(|c| c.old != c.new)
            .collect();
        let mut after: BTreeMap<String, String> = before
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default();
        after.extend(specs.clone());
        self.j.remember_as("flavor extra specs", id, &after);
        self.j.link(
            Op::Update,
            COMPUTE,
            "flavor extra specs",
            self.j.name_of("flavor", id),
            changes,
        );
        Ok(())
    }
    async fn delete_flavor_extra_spec(&self, id: &str, key: &str) -> Result<()> {
        let old = self
            .j
            .seen("flavor extra specs", id)
            .and_then(|b| b.get(key).cloned());
        self.j.link(
            Op::Update,
            COMPUTE,
            "flavor extra specs",
            self.j.name_of("flavor", id),
            vec![FieldChange {
                field: format!("extra_specs.{key}"),
                old,
                new: None,
            }],
        );
        Ok(())
    }

    async fn list_flavor_access(&self, id: &str) -> Result<Vec<String>> {
        if is_new_id(id) || self.j.overlay_get::<Value>("flavor", id).is_ok() {
            return Ok(Vec::new());
        }
        self.inner.compute.list_flavor_access(id).await
    }
    async fn add_flavor_access(&self, id: &str, project_id: &str) -> Result<()> {
        let label = format!(
            "project {} on flavor {}",
            self.j.name_of("project", project_id),
            self.j.name_of("flavor", id)
        );
        self.j
            .link(Op::Create, COMPUTE, "flavor access", label, Vec::new());
        Ok(())
    }
    async fn remove_flavor_access(&self, id: &str, project_id: &str) -> Result<()> {
        let label = format!(
            "project {} on flavor {}",
            self.j.name_of("project", project_id),
            self.j.name_of("flavor", id)
        );
        self.j
            .link(Op::Delete, COMPUTE, "flavor access", label, Vec::new());
        Ok(())
    }

    async fn get_compute_quota(&self, project_id: &str) -> Result<QuotaSet> {
        if is_new_id(project_id) {
            return Ok(QuotaSet::new());
        }
        let q = self.inner.compute.get_compute_quota(project_id).await?;
        self.j
            .remember_as("compute quota", project_id, &quota_limits(&q));
        Ok(q)
    }
    async fn update_compute_quota(&self, project_id: &str, limits: &QuotaUpdate) -> Result<()> {
        self.j
            .quota_update(COMPUTE, "compute quota", project_id, limits);
        Ok(())
    }
    async fn get_compute_quota_defaults(&self, project_id: &str) -> Result<QuotaUpdate> {
        if is_new_id(project_id) {
            return Ok(QuotaUpdate::new());
        }
        self.inner
            .compute
            .get_compute_quota_defaults(project_id)
            .await
    }
}

#[async_trait]
impl Image for DryRun {
    async fn create_image(&self, req: &ImageCreate) -> Result<crate::model::Image> {
        let id = self.j.new_id("image");
        let img = crate::model::Image {
            id: id.clone(),
            name: req.name.clone(),
            status: ImageStatus::Queued,
            visibility: req.visibility.clone().unwrap_or_else(|| "shared".into()),
            protected: req.protected,
            tags: req.tags.clone(),
            properties: req.properties.clone(),
            owner: None,
            checksum: None,
            size: None,
            os_hash_algo: None,
            os_hash_value: None,
            disk_format: Some(req.disk_format.clone()),
            container_format: Some(req.container_format.clone()),
            failed_import_stores: Vec::new(),
            importing_to_stores: Vec::new(),
        };
        let v = serde_json::to_value(&img)
            .map_err(|e| Error::bad_request(format!("dry run of an image create: {e}")))?;
        self.j.overlay_put("image", v);
        self.j.link(
            Op::Create,
            IMAGE,
            "image",
            req.name.clone(),
            set_fields(&to_object(req), None),
        );
        Ok(img)
    }
    async fn get_image(&self, id: &str) -> Result<crate::model::Image> {
        self.get("image", id, self.inner.image.get_image(id)).await
    }
    async fn list_images_by_name(&self, name: &str) -> Result<Vec<crate::model::Image>> {
        self.list(
            "image",
            &json!({ "name": name }),
            self.inner.image.list_images_by_name(name),
        )
        .await
    }
    async fn update_image(&self, id: &str, ops: &[ImagePatchOp]) -> Result<crate::model::Image> {
        let before = self.j.seen("image", id);
        let changes = ops
            .iter()
            .map(|op| {
                let (path, new) = match op {
                    ImagePatchOp::Add { path, value } | ImagePatchOp::Replace { path, value } => {
                        (path.clone(), Some(value.clone()))
                    }
                    ImagePatchOp::Remove { path } => (path.clone(), None),
                };
                let field = path
                    .trim_start_matches('/')
                    .replace("~1", "/")
                    .replace("~0", "~");
                let old = before.as_ref().and_then(|b| {
                    b.get(&field)
                        .or_else(|| b.get("properties").and_then(|p| p.get(&field)))
                        .cloned()
                });
                FieldChange { field, old, new }
            })
            .collect();
        self.j.record(Intent {
            op: Op::Update,
            service: IMAGE,
            kind: "image",
            label: self.j.name_of("image", id),
            id: (!is_new_id(id)).then(|| id.to_string()),
            changes,
        });
        match self.j.seen("image", id) {
            Some(v) => serde_json::from_value(v)
                .map_err(|e| Error::bad_request(format!("dry run of an image update: {e}"))),
            None => self.inner.image.get_image(id).await,
        }
    }
    async fn import_image_web_download(&self, id: &str, uri: &str) -> Result<()> {
        self.j.link(
            Op::Create,
            IMAGE,
            "image import",
            self.j.name_of("image", id),
            vec![FieldChange {
                field: "web-download".into(),
                old: None,
                new: Some(json!(uri)),
            }],
        );
        Ok(())
    }
    async fn delete_image(&self, id: &str) -> Result<()> {
        self.j.delete(IMAGE, "image", id)
    }
}

#[async_trait]
impl Network for DryRun {
    async fn get_network(&self, id: &str) -> Result<crate::model::Network> {
        self.get("network", id, self.inner.network.get_network(id))
            .await
    }
    async fn list_networks(&self, filter: &NetworkFilter) -> Result<Vec<crate::model::Network>> {
        self.list("network", filter, self.inner.network.list_networks(filter))
            .await
    }
    async fn create_network(&self, req: &NetworkCreate) -> Result<crate::model::Network> {
        self.j.create(NETWORK, "network", req)
    }
    async fn update_network(&self, id: &str, req: &NetworkUpdate) -> Result<crate::model::Network> {
        self.j.update(NETWORK, "network", id, req)
    }
    async fn delete_network(&self, id: &str) -> Result<()> {
        self.j.delete(NETWORK, "network", id)
    }

    async fn get_subnet(&self, id: &str) -> Result<Subnet> {
        self.get("subnet", id, self.inner.network.get_subnet(id))
            .await
    }
    async fn list_subnets(&self, filter: &SubnetFilter) -> Result<Vec<Subnet>> {
        self.list("subnet", filter, self.inner.network.list_subnets(filter))
            .await
    }
    async fn create_subnet(&self, req: &SubnetCreate) -> Result<Subnet> {
        self.j.create(NETWORK, "subnet", req)
    }
    async fn update_subnet(&self, id: &str, req: &SubnetUpdate) -> Result<Subnet> {
        self.j.update(NETWORK, "subnet", id, req)
    }
    async fn delete_subnet(&self, id: &str) -> Result<()> {
        self.j.delete(NETWORK, "subnet", id)
    }

    async fn get_router(&self, id: &str) -> Result<Router> {
        self.get("router", id, self.inner.network.get_router(id))
            .await
    }
    async fn list_routers(&self, filter: &RouterFilter) -> Result<Vec<Router>> {
        self.list("router", filter, self.inner.network.list_routers(filter))
            .await
    }
    async fn create_router(&self, req: &RouterCreate) -> Result<Router> {
        self.j.create(NETWORK, "router", req)
    }
    async fn update_router(&self, id: &str, req: &RouterUpdate) -> Result<Router> {
        self.j.update(NETWORK, "router", id, req)
    }
    async fn delete_router(&self, id: &str) -> Result<()> {
        self.j.delete(NETWORK, "router", id)
    }
    async fn add_router_interface(
        &self,
        router_id: &str,
        subnet_id: &str,
    ) -> Result<RouterInterface> {
        let label = format!(
            "subnet {} on router {}",
            self.j.name_of("subnet", subnet_id),
            self.j.name_of("router", router_id)
        );
        self.j
            .link(Op::Create, NETWORK, "router interface", label, Vec::new());
        let mut v = to_object(&RouterInterface::default());
        v.insert("id".into(), json!(router_id));
        v.insert("subnet_id".into(), json!(subnet_id));
        v.insert("port_id".into(), json!(self.j.new_id("port")));
        serde_json::from_value(Value::Object(v))
            .map_err(|e| Error::bad_request(format!("dry run of a router interface: {e}")))
    }
    async fn remove_router_interface(&self, router_id: &str, subnet_id: &str) -> Result<()> {
        let label = format!(
            "subnet {} on router {}",
            self.j.name_of("subnet", subnet_id),
            self.j.name_of("router", router_id)
        );
        self.j
            .link(Op::Delete, NETWORK, "router interface", label, Vec::new());
        Ok(())
    }
    async fn list_router_interfaces(&self, router_id: &str) -> Result<Vec<RouterPort>> {
        if is_new_id(router_id) {
            return Ok(Vec::new());
        }
        self.inner.network.list_router_interfaces(router_id).await
    }
    async fn list_routers_interfaces(
        &self,
        routers: &[String],
    ) -> Result<BTreeMap<String, Vec<RouterPort>>> {
        let real: Vec<String> = routers.iter().filter(|r| !is_new_id(r)).cloned().collect();
        if real.is_empty() {
            return Ok(BTreeMap::new());
        }
        self.inner.network.list_routers_interfaces(&real).await
    }

    async fn get_security_group(&self, id: &str) -> Result<SecurityGroup> {
        self.get(
            "security group",
            id,
            self.inner.network.get_security_group(id),
        )
        .await
    }
    async fn list_security_groups(
        &self,
        filter: &SecurityGroupFilter,
    ) -> Result<Vec<SecurityGroup>> {
        let groups = self
            .list(
                "security group",
                filter,
                self.inner.network.list_security_groups(filter),
            )
            .await?;
        for g in &groups {
            for r in &g.rules {
                self.j.remember("security group rule", r);
            }
        }
        Ok(groups)
    }
    async fn create_security_group(&self, req: &SecurityGroupCreate) -> Result<SecurityGroup> {
        let mut sg: SecurityGroup = self.j.create(NETWORK, "security group", req)?;
        // Neutron gives a new group one egress rule per ethertype; a pass that sees them
        // leaves them alone, so the plan must see them too (they are not written by us).
        for ethertype in ["IPv4", "IPv6"] {
            let rule = SecurityGroupRule {
                id: self.j.new_id("security group rule"),
                security_group_id: sg.id.clone(),
                direction: "egress".into(),
                ethertype: ethertype.into(),
                project_id: req.project_id.clone().unwrap_or_default(),
                ..Default::default()
            };
            if let Ok(v) = serde_json::to_value(&rule) {
                self.j.overlay_put("security group rule", v);
            }
            sg.rules.push(rule);
        }
        if let Ok(v) = serde_json::to_value(&sg) {
            self.j.overlay_put("security group", v);
        }
        Ok(sg)
    }
    async fn update_security_group(
        &self,
        id: &str,
        req: &SecurityGroupUpdate,
    ) -> Result<SecurityGroup> {
        self.j.update(NETWORK, "security group", id, req)
    }
    async fn delete_security_group(&self, id: &str) -> Result<()> {
        self.j.delete(NETWORK, "security group", id)
    }
    async fn list_security_group_rules(
        &self,
        security_group_id: &str,
    ) -> Result<Vec<SecurityGroupRule>> {
        self.list(
            "security group rule",
            &json!({ "security_group_id": security_group_id }),
            self.inner
                .network
                .list_security_group_rules(security_group_id),
        )
        .await
    }
    async fn create_security_group_rule(
        &self,
        req: &SecurityGroupRuleCreate,
    ) -> Result<SecurityGroupRule> {
        self.j.create(NETWORK, "security group rule", req)
    }
    async fn create_security_group_rules(
        &self,
        reqs: &[SecurityGroupRuleCreate],
    ) -> Result<Vec<SecurityGroupRule>> {
        reqs.iter()
            .map(|r| self.j.create(NETWORK, "security group rule", r))
            .collect()
    }
    async fn delete_security_group_rule(&self, id: &str) -> Result<()> {
        self.j.delete(NETWORK, "security group rule", id)
    }

    async fn set_tags(&self, kind: TaggedResource, id: &str, tags: &[String]) -> Result<()> {
        let k: &'static str = match kind {
            TaggedResource::Network => "network",
            TaggedResource::Subnet => "subnet",
            TaggedResource::Router => "router",
            TaggedResource::SecurityGroup => "security group",
        };
        let old = self.j.seen(k, id).and_then(|v| v.get("tags").cloned());
        self.j.record(Intent {
            op: Op::Update,
            service: NETWORK,
            kind: k,
            label: self.j.name_of(k, id),
            id: (!is_new_id(id)).then(|| id.to_string()),
            changes: vec![FieldChange {
                field: "tags".into(),
                old,
                new: Some(json!(tags)),
            }],
        });
        Ok(())
    }

    async fn get_network_quota(&self, project_id: &str) -> Result<QuotaSet> {
        if is_new_id(project_id) {
            return Ok(QuotaSet::new());
        }
        let q = self.inner.network.get_network_quota(project_id).await?;
        self.j
            .remember_as("network quota", project_id, &quota_limits(&q));
        Ok(q)
    }
    async fn update_network_quota(&self, project_id: &str, limits: &QuotaUpdate) -> Result<()> {
        self.j
            .quota_update(NETWORK, "network quota", project_id, limits);
        Ok(())
    }
    async fn get_network_quota_defaults(&self, project_id: &str) -> Result<QuotaUpdate> {
        if is_new_id(project_id) {
            return Ok(QuotaUpdate::new());
        }
        self.inner
            .network
            .get_network_quota_defaults(project_id)
            .await
    }
    async fn list_network_quota_limits(
        &self,
        projects: &[String],
    ) -> Result<BTreeMap<String, QuotaUpdate>> {
        let real: Vec<String> = projects.iter().filter(|p| !is_new_id(p)).cloned().collect();
        let mut out = if real.is_empty() {
            BTreeMap::new()
        } else {
            self.inner.network.list_network_quota_limits(&real).await?
        };
        for (p, limits) in &out {
            self.j.remember_as("network quota", p, limits);
        }
        for p in projects.iter().filter(|p| is_new_id(p)) {
            out.insert(p.clone(), QuotaUpdate::new());
        }
        Ok(out)
    }
}

#[async_trait]
impl BlockStorage for DryRun {
    async fn get_volume_quota(&self, project_id: &str) -> Result<QuotaSet> {
        if is_new_id(project_id) {
            return Ok(QuotaSet::new());
        }
        let q = self
            .inner
            .block_storage
            .get_volume_quota(project_id)
            .await?;
        self.j
            .remember_as("volume quota", project_id, &quota_limits(&q));
        Ok(q)
    }
    async fn update_volume_quota(&self, project_id: &str, limits: &QuotaUpdate) -> Result<()> {
        self.j
            .quota_update(BLOCK_STORAGE, "volume quota", project_id, limits);
        Ok(())
    }
    async fn get_volume_quota_defaults(&self, project_id: &str) -> Result<QuotaUpdate> {
        if is_new_id(project_id) {
            return Ok(QuotaUpdate::new());
        }
        self.inner
            .block_storage
            .get_volume_quota_defaults(project_id)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeCloud;

    /// A project `p` in `domain_id`, made on the fake itself (not planned).
    pub(crate) async fn real_project(fake: &FakeCloud, domain_id: &str) -> Project {
        fake.cloud()
            .identity
            .create_project(&ProjectCreate {
                name: "p".into(),
                domain_id: domain_id.into(),
                enabled: true,
                ..Default::default()
            })
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn writes_are_recorded_and_never_reach_the_wrapped_cloud() {
        let fake = FakeCloud::new();
        let d = fake
            .cloud()
            .identity
            .create_domain(&DomainCreate {
                name: "d".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        fake.reset_calls();
        let (cloud, journal) = dry_run(fake.cloud());
        let p = cloud
            .identity
            .create_project(&ProjectCreate {
                name: "p".into(),
                domain_id: d.id.clone(),
                description: "x".into(),
                enabled: true,
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(is_new_id(&p.id), "{}", p.id);
        // The planned project is visible to later reads of the same plan.
        let found = cloud.identity.find_project(&d.id, "p").await.unwrap();
        assert_eq!(found.map(|f| f.id), Some(p.id.clone()));
        cloud.identity.get_domain(&d.id).await.unwrap();
        cloud
            .identity
            .update_domain(
                &d.id,
                &DomainUpdate {
                    description: Some("new".into()),
                    enabled: None,
                },
            )
            .await
            .unwrap();
        cloud.identity.delete_domain(&d.id).await.unwrap();
        let intents = journal.take();
        let ops: Vec<(Op, &str)> = intents.iter().map(|i| (i.op, i.kind)).collect();
        assert_eq!(
            ops,
            [
                (Op::Create, "project"),
                (Op::Update, "domain"),
                (Op::Delete, "domain")
            ]
        );
        // The update names the old value read before it.
        let upd = &intents[1];
        assert_eq!(upd.changes.len(), 1, "{:?}", upd.changes);
        assert_eq!(upd.changes[0].field, "description");
        assert_eq!(upd.changes[0].old, Some(json!("")));
        assert_eq!(upd.changes[0].new, Some(json!("new")));
        assert_eq!(intents[2].label, "d");
        assert_eq!(fake.writes(), 0, "{:?}", fake.write_calls());
        assert!(fake.reads() > 0);
        assert!(journal.take().is_empty());
    }

    #[tokio::test]
    async fn a_grant_is_planned_once_and_not_when_the_cloud_holds_it() {
        let fake = FakeCloud::new();
        let p = real_project(&fake, "default").await;
        let u = fake.add_user("default", "u");
        let member = fake.find_role("member").await.unwrap().unwrap().id;
        let reader = fake.find_role("reader").await.unwrap().unwrap().id;
        let actor = Actor::User(u.id.clone());
        fake.grant_project_role(&p.id, &actor, &member)
            .await
            .unwrap();
        fake.reset_calls();
        let (cloud, journal) = dry_run(fake.cloud());
        let id = &cloud.identity;
        id.grant_project_role(&p.id, &actor, &member).await.unwrap();
        assert!(journal.take().is_empty(), "the cloud holds it already");
        id.grant_project_role(&p.id, &actor, &reader).await.unwrap();
        id.grant_project_role(&p.id, &actor, &reader).await.unwrap();
        assert_eq!(journal.take().len(), 1, "the same PUT twice is one change");
        id.revoke_project_role(&p.id, &actor, &member)
            .await
            .unwrap();
        id.grant_project_role(&p.id, &actor, &member).await.unwrap();
        let ops: Vec<Op> = journal.take().iter().map(|i| i.op).collect();
        assert_eq!(
            ops,
            [Op::Delete, Op::Create],
            "granted again after a revoke"
        );
        assert_eq!(fake.writes(), 0, "{:?}", fake.write_calls());
    }

    #[tokio::test]
    async fn quota_updates_name_the_old_limits() {
        let fake = FakeCloud::new();
        let d = fake
            .cloud()
            .identity
            .create_domain(&DomainCreate {
                name: "d".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        let p = real_project(&fake, &d.id).await;
        let (cloud, journal) = dry_run(fake.cloud());
        cloud.identity.get_project(&p.id).await.unwrap();
        let before = cloud.compute.get_compute_quota(&p.id).await.unwrap();
        let cores = before.get("cores").map(|v| v.limit).unwrap_or_default();
        cloud
            .compute
            .update_compute_quota(&p.id, &[("cores".to_string(), 99)].into())
            .await
            .unwrap();
        let i = journal.take();
        assert_eq!(i.len(), 1);
        assert_eq!(i[0].label, "project p");
        assert_eq!(
            i[0].changes,
            [FieldChange {
                field: "cores".into(),
                old: Some(json!(cores)),
                new: Some(json!(99)),
            }]
        );
        let after = fake.cloud().compute.get_compute_quota(&p.id).await.unwrap();
        assert_eq!(after.get("cores").map(|v| v.limit), Some(cores));
    }
}
