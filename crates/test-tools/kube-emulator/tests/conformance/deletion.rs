//! Deletion: finalizers, the kube-runtime finalizer helper, ownerReference GC, preconditions.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy,
};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn finalizers_delay_deletion_until_removed() {
    let env = start().await.with_widgets().await;
    let api = env.widgets("default");
    let mut w = widget("w", "w");
    w.metadata.finalizers = Some(vec!["sunet.se/cleanup".into()]);
    api.create(&PostParams::default(), &w).await.unwrap();

    let resp = api.delete("w", &DeleteParams::default()).await.unwrap();
    let terminating = resp
        .left()
        .expect("object returned while finalizers remain");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(0));
    assert_eq!(
        terminating.metadata.generation,
        Some(2),
        "marking for deletion bumps generation"
    );
    let still = api.get("w").await.unwrap();
    assert!(still.metadata.deletion_timestamp.is_some());

    // no new finalizers on a terminating object
    let err = api_err(
        api.patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["sunet.se/cleanup", "other"]}})),
        )
        .await,
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert_eq!(err.details.unwrap().causes[0].field, "metadata.finalizers");

    // emptying the finalizers removes it
    api.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(api.get_opt("w").await.unwrap().is_none());
}

#[tokio::test]
async fn delete_preconditions() {
    let env = start().await.with_widgets().await;
    let api = env.widgets("default");
    let w = api
        .create(&PostParams::default(), &widget("w", "w"))
        .await
        .unwrap();
    let bad_uid = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("nope".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    assert_eq!(api_err(api.delete("w", &bad_uid).await).code, 409);
    let bad_rv = DeleteParams {
        preconditions: Some(Preconditions {
            uid: None,
            resource_version: Some("1".into()),
        }),
        ..Default::default()
    };
    assert_eq!(api_err(api.delete("w", &bad_rv).await).code, 409);
    let good = DeleteParams {
        preconditions: Some(Preconditions {
            uid: w.metadata.uid.clone(),
            resource_version: w.metadata.resource_version.clone(),
        }),
        ..Default::default()
    };
    api.delete("w", &good).await.unwrap();
    assert!(api.get_opt("w").await.unwrap().is_none());
}

const FIN: &str = "widgets.sunet.se/cleanup";

struct Ctx {
    api: Api<Widget>,
    cleanups: AtomicUsize,
}

async fn reconcile(
    w: Arc<Widget>,
    ctx: Arc<Ctx>,
) -> Result<Action, kube::runtime::finalizer::Error<kube::Error>> {
    finalizer(&ctx.api, FIN, w, |ev| async {
        match ev {
            FinalizerEvent::Apply(w) => {
                let status = json!({"status": {"phase": "Ready", "observedGeneration": w.metadata.generation}});
                ctx.api.patch_status(&w.name_any(), &PatchParams::default(), &Patch::Merge(status)).await?;
                Ok(Action::await_change())
            }
            FinalizerEvent::Cleanup(_) => {
                ctx.cleanups.fetch_add(1, Ordering::SeqCst);
                Ok(Action::await_change())
            }
        }
    })
    .await
}

#[tokio::test]
async fn controller_with_finalizer_helper_reconciles_and_cleans_up() {
    let env = start().await.with_widgets().await;
    let api = env.widgets("default");
    let ctx = Arc::new(Ctx {
        api: api.clone(),
        cleanups: AtomicUsize::new(0),
    });
    let controller = Controller::new(api.clone(), watcher::Config::default())
        .run(
            reconcile,
            |_, _, _| Action::requeue(Duration::from_millis(100)),
            ctx.clone(),
        )
        .for_each(|_| async {});
    let task = tokio::spawn(controller);

    api.create(&PostParams::default(), &widget("w", "w"))
        .await
        .unwrap();
    let ready = eventually(|| async {
        let w = api.get("w").await.unwrap();
        (w.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Ready")).then_some(w)
    })
    .await;
    assert_eq!(ready.finalizers(), &[FIN.to_string()]);

    api.delete("w", &DeleteParams::default()).await.unwrap();
    eventually(|| async { api.get_opt("w").await.unwrap().is_none().then_some(()) }).await;
    assert_eq!(ctx.cleanups.load(Ordering::SeqCst), 1);
    task.abort();
}

fn owned_cm(name: &str, owner: &Widget, block: bool, finalizer: Option<&str>) -> ConfigMap {
    let mut r: OwnerReference = owner.controller_owner_ref(&()).unwrap();
    r.block_owner_deletion = Some(block);
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            owner_references: Some(vec![r]),
            finalizers: finalizer.map(|f| vec![f.to_string()]),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test]
async fn background_deletion_collects_dependents() {
    let env = start().await.with_widgets().await;
    let widgets = env.widgets("default");
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let owner = widgets
        .create(&PostParams::default(), &widget("owner", "o"))
        .await
        .unwrap();
    let other = widgets
        .create(&PostParams::default(), &widget("other", "o"))
        .await
        .unwrap();
    cms.create(
        &PostParams::default(),
        &owned_cm("dep", &owner, false, None),
    )
    .await
    .unwrap();
    // a dependent with a second, surviving owner only loses the dangling reference
    let mut shared = owned_cm("shared", &owner, false, None);
    let mut r2 = other.controller_owner_ref(&()).unwrap();
    r2.controller = Some(false);
    shared.metadata.owner_references.as_mut().unwrap().push(r2);
    cms.create(&PostParams::default(), &shared).await.unwrap();

    widgets
        .delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    assert!(widgets.get_opt("owner").await.unwrap().is_none());
    eventually(|| async { cms.get_opt("dep").await.unwrap().is_none().then_some(()) }).await;
    let shared = cms.get("shared").await.unwrap();
    let refs = shared.metadata.owner_references.unwrap();
    assert_eq!(refs.len(), 1);
    assert_eq!(refs[0].name, "other");
}

#[tokio::test]
async fn foreground_deletion_waits_for_blocking_dependents() {
    let env = start().await.with_widgets().await;
    let widgets = env.widgets("default");
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let owner = widgets
        .create(&PostParams::default(), &widget("owner", "o"))
        .await
        .unwrap();
    cms.create(
        &PostParams::default(),
        &owned_cm("blocker", &owner, true, Some("test/hold")),
    )
    .await
    .unwrap();
    cms.create(
        &PostParams::default(),
        &owned_cm("plain", &owner, false, None),
    )
    .await
    .unwrap();

    widgets
        .delete("owner", &DeleteParams::foreground())
        .await
        .unwrap();
    let o = widgets.get("owner").await.unwrap();
    assert!(o.metadata.deletion_timestamp.is_some());
    assert!(o.finalizers().contains(&"foregroundDeletion".to_string()));
    assert!(
        cms.get_opt("plain").await.unwrap().is_none(),
        "non-blocking dependent deleted"
    );
    let b = cms.get("blocker").await.unwrap();
    assert!(
        b.metadata.deletion_timestamp.is_some(),
        "blocking dependent is being deleted"
    );

    cms.patch(
        "blocker",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    eventually(|| async {
        widgets
            .get_opt("owner")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn orphan_deletion_keeps_dependents_without_the_reference() {
    let env = start().await.with_widgets().await;
    let widgets = env.widgets("default");
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let owner = widgets
        .create(&PostParams::default(), &widget("owner", "o"))
        .await
        .unwrap();
    cms.create(&PostParams::default(), &owned_cm("dep", &owner, true, None))
        .await
        .unwrap();
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        ..Default::default()
    };
    widgets.delete("owner", &dp).await.unwrap();
    eventually(|| async {
        widgets
            .get_opt("owner")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    let dep = cms.get("dep").await.unwrap();
    assert!(dep.metadata.owner_references.unwrap_or_default().is_empty());
    assert!(dep.metadata.deletion_timestamp.is_none());
}
