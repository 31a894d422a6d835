//! The checks against real servers: MariaDB, RabbitMQ, memcached, Ceph RADOS Gateway and OVN's
//! ovsdb-servers, started on 127.0.0.1 by `scripts/external-services up`, which writes the
//! endpoints, generated credentials and certificate paths to the file named by
//! `EXTERNAL_SERVICES_ENV` (default /var/cache/openstack-operator/external-services/env).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use external_checks::{
    Outcome, Report, ServiceKind, Target, TlsSettings, VerifyMode, check, reason,
};
use secrecy::{SecretSlice, SecretString};

const TIMEOUT: Duration = Duration::from_secs(15);

/// The harness's env file, or a panic saying how to start it.
fn env() -> HashMap<String, String> {
    let path = std::env::var("EXTERNAL_SERVICES_ENV")
        .unwrap_or_else(|_| "/var/cache/openstack-operator/external-services/env".to_string());
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "the external services are not up: cannot read {path} ({e}); \
             run `scripts/external-services up` (scripts/test does) or set EXTERNAL_SERVICES_ENV"
        )
    });
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

struct Env(HashMap<String, String>);

impl Env {
    fn load() -> Self {
        Env(env())
    }
    fn get(&self, k: &str) -> String {
        self.0
            .get(k)
            .cloned()
            .unwrap_or_else(|| panic!("{k} missing from the external-services env file: rerun `scripts/external-services up`"))
    }
    fn file(&self, k: &str) -> Vec<u8> {
        let p = self.get(k);
        std::fs::read(&p).unwrap_or_else(|e| panic!("{k}={p}: {e}"))
    }
    /// TLS trusting the harness's CA (or the untrusted one).
    fn tls(&self, ca: &str) -> TlsSettings {
        TlsSettings {
            ca_pem: Some(self.file(ca)),
            client_cert_pem: None,
            client_key_pem: None,
            verify: VerifyMode::Full,
            server_name: None,
        }
    }
    /// TLS with the client certificate `prefix` (EXTSVC_CLIENT or EXTSVC_UNTRUSTED_CLIENT).
    fn mtls(&self, prefix: &str) -> TlsSettings {
        TlsSettings {
            client_cert_pem: Some(self.file(&format!("{prefix}_CERT"))),
            client_key_pem: Some(SecretSlice::from(self.file(&format!("{prefix}_KEY")))),
            ..self.tls("EXTSVC_CA")
        }
    }
}

fn target(kind: ServiceKind, endpoints: &[String]) -> Target {
    Target {
        kind,
        endpoints: endpoints.to_vec(),
        username: None,
        password: None,
        tls: None,
        extra: BTreeMap::new(),
    }
}

fn with_login(mut t: Target, user: &str, password: &str) -> Target {
    t.username = Some(user.to_string());
    t.password = Some(SecretString::from(password.to_string()));
    t
}

fn with_extra(mut t: Target, k: &str, v: &str) -> Target {
    t.extra.insert(k.to_string(), v.to_string());
    t
}

fn with_tls(mut t: Target, tls: TlsSettings) -> Target {
    t.tls = Some(tls);
    t
}

/// A port on 127.0.0.1 where nothing listens.
fn closed_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    let a = l.local_addr().expect("its address");
    drop(l);
    a.to_string()
}

#[track_caller]
fn assert_ready(r: &Report) {
    assert!(r.is_ready(), "expected every step to pass: {r:#?}");
}

#[track_caller]
fn assert_failed(o: &Outcome, want: &str, mentions: &[&str]) {
    match o {
        Outcome::Failed { reason, message } => {
            assert_eq!(reason, want, "reason of {o:?}");
            for m in mentions {
                assert!(message.contains(m), "{message:?} should mention {m:?}");
            }
        }
        _ => panic!("expected Failed({want}), got {o:?}"),
    }
}

#[track_caller]
fn assert_no_secret(r: &Report, secret: &str) {
    let all = format!("{r:?}");
    assert!(
        !all.contains(secret),
        "a secret leaked into the report: {all}"
    );
}

// ------------------------------------------------------------------ database

fn db(e: &Env) -> Target {
    with_extra(
        with_login(
            target(ServiceKind::Database, &[e.get("EXTSVC_DB")]),
            &e.get("EXTSVC_DB_USER"),
            &e.get("EXTSVC_DB_PASSWORD"),
        ),
        "database",
        &e.get("EXTSVC_DB_DATABASE"),
    )
}

