//! An in-memory OpenStack for unit tests of controllers.
//!
//! Always compiled (not behind `cfg(test)`) because other crates' unit tests
//! use it. It implements all five service traits with the semantics the
//! controllers depend on: generated uuids, NotFound/Conflict/BadRequest where
//! the real services return them, Keystone's "disable before delete" rule,
//! Neutron's default security group and default egress rules, Glance's
//! asynchronous import (status advances on later reads; a URL containing
//! `404` fails like a web-download of a missing file does), and quota usage.
//!
//! Instrumentation for tests: [`FakeCloud::calls`] counts every call by
//! `"service.operation"` (e.g. `"network.create_subnet"`), [`FakeCloud::writes`]
//! / [`FakeCloud::reads`] split them, and [`FakeCloud::fail_next`] /
//! [`FakeCloud::lose_next_response`] inject faults.

mod block_storage;
mod compute;
mod container;
mod identity;
mod image;
mod network;
mod pacing;
mod tenant_user;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

pub use self::container::FakeZun;
pub use self::pacing::{Pacing, PacingTotals, ServiceTimes};
pub use self::tenant_user::FakeTenantUsers;
use crate::error::{Error, Result};
use crate::model::*;
use crate::traits::Cloud;

/// What an injected fault does.
#[derive(Clone, Debug)]
enum Fault {
    /// Return this error without doing anything.
    Fail(Error),
    /// Do the operation, then return a transient error (the response was
    /// "lost" on the way back, as with a timeout after the server committed).
    LoseResponse,
}

/// Glance import progress of one image.
#[derive(Clone, Debug)]
pub(crate) struct ImportProgress {
    /// Reads left before the import finishes.
    reads_left: u32,
    /// Whether it will succeed.
    succeeds: bool,
}

/// The stored state of all services.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) domains: BTreeMap<String, Domain>,
    pub(crate) projects: BTreeMap<String, Project>,
    pub(crate) groups: BTreeMap<String, Group>,
    pub(crate) users: BTreeMap<String, User>,
    /// (group_id, user_id)
    pub(crate) memberships: BTreeSet<(String, String)>,
    pub(crate) roles: BTreeMap<String, Role>,
    /// (project_id, actor, role_id)
    pub(crate) assignments: BTreeSet<(String, Actor, String)>,
    pub(crate) idps: BTreeMap<String, IdentityProvider>,
    pub(crate) mappings: BTreeMap<String, Mapping>,
    /// (idp_id, protocol_id)
    pub(crate) protocols: BTreeMap<(String, String), FederationProtocol>,

    pub(crate) flavors: BTreeMap<String, Flavor>,
    pub(crate) flavor_access: BTreeMap<String, BTreeSet<String>>,
    pub(crate) compute_quotas: BTreeMap<String, QuotaSet>,

    pub(crate) images: BTreeMap<String, Image>,
    pub(crate) imports: BTreeMap<String, ImportProgress>,

    pub(crate) networks: BTreeMap<String, Network>,
    pub(crate) subnets: BTreeMap<String, Subnet>,
    pub(crate) routers: BTreeMap<String, Router>,
    /// port_id → (router_id, port)
    pub(crate) router_ports: BTreeMap<String, (String, RouterPort)>,
    pub(crate) security_groups: BTreeMap<String, SecurityGroup>,
    pub(crate) rules: BTreeMap<String, SecurityGroupRule>,
    /// Projects whose Neutron `default` security group exists.
    pub(crate) neutron_projects: BTreeSet<String>,
    pub(crate) network_quotas: BTreeMap<String, BTreeMap<String, i64>>,

    pub(crate) volume_quotas: BTreeMap<String, QuotaSet>,

    /// Whether [`crate::Identity::tenant_users`] answers (see
    /// [`FakeCloud::enable_tenant_users`]).
    pub(crate) tenant_users: bool,
    /// Tenant credential users: id → (description, password set last).
    pub(crate) tenant_user_meta: BTreeMap<String, (String, Option<String>)>,
    /// Application credentials by user id.
    pub(crate) app_credentials: BTreeMap<String, Vec<crate::app_credential::ApplicationCredential>>,
}

