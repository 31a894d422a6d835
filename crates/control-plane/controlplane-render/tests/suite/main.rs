//! The crate's integration tests as one test binary: each module was a test binary of its own
//! (they linked the whole workspace each). `scripts/run-tests.py` runs each module in a process
//! of its own, as before; by hand: `cargo test -p controlplane-render --test suite MODULE::`.

mod cache_retry_boot;
mod cache_tls_boot;
mod cinder_boot;
mod credential_migrate_script;
mod db_init_tls;
mod glance_boot;
mod horizon_boot;
mod keystone_boot;
mod neutron_boot;
mod nova_az_aggregates;
mod nova_boot;
mod novnc_tls_boot;
mod placement_boot;
mod support;
mod tls_boot;
mod tls_cloud_boot;
mod upgrade_boot;
mod upgrade_glance_cinder_boot;
