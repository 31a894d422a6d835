//! End to end: pod volumes on the Zun virtual kubelet (`docs/virtual-kubelet.md#volumes`),
//! the binary against the suite's Kubernetes API (the emulator, or `E2E_KUBECONFIG`) and
//! the test cloud's real Zun. A ConfigMap, a Secret, a downwardAPI volume, a projected
//! service-account token and an emptyDir are files in the container, read with Zun's
//! exec; a ConfigMap change reaches the file. Without Zun (`ZUN_TENANT_CLOUD` unset) the
//! test says so and does nothing.

use crate::vk_common;

use std::time::Duration;

use e2e::wait::{Check, wait_for};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use kube::api::{Api, Patch, PatchParams, PostParams};
use openstack::container::Container;
use serde_json::json;
use vk_common::{Case, POLL, Vk, case, phase};

#[tokio::test]
async fn config_map_secret_downward_token_and_empty_dir_are_files() -> anyhow::Result<()> {
    let Some(c) = case("vk-volumes").await? else {
        return Ok(());
    };
    c.guarded(body(&c)).await
}

async fn exec(c: &Case, id: &str, script: &str) -> anyhow::Result<String> {
    let out = c
        .zun
        .exec(id, &["sh".into(), "-c".into(), script.into()])
        .await?;
    anyhow::ensure!(
        out.exit_code == Some(0),
        "{script:?} exited {:?}: {}",
        out.exit_code,
        out.output
    );
    Ok(out.output)
}

