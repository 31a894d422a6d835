//! End to end under OpenStack faults: the operator talks to the cloud through the fault proxy
//! (`crates/test-tools/fault-proxy`), the test checks the cloud directly. Each scenario makes a full
//! tenant (an OpenstackDomain, an OpenstackProject in it with a routed network, a security
//! group with rules, quotas and a role binding, an OpenstackFlavor and an OpenstackImage)
//! converge to Ready while the proxy injects faults, then compares everything in the cloud
//! carrying the test's cluster mark with the expected inventory (counts, no duplicates, nothing
//! unmarked), deletes it all and checks that nothing is left.
//!
//! Scenarios: transient errors on every service (500, 503, 429 with Retry-After, dropped
//! connections); lost responses on every create and delete the operator makes; token
//! revocation in Keystone mid-reconcile; 2 s of latency on every Neutron request; every second
//! router create failing; a flavor whose marking fails after its create.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use api::{OpenstackDomain, OpenstackFlavor, OpenstackImage, OpenstackProject};
use e2e::TestEnv;
use e2e::inventory::{
    DOMAIN, FLAVOR, GROUP, IMAGE, Inventory, NETWORK, PROJECT, ROLE_ASSIGNMENT, ROUTER,
    ROUTER_INTERFACE, SECURITY_GROUP, SECURITY_GROUP_RULE, SUBNET, Scope,
};
use e2e::k8s::{condition, is_ready};
use e2e::proxy::{
    Action, CloudProxy, Rule, RuleId, check_all_through_proxy, log_table, rules_table, run_proxied,
    upstream_writes,
};
use e2e::{EnvOptions, Managed};
use futures::FutureExt as _;
use openstack::OptionalExt as _;
use openstack::adapter::{ClientOptions, CloudSelector, Core, Request, Service};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_openstack-operator");
/// Time for everything to converge under faults (backoff after failed passes included).
const READY: Duration = Duration::from_secs(300);

async fn start(test: &str) -> anyhow::Result<(TestEnv, CloudProxy)> {
    let mut opts = EnvOptions::new(BIN, &format!("faults_openstack-{test}"));
    opts.cleanup_timeout = READY;
    CloudProxy::start_env(test, opts).await
}

// ----------------------------------------------------------------------------- the tenant

/// The names of one scenario's objects.
struct Tenant {
    domain: String,
    flavor: String,
    image: String,
    project: String,
    project_name: String,
    user: String,
    /// Routed networks of the project.
    networks: usize,
}

impl Tenant {
    fn new(env: &TestEnv, networks: usize) -> Self {
        let project = env.unique("prj");
        Tenant {
            domain: env.unique("dom"),
            flavor: env.unique("flv"),
            image: env.unique("img"),
            project_name: format!("{project}.example.com"),
            project,
            user: format!("{}@example.com", env.unique("user")),
            networks,
        }
    }

    fn domain_yaml(&self) -> String {
        let d = &self.domain;
        format!(
            "apiVersion: sunet.se/v1alpha1\nkind: OpenstackDomain\nmetadata:\n  name: {d}\nspec:\n  name: {d}\n  description: fault scenario\n  enabled: true\n"
        )
    }

    fn flavor_yaml(&self) -> String {
        let f = &self.flavor;
        format!(
            "apiVersion: sunet.se/v1alpha1\nkind: OpenstackFlavor\nmetadata:\n  name: {f}\nspec:\n  name: {f}\n  vcpus: 1\n  ram: 256\n  disk: 1\n  isPublic: true\n  extraSpecs:\n    \"hw:cpu_policy\": shared\n"
        )
    }

    fn image_yaml(&self, url: &str) -> String {
        let i = &self.image;
        format!(
            "apiVersion: sunet.se/v1alpha1\nkind: OpenstackImage\nmetadata:\n  name: {i}\nspec:\n  name: {i}\n  visibility: public\n  tags: [e2e]\n  content:\n    diskFormat: qcow2\n    containerFormat: bare\n    source:\n      url: {url}\n"
        )
    }

