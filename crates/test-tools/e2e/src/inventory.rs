//! Everything in the cloud that belongs to one operator cluster, for asserting "no duplicates,
//! no leaks" after faults.
//!
//! [`Inventory::collect`] finds, by the cluster's ownership mark (tag
//! `openstack-operator.cluster=<id>`, flavor extra spec `openstack-operator:owner=<id>/...`):
//! Keystone domains and projects, the user groups of those projects (groups carry no tags: they
//! are recognised by the description the operator gives them), the role assignments on those
//! projects, Neutron networks, subnets, routers with their interfaces, security groups with
//! their rules, and Nova flavors. Objects **without** the mark that sit inside one of our
//! projects (a network created but killed before it was tagged, Neutron's own `default`
//! security group) are collected too, flagged unmarked: they are what a crash leaves behind.
//!
//! What the mark alone cannot find is named by a [`Scope`]: projects that are already deleted
//! (their Neutron objects and groups outlive them), images (the port lists Glance images by
//! name only), flavors or domains that may have lost or never received their mark.
//!
//! Everything here is read-only.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use anyhow::Context as _;
use api::naming::{GROUP_DESCRIPTION_PREFIX, project_group_description};
use futures::{StreamExt as _, stream};
use openstack::model::{
    Actor, NetworkFilter, Project, ProjectFilter, RoleAssignment, Router, RouterFilter, RouterPort,
    SecurityGroupFilter, SecurityGroupRule, SubnetFilter,
};
use openstack::{Cloud, OptionalExt as _};

use crate::env::{CLUSTER_TAG_PREFIX, FLAVOR_OWNER_SPEC};

/// Calls per kind in flight at once while collecting (one per project or router otherwise
/// makes a large inventory slow on a busy cloud).
const PARALLEL: usize = 8;

/// Kind names, in the order the table prints them (parents before children).
pub const KINDS: [&str; 12] = [
    DOMAIN,
    PROJECT,
    GROUP,
    ROLE_ASSIGNMENT,
    NETWORK,
    SUBNET,
    ROUTER,
    ROUTER_INTERFACE,
    SECURITY_GROUP,
    SECURITY_GROUP_RULE,
    FLAVOR,
    IMAGE,
];
/// Keystone domain (parent: none).
pub const DOMAIN: &str = "domain";
/// Keystone project (parent: its domain).
pub const PROJECT: &str = "project";
/// Keystone group of a project (parent: its domain).
pub const GROUP: &str = "group";
/// Role assignment on a project, named `<user|group>:<name> <role>` (parent: the project).
pub const ROLE_ASSIGNMENT: &str = "role_assignment";
/// Neutron network (parent: its project).
pub const NETWORK: &str = "network";
/// Neutron subnet (parent: its network).
pub const SUBNET: &str = "subnet";
/// Neutron router (parent: its project).
pub const ROUTER: &str = "router";
/// Interface port of a router, named after its subnet (parent: the router).
pub const ROUTER_INTERFACE: &str = "router_interface";
/// Neutron security group (parent: its project).
pub const SECURITY_GROUP: &str = "security_group";
/// Rule of a security group, named by what it allows (parent: the group).
pub const SECURITY_GROUP_RULE: &str = "security_group_rule";
/// Nova flavor (parent: none).
pub const FLAVOR: &str = "flavor";
/// Glance image (parent: its owner project).
pub const IMAGE: &str = "image";

/// One object found in the cloud.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Item {
    /// One of [`KINDS`].
    pub kind: &'static str,
    /// Name (for assignments, interfaces and rules: a description, see the kind constants).
    pub name: String,
    /// The service's ID.
    pub id: String,
    /// The ID of the object it lives in (project, network, router, group, domain); empty for
    /// top-level objects.
    pub parent: String,
    /// Whether it carries our mark itself (or, for what cannot carry one — groups,
    /// assignments, interfaces, rules — whether what it belongs to is ours).
    pub marked: bool,
}

impl Item {
    /// An item; `marked` = carries our mark.
    pub fn new(
        kind: &'static str,
        name: impl Into<String>,
        id: impl Into<String>,
        parent: impl Into<String>,
        marked: bool,
    ) -> Self {
        Item {
            kind,
            name: name.into(),
            id: id.into(),
            parent: parent.into(),
            marked,
        }
    }
}

/// Same kind, same name, same parent, more than once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Duplicate {
    /// Kind.
    pub kind: &'static str,
    /// Name shared by the copies.
    pub name: String,
    /// Parent shared by the copies.
    pub parent: String,
    /// IDs of the copies.
    pub ids: Vec<String>,
}

