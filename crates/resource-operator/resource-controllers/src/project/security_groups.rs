//! Security groups and their rules. Groups are found by name in the project; rules are a set
//! compared on (direction, ethertype, protocol, ports, remote prefix, remote group): missing
//! rules are created, extra ones deleted — except Neutron's default egress rules of a new
//! group, which the seed kept and which count as always desired. Two passes: groups first
//! (so `remoteGroupName` can name a group created in the same pass), then rules.

use std::collections::{BTreeMap, BTreeSet};

use api::project::SecurityGroupStatus;
use api::project::{Ethertype, SecurityGroup as SpecGroup, SecurityGroupRule as SpecRule};
use api::{OpenstackProjectSpec, OpenstackProjectStatus};
use ipnet_lite::trunc_prefix;
use openstack::OptionalExt;
use openstack::model::{
    SecurityGroup, SecurityGroupCreate, SecurityGroupFilter, SecurityGroupRule,
    SecurityGroupRuleCreate, SecurityGroupUpdate, TaggedResource,
};

use super::networks::Marks;
use super::{AreaOutcome, Env, Problem, os};
use crate::error::ReconcileError;
use crate::ownership::{Owner, Ownership};
use tracing::warn;

/// A rule as compared: normalized the way Neutron stores it, so a converged group compares
/// equal (protocol names, remote prefix network address, `/0` = any remote).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RuleKey {
    /// `ingress` / `egress`.
    pub direction: String,
    /// `IPv4` / `IPv6`.
    pub ethertype: String,
    /// Protocol name; `None` = any.
    pub protocol: Option<String>,
    /// Lower port or ICMP type.
    pub port_range_min: Option<i32>,
    /// Upper port or ICMP code.
    pub port_range_max: Option<i32>,
    /// Remote CIDR; `None` = any (also for `0.0.0.0/0` and `::/0`).
    pub remote_ip_prefix: Option<String>,
    /// Remote group ID.
    pub remote_group_id: Option<String>,
}

fn normalize_protocol(p: Option<&str>, ethertype: &str) -> Option<String> {
    let p = p?.trim().to_ascii_lowercase();
    let name = match p.as_str() {
        "" | "any" => return None,
        "6" => "tcp",
        "17" => "udp",
        "1" => "icmp",
        // Neutron spells IPv6 ICMP several ways; a spec's `icmp` means all of them.
        "58" | "icmpv6" | "ipv6-icmp" if ethertype == "IPv6" => "icmp",
        other => other,
    };
    Some(name.to_string())
}

fn normalize_prefix(p: Option<&str>) -> Option<String> {
    let p = p?.trim();
    match trunc_prefix(p) {
        Some((_, 0)) => None,
        Some((net, len)) => Some(format!("{net}/{len}")),
        None => Some(p.to_string()),
    }
}

impl RuleKey {
    /// The comparison key of a rule as Neutron reports it.
    pub fn observed(r: &SecurityGroupRule) -> Self {
        RuleKey {
            direction: r.direction.to_ascii_lowercase(),
            ethertype: r.ethertype.clone(),
            protocol: normalize_protocol(r.protocol.as_deref(), &r.ethertype),
            port_range_min: r.port_range_min,
            port_range_max: r.port_range_max,
            remote_ip_prefix: normalize_prefix(r.remote_ip_prefix.as_deref()),
            remote_group_id: r.remote_group_id.clone(),
        }
    }
}

/// The egress rules Neutron gives every new group (allow all, IPv4 and IPv6).
pub fn default_egress() -> Vec<RuleKey> {
    ["IPv4", "IPv6"]
        .into_iter()
        .map(|e| RuleKey {
            direction: "egress".into(),
            ethertype: e.into(),
            protocol: None,
            port_range_min: None,
            port_range_max: None,
            remote_ip_prefix: None,
            remote_group_id: None,
        })
        .collect()
}

/// A desired rule: its key and the request that creates it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredRule {
    /// Comparison key.
    pub key: RuleKey,
    /// Create request (`security_group_id` filled in by the caller).
    pub create: SecurityGroupRuleCreate,
}

fn port(v: Option<i64>) -> Option<i32> {
    v.and_then(|v| i32::try_from(v).ok())
}

