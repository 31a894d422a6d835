//! End to end: a Keystone whose API pods crash-loop is `Degraded`, naming the container, its
//! pod and the last termination message (masked and cut to one line), not `Reconciling` for
//! ever; a Deployment past its progress deadline with pods that run but never become ready is
//! `Degraded ProgressDeadlineExceeded` naming the container; once the pods run and the
//! Deployment is available, Keystone is Ready again. The test plays the controller manager for
//! the Jobs and writes the API Deployment's status and its pod's status as the Deployment
//! controller and a kubelet would (`Progressing=False ProgressDeadlineExceeded`, the container's
//! `waiting: CrashLoopBackOff` and `lastState.terminated`).

use crate::cp_common;

use std::sync::{Arc, Mutex};

use controlplane_api::condition_types as ct;
use cp_common::*;
use e2e::{Check, Target, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// The Deployment's status as its controller writes it.
async fn deployment_status(
    deps: &Api<Deployment>,
    name: &str,
    status: Value,
) -> anyhow::Result<()> {
    let d = deps.get(name).await?;
    let mut status = status;
    status["observedGeneration"] = json!(d.metadata.generation.unwrap_or(0));
    deps.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await?;
    Ok(())
}

/// The pod's status as a kubelet writes it.
async fn pod_status(pods: &Api<Pod>, name: &str, status: Value) -> anyhow::Result<()> {
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await?;
    Ok(())
}

/// Waits until the Keystone shows condition `type_` True with `reason`: its message.
async fn wait_reason(
    api: &Api<kube::api::DynamicObject>,
    name: &str,
    type_: &str,
    reason: &str,
) -> anyhow::Result<String> {
    wait_for(
        WAIT,
        POLL,
        &format!("{name} {type_} {reason}"),
        async || {
            let o = get(api, name).await?;
            Ok(match cond(&o, type_) {
                Some((true, r, m)) if r == reason => Check::Done(m),
                _ => Check::Pending(format!("{}", o["status"]["conditions"])),
            })
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_looping_pods_make_the_service_degraded_naming_the_container() -> anyhow::Result<()> {
    let target = Target::from_env().await?;
    let client = target.client().await?;
    install_crds(&client).await?;
    let ns = create_namespace(&client).await?;
    let (admin_user, admin_pw) = db_admin_user()?;
    let (ks_password, ks_url) = test_cloud_keystone()?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    for s in [
        secret(
            "db-admin",
            &[("username", &admin_user), ("password", &admin_pw)],
        ),
        // The test cloud's Keystone stands in for the pods (the token probe reaches it).
        secret("ks-keystone-admin", &[("password", &ks_password)]),
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
    let keystones = dyn_api(&client, &ns, "Keystone", "keystones");
    apply(
        &keystones,
        &json!({"apiVersion": API, "kind": "Keystone", "metadata": {"name": "ks"},
            "spec": {"database": {"service": {"name": "db"}}}}),
    )
    .await?;
    let (_op, log_path, _) = start_operator(
        &target,
        &ns,
        &["--keystone-url".into(), format!("{ns}/ks={ks_url}")],
    )?;
    eprintln!("operator log: {}", log_path.display());
    let kubelet = Arc::new(Mutex::new(Kubelet::default()));
    if let Ok(mut k) = kubelet.lock() {
        k.hold_deployments.insert("ks-api".into());
    }
    let _cm = tokio::spawn(play_controller_manager(
        client.clone(),
        ns.clone(),
        kubelet.clone(),
    ));

    // The Jobs complete; the API Deployment is applied and waits for its pods.
    let deps: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let dep = wait_for(WAIT, POLL, "Deployment ks-api", async || {
        Ok(match deps.get_opt("ks-api").await? {
            Some(d) => Check::Done(d),
            None => Check::Pending("not applied yet".into()),
        })
    })
    .await?;
    deployment_status(
        &deps,
        "ks-api",
        json!({"replicas": 1, "updatedReplicas": 1, "unavailableReplicas": 1,
        "conditions": [{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
            "message": "ReplicaSet \"ks-api-5d8f\" is progressing."}]}),
    )
    .await?;
    let msg = wait_reason(&keystones, "ks", ct::RECONCILING, "RollingOut").await?;
    assert!(msg.contains("0/1 pods available"), "{msg}");

    // Its pod, created as the ReplicaSet controller would, crash-loops as a kubelet reports it.
    let template = dep.spec.template.clone();
    let mut meta = template.metadata.clone().unwrap_or_default();
    meta.name = Some("ks-api-5d8f-x7k2p".into());
    meta.namespace = Some(ns.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(
        &PostParams::default(),
        &Pod {
            metadata: meta,
            spec: template.spec.clone(),
            ..Pod::default()
        },
    )
    .await?;
    // The log's tail as FallbackToLogsOnError gives it: a traceback quoting a connection URL
    // with a password.
    let termination = "2026-12-06 08:12:01.001 1 ERROR keystone Traceback (most recent call last):\n\
        2026-12-06 08:12:01.001 1 ERROR keystone   File \"/opt/openstack/lib/python3/site-packages/oslo_db/sqlalchemy/engines.py\", line 142\n\
        2026-12-06 08:12:01.002 1 ERROR keystone oslo_db.exception.DBConnectionError: (pymysql.err.OperationalError) (2003, \"Can't connect to MySQL server\") mysql+pymysql://keystone:hunter2-not-shown@10.244.0.1:3306/keystone\n";
    let crash = json!({"phase": "Running", "containerStatuses": [{
        "name": "api", "image": "localhost/openstack-keystone:2026.1", "imageID": "", "ready": false,
        "restartCount": 4, "started": false,
        "state": {"waiting": {"reason": "CrashLoopBackOff",
            "message": "back-off 1m20s restarting failed container=api pod=ks-api-5d8f-x7k2p_ns"}},
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "message": termination,
            "startedAt": "2026-12-06T08:11:58Z", "finishedAt": "2026-12-06T08:12:01Z"}}}]});
    pod_status(&pods, "ks-api-5d8f-x7k2p", crash).await?;
    let msg = wait_reason(&keystones, "ks", ct::DEGRADED, "CrashLoopBackOff").await?;
    assert!(
        msg.starts_with(
            "Deployment ks-api: container api of pod ks-api-5d8f-x7k2p is in CrashLoopBackOff; \
             restarted 4 times, last exit code 1 (Error): "
        ),
        "{msg}"
    );
    assert!(
        msg.contains("oslo_db.exception.DBConnectionError")
            && msg.contains("mysql+pymysql://keystone:***@10.244.0.1:3306/keystone"),
        "{msg}"
    );
    assert!(!msg.contains("hunter2"), "a password in a condition: {msg}");
    let o = get(&keystones, "ks").await?;
    let ready = cond(&o, ct::READY).map(|(t, r, _)| (t, r));
    assert_eq!(ready, Some((false, "CrashLoopBackOff".to_string())));

    // Past the progress deadline with a container that runs but never becomes ready.
    deployment_status(&deps, "ks-api", json!({"replicas": 1, "updatedReplicas": 1, "unavailableReplicas": 1,
        "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
            "message": "ReplicaSet \"ks-api-5d8f\" has timed out progressing."},
            {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable",
            "message": "Deployment does not have minimum availability."}]})).await?;
    pod_status(&pods, "ks-api-5d8f-x7k2p", json!({"phase": "Running", "containerStatuses": [{
        "name": "api", "image": "localhost/openstack-keystone:2026.1", "imageID": "", "ready": false,
        "restartCount": 5, "started": true,
        "state": {"running": {"startedAt": "2026-12-06T08:14:00Z"}},
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "message": termination}}}]}))
    .await?;
    let msg = wait_reason(&keystones, "ks", ct::DEGRADED, "ProgressDeadlineExceeded").await?;
    assert!(
        msg.starts_with(
            "Deployment ks-api exceeded its progress deadline (ReplicaSet \"ks-api-5d8f\" has timed out progressing.); \
             container api of pod ks-api-5d8f-x7k2p is running but not ready; restarted 5 times"
        ),
        "{msg}"
    );
    assert!(!msg.contains("hunter2"), "{msg}");

    // The pod runs and the Deployment is available: Ready (the token probe answers).
    pod_status(
        &pods,
        "ks-api-5d8f-x7k2p",
        json!({"phase": "Running", "containerStatuses": [{
        "name": "api", "image": "localhost/openstack-keystone:2026.1", "imageID": "", "ready": true,
        "restartCount": 5, "started": true,
        "state": {"running": {"startedAt": "2026-12-06T08:14:00Z"}}}]}),
    )
    .await?;
    deployment_status(
        &deps,
        "ks-api",
        json!({"replicas": 1, "updatedReplicas": 1, "readyReplicas": 1,
        "availableReplicas": 1, "unavailableReplicas": 0,
        "conditions": [{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable",
            "message": "ReplicaSet \"ks-api-5d8f\" has successfully progressed."},
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
            "message": "Deployment has minimum availability."}]}),
    )
    .await?;
    let (_, msg) = wait_cond(&keystones, "ks", ct::READY, WAIT).await?;
    assert!(msg.contains("issued a token"), "{msg}");
    let o = get(&keystones, "ks").await?;
    assert_eq!(
        cond(&o, ct::DEGRADED).map(|(t, _, _)| t),
        Some(false),
        "{}",
        o["status"]
    );
    let _ = mariadb(&format!("DROP USER IF EXISTS '{admin_user}'@'127.0.0.1'"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_keystone_does_not_block_its_dependants() -> anyhow::Result<()> {
    let stage = compute_stage().await?;
    let (client, ns) = (stage.client.clone(), stage.ns.clone());
    let ks_api = dyn_api(&client, &ns, "Keystone", "keystones");
    let pl_api = dyn_api(&client, &ns, "Placement", "placements");
    let keystone = |replicas: i32| {
        json!({"apiVersion": API, "kind": "Keystone", "metadata": {"name": "ks"},
            "spec": {"database": {"service": {"name": "db"}}, "replicas": replicas}})
    };
    apply(&ks_api, &keystone(3)).await?;
    let (_op, log_path, _) = start_operator(
        &stage.target,
        &ns,
        &[
            "--controllers".into(),
            "external-service,keystone,placement".into(),
            "--keystone-url".into(),
            format!("{ns}/ks={}", stage.ks_url),
            "--api-url".into(),
            format!("placement/{ns}/pl=http://127.0.0.1:8778"),
        ],
    )?;
    eprintln!("operator log: {}", log_path.display());
    let _cm = tokio::spawn(play_controller_manager(
        client.clone(),
        ns.clone(),
        Arc::new(Mutex::new(Kubelet::default())),
    ));
    let (_, m) = wait_cond(&ks_api, "ks", ct::READY, WAIT).await?;
    assert!(m.starts_with("3/3 pods"), "{m}");
    wait_cond(&pl_api, "pl", ct::READY, WAIT).await?;
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), &ns);
    let blocked_events = async || -> anyhow::Result<usize> {
        Ok(events
            .list(&Default::default())
            .await?
            .items
            .iter()
            .filter(|e| {
                e.involved_object.kind.as_deref() == Some("Placement")
                    && e.reason.as_deref() == Some("Blocked")
            })
            .count())
    };
    let before = blocked_events().await?;

    // Watch Placement's conditions while Keystone is scaled from 3 to 1 (a new generation its
    // status observes a moment later, a rollout of its Deployment).
    let watch_api = pl_api.clone();
    let seen = tokio::spawn(async move {
        let mut seen = Vec::new();
        for _ in 0..200 {
            if let Ok(o) = get(&watch_api, "pl").await
                && let Some((true, r, m)) = cond(&o, ct::BLOCKED)
            {
                seen.push(format!("{r}: {m}"));
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        seen
    });
    apply(&ks_api, &keystone(1)).await?;
    let (_, m) = wait_cond(&ks_api, "ks", ct::READY, WAIT).await?;
    assert!(m.starts_with("1/1 pods"), "{m}");
    let seen = seen.await?;
    assert!(seen.is_empty(), "Placement turned Blocked: {seen:?}");
    let o = get(&pl_api, "pl").await?;
    assert_eq!(
        cond(&o, ct::READY).map(|c| c.0),
        Some(true),
        "{}",
        o["status"]
    );
    assert_eq!(
        blocked_events().await?,
        before,
        "no new Blocked Event on Placement"
    );
    let _ = mariadb(&format!(
        "DROP USER IF EXISTS '{}'@'127.0.0.1'",
        stage.admin_user
    ));
    Ok(())
}
