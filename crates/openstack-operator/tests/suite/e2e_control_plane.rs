//! End to end: `openstack-operator control-plane` (the binary) on the suite's Kubernetes API
//! with a real MariaDB (the test cloud's, 127.0.0.1:13306) and a real memcached behind the
//! external services, so their checks are real.
//!
//! No kubelet or controller manager runs here (envtest practice): THE TEST PLAYS THEM. A
//! background task marks every new Job `Complete` (or `Failed` with `BackoffLimitExceeded`
//! while a failure switch for its step is on) and every Deployment generation rolled out and
//! available. The token probe reaches the test cloud's real Keystone through the operator's
//! `--keystone-url` override: the test pre-creates the admin-password Secret the operator would
//! otherwise generate, with that Keystone's admin password, so "Ready" still means a real API
//! issued a real token to the operator. (The rendered configuration itself is booted for real
//! by controlplane-render's `keystone_boot` test.)

use crate::cp_common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use controlplane_api::condition_types as ct;
use cp_common::*;
use e2e::{Check, Target, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

/// `--secret-propagation-seconds` of the operator under test (180 in production).
const PROPAGATION_SECONDS: i64 = 3;

/// A Secret's data as file name → bytes.
fn secret_files(s: &Secret) -> BTreeMap<String, Vec<u8>> {
    s.data
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect()
}

/// The highest key index of a key repository Secret (its primary).
fn primary_index(m: &BTreeMap<String, Vec<u8>>) -> u32 {
    m.keys()
        .filter_map(|k| k.parse::<u32>().ok())
        .max()
        .unwrap_or(0)
}

/// The key set hash of a credential key Secret, as the operator computes it.
fn key_set_hash(s: &Secret) -> anyhow::Result<String> {
    let files = secret_files(s);
    Ok(controlplane_render::KeyRepository::from_files(
        files.iter().map(|(k, v)| (k, v.as_slice())),
    )?
    .set_hash())
}

/// `controlplane_reconcile_total{kind,result="success"}` from the operator's metrics.
async fn reconciles(metrics_port: u16, kind: &str) -> anyhow::Result<u64> {
    let text = reqwest::get(format!("http://127.0.0.1:{metrics_port}/metrics"))
        .await?
        .text()
        .await?;
    let prefix = format!("controlplane_reconcile_total{{kind=\"{kind}\",result=\"success\"}} ");
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0))
}