    fn project_json(&self) -> Value {
        let networks: Vec<Value> = (0..self.networks)
            .map(|i| {
                json!({
                    "name": format!("net{i}"),
                    "cidr": format!("10.77.{i}.0/24"),
                    "enableDhcp": true,
                    "router": {"externalNetwork": "external", "enableSnat": true},
                })
            })
            .collect();
        json!({
            "apiVersion": "sunet.se/v1alpha1",
            "kind": "OpenstackProject",
            "metadata": {"name": self.project},
            "spec": {
                "name": self.project_name,
                "description": "fault scenario",
                "domain": self.domain,
                "enabled": true,
                "quotas": {
                    "compute": {"instances": 5, "cores": 10},
                    "storage": {"volumes": 5},
                    "network": {"floatingIps": 2},
                },
                "networks": networks,
                "securityGroups": [{
                    "name": "allow-ssh",
                    "description": "ssh and ping",
                    "rules": [
                        {"direction": "ingress", "protocol": "tcp", "portRangeMin": 22,
                         "portRangeMax": 22, "remoteIpPrefix": "0.0.0.0/0"},
                        {"direction": "ingress", "protocol": "icmp"},
                    ],
                }],
                "roleBindings": [{
                    "role": "member",
                    "users": [self.user],
                    "userDomain": self.domain,
                }],
            },
        })
    }

    /// What the cloud holds for the converged tenant. Rules: the two of the spec plus
    /// Neutron's two default egress rules. Role assignments: the group's `member` (the user
    /// holds it as a member of the group).
    fn expected(&self) -> Vec<(&'static str, usize)> {
        let n = self.networks;
        vec![
            (DOMAIN, 1),
            (PROJECT, 1),
            (GROUP, 1),
            (ROLE_ASSIGNMENT, 1),
            (NETWORK, n),
            (SUBNET, n),
            (ROUTER, n),
            (ROUTER_INTERFACE, n),
            (SECURITY_GROUP, 1),
            (SECURITY_GROUP_RULE, 4),
            (FLAVOR, 1),
            (IMAGE, 1),
        ]
    }
}

/// A raw admin session (the port creates no users).
async fn admin_core(env: &TestEnv) -> anyhow::Result<Core> {
    let c = env.target.cloud_env();
    let selector = CloudSelector::File {
        path: c.config_file.clone(),
        cloud: c.os_cloud.clone(),
    };
    let opts = ClientOptions {
        requests_per_second: 0,
        ..ClientOptions::default()
    };
    Ok(Core::connect(&selector, opts).await?)
}

/// Creates the role binding's user in the (operator-made) domain, directly in Keystone; the
/// domain's deletion removes it, a deferred cleanup too.
async fn create_user(env: &TestEnv, domain_id: &str, name: &str) -> anyhow::Result<()> {
    let core = admin_core(env).await?;
    let body = json!({"user": {
        "name": name,
        "domain_id": domain_id,
        "enabled": true,
        "password": e2e::names::random_suffix() + &e2e::names::random_suffix(),
    }});
    let req = Request::post(Service::Identity, "create_user", "users").json(&body)?;
    let user: Value = core
        .send(&req)
        .await
        .with_context(|| format!("creating user {name}"))?
        .json_at("user")?;
    let id = user["id"]
        .as_str()
        .context("the created user has an id")?
        .to_string();
    env.defer(&format!("user {name} ({id})"), move |_| {
        async move {
            let req = Request::delete(Service::Identity, "delete_user", format!("users/{id}"));
            core.send(&req).await.optional()?;
            Ok(())
        }
        .boxed()
    });
    Ok(())
}

