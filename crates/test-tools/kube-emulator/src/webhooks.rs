//! Validating admission webhooks (`admissionregistration.k8s.io/v1`
//! ValidatingWebhookConfiguration), called on CREATE and UPDATE as kube-apiserver's
//! `ValidatingAdmissionWebhook` plugin does. The semantics and their sources are listed in the
//! crate's README ("Validating admission webhooks").
//!
//! The write is first run as a dry run under the state lock (defaulting, schema and CEL
//! validation: validating admission comes after them in the real server too), the matching
//! webhooks are called with that result without the lock, and the write is then run for real.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::error::ApiError;
use crate::resources::{ResourceInfo, StorageKey};
use crate::util::meta_str;

/// Where ValidatingWebhookConfigurations are stored.
pub fn config_key() -> StorageKey {
    StorageKey::new(
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
    )
}

/// What a webhook is called about.
#[derive(Debug, Clone)]
pub struct Attributes {
    /// `CREATE` or `UPDATE`.
    pub operation: &'static str,
    /// The resource written.
    pub info: ResourceInfo,
    /// Subresource (`""`, `status`, ...).
    pub subresource: String,
    /// Namespace ("" for cluster-scoped).
    pub namespace: String,
    /// Object name.
    pub name: String,
    /// The object as it would be stored (served version).
    pub object: Value,
    /// The stored object on UPDATE (served version).
    pub old_object: Option<Value>,
    /// `dryRun=All` on the request.
    pub dry_run: bool,
    /// Labels of the object's namespace (for `namespaceSelector`).
    pub namespace_labels: Map<String, Value>,
}

/// One webhook of a configuration, with the service address resolved under the lock.
#[derive(Debug, Clone)]
pub struct Hook {
    /// `webhooks[].name`.
    pub name: String,
    /// The webhook entry as stored.
    pub spec: Value,
    /// For `clientConfig.service`: the Service's `spec.clusterIP` and the port to dial.
    pub service_addr: Option<SocketAddr>,
}

fn strs(v: Option<&Value>) -> Vec<&str> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn rule_matches(rule: &Value, a: &Attributes) -> bool {
    let ops = strs(rule.get("operations"));
    let groups = strs(rule.get("apiGroups"));
    let versions = strs(rule.get("apiVersions"));
    let resources = strs(rule.get("resources"));
    let scope = rule.get("scope").and_then(Value::as_str).unwrap_or("*");
    let any = |list: &[&str], v: &str| list.iter().any(|x| *x == "*" || *x == v);
    let resource_ok = resources.iter().any(|r| {
        let (res, sub) = r.split_once('/').unwrap_or((r, ""));
        // As kube-apiserver's rules matcher: "pods" is the main resource only, "pods/*" the
        // resource and all its subresources, "*/status" every status subresource.
        (res == "*" || res == a.info.plural) && (sub == "*" || sub == a.subresource)
    });
    let scope_ok = match scope {
        "Cluster" => !a.info.namespaced,
        "Namespaced" => a.info.namespaced,
        _ => true,
    };
    any(&ops, a.operation)
        && any(&groups, &a.info.group)
        && any(&versions, &a.info.version)
        && resource_ok
        && scope_ok
}

