//! Keystone's configuration: `keystone.conf`, the uwsgi configuration, the database-creation
//! script and the commands of its Jobs. The same functions serve the pods (paths under
//! `/etc/keystone` and `/var/lib/keystone`) and the boot proof (paths in a temporary directory).

use controlplane_api::KeystoneSpec;

use crate::hash::InputHash;
use crate::ini::Ini;
use crate::uwsgi::Uwsgi;

pub use crate::database::{DB_INIT_SCRIPT, Database, db_init_env, db_init_hash};

/// Port the Keystone API listens on inside the pod and on its Service.
pub const PORT: u16 = 5000;

/// Where the rendered files are found by the processes that read them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paths {
    /// Directory holding `keystone.conf` and `uwsgi.ini`.
    pub config_dir: String,
    /// The fernet key repository (a mounted Secret in a pod).
    pub fernet_keys: String,
    /// The credential key repository.
    pub credential_keys: String,
    /// A log file; `None` logs to stderr (pods).
    pub log_file: Option<String>,
    /// uwsgi `home` (a virtualenv), when not the image's system Python.
    pub python_home: Option<String>,
}

impl Paths {
    /// The layout inside Keystone pods.
    pub fn pod() -> Self {
        Paths {
            config_dir: "/etc/keystone".into(),
            fernet_keys: "/var/lib/keystone/fernet-keys".into(),
            credential_keys: "/var/lib/keystone/credential-keys".into(),
            log_file: None,
            python_home: None,
        }
    }
}

/// Everything Keystone's configuration is rendered from.
#[derive(Clone, Debug)]
pub struct KeystoneInputs<'a> {
    /// The spec.
    pub spec: &'a KeystoneSpec,
    /// Resolved database.
    pub database: Database,
    /// The `cache` external service (memcached: servers, TLS, SASL), empty without a cache.
    pub cache: crate::cache::Cache,
    /// File locations.
    pub paths: Paths,
    /// Address uwsgi listens on, e.g. `0.0.0.0:5000`.
    pub listen: String,
    /// uwsgi worker processes.
    pub workers: u32,
}

/// `keystone.conf`: the operator's settings with the user's overrides merged over them (the
/// options the operator owns are refused by validation, so they cannot be overridden here).
pub fn keystone_conf(i: &KeystoneInputs<'_>) -> String {
    let t = &i.spec.tokens;
    let mut ini = Ini::default();
    ini.set("DEFAULT", "debug", "false");
    match &i.paths.log_file {
        Some(f) => ini.set("DEFAULT", "log_file", f.clone()),
        None => ini.set("DEFAULT", "use_stderr", "true"),
    };
    ini.set("database", "connection", i.database.url())
        .set("database", "max_retries", "-1")
        .set("database", "connection_recycle_time", "600")
        .set("token", "provider", "fernet")
        .set("token", "expiration", t.expiration_seconds.to_string())
        .set(
            "token",
            "allow_expired_window",
            t.allow_expired_window_seconds.to_string(),
        )
        .set(
            "fernet_tokens",
            "key_repository",
            i.paths.fernet_keys.clone(),
        )
        .set(
            "fernet_tokens",
            "max_active_keys",
            t.max_active_keys().to_string(),
        )
        .set(
            "fernet_receipts",
            "key_repository",
            i.paths.fernet_keys.clone(),
        )
        .set(
            "fernet_receipts",
            "max_active_keys",
            t.max_active_keys().to_string(),
        )
        .set(
            "credential",
            "key_repository",
            i.paths.credential_keys.clone(),
        )
        .set("oslo_middleware", "enable_proxy_headers_parsing", "true");
    crate::cache::set_oslo_cache(&mut ini, &i.cache);
    ini.merge(&i.spec.template.config_overrides);
    ini.render()
}

/// uwsgi's configuration for the Keystone API.
pub fn uwsgi_ini(i: &KeystoneInputs<'_>) -> String {
    Uwsgi {
        listen: &i.listen,
        python_home: i.paths.python_home.as_deref(),
        workers: i.workers,
        module: "keystone.wsgi.api:application",
        config_dir_env: ("OS_KEYSTONE_CONFIG_DIR", &i.paths.config_dir),
    }
    .render()
}

