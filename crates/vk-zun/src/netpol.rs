//! NetworkPolicy → Neutron security-group rules (pure; [`crate::netpol_sync`] applies them).
//!
//! A NetworkPolicy that selects a pod of the node becomes one security group whose ingress
//! rules are [`ingress_rules`] of the policy; the pod's port then carries the groups of every
//! policy selecting it *instead of* its own group, which gives Kubernetes' default-deny: Neutron
//! drops ingress that no rule allows, and a group with no ingress rule (a policy with no
//! `ingress` entries) allows none. Egress is not restricted (a new group's default egress rules
//! stay), so a policy with `Egress` in `policyTypes` is refused.
//!
//! Peers: `ipBlock.cidr` is a remote prefix; `podSelector`/`namespaceSelector` peers are
//! resolved here to the peer pods' IPs (one `/32` or `/128` rule per peer pod and port), so the
//! rules must be recomputed when peers come and go. Refused, with the field named: `Egress`,
//! `ipBlock.except`, named ports (they resolve per target pod), SCTP.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use crate::services::Refusal;

/// One ingress rule of a policy's security group.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct IngressRule {
    /// `IPv4` or `IPv6`.
    pub ethertype: String,
    /// `tcp`, `udp`; `None`: any protocol.
    pub protocol: Option<String>,
    /// First port (`None`: all).
    pub port_min: Option<i32>,
    /// Last port (`endPort`, else the port).
    pub port_max: Option<i32>,
    /// The remote CIDR.
    pub remote_ip_prefix: String,
}

/// Whether `labels` satisfy `sel` (matchLabels and matchExpressions; an empty selector
/// matches everything).
pub fn matches(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let ml = sel
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let me = sel.match_expressions.iter().flatten().all(|e| {
        let vals = e.values.clone().unwrap_or_default();
        let have = labels.get(&e.key);
        match e.operator.as_str() {
            "In" => have.is_some_and(|v| vals.contains(v)),
            "NotIn" => have.is_none_or(|v| !vals.contains(v)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            _ => false,
        }
    });
    ml && me
}

/// Whether the policy selects `pod` (same namespace, podSelector).
pub fn selects(policy: &NetworkPolicy, pod: &Pod) -> bool {
    pod.namespace() == policy.namespace()
        && policy
            .spec
            .as_ref()
            .is_some_and(|s| matches(&s.pod_selector.clone().unwrap_or_default(), pod.labels()))
}

fn host_prefix(ip: &str) -> (String, String) {
    if ip.contains(':') {
        ("IPv6".into(), format!("{ip}/128"))
    } else {
        ("IPv4".into(), format!("{ip}/32"))
    }
}

/// The remote prefixes of one peer: its CIDR, or the IPs of the pods it selects
/// (`namespaces`: namespace name → its labels; `pods`: every pod with an IP).
fn peer_prefixes(
    policy_ns: &str,
    peer: &NetworkPolicyPeer,
    field: &str,
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
    pods: &[Pod],
) -> Result<Vec<(String, String)>, Refusal> {
    if let Some(b) = &peer.ip_block {
        if b.except.as_ref().is_some_and(|e| !e.is_empty()) {
            return Err(Refusal {
                field: format!("{field}.ipBlock.except"),
                reason: "Neutron rules only allow: except is not mapped".into(),
            });
        }
        let eth = if b.cidr.contains(':') { "IPv6" } else { "IPv4" };
        return Ok(vec![(eth.into(), b.cidr.clone())]);
    }
    let ns_ok = |ns: &str| match &peer.namespace_selector {
        None => ns == policy_ns,
        Some(sel) => matches(sel, namespaces.get(ns).unwrap_or(&BTreeMap::new())),
    };
    let mut out: Vec<(String, String)> = pods
        .iter()
        .filter(|p| ns_ok(&p.namespace().unwrap_or_default()))
        .filter(|p| {
            peer.pod_selector
                .as_ref()
                .is_none_or(|sel| matches(sel, p.labels()))
        })
        .flat_map(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.pod_ips.clone())
                .unwrap_or_default()
                .into_iter()
                .map(|i| i.ip)
                .chain(p.status.as_ref().and_then(|s| s.pod_ip.clone()))
                .collect::<Vec<_>>()
        })
        .map(|ip| host_prefix(&ip))
        .collect();
    out.sort();
    out.dedup();
    Ok(out)
}

