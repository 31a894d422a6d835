//! End to end: bad control-plane specs are refused at admission (the CRD schema: enum,
//! minimum, pattern, required) or, once admitted, end in `InvalidSpec`/`Blocked` naming the
//! field or the missing Secret key, while nothing (no Secret, Job, Deployment or child CR) is
//! created for them.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use controlplane_api::condition_types as ct;
use e2e::{Check, Target, wait_for};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_openstack-operator");
const WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(300);

struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

fn api(client: &Client, ns: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "controlplane.sunet.se".into(),
        version: "v1alpha1".into(),
        api_version: "controlplane.sunet.se/v1alpha1".into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn obj(kind: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "controlplane.sunet.se/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec})
}

async fn refused(api: &Api<DynamicObject>, v: Value, needle: &str) {
    let name = v["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    match api
        .patch(&name, &PatchParams::apply("e2e"), &Patch::Apply(&v))
        .await
    {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 422, "{e:?}");
            assert!(
                e.message.contains(needle),
                "refusal of {name} should name {needle:?}: {}",
                e.message
            );
        }
        other => panic!("{name} was not refused at admission: {other:?}"),
    }
}

fn cond(v: &Value, t: &str) -> Option<(bool, String, String)> {
    v["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
        .map(|c| {
            (
                c["status"] == "True",
                c["reason"].as_str().unwrap_or("").into(),
                c["message"].as_str().unwrap_or("").into(),
            )
        })
}

async fn wait_cond(
    api: &Api<DynamicObject>,
    name: &str,
    t: &str,
    needle: &str,
) -> anyhow::Result<String> {
    wait_for(
        WAIT,
        POLL,
        &format!("{name} {t} naming {needle}"),
        async || {
            let v = serde_json::to_value(api.get(name).await?)?;
            Ok(match cond(&v, t) {
                Some((true, _, m)) if m.contains(needle) => Check::Done(m),
                other => Check::Pending(format!("{other:?}")),
            })
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_control_plane_specs_are_refused_and_touch_nothing() -> anyhow::Result<()> {
    let target = Target::from_env().await?;
    let client = target.client().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in controlplane_api::all_crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(
            &name,
            &PatchParams::apply("e2e").force(),
            &Patch::Apply(&crd),
        )
        .await?;
        wait_for(WAIT, POLL, "CRD established", async || {
            let c = crds.get(&name).await?;
            let ok = c
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            Ok(if ok {
                Check::Done(())
            } else {
                Check::Pending(String::new())
            })
        })
        .await?;
    }
    let ns = format!("cp-bad-{}", e2e::names::random_suffix());
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: kube::api::ObjectMeta {
                    name: Some(ns.clone()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await?;
    let clusters = api(&client, &ns, "OpenStackCluster", "openstackclusters");
    let ext = api(
        &client,
        &ns,
        "OpenStackExternalService",
        "openstackexternalservices",
    );
    let keystones = api(&client, &ns, "Keystone", "keystones");
    let placements = api(&client, &ns, "Placement", "placements");
    let good_ext = json!({"database": {"name": "db"}});

    // Refused at admission, naming the field.
    refused(
        &clusters,
        obj(
            "OpenStackCluster",
            "unknown-service",
            json!({"services": ["keystone", "swift"], "externalServices": good_ext}),
        ),
        "spec.services[1]",
    )
    .await;
    refused(&clusters, obj("OpenStackCluster", "negative", json!({"services": ["keystone"], "externalServices": good_ext, "templates": {"keystone": {"replicas": -1}}})), "replicas").await;
    refused(&ext, obj("OpenStackExternalService", "malformed", json!({"type": "database", "endpoints": ["db example org"], "credentials": {"secretName": "s"}})), "spec.endpoints[0]").await;
    refused(
        &ext,
        obj(
            "OpenStackExternalService",
            "tls-no-ca",
            json!({"type": "cache", "endpoints": ["mc:11211"], "tls": {"verify": "Full"}}),
        ),
        "caSecret",
    )
    .await;
    refused(
        &keystones,
        obj(
            "Keystone",
            "negative",
            json!({"database": {"service": {"name": "db"}}, "replicas": -3}),
        ),
        "replicas",
    )
    .await;

    refused(
        &placements,
        obj(
            "Placement",
            "relative-endpoint",
            json!({"database": {"service": {"name": "db"}}, "keystone": {"name": "ks"},
                   "publicEndpoint": "placement.example.org"}),
        ),
        "publicEndpoint must be an absolute",
    )
    .await;
    refused(
        &placements,
        obj(
            "Placement",
            "no-keystone",
            json!({"database": {"service": {"name": "db"}}}),
        ),
        "keystone",
    )
    .await;

    // Admitted, refused by the operator.
    let op = Proc(
        Command::new(BIN)
            .args([
                "control-plane",
                "--health-addr",
                &format!("127.0.0.1:{}", free_port()),
                "--metrics-addr",
                &format!("127.0.0.1:{}", free_port()),
                "--watch-namespace",
                &ns,
                "--check-interval-seconds",
                "5",
            ])
            .env("KUBECONFIG", target.kubeconfig())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    secrets
        .create(
            &PostParams::default(),
            &Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some("db-admin".into()),
                    ..Default::default()
                },
                data: Some([("username".to_string(), ByteString(b"root".to_vec()))].into()),
                ..Default::default()
            },
        )
        .await?;
    let pp = PatchParams::apply("e2e");
    ext.patch("db", &pp, &Patch::Apply(obj("OpenStackExternalService", "db", json!({"type": "database", "endpoints": ["127.0.0.1:13306"], "credentials": {"secretName": "db-admin", "passwordKey": "pw"}})))).await?;
    let m = wait_cond(&ext, "db", ct::BLOCKED, "Secret db-admin has no key pw").await?;
    let v = serde_json::to_value(ext.get("db").await?)?;
    assert_eq!(
        cond(&v, ct::SECRET_RESOLVED).map(|c| (c.0, c.2)),
        Some((false, m))
    );

    clusters.patch("stray-template", &pp, &Patch::Apply(obj("OpenStackCluster", "stray-template", json!({"services": ["keystone"], "externalServices": good_ext, "templates": {"glance": {"replicas": 1}}})))).await?;
    wait_cond(
        &clusters,
        "stray-template",
        ct::INVALID_SPEC,
        "spec.templates.glance",
    )
    .await?;
    keystones.patch("owned-option", &pp, &Patch::Apply(obj("Keystone", "owned-option", json!({"database": {"service": {"name": "db"}}, "configOverrides": {"database": {"connection": "sqlite://"}}})))).await?;
    wait_cond(
        &keystones,
        "owned-option",
        ct::INVALID_SPEC,
        "spec.configOverrides.database.connection",
    )
    .await?;
    // An option Keystone does not define is refused before anything rolls out, naming the
    // key and the nearest real option.
    keystones.patch("unknown-option", &pp, &Patch::Apply(obj("Keystone", "unknown-option", json!({"database": {"service": {"name": "db"}}, "configOverrides": {"token": {"expiraton": "3600"}}})))).await?;
    wait_cond(
        &keystones,
        "unknown-option",
        ct::INVALID_SPEC,
        "spec.configOverrides.token.expiraton: expiraton is not an option of [token] in keystone",
    )
    .await?;
    placements.patch("owned-option", &pp, &Patch::Apply(obj("Placement", "owned-option", json!({"database": {"service": {"name": "db"}}, "keystone": {"name": "gated"}, "configOverrides": {"keystone_authtoken": {"password": "mine"}}})))).await?;
    wait_cond(
        &placements,
        "owned-option",
        ct::INVALID_SPEC,
        "spec.configOverrides.keystone_authtoken.password",
    )
    .await?;
    clusters
        .patch(
            "no-keystone",
            &pp,
            &Patch::Apply(obj(
                "OpenStackCluster",
                "no-keystone",
                json!({"services": ["placement"], "externalServices": good_ext}),
            )),
        )
        .await?;
    wait_cond(&clusters, "no-keystone", ct::INVALID_SPEC, "spec.services").await?;
    // A valid Keystone whose database is not Ready is Blocked and names why.
    keystones
        .patch(
            "gated",
            &pp,
            &Patch::Apply(obj(
                "Keystone",
                "gated",
                json!({"database": {"service": {"name": "db"}}}),
            )),
        )
        .await?;
    wait_cond(
        &keystones,
        "gated",
        ct::BLOCKED,
        "external service db (database) not SecretResolved: Secret db-admin has no key pw",
    )
    .await?;

    // A valid Placement whose Keystone is not Ready is Blocked and names it.
    placements
        .patch(
            "waits",
            &pp,
            &Patch::Apply(obj(
                "Placement",
                "waits",
                json!({"database": {"service": {"name": "db"}}, "keystone": {"name": "gated"}}),
            )),
        )
        .await?;
    wait_cond(
        &placements,
        "waits",
        ct::BLOCKED,
        "Keystone gated is not Ready",
    )
    .await?;
    // Nothing was created for any of them.
    assert!(
        keystones
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .all(|k| k.name_any() != "stray-template-keystone"),
        "no Keystone for an invalid cluster"
    );
    assert!(
        placements
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .all(|p| p.name_any() != "no-keystone-placement"),
        "no Placement for an invalid cluster"
    );
    assert!(
        Api::<Job>::namespaced(client.clone(), &ns)
            .list(&ListParams::default())
            .await?
            .items
            .is_empty()
    );
    assert!(
        Api::<Deployment>::namespaced(client.clone(), &ns)
            .list(&ListParams::default())
            .await?
            .items
            .is_empty()
    );
    let names: Vec<String> = secrets
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|s| s.name_any())
        .collect();
    assert_eq!(names, vec!["db-admin".to_string()], "no generated Secret");
    drop(op);
    let _ = Api::<Namespace>::all(client)
        .delete(&ns, &Default::default())
        .await;
    Ok(())
}
