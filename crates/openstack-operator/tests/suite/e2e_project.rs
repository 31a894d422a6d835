//! End to end: OpenstackProject against the real binary, a Kubernetes API and the OpenStack
//! cloud. The seed README's project checked in OpenStack field by field; a larger tenant and
//! its edits; two projects sharing one federation mapping; the steady-state cost of a forced
//! reconcile; the role allow-list; deletion removing everything.
//!
//! Every name is unique (domain, IdP, project), so the tests share one cloud in parallel.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::Context as _;
use api::naming::{
    FEDERATION_PROTOCOL, MANAGED_TAG, mapping_name, project_group_description, project_group_name,
};
use api::project::NetworkStatus;
use api::{OpenstackDomain, OpenstackProject, OpenstackProjectStatus};
use e2e::env::CLUSTER_TAG_PREFIX;
use e2e::k8s::{condition, is_ready};
use e2e::metrics::{Metrics, RECONCILES, delta, is_read_operation};
use e2e::wait::{Check, wait_for};
use e2e::{EnvOptions, TestEnv};
use futures::FutureExt as _;
use kube::ResourceExt as _;
use openstack::OptionalExt as _;
use openstack::adapter::{ClientOptions, CloudSelector, Core, Request, Service};
use openstack::model::{
    Actor, DomainUpdate, IdentityProviderCreate, NetworkFilter, RouterFilter, SecurityGroup,
    SecurityGroupRule, SubnetFilter,
};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_openstack-operator");
/// Time for a project pass that creates or changes OpenStack objects (routers are slow).
const READY: Duration = Duration::from_secs(240);
/// The seed README's project, verbatim.
const SEED_PROJECT: &str = include_str!("../../../../examples/seed-readme/project.yaml");
/// Owner tag prefix (the resource's UID).
const OWNER_TAG_PREFIX: &str = "openstack-operator.owner=";
/// The external network the test cloud provides.
const EXTERNAL: &str = "external";
/// The area conditions of a project with every section set.
const AREAS: [&str; 6] = [
    "ProjectReady",
    "QuotasReady",
    "NetworksReady",
    "SecurityGroupsReady",
    "RoleBindingsReady",
    "FederationReady",
];

async fn env(test: &str, resync_seconds: u64) -> anyhow::Result<TestEnv> {
    let mut opts = EnvOptions::new(BIN, &format!("project-{test}"));
    opts.operator.resync_seconds = resync_seconds;
    opts.cleanup_timeout = READY;
    TestEnv::start(test, opts).await
}

// ----------------------------------------------------------------------------- set-up

/// A domain made by an OpenstackDomain resource, a unique identity provider created by the
/// cloud's administrator (a ConfigMap in the project's own namespace may not create one), and
/// a federation ConfigMap naming it whose `sso-domain` is that domain.
struct Tenant {
    domain: String,
    domain_id: String,
    idp: String,
    remote_id: String,
    config_map: String,
}

impl Tenant {
    fn mapping(&self) -> String {
        mapping_name(&self.idp)
    }
}

async fn tenant(env: &TestEnv) -> anyhow::Result<Tenant> {
    let t = tenant_without_idp(env, None).await?;
    env.cloud
        .identity
        .create_identity_provider(&IdentityProviderCreate {
            id: t.idp.clone(),
            remote_ids: vec![t.remote_id.clone()],
            enabled: true,
            domain_id: None,
            description: Some("created by the administrator (e2e)".into()),
        })
        .await?;
    Ok(t)
}

/// Like [`tenant`] without the identity provider; the ConfigMap goes into `namespace` (the
/// test's own by default).
async fn tenant_without_idp(env: &TestEnv, namespace: Option<&str>) -> anyhow::Result<Tenant> {
    let domain = env.unique("sso");
    env.apply(&format!(
        r#"
apiVersion: sunet.se/v1alpha1
kind: OpenstackDomain
metadata:
  name: {domain}
spec:
  name: {domain}
  description: "Domain for SSO-authenticated users"
  enabled: true
"#
    ))
    .await?;
    let d: OpenstackDomain = env.wait_ready(&domain, READY).await?;
    let domain_id = d
        .status
        .and_then(|s| s.domain_id)
        .context("status.domainId of the Ready domain")?;
    let idp = env.unique("idp");
    let remote_id = format!("https://{idp}.example.com");
    let config_map = env.unique("fed");
    let namespace = namespace.unwrap_or(&env.namespace);
    // The ConfigMap is applied before any project, so cleanup deletes it after them.
    env.apply(&format!(
        r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: {config_map}
  namespace: {namespace}
data:
  idp-name: {idp}
  idp-remote-id: {remote_id}
  sso-domain: {domain}
"#
    ))
    .await?;
    defer_federation_cleanup(env, &idp);
    Ok(Tenant {
        domain,
        domain_id,
        idp,
        remote_id,
        config_map,
    })
}

/// The identity provider stays when projects go (it is shared by design); the test removes
/// it, the domain Keystone generated for it, and a mapping left behind.
fn defer_federation_cleanup(env: &TestEnv, idp: &str) {
    let idp = idp.to_string();
    env.defer(&format!("identity provider {idp}"), move |cloud| {
        async move {
            let mapping = mapping_name(&idp);
            if cloud
                .identity
                .get_mapping(&mapping)
                .await
                .optional()?
                .is_some()
            {
                cloud.identity.delete_mapping(&mapping).await.optional()?;
            }
            if let Some(i) = cloud
                .identity
                .get_identity_provider(&idp)
                .await
                .optional()?
            {
                cloud
                    .identity
                    .delete_identity_provider(&idp)
                    .await
                    .optional()?;
                if let Some(did) = i.domain_id
                    && let Some(d) = cloud.identity.get_domain(&did).await.optional()?
                    && d.name == idp
                {
                    let off = DomainUpdate {
                        enabled: Some(false),
                        ..Default::default()
                    };
                    cloud.identity.update_domain(&did, &off).await?;
                    cloud.identity.delete_domain(&did).await.optional()?;
                }
            }
            Ok(())
        }
        .boxed()
    });
}

/// A raw admin session, for what the port does not do (creating users).
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

/// Creates a Keystone user (as if it had logged in through federation); removed after the
/// test (deleting the domain removes it too). Its id.
pub(crate) async fn create_user(
    env: &TestEnv,
    core: &Core,
    domain_id: &str,
    name: &str,
) -> anyhow::Result<String> {
    let password = e2e::names::random_suffix() + &e2e::names::random_suffix();
    create_user_with_password(env, core, domain_id, name, &password).await
}

