//! Checks kube-apiserver makes of a CRD schema's list types and CEL rule
//! entries (apiextensions-apiserver `validation.go`: the `x-kubernetes-list-*`
//! rules, `validateMapListKeysMapSet`, and the fields of each
//! `x-kubernetes-validations` entry), with the server's field paths and wording.

use serde_json::Value;

use crate::error::Cause;

const REASONS: [&str; 4] = [
    "FieldValueDuplicate",
    "FieldValueForbidden",
    "FieldValueInvalid",
    "FieldValueRequired",
];

/// The causes for one `openAPIV3Schema`; `path` is where it sits
/// (`spec.validation.openAPIV3Schema` or `spec.versions[i].schema.openAPIV3Schema`).
pub fn schema_causes(schema: &Value, path: &str) -> Vec<Cause> {
    let mut out = Vec::new();
    walk(schema, path, None, &mut out);
    out
}

/// Whether a rule reads `oldSelf` (a transition rule).
fn uses_old_self(rule: &str) -> bool {
    let b = rule.as_bytes();
    rule.match_indices("oldSelf").any(|(i, _)| {
        let before = i.checked_sub(1).map(|j| b[j]);
        let after = b.get(i + "oldSelf".len()).copied();
        let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
        !before.is_some_and(|c| ident(c) || c == b'.') && !after.is_some_and(ident)
    })
}

fn has_newline(s: &str) -> bool {
    s.contains('\n') || s.contains('\r')
}

/// `uncorrelatable`: the highest list above this node whose items cannot be paired
/// between the old and the new object (any list but `x-kubernetes-list-type: map`).
fn walk(s: &Value, path: &str, uncorrelatable: Option<&str>, out: &mut Vec<Cause>) {
    let Some(obj) = s.as_object() else {
        return;
    };
    node_rules(obj, path, out);
    list_rules(obj, path, out);
    if let Some(rules) = obj
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        for (i, r) in rules.iter().enumerate() {
            rule_entry(r, &format!("{path}.x-kubernetes-validations[{i}]"), out);
            let rule = r.get("rule").and_then(Value::as_str).unwrap_or("");
            if let Some(within) = uncorrelatable
                && uses_old_self(rule)
            {
                out.push(Cause::new(
                    "FieldValueInvalid",
                    format!("{path}.x-kubernetes-validations[{i}].rule"),
                    format!("Invalid value: {rule:?}: oldSelf cannot be used on the uncorrelatable portion of the schema within {within}"),
                ));
            }
        }
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        // the fields of an atomic map cannot be paired between old and new either
        let atomic = obj.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic");
        let within = match uncorrelatable {
            Some(u) => Some(u),
            None if atomic => Some(path),
            None => None,
        };
        for (k, v) in props {
            walk(v, &format!("{path}.properties[{k}]"), within, out);
        }
    }
    if let Some(items) = obj.get("items") {
        let list_map = obj.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map");
        let within = match uncorrelatable {
            Some(u) => Some(u),
            None if !list_map => Some(path),
            None => None,
        };
        walk(items, &format!("{path}.items"), within, out);
    }
    if let Some(ap) = obj.get("additionalProperties").filter(|a| a.is_object()) {
        walk(
            ap,
            &format!("{path}.additionalProperties"),
            uncorrelatable,
            out,
        );
    }
}

