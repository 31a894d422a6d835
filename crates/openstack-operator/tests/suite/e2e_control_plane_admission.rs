//! End to end: the control-plane operator's validating webhook, installed as a
//! ValidatingWebhookConfiguration on the Kubernetes API emulator (which calls it as
//! kube-apiserver does), refuses an `OpenStackCluster` naming an external service of the wrong
//! type and an unsupported release with the exact message a user sees, admits a valid one
//! (and one whose external service does not exist yet), and with the webhook down refuses
//! writes under `failurePolicy: Fail` and admits them under `Ignore`. Status writes do not
//! match the `openstackclusters` rule, so the operator's own status updates never depend on
//! the webhook.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use e2e::{Check, wait_for};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_openstack-operator");
const WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(200);
const HOOK: &str = "validate.controlplane.sunet.se";

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

fn obj(kind: &str, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({"apiVersion": "controlplane.sunet.se/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec}))
        .unwrap_or_else(|e| panic!("test object {name}: {e}"))
}

/// A CA and a serving certificate for 127.0.0.1 signed by it, as PEM (CA, cert, key).
fn certificates() -> anyhow::Result<(String, String, String)> {
    let ca_key = rcgen::KeyPair::generate()?;
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "admission-e2e-ca");
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate()?;
    let mut leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])?;
    leaf.distinguished_name
        .push(rcgen::DnType::CommonName, "openstack-operator-webhook");
    let cert = leaf.signed_by(&key, &issuer)?;
    Ok((ca_cert.pem(), cert.pem(), key.serialize_pem()))
}

/// The control-plane operator with its external-service controller and its webhook on `port`
/// serving the `cert`/`key` files.
fn operator(
    ns: &str,
    port: u16,
    cert: &std::path::Path,
    key: &std::path::Path,
    kubeconfig: &std::path::Path,
) -> std::io::Result<Child> {
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
            ns,
            "--webhook-addr",
            &format!("127.0.0.1:{port}"),
            "--webhook-cert-file",
        ])
        .arg(cert)
        .arg("--webhook-key-file")
        .arg(key)
        .env("KUBECONFIG", kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
}

/// The repository's ValidatingWebhookConfiguration, pointed at `url` and trusting `ca`.
fn packaged_config(url: &str, ca: &str) -> anyhow::Result<ValidatingWebhookConfiguration> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/kustomize/components/control-plane-webhook/validatingwebhookconfiguration.yaml"
    );
    let mut config: Value = serde_saphyr::from_str(&std::fs::read_to_string(path)?)?;
    config["webhooks"][0]["clientConfig"] = json!({
        "url": url,
        "caBundle": serde_json::to_value(ByteString(ca.as_bytes().to_vec()))?,
    });
    Ok(serde_json::from_value(config)?)
}

async fn create_err(api: &Api<DynamicObject>, o: &DynamicObject) -> Option<kube::core::Status> {
    match api.create(&PostParams::default(), o).await {
        Ok(_) => None,
        Err(kube::Error::Api(s)) => Some(*s),
        Err(e) => panic!("create failed without a Status: {e}"),
    }
}

