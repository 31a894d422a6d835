//! TLS on the operator's own API endpoints: the namespace CA the operator generates when the
//! user brings no certificates, the per-service serving certificates it issues from that CA
//! (the Service's DNS names as SANs), when one must be re-issued, and what serving and
//! verifying TLS changes in the rendered files and objects.
//!
//! Certificates travel in cert-manager-compatible `kubernetes.io/tls` Secrets (`tls.crt`,
//! `tls.key`, `ca.crt`), so a user's cert-manager `Certificate` can replace any of them. The
//! edits here are applied over a service's ordinary rendering (uwsgi's listener, the client
//! sections' `cafile`, the Deployment's probes and mounts), so every service gets TLS the same
//! way without its own renderer knowing about it.
//!
//! Renewal rolls the Deployment: the certificate's and CA's bytes are part of the pod
//! template's config hash ([`config_hash`]), and the API Deployments roll with
//! `maxUnavailable: 0`, so the old pods serve the old certificate until new ones are Ready.
//! uwsgi reads its certificate once at start; a restart-free reload is not available from it.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Probe;

use crate::hash::InputHash;
use crate::ini::Ini;

/// Name of the namespace CA Secret the operator generates (`kubernetes.io/tls`: the CA's
/// certificate and key in `tls.crt`/`tls.key`, the certificate again in `ca.crt`), usable as a
/// cert-manager CA `Issuer`'s secret.
pub const CA_SECRET: &str = "openstack-ca";
/// Secret type of every certificate Secret.
pub const SECRET_TYPE: &str = "kubernetes.io/tls";
/// Key of the certificate (chain) in a `kubernetes.io/tls` Secret.
pub const TLS_CRT: &str = "tls.crt";
/// Key of the private key.
pub const TLS_KEY: &str = "tls.key";
/// Key of the CA certificate(s) clients verify against.
pub const CA_CRT: &str = "ca.crt";
/// Where a pod's serving certificate Secret is mounted (its own directory: the config
/// directories are read-only Secret mounts that cannot hold a nested mount point).
pub const POD_TLS_DIR: &str = "/etc/openstack-tls";
/// File name, in a service's config Secret, of the CA bundle its clients verify our APIs with.
pub const CLIENT_CA_FILE: &str = "api-ca.crt";
/// Lifetime of the generated CA (ten years).
pub const CA_LIFETIME_SECS: i64 = 10 * 365 * 86_400;
/// Lifetime of an issued serving certificate (one year).
pub const CERT_LIFETIME_SECS: i64 = 365 * 86_400;

/// Why a certificate could not be generated or read.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Generating a key or signing a certificate failed.
    #[error("generating a certificate: {0}")]
    Generate(String),
    /// A PEM certificate or key does not parse.
    #[error("{what} does not parse: {why}")]
    Parse {
        /// Which input.
        what: &'static str,
        /// The parser's message.
        why: String,
    },
}

/// A certificate and its private key, PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct CertAndKey {
    /// The certificate (PEM).
    pub cert: String,
    /// The private key (PEM, PKCS#8).
    pub key: String,
}

impl std::fmt::Debug for CertAndKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key never reaches a log.
        f.debug_struct("CertAndKey")
            .field("cert", &self.cert)
            .finish_non_exhaustive()
    }
}

fn gen_err(e: rcgen::Error) -> TlsError {
    TlsError::Generate(e.to_string())
}

fn validity(
    params: &mut rcgen::CertificateParams,
    now: i64,
    lifetime: i64,
) -> Result<(), TlsError> {
    let at = |t: i64| {
        time::OffsetDateTime::from_unix_timestamp(t).map_err(|e| TlsError::Generate(e.to_string()))
    };
    // An hour of slack for clocks behind ours.
    params.not_before = at(now - 3600)?;
    params.not_after = at(now + lifetime)?;
    Ok(())
}

