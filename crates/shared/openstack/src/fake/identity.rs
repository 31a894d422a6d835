//! Fake Keystone.

use async_trait::async_trait;

use super::{FakeCloud, State, check_tags, dedup_tags, has_all_tags, new_hex_id};
use crate::error::{Error, Result};
use crate::model::*;
use crate::traits::Identity;

fn domain<'a>(st: &'a State, id: &str) -> Result<&'a Domain> {
    st.domains
        .get(id)
        .ok_or_else(|| Error::not_found(format!("keystone: Could not find domain: {id}.")))
}

fn project<'a>(st: &'a State, id: &str) -> Result<&'a Project> {
    st.projects
        .get(id)
        .ok_or_else(|| Error::not_found(format!("keystone: Could not find project: {id}.")))
}

fn group<'a>(st: &'a State, id: &str) -> Result<&'a Group> {
    st.groups
        .get(id)
        .ok_or_else(|| Error::not_found(format!("keystone: Could not find group: {id}.")))
}

fn user<'a>(st: &'a State, id: &str) -> Result<&'a User> {
    st.users
        .get(id)
        .ok_or_else(|| Error::not_found(format!("keystone: Could not find user: {id}.")))
}

/// Keystone's schema check of a mapping's rules: a non-empty list of rules, each with
/// `local` and `remote`.
fn check_mapping_rules(rules: &MappingRules) -> Result<()> {
    #[derive(serde::Deserialize)]
    struct Rule {
        #[allow(dead_code)] // only its presence is checked
        local: serde::de::IgnoredAny,
        #[allow(dead_code)]
        remote: serde::de::IgnoredAny,
    }
    if rules.is_empty() {
        return Err(Error::bad_request(
            "keystone: Invalid input for field 'rules': [] is too short",
        ));
    }
    for r in rules.as_slice() {
        if serde_json::from_str::<Rule>(r.get()).is_err() {
            return Err(Error::bad_request(
                "keystone: Invalid input for field 'rules': 'local' and 'remote' are required properties",
            ));
        }
    }
    Ok(())
}

fn create_domain_in(
    st: &mut State,
    name: &str,
    description: &str,
    enabled: bool,
    tags: &[String],
) -> Result<Domain> {
    check_tags("keystone create_domain", tags)?;
    if st.domains.values().any(|d| d.name == name) {
        return Err(Error::conflict(format!(
            "keystone: Conflict occurred attempting to store domain - Duplicate entry found with name {name}."
        )));
    }
    let d = Domain {
        id: new_hex_id(),
        name: name.into(),
        description: description.into(),
        enabled,
        tags: dedup_tags(tags),
    };
    st.domains.insert(d.id.clone(), d.clone());
    Ok(d)
}

#[async_trait]
impl Identity for FakeCloud {
    fn tenant_users(&self) -> Option<std::sync::Arc<dyn crate::tenant_user::TenantUsers>> {
        self.state()
            .tenant_users
            .then(|| std::sync::Arc::new(super::FakeTenantUsers::new(self.clone())) as _)
    }

    async fn get_domain(&self, id: &str) -> Result<Domain> {
        self.run("identity.get_domain", |st| domain(st, id).cloned())
            .await
    }

    async fn find_domain(&self, name: &str) -> Result<Option<Domain>> {
        self.run("identity.find_domain", |st| {
            Ok(st.domains.values().find(|d| d.name == name).cloned())
        })
        .await
    }

    async fn list_domains(&self) -> Result<Vec<Domain>> {
        self.run("identity.list_domains", |st| {
            Ok(st.domains.values().cloned().collect())
        })
        .await
    }

    async fn create_domain(&self, req: &DomainCreate) -> Result<Domain> {
        self.run("identity.create_domain", |st| {
            create_domain_in(st, &req.name, &req.description, req.enabled, &req.tags)
        })
        .await
    }

    async fn update_domain(&self, id: &str, req: &DomainUpdate) -> Result<Domain> {
        self.run("identity.update_domain", |st| {
            domain(st, id)?;
            let d = st
                .domains
                .get_mut(id)
                .ok_or_else(|| Error::not_found(id.to_string()))?;
            if let Some(desc) = &req.description {
                d.description = desc.clone();
            }
            if let Some(en) = req.enabled {
                d.enabled = en;
            }
            Ok(d.clone())
        })
        .await
    }

