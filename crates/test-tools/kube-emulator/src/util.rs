//! Small helpers: timestamps, base64, name and label validation, JSON access.

use serde_json::{Map, Value};

use crate::error::Cause;

/// Current time as an RFC 3339 string with second precision (`metav1.Time`).
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Current time with microseconds (`metav1.MicroTime`).
pub fn now_micro() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (Secret `stringData` -> `data`).
pub fn base64_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        out.push(B64[(n >> 18) as usize & 63] as char);
        out.push(B64[(n >> 12) as usize & 63] as char);
        out.push(if chunk.len() > 1 {
            B64[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if chunk.len() > 2 {
            B64[n as usize & 63] as char
        } else {
            '='
        });
    }
    out
}

/// Decode standard base64 (padding optional); `None` if malformed.
pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let s = s.trim_end_matches('=');
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for c in s.bytes() {
        let v = B64.iter().position(|&x| x == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// Random lowercase alphanumeric suffix for `generateName` (5 chars, like the real server).
pub fn random_suffix() -> String {
    // consonants and digits only, as the real name generator avoids vowels (no accidental words)
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let bytes = uuid::Uuid::new_v4().into_bytes();
    bytes[..5]
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain check used for most object names.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// Validate an object name; `label_only` for kinds that require an RFC 1123 label (Namespace).
pub fn validate_name(name: &str, label_only: bool) -> Option<Cause> {
    let ok = if label_only {
        is_dns_label(name)
    } else {
        is_dns_subdomain(name)
    };
    if ok {
        return None;
    }
    let msg = if label_only {
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
    } else {
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    };
    Some(Cause::new(
        "FieldValueInvalid",
        "metadata.name",
        format!("Invalid value: {name:?}: {msg}"),
    ))
}

fn is_label_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()
}

/// Qualified name (`prefix/name`) as used for label and annotation keys.
pub fn is_qualified_name(key: &str) -> bool {
    match key.split_once('/') {
        Some((prefix, name)) => is_dns_subdomain(prefix) && is_label_name(name),
        None => is_label_name(key),
    }
}

/// Validate `metadata.labels` and `metadata.annotations` keys/values like the real server.
pub fn validate_labels_and_annotations(meta: &Map<String, Value>, causes: &mut Vec<Cause>) {
    if let Some(labels) = meta.get("labels") {
        match labels {
            Value::Object(l) => {
                for (k, v) in l {
                    if !is_qualified_name(k) {
                        causes.push(Cause::new(
                            "FieldValueInvalid",
                            "metadata.labels",
                            format!("Invalid value: {k:?}: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"),
                        ));
                    }
                    match v {
                        Value::String(s) if s.is_empty() || is_label_name(s) => {}
                        Value::Null => {}
                        other => causes.push(Cause::new(
                            "FieldValueInvalid",
                            "metadata.labels",
                            format!("Invalid value: {other}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"),
                        )),
                    }
                }
            }
            Value::Null => {}
            _ => causes.push(Cause::new(
                "FieldValueTypeInvalid",
                "metadata.labels",
                "Invalid value: must be a map of strings",
            )),
        }
    }
    if let Some(ann) = meta.get("annotations") {
        match ann {
            Value::Object(a) => {
                for (k, v) in a {
                    if !is_qualified_name(&k.to_lowercase()) {
                        causes.push(Cause::new(
                            "FieldValueInvalid",
                            "metadata.annotations",
                            format!("Invalid value: {k:?}: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"),
                        ));
                    }
                    if !(v.is_string() || v.is_null()) {
                        causes.push(Cause::new(
                            "FieldValueTypeInvalid",
                            format!("metadata.annotations[{k}]"),
                            "Invalid value: annotation values must be strings",
                        ));
                    }
                }
            }
            Value::Null => {}
            _ => causes.push(Cause::new(
                "FieldValueTypeInvalid",
                "metadata.annotations",
                "Invalid value: must be a map of strings",
            )),
        }
    }
}

/// `obj.metadata` as a map, if present.
pub fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

/// `obj.metadata`, created if missing (and replaced if it is not an object).
pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let map = match obj {
        Value::Object(m) => m,
        _ => unreachable!("just made an object"),
    };
    let entry = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    match entry {
        Value::Object(m) => m,
        _ => unreachable!("just made an object"),
    }
}

/// A string field of `metadata`, or "".
pub fn meta_str<'a>(obj: &'a Value, key: &str) -> &'a str {
    meta(obj)
        .and_then(|m| m.get(key))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// `metadata.finalizers` as strings.
pub fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Look up a dotted path (`spec.nodeName`) in an object.
pub fn lookup_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .filter(|p| !p.is_empty())
        .try_fold(obj, |cur, key| cur.get(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_roundtrip() {
        for s in ["", "a", "ab", "abc", "abcd", "hello world"] {
            let e = base64_encode(s.as_bytes());
            assert_eq!(base64_decode(&e).unwrap(), s.as_bytes());
        }
        assert_eq!(base64_encode(b"hello"), "aGVsbG8=");
    }

    #[test]
    fn names() {
        assert!(validate_name("ok-name.x", false).is_none());
        assert!(validate_name("Bad", false).is_some());
        assert!(validate_name("a.b", true).is_some());
        assert!(is_qualified_name("app.kubernetes.io/name"));
        assert!(!is_qualified_name("-x"));
    }
}
