//! Retry classification and error mapping (pure functions, unit-tested).
//!
//! What is retried (seed weakness W17 retried every 4xx and then replaced the
//! service's message):
//! - 429 Too Many Requests and 503 Service Unavailable: always (the request
//!   was refused, not executed); `Retry-After` is honoured.
//! - 409 Conflict whose message says the object is busy ("in progress",
//!   "try again", "concurrent", ...): always (refused, not executed).
//! - 500/502/504, 408, timeouts and transport errors after the request may
//!   have been sent: only for idempotent requests (GET/PUT/DELETE/PATCH by
//!   default), because a POST whose response was lost may have created the
//!   object; the controller's find-before-create handles that on its next pass.
//! - connection errors (nothing was sent): always.
//! - every other 4xx: never.

use std::time::Duration;

use http::StatusCode;

use crate::error::Error;

/// How an attempt ended, as far as retrying is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// An HTTP response with this status arrived.
    Status(StatusCode),
    /// The connection could not be established (request not sent).
    ConnectFailed,
    /// The connection failed after the request may have been sent.
    TransportFailed,
    /// The per-call timeout expired.
    TimedOut,
}

/// Whether the attempt should be retried.
pub fn should_retry(attempt: Attempt, body: &str, idempotent: bool) -> bool {
    match attempt {
        Attempt::ConnectFailed => true,
        Attempt::TransportFailed | Attempt::TimedOut => idempotent,
        Attempt::Status(s) => match s.as_u16() {
            429 | 503 => true,
            409 => is_in_progress_conflict(body),
            500 | 502 | 504 | 408 => idempotent,
            _ => false,
        },
    }
}

/// Whether a 409 message means "busy, try again" rather than a real
/// conflict such as a duplicate name or an object in use.
pub fn is_in_progress_conflict(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "in progress",
        "try again",
        "please retry",
        "concurrent",
        "is being updated",
        "is locked",
        "retry the request",
    ]
    .iter()
    .any(|p| m.contains(p))
}

/// Parse a `Retry-After` header: delta-seconds or an HTTP-date.
pub fn parse_retry_after(value: &str, now: jiff::Timestamp) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    if let Ok(secs) = v.parse::<f64>()
        && secs.is_finite()
        && secs >= 0.0
    {
        return Some(Duration::from_secs_f64(secs));
    }
    let when = jiff::fmt::rfc2822::parse(v).ok()?.timestamp();
    let delta = when.as_millisecond().saturating_sub(now.as_millisecond());
    Some(Duration::from_millis(u64::try_from(delta).unwrap_or(0)))
}

/// Extract the human-readable message from an OpenStack error body, keeping
/// the service's text verbatim. Understands the Keystone (`{"error":
/// {"message"}}`), Nova/Cinder (`{"badRequest": {"message"}}`), Neutron
/// (`{"NeutronError": {"message"}}`) and Glance (plain text/HTML) formats.
pub fn extract_message(body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        if let Some(m) = message_of(&v) {
            return m;
        }
        if let Some(obj) = v.as_object() {
            for inner in obj.values() {
                if let Some(m) = message_of(inner) {
                    return m;
                }
            }
        }
        return truncate(&v.to_string());
    }
    let text = String::from_utf8_lossy(body);
    truncate(&strip_html(&text))
}

fn message_of(v: &serde_json::Value) -> Option<String> {
    let m = v.get("message")?.as_str()?;
    // Neutron sometimes puts the useful part in `detail`.
    match v.get("detail").and_then(|d| d.as_str()) {
        Some(d) if !d.is_empty() && !m.contains(d) => Some(format!("{m} {d}")),
        _ => Some(m.to_string()),
    }
}