/// The desired rules of spec group `gi`: its rules (remote group names resolved through
/// `ids`) plus the default egress rules. Errors name the rule; `false` = some rule could not
/// be resolved (then nothing may be deleted from this group).
pub fn desired_rules(
    gi: usize,
    group: &SpecGroup,
    ids: &BTreeMap<String, String>,
) -> (Vec<DesiredRule>, Vec<Problem>, bool) {
    let mut out: Vec<DesiredRule> = Vec::new();
    let mut errors = Vec::new();
    let mut complete = true;
    for (ri, r) in group.rules.iter().flatten().enumerate() {
        match desired_rule(r, ids) {
            Ok(d) => {
                if !out.iter().any(|x| x.key == d.key) {
                    out.push(d);
                }
            }
            Err(name) => {
                complete = false;
                errors.push(Problem::Missing(format!(
                    "security group {name:?} (spec.securityGroups[{gi}].rules[{ri}].remoteGroupName)"
                )));
            }
        }
    }
    for key in default_egress() {
        if !out.iter().any(|x| x.key == key) {
            out.push(DesiredRule {
                create: SecurityGroupRuleCreate {
                    direction: key.direction.clone(),
                    ethertype: key.ethertype.clone(),
                    ..Default::default()
                },
                key,
            });
        }
    }
    (out, errors, complete)
}

fn desired_rule(r: &SpecRule, ids: &BTreeMap<String, String>) -> Result<DesiredRule, String> {
    let remote_group_id = match &r.remote_group_name {
        Some(n) => Some(ids.get(n).cloned().ok_or_else(|| n.clone())?),
        None => None,
    };
    let ethertype = match r.ethertype {
        Ethertype::IPv4 => "IPv4",
        Ethertype::IPv6 => "IPv6",
    };
    let protocol = r.protocol.and_then(|p| p.neutron()).map(str::to_string);
    let create = SecurityGroupRuleCreate {
        security_group_id: String::new(),
        direction: r.direction.as_str().to_string(),
        ethertype: ethertype.to_string(),
        protocol: protocol.clone(),
        port_range_min: port(r.port_range_min),
        port_range_max: port(r.port_range_max),
        remote_ip_prefix: r.remote_ip_prefix.clone(),
        remote_group_id: remote_group_id.clone(),
        description: None,
        project_id: None,
    };
    let key = RuleKey {
        direction: create.direction.clone(),
        ethertype: create.ethertype.clone(),
        protocol: normalize_protocol(protocol.as_deref(), ethertype),
        port_range_min: create.port_range_min,
        port_range_max: create.port_range_max,
        remote_ip_prefix: normalize_prefix(r.remote_ip_prefix.as_deref()),
        remote_group_id,
    };
    Ok(DesiredRule { key, create })
}

/// Rules to create and rule IDs to delete in one group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RulePlan {
    /// Missing rules.
    pub create: Vec<SecurityGroupRuleCreate>,
    /// Extra rules (IDs).
    pub delete: Vec<String>,
}

/// Set comparison of desired and observed rules; `may_delete` = false keeps extras.
pub fn plan_rules(
    desired: &[DesiredRule],
    observed: &[SecurityGroupRule],
    may_delete: bool,
) -> RulePlan {
    let mut seen: BTreeSet<RuleKey> = BTreeSet::new();
    let mut plan = RulePlan::default();
    for r in observed {
        let key = RuleKey::observed(r);
        let wanted = desired.iter().any(|d| d.key == key);
        // A second rule with the same key (Neutron normally refuses one) is extra as well.
        if (!wanted || !seen.insert(key)) && may_delete {
            plan.delete.push(r.id.clone());
        }
    }
    let have: BTreeSet<RuleKey> = observed.iter().map(RuleKey::observed).collect();
    plan.create = desired
        .iter()
        .filter(|d| !have.contains(&d.key))
        .map(|d| d.create.clone())
        .collect();
    plan
}

/// What to do about one spec group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupStep {
    /// Use it; update the description when it differs (seed W21); set marks when taken over.
    Use {
        /// Group ID.
        id: String,
        /// Tags to set when taking it over.
        retag: Option<Vec<String>>,
        /// Description change.
        update: Option<SecurityGroupUpdate>,
    },
    /// Create it with our marks.
    Create(SecurityGroupCreate),
    /// A group with the name exists and is not ours.
    Blocked(Problem),
}

