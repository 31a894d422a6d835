//! Plain data types exchanged through the port.
//!
//! These are deliberately independent of `openstack_sdk`'s generated types:
//! controllers and the fake only ever see these, so the wire format can be
//! changed in the adapter without touching planners. IDs are plain strings
//! because every service uses a different format (uuid, hex, user-chosen).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------------------
// Identity (Keystone)
// ---------------------------------------------------------------------------

/// A Keystone domain.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Domain {
    /// Domain ID (hex uuid).
    pub id: String,
    /// Unique domain name.
    pub name: String,
    /// Free-text description ("" when unset).
    #[serde(default)]
    pub description: String,
    /// Whether the domain is enabled.
    pub enabled: bool,
    /// Tags; Keystone stores them on the project that backs the domain
    /// (see [`crate::Identity::set_domain_tags`]).
    #[serde(default)]
    pub tags: Vec<String>,
}

/// Request to create a domain.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainCreate {
    /// Unique domain name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Whether the domain starts enabled.
    pub enabled: bool,
    /// Tags set in the same call (Keystone stores them on the domain's
    /// backing project).
    #[serde(default)]
    pub tags: Vec<String>,
}

/// Partial update of a domain; `None` leaves the attribute alone.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainUpdate {
    /// New description.
    pub description: Option<String>,
    /// New enabled flag.
    pub enabled: Option<bool>,
}

/// A Keystone project.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Project {
    /// Project ID.
    pub id: String,
    /// Name, unique within the domain.
    pub name: String,
    /// Owning domain ID.
    pub domain_id: String,
    /// Description ("" when unset).
    #[serde(default)]
    pub description: String,
    /// Whether the project is enabled.
    pub enabled: bool,
    /// Project tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// Request to create a project.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectCreate {
    /// Name, unique within the domain.
    pub name: String,
    /// Owning domain ID.
    pub domain_id: String,
    /// Description.
    pub description: String,
    /// Whether the project starts enabled.
    pub enabled: bool,
    /// Tags set in the same call (no untagged window).
    pub tags: Vec<String>,
}

/// Partial update of a project; `None` leaves the attribute alone.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectUpdate {
    /// New name.
    pub name: Option<String>,
    /// New description.
    pub description: Option<String>,
    /// New enabled flag.
    pub enabled: Option<bool>,
    /// Replacement tag list (the whole list is replaced).
    pub tags: Option<Vec<String>>,
}

/// Filter for listing projects; all set fields must match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectFilter {
    /// Only projects in this domain.
    pub domain_id: Option<String>,
    /// Only projects with exactly this name.
    pub name: Option<String>,
    /// Only projects carrying all of these tags.
    pub tags: Vec<String>,
}

/// A Keystone group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    /// Group ID.
    pub id: String,
    /// Name, unique within the domain.
    pub name: String,
    /// Owning domain ID.
    pub domain_id: String,
    /// Description ("" when unset).
    #[serde(default)]
    pub description: String,
}

/// Request to create a group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupCreate {
    /// Name, unique within the domain.
    pub name: String,
    /// Owning domain ID.
    pub domain_id: String,
    /// Description.
    pub description: String,
}

/// Partial update of a group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupUpdate {
    /// New name.
    pub name: Option<String>,
    /// New description.
    pub description: Option<String>,
}

/// A Keystone user (read-only for the operator).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    /// User ID.
    pub id: String,
    /// Name, unique within the domain.
    pub name: String,
    /// Owning domain ID.
    pub domain_id: String,
    /// Whether the user is enabled.
    pub enabled: bool,
}

/// A Keystone role.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Role {
    /// Role ID.
    pub id: String,
    /// Role name.
    pub name: String,
    /// Domain for domain-specific roles; `None` for global roles.
    pub domain_id: Option<String>,
}

/// Who a role is assigned to.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Actor {
    /// A user, by ID.
    User(String),
    /// A group, by ID.
    Group(String),
}

/// One role assignment on a project.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleAssignment {
    /// Role ID.
    pub role_id: String,
    /// Role name when the service included it.
    pub role_name: Option<String>,
    /// The project the role is assigned on.
    pub project_id: String,
    /// The user or group holding the role.
    pub actor: Actor,
}

