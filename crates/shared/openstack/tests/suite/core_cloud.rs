//! The client core against the real test cloud: password and
//! application-credential auth, bad credentials, re-authentication after the
//! token was revoked, metrics, and per-call latency.

use crate::common;

use std::time::{Duration, Instant};

use common::{core, core_with, skipped};
use openstack::Cloud;
use openstack::Error;
use openstack::adapter::{ClientOptions, CloudSelector, Core, Metrics};

fn clouds_file() -> std::path::PathBuf {
    std::env::var_os("OS_CLIENT_CONFIG_FILE")
        .map(Into::into)
        .expect("OS_CLIENT_CONFIG_FILE must be set for this test")
}

#[tokio::test]
async fn password_auth_catalog_and_metrics() {
    if skipped() {
        return;
    }
    let metrics = Metrics::new();
    let core = core_with(ClientOptions {
        metrics: metrics.clone(),
        requests_per_second: 0,
        ..ClientOptions::default()
    })
    .await;
    assert!(core.current_project_id().is_some());
    let cloud = Cloud::from_core(core.clone());
    // One call per service proves catalog + discovery for each.
    let project = core.current_project_id().unwrap();
    cloud.identity.list_roles().await.unwrap();
    cloud.compute.get_compute_quota(&project).await.unwrap();
    cloud
        .block_storage
        .get_volume_quota(&project)
        .await
        .unwrap();

    let mut reg = prometheus_client::registry::Registry::default();
    metrics.register(&mut reg);
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &reg).unwrap();
    for svc in ["identity", "compute", "block_storage"] {
        assert!(
            out.contains(&format!(
                "openstack_operator_openstack_api_calls_total{{service=\"{svc}\""
            )),
            "{svc} missing in\n{out}"
        );
    }
}

#[tokio::test]
async fn application_credential_auth() {
    if skipped() {
        return;
    }
    let core = Core::connect(
        &CloudSelector::File {
            path: clouds_file(),
            cloud: "local-admin-appcred".into(),
        },
        ClientOptions::default(),
    )
    .await
    .unwrap();
    let cloud = Cloud::from_core(core);
    assert!(cloud.identity.find_role("member").await.unwrap().is_some());
}

#[tokio::test]
async fn wrong_password_is_unauthorized_and_not_leaked() {
    if skipped() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("os-badpw-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("clouds.yaml");
    std::fs::write(
        &path,
        "clouds:\n  bad:\n    auth_type: password\n    region_name: RegionOne\n    auth:\n      auth_url: http://127.0.0.1:5000/v3\n      username: admin\n      password: definitely-wrong-pw\n      user_domain_name: Default\n      project_name: admin\n      project_domain_name: Default\n",
    )
    .unwrap();
    let e = Core::connect(
        &CloudSelector::File {
            path,
            cloud: "bad".into(),
        },
        ClientOptions::default(),
    )
    .await
    .unwrap_err();
    let _ = std::fs::remove_dir_all(dir);
    assert!(matches!(e, Error::Unauthorized { .. }), "{e}");
    assert!(!e.to_string().contains("definitely-wrong-pw"), "{e}");
}

#[tokio::test]
async fn reauthenticates_after_token_revocation() {
    if skipped() {
        return;
    }
    let core = core().await;
    let cloud = Cloud::from_core(core.clone());
    cloud.identity.list_roles().await.unwrap();
    core.revoke_current_token_for_tests().await.unwrap();
    // The next call meets a 401, the SDK re-authenticates once, and the
    // call succeeds.
    assert!(cloud.identity.find_role("member").await.unwrap().is_some());
    cloud.compute.list_flavors().await.unwrap();
}

#[tokio::test]
async fn measure_latency() {
    if skipped() {
        return;
    }
    let core = core().await;
    let cloud = Cloud::from_core(core.clone());
    let project = core.current_project_id().unwrap();
    let n = 20u32;
    let mut report = Vec::new();
    for (what, fut) in [
        ("identity.get_project", 0),
        ("compute.list_flavors", 1),
        ("block_storage.get_volume_quota", 2),
    ] {
        let start = Instant::now();
        for _ in 0..n {
            match fut {
                0 => drop(cloud.identity.get_project(&project).await.unwrap()),
                1 => drop(cloud.compute.list_flavors().await.unwrap()),
                _ => drop(
                    cloud
                        .block_storage
                        .get_volume_quota(&project)
                        .await
                        .unwrap(),
                ),
            }
        }
        let avg = start.elapsed() / n;
        report.push(format!("{what}: {:.1} ms/call", avg.as_secs_f64() * 1000.0));
        assert!(avg < Duration::from_secs(5));
    }
    let start = Instant::now();
    let _ = core_with(ClientOptions::default()).await;
    report.push(format!(
        "connect (auth + discovery): {:.0} ms",
        start.elapsed().as_secs_f64() * 1000.0
    ));
    eprintln!("LATENCY {}", report.join("; "));
}
