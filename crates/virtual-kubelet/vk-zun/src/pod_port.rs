//! The pod's own Neutron port: created before the pod's first Zun container so the pod IP is
//! known when the containers start (`status.podIP`, env `fieldRef: status.podIP`), given to
//! Zun for the first regular container, and deleted by the node with the pod.
//!
//! Ownership is in the name, `vk_<node>_<pod uid>` (Neutron 2026.1 drops `tags` sent in a port
//! POST, and a name needs no second call): node names and UIDs contain no `_`, so the name says
//! exactly which node and pod a port belongs to, and a node only ever touches ports named for
//! itself. Find-before-create by that name means a crash (or a lost answer) between the port's
//! create and the container's never makes a second port; the node's sweep deletes ports named
//! for it whose pod no longer exists.
//!
//! Zun keeps a port it was given (`preserve_on_delete`, zun 18 `common/utils.py`
//! `build_requested_networks`): on container delete it only unbinds it, so the port is the
//! node's to delete, once, after the containers are gone.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use openstack::Network;
use openstack::model::{SecurityGroupCreate, SecurityGroupFilter, SecurityGroupRuleCreate};
use openstack::port::{Port, PortCreate, PortFilter, Ports};
use tracing::{info, warn};

/// Neutron's limit on a port name.
const NAME_MAX: usize = 255;

/// The port name of pod `uid` on `node`.
pub fn name(node: &str, uid: &str) -> String {
    let mut n = format!("vk_{node}_{uid}");
    n.truncate(NAME_MAX);
    n
}

/// The pod UID a port name of `node` carries, or `None` when the port is not `node`'s.
pub fn pod_uid<'n>(node: &str, port_name: &'n str) -> Option<&'n str> {
    let rest = port_name.strip_prefix("vk_")?.strip_prefix(node)?;
    let uid = rest.strip_prefix('_')?;
    (!uid.is_empty() && !uid.contains('_')).then_some(uid)
}

/// The description of a pod's port (for people reading `openstack port show`).
pub fn description(node: &str, namespace: &str, pod: &str, uid: &str) -> String {
    format!(
        "virtual-kubelet.sunet.se: port of pod {namespace}/{pod} (uid {uid}) on node {node}, managed by openstack-operator; deleted with the pod"
    )
}

/// Of several ports with a pod's name (a create repeated after a lost answer), the one to
/// keep: one bound to a container if any, else the oldest; the others are returned to delete.
pub fn keep_one(mut found: Vec<Port>) -> Option<(Port, Vec<Port>)> {
    found.sort_by(|a, b| {
        (a.device_id.is_empty(), &a.created_at, &a.id).cmp(&(
            b.device_id.is_empty(),
            &b.created_at,
            &b.id,
        ))
    });
    let mut it = found.into_iter();
    let keep = it.next()?;
    Some((keep, it.collect()))
}