    async fn delete_domain(&self, id: &str) -> Result<()> {
        self.run("identity.delete_domain", |st| {
            let d = domain(st, id)?;
            if d.enabled {
                return Err(Error::forbidden(
                    "keystone: Cannot delete a domain that is enabled, please disable it first.",
                ));
            }
            // Keystone deletes everything in the domain with it.
            let projects: Vec<String> = st
                .projects
                .values()
                .filter(|p| p.domain_id == id)
                .map(|p| p.id.clone())
                .collect();
            for p in &projects {
                st.projects.remove(p);
            }
            st.assignments.retain(|(p, _, _)| !projects.contains(p));
            let groups: Vec<String> = st
                .groups
                .values()
                .filter(|g| g.domain_id == id)
                .map(|g| g.id.clone())
                .collect();
            let users: Vec<String> = st
                .users
                .values()
                .filter(|u| u.domain_id == id)
                .map(|u| u.id.clone())
                .collect();
            st.groups.retain(|g, _| !groups.contains(g));
            st.users.retain(|u, _| !users.contains(u));
            st.memberships
                .retain(|(g, u)| !groups.contains(g) && !users.contains(u));
            st.assignments.retain(|(_, a, _)| match a {
                Actor::Group(g) => !groups.contains(g),
                Actor::User(u) => !users.contains(u),
            });
            st.domains.remove(id);
            Ok(())
        })
        .await
    }

    async fn set_domain_tags(&self, id: &str, tags: &[String]) -> Result<()> {
        self.run("identity.set_domain_tags", |st| {
            check_tags("keystone set_domain_tags", tags)?;
            let d = st.domains.get_mut(id).ok_or_else(|| {
                Error::not_found(format!("keystone: Could not find project: {id}."))
            })?;
            d.tags = dedup_tags(tags);
            Ok(())
        })
        .await
    }

    async fn get_project(&self, id: &str) -> Result<Project> {
        self.run("identity.get_project", |st| project(st, id).cloned())
            .await
    }

    async fn find_project(&self, domain_id: &str, name: &str) -> Result<Option<Project>> {
        self.run("identity.find_project", |st| {
            Ok(st
                .projects
                .values()
                .find(|p| p.domain_id == domain_id && p.name == name)
                .cloned())
        })
        .await
    }

    async fn list_projects(&self, filter: &ProjectFilter) -> Result<Vec<Project>> {
        self.run("identity.list_projects", |st| {
            Ok(st
                .projects
                .values()
                .filter(|p| filter.domain_id.as_ref().is_none_or(|d| &p.domain_id == d))
                .filter(|p| filter.name.as_ref().is_none_or(|n| &p.name == n))
                .filter(|p| has_all_tags(&p.tags, &filter.tags))
                .cloned()
                .collect())
        })
        .await
    }

    async fn create_project(&self, req: &ProjectCreate) -> Result<Project> {
        self.run("identity.create_project", |st| {
            check_tags("keystone create_project", &req.tags)?;
            domain(st, &req.domain_id)?;
            if st
                .projects
                .values()
                .any(|p| p.domain_id == req.domain_id && p.name == req.name)
            {
                return Err(Error::conflict(format!(
                    "keystone: Conflict occurred attempting to store project - it is not permitted to have two projects with the same name in the same domain : {}.",
                    req.name
                )));
            }
            let p = Project {
                id: new_hex_id(),
                name: req.name.clone(),
                domain_id: req.domain_id.clone(),
                description: req.description.clone(),
                enabled: req.enabled,
                tags: dedup_tags(&req.tags),
            };
            st.projects.insert(p.id.clone(), p.clone());
            Ok(p)
        }).await
    }

