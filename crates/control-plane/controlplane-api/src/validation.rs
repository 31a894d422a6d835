//! Pure validation of the control-plane kinds. It repeats what the schema and CEL check (a
//! server that does not enforce them, or an object stored before a rule existed, still gets a
//! clear `InvalidSpec` naming the field before anything rolls out) and adds what CEL cannot say
//! cheaply: endpoint syntax and ports, options the operator owns, templates of unlisted services.

use api::FieldError;
pub use api::Validate;

use crate::cinder::CinderSpec;
use crate::cluster::{OpenStackClusterSpec, ServiceName};
use crate::common::ServiceTemplate;
use crate::external::{OpenStackExternalServiceSpec, ServiceKind};
use crate::glance::{GlanceSpec, StoreKind};
use crate::horizon::HorizonSpec;
use crate::keystone::KeystoneSpec;
use crate::neutron::NeutronSpec;
use crate::nova::NovaSpec;
use crate::options;
use crate::placement::PlacementSpec;

/// Options the operator renders itself; an override of one would break what it manages.
pub const KEYSTONE_OWNED_OPTIONS: &[(&str, &str)] = &[
    ("database", "connection"),
    ("fernet_tokens", "key_repository"),
    ("fernet_tokens", "max_active_keys"),
    ("fernet_receipts", "key_repository"),
    ("fernet_receipts", "max_active_keys"),
    ("credential", "key_repository"),
    ("token", "provider"),
    ("token", "expiration"),
    ("token", "allow_expired_window"),
    ("cache", "memcache_servers"),
    // The cache's TLS and SASL (from the cache external service): an override could turn
    // them off or point them elsewhere.
    ("cache", "backend"),
    ("cache", "tls_enabled"),
    ("cache", "tls_cafile"),
    ("cache", "tls_certfile"),
    ("cache", "tls_keyfile"),
    ("cache", "memcache_sasl_enabled"),
    ("cache", "username"),
    ("cache", "password"),
];

/// Placement's options the operator renders itself (database, token validation and the
/// service user, the auth strategy).
pub const PLACEMENT_OWNED_OPTIONS: &[(&str, &str)] = &[
    ("placement_database", "connection"),
    ("api", "auth_strategy"),
];

/// Glance's options the operator renders itself (database, token validation and the service
/// user, the paste flavor, the stores and the web-download allow-list: an override of
/// `allowed_hosts` could open web-download to every host).
pub const GLANCE_OWNED_OPTIONS: &[(&str, &str)] = &[
    ("database", "connection"),
    ("paste_deploy", "flavor"),
    ("DEFAULT", "enabled_backends"),
    ("DEFAULT", "enabled_import_methods"),
    ("glance_store", "default_backend"),
    ("file", "filesystem_store_datadir"),
    ("s3", "s3_store_host"),
    ("s3", "s3_store_access_key"),
    ("s3", "s3_store_secret_key"),
    ("s3", "s3_store_bucket"),
    ("s3", "s3_store_cacert"),
    ("os_glance_staging_store", "filesystem_store_datadir"),
    ("os_glance_tasks_store", "filesystem_store_datadir"),
    ("import_filtering_opts", "allowed_schemes"),
    ("import_filtering_opts", "allowed_hosts"),
    ("import_filtering_opts", "allowed_ports"),
];

/// Neutron's options the operator renders itself: the database, token validation and the
/// service user (also in `[nova]`), the ML2/OVN wiring (core plugin, mechanism driver, the OVN
/// databases and their TLS files) and the RPC workers (ML2/OVN is rendered without a message
/// queue, so RPC workers could not start).
pub const NEUTRON_OWNED_OPTIONS: &[(&str, &str)] = &[
    ("database", "connection"),
    ("DEFAULT", "core_plugin"),
    ("DEFAULT", "auth_strategy"),
    ("DEFAULT", "rpc_workers"),
    ("DEFAULT", "rpc_state_report_workers"),
    ("DEFAULT", "transport_url"),
    ("nova", "auth_type"),
    ("nova", "auth_url"),
    ("nova", "username"),
    ("nova", "password"),
    ("nova", "project_name"),
    ("ml2", "mechanism_drivers"),
    ("ovn", "ovn_nb_connection"),
    ("ovn", "ovn_sb_connection"),
    ("ovn", "ovn_nb_private_key"),
    ("ovn", "ovn_nb_certificate"),
    ("ovn", "ovn_nb_ca_cert"),
    ("ovn", "ovn_sb_private_key"),
    ("ovn", "ovn_sb_certificate"),
    ("ovn", "ovn_sb_ca_cert"),
];

