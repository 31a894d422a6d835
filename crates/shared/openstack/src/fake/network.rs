//! Fake Neutron.

use std::collections::BTreeMap;
use std::net::IpAddr;

use async_trait::async_trait;

use super::{FakeCloud, State, check_tags, dedup_tags, has_all_tags, new_id};
use crate::error::{Error, Result};
use crate::model::*;
use crate::traits::Network;

type NetworkObj = crate::model::Network;

/// Neutron's default quota limits.
fn default_quota() -> BTreeMap<String, i64> {
    [
        ("network", 100),
        ("subnet", 100),
        ("port", 500),
        ("router", 10),
        ("floatingip", 50),
        ("security_group", 10),
        ("security_group_rule", 100),
        ("rbac_policy", 10),
        ("subnetpool", -1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// A parsed CIDR: first address as u128, prefix, version.
struct Cidr {
    base: u128,
    prefix: u32,
    v6: bool,
}

impl Cidr {
    fn parse(ctx: &str, s: &str) -> Result<Self> {
        let bad = || {
            Error::bad_request(format!(
                "{ctx}: Invalid input for cidr. Reason: '{s}' is not a valid IP subnet."
            ))
        };
        let (addr, prefix) = s.split_once('/').ok_or_else(bad)?;
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        let prefix: u32 = prefix.parse().map_err(|_| bad())?;
        let (raw, bits, v6) = match addr {
            IpAddr::V4(a) => (u128::from(u32::from(a)), 32, false),
            IpAddr::V6(a) => (u128::from(a), 128, true),
        };
        if prefix > bits {
            return Err(bad());
        }
        let host_bits = bits - prefix;
        let mask = if host_bits >= 128 {
            0
        } else {
            !((1u128 << host_bits) - 1)
        };
        Ok(Self {
            base: raw & mask,
            prefix,
            v6,
        })
    }

    fn bits(&self) -> u32 {
        if self.v6 { 128 } else { 32 }
    }

    fn last(&self) -> u128 {
        let host_bits = self.bits() - self.prefix;
        if host_bits >= 128 {
            u128::MAX
        } else {
            self.base | ((1u128 << host_bits) - 1)
        }
    }

    fn addr(&self, n: u128) -> String {
        if self.v6 {
            std::net::Ipv6Addr::from(n).to_string()
        } else {
            std::net::Ipv4Addr::from(u32::try_from(n).unwrap_or(u32::MAX)).to_string()
        }
    }

    fn overlaps(&self, other: &Cidr) -> bool {
        self.v6 == other.v6 && self.base <= other.last() && other.base <= self.last()
    }

    fn contains(&self, ip: &str) -> bool {
        match ip.parse::<IpAddr>() {
            Ok(IpAddr::V4(a)) if !self.v6 => {
                let n = u128::from(u32::from(a));
                n >= self.base && n <= self.last()
            }
            Ok(IpAddr::V6(a)) if self.v6 => {
                let n = u128::from(a);
                n >= self.base && n <= self.last()
            }
            _ => false,
        }
    }
}

fn network<'a>(st: &'a State, id: &str) -> Result<&'a NetworkObj> {
    st.networks
        .get(id)
        .ok_or_else(|| Error::not_found(format!("neutron: Network {id} could not be found.")))
}

fn subnet<'a>(st: &'a State, id: &str) -> Result<&'a Subnet> {
    st.subnets
        .get(id)
        .ok_or_else(|| Error::not_found(format!("neutron: Subnet {id} could not be found.")))
}

fn router<'a>(st: &'a State, id: &str) -> Result<&'a Router> {
    st.routers
        .get(id)
        .ok_or_else(|| Error::not_found(format!("neutron: Router {id} could not be found.")))
}

fn sg<'a>(st: &'a State, id: &str) -> Result<&'a SecurityGroup> {
    st.security_groups
        .get(id)
        .ok_or_else(|| Error::not_found(format!("neutron: Security group {id} does not exist")))
}

/// The project an admin request acts in when none is given.
const ADMIN_PROJECT: &str = "admin-project";

fn rule(
    sg_id: &str,
    project: &str,
    direction: &str,
    ethertype: &str,
    remote_group: Option<&str>,
) -> SecurityGroupRule {
    SecurityGroupRule {
        id: new_id(),
        security_group_id: sg_id.into(),
        direction: direction.into(),
        ethertype: ethertype.into(),
        protocol: None,
        port_range_min: None,
        port_range_max: None,
        remote_ip_prefix: None,
        remote_group_id: remote_group.map(str::to_string),
        description: String::new(),
        project_id: project.into(),
    }
}

fn insert_sg(
    st: &mut State,
    name: &str,
    description: &str,
    project: &str,
    tags: Vec<String>,
) -> SecurityGroup {
    let id = new_id();
    let mut rules = vec![
        rule(&id, project, "egress", "IPv4", None),
        rule(&id, project, "egress", "IPv6", None),
    ];
    if name == "default" {
        rules.push(rule(&id, project, "ingress", "IPv4", Some(&id)));
        rules.push(rule(&id, project, "ingress", "IPv6", Some(&id)));
    }
    for r in &rules {
        st.rules.insert(r.id.clone(), r.clone());
    }
    let g = SecurityGroup {
        id: id.clone(),
        name: name.into(),
        description: description.into(),
        project_id: project.into(),
        rules: vec![],
        tags,
    };
    st.security_groups.insert(id, g.clone());
    with_rules(st, g)
}

