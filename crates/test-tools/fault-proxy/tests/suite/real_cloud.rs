//! The proxy in front of the real test cloud: discovery from the catalog, the workspace's
//! OpenStack client through the generated clouds.yaml, no request escaping the proxy, and a
//! genuine token revocation.
//!
//! Needs `OS_CLOUD`/`OS_CLIENT_CONFIG_FILE` (`eval "$(scripts/test-cloud env)"`); without them
//! the tests FAIL (so a run without a cloud cannot pass silently); `OPENSTACK_TESTS=skip`
//! turns them into no-ops explicitly.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use fault_proxy::{Action, FaultProxy, ProxyConfig, RequestRecord, Rule};
use openstack::Cloud;
use openstack::adapter::{ClientOptions, CloudSelector, Core, Metrics};
use openstack::model::NetworkFilter;

fn skipped() -> bool {
    if std::env::var("OPENSTACK_TESTS").as_deref() == Ok("skip") {
        eprintln!("OPENSTACK_TESTS=skip: not running against a cloud");
        return true;
    }
    false
}

fn cloud_env() -> (PathBuf, String) {
    let file = std::env::var("OS_CLIENT_CONFIG_FILE").unwrap_or_default();
    let cloud = std::env::var("OS_CLOUD").unwrap_or_default();
    assert!(
        !file.is_empty() && !cloud.is_empty(),
        "these tests need an OpenStack: run `eval \"$(scripts/test-cloud env)\"` (after \
         `scripts/test-cloud up`) or set OPENSTACK_TESTS=skip"
    );
    (PathBuf::from(file), cloud)
}

struct Proxied {
    proxy: FaultProxy,
    core: Core,
    metrics: Metrics,
    _dir: tempfile::TempDir,
}

/// A proxy for the test cloud and an OpenStack client connected through it.
async fn proxied() -> Proxied {
    let (file, cloud) = cloud_env();
    let config = ProxyConfig::discover(&file, &cloud)
        .await
        .expect("discovering the test cloud's services");
    let proxy = FaultProxy::start(config).await.expect("starting the proxy");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("clouds.yaml");
    proxy
        .write_clouds_yaml(&file, &cloud, &path)
        .expect("writing the proxied clouds.yaml");
    let metrics = Metrics::new();
    let opts = ClientOptions {
        requests_per_second: 0,
        timeout: Duration::from_secs(60),
        metrics: metrics.clone(),
        ..ClientOptions::default()
    };
    let core = Core::connect(&CloudSelector::File { path, cloud }, opts)
        .await
        .expect("connecting through the proxy");
    Proxied {
        proxy,
        core,
        metrics,
        _dir: dir,
    }
}

/// HTTP attempts per service label from the client's own metrics.
fn attempts_by_service(metrics: &Metrics) -> BTreeMap<String, u64> {
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encoding metrics");
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("openstack_operator_openstack_api_responses_total{"))
    {
        let service = line
            .split("service=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .expect("a service label");
        let n: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .expect("a value");
        *out.entry(service.to_string()).or_insert(0) += n as u64;
    }
    out
}

/// The proxy's API requests (no auth or version discovery) per client service label.
fn proxied_by_service(log: &[RequestRecord]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for r in log.iter().filter(|r| !r.is_plumbing()) {
        let label = match r.service.as_str() {
            "block-storage" => "block_storage",
            s => s,
        };
        *out.entry(label.to_string()).or_insert(0) += 1;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_goes_through_the_proxy() {
    if skipped() {
        return;
    }
    let p = proxied().await;
    let services: Vec<&str> = p
        .proxy
        .routes()
        .iter()
        .map(|r| r.service.as_str())
        .collect();
    for s in [
        "identity",
        "image",
        "network",
        "compute",
        "placement",
        "block-storage",
    ] {
        assert!(services.contains(&s), "{s} discovered: {services:?}");
    }
    let cloud = Cloud::from_core(p.core.clone());
    let project = p.core.current_project_id().expect("a project-scoped token");
    cloud
        .identity
        .get_project(&project)
        .await
        .expect("Keystone");
    let nets = cloud
        .network
        .list_networks(&NetworkFilter {
            name: Some("external".into()),
            ..Default::default()
        })
        .await
        .expect("Neutron");
    assert!(!nets.is_empty(), "the test cloud's external network");
    cloud.compute.list_flavors().await.expect("Nova");
    cloud
        .image
        .list_images_by_name("fault-proxy-no-such-image")
        .await
        .expect("Glance");
    cloud
        .block_storage
        .get_volume_quota(&project)
        .await
        .expect("Cinder");

    let log = p.proxy.requests();
    let auth: Vec<&RequestRecord> = log
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/auth/tokens"))
        .collect();
    assert_eq!(auth.len(), 1, "authentication went through the proxy");
    assert_eq!(auth[0].status, Some(201));
    let attempts = attempts_by_service(&p.metrics);
    let proxied = proxied_by_service(&log);
    for s in ["identity", "network", "compute", "image", "block_storage"] {
        assert!(
            attempts.get(s).copied().unwrap_or(0) > 0,
            "the client called {s}: {attempts:?}"
        );
    }
    assert_eq!(
        proxied, attempts,
        "every API request the client made (its metrics) is in the proxy's log; log: {log:#?}"
    );
    assert!(
        log.iter().all(|r| r.status.is_some_and(|s| s < 400)),
        "{log:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_token_is_rejected_by_keystone_and_the_client_reauthenticates() {
    if skipped() {
        return;
    }
    let p = proxied().await;
    let cloud = Cloud::from_core(p.core.clone());
    let project = p.core.current_project_id().expect("a project-scoped token");
    let id = p
        .proxy
        .add_rule(
            Rule::new(Action::RevokeToken)
                .service("identity")
                .method("GET")
                .path_contains("/v3/projects/")
                .first(1),
        )
        .expect("adding the rule");
    p.proxy.clear_requests();
    let got = cloud
        .identity
        .get_project(&project)
        .await
        .expect("the call succeeds after re-authentication");
    assert_eq!(got.id, project);
    assert_eq!(p.proxy.fired(id), 1);
    let log = p.proxy.requests();
    let gets: Vec<&RequestRecord> = log
        .iter()
        .filter(|r| r.path.starts_with("/v3/projects/"))
        .collect();
    assert!(
        gets.len() >= 2,
        "a rejected GET and a retried one: {log:#?}"
    );
    assert_eq!(
        gets[0].status,
        Some(401),
        "Keystone rejects the revoked token: {log:#?}"
    );
    assert!(
        gets[0].faults[0].contains("Keystone answered 204"),
        "{:?}",
        gets[0].faults
    );
    assert_eq!(gets.last().and_then(|r| r.status), Some(200));
    assert!(
        log.iter()
            .any(|r| r.method == "POST" && r.path.ends_with("/auth/tokens")),
        "the client re-authenticated through the proxy: {log:#?}"
    );
}