/// Cinder's options the operator renders itself: the database, the message queue and its TLS
/// files, token validation and the service user (also in `[nova]`), the auth strategy, the
/// stable service host and the enabled backends (each backend's section is rendered from the
/// spec's backend block).
pub const CINDER_OWNED_OPTIONS: &[(&str, &str)] = &[
    ("database", "connection"),
    ("DEFAULT", "transport_url"),
    ("DEFAULT", "auth_strategy"),
    ("DEFAULT", "enabled_backends"),
    ("DEFAULT", "state_path"),
    ("DEFAULT", "host"),
    ("oslo_messaging_rabbit", "ssl"),
    ("oslo_messaging_rabbit", "ssl_ca_file"),
    ("oslo_messaging_rabbit", "ssl_cert_file"),
    ("oslo_messaging_rabbit", "ssl_key_file"),
    ("nova", "auth_type"),
    ("nova", "auth_url"),
    ("nova", "username"),
    ("nova", "password"),
    ("nova", "project_name"),
];

/// Nova's options the operator renders itself: the three databases' connections (the cell
/// mappings' templates are resolved from `[database]`), the message queue and its TLS, token
/// validation, the service user of every peer section, the metadata secret shared with
/// Neutron, the cache and the noVNC proxy's listener (its Service targets it).
pub const NOVA_OWNED_OPTIONS: &[(&str, &str)] = &[
    ("api_database", "connection"),
    ("database", "connection"),
    ("DEFAULT", "transport_url"),
    ("DEFAULT", "host"),
    ("oslo_messaging_rabbit", "ssl"),
    ("oslo_messaging_rabbit", "ssl_ca_file"),
    ("placement", "auth_type"),
    ("placement", "auth_url"),
    ("placement", "username"),
    ("placement", "password"),
    ("placement", "project_name"),
    ("neutron", "auth_type"),
    ("neutron", "auth_url"),
    ("neutron", "username"),
    ("neutron", "password"),
    ("neutron", "project_name"),
    ("neutron", "metadata_proxy_shared_secret"),
    ("service_user", "auth_type"),
    ("service_user", "auth_url"),
    ("service_user", "username"),
    ("service_user", "password"),
    ("service_user", "project_name"),
    ("service_user", "send_service_user_token"),
    ("cache", "memcache_servers"),
    // The cache's TLS and SASL (from the cache external service): an override could turn
    // them off or point them elsewhere.
    ("cache", "backend"),
    ("cache", "tls_enabled"),
    ("cache", "tls_cafile"),
    ("cache", "tls_certfile"),
    ("cache", "tls_keyfile"),
    ("cache", "memcache_sasl_enabled"),
    ("cache", "username"),
    ("cache", "password"),
    ("vnc", "novncproxy_host"),
    ("vnc", "novncproxy_port"),
];

#[derive(Default)]
struct Errors(Vec<FieldError>);

impl Errors {
    fn add(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError {
            path: path.into(),
            message: message.into(),
        });
    }
}

fn release(e: &mut Errors, path: &str, release: &str) {
    if !crate::RELEASES.contains(&release) {
        e.add(
            path,
            format!(
                "release {release:?} is not supported; supported: {}",
                crate::RELEASES.join(", ")
            ),
        );
    }
}

fn ident_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
}

/// The `[keystone_authtoken]` options the operator renders for every service that validates
/// tokens (all but Keystone and Horizon): token validation and its service user.
pub const AUTHTOKEN_OWNED_OPTIONS: &[&str] = &[
    "auth_type",
    "auth_url",
    "www_authenticate_uri",
    "region_name",
    "username",
    "password",
    "project_name",
    "user_domain_name",
    "project_domain_name",
    "memcached_servers",
    "memcache_use_advanced_pool",
    "memcache_tls_enabled",
    "memcache_tls_cafile",
    "memcache_tls_certfile",
    "memcache_tls_keyfile",
    "memcache_sasl_enabled",
    "memcache_username",
    "memcache_password",
];

