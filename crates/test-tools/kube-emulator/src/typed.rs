//! The type check server-side apply makes of an apply patch before anything else.
//!
//! kube-apiserver converts the body of an `application/apply-patch+yaml` request
//! into a typed value of the kind's schema (structured-merge-diff) before it
//! merges, defaults or validates. When that fails (a value of the wrong type, a
//! field the schema does not declare, two items of a `map` list with the same
//! keys) it answers **500** with reason `""` and a message such as
//! `failed to create typed patch object (/bad; sunet.se/v1alpha1, Kind=OpenstackDomain): .spec.adopt: expected boolean, got &{true}`
//! (apimachinery `managedfields/internal/structuredmerge.go`; structured-merge-diff
//! `typed/validate.go`, `typed/helpers.go`), not the 422 Invalid that a create or
//! update of the same object gets. The messages below follow those sources,
//! including their Go formatting of the offending value.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::schema::{AdditionalProperties, Schema};

/// One failure, as structured-merge-diff words it (`path: message`).
#[derive(Debug, Clone, PartialEq)]
struct TypeError {
    path: String,
    message: String,
}

/// The type errors of an apply patch of a custom resource against its schema,
/// joined as structured-merge-diff joins them; `None` when the patch is well typed.
/// `metadata` is left to the emulator's own checks.
pub fn apply_patch_errors(patch: &Value, schema: &Schema) -> Option<String> {
    let mut errs = Vec::new();
    if let Value::Object(m) = patch {
        let mut keys: Vec<&String> = m.keys().collect();
        keys.sort();
        for k in keys {
            if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            let v = &m[k];
            match schema.properties.get(k) {
                Some(s) => walk(v, s, &format!(".{k}"), &mut errs),
                None if schema.preserve_unknown_fields => {}
                None => {
                    errs.push(TypeError {
                        path: format!(".{k}"),
                        message: "field not declared in schema".into(),
                    });
                    break;
                }
            }
        }
    }
    match errs.len() {
        0 => None,
        1 => Some(render(&errs[0])),
        _ => {
            let mut lines = vec!["errors:".to_string()];
            lines.extend(errs.iter().map(|e| format!("  {}", render(e))));
            Some(lines.join("\n"))
        }
    }
}

/// The whole message of the 500 answer: `failed to create typed patch object (ns/name; gvk): errors`.
pub fn typed_patch_message(
    namespace: &str,
    name: &str,
    group: &str,
    version: &str,
    kind: &str,
    errors: &str,
) -> String {
    format!(
        "failed to create typed patch object ({namespace}/{name}; {group}/{version}, Kind={kind}): {errors}"
    )
}

fn render(e: &TypeError) -> String {
    if e.path.is_empty() {
        e.message.clone()
    } else {
        format!("{}: {}", e.path, e.message)
    }
}

fn err(errs: &mut Vec<TypeError>, path: &str, message: String) {
    errs.push(TypeError {
        path: path.to_string(),
        message,
    });
}

fn walk(v: &Value, s: &Schema, path: &str, errs: &mut Vec<TypeError>) {
    if v.is_null() {
        return;
    }
    if s.int_or_string {
        if v.is_object() || v.is_array() {
            err(
                errs,
                path,
                format!("expected any scalar, got {}", go_value(v)),
            );
        }
        return;
    }
    match s.type_.as_deref() {
        Some("object") => walk_object(v, s, path, errs),
        Some("array") => walk_list(v, s, path, errs),
        Some("boolean") if !v.is_boolean() => {
            err(errs, path, format!("expected boolean, got {}", go_value(v)));
        }
        Some("integer") | Some("number") if !v.is_number() => {
            err(
                errs,
                path,
                format!("expected numeric (int or float), got {}", go_type(v)),
            );
        }
        Some("string") if !v.is_string() => {
            err(
                errs,
                path,
                format!("expected string, got {}", go_sharp_value(v)),
            );
        }
        // untyped with preserve-unknown-fields: anything goes
        _ => {}
    }
}

