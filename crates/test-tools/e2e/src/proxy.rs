//! The operator behind a fault-injecting proxy ([`fault_proxy`]): the operator's clouds.yaml
//! points at the proxy, while the test's own [`TestEnv::cloud`] keeps talking to the cloud
//! directly (so checks see OpenStack as it is, not through the faults).
//!
//! ```no_run
//! # async fn t() -> anyhow::Result<()> {
//! use e2e::proxy::{Action, CloudProxy, Rule, run_proxied};
//! let bin = "target/debug/openstack-operator";
//! let (env, proxy) = CloudProxy::start_env("t", e2e::EnvOptions::new(bin, "t")).await?;
//! run_proxied(env, &proxy, async |env| {
//!     proxy.add_rule(Rule::new(Action::status(503)).service("network").every(3))?;
//!     // apply objects, wait for Ready, check env.cloud ...
//!     Ok(())
//! })
//! .await
//! # }
//! ```

use std::collections::BTreeMap;
use std::ops::Deref;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use anyhow::Context as _;
use fault_proxy::ProxyConfig;
pub use fault_proxy::{Action, FaultProxy, RequestRecord, Rule, RuleId, RuleStatus};
use futures::FutureExt as _;

use crate::env::{EnvOptions, TestEnv};
use crate::target::CloudEnv;
use crate::wait::{Check, wait_for};

/// Per-attempt response counter of the operator's OpenStack client (labels `service`,
/// `operation`, `code`).
pub const API_RESPONSES: &str = "openstack_operator_openstack_api_responses_total";

/// A [`FaultProxy`] in front of the target's cloud, and the clouds.yaml that leads to it.
pub struct CloudProxy {
    proxy: FaultProxy,
    cloud: CloudEnv,
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for CloudProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudProxy")
            .field("proxy", &self.proxy)
            .field("cloud", &self.cloud)
            .finish()
    }
}

impl Deref for CloudProxy {
    type Target = FaultProxy;

    fn deref(&self) -> &FaultProxy {
        &self.proxy
    }
}

impl CloudProxy {
    /// Starts a proxy for every service in the catalog of `cloud` and writes a clouds.yaml
    /// with the same entry, its `auth_url` on the proxy.
    pub async fn start(cloud: &CloudEnv) -> anyhow::Result<Self> {
        let config = ProxyConfig::discover(&cloud.config_file, &cloud.os_cloud)
            .await
            .with_context(|| {
                format!(
                    "reading the services of cloud {} ({}) for the proxy",
                    cloud.os_cloud,
                    cloud.config_file.display()
                )
            })?;
        let proxy = FaultProxy::start(config)
            .await
            .context("starting the fault proxy")?;
        let dir = tempfile::Builder::new()
            .prefix("e2e-proxy-")
            .tempdir()
            .context("creating a temporary directory")?;
        let config_file = dir.path().join("clouds.yaml");
        proxy
            .write_clouds_yaml(&cloud.config_file, &cloud.os_cloud, &config_file)
            .context("writing the proxied clouds.yaml")?;
        Ok(CloudProxy {
            proxy,
            cloud: CloudEnv {
                config_file,
                ..cloud.clone()
            },
            _dir: dir,
        })
    }

    /// A proxy for the cloud named by the environment and a [`TestEnv`] whose operator talks
    /// to OpenStack through it.
    pub async fn start_env(name: &str, mut opts: EnvOptions) -> anyhow::Result<(TestEnv, Self)> {
        let proxy = CloudProxy::start(&CloudEnv::from_env()?).await?;
        opts.operator.cloud = Some(proxy.cloud_env().clone());
        let env = TestEnv::start(name, opts).await?;
        Ok((env, proxy))
    }

    /// The proxied cloud (same `OS_CLOUD`, the generated clouds.yaml).
    pub fn cloud_env(&self) -> &CloudEnv {
        &self.cloud
    }

    /// The proxy.
    pub fn proxy(&self) -> &FaultProxy {
        &self.proxy
    }
}

