//! Label and field selectors (`?labelSelector=`, `?fieldSelector=`).

use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::util::{lookup_path, meta};

/// One label requirement.
#[derive(Debug, Clone, PartialEq)]
pub enum LabelReq {
    /// `key=value` / `key==value`.
    Eq(String, String),
    /// `key!=value` (also matches objects without the key, like the real server).
    NotEq(String, String),
    /// `key in (a,b)`.
    In(String, Vec<String>),
    /// `key notin (a,b)` (also matches objects without the key).
    NotIn(String, Vec<String>),
    /// `key`.
    Exists(String),
    /// `!key`.
    NotExists(String),
    /// `key>N`.
    Gt(String, i64),
    /// `key<N`.
    Lt(String, i64),
}

/// A parsed label selector: all requirements must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(pub Vec<LabelReq>);

/// Split on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn bad(sel: &str, why: &str) -> ApiError {
    ApiError::bad_request(format!(
        "unable to parse requirement: {why} (selector {sel:?})"
    ))
}

fn parse_set(sel: &str, rest: &str) -> ApiResult<Vec<String>> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| bad(sel, "expected a parenthesised set of values"))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parse the string form of a label selector.
    pub fn parse(sel: &str) -> ApiResult<Self> {
        let mut reqs = Vec::new();
        for part in split_top(sel) {
            let p = part.trim();
            if p.is_empty() {
                continue;
            }
            if let Some(k) = p.strip_prefix('!') {
                reqs.push(LabelReq::NotExists(k.trim().to_string()));
            } else if let Some((k, v)) = p.split_once("!=") {
                reqs.push(LabelReq::NotEq(k.trim().to_string(), v.trim().to_string()));
            } else if let Some((k, v)) = p.split_once("==") {
                reqs.push(LabelReq::Eq(k.trim().to_string(), v.trim().to_string()));
            } else if let Some((k, v)) = p.split_once('=') {
                reqs.push(LabelReq::Eq(k.trim().to_string(), v.trim().to_string()));
            } else if let Some(idx) = p.find(" notin ") {
                let (k, rest) = p.split_at(idx);
                reqs.push(LabelReq::NotIn(
                    k.trim().to_string(),
                    parse_set(sel, &rest[" notin ".len()..])?,
                ));
            } else if let Some(idx) = p.find(" in ") {
                let (k, rest) = p.split_at(idx);
                reqs.push(LabelReq::In(
                    k.trim().to_string(),
                    parse_set(sel, &rest[" in ".len()..])?,
                ));
            } else if let Some((k, v)) = p.split_once('>') {
                let n = v
                    .trim()
                    .parse()
                    .map_err(|_| bad(sel, "expected an integer after '>'"))?;
                reqs.push(LabelReq::Gt(k.trim().to_string(), n));
            } else if let Some((k, v)) = p.split_once('<') {
                let n = v
                    .trim()
                    .parse()
                    .map_err(|_| bad(sel, "expected an integer after '<'"))?;
                reqs.push(LabelReq::Lt(k.trim().to_string(), n));
            } else {
                if p.contains(' ') || p.contains('(') {
                    return Err(bad(sel, "found unexpected token"));
                }
                reqs.push(LabelReq::Exists(p.to_string()));
            }
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether an object's labels satisfy the selector.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = meta(obj)
            .and_then(|m| m.get("labels"))
            .and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
            LabelReq::Gt(k, n) => get(k)
                .and_then(|x| x.parse::<i64>().ok())
                .is_some_and(|x| x > *n),
            LabelReq::Lt(k, n) => get(k)
                .and_then(|x| x.parse::<i64>().ok())
                .is_some_and(|x| x < *n),
        })
    }
}

/// One field requirement (`path=value` or `path!=value`).
#[derive(Debug, Clone, PartialEq)]
pub struct FieldReq {
    /// Dotted field path, e.g. `metadata.name`.
    pub path: String,
    /// Expected value.
    pub value: String,
    /// `!=` instead of `=`.
    pub negated: bool,
}

/// A parsed field selector.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(pub Vec<FieldReq>);

impl FieldSelector {
    /// Parse a field selector and reject fields the resource does not support (400, like the real server).
    pub fn parse(sel: &str, supported: &[String]) -> ApiResult<Self> {
        let mut reqs = Vec::new();
        for part in sel.split(',') {
            let p = part.trim();
            if p.is_empty() {
                continue;
            }
            let (path, value, negated) = if let Some((k, v)) = p.split_once("!=") {
                (k, v, true)
            } else if let Some((k, v)) = p.split_once("==") {
                (k, v, false)
            } else if let Some((k, v)) = p.split_once('=') {
                (k, v, false)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{sel}'; can't understand '{p}'"
                )));
            };
            let path = path.trim().to_string();
            if !supported.contains(&path) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {path}"
                )));
            }
            reqs.push(FieldReq {
                path,
                value: value.trim().to_string(),
                negated,
            });
        }
        Ok(FieldSelector(reqs))
    }

    /// Whether the object's fields satisfy all requirements (missing fields compare as "").
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|r| {
            let actual = match lookup_path(obj, &r.path) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (actual == r.value) != r.negated
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_forms() {
        let o = json!({"metadata": {"labels": {"a": "1", "b": "x"}}});
        for (s, want) in [
            ("a=1", true),
            ("a==1", true),
            ("a!=1", false),
            ("c!=1", true),
            ("b in (x,y)", true),
            ("b notin (x,y)", false),
            ("c notin (x)", true),
            ("a", true),
            ("!a", false),
            ("!c", true),
            ("a=1,b in (y)", false),
            ("a>0", true),
            ("a<1", false),
        ] {
            assert_eq!(LabelSelector::parse(s).unwrap().matches(&o), want, "{s}");
        }
    }

    #[test]
    fn field_selector() {
        let sup = vec!["metadata.name".to_string()];
        let o = json!({"metadata": {"name": "n"}});
        assert!(
            FieldSelector::parse("metadata.name=n", &sup)
                .unwrap()
                .matches(&o)
        );
        assert!(
            !FieldSelector::parse("metadata.name!=n", &sup)
                .unwrap()
                .matches(&o)
        );
        assert_eq!(
            FieldSelector::parse("spec.x=1", &sup).unwrap_err().code,
            400
        );
    }
}