/// Generates a CA named `common_name`, valid from `now` (Unix seconds) for [`CA_LIFETIME_SECS`].
pub fn generate_ca(common_name: &str, now: i64) -> Result<CertAndKey, TlsError> {
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, common_name);
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "openstack-operator");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut params, now, CA_LIFETIME_SECS)?;
    let key = rcgen::KeyPair::generate().map_err(gen_err)?;
    let cert = params.self_signed(&key).map_err(gen_err)?;
    Ok(CertAndKey {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// Issues a serving certificate for `dns_names` (the first is also the subject's CN) from `ca`,
/// valid from `now` for [`CERT_LIFETIME_SECS`]. Names that parse as IP addresses become IP SANs.
pub fn issue_serving(
    ca: &CertAndKey,
    dns_names: &[String],
    now: i64,
) -> Result<CertAndKey, TlsError> {
    let ca_key = rcgen::KeyPair::from_pem(&ca.key).map_err(|e| TlsError::Parse {
        what: "the CA key",
        why: e.to_string(),
    })?;
    let issuer =
        rcgen::Issuer::from_ca_cert_pem(&ca.cert, ca_key).map_err(|e| TlsError::Parse {
            what: "the CA certificate",
            why: e.to_string(),
        })?;
    let mut params = rcgen::CertificateParams::default();
    if let Some(cn) = dns_names.first() {
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
    }
    for n in dns_names {
        let san = match n.parse::<std::net::IpAddr>() {
            Ok(ip) => rcgen::SanType::IpAddress(ip),
            Err(_) => rcgen::SanType::DnsName(
                n.clone()
                    .try_into()
                    .map_err(|e: rcgen::Error| TlsError::Generate(format!("name {n:?}: {e}")))?,
            ),
        };
        params.subject_alt_names.push(san);
    }
    params.is_ca = rcgen::IsCa::ExplicitNoCa;
    // An ECDSA key (rcgen's default, P-256): signatures only, no key encipherment.
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    validity(&mut params, now, CERT_LIFETIME_SECS)?;
    let key = rcgen::KeyPair::generate().map_err(gen_err)?;
    let cert = params.signed_by(&key, &issuer).map_err(gen_err)?;
    Ok(CertAndKey {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// The names a Service `<service>` in `namespace` is reached by in the cluster: the serving
/// certificate's SANs.
pub fn service_dns_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
        format!("{service}.{namespace}"),
        service.to_string(),
    ]
}

/// The data of a `kubernetes.io/tls` Secret.
pub fn secret_data(cert: &CertAndKey, ca_cert: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (TLS_CRT.to_string(), cert.cert.clone()),
        (TLS_KEY.to_string(), cert.key.clone()),
        (CA_CRT.to_string(), ca_cert.to_string()),
    ])
}

/// Why an existing certificate is re-issued; `None` keeps it.
pub fn reissue_reason(
    cert_pem: &str,
    ca_pem: &str,
    dns_names: &[String],
    now: i64,
) -> Option<String> {
    let der = match pem_der(cert_pem) {
        Ok(d) => d,
        Err(e) => return Some(e.to_string()),
    };
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(&der) else {
        return Some("the certificate does not parse".into());
    };
    let ca_subject = pem_der(ca_pem).ok().and_then(|d| {
        x509_parser::parse_x509_certificate(&d)
            .ok()
            .map(|(_, c)| c.subject().to_string())
    });
    if ca_subject.as_deref() != Some(cert.issuer().to_string().as_str()) {
        return Some("it was not issued by the current CA".into());
    }
    let v = cert.validity();
    let (from, to) = (v.not_before.timestamp(), v.not_after.timestamp());
    // Renew after two thirds of the lifetime, as cert-manager does by default.
    if now >= from + (to - from) * 2 / 3 {
        return Some(format!("it expires at {to} (Unix seconds)"));
    }
    let sans: Vec<String> = cert
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|ext| {
            ext.value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_string()),
                    x509_parser::extensions::GeneralName::IPAddress(b) => ip_string(b),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    let missing: Vec<&String> = dns_names.iter().filter(|n| !sans.contains(n)).collect();
    (!missing.is_empty()).then(|| format!("it lacks the names {missing:?}"))
}

/// The `notAfter` of a PEM certificate (the first of a chain), Unix seconds.
pub fn not_after(cert_pem: &str) -> Option<i64> {
    let der = pem_der(cert_pem).ok()?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).ok()?;
    Some(cert.validity().not_after.timestamp())
}

