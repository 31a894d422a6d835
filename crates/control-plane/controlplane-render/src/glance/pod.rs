//! The Kubernetes side of Glance's stores: the images PVC, and the API Deployment's volumes
//! and command, which mount exactly the paths the rendered configuration names.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    EmptyDirVolumeSource, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimVolumeSource, Volume, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{POD_CONFIG_DIR, POD_IMAGES_DIR, POD_S3_CA_DIR, POD_STATE_DIR, PORT};
use crate::objects::{self, ApiParams, Owner};

/// Where a Glance pod's images and the S3 CA come from (the Kubernetes side of the stores).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodStorage {
    /// The file store's PVC (mounted at [`POD_IMAGES_DIR`]), if the file store is enabled.
    pub images_claim: Option<String>,
    /// The Secret holding the S3 endpoint's CA bundle and its key (mounted in
    /// [`POD_S3_CA_DIR`]), if the S3 store verifies with a CA of its own.
    pub s3_ca_secret: Option<(String, String)>,
}

impl PodStorage {
    /// `S3Store::ca_file` for pods: the key's path in the mounted CA Secret.
    pub fn s3_ca_file(&self) -> Option<String> {
        self.s3_ca_secret
            .as_ref()
            .map(|(_, key)| format!("{POD_S3_CA_DIR}/{key}"))
    }
}

/// The file store's PersistentVolumeClaim. More than one replica needs `ReadWriteMany` (every
/// API pod reads and writes every image); with `ReadWriteOnce` the replicas must share a node.
/// It carries no owner reference: deleting the Glance CR must not delete the images with it.
pub fn images_claim(
    owner: &Owner,
    name: &str,
    size: &str,
    storage_class: Option<&str>,
    access_mode: &str,
) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(owner.namespace.clone()),
            labels: Some(owner.labels("images")),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec![access_mode.to_string()]),
            storage_class_name: storage_class.map(str::to_string),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    Quantity(size.to_string()),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    }
}

/// What the API Deployment runs: uwsgi on the rendered files, `/healthcheck` (unauthenticated)
/// for the probes, the config Secret, an emptyDir for the staging and tasks stores (web-download
/// stages and imports in the pod that took the request), the images PVC and the S3 CA.
pub fn api_params(
    name: &str,
    image: &str,
    config_secret: &str,
    config_hash: &str,
    storage: &PodStorage,
) -> ApiParams {
    let mut volumes = vec![
        objects::secret_volume("config", config_secret, POD_CONFIG_DIR),
        (
            Volume {
                name: "state".into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Volume::default()
            },
            VolumeMount {
                name: "state".into(),
                mount_path: POD_STATE_DIR.into(),
                ..VolumeMount::default()
            },
        ),
    ];
    if let Some(claim) = &storage.images_claim {
        volumes.push((
            Volume {
                name: "images".into(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: claim.clone(),
                    read_only: Some(false),
                }),
                ..Volume::default()
            },
            VolumeMount {
                name: "images".into(),
                mount_path: POD_IMAGES_DIR.into(),
                ..VolumeMount::default()
            },
        ));
    }
    if let Some((secret, _)) = &storage.s3_ca_secret {
        volumes.push(objects::secret_volume("s3-ca", secret, POD_S3_CA_DIR));
    }
    ApiParams {
        name: format!("{name}-api"),
        image: image.to_string(),
        command: vec![
            "uwsgi".into(),
            "--ini".into(),
            format!("{POD_CONFIG_DIR}/uwsgi.ini"),
        ],
        port: PORT,
        probe_path: "/healthcheck".into(),
        config_hash: config_hash.to_string(),
        volumes,
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{conf, inputs, owner, template};
    use super::super::{Backend, config_files, config_hash};
    use super::*;
    use controlplane_api::common::ServiceTemplate;

    fn storage() -> PodStorage {
        PodStorage {
            images_claim: Some("glance-images".into()),
            s3_ca_secret: Some(("rgw-ca".into(), "ca.crt".into())),
        }
    }

    #[test]
    fn pods_mount_what_the_rendered_paths_name() {
        let storage = storage();
        let t = ServiceTemplate::default();
        let mut i = inputs(&t);
        let Backend::S3(s) = &mut i.backends[0] else {
            panic!("s3 first")
        };
        s.ca_file = storage.s3_ca_file();
        i.backends[1] = Backend::File {
            dir: POD_IMAGES_DIR.into(),
        };
        let c = conf(&i);
        let p = api_params("glance", "img", "glance-config", "h", &storage);
        let mounts: Vec<&str> = p
            .volumes
            .iter()
            .map(|(_, m)| m.mount_path.as_str())
            .collect();
        assert_eq!(
            mounts,
            [POD_CONFIG_DIR, POD_STATE_DIR, POD_IMAGES_DIR, POD_S3_CA_DIR]
        );
        let under = |path: Option<&str>, dir: &str| {
            path.is_some_and(|p| p == dir || p.starts_with(&format!("{dir}/")))
        };
        assert!(under(c.get("s3", "s3_store_cacert"), POD_S3_CA_DIR));
        assert!(under(
            c.get("file", "filesystem_store_datadir"),
            POD_IMAGES_DIR
        ));
        for store in ["os_glance_staging_store", "os_glance_tasks_store"] {
            assert!(under(
                c.get(store, "filesystem_store_datadir"),
                POD_STATE_DIR
            ));
        }
        assert!(under(c.get("oslo_concurrency", "lock_path"), POD_STATE_DIR));
        assert_eq!(
            p.command.last().map(String::as_str),
            Some("/etc/glance/uwsgi.ini")
        );
        // The S3-only layout without its own CA mounts neither PVC nor CA.
        let bare = PodStorage {
            images_claim: None,
            s3_ca_secret: None,
        };
        assert_eq!(
            api_params("glance", "img", "c", "h", &bare).volumes.len(),
            2
        );
    }

    #[test]
    fn api_deployment_snapshot() {
        let t = template();
        let owner = owner();
        let files = config_files(&inputs(&t)).expect("renders");
        let p = api_params(
            "glance",
            "quay.io/openstack/glance:2026.1",
            "glance-config",
            &config_hash("quay.io/openstack/glance:2026.1", &files),
            &storage(),
        );
        insta::assert_yaml_snapshot!(objects::api_deployment(&owner, &t, p));
        let claim = images_claim(
            &owner,
            "glance-images",
            "100Gi",
            Some("cephfs"),
            "ReadWriteMany",
        );
        assert!(claim.metadata.owner_references.is_none());
        insta::assert_yaml_snapshot!(claim);
    }
}
