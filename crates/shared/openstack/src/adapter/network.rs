//! Network (Neutron v2.0) adapter.
//!
//! What the local Neutron 2026.1 showed (and controllers must know):
//! - `tags` are **not** accepted in a POST body ("Attribute 'tags' not
//!   allowed in POST", 400) for networks, subnets, routers and security
//!   groups, although the `tag-creation` extension is listed: that extension
//!   only adds `POST /{resources}/{id}/tags`. `create_*` therefore creates
//!   the object and then replaces its tags with `PUT /{resources}/{id}/tags`.
//!   If tagging fails, the untagged object is deleted again (so a retry of
//!   the create cannot leave an orphan that find-by-tag never sees) and the
//!   tagging error is returned; if that delete fails too the error names
//!   the leaked ID.
//! - A create whose answer is lost (a 5xx from a proxy, a dropped
//!   connection, a timeout) may still have been carried out, leaving an
//!   untagged object that find-by-tag never sees and that the controllers
//!   refuse to adopt by name. After such a failure `create_*` looks for it:
//!   an untagged object with the requested name (in the requested project or
//!   network) created no earlier than shortly before the request was sent.
//!   Exactly one: it is the one the request made, and is tagged and returned
//!   as if the answer had arrived; none (or several): the error stands. When
//!   that lookup fails too (Neutron unreachable), the create is remembered and
//!   the next list or create of the same collection looks again and tags what
//!   it made, before the caller sees the list.
//! - A gateway outside the subnet's CIDR is accepted at creation; attaching
//!   such a subnet to a router then fails with 400 `InvalidIpForSubnet`.
//!   A gateway inside an allocation pool is 409
//!   `GatewayConflictWithAllocationPools`, an overlapping CIDR 400.
//! - A vlan network on a physical network without a configured range is
//!   400; a flat network on a physnet already in use, or a used VLAN or VNI,
//!   is 409 (`FlatNetworkInUse`, `VlanIdInUse`, `TunnelIdInUse`).
//! - Adding the same subnet to a router twice is 400 ("Router already has a
//!   port on subnet ..."); removing a missing interface is 404; deleting a
//!   router with interfaces or a subnet with a router port is 409.
//! - Every security group is created with two egress rules (IPv4, IPv6, any
//!   protocol); re-creating one of them is 409 `SecurityGroupRuleExists`.
//!   Listing security groups filtered by a project that has none makes
//!   Neutron create that project's `default` group as a side effect.
//! - `PUT /{resources}/{id}/tags` on a missing object is a 500, not a
//!   404; `set_tags` tells the two apart with one GET.
//! - A security group rule created without `project_id` belongs to the
//!   caller's project, not to the group's: pass the group's project.
//! - Quota details exist for any project ID (Neutron does not check
//!   Keystone); unknown quota keys and values below -1 are 400.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use tracing::warn;

use super::{Core, Request, Service, seg};
use crate::error::{Error, Result};
use crate::model::*;
use crate::traits::Network;

const S: Service = Service::Network;

/// The Neutron port for `core`.
pub(crate) fn adapter(core: Core) -> Arc<dyn Network> {
    Arc::new(NetworkAdapter::new(core))
}

/// The Neutron port on the shared client core.
#[derive(Clone, Debug)]
pub struct NetworkAdapter {
    core: Core,
    /// Creates whose answer was lost and whose outcome could not be looked up
    /// yet (see the module docs).
    pending: Arc<Mutex<Vec<PendingCreate>>>,
}

/// A create whose answer was lost while the lookup for what it made failed.
#[derive(Clone, Debug)]
struct PendingCreate {
    /// Operation label for the tagging call.
    op: &'static str,
    collection: &'static str,
    filters: Vec<(&'static str, String)>,
    since: jiff::Timestamp,
    tags: Vec<String>,
}

impl NetworkAdapter {
    /// Neutron on `core`.
    pub fn new(core: Core) -> Self {
        Self {
            core,
            pending: Arc::default(),
        }
    }

    /// Send and decode the object under `key`.
    async fn fetch<T: DeserializeOwned>(&self, req: &Request, key: &str) -> Result<T> {
        self.core.send(req).await?.json_at(key)
    }

    /// Send and ignore the body.
    async fn exec(&self, req: &Request) -> Result<()> {
        self.core.send(req).await.map(|_| ())
    }

    /// `PUT /{collection}/{id}/tags` (replaces the whole list).
    async fn put_tags(
        &self,
        op: &'static str,
        collection: &str,
        id: &str,
        tags: &[String],
    ) -> Result<()> {
        let r = Request::put(S, op, format!("{collection}/{}/tags", seg(id)))
            .json(&json!({ "tags": tags }))?;
        self.exec(&r).await
    }

