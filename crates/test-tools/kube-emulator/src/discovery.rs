//! Discovery documents (`/version`, `/api`, `/apis`, resource lists) in the
//! legacy (non-aggregated) format, which kubectl and kube-rs fall back to when
//! the response Content-Type is plain `application/json`.

use serde_json::{Value, json};

use crate::resources::{Registry, ResourceInfo};

/// Verbs served for every resource.
pub const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "32",
        "gitVersion": "v1.32.0-kube-emulator",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.23",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `/api`.
pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_doc(reg: &Registry, group: &str) -> Value {
    let versions = reg.group_versions(group);
    let gv = |v: &str| json!({"groupVersion": format!("{group}/{v}"), "version": v});
    let preferred = versions.first().map(|v| gv(v)).unwrap_or(Value::Null);
    json!({
        "name": group,
        "versions": versions.iter().map(|v| gv(v)).collect::<Vec<_>>(),
        "preferredVersion": preferred,
    })
}

/// `/apis`.
pub fn group_list(reg: &Registry) -> Value {
    let groups: Vec<Value> = reg.groups().iter().map(|g| group_doc(reg, g)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`, if the group is served.
pub fn group(reg: &Registry, group: &str) -> Option<Value> {
    if reg.group_versions(group).is_empty() {
        return None;
    }
    let mut doc = group_doc(reg, group);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

fn resource_entry(r: &ResourceInfo) -> Value {
    let mut e = json!({
        "name": r.plural,
        "singularName": r.singular,
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": VERBS,
    });
    if !r.short_names.is_empty() {
        e["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        e["categories"] = json!(r.categories);
    }
    e
}

/// `/api/v1` or `/apis/{group}/{version}`, if served.
pub fn resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let rs: Vec<&ResourceInfo> = reg
        .resources
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if rs.is_empty() {
        return None;
    }
    let mut entries = Vec::new();
    for r in rs {
        entries.push(resource_entry(r));
        if r.status_subresource {
            entries.push(json!({
                "name": format!("{}/status", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": entries,
    }))
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// A content hash for cache-busting OpenAPI URLs (changes when the resource set changes).
fn content_hash(reg: &Registry, group: &str, version: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for r in reg
        .resources
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        r.plural.hash(&mut h);
        r.kind.hash(&mut h);
        r.namespaced.hash(&mut h);
    }
    format!("{:016X}", h.finish())
}

/// `/openapi/v3`: the index of per-group-version documents.
pub fn openapi_v3_root(reg: &Registry) -> Value {
    let mut paths = serde_json::Map::new();
    let mut gvs: Vec<(String, String)> = reg
        .resources
        .iter()
        .map(|r| (r.group.clone(), r.version.clone()))
        .collect();
    gvs.dedup();
    gvs.sort();
    gvs.dedup();
    for (g, v) in gvs {
        let p = gv_path(&g, &v);
        let hash = content_hash(reg, &g, &v);
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={hash}")}),
        );
    }
    json!({"paths": paths})
}

/// `/openapi/v3/{api/v1|apis/g/v}`: a minimal document that declares, for every
/// kind, the write operations and their `fieldValidation`/`dryRun` parameters.
///
/// kubectl only needs this to learn that server-side field validation is
/// supported (it then skips client-side schema validation); schemas are not
/// published.
pub fn openapi_v3_gv(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let rs: Vec<&ResourceInfo> = reg
        .resources
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if rs.is_empty() {
        return None;
    }
    let params = json!([
        {"name": "dryRun", "in": "query", "schema": {"type": "string"}, "uniqueItems": true},
        {"name": "fieldManager", "in": "query", "schema": {"type": "string"}, "uniqueItems": true},
        {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}, "uniqueItems": true},
    ]);
    let mut paths = serde_json::Map::new();
    for r in rs {
        let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
        let op = |action: &str| {
            json!({
                "operationId": format!("{action}{}", r.kind),
                "parameters": params,
                "responses": {"200": {"description": "OK"}},
                "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk,
            })
        };
        let base = format!("/{}", gv_path(group, version));
        let (collection, item) = if r.namespaced {
            (
                format!("{base}/namespaces/{{namespace}}/{}", r.plural),
                format!("{base}/namespaces/{{namespace}}/{}/{{name}}", r.plural),
            )
        } else {
            (
                format!("{base}/{}", r.plural),
                format!("{base}/{}/{{name}}", r.plural),
            )
        };
        paths.insert(collection, json!({"post": op("post")}));
        paths.insert(item, json!({"put": op("put"), "patch": op("patch")}));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (kube-emulator)", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}