fn ip_string(b: &[u8]) -> Option<String> {
    match b.len() {
        4 => <[u8; 4]>::try_from(b)
            .ok()
            .map(|a| std::net::IpAddr::from(a).to_string()),
        16 => <[u8; 16]>::try_from(b)
            .ok()
            .map(|a| std::net::IpAddr::from(a).to_string()),
        _ => None,
    }
}

fn pem_der(pem: &str) -> Result<Vec<u8>, TlsError> {
    x509_parser::pem::parse_x509_pem(pem.as_bytes())
        .map(|(_, p)| p.contents)
        .map_err(|e| TlsError::Parse {
            what: "the certificate PEM",
            why: e.to_string(),
        })
}

/// `url` with the `https` scheme (catalog and client URLs of a TLS endpoint).
pub fn https_url(url: &str) -> String {
    match url.strip_prefix("http://") {
        Some(rest) => format!("https://{rest}"),
        None => url.to_string(),
    }
}

/// The host of `url` (a public endpoint's name, for the certificate's SANs).
pub fn url_host(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next()?;
    let host = match authority.strip_prefix('[') {
        // [v6]:port
        Some(v6) => v6.split(']').next()?,
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    (!host.is_empty()).then(|| host.to_string())
}

/// A uwsgi configuration serving HTTPS instead of HTTP: its `http-socket` becomes an
/// `https-socket` with the certificate and key files (uwsgi's built-in OpenSSL listener, same
/// worker model, no extra process).
pub fn uwsgi_https(uwsgi_ini: &str, cert_file: &str, key_file: &str) -> String {
    uwsgi_ini
        .lines()
        .map(|l| match l.strip_prefix("http-socket = ") {
            Some(addr) => format!("https-socket = {addr},{cert_file},{key_file}\n"),
            None => format!("{l}\n"),
        })
        .collect()
}

/// Environment variable carrying the CA bundle (PEM, public) a Job's Python client verifies
/// our APIs with: no volume needed, so every service's Job gets it the same way.
pub const CA_ENV: &str = "OPENSTACK_API_CA_PEM";

/// `script` (Python) preceded by writing [`CA_ENV`] to a file and pointing requests (and so
/// keystoneauth) at it with `REQUESTS_CA_BUNDLE`.
pub fn with_env_ca(script: &str) -> String {
    format!(
        "import atexit as _ax, os as _os, tempfile as _tf\n\
         _f = _tf.NamedTemporaryFile('w', suffix='.crt', delete=False)\n\
         _f.write(_os.environ['{CA_ENV}']); _f.close(); _ax.register(_os.unlink, _f.name)\n\
         _os.environ['REQUESTS_CA_BUNDLE'] = _f.name\n\
         {script}"
    )
}

/// The files of a serving certificate mounted at `dir`: (certificate, key).
pub fn pod_files(dir: &str) -> (String, String) {
    (format!("{dir}/{TLS_CRT}"), format!("{dir}/{TLS_KEY}"))
}

/// Sets `cafile` (the CA bundle verifying our APIs) in each of `sections` of a rendered
/// oslo.config file that has that section: `[keystone_authtoken]` (keystonemiddleware) and the
/// service-to-service client sections (`[placement]`, `[glance]`, `[neutron]`, `[nova]`,
/// `[cinder]`, `[service_user]`).
pub fn set_client_ca(conf: &str, sections: &[&str], ca_file: &str) -> String {
    let mut ini = Ini::parse(conf);
    for s in sections {
        if ini.0.contains_key(*s) {
            ini.set(s, "cafile", ca_file);
        }
    }
    ini.render()
}

/// Every client section an OpenStack service may render that talks to one of our APIs.
pub const CLIENT_SECTIONS: [&str; 7] = [
    "keystone_authtoken",
    "placement",
    "glance",
    "neutron",
    "nova",
    "cinder",
    "service_user",
];

/// One PEM bundle of the distinct CAs given, in order: a service's clients verify every API it
/// calls (Keystone, its peers) with the one `cafile`. `None` when no CA is given (all plain HTTP).
pub fn ca_bundle<'a>(cas: impl IntoIterator<Item = Option<&'a str>>) -> Option<String> {
    let mut seen: Vec<&str> = Vec::new();
    for ca in cas.into_iter().flatten() {
        let ca = ca.trim();
        if !ca.is_empty() && !seen.contains(&ca) {
            seen.push(ca);
        }
    }
    (!seen.is_empty()).then(|| seen.iter().map(|c| format!("{c}\n")).collect())
}

