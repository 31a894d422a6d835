//! OpenstackImage: a Glance image created with metadata, then filled by a `web-download`
//! import that is polled (by requeue, never by blocking a worker) until `active`.

use std::collections::{BTreeMap, BTreeSet};

use api::image::UploadStatus;
use api::{FieldError, OpenstackImage, OpenstackImageSpec, OpenstackImageStatus};
use async_trait::async_trait;
use kube::api::ResourceExt;
use kube::runtime::events::EventType;
use kube::{Api, Resource};
use openstack::OptionalExt;
use openstack::model::{Image, ImageCreate, ImagePatchOp, ImageStatus};

use crate::context::Context;
use crate::error::{ReconcileError, Result};
use crate::framework::{Managed, Progress, owner_of, publish};
use crate::ownership::{Owner, Ownership, may_take_over, should_delete, strip_marks};

/// Image property recording the URL the data was imported from (so a URL change is seen
/// even when status was lost).
pub const SOURCE_PROPERTY: &str = "openstack_operator_source_url";

/// Properties Glance manages itself; never removed when reconciling properties as a set.
fn reserved(key: &str) -> bool {
    key.starts_with("os_")
        || matches!(
            key,
            "stores"
                | "owner_specified.openstack.md5"
                | "owner_specified.openstack.sha256"
                | "owner_specified.openstack.object"
                | "direct_url"
                | "locations"
        )
}

/// Tags we want on the image: the spec's, plus our marks unless it is external.
pub fn desired_tags(spec: &OpenstackImageSpec, owner: &Owner) -> Vec<String> {
    let mut tags: BTreeSet<String> = spec.tags.iter().flatten().cloned().collect();
    if !spec.external {
        tags.extend(owner.tags());
    }
    tags.into_iter().collect()
}

/// Properties we want on the image.
pub fn desired_properties(spec: &OpenstackImageSpec) -> BTreeMap<String, String> {
    let mut p = spec.properties.clone().unwrap_or_default();
    if let Some(c) = &spec.content
        && !spec.external
    {
        p.insert(SOURCE_PROPERTY.into(), c.source.url.clone());
    }
    p
}

/// The JSON-patch operations that bring an image's metadata in line with the spec.
/// `as_set`: properties missing from the spec are removed (images we manage); otherwise
/// they are only added or changed (external images).
pub fn metadata_ops(
    spec: &OpenstackImageSpec,
    image: &Image,
    owner: &Owner,
    as_set: bool,
) -> Vec<ImagePatchOp> {
    let mut ops = Vec::new();
    if image.visibility != spec.visibility.as_str() {
        ops.push(ImagePatchOp::set_visibility(spec.visibility.as_str()));
    }
    if image.protected != spec.protected {
        ops.push(ImagePatchOp::set_protected(spec.protected));
    }
    let want_tags = desired_tags(spec, owner);
    let mut have_tags: Vec<String> = image.tags.clone();
    have_tags.sort();
    have_tags.dedup();
    let tags_differ = if spec.external {
        // External images: add the spec's tags, leave the rest alone.
        !want_tags.iter().all(|t| have_tags.contains(t))
    } else {
        have_tags != want_tags
    };
    if tags_differ {
        let tags: Vec<String> = if spec.external {
            have_tags
                .iter()
                .chain(want_tags.iter())
                .cloned()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect()
        } else {
            want_tags
        };
        ops.push(ImagePatchOp::set_tags(&tags));
    }
    let want = desired_properties(spec);
    for (k, v) in &want {
        if image.properties.get(k) != Some(v) {
            ops.push(ImagePatchOp::set_property(k, v));
        }
    }
    if as_set {
        for k in image.properties.keys() {
            if !want.contains_key(k) && !reserved(k) {
                ops.push(ImagePatchOp::remove_property(k));
            }
        }
    }
    ops
}

fn upload_status(s: &ImageStatus) -> Option<UploadStatus> {
    Some(match s {
        ImageStatus::Queued => UploadStatus::Queued,
        ImageStatus::Saving => UploadStatus::Saving,
        ImageStatus::Uploading => UploadStatus::Uploading,
        ImageStatus::Importing => UploadStatus::Importing,
        ImageStatus::Active => UploadStatus::Active,
        ImageStatus::Killed => UploadStatus::Killed,
        ImageStatus::Deleted => UploadStatus::Deleted,
        ImageStatus::PendingDelete => UploadStatus::PendingDelete,
        ImageStatus::Deactivated => UploadStatus::Deactivated,
        ImageStatus::Other(_) => return None,
    })
}

