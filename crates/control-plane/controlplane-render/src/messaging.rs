//! The `messaging` external service (RabbitMQ) as oslo.messaging reads it: the `transport_url`
//! (with Nova's cell-mapping template of it) and the `[oslo_messaging_rabbit]` TLS options.

use crate::ini::Ini;

/// The `messaging` external service, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Messaging {
    /// `host:port` of each RabbitMQ node (oslo.messaging fails over between them).
    pub hosts: Vec<String>,
    /// User the services connect as.
    pub user: String,
    /// That user's password.
    pub password: String,
    /// Virtual host (`/` is RabbitMQ's default one).
    pub vhost: String,
    /// Path of the CA bundle when the broker is reached over TLS (AMQPS); `None` is plain AMQP.
    pub ca_file: Option<String>,
}

/// What cannot be turned into a transport URL.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MessagingError {
    /// No broker endpoint.
    #[error("the messaging external service names no endpoint")]
    NoEndpoint,
    /// An endpoint that is not `host:port`.
    #[error("messaging endpoint {0:?} is not host:port")]
    BadEndpoint(String),
}

/// Percent-encodes everything but RFC 3986's unreserved characters: credentials and vhost
/// names may hold `@ : / %` that would otherwise split the URL in the wrong place.
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Messaging {
    fn checked_hosts(&self) -> Result<&[String], MessagingError> {
        if self.hosts.is_empty() {
            return Err(MessagingError::NoEndpoint);
        }
        for h in &self.hosts {
            let ok = h.rsplit_once(':').is_some_and(|(host, port)| {
                !host.is_empty() && !host.contains(['/', ' ', '@']) && port.parse::<u16>().is_ok()
            });
            if !ok {
                return Err(MessagingError::BadEndpoint(h.clone()));
            }
        }
        Ok(&self.hosts)
    }

    /// The vhost as the URL's path: RabbitMQ's default `/` is the empty path.
    fn vhost_path(&self) -> String {
        if self.vhost == "/" || self.vhost.is_empty() {
            String::new()
        } else {
            percent_encode(&self.vhost)
        }
    }

    /// `rabbit://user:pass@host1:port1,user:pass@host2:port2/vhost`.
    pub fn transport_url(&self) -> Result<String, MessagingError> {
        let creds = format!(
            "{}:{}",
            percent_encode(&self.user),
            percent_encode(&self.password)
        );
        let netlocs: Vec<String> = self
            .checked_hosts()?
            .iter()
            .map(|h| format!("{creds}@{h}"))
            .collect();
        Ok(format!(
            "rabbit://{}/{}",
            netlocs.join(","),
            self.vhost_path()
        ))
    }

    /// The same URL as a Nova cell-mapping template: Nova fills `{username}`, `{password}`,
    /// `{hostname}` and `{port}` (numbered per node when there are several) from the reading
    /// process's own `transport_url`, so the API database stores no credentials and a password
    /// change needs no cell update.
    pub fn cell_template(&self) -> Result<String, MessagingError> {
        let hosts = self.checked_hosts()?;
        let netlocs: Vec<String> = if hosts.len() == 1 {
            vec!["{username}:{password}@{hostname}:{port}".into()]
        } else {
            (1..=hosts.len())
                .map(|n| format!("{{username{n}}}:{{password{n}}}@{{hostname{n}}}:{{port{n}}}"))
                .collect()
        };
        Ok(format!("{{scheme}}://{}/{{path}}", netlocs.join(",")))
    }

    /// Sets `[DEFAULT] transport_url` and the TLS options of `[oslo_messaging_rabbit]`.
    pub fn set(&self, ini: &mut Ini) -> Result<(), MessagingError> {
        ini.set("DEFAULT", "transport_url", self.transport_url()?);
        if let Some(ca) = &self.ca_file {
            // oslo.messaging verifies the broker's chain against ssl_ca_file once it is given.
            ini.set("oslo_messaging_rabbit", "ssl", "true").set(
                "oslo_messaging_rabbit",
                "ssl_ca_file",
                ca.clone(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mq() -> Messaging {
        Messaging {
            hosts: vec!["rabbit-0:5671".into(), "rabbit-1:5671".into()],
            user: "nova".into(),
            password: "p@ss:w/rd%".into(),
            vhost: "openstack".into(),
            ca_file: Some("/etc/nova/mq-ca/ca.crt".into()),
        }
    }

    #[test]
    fn credentials_are_encoded_and_every_node_is_listed() {
        assert_eq!(
            mq().transport_url().unwrap(),
            "rabbit://nova:p%40ss%3Aw%2Frd%25@rabbit-0:5671,nova:p%40ss%3Aw%2Frd%25@rabbit-1:5671/openstack"
        );
        let mut m = mq();
        m.vhost = "/".into();
        m.hosts.truncate(1);
        assert!(m.transport_url().unwrap().ends_with("@rabbit-0:5671/"));
    }

    #[test]
    fn the_cell_template_has_a_slot_per_node() {
        assert_eq!(
            mq().cell_template().unwrap(),
            "{scheme}://{username1}:{password1}@{hostname1}:{port1},{username2}:{password2}@{hostname2}:{port2}/{path}"
        );
        let mut m = mq();
        m.hosts.truncate(1);
        assert_eq!(
            m.cell_template().unwrap(),
            "{scheme}://{username}:{password}@{hostname}:{port}/{path}"
        );
    }

    #[test]
    fn tls_only_with_a_ca_and_bad_endpoints_refused() {
        let mut ini = Ini::default();
        mq().set(&mut ini).unwrap();
        assert_eq!(ini.get("oslo_messaging_rabbit", "ssl"), Some("true"));
        let mut m = mq();
        m.ca_file = None;
        let mut ini = Ini::default();
        m.set(&mut ini).unwrap();
        assert_eq!(ini.get("oslo_messaging_rabbit", "ssl"), None);
        m.hosts = vec!["amqp://rabbit".into()];
        assert_eq!(
            m.transport_url(),
            Err(MessagingError::BadEndpoint("amqp://rabbit".into()))
        );
        m.hosts.clear();
        assert_eq!(m.transport_url(), Err(MessagingError::NoEndpoint));
    }
}
