//! The port: one object-safe async trait per OpenStack service.
//!
//! Conventions shared by all traits:
//! - `get_*` returns [`Error::NotFound`](crate::Error::NotFound) when the
//!   object does not exist; `find_*` returns `Ok(None)` instead.
//! - `delete_*` returns NotFound when the object is already gone; callers
//!   that tolerate that use [`OptionalExt`](crate::OptionalExt).
//! - Update requests carry `Option`s: `None` leaves the attribute alone, so
//!   only what the caller set is sent.
//! - Quota updates send only the given keys.

use std::sync::Arc;

use async_trait::async_trait;

use crate::error::Result;
use crate::model::*;

/// Keystone: domains, projects, groups, users, roles, assignments, federation.
#[async_trait]
pub trait Identity: Send + Sync {
    /// Get a domain by ID.
    async fn get_domain(&self, id: &str) -> Result<Domain>;
    /// The users holding tenants' application credentials (`OpenstackProject`
    /// `spec.applicationCredential`); `None` where this port cannot make them (the fake,
    /// unless `FakeCloud::enable_tenant_users`).
    fn tenant_users(&self) -> Option<std::sync::Arc<dyn crate::tenant_user::TenantUsers>> {
        None
    }
    /// Find a domain by its unique name.
    async fn find_domain(&self, name: &str) -> Result<Option<Domain>>;
    /// List all domains.
    async fn list_domains(&self) -> Result<Vec<Domain>>;
    /// Create a domain.
    async fn create_domain(&self, req: &DomainCreate) -> Result<Domain>;
    /// Update description and/or enabled.
    async fn update_domain(&self, id: &str, req: &DomainUpdate) -> Result<Domain>;
    /// Delete a domain (Keystone requires it to be disabled first).
    async fn delete_domain(&self, id: &str) -> Result<()>;
    /// Replace a domain's tags (stored on the project backing the domain).
    async fn set_domain_tags(&self, id: &str, tags: &[String]) -> Result<()>;

    /// Get a project by ID.
    async fn get_project(&self, id: &str) -> Result<Project>;
    /// Find a project by name within a domain.
    async fn find_project(&self, domain_id: &str, name: &str) -> Result<Option<Project>>;
    /// List projects matching the filter.
    async fn list_projects(&self, filter: &ProjectFilter) -> Result<Vec<Project>>;
    /// Create a project (with its tags in the same call).
    async fn create_project(&self, req: &ProjectCreate) -> Result<Project>;
    /// Update name/description/enabled/tags.
    async fn update_project(&self, id: &str, req: &ProjectUpdate) -> Result<Project>;
    /// Delete a project.
    async fn delete_project(&self, id: &str) -> Result<()>;

    /// Get a group by ID.
    async fn get_group(&self, id: &str) -> Result<Group>;
    /// Find a group by name within a domain.
    async fn find_group(&self, domain_id: &str, name: &str) -> Result<Option<Group>>;
    /// List groups, optionally only those of one domain.
    async fn list_groups(&self, domain_id: Option<&str>) -> Result<Vec<Group>>;
    /// Create a group.
    async fn create_group(&self, req: &GroupCreate) -> Result<Group>;
    /// Update name and/or description.
    async fn update_group(&self, id: &str, req: &GroupUpdate) -> Result<Group>;
    /// Delete a group.
    async fn delete_group(&self, id: &str) -> Result<()>;
    /// List the users in a group.
    async fn list_group_users(&self, group_id: &str) -> Result<Vec<User>>;
    /// Add a user to a group (idempotent).
    async fn add_user_to_group(&self, group_id: &str, user_id: &str) -> Result<()>;
    /// Remove a user from a group (NotFound if not a member).
    async fn remove_user_from_group(&self, group_id: &str, user_id: &str) -> Result<()>;

    /// Get a user by ID.
    async fn get_user(&self, id: &str) -> Result<User>;
    /// Find a user by name within a domain.
    async fn find_user(&self, domain_id: &str, name: &str) -> Result<Option<User>>;

    /// Find a global role by name.
    async fn find_role(&self, name: &str) -> Result<Option<Role>>;
    /// List all roles.
    async fn list_roles(&self) -> Result<Vec<Role>>;

