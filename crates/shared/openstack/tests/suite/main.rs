//! The crate's integration tests as one test binary: each module was a test binary of its own
//! (they linked the whole workspace each). `scripts/run-tests.py` runs each module in a process
//! of its own, as before; by hand: `cargo test -p openstack --test suite MODULE::`.

mod common;
mod compute;
mod container;
mod core_cloud;
mod core_http;
mod identity;
mod image;
mod lost_creates;
mod network;
mod reauth;