fn record(status: &mut OpenstackImageStatus, image: &Image) {
    status.image_id = Some(image.id.clone());
    status.upload_status = upload_status(&image.status);
    status.checksum = image.checksum.clone().filter(|c| !c.is_empty());
    status.size_bytes = image
        .size
        .filter(|s| *s > 0)
        .and_then(|s| i64::try_from(s).ok());
    status.hash_algorithm = image.os_hash_algo.clone().filter(|s| !s.is_empty());
    status.hash_value = image.os_hash_value.clone().filter(|s| !s.is_empty());
    status.imported_from = image.properties.get(SOURCE_PROPERTY).cloned();
}

/// Compares Glance's hash with the expected one.
pub fn check_hash(spec: &OpenstackImageSpec, image: &Image) -> Option<String> {
    let want = spec.content.as_ref()?.source.hash.as_ref()?;
    let algo = image.os_hash_algo.as_deref().unwrap_or("");
    let value = image.os_hash_value.as_deref().unwrap_or("");
    if algo != want.algorithm.as_str() {
        return Some(format!(
            "spec.content.source.hash.algorithm is {} but Glance computed {} (its hashing_algorithm); the image cannot be verified",
            want.algorithm.as_str(),
            if algo.is_empty() { "nothing" } else { algo }
        ));
    }
    (value != want.value).then(|| {
        format!(
            "hash mismatch: Glance computed {algo} {value}, spec.content.source.hash.value is {}",
            want.value
        )
    })
}

async fn observe(
    ctx: &Context,
    obj: &OpenstackImage,
    owner: &Owner,
    status: &OpenstackImageStatus,
) -> Result<(Option<Image>, bool)> {
    let image = &ctx.cloud.image;
    if let Some(id) = &status.image_id
        && let Some(i) = image.get_image(id).await.optional()?
        && !matches!(i.status, ImageStatus::Deleted | ImageStatus::PendingDelete)
    {
        return Ok((Some(i), false));
    }
    let candidates = image.list_images_by_name(&obj.spec.name).await?;
    if let Some(ours) = candidates
        .iter()
        .find(|i| owner.classify_tags(&i.tags) == Ownership::Ours)
    {
        return Ok((Some(ours.clone()), false));
    }
    let Some(first) = candidates.into_iter().next() else {
        return Ok((None, false));
    };
    if obj.spec.external {
        return Ok((Some(first), false));
    }
    let take = may_take_over(
        &owner.classify_tags(&first.tags),
        obj.spec.adopt,
        ctx.config.adopt_legacy,
        &format!("Glance image {:?} ({})", first.name, first.id),
    )
    .map_err(ReconcileError::NotOwned)?;
    Ok((Some(first), take))
}

async fn start_import(ctx: &Context, obj: &OpenstackImage, id: &str) -> Result<Progress> {
    let Some(content) = &obj.spec.content else {
        return Ok(Progress::Failed {
            reason: "NoContent".into(),
            message: "the image has no data and spec.content is not set".into(),
        });
    };
    ctx.cloud
        .image
        .import_image_web_download(id, &content.source.url)
        .await?;
    publish(
        ctx,
        obj,
        EventType::Normal,
        "ImportStarted",
        "Import",
        format!(
            "Glance web-download import of {} into image {id} started",
            content.source.url
        ),
    )
    .await;
    Ok(importing(ctx, "import started"))
}

fn importing(ctx: &Context, what: &str) -> Progress {
    Progress::InProgress {
        reason: "Importing".into(),
        message: format!("Image import in progress ({what})"),
        requeue: ctx.config.image_poll,
    }
}

#[async_trait]
impl Managed for OpenstackImage {
    type Status = OpenstackImageStatus;
    const READY_CONDITION: &'static str = "ImageReady";

    fn status(&self) -> Option<&Self::Status> {
        self.status.as_ref()
    }
    fn cloud_ref(&self) -> Option<&str> {
        self.spec.cloud_ref.as_ref().map(|c| c.name.as_str())
    }

    fn api(client: kube::Client, _obj: &Self) -> Api<Self> {
        Api::all(client)
    }

    fn validate(&self) -> Vec<FieldError> {
        api::validation::object_errors(self, &self.spec)
    }

