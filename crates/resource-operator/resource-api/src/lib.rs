//! The `sunet.se/v1alpha1` API: CRD types compatible with the seed operator, their schema
//! rules (OpenAPI + CEL) and pure spec validation. No I/O lives here.

pub mod cloud;
pub mod common;
pub mod domain;
pub mod flavor;
pub mod image;
pub mod manifest;
pub mod naming;
pub mod network;
pub mod project;
pub mod reference;
pub mod tenant;
pub mod validation;

pub use cloud::{CloudRef, OpenstackCloud, OpenstackCloudSpec, OpenstackCloudStatus};
pub use common::{CommonStatus, Condition, ConditionStatus, DeletionPolicy, Phase};
pub use domain::{OpenstackDomain, OpenstackDomainSpec, OpenstackDomainStatus};
pub use flavor::{OpenstackFlavor, OpenstackFlavorSpec, OpenstackFlavorStatus};
pub use image::{OpenstackImage, OpenstackImageSpec, OpenstackImageStatus};
pub use network::{OpenstackNetwork, OpenstackNetworkSpec, OpenstackNetworkStatus};
pub use project::{OpenstackProject, OpenstackProjectSpec, OpenstackProjectStatus};
pub use tenant::{ZunTenant, ZunTenantSpec, ZunTenantStatus};
pub use validation::{FieldError, Validate};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// The API group of every kind in this crate (the seed's).
pub const GROUP: &str = "sunet.se";
/// The single served and stored version.
pub const VERSION: &str = "v1alpha1";
/// The finalizer the seed put on every object; kept so objects move between operators.
pub const FINALIZER: &str = "sunet.se/openstack-operator";

/// Every CRD this operator serves, in a stable order.
pub fn all_crds() -> Vec<CustomResourceDefinition> {
    vec![
        OpenstackDomain::crd(),
        OpenstackFlavor::crd(),
        OpenstackImage::crd(),
        OpenstackNetwork::crd(),
        OpenstackProject::crd(),
        OpenstackCloud::crd(),
    ]
}

/// The CRDs of the Zun virtual kubelet (`virtual-kubelet.sunet.se`), installed with it, not
/// with the resource operator.
pub fn vk_crds() -> Vec<CustomResourceDefinition> {
    vec![ZunTenant::crd()]
}

/// Renders one CRD as a YAML document.
pub fn crd_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string(crd)
}

/// Renders all CRDs as one multi-document YAML stream (what `openstack-operator crds` prints).
pub fn all_crds_yaml() -> Result<String, serde_saphyr::SerializeError> {
    let mut out = String::new();
    for crd in all_crds() {
        out.push_str("---\n");
        out.push_str(&crd_yaml(&crd)?);
    }
    Ok(out)
}
