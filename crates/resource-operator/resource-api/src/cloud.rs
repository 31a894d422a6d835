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
        }
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
