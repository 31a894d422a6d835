//! End to end: what a run on a real cluster turned up (issue 14), each checked through the
//! binary, a Kubernetes API and the real test cloud: quota keys removed from the spec go back
//! to the cloud's default; an identity provider the operator creates lives in the sso-domain
//! and goes with the last project using it; federated users log in with exactly the roles of
//! their bindings (a reader too); `member` users are members of the project group; a project
//! waiting for its domain goes on when the domain is Ready, not on its next retry; the log at
//! the default level shows reconciles, not HTTP requests.
//!
//! Every name is unique, so the tests share one cloud in parallel. Nothing here measures time:
//! where speed is the point, the retry delay is made longer than any wait, so only the
//! behaviour under test can explain the result.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Context as _;
use api::naming::{FEDERATION_PROTOCOL, mapping_name, project_group_name};
use api::{OpenstackDomain, OpenstackProject};
use e2e::k8s::{condition, is_ready};
use e2e::{EnvOptions, TestEnv};
use futures::FutureExt as _;
use openstack::OptionalExt as _;
use openstack::adapter::{ClientOptions, CloudSelector, Core, Request, Service};
use openstack::model::{Actor, DomainUpdate, IdentityProviderCreate, QuotaUpdate};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_openstack-operator");
/// Time for a project pass that creates or changes OpenStack objects.
const READY: Duration = Duration::from_secs(240);

async fn env(test: &str, extra_args: &[&str]) -> anyhow::Result<TestEnv> {
    env_with(test, extra_args, 60).await
}

async fn env_with(test: &str, extra_args: &[&str], resync_seconds: u64) -> anyhow::Result<TestEnv> {
    let mut opts = EnvOptions::new(BIN, &format!("report-{test}"));
    opts.operator.resync_seconds = resync_seconds;
    opts.operator.extra_args = extra_args.iter().map(|a| a.to_string()).collect();
    opts.cleanup_timeout = READY;
    TestEnv::start(test, opts).await
}

/// A raw admin session, for what the port does not do (default quotas, federated logins).
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

/// An OpenstackDomain, Ready; returns its Keystone ID.
async fn domain(env: &TestEnv, name: &str) -> anyhow::Result<String> {
    env.apply(&format!(
        r#"
apiVersion: sunet.se/v1alpha1
kind: OpenstackDomain
metadata:
  name: {name}
spec:
  name: {name}
  description: "e2e field report"
  enabled: true
"#
    ))
    .await?;
    let d: OpenstackDomain = env.wait_ready(name, READY).await?;
    d.status
        .and_then(|s| s.domain_id)
        .context("status.domainId of the Ready domain")
}

/// A federation ConfigMap naming `idp` with `sso-domain: domain`, in `namespace`.
async fn federation_config_map(
    env: &TestEnv,
    namespace: &str,
    name: &str,
    idp: &str,
    domain: &str,
) -> anyhow::Result<()> {
    env.apply(&format!(
        r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: {name}
  namespace: {namespace}
data:
  idp-name: {idp}
  idp-remote-id: https://{idp}.example.com
  sso-domain: {domain}
"#
    ))
    .await?;
    Ok(())
}

