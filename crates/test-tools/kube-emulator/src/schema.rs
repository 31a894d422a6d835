//! Structural OpenAPI v3 schemas of CustomResourceDefinitions: pruning,
//! defaulting and validation, following the apiextensions-apiserver rules.
//!
//! Order of application on every write of a custom resource is the one the
//! real server uses: prune unknown fields, apply defaults, then validate.

use std::collections::BTreeMap;

use regex::Regex;
use serde_json::{Map, Value};

use crate::error::Cause;

/// `additionalProperties` of an object schema.
#[derive(Debug, Clone)]
pub enum AdditionalProperties {
    /// `additionalProperties: true|false`.
    Allowed(bool),
    /// `additionalProperties: {schema}`: a map whose values follow the schema.
    Schema(Box<Schema>),
}

/// One `x-kubernetes-validations` rule (CEL).
#[derive(Debug, Clone)]
pub struct CelRule {
    /// The CEL expression.
    pub rule: String,
    /// Message reported when the rule evaluates to false.
    pub message: Option<String>,
    /// Field path (relative, JSON-path-like) the error is reported on.
    pub field_path: Option<String>,
    /// Reason reported (`FieldValueInvalid` by default).
    pub reason: Option<String>,
}

/// A parsed structural schema node.
#[derive(Debug, Clone, Default)]
pub struct Schema {
    /// `type`.
    pub type_: Option<String>,
    /// `format` (only informative; few formats are checked).
    pub format: Option<String>,
    /// `properties`.
    pub properties: BTreeMap<String, Schema>,
    /// `additionalProperties`.
    pub additional_properties: Option<AdditionalProperties>,
    /// `items`.
    pub items: Option<Box<Schema>>,
    /// `required`.
    pub required: Vec<String>,
    /// `enum`.
    pub enum_: Option<Vec<Value>>,
    /// `default`.
    pub default: Option<Value>,
    /// `nullable`.
    pub nullable: bool,
    /// `minimum`.
    pub minimum: Option<f64>,
    /// `maximum`.
    pub maximum: Option<f64>,
    /// `exclusiveMinimum`.
    pub exclusive_minimum: bool,
    /// `exclusiveMaximum`.
    pub exclusive_maximum: bool,
    /// `multipleOf`.
    pub multiple_of: Option<f64>,
    /// `minLength`.
    pub min_length: Option<u64>,
    /// `maxLength`.
    pub max_length: Option<u64>,
    /// `pattern`, compiled.
    pub pattern: Option<(String, Regex)>,
    /// `minItems`.
    pub min_items: Option<u64>,
    /// `maxItems`.
    pub max_items: Option<u64>,
    /// `uniqueItems`.
    pub unique_items: bool,
    /// `minProperties`.
    pub min_properties: Option<u64>,
    /// `maxProperties`.
    pub max_properties: Option<u64>,
    /// `allOf` (value validations only, as structural schemas require).
    pub all_of: Vec<Schema>,
    /// `anyOf`.
    pub any_of: Vec<Schema>,
    /// `oneOf`.
    pub one_of: Vec<Schema>,
    /// `not`.
    pub not: Option<Box<Schema>>,
    /// `x-kubernetes-preserve-unknown-fields`.
    pub preserve_unknown_fields: bool,
    /// `x-kubernetes-embedded-resource`.
    pub embedded_resource: bool,
    /// `x-kubernetes-int-or-string`.
    pub int_or_string: bool,
    /// `x-kubernetes-list-type`.
    pub list_type: Option<String>,
    /// `x-kubernetes-list-map-keys`.
    pub list_map_keys: Vec<String>,
    /// `x-kubernetes-validations`.
    pub validations: Vec<CelRule>,
}

fn as_u64(v: Option<&Value>) -> Option<u64> {
    v.and_then(|v| v.as_u64().or_else(|| v.as_f64().map(|f| f as u64)))
}

impl Schema {
    /// Parse an `openAPIV3Schema` node; errors name the offending field path.
    pub fn parse(v: &Value) -> Result<Schema, String> {
        Self::parse_at(v, "openAPIV3Schema")
    }