#[tokio::test]
async fn database_plain_logs_in_and_opens_the_database() {
    let e = Env::load();
    let r = check(&db(&e), TIMEOUT).await;
    assert_ready(&r);
    assert!(matches!(r.tls_ready, Outcome::NotChecked { .. }), "{r:?}");
    assert!(r.endpoint_reachable.message().contains("MariaDB"), "{r:?}");
    assert!(
        r.authenticated.message().contains("database checks opened"),
        "{r:?}"
    );
}

#[tokio::test]
async fn database_tls_verifies_the_server_and_logs_in() {
    let e = Env::load();
    let r = check(&with_tls(db(&e), e.tls("EXTSVC_CA")), TIMEOUT).await;
    assert_ready(&r);
    assert!(
        r.tls_ready.message().contains("host name verified"),
        "{r:?}"
    );
}

#[tokio::test]
async fn database_wrong_password_is_access_denied_for_the_user() {
    let e = Env::load();
    let t = with_login(db(&e), "checker", "not-the-password");
    let r = check(&t, TIMEOUT).await;
    assert!(r.endpoint_reachable.is_passed(), "{r:?}");
    assert_failed(
        &r.authenticated,
        reason::ACCESS_DENIED,
        &["checker", "Access denied"],
    );
    assert_no_secret(&r, "not-the-password");
    // The same over TLS.
    let r = check(&with_tls(t, e.tls("EXTSVC_CA")), TIMEOUT).await;
    assert!(r.tls_ready.is_passed(), "{r:?}");
    assert_failed(&r.authenticated, reason::ACCESS_DENIED, &["checker"]);
}

#[tokio::test]
async fn database_user_requiring_x509_needs_the_client_certificate() {
    let e = Env::load();
    let t = with_login(
        db(&e),
        &e.get("EXTSVC_DB_X509_USER"),
        &e.get("EXTSVC_DB_PASSWORD"),
    );
    let r = check(&with_tls(t.clone(), e.mtls("EXTSVC_CLIENT")), TIMEOUT).await;
    assert_ready(&r);
    let r = check(&with_tls(t, e.tls("EXTSVC_CA")), TIMEOUT).await;
    assert!(r.tls_ready.is_passed(), "{r:?}");
    assert_failed(&r.authenticated, reason::ACCESS_DENIED, &["checker_x509"]);
}

#[tokio::test]
async fn database_auth_plugin_the_check_cannot_speak_is_named() {
    // MariaDB switches the login to the user's plugin (client_ed25519), which this check does
    // not implement: it must say so rather than report a wrong password.
    let e = Env::load();
    let t = with_login(
        db(&e),
        &e.get("EXTSVC_DB_ED25519_USER"),
        &e.get("EXTSVC_DB_PASSWORD"),
    );
    let r = check(&t, TIMEOUT).await;
    assert_failed(
        &r.authenticated,
        reason::UNSUPPORTED_AUTH,
        &["client_ed25519"],
    );
}

#[tokio::test]
async fn database_the_user_may_not_open_is_not_permitted() {
    let e = Env::load();
    let t = with_extra(db(&e), "database", &e.get("EXTSVC_DB_FORBIDDEN_DATABASE"));
    let r = check(&t, TIMEOUT).await;
    assert_failed(
        &r.authenticated,
        reason::NOT_PERMITTED,
        &["checker", "forbidden"],
    );
}

#[tokio::test]
async fn database_certificate_from_another_ca_is_not_trusted() {
    let e = Env::load();
    let r = check(&with_tls(db(&e), e.tls("EXTSVC_UNTRUSTED_CA")), TIMEOUT).await;
    assert!(r.endpoint_reachable.is_passed(), "{r:?}");
    assert_failed(&r.tls_ready, reason::CERTIFICATE_NOT_TRUSTED, &[]);
    assert!(
        matches!(r.authenticated, Outcome::NotChecked { .. }),
        "{r:?}"
    );
}

#[tokio::test]
async fn database_nothing_listening_is_connection_refused() {
    let e = Env::load();
    let mut t = db(&e);
    let port = closed_port();
    t.endpoints = vec![port.clone()];
    let r = check(&t, TIMEOUT).await;
    assert_failed(&r.endpoint_reachable, reason::CONNECTION_REFUSED, &[&port]);
    assert!(!r.is_ready());
}

