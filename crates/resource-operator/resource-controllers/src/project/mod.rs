//! OpenstackProject: a whole tenant. The Keystone project and its user group, quotas, tenant
//! networks with routers, security groups, role bindings and the federation mapping rule.
//!
//! Every area is a pure planner (desired vs. observed → steps, in its own module) plus a small
//! executor. [`reconcile_project`] and [`cleanup_project`] take the OpenStack port, the
//! configuration and the already-read federation settings, so the whole reconcile runs in unit
//! tests without Kubernetes; the [`Managed`] impl only reads the federation ConfigMap and
//! publishes Events around them.
//!
//! Areas are independent once the project exists: a failing router does not stop security
//! groups from converging. Every area runs, its condition is set, and the pass ends with the
//! most urgent error (see [`combine`]) or `Ready` when all areas are.

pub mod cache;
pub mod drift;
pub mod federation;
pub mod identity;
pub mod networks;
pub mod quotas;
pub mod security_groups;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Display;
use std::sync::{Arc, Mutex};

use api::common::set_condition;
use api::{
    Condition, FieldError, OpenstackDomain, OpenstackProject, OpenstackProjectSpec,
    OpenstackProjectStatus,
};
use async_trait::async_trait;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::controller::Controller;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use openstack::Cloud;
use openstack::model::Domain;
use openstack::{Identity, OptionalExt};
use tracing::warn;

use crate::context::{Config, Context};
use crate::error::{ReconcileError, Result};
use crate::framework::{Managed, Progress, now, owner_of, publish};
use crate::ownership::Owner;
use cache::LookupCache;
use federation::MappingQueue;

/// Condition: the Keystone project and its user group match the spec (seed type).
pub const PROJECT_READY: &str = "ProjectReady";
/// Condition: quotas match `spec.quotas` (seed type).
pub const QUOTAS_READY: &str = "QuotasReady";
/// Condition: networks, subnets, routers match `spec.networks` (seed type).
pub const NETWORKS_READY: &str = "NetworksReady";
/// Condition: security groups and rules match `spec.securityGroups` (seed type).
pub const SECURITY_GROUPS_READY: &str = "SecurityGroupsReady";
/// Condition: role assignments match `spec.roleBindings` (extension).
pub const ROLE_BINDINGS_READY: &str = "RoleBindingsReady";
/// Condition: the identity provider, mapping rule and protocol are in place (seed type).
pub const FEDERATION_READY: &str = "FederationReady";

/// Per-key async locks, so concurrent reconciles never interleave a read-modify-write of one
/// shared object (the federation mapping).
pub trait LockProvider: Send + Sync {
    /// The lock for `key`; the same key always yields the same lock.
    fn lock_for(&self, key: &str) -> Arc<tokio::sync::Mutex<()>>;
    /// The process-wide lookup cache shared by every pass.
    fn lookups(&self) -> &LookupCache;
    /// The queue of `idp`'s next federation mapping batch (see `federation::commit`).
    fn mapping_queue(&self, idp: &str) -> Arc<MappingQueue>;
}

impl LockProvider for Context {
    fn lock_for(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        Context::lock_for(self, key)
    }
    fn lookups(&self) -> &LookupCache {
        &self.lookups
    }
    fn mapping_queue(&self, idp: &str) -> Arc<MappingQueue> {
        Context::mapping_queue(self, idp)
    }
}

/// A process-local [`LockProvider`] (tests and tools without a [`Context`]).
#[derive(Default)]
pub struct LocalLocks(
    Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    LookupCache,
    Mutex<HashMap<String, Arc<MappingQueue>>>,
);

impl LockProvider for LocalLocks {
    fn lookups(&self) -> &LookupCache {
        &self.1
    }
    fn mapping_queue(&self, idp: &str) -> Arc<MappingQueue> {
        self.2
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(idp.to_string())
            .or_default()
            .clone()
    }
    fn lock_for(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.to_string())
            .or_default()
            .clone()
    }
}

/// Everything a project reconcile needs besides the object itself; no Kubernetes client.
pub struct Env<'a> {
    /// The OpenStack port.
    pub cloud: &'a Cloud,
    /// Operator configuration (allowed roles, adoption, federation namespaces).
    pub config: &'a Config,
    /// Ownership marks of this resource.
    pub owner: Owner,
    /// Locks for shared OpenStack objects.
    pub locks: &'a dyn LockProvider,
}

/// An Event to publish about the object (collected so the reconcile itself needs no client).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// Warning (true) or Normal.
    pub warning: bool,
    /// Event reason, e.g. `Created`.
    pub reason: &'static str,
    /// Event action, e.g. `Create`.
    pub action: &'static str,
    /// Human-readable text.
    pub message: String,
}

impl Note {
    /// A Normal event.
    pub fn normal(reason: &'static str, action: &'static str, message: impl Into<String>) -> Self {
        Note {
            warning: false,
            reason,
            action,
            message: message.into(),
        }
    }

