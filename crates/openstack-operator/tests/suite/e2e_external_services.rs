//! End to end: the OpenStackExternalService controller of `openstack-operator control-plane`
//! against the real servers of `scripts/external-services` (MariaDB, RabbitMQ, memcached, OVN,
//! the Ceph RADOS Gateway for objectStorage; each over TLS from the harness's CA, OVN with a
//! client certificate). The
//! TLS material and credentials reach the checks through Secrets, as in a cluster. Each good
//! service ends Ready with every sub-condition True; each broken one names the failing
//! sub-condition; fixing a Secret makes its service Ready.
//!
//! Needs `scripts/external-services up` (scripts/test starts it); EXTERNAL_SERVICES_ENV or the
//! default path names its env file.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context as _;
use controlplane_api::condition_types as ct;
use e2e::{Check, Target, wait_for};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_openstack-operator");
const WAIT: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(500);
const WRONG_S3_SECRET: &str = "wrong-s3-secret-key";

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

fn harness_env() -> anyhow::Result<BTreeMap<String, String>> {
    let path = std::env::var("EXTERNAL_SERVICES_ENV")
        .unwrap_or_else(|_| "/var/cache/openstack-operator/external-services/env".into());
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {path}: run scripts/external-services up"))?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().trim_matches('"').to_string()))
        .collect())
}

fn secret(name: &str, data: &[(&str, Vec<u8>)]) -> Secret {
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.clone())))
                .collect(),
        ),
        ..Default::default()
    }
}

