//! End-to-end harness: runs the `openstack-operator` binary as a process against a
//! Kubernetes API (a real cluster named by `E2E_KUBECONFIG`, else an in-process
//! kube-emulator) and the OpenStack cloud named by `OS_CLOUD` / `OS_CLIENT_CONFIG_FILE`.
//!
//! A test builds a [`TestEnv`] (target, CRDs, namespace, OpenStack connection, ready
//! operator) and runs its body with [`TestEnv::run`], which cleans up whatever happens.
//! Everything waits by polling with a deadline ([`wait_for`]); nothing sleeps to assert.
//!
//! Environment:
//! - `OS_CLOUD`, `OS_CLIENT_CONFIG_FILE` (required), `TEST_CLOUD_IMAGE_URL_BASE` (image
//!   tests): `eval "$(scripts/test-cloud env)"`, or what `scripts/test` sets.
//! - `E2E_KUBECONFIG`: run against that cluster instead of a fresh emulator per test. The
//!   operator reconciles every cluster-scoped object it sees, so on a shared cluster the
//!   tests of one binary take turns (cargo runs test binaries one after another anyway).
//! - Operator logs: `$CARGO_TARGET_DIR/e2e-logs/<test>.log` (else `e2e-logs` beside the
//!   binary's profile directory); a failed test prints the last 200 lines.

#![warn(missing_docs)]

pub mod env;
pub mod inventory;
pub mod k8s;
pub mod metrics;
pub mod names;
pub mod operator;
pub mod proxy;
pub mod target;
pub mod vk;
pub mod wait;

pub use env::{EnvOptions, TestEnv};
pub use inventory::{Inventory, Scope};
pub use k8s::{ApplyError, Managed, Refusal, names_field};
/// The emulator's handle and its fault hooks' types (for [`Target::emulator`]).
pub use kube_emulator::Handle as EmulatorHandle;
pub use kube_emulator::faults::{FailRule, FaultRequest};
pub use metrics::Metrics;
pub use names::unique;
pub use operator::{Operator, OperatorOptions};
pub use target::{CloudEnv, Target, http_get};
pub use vk::{VirtualKubelet, ZunTenant};
pub use wait::{Check, wait_for};
