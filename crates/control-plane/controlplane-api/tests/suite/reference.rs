//! docs/crd-reference-controlplane.md is generated from the control-plane CRD schemas (with
//! the resource operator's generator); the committed file must be current.

use std::path::PathBuf;

const REGENERATE: &str =
    "UPDATE_REFERENCE=1 cargo test -p controlplane-api --test suite reference::";

fn generated() -> String {
    let crds: Vec<serde_json::Value> = controlplane_api::all_crds()
        .iter()
        .map(|c| serde_json::to_value(c).expect("CRD as JSON"))
        .collect();
    api::reference::markdown_for(
        "Control-plane CRD reference",
        &format!(
            "<!-- GENERATED from the controlplane.sunet.se CRD schemas: do not edit. Regenerate with `{REGENERATE}`. -->"
        ),
        "All kinds are in API group `controlplane.sunet.se`, version `v1alpha1` (served and \
         stored), with a `status` subresource.",
        &crds,
    )
}

#[test]
fn committed_control_plane_reference_matches_the_schemas() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../docs/crd-reference-controlplane.md");
    let generated = generated();
    if std::env::var_os("UPDATE_REFERENCE").is_some() {
        std::fs::write(&path, &generated).expect("write the reference");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/crd-reference-controlplane.md differs from the CRD schemas; regenerate it with `{REGENERATE}`"
    );
}

#[test]
fn every_control_plane_kind_and_spec_field_is_described() {
    let md = generated();
    for crd in controlplane_api::all_crds() {
        let kind = &crd.spec.names.kind;
        assert!(
            md.contains(&format!("\n## {kind}\n")),
            "{kind} has a section"
        );
        let crd = serde_json::to_value(&crd).expect("CRD as JSON");
        let (fields, _) = api::reference::fields(&crd);
        assert!(fields.iter().any(|f| f.path.starts_with(".spec.")));
        for f in fields.iter().filter(|f| f.path.starts_with(".spec")) {
            assert!(
                !f.description.is_empty(),
                "{kind}: {} has no description (add a doc comment to the field)",
                f.path
            );
        }
    }
}
