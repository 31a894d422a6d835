//! A test node: pods bound to it run as real containers on the local Docker engine, with what
//! the kubelet gives a container, so that the end-to-end suite proves workloads as real pods
//! from their images (`docs/test-node.md`).
//!
//! It is a provider of the provider-agnostic virtual kubelet ([`vk_runtime`]: the Node, its
//! Lease, the pod watch and status writes are the runtime's), reusing the Zun provider's pure
//! kubelet logic ([`vk_zun::volumes`], [`vk_zun::probes`], [`vk_zun::downward`],
//! [`vk_zun::status::backoff`]).
//!
//! - [`docker`]: the Docker Engine API client (unix socket).
//! - [`netns`]: sockets in the engine's network namespace.
//! - [`spec`] (pure): pod container → Docker create request (env, user, command).
//! - [`state`] (pure): the kubelet's container lifecycle and the pod status.
//! - [`files`]: volumes as host directories bind-mounted into the containers.
//! - [`services`]: Service names and forwarders; [`prober`]: probes.
//! - [`provider`]: the [`vk_runtime::provider::Provider`].
//! - [`workloads`]: Deployments and Jobs to pods on the node, for an API server without
//!   controllers (the emulator).

pub mod docker;
pub mod files;
pub mod netns;
pub mod prober;
pub mod provider;
pub mod services;
pub mod spec;
pub mod state;
pub mod workloads;

pub use provider::{DockerProvider, Settings};
