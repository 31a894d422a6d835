//! Glance's configuration: `glance-api.conf`, its paste pipeline, the uwsgi configuration, the
//! db sync command and the catalog entry of its service-user step. Images go to the `file`
//! store (a directory: a PVC in pods) or the `s3` store (the `objectStorage` external service),
//! configured as glance_store's multi-store backends; `web-download` import is enabled only
//! with a host allow-list. The database Job, the uwsgi settings, `[keystone_authtoken]`, the
//! service-user script and the Kubernetes objects are the ones every service shares.

use std::collections::BTreeMap;

use controlplane_api::common::ServiceTemplate;

use crate::authtoken::{self, KeystoneAuth};
use crate::database::Database;
use crate::hash::InputHash;
use crate::ini::Ini;
use crate::service_user::ServiceEntry;
use crate::uwsgi::Uwsgi;

pub mod pod;

/// Port the Glance API listens on inside the pod and on its Service.
pub const PORT: u16 = 9292;
/// Catalog service type of Glance.
pub const SERVICE_TYPE: &str = "image";
/// Catalog service name of Glance.
pub const SERVICE_NAME: &str = "glance";
/// Where `glance-api.conf`, `glance-api-paste.ini` and `uwsgi.ini` are mounted in pods.
pub const POD_CONFIG_DIR: &str = "/etc/glance";
/// Where Glance keeps its staging and tasks stores and its locks in pods.
pub const POD_STATE_DIR: &str = "/var/lib/glance";
/// Where the file store's PVC is mounted in pods.
pub const POD_IMAGES_DIR: &str = "/var/lib/glance/images";
/// Where the S3 endpoint's CA bundle Secret is mounted in pods (beside, not inside, the config
/// Secret's read-only mount, which cannot hold a mount point).
pub const POD_S3_CA_DIR: &str = "/etc/glance-s3-ca";
/// Backend id of the file store in `enabled_backends`. Images record the id of the store
/// holding them, so the ids are fixed: renaming one would orphan every image in it.
pub const FILE_BACKEND: &str = "file";
/// Backend id of the S3 store in `enabled_backends`.
pub const S3_BACKEND: &str = "s3";

/// The paste pipeline of the `keystone` flavor, from Glance 2026.1's `glance-api-paste.ini`
/// (the other flavors are left out: `[paste_deploy] flavor` is owned by the operator). Glance
/// reads it from its configuration directory, which the config Secret replaces in pods, so it
/// is rendered with the rest.
pub const PASTE_INI: &str = "\
[composite:glance-api-keystone]
paste.composite_factory = glance.api:root_app_factory
/: api
/healthcheck: healthcheck

[composite:api]
paste.composite_factory = glance.api:pipeline_factory
keystone = cors http_proxy_to_wsgi versionnegotiation osprofiler authtoken context rootapp

[composite:rootapp]
paste.composite_factory = glance.api:root_app_factory
/: apiversions
/v2: apiv2app

[app:apiversions]
paste.app_factory = glance.api.versions:create_resource

[app:apiv2app]
paste.app_factory = glance.api.v2.router:API.factory

[app:healthcheck]
paste.app_factory = oslo_middleware:Healthcheck.app_factory
backends = disable_by_file
disable_by_file_path = /etc/glance/healthcheck_disable

[filter:versionnegotiation]
paste.filter_factory = glance.api.middleware.version_negotiation:VersionNegotiationFilter.factory

[filter:context]
paste.filter_factory = glance.api.middleware.context:ContextMiddleware.factory

[filter:authtoken]
paste.filter_factory = keystonemiddleware.auth_token:filter_factory
delay_auth_decision = true

[filter:osprofiler]
paste.filter_factory = osprofiler.web:WsgiMiddleware.factory

[filter:cors]
paste.filter_factory = oslo_middleware.cors:filter_factory
oslo_config_project = glance
oslo_config_program = glance-api

[filter:http_proxy_to_wsgi]
paste.filter_factory = oslo_middleware:HTTPProxyToWSGI.factory
";

