//! The `messaging` external service (RabbitMQ) as the services on the pipeline use it: its
//! brokers, the credentials from its Secret (rendered into `transport_url`: oslo.messaging
//! reads them from its configuration file only), its vhost and the TLS files mounted in pods.

use controlplane_api::external::ServiceKind as ExternalKind;
use controlplane_api::validation::parse_endpoint;
use controlplane_render::objects;
use k8s_openapi::api::core::v1::{Volume, VolumeMount};

use crate::runtime::{Error, State};
use crate::service::{Pass, ServiceKind, secret_str};

/// Where the broker's CA bundle is mounted in pods and Jobs.
pub const MQ_CA_DIR: &str = "/etc/ssl/mq-ca";
/// Where the client certificate Secret (`tls.crt`, `tls.key`) is mounted.
pub const MQ_CLIENT_DIR: &str = "/etc/ssl/mq-client";

/// A `messaging` external service, resolved.
#[derive(Clone, Debug)]
pub struct ResolvedMessaging {
    /// `host:port` of each broker.
    pub hosts: Vec<String>,
    /// User.
    pub user: String,
    /// Password.
    pub password: String,
    /// Virtual host (`extra.vhost`, default `/`).
    pub vhost: String,
    /// The CA bundle's path in pods when the brokers speak AMQPS.
    pub ca_file: Option<String>,
    /// The client certificate and key paths, when the service names one.
    pub client_cert: Option<(String, String)>,
    /// The volumes of the CA bundle and client certificate.
    pub volumes: Vec<(Volume, VolumeMount)>,
}

impl ResolvedMessaging {
    /// Nova's view (a CA bundle; no client certificate).
    pub fn nova(&self) -> controlplane_render::messaging::Messaging {
        controlplane_render::messaging::Messaging {
            hosts: self.hosts.clone(),
            user: self.user.clone(),
            password: self.password.clone(),
            vhost: self.vhost.clone(),
            ca_file: self.ca_file.clone(),
        }
    }

    /// Cinder's view.
    pub fn cinder(&self) -> controlplane_render::cinder::Messaging {
        controlplane_render::cinder::Messaging {
            hosts: self.hosts.clone(),
            user: self.user.clone(),
            password: self.password.clone(),
            vhost: self.vhost.clone(),
            tls: self
                .ca_file
                .is_some()
                .then(|| controlplane_render::cinder::MessagingTls {
                    ca_file: self.ca_file.clone(),
                    client_cert: self.client_cert.clone(),
                }),
        }
    }
}

/// `host:port` of a broker endpoint (`host:port` or `amqp(s)://user@host:port/`), the AMQP
/// default port filled in for URLs without one (pure).
pub fn broker(endpoint: &str, tls: bool) -> Result<String, String> {
    let (host, port) = parse_endpoint(endpoint)?;
    let port = port.unwrap_or(if tls { 5671 } else { 5672 });
    Ok(if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    })
}

impl<K: ServiceKind> Pass<'_, K> {
    /// The `messaging` external service `name`, Ready, with its credentials read from its
    /// Secret; the Blocked state naming what is missing otherwise.
    pub async fn messaging(&self, name: &str) -> Result<Result<ResolvedMessaging, State>, Error> {
        let svc = match self.external(name, ExternalKind::Messaging).await? {
            Ok(s) => s,
            Err(state) => return Ok(Err(state)),
        };
        let incomplete = |message: String| {
            Ok(Err(State::Blocked {
                reason: "ExternalServiceIncomplete".into(),
                message,
            }))
        };
        let Some(creds) = svc.spec.credentials.clone() else {
            return incomplete(format!(
                "external service {name} (messaging) has no credentials"
            ));
        };
        let tls = svc.spec.tls.clone();
        let mut hosts = Vec::new();
        for ep in &svc.spec.endpoints {
            match broker(ep, tls.is_some()) {
                Ok(h) => hosts.push(h),
                Err(e) => {
                    return incomplete(format!(
                        "external service {name} (messaging) endpoint {ep:?} {e}"
                    ));
                }
            }
        }
        let secret = self.secrets().get_opt(&creds.secret_name).await?;
        let (Some(user), Some(password)) = (
            secret
                .as_ref()
                .and_then(|s| secret_str(s, &creds.username_key)),
            secret
                .as_ref()
                .and_then(|s| secret_str(s, &creds.password_key)),
        ) else {
            return Ok(Err(State::Blocked {
                reason: "SecretMissing".into(),
                message: format!(
                    "external service {name} (messaging): Secret {} lacks key {} or {}",
                    creds.secret_name, creds.username_key, creds.password_key
                ),
            }));
        };
        let mut volumes = Vec::new();
        let mut ca_file = None;
        let mut client_cert = None;
        if let Some(t) = &tls {
            volumes.push(objects::secret_volume(
                "mq-ca",
                &t.ca_secret.name,
                MQ_CA_DIR,
            ));
            ca_file = Some(format!("{MQ_CA_DIR}/{}", t.ca_secret.key));
            if let Some(c) = &t.client_cert_secret {
                volumes.push(objects::secret_volume("mq-client", &c.name, MQ_CLIENT_DIR));
                client_cert = Some((
                    format!("{MQ_CLIENT_DIR}/tls.crt"),
                    format!("{MQ_CLIENT_DIR}/tls.key"),
                ));
            }
        }
        Ok(Ok(ResolvedMessaging {
            hosts,
            user,
            password,
            vhost: svc
                .spec
                .extra
                .get("vhost")
                .cloned()
                .unwrap_or_else(|| "/".into()),
            ca_file,
            client_cert,
            volumes,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brokers_get_their_default_port() {
        assert_eq!(broker("rmq:5672", false).as_deref(), Ok("rmq:5672"));
        assert_eq!(
            broker("amqps://rmq.example.org", true).as_deref(),
            Ok("rmq.example.org:5671")
        );
        assert_eq!(
            broker("amqp://rmq.example.org", false).as_deref(),
            Ok("rmq.example.org:5672")
        );
        assert_eq!(
            broker("[fd00::1]:5671", true).as_deref(),
            Ok("[fd00::1]:5671")
        );
        assert!(broker("rmq", false).is_err());
    }
}