    async fn apply(&self, ctx: &Context, status: &mut Self::Status) -> Result<Progress> {
        let owner = owner_of(self, ctx);
        let glance = &ctx.cloud.image;
        let (found, adopt) = observe(ctx, self, &owner, status).await?;
        let Some(img) = found else {
            if self.spec.external {
                status.image_id = None;
                status.upload_status = None;
                return Err(ReconcileError::DependencyMissing(format!(
                    "external image {:?} in Glance",
                    self.spec.name
                )));
            }
            let Some(content) = &self.spec.content else {
                return Err(ReconcileError::invalid(
                    "spec.content",
                    "is required to create an image that does not exist in Glance",
                ));
            };
            let req = ImageCreate {
                name: self.spec.name.clone(),
                disk_format: content.disk_format.as_str().into(),
                container_format: content.container_format.as_str().into(),
                visibility: Some(self.spec.visibility.as_str().into()),
                protected: self.spec.protected,
                tags: desired_tags(&self.spec, &owner),
                properties: desired_properties(&self.spec),
            };
            let created = glance.create_image(&req).await?;
            record(status, &created);
            status.adopted = Some(false);
            publish(
                ctx,
                self,
                EventType::Normal,
                "Created",
                "Create",
                format!("created Glance image {} ({})", created.name, created.id),
            )
            .await;
            return start_import(ctx, self, &created.id).await;
        };
        if adopt {
            status.adopted = Some(true);
            publish(
                ctx,
                self,
                EventType::Normal,
                "Adopted",
                "Adopt",
                format!("took over existing Glance image {} ({})", img.name, img.id),
            )
            .await;
        }
        record(status, &img);
        let managed = !self.spec.external;
        let ops = metadata_ops(
            &self.spec,
            &img,
            &owner,
            managed && !status.adopted.unwrap_or(false),
        );
        let mut img = img;
        if !ops.is_empty() {
            img = glance.update_image(&img.id, &ops).await?;
            record(status, &img);
            publish(
                ctx,
                self,
                EventType::Normal,
                "Updated",
                "Update",
                format!("updated metadata of Glance image {}", img.id),
            )
            .await;
        }
        if self.spec.external {
            return Ok(Progress::ready(
                "Configured",
                format!("external image {} configured", img.id),
            ));
        }
        match &img.status {
            ImageStatus::Active => {
                // A new source URL means new data; Glance cannot replace the data of an active image.
                if let Some(c) = &self.spec.content
                    && img
                        .properties
                        .get(SOURCE_PROPERTY)
                        .is_some_and(|u| *u != c.source.url)
                {
                    return Ok(Progress::Failed {
                        reason: "ContentChanged".into(),
                        message: format!(
                            "spec.content.source.url changed to {} but Glance cannot replace the data of the active image {}; delete and recreate the resource (or give the image a new name)",
                            c.source.url, img.id
                        ),
                    });
                }
                if let Some(problem) = check_hash(&self.spec, &img) {
                    return Ok(Progress::Failed {
                        reason: "HashMismatch".into(),
                        message: problem,
                    });
                }
                Ok(Progress::ready(
                    "Active",
                    format!("image {} is active", img.id),
                ))
            }
            ImageStatus::Queued if !img.importing_to_stores.is_empty() => {
                Ok(importing(ctx, "queued"))
            }
            ImageStatus::Queued if !img.failed_import_stores.is_empty() => {
                let url = self
                    .spec
                    .content
                    .as_ref()
                    .map(|c| c.source.url.as_str())
                    .unwrap_or("");
                let message = format!(
                    "Glance could not import {url} (failed stores: {}); check that Glance can reach the URL and that it serves a {} image",
                    img.failed_import_stores.join(", "),
                    self.spec
                        .content
                        .as_ref()
                        .map(|c| c.disk_format.as_str())
                        .unwrap_or("?"),
                );
                // Retry on a spec change, else on each resync (the backoff of a failed import).
                if self.meta().generation != status.observed_generation
                    || status.phase == Some(api::Phase::Error)
                {
                    start_import(ctx, self, &img.id).await?;
                    return Ok(Progress::InProgress {
                        reason: "ImportFailed".into(),
                        message: format!("{message}; retrying"),
                        requeue: ctx.config.image_poll,
                    });
                }
                Ok(Progress::Failed {
                    reason: "ImportFailed".into(),
                    message,
                })
            }
            ImageStatus::Queued => start_import(ctx, self, &img.id).await,
            ImageStatus::Saving | ImageStatus::Importing | ImageStatus::Uploading => {
                Ok(importing(ctx, img.status.as_str()))
            }
            other => Ok(Progress::Failed {
                reason: "ImportFailed".into(),
                message: format!("Image status: {other}"),
            }),
        }
    }

