//! Fake Glance.

use async_trait::async_trait;

use super::{FakeCloud, ImportProgress, State, new_id};
use crate::error::{Error, Result};
use crate::model::{ImageCreate, ImagePatchOp, ImageStatus};
use crate::traits::Image;

type ImageObj = crate::model::Image;

/// Attributes Glance manages itself; patching them is forbidden.
const READ_ONLY: &[&str] = &[
    "id",
    "status",
    "checksum",
    "size",
    "virtual_size",
    "os_hash_algo",
    "os_hash_value",
    "created_at",
    "updated_at",
    "file",
    "schema",
    "self",
    "direct_url",
    "locations",
];

const VISIBILITIES: &[&str] = &["public", "private", "shared", "community"];

fn check_property_key(key: &str) -> Result<()> {
    if key.starts_with("os_glance") {
        return Err(Error::forbidden(format!(
            "glance: Attribute '{key}' is reserved."
        )));
    }
    if READ_ONLY.contains(&key) {
        return Err(Error::forbidden(format!(
            "glance: Attribute '{key}' is read-only."
        )));
    }
    Ok(())
}

/// Advance a pending import by one read (imports finish asynchronously).
fn advance_import(st: &mut State, id: &str) {
    let Some(progress) = st.imports.get_mut(id) else {
        return;
    };
    if progress.reads_left > 0 {
        progress.reads_left -= 1;
        return;
    }
    let succeeds = progress.succeeds;
    st.imports.remove(id);
    if let Some(img) = st.images.get_mut(id) {
        img.importing_to_stores.clear();
        if succeeds {
            img.status = ImageStatus::Active;
            img.size = Some(1024);
            img.checksum = Some("d41d8cd98f00b204e9800998ecf8427e".into());
            img.os_hash_algo = Some("sha512".into());
            img.os_hash_value = Some("cf83e1357eefb8bdf1542850d66d8007".into());
        } else {
            // Glance reverts a failed web-download to queued and records
            // the store that failed (`fs` on the test cloud). The real
            // service briefly shows `importing` together with the failed
            // store before the revert; the fake skips that window.
            img.status = ImageStatus::Queued;
            img.failed_import_stores = vec!["fs".into()];
        }
    }
}

fn get<'a>(st: &'a State, id: &str) -> Result<&'a ImageObj> {
    st.images
        .get(id)
        .ok_or_else(|| Error::not_found(format!("glance: No image found with ID {id}")))
}

#[async_trait]
impl Image for FakeCloud {
    async fn create_image(&self, req: &ImageCreate) -> Result<ImageObj> {
        self.run("image.create_image", |st| {
            if let Some(v) = &req.visibility
                && !VISIBILITIES.contains(&v.as_str())
            {
                return Err(Error::bad_request(format!(
                    "glance: Invalid visibility value: {v}"
                )));
            }
            for k in req.properties.keys() {
                check_property_key(k)?;
            }
            let img = ImageObj {
                id: new_id(),
                name: req.name.clone(),
                status: ImageStatus::Queued,
                visibility: req.visibility.clone().unwrap_or_else(|| "shared".into()),
                protected: req.protected,
                tags: super::dedup_tags(&req.tags),
                properties: req.properties.clone(),
                owner: None,
                checksum: None,
                size: None,
                os_hash_algo: None,
                os_hash_value: None,
                disk_format: Some(req.disk_format.clone()),
                container_format: Some(req.container_format.clone()),
                failed_import_stores: vec![],
                importing_to_stores: vec![],
            };
            st.images.insert(img.id.clone(), img.clone());
            Ok(img)
        })
        .await
    }

    async fn get_image(&self, id: &str) -> Result<ImageObj> {
        self.run("image.get_image", |st| {
            advance_import(st, id);
            get(st, id).cloned()
        })
        .await
    }

    async fn list_images_by_name(&self, name: &str) -> Result<Vec<ImageObj>> {
        self.run("image.list_images_by_name", |st| {
            let ids: Vec<String> = st
                .images
                .values()
                .filter(|i| i.name == name)
                .map(|i| i.id.clone())
                .collect();
            for id in &ids {
                advance_import(st, id);
            }
            Ok(ids
                .iter()
                .filter_map(|id| st.images.get(id).cloned())
                .collect())
        })
        .await
    }

