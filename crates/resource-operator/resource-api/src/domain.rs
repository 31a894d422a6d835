//! `OpenstackDomain`: a Keystone domain (cluster-scoped).

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::common::{Condition, DeletionPolicy, Phase, default_true};

/// Desired state of a Keystone domain.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "sunet.se",
    version = "v1alpha1",
    kind = "OpenstackDomain",
    plural = "openstackdomains",
    singular = "openstackdomain",
    shortname = "osd",
    shortname = "osdomain",
    doc = "A Keystone domain managed by the operator (cluster-scoped).",
    status = "OpenstackDomainStatus",
    printcolumn = r#"{"name":"Domain","type":"string","jsonPath":".spec.name"}"#,
    printcolumn = r#"{"name":"Enabled","type":"boolean","jsonPath":".spec.enabled"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"ID","type":"string","jsonPath":".status.domainId","priority":1}"#,
    printcolumn = r#"{"name":"Cloud","type":"string","jsonPath":".spec.cloudRef.name","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(validation = Rule::new(crate::cloud::CLOUD_REF_IMMUTABLE).message("spec.cloudRef cannot change after creation: delete the resource and create it in the other cloud"))]
#[serde(rename_all = "camelCase")]
pub struct OpenstackDomainSpec {
    /// The OpenstackCloud this resource lives in (extension). Unset: the cloud the operator
    /// was started with (`OS_CLOUD`), as with the seed. Cannot change after creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_ref: Option<crate::cloud::CloudRef>,
    /// Keystone domain name; also how an existing domain is found.
    #[schemars(length(min = 1, max = 64))]
    pub name: String,
    /// Domain description.
    #[serde(default)]
    pub description: String,
    /// Whether the domain is enabled. Disabling a domain blocks logins of all its users.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Take over an existing domain with this name that this operator did not create
    /// (extension; the seed adopted silently). Adopted domains are not deleted with the
    /// resource unless `deletionPolicy: Delete`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopt: bool,
    /// What deleting the resource does to the domain (extension). Unset: delete what we
    /// created, keep what we adopted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<DeletionPolicy>,
}

/// Observed state of a Keystone domain.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenstackDomainStatus {
    /// Lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Keystone domain ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain_id: Option<String>,
    /// `DomainReady` (seed) and `Ready` (roll-up).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` the status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When OpenStack was last compared with the spec (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub last_sync_time: Option<String>,
    /// Whether the domain existed before and was adopted rather than created (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopted: Option<bool>,
}
