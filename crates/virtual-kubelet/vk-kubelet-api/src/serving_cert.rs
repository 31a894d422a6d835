//! The serving certificate from the cluster: a `kubernetes.io/kubelet-serving`
//! CertificateSigningRequest, as a kubelet with `serverTLSBootstrap` makes
//! it, waited for, served, and renewed before it expires without a restart.
//!
//! The request carries what the signer and the usual approvers check: CN
//! `system:node:<node>`, O `system:nodes`, the node's addresses as SANs
//! (IP SANs for IPs, DNS SANs for names), usages `digital signature` and
//! `server auth` (an ECDSA key: no key encipherment). The cluster never
//! auto-approves these requests; an administrator (`kubectl certificate
//! approve`) or an approver controller must, and the log says so while we wait.

use std::net::IpAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use kube::api::{Api, ObjectMeta, PostParams, WatchParams};
use kube::core::WatchEvent;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::tls::{Serving, TlsError};

/// The signer of kubelet serving certificates.
pub const SIGNER: &str = "kubernetes.io/kubelet-serving";
/// Label on our requests, naming the node (for `kubectl get csr -l`).
pub const NODE_LABEL: &str = "virtual-kubelet.sunet.se/node";

/// Why no certificate could be had.
#[derive(Debug, thiserror::Error)]
pub enum CsrError {
    /// Building the key or the request failed.
    #[error("building the certificate request: {0}")]
    Build(String),
    /// The Kubernetes API refused or failed.
    #[error("CertificateSigningRequest {name}: {source}")]
    Api {
        /// The request's name (empty before it was created).
        name: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// An approver denied the request, or the signer failed it.
    #[error("CertificateSigningRequest {name} was {how}: {why}")]
    Refused {
        /// The request's name.
        name: String,
        /// `denied` or `failed`.
        how: &'static str,
        /// The condition's reason and message.
        why: String,
    },
    /// The issued certificate is unusable.
    #[error("CertificateSigningRequest {name}: the issued certificate {why}")]
    BadCertificate {
        /// The request's name.
        name: String,
        /// What is wrong with it.
        why: String,
    },
}

/// A private key and the PEM request for it.
pub struct KeyAndRequest {
    /// The request (PEM `CERTIFICATE REQUEST`).
    pub request_pem: String,
    /// Its private key.
    pub key: PrivateKeyDer<'static>,
}

/// Build the key and request for `node` with `addresses` (IPs or DNS names) as SANs.
pub fn build_request(node: &str, addresses: &[String]) -> Result<KeyAndRequest, CsrError> {
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    for a in addresses {
        let san = match a.parse::<IpAddr>() {
            Ok(ip) => rcgen::SanType::IpAddress(ip),
            Err(_) => rcgen::SanType::DnsName(
                a.clone()
                    .try_into()
                    .map_err(|e| CsrError::Build(format!("address {a:?}: {e}")))?,
            ),
        };
        if !params.subject_alt_names.contains(&san) {
            params.subject_alt_names.push(san);
        }
    }
    let key = rcgen::KeyPair::generate().map_err(|e| CsrError::Build(e.to_string()))?;
    let request_pem = params
        .serialize_request(&key)
        .and_then(|r| r.pem())
        .map_err(|e| CsrError::Build(e.to_string()))?;
    Ok(KeyAndRequest {
        request_pem,
        key: PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    })
}

/// Validity of an issued certificate (Unix seconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    /// notBefore.
    pub not_before: i64,
    /// notAfter.
    pub not_after: i64,
}

impl Validity {
    /// When to ask for the next certificate: after 80 % of the lifetime,
    /// as the kubelet's certificate manager does (it picks 70–90 %); never
    /// in the past.
    pub fn renew_at(&self, now: i64) -> i64 {
        let life = (self.not_after - self.not_before).max(0);
        (self.not_before + life * 4 / 5).max(now)
    }
}

/// Parse the issued chain (PEM) and the leaf's validity.
pub fn parse_issued(pem: &[u8]) -> Result<(Vec<CertificateDer<'static>>, Validity), String> {
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("is not PEM: {e}"))?;
    let leaf = chain.first().ok_or("holds no certificate")?;
    let (_, cert) =
        x509_parser::parse_x509_certificate(leaf).map_err(|e| format!("does not parse: {e}"))?;
    let v = cert.validity();
    let validity = Validity {
        not_before: v.not_before.timestamp(),
        not_after: v.not_after.timestamp(),
    };
    Ok((chain, validity))
}