    async fn update_image(&self, id: &str, ops: &[ImagePatchOp]) -> Result<ImageObj> {
        self.run("image.update_image", |st| {
            let mut img = get(st, id)?.clone();
            for op in ops {
                let (path, value) = match op {
                    ImagePatchOp::Add { path, value } | ImagePatchOp::Replace { path, value } => {
                        (path, Some(value))
                    }
                    ImagePatchOp::Remove { path } => (path, None),
                };
                let key = path
                    .strip_prefix('/')
                    .unwrap_or(path)
                    .replace("~1", "/")
                    .replace("~0", "~");
                let is_replace = matches!(op, ImagePatchOp::Replace { .. });
                match (key.as_str(), value) {
                    ("visibility", Some(v)) => {
                        let v = v.as_str().unwrap_or_default();
                        if !VISIBILITIES.contains(&v) {
                            return Err(Error::bad_request(format!(
                                "glance: Invalid visibility value: {v}"
                            )));
                        }
                        img.visibility = v.into();
                    }
                    ("protected", Some(v)) => {
                        img.protected = v.as_bool().ok_or_else(|| {
                            Error::bad_request("glance: Invalid value for protected")
                        })?;
                    }
                    ("tags", Some(v)) => {
                        let tags: Vec<String> = serde_json::from_value(v.clone()).map_err(|e| {
                            Error::bad_request(format!("glance: Invalid tags: {e}"))
                        })?;
                        img.tags = super::dedup_tags(&tags);
                    }
                    ("name", Some(v)) => img.name = v.as_str().unwrap_or_default().into(),
                    ("visibility" | "protected" | "tags" | "name", None) => {
                        return Err(Error::forbidden(format!(
                            "glance: Attribute '{key}' cannot be removed."
                        )));
                    }
                    (k, v) => {
                        check_property_key(k)?;
                        match v {
                            Some(v) => {
                                if is_replace && !img.properties.contains_key(k) {
                                    return Err(Error::conflict(format!(
                                        "glance: Property {k} does not exist."
                                    )));
                                }
                                let s = match v {
                                    serde_json::Value::String(s) => s.clone(),
                                    other => other.to_string(),
                                };
                                img.properties.insert(k.into(), s);
                            }
                            None => {
                                if img.properties.remove(k).is_none() {
                                    return Err(Error::conflict(format!(
                                        "glance: Property {k} does not exist."
                                    )));
                                }
                            }
                        }
                    }
                }
            }
            st.images.insert(id.into(), img.clone());
            Ok(img)
        })
        .await
    }

    async fn import_image_web_download(&self, id: &str, uri: &str) -> Result<()> {
        self.run("image.import_image_web_download", |st| {
            let img = get(st, id)?;
            if img.status != ImageStatus::Queued {
                return Err(Error::conflict(format!(
                    "glance: Image status transition from {} to importing is not allowed",
                    img.status
                )));
            }
            if !(uri.starts_with("http://") || uri.starts_with("https://")) {
                return Err(Error::bad_request(format!(
                    "glance: URI for web-download does not pass filtering: {uri}"
                )));
            }
            st.imports.insert(
                id.into(),
                ImportProgress {
                    reads_left: 1,
                    succeeds: !uri.contains("404"),
                },
            );
            if let Some(img) = st.images.get_mut(id) {
                img.status = ImageStatus::Importing;
                img.failed_import_stores.clear();
                img.importing_to_stores = vec!["fs".into()];
            }
            Ok(())
        })
        .await
    }

    async fn delete_image(&self, id: &str) -> Result<()> {
        self.run("image.delete_image", |st| {
            if get(st, id)?.protected {
                return Err(Error::forbidden(format!(
                    "glance: Image {id} is protected and cannot be deleted."
                )));
            }
            st.images.remove(id);
            st.imports.remove(id);
            Ok(())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(name: &str) -> ImageCreate {
        ImageCreate {
            name: name.into(),
            disk_format: "qcow2".into(),
            container_format: "bare".into(),
            visibility: Some("public".into()),
            protected: false,
            tags: vec!["t".into()],
            properties: [("os_distro".to_string(), "ubuntu".to_string())].into(),
        }
    }

    #[tokio::test]
    async fn import_progresses_on_reads() {
        let fake = FakeCloud::new();
        let img = fake.create_image(&req("cirros")).await.unwrap();
        assert_eq!(img.status, ImageStatus::Queued);
        fake.import_image_web_download(&img.id, "http://x/cirros.img")
            .await
            .unwrap();
        assert_eq!(
            fake.get_image(&img.id).await.unwrap().status,
            ImageStatus::Importing
        );
        let done = fake.get_image(&img.id).await.unwrap();
        assert_eq!(done.status, ImageStatus::Active);
        assert!(done.os_hash_value.is_some());
        assert!(
            fake.import_image_web_download(&img.id, "http://x/y")
                .await
                .unwrap_err()
                .is_conflict()
        );
    }

    #[tokio::test]
    async fn failed_import_reverts_to_queued() {
        let fake = FakeCloud::new();
        let img = fake.create_image(&req("bad")).await.unwrap();
        fake.import_image_web_download(&img.id, "http://x/404/missing.img")
            .await
            .unwrap();
        let _ = fake.get_image(&img.id).await.unwrap();
        let img = fake.get_image(&img.id).await.unwrap();
        assert_eq!(img.status, ImageStatus::Queued);
        assert_eq!(img.failed_import_stores, vec!["fs".to_string()]);
    }

    #[tokio::test]
    async fn patch_and_protected_delete() {
        let fake = FakeCloud::new();
        let img = fake.create_image(&req("p")).await.unwrap();
        let img = fake
            .update_image(
                &img.id,
                &[
                    ImagePatchOp::set_protected(true),
                    ImagePatchOp::set_property("hw_disk_bus", "scsi"),
                    ImagePatchOp::remove_property("os_distro"),
                    ImagePatchOp::set_tags(&["a".into(), "b".into()]),
                ],
            )
            .await
            .unwrap();
        assert!(img.protected);
        assert_eq!(
            img.properties.get("hw_disk_bus").map(String::as_str),
            Some("scsi")
        );
        assert!(!img.properties.contains_key("os_distro"));
        assert!(matches!(
            fake.delete_image(&img.id).await.unwrap_err(),
            Error::Forbidden { .. }
        ));
        fake.update_image(&img.id, &[ImagePatchOp::set_protected(false)])
            .await
            .unwrap();
        fake.delete_image(&img.id).await.unwrap();
        assert!(fake.list_images_by_name("p").await.unwrap().is_empty());
    }
}
