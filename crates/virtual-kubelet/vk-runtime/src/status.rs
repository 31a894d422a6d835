//! Pod status pieces every provider writes the same way.

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// A pod condition of this pass: its `lastTransitionTime` stays what the pod shows while the
/// status is unchanged (a kubelet moves it only on a transition), else it is `now`.
pub fn pod_condition(
    pod: &Pod,
    type_: &str,
    ok: bool,
    reason: Option<&str>,
    now: jiff::Timestamp,
) -> PodCondition {
    let status = if ok { "True" } else { "False" };
    let prev = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == type_));
    let since = match prev {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => Some(Time(now)),
    };
    PodCondition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.map(str::to_string),
        last_transition_time: since,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transition_time_moves_only_when_the_status_changes() {
        let t0: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t1: jiff::Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let mut pod = Pod::default();
        let c = pod_condition(&pod, "Ready", false, Some("ContainersNotReady"), t0);
        assert_eq!(c.last_transition_time, Some(Time(t0)));
        pod.status = Some(k8s_openapi::api::core::v1::PodStatus {
            conditions: Some(vec![c]),
            ..Default::default()
        });
        let same = pod_condition(&pod, "Ready", false, Some("ContainersNotReady"), t1);
        assert_eq!(same.last_transition_time, Some(Time(t0)));
        let flipped = pod_condition(&pod, "Ready", true, None, t1);
        assert_eq!(
            (flipped.status.as_str(), flipped.last_transition_time),
            ("True", Some(Time(t1)))
        );
    }
}