/// Whether the operator renders `[section] key` for `service` itself (refused as an override):
/// the service's own list, and `[keystone_authtoken]` for every service that validates tokens.
pub fn is_owned(service: ServiceName, section: &str, key: &str) -> bool {
    let validates_tokens = !matches!(service, ServiceName::Keystone | ServiceName::Horizon);
    owned_options(service)
        .iter()
        .any(|(s, k)| *s == section && *k == key)
        || (validates_tokens
            && section == "keystone_authtoken"
            && AUTHTOKEN_OWNED_OPTIONS.contains(&key))
}

/// The options the operator renders itself for `service` (refused as overrides).
pub fn owned_options(service: ServiceName) -> &'static [(&'static str, &'static str)] {
    match service {
        ServiceName::Keystone => KEYSTONE_OWNED_OPTIONS,
        ServiceName::Placement => PLACEMENT_OWNED_OPTIONS,
        ServiceName::Glance => GLANCE_OWNED_OPTIONS,
        ServiceName::Neutron => NEUTRON_OWNED_OPTIONS,
        ServiceName::Cinder => CINDER_OWNED_OPTIONS,
        ServiceName::Nova => NOVA_OWNED_OPTIONS,
        ServiceName::Horizon => &[],
    }
}

/// Checks a service's template: the shared rules, the options the operator owns, and every
/// override against the options the service really defines (`options`). `dynamic` maps
/// sections the spec names at run time (e.g. Cinder backends) to the section they take their
/// options from.
fn service_template(
    e: &mut Errors,
    path: &str,
    t: &ServiceTemplate,
    service: ServiceName,
    dynamic: &[(&str, &str)],
) {
    template(e, path, t, service);
    if service == ServiceName::Horizon {
        horizon_overrides(e, path, t);
    }
    let Some(schema) = options::schema(service) else {
        return;
    };
    for (section, opts) in &t.config_overrides {
        for (key, value) in opts {
            // An owned option is already refused; one message per key.
            if is_owned(service, section, key) {
                continue;
            }
            if let Err(why) = schema.check(section, key, value, dynamic) {
                e.add(format!("{path}.configOverrides.{section}.{key}"), why);
            }
        }
    }
}

fn template(e: &mut Errors, path: &str, t: &ServiceTemplate, service: ServiceName) {
    if let Some(r) = t.replicas
        && r < 0
    {
        e.add(
            format!("{path}.replicas"),
            format!("must be at least 0, got {r}"),
        );
    }
    for (section, options) in &t.config_overrides {
        let spath = format!("{path}.configOverrides.{section}");
        if !ident_ok(section) {
            e.add(
                &spath,
                "section names are letters, digits, '_', '-' and '.' (at most 64)",
            );
        }
        for (key, value) in options {
            let kpath = format!("{spath}.{key}");
            if !ident_ok(key) {
                e.add(
                    &kpath,
                    "option names are letters, digits, '_', '-' and '.' (at most 64)",
                );
            }
            if is_owned(service, section, key) {
                e.add(
                    &kpath,
                    "is set by the operator and cannot be overridden (use the kind's own fields)",
                );
            }
            if value.contains('\n') || value.contains('\r') {
                e.add(&kpath, "values must be one line");
            }
        }
    }
    for (k, q) in t
        .resources
        .iter()
        .flat_map(|r| r.requests.iter().chain(r.limits.iter()))
    {
        if q.is_empty() || q.starts_with('-') {
            e.add(
                format!("{path}.resources"),
                format!("{k}: {q:?} is not a positive Kubernetes quantity"),
            );
        }
    }
}

/// Splits an endpoint into host and port, or says what is wrong with it.
pub fn parse_endpoint(endpoint: &str) -> Result<(String, Option<u16>), String> {
    let rest = if let Some((scheme, rest)) = endpoint.split_once("://") {
        if scheme.is_empty() {
            return Err("has an empty scheme".into());
        }
        rest.split(['/', '?', '#']).next().unwrap_or("")
    } else if let Some(rest) = endpoint
        .strip_prefix("ssl:")
        .or_else(|| endpoint.strip_prefix("tcp:"))
    {
        rest
    } else {
        endpoint
    };
    let rest = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
        let (host, after) = v6
            .split_once(']')
            .ok_or_else(|| "has an unclosed '[' in its IPv6 address".to_string())?;
        (host.to_string(), after.strip_prefix(':'))
    } else {
        match rest.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (rest.to_string(), None),
        }
    };
    if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c == '/') {
        return Err("has no valid host".into());
    }
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(0) | Err(_) => return Err(format!("has an invalid port {p:?} (1-65535)")),
            Ok(n) => Some(n),
        },
    };
    if port.is_none() && !endpoint.contains("://") {
        return Err("needs a port (host:port)".into());
    }
    Ok((host, port))
}