    /// A Warning event.
    pub fn warning(reason: &'static str, action: &'static str, message: impl Into<String>) -> Self {
        Note {
            warning: true,
            reason,
            action,
            message: message.into(),
        }
    }
}

/// The result of a pass plus the Events it wants published.
#[derive(Debug)]
pub struct Reconciled<T> {
    /// What the framework gets back.
    pub result: Result<T>,
    /// Events to publish.
    pub events: Vec<Note>,
}

/// The federation settings read from the ConfigMap named by `spec.federationRef`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FederationSettings {
    /// `namespace/name` of the ConfigMap, for messages.
    pub config_map: String,
    /// `idp-name`: the identity provider ID.
    pub idp: String,
    /// `idp-remote-id`: the IdP's remote ID (OIDC issuer); empty = leave remote IDs alone.
    pub remote_id: String,
    /// `sso-domain`: the domain named in the mapping rule; `None` = the project's domain.
    pub sso_domain: Option<String>,
    /// Whether the ConfigMap lives in a namespace the operator trusts (`--federation-namespaces`):
    /// only then may it create the identity provider, change its remote IDs, repoint its
    /// protocol or name another domain in the rule. A tenant's own ConfigMap may not.
    pub may_manage_idp: bool,
}

/// What the Kubernetes side found for `spec.federationRef`.
#[derive(Debug)]
pub enum FederationInput {
    /// `spec.federationRef` is not set.
    NotRequested,
    /// The settings are not usable: a `DependencyMissing` (ConfigMap or `idp-name` missing)
    /// or a Kubernetes API error.
    Unavailable(ReconcileError),
    /// The settings.
    Settings(FederationSettings),
}

/// Parses the federation ConfigMap's data (keys `idp-name`, `idp-remote-id`, `sso-domain`).
/// A ConfigMap without `data` or without `idp-name` is a missing dependency, not a silent skip
/// (seed W23).
pub fn federation_from_data(
    namespace: &str,
    name: &str,
    data: Option<&BTreeMap<String, String>>,
    trusted: bool,
) -> FederationInput {
    let config_map = format!("{namespace}/{name}");
    let get = |k: &str| {
        data.and_then(|d| d.get(k))
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let Some(idp) = get("idp-name") else {
        return FederationInput::Unavailable(ReconcileError::DependencyMissing(format!(
            "key idp-name in ConfigMap {config_map} (spec.federationRef)"
        )));
    };
    FederationInput::Settings(FederationSettings {
        config_map,
        idp,
        remote_id: get("idp-remote-id").unwrap_or_default(),
        sso_domain: get("sso-domain"),
        may_manage_idp: trusted,
    })
}

/// The namespace of the federation ConfigMap: `configMapNamespace` or the object's own.
fn federation_namespace(spec: &OpenstackProjectSpec, own: &str) -> Option<String> {
    spec.federation_ref.as_ref().map(|f| {
        f.config_map_namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| own.to_string())
    })
}

/// Whether the federation ConfigMap may be read: the object's own namespace, or one the
/// operator allows.
pub fn federation_namespace_allowed(
    spec: &OpenstackProjectSpec,
    namespace: &str,
    config: &Config,
) -> bool {
    federation_namespace(spec, namespace)
        .is_none_or(|ns| ns == namespace || config.federation_namespaces.contains(&ns))
}

