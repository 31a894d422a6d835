//! Every manifest under examples/control-plane of our kinds parses without losing a field and
//! passes the CEL rules and the pure validation.

use std::path::PathBuf;

use api::validation::{cel_errors_value, summarize};
use controlplane_api::validation::Validate;
use controlplane_api::{KeystoneSpec, OpenStackClusterSpec, OpenStackExternalServiceSpec};
use kube::CustomResourceExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn schema_of(kind: &str) -> Value {
    let crd = controlplane_api::all_crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .expect("kind");
    serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .expect("schema"),
    )
    .expect("json")
}

fn check<S: DeserializeOwned + Serialize + Validate>(doc: &Value, file: &str) {
    let spec: S =
        serde_json::from_value(doc["spec"].clone()).unwrap_or_else(|e| panic!("{file}: {e}"));
    let back = serde_json::to_value(&spec).expect("json");
    for (k, v) in doc["spec"].as_object().into_iter().flatten() {
        assert!(
            back.get(k).is_some() || v.is_null(),
            "{file}: field spec.{k} lost"
        );
    }
    let errs = spec.validate();
    assert!(errs.is_empty(), "{file}: {}", summarize(&errs));
    let kind = doc["kind"].as_str().unwrap_or_default();
    let cel = cel_errors_value(&schema_of(kind), doc);
    assert!(cel.is_empty(), "{file}: {}", summarize(&cel));
}

#[test]
fn control_plane_examples_are_valid() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../examples/control-plane");
    let mut kinds = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("examples/control-plane")
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("readable");
        let name = f.display().to_string();
        for doc in api::manifest::documents(&text).unwrap_or_else(|e| panic!("{name}: {e}")) {
            let kind = doc["kind"].as_str().unwrap_or_default().to_string();
            match kind.as_str() {
                "OpenStackCluster" => check::<OpenStackClusterSpec>(&doc, &name),
                "Keystone" => check::<KeystoneSpec>(&doc, &name),
                "OpenStackExternalService" => check::<OpenStackExternalServiceSpec>(&doc, &name),
                _ => {}
            }
            kinds.push(doc["spec"]["type"].as_str().unwrap_or(&kind).to_string());
        }
    }
    for want in [
        "OpenStackCluster",
        "database",
        "messaging",
        "cache",
        "objectStorage",
        "ovn",
    ] {
        assert!(
            kinds.iter().any(|k| k == want),
            "examples/control-plane has no {want}"
        );
    }
    let _ = controlplane_api::Keystone::crd();
}
