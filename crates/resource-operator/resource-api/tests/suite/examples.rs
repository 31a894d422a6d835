//! Every example manifest (our demo set and the seed README's, verbatim) parses into our
//! types without losing a field and passes CEL and semantic validation.

use std::path::{Path, PathBuf};

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    out.sort();
    out
}

fn check_dir(dir: &str) -> usize {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../..")
        .join(dir);
    let mut checked = 0;
    for file in yaml_files(&root) {
        let text = std::fs::read_to_string(&file).expect("readable example");
        for doc in
            api::manifest::documents(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        {
            let Some(c) =
                api::manifest::check(&doc).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
            else {
                continue;
            };
            let lost = api::manifest::lost_fields(&doc, &c.roundtrip);
            assert!(
                lost.is_empty(),
                "{}: fields not in our schema: {lost:?}",
                file.display()
            );
            assert!(
                c.errors.is_empty(),
                "{}: {}",
                file.display(),
                api::validation::summarize(&c.errors)
            );
            checked += 1;
        }
    }
    checked
}

#[test]
fn seed_readme_manifests_are_accepted() {
    // One manifest per kind in the seed README.
    assert_eq!(check_dir("examples/seed-readme"), 5);
}

#[test]
fn the_several_clouds_example_is_accepted() {
    // The OpenstackCloud, a network and a project naming it.
    assert_eq!(check_dir("examples/clouds"), 3);
}

#[test]
fn demo_examples_are_accepted() {
    assert!(check_dir("examples") >= 5);
}

#[test]
fn readme_gateway_spelling_is_kept() {
    let text = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../../examples/seed-readme/network.yaml"),
    )
    .unwrap();
    let doc = &api::manifest::documents(&text).unwrap()[0];
    let net: api::OpenstackNetwork = serde_json::from_value(doc.clone()).unwrap();
    let subnets = net.spec.subnets.unwrap();
    assert_eq!(subnets[0].effective_gateway(), Some("192.168.1.1"));
}

#[test]
fn the_vk_tenant_example_is_accepted() {
    use kube::CustomResourceExt as _;
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../examples/virtual-kubelet/tenants.yaml");
    let text = std::fs::read_to_string(&path).expect("readable example");
    let mut tenants = 0;
    for doc in api::manifest::documents(&text).unwrap() {
        if doc["kind"] != "ZunTenant" {
            continue;
        }
        assert_eq!(
            doc["apiVersion"],
            api::ZunTenant::api_resource().api_version
        );
        let t: api::ZunTenant = serde_json::from_value(doc.clone()).unwrap();
        let lost = api::manifest::lost_fields(&doc, &serde_json::to_value(&t).unwrap());
        assert!(lost.is_empty(), "fields not in the schema: {lost:?}");
        let name = t.metadata.name.clone().unwrap();
        let errors = t.spec.validate(&name);
        assert!(
            errors.is_empty(),
            "{name}: {}",
            api::validation::summarize(&errors)
        );
        tenants += 1;
    }
    assert_eq!(tenants, 2);
}
