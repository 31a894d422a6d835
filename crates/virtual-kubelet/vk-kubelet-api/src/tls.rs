//! The serving certificate and the client CA: rustls configuration, PEM
//! files, a self-signed certificate for local demos, and the accept loop
//! that hands each request the identity of its verified client certificate.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use tracing::{debug, warn};

use crate::auth::{User, user_from_certificate};

/// TLS setup errors, naming the file or flag.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("{what} {path}: {message}")]
    File {
        /// `certificate`, `private key`, `client CA`.
        what: &'static str,
        /// The path.
        path: String,
        /// Why.
        message: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// A serving certificate chain and its key.
pub struct Serving {
    /// Leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    /// Its key.
    pub key: PrivateKeyDer<'static>,
}

/// Read PEM certificates.
pub fn load_certs(
    path: &Path,
    what: &'static str,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let err = |message: String| TlsError::File {
        what,
        path: path.display().to_string(),
        message,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| err(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(e.to_string()))?;
    if certs.is_empty() {
        return Err(err("no PEM certificate in it".into()));
    }
    Ok(certs)
}

/// Read a serving certificate and key from PEM files.
pub fn load_serving(cert: &Path, key: &Path) -> Result<Serving, TlsError> {
    let chain = load_certs(cert, "certificate")?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError::File {
        what: "private key",
        path: key.display().to_string(),
        message: e.to_string(),
    })?;
    Ok(Serving { chain, key })
}

/// A self-signed certificate for `node` and its addresses (local demos only:
/// the API server cannot verify it and must skip kubelet verification).
pub fn self_signed(node: &str, addresses: &[String]) -> Result<Serving, TlsError> {
    let mut names = vec![node.to_string()];
    names.extend(addresses.iter().cloned());
    let mut params =
        rcgen::CertificateParams::new(names).map_err(|e| TlsError::Config(e.to_string()))?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("{node}@self-signed"));
    let key = rcgen::KeyPair::generate().map_err(|e| TlsError::Config(e.to_string()))?;
    let cert = params
        .self_signed(&key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    Ok(Serving {
        chain: vec![cert.der().clone()],
        key: PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    })
}

/// The server's rustls configuration for a fixed certificate (see
/// [`server_config_with`]).
pub fn server_config(
    serving: Serving,
    client_ca: Option<Vec<CertificateDer<'static>>>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let cert = crate::serving_cert::ReloadableCert::empty();
    cert.set(serving)?;
    server_config_with(Arc::new(cert), client_ca)
}

/// The server's rustls configuration: the certificate `cert` serves at each
/// handshake (so it can be renewed in place); client certificates are
/// requested and verified against `client_ca` when given, but not required
/// (bearer tokens are the other way in).
pub fn server_config_with(
    cert: Arc<dyn rustls::server::ResolvesServerCert>,
    client_ca: Option<Vec<CertificateDer<'static>>>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match client_ca {
        Some(cas) => {
            let mut roots = RootCertStore::empty();
            for c in cas {
                roots
                    .add(c)
                    .map_err(|e| TlsError::Config(format!("client CA: {e}")))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| TlsError::Config(format!("client CA: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut cfg = builder.with_cert_resolver(cert);
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// The verified client certificate's user, as a request extension.
#[derive(Clone, Debug, Default)]
pub struct PeerIdentity(pub Option<User>);

/// Serve `app` over TLS on `listener` until `stop`.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: axum::Router,
    stop: CancellationToken,
) {
    let acceptor = TlsAcceptor::from(tls);
    loop {
        let (tcp, peer): (tokio::net::TcpStream, SocketAddr) = tokio::select! {
            _ = stop.cancelled() => return,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    warn!(error = %e, "kubelet API accept failed");
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(t) => t,
                Err(e) => {
                    debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
            };
            let identity = PeerIdentity(
                tls.get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .and_then(|c| user_from_certificate(c)),
            );
            let svc = app.map_request(move |mut req: http::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(identity.clone());
                req
            });
            let builder = Builder::new(TokioExecutor::new());
            let conn = builder
                .serve_connection_with_upgrades(TokioIo::new(tls), TowerToHyperService::new(svc));
            tokio::select! {
                r = conn => if let Err(e) = r { debug!(%peer, error = %e, "kubelet API connection ended"); },
                _ = stop.cancelled() => {}
            }
        });
    }
}
