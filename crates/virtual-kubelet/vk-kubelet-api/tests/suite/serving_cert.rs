//! The serving certificate from a `kubernetes.io/kubelet-serving`
//! CertificateSigningRequest on the suite's Kubernetes API (the emulator,
//! which validates CSRs as the real server does). The test plays what a
//! cluster provides: an approver (`/approval`) and the signer (`/status`),
//! with a CA of its own, as kube-controller-manager's csrsigning controller
//! would with the cluster CA.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestStatus,
};
use kube::api::{Api, ListParams, PostParams};
use kube_emulator::{Emulator, EmulatorOptions};
use tokio_util::sync::CancellationToken;
use vk_kubelet_api::serving_cert::{
    CsrError, NODE_LABEL, ReloadableCert, SIGNER, keep_current, request_certificate,
};
use vk_kubelet_api::tls;

struct Ca {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pem: String,
}

fn ca() -> Ca {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.distinguished_name
        .push(rcgen::DnType::CommonName, "test cluster CA");
    let pem = p.self_signed(&key).unwrap().pem();
    Ca {
        issuer: rcgen::Issuer::new(p, key),
        pem,
    }
}

/// The next request of `node` without a certificate, within 30 s.
async fn pending(api: &Api<CertificateSigningRequest>, node: &str) -> CertificateSigningRequest {
    for _ in 0..300 {
        let list = api
            .list(&ListParams::default().labels(&format!("{NODE_LABEL}={node}")))
            .await
            .unwrap();
        if let Some(c) = list.items.into_iter().find(|c| {
            c.status
                .as_ref()
                .is_none_or(|s| s.conditions.is_none() && s.certificate.is_none())
        }) {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no pending certificate request of {node} within 30 s");
}

/// What an approver does: an `Approved` or `Denied` condition through `/approval`.
async fn decide(
    api: &Api<CertificateSigningRequest>,
    csr: &CertificateSigningRequest,
    decision: &str,
    reason: &str,
    message: &str,
) {
    let mut c = csr.clone();
    c.status = Some(CertificateSigningRequestStatus {
        conditions: Some(vec![CertificateSigningRequestCondition {
            type_: decision.into(),
            status: "True".into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            ..Default::default()
        }]),
        certificate: None,
    });
    let name = c.metadata.name.clone().unwrap();
    api.replace_subresource("approval", &name, &PostParams::default(), &c)
        .await
        .unwrap();
}

/// Check the request as the kubelet-serving signer's rules want it, then sign it for `life`.
async fn sign(api: &Api<CertificateSigningRequest>, ca: &Ca, node: &str, life: Duration) -> String {
    let csr = pending(api, node).await;
    assert_eq!(csr.spec.signer_name, SIGNER);
    let mut usages = csr.spec.usages.clone().unwrap();
    usages.sort();
    assert_eq!(usages, ["digital signature", "server auth"]);
    let req = rcgen::CertificateSigningRequestParams::from_pem(
        std::str::from_utf8(&csr.spec.request.0).unwrap(),
    )
    .unwrap();
    let cn = format!(
        "{:?}",
        req.params
            .distinguished_name
            .get(&rcgen::DnType::CommonName)
    );
    assert!(cn.contains(&format!("system:node:{node}")), "{cn}");
    assert!(
        req.params
            .subject_alt_names
            .contains(&rcgen::SanType::IpAddress("127.0.0.1".parse().unwrap())),
        "{:?}",
        req.params.subject_alt_names
    );
    decide(api, &csr, "Approved", "TestApprove", "approved by the test").await;
    let mut req = req;
    let now = time::OffsetDateTime::now_utc();
    req.params.not_before = now - time::Duration::seconds(1);
    req.params.not_after = now + time::Duration::try_from(life).unwrap();
    let pem = req.signed_by(&ca.issuer).unwrap().pem();
    let mut c = api
        .get(csr.metadata.name.as_deref().unwrap())
        .await
        .unwrap();
    c.status.get_or_insert_with(Default::default).certificate =
        Some(ByteString(pem.clone().into_bytes()));
    api.replace_status(
        csr.metadata.name.as_deref().unwrap(),
        &PostParams::default(),
        &c,
    )
    .await
    .unwrap();
    pem
}

fn der_of(pem: &str) -> Vec<u8> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

#[tokio::test]
async fn the_certificate_is_requested_served_verified_and_renewed() {
    let emu = Emulator::start(EmulatorOptions::default()).await.unwrap();
    let client = emu.client().await.unwrap();
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let ca = ca();
    let node = "vk-csr";

    let cert = Arc::new(ReloadableCert::empty());
    let stop = CancellationToken::new();
    tokio::spawn(keep_current(
        client.clone(),
        node.into(),
        vec!["127.0.0.1".into(), node.into()],
        cert.clone(),
        Duration::from_secs(2),
        stop.clone(),
    ));
    let cfg = tls::server_config_with(cert.clone(), None).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("https://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().route("/healthz", axum::routing::get(|| async { "ok" }));
    tokio::spawn(tls::serve(listener, cfg, app, stop.clone()));
    // Verifies the served certificate against the test CA, with 127.0.0.1 as the
    // name; a new client each time, so no TLS session is resumed and the
    // certificate seen is the one served now.
    let ca_pem = ca.pem.clone();
    let served = || {
        let http = reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap()])
            .tls_info(true)
            .build()
            .unwrap();
        let url = format!("{base}/healthz");
        async move {
            let r = http.get(url).send().await.ok()?;
            let info = r.extensions().get::<reqwest::tls::TlsInfo>()?.clone();
            (r.text().await.ok()? == "ok").then(|| info.peer_certificate().map(<[u8]>::to_vec))?
        }
    };

    // Nothing is served before the request is approved and issued.
    let _first = pending(&api, node).await;
    assert!(served().await.is_none());

    // A short-lived certificate: served, then renewed at 80 % of its 10 s.
    let first = sign(&api, &ca, node, Duration::from_secs(10)).await;
    let mut got = None;
    for _ in 0..50 {
        got = served().await;
        if got.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        got,
        Some(der_of(&first)),
        "the issued certificate is served"
    );

    let second = sign(&api, &ca, node, Duration::from_secs(3600)).await;
    let mut now_served = None;
    for _ in 0..50 {
        now_served = served().await;
        if now_served == Some(der_of(&second)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        now_served,
        Some(der_of(&second)),
        "the renewed certificate is served without a restart"
    );
    let all = api
        .list(&ListParams::default().labels(&format!("{NODE_LABEL}={node}")))
        .await
        .unwrap();
    assert_eq!(all.items.len(), 2, "one request per certificate");
    stop.cancel();
}

#[tokio::test]
async fn a_denied_request_is_an_error_naming_it() {
    let emu = Emulator::start(EmulatorOptions::default()).await.unwrap();
    let client = emu.client().await.unwrap();
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let waiting =
        tokio::spawn(
            async move { request_certificate(client, "vk-deny", &["127.0.0.1".into()]).await },
        );
    let csr = pending(&api, "vk-deny").await;
    decide(&api, &csr, "Denied", "NotOurNode", "no such machine").await;
    let r = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .unwrap()
        .unwrap();
    match r {
        Err(e @ CsrError::Refused { how: "denied", .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(csr.metadata.name.as_deref().unwrap()), "{msg}");
            assert!(msg.contains("NotOurNode: no such machine"), "{msg}");
        }
        other => panic!("expected a denial, got {:?}", other.map(|_| ())),
    }
}