#[derive(Debug, Default)]
struct Inner {
    state: Mutex<State>,
    calls: Mutex<BTreeMap<String, u64>>,
    faults: Mutex<HashMap<String, VecDeque<Fault>>>,
    /// Set once, before the fake is shared (see [`FakeCloud::paced`]).
    pacing: Option<Arc<Pacing>>,
}

/// The in-memory cloud. Cheap to clone; clones share state.
#[derive(Clone, Debug)]
pub struct FakeCloud {
    inner: Arc<Inner>,
}

impl Default for FakeCloud {
    fn default() -> Self {
        Self::new()
    }
}

/// A new random id in the style of the service (uuid4 with dashes).
pub(crate) fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A new random id in Keystone's style (32 hex characters, no dashes).
pub(crate) fn new_hex_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Lock a mutex, recovering the data if a panicking test poisoned it (the
/// fake's invariants do not depend on a critical section completing).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether an operation name (the part after the dot) is a read.
fn is_read(op: &str) -> bool {
    let name = op.rsplit('.').next().unwrap_or(op);
    name.starts_with("get_") || name.starts_with("list_") || name.starts_with("find_")
}

impl FakeCloud {
    /// A fake cloud seeded like a fresh deployment: domain `default` (id
    /// `default`), roles `admin`, `member`, `reader`, project `admin` and
    /// user `admin` in `default`.
    pub fn new() -> Self {
        Self::seeded(None)
    }

    fn seeded(pacing: Option<Arc<Pacing>>) -> Self {
        let fake = Self {
            inner: Arc::new(Inner {
                pacing,
                ..Inner::default()
            }),
        };
        {
            let mut st = fake.state();
            st.domains.insert(
                "default".into(),
                Domain {
                    id: "default".into(),
                    name: "Default".into(),
                    description: "The default domain".into(),
                    enabled: true,
                    tags: vec![],
                },
            );
            for r in ["admin", "member", "reader"] {
                let id = new_hex_id();
                st.roles.insert(
                    id.clone(),
                    Role {
                        id,
                        name: r.into(),
                        domain_id: None,
                    },
                );
            }
            let pid = new_hex_id();
            st.projects.insert(
                pid.clone(),
                Project {
                    id: pid,
                    name: "admin".into(),
                    domain_id: "default".into(),
                    description: "Bootstrap project".into(),
                    enabled: true,
                    tags: vec![],
                },
            );
            let uid = new_hex_id();
            st.users.insert(
                uid.clone(),
                User {
                    id: uid,
                    name: "admin".into(),
                    domain_id: "default".into(),
                    enabled: true,
                },
            );
        }
        fake
    }

    /// A fresh fake (as [`FakeCloud::new`]) answering like a remote cloud: every call
    /// first takes the client-side limiter's permits and service times `pacing` gives (for
    /// the bench; tests use [`FakeCloud::new`]).
    pub fn paced(pacing: Arc<Pacing>) -> Self {
        Self::seeded(Some(pacing))
    }

    /// What the pacing has done so far (`None`: not paced).
    pub fn pacing_totals(&self) -> Option<PacingTotals> {
        self.inner.pacing.as_ref().map(|p| p.totals())
    }

    /// A [`Cloud`] whose five ports are this fake.
    pub fn cloud(&self) -> Cloud {
        Cloud {
            identity: Arc::new(self.clone()),
            compute: Arc::new(self.clone()),
            image: Arc::new(self.clone()),
            network: Arc::new(self.clone()),
            block_storage: Arc::new(self.clone()),
        }
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.inner.state)
    }

    /// Call counts by `"service.operation"`.
    pub fn calls(&self) -> BTreeMap<String, u64> {
        lock(&self.inner.calls).clone()
    }

    /// Calls of one operation (`"identity.create_project"`).
    pub fn call_count(&self, op: &str) -> u64 {
        lock(&self.inner.calls).get(op).copied().unwrap_or(0)
    }

    /// Total number of write calls (anything not `get_*`/`list_*`/`find_*`).
    pub fn writes(&self) -> u64 {
        lock(&self.inner.calls)
            .iter()
            .filter(|(op, _)| !is_read(op))
            .map(|(_, n)| n)
            .sum()
    }

    /// Total number of read calls.
    pub fn reads(&self) -> u64 {
        lock(&self.inner.calls)
            .iter()
            .filter(|(op, _)| is_read(op))
            .map(|(_, n)| n)
            .sum()
    }

    /// Write calls by operation.
    pub fn write_calls(&self) -> BTreeMap<String, u64> {
        lock(&self.inner.calls)
            .iter()
            .filter(|(op, _)| !is_read(op))
            .map(|(op, n)| (op.clone(), *n))
            .collect()
    }

    /// Forget all recorded calls (e.g. after test setup).
    pub fn reset_calls(&self) {
        lock(&self.inner.calls).clear();
    }

    /// Make the next `n` calls of `op` (`"service.operation"`) fail with
    /// `error` without touching state.
    pub fn fail_next(&self, op: &str, n: usize, error: Error) {
        let mut faults = lock(&self.inner.faults);
        let q = faults.entry(op.to_string()).or_default();
        for _ in 0..n {
            q.push_back(Fault::Fail(error.clone()));
        }
    }

    /// Make the next `n` calls of `op` perform their effect and then return
    /// a transient error, as when the response is lost after the server
    /// committed the change.
    pub fn lose_next_response(&self, op: &str, n: usize) {
        let mut faults = lock(&self.inner.faults);
        let q = faults.entry(op.to_string()).or_default();
        for _ in 0..n {
            q.push_back(Fault::LoseResponse);
        }
    }

    /// Drop all pending injected faults.
    pub fn clear_faults(&self) {
        lock(&self.inner.faults).clear();
    }

    /// Seed a user (users are managed outside the operator).
    pub fn add_user(&self, domain_id: &str, name: &str) -> User {
        let user = User {
            id: new_hex_id(),
            name: name.into(),
            domain_id: domain_id.into(),
            enabled: true,
        };
        self.state().users.insert(user.id.clone(), user.clone());
        user
    }

    /// Lets this fake make tenants' application credentials
    /// ([`crate::Identity::tenant_users`] answers a [`FakeTenantUsers`]; off by default, as a
    /// port that cannot make them).
    pub fn enable_tenant_users(&self) {
        self.state().tenant_users = true;
    }

    /// Seed a global role.
    pub fn add_role(&self, name: &str) -> Role {
        let role = Role {
            id: new_hex_id(),
            name: name.into(),
            domain_id: None,
        };
        self.state().roles.insert(role.id.clone(), role.clone());
        role
    }

    /// Set the reported compute usage of one quota key.
    pub fn set_compute_usage(&self, project_id: &str, key: &str, in_use: i64) {
        let mut st = self.state();
        let q = st
            .compute_quotas
            .entry(project_id.into())
            .or_insert_with(compute::default_quota);
        q.entry(key.into()).or_default().in_use = in_use;
    }

    /// Set the reported volume usage of one quota key.
    pub fn set_volume_usage(&self, project_id: &str, key: &str, in_use: i64) {
        let mut st = self.state();
        let q = st
            .volume_quotas
            .entry(project_id.into())
            .or_insert_with(block_storage::default_quota);
        q.entry(key.into()).or_default().in_use = in_use;
    }

    /// Force an image's status (e.g. `killed`) for error-path tests.
    pub fn set_image_status(&self, image_id: &str, status: ImageStatus) {
        let mut st = self.state();
        st.imports.remove(image_id);
        if let Some(img) = st.images.get_mut(image_id) {
            img.status = status;
        }
    }

    /// Run one operation: wait as paced, count it, apply any injected fault, then run
    /// `f` on the locked state.
    pub(crate) async fn run<T>(
        &self,
        op: &str,
        f: impl FnOnce(&mut State) -> Result<T>,
    ) -> Result<T> {
        if let Some(p) = &self.inner.pacing {
            p.call(op).await;
        }
        *lock(&self.inner.calls).entry(op.to_string()).or_default() += 1;
        let fault = lock(&self.inner.faults)
            .get_mut(op)
            .and_then(|q| q.pop_front());
        match fault {
            Some(Fault::Fail(e)) => Err(e),
            Some(Fault::LoseResponse) => {
                // The effect happens, only the caller does not learn of it.
                let _ = f(&mut self.state());
                Err(Error::transient(format!(
                    "{op}: connection reset before the response arrived (injected)"
                )))
            }
            None => f(&mut self.state()),
        }
    }
}

