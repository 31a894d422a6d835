//! The real adapter on `openstack_sdk`.
//!
//! - [`core`]: the shared client ([`Core`], [`Request`], [`Response`]) — auth,
//!   catalog, microversions, rate limiting, retries, timeouts, request ids,
//!   metrics. Every HTTP call of every adapter goes through [`Core::send`].
//! - [`identity`], [`compute`], [`block_storage`]: Keystone, Nova, Cinder.
//! - [`image`], [`network`]: Glance and Neutron (written by a second
//!   author on the same core). Each file defines `pub(crate) fn
//!   adapter(core: Core) -> Arc<dyn Image>` (resp. `Arc<dyn Network>`),
//!   which [`Cloud::from_core`] calls, so an adapter can be swapped without
//!   touching this module; [`Unavailable`] is the stand-in for a service an
//!   adapter does not (yet) cover — every call fails with [`crate::Error::Config`].
//!
//! Adapters build a [`Request`] (service, operation label, method, path
//! relative to the discovered endpoint, query, JSON body, microversion) and
//! hand it to [`Core::send`] or [`Core::list_all`] (paginated collections).

pub mod block_storage;
pub mod compute;
pub mod config;
pub mod container;
pub mod core;
pub mod identity;
pub mod image;
pub mod metrics;
pub mod network;
pub mod ratelimit;
pub mod retry;
mod unavailable;

use std::sync::Arc;

pub use self::config::{ClientOptions, CloudSelector};
pub use self::container::ContainerAdapter;
pub use self::core::{
    CloudEndpoint, Core, Request, Response, Service, TokenCredential, TokenSubject,
};
pub use self::metrics::Metrics;
pub use self::unavailable::Unavailable;
use crate::error::Result;
use crate::traits::Cloud;

impl Cloud {
    /// Connect to the cloud named by `OS_CLOUD` in `OS_CLIENT_CONFIG_FILE`
    /// (see [`CloudSelector::Env`]) with options from the environment.
    pub async fn from_env() -> Result<Self> {
        Self::connect(&CloudSelector::Env, ClientOptions::from_env()?).await
    }

    /// Connect to the selected cloud with the given options.
    pub async fn connect(selector: &CloudSelector, options: ClientOptions) -> Result<Self> {
        let core = Core::connect(selector, options).await?;
        Ok(Self::from_core(core))
    }

    /// Build the five ports on an existing [`Core`].
    pub fn from_core(core: Core) -> Self {
        Self {
            identity: Arc::new(identity::IdentityAdapter::new(core.clone())),
            compute: Arc::new(compute::ComputeAdapter::new(core.clone())),
            image: image::adapter(core.clone()),
            network: network::adapter(core.clone()),
            block_storage: Arc::new(block_storage::BlockStorageAdapter::new(core)),
        }
    }
}

/// Percent-encode one path segment (names and ids go into URLs).
pub(crate) fn seg(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}
