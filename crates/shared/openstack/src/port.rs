//! Neutron ports, for the virtual kubelet: it creates a pod's port before the pod's Zun
//! container, so the pod IP is known when the container starts, and passes the port to Zun.
//!
//! Kept apart from [`crate::Network`] (the resource operator's networks, subnets, routers and
//! security groups) because only the virtual kubelet uses ports and it needs no tags or
//! lost-create recovery here: its port names are unique per pod, so a create whose answer was
//! lost is found by name on the next pass.
//!
//! What the local Neutron 2026.1 showed: `tags` in a port POST are accepted (201) and silently
//! dropped, so ownership is carried by the name; a new port without a host binding is `DOWN`
//! with no `device_id`, which is what Zun requires of a port it is given (zun 18
//! `network/neutron.py` `ensure_neutron_port_usable`: same project, no `device_id`, not
//! `ACTIVE`/`BUILD`/`ERROR`, not `binding_failed`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use crate::adapter::{Core, Request, Service, seg};
use crate::error::{Error, Result};

const S: Service = Service::Network;

/// A Neutron port as the virtual kubelet needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Port {
    /// Neutron's id.
    pub id: String,
    /// Name (the virtual kubelet's carry the node and the pod's uid).
    pub name: String,
    /// Its network.
    pub network_id: String,
    /// Its project.
    pub project_id: String,
    /// The fixed IP addresses, in Neutron's order (IPv4 and IPv6 as they come).
    pub fixed_ips: Vec<String>,
    /// Security group ids.
    pub security_groups: Vec<String>,
    /// What uses it (a Zun container's uuid once Zun bound it; empty when free).
    pub device_id: String,
    /// `DOWN`, `ACTIVE`, `BUILD`, `ERROR`.
    pub status: String,
    /// Creation time (RFC 3339) as Neutron reports it.
    pub created_at: Option<String>,
}

/// A port to create.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortCreate {
    /// The network (id).
    pub network_id: String,
    /// Name.
    pub name: String,
    /// Description (free text).
    pub description: String,
    /// Security groups (ids); `None`: Neutron's default group of the project.
    pub security_groups: Option<Vec<String>>,
}

/// Which ports to list (all given filters must match).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortFilter {
    /// Exact name.
    pub name: Option<String>,
    /// Project.
    pub project_id: Option<String>,
    /// Network.
    pub network_id: Option<String>,
}

/// The Neutron calls of the virtual kubelet.
#[async_trait]
pub trait Ports: Send + Sync {
    /// Create a port (a POST: never repeated after an ambiguous failure; find it by name).
    async fn create_port(&self, req: &PortCreate) -> Result<Port>;
    /// Get a port.
    async fn get_port(&self, id: &str) -> Result<Port>;
    /// List ports matching the filter.
    async fn list_ports(&self, filter: &PortFilter) -> Result<Vec<Port>>;
    /// Delete a port (NotFound when it is gone already).
    async fn delete_port(&self, id: &str) -> Result<()>;
    /// Replace a port's security groups.
    async fn set_port_security_groups(&self, id: &str, groups: &[String]) -> Result<Port>;
    /// The id of the network named by `name_or_id` (an id, else a unique name visible to the
    /// caller); NotFound when none, Conflict when the name is ambiguous.
    async fn network_id(&self, name_or_id: &str) -> Result<String>;
}

#[derive(Deserialize)]
struct WireFixedIp {
    ip_address: String,
}

#[derive(Deserialize)]
struct WirePort {
    id: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    network_id: String,
    #[serde(default)]
    project_id: Option<String>,
    /// Neutron sends both; older ones only this.
    #[serde(default)]
    tenant_id: Option<String>,
    #[serde(default)]
    fixed_ips: Vec<WireFixedIp>,
    #[serde(default)]
    security_groups: Vec<String>,
    #[serde(default)]
    device_id: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    created_at: Option<String>,
}

impl From<WirePort> for Port {
    fn from(w: WirePort) -> Self {
        Self {
            id: w.id,
            name: w.name.unwrap_or_default(),
            network_id: w.network_id,
            project_id: w.project_id.or(w.tenant_id).unwrap_or_default(),
            fixed_ips: w.fixed_ips.into_iter().map(|f| f.ip_address).collect(),
            security_groups: w.security_groups,
            device_id: w.device_id.unwrap_or_default(),
            status: w.status.unwrap_or_default(),
            created_at: w.created_at,
        }
    }
}

#[derive(Deserialize)]
struct WireNetworkId {
    id: String,
}

/// Whether `s` has the shape of a UUID (`8-4-4-4-12` hex digits).
pub(crate) fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups
            .iter()
            .all(|g| g.chars().all(|c| c.is_ascii_hexdigit()))
}

