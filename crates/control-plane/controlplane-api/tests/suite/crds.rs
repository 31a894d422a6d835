//! The CRDs: snapshots, the committed copies under deploy/crds equal what the code generates
//! (regenerate with `openstack-operator crds --control-plane-out-dir deploy/crds-controlplane`), and every CEL rule of
//! them compiles and stays within the apiserver's cost budget (each string a rule reads has a
//! maxLength, each list a maxItems).

use std::path::PathBuf;

use kube::CustomResourceExt;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

#[test]
fn crd_snapshots() {
    for crd in controlplane_api::all_crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        insta::assert_snapshot!(name.clone(), api::crd_yaml(&crd).expect("yaml"));
    }
}

#[test]
fn committed_crds_match_the_code() {
    for crd in controlplane_api::all_crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let path = repo()
            .join("deploy/crds-controlplane")
            .join(format!("{name}.yaml"));
        let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; run `openstack-operator crds --control-plane-out-dir deploy/crds-controlplane`",
                path.display()
            )
        });
        assert_eq!(
            committed,
            api::crd_yaml(&crd).expect("yaml"),
            "{} is stale: run `openstack-operator crds --control-plane-out-dir deploy/crds-controlplane`",
            path.display()
        );
    }
}

#[test]
fn group_and_scope() {
    for crd in controlplane_api::all_crds() {
        assert_eq!(crd.spec.group, controlplane_api::GROUP);
        assert_eq!(crd.spec.scope, "Namespaced");
        let v = &crd.spec.versions[0];
        assert!(
            v.subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
        assert!(
            v.additional_printer_columns
                .as_ref()
                .is_some_and(|c| c.iter().any(|c| c.name == "Ready")),
            "{} has a Ready column",
            crd.spec.names.kind
        );
    }
    assert_eq!(
        controlplane_api::Keystone::crd().spec.names.short_names,
        Some(vec!["ks".to_string()])
    );
}
