//! End to end: Nova and Cinder through `openstack-operator control-plane` (the binary) on the
//! suite's Kubernetes API, the test playing kubelet and controller manager (see
//! `cp_common::play_controller_manager`). The external services are real: the test cloud's
//! MariaDB and the external-services harness's RabbitMQ (checked for real before anything is
//! created). Ready means the test cloud's real Nova (`GET /v2.1/servers`) and Cinder
//! (`GET /v3/types`), reached through `--api-url`, answered a request authenticated with a
//! token the test cloud's real Keystone issued. (The rendered configurations themselves are
//! booted for real by controlplane-render's `nova_boot` and `cinder_boot` tests.)

use crate::cp_common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use controlplane_api::condition_types as ct;
use cp_common::*;
use e2e::{Check, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Secret, Service};
use kube::Api;
use kube::api::{DynamicObject, ListParams};
use serde_json::{Value, json};

/// The steps of the service's Jobs that are new in `after`.
fn new_steps(
    before: &BTreeSet<String>,
    after: &BTreeSet<String>,
    prefix: &str,
) -> BTreeSet<String> {
    after
        .difference(before)
        .filter_map(|j| j.strip_prefix(prefix))
        // `<step>-<hash>-<attempt>`: drop the hash and attempt.
        .map(|rest| {
            let mut parts: Vec<&str> = rest.rsplitn(3, '-').collect();
            parts.pop().unwrap_or_default().to_string()
        })
        .collect()
}

async fn wait_ready(api: &Api<DynamicObject>, name: &str, what: &str) -> anyhow::Result<String> {
    wait_for(WAIT, POLL, what, async || {
        let o = get(api, name).await?;
        let current = o["status"]["observedGeneration"] == o["metadata"]["generation"];
        Ok(match cond(&o, ct::READY) {
            Some((true, _, m)) if current => Check::Done(m),
            other => Check::Pending(format!("{other:?}")),
        })
    })
    .await
}

/// Waits until `api/name` has rolled every Deployment to a new hash and is Ready again.
async fn rolled(
    api: &Api<DynamicObject>,
    deps: &Api<Deployment>,
    name: &str,
    dep: &str,
    old_hash: &str,
) -> anyhow::Result<String> {
    wait_for(WAIT, POLL, "the Deployments to roll", async || {
        let h = config_hash(&deps.get(dep).await?);
        let o = get(api, name).await?;
        let ready = cond(&o, ct::READY).is_some_and(|c| c.0)
            && o["status"]["observedGeneration"] == o["metadata"]["generation"];
        Ok(if h != old_hash && ready {
            Check::Done(h)
        } else {
            Check::Pending(format!("hash {h}, {:?}", cond(&o, ct::READY)))
        })
    })
    .await
}

