//! CustomResourceDefinitions: serving, defaults, validation, pruning, status subresource, generation.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::common::*;

#[tokio::test]
async fn crd_gets_established_and_names_accepted() {
    let env = start().await;
    let crd = env.install_crd(widget_crd()).await;
    let conds = crd.status.unwrap().conditions.unwrap();
    for t in ["Established", "NamesAccepted"] {
        let c = conds
            .iter()
            .find(|c| c.type_ == t)
            .unwrap_or_else(|| panic!("{t} condition"));
        assert_eq!(c.status, "True");
    }
    // kube-runtime's helper sees it too
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    let established = kube::runtime::wait::await_condition(
        crds.clone(),
        "widgets.sunet.se",
        kube::runtime::wait::conditions::is_crd_established(),
    );
    tokio::time::timeout(std::time::Duration::from_secs(5), established)
        .await
        .unwrap()
        .unwrap();
    let stored = crds.get("widgets.sunet.se").await.unwrap();
    assert_eq!(
        stored.status.unwrap().stored_versions.unwrap(),
        vec!["v1alpha1".to_string()]
    );

    // an invalid CRD is rejected with field causes
    let mut bad = widget_crd();
    bad["metadata"]["name"] = json!("wrong.sunet.se");
    let bad: CustomResourceDefinition = serde_json::from_value(bad).unwrap();
    let err = api_err(crds.create(&PostParams::default(), &bad).await);
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert_eq!(err.details.unwrap().causes[0].field, "metadata.name");
}

#[tokio::test]
async fn defaults_apply_on_create_and_update_nested_only_with_parent() {
    let env = start().await.with_widgets().await;
    let api = env.dyn_widgets("default");
    let w = api
        .create(&PostParams::default(), &dyn_obj(json!({"apiVersion": "sunet.se/v1alpha1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"name": "w"}})))
        .await
        .unwrap();
    assert_eq!(w.data["spec"]["size"], 3);
    assert_eq!(w.data["spec"]["color"], "red");
    assert_eq!(w.data["spec"]["enabled"], true);
    assert!(
        w.data["spec"].get("network").is_none(),
        "no parent, no nested defaults"
    );

    let patched = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"network": {}, "size": null}})),
        )
        .await
        .unwrap();
    assert_eq!(
        patched.data["spec"]["network"],
        json!({"cidr": "10.0.0.0/24", "mtu": 1500})
    );
    assert_eq!(
        patched.data["spec"]["size"], 3,
        "a removed defaulted field is defaulted again"
    );
}

async fn invalid(api: &Api<DynamicObject>, spec: Value) -> Vec<(String, String)> {
    let obj = dyn_obj(
        json!({"apiVersion": "sunet.se/v1alpha1", "kind": "Widget", "metadata": {"name": "bad"}, "spec": spec}),
    );
    let err = api_err(api.create(&PostParams::default(), &obj).await);
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"), "{err:?}");
    assert!(
        err.message
            .starts_with("Widget.sunet.se \"bad\" is invalid: "),
        "{}",
        err.message
    );
    let d = err.details.unwrap();
    assert_eq!(
        (d.kind.as_str(), d.group.as_str(), d.name.as_str()),
        ("Widget", "sunet.se", "bad")
    );
    d.causes.into_iter().map(|c| (c.field, c.reason)).collect()
}

