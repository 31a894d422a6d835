//! Keystone (identity v3) adapter.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{Core, Request, Service, seg};
use crate::error::Result;
use crate::model::*;
use crate::traits::Identity;

const S: Service = Service::Identity;

/// The Keystone port.
#[derive(Clone, Debug)]
pub struct IdentityAdapter {
    core: Core,
}

impl IdentityAdapter {
    /// Keystone on `core`.
    pub fn new(core: Core) -> Self {
        Self { core }
    }
}

#[derive(Deserialize)]
struct WireDomain {
    id: String,
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    enabled: bool,
    #[serde(default)]
    tags: Vec<String>,
}

impl From<WireDomain> for Domain {
    fn from(w: WireDomain) -> Self {
        Self {
            id: w.id,
            name: w.name,
            description: w.description.unwrap_or_default(),
            enabled: w.enabled,
            tags: w.tags,
        }
    }
}

#[derive(Deserialize)]
struct WireProject {
    id: String,
    name: String,
    #[serde(default)]
    domain_id: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    enabled: bool,
    #[serde(default)]
    tags: Vec<String>,
}

impl From<WireProject> for Project {
    fn from(w: WireProject) -> Self {
        Self {
            id: w.id,
            name: w.name,
            domain_id: w.domain_id.unwrap_or_default(),
            description: w.description.unwrap_or_default(),
            enabled: w.enabled,
            tags: w.tags,
        }
    }
}

#[derive(Deserialize)]
struct WireGroup {
    id: String,
    name: String,
    #[serde(default)]
    domain_id: Option<String>,
    #[serde(default)]
    description: Option<String>,
}

impl From<WireGroup> for Group {
    fn from(w: WireGroup) -> Self {
        Self {
            id: w.id,
            name: w.name,
            domain_id: w.domain_id.unwrap_or_default(),
            description: w.description.unwrap_or_default(),
        }
    }
}

#[derive(Deserialize)]
struct WireUser {
    id: String,
    name: String,
    #[serde(default)]
    domain_id: Option<String>,
    #[serde(default)]
    enabled: Option<bool>,
}

impl From<WireUser> for User {
    fn from(w: WireUser) -> Self {
        Self {
            id: w.id,
            name: w.name,
            domain_id: w.domain_id.unwrap_or_default(),
            // Keystone omits `enabled` for some backends; absent means enabled.
            enabled: w.enabled.unwrap_or(true),
        }
    }
}

#[derive(Deserialize)]
struct WireRole {
    id: String,
    name: String,
    #[serde(default)]
    domain_id: Option<String>,
}

impl From<WireRole> for Role {
    fn from(w: WireRole) -> Self {
        Self {
            id: w.id,
            name: w.name,
            domain_id: w.domain_id,
        }
    }
}

#[derive(Deserialize)]
struct WireIdp {
    id: String,
    #[serde(default)]
    enabled: bool,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    remote_ids: Vec<String>,
    #[serde(default)]
    domain_id: Option<String>,
}

impl From<WireIdp> for IdentityProvider {
    fn from(w: WireIdp) -> Self {
        Self {
            id: w.id,
            enabled: w.enabled,
            description: w.description.unwrap_or_default(),
            remote_ids: w.remote_ids,
            domain_id: w.domain_id,
        }
    }
}

#[derive(Deserialize)]
struct WireProtocol {
    id: String,
    mapping_id: String,
}

#[derive(Deserialize)]
struct IdRef {
    id: String,
    #[serde(default)]
    name: Option<String>,
}

#[derive(Deserialize)]
struct WireAssignment {
    role: IdRef,
    #[serde(default)]
    user: Option<IdRef>,
    #[serde(default)]
    group: Option<IdRef>,
    #[serde(default)]
    scope: Value,
}

/// A JSON object of only the `Some` fields.
fn object(fields: &[(&str, Option<Value>)]) -> Value {
    let mut m = Map::new();
    for (k, v) in fields {
        if let Some(v) = v {
            m.insert((*k).to_string(), v.clone());
        }
    }
    Value::Object(m)
}