/// Plans the groups of the spec against the project's groups.
pub fn plan_groups(
    spec: &[SpecGroup],
    observed: &[SecurityGroup],
    project_id: &str,
    marks: &Marks<'_>,
) -> Vec<GroupStep> {
    spec.iter()
        .enumerate()
        .map(|(i, g)| {
            let named: Vec<&SecurityGroup> = observed.iter().filter(|o| o.name == g.name).collect();
            let found = named
                .iter()
                .find(|o| marks.ours(&o.tags))
                .or_else(|| named.first())
                .copied();
            match found {
                None => GroupStep::Create(SecurityGroupCreate {
                    name: g.name.clone(),
                    description: Some(g.description.clone()),
                    project_id: Some(project_id.to_string()),
                    tags: marks.owner.tags(),
                }),
                Some(o) => match marks.claim(
                    &o.tags,
                    &format!("spec.securityGroups[{i}].name"),
                    &format!("security group {:?} ({})", o.name, o.id),
                ) {
                    Ok(retag) => GroupStep::Use {
                        id: o.id.clone(),
                        retag,
                        update: (o.description != g.description).then(|| SecurityGroupUpdate {
                            description: Some(g.description.clone()),
                            ..Default::default()
                        }),
                    },
                    Err(e) => GroupStep::Blocked(e),
                },
            }
        })
        .collect()
}

/// Our groups that the spec no longer names: first their rules pointing at other groups
/// (Neutron refuses to delete a group another group's rule refers to), then the groups.
pub fn plan_group_sweep(
    observed: &[SecurityGroup],
    keep: &BTreeSet<String>,
    owner: &Owner,
) -> (Vec<String>, Vec<String>) {
    group_sweep_where(observed, keep, |g| {
        owner.classify_tags(&g.tags) == Ownership::Ours
    })
}

/// Like [`plan_group_sweep`] for a project that goes away, keeping nothing; groups without any
/// tag named in `strays` (the spec's group names) count as ours too: left untagged by a crash
/// between their create and tag calls (see [`Marks::own_project`]).
pub fn plan_group_removal(
    observed: &[SecurityGroup],
    owner: &Owner,
    strays: &BTreeSet<String>,
) -> (Vec<String>, Vec<String>) {
    group_sweep_where(observed, &BTreeSet::new(), |g| {
        owner.classify_tags(&g.tags) == Ownership::Ours
            || (g.tags.is_empty() && strays.contains(&g.name))
    })
}

fn group_sweep_where(
    observed: &[SecurityGroup],
    keep: &BTreeSet<String>,
    ours: impl Fn(&SecurityGroup) -> bool,
) -> (Vec<String>, Vec<String>) {
    let orphans: Vec<&SecurityGroup> = observed
        .iter()
        .filter(|g| ours(g) && !keep.contains(&g.id))
        .collect();
    let rules = orphans
        .iter()
        .flat_map(|g| g.rules.iter())
        .filter(|r| {
            r.remote_group_id
                .as_ref()
                .is_some_and(|rg| rg != &r.security_group_id)
        })
        .map(|r| r.id.clone())
        .collect();
    (rules, orphans.iter().map(|g| g.id.clone()).collect())
}

// ---------------------------------------------------------------------------------------
// Executors
// ---------------------------------------------------------------------------------------

async fn observe(env: &Env<'_>, project_id: &str) -> Result<Vec<SecurityGroup>, ReconcileError> {
    // One call: Neutron returns each group with its rules.
    env.cloud
        .network
        .list_security_groups(&SecurityGroupFilter {
            project_id: Some(project_id.to_string()),
            ..Default::default()
        })
        .await
        .map_err(|e| os("listing the project's security groups", e))
}

async fn run_group_sweep(
    env: &Env<'_>,
    rules: Vec<String>,
    groups: Vec<String>,
    out: &mut AreaOutcome,
) {
    let net = &env.cloud.network;
    for r in rules {
        match net.delete_security_group_rule(&r).await.optional() {
            Ok(_) => out.changed = true,
            Err(e) => out.errors.push(os(
                format!("deleting rule {r} of a security group no longer in spec.securityGroups"),
                e,
            )),
        }
    }
    for g in groups {
        match net.delete_security_group(&g).await.optional() {
            Ok(_) => out.changed = true,
            Err(e) => out.errors.push(os(
                format!("deleting security group {g} (no longer in spec.securityGroups)"),
                e,
            )),
        }
    }
}

