//! `OpenstackImage`: a Glance image imported with `web-download` (cluster-scoped).

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Condition, DeletionPolicy, Phase};

/// Desired state of a Glance image.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "sunet.se",
    version = "v1alpha1",
    kind = "OpenstackImage",
    plural = "openstackimages",
    singular = "openstackimage",
    shortname = "osi",
    shortname = "osimage",
    doc = "A Glance image managed by the operator, imported with web-download (cluster-scoped).",
    status = "OpenstackImageStatus",
    printcolumn = r#"{"name":"Image","type":"string","jsonPath":".spec.name"}"#,
    printcolumn = r#"{"name":"Visibility","type":"string","jsonPath":".spec.visibility"}"#,
    printcolumn = r#"{"name":"External","type":"boolean","jsonPath":".spec.external"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Upload Status","type":"string","jsonPath":".status.uploadStatus"}"#,
    printcolumn = r#"{"name":"ID","type":"string","jsonPath":".status.imageId","priority":1}"#,
    printcolumn = r#"{"name":"Cloud","type":"string","jsonPath":".spec.cloudRef.name","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(validation = Rule::new(crate::cloud::CLOUD_REF_IMMUTABLE).message("spec.cloudRef cannot change after creation: delete the resource and create it in the other cloud"))]
#[serde(rename_all = "camelCase")]
pub struct OpenstackImageSpec {
    /// The OpenstackCloud this resource lives in (extension). Unset: the cloud the operator
    /// was started with (`OS_CLOUD`), as with the seed. Cannot change after creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_ref: Option<crate::cloud::CloudRef>,
    /// Glance image name; also how an existing image is found.
    #[schemars(length(min = 1, max = 255))]
    pub name: String,
    /// The image exists outside this operator: never create or delete it, only enforce
    /// its settings.
    #[serde(default)]
    pub external: bool,
    /// Glance visibility.
    #[serde(default)]
    pub visibility: Visibility,
    /// Glance `protected` flag (a protected image cannot be deleted).
    #[serde(default)]
    pub protected: bool,
    /// Glance tags.
    // Glance's own limits: 128 tags per image (image_tag_quota's default), 255 characters each
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128), extend("items" = {"type": "string", "maxLength": 255}))]
    pub tags: Option<Vec<String>>,
    /// Image properties (flattened onto the image). Reconciled as a set: keys removed here
    /// are removed from the image.
    // at most 128: Glance's image_property_quota default
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 128))]
    pub properties: Option<BTreeMap<String, String>>,
    /// Where the image data comes from; needed to create an image that does not exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<ImageContent>,
    /// Take over an existing image with this name that this operator did not create
    /// (extension).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopt: bool,
    /// What deleting the resource does to the image (extension). Unset: delete what we
    /// created, keep what we adopted or what is `external`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<DeletionPolicy>,
}

/// Glance image visibility.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "lowercase")]
pub enum Visibility {
    /// Every project sees the image.
    Public,
    /// Only the owner sees the image.
    #[default]
    Private,
    /// The owner and the projects it is shared with.
    Shared,
    /// Every project sees it, but it is not listed by default.
    Community,
}

impl Visibility {
    /// Glance's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Visibility::Public => "public",
            Visibility::Private => "private",
            Visibility::Shared => "shared",
            Visibility::Community => "community",
        }
    }
}

/// Image data and its formats.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageContent {
    /// Disk format of the data.
    pub disk_format: DiskFormat,
    /// Container format of the data.
    #[serde(default)]
    pub container_format: ContainerFormat,
    /// Where Glance downloads the data from.
    pub source: ImageSource,
}

/// Disk formats Glance accepts.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)]
pub enum DiskFormat {
    Raw,
    Qcow2,
    Vhd,
    Vhdx,
    Vmdk,
    Vdi,
    Iso,
    Aki,
    Ari,
    Ami,
}

impl DiskFormat {
    /// Glance's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DiskFormat::Raw => "raw",
            DiskFormat::Qcow2 => "qcow2",
            DiskFormat::Vhd => "vhd",
            DiskFormat::Vhdx => "vhdx",
            DiskFormat::Vmdk => "vmdk",
            DiskFormat::Vdi => "vdi",
            DiskFormat::Iso => "iso",
            DiskFormat::Aki => "aki",
            DiskFormat::Ari => "ari",
            DiskFormat::Ami => "ami",
        }
    }
}

/// Container formats Glance accepts.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)]
pub enum ContainerFormat {
    #[default]
    Bare,
    Ovf,
    Ova,
    Aki,
    Ari,
    Ami,
    Docker,
}

impl ContainerFormat {
    /// Glance's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ContainerFormat::Bare => "bare",
            ContainerFormat::Ovf => "ovf",
            ContainerFormat::Ova => "ova",
            ContainerFormat::Aki => "aki",
            ContainerFormat::Ari => "ari",
            ContainerFormat::Ami => "ami",
            ContainerFormat::Docker => "docker",
        }
    }
}

/// The URL Glance's `web-download` import fetches.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageSource {
    /// An http(s) URL Glance can reach.
    #[x_kube(validation = Rule::new("isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''").message("content.source.url must be an absolute http:// or https:// URL (Glance web-download accepts no other scheme)"))]
    #[schemars(length(min = 1, max = 2048))]
    pub url: String,
    /// Expected hash of the data, compared with Glance's `os_hash_algo`/`os_hash_value` after
    /// the import (extension). A mismatch keeps the image not Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<ImageHash>,
}

/// An expected image hash.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageHash {
    /// Hash algorithm; must match the cloud's `hashing_algorithm` (Glance default sha512).
    pub algorithm: HashAlgorithm,
    /// Lower-case hex digest.
    #[x_kube(validation = Rule::new("self.matches('^[0-9a-f]+$')").message("content.source.hash.value must be a lower-case hex digest"))]
    #[schemars(length(min = 32, max = 128))]
    pub value: String,
}

/// Hash algorithms Glance can compute (`hashing_algorithm`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)]
pub enum HashAlgorithm {
    Md5,
    Sha1,
    Sha256,
    Sha384,
    Sha512,
}

impl HashAlgorithm {
    /// Glance's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            HashAlgorithm::Md5 => "md5",
            HashAlgorithm::Sha1 => "sha1",
            HashAlgorithm::Sha256 => "sha256",
            HashAlgorithm::Sha384 => "sha384",
            HashAlgorithm::Sha512 => "sha512",
        }
    }
}

/// Glance image statuses (the seed's enum).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum UploadStatus {
    Queued,
    Saving,
    Active,
    Killed,
    Deleted,
    PendingDelete,
    Deactivated,
    Uploading,
    Importing,
}

/// Observed state of a Glance image.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenstackImageStatus {
    /// Lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Glance image ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// Glance image status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload_status: Option<UploadStatus>,
    /// Glance `checksum` (MD5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
    /// Image size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<i64>,
    /// Glance `os_hash_algo` (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_algorithm: Option<String>,
    /// Glance `os_hash_value` (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_value: Option<String>,
    /// The source URL the current image data was imported from (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imported_from: Option<String>,
    /// `ImageReady` (seed) and `Ready` (roll-up).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` the status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When OpenStack was last compared with the spec (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub last_sync_time: Option<String>,
    /// Whether the image existed before and was adopted rather than created (extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopted: Option<bool>,
}