/// Neutron creates a project's `default` security group the first time the
/// project shows up in a networking call.
fn ensure_default_sg(st: &mut State, project: &str) {
    if st.neutron_projects.insert(project.to_string()) {
        insert_sg(st, "default", "Default security group", project, vec![]);
    }
}

fn with_rules(st: &State, mut g: SecurityGroup) -> SecurityGroup {
    g.rules = st
        .rules
        .values()
        .filter(|r| r.security_group_id == g.id)
        .cloned()
        .collect();
    g
}

fn with_subnets(st: &State, mut n: NetworkObj) -> NetworkObj {
    n.subnet_ids = st
        .subnets
        .values()
        .filter(|s| s.network_id == n.id)
        .map(|s| s.id.clone())
        .collect();
    n
}

fn ports_on_subnet(st: &State, subnet_id: &str) -> usize {
    st.router_ports
        .values()
        .filter(|(_, p)| {
            p.fixed_ips
                .iter()
                .any(|f| f.subnet_id.as_deref() == Some(subnet_id))
        })
        .count()
}

fn gateway_from(
    st: &State,
    ctx: &str,
    router_id: &str,
    req: &ExternalGatewayRequest,
) -> Result<ExternalGateway> {
    let net = network(st, &req.network_id).map_err(|_| {
        Error::not_found(format!(
            "{ctx}: Network {} could not be found.",
            req.network_id
        ))
    })?;
    if !net.external {
        return Err(Error::bad_request(format!(
            "{ctx}: Bad router request: Network {} is not a valid external network.",
            req.network_id
        )));
    }
    let subnets: Vec<&Subnet> = st
        .subnets
        .values()
        .filter(|s| s.network_id == net.id)
        .collect();
    let fixed = if req.external_fixed_ips.is_empty() {
        subnets
            .first()
            .map(|s| {
                let c = Cidr::parse(ctx, &s.cidr).ok();
                // A stable pseudo-address derived from the router id.
                let offset =
                    u128::from(router_id.bytes().fold(0u8, |a, b| a.wrapping_add(b)) % 100) + 10;
                vec![FixedIp {
                    subnet_id: Some(s.id.clone()),
                    ip_address: c.map(|c| c.addr(c.base + offset)),
                }]
            })
            .unwrap_or_default()
    } else {
        req.external_fixed_ips.clone()
    };
    Ok(ExternalGateway {
        network_id: req.network_id.clone(),
        enable_snat: Some(req.enable_snat.unwrap_or(true)),
        external_fixed_ips: fixed,
    })
}

/// Neutron's single rule create against the fake's state.
fn create_rule(st: &mut State, req: &SecurityGroupRuleCreate) -> Result<SecurityGroupRule> {
    let ctx = "neutron create_security_group_rule";
    let group = sg(st, &req.security_group_id)?.clone();
    if req.direction != "ingress" && req.direction != "egress" {
        return Err(Error::bad_request(format!(
            "{ctx}: Invalid input for direction. Reason: '{}' is not in ['ingress', 'egress'].",
            req.direction
        )));
    }
    if req.ethertype != "IPv4" && req.ethertype != "IPv6" {
        return Err(Error::bad_request(format!(
            "{ctx}: Invalid input for ethertype. Reason: '{}' is not in ['IPv4', 'IPv6'].",
            req.ethertype
        )));
    }
    if req.remote_ip_prefix.is_some() && req.remote_group_id.is_some() {
        return Err(Error::bad_request(format!(
            "{ctx}: Only remote_ip_prefix or remote_group_id may be provided."
        )));
    }
    if (req.port_range_min.is_some() || req.port_range_max.is_some()) && req.protocol.is_none() {
        return Err(Error::bad_request(format!(
            "{ctx}: Must also specify protocol if port range is given."
        )));
    }
    if let (Some(lo), Some(hi)) = (req.port_range_min, req.port_range_max)
        && lo > hi
        && req.protocol.as_deref() != Some("icmp")
    {
        return Err(Error::bad_request(format!(
            "{ctx}: For TCP/UDP protocols, port_range_min must be <= port_range_max"
        )));
    }
    if let Some(rg) = &req.remote_group_id {
        sg(st, rg)?;
    }
    if let Some(dup) = st.rules.values().find(|r| {
        r.security_group_id == req.security_group_id
            && r.direction == req.direction
            && r.ethertype == req.ethertype
            && r.protocol == req.protocol
            && r.port_range_min == req.port_range_min
            && r.port_range_max == req.port_range_max
            && r.remote_ip_prefix == req.remote_ip_prefix
            && r.remote_group_id == req.remote_group_id
    }) {
        return Err(Error::conflict(format!(
            "{ctx}: Security group rule already exists. Rule id is {}.",
            dup.id
        )));
    }
    let r = SecurityGroupRule {
        id: new_id(),
        security_group_id: req.security_group_id.clone(),
        direction: req.direction.clone(),
        ethertype: req.ethertype.clone(),
        protocol: req.protocol.clone(),
        port_range_min: req.port_range_min,
        port_range_max: req.port_range_max,
        remote_ip_prefix: req.remote_ip_prefix.clone(),
        remote_group_id: req.remote_group_id.clone(),
        description: req.description.clone().unwrap_or_default(),
        project_id: req.project_id.clone().unwrap_or(group.project_id),
    };
    st.rules.insert(r.id.clone(), r.clone());
    Ok(r)
}

