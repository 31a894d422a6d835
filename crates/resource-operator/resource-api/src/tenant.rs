//! `ZunTenant` (`virtual-kubelet.sunet.se/v1alpha1`, cluster-scoped): one tenant of the Zun
//! virtual kubelet. A tenant is an OpenStack project reached with its own application
//! credential, served as its own Node, with the Neutron networks its pods may use and the
//! namespaces whose pods it runs.
//!
//! The group is the virtual kubelet's own prefix (`virtual-kubelet.sunet.se`, as its pod
//! annotations and Zun labels already are), not the resource operator's `sunet.se`: the kinds
//! belong to a different process with its own RBAC and install path.
//!
//! The namespace binding is a list on the tenant, not a namespaced object: binding a
//! namespace hands its users the tenant's project (credentials, quota, networks), so it is
//! decided by whoever owns the tenant, in the one object that also reports it.

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::Condition;
use crate::validation::FieldError;

/// The group of the virtual kubelet's kinds.
pub const VK_GROUP: &str = "virtual-kubelet.sunet.se";
/// Node label and taint key naming the tenant a node serves.
pub const TENANT_LABEL: &str = "virtual-kubelet.sunet.se/tenant";
/// Finalizer the `--tenants` process puts on a tenant whose node it started: the tenant's
/// workloads in its project (containers, ports, security groups, load balancers) are deleted
/// before the tenant goes, even when the process was down at the time.
pub const TENANT_FINALIZER: &str = "virtual-kubelet.sunet.se/release";
/// Secret key: the Keystone URL (`.../v3`).
pub const KEY_AUTH_URL: &str = "auth_url";
/// Secret key: the application credential's ID.
pub const KEY_APP_CRED_ID: &str = "application_credential_id";
/// Secret key: the application credential's secret.
pub const KEY_APP_CRED_SECRET: &str = "application_credential_secret";
/// Secret key (optional): the region.
pub const KEY_REGION: &str = "region_name";

/// A tenant of the Zun virtual kubelet.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "virtual-kubelet.sunet.se",
    version = "v1alpha1",
    kind = "ZunTenant",
    plural = "zuntenants",
    singular = "zuntenant",
    shortname = "zt",
    doc = "A tenant of the Zun virtual kubelet: an OpenStack project (its application credential), served as its own Node, with its networks and the namespaces bound to it (cluster-scoped).",
    status = "ZunTenantStatus",
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".status.nodeName"}"#,
    printcolumn = r#"{"name":"Project","type":"string","jsonPath":".status.projectId"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Namespaces","type":"string","jsonPath":".spec.namespaces","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ZunTenantSpec {
    /// Name of the Node serving the tenant (default: the tenant's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub node_name: Option<String>,
    /// How the node reaches the tenant's project.
    pub credentials: TenantCredentials,
    /// Neutron networks of the project the tenant's pods may use; the pod annotation
    /// `virtual-kubelet.sunet.se/network` picks one by its `name`.
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]), length(min = 1, max = 32))]
    pub networks: Vec<TenantNetwork>,
    /// The `networks[].name` of pods that pick none (default: the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_network: Option<String>,
    /// Namespaces whose pods this tenant runs; a pod of any other namespace bound to its
    /// node fails without reaching OpenStack.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "set"), length(max = 256))]
    pub namespaces: Vec<String>,
    /// Zun availability zone to create in (and the node's topology zone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability_zone: Option<String>,
}

/// Where the tenant's credentials are.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantCredentials {
    /// A Secret with the keys `auth_url`, `application_credential_id`,
    /// `application_credential_secret` and optionally `region_name`.
    pub secret_ref: SecretReference,
}

/// A Secret by namespace and name (the tenant is cluster-scoped).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretReference {
    /// Namespace of the Secret.
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// A network the tenant's pods may use.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantNetwork {
    /// What pods call it (the annotation's value).
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// The Neutron network (ID or name) in the tenant's project, or shared with it.
    #[schemars(length(min = 1, max = 255))]
    pub network: String,
    /// Neutron security groups (IDs or names, of the project) put on the pods' ports, besides
    /// the pod's own group for its declared ports; none: the project's `default` group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub security_groups: Vec<String>,
}

