//! Keystone side of a project: the project itself, its user group `<sanitized>-users`, and
//! the role assignments role bindings ask for. Pure planners first, executors after.

use std::collections::{BTreeMap, BTreeSet};

use api::naming::{
    GROUP_DESCRIPTION_PREFIX, project_group_description, project_group_name,
    role_group_description, role_group_name,
};
use api::{OpenstackProjectSpec, OpenstackProjectStatus};
use openstack::OptionalExt;
use openstack::model::{
    Actor, Domain, Group, GroupCreate, GroupUpdate, Project, ProjectCreate, ProjectUpdate,
    RoleAssignment,
};

use super::{AreaOutcome, Env, FederationInput, Note, combine, os, resolve_domain_cached};
use crate::context::Config;
use crate::error::{ReconcileError, Result};
use crate::ownership::{Owner, Ownership};
use crate::ownership::{merge_marks, strip_marks};

/// Tag put on projects taken over with `spec.adopt`, so deletion never removes a project that
/// existed before us, even if `status.adopted` is lost (e.g. a restore without status).
pub const ADOPTED_TAG: &str = "openstack-operator.adopted";

/// The role the seed grants the project group on the project (federated logins rely on it).
pub const GROUP_ROLE: &str = "member";

/// How an existing object was located.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FoundBy {
    /// By the ID recorded in status (written only by the operator).
    RecordedId,
    /// By name in the domain.
    Name,
}

/// Why an existing project that does not carry our marks is being taken over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Takeover {
    /// It is ours already.
    None,
    /// `spec.adopt` with the operator's permission: it existed before and is never deleted.
    Adopt,
    /// Created by the seed operator for this very object (found through the ID the seed
    /// recorded in status) and `--adopt-legacy` is on: it is ours from now on.
    Legacy,
}

/// What to do about the Keystone project.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProjectPlan {
    /// Create it, with our tags in the same call.
    Create(ProjectCreate),
    /// It exists; bring it in line.
    Existing {
        /// Project ID.
        id: String,
        /// Changes (default = none): rename, description, enabled, marks.
        update: ProjectUpdate,
        /// Whether it is taken over now.
        takeover: Takeover,
    },
}

/// Plans the project from the spec and what was found (by recorded ID, else by name in the
/// resolved domain). `adopted` = status or tags say it was adopted earlier.
pub fn plan_project(
    spec: &OpenstackProjectSpec,
    observed: Option<(&Project, FoundBy)>,
    domain_id: &str,
    owner: &Owner,
    config: &Config,
    adopted: bool,
) -> Result<ProjectPlan> {
    let Some((p, found_by)) = observed else {
        return Ok(ProjectPlan::Create(ProjectCreate {
            name: spec.name.clone(),
            domain_id: domain_id.to_string(),
            description: spec.description.clone(),
            enabled: spec.enabled,
            tags: owner.tags(),
        }));
    };
    if p.domain_id != domain_id {
        // Keystone cannot move a project; found by the recorded ID, so spec.domain changed.
        return Err(ReconcileError::invalid(
            "spec.domain",
            format!(
                "project {} lives in domain {} but spec.domain is now {:?}; moving a project between domains is not supported; create a new resource",
                p.id, p.domain_id, spec.domain
            ),
        ));
    }
    let what = format!("Keystone project {:?} ({})", p.name, p.id);
    let ownership = owner.classify_tags(&p.tags);
    let takeover = match ownership {
        Ownership::Ours => Takeover::None,
        Ownership::OtherOwner(uid) => {
            return Err(ReconcileError::NotOwned(format!(
                "{what} is managed by another OpenstackProject of this cluster (uid {uid}); two resources must not manage one project"
            )));
        }
        Ownership::OtherCluster(c) => {
            return Err(ReconcileError::NotOwned(format!(
                "{what} is managed by another cluster ({c})"
            )));
        }
        // Marks removed by hand from a project we adopted earlier: mark it again.
        Ownership::Legacy | Ownership::Foreign if found_by == FoundBy::RecordedId && adopted => {
            Takeover::Adopt
        }
        Ownership::Legacy if found_by == FoundBy::RecordedId && config.adopt_legacy => {
            Takeover::Legacy
        }
        Ownership::Legacy | Ownership::Foreign if spec.adopt && config.allow_project_adoption => {
            Takeover::Adopt
        }
        Ownership::Legacy | Ownership::Foreign if spec.adopt => {
            return Err(ReconcileError::PolicyViolation(format!(
                "spec.adopt: {what} exists and adopting existing projects is disabled in this operator (--allow-project-adoption)"
            )));
        }
        Ownership::Legacy if found_by == FoundBy::RecordedId => {
            return Err(ReconcileError::NotOwned(format!(
                "{what} was created by the seed operator for this object; run the operator with --adopt-legacy to take such projects over"
            )));
        }
        Ownership::Legacy | Ownership::Foreign => {
            return Err(ReconcileError::NotOwned(format!(
                "{what} already exists in domain {domain_id} and was not created by this operator; set spec.adopt: true to take it over (the operator must allow adoption)"
            )));
        }
    };
    let mut update = ProjectUpdate {
        // Keystone allows renaming; the project is found by its recorded ID (seed W21).
        name: (p.name != spec.name).then(|| spec.name.clone()),
        description: (p.description != spec.description).then(|| spec.description.clone()),
        enabled: (p.enabled != spec.enabled).then_some(spec.enabled),
        tags: None,
    };
    if takeover != Takeover::None {
        let mut tags = merge_marks(&p.tags, owner);
        if takeover == Takeover::Adopt && !tags.iter().any(|t| t == ADOPTED_TAG) {
            tags.push(ADOPTED_TAG.to_string());
        }
        update.tags = Some(tags);
    }
    Ok(ProjectPlan::Existing {
        id: p.id.clone(),
        update,
        takeover,
    })
}

/// What to do about the project's user group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupPlan {
    /// Create it with the seed's description (our mark: groups have no tags).
    Create(GroupCreate),
    /// It exists and is ours; `update` renames it after a project rename.
    Existing {
        /// Group ID.
        id: String,
        /// Changes (default = none).
        update: GroupUpdate,
    },
}

/// Whether a group is the one we made for project `spec_name`: found by the recorded ID and
/// marked, or found by name with exactly the seed's description for this project. The exact
/// description tells `a.b` and `a_b` apart, whose group names collide (seed W12).
pub fn group_is_ours(g: &Group, spec_name: &str, found_by: FoundBy) -> bool {
    match found_by {
        FoundBy::RecordedId => g.description.starts_with(GROUP_DESCRIPTION_PREFIX),
        FoundBy::Name => g.description == project_group_description(spec_name),
    }
}