/// An S3 bucket Glance stores images in (glance_store's `s3` driver).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Store {
    /// Endpoint URL with its scheme, e.g. `https://rgw.example.org:443`; `https://` makes
    /// glance_store use TLS.
    pub endpoint: String,
    /// Access key id.
    pub access_key: String,
    /// Secret access key.
    pub secret_key: String,
    /// Bucket name.
    pub bucket: String,
    /// Region for request signing and bucket creation; `None` leaves it to the endpoint (the
    /// right choice for Ceph RGW, whose location constraints are zone-group names).
    pub region: Option<String>,
    /// Whether Glance creates the bucket on its first upload if it does not exist.
    pub create_bucket: bool,
    /// CA bundle verifying the endpoint's certificate; `None` uses botocore's bundle.
    /// glance_store can neither skip host-name checks nor verification, so the external
    /// service's `CaOnly` and `Insecure` modes cannot be honoured and are refused upstream.
    pub ca_file: Option<String>,
}

/// One image store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// glance_store's `file` driver on a directory (a PVC in pods: every replica must see it).
    File {
        /// The directory holding the images.
        dir: String,
    },
    /// glance_store's `s3` driver.
    S3(S3Store),
}

impl Backend {
    /// The backend's id in `enabled_backends` and its section name.
    pub fn id(&self) -> &'static str {
        match self {
            Backend::File { .. } => FILE_BACKEND,
            Backend::S3(_) => S3_BACKEND,
        }
    }

    fn driver(&self) -> &'static str {
        match self {
            Backend::File { .. } => "file",
            Backend::S3(_) => "s3",
        }
    }
}

/// The `web-download` import method's filter. Glance treats an empty host list as "every
/// host", which lets any user make Glance fetch from the cluster's internal services, so an
/// empty list is refused rather than rendered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebDownload {
    /// URL schemes allowed, e.g. `https`.
    pub allowed_schemes: Vec<String>,
    /// Host names or addresses allowed (as they appear in the URL; IP addresses normalised).
    pub allowed_hosts: Vec<String>,
    /// Ports allowed when the URL names one (URLs without a port pass Glance's port filter).
    pub allowed_ports: Vec<u16>,
}

/// Where the rendered files are found and where Glance keeps its state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paths {
    /// Directory holding `glance-api.conf`, `glance-api-paste.ini` and `uwsgi.ini`.
    pub config_dir: String,
    /// Directory of the staging store (imports), the tasks store and the locks.
    pub state_dir: String,
    /// A log file; `None` logs to stderr (pods).
    pub log_file: Option<String>,
    /// uwsgi `home` (a virtualenv), when not the image's system Python.
    pub python_home: Option<String>,
}

impl Paths {
    /// The layout inside Glance pods.
    pub fn pod() -> Self {
        Paths {
            config_dir: POD_CONFIG_DIR.into(),
            state_dir: POD_STATE_DIR.into(),
            log_file: None,
            python_home: None,
        }
    }
}

/// Everything Glance's configuration is rendered from.
#[derive(Clone, Debug)]
pub struct GlanceInputs<'a> {
    /// Replicas, image, resources and the user's config overrides.
    pub template: &'a ServiceTemplate,
    /// Resolved database (`[database]`).
    pub database: Database,
    /// The deployed Keystone and the service user.
    pub keystone: KeystoneAuth,
    /// The `cache` external service (memcached: servers, TLS, SASL) (keystonemiddleware's token cache), empty without a cache.
    pub cache: crate::cache::Cache,
    /// The image stores; the first is the default one new images go to.
    pub backends: Vec<Backend>,
    /// `web-download` import with its allow-list; `None` disables the method.
    pub web_download: Option<WebDownload>,
    /// Public URL of the image API (`public_endpoint`, the links in its answers), if known.
    pub public_url: Option<String>,
    /// File locations.
    pub paths: Paths,
    /// Address uwsgi listens on, e.g. `0.0.0.0:9292`.
    pub listen: String,
    /// uwsgi worker processes.
    pub workers: u32,
}

