//! Real checks of the external services an OpenStack control plane depends on.
//!
//! The control-plane operator references databases, message queues, caches, object storage and
//! OVN databases that it does not deploy; before a service rolls out, each one is checked for
//! real: a TCP connection to every endpoint, the TLS handshake verified against the CA the user
//! gave (with the client certificate when given), and the service's own protocol spoken far
//! enough to prove the credentials work:
//!
//! | kind | endpoint | what is spoken |
//! |---|---|---|
//! | `Database` | `host:port` | MySQL/MariaDB handshake (TLS through `SSLRequest`), `mysql_native_password` auth (cleartext over TLS when the server asks), optional database |
//! | `Messaging` | `host:port` | AMQP 0-9-1 connection with PLAIN auth, opening the vhost (`extra["vhost"]`, default `/`); amqps when TLS |
//! | `Cache` | `host:port` | memcached `version` (TLS when configured); with a username, SASL PLAIN over the binary protocol (memcached `-S`, oslo.cache's SASL mode) |
//! | `ObjectStorage` | `http(s)://host:port` | a SigV4-signed `ListBuckets`, or `HeadBucket` of `extra["bucket"]` |
//! | `Ovn` | `tcp:host:port` / `ssl:host:port` | OVSDB JSON-RPC `list_dbs`; all endpoints together must serve `OVN_Northbound` and `OVN_Southbound` |
//!
//! [`check`] never fails and never panics: it returns a [`Report`] with one [`Outcome`] per
//! condition, each failure carrying a CamelCase reason (see [`reason`]) and a human message that
//! names the endpoint and what failed, never a secret. This crate knows nothing of Kubernetes:
//! the controller resolves Secrets into a [`Target`] and turns the [`Report`] into conditions.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use secrecy::{SecretSlice, SecretString};

use crate::steps::{Failure, Stage, Steps};

mod amqp;
mod endpoint;
mod memcached;
mod mysql;
mod net;
mod ovsdb;
mod s3;
mod steps;

/// The five kinds of external service a control plane references.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServiceKind {
    /// MariaDB or MySQL.
    Database,
    /// RabbitMQ (AMQP 0-9-1).
    Messaging,
    /// Memcached.
    Cache,
    /// An S3-compatible object store.
    ObjectStorage,
    /// OVN's northbound and southbound OVSDB databases.
    Ovn,
}

impl ServiceKind {
    /// The name used in the `OpenStackExternalService` spec (`database`, `objectStorage`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceKind::Database => "database",
            ServiceKind::Messaging => "messaging",
            ServiceKind::Cache => "cache",
            ServiceKind::ObjectStorage => "objectStorage",
            ServiceKind::Ovn => "ovn",
        }
    }
}

impl fmt::Display for ServiceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What to check: one external service with its resolved credentials.
#[derive(Debug, Clone)]
pub struct Target {
    /// Which protocol to speak.
    pub kind: ServiceKind,
    /// `host:port` (`[v6]:port` for IPv6); `http(s)://host:port` for object storage;
    /// `tcp:host:port` or `ssl:host:port` for OVN (northbound and southbound both listed).
    pub endpoints: Vec<String>,
    /// Database or messaging user, memcached user, S3 access key id.
    pub username: Option<String>,
    /// Database or messaging password, memcached password, S3 secret key.
    pub password: Option<SecretString>,
    /// TLS to use; `None` is plain TCP. For object storage and OVN the endpoint's scheme
    /// (`https://`, `ssl:`) decides whether TLS is spoken, and these settings (or, when `None`,
    /// the system trust store without a client certificate) say how.
    pub tls: Option<TlsSettings>,
    /// Kind-specific settings: `vhost` (messaging, default `/`), `bucket` (object storage,
    /// optional), `database` (database, optional), `region` (object storage, default `us-east-1`).
    pub extra: BTreeMap<String, String>,
}

