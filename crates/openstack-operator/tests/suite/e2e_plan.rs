//! End to end: `openstack-operator plan` on the seed README's manifests against the real cloud
//! and a Kubernetes API. An empty cloud plans every object; after the operator applied them the
//! plan is empty (exit 0); an edit (a rule removed, a quota changed, a user out of a binding)
//! plans exactly that, and applying converges to it. A project asking for a tenant
//! application credential plans its user, its role, its credential and the Secret it is
//! delivered in, and nothing once delivered. The plan runs through a counting proxy of its own
//! (the operator and the test's checks do not use it), so every request `plan` sends is
//! counted and none may write.

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use api::naming::mapping_name;
use api::{OpenstackDomain, OpenstackFlavor, OpenstackNetwork, OpenstackProject};
use e2e::proxy::{CloudProxy, RequestRecord};
use e2e::target::CloudEnv;
use e2e::{EnvOptions, TestEnv};

use crate::e2e_project::create_user;
use futures::FutureExt as _;
use openstack::OptionalExt as _;
use openstack::adapter::{ClientOptions, CloudSelector, Core};
use openstack::model::IdentityProviderCreate;
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_openstack-operator");
/// Time for a project pass that creates or changes OpenStack objects (routers are slow).
const READY: Duration = Duration::from_secs(240);

const SEED: [(&str, &str); 5] = [
    (
        "domain.yaml",
        include_str!("../../../../examples/seed-readme/domain.yaml"),
    ),
    (
        "flavor.yaml",
        include_str!("../../../../examples/seed-readme/flavor.yaml"),
    ),
    (
        "network.yaml",
        include_str!("../../../../examples/seed-readme/network.yaml"),
    ),
    (
        "federation-configmap.yaml",
        include_str!("../../../../examples/seed-readme/federation-configmap.yaml"),
    ),
    (
        "project.yaml",
        include_str!("../../../../examples/seed-readme/project.yaml"),
    ),
];

fn doc(text: &str) -> anyhow::Result<Value> {
    api::manifest::documents(text)?
        .into_iter()
        .next()
        .context("one document")
}

/// The seed README's manifests with names of this test's own (the cloud is shared), the
/// provider network on the test cloud's VLAN physnet (its `external` flat network exists),
/// and the federation ConfigMap naming an identity provider made by the administrator.
struct Seed {
    domain: String,
    flavor: String,
    network: String,
    project: String,
    project_name: String,
    idp: String,
    /// An `OpenstackProject` of its own asking for a tenant application credential.
    tenant: String,
    docs: Vec<(&'static str, Value)>,
}

impl Seed {
    fn new(env: &TestEnv) -> anyhow::Result<Self> {
        let domain = env.unique("plan-sso");
        let flavor = env.unique("plan-b2");
        let network = env.unique("plan-ext");
        let project = env.unique("plan-p");
        let project_name = format!("{project}.example.com");
        let idp = env.unique("plan-idp");
        let config_map = env.unique("plan-fed");
        let mut docs = Vec::new();
        for (file, text) in SEED {
            let mut d = doc(text)?;
            match file {
                "domain.yaml" => {
                    d["metadata"]["name"] = json!(domain);
                    d["spec"]["name"] = json!(domain);
                }
                "flavor.yaml" => {
                    d["metadata"]["name"] = json!(flavor);
                    d["spec"]["name"] = json!(flavor);
                }
                "network.yaml" => {
                    d["metadata"]["name"] = json!(network);
                    d["spec"]["name"] = json!(network);
                    d["spec"]["providerNetworkType"] = json!("vlan");
                    d["spec"]["providerPhysicalNetwork"] = json!("physnet1");
                    d["spec"]["subnets"][0]["name"] = json!(format!("{network}-subnet"));
                }
                "federation-configmap.yaml" => {
                    d["metadata"]["name"] = json!(config_map);
                    d["metadata"]["namespace"] = json!(env.namespace);
                    d["data"]["idp-name"] = json!(idp);
                    d["data"]["idp-remote-id"] = json!(format!("https://{idp}.example.com"));
                    d["data"]["sso-domain"] = json!(domain);
                }
                _ => {
                    d["metadata"]["name"] = json!(project);
                    d["metadata"]["namespace"] = json!(env.namespace);
                    d["spec"]["name"] = json!(project_name);
                    d["spec"]["domain"] = json!(domain);
                    d["spec"]["roleBindings"][0]["userDomain"] = json!(domain);
                    d["spec"]["federationRef"]["configMapName"] = json!(config_map);
                }
            }
            docs.push((file, d));
        }
        let tenant = env.unique("plan-tc");
        docs.push((
            "tenant-credential.yaml",
            json!({
                "apiVersion": "sunet.se/v1alpha1",
                "kind": "OpenstackProject",
                "metadata": {"name": tenant, "namespace": env.namespace},
                "spec": {"name": format!("{tenant}.example.com"), "domain": "Default",
                         "applicationCredential": {
                             "lifetimeSeconds": 86400, "leadTimeSeconds": 3600}},
            }),
        ));
        Ok(Seed {
            domain,
            flavor,
            network,
            project,
            project_name,
            idp,
            tenant,
            docs,
        })
    }