/// A federation identity provider.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentityProvider {
    /// User-chosen IdP ID.
    pub id: String,
    /// Whether the IdP is enabled.
    pub enabled: bool,
    /// Description ("" when unset).
    #[serde(default)]
    pub description: String,
    /// Remote IDs (e.g. OIDC issuers) accepted from this IdP.
    #[serde(default)]
    pub remote_ids: Vec<String>,
    /// Domain that federated users land in.
    pub domain_id: Option<String>,
}

/// Request to create an identity provider.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentityProviderCreate {
    /// User-chosen IdP ID.
    pub id: String,
    /// Remote IDs.
    pub remote_ids: Vec<String>,
    /// Whether the IdP starts enabled.
    pub enabled: bool,
    /// Domain for federated users; `None` lets Keystone create one.
    pub domain_id: Option<String>,
    /// Description.
    pub description: Option<String>,
}

/// Partial update of an identity provider.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentityProviderUpdate {
    /// Replacement remote ID list.
    pub remote_ids: Option<Vec<String>>,
    /// New enabled flag.
    pub enabled: Option<bool>,
    /// New description.
    pub description: Option<String>,
}

/// A federation mapping.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapping {
    /// User-chosen mapping ID.
    pub id: String,
    /// The mapping rules, verbatim.
    pub rules: MappingRules,
}

/// A mapping's rules, each kept as the JSON text Keystone returned. Every tenant adds a rule
/// to its identity provider's shared mapping: 1,000 rules as `serde_json::Value`s take ~6 MB
/// (a B-tree node per JSON object), as text ~0.4 MB (heaptrack, `bench --only tenants`).
/// Two lists are equal when every rule's text is.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MappingRules(Vec<Box<serde_json::value::RawValue>>);

impl MappingRules {
    /// The rules as JSON text, from values.
    pub fn from_values<'a>(
        rules: impl IntoIterator<Item = &'a serde_json::Value>,
    ) -> Result<Self, serde_json::Error> {
        rules
            .into_iter()
            .map(serde_json::value::to_raw_value)
            .collect::<Result<_, _>>()
            .map(MappingRules)
    }

    /// The rules, each as JSON text.
    pub fn as_slice(&self) -> &[Box<serde_json::value::RawValue>] {
        &self.0
    }

    /// How many rules there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is no rule.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The rules, each as JSON text, taken out.
    pub fn into_vec(self) -> Vec<Box<serde_json::value::RawValue>> {
        self.0
    }

    /// All rules as one JSON array (for checks and messages; the large form).
    pub fn to_value(&self) -> Result<serde_json::Value, serde_json::Error> {
        self.0
            .iter()
            .map(|r| serde_json::from_str(r.get()))
            .collect::<Result<_, _>>()
            .map(serde_json::Value::Array)
    }
}

impl From<Vec<Box<serde_json::value::RawValue>>> for MappingRules {
    fn from(rules: Vec<Box<serde_json::value::RawValue>>) -> Self {
        MappingRules(rules)
    }
}

impl PartialEq for MappingRules {
    fn eq(&self, other: &Self) -> bool {
        self.0
            .iter()
            .map(|r| r.get())
            .eq(other.0.iter().map(|r| r.get()))
    }
}

impl Eq for MappingRules {}

/// A federation protocol of an identity provider.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FederationProtocol {
    /// Protocol ID (e.g. `openid`).
    pub id: String,
    /// The identity provider it belongs to.
    pub idp_id: String,
    /// The mapping it uses.
    pub mapping_id: String,
}

// ---------------------------------------------------------------------------
// Compute (Nova)
// ---------------------------------------------------------------------------