async fn body(c: &Case) -> anyhow::Result<()> {
    let pp = PostParams::default();
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), &c.ns);
    cms.create(
        &pp,
        &serde_json::from_value(json!({"metadata": {"name": "app"},
            "data": {"greeting": "hello-1", "nested.conf": "a=b"}}))?,
    )
    .await?;
    Api::<Secret>::namespaced(c.client.clone(), &c.ns)
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "db"},
                "stringData": {"password": "s3cret"}}))?,
        )
        .await?;
    // A real cluster makes `default` itself; the emulator does not.
    match Api::<ServiceAccount>::namespaced(c.client.clone(), &c.ns)
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "default"}}))?,
        )
        .await
    {
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        other => {
            other?;
        }
    }
    let vk = Vk::start(&c.target, &c.z, &c.node)?;
    let pod = c
        .create(
            "vols",
            json!({
                "terminationGracePeriodSeconds": 2,
                "volumes": [
                    {"name": "cfg", "configMap": {"name": "app"}},
                    {"name": "sec", "secret": {"secretName": "db", "defaultMode": 0o400}},
                    {"name": "info", "downwardAPI": {"items": [
                        {"path": "podname", "fieldRef": {"fieldPath": "metadata.name"}}]}},
                    {"name": "kube-api-access-test", "projected": {"sources": [
                        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}},
                    {"name": "scratch", "emptyDir": {}}
                ],
                "containers": [{"name": "c", "image": "busybox",
                    // Proves the files exist before the process starts.
                    "command": ["sh", "-c", "cat /etc/app/greeting > /scratch/at-start; sleep 3600"],
                    "volumeMounts": [
                        {"name": "cfg", "mountPath": "/etc/app"},
                        {"name": "sec", "mountPath": "/etc/db", "readOnly": true},
                        {"name": "info", "mountPath": "/etc/info"},
                        {"name": "kube-api-access-test", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true},
                        {"name": "scratch", "mountPath": "/scratch"}]}]
            }),
        )
        .await?;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    c.wait_pod("vols", "the pod with volumes to run", &vk, |s| {
        phase(s) == "Running"
    })
    .await?;
    let zc = c.containers_of(&uid).await?;
    anyhow::ensure!(zc.len() == 1, "one Zun container: {zc:?}");
    let id = zc[0].uuid.clone();

    let at_start = exec(c, &id, "cat /scratch/at-start").await?;
    assert_eq!(
        at_start.trim(),
        "hello-1",
        "the ConfigMap file before start"
    );
    assert_eq!(
        exec(c, &id, "cat /etc/app/greeting").await?.trim(),
        "hello-1"
    );
    assert_eq!(
        exec(c, &id, "cat /etc/app/nested.conf").await?.trim(),
        "a=b"
    );
    assert_eq!(exec(c, &id, "cat /etc/db/password").await?.trim(), "s3cret");
    // The Secret's defaultMode on the file the ..data link leads to.
    assert_eq!(
        exec(c, &id, "stat -L -c %a /etc/db/password").await?.trim(),
        "400"
    );
    assert_eq!(exec(c, &id, "cat /etc/info/podname").await?.trim(), "vols");
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    assert_eq!(
        exec(c, &id, &format!("cat {sa}/namespace")).await?.trim(),
        c.ns
    );
    // emptyDir: writable.
    assert_eq!(
        exec(c, &id, "echo w > /scratch/f && cat /scratch/f")
            .await?
            .trim(),
        "w"
    );
    // The token is one the API server issued for the pod's ServiceAccount.
    let token = exec(c, &id, &format!("cat {sa}/token")).await?;
    let review = Api::<TokenReview>::all(c.client.clone())
        .create(
            &pp,
            &TokenReview {
                spec: TokenReviewSpec {
                    token: token.trim().to_string(),
                    audiences: None,
                },
                ..Default::default()
            },
        )
        .await?
        .status
        .unwrap_or_default();
    assert_eq!(review.authenticated, Some(true), "{review:?}");
    assert_eq!(
        review.user.and_then(|u| u.username),
        Some(format!("system:serviceaccount:{}:default", c.ns))
    );

    // A ConfigMap change reaches the file (the node reads the sources every 10 s).
    cms.patch(
        "app",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"greeting": "hello-2"}})),
    )
    .await?;
    let zun = &c.zun;
    wait_for(
        Duration::from_secs(60),
        POLL,
        "the ConfigMap change in the file",
        async || {
            let out = zun
                .exec(&id, &["cat".into(), "/etc/app/greeting".into()])
                .await?;
            Ok(if out.output.trim() == "hello-2" {
                Check::Done(())
            } else {
                Check::Pending(out.output)
            })
        },
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn init_container_files_in_an_empty_dir_reach_the_main_container() -> anyhow::Result<()> {
    let Some(c) = case("vk-handover").await? else {
        return Ok(());
    };
    c.guarded(handover_body(&c)).await
}

/// Two init containers and the app share an emptyDir the way Kubernetes users write it: the
/// first writes files (one in a subdirectory, one binary), the second adds one, the app reads
/// them all at its start, at its own mount path. A sidecar sharing it live is refused by name.
async fn handover_body(c: &Case) -> anyhow::Result<()> {
    let vk = Vk::start(&c.target, &c.z, &c.node)?;
    let pod = c
        .create(
            "handover",
            json!({
                "terminationGracePeriodSeconds": 2,
                "volumes": [{"name": "work", "emptyDir": {}}],
                "initContainers": [
                    {"name": "fetch", "image": "busybox",
                     "command": ["sh", "-c", "mkdir -p /out/sub && echo fetched > /out/a.txt && echo deep > /out/sub/b.txt && head -c 3000 /dev/urandom > /out/blob && md5sum /out/blob | cut -d' ' -f1 > /out/blob.md5"],
                     "volumeMounts": [{"name": "work", "mountPath": "/out"}]},
                    {"name": "render", "image": "busybox",
                     "command": ["sh", "-c", "cat /in/a.txt > /in/rendered.txt && echo rendered >> /in/rendered.txt"],
                     "volumeMounts": [{"name": "work", "mountPath": "/in"}]}],
                "containers": [{"name": "app", "image": "busybox",
                    // What the app saw at its start, before anything else ran in it.
                    "command": ["sh", "-c", "cd /srv/data && cat a.txt sub/b.txt rendered.txt > /tmp/seen; md5sum blob | cut -d' ' -f1 > /tmp/blob.md5; sleep 3600"],
                    "volumeMounts": [{"name": "work", "mountPath": "/srv/data"}]}]
            }),
        )
        .await?;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    c.wait_pod("handover", "the app after its init containers", &vk, |s| {
        phase(s) == "Running"
    })
    .await?;
    let app = c
        .containers_of(&uid)
        .await?
        .into_iter()
        .find(|z| {
            z.labels
                .get("virtual-kubelet.sunet.se/container")
                .map(String::as_str)
                == Some("app")
        })
        .ok_or_else(|| anyhow::anyhow!("no Zun container of the app"))?;
    let seen = wait_for(
        Duration::from_secs(30),
        POLL,
        "the app's start script",
        async || {
            let out = c
                .zun
                .exec(
                    &app.uuid,
                    &[
                        "cat".into(),
                        "/tmp/seen".into(),
                        "/tmp/blob.md5".into(),
                        "/srv/data/blob.md5".into(),
                    ],
                )
                .await?;
            Ok(if out.exit_code == Some(0) {
                Check::Done(out.output)
            } else {
                Check::Pending(out.output)
            })
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e:#}\n{}", vk.log_tail()))?;
    let lines: Vec<&str> = seen.lines().map(str::trim).collect();
    assert_eq!(
        &lines[..4],
        ["fetched", "deep", "fetched", "rendered"],
        "the app read both init containers' files at its start: {seen:?}"
    );
    assert_eq!(
        lines[4], lines[5],
        "the binary file arrived byte for byte: {seen:?}"
    );

    // Live sharing between two running containers stays refused, naming the field.
    c.create(
        "sidecar",
        json!({
            "volumes": [{"name": "logs", "emptyDir": {}}],
            "containers": [
                {"name": "app", "image": "busybox", "command": ["sleep", "3600"],
                 "volumeMounts": [{"name": "logs", "mountPath": "/var/log/app"}]},
                {"name": "shipper", "image": "busybox", "command": ["sleep", "3600"],
                 "volumeMounts": [{"name": "logs", "mountPath": "/logs"}]}]
        }),
    )
    .await?;
    let s = c
        .wait_pod("sidecar", "the sidecar pod refused", &vk, |s| {
            phase(s) == "Failed"
        })
        .await?;
    let msg = s.message.clone().unwrap_or_default();
    assert_eq!(s.reason.as_deref(), Some("ProviderFailed"), "{s:?}");
    assert!(
        msg.starts_with("spec.volumes[0].emptyDir: ") && msg.contains("app, shipper"),
        "{msg}"
    );
    Ok(())
}
