//! PATCH support: JSON merge patch (RFC 7386), JSON patch (RFC 6902),
//! strategic merge patch (approximated by merge patch) and server-side apply
//! with simplified `managedFields` tracking.
//!
//! Server-side apply model (documented in the README): every field path owned
//! by a manager is a *leaf* path (lists are atomic, i.e. owned as a whole).
//! Apply merges the applied configuration into the live object, removes fields
//! the same manager applied before but no longer applies (unless another
//! manager also owns them), and reports a 409 conflict when another manager
//! owns a field the configuration sets to a different value, unless `force`.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::error::{ApiError, ApiResult, Cause};
use crate::util::now_rfc3339;

/// The patch flavours selected by `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json`.
    Merge,
    /// `application/json-patch+json`.
    Json,
    /// `application/strategic-merge-patch+json` (treated as a merge patch).
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

impl PatchKind {
    /// Map a Content-Type (parameters ignored) to a patch kind.
    pub fn from_content_type(ct: &str) -> Option<Self> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/merge-patch+json" => Some(Self::Merge),
            "application/json-patch+json" => Some(Self::Json),
            "application/strategic-merge-patch+json" => Some(Self::Strategic),
            "application/apply-patch+yaml"
            | "application/apply-patch+json"
            | "application/apply-patch+cbor" => Some(Self::Apply),
            _ => None,
        }
    }
}

/// RFC 7386 merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// Drop strategic-merge-patch directives (`$patch`, `$setElementOrder/...`,
/// `$retainKeys`, `$deleteFromPrimitiveList/...`) so the rest can be merged.
///
/// A map carrying `$patch: replace` replaces the target map and `$patch: delete`
/// removes it; list merge keys are not known here, so lists are replaced whole.
pub fn strategic_merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            match p.get("$patch").and_then(Value::as_str) {
                Some("replace") => {
                    let mut clean = patch.clone();
                    strip_directives(&mut clean);
                    *target = clean;
                    return;
                }
                Some("delete") => {
                    *target = Value::Null;
                    return;
                }
                _ => {}
            }
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            if let Value::Object(t) = target {
                for (k, v) in p {
                    if k.starts_with('$') {
                        continue;
                    }
                    if v.is_null() {
                        t.remove(k);
                        continue;
                    }
                    if v.get("$patch").and_then(Value::as_str) == Some("delete") {
                        t.remove(k);
                        continue;
                    }
                    let entry = t.entry(k.clone()).or_insert(Value::Null);
                    strategic_merge_patch(entry, v);
                }
            }
        }
        other => {
            let mut clean = other.clone();
            strip_directives(&mut clean);
            *target = clean;
        }
    }
}

fn strip_directives(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, _| !k.starts_with('$'));
            for x in m.values_mut() {
                strip_directives(x);
            }
        }
        Value::Array(a) => {
            for x in a.iter_mut() {
                strip_directives(x);
            }
        }
        _ => {}
    }
}

/// RFC 6902 JSON patch; a malformed patch is 400, a failed operation (e.g. `test`) is 422.
///
/// Like the real server (evanphx/json-patch), a `test` for `null` succeeds when
/// the path does not exist; kube-runtime's finalizer helper relies on that.
/// The patch is atomic: on any failure `target` is left untouched.
pub fn json_patch(target: &mut Value, patch: &Value) -> ApiResult<()> {
    let ops: json_patch::Patch = serde_json::from_value(patch.clone())
        .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
    let mut doc = target.clone();
    for op in &ops.0 {
        if let json_patch::PatchOperation::Test(t) = op
            && t.value.is_null()
            && doc.pointer(t.path.as_str()).is_none_or(Value::is_null)
        {
            continue;
        }
        json_patch::patch(&mut doc, std::slice::from_ref(op))
            .map_err(|e| ApiError::unprocessable(e.to_string()))?;
    }
    *target = doc;
    Ok(())
}

/// A leaf field path (object keys only; lists are atomic leaves).
pub type FieldPath = Vec<String>;

/// Metadata fields that participate in field ownership.
const OWNED_META: &[&str] = &["labels", "annotations", "finalizers", "ownerReferences"];

