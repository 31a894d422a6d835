//! Fault rules: which requests a rule matches, when it fires, and what it does.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use serde::{Deserialize, Serialize};

use crate::Error;

/// What happens to a request a rule fires on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Action {
    /// Answer with this status without forwarding (the upstream never sees the request).
    Status {
        /// HTTP status code.
        code: u16,
        /// `Retry-After` seconds to send (429 and 503 typically carry one).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after: Option<u64>,
        /// Response body; default: a Keystone-style JSON error naming the proxy.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        body: Option<String>,
    },
    /// Close the connection without any response (the upstream never sees the request).
    Drop,
    /// Wait this long, then go on with the next rules (a delay does not end rule evaluation).
    Delay {
        /// Milliseconds.
        ms: u64,
    },
    /// Forward the request (the upstream does the work), then lose the answer: reply with
    /// `status` (e.g. 502) or, without one, close the connection.
    LoseResponse {
        /// Status to answer instead of the upstream's; `None` drops the connection.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
    },
    /// Revoke the token the request carries (Keystone `DELETE /v3/auth/tokens` with that token
    /// as both `X-Auth-Token` and `X-Subject-Token`), then forward the request.
    RevokeToken,
}

impl Action {
    /// A status answer without `Retry-After` or body.
    pub fn status(code: u16) -> Self {
        Action::Status {
            code,
            retry_after: None,
            body: None,
        }
    }

    /// 429 Too Many Requests with `Retry-After: seconds`.
    pub fn too_many_requests(retry_after_seconds: u64) -> Self {
        Action::Status {
            code: 429,
            retry_after: Some(retry_after_seconds),
            body: None,
        }
    }

    /// A delay before the request goes on.
    pub fn delay(d: Duration) -> Self {
        Action::Delay {
            ms: u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// Forward, then answer 502 Bad Gateway instead of the upstream's response.
    pub fn lose_response_502() -> Self {
        Action::LoseResponse { status: Some(502) }
    }

    /// Forward, then close the connection without answering.
    pub fn lose_response_drop() -> Self {
        Action::LoseResponse { status: None }
    }

    /// Whether the action ends rule evaluation for the request.
    pub fn is_terminal(&self) -> bool {
        !matches!(self, Action::Delay { .. })
    }

    /// A short description for the request log.
    pub fn describe(&self) -> String {
        match self {
            Action::Status {
                code, retry_after, ..
            } => match retry_after {
                Some(s) => format!("status {code} (Retry-After {s})"),
                None => format!("status {code}"),
            },
            Action::Drop => "drop".into(),
            Action::Delay { ms } => format!("delay {ms}ms"),
            Action::LoseResponse { status: Some(s) } => format!("lose response ({s})"),
            Action::LoseResponse { status: None } => "lose response (drop)".into(),
            Action::RevokeToken => "revoke token".into(),
        }
    }
}

/// A fault rule. Filters (`service`, `method`, `path_*`) select the matching requests; the
/// schedule (`first`, `every`, `probability`, `times`) picks which matching requests it fires
/// on; every condition set must hold.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    /// Free-form label, shown in the request log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Only this service (catalog type `identity`, `network`, ... or a project name such as
    /// `neutron`; see [`crate::canonical_service`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// Only this HTTP method (case-insensitive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Only requests whose path (with `?query` when there is one) matches this regex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_regex: Option<String>,
    /// Only requests whose path (with `?query` when there is one) contains this substring.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_contains: Option<String>,
    /// Only the first `n` matching requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<u64>,
    /// Only every `k`-th matching request (the k-th, 2k-th, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<u64>,
    /// Fire with this probability (0..=1) on a matching request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probability: Option<f64>,
    /// Seed of the rule's random numbers (so a probabilistic run repeats).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Fire at most this many times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<u64>,
    /// What to do.
    pub action: Action,
}

impl Rule {
    /// A rule firing `action` on every request.
    pub fn new(action: Action) -> Self {
        Rule {
            name: None,
            service: None,
            method: None,
            path_regex: None,
            path_contains: None,
            first: None,
            every: None,
            probability: None,
            seed: None,
            times: None,
            action,
        }
    }

