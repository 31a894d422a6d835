//! The TokenRequest API (`POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token`,
//! `authentication.k8s.io/v1` `TokenRequest`), as documented ("Manage Service Accounts",
//! the TokenRequest reference and the bound service account tokens design):
//!
//! - `spec.expirationSeconds` defaults to 3600 and must be at least 600 ("may not
//!   specify a duration less than 10 minutes") and at most 2³² (422 naming the field);
//! - the ServiceAccount must exist (404);
//! - `spec.boundObjectRef` binds the token to a Pod, Secret or Node that must exist
//!   (404), whose uid, when given, must match (409); a Pod must run as that
//!   ServiceAccount (400); any other kind is a 400;
//! - `spec.audiences` default to the API server's own;
//! - the answer (201) carries `status.token` and `status.expirationTimestamp`.
//!
//! The token is JWT-shaped (the documented claims: `aud`, `exp`, `iat`, `nbf`, `iss`,
//! `sub` = `system:serviceaccount:<ns>:<name>`, `kubernetes.io` with the namespace,
//! ServiceAccount and bound object) but not signed by a key anyone can verify: the
//! emulator's TokenReview is what validates it (it is registered there as the
//! ServiceAccount's user with groups `system:serviceaccounts`,
//! `system:serviceaccounts:<ns>` and `system:authenticated`). Not emulated: a token
//! becoming invalid at expiry or when its bound object is deleted.

use base64::Engine as _;
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult, Cause};
use crate::resources::StorageKey;
use crate::review::ReviewUser;
use crate::server::App;

/// The API server's audience (and issuer) when a request names none.
pub const DEFAULT_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

fn b64(v: &Value) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
}

/// Answer a TokenRequest for ServiceAccount `ns/name`.
pub fn token_request(app: &App, ns: &str, name: &str, body: Value) -> ApiResult<Value> {
    let expiration = match body.pointer("/spec/expirationSeconds") {
        None | Some(Value::Null) => 3600,
        Some(v) => v
            .as_i64()
            .ok_or_else(|| ApiError::bad_request("spec.expirationSeconds: must be an integer"))?,
    };
    let invalid = |msg: &str| {
        ApiError::invalid(
            "authentication.k8s.io",
            "TokenRequest",
            name,
            vec![Cause::new(
                "FieldValueInvalid",
                "spec.expirationSeconds",
                msg,
            )],
        )
    };
    if expiration < 600 {
        return Err(invalid("may not specify a duration less than 10 minutes"));
    }
    if expiration > 1 << 32 {
        return Err(invalid(
            "may not specify a duration larger than 2^32 seconds",
        ));
    }
    let audiences: Vec<String> = body
        .pointer("/spec/audiences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| vec![DEFAULT_AUDIENCE.to_string()]);
    let (sa_uid, bound) = {
        let st = app.lock();
        let sa = st
            .store
            .get(&StorageKey::new("", "serviceaccounts"), ns, name)
            .ok_or_else(|| ApiError::not_found("", "serviceaccounts", name))?;
        let sa_uid = crate::util::meta_str(sa, "uid").to_string();
        let bound = match body.pointer("/spec/boundObjectRef") {
            None | Some(Value::Null) => None,
            Some(r) => {
                let kind = r.get("kind").and_then(Value::as_str).unwrap_or_default();
                let obj_name = r.get("name").and_then(Value::as_str).unwrap_or_default();
                let (resource, obj_ns) = match kind {
                    "Pod" => ("pods", ns),
                    "Secret" => ("secrets", ns),
                    "Node" => ("nodes", ""),
                    other => {
                        return Err(ApiError::bad_request(format!(
                            "cannot bind token to object of type {other}"
                        )));
                    }
                };
                let obj = st
                    .store
                    .get(&StorageKey::new("", resource), obj_ns, obj_name)
                    .ok_or_else(|| ApiError::not_found("", resource, obj_name))?;
                let uid = crate::util::meta_str(obj, "uid").to_string();
                if let Some(want) = r
                    .get("uid")
                    .and_then(Value::as_str)
                    .filter(|u| !u.is_empty())
                    && want != uid
                {
                    return Err(ApiError::conflict(
                        "",
                        kind,
                        obj_name,
                        &format!(
                            "the UID in the bound object reference ({want}) does not match the UID in record. The object might have been deleted and then recreated"
                        ),
                    ));
                }
                if kind == "Pod" {
                    let runs_as = obj
                        .pointer("/spec/serviceAccountName")
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty())
                        .unwrap_or("default");
                    if runs_as != name {
                        return Err(ApiError::bad_request(format!(
                            "cannot bind token for serviceaccount {name:?} to pod running with different serviceaccount name."
                        )));
                    }
                }
                Some((kind.to_string(), obj_name.to_string(), uid))
            }
        };
        (sa_uid, bound)
    };
    let now = jiff::Timestamp::now().as_second();
    let exp = now + expiration;
    let mut k8s = json!({
        "namespace": ns,
        "serviceaccount": {"name": name, "uid": sa_uid},
    });
    if let Some((kind, n, uid)) = &bound {
        k8s[kind.to_lowercase()] = json!({"name": n, "uid": uid});
    }
    let sub = format!("system:serviceaccount:{ns}:{name}");
    let claims = json!({
        "aud": audiences, "exp": exp, "iat": now, "nbf": now,
        "iss": DEFAULT_AUDIENCE, "jti": uuid::Uuid::new_v4().to_string(),
        "sub": sub, "kubernetes.io": k8s,
    });
    let token = format!(
        "{}.{}.{}",
        b64(&json!({"alg": "RS256", "kid": "kube-emulator"})),
        b64(&claims),
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(uuid::Uuid::new_v4().as_bytes())
    );
    app.auth
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .tokens
        .insert(
            token.clone(),
            ReviewUser {
                username: sub,
                uid: sa_uid,
                groups: vec![
                    "system:serviceaccounts".into(),
                    format!("system:serviceaccounts:{ns}"),
                    "system:authenticated".into(),
                ],
            },
        );
    let expires = jiff::Timestamp::from_second(exp)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default();
    Ok(json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": null},
        "spec": {
            "audiences": audiences,
            "expirationSeconds": expiration,
            "boundObjectRef": body.pointer("/spec/boundObjectRef").cloned().unwrap_or(Value::Null),
        },
        "status": {"token": token, "expirationTimestamp": expires},
    }))
}