/// What one group's step did.
struct GroupResult {
    /// The group's ID, when it exists.
    id: Option<String>,
    /// A group created by this step, with the rules Neutron gave it.
    created: Option<(String, Vec<SecurityGroupRule>)>,
    changed: bool,
    errors: Vec<ReconcileError>,
}

async fn run_group_step(env: &Env<'_>, i: usize, step: GroupStep) -> GroupResult {
    let net = &env.cloud.network;
    let path = format!("spec.securityGroups[{i}]");
    let mut r = GroupResult {
        id: None,
        created: None,
        changed: false,
        errors: Vec::new(),
    };
    match step {
        GroupStep::Use { id, retag, update } => {
            if let Some(tags) = retag {
                match net
                    .set_tags(TaggedResource::SecurityGroup, &id, &tags)
                    .await
                {
                    Ok(()) => r.changed = true,
                    Err(e) => r
                        .errors
                        .push(os(format!("{path}: marking security group {id}"), e)),
                }
            }
            if let Some(u) = update {
                match net.update_security_group(&id, &u).await {
                    Ok(_) => r.changed = true,
                    Err(e) => r.errors.push(os(
                        format!("{path}.description: updating security group {id}"),
                        e,
                    )),
                }
            }
            r.id = Some(id);
        }
        GroupStep::Create(req) => match net.create_security_group(&req).await {
            Ok(created) => {
                r.changed = true;
                r.created = Some((created.id.clone(), created.rules.clone()));
                r.id = Some(created.id);
            }
            Err(e) => r.errors.push(os(
                format!("{path}: creating security group {:?}", req.name),
                e,
            )),
        },
        GroupStep::Blocked(e) => r.errors.push(e.into()),
    }
    r
}

/// Creates the missing rules (`usize` = the spec index of their group): one Neutron bulk
/// request per group (Neutron refuses a bulk spanning groups: "Only allowed to update rules
/// for one security profile at a time"), the groups' requests at the same time.
async fn create_rules(
    env: &Env<'_>,
    creates: Vec<(usize, SecurityGroupRuleCreate)>,
    out: &mut AreaOutcome,
) {
    let mut by_group: BTreeMap<usize, Vec<SecurityGroupRuleCreate>> = BTreeMap::new();
    for (i, req) in creates {
        by_group.entry(i).or_default().push(req);
    }
    let results = futures::future::join_all(
        by_group
            .into_iter()
            .map(|(i, reqs)| create_group_rules(env, i, reqs)),
    )
    .await;
    for r in results {
        out.changed |= r.changed;
        out.errors.extend(r.errors);
    }
}

/// Creates the missing rules of the group at spec index `i` in one bulk request. Bulk is all
/// or none: when it is refused because one of the rules exists already (a concurrent writer,
/// or a lost response Neutron had not yet listed), each rule is created on its own, and one
/// that exists counts as converged.
async fn create_group_rules(
    env: &Env<'_>,
    i: usize,
    reqs: Vec<SecurityGroupRuleCreate>,
) -> AreaOutcome {
    let net = &env.cloud.network;
    let mut out = AreaOutcome::default();
    let describe = |req: &SecurityGroupRuleCreate| {
        format!(
            "spec.securityGroups[{i}].rules: creating {} {} {} rule",
            req.direction,
            req.ethertype,
            req.protocol.as_deref().unwrap_or("any")
        )
    };
    if reqs.len() > 1 {
        match net.create_security_group_rules(&reqs).await {
            Ok(_) => {
                out.changed = true;
                return out;
            }
            Err(e) if e.is_conflict() => {}
            Err(e) => {
                out.errors.push(os(
                    format!(
                        "spec.securityGroups[{i}].rules: creating {} rules",
                        reqs.len()
                    ),
                    e,
                ));
                return out;
            }
        }
    }
    for req in &reqs {
        match net.create_security_group_rule(req).await {
            Ok(_) => out.changed = true,
            // Already there (e.g. a lost response on the last pass): converged.
            Err(e) if e.is_conflict() => {}
            Err(e) => out.errors.push(os(describe(req), e)),
        }
    }
    out
}

