//! Placement's configuration: `placement.conf`, the uwsgi configuration, the db sync command
//! and the catalog entry of its service-user step. The database Job, the uwsgi settings, the
//! service-user script and the Kubernetes objects are the ones every service shares.

use std::collections::BTreeMap;

use controlplane_api::common::ServiceTemplate;

use crate::authtoken;
use crate::database::Database;
use crate::hash::InputHash;
use crate::ini::Ini;
use crate::service_user::ServiceEntry;
use crate::uwsgi::Uwsgi;

/// Port the Placement API listens on inside the pod and on its Service.
pub const PORT: u16 = 8778;
/// Catalog service type (and name) of Placement.
pub const SERVICE_TYPE: &str = "placement";
/// Where `placement.conf` and `uwsgi.ini` are mounted in pods.
pub const POD_CONFIG_DIR: &str = "/etc/placement";
/// How Placement validates tokens and whom it authenticates as (`[keystone_authtoken]`).
pub use crate::authtoken::KeystoneAuth;

/// Where the rendered files are found by the processes that read them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paths {
    /// Directory holding `placement.conf` and `uwsgi.ini`.
    pub config_dir: String,
    /// A log file; `None` logs to stderr (pods).
    pub log_file: Option<String>,
    /// uwsgi `home` (a virtualenv), when not the image's system Python.
    pub python_home: Option<String>,
}

impl Paths {
    /// The layout inside Placement pods.
    pub fn pod() -> Self {
        Paths {
            config_dir: POD_CONFIG_DIR.into(),
            log_file: None,
            python_home: None,
        }
    }
}

/// Everything Placement's configuration is rendered from.
#[derive(Clone, Debug)]
pub struct PlacementInputs<'a> {
    /// Replicas, image, resources and the user's config overrides.
    pub template: &'a ServiceTemplate,
    /// Resolved database (`[placement_database]`).
    pub database: Database,
    /// The deployed Keystone and the service user.
    pub keystone: KeystoneAuth,
    /// The `cache` external service (memcached: servers, TLS, SASL) (keystonemiddleware's token cache), empty without a cache.
    pub cache: crate::cache::Cache,
    /// File locations.
    pub paths: Paths,
    /// Address uwsgi listens on, e.g. `0.0.0.0:8778`.
    pub listen: String,
    /// uwsgi worker processes.
    pub workers: u32,
}

/// `placement.conf`: the operator's settings with the user's overrides merged over them.
/// Placement registers no `[cache]` group (oslo.cache); its memcached use is the token cache of
/// keystonemiddleware, `[keystone_authtoken] memcached_servers`.
pub fn placement_conf(i: &PlacementInputs<'_>) -> String {
    let mut ini = Ini::default();
    ini.set("DEFAULT", "debug", "false");
    match &i.paths.log_file {
        Some(f) => ini.set("DEFAULT", "log_file", f.clone()),
        None => ini.set("DEFAULT", "use_stderr", "true"),
    };
    ini.set("api", "auth_strategy", "keystone")
        .set("placement_database", "connection", i.database.url())
        .set("placement_database", "max_retries", "-1")
        .set("placement_database", "connection_recycle_time", "600")
        .set("oslo_middleware", "enable_proxy_headers_parsing", "true");
    authtoken::set(&mut ini, &i.keystone, &i.cache);
    ini.merge(&i.template.config_overrides);
    ini.render()
}

/// uwsgi's configuration for the Placement API.
pub fn uwsgi_ini(i: &PlacementInputs<'_>) -> String {
    Uwsgi {
        listen: &i.listen,
        python_home: i.paths.python_home.as_deref(),
        workers: i.workers,
        module: "placement.wsgi.api:application",
        config_dir_env: ("OS_PLACEMENT_CONFIG_DIR", &i.paths.config_dir),
    }
    .render()
}

/// The db sync command (`placement-manage` from the image's PATH or the given binary).
pub fn db_sync_command(placement_manage: &str, config_dir: &str) -> Vec<String> {
    vec![
        placement_manage.to_string(),
        "--config-file".into(),
        format!("{config_dir}/placement.conf"),
        "db".into(),
        "sync".into(),
    ]
}

/// Hash of the db sync step's inputs: the image and everything in placement.conf.
pub fn db_sync_hash(image: &str, placement_conf: &str) -> String {
    InputHash::new()
        .add("image", image)
        .add("conf", placement_conf)
        .short()
}

/// Hash of the API's configuration (the Deployment's pod-template annotation).
pub fn config_hash(image: &str, placement_conf: &str, uwsgi_ini: &str) -> String {
    InputHash::new()
        .add("placement.conf", placement_conf)
        .add("uwsgi.ini", uwsgi_ini)
        .add("image", image)
        .short()
}

/// The files of the config Secret.
pub fn config_files(i: &PlacementInputs<'_>) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("placement.conf".to_string(), placement_conf(i)),
        ("uwsgi.ini".to_string(), uwsgi_ini(i)),
    ])
}

/// The in-cluster URL of a Placement's Service (`<name>-api`).
pub fn internal_url(name: &str, namespace: &str) -> String {
    crate::service_user::internal_url(name, namespace, PORT)
}

