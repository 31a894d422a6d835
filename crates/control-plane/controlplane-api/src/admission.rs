//! Cross-object admission checks: what CEL cannot say because it needs another object (the
//! type of a referenced `OpenStackExternalService`) or a list the operator owns (the releases
//! it can deploy). Pure: the caller (the operator's validating webhook) reads the referenced
//! objects and passes what it found.
//!
//! A referenced external service that does not exist (yet) is *not* a refusal: objects may be
//! applied in any order, and the controllers report such a reference as `Blocked` until the
//! object appears. Only a reference that exists and is of the wrong type is refused.

use std::collections::BTreeMap;

use api::FieldError;

use crate::cinder::CinderSpec;
use crate::cluster::{OpenStackClusterSpec, ServiceName};
use crate::external::ServiceKind;
use crate::glance::GlanceSpec;
use crate::horizon::HorizonSpec;
use crate::keystone::KeystoneSpec;
use crate::neutron::NeutronSpec;
use crate::nova::NovaSpec;
use crate::placement::PlacementSpec;

/// Releases the operator accepts at admission. Today the ones it can render configuration
/// for; the upgrade version graph is meant to answer this (its nodes) once it exists.
pub fn supported_releases() -> &'static [&'static str] {
    crate::RELEASES
}

/// Refuses a release the operator cannot deploy, naming the allowed ones.
pub fn check_release(path: &str, release: &str) -> Option<FieldError> {
    (!supported_releases().contains(&release)).then(|| FieldError {
        path: path.into(),
        message: format!(
            "release {release:?} is not supported; supported: {}",
            supported_releases().join(", ")
        ),
    })
}

/// On UPDATE: moving from release `old` to `new` follows the version graph (adjacent
/// releases only). Going back along an edge is admitted: it abandons an upgrade that has not
/// migrated yet, which only the controller can tell (it answers `InvalidSpec` otherwise).
pub fn check_release_change(path: &str, old: &str, new: &str) -> Option<FieldError> {
    if old == new {
        return None;
    }
    // A change of release is an upgrade: only along the version graph's edges.
    check_release(path, new).or_else(|| {
        let abandon = crate::upgrade::check_transition(new, old).is_ok();
        crate::upgrade::check_transition(old, new)
            .err()
            .filter(|_| !abandon)
            .map(|message| FieldError {
                path: path.into(),
                message,
            })
    })
}

/// One reference from an object to an `OpenStackExternalService` of the same namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// The field holding the reference, e.g. `spec.externalServices.messaging`.
    pub path: String,
    /// The referenced object's name.
    pub name: String,
    /// The type the field requires.
    pub expected: ServiceKind,
}

fn reference(path: &str, name: &str, expected: ServiceKind) -> Reference {
    Reference {
        path: path.into(),
        name: name.into(),
        expected,
    }
}

/// The external services an `OpenStackCluster` references, by role.
pub fn cluster_references(spec: &OpenStackClusterSpec) -> Vec<Reference> {
    let e = &spec.external_services;
    let mut out = vec![reference(
        "spec.externalServices.database",
        &e.database.name,
        ServiceKind::Database,
    )];
    for (field, r, kind) in [
        ("messaging", &e.messaging, ServiceKind::Messaging),
        ("cache", &e.cache, ServiceKind::Cache),
        (
            "objectStorage",
            &e.object_storage,
            ServiceKind::ObjectStorage,
        ),
        ("ovn", &e.ovn, ServiceKind::Ovn),
    ] {
        if let Some(r) = r {
            out.push(reference(
                &format!("spec.externalServices.{field}"),
                &r.name,
                kind,
            ));
        }
    }
    out
}

/// A service kind's spec as admission sees it: its release and its references to external
/// services. Every service kind (not the cluster, which also checks roles) is checked alike.
pub trait ServiceAdmission {
    /// `spec.release`.
    fn release(&self) -> &str;
    /// The external services the spec references, by field.
    fn references(&self) -> Vec<Reference>;
}