fn node_rules(obj: &serde_json::Map<String, Value>, path: &str, out: &mut Vec<Cause>) {
    if obj.get("uniqueItems").and_then(Value::as_bool) == Some(true) {
        out.push(Cause::new(
            "FieldValueForbidden",
            format!("{path}.uniqueItems"),
            "Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    let has_props = obj
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|p| !p.is_empty());
    if has_props
        && obj
            .get("additionalProperties")
            .is_some_and(|a| a.is_object() || a == &Value::Bool(false))
    {
        out.push(Cause::new(
            "FieldValueForbidden",
            format!("{path}.additionalProperties"),
            "Forbidden: additionalProperties and properties are mutual exclusive",
        ));
    }
    if obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(false)) {
        out.push(Cause::new(
            "FieldValueInvalid",
            format!("{path}.x-kubernetes-preserve-unknown-fields"),
            "Invalid value: false: must be true or undefined",
        ));
    }
    if let Some(t) = obj.get("x-kubernetes-map-type").and_then(Value::as_str)
        && !matches!(t, "atomic" | "granular")
    {
        out.push(Cause::new(
            "FieldValueNotSupported",
            format!("{path}.x-kubernetes-map-type"),
            format!("Unsupported value: {t:?}: supported values: \"atomic\", \"granular\""),
        ));
    }
}

fn list_rules(obj: &serde_json::Map<String, Value>, path: &str, out: &mut Vec<Cause>) {
    let list_type = obj.get("x-kubernetes-list-type").and_then(Value::as_str);
    let keys: Vec<&str> = obj
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(t) = list_type
        && !matches!(t, "atomic" | "set" | "map")
    {
        out.push(Cause::new(
            "FieldValueNotSupported",
            format!("{path}.x-kubernetes-list-type"),
            format!("Unsupported value: {t:?}: supported values: \"atomic\", \"set\", \"map\""),
        ));
    }
    if !keys.is_empty() {
        match list_type {
            None => out.push(Cause::new(
                "FieldValueRequired",
                format!("{path}.x-kubernetes-list-type"),
                "Required value: must be map if x-kubernetes-list-map-keys is non-empty",
            )),
            Some("map") => {}
            Some(t) => out.push(Cause::new(
                "FieldValueInvalid",
                format!("{path}.x-kubernetes-list-type"),
                format!(
                    "Invalid value: {t:?}: must be map if x-kubernetes-list-map-keys is non-empty"
                ),
            )),
        }
    }
    let items = obj.get("items").and_then(Value::as_object);
    if list_type == Some("map") {
        if keys.is_empty() {
            out.push(Cause::new(
                "FieldValueRequired",
                format!("{path}.x-kubernetes-list-map-keys"),
                "Required value: must not be empty if x-kubernetes-list-type is map",
            ));
        }
        if let Some(items) = items {
            let ty = items.get("type").and_then(Value::as_str).unwrap_or("");
            if ty != "object" {
                out.push(Cause::new(
                    "FieldValueInvalid",
                    format!("{path}.items.type"),
                    format!("Invalid value: {ty:?}: must be object if parent array's x-kubernetes-list-type is map"),
                ));
            } else {
                let required: Vec<&str> = items
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let props = items.get("properties").and_then(Value::as_object);
                for k in &keys {
                    let Some(p) = props.and_then(|p| p.get(*k)) else {
                        out.push(Cause::new(
                            "FieldValueInvalid",
                            format!("{path}.x-kubernetes-list-map-keys"),
                            format!("Invalid value: {keys:?}: entries must all be names of item properties"),
                        ));
                        continue;
                    };
                    if matches!(
                        p.get("type").and_then(Value::as_str),
                        Some("array" | "object")
                    ) {
                        out.push(Cause::new(
                            "FieldValueInvalid",
                            format!("{path}.items.properties[{k}].type"),
                            "Invalid value: \"object\": must be a scalar type if parent array's x-kubernetes-list-type is map",
                        ));
                    }
                    if !required.contains(k) && p.get("default").is_none() {
                        out.push(Cause::new(
                            "FieldValueRequired",
                            format!("{path}.items.properties[{k}].default"),
                            "Required value: this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
                        ));
                    }
                    if p.get("nullable").and_then(Value::as_bool) == Some(true) {
                        out.push(Cause::new(
                            "FieldValueForbidden",
                            format!("{path}.items.properties[{k}].nullable"),
                            "Forbidden: this property is in x-kubernetes-list-map-keys, so it cannot be nullable",
                        ));
                    }
                }
            }
        }
    }
    if let (Some(t @ ("set" | "map")), Some(items)) = (list_type, items)
        && items.get("nullable").and_then(Value::as_bool) == Some(true)
    {
        out.push(Cause::new(
            "FieldValueForbidden",
            format!("{path}.items.nullable"),
            format!("Forbidden: cannot be nullable when x-kubernetes-list-type is {t}"),
        ));
    }
}

fn rule_entry(r: &Value, path: &str, out: &mut Vec<Cause>) {
    let rule = r.get("rule").and_then(Value::as_str).unwrap_or("");
    let message = r.get("message").and_then(Value::as_str).unwrap_or("");
    if rule.trim().is_empty() {
        out.push(Cause::new(
            "FieldValueRequired",
            format!("{path}.rule"),
            "Required value: rule is not specified",
        ));
    } else if !message.is_empty() && message.trim().is_empty() {
        out.push(Cause::new(
            "FieldValueInvalid",
            format!("{path}.message"),
            format!("Invalid value: {message:?}: message must be non-empty if specified"),
        ));
    } else if has_newline(message.trim()) {
        out.push(Cause::new(
            "FieldValueInvalid",
            format!("{path}.message"),
            format!("Invalid value: {message:?}: message must not contain line breaks"),
        ));
    } else if has_newline(rule.trim()) && message.trim().is_empty() {
        out.push(Cause::new(
            "FieldValueRequired",
            format!("{path}.message"),
            "Required value: message must be specified if rule contains line breaks",
        ));
    }
    if let Some(me) = r.get("messageExpression").and_then(Value::as_str)
        && !me.is_empty()
        && me.trim().is_empty()
    {
        out.push(Cause::new(
            "FieldValueRequired",
            format!("{path}.messageExpression"),
            "Required value: messageExpression must be non-empty if specified",
        ));
    }
    if let Some(reason) = r.get("reason").and_then(Value::as_str)
        && !REASONS.contains(&reason)
    {
        let supported: Vec<String> = REASONS.iter().map(|r| format!("{r:?}")).collect();
        out.push(Cause::new(
            "FieldValueNotSupported",
            format!("{path}.reason"),
            format!(
                "Unsupported value: {reason:?}: supported values: {}",
                supported.join(", ")
            ),
        ));
    }
    if let Some(fp) = r.get("fieldPath").and_then(Value::as_str) {
        if !fp.is_empty() && fp.trim().is_empty() {
            out.push(Cause::new(
                "FieldValueInvalid",
                format!("{path}.fieldPath"),
                format!("Invalid value: {fp:?}: fieldPath must be non-empty if specified"),
            ));
        }
        if has_newline(fp) {
            out.push(Cause::new(
                "FieldValueInvalid",
                format!("{path}.fieldPath"),
                format!("Invalid value: {fp:?}: fieldPath must not contain line breaks"),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(s: Value) -> Vec<String> {
        schema_causes(&s, "s")
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn list_map_keys_must_be_required_scalar_properties() {
        let s = json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name", "x"],
            "items": {"type": "object", "properties": {"name": {"type": "string", "nullable": true}}}});
        let f = fields(s);
        assert!(f.contains(&"s.items.properties[name].default: Required value: this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property".to_string()), "{f:?}");
        assert!(
            f.iter()
                .any(|e| e.starts_with("s.items.properties[name].nullable: Forbidden")),
            "{f:?}"
        );
        assert!(
            f.iter()
                .any(|e| e.contains("entries must all be names of item properties")),
            "{f:?}"
        );
        let ok = json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
            "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}});
        assert!(fields(ok).is_empty());
    }

    #[test]
    fn transition_rules_need_correlatable_items() {
        let s = json!({"type": "object", "properties": {
            "atomic": {"type": "array", "items": {"type": "string",
                "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}},
            "keyed": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"],
                "items": {"type": "object", "required": ["k"], "properties": {"k": {"type": "string"}},
                    "x-kubernetes-validations": [{"rule": "self.k == oldSelf.k"}, {"rule": "self.k != 'oldSelfish'"}]}}
        }});
        let f = fields(s);
        assert_eq!(
            f,
            vec!["s.properties[atomic].items.x-kubernetes-validations[0].rule: Invalid value: \"self == oldSelf\": oldSelf cannot be used on the uncorrelatable portion of the schema within s.properties[atomic]".to_string()]
        );
        assert!(!uses_old_self("self.oldSelfish") && uses_old_self("oldSelf.x == 1"));
    }

    #[test]
    fn structural_rules_of_a_node() {
        let s = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": false,
            "properties": {"a": {"type": "array", "uniqueItems": true, "items": {"type": "string"}}},
            "additionalProperties": {"type": "string"}});
        let f = fields(s);
        assert!(f.iter().any(|e| e == "s.properties[a].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic"), "{f:?}");
        assert!(f.iter().any(|e| e == "s.additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"), "{f:?}");
        assert!(
            f.iter()
                .any(|e| e
                    .starts_with("s.x-kubernetes-preserve-unknown-fields: Invalid value: false")),
            "{f:?}"
        );
        let atomic = json!({"type": "object", "x-kubernetes-map-type": "atomic", "properties": {
            "x": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}}});
        assert!(fields(atomic)[0].ends_with("within s"));
    }

    #[test]
    fn rule_entries_need_a_rule_a_known_reason_and_one_line_messages() {
        let s = json!({"type": "object", "x-kubernetes-validations": [
            {"rule": " "},
            {"rule": "true", "reason": "Nope"},
            {"rule": "true", "message": "two\nlines"},
            {"rule": "true\n|| false"}
        ]});
        let f = fields(s);
        assert_eq!(f.len(), 4, "{f:?}");
        assert!(f[0].starts_with(
            "s.x-kubernetes-validations[0].rule: Required value: rule is not specified"
        ));
        assert_eq!(
            f[1],
            "s.x-kubernetes-validations[1].reason: Unsupported value: \"Nope\": supported values: \"FieldValueDuplicate\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\""
        );
        assert!(f[2].ends_with("message must not contain line breaks"));
        assert!(f[3].ends_with("message must be specified if rule contains line breaks"));
    }
}