/// Applies the domain, waits for it (the user goes into it), then the user, the flavor, the
/// image and the project; waits until all are Ready.
async fn converge(env: &TestEnv, t: &Tenant) -> anyhow::Result<Inventory> {
    env.apply(&t.domain_yaml()).await?;
    let d: OpenstackDomain = env.wait_ready(&t.domain, READY).await?;
    let domain_id = d
        .status
        .and_then(|s| s.domain_id)
        .context("status.domainId of the Ready domain")?;
    create_user(env, &domain_id, &t.user).await?;
    env.apply(&t.flavor_yaml()).await?;
    env.apply(&t.image_yaml(&env.image_url("tiny.qcow2")?))
        .await?;
    env.apply(&t.project_json().to_string()).await?;
    env.wait_ready::<OpenstackFlavor>(&t.flavor, READY).await?;
    env.wait_ready::<OpenstackImage>(&t.image, READY).await?;
    let p: OpenstackProject = env.wait_ready(&t.project, READY).await?;
    for area in [
        "ProjectReady",
        "QuotasReady",
        "NetworksReady",
        "SecurityGroupsReady",
        "RoleBindingsReady",
    ] {
        let c = condition(&p, area).with_context(|| format!("condition {area}"))?;
        anyhow::ensure!(c.is_true(), "{area} is True: {c:?}");
    }
    let s = p.status.as_ref().context("the project's status")?;
    anyhow::ensure!(
        s.pending_users.is_empty(),
        "the user exists: nothing pending ({:?})",
        s.pending_users
    );
    inventory(env, t, s.project_id.iter().cloned()).await
}

/// Everything of this test's cluster in the cloud, plus what the tenant's names find, minus
/// Neutron's own `default` security group of the project (Neutron makes it, unmarked, and
/// keeps it after the project is gone; it is not the operator's).
async fn inventory(
    env: &TestEnv,
    t: &Tenant,
    project_ids: impl IntoIterator<Item = String>,
) -> anyhow::Result<Inventory> {
    let scope = Scope::new()
        .project_ids(project_ids)
        .project_names([&t.project_name])
        .domain_names([&t.domain])
        .flavor_names([&t.flavor])
        .image_names([&t.image]);
    let inv = Inventory::collect_scoped(&env.cloud, env.operator.cluster_id(), &scope).await?;
    let neutron_default: Vec<String> = inv
        .of_kind(SECURITY_GROUP)
        .filter(|g| g.name == "default" && !g.marked)
        .map(|g| g.id.clone())
        .collect();
    let items = inv
        .items
        .into_iter()
        .filter(|i| {
            !(neutron_default.contains(&i.id)
                || (i.kind == SECURITY_GROUP_RULE && neutron_default.contains(&i.parent)))
        })
        .collect();
    Ok(Inventory::from_items(env.operator.cluster_id(), items))
}

/// Converged with faults: the inventory is exactly the tenant, the faults fired, every
/// request went through the proxy; then everything is deleted (with the rules still on, and
/// `before_delete` added, which must fire too) and nothing is left.
async fn converge_check_delete(
    env: &TestEnv,
    proxy: &CloudProxy,
    t: &Tenant,
    rules: &[RuleId],
    exact_through_proxy: bool,
    before_delete: Vec<Rule>,
) -> anyhow::Result<()> {
    let inv = converge(env, t).await?;
    eprintln!("{inv}");
    inv.check_counts(&t.expected())?;
    eprintln!(
        "faults:\n{}\nupstream writes: {:#?}",
        rules_table(&proxy.rules()),
        upstream_writes(&proxy.requests())
    );
    all_fired(proxy, rules)?;
    let attempts =
        check_all_through_proxy(env, proxy, exact_through_proxy, Duration::from_secs(60)).await?;
    for s in ["identity", "network", "compute", "image", "block_storage"] {
        anyhow::ensure!(
            attempts.contains_key(s),
            "the operator called {s} (through the proxy): {attempts:?}"
        );
    }

    let project_id = {
        let p: OpenstackProject = env.get(&t.project).await?;
        p.status.and_then(|s| s.project_id)
    };
    let mut delete_rules = Vec::new();
    for r in before_delete {
        delete_rules.push(proxy.add_rule(r)?);
    }
    delete_all(env, t).await?;
    eprintln!("faults at deletion:\n{}", rules_table(&proxy.rules()));
    all_fired(proxy, &delete_rules)?;
    let left = inventory(env, t, project_id).await?;
    left.check_empty()
}

