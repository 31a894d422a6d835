//! Drift detection in O(kinds): once per period the operator reads the cloud per *cluster*
//! (one list per Neutron collection filtered by this cluster's tag, Keystone's projects by the
//! same tag, groups and role assignments once per domain, Neutron's quotas in one list), not
//! per tenant; [`drift`] compares that snapshot with what every converged OpenstackProject
//! expects, and only the projects that differ get a full pass. A converged project costs no
//! request of its own, except where an API offers nothing else: Nova's and Cinder's quotas
//! are read per project (neither service lists quotas of several projects).
//!
//! The comparison reuses the planners of the full pass ([`networks::plan_entry`],
//! [`security_groups::plan_groups`], [`identity::plan_project`], ...) on the snapshot, so
//! "converged" means exactly "a full pass would write nothing". What the snapshot does not
//! cover is repaired by the next full pass (a spec change or a drift found elsewhere in the
//! project): the membership of users in the project group, the federation mapping rule, and
//! direct user/group grants beyond their number (compared by count, see [`drift`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use api::naming::project_group_name;
use api::project::QuotaService;
use api::{OpenstackProject, OpenstackProjectSpec};
use futures::StreamExt;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use openstack::Cloud;
use openstack::model::{
    Actor, Group, NetworkFilter, Project, ProjectFilter, QuotaSet, QuotaValue, RoleAssignment,
    Router, RouterFilter, SecurityGroup, SecurityGroupFilter, SubnetFilter,
};
use tracing::{info, warn};

use super::identity::{self, GROUP_ROLE, GroupPlan, ProjectPlan, Takeover};
use super::networks::{self, Marks, Obj, Observed, RouterStep, SubnetStep};
use super::quotas;
use super::security_groups::{self, GroupStep};
use crate::context::{Config, Context};
use crate::framework::{is_resync, owner_of};
use crate::ownership::{CLUSTER_TAG_PREFIX, Owner};

/// What the cloud holds of this cluster, read once per period.
#[derive(Clone, Debug, Default)]
pub struct Inventory {
    /// Keystone projects carrying this cluster's tag, by ID.
    pub projects: BTreeMap<String, Project>,
    /// Groups of the projects' domains, by ID.
    pub groups: BTreeMap<String, Group>,
    /// Direct role assignments on the projects of those domains, by project ID.
    pub assignments: BTreeMap<String, Vec<RoleAssignment>>,
    /// Global roles, name → ID.
    pub roles: BTreeMap<String, String>,
    /// Networks, subnets, routers and security groups (with their rules) carrying this
    /// cluster's tag, and the routers' interface ports by router ID.
    pub neutron: Observed,
    /// Security groups carrying this cluster's tag.
    pub security_groups: Vec<SecurityGroup>,
    /// Quota limits (and usage where read) by service and project ID.
    pub quotas: BTreeMap<(QuotaService, String), QuotaSet>,
}

/// The tag every object of this cluster carries.
pub fn cluster_tag(cluster: &str) -> String {
    format!("{CLUSTER_TAG_PREFIX}{cluster}")
}