/// Leaf paths set by `obj`, restricted to what ownership tracks.
///
/// `scope` selects the status subresource (`Some(true)`: only `status`),
/// the main resource of a kind with a status subresource (`Some(false)`: no
/// `status`), or everything (`None`).
pub fn field_paths(obj: &Value, scope: Option<bool>) -> BTreeSet<FieldPath> {
    let mut out = BTreeSet::new();
    let Some(map) = obj.as_object() else {
        return out;
    };
    for (k, v) in map {
        match k.as_str() {
            "apiVersion" | "kind" => {}
            "metadata" => {
                if scope == Some(true) {
                    continue;
                }
                if let Some(m) = v.as_object() {
                    for f in OWNED_META {
                        if let Some(x) = m.get(*f) {
                            collect(x, vec!["metadata".into(), (*f).to_string()], &mut out);
                        }
                    }
                }
            }
            "status" if scope == Some(false) => {}
            _ if scope == Some(true) && k != "status" => {}
            _ => collect(v, vec![k.clone()], &mut out),
        }
    }
    out
}

fn collect(v: &Value, path: FieldPath, out: &mut BTreeSet<FieldPath>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, x) in m {
                let mut p = path.clone();
                p.push(k.clone());
                collect(x, p, out);
            }
        }
        _ => {
            out.insert(path);
        }
    }
}

fn get_path<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, k| cur.get(k))
}

fn remove_path(v: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for k in parents {
        match cur.get_mut(k) {
            Some(x) => cur = x,
            None => return,
        }
    }
    if let Value::Object(m) = cur {
        m.remove(last);
    }
}

/// Remove empty maps left behind after removing fields (but never top-level keys).
fn prune_empty(v: &mut Value, depth: usize) {
    if let Value::Object(m) = v {
        for x in m.values_mut() {
            prune_empty(x, depth + 1);
        }
        if depth >= 1 {
            m.retain(|_, x| !matches!(x, Value::Object(o) if o.is_empty()));
        }
    }
}

fn to_fields_v1(paths: &BTreeSet<FieldPath>) -> Value {
    let mut root = Map::new();
    for p in paths {
        let mut cur = &mut root;
        for k in p {
            let entry = cur
                .entry(format!("f:{k}"))
                .or_insert_with(|| Value::Object(Map::new()));
            if !entry.is_object() {
                *entry = Value::Object(Map::new());
            }
            cur = match entry {
                Value::Object(m) => m,
                _ => unreachable!("just made an object"),
            };
        }
    }
    Value::Object(root)
}

fn from_fields_v1(v: &Value, prefix: FieldPath, out: &mut BTreeSet<FieldPath>) {
    let Some(m) = v.as_object() else { return };
    let children: Vec<(&String, &Value)> = m.iter().filter(|(k, _)| k.starts_with("f:")).collect();
    if children.is_empty() {
        if !prefix.is_empty() {
            out.insert(prefix);
        }
        return;
    }
    for (k, x) in children {
        let mut p = prefix.clone();
        p.push(k[2..].to_string());
        from_fields_v1(x, p, out);
    }
}

/// One decoded `managedFields` entry.
#[derive(Debug, Clone)]
pub struct ManagedEntry {
    /// Manager name.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// API version the fields refer to.
    pub api_version: String,
    /// Last change time.
    pub time: String,
    /// `status` or "".
    pub subresource: String,
    /// Owned leaf paths.
    pub fields: BTreeSet<FieldPath>,
}

/// Decode `metadata.managedFields`.
pub fn decode_managed(obj: &Value) -> Vec<ManagedEntry> {
    let Some(list) = obj
        .get("metadata")
        .and_then(|m| m.get("managedFields"))
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    list.iter()
        .map(|e| {
            let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            let mut fields = BTreeSet::new();
            if let Some(f) = e.get("fieldsV1") {
                from_fields_v1(f, Vec::new(), &mut fields);
            }
            ManagedEntry {
                manager: s("manager"),
                operation: s("operation"),
                api_version: s("apiVersion"),
                time: s("time"),
                subresource: s("subresource"),
                fields,
            }
        })
        .collect()
}

/// Encode entries into `metadata.managedFields` (entries owning nothing are dropped).
pub fn encode_managed(obj: &mut Value, entries: &[ManagedEntry]) {
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": to_fields_v1(&e.fields),
            });
            if !e.subresource.is_empty() {
                v["subresource"] = json!(e.subresource);
            }
            v
        })
        .collect();
    let meta = crate::util::meta_mut(obj);
    if list.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(list));
    }
}