/// The port's create body: only what is set.
pub(crate) fn create_body(req: &PortCreate) -> serde_json::Value {
    let mut p = json!({
        "network_id": req.network_id,
        "name": req.name,
        "description": req.description,
    });
    if let Some(sg) = &req.security_groups {
        p["security_groups"] = json!(sg);
    }
    json!({ "port": p })
}

/// The Neutron ports on the shared client core.
#[derive(Clone, Debug)]
pub struct PortAdapter {
    core: Core,
}

impl PortAdapter {
    /// Neutron on `core`.
    pub fn new(core: Core) -> Self {
        Self { core }
    }
}

#[async_trait]
impl Ports for PortAdapter {
    async fn create_port(&self, req: &PortCreate) -> Result<Port> {
        let r = Request::post(S, "create_port", "ports").json(&create_body(req))?;
        Ok(self
            .core
            .send(&r)
            .await?
            .json_at::<WirePort>("port")?
            .into())
    }

    async fn get_port(&self, id: &str) -> Result<Port> {
        let r = Request::get(S, "get_port", format!("ports/{}", seg(id)));
        Ok(self
            .core
            .send(&r)
            .await?
            .json_at::<WirePort>("port")?
            .into())
    }

    async fn list_ports(&self, filter: &PortFilter) -> Result<Vec<Port>> {
        let r = Request::get(S, "list_ports", "ports")
            .query_opt("name", filter.name.clone())
            .query_opt("project_id", filter.project_id.clone())
            .query_opt("network_id", filter.network_id.clone());
        let v: Vec<WirePort> = self.core.list_all(r, "ports").await?;
        Ok(v.into_iter().map(Into::into).collect())
    }

    async fn delete_port(&self, id: &str) -> Result<()> {
        let r = Request::delete(S, "delete_port", format!("ports/{}", seg(id)));
        self.core.send(&r).await.map(|_| ())
    }

    async fn set_port_security_groups(&self, id: &str, groups: &[String]) -> Result<Port> {
        let r = Request::put(S, "update_port", format!("ports/{}", seg(id)))
            .json(&json!({"port": {"security_groups": groups}}))?;
        Ok(self
            .core
            .send(&r)
            .await?
            .json_at::<WirePort>("port")?
            .into())
    }

