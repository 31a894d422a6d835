//! Pure spec validation. It repeats what the schema and CEL rules check (so a cluster that
//! does not enforce CEL, or an object stored before a rule existed, still gets a clear error
//! before anything touches OpenStack) and adds what CEL cannot express: duplicate names,
//! overlapping ranges, references between list entries, hash lengths.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};

use ipnet::{IpNet, Ipv4Net};

use crate::domain::OpenstackDomainSpec;
use crate::flavor::OpenstackFlavorSpec;
use crate::image::{HashAlgorithm, OpenstackImageSpec};
use crate::network::{OpenstackNetworkSpec, ProviderNetworkType, ProviderSubnet};
use crate::project::{OpenstackProjectSpec, Protocol, SecurityGroupRule};

/// One problem in a spec: the field path (`spec.subnets[0].cidr`) and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// JSON path of the offending field, starting at `spec`.
    pub path: String,
    /// What is wrong and what would be accepted.
    pub message: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Joins errors into one line for a condition message or an Event.
pub fn summarize(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Pure validation of a spec.
pub trait Validate {
    /// Every problem found; empty when the spec is valid.
    fn validate(&self) -> Vec<FieldError>;
}

#[derive(Default)]
struct Errors(Vec<FieldError>);

impl Errors {
    fn add(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError {
            path: path.into(),
            message: message.into(),
        });
    }

    fn name(&mut self, path: &str, value: &str, max: usize) {
        if value.trim().is_empty() {
            self.add(path, "must not be empty");
        } else if value.chars().count() > max {
            self.add(path, format!("must be at most {max} characters"));
        } else if value.chars().any(char::is_control) {
            self.add(path, "must not contain control characters");
        }
    }

    fn min(&mut self, path: &str, value: i64, min: i64) {
        if value < min {
            self.add(path, format!("must be at least {min}, got {value}"));
        }
    }

    fn unique<'a>(&mut self, list_path: &str, names: impl Iterator<Item = &'a str>) {
        let mut seen = BTreeMap::new();
        for (i, name) in names.enumerate() {
            if let Some(first) = seen.insert(name, i) {
                self.add(
                    format!("{list_path}[{i}].name"),
                    format!("duplicate name {name:?} (also used by {list_path}[{first}])"),
                );
            }
        }
    }
}

/// Parses an IPv4 CIDR the way the seed's pattern and Neutron together accept it.
pub fn parse_ipv4_cidr(s: &str) -> Option<Ipv4Net> {
    let (addr, len) = s.split_once('/')?;
    let addr: Ipv4Addr = addr.parse().ok()?;
    let len: u8 = len.parse().ok()?;
    Ipv4Net::new(addr, len).ok()
}

fn ipv4_in(path: &str, value: &str, net: Option<Ipv4Net>, errs: &mut Errors) -> Option<Ipv4Addr> {
    match value.parse::<Ipv4Addr>() {
        Ok(ip) => {
            if let Some(net) = net
                && !net.contains(&ip)
            {
                errs.add(path, format!("{value} is not inside {}", net.trunc()));
            }
            Some(ip)
        }
        Err(_) => {
            errs.add(path, format!("{value:?} is not an IPv4 address"));
            None
        }
    }
}

fn cidr(path: &str, value: &str, errs: &mut Errors) -> Option<Ipv4Net> {
    let net = parse_ipv4_cidr(value);
    if net.is_none() {
        errs.add(
            path,
            format!("{value:?} is not a valid IPv4 CIDR such as 10.0.0.0/24"),
        );
    }
    net
}

fn dns_servers(path: &str, servers: Option<&Vec<String>>, errs: &mut Errors) {
    for (i, s) in servers.into_iter().flatten().enumerate() {
        if s.parse::<IpAddr>().is_err() {
            errs.add(
                format!("{path}[{i}]"),
                format!("{s:?} is not an IP address"),
            );
        }
    }
}