    fn write(&self, dir: &Path) -> anyhow::Result<()> {
        for (file, d) in &self.docs {
            // JSON is YAML: the files stay what the manifests say, in the seed's file names.
            std::fs::write(dir.join(file), d.to_string())
                .with_context(|| format!("writing {file}"))?;
        }
        Ok(())
    }

    fn yaml(&self, file: &str) -> anyhow::Result<String> {
        let d = self
            .docs
            .iter()
            .find(|(f, _)| *f == file)
            .map(|(_, d)| d)
            .context("a seed file")?;
        Ok(d.to_string())
    }

    fn project_doc(&mut self) -> &mut Value {
        &mut self
            .docs
            .iter_mut()
            .find(|(f, _)| *f == "project.yaml")
            .expect("the project is a seed file")
            .1
    }
}

/// One run of `plan` through the proxy: exit code, the JSON plan, its text, the requests.
struct PlanRun {
    code: i32,
    plan: Value,
    text: String,
    requests: Vec<RequestRecord>,
    took: Duration,
}

async fn plan(env: &TestEnv, proxy: &CloudProxy, dir: &Path) -> anyhow::Result<PlanRun> {
    plan_with(env, proxy, dir, &[]).await
}

async fn plan_with(
    env: &TestEnv,
    proxy: &CloudProxy,
    dir: &Path,
    extra: &[&str],
) -> anyhow::Result<PlanRun> {
    let cloud = proxy.cloud_env();
    let run = |output: &str| {
        let mut cmd = tokio::process::Command::new(BIN);
        cmd.args(["plan", "-f"])
            .arg(dir)
            .args(["-n", &env.namespace, "-o", output])
            .args(extra)
            .env("KUBECONFIG", env.target.kubeconfig())
            .env("OS_CLOUD", &cloud.os_cloud)
            .env("OS_CLIENT_CONFIG_FILE", &cloud.config_file)
            .env("CLUSTER_ID", env.operator.cluster_id())
            .kill_on_drop(true);
        cmd
    };
    proxy.clear_requests();
    let start = Instant::now();
    let out: Output = run("json").output().await.context("running plan")?;
    let took = start.elapsed();
    let requests = proxy.requests();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let code = out.status.code().context("plan exited by a signal")?;
    let plan: Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("plan -o json printed no JSON (exit {code}): {stderr}"))?;
    let text_out = run("text").output().await.context("running plan")?;
    let text = String::from_utf8_lossy(&text_out.stdout).to_string();
    assert_eq!(
        text_out.status.code(),
        Some(code),
        "text and JSON runs agree: {text}"
    );
    eprintln!(
        "=== plan (exit {code}, {took:?}, {} requests):\n{text}{stderr}",
        requests.len()
    );
    Ok(PlanRun {
        code,
        plan,
        text,
        requests,
        took,
    })
}

/// Requests of a plan run that would change something in OpenStack (authentication is not).
fn writes(requests: &[RequestRecord]) -> Vec<String> {
    requests
        .iter()
        .filter(|r| r.is_write() && !r.path.contains("/auth/tokens"))
        .map(|r| format!("{} {} {}", r.service, r.method, r.path))
        .collect()
}

/// (op, kind, label) of every planned write.
fn changes(plan: &Value) -> Vec<(String, String, String, String)> {
    let mut out = Vec::new();
    for r in plan["resources"].as_array().into_iter().flatten() {
        for c in r["changes"].as_array().into_iter().flatten() {
            out.push((
                r["kind"].as_str().unwrap_or_default().to_string(),
                c["op"].as_str().unwrap_or_default().to_string(),
                c["kind"].as_str().unwrap_or_default().to_string(),
                c["label"].as_str().unwrap_or_default().to_string(),
            ));
        }
    }
    out
}

