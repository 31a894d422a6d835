//! A provider-agnostic virtual kubelet.
//!
//! - [`provider`]: the contract with a backend ([`provider::Provider`]).
//! - [`node`]: the Node object and its status (pure).
//! - [`runtime`]: the loops: Node registration and status, Lease
//!   heartbeats, the pod watch, status sync, graceful deletion, shutdown.

pub mod node;
pub mod provider;
pub mod runtime;
pub mod status;

pub use runtime::{NodeConfig, OnShutdown, run};