/// Every rule fired at least once.
fn all_fired(proxy: &CloudProxy, rules: &[RuleId]) -> anyhow::Result<()> {
    let fired: BTreeMap<RuleId, u64> = rules.iter().map(|id| (*id, proxy.fired(*id))).collect();
    let silent: Vec<&RuleId> = fired
        .iter()
        .filter(|(_, n)| **n == 0)
        .map(|(id, _)| id)
        .collect();
    anyhow::ensure!(
        silent.is_empty(),
        "rules {silent:?} never fired:\n{}\nrequests:\n{}",
        rules_table(&proxy.rules()),
        log_table(&proxy.requests())
    );
    Ok(())
}

async fn delete_all(env: &TestEnv, t: &Tenant) -> anyhow::Result<()> {
    env.delete_and_wait::<OpenstackProject>(&t.project, READY)
        .await?;
    env.delete_and_wait::<OpenstackFlavor>(&t.flavor, READY)
        .await?;
    env.delete_and_wait::<OpenstackImage>(&t.image, READY)
        .await?;
    env.delete_and_wait::<OpenstackDomain>(&t.domain, READY)
        .await
}

/// The object is Ready (a scenario's extra check after faults).
async fn still_ready<K: Managed>(env: &TestEnv, name: &str) -> anyhow::Result<()> {
    let o: K = env.get(name).await?;
    anyhow::ensure!(is_ready(&o), "{name} is Ready");
    Ok(())
}

// ----------------------------------------------------------------------------- scenarios

/// 500, 503, 429 with Retry-After and dropped connections on every service, for a bounded
/// number of requests each (so convergence time stays bounded by the operator's backoff).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_errors_on_every_service() -> anyhow::Result<()> {
    let (env, proxy) = start("transient").await?;
    run_proxied(env, &proxy, async |env| {
        let t = Tenant::new(env, 1);
        let mut rules = Vec::new();
        let mut add = |r: Rule| -> anyhow::Result<()> {
            rules.push(proxy.add_rule(r)?);
            Ok(())
        };
        add(Rule::new(Action::status(503))
            .name("keystone 503")
            .service("identity")
            .every(4)
            .times(4))?;
        add(Rule::new(Action::status(500))
            .name("keystone 500 on writes")
            .service("identity")
            .method("POST")
            .path_regex("^/v3/(domains|projects|groups)$")
            .first(1))?;
        add(Rule::new(Action::status(500))
            .name("neutron 500")
            .service("network")
            .every(5)
            .times(4))?;
        add(Rule::new(Action::Drop)
            .name("neutron drop")
            .service("network")
            .every(7)
            .times(3))?;
        add(Rule::new(Action::too_many_requests(1))
            .name("nova 429")
            .service("compute")
            .every(2)
            .times(3))?;
        add(Rule::new(Action::status(500))
            .name("nova 500")
            .service("compute")
            .every(3)
            .times(2))?;
        add(Rule::new(Action::Drop)
            .name("glance drop")
            .service("image")
            .every(2)
            .times(2))?;
        add(Rule::new(Action::status(503))
            .name("glance 503")
            .service("image")
            .every(3)
            .times(2))?;
        add(Rule::new(Action::too_many_requests(2))
            .name("cinder 429")
            .service("block-storage")
            .first(1))?;
        add(Rule::new(Action::status(503))
            .name("cinder 503")
            .service("block-storage")
            .first(1))?;
        add(Rule::new(Action::Drop)
            .name("any drop")
            .probability(0.05, 7)
            .times(3))?;
        converge_check_delete(env, &proxy, &t, &rules, true, Vec::new()).await
    })
    .await
}