/// The planned writes of the resource named `name`: (op, service, kind, label).
fn changes_of(plan: &Value, name: &str) -> Vec<(String, String, String, String)> {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    plan["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["name"] == name)
        .flat_map(|r| r["changes"].as_array().cloned().unwrap_or_default())
        .map(|c| (s(&c["op"]), s(&c["service"]), s(&c["kind"]), s(&c["label"])))
        .collect()
}

/// The outcome state (`done`, `inProgress`, `fails`) of the resource named `name`.
fn outcome_of(plan: &Value, name: &str) -> String {
    plan["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["name"] == name)
        .and_then(|r| r["outcome"]["state"].as_str())
        .unwrap_or("(not planned)")
        .to_string()
}

fn has(all: &[(String, String, String, String)], resource: &str, op: &str, kind: &str) -> bool {
    all.iter()
        .any(|(r, o, k, _)| r == resource && o == op && k == kind)
}

#[tokio::test]
async fn plan_lists_the_seed_then_nothing_then_exactly_an_edit_and_never_writes() {
    let mut opts = EnvOptions::new(BIN, "plan");
    opts.cleanup_timeout = READY;
    let env = TestEnv::start("plan", opts).await.expect("test env");
    // The plan's own proxy: the operator and the test's checks talk to the cloud directly.
    let proxy = CloudProxy::start(&CloudEnv::from_env().expect("cloud env"))
        .await
        .expect("proxy");
    env.run(async |env| {
        let dir = tempfile::tempdir()?;
        let mut seed = Seed::new(env)?;
        seed.write(dir.path())?;
        // The identity provider is the administrator's (a tenant's ConfigMap may not make
        // one); everything else starts absent.
        let idp = seed.idp.clone();
        env.cloud
            .identity
            .create_identity_provider(&IdentityProviderCreate {
                id: idp.clone(),
                remote_ids: vec![format!("https://{idp}.example.com")],
                enabled: true,
                domain_id: None,
                description: Some("e2e plan".into()),
            })
            .await?;
        env.defer(&format!("identity provider {idp}"), move |cloud| {
            async move {
                cloud
                    .identity
                    .delete_mapping(&mapping_name(&idp))
                    .await
                    .optional()?;
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
                    if let Some(d) = i.domain_id {
                        let upd = openstack::model::DomainUpdate {
                            description: None,
                            enabled: Some(false),
                        };
                        cloud.identity.update_domain(&d, &upd).await.optional()?;
                        cloud.identity.delete_domain(&d).await.optional()?;
                    }
                }
                Ok(())
            }
            .boxed()
        });

        // 1. Nothing applied yet: every object is to create.
        let first = plan(env, &proxy, dir.path()).await?;
        assert_eq!(first.code, 2, "{}", first.text);
        assert_eq!(writes(&first.requests), Vec::<String>::new());
        let all = changes(&first.plan);
        for (resource, kind) in [
            ("OpenstackDomain", "domain"),
            ("OpenstackFlavor", "flavor"),
            ("OpenstackNetwork", "network"),
            ("OpenstackNetwork", "subnet"),
            ("OpenstackProject", "project"),
            ("OpenstackProject", "group"),
            ("OpenstackProject", "network"),
            ("OpenstackProject", "subnet"),
            ("OpenstackProject", "router"),
            ("OpenstackProject", "router interface"),
            ("OpenstackProject", "security group"),
            ("OpenstackProject", "security group rule"),
            ("OpenstackProject", "role assignment"),
        ] {
            assert!(
                has(&all, resource, "create", kind),
                "{resource} creates no {kind}:\n{}",
                first.text
            );
        }
        assert!(
            !all.iter().any(|(_, o, _, _)| o == "delete"),
            "{}",
            first.text
        );
        assert_eq!(first.plan["failures"], json!(0), "{}", first.text);
        assert!(first.text.contains("(known after apply)"), "{}", first.text);
        assert!(
            first.plan["knownAfterApply"]
                .as_array()
                .is_some_and(|a| !a.is_empty()),
            "{}",
            first.plan
        );
        // Nothing of it exists.
        assert!(
            env.cloud
                .identity
                .find_domain(&seed.domain)
                .await?
                .is_none()
        );
        assert!(env.cloud.compute.find_flavor(&seed.flavor).await?.is_none());
        // The tenant credential: its user, role, password, credential and Secret, with no
        // secret shown and nothing made.
        let tc = changes_of(&first.plan, &seed.tenant);
        let tc_user = format!("{}.example.com-tenant-credentials", seed.tenant);
        // Granted twice by the pass (at the user's creation, before its credential), listed
        // once; the project group's role is another.
        assert_eq!(
            tc.iter()
                .filter(|(o, _, k, l)| o == "create"
                    && k == "role assignment"
                    && l.contains(&format!("for user {tc_user} ")))
                .count(),
            1,
            "{}",
            first.text
        );
        for (op, service, kind) in [
            ("create", "identity", "project"),
            ("create", "identity", "user"),
            ("update", "identity", "user password"),
            ("create", "identity", "application credential"),
            ("create", "kubernetes", "Secret"),
        ] {
            assert_eq!(
                tc.iter()
                    .filter(|(o, s, k, _)| o == op && s == service && k == kind)
                    .count(),
                1,
                "the tenant credential's project plans one {op} of {kind}:\n{}",
                first.text
            );
        }
        assert_eq!(
            outcome_of(&first.plan, &seed.tenant),
            "done",
            "{}",
            first.text
        );
        let tc_secret = format!("{}/{}-clouds", env.namespace, seed.tenant);
        assert!(
            tc.iter().any(|(_, _, k, l)| k == "user" && *l == tc_user),
            "{}",
            first.text
        );
        assert!(
            tc.iter()
                .any(|(_, _, k, l)| k == "Secret" && *l == tc_secret),
            "{}",
            first.text
        );
        assert!(first.text.contains("(random, not shown)"), "{}", first.text);
        assert!(
            first.plan["knownAfterApply"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|u| u
                    .as_str()
                    .is_some_and(|u| u.contains("application credential"))),
            "{}",
            first.plan
        );
        let default_domain = env
            .cloud
            .identity
            .find_domain("Default")
            .await?
            .context("the Default domain")?;
        let tenant_users = env
            .cloud
            .identity
            .tenant_users()
            .context("the real port makes tenant users")?;
        assert!(
            tenant_users
                .find_user(&default_domain.id, &tc_user)
                .await?
                .is_none(),
            "the plan made no user"
        );
        let first_reads = first.requests.len();
        let first_took = first.took;

        // 2. The operator applies them (domain first, so the users it binds exist).
        env.apply(&seed.yaml("domain.yaml")?).await?;
        let d: OpenstackDomain = env.wait_ready(&seed.domain, READY).await?;
        let domain_id = d.status.and_then(|s| s.domain_id).context("domainId")?;
        let core = Core::connect(
            &CloudSelector::File {
                path: env.target.cloud_env().config_file.clone(),
                cloud: env.target.cloud_env().os_cloud.clone(),
            },
            ClientOptions::default(),
        )
        .await?;
        create_user(env, &core, &domain_id, "alice@example.com").await?;
        create_user(env, &core, &domain_id, "bob@example.com").await?;
        for f in [
            "flavor.yaml",
            "network.yaml",
            "federation-configmap.yaml",
            "project.yaml",
            "tenant-credential.yaml",
        ] {
            env.apply(&seed.yaml(f)?).await?;
        }
        env.wait_ready::<OpenstackFlavor>(&seed.flavor, READY)
            .await?;
        env.wait_ready::<OpenstackNetwork>(&seed.network, READY)
            .await?;
        let p: OpenstackProject = env.wait_ready(&seed.project, READY).await?;
        let pid = p
            .status
            .as_ref()
            .and_then(|s| s.project_id.clone())
            .context("projectId")?;
        let tcp: OpenstackProject = env.wait_ready(&seed.tenant, READY).await?;
        assert!(
            tcp.status
                .as_ref()
                .and_then(|s| s.application_credential.as_ref())
                .and_then(|a| a.current.as_ref())
                .is_some(),
            "the tenant credential is delivered: {:?}",
            tcp.status
        );

        // 3. Applied: nothing would change (the delivered credential is not due).
        let second = plan(env, &proxy, dir.path()).await?;
        assert_eq!(second.code, 0, "{}", second.text);
        assert_eq!(second.plan["changes"], json!(0), "{}", second.text);
        assert!(second.text.contains("No changes"), "{}", second.text);
        assert_eq!(writes(&second.requests), Vec::<String>::new());

        // 4. An edit: the rule removed, a quota changed, bob out of the binding.
        {
            let d = seed.project_doc();
            d["spec"]["securityGroups"][0]["rules"] = json!([]);
            d["spec"]["quotas"]["compute"]["cores"] = json!(24);
            d["spec"]["roleBindings"][0]["users"] = json!(["alice@example.com"]);
        }
        seed.write(dir.path())?;
        let third = plan(env, &proxy, dir.path()).await?;
        assert_eq!(third.code, 2, "{}", third.text);
        assert_eq!(writes(&third.requests), Vec::<String>::new());
        let all = changes(&third.plan);
        let mut got: Vec<(String, String, String)> = all
            .iter()
            .map(|(r, o, k, _)| (r.clone(), o.clone(), k.clone()))
            .collect();
        got.sort();
        let mut want: Vec<(String, String, String)> = [
            ("OpenstackProject", "delete", "security group rule"),
            ("OpenstackProject", "update", "compute quota"),
            // `member` users are members of the project group (and of its mapping rule).
            ("OpenstackProject", "delete", "group membership"),
            ("OpenstackProject", "update", "mapping"),
        ]
        .iter()
        .map(|(r, o, k)| (r.to_string(), o.to_string(), k.to_string()))
        .collect();
        want.sort();
        assert_eq!(got, want, "{}", third.text);
        let label = |kind: &str| {
            all.iter()
                .find(|(_, _, k, _)| k == kind)
                .map(|(_, _, _, l)| l.clone())
                .unwrap_or_default()
        };
        assert_eq!(
            label("security group rule"),
            "ingress IPv4 tcp port 22 from 0.0.0.0/0"
        );
        assert!(
            label("group membership").contains("user bob@example.com in group"),
            "{}",
            third.text
        );
        // The mapping rule of the project group keeps alice only.
        assert!(
            third
                .text
                .contains(r#"{"any_one_of":["alice@example.com"],"type":"HTTP_OIDC_SUB"}"#),
            "{}",
            third.text
        );
        assert!(third.text.contains("cores: 40 → 24"), "{}", third.text);
        assert!(
            third
                .text
                .contains(&format!("project {}", seed.project_name)),
            "{}",
            third.text
        );

        // 5. Applying converges to what the plan said, and then nothing is left to do.
        env.apply(&seed.project_doc().to_string()).await?;
        env.wait_object::<OpenstackProject>(&seed.project, READY, "Ready at the edit", |p| {
            p.status.as_ref().is_some_and(|s| {
                s.observed_generation == p.metadata.generation && e2e::k8s::is_ready(p)
            })
        })
        .await?;
        let q = env.cloud.compute.get_compute_quota(&pid).await?;
        assert_eq!(q.get("cores").map(|v| v.limit), Some(24));
        let groups = env
            .cloud
            .network
            .list_security_groups(&openstack::model::SecurityGroupFilter {
                project_id: Some(pid.clone()),
                name: Some("allow-ssh".into()),
                ..Default::default()
            })
            .await?;
        let ingress: Vec<_> = groups
            .iter()
            .flat_map(|g| g.rules.iter())
            .filter(|r| r.direction == "ingress")
            .collect();
        assert!(ingress.is_empty(), "the removed rule is gone: {ingress:?}");
        let fourth = plan(env, &proxy, dir.path()).await?;
        assert_eq!(fourth.code, 0, "{}", fourth.text);
        assert_eq!(writes(&fourth.requests), Vec::<String>::new());
        // 6. What deleting them would remove: every object of ours, nothing written.
        let gone = plan_with(env, &proxy, dir.path(), &["--delete"]).await?;
        assert_eq!(writes(&gone.requests), Vec::<String>::new());
        let all = changes(&gone.plan);
        for (resource, kind) in [
            ("OpenstackProject", "project"),
            ("OpenstackProject", "group"),
            ("OpenstackProject", "network"),
            ("OpenstackProject", "subnet"),
            ("OpenstackProject", "router"),
            ("OpenstackProject", "security group"),
            ("OpenstackFlavor", "flavor"),
            ("OpenstackNetwork", "network"),
        ] {
            assert!(
                has(&all, resource, "delete", kind),
                "{resource} deletes no {kind}:\n{}",
                gone.text
            );
        }
        assert!(
            !all.iter().any(|(_, o, _, _)| o == "create"),
            "{}",
            gone.text
        );
        // The tenant credential is revoked before its project goes; its Secret goes with
        // its owner, by garbage collection, not by the pass.
        let tc = changes_of(&gone.plan, &seed.tenant);
        for kind in ["application credential", "user", "project"] {
            assert!(
                tc.iter().any(|(o, _, k, _)| o == "delete" && k == kind),
                "deleting the tenant credential's project deletes no {kind}:\n{}",
                gone.text
            );
        }
        assert!(
            env.cloud.identity.get_project(&pid).await.is_ok(),
            "still there"
        );
        assert!(
            tenant_users
                .find_user(&default_domain.id, &tc_user)
                .await?
                .is_some(),
            "the plan deleted no user"
        );
        eprintln!(
            "=== figures: empty-cloud plan {first_took:?} with {first_reads} requests; \
             converged plan {:?} with {} requests; edit plan {:?} with {} requests",
            second.took,
            second.requests.len(),
            third.took,
            third.requests.len()
        );
        Ok(())
    })
    .await
    .expect("plan end to end");
}