/// Makes the project's security groups match `spec.securityGroups`; writes
/// `status.securityGroups` (one entry per spec group).
/// `fresh`: the project was created in this pass, so it has no security group of ours yet
/// and the list is not read (see [`super::identity::Tenant::created`]).
pub(crate) async fn apply(
    env: &Env<'_>,
    spec: &OpenstackProjectSpec,
    project_id: &str,
    status: &mut OpenstackProjectStatus,
    fresh: bool,
) -> AreaOutcome {
    let mut out = AreaOutcome::default();
    let net = &env.cloud.network;
    let groups = spec.security_groups.as_deref().unwrap_or_default();
    let observed = if fresh {
        Ok(Vec::new())
    } else {
        observe(env, project_id).await
    };
    let observed = match observed {
        Ok(o) => o,
        Err(e) => {
            out.errors.push(e);
            return out;
        }
    };
    let marks = Marks {
        owner: &env.owner,
        adopt: spec.adopt,
        adopt_legacy: env.config.adopt_legacy,
        own_project: status.adopted == Some(false),
    };

    // Pass 1: groups.
    let steps = plan_groups(groups, &observed, project_id, &marks);
    let keep: BTreeSet<String> = steps
        .iter()
        .filter_map(|s| match s {
            GroupStep::Use { id, .. } => Some(id.clone()),
            _ => None,
        })
        .collect();
    let mut ids: BTreeMap<String, String> = BTreeMap::new();
    // Rules of groups that were just created: only Neutron's defaults.
    let mut rules_of: BTreeMap<String, Vec<SecurityGroupRule>> = observed
        .iter()
        .map(|g| (g.id.clone(), g.rules.clone()))
        .collect();
    // The groups are independent of one another: their steps run at the same time.
    let results = futures::future::join_all(
        steps
            .into_iter()
            .enumerate()
            .map(|(i, step)| run_group_step(env, i, step)),
    )
    .await;
    let mut statuses = Vec::with_capacity(groups.len());
    for (g, r) in groups.iter().zip(results) {
        out.changed |= r.changed;
        out.errors.extend(r.errors);
        if let Some((id, rules)) = &r.created {
            rules_of.insert(id.clone(), rules.clone());
        }
        if let Some(id) = &r.id {
            ids.insert(g.name.clone(), id.clone());
        }
        statuses.push(SecurityGroupStatus {
            name: g.name.clone(),
            id: r.id,
        });
    }
    status.security_groups = statuses;

    // Pass 2: rules. Deletions first (rare: a rule removed from the spec), then the missing
    // rules, one bulk create per group.
    let mut creates: Vec<(usize, SecurityGroupRuleCreate)> = Vec::new();
    for (i, g) in groups.iter().enumerate() {
        let Some(gid) = ids.get(&g.name) else {
            continue;
        };
        let (desired, errors, complete) = desired_rules(i, g, &ids);
        out.errors
            .extend(errors.into_iter().map(ReconcileError::from));
        let plan = plan_rules(
            &desired,
            rules_of.get(gid).map(Vec::as_slice).unwrap_or_default(),
            complete,
        );
        for rid in &plan.delete {
            match net.delete_security_group_rule(rid).await.optional() {
                Ok(_) => out.changed = true,
                Err(e) => out.errors.push(os(
                    format!("spec.securityGroups[{i}].rules: deleting rule {rid}"),
                    e,
                )),
            }
        }
        for mut req in plan.create {
            req.security_group_id = gid.clone();
            req.project_id = Some(project_id.to_string());
            creates.push((i, req));
        }
    }
    create_rules(env, creates, &mut out).await;

    let (rules, orphans) = plan_group_sweep(&observed, &keep, &env.owner);
    run_group_sweep(env, rules, orphans, &mut out).await;
    out
}

/// The project's `default` group that Neutron creates by itself (unmarked, named `default`):
/// the first listing of or creation in a project makes it, and nothing deletes it with the
/// Keystone project.
pub fn neutron_default_groups(observed: &[SecurityGroup], owner: &Owner) -> Vec<String> {
    observed
        .iter()
        .filter(|g| g.name == "default" && owner.classify_tags(&g.tags) == Ownership::Foreign)
        .map(|g| g.id.clone())
        .collect()
}

