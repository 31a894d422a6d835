//! NetworkPolicy → Neutron security-group rules (pure; [`crate::netpol_sync`] applies them).
//!
//! A NetworkPolicy that selects a pod of the node becomes one security group holding exactly
//! [`rules`] of the policy: its ingress rules when it isolates ingress (`Ingress` in its
//! effective `policyTypes`), its egress rules when it isolates egress, nothing else (Neutron's
//! default egress rules of a new group are deleted). The pod's port then carries the groups of
//! every policy selecting it *instead of* its own groups, which gives Kubernetes'
//! default-deny: Neutron drops what no rule allows, and a policy with no `ingress` (`egress`)
//! entries allows none in that direction. A direction no selecting policy isolates stays open
//! through a shared "open" group ([`crate::netpol_sync`]), as Kubernetes leaves it.
//!
//! Peers: `ipBlock.cidr` is a remote prefix, `except` is subtracted from it exactly (the rest of
//! the block as at most [`MAX_EXCEPT_PREFIXES`] prefixes); `podSelector`/`namespaceSelector`
//! peers are resolved here to the peer pods' IPs (one `/32` or `/128` rule per peer pod and
//! port), so the rules must be recomputed when peers come and go. Refused, with the field
//! named: named ports (they resolve per target pod), SCTP, an `except` that would need more
//! prefixes than that.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use crate::services::Refusal;

/// Neutron's `ingress` direction.
pub const INGRESS: &str = "ingress";
/// Neutron's `egress` direction.
pub const EGRESS: &str = "egress";

/// The most prefixes one `ipBlock` with `except` may become (each `except` entry costs at most
/// its prefix length minus the block's; rules multiply by ports, and Neutron's default quota
/// is 100 rules per project).
pub const MAX_EXCEPT_PREFIXES: usize = 64;

/// One rule of a policy's security group.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rule {
    /// [`INGRESS`] or [`EGRESS`].
    pub direction: String,
    /// `IPv4` or `IPv6`.
    pub ethertype: String,
    /// `tcp`, `udp`; `None`: any protocol.
    pub protocol: Option<String>,
    /// First port (`None`: all).
    pub port_min: Option<i32>,
    /// Last port (`endPort`, else the port).
    pub port_max: Option<i32>,
    /// The remote CIDR (the source for ingress, the destination for egress).
    pub remote_ip_prefix: String,
}

/// What a policy's security group holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicyRules {
    /// The policy isolates the pods it selects for ingress.
    pub ingress: bool,
    /// The policy isolates the pods it selects for egress.
    pub egress: bool,
    /// The allowed traffic, both directions, sorted.
    pub rules: Vec<Rule>,
}

/// The directions a policy isolates, `(ingress, egress)`: its `policyTypes`, else (as the API
/// server defaults them) ingress always and egress when it has `egress` entries.
pub fn policy_types(spec: &NetworkPolicySpec) -> (bool, bool) {
    match spec.policy_types.as_deref() {
        Some(t) if !t.is_empty() => (
            t.iter().any(|x| x == "Ingress"),
            t.iter().any(|x| x == "Egress"),
        ),
        _ => (true, spec.egress.as_ref().is_some_and(|e| !e.is_empty())),
    }
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

/// An IP prefix, host bits cleared (IPv4 in the low 32 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Prefix {
    v6: bool,
    addr: u128,
    len: u32,
}

impl Prefix {
    fn parse(s: &str) -> Option<Self> {
        let (ip, len) = s.split_once('/')?;
        let len: u32 = len.parse().ok()?;
        let (v6, addr) = match ip.parse::<IpAddr>().ok()? {
            IpAddr::V4(a) => (false, u128::from(u32::from(a))),
            IpAddr::V6(a) => (true, u128::from(a)),
        };
        let p = Prefix { v6, addr, len };
        (len <= p.bits()).then(|| Prefix {
            addr: p.masked(len),
            ..p
        })
    }

    fn bits(&self) -> u32 {
        if self.v6 { 128 } else { 32 }
    }

    /// The address with only its first `len` bits kept.
    fn masked(&self, len: u32) -> u128 {
        let host = self.bits() - len;
        if host >= 128 {
            0
        } else {
            (self.addr >> host) << host
        }
    }

    /// Whether `other` lies within `self`.
    fn contains(&self, other: &Prefix) -> bool {
        self.v6 == other.v6 && self.len <= other.len && other.masked(self.len) == self.addr
    }

    /// `self` minus `ex`: `self` itself when they do not overlap, nothing when `ex` covers it,
    /// else the siblings of `ex`'s ancestors below `self` (`ex.len - self.len` prefixes).
    fn minus(&self, ex: &Prefix) -> Vec<Prefix> {
        if ex.contains(self) {
            return Vec::new();
        }
        if !self.contains(ex) {
            return vec![*self];
        }
        (self.len + 1..=ex.len)
            .map(|len| Prefix {
                v6: self.v6,
                addr: ex.masked(len) ^ (1u128 << (self.bits() - len)),
                len,
            })
            .collect()
    }