/// How to verify the server and whom to present as the client.
#[derive(Debug, Clone, Default)]
pub struct TlsSettings {
    /// PEM CA bundle to trust; `None` trusts nothing but is only usable with `Insecure`.
    pub ca_pem: Option<Vec<u8>>,
    /// PEM client certificate chain (OVN `ssl:` requires one).
    pub client_cert_pem: Option<Vec<u8>>,
    /// PEM private key of the client certificate.
    pub client_key_pem: Option<SecretSlice<u8>>,
    /// How strictly the server certificate is verified.
    pub verify: VerifyMode,
    /// With `Full`: the DNS name the certificate must carry instead of the endpoint's host
    /// (an endpoint addressed by IP, a relay or a load balancer the certificate does not name).
    pub server_name: Option<String>,
}

/// How the server certificate is verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VerifyMode {
    /// Chain to the CA and the endpoint's host name (or IP) in the certificate.
    #[default]
    Full,
    /// Chain to the CA, no host name check.
    CaOnly,
    /// No verification at all (the handshake still has to succeed).
    Insecure,
}

/// The result of one check step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The step succeeded; `detail` says what was seen (server version, databases served...).
    Passed {
        /// What was seen, for the condition message.
        detail: String,
    },
    /// The step failed.
    Failed {
        /// CamelCase reason, one of [`reason`].
        reason: String,
        /// Human message naming the endpoint and what failed; never contains a secret.
        message: String,
    },
    /// The step did not run: it does not apply (no TLS configured) or an earlier step failed.
    NotChecked {
        /// Why it did not run.
        why: String,
    },
}

impl Outcome {
    /// True for [`Outcome::Failed`].
    pub fn is_failed(&self) -> bool {
        matches!(self, Outcome::Failed { .. })
    }

    /// True for [`Outcome::Passed`].
    pub fn is_passed(&self) -> bool {
        matches!(self, Outcome::Passed { .. })
    }

    /// The failure reason, if this step failed.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Outcome::Failed { reason, .. } => Some(reason),
            _ => None,
        }
    }

    /// The human text of any outcome: detail, failure message or why it was not checked.
    pub fn message(&self) -> &str {
        match self {
            Outcome::Passed { detail } => detail,
            Outcome::Failed { message, .. } => message,
            Outcome::NotChecked { why } => why,
        }
    }
}

/// One outcome per condition the controller writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Every endpoint accepted a TCP connection and answered in the expected protocol.
    pub endpoint_reachable: Outcome,
    /// The TLS handshake succeeded and the server certificate was verified as configured.
    pub tls_ready: Outcome,
    /// The credentials were accepted (and the vhost/database/bucket opened).
    pub authenticated: Outcome,
}

impl Report {
    /// Ready when nothing failed and the endpoint was reached.
    pub fn is_ready(&self) -> bool {
        self.endpoint_reachable.is_passed() && self.first_failure().is_none()
    }