#[tokio::test]
async fn validation_rejects_with_field_paths() {
    let env = start().await.with_widgets().await;
    let api = env.dyn_widgets("default");
    let c = |f: &str, r: &str| vec![(f.to_string(), r.to_string())];
    assert_eq!(
        invalid(&api, json!({})).await,
        c("spec.name", "FieldValueRequired")
    );
    assert_eq!(
        invalid(&api, json!({"name": "Bad_Name"})).await,
        c("spec.name", "FieldValueInvalid")
    );
    assert_eq!(
        invalid(&api, json!({"name": ""})).await.len(),
        2,
        "minLength and pattern"
    );
    assert_eq!(
        invalid(&api, json!({"name": "a".repeat(21)})).await,
        c("spec.name", "FieldValueTooLong")
    );
    assert_eq!(
        invalid(&api, json!({"name": "ok", "size": 0})).await,
        c("spec.size", "FieldValueInvalid")
    );
    assert_eq!(
        invalid(&api, json!({"name": "ok", "size": 11})).await,
        c("spec.size", "FieldValueInvalid")
    );
    assert_eq!(
        invalid(&api, json!({"name": "ok", "size": "big"})).await,
        c("spec.size", "FieldValueTypeInvalid")
    );
    assert_eq!(
        invalid(&api, json!({"name": "ok", "color": "pink"})).await,
        c("spec.color", "FieldValueNotSupported")
    );
    assert_eq!(
        invalid(&api, json!({"name": "ok", "tags": ["a", "b", "c", "d"]})).await,
        c("spec.tags", "FieldValueTooMany")
    );
    assert_eq!(
        invalid(&api, json!({"name": "ok", "labels": {"k": "toolong"}})).await,
        c("spec.labels.k", "FieldValueTooLong")
    );
    assert_eq!(
        invalid(&api, json!({"name": "ok", "enabled": "yes"})).await,
        c("spec.enabled", "FieldValueTypeInvalid")
    );
    // nullable accepts null; non-nullable rejects it
    let ok = dyn_obj(
        json!({"apiVersion": "sunet.se/v1alpha1", "kind": "Widget", "metadata": {"name": "ok"}, "spec": {"name": "ok", "ratio": null}}),
    );
    api.create(&PostParams::default(), &ok).await.unwrap();
    assert_eq!(
        invalid(&api, json!({"name": null})).await,
        c("spec.name", "FieldValueTypeInvalid")
    );
    // updates are validated too
    let err = api_err(
        api.patch(
            "ok",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 99}})),
        )
        .await,
    );
    assert_eq!(err.code, 422);
    assert_eq!(err.details.unwrap().causes[0].field, "spec.size");
}

#[tokio::test]
async fn unknown_fields_are_pruned_or_rejected_when_strict() {
    let env = start().await.with_widgets().await;
    let api = env.dyn_widgets("default");
    let obj = dyn_obj(json!({
        "apiVersion": "sunet.se/v1alpha1", "kind": "Widget",
        "metadata": {"name": "p"},
        "spec": {"name": "p", "bogus": 1, "network": {"junk": true}, "extra": {"anything": {"goes": [1, 2]}}},
        "topLevelJunk": "x"
    }));
    let w = api.create(&PostParams::default(), &obj).await.unwrap();
    assert!(w.data["spec"].get("bogus").is_none());
    assert!(w.data["spec"]["network"].get("junk").is_none());
    assert_eq!(
        w.data["spec"]["extra"],
        json!({"anything": {"goes": [1, 2]}})
    );
    assert!(w.data.get("topLevelJunk").is_none());

    let strict = PatchParams {
        field_validation: Some(kube::api::ValidationDirective::Strict),
        ..Default::default()
    };
    let err = api_err(
        api.patch("p", &strict, &Patch::Merge(json!({"spec": {"bogus": 2}})))
            .await,
    );
    assert_eq!((err.code, err.reason.as_str()), (400, "BadRequest"));
    assert!(
        err.message.contains("unknown field \"spec.bogus\""),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn status_subresource_splits_writes_and_generation_tracks_spec() {
    let env = start().await.with_widgets().await;
    let api = env.widgets("default");
    let mut w = widget("w", "w");
    w.status = Some(WidgetStatus {
        phase: Some("Injected".into()),
        observed_generation: None,
    });
    let created = api.create(&PostParams::default(), &w).await.unwrap();
    assert!(created.status.is_none(), "create cannot set status");
    assert_eq!(created.metadata.generation, Some(1));
    let rv = |o: &Widget| {
        o.metadata
            .resource_version
            .clone()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };

    // status write: only status changes, generation stays
    let mut s = created.clone();
    s.status = Some(WidgetStatus {
        phase: Some("Ready".into()),
        observed_generation: Some(1),
    });
    s.spec.size = Some(7);
    s.metadata.labels = Some([("ignored".to_string(), "yes".to_string())].into());
    let after_status = api
        .replace_status("w", &PostParams::default(), &s)
        .await
        .unwrap();
    assert_eq!(
        after_status.status.as_ref().unwrap().phase.as_deref(),
        Some("Ready")
    );
    assert_eq!(after_status.spec.size, Some(3), "spec untouched by /status");
    assert!(
        after_status.metadata.labels.is_none(),
        "metadata untouched by /status"
    );
    assert_eq!(after_status.metadata.generation, Some(1));
    assert!(rv(&after_status) > rv(&created));

    // main write: status changes ignored, metadata change does not bump generation
    let mut m = after_status.clone();
    m.status = Some(WidgetStatus {
        phase: Some("Hacked".into()),
        observed_generation: None,
    });
    m.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
    let after_meta = api.replace("w", &PostParams::default(), &m).await.unwrap();
    assert_eq!(
        after_meta.status.as_ref().unwrap().phase.as_deref(),
        Some("Ready")
    );
    assert_eq!(after_meta.metadata.generation, Some(1));
    assert!(rv(&after_meta) > rv(&after_status));

    // spec change bumps generation
    let after_spec = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 5}})),
        )
        .await
        .unwrap();
    assert_eq!(after_spec.metadata.generation, Some(2));

    // status patch through the subresource
    let p = api
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"observedGeneration": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(p.status.unwrap().observed_generation, Some(2));
    assert_eq!(p.metadata.generation, Some(2));
}

