//! `OpenstackCloud`: a second (third, ...) OpenStack cloud the operator manages resources in
//! (cluster-scoped). Resources name it in `spec.cloudRef`; without one they go to the cloud
//! the operator was started with, as every seed manifest expects.

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Condition, Phase};
use crate::validation::FieldError;

/// Desired state of a cloud: where its credentials are and who may use it.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "sunet.se",
    version = "v1alpha1",
    kind = "OpenstackCloud",
    plural = "openstackclouds",
    singular = "openstackcloud",
    shortname = "osc",
    shortname = "oscloud",
    doc = "An OpenStack cloud (a clouds.yaml entry in a Secret) that resources may name in spec.cloudRef (cluster-scoped).",
    status = "OpenstackCloudStatus",
    printcolumn = r#"{"name":"Cloud","type":"string","jsonPath":".spec.cloud"}"#,
    printcolumn = r#"{"name":"Region","type":"string","jsonPath":".spec.region"}"#,
    printcolumn = r#"{"name":"Secret","type":"string","jsonPath":".spec.secretRef.name"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct OpenstackCloudSpec {
    /// The Secret holding the `clouds.yaml`. The operator needs `get` on it (see
    /// docs/clouds.md for the RBAC).
    pub secret_ref: CloudSecretRef,
    /// The entry under `clouds:` to use.
    #[schemars(length(min = 1, max = 253))]
    pub cloud: String,
    /// Region to use (overrides the entry's `region_name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub region: Option<String>,
    /// Namespaces whose resources may name this cloud (`*`: every namespace). Namespaced
    /// resources (OpenstackProject) in other namespaces are refused; cluster-scoped ones
    /// (only cluster administrators create those) may always name it. Empty: no namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), extend("items" = {"type": "string", "maxLength": 63}))]
    pub allowed_namespaces: Vec<String>,
    /// Sustained OpenStack requests per second to this cloud; unset: the operator's
    /// `OPENSTACK_REQUESTS_PER_SECOND`. 0 disables the limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 10000))]
    pub requests_per_second: Option<u32>,
    /// OpenStack requests in flight to this cloud; unset: the operator's
    /// `OPENSTACK_MAX_CONCURRENT_CALLS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_concurrent_calls: Option<u32>,
    /// Rotate the Secret's application credential: make the next one before the current
    /// expires, write it into the Secret, delete the old one after the switch (docs/rotation.md).
    /// Unset: the credentials are left alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotation: Option<CredentialRotation>,
}

/// How an `OpenstackCloud`'s application credential is rotated.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.leadTimeSeconds < self.lifetimeSeconds").message("spec.rotation.leadTimeSeconds must be less than spec.rotation.lifetimeSeconds"))]
#[x_kube(validation = Rule::new("!has(self.drainSeconds) || self.drainSeconds < self.leadTimeSeconds").message("spec.rotation.drainSeconds must be less than spec.rotation.leadTimeSeconds (default 30)"))]
pub struct CredentialRotation {
    /// How long each new application credential lives (its Keystone `expires_at`).
    #[schemars(range(min = 30, max = 31_622_400))]
    pub lifetime_seconds: u32,
    /// How long before the current credential expires its successor is made.
    #[schemars(range(min = 10, max = 31_622_400))]
    pub lead_time_seconds: u32,
    /// How long the old credential is kept at least after the switch, for requests already
    /// under way with it (default 30); it is kept longer while a pass still holds a client
    /// made with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86_400))]
    pub drain_seconds: Option<u32>,
}

impl CredentialRotation {
    /// The drain period when unset.
    pub const DEFAULT_DRAIN_SECONDS: u32 = 30;

    /// The drain period in force.
    pub fn drain_seconds(&self) -> u32 {
        self.drain_seconds.unwrap_or(Self::DEFAULT_DRAIN_SECONDS)
    }
}

/// Where a cloud's `clouds.yaml` is.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloudSecretRef {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The Secret's namespace.
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// The key holding the `clouds.yaml` document.
    #[serde(default = "default_key")]
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

fn default_key() -> String {
    "clouds.yaml".into()
}

/// Observed state of a cloud: whether the operator could connect with its credentials.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenstackCloudStatus {
    /// `Ready` when the last connection succeeded, `Error` when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// `Ready`, with the reason a connection failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` the status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The credential rotation's state (with `spec.rotation`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotation: Option<RotationStatus>,
}

