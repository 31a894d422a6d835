//! The `controlplane.sunet.se/v1alpha1` API of the control-plane operator: `OpenStackCluster`
//! (the composition), one kind per OpenStack service (`Keystone` first; the others share
//! [`ServiceTemplate`] and the same status), and `OpenStackExternalService` (databases,
//! message queues, caches, object stores and OVN we reference but never deploy). Schema rules
//! (OpenAPI + CEL), defaults and pure validation; no I/O.

pub mod admission;
pub mod cinder;
pub mod cluster;
pub mod common;
pub mod external;
pub mod glance;
pub mod horizon;
pub mod keystone;
pub mod neutron;
pub mod nova;
pub mod options;
pub mod placement;
pub mod status;
pub mod upgrade;
pub mod validation;
pub mod zones;

pub use cinder::{Cinder, CinderSpec};
pub use cluster::{OpenStackCluster, OpenStackClusterSpec, ServiceName};
pub use common::{ControlPlaneStatus, ServiceTemplate, condition_types};
pub use external::{OpenStackExternalService, OpenStackExternalServiceSpec, ServiceKind};
pub use glance::{Glance, GlanceSpec};
pub use horizon::{Horizon, HorizonSpec};
pub use keystone::{Keystone, KeystoneSpec};
pub use neutron::{Neutron, NeutronSpec};
pub use nova::{Nova, NovaSpec};
pub use placement::{Placement, PlacementSpec};
pub use status::{Conditioned, JobRecord, ServiceStatus};
pub use zones::AvailabilityZone;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// The API group of every kind in this crate.
pub const GROUP: &str = "controlplane.sunet.se";
/// The single served and stored version.
pub const VERSION: &str = "v1alpha1";
/// The OpenStack release deployed when a spec names none.
pub const DEFAULT_RELEASE: &str = "2026.1";
/// Releases this operator can render configuration for (and upgrade between: see
/// [`upgrade::UPGRADE_EDGES`]).
pub const RELEASES: &[&str] = &["2025.2", "2026.1"];

/// Every CRD of the control-plane operator, in a stable order.
pub fn all_crds() -> Vec<CustomResourceDefinition> {
    vec![
        OpenStackCluster::crd(),
        Keystone::crd(),
        Placement::crd(),
        Nova::crd(),
        Cinder::crd(),
        Glance::crd(),
        Neutron::crd(),
        Horizon::crd(),
        OpenStackExternalService::crd(),
    ]
}

/// Renders all CRDs as one multi-document YAML stream.
pub fn all_crds_yaml() -> Result<String, serde_saphyr::SerializeError> {
    let mut out = String::new();
    for crd in all_crds() {
        out.push_str("---\n");
        out.push_str(&api::crd_yaml(&crd)?);
    }
    Ok(out)
}
