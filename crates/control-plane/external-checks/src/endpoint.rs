//! Endpoint strings of each kind, parsed.

use crate::ServiceKind;

/// One parsed endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    pub port: u16,
    /// The endpoint itself says TLS (`https://`, `ssl:`); other kinds use the target's `tls`.
    pub tls_scheme: Option<bool>,
    /// Path prefix of an object-storage URL, without a trailing slash ("" for none).
    pub path: String,
}

impl Endpoint {
    /// `host:port` as it goes into a URL or a Host header (`[v6]:port`).
    pub(crate) fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// Parses `endpoint` as `kind` expects; the error says what form was expected.
pub(crate) fn parse(kind: ServiceKind, endpoint: &str) -> Result<Endpoint, String> {
    let e = endpoint.trim();
    match kind {
        ServiceKind::Database | ServiceKind::Messaging | ServiceKind::Cache => {
            let (host, port) = host_port(e).map_err(|m| format!("{m}; expected host:port"))?;
            Ok(Endpoint {
                host,
                port,
                tls_scheme: None,
                path: String::new(),
            })
        }
        ServiceKind::Ovn => {
            let (tls, rest) = if let Some(r) = e.strip_prefix("tcp:") {
                (false, r)
            } else if let Some(r) = e.strip_prefix("ssl:") {
                (true, r)
            } else {
                return Err("expected tcp:host:port or ssl:host:port".into());
            };
            let (host, port) = host_port(rest)
                .map_err(|m| format!("{m}; expected tcp:host:port or ssl:host:port"))?;
            Ok(Endpoint {
                host,
                port,
                tls_scheme: Some(tls),
                path: String::new(),
            })
        }
        ServiceKind::ObjectStorage => {
            let (tls, rest) = if let Some(r) = e.strip_prefix("https://") {
                (true, r)
            } else if let Some(r) = e.strip_prefix("http://") {
                (false, r)
            } else {
                return Err("expected an http:// or https:// URL".into());
            };
            let (authority, path) = match rest.find('/') {
                Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
                None => (rest, ""),
            };
            if path.contains(['?', '#']) {
                return Err("the URL must not carry a query or fragment".into());
            }
            let default_port = if tls { 443 } else { 80 };
            let (host, port) = if authority.ends_with(']') || !authority.contains(':') {
                (unbracket(authority)?, default_port)
            } else if authority.starts_with('[') || authority.matches(':').count() == 1 {
                host_port(authority)?
            } else {
                return Err("write an IPv6 address in brackets".into());
            };
            if host.is_empty() {
                return Err("the URL has no host".into());
            }
            Ok(Endpoint {
                host,
                port,
                tls_scheme: Some(tls),
                path: path.to_string(),
            })
        }
    }
}

fn unbracket(h: &str) -> Result<String, String> {
    match (h.strip_prefix('['), h.ends_with(']')) {
        (Some(inner), true) => Ok(inner.trim_end_matches(']').to_string()),
        (None, false) => Ok(h.to_string()),
        _ => Err(format!("unbalanced brackets in {h:?}")),
    }
}

fn host_port(s: &str) -> Result<(String, u16), String> {
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("{s:?} has no port"))?;
    if !host.starts_with('[') && host.contains(':') {
        return Err(format!("{s:?}: write an IPv6 address in brackets"));
    }
    let host = unbracket(host)?;
    if host.is_empty() || host.contains(['/', ' ', '@']) {
        return Err(format!("{s:?} has no valid host"));
    }
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("{s:?} has no valid port (1-65535)"))?;
    Ok((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_kinds() {
        let e = parse(ServiceKind::Database, "db.example:3306").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.tls_scheme),
            ("db.example", 3306, None)
        );
        let e = parse(ServiceKind::Cache, "[::1]:11211").unwrap();
        assert_eq!(
            (e.host.as_str(), e.authority()),
            ("::1", "[::1]:11211".to_string())
        );
        for bad in [
            "db",
            "db:",
            "db:0",
            "db:70000",
            ":3306",
            "::1:3306",
            "mysql://db:3306",
        ] {
            assert!(parse(ServiceKind::Database, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ovn_endpoints_carry_their_scheme() {
        let e = parse(ServiceKind::Ovn, "ssl:10.0.0.1:6641").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.tls_scheme),
            ("10.0.0.1", 6641, Some(true))
        );
        let e = parse(ServiceKind::Ovn, "tcp:[fd00::1]:6642").unwrap();
        assert_eq!((e.host.as_str(), e.tls_scheme), ("fd00::1", Some(false)));
        assert!(parse(ServiceKind::Ovn, "unix:/run/ovn/ovnnb_db.sock").is_err());
        assert!(parse(ServiceKind::Ovn, "10.0.0.1:6641").is_err());
    }

    #[test]
    fn object_storage_urls() {
        let e = parse(ServiceKind::ObjectStorage, "https://s3.example").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.tls_scheme),
            ("s3.example", 443, Some(true))
        );
        let e = parse(ServiceKind::ObjectStorage, "http://127.0.0.1:7480/").unwrap();
        assert_eq!(
            (e.port, e.path.as_str(), e.tls_scheme),
            (7480, "", Some(false))
        );
        let e = parse(ServiceKind::ObjectStorage, "https://[::1]:8443/s3").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.path.as_str()),
            ("::1", 8443, "/s3")
        );
        for bad in [
            "s3.example:443",
            "https://",
            "https://h/x?y",
            "https://::1:80",
        ] {
            assert!(parse(ServiceKind::ObjectStorage, bad).is_err(), "{bad}");
        }
    }
}