fn overlaps(a: &FieldPath, b: &FieldPath) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

fn dotted(p: &FieldPath) -> String {
    format!(".{}", p.join("."))
}

/// Inputs of a field-ownership update.
pub struct Ownership<'a> {
    /// Manager name.
    pub manager: &'a str,
    /// `"status"` or "".
    pub subresource: &'a str,
    /// apiVersion to record.
    pub api_version: String,
    /// Field scope, see [`field_paths`].
    pub scope: Option<bool>,
}

/// Record an `Update` by `own.manager`: it takes every changed or added leaf.
pub fn track_update(old: Option<&Value>, new: &mut Value, own: &Ownership<'_>) {
    let mut entries = old.map(decode_managed).unwrap_or_default();
    let new_fields = field_paths(new, own.scope);
    let old_fields = old.map(|o| field_paths(o, own.scope)).unwrap_or_default();
    let changed: BTreeSet<FieldPath> = new_fields
        .iter()
        .filter(|p| {
            old.is_none_or(|o| get_path(o, p) != get_path(new, p)) || !old_fields.contains(*p)
        })
        .cloned()
        .collect();
    // fields that disappeared are owned by nobody any more
    for e in entries.iter_mut() {
        if e.subresource == own.subresource || own.scope.is_none() {
            e.fields
                .retain(|p| new_fields.iter().any(|n| overlaps(n, p)) || !in_scope(p, own.scope));
        }
        e.fields.retain(|p| !changed.iter().any(|c| overlaps(c, p)));
    }
    if !changed.is_empty() {
        let now = now_rfc3339();
        match entries.iter_mut().find(|e| {
            e.manager == own.manager && e.operation == "Update" && e.subresource == own.subresource
        }) {
            Some(e) => {
                e.fields.extend(changed);
                e.time = now;
                e.api_version = own.api_version.clone();
            }
            None => entries.push(ManagedEntry {
                manager: own.manager.to_string(),
                operation: "Update".into(),
                api_version: own.api_version.clone(),
                time: now,
                subresource: own.subresource.to_string(),
                fields: changed,
            }),
        }
    }
    encode_managed(new, &entries);
}

fn in_scope(p: &FieldPath, scope: Option<bool>) -> bool {
    let is_status = p.first().is_some_and(|k| k == "status");
    match scope {
        None => true,
        Some(true) => is_status,
        Some(false) => !is_status,
    }
}