/// Plans the user group. Groups carry no tags, so a group found by name is ours only with our
/// description; anything else is refused rather than taken over (deleting the resource
/// deletes the group).
pub fn plan_group(
    spec_name: &str,
    observed: Option<(&Group, FoundBy)>,
    domain_id: &str,
) -> Result<GroupPlan> {
    let name = project_group_name(spec_name);
    let description = project_group_description(spec_name);
    let Some((g, found_by)) = observed else {
        return Ok(GroupPlan::Create(GroupCreate {
            name,
            domain_id: domain_id.to_string(),
            description,
        }));
    };
    // A group recorded in status is ours even without the prefix: the seed recorded the
    // groups it used, and it deleted them with the resource too.
    if found_by == FoundBy::Name && !group_is_ours(g, spec_name, found_by) {
        let why = if g.description.starts_with(GROUP_DESCRIPTION_PREFIX) {
            format!(
                "belongs to another project ({:?}); project names that sanitize to the same group name cannot share a domain",
                g.description
            )
        } else {
            "was not created by this operator; rename or delete it, or give it the description this operator uses".to_string()
        };
        return Err(ReconcileError::NotOwned(format!(
            "spec.name: Keystone group {:?} ({}) in domain {domain_id} {why}",
            g.name, g.id
        )));
    }
    Ok(GroupPlan::Existing {
        id: g.id.clone(),
        update: GroupUpdate {
            name: (g.name != name).then_some(name),
            description: (g.description != description).then_some(description),
        },
    })
}

/// Grants and revocations on the project.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AssignmentPlan {
    /// (actor, role ID) to grant.
    pub grant: Vec<(Actor, String)>,
    /// (actor, role ID) to revoke.
    pub revoke: Vec<(Actor, String)>,
}

/// Desired vs. observed role assignments. Everything desired and missing is granted.
/// Revoked: assignments not desired whose role is one we manage (`managed_roles`: the allowed
/// roles plus `member`; we never grant anything else, so we never revoke anything else) —
/// for users, groups and the project group alike, which also removes the roles the seed put
/// on the project group for every binding (seed W6). `revoke` is false when some user or group
/// could not be resolved, so a lookup failure never revokes a still-wanted grant.
pub fn plan_assignments(
    desired: &BTreeSet<(Actor, String)>,
    observed: &[RoleAssignment],
    managed_roles: &BTreeSet<String>,
    revoke: bool,
) -> AssignmentPlan {
    let have: BTreeSet<(Actor, String)> = observed
        .iter()
        .map(|a| (a.actor.clone(), a.role_id.clone()))
        .collect();
    AssignmentPlan {
        grant: desired.difference(&have).cloned().collect(),
        revoke: if revoke {
            have.iter()
                .filter(|(_, role)| managed_roles.contains(role))
                .filter(|a| !desired.contains(a))
                .cloned()
                .collect()
        } else {
            Vec::new()
        },
    }
}

/// The users of each role, roles and users in order of first appearance. Federation maps
/// each role's users into a group holding exactly that role on the project: the project group
/// for [`GROUP_ROLE`], a role group (`<name>-users-<role>`) for any other, so a user bound to
/// `reader` logs in with `reader` and one bound to both gets both.
pub fn users_by_role(spec: &OpenstackProjectSpec) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for b in spec.role_bindings.iter().flatten() {
        for u in b.users.iter().flatten() {
            let idx = match out.iter().position(|(r, _)| *r == b.role) {
                Some(i) => i,
                None => {
                    out.push((b.role.clone(), Vec::new()));
                    out.len() - 1
                }
            };
            if !out[idx].1.contains(u) {
                out[idx].1.push(u.clone());
            }
        }
    }
    out
}

/// Every user named in a binding, first appearance first.
pub fn bound_users(spec: &OpenstackProjectSpec) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (_, users) in users_by_role(spec) {
        for u in users {
            if !out.contains(&u) {
                out.push(u);
            }
        }
    }
    out
}

/// The roles that get a role group: roles other than [`GROUP_ROLE`] bound to users, when the
/// project is federated (local users hold such roles through their own grants).
pub fn role_group_roles(spec: &OpenstackProjectSpec) -> Vec<String> {
    if spec.federation_ref.is_none() {
        return Vec::new();
    }
    users_by_role(spec)
        .into_iter()
        .map(|(r, _)| r)
        .filter(|r| r != GROUP_ROLE)
        .collect()
}

// ---------------------------------------------------------------------------------------
// Executors
// ---------------------------------------------------------------------------------------

/// What the identity step established for the other areas.
#[derive(Clone, Debug)]
pub struct Tenant {
    /// The project's domain.
    pub domain: Domain,
    /// Keystone project ID.
    pub project_id: String,
    /// Project group ID.
    pub group_id: String,
    /// Project group name.
    pub group_name: String,
    /// The group's name before a rename in this pass (its federation rule must go).
    pub previous_group_name: Option<String>,
    /// The project was created in this pass: nothing can exist in it yet (no Neutron object,
    /// no role assignment, no quota of its own), so the pass skips the reads that look for
    /// such things. A pass that lost the create response finds the project by name in the
    /// next pass, where `created` is false and every read is made.
    pub created: bool,
    /// The project group was created in this pass (it has no members yet).
    pub group_created: bool,
    /// Something was written.
    pub changed: bool,
}

async fn find_project(
    env: &Env<'_>,
    spec: &OpenstackProjectSpec,
    status: &OpenstackProjectStatus,
    domain: Option<&Domain>,
) -> Result<Option<(Project, FoundBy)>> {
    let identity = &env.cloud.identity;
    if let Some(id) = &status.project_id
        && let Some(p) = identity
            .get_project(id)
            .await
            .optional()
            .map_err(|e| os(format!("reading Keystone project {id}"), e))?
    {
        return Ok(Some((p, FoundBy::RecordedId)));
    }
    let Some(domain) = domain else {
        return Ok(None);
    };
    Ok(identity
        .find_project(&domain.id, &spec.name)
        .await
        .map_err(|e| os(format!("spec.name: looking up project {:?}", spec.name), e))?
        .map(|p| (p, FoundBy::Name)))
}

async fn find_group(
    env: &Env<'_>,
    spec: &OpenstackProjectSpec,
    status: &OpenstackProjectStatus,
    domain_id: &str,
) -> Result<Option<(Group, FoundBy)>> {
    let identity = &env.cloud.identity;
    // A legacy status may hold the group's name instead of its ID: that read finds nothing
    // and the lookup by name below takes over.
    if let Some(id) = &status.group_id
        && let Some(g) = identity
            .get_group(id)
            .await
            .optional()
            .map_err(|e| os(format!("reading Keystone group {id}"), e))?
    {
        return Ok(Some((g, FoundBy::RecordedId)));
    }
    let name = project_group_name(&spec.name);
    Ok(identity
        .find_group(domain_id, &name)
        .await
        .map_err(|e| os(format!("looking up group {name:?}"), e))?
        .map(|g| (g, FoundBy::Name)))
}

