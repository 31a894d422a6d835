//! `OpenStackExternalService`: a database, message queue, cache, object store or OVN database
//! the control plane uses but does not deploy. The operator checks it for real and gates the
//! services that need it on its `Ready`.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::common::ControlPlaneStatus;

/// The five kinds of dependency.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum ServiceKind {
    /// MariaDB/MySQL.
    Database,
    /// RabbitMQ (AMQP).
    Messaging,
    /// Memcached.
    Cache,
    /// An S3-compatible object store.
    ObjectStorage,
    /// OVN northbound/southbound databases.
    Ovn,
}

impl std::fmt::Display for ServiceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ServiceKind::Database => "database",
            ServiceKind::Messaging => "messaging",
            ServiceKind::Cache => "cache",
            ServiceKind::ObjectStorage => "objectStorage",
            ServiceKind::Ovn => "ovn",
        })
    }
}

/// Desired state of an external service reference.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "controlplane.sunet.se",
    version = "v1alpha1",
    kind = "OpenStackExternalService",
    plural = "openstackexternalservices",
    singular = "openstackexternalservice",
    shortname = "osext",
    namespaced,
    doc = "A dependency of the control plane (database, messaging, cache, objectStorage, ovn) that is referenced and checked, never deployed.",
    status = "ControlPlaneStatus",
    printcolumn = r#"{"name":"Type","type":"string","jsonPath":".spec.type"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Endpoints","type":"string","jsonPath":".spec.endpoints","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct OpenStackExternalServiceSpec {
    /// What the service is.
    #[serde(rename = "type")]
    pub type_: ServiceKind,
    /// Where it listens: `host:port`, or a URL (`https://s3.example.org`, `ssl:ovn-nb:6641`).
    /// The first reachable one is used.
    #[schemars(length(min = 1, max = 16))]
    #[schemars(inner(
        length(min = 1, max = 512),
        regex(
            pattern = r"^([a-z][a-z0-9+.-]*://[^\s/?#]+([/?#]\S*)?|(tcp|ssl):[^\s:]+:[0-9]{1,5}|[^\s:/]+:[0-9]{1,5}|\[[0-9a-fA-F:.]+\]:[0-9]{1,5})$"
        )
    ))]
    pub endpoints: Vec<String>,
    /// The Secret with the credentials to check the service with (for a database: an account
    /// allowed to create databases and users for the services).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<CredentialsRef>,
    /// TLS towards the service. Without it, plain connections are used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSpec>,
    /// Type-specific settings, e.g. `region` and `bucket` for objectStorage, `vhost` for messaging.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 16))]
    pub extra: BTreeMap<String, String>,
}

/// Which Secret, and which keys of it, hold the credentials.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialsRef {
    /// Secret name (same namespace).
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: String,
    /// Key holding the user name. Default `username`.
    #[serde(default = "default_username_key")]
    #[schemars(length(min = 1, max = 253))]
    pub username_key: String,
    /// Key holding the password (for objectStorage: the secret access key). Default `password`.
    #[serde(default = "default_password_key")]
    #[schemars(length(min = 1, max = 253))]
    pub password_key: String,
}

fn default_username_key() -> String {
    "username".into()
}
fn default_password_key() -> String {
    "password".into()
}

/// How a TLS peer is verified.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema,
)]
pub enum VerifyMode {
    /// Chain to the CA bundle and the host name.
    #[default]
    Full,
    /// Chain to the CA bundle only (for endpoints addressed by IP or an alias).
    CaOnly,
    /// Encrypt without verifying (tests only; reported in status).
    Insecure,
}

/// TLS settings. A CA bundle is required: trusting the system roots implicitly hides
/// misconfiguration.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TlsSpec {
    /// Secret key holding the PEM CA bundle that signs the service's certificate.
    pub ca_secret: CaSecretRef,
    /// A `kubernetes.io/tls` Secret (`tls.crt`, `tls.key`) with a client certificate, when the
    /// service asks for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert_secret: Option<ClientCertRef>,
    /// Verification of the server. Default `Full`.
    #[serde(default)]
    pub verify: VerifyMode,
    /// The DNS name the server's certificate must carry, when the endpoints are addresses the
    /// certificate does not name (an IP, a relay, a load balancer). With `verify: Full` the
    /// operator's checks and every client that can set the expected name verify against it;
    /// see docs/control-plane.md for the clients that cannot (they verify the chain only, or
    /// the service is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    #[schemars(regex(
        pattern = r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
    ))]
    pub server_name: Option<String>,
}

/// The Secret holding a CA bundle.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CaSecretRef {
    /// Secret name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key of the PEM bundle. Default `ca.crt`.
    #[serde(default = "default_ca_key")]
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

fn default_ca_key() -> String {
    "ca.crt".into()
}

/// A client certificate Secret.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientCertRef {
    /// Secret name (keys `tls.crt` and `tls.key`).
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}