fn database_and_cache(
    database: &crate::common::ExternalServiceRef,
    cache: Option<&crate::common::ExternalServiceRef>,
) -> Vec<Reference> {
    let mut out = vec![reference(
        "spec.database.service",
        &database.name,
        ServiceKind::Database,
    )];
    if let Some(c) = cache {
        out.push(reference("spec.cache", &c.name, ServiceKind::Cache));
    }
    out
}

/// Nova and Cinder also name their message queue.
fn with_messaging(
    mut refs: Vec<Reference>,
    messaging: &crate::common::ExternalServiceRef,
) -> Vec<Reference> {
    refs.push(reference(
        "spec.messaging",
        &messaging.name,
        ServiceKind::Messaging,
    ));
    refs
}

impl ServiceAdmission for KeystoneSpec {
    fn release(&self) -> &str {
        &self.release
    }
    fn references(&self) -> Vec<Reference> {
        database_and_cache(&self.database.service, self.cache.as_ref())
    }
}

impl ServiceAdmission for PlacementSpec {
    fn release(&self) -> &str {
        &self.release
    }
    fn references(&self) -> Vec<Reference> {
        database_and_cache(&self.database.service, self.cache.as_ref())
    }
}

impl ServiceAdmission for GlanceSpec {
    fn release(&self) -> &str {
        &self.release
    }
    fn references(&self) -> Vec<Reference> {
        let mut out = database_and_cache(&self.database.service, self.cache.as_ref());
        if let Some(s3) = &self.storage.s3 {
            out.push(reference(
                "spec.storage.s3.objectStorage",
                &s3.object_storage.name,
                ServiceKind::ObjectStorage,
            ));
        }
        out
    }
}

impl ServiceAdmission for NovaSpec {
    fn release(&self) -> &str {
        &self.release
    }
    fn references(&self) -> Vec<Reference> {
        with_messaging(
            database_and_cache(&self.database.service, self.cache.as_ref()),
            &self.messaging,
        )
    }
}

impl ServiceAdmission for CinderSpec {
    fn release(&self) -> &str {
        &self.release
    }
    fn references(&self) -> Vec<Reference> {
        with_messaging(
            database_and_cache(&self.database.service, self.cache.as_ref()),
            &self.messaging,
        )
    }
}

impl ServiceAdmission for NeutronSpec {
    fn release(&self) -> &str {
        &self.release
    }
    fn references(&self) -> Vec<Reference> {
        let mut out = database_and_cache(&self.database.service, self.cache.as_ref());
        out.push(reference("spec.ovn", &self.ovn.name, ServiceKind::Ovn));
        out
    }
}

impl ServiceAdmission for HorizonSpec {
    fn release(&self) -> &str {
        &self.release
    }
    fn references(&self) -> Vec<Reference> {
        self.cache
            .iter()
            .map(|c| reference("spec.cache", &c.name, ServiceKind::Cache))
            .collect()
    }
}

/// Refuses each reference whose object was found with another type. `found` maps the names
/// of the referenced objects that exist to their `spec.type`; missing ones are skipped (see
/// the module documentation).
pub fn check_types(refs: &[Reference], found: &BTreeMap<String, ServiceKind>) -> Vec<FieldError> {
    refs.iter()
        .filter_map(|r| {
            let actual = found.get(&r.name)?;
            (*actual != r.expected).then(|| FieldError {
                path: r.path.clone(),
                message: format!(
                    "OpenStackExternalService {:?} is of type {actual}, expected {}",
                    r.name, r.expected
                ),
            })
        })
        .collect()
}

/// The external-service roles a service cannot run without (the database is always required
/// by the schema). Glance falls back to its file store without `objectStorage`; Keystone,
/// Placement and Horizon use a cache only when one is named.
pub fn required_roles(service: ServiceName) -> &'static [ServiceKind] {
    match service {
        ServiceName::Nova | ServiceName::Cinder => &[ServiceKind::Messaging],
        ServiceName::Neutron => &[ServiceKind::Ovn],
        ServiceName::Keystone
        | ServiceName::Glance
        | ServiceName::Placement
        | ServiceName::Horizon => &[],
    }
}