async fn domain_of(env: &Env<'_>, spec: &OpenstackProjectSpec) -> Result<Option<Domain>> {
    resolve_domain_cached(env, &spec.domain).await.map_err(|e| {
        os(
            format!("spec.domain: looking up domain {:?}", spec.domain),
            e,
        )
    })
}

/// Ensures the domain, project and group; records their IDs in status as soon as known.
pub(crate) async fn apply(
    env: &Env<'_>,
    spec: &OpenstackProjectSpec,
    status: &mut OpenstackProjectStatus,
    events: &mut Vec<Note>,
) -> Result<Tenant> {
    let identity = &env.cloud.identity;
    let domain = domain_of(env, spec).await?.ok_or_else(|| {
        ReconcileError::DependencyMissing(format!("domain {:?} (spec.domain)", spec.domain))
    })?;

    let observed = find_project(env, spec, status, Some(&domain)).await?;
    if let Some(id) = &status.project_id
        && observed
            .as_ref()
            .is_none_or(|(p, by)| *by == FoundBy::Name && &p.id != id)
    {
        events.push(Note::warning(
            "Recreating",
            "Create",
            format!("Keystone project {id} was deleted outside the operator; creating it again"),
        ));
        status.project_id = None;
    }
    let adopted = status.adopted == Some(true)
        || observed
            .as_ref()
            .is_some_and(|(p, _)| p.tags.iter().any(|t| t == ADOPTED_TAG));
    let plan = plan_project(
        spec,
        observed.as_ref().map(|(p, by)| (p, *by)),
        &domain.id,
        &env.owner,
        env.config,
        adopted,
    )?;
    let mut created = false;
    let mut changed = false;
    let project_id = match plan {
        ProjectPlan::Create(req) => {
            let p = identity
                .create_project(&req)
                .await
                .map_err(|e| os(format!("spec.name: creating project {:?}", spec.name), e))?;
            status.project_id = Some(p.id.clone());
            status.adopted = Some(false);
            created = true;
            changed = true;
            events.push(Note::normal(
                "Created",
                "Create",
                format!(
                    "created Keystone project {} ({}) in domain {}",
                    p.name, p.id, domain.name
                ),
            ));
            p.id
        }
        ProjectPlan::Existing {
            id,
            update,
            takeover,
        } => {
            status.project_id = Some(id.clone());
            match takeover {
                Takeover::Adopt => {
                    if status.adopted != Some(true) {
                        events.push(Note::normal(
                            "Adopted",
                            "Adopt",
                            format!("took over existing Keystone project {} ({id})", spec.name),
                        ));
                    }
                    status.adopted = Some(true);
                }
                Takeover::Legacy | Takeover::None => {
                    status.adopted = Some(adopted);
                }
            }
            if update != ProjectUpdate::default() {
                let old_name = observed.as_ref().map(|(p, _)| p.name.clone());
                identity
                    .update_project(&id, &update)
                    .await
                    .map_err(|e| os(format!("spec: updating project {id}"), e))?;
                changed = true;
                if let (Some(new), Some(old)) = (&update.name, old_name) {
                    events.push(Note::normal(
                        "Renamed",
                        "Update",
                        format!("renamed Keystone project {id} from {old:?} to {new:?}"),
                    ));
                }
            }
            id
        }
    };

    // A project made in this pass has no group of ours yet: an earlier pass makes the group
    // only after the project, which it would have found. (A group of that name made by
    // someone else makes the create fail, and the next pass looks it up.)
    let observed_group = if created && status.group_id.is_none() {
        None
    } else {
        find_group(env, spec, status, &domain.id).await?
    };
    let mut previous_group_name = None;
    let mut group_created = false;
    let (group_id, group_name) = match plan_group(
        &spec.name,
        observed_group.as_ref().map(|(g, by)| (g, *by)),
        &domain.id,
    )? {
        GroupPlan::Create(req) => {
            let g = identity
                .create_group(&req)
                .await
                .map_err(|e| os(format!("creating group {:?}", req.name), e))?;
            status.group_id = Some(g.id.clone());
            changed = true;
            group_created = true;
            (g.id, g.name)
        }
        GroupPlan::Existing { id, update } => {
            status.group_id = Some(id.clone());
            let current = observed_group
                .as_ref()
                .map(|(g, _)| g.name.clone())
                .unwrap_or_default();
            if update != GroupUpdate::default() {
                identity
                    .update_group(&id, &update)
                    .await
                    .map_err(|e| os(format!("updating group {current:?} ({id})"), e))?;
                changed = true;
                if update.name.is_some() {
                    previous_group_name = Some(current.clone());
                }
            }
            (id, update.name.unwrap_or(current))
        }
    };
    Ok(Tenant {
        domain,
        project_id,
        group_id,
        group_name,
        previous_group_name,
        created,
        group_created,
        changed,
    })
}

/// Per-pass caches for name lookups (domains, users, groups).
struct Lookups<'e, 'a> {
    env: &'e Env<'a>,
    domains: BTreeMap<String, Option<String>>,
    users: BTreeMap<(String, String), Option<String>>,
    groups: BTreeMap<(String, String), Option<String>>,
}

impl<'e, 'a> Lookups<'e, 'a> {
    fn new(env: &'e Env<'a>, spec: &OpenstackProjectSpec, project_domain: Option<&Domain>) -> Self {
        let mut domains = BTreeMap::new();
        if let Some(d) = project_domain {
            domains.insert(spec.domain.clone(), Some(d.id.clone()));
        }
        Lookups {
            env,
            domains,
            users: BTreeMap::new(),
            groups: BTreeMap::new(),
        }
    }

    async fn domain(
        &mut self,
        name: &str,
    ) -> std::result::Result<Option<String>, openstack::Error> {
        if let Some(d) = self.domains.get(name) {
            return Ok(d.clone());
        }
        let d = resolve_domain_cached(self.env, name).await?.map(|d| d.id);
        self.domains.insert(name.to_string(), d.clone());
        Ok(d)
    }

    async fn user(
        &mut self,
        domain_id: &str,
        name: &str,
    ) -> std::result::Result<Option<String>, openstack::Error> {
        let key = (domain_id.to_string(), name.to_string());
        if let Some(u) = self.users.get(&key) {
            return Ok(u.clone());
        }
        let cache = self.env.locks.lookups();
        let lock = self
            .env
            .locks
            .lock_for(&format!("lookup/user/{domain_id}/{name}"));
        let _one = lock.lock().await;
        let u = match cache.user(domain_id, name) {
            Some(id) => Some(id),
            None => {
                let u = self
                    .env
                    .cloud
                    .identity
                    .find_user(domain_id, name)
                    .await?
                    .map(|u| u.id);
                if let Some(id) = &u {
                    cache.put_user(domain_id, name, id);
                }
                u
            }
        };
        self.users.insert(key, u.clone());
        Ok(u)
    }