    fn ethertype(&self) -> &'static str {
        if self.v6 { "IPv6" } else { "IPv4" }
    }
}

impl std::fmt::Display for Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.v6 {
            write!(f, "{}/{}", Ipv6Addr::from(self.addr), self.len)
        } else {
            // The low 32 bits hold an IPv4 address (parse put it there).
            let a = u32::try_from(self.addr).unwrap_or_default();
            write!(f, "{}/{}", Ipv4Addr::from(a), self.len)
        }
    }
}

/// An `ipBlock` as remote prefixes: its CIDR (host bits cleared, as Neutron stores it) minus
/// its `except` entries.
fn ip_block_prefixes(
    cidr: &str,
    except: &[String],
    field: &str,
) -> Result<Vec<(String, String)>, Refusal> {
    let base = Prefix::parse(cidr).ok_or_else(|| Refusal {
        field: format!("{field}.ipBlock.cidr"),
        reason: format!("{cidr:?} is not a CIDR"),
    })?;
    let mut rest = vec![base];
    for (i, e) in except.iter().enumerate() {
        let ex = Prefix::parse(e).ok_or_else(|| Refusal {
            field: format!("{field}.ipBlock.except[{i}]"),
            reason: format!("{e:?} is not a CIDR"),
        })?;
        rest = rest.iter().flat_map(|p| p.minus(&ex)).collect();
        if rest.len() > MAX_EXCEPT_PREFIXES {
            return Err(Refusal {
                field: format!("{field}.ipBlock.except"),
                reason: format!(
                    "{cidr} without its except entries needs more than {MAX_EXCEPT_PREFIXES} prefixes (Neutron rules only allow, so the rest of the block is listed)"
                ),
            });
        }
    }
    Ok(rest
        .iter()
        .map(|p| (p.ethertype().to_string(), p.to_string()))
        .collect())
}

