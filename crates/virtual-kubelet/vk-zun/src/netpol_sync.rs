//! The NetworkPolicy controller: [`crate::netpol`]'s rules made real in Neutron.
//!
//! For every NetworkPolicy that selects a pod of this node: one security group named
//! [`group_name`] (`k8s-netpol-<policy uid>`, found by that name first, so a crash never makes
//! a second one; its description says it is the operator's) holding exactly
//! [`crate::netpol::rules`] of the policy with peers resolved to the current pod IPs,
//! reconciled each pass (missing rules added, others deleted, Neutron's default egress rules
//! included). A selected pod's port then carries the groups of all policies selecting it and
//! nothing else: its own exposed-ports group, its tenant network's groups and the project's
//! `default` group would let in what the policies do not (Kubernetes: a selected pod only
//! admits what some policy allows). A direction that no policy selecting the pod isolates
//! (an `Ingress`-only policy says nothing of egress) is opened by one of two shared groups of
//! the project, [`OPEN_INGRESS`] and [`OPEN_EGRESS`], which allow everything in that one
//! direction. A pod no policy selects any more gets its [`baseline`] back: what the provider
//! gave it (its tenant network's groups and its own group, named like its port, see
//! [`crate::pod_port`]; the project's `default` group when that is none). A group whose policy
//! is gone is taken off the node's ports and deleted. Refused policies
//! ([`crate::services::Refusal`]) get a Warning Event naming the field and are not applied.
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

use crate::netpol::{EGRESS, INGRESS, PolicyRules, Rule, rules, selects};
use crate::pod_port;
use crate::tenant::Tenant;

/// The prefix of a policy group's name.
pub const GROUP_PREFIX: &str = "k8s-netpol-";
/// The project's group that lets in everything (for pods no selecting policy isolates for
/// ingress); it has no egress rule.
pub const OPEN_INGRESS: &str = "k8s-netpol-open-ingress";
/// The project's group that lets out everything (for pods no selecting policy isolates for
/// egress); it has no ingress rule.
pub const OPEN_EGRESS: &str = "k8s-netpol-open-egress";

/// The security group name of the policy with `uid`.
pub fn group_name(uid: &str) -> String {
    format!("{GROUP_PREFIX}{uid}")
}

/// The policy UID a group name carries, or `None` when the group is not a policy group.
pub fn policy_uid(group: &str) -> Option<&str> {
    if group == OPEN_INGRESS || group == OPEN_EGRESS {
        return None;
    }
    group.strip_prefix(GROUP_PREFIX).filter(|u| !u.is_empty())
}

/// Whether a group (by name) is one this controller puts on ports.
pub fn is_managed(group: &str) -> bool {
    group == OPEN_INGRESS || group == OPEN_EGRESS || policy_uid(group).is_some()
}

/// The rules of a group this controller manages: the policy's, or everything in one
/// direction for the open groups (`None`: not a managed group, or a policy without rules).
pub fn group_rules<'a>(
    name: &str,
    policies: &'a BTreeMap<String, PolicyRules>,
) -> Option<std::borrow::Cow<'a, [Rule]>> {
    let open = |direction: &str| {
        [("IPv4", "0.0.0.0/0"), ("IPv6", "::/0")]
            .into_iter()
            .map(|(eth, prefix)| Rule {
                direction: direction.into(),
                ethertype: eth.into(),
                protocol: None,
                port_min: None,
                port_max: None,
                remote_ip_prefix: prefix.into(),
            })
            .collect::<Vec<_>>()
    };
    match name {
        OPEN_INGRESS => Some(open(INGRESS).into()),
        OPEN_EGRESS => Some(open(EGRESS).into()),
        _ => policies
            .get(policy_uid(name)?)
            .map(|p| p.rules.as_slice().into()),
    }
}

/// For each pod of `node` (by uid) that some policy selects: the names of the groups its port
/// carries (the selecting policies' groups, and [`OPEN_INGRESS`] / [`OPEN_EGRESS`] for a
/// direction none of them isolates). `policies`: the rules of every policy that is applied
/// (refused ones are absent and select nothing), by uid.
pub fn desired_groups(
    policies: &[NetworkPolicy],
    applied: &BTreeMap<String, PolicyRules>,
    pods: &[Pod],
) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for pod in pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let (mut ingress, mut egress) = (false, false);
        let mut groups = BTreeSet::new();
        for pol in policies {
            let uid = pol.uid().unwrap_or_default();
            let Some(r) = applied.get(&uid) else {
                continue;
            };
            if uid.is_empty() || !selects(pol, pod) {
                continue;
            }
            ingress |= r.ingress;
            egress |= r.egress;
            groups.insert(group_name(&uid));
        }
        if groups.is_empty() {
            continue;
        }
        if !ingress {
            groups.insert(OPEN_INGRESS.into());
        }
        if !egress {
            groups.insert(OPEN_EGRESS.into());
        }
        out.insert(pod.uid().unwrap_or_default(), groups);
    }
    out
}