    /// List direct role assignments (users and groups) on a project.
    async fn list_project_role_assignments(&self, project_id: &str) -> Result<Vec<RoleAssignment>>;
    /// List the direct role assignments (users and groups) on every project of a domain.
    /// Keystone answers this in one request (`scope.project.id=<domain>&include_subtree`,
    /// a domain being the parent project of its projects); the default asks per project.
    async fn list_domain_role_assignments(&self, domain_id: &str) -> Result<Vec<RoleAssignment>> {
        let projects = self
            .list_projects(&ProjectFilter {
                domain_id: Some(domain_id.to_string()),
                ..Default::default()
            })
            .await?;
        let mut out = Vec::new();
        for p in projects {
            out.extend(self.list_project_role_assignments(&p.id).await?);
        }
        Ok(out)
    }
    /// Grant a role on a project to a user or group (idempotent).
    async fn grant_project_role(
        &self,
        project_id: &str,
        actor: &Actor,
        role_id: &str,
    ) -> Result<()>;
    /// Revoke a role on a project from a user or group (NotFound if absent).
    async fn revoke_project_role(
        &self,
        project_id: &str,
        actor: &Actor,
        role_id: &str,
    ) -> Result<()>;

    /// Get an identity provider.
    async fn get_identity_provider(&self, id: &str) -> Result<IdentityProvider>;
    /// Create an identity provider (Conflict if the ID or a remote ID is taken).
    async fn create_identity_provider(
        &self,
        req: &IdentityProviderCreate,
    ) -> Result<IdentityProvider>;
    /// Update remote IDs/enabled/description.
    async fn update_identity_provider(
        &self,
        id: &str,
        req: &IdentityProviderUpdate,
    ) -> Result<IdentityProvider>;
    /// Delete an identity provider (and its protocols).
    async fn delete_identity_provider(&self, id: &str) -> Result<()>;

    /// Get a mapping.
    async fn get_mapping(&self, id: &str) -> Result<Mapping>;
    /// Create a mapping with the given rules.
    async fn create_mapping(&self, id: &str, rules: &MappingRules) -> Result<Mapping>;
    /// Replace a mapping's rules.
    async fn update_mapping(&self, id: &str, rules: &MappingRules) -> Result<Mapping>;
    /// Delete a mapping.
    async fn delete_mapping(&self, id: &str) -> Result<()>;

    /// Get a federation protocol of an identity provider.
    async fn get_federation_protocol(
        &self,
        idp_id: &str,
        protocol_id: &str,
    ) -> Result<FederationProtocol>;
    /// Create a federation protocol pointing at a mapping.
    async fn create_federation_protocol(
        &self,
        idp_id: &str,
        protocol_id: &str,
        mapping_id: &str,
    ) -> Result<FederationProtocol>;
    /// Point an existing protocol at another mapping.
    async fn update_federation_protocol(
        &self,
        idp_id: &str,
        protocol_id: &str,
        mapping_id: &str,
    ) -> Result<FederationProtocol>;
    /// Delete a federation protocol.
    async fn delete_federation_protocol(&self, idp_id: &str, protocol_id: &str) -> Result<()>;
}

/// Nova: flavors, extra specs, flavor access, quotas.
#[async_trait]
pub trait Compute: Send + Sync {
    /// Get a flavor by ID (public or private).
    async fn get_flavor(&self, id: &str) -> Result<Flavor>;
    /// List all flavors, public and private.
    async fn list_flavors(&self) -> Result<Vec<Flavor>>;
    /// Find a flavor by name among public and private flavors.
    async fn find_flavor(&self, name: &str) -> Result<Option<Flavor>>;
    /// Create a flavor (Conflict on a duplicate name or ID).
    async fn create_flavor(&self, req: &FlavorCreate) -> Result<Flavor>;
    /// Change a flavor's description (the only mutable attribute).
    async fn update_flavor_description(&self, id: &str, description: &str) -> Result<Flavor>;
    /// Delete a flavor.
    async fn delete_flavor(&self, id: &str) -> Result<()>;

    /// Get all extra specs of a flavor.
    async fn get_flavor_extra_specs(
        &self,
        id: &str,
    ) -> Result<std::collections::BTreeMap<String, String>>;
    /// Create or overwrite the given extra spec keys (others are kept).
    async fn set_flavor_extra_specs(
        &self,
        id: &str,
        specs: &std::collections::BTreeMap<String, String>,
    ) -> Result<()>;
    /// Delete one extra spec key (NotFound if absent).
    async fn delete_flavor_extra_spec(&self, id: &str, key: &str) -> Result<()>;