/// Why inputs cannot be rendered into a working Glance.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GlanceConfigError {
    /// No store.
    #[error("Glance needs at least one image store (file or s3)")]
    NoBackend,
    /// Two stores of one kind.
    #[error("more than one {0} store: Glance's stores are one per kind")]
    DuplicateBackend(&'static str),
    /// The S3 endpoint has no scheme.
    #[error("S3 endpoint {0:?} must start with http:// or https://")]
    S3Endpoint(String),
    /// A key glance_store cannot carry in its image location URLs.
    #[error(
        "the S3 {0} contains one of '@', ':', '?', '#' or a space, which glance_store's \
         location URLs (s3://KEY:SECRET@host/bucket/image) cannot carry"
    )]
    S3Key(&'static str),
    /// Bucket missing.
    #[error("S3 store without a bucket name")]
    S3Bucket,
    /// Allow-list empty or malformed.
    #[error("web-download: {0}")]
    WebDownload(String),
}

fn check(i: &GlanceInputs<'_>) -> Result<(), GlanceConfigError> {
    if i.backends.is_empty() {
        return Err(GlanceConfigError::NoBackend);
    }
    for (n, b) in i.backends.iter().enumerate() {
        if i.backends[..n].iter().any(|o| o.id() == b.id()) {
            return Err(GlanceConfigError::DuplicateBackend(b.id()));
        }
        if let Backend::S3(s) = b {
            if !(s.endpoint.starts_with("http://") || s.endpoint.starts_with("https://")) {
                return Err(GlanceConfigError::S3Endpoint(s.endpoint.clone()));
            }
            let bad = |v: &str| v.is_empty() || v.contains(['@', ':', '?', '#', ' ']);
            if bad(&s.access_key) || s.access_key.contains('/') {
                return Err(GlanceConfigError::S3Key("access key"));
            }
            if bad(&s.secret_key) {
                return Err(GlanceConfigError::S3Key("secret key"));
            }
            if s.bucket.is_empty() {
                return Err(GlanceConfigError::S3Bucket);
            }
        }
    }
    if let Some(w) = &i.web_download {
        let wd = |m: &str| Err(GlanceConfigError::WebDownload(m.to_string()));
        if w.allowed_hosts.is_empty() {
            return wd(
                "the allow-list names no host; Glance would fetch from any host, internal services included",
            );
        }
        if w.allowed_schemes.is_empty() || w.allowed_ports.is_empty() {
            return wd("the allow-list needs at least one scheme and one port");
        }
        let item_ok =
            |v: &String| !v.is_empty() && !v.contains([',', '[', ']', '"', '\'', ' ', '\n', '\r']);
        if !w.allowed_hosts.iter().all(item_ok) || !w.allowed_schemes.iter().all(item_ok) {
            return wd("hosts and schemes are single words (no ',', brackets, quotes or spaces)");
        }
        if w.allowed_ports.contains(&0) {
            return wd("port 0 is not a port");
        }
    }
    Ok(())
}

/// oslo.config's bracketed list (the import options are `bounds=True` lists).
fn list<T: ToString>(items: &[T]) -> String {
    let items: Vec<String> = items.iter().map(ToString::to_string).collect();
    format!("[{}]", items.join(","))
}

