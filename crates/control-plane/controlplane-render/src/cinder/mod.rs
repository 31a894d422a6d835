//! Cinder's configuration: `cinder.conf` (database, message queue, `[keystone_authtoken]`,
//! `[nova]`, the backend block), the files the backends read, the uwsgi configuration of the
//! API, the commands of the db sync Jobs and of the scheduler and volume services, and the
//! catalog entries of its service-user step (`block-storage` and `volumev3`).
//!
//! One `cinder.conf` serves the three processes: the API (uwsgi), `cinder-scheduler` and
//! `cinder-volume` (one replica set for all backends; `backend_host` makes the volumes belong
//! to a stable host, not to a pod). `api-paste.ini` and `resource_filters.json` are the image's
//! own, so the rendered files live in a directory of their own beside them.

use std::collections::BTreeMap;

use controlplane_api::common::ServiceTemplate;

use crate::authtoken::{self, KeystoneAuth};
use crate::database::Database;
use crate::hash::InputHash;
use crate::ini::Ini;
use crate::service_user::ServiceEntry;
use crate::uwsgi::Uwsgi;

pub mod backend;
pub mod messaging;
pub mod services;
pub mod zones;

pub use backend::{Backend, BackendKind, Nfs, Rbd};
pub use messaging::{Messaging, MessagingTls};

/// Port the Cinder API listens on inside the pod and on its Service.
pub const PORT: u16 = 8776;
/// Catalog service type of the block-storage API (the current name).
pub const SERVICE_TYPE: &str = "block-storage";
/// Catalog service name of the `block-storage` entry.
pub const SERVICE_NAME: &str = "cinder";
/// The legacy type Nova and older clients still look up.
pub const LEGACY_SERVICE_TYPE: &str = "volumev3";
/// Catalog service name of the `volumev3` entry.
pub const LEGACY_SERVICE_NAME: &str = "cinderv3";
/// Where the rendered files are mounted in pods (a directory of its own, so the image's
/// `/etc/cinder` with `api-paste.ini`, `resource_filters.json` and rootwrap stays visible).
pub const POD_CONFIG_DIR: &str = "/etc/cinder/rendered";
/// Where the image holds Cinder's own `api-paste.ini` and `resource_filters.json`: the
/// service's `data_files`, installed under the venv's prefix (`/opt/openstack`).
pub const IMAGE_CONFIG_DIR: &str = "/opt/openstack/etc/cinder";
/// Cinder's `state_path` in pods: a writable emptyDir (the image has no `/var/lib/cinder`,
/// and its user could not create it); locks, coordination files and NFS mount points.
pub const POD_STATE_DIR: &str = "/var/lib/cinder";

/// The oslo.config namespaces of Cinder's `cinder-config-generator.conf`: what
/// `oslo-config-validator` checks `cinder.conf` against.
pub const OPTION_NAMESPACES: &[&str] = &[
    "castellan.config",
    "cinder",
    "keystonemiddleware.auth_token",
    "osprofiler",
    "oslo.config",
    "oslo.concurrency",
    "oslo.db",
    "oslo.log",
    "oslo.messaging",
    "oslo.middleware",
    "oslo.policy",
    "oslo.privsep",
    "oslo.reports",
    "oslo.service.periodic_task",
    "oslo.service.service",
    "oslo.service.sslutils",
    "oslo.service.wsgi",
    "oslo.versionedobjects",
];

/// Where the rendered files are found and where Cinder keeps its state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paths {
    /// Directory holding `cinder.conf`, `uwsgi.ini` and the backends' files.
    pub config_dir: String,
    /// Cinder's `api-paste.ini` (the image's own).
    pub api_paste_config: String,
    /// Cinder's `resource_filters.json` (the image's own).
    pub resource_filters: String,
    /// `state_path` (locks, NFS mount points, file coordination below it).
    pub state_path: String,
    /// A log file; `None` logs to stderr (pods).
    pub log_file: Option<String>,
    /// uwsgi `home` (a virtualenv), when not the image's system Python.
    pub python_home: Option<String>,
}

/// The writable state directory every Cinder pod and Job mounts at [`POD_STATE_DIR`].
pub fn state_volume() -> (
    k8s_openapi::api::core::v1::Volume,
    k8s_openapi::api::core::v1::VolumeMount,
) {
    crate::objects::empty_dir_volume("state", POD_STATE_DIR)
}

impl Paths {
    /// The layout inside Cinder pods.
    pub fn pod() -> Self {
        Paths {
            config_dir: POD_CONFIG_DIR.into(),
            api_paste_config: format!("{IMAGE_CONFIG_DIR}/api-paste.ini"),
            resource_filters: format!("{IMAGE_CONFIG_DIR}/resource_filters.json"),
            state_path: POD_STATE_DIR.into(),
            log_file: None,
            python_home: None,
        }
    }