    /// Project IDs with access to a private flavor.
    async fn list_flavor_access(&self, id: &str) -> Result<Vec<String>>;
    /// Give a project access to a private flavor (Conflict if it has it or
    /// the flavor is public).
    async fn add_flavor_access(&self, id: &str, project_id: &str) -> Result<()>;
    /// Remove a project's access (NotFound if it has none).
    async fn remove_flavor_access(&self, id: &str, project_id: &str) -> Result<()>;

    /// Quotas of a project with usage (`os-quota-sets/{id}/detail`).
    async fn get_compute_quota(&self, project_id: &str) -> Result<QuotaSet>;
    /// Set the given quota keys only.
    async fn update_compute_quota(&self, project_id: &str, limits: &QuotaUpdate) -> Result<()>;
    /// The limits a project has when none is set for it (`os-quota-sets/{id}/defaults`).
    async fn get_compute_quota_defaults(&self, project_id: &str) -> Result<QuotaUpdate>;
}

/// Glance: images.
#[async_trait]
pub trait Image: Send + Sync {
    /// Create an image record (status `queued`).
    async fn create_image(&self, req: &ImageCreate) -> Result<crate::model::Image>;
    /// Get an image by ID.
    async fn get_image(&self, id: &str) -> Result<crate::model::Image>;
    /// List images with exactly this name, of any visibility.
    async fn list_images_by_name(&self, name: &str) -> Result<Vec<crate::model::Image>>;
    /// Apply JSON-patch operations.
    async fn update_image(&self, id: &str, ops: &[ImagePatchOp]) -> Result<crate::model::Image>;
    /// Start a `web-download` import from a URL (returns when accepted).
    async fn import_image_web_download(&self, id: &str, uri: &str) -> Result<()>;
    /// Delete an image (Forbidden if protected).
    async fn delete_image(&self, id: &str) -> Result<()>;
}

/// Neutron: networks, subnets, routers, security groups, quotas.
#[async_trait]
pub trait Network: Send + Sync {
    /// Get a network.
    async fn get_network(&self, id: &str) -> Result<crate::model::Network>;
    /// List networks matching the filter.
    async fn list_networks(&self, filter: &NetworkFilter) -> Result<Vec<crate::model::Network>>;
    /// Create a network (tags included in the same call).
    async fn create_network(&self, req: &NetworkCreate) -> Result<crate::model::Network>;
    /// Update a network.
    async fn update_network(&self, id: &str, req: &NetworkUpdate) -> Result<crate::model::Network>;
    /// Delete a network (Conflict while ports are in use).
    async fn delete_network(&self, id: &str) -> Result<()>;

    /// Get a subnet.
    async fn get_subnet(&self, id: &str) -> Result<Subnet>;
    /// List subnets matching the filter.
    async fn list_subnets(&self, filter: &SubnetFilter) -> Result<Vec<Subnet>>;
    /// Create a subnet.
    async fn create_subnet(&self, req: &SubnetCreate) -> Result<Subnet>;
    /// Update a subnet.
    async fn update_subnet(&self, id: &str, req: &SubnetUpdate) -> Result<Subnet>;
    /// Delete a subnet (Conflict while it has a router interface).
    async fn delete_subnet(&self, id: &str) -> Result<()>;

    /// Get a router.
    async fn get_router(&self, id: &str) -> Result<Router>;
    /// List routers matching the filter.
    async fn list_routers(&self, filter: &RouterFilter) -> Result<Vec<Router>>;
    /// Create a router.
    async fn create_router(&self, req: &RouterCreate) -> Result<Router>;
    /// Update name/description/gateway.
    async fn update_router(&self, id: &str, req: &RouterUpdate) -> Result<Router>;
    /// Delete a router (Conflict while it has interfaces).
    async fn delete_router(&self, id: &str) -> Result<()>;
    /// Attach a subnet to a router.
    async fn add_router_interface(
        &self,
        router_id: &str,
        subnet_id: &str,
    ) -> Result<RouterInterface>;
    /// Detach a subnet from a router (NotFound if not attached).
    async fn remove_router_interface(&self, router_id: &str, subnet_id: &str) -> Result<()>;
    /// List the interface ports of a router (not its gateway port).
    async fn list_router_interfaces(&self, router_id: &str) -> Result<Vec<RouterPort>>;
    /// The interface ports of every router in `routers`, by router ID (routers without an
    /// interface are left out). Neutron answers this in one request (ports filtered by the
    /// interface device owners); the default asks per router.
    async fn list_routers_interfaces(
        &self,
        routers: &[String],
    ) -> Result<std::collections::BTreeMap<String, Vec<RouterPort>>> {
        let mut out = std::collections::BTreeMap::new();
        for r in routers {
            let ports = self.list_router_interfaces(r).await?;
            if !ports.is_empty() {
                out.insert(r.clone(), ports);
            }
        }
        Ok(out)
    }