/// [`TestEnv::run`] with the proxy's rules removed after the body (passed or not), so the
/// cleanup talks to a well-behaved cloud.
pub async fn run_proxied(
    env: TestEnv,
    proxy: &CloudProxy,
    body: impl AsyncFnOnce(&TestEnv) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    env.run(async |env| {
        let outcome = AssertUnwindSafe(body(env)).catch_unwind().await;
        proxy.clear_rules();
        match outcome {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
    .await
}

/// The operator's client service label of a proxy service name.
fn client_label(service: &str) -> &str {
    match service {
        "block-storage" => "block_storage",
        s => s,
    }
}

/// API requests (no authentication or version discovery) in the proxy's log, per client
/// service label (`identity`, `network`, `block_storage`, ...).
pub fn api_requests_by_service(log: &[RequestRecord]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for r in log.iter().filter(|r| !r.is_plumbing()) {
        *out.entry(client_label(&r.service).to_string()).or_insert(0) += 1;
    }
    out
}

/// Waits until the operator's per-attempt counters ([`API_RESPONSES`], per service) and the
/// proxy's log agree: equal counts with `exact`, else at least as many proxied requests as
/// attempts (a token revocation makes the SDK re-send a request inside one attempt). Fails
/// when the operator counted requests of a service that never reached the proxy. Returns the
/// operator's counts.
pub async fn check_all_through_proxy(
    env: &TestEnv,
    proxy: &CloudProxy,
    exact: bool,
    timeout: Duration,
) -> anyhow::Result<BTreeMap<String, u64>> {
    wait_for(
        timeout,
        Duration::from_secs(1),
        "the operator's OpenStack requests to all appear in the proxy's log",
        async || {
            let m = env.operator.metrics().await?;
            let attempts: BTreeMap<String, u64> = m
                .by_label(API_RESPONSES, "service")
                .into_iter()
                .map(|(k, v)| (k, v as u64))
                .collect();
            let proxied = api_requests_by_service(&proxy.requests());
            let ok = !attempts.is_empty()
                && attempts.iter().all(|(s, n)| {
                    let p = proxied.get(s).copied().unwrap_or(0);
                    if exact { p == *n } else { p >= *n }
                })
                && (!exact || proxied.keys().all(|s| attempts.contains_key(s)));
            Ok(if ok {
                Check::Done(attempts)
            } else {
                Check::Pending(format!(
                    "operator attempts {attempts:?}, proxied requests {proxied:?}"
                ))
            })
        },
    )
    .await
}

/// Successful creates in the proxy's log, per `METHOD path` with ids replaced by `{id}`
/// (`POST /v2.0/networks`, `PUT /v2.0/routers/{id}/add_router_interface`, ...): what the
/// upstream did, whatever the operator was told.
pub fn upstream_writes(log: &[RequestRecord]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for r in log
        .iter()
        .filter(|r| r.is_write() && !r.is_plumbing())
        .filter(|r| r.upstream_status.is_some_and(|s| (200..300).contains(&s)))
    {
        *out.entry(format!("{} {}", r.method, generic_path(&r.path)))
            .or_insert(0) += 1;
    }
    out
}

/// The log as a table, one request a line (for failure messages).
pub fn log_table(log: &[RequestRecord]) -> String {
    log.iter()
        .map(|r| {
            let status = r
                .status
                .map_or_else(|| "drop".to_string(), |s| s.to_string());
            let query = r
                .query
                .as_deref()
                .map(|q| format!("?{q}"))
                .unwrap_or_default();
            let faults = if r.faults.is_empty() {
                String::new()
            } else {
                format!("  [{}]", r.faults.join("; "))
            };
            format!(
                "{:>5} {:>7}ms {:<13} {:<6} {}{query} -> {status}{faults}",
                r.seq, r.offset_ms, r.service, r.method, r.path
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The rules and their counters, one a line.
pub fn rules_table(rules: &[RuleStatus]) -> String {
    rules
        .iter()
        .map(|r| {
            format!(
                "  rule {} {:<40} matched {:>4} fired {:>3}",
                r.id,
                r.rule.label(),
                r.matched,
                r.fired
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A path with its id-like segments (hex or UUIDs of 16+ characters, numbers) as `{id}`.
pub fn generic_path(path: &str) -> String {
    path.split('/')
        .map(|seg| {
            let hexish = seg.len() >= 16 && seg.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
            let number = !seg.is_empty() && seg.chars().all(|c| c.is_ascii_digit());
            if hexish || number { "{id}" } else { seg }
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generic_paths() {
        assert_eq!(
            generic_path("/v2.0/routers/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0/add_router_interface"),
            "/v2.0/routers/{id}/add_router_interface"
        );
        assert_eq!(
            generic_path(
                "/v3/projects/643ad9abd934475dbef275a514160aa1/groups/0123456789abcdef0123/roles/x"
            ),
            "/v3/projects/{id}/groups/{id}/roles/x"
        );
        assert_eq!(
            generic_path("/v2.1/flavors/42/os-extra_specs"),
            "/v2.1/flavors/{id}/os-extra_specs"
        );
        assert_eq!(generic_path("/v2.0/networks"), "/v2.0/networks");
    }
}