/// Where an `OpenstackCloud`'s credential rotation stands (never a secret).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RotationStatus {
    /// The name of the application credential in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<String>,
    /// When it expires (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// When the last switch to a new credential was written to the Secret (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_rotation: Option<String>,
    /// Switches made since the cloud was created.
    #[serde(default)]
    pub rotations: u32,
}

/// A resource's reference to an [`OpenstackCloud`] (`spec.cloudRef`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloudRef {
    /// The OpenstackCloud's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// The CEL rule keeping `spec.cloudRef` as it was created: moving a resource to another cloud
/// would leave its objects behind in the first one.
pub const CLOUD_REF_IMMUTABLE: &str = "has(self.cloudRef) == has(oldSelf.cloudRef) && (!has(self.cloudRef) || self.cloudRef.name == oldSelf.cloudRef.name)";

impl OpenstackCloudSpec {
    /// Whether a resource in `namespace` (None: a cluster-scoped resource) may use this cloud.
    pub fn allows(&self, namespace: Option<&str>) -> bool {
        match namespace {
            None => true,
            Some(ns) => self.allowed_namespaces.iter().any(|a| a == "*" || a == ns),
        }
    }

    /// Problems with the spec, by field.
    pub fn validate(&self) -> Vec<FieldError> {
        let mut out = Vec::new();
        let mut add = |path: &str, message: &str| {
            out.push(FieldError {
                path: path.into(),
                message: message.into(),
            })
        };
        if self.cloud.trim().is_empty() {
            add(
                "spec.cloud",
                "must name an entry under clouds: of the Secret",
            );
        }
        if self.secret_ref.name.trim().is_empty() {
            add("spec.secretRef.name", "must not be empty");
        }
        if self.secret_ref.namespace.trim().is_empty() {
            add("spec.secretRef.namespace", "must not be empty");
        }
        if self.secret_ref.key.trim().is_empty() {
            add("spec.secretRef.key", "must not be empty");
        }
        if self.region.as_deref().is_some_and(|r| r.trim().is_empty()) {
            add("spec.region", "must not be blank when set");
        }
        if let Some(r) = &self.rotation {
            if r.lifetime_seconds < 30 {
                add("spec.rotation.lifetimeSeconds", "must be at least 30");
            }
            if r.lead_time_seconds < 10 {
                add("spec.rotation.leadTimeSeconds", "must be at least 10");
            }
            if r.lead_time_seconds >= r.lifetime_seconds {
                add(
                    "spec.rotation.leadTimeSeconds",
                    "must be less than spec.rotation.lifetimeSeconds",
                );
            }
            if r.drain_seconds == Some(0) {
                add("spec.rotation.drainSeconds", "must be at least 1");
            }
            if r.drain_seconds() >= r.lead_time_seconds {
                add(
                    "spec.rotation.drainSeconds",
                    "must be less than spec.rotation.leadTimeSeconds (default 30)",
                );
            }
        }
        if self.max_concurrent_calls == Some(0) {
            add("spec.maxConcurrentCalls", "must be at least 1");
        }
        if self.allowed_namespaces.iter().any(|n| n.trim().is_empty()) {
            add(
                "spec.allowedNamespaces",
                "entries must be namespace names or *",
            );
        }
        out
    }
}

impl crate::validation::Validate for OpenstackCloudSpec {
    fn validate(&self) -> Vec<FieldError> {
        OpenstackCloudSpec::validate(self)
    }
}

/// Why a resource's `spec.cloudRef` cannot be used; the message names the field and the cloud.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CloudRefError {
    /// No OpenstackCloud of that name.
    #[error("spec.cloudRef.name: OpenstackCloud {0:?} does not exist")]
    Missing(String),
    /// The resource's namespace is not in the cloud's allow-list.
    #[error(
        "spec.cloudRef.name: namespace {namespace:?} is not allowed to use OpenstackCloud {cloud:?} (not in its spec.allowedNamespaces)"
    )]
    NotAllowed {
        /// The cloud.
        cloud: String,
        /// The resource's namespace.
        namespace: String,
    },
    /// The cloud's own spec is invalid.
    #[error("spec.cloudRef.name: OpenstackCloud {cloud:?} is invalid: {detail}")]
    InvalidCloud {
        /// The cloud.
        cloud: String,
        /// Its spec problems.
        detail: String,
    },
    /// The cloud's credentials could not be read or did not connect.
    #[error("spec.cloudRef.name: cannot connect to OpenstackCloud {cloud:?}: {detail}")]
    Unreachable {
        /// The cloud.
        cloud: String,
        /// Why (never the credentials themselves).
        detail: String,
    },
}