    async fn group(
        &mut self,
        domain_id: &str,
        name: &str,
    ) -> std::result::Result<Option<String>, openstack::Error> {
        let key = (domain_id.to_string(), name.to_string());
        if let Some(g) = self.groups.get(&key) {
            return Ok(g.clone());
        }
        let g = self
            .env
            .cloud
            .identity
            .find_group(domain_id, name)
            .await?
            .map(|g| g.id);
        self.groups.insert(key, g.clone());
        Ok(g)
    }
}

/// The resolved bindings: desired assignments, users not existing yet, problems, and whether
/// every lookup gave a definite answer.
struct Resolved {
    desired: BTreeSet<(Actor, String)>,
    /// Users of `member` bindings: members of the project group (which holds `member`).
    members: BTreeSet<String>,
    pending: Vec<String>,
    errors: Vec<ReconcileError>,
    complete: bool,
}

/// Resolves role names and the bindings' users and groups. Users of `member` bindings become
/// members of the project group (as the seed had them; the group holds `member` and nothing
/// else); users of other roles are granted them directly, so no other role reaches anyone
/// through the shared project group (seed W6).
async fn resolve_bindings(
    lookups: &mut Lookups<'_, '_>,
    spec: &OpenstackProjectSpec,
    roles: &BTreeMap<String, String>,
) -> Resolved {
    let mut r = Resolved {
        desired: BTreeSet::new(),
        members: BTreeSet::new(),
        pending: Vec::new(),
        errors: Vec::new(),
        complete: true,
    };
    for (i, b) in spec.role_bindings.iter().flatten().enumerate() {
        let p = format!("spec.roleBindings[{i}]");
        let Some(role_id) = roles.get(&b.role) else {
            r.errors.push(ReconcileError::DependencyMissing(format!(
                "role {:?} in Keystone ({p}.role)",
                b.role
            )));
            continue;
        };
        if let Some(users) = b.users.as_ref().filter(|u| !u.is_empty()) {
            let dname = b.user_domain.as_deref().unwrap_or(&spec.domain);
            match lookups.domain(dname).await {
                Ok(Some(did)) => {
                    for (j, u) in users.iter().enumerate() {
                        match lookups.user(&did, u).await {
                            Ok(Some(uid)) if b.role == GROUP_ROLE => {
                                r.members.insert(uid);
                            }
                            Ok(Some(uid)) => {
                                r.desired.insert((Actor::User(uid), role_id.clone()));
                            }
                            Ok(None) => {
                                if !r.pending.contains(u) {
                                    r.pending.push(u.clone());
                                }
                            }
                            Err(e) => {
                                r.complete = false;
                                r.errors
                                    .push(os(format!("{p}.users[{j}]: looking up user {u:?}"), e));
                            }
                        }
                    }
                }
                Ok(None) => r.errors.push(ReconcileError::DependencyMissing(format!(
                    "domain {dname:?} ({p}.userDomain)"
                ))),
                Err(e) => {
                    r.complete = false;
                    r.errors.push(os(
                        format!("{p}.userDomain: looking up domain {dname:?}"),
                        e,
                    ));
                }
            }
        }
        if let Some(groups) = b.groups.as_ref().filter(|g| !g.is_empty()) {
            let dname = b.group_domain.as_deref().unwrap_or(&spec.domain);
            match lookups.domain(dname).await {
                Ok(Some(did)) => {
                    for (j, g) in groups.iter().enumerate() {
                        match lookups.group(&did, g).await {
                            Ok(Some(gid)) => {
                                r.desired.insert((Actor::Group(gid), role_id.clone()));
                            }
                            Ok(None) => r.errors.push(ReconcileError::DependencyMissing(format!(
                                "group {g:?} in domain {dname:?} ({p}.groups[{j}])"
                            ))),
                            Err(e) => {
                                r.complete = false;
                                r.errors.push(os(
                                    format!("{p}.groups[{j}]: looking up group {g:?}"),
                                    e,
                                ));
                            }
                        }
                    }
                }
                Ok(None) => r.errors.push(ReconcileError::DependencyMissing(format!(
                    "domain {dname:?} ({p}.groupDomain)"
                ))),
                Err(e) => {
                    r.complete = false;
                    r.errors.push(os(
                        format!("{p}.groupDomain: looking up domain {dname:?}"),
                        e,
                    ));
                }
            }
        }
    }
    r
}

/// Global roles by name.
async fn role_ids(env: &Env<'_>) -> Result<BTreeMap<String, String>> {
    let cache = env.locks.lookups();
    let lock = env.locks.lock_for("lookup/roles");
    let _one = lock.lock().await;
    if let Some(r) = cache.roles() {
        return Ok(r);
    }
    let roles: BTreeMap<String, String> = env
        .cloud
        .identity
        .list_roles()
        .await
        .map_err(|e| os("listing Keystone roles", e))?
        .into_iter()
        .filter(|r| r.domain_id.is_none())
        .map(|r| (r.name, r.id))
        .collect();
    cache.put_roles(&roles);
    Ok(roles)
}

/// Whether `actor` is the user holding the project's tenant application credentials
/// (`status.applicationCredential.userId`), whose role assignments the bindings leave alone.
pub fn is_tenant_credential_user(status: &OpenstackProjectStatus, actor: &Actor) -> bool {
    matches!(
        (actor, status.application_credential.as_ref().and_then(|a| a.user_id.as_deref())),
        (Actor::User(u), Some(ours)) if u == ours
    )
}

fn managed_role_ids(config: &Config, roles: &BTreeMap<String, String>) -> BTreeSet<String> {
    config
        .allowed_roles
        .iter()
        .map(String::as_str)
        .chain([GROUP_ROLE])
        .filter_map(|n| roles.get(n).cloned())
        .collect()
}

/// Whether a group found for a role group is ours: by recorded ID with our prefix, by name
/// with exactly the description we give it.
fn role_group_is_ours(g: &Group, spec_name: &str, role: &str, found_by: FoundBy) -> bool {
    match found_by {
        FoundBy::RecordedId => g.description.starts_with(GROUP_DESCRIPTION_PREFIX),
        FoundBy::Name => g.description == role_group_description(spec_name, role),
    }
}

