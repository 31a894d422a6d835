//! The labels that mark a Zun container as ours and name its pod.
//!
//! Ownership is `managed-by` plus the node's name: a node only ever adopts
//! or deletes containers carrying both, so several nodes (tenants) may share
//! a project and nothing made by hand is touched.

use std::collections::BTreeMap;

use crate::translate::Role;

/// `managed-by` key.
pub const MANAGED_BY: &str = "virtual-kubelet.sunet.se/managed-by";
/// Its value.
pub const MANAGER: &str = "openstack-operator";
/// The node's name.
pub const NODE: &str = "virtual-kubelet.sunet.se/node";
/// The pod's namespace.
pub const NAMESPACE: &str = "virtual-kubelet.sunet.se/pod-namespace";
/// The pod's name.
pub const POD: &str = "virtual-kubelet.sunet.se/pod-name";
/// The pod's uid (what identifies the pod across re-creations).
pub const POD_UID: &str = "virtual-kubelet.sunet.se/pod-uid";
/// The pod container's name.
pub const CONTAINER: &str = "virtual-kubelet.sunet.se/container";
/// `init` or `main`.
pub const ROLE: &str = "virtual-kubelet.sunet.se/role";

/// The labels every container of this node carries (the list filter).
pub fn ours(node: &str) -> BTreeMap<String, String> {
    [
        (MANAGED_BY.to_string(), MANAGER.to_string()),
        (NODE.to_string(), node.to_string()),
    ]
    .into_iter()
    .collect()
}

/// All labels of one container.
pub fn for_container(
    node: &str,
    ns: &str,
    pod: &str,
    uid: &str,
    container: &str,
    role: Role,
) -> BTreeMap<String, String> {
    let mut l = ours(node);
    l.insert(NAMESPACE.into(), ns.into());
    l.insert(POD.into(), pod.into());
    l.insert(POD_UID.into(), uid.into());
    l.insert(CONTAINER.into(), container.into());
    l.insert(
        ROLE.into(),
        match role {
            Role::Init => "init",
            Role::Main => "main",
        }
        .into(),
    );
    l
}

/// Zun's name for a pod container: `<ns>-<pod>-<container>-<uid[..8]>`,
/// within Zun's 255 characters and `^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`.
pub fn zun_name(ns: &str, pod: &str, container: &str, uid: &str) -> String {
    let short: String = uid
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(8)
        .collect();
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "_.-".contains(c) {
                    c
                } else {
                    '-'
                }
            })
            .collect()
    };
    let mut base = format!("{}-{}-{}", clean(ns), clean(pod), clean(container));
    base.truncate(240);
    let name = format!("{base}-{short}");
    let name = name
        .trim_start_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string();
    if name.len() < 2 {
        format!("k8s-{name}")
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_zun() {
        let n = zun_name("default", "myapp-pod", "myapp-container", "0a1b2c3d-4e5f");
        assert_eq!(n, "default-myapp-pod-myapp-container-0a1b2c3d");
        let long = "x".repeat(300);
        assert!(zun_name(&long, "p", "c", "u").len() <= 255);
    }

    #[test]
    fn container_labels_include_ownership() {
        let l = for_container("vk", "ns", "p", "u", "c", Role::Init);
        assert_eq!(l[MANAGED_BY], MANAGER);
        assert_eq!(l[NODE], "vk");
        assert_eq!(l[ROLE], "init");
        assert!(openstack::container::labels_match(&l, &ours("vk")));
        assert!(!openstack::container::labels_match(&l, &ours("other")));
    }
}