/// Deletes every security group of the project that carries our marks; with `own` (the spec
/// of a project this resource created, which goes too) also untagged groups with the spec's
/// names a crash left behind and, once those are gone, Neutron's own `default` group. A
/// `default` group still in use (a port outside our networks) is left rather than holding
/// the deletion up.
pub(crate) async fn remove_all(
    env: &Env<'_>,
    project_id: &str,
    own: Option<&OpenstackProjectSpec>,
) -> AreaOutcome {
    let mut out = AreaOutcome::default();
    match observe(env, project_id).await {
        Ok(observed) => {
            let strays: BTreeSet<String> = own
                .and_then(|s| s.security_groups.as_ref())
                .into_iter()
                .flatten()
                .map(|g| g.name.clone())
                .collect();
            let (rules, groups) = plan_group_removal(&observed, &env.owner, &strays);
            run_group_sweep(env, rules, groups, &mut out).await;
            if own.is_some() && out.errors.is_empty() {
                for g in neutron_default_groups(&observed, &env.owner) {
                    match env.cloud.network.delete_security_group(&g).await.optional() {
                        Ok(_) => out.changed = true,
                        Err(e) if e.is_conflict() => warn!(
                            project = project_id,
                            group = %g,
                            error = %e,
                            "Neutron's default security group of the deleted project is in use; left in place"
                        ),
                        Err(e) => out.errors.push(os(
                            format!("deleting Neutron's default security group {g} of the project"),
                            e,
                        )),
                    }
                }
            }
        }
        Err(e) => out.errors.push(e),
    }
    out
}

/// Address parsing without pulling `ipnet` into this crate: the network address and prefix
/// length of a CIDR.
mod ipnet_lite {
    use std::net::IpAddr;