#[async_trait]
impl Network for FakeCloud {
    async fn get_network(&self, id: &str) -> Result<NetworkObj> {
        self.run("network.get_network", |st| {
            let n = network(st, id)?.clone();
            Ok(with_subnets(st, n))
        })
        .await
    }

    async fn list_networks(&self, f: &NetworkFilter) -> Result<Vec<NetworkObj>> {
        self.run("network.list_networks", |st| {
            if let Some(p) = &f.project_id {
                ensure_default_sg(st, p);
            }
            let nets: Vec<NetworkObj> = st
                .networks
                .values()
                .filter(|n| f.name.as_ref().is_none_or(|v| &n.name == v))
                .filter(|n| f.project_id.as_ref().is_none_or(|v| &n.project_id == v))
                .filter(|n| f.external.is_none_or(|v| n.external == v))
                .filter(|n| f.shared.is_none_or(|v| n.shared == v))
                .filter(|n| has_all_tags(&n.tags, &f.tags))
                .cloned()
                .collect();
            Ok(nets.into_iter().map(|n| with_subnets(st, n)).collect())
        })
        .await
    }

    async fn create_network(&self, req: &NetworkCreate) -> Result<NetworkObj> {
        self.run("network.create_network", |st| {
            let ctx = "neutron create_network";
            check_tags(ctx, &req.tags)?;
            let ty = req.provider_network_type.clone();
            match ty.as_deref() {
                Some("flat") => {
                    let Some(phys) = &req.provider_physical_network else {
                        return Err(Error::bad_request(format!("{ctx}: Invalid input for operation: physical_network required for flat provider network.")));
                    };
                    if req.provider_segmentation_id.is_some() {
                        return Err(Error::bad_request(format!("{ctx}: Invalid input for operation: segmentation_id specified for flat provider network.")));
                    }
                    if st.networks.values().any(|n| {
                        n.provider_network_type.as_deref() == Some("flat")
                            && n.provider_physical_network.as_deref() == Some(phys)
                    }) {
                        return Err(Error::conflict(format!("{ctx}: Unable to create the flat network. Physical network {phys} is in use.")));
                    }
                }
                Some("vlan") => {
                    if req.provider_physical_network.is_none() {
                        return Err(Error::bad_request(format!("{ctx}: Invalid input for operation: physical_network required for VLAN provider network.")));
                    }
                    if let Some(seg) = req.provider_segmentation_id
                        && !(1..=4094).contains(&seg)
                    {
                        return Err(Error::bad_request(format!("{ctx}: Invalid input for operation: segmentation_id out of range (1 through 4094).")));
                    }
                }
                Some("geneve" | "vxlan" | "gre" | "local") | None => {}
                Some(other) => {
                    return Err(Error::bad_request(format!("{ctx}: Invalid input for operation: network_type value '{other}' not supported.")));
                }
            }
            let project = req.project_id.clone().unwrap_or_else(|| ADMIN_PROJECT.into());
            ensure_default_sg(st, &project);
            let n = NetworkObj {
                id: new_id(),
                name: req.name.clone(),
                description: req.description.clone().unwrap_or_default(),
                project_id: project,
                status: "ACTIVE".into(),
                admin_state_up: req.admin_state_up.unwrap_or(true),
                shared: req.shared.unwrap_or(false),
                external: req.external.unwrap_or(false),
                provider_network_type: Some(ty.unwrap_or_else(|| "geneve".into())),
                provider_physical_network: req.provider_physical_network.clone(),
                provider_segmentation_id: req.provider_segmentation_id,
                mtu: Some(req.mtu.unwrap_or(1500)),
                subnet_ids: vec![],
                tags: dedup_tags(&req.tags),
            };
            st.networks.insert(n.id.clone(), n.clone());
            Ok(n)
        }).await
    }

    async fn update_network(&self, id: &str, req: &NetworkUpdate) -> Result<NetworkObj> {
        self.run("network.update_network", |st| {
            network(st, id)?;
            if req.external == Some(false)
                && st.routers.values().any(|r| {
                    r.external_gateway.as_ref().is_some_and(|g| g.network_id == id)
                })
            {
                return Err(Error::conflict(format!("neutron update_network: Unable to complete operation on network {id}. There are one or more ports still in use on the network.")));
            }
            let n = st.networks.get_mut(id).ok_or_else(|| Error::not_found(id.to_string()))?;
            if let Some(v) = &req.name {
                n.name = v.clone();
            }
            if let Some(v) = &req.description {
                n.description = v.clone();
            }
            if let Some(v) = req.shared {
                n.shared = v;
            }
            if let Some(v) = req.external {
                n.external = v;
            }
            if let Some(v) = req.admin_state_up {
                n.admin_state_up = v;
            }
            if let Some(v) = req.mtu {
                n.mtu = Some(v);
            }
            let n = n.clone();
            Ok(with_subnets(st, n))
        }).await
    }

