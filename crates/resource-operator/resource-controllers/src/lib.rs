//! Reconcilers for every kind. Each follows one pipeline: dereference (read the object, its
//! references and what exists in OpenStack) → validate (pure) → plan (pure: desired vs.
//! observed → steps) → apply (run the steps through the OpenStack port) → status.
//!
//! [`framework`] holds what all kinds share: the kube-runtime `Controller` wiring, the
//! finalizer, status writes by server-side apply, Events, error classification and metrics.

pub mod clouds;
pub mod context;
pub mod domain;
pub mod error;

pub mod flavor;
pub mod framework;
pub mod gc;
pub mod image;

pub mod metrics;
pub mod network;

pub mod ownership;
pub mod plan;

pub mod project;
pub mod rotation;

pub use context::{Config, Context};
pub use error::ReconcileError;