    async fn network_id(&self, name_or_id: &str) -> Result<String> {
        // Neutron ids are UUIDs: anything else is a name, and asking for it by id first would
        // cost a 404.
        if is_uuid(name_or_id) {
            let by_id = Request::get(S, "get_network", format!("networks/{}", seg(name_or_id)));
            match self.core.send(&by_id).await {
                Ok(resp) => return Ok(resp.json_at::<WireNetworkId>("network")?.id),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        let by_name = Request::get(S, "list_networks", "networks").query("name", name_or_id);
        let found: Vec<WireNetworkId> = self.core.list_all(by_name, "networks").await?;
        match found.as_slice() {
            [one] => Ok(one.id.clone()),
            [] => Err(Error::NotFound {
                what: format!("Neutron network {name_or_id:?} (neither an id nor a name)"),
            }),
            many => Err(Error::Conflict {
                message: format!(
                    "{} Neutron networks are named {name_or_id:?}: name it by id",
                    many.len()
                ),
            }),
        }
    }
}

/// An in-memory [`Ports`] for unit tests: ids `port-N`, IPs `10.0.0.N`, networks by
/// `network-<name>` ids (or registered with [`FakePorts::add_network`]).
#[derive(Clone, Debug, Default)]
pub struct FakePorts {
    inner: Arc<Mutex<FakeState>>,
}

#[derive(Debug, Default)]
struct FakeState {
    next: u32,
    ports: BTreeMap<String, Port>,
    networks: BTreeMap<String, String>,
    calls: Vec<String>,
    fail_creates: u32,
}

impl FakePorts {
    /// Empty, knowing no network.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Make `name` resolve to `id`.
    pub fn add_network(&self, name: &str, id: &str) {
        let mut s = self.lock();
        s.networks.insert(name.into(), id.into());
        s.networks.insert(id.into(), id.into());
    }

    /// Put a port in place as if created earlier (e.g. by a process that crashed).
    pub fn insert(&self, port: Port) {
        self.lock().ports.insert(port.id.clone(), port);
    }

    /// All ports.
    pub fn ports(&self) -> Vec<Port> {
        self.lock().ports.values().cloned().collect()
    }

    /// The calls made, as `create_port <name>`, `delete_port <id>`, ...
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    /// Make the next `n` creates fail with a 500.
    pub fn fail_next_creates(&self, n: u32) {
        self.lock().fail_creates = n;
    }

    /// Mark a port as bound (as Zun does when it is given the port).
    pub fn bind(&self, id: &str, device: &str) {
        if let Some(p) = self.lock().ports.get_mut(id) {
            p.device_id = device.into();
        }
    }
}

#[async_trait]
impl Ports for FakePorts {
    async fn create_port(&self, req: &PortCreate) -> Result<Port> {
        let mut s = self.lock();
        s.calls.push(format!("create_port {}", req.name));
        if s.fail_creates > 0 {
            s.fail_creates -= 1;
            return Err(Error::Transient {
                message: "fake Neutron: 500".into(),
            });
        }
        s.next += 1;
        let n = s.next;
        let p = Port {
            id: format!("port-{n}"),
            name: req.name.clone(),
            network_id: req.network_id.clone(),
            project_id: "project".into(),
            fixed_ips: vec![format!("10.0.0.{n}")],
            security_groups: req.security_groups.clone().unwrap_or_default(),
            device_id: String::new(),
            status: "DOWN".into(),
            created_at: Some(format!("2026-01-01T00:00:{n:02}Z")),
        };
        s.ports.insert(p.id.clone(), p.clone());
        Ok(p)
    }

    async fn get_port(&self, id: &str) -> Result<Port> {
        self.lock()
            .ports
            .get(id)
            .cloned()
            .ok_or_else(|| Error::NotFound {
                what: format!("port {id}"),
            })
    }

    async fn list_ports(&self, filter: &PortFilter) -> Result<Vec<Port>> {
        let mut s = self.lock();
        s.calls.push("list_ports".into());
        Ok(s.ports
            .values()
            .filter(|p| filter.name.as_ref().is_none_or(|n| &p.name == n))
            .filter(|p| {
                filter
                    .project_id
                    .as_ref()
                    .is_none_or(|n| &p.project_id == n)
            })
            .filter(|p| {
                filter
                    .network_id
                    .as_ref()
                    .is_none_or(|n| &p.network_id == n)
            })
            .cloned()
            .collect())
    }

    async fn delete_port(&self, id: &str) -> Result<()> {
        let mut s = self.lock();
        s.calls.push(format!("delete_port {id}"));
        s.ports
            .remove(id)
            .map(|_| ())
            .ok_or_else(|| Error::NotFound {
                what: format!("port {id}"),
            })
    }

    async fn set_port_security_groups(&self, id: &str, groups: &[String]) -> Result<Port> {
        let mut s = self.lock();
        s.calls.push(format!("set_port_security_groups {id}"));
        let p = s.ports.get_mut(id).ok_or_else(|| Error::NotFound {
            what: format!("port {id}"),
        })?;
        p.security_groups = groups.to_vec();
        Ok(p.clone())
    }

    async fn network_id(&self, name_or_id: &str) -> Result<String> {
        let s = self.lock();
        s.networks
            .get(name_or_id)
            .cloned()
            .ok_or_else(|| Error::NotFound {
                what: format!("Neutron network {name_or_id:?}"),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_body_sends_security_groups_only_when_given() {
        let mut req = PortCreate {
            network_id: "n".into(),
            name: "vk_node_uid".into(),
            description: "d".into(),
            security_groups: None,
        };
        assert_eq!(
            create_body(&req),
            json!({"port": {"network_id": "n", "name": "vk_node_uid", "description": "d"}})
        );
        req.security_groups = Some(vec!["sg".into()]);
        assert_eq!(create_body(&req)["port"]["security_groups"], json!(["sg"]));
    }

    #[test]
    fn uuids_are_told_from_names() {
        assert!(is_uuid("a7ffd318-1a83-43ae-8fa0-06d54c21ec9e"));
        assert!(is_uuid("A7FFD318-1A83-43AE-8FA0-06D54C21EC9E"));
        assert!(!is_uuid("zun-pods"));
        assert!(!is_uuid("a7ffd318-1a83-43ae-8fa0-06d54c21ec9"));
        assert!(!is_uuid("a7ffd318-1a83-43ae-8fa0-06d54c21ec9g"));
        assert!(!is_uuid("a7ffd3181a8343ae8fa006d54c21ec9e"));
    }

    #[test]
    fn parses_a_neutron_port() {
        let w: WirePort = serde_json::from_value(json!({
            "id": "p", "name": "x", "network_id": "n", "tenant_id": "t", "project_id": "t",
            "fixed_ips": [{"subnet_id": "s", "ip_address": "10.0.0.5"}],
            "security_groups": ["sg"], "device_id": "", "status": "DOWN",
            "created_at": "2026-12-01T10:00:00Z"
        }))
        .unwrap();
        let p: Port = w.into();
        assert_eq!(p.fixed_ips, vec!["10.0.0.5"]);
        assert_eq!(p.project_id, "t");
        assert_eq!(p.device_id, "");
    }
}