fn actor_path(actor: &Actor) -> String {
    match actor {
        Actor::User(u) => format!("users/{}", seg(u)),
        Actor::Group(g) => format!("groups/{}", seg(g)),
    }
}

impl IdentityAdapter {
    async fn fetch<T: serde::de::DeserializeOwned>(&self, req: Request, key: &str) -> Result<T> {
        self.core.send(&req).await?.json_at(key)
    }

    async fn send(&self, req: Request) -> Result<()> {
        self.core.send(&req).await.map(|_| ())
    }

    /// A mapping from the response, its rules decoded straight from the body as text
    /// ([`super::Response::json_at`] would build every rule as a `Value` first).
    async fn fetch_mapping(&self, req: Request) -> Result<Mapping> {
        #[derive(Deserialize)]
        struct Body {
            mapping: Mapping,
        }
        self.core
            .send(&req)
            .await?
            .json::<Body>()
            .map(|b| b.mapping)
    }
}

/// The body of a mapping write: `{"mapping": {"rules": [...]}}`, the rules' text as held.
#[derive(serde::Serialize)]
struct MappingBody<'a> {
    mapping: MappingRulesBody<'a>,
}

#[derive(serde::Serialize)]
struct MappingRulesBody<'a> {
    rules: &'a MappingRules,
}

impl<'a> MappingBody<'a> {
    fn of(rules: &'a MappingRules) -> Self {
        MappingBody {
            mapping: MappingRulesBody { rules },
        }
    }
}

#[async_trait]
impl Identity for IdentityAdapter {
    fn tenant_users(&self) -> Option<std::sync::Arc<dyn crate::tenant_user::TenantUsers>> {
        Some(std::sync::Arc::new(
            crate::tenant_user::TenantUserAdapter::new(self.core.clone()),
        ))
    }

    async fn get_domain(&self, id: &str) -> Result<Domain> {
        let w: WireDomain = self
            .fetch(
                Request::get(S, "get_domain", format!("domains/{}", seg(id))),
                "domain",
            )
            .await?;
        Ok(w.into())
    }

    async fn find_domain(&self, name: &str) -> Result<Option<Domain>> {
        let v: Vec<WireDomain> = self
            .fetch(
                Request::get(S, "find_domain", "domains").query("name", name),
                "domains",
            )
            .await?;
        Ok(v.into_iter().find(|d| d.name == name).map(Into::into))
    }

    async fn list_domains(&self) -> Result<Vec<Domain>> {
        let v: Vec<WireDomain> = self
            .fetch(Request::get(S, "list_domains", "domains"), "domains")
            .await?;
        Ok(v.into_iter().map(Into::into).collect())
    }

    async fn create_domain(&self, req: &DomainCreate) -> Result<Domain> {
        let body = json!({"domain": {
            "name": req.name,
            "description": req.description,
            "enabled": req.enabled,
            "tags": req.tags,
        }});
        let w: WireDomain = self
            .fetch(
                Request::post(S, "create_domain", "domains").json(&body)?,
                "domain",
            )
            .await?;
        Ok(w.into())
    }

    async fn update_domain(&self, id: &str, req: &DomainUpdate) -> Result<Domain> {
        let body = json!({"domain": object(&[
            ("description", req.description.clone().map(Value::from)),
            ("enabled", req.enabled.map(Value::from)),
        ])});
        let w: WireDomain = self
            .fetch(
                Request::patch(S, "update_domain", format!("domains/{}", seg(id))).json(&body)?,
                "domain",
            )
            .await?;
        Ok(w.into())
    }

    async fn delete_domain(&self, id: &str) -> Result<()> {
        self.send(Request::delete(
            S,
            "delete_domain",
            format!("domains/{}", seg(id)),
        ))
        .await
    }