    async fn update_project(&self, id: &str, req: &ProjectUpdate) -> Result<Project> {
        self.run("identity.update_project", |st| {
            let cur = project(st, id)?.clone();
            if let Some(tags) = &req.tags {
                check_tags("keystone update_project", tags)?;
            }
            if let Some(name) = &req.name
                && st
                    .projects
                    .values()
                    .any(|p| p.id != id && p.domain_id == cur.domain_id && &p.name == name)
            {
                return Err(Error::conflict(format!(
                    "keystone: Conflict occurred attempting to store project - it is not permitted to have two projects with the same name in the same domain : {name}."
                )));
            }
            let p = st
                .projects
                .get_mut(id)
                .ok_or_else(|| Error::not_found(id.to_string()))?;
            if let Some(v) = &req.name {
                p.name = v.clone();
            }
            if let Some(v) = &req.description {
                p.description = v.clone();
            }
            if let Some(v) = req.enabled {
                p.enabled = v;
            }
            if let Some(v) = &req.tags {
                p.tags = dedup_tags(v);
            }
            Ok(p.clone())
        }).await
    }

    async fn delete_project(&self, id: &str) -> Result<()> {
        self.run("identity.delete_project", |st| {
            project(st, id)?;
            st.projects.remove(id);
            st.assignments.retain(|(p, _, _)| p != id);
            Ok(())
        })
        .await
    }

    async fn get_group(&self, id: &str) -> Result<Group> {
        self.run("identity.get_group", |st| group(st, id).cloned())
            .await
    }

    async fn find_group(&self, domain_id: &str, name: &str) -> Result<Option<Group>> {
        self.run("identity.find_group", |st| {
            Ok(st
                .groups
                .values()
                .find(|g| g.domain_id == domain_id && g.name == name)
                .cloned())
        })
        .await
    }

    async fn list_groups(&self, domain_id: Option<&str>) -> Result<Vec<Group>> {
        self.run("identity.list_groups", |st| {
            Ok(st
                .groups
                .values()
                .filter(|g| domain_id.is_none_or(|d| g.domain_id == d))
                .cloned()
                .collect())
        })
        .await
    }

    async fn create_group(&self, req: &GroupCreate) -> Result<Group> {
        self.run("identity.create_group", |st| {
            domain(st, &req.domain_id)?;
            if st
                .groups
                .values()
                .any(|g| g.domain_id == req.domain_id && g.name == req.name)
            {
                return Err(Error::conflict(format!(
                    "keystone: Conflict occurred attempting to store group - Duplicate entry found with name {} at domain ID {}.",
                    req.name, req.domain_id
                )));
            }
            let g = Group {
                id: new_hex_id(),
                name: req.name.clone(),
                domain_id: req.domain_id.clone(),
                description: req.description.clone(),
            };
            st.groups.insert(g.id.clone(), g.clone());
            Ok(g)
        }).await
    }

    async fn update_group(&self, id: &str, req: &GroupUpdate) -> Result<Group> {
        self.run("identity.update_group", |st| {
            let cur = group(st, id)?.clone();
            if let Some(name) = &req.name
                && st
                    .groups
                    .values()
                    .any(|g| g.id != id && g.domain_id == cur.domain_id && &g.name == name)
            {
                return Err(Error::conflict(format!(
                    "keystone: Conflict occurred attempting to store group - Duplicate entry found with name {name} at domain ID {}.",
                    cur.domain_id
                )));
            }
            let g = st
                .groups
                .get_mut(id)
                .ok_or_else(|| Error::not_found(id.to_string()))?;
            if let Some(v) = &req.name {
                g.name = v.clone();
            }
            if let Some(v) = &req.description {
                g.description = v.clone();
            }
            Ok(g.clone())
        }).await
    }

    async fn delete_group(&self, id: &str) -> Result<()> {
        self.run("identity.delete_group", |st| {
            group(st, id)?;
            st.groups.remove(id);
            st.memberships.retain(|(g, _)| g != id);
            st.assignments
                .retain(|(_, a, _)| a != &Actor::Group(id.to_string()));
            Ok(())
        })
        .await
    }

    async fn list_group_users(&self, group_id: &str) -> Result<Vec<User>> {
        self.run("identity.list_group_users", |st| {
            group(st, group_id)?;
            Ok(st
                .memberships
                .iter()
                .filter(|(g, _)| g == group_id)
                .filter_map(|(_, u)| st.users.get(u).cloned())
                .collect())
        })
        .await
    }

