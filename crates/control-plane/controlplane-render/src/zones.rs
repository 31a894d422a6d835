//! Availability zones on Kubernetes: a per-zone component's Deployment is pinned to the zone's
//! nodes and labelled with the zone; a zone-wide component (an API) spreads its pods over the
//! zones and the nodes, so losing a zone or a node leaves replicas elsewhere.

use std::collections::BTreeMap;

use controlplane_api::zones::{AvailabilityZone, TOPOLOGY_ZONE_LABEL};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Label carrying the availability zone of a per-zone object (Deployment, pods, Secret).
pub const ZONE_LABEL: &str = "controlplane.sunet.se/availability-zone";
/// The node label pods are spread over besides the zone.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// The name of a per-zone object: `<base>-<zone>`.
pub fn zoned(base: &str, zone: &AvailabilityZone) -> String {
    format!("{base}-{}", zone.name)
}

/// Spreads the Deployment's pods over zones and nodes (`topologySpreadConstraints`, skew 1,
/// `ScheduleAnyway`: a preference, so a cluster with one zone, or nodes without the zone label,
/// still schedules every replica).
pub fn spread(dep: &mut Deployment) {
    let labels = dep
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone());
    let Some(pod) = dep.spec.template.spec.as_mut() else {
        return;
    };
    let constraint = |key: &str| TopologySpreadConstraint {
        max_skew: 1,
        topology_key: key.into(),
        when_unsatisfiable: "ScheduleAnyway".into(),
        label_selector: Some(LabelSelector {
            match_labels: labels.clone(),
            ..LabelSelector::default()
        }),
        ..TopologySpreadConstraint::default()
    };
    pod.topology_spread_constraints = Some(vec![
        constraint(TOPOLOGY_ZONE_LABEL),
        constraint(HOSTNAME_LABEL),
    ]);
}

/// Pins the Deployment to the zone: the zone's node selector merged over the template's (the
/// zone wins on a shared key) and the zone label on the Deployment and its pods (not in the
/// selector, which stays the component's).
pub fn pin(dep: &mut Deployment, zone: &AvailabilityZone) {
    dep.metadata
        .labels
        .get_or_insert_default()
        .insert(ZONE_LABEL.into(), zone.name.clone());
    let spec = &mut dep.spec;
    spec.template
        .metadata
        .get_or_insert_default()
        .labels
        .get_or_insert_default()
        .insert(ZONE_LABEL.into(), zone.name.clone());
    if let Some(pod) = spec.template.spec.as_mut() {
        let mut selector: BTreeMap<String, String> = pod.node_selector.clone().unwrap_or_default();
        selector.extend(zone.selector());
        pod.node_selector = Some(selector);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use controlplane_api::ServiceTemplate;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    use crate::objects::{self, Check, ComponentParams, Owner};

    fn dep(t: &ServiceTemplate) -> Deployment {
        let owner = Owner {
            reference: OwnerReference::default(),
            namespace: "ns".into(),
            instance: "c".into(),
            service: "cinder".into(),
        };
        objects::component_deployment(
            &owner,
            t,
            ComponentParams {
                name: "c-api".into(),
                component: "api".into(),
                image: "i".into(),
                command: vec![],
                check: Check::None,
                config_hash: "h".into(),
                volumes: vec![],
                replicas: 3,
                privileged: false,
            },
        )
    }

    #[test]
    fn spread_over_zones_then_hosts_as_a_preference() {
        let mut d = dep(&ServiceTemplate::default());
        spread(&mut d);
        let pod = d.spec.template.spec.unwrap_or_default();
        let c = pod.topology_spread_constraints.unwrap_or_default();
        let keys: Vec<_> = c.iter().map(|c| c.topology_key.as_str()).collect();
        assert_eq!(keys, [TOPOLOGY_ZONE_LABEL, HOSTNAME_LABEL]);
        for c in &c {
            assert_eq!(c.max_skew, 1);
            assert_eq!(c.when_unsatisfiable, "ScheduleAnyway");
            let m = c
                .label_selector
                .as_ref()
                .and_then(|s| s.match_labels.clone())
                .unwrap_or_default();
            assert_eq!(m["app.kubernetes.io/component"], "api");
            assert_eq!(m["app.kubernetes.io/instance"], "c");
        }
    }

    #[test]
    fn pin_merges_the_zone_selector_and_labels_the_pods() {
        let t = ServiceTemplate {
            node_selector: BTreeMap::from([
                ("role".to_string(), "storage".to_string()),
                (TOPOLOGY_ZONE_LABEL.to_string(), "other".to_string()),
            ]),
            ..ServiceTemplate::default()
        };
        let mut d = dep(&t);
        pin(
            &mut d,
            &AvailabilityZone {
                name: "az2".into(),
                topology_value: Some("dc-b".into()),
                ..AvailabilityZone::default()
            },
        );
        assert_eq!(
            d.metadata.labels.as_ref().map(|l| &l[ZONE_LABEL]),
            Some(&"az2".to_string())
        );
        let spec = d.spec;
        let sel = spec
            .template
            .spec
            .and_then(|p| p.node_selector)
            .unwrap_or_default();
        assert_eq!(sel["role"], "storage");
        assert_eq!(sel[TOPOLOGY_ZONE_LABEL], "dc-b");
        let pod_labels = spec
            .template
            .metadata
            .and_then(|m| m.labels)
            .unwrap_or_default();
        assert_eq!(pod_labels[ZONE_LABEL], "az2");
        assert!(
            !spec
                .selector
                .match_labels
                .unwrap_or_default()
                .contains_key(ZONE_LABEL)
        );
    }
}
