//! End to end: shutdown and restart of `openstack-operator virtual-kubelet` (a process) with
//! a pod running in the test cloud's real Zun. SIGTERM cordons the node (`spec.unschedulable`,
//! marked as ours by an annotation) and marks it NotReady, or, with
//! `--remove-node-on-shutdown`, deletes it; the pod's container keeps running in Zun. The
//! restarted process takes the pod back (same container, same restartCount, Running) and
//! uncordons only a node its own shutdown cordoned, without a single Zun write: its OpenStack
//! client counts every call by operation (`openstack_operator_openstack_api_calls_total`,
//! served on the kubelet port's `/metrics`), and the test reads those counters from the
//! restarted process. The kubelet port is reached with a token the emulator's TokenReview
//! knows (a real cluster, `E2E_KUBECONFIG`, has no such rules: the tests say so and stop).

use crate::vk_common;

use std::collections::BTreeMap;

use anyhow::Context;
use e2e::wait::{Check, wait_for};
use k8s_openapi::api::core::v1::{Node, PodStatus};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use kube_emulator::review::{AllowRule, AuthConfig, ReviewUser};
use serde_json::json;
use vk_common::{Case, LONG, POLL, Vk, case, main_state, phase};

const TOKEN: &str = "vk-shutdown-metrics";
const CORDONED_ON_SHUTDOWN: &str = vk_runtime::node::CORDONED_ON_SHUTDOWN;

/// Zun operations that only read (`crates/shared/openstack/src/adapter/container.rs`); every other
/// operation (create, start, stop, delete, put_archive, exec, resize...) writes.
const ZUN_READS: &[&str] = &[
    "list_containers",
    "get_container",
    "container_logs",
    "list_capsules",
    "get_capsule",
    "get_quota",
    "list_availability_zones",
    "list_services",
    "container_stats",
    "container_top",
];

/// Lets the test's token read the node's `/metrics`; `false` (and a message) on a real cluster.
fn allow_metrics(c: &Case) -> bool {
    let Some(emu) = c.target.emulator() else {
        eprintln!(
            "SKIPPED: the kubelet port's /metrics needs TokenReview rules, which only the emulator takes"
        );
        return false;
    };
    emu.set_auth(AuthConfig {
        tokens: [(
            TOKEN.to_string(),
            ReviewUser {
                username: "metrics-reader".into(),
                ..Default::default()
            },
        )]
        .into_iter()
        .collect(),
        rules: vec![AllowRule {
            subject: "metrics-reader".into(),
            verbs: vec!["get".into()],
            resource: "nodes".into(),
            subresource: "metrics".into(),
            name: String::new(),
        }],
    });
    true
}

/// The OpenStack calls the running process made, `(service, operation) -> count`, from its
/// `/metrics` (a fresh process starts at zero).
async fn openstack_calls(vk: &Vk) -> anyhow::Result<BTreeMap<(String, String), u64>> {
    let mut cfg = kube::Config::new(format!("https://127.0.0.1:{}", vk.kubelet_port).parse()?);
    // The node serves a self-signed certificate without --tls-cert-file.
    cfg.accept_invalid_certs = true;
    cfg.headers.push((
        http::header::AUTHORIZATION,
        format!("Bearer {TOKEN}").parse()?,
    ));
    let client = Client::try_from(cfg)?;
    let text = client
        .request_text(http::Request::get("/metrics").body(Vec::new())?)
        .await
        .context("reading the node's /metrics")?;
    Ok(parse_calls(&text))
}

/// `openstack_operator_openstack_api_calls_total{service=..,operation=..,status=..} n`,
/// summed over the status.
fn parse_calls(text: &str) -> BTreeMap<(String, String), u64> {
    let label = |labels: &str, key: &str| -> String {
        labels
            .split(',')
            .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
            .unwrap_or_default()
            .trim_matches('"')
            .to_string()
    };
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("openstack_operator_openstack_api_calls_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let n: f64 = value.trim().parse().unwrap_or(0.0);
        *out.entry((label(labels, "service"), label(labels, "operation")))
            .or_insert(0) += n as u64;
    }
    out
}

