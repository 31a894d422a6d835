//! `Keystone`: the identity service. The first service kind; the others (Glance, Placement,
//! Nova, Neutron, Cinder, Horizon) take the same [`ServiceTemplate`] and [`ServiceStatus`] and
//! run through the same pipeline (dependencies → validate → render → Jobs → Deployment →
//! probe → status).

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::common::{ExternalServiceRef, SecretKeyRef, ServiceTemplate};
use crate::status::ServiceStatus;

/// Desired state of a Keystone deployment.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "controlplane.sunet.se",
    version = "v1alpha1",
    kind = "Keystone",
    plural = "keystones",
    singular = "keystone",
    shortname = "ks",
    namespaced,
    doc = "OpenStack Identity (Keystone): database, fernet and credential keys, db_sync and bootstrap Jobs, the API Deployment and Service.",
    status = "ServiceStatus",
    printcolumn = r#"{"name":"Release","type":"string","jsonPath":".spec.release"}"#,
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Endpoint","type":"string","jsonPath":".status.endpoint","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct KeystoneSpec {
    /// OpenStack release (the configuration and Jobs are rendered for it). Default `2026.1`.
    #[serde(default = "default_release")]
    #[schemars(length(min = 1, max = 16))]
    pub release: String,
    /// Replicas, image, resources, placement and config overrides.
    #[serde(flatten)]
    pub template: ServiceTemplate,
    /// The database Keystone keeps its data in.
    pub database: DatabaseSpec,
    /// A `cache` external service (memcached) for Keystone's caches; none disables caching.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<ExternalServiceRef>,
    /// Region of the identity endpoints in the catalog. Default `RegionOne`.
    #[serde(default = "default_region")]
    #[schemars(length(min = 1, max = 64))]
    pub region: String,
    /// Public URL of the identity API in the catalog, e.g. `https://keystone.cloud.example.org`.
    /// Default: the in-cluster Service URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    #[x_kube(validation = kube::core::Rule::new("isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''").message("publicEndpoint must be an absolute http:// or https:// URL"))]
    pub public_endpoint: Option<String>,
    /// The admin password to bootstrap with, from an existing Secret. Default: a random
    /// password generated into the Secret `<name>-keystone-admin`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_password_secret: Option<SecretKeyRef>,
    /// Token lifetime and fernet key rotation.
    #[serde(default)]
    pub tokens: TokenSettings,
    /// Rotation of the keys that encrypt stored credentials.
    #[serde(default)]
    pub credential_keys: CredentialKeySettings,
}

/// Where Keystone's database lives.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseSpec {
    /// The `database` external service.
    pub service: ExternalServiceRef,
    /// Database (schema) name. Default `keystone`.
    #[serde(default = "default_db_name")]
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z0-9_]+$"))]
    pub database_name: String,
    /// Database user Keystone connects as (created by the operator). Default `keystone`.
    #[serde(default = "default_db_name")]
    #[schemars(length(min = 1, max = 32), regex(pattern = r"^[A-Za-z0-9_]+$"))]
    pub username: String,
}

/// Token lifetime and fernet key rotation. The number of fernet keys kept is derived from them
/// (`(expiration + allowExpiredWindow) / rotationInterval + 2`, rounded up), so a rotation never
/// drops a key a live token was signed with.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("(self.expirationSeconds + self.allowExpiredWindowSeconds) / self.fernetRotationIntervalSeconds <= 60").message("tokens: (expirationSeconds + allowExpiredWindowSeconds) / fernetRotationIntervalSeconds must be at most 60 (more keys than Keystone handles well); rotate less often"))]
pub struct TokenSettings {
    /// Token lifetime in seconds (`[token] expiration`). Default 3600.
    #[serde(default = "default_expiration")]
    #[schemars(range(min = 60, max = 604800))]
    pub expiration_seconds: i64,
    /// How long after expiry a token can still be fetched with `allow_expired`
    /// (`[token] allow_expired_window`). Default 172800 (Keystone's).
    #[serde(default = "default_allow_expired")]
    #[schemars(range(min = 0, max = 2592000))]
    pub allow_expired_window_seconds: i64,
    /// Seconds between fernet key rotations. Default 86400.
    #[serde(default = "default_rotation")]
    #[schemars(range(min = 60, max = 31536000))]
    pub fernet_rotation_interval_seconds: i64,
}

