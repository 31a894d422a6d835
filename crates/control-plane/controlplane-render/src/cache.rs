//! The `cache` external service (memcached) as each client library reads it: the servers, TLS
//! (CA bundle, optional client certificate, verification) and SASL credentials, rendered into
//! keystonemiddleware's `[keystone_authtoken]`, oslo.cache's `[cache]` and Django's `CACHES`.
//!
//! What each library can do, read from their sources (keystonemiddleware 12.0, oslo.cache
//! 4.1, dogpile.cache 1.5, python-binary-memcached 0.31, pymemcache 4.0):
//! - keystonemiddleware builds its TLS context with `ssl.create_default_context(cafile)`: the
//!   chain and the host name are always verified; TLS and SASL both go through its "advanced
//!   pool" (`memcache_use_advanced_pool`, default true, rendered explicitly because the other
//!   pool silently ignores TLS) and python-binary-memcached.
//! - oslo.cache builds the same context (always full verification). TLS works with the
//!   `dogpile.cache.pymemcache` backend; SASL only with `oslo_cache.memcache_pool` (through
//!   python-binary-memcached; pymemcache speaks no SASL, and `dogpile.cache.bmemcached` is
//!   missing from oslo.cache's list of TLS backends), so SASL selects that backend.
//! - Django's `PyMemcacheCache` passes `OPTIONS` to pymemcache: the rendered settings build
//!   the TLS context themselves, so every verify mode maps; pymemcache has no SASL.
//!
//! The controllers refuse what a consumer cannot honour ([`Cache::unsupported`]) instead of
//! rendering something weaker than asked.

use controlplane_api::external::VerifyMode;

use crate::ini::Ini;

/// TLS towards memcached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheTls {
    /// Path of the CA bundle in the pod.
    pub ca_file: String,
    /// Paths of the client certificate and key, when the service asks for one.
    pub client_cert: Option<(String, String)>,
    /// How the server is verified.
    pub verify: VerifyMode,
}

/// SASL credentials towards memcached (binary protocol).
#[derive(Clone, PartialEq, Eq)]
pub struct CacheSasl {
    /// User name.
    pub username: String,
    /// Password (rendered into the config Secret only).
    pub password: String,
}

impl std::fmt::Debug for CacheSasl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The password never reaches a log.
        f.debug_struct("CacheSasl")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// The `cache` external service, resolved; no servers means no cache.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cache {
    /// `host:port` of each memcached.
    pub servers: Vec<String>,
    /// TLS, when the service names a CA.
    pub tls: Option<CacheTls>,
    /// SASL, when the service names credentials.
    pub sasl: Option<CacheSasl>,
}

/// A cache using every option the renderers can write (TLS with a client certificate, SASL):
/// what the tests of "every owned option is rendered" render with.
#[cfg(test)]
pub(crate) fn full() -> Cache {
    Cache {
        servers: vec!["mc-0:11212".into()],
        tls: Some(CacheTls {
            ca_file: "/etc/ssl/cache-ca/ca.crt".into(),
            client_cert: Some((
                "/etc/ssl/cache-client/tls.crt".into(),
                "/etc/ssl/cache-client/tls.key".into(),
            )),
            verify: VerifyMode::Full,
        }),
        sasl: Some(CacheSasl {
            username: "u".into(),
            password: "p".into(),
        }),
    }
}

/// A client library of memcached, for what it can honour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheClient {
    /// keystonemiddleware's token cache and oslo.cache (every service but Horizon).
    Oslo,
    /// Django's `PyMemcacheCache` (Horizon).
    Django,
}

impl Cache {
    /// Plain memcached at `servers`.
    pub fn plain(servers: Vec<String>) -> Self {
        Cache {
            servers,
            tls: None,
            sasl: None,
        }
    }

    /// What of the cache `client` cannot honour (the field named), `None` when it can
    /// honour all of it. Pure.
    pub fn unsupported(&self, client: CacheClient) -> Option<String> {
        if self.servers.is_empty() {
            return None;
        }
        match client {
            CacheClient::Oslo => self.tls.as_ref().and_then(|t| {
                (t.verify != VerifyMode::Full).then(|| {
                    format!(
                        "spec.tls.verify {:?}: keystonemiddleware and oslo.cache verify memcached's certificate fully (chain and host name) and have no option to do less",
                        t.verify
                    )
                })
            }),
            CacheClient::Django => self.sasl.as_ref().map(|_| {
                "spec.credentials: Django's PyMemcacheCache (pymemcache) has no SASL support".to_string()
            }),
        }
    }
}

