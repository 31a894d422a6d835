//! The NetworkPolicy controller: [`crate::netpol`]'s rules made real in Neutron.
//!
//! For every NetworkPolicy that selects a pod of this node: one security group named
//! [`group_name`] (`k8s-netpol-<policy uid>`, found by that name first, so a crash never makes
//! a second one; its description says it is the operator's) whose ingress rules are
//! [`crate::netpol::ingress_rules`] of the policy with peers resolved to the current pod IPs,
//! reconciled each pass (missing rules added, extra ones deleted; the group's egress rules are
//! left alone). A selected pod's port then carries the groups of all policies selecting it and
//! nothing else: its own exposed-ports group and the project's `default` group would let in
//! what the policies do not (Kubernetes: a selected pod only admits what some policy allows).
//! A pod no policy selects any more gets its [`baseline`] back: its own group (named like its
//! port, see [`crate::pod_port`]) when it has one, else the project's `default` group, which
//! is what the provider gave it. A group whose policy is gone is taken off the node's ports
//! and deleted. Refused policies ([`crate::services::Refusal`]) get a Warning Event naming
//! the field and are not applied.
//!
//! [`desired_groups`], [`port_plan`] and [`rule_plan`] are pure; [`run`] polls and does the I/O.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use openstack::Network;
use openstack::model::{
    SecurityGroup, SecurityGroupCreate, SecurityGroupFilter, SecurityGroupRule,
    SecurityGroupRuleCreate,
};
use openstack::port::{PortFilter, Ports};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::netpol::{IngressRule, ingress_rules, selects};
use crate::pod_port;

/// The prefix of a policy group's name.
pub const GROUP_PREFIX: &str = "k8s-netpol-";

/// The security group name of the policy with `uid`.
pub fn group_name(uid: &str) -> String {
    format!("{GROUP_PREFIX}{uid}")
}

/// The policy UID a group name carries, or `None` when the group is not a policy group.
pub fn policy_uid(group: &str) -> Option<&str> {
    group.strip_prefix(GROUP_PREFIX).filter(|u| !u.is_empty())
}

/// For each pod of `node` (by uid) that some policy selects: the UIDs of those policies.
/// Refused policies (`refused` uids) count as selecting nothing.
pub fn desired_groups(
    policies: &[NetworkPolicy],
    refused: &BTreeSet<String>,
    pods: &[Pod],
) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for pod in pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        for pol in policies {
            let uid = pol.uid().unwrap_or_default();
            if uid.is_empty() || refused.contains(&uid) || !selects(pol, pod) {
                continue;
            }
            out.entry(pod.uid().unwrap_or_default())
                .or_default()
                .insert(uid);
        }
    }
    out
}

/// The groups a port should carry, or `None` to leave it as it is. `have`: its groups now;
/// `want`: the group IDs of the policies selecting its pod (empty: none does); `baseline`:
/// what it had before any policy; `is_policy`: whether a group ID is a policy group.
pub fn port_plan(
    have: &[String],
    want: &[String],
    baseline: &[String],
    is_policy: impl Fn(&str) -> bool,
) -> Option<Vec<String>> {
    let sorted = |v: &[String]| v.iter().cloned().collect::<BTreeSet<_>>();
    let target = if !want.is_empty() {
        sorted(want)
    } else if have.iter().any(|g| is_policy(g)) {
        sorted(baseline)
    } else {
        return None;
    };
    (sorted(have) != target).then(|| target.into_iter().collect())
}

