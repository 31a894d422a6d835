//! API errors rendered as Kubernetes `Status` objects.
//!
//! The real API server reports every failure as a `meta.k8s.io/v1 Status`
//! with a machine-readable `reason` and the HTTP code repeated in the body;
//! clients (kube-rs, client-go) switch on those, so we reproduce them exactly.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// One entry of `details.causes` (a field-level validation failure).
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    /// Machine-readable cause, e.g. `FieldValueRequired`.
    pub reason: String,
    /// Human-readable message for this field.
    pub message: String,
    /// Field path such as `spec.replicas` or `spec.items[0].name`.
    pub field: String,
}

impl Cause {
    /// Build a cause from its parts.
    pub fn new(reason: &str, field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            reason: reason.to_string(),
            message: message.into(),
            field: field.into(),
        }
    }
}

/// Optional `details` of a `Status` (boxed to keep `ApiError` small).
#[derive(Debug, Clone, Default)]
pub struct Details {
    /// `details.name`.
    pub name: Option<String>,
    /// `details.group`.
    pub group: Option<String>,
    /// `details.kind` (the resource plural for most errors, as the real server does).
    pub kind: Option<String>,
    /// `details.causes`.
    pub causes: Vec<Cause>,
    /// `Retry-After` seconds (429).
    pub retry_after: Option<u64>,
}

/// A failed API request, convertible into a `Status` response.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status code (also `Status.code`).
    pub code: u16,
    /// `Status.reason`, e.g. `NotFound`.
    pub reason: &'static str,
    /// `Status.message`.
    pub message: String,
    /// `Status.details`.
    pub details: Box<Details>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.reason, self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

/// Shorthand result type for API operations.
pub type ApiResult<T> = Result<T, ApiError>;

/// `group.resource` as the real server prints it (`widgets.sunet.se`, or `pods`).
fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

impl ApiError {
    fn base(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: Box::default(),
        }
    }

    /// An error with a code and a reason chosen by someone else (an admission webhook's
    /// Status); `reason` is one of the `metav1.StatusReason` values, "" when unknown.
    pub fn with_code(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self::base(code, reason, message)
    }

    /// 500 as `apierrors.NewInternalError`: `Internal error occurred: <err>`, the error
    /// repeated as the only cause.
    pub fn internal_error_occurred(err: impl Into<String>) -> Self {
        let err = err.into();
        let mut e = Self::base(
            500,
            "InternalError",
            format!("Internal error occurred: {err}"),
        );
        e.details.causes.push(Cause::new("", "", err));
        e
    }

    fn with_details(mut self, group: &str, kind: &str, name: &str) -> Self {
        self.details.group = (!group.is_empty()).then(|| group.to_string());
        self.details.kind = (!kind.is_empty()).then(|| kind.to_string());
        self.details.name = (!name.is_empty()).then(|| name.to_string());
        self
    }

    /// 404 `<resource> "<name>" not found`.
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        Self::base(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(group, resource)),
        )
        .with_details(group, resource, name)
    }

    /// 404 for an URL that matches no served resource.
    pub fn path_not_found() -> Self {
        Self::base(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    /// 409 AlreadyExists.
    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        Self::base(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(group, resource)),
        )
        .with_details(group, resource, name)
    }

    /// 409 Conflict with a custom explanation.
    pub fn conflict(group: &str, resource: &str, name: &str, why: &str) -> Self {
        Self::base(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(group, resource)
            ),
        )
        .with_details(group, resource, name)
    }

    /// 409 Conflict for a stale `resourceVersion`, worded like the real server.
    pub fn stale(group: &str, resource: &str, name: &str) -> Self {
        Self::conflict(
            group,
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 Invalid with field causes; `kind` is the Kind (not the plural), as the real server reports.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let what = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let list: Vec<String> = causes
            .iter()
            .map(|c| {
                if c.field.is_empty() {
                    c.message.clone()
                } else {
                    format!("{}: {}", c.field, c.message)
                }
            })
            .collect();
        let joined = if list.len() == 1 {
            list[0].clone()
        } else {
            format!("[{}]", list.join(", "))
        };
        let mut e = Self::base(
            422,
            "Invalid",
            format!("{what} \"{name}\" is invalid: {joined}"),
        )
        .with_details(group, kind, name);
        e.details.causes = causes;
        e
    }

    /// The field causes of this error.
    pub fn causes(&self) -> &[Cause] {
        &self.details.causes
    }

    /// Replace the field causes.
    pub fn with_causes(mut self, causes: Vec<Cause>) -> Self {
        self.details.causes = causes;
        self
    }

    /// 422 Invalid with a free-form message (e.g. a failed JSON-patch `test`).
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::base(422, "Invalid", message)
    }

    /// 500 with no reason: what the server answers for an error it did not classify
    /// (e.g. an apply patch that does not fit the schema), its text as the message.
    pub fn unclassified(message: impl Into<String>) -> Self {
        Self::base(500, "", message)
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::base(400, "BadRequest", message)
    }

    /// 403 Forbidden (used for writes into a terminating namespace).
    pub fn forbidden(group: &str, resource: &str, name: &str, why: &str) -> Self {
        Self::base(
            403,
            "Forbidden",
            format!(
                "{} \"{name}\" is forbidden: {why}",
                qualified(group, resource)
            ),
        )
        .with_details(group, resource, name)
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::base(405, "MethodNotAllowed", message)
    }

    /// 406 NotAcceptable (e.g. protobuf-only Accept headers).
    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Self::base(406, "NotAcceptable", message)
    }

    /// 410 Expired: the requested resourceVersion is older than the kept history.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::base(410, "Expired", message)
    }

    /// 410 Gone.
    pub fn gone(message: impl Into<String>) -> Self {
        Self::base(410, "Gone", message)
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::base(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/merge-patch+json, application/json-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml (got {content_type:?})"
            ),
        )
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::base(500, "InternalError", message)
    }

    /// 429 TooManyRequests with a Retry-After hint.
    pub fn too_many_requests(retry_after: u64) -> Self {
        let mut e = Self::base(
            429,
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later",
        );
        e.details.retry_after = Some(retry_after);
        e
    }

    /// The error rendered as a `Status` JSON object.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if self.reason.is_empty() {
            // StatusReasonUnknown is "" and omitted from the JSON
            if let Some(m) = status.as_object_mut() {
                m.remove("reason");
            }
        }
        let mut details = serde_json::Map::new();
        if let Some(n) = &self.details.name {
            details.insert("name".into(), json!(n));
        }
        if let Some(g) = &self.details.group {
            details.insert("group".into(), json!(g));
        }
        if let Some(k) = &self.details.kind {
            details.insert("kind".into(), json!(k));
        }
        if !self.details.causes.is_empty() {
            let causes: Vec<Value> = self
                .details
                .causes
                .iter()
                .map(|c| {
                    // metav1.StatusCause's fields are omitempty
                    let mut v = json!({"message": c.message});
                    if !c.reason.is_empty() {
                        v["reason"] = json!(c.reason);
                    }
                    if !c.field.is_empty() {
                        v["field"] = json!(c.field);
                    }
                    v
                })
                .collect();
            details.insert("causes".into(), Value::Array(causes));
        }
        if let Some(s) = self.details.retry_after {
            details.insert("retryAfterSeconds".into(), json!(s));
        }
        if !details.is_empty() {
            status["details"] = Value::Object(details);
        }
        status
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = self.to_status().to_string();
        let mut resp = (code, body).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(s) = self.details.retry_after
            && let Ok(v) = HeaderValue::from_str(&s.to_string())
        {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        resp
    }
}
