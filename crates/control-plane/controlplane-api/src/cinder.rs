//! `Cinder`: block storage. API, scheduler and volume service on the shared pipeline, with
//! the volume backends (Ceph RBD, NFS) typed in the spec.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::common::{DatabaseRef, ExternalServiceRef, KeystoneRef, SecretKeyRef, ServiceTemplate};
use crate::status::ServiceStatus;

/// Desired state of a Cinder deployment.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "controlplane.sunet.se",
    version = "v1alpha1",
    kind = "Cinder",
    plural = "cinders",
    singular = "cinder",
    namespaced,
    doc = "OpenStack Cinder: API, scheduler and volume Deployments with the spec's backends (Ceph RBD, NFS); database, db sync and online migration Jobs; service user and catalog entries (block-storage, volumev3).",
    status = "ServiceStatus",
    printcolumn = r#"{"name":"Release","type":"string","jsonPath":".spec.release"}"#,
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Endpoint","type":"string","jsonPath":".status.endpoint","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct CinderSpec {
    /// OpenStack release (the configuration and Jobs are rendered for it). Default `2026.1`.
    #[serde(default = "default_release")]
    #[schemars(length(min = 1, max = 16))]
    pub release: String,
    /// Replicas (of the API and scheduler; the volume service runs one replica per backend
    /// set), image, resources, placement and `cinder.conf` overrides (a backend's own section
    /// takes the driver options of `[backend_defaults]`).
    #[serde(flatten)]
    pub template: ServiceTemplate,
    /// The database Cinder keeps its data in (names default to `cinder`).
    pub database: DatabaseRef,
    /// The `messaging` external service (RabbitMQ) between API, scheduler and volume service.
    pub messaging: ExternalServiceRef,
    /// The Keystone Cinder registers in and validates tokens with.
    pub keystone: KeystoneRef,
    /// A `cache` external service (memcached) for keystonemiddleware's token cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<ExternalServiceRef>,
    /// The volume backends, each a section of `cinder.conf` and a `volume_backend_name`.
    #[schemars(length(min = 1, max = 16))]
    pub backends: Vec<CinderBackend>,
    /// Public URL of the block-storage API in the catalog (without `/v3`). Default: the
    /// in-cluster Service URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    #[x_kube(validation = kube::core::Rule::new("isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''").message("publicEndpoint must be an absolute http:// or https:// URL"))]
    pub public_endpoint: Option<String>,
    /// Availability zones, in order (the first is the default): one volume Deployment `<name>-volume-<zone>`
    /// per zone, its pods on the zone's nodes, its volumes in the zone. Set by the
    /// `OpenStackCluster` from its own list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = kube::core::Rule::new(crate::zones::UNIQUE_NAMES_RULE).message("availabilityZones must not repeat a name"))]
    pub availability_zones: Vec<crate::zones::AvailabilityZone>,
}

/// One volume backend: exactly one of `rbd` and `nfs`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("has(self.rbd) != has(self.nfs)").message("a backend is exactly one of rbd and nfs"))]
pub struct CinderBackend {
    /// The backend's name: its `cinder.conf` section and `volume_backend_name` (what volume
    /// types select). Volumes record it, so renaming a backend orphans its volumes.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// A Ceph RBD pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rbd: Option<RbdBackend>,
    /// NFS shares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nfs: Option<NfsBackend>,
    /// The availability zone whose volume service alone serves the backend (storage local to
    /// a zone). Default: every zone's volume service serves it, each under its own host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32))]
    pub availability_zone: Option<String>,
}

/// A Ceph RBD backend.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RbdBackend {
    /// RADOS pool the volumes are images in.
    #[schemars(length(min = 1, max = 128))]
    pub pool: String,
    /// Ceph client name without `client.`, e.g. `cinder`.
    #[schemars(length(min = 1, max = 128))]
    pub user: String,
    /// The cluster's client configuration (`ceph.conf` text with at least `mon host`); the
    /// operator adds the keyring's location.
    #[schemars(length(min = 1, max = 16384))]
    pub ceph_conf: String,
    /// The Secret key holding the keyring of `client.<user>` (mounted, never rendered).
    pub keyring_secret: SecretKeyRef,
    /// UUID of the libvirt secret holding the same key on the compute nodes.
    #[schemars(length(min = 1, max = 64))]
    pub secret_uuid: String,
}

/// An NFS backend (cinder-volume mounts the shares: its pods need the privileges to).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct NfsBackend {
    /// Shares, `host:/export` each.
    #[schemars(length(min = 1, max = 64), inner(length(min = 3, max = 512)))]
    pub shares: Vec<String>,
    /// Options for `mount -t nfs -o`, e.g. `vers=4.1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub mount_options: Option<String>,
}

fn default_release() -> String {
    crate::DEFAULT_RELEASE.into()
}