impl Validate for OpenStackExternalServiceSpec {
    fn validate(&self) -> Vec<FieldError> {
        let mut e = Errors::default();
        if self.endpoints.is_empty() {
            e.add("spec.endpoints", "needs at least one endpoint");
        }
        for (i, ep) in self.endpoints.iter().enumerate() {
            if let Err(why) = parse_endpoint(ep) {
                e.add(format!("spec.endpoints[{i}]"), format!("{ep:?} {why}"));
            }
        }
        if let Some(c) = &self.credentials {
            if c.secret_name.is_empty() {
                e.add("spec.credentials.secretName", "must not be empty");
            }
        } else if matches!(
            self.type_,
            ServiceKind::Database | ServiceKind::Messaging | ServiceKind::ObjectStorage
        ) {
            e.add(
                "spec.credentials",
                format!("a {} service needs credentials", self.type_),
            );
        }
        if let Some(t) = &self.tls
            && t.ca_secret.name.is_empty()
        {
            e.add(
                "spec.tls.caSecret.name",
                "a TLS block needs a CA bundle Secret",
            );
        }
        e.0
    }
}

impl Validate for KeystoneSpec {
    fn validate(&self) -> Vec<FieldError> {
        let mut e = Errors::default();
        release(&mut e, "spec.release", &self.release);
        service_template(&mut e, "spec", &self.template, ServiceName::Keystone, &[]);
        if self.database.service.name.is_empty() {
            e.add(
                "spec.database.service.name",
                "must name a database external service",
            );
        }
        let t = &self.tokens;
        if t.fernet_rotation_interval_seconds < 60 {
            e.add(
                "spec.tokens.fernetRotationIntervalSeconds",
                "must be at least 60",
            );
        }
        if t.expiration_seconds < 60 {
            e.add("spec.tokens.expirationSeconds", "must be at least 60");
        }
        if t.allow_expired_window_seconds < 0 {
            e.add(
                "spec.tokens.allowExpiredWindowSeconds",
                "must not be negative",
            );
        }
        if t.max_active_keys() > 62 {
            e.add(
                "spec.tokens",
                "(expirationSeconds + allowExpiredWindowSeconds) / fernetRotationIntervalSeconds must be at most 60; rotate less often",
            );
        }
        let c = self.credential_keys.rotation_interval_seconds;
        if c != 0 && !(3600..=31_536_000).contains(&c) {
            e.add(
                "spec.credentialKeys.rotationIntervalSeconds",
                "must be 0 (never on schedule) or between 3600 and 31536000",
            );
        }
        if let Some(url) = &self.public_endpoint
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            e.add(
                "spec.publicEndpoint",
                "must be an absolute http:// or https:// URL",
            );
        }
        e.0
    }
}

/// What every service on the shared pipeline but Keystone is checked for: a database
/// service, a Keystone and an absolute public endpoint.
fn service_refs(
    e: &mut Errors,
    database: Option<&crate::common::DatabaseRef>,
    keystone: &crate::common::KeystoneRef,
    public_endpoint: Option<&str>,
) {
    if let Some(db) = database
        && db.service.name.is_empty()
    {
        e.add(
            "spec.database.service.name",
            "must name a database external service",
        );
    }
    if keystone.name.is_empty() {
        e.add("spec.keystone.name", "must name a Keystone");
    }
    if let Some(url) = public_endpoint
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        e.add(
            "spec.publicEndpoint",
            "must be an absolute http:// or https:// URL",
        );
    }
}

impl Validate for PlacementSpec {
    fn validate(&self) -> Vec<FieldError> {
        let mut e = Errors::default();
        release(&mut e, "spec.release", &self.release);
        service_template(&mut e, "spec", &self.template, ServiceName::Placement, &[]);
        service_refs(
            &mut e,
            Some(&self.database),
            &self.keystone,
            self.public_endpoint.as_deref(),
        );
        e.0
    }
}

