//! Helpers of the control-plane end-to-end tests (the test plays kubelet and controller
//! manager on the suite's Kubernetes API; see e2e_control_plane.rs for the approach). The same
//! helpers as e2e_control_plane.rs's private ones, here shared so new control-plane e2e files
//! do not copy them; e2e_control_plane.rs can switch to this module mechanically.
#![allow(dead_code)]

use std::collections::BTreeSet;
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
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

pub const BIN: &str = env!("CARGO_BIN_EXE_openstack-operator");
pub const WAIT: Duration = Duration::from_secs(90);
pub const POLL: Duration = Duration::from_millis(300);
pub struct Proc(pub Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

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
    pub fail_steps: BTreeSet<String>,
    pub completed: Vec<String>,
    pub failed: Vec<String>,
}

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

pub async fn get(api: &Api<kube::api::DynamicObject>, name: &str) -> anyhow::Result<Value> {
    Ok(serde_json::to_value(api.get(name).await?)?)
}

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