/// `glance-api.conf`: the operator's settings with the user's overrides merged over them.
pub fn glance_api_conf(i: &GlanceInputs<'_>) -> Result<String, GlanceConfigError> {
    check(i)?;
    let mut ini = Ini::default();
    ini.set("DEFAULT", "debug", "false");
    match &i.paths.log_file {
        Some(f) => ini.set("DEFAULT", "log_file", f.clone()),
        None => ini.set("DEFAULT", "use_stderr", "true"),
    };
    if let Some(u) = &i.public_url {
        ini.set("DEFAULT", "public_endpoint", u.trim_end_matches('/'));
    }
    let backends: Vec<String> = i
        .backends
        .iter()
        .map(|b| format!("{}:{}", b.id(), b.driver()))
        .collect();
    ini.set("DEFAULT", "enabled_backends", backends.join(","))
        .set("glance_store", "default_backend", i.backends[0].id());
    for b in &i.backends {
        match b {
            Backend::File { dir } => {
                ini.set(b.id(), "filesystem_store_datadir", dir.clone());
            }
            Backend::S3(s) => {
                let id = b.id();
                ini.set(id, "s3_store_host", s.endpoint.trim_end_matches('/'))
                    .set(id, "s3_store_access_key", s.access_key.clone())
                    .set(id, "s3_store_secret_key", s.secret_key.clone())
                    .set(id, "s3_store_bucket", s.bucket.clone())
                    .set(
                        id,
                        "s3_store_create_bucket_on_put",
                        s.create_bucket.to_string(),
                    )
                    // Path style: virtual-host style needs wildcard DNS for every bucket,
                    // which self-hosted S3 (Ceph RGW) rarely has, and fails for IP endpoints.
                    .set(id, "s3_store_bucket_url_format", "path");
                if let Some(r) = &s.region {
                    ini.set(id, "s3_store_region_name", r.clone());
                }
                if let Some(ca) = &s.ca_file {
                    ini.set(id, "s3_store_cacert", ca.clone());
                }
            }
        }
    }
    // The reserved stores of interoperable import: data is staged, then moved to a backend.
    let state = i.paths.state_dir.trim_end_matches('/');
    ini.set(
        "os_glance_staging_store",
        "filesystem_store_datadir",
        format!("{state}/staging"),
    )
    .set(
        "os_glance_tasks_store",
        "filesystem_store_datadir",
        format!("{state}/tasks"),
    )
    .set("oslo_concurrency", "lock_path", format!("{state}/locks"));
    let mut methods = vec!["glance-direct", "copy-image"];
    if let Some(w) = &i.web_download {
        methods.push("web-download");
        ini.set(
            "import_filtering_opts",
            "allowed_schemes",
            list(&w.allowed_schemes),
        )
        .set(
            "import_filtering_opts",
            "allowed_hosts",
            list(&w.allowed_hosts),
        )
        .set(
            "import_filtering_opts",
            "allowed_ports",
            list(&w.allowed_ports),
        );
    }
    ini.set("DEFAULT", "enabled_import_methods", list(&methods));
    ini.set("database", "connection", i.database.url())
        .set("database", "max_retries", "-1")
        .set("database", "connection_recycle_time", "600")
        .set("paste_deploy", "flavor", "keystone")
        // Glance sends notifications only through a message queue, which it is not given.
        .set("oslo_messaging_notifications", "driver", "noop")
        .set("oslo_middleware", "enable_proxy_headers_parsing", "true");
    authtoken::set(&mut ini, &i.keystone, &i.cache);
    ini.merge(&i.template.config_overrides);
    Ok(ini.render())
}

/// uwsgi's configuration for the Glance API (Glance's WSGI application: the `glance-api`
/// console script is the eventlet server Glance deprecated).
pub fn uwsgi_ini(i: &GlanceInputs<'_>) -> String {
    let mut s = Uwsgi {
        listen: &i.listen,
        python_home: i.paths.python_home.as_deref(),
        workers: i.workers,
        module: "glance.wsgi.api:application",
        config_dir_env: ("OS_GLANCE_CONFIG_DIR", &i.paths.config_dir),
    }
    .render();
    // Image uploads run as long as the bytes come; uwsgi's default socket timeout (4 s) would
    // cut a slow client's chunked upload.
    s.push_str("socket-timeout = 120\nchunked-input-timeout = 120\n");
    s
}

/// The db sync command (`glance-manage` from the image's PATH or the given binary).
pub fn db_sync_command(glance_manage: &str, config_dir: &str) -> Vec<String> {
    vec![
        glance_manage.to_string(),
        "--config-file".into(),
        format!("{config_dir}/glance-api.conf"),
        "db_sync".into(),
    ]
}

/// Hash of the db sync step's inputs: the image and everything in glance-api.conf.
pub fn db_sync_hash(image: &str, glance_api_conf: &str) -> String {
    InputHash::new()
        .add("image", image)
        .add("conf", glance_api_conf)
        .short()
}