    async fn add_user_to_group(&self, group_id: &str, user_id: &str) -> Result<()> {
        self.run("identity.add_user_to_group", |st| {
            group(st, group_id)?;
            user(st, user_id)?;
            st.memberships.insert((group_id.into(), user_id.into()));
            Ok(())
        })
        .await
    }

    async fn remove_user_from_group(&self, group_id: &str, user_id: &str) -> Result<()> {
        self.run("identity.remove_user_from_group", |st| {
            group(st, group_id)?;
            user(st, user_id)?;
            if !st
                .memberships
                .remove(&(group_id.to_string(), user_id.to_string()))
            {
                return Err(Error::not_found(format!(
                    "keystone: User '{user_id}' not found in group '{group_id}'"
                )));
            }
            Ok(())
        })
        .await
    }

    async fn get_user(&self, id: &str) -> Result<User> {
        self.run("identity.get_user", |st| user(st, id).cloned())
            .await
    }

    async fn find_user(&self, domain_id: &str, name: &str) -> Result<Option<User>> {
        self.run("identity.find_user", |st| {
            Ok(st
                .users
                .values()
                .find(|u| u.domain_id == domain_id && u.name == name)
                .cloned())
        })
        .await
    }

    async fn find_role(&self, name: &str) -> Result<Option<Role>> {
        self.run("identity.find_role", |st| {
            Ok(st
                .roles
                .values()
                .find(|r| r.name == name && r.domain_id.is_none())
                .cloned())
        })
        .await
    }

    async fn list_roles(&self) -> Result<Vec<Role>> {
        self.run("identity.list_roles", |st| {
            Ok(st.roles.values().cloned().collect())
        })
        .await
    }

    async fn list_project_role_assignments(&self, project_id: &str) -> Result<Vec<RoleAssignment>> {
        self.run("identity.list_project_role_assignments", |st| {
            Ok(st
                .assignments
                .iter()
                .filter(|(p, _, _)| p == project_id)
                .map(|(p, a, r)| RoleAssignment {
                    role_id: r.clone(),
                    role_name: st.roles.get(r).map(|r| r.name.clone()),
                    project_id: p.clone(),
                    actor: a.clone(),
                })
                .collect())
        })
        .await
    }

    async fn list_domain_role_assignments(&self, domain_id: &str) -> Result<Vec<RoleAssignment>> {
        self.run("identity.list_domain_role_assignments", |st| {
            Ok(st
                .assignments
                .iter()
                .filter(|(p, _, _)| st.projects.get(p).is_some_and(|p| p.domain_id == domain_id))
                .map(|(p, a, r)| RoleAssignment {
                    role_id: r.clone(),
                    role_name: st.roles.get(r).map(|r| r.name.clone()),
                    project_id: p.clone(),
                    actor: a.clone(),
                })
                .collect())
        })
        .await
    }

    async fn grant_project_role(
        &self,
        project_id: &str,
        actor: &Actor,
        role_id: &str,
    ) -> Result<()> {
        self.run("identity.grant_project_role", |st| {
            project(st, project_id)?;
            match actor {
                Actor::User(u) => user(st, u).map(|_| ())?,
                Actor::Group(g) => group(st, g).map(|_| ())?,
            }
            if !st.roles.contains_key(role_id) {
                return Err(Error::not_found(format!(
                    "keystone: Could not find role: {role_id}."
                )));
            }
            st.assignments
                .insert((project_id.into(), actor.clone(), role_id.into()));
            Ok(())
        })
        .await
    }

    async fn revoke_project_role(
        &self,
        project_id: &str,
        actor: &Actor,
        role_id: &str,
    ) -> Result<()> {
        self.run("identity.revoke_project_role", |st| {
            if !st.assignments.remove(&(
                project_id.to_string(),
                actor.clone(),
                role_id.to_string(),
            )) {
                return Err(Error::not_found(format!(
                    "keystone: Could not find role assignment with role: {role_id}, user or group: {actor:?}, project, domain, or system: {project_id}."
                )));
            }
            Ok(())
        }).await
    }

