//! TLS of the services' own API endpoints, the I/O half of `controlplane_render::tls`: the
//! namespace CA Secret (generated once, kept), the per-service serving certificate Secrets
//! (issued from it and re-issued before they expire, or the user's own), and the CA a client
//! of a service must trust.

use std::collections::BTreeMap;

use controlplane_api::Keystone;
use controlplane_api::common::ApiTls;
use controlplane_render::objects::{self, Owner};
use controlplane_render::tls::{self, CertAndKey};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, ResourceExt};

use crate::runtime::{self, Error, State};
use crate::service::secret_str;

/// Label on the namespace CA Secret.
pub const CA_LABEL: (&str, &str) = ("app.kubernetes.io/managed-by", "openstack-operator");

/// A service's serving certificate as its Deployment uses it.
#[derive(Clone, Debug)]
pub struct Serving {
    /// The `kubernetes.io/tls` Secret mounted at `tls::POD_TLS_DIR`.
    pub secret: String,
    /// Its certificate (hashed into the pod template: a new one rolls the pods).
    pub cert: String,
    /// The CA its clients verify it with.
    pub ca: String,
}

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

fn pair(s: &Secret) -> Option<CertAndKey> {
    Some(CertAndKey {
        cert: secret_str(s, tls::TLS_CRT)?,
        key: secret_str(s, tls::TLS_KEY)?,
    })
}

/// The namespace CA: read from Secret `openstack-ca`, or generated and stored there once.
/// Created (never replaced) so that concurrent passes of several services agree on one CA: a
/// pass that loses the race reads the winner's.
pub async fn namespace_ca(
    client: &kube::Client,
    ns: &str,
) -> Result<Result<CertAndKey, State>, Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    if let Some(s) = api.get_opt(tls::CA_SECRET).await? {
        return Ok(pair(&s).ok_or_else(|| State::Blocked {
            reason: "CaSecretInvalid".into(),
            message: format!(
                "Secret {} lacks {} or {}",
                tls::CA_SECRET,
                tls::TLS_CRT,
                tls::TLS_KEY
            ),
        }));
    }
    let ca = match tls::generate_ca(&format!("openstack-operator CA ({ns})"), now()) {
        Ok(ca) => ca,
        Err(e) => {
            return Ok(Err(State::Degraded {
                reason: "CaGenerationFailed".into(),
                message: e.to_string(),
            }));
        }
    };
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(tls::CA_SECRET.into()),
            namespace: Some(ns.into()),
            labels: Some(BTreeMap::from([(
                CA_LABEL.0.to_string(),
                CA_LABEL.1.to_string(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some(tls::SECRET_TYPE.into()),
        data: Some(bytes(tls::secret_data(&ca, &ca.cert))),
        ..Secret::default()
    };
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => Ok(Ok(ca)),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let s = api.get(tls::CA_SECRET).await?;
            Ok(pair(&s).ok_or_else(|| State::Blocked {
                reason: "CaSecretInvalid".into(),
                message: format!("Secret {} is incomplete", tls::CA_SECRET),
            }))
        }
        Err(e) => Err(e.into()),
    }
}

fn bytes(data: BTreeMap<String, String>) -> BTreeMap<String, ByteString> {
    data.into_iter()
        .map(|(k, v)| (k, ByteString(v.into_bytes())))
        .collect()
}

/// The serving certificate of Service `service` (`<name>-api`) under `spec`: the user's Secret
/// as it is, or `<service>-tls` issued from the namespace CA with the Service's names plus
/// `extra_names` (public host names), re-issued when it nears expiry, lacks a name or comes
/// from another CA. Blocked while a user's Secret is missing or incomplete.
pub async fn serving(
    client: &kube::Client,
    ns: &str,
    owner: &Owner,
    service: &str,
    spec: &ApiTls,
    extra_names: &[String],
) -> Result<Result<Serving, State>, Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    if let Some(name) = &spec.secret_name {
        let Some(s) = api.get_opt(name).await? else {
            return Ok(Err(State::Blocked {
                reason: "SecretMissing".into(),
                message: format!("TLS Secret {name} not found"),
            }));
        };
        let (Some(cert), Some(_), Some(ca)) = (
            secret_str(&s, tls::TLS_CRT),
            secret_str(&s, tls::TLS_KEY),
            secret_str(&s, tls::CA_CRT),
        ) else {
            return Ok(Err(State::Blocked {
                reason: "SecretMissing".into(),
                message: format!(
                    "TLS Secret {name} needs {}, {} and {}",
                    tls::TLS_CRT,
                    tls::TLS_KEY,
                    tls::CA_CRT
                ),
            }));
        };
        return Ok(Ok(Serving {
            secret: name.clone(),
            cert,
            ca,
        }));
    }
    let ca = match namespace_ca(client, ns).await? {
        Ok(ca) => ca,
        Err(s) => return Ok(Err(s)),
    };
    let mut names = tls::service_dns_names(service, ns);
    names.extend(extra_names.iter().cloned());
    let secret_name = format!("{service}-tls");
    let existing = api.get_opt(&secret_name).await?;
    let current = existing.as_ref().and_then(pair).filter(|c| {
        tls::reissue_reason(&c.cert, &ca.cert, &names, now()).is_none()
            && existing
                .as_ref()
                .and_then(|s| secret_str(s, tls::CA_CRT))
                .is_some_and(|c| c == ca.cert)
    });
    let cert = match current {
        Some(c) => c,
        None => match tls::issue_serving(&ca, &names, now()) {
            Ok(c) => c,
            Err(e) => {
                return Ok(Err(State::Degraded {
                    reason: "CertificateIssueFailed".into(),
                    message: e.to_string(),
                }));
            }
        },
    };
    let mut secret = objects::secret(
        owner,
        &secret_name,
        "tls",
        tls::secret_data(&cert, &ca.cert),
    );
    secret.type_ = Some(tls::SECRET_TYPE.into());
    runtime::apply(&api, &secret).await?;
    Ok(Ok(Serving {
        secret: secret_name,
        cert: cert.cert,
        ca: ca.cert,
    }))
}

