//! What the boot proofs share lives in the `service-boot` crate (the resource operator's
//! examples test boots a whole cloud with the same pieces); each proof keeps `support::` names.

pub use service_boot::*;
