//! TCP connections and TLS handshakes, their failures classified into reasons.

use std::io;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    AlertDescription, CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore,
    SignatureScheme,
};
use secrecy::ExposeSecret;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::steps::{Failure, Stage};
use crate::{TlsSettings, VerifyMode, reason};

/// A byte stream, plain or TLS.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Opens a TCP connection to the first address of `host` that accepts one.
pub(crate) async fn connect(host: &str, port: u16) -> Result<TcpStream, Failure> {
    let addrs: Vec<_> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| {
            Failure::new(
                Stage::Reachable,
                reason::NAME_NOT_RESOLVED,
                format!("cannot resolve host name {host}: {e}"),
            )
        })?
        .collect();
    let mut last = None;
    for addr in &addrs {
        match TcpStream::connect(addr).await {
            Ok(s) => return Ok(s),
            Err(e) => last = Some((addr, e)),
        }
    }
    let Some((addr, e)) = last else {
        return Err(Failure::new(
            Stage::Reachable,
            reason::NAME_NOT_RESOLVED,
            format!("host name {host} resolves to no address"),
        ));
    };
    let (r, message) = match e.kind() {
        io::ErrorKind::ConnectionRefused => (
            reason::CONNECTION_REFUSED,
            format!("connection refused: nothing listens on {addr}"),
        ),
        io::ErrorKind::HostUnreachable | io::ErrorKind::NetworkUnreachable => (
            reason::HOST_UNREACHABLE,
            format!("{addr} is unreachable ({e})"),
        ),
        io::ErrorKind::TimedOut => (
            reason::TIMEOUT,
            format!("TCP connection to {addr} timed out"),
        ),
        _ => (
            reason::HOST_UNREACHABLE,
            format!("TCP connection to {addr} failed: {e}"),
        ),
    };
    Err(Failure::new(Stage::Reachable, r, message))
}

/// Builds the rustls client configuration: trust, verification mode and client certificate.
pub(crate) fn client_config(tls: &TlsSettings) -> Result<Arc<ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier = server_verifier(tls, &provider)?;
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match (&tls.client_cert_pem, &tls.client_key_pem) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("the client certificate is not valid PEM: {e}"))?;
            if chain.is_empty() {
                return Err("the client certificate holds no PEM certificate".into());
            }
            // The error of a key parse never quotes the key.
            let key = PrivateKeyDer::from_pem_slice(key.expose_secret())
                .map_err(|e| format!("the client key is not a valid PEM private key: {e}"))?;
            builder.with_client_auth_cert(chain, key).map_err(|e| {
                format!("the client certificate and key do not match or are unusable: {e}")
            })?
        }
        (None, None) => builder.with_no_client_auth(),
        (Some(_), None) => return Err("a client certificate is given without its key".into()),
        (None, Some(_)) => return Err("a client key is given without its certificate".into()),
    };
    Ok(Arc::new(config))
}

/// How the server's certificate is verified: trust (the CA bundle, else the system store),
/// the verification mode and the name expected.
fn server_verifier(
    tls: &TlsSettings,
    provider: &Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn ServerCertVerifier>, String> {
    let mut roots = RootCertStore::empty();
    match &tls.ca_pem {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| format!("the CA bundle is not valid PEM: {e}"))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("the CA bundle holds an unusable certificate: {e}"))?;
            }
            if roots.is_empty() {
                return Err("the CA bundle holds no PEM certificate".into());
            }
        }
        None => {
            // No CA given: the system trust store, as any client would use for a public endpoint.
            let native = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(native.certs);
            if roots.is_empty() && tls.verify != VerifyMode::Insecure {
                return Err(
                    "no CA bundle given and the system trust store is empty; give the CA".into(),
                );
            }
        }
    }
    let verifier: Arc<dyn ServerCertVerifier> = match tls.verify {
        VerifyMode::Insecure => {
            Arc::new(AnyCertificate(provider.signature_verification_algorithms))
        }
        mode => {
            let webpki =
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| format!("cannot use the CA bundle: {e}"))?;
            match (mode, &tls.server_name) {
                (VerifyMode::CaOnly, _) => Arc::new(NoHostName(webpki)),
                (_, Some(name)) => {
                    let name = ServerName::try_from(name.clone()).map_err(|_| {
                        format!("the server name {name} is neither a DNS name nor an IP address")
                    })?;
                    Arc::new(ExpectedName {
                        inner: webpki,
                        name,
                    })
                }
                _ => webpki,
            }
        }
    };
    Ok(verifier)
}

