//! A process-wide cache of the lookups every tenant's pass repeats (issue 15, "fewer
//! requests"): the global roles, a domain by name, a user by name, the external networks.
//! None of these objects is ours, so no find-before-create safety rests on them; a value that
//! went stale (a user deleted and made again under the same name) makes a write that names it
//! fail (404/400), and any failed pass empties the cache ([`LookupCache::clear`]), so the
//! retry reads afresh. Entries also expire after a short time, so a change made by hand is
//! seen within that time even when no write fails. Absent objects are never cached: a user
//! made after a pass reported it pending is found by the next pass.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use openstack::model::{Domain, Network};

/// How long a looked-up value is trusted without a failure.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);

/// Values with an expiry.
struct TtlMap<K, V> {
    entries: HashMap<K, (Instant, V)>,
}

impl<K: Eq + Hash, V: Clone> TtlMap<K, V> {
    fn new() -> Self {
        TtlMap {
            entries: HashMap::new(),
        }
    }

    fn get(&mut self, k: &K, now: Instant) -> Option<V> {
        match self.entries.get(k) {
            Some((until, v)) if *until > now => Some(v.clone()),
            Some(_) => {
                self.entries.remove(k);
                None
            }
            None => None,
        }
    }

    fn put(&mut self, k: K, v: V, now: Instant, until: Instant) {
        // Expired entries are dropped on insert, so the map holds at most what one TTL of
        // lookups brought in (domains and users named by the specs).
        self.entries.retain(|_, (u, _)| *u > now);
        self.entries.insert(k, (until, v));
    }
}

struct Inner {
    roles: TtlMap<(), BTreeMap<String, String>>,
    domains: TtlMap<String, Domain>,
    users: TtlMap<(String, String), String>,
    external_networks: TtlMap<(), Vec<Network>>,
}

/// The shared lookups; see the module doc for why stale values are safe.
pub struct LookupCache {
    ttl: Duration,
    inner: Mutex<Inner>,
}

impl Default for LookupCache {
    fn default() -> Self {
        LookupCache::new(DEFAULT_TTL)
    }
}

impl LookupCache {
    /// A cache whose entries live `ttl` (zero: nothing is cached).
    pub fn new(ttl: Duration) -> Self {
        LookupCache {
            ttl,
            inner: Mutex::new(Inner {
                roles: TtlMap::new(),
                domains: TtlMap::new(),
                users: TtlMap::new(),
                external_networks: TtlMap::new(),
            }),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut Inner, Instant) -> T) -> T {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g, Instant::now())
    }

    fn until(&self, now: Instant) -> Option<Instant> {
        (!self.ttl.is_zero()).then(|| now + self.ttl)
    }

    /// Global roles, name → ID.
    pub fn roles(&self) -> Option<BTreeMap<String, String>> {
        self.with(|i, now| i.roles.get(&(), now))
    }

    /// Remembers the global roles.
    pub fn put_roles(&self, roles: &BTreeMap<String, String>) {
        self.with(|i, now| {
            if let Some(u) = self.until(now) {
                i.roles.put((), roles.clone(), now, u);
            }
        });
    }

    /// A domain looked up by `name_or_id`.
    pub fn domain(&self, name_or_id: &str) -> Option<Domain> {
        self.with(|i, now| i.domains.get(&name_or_id.to_string(), now))
    }

    /// Remembers a found domain.
    pub fn put_domain(&self, name_or_id: &str, d: &Domain) {
        self.with(|i, now| {
            if let Some(u) = self.until(now) {
                i.domains.put(name_or_id.to_string(), d.clone(), now, u);
            }
        });
    }

    /// The ID of user `name` in `domain_id`.
    pub fn user(&self, domain_id: &str, name: &str) -> Option<String> {
        self.with(|i, now| i.users.get(&(domain_id.to_string(), name.to_string()), now))
    }

    /// Remembers a found user.
    pub fn put_user(&self, domain_id: &str, name: &str, id: &str) {
        self.with(|i, now| {
            if let Some(u) = self.until(now) {
                let key = (domain_id.to_string(), name.to_string());
                i.users.put(key, id.to_string(), now, u);
            }
        });
    }

    /// The networks with `router:external`.
    pub fn external_networks(&self) -> Option<Vec<Network>> {
        self.with(|i, now| i.external_networks.get(&(), now))
    }

    /// Remembers the external networks.
    pub fn put_external_networks(&self, nets: &[Network]) {
        self.with(|i, now| {
            if let Some(u) = self.until(now) {
                i.external_networks.put((), nets.to_vec(), now, u);
            }
        });
    }

    /// Forgets everything: after any failed pass, so its retry reads afresh.
    pub fn clear(&self) {
        self.with(|i, _| {
            i.roles.entries.clear();
            i.domains.entries.clear();
            i.users.entries.clear();
            i.external_networks.entries.clear();
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn domain(id: &str) -> Domain {
        Domain {
            id: id.into(),
            name: "d".into(),
            ..Default::default()
        }
    }

    #[test]
    fn values_are_served_until_cleared() {
        let c = LookupCache::default();
        assert_eq!(c.domain("d"), None);
        c.put_domain("d", &domain("1"));
        c.put_user("1", "alice", "u1");
        assert_eq!(c.domain("d").map(|d| d.id), Some("1".into()));
        assert_eq!(c.user("1", "alice").as_deref(), Some("u1"));
        assert_eq!(c.user("2", "alice"), None, "users are per domain");
        c.clear();
        assert_eq!(c.domain("d"), None);
        assert_eq!(c.user("1", "alice"), None);
    }

    #[test]
    fn entries_expire() {
        let c = LookupCache::new(Duration::from_millis(20));
        c.put_roles(&BTreeMap::from([("member".to_string(), "r1".to_string())]));
        assert!(c.roles().is_some());
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(c.roles(), None);
    }

    #[test]
    fn a_zero_ttl_caches_nothing() {
        let c = LookupCache::new(Duration::ZERO);
        c.put_external_networks(&[]);
        c.put_domain("d", &domain("1"));
        assert_eq!(c.external_networks(), None);
        assert_eq!(c.domain("d"), None);
    }
}
