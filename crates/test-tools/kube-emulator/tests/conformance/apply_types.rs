//! A server-side apply whose body does not fit the schema: the real server fails
//! it while building the typed patch object (500, no reason, structured-merge-diff's
//! message), while create and update of the same object answer 422 Invalid.
//!
//! The expected answers are what kube-apiserver v1.36.2 printed for these
//! manifests of `tests/bad-input` (issue #14).

use std::path::PathBuf;

use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

use crate::common::*;

const DOMAIN_ADOPT: &str = "failed to create typed patch object (/bad; sunet.se/v1alpha1, Kind=OpenstackDomain): .spec.adopt: expected boolean, got &{true}";
const FLAVOR_RAM: &str = "failed to create typed patch object (/bad; sunet.se/v1alpha1, Kind=OpenstackFlavor): .spec.ram: expected numeric (int or float), got string";
const PROJECT_DUPLICATE: &str = "failed to create typed patch object (default/bad; sunet.se/v1alpha1, Kind=OpenstackProject): .spec.networks: duplicate entries for key [name=\"n\"]";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

fn yaml(path: PathBuf) -> Value {
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

async fn with_our_crds() -> Env {
    let env = start().await;
    for plural in ["openstackdomains", "openstackflavors", "openstackprojects"] {
        env.install_crd(yaml(
            repo().join(format!("deploy/crds/{plural}.sunet.se.yaml")),
        ))
        .await;
    }
    env
}

fn api(env: &Env, kind: &str, plural: &str, ns: Option<&str>) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("sunet.se", "v1alpha1", kind),
        plural,
    );
    match ns {
        Some(ns) => Api::namespaced_with(env.client.clone(), ns, &ar),
        None => Api::all_with(env.client.clone(), &ar),
    }
}

fn bad_input(file: &str) -> Value {
    yaml(repo().join("tests/bad-input").join(file))
}

async fn assert_apply_answer(api: &Api<DynamicObject>, manifest: &Value, want: &str) {
    let s = api_err(
        api.patch(
            "bad",
            &PatchParams::apply("conformance"),
            &Patch::Apply(manifest),
        )
        .await,
    );
    assert_eq!(s.code, 500, "{}", s.message);
    assert_eq!(s.reason, "", "the real server gives no reason");
    assert_eq!(s.message, want);
    // and nothing was created
    assert_eq!(api_err(api.get("bad").await).code, 404);
}

async fn assert_create_answer(api: &Api<DynamicObject>, manifest: &Value, field: &str) {
    let obj: DynamicObject = serde_json::from_value(manifest.clone()).expect("object");
    let s = api_err(api.create(&PostParams::default(), &obj).await);
    assert_eq!(
        (s.code, s.reason.as_str()),
        (422, "Invalid"),
        "{}",
        s.message
    );
    assert!(s.message.contains(field), "{}", s.message);
}

#[tokio::test]
async fn apply_of_a_wrong_type_or_duplicate_key_is_a_500_with_the_typed_patch_error() {
    let env = with_our_crds().await;
    let domains = api(&env, "OpenstackDomain", "openstackdomains", None);
    let flavors = api(&env, "OpenstackFlavor", "openstackflavors", None);
    let projects = api(
        &env,
        "OpenstackProject",
        "openstackprojects",
        Some("default"),
    );

    let domain = bad_input("domain-adopt-not-bool.yaml");
    let flavor = bad_input("flavor-ram-with-unit.yaml");
    let project = bad_input("project-duplicate-network-names.yaml");
    assert_apply_answer(&domains, &domain, DOMAIN_ADOPT).await;
    assert_apply_answer(&flavors, &flavor, FLAVOR_RAM).await;
    assert_apply_answer(&projects, &project, PROJECT_DUPLICATE).await;

    // create (and so update) of the same objects stays a 422 naming the field
    assert_create_answer(&domains, &domain, "spec.adopt").await;
    assert_create_answer(&flavors, &flavor, "spec.ram").await;
    assert_create_answer(&projects, &project, "spec.networks[1]").await;
}