impl fmt::Display for Duplicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:?} in {} exists {} times: {}",
            self.kind,
            self.name,
            if self.parent.is_empty() {
                "(top level)"
            } else {
                &self.parent
            },
            self.ids.len(),
            self.ids.join(", ")
        )
    }
}

/// What the ownership mark alone cannot find; see the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    /// Keystone project IDs to look into even when the project is gone or unmarked (e.g.
    /// every `status.projectId` the test saw): the project itself if it still exists, and
    /// every Neutron object and role assignment in it.
    pub project_ids: Vec<String>,
    /// Project names (`spec.name`): their groups are found by description even when the
    /// project is gone.
    pub project_names: Vec<String>,
    /// Domain names looked up even without our mark.
    pub domain_names: Vec<String>,
    /// Flavor names looked up even without our mark.
    pub flavor_names: Vec<String>,
    /// Image names looked up (Glance images are found by name only; marked or not).
    pub image_names: Vec<String>,
}

impl Scope {
    /// An empty scope: only what carries the mark.
    pub fn new() -> Self {
        Scope::default()
    }

    /// Adds project IDs.
    pub fn project_ids<S: ToString>(mut self, ids: impl IntoIterator<Item = S>) -> Self {
        self.project_ids
            .extend(ids.into_iter().map(|s| s.to_string()));
        self
    }

    /// Adds project names (`spec.name`).
    pub fn project_names<S: ToString>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.project_names
            .extend(names.into_iter().map(|s| s.to_string()));
        self
    }

    /// Adds domain names.
    pub fn domain_names<S: ToString>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.domain_names
            .extend(names.into_iter().map(|s| s.to_string()));
        self
    }

    /// Adds flavor names.
    pub fn flavor_names<S: ToString>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.flavor_names
            .extend(names.into_iter().map(|s| s.to_string()));
        self
    }

    /// Adds image names.
    pub fn image_names<S: ToString>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.image_names
            .extend(names.into_iter().map(|s| s.to_string()));
        self
    }
}

/// Everything of one cluster in the cloud at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inventory {
    /// The cluster id whose mark was looked for.
    pub cluster_id: String,
    /// Every object found, sorted by kind order, parent, name, id.
    pub items: Vec<Item>,
}

fn kind_rank(kind: &str) -> usize {
    KINDS.iter().position(|k| *k == kind).unwrap_or(KINDS.len())
}

/// How a rule reads in the table: `ingress IPv4 tcp 22-22 from 0.0.0.0/0`.
pub fn rule_name(r: &SecurityGroupRule) -> String {
    let ports = match (r.port_range_min, r.port_range_max) {
        (None, None) => String::new(),
        (Some(a), Some(b)) => format!(" {a}-{b}"),
        (Some(a), None) => format!(" {a}-"),
        (None, Some(b)) => format!(" -{b}"),
    };
    let remote = match (&r.remote_ip_prefix, &r.remote_group_id) {
        (Some(p), _) => format!(
            " {} {p}",
            if r.direction == "egress" {
                "to"
            } else {
                "from"
            }
        ),
        (None, Some(g)) => format!(" group {g}"),
        (None, None) => String::new(),
    };
    format!(
        "{} {} {}{ports}{remote}",
        r.direction,
        r.ethertype,
        r.protocol.as_deref().unwrap_or("any")
    )
}

impl Inventory {
    /// An inventory of given items (sorted; for tests of the comparisons).
    pub fn from_items(cluster_id: &str, mut items: Vec<Item>) -> Self {
        items.sort_by(|a, b| {
            (kind_rank(a.kind), &a.parent, &a.name, &a.id).cmp(&(
                kind_rank(b.kind),
                &b.parent,
                &b.name,
                &b.id,
            ))
        });
        Inventory {
            cluster_id: cluster_id.to_string(),
            items,
        }
    }

    /// Everything carrying `cluster_id`'s mark (see the module docs).
    pub async fn collect(cloud: &Cloud, cluster_id: &str) -> anyhow::Result<Inventory> {
        Self::collect_scoped(cloud, cluster_id, &Scope::default()).await
    }