    /// Tag a just-created object; on failure delete it again (see the
    /// module docs) and return the tagging error.
    async fn tag_new(
        &self,
        op: &'static str,
        collection: &str,
        id: &str,
        tags: &[String],
    ) -> Result<()> {
        if tags.is_empty() {
            return Ok(());
        }
        let Err(err) = self.put_tags(op, collection, id, tags).await else {
            return Ok(());
        };
        let del = Request::delete(S, op, format!("{collection}/{}", seg(id)));
        match self.exec(&del).await {
            Ok(()) => Err(with_suffix(
                err,
                &format!(" (the new {collection} object {id} was deleted again)"),
            )),
            Err(del_err) => {
                warn!(collection, id, error = %del_err, "cannot delete untagged object after failed tagging");
                Err(with_suffix(
                    err,
                    &format!(
                        " (the new {collection} object {id} is left untagged: deleting it failed: {del_err})"
                    ),
                ))
            }
        }
    }
}

/// Whether a failed request may still have been carried out: its answer was
/// lost (5xx, transport failure after sending, timeout) rather than refused.
fn maybe_executed(e: &Error) -> bool {
    matches!(e, Error::Transient { .. } | Error::Timeout { .. })
}

/// How much earlier than the request an object it made may say it was created
/// (Neutron's `created_at` has whole seconds).
const CREATED_AT_SLACK: jiff::SignedDuration = jiff::SignedDuration::from_secs(2);

/// Of listed objects, the ids of those a lost create may have made: untagged,
/// created at or after `since` (less [`CREATED_AT_SLACK`]).
fn lost_create_candidates(items: &[Value], since: jiff::Timestamp) -> Vec<String> {
    let cutoff = since - CREATED_AT_SLACK;
    items
        .iter()
        .filter(|o| o["tags"].as_array().is_none_or(Vec::is_empty))
        .filter(|o| {
            o["created_at"]
                .as_str()
                .and_then(|c| c.parse::<jiff::Timestamp>().ok())
                .is_some_and(|c| c >= cutoff)
        })
        .filter_map(|o| o["id"].as_str().map(str::to_string))
        .collect()
}

/// What a create of `collection` named `name` looks for after a lost answer.
fn pending(
    op: &'static str,
    collection: &'static str,
    name: &str,
    tags: &[String],
) -> PendingCreate {
    PendingCreate {
        op,
        collection,
        filters: vec![("name", name.to_string())],
        since: jiff::Timestamp::now(),
        tags: tags.to_vec(),
    }
}

impl PendingCreate {
    fn filter(mut self, key: &'static str, value: Option<&str>) -> Self {
        if let Some(v) = value {
            self.filters.push((key, v.to_string()));
        }
        self
    }
}

impl NetworkAdapter {
    /// POST a create; when its answer is lost, find the object it made (see
    /// the module docs) and return that instead of the error. When the lookup
    /// fails too, the create is remembered and settled by the next list or
    /// create of that collection.
    async fn create_object<W: DeserializeOwned>(
        &self,
        r: &Request,
        key: &str,
        pending: PendingCreate,
    ) -> Result<W> {
        let decode = |o: Value| {
            serde_json::from_value(o).map_err(|e| {
                Error::unexpected(format!("{}: cannot decode {key:?}: {e}", r.context()))
            })
        };
        // An earlier lost create of the same object, found now, is the answer.
        let settled = self.settle_pending(pending.collection).await;
        if let Some((_, o)) = settled
            .into_iter()
            .find(|(p, _)| p.filters == pending.filters)
        {
            return decode(o);
        }
        let since = jiff::Timestamp::now();
        let err = match self.fetch::<W>(r, key).await {
            Ok(w) => return Ok(w),
            Err(e) if maybe_executed(&e) => e,
            Err(e) => return Err(e),
        };
        let pending = PendingCreate { since, ..pending };
        match self.find_lost_create(&pending).await {
            Ok(Some(o)) => {
                warn!(
                    collection = pending.collection,
                    id = o["id"].as_str().unwrap_or_default(),
                    error = %err,
                    "the answer of a create was lost; it was carried out: using the object it made"
                );
                decode(o)
            }
            Ok(None) => Err(err),
            Err(find) => {
                warn!(
                    collection = pending.collection,
                    error = %find,
                    "cannot look for the object of a create whose answer was lost; looking again later"
                );
                self.lock_pending().push(pending);
                Err(err)
            }
        }
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, Vec<PendingCreate>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The one untagged object with the create's name (and project or
    /// network) created since the create was sent; `None` when there is none
    /// or more than one.
    async fn find_lost_create(&self, p: &PendingCreate) -> Result<Option<Value>> {
        let mut list = Request::get(S, "find_lost_create", p.collection);
        for (k, v) in &p.filters {
            list = list.query(*k, v.as_str());
        }
        let items: Vec<Value> = self
            .core
            .list_all(list, &p.collection.replace('-', "_"))
            .await?;
        let ids = lost_create_candidates(&items, p.since);
        let [id] = ids.as_slice() else {
            if ids.len() > 1 {
                warn!(
                    collection = p.collection,
                    ?ids,
                    "several untagged objects may come from one lost create; using none"
                );
            }
            return Ok(None);
        };
        Ok(items
            .into_iter()
            .find(|o| o["id"].as_str() == Some(id.as_str())))
    }

    /// Looks again for what remembered creates of `collection` made and tags
    /// it, so the caller's list sees it as the create's owner would; returns
    /// the objects tagged (as they were before the tags).
    async fn settle_pending(&self, collection: &str) -> Vec<(PendingCreate, Value)> {
        let mut settled = Vec::new();
        let todo: Vec<PendingCreate> = {
            let mut all = self.lock_pending();
            if all.is_empty() {
                return settled;
            }
            let (mine, rest) = std::mem::take(&mut *all)
                .into_iter()
                .partition(|p| p.collection == collection);
            *all = rest;
            mine
        };
        for p in todo {
            let keep = match self.find_lost_create(&p).await {
                Ok(Some(o)) => {
                    let id = o["id"].as_str().unwrap_or_default().to_string();
                    match self.put_tags(p.op, p.collection, &id, &p.tags).await {
                        Ok(()) => {
                            settled.push((p.clone(), o));
                            warn!(
                                collection,
                                id, "tagged the object of an earlier create whose answer was lost"
                            );
                            false
                        }
                        Err(e) => {
                            warn!(collection, id, error = %e, "cannot tag the object of an earlier lost create yet");
                            true
                        }
                    }
                }
                // Nothing was made (or it cannot be told apart): nothing to do.
                Ok(None) => false,
                Err(_) => true,
            };
            if keep {
                self.lock_pending().push(p);
            }
        }
        settled
    }
}

/// The same error with `suffix` appended to its message.
fn with_suffix(err: Error, suffix: &str) -> Error {
    let m = |s: String| format!("{s}{suffix}");
    match err {
        Error::NotFound { what } => Error::NotFound { what: m(what) },
        Error::Conflict { message } => Error::Conflict {
            message: m(message),
        },
        Error::BadRequest { message } => Error::BadRequest {
            message: m(message),
        },
        Error::Forbidden { message } => Error::Forbidden {
            message: m(message),
        },
        Error::Unauthorized { message } => Error::Unauthorized {
            message: m(message),
        },
        Error::Transient { message } => Error::Transient {
            message: m(message),
        },
        Error::Timeout { message } => Error::Timeout {
            message: m(message),
        },
        Error::Config { message } => Error::Config {
            message: m(message),
        },
        Error::Unexpected { message } => Error::Unexpected {
            message: m(message),
        },
    }
}

/// A JSON object from the `Some` fields only (so updates send only what the
/// caller set).
fn object(fields: Vec<(&str, Option<Value>)>) -> Value {
    Value::Object(
        fields
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
            .collect::<Map<String, Value>>(),
    )
}

fn opt<T: Into<Value>>(v: Option<T>) -> Option<Value> {
    v.map(Into::into)
}

fn opt_ref<T: Clone + Into<Value>>(v: &Option<T>) -> Option<Value> {
    v.clone().map(Into::into)
}

/// Neutron sends `null` for unset strings such as a rule's description.
fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

// ---------------------------------------------------------------------------
// Wire types
// ---------------------------------------------------------------------------

#[derive(Deserialize)]
struct WireNetwork {
    id: String,
    #[serde(default, deserialize_with = "null_as_empty")]
    name: String,
    #[serde(default, deserialize_with = "null_as_empty")]
    description: String,
    #[serde(default)]
    project_id: Option<String>,
    #[serde(default)]
    tenant_id: Option<String>,
    #[serde(default, deserialize_with = "null_as_empty")]
    status: String,
    #[serde(default)]
    admin_state_up: bool,
    #[serde(default)]
    shared: bool,
    #[serde(rename = "router:external", default)]
    external: bool,
    #[serde(rename = "provider:network_type", default)]
    network_type: Option<String>,
    #[serde(rename = "provider:physical_network", default)]
    physical_network: Option<String>,
    #[serde(rename = "provider:segmentation_id", default)]
    segmentation_id: Option<i64>,
    #[serde(default)]
    mtu: Option<u32>,
    #[serde(default)]
    subnets: Vec<String>,
    #[serde(default)]
    tags: Vec<String>,
}

impl From<WireNetwork> for crate::model::Network {
    fn from(w: WireNetwork) -> Self {
        Self {
            id: w.id,
            name: w.name,
            description: w.description,
            project_id: w.project_id.or(w.tenant_id).unwrap_or_default(),
            status: w.status,
            admin_state_up: w.admin_state_up,
            shared: w.shared,
            external: w.external,
            provider_network_type: w.network_type,
            provider_physical_network: w.physical_network,
            provider_segmentation_id: w.segmentation_id,
            mtu: w.mtu,
            subnet_ids: w.subnets,
            tags: w.tags,
        }
    }
}

#[derive(Deserialize)]
struct WireSubnet {
    id: String,
    #[serde(default, deserialize_with = "null_as_empty")]
    name: String,
    #[serde(default, deserialize_with = "null_as_empty")]
    description: String,
    network_id: String,
    #[serde(default)]
    project_id: Option<String>,
    #[serde(default)]
    tenant_id: Option<String>,
    ip_version: u8,
    cidr: String,
    #[serde(default)]
    gateway_ip: Option<String>,
    #[serde(default)]
    enable_dhcp: bool,
    #[serde(default)]
    dns_nameservers: Vec<String>,
    #[serde(default)]
    allocation_pools: Vec<AllocationPool>,
    #[serde(default)]
    ipv6_ra_mode: Option<String>,
    #[serde(default)]
    ipv6_address_mode: Option<String>,
    #[serde(default)]
    tags: Vec<String>,
}

impl From<WireSubnet> for Subnet {
    fn from(w: WireSubnet) -> Self {
        Self {
            id: w.id,
            name: w.name,
            description: w.description,
            network_id: w.network_id,
            project_id: w.project_id.or(w.tenant_id).unwrap_or_default(),
            ip_version: w.ip_version,
            cidr: w.cidr,
            gateway_ip: w.gateway_ip,
            enable_dhcp: w.enable_dhcp,
            dns_nameservers: w.dns_nameservers,
            allocation_pools: w.allocation_pools,
            ipv6_ra_mode: w.ipv6_ra_mode,
            ipv6_address_mode: w.ipv6_address_mode,
            tags: w.tags,
        }
    }
}

#[derive(Deserialize)]
struct WireGateway {
    network_id: String,
    #[serde(default)]
    enable_snat: Option<bool>,
    #[serde(default)]
    external_fixed_ips: Vec<FixedIp>,
}

#[derive(Deserialize)]
struct WireRouter {
    id: String,
    #[serde(default, deserialize_with = "null_as_empty")]
    name: String,
    #[serde(default, deserialize_with = "null_as_empty")]
    description: String,
    #[serde(default)]
    project_id: Option<String>,
    #[serde(default)]
    tenant_id: Option<String>,
    #[serde(default, deserialize_with = "null_as_empty")]
    status: String,
    #[serde(default)]
    admin_state_up: bool,
    #[serde(default)]
    external_gateway_info: Option<WireGateway>,
    #[serde(default)]
    tags: Vec<String>,
}

impl From<WireRouter> for Router {
    fn from(w: WireRouter) -> Self {
        Self {
            id: w.id,
            name: w.name,
            description: w.description,
            project_id: w.project_id.or(w.tenant_id).unwrap_or_default(),
            status: w.status,
            admin_state_up: w.admin_state_up,
            external_gateway: w.external_gateway_info.map(|g| ExternalGateway {
                network_id: g.network_id,
                enable_snat: g.enable_snat,
                external_fixed_ips: g.external_fixed_ips,
            }),
            tags: w.tags,
        }
    }
}

#[derive(Deserialize)]
struct WireInterface {
    id: String,
    subnet_id: String,
    port_id: String,
}

#[derive(Deserialize)]
struct WirePort {
    id: String,
    network_id: String,
    #[serde(default, deserialize_with = "null_as_empty")]
    device_id: String,
    #[serde(default, deserialize_with = "null_as_empty")]
    device_owner: String,
    #[serde(default)]
    fixed_ips: Vec<FixedIp>,
}

/// Device owners of ports that connect a router to one of its subnets
/// (legacy, DVR and HA routers); the gateway port, the HA heartbeat port
/// and DVR's SNAT port are not interfaces in the sense of
/// `add_router_interface`.
const INTERFACE_OWNERS: &[&str] = &[
    "network:router_interface",
    "network:router_interface_distributed",
    "network:ha_router_replicated_interface",
];

#[derive(Deserialize)]
struct WireRule {
    id: String,
    security_group_id: String,
    direction: String,
    ethertype: String,
    #[serde(default)]
    protocol: Option<String>,
    #[serde(default)]
    port_range_min: Option<i32>,
    #[serde(default)]
    port_range_max: Option<i32>,
    #[serde(default)]
    remote_ip_prefix: Option<String>,
    #[serde(default)]
    remote_group_id: Option<String>,
    #[serde(default, deserialize_with = "null_as_empty")]
    description: String,
    #[serde(default)]
    project_id: Option<String>,
    #[serde(default)]
    tenant_id: Option<String>,
}

impl From<WireRule> for SecurityGroupRule {
    fn from(w: WireRule) -> Self {
        Self {
            id: w.id,
            security_group_id: w.security_group_id,
            direction: w.direction,
            ethertype: w.ethertype,
            protocol: w.protocol,
            port_range_min: w.port_range_min,
            port_range_max: w.port_range_max,
            remote_ip_prefix: w.remote_ip_prefix,
            remote_group_id: w.remote_group_id,
            description: w.description,
            project_id: w.project_id.or(w.tenant_id).unwrap_or_default(),
        }
    }
}

#[derive(Deserialize)]
struct WireSecurityGroup {
    id: String,
    #[serde(default, deserialize_with = "null_as_empty")]
    name: String,
    #[serde(default, deserialize_with = "null_as_empty")]
    description: String,
    #[serde(default)]
    project_id: Option<String>,
    #[serde(default)]
    tenant_id: Option<String>,
    #[serde(default)]
    security_group_rules: Vec<WireRule>,
    #[serde(default)]
    tags: Vec<String>,
}

impl From<WireSecurityGroup> for SecurityGroup {
    fn from(w: WireSecurityGroup) -> Self {
        Self {
            id: w.id,
            name: w.name,
            description: w.description,
            project_id: w.project_id.or(w.tenant_id).unwrap_or_default(),
            rules: w.security_group_rules.into_iter().map(Into::into).collect(),
            tags: w.tags,
        }
    }
}

// ---------------------------------------------------------------------------
// Request bodies (pure, unit-tested)
// ---------------------------------------------------------------------------

pub(crate) fn network_create_body(req: &NetworkCreate) -> Value {
    json!({ "network": object(vec![
        ("name", Some(req.name.clone().into())),
        ("description", opt_ref(&req.description)),
        ("project_id", opt_ref(&req.project_id)),
        ("shared", opt(req.shared)),
        ("router:external", opt(req.external)),
        ("provider:network_type", opt_ref(&req.provider_network_type)),
        ("provider:physical_network", opt_ref(&req.provider_physical_network)),
        ("provider:segmentation_id", opt(req.provider_segmentation_id)),
        ("admin_state_up", opt(req.admin_state_up)),
        ("mtu", opt(req.mtu)),
    ]) })
}

pub(crate) fn network_update_body(req: &NetworkUpdate) -> Value {
    json!({ "network": object(vec![
        ("name", opt_ref(&req.name)),
        ("description", opt_ref(&req.description)),
        ("shared", opt(req.shared)),
        ("router:external", opt(req.external)),
        ("admin_state_up", opt(req.admin_state_up)),
        ("mtu", opt(req.mtu)),
    ]) })
}

fn pools_value(pools: &[AllocationPool]) -> Value {
    Value::Array(
        pools
            .iter()
            .map(|p| json!({"start": p.start, "end": p.end}))
            .collect(),
    )
}

/// `None` = leave out (Neutron's default); `Some(Null)` = no gateway.
fn gateway_value(g: &GatewayIp) -> Option<Value> {
    match g {
        GatewayIp::Default => None,
        GatewayIp::Disabled => Some(Value::Null),
        GatewayIp::Address(a) => Some(Value::String(a.clone())),
    }
}

pub(crate) fn subnet_create_body(req: &SubnetCreate) -> Value {
    json!({ "subnet": object(vec![
        ("network_id", Some(req.network_id.clone().into())),
        ("name", Some(req.name.clone().into())),
        ("description", opt_ref(&req.description)),
        ("ip_version", Some(req.ip_version.into())),
        ("cidr", Some(req.cidr.clone().into())),
        ("gateway_ip", gateway_value(&req.gateway)),
        ("enable_dhcp", opt(req.enable_dhcp)),
        ("dns_nameservers", (!req.dns_nameservers.is_empty()).then(|| req.dns_nameservers.clone().into())),
        ("allocation_pools", (!req.allocation_pools.is_empty()).then(|| pools_value(&req.allocation_pools))),
        ("ipv6_ra_mode", opt_ref(&req.ipv6_ra_mode)),
        ("ipv6_address_mode", opt_ref(&req.ipv6_address_mode)),
        ("project_id", opt_ref(&req.project_id)),
    ]) })
}

pub(crate) fn subnet_update_body(req: &SubnetUpdate) -> Value {
    json!({ "subnet": object(vec![
        ("name", opt_ref(&req.name)),
        ("description", opt_ref(&req.description)),
        // `Default` means "let Neutron choose", which only exists at creation.
        ("gateway_ip", req.gateway.as_ref().and_then(gateway_value)),
        ("enable_dhcp", opt(req.enable_dhcp)),
        ("dns_nameservers", opt_ref(&req.dns_nameservers)),
        ("allocation_pools", req.allocation_pools.as_deref().map(pools_value)),
    ]) })
}

fn gateway_request_value(g: &ExternalGatewayRequest) -> Value {
    let ips: Vec<Value> = g
        .external_fixed_ips
        .iter()
        .map(|ip| {
            object(vec![
                ("subnet_id", opt_ref(&ip.subnet_id)),
                ("ip_address", opt_ref(&ip.ip_address)),
            ])
        })
        .collect();
    object(vec![
        ("network_id", Some(g.network_id.clone().into())),
        ("enable_snat", opt(g.enable_snat)),
        (
            "external_fixed_ips",
            (!ips.is_empty()).then_some(Value::Array(ips)),
        ),
    ])
}

pub(crate) fn router_create_body(req: &RouterCreate) -> Value {
    json!({ "router": object(vec![
        ("name", Some(req.name.clone().into())),
        ("description", opt_ref(&req.description)),
        ("project_id", opt_ref(&req.project_id)),
        ("external_gateway_info", req.external_gateway.as_ref().map(gateway_request_value)),
    ]) })
}

pub(crate) fn router_update_body(req: &RouterUpdate) -> Value {
    let gateway = req.external_gateway.as_ref().map(|g| match g {
        // An empty object clears the gateway (verified: `null` is not
        // needed and `{}` is what the Neutron API reference documents).
        None => json!({}),
        Some(g) => gateway_request_value(g),
    });
    json!({ "router": object(vec![
        ("name", opt_ref(&req.name)),
        ("description", opt_ref(&req.description)),
        ("external_gateway_info", gateway),
    ]) })
}

pub(crate) fn security_group_create_body(req: &SecurityGroupCreate) -> Value {
    json!({ "security_group": object(vec![
        ("name", Some(req.name.clone().into())),
        ("description", opt_ref(&req.description)),
        ("project_id", opt_ref(&req.project_id)),
    ]) })
}

pub(crate) fn rule_create_body(req: &SecurityGroupRuleCreate) -> Value {
    json!({ "security_group_rule": object(vec![
        ("security_group_id", Some(req.security_group_id.clone().into())),
        ("direction", Some(req.direction.clone().into())),
        ("ethertype", Some(req.ethertype.clone().into())),
        ("protocol", opt_ref(&req.protocol)),
        ("port_range_min", opt(req.port_range_min)),
        ("port_range_max", opt(req.port_range_max)),
        ("remote_ip_prefix", opt_ref(&req.remote_ip_prefix)),
        ("remote_group_id", opt_ref(&req.remote_group_id)),
        ("description", opt_ref(&req.description)),
        ("project_id", opt_ref(&req.project_id)),
    ]) })
}

/// The body of a bulk create: Neutron's plural key with the objects of single creates.
pub(crate) fn rules_create_body(reqs: &[SecurityGroupRuleCreate]) -> Value {
    let rules: Vec<Value> = reqs
        .iter()
        .map(|r| rule_create_body(r)["security_group_rule"].take())
        .collect();
    json!({ "security_group_rules": rules })
}

/// Parse `GET /v2.0/quotas/{id}/details` (`{"network": {"limit", "used",
/// "reserved"}, ...}`); `used` becomes `in_use`.
pub(crate) fn parse_quota_details(ctx: &str, v: &Value) -> Result<QuotaSet> {
    let obj = v
        .as_object()
        .ok_or_else(|| Error::unexpected(format!("{ctx}: quota is not an object")))?;
    let mut out = QuotaSet::new();
    for (k, entry) in obj {
        let Some(limit) = entry.get("limit").and_then(Value::as_i64) else {
            continue;
        };
        let in_use = entry.get("used").and_then(Value::as_i64).unwrap_or(0);
        out.insert(k.clone(), QuotaValue { limit, in_use });
    }
    Ok(out)
}

/// Add `tags` (all of them must match) to a list request.
fn with_tags(r: Request, tags: &[String]) -> Request {
    if tags.is_empty() {
        r
    } else {
        r.query("tags", tags.join(","))
    }
}

fn bool_str(b: bool) -> &'static str {
    if b { "true" } else { "false" }
}

// ---------------------------------------------------------------------------
// The port
// ---------------------------------------------------------------------------

#[async_trait]
impl Network for NetworkAdapter {
    async fn get_network(&self, id: &str) -> Result<crate::model::Network> {
        let r = Request::get(S, "get_network", format!("networks/{}", seg(id)));
        Ok(self.fetch::<WireNetwork>(&r, "network").await?.into())
    }

