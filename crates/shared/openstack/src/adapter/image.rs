//! Image (Glance v2) adapter.
//!
//! What the local Glance 2026.1 showed (and controllers must know):
//! - An image record is created `queued`; `web-download` is accepted with
//!   202 and runs in the background (~2 s to `active` for a small file).
//! - A failed import (404 source, or data that does not match
//!   `disk_format`, e.g. a text file as qcow2) does not `kill` the image: it
//!   stays `queued` and `os_glance_failed_import` names the store(s) (`fs`).
//!   The import task's message is only "Task failed due to Internal Error";
//!   the real reason is in Glance's log. A new import on the same image is
//!   accepted and clears `os_glance_failed_import` on success.
//! - An import on an `active` image is 409; a URI that fails Glance's
//!   filtering (scheme, host or port) is 400.
//! - Error bodies are HTML; the core strips the tags and keeps the text.
//! - User properties are top-level attributes; `os_glance_*` is reserved
//!   (403), and JSON-patch `remove`/`replace` of a missing property is 409.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};

use super::{Core, Request, Service, seg};
use crate::error::{Error, Result};
use crate::model::{ImageCreate, ImagePatchOp, ImageStatus};
use crate::traits::Image;

const S: Service = Service::Image;

/// Content type Glance requires for `PATCH /v2/images/{id}`.
const PATCH_CONTENT_TYPE: &str = "application/openstack-images-v2.1-json-patch";

/// Attributes Glance defines itself (schema core properties and computed
/// fields). Everything else on an image is a user property. Create requests
/// reject these keys as properties so what is sent and what is read back
/// stay symmetric (a `min_ram` "property" would otherwise be sent but never
/// show up in [`crate::model::Image::properties`]).
const CORE_ATTRIBUTES: &[&str] = &[
    "id",
    "name",
    "status",
    "visibility",
    "protected",
    "tags",
    "owner",
    "checksum",
    "size",
    "virtual_size",
    "os_hash_algo",
    "os_hash_value",
    "disk_format",
    "container_format",
    "min_ram",
    "min_disk",
    "os_hidden",
    "created_at",
    "updated_at",
    "self",
    "file",
    "schema",
    "locations",
    "direct_url",
    "stores",
];

/// Prefix of the attributes Glance reserves for its own bookkeeping
/// (`os_glance_import_task`, `os_glance_failed_import`, ...).
const RESERVED_PREFIX: &str = "os_glance_";

/// The Glance port for `core`.
pub(crate) fn adapter(core: Core) -> Arc<dyn Image> {
    Arc::new(ImageAdapter::new(core))
}

/// The Glance port on the shared client core.
#[derive(Clone, Debug)]
pub struct ImageAdapter {
    core: Core,
}

impl ImageAdapter {
    /// Glance on `core`.
    pub fn new(core: Core) -> Self {
        Self { core }
    }
}

/// Whether `key` is managed by Glance rather than being a user property.
fn is_glance_attribute(key: &str) -> bool {
    CORE_ATTRIBUTES.contains(&key) || key.starts_with(RESERVED_PREFIX)
}

/// Build the `POST /v2/images` body: core fields plus the properties as
/// top-level attributes.
pub(crate) fn create_body(req: &ImageCreate) -> Result<Value> {
    let mut body = Map::new();
    for (k, v) in &req.properties {
        if is_glance_attribute(k) {
            return Err(Error::bad_request(format!(
                "image create_image: property {k:?} is a Glance attribute, not a user property"
            )));
        }
        body.insert(k.clone(), Value::String(v.clone()));
    }
    body.insert("name".into(), Value::String(req.name.clone()));
    body.insert("disk_format".into(), Value::String(req.disk_format.clone()));
    body.insert(
        "container_format".into(),
        Value::String(req.container_format.clone()),
    );
    if let Some(v) = &req.visibility {
        body.insert("visibility".into(), Value::String(v.clone()));
    }
    body.insert("protected".into(), Value::Bool(req.protected));
    body.insert(
        "tags".into(),
        Value::Array(req.tags.iter().cloned().map(Value::String).collect()),
    );
    Ok(Value::Object(body))
}

fn opt_str(obj: &Map<String, Value>, key: &str) -> Option<String> {
    match obj.get(key) {
        Some(Value::String(s)) => Some(s.clone()),
        _ => None,
    }
}

