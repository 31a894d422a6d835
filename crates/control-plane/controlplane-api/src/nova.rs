//! `Nova`: the compute control plane. API, metadata API, conductor, scheduler and noVNC proxy
//! on the shared pipeline: three databases (API, cell0, cell1), the cell mapping Jobs, the
//! message queue of the `messaging` external service, the service user and catalog entry, the
//! metadata secret shared with Neutron and the compute nodes' configuration.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::common::{DatabaseRef, ExternalServiceRef, KeystoneRef, ServiceTemplate};
use crate::status::ServiceStatus;

/// Desired state of a Nova control plane.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "controlplane.sunet.se",
    version = "v1alpha1",
    kind = "Nova",
    plural = "novas",
    singular = "nova",
    namespaced,
    doc = "OpenStack Nova's control plane: API, metadata API, conductor, scheduler and noVNC proxy Deployments; the API, cell0 and cell1 databases and their Jobs; the cell mappings; service user and catalog entry; the metadata proxy secret and the compute nodes' configuration in Secrets.",
    status = "ServiceStatus",
    printcolumn = r#"{"name":"Release","type":"string","jsonPath":".spec.release"}"#,
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Endpoint","type":"string","jsonPath":".status.endpoint","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NovaSpec {
    /// OpenStack release (the configuration and Jobs are rendered for it). Default `2026.1`.
    #[serde(default = "default_release")]
    #[schemars(length(min = 1, max = 16))]
    pub release: String,
    /// Replicas (of every Deployment), image, resources, placement and `nova.conf` overrides.
    #[serde(flatten)]
    pub template: ServiceTemplate,
    /// Where cell1's database lives (names default to `nova`); the API database and cell0 are
    /// `<name>_api` and `<name>_cell0` on the same service, with the same user.
    pub database: DatabaseRef,
    /// The `messaging` external service (RabbitMQ) of the control plane and the compute nodes.
    pub messaging: ExternalServiceRef,
    /// The Keystone Nova registers in and validates tokens with.
    pub keystone: KeystoneRef,
    /// The `Placement` (same namespace) Nova schedules against; Nova waits until it is Ready
    /// and calls its in-cluster Service.
    pub placement: ServiceRef,
    /// A `Glance` (same namespace) whose in-cluster Service Nova calls. Without it, Nova finds
    /// the image service through the catalog's internal endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glance: Option<ServiceRef>,
    /// A `Neutron` (same namespace) whose in-cluster Service Nova calls. Without it, Nova finds
    /// the network service through the catalog's internal endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neutron: Option<ServiceRef>,
    /// A `cache` external service (memcached) for the token cache and oslo.cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<ExternalServiceRef>,
    /// Public URL of the compute API in the catalog (without `/v2.1`). Default: the in-cluster
    /// Service URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    #[x_kube(validation = kube::core::Rule::new("isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''").message("publicEndpoint must be an absolute http:// or https:// URL"))]
    pub public_endpoint: Option<String>,
    /// Public URL of the noVNC proxy (without `/vnc_lite.html`), what users' browsers open.
    /// Default: the in-cluster Service URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    #[x_kube(validation = kube::core::Rule::new("isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''").message("vncProxyPublicEndpoint must be an absolute http:// or https:// URL"))]
    pub vnc_proxy_public_endpoint: Option<String>,
    /// Seconds between the scheduler's discoveries of new compute hosts
    /// (`discover_hosts_in_cells_interval`); `-1` never discovers (then map hosts yourself).
    /// Default 300.
    #[serde(default = "default_discover_hosts_interval")]
    #[schemars(range(min = -1, max = 86400))]
    pub discover_hosts_interval_seconds: i32,
    /// The virt driver written into the compute nodes' configuration. Default
    /// `libvirt.LibvirtDriver`.
    #[serde(default = "default_compute_driver")]
    #[schemars(length(min = 1, max = 128), regex(pattern = r"^[A-Za-z0-9_.]+$"))]
    pub compute_driver: String,
    /// Availability zones, in order (the first is the default): one compute configuration Secret
    /// `<name>-compute-config-<zone>` and one host aggregate (with the zone's `computeHosts`)
    /// per zone. Set by the
    /// `OpenStackCluster` from its own list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = kube::core::Rule::new(crate::zones::UNIQUE_NAMES_RULE).message("availabilityZones must not repeat a name"))]
    pub availability_zones: Vec<crate::zones::AvailabilityZone>,
}

/// A reference to another service CR of the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceRef {
    /// Name of the CR.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// The scheduler's default host-discovery period.
pub const DEFAULT_DISCOVER_HOSTS_INTERVAL: i32 = 300;

fn default_discover_hosts_interval() -> i32 {
    DEFAULT_DISCOVER_HOSTS_INTERVAL
}

fn default_compute_driver() -> String {
    "libvirt.LibvirtDriver".into()
}

fn default_release() -> String {
    crate::DEFAULT_RELEASE.into()
}
