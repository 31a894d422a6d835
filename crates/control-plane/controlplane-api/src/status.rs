//! The status of service kinds (shared by Keystone and the services to come) and access to
//! conditions across every kind's status.

use api::Condition;
use serde::{Deserialize, Serialize};

use crate::common::ControlPlaneStatus;

/// Observed state of an OpenStack service kind.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceStatus {
    /// The `metadata.generation` the status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Reconciling`, `Blocked`, `Degraded`, `InvalidSpec`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// In-cluster URL of the API (what the token probe and other services use).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Hash of the rendered configuration the Deployment runs with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_hash: Option<String>,
    /// One record per Job step (database, db sync, bootstrap, credential migration): its input
    /// hash and outcome.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<JobRecord>,
    /// API pods available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// Fernet key rotation (Keystone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fernet: Option<KeyRotationStatus>,
    /// Credential key rotation and migration (Keystone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_keys: Option<CredentialKeyStatus>,
}

/// The state of one Job step.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobRecord {
    /// Step, e.g. `db-sync`.
    pub step: String,
    /// Hash of the step's inputs; a new hash runs the step again.
    pub hash: String,
    /// Name of the current Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    /// Attempts made for this hash (1 = the first run).
    #[serde(default)]
    pub attempts: u32,
    /// Whether the step succeeded for this hash.
    #[serde(default)]
    pub succeeded: bool,
    /// Why the last attempt failed (the Job's condition reason and message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<String>,
    /// When the next attempt may start (RFC 3339), after a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_after: Option<String>,
}

/// Fernet key repository state.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyRotationStatus {
    /// Keys kept (staged + primary + secondaries), derived from the token settings.
    pub max_active_keys: u32,
    /// Index of the primary key (the newest; tokens are signed with it).
    pub primary_index: u32,
    /// When the keys were last rotated (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_rotation: Option<String>,
}

/// Credential key repository state: which key set is current and whether every stored
/// credential is encrypted with its primary (the condition for the next rotation).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialKeyStatus {
    /// Hash of the current key set (what the `credential-migrate` Job checks it migrates to).
    pub key_set_hash: String,
    /// Index of the primary key (credentials are encrypted with it).
    pub primary_index: u32,
    /// When the current key set was written (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_rotation: Option<String>,
    /// Whether `credential_migrate` succeeded for the current key set: only then may the keys
    /// rotate again (a rotation drops the oldest key).
    #[serde(default)]
    pub migrated: bool,
    /// The last value of the `controlplane.sunet.se/rotate-credential-keys` annotation served
    /// (also on the Secret; kept here so a restored Secret does not rotate again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotated_for: Option<String>,
    /// What key management waits for or does next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Read and write access to the conditions of any control-plane status.
pub trait Conditioned: Default + Clone + PartialEq + Serialize + Send + Sync {
    /// `status.conditions`.
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;
    /// `status.conditions`.
    fn conditions(&self) -> &[Condition];
    /// `status.observedGeneration`.
    fn observed_generation_mut(&mut self) -> &mut Option<i64>;
    /// Finds a condition by type.
    fn condition(&self, type_: &str) -> Option<&Condition> {
        api::common::find_condition(self.conditions(), type_)
    }
}

macro_rules! conditioned {
    ($($t:ty),*) => {$(
        impl Conditioned for $t {
            fn conditions_mut(&mut self) -> &mut Vec<Condition> { &mut self.conditions }
            fn conditions(&self) -> &[Condition] { &self.conditions }
            fn observed_generation_mut(&mut self) -> &mut Option<i64> { &mut self.observed_generation }
        }
    )*};
}

conditioned!(
    ServiceStatus,
    ControlPlaneStatus,
    crate::cluster::OpenStackClusterStatus
);