    fn parse_at(v: &Value, path: &str) -> Result<Schema, String> {
        let obj = match v {
            Value::Object(o) => o,
            Value::Null => return Ok(Schema::default()),
            _ => return Err(format!("{path}: must be an object")),
        };
        let mut s = Schema {
            type_: obj.get("type").and_then(Value::as_str).map(str::to_string),
            format: obj
                .get("format")
                .and_then(Value::as_str)
                .map(str::to_string),
            default: obj.get("default").cloned(),
            nullable: obj
                .get("nullable")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            minimum: obj.get("minimum").and_then(Value::as_f64),
            maximum: obj.get("maximum").and_then(Value::as_f64),
            exclusive_minimum: obj
                .get("exclusiveMinimum")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            exclusive_maximum: obj
                .get("exclusiveMaximum")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            multiple_of: obj.get("multipleOf").and_then(Value::as_f64),
            min_length: as_u64(obj.get("minLength")),
            max_length: as_u64(obj.get("maxLength")),
            min_items: as_u64(obj.get("minItems")),
            max_items: as_u64(obj.get("maxItems")),
            unique_items: obj
                .get("uniqueItems")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            min_properties: as_u64(obj.get("minProperties")),
            max_properties: as_u64(obj.get("maxProperties")),
            preserve_unknown_fields: obj
                .get("x-kubernetes-preserve-unknown-fields")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            embedded_resource: obj
                .get("x-kubernetes-embedded-resource")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            int_or_string: obj
                .get("x-kubernetes-int-or-string")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            list_type: obj
                .get("x-kubernetes-list-type")
                .and_then(Value::as_str)
                .map(str::to_string),
            list_map_keys: obj
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
            ..Schema::default()
        };
        if let Some(e) = obj.get("enum") {
            match e {
                Value::Array(a) => s.enum_ = Some(a.clone()),
                _ => return Err(format!("{path}.enum: must be an array")),
            }
        }
        if let Some(p) = obj.get("pattern").and_then(Value::as_str) {
            let re = Regex::new(p).map_err(|e| format!("{path}.pattern: invalid regex: {e}"))?;
            s.pattern = Some((p.to_string(), re));
        }
        if let Some(r) = obj.get("required") {
            s.required = r
                .as_array()
                .ok_or_else(|| format!("{path}.required: must be an array"))?
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect();
        }
        if let Some(props) = obj.get("properties") {
            let props = props
                .as_object()
                .ok_or_else(|| format!("{path}.properties: must be an object"))?;
            for (k, v) in props {
                s.properties.insert(
                    k.clone(),
                    Self::parse_at(v, &format!("{path}.properties[{k}]"))?,
                );
            }
        }
        match obj.get("additionalProperties") {
            Some(Value::Bool(b)) => {
                s.additional_properties = Some(AdditionalProperties::Allowed(*b))
            }
            Some(v @ Value::Object(_)) => {
                s.additional_properties = Some(AdditionalProperties::Schema(Box::new(
                    Self::parse_at(v, &format!("{path}.additionalProperties"))?,
                )))
            }
            Some(_) => {
                return Err(format!(
                    "{path}.additionalProperties: must be a bool or an object"
                ));
            }
            None => {}
        }
        if let Some(items) = obj.get("items") {
            s.items = Some(Box::new(Self::parse_at(items, &format!("{path}.items"))?));
        }
        for (key, target) in [
            ("allOf", &mut s.all_of),
            ("anyOf", &mut s.any_of),
            ("oneOf", &mut s.one_of),
        ] {
            if let Some(list) = obj.get(key) {
                let list = list
                    .as_array()
                    .ok_or_else(|| format!("{path}.{key}: must be an array"))?;
                for (i, item) in list.iter().enumerate() {
                    target.push(Self::parse_at(item, &format!("{path}.{key}[{i}]"))?);
                }
            }
        }
        if let Some(n) = obj.get("not") {
            s.not = Some(Box::new(Self::parse_at(n, &format!("{path}.not"))?));
        }
        if let Some(rules) = obj.get("x-kubernetes-validations") {
            let rules = rules
                .as_array()
                .ok_or_else(|| format!("{path}.x-kubernetes-validations: must be an array"))?;
            for (i, r) in rules.iter().enumerate() {
                let rule = r.get("rule").and_then(Value::as_str).ok_or_else(|| {
                    format!("{path}.x-kubernetes-validations[{i}].rule: Required value")
                })?;
                s.validations.push(CelRule {
                    rule: rule.to_string(),
                    message: r.get("message").and_then(Value::as_str).map(str::to_string),
                    field_path: r
                        .get("fieldPath")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    reason: r.get("reason").and_then(Value::as_str).map(str::to_string),
                });
            }
        }
        if s.pattern.is_some() || s.min_length.is_some() || s.max_length.is_some() {
            // nothing extra to check: kept for symmetry with the real schema validation
        }
        Ok(s)
    }