/// A value as oslo.config reads it back: `$` starts a substitution, `$$` is a literal `$`.
fn oslo_escape(v: &str) -> String {
    v.replace('$', "$$")
}

/// keystonemiddleware's `memcache_pool_dead_retry` (its default is 300 s).
pub const AUTHTOKEN_DEAD_RETRY_SECONDS: u32 = 10;

/// oslo.cache's `[cache]` retry and failure options with the `dogpile.cache.pymemcache`
/// backend (oslo.cache 4.1: `enable_retry_client` wraps pymemcache's `HashClient` in its
/// `RetryingClient`; the `hashclient_*` options are the `HashClient`'s own).
pub const PYMEMCACHE_OPTIONS: [(&str, &str); 10] = [
    ("enable_retry_client", "true"),
    ("retry_attempts", "3"),
    ("retry_delay", "0.1"),
    ("hashclient_retry_attempts", "30"),
    ("hashclient_retry_timeout", "1"),
    ("hashclient_dead_timeout", "10"),
    ("enable_socket_keepalive", "true"),
    ("socket_keepalive_idle", "30"),
    ("socket_keepalive_interval", "10"),
    ("socket_keepalive_count", "3"),
];

/// oslo.cache's `[cache]` failure options with its `oslo_cache.memcache_pool` backend (the
/// retrying client exists for pymemcache only; oslo.cache refuses it with another backend).
pub const POOL_OPTIONS: [(&str, &str); 2] =
    [("memcache_dead_retry", "10"), ("socket_timeout", "3")];

/// Sets keystonemiddleware's token cache in `[keystone_authtoken]`; nothing without servers.
pub fn set_authtoken(ini: &mut Ini, cache: &Cache) {
    const S: &str = "keystone_authtoken";
    if cache.servers.is_empty() {
        return;
    }
    ini.set(S, "memcached_servers", cache.servers.join(","));
    // The (default, advanced) pool skips a server that failed once for this long: 300 s by
    // default, five minutes of every token validated by Keystone after one reset connection.
    ini.set(
        S,
        "memcache_pool_dead_retry",
        AUTHTOKEN_DEAD_RETRY_SECONDS.to_string(),
    );
    if cache.tls.is_none() && cache.sasl.is_none() {
        return;
    }
    // The only pool that honours TLS and SASL (the other ignores TLS without a word).
    ini.set(S, "memcache_use_advanced_pool", "true");
    if let Some(t) = &cache.tls {
        ini.set(S, "memcache_tls_enabled", "true")
            .set(S, "memcache_tls_cafile", t.ca_file.clone());
        if let Some((crt, key)) = &t.client_cert {
            ini.set(S, "memcache_tls_certfile", crt.clone()).set(
                S,
                "memcache_tls_keyfile",
                key.clone(),
            );
        }
    }
    if let Some(s) = &cache.sasl {
        ini.set(S, "memcache_sasl_enabled", "true")
            .set(S, "memcache_username", s.username.clone())
            .set(S, "memcache_password", oslo_escape(&s.password));
    }
}

/// Sets oslo.cache's `[cache]`: disabled without servers; pymemcache (with TLS) without SASL,
/// oslo.cache's own pool (python-binary-memcached, with TLS) with SASL.
pub fn set_oslo_cache(ini: &mut Ini, cache: &Cache) {
    const S: &str = "cache";
    if cache.servers.is_empty() {
        ini.set(S, "enabled", "false");
        return;
    }
    let backend = if cache.sasl.is_some() {
        "oslo_cache.memcache_pool"
    } else {
        "dogpile.cache.pymemcache"
    };
    ini.set(S, "enabled", "true")
        .set(S, "backend", backend)
        .set(S, "memcache_servers", cache.servers.join(","));
    if cache.sasl.is_some() {
        // oslo.cache's own pool: a failed server is skipped for `memcache_dead_retry` (300 s
        // by default); calls time out after `socket_timeout` (1 s by default).
        for (k, v) in POOL_OPTIONS {
            ini.set(S, k, v);
        }
    } else {
        // pymemcache: retry a failed call on a fresh connection (a connection memcached or
        // the network closed raises MemcacheUnexpectedCloseError, which pymemcache's hash
        // client passes through; without the retrying client Keystone answered 500 for it);
        // keep a failing server in retry mode (misses, not errors) instead of declaring it dead
        // after 2 failures for 60 s (every call then fails with "All servers seem to be down");
        // TCP keepalive finds connections a peer dropped silently.
        for (k, v) in PYMEMCACHE_OPTIONS {
            ini.set(S, k, v);
        }
    }
    if let Some(t) = &cache.tls {
        ini.set(S, "tls_enabled", "true")
            .set(S, "tls_cafile", t.ca_file.clone());
        if let Some((crt, key)) = &t.client_cert {
            ini.set(S, "tls_certfile", crt.clone())
                .set(S, "tls_keyfile", key.clone());
        }
    }
    if let Some(s) = &cache.sasl {
        ini.set(S, "memcache_sasl_enabled", "true")
            .set(S, "username", s.username.clone())
            .set(S, "password", oslo_escape(&s.password));
    }
}

