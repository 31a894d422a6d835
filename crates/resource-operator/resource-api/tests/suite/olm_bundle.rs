//! The OLM bundle (deploy/olm/bundle: a ClusterServiceVersion, the CRDs, the bundle
//! annotations) is generated from the manifests every other install path uses: the kustomize
//! bases of the resource operator and the control-plane operator (their Deployments, RBAC and
//! ServiceAccounts), the CRDs under deploy/crds*, and the examples as `alm-examples`. This test
//! regenerates it and fails when the committed bundle differs (run it with
//! `UPDATE_OLM_BUNDLE=1` to rewrite it), then checks what OLM relies on.
//!
//! The virtual kubelet is not in the bundle: each instance is a node with its own tenant
//! credentials and network, configured per install (kustomize or the chart).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

const PACKAGE: &str = "openstack-operator";
const CHANNEL: &str = "alpha";
const VERSION: &str = env!("CARGO_PKG_VERSION");

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

fn bundle_dir() -> PathBuf {
    repo().join("deploy/olm/bundle")
}

fn parse(text: &str, origin: &str) -> Vec<Value> {
    api::manifest::documents(text).unwrap_or_else(|e| panic!("{origin}: {e}"))
}

fn kustomize(dir: &Path) -> Vec<Value> {
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".to_string());
    let out = Command::new(&kubectl)
        .arg("kustomize")
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{kubectl} kustomize` ({e}): install kubectl"));
    assert!(
        out.status.success(),
        "kubectl kustomize {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    parse(
        &String::from_utf8_lossy(&out.stdout),
        &dir.display().to_string(),
    )
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

fn of_kind<'a>(docs: &'a [Value], kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    docs.iter().filter(move |d| d["kind"] == kind)
}

/// The CRDs of both operators, as committed (other tests keep them equal to the code's).
fn crds() -> Vec<(String, Value)> {
    ["deploy/crds", "deploy/crds-controlplane"]
        .iter()
        .flat_map(|d| yaml_files(&repo().join(d)))
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("CRD file");
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            let doc = parse(&text, &name).into_iter().next().expect("one CRD");
            (name, doc)
        })
        .collect()
}

fn owned(crd: &Value) -> Value {
    let spec = &crd["spec"];
    let version = spec["versions"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["storage"] == true))
        .expect("a storage version");
    json!({
        "name": crd["metadata"]["name"],
        "version": version["name"],
        "kind": spec["names"]["kind"],
        "displayName": spec["names"]["kind"],
        "description": version["schema"]["openAPIV3Schema"]["description"],
    })
}

fn examples() -> Vec<Value> {
    let mut files = yaml_files(&repo().join("examples"));
    files.extend(yaml_files(&repo().join("examples/control-plane")));
    files
        .iter()
        .flat_map(|p| {
            parse(
                &std::fs::read_to_string(p).expect("example"),
                &p.display().to_string(),
            )
        })
        .filter(|d| {
            d["apiVersion"].as_str().is_some_and(|a| {
                a.starts_with("sunet.se/") || a.starts_with("controlplane.sunet.se/")
            })
        })
        .map(|mut d| {
            if let Some(m) = d["metadata"].as_object_mut() {
                m.remove("namespace");
            }
            d
        })
        .collect()
}

/// The control-plane operator's Deployment, which serves the validating webhook.
const CP_DEPLOYMENT: &str = "openstack-operator-control-plane";

/// The webhook definitions OLM manages (it issues the certificate, injects the CA and renews
/// both), from the kustomize component's webhook configuration, and the container fields the
/// component adds to the Deployment.
fn webhook() -> (Vec<Value>, Value) {
    let dir = repo().join("deploy/kustomize/components/control-plane-webhook");
    let read = |f: &str| {
        let text = std::fs::read_to_string(dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        parse(&text, f).remove(0)
    };
    let config = read("validatingwebhookconfiguration.yaml");
    let patch = read("deployment-patch.yaml");
    let container = patch["spec"]["template"]["spec"]["containers"][0].clone();
    let target_port = container["ports"][0]["containerPort"].clone();
    let hooks = config["webhooks"]
        .as_array()
        .expect("webhooks")
        .iter()
        .map(|h| {
            json!({
                "type": "ValidatingAdmissionWebhook",
                "generateName": h["name"],
                "deploymentName": CP_DEPLOYMENT,
                "containerPort": h["clientConfig"]["service"]["port"],
                "targetPort": target_port,
                "webhookPath": h["clientConfig"]["service"]["path"],
                "admissionReviewVersions": h["admissionReviewVersions"],
                "sideEffects": h["sideEffects"],
                "failurePolicy": h["failurePolicy"],
                "timeoutSeconds": h["timeoutSeconds"],
                "rules": h["rules"],
            })
        })
        .collect();
    (hooks, container)
}

/// The ClusterServiceVersion: both operators' Deployments, cluster-wide and namespaced RBAC
/// from their kustomize bases, every CRD owned.
fn csv() -> Value {
    let mut docs = kustomize(&repo().join("deploy/kustomize/base"));
    docs.extend(kustomize(&repo().join("deploy/kustomize/control-plane")));
    // Which ServiceAccount each role is bound to, from the bindings.
    let subject_of = |kind: &str, role: &str| -> String {
        of_kind(&docs, &format!("{kind}Binding"))
            .find(|b| b["roleRef"]["name"] == role)
            .and_then(|b| b["subjects"][0]["name"].as_str())
            .unwrap_or_else(|| panic!("{kind} {role} is bound to a ServiceAccount"))
            .to_string()
    };
    let permissions = |kind: &str| -> Vec<Value> {
        of_kind(&docs, kind)
            .map(|r| {
                let name = r["metadata"]["name"].as_str().expect("role name");
                json!({"serviceAccountName": subject_of(kind, name), "rules": r["rules"]})
            })
            .collect()
    };
    let (webhooks, webhook_container) = webhook();
    let deployments: Vec<Value> = of_kind(&docs, "Deployment")
        .map(|d| {
            let mut spec = d["spec"].clone();
            if d["metadata"]["name"] == CP_DEPLOYMENT {
                // The webhook listener of the kustomize component; OLM mounts the certificate
                // itself (where the operator reads it by default), so not the component's volume.
                let c = &mut spec["template"]["spec"]["containers"][0];
                for field in ["env", "ports"] {
                    let mut list = webhook_container[field]
                        .as_array()
                        .cloned()
                        .unwrap_or_default();
                    list.extend(c[field].as_array().cloned().unwrap_or_default());
                    c[field] = Value::Array(list);
                }
            }
            json!({"name": d["metadata"]["name"], "label": d["metadata"]["labels"], "spec": spec})
        })
        .collect();
    let image = deployments[0]["spec"]["template"]["spec"]["containers"][0]["image"].clone();
    let owned: Vec<Value> = crds().iter().map(|(_, c)| owned(c)).collect();
    let alm = serde_json::to_string(&examples()).expect("examples as JSON");
    json!({
        "apiVersion": "operators.coreos.com/v1alpha1",
        "kind": "ClusterServiceVersion",
        "metadata": {
            "name": format!("{PACKAGE}.v{VERSION}"),
            "annotations": {
                "alm-examples": alm,
                "capabilities": "Basic Install",
                "categories": "Cloud Provider",
                "containerImage": image,
                "description": "OpenStack resources (domains, flavors, images, provider networks, tenants) and an OpenStack control plane (Keystone and the services built on it) from Kubernetes custom resources.",
                "operators.operatorframework.io/builder": "crates/resource-operator/resource-api/tests/suite/olm_bundle.rs",
                "repository": "https://github.com/SUNET/openstack-operator",
            },
        },
        "spec": {
            "displayName": "OpenStack Operator",
            "description": "Two controllers from one image.\n\n**Resource operator** (`sunet.se/v1alpha1`): OpenStack domains, flavors, images, provider networks and whole tenants (projects with quotas, networks, routers, security groups, role bindings and SSO federation). It needs a `clouds.yaml` with admin credentials in the Secret `openstack-operator-credentials` of the install namespace before its pod can start.\n\n**Control-plane operator** (`controlplane.sunet.se/v1alpha1`): deploys Keystone and the OpenStack services on it, wired to external databases, message queues, caches, object storage and OVN declared as `OpenStackExternalService`s.\n\nThe Zun virtual kubelet of the same image is installed per tenant with kustomize or Helm, not by this bundle.",
            "version": VERSION,
            "maturity": CHANNEL,
            "minKubeVersion": "1.30.0",
            "keywords": ["openstack", "keystone", "nova", "neutron", "cloud"],
            "provider": {"name": "SUNET"},
            "maintainers": [{"name": "SUNET", "email": "noc@sunet.se"}],
            "links": [{"name": "Source", "url": "https://github.com/SUNET/openstack-operator"}],
            "installModes": [
                {"type": "OwnNamespace", "supported": true},
                {"type": "SingleNamespace", "supported": true},
                {"type": "MultiNamespace", "supported": false},
                {"type": "AllNamespaces", "supported": true},
            ],
            "customresourcedefinitions": {"owned": owned},
            "install": {
                "strategy": "deployment",
                "spec": {
                    "clusterPermissions": permissions("ClusterRole"),
                    "permissions": permissions("Role"),
                    "deployments": deployments,
                },
            },
            "webhookdefinitions": webhooks,
        },
    })
}

fn annotations() -> Value {
    json!({"annotations": {
        "operators.operatorframework.io.bundle.mediatype.v1": "registry+v1",
        "operators.operatorframework.io.bundle.manifests.v1": "manifests/",
        "operators.operatorframework.io.bundle.metadata.v1": "metadata/",
        "operators.operatorframework.io.bundle.package.v1": PACKAGE,
        "operators.operatorframework.io.bundle.channels.v1": CHANNEL,
        "operators.operatorframework.io.bundle.channel.default.v1": CHANNEL,
    }})
}

fn yaml(v: &Value) -> String {
    serde_saphyr::to_string(v).expect("YAML")
}

/// Every file of the bundle, by path under deploy/olm/bundle.
fn bundle() -> Vec<(String, String)> {
    let mut files = vec![(
        format!("manifests/{PACKAGE}.clusterserviceversion.yaml"),
        yaml(&csv()),
    )];
    for (name, crd) in crds() {
        files.push((format!("manifests/{name}"), yaml(&crd)));
    }
    files.push(("metadata/annotations.yaml".into(), yaml(&annotations())));
    files
}

#[test]
fn committed_bundle_is_the_generated_one() {
    let files = bundle();
    if std::env::var_os("UPDATE_OLM_BUNDLE").is_some() {
        let _ = std::fs::remove_dir_all(bundle_dir().join("manifests"));
        for (path, text) in &files {
            let p = bundle_dir().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, text).unwrap();
        }
    }
    let mut stale = Vec::new();
    for (path, text) in &files {
        match std::fs::read_to_string(bundle_dir().join(path)) {
            Ok(committed) if &committed == text => {}
            _ => stale.push(path.clone()),
        }
    }
    let committed: BTreeSet<String> = yaml_files(&bundle_dir().join("manifests"))
        .iter()
        .map(|p| format!("manifests/{}", p.file_name().unwrap().to_string_lossy()))
        .collect();
    let generated: BTreeSet<String> = files
        .iter()
        .map(|(p, _)| p.clone())
        .filter(|p| p.starts_with("manifests/"))
        .collect();
    stale.extend(committed.difference(&generated).cloned());
    assert!(
        stale.is_empty(),
        "deploy/olm/bundle is stale in {stale:?}: run UPDATE_OLM_BUNDLE=1 cargo test -p resource-api --test suite olm_bundle::"
    );
}

#[test]
fn bundle_says_what_olm_needs() {
    let csv = csv();
    let spec = &csv["spec"];
    // Every CRD of both operators is owned, with its storage version and kind.
    let owned: BTreeSet<String> = spec["customresourcedefinitions"]["owned"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap().to_string())
        .collect();
    let all: BTreeSet<String> = crds()
        .iter()
        .map(|(_, c)| c["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(owned, all);
    assert!(
        owned
            .iter()
            .any(|n| n.ends_with(".sunet.se") && n.contains("controlplane"))
    );
    for o in spec["customresourcedefinitions"]["owned"]
        .as_array()
        .unwrap()
    {
        assert!(
            o["description"].as_str().is_some_and(|d| !d.is_empty()),
            "{o}"
        );
    }
    // alm-examples: JSON, each example of an owned kind.
    let kinds: BTreeSet<String> = spec["customresourcedefinitions"]["owned"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap().to_string())
        .collect();
    let alm: Vec<Value> = serde_json::from_str(
        csv["metadata"]["annotations"]["alm-examples"]
            .as_str()
            .unwrap(),
    )
    .expect("alm-examples is JSON");
    assert!(alm.len() >= 5);
    for e in &alm {
        assert!(kinds.contains(e["kind"].as_str().unwrap()), "{e}");
        assert!(
            e["metadata"]["namespace"].is_null(),
            "OLM examples carry no namespace"
        );
    }
    // Both operators' Deployments, each running as its own ServiceAccount, and that account
    // holds the cluster permissions of its ClusterRole.
    let install = &spec["install"]["spec"];
    let deployments = install["deployments"].as_array().unwrap();
    let names: Vec<&str> = deployments
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["openstack-operator", "openstack-operator-control-plane"]
    );
    let accounts: BTreeSet<&str> = install["clusterPermissions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["serviceAccountName"].as_str().unwrap())
        .collect();
    for d in deployments {
        let sa = d["spec"]["template"]["spec"]["serviceAccountName"]
            .as_str()
            .unwrap();
        assert!(accounts.contains(sa), "{sa} has cluster permissions");
        assert!(d["spec"]["template"]["metadata"]["namespace"].is_null());
    }
    // OLM's webhook: a validating one, on the control-plane Deployment, whose container
    // listens on the target port; no volume of the component's (OLM mounts the certificate).
    let hooks = spec["webhookdefinitions"].as_array().unwrap();
    assert_eq!(hooks.len(), 1);
    let hook = &hooks[0];
    assert_eq!(hook["type"], "ValidatingAdmissionWebhook");
    assert_eq!(hook["deploymentName"], CP_DEPLOYMENT);
    assert_eq!(hook["failurePolicy"], "Fail");
    let cp = deployments
        .iter()
        .find(|d| d["name"] == CP_DEPLOYMENT)
        .unwrap();
    let c = &cp["spec"]["template"]["spec"]["containers"][0];
    assert!(
        c["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["containerPort"] == hook["targetPort"])
    );
    let addr = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "WEBHOOK_ADDR")
        .expect("WEBHOOK_ADDR");
    assert!(
        addr["value"]
            .as_str()
            .unwrap()
            .ends_with(&format!(":{}", hook["targetPort"]))
    );
    assert!(cp["spec"]["template"]["spec"]["volumes"].is_null());
    // The CSV's version and name agree with the crate's; the metadata is a registry+v1 bundle.
    assert_eq!(spec["version"], VERSION);
    assert_eq!(csv["metadata"]["name"], format!("{PACKAGE}.v{VERSION}"));
    let a = &annotations()["annotations"];
    assert_eq!(
        a["operators.operatorframework.io.bundle.mediatype.v1"],
        "registry+v1"
    );
    assert_eq!(
        a["operators.operatorframework.io.bundle.package.v1"],
        PACKAGE
    );
}