    /// Whether unknown object fields under this node are kept.
    fn keeps_unknown(&self) -> bool {
        self.preserve_unknown_fields
            || matches!(
                self.additional_properties,
                Some(AdditionalProperties::Allowed(true))
            )
    }
}

/// Fields of `ObjectMeta` kept when pruning `metadata` (everything else is dropped,
/// as the real server's decoder does).
pub const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

fn child_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn index_path(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// Drop fields not declared in `schema` (unless preserved); pushes the dropped paths.
///
/// `root` marks the top of a resource (or an embedded resource), where
/// `apiVersion`, `kind` and `metadata` are always kept.
pub fn prune(value: &mut Value, schema: &Schema, path: &str, root: bool, pruned: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                let p = child_path(path, &k);
                if root || schema.embedded_resource {
                    if k == "apiVersion" || k == "kind" {
                        continue;
                    }
                    if k == "metadata" {
                        if let Some(Value::Object(meta)) = map.get_mut("metadata") {
                            let mkeys: Vec<String> = meta.keys().cloned().collect();
                            for mk in mkeys {
                                if !OBJECT_META_FIELDS.contains(&mk.as_str()) {
                                    meta.remove(&mk);
                                    pruned.push(child_path(&p, &mk));
                                }
                            }
                        }
                        continue;
                    }
                }
                if let Some(ps) = schema.properties.get(&k) {
                    if let Some(v) = map.get_mut(&k) {
                        prune(v, ps, &p, false, pruned);
                    }
                } else if let Some(AdditionalProperties::Schema(ap)) = &schema.additional_properties
                {
                    if let Some(v) = map.get_mut(&k) {
                        prune(v, ap, &p, false, pruned);
                    }
                } else if !schema.keeps_unknown() {
                    map.remove(&k);
                    pruned.push(p);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = &schema.items {
                for (i, v) in items.iter_mut().enumerate() {
                    prune(v, is, &index_path(path, i), false, pruned);
                }
            }
        }
        _ => {}
    }
}

/// Apply `default`s: a missing (or non-nullable null) property gets its default,
/// then defaulting recurses, so nested defaults apply only where the parent exists.
pub fn apply_defaults(value: &mut Value, schema: &Schema, root: bool) {
    match value {
        Value::Object(map) => {
            for (k, ps) in &schema.properties {
                if root && (k == "metadata" || k == "apiVersion" || k == "kind") {
                    continue;
                }
                let Some(d) = &ps.default else { continue };
                let missing = match map.get(k) {
                    None => true,
                    Some(Value::Null) => !ps.nullable,
                    Some(_) => false,
                };
                if missing {
                    map.insert(k.clone(), d.clone());
                }
            }
            for (k, v) in map.iter_mut() {
                if root && (k == "metadata" || k == "apiVersion" || k == "kind") {
                    continue;
                }
                if let Some(ps) = schema.properties.get(k) {
                    apply_defaults(v, ps, false);
                } else if let Some(AdditionalProperties::Schema(ap)) = &schema.additional_properties
                {
                    apply_defaults(v, ap, false);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = &schema.items {
                for v in items.iter_mut() {
                    apply_defaults(v, is, false);
                }
            }
        }
        _ => {}
    }
}

/// A value rendered the way the apiserver prints it in error messages.
pub fn render(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Null => "\"null\"".to_string(),
        Value::Object(_) => "\"object\"".to_string(),
        Value::Array(_) => "\"array\"".to_string(),
        other => other.to_string(),
    }
}

fn json_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) => {
            if n.is_i64() || n.is_u64() {
                "integer"
            } else {
                "number"
            }
        }
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn is_integer(v: &Value) -> bool {
    match v {
        Value::Number(n) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => false,
    }
}

fn type_matches(ty: &str, v: &Value) -> bool {
    match ty {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => is_integer(v),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        _ => true,
    }
}

fn invalid(path: &str, v: &Value, msg: String) -> Cause {
    Cause::new(
        "FieldValueInvalid",
        path,
        format!("Invalid value: {}: {msg}", render(v)),
    )
}