    async fn get_identity_provider(&self, id: &str) -> Result<IdentityProvider> {
        self.run("identity.get_identity_provider", |st| {
            st.idps.get(id).cloned().ok_or_else(|| {
                Error::not_found(format!("keystone: Could not find Identity Provider: {id}."))
            })
        })
        .await
    }

    async fn create_identity_provider(
        &self,
        req: &IdentityProviderCreate,
    ) -> Result<IdentityProvider> {
        self.run("identity.create_identity_provider", |st| {
            if st.idps.contains_key(&req.id) {
                return Err(Error::conflict(format!(
                    "keystone: Conflict occurred attempting to store identity_provider - Duplicate entry found with ID {}.",
                    req.id
                )));
            }
            if let Some(dup) = req
                .remote_ids
                .iter()
                .find(|r| st.idps.values().any(|i| i.remote_ids.contains(r)))
            {
                return Err(Error::conflict(format!(
                    "keystone: Conflict occurred attempting to store identity_provider - Duplicate remote ID: {dup}."
                )));
            }
            let domain_id = match &req.domain_id {
                Some(d) => {
                    domain(st, d)?;
                    d.clone()
                }
                // Keystone creates a domain for the IdP when none is given.
                None => {
                    create_domain_in(
                        st,
                        &req.id,
                        &format!("Auto generated federated domain for Identity Provider: {}", req.id),
                        true,
                        &[],
                    )?
                    .id
                }
            };
            let idp = IdentityProvider {
                id: req.id.clone(),
                enabled: req.enabled,
                description: req.description.clone().unwrap_or_default(),
                remote_ids: req.remote_ids.clone(),
                domain_id: Some(domain_id),
            };
            st.idps.insert(idp.id.clone(), idp.clone());
            Ok(idp)
        }).await
    }

    async fn update_identity_provider(
        &self,
        id: &str,
        req: &IdentityProviderUpdate,
    ) -> Result<IdentityProvider> {
        self.run("identity.update_identity_provider", |st| {
            if !st.idps.contains_key(id) {
                return Err(Error::not_found(format!(
                    "keystone: Could not find Identity Provider: {id}."
                )));
            }
            if let Some(rids) = &req.remote_ids
                && let Some(dup) = rids.iter().find(|r| {
                    st.idps
                        .values()
                        .any(|i| i.id != id && i.remote_ids.contains(r))
                })
            {
                return Err(Error::conflict(format!(
                    "keystone: Conflict occurred attempting to store identity_provider - Duplicate remote ID: {dup}."
                )));
            }
            let idp = st
                .idps
                .get_mut(id)
                .ok_or_else(|| Error::not_found(id.to_string()))?;
            if let Some(v) = &req.remote_ids {
                idp.remote_ids = v.clone();
            }
            if let Some(v) = req.enabled {
                idp.enabled = v;
            }
            if let Some(v) = &req.description {
                idp.description = v.clone();
            }
            Ok(idp.clone())
        }).await
    }

    async fn delete_identity_provider(&self, id: &str) -> Result<()> {
        self.run("identity.delete_identity_provider", |st| {
            if st.idps.remove(id).is_none() {
                return Err(Error::not_found(format!(
                    "keystone: Could not find Identity Provider: {id}."
                )));
            }
            st.protocols.retain(|(i, _), _| i != id);
            Ok(())
        })
        .await
    }

    async fn get_mapping(&self, id: &str) -> Result<Mapping> {
        self.run("identity.get_mapping", |st| {
            st.mappings
                .get(id)
                .cloned()
                .ok_or_else(|| Error::not_found(format!("keystone: Could not find Mapping: {id}.")))
        })
        .await
    }

    async fn create_mapping(&self, id: &str, rules: &MappingRules) -> Result<Mapping> {
        self.run("identity.create_mapping", |st| {
            check_mapping_rules(rules)?;
            if st.mappings.contains_key(id) {
                return Err(Error::conflict(format!(
                    "keystone: Conflict occurred attempting to store mapping - Duplicate entry found with ID {id}."
                )));
            }
            let m = Mapping {
                id: id.into(),
                rules: rules.clone(),
            };
            st.mappings.insert(id.into(), m.clone());
            Ok(m)
        }).await
    }