/// Split a comma-separated store list (`os_glance_failed_import` is `""`
/// when nothing failed).
fn store_list(obj: &Map<String, Value>, key: &str) -> Vec<String> {
    opt_str(obj, key)
        .map(|s| {
            s.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Map a Glance image document to the model.
pub(crate) fn parse_image(ctx: &str, v: &Value) -> Result<crate::model::Image> {
    let obj = v
        .as_object()
        .ok_or_else(|| Error::unexpected(format!("{ctx}: image is not a JSON object")))?;
    let id =
        opt_str(obj, "id").ok_or_else(|| Error::unexpected(format!("{ctx}: image has no id")))?;
    let status = opt_str(obj, "status")
        .map(ImageStatus::from)
        .ok_or_else(|| Error::unexpected(format!("{ctx}: image {id} has no status")))?;
    // Glance keeps tags as a set and lists them in no fixed order (a GET and a list of the
    // same image can differ): sorted, two reads of one image compare equal.
    let mut tags: Vec<String> = obj
        .get("tags")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    tags.sort();
    // User properties are strings when set through this port; anything else
    // (set by other tools) is kept as its JSON text so it is not lost.
    let properties: BTreeMap<String, String> = obj
        .iter()
        .filter(|(k, _)| !is_glance_attribute(k))
        .map(|(k, v)| {
            let s = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), s)
        })
        .collect();
    Ok(crate::model::Image {
        name: opt_str(obj, "name").unwrap_or_default(),
        status,
        visibility: opt_str(obj, "visibility").unwrap_or_default(),
        protected: obj
            .get("protected")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        tags,
        properties,
        owner: opt_str(obj, "owner"),
        checksum: opt_str(obj, "checksum"),
        size: obj.get("size").and_then(Value::as_u64),
        os_hash_algo: opt_str(obj, "os_hash_algo"),
        os_hash_value: opt_str(obj, "os_hash_value"),
        disk_format: opt_str(obj, "disk_format"),
        container_format: opt_str(obj, "container_format"),
        failed_import_stores: store_list(obj, "os_glance_failed_import"),
        importing_to_stores: store_list(obj, "os_glance_importing_to_stores"),
        id,
    })
}

#[async_trait]
impl Image for ImageAdapter {
    async fn create_image(&self, req: &ImageCreate) -> Result<crate::model::Image> {
        let r = Request::post(S, "create_image", "images").json(&create_body(req)?)?;
        let v: Value = self.core.send(&r).await?.json()?;
        parse_image(&r.context(), &v)
    }

    async fn get_image(&self, id: &str) -> Result<crate::model::Image> {
        let r = Request::get(S, "get_image", format!("images/{}", seg(id)));
        let v: Value = self.core.send(&r).await?.json()?;
        parse_image(&r.context(), &v)
    }

    async fn list_images_by_name(&self, name: &str) -> Result<Vec<crate::model::Image>> {
        // Without visibility=all Glance hides community images and, for an
        // admin, other projects' images that are not shared with it.
        let mut r = Request::get(S, "list_images_by_name", "images").query("visibility", "all");
        // Glance reads a name starting with "in:" as its list operator; such
        // names are matched client-side only.
        if !name.starts_with("in:") {
            r = r.query("name", name);
        }
        let ctx = r.context();
        let items: Vec<Value> = self.core.list_all(r, "images").await?;
        let mut out = Vec::with_capacity(items.len());
        for v in &items {
            let img = parse_image(&ctx, v)?;
            if img.name == name {
                out.push(img);
            }
        }
        Ok(out)
    }

    async fn update_image(&self, id: &str, ops: &[ImagePatchOp]) -> Result<crate::model::Image> {
        if ops.is_empty() {
            // Nothing to change: a read, not a write.
            return self.get_image(id).await;
        }
        let body = serde_json::to_vec(ops).map_err(|e| {
            Error::unexpected(format!("image update_image: cannot encode patch: {e}"))
        })?;
        let r = Request::patch(S, "update_image", format!("images/{}", seg(id)))
            .body_with_type(PATCH_CONTENT_TYPE, body);
        let v: Value = self.core.send(&r).await?.json()?;
        parse_image(&r.context(), &v)
    }

    async fn import_image_web_download(&self, id: &str, uri: &str) -> Result<()> {
        let body = serde_json::json!({"method": {"name": "web-download", "uri": uri}});
        // POST: not retried after an ambiguous failure; a repeated import
        // of an image that is already importing would be a 409 anyway.
        let r = Request::post(
            S,
            "import_image_web_download",
            format!("images/{}/import", seg(id)),
        )
        .json(&body)?;
        self.core.send(&r).await.map(|_| ())
    }

    async fn delete_image(&self, id: &str) -> Result<()> {
        let r = Request::delete(S, "delete_image", format!("images/{}", seg(id)));
        self.core.send(&r).await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn create_body_puts_properties_top_level() {
        let req = ImageCreate {
            name: "cirros".into(),
            disk_format: "qcow2".into(),
            container_format: "bare".into(),
            visibility: Some("private".into()),
            protected: true,
            tags: vec!["a".into()],
            properties: BTreeMap::from([("os_distro".into(), "cirros".into())]),
        };
        assert_eq!(
            create_body(&req).unwrap(),
            json!({
                "name": "cirros", "disk_format": "qcow2", "container_format": "bare",
                "visibility": "private", "protected": true, "tags": ["a"],
                "os_distro": "cirros",
            })
        );
    }

    #[test]
    fn create_body_omits_unset_visibility_and_rejects_core_keys() {
        let mut req = ImageCreate {
            name: "x".into(),
            disk_format: "raw".into(),
            container_format: "bare".into(),
            ..Default::default()
        };
        assert!(create_body(&req).unwrap().get("visibility").is_none());
        for key in ["min_ram", "name", "os_glance_import_task"] {
            req.properties = BTreeMap::from([(key.into(), "1".into())]);
            let err = create_body(&req).unwrap_err();
            assert!(matches!(err, Error::BadRequest { .. }), "{key}");
            assert!(err.message().contains(key));
        }
    }

    #[test]
    fn parses_active_image_from_glance() {
        // Shape of a real Glance 2026.1 response after web-download.
        let v = json!({
            "os_distro": "cirros", "hw_x": "1", "hw_count": 2,
            "os_glance_import_task": "e714", "os_glance_importing_to_stores": "",
            "os_glance_failed_import": "", "name": "probe-img", "disk_format": "qcow2",
            "container_format": "bare", "visibility": "private", "size": 393216,
            "virtual_size": 1048576, "status": "active", "checksum": "7101",
            "protected": false, "min_ram": 0, "min_disk": 0, "owner": "4a58",
            "os_hidden": false, "os_hash_algo": "sha512", "os_hash_value": "ad99",
            "id": "fdd5", "created_at": "2026-11-30T02:53:56Z",
            "updated_at": "2026-11-30T02:53:58Z", "tags": ["a", "b"],
            "self": "/v2/images/fdd5", "file": "/v2/images/fdd5/file",
            "schema": "/v2/schemas/image", "stores": "fs"
        });
        let img = parse_image("t", &v).unwrap();
        assert_eq!(img.id, "fdd5");
        assert_eq!(img.status, ImageStatus::Active);
        assert_eq!(img.size, Some(393216));
        assert_eq!(img.checksum.as_deref(), Some("7101"));
        assert_eq!(img.os_hash_algo.as_deref(), Some("sha512"));
        assert_eq!(img.tags, vec!["a", "b"]);
        assert_eq!(
            img.properties,
            BTreeMap::from([
                ("hw_count".to_string(), "2".to_string()),
                ("hw_x".to_string(), "1".to_string()),
                ("os_distro".to_string(), "cirros".to_string()),
            ])
        );
        assert!(img.failed_import_stores.is_empty());
        assert!(img.importing_to_stores.is_empty());
    }

    #[test]
    fn parses_failed_import() {
        let v = json!({
            "id": "dd4b", "name": "n", "status": "queued", "size": null,
            "checksum": null, "os_hash_algo": null, "visibility": "shared",
            "protected": false, "tags": [],
            "os_glance_importing_to_stores": "", "os_glance_failed_import": "fs, ceph"
        });
        let img = parse_image("t", &v).unwrap();
        assert_eq!(img.status, ImageStatus::Queued);
        assert_eq!(img.size, None);
        assert_eq!(img.checksum, None);
        assert_eq!(img.failed_import_stores, vec!["fs", "ceph"]);
        assert!(img.properties.is_empty());
    }

    #[test]
    fn rejects_documents_without_id_or_status() {
        assert!(parse_image("t", &json!({"status": "queued"})).is_err());
        assert!(parse_image("t", &json!({"id": "x"})).is_err());
        assert!(parse_image("t", &json!([])).is_err());
    }
}