    /// Sets a label.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Only this service.
    pub fn service(mut self, service: impl Into<String>) -> Self {
        self.service = Some(service.into());
        self
    }

    /// Only this HTTP method.
    pub fn method(mut self, method: impl Into<String>) -> Self {
        self.method = Some(method.into());
        self
    }

    /// Only paths matching this regex (checked when the rule is added).
    pub fn path_regex(mut self, regex: impl Into<String>) -> Self {
        self.path_regex = Some(regex.into());
        self
    }

    /// Only paths containing this substring.
    pub fn path_contains(mut self, s: impl Into<String>) -> Self {
        self.path_contains = Some(s.into());
        self
    }

    /// Only the first `n` matching requests.
    pub fn first(mut self, n: u64) -> Self {
        self.first = Some(n);
        self
    }

    /// Only every `k`-th matching request.
    pub fn every(mut self, k: u64) -> Self {
        self.every = Some(k);
        self
    }

    /// Fire with probability `p`, from a generator seeded with `seed`.
    pub fn probability(mut self, p: f64, seed: u64) -> Self {
        self.probability = Some(p);
        self.seed = Some(seed);
        self
    }

    /// Fire at most `n` times.
    pub fn times(mut self, n: u64) -> Self {
        self.times = Some(n);
        self
    }

    /// A label for the log: the name, else the action.
    pub fn label(&self) -> String {
        match &self.name {
            Some(n) => format!("{n}: {}", self.action.describe()),
            None => self.action.describe(),
        }
    }
}

/// Identifier of an added rule.
pub type RuleId = u64;

/// A rule as the proxy holds it, with its counters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RuleStatus {
    /// The id [`crate::FaultProxy::add_rule`] returned.
    pub id: RuleId,
    /// The rule.
    pub rule: Rule,
    /// Requests that matched the filters (while the rule was consulted).
    pub matched: u64,
    /// Requests the rule fired on.
    pub fired: u64,
}

/// A rule compiled for matching, with its state.
pub(crate) struct ActiveRule {
    pub(crate) id: RuleId,
    pub(crate) rule: Rule,
    service: Option<String>,
    regex: Option<regex::Regex>,
    rng: Option<StdRng>,
    pub(crate) matched: u64,
    pub(crate) fired: u64,
}

impl ActiveRule {
    pub(crate) fn compile(id: RuleId, rule: Rule) -> Result<Self, Error> {
        let regex = match &rule.path_regex {
            Some(r) => Some(regex::Regex::new(r).map_err(|e| Error::Rule {
                message: format!("path_regex {r:?}: {e}"),
            })?),
            None => None,
        };
        if let Some(p) = rule.probability
            && !(0.0..=1.0).contains(&p)
        {
            return Err(Error::Rule {
                message: format!("probability {p} is not within 0..=1"),
            });
        }
        if rule.every == Some(0) {
            return Err(Error::Rule {
                message: "every must be at least 1".into(),
            });
        }
        if let Action::Status { code, .. } | Action::LoseResponse { status: Some(code) } =
            &rule.action
            && http::StatusCode::from_u16(*code).is_err()
        {
            return Err(Error::Rule {
                message: format!("{code} is not an HTTP status code"),
            });
        }
        let service = rule.service.as_deref().map(crate::canonical_service);
        let rng = rule
            .probability
            .map(|_| StdRng::seed_from_u64(rule.seed.unwrap_or(0)));
        Ok(ActiveRule {
            id,
            rule,
            service,
            regex,
            rng,
            matched: 0,
            fired: 0,
        })
    }

    fn matches(&self, service: &str, method: &str, path_and_query: &str) -> bool {
        self.service.as_deref().is_none_or(|s| s == service)
            && self
                .rule
                .method
                .as_deref()
                .is_none_or(|m| m.eq_ignore_ascii_case(method))
            && self
                .rule
                .path_contains
                .as_deref()
                .is_none_or(|c| path_and_query.contains(c))
            && self
                .regex
                .as_ref()
                .is_none_or(|r| r.is_match(path_and_query))
    }

