//! CertificateSigningRequest (certificates.k8s.io/v1) as documented in
//! "Certificates and Certificate Signing Requests" and enforced by the real
//! validation (`pkg/apis/certificates/validation`): the request's signature
//! is checked, `spec` is immutable and `spec.username` is the requester's,
//! only `/approval` adds Approved/Denied (never both), only `/status` sets
//! the certificate (once), and no condition Approved/Denied/Failed is removed.

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestSpec,
    CertificateSigningRequestStatus,
};
use kube::api::{Api, PostParams};
use kube_emulator::review::{AuthConfig, ReviewUser};

use crate::common::{api_err, start};

fn request_pem(cn: &str) -> String {
    let mut params = rcgen::CertificateParams::new(vec!["vk.example".to_string()]).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn.to_string());
    let key = rcgen::KeyPair::generate().unwrap();
    params.serialize_request(&key).unwrap().pem().unwrap()
}

fn csr(name: &str, request: &[u8], usages: &[&str], signer: &str) -> CertificateSigningRequest {
    CertificateSigningRequest {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request.to_vec()),
            signer_name: signer.into(),
            usages: Some(usages.iter().map(|u| u.to_string()).collect()),
            username: Some("forged".into()),
            groups: Some(vec!["system:masters".into()]),
            ..Default::default()
        },
        status: None,
    }
}

fn condition(t: &str) -> CertificateSigningRequestCondition {
    CertificateSigningRequestCondition {
        type_: t.into(),
        status: "True".into(),
        reason: Some("Test".into()),
        message: Some(format!("{t} by the test")),
        ..Default::default()
    }
}