// ------------------------------------------------------------------ messaging

fn amqp(e: &Env, endpoint: &str) -> Target {
    with_extra(
        with_login(
            target(ServiceKind::Messaging, &[e.get(endpoint)]),
            &e.get("EXTSVC_AMQP_USER"),
            &e.get("EXTSVC_AMQP_PASSWORD"),
        ),
        "vhost",
        &e.get("EXTSVC_AMQP_VHOST"),
    )
}

#[tokio::test]
async fn messaging_plain_logs_in_and_opens_the_vhost() {
    let e = Env::load();
    let r = check(&amqp(&e, "EXTSVC_AMQP"), TIMEOUT).await;
    assert_ready(&r);
    assert!(r.endpoint_reachable.message().contains("RabbitMQ"), "{r:?}");
    assert!(
        r.authenticated.message().contains("opened vhost openstack"),
        "{r:?}"
    );
}

#[tokio::test]
async fn messaging_amqps_verifies_the_server_and_logs_in() {
    let e = Env::load();
    let r = check(
        &with_tls(amqp(&e, "EXTSVC_AMQPS"), e.tls("EXTSVC_CA")),
        TIMEOUT,
    )
    .await;
    assert_ready(&r);
    assert!(r.tls_ready.is_passed(), "{r:?}");
}

#[tokio::test]
async fn messaging_wrong_password_is_access_denied_for_the_user() {
    let e = Env::load();
    let t = with_login(amqp(&e, "EXTSVC_AMQP"), "checker", "wrong-amqp-password");
    let r = check(&t, TIMEOUT).await;
    assert!(r.endpoint_reachable.is_passed(), "{r:?}");
    assert_failed(
        &r.authenticated,
        reason::ACCESS_DENIED,
        &["checker", "ACCESS_REFUSED"],
    );
    assert_no_secret(&r, "wrong-amqp-password");
}

#[tokio::test]
async fn messaging_vhost_without_permissions_is_not_permitted() {
    let e = Env::load();
    let t = with_extra(
        amqp(&e, "EXTSVC_AMQP"),
        "vhost",
        &e.get("EXTSVC_AMQP_FORBIDDEN_VHOST"),
    );
    let r = check(&t, TIMEOUT).await;
    assert_failed(
        &r.authenticated,
        reason::NOT_PERMITTED,
        &["checker", "forbidden"],
    );
    let t = with_extra(amqp(&e, "EXTSVC_AMQP"), "vhost", "no-such-vhost");
    let r = check(&t, TIMEOUT).await;
    assert!(r.authenticated.is_failed(), "{r:?}");
}

#[tokio::test]
async fn messaging_certificate_from_another_ca_is_not_trusted() {
    let e = Env::load();
    let r = check(
        &with_tls(amqp(&e, "EXTSVC_AMQPS"), e.tls("EXTSVC_UNTRUSTED_CA")),
        TIMEOUT,
    )
    .await;
    assert_failed(&r.tls_ready, reason::CERTIFICATE_NOT_TRUSTED, &[]);
}

#[tokio::test]
async fn messaging_at_a_database_port_is_a_protocol_error() {
    let e = Env::load();
    let mut t = amqp(&e, "EXTSVC_AMQP");
    t.endpoints = vec![e.get("EXTSVC_DB")];
    let r = check(&t, TIMEOUT).await;
    assert_failed(&r.endpoint_reachable, reason::PROTOCOL_ERROR, &[]);
}

// ------------------------------------------------------------------ cache

#[tokio::test]
async fn cache_plain_answers_version() {
    let e = Env::load();
    let r = check(
        &target(ServiceKind::Cache, &[e.get("EXTSVC_MEMCACHED")]),
        TIMEOUT,
    )
    .await;
    assert_ready(&r);
    let m = r.endpoint_reachable.message();
    assert!(m.contains("memcached 1."), "{r:?}");
    // The answer's second line (ERROR for the padding) stays out of the message.
    assert!(!m.contains(['\r', '\n']) && !m.contains("ERROR"), "{m:?}");
}