impl Default for TokenSettings {
    fn default() -> Self {
        TokenSettings {
            expiration_seconds: default_expiration(),
            allow_expired_window_seconds: default_allow_expired(),
            fernet_rotation_interval_seconds: default_rotation(),
        }
    }
}

impl TokenSettings {
    /// Fernet keys to keep: staged + primary + enough secondaries to cover a token's lifetime
    /// and its allow-expired window (Keystone's documented formula, rounded up).
    pub fn max_active_keys(&self) -> u32 {
        let window = self.expiration_seconds.max(0) + self.allow_expired_window_seconds.max(0);
        let interval = self.fernet_rotation_interval_seconds.max(1);
        let rotations = (window + interval - 1) / interval;
        u32::try_from(rotations + 2).unwrap_or(u32::MAX)
    }
}

/// Rotation of the credential encryption keys (`[credential] key_repository`: the keys that
/// encrypt the rows of the credential table, i.e. EC2 and TOTP secrets). Keystone keeps three
/// of them (staged, primary, one secondary), so a rotation is only safe once every credential
/// is encrypted with the primary: the operator rotates only after its `credential-migrate`
/// Job (`keystone-manage credential_migrate`) succeeded for the current keys, and runs that
/// Job only once the current keys have reached every pod.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("self.rotationIntervalSeconds == 0 || self.rotationIntervalSeconds >= 3600").message("credentialKeys.rotationIntervalSeconds must be 0 (never on schedule) or at least 3600"))]
pub struct CredentialKeySettings {
    /// Seconds between rotations of the credential keys; 0 rotates only on request (the
    /// annotation `controlplane.sunet.se/rotate-credential-keys` set to a new value).
    /// Default 2592000 (30 days).
    #[serde(default = "default_credential_rotation")]
    #[schemars(range(min = 0, max = 31536000))]
    pub rotation_interval_seconds: i64,
}

impl Default for CredentialKeySettings {
    fn default() -> Self {
        CredentialKeySettings {
            rotation_interval_seconds: default_credential_rotation(),
        }
    }
}

impl CredentialKeySettings {
    /// The rotation interval, `None` when rotation happens only on request.
    pub fn interval(&self) -> Option<std::time::Duration> {
        u64::try_from(self.rotation_interval_seconds)
            .ok()
            .filter(|s| *s > 0)
            .map(std::time::Duration::from_secs)
    }
}

fn default_credential_rotation() -> i64 {
    2_592_000
}

fn default_release() -> String {
    crate::DEFAULT_RELEASE.into()
}
fn default_region() -> String {
    "RegionOne".into()
}
fn default_db_name() -> String {
    "keystone".into()
}
fn default_expiration() -> i64 {
    3600
}
fn default_allow_expired() -> i64 {
    172_800
}
fn default_rotation() -> i64 {
    86_400
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_count_covers_token_lifetime_and_allow_expired_window() {
        let t = TokenSettings::default();
        // 3600 + 172800 = 176400 s over 86400 s rotations: 3 rotations (rounded up) + 2.
        assert_eq!(t.max_active_keys(), 5);
        let t = TokenSettings {
            expiration_seconds: 3600,
            allow_expired_window_seconds: 0,
            fernet_rotation_interval_seconds: 3600,
        };
        assert_eq!(t.max_active_keys(), 3);
        let t = TokenSettings {
            expiration_seconds: 3601,
            allow_expired_window_seconds: 0,
            fernet_rotation_interval_seconds: 3600,
        };
        assert_eq!(t.max_active_keys(), 4);
    }
}