    /// `(network address, prefix length)` of a CIDR, host bits cleared.
    pub fn trunc_prefix(s: &str) -> Option<(IpAddr, u8)> {
        let (addr, len) = s.split_once('/')?;
        let addr: IpAddr = addr.parse().ok()?;
        let len: u8 = len.parse().ok()?;
        match addr {
            IpAddr::V4(a) => {
                if len > 32 {
                    return None;
                }
                let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
                Some((IpAddr::V4((u32::from(a) & mask).into()), len))
            }
            IpAddr::V6(a) => {
                if len > 128 {
                    return None;
                }
                let mask = if len == 0 {
                    0
                } else {
                    u128::MAX << (128 - len)
                };
                Some((IpAddr::V6((u128::from(a) & mask).into()), len))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::project::{Direction, Protocol};

    fn owner() -> Owner {
        Owner {
            cluster: "c".into(),
            uid: "u".into(),
        }
    }

    fn rule(dir: Direction, proto: Protocol, min: Option<i64>, max: Option<i64>) -> SpecRule {
        SpecRule {
            direction: dir,
            protocol: Some(proto),
            port_range_min: min,
            port_range_max: max,
            remote_ip_prefix: Some("0.0.0.0/0".into()),
            remote_group_name: None,
            ethertype: Ethertype::IPv4,
        }
    }

    fn observed(
        id: &str,
        dir: &str,
        eth: &str,
        proto: Option<&str>,
        ports: (Option<i32>, Option<i32>),
        prefix: Option<&str>,
        rg: Option<&str>,
    ) -> SecurityGroupRule {
        SecurityGroupRule {
            id: id.into(),
            security_group_id: "g".into(),
            direction: dir.into(),
            ethertype: eth.into(),
            protocol: proto.map(str::to_string),
            port_range_min: ports.0,
            port_range_max: ports.1,
            remote_ip_prefix: prefix.map(str::to_string),
            remote_group_id: rg.map(str::to_string),
            description: String::new(),
            project_id: "p".into(),
        }
    }

    fn group(rules: Vec<SpecRule>) -> SpecGroup {
        SpecGroup {
            name: "web".into(),
            description: "d".into(),
            rules: Some(rules),
        }
    }

    #[test]
    fn converged_group_plans_nothing_and_defaults_are_kept() {
        let g = group(vec![rule(
            Direction::Ingress,
            Protocol::Tcp,
            Some(22),
            Some(22),
        )]);
        let (desired, errs, complete) = desired_rules(0, &g, &BTreeMap::new());
        assert!(errs.is_empty() && complete);
        assert_eq!(desired.len(), 3);
        let obs = vec![
            observed("e4", "egress", "IPv4", None, (None, None), None, None),
            observed("e6", "egress", "IPv6", None, (None, None), None, None),
            // Neutron may report the protocol as a number and keeps 0.0.0.0/0.
            observed(
                "ssh",
                "ingress",
                "IPv4",
                Some("6"),
                (Some(22), Some(22)),
                Some("0.0.0.0/0"),
                None,
            ),
        ];
        assert_eq!(plan_rules(&desired, &obs, true), RulePlan::default());
    }

    #[test]
    fn rules_are_a_set() {
        let g = group(vec![
            rule(Direction::Ingress, Protocol::Tcp, Some(443), Some(443)),
            rule(Direction::Ingress, Protocol::Icmp, Some(8), Some(0)),
        ]);
        let (desired, _, _) = desired_rules(0, &g, &BTreeMap::new());
        let obs = vec![
            observed("e4", "egress", "IPv4", None, (None, None), None, None),
            observed(
                "ssh",
                "ingress",
                "IPv4",
                Some("tcp"),
                (Some(22), Some(22)),
                Some("0.0.0.0/0"),
                None,
            ),
        ];
        let plan = plan_rules(&desired, &obs, true);
        assert_eq!(plan.delete, vec!["ssh".to_string()]);
        let created: Vec<(Option<&str>, Option<i32>)> = plan
            .create
            .iter()
            .map(|c| (c.protocol.as_deref(), c.port_range_min))
            .collect();
        // The deleted IPv6 default egress rule comes back: it is always desired.
        assert_eq!(
            created,
            vec![
                (Some("tcp"), Some(443)),
                (Some("icmp"), Some(8)),
                (None, None)
            ]
        );
        assert!(plan_rules(&desired, &obs, false).delete.is_empty());
    }

    #[test]
    fn any_protocol_and_prefix_normalization() {
        let mut r = rule(Direction::Egress, Protocol::Any, None, None);
        r.remote_ip_prefix = Some("10.1.2.3/16".into());
        let (desired, _, _) = desired_rules(0, &group(vec![r]), &BTreeMap::new());
        assert_eq!(desired[0].key.protocol, None);
        assert_eq!(
            desired[0].key.remote_ip_prefix.as_deref(),
            Some("10.1.0.0/16")
        );
        assert_eq!(desired[0].create.protocol, None);
        // An egress any-protocol rule to ::/0 is the IPv6 default rule.
        let mut r6 = rule(Direction::Egress, Protocol::Any, None, None);
        r6.ethertype = Ethertype::IPv6;
        r6.remote_ip_prefix = Some("::/0".into());
        let (desired, _, _) = desired_rules(0, &group(vec![r6]), &BTreeMap::new());
        assert_eq!(desired.len(), 2);
    }

    #[test]
    fn remote_group_names_resolve_or_block_deletes() {
        let mut r = rule(Direction::Ingress, Protocol::Udp, Some(5000), Some(5100));
        r.remote_ip_prefix = None;
        r.remote_group_name = Some("bastion".into());
        let g = group(vec![r]);
        let ids: BTreeMap<String, String> = [("bastion".to_string(), "b1".to_string())].into();
        let (desired, errs, complete) = desired_rules(3, &g, &ids);
        assert!(errs.is_empty() && complete);
        assert_eq!(desired[0].key.remote_group_id.as_deref(), Some("b1"));
        let (_, errs, complete) = desired_rules(3, &g, &BTreeMap::new());
        assert!(!complete);
        assert!(
            errs[0]
                .to_string()
                .contains("spec.securityGroups[3].rules[0].remoteGroupName")
        );
    }

    #[test]
    fn groups_are_found_created_or_refused() {
        let o = owner();
        let marks = Marks {
            owner: &o,
            adopt: false,
            adopt_legacy: false,
            own_project: false,
        };
        let spec = vec![
            group(vec![]),
            SpecGroup {
                name: "db".into(),
                description: String::new(),
                rules: None,
            },
            SpecGroup {
                name: "default".into(),
                description: String::new(),
                rules: None,
            },
        ];
        let obs = vec![
            SecurityGroup {
                id: "w".into(),
                name: "web".into(),
                description: "old".into(),
                tags: o.tags(),
                ..Default::default()
            },
            SecurityGroup {
                id: "def".into(),
                name: "default".into(),
                ..Default::default()
            },
            SecurityGroup {
                id: "gone".into(),
                name: "old".into(),
                tags: o.tags(),
                rules: vec![observed(
                    "x",
                    "ingress",
                    "IPv4",
                    None,
                    (None, None),
                    None,
                    Some("w"),
                )],
                ..Default::default()
            },
        ];
        let steps = plan_groups(&spec, &obs, "p", &marks);
        assert!(
            matches!(&steps[0], GroupStep::Use { id, update: Some(_), retag: None } if id == "w")
        );
        assert!(matches!(&steps[1], GroupStep::Create(c) if c.tags == o.tags()));
        assert!(matches!(
            &steps[2],
            GroupStep::Blocked(Problem::NotOwned(_))
        ));
        let keep: BTreeSet<String> = ["w".to_string()].into();
        let (rules, groups) = plan_group_sweep(&obs, &keep, &o);
        assert_eq!(rules, vec!["x".to_string()]);
        assert_eq!(groups, vec!["gone".to_string()]);
    }

    /// Deleting a project the operator created leaves nothing in Neutron: not even the
    /// `default` group Neutron made on its own when the operator first listed or created
    /// groups in the project (nothing else would ever delete it once the project is gone).
    #[tokio::test]
    async fn deleting_a_created_project_removes_neutrons_default_group() {
        use crate::context::Config;
        use crate::project::{
            Env, FederationInput, LocalLocks, cleanup_project, reconcile_project,
        };
        use openstack::fake::FakeCloud;

        let fake = FakeCloud::new();
        let cloud = fake.cloud();
        let config = Config::default();
        let locks = LocalLocks::default();
        let doc = api::manifest::documents(
            r#"
apiVersion: sunet.se/v1alpha1
kind: OpenstackProject
metadata: {name: p, namespace: demo, uid: uid-sg}
spec:
  name: p.example.com
  domain: default
  enabled: true
  securityGroups:
    - name: web
      rules:
        - {direction: ingress, protocol: tcp, portRangeMin: 22, portRangeMax: 22}
"#,
        )
        .expect("a manifest")
        .remove(0);
        let mut obj: api::OpenstackProject = serde_json::from_value(doc).expect("a project");
        obj.metadata.generation = Some(1);
        let env = Env {
            cloud: &cloud,
            config: &config,
            owner: Owner {
                cluster: config.cluster_id.clone(),
                uid: "uid-sg".into(),
            },
            locks: &locks,
        };
        let mut status = OpenstackProjectStatus::default();
        reconcile_project(&env, &obj, &mut status, FederationInput::NotRequested)
            .await
            .result
            .expect("the project converges");
        let pid = status.project_id.clone().expect("a project id");
        let in_project = async || -> Vec<String> {
            cloud
                .network
                .list_security_groups(&SecurityGroupFilter::default())
                .await
                .expect("listing")
                .into_iter()
                .filter(|g| g.project_id == pid)
                .map(|g| g.name)
                .collect()
        };
        let mut before = in_project().await;
        before.sort();
        assert_eq!(before, vec!["default".to_string(), "web".to_string()]);

        cleanup_project(&env, &obj, &mut status, FederationInput::NotRequested)
            .await
            .result
            .expect("deletion succeeds");
        assert_eq!(
            in_project().await,
            Vec::<String>::new(),
            "no security group of the deleted project is left"
        );
    }

    #[test]
    fn only_neutrons_unmarked_default_group_counts_as_neutrons() {
        let o = owner();
        let group = |id: &str, name: &str, tags: Vec<String>| SecurityGroup {
            id: id.into(),
            name: name.into(),
            tags,
            ..Default::default()
        };
        let obs = vec![
            group("d", "default", vec![]),
            // A spec group named `default` is ours, swept (or kept) as ours.
            group("mine", "default", o.tags()),
            group("other", "web", vec![]),
        ];
        assert_eq!(neutron_default_groups(&obs, &o), vec!["d".to_string()]);
    }
}