    async fn cleanup(&self, ctx: &Context, status: &mut Self::Status) -> Result<()> {
        if self.spec.external {
            return Ok(());
        }
        let owner = owner_of(self, ctx);
        let glance = &ctx.cloud.image;
        let found = match &status.image_id {
            Some(id) => glance.get_image(id).await.optional()?,
            None => glance
                .list_images_by_name(&self.spec.name)
                .await?
                .into_iter()
                .find(|i| owner.classify_tags(&i.tags) == Ownership::Ours),
        };
        let Some(img) = found else { return Ok(()) };
        if owner.classify_tags(&img.tags) != Ownership::Ours {
            return Ok(());
        }
        if should_delete(self.spec.deletion_policy, status.adopted.unwrap_or(false)) {
            if img.protected {
                glance
                    .update_image(&img.id, &[ImagePatchOp::set_protected(false)])
                    .await?;
            }
            glance.delete_image(&img.id).await.optional()?;
            publish(
                ctx,
                self,
                EventType::Normal,
                "Deleted",
                "Delete",
                format!("deleted Glance image {} ({})", img.name, img.id),
            )
            .await;
        } else {
            let tags = strip_marks(&img.tags);
            glance
                .update_image(&img.id, &[ImagePatchOp::set_tags(&tags)])
                .await?;
            publish(
                ctx,
                self,
                EventType::Normal,
                "Released",
                "Delete",
                format!(
                    "left Glance image {} ({}) in place ({})",
                    img.name,
                    img.id,
                    self.name_any()
                ),
            )
            .await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> OpenstackImageSpec {
        serde_json::from_value(serde_json::json!({
            "name": "img", "visibility": "public", "tags": ["b", "a"], "properties": {"os_distro": "debian"},
            "content": {"diskFormat": "qcow2", "source": {"url": "http://h/x.qcow2"}}
        }))
        .unwrap()
    }

    fn owner() -> Owner {
        Owner {
            cluster: "c".into(),
            uid: "u".into(),
        }
    }

    fn image(tags: Vec<String>, props: &[(&str, &str)]) -> Image {
        Image {
            id: "i1".into(),
            name: "img".into(),
            status: ImageStatus::Active,
            visibility: "public".into(),
            protected: false,
            tags,
            properties: props
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            owner: None,
            checksum: None,
            size: None,
            os_hash_algo: Some("sha512".into()),
            os_hash_value: Some("ab".into()),
            disk_format: None,
            container_format: None,
            failed_import_stores: vec![],
            importing_to_stores: vec![],
        }
    }

    #[test]
    fn in_sync_image_needs_no_patch() {
        let i = image(
            desired_tags(&spec(), &owner()),
            &[
                ("os_distro", "debian"),
                (SOURCE_PROPERTY, "http://h/x.qcow2"),
                ("os_glance_importing_to_stores", ""),
            ],
        );
        assert!(metadata_ops(&spec(), &i, &owner(), true).is_empty());
    }

    #[test]
    fn properties_are_a_set_but_glance_keys_are_kept() {
        let i = image(
            desired_tags(&spec(), &owner()),
            &[
                ("os_distro", "ubuntu"),
                ("extra", "1"),
                ("os_hash_value", "x"),
                (SOURCE_PROPERTY, "http://h/x.qcow2"),
            ],
        );
        let ops = metadata_ops(&spec(), &i, &owner(), true);
        assert_eq!(
            ops,
            vec![
                ImagePatchOp::set_property("os_distro", "debian"),
                ImagePatchOp::remove_property("extra")
            ]
        );
        // External images: nothing is removed.
        let mut ext = spec();
        ext.external = true;
        let ops = metadata_ops(&ext, &i, &owner(), false);
        assert!(!ops.iter().any(|o| matches!(o, ImagePatchOp::Remove { .. })));
    }

    #[test]
    fn hash_mismatch_is_reported() {
        let mut s = spec();
        s.content.as_mut().unwrap().source.hash = Some(
            serde_json::from_value(serde_json::json!({"algorithm": "sha512", "value": "cd"}))
                .unwrap(),
        );
        let i = image(vec![], &[]);
        assert!(check_hash(&s, &i).unwrap().contains("mismatch"));
        s.content.as_mut().unwrap().source.hash = Some(
            serde_json::from_value(serde_json::json!({"algorithm": "sha512", "value": "ab"}))
                .unwrap(),
        );
        assert!(check_hash(&s, &i).is_none());
        s.content.as_mut().unwrap().source.hash = Some(
            serde_json::from_value(serde_json::json!({"algorithm": "sha256", "value": "ab"}))
                .unwrap(),
        );
        assert!(check_hash(&s, &i).unwrap().contains("hashing_algorithm"));
    }
}
