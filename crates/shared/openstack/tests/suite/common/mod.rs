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
    // Keystone may still be starting (or restarting) when the tests begin:
    // keep trying transient failures for a while, fail on anything else.
    let deadline = std::time::Instant::now() + Duration::from_secs(240);
    loop {
        match Core::connect(&CloudSelector::Env, opts.clone()).await {
            Ok(core) => return core,
            Err(e) if e.is_transient() && std::time::Instant::now() < deadline => {
                eprintln!("test cloud not ready yet ({e}); retrying");
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            Err(e) => panic!("cannot connect to the test cloud ({cloud} in {file}): {e}"),
        }
    }
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
    format!(
        "ost-{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    )
}

/// The `default` domain id of the test cloud.
pub const DEFAULT_DOMAIN: &str = "default";

/// Something a test created and must delete.
#[derive(Clone, Debug)]
pub enum Created {
    /// A domain (disabled, then deleted).
    Domain(String),
    /// A project.
    Project(String),
    /// A group.
    Group(String),
    /// An identity provider.
    Idp(String),
    /// A mapping.
    Mapping(String),
    /// A flavor.
    Flavor(String),
    /// A user (created with a raw request; the port does not manage users).
    User(String),
}

/// Records created objects and deletes them (newest first) when the test
/// body finishes, whether it passed or panicked.
#[derive(Clone, Default)]
pub struct Janitor {
    items: std::sync::Arc<std::sync::Mutex<Vec<Created>>>,
    core: Option<Core>,
}

impl Janitor {
    /// A janitor that can also delete users (needs raw requests).
    pub fn with_core(core: &Core) -> Self {
        Self {
            core: Some(core.clone()),
            ..Self::default()
        }
    }

    /// Remember an object for cleanup.
    pub fn track(&self, c: Created) {
        self.items.lock().unwrap_or_else(|p| p.into_inner()).push(c);
    }

    /// Run `body`, then clean up, then re-raise a panic from `body`.
    pub async fn run<F>(&self, cloud: &Cloud, body: F)
    where
        F: std::future::Future<Output = ()>,
    {
        use futures::FutureExt;
        let result = std::panic::AssertUnwindSafe(body).catch_unwind().await;
        let items: Vec<Created> =
            std::mem::take(&mut *self.items.lock().unwrap_or_else(|p| p.into_inner()));
        for item in items.into_iter().rev() {
            let r = match &item {
                Created::Domain(id) => {
                    let _ = cloud
                        .identity
                        .update_domain(
                            id,
                            &openstack::model::DomainUpdate {
                                enabled: Some(false),
                                ..Default::default()
                            },
                        )
                        .await;
                    cloud.identity.delete_domain(id).await
                }
                Created::Project(id) => cloud.identity.delete_project(id).await,
                Created::Group(id) => cloud.identity.delete_group(id).await,
                Created::Idp(id) => cloud.identity.delete_identity_provider(id).await,
                Created::Mapping(id) => cloud.identity.delete_mapping(id).await,
                Created::Flavor(id) => cloud.compute.delete_flavor(id).await,
                Created::User(id) => match &self.core {
                    Some(core) => delete_user(core, id).await,
                    None => Ok(()),
                },
            };
            if let Err(e) = r
                && !e.is_not_found()
            {
                eprintln!("cleanup of {item:?} failed: {e}");
            }
        }
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    }
}

/// Create a throwaway user in the default domain. Tests use it instead of
/// `admin` because Keystone revokes all of a user's tokens when that user
/// leaves a group, which would disturb every other test using `admin`.
pub async fn create_user(core: &Core, name: &str) -> String {
    use openstack::adapter::{Request, Service};
    let body = serde_json::json!({"user": {
        "name": name,
        "domain_id": DEFAULT_DOMAIN,
        "enabled": true,
        "password": uuid::Uuid::new_v4().to_string(),
    }});
    let req = Request::post(Service::Identity, "create_user", "users")
        .json(&body)
        .unwrap();
    let v: serde_json::Value = core.send(&req).await.unwrap().json_at("user").unwrap();
    v["id"].as_str().unwrap().to_string()
}

/// Delete a user created by [`create_user`].
pub async fn delete_user(core: &Core, id: &str) -> openstack::Result<()> {
    use openstack::adapter::{Request, Service};
    core.send(&Request::delete(
        Service::Identity,
        "delete_user",
        format!("users/{id}"),
    ))
    .await
    .map(|_| ())
}