/// Why `obj` differs from `inv` (empty: a full pass would change nothing that the snapshot
/// covers). Pure, so every case is unit-tested.
pub fn drift(
    obj: &OpenstackProject,
    inv: &Inventory,
    owner: &Owner,
    config: &Config,
) -> Vec<String> {
    let mut out = Vec::new();
    let spec = &obj.spec;
    let Some(status) = obj.status.as_ref() else {
        return vec!["no status".into()];
    };
    let Some(pid) = status.project_id.as_deref() else {
        return vec!["no project ID recorded".into()];
    };
    let Some(project) = inv.projects.get(pid) else {
        return vec![format!(
            "Keystone project {pid} is gone or lost this cluster's tag"
        )];
    };

    // Keystone project and group.
    let adopted = status.adopted == Some(true);
    match identity::plan_project(
        spec,
        Some((project, identity::FoundBy::RecordedId)),
        &project.domain_id,
        owner,
        config,
        adopted,
    ) {
        Ok(ProjectPlan::Existing {
            update, takeover, ..
        }) if update == Default::default() && takeover == Takeover::None => {}
        Ok(_) => out.push(format!("Keystone project {pid} differs from the spec")),
        Err(e) => out.push(format!("Keystone project {pid}: {e}")),
    }
    let group_id = status.group_id.as_deref().unwrap_or_default();
    match inv.groups.get(group_id) {
        None => out.push(format!("project group {group_id:?} is gone")),
        Some(g) => match identity::plan_group(
            &spec.name,
            Some((g, identity::FoundBy::RecordedId)),
            &project.domain_id,
        ) {
            Ok(GroupPlan::Existing { update, .. }) if update == Default::default() => {}
            _ => out.push(format!(
                "project group {:?} ({group_id}) differs",
                project_group_name(&spec.name)
            )),
        },
    }
    let wanted_role_groups: BTreeSet<String> =
        identity::role_group_roles(spec).into_iter().collect();
    if wanted_role_groups != status.role_groups.keys().cloned().collect() {
        out.push("role groups differ from the bound roles".into());
    }
    for (role, gid) in &status.role_groups {
        if !inv.groups.contains_key(gid) {
            out.push(format!("role group of {role:?} ({gid}) is gone"));
        }
    }
    out.extend(assignment_drift(spec, status, pid, inv, config));

    // Quotas: only the keys the spec sets.
    if let Some(q) = &spec.quotas {
        for svc in quotas::services(q) {
            match inv.quotas.get(&(svc, pid.to_string())) {
                None => out.push(format!("{} quotas not read", svc.as_str())),
                Some(observed) => {
                    let plan = quotas::plan_service(q, svc, observed);
                    if !plan.update.is_empty() {
                        let keys: Vec<&String> = plan.update.keys().collect();
                        out.push(format!("{} quota keys differ: {keys:?}", svc.as_str()));
                    }
                }
            }
        }
    }

    // Neutron: the planners of the full pass on this project's share of the snapshot.
    let neutron = project_neutron(&inv.neutron, pid);
    let marks = Marks {
        owner,
        adopt: spec.adopt,
        adopt_legacy: config.adopt_legacy,
        own_project: status.adopted == Some(false),
    };
    let entries = spec.networks.as_deref().unwrap_or_default();
    let plans: Vec<networks::EntryPlan> = entries
        .iter()
        .enumerate()
        .map(|(i, n)| networks::plan_entry(i, n, pid, &neutron, &marks))
        .collect();
    for p in &plans {
        if !entry_converged(p) {
            out.push(format!("network {:?}: {}", p.name, entry_difference(p)));
        }
    }
    let sweep = networks::plan_sweep(&neutron, &networks::kept(&plans), owner);
    if sweep != networks::Sweep::default() {
        out.push("networks, subnets, routers or interfaces of ours the spec does not name".into());
    }

    let groups: Vec<SecurityGroup> = inv
        .security_groups
        .iter()
        .filter(|g| g.project_id == pid)
        .cloned()
        .collect();
    let spec_groups = spec.security_groups.as_deref().unwrap_or_default();
    let steps = security_groups::plan_groups(spec_groups, &groups, pid, &marks);
    let mut ids: BTreeMap<String, String> = BTreeMap::new();
    for (g, step) in spec_groups.iter().zip(&steps) {
        match step {
            GroupStep::Use {
                id,
                retag: None,
                update: None,
            } => {
                ids.insert(g.name.clone(), id.clone());
            }
            _ => out.push(format!("security group {:?} differs or is gone", g.name)),
        }
    }
    for (i, g) in spec_groups.iter().enumerate() {
        let Some(gid) = ids.get(&g.name) else {
            continue;
        };
        let (desired, _, complete) = security_groups::desired_rules(i, g, &ids);
        let rules = groups
            .iter()
            .find(|o| &o.id == gid)
            .map(|o| o.rules.as_slice())
            .unwrap_or_default();
        let plan = security_groups::plan_rules(&desired, rules, complete);
        if !plan.create.is_empty() || !plan.delete.is_empty() {
            out.push(format!(
                "security group {:?}: {} rule(s) missing, {} extra",
                g.name,
                plan.create.len(),
                plan.delete.len()
            ));
        }
    }
    let keep: BTreeSet<String> = ids.values().cloned().collect();
    let (rules, orphans) = security_groups::plan_group_sweep(&groups, &keep, owner);
    if !rules.is_empty() || !orphans.is_empty() {
        out.push("security groups of ours the spec does not name".into());
    }
    out
}