    /// Everything carrying the mark, plus what `scope` names.
    pub async fn collect_scoped(
        cloud: &Cloud,
        cluster_id: &str,
        scope: &Scope,
    ) -> anyhow::Result<Inventory> {
        let mark = format!("{CLUSTER_TAG_PREFIX}{cluster_id}");
        let marked = |tags: &[String]| tags.contains(&mark);
        let mut items: Vec<Item> = Vec::new();
        let id = &cloud.identity;
        let net = &cloud.network;

        // Keystone domains.
        let domains = id
            .list_domains()
            .await
            .context("listing Keystone domains")?;
        for d in &domains {
            if marked(&d.tags) || scope.domain_names.contains(&d.name) {
                items.push(Item::new(DOMAIN, &d.name, &d.id, "", marked(&d.tags)));
            }
        }

        // Keystone projects: every project is listed and filtered here, so a tag filter the
        // server might read differently cannot hide one.
        let projects = id
            .list_projects(&ProjectFilter::default())
            .await
            .context("listing Keystone projects")?;
        let mut ours: BTreeMap<String, (String, String)> = BTreeMap::new();
        for p in &projects {
            if marked(&p.tags) || scope.project_ids.contains(&p.id) {
                items.push(Item::new(
                    PROJECT,
                    &p.name,
                    &p.id,
                    &p.domain_id,
                    marked(&p.tags),
                ));
                ours.insert(p.id.clone(), (p.name.clone(), p.domain_id.clone()));
            }
        }
        // Listed without a domain filter, a project may still be missed (domain-scoped
        // listings); ask for the scope's directly.
        let missing: Vec<&String> = scope
            .project_ids
            .iter()
            .filter(|pid| !ours.contains_key(*pid))
            .collect();
        let fetched: Vec<anyhow::Result<Option<Project>>> = stream::iter(missing)
            .map(|pid| async move {
                id.get_project(pid)
                    .await
                    .optional()
                    .with_context(|| format!("reading Keystone project {pid}"))
            })
            .buffered(PARALLEL)
            .collect()
            .await;
        for p in fetched {
            if let Some(p) = p? {
                items.push(Item::new(
                    PROJECT,
                    &p.name,
                    &p.id,
                    &p.domain_id,
                    marked(&p.tags),
                ));
                ours.insert(p.id.clone(), (p.name.clone(), p.domain_id.clone()));
            }
        }
        // Project IDs whose contents we look at: ours, and the scope's even when gone.
        let scoped: BTreeSet<String> = ours
            .keys()
            .cloned()
            .chain(scope.project_ids.iter().cloned())
            .collect();

        // Groups: the operator's description for one of our project names, in that project's
        // domain (or, for names from the scope, in any domain).
        let groups = id
            .list_groups(None)
            .await
            .context("listing Keystone groups")?;
        let by_project: BTreeSet<(String, String)> = ours
            .values()
            .map(|(name, domain)| (domain.clone(), project_group_description(name)))
            .collect();
        let scope_descriptions: BTreeSet<String> = scope
            .project_names
            .iter()
            .map(|n| project_group_description(n))
            .collect();
        let mut group_names: BTreeMap<String, String> = BTreeMap::new();
        for g in groups
            .iter()
            .filter(|g| g.description.starts_with(GROUP_DESCRIPTION_PREFIX))
        {
            if by_project.contains(&(g.domain_id.clone(), g.description.clone()))
                || scope_descriptions.contains(&g.description)
            {
                items.push(Item::new(GROUP, &g.name, &g.id, &g.domain_id, true));
                group_names.insert(g.id.clone(), g.name.clone());
            }
        }

        // Role assignments on our projects (Keystone drops them with the project).
        if !ours.is_empty() {
            let roles: BTreeMap<String, String> = id
                .list_roles()
                .await
                .context("listing Keystone roles")?
                .into_iter()
                .map(|r| (r.id, r.name))
                .collect();
            let mut users: BTreeMap<String, String> = BTreeMap::new();
            let per_project: Vec<anyhow::Result<(String, Option<Vec<RoleAssignment>>)>> =
                stream::iter(ours.keys().cloned())
                    .map(|pid| async move {
                        let a = id
                            .list_project_role_assignments(&pid)
                            .await
                            .optional()
                            .with_context(|| {
                                format!("listing role assignments on project {pid}")
                            })?;
                        Ok((pid, a))
                    })
                    .buffered(PARALLEL)
                    .collect()
                    .await;
            for r in per_project {
                let (pid, Some(assignments)) = r? else {
                    continue;
                };
                for a in assignments {
                    let who = match &a.actor {
                        Actor::Group(g) => format!(
                            "group:{}",
                            group_names.get(g).cloned().unwrap_or_else(|| g.clone())
                        ),
                        Actor::User(u) => {
                            if !users.contains_key(u) {
                                let name = id
                                    .get_user(u)
                                    .await
                                    .optional()
                                    .with_context(|| format!("reading Keystone user {u}"))?
                                    .map_or_else(|| u.clone(), |x| x.name);
                                users.insert(u.clone(), name);
                            }
                            format!("user:{}", users.get(u).cloned().unwrap_or_default())
                        }
                    };
                    let role = a
                        .role_name
                        .clone()
                        .or_else(|| roles.get(&a.role_id).cloned())
                        .unwrap_or_else(|| a.role_id.clone());
                    let actor_id = match &a.actor {
                        Actor::Group(g) | Actor::User(g) => g.clone(),
                    };
                    items.push(Item::new(
                        ROLE_ASSIGNMENT,
                        format!("{who} {role}"),
                        format!("{actor_id}/{}", a.role_id),
                        &pid,
                        true,
                    ));
                }
            }
        }

        // Neutron: everything listed once and filtered here (a project filter on security
        // groups would make Neutron create the project's `default` group).
        let in_scope = |project_id: &str| scoped.contains(project_id);
        let networks = net
            .list_networks(&NetworkFilter::default())
            .await
            .context("listing Neutron networks")?;
        let mut network_ids: BTreeSet<String> = BTreeSet::new();
        for n in &networks {
            if marked(&n.tags) || in_scope(&n.project_id) {
                items.push(Item::new(
                    NETWORK,
                    &n.name,
                    &n.id,
                    &n.project_id,
                    marked(&n.tags),
                ));
                network_ids.insert(n.id.clone());
            }
        }
        let subnets = net
            .list_subnets(&SubnetFilter::default())
            .await
            .context("listing Neutron subnets")?;
        let mut subnet_names: BTreeMap<String, String> = BTreeMap::new();
        for s in &subnets {
            if marked(&s.tags) || in_scope(&s.project_id) || network_ids.contains(&s.network_id) {
                items.push(Item::new(
                    SUBNET,
                    &s.name,
                    &s.id,
                    &s.network_id,
                    marked(&s.tags),
                ));
            }
            subnet_names.insert(s.id.clone(), s.name.clone());
        }
        let routers = net
            .list_routers(&RouterFilter::default())
            .await
            .context("listing Neutron routers")?;
        let routers: Vec<&Router> = routers
            .iter()
            .filter(|r| marked(&r.tags) || in_scope(&r.project_id))
            .collect();
        let interfaces: Vec<anyhow::Result<Option<Vec<RouterPort>>>> = stream::iter(&routers)
            .map(|r| async move {
                net.list_router_interfaces(&r.id)
                    .await
                    .optional()
                    .with_context(|| format!("listing the interfaces of router {}", r.id))
            })
            .buffered(PARALLEL)
            .collect()
            .await;
        for (r, ports) in routers.iter().zip(interfaces) {
            items.push(Item::new(
                ROUTER,
                &r.name,
                &r.id,
                &r.project_id,
                marked(&r.tags),
            ));
            let Some(ports) = ports? else {
                continue;
            };
            for p in ports {
                let subnets: Vec<String> = p
                    .fixed_ips
                    .iter()
                    .filter_map(|f| f.subnet_id.as_ref())
                    .map(|s| subnet_names.get(s).cloned().unwrap_or_else(|| s.clone()))
                    .collect();
                items.push(Item::new(
                    ROUTER_INTERFACE,
                    subnets.join(","),
                    &p.port_id,
                    &r.id,
                    marked(&r.tags),
                ));
            }
        }
        let groups = net
            .list_security_groups(&SecurityGroupFilter::default())
            .await
            .context("listing Neutron security groups")?;
        for g in groups
            .iter()
            .filter(|g| marked(&g.tags) || in_scope(&g.project_id))
        {
            items.push(Item::new(
                SECURITY_GROUP,
                &g.name,
                &g.id,
                &g.project_id,
                marked(&g.tags),
            ));
            for r in &g.rules {
                items.push(Item::new(
                    SECURITY_GROUP_RULE,
                    rule_name(r),
                    &r.id,
                    &g.id,
                    marked(&g.tags),
                ));
            }
        }

        // Nova flavors: the owner extra spec, or a scope name.
        let prefix = format!("{cluster_id}/");
        let flavors = cloud
            .compute
            .list_flavors()
            .await
            .context("listing Nova flavors")?;
        for f in &flavors {
            let ours = f
                .extra_specs
                .get(FLAVOR_OWNER_SPEC)
                .is_some_and(|m| m.starts_with(&prefix));
            if ours || scope.flavor_names.contains(&f.name) {
                items.push(Item::new(FLAVOR, &f.name, &f.id, "", ours));
            }
        }

        // Glance images, by name.
        for name in &scope.image_names {
            for i in cloud
                .image
                .list_images_by_name(name)
                .await
                .with_context(|| format!("listing Glance images named {name:?}"))?
            {
                items.push(Item::new(
                    IMAGE,
                    &i.name,
                    &i.id,
                    i.owner.clone().unwrap_or_default(),
                    marked(&i.tags),
                ));
            }
        }

        Ok(Inventory::from_items(cluster_id, items))
    }

    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Items of one kind.
    pub fn of_kind<'a, 'k>(
        &'a self,
        kind: &'k str,
    ) -> impl Iterator<Item = &'a Item> + use<'a, 'k> {
        self.items.iter().filter(move |i| i.kind == kind)
    }

    /// Number of items per kind (kinds with none are absent).
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        let mut out = BTreeMap::new();
        for i in &self.items {
            *out.entry(i.kind).or_insert(0) += 1;
        }
        out
    }

    /// Number of items of one kind.
    pub fn count(&self, kind: &str) -> usize {
        self.of_kind(kind).count()
    }

    /// Names of one kind, sorted.
    pub fn names(&self, kind: &str) -> Vec<String> {
        let mut v: Vec<String> = self.of_kind(kind).map(|i| i.name.clone()).collect();
        v.sort();
        v
    }

    /// IDs of one kind.
    pub fn ids(&self, kind: &str) -> BTreeSet<String> {
        self.of_kind(kind).map(|i| i.id.clone()).collect()
    }

    /// The item of this kind with this ID.
    pub fn get(&self, kind: &str, id: &str) -> Option<&Item> {
        self.of_kind(kind).find(|i| i.id == id)
    }

    /// Items without the mark (inside our projects, or named by the scope).
    pub fn unmarked(&self) -> Vec<&Item> {
        self.items.iter().filter(|i| !i.marked).collect()
    }

    /// Objects of the same kind with the same name in the same parent, marked or not.
    pub fn duplicates(&self) -> Vec<Duplicate> {
        let mut groups: BTreeMap<(usize, &str, &str, &str), Vec<String>> = BTreeMap::new();
        for i in &self.items {
            groups
                .entry((kind_rank(i.kind), i.kind, &i.parent, &i.name))
                .or_default()
                .push(i.id.clone());
        }
        groups
            .into_iter()
            .filter(|(_, ids)| ids.len() > 1)
            .map(|((_, kind, parent, name), ids)| Duplicate {
                kind: KINDS
                    .iter()
                    .copied()
                    .find(|k| *k == kind)
                    .unwrap_or("unknown"),
                name: name.to_string(),
                parent: parent.to_string(),
                ids,
            })
            .collect()
    }

    /// Differences between the counts and `expected` (kind, count); a kind not listed is
    /// expected to have none. Empty = equal.
    pub fn count_mismatches(&self, expected: &[(&str, usize)]) -> Vec<String> {
        let have = self.counts();
        let want: BTreeMap<&str, usize> = expected.iter().copied().collect();
        let kinds: BTreeSet<&str> = have.keys().copied().chain(want.keys().copied()).collect();
        let mut out: Vec<(usize, String)> = kinds
            .into_iter()
            .filter_map(|k| {
                let (h, w) = (
                    have.get(k).copied().unwrap_or(0),
                    want.get(k).copied().unwrap_or(0),
                );
                (h != w).then(|| (kind_rank(k), format!("{k}: {h} found, {w} expected")))
            })
            .collect();
        out.sort();
        out.into_iter().map(|(_, m)| m).collect()
    }

    /// Ok when the counts are exactly `expected` (kinds not listed: none), nothing is
    /// unmarked and nothing is duplicated; otherwise an error with the table.
    pub fn check_counts(&self, expected: &[(&str, usize)]) -> anyhow::Result<()> {
        let mut problems = self.count_mismatches(expected);
        problems.extend(self.unmarked().iter().map(|i| {
            format!(
                "unmarked {} {:?} ({}) in {}",
                i.kind, i.name, i.id, i.parent
            )
        }));
        problems.extend(self.duplicates().iter().map(|d| format!("duplicate: {d}")));
        if problems.is_empty() {
            return Ok(());
        }
        anyhow::bail!(
            "the inventory of cluster {} is not as expected:\n  {}\n{self}",
            self.cluster_id,
            problems.join("\n  ")
        )
    }

    /// Panics (with the table) unless [`Inventory::check_counts`] holds.
    pub fn assert_counts(&self, expected: &[(&str, usize)]) {
        if let Err(e) = self.check_counts(expected) {
            panic!("{e:#}");
        }
    }

    /// Ok when nothing was found; otherwise an error with the table.
    pub fn check_empty(&self) -> anyhow::Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        anyhow::bail!(
            "objects of cluster {} are left in the cloud:\n{self}",
            self.cluster_id
        )
    }

    /// Ok when nothing is duplicated; otherwise an error with the duplicates and the table.
    pub fn check_no_duplicates(&self) -> anyhow::Result<()> {
        let d = self.duplicates();
        if d.is_empty() {
            return Ok(());
        }
        let lines: Vec<String> = d.iter().map(ToString::to_string).collect();
        anyhow::bail!(
            "duplicate objects of cluster {}:\n  {}\n{self}",
            self.cluster_id,
            lines.join("\n  ")
        )
    }
}

