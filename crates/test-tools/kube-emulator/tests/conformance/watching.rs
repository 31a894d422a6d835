//! Watches: event sequences, resumption, 410 Gone, bookmarks, timeouts, and
//! kube-runtime's watcher surviving dropped connections.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{
    Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::runtime::watcher::{self, Event};
use kube_emulator::EmulatorOptions;
use serde_json::json;

use crate::common::*;

fn cm(name: &str, app: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("app".to_string(), app.to_string())].into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

async fn next<S>(s: &mut S) -> WatchEvent<ConfigMap>
where
    S: futures::Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Unpin,
{
    tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .expect("event within 5s")
        .expect("stream open")
        .expect("event decodes")
}

async fn next_change<S>(s: &mut S) -> WatchEvent<ConfigMap>
where
    S: futures::Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Unpin,
{
    loop {
        match next(s).await {
            WatchEvent::Bookmark(_) => continue,
            other => return other,
        }
    }
}

#[tokio::test]
async fn watch_sequence_and_resume() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let list = api.list(&ListParams::default()).await.unwrap();
    let rv0 = list.metadata.resource_version.unwrap();
    let mut s = api
        .watch(&WatchParams::default().disable_bookmarks(), &rv0)
        .await
        .unwrap()
        .boxed();

    api.create(&PostParams::default(), &cm("a", "x"))
        .await
        .unwrap();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v"}})),
    )
    .await
    .unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let mut rvs = Vec::new();
    for want in ["ADDED", "MODIFIED", "DELETED"] {
        let (got, obj) = match next(&mut s).await {
            WatchEvent::Added(o) => ("ADDED", o),
            WatchEvent::Modified(o) => ("MODIFIED", o),
            WatchEvent::Deleted(o) => ("DELETED", o),
            other => panic!("unexpected {other:?}"),
        };
        assert_eq!(got, want);
        rvs.push(obj.resource_version().unwrap().parse::<u64>().unwrap());
    }
    assert!(rvs.windows(2).all(|w| w[0] < w[1]), "rvs increase: {rvs:?}");

    // resuming after the ADDED event replays only later events
    let mut resumed = api
        .watch(
            &WatchParams::default().disable_bookmarks(),
            &rvs[0].to_string(),
        )
        .await
        .unwrap()
        .boxed();
    assert!(matches!(next(&mut resumed).await, WatchEvent::Modified(_)));
    assert!(matches!(next(&mut resumed).await, WatchEvent::Deleted(_)));

    // rv "0" starts with synthetic ADDED events for existing objects
    api.create(&PostParams::default(), &cm("b", "x"))
        .await
        .unwrap();
    let mut from0 = api
        .watch(&WatchParams::default().disable_bookmarks(), "0")
        .await
        .unwrap()
        .boxed();
    match next(&mut from0).await {
        WatchEvent::Added(o) => assert_eq!(o.name_any(), "b"),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn watch_label_selector_transitions() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let mut s = api
        .watch(
            &WatchParams::default().labels("app=web").disable_bookmarks(),
            "0",
        )
        .await
        .unwrap()
        .boxed();
    api.create(&PostParams::default(), &cm("a", "db"))
        .await
        .unwrap();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "web"}}})),
    )
    .await
    .unwrap();
    assert!(
        matches!(next(&mut s).await, WatchEvent::Added(_)),
        "entering the selector is ADDED"
    );
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "db"}}})),
    )
    .await
    .unwrap();
    assert!(
        matches!(next(&mut s).await, WatchEvent::Deleted(_)),
        "leaving the selector is DELETED"
    );
}

#[tokio::test]
async fn too_old_resource_version_is_gone() {
    let env = start_with(EmulatorOptions {
        history_limit: 2,
        ..Default::default()
    })
    .await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let first = api
        .create(&PostParams::default(), &cm("a", "x"))
        .await
        .unwrap();
    let rv = first.resource_version().unwrap();
    for i in 0..3 {
        api.patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"i": i.to_string()}})),
        )
        .await
        .unwrap();
    }
    let mut s = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    match next(&mut s).await {
        WatchEvent::Error(e) => {
            assert_eq!(e.code, 410);
            assert_eq!(e.reason, "Expired");
        }
        other => panic!("expected 410, got {other:?}"),
    }
}

#[tokio::test]
async fn bookmarks_and_timeout() {
    let env = start_with(EmulatorOptions {
        bookmark_interval: Duration::from_millis(100),
        ..Default::default()
    })
    .await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    api.create(&PostParams::default(), &cm("a", "x"))
        .await
        .unwrap();
    let rv = env.handle.resource_version().to_string();
    let mut s = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    match next(&mut s).await {
        WatchEvent::Bookmark(b) => assert_eq!(b.metadata.resource_version, rv),
        other => panic!("expected a bookmark, got {other:?}"),
    }
    // without allowWatchBookmarks there are none; timeoutSeconds ends the stream
    let mut quiet = api
        .watch(&WatchParams::default().disable_bookmarks().timeout(1), &rv)
        .await
        .unwrap()
        .boxed();
    let ended = tokio::time::timeout(Duration::from_secs(3), quiet.next())
        .await
        .expect("stream ends by timeout");
    assert!(ended.is_none(), "no events, just the end: {ended:?}");
}