/// Every create the operator makes is forwarded and its answer lost once (502 or a dropped
/// connection, alternately): the upstream did the work, the operator does not know. Then the
/// same for every delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_responses_on_creates_make_no_duplicates() -> anyhow::Result<()> {
    let (env, proxy) = start("lost_responses").await?;
    run_proxied(env, &proxy, async |env| {
        let t = Tenant::new(env, 1);
        let creates = [
            ("domain", "identity", "POST", "^/v3/domains$"),
            ("project", "identity", "POST", "^/v3/projects$"),
            ("group", "identity", "POST", "^/v3/groups$"),
            (
                "role assignment",
                "identity",
                "PUT",
                "^/v3/projects/[^/]+/(users|groups)/[^/]+/roles/[^/]+$",
            ),
            ("network", "network", "POST", "^/v2.0/networks$"),
            ("subnet", "network", "POST", "^/v2.0/subnets$"),
            ("router", "network", "POST", "^/v2.0/routers$"),
            (
                "router interface",
                "network",
                "PUT",
                "^/v2.0/routers/[^/]+/add_router_interface$",
            ),
            (
                "security group",
                "network",
                "POST",
                "^/v2.0/security-groups$",
            ),
            (
                "security group rule",
                "network",
                "POST",
                "^/v2.0/security-group-rules$",
            ),
            (
                "neutron tags",
                "network",
                "PUT",
                "^/v2.0/[a-z-]+/[^/]+/tags$",
            ),
            ("flavor", "compute", "POST", "^/v2.1/flavors$"),
            (
                "flavor extra specs",
                "compute",
                "POST",
                "^/v2.1/flavors/[^/]+/os-extra_specs$",
            ),
            ("image", "image", "POST", "^/v2/images$"),
            ("image import", "image", "POST", "^/v2/images/[^/]+/import$"),
        ];
        let mut rules = Vec::new();
        for (i, c) in creates.into_iter().enumerate() {
            rules.push(proxy.add_rule(lost(i, c))?);
        }
        // Deletion walks the same objects back; each delete's answer is lost once too.
        let deletes = [
            (
                "router interface removal",
                "network",
                "PUT",
                "^/v2.0/routers/[^/]+/remove_router_interface$",
            ),
            (
                "router delete",
                "network",
                "DELETE",
                "^/v2.0/routers/[^/]+$",
            ),
            (
                "subnet delete",
                "network",
                "DELETE",
                "^/v2.0/subnets/[^/]+$",
            ),
            (
                "network delete",
                "network",
                "DELETE",
                "^/v2.0/networks/[^/]+$",
            ),
            (
                "security group delete",
                "network",
                "DELETE",
                "^/v2.0/security-groups/[^/]+$",
            ),
            (
                "project delete",
                "identity",
                "DELETE",
                "^/v3/projects/[^/]+$",
            ),
            ("group delete", "identity", "DELETE", "^/v3/groups/[^/]+$"),
            (
                "flavor delete",
                "compute",
                "DELETE",
                "^/v2.1/flavors/[^/]+$",
            ),
            ("image delete", "image", "DELETE", "^/v2/images/[^/]+$"),
            ("domain delete", "identity", "DELETE", "^/v3/domains/[^/]+$"),
        ];
        let before_delete = deletes
            .into_iter()
            .enumerate()
            .map(|(i, d)| lost(i, d))
            .collect();
        converge_check_delete(env, &proxy, &t, &rules, true, before_delete).await
    })
    .await
}

/// Loses the answer of the first request matching `(what, service, method, path regex)`,
/// with a 502 for even `i`, a dropped connection for odd `i`.
fn lost(i: usize, (what, service, method, path): (&str, &str, &str, &str)) -> Rule {
    let action = if i.is_multiple_of(2) {
        Action::lose_response_502()
    } else {
        Action::lose_response_drop()
    };
    Rule::new(action)
        .name(format!("lost {what}"))
        .service(service)
        .method(method)
        .path_regex(path)
        .first(1)
}

