//! `OpenstackProject`: a whole OpenStack tenant (namespaced): project, user group, quotas,
//! networks with routers, security groups, role bindings and federation.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Condition, Phase, default_true};

/// Desired state of an OpenStack tenant.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "sunet.se",
    version = "v1alpha1",
    kind = "OpenstackProject",
    plural = "openstackprojects",
    singular = "openstackproject",
    shortname = "osp",
    shortname = "osproject",
    namespaced,
    doc = "An OpenStack tenant: project, user group, quotas, networks, security groups, role bindings and federation (namespaced).",
    status = "OpenstackProjectStatus",
    printcolumn = r#"{"name":"Project","type":"string","jsonPath":".spec.name"}"#,
    printcolumn = r#"{"name":"Domain","type":"string","jsonPath":".spec.domain"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"ID","type":"string","jsonPath":".status.projectId","priority":1}"#,
    printcolumn = r#"{"name":"Cloud","type":"string","jsonPath":".spec.cloudRef.name","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(validation = Rule::new(crate::cloud::CLOUD_REF_IMMUTABLE).message("spec.cloudRef cannot change after creation: delete the resource and create it in the other cloud"))]
#[serde(rename_all = "camelCase")]
pub struct OpenstackProjectSpec {
    /// The OpenstackCloud this resource lives in (extension). Unset: the cloud the operator
    /// was started with (`OS_CLOUD`), as with the seed. Cannot change after creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_ref: Option<crate::cloud::CloudRef>,
    /// Keystone project name; how the project is found in its domain and the source of the
    /// user group name (`<sanitized name>-users`).
    #[schemars(length(min = 1, max = 64))]
    pub name: String,
    /// Project description.
    #[serde(default)]
    pub description: String,
    /// Keystone domain (name or ID) of the project and its group.
    #[schemars(length(min = 1, max = 255))]
    pub domain: String,
    /// Whether the project is enabled.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Quotas; only the keys given are sent, keys removed later keep their last value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quotas: Option<Quotas>,
    /// Tenant networks, each with a subnet and an optional router.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]), length(max = 32))]
    pub networks: Option<Vec<ProjectNetwork>>,
    /// Security groups with their rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]), length(max = 64))]
    pub security_groups: Option<Vec<SecurityGroup>>,
    /// Roles granted on the project to users and groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub role_bindings: Option<Vec<RoleBinding>>,
    /// ConfigMap with the identity provider settings for SSO (`idp-name`, `idp-remote-id`,
    /// `sso-domain`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub federation_ref: Option<FederationRef>,
    /// Take over an existing Keystone project with this name that this operator did not
    /// create (extension). Refused unless the operator runs with `--allow-project-adoption`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopt: bool,
    /// An application credential for the tenant, delivered as a `clouds.yaml` Secret in this
    /// namespace, rotated before it expires and revoked when the project is deleted or this
    /// field removed (extension; docs/rotation.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application_credential: Option<TenantCredential>,
}

/// The tenant's application credential: where it is delivered and how it rotates.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.leadTimeSeconds < self.lifetimeSeconds").message("spec.applicationCredential.leadTimeSeconds must be less than spec.applicationCredential.lifetimeSeconds"))]
#[x_kube(validation = Rule::new("!has(self.drainSeconds) || self.drainSeconds < self.leadTimeSeconds").message("spec.applicationCredential.drainSeconds must be less than spec.applicationCredential.leadTimeSeconds (default 30)"))]
pub struct TenantCredential {
    /// The Secret (in this namespace) receiving the `clouds.yaml`; default `<object name>-clouds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: Option<String>,
    /// How long each application credential lives (its Keystone `expires_at`).
    #[schemars(range(min = 30, max = 31_622_400))]
    pub lifetime_seconds: u32,
    /// How long before the current credential expires its successor is made and delivered.
    #[schemars(range(min = 10, max = 31_622_400))]
    pub lead_time_seconds: u32,
    /// How long the old credential keeps working after the Secret was switched (default 30),
    /// for the tenant's clients to pick up the new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86_400))]
    pub drain_seconds: Option<u32>,
    /// Roles of the credential on the project (default `[member]`); each must be one of the
    /// operator's allowed roles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 16))]
    pub roles: Option<Vec<String>>,
}