/// The serving certificate, replaceable while connections are served.
#[derive(Debug)]
pub struct ReloadableCert {
    current: RwLock<Option<Arc<CertifiedKey>>>,
}

impl ReloadableCert {
    /// Nothing to serve yet: handshakes fail until [`ReloadableCert::set`].
    pub fn empty() -> Self {
        Self {
            current: RwLock::new(None),
        }
    }

    /// Serve `serving` from the next handshake on.
    pub fn set(&self, serving: Serving) -> Result<(), TlsError> {
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let key = provider
            .key_provider
            .load_private_key(serving.key)
            .map_err(|e| TlsError::Config(format!("serving key: {e}")))?;
        let ck = CertifiedKey::new(serving.chain, key);
        // A key that does not belong to the certificate would fail every handshake: keep
        // serving the previous pair instead (e.g. a half-replaced pair of files).
        ck.keys_match()
            .map_err(|e| TlsError::Config(format!("serving key and certificate: {e}")))?;
        let ck = Arc::new(ck);
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Some(ck);
        Ok(())
    }

    /// The leaf certificate now served, if any.
    pub fn leaf(&self) -> Option<CertificateDer<'static>> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(|c| c.cert.first().cloned())
    }
}

impl ResolvesServerCert for ReloadableCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Keeps `target` serving the pair in the `cert` and `key` files (e.g. a cert-manager or OLM
/// Secret mounted as a volume): reads them every `every` and swaps in a changed pair from the
/// next handshake on, so a renewed certificate is served without a restart. Content, not
/// mtime, is compared: the kubelet replaces a Secret volume's files by a symlink swap. A pair
/// that does not load (unreadable, or a key of another certificate) is logged and the
/// previous one kept. The first pair is the caller's to load (a start without one fails).
pub async fn follow_files(
    cert: std::path::PathBuf,
    key: std::path::PathBuf,
    target: Arc<ReloadableCert>,
    every: Duration,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        // The leaf in the file against the leaf served: nothing to remember between reads,
        // and a pair that failed to load is retried until it is whole.
        let on_disk = crate::tls::load_certs(&cert, "certificate")
            .ok()
            .and_then(|c| c.into_iter().next());
        if on_disk.is_none() || on_disk == target.leaf() {
            continue;
        }
        match crate::tls::load_serving(&cert, &key).and_then(|s| target.set(s)) {
            Ok(()) => info!(cert = %cert.display(), "serving certificate reloaded"),
            Err(e) => {
                warn!(error = %e, cert = %cert.display(), "keeping the previous serving certificate")
            }
        }
    }
}

/// Submit a request and wait until it is issued (or denied/failed).
pub async fn request_certificate(
    client: kube::Client,
    node: &str,
    addresses: &[String],
) -> Result<(Serving, Validity), CsrError> {
    let KeyAndRequest { request_pem, key } = build_request(node, addresses)?;
    let api: Api<CertificateSigningRequest> = Api::all(client);
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta {
            generate_name: Some(format!("{node}-serving-")),
            labels: Some([(NODE_LABEL.to_string(), node.to_string())].into()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request_pem.into_bytes()),
            signer_name: SIGNER.into(),
            usages: Some(vec!["digital signature".into(), "server auth".into()]),
            ..Default::default()
        },
        status: None,
    };
    let made = api
        .create(&PostParams::default(), &csr)
        .await
        .map_err(|source| CsrError::Api {
            name: String::new(),
            source,
        })?;
    let name = made.metadata.name.clone().unwrap_or_default();
    info!(
        csr = %name,
        node,
        "requested the kubelet serving certificate; it needs approval: kubectl certificate approve {name}"
    );
    let pem = wait_issued(&api, &name).await?;
    let (chain, validity) = parse_issued(&pem).map_err(|why| CsrError::BadCertificate {
        name: name.clone(),
        why,
    })?;
    info!(csr = %name, not_after = validity.not_after, "kubelet serving certificate issued");
    Ok((Serving { chain, key }, validity))
}