impl Validate for OpenstackDomainSpec {
    fn validate(&self) -> Vec<FieldError> {
        let mut e = Errors::default();
        e.name("spec.name", &self.name, 64);
        e.0
    }
}

impl Validate for OpenstackFlavorSpec {
    fn validate(&self) -> Vec<FieldError> {
        let mut e = Errors::default();
        e.name("spec.name", &self.name, 255);
        e.min("spec.vcpus", self.vcpus, 1);
        e.min("spec.ram", self.ram, 1);
        e.min("spec.disk", self.disk, 0);
        e.min("spec.ephemeral", self.ephemeral, 0);
        e.min("spec.swap", self.swap, 0);
        for key in self.extra_specs.iter().flat_map(|m| m.keys()) {
            if key.trim().is_empty() || key.len() > 255 {
                e.add(
                    "spec.extraSpecs",
                    format!("key {key:?} must be 1 to 255 characters"),
                );
            }
        }
        e.0
    }
}

impl Validate for OpenstackImageSpec {
    fn validate(&self) -> Vec<FieldError> {
        let mut e = Errors::default();
        e.name("spec.name", &self.name, 255);
        for (i, tag) in self.tags.iter().flatten().enumerate() {
            if tag.is_empty() || tag.len() > 255 {
                e.add(format!("spec.tags[{i}]"), "must be 1 to 255 characters");
            }
        }
        for key in self.properties.iter().flat_map(|m| m.keys()) {
            if key.is_empty() || key.len() > 255 {
                e.add(
                    "spec.properties",
                    format!("key {key:?} must be 1 to 255 characters"),
                );
            }
        }
        if let Some(content) = &self.content {
            let url_path = "spec.content.source.url";
            match url::Url::parse(&content.source.url) {
                Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => {}
                Ok(u) => e.add(
                    url_path,
                    format!(
                        "scheme {:?} is not accepted by Glance web-download; use http or https",
                        u.scheme()
                    ),
                ),
                Err(err) => e.add(
                    url_path,
                    format!("{:?} is not a URL: {err}", content.source.url),
                ),
            }
            if let Some(hash) = &content.source.hash {
                let want = match hash.algorithm {
                    HashAlgorithm::Md5 => 32,
                    HashAlgorithm::Sha1 => 40,
                    HashAlgorithm::Sha256 => 64,
                    HashAlgorithm::Sha384 => 96,
                    HashAlgorithm::Sha512 => 128,
                };
                let v = &hash.value;
                if v.len() != want
                    || !v
                        .chars()
                        .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
                {
                    e.add(
                        "spec.content.source.hash.value",
                        format!(
                            "must be {want} lower-case hex digits for {}",
                            hash.algorithm.as_str()
                        ),
                    );
                }
            }
        }
        e.0
    }
}

impl Validate for OpenstackNetworkSpec {
    fn validate(&self) -> Vec<FieldError> {
        let mut e = Errors::default();
        e.name("spec.name", &self.name, 255);
        let ty = self.network_type();
        if let Some(seg) = self.provider_segmentation_id {
            match ty {
                ProviderNetworkType::Flat => e.add(
                    "spec.providerSegmentationId",
                    "must not be set for a flat network",
                ),
                ProviderNetworkType::Vlan if !(1..=4094).contains(&seg) => e.add(
                    "spec.providerSegmentationId",
                    format!("VLAN id must be 1 to 4094, got {seg}"),
                ),
                _ => e.min("spec.providerSegmentationId", seg, 1),
            }
        }
        let physnet = self.provider_physical_network.as_deref().unwrap_or("");
        if physnet.is_empty()
            && (ty == ProviderNetworkType::Flat
                || (ty == ProviderNetworkType::Vlan && self.provider_segmentation_id.is_some()))
        {
            e.add(
                "spec.providerPhysicalNetwork",
                format!(
                    "is required for a {} network{}",
                    ty.as_str(),
                    if ty == ProviderNetworkType::Vlan {
                        " with a segmentation id"
                    } else {
                        ""
                    }
                ),
            );
        }
        let subnets = self.subnets.as_deref().unwrap_or_default();
        e.unique("spec.subnets", subnets.iter().map(|s| s.name.as_str()));
        let mut nets: Vec<(usize, Ipv4Net)> = Vec::new();
        for (i, s) in subnets.iter().enumerate() {
            if let Some(net) = validate_subnet(&format!("spec.subnets[{i}]"), s, &mut e) {
                if let Some((j, other)) = nets
                    .iter()
                    .find(|(_, o)| o.contains(&net) || net.contains(o))
                {
                    e.add(
                        format!("spec.subnets[{i}].cidr"),
                        format!(
                            "{} overlaps {} of spec.subnets[{j}]",
                            net.trunc(),
                            other.trunc()
                        ),
                    );
                }
                nets.push((i, net));
            }
        }
        e.0
    }
}

