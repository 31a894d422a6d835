//! Shared setup of the integration tests against a real cloud.
//!
//! The tests need `OS_CLIENT_CONFIG_FILE`/`OS_CLOUD` (e.g.
//! `eval "$(scripts/test-cloud env)"`). Without them they FAIL, so a CI run
//! without a cloud cannot pass silently; `OPENSTACK_TESTS=skip` turns them
//! into no-ops explicitly.

#![allow(dead_code)]

use std::time::Duration;

use openstack::Cloud;
use openstack::adapter::{ClientOptions, CloudSelector, Core, Metrics};

/// Whether the tests were explicitly disabled.
pub fn skipped() -> bool {
    if std::env::var("OPENSTACK_TESTS").as_deref() == Ok("skip") {
        eprintln!("OPENSTACK_TESTS=skip: not running against a cloud");
        return true;
    }
    false
}

/// Connect to the test cloud, or panic with instructions.
pub async fn core_with(opts: ClientOptions) -> Core {
    let file = std::env::var("OS_CLIENT_CONFIG_FILE").unwrap_or_default();
    let cloud = std::env::var("OS_CLOUD").unwrap_or_default();
    assert!(
        !(file.is_empty() && cloud.is_empty()),
        "integration tests need an OpenStack: run `eval \"$(scripts/test-cloud env)\"` \
         (after `scripts/test-cloud up`) or set OPENSTACK_TESTS=skip"
    );
    Core::connect(&CloudSelector::Env, opts)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the test cloud ({cloud} in {file}): {e}"))
}

/// Connect with default options (no rate limit so tests run fast).
pub async fn core() -> Core {
    core_with(ClientOptions {
        requests_per_second: 0,
        timeout: Duration::from_secs(60),
        metrics: Metrics::new(),
        ..ClientOptions::default()
    })
    .await
}

/// All five ports on a fresh connection.
pub async fn cloud() -> (Cloud, Core) {
    let core = core().await;
    (Cloud::from_core(core.clone()), core)
}

/// A unique name for this test run.
pub fn unique(prefix: &str) -> String {
    format!("ost-{prefix}-{}", &uuid::Uuid::new_v4().simple().to_string()[..10])
}

/// The `default` domain id of the test cloud.
pub const DEFAULT_DOMAIN: &str = "default";
