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
        .filter(|p| {
            pod_uid(node, &p.name).is_some_and(|uid| !live.contains(uid) && !busy.contains(uid))
        })
        .collect()
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
        if keep.network_id != req.network_id {
            // The pod's network changed (its annotation) before its container existed:
            // the old port is of no use.
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