fn validate_subnet(path: &str, s: &ProviderSubnet, e: &mut Errors) -> Option<Ipv4Net> {
    e.name(&format!("{path}.name"), &s.name, 255);
    let net = cidr(&format!("{path}.cidr"), &s.cidr, e);
    if let (Some(a), Some(b)) = (&s.gateway_ip, &s.gateway)
        && a != b
    {
        e.add(
            format!("{path}.gateway"),
            "differs from gatewayIp; set only one of them",
        );
    }
    let gateway = match (&s.gateway_ip, &s.gateway) {
        (Some(g), _) => ipv4_in(&format!("{path}.gatewayIp"), g, net, e),
        (None, Some(g)) => ipv4_in(&format!("{path}.gateway"), g, net, e),
        (None, None) => None,
    };
    dns_servers(
        &format!("{path}.dnsNameservers"),
        s.dns_nameservers.as_ref(),
        e,
    );
    let mut ranges: Vec<(usize, u32, u32)> = Vec::new();
    for (i, pool) in s.allocation_pools.iter().flatten().enumerate() {
        let p = format!("{path}.allocationPools[{i}]");
        let start = ipv4_in(&format!("{p}.start"), &pool.start, net, e);
        let end = ipv4_in(&format!("{p}.end"), &pool.end, net, e);
        let (Some(start), Some(end)) = (start, end) else {
            continue;
        };
        let (a, b) = (u32::from(start), u32::from(end));
        if a > b {
            e.add(format!("{p}.start"), format!("{start} is after end {end}"));
            continue;
        }
        if let Some(g) = gateway
            && (a..=b).contains(&u32::from(g))
        {
            e.add(
                p.clone(),
                format!("gateway {g} lies inside the pool {start}-{end}; Neutron rejects that"),
            );
        }
        if let Some((j, ..)) = ranges.iter().find(|(_, x, y)| a <= *y && *x <= b) {
            e.add(p.clone(), format!("overlaps {path}.allocationPools[{j}]"));
        }
        ranges.push((i, a, b));
    }
    net
}

