//! The Zun provider of the virtual kubelet.
//!
//! - [`translate`]: pod → Zun create requests (pure): what is mapped, what
//!   is refused with the field named.
//! - [`status`]: what to do on Zun and the pod status to show (pure).
//! - [`provider`]: the [`vk_runtime::provider::Provider`] on the Zun port:
//!   one list per pass, the actions, the node's capacity from the quota.
//! - [`kubelet`]: the kubelet API's backend (logs, exec, attach, stats);
//!   [`exec_session`]: exec with stdin (end-of-input, exit code) through a
//!   wrapper (pure); [`port_forward`]: its port-forward relay in the container.
//! - [`downward`]: env `fieldRef`/`resourceFieldRef` as the kubelet resolves them (pure).
//! - [`network`]: the pod's Neutron network (annotation, `OpenstackProject`, flag).
//! - [`pod_port`]: the pod's own Neutron port (name, find-before-create, sweep).
//! - [`tenant`]: a `ZunTenant`'s node: namespaces admitted, the pod's tenant network.
//! - [`probes`] (pure), [`prober`]: liveness, readiness and startup probes, `preStop` hooks.
//! - [`run_logs`]: the previous run's log (`logs --previous`).
//! - [`services`]: Services of type LoadBalancer as Octavia load balancers; [`netpol`]:
//!   NetworkPolicy → Neutron security-group rules (pure); [`netpol_sync`]: those rules on
//!   the pods' ports (`--network-policies`).
//! - [`volumes`]: ConfigMap, Secret, downwardAPI, projected and emptyDir volumes as
//!   files written into the containers (pure).
//! - [`labels`], [`quantity`]: ownership labels and resource quantities.
//! - [`timed`]: a deadline on each Zun call of the node's loops, slow calls logged and counted.

pub mod downward;
pub mod events;
pub mod exec_session;
pub mod handover;
pub mod kubelet;
pub mod labels;
pub mod netpol;
pub mod netpol_sync;
pub mod network;
pub mod pod_port;
pub mod port_forward;
pub mod prober;
pub mod probes;
pub mod provider;
pub mod quantity;
pub mod restarts;
pub mod run_logs;
pub mod services;
pub mod status;
pub mod tenant;
pub mod timed;
pub mod translate;
pub mod volumes;

pub use provider::{UnlimitedCapacity, ZunProvider};
pub use translate::Config;