/// Python statements (after `CACHES` is defined) giving Django's pymemcache client the TLS
/// context of `tls`: `ssl.create_default_context` with the CA, host-name checking off for
/// `CaOnly`, no verification at all for `Insecure`, the client certificate when named.
/// `literal` renders a Python string literal.
pub fn django_tls(tls: &CacheTls, literal: impl Fn(&str) -> String) -> String {
    let mut out = String::from("import ssl as _cache_ssl\n");
    out.push_str(&format!(
        "_cache_tls = _cache_ssl.create_default_context(cafile={})\n",
        literal(&tls.ca_file)
    ));
    match tls.verify {
        VerifyMode::Full => {}
        VerifyMode::CaOnly => out.push_str("_cache_tls.check_hostname = False\n"),
        VerifyMode::Insecure => out.push_str(
            "_cache_tls.check_hostname = False\n_cache_tls.verify_mode = _cache_ssl.CERT_NONE\n",
        ),
    }
    if let Some((crt, key)) = &tls.client_cert {
        out.push_str(&format!(
            "_cache_tls.load_cert_chain({}, {})\n",
            literal(crt),
            literal(key)
        ));
    }
    out.push_str("CACHES[\"default\"][\"OPTIONS\"] = {\"tls_context\": _cache_tls}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls_cache() -> Cache {
        Cache {
            servers: vec!["mc-0:11212".into(), "mc-1:11212".into()],
            tls: Some(CacheTls {
                ca_file: "/etc/ssl/cache-ca/ca.crt".into(),
                client_cert: Some((
                    "/etc/ssl/cache-client/tls.crt".into(),
                    "/etc/ssl/cache-client/tls.key".into(),
                )),
                verify: VerifyMode::Full,
            }),
            sasl: None,
        }
    }

    fn section(ini: &Ini, s: &str) -> Vec<(String, String)> {
        Ini::parse(&ini.render())
            .0
            .get(s)
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = p
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn authtoken_with_tls_gets_exactly_these_options() {
        let mut ini = Ini::default();
        set_authtoken(&mut ini, &tls_cache());
        assert_eq!(
            section(&ini, "keystone_authtoken"),
            pairs(&[
                ("memcache_tls_cafile", "/etc/ssl/cache-ca/ca.crt"),
                ("memcache_tls_certfile", "/etc/ssl/cache-client/tls.crt"),
                ("memcache_tls_enabled", "true"),
                ("memcache_pool_dead_retry", "10"),
                ("memcache_tls_keyfile", "/etc/ssl/cache-client/tls.key"),
                ("memcache_use_advanced_pool", "true"),
                ("memcached_servers", "mc-0:11212,mc-1:11212"),
            ])
        );
    }

    #[test]
    fn authtoken_with_sasl_and_plain() {
        let mut c = Cache::plain(vec!["mc:11211".into()]);
        let mut ini = Ini::default();
        set_authtoken(&mut ini, &c);
        assert_eq!(
            section(&ini, "keystone_authtoken"),
            pairs(&[
                ("memcache_pool_dead_retry", "10"),
                ("memcached_servers", "mc:11211")
            ])
        );
        c.sasl = Some(CacheSasl {
            username: "u".into(),
            password: "p $w".into(),
        });
        let mut ini = Ini::default();
        set_authtoken(&mut ini, &c);
        assert_eq!(
            section(&ini, "keystone_authtoken"),
            pairs(&[
                ("memcache_password", "p $$w"),
                ("memcache_pool_dead_retry", "10"),
                ("memcache_sasl_enabled", "true"),
                ("memcache_use_advanced_pool", "true"),
                ("memcache_username", "u"),
                ("memcached_servers", "mc:11211"),
            ])
        );
        let mut ini = Ini::default();
        set_authtoken(&mut ini, &Cache::default());
        assert!(section(&ini, "keystone_authtoken").is_empty());
    }

    #[test]
    fn oslo_cache_tls_uses_pymemcache_and_sasl_the_oslo_pool() {
        let with = |p: &[(&str, &str)], extra: &[(&'static str, &'static str)]| {
            let mut v: Vec<(&str, &str)> = p.to_vec();
            v.extend_from_slice(extra);
            pairs(&v)
        };
        let mut ini = Ini::default();
        set_oslo_cache(&mut ini, &tls_cache());
        assert_eq!(
            section(&ini, "cache"),
            with(
                &[
                    ("backend", "dogpile.cache.pymemcache"),
                    ("enabled", "true"),
                    ("memcache_servers", "mc-0:11212,mc-1:11212"),
                    ("tls_cafile", "/etc/ssl/cache-ca/ca.crt"),
                    ("tls_certfile", "/etc/ssl/cache-client/tls.crt"),
                    ("tls_enabled", "true"),
                    ("tls_keyfile", "/etc/ssl/cache-client/tls.key"),
                ],
                &PYMEMCACHE_OPTIONS
            )
        );
        let mut c = Cache::plain(vec!["mc:11211".into()]);
        let mut ini = Ini::default();
        set_oslo_cache(&mut ini, &c);
        assert_eq!(
            section(&ini, "cache"),
            with(
                &[
                    ("backend", "dogpile.cache.pymemcache"),
                    ("enabled", "true"),
                    ("memcache_servers", "mc:11211"),
                ],
                &PYMEMCACHE_OPTIONS
            )
        );
        let rendered = ini.render();
        for line in [
            "enable_retry_client = true",
            "retry_attempts = 3",
            "hashclient_dead_timeout = 10",
        ] {
            assert!(rendered.contains(line), "{line} not in {rendered}");
        }
        c.sasl = Some(CacheSasl {
            username: "u".into(),
            password: "p".into(),
        });
        let mut ini = Ini::default();
        set_oslo_cache(&mut ini, &c);
        assert_eq!(
            section(&ini, "cache"),
            with(
                &[
                    ("backend", "oslo_cache.memcache_pool"),
                    ("enabled", "true"),
                    ("memcache_sasl_enabled", "true"),
                    ("memcache_servers", "mc:11211"),
                    ("password", "p"),
                    ("username", "u"),
                ],
                &POOL_OPTIONS
            )
        );
        // oslo.cache refuses the retrying client with any backend but pymemcache.
        assert!(!ini.render().contains("enable_retry_client"));
        let mut ini = Ini::default();
        set_oslo_cache(&mut ini, &Cache::default());
        assert_eq!(section(&ini, "cache"), pairs(&[("enabled", "false")]));
    }

    #[test]
    fn what_each_client_cannot_honour_is_named() {
        let mut c = tls_cache();
        assert_eq!(c.unsupported(CacheClient::Oslo), None);
        assert_eq!(c.unsupported(CacheClient::Django), None);
        for v in [VerifyMode::CaOnly, VerifyMode::Insecure] {
            if let Some(t) = c.tls.as_mut() {
                t.verify = v;
            }
            let why = c.unsupported(CacheClient::Oslo).unwrap_or_default();
            assert!(why.starts_with("spec.tls.verify"), "{why}");
            assert_eq!(c.unsupported(CacheClient::Django), None);
        }
        c.sasl = Some(CacheSasl {
            username: "u".into(),
            password: "p".into(),
        });
        let why = c.unsupported(CacheClient::Django).unwrap_or_default();
        assert!(why.starts_with("spec.credentials"), "{why}");
        assert_eq!(Cache::default().unsupported(CacheClient::Django), None);
    }

    #[test]
    fn django_tls_maps_every_verify_mode() {
        let lit = |s: &str| format!("{s:?}");
        let mut t = tls_cache().tls.unwrap_or_else(|| unreachable!());
        let full = django_tls(&t, lit);
        assert!(full.contains("create_default_context(cafile=\"/etc/ssl/cache-ca/ca.crt\")"));
        assert!(!full.contains("check_hostname"));
        assert!(full.contains(
            "load_cert_chain(\"/etc/ssl/cache-client/tls.crt\", \"/etc/ssl/cache-client/tls.key\")"
        ));
        t.verify = VerifyMode::CaOnly;
        let ca_only = django_tls(&t, lit);
        assert!(ca_only.contains("check_hostname = False"));
        assert!(!ca_only.contains("CERT_NONE"));
        t.verify = VerifyMode::Insecure;
        assert!(django_tls(&t, lit).contains("verify_mode = _cache_ssl.CERT_NONE"));
    }
}