impl TenantCredential {
    /// The role given when `roles` is unset.
    pub const DEFAULT_ROLE: &str = "member";

    /// The Secret's name in force.
    pub fn secret_name(&self, object: &str) -> String {
        self.secret_name
            .clone()
            .filter(|n| !n.trim().is_empty())
            .unwrap_or_else(|| format!("{object}-clouds"))
    }

    /// The drain period in force.
    pub fn drain_seconds(&self) -> u32 {
        self.drain_seconds
            .unwrap_or(crate::cloud::CredentialRotation::DEFAULT_DRAIN_SECONDS)
    }

    /// The roles in force.
    pub fn roles(&self) -> Vec<String> {
        match &self.roles {
            Some(r) if !r.is_empty() => r.clone(),
            _ => vec![Self::DEFAULT_ROLE.to_string()],
        }
    }
}

/// Quotas per service. Every limit accepts -1 for unlimited.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Quotas {
    /// Nova quotas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute: Option<ComputeQuotas>,
    /// Cinder quotas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<StorageQuotas>,
    /// Neutron quotas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkQuotas>,
}

/// Nova quotas.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComputeQuotas {
    /// Nova `instances`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1))]
    pub instances: Option<i64>,
    /// Nova `cores`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1))]
    pub cores: Option<i64>,
    /// Nova `ram` (MB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "ramMB")]
    #[schemars(range(min = -1))]
    pub ram_mb: Option<i64>,
    /// Nova `server_groups`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1))]
    pub server_groups: Option<i64>,
    /// Nova `server_group_members`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1))]
    pub server_group_members: Option<i64>,
}

/// Cinder quotas.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageQuotas {
    /// Cinder `volumes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1))]
    pub volumes: Option<i64>,
    /// Cinder `gigabytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "volumesGB")]
    #[schemars(range(min = -1))]
    pub volumes_gb: Option<i64>,
    /// Cinder `snapshots`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1))]
    pub snapshots: Option<i64>,
    /// Cinder `backups`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1))]
    pub backups: Option<i64>,
    /// Cinder `backup_gigabytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "backupsGB")]
    #[schemars(range(min = -1))]
    pub backups_gb: Option<i64>,
}

/// Neutron quotas.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkQuotas {
    /// Neutron `floatingip`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1))]
    pub floating_ips: Option<i64>,
    /// Neutron `network`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1))]
    pub networks: Option<i64>,
    /// Neutron `subnet`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1))]
    pub subnets: Option<i64>,
    /// Neutron `router`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1))]
    pub routers: Option<i64>,
    /// Neutron `port`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1))]
    pub ports: Option<i64>,
    /// Neutron `security_group`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1))]
    pub security_groups: Option<i64>,
    /// Neutron `security_group_rule`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1))]
    pub security_group_rules: Option<i64>,
}