/// Hash of the API's configuration (the Deployment's pod-template annotation).
pub fn config_hash(image: &str, files: &BTreeMap<String, String>) -> String {
    let mut h = InputHash::new().add("image", image);
    for (name, text) in files {
        h = h.add(name, text);
    }
    h.short()
}

/// The files of the config Secret (a Secret: the database URL, the service password and the
/// S3 secret key are in `glance-api.conf`).
pub fn config_files(i: &GlanceInputs<'_>) -> Result<BTreeMap<String, String>, GlanceConfigError> {
    Ok(BTreeMap::from([
        ("glance-api.conf".to_string(), glance_api_conf(i)?),
        ("glance-api-paste.ini".to_string(), PASTE_INI.to_string()),
        ("uwsgi.ini".to_string(), uwsgi_ini(i)),
    ]))
}

/// The in-cluster URL of a Glance's Service (`<name>-api`).
pub fn internal_url(name: &str, namespace: &str) -> String {
    crate::service_user::internal_url(name, namespace, PORT)
}

/// The catalog entry the service-user step registers: user `username` in `project`, service
/// `glance` of type `image`, endpoints at `public_url` and `internal_url` in `region`.
pub fn service_entry(
    keystone: &KeystoneAuth,
    region: &str,
    public_url: &str,
    internal_url: &str,
) -> ServiceEntry {
    ServiceEntry::for_service(
        keystone,
        SERVICE_NAME,
        SERVICE_TYPE,
        "OpenStack Image service",
        region,
        public_url,
        internal_url,
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::objects::{self, JobParams, Owner};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    pub(crate) fn template() -> ServiceTemplate {
        let mut t = ServiceTemplate::default();
        t.config_overrides.insert(
            "DEFAULT".into(),
            BTreeMap::from([("image_size_cap".into(), "10737418240".into())]),
        );
        t
    }

    pub(crate) fn owner() -> Owner {
        Owner {
            reference: OwnerReference {
                api_version: "controlplane.sunet.se/v1alpha1".into(),
                kind: "Glance".into(),
                name: "glance".into(),
                uid: "0000-2222".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            },
            namespace: "os".into(),
            instance: "glance".into(),
            service: "glance".into(),
        }
    }

    fn s3() -> S3Store {
        S3Store {
            endpoint: "https://rgw.example.org:443".into(),
            access_key: "AKIAEXAMPLE".into(),
            secret_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            bucket: "images".into(),
            region: None,
            create_bucket: true,
            ca_file: Some("/etc/glance/s3-ca/ca.crt".into()),
        }
    }

    pub(crate) fn inputs(t: &ServiceTemplate) -> GlanceInputs<'_> {
        GlanceInputs {
            template: t,
            database: Database {
                host: "db.example.org".into(),
                port: 3306,
                name: "glance".into(),
                user: "glance".into(),
                password: "dbsecret".into(),
                ca_file: None,
                verify: Default::default(),
                server_name: None,
            },
            keystone: KeystoneAuth {
                auth_url: "http://keystone-api.os.svc:5000/v3".into(),
                www_authenticate_uri: "https://keystone.example.org/v3".into(),
                region: "RegionOne".into(),
                username: "glance".into(),
                password: "kssecret".into(),
                project: "service".into(),
            },
            cache: crate::cache::Cache::plain(vec!["mc-0:11211".into()]),
            backends: vec![
                Backend::S3(s3()),
                Backend::File {
                    dir: "/var/lib/glance/images".into(),
                },
            ],
            web_download: Some(WebDownload {
                allowed_schemes: vec!["https".into()],
                allowed_hosts: vec!["cloud-images.ubuntu.com".into(), "192.0.2.10".into()],
                allowed_ports: vec![443],
            }),
            public_url: Some("https://image.example.org/".into()),
            paths: Paths::pod(),
            listen: format!("0.0.0.0:{PORT}"),
            workers: 2,
        }
    }

    pub(crate) fn conf(i: &GlanceInputs<'_>) -> Ini {
        Ini::parse(&glance_api_conf(i).expect("renders"))
    }

    #[test]
    fn glance_conf_snapshot() {
        let t = template();
        insta::assert_snapshot!(glance_api_conf(&inputs(&t)).expect("renders"));
        insta::assert_snapshot!(uwsgi_ini(&inputs(&t)));
    }

    #[test]
    fn the_first_backend_is_the_default_and_each_has_its_section() {
        let t = ServiceTemplate::default();
        let mut i = inputs(&t);
        let c = conf(&i);
        assert_eq!(
            c.get("DEFAULT", "enabled_backends"),
            Some("s3:s3,file:file")
        );
        assert_eq!(c.get("glance_store", "default_backend"), Some("s3"));
        assert_eq!(
            c.get("s3", "s3_store_host"),
            Some("https://rgw.example.org:443")
        );
        assert_eq!(
            c.get("s3", "s3_store_cacert"),
            Some("/etc/glance/s3-ca/ca.crt")
        );
        assert_eq!(c.get("s3", "s3_store_region_name"), None);
        assert_eq!(
            c.get("file", "filesystem_store_datadir"),
            Some("/var/lib/glance/images")
        );
        i.backends.reverse();
        let c = conf(&i);
        assert_eq!(c.get("glance_store", "default_backend"), Some("file"));
        i.backends.truncate(1);
        let c = conf(&i);
        assert_eq!(c.get("DEFAULT", "enabled_backends"), Some("file:file"));
        assert!(!c.0.contains_key("s3"));
    }

    #[test]
    fn web_download_is_enabled_only_with_an_allow_list() {
        let t = ServiceTemplate::default();
        let mut i = inputs(&t);
        let c = conf(&i);
        assert_eq!(
            c.get("DEFAULT", "enabled_import_methods"),
            Some("[glance-direct,copy-image,web-download]")
        );
        assert_eq!(
            c.get("import_filtering_opts", "allowed_hosts"),
            Some("[cloud-images.ubuntu.com,192.0.2.10]")
        );
        assert_eq!(
            c.get("import_filtering_opts", "allowed_ports"),
            Some("[443]")
        );
        i.web_download = None;
        let c = conf(&i);
        assert_eq!(
            c.get("DEFAULT", "enabled_import_methods"),
            Some("[glance-direct,copy-image]")
        );
        assert!(!c.0.contains_key("import_filtering_opts"));
        i.web_download = Some(WebDownload {
            allowed_schemes: vec!["https".into()],
            allowed_hosts: vec![],
            allowed_ports: vec![443],
        });
        assert!(matches!(
            glance_api_conf(&i),
            Err(GlanceConfigError::WebDownload(m)) if m.contains("no host")
        ));
        i.web_download = Some(WebDownload {
            allowed_schemes: vec!["https".into()],
            allowed_hosts: vec!["a.example,b.example".into()],
            allowed_ports: vec![443],
        });
        assert!(matches!(
            glance_api_conf(&i),
            Err(GlanceConfigError::WebDownload(_))
        ));
    }

    #[test]
    fn inputs_glance_store_cannot_use_are_refused() {
        let t = ServiceTemplate::default();
        let mut i = inputs(&t);
        i.backends.clear();
        assert_eq!(glance_api_conf(&i), Err(GlanceConfigError::NoBackend));
        i.backends = vec![
            Backend::File { dir: "/a".into() },
            Backend::File { dir: "/b".into() },
        ];
        assert_eq!(
            glance_api_conf(&i),
            Err(GlanceConfigError::DuplicateBackend("file"))
        );
        let with = |f: fn(&mut S3Store)| {
            let mut s = s3();
            f(&mut s);
            let mut i = inputs(&t);
            i.backends = vec![Backend::S3(s)];
            glance_api_conf(&i)
        };
        assert_eq!(
            with(|s| s.secret_key = "abc@def".into()),
            Err(GlanceConfigError::S3Key("secret key"))
        );
        assert_eq!(
            with(|s| s.access_key = "ab:c".into()),
            Err(GlanceConfigError::S3Key("access key"))
        );
        assert!(matches!(
            with(|s| s.endpoint = "rgw.example.org".into()),
            Err(GlanceConfigError::S3Endpoint(_))
        ));
        assert_eq!(with(|s| s.bucket.clear()), Err(GlanceConfigError::S3Bucket));
        // AWS-style secret keys with '/' and '+' are fine: glance_store parses them.
        assert!(with(|_| {}).is_ok());
    }

    #[test]
    fn the_options_validation_refuses_are_the_ones_rendered() {
        let t = ServiceTemplate::default();
        let c = conf(&inputs(&t));
        for (section, key) in controlplane_api::validation::GLANCE_OWNED_OPTIONS {
            assert!(
                c.get(section, key).is_some(),
                "[{section}] {key} is owned but not rendered"
            );
        }
        for key in authtoken::OWNED_OPTIONS {
            assert!(
                controlplane_api::validation::is_owned(
                    controlplane_api::ServiceName::Glance,
                    "keystone_authtoken",
                    key
                ),
                "[keystone_authtoken] {key} is rendered but not owned"
            );
        }
    }

    #[test]
    fn overrides_are_merged_and_reach_the_hashes() {
        let t = template();
        let a = config_files(&inputs(&t)).expect("renders");
        assert!(a["glance-api.conf"].contains("image_size_cap = 10737418240"));
        let mut t2 = template();
        t2.config_overrides.insert(
            "DEFAULT".into(),
            BTreeMap::from([("debug".into(), "true".into())]),
        );
        let b = config_files(&inputs(&t2)).expect("renders");
        assert_ne!(
            db_sync_hash("img", &a["glance-api.conf"]),
            db_sync_hash("img", &b["glance-api.conf"])
        );
        assert_eq!(config_hash("img", &a), config_hash("img", &a));
        assert_ne!(config_hash("img", &a), config_hash("img", &b));
        assert_ne!(config_hash("img", &a), config_hash("img2", &a));
    }

    #[test]
    fn the_paste_pipeline_authenticates() {
        assert!(PASTE_INI.contains("[composite:glance-api-keystone]"));
        let pipeline = PASTE_INI
            .lines()
            .find_map(|l| l.strip_prefix("keystone = "))
            .expect("keystone flavor");
        let f: Vec<&str> = pipeline.split_whitespace().collect();
        let pos = |n: &str| f.iter().position(|x| *x == n).expect(n);
        assert!(pos("authtoken") < pos("context") && pos("context") < pos("rootapp"));
    }

    #[test]
    fn db_sync_job_snapshot() {
        let t = template();
        let i = inputs(&t);
        let owner = owner();
        let conf = glance_api_conf(&i).expect("renders");
        let hash = db_sync_hash("quay.io/openstack/glance:2026.1", &conf);
        let job = objects::job(
            &owner,
            JobParams {
                name: format!("glance-db-sync-{hash}-0"),
                step: "db-sync".into(),
                hash: hash.clone(),
                image: "quay.io/openstack/glance:2026.1".into(),
                command: db_sync_command("glance-manage", POD_CONFIG_DIR),
                env: vec![],
                volumes: vec![objects::secret_volume(
                    "config",
                    "glance-config",
                    POD_CONFIG_DIR,
                )],
            },
        );
        insta::assert_yaml_snapshot!(job);
    }

    #[test]
    fn every_rendered_option_is_one_glance_defines() {
        let t = template();
        let conf = glance_api_conf(&inputs(&t)).unwrap();
        crate::ini::assert_options_known(controlplane_api::ServiceName::Glance, &conf, &[]);
        let with_ca = crate::tls::set_client_ca(&conf, &crate::tls::CLIENT_SECTIONS, "/x/ca");
        assert!(with_ca.contains("cafile = /x/ca"), "{with_ca}");
        crate::ini::assert_options_known(controlplane_api::ServiceName::Glance, &with_ca, &[]);
    }
}