/// Arguments of `keystone-manage bootstrap` (the password comes from `OS_BOOTSTRAP_PASSWORD`,
/// never the command line). It creates the admin user, project and role, the `identity`
/// service and its public/internal/admin endpoints in the catalog; it is idempotent.
pub fn bootstrap_args(spec: &KeystoneSpec, internal_url: &str, public_url: &str) -> Vec<String> {
    [
        "bootstrap",
        "--bootstrap-username",
        "admin",
        "--bootstrap-project-name",
        "admin",
        "--bootstrap-role-name",
        "admin",
        "--bootstrap-service-name",
        "keystone",
        "--bootstrap-region-id",
        &spec.region,
        "--bootstrap-admin-url",
        internal_url,
        "--bootstrap-internal-url",
        internal_url,
        "--bootstrap-public-url",
        public_url,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Hash of the db_sync step's inputs: the image and everything in keystone.conf.
pub fn db_sync_hash(image: &str, keystone_conf: &str) -> String {
    InputHash::new()
        .add("image", image)
        .add("conf", keystone_conf)
        .short()
}

/// Hash of the bootstrap step's inputs.
pub fn bootstrap_hash(image: &str, args: &[String], admin_password: &str, db_sync: &str) -> String {
    InputHash::new()
        .add("image", image)
        .add("args", args.join("\0"))
        .add("admin-password", admin_password)
        .add("db-sync", db_sync)
        .short()
}

/// The in-cluster URL of a Keystone's Service.
pub fn internal_url(name: &str, namespace: &str) -> String {
    format!("http://{name}-api.{namespace}.svc:{PORT}/v3")
}

#[cfg(test)]
mod tests {
    use super::*;
    use controlplane_api::common::{ExternalServiceRef, ServiceTemplate};
    use controlplane_api::keystone::{DatabaseSpec, TokenSettings};
    use std::collections::BTreeMap;

    pub(crate) fn spec() -> KeystoneSpec {
        KeystoneSpec {
            release: "2026.1".into(),
            template: ServiceTemplate::default(),
            database: DatabaseSpec {
                service: ExternalServiceRef { name: "db".into() },
                database_name: "keystone".into(),
                username: "keystone".into(),
            },
            cache: Some(ExternalServiceRef {
                name: "cache".into(),
            }),
            region: "RegionOne".into(),
            public_endpoint: None,
            admin_password_secret: None,
            tokens: TokenSettings::default(),
            credential_keys: Default::default(),
        }
    }

    fn inputs(spec: &KeystoneSpec) -> KeystoneInputs<'_> {
        KeystoneInputs {
            spec,
            database: Database {
                host: "db.example.org".into(),
                port: 3306,
                name: "keystone".into(),
                user: "keystone".into(),
                password: "secret".into(),
                ca_file: Some("/etc/keystone/db-ca/ca.crt".into()),
                verify: Default::default(),
                server_name: None,
            },
            cache: crate::cache::Cache::plain(vec!["mc:11211".into()]),
            paths: Paths::pod(),
            listen: "0.0.0.0:5000".into(),
            workers: 2,
        }
    }

    #[test]
    fn keystone_conf_snapshot() {
        let mut s = spec();
        s.template.config_overrides.insert(
            "identity".into(),
            BTreeMap::from([("password_hash_rounds".into(), "10".into())]),
        );
        insta::assert_snapshot!(keystone_conf(&inputs(&s)));
        insta::assert_snapshot!(uwsgi_ini(&inputs(&s)));
    }

    #[test]
    fn an_override_changes_the_sync_hash() {
        let s = spec();
        let a = db_sync_hash("img", &keystone_conf(&inputs(&s)));
        let mut s2 = spec();
        s2.template.config_overrides.insert(
            "DEFAULT".into(),
            BTreeMap::from([("debug".into(), "true".into())]),
        );
        let b = db_sync_hash("img", &keystone_conf(&inputs(&s2)));
        assert_ne!(a, b);
        assert_eq!(a, db_sync_hash("img", &keystone_conf(&inputs(&s))));
    }

    #[test]
    fn every_rendered_option_is_one_keystone_defines() {
        let s = spec();
        crate::ini::assert_options_known(
            controlplane_api::ServiceName::Keystone,
            &keystone_conf(&inputs(&s)),
            &[],
        );
    }

    #[test]
    fn a_tls_and_sasl_cache_gives_oslo_cache_options_keystone_defines() {
        let s = spec();
        let mut i = inputs(&s);
        i.cache.tls = Some(crate::cache::CacheTls {
            ca_file: "/etc/ssl/cache-ca/ca.crt".into(),
            client_cert: Some(("/c/tls.crt".into(), "/c/tls.key".into())),
            verify: controlplane_api::external::VerifyMode::Full,
        });
        let text = keystone_conf(&i);
        let ini = Ini::parse(&text);
        assert_eq!(ini.get("cache", "tls_enabled"), Some("true"));
        assert_eq!(
            ini.get("cache", "tls_cafile"),
            Some("/etc/ssl/cache-ca/ca.crt")
        );
        assert_eq!(
            ini.get("cache", "backend"),
            Some("dogpile.cache.pymemcache")
        );
        i.cache.sasl = Some(crate::cache::CacheSasl {
            username: "u".into(),
            password: "p".into(),
        });
        let text = keystone_conf(&i);
        assert_eq!(
            Ini::parse(&text).get("cache", "backend"),
            Some("oslo_cache.memcache_pool")
        );
        crate::ini::assert_options_known(controlplane_api::ServiceName::Keystone, &text, &[]);
        let plain = Ini::parse(&keystone_conf(&inputs(&s)));
        assert_eq!(plain.get("cache", "tls_enabled"), None);
    }
}