/// What the virtual kubelet reports about a tenant.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ZunTenantStatus {
    /// `Ready` (the node runs with the tenant's credentials; reason `InvalidSpec` naming the
    /// field, `CredentialsUnavailable`, `OpenStackUnavailable` otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The Node serving the tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// The Keystone project the credentials are scoped to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// The `metadata.generation` the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl ZunTenantSpec {
    /// The node's name: `nodeName`, else the tenant's.
    pub fn node_name_or<'a>(&'a self, tenant: &'a str) -> &'a str {
        self.node_name.as_deref().unwrap_or(tenant)
    }

    /// The network of pods that pick none.
    pub fn default_network(&self) -> Option<&TenantNetwork> {
        match &self.default_network {
            Some(d) => self.networks.iter().find(|n| &n.name == d),
            None => self.networks.first(),
        }
    }

    /// Everything wrong with the spec, each error naming its field (`tenant` is
    /// `metadata.name`, the default node name).
    pub fn validate(&self, tenant: &str) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let err = |path: String, message: String| FieldError { path, message };
        let node = self.node_name_or(tenant);
        // Pod port names are `vk_<node>_<pod uid>`: a node name must not hold `_` (a DNS
        // subdomain never does).
        if !is_dns_subdomain(node) {
            errs.push(err(
                if self.node_name.is_some() {
                    "spec.nodeName".into()
                } else {
                    "metadata.name".into()
                },
                format!(
                    "{node:?} is not a valid node name (lower-case DNS subdomain: a-z, 0-9, '-', '.', at most 253)"
                ),
            ));
        }
        let r = &self.credentials.secret_ref;
        if !is_dns_label(&r.namespace) {
            errs.push(err(
                "spec.credentials.secretRef.namespace".into(),
                format!("{:?} is not a namespace name", r.namespace),
            ));
        }
        if !is_dns_subdomain(&r.name) {
            errs.push(err(
                "spec.credentials.secretRef.name".into(),
                format!("{:?} is not a Secret name", r.name),
            ));
        }
        if self.networks.is_empty() {
            errs.push(err(
                "spec.networks".into(),
                "at least one network is needed: the pods' ports are created on it".into(),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, n) in self.networks.iter().enumerate() {
            if n.name.trim().is_empty() {
                errs.push(err(
                    format!("spec.networks[{i}].name"),
                    "empty: give the name pods use".into(),
                ));
            } else if !seen.insert(n.name.as_str()) {
                errs.push(err(
                    format!("spec.networks[{i}].name"),
                    format!("{:?} is listed twice", n.name),
                ));
            }
            if n.network.trim().is_empty() {
                errs.push(err(
                    format!("spec.networks[{i}].network"),
                    "empty: give a Neutron network ID or name".into(),
                ));
            }
            for (j, g) in n.security_groups.iter().enumerate() {
                if g.trim().is_empty() {
                    errs.push(err(
                        format!("spec.networks[{i}].securityGroups[{j}]"),
                        "empty: give a security group ID or name".into(),
                    ));
                }
            }
        }
        if let Some(d) = &self.default_network
            && !self.networks.iter().any(|n| &n.name == d)
        {
            errs.push(err(
                "spec.defaultNetwork".into(),
                format!(
                    "{d:?} is not one of spec.networks[].name ({})",
                    self.networks
                        .iter()
                        .map(|n| n.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        for (i, ns) in self.namespaces.iter().enumerate() {
            if !is_dns_label(ns) {
                errs.push(err(
                    format!("spec.namespaces[{i}]"),
                    format!("{ns:?} is not a namespace name"),
                ));
            }
        }
        errs
    }
}

/// An RFC 1123 label (namespace names).
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// An RFC 1123 subdomain (node and Secret names).
fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> ZunTenantSpec {
        serde_json::from_value(v).unwrap()
    }

    fn good() -> serde_json::Value {
        json!({
            "credentials": {"secretRef": {"namespace": "vk", "name": "tenant-a"}},
            "networks": [{"name": "pods", "network": "zun-pods"},
                         {"name": "db", "network": "db-net", "securityGroups": ["db"]}],
            "namespaces": ["team-a"]
        })
    }

    #[test]
    fn a_good_spec_validates_and_defaults() {
        let s = spec(good());
        assert!(s.validate("tenant-a").is_empty(), "{:?}", s.validate("a"));
        assert_eq!(s.node_name_or("tenant-a"), "tenant-a");
        assert_eq!(s.default_network().unwrap().name, "pods");
        let mut v = good();
        v["defaultNetwork"] = json!("db");
        v["nodeName"] = json!("zun-a");
        let s = spec(v);
        assert_eq!(s.default_network().unwrap().network, "db-net");
        assert_eq!(s.node_name_or("tenant-a"), "zun-a");
    }

    #[test]
    fn each_error_names_its_field() {
        let mut v = good();
        v["defaultNetwork"] = json!("web");
        v["nodeName"] = json!("Bad_Node");
        v["namespaces"] = json!(["team-a", "Team B"]);
        v["networks"] = json!([{"name": "pods", "network": "a"}, {"name": "pods", "network": " ",
                                "securityGroups": [""]}]);
        v["credentials"]["secretRef"]["namespace"] = json!("");
        let paths: Vec<String> = spec(v).validate("t").into_iter().map(|e| e.path).collect();
        assert_eq!(
            paths,
            [
                "spec.nodeName",
                "spec.credentials.secretRef.namespace",
                "spec.networks[1].name",
                "spec.networks[1].network",
                "spec.networks[1].securityGroups[0]",
                "spec.defaultNetwork",
                "spec.namespaces[1]",
            ]
        );
        let mut v = good();
        v["networks"] = json!([]);
        let e = spec(v).validate("t");
        assert_eq!(e[0].path, "spec.networks");
        let e = spec(good()).validate("Tenant_A");
        assert_eq!(e[0].path, "metadata.name", "the default node name");
    }
}