/// The catalog entry the service-user step registers: user `username` in `project`, service
/// `placement` of type `placement`, endpoints at `public_url` and `internal_url` in `region`
/// (normally Keystone's region; the boot proof registers in a region of its own).
pub fn service_entry(
    keystone: &KeystoneAuth,
    region: &str,
    public_url: &str,
    internal_url: &str,
) -> ServiceEntry {
    ServiceEntry::for_service(
        keystone,
        SERVICE_TYPE,
        SERVICE_TYPE,
        "OpenStack Placement",
        region,
        public_url,
        internal_url,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::{self, JobParams, Owner};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn template() -> ServiceTemplate {
        let mut t = ServiceTemplate::default();
        t.config_overrides.insert(
            "placement".into(),
            BTreeMap::from([("max_allocation_candidates".into(), "1000".into())]),
        );
        t
    }

    fn inputs(t: &ServiceTemplate) -> PlacementInputs<'_> {
        PlacementInputs {
            template: t,
            database: Database {
                host: "db.example.org".into(),
                port: 3306,
                name: "placement".into(),
                user: "placement".into(),
                password: "dbsecret".into(),
                ca_file: Some("/etc/placement/db-ca/ca.crt".into()),
                verify: Default::default(),
                server_name: None,
            },
            keystone: KeystoneAuth {
                auth_url: "http://keystone-api.os.svc:5000/v3".into(),
                www_authenticate_uri: "https://keystone.example.org/v3".into(),
                region: "RegionOne".into(),
                username: "placement".into(),
                password: "kssecret".into(),
                project: "service".into(),
            },
            cache: crate::cache::Cache::plain(vec!["mc-0:11211".into(), "mc-1:11211".into()]),
            paths: Paths::pod(),
            listen: format!("0.0.0.0:{PORT}"),
            workers: 2,
        }
    }

    #[test]
    fn placement_conf_snapshot() {
        let t = template();
        insta::assert_snapshot!(placement_conf(&inputs(&t)));
        insta::assert_snapshot!(uwsgi_ini(&inputs(&t)));
    }

    #[test]
    fn the_options_validation_refuses_are_the_ones_rendered() {
        let t = ServiceTemplate::default();
        let ini = placement_conf(&inputs(&t));
        for (section, key) in controlplane_api::validation::PLACEMENT_OWNED_OPTIONS {
            let line = ini
                .split("\n[")
                .find(|s| {
                    s.trim_start_matches('[')
                        .starts_with(&format!("{section}]"))
                })
                .map(|s| s.lines().any(|l| l.starts_with(&format!("{key} = "))));
            assert_eq!(
                line,
                Some(true),
                "[{section}] {key} is owned but not rendered"
            );
        }
    }

    #[test]
    fn a_tls_cache_gives_the_middleware_its_tls_options() {
        let t = ServiceTemplate::default();
        let mut i = inputs(&t);
        i.cache.tls = Some(crate::cache::CacheTls {
            ca_file: "/etc/ssl/cache-ca/ca.crt".into(),
            client_cert: None,
            verify: controlplane_api::external::VerifyMode::Full,
        });
        let ini = Ini::parse(&placement_conf(&i));
        for (k, v) in [
            ("memcache_tls_enabled", "true"),
            ("memcache_tls_cafile", "/etc/ssl/cache-ca/ca.crt"),
            ("memcache_use_advanced_pool", "true"),
        ] {
            assert_eq!(ini.get("keystone_authtoken", k), Some(v), "{k}");
        }
        assert_eq!(ini.get("keystone_authtoken", "memcache_tls_certfile"), None);
        let plain = Ini::parse(&placement_conf(&inputs(&t)));
        assert_eq!(
            plain.get("keystone_authtoken", "memcache_tls_enabled"),
            None
        );
    }

    #[test]
    fn no_cache_means_no_memcached_servers() {
        let t = template();
        let mut i = inputs(&t);
        i.cache = crate::cache::Cache::default();
        let ini = placement_conf(&i);
        assert!(!ini.contains("memcached_servers"), "{ini}");
        assert!(ini.contains("auth_strategy = keystone"));
    }

    #[test]
    fn overrides_reach_the_sync_hash_and_the_config_hash() {
        let t = template();
        let a = placement_conf(&inputs(&t));
        let mut t2 = template();
        t2.config_overrides.insert(
            "DEFAULT".into(),
            BTreeMap::from([("debug".into(), "true".into())]),
        );
        let b = placement_conf(&inputs(&t2));
        assert_ne!(db_sync_hash("img", &a), db_sync_hash("img", &b));
        assert_eq!(db_sync_hash("img", &a), db_sync_hash("img", &a));
        assert_ne!(config_hash("img", &a, ""), config_hash("img", &b, ""));
    }

    #[test]
    fn db_sync_job_snapshot() {
        let t = template();
        let i = inputs(&t);
        let owner = Owner {
            reference: OwnerReference {
                api_version: "controlplane.sunet.se/v1alpha1".into(),
                kind: "Placement".into(),
                name: "placement".into(),
                uid: "0000-1111".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            },
            namespace: "os".into(),
            instance: "placement".into(),
            service: "placement".into(),
        };
        let hash = db_sync_hash("quay.io/openstack/placement:2026.1", &placement_conf(&i));
        let job = objects::job(
            &owner,
            JobParams {
                name: format!("placement-db-sync-{hash}-0"),
                step: "db-sync".into(),
                hash: hash.clone(),
                image: "quay.io/openstack/placement:2026.1".into(),
                command: db_sync_command("placement-manage", POD_CONFIG_DIR),
                env: vec![],
                volumes: vec![objects::secret_volume(
                    "config",
                    "placement-config",
                    POD_CONFIG_DIR,
                )],
            },
        );
        insta::assert_yaml_snapshot!(job);
    }

    #[test]
    fn every_rendered_option_is_one_placement_defines() {
        let t = template();
        crate::ini::assert_options_known(
            controlplane_api::ServiceName::Placement,
            &placement_conf(&inputs(&t)),
            &[],
        );
    }
}
