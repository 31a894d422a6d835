//! The runtime against the Kubernetes API emulator with a provider whose pass never ends for
//! one pod: the other pods' statuses, the next passes and the node's status go on.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, Pod, PodStatus};
use kube::api::{Api, PostParams};
use kube_emulator::{Emulator, EmulatorOptions};
use tokio_util::sync::CancellationToken;
use vk_runtime::node::Identity;
use vk_runtime::provider::{Condition, NodeState, Objects, PodUpdate, Provider, ProviderError};
use vk_runtime::{NodeConfig, OnShutdown};

/// Its first pass hands over every pod's update but the `stuck` pod's, then never ends (a
/// backend call without an answer); later passes leave the `stuck` pod to it, as a provider
/// that claims its pods does.
#[derive(Default)]
struct Stalls {
    hung: AtomicBool,
    passes: AtomicUsize,
}

#[async_trait]
impl Provider for Stalls {
    async fn node_state(&self) -> NodeState {
        NodeState {
            conditions: vec![Condition::new("Ready", true, "KubeletReady", "ok")],
            ..Default::default()
        }
    }

    async fn sync(
        &self,
        _pods: &[Pod],
        _objects: &dyn Objects,
        _complete: bool,
    ) -> Result<Vec<PodUpdate>, ProviderError> {
        unreachable!("the runtime calls sync_each")
    }

    async fn sync_each(
        &self,
        pods: &[Pod],
        _objects: &dyn Objects,
        _complete: bool,
        emit: &(dyn Fn(PodUpdate) + Send + Sync),
    ) -> Result<(), ProviderError> {
        let pass = self.passes.fetch_add(1, Ordering::SeqCst) + 1;
        let mut hang = false;
        for p in pods {
            if p.metadata.name.as_deref() == Some("stuck") {
                hang = !self.hung.swap(true, Ordering::SeqCst);
                continue;
            }
            emit(PodUpdate {
                namespace: p.metadata.namespace.clone().unwrap_or_default(),
                name: p.metadata.name.clone().unwrap_or_default(),
                uid: p.metadata.uid.clone().unwrap_or_default(),
                status: Some(PodStatus {
                    phase: Some("Running".into()),
                    message: Some(format!("pass {pass}")),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        if hang {
            std::future::pending::<()>().await;
        }
        Ok(())
    }

    fn passes_may_overlap(&self) -> bool {
        true
    }
}

fn config() -> NodeConfig {
    NodeConfig {
        identity: Identity {
            name: "vk-slow".into(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            kubelet_port: 10250,
            version: "v1.36.0-vk-test".into(),
            os: "linux".into(),
            arch: "amd64".into(),
            internal_ip: "192.0.2.10".into(),
            hostname: None,
        },
        lease_duration_s: 40,
        lease_renew: Duration::from_millis(300),
        status_interval: Duration::from_millis(200),
        // Written every pass: its heartbeat shows the status loop going on.
        status_max_age: Duration::from_millis(200),
        poll_interval: Duration::from_millis(200),
        on_shutdown: OnShutdown::NotReady,
    }
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"nodeName": "vk-slow", "containers": [{"name": "c", "image": "busybox"}]}
    }))
    .unwrap()
}

/// Polls `check` every 100 ms for 20 s; panics with `what` when it never holds.
async fn eventually<F: Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    for _ in 0..200 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn heartbeat(nodes: &Api<Node>) -> Option<String> {
    let n = nodes.get_opt("vk-slow").await.ok()??;
    n.status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == "Ready")?
        .last_heartbeat_time
        .map(|t| t.0.to_string())
}

#[tokio::test]
async fn a_pass_that_never_ends_holds_back_neither_other_pods_nor_the_node() {
    let emu = Emulator::start(EmulatorOptions::default()).await.unwrap();
    let client = emu.client().await.unwrap();
    let provider = Arc::new(Stalls::default());
    let token = CancellationToken::new();
    let task = tokio::spawn(vk_runtime::run(
        client.clone(),
        config(),
        provider.clone(),
        token.clone(),
    ));
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("stuck"))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("ok"))
        .await
        .unwrap();
    let message = |p: &Pod| p.status.as_ref().and_then(|s| s.message.clone());
    // The pass that hangs hands the other pod's update over before it does.
    eventually("the other pod's status", || async {
        pods.get("ok").await.is_ok_and(|p| message(&p).is_some())
    })
    .await;
    let nodes: Api<Node> = Api::all(client.clone());
    let before = heartbeat(&nodes).await;
    let seen = message(&pods.get("ok").await.unwrap());
    // Later passes run while the first still hangs, and the node's status is still written.
    eventually("a later pass's status", || async {
        pods.get("ok")
            .await
            .is_ok_and(|p| message(&p) != seen && provider.passes.load(Ordering::SeqCst) >= 3)
    })
    .await;
    eventually("the node's heartbeat", || async {
        heartbeat(&nodes).await != before
    })
    .await;
    assert!(provider.hung.load(Ordering::SeqCst));
    let stuck = pods.get("stuck").await.unwrap();
    assert_eq!(message(&stuck), None, "the stuck pod's pass never ended");
    token.cancel();
    task.await.unwrap().unwrap();
}
