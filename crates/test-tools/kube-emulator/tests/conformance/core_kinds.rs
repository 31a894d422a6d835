//! Built-in kinds: CRUD, namespaces, selectors, discovery, metadata API, persistence, CLI.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::discovery::{Discovery, Scope};
use kube_emulator::EmulatorOptions;
use serde_json::json;

use crate::common::*;

fn cm(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("k".to_string(), "v".to_string())])),
        ..Default::default()
    }
}

#[tokio::test]
async fn configmap_crud_and_metadata_fields() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let created = api
        .create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap();
    let m = &created.metadata;
    assert!(m.uid.is_some() && m.creation_timestamp.is_some());
    let rv1: u64 = m.resource_version.as_deref().unwrap().parse().unwrap();
    assert_eq!(m.generation, None, "configmaps have no generation");

    let err = api_err(api.create(&PostParams::default(), &cm("a", &[])).await);
    assert_eq!((err.code, err.reason.as_str()), (409, "AlreadyExists"));

    let mut got = api.get("a").await.unwrap();
    got.data = Some(BTreeMap::from([("k".to_string(), "w".to_string())]));
    let replaced = api
        .replace("a", &PostParams::default(), &got)
        .await
        .unwrap();
    let rv2: u64 = replaced
        .metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv2 > rv1, "resourceVersion grows");
    assert_eq!(replaced.metadata.uid, m.uid);

    // unconditional update (no resourceVersion) is allowed
    let mut unconditional = replaced.clone();
    unconditional.metadata.resource_version = None;
    unconditional.data = Some(BTreeMap::from([("k".to_string(), "x".to_string())]));
    api.replace("a", &PostParams::default(), &unconditional)
        .await
        .unwrap();

    // stale resourceVersion conflicts
    let err = api_err(api.replace("a", &PostParams::default(), &got).await);
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));

    // a no-op update does not bump the resourceVersion
    let cur = api.get("a").await.unwrap();
    let same = api
        .replace("a", &PostParams::default(), &cur)
        .await
        .unwrap();
    assert_eq!(
        same.metadata.resource_version,
        cur.metadata.resource_version
    );

    let list = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert!(list.metadata.resource_version.is_some());

    api.delete("a", &DeleteParams::default()).await.unwrap();
    let err = api_err(api.get("a").await);
    assert_eq!((err.code, err.reason.as_str()), (404, "NotFound"));
    let details = err.details.unwrap();
    assert_eq!(
        (details.name.as_str(), details.kind.as_str()),
        ("a", "configmaps")
    );
}

#[tokio::test]
async fn namespaced_objects_need_their_namespace() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "nope");
    let err = api_err(api.create(&PostParams::default(), &cm("a", &[])).await);
    assert_eq!(err.code, 404);
    assert_eq!(err.message, "namespaces \"nope\" not found");

    let nss: Api<Namespace> = Api::all(env.client.clone());
    let ns = nss
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some("nope".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Active"));
    api.create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap();

    // deleting the namespace deletes its content, then the namespace
    nss.delete("nope", &DeleteParams::default()).await.unwrap();
    eventually(|| async { nss.get_opt("nope").await.unwrap().is_none().then_some(()) }).await;
    assert!(api.get_opt("a").await.unwrap().is_none());
}

#[tokio::test]
async fn terminating_namespace_refuses_new_content() {
    let env = start().await;
    let nss: Api<Namespace> = Api::all(env.client.clone());
    nss.create(
        &PostParams::default(),
        &Namespace {
            metadata: ObjectMeta {
                name: Some("t".into()),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "t");
    let mut blocker = cm("blocker", &[]);
    blocker.metadata.finalizers = Some(vec!["test/block".into()]);
    api.create(&PostParams::default(), &blocker).await.unwrap();
    nss.delete("t", &DeleteParams::default()).await.unwrap();
    let ns = nss.get("t").await.unwrap();
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Terminating"));
    let err = api_err(api.create(&PostParams::default(), &cm("new", &[])).await);
    assert_eq!((err.code, err.reason.as_str()), (403, "Forbidden"));
    // releasing the last finalizer lets the namespace go
    let mut b = api.get("blocker").await.unwrap();
    assert!(b.metadata.deletion_timestamp.is_some());
    b.metadata.finalizers = None;
    api.replace("blocker", &PostParams::default(), &b)
        .await
        .unwrap();
    assert!(nss.get_opt("t").await.unwrap().is_none());
}

#[tokio::test]
async fn generate_name_and_secret_string_data() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let mut c = cm("", &[]);
    c.metadata.name = None;
    c.metadata.generate_name = Some("gen-".into());
    let created = api.create(&PostParams::default(), &c).await.unwrap();
    let name = created.metadata.name.unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");

    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), "default");
    let s = Secret {
        metadata: ObjectMeta {
            name: Some("s".into()),
            ..Default::default()
        },
        string_data: Some(BTreeMap::from([(
            "password".to_string(),
            "hunter2".to_string(),
        )])),
        ..Default::default()
    };
    let created = secrets.create(&PostParams::default(), &s).await.unwrap();
    assert_eq!(created.type_.as_deref(), Some("Opaque"));
    assert_eq!(
        created.data.unwrap()["password"],
        ByteString(b"hunter2".to_vec())
    );
    assert!(created.string_data.is_none());
}

