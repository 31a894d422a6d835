//! Horizon's configuration: Django's `local_settings.py` for the deployed Keystone, sessions in
//! memcached, static files collected and compressed ahead of time, and uwsgi serving both.
//!
//! Horizon imports `local.local_settings` through `sys.path`, and appends its own package
//! directory last: a directory holding `local/local_settings.py` put first on the path (uwsgi's
//! `pythonpath`, `PYTHONPATH` for the static-file commands) is the configuration, whatever the
//! image's Python version or site-packages path. Settings are Python literals, rendered from JSON
//! values so a user's override cannot inject code.

use std::collections::BTreeMap;

use controlplane_api::common::ServiceTemplate;
use serde_json::Value;

use crate::hash::InputHash;
use crate::uwsgi::Uwsgi;

/// Port Horizon listens on inside the pod and on its Service.
pub const PORT: u16 = 8080;
/// Where the configuration directory (holding `local/local_settings.py`) is mounted in pods.
pub const POD_CONFIG_DIR: &str = "/etc/openstack-dashboard";
/// Where collected static files live in pods (an emptyDir filled by an init container).
pub const POD_STATIC_ROOT: &str = "/var/lib/openstack-dashboard/static";
/// The overrides section whose keys are Django setting names and values JSON literals.
pub const OVERRIDES_SECTION: &str = "local_settings";

/// Settings the operator owns: overriding them would break sessions, the Keystone wiring or
/// the static files, so they are refused (the list validation refuses them by).
pub use controlplane_api::validation::HORIZON_OWNED_SETTINGS as OWNED_SETTINGS;

/// Everything Horizon's configuration is rendered from.
#[derive(Clone, Debug)]
pub struct HorizonInputs<'a> {
    /// Replicas, image, resources and the user's overrides (section [`OVERRIDES_SECTION`]).
    pub template: &'a ServiceTemplate,
    /// Keystone's URL as Horizon's server reaches it, e.g. `http://keystone-api.os.svc:5000/v3`.
    pub keystone_url: String,
    /// The region Horizon works in (Keystone's).
    pub region: String,
    /// Host names the dashboard answers for (Django's `ALLOWED_HOSTS`).
    pub allowed_hosts: Vec<String>,
    /// Django's `SECRET_KEY` (generated; signs sessions and CSRF tokens).
    pub secret_key: String,
    /// The `cache` external service (memcached: servers, TLS, SASL): sessions and Django's cache.
    pub cache: crate::cache::Cache,
    /// CA bundle file for Keystone's TLS (`None`: system trust or plain HTTP).
    pub keystone_ca_file: Option<String>,
    /// The dashboard is served over HTTPS (cookies are then `Secure`).
    pub https: bool,
    /// Directory holding `local/local_settings.py` and `uwsgi.ini`.
    pub config_dir: String,
    /// Where static files are collected and served from.
    pub static_root: String,
    /// uwsgi `home` (a virtualenv), when not the image's system Python.
    pub python_home: Option<String>,
    /// Address uwsgi listens on, e.g. `0.0.0.0:8080`.
    pub listen: String,
    /// uwsgi worker processes.
    pub workers: u32,
}