    /// Get a security group with its rules.
    async fn get_security_group(&self, id: &str) -> Result<SecurityGroup>;
    /// List security groups matching the filter.
    async fn list_security_groups(
        &self,
        filter: &SecurityGroupFilter,
    ) -> Result<Vec<SecurityGroup>>;
    /// Create a security group (Neutron adds egress rules for IPv4/IPv6).
    async fn create_security_group(&self, req: &SecurityGroupCreate) -> Result<SecurityGroup>;
    /// Update name/description.
    async fn update_security_group(
        &self,
        id: &str,
        req: &SecurityGroupUpdate,
    ) -> Result<SecurityGroup>;
    /// Delete a security group.
    async fn delete_security_group(&self, id: &str) -> Result<()>;
    /// List the rules of a security group.
    async fn list_security_group_rules(
        &self,
        security_group_id: &str,
    ) -> Result<Vec<SecurityGroupRule>>;
    /// Create a rule (Conflict if an identical rule exists).
    async fn create_security_group_rule(
        &self,
        req: &SecurityGroupRuleCreate,
    ) -> Result<SecurityGroupRule>;
    /// Create several rules of one security group in one request (Neutron bulk create): all
    /// or none, Conflict if any of them exists already, BadRequest if they span groups.
    async fn create_security_group_rules(
        &self,
        reqs: &[SecurityGroupRuleCreate],
    ) -> Result<Vec<SecurityGroupRule>>;
    /// Delete a rule.
    async fn delete_security_group_rule(&self, id: &str) -> Result<()>;

    /// Replace the tags of a resource (`PUT /v2.0/{collection}/{id}/tags`).
    async fn set_tags(&self, kind: TaggedResource, id: &str, tags: &[String]) -> Result<()>;

    /// Quotas of a project with usage (`/v2.0/quotas/{id}/details`).
    async fn get_network_quota(&self, project_id: &str) -> Result<QuotaSet>;
    /// Set the given quota keys only.
    async fn update_network_quota(&self, project_id: &str, limits: &QuotaUpdate) -> Result<()>;
    /// The limits a project has when none is set for it (`/v2.0/quotas/{id}/default`).
    async fn get_network_quota_defaults(&self, project_id: &str) -> Result<QuotaUpdate>;
    /// The limits in force for each of `projects`. Neutron lists the projects with limits of
    /// their own in one request (`GET /v2.0/quotas`); the others have the defaults (one more
    /// request). The default asks per project.
    async fn list_network_quota_limits(
        &self,
        projects: &[String],
    ) -> Result<std::collections::BTreeMap<String, QuotaUpdate>> {
        let mut out = std::collections::BTreeMap::new();
        for p in projects {
            let q = self.get_network_quota(p).await?;
            out.insert(
                p.clone(),
                q.into_iter().map(|(k, v)| (k, v.limit)).collect(),
            );
        }
        Ok(out)
    }
}

/// Cinder: quotas.
#[async_trait]
pub trait BlockStorage: Send + Sync {
    /// Quotas of a project with usage (`os-quota-sets/{id}?usage=true`).
    async fn get_volume_quota(&self, project_id: &str) -> Result<QuotaSet>;
    /// Set the given quota keys only.
    async fn update_volume_quota(&self, project_id: &str, limits: &QuotaUpdate) -> Result<()>;
    /// The limits a project has when none is set for it (`os-quota-sets/{id}/defaults`).
    async fn get_volume_quota_defaults(&self, project_id: &str) -> Result<QuotaUpdate>;
}

/// All service ports of one cloud connection.
#[derive(Clone)]
pub struct Cloud {
    /// Keystone.
    pub identity: Arc<dyn Identity>,
    /// Nova.
    pub compute: Arc<dyn Compute>,
    /// Glance.
    pub image: Arc<dyn Image>,
    /// Neutron.
    pub network: Arc<dyn Network>,
    /// Cinder.
    pub block_storage: Arc<dyn BlockStorage>,
}

impl std::fmt::Debug for Cloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cloud").finish_non_exhaustive()
    }
}
