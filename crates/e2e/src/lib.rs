//! End-to-end harness: runs the `openstack-operator` binary as a process against a
//! Kubernetes API (a real cluster named by `E2E_KUBECONFIG`, else an in-process
//! kube-emulator) and the OpenStack cloud named by `OS_CLOUD` / `OS_CLIENT_CONFIG_FILE`.
//!
//! A test builds a [`TestEnv`] (target, CRDs, namespace, OpenStack connection, ready
//! operator) and runs its body with [`TestEnv::run`], which cleans up whatever happens.
//! Everything waits by polling with a deadline ([`wait_for`]); nothing sleeps to assert.

pub mod env;
pub mod k8s;
pub mod metrics;
pub mod names;
pub mod operator;
pub mod target;
pub mod wait;

pub use env::{EnvOptions, TestEnv};
pub use k8s::{ApplyError, Managed};
pub use metrics::Metrics;
pub use names::unique;
pub use operator::{Operator, OperatorOptions};
pub use target::{CloudEnv, Target, http_get};
pub use wait::{Check, wait_for};
