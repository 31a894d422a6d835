//! The `messaging` external service (RabbitMQ) as oslo.messaging reads it: `transport_url` and
//! `[oslo_messaging_rabbit]`'s TLS options. Cinder's API, scheduler and volume service talk
//! over it (RPC casts and calls between them).

use crate::ini::Ini;
use crate::messaging::percent_encode as encode;

/// TLS towards RabbitMQ. oslo.messaging (through py-amqp) verifies the broker's chain against
/// `ca_file` and never its host name, so the external service's `Full` and `CaOnly` modes
/// render the same; `Insecure` renders TLS without a CA (encrypted, unverified).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessagingTls {
    /// CA bundle that signs the broker's certificate; `None` only for `Insecure`.
    pub ca_file: Option<String>,
    /// Client certificate and key (PEM files), when the broker asks for one.
    pub client_cert: Option<(String, String)>,
}

/// The `messaging` external service, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Messaging {
    /// `host:port` of each broker of the cluster.
    pub hosts: Vec<String>,
    /// User name.
    pub user: String,
    /// Password.
    pub password: String,
    /// Virtual host (the external service's `vhost` extra; `/` is RabbitMQ's default).
    pub vhost: String,
    /// TLS, when the endpoints speak AMQPS.
    pub tls: Option<MessagingTls>,
}

impl Messaging {
    /// oslo.messaging's `transport_url`: `rabbit://user:pw@h1:p1,user:pw@h2:p2/vhost`.
    pub fn transport_url(&self) -> String {
        let cred = format!("{}:{}", encode(&self.user), encode(&self.password));
        let hosts: Vec<String> = self.hosts.iter().map(|h| format!("{cred}@{h}")).collect();
        format!("rabbit://{}/{}", hosts.join(","), encode(&self.vhost))
    }

    /// Sets `transport_url` and the TLS options.
    pub fn render_into(&self, ini: &mut Ini) {
        ini.set("DEFAULT", "transport_url", self.transport_url());
        if let Some(t) = &self.tls {
            ini.set("oslo_messaging_rabbit", "ssl", "true");
            if let Some(ca) = &t.ca_file {
                ini.set("oslo_messaging_rabbit", "ssl_ca_file", ca.clone());
            }
            if let Some((cert, key)) = &t.client_cert {
                ini.set("oslo_messaging_rabbit", "ssl_cert_file", cert.clone())
                    .set("oslo_messaging_rabbit", "ssl_key_file", key.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_and_vhost_are_encoded() {
        let m = Messaging {
            hosts: vec!["rmq-0:5671".into(), "rmq-1:5671".into()],
            user: "cinder".into(),
            password: "p@ss/w:rd%".into(),
            vhost: "/".into(),
            tls: None,
        };
        assert_eq!(
            m.transport_url(),
            "rabbit://cinder:p%40ss%2Fw%3Ard%25@rmq-0:5671,cinder:p%40ss%2Fw%3Ard%25@rmq-1:5671/%2F"
        );
    }

    #[test]
    fn tls_options_follow_the_inputs() {
        let mut m = Messaging {
            hosts: vec!["rmq:5671".into()],
            user: "u".into(),
            password: "p".into(),
            vhost: "openstack".into(),
            tls: Some(MessagingTls {
                ca_file: Some("/ca.pem".into()),
                client_cert: None,
            }),
        };
        let mut ini = Ini::default();
        m.render_into(&mut ini);
        assert_eq!(ini.get("oslo_messaging_rabbit", "ssl"), Some("true"));
        assert_eq!(
            ini.get("oslo_messaging_rabbit", "ssl_ca_file"),
            Some("/ca.pem")
        );
        assert_eq!(ini.get("oslo_messaging_rabbit", "ssl_cert_file"), None);
        m.tls = None;
        let mut plain = Ini::default();
        m.render_into(&mut plain);
        assert_eq!(plain.get("oslo_messaging_rabbit", "ssl"), None);
        assert_eq!(
            plain.get("DEFAULT", "transport_url"),
            Some("rabbit://u:p@rmq:5671/openstack")
        );
    }
}