    async fn delete_network(&self, id: &str) -> Result<()> {
        self.run("network.delete_network", |st| {
            network(st, id)?;
            let in_use = st.router_ports.values().any(|(_, p)| p.network_id == id)
                || st.routers.values().any(|r| {
                    r.external_gateway.as_ref().is_some_and(|g| g.network_id == id)
                });
            if in_use {
                return Err(Error::conflict(format!("neutron delete_network: Unable to complete operation on network {id}. There are one or more ports still in use on the network.")));
            }
            // Neutron deletes subnets without allocated ports with the network.
            st.subnets.retain(|_, s| s.network_id != id);
            st.networks.remove(id);
            Ok(())
        }).await
    }

    async fn get_subnet(&self, id: &str) -> Result<Subnet> {
        self.run("network.get_subnet", |st| subnet(st, id).cloned())
            .await
    }

    async fn list_subnets(&self, f: &SubnetFilter) -> Result<Vec<Subnet>> {
        self.run("network.list_subnets", |st| {
            Ok(st
                .subnets
                .values()
                .filter(|s| f.network_id.as_ref().is_none_or(|v| &s.network_id == v))
                .filter(|s| f.name.as_ref().is_none_or(|v| &s.name == v))
                .filter(|s| f.project_id.as_ref().is_none_or(|v| &s.project_id == v))
                .filter(|s| has_all_tags(&s.tags, &f.tags))
                .cloned()
                .collect())
        })
        .await
    }

    async fn create_subnet(&self, req: &SubnetCreate) -> Result<Subnet> {
        self.run("network.create_subnet", |st| {
            let ctx = "neutron create_subnet";
            check_tags(ctx, &req.tags)?;
            let net = network(st, &req.network_id)?.clone();
            let cidr = Cidr::parse(ctx, &req.cidr)?;
            let want_v6 = req.ip_version == 6;
            if req.ip_version != 4 && req.ip_version != 6 {
                return Err(Error::bad_request(format!("{ctx}: Invalid input for ip_version. Reason: '{}' is not in [4, 6].", req.ip_version)));
            }
            if cidr.v6 != want_v6 {
                return Err(Error::bad_request(format!("{ctx}: Invalid input for operation: Cidr {} does not match the ip_version {}.", req.cidr, req.ip_version)));
            }
            for other in st.subnets.values().filter(|s| s.network_id == net.id) {
                if let Ok(o) = Cidr::parse(ctx, &other.cidr)
                    && o.overlaps(&cidr)
                {
                    return Err(Error::bad_request(format!("{ctx}: Invalid input for operation: Requested subnet with cidr: {} for network: {} overlaps with another subnet.", req.cidr, net.id)));
                }
            }
            let gateway_ip = match &req.gateway {
                GatewayIp::Default => Some(cidr.addr(cidr.base + 1)),
                GatewayIp::Disabled => None,
                GatewayIp::Address(a) => {
                    if !cidr.contains(a) {
                        return Err(Error::bad_request(format!("{ctx}: Invalid input for operation: Gateway IP {a} conflicts with allocation pool or is outside the subnet {}.", req.cidr)));
                    }
                    Some(a.clone())
                }
            };
            for d in &req.dns_nameservers {
                if d.parse::<IpAddr>().is_err() {
                    return Err(Error::bad_request(format!("{ctx}: Invalid input for dns_nameservers. Reason: '{d}' is not a valid nameserver.")));
                }
            }
            let pools = if req.allocation_pools.is_empty() {
                let first = cidr.base + if gateway_ip.is_some() { 2 } else { 1 };
                let last = if cidr.v6 { cidr.last() } else { cidr.last().saturating_sub(1) };
                vec![AllocationPool { start: cidr.addr(first), end: cidr.addr(last) }]
            } else {
                for p in &req.allocation_pools {
                    if !cidr.contains(&p.start) || !cidr.contains(&p.end) {
                        return Err(Error::bad_request(format!("{ctx}: The allocation pool {}-{} spans beyond the subnet cidr {}.", p.start, p.end, req.cidr)));
                    }
                }
                req.allocation_pools.clone()
            };
            let project = req.project_id.clone().unwrap_or_else(|| net.project_id.clone());
            let s = Subnet {
                id: new_id(),
                name: req.name.clone(),
                description: req.description.clone().unwrap_or_default(),
                network_id: net.id.clone(),
                project_id: project,
                ip_version: req.ip_version,
                cidr: cidr.addr(cidr.base) + "/" + &cidr.prefix.to_string(),
                gateway_ip,
                enable_dhcp: req.enable_dhcp.unwrap_or(true),
                dns_nameservers: req.dns_nameservers.clone(),
                allocation_pools: pools,
                ipv6_ra_mode: req.ipv6_ra_mode.clone(),
                ipv6_address_mode: req.ipv6_address_mode.clone(),
                tags: dedup_tags(&req.tags),
            };
            st.subnets.insert(s.id.clone(), s.clone());
            Ok(s)
        }).await
    }

    async fn update_subnet(&self, id: &str, req: &SubnetUpdate) -> Result<Subnet> {
        self.run("network.update_subnet", |st| {
            let ctx = "neutron update_subnet";
            let cur = subnet(st, id)?.clone();
            let cidr = Cidr::parse(ctx, &cur.cidr)?;
            let s = st.subnets.get_mut(id).ok_or_else(|| Error::not_found(id.to_string()))?;
            if let Some(v) = &req.name {
                s.name = v.clone();
            }
            if let Some(v) = &req.description {
                s.description = v.clone();
            }
            match &req.gateway {
                Some(GatewayIp::Disabled) => s.gateway_ip = None,
                Some(GatewayIp::Address(a)) => {
                    if !cidr.contains(a) {
                        return Err(Error::bad_request(format!("{ctx}: Invalid input for operation: Gateway IP {a} is outside the subnet {}.", cur.cidr)));
                    }
                    s.gateway_ip = Some(a.clone());
                }
                Some(GatewayIp::Default) | None => {}
            }
            if let Some(v) = req.enable_dhcp {
                s.enable_dhcp = v;
            }
            if let Some(v) = &req.dns_nameservers {
                s.dns_nameservers = v.clone();
            }
            if let Some(v) = &req.allocation_pools {
                s.allocation_pools = v.clone();
            }
            Ok(s.clone())
        }).await
    }