    /// (condition type, outcome) in the order the steps run: `EndpointReachable`, `TLSReady`,
    /// `Authenticated`.
    ///
    /// A controller maps `Passed` to status True, `Failed` to False with its reason, and
    /// `NotChecked` to False (step not reached) or, for `TLSReady` when no TLS is configured,
    /// to whatever it reports for "not applicable"; [`Report::is_ready`] is the `Ready` verdict.
    pub fn conditions(&self) -> [(&'static str, &Outcome); 3] {
        [
            ("EndpointReachable", &self.endpoint_reachable),
            ("TLSReady", &self.tls_ready),
            ("Authenticated", &self.authenticated),
        ]
    }

    /// The first failed step as (condition type, outcome), in the order the steps run.
    pub fn first_failure(&self) -> Option<(&'static str, &Outcome)> {
        self.conditions().into_iter().find(|(_, o)| o.is_failed())
    }
}

/// The failure reasons [`check`] reports.
pub mod reason {
    /// The endpoint string cannot be parsed for this kind.
    pub const INVALID_ENDPOINT: &str = "InvalidEndpoint";
    /// The target lacks something the check needs (no endpoints, TLS material unreadable).
    pub const INVALID_TARGET: &str = "InvalidTarget";
    /// The host name did not resolve.
    pub const NAME_NOT_RESOLVED: &str = "NameNotResolved";
    /// No route to the host or network.
    pub const HOST_UNREACHABLE: &str = "HostUnreachable";
    /// The host answered but nothing listens on the port.
    pub const CONNECTION_REFUSED: &str = "ConnectionRefused";
    /// The step did not finish within the timeout.
    pub const TIMEOUT: &str = "Timeout";
    /// The server answered something other than the expected protocol, or closed early.
    pub const PROTOCOL_ERROR: &str = "ProtocolError";
    /// The server certificate does not chain to the configured CA.
    pub const CERTIFICATE_NOT_TRUSTED: &str = "CertificateNotTrusted";
    /// The server certificate does not name the endpoint's host.
    pub const CERTIFICATE_NAME_MISMATCH: &str = "CertificateNameMismatch";
    /// The server certificate is expired or not yet valid.
    pub const CERTIFICATE_EXPIRED: &str = "CertificateExpired";
    /// The server refused our client certificate (or wanted one and got none).
    pub const CLIENT_CERTIFICATE_REJECTED: &str = "ClientCertificateRejected";
    /// The TLS handshake failed for another reason (server not speaking TLS, no common cipher).
    pub const TLS_HANDSHAKE_FAILED: &str = "TlsHandshakeFailed";
    /// TLS is configured but the server does not offer it (MySQL without SSL).
    pub const TLS_NOT_OFFERED: &str = "TlsNotOffered";
    /// The credentials were refused.
    pub const ACCESS_DENIED: &str = "AccessDenied";
    /// The server wants credentials and none were given.
    pub const CREDENTIALS_REQUIRED: &str = "CredentialsRequired";
    /// The user may log in but not open the vhost/database/bucket.
    pub const NOT_PERMITTED: &str = "NotPermitted";
    /// The named vhost/database/bucket does not exist.
    pub const NOT_FOUND: &str = "NotFound";
    /// The OVSDB server does not serve the OVN database it should.
    pub const DATABASE_NOT_SERVED: &str = "DatabaseNotServed";
    /// The server uses an authentication method this checker cannot speak.
    pub const UNSUPPORTED_AUTH: &str = "UnsupportedAuthentication";
}

/// Whether `endpoint` has the form `kind` expects; the error says what form was expected, for
/// an `InvalidSpec` condition or an admission message that names the field.
pub fn validate_endpoint(kind: ServiceKind, endpoint: &str) -> Result<(), String> {
    endpoint::parse(kind, endpoint).map(|_| ())
}

/// Checks every endpoint of `target` (concurrently); each endpoint's exchange gets `timeout`.
///
/// A condition fails when it fails on any endpoint (the message names every failing endpoint),
/// passes when it passes on all. For OVN the endpoints together must also serve both
/// `OVN_Northbound` and `OVN_Southbound`.
pub async fn check(target: &Target, timeout: Duration) -> Report {
    if target.endpoints.is_empty() {
        return steps::combine(vec![Steps::new(false).finish(
            target.kind.as_str(),
            Some(Failure::new(
                Stage::Reachable,
                reason::INVALID_TARGET,
                "no endpoints given",
            )),
        )]);
    }
    let mut tls_config = None;
    let probes = target.endpoints.iter().map(|raw| {
        let parsed = endpoint::parse(target.kind, raw);
        let tls = match &parsed {
            Ok(ep) => ep.tls_scheme.unwrap_or(target.tls.is_some()),
            Err(_) => false,
        };
        let config = tls.then(|| {
            tls_config
                .get_or_insert_with(|| net::client_config(&target.tls.clone().unwrap_or_default()))
                .clone()
        });
        async move {
            let mut steps = Steps::new(tls);
            let ep = match parsed {
                Ok(ep) => ep,
                Err(m) => {
                    let f = Failure::new(Stage::Reachable, reason::INVALID_ENDPOINT, m);
                    return (steps.finish(raw, Some(f)), Vec::new());
                }
            };
            let failure = match tokio::time::timeout(
                timeout,
                probe(&ep, target, config.as_ref(), &mut steps),
            )
            .await
            {
                Ok(Ok(())) => None,
                Ok(Err(f)) => Some(f),
                Err(_) => {
                    let stage = steps.pending();
                    Some(Failure::new(
                        stage,
                        reason::TIMEOUT,
                        format!(
                            "no answer within {:?} ({} step)",
                            timeout,
                            stage.condition()
                        ),
                    ))
                }
            };
            let served = std::mem::take(&mut steps.served);
            (steps.finish(raw, failure), served)
        }
    });
    let results = futures::future::join_all(probes.collect::<Vec<_>>()).await;
    let mut served: Vec<String> = results.iter().flat_map(|(_, s)| s.clone()).collect();
    let mut report = steps::combine(results.into_iter().map(|(o, _)| o).collect());
    if target.kind == ServiceKind::Ovn && report.authenticated.is_passed() {
        served.sort();
        served.dedup();
        let missing: Vec<&str> = [ovsdb::NORTHBOUND, ovsdb::SOUTHBOUND]
            .into_iter()
            .filter(|d| !served.iter().any(|s| s == d))
            .collect();
        if !missing.is_empty() {
            report.authenticated = Outcome::Failed {
                reason: reason::DATABASE_NOT_SERVED.to_string(),
                message: format!(
                    "no endpoint serves {} ({})",
                    missing.join(" or "),
                    report.authenticated.message()
                ),
            };
        }
    }
    report
}

/// One endpoint: TCP, then TLS (in-protocol for MySQL), then the protocol.
async fn probe(
    ep: &endpoint::Endpoint,
    target: &Target,
    tls: Option<&Result<std::sync::Arc<rustls::ClientConfig>, String>>,
    steps: &mut Steps,
) -> Result<(), Failure> {
    let tcp = net::connect(&ep.host, ep.port).await?;
    if target.kind == ServiceKind::Database {
        return mysql::probe(tcp, &ep.host, target, tls, steps).await;
    }
    let peer = tcp
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| ep.authority());
    steps.pass(
        Stage::Reachable,
        format!("TCP connection to {peer} established"),
    );
    let io: Box<dyn net::Io> = match tls {
        None => Box::new(tcp),
        Some(config) => {
            let config = config
                .as_ref()
                .map_err(|m| Failure::new(Stage::Tls, reason::INVALID_TARGET, m.clone()))?;
            let s = net::handshake(tcp, config.clone(), &ep.host).await?;
            steps.pass(Stage::Tls, net::describe(&s, target.tls.as_ref()));
            Box::new(s)
        }
    };
    match target.kind {
        ServiceKind::Messaging => amqp::probe(io, target, steps).await,
        ServiceKind::Cache => memcached::probe(io, target, steps).await,
        ServiceKind::ObjectStorage => {
            // For a server that closes the connection after an answer.
            let reopen = async || -> Result<Box<dyn net::Io>, Failure> {
                let tcp = net::connect(&ep.host, ep.port).await?;
                Ok(match tls {
                    None => Box::new(tcp) as Box<dyn net::Io>,
                    Some(Ok(config)) => {
                        Box::new(net::handshake(tcp, config.clone(), &ep.host).await?)
                    }
                    Some(Err(m)) => {
                        return Err(Failure::new(Stage::Tls, reason::INVALID_TARGET, m.clone()));
                    }
                })
            };
            s3::probe(io, ep, target, steps, reopen).await
        }
        ServiceKind::Ovn => ovsdb::probe(io, steps).await,
        ServiceKind::Database => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(kind: ServiceKind, endpoints: &[&str]) -> Target {
        Target {
            kind,
            endpoints: endpoints.iter().map(|e| e.to_string()).collect(),
            username: None,
            password: None,
            tls: None,
            extra: BTreeMap::new(),
        }
    }

    #[test]
    fn the_check_future_is_send_so_controllers_can_spawn_it() {
        fn assert_send<T: Send>(_: &T) {}
        let t = target(ServiceKind::Cache, &["127.0.0.1:1"]);
        let fut = check(&t, Duration::from_secs(1));
        assert_send(&fut);
    }

    #[tokio::test]
    async fn no_endpoints_is_an_invalid_target() {
        let r = check(&target(ServiceKind::Database, &[]), Duration::from_secs(1)).await;
        assert_eq!(r.endpoint_reachable.reason(), Some(reason::INVALID_TARGET));
        assert!(!r.is_ready());
    }

    #[test]
    fn kinds_are_named_as_in_the_spec() {
        let names: Vec<String> = [
            ServiceKind::Database,
            ServiceKind::Messaging,
            ServiceKind::Cache,
            ServiceKind::ObjectStorage,
            ServiceKind::Ovn,
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(
            names,
            ["database", "messaging", "cache", "objectStorage", "ovn"]
        );
    }
}
