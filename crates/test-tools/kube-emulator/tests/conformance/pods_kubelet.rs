//! What a (virtual) kubelet relies on: graceful pod deletion, the pod status
//! subresource and field-selected pod watches.
//!
//! Graceful deletion follows `podStrategy.CheckGracefulDelete`
//! (`pkg/registry/core/pod/strategy.go`) and `BeforeDelete`
//! (`k8s.io/apiserver/pkg/registry/rest/delete.go`): a pod bound to a node is
//! not removed by a plain delete but gets `deletionTimestamp` and
//! `deletionGracePeriodSeconds` (the request's `gracePeriodSeconds`, else
//! `spec.terminationGracePeriodSeconds`, 30 by default); the kubelet removes
//! it with `gracePeriodSeconds=0` once its containers are gone. Unbound pods
//! and pods that already Succeeded/Failed go at once; a second delete may
//! shorten the period, never lengthen it.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};
use serde_json::json;

use crate::common::start;

fn pod(name: &str, node: Option<&str>, grace: Option<i64>) -> Pod {
    let mut spec = json!({"containers": [{"name": "c", "image": "busybox"}]});
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    if let Some(g) = grace {
        spec["terminationGracePeriodSeconds"] = json!(g);
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

#[tokio::test]
async fn bound_pod_waits_for_the_kubelet() {
    let env = start().await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let p = pods
        .create(&PostParams::default(), &pod("bound", Some("vk"), Some(45)))
        .await
        .unwrap();
    pods.delete("bound", &DeleteParams::default())
        .await
        .unwrap();
    let t = pods
        .get("bound")
        .await
        .expect("still there: the kubelet must delete it");
    assert_eq!(t.metadata.deletion_grace_period_seconds, Some(45));
    let ts = t.metadata.deletion_timestamp.clone().unwrap().0;
    let created = p.metadata.creation_timestamp.unwrap().0;
    assert!(
        ts >= created + jiff::SignedDuration::from_secs(44),
        "deletionTimestamp = now + grace"
    );
    // A longer period does not extend it; a shorter one shortens it.
    pods.delete(
        "bound",
        &DeleteParams {
            grace_period_seconds: Some(100),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        pods.get("bound")
            .await
            .unwrap()
            .metadata
            .deletion_grace_period_seconds,
        Some(45)
    );
    pods.delete(
        "bound",
        &DeleteParams {
            grace_period_seconds: Some(5),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        pods.get("bound")
            .await
            .unwrap()
            .metadata
            .deletion_grace_period_seconds,
        Some(5)
    );
    // The kubelet's final delete, with the pod's uid as precondition.
    let wrong = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some("not-the-uid".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let e = pods.delete("bound", &wrong).await.unwrap_err();
    assert!(matches!(e, kube::Error::Api(s) if s.code == 409));
    let right = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: t.metadata.uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    pods.delete("bound", &right).await.unwrap();
    assert!(pods.get_opt("bound").await.unwrap().is_none());
}

/// `shouldDeleteDuringUpdate` (`registry/generic/registry/store.go`): an update removes an
/// object only when it has no finalizers and its `deletionGracePeriodSeconds` is 0. A pod in its
/// grace period has none and stays through its kubelet's status writes and label changes; only
/// the kubelet's delete with period 0 removes it.
#[tokio::test]
async fn a_terminating_pod_stays_through_updates_until_the_kubelet_deletes_it() {
    let env = start().await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    pods.create(&PostParams::default(), &pod("term", Some("vk"), Some(30)))
        .await
        .unwrap();
    pods.delete("term", &DeleteParams::default()).await.unwrap();
    let mut t = pods.get("term").await.unwrap();
    t.status = Some(
        serde_json::from_value(json!({"phase": "Running", "conditions": [
            {"type": "Ready", "status": "False"}]}))
        .unwrap(),
    );
    let after = pods
        .replace_status("term", &PostParams::default(), &t)
        .await
        .expect("the kubelet's status write is accepted");
    assert!(after.metadata.deletion_timestamp.is_some());
    let t = pods
        .get("term")
        .await
        .expect("still there after the status write");
    assert_eq!(t.status.and_then(|s| s.phase).as_deref(), Some("Running"));
    let mut t = pods.get("term").await.unwrap();
    t.metadata
        .labels
        .get_or_insert_default()
        .insert("seen".into(), "yes".into());
    pods.replace("term", &PostParams::default(), &t)
        .await
        .unwrap();
    assert!(
        pods.get_opt("term").await.unwrap().is_some(),
        "still there after a metadata update"
    );
    pods.delete(
        "term",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(pods.get_opt("term").await.unwrap().is_none());
}

#[tokio::test]
async fn default_grace_is_thirty_seconds() {
    let env = start().await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    pods.create(&PostParams::default(), &pod("d", Some("vk"), None))
        .await
        .unwrap();
    pods.delete("d", &DeleteParams::default()).await.unwrap();
    assert_eq!(
        pods.get("d")
            .await
            .unwrap()
            .metadata
            .deletion_grace_period_seconds,
        Some(30)
    );
}

#[tokio::test]
async fn unbound_and_finished_pods_go_at_once() {
    let env = start().await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    pods.create(&PostParams::default(), &pod("unbound", None, Some(30)))
        .await
        .unwrap();
    pods.delete("unbound", &DeleteParams::default())
        .await
        .unwrap();
    assert!(pods.get_opt("unbound").await.unwrap().is_none());

    let mut done = pods
        .create(&PostParams::default(), &pod("done", Some("vk"), Some(30)))
        .await
        .unwrap();
    done.status = Some(serde_json::from_value(json!({"phase": "Succeeded"})).unwrap());
    pods.replace_status("done", &PostParams::default(), &done)
        .await
        .unwrap();
    pods.delete("done", &DeleteParams::default()).await.unwrap();
    assert!(pods.get_opt("done").await.unwrap().is_none());

    pods.create(&PostParams::default(), &pod("now", Some("vk"), Some(30)))
        .await
        .unwrap();
    pods.delete(
        "now",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(pods.get_opt("now").await.unwrap().is_none());
}

#[tokio::test]
async fn status_writes_do_not_touch_the_spec_and_selectors_follow_node_name() {
    let env = start().await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let mut p = pods
        .create(&PostParams::default(), &pod("s", Some("vk"), None))
        .await
        .unwrap();
    pods.create(
        &PostParams::default(),
        &pod("other", Some("elsewhere"), None),
    )
    .await
    .unwrap();
    p.status =
        Some(serde_json::from_value(json!({"phase": "Running", "podIP": "10.0.0.5"})).unwrap());
    p.spec.as_mut().unwrap().containers[0].image = Some("changed".into());
    let after = pods
        .replace_status("s", &PostParams::default(), &p)
        .await
        .unwrap();
    assert_eq!(after.status.unwrap().phase.as_deref(), Some("Running"));
    assert_eq!(
        after.spec.unwrap().containers[0].image.as_deref(),
        Some("busybox")
    );
    let all: Api<Pod> = Api::all(env.client.clone());
    let mine = all
        .list(&ListParams::default().fields("spec.nodeName=vk"))
        .await
        .unwrap();
    assert_eq!(mine.items.len(), 1);
    assert_eq!(mine.items[0].metadata.name.as_deref(), Some("s"));
}