impl Quotas {
    /// The spec's quotas as (service, OpenStack quota name, limit), only for keys present.
    pub fn openstack_keys(&self) -> Vec<(QuotaService, &'static str, i64)> {
        let mut out = Vec::new();
        let mut push = |svc, key, v: Option<i64>| {
            if let Some(v) = v {
                out.push((svc, key, v));
            }
        };
        if let Some(c) = &self.compute {
            push(QuotaService::Compute, "instances", c.instances);
            push(QuotaService::Compute, "cores", c.cores);
            push(QuotaService::Compute, "ram", c.ram_mb);
            push(QuotaService::Compute, "server_groups", c.server_groups);
            push(
                QuotaService::Compute,
                "server_group_members",
                c.server_group_members,
            );
        }
        if let Some(s) = &self.storage {
            push(QuotaService::Storage, "volumes", s.volumes);
            push(QuotaService::Storage, "gigabytes", s.volumes_gb);
            push(QuotaService::Storage, "snapshots", s.snapshots);
            push(QuotaService::Storage, "backups", s.backups);
            push(QuotaService::Storage, "backup_gigabytes", s.backups_gb);
        }
        if let Some(n) = &self.network {
            push(QuotaService::Network, "floatingip", n.floating_ips);
            push(QuotaService::Network, "network", n.networks);
            push(QuotaService::Network, "subnet", n.subnets);
            push(QuotaService::Network, "router", n.routers);
            push(QuotaService::Network, "port", n.ports);
            push(QuotaService::Network, "security_group", n.security_groups);
            push(
                QuotaService::Network,
                "security_group_rule",
                n.security_group_rules,
            );
        }
        out
    }
}

/// Which service a quota belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QuotaService {
    /// Nova.
    Compute,
    /// Cinder.
    Storage,
    /// Neutron.
    Network,
}

impl QuotaService {
    /// The spec's name for the service section.
    pub fn as_str(self) -> &'static str {
        match self {
            QuotaService::Compute => "compute",
            QuotaService::Storage => "storage",
            QuotaService::Network => "network",
        }
    }
}

/// A tenant network: network `<name>`, subnet `<name>-subnet`, router `<name>-router`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProjectNetwork {
    /// Network name.
    #[schemars(length(min = 1, max = 255))]
    pub name: String,
    /// IPv4 CIDR of the subnet.
    // maxLength: the pattern allows at most 18 characters; the bound is what lets the
    // API server's CEL cost estimate see that (it ignores patterns)
    #[schemars(
        regex(pattern = r"^([0-9]{1,3}\.){3}[0-9]{1,3}/[0-9]{1,2}$"),
        length(max = 18)
    )]
    #[x_kube(validation = Rule::new("isCIDR(self)").message("networks[].cidr must be a valid IPv4 CIDR such as 10.0.0.0/24"))]
    pub cidr: String,
    /// Whether Neutron serves DHCP on the subnet.
    #[serde(default = "default_true")]
    pub enable_dhcp: bool,
    /// DNS servers handed out by DHCP (IP addresses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16), extend("items" = {"type": "string", "maxLength": 45, "x-kubernetes-validations": [{"rule": "isIP(self)", "message": "networks[].dnsNameservers[] must be IP addresses such as 192.0.2.53"}]}))]
    pub dns_nameservers: Option<Vec<String>>,
    /// Presence creates a router for the subnet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<ProjectRouter>,
}

/// A router connecting a tenant network to an external network.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProjectRouter {
    /// Name of an external network (`router:external`) for the gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 255))]
    pub external_network: Option<String>,
    /// Source NAT on the gateway.
    #[serde(default = "default_true")]
    pub enable_snat: bool,
}

/// A security group and its rules.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityGroup {
    /// Group name; how the group is found within the project.
    #[schemars(length(min = 1, max = 255))]
    pub name: String,
    /// Group description.
    #[serde(default)]
    pub description: String,
    /// Rules, reconciled as a set. Neutron's default egress rules of a new group are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub rules: Option<Vec<SecurityGroupRule>>,
}