/// A JSON value as a Python literal (JSON strings are valid Python string literals).
pub fn python_literal(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => n.to_string(),
        Value::String(_) => v.to_string(),
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(python_literal).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!("{}: {}", Value::String(k.clone()), python_literal(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// What is wrong with the user's overrides: other sections, names that are not Python
/// identifiers in upper case, settings the operator owns.
pub fn override_errors(template: &ServiceTemplate) -> Vec<String> {
    let mut errors = Vec::new();
    for (section, options) in &template.config_overrides {
        if section != OVERRIDES_SECTION {
            errors.push(format!(
                "spec.configOverrides.{section}: Horizon takes only `{OVERRIDES_SECTION}` (Django settings)"
            ));
            continue;
        }
        for name in options.keys() {
            let identifier = name.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                && name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
            if !identifier {
                errors.push(format!(
                    "spec.configOverrides.{section}.{name}: not a Django setting name (upper-case identifier)"
                ));
            } else if OWNED_SETTINGS.contains(&name.as_str()) {
                errors.push(format!(
                    "spec.configOverrides.{section}.{name}: set by the operator"
                ));
            }
        }
    }
    errors
}

/// `local_settings.py`: the operator's settings, then the user's overrides (values parsed as
/// JSON; a value that is not JSON is taken as a string).
pub fn local_settings(i: &HorizonInputs<'_>) -> String {
    let mut s: BTreeMap<&str, Value> = BTreeMap::new();
    s.insert("DEBUG", Value::Bool(false));
    s.insert("ALLOWED_HOSTS", serde_json::json!(i.allowed_hosts));
    s.insert("SECRET_KEY", Value::String(i.secret_key.clone()));
    s.insert(
        "OPENSTACK_KEYSTONE_URL",
        Value::String(i.keystone_url.clone()),
    );
    s.insert(
        "OPENSTACK_KEYSTONE_DEFAULT_DOMAIN",
        Value::String("Default".into()),
    );
    s.insert("OPENSTACK_KEYSTONE_MULTIDOMAIN_SUPPORT", Value::Bool(true));
    s.insert("OPENSTACK_API_VERSIONS", serde_json::json!({"identity": 3}));
    s.insert(
        "OPENSTACK_ENDPOINT_TYPE",
        Value::String("internalURL".into()),
    );
    s.insert("SECONDARY_ENDPOINT_TYPE", Value::String("publicURL".into()));
    s.insert(
        "AVAILABLE_REGIONS",
        serde_json::json!([[i.keystone_url, i.region]]),
    );
    // Sessions live in memcached: any replica serves any user, and logging out everywhere is
    // one cache, not a database Horizon does not have.
    if i.cache.servers.is_empty() {
        s.insert(
            "SESSION_ENGINE",
            Value::String("django.contrib.sessions.backends.signed_cookies".into()),
        );
    } else {
        s.insert(
            "SESSION_ENGINE",
            Value::String("django.contrib.sessions.backends.cache".into()),
        );
        s.insert(
            "CACHES",
            serde_json::json!({"default": {
                "BACKEND": "django.core.cache.backends.memcached.PyMemcacheCache",
                "LOCATION": i.cache.servers,
            }}),
        );
    }
    s.insert("SESSION_COOKIE_SECURE", Value::Bool(i.https));
    s.insert("CSRF_COOKIE_SECURE", Value::Bool(i.https));
    s.insert("SESSION_COOKIE_HTTPONLY", Value::Bool(true));
    match &i.keystone_ca_file {
        Some(ca) => {
            s.insert("OPENSTACK_SSL_CACERT", Value::String(ca.clone()));
        }
        None => {
            s.insert("OPENSTACK_SSL_NO_VERIFY", Value::Bool(false));
        }
    }
    s.insert("STATIC_ROOT", Value::String(i.static_root.clone()));
    s.insert("STATIC_URL", Value::String("/static/".into()));
    // Compressed offline at setup: no replica writes to STATIC_ROOT while serving.
    s.insert("COMPRESS_ENABLED", Value::Bool(true));
    s.insert("COMPRESS_OFFLINE", Value::Bool(true));
    s.insert("TIME_ZONE", Value::String("UTC".into()));
    s.insert(
        "LOCAL_PATH",
        Value::String(format!("{}/local", i.config_dir)),
    );
    let mut overrides: BTreeMap<&str, Value> = BTreeMap::new();
    if let Some(opts) = i.template.config_overrides.get(OVERRIDES_SECTION) {
        for (k, v) in opts {
            let value = serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.clone()));
            overrides.insert(k.as_str(), value);
        }
    }
    let mut out = String::from(
        "# Rendered by openstack-operator; edit the Horizon template's configOverrides instead.\n",
    );
    for (k, v) in &s {
        out.push_str(&format!("{k} = {}\n", python_literal(v)));
    }
    // memcached over TLS: pymemcache takes an SSLContext, which is no literal. SASL is not
    // rendered: pymemcache has none, and the controller refuses a cache with credentials.
    if let Some(t) = i.cache.tls.as_ref().filter(|_| !i.cache.servers.is_empty()) {
        out.push_str(&crate::cache::django_tls(t, |v| {
            python_literal(&Value::String(v.to_string()))
        }));
    }
    for (k, v) in &overrides {
        out.push_str(&format!("{k} = {}\n", python_literal(v)));
    }
    out
}

/// uwsgi's configuration: the shared settings, the configuration directory first on Python's
/// path, and the static files served by uwsgi itself.
pub fn uwsgi_ini(i: &HorizonInputs<'_>) -> String {
    let mut s = Uwsgi {
        listen: &i.listen,
        python_home: i.python_home.as_deref(),
        workers: i.workers,
        module: "openstack_dashboard.wsgi:application",
        config_dir_env: ("DJANGO_SETTINGS_MODULE", "openstack_dashboard.settings"),
    }
    .render();
    s.push_str(&format!("pythonpath = {}\n", i.config_dir));
    s.push_str(&format!("static-map = /static={}\n", i.static_root));
    s
}

/// The setup commands (an init container in pods): collect the static files, then compress
/// them offline. Each runs with [`setup_env`].
pub fn setup_commands(python: &str) -> Vec<Vec<String>> {
    [
        vec!["collectstatic", "--noinput", "--verbosity", "0"],
        vec!["compress", "--force", "--verbosity", "0"],
    ]
    .into_iter()
    .map(|args| {
        let mut c = vec![python.to_string(), "-m".into(), "django".into()];
        c.extend(args.into_iter().map(String::from));
        c
    })
    .collect()
}

/// The environment of the setup commands.
pub fn setup_env(config_dir: &str) -> Vec<(String, String)> {
    vec![
        (
            "DJANGO_SETTINGS_MODULE".into(),
            "openstack_dashboard.settings".into(),
        ),
        ("PYTHONPATH".into(), config_dir.into()),
    ]
}

/// The files of the config Secret (a Secret: `SECRET_KEY` is in it), keyed by their path
/// under the configuration directory.
pub fn config_files(i: &HorizonInputs<'_>) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("local/__init__.py".to_string(), String::new()),
        ("local/local_settings.py".to_string(), local_settings(i)),
        ("uwsgi.ini".to_string(), uwsgi_ini(i)),
    ])
}

