//! `Placement`: the resource-provider inventory Nova schedules against. A small service on
//! the shared pipeline: database, db sync, its service user and catalog entry, the API.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::common::{DatabaseRef, ExternalServiceRef, KeystoneRef, ServiceTemplate};
use crate::status::ServiceStatus;

/// Desired state of a Placement deployment.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "controlplane.sunet.se",
    version = "v1alpha1",
    kind = "Placement",
    plural = "placements",
    singular = "placement",
    namespaced,
    doc = "OpenStack Placement: database, db sync Job, service user and catalog entry, the API Deployment and Service.",
    status = "ServiceStatus",
    printcolumn = r#"{"name":"Release","type":"string","jsonPath":".spec.release"}"#,
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Endpoint","type":"string","jsonPath":".status.endpoint","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct PlacementSpec {
    /// OpenStack release (the configuration and Jobs are rendered for it). Default `2026.1`.
    #[serde(default = "default_release")]
    #[schemars(length(min = 1, max = 16))]
    pub release: String,
    /// Replicas, image, resources, placement and config overrides.
    #[serde(flatten)]
    pub template: ServiceTemplate,
    /// The database Placement keeps its data in (names default to `placement`).
    pub database: DatabaseRef,
    /// The Keystone Placement registers in and validates tokens with.
    pub keystone: KeystoneRef,
    /// A `cache` external service (memcached) for keystonemiddleware's token cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<ExternalServiceRef>,
    /// Public URL of the placement API in the catalog. Default: the in-cluster Service URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    #[x_kube(validation = kube::core::Rule::new("isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''").message("publicEndpoint must be an absolute http:// or https:// URL"))]
    pub public_endpoint: Option<String>,
}

fn default_release() -> String {
    crate::DEFAULT_RELEASE.into()
}