/// A Nova flavor.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flavor {
    /// Flavor ID.
    pub id: String,
    /// Unique flavor name.
    pub name: String,
    /// Virtual CPUs.
    pub vcpus: u32,
    /// RAM in MiB.
    pub ram_mb: u64,
    /// Root disk in GiB.
    pub disk_gb: u64,
    /// Ephemeral disk in GiB.
    pub ephemeral_gb: u64,
    /// Swap in MiB.
    pub swap_mb: u64,
    /// Public flavors are usable by all projects.
    pub is_public: bool,
    /// Description (microversion 2.55+).
    pub description: Option<String>,
    /// Extra specs (returned inline since microversion 2.61).
    #[serde(default)]
    pub extra_specs: BTreeMap<String, String>,
}

/// Request to create a flavor.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlavorCreate {
    /// Unique flavor name.
    pub name: String,
    /// Explicit flavor ID; `None` lets Nova generate a uuid.
    pub id: Option<String>,
    /// Virtual CPUs.
    pub vcpus: u32,
    /// RAM in MiB.
    pub ram_mb: u64,
    /// Root disk in GiB.
    pub disk_gb: u64,
    /// Ephemeral disk in GiB.
    pub ephemeral_gb: u64,
    /// Swap in MiB.
    pub swap_mb: u64,
    /// Whether all projects may use it.
    pub is_public: bool,
    /// Description.
    pub description: Option<String>,
}

/// One quota entry: the limit and the current usage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaValue {
    /// The limit; `-1` means unlimited.
    pub limit: i64,
    /// Current usage (0 when the service does not report it).
    pub in_use: i64,
}

/// Quota entries by the service's own key names (e.g. `cores`, `network`,
/// `gigabytes`).
pub type QuotaSet = BTreeMap<String, QuotaValue>;

/// Quota limits to set, by key; keys not present are left alone.
pub type QuotaUpdate = BTreeMap<String, i64>;

// ---------------------------------------------------------------------------
// Image (Glance)
// ---------------------------------------------------------------------------

/// Glance image status.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum ImageStatus {
    /// Record exists, no data yet.
    Queued,
    /// Data is being uploaded.
    Saving,
    /// Staged data is present (interoperable import).
    Uploading,
    /// An import task is running.
    Importing,
    /// Ready to use.
    Active,
    /// Upload failed terminally.
    Killed,
    /// Deleted (with delayed delete).
    Deleted,
    /// Pending delayed delete.
    PendingDelete,
    /// Deactivated by an admin.
    Deactivated,
    /// A status this crate does not know.
    Other(String),
}

impl From<String> for ImageStatus {
    fn from(s: String) -> Self {
        match s.as_str() {
            "queued" => Self::Queued,
            "saving" => Self::Saving,
            "uploading" => Self::Uploading,
            "importing" => Self::Importing,
            "active" => Self::Active,
            "killed" => Self::Killed,
            "deleted" => Self::Deleted,
            "pending_delete" => Self::PendingDelete,
            "deactivated" => Self::Deactivated,
            _ => Self::Other(s),
        }
    }
}

impl From<ImageStatus> for String {
    fn from(s: ImageStatus) -> Self {
        s.as_str().to_string()
    }
}

impl ImageStatus {
    /// The wire form (`active`, `queued`, ...).
    pub fn as_str(&self) -> &str {
        match self {
            Self::Queued => "queued",
            Self::Saving => "saving",
            Self::Uploading => "uploading",
            Self::Importing => "importing",
            Self::Active => "active",
            Self::Killed => "killed",
            Self::Deleted => "deleted",
            Self::PendingDelete => "pending_delete",
            Self::Deactivated => "deactivated",
            Self::Other(s) => s,
        }
    }
}

impl std::fmt::Display for ImageStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A Glance image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    /// Image ID.
    pub id: String,
    /// Name (not unique in Glance).
    pub name: String,
    /// Status.
    pub status: ImageStatus,
    /// `public`, `private`, `shared` or `community`.
    pub visibility: String,
    /// Protected images cannot be deleted.
    pub protected: bool,
    /// Tags.
    pub tags: Vec<String>,
    /// Non-core attributes (user properties such as `os_distro`), as strings.
    pub properties: BTreeMap<String, String>,
    /// Owner project.
    pub owner: Option<String>,
    /// Legacy md5 checksum.
    pub checksum: Option<String>,
    /// Size in bytes.
    pub size: Option<u64>,
    /// Multihash algorithm (e.g. `sha512`).
    pub os_hash_algo: Option<String>,
    /// Multihash value.
    pub os_hash_value: Option<String>,
    /// Disk format (`qcow2`, `raw`, ...).
    pub disk_format: Option<String>,
    /// Container format (`bare`, ...).
    pub container_format: Option<String>,
    /// Stores where the last import failed (`os_glance_failed_import`).
    pub failed_import_stores: Vec<String>,
    /// Stores an import is still writing to (`os_glance_importing_to_stores`).
    pub importing_to_stores: Vec<String>,
}