/// One security group rule.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.portRangeMin) || !has(self.portRangeMax) || !has(self.protocol) || self.protocol == 'icmp' || self.portRangeMin <= self.portRangeMax").message("rules[].portRangeMin must not be greater than rules[].portRangeMax"))]
#[x_kube(validation = Rule::new("!(has(self.portRangeMin) || has(self.portRangeMax)) || (has(self.protocol) && self.protocol in ['tcp', 'udp', 'icmp'])").message("rules[].portRangeMin/portRangeMax need protocol tcp or udp (or icmp, where they are the ICMP type and code)"))]
#[x_kube(validation = Rule::new("!has(self.protocol) || self.protocol != 'icmp' || ((!has(self.portRangeMin) || self.portRangeMin <= 255) && (!has(self.portRangeMax) || self.portRangeMax <= 255))").message("for protocol icmp, rules[].portRangeMin is the ICMP type and rules[].portRangeMax the ICMP code, both at most 255"))]
#[x_kube(validation = Rule::new("!has(self.protocol) || self.protocol != 'icmp' || !has(self.portRangeMax) || has(self.portRangeMin)").message("for protocol icmp, rules[].portRangeMax (the ICMP code) needs rules[].portRangeMin (the ICMP type)"))]
#[x_kube(validation = Rule::new("!has(self.remoteIpPrefix) || !has(self.remoteGroupName)").message("rules[].remoteIpPrefix and rules[].remoteGroupName are mutually exclusive"))]
#[x_kube(validation = Rule::new("!has(self.remoteIpPrefix) || !isCIDR(self.remoteIpPrefix) || cidr(self.remoteIpPrefix).ip().family() == ((has(self.ethertype) && self.ethertype == 'IPv6') ? 6 : 4)").message("rules[].remoteIpPrefix must be of the family given by rules[].ethertype (IPv4 by default)"))]
pub struct SecurityGroupRule {
    /// Traffic direction.
    pub direction: Direction,
    /// IP protocol; `any` (or unset) matches every protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Protocol>,
    /// First port (tcp/udp) or ICMP type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port_range_min: Option<i64>,
    /// Last port (tcp/udp) or ICMP code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port_range_max: Option<i64>,
    /// Remote CIDR, e.g. `0.0.0.0/0`.
    // 49: the longest textual IPv6 prefix (an IPv4-embedded address written out in full, /128)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 49))]
    #[x_kube(validation = Rule::new("isCIDR(self)").message("rules[].remoteIpPrefix must be a CIDR such as 0.0.0.0/0 or ::/0"))]
    pub remote_ip_prefix: Option<String>,
    /// Name of another security group in this spec as the remote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub remote_group_name: Option<String>,
    /// Address family.
    #[serde(default)]
    pub ethertype: Ethertype,
}

/// Rule direction.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema, Hash, PartialOrd, Ord,
)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Incoming traffic.
    Ingress,
    /// Outgoing traffic.
    Egress,
}

impl Direction {
    /// Neutron's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Ingress => "ingress",
            Direction::Egress => "egress",
        }
    }
}

/// Rule protocol.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema, Hash, PartialOrd, Ord,
)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)]
pub enum Protocol {
    Tcp,
    Udp,
    Icmp,
    Any,
}

impl Protocol {
    /// Neutron's spelling; `None` for any protocol (Neutron's null).
    pub fn neutron(self) -> Option<&'static str> {
        match self {
            Protocol::Tcp => Some("tcp"),
            Protocol::Udp => Some("udp"),
            Protocol::Icmp => Some("icmp"),
            Protocol::Any => None,
        }
    }
}

/// Address family of a rule.
#[derive(
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    JsonSchema,
    Default,
    Hash,
    PartialOrd,
    Ord,
)]
pub enum Ethertype {
    /// IPv4.
    #[default]
    IPv4,
    /// IPv6.
    IPv6,
}

impl Ethertype {
    /// Neutron's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Ethertype::IPv4 => "IPv4",
            Ethertype::IPv6 => "IPv6",
        }
    }
}

/// A role granted on the project.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleBinding {
    /// Keystone role name.
    #[schemars(length(min = 1, max = 255))]
    pub role: String,
    /// Keystone user names (for SSO users, the OIDC `sub`). Users that do not exist yet are
    /// reported in status and granted once they appear. At most 1,000 (a bound for the API
    /// server's cost estimates; use groups for more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1000))]
    pub users: Option<Vec<String>>,
    /// Existing Keystone group names (at most 1,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1000))]
    pub groups: Option<Vec<String>>,
    /// Domain of the users; the project's domain when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_domain: Option<String>,
    /// Domain of the groups; the project's domain when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_domain: Option<String>,
}