    async fn delete_subnet(&self, id: &str) -> Result<()> {
        self.run("network.delete_subnet", |st| {
            subnet(st, id)?;
            if ports_on_subnet(st, id) > 0 {
                return Err(Error::conflict(format!("neutron delete_subnet: Unable to complete operation on subnet {id}: One or more ports have an IP allocation from this subnet.")));
            }
            st.subnets.remove(id);
            Ok(())
        }).await
    }

    async fn get_router(&self, id: &str) -> Result<Router> {
        self.run("network.get_router", |st| router(st, id).cloned())
            .await
    }

    async fn list_routers(&self, f: &RouterFilter) -> Result<Vec<Router>> {
        self.run("network.list_routers", |st| {
            Ok(st
                .routers
                .values()
                .filter(|r| f.name.as_ref().is_none_or(|v| &r.name == v))
                .filter(|r| f.project_id.as_ref().is_none_or(|v| &r.project_id == v))
                .filter(|r| has_all_tags(&r.tags, &f.tags))
                .cloned()
                .collect())
        })
        .await
    }

    async fn create_router(&self, req: &RouterCreate) -> Result<Router> {
        self.run("network.create_router", |st| {
            let ctx = "neutron create_router";
            check_tags(ctx, &req.tags)?;
            let id = new_id();
            let gw = match &req.external_gateway {
                Some(g) => Some(gateway_from(st, ctx, &id, g)?),
                None => None,
            };
            let project = req
                .project_id
                .clone()
                .unwrap_or_else(|| ADMIN_PROJECT.into());
            ensure_default_sg(st, &project);
            let r = Router {
                id: id.clone(),
                name: req.name.clone(),
                description: req.description.clone().unwrap_or_default(),
                project_id: project,
                status: "ACTIVE".into(),
                admin_state_up: true,
                external_gateway: gw,
                tags: dedup_tags(&req.tags),
            };
            st.routers.insert(id, r.clone());
            Ok(r)
        })
        .await
    }

    async fn update_router(&self, id: &str, req: &RouterUpdate) -> Result<Router> {
        self.run("network.update_router", |st| {
            let ctx = "neutron update_router";
            router(st, id)?;
            let gw = match &req.external_gateway {
                Some(Some(g)) => Some(Some(gateway_from(st, ctx, id, g)?)),
                Some(None) => Some(None),
                None => None,
            };
            let r = st
                .routers
                .get_mut(id)
                .ok_or_else(|| Error::not_found(id.to_string()))?;
            if let Some(v) = &req.name {
                r.name = v.clone();
            }
            if let Some(v) = &req.description {
                r.description = v.clone();
            }
            if let Some(g) = gw {
                r.external_gateway = g;
            }
            Ok(r.clone())
        })
        .await
    }

    async fn delete_router(&self, id: &str) -> Result<()> {
        self.run("network.delete_router", |st| {
            router(st, id)?;
            if st.router_ports.values().any(|(r, _)| r == id) {
                return Err(Error::conflict(format!(
                    "neutron delete_router: Router {id} still has ports"
                )));
            }
            st.routers.remove(id);
            Ok(())
        })
        .await
    }

    async fn add_router_interface(
        &self,
        router_id: &str,
        subnet_id: &str,
    ) -> Result<RouterInterface> {
        self.run("network.add_router_interface", |st| {
            let ctx = "neutron add_router_interface";
            router(st, router_id)?;
            let s = subnet(st, subnet_id)?.clone();
            let Some(gw) = s.gateway_ip.clone() else {
                return Err(Error::bad_request(format!("{ctx}: Bad router request: Subnet {subnet_id} does not have a gateway IP.")));
            };
            for (r, p) in st.router_ports.values() {
                if p.fixed_ips.iter().any(|f| f.subnet_id.as_deref() == Some(subnet_id)) {
                    if r == router_id {
                        return Err(Error::bad_request(format!("{ctx}: Bad router request: Router already has a port on subnet {subnet_id}.")));
                    }
                    return Err(Error::conflict(format!("{ctx}: IP address {gw} already allocated in subnet {subnet_id}")));
                }
            }
            let port = RouterPort {
                port_id: new_id(),
                network_id: s.network_id.clone(),
                fixed_ips: vec![FixedIp { subnet_id: Some(subnet_id.into()), ip_address: Some(gw) }],
                device_owner: "network:router_interface".into(),
            };
            st.router_ports.insert(port.port_id.clone(), (router_id.into(), port.clone()));
            Ok(RouterInterface {
                router_id: router_id.into(),
                subnet_id: subnet_id.into(),
                port_id: port.port_id,
            })
        }).await
    }