/// [`create_user`] with a password the test uses to log in as the user.
pub(crate) async fn create_user_with_password(
    env: &TestEnv,
    core: &Core,
    domain_id: &str,
    name: &str,
    password: &str,
) -> anyhow::Result<String> {
    let body = json!({"user": {
        "name": name,
        "domain_id": domain_id,
        "enabled": true,
        "password": password,
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
    let (core, uid) = (core.clone(), id.clone());
    env.defer(&format!("user {name} ({id})"), move |_| {
        async move {
            let req = Request::delete(Service::Identity, "delete_user", format!("users/{uid}"));
            core.send(&req).await.optional()?;
            Ok(())
        }
        .boxed()
    });
    Ok(id)
}

async fn external_network_id(env: &TestEnv) -> anyhow::Result<String> {
    let nets = env
        .cloud
        .network
        .list_networks(&NetworkFilter {
            name: Some(EXTERNAL.into()),
            external: Some(true),
            ..Default::default()
        })
        .await?;
    Ok(nets
        .first()
        .with_context(|| format!("the test cloud has an external network named {EXTERNAL}"))?
        .id
        .clone())
}

/// The IDs of a group's members.
async fn group_members(env: &TestEnv, group_id: &str) -> anyhow::Result<BTreeSet<String>> {
    Ok(env
        .cloud
        .identity
        .list_group_users(group_id)
        .await?
        .into_iter()
        .map(|u| u.id)
        .collect())
}

async fn role_id(env: &TestEnv, name: &str) -> anyhow::Result<String> {
    Ok(env
        .cloud
        .identity
        .find_role(name)
        .await?
        .with_context(|| format!("role {name} exists in Keystone"))?
        .id)
}

// ----------------------------------------------------------------------------- checks

fn status(p: &OpenstackProject) -> anyhow::Result<&OpenstackProjectStatus> {
    p.status.as_ref().context("the project has a status")
}

fn assert_marked(tags: &[String], env: &TestEnv, uid: &str, what: &str) {
    let cluster = format!("{CLUSTER_TAG_PREFIX}{}", env.operator.cluster_id());
    let owner = format!("{OWNER_TAG_PREFIX}{uid}");
    for t in [MANAGED_TAG, cluster.as_str(), owner.as_str()] {
        assert!(
            tags.iter().any(|x| x == t),
            "{what} carries the mark {t}: {tags:?}"
        );
    }
}

fn assert_not_found<T: std::fmt::Debug>(r: Result<T, openstack::Error>, what: &str) {
    match r {
        Err(e) if e.is_not_found() => {}
        other => panic!("{what} should be gone (NotFound), got {other:?}"),
    }
}

/// Every area condition and `Ready` are True at the current generation.
fn assert_areas(p: &OpenstackProject, areas: &[&str]) {
    for a in areas.iter().chain(&["Ready"]) {
        let c = condition(p, a).unwrap_or_else(|| panic!("condition {a} is set: {:?}", p.status));
        assert!(c.is_true(), "{a} is True: {c:?}");
        assert_eq!(
            c.observed_generation, p.metadata.generation,
            "{a} is at the current generation"
        );
    }
}

/// The seed's rule shape for a project's group.
fn expected_rule(group: &str, domain: &str, users: &[&str]) -> Value {
    json!({
        "local": [
            {"user": {"name": "{0}", "domain": {"name": domain}, "type": "ephemeral"}},
            {"group": {"name": group, "domain": {"name": domain}}}
        ],
        "remote": [
            {"type": "HTTP_OIDC_SUB"},
            {"type": "HTTP_OIDC_SUB", "any_one_of": users}
        ]
    })
}

/// Whether a mapping rule maps into `group` of `domain`.
fn rule_is_for(rule: &Value, group: &str, domain: &str) -> bool {
    rule["local"].as_array().is_some_and(|l| {
        l.iter().any(|x| {
            x["group"]["name"].as_str() == Some(group)
                && x["group"]["domain"]["name"].as_str() == Some(domain)
        })
    })
}

async fn mapping_rules(env: &TestEnv, mapping: &str) -> anyhow::Result<Vec<Value>> {
    let m = env
        .cloud
        .identity
        .get_mapping(mapping)
        .await
        .with_context(|| format!("reading mapping {mapping}"))?;
    match m.rules.to_value() {
        Ok(Value::Array(rules)) => Ok(rules),
        other => anyhow::bail!("the rules of {mapping} are a JSON array: {other:?}"),
    }
}

/// IdP enabled with the remote id, protocol `openid` on the mapping, and the mapping holding
/// `rule` exactly once.
async fn assert_federation(env: &TestEnv, t: &Tenant, rule: &Value) -> anyhow::Result<()> {
    let idp = env.cloud.identity.get_identity_provider(&t.idp).await?;
    assert!(idp.enabled, "identity provider {} enabled", t.idp);
    assert_eq!(idp.remote_ids, vec![t.remote_id.clone()], "remote ids");
    let proto = env
        .cloud
        .identity
        .get_federation_protocol(&t.idp, FEDERATION_PROTOCOL)
        .await?;
    assert_eq!(
        proto.mapping_id,
        t.mapping(),
        "protocol {FEDERATION_PROTOCOL} uses the shared mapping"
    );
    let rules = mapping_rules(env, &t.mapping()).await?;
    assert_eq!(
        rules.iter().filter(|r| *r == rule).count(),
        1,
        "mapping {} holds the project's rule {rule} once: {rules:?}",
        t.mapping()
    );
    Ok(())
}

/// A rule as compared: direction, ethertype, protocol, ports, remote prefix (`/0` = any),
/// remote group.
type RuleTuple = (
    String,
    String,
    Option<String>,
    Option<i32>,
    Option<i32>,
    Option<String>,
    Option<String>,
);

fn observed_rule(r: &SecurityGroupRule) -> RuleTuple {
    (
        r.direction.clone(),
        r.ethertype.clone(),
        r.protocol.clone(),
        r.port_range_min,
        r.port_range_max,
        r.remote_ip_prefix.clone().filter(|p| !p.ends_with("/0")),
        r.remote_group_id.clone(),
    )
}

/// The rules a spec group should have in Neutron: its rules plus Neutron's default egress
/// rules (any protocol to anywhere, IPv4 and IPv6), which the operator keeps.
fn expected_rules(group: &Value, ids: &BTreeMap<String, String>) -> BTreeSet<RuleTuple> {
    let mut out: BTreeSet<RuleTuple> = group["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let port = |k: &str| r[k].as_i64().map(|v| i32::try_from(v).unwrap_or(-1));
            (
                r["direction"].as_str().unwrap_or_default().to_string(),
                r["ethertype"].as_str().unwrap_or("IPv4").to_string(),
                r["protocol"]
                    .as_str()
                    .filter(|p| *p != "any")
                    .map(str::to_string),
                port("portRangeMin"),
                port("portRangeMax"),
                r["remoteIpPrefix"]
                    .as_str()
                    .filter(|p| !p.ends_with("/0"))
                    .map(str::to_string),
                r["remoteGroupName"]
                    .as_str()
                    .map(|n| ids.get(n).cloned().unwrap_or_else(|| format!("?{n}"))),
            )
        })
        .collect();
    for e in ["IPv4", "IPv6"] {
        out.insert(("egress".into(), e.into(), None, None, None, None, None));
    }
    out
}

/// Each spec group exists (by the ID in status), is marked, and has exactly its rules.
async fn assert_security_groups(
    env: &TestEnv,
    p: &OpenstackProject,
    spec_groups: &[Value],
) -> anyhow::Result<BTreeMap<String, SecurityGroup>> {
    let s = status(p)?;
    let pid = s.project_id.clone().context("status.projectId")?;
    let uid = p.uid().context("uid")?;
    let names: Vec<&str> = spec_groups
        .iter()
        .map(|g| g["name"].as_str().unwrap_or_default())
        .collect();
    let recorded: Vec<&str> = s.security_groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(recorded, names, "status.securityGroups follows the spec");
    let ids: BTreeMap<String, String> = s
        .security_groups
        .iter()
        .map(|g| (g.name.clone(), g.id.clone().unwrap_or_default()))
        .collect();
    let mut out = BTreeMap::new();
    for g in spec_groups {
        let name = g["name"].as_str().unwrap_or_default();
        let sg = env.cloud.network.get_security_group(&ids[name]).await?;
        assert_eq!(sg.name, name);
        assert_eq!(
            sg.project_id, pid,
            "security group {name} is in the project"
        );
        assert_eq!(
            sg.description,
            g["description"].as_str().unwrap_or_default(),
            "description of {name}"
        );
        assert_marked(&sg.tags, env, &uid, &format!("security group {name}"));
        let have: Vec<RuleTuple> = sg.rules.iter().map(observed_rule).collect();
        let have_set: BTreeSet<RuleTuple> = have.iter().cloned().collect();
        assert_eq!(have.len(), have_set.len(), "no duplicate rules in {name}");
        assert_eq!(
            have_set,
            expected_rules(g, &ids),
            "rules of security group {name}"
        );
        out.insert(name.to_string(), sg);
    }
    Ok(out)
}

/// Each spec network exists with its subnet, and its router when asked for (gateway on the
/// external network, SNAT as asked, an interface on the subnet).
async fn assert_networks(
    env: &TestEnv,
    p: &OpenstackProject,
    spec_networks: &[Value],
    external_id: &str,
) -> anyhow::Result<()> {
    let s = status(p)?;
    let pid = s.project_id.clone().context("status.projectId")?;
    let uid = p.uid().context("uid")?;
    let names: Vec<&str> = spec_networks
        .iter()
        .map(|n| n["name"].as_str().unwrap_or_default())
        .collect();
    let recorded: Vec<&str> = s.networks.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(recorded, names, "status.networks follows the spec");
    for (spec, st) in spec_networks.iter().zip(&s.networks) {
        let name = st.name.as_str();
        let net = env
            .cloud
            .network
            .get_network(st.network_id.as_deref().context("networkId")?)
            .await?;
        assert_eq!(
            (net.name.as_str(), net.project_id.as_str()),
            (name, pid.as_str()),
            "network {name}"
        );
        assert_marked(&net.tags, env, &uid, &format!("network {name}"));
        let sub = env
            .cloud
            .network
            .get_subnet(st.subnet_id.as_deref().context("subnetId")?)
            .await?;
        assert_eq!(sub.name, format!("{name}-subnet"));
        assert_eq!(sub.network_id, net.id, "subnet {name}-subnet on {name}");
        assert_eq!(sub.cidr, spec["cidr"].as_str().unwrap_or_default());
        assert_eq!(sub.ip_version, 4);
        assert_eq!(
            sub.enable_dhcp,
            spec["enableDhcp"].as_bool().unwrap_or(true),
            "DHCP of {name}-subnet"
        );
        let dns: Vec<String> = spec["dnsNameservers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect();
        assert_eq!(sub.dns_nameservers, dns, "DNS servers of {name}-subnet");
        assert_marked(&sub.tags, env, &uid, &format!("subnet {name}-subnet"));
        let router_spec = &spec["router"];
        match (router_spec.is_object(), &st.router_id) {
            (false, None) => {}
            (false, Some(r)) => panic!("network {name} has no router in the spec, status has {r}"),
            (true, None) => panic!("network {name} asks for a router, status.routerId is empty"),
            (true, Some(rid)) => {
                let r = env.cloud.network.get_router(rid).await?;
                assert_eq!(r.name, format!("{name}-router"));
                assert_eq!(r.project_id, pid, "router {name}-router in the project");
                assert_marked(&r.tags, env, &uid, &format!("router {name}-router"));
                let gw = r
                    .external_gateway
                    .as_ref()
                    .with_context(|| format!("router {name}-router has a gateway"))?;
                assert_eq!(gw.network_id, external_id, "gateway on {EXTERNAL}");
                assert_eq!(
                    gw.enable_snat,
                    Some(router_spec["enableSnat"].as_bool().unwrap_or(true)),
                    "SNAT of {name}-router"
                );
                let ports = env.cloud.network.list_router_interfaces(rid).await?;
                let on_subnet: Vec<_> = ports
                    .iter()
                    .filter(|p| {
                        p.fixed_ips
                            .iter()
                            .any(|f| f.subnet_id.as_deref() == Some(sub.id.as_str()))
                    })
                    .collect();
                assert_eq!(
                    on_subnet.len(),
                    1,
                    "one interface of {name}-router on {name}-subnet: {ports:?}"
                );
            }
        }
    }
    Ok(())
}

/// Status quota usage equals what the services report, and the limits are the spec's.
async fn assert_quotas(
    env: &TestEnv,
    p: &OpenstackProject,
    limits: &[(&str, &str, i64)],
) -> anyhow::Result<()> {
    let s = status(p)?;
    let pid = s.project_id.clone().context("status.projectId")?;
    let compute = env.cloud.compute.get_compute_quota(&pid).await?;
    let volume = env.cloud.block_storage.get_volume_quota(&pid).await?;
    let network = env.cloud.network.get_network_quota(&pid).await?;
    let keys: BTreeSet<String> = limits.iter().map(|(k, _, _)| k.to_string()).collect();
    assert_eq!(
        s.quota_usage.keys().cloned().collect::<BTreeSet<_>>(),
        keys,
        "status.quotaUsage has one entry per spec key"
    );
    for (status_key, os_key, limit) in limits {
        let set = match status_key.split('.').next() {
            Some("compute") => &compute,
            Some("storage") => &volume,
            _ => &network,
        };
        let v = set
            .get(*os_key)
            .with_context(|| format!("quota {os_key} in {set:?}"))?;
        assert_eq!(v.limit, *limit, "OpenStack quota {os_key} ({status_key})");
        let u = &s.quota_usage[*status_key];
        assert_eq!(u.limit, *limit, "status.quotaUsage[{status_key}].limit");
        assert!(u.in_use >= 0, "status.quotaUsage[{status_key}].inUse");
        assert_eq!(
            u.in_use, v.in_use,
            "status.quotaUsage[{status_key}].inUse equals OpenStack's"
        );
    }
    Ok(())
}

/// What a project had in OpenStack, to check it is all gone after deletion.
struct Footprint {
    project_id: String,
    group_id: String,
    /// The per-role groups of federated users.
    role_groups: Vec<String>,
    group: String,
    domain: String,
    networks: Vec<NetworkStatus>,
    security_groups: Vec<String>,
    mapping: String,
}

fn footprint(p: &OpenstackProject, domain: &str, mapping: &str) -> anyhow::Result<Footprint> {
    let s = status(p)?;
    Ok(Footprint {
        project_id: s.project_id.clone().context("status.projectId")?,
        group_id: s.group_id.clone().context("status.groupId")?,
        role_groups: s.role_groups.values().cloned().collect(),
        group: project_group_name(&p.spec.name),
        domain: domain.to_string(),
        networks: s.networks.clone(),
        security_groups: s
            .security_groups
            .iter()
            .filter_map(|g| g.id.clone())
            .collect(),
        mapping: mapping.to_string(),
    })
}

async fn assert_gone(env: &TestEnv, f: &Footprint) -> anyhow::Result<()> {
    let (id, net) = (&env.cloud.identity, &env.cloud.network);
    assert_not_found(id.get_project(&f.project_id).await, "the Keystone project");
    assert_not_found(id.get_group(&f.group_id).await, "the project's group");
    for g in &f.role_groups {
        assert_not_found(id.get_group(g).await, "a role group");
    }
    for n in &f.networks {
        if let Some(r) = &n.router_id {
            assert_not_found(
                net.get_router(r).await,
                &format!("router {}-router", n.name),
            );
        }
        if let Some(s) = &n.subnet_id {
            assert_not_found(
                net.get_subnet(s).await,
                &format!("subnet {}-subnet", n.name),
            );
        }
        if let Some(x) = &n.network_id {
            assert_not_found(net.get_network(x).await, &format!("network {}", n.name));
        }
    }
    for g in &f.security_groups {
        assert_not_found(
            net.get_security_group(g).await,
            &format!("security group {g}"),
        );
    }
    let pid = Some(f.project_id.clone());
    let left_nets = net
        .list_networks(&NetworkFilter {
            project_id: pid.clone(),
            ..Default::default()
        })
        .await?;
    assert!(left_nets.is_empty(), "no network left: {left_nets:?}");
    let left_routers = net
        .list_routers(&RouterFilter {
            project_id: pid.clone(),
            ..Default::default()
        })
        .await?;
    assert!(left_routers.is_empty(), "no router left: {left_routers:?}");
    let left_subnets = net
        .list_subnets(&SubnetFilter {
            project_id: pid,
            ..Default::default()
        })
        .await?;
    assert!(left_subnets.is_empty(), "no subnet left: {left_subnets:?}");
    if let Some(m) = id.get_mapping(&f.mapping).await.optional()? {
        let rules = m.rules.to_value()?.as_array().cloned().unwrap_or_default();
        assert!(
            !rules.iter().any(|r| rule_is_for(r, &f.group, &f.domain)),
            "the project's rule is gone from {}: {rules:?}",
            f.mapping
        );
    }
    Ok(())
}

// ----------------------------------------------------------------------------- steady state

/// Scrapes until two scrapes a second apart agree on API calls and reconciles (nothing in
/// flight), and returns that scrape.
async fn settled(env: &TestEnv) -> anyhow::Result<Metrics> {
    let mut previous: Option<Metrics> = None;
    wait_for(
        Duration::from_secs(90),
        Duration::from_secs(1),
        "the operator's counters to settle",
        async || {
            let m = env.operator.metrics().await?;
            let same = previous.as_ref().is_some_and(|p| {
                p.api_calls() == m.api_calls()
                    && p.by_label(RECONCILES, "resource") == m.by_label(RECONCILES, "resource")
            });
            if same {
                return Ok(Check::Done(m));
            }
            let seen = format!("calls {:?}", m.api_calls());
            previous = Some(m);
            Ok(Check::Pending(seen))
        },
    )
    .await
}

/// A write by the operation name of the call counter (the adapter's port method).
fn is_write(op: &str) -> bool {
    [
        "create_", "update_", "delete_", "set_", "add_", "remove_", "grant_", "revoke_", "import_",
    ]
    .iter()
    .any(|p| op.starts_with(p))
        || !is_read_operation(op)
}

// ----------------------------------------------------------------------------- tests

/// The seed README's project: Ready, then OpenStack checked field by field; a forced
/// reconcile of the converged project writes nothing; deletion removes everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_readme_project_field_by_field_steady_state_and_delete() -> anyhow::Result<()> {
    // No periodic resync: only the forced reconcile is measured.
    env("seed_readme", 3600).await?.run(async |env| {
        let t = tenant(env).await?;
        let core = admin_core(env).await?;
        // alice has logged in before (exists in Keystone); bob has not.
        let alice = create_user(env, &core, &t.domain_id, "alice@example.com").await?;
        let external = external_network_id(env).await?;

        let mut doc = api::manifest::documents(SEED_PROJECT)?
            .into_iter()
            .next()
            .context("the README project")?;
        let cr = env.unique("seed");
        let pname = format!("{cr}.example.com");
        doc["metadata"]["name"] = json!(cr);
        doc["spec"]["name"] = json!(pname);
        doc["spec"]["domain"] = json!(t.domain);
        doc["spec"]["roleBindings"][0]["userDomain"] = json!(t.domain);
        doc["spec"]["federationRef"]["configMapName"] = json!(t.config_map);
        env.apply(&doc.to_string()).await?;
        let p: OpenstackProject = env.wait_ready(&cr, READY).await?;
        assert_areas(&p, &AREAS);
        let s = status(&p)?;
        let uid = p.uid().context("uid")?;
        assert_eq!(s.observed_generation, p.metadata.generation);
        assert_eq!(s.adopted, Some(false), "status.adopted of a created project");

        // The project.
        let pid = s.project_id.clone().context("status.projectId")?;
        let os_p = env.cloud.identity.get_project(&pid).await?;
        assert_eq!(os_p.name, pname);
        assert_eq!(os_p.description, "My OpenStack project");
        assert!(os_p.enabled, "project enabled");
        assert_eq!(os_p.domain_id, t.domain_id, "project in domain {}", t.domain);
        assert_marked(&os_p.tags, env, &uid, "the project");

        // The group and the role assignments.
        let group = project_group_name(&pname);
        let gid = s.group_id.clone().context("status.groupId")?;
        let g = env.cloud.identity.get_group(&gid).await?;
        assert_eq!(g.name, group, "group <sanitized>-users");
        assert_eq!(g.domain_id, t.domain_id);
        assert_eq!(g.description, project_group_description(&pname));
        let member = role_id(env, "member").await?;
        let have: BTreeSet<(Actor, String)> = env
            .cloud
            .identity
            .list_project_role_assignments(&pid)
            .await?
            .into_iter()
            .map(|a| (a.actor, a.role_id))
            .collect();
        let want: BTreeSet<(Actor, String)> = [(Actor::Group(gid.clone()), member.clone())].into();
        assert_eq!(have, want, "role assignments: the group has member");
        assert_eq!(
            group_members(env, &gid).await?,
            [alice.clone()].into(),
            "alice has member through the project group"
        );
        assert_eq!(
            s.pending_users,
            vec!["bob@example.com".to_string()],
            "bob has not logged in yet"
        );
        let rb = condition(&p, "RoleBindingsReady").context("RoleBindingsReady")?;
        assert_eq!(rb.reason.as_deref(), Some("UsersPending"), "{rb:?}");
        assert!(
            rb.message.as_deref().unwrap_or_default().contains("bob@example.com"),
            "the condition names the pending user: {rb:?}"
        );

        // Quotas (only the keys given).
        assert_quotas(
            env,
            &p,
            &[
                ("compute.instances", "instances", 20),
                ("compute.cores", "cores", 40),
                ("compute.ramMB", "ram", 81920),
                ("storage.volumes", "volumes", 20),
                ("storage.volumesGB", "gigabytes", 1000),
                ("network.floatingIps", "floatingip", 10),
            ],
        )
        .await?;

        // Network, subnet, router; security group with its rule and the default egress.
        let networks = doc["spec"]["networks"].as_array().cloned().unwrap_or_default();
        assert_networks(env, &p, &networks, &external).await?;
        let groups = doc["spec"]["securityGroups"].as_array().cloned().unwrap_or_default();
        let sgs = assert_security_groups(env, &p, &groups).await?;
        let ssh = &sgs["allow-ssh"];
        assert!(
            ssh.rules.iter().any(|r| r.direction == "ingress"
                && r.protocol.as_deref() == Some("tcp")
                && r.port_range_min == Some(22)
                && r.port_range_max == Some(22)),
            "the ssh rule: {:?}",
            ssh.rules
        );

        // Federation.
        let rule = expected_rule(&group, &t.domain, &["alice@example.com", "bob@example.com"]);
        assert_federation(env, &t, &rule).await?;
        assert_eq!(mapping_rules(env, &t.mapping()).await?, vec![rule], "only this project's rule");

        // Steady state: a forced reconcile of the converged project only reads.
        let before = settled(env).await?;
        env.request_reconcile::<OpenstackProject>(&cr).await?;
        wait_for(READY, Duration::from_millis(250), "the forced reconcile", async || {
            let m = env.operator.metrics().await?;
            let (now, then) = (m.reconciles("OpenstackProject"), before.reconciles("OpenstackProject"));
            Ok(if now > then {
                Check::Done(())
            } else {
                Check::Pending(format!("{now} project reconciles, {then} before"))
            })
        })
        .await?;
        let after = settled(env).await?;
        let calls = delta(&before.api_calls(), &after.api_calls());
        let writes: BTreeMap<&String, &f64> = calls.iter().filter(|(op, _)| is_write(op)).collect();
        let reads: f64 = calls.iter().filter(|(op, _)| !is_write(op)).map(|(_, n)| n).sum();
        let passes = after.reconciles("OpenstackProject") - before.reconciles("OpenstackProject");
        eprintln!(
            "STEADY STATE: a forced reconcile of the converged seed README project made {reads} OpenStack reads and {} writes in {passes} pass(es): {calls:?}",
            writes.len()
        );
        assert!(writes.is_empty(), "a reconcile of a converged project must not write: {writes:?} (all calls: {calls:?})");
        assert!(reads > 0.0, "the reconcile compared with OpenStack: {calls:?}");
        let p: OpenstackProject = env.get(&cr).await?;
        assert!(is_ready(&p), "still Ready after the forced reconcile: {:?}", p.status);
        assert_eq!(condition(&p, "Ready").and_then(|c| c.reason).as_deref(), Some("InSync"));

        // Deletion removes everything, including this project's mapping rule.
        let f = footprint(&p, &t.domain, &t.mapping())?;
        env.delete_and_wait::<OpenstackProject>(&cr, READY).await?;
        assert_gone(env, &f).await?;
        // It was the only rule: the mapping and the protocol pointing at it went too.
        assert_not_found(env.cloud.identity.get_mapping(&t.mapping()).await, "the emptied mapping");
        assert_not_found(
            env.cloud.identity.get_federation_protocol(&t.idp, FEDERATION_PROTOCOL).await,
            "the protocol of the removed mapping",
        );
        Ok(())
    })
    .await
}

fn rule(direction: &str, protocol: &str, min: Option<i64>, max: Option<i64>) -> Value {
    let mut r = json!({"direction": direction, "protocol": protocol});
    if let Some(m) = min {
        r["portRangeMin"] = json!(m);
    }
    if let Some(m) = max {
        r["portRangeMax"] = json!(m);
    }
    r
}

fn with(mut r: Value, key: &str, value: &str) -> Value {
    r[key] = json!(value);
    r
}

fn network(name: &str, cidr: &str, snat: Option<bool>) -> Value {
    let mut n = json!({"name": name, "cidr": cidr, "enableDhcp": true});
    if let Some(snat) = snat {
        n["router"] = json!({"externalNetwork": EXTERNAL, "enableSnat": snat});
    }
    n
}

/// A larger tenant: three routed networks, three security groups with ten rules (CIDRs,
/// IPv6, ICMP, any protocol, remote groups including itself), two role bindings, every quota
/// key, federation. Then edits converge one by one, and deletion removes everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn larger_project_converges_on_edits() -> anyhow::Result<()> {
    env("larger", 60).await?.run(async |env| {
        let t = tenant(env).await?;
        let core = admin_core(env).await?;
        let carol = create_user(env, &core, &t.domain_id, "carol@example.com").await?;
        let dave = create_user(env, &core, &t.domain_id, "dave@example.com").await?;
        let external = external_network_id(env).await?;
        let (member, reader) = (role_id(env, "member").await?, role_id(env, "reader").await?);

        let cr = env.unique("lab");
        let pname = format!("{cr}.example.com");
        let mut networks = vec![
            network("alpha", "10.31.1.0/24", Some(true)),
            network("beta", "10.31.2.0/24", Some(true)),
            network("gamma", "10.31.3.0/24", Some(false)),
        ];
        networks[1]["dnsNameservers"] = json!(["192.0.2.53"]);
        let mut groups = vec![
            json!({"name": "web", "description": "HTTP(S) from anywhere", "rules": [
                with(rule("ingress", "tcp", Some(80), Some(80)), "remoteIpPrefix", "0.0.0.0/0"),
                with(rule("ingress", "tcp", Some(443), Some(443)), "remoteIpPrefix", "0.0.0.0/0"),
                with(with(rule("ingress", "tcp", Some(443), Some(443)), "remoteIpPrefix", "::/0"), "ethertype", "IPv6"),
            ]}),
            json!({"name": "bastion", "description": "", "rules": [
                with(rule("ingress", "tcp", Some(22), Some(22)), "remoteIpPrefix", "198.51.100.0/24"),
                rule("ingress", "icmp", Some(8), None),
                with(rule("ingress", "tcp", Some(2222), Some(2222)), "remoteIpPrefix", "203.0.113.0/24"),
            ]}),
            json!({"name": "internal", "description": "east-west", "rules": [
                with(rule("ingress", "any", None, None), "remoteGroupName", "bastion"),
                with(rule("ingress", "udp", Some(5000), Some(5100)), "remoteGroupName", "web"),
                with(rule("ingress", "tcp", Some(8080), Some(8080)), "remoteGroupName", "internal"),
                with(rule("egress", "tcp", Some(5432), Some(5432)), "remoteIpPrefix", "10.0.0.0/8"),
            ]}),
        ];
        let rule_count: usize = groups.iter().map(|g| g["rules"].as_array().map_or(0, Vec::len)).sum();
        assert_eq!(rule_count, 10);
        let mut bindings = json!([
            {"role": "member", "users": ["carol@example.com", "dave@example.com"], "userDomain": t.domain},
            {"role": "reader", "users": ["erin@example.com"], "userDomain": t.domain},
        ]);
        let mut quotas = json!({
            "compute": {"instances": 20, "cores": 40, "ramMB": 81920, "serverGroups": 10, "serverGroupMembers": 10},
            "storage": {"volumes": 20, "volumesGB": 1000, "snapshots": 10, "backups": 10, "backupsGB": 500},
            "network": {"floatingIps": 10, "networks": 10, "subnets": 10, "routers": 5, "ports": 200,
                        "securityGroups": 20, "securityGroupRules": 200},
        });
        let doc = json!({
            "apiVersion": "sunet.se/v1alpha1",
            "kind": "OpenstackProject",
            "metadata": {"name": cr},
            "spec": {
                "name": pname,
                "description": "Research lab tenant",
                "domain": t.domain,
                "enabled": true,
                "quotas": quotas,
                "networks": networks,
                "securityGroups": groups,
                "roleBindings": bindings,
                "federationRef": {"configMapName": t.config_map},
            }
        });
        env.apply(&doc.to_string()).await?;
        let mut p: OpenstackProject = env.wait_ready(&cr, READY).await?;
        assert_areas(&p, &AREAS);
        assert_eq!(p.metadata.generation, Some(1));
        let pid = status(&p)?.project_id.clone().context("projectId")?;
        let gid = status(&p)?.group_id.clone().context("groupId")?;
        let group = project_group_name(&pname);
        let mut limits = vec![
            ("compute.instances", "instances", 20),
            ("compute.cores", "cores", 40),
            ("compute.ramMB", "ram", 81920),
            ("compute.serverGroups", "server_groups", 10),
            ("compute.serverGroupMembers", "server_group_members", 10),
            ("storage.volumes", "volumes", 20),
            ("storage.volumesGB", "gigabytes", 1000),
            ("storage.snapshots", "snapshots", 10),
            ("storage.backups", "backups", 10),
            ("storage.backupsGB", "backup_gigabytes", 500),
            ("network.floatingIps", "floatingip", 10),
            ("network.networks", "network", 10),
            ("network.subnets", "subnet", 10),
            ("network.routers", "router", 5),
            ("network.ports", "port", 200),
            ("network.securityGroups", "security_group", 20),
            ("network.securityGroupRules", "security_group_rule", 200),
        ];
        assert_quotas(env, &p, &limits).await?;
        assert_networks(env, &p, &networks, &external).await?;
        assert_security_groups(env, &p, &groups).await?;
        let assignments = async || -> anyhow::Result<BTreeSet<(Actor, String)>> {
            Ok(env
                .cloud
                .identity
                .list_project_role_assignments(&pid)
                .await?
                .into_iter()
                .map(|a| (a.actor, a.role_id))
                .collect())
        };
        // Federation maps each role's users into a group holding that role alone: erin, a
        // reader, into the reader group (the project group would make her a member).
        let reader_gid = status(&p)?.role_groups.get("reader").cloned().context("status.roleGroups.reader")?;
        let reader_group = env.cloud.identity.get_group(&reader_gid).await?;
        assert_eq!(reader_group.name, format!("{group}-reader"));
        let want: BTreeSet<(Actor, String)> = [
            (Actor::Group(gid.clone()), member.clone()),
            (Actor::Group(reader_gid.clone()), reader.clone()),
        ]
        .into();
        assert_eq!(assignments().await?, want, "role assignments");
        assert_eq!(group_members(env, &gid).await?, [carol.clone(), dave.clone()].into(), "members of {group}");
        assert_eq!(status(&p)?.pending_users, vec!["erin@example.com".to_string()]);
        let reader_rule = expected_rule(&reader_group.name, &t.domain, &["erin@example.com"]);
        let member_rule = expected_rule(&group, &t.domain, &["carol@example.com", "dave@example.com"]);
        assert_federation(env, &t, &member_rule).await?;
        assert_eq!(mapping_rules(env, &t.mapping()).await?, vec![member_rule, reader_rule.clone()]);

        // Each edit: one generation more, observed once converged.
        let mut generation = 1;
        let mut edit = async |what: &str, patch: Value| -> anyhow::Result<OpenstackProject> {
            let patched: OpenstackProject = env.merge_spec(&cr, patch).await?;
            generation += 1;
            assert_eq!(patched.metadata.generation, Some(generation), "{what}: generation");
            let p: OpenstackProject = env
                .wait_ready(&cr, READY)
                .await
                .with_context(|| format!("converging after: {what}"))?;
            assert_eq!(p.metadata.generation, Some(generation), "{what}: no other spec change");
            assert_eq!(status(&p)?.observed_generation, Some(generation), "{what}: observedGeneration");
            assert_areas(&p, &AREAS);
            Ok(p)
        };

        // Add a network.
        networks.push(network("delta", "10.31.4.0/24", Some(true)));
        p = edit("adding network delta", json!({"networks": networks})).await?;
        assert_networks(env, &p, &networks, &external).await?;

        // Remove a network: its router, interface, subnet and network go.
        let beta = status(&p)?.networks[1].clone();
        assert_eq!(beta.name, "beta");
        networks.remove(1);
        p = edit("removing network beta", json!({"networks": networks})).await?;
        assert_networks(env, &p, &networks, &external).await?;
        let net = &env.cloud.network;
        let beta_router = beta.router_id.clone().context("beta's router")?;
        assert_not_found(net.get_router(&beta_router).await, "router beta-router");
        assert_not_found(net.get_subnet(beta.subnet_id.as_deref().unwrap_or_default()).await, "subnet beta-subnet");
        assert_not_found(net.get_network(beta.network_id.as_deref().unwrap_or_default()).await, "network beta");
        let beta_ports: Vec<_> = net
            .list_subnets(&SubnetFilter {
                project_id: Some(pid.clone()),
                name: Some("beta-subnet".into()),
                ..Default::default()
            })
            .await?;
        assert!(beta_ports.is_empty(), "no beta-subnet left in the project: {beta_ports:?}");
        let routers = net
            .list_routers(&RouterFilter {
                project_id: Some(pid.clone()),
                ..Default::default()
            })
            .await?;
        let mut names: Vec<String> = routers.iter().map(|r| r.name.clone()).collect();
        names.sort();
        assert_eq!(names, vec!["alpha-router", "delta-router", "gamma-router"], "the project's routers");
        for r in &routers {
            for port in net.list_router_interfaces(&r.id).await? {
                assert!(
                    port.fixed_ips.iter().all(|f| f.subnet_id.as_deref() != beta.subnet_id.as_deref()),
                    "no interface on beta-subnet is left on {}: {port:?}",
                    r.name
                );
            }
        }

        // Add a rule to one group, remove one from another.
        groups[0]["rules"]
            .as_array_mut()
            .context("web rules")?
            .push(with(rule("ingress", "tcp", Some(8443), Some(8443)), "remoteIpPrefix", "0.0.0.0/0"));
        groups[1]["rules"].as_array_mut().context("bastion rules")?.remove(2);
        p = edit("adding a web rule, removing a bastion rule", json!({"securityGroups": groups})).await?;
        let sgs = assert_security_groups(env, &p, &groups).await?;
        assert!(
            !sgs["bastion"].rules.iter().any(|r| r.port_range_min == Some(2222)),
            "the removed rule is gone: {:?}",
            sgs["bastion"].rules
        );
        assert!(
            sgs["web"].rules.iter().any(|r| r.port_range_min == Some(8443)),
            "the added rule exists: {:?}",
            sgs["web"].rules
        );

        // Change a quota value.
        quotas["compute"]["cores"] = json!(48);
        p = edit("cores 40 -> 48", json!({"quotas": quotas})).await?;
        for l in &mut limits {
            if l.0 == "compute.cores" {
                l.2 = 48;
            }
        }
        assert_quotas(env, &p, &limits).await?;

        // Remove a user from a binding: dave's membership and his place in the rule go.
        bindings[0]["users"] = json!(["carol@example.com"]);
        p = edit("removing dave from the member binding", json!({"roleBindings": bindings})).await?;
        assert_eq!(assignments().await?, want, "the groups keep their roles");
        assert_eq!(group_members(env, &gid).await?, [carol.clone()].into(), "dave left {group}");
        let rule = expected_rule(&group, &t.domain, &["carol@example.com"]);
        assert_federation(env, &t, &rule).await?;
        assert_eq!(mapping_rules(env, &t.mapping()).await?, vec![rule, reader_rule]);

        // Deletion removes everything.
        let f = footprint(&p, &t.domain, &t.mapping())?;
        env.delete_and_wait::<OpenstackProject>(&cr, READY).await?;
        assert_gone(env, &f).await?;
        Ok(())
    })
    .await
}

fn small_project(cr: &str, t: &Tenant, user: &str) -> String {
    format!(
        r#"
apiVersion: sunet.se/v1alpha1
kind: OpenstackProject
metadata:
  name: {cr}
spec:
  name: {cr}.example.com
  description: shares a mapping
  domain: {domain}
  enabled: true
  roleBindings:
    - role: member
      users: ["{user}"]
      userDomain: {domain}
  federationRef:
    configMapName: {cm}
"#,
        domain = t.domain,
        cm = t.config_map
    )
}

/// Two projects naming the same federation ConfigMap (one IdP, one shared mapping), created
/// at the same time, both keep their rule; deleting one leaves the other's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projects_sharing_a_mapping_keep_each_others_rules() -> anyhow::Result<()> {
    env("shared_mapping", 60)
        .await?
        .run(async |env| {
            let t = tenant(env).await?;
            let (a, b) = (env.unique("one"), env.unique("two"));
            // One apply: both objects appear together and are reconciled concurrently.
            env.apply(&format!(
                "{}\n---\n{}",
                small_project(&a, &t, "ann@example.com"),
                small_project(&b, &t, "ben@example.com")
            ))
            .await?;
            let pa: OpenstackProject = env.wait_ready(&a, READY).await?;
            let pb: OpenstackProject = env.wait_ready(&b, READY).await?;
            let ra = expected_rule(
                &project_group_name(&pa.spec.name),
                &t.domain,
                &["ann@example.com"],
            );
            let rb = expected_rule(
                &project_group_name(&pb.spec.name),
                &t.domain,
                &["ben@example.com"],
            );
            assert_federation(env, &t, &ra).await?;
            assert_federation(env, &t, &rb).await?;
            assert_eq!(
                mapping_rules(env, &t.mapping()).await?.len(),
                2,
                "exactly the two projects' rules"
            );

            // Forced reconciles of both at once (concurrent read-modify-writes of the mapping)
            // keep both rules.
            let before = settled(env).await?;
            env.request_reconcile::<OpenstackProject>(&a).await?;
            env.request_reconcile::<OpenstackProject>(&b).await?;
            wait_for(
                READY,
                Duration::from_millis(250),
                "both forced reconciles",
                async || {
                    let m = env.operator.metrics().await?;
                    let (now, then) = (
                        m.reconciles("OpenstackProject"),
                        before.reconciles("OpenstackProject"),
                    );
                    Ok(if now >= then + 2.0 {
                        Check::Done(())
                    } else {
                        Check::Pending(format!("{now} project reconciles, {then} before"))
                    })
                },
            )
            .await?;
            settled(env).await?;
            let rules = mapping_rules(env, &t.mapping()).await?;
            assert!(
                rules.contains(&ra) && rules.contains(&rb) && rules.len() == 2,
                "both rules after the forced reconciles: {rules:?}"
            );

            let fa = footprint(&pa, &t.domain, &t.mapping())?;
            env.delete_and_wait::<OpenstackProject>(&a, READY).await?;
            assert_gone(env, &fa).await?;
            let rules = mapping_rules(env, &t.mapping()).await?;
            assert_eq!(
                rules,
                vec![rb.clone()],
                "only the remaining project's rule is left"
            );
            assert_federation(env, &t, &rb).await?;
            let pb: OpenstackProject = env.wait_ready(&b, READY).await?;
            assert_areas(
                &pb,
                &["ProjectReady", "RoleBindingsReady", "FederationReady"],
            );
            Ok(())
        })
        .await
}

