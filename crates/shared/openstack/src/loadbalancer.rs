//! The Octavia (load-balancer v2) port of the virtual kubelet: a Service of type LoadBalancer
//! becomes one load balancer with a listener and a pool per Service port, whose members are the
//! ready pods' addresses.
//!
//! Octavia facts this port relies on (octavia 18, 2026.1):
//! - A load balancer is immutable while its `provisioning_status` is `PENDING_*`: every write
//!   under it answers 409 until the worker is done, so callers write one thing at a time and
//!   wait for `ACTIVE` between writes.
//! - `GET /v2/lbaas/loadbalancers/{id}/status` answers the whole tree (listeners, their pools,
//!   the pools' members with address and port) in one call: the observed state.
//! - `PUT /v2/lbaas/pools/{id}/members` replaces a pool's members as a batch (members are
//!   matched on address and port): a readiness change is one call.
//! - `DELETE /v2/lbaas/loadbalancers/{id}?cascade=true` removes the tree.
//! - Names are not unique in Octavia: callers name a load balancer after the Service's uid and
//!   find it by name, so a create whose answer was lost is found on the next pass.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::adapter::{Core, Request, Service, seg};
use crate::error::{Error, Result};

const S: Service = Service::LoadBalancer;

/// Octavia's `provisioning_status` values callers act on.
pub mod status {
    /// Ready for the next write.
    pub const ACTIVE: &str = "ACTIVE";
    /// Failed; Octavia does not retry it by itself.
    pub const ERROR: &str = "ERROR";
    /// Being deleted.
    pub const PENDING_DELETE: &str = "PENDING_DELETE";
    /// Deleted (still listed for a while).
    pub const DELETED: &str = "DELETED";
}

/// A load balancer as the list and get calls show it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct LoadBalancer {
    /// Octavia's id.
    pub id: String,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// The VIP address.
    #[serde(default)]
    pub vip_address: Option<String>,
    /// `ACTIVE`, `PENDING_CREATE`, `PENDING_UPDATE`, `PENDING_DELETE`, `ERROR`, `DELETED`.
    #[serde(default)]
    pub provisioning_status: String,
    /// `ONLINE`, `OFFLINE`, `DEGRADED`, `ERROR`, `NO_MONITOR`.
    #[serde(default)]
    pub operating_status: String,
    /// The project that owns it.
    #[serde(default)]
    pub project_id: String,
    /// Its tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// A load balancer to create.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LoadBalancerCreate {
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// The subnet the VIP is taken from.
    pub vip_subnet_id: String,
    /// Tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// A pool member (the status tree's view, or one to put).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Member {
    /// The backend address.
    pub address: String,
    /// The backend port.
    pub protocol_port: u16,
    /// Name (the pod's).
    #[serde(default)]
    pub name: String,
}

/// A pool in the status tree.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct StatusPool {
    /// Id.
    pub id: String,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Provisioning status.
    #[serde(default)]
    pub provisioning_status: String,
    /// Members.
    #[serde(default)]
    pub members: Vec<Member>,
}

/// A listener in the status tree.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct StatusListener {
    /// Id.
    pub id: String,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Provisioning status.
    #[serde(default)]
    pub provisioning_status: String,
    /// Its pools (here: the default pool).
    #[serde(default)]
    pub pools: Vec<StatusPool>,
}

/// `GET .../loadbalancers/{id}/status`: the load balancer's tree.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct StatusTree {
    /// Id.
    pub id: String,
    /// Provisioning status.
    #[serde(default)]
    pub provisioning_status: String,
    /// Listeners.
    #[serde(default)]
    pub listeners: Vec<StatusListener>,
}