fn walk_object(v: &Value, s: &Schema, path: &str, errs: &mut Vec<TypeError>) {
    let Value::Object(m) = v else {
        err(errs, path, format!("expected map, got {}", go_value(v)));
        return;
    };
    let element = match &s.additional_properties {
        Some(AdditionalProperties::Schema(e)) => Some(e.as_ref()),
        _ => None,
    };
    let open = s.preserve_unknown_fields
        || matches!(
            s.additional_properties,
            Some(AdditionalProperties::Allowed(true))
        );
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    for k in keys {
        let child = format!("{path}.{k}");
        if let Some(ps) = s.properties.get(k) {
            walk(&m[k], ps, &child, errs);
        } else if let Some(e) = element {
            walk(&m[k], e, &child, errs);
        } else if !open {
            // the server stops at the first undeclared field of a map
            err(errs, &child, "field not declared in schema".into());
            return;
        }
    }
}

fn walk_list(v: &Value, s: &Schema, path: &str, errs: &mut Vec<TypeError>) {
    let Value::Array(items) = v else {
        err(errs, path, format!("expected list, got {}", go_value(v)));
        return;
    };
    let Some(item_schema) = s.items.as_deref() else {
        return;
    };
    let kind = s.list_type.as_deref().unwrap_or("atomic");
    let mut seen = BTreeSet::new();
    for (i, item) in items.iter().enumerate() {
        let element = match kind {
            "map" => match key_element(item, item_schema, &s.list_map_keys) {
                Ok(pe) => pe,
                Err(e) => {
                    // without its key the item cannot be named: the server gives up on the list
                    err(errs, path, format!("element {i}: {e}"));
                    return;
                }
            },
            "set" => {
                if item.is_object() || item.is_array() {
                    err(
                        errs,
                        path,
                        format!(
                            "element {i}: associative list without keys has an element that's a map type"
                        ),
                    );
                    return;
                }
                format!("[={}]", go_json(item))
            }
            _ => format!("[{i}]"),
        };
        if kind != "atomic" && !seen.insert(element.clone()) {
            err(errs, path, format!("duplicate entries for key {element}"));
        }
        walk(item, item_schema, &format!("{path}{element}"), errs);
    }
}

/// The path element of an item of a `map` list: `[k1="v",k2=2]`, keys sorted.
fn key_element(item: &Value, schema: &Schema, keys: &[String]) -> Result<String, String> {
    let m = match item {
        Value::Null => return Err("associative list with keys may not have a null element".into()),
        Value::Object(m) => m,
        _ => return Err("associative list with keys may not have non-map elements".into()),
    };
    let mut parts = Vec::new();
    for k in keys {
        let value = match m.get(k) {
            Some(v) => v.clone(),
            None => match schema.properties.get(k).and_then(|p| p.default.clone()) {
                Some(d) => d,
                None => {
                    return Err(format!(
                        "associative list with keys has an element that omits key field {k:?} (and doesn't have default value)"
                    ));
                }
            },
        };
        parts.push((k.clone(), go_json(&value)));
    }
    parts.sort();
    let inner: Vec<String> = parts.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    Ok(format!("[{}]", inner.join(",")))
}

fn go_json(v: &Value) -> String {
    v.to_string()
}

/// Go's `%T` of a decoded JSON value.
fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// Go's `%v` of structured-merge-diff's value wrapper (a pointer to a struct).
fn go_value(v: &Value) -> String {
    format!("&{{{}}}", go_plain(v))
}

/// Go's `%v` of a decoded JSON value.
fn go_plain(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_number(n),
        Value::String(s) => s.clone(),
        Value::Array(a) => format!("[{}]", a.iter().map(go_plain).collect::<Vec<_>>().join(" ")),
        Value::Object(m) => {
            // Go prints map keys sorted
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .iter()
                .map(|k| format!("{k}:{}", go_plain(&m[*k])))
                .collect();
            format!("map[{}]", parts.join(" "))
        }
    }
}

/// Go's `%#v` of structured-merge-diff's value wrapper.
fn go_sharp_value(v: &Value) -> String {
    format!("&value.valueUnstructured{{Value:{}}}", go_sharp(v))
}

fn go_sharp(v: &Value) -> String {
    match v {
        Value::Null => "interface {}(nil)".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_number(n),
        Value::String(s) => format!("{s:?}"),
        Value::Array(a) => format!(
            "[]interface {{}}{{{}}}",
            a.iter().map(go_sharp).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .iter()
                .map(|k| format!("{k:?}:{}", go_sharp(&m[*k])))
                .collect();
            format!("map[string]interface {{}}{{{}}}", parts.join(", "))
        }
    }
}

