//! Which authorisation check a kubelet API request needs (pure).
//!
//! As the kubelet's `GetRequestAttributes` (pkg/kubelet/server/auth.go) and
//! the documented table ("Kubelet authentication/authorization"): the
//! resource is always `nodes` (named after this node, API group `""`), the
//! verb comes from the HTTP method, and the subresource from the path:
//! `/stats/*` → `stats`, `/metrics/*` → `metrics`, `/logs/*` → `log`,
//! `/spec/*` → `spec`, everything else (exec, attach, portForward,
//! containerLogs, run, healthz, pods) → `proxy`.

/// The attributes of one SubjectAccessReview.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attributes {
    /// `get`, `create`, `update`, `patch`, `delete`.
    pub verb: String,
    /// `proxy`, `stats`, `metrics`, `log` or `spec`.
    pub subresource: &'static str,
}

/// The kubelet's verb for an HTTP method (`POST` → `create`, ...).
pub fn verb(method: &str) -> String {
    match method {
        "POST" => "create",
        "GET" | "HEAD" => "get",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        other => return other.to_ascii_lowercase(),
    }
    .to_string()
}

/// Whether `path` is `prefix` or below it (the kubelet's `isSubpath`).
fn is_subpath(path: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The attributes a request for `path` with `method` is authorised with.
pub fn attributes(method: &str, path: &str) -> Attributes {
    let subresource = if is_subpath(path, "/stats") {
        "stats"
    } else if is_subpath(path, "/metrics") {
        "metrics"
    } else if is_subpath(path, "/logs") {
        "log"
    } else if is_subpath(path, "/spec") {
        "spec"
    } else {
        "proxy"
    };
    Attributes {
        verb: verb(method),
        subresource,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_the_kubelets_subresources() {
        let cases = [
            ("GET", "/stats/summary", "get", "stats"),
            ("GET", "/stats", "get", "stats"),
            ("GET", "/metrics", "get", "metrics"),
            ("GET", "/metrics/resource", "get", "metrics"),
            ("GET", "/logs/", "get", "log"),
            ("GET", "/spec/", "get", "spec"),
            ("GET", "/containerLogs/ns/p/c", "get", "proxy"),
            ("POST", "/exec/ns/p/c", "create", "proxy"),
            ("GET", "/exec/ns/p/c", "get", "proxy"),
            ("POST", "/portForward/ns/p", "create", "proxy"),
            ("GET", "/healthz", "get", "proxy"),
            ("GET", "/statsfoo", "get", "proxy"),
            ("GET", "/metricsx/resource", "get", "proxy"),
            ("PUT", "/x", "update", "proxy"),
            ("PATCH", "/x", "patch", "proxy"),
            ("DELETE", "/x", "delete", "proxy"),
            ("HEAD", "/stats/summary", "get", "stats"),
        ];
        for (m, p, v, s) in cases {
            let a = attributes(m, p);
            assert_eq!((a.verb.as_str(), a.subresource), (v, s), "{m} {p}");
        }
    }
}