/// Keystone revokes the operator's token in the middle of its work (a Keystone write, then
/// Neutron and Nova requests): Keystone answers 401, the operator re-authenticates and goes
/// on; nothing stays failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_revoked_mid_reconcile() -> anyhow::Result<()> {
    let (env, proxy) = start("token_revocation").await?;
    run_proxied(env, &proxy, async |env| {
        let t = Tenant::new(env, 1);
        let mut rules = Vec::new();
        for r in [
            Rule::new(Action::RevokeToken)
                .name("revoke at project create")
                .service("identity")
                .method("POST")
                .path_regex("^/v3/projects$")
                .first(1),
            // Every second read, not every sixth: the operator read Keystone only five times in
            // this test's first run of two CI runs, and the rule never fired.
            Rule::new(Action::RevokeToken)
                .name("revoke at keystone reads")
                .service("identity")
                .method("GET")
                .every(2)
                .times(3),
            Rule::new(Action::RevokeToken)
                .name("revoke at neutron writes")
                .service("network")
                .method("POST")
                .every(2)
                .times(2),
            Rule::new(Action::RevokeToken)
                .name("revoke at nova")
                .service("compute")
                .first(1),
        ] {
            rules.push(proxy.add_rule(r)?);
        }
        converge_check_delete(env, &proxy, &t, &rules, false, Vec::new()).await?;
        let rejected = proxy
            .requests()
            .iter()
            .filter(|r| r.status == Some(401) && !r.path.contains("/auth/tokens"))
            .count();
        anyhow::ensure!(
            rejected > 0,
            "revoked tokens were rejected with 401 at least once: {:#?}",
            proxy.requests()
        );
        eprintln!("requests rejected with 401 after a revocation: {rejected}");
        Ok(())
    })
    .await
}

/// Two seconds on every Neutron request: slower, still converging (the operator's
/// per-request timeout is 30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neutron_latency() -> anyhow::Result<()> {
    let (env, proxy) = start("latency").await?;
    run_proxied(env, &proxy, async |env| {
        let t = Tenant::new(env, 1);
        let id = proxy.add_rule(
            Rule::new(Action::delay(Duration::from_secs(2)))
                .name("neutron +2s")
                .service("network"),
        )?;
        converge_check_delete(env, &proxy, &t, &[id], true, Vec::new()).await
    })
    .await
}

/// Every second router create fails with 500 (not forwarded), for a project with three
/// routed networks: three routers in the end, and no more router creates reached Neutron
/// than routers exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_second_router_create_fails() -> anyhow::Result<()> {
    let (env, proxy) = start("router_create").await?;
    run_proxied(env, &proxy, async |env| {
        let t = Tenant::new(env, 3);
        let id = proxy.add_rule(
            Rule::new(Action::status(500))
                .name("every second router create")
                .service("network")
                .method("POST")
                .path_regex("^/v2.0/routers$")
                .every(2),
        )?;
        let inv = converge(env, &t).await?;
        inv.check_counts(&t.expected())?;
        anyhow::ensure!(proxy.fired(id) >= 1, "the rule fired: {:#?}", proxy.rules());
        let writes = upstream_writes(&proxy.requests());
        anyhow::ensure!(
            writes.get("POST /v2.0/routers") == Some(&3),
            "exactly three router creates reached Neutron: {writes:#?}"
        );
        still_ready::<OpenstackProject>(env, &t.project).await?;
        let project_id = env
            .get::<OpenstackProject>(&t.project)
            .await?
            .status
            .and_then(|s| s.project_id);
        delete_all(env, &t).await?;
        inventory(env, &t, project_id).await?.check_empty()
    })
    .await
}

/// The flavor is created, then setting its extra specs (which carry the ownership mark) fails
/// four times in a row (the client's three retries included), so the pass fails after Nova made
/// the flavor, unmarked: the next pass still recognises it as ours (by its derived ID) and
/// converges instead of refusing it as not owned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flavor_marking_fails_after_create() -> anyhow::Result<()> {
    let (env, proxy) = start("flavor_marking").await?;
    run_proxied(env, &proxy, async |env| {
        let t = Tenant::new(env, 0);
        let id = proxy.add_rule(
            Rule::new(Action::status(503))
                .name("extra specs refused")
                .service("compute")
                .method("POST")
                .path_regex("^/v2.1/flavors/[^/]+/os-extra_specs$")
                .first(4),
        )?;
        env.apply(&t.flavor_yaml()).await?;
        env.wait_ready::<OpenstackFlavor>(&t.flavor, Duration::from_secs(120))
            .await?;
        anyhow::ensure!(proxy.fired(id) == 4, "{}", rules_table(&proxy.rules()));
        env.delete_and_wait::<OpenstackFlavor>(&t.flavor, READY)
            .await
    })
    .await
}