    async fn list_networks(&self, filter: &NetworkFilter) -> Result<Vec<crate::model::Network>> {
        self.settle_pending("networks").await;
        let r = Request::get(S, "list_networks", "networks")
            .query_opt("name", filter.name.clone())
            .query_opt("project_id", filter.project_id.clone())
            .query_opt("router:external", filter.external.map(bool_str))
            .query_opt("shared", filter.shared.map(bool_str));
        let r = with_tags(r, &filter.tags);
        let v: Vec<WireNetwork> = self.core.list_all(r, "networks").await?;
        Ok(v.into_iter().map(Into::into).collect())
    }

    async fn create_network(&self, req: &NetworkCreate) -> Result<crate::model::Network> {
        let r = Request::post(S, "create_network", "networks").json(&network_create_body(req))?;
        let pending = pending("create_network", "networks", &req.name, &req.tags)
            .filter("project_id", req.project_id.as_deref());
        let mut net: crate::model::Network = self
            .create_object::<WireNetwork>(&r, "network", pending)
            .await?
            .into();
        self.tag_new("create_network", "networks", &net.id, &req.tags)
            .await?;
        net.tags = req.tags.clone();
        Ok(net)
    }

    async fn update_network(&self, id: &str, req: &NetworkUpdate) -> Result<crate::model::Network> {
        let r = Request::put(S, "update_network", format!("networks/{}", seg(id)))
            .json(&network_update_body(req))?;
        Ok(self.fetch::<WireNetwork>(&r, "network").await?.into())
    }

