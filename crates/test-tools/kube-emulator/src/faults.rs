//! Fault injection for tests: failing the next N requests, adding latency,
//! dropping watch connections and forgetting watch history.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Fail the next `count` requests that match, with `status` (500 or 429 typically).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailRule {
    /// How many matching requests to fail.
    pub count: u32,
    /// HTTP status to answer with (429 sends `Retry-After`).
    #[serde(default = "default_status")]
    pub status: u16,
    /// Only requests whose path (with query) contains this substring.
    #[serde(default)]
    pub path_contains: Option<String>,
    /// Only this verb: an HTTP method (`GET`) or a Kubernetes verb (`list`, `watch`, `create`, ...).
    #[serde(default)]
    pub verb: Option<String>,
    /// `Retry-After` seconds for 429 (default 1).
    #[serde(default)]
    pub retry_after_seconds: Option<u64>,
}

fn default_status() -> u16 {
    500
}

impl FailRule {
    /// Fail the next `count` requests (any path, any verb) with `status`.
    pub fn new(count: u32, status: u16) -> Self {
        Self {
            count,
            status,
            path_contains: None,
            verb: None,
            retry_after_seconds: None,
        }
    }

    /// Restrict to paths containing `s`.
    pub fn path_contains(mut self, s: impl Into<String>) -> Self {
        self.path_contains = Some(s.into());
        self
    }

    /// Restrict to a verb (HTTP method or Kubernetes verb).
    pub fn verb(mut self, v: impl Into<String>) -> Self {
        self.verb = Some(v.into());
        self
    }

    /// Whether a request matches (ignoring the remaining count).
    pub fn matches(&self, method: &str, k8s_verb: &str, path_and_query: &str) -> bool {
        let path_ok = self
            .path_contains
            .as_deref()
            .is_none_or(|p| path_and_query.contains(p));
        let verb_ok = self
            .verb
            .as_deref()
            .is_none_or(|v| v.eq_ignore_ascii_case(method) || v.eq_ignore_ascii_case(k8s_verb));
        path_ok && verb_ok
    }
}

/// Body of `POST /_emulator/faults`; every field is optional and applied in order:
/// `reset`, `latencyMs`, `fail`, `compactHistory`, `dropWatches`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultRequest {
    /// Clear all fail rules and latency.
    #[serde(default)]
    pub reset: bool,
    /// Latency added to every API response, in milliseconds (0 disables).
    #[serde(default)]
    pub latency_ms: Option<u64>,
    /// A fail rule to add.
    #[serde(default)]
    pub fail: Option<FailRule>,
    /// Forget watch history so resuming any older resourceVersion yields 410.
    #[serde(default)]
    pub compact_history: bool,
    /// Close every open watch connection now.
    #[serde(default)]
    pub drop_watches: bool,
}

/// Current fault configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultConfig {
    /// Added latency.
    pub latency_ms: u64,
    /// Pending fail rules (consumed in order).
    pub rules: Vec<FailRule>,
}

impl FaultConfig {
    /// The latency as a duration.
    pub fn latency(&self) -> Duration {
        Duration::from_millis(self.latency_ms)
    }

    /// If a rule matches, consume one of its failures and return (status, retry-after).
    pub fn take_failure(
        &mut self,
        method: &str,
        k8s_verb: &str,
        path_and_query: &str,
    ) -> Option<(u16, u64)> {
        let idx = self
            .rules
            .iter()
            .position(|r| r.count > 0 && r.matches(method, k8s_verb, path_and_query))?;
        let rule = &mut self.rules[idx];
        rule.count -= 1;
        let out = (rule.status, rule.retry_after_seconds.unwrap_or(1));
        if rule.count == 0 {
            self.rules.remove(idx);
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_are_consumed() {
        let mut c = FaultConfig::default();
        c.rules.push(FailRule::new(2, 500).verb("list"));
        assert_eq!(c.take_failure("GET", "get", "/api/v1/x"), None);
        assert_eq!(c.take_failure("GET", "list", "/api/v1/x"), Some((500, 1)));
        assert_eq!(c.take_failure("GET", "list", "/api/v1/x"), Some((500, 1)));
        assert_eq!(c.take_failure("GET", "list", "/api/v1/x"), None);
        assert!(c.rules.is_empty());
    }

    #[test]
    fn request_json_shape() {
        let r: FaultRequest = serde_json::from_str(
            r#"{"fail": {"count": 1, "status": 429, "pathContains": "widgets", "retryAfterSeconds": 2}, "dropWatches": true}"#,
        )
        .unwrap();
        assert!(r.drop_watches);
        assert_eq!(r.fail.unwrap().retry_after_seconds, Some(2));
    }
}