impl Validate for OpenstackProjectSpec {
    fn validate(&self) -> Vec<FieldError> {
        let mut e = Errors::default();
        e.name("spec.name", &self.name, 64);
        e.name("spec.domain", &self.domain, 255);
        if let Some(q) = &self.quotas {
            for (svc, key, v) in q.openstack_keys() {
                if v < -1 {
                    e.add(
                        format!("spec.quotas.{}", svc.as_str()),
                        format!("{key} must be -1 (unlimited) or more, got {v}"),
                    );
                }
            }
        }
        let networks = self.networks.as_deref().unwrap_or_default();
        e.unique("spec.networks", networks.iter().map(|n| n.name.as_str()));
        for (i, n) in networks.iter().enumerate() {
            let p = format!("spec.networks[{i}]");
            e.name(&format!("{p}.name"), &n.name, 255);
            cidr(&format!("{p}.cidr"), &n.cidr, &mut e);
            dns_servers(
                &format!("{p}.dnsNameservers"),
                n.dns_nameservers.as_ref(),
                &mut e,
            );
            if let Some(r) = &n.router
                && let Some(ext) = &r.external_network
                && ext.trim().is_empty()
            {
                e.add(
                    format!("{p}.router.externalNetwork"),
                    "must not be empty when given",
                );
            }
        }
        let groups = self.security_groups.as_deref().unwrap_or_default();
        e.unique(
            "spec.securityGroups",
            groups.iter().map(|g| g.name.as_str()),
        );
        let group_names: BTreeSet<&str> = groups.iter().map(|g| g.name.as_str()).collect();
        for (i, g) in groups.iter().enumerate() {
            let p = format!("spec.securityGroups[{i}]");
            e.name(&format!("{p}.name"), &g.name, 255);
            for (j, r) in g.rules.iter().flatten().enumerate() {
                validate_rule(&format!("{p}.rules[{j}]"), r, &group_names, &mut e);
            }
        }
        for (i, b) in self.role_bindings.iter().flatten().enumerate() {
            let p = format!("spec.roleBindings[{i}]");
            e.name(&format!("{p}.role"), &b.role, 255);
            for (j, u) in b.users.iter().flatten().enumerate() {
                e.name(&format!("{p}.users[{j}]"), u, 255);
            }
            for (j, g) in b.groups.iter().flatten().enumerate() {
                e.name(&format!("{p}.groups[{j}]"), g, 255);
            }
        }
        if let Some(f) = &self.federation_ref
            && f.config_map_name.as_deref().unwrap_or("").is_empty()
        {
            e.add(
                "spec.federationRef.configMapName",
                "is required when federationRef is given",
            );
        }
        if let Some(c) = &self.application_credential {
            tenant_credential(c, &mut e);
        }
        e.0
    }
}

fn tenant_credential(c: &crate::project::TenantCredential, e: &mut Errors) {
    const P: &str = "spec.applicationCredential";
    if let Some(n) = &c.secret_name
        && !is_dns_subdomain(n)
    {
        e.add(
            format!("{P}.secretName"),
            format!("{n:?} is not a valid Secret name (lower-case letters, digits, '-' and '.', at most 253)"),
        );
    }
    if c.lifetime_seconds < 30 {
        e.add(format!("{P}.lifetimeSeconds"), "must be at least 30");
    }
    if c.lead_time_seconds < 10 {
        e.add(format!("{P}.leadTimeSeconds"), "must be at least 10");
    }
    if c.lead_time_seconds >= c.lifetime_seconds {
        e.add(
            format!("{P}.leadTimeSeconds"),
            format!("must be less than {P}.lifetimeSeconds"),
        );
    }
    if c.drain_seconds == Some(0) {
        e.add(format!("{P}.drainSeconds"), "must be at least 1");
    }
    if c.drain_seconds() >= c.lead_time_seconds {
        e.add(
            format!("{P}.drainSeconds"),
            format!("must be less than {P}.leadTimeSeconds (default 30)"),
        );
    }
    for (i, r) in c.roles.iter().flatten().enumerate() {
        e.name(&format!("{P}.roles[{i}]"), r, 255);
    }
}