/// The TLS edits of one service's config Secret (pure): with `client_ca`, `cafile` in the
/// client sections of each of `conf_files` and the bundle itself as [`CLIENT_CA_FILE`] beside
/// them in `config_dir`; with `serving_dir` (where the serving certificate Secret is mounted:
/// [`POD_TLS_DIR`] in pods), each of `uwsgi_files` serves `https-socket` with its certificate
/// and key. Files not in `files` are left alone.
pub fn edit_files(
    files: &mut BTreeMap<String, String>,
    config_dir: &str,
    conf_files: &[&str],
    uwsgi_files: &[&str],
    client_ca: Option<&str>,
    serving_dir: Option<&str>,
) {
    if let Some(ca) = client_ca {
        let ca_file = format!("{}/{CLIENT_CA_FILE}", config_dir.trim_end_matches('/'));
        for f in conf_files {
            if let Some(text) = files.get_mut(*f) {
                *text = set_client_ca(text, &CLIENT_SECTIONS, &ca_file);
            }
        }
        files.insert(CLIENT_CA_FILE.into(), ca.to_string());
    }
    if let Some(dir) = serving_dir {
        let (crt, key) = pod_files(dir);
        for f in uwsgi_files {
            if let Some(text) = files.get_mut(*f) {
                *text = uwsgi_https(text, &crt, &key);
            }
        }
    }
}

/// The pod-template hash with the TLS inputs folded in, so a new certificate or CA rolls the
/// Deployment.
pub fn config_hash(base: &str, serving_cert: Option<&str>, client_ca: Option<&str>) -> String {
    InputHash::new()
        .add("base", base)
        .add("serving-cert", serving_cert.unwrap_or(""))
        .add("client-ca", client_ca.unwrap_or(""))
        .short()
}

