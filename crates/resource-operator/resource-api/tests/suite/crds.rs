//! The committed CRDs under deploy/crds must equal what the types generate, and each CRD has
//! a snapshot so schema changes are reviewed.

use std::path::PathBuf;

fn deploy_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../deploy/crds")
}

#[test]
fn committed_crds_match_generated() {
    for crd in api::all_crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let path = deploy_dir().join(format!("{name}.yaml"));
        let committed = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; regenerate with `cargo run -p openstack-operator -- crds --out-dir deploy/crds`", path.display()));
        let generated = api::crd_yaml(&crd).expect("CRD renders as YAML");
        assert!(
            committed == generated,
            "{} drifted from the Rust types; regenerate with `cargo run -p openstack-operator -- crds --out-dir deploy/crds`",
            path.display()
        );
    }
}

#[test]
fn crd_snapshots() {
    for crd in api::all_crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        insta::assert_snapshot!(
            name.clone(),
            api::crd_yaml(&crd).expect("CRD renders as YAML")
        );
    }
}

#[test]
fn seed_compatibility_surface() {
    // Names, scopes, short names and printer columns a seed user's tooling relies on.
    let expect = [
        (
            "openstackdomains.sunet.se",
            "Cluster",
            vec!["osd", "osdomain"],
            vec!["Domain", "Enabled", "Phase", "Age"],
        ),
        (
            "openstackflavors.sunet.se",
            "Cluster",
            vec!["osf", "osflavor"],
            vec![
                "Flavor",
                "vCPUs",
                "RAM (MB)",
                "Disk (GB)",
                "Public",
                "Phase",
                "Age",
            ],
        ),
        (
            "openstackimages.sunet.se",
            "Cluster",
            vec!["osi", "osimage"],
            vec![
                "Image",
                "Visibility",
                "External",
                "Phase",
                "Upload Status",
                "Age",
            ],
        ),
        (
            "openstacknetworks.sunet.se",
            "Cluster",
            vec!["osn", "osnet"],
            vec!["Network", "External", "Type", "Phase", "Age"],
        ),
        (
            "openstackprojects.sunet.se",
            "Namespaced",
            vec!["osp", "osproject"],
            vec!["Project", "Domain", "Phase", "Age"],
        ),
    ];
    let crds = api::all_crds();
    for (name, scope, short, columns) in expect {
        let crd = crds
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
            .expect(name);
        assert_eq!(crd.spec.group, "sunet.se");
        assert_eq!(crd.spec.scope, scope, "{name}");
        assert_eq!(
            crd.spec.names.short_names.clone().unwrap_or_default(),
            short,
            "{name}"
        );
        let v = &crd.spec.versions[0];
        assert_eq!(v.name, "v1alpha1");
        assert!(v.served && v.storage);
        assert!(
            v.subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            "{name} status subresource"
        );
        // Seed columns appear in order at default priority; ours add only priority-1 columns.
        let shown: Vec<_> = v
            .additional_printer_columns
            .iter()
            .flatten()
            .filter(|c| c.priority.unwrap_or(0) == 0)
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(shown, columns, "{name} printer columns");
    }
}

#[test]
fn committed_vk_crds_match_generated() {
    let regen = "regenerate with `cargo run -p openstack-operator -- crds --virtual-kubelet-out-dir deploy/crds-virtual-kubelet`";
    for crd in api::vk_crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let path = deploy_dir()
            .join("../crds-virtual-kubelet")
            .join(format!("{name}.yaml"));
        let committed = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; {regen}", path.display()));
        assert!(
            committed == api::crd_yaml(&crd).expect("CRD renders as YAML"),
            "{} drifted from the Rust types; {regen}",
            path.display()
        );
        // Cluster-scoped, with a status subresource the node writes through.
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.group, api::tenant::VK_GROUP);
        assert!(
            crd.spec.versions[0]
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
    }
}