/// Validate `value` against `schema`, pushing one cause per failed constraint.
pub fn validate(value: &Value, schema: &Schema, path: &str, root: bool, causes: &mut Vec<Cause>) {
    let shown = if path.is_empty() { "<root>" } else { path };
    if value.is_null() {
        if schema.nullable || schema.type_.is_none() && !schema.int_or_string {
            return;
        }
        let ty = schema.type_.as_deref().unwrap_or("string");
        causes.push(Cause::new(
            "FieldValueTypeInvalid",
            path,
            format!("Invalid value: \"null\": {shown} in body must be of type {ty}: \"null\""),
        ));
        return;
    }
    if schema.int_or_string {
        if !(is_integer(value) || value.is_string()) {
            causes.push(Cause::new(
                "FieldValueTypeInvalid",
                path,
                format!(
                    "Invalid value: {}: {shown} in body must be of type integer,string: {:?}",
                    render(value),
                    json_type_name(value)
                ),
            ));
            return;
        }
    } else if let Some(ty) = &schema.type_
        && !type_matches(ty, value)
    {
        causes.push(Cause::new(
            "FieldValueTypeInvalid",
            path,
            format!(
                "Invalid value: {}: {shown} in body must be of type {ty}: {:?}",
                render(value),
                json_type_name(value)
            ),
        ));
        // further checks would only produce noise on a value of the wrong type
        return;
    }
    if let Some(allowed) = &schema.enum_
        && !allowed.iter().any(|a| a == value)
    {
        let list: Vec<String> = allowed.iter().map(render).collect();
        causes.push(Cause::new(
            "FieldValueNotSupported",
            path,
            format!(
                "Unsupported value: {}: supported values: {}",
                render(value),
                list.join(", ")
            ),
        ));
    }
    match value {
        Value::Number(n) => {
            let f = n.as_f64().unwrap_or(0.0);
            if let Some(min) = schema.minimum {
                if schema.exclusive_minimum && f <= min {
                    causes.push(invalid(
                        path,
                        value,
                        format!("{shown} in body should be greater than {min}"),
                    ));
                } else if f < min {
                    causes.push(invalid(
                        path,
                        value,
                        format!("{shown} in body should be greater than or equal to {min}"),
                    ));
                }
            }
            if let Some(max) = schema.maximum {
                if schema.exclusive_maximum && f >= max {
                    causes.push(invalid(
                        path,
                        value,
                        format!("{shown} in body should be less than {max}"),
                    ));
                } else if f > max {
                    causes.push(invalid(
                        path,
                        value,
                        format!("{shown} in body should be less than or equal to {max}"),
                    ));
                }
            }
            if let Some(m) = schema.multiple_of
                && m != 0.0
                && (f / m).fract().abs() > 1e-9
            {
                causes.push(invalid(
                    path,
                    value,
                    format!("{shown} in body should be a multiple of {m}"),
                ));
            }
        }
        Value::String(s) => {
            let len = s.chars().count() as u64;
            if let Some(min) = schema.min_length
                && len < min
            {
                causes.push(invalid(
                    path,
                    value,
                    format!("{shown} in body should be at least {min} chars long"),
                ));
            }
            if let Some(max) = schema.max_length
                && len > max
            {
                causes.push(Cause::new(
                    "FieldValueTooLong",
                    path,
                    format!("Too long: may not be more than {max} bytes"),
                ));
            }
            if let Some((src, re)) = &schema.pattern
                && !re.is_match(s)
            {
                causes.push(invalid(
                    path,
                    value,
                    format!("{shown} in body should match '{src}'"),
                ));
            }
            if let Some(fmt) = &schema.format
                && !format_ok(fmt, s)
            {
                causes.push(invalid(
                    path,
                    value,
                    format!("{shown} in body must be of type {fmt}: {s:?}"),
                ));
            }
        }
        Value::Array(items) => {
            let n = items.len() as u64;
            if let Some(min) = schema.min_items
                && n < min
            {
                causes.push(invalid(
                    path,
                    value,
                    format!("{shown} in body should have at least {min} items"),
                ));
            }
            if let Some(max) = schema.max_items
                && n > max
            {
                causes.push(Cause::new(
                    "FieldValueTooMany",
                    path,
                    format!("Too many: {n}: must have at most {max} items"),
                ));
            }
            if schema.unique_items || schema.list_type.as_deref() == Some("set") {
                for (i, it) in items.iter().enumerate() {
                    if items[..i].contains(it) {
                        causes.push(Cause::new(
                            "FieldValueDuplicate",
                            index_path(path, i),
                            format!("Duplicate value: {}", render(it)),
                        ));
                    }
                }
            }
            if schema.list_type.as_deref() == Some("map") && !schema.list_map_keys.is_empty() {
                let mut seen: Vec<Vec<Value>> = Vec::new();
                for (i, it) in items.iter().enumerate() {
                    let key: Vec<Value> = schema
                        .list_map_keys
                        .iter()
                        .map(|k| it.get(k).cloned().unwrap_or(Value::Null))
                        .collect();
                    if seen.contains(&key) {
                        let shown_key: Map<String, Value> = schema
                            .list_map_keys
                            .iter()
                            .cloned()
                            .zip(key.iter().cloned())
                            .collect();
                        causes.push(Cause::new(
                            "FieldValueDuplicate",
                            index_path(path, i),
                            format!("Duplicate value: {}", Value::Object(shown_key)),
                        ));
                    } else {
                        seen.push(key);
                    }
                }
            }
            if let Some(is) = &schema.items {
                for (i, it) in items.iter().enumerate() {
                    validate(it, is, &index_path(path, i), false, causes);
                }
            }
        }
        Value::Object(map) => {
            for r in &schema.required {
                if !map.contains_key(r) {
                    causes.push(Cause::new(
                        "FieldValueRequired",
                        child_path(path, r),
                        "Required value",
                    ));
                }
            }
            let n = map.len() as u64;
            if let Some(min) = schema.min_properties
                && n < min
            {
                causes.push(invalid(
                    path,
                    value,
                    format!("{shown} in body should have at least {min} properties"),
                ));
            }
            if let Some(max) = schema.max_properties
                && n > max
            {
                causes.push(invalid(
                    path,
                    value,
                    format!("{shown} in body should have at most {max} properties"),
                ));
            }
            for (k, v) in map {
                if (root || schema.embedded_resource)
                    && (k == "metadata" || k == "apiVersion" || k == "kind")
                {
                    continue;
                }
                let p = child_path(path, k);
                if let Some(ps) = schema.properties.get(k) {
                    validate(v, ps, &p, false, causes);
                } else if let Some(AdditionalProperties::Schema(ap)) = &schema.additional_properties
                {
                    validate(v, ap, &p, false, causes);
                }
            }
        }
        Value::Bool(_) | Value::Null => {}
    }
    // Combinators carry value validations only (structural schemas forbid types there).
    for sub in &schema.all_of {
        validate(value, sub, path, root, causes);
    }
    if !schema.any_of.is_empty() {
        let ok = schema.any_of.iter().any(|sub| {
            let mut c = Vec::new();
            validate(value, sub, path, root, &mut c);
            c.is_empty()
        });
        if !ok {
            causes.push(invalid(
                path,
                value,
                format!("{shown} in body must validate at least one schema (anyOf)"),
            ));
        }
    }
    if !schema.one_of.is_empty() {
        let matching = schema
            .one_of
            .iter()
            .filter(|sub| {
                let mut c = Vec::new();
                validate(value, sub, path, root, &mut c);
                c.is_empty()
            })
            .count();
        if matching != 1 {
            causes.push(invalid(
                path,
                value,
                format!("{shown} in body must validate one and only one schema (oneOf)"),
            ));
        }
    }
    if let Some(not) = &schema.not {
        let mut c = Vec::new();
        validate(value, not, path, root, &mut c);
        if c.is_empty() {
            causes.push(invalid(
                path,
                value,
                format!("{shown} in body must not validate the schema (not)"),
            ));
        }
    }
}

