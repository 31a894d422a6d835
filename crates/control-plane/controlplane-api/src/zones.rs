//! Availability zones: listed once on the `OpenStackCluster` and passed to `Nova` and
//! `Cinder`, which place their per-zone components (Cinder's volume service, Nova's
//! compute-facing configuration and host aggregates) with the zone's node selector, and spread
//! their API pods over the zones.

use std::collections::BTreeMap;

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use api::FieldError;

/// The node label a zone's node selector uses by default.
pub const TOPOLOGY_ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// One availability zone: its OpenStack name and where its pods run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AvailabilityZone {
    /// The zone's name in Nova and Cinder (and in the names of its objects, so a DNS label).
    #[schemars(
        length(min = 1, max = 32),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: String,
    /// Value of the nodes' `topology.kubernetes.io/zone` label in this zone, when it differs
    /// from `name`. Ignored when `nodeSelector` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub topology_value: Option<String>,
    /// The node selector of the zone's pods. Default:
    /// `topology.kubernetes.io/zone: <topologyValue or name>`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 16))]
    pub node_selector: BTreeMap<String, String>,
    /// Nova host names (`[DEFAULT] host` of the compute nodes) of the zone: the aggregate Job
    /// adds them to the zone's host aggregate. A host that has not registered yet is skipped,
    /// named by Nova's `ZonesComplete` condition, and added once its nova-compute registers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 255)))]
    pub compute_hosts: Vec<String>,
}

impl AvailabilityZone {
    /// The node selector of the zone's pods (the explicit one, else the topology label).
    pub fn selector(&self) -> BTreeMap<String, String> {
        if !self.node_selector.is_empty() {
            return self.node_selector.clone();
        }
        BTreeMap::from([(
            TOPOLOGY_ZONE_LABEL.to_string(),
            self.topology_value
                .clone()
                .unwrap_or_else(|| self.name.clone()),
        )])
    }
}

/// The CEL rule of every zone list: names are unique.
pub const UNIQUE_NAMES_RULE: &str = "self.all(z, self.exists_one(y, y.name == z.name))";

/// Checks a zone list: non-empty, DNS-label names, listed once (pure; the same rules as the
/// schema, for objects that bypassed it).
pub fn validate(path: &str, zones: &[AvailabilityZone]) -> Vec<FieldError> {
    let mut e = Vec::new();
    for (i, z) in zones.iter().enumerate() {
        let at = format!("{path}[{i}].name");
        let label = !z.name.is_empty()
            && z.name.len() <= 32
            && z.name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !z.name.starts_with('-')
            && !z.name.ends_with('-');
        if z.name.is_empty() {
            e.push(FieldError {
                path: at,
                message: "must not be empty".into(),
            });
        } else if !label {
            e.push(FieldError {
                path: at,
                message: format!(
                    "{:?} is not a zone name: at most 32 lower-case letters, digits and '-'",
                    z.name
                ),
            });
        } else if zones[..i].iter().any(|y| y.name == z.name) {
            e.push(FieldError {
                path: at,
                message: format!("{:?} is listed twice", z.name),
            });
        }
    }
    e
}

/// Checks that `zone` (at `path`) is one of `zones`.
pub fn known(path: &str, zone: &str, zones: &[AvailabilityZone]) -> Option<FieldError> {
    (!zones.iter().any(|z| z.name == zone)).then(|| FieldError {
        path: path.into(),
        message: format!(
            "{zone:?} is not an availability zone of the list ({})",
            if zones.is_empty() {
                "none is listed".to_string()
            } else {
                zones
                    .iter()
                    .map(|z| z.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(name: &str) -> AvailabilityZone {
        AvailabilityZone {
            name: name.into(),
            ..AvailabilityZone::default()
        }
    }

    #[test]
    fn the_selector_defaults_to_the_topology_label() {
        assert_eq!(
            zone("az1").selector(),
            BTreeMap::from([(TOPOLOGY_ZONE_LABEL.to_string(), "az1".to_string())])
        );
        let mut z = zone("az1");
        z.topology_value = Some("eu-north-1a".into());
        assert_eq!(z.selector()[TOPOLOGY_ZONE_LABEL], "eu-north-1a");
        z.node_selector = BTreeMap::from([("rack".to_string(), "r1".to_string())]);
        assert_eq!(
            z.selector(),
            BTreeMap::from([("rack".to_string(), "r1".to_string())])
        );
    }

    #[test]
    fn duplicate_empty_and_bad_names_are_refused() {
        let e = validate(
            "spec.availabilityZones",
            &[
                zone("az1"),
                zone(""),
                zone("az1"),
                zone("AZ_2"),
                zone("az3"),
            ],
        );
        let paths: Vec<_> = e.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "spec.availabilityZones[1].name",
                "spec.availabilityZones[2].name",
                "spec.availabilityZones[3].name"
            ]
        );
        assert!(e[1].message.contains("listed twice"), "{e:?}");
        assert!(validate("z", &[zone("az1"), zone("az-2"), zone("3")]).is_empty());
    }

    #[test]
    fn an_unknown_zone_names_the_list() {
        let zones = [zone("az1"), zone("az2")];
        assert!(known("p", "az2", &zones).is_none());
        let e = known("spec.backends[0].availabilityZone", "az9", &zones);
        assert_eq!(
            e.map(|e| (e.path, e.message)),
            Some((
                "spec.backends[0].availabilityZone".to_string(),
                "\"az9\" is not an availability zone of the list (az1, az2)".to_string()
            ))
        );
        assert!(known("p", "az1", &[]).is_some_and(|e| e.message.contains("none is listed")));
    }
}
