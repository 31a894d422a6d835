//! Creates whose answer is lost after the service carried them out (the fault proxy forwards
//! the request, then answers 502 or drops the connection): the adapter recovers the object
//! the request made, tagged, instead of leaving an unmarked one behind; a create that was
//! refused (not forwarded) still fails and leaves nothing.
//!
//! Needs `OS_CLIENT_CONFIG_FILE`/`OS_CLOUD` (`eval "$(scripts/test-cloud env)"`); fails
//! without them unless `OPENSTACK_TESTS=skip`.

use crate::common;

use std::time::Duration;

use futures::FutureExt as _;

use common::{DEFAULT_DOMAIN, skipped, unique};
use fault_proxy::{Action, FaultProxy, ProxyConfig, Rule};
use openstack::model::*;
use openstack::{Cloud, OptionalExt as _};

const MARK: &str = "managed-by-openstack-operator";

/// Objects found in Neutron: id and tags.
type Found = Vec<(String, Vec<String>)>;

/// A fresh project for a test's Neutron objects (the test deletes it).
async fn scratch_project(direct: &Cloud) -> Project {
    direct
        .identity
        .create_project(&ProjectCreate {
            name: unique("lostproj"),
            domain_id: DEFAULT_DOMAIN.into(),
            description: "lost create tests".into(),
            enabled: true,
            tags: vec![],
        })
        .await
        .expect("a project")
}

/// A proxy in front of the test cloud and a client connected through it.
async fn proxied() -> (FaultProxy, Cloud, tempfile::TempDir) {
    let file = std::env::var("OS_CLIENT_CONFIG_FILE").unwrap_or_default();
    let cloud = std::env::var("OS_CLOUD").unwrap_or_default();
    assert!(
        !file.is_empty() && !cloud.is_empty(),
        "needs an OpenStack: eval \"$(scripts/test-cloud env)\" or OPENSTACK_TESTS=skip"
    );
    let proxy = FaultProxy::start(
        ProxyConfig::discover(&file, &cloud)
            .await
            .expect("discovering the test cloud"),
    )
    .await
    .expect("starting the proxy");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("clouds.yaml");
    proxy
        .write_clouds_yaml(&file, &cloud, &path)
        .expect("writing clouds.yaml");
    let opts = openstack::adapter::ClientOptions {
        requests_per_second: 0,
        timeout: Duration::from_secs(60),
        ..Default::default()
    };
    let c = Cloud::connect(
        &openstack::adapter::CloudSelector::File { path, cloud },
        opts,
    )
    .await
    .expect("connecting through the proxy");
    (proxy, c, dir)
}