/// The Octavia calls of the virtual kubelet.
#[async_trait]
pub trait LoadBalancers: Send + Sync {
    /// Load balancers named `name` (names are not unique in Octavia).
    async fn list_load_balancers(&self, name: &str) -> Result<Vec<LoadBalancer>>;
    /// Load balancers carrying `tag`, of `project_id` when given (an admin's list spans
    /// projects otherwise).
    async fn list_tagged(&self, tag: &str, project_id: Option<&str>) -> Result<Vec<LoadBalancer>>;
    /// Create a load balancer (a POST: never repeated after an ambiguous failure; find it by name).
    async fn create_load_balancer(&self, req: &LoadBalancerCreate) -> Result<LoadBalancer>;
    /// The load balancer's tree: listeners, pools, members.
    async fn status_tree(&self, lb_id: &str) -> Result<StatusTree>;
    /// Delete a load balancer and everything under it (NotFound when it is gone already).
    async fn delete_load_balancer(&self, lb_id: &str) -> Result<()>;
    /// Create a listener on the load balancer; returns its id.
    async fn create_listener(
        &self,
        lb_id: &str,
        name: &str,
        protocol: &str,
        port: u16,
    ) -> Result<String>;
    /// Delete a listener.
    async fn delete_listener(&self, id: &str) -> Result<()>;
    /// Create the listener's default pool (round robin); returns its id.
    async fn create_pool(&self, listener_id: &str, name: &str, protocol: &str) -> Result<String>;
    /// Delete a pool (and its members).
    async fn delete_pool(&self, id: &str) -> Result<()>;
    /// Replace the pool's members with `members` (one batch update).
    async fn set_members(&self, pool_id: &str, members: &[Member]) -> Result<()>;
}

#[derive(Deserialize)]
struct WireId {
    id: String,
}

/// The Octavia port on the shared client core.
#[derive(Clone, Debug)]
pub struct LoadBalancerAdapter {
    core: Core,
}

impl LoadBalancerAdapter {
    /// Octavia on `core`.
    pub fn new(core: Core) -> Self {
        Self { core }
    }
}

/// The batch member update's body.
pub(crate) fn members_body(members: &[Member]) -> serde_json::Value {
    json!({ "members": members.iter().map(|m| json!({
        "address": m.address, "protocol_port": m.protocol_port, "name": m.name,
    })).collect::<Vec<_>>() })
}

#[async_trait]
impl LoadBalancers for LoadBalancerAdapter {
    async fn list_load_balancers(&self, name: &str) -> Result<Vec<LoadBalancer>> {
        let r = Request::get(S, "list_load_balancers", "lbaas/loadbalancers").query("name", name);
        self.core.list_all(r, "loadbalancers").await
    }

    async fn list_tagged(&self, tag: &str, project_id: Option<&str>) -> Result<Vec<LoadBalancer>> {
        let mut r =
            Request::get(S, "list_load_balancers", "lbaas/loadbalancers").query("tags", tag);
        if let Some(p) = project_id {
            r = r.query("project_id", p);
        }
        self.core.list_all(r, "loadbalancers").await
    }

    async fn create_load_balancer(&self, req: &LoadBalancerCreate) -> Result<LoadBalancer> {
        let r = Request::post(S, "create_load_balancer", "lbaas/loadbalancers")
            .json(&json!({ "loadbalancer": req }))?;
        self.core.send(&r).await?.json_at("loadbalancer")
    }

    async fn status_tree(&self, lb_id: &str) -> Result<StatusTree> {
        let r = Request::get(
            S,
            "get_load_balancer_status",
            format!("lbaas/loadbalancers/{}/status", seg(lb_id)),
        );
        let v: serde_json::Value = self.core.send(&r).await?.json()?;
        let lb = v
            .get("statuses")
            .and_then(|s| s.get("loadbalancer"))
            .cloned()
            .ok_or_else(|| {
                Error::unexpected("load_balancer status: no statuses.loadbalancer in the answer")
            })?;
        serde_json::from_value(lb).map_err(|e| {
            Error::unexpected(format!("load_balancer status: cannot decode the tree: {e}"))
        })
    }

    async fn delete_load_balancer(&self, lb_id: &str) -> Result<()> {
        let r = Request::delete(
            S,
            "delete_load_balancer",
            format!("lbaas/loadbalancers/{}", seg(lb_id)),
        )
        .query("cascade", "true");
        self.core.send(&r).await.map(|_| ())
    }

    async fn create_listener(
        &self,
        lb_id: &str,
        name: &str,
        protocol: &str,
        port: u16,
    ) -> Result<String> {
        let r = Request::post(S, "create_listener", "lbaas/listeners").json(&json!({
            "listener": {"loadbalancer_id": lb_id, "name": name, "protocol": protocol,
                         "protocol_port": port}
        }))?;
        Ok(self.core.send(&r).await?.json_at::<WireId>("listener")?.id)
    }

