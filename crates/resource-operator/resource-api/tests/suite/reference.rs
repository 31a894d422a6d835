//! docs/crd-reference.md is generated from the CRD schemas; the committed file must be current.

use std::path::PathBuf;

#[test]
fn committed_crd_reference_matches_the_schemas() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../docs/crd-reference.md");
    let generated = api::reference::markdown();
    if std::env::var_os("UPDATE_REFERENCE").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/crd-reference.md differs from the CRD schemas; regenerate it with `{}`",
        api::reference::REGENERATE
    );
}

#[test]
fn every_spec_field_is_described() {
    for crd in api::all_crds() {
        let crd = serde_json::to_value(&crd).unwrap();
        let (fields, _) = api::reference::fields(&crd);
        // The seed's kinds name their OpenStack object; an OpenstackCloud names a clouds.yaml
        // entry.
        let named = if crd["spec"]["names"]["kind"] == "OpenstackCloud" {
            ".spec.cloud"
        } else {
            ".spec.name"
        };
        assert!(fields.iter().any(|f| f.path == named), "{named}");
        for f in fields.iter().filter(|f| f.path.starts_with(".spec")) {
            assert!(
                !f.description.is_empty(),
                "{}: {} has no description (add a doc comment to the field)",
                crd["metadata"]["name"],
                f.path
            );
        }
    }
}

#[test]
fn constraints_and_defaults_are_shown() {
    let md = api::reference::markdown();
    // Flavor: a default, a minimum, required fields.
    assert!(
        md.contains("| `.spec.isPublic` | boolean |  | `true` |"),
        "isPublic row"
    );
    assert!(
        md.contains("| `.spec.vcpus` | integer (int64) | yes |  | ≥1 |"),
        "vcpus row"
    );
    // Every kind has a section and CEL rules are listed with their messages.
    for kind in [
        "OpenstackDomain",
        "OpenstackFlavor",
        "OpenstackImage",
        "OpenstackNetwork",
        "OpenstackProject",
        "OpenstackCloud",
    ] {
        assert!(md.contains(&format!("\n## {kind}\n")), "{kind} section");
    }
    assert!(md.contains("must be a valid IPv4 CIDR"));
}