/// A `metav1.LabelSelector` (matchLabels and matchExpressions) against `labels`. An absent
/// or empty selector matches everything.
pub fn selector_matches(selector: Option<&Value>, labels: &Map<String, Value>) -> bool {
    let Some(sel) = selector else {
        return true;
    };
    let get = |k: &str| labels.get(k).and_then(Value::as_str);
    if let Some(ml) = sel.get("matchLabels").and_then(Value::as_object)
        && ml.iter().any(|(k, v)| get(k) != v.as_str())
    {
        return false;
    }
    for e in sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = e.get("key").and_then(Value::as_str).unwrap_or("");
        let values = strs(e.get("values"));
        let ok = match e.get("operator").and_then(Value::as_str).unwrap_or("") {
            "In" => get(key).is_some_and(|v| values.contains(&v)),
            "NotIn" => get(key).is_none_or(|v| !values.contains(&v)),
            "Exists" => get(key).is_some(),
            "DoesNotExist" => get(key).is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

fn labels_of(obj: Option<&Value>) -> Map<String, Value> {
    obj.and_then(|o| o.pointer("/metadata/labels"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// Whether webhook `w` is called for `a`: a rule matches, the namespace selector matches the
/// namespace's labels (for namespaced objects; a Namespace is matched by its own labels;
/// other cluster-scoped objects are never skipped by it), and the object selector matches the
/// new or the old object's labels.
pub fn webhook_matches(w: &Value, a: &Attributes) -> bool {
    if !strs_rules(w).any(|r| rule_matches(r, a)) {
        return false;
    }
    let ns_sel = w.get("namespaceSelector");
    let ns_ok = if a.info.namespaced {
        selector_matches(ns_sel, &a.namespace_labels)
    } else if a.info.plural == "namespaces" && a.info.group.is_empty() {
        selector_matches(ns_sel, &labels_of(Some(&a.object)))
    } else {
        true
    };
    let obj_sel = w.get("objectSelector");
    let obj_ok = selector_matches(obj_sel, &labels_of(Some(&a.object)))
        || a.old_object
            .as_ref()
            .is_some_and(|o| selector_matches(obj_sel, &labels_of(Some(o))));
    ns_ok && obj_ok
}

fn strs_rules(w: &Value) -> impl Iterator<Item = &Value> {
    w.get("rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// Builds the AdmissionReview `admission.k8s.io/v1` request body.
pub fn review(uid: &str, a: &Attributes) -> Value {
    let i = &a.info;
    let gvk = json!({"group": i.group, "version": i.version, "kind": i.kind});
    let gvr = json!({"group": i.group, "version": i.version, "resource": i.plural});
    let mut req = json!({
        "uid": uid,
        "kind": gvk,
        "resource": gvr,
        "requestKind": gvk,
        "requestResource": gvr,
        "name": a.name,
        "operation": a.operation,
        "userInfo": {"username": "kube-emulator-admin", "groups": ["system:masters", "system:authenticated"]},
        "object": a.object,
        "oldObject": a.old_object.clone().unwrap_or(Value::Null),
        "dryRun": a.dry_run,
        "options": {
            "apiVersion": "meta.k8s.io/v1",
            "kind": if a.operation == "CREATE" { "CreateOptions" } else { "UpdateOptions" },
        },
    });
    if !a.subresource.is_empty() {
        req["subResource"] = json!(a.subresource);
        req["requestSubResource"] = json!(a.subresource);
    }
    if i.namespaced {
        req["namespace"] = json!(a.namespace);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
}

/// A failure to call a webhook or to read its answer (`failed calling webhook`).
fn calling_error(hook: &str, reason: impl std::fmt::Display) -> String {
    format!("failed calling webhook {hook:?}: {reason}")
}

/// Calls one webhook. `Ok(None)` admits; `Ok(Some(err))` is a denial (the Status to return);
/// `Err(message)` is a failure to call it (handled per `failurePolicy` by the caller).
async fn call(hook: &Hook, a: &Attributes) -> Result<Option<ApiError>, String> {
    let w = &hook.spec;
    let cc = w.get("clientConfig").cloned().unwrap_or(Value::Null);
    let mut builder = reqwest::Client::builder();
    // timeoutSeconds defaults to 10 (admissionregistration/v1 defaulting).
    let timeout = w
        .get("timeoutSeconds")
        .and_then(Value::as_u64)
        .unwrap_or(10);
    builder = builder.timeout(Duration::from_secs(timeout));
    if let Some(ca) = cc.get("caBundle").and_then(Value::as_str) {
        let pem = base64::engine::general_purpose::STANDARD
            .decode(ca)
            .map_err(|e| calling_error(&hook.name, format!("caBundle: {e}")))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| calling_error(&hook.name, format!("caBundle: {e}")))?;
        builder = builder.tls_certs_only(certs);
    }
    let url = if let Some(u) = cc.get("url").and_then(Value::as_str) {
        u.to_string()
    } else if let Some(svc) = cc.get("service") {
        let name = svc.get("name").and_then(Value::as_str).unwrap_or("");
        let ns = svc.get("namespace").and_then(Value::as_str).unwrap_or("");
        let port = svc.get("port").and_then(Value::as_u64).unwrap_or(443);
        let path = svc.get("path").and_then(Value::as_str).unwrap_or("");
        // The real server dials the Service and verifies the certificate for
        // `<name>.<namespace>.svc`; the emulator dials the Service's clusterIP.
        let host = format!("{name}.{ns}.svc");
        let addr = hook.service_addr.ok_or_else(|| {
            calling_error(
                &hook.name,
                format!(
                    "failed to call webhook: service \"{ns}/{name}\" not found or has no clusterIP"
                ),
            )
        })?;
        builder = builder.resolve(&host, addr);
        format!("https://{host}:{port}{path}")
    } else {
        return Err(calling_error(
            &hook.name,
            "clientConfig has neither url nor service",
        ));
    };
    let client = builder
        .build()
        .map_err(|e| calling_error(&hook.name, format!("could not get REST client: {e}")))?;
    let uid = uuid::Uuid::new_v4().to_string();
    let resp = client
        .post(&url)
        .json(&review(&uid, a))
        .send()
        .await
        .map_err(|e| {
            calling_error(
                &hook.name,
                format!("failed to call webhook: Post {url:?}: {}", error_chain(&e)),
            )
        })?;
    let status = resp.status();
    if !status.is_success() {
        return Err(calling_error(
            &hook.name,
            format!(
                "failed to call webhook: the server responded with the status code {} but did not return more information",
                status.as_u16()
            ),
        ));
    }
    let body: Value = resp.json().await.map_err(|e| {
        calling_error(
            &hook.name,
            format!("received invalid webhook response: {e}"),
        )
    })?;
    let invalid = |why: String| {
        calling_error(
            &hook.name,
            format!("received invalid webhook response: {why}"),
        )
    };
    if body.get("apiVersion").and_then(Value::as_str) != Some("admission.k8s.io/v1")
        || body.get("kind").and_then(Value::as_str) != Some("AdmissionReview")
    {
        return Err(invalid(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {}, Kind={}",
            body.get("apiVersion").and_then(Value::as_str).unwrap_or(""),
            body.get("kind").and_then(Value::as_str).unwrap_or("")
        )));
    }
    let Some(r) = body.get("response") else {
        return Err(invalid("response was absent".into()));
    };
    let got_uid = r.get("uid").and_then(Value::as_str).unwrap_or("");
    if got_uid != uid {
        return Err(invalid(format!(
            "expected response.uid=\"{uid}\", got \"{got_uid}\""
        )));
    }
    if r.get("allowed").and_then(Value::as_bool).unwrap_or(false) {
        return Ok(None);
    }
    Ok(Some(denial(&hook.name, r.get("status"))))
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// kube-apiserver's `ToStatusErr`: a code below 400 becomes 400, an empty or `Success`
/// status becomes `Failure`, and the message is prefixed with
/// `admission webhook "<name>" denied the request`.
pub fn denial(hook: &str, status: Option<&Value>) -> ApiError {
    let s = status.cloned().unwrap_or(Value::Null);
    let code = s
        .get("code")
        .and_then(Value::as_u64)
        .map_or(400, |c| c.max(400)) as u16;
    let reason = s.get("reason").and_then(Value::as_str).unwrap_or("");
    let message = s.get("message").and_then(Value::as_str).unwrap_or("");
    let denied = format!("admission webhook {hook:?} denied the request");
    let message = if !message.is_empty() {
        format!("{denied}: {message}")
    } else if !reason.is_empty() {
        format!("{denied}: {reason}")
    } else {
        format!("{denied} without explanation")
    };
    ApiError::with_code(code, status_reason(reason), message)
}

/// The `metav1.StatusReason` constants; a webhook's other reasons are reported as "" (the
/// emulator's errors carry static reasons).
fn status_reason(r: &str) -> &'static str {
    const KNOWN: &[&str] = &[
        "Unauthorized",
        "Forbidden",
        "NotFound",
        "AlreadyExists",
        "Conflict",
        "Gone",
        "Invalid",
        "ServerTimeout",
        "StoreReadError",
        "Timeout",
        "TooManyRequests",
        "BadRequest",
        "MethodNotAllowed",
        "NotAcceptable",
        "RequestEntityTooLarge",
        "UnsupportedMediaType",
        "InternalError",
        "Expired",
        "ServiceUnavailable",
    ];
    KNOWN.iter().find(|k| **k == r).copied().unwrap_or("")
}

/// Calls every matching webhook (in order; the real server calls validating webhooks in
/// parallel and returns the first error it collects). A denial or a failed call under
/// `failurePolicy: Fail` (the default) refuses the write; `Ignore` admits it.
pub async fn admit(hooks: &[Hook], a: &Attributes) -> Result<(), ApiError> {
    for hook in hooks {
        if a.dry_run {
            // Webhooks with side effects cannot be called on a dry run.
            let se = hook
                .spec
                .get("sideEffects")
                .and_then(Value::as_str)
                .unwrap_or("");
            if !matches!(se, "None" | "NoneOnDryRun") {
                return Err(ApiError::bad_request(format!(
                    "admission webhook {:?} does not support dry run",
                    hook.name
                )));
            }
        }
        match call(hook, a).await {
            Ok(None) => {}
            Ok(Some(denied)) => return Err(denied),
            Err(msg) => {
                let ignore =
                    hook.spec.get("failurePolicy").and_then(Value::as_str) == Some("Ignore");
                if ignore {
                    tracing::warn!(webhook = %hook.name, error = %msg, "failed calling webhook, failing open");
                    continue;
                }
                return Err(ApiError::internal_error_occurred(msg));
            }
        }
    }
    Ok(())
}

/// The webhooks of every stored configuration that match `a`, in configuration-name order,
/// with Service addresses resolved from `services` (`namespace/name` → clusterIP).
pub fn matching(
    configs: &[Value],
    services: &BTreeMap<String, String>,
    a: &Attributes,
) -> Vec<Hook> {
    let mut configs: Vec<&Value> = configs.iter().collect();
    configs.sort_by_key(|c| meta_str(c, "name").to_string());
    let mut out = Vec::new();
    for c in configs {
        for w in c
            .get("webhooks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if !webhook_matches(w, a) {
                continue;
            }
            let service_addr = w.pointer("/clientConfig/service").and_then(|s| {
                let ns = s.get("namespace").and_then(Value::as_str)?;
                let name = s.get("name").and_then(Value::as_str)?;
                let port = s.get("port").and_then(Value::as_u64).unwrap_or(443) as u16;
                let ip = services.get(&format!("{ns}/{name}"))?;
                Some(SocketAddr::new(ip.parse().ok()?, port))
            });
            out.push(Hook {
                name: w
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                spec: w.clone(),
                service_addr,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(plural: &str, sub: &str, op: &'static str) -> Attributes {
        let info = crate::resources::builtins()
            .into_iter()
            .find(|i| i.plural == plural && i.group.is_empty())
            .unwrap_or_else(|| panic!("no builtin {plural}"));
        Attributes {
            operation: op,
            info,
            subresource: sub.into(),
            namespace: "ns".into(),
            name: "x".into(),
            object: json!({"metadata": {"name": "x", "labels": {"app": "a"}}}),
            old_object: None,
            dry_run: false,
            namespace_labels: json!({"team": "t"})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        }
    }

    fn hook(resources: Value, extra: Value) -> Value {
        let mut w = json!({"name": "h", "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": resources, "operations": ["CREATE"]}]});
        if let (Some(w), Some(e)) = (w.as_object_mut(), extra.as_object()) {
            w.extend(e.clone());
        }
        w
    }

    #[test]
    fn rules_match_resources_subresources_and_operations() {
        let main = attrs("configmaps", "", "CREATE");
        assert!(webhook_matches(
            &hook(json!(["configmaps"]), json!({})),
            &main
        ));
        assert!(webhook_matches(&hook(json!(["*"]), json!({})), &main));
        assert!(!webhook_matches(
            &hook(json!(["secrets"]), json!({})),
            &main
        ));
        let update = attrs("configmaps", "", "UPDATE");
        assert!(!webhook_matches(
            &hook(json!(["configmaps"]), json!({})),
            &update
        ));
        let status = attrs("pods", "status", "CREATE");
        assert!(!webhook_matches(&hook(json!(["pods"]), json!({})), &status));
        assert!(!webhook_matches(&hook(json!(["*"]), json!({})), &status));
        assert!(webhook_matches(
            &hook(json!(["pods/status"]), json!({})),
            &status
        ));
        assert!(webhook_matches(
            &hook(json!(["pods/*"]), json!({})),
            &status
        ));
        assert!(webhook_matches(
            &hook(json!(["*/status"]), json!({})),
            &status
        ));
        assert!(webhook_matches(&hook(json!(["*/*"]), json!({})), &status));
        assert!(!webhook_matches(
            &hook(json!(["*/status"]), json!({})),
            &main
        ));
        assert!(webhook_matches(
            &hook(json!(["configmaps/*"]), json!({})),
            &main
        ));
    }

    #[test]
    fn selectors_filter_by_namespace_and_object_labels() {
        let a = attrs("configmaps", "", "CREATE");
        let sel = |ns: Value, obj: Value| {
            webhook_matches(
                &hook(
                    json!(["configmaps"]),
                    json!({"namespaceSelector": ns, "objectSelector": obj}),
                ),
                &a,
            )
        };
        assert!(sel(json!({}), json!({})));
        assert!(sel(
            json!({"matchLabels": {"team": "t"}}),
            json!({"matchLabels": {"app": "a"}})
        ));
        assert!(!sel(json!({"matchLabels": {"team": "other"}}), json!({})));
        assert!(!sel(
            json!({}),
            json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["a"]}]})
        ));
        assert!(sel(
            json!({"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]}),
            json!({})
        ));
    }

    #[test]
    fn denial_follows_to_status_err() {
        let e = denial(
            "h.example",
            Some(&json!({"code": 403, "reason": "Forbidden", "message": "no"})),
        );
        assert_eq!((e.code, e.reason), (403, "Forbidden"));
        assert_eq!(
            e.message,
            "admission webhook \"h.example\" denied the request: no"
        );
        let e = denial(
            "h.example",
            Some(&json!({"code": 200, "reason": "Forbidden"})),
        );
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "admission webhook \"h.example\" denied the request: Forbidden"
        );
        let e = denial("h.example", None);
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "admission webhook \"h.example\" denied the request without explanation"
        );
    }
}