/// Waits until the restarted process has synced its pods with Zun at least `passes` times
/// (each pass lists the node's containers once), then returns its calls.
async fn after_syncs(vk: &Vk, passes: u64) -> anyhow::Result<BTreeMap<(String, String), u64>> {
    wait_for(
        LONG,
        POLL,
        "the restarted node to sync with Zun",
        async || {
            let calls = openstack_calls(vk).await?;
            let lists = calls
                .get(&("container".to_string(), "list_containers".to_string()))
                .copied()
                .unwrap_or(0);
            Ok(if lists >= passes {
                Check::Done(calls)
            } else {
                Check::Pending(format!("{calls:?}"))
            })
        },
    )
    .await
    .with_context(|| vk.log_tail())
}

/// The Zun calls among `calls` that write.
fn zun_writes(calls: &BTreeMap<(String, String), u64>) -> BTreeMap<String, u64> {
    calls
        .iter()
        .filter(|((svc, op), _)| svc == "container" && !ZUN_READS.contains(&op.as_str()))
        .map(|((_, op), n)| (op.clone(), *n))
        .collect()
}

fn ready_condition(n: &Node) -> String {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|l| l.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.clone())
        .unwrap_or_default()
}

fn cordoned(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

fn marked(n: &Node) -> bool {
    n.annotations().contains_key(CORDONED_ON_SHUTDOWN)
}

/// A pod that runs until deleted, Running, and its container's id and restart count.
async fn running_pod(c: &Case, vk: &Vk) -> anyhow::Result<(String, String, i32)> {
    let pod = c
        .create(
            "keeps",
            json!({"containers": [{"name": "c", "image": "busybox",
                    "command": ["sh", "-c", "echo started; exec sleep 3600"]}]}),
        )
        .await?;
    let uid = pod.uid().context("pod without uid")?;
    let st = c
        .wait_pod("keeps", "the pod to run", vk, |s| {
            phase(s) == "Running" && main_state(s).container_id.is_some()
        })
        .await?;
    let m = main_state(&st);
    Ok((uid, m.container_id.unwrap_or_default(), m.restart_count))
}

/// After a restart: the pod Running on the same container with the same restart count.
async fn same_pod_running(
    c: &Case,
    vk: &Vk,
    container_id: &str,
    restarts: i32,
) -> anyhow::Result<PodStatus> {
    let st = c
        .wait_pod("keeps", "the pod to run after the restart", vk, |s| {
            phase(s) == "Running"
                && s.conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
        })
        .await?;
    let m = main_state(&st);
    assert_eq!(
        m.container_id.as_deref(),
        Some(container_id),
        "the same container"
    );
    assert_eq!(m.restart_count, restarts, "restartCount unchanged");
    Ok(st)
}

/// The pod's one Zun container is Running (checked in Zun, as the tenant).
async fn still_running_in_zun(c: &Case, uid: &str, container_id: &str) -> anyhow::Result<()> {
    let in_zun = c.containers_of(uid).await?;
    assert_eq!(in_zun.len(), 1, "one container: {in_zun:?}");
    assert_eq!(
        format!("zun://{}", in_zun[0].uuid),
        container_id,
        "the pod's container"
    );
    assert_eq!(in_zun[0].status, "Running", "left running on shutdown");
    Ok(())
}

#[tokio::test]
async fn sigterm_cordons_and_a_restart_takes_the_pod_back_without_a_zun_write() -> anyhow::Result<()>
{
    let Some(c) = case("vk-shutdown").await? else {
        return Ok(());
    };
    if !allow_metrics(&c) {
        c.cleanup().await;
        return Ok(());
    }
    c.guarded(cordon_body(&c)).await
}

async fn cordon_body(c: &Case) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(c.client.clone());
    let mut vk = Vk::start(&c.target, &c.z, &c.node)?;
    let (uid, container_id, restarts) = running_pod(c, &vk).await?;

    // SIGTERM: cordoned (marked as ours), NotReady; the container runs on in Zun.
    let started = std::time::Instant::now();
    let status = vk.terminate().await?;
    eprintln!("shutdown took {:?}", started.elapsed());
    assert!(status.success(), "{status:?}\n{}", vk.log_tail());
    let n = nodes.get(&c.node).await?;
    assert!(cordoned(&n), "cordoned on shutdown: {:?}", n.spec);
    assert!(marked(&n), "marked as cordoned by the shutdown");
    assert_eq!(ready_condition(&n), "False");
    still_running_in_zun(c, &uid, &container_id).await?;

    // Restart: uncordoned, Ready, the same pod Running, no Zun write.
    vk.spawn()?;
    let restart = std::time::Instant::now();
    wait_for(LONG, POLL, "the node uncordoned and Ready", async || {
        let n = nodes.get(&c.node).await?;
        Ok(
            if !cordoned(&n) && !marked(&n) && ready_condition(&n) == "True" {
                Check::Done(())
            } else {
                Check::Pending(format!("{:?} {:?}", n.spec, n.annotations()))
            },
        )
    })
    .await
    .with_context(|| vk.log_tail())?;
    same_pod_running(c, &vk, &container_id, restarts).await?;
    eprintln!("restart to pod Running: {:?}", restart.elapsed());
    let calls = after_syncs(&vk, 3).await?;
    eprintln!("OpenStack calls of the restarted process: {calls:?}");
    assert_eq!(
        zun_writes(&calls),
        BTreeMap::new(),
        "no Zun write after the restart"
    );
    still_running_in_zun(c, &uid, &container_id).await?;

    // An administrator's cordon is theirs: the shutdown adds no mark, the restart keeps it.
    nodes
        .patch(
            &c.node,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await?;
    let status = vk.terminate().await?;
    assert!(status.success(), "{status:?}\n{}", vk.log_tail());
    let n = nodes.get(&c.node).await?;
    assert!(
        cordoned(&n) && !marked(&n),
        "{:?} {:?}",
        n.spec,
        n.annotations()
    );
    vk.spawn()?;
    same_pod_running(c, &vk, &container_id, restarts).await?;
    wait_for(LONG, POLL, "the restarted node Ready", async || {
        let n = nodes.get(&c.node).await?;
        Ok(if ready_condition(&n) == "True" {
            Check::Done(n)
        } else {
            Check::Pending(format!("{:?}", n.status))
        })
    })
    .await
    .with_context(|| vk.log_tail())?;
    let calls = after_syncs(&vk, 3).await?;
    assert_eq!(zun_writes(&calls), BTreeMap::new(), "no Zun write");
    let n = nodes.get(&c.node).await?;
    assert!(cordoned(&n), "the administrator's cordon is kept");
    vk.terminate().await?;
    Ok(())
}

#[tokio::test]
async fn remove_node_on_shutdown_deletes_the_node_and_a_restart_takes_the_pod_back()
-> anyhow::Result<()> {
    let Some(c) = case("vk-remove").await? else {
        return Ok(());
    };
    if !allow_metrics(&c) {
        c.cleanup().await;
        return Ok(());
    }
    c.guarded(remove_body(&c)).await
}

async fn remove_body(c: &Case) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(c.client.clone());
    let mut vk = Vk::start_with(
        &c.target,
        &c.z,
        &c.node,
        &["--remove-node-on-shutdown".to_string()],
    )?;
    let (uid, container_id, restarts) = running_pod(c, &vk).await?;
    let status = vk.terminate().await?;
    assert!(status.success(), "{status:?}\n{}", vk.log_tail());
    assert!(
        nodes.get_opt(&c.node).await?.is_none(),
        "the Node is deleted on shutdown"
    );
    still_running_in_zun(c, &uid, &container_id).await?;

    vk.spawn()?;
    // The pod's status is still the one written before the shutdown: the node must be back
    // (and have synced, below) before it says anything.
    let n = wait_for(
        LONG,
        POLL,
        "the node registered again and Ready",
        async || {
            Ok(match nodes.get_opt(&c.node).await? {
                Some(n) if ready_condition(&n) == "True" => Check::Done(n),
                n => Check::Pending(format!("{:?}", n.and_then(|n| n.status))),
            })
        },
    )
    .await
    .with_context(|| vk.log_tail())?;
    assert!(
        !cordoned(&n) && !marked(&n),
        "registered again, schedulable"
    );
    same_pod_running(c, &vk, &container_id, restarts).await?;
    let calls = after_syncs(&vk, 3).await?;
    eprintln!("OpenStack calls of the restarted process: {calls:?}");
    assert_eq!(
        zun_writes(&calls),
        BTreeMap::new(),
        "no Zun write after the restart"
    );
    still_running_in_zun(c, &uid, &container_id).await?;
    vk.terminate().await?;
    Ok(())
}