impl Validate for NovaSpec {
    fn validate(&self) -> Vec<FieldError> {
        let mut e = Errors::default();
        release(&mut e, "spec.release", &self.release);
        service_template(&mut e, "spec", &self.template, ServiceName::Nova, &[]);
        service_refs(
            &mut e,
            Some(&self.database),
            &self.keystone,
            self.public_endpoint.as_deref(),
        );
        if self.messaging.name.is_empty() {
            e.add(
                "spec.messaging.name",
                "must name a messaging external service",
            );
        }
        if self.placement.name.is_empty() {
            e.add("spec.placement.name", "must name a Placement");
        }
        for (path, r) in [
            ("spec.glance.name", &self.glance),
            ("spec.neutron.name", &self.neutron),
        ] {
            if r.as_ref().is_some_and(|r| r.name.is_empty()) {
                e.add(
                    path,
                    "must not be empty (leave the reference out to use the catalog)",
                );
            }
        }
        if let Some(url) = &self.vnc_proxy_public_endpoint
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            e.add(
                "spec.vncProxyPublicEndpoint",
                "must be an absolute http:// or https:// URL",
            );
        }
        if self.discover_hosts_interval_seconds < -1 {
            e.add(
                "spec.discoverHostsIntervalSeconds",
                "must be -1 (never) or a number of seconds",
            );
        }
        if self.compute_driver.is_empty()
            || !self
                .compute_driver
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        {
            e.add(
                "spec.computeDriver",
                format!(
                    "{:?} is not a virt driver name such as libvirt.LibvirtDriver",
                    self.compute_driver
                ),
            );
        }
        e.0.extend(crate::zones::validate(
            "spec.availabilityZones",
            &self.availability_zones,
        ));
        e.0
    }
}

/// Checks a backend block's shape: exactly one of `rbd`/`nfs` per backend and its Secret
/// reference (the driver settings are checked by the renderer's backend validation).
pub fn cinder_backends(path: &str, backends: &[crate::cinder::CinderBackend]) -> Vec<FieldError> {
    let mut e = Errors::default();
    for (i, b) in backends.iter().enumerate() {
        let at = format!("{path}[{i}]");
        match (&b.rbd, &b.nfs) {
            (Some(_), Some(_)) | (None, None) => {
                e.add(&at, "a backend is exactly one of rbd and nfs")
            }
            (Some(r), None) => {
                if r.keyring_secret.name.is_empty() || r.keyring_secret.key.is_empty() {
                    e.add(
                        format!("{at}.rbd.keyringSecret"),
                        "must name a Secret and the key holding the keyring",
                    );
                }
            }
            (None, Some(_)) => {}
        }
    }
    e.0
}

impl Validate for CinderSpec {
    fn validate(&self) -> Vec<FieldError> {
        let mut e = Errors::default();
        release(&mut e, "spec.release", &self.release);
        // A backend's own section takes the driver options Cinder registers in
        // [backend_defaults].
        let dynamic: Vec<(&str, &str)> = self
            .backends
            .iter()
            .map(|b| (b.name.as_str(), "backend_defaults"))
            .collect();
        service_template(
            &mut e,
            "spec",
            &self.template,
            ServiceName::Cinder,
            &dynamic,
        );
        service_refs(
            &mut e,
            Some(&self.database),
            &self.keystone,
            self.public_endpoint.as_deref(),
        );
        if self.messaging.name.is_empty() {
            e.add(
                "spec.messaging.name",
                "must name a messaging external service",
            );
        }
        if self.backends.is_empty() {
            e.add(
                "spec.backends",
                "at least one backend is needed: cinder-volume serves nothing without one",
            );
        }
        e.0.extend(cinder_backends("spec.backends", &self.backends));
        e.0.extend(crate::zones::validate(
            "spec.availabilityZones",
            &self.availability_zones,
        ));
        e.0.extend(backend_zones(
            "spec.backends",
            &self.backends,
            &self.availability_zones,
        ));
        e.0
    }
}

/// Checks that each backend's `availabilityZone` is one of `zones`.
pub fn backend_zones(
    path: &str,
    backends: &[crate::cinder::CinderBackend],
    zones: &[crate::zones::AvailabilityZone],
) -> Vec<FieldError> {
    backends
        .iter()
        .enumerate()
        .filter_map(|(i, b)| {
            let z = b.availability_zone.as_deref()?;
            crate::zones::known(&format!("{path}[{i}].availabilityZone"), z, zones)
        })
        .collect()
}

