//! The Node object and its status, as pure functions.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus,
    NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use crate::provider::NodeState;

/// What the node is, from flags.
#[derive(Clone, Debug, PartialEq)]
pub struct Identity {
    /// Node name.
    pub name: String,
    /// Labels beyond the standard ones.
    pub labels: BTreeMap<String, String>,
    /// Taints.
    pub taints: Vec<Taint>,
    /// `status.daemonEndpoints.kubeletEndpoint.port`.
    pub kubelet_port: i32,
    /// `nodeInfo.kubeletVersion` (says what it is).
    pub version: String,
    /// `nodeInfo.operatingSystem` and `kubernetes.io/os`.
    pub os: String,
    /// `nodeInfo.architecture` and `kubernetes.io/arch`.
    pub arch: String,
    /// The node's InternalIP.
    pub internal_ip: String,
    /// A resolvable DNS name published as the node's `Hostname` address, if any. kube-apiserver's
    /// default `--kubelet-preferred-address-types` tries `Hostname` before `InternalIP`, and a
    /// virtual node's name rarely resolves: without one, only the InternalIP is published.
    pub hostname: Option<String>,
}

/// The node's labels: the standard ones, the zone, then the extra ones.
pub fn labels(id: &Identity, zone: Option<&str>) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    l.insert("type".into(), "virtual-kubelet".into());
    l.insert("kubernetes.io/role".into(), "agent".into());
    l.insert("kubernetes.io/os".into(), id.os.clone());
    l.insert("kubernetes.io/arch".into(), id.arch.clone());
    l.insert("kubernetes.io/hostname".into(), id.name.clone());
    l.insert(
        "node.kubernetes.io/exclude-from-external-load-balancers".into(),
        "true".into(),
    );
    if let Some(z) = zone {
        l.insert("topology.kubernetes.io/zone".into(), z.into());
    }
    l.extend(id.labels.clone());
    l
}

/// The Node to create (metadata and spec; status is written separately).
pub fn node_object(id: &Identity, zone: Option<&str>) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(id.name.clone()),
            labels: Some(labels(id, zone)),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: Some(id.taints.clone()),
            ..Default::default()
        }),
        status: None,
    }
}