    /// The path of `cinder.conf`.
    pub fn cinder_conf(&self) -> String {
        format!("{}/cinder.conf", self.config_dir.trim_end_matches('/'))
    }
}

/// Everything Cinder's configuration is rendered from.
#[derive(Clone, Debug)]
pub struct CinderInputs<'a> {
    /// Replicas, image, resources and the user's config overrides (sections of `cinder.conf`).
    pub template: &'a ServiceTemplate,
    /// Resolved database (`[database]`).
    pub database: Database,
    /// The `messaging` external service.
    pub messaging: Messaging,
    /// The deployed Keystone and Cinder's service user (`[keystone_authtoken]`, and `[nova]`
    /// for the volume events Cinder sends to Nova).
    pub keystone: KeystoneAuth,
    /// The `cache` external service (memcached: servers, TLS, SASL) (keystonemiddleware's token cache), empty without a cache.
    pub cache: crate::cache::Cache,
    /// The backend block (validated with [`backend::validate`]).
    pub backends: Vec<Backend>,
    /// The host name every cinder-volume replica reports its backends under (`backend_host`).
    pub volume_host: String,
    /// File locations.
    pub paths: Paths,
    /// Address uwsgi listens on, e.g. `0.0.0.0:8776`.
    pub listen: String,
    /// uwsgi worker processes.
    pub workers: u32,
}

fn keystone_auth(ini: &mut Ini, section: &str, k: &KeystoneAuth) {
    ini.set(section, "auth_type", "password")
        .set(section, "auth_url", k.auth_url.clone())
        .set(section, "region_name", k.region.clone())
        .set(section, "username", k.username.clone())
        .set(section, "password", k.password.clone())
        .set(section, "project_name", k.project.clone())
        .set(section, "user_domain_name", "Default")
        .set(section, "project_domain_name", "Default");
}

/// `cinder.conf`: the operator's settings with the user's overrides merged over them.
pub fn cinder_conf(i: &CinderInputs<'_>) -> String {
    let p = &i.paths;
    let state = p.state_path.trim_end_matches('/');
    let mut ini = Ini::default();
    ini.set("DEFAULT", "debug", "false");
    match &p.log_file {
        Some(f) => ini.set("DEFAULT", "log_file", f.clone()),
        None => ini.set("DEFAULT", "use_stderr", "true"),
    };
    let names: Vec<&str> = i.backends.iter().map(|b| b.name.as_str()).collect();
    ini.set("DEFAULT", "auth_strategy", "keystone")
        .set("DEFAULT", "api_paste_config", p.api_paste_config.clone())
        .set(
            "DEFAULT",
            "resource_query_filters_file",
            p.resource_filters.clone(),
        )
        .set("DEFAULT", "state_path", state)
        // A stable service host for the API and scheduler (the volume services' records use
        // `backend_host`): pod names would leave a "down" record behind at every rollout.
        .set("DEFAULT", "host", i.volume_host.clone())
        .set("DEFAULT", "enabled_backends", names.join(","))
        // Cinder finds Glance (images to volumes) through the catalog; pods reach the internal
        // endpoints.
        .set("DEFAULT", "glance_catalog_info", "image:glance:internalURL")
        .set("database", "connection", i.database.url())
        .set("database", "max_retries", "-1")
        .set("database", "connection_recycle_time", "600")
        .set("oslo_concurrency", "lock_path", format!("{state}/locks"))
        // Nothing consumes notifications; the queue carries RPC only.
        .set("oslo_messaging_notifications", "driver", "noop")
        .set("oslo_middleware", "enable_proxy_headers_parsing", "true");
    i.messaging.render_into(&mut ini);
    authtoken::set(&mut ini, &i.keystone, &i.cache);
    keystone_auth(&mut ini, "nova", &i.keystone);
    ini.set("nova", "interface", "internal");
    for b in &i.backends {
        b.render_into(&mut ini, &p.config_dir, state, &i.volume_host);
    }
    ini.merge(&i.template.config_overrides);
    ini.render()
}

/// `cinder.conf` with the Glance client verifying Glance with `ca_file` (Cinder's Glance client
/// reads `[DEFAULT] glance_ca_certificates_file`, not a keystoneauth section's `cafile`).
pub fn with_glance_ca(cinder_conf: &str, ca_file: &str) -> String {
    let mut ini = Ini::parse(cinder_conf);
    ini.set("DEFAULT", "glance_ca_certificates_file", ca_file);
    ini.render()
}

/// uwsgi's configuration for the Cinder API.
pub fn uwsgi_ini(i: &CinderInputs<'_>) -> String {
    let mut s = Uwsgi {
        listen: &i.listen,
        python_home: i.paths.python_home.as_deref(),
        workers: i.workers,
        module: "cinder.wsgi.api:application",
        config_dir_env: ("OS_CINDER_CONFIG_DIR", &i.paths.config_dir),
    }
    .render();
    // Cinder's WSGI entry point parses sys.argv (uwsgi's pyargv) for its configuration file;
    // the configuration-directory variable of the shared settings is not read by Cinder.
    s.push_str(&format!(
        "pyargv = --config-file {}\n",
        i.paths.cinder_conf()
    ));
    s
}