    async fn delete_network(&self, id: &str) -> Result<()> {
        self.exec(&Request::delete(
            S,
            "delete_network",
            format!("networks/{}", seg(id)),
        ))
        .await
    }

    async fn get_subnet(&self, id: &str) -> Result<Subnet> {
        let r = Request::get(S, "get_subnet", format!("subnets/{}", seg(id)));
        Ok(self.fetch::<WireSubnet>(&r, "subnet").await?.into())
    }

    async fn list_subnets(&self, filter: &SubnetFilter) -> Result<Vec<Subnet>> {
        self.settle_pending("subnets").await;
        let r = Request::get(S, "list_subnets", "subnets")
            .query_opt("network_id", filter.network_id.clone())
            .query_opt("name", filter.name.clone())
            .query_opt("project_id", filter.project_id.clone());
        let r = with_tags(r, &filter.tags);
        let v: Vec<WireSubnet> = self.core.list_all(r, "subnets").await?;
        Ok(v.into_iter().map(Into::into).collect())
    }

    async fn create_subnet(&self, req: &SubnetCreate) -> Result<Subnet> {
        let r = Request::post(S, "create_subnet", "subnets").json(&subnet_create_body(req))?;
        let pending = pending("create_subnet", "subnets", &req.name, &req.tags)
            .filter("network_id", Some(req.network_id.as_str()));
        let mut subnet: Subnet = self
            .create_object::<WireSubnet>(&r, "subnet", pending)
            .await?
            .into();
        self.tag_new("create_subnet", "subnets", &subnet.id, &req.tags)
            .await?;
        subnet.tags = req.tags.clone();
        Ok(subnet)
    }