/// What to do to a group's rules: the ingress rules to create and the IDs of the ingress rules
/// to delete (egress rules are not the policy's and stay).
pub fn rule_plan(
    group_id: &str,
    want: &[IngressRule],
    have: &[SecurityGroupRule],
) -> (Vec<SecurityGroupRuleCreate>, Vec<String>) {
    let key = |r: &SecurityGroupRule| IngressRule {
        ethertype: r.ethertype.clone(),
        protocol: r.protocol.clone().map(|p| p.to_lowercase()),
        port_min: r.port_range_min,
        port_max: r.port_range_max,
        remote_ip_prefix: r.remote_ip_prefix.clone().unwrap_or_else(|| {
            if r.ethertype == "IPv6" {
                "::/0".into()
            } else {
                "0.0.0.0/0".into()
            }
        }),
    };
    let ingress: Vec<&SecurityGroupRule> =
        have.iter().filter(|r| r.direction == "ingress").collect();
    let present: BTreeSet<IngressRule> = ingress
        .iter()
        .filter(|r| r.remote_group_id.is_none())
        .map(|r| key(r))
        .collect();
    let wanted: BTreeSet<&IngressRule> = want.iter().collect();
    let create = want
        .iter()
        .filter(|w| !present.contains(*w))
        .map(|w| SecurityGroupRuleCreate {
            security_group_id: group_id.into(),
            direction: "ingress".into(),
            ethertype: w.ethertype.clone(),
            protocol: w.protocol.clone(),
            port_range_min: w.port_min,
            port_range_max: w.port_max,
            remote_ip_prefix: Some(w.remote_ip_prefix.clone()),
            ..Default::default()
        })
        .collect();
    let mut seen = BTreeSet::new();
    let delete = ingress
        .iter()
        .filter(|r| {
            let k = key(r);
            // Rules by remote group, rules nobody wants, and duplicates go.
            r.remote_group_id.is_some() || !wanted.contains(&k) || !seen.insert(k)
        })
        .map(|r| r.id.clone())
        .collect();
    (create, delete)
}

/// The groups a pod's port had before any policy: its own group (named like its port) when it
/// has one, else the project's `default` group.
pub fn baseline(port_name: &str, groups: &[SecurityGroup]) -> Vec<String> {
    let pick = |n: &str| {
        groups
            .iter()
            .filter(|g| g.name == n)
            .map(|g| g.id.clone())
            .min()
    };
    pick(port_name)
        .or_else(|| pick("default"))
        .into_iter()
        .collect()
}

/// Where and how [`run`] works.
#[derive(Clone, Debug)]
pub struct NetpolConfig {
    /// This node's name: only its pods' ports are touched.
    pub node: String,
    /// The project of the ports and groups (`None`: the credentials' own).
    pub project_id: Option<String>,
    /// Time between two passes.
    pub interval: Duration,
}

/// Errors of one pass, said in the log.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    /// The Kubernetes API.
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    /// Neutron.
    #[error("neutron: {0}")]
    OpenStack(#[from] openstack::Error),
}

/// Keep the node's pods' ports in line with the NetworkPolicies until `stop`.
pub async fn run(
    client: Client,
    ports: Arc<dyn Ports>,
    neutron: Arc<dyn Network>,
    cfg: NetpolConfig,
    stop: CancellationToken,
) {
    info!(node = %cfg.node, "enforcing NetworkPolicies with Neutron security groups");
    let mut refused: BTreeMap<String, String> = BTreeMap::new();
    loop {
        if let Err(e) = pass(
            &client,
            ports.as_ref(),
            neutron.as_ref(),
            &cfg,
            &mut refused,
        )
        .await
        {
            warn!(error = %e, "NetworkPolicy pass failed; retrying");
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(cfg.interval) => {}
        }
    }
}