/// A Kubernetes object name (RFC 1123 subdomain).
fn is_dns_subdomain(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 253
        && n.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

fn validate_rule(p: &str, r: &SecurityGroupRule, groups: &BTreeSet<&str>, e: &mut Errors) {
    let has_ports = r.port_range_min.is_some() || r.port_range_max.is_some();
    match r.protocol {
        Some(Protocol::Tcp | Protocol::Udp) => {
            for (f, v) in [
                ("portRangeMin", r.port_range_min),
                ("portRangeMax", r.port_range_max),
            ] {
                if let Some(v) = v
                    && !(1..=65535).contains(&v)
                {
                    e.add(
                        format!("{p}.{f}"),
                        format!("must be a port 1 to 65535, got {v}"),
                    );
                }
            }
            if let (Some(a), Some(b)) = (r.port_range_min, r.port_range_max)
                && a > b
            {
                e.add(
                    format!("{p}.portRangeMin"),
                    format!("{a} is greater than portRangeMax {b}"),
                );
            }
        }
        Some(Protocol::Icmp) => {
            for (f, v) in [
                ("portRangeMin", r.port_range_min),
                ("portRangeMax", r.port_range_max),
            ] {
                if let Some(v) = v
                    && !(0..=255).contains(&v)
                {
                    e.add(
                        format!("{p}.{f}"),
                        format!(
                            "is the ICMP {} for protocol icmp and must be at most 255, got {v}",
                            if f == "portRangeMin" { "type" } else { "code" }
                        ),
                    );
                }
            }
            if r.port_range_max.is_some() && r.port_range_min.is_none() {
                e.add(
                    format!("{p}.portRangeMin"),
                    "the ICMP type is required when the ICMP code (portRangeMax) is given",
                );
            }
        }
        Some(Protocol::Any) | None if has_ports => {
            e.add(
                format!("{p}.protocol"),
                "port ranges need protocol tcp, udp or icmp",
            );
        }
        _ => {}
    }
    if r.remote_ip_prefix.is_some() && r.remote_group_name.is_some() {
        e.add(
            format!("{p}.remoteGroupName"),
            "remoteIpPrefix and remoteGroupName are mutually exclusive",
        );
    }
    if let Some(prefix) = &r.remote_ip_prefix {
        match prefix.parse::<IpNet>() {
            Ok(net) => {
                let v6 = matches!(net, IpNet::V6(_));
                if v6 != (r.ethertype == crate::project::Ethertype::IPv6) {
                    e.add(
                        format!("{p}.remoteIpPrefix"),
                        format!("{prefix} does not match ethertype {}", r.ethertype.as_str()),
                    );
                }
            }
            Err(_) => e.add(
                format!("{p}.remoteIpPrefix"),
                format!("{prefix:?} is not a CIDR such as 0.0.0.0/0"),
            ),
        }
    }
    if let Some(remote) = &r.remote_group_name
        && !groups.contains(remote.as_str())
    {
        e.add(
            format!("{p}.remoteGroupName"),
            format!("{remote:?} is not one of spec.securityGroups[].name"),
        );
    }
}

/// Evaluates the CEL rules (`x-kubernetes-validations`) of a kind's CRD against an object,
/// client-side. The controllers run this too, so objects admitted by a server that does not
/// enforce CEL still end in a clear `InvalidSpec` condition instead of an OpenStack error.
pub fn cel_errors<K>(obj: &K) -> Vec<FieldError>
where
    K: kube::CustomResourceExt + serde::Serialize,
{
    let crd = K::crd();
    let schema = crd
        .spec
        .versions
        .first()
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .and_then(|s| serde_json::to_value(s).ok());
    let (Some(schema), Ok(value)) = (schema, serde_json::to_value(obj)) else {
        return vec![FieldError {
            path: "spec".into(),
            message: "cannot serialize the object for CEL validation".into(),
        }];
    };
    cel_errors_value(&schema, &value)
}

/// Evaluates CEL rules of an OpenAPI schema against a JSON object.
pub fn cel_errors_value(schema: &serde_json::Value, value: &serde_json::Value) -> Vec<FieldError> {
    match kube::core::cel::Validator::new().validate(schema, value, None) {
        Ok(()) => Vec::new(),
        Err(errs) => errs
            .into_vec()
            .into_iter()
            .map(|e| FieldError {
                path: if e.field_path.is_empty() {
                    "spec".into()
                } else {
                    e.field_path.clone()
                },
                message: e.message.clone(),
            })
            .collect(),
    }
}

/// Everything wrong with an object: its CEL rules, then the pure checks of its spec.
pub fn object_errors<K>(obj: &K, spec: &(impl Validate + ?Sized)) -> Vec<FieldError>
where
    K: kube::CustomResourceExt + serde::Serialize,
{
    let mut errs = cel_errors(obj);
    for e in spec.validate() {
        if !errs.iter().any(|x| x.path == e.path) {
            errs.push(e);
        }
    }
    errs
}