/// The ingress rules of `policy`'s security group; `Err` names the first field that cannot be
/// mapped.
pub fn ingress_rules(
    policy: &NetworkPolicy,
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
    pods: &[Pod],
) -> Result<Vec<IngressRule>, Refusal> {
    let spec = policy.spec.clone().unwrap_or_default();
    if let Some(i) = spec
        .policy_types
        .iter()
        .flatten()
        .position(|t| t == "Egress")
    {
        return Err(Refusal {
            field: format!("spec.policyTypes[{i}]"),
            reason: "Egress policies are not mapped (only ingress is enforced)".into(),
        });
    }
    if spec.egress.as_ref().is_some_and(|e| !e.is_empty()) {
        return Err(Refusal {
            field: "spec.egress".into(),
            reason: "Egress policies are not mapped (only ingress is enforced)".into(),
        });
    }
    let ns = policy.namespace().unwrap_or_default();
    let mut rules = Vec::new();
    for (i, rule) in spec.ingress.iter().flatten().enumerate() {
        // No `ports`: every protocol and port.
        let mut ports: Vec<(Option<String>, Option<i32>, Option<i32>)> = Vec::new();
        for (j, p) in rule.ports.iter().flatten().enumerate() {
            let proto = p.protocol.clone().unwrap_or_else(|| "TCP".into());
            if proto != "TCP" && proto != "UDP" {
                return Err(Refusal {
                    field: format!("spec.ingress[{i}].ports[{j}].protocol"),
                    reason: format!("{proto} is not mapped (TCP and UDP are)"),
                });
            }
            let (min, max) = match &p.port {
                None => (None, None),
                Some(IntOrString::Int(n)) => (Some(*n), Some(p.end_port.unwrap_or(*n))),
                Some(IntOrString::String(_)) => {
                    return Err(Refusal {
                        field: format!("spec.ingress[{i}].ports[{j}].port"),
                        reason: "named ports are not mapped (give the number)".into(),
                    });
                }
            };
            ports.push((Some(proto.to_lowercase()), min, max));
        }
        if ports.is_empty() {
            ports.push((None, None, None));
        }
        // No `from`: every source.
        let remotes: Vec<(String, String)> = match rule.from.as_deref() {
            None | Some([]) => vec![
                ("IPv4".into(), "0.0.0.0/0".into()),
                ("IPv6".into(), "::/0".into()),
            ],
            Some(peers) => {
                let mut all = Vec::new();
                for (k, peer) in peers.iter().enumerate() {
                    all.extend(peer_prefixes(
                        &ns,
                        peer,
                        &format!("spec.ingress[{i}].from[{k}]"),
                        namespaces,
                        pods,
                    )?);
                }
                all
            }
        };
        for (eth, prefix) in &remotes {
            for (proto, min, max) in &ports {
                rules.push(IngressRule {
                    ethertype: eth.clone(),
                    protocol: proto.clone(),
                    port_min: *min,
                    port_max: *max,
                    remote_ip_prefix: prefix.clone(),
                });
            }
        }
    }
    rules.sort();
    rules.dedup();
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(spec: serde_json::Value) -> NetworkPolicy {
        serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}))
            .unwrap()
    }

    fn pod(name: &str, ns: &str, app: &str, ip: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
            "status": {"podIP": ip}
        }))
        .unwrap()
    }

    fn rule(proto: Option<&str>, min: Option<i32>, max: Option<i32>, prefix: &str) -> IngressRule {
        IngressRule {
            ethertype: if prefix.contains(':') { "IPv6" } else { "IPv4" }.into(),
            protocol: proto.map(str::to_string),
            port_min: min,
            port_max: max,
            remote_ip_prefix: prefix.into(),
        }
    }

    #[test]
    fn a_policy_without_ingress_rules_denies_everything() {
        let p = policy(json!({"podSelector": {}, "policyTypes": ["Ingress"]}));
        assert_eq!(ingress_rules(&p, &BTreeMap::new(), &[]).unwrap(), vec![]);
        assert!(selects(&p, &pod("a", "ns", "web", "10.0.0.1")));
        assert!(!selects(&p, &pod("a", "other", "web", "10.0.0.1")));
    }

    #[test]
    fn ip_blocks_ports_and_port_ranges_become_rules() {
        let p = policy(json!({"podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"ipBlock": {"cidr": "192.0.2.0/24"}}],
                         "ports": [{"port": 80}, {"protocol": "UDP", "port": 5000, "endPort": 5010}]}]}));
        assert_eq!(
            ingress_rules(&p, &BTreeMap::new(), &[]).unwrap(),
            vec![
                rule(Some("tcp"), Some(80), Some(80), "192.0.2.0/24"),
                rule(Some("udp"), Some(5000), Some(5010), "192.0.2.0/24"),
            ]
        );
    }

    #[test]
    fn pod_and_namespace_peers_resolve_to_the_peer_pods_ips() {
        let p = policy(json!({"podSelector": {},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "client"}}},
                                  {"namespaceSelector": {"matchLabels": {"team": "ops"}}}],
                         "ports": [{"port": 8080}]}]}));
        let pods = vec![
            pod("c", "ns", "client", "10.0.0.5"),
            pod("x", "ns", "other", "10.0.0.6"),
            pod("m", "mon", "prom", "10.0.0.7"),
            pod("c2", "elsewhere", "client", "10.0.0.8"),
        ];
        let nss = BTreeMap::from([
            (
                "mon".to_string(),
                BTreeMap::from([("team".to_string(), "ops".to_string())]),
            ),
            ("elsewhere".to_string(), BTreeMap::new()),
        ]);
        assert_eq!(
            ingress_rules(&p, &nss, &pods).unwrap(),
            vec![
                rule(Some("tcp"), Some(8080), Some(8080), "10.0.0.5/32"),
                rule(Some("tcp"), Some(8080), Some(8080), "10.0.0.7/32"),
            ]
        );
    }

    #[test]
    fn an_empty_rule_allows_all_sources_and_ports() {
        let p = policy(json!({"podSelector": {}, "ingress": [{}]}));
        assert_eq!(
            ingress_rules(&p, &BTreeMap::new(), &[]).unwrap(),
            vec![
                rule(None, None, None, "0.0.0.0/0"),
                rule(None, None, None, "::/0")
            ]
        );
    }

    #[test]
    fn what_cannot_be_mapped_is_refused_by_field() {
        let egress = policy(json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}));
        assert_eq!(
            ingress_rules(&egress, &BTreeMap::new(), &[])
                .unwrap_err()
                .field,
            "spec.policyTypes[1]"
        );
        let except = policy(json!({"podSelector": {}, "ingress": [{"from": [
            {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}]}]}));
        assert_eq!(
            ingress_rules(&except, &BTreeMap::new(), &[])
                .unwrap_err()
                .field,
            "spec.ingress[0].from[0].ipBlock.except"
        );
        let named = policy(json!({"podSelector": {}, "ingress": [{"ports": [{"port": "http"}]}]}));
        assert_eq!(
            ingress_rules(&named, &BTreeMap::new(), &[])
                .unwrap_err()
                .field,
            "spec.ingress[0].ports[0].port"
        );
        let sctp = policy(
            json!({"podSelector": {}, "ingress": [{"ports": [{"protocol": "SCTP", "port": 1}]}]}),
        );
        assert_eq!(
            ingress_rules(&sctp, &BTreeMap::new(), &[])
                .unwrap_err()
                .field,
            "spec.ingress[0].ports[0].protocol"
        );
    }

    #[test]
    fn match_expressions_are_honoured() {
        let sel: LabelSelector = serde_json::from_value(json!({"matchExpressions": [
            {"key": "app", "operator": "In", "values": ["a", "b"]},
            {"key": "tier", "operator": "DoesNotExist"}]}))
        .unwrap();
        let l = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        assert!(matches(&sel, &l(&[("app", "a")])));
        assert!(!matches(&sel, &l(&[("app", "c")])));
        assert!(!matches(&sel, &l(&[("app", "a"), ("tier", "x")])));
    }
}