    async fn remove_router_interface(&self, router_id: &str, subnet_id: &str) -> Result<()> {
        self.run("network.remove_router_interface", |st| {
            router(st, router_id)?;
            let port = st
                .router_ports
                .iter()
                .find(|(_, (r, p))| {
                    r == router_id && p.fixed_ips.iter().any(|f| f.subnet_id.as_deref() == Some(subnet_id))
                })
                .map(|(id, _)| id.clone());
            match port {
                Some(p) => {
                    st.router_ports.remove(&p);
                    Ok(())
                }
                None => Err(Error::not_found(format!("neutron remove_router_interface: Router {router_id} has no interface on subnet {subnet_id}"))),
            }
        }).await
    }

    async fn list_router_interfaces(&self, router_id: &str) -> Result<Vec<RouterPort>> {
        self.run("network.list_router_interfaces", |st| {
            Ok(st
                .router_ports
                .values()
                .filter(|(r, _)| r == router_id)
                .map(|(_, p)| p.clone())
                .collect())
        })
        .await
    }

    async fn list_routers_interfaces(
        &self,
        routers: &[String],
    ) -> Result<BTreeMap<String, Vec<RouterPort>>> {
        self.run("network.list_routers_interfaces", |st| {
            let mut out: BTreeMap<String, Vec<RouterPort>> = BTreeMap::new();
            for (r, p) in st.router_ports.values() {
                if routers.contains(r) {
                    out.entry(r.clone()).or_default().push(p.clone());
                }
            }
            Ok(out)
        })
        .await
    }

    async fn get_security_group(&self, id: &str) -> Result<SecurityGroup> {
        self.run("network.get_security_group", |st| {
            let g = sg(st, id)?.clone();
            Ok(with_rules(st, g))
        })
        .await
    }

    async fn list_security_groups(&self, f: &SecurityGroupFilter) -> Result<Vec<SecurityGroup>> {
        self.run("network.list_security_groups", |st| {
            if let Some(p) = &f.project_id {
                ensure_default_sg(st, p);
            }
            let groups: Vec<SecurityGroup> = st
                .security_groups
                .values()
                .filter(|g| f.name.as_ref().is_none_or(|v| &g.name == v))
                .filter(|g| f.project_id.as_ref().is_none_or(|v| &g.project_id == v))
                .filter(|g| has_all_tags(&g.tags, &f.tags))
                .cloned()
                .collect();
            Ok(groups.into_iter().map(|g| with_rules(st, g)).collect())
        })
        .await
    }

    async fn create_security_group(&self, req: &SecurityGroupCreate) -> Result<SecurityGroup> {
        self.run("network.create_security_group", |st| {
            check_tags("neutron create_security_group", &req.tags)?;
            let project = req
                .project_id
                .clone()
                .unwrap_or_else(|| ADMIN_PROJECT.into());
            ensure_default_sg(st, &project);
            if req.name == "default" {
                return Err(Error::conflict(
                    "neutron create_security_group: Default security group already exists.",
                ));
            }
            Ok(insert_sg(
                st,
                &req.name,
                req.description.as_deref().unwrap_or_default(),
                &project,
                dedup_tags(&req.tags),
            ))
        })
        .await
    }

    async fn update_security_group(
        &self,
        id: &str,
        req: &SecurityGroupUpdate,
    ) -> Result<SecurityGroup> {
        self.run("network.update_security_group", |st| {
            sg(st, id)?;
            let g = st
                .security_groups
                .get_mut(id)
                .ok_or_else(|| Error::not_found(id.to_string()))?;
            if let Some(v) = &req.name {
                g.name = v.clone();
            }
            if let Some(v) = &req.description {
                g.description = v.clone();
            }
            let g = g.clone();
            Ok(with_rules(st, g))
        })
        .await
    }

    async fn delete_security_group(&self, id: &str) -> Result<()> {
        self.run("network.delete_security_group", |st| {
            sg(st, id)?;
            if st
                .rules
                .values()
                .any(|r| r.remote_group_id.as_deref() == Some(id) && r.security_group_id != id)
            {
                return Err(Error::conflict(format!(
                    "neutron delete_security_group: Security Group {id} in use."
                )));
            }
            st.security_groups.remove(id);
            st.rules.retain(|_, r| r.security_group_id != id);
            Ok(())
        })
        .await
    }

    async fn list_security_group_rules(
        &self,
        security_group_id: &str,
    ) -> Result<Vec<SecurityGroupRule>> {
        self.run("network.list_security_group_rules", |st| {
            Ok(st
                .rules
                .values()
                .filter(|r| r.security_group_id == security_group_id)
                .cloned()
                .collect())
        })
        .await
    }

    async fn create_security_group_rule(
        &self,
        req: &SecurityGroupRuleCreate,
    ) -> Result<SecurityGroupRule> {
        self.run("network.create_security_group_rule", |st| {
            create_rule(st, req)
        })
        .await
    }

    async fn create_security_group_rules(
        &self,
        reqs: &[SecurityGroupRuleCreate],
    ) -> Result<Vec<SecurityGroupRule>> {
        self.run("network.create_security_group_rules", |st| {
            if reqs
                .iter()
                .any(|r| r.security_group_id != reqs[0].security_group_id)
            {
                return Err(Error::bad_request(
                    "neutron create_security_group_rules: Only allowed to update rules for one security profile at a time",
                ));
            }
            // Neutron's bulk create is one transaction: a failing rule creates none.
            let saved = st.rules.clone();
            let mut out = Vec::with_capacity(reqs.len());
            for req in reqs {
                match create_rule(st, req) {
                    Ok(r) => out.push(r),
                    Err(e) => {
                        st.rules = saved;
                        return Err(e);
                    }
                }
            }
            Ok(out)
        }).await
    }

