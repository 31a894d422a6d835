//! `certificates.k8s.io/v1` CertificateSigningRequest: the strategy and
//! validation of the real server (`pkg/registry/certificates` and
//! `pkg/apis/certificates/validation`), so a client that requests a
//! certificate is refused here where a real cluster refuses it.
//!
//! - create: `spec.request` must be a `CERTIFICATE REQUEST` PEM block whose
//!   signature verifies, `spec.usages` non-empty, known and unique,
//!   `spec.signerName` of the form `example.com/name`, `expirationSeconds`
//!   at least 600; `spec.username`/`uid`/`groups` are set from the requester
//!   whatever the body says, and the status is dropped;
//! - the main resource cannot change `spec` or `status`;
//! - `/status` may set `status.certificate` once (PEM certificates only) and
//!   other conditions, never `Approved`/`Denied`;
//! - `/approval` may add `Approved` or `Denied` (mutually exclusive), never
//!   the certificate; no write removes an `Approved`, `Denied` or `Failed`.

use serde_json::{Value, json};

use crate::error::Cause;
use crate::review::ReviewUser;
use crate::util::now_rfc3339;

/// The key usages the API accepts (`allValidUsages`).
const USAGES: &[&str] = &[
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
    "ocsp signing",
    "microsoft sgc",
    "netscape sgc",
];

/// Condition types whose status may only be `True`.
const TRUE_ONLY: &[&str] = &["Approved", "Denied", "Failed"];

/// Which endpoint a CSR write came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// The main resource.
    Main,
    /// `/status` (the signer).
    Status,
    /// `/approval` (the approver).
    Approval,
}

/// `PrepareForCreate`: the requester's identity, no status.
pub fn prepare_create(obj: &mut Value, user: &ReviewUser) {
    if !obj.get("spec").is_some_and(Value::is_object) {
        obj["spec"] = json!({});
    }
    let spec = &mut obj["spec"];
    spec["username"] = json!(user.username);
    spec["uid"] = json!(user.uid);
    spec["groups"] = json!(user.groups);
    if let Value::Object(m) = spec {
        m.remove("extra");
        if user.uid.is_empty() {
            m.remove("uid");
        }
    }
    if let Value::Object(m) = obj {
        m.remove("status");
    }
}

/// `PrepareForUpdate` of each endpoint: what the write may not change is
/// taken from `old`; new conditions get their timestamps.
pub fn prepare_update(new: &mut Value, old: &Value, endpoint: Endpoint) {
    new["spec"] = old.get("spec").cloned().unwrap_or_else(|| json!({}));
    match endpoint {
        Endpoint::Main => match old.get("status") {
            Some(s) => new["status"] = s.clone(),
            None => {
                if let Value::Object(m) = new {
                    m.remove("status");
                }
            }
        },
        Endpoint::Status => stamp_conditions(new, old),
        Endpoint::Approval => {
            let cert = old.pointer("/status/certificate").cloned();
            if !new.get("status").is_some_and(Value::is_object) {
                new["status"] = json!({});
            }
            match cert {
                Some(c) => new["status"]["certificate"] = c,
                None => {
                    if let Some(m) = new["status"].as_object_mut() {
                        m.remove("certificate");
                    }
                }
            }
            stamp_conditions(new, old);
        }
    }
}