#[tokio::test]
async fn cache_tls_verifies_the_server() {
    let e = Env::load();
    let t = with_tls(
        target(ServiceKind::Cache, &[e.get("EXTSVC_MEMCACHED_TLS")]),
        e.tls("EXTSVC_CA"),
    );
    let r = check(&t, TIMEOUT).await;
    assert_ready(&r);
    assert!(r.tls_ready.is_passed(), "{r:?}");
    let r = check(&with_tls(t, e.tls("EXTSVC_UNTRUSTED_CA")), TIMEOUT).await;
    assert_failed(&r.tls_ready, reason::CERTIFICATE_NOT_TRUSTED, &[]);
}

#[tokio::test]
async fn cache_tls_against_a_plain_port_fails_the_handshake() {
    let e = Env::load();
    let t = with_tls(
        target(ServiceKind::Cache, &[e.get("EXTSVC_MEMCACHED")]),
        e.tls("EXTSVC_CA"),
    );
    let r = check(&t, TIMEOUT).await;
    assert!(r.endpoint_reachable.is_passed(), "{r:?}");
    assert_failed(&r.tls_ready, reason::TLS_HANDSHAKE_FAILED, &[]);
}

#[tokio::test]
async fn cache_sasl_authenticates_and_refuses_a_wrong_password() {
    let e = Env::load();
    let base = target(ServiceKind::Cache, &[e.get("EXTSVC_MEMCACHED_SASL")]);
    let r = check(
        &with_login(
            base.clone(),
            &e.get("EXTSVC_MEMCACHED_USER"),
            &e.get("EXTSVC_MEMCACHED_PASSWORD"),
        ),
        TIMEOUT,
    )
    .await;
    assert_ready(&r);
    assert!(r.authenticated.message().contains("SASL"), "{r:?}");
    let r = check(
        &with_login(base.clone(), "checker", "wrong-cache-password"),
        TIMEOUT,
    )
    .await;
    assert_failed(&r.authenticated, reason::ACCESS_DENIED, &["checker"]);
    assert_no_secret(&r, "wrong-cache-password");
    let r = check(&base, TIMEOUT).await;
    assert_failed(&r.authenticated, reason::CREDENTIALS_REQUIRED, &[]);
}

// ------------------------------------------------------------------ OVN

#[tokio::test]
async fn ovn_tcp_serves_northbound_and_southbound() {
    let e = Env::load();
    let r = check(
        &target(
            ServiceKind::Ovn,
            &[e.get("EXTSVC_OVN_NB"), e.get("EXTSVC_OVN_SB")],
        ),
        TIMEOUT,
    )
    .await;
    assert_ready(&r);
    assert!(
        r.authenticated.message().contains("OVN_Northbound"),
        "{r:?}"
    );
    assert!(
        r.authenticated.message().contains("OVN_Southbound"),
        "{r:?}"
    );
}

#[tokio::test]
async fn ovn_ssl_with_the_client_certificate_passes() {
    let e = Env::load();
    let t = with_tls(
        target(
            ServiceKind::Ovn,
            &[e.get("EXTSVC_OVN_NB_SSL"), e.get("EXTSVC_OVN_SB_SSL")],
        ),
        e.mtls("EXTSVC_CLIENT"),
    );
    let r = check(&t, TIMEOUT).await;
    assert_ready(&r);
    assert!(r.tls_ready.is_passed(), "{r:?}");
}

#[tokio::test]
async fn ovn_ssl_with_an_untrusted_client_certificate_is_rejected() {
    let e = Env::load();
    let t = with_tls(
        target(ServiceKind::Ovn, &[e.get("EXTSVC_OVN_NB_SSL")]),
        e.mtls("EXTSVC_UNTRUSTED_CLIENT"),
    );
    let r = check(&t, TIMEOUT).await;
    assert_failed(&r.tls_ready, reason::CLIENT_CERTIFICATE_REJECTED, &[]);
    let t = with_tls(
        target(ServiceKind::Ovn, &[e.get("EXTSVC_OVN_NB_SSL")]),
        e.tls("EXTSVC_CA"),
    );
    let r = check(&t, TIMEOUT).await;
    assert!(r.tls_ready.is_failed(), "no client certificate: {r:?}");
}

#[tokio::test]
async fn ovn_certificate_from_another_ca_is_not_trusted() {
    let e = Env::load();
    let mut tls = e.mtls("EXTSVC_CLIENT");
    tls.ca_pem = Some(e.file("EXTSVC_UNTRUSTED_CA"));
    let r = check(
        &with_tls(target(ServiceKind::Ovn, &[e.get("EXTSVC_OVN_SB_SSL")]), tls),
        TIMEOUT,
    )
    .await;
    assert_failed(&r.tls_ready, reason::CERTIFICATE_NOT_TRUSTED, &[]);
}