fn lose(proxy: &FaultProxy, path_regex: &str, drop: bool) -> u64 {
    let action = if drop {
        Action::lose_response_drop()
    } else {
        Action::lose_response_502()
    };
    proxy
        .add_rule(
            Rule::new(action)
                .method("POST")
                .path_regex(path_regex)
                .first(1),
        )
        .expect("adding a rule")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_neutron_creates_are_recovered_tagged() {
    if skipped() {
        return;
    }
    let (proxy, via_proxy, _dir) = proxied().await;
    let (direct, _core) = common::cloud().await;
    let project = scratch_project(&direct).await;
    let pid = Some(project.id.clone());
    let tags = vec![MARK.to_string(), unique("owner")];
    let rules = [
        lose(&proxy, "^/v2.0/networks$", false),
        lose(&proxy, "^/v2.0/subnets$", true),
        lose(&proxy, "^/v2.0/routers$", false),
        lose(&proxy, "^/v2.0/security-groups$", true),
    ];
    let n = &via_proxy.network;
    let made = std::panic::AssertUnwindSafe(async {
        let net = n
            .create_network(&NetworkCreate {
                name: unique("lostnet"),
                project_id: pid.clone(),
                tags: tags.clone(),
                ..Default::default()
            })
            .await
            .expect("the network create is recovered");
        let sub = n
            .create_subnet(&SubnetCreate {
                network_id: net.id.clone(),
                name: unique("lostsub"),
                ip_version: 4,
                cidr: "10.99.7.0/24".into(),
                project_id: pid.clone(),
                tags: tags.clone(),
                ..Default::default()
            })
            .await
            .expect("the subnet create is recovered");
        let router = n
            .create_router(&RouterCreate {
                name: unique("lostrouter"),
                project_id: pid.clone(),
                tags: tags.clone(),
                ..Default::default()
            })
            .await
            .expect("the router create is recovered");
        let sg = n
            .create_security_group(&SecurityGroupCreate {
                name: unique("lostsg"),
                project_id: pid.clone(),
                tags: tags.clone(),
                ..Default::default()
            })
            .await
            .expect("the security group create is recovered");
        (net, sub, router, sg)
    })
    .catch_unwind()
    .await;
    let fired: Vec<u64> = rules.iter().map(|id| proxy.fired(*id)).collect();

    // What is in the project, read directly; then everything in it is removed (also after a
    // failed create) before the assertions.
    let d = &direct.network;
    let nets = d
        .list_networks(&NetworkFilter {
            project_id: pid.clone(),
            ..Default::default()
        })
        .await
        .unwrap_or_default();
    let subs = d
        .list_subnets(&SubnetFilter {
            project_id: pid.clone(),
            ..Default::default()
        })
        .await
        .unwrap_or_default();
    let routers = d
        .list_routers(&RouterFilter {
            project_id: pid.clone(),
            ..Default::default()
        })
        .await
        .unwrap_or_default();
    let all_sgs = d
        .list_security_groups(&SecurityGroupFilter {
            project_id: pid.clone(),
            ..Default::default()
        })
        .await
        .unwrap_or_default();
    for g in &all_sgs {
        let _ = d.delete_security_group(&g.id).await.optional();
    }
    for r in &routers {
        let _ = d.delete_router(&r.id).await.optional();
    }
    for x in &subs {
        let _ = d.delete_subnet(&x.id).await.optional();
    }
    for x in &nets {
        let _ = d.delete_network(&x.id).await.optional();
    }
    let _ = direct.identity.delete_project(&project.id).await.optional();
    let (net, sub, router, sg) = made.unwrap_or_else(|p| std::panic::resume_unwind(p));
    let sgs: Vec<SecurityGroup> = all_sgs
        .into_iter()
        .filter(|g| g.name != "default")
        .collect();

    assert_eq!(fired, [1, 1, 1, 1], "every create lost its answer once");
    let checks: [(&str, Found, &String); 4] = [
        (
            "network",
            nets.into_iter().map(|x| (x.id, x.tags)).collect(),
            &net.id,
        ),
        (
            "subnet",
            subs.into_iter().map(|x| (x.id, x.tags)).collect(),
            &sub.id,
        ),
        (
            "router",
            routers.into_iter().map(|x| (x.id, x.tags)).collect(),
            &router.id,
        ),
        (
            "security group",
            sgs.into_iter().map(|x| (x.id, x.tags)).collect(),
            &sg.id,
        ),
    ];
    for (what, found, id) in checks {
        assert_eq!(found.len(), 1, "exactly one {what}: {found:?}");
        assert_eq!(&found[0].0, id, "the {what} returned is the one made");
        let mut have = found[0].1.clone();
        have.sort();
        let mut want = tags.clone();
        want.sort();
        assert_eq!(have, want, "the recovered {what} is tagged");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_flavor_create_is_recovered_and_refused_one_fails() {
    if skipped() {
        return;
    }
    let (proxy, via_proxy, _dir) = proxied().await;
    let (direct, _core) = common::cloud().await;
    let flavor = |name: &str| FlavorCreate {
        name: name.to_string(),
        id: None,
        vcpus: 1,
        ram_mb: 128,
        disk_gb: 1,
        ephemeral_gb: 0,
        swap_mb: 0,
        is_public: false,
        description: None,
    };
    let lost = lose(&proxy, "^/v2.1/flavors$", true);
    let name = unique("lostflavor");
    let made = via_proxy.compute.create_flavor(&flavor(&name)).await;
    let refused_rule = proxy
        .add_rule(
            Rule::new(Action::status(500))
                .method("POST")
                .path_regex("^/v2.1/flavors$")
                .first(1),
        )
        .expect("adding a rule");
    let refused_name = unique("refusedflavor");
    let refused = via_proxy
        .compute
        .create_flavor(&flavor(&refused_name))
        .await;
    let found = direct.compute.find_flavor(&name).await.unwrap();
    let found_refused = direct.compute.find_flavor(&refused_name).await.unwrap();
    for f in found.iter().chain(found_refused.iter()) {
        let _ = direct.compute.delete_flavor(&f.id).await.optional();
    }

    assert_eq!(proxy.fired(lost), 1);
    let made = made.expect("the lost flavor create is recovered");
    assert_eq!(made.name, name);
    assert_eq!(found.map(|f| f.id), Some(made.id), "the one Nova made");
    assert_eq!(proxy.fired(refused_rule), 1);
    let e = refused.expect_err("a refused create fails");
    assert!(e.is_transient(), "{e}");
    assert!(found_refused.is_none(), "a refused create made nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_create_whose_lookup_fails_is_tagged_by_the_next_list() {
    if skipped() {
        return;
    }
    let (proxy, via_proxy, _dir) = proxied().await;
    let (direct, _core) = common::cloud().await;
    let project = scratch_project(&direct).await;
    let pid = Some(project.id.clone());
    let tags = vec![MARK.to_string(), unique("owner")];
    let lost = lose(&proxy, "^/v2.0/networks$", false);
    // The lookup after the lost answer fails: 503 on every attempt (the client retries 3 times).
    let refused = proxy
        .add_rule(
            Rule::new(Action::status(503))
                .method("GET")
                .path_regex("^/v2.0/networks(\\?|$)")
                .first(4),
        )
        .expect("adding a rule");
    let name = unique("lostnet");
    let created = via_proxy
        .network
        .create_network(&NetworkCreate {
            name: name.clone(),
            project_id: pid.clone(),
            tags: tags.clone(),
            ..Default::default()
        })
        .await;
    let filter = NetworkFilter {
        project_id: pid.clone(),
        ..Default::default()
    };
    let right_after = direct.network.list_networks(&filter).await;
    // The next list through the adapter looks again and tags what the create made.
    let listed = via_proxy.network.list_networks(&filter).await;
    let in_the_end = direct.network.list_networks(&filter).await;

    for n in in_the_end.as_ref().map(Vec::as_slice).unwrap_or_default() {
        let _ = direct.network.delete_network(&n.id).await.optional();
    }
    for g in direct
        .network
        .list_security_groups(&SecurityGroupFilter {
            project_id: pid.clone(),
            ..Default::default()
        })
        .await
        .unwrap_or_default()
    {
        let _ = direct.network.delete_security_group(&g.id).await.optional();
    }
    let _ = direct.identity.delete_project(&project.id).await.optional();

    assert_eq!((proxy.fired(lost), proxy.fired(refused)), (1, 4));
    let e = created.expect_err("the create fails: its answer and the lookup were lost");
    assert!(e.is_transient(), "{e}");
    let right_after = right_after.expect("listing directly");
    assert_eq!(
        right_after.len(),
        1,
        "Neutron made the network: {right_after:?}"
    );
    assert!(right_after[0].tags.is_empty(), "untagged at first");
    let listed = listed.expect("the list through the adapter");
    assert_eq!(listed.len(), 1, "{listed:?}");
    let mut have = listed[0].tags.clone();
    have.sort();
    let mut want = tags.clone();
    want.sort();
    assert_eq!(have, want, "the list already shows it tagged");
    let in_the_end = in_the_end.expect("listing directly");
    assert_eq!(in_the_end.len(), 1, "still one network: {in_the_end:?}");
    assert_eq!(in_the_end[0].name, name);
}
