//! `OpenstackFlavor`: a Nova flavor (cluster-scoped).

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::common::{Condition, DeletionPolicy, Phase, default_true};

/// Desired state of a Nova flavor. Sizes are immutable in Nova: changing them recreates the
/// flavor (new ID), as the seed does.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "sunet.se",
    version = "v1alpha1",
    kind = "OpenstackFlavor",
    plural = "openstackflavors",
    singular = "openstackflavor",
    shortname = "osf",
    shortname = "osflavor",
    doc = "A Nova flavor managed by the operator (cluster-scoped).",
    status = "OpenstackFlavorStatus",
    printcolumn = r#"{"name":"Flavor","type":"string","jsonPath":".spec.name"}"#,
    printcolumn = r#"{"name":"vCPUs","type":"integer","jsonPath":".spec.vcpus"}"#,
    printcolumn = r#"{"name":"RAM (MB)","type":"integer","jsonPath":".spec.ram"}"#,
    printcolumn = r#"{"name":"Disk (GB)","type":"integer","jsonPath":".spec.disk"}"#,
    printcolumn = r#"{"name":"Public","type":"boolean","jsonPath":".spec.isPublic"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"ID","type":"string","jsonPath":".status.flavorId","priority":1}"#,
    printcolumn = r#"{"name":"Cloud","type":"string","jsonPath":".spec.cloudRef.name","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(validation = Rule::new(crate::cloud::CLOUD_REF_IMMUTABLE).message("spec.cloudRef cannot change after creation: delete the resource and create it in the other cloud"))]
#[serde(rename_all = "camelCase")]
pub struct OpenstackFlavorSpec {
    /// The OpenstackCloud this resource lives in (extension). Unset: the cloud the operator
    /// was started with (`OS_CLOUD`), as with the seed. Cannot change after creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_ref: Option<crate::cloud::CloudRef>,
    /// Nova flavor name; also how an existing flavor is found.
    #[schemars(length(min = 1, max = 255))]
    pub name: String,
    /// Flavor description (set at creation).
    #[serde(default)]
    pub description: String,
    /// Number of vCPUs.
    #[schemars(range(min = 1))]
    pub vcpus: i64,
    /// RAM in MB.
    #[schemars(range(min = 1))]
    pub ram: i64,
    /// Root disk in GB (0 = boot from volume).
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub disk: i64,
    /// Ephemeral disk in GB.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub ephemeral: i64,
    /// Swap in MB.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub swap: i64,
    /// Whether every project may use the flavor.
    #[serde(default = "default_true")]
    pub is_public: bool,
    /// Nova extra specs, e.g. `hw:cpu_policy: shared`. Reconciled as a set: keys removed
    /// here are removed from the flavor. At most 256 keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 256))]
    pub extra_specs: Option<BTreeMap<String, String>>,
    /// Take over an existing flavor with this name that this operator did not create
    /// (extension). Its sizes must match the spec.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopt: bool,
    /// What deleting the resource does to the flavor (extension). Unset: delete what we
    /// created, keep what we adopted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<DeletionPolicy>,
}

/// Observed state of a Nova flavor.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenstackFlavorStatus {
    /// Lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Nova flavor ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flavor_id: Option<String>,
    /// `FlavorReady` (seed) and `Ready` (roll-up).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` the status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When OpenStack was last compared with the spec (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub last_sync_time: Option<String>,
    /// Whether the flavor existed before and was adopted rather than created (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopted: Option<bool>,
}
