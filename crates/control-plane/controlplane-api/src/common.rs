//! Types every control-plane kind shares: status and conditions, the per-service template and
//! references to Secrets and external services.

use std::collections::BTreeMap;

use api::Condition;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Condition types written by the control-plane controllers.
pub mod condition_types {
    /// Everything the object asks for is in place and answers.
    pub const READY: &str = "Ready";
    /// The operator is working towards the spec (rolling out, waiting for a Job).
    pub const RECONCILING: &str = "Reconciling";
    /// Something outside this object must change first (an external service, a Secret).
    pub const BLOCKED: &str = "Blocked";
    /// Something that was working or should work failed (a Job, a probe); retried.
    pub const DEGRADED: &str = "Degraded";
    /// The spec is refused; the message names the field. Nothing is touched.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// External services: the credentials Secret and its keys exist.
    pub const SECRET_RESOLVED: &str = "SecretResolved";
    /// External services: an endpoint accepted a connection.
    pub const ENDPOINT_REACHABLE: &str = "EndpointReachable";
    /// External services: the credentials were accepted.
    pub const AUTHENTICATED: &str = "Authenticated";
    /// External services: the TLS handshake and verification succeeded (or TLS is not asked for).
    pub const TLS_READY: &str = "TLSReady";
    /// Nova with availability zones: every listed compute host is registered and in its
    /// zone's aggregate. Not part of `Ready` (hypervisors join after the control plane).
    pub const ZONES_COMPLETE: &str = "ZonesComplete";
}

/// The status every control-plane kind has.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlaneStatus {
    /// The `metadata.generation` the status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Reconciling`, `Blocked`, `Degraded`, `InvalidSpec` (and the external-service
    /// sub-conditions).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl ControlPlaneStatus {
    /// Finds a condition by type.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        api::common::find_condition(&self.conditions, type_)
    }

    /// Whether `Ready` is `True` for the current generation `generation`.
    pub fn ready_at(&self, generation: Option<i64>) -> bool {
        self.observed_generation == generation
            && self
                .condition(condition_types::READY)
                .is_some_and(Condition::is_true)
    }
}

/// CPU/memory requests and limits of a service's containers (Kubernetes quantities).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    /// Requests, e.g. `{cpu: 100m, memory: 256Mi}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 8))]
    pub requests: BTreeMap<String, String>,
    /// Limits, e.g. `{memory: 1Gi}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 8))]
    pub limits: BTreeMap<String, String>,
}

/// What every OpenStack service kind accepts the same way: replicas, image, resources, node
/// placement and oslo.config overrides. `OpenStackCluster` carries one per service.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceTemplate {
    /// API replicas (0 stops the API but keeps its data and Jobs). Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub replicas: Option<i32>,
    /// Container image of the service; default: the operator's image for the release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image: Option<String>,
    /// Container resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,
    /// Node selector of the service's pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 16))]
    pub node_selector: BTreeMap<String, String>,
    /// oslo.config overrides merged over the operator's defaults: section → option → value,
    /// e.g. `{token: {expiration: "7200"}}`. Options the operator owns (database connection,
    /// key repositories) are refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    pub config_overrides: BTreeMap<String, BTreeMap<String, String>>,
    /// Serve the API over TLS (public and internal endpoints `https`). Absent: plain HTTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ApiTls>,
}

/// TLS of a service's API endpoints.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiTls {
    /// A `kubernetes.io/tls` Secret (same namespace) with `tls.crt`, `tls.key` and `ca.crt`,
    /// e.g. one cert-manager keeps renewed; its certificate must name the Service
    /// (`<name>-api.<namespace>.svc`) and any public host. Absent: the operator issues
    /// `<name>-api-tls` from the namespace CA it generates (Secret `openstack-ca`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: Option<String>,
}

/// A reference to an `OpenStackExternalService` in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalServiceRef {
    /// Name of the `OpenStackExternalService`.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// A key in a Secret of the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Secret name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key in the Secret's data.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// Where a service (other than Keystone) keeps its data: a database on a `database` external
/// service. The database and user names default to the service's name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseRef {
    /// The `database` external service.
    pub service: ExternalServiceRef,
    /// Database (schema) name. Default: the service's name (`placement`, `glance`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z0-9_]+$"))]
    pub database_name: Option<String>,
    /// Database user the service connects as (created by the operator). Default: the
    /// service's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32), regex(pattern = r"^[A-Za-z0-9_]+$"))]
    pub username: Option<String>,
}

impl DatabaseRef {
    /// The database name, `default` when the spec names none.
    pub fn database_name_or(&self, default: &str) -> String {
        self.database_name.clone().unwrap_or_else(|| default.into())
    }
    /// The user name, `default` when the spec names none.
    pub fn username_or(&self, default: &str) -> String {
        self.username.clone().unwrap_or_else(|| default.into())
    }
}

/// A reference to the `Keystone` (same namespace) a service registers in and validates tokens
/// with; the service waits until it is Ready.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeystoneRef {
    /// Name of the `Keystone`.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}