/// The `(port, protocol)` pairs the pod's first regular container declares: what its port's
/// security group lets in (as Zun's `exposed_ports` group would have: Zun applies that group
/// only to ports it creates itself, zun 18 `network/neutron.py` `create_or_update_port`).
pub fn exposed(pod: &Pod) -> Vec<(i32, String)> {
    let mut out: Vec<(i32, String)> = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.first())
        .flat_map(|c| c.ports.iter().flatten())
        .map(|p| {
            (
                p.container_port,
                p.protocol.as_deref().unwrap_or("TCP").to_ascii_lowercase(),
            )
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The ingress rules of the pod's security group for `exposed`, from anywhere, IPv4 and IPv6,
/// that `have` lacks (rules as `(ethertype, protocol, port)`).
pub fn missing_rules(
    group: &str,
    exposed: &[(i32, String)],
    have: &BTreeSet<(String, String, i32)>,
) -> Vec<SecurityGroupRuleCreate> {
    let mut out = Vec::new();
    for (port, proto) in exposed {
        for (ethertype, prefix) in [("IPv4", "0.0.0.0/0"), ("IPv6", "::/0")] {
            if have.contains(&(ethertype.to_string(), proto.clone(), *port)) {
                continue;
            }
            out.push(SecurityGroupRuleCreate {
                security_group_id: group.into(),
                direction: "ingress".into(),
                ethertype: ethertype.into(),
                protocol: Some(proto.clone()),
                port_range_min: Some(*port),
                port_range_max: Some(*port),
                remote_ip_prefix: Some(prefix.into()),
                ..Default::default()
            });
        }
    }
    out
}

/// The pod's security group (named like its port) letting in what its first container
/// exposes: found by name, else created; rules a crash left out are added.
pub async fn ensure_group(
    net: &dyn Network,
    project_id: Option<&str>,
    name: &str,
    description: &str,
    exposed: &[(i32, String)],
) -> Result<String, openstack::Error> {
    let found = net
        .list_security_groups(&SecurityGroupFilter {
            name: Some(name.into()),
            project_id: project_id.map(str::to_string),
            tags: Vec::new(),
        })
        .await?;
    let group = match found.into_iter().min_by(|a, b| a.id.cmp(&b.id)) {
        Some(g) => g,
        None => {
            let g = net
                .create_security_group(&SecurityGroupCreate {
                    name: name.into(),
                    description: Some(description.into()),
                    project_id: project_id.map(str::to_string),
                    tags: Vec::new(),
                })
                .await?;
            info!(group = %g.id, name, "created the pod's security group");
            g
        }
    };
    let have: BTreeSet<(String, String, i32)> = group
        .rules
        .iter()
        .filter(|r| r.direction == "ingress")
        .filter_map(|r| Some((r.ethertype.clone(), r.protocol.clone()?, r.port_range_min?)))
        .collect();
    let mut rules = missing_rules(&group.id, exposed, &have);
    for r in &mut rules {
        r.project_id = Some(group.project_id.clone()).filter(|p| !p.is_empty());
    }
    if !rules.is_empty() {
        net.create_security_group_rules(&rules).await?;
    }
    Ok(group.id)
}

/// Deletes the security groups named `name` (NotFound is fine).
pub async fn delete_groups(
    net: &dyn Network,
    project_id: Option<&str>,
    name: &str,
) -> Result<(), openstack::Error> {
    let found = net
        .list_security_groups(&SecurityGroupFilter {
            name: Some(name.into()),
            project_id: project_id.map(str::to_string),
            tags: Vec::new(),
        })
        .await?;
    for g in found {
        match net.delete_security_group(&g.id).await {
            Ok(()) => info!(group = %g.id, name, "deleted the pod's security group"),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The ports of `node` (by name) whose pod is not in `live` nor still has Zun containers
/// (`busy`): the node's sweep deletes them.
pub fn leaked<'p>(
    node: &str,
    ports: &'p [Port],
    live: &BTreeSet<String>,
    busy: &BTreeSet<String>,
) -> Vec<&'p Port> {
    ports
        .iter()
        .filter(|p| is_leaked(node, &p.name, live, busy))
        .collect()
}

/// Whether a port or security group name is `node`'s and its pod is gone (see [`leaked`]).
pub fn is_leaked(node: &str, name: &str, live: &BTreeSet<String>, busy: &BTreeSet<String>) -> bool {
    pod_uid(node, name).is_some_and(|uid| !live.contains(uid) && !busy.contains(uid))
}

/// The port of pod `uid`: found by name, else created on `network_id`. Duplicates (a create
/// repeated after a lost answer) are deleted, keeping one.
pub async fn ensure(
    ports: &dyn Ports,
    project_id: Option<&str>,
    req: PortCreate,
) -> Result<Port, openstack::Error> {
    let found = ports
        .list_ports(&PortFilter {
            name: Some(req.name.clone()),
            project_id: project_id.map(str::to_string),
            network_id: None,
        })
        .await?;
    if let Some((keep, extra)) = keep_one(found) {
        for p in extra {
            warn!(port = %p.id, name = %p.name, "deleting a duplicate port of the pod");
            if let Err(e) = ports.delete_port(&p.id).await
                && !e.is_not_found()
            {
                warn!(port = %p.id, error = %e, "could not delete a duplicate port; the sweep retries");
            }
        }
        if keep.network_id != req.network_id && keep.device_id.is_empty() {
            // The pod's network changed (its annotation) before its container existed:
            // the old port is of no use. A bound one stays: its container runs on it.
            info!(port = %keep.id, "the pod's port is on another network; replacing it");
            ports
                .delete_port(&keep.id)
                .await
                .or_else(|e| if e.is_not_found() { Ok(()) } else { Err(e) })?;
        } else {
            return Ok(keep);
        }
    }
    let p = ports.create_port(&req).await?;
    info!(port = %p.id, name = %p.name, ips = ?p.fixed_ips, "created the pod's Neutron port");
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use openstack::port::FakePorts;

    #[test]
    fn names_carry_node_and_uid_and_nothing_else_matches() {
        let n = name("vk-a.example", "0a1b-2c");
        assert_eq!(n, "vk_vk-a.example_0a1b-2c");
        assert_eq!(pod_uid("vk-a.example", &n), Some("0a1b-2c"));
        assert_eq!(pod_uid("vk-a", &n), None, "another node's prefix");
        assert_eq!(pod_uid("vk-a.example", "vk_vk-a.example_"), None);
        assert_eq!(pod_uid("vk-a.example", "vk_vk-a.example_x_y"), None);
        assert_eq!(pod_uid("n", "my-port"), None);
        assert!(name(&"n".repeat(300), "u").len() <= 255);
    }

    fn port(id: &str, name: &str, device: &str, created: &str) -> Port {
        Port {
            id: id.into(),
            name: name.into(),
            network_id: "net".into(),
            device_id: device.into(),
            created_at: Some(created.into()),
            ..Default::default()
        }
    }

    #[test]
    fn keeps_the_bound_then_the_oldest() {
        let (k, extra) = keep_one(vec![
            port("b", "x", "", "2026-01-01T00:00:01Z"),
            port("a", "x", "", "2026-01-01T00:00:02Z"),
        ])
        .unwrap();
        assert_eq!((k.id.as_str(), extra.len()), ("b", 1));
        let (k, _) = keep_one(vec![
            port("b", "x", "", "2026-01-01T00:00:01Z"),
            port("a", "x", "zun-1", "2026-01-01T00:00:02Z"),
        ])
        .unwrap();
        assert_eq!(k.id, "a");
        assert!(keep_one(vec![]).is_none());
    }

    #[test]
    fn leaked_are_ours_without_pod_or_container() {
        let ports = vec![
            port("1", &name("n", "live"), "", "t"),
            port("2", &name("n", "gone"), "", "t"),
            port("3", &name("n", "deleting"), "", "t"),
            port("4", &name("other", "gone"), "", "t"),
            port("5", "somebody-elses", "", "t"),
        ];
        let live = BTreeSet::from(["live".to_string()]);
        let busy = BTreeSet::from(["deleting".to_string()]);
        let l: Vec<&str> = leaked("n", &ports, &live, &busy)
            .iter()
            .map(|p| p.id.as_str())
            .collect();
        assert_eq!(l, vec!["2"]);
    }

    fn req(net: &str) -> PortCreate {
        PortCreate {
            network_id: net.into(),
            name: name("n", "u1"),
            description: "d".into(),
            security_groups: None,
        }
    }

    #[test]
    fn exposed_ports_become_ingress_rules_for_both_families() {
        let pod: Pod = serde_json::from_value(serde_json::json!({"spec": {"containers": [
            {"name": "a", "image": "i", "ports": [{"containerPort": 80}, {"containerPort": 53, "protocol": "UDP"}]},
            {"name": "b", "image": "i", "ports": [{"containerPort": 9000}]}]}}))
        .unwrap();
        let e = exposed(&pod);
        assert_eq!(e, vec![(53, "udp".to_string()), (80, "tcp".to_string())]);
        let have = BTreeSet::from([("IPv4".to_string(), "tcp".to_string(), 80)]);
        let r = missing_rules("g", &e, &have);
        let got: Vec<(String, String, i32, String)> = r
            .iter()
            .map(|r| {
                (
                    r.ethertype.clone(),
                    r.protocol.clone().unwrap(),
                    r.port_range_min.unwrap(),
                    r.remote_ip_prefix.clone().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("IPv4".into(), "udp".into(), 53, "0.0.0.0/0".into()),
                ("IPv6".into(), "udp".into(), 53, "::/0".into()),
                ("IPv6".into(), "tcp".into(), 80, "::/0".into()),
            ]
        );
        assert!(
            r.iter()
                .all(|r| r.direction == "ingress" && r.port_range_max == r.port_range_min)
        );
    }

    #[tokio::test]
    async fn find_before_create_never_makes_a_second_port() {
        let f = FakePorts::new();
        let a = ensure(&f, None, req("net")).await.unwrap();
        let b = ensure(&f, None, req("net")).await.unwrap();
        assert_eq!(a.id, b.id);
        assert_eq!(f.ports().len(), 1);
        let creates = f
            .calls()
            .iter()
            .filter(|c| c.starts_with("create_port"))
            .count();
        assert_eq!(creates, 1);
    }

    #[tokio::test]
    async fn duplicates_are_deleted_and_a_port_on_another_network_replaced() {
        let f = FakePorts::new();
        f.insert(port("old", &name("n", "u1"), "", "2026-01-01T00:00:01Z"));
        f.insert(port("dup", &name("n", "u1"), "", "2026-01-01T00:00:02Z"));
        let p = ensure(&f, None, req("net")).await.unwrap();
        assert_eq!(p.id, "old");
        assert_eq!(f.ports().len(), 1);
        let p = ensure(&f, None, req("net-2")).await.unwrap();
        assert_ne!(p.id, "old");
        assert_eq!(f.ports().len(), 1);
        assert_eq!(f.ports()[0].network_id, "net-2");
    }
}
