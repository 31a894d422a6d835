//! What the credential tests share (`e2e_clouds`, `e2e_rotation`, `e2e_tenant_credentials`):
//! the test cloud's admin with its Keystone URL, and a `clouds.yaml` entry read back from a
//! Secret.

use std::collections::BTreeMap;

use anyhow::Context as _;
use e2e::TestEnv;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use openstack::adapter::{ClientOptions, CloudSelector, Core};
use serde_json::Value;

/// The test cloud's admin (the operator's own credentials) and its Keystone's `auth_url`.
pub async fn admin_and_auth_url(env: &TestEnv) -> anyhow::Result<(Core, String)> {
    let target = env.target.cloud_env();
    let admin = Core::connect(
        &CloudSelector::File {
            path: target.config_file.clone(),
            cloud: target.os_cloud.clone(),
        },
        ClientOptions::default(),
    )
    .await?;
    let config = std::fs::read_to_string(&target.config_file)?;
    let config = api::manifest::documents(&config)?
        .into_iter()
        .next()
        .context("the test cloud's clouds.yaml")?;
    let auth_url = config["clouds"][&target.os_cloud]["auth"]["auth_url"]
        .as_str()
        .context("the test cloud's auth_url")?
        .to_string();
    Ok((admin, auth_url))
}

/// The entry `entry` of the `clouds.yaml` key of Secret `name` in the test's namespace, and
/// the Secret's annotations.
pub async fn secret_clouds_entry(
    env: &TestEnv,
    name: &str,
    entry: &str,
) -> anyhow::Result<(Value, BTreeMap<String, String>)> {
    let s: Secret = Api::namespaced(env.client.clone(), &env.namespace)
        .get(name)
        .await?;
    let yaml = s
        .data
        .as_ref()
        .and_then(|d| d.get("clouds.yaml"))
        .map(|v| String::from_utf8_lossy(&v.0).to_string())
        .with_context(|| format!("Secret {name} has no clouds.yaml"))?;
    let doc = api::manifest::documents(&yaml)?
        .into_iter()
        .next()
        .with_context(|| format!("Secret {name}'s clouds.yaml is empty"))?;
    Ok((
        doc["clouds"][entry].clone(),
        s.metadata.annotations.unwrap_or_default(),
    ))
}