/// Request to create an image record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageCreate {
    /// Name.
    pub name: String,
    /// Disk format.
    pub disk_format: String,
    /// Container format.
    pub container_format: String,
    /// Visibility; `None` keeps Glance's default (`shared`).
    pub visibility: Option<String>,
    /// Protected flag.
    pub protected: bool,
    /// Tags.
    pub tags: Vec<String>,
    /// Extra properties, sent as top-level image attributes.
    pub properties: BTreeMap<String, String>,
}

/// One JSON-patch operation on an image
/// (`application/openstack-images-v2.1-json-patch`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum ImagePatchOp {
    /// Add an attribute (replaces if it already exists).
    Add {
        /// JSON pointer, e.g. `/os_distro`.
        path: String,
        /// New value.
        value: serde_json::Value,
    },
    /// Replace an existing attribute.
    Replace {
        /// JSON pointer.
        path: String,
        /// New value.
        value: serde_json::Value,
    },
    /// Remove an attribute.
    Remove {
        /// JSON pointer.
        path: String,
    },
}

impl ImagePatchOp {
    /// Set (add or overwrite) a user property.
    pub fn set_property(key: &str, value: &str) -> Self {
        Self::Add {
            path: format!("/{}", escape_pointer(key)),
            value: serde_json::Value::String(value.to_string()),
        }
    }

    /// Remove a user property.
    pub fn remove_property(key: &str) -> Self {
        Self::Remove {
            path: format!("/{}", escape_pointer(key)),
        }
    }

    /// Replace the whole tag list.
    pub fn set_tags(tags: &[String]) -> Self {
        Self::Replace {
            path: "/tags".into(),
            value: serde_json::Value::from(tags.to_vec()),
        }
    }

    /// Set the visibility.
    pub fn set_visibility(visibility: &str) -> Self {
        Self::Replace {
            path: "/visibility".into(),
            value: serde_json::Value::String(visibility.to_string()),
        }
    }

    /// Set the protected flag.
    pub fn set_protected(protected: bool) -> Self {
        Self::Replace {
            path: "/protected".into(),
            value: serde_json::Value::Bool(protected),
        }
    }
}

/// Escape a key for use as one JSON-pointer segment (RFC 6901).
fn escape_pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

// ---------------------------------------------------------------------------
// Network (Neutron)
// ---------------------------------------------------------------------------

/// A Neutron network.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Network {
    /// Network ID.
    pub id: String,
    /// Name (not unique).
    pub name: String,
    /// Description.
    pub description: String,
    /// Owning project.
    pub project_id: String,
    /// `ACTIVE`, `DOWN`, ...
    pub status: String,
    /// Administrative state.
    pub admin_state_up: bool,
    /// Shared with all projects.
    pub shared: bool,
    /// `router:external`.
    pub external: bool,
    /// `provider:network_type` (admin only).
    pub provider_network_type: Option<String>,
    /// `provider:physical_network` (admin only).
    pub provider_physical_network: Option<String>,
    /// `provider:segmentation_id` (admin only).
    pub provider_segmentation_id: Option<i64>,
    /// MTU.
    pub mtu: Option<u32>,
    /// IDs of the subnets on this network.
    pub subnet_ids: Vec<String>,
    /// Tags.
    pub tags: Vec<String>,
}