/// Removes, after the test, an identity provider and mapping left behind, and a domain
/// Keystone generated for the IdP (what the operator did before the fix).
fn defer_idp_cleanup(env: &TestEnv, idp: &str) {
    let idp = idp.to_string();
    env.defer(&format!("identity provider {idp}"), move |cloud| {
        async move {
            let mapping = mapping_name(&idp);
            cloud.identity.delete_mapping(&mapping).await.optional()?;
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

/// Creates a Keystone user; removed after the test.
async fn create_user(
    env: &TestEnv,
    core: &Core,
    domain_id: &str,
    name: &str,
) -> anyhow::Result<String> {
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

/// Logs in as the federated user `sub` through `idp` the way Keystone's `mapped` method does
/// for an OIDC login (the assertion's `HTTP_OIDC_SUB` is the `OIDC-SUB` request header), then
/// scopes the token to `project_id`; returns the roles of the scoped token.
async fn federated_roles(
    core: &Core,
    idp: &str,
    sub: &str,
    project_id: &str,
) -> anyhow::Result<BTreeSet<String>> {
    let login = Request::post(Service::Identity, "federated_login", "auth/tokens")
        .header("oidc-sub", sub)?
        .json(&json!({"auth": {"identity": {
            "methods": ["mapped"],
            "mapped": {"identity_provider": idp, "protocol": FEDERATION_PROTOCOL}
        }}}))?;
    let rsp = core
        .send(&login)
        .await
        .with_context(|| format!("federated login of {sub} through {idp}"))?;
    let unscoped = rsp
        .headers
        .get("x-subject-token")
        .and_then(|v| v.to_str().ok())
        .context("the login answered a token")?
        .to_string();
    let scope = Request::post(Service::Identity, "scoped_token", "auth/tokens").json(&json!({
        "auth": {
            "identity": {"methods": ["token"], "token": {"id": unscoped}},
            "scope": {"project": {"id": project_id}}
        }
    }))?;
    let token: Value = core
        .send(&scope)
        .await
        .with_context(|| format!("scoping {sub}'s token to project {project_id}"))?
        .json_at("token")?;
    Ok(token["roles"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str().map(str::to_string))
        .collect())
}

fn project_id(p: &OpenstackProject) -> anyhow::Result<String> {
    p.status
        .as_ref()
        .and_then(|s| s.project_id.clone())
        .context("status.projectId")
}

async fn member_ids(env: &TestEnv, group_id: &str) -> anyhow::Result<BTreeSet<String>> {
    Ok(env
        .cloud
        .identity
        .list_group_users(group_id)
        .await?
        .into_iter()
        .map(|u| u.id)
        .collect())
}

// ----------------------------------------------------------------------------- quotas

/// Reads a service's default quotas (`defaults` for Nova and Cinder, `default` for Neutron).
async fn default_quotas(
    core: &Core,
    service: Service,
    path: &str,
    key: &str,
) -> anyhow::Result<Value> {
    let req = Request::get(service, "quota_defaults", path);
    Ok(core
        .send(&req)
        .await
        .with_context(|| format!("reading {path}"))?
        .json_at(key)?)
}

/// `ramMB: 12345` set and then removed from the spec goes back to Nova's default (likewise a
/// Cinder and a Neutron key); a key still in the spec keeps its value, and a key the spec never
/// set keeps whatever an administrator gave it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_quota_keys_go_back_to_the_cloud_default() -> anyhow::Result<()> {
    env("quotas", &[])
        .await?
        .run(async |env| {
            let core = admin_core(env).await?;
            let cr = env.unique("quota");
            env.apply(&format!(
                r#"
apiVersion: sunet.se/v1alpha1
kind: OpenstackProject
metadata:
  name: {cr}
spec:
  name: {cr}.example.com
  description: quotas set and removed
  domain: Default
  enabled: true
  quotas:
    compute: {{ramMB: 12345, cores: 33}}
    storage: {{volumes: 7}}
    network: {{routers: 3}}
"#
            ))
            .await?;
            let p: OpenstackProject = env.wait_ready(&cr, READY).await?;
            let pid = project_id(&p)?;
            let nova = env.cloud.compute.get_compute_quota(&pid).await?;
            assert_eq!((nova["ram"].limit, nova["cores"].limit), (12345, 33));
            // An administrator's own limit on a key the spec never set.
            let admin: QuotaUpdate = [("instances".to_string(), 17)].into();
            env.cloud.compute.update_compute_quota(&pid, &admin).await?;

            env.merge_spec::<OpenstackProject>(
                &cr,
                json!({"quotas": {
                    "compute": {"ramMB": null},
                    "storage": null,
                    "network": {"routers": null}
                }}),
            )
            .await?;
            env.wait_ready::<OpenstackProject>(&cr, READY).await?;

            let nova_default = default_quotas(
                &core,
                Service::Compute,
                &format!("os-quota-sets/{pid}/defaults"),
                "quota_set",
            )
            .await?;
            let cinder_default = default_quotas(
                &core,
                Service::BlockStorage,
                &format!("os-quota-sets/{pid}/defaults"),
                "quota_set",
            )
            .await?;
            let neutron_default = default_quotas(
                &core,
                Service::Network,
                &format!("quotas/{pid}/default"),
                "quota",
            )
            .await?;
            let nova = env.cloud.compute.get_compute_quota(&pid).await?;
            assert_eq!(
                Some(nova["ram"].limit),
                nova_default["ram"].as_i64(),
                "ram removed from the spec is Nova's default again"
            );
            assert_eq!(nova["cores"].limit, 33, "cores is still in the spec");
            assert_eq!(
                nova["instances"].limit, 17,
                "a key the spec never set keeps the administrator's value"
            );
            let cinder = env.cloud.block_storage.get_volume_quota(&pid).await?;
            assert_eq!(
                Some(cinder["volumes"].limit),
                cinder_default["volumes"].as_i64(),
                "volumes (the whole storage section removed) is Cinder's default again"
            );
            let neutron = env.cloud.network.get_network_quota(&pid).await?;
            assert_eq!(
                Some(neutron["router"].limit),
                neutron_default["router"].as_i64(),
                "routers removed from the spec is Neutron's default again"
            );
            Ok(())
        })
        .await
}

// ----------------------------------------------------------------------------- federation

/// An identity provider the operator creates (its ConfigMap is in a namespace the operator
/// trusts) is created in the sso-domain, so Keystone generates no domain for it; when the
/// last project using it is deleted, it goes, with its protocol and mapping.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_provider_the_operator_creates_lives_in_the_sso_domain_and_goes_with_its_last_project()
-> anyhow::Result<()> {
    let trusted = e2e::names::unique("fedtrust");
    env("idp", &["--federation-namespaces", &trusted])
        .await?
        .run(async |env| {
            env.apply(&format!(
                "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {trusted}\n"
            ))
            .await?;
            let sso = env.unique("sso");
            let sso_id = domain(env, &sso).await?;
            let idp = env.unique("idp");
            defer_idp_cleanup(env, &idp);
            let cm = env.unique("fed");
            federation_config_map(env, &trusted, &cm, &idp, &sso).await?;
            let cr = env.unique("fedp");
            env.apply(&format!(
                r#"
apiVersion: sunet.se/v1alpha1
kind: OpenstackProject
metadata:
  name: {cr}
spec:
  name: {cr}.example.com
  description: federated
  domain: {sso}
  enabled: true
  roleBindings:
    - role: member
      users: ["alice@example.com"]
  federationRef:
    configMapName: {cm}
    configMapNamespace: {trusted}
"#
            ))
            .await?;
            env.wait_ready::<OpenstackProject>(&cr, READY).await?;
            let i = env.cloud.identity.get_identity_provider(&idp).await?;
            assert_eq!(
                i.domain_id.as_deref(),
                Some(sso_id.as_str()),
                "the IdP is created in the sso-domain: {i:?}"
            );
            let domains = env.cloud.identity.list_domains().await?;
            let stray: Vec<_> = domains
                .iter()
                .filter(|d| d.name == idp || d.description.contains(&idp))
                .collect();
            assert!(stray.is_empty(), "no domain generated for {idp}: {stray:?}");

            env.delete_and_wait::<OpenstackProject>(&cr, READY).await?;
            assert!(
                env.cloud
                    .identity
                    .get_identity_provider(&idp)
                    .await
                    .optional()?
                    .is_none(),
                "the IdP the operator created goes with the last project using it"
            );
            assert!(
                env.cloud
                    .identity
                    .get_mapping(&mapping_name(&idp))
                    .await
                    .optional()?
                    .is_none(),
                "its mapping goes too"
            );
            Ok(())
        })
        .await
}

/// Federated users log in with exactly the roles of their bindings: a `reader` gets `reader`
/// (it was left out of the mapping, so could not log in at all), a `member` gets `member`,
/// someone bound to nothing cannot log in. The IdP was the administrator's: it stays after
/// the project is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn federated_users_log_in_with_exactly_the_roles_of_their_bindings() -> anyhow::Result<()> {
    env("fedroles", &[])
        .await?
        .run(async |env| {
            let core = admin_core(env).await?;
            let sso = env.unique("sso");
            domain(env, &sso).await?;
            let idp = env.unique("idp");
            defer_idp_cleanup(env, &idp);
            env.cloud
                .identity
                .create_identity_provider(&IdentityProviderCreate {
                    id: idp.clone(),
                    remote_ids: vec![format!("https://{idp}.example.com")],
                    enabled: true,
                    domain_id: None,
                    description: Some("created by the administrator (e2e)".into()),
                })
                .await?;
            let cm = env.unique("fed");
            federation_config_map(env, &env.namespace, &cm, &idp, &sso).await?;
            let cr = env.unique("roles");
            let (alice, carol, dave) = (
                format!("alice-{cr}"),
                format!("carol-{cr}"),
                format!("dave-{cr}"),
            );
            env.apply(&format!(
                r#"
apiVersion: sunet.se/v1alpha1
kind: OpenstackProject
metadata:
  name: {cr}
spec:
  name: {cr}.example.com
  description: federated roles
  domain: {sso}
  enabled: true
  roleBindings:
    - role: member
      users: ["{alice}", "{dave}"]
    - role: reader
      users: ["{carol}", "{dave}"]
  federationRef:
    configMapName: {cm}
"#
            ))
            .await?;
            let p: OpenstackProject = env.wait_ready(&cr, READY).await?;
            let pid = project_id(&p)?;
            let roles = |r: &[&str]| r.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
            assert_eq!(
                federated_roles(&core, &idp, &carol, &pid).await?,
                roles(&["reader"]),
                "a reader logs in read-only"
            );
            // Keystone's bootstrap makes `member` imply `reader`, so a member's token lists both.
            let member = federated_roles(&core, &idp, &alice, &pid).await?;
            assert!(member.contains("member"), "{alice}: {member:?}");
            let both = federated_roles(&core, &idp, &dave, &pid).await?;
            assert!(
                both.contains("member") && both.contains("reader"),
                "bound to both roles, gets both: {both:?}"
            );
            let stranger = federated_roles(&core, &idp, &format!("eve-{cr}"), &pid).await;
            assert!(
                stranger.is_err(),
                "a user bound to nothing cannot log in: {stranger:?}"
            );

            env.delete_and_wait::<OpenstackProject>(&cr, READY).await?;
            assert!(
                env.cloud.identity.get_identity_provider(&idp).await.is_ok(),
                "the administrator's IdP stays"
            );
            Ok(())
        })
        .await
}

// ----------------------------------------------------------------------------- group members

/// The users of a `member` binding are members of the project group `<name>-users` (as with
/// the seed, and what dashboards look at); membership follows the binding when a user is
/// removed from it; users of other roles keep their own grants.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_users_are_members_of_the_project_group() -> anyhow::Result<()> {
    env("members", &[])
        .await?
        .run(async |env| {
            let core = admin_core(env).await?;
            let dom = env.unique("mem");
            let dom_id = domain(env, &dom).await?;
            let cr = env.unique("grp");
            let (u1, u2, u3) = (format!("u1-{cr}"), format!("u2-{cr}"), format!("u3-{cr}"));
            let id1 = create_user(env, &core, &dom_id, &u1).await?;
            let id2 = create_user(env, &core, &dom_id, &u2).await?;
            let id3 = create_user(env, &core, &dom_id, &u3).await?;
            let pname = format!("{cr}.example.com");
            env.apply(&format!(
                r#"
apiVersion: sunet.se/v1alpha1
kind: OpenstackProject
metadata:
  name: {cr}
spec:
  name: {pname}
  description: group members
  domain: {dom}
  enabled: true
  roleBindings:
    - role: member
      users: ["{u1}", "{u2}"]
    - role: reader
      users: ["{u3}"]
"#
            ))
            .await?;
            let p: OpenstackProject = env.wait_ready(&cr, READY).await?;
            let pid = project_id(&p)?;
            let group = env
                .cloud
                .identity
                .find_group(&dom_id, &project_group_name(&pname))
                .await?
                .context("the project group")?;
            assert_eq!(
                member_ids(env, &group.id).await?,
                [id1.clone(), id2.clone()].into(),
                "the member binding's users are in {}",
                group.name
            );
            let reader = env
                .cloud
                .identity
                .find_role("reader")
                .await?
                .context("role reader")?;
            let grants = env
                .cloud
                .identity
                .list_project_role_assignments(&pid)
                .await?;
            assert!(
                grants
                    .iter()
                    .any(|a| a.actor == Actor::User(id3.clone()) && a.role_id == reader.id),
                "the reader keeps a grant of their own: {grants:?}"
            );

            env.merge_spec::<OpenstackProject>(
                &cr,
                json!({"roleBindings": [
                    {"role": "member", "users": [u1]},
                    {"role": "reader", "users": [u3]}
                ]}),
            )
            .await?;
            env.wait_ready::<OpenstackProject>(&cr, READY).await?;
            assert_eq!(
                member_ids(env, &group.id).await?,
                [id1].into(),
                "a user taken out of the binding leaves the group"
            );
            Ok(())
        })
        .await
}

// ----------------------------------------------------------------------------- dependencies

/// A project created before its domain goes on as soon as the OpenstackDomain is Ready. The
/// operator's retry of a missing dependency is an hour here, longer than any wait below, so
/// only the watch of the domain can explain the project becoming Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_waiting_for_its_domain_goes_on_when_the_domain_is_ready() -> anyhow::Result<()> {
    env_with("depwatch", &["--dependency-retry-seconds", "3600"], 3600)
        .await?
        .run(async |env| {
            let dom = env.unique("late");
            let cr = env.unique("early");
            env.apply(&format!(
                r#"
apiVersion: sunet.se/v1alpha1
kind: OpenstackProject
metadata:
  name: {cr}
spec:
  name: {cr}.example.com
  description: created before its domain
  domain: {dom}
  enabled: true
"#
            ))
            .await?;
            let p: OpenstackProject = env
                .wait_condition(&cr, "Ready", false, "DependencyMissing", READY)
                .await?;
            let msg = condition(&p, "Ready")
                .and_then(|c| c.message)
                .unwrap_or_default();
            assert!(msg.contains(&dom), "waits for domain {dom}: {msg}");

            domain(env, &dom).await?;
            // The retry is an hour away: only the domain's change can have triggered this pass.
            let p: OpenstackProject = env.wait_ready(&cr, READY).await?;
            assert!(is_ready(&p));
            Ok(())
        })
        .await
}

// ----------------------------------------------------------------------------- logs

/// The operator's own JSON log lines of the current run (after the last start header).
fn log_lines(env: &TestEnv) -> anyhow::Result<Vec<Value>> {
    let text = env.operator.log_text()?;
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect())
}