/// Django settings the operator renders for Horizon itself: overriding them would break
/// sessions, the Keystone wiring or the static files, so they are refused.
pub const HORIZON_OWNED_SETTINGS: &[&str] = &[
    "ALLOWED_HOSTS",
    "CACHES",
    "COMPRESS_ENABLED",
    "COMPRESS_OFFLINE",
    "LOCAL_PATH",
    "OPENSTACK_KEYSTONE_URL",
    "OPENSTACK_SSL_CACERT",
    "OPENSTACK_SSL_NO_VERIFY",
    "SECRET_KEY",
    "SESSION_ENGINE",
    "STATIC_ROOT",
    "STATIC_URL",
];

/// The section of Horizon's overrides: Django setting names to JSON values.
pub const HORIZON_OVERRIDES_SECTION: &str = "local_settings";

/// Horizon has no oslo.config and so no option schema: its overrides are Django settings in
/// one section, named as Django names settings (upper-case identifiers), not owned by the
/// operator, with values that are JSON (a bare word is taken as a string by the renderer, so
/// only text that starts like JSON but does not parse is refused: it is a typo, not a string).
fn horizon_overrides(e: &mut Errors, path: &str, t: &ServiceTemplate) {
    for (section, options) in &t.config_overrides {
        if section != HORIZON_OVERRIDES_SECTION {
            e.add(
                format!("{path}.configOverrides.{section}"),
                format!(
                    "Horizon takes only section `{HORIZON_OVERRIDES_SECTION}` (Django settings)"
                ),
            );
            continue;
        }
        for (name, value) in options {
            let kpath = format!("{path}.configOverrides.{section}.{name}");
            let identifier = name.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                && name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
            if !identifier {
                e.add(kpath, "not a Django setting name (upper-case identifier)");
            } else if HORIZON_OWNED_SETTINGS.contains(&name.as_str()) {
                e.add(kpath, "is set by the operator and cannot be overridden");
            } else if value.trim_start().starts_with(['{', '[', '"'])
                && serde_json::from_str::<serde_json::Value>(value).is_err()
            {
                e.add(
                    kpath,
                    format!("{value:?} looks like JSON but does not parse"),
                );
            }
        }
    }
}

/// Whether `q` reads as a positive Kubernetes quantity (digits, an optional fraction and a
/// suffix such as `Gi`, `G`, `Mi`).
fn quantity_ok(q: &str) -> bool {
    let digits = q.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &q[digits.len()..];
    !digits.is_empty()
        && digits.chars().all(|c| c.is_ascii_digit() || c == '.')
        && digits.chars().any(|c| c.is_ascii_digit() && c != '0')
        && ["", "Ki", "Mi", "Gi", "Ti", "Pi", "k", "M", "G", "T", "P"].contains(&suffix)
}

/// A word of one of Glance's import allow-lists: oslo.config's list syntax cannot carry
/// separators, brackets, quotes or blanks in an item.
fn list_item_ok(v: &str) -> bool {
    !v.is_empty() && !v.contains([',', '[', ']', '"', '\'', ' ', '\n', '\r'])
}