    async fn update_mapping(&self, id: &str, rules: &MappingRules) -> Result<Mapping> {
        self.run("identity.update_mapping", |st| {
            check_mapping_rules(rules)?;
            let m = st.mappings.get_mut(id).ok_or_else(|| {
                Error::not_found(format!("keystone: Could not find Mapping: {id}."))
            })?;
            m.rules = rules.clone();
            Ok(m.clone())
        })
        .await
    }

    async fn delete_mapping(&self, id: &str) -> Result<()> {
        self.run("identity.delete_mapping", |st| {
            st.mappings
                .remove(id)
                .map(|_| ())
                .ok_or_else(|| Error::not_found(format!("keystone: Could not find Mapping: {id}.")))
        })
        .await
    }

    async fn get_federation_protocol(
        &self,
        idp_id: &str,
        protocol_id: &str,
    ) -> Result<FederationProtocol> {
        self.run("identity.get_federation_protocol", |st| {
            st.protocols
                .get(&(idp_id.to_string(), protocol_id.to_string()))
                .cloned()
                .ok_or_else(|| {
                    Error::not_found(format!(
                        "keystone: Could not find federated protocol {protocol_id} for Identity Provider: {idp_id}."
                    ))
                })
        }).await
    }

    async fn create_federation_protocol(
        &self,
        idp_id: &str,
        protocol_id: &str,
        mapping_id: &str,
    ) -> Result<FederationProtocol> {
        self.run("identity.create_federation_protocol", |st| {
            if !st.idps.contains_key(idp_id) {
                return Err(Error::not_found(format!(
                    "keystone: Could not find Identity Provider: {idp_id}."
                )));
            }
            if !st.mappings.contains_key(mapping_id) {
                return Err(Error::not_found(format!(
                    "keystone: Could not find Mapping: {mapping_id}."
                )));
            }
            let key = (idp_id.to_string(), protocol_id.to_string());
            if st.protocols.contains_key(&key) {
                return Err(Error::conflict(format!(
                    "keystone: Conflict occurred attempting to store federation_protocol - Duplicate entry found with ID {protocol_id}."
                )));
            }
            let p = FederationProtocol {
                id: protocol_id.into(),
                idp_id: idp_id.into(),
                mapping_id: mapping_id.into(),
            };
            st.protocols.insert(key, p.clone());
            Ok(p)
        }).await
    }

    async fn update_federation_protocol(
        &self,
        idp_id: &str,
        protocol_id: &str,
        mapping_id: &str,
    ) -> Result<FederationProtocol> {
        self.run("identity.update_federation_protocol", |st| {
            if !st.mappings.contains_key(mapping_id) {
                return Err(Error::not_found(format!(
                    "keystone: Could not find Mapping: {mapping_id}."
                )));
            }
            let p = st
                .protocols
                .get_mut(&(idp_id.to_string(), protocol_id.to_string()))
                .ok_or_else(|| {
                    Error::not_found(format!(
                        "keystone: Could not find federated protocol {protocol_id} for Identity Provider: {idp_id}."
                    ))
                })?;
            p.mapping_id = mapping_id.into();
            Ok(p.clone())
        }).await
    }