fn with_config(program: &str, paths: &Paths, rest: &[&str]) -> Vec<String> {
    let mut v = vec![
        program.to_string(),
        "--config-file".into(),
        paths.cinder_conf(),
    ];
    v.extend(rest.iter().map(|s| s.to_string()));
    v
}

/// The db sync command (`cinder-manage` from the image's PATH or the given binary).
pub fn db_sync_command(cinder_manage: &str, paths: &Paths) -> Vec<String> {
    with_config(cinder_manage, paths, &["db", "sync"])
}

/// The online data migrations (after every service runs the new release; exits non-zero while
/// migrations remain, so a retried Job runs them to completion).
pub fn online_data_migrations_command(cinder_manage: &str, paths: &Paths) -> Vec<String> {
    with_config(cinder_manage, paths, &["db", "online_data_migrations"])
}

/// The scheduler service.
pub fn scheduler_command(program: &str, paths: &Paths) -> Vec<String> {
    with_config(program, paths, &[])
}

/// The volume service.
pub fn volume_command(program: &str, paths: &Paths) -> Vec<String> {
    with_config(program, paths, &[])
}

/// Hash of the db sync step's inputs: the image and everything in cinder.conf.
pub fn db_sync_hash(image: &str, cinder_conf: &str) -> String {
    InputHash::new()
        .add("image", image)
        .add("conf", cinder_conf)
        .short()
}

/// Hash of the online data migrations step's inputs (a step of its own: it runs after the
/// services roll, so its Job must not share the db sync Job's name).
pub fn online_migrations_hash(image: &str, cinder_conf: &str) -> String {
    InputHash::new()
        .add("step", "online-data-migrations")
        .add("image", image)
        .add("conf", cinder_conf)
        .short()
}

/// Hash of the services' configuration (the Deployments' pod-template annotation).
pub fn config_hash(image: &str, files: &BTreeMap<String, String>) -> String {
    let mut h = InputHash::new().add("image", image);
    for (name, text) in files {
        h = h.add(name, text);
    }
    h.short()
}

/// The files of the config Secret: `cinder.conf`, `uwsgi.ini` and each backend's file.
pub fn config_files(i: &CinderInputs<'_>) -> BTreeMap<String, String> {
    let mut files = BTreeMap::from([
        ("cinder.conf".to_string(), cinder_conf(i)),
        ("uwsgi.ini".to_string(), uwsgi_ini(i)),
    ]);
    for b in &i.backends {
        files.insert(b.file_name(), b.file_text());
    }
    files
}

/// `cinder.conf` as `oslo-config-validator` can check it: each backend section's options
/// checked as `[backend_defaults]` ones (where Cinder registers every driver's options; the
/// backend sections themselves are registered only when cinder-volume starts), except
/// `backend_host`, which `cinder-volume` registers in each backend's own section only.
pub fn validation_view(cinder_conf: &str, backends: &[Backend]) -> String {
    let mut out = String::with_capacity(cinder_conf.len());
    let mut in_backend = false;
    for line in cinder_conf.lines() {
        if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            in_backend = backends.iter().any(|b| b.name == s);
            out.push_str(if in_backend {
                "[backend_defaults]"
            } else {
                line
            });
        } else if in_backend && line.starts_with("backend_host = ") {
            continue;
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// The in-cluster URL of a Cinder's Service (`<name>-api`).
pub fn internal_url(name: &str, namespace: &str) -> String {
    crate::service_user::internal_url(name, namespace, PORT)
}

/// The catalog entries the service-user step registers: `cinder` of type `block-storage` and
/// `cinderv3` of type `volumev3`, both at `<url>/v3` (Cinder takes the project from the token
/// when the URL has none) in `region`.
pub fn service_entries(
    keystone: &KeystoneAuth,
    region: &str,
    public_url: &str,
    internal_url: &str,
) -> [ServiceEntry; 2] {
    let v3 = |u: &str| format!("{}/v3", u.trim_end_matches('/'));
    let (public, internal) = (v3(public_url), v3(internal_url));
    [
        ServiceEntry::for_service(
            keystone,
            SERVICE_NAME,
            SERVICE_TYPE,
            "OpenStack Block Storage",
            region,
            &public,
            &internal,
        ),
        ServiceEntry::for_service(
            keystone,
            LEGACY_SERVICE_NAME,
            LEGACY_SERVICE_TYPE,
            "OpenStack Block Storage (legacy type)",
            region,
            &public,
            &internal,
        ),
    ]
}

#[cfg(test)]
mod tests;
