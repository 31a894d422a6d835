//! Events (events.k8s.io/v1 via kube's Recorder, visible as core/v1 too) and Leases.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::{Resource, ResourceExt};

use crate::common::*;

#[tokio::test]
async fn recorder_publishes_events_in_both_api_versions() {
    let env = start().await.with_widgets().await;
    let w = env
        .widgets("default")
        .create(&PostParams::default(), &widget("w", "w"))
        .await
        .unwrap();
    let recorder = Recorder::new(
        env.client.clone(),
        Reporter {
            controller: "test-ctrl".into(),
            instance: Some("pod-1".into()),
        },
    );
    let ev = KubeEvent {
        type_: EventType::Normal,
        reason: "Created".into(),
        note: Some("made a widget".into()),
        action: "Create".into(),
        secondary: None,
    };
    let reference = w.object_ref(&());
    recorder.publish(&ev, &reference).await.unwrap();
    recorder.publish(&ev, &reference).await.unwrap();

    let events: Api<Event> = Api::namespaced(env.client.clone(), "default");
    let list = events.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        list.items.len(),
        1,
        "a repeated event is patched into a series"
    );
    let e = &list.items[0];
    assert_eq!(e.note.as_deref(), Some("made a widget"));
    assert_eq!(e.reporting_controller.as_deref(), Some("test-ctrl"));
    assert_eq!(e.regarding.as_ref().unwrap().name.as_deref(), Some("w"));
    assert_eq!(e.series.as_ref().map(|s| s.count), Some(2));

    let core: Api<CoreEvent> = Api::namespaced(env.client.clone(), "default");
    let list = core
        .list(&ListParams::default().fields("involvedObject.name=w"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].message.as_deref(), Some("made a widget"));
    assert_eq!(
        list.items[0].involved_object.kind.as_deref(),
        Some("Widget")
    );
    let none = core
        .list(&ListParams::default().fields("involvedObject.name=other"))
        .await
        .unwrap();
    assert!(none.items.is_empty());
    let v1 = events
        .list(&ListParams::default().fields("regarding.name=w"))
        .await
        .unwrap();
    assert_eq!(v1.items.len(), 1);
}

#[tokio::test]
async fn lease_create_update_and_conflict() {
    let env = start().await;
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), "default");
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some("leader".into()),
            ..Default::default()
        },
        spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
            holder_identity: Some("a".into()),
            lease_duration_seconds: Some(15),
            acquire_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
            ..Default::default()
        }),
    };
    let created = leases.create(&PostParams::default(), &lease).await.unwrap();
    let mut mine = created.clone();
    mine.spec.as_mut().unwrap().holder_identity = Some("b".into());
    mine.spec.as_mut().unwrap().renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
    let updated = leases
        .replace("leader", &PostParams::default(), &mine)
        .await
        .unwrap();
    assert_eq!(updated.spec.unwrap().holder_identity.as_deref(), Some("b"));
    // a competing writer with the old resourceVersion loses
    let err = api_err(
        leases
            .replace("leader", &PostParams::default(), &created)
            .await,
    );
    assert_eq!(err.code, 409);
    // PUT creates a missing lease (leases allow create-on-update)
    let mut other = lease.clone();
    other.metadata.name = Some("other".into());
    leases
        .replace("other", &PostParams::default(), &other)
        .await
        .unwrap();
    assert_eq!(leases.get("other").await.unwrap().name_any(), "other");
}
