//! Types shared by every kind: phase, conditions and ownership policies.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Lifecycle phase shown in `kubectl get` (the seed's enum, unchanged).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema, Default)]
pub enum Phase {
    /// Waiting for something (a dependency, a retry, an import).
    #[default]
    Pending,
    /// Work in OpenStack is under way.
    Provisioning,
    /// OpenStack matches the spec.
    Ready,
    /// The last reconcile failed; the conditions say why.
    Error,
    /// The object is being deleted and OpenStack is being cleaned up.
    Deleting,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            Phase::Pending => "Pending",
            Phase::Provisioning => "Provisioning",
            Phase::Ready => "Ready",
            Phase::Error => "Error",
            Phase::Deleting => "Deleting",
        };
        f.write_str(s)
    }
}

/// The status of a condition, as Kubernetes spells it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// Not known yet.
    Unknown,
}

impl From<bool> for ConditionStatus {
    fn from(b: bool) -> Self {
        if b {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    }
}

/// A status condition (Kubernetes conventions; the seed's shape plus `observedGeneration`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type, e.g. `Ready`, `ProjectReady`, `NetworksReady`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: ConditionStatus,
    /// Machine-readable CamelCase reason, e.g. `Created`, `InvalidSpec`, `DependencyMissing`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable detail; names the offending field for invalid specs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When `status` last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub last_transition_time: Option<String>,
    /// The `metadata.generation` this condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl Condition {
    /// A condition without a transition time; [`set_condition`] fills it in.
    pub fn new(
        type_: impl Into<String>,
        status: impl Into<ConditionStatus>,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            last_transition_time: None,
            observed_generation: None,
        }
    }

    /// Whether this condition's status is `True`.
    pub fn is_true(&self) -> bool {
        self.status == ConditionStatus::True
    }
}

/// Upserts `new` into `conditions`, keeping `lastTransitionTime` unless the status flips, so an
/// unchanged status never rewrites the timestamp (no status write storms).
pub fn set_condition(conditions: &mut Vec<Condition>, mut new: Condition, now: &str) {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(old) => {
            new.last_transition_time = if old.status == new.status {
                old.last_transition_time
                    .clone()
                    .or_else(|| Some(now.to_string()))
            } else {
                Some(now.to_string())
            };
            *old = new;
        }
        None => {
            new.last_transition_time = Some(now.to_string());
            conditions.push(new);
        }
    }
}

/// Finds a condition by type.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// What happens to the OpenStack object when its custom resource is deleted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum DeletionPolicy {
    /// Delete the OpenStack object, even one that was adopted.
    Delete,
    /// Leave the OpenStack object in place; only the custom resource goes.
    Orphan,
}

/// The default for boolean fields the seed defaults to `true`.
pub(crate) fn default_true() -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_kept_while_status_unchanged() {
        let mut conds = vec![];
        set_condition(
            &mut conds,
            Condition::new("Ready", false, "Creating", ""),
            "t1",
        );
        set_condition(
            &mut conds,
            Condition::new("Ready", false, "Waiting", "x"),
            "t2",
        );
        assert_eq!(conds.len(), 1);
        assert_eq!(conds[0].last_transition_time.as_deref(), Some("t1"));
        assert_eq!(conds[0].reason.as_deref(), Some("Waiting"));
        set_condition(
            &mut conds,
            Condition::new("Ready", true, "Created", ""),
            "t3",
        );
        assert_eq!(conds[0].last_transition_time.as_deref(), Some("t3"));
        assert!(find_condition(&conds, "Ready").is_some_and(Condition::is_true));
    }
}

/// Access to the status fields every kind shares, so one reconcile framework serves all.
pub trait CommonStatus:
    Default + Clone + PartialEq + serde::Serialize + Send + Sync + std::fmt::Debug
{
    /// `status.phase`.
    fn phase_mut(&mut self) -> &mut Option<Phase>;
    /// `status.conditions`.
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;
    /// `status.observedGeneration`.
    fn observed_generation_mut(&mut self) -> &mut Option<i64>;
    /// `status.lastSyncTime`.
    fn last_sync_time_mut(&mut self) -> &mut Option<String>;
    /// The recorded ID of the resource's main OpenStack object, if any.
    fn openstack_id(&self) -> Option<&str>;
}

macro_rules! common_status {
    ($($t:ty => $id:ident),*) => {$(
        impl CommonStatus for $t {
            fn phase_mut(&mut self) -> &mut Option<Phase> { &mut self.phase }
            fn conditions_mut(&mut self) -> &mut Vec<Condition> { &mut self.conditions }
            fn observed_generation_mut(&mut self) -> &mut Option<i64> { &mut self.observed_generation }
            fn last_sync_time_mut(&mut self) -> &mut Option<String> { &mut self.last_sync_time }
            fn openstack_id(&self) -> Option<&str> { self.$id.as_deref() }
        }
    )*};
}

common_status!(
    crate::domain::OpenstackDomainStatus => domain_id,
    crate::flavor::OpenstackFlavorStatus => flavor_id,
    crate::image::OpenstackImageStatus => image_id,
    crate::network::OpenstackNetworkStatus => network_id,
    crate::project::OpenstackProjectStatus => project_id
);
