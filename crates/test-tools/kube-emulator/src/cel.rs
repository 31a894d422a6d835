//! `x-kubernetes-validations` (CEL) rules, evaluated with `kube-cel` (the
//! kube-rs implementation of the Kubernetes CEL libraries).
//!
//! Rules are checked to compile when a CRD is written (422 otherwise, like the
//! real server) and evaluated on every write of a custom resource after the
//! schema validation passed, with `self` bound to each node and `oldSelf` for
//! transition rules on updates.

use kube_cel::ErrorKind;
use serde_json::Value;

use crate::error::Cause;

/// Check that every rule in an `openAPIV3Schema` compiles; errors name the rule.
pub fn compile_all(schema: &Value) -> Result<(), String> {
    match schema {
        Value::Object(m) => {
            if let Some(Value::Array(rules)) = m.get("x-kubernetes-validations") {
                for r in rules {
                    if let Some(rule) = r.get("rule").and_then(Value::as_str)
                        && let Err(e) = kube_cel::cel::Program::compile(rule)
                    {
                        return Err(format!("rule {rule:?}: {e}"));
                    }
                }
            }
            for (k, v) in m {
                if k == "x-kubernetes-validations"
                    || k == "default"
                    || k == "enum"
                    || k == "example"
                {
                    continue;
                }
                compile_all(v)?;
            }
            Ok(())
        }
        Value::Array(items) => items.iter().try_for_each(compile_all),
        _ => Ok(()),
    }
}

/// Whether a schema contains any CEL rule (to skip the evaluator otherwise).
pub fn has_rules(schema: &Value) -> bool {
    match schema {
        Value::Object(m) => m.contains_key("x-kubernetes-validations") || m.values().any(has_rules),
        Value::Array(items) => items.iter().any(has_rules),
        _ => false,
    }
}

/// Evaluate the rules of `schema` against `obj` (and `old` for transition rules).
pub fn validate(obj: &Value, old: Option<&Value>, schema: &Value, causes: &mut Vec<Cause>) {
    if !has_rules(schema) {
        return;
    }
    let Err(errors) = kube_cel::validate(schema, obj, old) else {
        return;
    };
    for e in errors.iter() {
        if matches!(e.kind, ErrorKind::UnsupportedReference) {
            // the evaluator lacks a function the real server has: do not reject valid objects
            tracing::warn!(rule = %e.rule, message = %e.message, "CEL rule not evaluable by the emulator; skipped");
            continue;
        }
        let reason = e
            .reason
            .clone()
            .unwrap_or_else(|| "FieldValueInvalid".to_string());
        let message = match e.kind {
            ErrorKind::ValidationFailure => format!("Invalid value: \"object\": {}", e.message),
            _ => format!(
                "Invalid value: \"object\": {} (rule {:?})",
                e.message, e.rule
            ),
        };
        causes.push(Cause::new(&reason, e.field_path.clone(), message));
    }
}