fn cond(v: &Value, t: &str) -> Option<(String, String, String)> {
    v["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or("").into(),
                c["reason"].as_str().unwrap_or("").into(),
                c["message"].as_str().unwrap_or("").into(),
            )
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_services_are_checked_for_real_through_secrets() -> anyhow::Result<()> {
    let env = harness_env()?;
    let e = |k: &str| -> anyhow::Result<String> {
        env.get(k)
            .cloned()
            .with_context(|| format!("{k} missing from the external-services env"))
    };
    let file = |k: &str| -> anyhow::Result<Vec<u8>> {
        let p = e(k)?;
        std::fs::read(&p).with_context(|| format!("reading {p}"))
    };
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
    let ns = format!("cp-ext-{}", e2e::names::random_suffix());
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
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let pp = PostParams::default();
    let b = |s: String| s.into_bytes();
    for s in [
        secret("ca", &[("ca.crt", file("EXTSVC_CA")?)]),
        secret("untrusted-ca", &[("ca.crt", file("EXTSVC_UNTRUSTED_CA")?)]),
        secret(
            "client-tls",
            &[
                ("tls.crt", file("EXTSVC_CLIENT_CERT")?),
                ("tls.key", file("EXTSVC_CLIENT_KEY")?),
            ],
        ),
        secret(
            "db",
            &[
                ("username", b(e("EXTSVC_DB_USER")?)),
                ("password", b(e("EXTSVC_DB_PASSWORD")?)),
            ],
        ),
        secret(
            "mq",
            &[
                ("username", b(e("EXTSVC_AMQP_USER")?)),
                ("password", b(e("EXTSVC_AMQP_PASSWORD")?)),
            ],
        ),
        secret(
            "mq-wrong",
            &[
                ("username", b(e("EXTSVC_AMQP_USER")?)),
                ("password", b("not-it".into())),
            ],
        ),
        // S3 keys under names of their own: the credentials block maps them.
        secret(
            "s3",
            &[
                ("accessKey", b(e("EXTSVC_S3_ACCESS_KEY")?)),
                ("secretKey", b(e("EXTSVC_S3_SECRET_KEY")?)),
            ],
        ),
        secret(
            "s3-wrong",
            &[
                ("accessKey", b(e("EXTSVC_S3_ACCESS_KEY")?)),
                ("secretKey", b(WRONG_S3_SECRET.into())),
            ],
        ),
    ] {
        secrets.create(&pp, &s).await?;
    }
    let s3_creds = |name: &str| json!({"secretName": name, "usernameKey": "accessKey", "passwordKey": "secretKey"});
    let ca = json!({"caSecret": {"name": "ca"}});
    let services: Vec<(&str, Value, Option<&str>)> = vec![
        (
            "db-tls",
            json!({"type": "database", "endpoints": [e("EXTSVC_DB")?], "credentials": {"secretName": "db"}, "tls": ca, "extra": {"database": e("EXTSVC_DB_DATABASE")?}}),
            None,
        ),
        (
            "mq-tls",
            json!({"type": "messaging", "endpoints": [e("EXTSVC_AMQPS")?], "credentials": {"secretName": "mq"}, "tls": ca, "extra": {"vhost": e("EXTSVC_AMQP_VHOST")?}}),
            None,
        ),
        (
            "cache-tls",
            json!({"type": "cache", "endpoints": [e("EXTSVC_MEMCACHED_TLS")?], "tls": ca}),
            None,
        ),
        (
            "ovn-ssl",
            json!({"type": "ovn", "endpoints": [e("EXTSVC_OVN_NB_SSL")?, e("EXTSVC_OVN_SB_SSL")?], "tls": {"caSecret": {"name": "ca"}, "clientCertSecret": {"name": "client-tls"}}}),
            None,
        ),
        (
            "s3-tls",
            json!({"type": "objectStorage", "endpoints": [e("EXTSVC_S3_TLS")?], "credentials": s3_creds("s3"), "tls": ca, "extra": {"bucket": e("EXTSVC_S3_BUCKET")?}}),
            None,
        ),
        (
            "s3-wrong-secret",
            json!({"type": "objectStorage", "endpoints": [e("EXTSVC_S3_TLS")?], "credentials": s3_creds("s3-wrong"), "tls": ca}),
            Some(ct::AUTHENTICATED),
        ),
        (
            "s3-untrusted",
            json!({"type": "objectStorage", "endpoints": [e("EXTSVC_S3_TLS")?], "credentials": s3_creds("s3"), "tls": {"caSecret": {"name": "untrusted-ca"}}}),
            Some(ct::TLS_READY),
        ),
        (
            "db-untrusted",
            json!({"type": "database", "endpoints": [e("EXTSVC_DB")?], "credentials": {"secretName": "db"}, "tls": {"caSecret": {"name": "untrusted-ca"}}}),
            Some(ct::TLS_READY),
        ),
        (
            "cache-wrong-name",
            json!({"type": "cache", "endpoints": [e("EXTSVC_MEMCACHED_WRONG_NAME")?], "tls": ca}),
            Some(ct::TLS_READY),
        ),
        (
            "mq-wrong-password",
            json!({"type": "messaging", "endpoints": [e("EXTSVC_AMQP")?], "credentials": {"secretName": "mq-wrong"}, "extra": {"vhost": e("EXTSVC_AMQP_VHOST")?}}),
            Some(ct::AUTHENTICATED),
        ),
        (
            "cache-unreachable",
            json!({"type": "cache", "endpoints": [format!("127.0.0.1:{}", free_port())]}),
            Some(ct::ENDPOINT_REACHABLE),
        ),
    ];
    let ar = ApiResource {
        group: "controlplane.sunet.se".into(),
        version: "v1alpha1".into(),
        api_version: "controlplane.sunet.se/v1alpha1".into(),
        kind: "OpenStackExternalService".into(),
        plural: "openstackexternalservices".into(),
    };
    let ext: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
    for (name, spec, _) in &services {
        let obj = json!({"apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "OpenStackExternalService", "metadata": {"name": name}, "spec": spec});
        ext.patch(name, &PatchParams::apply("e2e"), &Patch::Apply(&obj))
            .await?;
    }
    let _op = Proc(
        Command::new(BIN)
            .args([
                "control-plane",
                "--controllers",
                "external-service",
                "--health-addr",
                &format!("127.0.0.1:{}", free_port()),
                "--metrics-addr",
                &format!("127.0.0.1:{}", free_port()),
                "--watch-namespace",
                &ns,
                "--check-interval-seconds",
                "3",
            ])
            .env("KUBECONFIG", target.kubeconfig())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    for (name, _, failing) in &services {
        let v = wait_for(WAIT, POLL, &format!("{name} checked"), async || {
            let v = serde_json::to_value(ext.get(name).await?)?;
            Ok(match cond(&v, ct::READY) {
                Some(_) => Check::Done(v),
                None => Check::Pending("no status".into()),
            })
        })
        .await?;
        let ready = cond(&v, ct::READY).unwrap_or_default();
        match failing {
            None => {
                assert_eq!(ready.0, "True", "{name} should be Ready: {ready:?}");
                for t in [
                    ct::SECRET_RESOLVED,
                    ct::ENDPOINT_REACHABLE,
                    ct::TLS_READY,
                    ct::AUTHENTICATED,
                ] {
                    let c = cond(&v, t).unwrap_or_default();
                    assert_eq!(c.0, "True", "{name} {t}: {c:?}");
                }
            }
            Some(t) => {
                assert_eq!(ready.0, "False", "{name} should not be Ready");
                let c = cond(&v, t).unwrap_or_default();
                assert_eq!(c.0, "False", "{name} should fail {t}: {:?}", v["status"]);
                assert!(
                    ready.2.starts_with(&format!("{t} failed:")),
                    "{name}: Ready names {t}: {ready:?}"
                );
            }
        }
    }
    // The S3 failures name their reasons: the access key and the gateway's error for a wrong
    // secret key (which itself never reaches the status), an untrusted certificate.
    let v = serde_json::to_value(ext.get("s3-wrong-secret").await?)?;
    let auth = cond(&v, ct::AUTHENTICATED).unwrap_or_default();
    assert_eq!(auth.1, "AccessDenied", "{auth:?}");
    assert!(
        auth.2.contains(&e("EXTSVC_S3_ACCESS_KEY")?) && auth.2.contains("SignatureDoesNotMatch"),
        "{auth:?}"
    );
    assert!(
        !v["status"].to_string().contains(WRONG_S3_SECRET),
        "the secret key stays out of the status"
    );
    let v = serde_json::to_value(ext.get("s3-untrusted").await?)?;
    let tls = cond(&v, ct::TLS_READY).unwrap_or_default();
    assert_eq!(tls.1, "CertificateNotTrusted", "{tls:?}");
    let v = serde_json::to_value(ext.get("s3-tls").await?)?;
    let auth = cond(&v, ct::AUTHENTICATED).unwrap_or_default();
    assert!(
        auth.2
            .contains(&format!("bucket {} accessible", e("EXTSVC_S3_BUCKET")?)),
        "the signed request reached the bucket: {auth:?}"
    );

    // A Secret fix is picked up: the wrong password becomes the right one.
    let mut s = secrets.get("mq-wrong").await?;
    s.data = secret(
        "x",
        &[
            ("username", b(e("EXTSVC_AMQP_USER")?)),
            ("password", b(e("EXTSVC_AMQP_PASSWORD")?)),
        ],
    )
    .data;
    secrets.replace("mq-wrong", &pp, &s).await?;
    wait_for(
        WAIT,
        POLL,
        "mq-wrong-password to become Ready after its Secret was fixed",
        async || {
            let v = serde_json::to_value(ext.get("mq-wrong-password").await?)?;
            Ok(match cond(&v, ct::READY) {
                Some((s, _, _)) if s == "True" => Check::Done(()),
                other => Check::Pending(format!("{other:?}")),
            })
        },
    )
    .await?;
    let _ = Api::<Namespace>::all(client)
        .delete(&ns, &Default::default())
        .await;
    Ok(())
}