/// Request to create a network.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkCreate {
    /// Name.
    pub name: String,
    /// Description.
    pub description: Option<String>,
    /// Owning project (admin may create for another project).
    pub project_id: Option<String>,
    /// Shared flag.
    pub shared: Option<bool>,
    /// `router:external`.
    pub external: Option<bool>,
    /// `provider:network_type` (`flat`, `vlan`, `vxlan`, ...).
    pub provider_network_type: Option<String>,
    /// `provider:physical_network`.
    pub provider_physical_network: Option<String>,
    /// `provider:segmentation_id`.
    pub provider_segmentation_id: Option<i64>,
    /// Administrative state; `None` = service default (up).
    pub admin_state_up: Option<bool>,
    /// MTU.
    pub mtu: Option<u32>,
    /// Tags set at creation.
    pub tags: Vec<String>,
}

/// Partial update of a network.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkUpdate {
    /// New name.
    pub name: Option<String>,
    /// New description.
    pub description: Option<String>,
    /// New shared flag.
    pub shared: Option<bool>,
    /// New `router:external`.
    pub external: Option<bool>,
    /// New administrative state.
    pub admin_state_up: Option<bool>,
    /// New MTU.
    pub mtu: Option<u32>,
}

/// Filter for listing networks; all set fields must match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkFilter {
    /// Exact name.
    pub name: Option<String>,
    /// Owning project.
    pub project_id: Option<String>,
    /// Must carry all of these tags.
    pub tags: Vec<String>,
    /// `router:external`.
    pub external: Option<bool>,
    /// Shared flag.
    pub shared: Option<bool>,
}

/// One allocation pool of a subnet.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AllocationPool {
    /// First address.
    pub start: String,
    /// Last address.
    pub end: String,
}

/// A Neutron subnet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subnet {
    /// Subnet ID.
    pub id: String,
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Network it belongs to.
    pub network_id: String,
    /// Owning project.
    pub project_id: String,
    /// 4 or 6.
    pub ip_version: u8,
    /// CIDR.
    pub cidr: String,
    /// Gateway address; `None` when the subnet has no gateway.
    pub gateway_ip: Option<String>,
    /// DHCP enabled.
    pub enable_dhcp: bool,
    /// DNS servers.
    pub dns_nameservers: Vec<String>,
    /// Allocation pools.
    pub allocation_pools: Vec<AllocationPool>,
    /// IPv6 RA mode.
    pub ipv6_ra_mode: Option<String>,
    /// IPv6 address mode.
    pub ipv6_address_mode: Option<String>,
    /// Tags.
    pub tags: Vec<String>,
}

/// How to set a subnet's gateway.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GatewayIp {
    /// Let Neutron choose (first address of the CIDR).
    #[default]
    Default,
    /// No gateway (`gateway_ip: null`).
    Disabled,
    /// This address.
    Address(String),
}

/// Request to create a subnet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubnetCreate {
    /// Network to create it on.
    pub network_id: String,
    /// Name.
    pub name: String,
    /// Description.
    pub description: Option<String>,
    /// 4 or 6.
    pub ip_version: u8,
    /// CIDR.
    pub cidr: String,
    /// Gateway.
    pub gateway: GatewayIp,
    /// DHCP; `None` = service default (enabled).
    pub enable_dhcp: Option<bool>,
    /// DNS servers.
    pub dns_nameservers: Vec<String>,
    /// Allocation pools; empty = whole CIDR.
    pub allocation_pools: Vec<AllocationPool>,
    /// IPv6 RA mode (`slaac`, `dhcpv6-stateful`, `dhcpv6-stateless`).
    pub ipv6_ra_mode: Option<String>,
    /// IPv6 address mode.
    pub ipv6_address_mode: Option<String>,
    /// Owning project.
    pub project_id: Option<String>,
    /// Tags set at creation.
    pub tags: Vec<String>,
}

/// Partial update of a subnet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubnetUpdate {
    /// New name.
    pub name: Option<String>,
    /// New description.
    pub description: Option<String>,
    /// New gateway (`Default` is not meaningful here and is ignored).
    pub gateway: Option<GatewayIp>,
    /// New DHCP flag.
    pub enable_dhcp: Option<bool>,
    /// Replacement DNS server list.
    pub dns_nameservers: Option<Vec<String>>,
    /// Replacement allocation pools.
    pub allocation_pools: Option<Vec<AllocationPool>>,
}