#[tokio::test]
async fn without_status_subresource_status_is_ordinary_content() {
    let env = start().await;
    env.install_crd(gadget_crd()).await;
    let api: Api<DynamicObject> = Api::all_with(env.client.clone(), &gadget_ar());
    let g = api
        .create(&PostParams::default(), &dyn_obj(json!({"apiVersion": "sunet.se/v1alpha1", "kind": "Gadget", "metadata": {"name": "g"}, "spec": {"a": 1}, "status": {"s": 1}})))
        .await
        .unwrap();
    assert_eq!(
        g.data["status"]["s"], 1,
        "no subresource: create keeps status"
    );
    assert!(g.metadata.namespace.is_none(), "cluster scoped");
    let g2 = api
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"s": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(
        g2.metadata.generation,
        Some(2),
        "status is content without the subresource"
    );
    let r = reqwest::get(format!(
        "{}/apis/sunet.se/v1alpha1/gadgets/g/status",
        env.handle.url()
    ))
    .await
    .unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn deleting_a_crd_removes_instances_and_stops_serving() {
    let env = start().await.with_widgets().await;
    let api = env.widgets("default");
    api.create(&PostParams::default(), &widget("w", "w"))
        .await
        .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    crds.delete("widgets.sunet.se", &DeleteParams::default())
        .await
        .unwrap();
    eventually(|| async {
        crds.get_opt("widgets.sunet.se")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    let err = api_err(api.list(&Default::default()).await);
    assert_eq!(err.code, 404);
    // re-creating the CRD serves an empty collection
    env.install_crd(widget_crd()).await;
    assert!(
        api.list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn cel_rules_are_evaluated() {
    let env = start().await.with_widgets().await;
    let api = env.dyn_widgets("default");
    let obj = |spec: Value| {
        dyn_obj(
            json!({"apiVersion": "sunet.se/v1alpha1", "kind": "Widget", "metadata": {"name": "c"}, "spec": spec}),
        )
    };
    let err = api_err(
        api.create(
            &PostParams::default(),
            &obj(json!({"name": "c", "size": 6, "color": "blue"})),
        )
        .await,
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert!(
        err.message.contains("big widgets cannot be blue"),
        "{}",
        err.message
    );
    assert_eq!(err.details.unwrap().causes[0].field, "spec");

    api.create(
        &PostParams::default(),
        &obj(json!({"name": "c", "size": 6})),
    )
    .await
    .unwrap();
    // transition rule: oldSelf is the stored value
    let err = api_err(
        api.patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"name": "other"}})),
        )
        .await,
    );
    assert_eq!(err.code, 422);
    assert!(err.message.contains("name is immutable"), "{}", err.message);
    api.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"color": "green"}})),
    )
    .await
    .unwrap();

    // a rule that does not compile makes the CRD invalid
    let mut bad = gadget_crd();
    bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"] =
        json!([{"rule": "self.(("}]);
    let bad: CustomResourceDefinition = serde_json::from_value(bad).unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    let err = api_err(crds.create(&PostParams::default(), &bad).await);
    assert_eq!(err.code, 422, "{err:?}");
}
