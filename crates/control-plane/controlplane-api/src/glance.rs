//! `Glance`: the image service. Images go to a file store on a PersistentVolumeClaim the
//! operator creates, or to an S3 bucket of an `objectStorage` external service (or both; the
//! default store takes new images). `web-download` import is enabled only with an allow-list.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::common::{DatabaseRef, ExternalServiceRef, KeystoneRef, ServiceTemplate};
use crate::status::ServiceStatus;

/// Desired state of a Glance deployment.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "controlplane.sunet.se",
    version = "v1alpha1",
    kind = "Glance",
    plural = "glances",
    singular = "glance",
    namespaced,
    doc = "OpenStack Image service (Glance): database, db sync Job, service user and catalog entry, the images PVC or S3 store, the API Deployment and Service.",
    status = "ServiceStatus",
    printcolumn = r#"{"name":"Release","type":"string","jsonPath":".spec.release"}"#,
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Endpoint","type":"string","jsonPath":".status.endpoint","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct GlanceSpec {
    /// OpenStack release (the configuration and Jobs are rendered for it). Default `2026.1`.
    #[serde(default = "default_release")]
    #[schemars(length(min = 1, max = 16))]
    pub release: String,
    /// Replicas, image, resources, placement and config overrides.
    #[serde(flatten)]
    pub template: ServiceTemplate,
    /// The database Glance keeps its metadata in (names default to `glance`).
    pub database: DatabaseRef,
    /// The Keystone Glance registers in and validates tokens with.
    pub keystone: KeystoneRef,
    /// A `cache` external service (memcached) for keystonemiddleware's token cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<ExternalServiceRef>,
    /// Where image data is stored: `file`, `s3` or both.
    pub storage: GlanceStorage,
    /// The `web-download` import method and the hosts it may fetch from; absent: disabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web_download: Option<WebDownloadSpec>,
    /// Public URL of the image API in the catalog. Default: the in-cluster Service URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    #[x_kube(validation = kube::core::Rule::new("isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''").message("publicEndpoint must be an absolute http:// or https:// URL"))]
    pub public_endpoint: Option<String>,
}

/// Glance's image stores (one per kind; at least one).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("has(self.file) || has(self.s3)").message("storage needs a file or an s3 store"))]
pub struct GlanceStorage {
    /// The file store on a PersistentVolumeClaim `<name>-images` the operator creates. It is
    /// not deleted with the Glance (the images outlive it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FileStore>,
    /// The S3 store in a bucket of an `objectStorage` external service (its endpoint,
    /// credentials Secret and TLS CA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3StoreSpec>,
    /// The store new images go to. Default: `s3` when configured, else `file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_store: Option<StoreKind>,
}

/// A kind of image store.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum StoreKind {
    /// The file store.
    File,
    /// The S3 store.
    S3,
}

/// The file store's volume.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileStore {
    /// Requested size of the claim (a Kubernetes quantity). Default `10Gi`.
    #[serde(default = "default_size")]
    #[schemars(length(min = 1, max = 32))]
    pub size: String,
    /// Storage class of the claim. Default: the cluster's default class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub storage_class: Option<String>,
    /// Access mode of the claim. Default `ReadWriteOnce`; more than one replica needs
    /// `ReadWriteMany` (every API pod reads and writes every image).
    #[serde(default = "default_access_mode")]
    #[schemars(length(min = 1, max = 32))]
    #[x_kube(validation = kube::core::Rule::new("self in ['ReadWriteOnce', 'ReadWriteMany', 'ReadWriteOncePod']").message("accessMode must be ReadWriteOnce, ReadWriteMany or ReadWriteOncePod"))]
    pub access_mode: String,
}

impl Default for FileStore {
    fn default() -> Self {
        FileStore {
            size: default_size(),
            storage_class: None,
            access_mode: default_access_mode(),
        }
    }
}

/// The S3 store's bucket on an `objectStorage` external service.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct S3StoreSpec {
    /// The `objectStorage` external service (endpoint URL, credentials, TLS CA).
    pub object_storage: ExternalServiceRef,
    /// Bucket name. Default: the external service's `extra.bucket`, else `glance-<name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 3, max = 63),
        regex(pattern = r"^[a-z0-9][a-z0-9.-]+[a-z0-9]$")
    )]
    pub bucket: Option<String>,
    /// Region for request signing. Default: the external service's `extra.region`, else left
    /// to the endpoint (right for Ceph RGW).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub region: Option<String>,
    /// Whether Glance creates the bucket on its first upload. Default true.
    #[serde(default = "default_true")]
    pub create_bucket: bool,
}

/// `web-download` import: Glance fetches image data from a URL, but only from these hosts
/// (an empty host list would let any user make Glance fetch from the cluster's internal
/// services, so at least one host is required).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebDownloadSpec {
    /// Host names or IP addresses image URLs may name.
    #[schemars(length(min = 1, max = 64), inner(length(min = 1, max = 253)))]
    pub allowed_hosts: Vec<String>,
    /// URL schemes allowed. Default `[http, https]`.
    #[serde(default = "default_schemes")]
    #[schemars(length(min = 1, max = 4), inner(length(min = 1, max = 16)))]
    pub allowed_schemes: Vec<String>,
    /// Ports allowed when the URL names one. Default `[80, 443]`.
    #[serde(default = "default_ports")]
    #[schemars(length(min = 1, max = 32), inner(range(min = 1, max = 65535)))]
    pub allowed_ports: Vec<u16>,
}

impl GlanceStorage {
    /// The default store: the one named, else `s3` when configured, else `file`.
    pub fn default_kind(&self) -> StoreKind {
        self.default_store.unwrap_or(if self.s3.is_some() {
            StoreKind::S3
        } else {
            StoreKind::File
        })
    }
}

fn default_release() -> String {
    crate::DEFAULT_RELEASE.into()
}
fn default_size() -> String {
    "10Gi".into()
}
fn default_access_mode() -> String {
    "ReadWriteOnce".into()
}
fn default_true() -> bool {
    true
}
fn default_schemes() -> Vec<String> {
    vec!["http".into(), "https".into()]
}
fn default_ports() -> Vec<u16> {
    vec![80, 443]
}
