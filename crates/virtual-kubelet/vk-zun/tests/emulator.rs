//! The runtime and the Zun provider together against the Kubernetes API
//! emulator, with the in-memory Zun: the Node, its Lease, a pod's life from
//! bound to Running to gracefully deleted, Events, and shutdown.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use e2e::wait::{Check, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube_emulator::{Emulator, EmulatorOptions};
use openstack::fake::FakeZun;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use vk_runtime::node::Identity;
use vk_runtime::{NodeConfig, OnShutdown};
use vk_zun::{Config, UnlimitedCapacity, ZunProvider};

const T: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(100);

fn node_config(name: &str, on_shutdown: OnShutdown) -> NodeConfig {
    NodeConfig {
        identity: Identity {
            name: name.into(),
            labels: BTreeMap::new(),
            taints: vec![k8s_openapi::api::core::v1::Taint {
                key: "virtual-kubelet.io/provider".into(),
                value: Some("openstack".into()),
                effect: "NoSchedule".into(),
                ..Default::default()
            }],
            kubelet_port: 10250,
            version: "v1.36.0-vk-openstack-zun-test".into(),
            os: "linux".into(),
            arch: "amd64".into(),
            internal_ip: "192.0.2.10".into(),
            hostname: None,
        },
        lease_duration_s: 40,
        lease_renew: Duration::from_millis(300),
        status_interval: Duration::from_millis(300),
        status_max_age: Duration::from_secs(60),
        poll_interval: Duration::from_millis(200),
        on_shutdown,
    }
}

fn seed_pod(node: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "myapp-pod", "labels": {"app": "myapp"}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 5,
            "tolerations": [{"key": "virtual-kubelet.io/provider", "operator": "Equal", "value": "openstack", "effect": "NoSchedule"}],
            "containers": [{"name": "myapp-container", "image": "busybox",
                            "command": ["sh", "-c", "echo Hello Kubernetes! && sleep 3600"]}]
        }
    }))
    .unwrap()
}