/// The CA bundle clients of Keystone `ks` verify it with: none when it serves plain HTTP, the
/// `ca.crt` of its own Secret, or the namespace CA.
pub async fn keystone_ca(client: &kube::Client, ks: &Keystone) -> Result<Option<String>, Error> {
    let ns = ks.namespace().unwrap_or_default();
    api_ca(client, &ns, ks.spec.template.tls.as_ref()).await
}

/// The CA bundle clients of an API in `ns` with TLS settings `spec` verify it with: none when
/// it serves plain HTTP (or the CA is not readable yet), the `ca.crt` of the user's Secret, or
/// the namespace CA's certificate.
pub async fn api_ca(
    client: &kube::Client,
    ns: &str,
    spec: Option<&ApiTls>,
) -> Result<Option<String>, Error> {
    let Some(spec) = spec else {
        return Ok(None);
    };
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let name = spec.secret_name.as_deref().unwrap_or(tls::CA_SECRET);
    let key = if spec.secret_name.is_some() {
        tls::CA_CRT
    } else {
        tls::TLS_CRT
    };
    Ok(api.get_opt(name).await?.and_then(|s| secret_str(&s, key)))
}

/// The namespace CA's certificate when the Secret exists (services reaching peers through the
/// catalog trust it: every certificate the operator issues chains to it).
pub async fn namespace_ca_cert(client: &kube::Client, ns: &str) -> Result<Option<String>, Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    Ok(api
        .get_opt(tls::CA_SECRET)
        .await?
        .and_then(|s| secret_str(&s, tls::TLS_CRT)))
}

/// A reqwest client for the operator's own checks, verifying our APIs with `ca` when given.
pub fn client(timeout: std::time::Duration, ca: Option<&str>) -> Result<reqwest::Client, String> {
    let mut b = reqwest::Client::builder().timeout(timeout);
    if let Some(ca) = ca {
        let certs = reqwest::Certificate::from_pem_bundle(ca.as_bytes())
            .map_err(|e| format!("the API CA bundle: {e}"))?;
        for c in certs {
            b = b.add_root_certificate(c);
        }
    }
    b.build().map_err(|e| e.to_string())
}