async fn admitted(api: &Api<DynamicObject>, o: &DynamicObject) {
    if let Some(s) = create_err(api, o).await {
        panic!("{:?} was refused: {s:?}", o.metadata.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_refuses_cross_object_errors_with_their_message() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("admission-e2e-{}", e2e::names::random_suffix()));
    std::fs::create_dir_all(&dir)?;
    let kubeconfig = dir.join("kubeconfig");
    let emulator = kube_emulator::Emulator::start(kube_emulator::EmulatorOptions {
        kubeconfig_path: Some(kubeconfig.clone()),
        ..Default::default()
    })
    .await?;
    let client = emulator.client().await?;
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
            let ok = crds
                .get(&name)
                .await?
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
    let ns = "cp-admission";
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
        )
        .await?;
    let ext = api(
        &client,
        ns,
        "OpenStackExternalService",
        "openstackexternalservices",
    );
    let clusters = api(&client, ns, "OpenStackCluster", "openstackclusters");
    for (name, type_) in [("db", "database"), ("mq", "messaging")] {
        // Unreachable endpoints: only the type matters here.
        ext.create(
            &PostParams::default(),
            &obj(
                "OpenStackExternalService",
                name,
                json!({"type": type_, "endpoints": ["127.0.0.1:1"], "credentials": {"secretName": "none"}}),
            ),
        )
        .await?;
    }

    let (ca, cert, key) = certificates()?;
    std::fs::write(dir.join("tls.crt"), &cert)?;
    std::fs::write(dir.join("tls.key"), &key)?;
    let port = free_port();
    let mut op = Some(Proc(operator(
        ns,
        port,
        &dir.join("tls.crt"),
        &dir.join("tls.key"),
        &kubeconfig,
    )?));
    wait_for(WAIT, POLL, "webhook listening", async || {
        Ok(
            match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
                Ok(_) => Check::Done(()),
                Err(e) => Check::Pending(e.to_string()),
            },
        )
    })
    .await?;

    let url = format!("https://127.0.0.1:{port}/validate");
    // The packaged configuration (kustomize component, Helm chart, OLM bundle), reached by URL
    // instead of through the in-cluster Service.
    let config = packaged_config(&url, &ca)?;
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    configs.create(&PostParams::default(), &config).await?;

    // Wrong type: refused at create, naming the field, the object and both types.
    let wrong = obj(
        "OpenStackCluster",
        "wrong-type",
        json!({"services": ["keystone"], "externalServices": {"database": {"name": "db"}, "messaging": {"name": "db"}}}),
    );
    let s = create_err(&clusters, &wrong)
        .await
        .expect("wrong-type was admitted");
    assert_eq!(s.code, 403, "{s:?}");
    assert_eq!(s.reason, "Forbidden", "{s:?}");
    assert_eq!(
        s.message,
        format!(
            "admission webhook \"{HOOK}\" denied the request: spec.externalServices.messaging: \
             OpenStackExternalService \"db\" is of type database, expected messaging"
        )
    );
    // A release outside the supported set, and a service without the role it needs.
    let s = create_err(
        &clusters,
        &obj(
            "OpenStackCluster",
            "old-release",
            json!({"release": "2025.1", "services": ["keystone", "nova"], "externalServices": {"database": {"name": "db"}}}),
        ),
    )
    .await
    .expect("old-release was admitted");
    assert_eq!(
        s.message,
        format!(
            "admission webhook \"{HOOK}\" denied the request: spec.release: release \"2025.1\" is \
             not supported; supported: {}; spec.services[1]: nova needs an external service of \
             role messaging: set spec.externalServices.messaging",
            controlplane_api::admission::supported_releases().join(", ")
        )
    );
    // Valid, and valid with a reference that does not exist yet (the controller reports it
    // as Blocked): admitted.
    let good = obj(
        "OpenStackCluster",
        "good",
        json!({"services": ["keystone"], "externalServices": {"database": {"name": "db"}, "messaging": {"name": "mq"}}}),
    );
    admitted(&clusters, &good).await;
    let later = obj(
        "OpenStackCluster",
        "later",
        json!({"services": ["keystone"], "externalServices": {"database": {"name": "db-created-later"}}}),
    );
    admitted(&clusters, &later).await;
    // UPDATE is checked too.
    let err = clusters
        .patch(
            "good",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"externalServices": {"messaging": {"name": "db"}}}})),
        )
        .await
        .expect_err("a wrong-type update was admitted");
    assert!(
        err.to_string().contains(
            "spec.externalServices.messaging: OpenStackExternalService \"db\" is of type database"
        ),
        "{err}"
    );

    // Every service kind is checked: a Nova whose messaging names the database.
    let novas = api(&client, ns, "Nova", "novas");
    let s = create_err(
        &novas,
        &obj(
            "Nova",
            "nova",
            json!({"database": {"service": {"name": "db"}}, "messaging": {"name": "db"},
                   "keystone": {"name": "ks"}, "placement": {"name": "pl"}}),
        ),
    )
    .await
    .expect("a Nova with a database as messaging was admitted");
    assert_eq!(
        s.message,
        format!(
            "admission webhook \"{HOOK}\" denied the request: spec.messaging: \
             OpenStackExternalService \"db\" is of type database, expected messaging"
        )
    );

    // Renewal (as cert-manager or OLM do it): a new CA and certificate in the files and the
    // new CA in the configuration. The running webhook serves the new certificate without a
    // restart; until it does, the API server cannot verify it and the call fails.
    let (ca2, cert2, key2) = certificates()?;
    std::fs::write(dir.join("tls.key"), &key2)?;
    std::fs::write(dir.join("tls.crt"), &cert2)?;
    configs
        .replace(
            "openstack-operator-control-plane",
            &PostParams::default(),
            &{
                let mut c = packaged_config(&url, &ca2)?;
                c.metadata.resource_version = configs
                    .get("openstack-operator-control-plane")
                    .await?
                    .metadata
                    .resource_version;
                c
            },
        )
        .await?;
    wait_for(WAIT, POLL, "the renewed certificate served", async || {
        let s = create_err(&clusters, &wrong).await;
        Ok(match s {
            Some(s) if s.code == 403 => Check::Done(()),
            other => Check::Pending(format!("{other:?}")),
        })
    })
    .await?;

    // Webhook down, failurePolicy Fail: every matching write is refused, naming the webhook.
    drop(op.take());
    let s = create_err(
        &clusters,
        &obj(
            "OpenStackCluster",
            "while-down",
            json!({"services": ["keystone"], "externalServices": {"database": {"name": "db"}}}),
        ),
    )
    .await
    .expect("admitted while the webhook was down under failurePolicy Fail");
    assert_eq!(s.code, 500, "{s:?}");
    assert_eq!(s.reason, "InternalError", "{s:?}");
    let prefix = format!(
        "Internal error occurred: failed calling webhook \"{HOOK}\": failed to call webhook: Post \"{url}\": "
    );
    assert!(s.message.starts_with(&prefix), "{}", s.message);
    // The status subresource does not match the `openstackclusters` rule.
    clusters
        .patch_status(
            "good",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"observedGeneration": 1}})),
        )
        .await?;
    // failurePolicy Ignore: admitted while the webhook is down.
    configs
        .patch(
            "openstack-operator-control-plane",
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(json!([
                {"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}
            ]))?),
        )
        .await?;
    admitted(
        &clusters,
        &obj(
            "OpenStackCluster",
            "while-down",
            json!({"services": ["keystone"], "externalServices": {"database": {"name": "db"}}}),
        ),
    )
    .await;

    // A webhook that cannot serve (no certificate) stops the operator with a failure exit,
    // so the pod restarts visibly instead of running without its webhook.
    let mut broken = Proc(operator(
        ns,
        free_port(),
        &dir.join("missing.crt"),
        &dir.join("missing.key"),
        &kubeconfig,
    )?);
    let status = wait_for(WAIT, POLL, "the operator exits", async || {
        Ok(match broken.0.try_wait()? {
            Some(status) => Check::Done(status),
            None => Check::Pending("running".into()),
        })
    })
    .await?;
    assert!(!status.success(), "exit {status:?}");

    emulator.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