async fn pass(
    client: &Client,
    ports: &dyn Ports,
    net: &dyn Network,
    cfg: &NetpolConfig,
    refused: &mut BTreeMap<String, String>,
) -> Result<(), PassError> {
    let policies = Api::<NetworkPolicy>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let all_pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let namespaces: BTreeMap<String, BTreeMap<String, String>> =
        Api::<Namespace>::all(client.clone())
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .map(|n| (n.name_any(), n.labels().clone()))
            .collect();
    let ours: Vec<Pod> = all_pods
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&cfg.node))
        .cloned()
        .collect();

    // The rules of each policy, refusals told once per policy and reason.
    let mut rules: BTreeMap<String, Vec<IngressRule>> = BTreeMap::new();
    let mut refused_now = BTreeSet::new();
    for pol in &policies {
        let uid = pol.uid().unwrap_or_default();
        match ingress_rules(pol, &namespaces, &all_pods) {
            Ok(r) => {
                refused.remove(&uid);
                rules.insert(uid, r);
            }
            Err(r) => {
                if ours.iter().any(|p| selects(pol, p)) && refused.get(&uid) != Some(&r.to_string())
                {
                    warn!(policy = %format!("{}/{}", pol.namespace().unwrap_or_default(), pol.name_any()), refusal = %r, "NetworkPolicy not mapped to Neutron");
                    event(client, pol, "NetworkPolicyRefused", &r.to_string()).await;
                    refused.insert(uid.clone(), r.to_string());
                }
                refused_now.insert(uid);
            }
        }
    }
    let want = desired_groups(&policies, &refused_now, &ours);

    let mut groups = net
        .list_security_groups(&SecurityGroupFilter {
            project_id: cfg.project_id.clone(),
            ..Default::default()
        })
        .await?;
    // Groups of the policies selecting our pods: found by name, else created; rules in line.
    let needed: BTreeSet<&String> = want.values().flatten().collect();
    let mut ids: BTreeMap<String, String> = BTreeMap::new();
    for uid in needed {
        let name = group_name(uid);
        let group = match groups
            .iter()
            .filter(|g| g.name == name)
            .min_by(|a, b| a.id.cmp(&b.id))
        {
            Some(g) => g.clone(),
            None => {
                let pol = policies
                    .iter()
                    .find(|p| p.uid().as_deref() == Some(uid.as_str()));
                let what = pol.map_or_else(String::new, |p| {
                    format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any())
                });
                let g = net
                    .create_security_group(&SecurityGroupCreate {
                        name: name.clone(),
                        description: Some(format!(
                            "virtual-kubelet.sunet.se: NetworkPolicy {what} (uid {uid}), managed by openstack-operator; deleted with the policy"
                        )),
                        project_id: cfg.project_id.clone(),
                        tags: Vec::new(),
                    })
                    .await?;
                info!(group = %g.id, policy = %what, "created the NetworkPolicy's security group");
                groups.push(g.clone());
                g
            }
        };
        let (mut create, delete) = rule_plan(
            &group.id,
            rules.get(uid).map(Vec::as_slice).unwrap_or_default(),
            &net.list_security_group_rules(&group.id).await?,
        );
        for id in &delete {
            match net.delete_security_group_rule(id).await {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
        if !create.is_empty() {
            for r in &mut create {
                r.project_id = Some(group.project_id.clone()).filter(|p| !p.is_empty());
            }
            net.create_security_group_rules(&create).await?;
        }
        if !create.is_empty() || !delete.is_empty() {
            debug!(group = %group.id, added = create.len(), deleted = delete.len(), "policy rules in line");
        }
        ids.insert(uid.clone(), group.id);
    }

    // Ports of our pods.
    let policy_ids: BTreeSet<String> = groups
        .iter()
        .filter(|g| policy_uid(&g.name).is_some())
        .map(|g| g.id.clone())
        .collect();
    let node_ports = ports
        .list_ports(&PortFilter {
            project_id: cfg.project_id.clone(),
            ..Default::default()
        })
        .await?;
    for port in &node_ports {
        let Some(pod_uid) = pod_port::pod_uid(&cfg.node, &port.name) else {
            continue;
        };
        let want_ids: Vec<String> = want
            .get(pod_uid)
            .into_iter()
            .flatten()
            .filter_map(|u| ids.get(u).cloned())
            .collect();
        let base = baseline(&port.name, &groups);
        if let Some(set) = port_plan(&port.security_groups, &want_ids, &base, |g| {
            policy_ids.contains(g)
        }) {
            match ports.set_port_security_groups(&port.id, &set).await {
                Ok(_) => {
                    info!(port = %port.id, pod = %pod_uid, groups = ?set, "port security groups follow the NetworkPolicies")
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    // Groups whose policy is gone: deleted (the ports were restored above; a group another
    // node's port still carries is refused by Neutron and retried).
    let live_policies: BTreeSet<String> = policies.iter().filter_map(|p| p.uid()).collect();
    for g in &groups {
        let Some(uid) = policy_uid(&g.name) else {
            continue;
        };
        if live_policies.contains(uid) {
            continue;
        }
        match net.delete_security_group(&g.id).await {
            Ok(()) => {
                info!(group = %g.id, policy = uid, "the NetworkPolicy is gone: deleted its security group")
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => debug!(group = %g.id, error = %e, "policy group not deleted yet"),
        }
    }
    Ok(())
}

/// A Warning Event on the policy (failures to post it are only logged).
async fn event(client: &Client, pol: &NetworkPolicy, reason: &str, message: &str) {
    crate::events::warning(
        client,
        pol,
        "virtual-kubelet-network-policies",
        reason,
        message,
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(uid: &str, sel: serde_json::Value) -> NetworkPolicy {
        serde_json::from_value(
            json!({"metadata": {"name": uid, "namespace": "ns", "uid": uid},
            "spec": {"podSelector": sel}}),
        )
        .unwrap()
    }

    fn pod(uid: &str, app: &str) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": uid, "namespace": "ns", "uid": uid,
            "labels": {"app": app}}}),
        )
        .unwrap()
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn pods_get_the_groups_of_every_policy_selecting_them_except_refused_ones() {
        let pols = vec![
            policy("p1", json!({"matchLabels": {"app": "web"}})),
            policy("p2", json!({})),
            policy("p3", json!({})),
        ];
        let pods = vec![pod("a", "web"), pod("b", "db")];
        let want = desired_groups(&pols, &BTreeSet::from(["p3".to_string()]), &pods);
        assert_eq!(
            want["a"],
            BTreeSet::from(["p1".to_string(), "p2".to_string()])
        );
        assert_eq!(want["b"], BTreeSet::from(["p2".to_string()]));
        assert_eq!(group_name("p1"), "k8s-netpol-p1");
        assert_eq!(policy_uid("k8s-netpol-p1"), Some("p1"));
        assert_eq!(policy_uid("vk_n_u"), None);
    }

    #[test]
    fn selected_ports_carry_only_policy_groups_and_are_restored_after() {
        let is_pol = |g: &str| g.starts_with("pol");
        // Selected: own and default groups are replaced.
        assert_eq!(
            port_plan(&s(&["own"]), &s(&["pol1"]), &s(&["own"]), is_pol),
            Some(s(&["pol1"]))
        );
        // Already so: nothing to do.
        assert_eq!(
            port_plan(&s(&["pol1"]), &s(&["pol1"]), &s(&["own"]), is_pol),
            None
        );
        // No policy any more: the baseline comes back.
        assert_eq!(
            port_plan(&s(&["pol1"]), &[], &s(&["own"]), is_pol),
            Some(s(&["own"]))
        );
        // Never selected: left as it is, whatever it has.
        assert_eq!(port_plan(&s(&["custom"]), &[], &s(&["own"]), is_pol), None);
    }

    #[test]
    fn the_baseline_is_the_pods_own_group_else_default() {
        let g = |id: &str, name: &str| SecurityGroup {
            id: id.into(),
            name: name.into(),
            ..Default::default()
        };
        let groups = vec![g("d", "default"), g("o", "vk_n_u")];
        assert_eq!(baseline("vk_n_u", &groups), s(&["o"]));
        assert_eq!(baseline("vk_n_x", &groups), s(&["d"]));
    }

    fn have(
        id: &str,
        dir: &str,
        proto: Option<&str>,
        port: Option<i32>,
        prefix: Option<&str>,
    ) -> SecurityGroupRule {
        SecurityGroupRule {
            id: id.into(),
            direction: dir.into(),
            ethertype: "IPv4".into(),
            protocol: proto.map(str::to_string),
            port_range_min: port,
            port_range_max: port,
            remote_ip_prefix: prefix.map(str::to_string),
            ..Default::default()
        }
    }

    fn want(port: i32, prefix: &str) -> IngressRule {
        IngressRule {
            ethertype: "IPv4".into(),
            protocol: Some("tcp".into()),
            port_min: Some(port),
            port_max: Some(port),
            remote_ip_prefix: prefix.into(),
        }
    }

    #[test]
    fn rules_are_reconciled_and_egress_is_left_alone() {
        let current = vec![
            have("e", "egress", None, None, None),
            have(
                "keep",
                "ingress",
                Some("tcp"),
                Some(8080),
                Some("10.0.0.0/8"),
            ),
            have(
                "dup",
                "ingress",
                Some("tcp"),
                Some(8080),
                Some("10.0.0.0/8"),
            ),
            have(
                "old",
                "ingress",
                Some("tcp"),
                Some(8080),
                Some("10.1.2.3/32"),
            ),
        ];
        let (create, delete) = rule_plan(
            "g",
            &[want(8080, "10.0.0.0/8"), want(8080, "10.9.9.9/32")],
            &current,
        );
        assert_eq!(create.len(), 1);
        assert_eq!(create[0].remote_ip_prefix.as_deref(), Some("10.9.9.9/32"));
        assert_eq!(create[0].direction, "ingress");
        assert_eq!(create[0].security_group_id, "g");
        assert_eq!(delete, s(&["dup", "old"]));
        // A rule without a prefix is "anywhere" of its family.
        let any = vec![have("a", "ingress", None, None, None)];
        let all = IngressRule {
            ethertype: "IPv4".into(),
            protocol: None,
            port_min: None,
            port_max: None,
            remote_ip_prefix: "0.0.0.0/0".into(),
        };
        assert_eq!(rule_plan("g", &[all], &any), (vec![], vec![]));
    }
}
