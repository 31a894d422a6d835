//! Conformance tests: each emulated semantic exercised through a kube-rs
//! client (and kubectl, when installed) against an in-process emulator.

mod common;

mod apply_types;
mod core_kinds;
mod crd;
mod crd_cost;
mod csr;
mod deletion;
mod errors;
mod events_leases;
mod faults;
mod kubectl;
mod patching;
mod pods_kubelet;
mod reviews;
mod tables;
mod token_request;
mod watching;
mod workloads;