/// Direct role assignments on the project: the grants known by ID (the project group's
/// `member`, each role group's role) must be there, and the number of assignments of the
/// roles we manage must be what the bindings ask for (users and groups of bindings are
/// named, not known by ID here; a grant removed or added by hand changes the number).
fn assignment_drift(
    spec: &OpenstackProjectSpec,
    status: &api::OpenstackProjectStatus,
    pid: &str,
    inv: &Inventory,
    config: &Config,
) -> Vec<String> {
    let mut out = Vec::new();
    let managed: BTreeSet<&str> = config
        .allowed_roles
        .iter()
        .map(String::as_str)
        .chain([GROUP_ROLE])
        .filter_map(|n| inv.roles.get(n).map(String::as_str))
        .collect();
    let have: BTreeSet<(Actor, String)> = inv
        .assignments
        .get(pid)
        .into_iter()
        .flatten()
        .filter(|a| managed.contains(a.role_id.as_str()))
        .filter(|a| !super::identity::is_tenant_credential_user(status, &a.actor))
        .map(|a| (a.actor.clone(), a.role_id.clone()))
        .collect();
    let mut known: Vec<(Actor, String)> = Vec::new();
    if let (Some(gid), Some(member)) = (&status.group_id, inv.roles.get(GROUP_ROLE)) {
        known.push((Actor::Group(gid.clone()), member.clone()));
    }
    for (role, gid) in &status.role_groups {
        if let Some(rid) = inv.roles.get(role) {
            known.push((Actor::Group(gid.clone()), rid.clone()));
        }
    }
    for k in &known {
        if !have.contains(k) {
            out.push(format!("role assignment {k:?} on project {pid} is missing"));
        }
    }
    let mut named: BTreeSet<(String, String, bool, String)> = BTreeSet::new();
    for b in spec.role_bindings.iter().flatten() {
        if b.role != GROUP_ROLE {
            let domain = b.user_domain.clone().unwrap_or_else(|| spec.domain.clone());
            for u in b.users.iter().flatten() {
                if !status.pending_users.contains(u) {
                    named.insert((b.role.clone(), domain.clone(), true, u.clone()));
                }
            }
        }
        let domain = b
            .group_domain
            .clone()
            .unwrap_or_else(|| spec.domain.clone());
        for g in b.groups.iter().flatten() {
            named.insert((b.role.clone(), domain.clone(), false, g.clone()));
        }
    }
    let known: BTreeSet<(Actor, String)> = known.into_iter().collect();
    let want = known.len() + named.len();
    if have.len() != want {
        out.push(format!(
            "{} assignment(s) of managed roles on project {pid}, the bindings ask for {want}",
            have.len()
        ));
    }
    out
}

/// The share of the Neutron snapshot that belongs to project `pid`.
fn project_neutron(all: &Observed, pid: &str) -> Observed {
    let routers: Vec<Router> = all
        .routers
        .iter()
        .filter(|r| r.project_id == pid)
        .cloned()
        .collect();
    let interfaces = routers
        .iter()
        .filter_map(|r| all.interfaces.get(&r.id).map(|p| (r.id.clone(), p.clone())))
        .collect();
    Observed {
        networks: all
            .networks
            .iter()
            .filter(|n| n.project_id == pid)
            .cloned()
            .collect(),
        subnets: all
            .subnets
            .iter()
            .filter(|s| s.project_id == pid)
            .cloned()
            .collect(),
        routers,
        interfaces,
        external: all.external.clone(),
    }
}

fn entry_converged(p: &networks::EntryPlan) -> bool {
    let network = matches!(p.network, Some(Obj::Use { retag: None, .. }));
    let subnet = matches!(
        p.subnet,
        Some(SubnetStep::Use {
            retag: None,
            update: None,
            ..
        })
    );
    let router = matches!(
        p.router,
        RouterStep::Absent
            | RouterStep::Use {
                retag: None,
                update: None,
                ..
            }
    );
    p.errors.is_empty() && network && subnet && router && !p.attach
}

fn entry_difference(p: &networks::EntryPlan) -> &'static str {
    if !p.errors.is_empty() {
        "blocked"
    } else if !matches!(p.network, Some(Obj::Use { retag: None, .. })) {
        "network missing or unmarked"
    } else if !matches!(p.subnet, Some(SubnetStep::Use { .. })) {
        "subnet missing or replaced"
    } else if p.attach {
        "router interface missing"
    } else {
        "subnet or router differs"
    }
}

