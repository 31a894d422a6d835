//! What the control-plane end-to-end tests share: the operator process, the test cloud's
//! MariaDB and Keystone, the test playing kubelet and controller manager, object helpers.
//! (`e2e_control_plane.rs` keeps its own copies of these; it can switch to this module.)

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use e2e::{Check, Target, wait_for};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

/// The operator binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_openstack-operator");
/// How long a wait may take.
pub const WAIT: Duration = Duration::from_secs(120);
/// Poll period of waits.
pub const POLL: Duration = Duration::from_millis(300);

/// The external-services harness's settings (`scripts/external-services`).
pub fn harness_env() -> anyhow::Result<BTreeMap<String, String>> {
    let path = std::env::var("EXTERNAL_SERVICES_ENV")
        .unwrap_or_else(|_| "/var/cache/openstack-operator/external-services/env".into());
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {path}: run scripts/external-services up"))?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().trim_matches('"').to_string()))
        .collect())
}

/// A child process killed when dropped.
pub struct Proc(pub Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs SQL as root on the test cloud's MariaDB.
pub fn mariadb(sql: &str) -> anyhow::Result<()> {
    let out = Command::new("mariadb")
        .args(["-h", "127.0.0.1", "-P", "13306", "-u", "root", "-e", sql])
        .output()
        .context("running mariadb (is the test cloud up?)")?;
    anyhow::ensure!(
        out.status.success(),
        "mariadb: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// A free local port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// The admin password and identity URL of the test cloud's Keystone (from its clouds.yaml).
pub fn test_cloud_keystone() -> anyhow::Result<(String, String)> {
    let path = std::env::var("OS_CLIENT_CONFIG_FILE")
        .unwrap_or_else(|_| "/var/cache/openstack-operator/test-cloud/clouds.yaml".into());
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let v: Value = serde_saphyr::from_str(&text).context("parsing clouds.yaml")?;
    let auth = &v["clouds"]["local-admin"]["auth"];
    let password = auth["password"]
        .as_str()
        .context("no local-admin password in clouds.yaml")?;
    let url = auth["auth_url"]
        .as_str()
        .context("no local-admin auth_url in clouds.yaml")?;
    Ok((password.to_string(), url.trim_end_matches('/').to_string()))
}

/// A Secret of string data.
pub fn secret(name: &str, data: &[(&str, &str)]) -> Secret {
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Default::default()
    }
}

/// A condition of an object: (is True, reason, message).
pub fn cond(obj: &Value, type_: &str) -> Option<(bool, String, String)> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            (
                c["status"] == "True",
                c["reason"].as_str().unwrap_or("").to_string(),
                c["message"].as_str().unwrap_or("").to_string(),
            )
        })
}

/// What the test, as the controller manager, does to Jobs of a step.
#[derive(Default)]
pub struct Kubelet {
    /// Steps whose Jobs fail.
    pub fail_steps: BTreeSet<String>,
    /// Jobs marked Complete.
    pub completed: Vec<String>,
    /// Jobs marked Failed.
    pub failed: Vec<String>,
    /// Deployments whose status the test writes itself (left alone here).
    pub hold_deployments: BTreeSet<String>,
}

/// Plays kubelet and controller manager: Jobs Complete (or Failed for `fail_steps`),
/// Deployments rolled out and available.
pub async fn play_controller_manager(client: Client, ns: String, state: Arc<Mutex<Kubelet>>) {
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let deps: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    loop {
        if let Ok(list) = jobs.list(&ListParams::default()).await {
            for j in list.items {
                if j.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| !c.is_empty())
                {
                    continue;
                }
                let step = j
                    .labels()
                    .get("controlplane.sunet.se/step")
                    .cloned()
                    .unwrap_or_default();
                let fail = state
                    .lock()
                    .map(|s| s.fail_steps.contains(&step))
                    .unwrap_or(false);
                let status = if fail {
                    json!({"failed": 3, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                        "message": "Job has reached the specified backoff limit"}]})
                } else {
                    json!({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})
                };
                if jobs
                    .patch_status(
                        &j.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"status": status})),
                    )
                    .await
                    .is_ok()
                    && let Ok(mut s) = state.lock()
                {
                    if fail {
                        s.failed.push(j.name_any())
                    } else {
                        s.completed.push(j.name_any())
                    }
                }
            }
        }
        if let Ok(list) = deps.list(&ListParams::default()).await {
            for d in list.items {
                if state
                    .lock()
                    .map(|s| s.hold_deployments.contains(&d.name_any()))
                    .unwrap_or(false)
                {
                    continue;
                }
                let generation = d.metadata.generation.unwrap_or(0);
                let replicas = d.spec.replicas.unwrap_or(1);
                if d.status.as_ref().and_then(|s| s.observed_generation) == Some(generation) {
                    continue;
                }
                let status = json!({"observedGeneration": generation, "replicas": replicas, "updatedReplicas": replicas,
                    "readyReplicas": replicas, "availableReplicas": replicas});
                let _ = deps
                    .patch_status(
                        &d.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"status": status})),
                    )
                    .await;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A literal env value of a Job's container.
