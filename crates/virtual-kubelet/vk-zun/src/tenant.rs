//! A node serving one `ZunTenant` (pure): which namespaces' pods it admits and which of the
//! tenant's networks a pod gets.
//!
//! A pod bound to a tenant's node whose namespace the tenant does not list is refused before
//! anything reaches OpenStack (the pod fails with [`NOT_BOUND`], the tenant named), so a pod
//! can never land in a project its namespace was not given, even when bound by `nodeName`
//! past the scheduler and the tenant's taint.

use std::collections::BTreeSet;

use api::tenant::{TenantNetwork, ZunTenantSpec};
use k8s_openapi::api::core::v1::Pod;

use crate::network::{NETWORK_ANNOTATION, PROJECT_NETWORK_ANNOTATION};
use crate::translate::TranslateError;

/// Reason of a pod refused because its namespace is not bound to the node's tenant.
pub const NOT_BOUND: &str = "TenantNotBound";

/// What a tenant's node enforces.
#[derive(Clone, Debug, PartialEq)]
pub struct Tenant {
    /// The `ZunTenant`'s name.
    pub name: String,
    /// `spec.namespaces`.
    pub namespaces: BTreeSet<String>,
    /// `spec.networks`.
    pub networks: Vec<TenantNetwork>,
    /// The `networks[].name` of pods that pick none.
    pub default_network: Option<String>,
}

impl Tenant {
    /// From a (validated) spec.
    pub fn from_spec(name: &str, spec: &ZunTenantSpec) -> Self {
        Self {
            name: name.to_string(),
            namespaces: spec.namespaces.iter().cloned().collect(),
            networks: spec.networks.clone(),
            default_network: spec.default_network().map(|n| n.name.clone()),
        }
    }

    /// `Err(message)` when pods of `namespace` may not run on this tenant's node.
    pub fn admit(&self, namespace: &str) -> Result<(), String> {
        if self.namespaces.contains(namespace) {
            return Ok(());
        }
        Err(format!(
            "namespace {namespace:?} is not bound to ZunTenant {:?} (its spec.namespaces: {}): this node runs only the pods of the tenant's namespaces",
            self.name,
            if self.namespaces.is_empty() {
                "none".to_string()
            } else {
                self.namespaces
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ))
    }

    /// The tenant network of the pod: the one its `virtual-kubelet.sunet.se/network`
    /// annotation names (by `networks[].name`), else the default. Any other value, and the
    /// `project-network` annotation (another project's network), are refused naming the
    /// annotation.
    pub fn network_for(&self, pod: &Pod) -> Result<&TenantNetwork, TranslateError> {
        let ann = pod.metadata.annotations.as_ref();
        let get = |k: &str| ann.and_then(|a| a.get(k)).map(|v| v.trim().to_string());
        if get(PROJECT_NETWORK_ANNOTATION).is_some() {
            return Err(TranslateError::Unsupported {
                field: format!("metadata.annotations[{PROJECT_NETWORK_ANNOTATION}]"),
                why: format!(
                    "pods of ZunTenant {:?} use the tenant's networks: name one of them in {NETWORK_ANNOTATION}",
                    self.name
                ),
            });
        }
        let names = || {
            self.networks
                .iter()
                .map(|n| n.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let wanted = match get(NETWORK_ANNOTATION) {
            Some(n) => n,
            None => self
                .default_network
                .clone()
                .ok_or_else(|| TranslateError::Unsupported {
                    field: format!("metadata.annotations[{NETWORK_ANNOTATION}]"),
                    why: format!("ZunTenant {:?} has no network", self.name),
                })?,
        };
        self.networks
            .iter()
            .find(|n| n.name == wanted)
            .ok_or_else(|| TranslateError::Unsupported {
                field: format!("metadata.annotations[{NETWORK_ANNOTATION}]"),
                why: format!(
                    "{wanted:?} is not a network of ZunTenant {:?} (it has: {})",
                    self.name,
                    names()
                ),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tenant() -> Tenant {
        let spec: ZunTenantSpec = serde_json::from_value(json!({
            "credentials": {"secretRef": {"namespace": "vk", "name": "a"}},
            "networks": [{"name": "pods", "network": "net-pods"},
                         {"name": "db", "network": "net-db", "securityGroups": ["db"]}],
            "namespaces": ["team-a", "team-a2"]
        }))
        .unwrap();
        Tenant::from_spec("tenant-a", &spec)
    }

    fn pod(annotations: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "team-a", "annotations": annotations},
            "spec": {"containers": []}
        }))
        .unwrap()
    }

    #[test]
    fn only_bound_namespaces_are_admitted() {
        let t = tenant();
        assert!(t.admit("team-a").is_ok());
        assert!(t.admit("team-a2").is_ok());
        let m = t.admit("team-b").unwrap_err();
        assert!(
            m.contains("\"team-b\"")
                && m.contains("ZunTenant \"tenant-a\"")
                && m.contains("team-a, team-a2"),
            "{m}"
        );
        let none = Tenant {
            namespaces: BTreeSet::new(),
            ..tenant()
        };
        assert!(none.admit("team-a").unwrap_err().contains("none"));
    }

    #[test]
    fn the_annotation_picks_among_the_tenants_networks_only() {
        let t = tenant();
        assert_eq!(t.network_for(&pod(json!({}))).unwrap().network, "net-pods");
        let db = t
            .network_for(&pod(json!({NETWORK_ANNOTATION: "db"})))
            .unwrap();
        assert_eq!(
            (db.network.as_str(), db.security_groups.as_slice()),
            ("net-db", &["db".to_string()][..])
        );
        // A Neutron name or ID that is not one of the tenant's networks is refused, even one
        // that exists: that is how a pod would reach another project's network.
        for bad in ["net-db", "other-tenant-net", ""] {
            match t.network_for(&pod(json!({NETWORK_ANNOTATION: bad}))) {
                Err(TranslateError::Unsupported { field, why }) => {
                    assert_eq!(field, format!("metadata.annotations[{NETWORK_ANNOTATION}]"));
                    assert!(why.contains("it has: pods, db"), "{why}");
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        match t.network_for(&pod(json!({PROJECT_NETWORK_ANNOTATION: "p/pods"}))) {
            Err(TranslateError::Unsupported { field, .. }) => {
                assert!(field.contains(PROJECT_NETWORK_ANNOTATION))
            }
            other => panic!("{other:?}"),
        }
    }
}