/// A role outside the operator's allow-list: PolicyViolation naming the field, and nothing
/// in OpenStack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_outside_the_allow_list_is_a_policy_violation() -> anyhow::Result<()> {
    env("policy", 60)
        .await?
        .run(async |env| {
            let default = env
                .cloud
                .identity
                .find_domain("Default")
                .await?
                .context("the Default domain")?;
            let cr = env.unique("pol");
            let pname = format!("{cr}.example.com");
            env.apply(&format!(
                r#"
apiVersion: sunet.se/v1alpha1
kind: OpenstackProject
metadata:
  name: {cr}
spec:
  name: {pname}
  description: wants admin
  domain: Default
  enabled: true
  networks:
    - name: internal
      cidr: 192.168.100.0/24
  roleBindings:
    - role: admin
      users: ["mallory@example.com"]
"#
            ))
            .await?;
            let p: OpenstackProject = env
                .wait_condition(&cr, "Ready", false, "PolicyViolation", READY)
                .await?;
            let message = condition(&p, "Ready")
                .and_then(|c| c.message)
                .unwrap_or_default();
            assert!(
                message.contains("spec.roleBindings[0].role"),
                "the message names the field: {message}"
            );
            assert!(
                message.contains("admin"),
                "the message names the role: {message}"
            );
            assert_ne!(
                status(&p)?.phase.map(|x| x.to_string()).as_deref(),
                Some("Ready"),
                "not Ready: {:?}",
                p.status
            );
            assert!(
                status(&p)?.project_id.is_none(),
                "no project id: {:?}",
                p.status
            );
            let found = env.cloud.identity.find_project(&default.id, &pname).await?;
            assert!(found.is_none(), "no Keystone project {pname}: {found:?}");
            let group = env
                .cloud
                .identity
                .find_group(&default.id, &project_group_name(&pname))
                .await?;
            assert!(group.is_none(), "no group for {pname}: {group:?}");
            let events = e2e::k8s::events_for(&env.client, "OpenstackProject", &cr).await?;
            assert!(
                !events.iter().any(|e| e.reason == "Created"),
                "nothing was created: {events:?}"
            );
            // Deleting the refused object needs nothing in OpenStack either.
            env.delete_and_wait::<OpenstackProject>(&cr, READY).await?;
            assert!(
                env.cloud
                    .identity
                    .find_project(&default.id, &pname)
                    .await?
                    .is_none()
            );
            Ok(())
        })
        .await
}

