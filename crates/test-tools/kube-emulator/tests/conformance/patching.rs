//! PATCH flavours: merge, JSON (with `test`), strategic, server-side apply.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn merge_patch_merges_and_null_deletes() {
    let env = start().await.with_widgets().await;
    let api = env.widgets("default");
    let mut w = widget("w", "w");
    w.metadata.labels = Some(BTreeMap::from([
        ("a".into(), "1".into()),
        ("b".into(), "2".into()),
    ]));
    api.create(&PostParams::default(), &w).await.unwrap();
    let p = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"a": null, "c": "3"}}, "spec": {"color": "blue"}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        p.labels(),
        &BTreeMap::from([
            ("b".to_string(), "2".to_string()),
            ("c".to_string(), "3".to_string())
        ])
    );
    assert_eq!(p.spec.color.as_deref(), Some("blue"));
    assert_eq!(p.spec.size, Some(3));
    let err = api_err(
        api.patch("missing", &PatchParams::default(), &Patch::Merge(json!({})))
            .await,
    );
    assert_eq!(err.code, 404);
}

#[tokio::test]
async fn json_patch_test_op_guards_the_write() {
    let env = start().await.with_widgets().await;
    let api = env.widgets("default");
    api.create(&PostParams::default(), &widget("w", "w"))
        .await
        .unwrap();
    let ok: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/spec/size", "value": 3},
        {"op": "replace", "path": "/spec/size", "value": 4},
    ]))
    .unwrap();
    let p = api
        .patch("w", &PatchParams::default(), &Patch::<()>::Json(ok))
        .await
        .unwrap();
    assert_eq!(p.spec.size, Some(4));
    let failing: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/spec/size", "value": 3},
        {"op": "replace", "path": "/spec/size", "value": 5},
    ]))
    .unwrap();
    let err = api_err(
        api.patch("w", &PatchParams::default(), &Patch::<()>::Json(failing))
            .await,
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert_eq!(api.get("w").await.unwrap().spec.size, Some(4));
}

#[tokio::test]
async fn strategic_merge_patch_on_builtin_kind() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("c".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("a".into(), "1".into())])),
        ..Default::default()
    };
    api.create(&PostParams::default(), &cm).await.unwrap();
    let p = api
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Strategic(json!({"data": {"b": "2"}})),
        )
        .await
        .unwrap();
    assert_eq!(p.data.unwrap().len(), 2);
}

#[tokio::test]
async fn server_side_apply_create_update_conflict_force() {
    let env = start().await.with_widgets().await;
    let api = env.dyn_widgets("default");
    let mine = PatchParams::apply("mgr-a");
    let cfg = json!({
        "apiVersion": "sunet.se/v1alpha1", "kind": "Widget",
        "metadata": {"name": "w", "labels": {"owner": "a"}},
        "spec": {"name": "w", "size": 5, "tags": ["x"]}
    });
    // create through apply
    let w = api.patch("w", &mine, &Patch::Apply(&cfg)).await.unwrap();
    assert_eq!(w.data["spec"]["size"], 5);
    assert_eq!(w.data["spec"]["color"], "red", "defaults apply");
    let mf = w.metadata.managed_fields.clone().unwrap();
    assert_eq!(mf[0].manager.as_deref(), Some("mgr-a"));
    assert_eq!(mf[0].operation.as_deref(), Some("Apply"));

    // re-apply without tags: the field we stopped applying is removed
    let cfg2 = json!({
        "apiVersion": "sunet.se/v1alpha1", "kind": "Widget",
        "metadata": {"name": "w", "labels": {"owner": "a"}},
        "spec": {"name": "w", "size": 6}
    });
    let w = api.patch("w", &mine, &Patch::Apply(&cfg2)).await.unwrap();
    assert_eq!(w.data["spec"]["size"], 6);
    assert!(w.data["spec"].get("tags").is_none());

    // another manager setting the same field to another value conflicts
    let theirs = PatchParams::apply("mgr-b");
    let cfg_b = json!({"apiVersion": "sunet.se/v1alpha1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"name": "w", "size": 9}});
    let err = api_err(api.patch("w", &theirs, &Patch::Apply(&cfg_b)).await);
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert!(err.message.contains("mgr-a"), "{}", err.message);
    // agreeing on the value is not a conflict
    let cfg_same = json!({"apiVersion": "sunet.se/v1alpha1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"name": "w", "size": 6}});
    api.patch("w", &theirs, &Patch::Apply(&cfg_same))
        .await
        .unwrap();
    // force takes ownership
    let w = api
        .patch("w", &theirs.clone().force(), &Patch::Apply(&cfg_b))
        .await
        .unwrap();
    assert_eq!(w.data["spec"]["size"], 9);
    // mgr-a re-applying its old value now conflicts with mgr-b
    let err = api_err(api.patch("w", &mine, &Patch::Apply(&cfg2)).await);
    assert_eq!(err.code, 409);

    // apply on the status subresource
    let st = json!({"apiVersion": "sunet.se/v1alpha1", "kind": "Widget", "metadata": {"name": "w"}, "status": {"phase": "Ready"}});
    let w = api
        .patch_status("w", &PatchParams::apply("ctrl").force(), &Patch::Apply(&st))
        .await
        .unwrap();
    assert_eq!(w.data["status"]["phase"], "Ready");

    // apply requires a field manager
    let err = api_err(
        api.patch("w", &PatchParams::default(), &Patch::Apply(&cfg2))
            .await,
    );
    assert_eq!(err.code, 422);
}

#[tokio::test]
async fn server_side_apply_yaml_body() {
    let env = start().await.with_widgets().await;
    // (an unquoted `y` would be a YAML 1.1 boolean, for the real server too)
    let yaml = "apiVersion: sunet.se/v1alpha1\nkind: Widget\nmetadata:\n  name: yy\nspec:\n  name: yy\n  size: 2\n";
    let resp = reqwest::Client::new()
        .patch(format!(
            "{}/apis/sunet.se/v1alpha1/namespaces/default/widgets/yy?fieldManager=yaml",
            env.handle.url()
        ))
        .header("content-type", "application/apply-patch+yaml")
        .body(yaml)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    assert_eq!(
        env.widgets("default").get("yy").await.unwrap().spec.size,
        Some(2)
    );
}