    async fn set_domain_tags(&self, id: &str, tags: &[String]) -> Result<()> {
        // Verified on Keystone 29 (2026.1): a domain is a project with
        // is_domain=true, and the project tag API accepts its ID; the tags
        // then show up in GET /v3/domains/{id}.
        let body = json!({ "tags": tags });
        self.send(
            Request::put(S, "set_domain_tags", format!("projects/{}/tags", seg(id))).json(&body)?,
        )
        .await
    }

    async fn get_project(&self, id: &str) -> Result<Project> {
        let w: WireProject = self
            .fetch(
                Request::get(S, "get_project", format!("projects/{}", seg(id))),
                "project",
            )
            .await?;
        Ok(w.into())
    }

    async fn find_project(&self, domain_id: &str, name: &str) -> Result<Option<Project>> {
        let v: Vec<WireProject> = self
            .fetch(
                Request::get(S, "find_project", "projects")
                    .query("domain_id", domain_id)
                    .query("name", name),
                "projects",
            )
            .await?;
        Ok(v.into_iter()
            .find(|p| p.name == name && p.domain_id.as_deref() == Some(domain_id))
            .map(Into::into))
    }

    async fn list_projects(&self, filter: &ProjectFilter) -> Result<Vec<Project>> {
        let mut req = Request::get(S, "list_projects", "projects")
            .query_opt("domain_id", filter.domain_id.clone())
            .query_opt("name", filter.name.clone());
        if !filter.tags.is_empty() {
            // `tags` = all of these (comma-separated), per the Keystone API.
            req = req.query("tags", filter.tags.join(","));
        }
        let v: Vec<WireProject> = self.fetch(req, "projects").await?;
        Ok(v.into_iter().map(Into::into).collect())
    }

    async fn create_project(&self, req: &ProjectCreate) -> Result<Project> {
        let body = json!({"project": {
            "name": req.name,
            "domain_id": req.domain_id,
            "description": req.description,
            "enabled": req.enabled,
            "tags": req.tags,
        }});
        let w: WireProject = self
            .fetch(
                Request::post(S, "create_project", "projects").json(&body)?,
                "project",
            )
            .await?;
        Ok(w.into())
    }

    async fn update_project(&self, id: &str, req: &ProjectUpdate) -> Result<Project> {
        let body = json!({"project": object(&[
            ("name", req.name.clone().map(Value::from)),
            ("description", req.description.clone().map(Value::from)),
            ("enabled", req.enabled.map(Value::from)),
            ("tags", req.tags.clone().map(Value::from)),
        ])});
        let w: WireProject = self
            .fetch(
                Request::patch(S, "update_project", format!("projects/{}", seg(id))).json(&body)?,
                "project",
            )
            .await?;
        Ok(w.into())
    }

    async fn delete_project(&self, id: &str) -> Result<()> {
        self.send(Request::delete(
            S,
            "delete_project",
            format!("projects/{}", seg(id)),
        ))
        .await
    }

    async fn get_group(&self, id: &str) -> Result<Group> {
        let w: WireGroup = self
            .fetch(
                Request::get(S, "get_group", format!("groups/{}", seg(id))),
                "group",
            )
            .await?;
        Ok(w.into())
    }

    async fn find_group(&self, domain_id: &str, name: &str) -> Result<Option<Group>> {
        let v: Vec<WireGroup> = self
            .fetch(
                Request::get(S, "find_group", "groups")
                    .query("domain_id", domain_id)
                    .query("name", name),
                "groups",
            )
            .await?;
        Ok(v.into_iter()
            .find(|g| g.name == name && g.domain_id.as_deref() == Some(domain_id))
            .map(Into::into))
    }

    async fn list_groups(&self, domain_id: Option<&str>) -> Result<Vec<Group>> {
        let v: Vec<WireGroup> = self
            .fetch(
                Request::get(S, "list_groups", "groups").query_opt("domain_id", domain_id),
                "groups",
            )
            .await?;
        Ok(v.into_iter().map(Into::into).collect())
    }