#[tokio::test]
async fn runtime_watcher_survives_dropped_watches_and_relists_after_gone() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    api.create(&PostParams::default(), &cm("a", "x"))
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let w = watcher::watcher(api.clone(), watcher::Config::default());
    let task = tokio::spawn(async move {
        let mut w = w.boxed();
        while let Some(ev) = w.next().await {
            if let Ok(ev) = ev {
                let label = match &ev {
                    Event::Init => "init".to_string(),
                    Event::InitApply(o) => format!("initapply:{}", o.name_any()),
                    Event::InitDone => "initdone".to_string(),
                    Event::Apply(o) => format!("apply:{}", o.name_any()),
                    Event::Delete(o) => format!("delete:{}", o.name_any()),
                };
                if tx.send(label).is_err() {
                    break;
                }
            }
        }
    });
    let mut expect = async |want: &str| {
        loop {
            let got = tokio::time::timeout(Duration::from_secs(5), rx.recv())
                .await
                .unwrap_or_else(|_| panic!("watcher event {want:?} within 5s"))
                .unwrap();
            println!("watcher: {got}");
            if got == want {
                return;
            }
        }
    };
    expect("initdone").await;
    eventually(|| async { (env.handle.watch_count() == 1).then_some(()) }).await;

    // dropped connection: the watcher re-watches from its last resourceVersion
    assert_eq!(env.handle.drop_watches(), 1);
    api.create(&PostParams::default(), &cm("b", "x"))
        .await
        .unwrap();
    expect("apply:b").await;

    // history gone + dropped connection: 410 on resume, so the watcher re-lists
    eventually(|| async { (env.handle.watch_count() == 1).then_some(()) }).await;
    api.create(&PostParams::default(), &cm("c", "x"))
        .await
        .unwrap();
    expect("apply:c").await;
    env.handle.compact_history();
    env.handle.drop_watches();
    expect("init").await;
    expect("initapply:c").await;
    expect("initdone").await;
    api.delete("a", &DeleteParams::default()).await.unwrap();
    expect("delete:a").await;
    task.abort();
}

#[tokio::test]
async fn streaming_list_watcher() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    api.create(&PostParams::default(), &cm("a", "x"))
        .await
        .unwrap();
    let mut s = watcher::watcher(api.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut seen = Vec::new();
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(5), s.try_next())
        .await
        .unwrap()
        .unwrap()
    {
        match ev {
            Event::InitApply(o) => seen.push(o.name_any()),
            Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(seen, vec!["a"]);
    api.create(&PostParams::default(), &cm("b", "x"))
        .await
        .unwrap();
    loop {
        match tokio::time::timeout(Duration::from_secs(5), s.try_next())
            .await
            .unwrap()
            .unwrap()
        {
            Some(Event::Apply(o)) => {
                assert_eq!(o.name_any(), "b");
                break;
            }
            Some(_) => continue,
            None => panic!("stream ended"),
        }
    }
}

#[tokio::test]
async fn watch_by_name_with_field_selector() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let mut s = api
        .watch(
            &WatchParams::default()
                .fields("metadata.name=b")
                .disable_bookmarks(),
            "0",
        )
        .await
        .unwrap()
        .boxed();
    api.create(&PostParams::default(), &cm("a", "x"))
        .await
        .unwrap();
    api.create(&PostParams::default(), &cm("b", "x"))
        .await
        .unwrap();
    match next_change(&mut s).await {
        WatchEvent::Added(o) => assert_eq!(o.name_any(), "b"),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn metadata_watcher_sees_partial_objects() {
    let env = start().await.with_widgets().await;
    let api = env.widgets("default");
    api.create(&PostParams::default(), &widget("a", "a"))
        .await
        .unwrap();
    let meta_api: Api<kube::core::PartialObjectMeta<Widget>> =
        Api::namespaced(env.client.clone(), "default");
    let mut s = watcher::watcher(meta_api, watcher::Config::default()).boxed();
    let mut seen = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(5), s.try_next())
            .await
            .unwrap()
            .unwrap()
        {
            Some(Event::InitApply(o)) => seen.push(o.name_any()),
            Some(Event::InitDone) => break,
            Some(_) => {}
            None => panic!("stream ended"),
        }
    }
    assert_eq!(seen, vec!["a"]);
    api.delete("a", &DeleteParams::default()).await.unwrap();
    loop {
        match tokio::time::timeout(Duration::from_secs(5), s.try_next())
            .await
            .unwrap()
            .unwrap()
        {
            Some(Event::Delete(o)) => {
                assert_eq!(o.name_any(), "a");
                assert_eq!(
                    o.types.map(|t| t.kind).as_deref(),
                    Some("PartialObjectMetadata")
                );
                break;
            }
            Some(_) => continue,
            None => panic!("stream ended"),
        }
    }
}