impl Validate for GlanceSpec {
    fn validate(&self) -> Vec<FieldError> {
        let mut e = Errors::default();
        release(&mut e, "spec.release", &self.release);
        service_template(&mut e, "spec", &self.template, ServiceName::Glance, &[]);
        service_refs(
            &mut e,
            Some(&self.database),
            &self.keystone,
            self.public_endpoint.as_deref(),
        );
        let st = &self.storage;
        if st.file.is_none() && st.s3.is_none() {
            e.add("spec.storage", "needs a file or an s3 store");
        }
        match st.default_store {
            Some(StoreKind::File) if st.file.is_none() => e.add(
                "spec.storage.defaultStore",
                "is file but spec.storage.file is not set",
            ),
            Some(StoreKind::S3) if st.s3.is_none() => e.add(
                "spec.storage.defaultStore",
                "is s3 but spec.storage.s3 is not set",
            ),
            _ => {}
        }
        if let Some(f) = &st.file {
            if !quantity_ok(&f.size) {
                e.add(
                    "spec.storage.file.size",
                    format!(
                        "{:?} is not a positive Kubernetes quantity (e.g. 100Gi)",
                        f.size
                    ),
                );
            }
            if !["ReadWriteOnce", "ReadWriteMany", "ReadWriteOncePod"]
                .contains(&f.access_mode.as_str())
            {
                e.add(
                    "spec.storage.file.accessMode",
                    "must be ReadWriteOnce, ReadWriteMany or ReadWriteOncePod",
                );
            }
        }
        if let Some(s3) = &st.s3
            && s3.object_storage.name.is_empty()
        {
            e.add(
                "spec.storage.s3.objectStorage.name",
                "must name an objectStorage external service",
            );
        }
        if let Some(w) = &self.web_download {
            if w.allowed_hosts.is_empty() {
                e.add(
                    "spec.webDownload.allowedHosts",
                    "names no host: Glance would fetch from any host, internal services included",
                );
            }
            for (field, items) in [
                ("allowedHosts", &w.allowed_hosts),
                ("allowedSchemes", &w.allowed_schemes),
            ] {
                for (i, v) in items.iter().enumerate() {
                    if !list_item_ok(v) {
                        e.add(
                            format!("spec.webDownload.{field}[{i}]"),
                            format!("{v:?}: one word, without ',', brackets, quotes or blanks"),
                        );
                    }
                }
            }
            if w.allowed_schemes.is_empty() {
                e.add(
                    "spec.webDownload.allowedSchemes",
                    "needs at least one scheme",
                );
            }
            if w.allowed_ports.is_empty() {
                e.add("spec.webDownload.allowedPorts", "needs at least one port");
            }
            for (i, p) in w.allowed_ports.iter().enumerate() {
                if *p == 0 {
                    e.add(
                        format!("spec.webDownload.allowedPorts[{i}]"),
                        "0 is not a port",
                    );
                }
            }
        }
        e.0
    }
}

/// `min:max` with min <= max (a VNI or VLAN range).
fn range_ok(r: &str, max: u32) -> bool {
    let Some((a, b)) = r.split_once(':') else {
        return false;
    };
    match (a.parse::<u32>(), b.parse::<u32>()) {
        (Ok(a), Ok(b)) => a >= 1 && a <= b && b <= max,
        _ => false,
    }
}

impl Validate for NeutronSpec {
    fn validate(&self) -> Vec<FieldError> {
        let mut e = Errors::default();
        release(&mut e, "spec.release", &self.release);
        service_template(&mut e, "spec", &self.template, ServiceName::Neutron, &[]);
        service_refs(
            &mut e,
            Some(&self.database),
            &self.keystone,
            self.public_endpoint.as_deref(),
        );
        if self.ovn.name.is_empty() {
            e.add("spec.ovn.name", "must name an ovn external service");
        }
        if let Some(n) = &self.nova
            && n.name.is_empty()
        {
            e.add(
                "spec.nova.name",
                "must name a Nova (or leave spec.nova out)",
            );
        }
        let n = &self.networks;
        if n.geneve_vni_ranges.is_empty() {
            e.add("spec.networks.geneveVniRanges", "needs at least one range");
        }
        for (i, r) in n.geneve_vni_ranges.iter().enumerate() {
            if !range_ok(r, 16_777_215) {
                e.add(
                    format!("spec.networks.geneveVniRanges[{i}]"),
                    format!("{r:?} is not MIN:MAX with 1 <= MIN <= MAX <= 16777215"),
                );
            }
        }
        for (i, r) in n.vlan_ranges.iter().enumerate() {
            let ok = match r.split_once(':') {
                None => list_item_ok(r) && !r.contains(':'),
                Some((net, range)) => list_item_ok(net) && range_ok(range, 4094),
            };
            if !ok {
                e.add(
                    format!("spec.networks.vlanRanges[{i}]"),
                    format!("{r:?} is not PHYSNET or PHYSNET:MIN:MAX with VLANs 1-4094"),
                );
            }
        }
        for (i, f) in n.flat_networks.iter().enumerate() {
            if !list_item_ok(f) || f.contains(':') {
                e.add(
                    format!("spec.networks.flatNetworks[{i}]"),
                    format!("{f:?} is not a physical network name"),
                );
            }
        }
        if !(576..=9216).contains(&n.physnet_mtu) {
            e.add("spec.networks.physnetMtu", "must be between 576 and 9216");
        }
        e.0
    }
}