/// Ensures the role groups federation maps into (see [`role_group_roles`]) and removes the
/// ones no longer needed; their IDs are recorded in `status.roleGroups` as soon as known.
/// Returns the grants they need: each group its role on the project.
async fn ensure_role_groups(
    env: &Env<'_>,
    spec: &OpenstackProjectSpec,
    tenant: &Tenant,
    roles: &BTreeMap<String, String>,
    status: &mut OpenstackProjectStatus,
    out: &mut AreaOutcome,
) -> BTreeSet<(Actor, String)> {
    let identity = &env.cloud.identity;
    let wanted = role_group_roles(spec);
    let mut grants = BTreeSet::new();
    for role in &wanted {
        let Some(role_id) = roles.get(role) else {
            // resolve_bindings reports the missing role.
            continue;
        };
        let name = role_group_name(&spec.name, role);
        let description = role_group_description(&spec.name, role);
        let ctx =
            format!("spec.roleBindings: group {name:?} for the federated users of role {role:?}");
        let mut found = None;
        if let Some(id) = status.role_groups.get(role) {
            match identity.get_group(id).await.optional() {
                Ok(g) => found = g.map(|g| (g, FoundBy::RecordedId)),
                Err(e) => {
                    out.errors.push(os(format!("{ctx}: reading group {id}"), e));
                    continue;
                }
            }
        }
        if found.is_none() {
            match identity.find_group(&tenant.domain.id, &name).await {
                Ok(g) => found = g.map(|g| (g, FoundBy::Name)),
                Err(e) => {
                    out.errors.push(os(format!("{ctx}: looking it up"), e));
                    continue;
                }
            }
        }
        let id = match found {
            Some((g, by)) if !role_group_is_ours(&g, &spec.name, role, by) => {
                out.errors.push(ReconcileError::NotOwned(format!(
                    "{ctx}: Keystone group {:?} ({}) in domain {} was not created by this operator for this project ({:?})",
                    g.name, g.id, tenant.domain.name, g.description
                )));
                continue;
            }
            Some((g, _)) => {
                status.role_groups.insert(role.clone(), g.id.clone());
                let update = GroupUpdate {
                    name: (g.name != name).then(|| name.clone()),
                    description: (g.description != description).then(|| description.clone()),
                };
                if update != GroupUpdate::default() {
                    if let Err(e) = identity.update_group(&g.id, &update).await {
                        out.errors
                            .push(os(format!("{ctx}: updating group {}", g.id), e));
                        continue;
                    }
                    out.changed = true;
                }
                g.id
            }
            None => {
                let req = GroupCreate {
                    name: name.clone(),
                    domain_id: tenant.domain.id.clone(),
                    description,
                };
                match identity.create_group(&req).await {
                    Ok(g) => {
                        status.role_groups.insert(role.clone(), g.id.clone());
                        out.changed = true;
                        g.id
                    }
                    Err(e) => {
                        out.errors.push(os(format!("{ctx}: creating it"), e));
                        continue;
                    }
                }
            }
        };
        grants.insert((Actor::Group(id), role_id.clone()));
    }
    // Role groups no longer wanted go (with their assignments).
    let stale: Vec<(String, String)> = status
        .role_groups
        .iter()
        .filter(|(r, _)| !wanted.contains(r))
        .map(|(r, id)| (r.clone(), id.clone()))
        .collect();
    for (role, id) in stale {
        match delete_role_group(env, &spec.name, &role, &id).await {
            Ok(deleted) => {
                out.changed |= deleted;
                status.role_groups.remove(&role);
            }
            Err(e) => out.errors.push(e),
        }
    }
    grants
}

/// Deletes the recorded role group `id` if it is ours; gone is fine. Returns whether a group
/// was deleted.
async fn delete_role_group(env: &Env<'_>, spec_name: &str, role: &str, id: &str) -> Result<bool> {
    let identity = &env.cloud.identity;
    let Some(g) = identity
        .get_group(id)
        .await
        .optional()
        .map_err(|e| os(format!("reading role group {id} (role {role:?})"), e))?
    else {
        return Ok(false);
    };
    if !role_group_is_ours(&g, spec_name, role, FoundBy::RecordedId) {
        return Ok(false);
    }
    identity
        .delete_group(id)
        .await
        .optional()
        .map_err(|e| os(format!("deleting role group {:?} ({id})", g.name), e))?;
    Ok(true)
}

/// Puts the users of `member` bindings into the project group and takes out the users no
/// binding names any more (the group is ours; nothing else puts users there). Removal waits
/// while some lookup failed, so a failure never removes a still-wanted member.
async fn sync_members(
    env: &Env<'_>,
    tenant: &Tenant,
    members: &BTreeSet<String>,
    remove: bool,
    out: &mut AreaOutcome,
    errors: &mut Vec<ReconcileError>,
) {
    let identity = &env.cloud.identity;
    let listed = if tenant.group_created {
        // Made in this pass: no members yet.
        Ok(Vec::new())
    } else {
        identity.list_group_users(&tenant.group_id).await
    };
    let have: BTreeSet<String> = match listed {
        Ok(u) => u.into_iter().map(|u| u.id).collect(),
        Err(e) => {
            errors.push(os(
                format!("listing the members of group {}", tenant.group_name),
                e,
            ));
            return;
        }
    };
    // Each addition is its own membership: they go at the same time.
    let added =
        futures::future::join_all(members.difference(&have).map(|uid| async move {
            (uid, identity.add_user_to_group(&tenant.group_id, uid).await)
        }))
        .await;
    for (uid, res) in added {
        match res {
            Ok(()) => out.changed = true,
            Err(e) => errors.push(os(
                format!(
                    "spec.roleBindings: adding user {uid} to group {}",
                    tenant.group_name
                ),
                e,
            )),
        }
    }
    if !remove {
        return;
    }
    for uid in have.difference(members) {
        match identity
            .remove_user_from_group(&tenant.group_id, uid)
            .await
            .optional()
        {
            Ok(_) => out.changed = true,
            Err(e) => errors.push(os(
                format!(
                    "spec.roleBindings: removing user {uid} from group {}",
                    tenant.group_name
                ),
                e,
            )),
        }
    }
}