/// Serves the Deployment's first container over TLS: mounts the certificate Secret at
/// [`POD_TLS_DIR`] and switches its HTTP probes to HTTPS (the kubelet does not verify the
/// certificate of a probe; the operator's own readiness check does).
pub fn serve_tls(dep: &mut Deployment, secret: &str) {
    let (volume, mount) = crate::objects::secret_volume("api-tls", secret, POD_TLS_DIR);
    let Some(pod) = dep.spec.template.spec.as_mut() else {
        return;
    };
    let volumes = pod.volumes.get_or_insert_with(Vec::new);
    if !volumes.iter().any(|v| v.name == volume.name) {
        volumes.push(volume);
    }
    if let Some(c) = pod.containers.first_mut() {
        let mounts = c.volume_mounts.get_or_insert_with(Vec::new);
        if !mounts.iter().any(|m| m.name == mount.name) {
            mounts.push(mount);
        }
        let https = |p: &mut Option<Probe>| {
            if let Some(g) = p.as_mut().and_then(|p| p.http_get.as_mut()) {
                g.scheme = Some("HTTPS".into());
            }
        };
        https(&mut c.startup_probe);
        https(&mut c.readiness_probe);
        https(&mut c.liveness_probe);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;

    #[test]
    fn issued_certificates_carry_the_service_names_and_chain_to_the_ca() {
        let ca = generate_ca("test CA", NOW).expect("ca");
        let names = service_dns_names("placement-api", "os");
        let leaf = issue_serving(&ca, &names, NOW).expect("leaf");
        assert_eq!(reissue_reason(&leaf.cert, &ca.cert, &names, NOW), None);
        let der = pem_der(&leaf.cert).expect("der");
        let (_, c) = x509_parser::parse_x509_certificate(&der).expect("x509");
        assert!(!c.is_ca());
        let ca_der = pem_der(&ca.cert).expect("ca der");
        let (_, cac) = x509_parser::parse_x509_certificate(&ca_der).expect("ca x509");
        assert!(cac.is_ca());
        // The signature verifies with the CA's public key.
        c.verify_signature(Some(cac.public_key()))
            .expect("signed by the CA");
        let eku = c
            .extended_key_usage()
            .ok()
            .flatten()
            .expect("extended key usage");
        assert!(eku.value.server_auth);
    }

    #[test]
    fn not_after_is_read_from_the_certificate() {
        let ca = generate_ca("test CA", NOW).expect("ca");
        let leaf = issue_serving(&ca, &["a".to_string()], NOW).expect("leaf");
        assert_eq!(not_after(&leaf.cert), Some(NOW + CERT_LIFETIME_SECS));
        assert_eq!(not_after("garbage"), None);
    }

    #[test]
    fn reissue_on_another_ca_missing_names_expiry_and_garbage() {
        let ca = generate_ca("test CA", NOW).expect("ca");
        let other = generate_ca("other CA", NOW).expect("ca");
        let names = service_dns_names("keystone-api", "os");
        let leaf = issue_serving(&ca, &names, NOW).expect("leaf");
        assert!(reissue_reason(&leaf.cert, &other.cert, &names, NOW).is_some());
        let more = [names.clone(), vec!["keystone.example.org".into()]].concat();
        let why = reissue_reason(&leaf.cert, &ca.cert, &more, NOW).expect("missing name");
        assert!(why.contains("keystone.example.org"), "{why}");
        assert_eq!(
            reissue_reason(&leaf.cert, &ca.cert, &names, NOW + CERT_LIFETIME_SECS / 2),
            None
        );
        assert!(
            reissue_reason(
                &leaf.cert,
                &ca.cert,
                &names,
                NOW + CERT_LIFETIME_SECS * 3 / 4
            )
            .is_some()
        );
        assert!(reissue_reason("garbage", &ca.cert, &names, NOW).is_some());
    }

    #[test]
    fn ip_names_become_ip_sans() {
        let ca = generate_ca("test CA", NOW).expect("ca");
        let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
        let leaf = issue_serving(&ca, &names, NOW).expect("leaf");
        assert_eq!(reissue_reason(&leaf.cert, &ca.cert, &names, NOW), None);
    }

    #[test]
    fn uwsgi_serves_https_with_the_files() {
        let ini = "[uwsgi]\nhttp-socket = 0.0.0.0:8778\nmaster = true\n";
        let out = uwsgi_https(ini, "/t/tls.crt", "/t/tls.key");
        assert_eq!(
            out,
            "[uwsgi]\nhttps-socket = 0.0.0.0:8778,/t/tls.crt,/t/tls.key\nmaster = true\n"
        );
    }

    #[test]
    fn client_ca_lands_only_in_present_sections() {
        let conf = "[DEFAULT]\ndebug = false\n[keystone_authtoken]\nauth_url = https://k/v3\n[placement]\nauth_url = https://k/v3\n";
        let out = Ini::parse(&set_client_ca(conf, &CLIENT_SECTIONS, "/etc/x/ca.crt"));
        assert_eq!(
            out.get("keystone_authtoken", "cafile"),
            Some("/etc/x/ca.crt")
        );
        assert_eq!(out.get("placement", "cafile"), Some("/etc/x/ca.crt"));
        assert_eq!(out.get("glance", "cafile"), None);
        assert_eq!(out.get("DEFAULT", "debug"), Some("false"));
    }

    #[test]
    fn bundles_keep_each_ca_once() {
        assert_eq!(ca_bundle([None, None]), None);
        assert_eq!(
            ca_bundle([Some("A\n"), None, Some("A"), Some("B")]).as_deref(),
            Some("A\nB\n")
        );
    }

    #[test]
    fn file_edits_touch_only_the_named_files() {
        let mut files = BTreeMap::from([
            (
                "nova.conf".to_string(),
                "[placement]\nauth_url = https://k/v3\n".to_string(),
            ),
            (
                "api-uwsgi.ini".to_string(),
                "[uwsgi]\nhttp-socket = 0.0.0.0:8774\n".to_string(),
            ),
            (
                "metadata-uwsgi.ini".to_string(),
                "[uwsgi]\nhttp-socket = 0.0.0.0:8775\n".to_string(),
            ),
        ]);
        edit_files(
            &mut files,
            "/etc/nova/rendered",
            &["nova.conf"],
            &["api-uwsgi.ini"],
            Some("CA"),
            Some(POD_TLS_DIR),
        );
        assert_eq!(
            Ini::parse(&files["nova.conf"]).get("placement", "cafile"),
            Some("/etc/nova/rendered/api-ca.crt")
        );
        assert_eq!(files[CLIENT_CA_FILE], "CA");
        assert!(files["api-uwsgi.ini"].contains(
            "https-socket = 0.0.0.0:8774,/etc/openstack-tls/tls.crt,/etc/openstack-tls/tls.key"
        ));
        assert!(files["metadata-uwsgi.ini"].contains("http-socket = 0.0.0.0:8775"));
        let mut plain = BTreeMap::from([("a.conf".to_string(), "[glance]\nx = 1\n".to_string())]);
        edit_files(&mut plain, "/etc/a", &["a.conf"], &[], None, None);
        assert_eq!(plain.len(), 1);
        assert!(!plain["a.conf"].contains("cafile"));
    }

    #[test]
    fn a_new_certificate_or_ca_changes_the_hash() {
        let a = config_hash("h", Some("cert1"), Some("ca1"));
        assert_ne!(a, config_hash("h", Some("cert2"), Some("ca1")));
        assert_ne!(a, config_hash("h", Some("cert1"), Some("ca2")));
        assert_eq!(a, config_hash("h", Some("cert1"), Some("ca1")));
    }

    #[test]
    fn the_script_reads_the_ca_from_the_environment() {
        let s = with_env_ca("import os, sys\nprint(1)\n");
        assert!(
            s.contains(CA_ENV) && s.contains("REQUESTS_CA_BUNDLE"),
            "{s}"
        );
        assert!(s.ends_with("import os, sys\nprint(1)\n"), "{s}");
    }

    #[test]
    fn public_hosts() {
        assert_eq!(
            url_host("https://keystone.example.org/v3").as_deref(),
            Some("keystone.example.org")
        );
        assert_eq!(
            url_host("https://k.example.org:8443").as_deref(),
            Some("k.example.org")
        );
        assert_eq!(url_host("http://[::1]:5000/v3").as_deref(), Some("::1"));
        assert_eq!(url_host("https:///v3"), None);
    }

    #[test]
    fn https_urls() {
        assert_eq!(
            https_url("http://a.b.svc:5000/v3"),
            "https://a.b.svc:5000/v3"
        );
        assert_eq!(https_url("https://x"), "https://x");
    }

    #[test]
    fn the_key_is_not_debug_printed() {
        let ck = CertAndKey {
            cert: "C".into(),
            key: "SECRETKEY".into(),
        };
        assert!(!format!("{ck:?}").contains("SECRETKEY"));
    }
}