#[tokio::test]
async fn node_pod_lifecycle_and_shutdown() -> anyhow::Result<()> {
    let emu = Emulator::start(EmulatorOptions::default()).await?;
    let client = emu.client().await?;
    let zun = FakeZun::new();
    let provider = Arc::new(ZunProvider::new(
        Arc::new(zun.clone()),
        Config {
            node_name: "vk-test".into(),
            host_ip: "192.0.2.10".into(),
            ..Default::default()
        },
        Some("project".into()),
        UnlimitedCapacity::default(),
    ));
    let token = CancellationToken::new();
    let task = tokio::spawn(vk_runtime::run(
        client.clone(),
        node_config("vk-test", OnShutdown::NotReady),
        provider,
        token.clone(),
    ));

    let nodes: Api<Node> = Api::all(client.clone());
    let node = wait_for(T, POLL, "the node to be Ready", async || {
        let n = nodes.get_opt("vk-test").await?;
        let ready = n.as_ref().and_then(|n| {
            n.status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == "Ready")
                .cloned()
        });
        Ok(match (n, ready) {
            (Some(n), Some(r)) if r.status == "True" => Check::Done(n),
            (n, _) => Check::Pending(format!("{:?}", n.map(|n| n.status))),
        })
    })
    .await?;
    let labels = node.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels["type"], "virtual-kubelet");
    assert_eq!(labels["kubernetes.io/role"], "agent");
    assert_eq!(labels["topology.kubernetes.io/zone"], "nova");
    let status = node.status.clone().unwrap();
    assert_eq!(
        status.capacity.as_ref().unwrap()["pods"].0,
        "40",
        "from the Zun quota"
    );
    assert_eq!(
        status
            .daemon_endpoints
            .unwrap()
            .kubelet_endpoint
            .unwrap()
            .port,
        10250
    );
    assert!(
        status
            .node_info
            .unwrap()
            .kubelet_version
            .contains("vk-openstack-zun")
    );
    let types: Vec<String> = status
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| c.type_)
        .collect();
    for t in [
        "Ready",
        "MemoryPressure",
        "DiskPressure",
        "PIDPressure",
        "NetworkUnavailable",
    ] {
        assert!(types.contains(&t.to_string()), "{t} in {types:?}");
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let first = wait_for(T, POLL, "the node lease", async || {
        Ok(match leases.get_opt("vk-test").await? {
            Some(l) => Check::Done(l),
            None => Check::Pending("no lease".into()),
        })
    })
    .await?;
    let first_renew = first.spec.as_ref().and_then(|s| s.renew_time.clone());
    wait_for(T, POLL, "the lease to be renewed", async || {
        let l = leases.get("vk-test").await?;
        let renew = l.spec.as_ref().and_then(|s| s.renew_time.clone());
        Ok(if renew != first_renew {
            Check::Done(())
        } else {
            Check::Pending(format!("{renew:?}"))
        })
    })
    .await?;

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &seed_pod("vk-test"))
        .await?;
    let running = wait_for(T, POLL, "the pod to run", async || {
        let p = pods.get("myapp-pod").await?;
        let phase = p.status.as_ref().and_then(|s| s.phase.clone());
        Ok(if phase.as_deref() == Some("Running") {
            Check::Done(p)
        } else {
            Check::Pending(format!("{:?}", p.status))
        })
    })
    .await?;
    let st = running.status.unwrap();
    assert!(st.pod_ip.is_some());
    assert_eq!(st.host_ip.as_deref(), Some("192.0.2.10"));
    let cs = &st.container_statuses.unwrap()[0];
    assert!(cs.container_id.as_deref().unwrap().starts_with("zun://"));
    assert!(cs.ready);
    assert_eq!(zun.containers().len(), 1);
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let evs = events.list(&ListParams::default()).await?;
    assert!(
        evs.items
            .iter()
            .any(|e| e.reason.as_deref() == Some("Created")
                && e.involved_object.name.as_deref() == Some("myapp-pod"))
    );

    // Graceful deletion: the pod waits for the node, which stops and deletes
    // the container and then removes the pod.
    pods.delete("myapp-pod", &DeleteParams::default()).await?;
    wait_for(T, POLL, "the pod to be removed by the node", async || {
        Ok(match pods.get_opt("myapp-pod").await? {
            None => Check::Done(()),
            Some(p) => Check::Pending(format!(
                "deletionTimestamp {:?}",
                p.metadata.deletion_timestamp
            )),
        })
    })
    .await?;
    assert!(zun.containers().is_empty());
    assert_eq!(zun.calls("stop_container"), 1);

    token.cancel();
    task.await??;
    let n = nodes.get("vk-test").await?;
    let ready = n
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason.as_deref(), Some("KubeletNotReady"));
    Ok(())
}

#[tokio::test]
async fn unsupported_pod_fails_with_provider_failed() -> anyhow::Result<()> {
    let emu = Emulator::start(EmulatorOptions::default()).await?;
    let client = emu.client().await?;
    let zun = FakeZun::new();
    let provider = Arc::new(ZunProvider::new(
        Arc::new(zun.clone()),
        Config {
            node_name: "vk-2".into(),
            ..Default::default()
        },
        None,
        UnlimitedCapacity::default(),
    ));
    let token = CancellationToken::new();
    let task = tokio::spawn(vk_runtime::run(
        client.clone(),
        node_config("vk-2", OnShutdown::Delete),
        provider,
        token.clone(),
    ));
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut p = seed_pod("vk-2");
    p.metadata.name = Some("privileged".into());
    p.spec.as_mut().unwrap().containers[0].security_context =
        Some(serde_json::from_value(json!({"privileged": true}))?);
    pods.create(&PostParams::default(), &p).await?;
    let st = wait_for(T, POLL, "the pod to fail", async || {
        let p = pods.get("privileged").await?;
        let s = p.status.clone().unwrap_or_default();
        Ok(if s.phase.as_deref() == Some("Failed") {
            Check::Done(s)
        } else {
            Check::Pending(format!("{s:?}"))
        })
    })
    .await?;
    assert_eq!(st.reason.as_deref(), Some("ProviderFailed"));
    assert!(
        st.message
            .unwrap()
            .contains("spec.containers[0].securityContext.privileged")
    );
    assert_eq!(zun.calls("create_container"), 0);
    token.cancel();
    task.await??;
    let nodes: Api<Node> = Api::all(client.clone());
    assert!(
        nodes.get_opt("vk-2").await?.is_none(),
        "--on-shutdown delete removes the node"
    );
    Ok(())
}

