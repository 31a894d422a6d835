//! `OpenstackNetwork`: a Neutron provider network with its subnets (cluster-scoped).

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Condition, DeletionPolicy, Phase, default_true};

/// The seed's IPv4 CIDR pattern (kept so the schema accepts exactly what the seed accepts).
pub const IPV4_CIDR_PATTERN: &str = r"^([0-9]{1,3}\.){3}[0-9]{1,3}/[0-9]{1,2}$";

/// Desired state of a provider network.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "sunet.se",
    version = "v1alpha1",
    kind = "OpenstackNetwork",
    plural = "openstacknetworks",
    singular = "openstacknetwork",
    shortname = "osn",
    shortname = "osnet",
    doc = "A Neutron provider network with its subnets (cluster-scoped).",
    status = "OpenstackNetworkStatus",
    printcolumn = r#"{"name":"Network","type":"string","jsonPath":".spec.name"}"#,
    printcolumn = r#"{"name":"External","type":"boolean","jsonPath":".spec.external"}"#,
    printcolumn = r#"{"name":"Type","type":"string","jsonPath":".spec.providerNetworkType"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"ID","type":"string","jsonPath":".status.networkId","priority":1}"#,
    printcolumn = r#"{"name":"Cloud","type":"string","jsonPath":".spec.cloudRef.name","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(validation = Rule::new("!has(self.providerSegmentationId) || !has(self.providerNetworkType) || self.providerNetworkType != 'flat'").message("providerSegmentationId must not be set for a flat network"))]
#[x_kube(validation = Rule::new(crate::cloud::CLOUD_REF_IMMUTABLE).message("spec.cloudRef cannot change after creation: delete the resource and create it in the other cloud"))]
#[serde(rename_all = "camelCase")]
pub struct OpenstackNetworkSpec {
    /// The OpenstackCloud this resource lives in (extension). Unset: the cloud the operator
    /// was started with (`OS_CLOUD`), as with the seed. Cannot change after creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_ref: Option<crate::cloud::CloudRef>,
    /// Neutron network name; also how an existing network is found.
    #[schemars(length(min = 1, max = 255))]
    pub name: String,
    /// Network description.
    #[serde(default)]
    pub description: String,
    /// `router:external`: routers may use this network as their gateway.
    #[serde(default)]
    pub external: bool,
    /// Whether every project may attach to this network.
    #[serde(default)]
    pub shared: bool,
    /// `provider:network_type`; `flat` when unset (as the seed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_network_type: Option<ProviderNetworkType>,
    /// `provider:physical_network`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub provider_physical_network: Option<String>,
    /// `provider:segmentation_id` (VLAN id or tunnel id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub provider_segmentation_id: Option<i64>,
    /// Subnets of the network, reconciled in place by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]), length(max = 64))]
    pub subnets: Option<Vec<ProviderSubnet>>,
    /// Take over an existing network with this name that this operator did not create
    /// (extension). Only networks without a project owner or owned by the admin project
    /// are considered.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopt: bool,
    /// What deleting the resource does to the network (extension). Unset: delete what we
    /// created, keep what we adopted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<DeletionPolicy>,
}

impl OpenstackNetworkSpec {
    /// The network type the seed uses when none is given.
    pub fn network_type(&self) -> ProviderNetworkType {
        self.provider_network_type
            .unwrap_or(ProviderNetworkType::Flat)
    }
}

/// Neutron provider network types.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)]
pub enum ProviderNetworkType {
    Flat,
    Vlan,
    Vxlan,
    Gre,
    Geneve,
}

impl ProviderNetworkType {
    /// Neutron's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderNetworkType::Flat => "flat",
            ProviderNetworkType::Vlan => "vlan",
            ProviderNetworkType::Vxlan => "vxlan",
            ProviderNetworkType::Gre => "gre",
            ProviderNetworkType::Geneve => "geneve",
        }
    }
}