#[tokio::test]
async fn label_and_field_selectors() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    for (n, labels) in [
        ("a", vec![("app", "web"), ("tier", "front")]),
        ("b", vec![("app", "web"), ("tier", "back")]),
        ("c", vec![("app", "db")]),
        ("d", vec![]),
    ] {
        api.create(&PostParams::default(), &cm(n, &labels))
            .await
            .unwrap();
    }
    let names = |l: kube::core::ObjectList<ConfigMap>| -> Vec<String> {
        l.items
            .into_iter()
            .map(|c| c.metadata.name.unwrap())
            .collect()
    };
    for (sel, want) in [
        ("app=web", vec!["a", "b"]),
        ("app==web", vec!["a", "b"]),
        ("app!=web", vec!["c", "d"]),
        ("tier in (front,back)", vec!["a", "b"]),
        ("app notin (web)", vec!["c", "d"]),
        ("tier", vec!["a", "b"]),
        ("!tier", vec!["c", "d"]),
        ("app=web,tier=back", vec!["b"]),
    ] {
        let got = names(api.list(&ListParams::default().labels(sel)).await.unwrap());
        assert_eq!(got, want, "selector {sel}");
    }
    let got = names(
        api.list(&ListParams::default().fields("metadata.name=c"))
            .await
            .unwrap(),
    );
    assert_eq!(got, vec!["c"]);
    let got = names(
        api.list(&ListParams::default().fields("metadata.name!=c,metadata.namespace=default"))
            .await
            .unwrap(),
    );
    assert_eq!(got, vec!["a", "b", "d"]);
    let err = api_err(api.list(&ListParams::default().fields("data.k=v")).await);
    assert_eq!((err.code, err.reason.as_str()), (400, "BadRequest"));
    // limit is accepted; everything comes back without a continue token
    let l = api.list(&ListParams::default().limit(1)).await.unwrap();
    assert_eq!(l.items.len(), 4);
    assert!(l.metadata.continue_.is_none());
}

#[tokio::test]
async fn pods_nodes_and_spec_node_name_selector() {
    let env = start().await;
    let nodes: Api<Node> = Api::all(env.client.clone());
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "n1"}})).unwrap(),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    for (name, node) in [("p1", "n1"), ("p2", "n2")] {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}
        }))
        .unwrap();
        let created = pods.create(&PostParams::default(), &p).await.unwrap();
        assert_eq!(created.status.unwrap().phase.as_deref(), Some("Pending"));
    }
    let on_n1 = pods
        .list(&ListParams::default().fields("spec.nodeName=n1"))
        .await
        .unwrap();
    assert_eq!(on_n1.items.len(), 1);
    assert_eq!(on_n1.items[0].metadata.name.as_deref(), Some("p1"));
    let all: Api<Pod> = Api::all(env.client.clone());
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        2
    );
}