/// The Ready condition's `lastHeartbeatTime` of node `name`.
async fn heartbeat(nodes: &Api<Node>, name: &str) -> anyhow::Result<Option<String>> {
    let n = nodes.get_opt(name).await?;
    Ok(n.and_then(|n| {
        n.status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "Ready")?
            .last_heartbeat_time
            .map(|t| t.0.to_string())
    }))
}

/// A pod whose Zun create never answers (a zun-api queueing it behind something that does not
/// end) holds back neither the node's status nor any other pod: their passes go on, and the
/// other pod runs, while the stuck pod's pass still waits within its call deadline.
#[tokio::test]
async fn a_hung_zun_call_holds_back_neither_the_node_nor_the_other_pods() -> anyhow::Result<()> {
    let emu = Emulator::start(EmulatorOptions::default()).await?;
    let client = emu.client().await?;
    let zun = FakeZun::new();
    let provider = Arc::new(ZunProvider::new(
        Arc::new(zun.clone()),
        Config {
            node_name: "vk-hung".into(),
            host_ip: "192.0.2.10".into(),
            ..Default::default()
        },
        Some("project".into()),
        UnlimitedCapacity::default(),
    ));
    let token = CancellationToken::new();
    let mut cfg = node_config("vk-hung", OnShutdown::NotReady);
    // The status is written every pass even when unchanged, so its heartbeat shows the
    // status loop going on.
    cfg.status_max_age = Duration::from_millis(300);
    let task = tokio::spawn(vk_runtime::run(
        client.clone(),
        cfg,
        provider,
        token.clone(),
    ));
    let nodes: Api<Node> = Api::all(client.clone());
    wait_for(T, POLL, "the node", async || {
        Ok(match heartbeat(&nodes, "vk-hung").await? {
            Some(_) => Check::Done(()),
            None => Check::Pending("no node status yet".into()),
        })
    })
    .await?;

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut stuck = seed_pod("vk-hung");
    stuck.metadata.name = Some("stuck".into());
    let stuck = pods.create(&PostParams::default(), &stuck).await?;
    zun.hang_creates_labelled(
        vk_zun::labels::POD_UID,
        stuck.metadata.uid.as_deref().unwrap_or_default(),
    );
    wait_for(T, POLL, "the stuck pod's create to be sent", async || {
        Ok(if zun.calls("create_container") >= 1 {
            Check::Done(())
        } else {
            Check::Pending("no create yet".into())
        })
    })
    .await?;
    let before = heartbeat(&nodes, "vk-hung").await?;
    pods.create(&PostParams::default(), &seed_pod("vk-hung"))
        .await?;
    wait_for(T, POLL, "the other pod to run", async || {
        let p = pods.get("myapp-pod").await?;
        let phase = p.status.as_ref().and_then(|s| s.phase.clone());
        Ok(if phase.as_deref() == Some("Running") {
            Check::Done(())
        } else {
            Check::Pending(format!("{:?}", p.status))
        })
    })
    .await?;
    wait_for(T, POLL, "the node's heartbeat to go on", async || {
        let now = heartbeat(&nodes, "vk-hung").await?;
        Ok(if now != before {
            Check::Done(())
        } else {
            Check::Pending(format!("{now:?}"))
        })
    })
    .await?;
    assert_eq!(
        zun.calls("create_container"),
        2,
        "the stuck pod's create is sent once, while its pass waits"
    );
    token.cancel();
    task.await??;
    Ok(())
}