impl Validate for HorizonSpec {
    fn validate(&self) -> Vec<FieldError> {
        let mut e = Errors::default();
        release(&mut e, "spec.release", &self.release);
        service_template(&mut e, "spec", &self.template, ServiceName::Horizon, &[]);
        service_refs(
            &mut e,
            None,
            &self.keystone,
            self.public_endpoint.as_deref(),
        );
        e.0
    }
}

impl Validate for OpenStackClusterSpec {
    fn validate(&self) -> Vec<FieldError> {
        let mut e = Errors::default();
        release(&mut e, "spec.release", &self.release);
        for (i, s) in self.services.iter().enumerate() {
            if self.services[..i].contains(s) {
                e.add(
                    format!("spec.services[{i}]"),
                    format!("{} is listed twice", s.as_str()),
                );
            }
        }
        if !self.services.contains(&ServiceName::Keystone)
            && let Some(s) = self.services.iter().find(|s| s.implemented())
        {
            e.add(
                "spec.services",
                format!(
                    "{} registers in the cluster's Keystone: list keystone too",
                    s.as_str()
                ),
            );
        }
        let has = |s: ServiceName| self.services.contains(&s);
        if has(ServiceName::Nova) && !has(ServiceName::Placement) {
            e.add(
                "spec.services",
                "nova schedules against the cluster's Placement: list placement too",
            );
        }
        for s in [ServiceName::Nova, ServiceName::Cinder] {
            if has(s) && self.external_services.messaging.is_none() {
                e.add(
                    "spec.externalServices.messaging",
                    format!("{} needs a messaging external service", s.as_str()),
                );
            }
        }
        if has(ServiceName::Cinder) && self.cinder_backends.is_empty() {
            e.add(
                "spec.cinderBackends",
                "cinder needs at least one backend (rbd or nfs)",
            );
        }
        e.0.extend(cinder_backends(
            "spec.cinderBackends",
            &self.cinder_backends,
        ));
        for (name, t) in &self.templates {
            let path = format!("spec.templates.{name}");
            match self.services.iter().find(|s| s.as_str() == name) {
                None => e.add(
                    &path,
                    format!(
                        "is a template for {name:?}, which is not in spec.services ({})",
                        self.services
                            .iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ),
                Some(service) => {
                    let dynamic: Vec<(&str, &str)> = match service {
                        ServiceName::Cinder => self
                            .cinder_backends
                            .iter()
                            .map(|b| (b.name.as_str(), "backend_defaults"))
                            .collect(),
                        _ => Vec::new(),
                    };
                    service_template(&mut e, &path, t, *service, &dynamic)
                }
            }
        }
        if self.services.contains(&ServiceName::Neutron) && self.external_services.ovn.is_none() {
            e.add(
                "spec.externalServices.ovn",
                "neutron is listed: it needs an ovn external service",
            );
        }
        if let Some(p) = &self.public_hostname_pattern {
            let sample = p.replace("{service}", "keystone");
            if !p.contains("{service}") {
                e.add("spec.publicHostnamePattern", "must contain {service}");
            } else if sample.contains(['{', '}', '/', ':', ' ']) || sample.len() > 253 {
                e.add(
                    "spec.publicHostnamePattern",
                    "must be a DNS host name pattern such as {service}.cloud.example.org",
                );
            }
        }
        e.0.extend(crate::zones::validate(
            "spec.availabilityZones",
            &self.availability_zones,
        ));
        e.0.extend(backend_zones(
            "spec.cinderBackends",
            &self.cinder_backends,
            &self.availability_zones,
        ));
        e.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(
            parse_endpoint("db.example.org:3306"),
            Ok(("db.example.org".into(), Some(3306)))
        );
        assert_eq!(
            parse_endpoint("127.0.0.1:13306"),
            Ok(("127.0.0.1".into(), Some(13306)))
        );
        assert_eq!(
            parse_endpoint("https://s3.example.org"),
            Ok(("s3.example.org".into(), None))
        );
        assert_eq!(
            parse_endpoint("ssl:10.0.0.1:6641"),
            Ok(("10.0.0.1".into(), Some(6641)))
        );
        assert_eq!(
            parse_endpoint("[::1]:11211"),
            Ok(("::1".into(), Some(11211)))
        );
        assert!(parse_endpoint("db.example.org").is_err());
        assert!(parse_endpoint("db:99999").is_err());
        assert!(parse_endpoint("db:0").is_err());
        assert!(parse_endpoint(":3306").is_err());
        assert!(parse_endpoint("http://").is_err());
    }
}