fn conditions(obj: &Value) -> Vec<Value> {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn ctype(c: &Value) -> &str {
    c.get("type").and_then(Value::as_str).unwrap_or("")
}

/// `populateConditionTimestamps`: unset times become now, unless the same
/// condition was already there with the same status.
fn stamp_conditions(new: &mut Value, old: &Value) {
    let olds = conditions(old);
    let Some(list) = new
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    let now = now_rfc3339();
    for c in list.iter_mut() {
        let prev = olds
            .iter()
            .find(|o| ctype(o) == ctype(c) && o.get("status") == c.get("status"));
        for f in ["lastUpdateTime", "lastTransitionTime"] {
            if c.get(f).is_none_or(Value::is_null) {
                c[f] = prev
                    .and_then(|p| p.get(f).cloned())
                    .unwrap_or_else(|| json!(now));
            }
        }
    }
}

fn decode_b64(v: Option<&Value>) -> Option<Vec<u8>> {
    crate::util::base64_decode(v?.as_str()?)
}

fn pem_blocks(data: &[u8]) -> Result<Vec<x509_parser::pem::Pem>, String> {
    let mut out = Vec::new();
    for p in x509_parser::pem::Pem::iter_from_buffer(data) {
        out.push(p.map_err(|e| e.to_string())?);
    }
    Ok(out)
}

/// `validateCSR`: a PEM `CERTIFICATE REQUEST` whose signature verifies.
fn check_request(der_b64: Option<&Value>) -> Result<(), String> {
    let raw = decode_b64(der_b64).unwrap_or_default();
    let blocks = pem_blocks(&raw).unwrap_or_default();
    let Some(block) = blocks.first().filter(|b| b.label == "CERTIFICATE REQUEST") else {
        return Err("PEM block type must be CERTIFICATE REQUEST".into());
    };
    use x509_parser::prelude::FromDer;
    let (_, req) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&block.contents)
            .map_err(|e| format!("x509: malformed certificate request: {e}"))?;
    req.verify_signature()
        .map_err(|_| "the signature of the certificate request does not verify".to_string())
}

