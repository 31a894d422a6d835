//! The request log.

use serde::{Deserialize, Serialize};

use crate::rule::RuleId;

/// One request the proxy received, as it ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Arrival order (from 1).
    pub seq: u64,
    /// When it arrived (RFC 3339).
    pub time: String,
    /// Milliseconds from the proxy's start to the arrival.
    pub offset_ms: u64,
    /// Milliseconds until it was answered (or dropped).
    pub duration_ms: u64,
    /// The service of the listener it arrived on.
    pub service: String,
    /// HTTP method.
    pub method: String,
    /// Path (without the query).
    pub path: String,
    /// Query string, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// Status the client received; `None` when the connection was dropped.
    pub status: Option<u16>,
    /// Status the upstream answered, when the request was forwarded and answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_status: Option<u16>,
    /// The faults that fired on it (delays included), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<String>,
    /// The rules that fired on it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RuleId>,
    /// Why forwarding failed, when it did (the client got 502).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_error: Option<String>,
}

impl RequestRecord {
    /// Whether the upstream received it (it was forwarded, whatever the client got).
    pub fn reached_upstream(&self) -> bool {
        self.upstream_status.is_some()
    }

    /// Whether a rule other than a delay changed what happened to it.
    pub fn faulted(&self) -> bool {
        self.faults.iter().any(|f| !f.contains("delay "))
    }

    /// Whether the method writes (anything but GET, HEAD, OPTIONS).
    pub fn is_write(&self) -> bool {
        !matches!(self.method.as_str(), "GET" | "HEAD" | "OPTIONS")
    }

    /// Whether it is SDK plumbing rather than an API call: authentication
    /// (`/v3/auth/tokens`) and version discovery (a GET of `/` or of a bare version path
    /// such as `/v2.1` or `/v3/`).
    pub fn is_plumbing(&self) -> bool {
        if self.path.contains("/auth/tokens") {
            return true;
        }
        if self.method != "GET" {
            return false;
        }
        let p = self.path.trim_matches('/');
        p.is_empty()
            || (!p.contains('/')
                && p.starts_with('v')
                && p[1..].chars().all(|c| c.is_ascii_digit() || c == '.'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(method: &str, path: &str) -> RequestRecord {
        RequestRecord {
            seq: 1,
            time: String::new(),
            offset_ms: 0,
            duration_ms: 0,
            service: "network".into(),
            method: method.into(),
            path: path.into(),
            query: None,
            status: Some(200),
            upstream_status: Some(200),
            faults: vec![],
            rules: vec![],
            upstream_error: None,
        }
    }

    #[test]
    fn plumbing() {
        for (m, p) in [
            ("GET", "/"),
            ("GET", "/v2.1"),
            ("GET", "/v2.1/"),
            ("GET", "/v3/"),
            ("POST", "/v3/auth/tokens"),
            ("DELETE", "/v3/auth/tokens"),
        ] {
            assert!(rec(m, p).is_plumbing(), "{m} {p}");
        }
        for (m, p) in [
            ("GET", "/v2.0/networks"),
            ("GET", "/v3/projects"),
            ("POST", "/v2.1"),
            ("GET", "/volumes"),
        ] {
            assert!(!rec(m, p).is_plumbing(), "{m} {p}");
        }
    }
}