    async fn update_subnet(&self, id: &str, req: &SubnetUpdate) -> Result<Subnet> {
        let r = Request::put(S, "update_subnet", format!("subnets/{}", seg(id)))
            .json(&subnet_update_body(req))?;
        Ok(self.fetch::<WireSubnet>(&r, "subnet").await?.into())
    }

    async fn delete_subnet(&self, id: &str) -> Result<()> {
        self.exec(&Request::delete(
            S,
            "delete_subnet",
            format!("subnets/{}", seg(id)),
        ))
        .await
    }

    async fn get_router(&self, id: &str) -> Result<Router> {
        let r = Request::get(S, "get_router", format!("routers/{}", seg(id)));
        Ok(self.fetch::<WireRouter>(&r, "router").await?.into())
    }

    async fn list_routers(&self, filter: &RouterFilter) -> Result<Vec<Router>> {
        self.settle_pending("routers").await;
        let r = Request::get(S, "list_routers", "routers")
            .query_opt("name", filter.name.clone())
            .query_opt("project_id", filter.project_id.clone());
        let r = with_tags(r, &filter.tags);
        let v: Vec<WireRouter> = self.core.list_all(r, "routers").await?;
        Ok(v.into_iter().map(Into::into).collect())
    }

    async fn create_router(&self, req: &RouterCreate) -> Result<Router> {
        let r = Request::post(S, "create_router", "routers").json(&router_create_body(req))?;
        let pending = pending("create_router", "routers", &req.name, &req.tags)
            .filter("project_id", req.project_id.as_deref());
        let mut router: Router = self
            .create_object::<WireRouter>(&r, "router", pending)
            .await?
            .into();
        self.tag_new("create_router", "routers", &router.id, &req.tags)
            .await?;
        router.tags = req.tags.clone();
        Ok(router)
    }