pub fn job_env(j: &Job, name: &str) -> Option<String> {
    j.spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .containers
        .first()?
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

/// Installs every control-plane CRD and waits until established.
pub async fn install_crds(client: &Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in controlplane_api::all_crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(
            &name,
            &PatchParams::apply("e2e").force(),
            &Patch::Apply(&crd),
        )
        .await?;
        wait_for(WAIT, POLL, &format!("CRD {name} Established"), async || {
            let c = crds.get(&name).await?;
            let ok = c
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            Ok(if ok {
                Check::Done(())
            } else {
                Check::Pending("not established".into())
            })
        })
        .await?;
    }
    Ok(())
}

/// An object as JSON.
pub async fn get(api: &Api<kube::api::DynamicObject>, name: &str) -> anyhow::Result<Value> {
    Ok(serde_json::to_value(api.get(name).await?)?)
}

/// A dynamic API of a control-plane kind.
pub fn dyn_api(
    client: &Client,
    ns: &str,
    kind: &str,
    plural: &str,
) -> Api<kube::api::DynamicObject> {
    let ar = kube::api::ApiResource {
        group: "controlplane.sunet.se".into(),
        version: "v1alpha1".into(),
        api_version: "controlplane.sunet.se/v1alpha1".into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// A fresh namespace.
pub async fn create_namespace(client: &Client) -> anyhow::Result<String> {
    let ns = format!("cp-e2e-{}", e2e::names::random_suffix());
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(ns.clone()),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .await?;
    Ok(ns)
}

/// A database admin account of the test's own on the test cloud's MariaDB: (user, password).
pub fn db_admin_user() -> anyhow::Result<(String, String)> {
    let admin_user = format!("cpe2e_{}", e2e::names::random_suffix().replace('-', "_"));
    let admin_pw = controlplane_render::secrets::password(24);
    mariadb(&format!(
        "CREATE USER '{admin_user}'@'127.0.0.1' IDENTIFIED BY '{admin_pw}'; GRANT ALL ON *.* TO '{admin_user}'@'127.0.0.1' WITH GRANT OPTION"
    ))?;
    Ok((admin_user, admin_pw))
}

/// Starts `openstack-operator control-plane` on namespace `ns` with short intervals and
/// `extra` flags: (process, log file, metrics port).
pub fn start_operator(
    target: &Target,
    ns: &str,
    extra: &[String],
) -> anyhow::Result<(Proc, std::path::PathBuf, u16)> {
    let log_path = std::env::temp_dir().join(format!("e2e_control_plane-{ns}.log"));
    let log = std::fs::File::create(&log_path)?;
    let metrics_port = free_port();
    let op = Proc(
        Command::new(BIN)
            .args([
                "control-plane",
                "--health-addr",
                &format!("127.0.0.1:{}", free_port()),
                "--metrics-addr",
                &format!("127.0.0.1:{metrics_port}"),
                "--watch-namespace",
                ns,
                "--check-interval-seconds",
                "5",
                "--job-retry-base-seconds",
                "2",
                "--job-retry-max-seconds",
                "4",
                "--resync-seconds",
                "5",
            ])
            .args(extra)
            .env("KUBECONFIG", target.kubeconfig())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()?,
    );
    Ok((op, log_path, metrics_port))
}

/// The config-hash annotation of a Deployment's pod template.
pub fn config_hash(d: &Deployment) -> String {
    d.spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get("controlplane.sunet.se/config-hash"))
        .cloned()
        .unwrap_or_default()
}

/// Names of the Jobs of service `service` (the `app.kubernetes.io/name` label).
pub async fn service_jobs(jobs: &Api<Job>, service: &str) -> anyhow::Result<BTreeSet<String>> {
    Ok(jobs
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/name={service}")))
        .await?
        .items
        .iter()
        .map(|j| j.name_any())
        .collect())
}

/// A Secret key as text.
pub fn secret_text(s: &Secret, key: &str) -> String {
    s.data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .unwrap_or_default()
}

/// Waits until `api/name` has condition `type_` True for its current generation (the status
/// observed the spec): its (reason, message). A Ready that only tolerates a failed probe
/// (the operator's hysteresis: "… tolerated below N failures …") is passed over: it says the
/// last probe failed, and the operator probes again within 15 s.
pub async fn wait_cond(
    api: &Api<kube::api::DynamicObject>,
    name: &str,
    type_: &str,
    timeout: Duration,
) -> anyhow::Result<(String, String)> {
    wait_for(timeout, POLL, &format!("{name} {type_}"), async || {
        let o = get(api, name).await?;
        Ok(match cond(&o, type_) {
            Some((true, r, m))
                if o["status"]["observedGeneration"] == o["metadata"]["generation"]
                    && !m.contains(" tolerated below ") =>
            {
                Check::Done((r, m))
            }
            _ => Check::Pending(format!("{}", o["status"]["conditions"])),
        })
    })
    .await
}

/// The control-plane API group/version.
pub const API: &str = "controlplane.sunet.se/v1alpha1";

/// Server-side applies `v` (forcing ownership, as a user editing the manifest would).
pub async fn apply(api: &Api<DynamicObject>, v: &Value) -> anyhow::Result<()> {
    let name = v["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    api.patch(&name, &PatchParams::apply("e2e").force(), &Patch::Apply(v))
        .await?;
    Ok(())
}

/// What the Nova and Cinder tests start from: a namespace holding the Secrets (database
/// admin, RabbitMQ, the real Keystone's admin password, a Ceph keyring), the `db` and `mq`
/// external services, a Keystone `ks` and a Placement `pl`.
pub struct ComputeStage {
    /// Keeps the Kubernetes API (the emulator) alive.
    pub target: Target,
    /// Its client.
    pub client: Client,
    /// The test's namespace.
    pub ns: String,
    /// The test cloud's Keystone URL (the operator is pointed at it for `ks`).
    pub ks_url: String,
    /// The MariaDB account the test made for the operator (dropped by the test at its end).
    pub admin_user: String,
}

/// Sets up a [`ComputeStage`].
pub async fn compute_stage() -> anyhow::Result<ComputeStage> {
    let env = harness_env()?;
    let e = |k: &str| -> anyhow::Result<String> {
        env.get(k)
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("{k} missing from the external-services env"))
    };
    let target = Target::from_env().await?;
    let client = target.client().await?;
    install_crds(&client).await?;
    let ns = create_namespace(&client).await?;
    let (admin_user, admin_pw) = db_admin_user()?;
    let (ks_admin_pw, ks_url) = test_cloud_keystone()?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    for s in [
        secret(
            "db-admin",
            &[("username", &admin_user), ("password", &admin_pw)],
        ),
        secret(
            "mq",
            &[
                ("username", &e("EXTSVC_AMQP_USER")?),
                ("password", &e("EXTSVC_AMQP_PASSWORD")?),
            ],
        ),
        // The Keystone's admin password, pre-created: the real Keystone's, so its token probe
        // (and every service's) gets real tokens.
        secret("ks-keystone-admin", &[("password", &ks_admin_pw)]),
        secret(
            "ceph-keyring",
            &[("keyring", "[client.cinder]\n\tkey = AQ==\n")],
        ),
    ] {
        secrets.create(&PostParams::default(), &s).await?;
    }
    let ext = dyn_api(
        &client,
        &ns,
        "OpenStackExternalService",
        "openstackexternalservices",
    );
    apply(&ext, &json!({"apiVersion": API, "kind": "OpenStackExternalService", "metadata": {"name": "db"},
        "spec": {"type": "database", "endpoints": ["127.0.0.1:13306"], "credentials": {"secretName": "db-admin"}}})).await?;
    apply(&ext, &json!({"apiVersion": API, "kind": "OpenStackExternalService", "metadata": {"name": "mq"},
        "spec": {"type": "messaging", "endpoints": [e("EXTSVC_AMQP")?], "credentials": {"secretName": "mq"},
                 "extra": {"vhost": e("EXTSVC_AMQP_VHOST")?}}})).await?;
    let ks_api = dyn_api(&client, &ns, "Keystone", "keystones");
    apply(
        &ks_api,
        &json!({"apiVersion": API, "kind": "Keystone", "metadata": {"name": "ks"},
        "spec": {"database": {"service": {"name": "db"}}}}),
    )
    .await?;
    let pl_api = dyn_api(&client, &ns, "Placement", "placements");
    apply(
        &pl_api,
        &json!({"apiVersion": API, "kind": "Placement", "metadata": {"name": "pl"},
        "spec": {"database": {"service": {"name": "db"}}, "keystone": {"name": "ks"}}}),
    )
    .await?;
    Ok(ComputeStage {
        target,
        client,
        ns,
        ks_url,
        admin_user,
    })
}