/// Server-side apply of `applied` onto `live` (or onto nothing, for a create).
///
/// Returns the merged object with updated `managedFields`, or 409 on conflicts without `force`.
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    own: &Ownership<'_>,
    force: bool,
) -> ApiResult<Value> {
    let mut applied = applied.clone();
    if let Value::Object(m) = &mut applied {
        match own.scope {
            Some(false) => {
                m.remove("status");
            }
            Some(true) => {
                m.retain(|k, _| {
                    k == "status" || k == "apiVersion" || k == "kind" || k == "metadata"
                });
            }
            None => {}
        }
    }
    let applied_fields = field_paths(&applied, own.scope);
    let now = now_rfc3339();
    let Some(live) = live else {
        let mut obj = applied;
        let entry = ManagedEntry {
            manager: own.manager.to_string(),
            operation: "Apply".into(),
            api_version: own.api_version.clone(),
            time: now,
            subresource: own.subresource.to_string(),
            fields: applied_fields,
        };
        encode_managed(&mut obj, &[entry]);
        return Ok(obj);
    };
    let mut entries = decode_managed(live);
    let is_me = |e: &ManagedEntry| {
        e.manager == own.manager && e.operation == "Apply" && e.subresource == own.subresource
    };
    // conflicts: another manager owns a field we set to a different value
    let mut conflicts: Vec<(String, FieldPath)> = Vec::new();
    for e in entries.iter().filter(|e| !is_me(e)) {
        for p in &applied_fields {
            if e.fields.iter().any(|o| overlaps(o, p)) && get_path(live, p) != get_path(&applied, p)
            {
                conflicts.push((e.manager.clone(), p.clone()));
            }
        }
    }
    if !conflicts.is_empty() && !force {
        let causes: Vec<Cause> = conflicts
            .iter()
            .map(|(m, p)| {
                Cause::new(
                    "FieldManagerConflict",
                    dotted(p),
                    format!("conflict with \"{m}\""),
                )
            })
            .collect();
        let n = causes.len();
        let list: Vec<String> = conflicts
            .iter()
            .map(|(m, p)| format!("conflict with \"{m}\": {}", dotted(p)))
            .collect();
        let mut err = ApiError::conflict("", "", "", "");
        err.message = format!(
            "Apply failed with {n} conflict{}: {}",
            if n == 1 { "" } else { "s" },
            list.join("\n")
        );
        return Err(err.with_causes(causes));
    }
    // force: ownership moves to us
    for e in entries.iter_mut().filter(|e| !is_me(e)) {
        e.fields
            .retain(|o| !conflicts.iter().any(|(_, p)| overlaps(o, p)));
    }
    let previous: BTreeSet<FieldPath> = entries
        .iter()
        .find(|e| is_me(e))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let mut merged = live.clone();
    for p in previous.difference(&applied_fields) {
        // Still applied when the configuration sets this field or something below it; an
        // applied empty object above it (`status: {}`) drops it, as in Kubernetes.
        let still_applied = applied_fields.iter().any(|a| a.starts_with(p));
        let owned_by_other = entries
            .iter()
            .filter(|e| !is_me(e))
            .any(|e| e.fields.iter().any(|o| overlaps(o, p)));
        if !still_applied && !owned_by_other {
            remove_path(&mut merged, p);
        }
    }
    prune_empty(&mut merged, 0);
    merge_patch(&mut merged, &applied);
    match entries.iter_mut().find(|e| is_me(e)) {
        Some(e) => {
            if e.fields != applied_fields {
                e.time = now;
            }
            e.fields = applied_fields;
            e.api_version = own.api_version.clone();
        }
        None => entries.push(ManagedEntry {
            manager: own.manager.to_string(),
            operation: "Apply".into(),
            api_version: own.api_version.clone(),
            time: now,
            subresource: own.subresource.to_string(),
            fields: applied_fields,
        }),
    }
    encode_managed(&mut merged, &entries);
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own(m: &str) -> Ownership<'_> {
        Ownership {
            manager: m,
            subresource: "",
            api_version: "v1".into(),
            scope: None,
        }
    }

    #[test]
    fn apply_removes_dropped_fields_and_detects_conflicts() {
        let a = apply(None, &json!({"spec": {"x": 1, "y": 2}}), &own("a"), false).unwrap();
        let a2 = apply(Some(&a), &json!({"spec": {"x": 1}}), &own("a"), false).unwrap();
        assert!(a2["spec"].get("y").is_none());
        let err = apply(Some(&a2), &json!({"spec": {"x": 5}}), &own("b"), false).unwrap_err();
        assert_eq!(err.code, 409);
        let b = apply(Some(&a2), &json!({"spec": {"x": 5}}), &own("b"), true).unwrap();
        assert_eq!(b["spec"]["x"], 5);
        let owners = decode_managed(&b);
        let a_entry = owners.iter().find(|e| e.manager == "a");
        assert!(a_entry.is_none(), "a lost its only field: {owners:?}");
    }

    #[test]
    fn applying_an_empty_object_drops_the_fields_applied_below_it() {
        let a = apply(
            None,
            &json!({"spec": {"x": {"y": 1}, "z": 2}}),
            &own("a"),
            false,
        )
        .unwrap();
        let a2 = apply(Some(&a), &json!({"spec": {}}), &own("a"), false).unwrap();
        assert_eq!(a2.get("spec").and_then(|s| s.get("x")), None, "{a2}");
        assert_eq!(a2.get("spec").and_then(|s| s.get("z")), None, "{a2}");
        // A field that became an object is still applied.
        let b = apply(
            Some(&a),
            &json!({"spec": {"z": {"w": 3}}}),
            &own("a"),
            false,
        )
        .unwrap();
        assert_eq!(b["spec"]["z"]["w"], 3);
    }

    #[test]
    fn strategic_strips_directives() {
        let mut t = json!({"a": {"b": 1}, "l": [1]});
        strategic_merge_patch(
            &mut t,
            &json!({"$setElementOrder/l": [2], "l": [2], "a": {"c": 2}}),
        );
        assert_eq!(t, json!({"a": {"b": 1, "c": 2}, "l": [2]}));
    }
}