    async fn update_router(&self, id: &str, req: &RouterUpdate) -> Result<Router> {
        let r = Request::put(S, "update_router", format!("routers/{}", seg(id)))
            .json(&router_update_body(req))?;
        Ok(self.fetch::<WireRouter>(&r, "router").await?.into())
    }

    async fn delete_router(&self, id: &str) -> Result<()> {
        self.exec(&Request::delete(
            S,
            "delete_router",
            format!("routers/{}", seg(id)),
        ))
        .await
    }

    async fn add_router_interface(
        &self,
        router_id: &str,
        subnet_id: &str,
    ) -> Result<RouterInterface> {
        // Not retried after an ambiguous failure: a second attempt after a
        // lost success answers 400 "already has a port", which would hide
        // that the first one worked. The controller re-reads the interfaces.
        let r = Request::put(
            S,
            "add_router_interface",
            format!("routers/{}/add_router_interface", seg(router_id)),
        )
        .non_idempotent()
        .json(&json!({ "subnet_id": subnet_id }))?;
        let w: WireInterface = self.core.send(&r).await?.json()?;
        Ok(RouterInterface {
            router_id: w.id,
            subnet_id: w.subnet_id,
            port_id: w.port_id,
        })
    }

    async fn remove_router_interface(&self, router_id: &str, subnet_id: &str) -> Result<()> {
        let r = Request::put(
            S,
            "remove_router_interface",
            format!("routers/{}/remove_router_interface", seg(router_id)),
        )
        .json(&json!({ "subnet_id": subnet_id }))?;
        self.exec(&r).await
    }

    async fn list_router_interfaces(&self, router_id: &str) -> Result<Vec<RouterPort>> {
        // One list call filtered by device; the gateway port is dropped
        // client-side (Neutron has no "not equal" filter).
        let r = Request::get(S, "list_router_interfaces", "ports").query("device_id", router_id);
        let ports: Vec<WirePort> = self.core.list_all(r, "ports").await?;
        Ok(ports
            .into_iter()
            .filter(|p| INTERFACE_OWNERS.contains(&p.device_owner.as_str()))
            .map(|p| RouterPort {
                port_id: p.id,
                network_id: p.network_id,
                fixed_ips: p.fixed_ips,
                device_owner: p.device_owner,
            })
            .collect())
    }

    async fn list_routers_interfaces(
        &self,
        routers: &[String],
    ) -> Result<BTreeMap<String, Vec<RouterPort>>> {
        if routers.is_empty() {
            return Ok(BTreeMap::new());
        }
        // One list of every interface port the caller may see (a repeated filter is an OR
        // in Neutron), kept to the routers asked about: a URL naming each router would grow
        // with their number.
        let mut r = Request::get(S, "list_routers_interfaces", "ports");
        for owner in INTERFACE_OWNERS {
            r = r.query("device_owner", *owner);
        }
        let ports: Vec<WirePort> = self.core.list_all(r, "ports").await?;
        let wanted: std::collections::BTreeSet<&str> = routers.iter().map(String::as_str).collect();
        let mut out: BTreeMap<String, Vec<RouterPort>> = BTreeMap::new();
        for p in ports {
            if !wanted.contains(p.device_id.as_str())
                || !INTERFACE_OWNERS.contains(&p.device_owner.as_str())
            {
                continue;
            }
            out.entry(p.device_id).or_default().push(RouterPort {
                port_id: p.id,
                network_id: p.network_id,
                fixed_ips: p.fixed_ips,
                device_owner: p.device_owner,
            });
        }
        Ok(out)
    }

    async fn get_security_group(&self, id: &str) -> Result<SecurityGroup> {
        let r = Request::get(
            S,
            "get_security_group",
            format!("security-groups/{}", seg(id)),
        );
        Ok(self
            .fetch::<WireSecurityGroup>(&r, "security_group")
            .await?
            .into())
    }

    async fn list_security_groups(
        &self,
        filter: &SecurityGroupFilter,
    ) -> Result<Vec<SecurityGroup>> {
        self.settle_pending("security-groups").await;
        let r = Request::get(S, "list_security_groups", "security-groups")
            .query_opt("name", filter.name.clone())
            .query_opt("project_id", filter.project_id.clone());
        let r = with_tags(r, &filter.tags);
        let v: Vec<WireSecurityGroup> = self.core.list_all(r, "security_groups").await?;
        Ok(v.into_iter().map(Into::into).collect())
    }

    async fn create_security_group(&self, req: &SecurityGroupCreate) -> Result<SecurityGroup> {
        let r = Request::post(S, "create_security_group", "security-groups")
            .json(&security_group_create_body(req))?;
        let pending = pending(
            "create_security_group",
            "security-groups",
            &req.name,
            &req.tags,
        )
        .filter("project_id", req.project_id.as_deref());
        let mut sg: SecurityGroup = self
            .create_object::<WireSecurityGroup>(&r, "security_group", pending)
            .await?
            .into();
        self.tag_new(
            "create_security_group",
            "security-groups",
            &sg.id,
            &req.tags,
        )
        .await?;
        sg.tags = req.tags.clone();
        Ok(sg)
    }

    async fn update_security_group(
        &self,
        id: &str,
        req: &SecurityGroupUpdate,
    ) -> Result<SecurityGroup> {
        let body = json!({ "security_group": object(vec![
            ("name", opt_ref(&req.name)),
            ("description", opt_ref(&req.description)),
        ]) });
        let r = Request::put(
            S,
            "update_security_group",
            format!("security-groups/{}", seg(id)),
        )
        .json(&body)?;
        Ok(self
            .fetch::<WireSecurityGroup>(&r, "security_group")
            .await?
            .into())
    }

    async fn delete_security_group(&self, id: &str) -> Result<()> {
        self.exec(&Request::delete(
            S,
            "delete_security_group",
            format!("security-groups/{}", seg(id)),
        ))
        .await
    }

    async fn list_security_group_rules(
        &self,
        security_group_id: &str,
    ) -> Result<Vec<SecurityGroupRule>> {
        let r = Request::get(S, "list_security_group_rules", "security-group-rules")
            .query("security_group_id", security_group_id);
        let v: Vec<WireRule> = self.core.list_all(r, "security_group_rules").await?;
        Ok(v.into_iter().map(Into::into).collect())
    }