/// Runs the TLS handshake over `tcp`; the server name is the endpoint's host (name or IP).
pub(crate) async fn handshake<S>(
    tcp: S,
    config: Arc<ClientConfig>,
    host: &str,
) -> Result<TlsStream<S>, Failure>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let name = ServerName::try_from(host.to_owned()).map_err(|_| {
        Failure::new(
            Stage::Tls,
            reason::INVALID_ENDPOINT,
            format!("{host} is neither a DNS name nor an IP address usable for TLS"),
        )
    })?;
    TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| {
            tls_failure(&e).unwrap_or_else(|| {
                let what = if e.kind() == io::ErrorKind::UnexpectedEof {
                    "the server closed the connection during the TLS handshake (does it speak TLS on this port?)".to_string()
                } else {
                    format!("TLS handshake failed: {e}")
                };
                Failure::new(Stage::Tls, reason::TLS_HANDSHAKE_FAILED, what)
            })
        })
}

/// What the handshake established, for the TLSReady detail.
pub(crate) fn describe<S>(s: &TlsStream<S>, tls: Option<&TlsSettings>) -> String {
    let verify = tls.map(|t| t.verify).unwrap_or_default();
    let name = tls.and_then(|t| t.server_name.as_deref());
    let (_, conn) = s.get_ref();
    let version = conn
        .protocol_version()
        .and_then(|v| v.as_str())
        .unwrap_or("TLS");
    let expected;
    let how = match (verify, name) {
        (VerifyMode::Full, Some(n)) => {
            expected = format!("server certificate verified for the name {n}");
            expected.as_str()
        }
        (VerifyMode::Full, None) => "server certificate and host name verified",
        (VerifyMode::CaOnly, _) => "server certificate verified (host name not checked)",
        (VerifyMode::Insecure, _) => "server certificate NOT verified (verify mode Insecure)",
    };
    format!("{} established, {how}", version.replace('_', "."))
}

/// A TLS failure inside an I/O error (handshake, or an alert on a later read), classified.
pub(crate) fn tls_failure(e: &io::Error) -> Option<Failure> {
    let err = e.get_ref()?.downcast_ref::<rustls::Error>()?;
    let (r, msg) = match err {
        rustls::Error::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer | CertificateError::BadSignature => (
                reason::CERTIFICATE_NOT_TRUSTED,
                format!("the server certificate is not signed by a trusted CA ({c:?})"),
            ),
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                (
                    reason::CERTIFICATE_NAME_MISMATCH,
                    format!("the server certificate does not name this host: {err}"),
                )
            }
            CertificateError::Expired
            | CertificateError::ExpiredContext { .. }
            | CertificateError::NotValidYet
            | CertificateError::NotValidYetContext { .. } => (
                reason::CERTIFICATE_EXPIRED,
                format!("the server certificate is not valid now: {err}"),
            ),
            _ => (
                reason::CERTIFICATE_NOT_TRUSTED,
                format!("the server certificate was refused: {err}"),
            ),
        },
        rustls::Error::AlertReceived(
            a @ (AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateRequired
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateRevoked
            | AlertDescription::AccessDenied),
        ) => (
            reason::CLIENT_CERTIFICATE_REJECTED,
            format!("the server rejected our client certificate (TLS alert {a:?})"),
        ),
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => (
            reason::TLS_HANDSHAKE_FAILED,
            format!("the server does not answer TLS on this port ({err})"),
        ),
        _ => (reason::TLS_HANDSHAKE_FAILED, format!("TLS failed: {err}")),
    };
    Some(Failure::new(Stage::Tls, r, msg))
}

