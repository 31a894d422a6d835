//! `OpenStackCluster`: the composition. It names the release, the services to run, their
//! templates and the external services they use, and creates and owns one CR per service.

use std::collections::BTreeMap;

use api::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::common::{ExternalServiceRef, ServiceTemplate};

/// The OpenStack services the operator knows.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum ServiceName {
    /// Identity.
    Keystone,
    /// Image.
    Glance,
    /// Placement.
    Placement,
    /// Compute.
    Nova,
    /// Networking.
    Neutron,
    /// Block storage.
    Cinder,
    /// Dashboard.
    Horizon,
}

impl ServiceName {
    /// Lower-case name, as used in object names and the hostname pattern.
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceName::Keystone => "keystone",
            ServiceName::Glance => "glance",
            ServiceName::Placement => "placement",
            ServiceName::Nova => "nova",
            ServiceName::Neutron => "neutron",
            ServiceName::Cinder => "cinder",
            ServiceName::Horizon => "horizon",
        }
    }

    /// The kind of the per-service CR.
    pub fn kind(self) -> &'static str {
        match self {
            ServiceName::Keystone => "Keystone",
            ServiceName::Glance => "Glance",
            ServiceName::Placement => "Placement",
            ServiceName::Nova => "Nova",
            ServiceName::Neutron => "Neutron",
            ServiceName::Cinder => "Cinder",
            ServiceName::Horizon => "Horizon",
        }
    }

    /// The image a service runs when its template names none: the name `scripts/build-images`
    /// gives the image it builds for the release.
    pub fn default_image(self, release: &str) -> String {
        format!("localhost/openstack-{}:{release}", self.as_str())
    }

    /// Whether this operator version deploys the service (the others are designed: issue 19).
    pub fn implemented(self) -> bool {
        matches!(
            self,
            ServiceName::Keystone
                | ServiceName::Placement
                | ServiceName::Nova
                | ServiceName::Cinder
                | ServiceName::Glance
                | ServiceName::Neutron
                | ServiceName::Horizon
        )
    }
}

/// Desired state of an OpenStack control plane.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "controlplane.sunet.se",
    version = "v1alpha1",
    kind = "OpenStackCluster",
    plural = "openstackclusters",
    singular = "openstackcluster",
    shortname = "osc",
    namespaced,
    doc = "An OpenStack control plane: which services run, how, and on which external services; it creates and owns one CR per service and rolls their status up.",
    status = "OpenStackClusterStatus",
    printcolumn = r#"{"name":"Release","type":"string","jsonPath":".spec.release"}"#,
    printcolumn = r#"{"name":"Current","type":"string","jsonPath":".status.currentRelease"}"#,
    printcolumn = r#"{"name":"Upgrade","type":"string","jsonPath":".status.upgrade.phase","priority":1}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Message","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].message","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct OpenStackClusterSpec {
    /// OpenStack release of every service. Default `2026.1`.
    #[serde(default = "default_release")]
    #[schemars(length(min = 1, max = 16))]
    pub release: String,
    /// The services to run.
    #[schemars(length(min = 1, max = 7))]
    #[x_kube(validation = kube::core::Rule::new("self.all(s, self.exists_one(t, t == s))").message("services must not repeat a service"))]
    pub services: Vec<ServiceName>,
    /// Per-service templates, keyed by service name (`keystone`, `glance`, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 7))]
    pub templates: BTreeMap<String, ServiceTemplate>,
    /// The external services, by role.
    pub external_services: ExternalServices,
    /// Public endpoint host name of each service, with `{service}` replaced by its name, e.g.
    /// `{service}.cloud.example.org`. Default: in-cluster Service URLs only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = kube::core::Rule::new("self.contains('{service}')").message("publicHostnamePattern must contain {service}"))]
    pub public_hostname_pattern: Option<String>,
    /// Availability zones, in order; the first is the default zone (of volumes and of
    /// compute hosts in no zone). Passed to Nova and Cinder: one cinder-volume and one
    /// compute configuration and host aggregate per zone; the API pods spread over them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = kube::core::Rule::new(crate::zones::UNIQUE_NAMES_RULE).message("availabilityZones must not repeat a name"))]
    pub availability_zones: Vec<crate::zones::AvailabilityZone>,
    /// Cinder's volume backends (needed when `cinder` is in `services`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub cinder_backends: Vec<crate::cinder::CinderBackend>,
    /// How upgrades between releases run (a change of `release` to the next release starts
    /// one; see docs/upgrade.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<crate::upgrade::UpgradePolicy>,
}

/// The `OpenStackExternalService`s of the cluster, by role.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalServices {
    /// MariaDB/MySQL for every service's database.
    pub database: ExternalServiceRef,
    /// RabbitMQ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messaging: Option<ExternalServiceRef>,
    /// Memcached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<ExternalServiceRef>,
    /// S3-compatible object storage (Glance).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_storage: Option<ExternalServiceRef>,
    /// OVN northbound/southbound (Neutron).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ovn: Option<ExternalServiceRef>,
}

/// Observed state of the control plane.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenStackClusterStatus {
    /// The `metadata.generation` the status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` (roll-up naming the failing child), `Reconciling`, `Blocked`, `Degraded`,
    /// `InvalidSpec`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// One line per service.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<ServiceSummary>,
    /// The release every service runs (during an upgrade: the release upgraded from, until the
    /// upgrade completes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_release: Option<String>,
    /// The current or last upgrade: phase, step, start times, completed steps, last error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<crate::upgrade::UpgradeStatus>,
}

/// The state of one service of the cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSummary {
    /// Service name.
    pub name: String,
    /// The service CR (`Keystone/cloud-keystone`).
    pub object: String,
    /// Whether the service is Ready.
    pub ready: bool,
    /// Its Ready message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

fn default_release() -> String {
    crate::DEFAULT_RELEASE.into()
}