/// `validateCertificate`: PEM CERTIFICATE blocks only, each a certificate.
fn check_certificate(raw: &[u8]) -> Result<(), String> {
    if raw.is_empty() {
        return Ok(());
    }
    let blocks = pem_blocks(raw)?;
    if blocks.is_empty() {
        return Err("must contain at least one CERTIFICATE PEM block".into());
    }
    for b in &blocks {
        if b.label != "CERTIFICATE" {
            return Err(format!(
                "only CERTIFICATE PEM blocks are allowed, found {:?}",
                b.label
            ));
        }
        x509_parser::parse_x509_certificate(&b.contents).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn check_signer_name(name: &str, causes: &mut Vec<Cause>) {
    let field = "spec.signerName";
    if name.is_empty() {
        causes.push(Cause::new("FieldValueRequired", field, "Required value"));
        return;
    }
    let parts: Vec<&str> = name.split('/').collect();
    let well_formed = parts.len() == 2
        && crate::util::is_dns_subdomain(parts[0])
        && parts[0].contains('.')
        && !parts[1].is_empty()
        && name.len() <= 571;
    if !well_formed {
        causes.push(Cause::new(
            "FieldValueInvalid",
            field,
            format!(
                "Invalid value: {name:?}: must be a fully qualified domain and path of the form 'example.com/signer-name'"
            ),
        ));
    }
}

/// Validation of a CSR as written through `endpoint` (`old` is `None` on create).
pub fn validate(obj: &Value, old: Option<&Value>, endpoint: Endpoint, causes: &mut Vec<Cause>) {
    let spec = obj.get("spec").cloned().unwrap_or_else(|| json!({}));
    // Checks of the spec only run on create: the spec cannot change afterwards.
    if old.is_none() {
        if let Err(e) = check_request(spec.get("request")) {
            causes.push(Cause::new(
                "FieldValueInvalid",
                "spec.request",
                format!("Invalid value: \"<request>\": {e}"),
            ));
        }
        let usages: Vec<String> = spec
            .get("usages")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|u| u.as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default();
        if usages.is_empty() {
            causes.push(Cause::new(
                "FieldValueRequired",
                "spec.usages",
                "Required value",
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for (i, u) in usages.iter().enumerate() {
            if !USAGES.contains(&u.as_str()) {
                causes.push(Cause::new(
                    "FieldValueNotSupported",
                    format!("spec.usages[{i}]"),
                    format!("Unsupported value: {u:?}"),
                ));
            }
            if !seen.insert(u.clone()) {
                causes.push(Cause::new(
                    "FieldValueDuplicate",
                    format!("spec.usages[{i}]"),
                    format!("Duplicate value: {u:?}"),
                ));
            }
        }
        check_signer_name(
            spec.get("signerName").and_then(Value::as_str).unwrap_or(""),
            causes,
        );
        if let Some(s) = spec.get("expirationSeconds").and_then(Value::as_i64)
            && s < 600
        {
            causes.push(Cause::new(
                "FieldValueInvalid",
                "spec.expirationSeconds",
                format!("Invalid value: {s}: may not specify a duration less than 600 seconds (10 minutes)"),
            ));
        }
    }
    let conds = conditions(obj);
    let (mut approved, mut denied) = (false, false);
    let mut types = std::collections::HashSet::new();
    for (i, c) in conds.iter().enumerate() {
        let t = ctype(c);
        let path = format!("status.conditions[{i}]");
        if t.is_empty() {
            causes.push(Cause::new(
                "FieldValueRequired",
                format!("{path}.type"),
                "Required value",
            ));
        }
        let status = c.get("status").and_then(Value::as_str).unwrap_or("");
        let allowed: &[&str] = if TRUE_ONLY.contains(&t) {
            &["True"]
        } else {
            &["False", "True", "Unknown"]
        };
        if status.is_empty() {
            causes.push(Cause::new(
                "FieldValueRequired",
                format!("{path}.status"),
                "Required value",
            ));
        } else if !allowed.contains(&status) {
            causes.push(Cause::new(
                "FieldValueNotSupported",
                format!("{path}.status"),
                format!("Unsupported value: {status:?}"),
            ));
        }
        match t {
            "Approved" => approved = true,
            "Denied" => denied = true,
            _ => {}
        }
        if (t == "Approved" && denied) || (t == "Denied" && approved) {
            causes.push(Cause::new(
                "FieldValueInvalid",
                format!("{path}.type"),
                format!(
                    "Invalid value: {t:?}: Approved and Denied conditions are mutually exclusive"
                ),
            ));
        }
        if !types.insert(t.to_string()) {
            causes.push(Cause::new(
                "FieldValueDuplicate",
                format!("{path}.type"),
                format!("Duplicate value: {t:?}"),
            ));
        }
    }
    let cert = decode_b64(obj.pointer("/status/certificate")).unwrap_or_default();
    let old_cert = old
        .and_then(|o| decode_b64(o.pointer("/status/certificate")))
        .unwrap_or_default();
    if cert != old_cert
        && let Err(e) = check_certificate(&cert)
    {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "status.certificate",
            format!("Invalid value: \"<certificate data>\": {e}"),
        ));
    }
    let Some(old) = old else {
        return;
    };
    let olds = conditions(old);
    let of = |list: &[Value], t: &str| -> Vec<Value> {
        list.iter().filter(|c| ctype(c) == t).cloned().collect()
    };
    for t in ["Approved", "Denied", "Failed"] {
        if of(&conds, t).len() < of(&olds, t).len() {
            causes.push(Cause::new(
                "FieldValueForbidden",
                "status.conditions",
                format!("Forbidden: updates may not remove a condition of type {t:?}"),
            ));
        }
    }
    if endpoint != Endpoint::Approval {
        for t in ["Approved", "Denied"] {
            let (n, o) = (of(&conds, t), of(&olds, t));
            if n.len() > o.len() {
                causes.push(Cause::new(
                    "FieldValueForbidden",
                    "status.conditions",
                    format!("Forbidden: updates may not add a condition of type {t:?}"),
                ));
            } else if n.len() == o.len() && n != o {
                causes.push(Cause::new(
                    "FieldValueForbidden",
                    "status.conditions",
                    format!("Forbidden: updates may not modify a condition of type {t:?}"),
                ));
            }
        }
    }
    if cert != old_cert {
        if endpoint != Endpoint::Status {
            causes.push(Cause::new(
                "FieldValueForbidden",
                "status.certificate",
                "Forbidden: updates may not set certificate content",
            ));
        } else if !old_cert.is_empty() {
            causes.push(Cause::new(
                "FieldValueForbidden",
                "status.certificate",
                "Forbidden: updates may not modify existing certificate content",
            ));
        }
    }
}