/// Filter for listing subnets.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubnetFilter {
    /// Network.
    pub network_id: Option<String>,
    /// Exact name.
    pub name: Option<String>,
    /// Owning project.
    pub project_id: Option<String>,
    /// Must carry all of these tags.
    pub tags: Vec<String>,
}

/// A fixed IP on a port or router gateway.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FixedIp {
    /// Subnet of the address.
    pub subnet_id: Option<String>,
    /// The address.
    pub ip_address: Option<String>,
}

/// A router's external gateway as reported by Neutron.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExternalGateway {
    /// External network.
    pub network_id: String,
    /// Source NAT enabled (admin-visible).
    pub enable_snat: Option<bool>,
    /// Addresses on the external network.
    pub external_fixed_ips: Vec<FixedIp>,
}

/// A Neutron router.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Router {
    /// Router ID.
    pub id: String,
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Owning project.
    pub project_id: String,
    /// Status.
    pub status: String,
    /// Administrative state.
    pub admin_state_up: bool,
    /// External gateway, if set.
    pub external_gateway: Option<ExternalGateway>,
    /// Tags.
    pub tags: Vec<String>,
}

/// Desired router gateway in a create/update request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExternalGatewayRequest {
    /// External network.
    pub network_id: String,
    /// Source NAT; `None` = service default.
    pub enable_snat: Option<bool>,
    /// Requested addresses; empty = any.
    pub external_fixed_ips: Vec<FixedIp>,
}

/// Request to create a router.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouterCreate {
    /// Name.
    pub name: String,
    /// Description.
    pub description: Option<String>,
    /// Owning project.
    pub project_id: Option<String>,
    /// Gateway.
    pub external_gateway: Option<ExternalGatewayRequest>,
    /// Tags set at creation.
    pub tags: Vec<String>,
}

/// Partial update of a router.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouterUpdate {
    /// New name.
    pub name: Option<String>,
    /// New description.
    pub description: Option<String>,
    /// `Some(None)` clears the gateway, `Some(Some(g))` sets it.
    pub external_gateway: Option<Option<ExternalGatewayRequest>>,
}

/// Filter for listing routers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouterFilter {
    /// Exact name.
    pub name: Option<String>,
    /// Owning project.
    pub project_id: Option<String>,
    /// Must carry all of these tags.
    pub tags: Vec<String>,
}

/// Result of attaching a subnet to a router.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouterInterface {
    /// Router.
    pub router_id: String,
    /// Subnet attached.
    pub subnet_id: String,
    /// The interface port.
    pub port_id: String,
}

/// A port that is an interface of a router (`network:router_interface*`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouterPort {
    /// Port ID.
    pub port_id: String,
    /// Network of the port.
    pub network_id: String,
    /// Addresses (with their subnets).
    pub fixed_ips: Vec<FixedIp>,
    /// `device_owner`.
    pub device_owner: String,
}

/// A Neutron security group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecurityGroup {
    /// Group ID.
    pub id: String,
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Owning project.
    pub project_id: String,
    /// Rules as returned with the group.
    pub rules: Vec<SecurityGroupRule>,
    /// Tags.
    pub tags: Vec<String>,
}

/// Request to create a security group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecurityGroupCreate {
    /// Name.
    pub name: String,
    /// Description.
    pub description: Option<String>,
    /// Owning project.
    pub project_id: Option<String>,
    /// Tags set at creation.
    pub tags: Vec<String>,
}

/// Partial update of a security group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecurityGroupUpdate {
    /// New name.
    pub name: Option<String>,
    /// New description.
    pub description: Option<String>,
}

/// Filter for listing security groups.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecurityGroupFilter {
    /// Exact name.
    pub name: Option<String>,
    /// Owning project.
    pub project_id: Option<String>,
    /// Must carry all of these tags.
    pub tags: Vec<String>,
}

