//! Application credentials for tenants (`OpenstackProject` `spec.applicationCredential`): the
//! pure parts. A credential is made by a Keystone user the operator owns for the project
//! (only a user can make its own application credentials), delivered as a `clouds.yaml` in a
//! Secret of the project's namespace, and rotated by the cloud rotation's decision
//! ([`super::decide`]): the state lives in the Secret (its credential, the rotation's
//! annotations) and in Keystone (the user's credentials, named `<prefix>-<generation>`).

pub mod run;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use openstack::adapter::CloudEndpoint;
use serde_json::json;

/// The Secret key holding the `clouds.yaml`.
pub const KEY: &str = "clouds.yaml";
/// The condition type on the `OpenstackProject`.
pub const CONDITION: &str = "TenantCredential";
/// Label on the delivered Secret.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "openstack-operator");

/// The Keystone user holding the project's credentials (in the project's domain).
pub fn user_name(project: &str) -> String {
    format!("{project}-tenant-credentials")
}

/// The description marking the user as the operator's, for this object (by uid).
pub fn user_description(namespace: &str, object: &str, uid: &str) -> String {
    format!(
        "openstack-operator: holds the application credentials of OpenstackProject {namespace}/{object} (uid {uid}); deleted with it"
    )
}

/// Whether a user's description marks it as made for the object of `uid`.
pub fn owns_user(description: &str, uid: &str) -> bool {
    description.starts_with("openstack-operator:") && description.contains(&format!("(uid {uid})"))
}

/// The credentials' name prefix: the object's name and uid (as a cloud's are).
pub fn name_prefix(object: &str, uid: &str) -> String {
    super::name_prefix(object, uid)
}

/// Whether the Secret is the operator's for the object of `uid` (its owner reference).
pub fn secret_is_ours(secret: &Secret, uid: &str) -> bool {
    secret
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == uid && o.kind == "OpenstackProject")
}

/// The delivered `clouds.yaml`: one entry, `entry`, authenticating with the application
/// credential, reaching the cloud as the operator does (written as JSON, which is YAML).
pub fn clouds_yaml(entry: &str, endpoint: &CloudEndpoint, id: &str, secret: &str) -> String {
    let mut e = json!({
        "auth_type": "v3applicationcredential",
        "auth": {
            "auth_url": endpoint.auth_url,
            "application_credential_id": id,
            "application_credential_secret": secret,
        },
    });
    if let Some(r) = &endpoint.region_name {
        e["region_name"] = r.as_str().into();
    }
    if let Some(i) = &endpoint.interface {
        e["interface"] = i.as_str().into();
    }
    if let Some(v) = &endpoint.identity_api_version {
        e["identity_api_version"] = v.as_str().into();
    }
    // A CA path is the operator's file, not the tenant's: only `verify: false` is passed on.
    if endpoint.verify == Some(false) {
        e["verify"] = false.into();
    }
    let mut clouds = serde_json::Map::new();
    clouds.insert(entry.to_string(), e);
    let doc = json!({ "clouds": clouds });
    // Serialising a Value of strings cannot fail.
    serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
}

/// The Secret's labels.
pub fn labels() -> BTreeMap<String, String> {
    BTreeMap::from([(MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string())])
}