/// Refuses services listed without an external service they need, naming both.
pub fn check_required_roles(spec: &OpenStackClusterSpec) -> Vec<FieldError> {
    let e = &spec.external_services;
    let named = |kind: ServiceKind| match kind {
        ServiceKind::Database => true,
        ServiceKind::Messaging => e.messaging.is_some(),
        ServiceKind::Cache => e.cache.is_some(),
        ServiceKind::ObjectStorage => e.object_storage.is_some(),
        ServiceKind::Ovn => e.ovn.is_some(),
    };
    let mut out = Vec::new();
    for (i, s) in spec.services.iter().enumerate() {
        for kind in required_roles(*s) {
            if !named(*kind) {
                out.push(FieldError {
                    path: format!("spec.services[{i}]"),
                    message: format!(
                        "{} needs an external service of role {kind}: set spec.externalServices.{kind}",
                        s.as_str()
                    ),
                });
            }
        }
    }
    out
}

/// Every cross-object refusal of an `OpenStackCluster`: release, required roles, types of the
/// referenced external services found. `old` is the stored spec on UPDATE.
pub fn check_cluster(
    spec: &OpenStackClusterSpec,
    old: Option<&OpenStackClusterSpec>,
    found: &BTreeMap<String, ServiceKind>,
) -> Vec<FieldError> {
    let mut out = Vec::new();
    let release = match old {
        Some(o) => check_release_change("spec.release", &o.release, &spec.release),
        None => check_release("spec.release", &spec.release),
    };
    out.extend(release);
    out.extend(check_required_roles(spec));
    out.extend(check_types(&cluster_references(spec), found));
    out
}