/// Reads the snapshot the converged `projects` are compared with: a fixed number of lists per
/// cluster and per domain, plus Nova's and Cinder's quotas per project that sets keys there.
pub async fn snapshot(
    cloud: &Cloud,
    cluster: &str,
    projects: &[Arc<OpenstackProject>],
) -> Result<Inventory, openstack::Error> {
    let tag = vec![cluster_tag(cluster)];
    let net = &cloud.network;
    let need_external = projects.iter().any(|p| {
        p.spec.networks.iter().flatten().any(|n| {
            n.router
                .as_ref()
                .is_some_and(|r| r.external_network.is_some())
        })
    });
    let pf = ProjectFilter {
        tags: tag.clone(),
        ..Default::default()
    };
    let nf = NetworkFilter {
        tags: tag.clone(),
        ..Default::default()
    };
    let sf = SubnetFilter {
        tags: tag.clone(),
        ..Default::default()
    };
    let rf = RouterFilter {
        tags: tag.clone(),
        ..Default::default()
    };
    let gf = SecurityGroupFilter {
        tags: tag.clone(),
        ..Default::default()
    };
    let ef = NetworkFilter {
        external: Some(true),
        ..Default::default()
    };
    let (ks_projects, roles, networks, subnets, routers, sgs, external) = futures::try_join!(
        cloud.identity.list_projects(&pf),
        cloud.identity.list_roles(),
        net.list_networks(&nf),
        net.list_subnets(&sf),
        net.list_routers(&rf),
        net.list_security_groups(&gf),
        async {
            if !need_external {
                return Ok(Vec::new());
            }
            net.list_networks(&ef).await
        },
    )?;
    let router_ids: Vec<String> = routers.iter().map(|r| r.id.clone()).collect();
    let domains: BTreeSet<String> = ks_projects.iter().map(|p| p.domain_id.clone()).collect();
    let identity = &cloud.identity;
    let per_domain = futures::future::try_join_all(domains.iter().map(|d| async move {
        futures::try_join!(
            identity.list_groups(Some(d)),
            identity.list_domain_role_assignments(d)
        )
    }));
    let ours: BTreeSet<String> = ks_projects.iter().map(|p| p.id.clone()).collect();
    let compute = quota_projects(projects, &ours, QuotaService::Compute);
    let storage = quota_projects(projects, &ours, QuotaService::Storage);
    let network = quota_projects(projects, &ours, QuotaService::Network);
    // The per-project quota reads are the only requests that grow with the tenants; the
    // client's limiter bounds them like any other request.
    let reads: Vec<_> = compute
        .into_iter()
        .map(|p| read_quota(cloud, QuotaService::Compute, p))
        .chain(
            storage
                .into_iter()
                .map(|p| read_quota(cloud, QuotaService::Storage, p)),
        )
        .collect();
    let per_project = futures::stream::iter(reads)
        .buffer_unordered(10)
        .collect::<Vec<_>>();
    let (per_domain, interfaces, network_limits, per_project) = futures::join!(
        per_domain,
        net.list_routers_interfaces(&router_ids),
        net.list_network_quota_limits(&network),
        per_project
    );
    let mut inv = Inventory {
        projects: ks_projects.into_iter().map(|p| (p.id.clone(), p)).collect(),
        roles: roles
            .into_iter()
            .filter(|r| r.domain_id.is_none())
            .map(|r| (r.name, r.id))
            .collect(),
        neutron: Observed {
            networks,
            subnets,
            routers,
            interfaces: interfaces?,
            external,
        },
        security_groups: sgs,
        ..Default::default()
    };
    for (groups, assignments) in per_domain? {
        inv.groups
            .extend(groups.into_iter().map(|g| (g.id.clone(), g)));
        for a in assignments {
            inv.assignments
                .entry(a.project_id.clone())
                .or_default()
                .push(a);
        }
    }
    for (p, limits) in network_limits? {
        let set = limits
            .into_iter()
            .map(|(k, limit)| (k, QuotaValue { limit, in_use: 0 }))
            .collect();
        inv.quotas.insert((QuotaService::Network, p), set);
    }
    for r in per_project {
        let (key, q) = r?;
        inv.quotas.insert(key, q);
    }
    Ok(inv)
}

/// The recorded Keystone IDs of the projects whose spec sets quota keys of `svc` (and that
/// the snapshot found).
fn quota_projects(
    projects: &[Arc<OpenstackProject>],
    ours: &BTreeSet<String>,
    svc: QuotaService,
) -> Vec<String> {
    projects
        .iter()
        .filter(|p| {
            p.spec
                .quotas
                .as_ref()
                .is_some_and(|q| quotas::services(q).contains(&svc))
        })
        .filter_map(|p| p.status.as_ref()?.project_id.clone())
        .filter(|id| ours.contains(id))
        .collect()
}