/// Where the federation settings live.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FederationRef {
    /// ConfigMap name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_name: Option<String>,
    /// ConfigMap namespace; the project's own namespace when unset. Another namespace is
    /// refused unless the operator allows it (`--federation-namespaces`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_namespace: Option<String>,
}

/// Status of one tenant network.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkStatus {
    /// Network name.
    pub name: String,
    /// Neutron network ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_id: Option<String>,
    /// Neutron subnet ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet_id: Option<String>,
    /// Neutron router ID, when a router was requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_id: Option<String>,
}

/// Status of one security group.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityGroupStatus {
    /// Group name.
    pub name: String,
    /// Neutron security group ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// A quota limit next to current usage.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuotaUsage {
    /// The limit in force (-1 = unlimited).
    pub limit: i64,
    /// What the project uses now.
    pub in_use: i64,
}

/// Observed state of an OpenStack tenant.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenstackProjectStatus {
    /// Lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Keystone project ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// Keystone ID of the project's user group (legacy objects may hold its name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
    /// One entry per spec network.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<NetworkStatus>,
    /// One entry per spec security group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<SecurityGroupStatus>,
    /// Quota limits and usage, keyed `<service>.<specKey>`, e.g. `compute.cores` (extension).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub quota_usage: BTreeMap<String, QuotaUsage>,
    /// Users named in role bindings that do not exist in Keystone yet (extension); they are
    /// granted their roles once they appear.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_users: Vec<String>,
    /// `ProjectReady`, `QuotasReady`, `NetworksReady`, `SecurityGroupsReady`,
    /// `RoleBindingsReady`, `FederationReady` and `Ready` (roll-up).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` the status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When OpenStack was last compared with the spec (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub last_sync_time: Option<String>,
    /// Whether the project existed before and was adopted rather than created (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopted: Option<bool>,
    /// Where this project's federation mapping rule lives (extension), so the rule is removed
    /// when `spec.federationRef` goes away or its ConfigMap is gone at deletion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub federation_rule: Option<FederationRuleStatus>,
    /// Quota keys the operator set, as `<service>.<OpenStack key>` (e.g. `compute.ram`)
    /// (extension): a key removed from `spec.quotas` goes back to the cloud's default, keys
    /// never set are left alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quota_keys_set: Vec<String>,
    /// Keystone IDs of the per-role groups federated users are mapped into, by role
    /// (extension); the `member` group is the project group (`groupId`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub role_groups: BTreeMap<String, String>,
    /// The tenant's application credential (with `spec.applicationCredential`; never its
    /// secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application_credential: Option<TenantCredentialStatus>,
}

/// Where a tenant's application credential stands.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantCredentialStatus {
    /// The Secret holding the `clouds.yaml`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
    /// The Keystone user owning the credentials (made by the operator for this project).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// The name of the credential in the Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<String>,
    /// When it expires (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// When the next step (a rotation, or deleting the old credential) is due (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_step_at: Option<String>,
    /// When the Secret last switched to a new credential (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_rotation: Option<String>,
    /// How many credentials were delivered.
    #[serde(default)]
    pub rotations: u64,
}

/// The location of a project's rule in a shared federation mapping.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FederationRuleStatus {
    /// The identity provider (`idp-name`).
    pub identity_provider: String,
    /// The mapping holding the rule (`<idp>_oidc_mapping`).
    pub mapping: String,
    /// The domain named in the rule (`sso-domain` or the project's domain).
    pub domain: String,
    /// The group named in the rule.
    pub group: String,
    /// Further groups with a rule of this project (one per role other than `member`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub role_groups: Vec<String>,
}
