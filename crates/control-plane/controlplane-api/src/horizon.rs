//! `Horizon`: the dashboard. Django settings rendered for the deployed Keystone, sessions in
//! the `cache` external service's memcached, static files collected by init containers, a
//! Deployment and a Service. No database; Ready when the login page answers 200 (Horizon has
//! no token-authenticated API to probe).

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::common::{ExternalServiceRef, KeystoneRef, ServiceTemplate};
use crate::status::ServiceStatus;

/// Desired state of a Horizon deployment.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "controlplane.sunet.se",
    version = "v1alpha1",
    kind = "Horizon",
    plural = "horizons",
    singular = "horizon",
    namespaced,
    doc = "OpenStack Dashboard (Horizon): Django settings for the deployed Keystone, memcached sessions, static files, the Deployment and Service.",
    status = "ServiceStatus",
    printcolumn = r#"{"name":"Release","type":"string","jsonPath":".spec.release"}"#,
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Endpoint","type":"string","jsonPath":".status.endpoint","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct HorizonSpec {
    /// OpenStack release. Default `2026.1`.
    #[serde(default = "default_release")]
    #[schemars(length(min = 1, max = 16))]
    pub release: String,
    /// Replicas, image, resources, placement and overrides: Horizon has no oslo.config; its
    /// overrides are Django settings in section `local_settings` (upper-case names, JSON
    /// values), e.g. `{local_settings: {SESSION_TIMEOUT: "7200"}}`.
    #[serde(flatten)]
    pub template: ServiceTemplate,
    /// The Keystone users log in to (its in-cluster endpoint from its status).
    pub keystone: KeystoneRef,
    /// A `cache` external service (memcached) holding the sessions; without one sessions are
    /// signed cookies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<ExternalServiceRef>,
    /// Public URL of the dashboard (its host is allowed; `https://` makes cookies Secure).
    /// Default: the in-cluster Service URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    #[x_kube(validation = kube::core::Rule::new("isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''").message("publicEndpoint must be an absolute http:// or https:// URL"))]
    pub public_endpoint: Option<String>,
}

fn default_release() -> String {
    crate::DEFAULT_RELEASE.into()
}