fn is_own_target(target: &str) -> bool {
    ["openstack_operator", "controllers", "openstack::", "api"]
        .iter()
        .any(|t| target == t.trim_end_matches("::") || target.starts_with(t))
}

/// Reconciles a project (which makes a dozen OpenStack requests) and checks the log: our
/// reconcile lines are there; no line of openstack_sdk, no per-request line, and nothing else
/// from a dependency below `warn`.
async fn check_quiet_log(env: &TestEnv) -> anyhow::Result<()> {
    let cr = env.unique("log");
    env.apply(&format!(
        r#"
apiVersion: sunet.se/v1alpha1
kind: OpenstackProject
metadata:
  name: {cr}
spec:
  name: {cr}.example.com
  description: log check
  domain: Default
  enabled: true
  quotas:
    compute: {{cores: 21}}
"#
    ))
    .await?;
    env.wait_ready::<OpenstackProject>(&cr, READY).await?;
    env.delete_and_wait::<OpenstackProject>(&cr, READY).await?;
    let lines = log_lines(env)?;
    let target = |l: &Value| l["target"].as_str().unwrap_or_default().to_string();
    let level = |l: &Value| l["level"].as_str().unwrap_or_default().to_string();
    let sdk: Vec<&Value> = lines
        .iter()
        .filter(|l| target(l).starts_with("openstack_sdk"))
        .collect();
    assert!(
        sdk.is_empty(),
        "{} openstack_sdk lines, e.g. {:?}",
        sdk.len(),
        sdk.first()
    );
    let noisy: Vec<&Value> = lines
        .iter()
        .filter(|l| !is_own_target(&target(l)) && !matches!(level(l).as_str(), "WARN" | "ERROR"))
        .collect();
    assert!(
        noisy.is_empty(),
        "{} lines of dependencies below warn, e.g. {:?}",
        noisy.len(),
        noisy.first()
    );
    let requests = lines
        .iter()
        .filter(|l| l["message"] == "openstack request")
        .count();
    assert_eq!(requests, 0, "per-request lines are debug");
    assert!(
        lines
            .iter()
            .any(|l| l["message"] == "reconciled" && l["span"]["object"] == cr.as_str()),
        "the reconcile of {cr} is logged at info"
    );
    Ok(())
}

/// The binary's default log level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_log_shows_reconciles_not_http_requests() -> anyhow::Result<()> {
    env("log-default", &[])
        .await?
        .run(async |env| check_quiet_log(env).await)
        .await
}

/// `LOG_LEVEL=info`, what the Helm chart and the kustomize base set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_level_info_of_the_deployments_shows_reconciles_not_http_requests() -> anyhow::Result<()>
{
    env("log-info", &["--log-level", "info"])
        .await?
        .run(async |env| check_quiet_log(env).await)
        .await
}