/// Validate Keystone/Neutron style tags.
pub(crate) fn check_tags(ctx: &str, tags: &[String]) -> Result<()> {
    if tags.len() > 80 {
        return Err(Error::bad_request(format!(
            "{ctx}: Invalid input: too many tags (max 80)"
        )));
    }
    for t in tags {
        if t.is_empty() || t.len() > 255 || t.contains(',') || t.contains('/') {
            return Err(Error::bad_request(format!(
                "{ctx}: Invalid input for tags: '{t}' (1-255 characters, no ',' or '/')"
            )));
        }
    }
    Ok(())
}

/// Whether `have` contains every tag in `want`.
pub(crate) fn has_all_tags(have: &[String], want: &[String]) -> bool {
    want.iter().all(|w| have.contains(w))
}

/// Deduplicate tags preserving first occurrence (services store a set).
pub(crate) fn dedup_tags(tags: &[String]) -> Vec<String> {
    let mut seen = BTreeSet::new();
    tags.iter()
        .filter(|t| seen.insert((*t).clone()))
        .cloned()
        .collect()
}

/// Check a quota update against the known keys and current usage the way
/// the services do (unknown key or limit below usage → 400).
pub(crate) fn apply_quota_update(
    ctx: &str,
    quota: &mut QuotaSet,
    limits: &QuotaUpdate,
) -> Result<()> {
    for (k, v) in limits {
        let Some(cur) = quota.get(k) else {
            return Err(Error::bad_request(format!(
                "{ctx}: Bad quota key '{k}': Additional properties are not allowed"
            )));
        };
        if *v < -1 {
            return Err(Error::bad_request(format!(
                "{ctx}: Invalid input for field/attribute {k}. Value: {v}. {v} is less than the minimum of -1"
            )));
        }
        if *v != -1 && *v < cur.in_use {
            return Err(Error::bad_request(format!(
                "{ctx}: Quota limit {v} for {k} must be greater than or equal to already used and reserved {}.",
                cur.in_use
            )));
        }
    }
    for (k, v) in limits {
        if let Some(cur) = quota.get_mut(k) {
            cur.limit = *v;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn counts_reads_and_writes() {
        let fake = FakeCloud::new();
        let cloud = fake.cloud();
        cloud
            .identity
            .create_domain(&DomainCreate {
                name: "d1".into(),
                description: String::new(),
                enabled: true,
                tags: vec![],
            })
            .await
            .unwrap();
        assert!(cloud.identity.find_domain("d1").await.unwrap().is_some());
        assert_eq!(fake.writes(), 1);
        assert_eq!(fake.reads(), 1);
        assert_eq!(fake.call_count("identity.create_domain"), 1);
        fake.reset_calls();
        assert_eq!(fake.writes(), 0);
    }

    #[tokio::test]
    async fn injected_failure_and_lost_response() {
        let fake = FakeCloud::new();
        let cloud = fake.cloud();
        fake.fail_next("identity.create_domain", 1, Error::transient("boom"));
        let req = DomainCreate {
            name: "d2".into(),
            description: String::new(),
            enabled: true,
            tags: vec![],
        };
        let e = cloud.identity.create_domain(&req).await.unwrap_err();
        assert!(e.is_transient());
        assert!(cloud.identity.find_domain("d2").await.unwrap().is_none());

        fake.lose_next_response("identity.create_domain", 1);
        let e = cloud.identity.create_domain(&req).await.unwrap_err();
        assert!(e.is_transient());
        // The effect happened: a retry now conflicts, a find sees it.
        assert!(cloud.identity.find_domain("d2").await.unwrap().is_some());
        let e = cloud.identity.create_domain(&req).await.unwrap_err();
        assert!(e.is_conflict());
    }
}