/// The certificate once issued; an error once denied or failed.
async fn wait_issued(
    api: &Api<CertificateSigningRequest>,
    name: &str,
) -> Result<Vec<u8>, CsrError> {
    let api_err = |source| CsrError::Api {
        name: name.to_string(),
        source,
    };
    let mut last_hint = tokio::time::Instant::now();
    loop {
        let cur = api.get(name).await.map_err(api_err)?;
        if let Some(done) = issued_or_refused(name, &cur) {
            return done;
        }
        let rv = cur.metadata.resource_version.clone().unwrap_or_default();
        let wp = WatchParams::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(60);
        let mut stream = api.watch(&wp, &rv).await.map_err(api_err)?.boxed();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => {
                    if let Some(done) = issued_or_refused(name, &o) {
                        return done;
                    }
                }
                Ok(WatchEvent::Deleted(_)) => {
                    return Err(CsrError::Refused {
                        name: name.to_string(),
                        how: "deleted",
                        why: "before a certificate was issued".into(),
                    });
                }
                Ok(_) => {}
                Err(e) => {
                    warn!(csr = name, error = %e, "watching the certificate request; re-reading it");
                    break;
                }
            }
        }
        if last_hint.elapsed() > Duration::from_secs(300) {
            info!(
                csr = name,
                "still waiting for approval: kubectl certificate approve {name}"
            );
            last_hint = tokio::time::Instant::now();
        }
    }
}

/// Whether `csr` is finished: its certificate, or why it never will be.
fn issued_or_refused(
    name: &str,
    csr: &CertificateSigningRequest,
) -> Option<Result<Vec<u8>, CsrError>> {
    let status = csr.status.as_ref()?;
    for c in status.conditions.iter().flatten() {
        let how = match c.type_.as_str() {
            "Denied" => "denied",
            "Failed" => "failed",
            _ => continue,
        };
        return Some(Err(CsrError::Refused {
            name: name.to_string(),
            how,
            why: format!(
                "{}: {}",
                c.reason.as_deref().unwrap_or(""),
                c.message.as_deref().unwrap_or("")
            ),
        }));
    }
    status
        .certificate
        .as_ref()
        .filter(|c| !c.0.is_empty())
        .map(|c| Ok(c.0.clone()))
}