/// Go's `%v` of an int64 or float64 (`strconv`'s shortest `%g`: an exponent from 1e6, or below 1e-4).
fn go_number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    let f = n.as_f64().unwrap_or(0.0);
    let exp = if f == 0.0 {
        0
    } else {
        f.abs().log10().floor() as i32
    };
    if !(-4..6).contains(&exp) {
        let s = format!("{f:e}");
        // Rust writes 1e21 / 1.5e-5; Go writes 1e+21 / 1.5e-05
        match s.split_once('e') {
            Some((m, e)) => {
                let (sign, digits) = match e.strip_prefix('-') {
                    Some(d) => ('-', d),
                    None => ('+', e),
                };
                format!("{m}e{sign}{digits:0>2}")
            }
            None => s,
        }
    } else {
        format!("{f}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Schema {
        Schema::parse(&json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "adopt": {"type": "boolean"},
                    "ram": {"type": "integer"},
                    "name": {"type": "string"},
                    "extra": {"type": "object", "additionalProperties": {"type": "string"}},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "networks": {"type": "array", "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name"],
                        "items": {"type": "object", "required": ["name"], "properties": {
                            "name": {"type": "string"}, "cidr": {"type": "string"}}}}
                }}
            }
        }))
        .expect("schema parses")
    }

    fn errors(spec: Value) -> Option<String> {
        apply_patch_errors(
            &json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a"}, "spec": spec}),
            &schema(),
        )
    }

    #[test]
    fn messages_are_the_servers() {
        assert_eq!(
            errors(json!({"adopt": "true"})).as_deref(),
            Some(".spec.adopt: expected boolean, got &{true}")
        );
        assert_eq!(
            errors(json!({"ram": "1Gi"})).as_deref(),
            Some(".spec.ram: expected numeric (int or float), got string")
        );
        assert_eq!(
            errors(json!({"networks": [{"name": "n"}, {"name": "n"}]})).as_deref(),
            Some(".spec.networks: duplicate entries for key [name=\"n\"]")
        );
        assert_eq!(
            errors(json!({"name": 5})).as_deref(),
            Some(".spec.name: expected string, got &value.valueUnstructured{Value:5}")
        );
        assert_eq!(
            errors(json!({"bogus": 1})).as_deref(),
            Some(".spec.bogus: field not declared in schema")
        );
        assert_eq!(
            errors(json!({"networks": [{"cidr": "x"}]})).as_deref(),
            Some(
                ".spec.networks: element 0: associative list with keys has an element that omits key field \"name\" (and doesn't have default value)"
            )
        );
        assert_eq!(
            errors(json!({"networks": [{"name": "n", "cidr": 1}], "tags": [true]})).as_deref(),
            Some(
                "errors:\n  .spec.networks[name=\"n\"].cidr: expected string, got &value.valueUnstructured{Value:1}\n  .spec.tags[0]: expected string, got &value.valueUnstructured{Value:true}"
            )
        );
        assert_eq!(
            errors(json!({"extra": "x"})).as_deref(),
            Some(".spec.extra: expected map, got &{x}")
        );
    }

    #[test]
    fn well_typed_patches_and_nulls_pass() {
        assert_eq!(
            errors(json!({"adopt": true, "ram": 1.5, "name": null, "extra": {"a": "b"}})),
            None
        );
        assert_eq!(
            typed_patch_message(
                "",
                "bad",
                "sunet.se",
                "v1alpha1",
                "OpenstackDomain",
                ".spec.adopt: x"
            ),
            "failed to create typed patch object (/bad; sunet.se/v1alpha1, Kind=OpenstackDomain): .spec.adopt: x"
        );
    }

    #[test]
    fn go_formats_floats_like_go() {
        assert_eq!(go_plain(&json!(1.5)), "1.5");
        assert_eq!(go_plain(&json!(1e21)), "1e+21");
        assert_eq!(go_plain(&json!(123456.5)), "123456.5");
        assert_eq!(go_plain(&json!(1234567.5)), "1.2345675e+06");
        assert_eq!(go_plain(&json!(0.00001)), "1e-05");
    }
}