    /// Counts the request if it matches and decides whether the rule fires on it.
    pub(crate) fn consider(&mut self, service: &str, method: &str, path_and_query: &str) -> bool {
        if !self.matches(service, method, path_and_query) {
            return false;
        }
        self.matched += 1;
        let n = self.matched;
        if self.rule.first.is_some_and(|first| n > first) {
            return false;
        }
        if self.rule.every.is_some_and(|k| !n.is_multiple_of(k)) {
            return false;
        }
        if self.rule.times.is_some_and(|t| self.fired >= t) {
            return false;
        }
        if let (Some(p), Some(rng)) = (self.rule.probability, self.rng.as_mut())
            && !rng.random_bool(p)
        {
            return false;
        }
        self.fired += 1;
        true
    }

    pub(crate) fn status(&self) -> RuleStatus {
        RuleStatus {
            id: self.id,
            rule: self.rule.clone(),
            matched: self.matched,
            fired: self.fired,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fired(rule: Rule, n: usize) -> Vec<bool> {
        let mut r = ActiveRule::compile(1, rule).unwrap();
        (0..n)
            .map(|_| r.consider("network", "POST", "/v2.0/routers"))
            .collect()
    }

    #[test]
    fn schedules() {
        let a = Action::status(500);
        assert_eq!(fired(Rule::new(a.clone()), 3), [true, true, true]);
        assert_eq!(
            fired(Rule::new(a.clone()).every(2), 5),
            [false, true, false, true, false]
        );
        assert_eq!(
            fired(Rule::new(a.clone()).first(2), 4),
            [true, true, false, false]
        );
        assert_eq!(
            fired(Rule::new(a.clone()).every(2).times(1), 6),
            [false, true, false, false, false, false]
        );
        let p = fired(Rule::new(a.clone()).probability(0.5, 42), 200);
        let n = p.iter().filter(|x| **x).count();
        assert!((60..140).contains(&n), "{n} of 200 at p=0.5");
        // The same seed gives the same sequence.
        assert_eq!(p, fired(Rule::new(a.clone()).probability(0.5, 42), 200));
        assert_eq!(fired(Rule::new(a).probability(0.0, 1), 50), [false; 50]);
    }

    #[test]
    fn filters() {
        let mut r = ActiveRule::compile(
            1,
            Rule::new(Action::Drop)
                .service("neutron")
                .method("post")
                .path_regex("^/v2.0/routers$"),
        )
        .unwrap();
        assert!(r.consider("network", "POST", "/v2.0/routers"));
        assert!(!r.consider("network", "GET", "/v2.0/routers"));
        assert!(!r.consider("network", "POST", "/v2.0/routers/x/add_router_interface"));
        assert!(!r.consider("compute", "POST", "/v2.0/routers"));
        assert_eq!((r.matched, r.fired), (1, 1));
        let mut c =
            ActiveRule::compile(2, Rule::new(Action::Drop).path_contains("name=x")).unwrap();
        assert!(c.consider("identity", "GET", "/v3/projects?name=x"));
        assert!(!c.consider("identity", "GET", "/v3/projects"));
    }

    #[test]
    fn invalid_rules_are_refused() {
        for r in [
            Rule::new(Action::Drop).path_regex("("),
            Rule::new(Action::Drop).probability(1.5, 0),
            Rule::new(Action::Drop).every(0),
            Rule::new(Action::status(1000)),
        ] {
            assert!(ActiveRule::compile(1, r.clone()).is_err(), "{r:?}");
        }
    }

    #[test]
    fn json_form() {
        let r: Rule = serde_json::from_str(
            r#"{"service": "network", "method": "POST", "path_regex": "^/v2.0/routers$",
                "every": 2, "action": {"type": "status", "code": 429, "retry_after": 1}}"#,
        )
        .unwrap();
        assert_eq!(
            r,
            Rule::new(Action::too_many_requests(1))
                .service("network")
                .method("POST")
                .path_regex("^/v2.0/routers$")
                .every(2)
        );
        let back: Rule = serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
        assert_eq!(back, r);
        let lose: Action = serde_json::from_str(r#"{"type": "lose_response"}"#).unwrap();
        assert_eq!(lose, Action::lose_response_drop());
        let revoke: Action = serde_json::from_str(r#"{"type": "revoke_token"}"#).unwrap();
        assert_eq!(revoke, Action::RevokeToken);
    }
}