/// The credential-migrate Jobs, oldest first.
async fn migrate_jobs(jobs: &Api<Job>) -> anyhow::Result<Vec<Job>> {
    let mut list = jobs
        .list(&ListParams::default().labels("controlplane.sunet.se/step=credential-migrate"))
        .await?
        .items;
    list.sort_by_key(|j| j.metadata.creation_timestamp.as_ref().map(|t| t.0));
    Ok(list)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_plane_keystone_end_to_end() -> anyhow::Result<()> {
    let target = Target::from_env().await?;
    let client = target.client().await?;
    install_crds(&client).await?;
    let ns = create_namespace(&client).await?;

    // A database admin account of our own, and a memcached.
    let (admin_user, admin_pw) = db_admin_user()?;
    let mc_port = free_port();
    let _memcached = Proc(
        Command::new("memcached")
            .args([
                "-l",
                "127.0.0.1",
                "-p",
                &mc_port.to_string(),
                "-U",
                "0",
                "-u",
                "nobody",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting memcached (scripts/control-plane-deps installs it)")?,
    );

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    // Wrong password first.
    secrets
        .create(
            &PostParams::default(),
            &secret(
                "db-admin",
                &[("username", &admin_user), ("password", "not-the-password")],
            ),
        )
        .await?;
    let cluster_name = "cloud";
    let ks_name = controlplane_controllers::cluster::keystone_name(cluster_name);
    // The Secret the operator would generate, with the admin password of the Keystone that
    // stands in for the Deployment's pods.
    secrets
        .create(
            &PostParams::default(),
            &secret(
                &format!("{ks_name}-keystone-admin"),
                &[("password", &test_cloud_keystone()?.0)],
            ),
        )
        .await?;

    let ext = dyn_api(
        &client,
        &ns,
        "OpenStackExternalService",
        "openstackexternalservices",
    );
    let pp = PatchParams::apply("e2e").force();
    let apply = async |api: &Api<kube::api::DynamicObject>, v: Value| -> anyhow::Result<()> {
        let name = v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        api.patch(&name, &pp, &Patch::Apply(&v)).await?;
        Ok(())
    };
    apply(&ext, json!({"apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "OpenStackExternalService", "metadata": {"name": "db"},
        "spec": {"type": "database", "endpoints": ["127.0.0.1:13306"], "credentials": {"secretName": "db-admin"}}})).await?;
    apply(&ext, json!({"apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "OpenStackExternalService", "metadata": {"name": "cache"},
        "spec": {"type": "cache", "endpoints": [format!("127.0.0.1:{mc_port}")]}})).await?;
    let clusters = dyn_api(&client, &ns, "OpenStackCluster", "openstackclusters");
    let cluster = json!({"apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "OpenStackCluster", "metadata": {"name": cluster_name},
        "spec": {"services": ["keystone", "placement"], "externalServices": {"database": {"name": "db"}, "cache": {"name": "cache"}},
                 "templates": {"keystone": {"replicas": 2}}}});
    apply(&clusters, cluster.clone()).await?;

    // The operator.
    let (_op, log_path, metrics_port) = start_operator(
        &target,
        &ns,
        &[
            "--secret-propagation-seconds".into(),
            PROPAGATION_SECONDS.to_string(),
            "--keystone-url".into(),
            format!("{ns}/{ks_name}={}", test_cloud_keystone()?.1),
            // The Placement the cluster creates answers through the test cloud's real one.
            "--api-url".into(),
            format!("placement/{ns}/{cluster_name}-placement=http://127.0.0.1:8778"),
        ],
    )?;
    eprintln!("operator log: {}", log_path.display());
    let kubelet = Arc::new(Mutex::new(Kubelet::default()));
    let cm = tokio::spawn(play_controller_manager(
        client.clone(),
        ns.clone(),
        kubelet.clone(),
    ));
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let deps: Api<Deployment> = Api::namespaced(client.clone(), &ns);

    // 1. Wrong password: the cluster names the service, the external service and the reason;
    //    nothing rolls out.
    let msg = wait_for(
        WAIT,
        POLL,
        "the cluster to name the failing external service",
        async || {
            let c = get(&clusters, cluster_name).await?;
            Ok(match cond(&c, ct::READY) {
                Some((false, _, m))
                    if m.starts_with(
                        "Keystone blocked: external service db (database) not Authenticated:",
                    ) =>
                {
                    Check::Done(m)
                }
                other => Check::Pending(format!("{other:?}")),
            })
        },
    )
    .await?;
    assert!(
        msg.contains("Access denied") || msg.contains("denied"),
        "{msg}"
    );
    assert!(
        msg.contains(&admin_user),
        "the message names the user: {msg}"
    );
    let e = get(&ext, "db").await?;
    assert_eq!(cond(&e, ct::AUTHENTICATED).map(|c| c.0), Some(false));
    assert_eq!(cond(&e, ct::ENDPOINT_REACHABLE).map(|c| c.0), Some(true));
    assert_eq!(cond(&e, ct::SECRET_RESOLVED).map(|c| c.0), Some(true));
    assert!(
        jobs.list(&ListParams::default()).await?.items.is_empty(),
        "no Job before the database is Ready"
    );
    assert!(
        deps.list(&ListParams::default()).await?.items.is_empty(),
        "no Deployment before the database is Ready"
    );
    assert!(
        !secrets
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .any(|s| s.name_any().ends_with("-keystone-db")),
        "no generated Secret before gating passes"
    );

    // 2. Fix the password: the Secret change is seen and everything converges.
    secrets
        .replace("db-admin", &PostParams::default(), &{
            let mut s = secrets.get("db-admin").await?;
            s.data = secret("x", &[("username", &admin_user), ("password", &admin_pw)]).data;
            s
        })
        .await?;
    let ks_api = dyn_api(&client, &ns, "Keystone", "keystones");
    wait_for(WAIT, POLL, "the cluster to be Ready", async || {
        let c = get(&clusters, cluster_name).await?;
        Ok(match cond(&c, ct::READY) {
            Some((true, _, m)) => Check::Done(m),
            other => Check::Pending(format!("{other:?}")),
        })
    })
    .await?;
    let ks = get(&ks_api, &ks_name).await?;
    let (_, _, ready_msg) = cond(&ks, ct::READY).unwrap_or_default();
    assert!(ready_msg.contains("issued a token"), "{ready_msg}");
    // The cluster created and owns a Placement registered in its Keystone, Ready only once
    // the API answered an authenticated request.
    let pl = get(
        &dyn_api(&client, &ns, "Placement", "placements"),
        &format!("{cluster_name}-placement"),
    )
    .await?;
    assert_eq!(
        pl["spec"]["keystone"]["name"].as_str(),
        Some(ks_name.as_str())
    );
    assert_eq!(
        pl["metadata"]["ownerReferences"][0]["kind"],
        "OpenStackCluster"
    );
    let (_, _, pl_msg) = cond(&pl, ct::READY).unwrap_or_default();
    assert!(
        pl_msg.contains("answered an authenticated request"),
        "{pl_msg}"
    );
    let c = get(&clusters, cluster_name).await?;
    let rolled: Vec<(String, bool)> = c["status"]["services"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| {
                    (
                        s["name"].as_str().unwrap_or("").to_string(),
                        s["ready"] == true,
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        rolled,
        [
            ("keystone".to_string(), true),
            ("placement".to_string(), true)
        ]
    );
    let steps: BTreeSet<&str> = ks["status"]["jobs"]
        .as_array()
        .map(|j| j.iter().filter_map(|r| r["step"].as_str()).collect())
        .unwrap_or_default();
    for step in ["db-init", "db-sync", "bootstrap"] {
        assert!(steps.contains(step), "{step} in status.jobs: {steps:?}");
    }
    let dep = deps.get(&format!("{ks_name}-api")).await?;
    let hash1 = dep
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get("controlplane.sunet.se/config-hash"))
        .cloned()
        .context("config hash")?;
    assert_eq!(dep.spec.replicas, Some(2));
    let conf = secrets.get(&format!("{ks_name}-keystone-config")).await?;
    let conf_text = String::from_utf8_lossy(
        &conf
            .data
            .as_ref()
            .and_then(|d| d.get("keystone.conf"))
            .context("keystone.conf")?
            .0,
    )
    .into_owned();
    assert!(conf_text.contains(&format!("memcache_servers = 127.0.0.1:{mc_port}")));
    let db_pw = secrets.get(&format!("{ks_name}-keystone-db")).await?;
    let db_pw = String::from_utf8_lossy(
        &db_pw
            .data
            .as_ref()
            .and_then(|d| d.get("password"))
            .context("db password")?
            .0,
    )
    .into_owned();
    assert!(
        db_pw.len() >= 32 && conf_text.contains(&db_pw),
        "a generated, strong database password is rendered into keystone.conf"
    );
    let log_text = std::fs::read_to_string(&log_path)?;
    assert!(
        !log_text.contains(&db_pw) && !log_text.contains(&admin_pw),
        "secrets never in the log"
    );
    // 2b. The first credential key set is migrated once it is older than the propagation
    //     delay (every pod has it), by a Job carrying that key set.
    let cred_name = format!("{ks_name}-credential-keys");
    let migrated = wait_for(
        WAIT,
        POLL,
        "the first credential key set to be migrated",
        async || {
            let k = get(&ks_api, &ks_name).await?;
            Ok(match k["status"]["credentialKeys"]["migrated"].as_bool() {
                Some(true) => Check::Done(k["status"]["credentialKeys"].clone()),
                _ => Check::Pending(format!("{}", k["status"]["credentialKeys"])),
            })
        },
    )
    .await?;
    let cred0 = secrets.get(&cred_name).await?;
    assert_eq!(
        migrated["keySetHash"].as_str(),
        Some(key_set_hash(&cred0)?.as_str())
    );
    let first_migrate = migrate_jobs(&jobs)
        .await?
        .pop()
        .context("a credential-migrate Job")?;
    assert_eq!(
        job_env(&first_migrate, "EXPECTED_KEY_SET").as_deref(),
        Some(key_set_hash(&cred0)?.as_str()),
        "the Job checks it migrates to the current key set"
    );

    // 2c. Re-applying the unchanged cluster starts no Job and does not roll the Deployment,
    //     over several passes of the Keystone controller.
    let job_names = |l: Vec<Job>| l.iter().map(|j| j.name_any()).collect::<BTreeSet<_>>();
    let jobs_before = job_names(jobs.list(&ListParams::default()).await?.items);
    let dep_before = deps.get(&format!("{ks_name}-api")).await?;
    let passes = reconciles(metrics_port, "Keystone").await?;
    apply(&clusters, cluster.clone()).await?;
    wait_for(WAIT, POLL, "three more Keystone passes", async || {
        let n = reconciles(metrics_port, "Keystone").await?;
        Ok(if n >= passes + 3 {
            Check::Done(())
        } else {
            Check::Pending(format!("{n} passes"))
        })
    })
    .await?;
    assert_eq!(
        job_names(jobs.list(&ListParams::default()).await?.items),
        jobs_before,
        "no new Job for unchanged inputs"
    );
    let dep_after = deps.get(&format!("{ks_name}-api")).await?;
    assert_eq!(
        dep_after.metadata.generation, dep_before.metadata.generation,
        "the Deployment is not rolled for unchanged inputs"
    );

    let sync_jobs_before: BTreeSet<String> = jobs
        .list(&ListParams::default().labels("controlplane.sunet.se/step=db-sync"))
        .await?
        .items
        .iter()
        .map(|j| j.name_any())
        .collect();

    // 3. A config override: a new db_sync Job and a rolled Deployment.
    let mut c2 = cluster.clone();
    c2["spec"]["templates"]["keystone"]["configOverrides"] = json!({"DEFAULT": {"debug": "true"}});
    apply(&clusters, c2.clone()).await?;
    let hash2 = wait_for(
        WAIT,
        POLL,
        "the Deployment to roll with the new configuration",
        async || {
            let d = deps.get(&format!("{ks_name}-api")).await?;
            let h = d
                .spec
                .template
                .metadata
                .as_ref()
                .and_then(|m| m.annotations.as_ref())
                .and_then(|a| a.get("controlplane.sunet.se/config-hash"))
                .cloned()
                .unwrap_or_default();
            let c = get(&clusters, cluster_name).await?;
            Ok(if h != hash1 && cond(&c, ct::READY).is_some_and(|c| c.0) {
                Check::Done(h)
            } else {
                Check::Pending(format!("hash {h}, cluster {:?}", cond(&c, ct::READY)))
            })
        },
    )
    .await?;
    assert_ne!(hash1, hash2);
    let sync_jobs_after: BTreeSet<String> = jobs
        .list(&ListParams::default().labels("controlplane.sunet.se/step=db-sync"))
        .await?
        .items
        .iter()
        .map(|j| j.name_any())
        .collect();
    assert!(
        sync_jobs_after
            .iter()
            .any(|j| !sync_jobs_before.contains(j)),
        "a new db-sync Job ran: {sync_jobs_before:?} → {sync_jobs_after:?}"
    );
    let completed = kubelet
        .lock()
        .map(|k| k.completed.clone())
        .unwrap_or_default();
    assert_eq!(
        completed
            .iter()
            .filter(|j| j.starts_with(&format!("{ks_name}-db-init-")))
            .count(),
        1,
        "the database Job ran once: its inputs did not change ({completed:?})"
    );

    // 4. A failing db_sync: retried with backoff, Degraded with the Job's reason; then recovers.
    if let Ok(mut k) = kubelet.lock() {
        k.fail_steps.insert("db-sync".into());
    }
    let mut c3 = c2.clone();
    c3["spec"]["templates"]["keystone"]["configOverrides"] = json!({"DEFAULT": {"debug": "false"}});
    apply(&clusters, c3).await?;
    let degraded = wait_for(
        WAIT,
        POLL,
        "the cluster to report the failed db-sync Job",
        async || {
            let c = get(&clusters, cluster_name).await?;
            let failed = kubelet.lock().map(|k| k.failed.len()).unwrap_or(0);
            Ok(match cond(&c, ct::DEGRADED) {
                Some((true, _, m)) if failed >= 2 && m.contains("BackoffLimitExceeded") => {
                    Check::Done(m)
                }
                other => Check::Pending(format!("{other:?}, failed Jobs {failed}")),
            })
        },
    )
    .await?;
    assert!(
        degraded.starts_with("Keystone degraded: db-sync attempt"),
        "{degraded}"
    );
    let failed = kubelet.lock().map(|k| k.failed.clone()).unwrap_or_default();
    assert!(
        failed[0].ends_with("-1") && failed[1].ends_with("-2"),
        "retried under a new name: {failed:?}"
    );
    let ks = get(&ks_api, &ks_name).await?;
    let rec = ks["status"]["jobs"]
        .as_array()
        .and_then(|j| j.iter().find(|r| r["step"] == "db-sync"))
        .cloned()
        .unwrap_or_default();
    assert!(
        rec["lastFailure"]
            .as_str()
            .unwrap_or("")
            .contains("Job has reached the specified backoff limit"),
        "{rec}"
    );
    if let Ok(mut k) = kubelet.lock() {
        k.fail_steps.clear();
    }
    wait_for(WAIT, POLL, "the cluster to recover", async || {
        let c = get(&clusters, cluster_name).await?;
        Ok(if cond(&c, ct::READY).is_some_and(|c| c.0) {
            Check::Done(())
        } else {
            Check::Pending(format!("{:?}", cond(&c, ct::READY)))
        })
    })
    .await?;

    // 5. Key rotation: the fernet Secret changes, the Deployment does not (no restart).
    let fernet_name = format!("{ks_name}-fernet-keys");
    let before = secrets.get(&fernet_name).await?;
    let dep_gen = deps
        .get(&format!("{ks_name}-api"))
        .await?
        .metadata
        .generation;
    ks_api.patch(&ks_name, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {"controlplane.sunet.se/rotate-fernet-keys": "e2e-1"}}}))).await?;
    let after = wait_for(WAIT, POLL, "the fernet keys to rotate", async || {
        let s = secrets.get(&fernet_name).await?;
        Ok(if s.data != before.data {
            Check::Done(s)
        } else {
            Check::Pending("unchanged".into())
        })
    })
    .await?;
    let keys = |s: &Secret| {
        s.data
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect::<BTreeMap<_, _>>()
    };
    let (b, a) = (keys(&before), keys(&after));
    let primary = |m: &BTreeMap<String, Vec<u8>>| {
        m.keys()
            .filter_map(|k| k.parse::<u32>().ok())
            .max()
            .unwrap_or(0)
    };
    assert_eq!(primary(&a), primary(&b) + 1);
    assert_eq!(
        a.get(&primary(&a).to_string()),
        b.get("0"),
        "the staged key became the primary"
    );
    assert_eq!(
        a.get(&primary(&b).to_string()),
        b.get(&primary(&b).to_string()),
        "the old primary stays to validate live tokens"
    );
    assert_eq!(
        deps.get(&format!("{ks_name}-api"))
            .await?
            .metadata
            .generation,
        dep_gen,
        "rotation does not touch the Deployment"
    );

    // 5b. Credential keys: rotation only after the current keys are migrated, a migrate Job
    //     for each new key set after the propagation delay, the Deployment never touched.
    let dep_name = format!("{ks_name}-api");
    let dep0 = deps.get(&dep_name).await?;
    let template0 = serde_json::to_value(&dep0.spec.template)?;
    let annotate = async |v: &str| -> anyhow::Result<()> {
        ks_api
            .patch(
                &ks_name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {
                    controlplane_controllers::keystone::ROTATE_CREDENTIAL_KEYS_ANNOTATION: v}}})),
            )
            .await?;
        Ok(())
    };
    let rotated_from = async |from: &Secret, what: &str| -> anyhow::Result<Secret> {
        let after = wait_for(WAIT, POLL, what, async || {
            let s = secrets.get(&cred_name).await?;
            Ok(if s.data != from.data {
                Check::Done(s)
            } else {
                Check::Pending("unchanged".into())
            })
        })
        .await?;
        let (b, a) = (secret_files(from), secret_files(&after));
        assert_eq!(primary_index(&a), primary_index(&b) + 1, "{what}");
        assert_eq!(
            a.get(&primary_index(&a).to_string()),
            b.get("0"),
            "{what}: the staged key became the primary"
        );
        assert_eq!(
            a.get(&primary_index(&b).to_string()),
            b.get(&primary_index(&b).to_string()),
            "{what}: the old primary stays to decrypt credentials until the migration"
        );
        assert_eq!(a.len(), (b.len() + 1).min(3), "{what}: at most 3 keys");
        Ok(after)
    };
    // Waits until the key set of `s` is migrated by a Job created after the propagation delay.
    let migrated_after_delay = async |s: &Secret| -> anyhow::Result<()> {
        let set = key_set_hash(s)?;
        let status = wait_for(WAIT, POLL, "the new key set to be migrated", async || {
            let k = get(&ks_api, &ks_name).await?;
            let c = &k["status"]["credentialKeys"];
            Ok(
                if c["keySetHash"] == set.as_str() && c["migrated"] == true {
                    Check::Done(c.clone())
                } else {
                    Check::Pending(format!("{c}"))
                },
            )
        })
        .await?;
        let written: k8s_openapi::jiff::Timestamp = status["lastRotation"]
            .as_str()
            .context("lastRotation")?
            .parse()?;
        let job = migrate_jobs(&jobs)
            .await?
            .into_iter()
            .find(|j| job_env(j, "EXPECTED_KEY_SET").as_deref() == Some(set.as_str()))
            .context("a credential-migrate Job for the new key set")?;
        let created = job
            .metadata
            .creation_timestamp
            .as_ref()
            .context("creationTimestamp")?
            .0
            .as_second();
        // creationTimestamp has whole seconds: allow the truncation.
        assert!(
            created >= written.as_second() + PROPAGATION_SECONDS - 1,
            "migrated only after the propagation delay: key set written {written}, Job created {created}"
        );
        Ok(())
    };

    let c1 = secrets.get(&cred_name).await?;
    annotate("e2e-1").await?;
    let c2 = rotated_from(&c1, "the first credential key rotation").await?;
    migrated_after_delay(&c2).await?;

    // A failing migration blocks the next rotation (status says why) and is retried.
    if let Ok(mut k) = kubelet.lock() {
        k.fail_steps.insert("credential-migrate".into());
    }
    annotate("e2e-2").await?;
    let c3 = rotated_from(&c2, "the second credential key rotation").await?;
    annotate("e2e-3").await?;
    let failed_migrations = || {
        kubelet
            .lock()
            .map(|k| {
                k.failed
                    .iter()
                    .filter(|j| j.contains("-credential-migrate-"))
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    let degraded = wait_for(
        WAIT,
        POLL,
        "Keystone to report the failing credential-migrate Job",
        async || {
            let k = get(&ks_api, &ks_name).await?;
            let failed = failed_migrations().len();
            Ok(match cond(&k, ct::DEGRADED) {
                Some((true, reason, m)) if reason == "CredentialMigrateFailed" && failed >= 2 => {
                    Check::Done((m, k["status"]["credentialKeys"].clone()))
                }
                other => Check::Pending(format!("{other:?}, failed {failed}")),
            })
        },
    )
    .await?;
    assert!(
        degraded.0.contains("BackoffLimitExceeded")
            && degraded.0.contains("do not rotate until it succeeds"),
        "{}",
        degraded.0
    );
    assert_eq!(degraded.1["migrated"], false);
    let failed = failed_migrations();
    assert!(
        failed[0].ends_with("-1") && failed[1].ends_with("-2"),
        "retried under a new name: {failed:?}"
    );
    assert_eq!(
        secrets.get(&cred_name).await?.data,
        c3.data,
        "no rotation while the current keys are not migrated (e2e-3 waits)"
    );
    // The cluster rolls its children up when it is reconciled after the Keystone's change:
    // it names the failing step (its dependants, within their grace, stay Ready meanwhile).
    wait_for(
        WAIT,
        POLL,
        "the cluster to name the failing step",
        async || {
            let c = get(&clusters, cluster_name).await?;
            Ok(match cond(&c, ct::READY) {
                Some(r) if r.2.contains("credential-migrate") => Check::Done(()),
                other => Check::Pending(format!("{other:?}")),
            })
        },
    )
    .await?;
    if let Ok(mut k) = kubelet.lock() {
        k.fail_steps.clear();
    }
    // Fixed: the retry succeeds, then the waiting request rotates a third time.
    let c4 = rotated_from(&c3, "the third credential key rotation").await?;
    migrated_after_delay(&c4).await?;
    let dep1 = deps.get(&dep_name).await?;
    assert_eq!(
        dep1.metadata.generation, dep0.metadata.generation,
        "credential key rotation does not touch the Deployment"
    );
    assert_eq!(
        serde_json::to_value(&dep1.spec.template)?,
        template0,
        "the pod template is unchanged: no restart"
    );
    wait_for(WAIT, POLL, "the cluster to be Ready again", async || {
        let c = get(&clusters, cluster_name).await?;
        Ok(if cond(&c, ct::READY).is_some_and(|c| c.0) {
            Check::Done(())
        } else {
            Check::Pending(format!("{:?}", cond(&c, ct::READY)))
        })
    })
    .await?;

    // 5c. The credential key Secret deleted: not regenerated (stored credentials would be
    //     lost) but Degraded naming it; restored from a backup, the same key set carries on.
    secrets.delete(&cred_name, &Default::default()).await?;
    let missing = wait_for(
        WAIT,
        POLL,
        "Keystone to report the missing credential keys",
        async || {
            let k = get(&ks_api, &ks_name).await?;
            Ok(match cond(&k, ct::DEGRADED) {
                Some((true, reason, m)) if reason == "CredentialKeysMissing" => Check::Done(m),
                other => Check::Pending(format!("{other:?}")),
            })
        },
    )
    .await?;
    assert!(
        missing.contains(&cred_name) && missing.contains(&key_set_hash(&c4)?),
        "{missing}"
    );
    assert!(
        secrets.get_opt(&cred_name).await?.is_none(),
        "no new keys generated"
    );
    secrets
        .create(
            &PostParams::default(),
            &Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some(cred_name.clone()),
                    ..Default::default()
                },
                data: c4.data.clone(),
                ..Default::default()
            },
        )
        .await?;
    wait_for(WAIT, POLL, "the restored keys to be in use", async || {
        let k = get(&ks_api, &ks_name).await?;
        let c = &k["status"]["credentialKeys"];
        Ok(
            if cond(&k, ct::READY).is_some_and(|r| r.0) && c["migrated"] == true {
                Check::Done(())
            } else {
                Check::Pending(format!("{:?} {c}", cond(&k, ct::READY)))
            },
        )
    })
    .await?;
    let k = get(&ks_api, &ks_name).await?;
    assert_eq!(
        k["status"]["credentialKeys"]["keySetHash"].as_str(),
        Some(key_set_hash(&c4)?.as_str())
    );
    assert_eq!(secrets.get(&cred_name).await?.data, c4.data);

    // 6. Events on the transitions and on bootstrap completion; metrics per kind.
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), &ns);
    let evs = events.list(&ListParams::default()).await?.items;
    let has = |kind: &str, reason: &str| {
        evs.iter().any(|e| {
            e.involved_object.kind.as_deref() == Some(kind) && e.reason.as_deref() == Some(reason)
        })
    };
    assert!(
        has("OpenStackCluster", "Blocked"),
        "a Blocked Event on the cluster"
    );
    assert!(
        has("Keystone", "Blocked") && has("Keystone", "Degraded"),
        "Blocked and Degraded Events on Keystone"
    );
    assert!(
        has("Keystone", "BootstrapComplete"),
        "a BootstrapComplete Event"
    );
    assert!(
        has("OpenStackExternalService", "Degraded"),
        "a Degraded Event on the database service"
    );
    let text = reqwest::get(format!("http://127.0.0.1:{metrics_port}/metrics"))
        .await?
        .text()
        .await?;
    for kind in ["OpenStackCluster", "Keystone", "OpenStackExternalService"] {
        assert!(
            text.contains(&format!(
                "controlplane_reconcile_total{{kind=\"{kind}\",result=\"success\"}}"
            )),
            "reconcile counter of {kind}:\n{text}"
        );
    }
    assert!(text.contains(&format!("controlplane_condition{{kind=\"Keystone\",namespace=\"{ns}\",name=\"{ks_name}\",condition=\"Ready\"}} 1")), "{text}");

    cm.abort();
    let nss: Api<Namespace> = Api::all(client.clone());
    let _ = nss.delete(&ns, &Default::default()).await;
    mariadb(&format!("DROP USER IF EXISTS '{admin_user}'@'127.0.0.1'"))?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_plane_placement_end_to_end() -> anyhow::Result<()> {
    let target = Target::from_env().await?;
    let client = target.client().await?;
    install_crds(&client).await?;
    let ns = create_namespace(&client).await?;
    let (admin_user, admin_pw) = db_admin_user()?;
    let (ks_admin_pw, ks_url) = test_cloud_keystone()?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    secrets
        .create(
            &PostParams::default(),
            &secret(
                "db-admin",
                &[("username", &admin_user), ("password", &admin_pw)],
            ),
        )
        .await?;
    let pp = PatchParams::apply("e2e").force();
    let apply = async |api: &Api<kube::api::DynamicObject>, v: Value| -> anyhow::Result<()> {
        let name = v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        api.patch(&name, &pp, &Patch::Apply(&v)).await?;
        Ok(())
    };
    let ext = dyn_api(
        &client,
        &ns,
        "OpenStackExternalService",
        "openstackexternalservices",
    );
    apply(&ext, json!({"apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "OpenStackExternalService", "metadata": {"name": "db"},
        "spec": {"type": "database", "endpoints": ["127.0.0.1:13306"], "credentials": {"secretName": "db-admin"}}})).await?;
    let ks_api = dyn_api(&client, &ns, "Keystone", "keystones");
    apply(&ks_api, json!({"apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "Keystone", "metadata": {"name": "ks"},
        "spec": {"database": {"service": {"name": "db"}}}})).await?;
    let pl_api = dyn_api(&client, &ns, "Placement", "placements");
    let placement = json!({"apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "Placement", "metadata": {"name": "pl"},
        "spec": {"database": {"service": {"name": "db"}}, "keystone": {"name": "ks"}, "replicas": 2}});
    apply(&pl_api, placement.clone()).await?;

    let (_op, log_path, _) = start_operator(
        &target,
        &ns,
        &[
            "--controllers".into(),
            "external-service,keystone,placement".into(),
            "--keystone-url".into(),
            format!("{ns}/ks={ks_url}"),
            "--api-url".into(),
            format!("placement/{ns}/pl=http://127.0.0.1:8778"),
        ],
    )?;
    eprintln!("operator log: {}", log_path.display());
    let kubelet = Arc::new(Mutex::new(Kubelet::default()));
    let cm = tokio::spawn(play_controller_manager(
        client.clone(),
        ns.clone(),
        kubelet.clone(),
    ));
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let deps: Api<Deployment> = Api::namespaced(client.clone(), &ns);

    // 1. The Keystone generated an admin password the real Keystone does not know, so its
    //    token probe fails: Placement waits for it and creates nothing.
    let blocked = wait_for(WAIT, POLL, "Placement to wait for Keystone", async || {
        let ks = get(&ks_api, "ks").await?;
        let pl = get(&pl_api, "pl").await?;
        Ok(match (cond(&ks, ct::DEGRADED), cond(&pl, ct::BLOCKED)) {
            // Placement is reconciled again on each change of its Keystone: it converges on
            // naming the Keystone's current reason.
            (Some((true, r, _)), Some((true, _, m)))
                if r == "TokenProbeFailed"
                    && m.starts_with("Keystone ks is not Ready: token request to") =>
            {
                Check::Done(m)
            }
            other => Check::Pending(format!("{other:?}")),
        })
    })
    .await?;
    assert!(blocked.contains("answered 401"), "{blocked}");
    assert!(
        service_jobs(&jobs, "placement").await?.is_empty(),
        "no Placement Job before Keystone is Ready"
    );
    assert!(
        secrets.get_opt("pl-placement-db").await?.is_none(),
        "no generated Placement Secret before Keystone is Ready"
    );

    // 2. The real admin password: Keystone Ready, then Placement through its three Jobs to an
    //    authenticated answer of the API.
    secrets
        .replace("ks-keystone-admin", &PostParams::default(), &{
            let mut s = secrets.get("ks-keystone-admin").await?;
            s.data = secret("x", &[("password", &ks_admin_pw)]).data;
            s
        })
        .await?;
    let ready = wait_for(WAIT, POLL, "Placement to be Ready", async || {
        let pl = get(&pl_api, "pl").await?;
        Ok(match cond(&pl, ct::READY) {
            Some((true, _, m)) => Check::Done(m),
            other => Check::Pending(format!("{other:?}")),
        })
    })
    .await?;
    assert!(
        ready
            .contains("http://127.0.0.1:8778/resource_providers answered an authenticated request"),
        "{ready}"
    );
    let pl = get(&pl_api, "pl").await?;
    let steps: Vec<&str> = pl["status"]["jobs"]
        .as_array()
        .map(|j| j.iter().filter_map(|r| r["step"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(steps, ["db-init", "db-sync", "service-user"]);
    assert_eq!(
        pl["status"]["endpoint"].as_str(),
        Some(format!("http://pl-api.{ns}.svc:8778").as_str())
    );
    let dep = deps.get("pl-api").await?;
    assert_eq!(dep.spec.replicas, Some(2));
    let hash1 = config_hash(&dep);
    assert!(!hash1.is_empty());
    let conf = secret_text(&secrets.get("pl-placement-config").await?, "placement.conf");
    let db_pw = secret_text(&secrets.get("pl-placement-db").await?, "password");
    let user_pw = secret_text(&secrets.get("pl-placement-service-user").await?, "password");
    assert!(db_pw.len() >= 32 && user_pw.len() >= 32);
    assert!(
        conf.contains(&format!(
            "connection = mysql+pymysql://placement:{db_pw}@127.0.0.1:13306/placement"
        )),
        "{conf}"
    );
    assert!(conf.contains(&format!("auth_url = http://ks-api.{ns}.svc:5000/v3")));
    assert!(conf.contains(&format!("password = {user_pw}")));
    let su = jobs
        .list(
            &ListParams::default()
                .labels("app.kubernetes.io/name=placement,controlplane.sunet.se/step=service-user"),
        )
        .await?
        .items;
    assert_eq!(su.len(), 1);
    assert_eq!(
        job_env(&su[0], "SERVICE_TYPE").as_deref(),
        Some("placement")
    );
    assert_eq!(
        job_env(&su[0], "ENDPOINT_INTERNAL").as_deref(),
        Some(format!("http://pl-api.{ns}.svc:8778").as_str())
    );
    assert_eq!(
        job_env(&su[0], "OS_AUTH_URL").as_deref(),
        Some(format!("http://ks-api.{ns}.svc:5000/v3").as_str())
    );
    let log_text = std::fs::read_to_string(&log_path)?;
    assert!(
        !log_text.contains(&db_pw) && !log_text.contains(&user_pw),
        "secrets never in the log"
    );

    // 3. An override: exactly one new Job, a db-sync; the Deployment rolls.
    let before = service_jobs(&jobs, "placement").await?;
    let mut p2 = placement.clone();
    p2["spec"]["configOverrides"] = json!({"DEFAULT": {"debug": "true"}});
    apply(&pl_api, p2).await?;
    let hash2 = wait_for(WAIT, POLL, "the Deployment to roll", async || {
        let h = config_hash(&deps.get("pl-api").await?);
        let pl = get(&pl_api, "pl").await?;
        let ready = cond(&pl, ct::READY).is_some_and(|c| c.0)
            && pl["status"]["observedGeneration"] == pl["metadata"]["generation"];
        Ok(if h != hash1 && ready {
            Check::Done(h)
        } else {
            Check::Pending(format!("hash {h}, {:?}", cond(&pl, ct::READY)))
        })
    })
    .await?;
    assert_ne!(hash1, hash2);
    let after = service_jobs(&jobs, "placement").await?;
    let new: Vec<&String> = after.difference(&before).collect();
    assert_eq!(new.len(), 1, "exactly one new Job: {before:?} → {after:?}");
    assert!(new[0].starts_with("pl-db-sync-"), "{new:?}");
    let conf = secret_text(&secrets.get("pl-placement-config").await?, "placement.conf");
    assert!(conf.contains("debug = true"), "{conf}");

    // 4. db-sync fails twice: retried under new names, Degraded with the Job's reason and the
    //    failure recorded in status; then it succeeds and Placement recovers.
    if let Ok(mut k) = kubelet.lock() {
        k.fail_steps.insert("db-sync".into());
    }
    let mut p3 = placement.clone();
    p3["spec"]["configOverrides"] = json!({"DEFAULT": {"debug": "false"}});
    apply(&pl_api, p3).await?;
    let degraded = wait_for(WAIT, POLL, "the failed db-sync in status", async || {
        let pl = get(&pl_api, "pl").await?;
        let failed = kubelet
            .lock()
            .map(|k| k.failed.iter().filter(|j| j.starts_with("pl-")).count())
            .unwrap_or(0);
        Ok(match cond(&pl, ct::DEGRADED) {
            Some((true, _, m)) if failed >= 2 && m.contains("BackoffLimitExceeded") => {
                Check::Done((m, pl))
            }
            other => Check::Pending(format!("{other:?}, failed Jobs {failed}")),
        })
    })
    .await?;
    assert!(degraded.0.starts_with("db-sync attempt"), "{}", degraded.0);
    let rec = degraded.1["status"]["jobs"]
        .as_array()
        .and_then(|j| j.iter().find(|r| r["step"] == "db-sync"))
        .cloned()
        .unwrap_or_default();
    assert!(
        rec["lastFailure"]
            .as_str()
            .unwrap_or("")
            .contains("Job has reached the specified backoff limit"),
        "{rec}"
    );
    assert!(rec["attempts"].as_u64().unwrap_or(0) >= 2, "{rec}");
    let failed: Vec<String> = kubelet.lock().map(|k| k.failed.clone()).unwrap_or_default();
    assert!(
        failed[0].ends_with("-1") && failed[1].ends_with("-2") && failed[0] != failed[1],
        "retried under a new name: {failed:?}"
    );
    if let Ok(mut k) = kubelet.lock() {
        k.fail_steps.clear();
    }
    wait_for(WAIT, POLL, "Placement to recover", async || {
        let pl = get(&pl_api, "pl").await?;
        Ok(if cond(&pl, ct::READY).is_some_and(|c| c.0) {
            Check::Done(())
        } else {
            Check::Pending(format!("{:?}", cond(&pl, ct::READY)))
        })
    })
    .await?;
    let pl = get(&pl_api, "pl").await?;
    let rec = pl["status"]["jobs"]
        .as_array()
        .and_then(|j| j.iter().find(|r| r["step"] == "db-sync"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(rec["succeeded"], true, "{rec}");
    assert!(rec["lastFailure"].is_null(), "{rec}");
    let completed = kubelet
        .lock()
        .map(|k| k.completed.clone())
        .unwrap_or_default();
    assert_eq!(
        completed
            .iter()
            .filter(|j| j.starts_with("pl-db-init-"))
            .count(),
        1,
        "db-init ran once: its inputs never changed ({completed:?})"
    );
    cm.abort();
    let nss: Api<Namespace> = Api::all(client.clone());
    let _ = nss.delete(&ns, &Default::default()).await;
    mariadb(&format!("DROP USER IF EXISTS '{admin_user}'@'127.0.0.1'"))?;
    Ok(())
}

/// The upgrade step a Job of the cluster's upgrade runs (its hash annotation is the step name).
fn upgrade_step(j: &Job) -> String {
    j.annotations()
        .get("controlplane.sunet.se/input-hash")
        .cloned()
        .unwrap_or_default()
}

/// An `OpenStackCluster` at 2025.2 upgraded to 2026.1 by the operator: the backup hook fails
/// first (Degraded, nothing migrated, children still on 2025.2), a retry annotation resumes
/// it, the migration Jobs run in plan order with the target release's image, Keystone rolls
/// before Placement, and `status.currentRelease` ends at 2026.1. (The real commands are proved
/// by controlplane-render's `upgrade_boot` test; here the test plays the kubelet.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_plane_cluster_upgrade_end_to_end() -> anyhow::Result<()> {
    const LONG: Duration = Duration::from_secs(300);
    let target = Target::from_env().await?;
    let client = target.client().await?;
    install_crds(&client).await?;
    let ns = create_namespace(&client).await?;
    let (admin_user, admin_pw) = db_admin_user()?;
    let (ks_admin_pw, ks_url) = test_cloud_keystone()?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    secrets
        .create(
            &PostParams::default(),
            &secret(
                "db-admin",
                &[("username", &admin_user), ("password", &admin_pw)],
            ),
        )
        .await?;
    let cluster_name = "up";
    let ks_name = controlplane_controllers::cluster::keystone_name(cluster_name);
    let pl_name = format!("{cluster_name}-placement");
    secrets
        .create(
            &PostParams::default(),
            &secret(
                &format!("{ks_name}-keystone-admin"),
                &[("password", &ks_admin_pw)],
            ),
        )
        .await?;
    let pp = PatchParams::apply("e2e").force();
    let apply = async |api: &Api<kube::api::DynamicObject>, v: Value| -> anyhow::Result<()> {
        let name = v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        api.patch(&name, &pp, &Patch::Apply(&v)).await?;
        Ok(())
    };
    let ext = dyn_api(
        &client,
        &ns,
        "OpenStackExternalService",
        "openstackexternalservices",
    );
    apply(&ext, json!({"apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "OpenStackExternalService", "metadata": {"name": "db"},
        "spec": {"type": "database", "endpoints": ["127.0.0.1:13306"], "credentials": {"secretName": "db-admin"}}})).await?;
    let clusters = dyn_api(&client, &ns, "OpenStackCluster", "openstackclusters");
    let cluster = |release: &str| {
        json!({"apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "OpenStackCluster", "metadata": {"name": cluster_name},
        "spec": {"release": release, "services": ["keystone", "placement"], "externalServices": {"database": {"name": "db"}},
                 "upgrade": {"backup": {"image": "backup:1", "command": ["/backup.sh"]}}}})
    };
    apply(&clusters, cluster("2025.2")).await?;
    let (_op, log_path, _) = start_operator(
        &target,
        &ns,
        &[
            "--keystone-url".into(),
            format!("{ns}/{ks_name}={ks_url}"),
            "--api-url".into(),
            format!("placement/{ns}/{pl_name}=http://127.0.0.1:8778"),
        ],
    )?;
    eprintln!("operator log: {}", log_path.display());
    let kubelet = Arc::new(Mutex::new(Kubelet::default()));
    let cm = tokio::spawn(play_controller_manager(
        client.clone(),
        ns.clone(),
        kubelet.clone(),
    ));
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let ks_api = dyn_api(&client, &ns, "Keystone", "keystones");
    let pl_api = dyn_api(&client, &ns, "Placement", "placements");
    let releases = async || -> anyhow::Result<(String, String)> {
        let ks = get(&ks_api, &ks_name).await?;
        let pl = get(&pl_api, &pl_name).await?;
        Ok((
            ks["spec"]["release"].as_str().unwrap_or("").to_string(),
            pl["spec"]["release"].as_str().unwrap_or("").to_string(),
        ))
    };

    // 1. Deployed at 2025.2: the cluster adopts it as its current release.
    wait_for(LONG, POLL, "the 2025.2 cluster to be Ready", async || {
        let c = get(&clusters, cluster_name).await?;
        Ok(match cond(&c, ct::READY) {
            Some((true, _, _)) if c["status"]["currentRelease"] == "2025.2" => Check::Done(()),
            other => Check::Pending(format!("{other:?} {}", c["status"]["currentRelease"])),
        })
    })
    .await?;
    assert_eq!(releases().await?, ("2025.2".into(), "2025.2".into()));

    // 2. The backup hook fails: Degraded at the backup, nothing migrated or rolled.
    if let Ok(mut k) = kubelet.lock() {
        k.fail_steps.insert("upgrade".into());
    }
    apply(&clusters, cluster("2026.1")).await?;
    let degraded = wait_for(
        LONG,
        POLL,
        "the upgrade to stop at the backup",
        async || {
            let c = get(&clusters, cluster_name).await?;
            Ok(match cond(&c, ct::DEGRADED) {
                Some((true, r, m)) if r == "UpgradeFailed" => Check::Done((m, c)),
                other => Check::Pending(format!("{other:?} {}", c["status"]["upgrade"])),
            })
        },
    )
    .await?;
    assert!(degraded.0.contains("Preflight/backup"), "{}", degraded.0);
    assert!(degraded.0.contains("retry-upgrade"), "{}", degraded.0);
    assert_eq!(degraded.1["status"]["currentRelease"], "2025.2");
    assert_eq!(
        degraded.1["status"]["upgrade"]["failedStep"],
        "Preflight/backup"
    );
    let upgrade_jobs = jobs
        .list(&ListParams::default().labels("controlplane.sunet.se/step=upgrade"))
        .await?
        .items;
    assert_eq!(
        upgrade_jobs.iter().map(upgrade_step).collect::<Vec<_>>(),
        ["Preflight/backup"],
        "nothing after the failed backup"
    );
    assert_eq!(releases().await?, ("2025.2".into(), "2025.2".into()));

    // 3. Fixed and retried: the upgrade runs to the end; Keystone rolls before Placement.
    if let Ok(mut k) = kubelet.lock() {
        k.fail_steps.clear();
    }
    clusters
        .patch(
            cluster_name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"controlplane.sunet.se/retry-upgrade": "1"}}}),
            ),
        )
        .await?;
    let mut seen_keystone_first = false;
    let done = wait_for(LONG, POLL, "the upgrade to complete", async || {
        let c = get(&clusters, cluster_name).await?;
        if releases().await? == ("2026.1".to_string(), "2025.2".to_string()) {
            seen_keystone_first = true;
        }
        Ok(
            if c["status"]["currentRelease"] == "2026.1" && cond(&c, ct::READY).is_some_and(|r| r.0)
            {
                Check::Done(c)
            } else {
                Check::Pending(format!(
                    "{} {:?}",
                    c["status"]["upgrade"]["step"],
                    cond(&c, ct::READY)
                ))
            },
        )
    })
    .await?;
    assert!(
        seen_keystone_first,
        "Keystone ran 2026.1 while Placement still ran 2025.2"
    );
    assert_eq!(releases().await?, ("2026.1".into(), "2026.1".into()));
    let u = &done["status"]["upgrade"];
    assert_eq!(u["phase"], "Complete");
    assert_eq!(u["retriedFor"], "1");
    assert!(u["completedAt"].is_string() && u["startedAt"].is_string());
    assert_eq!(
        u["completedSteps"].as_array().map(Vec::len),
        Some(15),
        "{u}"
    );
    // The migration Jobs, in the order they completed: the plan's order.
    let completed = kubelet
        .lock()
        .map(|k| k.completed.clone())
        .unwrap_or_default();
    let all = jobs
        .list(&ListParams::default().labels("controlplane.sunet.se/step=upgrade"))
        .await?
        .items;
    let order: Vec<String> = completed
        .iter()
        .filter_map(|n| all.iter().find(|j| &j.name_any() == n))
        .map(upgrade_step)
        .collect();
    assert_eq!(
        order,
        [
            "Preflight/backup",
            "Migrate/keystone/expand",
            "Migrate/keystone/migrate",
            "Migrate/placement/db-sync",
            "PostMigrate/keystone/contract",
            "PostMigrate/placement/online-data-migrations"
        ]
    );
    let expand = all
        .iter()
        .find(|j| upgrade_step(j) == "Migrate/keystone/expand")
        .context("the expand Job")?;
    let ctr = &expand
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .context("pod spec")?
        .containers[0];
    assert_eq!(
        ctr.image.as_deref(),
        Some("localhost/openstack-keystone:2026.1")
    );
    assert_eq!(
        ctr.command.clone().unwrap_or_default().join(" "),
        "keystone-manage --config-file /etc/keystone/keystone.conf db_sync --expand"
    );

    // 4. Going back is refused now, naming what is allowed; nothing changes.
    apply(&clusters, cluster("2025.2")).await?;
    let refused = wait_for(WAIT, POLL, "the downgrade to be refused", async || {
        let c = get(&clusters, cluster_name).await?;
        Ok(match cond(&c, ct::INVALID_SPEC) {
            Some((true, _, m)) => Check::Done(m),
            other => Check::Pending(format!("{other:?}")),
        })
    })
    .await?;
    assert!(refused.contains("allowed from 2026.1: 2026.1"), "{refused}");
    assert_eq!(releases().await?, ("2026.1".into(), "2026.1".into()));

    cm.abort();
    let nss: Api<Namespace> = Api::all(client.clone());
    let _ = nss.delete(&ns, &Default::default()).await;
    mariadb(&format!("DROP USER IF EXISTS '{admin_user}'@'127.0.0.1'"))?;
    Ok(())
}
