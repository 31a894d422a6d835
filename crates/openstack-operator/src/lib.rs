//! The `openstack-operator` binary's library: its command line ([`cli`]) and subcommands
//! (`run`, `control-plane`, `virtual-kubelet`, `crds`). A library so tests can reach the
//! command line's own definition (`cli::command()`), e.g. to check the docs against it.

pub mod cli;
pub mod control_plane;
mod logging;
pub mod plan;
pub mod run;
pub mod vk;
mod vk_tenants;
mod webhook;

#[cfg(test)]
mod docs_check;