#[tokio::test]
async fn ovn_without_a_southbound_endpoint_is_not_served() {
    let e = Env::load();
    let r = check(
        &target(ServiceKind::Ovn, &[e.get("EXTSVC_OVN_NB")]),
        TIMEOUT,
    )
    .await;
    assert!(r.endpoint_reachable.is_passed(), "{r:?}");
    assert_failed(
        &r.authenticated,
        reason::DATABASE_NOT_SERVED,
        &["OVN_Southbound"],
    );
}

// ------------------------------------------------------------------ object storage

fn s3(e: &Env, endpoint: &str) -> Target {
    with_login(
        target(ServiceKind::ObjectStorage, &[e.get(endpoint)]),
        &e.get("EXTSVC_S3_ACCESS_KEY"),
        &e.get("EXTSVC_S3_SECRET_KEY"),
    )
}

#[tokio::test]
async fn object_storage_signed_requests_pass_over_http_and_https() {
    let e = Env::load();
    let r = check(&s3(&e, "EXTSVC_S3"), TIMEOUT).await;
    assert_ready(&r);
    assert!(r.authenticated.message().contains("ListBuckets"), "{r:?}");
    let t = with_extra(
        with_tls(s3(&e, "EXTSVC_S3_TLS"), e.tls("EXTSVC_CA")),
        "bucket",
        &e.get("EXTSVC_S3_BUCKET"),
    );
    let r = check(&t, TIMEOUT).await;
    assert_ready(&r);
    assert!(r.tls_ready.is_passed(), "{r:?}");
    assert!(
        r.authenticated
            .message()
            .contains("bucket checks accessible"),
        "{r:?}"
    );
}

#[tokio::test]
async fn object_storage_wrong_secret_key_is_access_denied_for_the_key() {
    let e = Env::load();
    let key = e.get("EXTSVC_S3_ACCESS_KEY");
    let r = check(
        &with_login(s3(&e, "EXTSVC_S3"), &key, "wrong-s3-secret"),
        TIMEOUT,
    )
    .await;
    assert!(r.endpoint_reachable.is_passed(), "{r:?}");
    assert_failed(
        &r.authenticated,
        reason::ACCESS_DENIED,
        &[&key, "SignatureDoesNotMatch"],
    );
    assert_no_secret(&r, "wrong-s3-secret");
    let r = check(&with_login(s3(&e, "EXTSVC_S3"), "NOSUCHKEY", "x"), TIMEOUT).await;
    assert_failed(
        &r.authenticated,
        reason::ACCESS_DENIED,
        &["NOSUCHKEY", "InvalidAccessKeyId"],
    );
}

#[tokio::test]
async fn object_storage_bucket_of_another_user_or_missing() {
    let e = Env::load();
    let other = with_login(
        s3(&e, "EXTSVC_S3"),
        &e.get("EXTSVC_S3_OTHER_ACCESS_KEY"),
        &e.get("EXTSVC_S3_OTHER_SECRET_KEY"),
    );
    let r = check(
        &with_extra(other, "bucket", &e.get("EXTSVC_S3_BUCKET")),
        TIMEOUT,
    )
    .await;
    assert_failed(&r.authenticated, reason::NOT_PERMITTED, &["checks"]);
    let r = check(
        &with_extra(s3(&e, "EXTSVC_S3"), "bucket", "no-such-bucket"),
        TIMEOUT,
    )
    .await;
    assert_failed(&r.authenticated, reason::NOT_FOUND, &["no-such-bucket"]);
}

#[tokio::test]
async fn object_storage_certificate_from_another_ca_is_not_trusted() {
    let e = Env::load();
    let r = check(
        &with_tls(s3(&e, "EXTSVC_S3_TLS"), e.tls("EXTSVC_UNTRUSTED_CA")),
        TIMEOUT,
    )
    .await;
    assert_failed(&r.tls_ready, reason::CERTIFICATE_NOT_TRUSTED, &[]);
}

// ------------------------------------------------------------------ any kind