impl fmt::Display for Inventory {
    /// A table: counts per kind, then one line per object (`*` = without our mark).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let counts: Vec<String> = self
            .counts()
            .into_iter()
            .map(|(k, n)| (kind_rank(k), format!("{k}={n}")))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .map(|(_, s)| s)
            .collect();
        writeln!(
            f,
            "inventory of cluster {}: {} objects ({})",
            self.cluster_id,
            self.items.len(),
            if counts.is_empty() {
                "none".to_string()
            } else {
                counts.join(", ")
            }
        )?;
        if self.items.is_empty() {
            return Ok(());
        }
        let w_kind = self.items.iter().map(|i| i.kind.len()).max().unwrap_or(0);
        let w_name = self
            .items
            .iter()
            .map(|i| i.name.chars().count())
            .max()
            .unwrap_or(0)
            .clamp(4, 60);
        let w_id = self.items.iter().map(|i| i.id.len()).max().unwrap_or(0);
        writeln!(
            f,
            "  {:w_kind$}  {:w_name$}  {:w_id$}  PARENT",
            "KIND", "NAME", "ID"
        )?;
        for i in &self.items {
            writeln!(
                f,
                "{} {:w_kind$}  {:w_name$}  {:w_id$}  {}",
                if i.marked { ' ' } else { '*' },
                i.kind,
                i.name,
                i.id,
                i.parent
            )?;
        }
        if self.items.iter().any(|i| !i.marked) {
            writeln!(f, "  (* = without this cluster's mark)")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv(items: Vec<Item>) -> Inventory {
        Inventory::from_items("c1", items)
    }

    #[test]
    fn duplicates_need_same_kind_name_and_parent() {
        let i = inv(vec![
            Item::new(NETWORK, "internal", "n1", "p1", true),
            Item::new(NETWORK, "internal", "n2", "p1", false),
            // Same name in another project: not a duplicate.
            Item::new(NETWORK, "internal", "n3", "p2", true),
            // Same name and parent, other kind: not a duplicate.
            Item::new(ROUTER, "internal", "r1", "p1", true),
            Item::new(SUBNET, "internal-subnet", "s1", "n1", true),
            Item::new(SUBNET, "internal-subnet", "s2", "n1", true),
            Item::new(SUBNET, "internal-subnet", "s3", "n1", true),
        ]);
        let d = i.duplicates();
        assert_eq!(
            d,
            vec![
                Duplicate {
                    kind: NETWORK,
                    name: "internal".into(),
                    parent: "p1".into(),
                    ids: vec!["n1".into(), "n2".into()],
                },
                Duplicate {
                    kind: SUBNET,
                    name: "internal-subnet".into(),
                    parent: "n1".into(),
                    ids: vec!["s1".into(), "s2".into(), "s3".into()],
                },
            ]
        );
        assert!(i.check_no_duplicates().is_err());
        assert_eq!(
            d[0].to_string(),
            "network \"internal\" in p1 exists 2 times: n1, n2"
        );
    }

    #[test]
    fn no_duplicates_in_a_clean_inventory() {
        let i = inv(vec![
            Item::new(PROJECT, "a", "p1", "d", true),
            Item::new(PROJECT, "b", "p2", "d", true),
            Item::new(NETWORK, "internal", "n1", "p1", true),
            Item::new(NETWORK, "internal", "n2", "p2", true),
        ]);
        assert!(i.duplicates().is_empty());
        assert!(i.check_no_duplicates().is_ok());
    }

    #[test]
    fn count_comparison_names_every_difference() {
        let i = inv(vec![
            Item::new(PROJECT, "a", "p1", "d", true),
            Item::new(PROJECT, "b", "p2", "d", true),
            Item::new(NETWORK, "internal", "n1", "p1", true),
            Item::new(FLAVOR, "f", "f1", "", true),
        ]);
        assert_eq!(
            i.count_mismatches(&[("project", 2), ("network", 2), ("router", 0)]),
            vec![
                "network: 1 found, 2 expected".to_string(),
                "flavor: 1 found, 0 expected".to_string(),
            ]
        );
        assert!(
            i.count_mismatches(&[("project", 2), ("network", 1), ("flavor", 1)])
                .is_empty()
        );
        assert!(
            i.check_counts(&[("project", 2), ("network", 1), ("flavor", 1)])
                .is_ok()
        );
        let err = format!(
            "{:#}",
            i.check_counts(&[("project", 3)])
                .err()
                .unwrap_or_else(|| { anyhow::anyhow!("check_counts accepted wrong counts") })
        );
        assert!(err.contains("project: 2 found, 3 expected"), "{err}");
        assert!(err.contains("KIND"), "the table is in the message: {err}");
    }

    #[test]
    fn unmarked_and_duplicated_objects_fail_the_count_check() {
        let i = inv(vec![
            Item::new(NETWORK, "internal", "n1", "p1", true),
            Item::new(NETWORK, "internal", "n2", "p1", false),
        ]);
        let err = format!(
            "{:#}",
            i.check_counts(&[("network", 2)])
                .err()
                .unwrap_or_else(|| anyhow::anyhow!("accepted"))
        );
        assert!(err.contains("unmarked network \"internal\" (n2)"), "{err}");
        assert!(err.contains("duplicate: network \"internal\""), "{err}");
    }

    #[test]
    fn empty_and_table() {
        let empty = inv(vec![]);
        assert!(empty.is_empty());
        assert!(empty.check_empty().is_ok());
        assert_eq!(
            empty.to_string(),
            "inventory of cluster c1: 0 objects (none)\n"
        );
        let i = inv(vec![
            Item::new(NETWORK, "internal", "n1", "p1", true),
            Item::new(PROJECT, "a", "p1", "d", true),
            Item::new(SECURITY_GROUP, "default", "sg1", "p1", false),
        ]);
        assert!(!i.is_empty());
        assert!(i.check_empty().is_err());
        let t = i.to_string();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "inventory of cluster c1: 3 objects (project=1, network=1, security_group=1)"
        );
        // Parents first, unmarked flagged.
        assert!(
            lines[2].contains("project") && lines[2].contains("p1"),
            "{t}"
        );
        assert!(lines[3].contains("network"), "{t}");
        assert!(
            lines[4].starts_with('*') && lines[4].contains("default"),
            "{t}"
        );
        assert!(t.contains("(* = without this cluster's mark)"), "{t}");
        assert_eq!(i.names(NETWORK), vec!["internal".to_string()]);
        assert_eq!(i.count(PROJECT), 1);
        assert!(i.get(SECURITY_GROUP, "sg1").is_some_and(|x| !x.marked));
        assert_eq!(i.unmarked().len(), 1);
    }