    async fn delete_security_group_rule(&self, id: &str) -> Result<()> {
        self.run("network.delete_security_group_rule", |st| {
            st.rules.remove(id).map(|_| ()).ok_or_else(|| {
                Error::not_found(format!("neutron: Security group rule {id} does not exist"))
            })
        })
        .await
    }

    async fn set_tags(&self, kind: TaggedResource, id: &str, tags: &[String]) -> Result<()> {
        self.run("network.set_tags", |st| {
            check_tags("neutron set_tags", tags)?;
            let tags = dedup_tags(tags);
            let slot = match kind {
                TaggedResource::Network => st.networks.get_mut(id).map(|n| &mut n.tags),
                TaggedResource::Subnet => st.subnets.get_mut(id).map(|n| &mut n.tags),
                TaggedResource::Router => st.routers.get_mut(id).map(|n| &mut n.tags),
                TaggedResource::SecurityGroup => {
                    st.security_groups.get_mut(id).map(|n| &mut n.tags)
                }
            };
            match slot {
                Some(t) => {
                    *t = tags;
                    Ok(())
                }
                None => Err(Error::not_found(format!(
                    "neutron: {} {id} could not be found.",
                    kind.collection()
                ))),
            }
        })
        .await
    }

    async fn list_network_quota_limits(
        &self,
        projects: &[String],
    ) -> Result<BTreeMap<String, QuotaUpdate>> {
        self.run("network.list_network_quotas", |st| {
            Ok(projects
                .iter()
                .map(|p| {
                    let limits = st
                        .network_quotas
                        .get(p)
                        .cloned()
                        .unwrap_or_else(default_quota);
                    (p.clone(), limits)
                })
                .collect())
        })
        .await
    }

    async fn get_network_quota(&self, project_id: &str) -> Result<QuotaSet> {
        self.run("network.get_network_quota", |st| {
            let limits = st
                .network_quotas
                .get(project_id)
                .cloned()
                .unwrap_or_else(default_quota);
            let used = |k: &str| -> i64 {
                let n = match k {
                    "network" => st
                        .networks
                        .values()
                        .filter(|n| n.project_id == project_id)
                        .count(),
                    "subnet" => st
                        .subnets
                        .values()
                        .filter(|n| n.project_id == project_id)
                        .count(),
                    "router" => st
                        .routers
                        .values()
                        .filter(|n| n.project_id == project_id)
                        .count(),
                    "security_group" => st
                        .security_groups
                        .values()
                        .filter(|n| n.project_id == project_id)
                        .count(),
                    "security_group_rule" => st
                        .rules
                        .values()
                        .filter(|n| n.project_id == project_id)
                        .count(),
                    "port" => st
                        .router_ports
                        .values()
                        .filter(|(r, _)| {
                            st.routers
                                .get(r)
                                .is_some_and(|r| r.project_id == project_id)
                        })
                        .count(),
                    _ => 0,
                };
                i64::try_from(n).unwrap_or(i64::MAX)
            };
            Ok(limits
                .into_iter()
                .map(|(k, limit)| {
                    let in_use = used(&k);
                    (k, QuotaValue { limit, in_use })
                })
                .collect())
        })
        .await
    }

    async fn get_network_quota_defaults(&self, _project_id: &str) -> Result<QuotaUpdate> {
        self.run(
            "network.get_network_quota_defaults",
            |_| Ok(default_quota()),
        )
        .await
    }