    async fn delete_listener(&self, id: &str) -> Result<()> {
        let r = Request::delete(S, "delete_listener", format!("lbaas/listeners/{}", seg(id)));
        self.core.send(&r).await.map(|_| ())
    }

    async fn create_pool(&self, listener_id: &str, name: &str, protocol: &str) -> Result<String> {
        let r = Request::post(S, "create_pool", "lbaas/pools").json(&json!({
            "pool": {"listener_id": listener_id, "name": name, "protocol": protocol,
                     "lb_algorithm": "ROUND_ROBIN"}
        }))?;
        Ok(self.core.send(&r).await?.json_at::<WireId>("pool")?.id)
    }

    async fn delete_pool(&self, id: &str) -> Result<()> {
        let r = Request::delete(S, "delete_pool", format!("lbaas/pools/{}", seg(id)));
        self.core.send(&r).await.map(|_| ())
    }

    async fn set_members(&self, pool_id: &str, members: &[Member]) -> Result<()> {
        // A PUT of the whole set: repeating it is harmless.
        let r = Request::put(
            S,
            "set_members",
            format!("lbaas/pools/{}/members", seg(pool_id)),
        )
        .json(&members_body(members))?;
        self.core.send(&r).await.map(|_| ())
    }
}

/// An in-memory [`LoadBalancers`] for unit tests: every write completes at once (the load
/// balancer stays `ACTIVE`), ids `lb-N`, `listener-N`, `pool-N`, VIPs `192.0.2.N`.
#[derive(Clone, Debug, Default)]
pub struct FakeLoadBalancers {
    inner: Arc<Mutex<FakeState>>,
}

#[derive(Debug, Default)]
struct FakeState {
    next: u32,
    lbs: BTreeMap<String, (LoadBalancer, StatusTree)>,
    calls: Vec<String>,
}

impl FakeLoadBalancers {
    /// Empty.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The calls made, as `create_listener <name>`, `set_members <pool> <n>`, ...
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    /// All load balancers.
    pub fn load_balancers(&self) -> Vec<LoadBalancer> {
        self.lock().lbs.values().map(|(l, _)| l.clone()).collect()
    }

    /// Set a load balancer's provisioning status (e.g. `PENDING_UPDATE`).
    pub fn set_status(&self, lb_id: &str, status: &str) {
        if let Some((l, t)) = self.lock().lbs.get_mut(lb_id) {
            l.provisioning_status = status.into();
            t.provisioning_status = status.into();
        }
    }

    fn not_found(what: &str) -> Error {
        Error::NotFound { what: what.into() }
    }
}

#[async_trait]
impl LoadBalancers for FakeLoadBalancers {
    async fn list_load_balancers(&self, name: &str) -> Result<Vec<LoadBalancer>> {
        Ok(self
            .lock()
            .lbs
            .values()
            .filter(|(l, _)| l.name == name)
            .map(|(l, _)| l.clone())
            .collect())
    }

    async fn list_tagged(&self, tag: &str, project_id: Option<&str>) -> Result<Vec<LoadBalancer>> {
        Ok(self
            .lock()
            .lbs
            .values()
            .filter(|(l, _)| l.tags.iter().any(|t| t == tag))
            .filter(|(l, _)| project_id.is_none_or(|p| l.project_id == p))
            .map(|(l, _)| l.clone())
            .collect())
    }

    async fn create_load_balancer(&self, req: &LoadBalancerCreate) -> Result<LoadBalancer> {
        let mut s = self.lock();
        s.calls.push(format!("create_load_balancer {}", req.name));
        s.next += 1;
        let n = s.next;
        let lb = LoadBalancer {
            id: format!("lb-{n}"),
            name: req.name.clone(),
            vip_address: Some(format!("192.0.2.{n}")),
            provisioning_status: status::ACTIVE.into(),
            operating_status: "ONLINE".into(),
            project_id: String::new(),
            tags: req.tags.clone(),
        };
        let tree = StatusTree {
            id: lb.id.clone(),
            provisioning_status: status::ACTIVE.into(),
            listeners: Vec::new(),
        };
        s.lbs.insert(lb.id.clone(), (lb.clone(), tree));
        Ok(lb)
    }

    async fn status_tree(&self, lb_id: &str) -> Result<StatusTree> {
        self.lock()
            .lbs
            .get(lb_id)
            .map(|(_, t)| t.clone())
            .ok_or_else(|| Self::not_found(lb_id))
    }