    async fn delete_federation_protocol(&self, idp_id: &str, protocol_id: &str) -> Result<()> {
        self.run("identity.delete_federation_protocol", |st| {
            st.protocols
                .remove(&(idp_id.to_string(), protocol_id.to_string()))
                .map(|_| ())
                .ok_or_else(|| {
                    Error::not_found(format!(
                        "keystone: Could not find federated protocol {protocol_id} for Identity Provider: {idp_id}."
                    ))
                })
        }).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::OptionalExt;

    #[tokio::test]
    async fn domain_lifecycle_and_cascade() {
        let fake = FakeCloud::new();
        let d = fake
            .create_domain(&DomainCreate {
                name: "dom".into(),
                description: "x".into(),
                enabled: true,
                tags: vec![],
            })
            .await
            .unwrap();
        let p = fake
            .create_project(&ProjectCreate {
                name: "p".into(),
                domain_id: d.id.clone(),
                description: String::new(),
                enabled: true,
                tags: vec!["managed-by-openstack-operator".into()],
            })
            .await
            .unwrap();
        let dup = fake
            .create_project(&ProjectCreate {
                name: "p".into(),
                domain_id: d.id.clone(),
                ..Default::default()
            })
            .await;
        assert!(dup.unwrap_err().is_conflict());
        let e = fake.delete_domain(&d.id).await.unwrap_err();
        assert!(matches!(e, Error::Forbidden { .. }));
        fake.update_domain(
            &d.id,
            &DomainUpdate {
                enabled: Some(false),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        fake.delete_domain(&d.id).await.unwrap();
        assert!(fake.get_project(&p.id).await.optional().unwrap().is_none());
    }

    #[tokio::test]
    async fn projects_by_tag_and_assignments() {
        let fake = FakeCloud::new();
        let tag = "managed-by-openstack-operator".to_string();
        let p = fake
            .create_project(&ProjectCreate {
                name: "tagged".into(),
                domain_id: "default".into(),
                enabled: true,
                tags: vec![tag.clone()],
                ..Default::default()
            })
            .await
            .unwrap();
        let found = fake
            .list_projects(&ProjectFilter {
                tags: vec![tag],
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(found, vec![p.clone()]);

        let g = fake
            .create_group(&GroupCreate {
                name: "g".into(),
                domain_id: "default".into(),
                description: String::new(),
            })
            .await
            .unwrap();
        let member = fake.find_role("member").await.unwrap().unwrap();
        let actor = Actor::Group(g.id.clone());
        fake.grant_project_role(&p.id, &actor, &member.id)
            .await
            .unwrap();
        fake.grant_project_role(&p.id, &actor, &member.id)
            .await
            .unwrap();
        let ra = fake.list_project_role_assignments(&p.id).await.unwrap();
        assert_eq!(ra.len(), 1);
        assert_eq!(ra[0].role_name.as_deref(), Some("member"));
        fake.revoke_project_role(&p.id, &actor, &member.id)
            .await
            .unwrap();
        assert!(
            fake.revoke_project_role(&p.id, &actor, &member.id)
                .await
                .unwrap_err()
                .is_not_found()
        );

        let u = fake.add_user("default", "alice");
        fake.add_user_to_group(&g.id, &u.id).await.unwrap();
        assert_eq!(fake.list_group_users(&g.id).await.unwrap(), vec![u.clone()]);
        fake.remove_user_from_group(&g.id, &u.id).await.unwrap();
        assert!(fake.list_group_users(&g.id).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn federation_objects() {
        let fake = FakeCloud::new();
        let idp = fake
            .create_identity_provider(&IdentityProviderCreate {
                id: "sso".into(),
                remote_ids: vec!["https://issuer".into()],
                enabled: true,
                domain_id: None,
                description: None,
            })
            .await
            .unwrap();
        assert!(idp.domain_id.is_some());
        let e = fake
            .create_identity_provider(&IdentityProviderCreate {
                id: "other".into(),
                remote_ids: vec!["https://issuer".into()],
                enabled: true,
                domain_id: Some("default".into()),
                description: None,
            })
            .await
            .unwrap_err();
        assert!(e.is_conflict());
        let rules = MappingRules::from_values(&[
            serde_json::json!({"local": [], "remote": [{"type": "HTTP_OIDC_SUB"}]}),
        ])
        .unwrap();
        assert!(
            fake.create_mapping("m", &MappingRules::default())
                .await
                .is_err()
        );
        let no_remote = MappingRules::from_values(&[serde_json::json!({"local": []})]).unwrap();
        assert!(fake.create_mapping("m", &no_remote).await.is_err());
        fake.create_mapping("m", &rules).await.unwrap();
        fake.create_federation_protocol("sso", "openid", "m")
            .await
            .unwrap();
        fake.delete_identity_provider("sso").await.unwrap();
        assert!(
            fake.get_federation_protocol("sso", "openid")
                .await
                .unwrap_err()
                .is_not_found()
        );
    }
}