#[tokio::test]
async fn a_server_that_never_answers_times_out() {
    // A real listener that accepts and stays silent: the check must give up, not hang.
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr").to_string();
    let hold = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            conns.push(s);
        }
    });
    let t = with_login(
        target(ServiceKind::Database, std::slice::from_ref(&addr)),
        "u",
        "p",
    );
    let r = check(&t, Duration::from_millis(500)).await;
    assert_failed(&r.endpoint_reachable, reason::TIMEOUT, &[&addr]);
    hold.abort();
}

#[tokio::test]
async fn one_failing_endpoint_of_several_fails_the_check_and_is_named() {
    let e = Env::load();
    let port = closed_port();
    let mut t = amqp(&e, "EXTSVC_AMQP");
    t.endpoints.push(port.clone());
    let r = check(&t, TIMEOUT).await;
    assert_failed(&r.endpoint_reachable, reason::CONNECTION_REFUSED, &[&port]);
    assert!(!r.is_ready());
}

#[tokio::test]
async fn a_malformed_endpoint_is_named() {
    let r = check(&target(ServiceKind::Ovn, &["6641".to_string()]), TIMEOUT).await;
    assert_failed(&r.endpoint_reachable, reason::INVALID_ENDPOINT, &["6641"]);
}

#[tokio::test]
async fn verify_modes_decide_what_an_untrusted_certificate_means() {
    let e = Env::load();
    let base = target(ServiceKind::Cache, &[e.get("EXTSVC_MEMCACHED_TLS")]);
    let mut tls = e.tls("EXTSVC_UNTRUSTED_CA");
    tls.verify = VerifyMode::CaOnly;
    let r = check(&with_tls(base.clone(), tls.clone()), TIMEOUT).await;
    assert_failed(&r.tls_ready, reason::CERTIFICATE_NOT_TRUSTED, &[]);
    tls.verify = VerifyMode::Insecure;
    let r = check(&with_tls(base.clone(), tls), TIMEOUT).await;
    assert_ready(&r);
    assert!(r.tls_ready.message().contains("NOT verified"), "{r:?}");
    let mut tls = e.tls("EXTSVC_CA");
    tls.verify = VerifyMode::CaOnly;
    let r = check(&with_tls(base, tls), TIMEOUT).await;
    assert_ready(&r);
    assert!(
        r.tls_ready.message().contains("host name not checked"),
        "{r:?}"
    );
}

#[tokio::test]
async fn unusable_tls_material_fails_tls_ready_naming_it() {
    let e = Env::load();
    let base = target(ServiceKind::Cache, &[e.get("EXTSVC_MEMCACHED_TLS")]);
    let mut tls = e.tls("EXTSVC_CA");
    tls.client_cert_pem = Some(e.file("EXTSVC_CLIENT_CERT"));
    let r = check(&with_tls(base.clone(), tls), TIMEOUT).await;
    assert_failed(
        &r.tls_ready,
        reason::INVALID_TARGET,
        &["client certificate is given without its key"],
    );
    let mut tls = e.tls("EXTSVC_CA");
    tls.ca_pem = Some(b"not a certificate".to_vec());
    let r = check(&with_tls(base, tls), TIMEOUT).await;
    assert_failed(&r.tls_ready, reason::INVALID_TARGET, &["CA bundle"]);
}

#[tokio::test]
async fn a_certificate_for_another_host_name_fails_full_verification_only() {
    let e = Env::load();
    let base = target(ServiceKind::Cache, &[e.get("EXTSVC_MEMCACHED_WRONG_NAME")]);
    let r = check(&with_tls(base.clone(), e.tls("EXTSVC_CA")), TIMEOUT).await;
    assert_failed(
        &r.tls_ready,
        reason::CERTIFICATE_NAME_MISMATCH,
        &["127.0.0.1"],
    );
    let mut tls = e.tls("EXTSVC_CA");
    tls.verify = VerifyMode::CaOnly;
    let r = check(&with_tls(base, tls), TIMEOUT).await;
    assert_ready(&r);
}

#[test]
fn endpoint_validation_is_public_for_the_controller() {
    use external_checks::validate_endpoint;
    assert!(validate_endpoint(ServiceKind::Database, "db:3306").is_ok());
    let err = validate_endpoint(ServiceKind::Ovn, "db:6641").unwrap_err();
    assert!(err.contains("tcp:host:port"), "{err}");
    assert!(validate_endpoint(ServiceKind::ObjectStorage, "s3:443").is_err());
}