/// Check the few string formats whose violations are cheap to detect.
fn format_ok(fmt: &str, s: &str) -> bool {
    match fmt {
        "date-time" => s.parse::<jiff::Timestamp>().is_ok(),
        "date" => s.parse::<jiff::civil::Date>().is_ok(),
        "uuid" => uuid::Uuid::parse_str(s).is_ok(),
        "byte" => crate::util::base64_decode(s).is_some(),
        // other formats (int32, hostname, ...) are not enforced; see the README
        _ => true,
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
                "spec": {
                    "type": "object",
                    "required": ["size"],
                    "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 10},
                        "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                        "inner": {"type": "object", "properties": {"x": {"type": "string", "default": "dx"}}},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "tags": {"type": "object", "additionalProperties": {"type": "string"}},
                    }
                }
            }
        }))
        .unwrap()
    }

    #[test]
    fn prunes_defaults_and_validates() {
        let s = schema();
        let mut v = json!({"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "n", "bogus": 1},
            "spec": {"size": 0, "junk": true, "free": {"a": 1}, "tags": {"a": "b"}}, "extra": 1});
        let mut pruned = Vec::new();
        prune(&mut v, &s, "", true, &mut pruned);
        assert_eq!(pruned, vec!["extra", "metadata.bogus", "spec.junk"]);
        apply_defaults(&mut v, &s, true);
        assert_eq!(v["spec"]["color"], "red");
        assert!(
            v["spec"].get("inner").is_none(),
            "nested default needs parent"
        );
        let mut causes = Vec::new();
        validate(&v, &s, "", true, &mut causes);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.size");
    }
}