async fn read_quota(
    cloud: &Cloud,
    svc: QuotaService,
    project: String,
) -> Result<((QuotaService, String), QuotaSet), openstack::Error> {
    let q = match svc {
        QuotaService::Compute => cloud.compute.get_compute_quota(&project).await?,
        _ => cloud.block_storage.get_volume_quota(&project).await?,
    };
    Ok(((svc, project), q))
}

/// One drift check: the converged projects in `store` compared with one snapshot per cloud
/// (the operator's own and each `OpenstackCloud` some of them name); returns the projects to
/// reconcile. A cloud that cannot be read sends its projects to a full pass, which reports
/// why on each of them; the other clouds are checked as usual.
pub async fn check(
    ctx: &Context,
    store: &Store<OpenstackProject>,
) -> Result<Vec<ObjectRef<OpenstackProject>>, openstack::Error> {
    let mut by_cloud: BTreeMap<Option<String>, Vec<Arc<OpenstackProject>>> = BTreeMap::new();
    for p in store.state() {
        if is_resync(p.as_ref()) {
            let cloud = p.spec.cloud_ref.as_ref().map(|c| c.name.clone());
            by_cloud.entry(cloud).or_default().push(p);
        }
    }
    let mut out = Vec::new();
    let mut failed = None;
    for (cloud, converged) in by_cloud {
        let cctx = match &cloud {
            None => ctx.clone(),
            Some(name) => match ctx.clouds.connect_by_name(&ctx.client, name).await {
                Ok(c) => ctx.in_cloud(Some(c)),
                Err(e) => {
                    warn!(cloud = %name, error = %e, "drift check: cloud unavailable; its projects get a full pass");
                    out.extend(converged.iter().map(|p| ObjectRef::from_obj(p.as_ref())));
                    continue;
                }
            },
        };
        match check_cloud(&cctx, &converged).await {
            Ok(refs) => out.extend(refs),
            Err(e) => {
                warn!(cloud = cloud.as_deref().unwrap_or("(default)"), error = %e, "drift check of a cloud failed");
                failed = Some(e);
            }
        }
    }
    match failed {
        Some(e) if out.is_empty() => Err(e),
        _ => Ok(out),
    }
}

/// The drift check of the converged projects of one cloud.
async fn check_cloud(
    ctx: &Context,
    converged: &[Arc<OpenstackProject>],
) -> Result<Vec<ObjectRef<OpenstackProject>>, openstack::Error> {
    let inv = snapshot(&ctx.cloud, &ctx.config.cluster_id, converged).await?;
    let mut out = Vec::new();
    for p in converged {
        let reasons = drift(p, &inv, &owner_of(p.as_ref(), ctx), &ctx.config);
        if !reasons.is_empty() {
            info!(
                namespace = %p.namespace().unwrap_or_default(),
                object = %p.name_any(),
                cloud = ctx.cloud_name.as_deref().unwrap_or("(default)"),
                reasons = %reasons.join("; "),
                "drift found; reconciling"
            );
            out.push(ObjectRef::from_obj(p.as_ref()));
        }
    }
    info!(
        cloud = ctx.cloud_name.as_deref().unwrap_or("(default)"),
        checked = converged.len(),
        drifted = out.len(),
        "drift check done"
    );
    Ok(out)
}

/// Adds the periodic drift check to the project Controller: every `--resync-seconds` one
/// snapshot, and a pass only for the projects that differ. Converged projects are then not
/// requeued by the framework (see [`Context::is_drift_checked`]).
pub fn watch(
    ctx: Arc<Context>,
) -> impl FnOnce(Controller<OpenstackProject>) -> Controller<OpenstackProject> {
    move |controller| {
        let store = controller.store();
        ctx.mark_drift_checked(&OpenstackProject::kind(&()));
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let period = ctx.config.resync.max(Duration::from_secs(1));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                if tx.is_closed() {
                    return;
                }
                match check(&ctx, &store).await {
                    Ok(refs) => {
                        for r in refs {
                            if tx.unbounded_send(r).is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) => warn!(error = %e, "drift check failed; trying again next period"),
                }
            }
        });
        controller.reconcile_on(rx)
    }
}