/// A security group rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecurityGroupRule {
    /// Rule ID.
    pub id: String,
    /// Group it belongs to.
    pub security_group_id: String,
    /// `ingress` or `egress`.
    pub direction: String,
    /// `IPv4` or `IPv6`.
    pub ethertype: String,
    /// Protocol (`tcp`, `udp`, `icmp`, a number); `None` = any.
    pub protocol: Option<String>,
    /// Lower port (or ICMP type).
    pub port_range_min: Option<i32>,
    /// Upper port (or ICMP code).
    pub port_range_max: Option<i32>,
    /// Remote CIDR.
    pub remote_ip_prefix: Option<String>,
    /// Remote security group.
    pub remote_group_id: Option<String>,
    /// Description.
    pub description: String,
    /// Owning project.
    pub project_id: String,
}

/// Request to create a security group rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecurityGroupRuleCreate {
    /// Group to add the rule to.
    pub security_group_id: String,
    /// `ingress` or `egress`.
    pub direction: String,
    /// `IPv4` or `IPv6`.
    pub ethertype: String,
    /// Protocol; `None` = any.
    pub protocol: Option<String>,
    /// Lower port.
    pub port_range_min: Option<i32>,
    /// Upper port.
    pub port_range_max: Option<i32>,
    /// Remote CIDR.
    pub remote_ip_prefix: Option<String>,
    /// Remote security group.
    pub remote_group_id: Option<String>,
    /// Description.
    pub description: Option<String>,
    /// Owning project.
    pub project_id: Option<String>,
}

/// Neutron resource kinds that carry tags.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaggedResource {
    /// `/v2.0/networks`.
    Network,
    /// `/v2.0/subnets`.
    Subnet,
    /// `/v2.0/routers`.
    Router,
    /// `/v2.0/security-groups`.
    SecurityGroup,
}

impl TaggedResource {
    /// The collection path segment (`networks`, `security-groups`, ...).
    pub fn collection(self) -> &'static str {
        match self {
            Self::Network => "networks",
            Self::Subnet => "subnets",
            Self::Router => "routers",
            Self::SecurityGroup => "security-groups",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapping_whose_rules_are_not_a_list_does_not_decode() {
        // What used to be refused in the merge ("refusing to overwrite them"): now the read
        // fails, so the batch writes nothing.
        let m: Mapping = serde_json::from_str(
            r#"{"id": "m", "rules": [ {"local": [], "remote": [ {"type": "t"} ]} ], "links": {}}"#,
        )
        .unwrap();
        assert_eq!(m.rules.len(), 1);
        assert_eq!(
            m.rules.as_slice()[0].get(),
            r#"{"local": [], "remote": [ {"type": "t"} ]}"#,
            "kept as Keystone wrote it"
        );
        assert!(serde_json::from_str::<Mapping>(r#"{"id": "m", "rules": {"x": 1}}"#).is_err());
        let a = MappingRules::from_values(&[serde_json::json!({"a": 1})]).unwrap();
        assert_eq!(a, a.clone());
        assert_ne!(a, MappingRules::default());
    }

    #[test]
    fn image_status_round_trips() {
        for s in ["queued", "importing", "active", "killed", "weird"] {
            let st = ImageStatus::from(s.to_string());
            assert_eq!(String::from(st), s);
        }
        assert_eq!(ImageStatus::from("active".to_string()), ImageStatus::Active);
    }

    #[test]
    fn patch_ops_serialize_like_glance_expects() {
        let ops = vec![
            ImagePatchOp::set_property("os_distro", "ubuntu"),
            ImagePatchOp::remove_property("a/b"),
            ImagePatchOp::set_tags(&["x".to_string()]),
            ImagePatchOp::set_protected(true),
        ];
        let v = serde_json::to_value(&ops).unwrap_or_default();
        assert_eq!(
            v,
            serde_json::json!([
                {"op": "add", "path": "/os_distro", "value": "ubuntu"},
                {"op": "remove", "path": "/a~1b"},
                {"op": "replace", "path": "/tags", "value": ["x"]},
                {"op": "replace", "path": "/protected", "value": true},
            ])
        );
    }
}