/// A subnet of a provider network (IPv4, as the seed).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.gatewayIp) || !isCIDR(self.cidr) || (isIP(self.gatewayIp) && cidr(self.cidr).containsIP(self.gatewayIp))").message("subnets[].gatewayIp must be an IP address inside subnets[].cidr"))]
#[x_kube(validation = Rule::new("!has(self.gateway) || !isCIDR(self.cidr) || (isIP(self.gateway) && cidr(self.cidr).containsIP(self.gateway))").message("subnets[].gateway must be an IP address inside subnets[].cidr"))]
#[x_kube(validation = Rule::new("!has(self.gateway) || !has(self.gatewayIp) || self.gateway == self.gatewayIp").message("subnets[].gateway and subnets[].gatewayIp are the same setting and must not differ"))]
#[x_kube(validation = Rule::new("!has(self.allocationPools) || !isCIDR(self.cidr) || self.allocationPools.all(p, isIP(p.start) && isIP(p.end) && cidr(self.cidr).containsIP(p.start) && cidr(self.cidr).containsIP(p.end))").message("subnets[].allocationPools[] start and end must be IP addresses inside subnets[].cidr"))]
pub struct ProviderSubnet {
    /// Subnet name; how the subnet is found within the network.
    #[schemars(length(min = 1, max = 255))]
    pub name: String,
    /// IPv4 CIDR, e.g. `192.168.1.0/24`.
    // maxLength: the pattern allows at most 18 characters; the bound is what lets the
    // API server's CEL cost estimate see that (it ignores patterns)
    #[schemars(
        regex(pattern = r"^([0-9]{1,3}\.){3}[0-9]{1,3}/[0-9]{1,2}$"),
        length(max = 18)
    )]
    #[x_kube(validation = Rule::new("isCIDR(self)").message("subnets[].cidr must be a valid IPv4 CIDR such as 192.168.1.0/24"))]
    pub cidr: String,
    /// Gateway address; Neutron picks the first address when unset.
    // 45: the longest textual IP address (IPv6 with an embedded IPv4 address, written out)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 45))]
    pub gateway_ip: Option<String>,
    /// The seed README's spelling of `gatewayIp`; accepted and treated the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 45))]
    pub gateway: Option<String>,
    /// Whether Neutron serves DHCP on the subnet.
    #[serde(default = "default_true")]
    pub enable_dhcp: bool,
    /// DNS servers handed out by DHCP (IP addresses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16), extend("items" = {"type": "string", "maxLength": 45, "x-kubernetes-validations": [{"rule": "isIP(self)", "message": "subnets[].dnsNameservers[] must be IP addresses such as 192.0.2.53"}]}))]
    pub dns_nameservers: Option<Vec<String>>,
    /// Address ranges Neutron allocates ports from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub allocation_pools: Option<Vec<AllocationPool>>,
}

impl ProviderSubnet {
    /// The gateway from either spelling.
    pub fn effective_gateway(&self) -> Option<&str> {
        self.gateway_ip.as_deref().or(self.gateway.as_deref())
    }
}

/// An inclusive address range.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!isIP(self.start) || !isIP(self.end) || ip(self.start).family() != 4 || ip(self.end).family() != 4 || int(self.start.split('.')[0]) * 16777216 + int(self.start.split('.')[1]) * 65536 + int(self.start.split('.')[2]) * 256 + int(self.start.split('.')[3]) <= int(self.end.split('.')[0]) * 16777216 + int(self.end.split('.')[1]) * 65536 + int(self.end.split('.')[2]) * 256 + int(self.end.split('.')[3])").message("allocationPools[].start must not be after allocationPools[].end"))]
#[x_kube(validation = Rule::new("isIP(self.start) && isIP(self.end)").message("allocationPools[].start and allocationPools[].end must be IP addresses"))]
pub struct AllocationPool {
    /// First address of the range.
    #[schemars(length(min = 1, max = 45))]
    pub start: String,
    /// Last address of the range.
    #[schemars(length(min = 1, max = 45))]
    pub end: String,
}

/// Status of one provider subnet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubnetStatus {
    /// Subnet name.
    pub name: String,
    /// Neutron subnet ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet_id: Option<String>,
}

/// Observed state of a provider network.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenstackNetworkStatus {
    /// Lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Neutron network ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_id: Option<String>,
    /// One entry per subnet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<SubnetStatus>,
    /// `NetworkReady` (seed) and `Ready` (roll-up).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` the status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When OpenStack was last compared with the spec (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub last_sync_time: Option<String>,
    /// Whether the network existed before and was adopted rather than created (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopted: Option<bool>,
    /// A network create that was sent but whose network is not yet recorded (extension):
    /// written before the create, so a pass interrupted between Neutron's create and the
    /// ownership tags can recognise the untagged network it made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_create: Option<PendingCreate>,
}

/// An OpenStack create the operator sent before recording its result.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingCreate {
    /// The name the object was created with.
    pub name: String,
    /// When the create was about to be sent (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub since: String,
}