    async fn create_security_group_rule(
        &self,
        req: &SecurityGroupRuleCreate,
    ) -> Result<SecurityGroupRule> {
        let r = Request::post(S, "create_security_group_rule", "security-group-rules")
            .json(&rule_create_body(req))?;
        Ok(self
            .fetch::<WireRule>(&r, "security_group_rule")
            .await?
            .into())
    }

    async fn create_security_group_rules(
        &self,
        reqs: &[SecurityGroupRuleCreate],
    ) -> Result<Vec<SecurityGroupRule>> {
        if reqs.is_empty() {
            return Ok(Vec::new());
        }
        let r = Request::post(S, "create_security_group_rules", "security-group-rules")
            .json(&rules_create_body(reqs))?;
        let v: Vec<WireRule> = self.fetch(&r, "security_group_rules").await?;
        Ok(v.into_iter().map(Into::into).collect())
    }

    async fn delete_security_group_rule(&self, id: &str) -> Result<()> {
        self.exec(&Request::delete(
            S,
            "delete_security_group_rule",
            format!("security-group-rules/{}", seg(id)),
        ))
        .await
    }

    async fn set_tags(&self, kind: TaggedResource, id: &str, tags: &[String]) -> Result<()> {
        let collection = kind.collection();
        match self.put_tags("set_tags", collection, id, tags).await {
            // Neutron 2026.1 answers 500 (a KeyError in its tagging
            // extension) instead of 404 when the object does not exist; one
            // GET tells the two apart so callers see NotFound.
            Err(e) if e.is_transient() => {
                let get = Request::get(S, "set_tags", format!("{collection}/{}", seg(id)));
                match self.exec(&get).await {
                    Err(nf) if nf.is_not_found() => Err(nf),
                    _ => Err(e),
                }
            }
            other => other,
        }
    }

    async fn get_network_quota(&self, project_id: &str) -> Result<QuotaSet> {
        let r = Request::get(
            S,
            "get_network_quota",
            format!("quotas/{}/details", seg(project_id)),
        );
        let v: Value = self.fetch(&r, "quota").await?;
        parse_quota_details(&r.context(), &v)
    }

    async fn get_network_quota_defaults(&self, project_id: &str) -> Result<QuotaUpdate> {
        let r = Request::get(
            S,
            "get_network_quota_defaults",
            format!("quotas/{}/default", seg(project_id)),
        );
        let v: Value = self.fetch(&r, "quota").await?;
        super::compute::parse_quota_defaults(&r.context(), &v)
    }

    async fn list_network_quota_limits(
        &self,
        projects: &[String],
    ) -> Result<BTreeMap<String, QuotaUpdate>> {
        if projects.is_empty() {
            return Ok(BTreeMap::new());
        }
        // Neutron lists only the projects with limits of their own, each with every key.
        let r = Request::get(S, "list_network_quotas", "quotas");
        let v: Vec<Value> = self.fetch(&r, "quotas").await?;
        let mut own: BTreeMap<String, QuotaUpdate> = BTreeMap::new();
        for q in v {
            let Some(obj) = q.as_object() else { continue };
            let id = obj
                .get("project_id")
                .or_else(|| obj.get("tenant_id"))
                .and_then(Value::as_str)
                .map(str::to_string);
            if let Some(id) = id {
                let limits = obj
                    .iter()
                    .filter_map(|(k, v)| v.as_i64().map(|v| (k.clone(), v)))
                    .collect();
                own.insert(id, limits);
            }
        }
        let mut out = BTreeMap::new();
        let mut defaults: Option<QuotaUpdate> = None;
        for p in projects {
            let limits = match own.remove(p) {
                Some(l) => l,
                None => match &defaults {
                    Some(d) => d.clone(),
                    None => {
                        let d = self.get_network_quota_defaults(p).await?;
                        defaults = Some(d.clone());
                        d
                    }
                },
            };
            out.insert(p.clone(), limits);
        }
        Ok(out)
    }