/// The node status for `state`. Condition times follow the kubelet: the
/// heartbeat is `now`, the transition time changes only with the status.
pub fn status(
    id: &Identity,
    state: &NodeState,
    prev: Option<&NodeStatus>,
    now: jiff::Timestamp,
) -> NodeStatus {
    let conditions = state
        .conditions
        .iter()
        .map(|c| {
            let before = prev
                .and_then(|p| p.conditions.as_ref())
                .and_then(|l| l.iter().find(|p| p.type_ == c.type_));
            let since = match before {
                Some(b) if b.status == c.status => b.last_transition_time.clone(),
                _ => Some(Time(now)),
            };
            NodeCondition {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: Some(c.reason.clone()),
                message: Some(c.message.clone()),
                last_heartbeat_time: Some(Time(now)),
                last_transition_time: since,
            }
        })
        .collect();
    let mut addresses = vec![NodeAddress {
        type_: "InternalIP".into(),
        address: id.internal_ip.clone(),
    }];
    if let Some(h) = &id.hostname {
        addresses.push(NodeAddress {
            type_: "Hostname".into(),
            address: h.clone(),
        });
    }
    addresses.extend(state.addresses.iter().cloned());
    NodeStatus {
        capacity: Some(state.capacity.clone()),
        allocatable: Some(state.allocatable.clone()),
        conditions: Some(conditions),
        addresses: Some(addresses),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint {
                port: id.kubelet_port,
            }),
        }),
        node_info: Some(NodeSystemInfo {
            architecture: id.arch.clone(),
            boot_id: String::new(),
            container_runtime_version: "zun://1.40".into(),
            kernel_version: String::new(),
            kube_proxy_version: String::new(),
            kubelet_version: id.version.clone(),
            machine_id: String::new(),
            operating_system: id.os.clone(),
            os_image: "OpenStack Zun".into(),
            system_uuid: String::new(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Whether two statuses differ in anything but heartbeat times.
pub fn changed(a: &NodeStatus, b: &NodeStatus) -> bool {
    let strip = |s: &NodeStatus| {
        let mut s = s.clone();
        for c in s.conditions.iter_mut().flatten() {
            c.last_heartbeat_time = None;
        }
        s
    };
    strip(a) != strip(b)
}

/// The status with Ready set to False (shutdown), other conditions kept.
pub fn not_ready(prev: &NodeStatus, message: &str, now: jiff::Timestamp) -> NodeStatus {
    let mut s = prev.clone();
    for c in s.conditions.iter_mut().flatten() {
        if c.type_ == "Ready" {
            if c.status != "False" {
                c.last_transition_time = Some(Time(now));
            }
            c.status = "False".into();
            c.reason = Some("KubeletNotReady".into());
            c.message = Some(message.into());
            c.last_heartbeat_time = Some(Time(now));
        }
    }
    s
}

/// Annotation the node carries while it is cordoned by its own shutdown, so that the next start
/// uncordons it, and leaves a node an administrator cordoned as it is.
pub const CORDONED_ON_SHUTDOWN: &str = "virtual-kubelet.sunet.se/cordoned-on-shutdown";

/// Whether a Node is cordoned (`spec.unschedulable`, which `kubectl cordon` sets).
pub fn is_cordoned(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

/// The merge patch that cordons `current` on shutdown (as `kubectl cordon` does) and marks it
/// as cordoned by us; `None` when it is cordoned already (by an administrator, or a shutdown
/// whose restart has not run yet), so that a restart does not uncordon it. The
/// resourceVersion makes the patch fail on a concurrent change instead of losing it.
pub fn cordon_patch(current: &Node) -> Option<serde_json::Value> {
    if is_cordoned(current) {
        return None;
    }
    Some(serde_json::json!({
        "metadata": {
            "resourceVersion": current.metadata.resource_version,
            "annotations": {CORDONED_ON_SHUTDOWN: "true"},
        },
        "spec": {"unschedulable": true},
    }))
}

/// The merge patch that brings an existing Node in line with `want` at start: labels and
/// taints as configured, and, when our own shutdown cordoned it, uncordoned (a node an
/// administrator cordoned stays cordoned).
pub fn register_patch(existing: &Node, want: &Node) -> serde_json::Value {
    let mut patch = serde_json::json!({
        "metadata": {"labels": want.metadata.labels},
        "spec": {"taints": want.spec.as_ref().and_then(|s| s.taints.clone())},
    });
    let ours = existing
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(CORDONED_ON_SHUTDOWN));
    if ours {
        patch["metadata"]["annotations"] = serde_json::json!({CORDONED_ON_SHUTDOWN: null});
        patch["spec"]["unschedulable"] = serde_json::Value::Null;
    }
    patch
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Condition;

    fn id() -> Identity {
        Identity {
            name: "vk".into(),
            labels: BTreeMap::new(),
            taints: vec![Taint {
                key: "virtual-kubelet.io/provider".into(),
                value: Some("openstack".into()),
                effect: "NoSchedule".into(),
                ..Default::default()
            }],
            kubelet_port: 10250,
            version: "v1.36.0-vk-openstack-zun-0.1.0".into(),
            os: "linux".into(),
            arch: "amd64".into(),
            internal_ip: "10.1.1.1".into(),
            hostname: None,
        }
    }

    #[test]
    fn only_a_given_hostname_is_published_besides_the_internal_ip() {
        let st = NodeState::default();
        let t0: jiff::Timestamp = "2026-12-01T00:00:00Z".parse().unwrap();
        let kinds = |id: &Identity| -> Vec<(String, String)> {
            status(id, &st, None, t0)
                .addresses
                .unwrap()
                .into_iter()
                .map(|a| (a.type_, a.address))
                .collect()
        };
        assert_eq!(kinds(&id()), [("InternalIP".into(), "10.1.1.1".into())]);
        let mut named = id();
        named.hostname = Some("vk-1.example.org".into());
        assert_eq!(
            kinds(&named),
            [
                ("InternalIP".into(), "10.1.1.1".into()),
                ("Hostname".into(), "vk-1.example.org".into())
            ]
        );
    }

    #[test]
    fn labels_and_taint() {
        let n = node_object(&id(), Some("nova"));
        let l = n.metadata.labels.unwrap();
        assert_eq!(l["type"], "virtual-kubelet");
        assert_eq!(l["kubernetes.io/role"], "agent");
        assert_eq!(l["kubernetes.io/os"], "linux");
        assert_eq!(l["topology.kubernetes.io/zone"], "nova");
        let t = &n.spec.unwrap().taints.unwrap()[0];
        assert_eq!(t.key, "virtual-kubelet.io/provider");
        assert_eq!(t.effect, "NoSchedule");
    }

    #[test]
    fn transition_time_moves_only_on_change() {
        let t0: jiff::Timestamp = "2026-12-01T00:00:00Z".parse().unwrap();
        let t1: jiff::Timestamp = "2026-12-01T00:01:00Z".parse().unwrap();
        let st = NodeState {
            conditions: vec![Condition::new("Ready", true, "KubeletReady", "ok")],
            ..Default::default()
        };
        let a = status(&id(), &st, None, t0);
        let b = status(&id(), &st, Some(&a), t1);
        let cb = &b.conditions.as_ref().unwrap()[0];
        assert_eq!(cb.last_transition_time, Some(Time(t0)));
        assert_eq!(cb.last_heartbeat_time, Some(Time(t1)));
        assert!(!changed(&a, &b), "only the heartbeat moved");
        let down = NodeState {
            conditions: vec![Condition::new("Ready", false, "ZunUnavailable", "x")],
            ..Default::default()
        };
        let c = status(&id(), &down, Some(&b), t1);
        assert!(changed(&b, &c));
        assert_eq!(
            c.conditions.as_ref().unwrap()[0].last_transition_time,
            Some(Time(t1))
        );
        assert_eq!(
            c.daemon_endpoints.unwrap().kubelet_endpoint.unwrap().port,
            10250
        );
        let nr = not_ready(&b, "stopped", t1);
        let r = &nr.conditions.unwrap()[0];
        assert_eq!(r.status, "False");
        assert_eq!(r.reason.as_deref(), Some("KubeletNotReady"));
    }

    #[test]
    fn shutdown_cordons_a_schedulable_node_and_the_restart_uncordons_only_that() {
        let mut n = node_object(&id(), None);
        n.metadata.resource_version = Some("7".into());
        let p = cordon_patch(&n).unwrap();
        assert_eq!(p["spec"]["unschedulable"], true);
        assert_eq!(p["metadata"]["annotations"][CORDONED_ON_SHUTDOWN], "true");
        assert_eq!(p["metadata"]["resourceVersion"], "7");
        // Our own cordon, as the API server stores the patch: the restart lifts it.
        let mut ours = n.clone();
        ours.spec.as_mut().unwrap().unschedulable = Some(true);
        ours.metadata.annotations = Some(BTreeMap::from([(
            CORDONED_ON_SHUTDOWN.into(),
            "true".into(),
        )]));
        let r = register_patch(&ours, &node_object(&id(), None));
        assert!(r["spec"]["unschedulable"].is_null());
        assert!(r["spec"].as_object().unwrap().contains_key("unschedulable"));
        assert!(r["metadata"]["annotations"][CORDONED_ON_SHUTDOWN].is_null());
        assert_eq!(r["spec"]["taints"][0]["key"], "virtual-kubelet.io/provider");
        // An administrator's cordon: the shutdown adds no mark and the restart keeps it.
        let mut admin = n.clone();
        admin.spec.as_mut().unwrap().unschedulable = Some(true);
        assert_eq!(cordon_patch(&admin), None);
        let r = register_patch(&admin, &node_object(&id(), None));
        assert!(!r["spec"].as_object().unwrap().contains_key("unschedulable"));
        assert!(r["metadata"].get("annotations").is_none());
    }
}
