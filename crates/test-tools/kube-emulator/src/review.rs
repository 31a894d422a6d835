//! `authentication.k8s.io/v1` TokenReview and `authorization.k8s.io/v1`
//! SubjectAccessReview, answered from rules a test registers (the emulator
//! has no real authenticator or RBAC): tokens map to users; a request is
//! allowed when a rule names the user (or one of its groups) and matches
//! verb, resource, subresource and name (`*` or empty for any), or when the
//! user is in `system:masters`, as RBAC's superuser group.
//!
//! Refusals as the real server: a TokenReview without `spec.token` is a 400
//! ("token is required for TokenReview in authentication"); a
//! SubjectAccessReview needs exactly one of `resourceAttributes` /
//! `nonResourceAttributes` and a user or group (422 naming the field).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult, Cause};

/// A user a token stands for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewUser {
    /// User name.
    pub username: String,
    /// UID.
    #[serde(default)]
    pub uid: String,
    /// Groups.
    #[serde(default)]
    pub groups: Vec<String>,
}

/// One allow rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllowRule {
    /// User name or `group:<name>`.
    pub subject: String,
    /// Verbs (`*` for any).
    pub verbs: Vec<String>,
    /// Resource (`*` for any).
    pub resource: String,
    /// Subresource (`*` for any, empty for none).
    #[serde(default)]
    pub subresource: String,
    /// Object name (empty for any).
    #[serde(default)]
    pub name: String,
}

/// What the review APIs answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthConfig {
    /// Token → user.
    #[serde(default)]
    pub tokens: BTreeMap<String, ReviewUser>,
    /// Allow rules.
    #[serde(default)]
    pub rules: Vec<AllowRule>,
}

/// Answer a TokenReview body.
pub fn token_review(cfg: &AuthConfig, mut body: Value) -> ApiResult<Value> {
    let token = body
        .pointer("/spec/token")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if token.is_empty() {
        return Err(ApiError::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let status = match cfg.tokens.get(&token) {
        Some(u) => json!({"authenticated": true, "user": {
            "username": u.username, "uid": u.uid, "groups": u.groups}}),
        None => json!({"authenticated": false, "user": {}, "error": "invalid bearer token"}),
    };
    body["status"] = status;
    body["metadata"] = json!({"creationTimestamp": null});
    Ok(body)
}

fn any_or(want: &str, have: &str) -> bool {
    want == "*" || want == have
}

/// Answer a SubjectAccessReview body.
pub fn subject_access_review(cfg: &AuthConfig, mut body: Value) -> ApiResult<Value> {
    let spec = body.get("spec").cloned().unwrap_or(Value::Null);
    let ra = spec.get("resourceAttributes").filter(|v| !v.is_null());
    let nra = spec.get("nonResourceAttributes").filter(|v| !v.is_null());
    let user = spec.get("user").and_then(Value::as_str).unwrap_or("");
    let groups: Vec<&str> = spec
        .get("groups")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut causes = Vec::new();
    if ra.is_some() == nra.is_some() {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "spec.resourceAttributes",
            "spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified",
        ));
    }
    if user.is_empty() && groups.is_empty() {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "spec.user",
            "spec.user: Invalid value: \"\": at least one of user or group must be specified",
        ));
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(
            "authorization.k8s.io",
            "SubjectAccessReview",
            "",
            causes,
        ));
    }
    let allowed = groups.contains(&"system:masters")
        || ra.is_some_and(|ra| {
            let f = |k: &str| ra.get(k).and_then(Value::as_str).unwrap_or("");
            cfg.rules.iter().any(|r| {
                let subject = r
                    .subject
                    .strip_prefix("group:")
                    .map_or_else(|| r.subject == user, |g| groups.contains(&g));
                subject
                    && r.verbs.iter().any(|v| any_or(v, f("verb")))
                    && any_or(&r.resource, f("resource"))
                    && any_or(&r.subresource, f("subresource"))
                    && (r.name.is_empty() || r.name == f("name"))
            })
        });
    body["status"] = if allowed {
        json!({"allowed": true, "reason": "allowed by an emulator rule"})
    } else {
        json!({"allowed": false})
    };
    body["metadata"] = json!({"creationTimestamp": null});
    Ok(body)
}
