//! Reconcilers of the control-plane operator (`controlplane.sunet.se`): external services
//! checked for real, Keystone deployed through render → Jobs → Deployment → token probe, and
//! `OpenStackCluster` composing and rolling up the services.
//!
//! The resource operator's framework (`controllers::framework`) is built around an OpenStack
//! cloud connection, the seed's `phase` and its finalizer; these kinds have none of them (their
//! children are Kubernetes objects collected through owner references), so they share this
//! crate's smaller runtime: [`State`] → the five standard conditions, Events on transitions,
//! metrics per kind, status by server-side apply only when it changed.

pub mod cinder;
pub mod cluster;
pub mod external;
pub mod glance;
pub mod horizon;
pub mod hysteresis;
pub mod keystone;
pub mod messaging;
pub mod neutron;
pub mod nova;
pub mod placement;
pub mod rollout;
pub mod runtime;
pub mod service;
pub mod tls;
pub mod upgrade;
pub mod zones;

pub use runtime::{Config, Ctx, Metrics};