    async fn update_network_quota(&self, project_id: &str, limits: &QuotaUpdate) -> Result<()> {
        if limits.is_empty() {
            return Ok(());
        }
        let limits: &BTreeMap<String, i64> = limits;
        let r = Request::put(
            S,
            "update_network_quota",
            format!("quotas/{}", seg(project_id)),
        )
        .json(&json!({ "quota": limits }))?;
        self.exec(&r).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_create_candidates_are_untagged_and_new() {
        let since: jiff::Timestamp = "2026-11-30T10:00:05.700Z".parse().unwrap();
        let items = vec![
            json!({"id": "new", "tags": [], "created_at": "2026-11-30T10:00:05Z"}),
            json!({"id": "tagged", "tags": ["x"], "created_at": "2026-11-30T10:00:06Z"}),
            json!({"id": "old", "tags": [], "created_at": "2026-11-30T09:59:00Z"}),
            json!({"id": "no-date", "tags": []}),
            json!({"id": "slack", "created_at": "2026-11-30T10:00:04Z"}),
        ];
        assert_eq!(lost_create_candidates(&items, since), ["new", "slack"]);
        assert!(maybe_executed(&Error::Transient {
            message: String::new()
        }));
        assert!(maybe_executed(&Error::Timeout {
            message: String::new()
        }));
        assert!(!maybe_executed(&Error::BadRequest {
            message: String::new()
        }));
    }

    #[test]
    fn network_bodies_send_only_what_is_set() {
        let req = NetworkCreate {
            name: "n".into(),
            external: Some(true),
            provider_network_type: Some("vlan".into()),
            provider_physical_network: Some("physnet1".into()),
            provider_segmentation_id: Some(120),
            tags: vec!["t".into()],
            ..Default::default()
        };
        assert_eq!(
            network_create_body(&req),
            json!({"network": {
                "name": "n", "router:external": true,
                "provider:network_type": "vlan", "provider:physical_network": "physnet1",
                "provider:segmentation_id": 120,
            }})
        );
        let upd = NetworkUpdate {
            description: Some("d".into()),
            shared: Some(false),
            ..Default::default()
        };
        assert_eq!(
            network_update_body(&upd),
            json!({"network": {"description": "d", "shared": false}})
        );
    }

    #[test]
    fn subnet_gateway_forms() {
        let mut req = SubnetCreate {
            network_id: "net".into(),
            name: "s".into(),
            ip_version: 4,
            cidr: "10.0.0.0/24".into(),
            ..Default::default()
        };
        let body = subnet_create_body(&req);
        assert!(body["subnet"].get("gateway_ip").is_none());
        assert!(body["subnet"].get("allocation_pools").is_none());
        req.gateway = GatewayIp::Disabled;
        assert_eq!(
            subnet_create_body(&req)["subnet"]["gateway_ip"],
            Value::Null
        );
        assert!(
            subnet_create_body(&req)["subnet"]
                .as_object()
                .is_some_and(|o| o.contains_key("gateway_ip"))
        );
        req.gateway = GatewayIp::Address("10.0.0.254".into());
        req.allocation_pools = vec![AllocationPool {
            start: "10.0.0.10".into(),
            end: "10.0.0.20".into(),
        }];
        req.dns_nameservers = vec!["192.0.2.53".into()];
        req.enable_dhcp = Some(false);
        assert_eq!(
            subnet_create_body(&req),
            json!({"subnet": {
                "network_id": "net", "name": "s", "ip_version": 4, "cidr": "10.0.0.0/24",
                "gateway_ip": "10.0.0.254", "enable_dhcp": false,
                "dns_nameservers": ["192.0.2.53"],
                "allocation_pools": [{"start": "10.0.0.10", "end": "10.0.0.20"}],
            }})
        );
        let upd = SubnetUpdate {
            gateway: Some(GatewayIp::Default),
            dns_nameservers: Some(vec![]),
            ..Default::default()
        };
        assert_eq!(
            subnet_update_body(&upd),
            json!({"subnet": {"dns_nameservers": []}})
        );
        let upd = SubnetUpdate {
            gateway: Some(GatewayIp::Disabled),
            ..Default::default()
        };
        assert_eq!(
            subnet_update_body(&upd),
            json!({"subnet": {"gateway_ip": null}})
        );
    }

    #[test]
    fn router_gateway_bodies() {
        let gw = ExternalGatewayRequest {
            network_id: "ext".into(),
            enable_snat: Some(false),
            external_fixed_ips: vec![FixedIp {
                subnet_id: Some("sub".into()),
                ip_address: None,
            }],
        };
        let req = RouterCreate {
            name: "r".into(),
            project_id: Some("p".into()),
            external_gateway: Some(gw.clone()),
            ..Default::default()
        };
        assert_eq!(
            router_create_body(&req),
            json!({"router": {"name": "r", "project_id": "p", "external_gateway_info": {
                "network_id": "ext", "enable_snat": false,
                "external_fixed_ips": [{"subnet_id": "sub"}],
            }}})
        );
        let clear = RouterUpdate {
            external_gateway: Some(None),
            ..Default::default()
        };
        assert_eq!(
            router_update_body(&clear),
            json!({"router": {"external_gateway_info": {}}})
        );
        assert_eq!(
            router_update_body(&RouterUpdate::default()),
            json!({"router": {}})
        );
    }

    #[test]
    fn rule_body_and_parsing() {
        let req = SecurityGroupRuleCreate {
            security_group_id: "sg".into(),
            direction: "ingress".into(),
            ethertype: "IPv4".into(),
            protocol: Some("tcp".into()),
            port_range_min: Some(22),
            port_range_max: Some(22),
            remote_ip_prefix: Some("10.0.0.0/8".into()),
            ..Default::default()
        };
        assert_eq!(
            rule_create_body(&req),
            json!({"security_group_rule": {
                "security_group_id": "sg", "direction": "ingress", "ethertype": "IPv4",
                "protocol": "tcp", "port_range_min": 22, "port_range_max": 22,
                "remote_ip_prefix": "10.0.0.0/8",
            }})
        );
        // A default egress rule as Neutron 2026.1 returns it.
        let w: WireRule = serde_json::from_value(json!({
            "id": "r1", "project_id": "p", "security_group_id": "sg", "ethertype": "IPv6",
            "direction": "egress", "protocol": null, "port_range_min": null,
            "port_range_max": null, "remote_ip_prefix": null, "remote_group_id": null,
            "description": null, "tenant_id": "p"
        }))
        .unwrap();
        let rule = SecurityGroupRule::from(w);
        assert_eq!(rule.description, "");
        assert_eq!(rule.protocol, None);
        assert_eq!(rule.project_id, "p");
    }

    #[test]
    fn parses_network_and_router() {
        let w: WireNetwork = serde_json::from_value(json!({
            "id": "n1", "name": "external", "tenant_id": "p", "admin_state_up": true,
            "mtu": 1500, "status": "ACTIVE", "subnets": ["s1"], "shared": false,
            "router:external": true, "description": "", "tags": ["x"],
            "provider:network_type": "flat", "provider:physical_network": "external",
            "provider:segmentation_id": null
        }))
        .unwrap();
        let n = crate::model::Network::from(w);
        assert_eq!(n.project_id, "p");
        assert!(n.external);
        assert_eq!(n.provider_segmentation_id, None);
        assert_eq!(n.subnet_ids, vec!["s1"]);
        let w: WireRouter = serde_json::from_value(json!({
            "id": "r", "name": "r", "project_id": "p", "admin_state_up": true,
            "status": "ACTIVE", "external_gateway_info": {"network_id": "ext",
            "external_fixed_ips": [{"subnet_id": "s", "ip_address": "203.0.113.49"}],
            "enable_snat": false}, "description": "", "tags": []
        }))
        .unwrap();
        let r = Router::from(w);
        let gw = r.external_gateway.unwrap();
        assert_eq!(gw.enable_snat, Some(false));
        assert_eq!(
            gw.external_fixed_ips[0].ip_address.as_deref(),
            Some("203.0.113.49")
        );
        let w: WireRouter = serde_json::from_value(
            json!({"id": "r", "name": "r", "project_id": "p", "external_gateway_info": null}),
        )
        .unwrap();
        assert!(Router::from(w).external_gateway.is_none());
    }

    #[test]
    fn quota_details_use_used_as_in_use() {
        let v = json!({
            "network": {"limit": 100, "used": 5, "reserved": 0},
            "subnetpool": {"limit": -1, "used": 0, "reserved": 0},
        });
        let q = parse_quota_details("t", &v).unwrap();
        assert_eq!(
            q["network"],
            QuotaValue {
                limit: 100,
                in_use: 5
            }
        );
        assert_eq!(q["subnetpool"].limit, -1);
        assert!(parse_quota_details("t", &json!([])).is_err());
    }

    #[test]
    fn suffix_keeps_the_variant() {
        let e = with_suffix(Error::transient("a"), " b");
        assert!(e.is_transient());
        assert_eq!(e.message(), "a b");
    }
}