/// The identity provider belongs to the administrator (seed W7): a federation ConfigMap in the
/// project's own namespace can neither create it nor repoint it, while one in a namespace the
/// operator trusts (`--federation-namespaces`) can. Removing `federationRef` removes the rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_trusted_config_map_manages_the_identity_provider() -> anyhow::Result<()> {
    let admin_ns = e2e::names::unique("fedadmin");
    let mut opts = EnvOptions::new(BIN, "project-idp-boundary");
    opts.cleanup_timeout = READY;
    opts.operator.extra_args = vec!["--federation-namespaces".into(), admin_ns.clone()];
    TestEnv::start("idp_boundary", opts)
        .await?
        .run(async |env| {
            e2e::k8s::ensure_namespace(&env.client, &admin_ns).await?;
            let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
                kube::Api::all(env.client.clone());
            let ns = admin_ns.clone();
            env.defer(&format!("namespace {admin_ns}"), move |_| {
                async move {
                    let _ = namespaces.delete(&ns, &Default::default()).await;
                    Ok(())
                }
                .boxed()
            });
            // The tenant's own ConfigMap names an IdP nobody created.
            let t = tenant_without_idp(env, None).await?;
            let cr = env.unique("idp");
            let pname = format!("{cr}.example.com");
            let group = project_group_name(&pname);
            let doc = json!({
                "apiVersion": "sunet.se/v1alpha1",
                "kind": "OpenstackProject",
                "metadata": {"name": cr},
                "spec": {
                    "name": pname,
                    "description": "federated",
                    "domain": t.domain,
                    "enabled": true,
                    "roleBindings": [{"role": "member", "users": ["alice@example.com"], "userDomain": t.domain}],
                    "federationRef": {"configMapName": t.config_map},
                },
            });
            env.apply(&serde_json::to_string(&doc)?).await?;
            let p: OpenstackProject = env
                .wait_condition(&cr, "FederationReady", false, "DependencyMissing", READY)
                .await?;
            let message = condition(&p, "FederationReady").and_then(|c| c.message).unwrap_or_default();
            assert!(
                message.contains(&t.idp) && message.contains(&t.config_map),
                "the message names the IdP and the ConfigMap: {message}"
            );
            assert!(condition(&p, "ProjectReady").is_some_and(|c| c.is_true()), "{:?}", p.status);
            let idp = env.cloud.identity.get_identity_provider(&t.idp).await.optional()?;
            assert!(idp.is_none(), "the tenant's ConfigMap created identity provider {}: {idp:?}", t.idp);
            assert!(env.cloud.identity.get_mapping(&t.mapping()).await.optional()?.is_none());

            // The administrator creates it for their issuer; the tenant's remote ID differs.
            defer_federation_cleanup(env, &t.idp);
            let admin_issuer = format!("https://admin-{}.example.com", t.idp);
            env.cloud
                .identity
                .create_identity_provider(&IdentityProviderCreate {
                    id: t.idp.clone(),
                    remote_ids: vec![admin_issuer.clone()],
                    enabled: true,
                    domain_id: None,
                    description: None,
                })
                .await?;
            env.request_reconcile::<OpenstackProject>(&cr).await?;
            let p: OpenstackProject = env
                .wait_condition(&cr, "FederationReady", false, "PolicyViolation", READY)
                .await?;
            let message = condition(&p, "FederationReady").and_then(|c| c.message).unwrap_or_default();
            assert!(message.contains("idp-remote-id"), "the message names the key: {message}");
            let idp = env.cloud.identity.get_identity_provider(&t.idp).await?;
            assert_eq!(idp.remote_ids, vec![admin_issuer.clone()], "the tenant did not repoint the IdP");
            assert!(env.cloud.identity.get_mapping(&t.mapping()).await.optional()?.is_none());

            // The same settings from the administrator's namespace are trusted: the remote ID
            // is corrected and the rule written.
            env.apply(&format!(
                r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: {cm}
  namespace: {admin_ns}
data:
  idp-name: {idp}
  idp-remote-id: {remote}
  sso-domain: {domain}
"#,
                cm = t.config_map,
                idp = t.idp,
                remote = t.remote_id,
                domain = t.domain,
            ))
            .await?;
            env.merge_spec::<OpenstackProject>(&cr, json!({"federationRef": {"configMapNamespace": admin_ns}}))
                .await?;
            let p: OpenstackProject = env.wait_ready(&cr, READY).await?;
            let rule = expected_rule(&group, &t.domain, &["alice@example.com"]);
            assert_federation(env, &t, &rule).await?;
            assert_eq!(
                status(&p)?.federation_rule.as_ref().map(|r| r.mapping.clone()),
                Some(t.mapping())
            );

            // federationRef removed: the rule goes (the seed left it behind).
            let patched: OpenstackProject =
                env.merge_spec(&cr, json!({"federationRef": null})).await?;
            let generation = patched.metadata.generation;
            env.wait_object::<OpenstackProject>(&cr, READY, "rule removed", |p| {
                p.status.as_ref().is_some_and(|s| {
                    s.observed_generation == generation && s.federation_rule.is_none()
                })
            })
            .await?;
            let mapping = env.cloud.identity.get_mapping(&t.mapping()).await.optional()?;
            assert!(
                mapping.as_ref().is_none_or(|m| !m
                    .rules
                    .to_value()
                    .ok()
                    .and_then(|v| v.as_array().cloned())
                    .is_some_and(|rules| rules.iter().any(|r| rule_is_for(r, &group, &t.domain)))),
                "the project's rule is gone: {mapping:?}"
            );
            env.delete_and_wait::<OpenstackProject>(&cr, READY).await?;
            Ok(())
        })
        .await
}