    async fn update_network_quota(&self, project_id: &str, limits: &QuotaUpdate) -> Result<()> {
        self.run("network.update_network_quota", |st| {
            let q = st.network_quotas.entry(project_id.into()).or_insert_with(default_quota);
            for (k, v) in limits {
                if !q.contains_key(k) {
                    return Err(Error::bad_request(format!("neutron update_network_quota: Unrecognized attribute(s) '{k}'")));
                }
                if *v < -1 {
                    return Err(Error::bad_request(format!("neutron update_network_quota: Invalid input for {k}. Reason: '{v}' should be greater than or equal to -1.")));
                }
            }
            for (k, v) in limits {
                q.insert(k.clone(), *v);
            }
            Ok(())
        }).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn default_sg_and_egress_rules() {
        let fake = FakeCloud::new();
        let groups = fake
            .list_security_groups(&SecurityGroupFilter {
                project_id: Some("p1".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].name, "default");
        assert_eq!(groups[0].rules.len(), 4);
        let g = fake
            .create_security_group(&SecurityGroupCreate {
                name: "web".into(),
                project_id: Some("p1".into()),
                tags: vec!["managed-by-openstack-operator".into()],
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(g.rules.len(), 2);
        assert!(g.rules.iter().all(|r| r.direction == "egress"));
        let rule = SecurityGroupRuleCreate {
            security_group_id: g.id.clone(),
            direction: "ingress".into(),
            ethertype: "IPv4".into(),
            protocol: Some("tcp".into()),
            port_range_min: Some(22),
            port_range_max: Some(22),
            remote_ip_prefix: Some("0.0.0.0/0".into()),
            ..Default::default()
        };
        fake.create_security_group_rule(&rule).await.unwrap();
        assert!(
            fake.create_security_group_rule(&rule)
                .await
                .unwrap_err()
                .is_conflict()
        );
        let q = fake.get_network_quota("p1").await.unwrap();
        assert_eq!(q["security_group"].in_use, 2);

        // Bulk create is all or none: a duplicate in the batch creates nothing.
        let other = SecurityGroupRuleCreate {
            port_range_min: Some(443),
            port_range_max: Some(443),
            ..rule.clone()
        };
        let before = fake.list_security_group_rules(&g.id).await.unwrap().len();
        let e = fake
            .create_security_group_rules(&[other.clone(), rule.clone()])
            .await
            .unwrap_err();
        assert!(e.is_conflict(), "{e}");
        assert_eq!(
            fake.list_security_group_rules(&g.id).await.unwrap().len(),
            before
        );
        let made = fake.create_security_group_rules(&[other]).await.unwrap();
        assert_eq!(made.len(), 1);
        assert_eq!(
            fake.list_security_group_rules(&g.id).await.unwrap().len(),
            before + 1
        );
    }

    #[tokio::test]
    async fn router_interfaces_block_deletes() {
        let fake = FakeCloud::new();
        let ext = fake
            .create_network(&NetworkCreate {
                name: "public".into(),
                external: Some(true),
                provider_network_type: Some("flat".into()),
                provider_physical_network: Some("physnet1".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        let dup = fake
            .create_network(&NetworkCreate {
                name: "public2".into(),
                provider_network_type: Some("flat".into()),
                provider_physical_network: Some("physnet1".into()),
                ..Default::default()
            })
            .await;
        assert!(dup.unwrap_err().is_conflict());
        fake.create_subnet(&SubnetCreate {
            network_id: ext.id.clone(),
            name: "public-subnet".into(),
            ip_version: 4,
            cidr: "172.24.4.0/24".into(),
            ..Default::default()
        })
        .await
        .unwrap();
        let net = fake
            .create_network(&NetworkCreate {
                name: "n".into(),
                project_id: Some("p".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        let sn = fake
            .create_subnet(&SubnetCreate {
                network_id: net.id.clone(),
                name: "n-subnet".into(),
                ip_version: 4,
                cidr: "10.0.0.0/24".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(sn.gateway_ip.as_deref(), Some("10.0.0.1"));
        assert_eq!(
            sn.allocation_pools[0],
            AllocationPool {
                start: "10.0.0.2".into(),
                end: "10.0.0.254".into()
            }
        );
        let overlap = fake
            .create_subnet(&SubnetCreate {
                network_id: net.id.clone(),
                name: "x".into(),
                ip_version: 4,
                cidr: "10.0.0.128/25".into(),
                ..Default::default()
            })
            .await;
        assert!(matches!(overlap.unwrap_err(), Error::BadRequest { .. }));
        let r = fake
            .create_router(&RouterCreate {
                name: "n-router".into(),
                project_id: Some("p".into()),
                external_gateway: Some(ExternalGatewayRequest {
                    network_id: ext.id.clone(),
                    enable_snat: Some(false),
                    external_fixed_ips: vec![],
                }),
                ..Default::default()
            })
            .await
            .unwrap();
        let gw = r.external_gateway.clone().unwrap();
        assert_eq!(gw.enable_snat, Some(false));
        assert_eq!(gw.external_fixed_ips.len(), 1);
        fake.add_router_interface(&r.id, &sn.id).await.unwrap();
        assert!(matches!(
            fake.add_router_interface(&r.id, &sn.id).await.unwrap_err(),
            Error::BadRequest { .. }
        ));
        assert!(fake.delete_subnet(&sn.id).await.unwrap_err().is_conflict());
        assert!(
            fake.delete_network(&net.id)
                .await
                .unwrap_err()
                .is_conflict()
        );
        assert!(fake.delete_router(&r.id).await.unwrap_err().is_conflict());
        assert_eq!(fake.list_router_interfaces(&r.id).await.unwrap().len(), 1);
        fake.remove_router_interface(&r.id, &sn.id).await.unwrap();
        assert!(
            fake.remove_router_interface(&r.id, &sn.id)
                .await
                .unwrap_err()
                .is_not_found()
        );
        fake.delete_router(&r.id).await.unwrap();
        fake.delete_network(&net.id).await.unwrap();
        assert!(fake.get_subnet(&sn.id).await.unwrap_err().is_not_found());
    }

    #[tokio::test]
    async fn ipv6_and_no_gateway() {
        let fake = FakeCloud::new();
        let net = fake
            .create_network(&NetworkCreate {
                name: "v6".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        let s = fake
            .create_subnet(&SubnetCreate {
                network_id: net.id.clone(),
                name: "v6".into(),
                ip_version: 6,
                cidr: "fd00::/64".into(),
                gateway: GatewayIp::Disabled,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(s.gateway_ip, None);
        assert_eq!(s.allocation_pools[0].start, "fd00::1");
        let bad = fake
            .create_subnet(&SubnetCreate {
                network_id: net.id.clone(),
                name: "bad".into(),
                ip_version: 4,
                cidr: "fd01::/64".into(),
                ..Default::default()
            })
            .await;
        assert!(matches!(bad.unwrap_err(), Error::BadRequest { .. }));
    }
}