#[tokio::test]
async fn apply_of_an_undeclared_field_is_a_500_and_a_well_typed_apply_passes() {
    let env = with_our_crds().await;
    let domains = api(&env, "OpenstackDomain", "openstackdomains", None);
    let unknown = json!({"apiVersion": "sunet.se/v1alpha1", "kind": "OpenstackDomain",
        "metadata": {"name": "bad"}, "spec": {"name": "bad", "colour": "red"}});
    assert_apply_answer(
        &domains,
        &unknown,
        "failed to create typed patch object (/bad; sunet.se/v1alpha1, Kind=OpenstackDomain): .spec.colour: field not declared in schema",
    )
    .await;
    let good = json!({"apiVersion": "sunet.se/v1alpha1", "kind": "OpenstackDomain",
        "metadata": {"name": "good"}, "spec": {"name": "good", "adopt": true}});
    let d = domains
        .patch(
            "good",
            &PatchParams::apply("conformance"),
            &Patch::Apply(&good),
        )
        .await
        .expect("a well-typed apply is accepted");
    assert_eq!(d.data["spec"]["adopt"], true);
    // a type error in an apply to an existing object is refused the same way
    let mut retype = good.clone();
    retype["spec"]["adopt"] = json!("yes");
    let s = api_err(
        domains
            .patch(
                "good",
                &PatchParams::apply("conformance"),
                &Patch::Apply(&retype),
            )
            .await,
    );
    assert_eq!(s.code, 500);
    assert!(
        s.message
            .ends_with(".spec.adopt: expected boolean, got &{yes}"),
        "{}",
        s.message
    );
}

#[tokio::test]
async fn apply_of_a_body_with_managed_fields_is_a_400() {
    let env = with_our_crds().await;
    let domains = api(&env, "OpenstackDomain", "openstackdomains", None);
    let good = json!({"apiVersion": "sunet.se/v1alpha1", "kind": "OpenstackDomain",
        "metadata": {"name": "d"}, "spec": {"name": "d"}});
    let read_back = domains
        .patch(
            "d",
            &PatchParams::apply("conformance"),
            &Patch::Apply(&good),
        )
        .await
        .expect("applied");
    assert!(read_back.metadata.managed_fields.is_some());
    // applying what was read, managedFields and all, is what the real server refuses
    let s = api_err(
        domains
            .patch(
                "d",
                &PatchParams::apply("conformance"),
                &Patch::Apply(&read_back),
            )
            .await,
    );
    assert_eq!((s.code, s.reason.as_str()), (400, "BadRequest"));
    assert_eq!(s.message, "metadata.managedFields must be nil");
}

/// `PatchOptions`/`CreateOptions` the real server refuses (apimachinery
/// `ValidatePatchOptions`, `ValidateFieldManager`): 422, not 400.
#[tokio::test]
async fn force_on_a_merge_patch_and_an_overlong_field_manager_are_invalid_options() {
    let env = with_our_crds().await;
    let domains = api(&env, "OpenstackDomain", "openstackdomains", None);
    let good = json!({"apiVersion": "sunet.se/v1alpha1", "kind": "OpenstackDomain",
        "metadata": {"name": "d"}, "spec": {"name": "d"}});
    domains
        .patch(
            "d",
            &PatchParams::apply("conformance"),
            &Patch::Apply(&good),
        )
        .await
        .expect("applied");
    // kube-rs refuses this client-side, so it goes over plain HTTP
    let resp = reqwest::Client::new()
        .patch(format!(
            "{}/apis/sunet.se/v1alpha1/openstackdomains/d?force=true",
            env.handle.url()
        ))
        .header("content-type", "application/merge-patch+json")
        .body(r#"{"spec": {"description": "x"}}"#)
        .send()
        .await
        .expect("request sent");
    assert_eq!(resp.status().as_u16(), 422);
    let s: Value = resp.json().await.expect("a Status");
    assert_eq!(s["reason"], "Invalid");
    assert_eq!(
        s["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch"
    );
    let long = "m".repeat(129);
    let resp = reqwest::Client::new()
        .patch(format!(
            "{}/apis/sunet.se/v1alpha1/openstackdomains/d?fieldManager={long}",
            env.handle.url()
        ))
        .header("content-type", "application/apply-patch+yaml")
        .body(good.to_string())
        .send()
        .await
        .expect("request sent");
    assert_eq!(resp.status().as_u16(), 422);
    let s: Value = resp.json().await.expect("a Status");
    let message = s["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Too long"),
        "{message}"
    );
}