/// The groups a port should carry, or `None` to leave it as it is. `have`: its groups now;
/// `want`: the group IDs [`desired_groups`] gives its pod (empty: no policy selects it);
/// `baseline`: what it had before any policy; `is_managed`: whether a group ID is one of ours.
pub fn port_plan(
    have: &[String],
    want: &[String],
    baseline: &[String],
    is_managed: impl Fn(&str) -> bool,
) -> Option<Vec<String>> {
    let sorted = |v: &[String]| v.iter().cloned().collect::<BTreeSet<_>>();
    let target = if !want.is_empty() {
        sorted(want)
    } else if have.iter().any(|g| is_managed(g)) {
        sorted(baseline)
    } else {
        return None;
    };
    (sorted(have) != target).then(|| target.into_iter().collect())
}

/// What to do to a managed group's rules: the rules to create and the IDs of the rules to
/// delete (any direction: the group holds exactly `want`).
pub fn rule_plan(
    group_id: &str,
    want: &[Rule],
    have: &[SecurityGroupRule],
) -> (Vec<SecurityGroupRuleCreate>, Vec<String>) {
    let key = |r: &SecurityGroupRule| Rule {
        direction: r.direction.clone(),
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
    let present: BTreeSet<Rule> = have
        .iter()
        .filter(|r| r.remote_group_id.is_none())
        .map(key)
        .collect();
    let wanted: BTreeSet<&Rule> = want.iter().collect();
    let create = want
        .iter()
        .filter(|w| !present.contains(*w))
        .map(|w| SecurityGroupRuleCreate {
            security_group_id: group_id.into(),
            direction: w.direction.clone(),
            ethertype: w.ethertype.clone(),
            protocol: w.protocol.clone(),
            port_range_min: w.port_min,
            port_range_max: w.port_max,
            remote_ip_prefix: Some(w.remote_ip_prefix.clone()),
            ..Default::default()
        })
        .collect();
    let mut seen = BTreeSet::new();
    let delete = have
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

/// The groups a pod's port had before any policy, as the provider gives them: its tenant
/// network's groups (`network_groups`, IDs or names) and its own group (named like its port)
/// when it has one; the project's `default` group when that is none.
pub fn baseline(
    port_name: &str,
    network_groups: &[String],
    groups: &[SecurityGroup],
) -> Vec<String> {
    let pick = |n: &str| {
        groups
            .iter()
            .filter(|g| g.id == n || g.name == n)
            .map(|g| g.id.clone())
            .min()
    };
    let mut out: Vec<String> = network_groups
        .iter()
        .filter_map(|g| pick(g))
        .chain(pick(port_name))
        .collect();
    if out.is_empty() {
        out.extend(pick("default"));
    }
    out
}

/// Where and how [`run`] works.
#[derive(Clone, Debug)]
pub struct NetpolConfig {
    /// This node's name: only its pods' ports are touched.
    pub node: String,
    /// The project of the ports and groups (`None`: the credentials' own).
    pub project_id: Option<String>,
    /// The tenant the node serves (`--tenants`): its networks' security groups are part of a
    /// pod's [`baseline`]. `None`: a single node.
    pub tenant: Option<Tenant>,
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
    info!(node = %cfg.node, project = cfg.project_id.as_deref().unwrap_or("?"), "enforcing NetworkPolicies with Neutron security groups");
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
            warn!(node = %cfg.node, error = %e, "NetworkPolicy pass failed; retrying");
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
    let mut applied: BTreeMap<String, PolicyRules> = BTreeMap::new();
    for pol in &policies {
        let uid = pol.uid().unwrap_or_default();
        match rules(pol, &namespaces, &all_pods) {
            Ok(r) => {
                refused.remove(&uid);
                applied.insert(uid, r);
            }
            Err(r) => {
                if ours.iter().any(|p| selects(pol, p)) && refused.get(&uid) != Some(&r.to_string())
                {
                    warn!(policy = %format!("{}/{}", pol.namespace().unwrap_or_default(), pol.name_any()), refusal = %r, "NetworkPolicy not mapped to Neutron");
                    event(client, pol, "NetworkPolicyRefused", &r.to_string()).await;
                    refused.insert(uid.clone(), r.to_string());
                }
            }
        }
    }
    let want = desired_groups(&policies, &applied, &ours);

    let mut groups = net
        .list_security_groups(&SecurityGroupFilter {
            project_id: cfg.project_id.clone(),
            ..Default::default()
        })
        .await?;
    // Groups our pods need: found by name, else created; rules in line.
    let needed: BTreeSet<&String> = want.values().flatten().collect();
    let mut ids: BTreeMap<String, String> = BTreeMap::new();
    for name in needed {
        let group = match groups
            .iter()
            .filter(|g| &g.name == name)
            .min_by(|a, b| a.id.cmp(&b.id))
        {
            Some(g) => g.clone(),
            None => {
                let what = match policy_uid(name) {
                    Some(uid) => {
                        let pol = policies
                            .iter()
                            .find(|p| p.uid().as_deref() == Some(uid));
                        let what = pol.map_or_else(String::new, |p| {
                            format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any())
                        });
                        format!("NetworkPolicy {what} (uid {uid}), managed by openstack-operator; deleted with the policy")
                    }
                    None => "lets everything through in one direction for pods no NetworkPolicy isolates in it, managed by openstack-operator".to_string(),
                };
                let g = net
                    .create_security_group(&SecurityGroupCreate {
                        name: name.clone(),
                        description: Some(format!("virtual-kubelet.sunet.se: {what}")),
                        project_id: cfg.project_id.clone(),
                        tags: Vec::new(),
                    })
                    .await?;
                info!(group = %g.id, name = %name, "created a NetworkPolicy security group");
                groups.push(g.clone());
                g
            }
        };
        let want_rules = group_rules(name, &applied).unwrap_or_default();
        let (mut create, delete) = rule_plan(
            &group.id,
            &want_rules,
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
            debug!(group = %group.id, added = create.len(), deleted = delete.len(), "group rules in line");
        }
        ids.insert(name.clone(), group.id);
    }

    // Ports of our pods.
    let managed_ids: BTreeSet<String> = groups
        .iter()
        .filter(|g| is_managed(&g.name))
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
            .filter_map(|n| ids.get(n).cloned())
            .collect();
        // A tenant pod's network groups (a pod gone, or its network no longer the tenant's:
        // none; the pod's own group or `default` then).
        let network_groups = cfg
            .tenant
            .as_ref()
            .and_then(|t| {
                let pod = ours.iter().find(|p| p.uid().as_deref() == Some(pod_uid))?;
                t.network_for(pod).ok().map(|n| n.security_groups.clone())
            })
            .unwrap_or_default();
        let base = baseline(&port.name, &network_groups, &groups);
        if let Some(set) = port_plan(&port.security_groups, &want_ids, &base, |g| {
            managed_ids.contains(g)
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

    // Groups whose policy is gone, and the open groups when no pod of ours needs them: deleted
    // (the ports were restored above; a group another node's port still carries is refused by
    // Neutron and retried).
    let live_policies: BTreeSet<String> = policies.iter().filter_map(|p| p.uid()).collect();
    for g in &groups {
        let unused = match policy_uid(&g.name) {
            Some(uid) => !live_policies.contains(uid),
            None => is_managed(&g.name) && want.is_empty(),
        };
        if !unused {
            continue;
        }
        match net.delete_security_group(&g.id).await {
            Ok(()) => {
                info!(group = %g.id, name = %g.name, "deleted a NetworkPolicy security group no longer needed")
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

    fn set(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    fn types(ingress: bool, egress: bool) -> PolicyRules {
        PolicyRules {
            ingress,
            egress,
            rules: Vec::new(),
        }
    }

    #[test]
    fn pods_get_the_groups_of_every_policy_selecting_them_except_refused_ones() {
        let pols = vec![
            policy("p1", json!({"matchLabels": {"app": "web"}})),
            policy("p2", json!({})),
            policy("p3", json!({})),
        ];
        let pods = vec![pod("a", "web"), pod("b", "db")];
        // p3 is refused: absent from the applied ones.
        let applied = BTreeMap::from([
            ("p1".to_string(), types(true, false)),
            ("p2".to_string(), types(true, false)),
        ]);
        let want = desired_groups(&pols, &applied, &pods);
        assert_eq!(
            want["a"],
            set(&["k8s-netpol-p1", "k8s-netpol-p2", OPEN_EGRESS])
        );
        assert_eq!(want["b"], set(&["k8s-netpol-p2", OPEN_EGRESS]));
        assert_eq!(group_name("p1"), "k8s-netpol-p1");
        assert_eq!(policy_uid("k8s-netpol-p1"), Some("p1"));
        assert_eq!(policy_uid("vk_n_u"), None);
        assert_eq!(policy_uid(OPEN_INGRESS), None);
        assert!(is_managed(OPEN_EGRESS) && is_managed("k8s-netpol-p1") && !is_managed("default"));
    }

    #[test]
    fn a_direction_no_selecting_policy_isolates_stays_open() {
        let pols = vec![
            policy("in", json!({"matchLabels": {"app": "web"}})),
            policy("out", json!({})),
        ];
        let applied = BTreeMap::from([
            ("in".to_string(), types(true, false)),
            ("out".to_string(), types(false, true)),
        ]);
        let want = desired_groups(&pols, &applied, &[pod("a", "web"), pod("b", "db")]);
        // Both directions isolated by one policy or the other: only the policies' groups.
        assert_eq!(want["a"], set(&["k8s-netpol-in", "k8s-netpol-out"]));
        // Egress only: ingress stays open, as Kubernetes leaves it.
        assert_eq!(want["b"], set(&["k8s-netpol-out", OPEN_INGRESS]));
        // The open groups' rules: everything, one direction, both families.
        let open = group_rules(OPEN_INGRESS, &applied).unwrap();
        assert_eq!(open.len(), 2);
        assert!(
            open.iter()
                .all(|r| r.direction == INGRESS && r.protocol.is_none())
        );
        assert!(group_rules("default", &applied).is_none());
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
    fn the_baseline_is_what_the_provider_gave_the_port() {
        let g = |id: &str, name: &str| SecurityGroup {
            id: id.into(),
            name: name.into(),
            ..Default::default()
        };
        let groups = vec![g("d", "default"), g("o", "vk_n_u"), g("w", "web")];
        assert_eq!(baseline("vk_n_u", &[], &groups), s(&["o"]));
        assert_eq!(baseline("vk_n_x", &[], &groups), s(&["d"]));
        // A tenant network's groups, by name or ID, then the pod's own.
        assert_eq!(baseline("vk_n_u", &s(&["web"]), &groups), s(&["w", "o"]));
        assert_eq!(baseline("vk_n_x", &s(&["w"]), &groups), s(&["w"]));
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

    fn want(dir: &str, port: i32, prefix: &str) -> Rule {
        Rule {
            direction: dir.into(),
            ethertype: "IPv4".into(),
            protocol: Some("tcp".into()),
            port_min: Some(port),
            port_max: Some(port),
            remote_ip_prefix: prefix.into(),
        }
    }

    #[test]
    fn rules_are_reconciled_in_both_directions() {
        let current = vec![
            // Neutron's default egress rule of a new group: not the policy's.
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
            have("out", "egress", Some("tcp"), Some(53), Some("10.0.0.0/8")),
        ];
        let (create, delete) = rule_plan(
            "g",
            &[
                want(INGRESS, 8080, "10.0.0.0/8"),
                want(INGRESS, 8080, "10.9.9.9/32"),
                want(EGRESS, 53, "10.0.0.0/8"),
                want(EGRESS, 443, "10.0.0.0/8"),
            ],
            &current,
        );
        let made: Vec<(&str, &str)> = create
            .iter()
            .map(|c| {
                (
                    c.direction.as_str(),
                    c.remote_ip_prefix.as_deref().unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(made, [(INGRESS, "10.9.9.9/32"), (EGRESS, "10.0.0.0/8")]);
        assert_eq!(create[1].port_range_min, Some(443));
        assert_eq!(create[0].security_group_id, "g");
        assert_eq!(delete, s(&["e", "dup", "old"]));
        // A rule without a prefix is "anywhere" of its family.
        let any = vec![have("a", "ingress", None, None, None)];
        let all = Rule {
            direction: INGRESS.into(),
            ethertype: "IPv4".into(),
            protocol: None,
            port_min: None,
            port_max: None,
            remote_ip_prefix: "0.0.0.0/0".into(),
        };
        assert_eq!(rule_plan("g", &[all], &any), (vec![], vec![]));
    }
}
