//! The control-plane operator's validating admission webhook: the checks CEL cannot make
//! because they need another object (the type of a referenced `OpenStackExternalService`) or
//! the operator's own knowledge (the supported releases, the roles a service needs). The
//! checks themselves are pure ([`controlplane_api::admission`]); this module reads the
//! referenced objects and speaks AdmissionReview `admission.k8s.io/v1` over HTTPS at
//! `/validate`.
//!
//! The wire types are the few fields of AdmissionReview the webhook reads and writes (see
//! <https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/#request>).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::routing::post;
use controlplane_api::admission as checks;
use controlplane_api::{
    CinderSpec, GlanceSpec, HorizonSpec, KeystoneSpec, NeutronSpec, NovaSpec, OpenStackClusterSpec,
    OpenStackExternalService, PlacementSpec, ServiceKind,
};
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// How often the certificate files are compared with the certificate served. The kubelet
/// itself refreshes a Secret volume only every minute or so.
const CERT_RELOAD_EVERY: std::time::Duration = std::time::Duration::from_secs(15);

/// Where and with which certificate the webhook listens.
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    /// Listen address.
    pub addr: SocketAddr,
    /// PEM certificate chain (leaf first).
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
}

/// The admission decision for one request: `None` admits, `Some((code, reason, message))`
/// refuses.
type Decision = Option<(u16, &'static str, String)>;

/// Serves `/validate` over TLS until `stop`.
pub async fn serve(
    cfg: WebhookConfig,
    client: Client,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let serving = vk_kubelet_api::tls::load_serving(&cfg.cert, &cfg.key)
        .context("--webhook-cert-file/--webhook-key-file")?;
    let cert = Arc::new(vk_kubelet_api::serving_cert::ReloadableCert::empty());
    cert.set(serving)
        .context("--webhook-cert-file/--webhook-key-file")?;
    // cert-manager and OLM renew the certificate in the mounted Secret: serve the new one
    // without a restart (the API server's caBundle is updated by them alongside).
    tokio::spawn(vk_kubelet_api::serving_cert::follow_files(
        cfg.cert.clone(),
        cfg.key.clone(),
        cert.clone(),
        CERT_RELOAD_EVERY,
        stop.clone(),
    ));
    let tls = vk_kubelet_api::tls::server_config_with(cert, None)?;
    let listener = tokio::net::TcpListener::bind(cfg.addr)
        .await
        .with_context(|| format!("binding the webhook address {}", cfg.addr))?;
    info!(addr = %cfg.addr, "admission webhook listening (HTTPS, /validate)");
    let app = Router::new()
        .route("/validate", post(validate))
        .with_state(client);
    vk_kubelet_api::tls::serve(listener, tls, app, stop).await;
    Ok(())
}

/// POST /validate: one AdmissionReview in, the same with `response` out. A body that is not an
/// AdmissionReview gets a refusal naming what is missing (the API server then fails the call
/// per the webhook's failurePolicy).
async fn validate(State(client): State<Client>, Json(review): Json<Value>) -> Json<Value> {
    let request = review.get("request").cloned().unwrap_or(Value::Null);
    let uid = request
        .get("uid")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let decision = match decide(&client, &request).await {
        Ok(d) => d,
        Err(e) => {
            warn!(error = %format!("{e:#}"), "admission webhook could not decide; refusing");
            Some((500, "InternalError", format!("{e:#}")))
        }
    };
    let response = match decision {
        None => json!({"uid": uid, "allowed": true}),
        Some((code, reason, message)) => json!({
            "uid": uid,
            "allowed": false,
            "status": {"status": "Failure", "code": code, "reason": reason, "message": message},
        }),
    };
    Json(json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    }))
}

fn spec_of<T: DeserializeOwned>(obj: Option<&Value>) -> anyhow::Result<Option<T>> {
    match obj.and_then(|o| o.get("spec")) {
        None | Some(Value::Null) => Ok(None),
        Some(s) => Ok(Some(
            serde_json::from_value(s.clone()).context("reading spec")?,
        )),
    }
}

/// Reads the types of the referenced external services that exist (missing ones are not
/// refused: the controllers report them as Blocked until they appear).
async fn found_types(
    client: &Client,
    ns: &str,
    refs: &[checks::Reference],
) -> anyhow::Result<BTreeMap<String, ServiceKind>> {
    let api: Api<OpenStackExternalService> = Api::namespaced(client.clone(), ns);
    let mut found = BTreeMap::new();
    for r in refs {
        if r.name.is_empty() || found.contains_key(&r.name) {
            continue;
        }
        if let Some(svc) = api
            .get_opt(&r.name)
            .await
            .with_context(|| format!("reading OpenStackExternalService {ns}/{}", r.name))?
        {
            found.insert(r.name.clone(), svc.spec.type_);
        }
    }
    Ok(found)
}

/// The refusals of a service kind's object (none when it has no spec, e.g. a DELETE).
async fn service<S: DeserializeOwned + checks::ServiceAdmission>(
    client: &Client,
    ns: &str,
    object: Option<&Value>,
    old: Option<&Value>,
) -> anyhow::Result<Vec<api::FieldError>> {
    let Some(spec) = spec_of::<S>(object)? else {
        return Ok(Vec::new());
    };
    let old = spec_of::<S>(old)?;
    let found = found_types(client, ns, &spec.references()).await?;
    Ok(checks::check_service(&spec, old.as_ref(), &found))
}

async fn decide(client: &Client, request: &Value) -> anyhow::Result<Decision> {
    let kind = request
        .pointer("/kind/kind")
        .and_then(Value::as_str)
        .context("request.kind.kind is missing")?;
    let ns = request
        .get("namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let object = request.get("object");
    let old = request.get("oldObject").filter(|o| !o.is_null());
    let errors = match kind {
        "OpenStackCluster" => {
            let Some(spec) = spec_of::<OpenStackClusterSpec>(object)? else {
                return Ok(None);
            };
            let old = spec_of::<OpenStackClusterSpec>(old)?;
            let found = found_types(client, ns, &checks::cluster_references(&spec)).await?;
            checks::check_cluster(&spec, old.as_ref(), &found)
        }
        "Keystone" => service::<KeystoneSpec>(client, ns, object, old).await?,
        "Placement" => service::<PlacementSpec>(client, ns, object, old).await?,
        "Glance" => service::<GlanceSpec>(client, ns, object, old).await?,
        "Nova" => service::<NovaSpec>(client, ns, object, old).await?,
        "Neutron" => service::<NeutronSpec>(client, ns, object, old).await?,
        "Cinder" => service::<CinderSpec>(client, ns, object, old).await?,
        "Horizon" => service::<HorizonSpec>(client, ns, object, old).await?,
        // Registered for kinds this version does not check: admit rather than block them.
        _ => return Ok(None),
    };
    if errors.is_empty() {
        return Ok(None);
    }
    let name = request.get("name").and_then(Value::as_str).unwrap_or("");
    let message = api::validation::summarize(&errors);
    info!(kind, namespace = ns, name, %message, "admission refused");
    Ok(Some((403, "Forbidden", message)))
}