/// The remote prefixes of one peer: its `ipBlock`, or the IPs of the pods it selects
/// (`namespaces`: namespace name → its labels; `pods`: every pod with an IP).
fn peer_prefixes(
    policy_ns: &str,
    peer: &NetworkPolicyPeer,
    field: &str,
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
    pods: &[Pod],
) -> Result<Vec<(String, String)>, Refusal> {
    if let Some(b) = &peer.ip_block {
        return ip_block_prefixes(&b.cidr, b.except.as_deref().unwrap_or_default(), field);
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

type PortRange = (Option<String>, Option<i32>, Option<i32>);

/// One `ingress`/`egress` entry: its field path, its peers (`from`/`to`), its ports.
type Entry<'a> = (
    String,
    Option<&'a [NetworkPolicyPeer]>,
    Option<&'a [NetworkPolicyPort]>,
);

/// A rule's `ports` as `(protocol, min, max)`; none: every protocol and port.
fn port_ranges(
    ports: Option<&[NetworkPolicyPort]>,
    field: &str,
) -> Result<Vec<PortRange>, Refusal> {
    let mut out = Vec::new();
    for (j, p) in ports.unwrap_or_default().iter().enumerate() {
        let proto = p.protocol.clone().unwrap_or_else(|| "TCP".into());
        if proto != "TCP" && proto != "UDP" {
            return Err(Refusal {
                field: format!("{field}.ports[{j}].protocol"),
                reason: format!("{proto} is not mapped (TCP and UDP are)"),
            });
        }
        let (min, max) = match &p.port {
            None => (None, None),
            Some(IntOrString::Int(n)) => (Some(*n), Some(p.end_port.unwrap_or(*n))),
            Some(IntOrString::String(_)) => {
                return Err(Refusal {
                    field: format!("{field}.ports[{j}].port"),
                    reason: "named ports are not mapped (give the number)".into(),
                });
            }
        };
        out.push((Some(proto.to_lowercase()), min, max));
    }
    if out.is_empty() {
        out.push((None, None, None));
    }
    Ok(out)
}

/// The rules of one direction's entries: `(field of the entry, its peers, its ports)`.
fn direction_rules(
    direction: &str,
    entries: &[Entry<'_>],
    peers_field: &str,
    policy_ns: &str,
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
    pods: &[Pod],
) -> Result<Vec<Rule>, Refusal> {
    let mut rules = Vec::new();
    for (field, peers, ports) in entries {
        let ports = port_ranges(*ports, field)?;
        // No peers: every address.
        let remotes: Vec<(String, String)> = match peers {
            None | Some([]) => vec![
                ("IPv4".into(), "0.0.0.0/0".into()),
                ("IPv6".into(), "::/0".into()),
            ],
            Some(peers) => {
                let mut all = Vec::new();
                for (k, peer) in peers.iter().enumerate() {
                    all.extend(peer_prefixes(
                        policy_ns,
                        peer,
                        &format!("{field}.{peers_field}[{k}]"),
                        namespaces,
                        pods,
                    )?);
                }
                all
            }
        };
        for (eth, prefix) in &remotes {
            for (proto, min, max) in &ports {
                rules.push(Rule {
                    direction: direction.into(),
                    ethertype: eth.clone(),
                    protocol: proto.clone(),
                    port_min: *min,
                    port_max: *max,
                    remote_ip_prefix: prefix.clone(),
                });
            }
        }
    }
    Ok(rules)
}

/// What `policy`'s security group holds; `Err` names the first field that cannot be mapped.
/// Entries of a direction the policy does not isolate are not looked at (Kubernetes ignores
/// them too).
pub fn rules(
    policy: &NetworkPolicy,
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
    pods: &[Pod],
) -> Result<PolicyRules, Refusal> {
    let spec = policy.spec.clone().unwrap_or_default();
    let (ingress, egress) = policy_types(&spec);
    let ns = policy.namespace().unwrap_or_default();
    let mut rules = Vec::new();
    if ingress {
        let entries: Vec<_> = spec
            .ingress
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, r)| {
                (
                    format!("spec.ingress[{i}]"),
                    r.from.as_deref(),
                    r.ports.as_deref(),
                )
            })
            .collect();
        rules.extend(direction_rules(
            INGRESS, &entries, "from", &ns, namespaces, pods,
        )?);
    }
    if egress {
        let entries: Vec<_> = spec
            .egress
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, r)| {
                (
                    format!("spec.egress[{i}]"),
                    r.to.as_deref(),
                    r.ports.as_deref(),
                )
            })
            .collect();
        rules.extend(direction_rules(
            EGRESS, &entries, "to", &ns, namespaces, pods,
        )?);
    }
    rules.sort();
    rules.dedup();
    Ok(PolicyRules {
        ingress,
        egress,
        rules,
    })
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

    fn rule(
        dir: &str,
        proto: Option<&str>,
        min: Option<i32>,
        max: Option<i32>,
        prefix: &str,
    ) -> Rule {
        Rule {
            direction: dir.into(),
            ethertype: if prefix.contains(':') { "IPv6" } else { "IPv4" }.into(),
            protocol: proto.map(str::to_string),
            port_min: min,
            port_max: max,
            remote_ip_prefix: prefix.into(),
        }
    }

    fn ingress_of(p: &NetworkPolicy, pods: &[Pod]) -> Vec<Rule> {
        rules(p, &BTreeMap::new(), pods).unwrap().rules
    }

    #[test]
    fn a_policy_without_ingress_rules_denies_everything() {
        let p = policy(json!({"podSelector": {}, "policyTypes": ["Ingress"]}));
        let r = rules(&p, &BTreeMap::new(), &[]).unwrap();
        assert_eq!((r.ingress, r.egress, r.rules), (true, false, vec![]));
        assert!(selects(&p, &pod("a", "ns", "web", "10.0.0.1")));
        assert!(!selects(&p, &pod("a", "other", "web", "10.0.0.1")));
    }

    #[test]
    fn policy_types_default_as_the_api_server_does() {
        let types = |spec: serde_json::Value| {
            policy_types(&serde_json::from_value::<NetworkPolicySpec>(spec).unwrap())
        };
        assert_eq!(types(json!({})), (true, false));
        assert_eq!(types(json!({"egress": [{}]})), (true, true));
        assert_eq!(types(json!({"policyTypes": ["Egress"]})), (false, true));
        assert_eq!(
            types(json!({"policyTypes": ["Ingress", "Egress"]})),
            (true, true)
        );
    }

    #[test]
    fn ip_blocks_ports_and_port_ranges_become_rules() {
        let p = policy(json!({"podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"ipBlock": {"cidr": "192.0.2.7/24"}}],
                         "ports": [{"port": 80}, {"protocol": "UDP", "port": 5000, "endPort": 5010}]}]}));
        assert_eq!(
            ingress_of(&p, &[]),
            vec![
                rule(INGRESS, Some("tcp"), Some(80), Some(80), "192.0.2.0/24"),
                rule(INGRESS, Some("udp"), Some(5000), Some(5010), "192.0.2.0/24"),
            ],
            "host bits are cleared, as Neutron stores the prefix"
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
            rules(&p, &nss, &pods).unwrap().rules,
            vec![
                rule(INGRESS, Some("tcp"), Some(8080), Some(8080), "10.0.0.5/32"),
                rule(INGRESS, Some("tcp"), Some(8080), Some(8080), "10.0.0.7/32"),
            ]
        );
    }

    #[test]
    fn an_empty_rule_allows_all_sources_and_ports() {
        let p = policy(json!({"podSelector": {}, "ingress": [{}]}));
        assert_eq!(
            ingress_of(&p, &[]),
            vec![
                rule(INGRESS, None, None, None, "0.0.0.0/0"),
                rule(INGRESS, None, None, None, "::/0")
            ]
        );
    }

    #[test]
    fn egress_rules_map_like_ingress_ones_to_destinations() {
        let p = policy(
            json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"ports": [{"port": 8080}]}],
            "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "db"}}},
                               {"ipBlock": {"cidr": "192.0.2.0/24"}}],
                        "ports": [{"port": 5432}]},
                       {"ports": [{"protocol": "UDP", "port": 53}]}]}),
        );
        let r = rules(&p, &BTreeMap::new(), &[pod("d", "ns", "db", "10.0.0.9")]).unwrap();
        assert!(r.ingress && r.egress);
        assert_eq!(
            r.rules,
            vec![
                rule(EGRESS, Some("tcp"), Some(5432), Some(5432), "10.0.0.9/32"),
                rule(EGRESS, Some("tcp"), Some(5432), Some(5432), "192.0.2.0/24"),
                rule(EGRESS, Some("udp"), Some(53), Some(53), "0.0.0.0/0"),
                rule(EGRESS, Some("udp"), Some(53), Some(53), "::/0"),
                rule(INGRESS, Some("tcp"), Some(8080), Some(8080), "0.0.0.0/0"),
                rule(INGRESS, Some("tcp"), Some(8080), Some(8080), "::/0"),
            ]
        );
        // Egress only, no entries: deny all egress, ingress untouched (not isolated).
        let deny = policy(json!({"podSelector": {}, "policyTypes": ["Egress"],
            "ingress": [{"ports": [{"port": "named-but-ignored"}]}]}));
        let r = rules(&deny, &BTreeMap::new(), &[]).unwrap();
        assert_eq!((r.ingress, r.egress, r.rules), (false, true, vec![]));
    }

    #[test]
    fn except_is_subtracted_from_the_block() {
        let p = policy(json!({"podSelector": {}, "policyTypes": ["Egress"],
            "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8",
                                            "except": ["10.1.0.0/16", "10.128.0.0/9"]}}],
                        "ports": [{"port": 443}]}]}));
        let got: Vec<String> = rules(&p, &BTreeMap::new(), &[])
            .unwrap()
            .rules
            .into_iter()
            .map(|r| r.remote_ip_prefix)
            .collect();
        let mut want = vec![
            "10.0.0.0/16",
            "10.2.0.0/15",
            "10.4.0.0/14",
            "10.8.0.0/13",
            "10.16.0.0/12",
            "10.32.0.0/11",
            "10.64.0.0/10",
        ];
        want.sort();
        assert_eq!(got, want);
        // IPv6, and an except covering the whole block leaves nothing.
        assert_eq!(
            ip_block_prefixes("2001:db8::/32", &["2001:db8:8000::/33".into()], "f").unwrap(),
            vec![("IPv6".to_string(), "2001:db8::/33".to_string())]
        );
        assert_eq!(
            ip_block_prefixes("10.0.0.0/24", &["10.0.0.0/8".into()], "f").unwrap(),
            vec![]
        );
        // Outside the block: no effect.
        assert_eq!(
            ip_block_prefixes("10.0.0.0/24", &["192.0.2.0/24".into()], "f").unwrap(),
            vec![("IPv4".to_string(), "10.0.0.0/24".to_string())]
        );
    }

    #[test]
    fn what_cannot_be_mapped_is_refused_by_field() {
        let field = |spec: serde_json::Value| {
            rules(&policy(spec), &BTreeMap::new(), &[])
                .unwrap_err()
                .field
        };
        assert_eq!(
            field(json!({"podSelector": {}, "ingress": [{"from": [
                {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["1.2.3.4/32", "5.6.7.8/32", "9.9.9.9/32"]}}]}]})),
            "spec.ingress[0].from[0].ipBlock.except"
        );
        assert_eq!(
            field(json!({"podSelector": {}, "egress": [{"to": [
                {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["nonsense"]}}]}]})),
            "spec.egress[0].to[0].ipBlock.except[0]"
        );
        assert_eq!(
            field(json!({"podSelector": {}, "ingress": [{"ports": [{"port": "http"}]}]})),
            "spec.ingress[0].ports[0].port"
        );
        assert_eq!(
            field(json!({"podSelector": {}, "egress": [{"ports": [{"port": "dns"}]}]})),
            "spec.egress[0].ports[0].port"
        );
        assert_eq!(
            field(
                json!({"podSelector": {}, "ingress": [{"ports": [{"protocol": "SCTP", "port": 1}]}]})
            ),
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