/// Every cross-object refusal of a service kind: its release (or release change on UPDATE,
/// `old` being the stored spec) and the types of the referenced external services found.
pub fn check_service<S: ServiceAdmission>(
    spec: &S,
    old: Option<&S>,
    found: &BTreeMap<String, ServiceKind>,
) -> Vec<FieldError> {
    let mut out = Vec::new();
    out.extend(match old {
        Some(o) => check_release_change("spec.release", o.release(), spec.release()),
        None => check_release("spec.release", spec.release()),
    });
    out.extend(check_types(&spec.references(), found));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::ExternalServices;
    use crate::common::ExternalServiceRef;

    fn cluster(services: Vec<ServiceName>) -> OpenStackClusterSpec {
        OpenStackClusterSpec {
            release: crate::DEFAULT_RELEASE.into(),
            services,
            templates: Default::default(),
            external_services: ExternalServices {
                database: ExternalServiceRef { name: "db".into() },
                messaging: Some(ExternalServiceRef { name: "mq".into() }),
                ..Default::default()
            },
            public_hostname_pattern: None,
            availability_zones: vec![],
            cinder_backends: vec![],
            upgrade: None,
        }
    }

    fn found(pairs: &[(&str, ServiceKind)]) -> BTreeMap<String, ServiceKind> {
        pairs.iter().map(|(n, k)| (n.to_string(), *k)).collect()
    }

    #[test]
    fn wrong_type_is_refused_naming_field_and_types() {
        let mut spec = cluster(vec![ServiceName::Keystone]);
        spec.external_services.messaging = Some(ExternalServiceRef { name: "db".into() });
        let errs = check_cluster(&spec, None, &found(&[("db", ServiceKind::Database)]));
        assert_eq!(
            api::validation::summarize(&errs),
            "spec.externalServices.messaging: OpenStackExternalService \"db\" is of type database, expected messaging"
        );
    }

    #[test]
    fn missing_reference_is_not_refused() {
        let spec = cluster(vec![ServiceName::Keystone]);
        assert!(check_cluster(&spec, None, &found(&[])).is_empty());
        let ok = found(&[
            ("db", ServiceKind::Database),
            ("mq", ServiceKind::Messaging),
        ]);
        assert!(check_cluster(&spec, None, &ok).is_empty());
    }

    #[test]
    fn service_without_its_role_is_refused() {
        let mut spec = cluster(vec![
            ServiceName::Keystone,
            ServiceName::Nova,
            ServiceName::Neutron,
        ]);
        spec.external_services.messaging = None;
        assert_eq!(
            api::validation::summarize(&check_cluster(&spec, None, &found(&[]))),
            "spec.services[1]: nova needs an external service of role messaging: set spec.externalServices.messaging; \
             spec.services[2]: neutron needs an external service of role ovn: set spec.externalServices.ovn"
        );
        // Glance runs on its file store without object storage.
        assert!(check_required_roles(&cluster(vec![ServiceName::Glance])).is_empty());
    }

    #[test]
    fn release_outside_the_supported_set_is_refused() {
        let mut spec = cluster(vec![ServiceName::Keystone]);
        spec.release = "2023.1".into();
        assert_eq!(
            api::validation::summarize(&check_cluster(&spec, None, &found(&[]))),
            format!(
                "spec.release: release \"2023.1\" is not supported; supported: {}",
                supported_releases().join(", ")
            )
        );
        // An unchanged release on UPDATE is not re-judged (it was admitted before).
        let old = spec.clone();
        assert!(check_cluster(&spec, Some(&old), &found(&[])).is_empty());
    }

    #[test]
    fn a_release_change_follows_the_version_graph() {
        assert_eq!(
            check_release_change("spec.release", "2025.2", "2026.1"),
            None
        );
        // Back along an edge: abandoning an upgrade, which the controller judges.
        assert_eq!(
            check_release_change("spec.release", "2026.1", "2025.2"),
            None
        );
        let refused = check_release_change("spec.release", "2026.1", "2027.1")
            .map(|e| e.message)
            .unwrap_or_default();
        assert!(refused.contains("\"2027.1\" is not supported"), "{refused}");
    }

    #[test]
    fn every_service_kind_checks_its_references_and_release() {
        let nova: NovaSpec = serde_json::from_value(serde_json::json!({
            "database": {"service": {"name": "db"}}, "messaging": {"name": "db"},
            "keystone": {"name": "ks"}, "placement": {"name": "pl"}, "cache": {"name": "mq"},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let found = found(&[
            ("db", ServiceKind::Database),
            ("mq", ServiceKind::Messaging),
        ]);
        assert_eq!(
            api::validation::summarize(&check_service(&nova, None, &found)),
            "spec.cache: OpenStackExternalService \"mq\" is of type messaging, expected cache; \
             spec.messaging: OpenStackExternalService \"db\" is of type database, expected messaging"
        );
        let neutron: NeutronSpec = serde_json::from_value(serde_json::json!({
            "release": "2024.1", "database": {"service": {"name": "db"}}, "keystone": {"name": "ks"},
            "ovn": {"name": "mq"},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            api::validation::summarize(&check_service(&neutron, None, &found)),
            format!(
                "spec.release: release \"2024.1\" is not supported; supported: {}; \
                 spec.ovn: OpenStackExternalService \"mq\" is of type messaging, expected ovn",
                supported_releases().join(", ")
            )
        );
        let glance: GlanceSpec = serde_json::from_value(serde_json::json!({
            "database": {"service": {"name": "db"}}, "keystone": {"name": "ks"},
            "storage": {"s3": {"objectStorage": {"name": "db"}, "bucket": "images"}},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            api::validation::summarize(&check_service(&glance, None, &found)),
            "spec.storage.s3.objectStorage: OpenStackExternalService \"db\" is of type database, expected objectStorage"
        );
        let horizon: HorizonSpec = serde_json::from_value(serde_json::json!({
            "keystone": {"name": "ks"}, "cache": {"name": "db"},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            api::validation::summarize(&check_service(&horizon, None, &found)),
            "spec.cache: OpenStackExternalService \"db\" is of type database, expected cache"
        );
        let cinder: CinderSpec = serde_json::from_value(serde_json::json!({
            "database": {"service": {"name": "db"}}, "keystone": {"name": "ks"},
            "messaging": {"name": "mq"}, "backends": [],
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(check_service(&cinder, None, &found).is_empty());
        // On UPDATE the release follows the graph.
        let mut old = cinder.clone();
        old.release = "2025.2".into();
        let mut new = cinder.clone();
        new.release = "2024.2".into();
        assert!(!check_service(&new, Some(&old), &found).is_empty());
    }
}