fn certificate_pem() -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    rcgen::CertificateParams::new(vec!["vk.example".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap()
        .pem()
}

const SERVING: &[&str] = &["digital signature", "server auth"];
const SIGNER: &str = "kubernetes.io/kubelet-serving";

#[tokio::test]
async fn create_checks_the_request_and_records_the_requester() {
    let env = start().await;
    let api: Api<CertificateSigningRequest> = Api::all(env.client.clone());
    let pp = PostParams::default();

    let made = api
        .create(
            &pp,
            &csr(
                "ok",
                request_pem("system:node:vk").as_bytes(),
                SERVING,
                SIGNER,
            ),
        )
        .await
        .unwrap();
    // The requester, not the body, fills username and groups.
    assert_eq!(made.spec.username.as_deref(), Some("system:admin"));
    assert!(made.status.is_none_or(|s| s.conditions.is_none()));

    // A token the review configuration knows makes its user the requester.
    env.handle.set_auth(AuthConfig {
        tokens: [(
            "t-node".to_string(),
            ReviewUser {
                username: "system:node:vk".into(),
                uid: String::new(),
                groups: vec!["system:nodes".into(), "system:authenticated".into()],
            },
        )]
        .into_iter()
        .collect(),
        rules: vec![],
    });
    let mut cfg = env.handle.kube_config();
    cfg.auth_info.token = Some("t-node".to_string().into());
    let node_api: Api<CertificateSigningRequest> = Api::all(kube::Client::try_from(cfg).unwrap());
    let by_node = node_api
        .create(
            &pp,
            &csr(
                "by-node",
                request_pem("system:node:vk").as_bytes(),
                SERVING,
                SIGNER,
            ),
        )
        .await
        .unwrap();
    assert_eq!(by_node.spec.username.as_deref(), Some("system:node:vk"));
    assert_eq!(
        by_node.spec.groups,
        Some(vec!["system:nodes".into(), "system:authenticated".into()])
    );

    // Refusals, each naming its field.
    let cases: Vec<(CertificateSigningRequest, &str, &str)> = vec![
        (
            csr("garbage", b"not a pem", SERVING, SIGNER),
            "spec.request",
            "PEM block type must be CERTIFICATE REQUEST",
        ),
        (
            csr("no-usages", request_pem("x").as_bytes(), &[], SIGNER),
            "spec.usages",
            "Required value",
        ),
        (
            csr(
                "bad-usage",
                request_pem("x").as_bytes(),
                &["serving"],
                SIGNER,
            ),
            "spec.usages[0]",
            "Unsupported value: \"serving\"",
        ),
        (
            csr(
                "bad-signer",
                request_pem("x").as_bytes(),
                SERVING,
                "kubelet-serving",
            ),
            "spec.signerName",
            "must be a fully qualified domain and path",
        ),
    ];
    for (obj, field, text) in cases {
        let name = obj.metadata.name.clone().unwrap();
        let st = api_err(api.create(&pp, &obj).await);
        assert_eq!(st.code, 422, "{name}: {st:?}");
        assert!(st.message.contains(field), "{name}: {}", st.message);
        assert!(st.message.contains(text), "{name}: {}", st.message);
    }
    // A request whose signature does not verify (one byte of the signature flipped).
    let pem = request_pem("x");
    let block = x509_der(&pem);
    let mut der = block.clone();
    let last = der.len() - 1;
    der[last] ^= 0x01;
    let tampered = pem_encode("CERTIFICATE REQUEST", &der);
    let st = api_err(
        api.create(&pp, &csr("tampered", tampered.as_bytes(), SERVING, SIGNER))
            .await,
    );
    assert_eq!(st.code, 422, "{st:?}");
    assert!(st.message.contains("spec.request"), "{}", st.message);
    let mut short = csr("short", request_pem("x").as_bytes(), SERVING, SIGNER);
    short.spec.expiration_seconds = Some(60);
    let st = api_err(api.create(&pp, &short).await);
    assert!(
        st.message.contains("spec.expirationSeconds"),
        "{}",
        st.message
    );
}

fn x509_der(pem: &str) -> Vec<u8> {
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64_decode(&body)
}

fn base64_decode(s: &str) -> Vec<u8> {
    kube_emulator::util::base64_decode(s).expect("base64")
}

fn pem_encode(label: &str, der: &[u8]) -> String {
    let b64 = kube_emulator::util::base64_encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[tokio::test]
async fn approval_and_certificate_go_through_their_own_subresources() {
    let env = start().await;
    let api: Api<CertificateSigningRequest> = Api::all(env.client.clone());
    let pp = PostParams::default();
    api.create(
        &pp,
        &csr(
            "c",
            request_pem("system:node:vk").as_bytes(),
            SERVING,
            SIGNER,
        ),
    )
    .await
    .unwrap();

    // The main resource changes neither spec nor status.
    let mut cur = api.get("c").await.unwrap();
    cur.spec.username = Some("someone-else".into());
    cur.status = Some(CertificateSigningRequestStatus {
        conditions: Some(vec![condition("Approved")]),
        certificate: Some(ByteString(certificate_pem().into_bytes())),
    });
    let after = api.replace("c", &pp, &cur).await.unwrap();
    assert_eq!(after.spec.username.as_deref(), Some("system:admin"));
    assert!(
        after
            .status
            .is_none_or(|s| s.conditions.is_none() && s.certificate.is_none())
    );

    // /status cannot approve.
    let mut cur = api.get("c").await.unwrap();
    cur.status = Some(CertificateSigningRequestStatus {
        conditions: Some(vec![condition("Approved")]),
        certificate: None,
    });
    let st = api_err(api.replace_status("c", &pp, &cur).await);
    assert_eq!(st.code, 422);
    assert!(
        st.message
            .contains("updates may not add a condition of type \"Approved\""),
        "{}",
        st.message
    );

    // /approval approves (timestamps filled) but cannot set the certificate.
    let mut cur = api.get("c").await.unwrap();
    cur.status = Some(CertificateSigningRequestStatus {
        conditions: Some(vec![condition("Approved")]),
        certificate: Some(ByteString(certificate_pem().into_bytes())),
    });
    let approved = api
        .replace_subresource("approval", "c", &pp, &cur)
        .await
        .unwrap();
    let s = approved.status.unwrap();
    let conds = s.conditions.unwrap();
    assert_eq!(conds.len(), 1);
    assert_eq!(conds[0].type_, "Approved");
    assert!(conds[0].last_update_time.is_some());
    assert!(s.certificate.is_none());

    // Approved and Denied are mutually exclusive; Approved cannot be removed.
    let mut cur = api.get("c").await.unwrap();
    let mut both = cur.clone();
    both.status.as_mut().unwrap().conditions = Some(vec![
        cur.status.clone().unwrap().conditions.unwrap()[0].clone(),
        condition("Denied"),
    ]);
    let st = api_err(api.replace_subresource("approval", "c", &pp, &both).await);
    assert!(st.message.contains("mutually exclusive"), "{}", st.message);
    cur.status.as_mut().unwrap().conditions = Some(vec![]);
    let st = api_err(api.replace_subresource("approval", "c", &pp, &cur).await);
    assert!(
        st.message
            .contains("updates may not remove a condition of type \"Approved\""),
        "{}",
        st.message
    );

    // /status sets the certificate once, and only PEM certificates.
    let mut cur = api.get("c").await.unwrap();
    cur.status.as_mut().unwrap().certificate = Some(ByteString(b"junk".to_vec()));
    let st = api_err(api.replace_status("c", &pp, &cur).await);
    assert!(st.message.contains("status.certificate"), "{}", st.message);
    let pem = certificate_pem();
    cur.status.as_mut().unwrap().certificate = Some(ByteString(pem.clone().into_bytes()));
    let issued = api.replace_status("c", &pp, &cur).await.unwrap();
    assert_eq!(
        issued.status.unwrap().certificate.unwrap().0,
        pem.into_bytes()
    );
    let mut cur = api.get("c").await.unwrap();
    cur.status.as_mut().unwrap().certificate = Some(ByteString(certificate_pem().into_bytes()));
    let st = api_err(api.replace_status("c", &pp, &cur).await);
    assert!(
        st.message
            .contains("updates may not modify existing certificate content"),
        "{}",
        st.message
    );
}
