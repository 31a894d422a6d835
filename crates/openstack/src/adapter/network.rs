//! Network (Neutron) adapter: written separately (see the module docs of
//! [`crate::adapter`] for how to plug it in).

use std::sync::Arc;

use super::{Core, Unavailable};
use crate::traits::Network;

/// The Neutron port for `core`.
pub(crate) fn adapter(_core: Core) -> Arc<dyn Network> {
    Arc::new(Unavailable { service: "network" })
}