/// Grants the project group `member` and puts the users of `member` bindings into it; grants
/// each other binding's role to its users and groups; with federation, keeps a group per
/// other role bound to users. Revokes what we manage and the spec no longer asks for. Users
/// that do not exist yet go to `status.pendingUsers` and are granted on a later pass.
pub(crate) async fn apply_assignments(
    env: &Env<'_>,
    spec: &OpenstackProjectSpec,
    tenant: &Tenant,
    status: &mut OpenstackProjectStatus,
) -> AreaOutcome {
    let mut out = AreaOutcome::default();
    let roles = match role_ids(env).await {
        Ok(r) => r,
        Err(e) => {
            out.errors.push(e);
            return out;
        }
    };
    let mut lookups = Lookups::new(env, spec, Some(&tenant.domain));
    let mut resolved = resolve_bindings(&mut lookups, spec, &roles).await;
    let role_group_grants = ensure_role_groups(env, spec, tenant, &roles, status, &mut out).await;
    resolved.desired.extend(role_group_grants);
    // Members first: a user moving from a direct `member` grant (earlier versions) to the
    // group never loses the role in between.
    sync_members(
        env,
        tenant,
        &resolved.members,
        resolved.complete,
        &mut out,
        &mut resolved.errors,
    )
    .await;
    match roles.get(GROUP_ROLE) {
        Some(member) => {
            resolved
                .desired
                .insert((Actor::Group(tenant.group_id.clone()), member.clone()));
        }
        None => resolved
            .errors
            .push(ReconcileError::DependencyMissing(format!(
                "role {GROUP_ROLE:?} in Keystone (granted to the project group {})",
                tenant.group_name
            ))),
    }
    status.pending_users = resolved.pending.clone();
    let listed = if tenant.created {
        // A project made in this pass has no assignments yet.
        Ok(Vec::new())
    } else {
        env.cloud
            .identity
            .list_project_role_assignments(&tenant.project_id)
            .await
    };
    let observed = match listed {
        Ok(a) => a,
        Err(e) => {
            resolved.errors.push(os("listing role assignments", e));
            out.errors.append(&mut resolved.errors);
            return out;
        }
    };
    // The tenant credentials' user holds its roles for the credentials it makes
    // (spec.applicationCredential); its grants are that area's, not the bindings'.
    let observed: Vec<_> = observed
        .into_iter()
        .filter(|a| !is_tenant_credential_user(status, &a.actor))
        .collect();
    let plan = plan_assignments(
        &resolved.desired,
        &observed,
        &managed_role_ids(env.config, &roles),
        resolved.complete,
    );
    let role_name = |id: &str| {
        roles
            .iter()
            .find(|(_, v)| v.as_str() == id)
            .map_or(id.to_string(), |(k, _)| k.clone())
    };
    // Grants are independent of one another: they go at the same time.
    let granted = futures::future::join_all(plan.grant.iter().map(|(actor, role)| async move {
        let res = env
            .cloud
            .identity
            .grant_project_role(&tenant.project_id, actor, role)
            .await;
        (actor, role, res)
    }))
    .await;
    for (actor, role, res) in granted {
        match res {
            Ok(()) => out.changed = true,
            Err(e) => resolved.errors.push(os(
                format!(
                    "spec.roleBindings: granting {} to {actor:?}",
                    role_name(role)
                ),
                e,
            )),
        }
    }
    for (actor, role) in &plan.revoke {
        match env
            .cloud
            .identity
            .revoke_project_role(&tenant.project_id, actor, role)
            .await
            .optional()
        {
            Ok(_) => out.changed = true,
            Err(e) => resolved.errors.push(os(
                format!(
                    "spec.roleBindings: revoking {} from {actor:?}",
                    role_name(role)
                ),
                e,
            )),
        }
    }
    if !status.pending_users.is_empty() {
        out.detail = Some(format!(
            "waiting for users to exist (granted once they log in): {}",
            status.pending_users.join(", ")
        ));
    }
    out.errors.append(&mut resolved.errors);
    out
}