    async fn create_group(&self, req: &GroupCreate) -> Result<Group> {
        let body = json!({"group": {
            "name": req.name,
            "domain_id": req.domain_id,
            "description": req.description,
        }});
        let w: WireGroup = self
            .fetch(
                Request::post(S, "create_group", "groups").json(&body)?,
                "group",
            )
            .await?;
        Ok(w.into())
    }

    async fn update_group(&self, id: &str, req: &GroupUpdate) -> Result<Group> {
        let body = json!({"group": object(&[
            ("name", req.name.clone().map(Value::from)),
            ("description", req.description.clone().map(Value::from)),
        ])});
        let w: WireGroup = self
            .fetch(
                Request::patch(S, "update_group", format!("groups/{}", seg(id))).json(&body)?,
                "group",
            )
            .await?;
        Ok(w.into())
    }

    async fn delete_group(&self, id: &str) -> Result<()> {
        self.send(Request::delete(
            S,
            "delete_group",
            format!("groups/{}", seg(id)),
        ))
        .await
    }

    async fn list_group_users(&self, group_id: &str) -> Result<Vec<User>> {
        let v: Vec<WireUser> = self
            .fetch(
                Request::get(
                    S,
                    "list_group_users",
                    format!("groups/{}/users", seg(group_id)),
                ),
                "users",
            )
            .await?;
        Ok(v.into_iter().map(Into::into).collect())
    }

    async fn add_user_to_group(&self, group_id: &str, user_id: &str) -> Result<()> {
        self.send(Request::put(
            S,
            "add_user_to_group",
            format!("groups/{}/users/{}", seg(group_id), seg(user_id)),
        ))
        .await
    }

    async fn remove_user_from_group(&self, group_id: &str, user_id: &str) -> Result<()> {
        self.send(Request::delete(
            S,
            "remove_user_from_group",
            format!("groups/{}/users/{}", seg(group_id), seg(user_id)),
        ))
        .await
    }

    async fn get_user(&self, id: &str) -> Result<User> {
        let w: WireUser = self
            .fetch(
                Request::get(S, "get_user", format!("users/{}", seg(id))),
                "user",
            )
            .await?;
        Ok(w.into())
    }

    async fn find_user(&self, domain_id: &str, name: &str) -> Result<Option<User>> {
        let v: Vec<WireUser> = self
            .fetch(
                Request::get(S, "find_user", "users")
                    .query("domain_id", domain_id)
                    .query("name", name),
                "users",
            )
            .await?;
        Ok(v.into_iter()
            .find(|u| u.name == name && u.domain_id.as_deref() == Some(domain_id))
            .map(Into::into))
    }

    async fn find_role(&self, name: &str) -> Result<Option<Role>> {
        let v: Vec<WireRole> = self
            .fetch(
                Request::get(S, "find_role", "roles").query("name", name),
                "roles",
            )
            .await?;
        Ok(v.into_iter()
            .find(|r| r.name == name && r.domain_id.is_none())
            .map(Into::into))
    }

    async fn list_roles(&self) -> Result<Vec<Role>> {
        let v: Vec<WireRole> = self
            .fetch(Request::get(S, "list_roles", "roles"), "roles")
            .await?;
        Ok(v.into_iter().map(Into::into).collect())
    }

    async fn list_project_role_assignments(&self, project_id: &str) -> Result<Vec<RoleAssignment>> {
        let v: Vec<WireAssignment> = self
            .fetch(
                Request::get(S, "list_project_role_assignments", "role_assignments")
                    .query("scope.project.id", project_id)
                    .query("include_names", "true"),
                "role_assignments",
            )
            .await?;
        Ok(v.into_iter()
            // Inherited assignments apply to sub-projects, not this one.
            .filter(|a| a.scope.get("OS-INHERIT:inherited_to").is_none())
            .filter_map(|a| {
                let actor = match (a.user, a.group) {
                    (Some(u), _) => Actor::User(u.id),
                    (None, Some(g)) => Actor::Group(g.id),
                    (None, None) => return None,
                };
                Some(RoleAssignment {
                    role_id: a.role.id,
                    role_name: a.role.name,
                    project_id: project_id.to_string(),
                    actor,
                })
            })
            .collect())
    }