    async fn delete_load_balancer(&self, lb_id: &str) -> Result<()> {
        let mut s = self.lock();
        s.calls.push(format!("delete_load_balancer {lb_id}"));
        s.lbs
            .remove(lb_id)
            .map(|_| ())
            .ok_or_else(|| Self::not_found(lb_id))
    }

    async fn create_listener(
        &self,
        lb_id: &str,
        name: &str,
        _protocol: &str,
        _port: u16,
    ) -> Result<String> {
        let mut s = self.lock();
        s.calls.push(format!("create_listener {name}"));
        s.next += 1;
        let id = format!("listener-{}", s.next);
        let (_, t) = s.lbs.get_mut(lb_id).ok_or_else(|| Self::not_found(lb_id))?;
        t.listeners.push(StatusListener {
            id: id.clone(),
            name: name.into(),
            provisioning_status: status::ACTIVE.into(),
            pools: Vec::new(),
        });
        Ok(id)
    }

    async fn delete_listener(&self, id: &str) -> Result<()> {
        let mut s = self.lock();
        s.calls.push(format!("delete_listener {id}"));
        for (_, t) in s.lbs.values_mut() {
            t.listeners.retain(|l| l.id != id);
        }
        Ok(())
    }

    async fn create_pool(&self, listener_id: &str, name: &str, _protocol: &str) -> Result<String> {
        let mut s = self.lock();
        s.calls.push(format!("create_pool {name}"));
        s.next += 1;
        let id = format!("pool-{}", s.next);
        let l = s
            .lbs
            .values_mut()
            .flat_map(|(_, t)| t.listeners.iter_mut())
            .find(|l| l.id == listener_id)
            .ok_or_else(|| Self::not_found(listener_id))?;
        l.pools.push(StatusPool {
            id: id.clone(),
            name: name.into(),
            provisioning_status: status::ACTIVE.into(),
            members: Vec::new(),
        });
        Ok(id)
    }

    async fn delete_pool(&self, id: &str) -> Result<()> {
        let mut s = self.lock();
        s.calls.push(format!("delete_pool {id}"));
        for (_, t) in s.lbs.values_mut() {
            for l in &mut t.listeners {
                l.pools.retain(|p| p.id != id);
            }
        }
        Ok(())
    }

    async fn set_members(&self, pool_id: &str, members: &[Member]) -> Result<()> {
        let mut s = self.lock();
        s.calls
            .push(format!("set_members {pool_id} {}", members.len()));
        let p = s
            .lbs
            .values_mut()
            .flat_map(|(_, t)| t.listeners.iter_mut())
            .flat_map(|l| l.pools.iter_mut())
            .find(|p| p.id == pool_id)
            .ok_or_else(|| Self::not_found(pool_id))?;
        p.members = members.to_vec();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_octavias_status_tree() {
        // As octavia 18 answered GET .../status (trimmed).
        let v = json!({"statuses": {"loadbalancer": {
            "id": "lb", "name": "n", "provisioning_status": "ACTIVE", "operating_status": "ONLINE",
            "listeners": [{"id": "l", "name": "TCP-80", "provisioning_status": "ACTIVE",
                "operating_status": "ONLINE", "pools": [{"id": "p", "name": "TCP-80",
                "provisioning_status": "ACTIVE", "operating_status": "ONLINE",
                "members": [{"id": "m", "name": "pod-a", "address": "10.240.0.9",
                    "protocol_port": 8080, "provisioning_status": "ACTIVE",
                    "operating_status": "NO_MONITOR"}]}]}]}}});
        let t: StatusTree = serde_json::from_value(v["statuses"]["loadbalancer"].clone()).unwrap();
        assert_eq!(t.listeners[0].pools[0].members[0].address, "10.240.0.9");
        assert_eq!(t.listeners[0].pools[0].members[0].protocol_port, 8080);
    }

    #[test]
    fn batch_member_body_names_address_and_port() {
        let b = members_body(&[Member {
            address: "10.0.0.1".into(),
            protocol_port: 80,
            name: "p".into(),
        }]);
        assert_eq!(
            b,
            json!({"members": [{"address": "10.0.0.1", "protocol_port": 80, "name": "p"}]})
        );
    }
}
