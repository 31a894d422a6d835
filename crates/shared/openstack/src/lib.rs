//! The OpenStack port used by all controllers.
//!
//! - [`model`]: plain data types.
//! - [`Error`]: one error type with the services' messages kept verbatim.
//! - [`Identity`], [`Compute`], [`Image`], [`Network`], [`BlockStorage`]:
//!   object-safe async traits, bundled in [`Cloud`].
//! - [`container::Container`]: the Zun port (containers, capsules, quota),
//!   outside [`Cloud`] because only the virtual kubelet uses it.
//! - [`loadbalancer::LoadBalancers`]: the Octavia port of the virtual kubelet (Services of
//!   type LoadBalancer).
//! - [`app_credential::ApplicationCredentials`]: the caller's own application credentials
//!   (credential rotation).
//! - [`tenant_user::TenantUsers`]: the users holding tenants' application credentials.
//! - [`port::Ports`]: the Neutron ports of the virtual kubelet (its pods' ports).
//! - [`dry_run`]: a read-only view of a [`Cloud`] recording the writes asked of it (`plan`).
//! - [`fake::FakeCloud`]: an in-memory implementation for unit tests.
//! - [`adapter`]: the real implementation on `openstack_sdk`, with the shared
//!   client core (auth, rate limiting, retries, timeouts, metrics).

pub mod adapter;
pub mod app_credential;
pub mod container;
pub mod dry_run;
pub mod error;
pub mod fake;
pub mod loadbalancer;
pub mod model;
pub mod port;
pub mod tenant_user;
mod traits;

pub use error::{Error, OptionalExt, Result};
pub use traits::{BlockStorage, Cloud, Compute, Identity, Image, Network};