/// Keep `cert` current: request a certificate now (unless `first` is
/// given), then again each time 80 % of the current one's lifetime has passed.
/// A refused or failed renewal is retried after `retry` while the current
/// certificate is still served.
pub async fn keep_current(
    client: kube::Client,
    node: String,
    addresses: Vec<String>,
    cert: Arc<ReloadableCert>,
    retry: Duration,
    stop: CancellationToken,
) {
    let mut renew_at: Option<i64> = None;
    loop {
        if let Some(at) = renew_at {
            let wait = (at - jiff::Timestamp::now().as_second()).max(0);
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(u64::try_from(wait).unwrap_or(0))) => {}
            }
        }
        let got = tokio::select! {
            _ = stop.cancelled() => return,
            r = request_certificate(client.clone(), &node, &addresses) => r,
        };
        match got.and_then(|(serving, validity)| {
            cert.set(serving).map_err(|e| CsrError::BadCertificate {
                name: String::new(),
                why: e.to_string(),
            })?;
            Ok(validity)
        }) {
            Ok(v) => renew_at = Some(v.renew_at(jiff::Timestamp::now().as_second())),
            Err(e) => {
                warn!(node, error = %e, "no kubelet serving certificate from the cluster; retrying in {}s", retry.as_secs());
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(retry) => {}
                }
                renew_at = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn leaf_of(pem: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
    }

    #[tokio::test]
    async fn a_renewed_certificate_is_served_and_a_broken_pair_is_not() {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let dir = std::env::temp_dir().join(format!("follow-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        let (a_crt, a_key) = pair("a.example");
        std::fs::write(&cert, &a_crt).unwrap();
        std::fs::write(&key, &a_key).unwrap();
        let target = Arc::new(ReloadableCert::empty());
        target
            .set(crate::tls::load_serving(&cert, &key).unwrap())
            .unwrap();
        let stop = CancellationToken::new();
        let task = tokio::spawn(follow_files(
            cert.clone(),
            key.clone(),
            target.clone(),
            Duration::from_millis(20),
            stop.clone(),
        ));
        let served = async |want: &CertificateDer<'static>| {
            for _ in 0..500 {
                if target.leaf().as_ref() == Some(want) {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            false
        };
        // Renewal: the new pair is served from the next handshake on.
        let (b_crt, b_key) = pair("b.example");
        std::fs::write(&key, &b_key).unwrap();
        std::fs::write(&cert, &b_crt).unwrap();
        assert!(
            served(&leaf_of(&b_crt)).await,
            "renewed certificate not served"
        );
        // A certificate whose key is not in the key file: the previous pair stays.
        let (c_crt, _) = pair("c.example");
        std::fs::write(&cert, &c_crt).unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(target.leaf(), Some(leaf_of(&b_crt)));
        // ...until the matching key arrives.
        let (d_crt, d_key) = pair("d.example");
        std::fs::write(&key, &d_key).unwrap();
        std::fs::write(&cert, &d_crt).unwrap();
        assert!(
            served(&leaf_of(&d_crt)).await,
            "whole pair not served after a broken one"
        );
        stop.cancel();
        task.await.unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_request_names_the_node_and_its_addresses() {
        let kr = build_request("vk-1", &["10.0.0.5".into(), "vk-1.example".into()]).unwrap();
        let der = rustls::pki_types::CertificateSigningRequestDer::from_pem_slice(
            kr.request_pem.as_bytes(),
        )
        .unwrap();
        use x509_parser::prelude::FromDer;
        let (_, req) =
            x509_parser::certification_request::X509CertificationRequest::from_der(der.as_ref())
                .unwrap();
        let subject = &req.certification_request_info.subject;
        let cn: Vec<_> = subject
            .iter_common_name()
            .map(|c| c.as_str().unwrap().to_string())
            .collect();
        let o: Vec<_> = subject
            .iter_organization()
            .map(|c| c.as_str().unwrap().to_string())
            .collect();
        assert_eq!(cn, ["system:node:vk-1"]);
        assert_eq!(o, ["system:nodes"]);
        let exts = req.requested_extensions().unwrap();
        use x509_parser::extensions::{GeneralName, ParsedExtension};
        let (mut ips, mut dns) = (Vec::new(), Vec::new());
        for e in exts {
            if let ParsedExtension::SubjectAlternativeName(s) = e {
                for n in &s.general_names {
                    match n {
                        GeneralName::IPAddress(b) => ips.push(b.to_vec()),
                        GeneralName::DNSName(d) => dns.push(d.to_string()),
                        _ => {}
                    }
                }
            }
        }
        assert_eq!(ips, [vec![10u8, 0, 0, 5]]);
        assert_eq!(dns, ["vk-1.example"]);
    }

    #[test]
    fn renewal_comes_after_four_fifths_of_the_lifetime_never_in_the_past() {
        let v = Validity {
            not_before: 1_000,
            not_after: 11_000,
        };
        assert_eq!(v.renew_at(0), 9_000);
        assert_eq!(v.renew_at(9_500), 9_500);
    }

    #[test]
    fn a_served_certificate_can_be_replaced() {
        let cert = ReloadableCert::empty();
        assert!(cert.leaf().is_none());
        let a = crate::tls::self_signed("a", &[]).unwrap();
        let a_leaf = a.chain[0].clone();
        cert.set(a).unwrap();
        assert_eq!(cert.leaf(), Some(a_leaf.clone()));
        let b = crate::tls::self_signed("b", &[]).unwrap();
        cert.set(b).unwrap();
        assert_ne!(cert.leaf(), Some(a_leaf));
    }

    #[test]
    fn issued_chains_are_parsed_with_their_validity() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(vec!["x".to_string()]).unwrap();
        p.not_before = rcgen::date_time_ymd(2030, 1, 1);
        p.not_after = rcgen::date_time_ymd(2030, 1, 11);
        let pem = p.self_signed(&key).unwrap().pem();
        let (chain, v) = parse_issued(pem.as_bytes()).unwrap();
        assert_eq!(chain.len(), 1);
        assert_eq!(v.not_after - v.not_before, 10 * 86_400);
        assert!(parse_issued(b"junk").is_err());
    }
}