/// Nova (with its Placement) and Cinder reach Ready through their Jobs and Deployments; an
/// override re-runs exactly the Jobs whose inputs changed; a Job failing twice is retried and
/// recovers; a bad spec of each kind is InvalidSpec naming the field and touches nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_plane_nova_and_cinder_end_to_end() -> anyhow::Result<()> {
    let ComputeStage {
        target,
        client,
        ns,
        ks_url,
        admin_user,
    } = compute_stage().await?;
    let pl_api = dyn_api(&client, &ns, "Placement", "placements");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let nv_api = dyn_api(&client, &ns, "Nova", "novas");
    let nova = json!({"apiVersion": API, "kind": "Nova", "metadata": {"name": "nv"},
        "spec": {"database": {"service": {"name": "db"}}, "keystone": {"name": "ks"},
                 "messaging": {"name": "mq"}, "placement": {"name": "pl"}}});
    apply(&nv_api, &nova).await?;
    let cn_api = dyn_api(&client, &ns, "Cinder", "cinders");
    let cinder = json!({"apiVersion": API, "kind": "Cinder", "metadata": {"name": "cn"},
        "spec": {"database": {"service": {"name": "db"}}, "keystone": {"name": "ks"},
                 "messaging": {"name": "mq"},
                 "backends": [{"name": "ceph", "rbd": {"pool": "volumes", "user": "cinder",
                     "cephConf": "[global]\nmon host = 127.0.0.1:16789\n",
                     "keyringSecret": {"name": "ceph-keyring", "key": "keyring"},
                     "secretUuid": "457eb676-33da-42ec-9a8c-9293d545c337"}}]}});
    apply(&cn_api, &cinder).await?;
    // Bad input, one per kind: refused before anything is created.
    apply(
        &nv_api,
        &json!({"apiVersion": API, "kind": "Nova", "metadata": {"name": "nv-bad"},
        "spec": {"database": {"service": {"name": "db"}}, "keystone": {"name": "ks"},
                 "messaging": {"name": "mq"}, "placement": {"name": "pl"},
                 "configOverrides": {"scheduler": {"max_atempts": "3"}}}}),
    )
    .await?;
    let mut bad_cinder = cinder.clone();
    bad_cinder["metadata"]["name"] = json!("cn-bad");
    bad_cinder["spec"]["backends"][0]["rbd"]["secretUuid"] = json!("not-a-uuid");
    apply(&cn_api, &bad_cinder).await?;

    let (_op, log_path, _) = start_operator(
        &target,
        &ns,
        &[
            "--controllers".into(),
            "external-service,keystone,placement,nova,cinder".into(),
            "--keystone-url".into(),
            format!("{ns}/ks={ks_url}"),
            "--api-url".into(),
            format!("placement/{ns}/pl=http://127.0.0.1:8778"),
            "--api-url".into(),
            format!("nova/{ns}/nv=http://127.0.0.1:8774/v2.1"),
            "--api-url".into(),
            format!("cinder/{ns}/cn=http://127.0.0.1:8776"),
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
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);

    // 1. Bad input: InvalidSpec naming the field; nothing of theirs exists.
    for (api, name, field) in [
        (
            &nv_api,
            "nv-bad",
            "spec.configOverrides.scheduler.max_atempts",
        ),
        (&cn_api, "cn-bad", "spec.backends[0].rbd.secretUuid"),
    ] {
        let m = wait_for(WAIT, POLL, "InvalidSpec", async || {
            let o = get(api, name).await?;
            Ok(match cond(&o, ct::INVALID_SPEC) {
                Some((true, _, m)) => Check::Done(m),
                other => Check::Pending(format!("{other:?}")),
            })
        })
        .await?;
        assert!(m.contains(field), "{name}: {m}");
    }
    let nv_bad_m = cond(&get(&nv_api, "nv-bad").await?, ct::INVALID_SPEC)
        .unwrap_or_default()
        .2;
    assert!(nv_bad_m.contains("did you mean max_attempts"), "{nv_bad_m}");

    // 2. Ready: Placement, then Nova through its Jobs and five Deployments; Cinder.
    wait_ready(&pl_api, "pl", "Placement Ready").await?;
    let nv_ready = wait_ready(&nv_api, "nv", "Nova Ready").await?;
    assert!(
        nv_ready.contains("http://127.0.0.1:8774/v2.1/servers answered an authenticated request"),
        "{nv_ready}"
    );
    let cn_ready = wait_ready(&cn_api, "cn", "Cinder Ready").await?;
    assert!(
        cn_ready.contains("http://127.0.0.1:8776/v3/types answered an authenticated request"),
        "{cn_ready}"
    );
    // The operator read the real Cinder's os-services as its admin: the test cloud runs no
    // cinder-volume for this CR's host (the boot proof cinder_boot sees one up, then down).
    assert!(
        cn_ready.ends_with("; cinder-volume not registered yet: cn@ceph"),
        "{cn_ready}"
    );
    let steps = |o: &Value| -> Vec<String> {
        o["status"]["jobs"]
            .as_array()
            .map(|j| {
                j.iter()
                    .filter_map(|r| r["step"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(
        steps(&get(&nv_api, "nv").await?),
        controlplane_controllers::nova::STEPS.map(String::from)
    );
    assert_eq!(
        steps(&get(&cn_api, "cn").await?),
        controlplane_controllers::cinder::STEPS.map(String::from)
    );
    for d in [
        "nv-api",
        "nv-metadata",
        "nv-conductor",
        "nv-scheduler",
        "nv-novncproxy",
        "cn-api",
        "cn-scheduler",
        "cn-volume",
    ] {
        assert!(deps.get_opt(d).await?.is_some(), "Deployment {d}");
    }
    for (s, port) in [
        ("nv-api", 8774),
        ("nv-metadata", 8775),
        ("nv-novncproxy", 6080),
        ("cn-api", 8776),
    ] {
        let svc = services.get(s).await?;
        let spec = svc.spec.unwrap_or_default();
        assert_eq!(spec.ports.unwrap_or_default()[0].port, port, "{s}");
    }
    let conf = secret_text(&secrets.get("nv-nova-config").await?, "nova.conf");
    let db_pw = secret_text(&secrets.get("nv-nova-db").await?, "password");
    assert!(
        conf.contains(&format!(
            "connection = mysql+pymysql://nova:{db_pw}@127.0.0.1:13306/nova_api"
        )),
        "{conf}"
    );
    assert!(
        conf.contains(&format!(
            "connection = mysql+pymysql://nova:{db_pw}@127.0.0.1:13306/nova?"
        )),
        "{conf}"
    );
    assert!(
        conf.contains(&format!("endpoint_override = http://pl-api.{ns}.svc:8778")),
        "{conf}"
    );
    assert!(
        conf.contains("discover_hosts_in_cells_interval = 300"),
        "{conf}"
    );
    let md = secret_text(&secrets.get("nv-metadata-proxy").await?, "secret");
    assert!(md.len() >= 32);
    assert!(conf.contains(&format!("metadata_proxy_shared_secret = {md}")));
    let compute = secret_text(
        &secrets.get("nv-compute-config").await?,
        "nova-compute.conf",
    );
    assert!(
        compute.contains("compute_driver = libvirt.LibvirtDriver"),
        "{compute}"
    );
    assert!(compute.contains("transport_url = rabbit://"), "{compute}");
    assert!(
        !compute.contains("[api_database]") && !compute.contains("[database]"),
        "{compute}"
    );
    let cconf = secret_text(&secrets.get("cn-cinder-config").await?, "cinder.conf");
    assert!(cconf.contains("enabled_backends = ceph"), "{cconf}");
    assert!(cconf.contains("rbd_pool = volumes"), "{cconf}");
    assert!(
        secret_text(&secrets.get("cn-cinder-config").await?, "ceph-ceph.conf")
            .contains("keyring = /etc/cinder/keyrings/ceph/keyring")
    );
    let su = jobs
        .list(&ListParams::default().labels(
            "app.kubernetes.io/name=cinder,controlplane.sunet.se/step=service-user-volumev3",
        ))
        .await?
        .items;
    assert_eq!(job_env(&su[0], "SERVICE_TYPE").as_deref(), Some("volumev3"));
    for name in ["nv-bad", "cn-bad"] {
        let any = jobs
            .list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={name}")))
            .await?
            .items;
        assert!(any.is_empty(), "no Job of {name}");
    }
    for s in [
        "nv-bad-nova-db",
        "nv-bad-metadata-proxy",
        "cn-bad-cinder-db",
    ] {
        assert!(secrets.get_opt(s).await?.is_none(), "no Secret {s}");
    }
    let log_text = std::fs::read_to_string(&log_path)?;
    assert!(
        !log_text.contains(&db_pw) && !log_text.contains(&md),
        "secrets never in the log"
    );

    // 3. A [scheduler] override: no Job runs again; every Nova Deployment rolls.
    let before = service_jobs(&jobs, "nova").await?;
    let h0 = config_hash(&deps.get("nv-conductor").await?);
    let mut n2 = nova.clone();
    n2["spec"]["configOverrides"] = json!({"scheduler": {"max_attempts": "5"}});
    apply(&nv_api, &n2).await?;
    let h1 = rolled(&nv_api, &deps, "nv", "nv-conductor", &h0).await?;
    let after = service_jobs(&jobs, "nova").await?;
    assert_eq!(
        new_steps(&before, &after, "nv-"),
        BTreeSet::new(),
        "{before:?} → {after:?}"
    );

    // 4. A [database] override: exactly db-sync and the online migrations run again (not the
    //    API database's sync, not the cell mapping).
    let before = after;
    n2["spec"]["configOverrides"] =
        json!({"scheduler": {"max_attempts": "5"}, "database": {"max_pool_size": "10"}});
    apply(&nv_api, &n2).await?;
    let h2 = rolled(&nv_api, &deps, "nv", "nv-conductor", &h1).await?;
    let after = service_jobs(&jobs, "nova").await?;
    assert_eq!(
        new_steps(&before, &after, "nv-"),
        BTreeSet::from(["db-sync".to_string(), "online-data-migrations".to_string()]),
        "{before:?} → {after:?}"
    );

    // 5. An [api_database] override with api-db-sync failing twice: retried under new names,
    //    Degraded with the Job's reason in status, then it succeeds and Nova recovers; the
    //    steps whose inputs include [api_database] run again, the database Jobs do not.
    if let Ok(mut k) = kubelet.lock() {
        k.fail_steps.insert("api-db-sync".into());
    }
    let before = after;
    n2["spec"]["configOverrides"]["api_database"] = json!({"max_pool_size": "10"});
    apply(&nv_api, &n2).await?;
    let degraded = wait_for(WAIT, POLL, "the failed api-db-sync in status", async || {
        let o = get(&nv_api, "nv").await?;
        let failed = kubelet
            .lock()
            .map(|k| {
                k.failed
                    .iter()
                    .filter(|j| j.starts_with("nv-api-db-sync-"))
                    .count()
            })
            .unwrap_or(0);
        Ok(match cond(&o, ct::DEGRADED) {
            Some((true, _, m)) if failed >= 2 && m.contains("BackoffLimitExceeded") => {
                Check::Done(o)
            }
            other => Check::Pending(format!("{other:?}, failed Jobs {failed}")),
        })
    })
    .await?;
    let rec = degraded["status"]["jobs"]
        .as_array()
        .and_then(|j| j.iter().find(|r| r["step"] == "api-db-sync"))
        .cloned()
        .unwrap_or_default();
    assert!(
        rec["lastFailure"]
            .as_str()
            .unwrap_or("")
            .contains("backoff limit"),
        "{rec}"
    );
    assert!(rec["attempts"].as_u64().unwrap_or(0) >= 2, "{rec}");
    if let Ok(mut k) = kubelet.lock() {
        k.fail_steps.clear();
    }
    rolled(&nv_api, &deps, "nv", "nv-conductor", &h2).await?;
    let o = get(&nv_api, "nv").await?;
    let rec = o["status"]["jobs"]
        .as_array()
        .and_then(|j| j.iter().find(|r| r["step"] == "api-db-sync"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(rec["succeeded"], true, "{rec}");
    let after = service_jobs(&jobs, "nova").await?;
    assert_eq!(
        new_steps(&before, &after, "nv-"),
        BTreeSet::from([
            "api-db-sync".to_string(),
            "cell-setup".to_string(),
            "db-sync".to_string(),
            "online-data-migrations".to_string()
        ]),
        "{before:?} → {after:?}"
    );

    // 6. Cinder: an override of cinder.conf runs its db sync and online migrations again
    //    (their input is the whole file), never the database or catalog Jobs.
    let before = service_jobs(&jobs, "cinder").await?;
    let c0 = config_hash(&deps.get("cn-volume").await?);
    let mut c2 = cinder.clone();
    c2["spec"]["configOverrides"] = json!({"ceph": {"rbd_max_clone_depth": "3"}});
    apply(&cn_api, &c2).await?;
    rolled(&cn_api, &deps, "cn", "cn-volume", &c0).await?;
    let after = service_jobs(&jobs, "cinder").await?;
    assert_eq!(
        new_steps(&before, &after, "cn-"),
        BTreeSet::from(["db-sync".to_string(), "online-data-migrations".to_string()]),
        "{before:?} → {after:?}"
    );

    cm.abort();
    let nss: Api<Namespace> = Api::all(client.clone());
    let _ = nss.delete(&ns, &Default::default()).await;
    mariadb(&format!("DROP USER IF EXISTS '{admin_user}'@'127.0.0.1'"))?;
    Ok(())
}