fn strip_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_tag = false;
    for c in s.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => {
                in_tag = false;
                out.push(' ');
            }
            _ if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn truncate(s: &str) -> String {
    const MAX: usize = 2000;
    if s.len() <= MAX {
        return s.to_string();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Map a final non-success status to an [`Error`]. `ctx` is
/// "service operation", `message` the service's text.
pub fn error_for_status(
    status: StatusCode,
    ctx: &str,
    message: &str,
    request_id: Option<&str>,
) -> Error {
    let rid = request_id
        .map(|r| format!(" (request id {r})"))
        .unwrap_or_default();
    let text = format!("{ctx}: HTTP {}: {message}{rid}", status.as_u16());
    match status.as_u16() {
        400 | 405..=408 | 410..=418 | 422 => Error::BadRequest { message: text },
        401 => Error::Unauthorized { message: text },
        403 => Error::Forbidden { message: text },
        404 => Error::NotFound { what: text },
        409 if is_in_progress_conflict(message) => Error::Transient { message: text },
        409 => Error::Conflict { message: text },
        429 | 500..=599 => Error::Transient { message: text },
        _ => Error::Unexpected { message: text },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(n: u16) -> Attempt {
        Attempt::Status(StatusCode::from_u16(n).unwrap())
    }

    #[test]
    fn retry_classifier() {
        for code in [429, 503] {
            assert!(should_retry(st(code), "", false), "{code}");
        }
        for code in [500, 502, 504, 408] {
            assert!(should_retry(st(code), "", true), "{code}");
            assert!(!should_retry(st(code), "", false), "{code} POST");
        }
        for code in [400, 401, 403, 404, 405, 413, 422] {
            assert!(!should_retry(st(code), "", true), "{code}");
        }
        assert!(!should_retry(
            st(409),
            "Duplicate entry found with name x",
            true
        ));
        assert!(should_retry(
            st(409),
            "Operation is in progress, please try again later",
            false
        ));
        assert!(should_retry(Attempt::ConnectFailed, "", false));
        assert!(!should_retry(Attempt::TransportFailed, "", false));
        assert!(should_retry(Attempt::TransportFailed, "", true));
        assert!(should_retry(Attempt::TimedOut, "", true));
        assert!(!should_retry(Attempt::TimedOut, "", false));
        assert!(!should_retry(st(200), "", true));
    }

    #[test]
    fn retry_after_parsing() {
        let now: jiff::Timestamp = "2026-11-30T10:00:00Z".parse().unwrap();
        assert_eq!(parse_retry_after("5", now), Some(Duration::from_secs(5)));
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("1.5", now),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            parse_retry_after("Mon, 30 Nov 2026 10:00:07 GMT", now),
            Some(Duration::from_secs(7))
        );
        // A date in the past means "now".
        assert_eq!(
            parse_retry_after("Mon, 30 Nov 2026 09:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-3", now), None);
    }

    #[test]
    fn messages_are_extracted_verbatim() {
        let keystone = br#"{"error": {"code": 409, "message": "Conflict occurred attempting to store project - Duplicate entry.", "title": "Conflict"}}"#;
        assert_eq!(
            extract_message(keystone),
            "Conflict occurred attempting to store project - Duplicate entry."
        );
        let nova = br#"{"badRequest": {"code": 400, "message": "Invalid input for field/attribute vcpus."}}"#;
        assert_eq!(
            extract_message(nova),
            "Invalid input for field/attribute vcpus."
        );
        let neutron = br#"{"NeutronError": {"type": "InvalidInput", "message": "Invalid input for operation: cidr overlaps.", "detail": ""}}"#;
        assert_eq!(
            extract_message(neutron),
            "Invalid input for operation: cidr overlaps."
        );
        let glance = b"<html>\n <head>\n  <title>409 Conflict</title>\n </head>\n <body>\n  <h1>409 Conflict</h1>\n  Image status transition from active to importing is not allowed<br /><br />\n </body>\n</html>";
        assert_eq!(
            extract_message(glance),
            "409 Conflict 409 Conflict Image status transition from active to importing is not allowed"
        );
        assert_eq!(extract_message(b"plain text"), "plain text");
    }

    #[test]
    fn status_mapping() {
        let e = error_for_status(
            StatusCode::NOT_FOUND,
            "identity get_project",
            "Could not find project: x.",
            Some("req-1"),
        );
        assert!(e.is_not_found());
        assert_eq!(
            e.to_string(),
            "not found: identity get_project: HTTP 404: Could not find project: x. (request id req-1)"
        );
        assert!(matches!(
            error_for_status(StatusCode::BAD_REQUEST, "c", "m", None),
            Error::BadRequest { .. }
        ));
        assert!(matches!(
            error_for_status(StatusCode::FORBIDDEN, "c", "m", None),
            Error::Forbidden { .. }
        ));
        assert!(matches!(
            error_for_status(StatusCode::UNAUTHORIZED, "c", "m", None),
            Error::Unauthorized { .. }
        ));
        assert!(error_for_status(StatusCode::CONFLICT, "c", "Duplicate", None).is_conflict());
        assert!(error_for_status(StatusCode::CONFLICT, "c", "in progress", None).is_transient());
        assert!(error_for_status(StatusCode::TOO_MANY_REQUESTS, "c", "m", None).is_transient());
        assert!(error_for_status(StatusCode::BAD_GATEWAY, "c", "m", None).is_transient());
        assert!(matches!(
            error_for_status(StatusCode::PAYLOAD_TOO_LARGE, "c", "over quota", None),
            Error::BadRequest { .. }
        ));
    }
}