    fn tags(cluster: &str, uid: &str) -> Vec<String> {
        vec![
            api::naming::MANAGED_TAG.to_string(),
            format!("{CLUSTER_TAG_PREFIX}{cluster}"),
            format!("openstack-operator.owner={uid}"),
        ]
    }

    /// `collect` on the in-memory cloud: what carries the mark (and what sits unmarked in a
    /// marked project) is found, another cluster's objects are not; after the project is
    /// deleted, the scope still finds what it left behind.
    #[tokio::test]
    async fn collect_finds_marked_objects_and_leftovers() -> anyhow::Result<()> {
        use openstack::model::*;
        let fake = openstack::fake::FakeCloud::new();
        let cloud = fake.cloud();
        let project = |name: &str, cluster: &str| ProjectCreate {
            name: name.into(),
            domain_id: "default".into(),
            description: String::new(),
            enabled: true,
            tags: tags(cluster, "u1"),
        };
        let p = cloud
            .identity
            .create_project(&project("mine", "c1"))
            .await?;
        let q = cloud
            .identity
            .create_project(&project("theirs", "c2"))
            .await?;
        for (proj, name) in [(&p, "mine"), (&q, "theirs")] {
            let g = cloud
                .identity
                .create_group(&GroupCreate {
                    name: api::naming::project_group_name(name),
                    domain_id: "default".into(),
                    description: project_group_description(name),
                })
                .await?;
            let member = cloud
                .identity
                .find_role("member")
                .await?
                .context("member")?;
            cloud
                .identity
                .grant_project_role(&proj.id, &Actor::Group(g.id), &member.id)
                .await?;
        }
        let net = &cloud.network;
        let n = net
            .create_network(&NetworkCreate {
                name: "internal".into(),
                project_id: Some(p.id.clone()),
                tags: tags("c1", "u1"),
                ..Default::default()
            })
            .await?;
        // Created, never tagged (a crash between the two calls).
        net.create_network(&NetworkCreate {
            name: "internal".into(),
            project_id: Some(p.id.clone()),
            ..Default::default()
        })
        .await?;
        let s = net
            .create_subnet(&SubnetCreate {
                network_id: n.id.clone(),
                name: "internal-subnet".into(),
                ip_version: 4,
                cidr: "10.0.0.0/24".into(),
                project_id: Some(p.id.clone()),
                tags: tags("c1", "u1"),
                ..Default::default()
            })
            .await?;
        let r = net
            .create_router(&RouterCreate {
                name: "internal-router".into(),
                project_id: Some(p.id.clone()),
                tags: tags("c1", "u1"),
                ..Default::default()
            })
            .await?;
        net.add_router_interface(&r.id, &s.id).await?;
        let sg = net
            .create_security_group(&SecurityGroupCreate {
                name: "ssh".into(),
                project_id: Some(p.id.clone()),
                tags: tags("c1", "u1"),
                ..Default::default()
            })
            .await?;
        net.create_security_group_rule(&SecurityGroupRuleCreate {
            security_group_id: sg.id.clone(),
            direction: "ingress".into(),
            ethertype: "IPv4".into(),
            protocol: Some("tcp".into()),
            port_range_min: Some(22),
            port_range_max: Some(22),
            project_id: Some(p.id.clone()),
            ..Default::default()
        })
        .await?;
        net.create_network(&NetworkCreate {
            name: "internal".into(),
            project_id: Some(q.id.clone()),
            tags: tags("c2", "u2"),
            ..Default::default()
        })
        .await?;
        let f = cloud
            .compute
            .create_flavor(&FlavorCreate {
                name: "small".into(),
                vcpus: 1,
                ram_mb: 512,
                ..Default::default()
            })
            .await?;
        cloud
            .compute
            .set_flavor_extra_specs(
                &f.id,
                &[(FLAVOR_OWNER_SPEC.to_string(), "c1/u3".to_string())].into(),
            )
            .await?;

        let inv = Inventory::collect(&cloud, "c1").await?;
        assert_eq!(inv.names(PROJECT), vec!["mine".to_string()], "{inv}");
        assert_eq!(inv.names(GROUP), vec!["mine-users".to_string()], "{inv}");
        assert_eq!(
            inv.names(ROLE_ASSIGNMENT),
            vec!["group:mine-users member".to_string()],
            "{inv}"
        );
        assert_eq!(inv.count(NETWORK), 2, "ours and the untagged one: {inv}");
        assert_eq!(inv.count(SUBNET), 1, "{inv}");
        assert_eq!(
            inv.names(ROUTER_INTERFACE),
            vec!["internal-subnet".to_string()]
        );
        assert_eq!(inv.names(FLAVOR), vec!["small".to_string()]);
        assert!(
            inv.names(SECURITY_GROUP).contains(&"ssh".to_string()),
            "{inv}"
        );
        assert!(
            inv.names(SECURITY_GROUP_RULE)
                .contains(&"ingress IPv4 tcp 22-22".to_string()),
            "{inv}"
        );
        let dups = inv.duplicates();
        assert_eq!(dups.len(), 1, "{inv}");
        assert_eq!((dups[0].kind, dups[0].name.as_str()), (NETWORK, "internal"));
        assert!(
            inv.unmarked().iter().any(|i| i.kind == NETWORK),
            "the untagged network is flagged: {inv}"
        );
        assert!(
            !inv.items.iter().any(|i| i.parent == q.id || i.id == q.id),
            "nothing of cluster c2: {inv}"
        );

        // The project goes, its Neutron objects and group stay: only the scope finds them.
        cloud.identity.delete_project(&p.id).await?;
        let inv = Inventory::collect(&cloud, "c1").await?;
        assert_eq!(inv.count(PROJECT), 0, "{inv}");
        assert_eq!(inv.count(GROUP), 0, "{inv}");
        let scope = Scope::new().project_ids([&p.id]).project_names(["mine"]);
        let inv = Inventory::collect_scoped(&cloud, "c1", &scope).await?;
        assert_eq!(inv.count(GROUP), 1, "{inv}");
        assert_eq!(inv.count(NETWORK), 2, "{inv}");
        assert!(inv.check_empty().is_err());
        Ok(())
    }

    #[test]
    fn rule_names_read_like_the_rule() {
        let r = SecurityGroupRule {
            direction: "ingress".into(),
            ethertype: "IPv4".into(),
            protocol: Some("tcp".into()),
            port_range_min: Some(22),
            port_range_max: Some(22),
            remote_ip_prefix: Some("0.0.0.0/0".into()),
            ..Default::default()
        };
        assert_eq!(rule_name(&r), "ingress IPv4 tcp 22-22 from 0.0.0.0/0");
        let e = SecurityGroupRule {
            direction: "egress".into(),
            ethertype: "IPv6".into(),
            ..Default::default()
        };
        assert_eq!(rule_name(&e), "egress IPv6 any");
    }
}