/// Checks a resource's use of `cloud` (None: no OpenstackCloud of that name exists) before any
/// connection is attempted: a refusal touches nothing.
pub fn check_cloud_ref(
    name: &str,
    cloud: Option<&OpenstackCloudSpec>,
    namespace: Option<&str>,
) -> Result<(), CloudRefError> {
    let Some(spec) = cloud else {
        return Err(CloudRefError::Missing(name.into()));
    };
    if !spec.allows(namespace) {
        return Err(CloudRefError::NotAllowed {
            cloud: name.into(),
            namespace: namespace.unwrap_or_default().into(),
        });
    }
    let problems = spec.validate();
    if !problems.is_empty() {
        return Err(CloudRefError::InvalidCloud {
            cloud: name.into(),
            detail: crate::validation::summarize(&problems),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(allowed: &[&str]) -> OpenstackCloudSpec {
        OpenstackCloudSpec {
            secret_ref: CloudSecretRef {
                name: "s".into(),
                namespace: "openstack-operator".into(),
                key: default_key(),
            },
            cloud: "east".into(),
            region: None,
            allowed_namespaces: allowed.iter().map(|s| s.to_string()).collect(),
            requests_per_second: None,
            max_concurrent_calls: None,
            rotation: None,
        }
    }

    #[test]
    fn a_rotation_needs_its_lead_time_below_the_lifetime_and_the_drain_below_the_lead() {
        let mut s = spec(&[]);
        s.rotation = Some(CredentialRotation {
            lifetime_seconds: 120,
            lead_time_seconds: 90,
            drain_seconds: Some(10),
        });
        assert!(s.validate().is_empty());
        s.rotation = Some(CredentialRotation {
            lifetime_seconds: 60,
            lead_time_seconds: 60,
            drain_seconds: Some(60),
        });
        let paths: Vec<String> = s.validate().into_iter().map(|e| e.path).collect();
        assert_eq!(
            paths,
            [
                "spec.rotation.leadTimeSeconds",
                "spec.rotation.drainSeconds"
            ]
        );
        s.rotation = Some(CredentialRotation {
            lifetime_seconds: 600,
            lead_time_seconds: 20,
            drain_seconds: None,
        });
        let e = s.validate();
        assert_eq!(e.len(), 1);
        assert!(e[0].message.contains("default 30"), "{}", e[0].message);
    }

    #[test]
    fn namespaces_need_the_allow_list_cluster_scoped_resources_do_not() {
        let s = spec(&["team-a"]);
        assert!(s.allows(Some("team-a")));
        assert!(!s.allows(Some("team-b")));
        assert!(s.allows(None));
        assert!(!spec(&[]).allows(Some("team-a")));
        assert!(spec(&["*"]).allows(Some("anything")));
    }

    #[test]
    fn refusals_name_the_field_the_cloud_and_the_namespace() {
        let e = check_cloud_ref("east", None, Some("a")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "spec.cloudRef.name: OpenstackCloud \"east\" does not exist"
        );
        let e = check_cloud_ref("east", Some(&spec(&["team-a"])), Some("team-b")).unwrap_err();
        let m = e.to_string();
        assert!(
            m.starts_with("spec.cloudRef.name:")
                && m.contains("\"team-b\"")
                && m.contains("\"east\""),
            "{m}"
        );
        assert!(check_cloud_ref("east", Some(&spec(&["team-a"])), Some("team-a")).is_ok());
        let mut bad = spec(&["*"]);
        bad.cloud = " ".into();
        let e = check_cloud_ref("east", Some(&bad), None).unwrap_err();
        assert!(e.to_string().contains("spec.cloud:"), "{e}");
    }

    #[test]
    fn the_secret_key_defaults_to_clouds_yaml() {
        let s: OpenstackCloudSpec = serde_json::from_value(serde_json::json!({
            "secretRef": {"name": "s", "namespace": "ns"},
            "cloud": "east",
        }))
        .unwrap();
        assert_eq!(s.secret_ref.key, "clouds.yaml");
        assert!(s.validate().is_empty());
    }
}