/// Hash of the configuration (the Deployment's pod-template annotation).
pub fn config_hash(image: &str, files: &BTreeMap<String, String>) -> String {
    let mut h = InputHash::new().add("image", image);
    for (k, v) in files {
        h = h.add(k, v);
    }
    h.short()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(t: &ServiceTemplate) -> HorizonInputs<'_> {
        HorizonInputs {
            template: t,
            keystone_url: "http://keystone-api.os.svc:5000/v3".into(),
            region: "RegionOne".into(),
            allowed_hosts: vec!["horizon.example.org".into()],
            secret_key: "s3cr3t\"'\\".into(),
            cache: crate::cache::Cache::plain(vec!["mc-0:11211".into(), "mc-1:11211".into()]),
            keystone_ca_file: None,
            https: true,
            config_dir: POD_CONFIG_DIR.into(),
            static_root: POD_STATIC_ROOT.into(),
            python_home: None,
            listen: "0.0.0.0:8080".into(),
            workers: 2,
        }
    }

    #[test]
    fn settings_are_python_literals_with_sessions_in_memcached() {
        let t = ServiceTemplate::default();
        let s = local_settings(&inputs(&t));
        assert!(s.contains("DEBUG = False\n"), "{s}");
        assert!(
            s.contains("ALLOWED_HOSTS = [\"horizon.example.org\"]\n"),
            "{s}"
        );
        // Quotes and backslashes of a secret stay inside the string literal.
        assert!(s.contains("SECRET_KEY = \"s3cr3t\\\"'\\\\\"\n"), "{s}");
        assert!(
            s.contains("SESSION_ENGINE = \"django.contrib.sessions.backends.cache\"\n"),
            "{s}"
        );
        assert!(
            s.contains("\"LOCATION\": [\"mc-0:11211\", \"mc-1:11211\"]"),
            "{s}"
        );
        assert!(s.contains("SESSION_COOKIE_SECURE = True\n"), "{s}");
        assert!(s.contains("COMPRESS_OFFLINE = True\n"), "{s}");
        assert!(
            s.contains(
                "AVAILABLE_REGIONS = [[\"http://keystone-api.os.svc:5000/v3\", \"RegionOne\"]]\n"
            ),
            "{s}"
        );
    }

    #[test]
    fn a_tls_cache_gets_a_tls_context_and_a_plain_one_none() {
        let t = ServiceTemplate::default();
        let plain = local_settings(&inputs(&t));
        assert!(!plain.contains("tls_context"), "{plain}");
        assert!(!plain.contains("import ssl"), "{plain}");
        let mut i = inputs(&t);
        i.cache.tls = Some(crate::cache::CacheTls {
            ca_file: "/etc/ssl/cache-ca/ca.crt".into(),
            client_cert: None,
            verify: controlplane_api::external::VerifyMode::Full,
        });
        let s = local_settings(&i);
        let tail = s
            .split_once("CACHES = ")
            .map(|(_, t)| t)
            .unwrap_or_default();
        assert!(
            tail.contains(
                "_cache_tls = _cache_ssl.create_default_context(cafile=\"/etc/ssl/cache-ca/ca.crt\")\n"
            ),
            "{s}"
        );
        assert!(
            tail.contains("CACHES[\"default\"][\"OPTIONS\"] = {\"tls_context\": _cache_tls}\n"),
            "{s}"
        );
        assert!(!s.contains("check_hostname"), "{s}");
    }

    #[test]
    fn overrides_come_last_as_literals_and_owned_settings_are_refused() {
        let mut t = ServiceTemplate::default();
        t.config_overrides.insert(
            OVERRIDES_SECTION.into(),
            BTreeMap::from([
                ("SESSION_TIMEOUT".into(), "7200".into()),
                (
                    "SITE_BRANDING".into(),
                    "Our cloud\"); import os; (\"".into(),
                ),
                (
                    "OPENSTACK_NEUTRON_NETWORK".into(),
                    r#"{"enable_router": false}"#.into(),
                ),
            ]),
        );
        assert!(override_errors(&t).is_empty());
        let s = local_settings(&inputs(&t));
        assert!(s.ends_with(
            "OPENSTACK_NEUTRON_NETWORK = {\"enable_router\": False}\nSESSION_TIMEOUT = 7200\nSITE_BRANDING = \"Our cloud\\\"); import os; (\\\"\"\n"
        ), "{s}");
        t.config_overrides.insert(
            OVERRIDES_SECTION.into(),
            BTreeMap::from([
                ("SECRET_KEY".into(), "x".into()),
                ("lower".into(), "1".into()),
            ]),
        );
        t.config_overrides.insert(
            "DEFAULT".into(),
            BTreeMap::from([("debug".into(), "true".into())]),
        );
        let e = override_errors(&t);
        assert_eq!(e.len(), 3, "{e:?}");
        assert!(
            e.iter()
                .any(|m| m.contains("SECRET_KEY: set by the operator"))
        );
        assert!(
            e.iter()
                .any(|m| m.contains("lower: not a Django setting name"))
        );
        assert!(e.iter().any(|m| m.contains("DEFAULT: Horizon takes only")));
    }

    #[test]
    fn uwsgi_serves_the_dashboard_and_its_static_files_from_the_config_dir_path() {
        let t = ServiceTemplate::default();
        let u = uwsgi_ini(&inputs(&t));
        assert!(u.contains("module = openstack_dashboard.wsgi:application\n"));
        assert!(u.contains("pythonpath = /etc/openstack-dashboard\n"));
        assert!(u.contains("static-map = /static=/var/lib/openstack-dashboard/static\n"));
        let files = config_files(&inputs(&t));
        assert_eq!(
            files.keys().collect::<Vec<_>>(),
            ["local/__init__.py", "local/local_settings.py", "uwsgi.ini"]
        );
        let h1 = config_hash("img:1", &files);
        let mut t2 = ServiceTemplate::default();
        t2.config_overrides.insert(
            OVERRIDES_SECTION.into(),
            BTreeMap::from([("SESSION_TIMEOUT".into(), "60".into())]),
        );
        assert_ne!(h1, config_hash("img:1", &config_files(&inputs(&t2))));
        assert_ne!(h1, config_hash("img:2", &files));
    }
}