/// The periodic drift check (issue 15): while nothing changes, a check costs the converged
/// project no pass and no write (it reads the cloud per cluster); a security-group rule, a
/// subnet (detached from its router first, as Neutron requires) and the project group's role
/// assignment removed by hand are found by the next check and put back by the pass it asks
/// for, within one period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_removed_by_hand_comes_back_within_one_period() -> anyhow::Result<()> {
    const PERIOD: u64 = 10;
    env("drift", PERIOD).await?.run(async |env| {
        let t = tenant_without_idp(env, None).await?;
        let cr = env.unique("drift");
        let pname = format!("{cr}.example.com");
        let doc = json!({
            "apiVersion": "sunet.se/v1alpha1",
            "kind": "OpenstackProject",
            "metadata": {"name": cr},
            "spec": {
                "name": pname,
                "description": "drift e2e",
                "domain": t.domain,
                "enabled": true,
                "quotas": {"compute": {"cores": 21}, "network": {"routers": 4}},
                "networks": [network("internal", "10.41.1.0/24", Some(true))],
                "securityGroups": [{"name": "web", "description": "web", "rules": [
                    with(rule("ingress", "tcp", Some(443), Some(443)), "remoteIpPrefix", "0.0.0.0/0"),
                    with(rule("ingress", "tcp", Some(22), Some(22)), "remoteIpPrefix", "198.51.100.0/24"),
                ]}],
            }
        });
        env.apply(&doc.to_string()).await?;
        let p: OpenstackProject = env.wait_ready(&cr, READY).await?;
        let st = status(&p)?.clone();
        let pid = st.project_id.clone().context("projectId")?;
        let gid = st.group_id.clone().context("groupId")?;
        let sg = st.security_groups[0].id.clone().context("security group id")?;
        let entry = st.networks[0].clone();
        let router = entry.router_id.clone().context("router id")?;
        let subnet = entry.subnet_id.clone().context("subnet id")?;
        let member = role_id(env, "member").await?;
        let (net, ks) = (&env.cloud.network, &env.cloud.identity);
        let ingress = async || -> anyhow::Result<usize> {
            Ok(net
                .list_security_group_rules(&sg)
                .await?
                .iter()
                .filter(|r| r.direction == "ingress")
                .count())
        };
        let group_grant = async || -> anyhow::Result<bool> {
            Ok(ks
                .list_project_role_assignments(&pid)
                .await?
                .iter()
                .any(|a| a.actor == Actor::Group(gid.clone()) && a.role_id == member))
        };
        assert_eq!(ingress().await?, 2);
        assert!(group_grant().await?);

        // Converged: two periods of checks make no project pass and no write.
        let before = settled(env).await?;
        tokio::time::sleep(Duration::from_secs(2 * PERIOD + 2)).await;
        let after = settled(env).await?;
        let calls = delta(&before.api_calls(), &after.api_calls());
        eprintln!("calls in {} s of drift checks (period {PERIOD} s, one converged project; the domain's own resyncs included): {calls:?}", 2 * PERIOD + 2);
        let writes: Vec<&String> = calls.keys().filter(|op| is_write(op)).collect();
        assert!(writes.is_empty(), "the checks of a converged project write nothing: {calls:?}");
        assert_eq!(
            after.reconciles("OpenstackProject"),
            before.reconciles("OpenstackProject"),
            "no pass of the converged project: {calls:?}"
        );
        for per_tenant in ["find_project", "list_project_role_assignments", "list_router_interfaces"] {
            assert!(!calls.contains_key(per_tenant), "{per_tenant} is not read per tenant: {calls:?}");
        }
        assert!(
            calls.contains_key("list_domain_role_assignments") && calls.contains_key("list_routers"),
            "the checks read the cloud per cluster: {calls:?}"
        );

        // By hand: a rule, the subnet, the group's grant.
        let rule = net
            .list_security_group_rules(&sg)
            .await?
            .into_iter()
            .find(|r| r.direction == "ingress")
            .context("an ingress rule")?;
        net.delete_security_group_rule(&rule.id).await?;
        net.remove_router_interface(&router, &subnet).await?;
        net.delete_subnet(&subnet).await?;
        ks.revoke_project_role(&pid, &Actor::Group(gid.clone()), &member).await?;
        let removed = std::time::Instant::now();

        // The next check (at most one period away) finds them; its pass puts them back.
        let new_subnet = wait_for(
            Duration::from_secs(PERIOD) + READY,
            Duration::from_secs(1),
            "the rule, the subnet and the grant to come back",
            async || {
                let p: OpenstackProject = env.get(&cr).await?;
                let st = status(&p)?;
                let subnet_now = st.networks[0].subnet_id.clone().unwrap_or_default();
                let attached = !subnet_now.is_empty()
                    && subnet_now != subnet
                    && net.list_router_interfaces(&router).await?.iter().any(|port| {
                        port.fixed_ips.iter().any(|ip| ip.subnet_id.as_deref() == Some(subnet_now.as_str()))
                    });
                let (rules, grant) = (ingress().await?, group_grant().await?);
                if rules == 2 && attached && grant && is_ready(&p) {
                    return Ok(Check::Done(subnet_now));
                }
                Ok(Check::Pending(format!("ingress rules {rules}, new subnet attached {attached}, grant {grant}")))
            },
        )
        .await?;
        eprintln!(
            "drift repaired {:.1} s after the removals (period {PERIOD} s); new subnet {new_subnet}",
            removed.elapsed().as_secs_f64()
        );
        Ok(())
    })
    .await
}
