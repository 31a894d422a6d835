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
        .join("../..")
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
fn demo_examples_are_accepted() {
    assert!(check_dir("examples") >= 5);
}

#[test]
fn readme_gateway_spelling_is_kept() {
    let text = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/seed-readme/network.yaml"),
    )
    .unwrap();
    let doc = &api::manifest::documents(&text).unwrap()[0];
    let net: api::OpenstackNetwork = serde_json::from_value(doc.clone()).unwrap();
    let subnets = net.spec.subnets.unwrap();
    assert_eq!(subnets[0].effective_gateway(), Some("192.168.1.1"));
}