#[tokio::test]
async fn discovery_lists_builtins_and_crds() {
    let env = start().await.with_widgets().await;
    let v = env.client.apiserver_version().await.unwrap();
    assert_eq!((v.major.as_str(), v.minor.as_str()), ("1", "32"));
    let d = Discovery::new(env.client.clone()).run().await.unwrap();
    let (ar, caps) = d
        .groups()
        .find(|g| g.name() == "sunet.se")
        .expect("CRD group discovered")
        .recommended_kind("Widget")
        .unwrap();
    assert_eq!(ar.plural, "widgets");
    assert_eq!(caps.scope, Scope::Namespaced);
    assert!(caps.subresources.iter().any(|(s, _)| s.plural == "status"));
    for (group, kind) in [
        ("", "ConfigMap"),
        ("coordination.k8s.io", "Lease"),
        ("events.k8s.io", "Event"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ] {
        assert!(
            d.groups()
                .any(|g| g.name() == group && g.recommended_kind(kind).is_some()),
            "{group}/{kind} discovered"
        );
    }
    let raw: serde_json::Value =
        reqwest::get(format!("{}/apis/sunet.se/v1alpha1", env.handle.url()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    let widgets = raw["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "widgets")
        .unwrap();
    assert_eq!(widgets["shortNames"], json!(["wg"]));
    assert_eq!(widgets["categories"], json!(["all", "sunet"]));
    assert_eq!(widgets["singularName"], "widget");
}

#[tokio::test]
async fn metadata_only_api_and_deletecollection() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    for n in ["a", "b", "c"] {
        api.create(
            &PostParams::default(),
            &cm(n, &[("x", if n == "c" { "keep" } else { "drop" })]),
        )
        .await
        .unwrap();
    }
    let meta = api.get_metadata("a").await.unwrap();
    assert_eq!(meta.metadata.name.as_deref(), Some("a"));
    let metas = api.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(metas.items.len(), 3);
    api.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("x=drop"),
    )
    .await
    .unwrap();
    let left: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| c.metadata.name.unwrap())
        .collect();
    assert_eq!(left, vec!["c"]);
}

#[tokio::test]
async fn state_dir_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let opts = EmulatorOptions {
        state_dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    let env = start_with(opts.clone()).await.with_widgets().await;
    env.widgets("default")
        .create(&PostParams::default(), &widget("w", "keep"))
        .await
        .unwrap();
    let rv = env.handle.resource_version();
    env.handle.shutdown().await;
    let env = start_with(opts).await;
    let w = env.widgets("default").get("w").await.unwrap();
    assert_eq!(w.spec.name, "keep");
    assert!(env.handle.resource_version() >= rv);
}

#[tokio::test]
async fn cli_prints_address_and_writes_kubeconfig() {
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kube-emulator"))
        .args(["--listen", "127.0.0.1:0", "--kubeconfig"])
        .arg(&kc)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    // keep the pipe open for the whole test: the emulator keeps printing to it
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    stdout.read_line(&mut line).unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .expect("first line announces the address")
        .to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let kubeconfig = std::fs::read_to_string(&kc).unwrap();
    assert!(kubeconfig.contains(&format!("server: {url}")));
    assert!(kubeconfig.contains("token: "));
    let health = reqwest::get(format!("{url}/_emulator/healthz"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(health, "ok");
    let kc = kube::config::Kubeconfig::read_from(&kc).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(cfg).unwrap();
    let nss: Api<Namespace> = Api::all(client);
    assert!(nss.get("default").await.is_ok());
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Glance's file store creates a claim and reads it back: the real server serves
/// `persistentvolumeclaims` (short name `pvc`, namespaced, with a status subresource).
#[tokio::test]
async fn persistent_volume_claims_are_served() {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    let env = start().await;
    let api: Api<PersistentVolumeClaim> = Api::namespaced(env.client.clone(), "default");
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "images"},
        "spec": {"accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "10Gi"}}}
    }))
    .unwrap();
    api.create(&PostParams::default(), &claim).await.unwrap();
    let got = api.get("images").await.unwrap();
    let spec = got.spec.unwrap_or_default();
    assert_eq!(spec.access_modes, Some(vec!["ReadWriteOnce".to_string()]));
    let err = api_err(api.create(&PostParams::default(), &claim).await);
    assert_eq!((err.code, err.reason.as_str()), (409, "AlreadyExists"));
    let discovery = Discovery::new(env.client.clone()).run().await.unwrap();
    let (ar, caps) = discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .find(|(ar, _)| ar.plural == "persistentvolumeclaims")
        .expect("persistentvolumeclaims in discovery");
    assert_eq!(
        (ar.kind.as_str(), caps.scope),
        ("PersistentVolumeClaim", Scope::Namespaced)
    );
}