/// The tenancy boundary (seed W7), checked before any OpenStack call: roles must be in the
/// operator's allow-list and a federation ConfigMap outside the object's namespace must be in
/// an allowed namespace.
pub fn check_policy(
    spec: &OpenstackProjectSpec,
    namespace: &str,
    config: &Config,
) -> Result<(), ReconcileError> {
    let mut problems = Vec::new();
    for (i, b) in spec.role_bindings.iter().flatten().enumerate() {
        if !config.allowed_roles.contains(&b.role) {
            problems.push(format!(
                "spec.roleBindings[{i}].role: role {:?} is not in the operator's allowed roles ({})",
                b.role,
                config
                    .allowed_roles
                    .iter()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    for (i, role) in spec
        .application_credential
        .iter()
        .flat_map(|c| c.roles())
        .enumerate()
    {
        if !config.allowed_roles.contains(&role) {
            problems.push(format!(
                "spec.applicationCredential.roles[{i}]: role {role:?} is not in the operator's allowed roles"
            ));
        }
    }
    if !federation_namespace_allowed(spec, namespace, config) {
        let ns = federation_namespace(spec, namespace).unwrap_or_default();
        problems.push(format!(
            "spec.federationRef.configMapNamespace: namespace {ns:?} is not allowed; use a ConfigMap in this object's namespace {namespace:?} or one the operator allows (--federation-namespaces)"
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ReconcileError::PolicyViolation(problems.join("; ")))
    }
}

/// A problem a planner found (comparable, so plans can be asserted in tests); it becomes a
/// [`ReconcileError`] of the same class when reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// Something the spec refers to does not exist (yet).
    Missing(String),
    /// An object with the spec's name exists and is not ours.
    NotOwned(String),
}

impl From<Problem> for ReconcileError {
    fn from(p: Problem) -> Self {
        match p {
            Problem::Missing(m) => ReconcileError::DependencyMissing(m),
            Problem::NotOwned(m) => ReconcileError::NotOwned(m),
        }
    }
}

impl Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The same text the error shows, so tests see what users see.
        write!(f, "{}", ReconcileError::from(self.clone()))
    }
}

/// Adds context (the spec field and the operation) to an OpenStack error, keeping its class so
/// retries and condition reasons stay right, and OpenStack's own message.
pub fn os(context: impl Display, e: openstack::Error) -> ReconcileError {
    ReconcileError::OpenStack(with_message(e, |m| format!("{context}: {m}")))
}

fn with_message(e: openstack::Error, f: impl FnOnce(&str) -> String) -> openstack::Error {
    use openstack::Error as E;
    match e {
        E::NotFound { what } => E::NotFound { what: f(&what) },
        E::Conflict { message } => E::Conflict {
            message: f(&message),
        },
        E::BadRequest { message } => E::BadRequest {
            message: f(&message),
        },
        E::Forbidden { message } => E::Forbidden {
            message: f(&message),
        },
        E::Unauthorized { message } => E::Unauthorized {
            message: f(&message),
        },
        E::Transient { message } => E::Transient {
            message: f(&message),
        },
        E::Timeout { message } => E::Timeout {
            message: f(&message),
        },
        E::Config { message } => E::Config {
            message: f(&message),
        },
        E::Unexpected { message } => E::Unexpected {
            message: f(&message),
        },
    }
}

/// How soon an error wants a retry; the most urgent error of a pass is the one reported.
fn urgency(e: &ReconcileError) -> u8 {
    match e {
        e if e.is_transient() && !matches!(e, ReconcileError::DependencyMissing(_)) => 0,
        ReconcileError::DependencyMissing(_) => 1,
        ReconcileError::OpenStack(_) => 2,
        ReconcileError::NotOwned(_) => 3,
        ReconcileError::PolicyViolation(_) => 4,
        ReconcileError::InvalidSpec(_) => 5,
        ReconcileError::CloudBlocked(_) => 6,
        ReconcileError::Kube(_) => 7,
    }
}

/// Joins the errors of several areas into one: the most urgent error (so the framework retries
/// as soon as that one needs) with the other failing areas named after it. Each area's own
/// condition carries its full message.
pub fn combine(mut failures: Vec<(&'static str, ReconcileError)>) -> Option<ReconcileError> {
    if failures.is_empty() {
        return None;
    }
    failures.sort_by_key(|(_, e)| urgency(e));
    let others: Vec<&str> = failures.iter().skip(1).map(|(a, _)| *a).collect();
    let (_, first) = failures.swap_remove(0);
    if others.is_empty() {
        return Some(first);
    }
    let suffix = format!(
        " (also failing: {}; see their conditions)",
        others.join(", ")
    );
    Some(match first {
        ReconcileError::DependencyMissing(m) => ReconcileError::DependencyMissing(m + &suffix),
        ReconcileError::NotOwned(m) => ReconcileError::NotOwned(m + &suffix),
        ReconcileError::PolicyViolation(m) => ReconcileError::PolicyViolation(m + &suffix),
        ReconcileError::OpenStack(e) => {
            ReconcileError::OpenStack(with_message(e, |m| format!("{m}{suffix}")))
        }
        ReconcileError::InvalidSpec(mut v) => {
            v.push(FieldError {
                path: "spec".into(),
                message: suffix.trim().to_string(),
            });
            ReconcileError::InvalidSpec(v)
        }
        e @ (ReconcileError::Kube(_) | ReconcileError::CloudBlocked(_)) => e,
    })
}

/// What one area reports: its errors and whether it wrote anything.
#[derive(Debug, Default)]
pub struct AreaOutcome {
    /// Failures, each naming the spec field it concerns.
    pub errors: Vec<ReconcileError>,
    /// Whether any OpenStack write happened.
    pub changed: bool,
    /// Extra detail for the condition message when the area is ready.
    pub detail: Option<String>,
}

impl AreaOutcome {
    /// The single error of the area (joined when several parts failed).
    pub fn error(&mut self) -> Option<ReconcileError> {
        let errs = std::mem::take(&mut self.errors);
        if errs.len() <= 1 {
            return errs.into_iter().next();
        }
        // Several failures inside one area: the most urgent one's class, every message (the
        // first without its class prefix, which the class adds back when displayed).
        let mut sorted = errs;
        sorted.sort_by_key(urgency);
        let rest: Vec<String> = sorted.iter().skip(1).map(ToString::to_string).collect();
        let join = |first: &str| {
            std::iter::once(first.to_string())
                .chain(rest.iter().cloned())
                .collect::<Vec<_>>()
                .join("; ")
        };
        let first = sorted.swap_remove(0);
        Some(match first {
            ReconcileError::DependencyMissing(m) => ReconcileError::DependencyMissing(join(&m)),
            ReconcileError::NotOwned(m) => ReconcileError::NotOwned(join(&m)),
            ReconcileError::PolicyViolation(m) => ReconcileError::PolicyViolation(join(&m)),
            ReconcileError::OpenStack(e) => ReconcileError::OpenStack(with_message(e, join)),
            ReconcileError::InvalidSpec(mut v) => {
                v.extend(rest.iter().map(|m| FieldError {
                    path: "spec".into(),
                    message: m.clone(),
                }));
                ReconcileError::InvalidSpec(v)
            }
            e @ (ReconcileError::Kube(_) | ReconcileError::CloudBlocked(_)) => e,
        })
    }
}

/// Sets an area condition from its outcome (True: Created/Updated/InSync; False: the error's
/// reason and message).
fn set_area(
    status: &mut OpenstackProjectStatus,
    type_: &str,
    generation: Option<i64>,
    outcome: std::result::Result<(&str, String), &ReconcileError>,
) {
    let mut c = match outcome {
        Ok((reason, message)) => Condition::new(type_, true, reason, message),
        Err(e) => Condition::new(type_, false, e.reason(), e.to_string()),
    };
    c.observed_generation = generation;
    set_condition(&mut status.conditions, c, &now());
}

fn drop_condition(status: &mut OpenstackProjectStatus, type_: &str) {
    status.conditions.retain(|c| c.type_ != type_);
}

fn ready_reason(created: bool, changed: bool) -> &'static str {
    if created {
        "Created"
    } else if changed {
        "Updated"
    } else {
        "InSync"
    }
}

/// [`resolve_domain`] through the process-wide lookup cache.
pub async fn resolve_domain_cached(
    env: &Env<'_>,
    name_or_id: &str,
) -> Result<Option<Domain>, openstack::Error> {
    let cache = env.locks.lookups();
    // One lookup at a time per key: passes starting together wait for the first answer
    // instead of all asking.
    let lock = env.locks.lock_for(&format!("lookup/domain/{name_or_id}"));
    let _one = lock.lock().await;
    if let Some(d) = cache.domain(name_or_id) {
        return Ok(Some(d));
    }
    let d = resolve_domain(env.cloud.identity.as_ref(), name_or_id).await?;
    if let Some(d) = &d {
        cache.put_domain(name_or_id, d);
    }
    Ok(d)
}

/// Finds a domain by name, else by ID (`spec.domain` accepts both, as the seed's did).
pub async fn resolve_domain(
    identity: &dyn Identity,
    name_or_id: &str,
) -> Result<Option<Domain>, openstack::Error> {
    if let Some(d) = identity.find_domain(name_or_id).await? {
        return Ok(Some(d));
    }
    identity.get_domain(name_or_id).await.optional()
}

/// Runs the networks and the security groups areas at the same time (they touch different
/// Neutron objects and different status fields): each on its own copy of the status, handing
/// back its outcome and its status records (`networks`, `securityGroups`). `None`: the area
/// has nothing to do (no spec section and nothing recorded).
async fn neutron_areas(
    env: &Env<'_>,
    spec: &OpenstackProjectSpec,
    project_id: &str,
    status: &OpenstackProjectStatus,
    fresh: bool,
) -> (
    Option<(AreaOutcome, Vec<api::project::NetworkStatus>)>,
    Option<(AreaOutcome, Vec<api::project::SecurityGroupStatus>)>,
) {
    let nets = async {
        if spec.networks.is_none() && status.networks.is_empty() {
            return None;
        }
        let mut own = status.clone();
        let out = networks::apply(env, spec, project_id, &mut own, fresh).await;
        Some((out, own.networks))
    };
    let sgs = async {
        if spec.security_groups.is_none() && status.security_groups.is_empty() {
            return None;
        }
        let mut own = status.clone();
        let out = security_groups::apply(env, spec, project_id, &mut own, fresh).await;
        Some((out, own.security_groups))
    };
    futures::join!(nets, sgs)
}

/// One reconcile pass of a project: every area, then the roll-up. IDs are written into
/// `status` as soon as they exist, also when the pass fails.
pub async fn reconcile_project(
    env: &Env<'_>,
    obj: &OpenstackProject,
    status: &mut OpenstackProjectStatus,
    federation: FederationInput,
) -> Reconciled<Progress> {
    let mut events = Vec::new();
    let result = run(env, obj, status, federation, &mut events).await;
    if result.is_err() {
        // A failure may come from a stale cached ID (see `cache`): the retry reads afresh.
        env.locks.lookups().clear();
    }
    Reconciled { result, events }
}

async fn run(
    env: &Env<'_>,
    obj: &OpenstackProject,
    status: &mut OpenstackProjectStatus,
    federation: FederationInput,
    events: &mut Vec<Note>,
) -> Result<Progress> {
    let spec = &obj.spec;
    let generation = obj.metadata.generation;
    // Policy first: a violation touches nothing in OpenStack, not even a read.
    check_policy(spec, &obj.namespace().unwrap_or_default(), env.config)?;

    let ident = match identity::apply(env, spec, status, events).await {
        Ok(i) => i,
        Err(e) => {
            set_area(status, PROJECT_READY, generation, Err(&e));
            return Err(e);
        }
    };
    let mut failures: Vec<(&'static str, ReconcileError)> = Vec::new();
    let mut changed = ident.changed;

    // Once the project and its group exist, two chains share nothing: the Keystone links
    // (role assignments, then federation, which maps users into the role groups the first
    // one makes) and the project's resources (quotas, then the Neutron objects the quotas
    // must allow, then their usage). They run at the same time, each on its own copy of the
    // status, and hand back only the fields they own; a pass is then as long as its longer
    // chain instead of the sum of its areas. The conditions are set afterwards, in the
    // areas' order.
    let mut links = status.clone();
    let mut owned = status.clone();
    let ((mut rb, fed), res) = futures::join!(
        async {
            let rb = identity::apply_assignments(env, spec, &ident, &mut links).await;
            let fed = federation_area(env, spec, &ident, &mut links, federation).await;
            (rb, fed)
        },
        resources(env, spec, &ident, &mut owned),
    );
    status.pending_users = links.pending_users;
    status.role_groups = links.role_groups;
    status.federation_rule = links.federation_rule;
    status.quota_keys_set = owned.quota_keys_set;
    status.quota_usage = owned.quota_usage;
    status.networks = owned.networks;
    status.security_groups = owned.security_groups;

    // Role assignments always run: the project group's `member` grant is the seed's, and
    // removing every binding must revoke what earlier bindings granted.
    changed |= rb.changed;
    let rb_area = if spec.role_bindings.is_some() {
        ROLE_BINDINGS_READY
    } else {
        drop_condition(status, ROLE_BINDINGS_READY);
        PROJECT_READY
    };
    let rb_err = rb.error();
    // Set after the other areas, so conditions read in the order the areas are built.
    let rb_condition = spec.role_bindings.is_some().then(|| {
        let msg = match &rb.detail {
            Some(d) => format!("role assignments match spec.roleBindings; {d}"),
            None => "role assignments match spec.roleBindings".to_string(),
        };
        // Users that have not logged in yet are normal with federation; they are granted
        // on a later pass and do not hold the project back.
        let reason = if status.pending_users.is_empty() {
            ready_reason(false, rb.changed)
        } else {
            "UsersPending"
        };
        (reason, msg)
    });
    match &rb_err {
        Some(e) if rb_area == PROJECT_READY => {
            set_area(status, PROJECT_READY, generation, Err(e));
        }
        _ => set_area(
            status,
            PROJECT_READY,
            generation,
            Ok((
                ready_reason(ident.created, ident.changed),
                format!(
                    "project {} and group {} ({}) in domain {}",
                    ident.project_id, ident.group_name, ident.group_id, ident.domain.name
                ),
            )),
        ),
    }
    let rb_failure = rb_err.map(|e| (rb_area, e));

    let Resources {
        quotas,
        networks,
        security_groups,
    } = res;
    let areas = [
        (
            QUOTAS_READY,
            spec.quotas.is_some(),
            quotas,
            "quotas match spec.quotas",
        ),
        (
            NETWORKS_READY,
            spec.networks.is_some(),
            networks,
            "networks, subnets and routers match spec.networks",
        ),
        (
            SECURITY_GROUPS_READY,
            spec.security_groups.is_some(),
            security_groups,
            "security groups and rules match spec.securityGroups",
        ),
    ];
    // An area also runs when its section was removed but objects or keys are still recorded
    // (removing `spec.networks` deletes what we created, removing `spec.quotas` resets the
    // keys we set); its condition goes, its failure stays.
    for (area, in_spec, out, ok) in areas {
        let Some(mut out) = out else {
            drop_condition(status, area);
            continue;
        };
        changed |= out.changed;
        let err = out.error();
        if in_spec {
            let ok = (ready_reason(false, out.changed), ok.to_string());
            set_area(status, area, generation, err.as_ref().map_or(Ok(ok), Err));
        } else {
            drop_condition(status, area);
        }
        if let Some(e) = err {
            failures.push((area, e));
        }
    }

    if let Some(ok) = rb_condition {
        let err = rb_failure.as_ref().map(|(_, e)| e);
        set_area(
            status,
            ROLE_BINDINGS_READY,
            generation,
            err.map_or(Ok(ok), Err),
        );
    }
    failures.extend(rb_failure);

    let (fed_changed, fed_condition) = fed;
    changed |= fed_changed;
    match fed_condition {
        None => drop_condition(status, FEDERATION_READY),
        Some(Ok(ok)) => set_area(status, FEDERATION_READY, generation, Ok(ok)),
        Some(Err(e)) => {
            set_area(status, FEDERATION_READY, generation, Err(&e));
            failures.push((FEDERATION_READY, e));
        }
    }

    match combine(failures) {
        Some(e) => Err(e),
        None => Ok(Progress::ready(
            ready_reason(ident.created, changed),
            format!("project {} matches the spec", ident.project_id),
        )),
    }
}

/// What the resource chain of a pass did, per area; `None`: the area had nothing to do (no
/// spec section and nothing recorded).
struct Resources {
    quotas: Option<AreaOutcome>,
    networks: Option<AreaOutcome>,
    security_groups: Option<AreaOutcome>,
}

/// Quotas, then the Neutron objects (a raised limit must be in force before they are made),
/// then the network usage those objects moved. Writes `quotaKeysSet`, `quotaUsage`,
/// `networks` and `securityGroups` of `status`.
async fn resources(
    env: &Env<'_>,
    spec: &OpenstackProjectSpec,
    ident: &identity::Tenant,
    status: &mut OpenstackProjectStatus,
) -> Resources {
    let quotas = match &spec.quotas {
        Some(q) => Some(quotas::apply(env, q, &ident.project_id, status, ident.created).await),
        None if !status.quota_keys_set.is_empty() => {
            // spec.quotas was removed: the keys we set go back to their defaults.
            let out =
                quotas::apply(env, &Default::default(), &ident.project_id, status, false).await;
            status.quota_usage.clear();
            Some(out)
        }
        None => {
            status.quota_usage.clear();
            None
        }
    };
    let (net_area, sg_area) =
        neutron_areas(env, spec, &ident.project_id, status, ident.created).await;
    let mut neutron_changed = false;
    let networks = net_area.map(|(out, records)| {
        status.networks = records;
        neutron_changed |= out.changed;
        out
    });
    let security_groups = sg_area.map(|(out, records)| {
        status.security_groups = records;
        neutron_changed |= out.changed;
        out
    });
    // The network usage read with the quotas missed what this pass created or removed: read
    // it again when that happened.
    if neutron_changed && let Some(q) = &spec.quotas {
        quotas::refresh_network_usage(env, q, &ident.project_id, status).await;
    }
    Resources {
        quotas,
        networks,
        security_groups,
    }
}

/// The federation area: the project's rules in its identity provider's mapping, or their
/// removal. Writes `federationRule` of `status`; returns whether OpenStack changed and the
/// area's condition (`None`: the condition goes).
async fn federation_area(
    env: &Env<'_>,
    spec: &OpenstackProjectSpec,
    ident: &identity::Tenant,
    status: &mut OpenstackProjectStatus,
    federation: FederationInput,
) -> (
    bool,
    Option<std::result::Result<(&'static str, String), ReconcileError>>,
) {
    let mut changed = false;
    match federation {
        FederationInput::NotRequested => match status.federation_rule.clone() {
            // spec.federationRef was removed: the rule written for it goes (seed W13).
            Some(rec) => {
                let mut out = federation::remove_recorded(env, &rec).await;
                changed |= out.changed;
                match out.error() {
                    Some(e) => (changed, Some(Err(e))),
                    None => {
                        status.federation_rule = None;
                        (changed, None)
                    }
                }
            }
            None => (changed, None),
        },
        FederationInput::Unavailable(e) => (changed, Some(Err(e))),
        FederationInput::Settings(settings) => {
            let domain = settings
                .sso_domain
                .clone()
                .unwrap_or_else(|| ident.domain.name.clone());
            let mut err = None;
            // The rules live elsewhere (another IdP or domain): take them out of there first.
            let recorded = status.federation_rule.clone();
            if let Some(rec) = &recorded
                && (rec.identity_provider != settings.idp || rec.domain != domain)
            {
                let mut old = federation::remove_recorded(env, rec).await;
                changed |= old.changed;
                err = old.error();
                if err.is_none() {
                    status.federation_rule = None;
                }
            }
            // Each role's users map into the group holding that role: `member` into the
            // project group, any other role into its role group (made by the role binding
            // area; a role whose group is not there yet gets its rule on a later pass).
            let mut groups: Vec<(String, Vec<String>)> = Vec::new();
            let mut role_groups = Vec::new();
            let mut waiting = Vec::new();
            for (role, users) in identity::users_by_role(spec) {
                if role == identity::GROUP_ROLE {
                    groups.insert(0, (ident.group_name.clone(), users));
                } else if status.role_groups.contains_key(&role) {
                    let g = api::naming::role_group_name(&spec.name, &role);
                    role_groups.push(g.clone());
                    groups.push((g, users));
                } else {
                    waiting.push(role);
                }
            }
            // Groups whose rules must go: names before a rename, roles no longer bound.
            let mut retired: Vec<String> = ident.previous_group_name.iter().cloned().collect();
            if let Some(rec) = recorded.as_ref().filter(|r| r.domain == domain) {
                retired.extend(
                    federation::recorded_groups(rec)
                        .into_iter()
                        .filter(|g| !groups.iter().any(|(n, _)| n == g)),
                );
            }
            let mut out =
                federation::apply(env, &settings, &ident.domain.name, &groups, &retired).await;
            changed |= out.changed;
            let apply_err = out.error();
            // The record covers every rule that may exist: the wanted ones, and after a
            // failure the retired ones too. A record of another IdP or domain whose removal
            // failed above is kept, so that removal is retried.
            let same_place = status
                .federation_rule
                .as_ref()
                .is_none_or(|r| r.identity_provider == settings.idp && r.domain == domain);
            if same_place {
                let mut recorded_groups = role_groups;
                if apply_err.is_some() {
                    recorded_groups.extend(retired.iter().cloned());
                }
                let any = groups.iter().any(|(_, u)| !u.is_empty()) || apply_err.is_some();
                status.federation_rule = any.then(|| {
                    federation::record(&settings.idp, &domain, &ident.group_name, recorded_groups)
                });
            }
            let err = err.or(apply_err);
            let mut detail = out.detail.clone().unwrap_or_default();
            if !waiting.is_empty() {
                detail.push_str(&format!(
                    "; not mapped yet (their role group does not exist yet; see RoleBindingsReady): users of role(s) {}",
                    waiting.join(", ")
                ));
            }
            let cond = match err {
                Some(e) => Err(e),
                None => Ok((ready_reason(false, out.changed), detail)),
            };
            (changed, Some(cond))
        }
    }
}

/// Removes what the project owns in OpenStack, in reverse order of creation: router
/// interfaces, routers, subnets, networks, security groups, role assignments (adopted
/// projects), the federation rule, the group, the project. Only objects carrying our marks
/// are deleted; what is already gone is fine; any failure keeps the finalizer (seed W14).
pub async fn cleanup_project(
    env: &Env<'_>,
    obj: &OpenstackProject,
    status: &mut OpenstackProjectStatus,
    federation: FederationInput,
) -> Reconciled<()> {
    let mut events = Vec::new();
    let result = identity::cleanup(env, &obj.spec, status, federation, &mut events).await;
    Reconciled { result, events }
}

/// The projects a change of `domain` may unblock: those naming it in `spec.domain` (by name
/// or ID) whose last pass waited for a dependency (phase `Pending`). Only a Ready domain
/// unblocks anything; projects being created or Ready are left alone, so a domain's periodic
/// status writes cost its projects nothing (a project's cached status may lag its last write,
/// and a pass under way ends by itself).
pub fn projects_waiting_for(
    domain: &OpenstackDomain,
    projects: &[Arc<OpenstackProject>],
) -> Vec<ObjectRef<OpenstackProject>> {
    let ready = |conds: Option<&Vec<Condition>>| {
        conds
            .and_then(|c| api::common::find_condition(c, "Ready"))
            .is_some_and(Condition::is_true)
    };
    if !ready(domain.status.as_ref().map(|s| &s.conditions)) {
        return Vec::new();
    }
    let id = domain.status.as_ref().and_then(|s| s.domain_id.as_deref());
    projects
        .iter()
        .filter(|p| p.spec.domain == domain.spec.name || Some(p.spec.domain.as_str()) == id)
        .filter(|p| {
            p.status.as_ref().and_then(|s| s.phase) == Some(api::Phase::Pending)
                && !ready(p.status.as_ref().map(|s| &s.conditions))
        })
        .map(|p| ObjectRef::from_obj(p.as_ref()))
        .collect()
}

/// Adds a watch of OpenstackDomains to the project Controller: a project waiting for its
/// domain (`DependencyMissing`) is reconciled as soon as the domain becomes Ready.
pub fn watch_domains(
    client: kube::Client,
) -> impl FnOnce(Controller<OpenstackProject>) -> Controller<OpenstackProject> {
    move |controller| {
        let store = controller.store();
        controller.watches(
            Api::<OpenstackDomain>::all(client),
            watcher::Config::default(),
            move |domain| projects_waiting_for(&domain, &store.state()),
        )
    }
}

/// Runs the OpenstackProject controller as `openstack-operator run` wires it: the periodic
/// drift check of converged projects and, when the domain controller runs in the same
/// process (`watch_domains`), a watch of OpenstackDomains so projects waiting for theirs go
/// on as soon as it is Ready. Public so the bench can run the same controller on another
/// cloud port (the in-memory fake) without copying this wiring.
pub async fn run_controller(
    ctx: Arc<Context>,
    api: Api<OpenstackProject>,
    concurrency: u16,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
    ready: impl FnOnce() + Send + 'static,
    watch_domains: bool,
) {
    let domains = watch_domains.then(|| self::watch_domains(ctx.client.clone()));
    // Converged projects are compared with one per-cluster snapshot per period.
    let drift = drift::watch(ctx.clone());
    let tenant_credentials = crate::rotation::tenant::run::watch();
    crate::framework::run_with::<OpenstackProject>(
        ctx,
        api,
        concurrency,
        shutdown,
        ready,
        move |controller| match domains {
            Some(watch) => watch(tenant_credentials(drift(controller))),
            None => tenant_credentials(drift(controller)),
        },
    )
    .await;
}

/// Reads the federation ConfigMap (from the object's own namespace unless an allowed
/// `configMapNamespace` is given).
async fn read_federation(ctx: &Context, obj: &OpenstackProject) -> FederationInput {
    let Some(fref) = &obj.spec.federation_ref else {
        return FederationInput::NotRequested;
    };
    let own = obj.namespace().unwrap_or_default();
    let ns = federation_namespace(&obj.spec, &own).unwrap_or(own);
    let Some(name) = fref.config_map_name.as_deref().filter(|n| !n.is_empty()) else {
        return FederationInput::Unavailable(ReconcileError::invalid(
            "spec.federationRef.configMapName",
            "is required when federationRef is given",
        ));
    };
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    match api.get_opt(name).await {
        Ok(Some(cm)) => federation_from_data(
            &ns,
            name,
            cm.data.as_ref(),
            ctx.config.federation_namespaces.contains(&ns),
        ),
        Ok(None) => FederationInput::Unavailable(ReconcileError::DependencyMissing(format!(
            "ConfigMap {ns}/{name} (spec.federationRef.configMapName)"
        ))),
        Err(e) => FederationInput::Unavailable(ReconcileError::Kube(e)),
    }
}

async fn publish_all(ctx: &Context, obj: &OpenstackProject, notes: Vec<Note>) {
    for n in notes {
        let t = if n.warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        publish(ctx, obj, t, n.reason, n.action, n.message).await;
    }
}

#[async_trait]
impl Managed for OpenstackProject {
    type Status = OpenstackProjectStatus;
    // The framework writes READY_CONDITION and `Ready` from the pass's outcome. The seed's
    // `ProjectReady` means "project and group exist" (and stays True while, say, a router
    // fails), so it is set per area here; the roll-up is `Ready` alone.
    const READY_CONDITION: &'static str = "Ready";

    fn status(&self) -> Option<&Self::Status> {
        self.status.as_ref()
    }
    fn cloud_ref(&self) -> Option<&str> {
        self.spec.cloud_ref.as_ref().map(|c| c.name.as_str())
    }

    fn api(client: kube::Client, obj: &Self) -> Api<Self> {
        Api::namespaced(client, &obj.namespace().unwrap_or_default())
    }

    fn validate(&self) -> Vec<FieldError> {
        api::validation::object_errors(self, &self.spec)
    }

    async fn apply(&self, ctx: &Context, status: &mut Self::Status) -> Result<Progress> {
        // Before reading a ConfigMap from another namespace.
        check_policy(
            &self.spec,
            &self.namespace().unwrap_or_default(),
            &ctx.config,
        )?;
        let federation = read_federation(ctx, self).await;
        let env = Env {
            cloud: &ctx.cloud,
            config: &ctx.config,
            owner: owner_of(self, ctx),
            locks: ctx,
        };
        let out = reconcile_project(&env, self, status, federation).await;
        publish_all(ctx, self, out.events).await;
        // The tenant's credential needs the Kubernetes client (its Secret), so it runs here,
        // after the areas; a failing area does not hold back a credential already due.
        let tenant = crate::rotation::tenant::run::apply(ctx, self, status).await;
        match (out.result, tenant) {
            (Ok(_), Err(e)) => Err(e),
            (result, _) => result,
        }
    }

    async fn cleanup(&self, ctx: &Context, status: &mut Self::Status) -> Result<()> {
        let own = self.namespace().unwrap_or_default();
        // A rule we wrote is recorded in status.federationRule and removed from there; the
        // ConfigMap matters only for rules written before that record existed.
        let federation = if federation_namespace_allowed(&self.spec, &own, &ctx.config) {
            read_federation(ctx, self).await
        } else {
            // A ConfigMap we may not read never produced a rule; nothing to remove.
            warn!("federation ConfigMap namespace not allowed; skipping the mapping rule");
            FederationInput::NotRequested
        };
        let env = Env {
            cloud: &ctx.cloud,
            config: &ctx.config,
            owner: owner_of(self, ctx),
            locks: ctx,
        };
        // Before the project: the user's credentials are revoked while it can be found.
        crate::rotation::tenant::run::cleanup(ctx, self, status).await?;
        let out = cleanup_project(&env, self, status, federation).await;
        publish_all(ctx, self, out.events).await;
        out.result
    }
}