    async fn list_domain_role_assignments(&self, domain_id: &str) -> Result<Vec<RoleAssignment>> {
        // A domain is the parent project of its projects, so its subtree is every project
        // of the domain; the domain's own (domain-scoped) assignments are not in the answer.
        let v: Vec<WireAssignment> = self
            .fetch(
                Request::get(S, "list_domain_role_assignments", "role_assignments")
                    .query("scope.project.id", domain_id)
                    .query("include_subtree", "true"),
                "role_assignments",
            )
            .await?;
        Ok(v.into_iter()
            .filter(|a| a.scope.get("OS-INHERIT:inherited_to").is_none())
            .filter_map(|a| {
                let project_id = a.scope.pointer("/project/id")?.as_str()?.to_string();
                let actor = match (a.user, a.group) {
                    (Some(u), _) => Actor::User(u.id),
                    (None, Some(g)) => Actor::Group(g.id),
                    (None, None) => return None,
                };
                Some(RoleAssignment {
                    role_id: a.role.id,
                    role_name: a.role.name,
                    project_id,
                    actor,
                })
            })
            .collect())
    }

    async fn grant_project_role(
        &self,
        project_id: &str,
        actor: &Actor,
        role_id: &str,
    ) -> Result<()> {
        self.send(Request::put(
            S,
            "grant_project_role",
            format!(
                "projects/{}/{}/roles/{}",
                seg(project_id),
                actor_path(actor),
                seg(role_id)
            ),
        ))
        .await
    }

    async fn revoke_project_role(
        &self,
        project_id: &str,
        actor: &Actor,
        role_id: &str,
    ) -> Result<()> {
        self.send(Request::delete(
            S,
            "revoke_project_role",
            format!(
                "projects/{}/{}/roles/{}",
                seg(project_id),
                actor_path(actor),
                seg(role_id)
            ),
        ))
        .await
    }

    async fn get_identity_provider(&self, id: &str) -> Result<IdentityProvider> {
        let w: WireIdp = self
            .fetch(
                Request::get(
                    S,
                    "get_identity_provider",
                    format!("OS-FEDERATION/identity_providers/{}", seg(id)),
                ),
                "identity_provider",
            )
            .await?;
        Ok(w.into())
    }

    async fn create_identity_provider(
        &self,
        req: &IdentityProviderCreate,
    ) -> Result<IdentityProvider> {
        let body = json!({"identity_provider": object(&[
            ("remote_ids", Some(Value::from(req.remote_ids.clone()))),
            ("enabled", Some(Value::from(req.enabled))),
            ("domain_id", req.domain_id.clone().map(Value::from)),
            ("description", req.description.clone().map(Value::from)),
        ])});
        // PUT creates here; a repeat would answer 409, so do not retry it
        // after an ambiguous failure.
        let w: WireIdp = self
            .fetch(
                Request::put(
                    S,
                    "create_identity_provider",
                    format!("OS-FEDERATION/identity_providers/{}", seg(&req.id)),
                )
                .non_idempotent()
                .json(&body)?,
                "identity_provider",
            )
            .await?;
        Ok(w.into())
    }

    async fn update_identity_provider(
        &self,
        id: &str,
        req: &IdentityProviderUpdate,
    ) -> Result<IdentityProvider> {
        let body = json!({"identity_provider": object(&[
            ("remote_ids", req.remote_ids.clone().map(Value::from)),
            ("enabled", req.enabled.map(Value::from)),
            ("description", req.description.clone().map(Value::from)),
        ])});
        let w: WireIdp = self
            .fetch(
                Request::patch(
                    S,
                    "update_identity_provider",
                    format!("OS-FEDERATION/identity_providers/{}", seg(id)),
                )
                .json(&body)?,
                "identity_provider",
            )
            .await?;
        Ok(w.into())
    }