/// An I/O error while speaking the protocol: a TLS alert becomes a TLSReady failure, the rest a
/// failure of `stage` saying what we were doing.
pub(crate) fn io_failure(stage: Stage, doing: &str, e: &io::Error) -> Failure {
    if let Some(f) = tls_failure(e) {
        return f;
    }
    let what = match e.kind() {
        io::ErrorKind::UnexpectedEof => "the server closed the connection".to_string(),
        io::ErrorKind::ConnectionReset => "the server reset the connection".to_string(),
        _ => e.to_string(),
    };
    Failure::new(stage, reason::PROTOCOL_ERROR, format!("{doing}: {what}"))
}

/// VerifyMode::CaOnly: the chain must reach the CA; the host name is not compared.
#[derive(Debug)]
struct NoHostName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for NoHostName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // webpki checks the chain before the name, so a name error means the chain is good.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// VerifyMode::Full with a server name: the chain must reach the CA and the certificate must
/// name `name`, whatever host the connection was opened to.
#[derive(Debug)]
struct ExpectedName {
    inner: Arc<WebPkiServerVerifier>,
    name: ServerName<'static>,
}

impl ServerCertVerifier for ExpectedName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner
            .verify_server_cert(end_entity, intermediates, &self.name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// VerifyMode::Insecure: any certificate; the handshake signatures are still checked.
#[derive(Debug)]
struct AnyCertificate(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CA and a leaf certificate for `name`, both PEM.
    fn ca_and_leaf(name: &str) -> (String, CertificateDer<'static>) {
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut ca = rcgen::CertificateParams::default();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "test CA");
        let ca_cert = ca.self_signed(&ca_key).expect("CA");
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let leaf_key = rcgen::KeyPair::generate().expect("key");
        let leaf = rcgen::CertificateParams::new(vec![name.to_string()])
            .expect("params")
            .signed_by(&leaf_key, &issuer)
            .expect("leaf");
        (ca_cert.pem(), leaf.der().clone())
    }

    fn verify(tls: &TlsSettings, leaf: &CertificateDer<'_>, host: &str) -> Result<(), String> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let verifier = server_verifier(tls, &provider)?;
        let host = ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
        verifier
            .verify_server_cert(leaf, &[], &host, &[], UnixTime::now())
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn server_name_is_verified_instead_of_the_endpoint_host() {
        let (ca, leaf) = ca_and_leaf("db.example.org");
        let mut tls = TlsSettings {
            ca_pem: Some(ca.into_bytes()),
            ..TlsSettings::default()
        };
        // Reached at an address the certificate does not name: Full refuses it...
        let e = verify(&tls, &leaf, "10.244.0.1").expect_err("name mismatch");
        assert!(e.contains("not valid for"), "{e}");
        // ...and accepts it with the name the certificate carries.
        tls.server_name = Some("db.example.org".into());
        verify(&tls, &leaf, "10.244.0.1").expect("verified for the server name");
        // A server name the certificate does not carry is refused, whatever the host.
        tls.server_name = Some("other.example.org".into());
        let e = verify(&tls, &leaf, "db.example.org").expect_err("wrong server name");
        assert!(e.contains("not valid for"), "{e}");
        // The chain is still checked: a certificate of another CA is not trusted.
        let (_, foreign) = ca_and_leaf("db.example.org");
        tls.server_name = Some("db.example.org".into());
        let e = verify(&tls, &foreign, "10.244.0.1").expect_err("foreign CA");
        // (Same subject as the trusted CA: webpki finds it and the signature does not match.)
        let e = e.to_lowercase();
        assert!(e.contains("issuer") || e.contains("signature"), "{e}");
    }
}