/// Deletion (see [`super::cleanup_project`]).
pub(crate) async fn cleanup(
    env: &Env<'_>,
    spec: &OpenstackProjectSpec,
    status: &mut OpenstackProjectStatus,
    federation: FederationInput,
    events: &mut Vec<Note>,
) -> Result<()> {
    let identity = &env.cloud.identity;
    let domain = domain_of(env, spec).await?;
    // Without a recorded ID (crash right after the create) the project is found by name. A
    // project there that does not carry our marks (someone else's of the same name, or a
    // recorded one that was never taken over) keeps its group and mapping rule: they serve
    // it, and the group is found by name and description, so it may be the one we recorded.
    let found = find_project(env, spec, status, domain.as_ref()).await?;
    let hands_off = found
        .as_ref()
        .is_some_and(|(p, _)| env.owner.classify_tags(&p.tags) != Ownership::Ours);
    let project = found.filter(|_| !hands_off).map(|(p, _)| p);
    if status.project_id.is_none()
        && let Some(p) = &project
    {
        status.project_id = Some(p.id.clone());
    }
    let adopted = status.adopted == Some(true)
        || project
            .as_ref()
            .is_some_and(|p| p.tags.iter().any(|t| t == ADOPTED_TAG));
    let mut failures: Vec<(&'static str, ReconcileError)> = Vec::new();

    // Neutron objects are found through the project ID even when the Keystone project is
    // already gone; only objects with our marks are deleted, and, in a project that goes with
    // us, what would outlive it forever: Neutron's own `default` group and untagged objects
    // with the spec's names (a crash between their create and tag calls).
    if let Some(pid) = status.project_id.clone() {
        let own = (!adopted && !hands_off).then_some(spec);
        let mut n = super::networks::remove_all(env, &pid, own).await;
        if let Some(e) = n.error() {
            failures.push((super::NETWORKS_READY, e));
        }
        let mut s = super::security_groups::remove_all(env, &pid, own).await;
        if let Some(e) = s.error() {
            failures.push((super::SECURITY_GROUPS_READY, e));
        }
        // Keystone drops a deleted project's assignments; an adopted project stays, so the
        // grants we made go explicitly.
        if adopted && project.is_some() {
            let mut r = release_assignments(env, spec, &pid, domain.as_ref(), status).await;
            if let Some(e) = r.error() {
                failures.push((super::ROLE_BINDINGS_READY, e));
            }
        }
    }

    let group_name = project_group_name(&spec.name);
    match (status.federation_rule.clone(), federation) {
        _ if hands_off => {}
        // Where the rule is, whatever the ConfigMap says now (or whether it still exists).
        (Some(rec), _) => {
            let mut f = super::federation::remove_recorded(env, &rec).await;
            match f.error() {
                Some(e) => failures.push((super::FEDERATION_READY, e)),
                None => status.federation_rule = None,
            }
        }
        (None, FederationInput::NotRequested) => {}
        (None, FederationInput::Settings(settings)) => {
            let domain_name = domain.as_ref().map(|d| d.name.clone()).unwrap_or_default();
            let mut groups = vec![group_name.clone()];
            groups.extend(
                role_group_roles(spec)
                    .iter()
                    .map(|r| role_group_name(&spec.name, r)),
            );
            let mut f = super::federation::remove(env, &settings, &domain_name, &groups).await;
            if let Some(e) = f.error() {
                failures.push((super::FEDERATION_READY, e));
            }
        }
        // No user was ever mapped, so no rule was written: nothing to remove.
        (None, FederationInput::Unavailable(ReconcileError::DependencyMissing(_)))
            if bound_users(spec).is_empty() => {}
        (None, FederationInput::Unavailable(e)) => {
            // Keep the finalizer: a stale rule maps users into a group that no longer
            // exists (seed W13/W14). Removing spec.federationRef lets deletion go on.
            let e = match e {
                ReconcileError::DependencyMissing(m) => ReconcileError::DependencyMissing(format!(
                    "{m}, to remove this project's federation mapping rule (remove spec.federationRef to skip that)"
                )),
                other => other,
            };
            failures.push((super::FEDERATION_READY, e));
        }
    }
    if let Some(e) = combine(failures) {
        // The group and project go last, only when everything in them is gone.
        return Err(e);
    }

    if !hands_off {
        // Role groups: the recorded ones, and by name (a create whose response was lost).
        for (role, id) in status.role_groups.clone() {
            delete_role_group(env, &spec.name, &role, &id).await?;
            status.role_groups.remove(&role);
        }
        if let Some(did) = domain.as_ref().map(|d| d.id.clone()) {
            for role in role_group_roles(spec) {
                let name = role_group_name(&spec.name, &role);
                if let Some(g) = identity
                    .find_group(&did, &name)
                    .await
                    .map_err(|e| os(format!("looking up role group {name:?}"), e))?
                    && role_group_is_ours(&g, &spec.name, &role, FoundBy::Name)
                {
                    identity
                        .delete_group(&g.id)
                        .await
                        .optional()
                        .map_err(|e| os(format!("deleting role group {name:?} ({})", g.id), e))?;
                }
            }
        }
    }
    if hands_off {
        // See above: the group belongs with the project that is not ours.
    } else if let Some(did) = domain.as_ref().map(|d| d.id.clone()) {
        if let Some((g, by)) = find_group(env, spec, status, &did).await?
            && group_is_ours(&g, &spec.name, by)
        {
            identity
                .delete_group(&g.id)
                .await
                .optional()
                .map_err(|e| os(format!("deleting group {:?} ({})", g.name, g.id), e))?;
        }
    } else if let Some(gid) = &status.group_id
        && let Some(g) = identity
            .get_group(gid)
            .await
            .optional()
            .map_err(|e| os(format!("reading group {gid}"), e))?
        && group_is_ours(&g, &spec.name, FoundBy::RecordedId)
    {
        identity
            .delete_group(&g.id)
            .await
            .optional()
            .map_err(|e| os(format!("deleting group {:?} ({})", g.name, g.id), e))?;
    }
    status.group_id = None;

    if let Some(p) = project {
        if adopted {
            // It existed before us: only our marks go.
            let tags: Vec<String> = strip_marks(&p.tags)
                .into_iter()
                .filter(|t| t != ADOPTED_TAG)
                .collect();
            identity
                .update_project(
                    &p.id,
                    &ProjectUpdate {
                        tags: Some(tags),
                        ..Default::default()
                    },
                )
                .await
                .optional()
                .map_err(|e| os(format!("releasing project {}", p.id), e))?;
            events.push(Note::normal(
                "Released",
                "Delete",
                format!(
                    "left adopted Keystone project {} ({}) in place",
                    p.name, p.id
                ),
            ));
        } else {
            identity
                .delete_project(&p.id)
                .await
                .optional()
                .map_err(|e| os(format!("deleting project {}", p.id), e))?;
            events.push(Note::normal(
                "Deleted",
                "Delete",
                format!("deleted Keystone project {} ({})", p.name, p.id),
            ));
        }
    }
    Ok(())
}

/// Revokes the spec's user and group grants on an adopted project that stays behind.
async fn release_assignments(
    env: &Env<'_>,
    spec: &OpenstackProjectSpec,
    project_id: &str,
    domain: Option<&Domain>,
    status: &mut OpenstackProjectStatus,
) -> AreaOutcome {
    let mut out = AreaOutcome::default();
    let roles = match role_ids(env).await {
        Ok(r) => r,
        Err(e) => {
            out.errors.push(e);
            return out;
        }
    };
    let mut lookups = Lookups::new(env, spec, domain);
    let resolved = resolve_bindings(&mut lookups, spec, &roles).await;
    status.pending_users.clear();
    let observed = match env
        .cloud
        .identity
        .list_project_role_assignments(project_id)
        .await
    {
        Ok(a) => a,
        Err(e) => {
            out.errors.push(os("listing role assignments", e));
            return out;
        }
    };
    let managed = managed_role_ids(env.config, &roles);
    for a in observed {
        let key = (a.actor.clone(), a.role_id.clone());
        if resolved.desired.contains(&key) && managed.contains(&a.role_id) {
            match env
                .cloud
                .identity
                .revoke_project_role(project_id, &a.actor, &a.role_id)
                .await
                .optional()
            {
                Ok(_) => out.changed = true,
                Err(e) => out.errors.push(os(
                    format!("revoking role {} from {:?}", a.role_id, a.actor),
                    e,
                )),
            }
        }
    }
    // Lookup problems do not block deletion: what could not be resolved was never granted.
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::project::RoleBinding;

    fn owner() -> Owner {
        Owner {
            cluster: "c".into(),
            uid: "u".into(),
        }
    }

    fn spec() -> OpenstackProjectSpec {
        OpenstackProjectSpec {
            cloud_ref: None,
            name: "My_Project.example".into(),
            description: "d".into(),
            domain: "sso".into(),
            enabled: true,
            quotas: None,
            networks: None,
            security_groups: None,
            role_bindings: None,
            federation_ref: None,
            adopt: false,
            application_credential: None,
        }
    }

    fn project(tags: Vec<String>) -> Project {
        Project {
            id: "p1".into(),
            name: "My_Project.example".into(),
            domain_id: "d1".into(),
            description: "d".into(),
            enabled: true,
            tags,
        }
    }

    #[test]
    fn creates_project_with_marks() {
        let cfg = Config::default();
        let ProjectPlan::Create(req) =
            plan_project(&spec(), None, "d1", &owner(), &cfg, false).unwrap()
        else {
            panic!()
        };
        assert_eq!(req.tags, owner().tags());
        assert_eq!(req.domain_id, "d1");
    }

    #[test]
    fn own_project_in_sync_plans_nothing() {
        let cfg = Config::default();
        let p = project(owner().tags());
        let plan = plan_project(
            &spec(),
            Some((&p, FoundBy::RecordedId)),
            "d1",
            &owner(),
            &cfg,
            false,
        )
        .unwrap();
        assert_eq!(
            plan,
            ProjectPlan::Existing {
                id: "p1".into(),
                update: ProjectUpdate::default(),
                takeover: Takeover::None
            }
        );
    }

    #[test]
    fn description_enabled_and_name_changes_are_applied() {
        let cfg = Config::default();
        let mut p = project(owner().tags());
        p.description = "old".into();
        p.enabled = false;
        p.name = "old-name".into();
        let ProjectPlan::Existing { update, .. } = plan_project(
            &spec(),
            Some((&p, FoundBy::RecordedId)),
            "d1",
            &owner(),
            &cfg,
            false,
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(update.description.as_deref(), Some("d"));
        assert_eq!(update.enabled, Some(true));
        assert_eq!(update.name.as_deref(), Some("My_Project.example"));
        assert_eq!(update.tags, None);
    }

    #[test]
    fn domain_change_is_refused() {
        let cfg = Config::default();
        let p = project(owner().tags());
        let e = plan_project(
            &spec(),
            Some((&p, FoundBy::RecordedId)),
            "other",
            &owner(),
            &cfg,
            false,
        )
        .unwrap_err();
        assert!(e.to_string().contains("spec.domain"), "{e}");
        assert!(e.to_string().contains("create a new resource"), "{e}");
    }

    #[test]
    fn adoption_needs_spec_and_operator() {
        let p = project(vec!["x".into()]);
        let mut cfg = Config::default();
        let e = plan_project(
            &spec(),
            Some((&p, FoundBy::Name)),
            "d1",
            &owner(),
            &cfg,
            false,
        )
        .unwrap_err();
        assert!(matches!(e, ReconcileError::NotOwned(_)), "{e}");
        let mut s = spec();
        s.adopt = true;
        let e =
            plan_project(&s, Some((&p, FoundBy::Name)), "d1", &owner(), &cfg, false).unwrap_err();
        assert!(matches!(e, ReconcileError::PolicyViolation(_)), "{e}");
        assert!(e.to_string().contains("spec.adopt"), "{e}");
        cfg.allow_project_adoption = true;
        let ProjectPlan::Existing {
            update, takeover, ..
        } = plan_project(&s, Some((&p, FoundBy::Name)), "d1", &owner(), &cfg, false).unwrap()
        else {
            panic!()
        };
        assert_eq!(takeover, Takeover::Adopt);
        let tags = update.tags.unwrap();
        assert!(tags.contains(&"x".to_string()));
        assert!(tags.contains(&ADOPTED_TAG.to_string()));
        assert!(owner().tags().iter().all(|t| tags.contains(t)));
    }

    #[test]
    fn other_owner_is_never_adopted() {
        let cfg = Config {
            allow_project_adoption: true,
            ..Default::default()
        };
        let mut s = spec();
        s.adopt = true;
        let other = Owner {
            cluster: "c".into(),
            uid: "v".into(),
        };
        let p = project(other.tags());
        let e =
            plan_project(&s, Some((&p, FoundBy::Name)), "d1", &owner(), &cfg, false).unwrap_err();
        assert!(matches!(e, ReconcileError::NotOwned(_)));
        let remote = Owner {
            cluster: "c2".into(),
            uid: "u".into(),
        };
        let p = project(remote.tags());
        assert!(plan_project(&s, Some((&p, FoundBy::Name)), "d1", &owner(), &cfg, false).is_err());
    }

    #[test]
    fn legacy_project_taken_over_only_through_recorded_id() {
        let cfg = Config {
            adopt_legacy: true,
            ..Default::default()
        };
        let p = project(vec![api::naming::MANAGED_TAG.into()]);
        let ProjectPlan::Existing { takeover, .. } = plan_project(
            &spec(),
            Some((&p, FoundBy::RecordedId)),
            "d1",
            &owner(),
            &cfg,
            false,
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(takeover, Takeover::Legacy);
        // Another namespace naming a seed project cannot claim it by name.
        assert!(
            plan_project(
                &spec(),
                Some((&p, FoundBy::Name)),
                "d1",
                &owner(),
                &cfg,
                false
            )
            .is_err()
        );
    }

    #[test]
    fn group_ownership_by_description() {
        let ours = Group {
            id: "g".into(),
            name: "my-project-example-users".into(),
            domain_id: "d1".into(),
            description: project_group_description("My_Project.example"),
        };
        assert_eq!(
            plan_group("My_Project.example", Some((&ours, FoundBy::Name)), "d1").unwrap(),
            GroupPlan::Existing {
                id: "g".into(),
                update: GroupUpdate::default()
            }
        );
        // `my.project.example` sanitizes to the same group name: not ours (seed W12).
        let e = plan_group("my.project.example", Some((&ours, FoundBy::Name)), "d1").unwrap_err();
        assert!(e.to_string().contains("another project"), "{e}");
        let mut foreign = ours.clone();
        foreign.description = "made by hand".into();
        assert!(plan_group("My_Project.example", Some((&foreign, FoundBy::Name)), "d1").is_err());
        // After a project rename the recorded group is renamed with it.
        let GroupPlan::Existing { update, .. } =
            plan_group("renamed", Some((&ours, FoundBy::RecordedId)), "d1").unwrap()
        else {
            panic!()
        };
        assert_eq!(update.name.as_deref(), Some("renamed-users"));
        assert_eq!(
            update.description,
            Some(project_group_description("renamed"))
        );
    }

    fn ra(actor: Actor, role: &str) -> RoleAssignment {
        RoleAssignment {
            role_id: role.into(),
            role_name: None,
            project_id: "p".into(),
            actor,
        }
    }

    #[test]
    fn assignments_are_a_set_within_managed_roles() {
        let desired: BTreeSet<(Actor, String)> = [
            (Actor::Group("pg".into()), "member".into()),
            (Actor::User("alice".into()), "member".into()),
            (Actor::User("carol".into()), "reader".into()),
        ]
        .into();
        let observed = vec![
            ra(Actor::Group("pg".into()), "member"),
            // the seed's W6 leak: every binding's role on the shared group
            ra(Actor::Group("pg".into()), "reader"),
            ra(Actor::User("alice".into()), "member"),
            ra(Actor::User("bob".into()), "member"),
            // not a role we manage: left alone
            ra(Actor::User("svc".into()), "admin"),
        ];
        let managed: BTreeSet<String> = ["member".into(), "reader".into()].into();
        let plan = plan_assignments(&desired, &observed, &managed, true);
        assert_eq!(
            plan.grant,
            vec![(Actor::User("carol".into()), "reader".into())]
        );
        assert_eq!(
            plan.revoke,
            vec![
                (Actor::User("bob".into()), "member".into()),
                (Actor::Group("pg".into()), "reader".into()),
            ]
        );
        let cautious = plan_assignments(&desired, &observed, &managed, false);
        assert!(cautious.revoke.is_empty());
    }

    #[test]
    fn users_by_role_in_first_appearance_order() {
        let mut s = spec();
        s.role_bindings = Some(vec![
            RoleBinding {
                role: "member".into(),
                users: Some(vec!["b".into(), "a".into()]),
                groups: None,
                user_domain: None,
                group_domain: None,
            },
            RoleBinding {
                role: "reader".into(),
                users: Some(vec!["a".into(), "c".into()]),
                groups: None,
                user_domain: None,
                group_domain: None,
            },
        ]);
        assert_eq!(
            users_by_role(&s),
            vec![
                ("member".to_string(), vec!["b".to_string(), "a".to_string()]),
                ("reader".to_string(), vec!["a".to_string(), "c".to_string()]),
            ]
        );
        assert_eq!(bound_users(&s), vec!["b", "a", "c"]);
        // Role groups only with federation, and never for `member` (the project group).
        assert!(role_group_roles(&s).is_empty());
        s.federation_ref = Some(api::project::FederationRef {
            config_map_name: Some("fed".into()),
            config_map_namespace: None,
        });
        assert_eq!(role_group_roles(&s), vec!["reader"]);
    }
}