    async fn delete_identity_provider(&self, id: &str) -> Result<()> {
        self.send(Request::delete(
            S,
            "delete_identity_provider",
            format!("OS-FEDERATION/identity_providers/{}", seg(id)),
        ))
        .await
    }

    async fn get_mapping(&self, id: &str) -> Result<Mapping> {
        self.fetch_mapping(Request::get(
            S,
            "get_mapping",
            format!("OS-FEDERATION/mappings/{}", seg(id)),
        ))
        .await
    }

    async fn create_mapping(&self, id: &str, rules: &MappingRules) -> Result<Mapping> {
        self.fetch_mapping(
            Request::put(
                S,
                "create_mapping",
                format!("OS-FEDERATION/mappings/{}", seg(id)),
            )
            .non_idempotent()
            .json(&MappingBody::of(rules))?,
        )
        .await
    }

    async fn update_mapping(&self, id: &str, rules: &MappingRules) -> Result<Mapping> {
        self.fetch_mapping(
            Request::patch(
                S,
                "update_mapping",
                format!("OS-FEDERATION/mappings/{}", seg(id)),
            )
            .json(&MappingBody::of(rules))?,
        )
        .await
    }

    async fn delete_mapping(&self, id: &str) -> Result<()> {
        self.send(Request::delete(
            S,
            "delete_mapping",
            format!("OS-FEDERATION/mappings/{}", seg(id)),
        ))
        .await
    }

    async fn get_federation_protocol(
        &self,
        idp_id: &str,
        protocol_id: &str,
    ) -> Result<FederationProtocol> {
        let w: WireProtocol = self
            .fetch(
                Request::get(
                    S,
                    "get_federation_protocol",
                    protocol_path(idp_id, protocol_id),
                ),
                "protocol",
            )
            .await?;
        Ok(FederationProtocol {
            id: w.id,
            idp_id: idp_id.to_string(),
            mapping_id: w.mapping_id,
        })
    }

    async fn create_federation_protocol(
        &self,
        idp_id: &str,
        protocol_id: &str,
        mapping_id: &str,
    ) -> Result<FederationProtocol> {
        // The raw PUT; python-openstackclient's `federation protocol create`
        // is broken against recent Keystone, the API itself is fine.
        let body = json!({"protocol": {"mapping_id": mapping_id}});
        let w: WireProtocol = self
            .fetch(
                Request::put(
                    S,
                    "create_federation_protocol",
                    protocol_path(idp_id, protocol_id),
                )
                .non_idempotent()
                .json(&body)?,
                "protocol",
            )
            .await?;
        Ok(FederationProtocol {
            id: w.id,
            idp_id: idp_id.to_string(),
            mapping_id: w.mapping_id,
        })
    }

    async fn update_federation_protocol(
        &self,
        idp_id: &str,
        protocol_id: &str,
        mapping_id: &str,
    ) -> Result<FederationProtocol> {
        let body = json!({"protocol": {"mapping_id": mapping_id}});
        let w: WireProtocol = self
            .fetch(
                Request::patch(
                    S,
                    "update_federation_protocol",
                    protocol_path(idp_id, protocol_id),
                )
                .json(&body)?,
                "protocol",
            )
            .await?;
        Ok(FederationProtocol {
            id: w.id,
            idp_id: idp_id.to_string(),
            mapping_id: w.mapping_id,
        })
    }

    async fn delete_federation_protocol(&self, idp_id: &str, protocol_id: &str) -> Result<()> {
        self.send(Request::delete(
            S,
            "delete_federation_protocol",
            protocol_path(idp_id, protocol_id),
        ))
        .await
    }
}

fn protocol_path(idp_id: &str, protocol_id: &str) -> String {
    format!(
        "OS-FEDERATION/identity_providers/{}/protocols/{}",
        seg(idp_id),
        seg(protocol_id)
    )
}
