//! The crate's integration tests as one test binary: each module was a test binary of its own
//! (they linked the whole workspace each). `scripts/run-tests.py` runs each module in a process
//! of its own, as before; by hand: `cargo test -p openstack-operator --test suite MODULE::`.

mod clouds_common;
mod cp_common;
mod e2e_bad_input;
mod e2e_clouds;
mod e2e_cluster_kinds;
mod e2e_cluster_policies;
mod e2e_control_plane;
mod e2e_control_plane_admission;
mod e2e_control_plane_az;
mod e2e_control_plane_bad_input;
mod e2e_control_plane_cache;
mod e2e_control_plane_compute;
mod e2e_control_plane_full;
mod e2e_control_plane_network_image;
mod e2e_control_plane_node;
mod e2e_control_plane_rollout;
mod e2e_control_plane_tls;
mod e2e_external_services;
mod e2e_faults_crash;
mod e2e_faults_kube;
mod e2e_faults_openstack;
mod e2e_faults_restart;
mod e2e_field_report;
mod e2e_kubelet_api;
mod e2e_lifecycle;
mod e2e_operations;
mod e2e_plan;
mod e2e_project;
mod e2e_rotation;
mod e2e_tenant_credentials;
mod e2e_virtual_kubelet;
mod e2e_vk_netpol;
mod e2e_vk_probes;
mod e2e_vk_services;
mod e2e_vk_shutdown;
mod e2e_vk_tenants;
mod e2e_vk_volumes;
mod examples_on_rendered_cloud;
mod faults_common;
mod scripts_pidfile;
mod service_images;
mod vk_common;
