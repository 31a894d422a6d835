//! OpenstackDomain: a Keystone domain.

use api::{FieldError, OpenstackDomain, OpenstackDomainSpec, OpenstackDomainStatus};
use async_trait::async_trait;
use kube::Api;
use kube::runtime::events::EventType;
use openstack::OptionalExt;
use openstack::model::{Domain, DomainCreate, DomainUpdate};

use crate::context::Context;
use crate::error::{ReconcileError, Result};
use crate::framework::{Managed, Progress, owner_of, publish};
use crate::ownership::{Owner, Ownership, may_take_over, merge_marks, should_delete, strip_marks};

/// What to do about the domain (pure plan).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DomainPlan {
    /// Create it with our marks.
    Create(DomainCreate),
    /// Bring an existing domain in line; `adopt` = we take it over now.
    Update {
        /// Keystone ID.
        id: String,
        /// Attribute changes (empty = none).
        update: DomainUpdate,
        /// Tags to set when ours are missing.
        tags: Option<Vec<String>>,
        /// The domain is being taken over now.
        adopt: bool,
    },
}

/// Plans the domain from the spec and what exists (found by recorded ID or by name).
pub fn plan(
    spec: &OpenstackDomainSpec,
    observed: Option<&Domain>,
    owner: &Owner,
    adopt_legacy: bool,
) -> Result<DomainPlan> {
    let Some(d) = observed else {
        return Ok(DomainPlan::Create(DomainCreate {
            name: spec.name.clone(),
            description: spec.description.clone(),
            enabled: spec.enabled,
            tags: owner.tags(),
        }));
    };
    let ownership = owner.classify_tags(&d.tags);
    let adopt = may_take_over(
        &ownership,
        spec.adopt,
        adopt_legacy,
        &format!("Keystone domain {:?}", d.name),
    )
    .map_err(ReconcileError::NotOwned)?;
    let update = DomainUpdate {
        description: (d.description != spec.description).then(|| spec.description.clone()),
        enabled: (d.enabled != spec.enabled).then_some(spec.enabled),
    };
    let tags = (ownership != Ownership::Ours).then(|| merge_marks(&d.tags, owner));
    Ok(DomainPlan::Update {
        id: d.id.clone(),
        update,
        tags,
        adopt,
    })
}

async fn observe(
    ctx: &Context,
    spec: &OpenstackDomainSpec,
    status: &OpenstackDomainStatus,
) -> Result<Option<Domain>> {
    let identity = &ctx.cloud.identity;
    if let Some(id) = &status.domain_id
        && let Some(d) = identity.get_domain(id).await.optional()?
    {
        return Ok(Some(d));
    }
    Ok(identity.find_domain(&spec.name).await?)
}

#[async_trait]
impl Managed for OpenstackDomain {
    type Status = OpenstackDomainStatus;
    const READY_CONDITION: &'static str = "DomainReady";

    fn status(&self) -> Option<&Self::Status> {
        self.status.as_ref()
    }
    fn cloud_ref(&self) -> Option<&str> {
        self.spec.cloud_ref.as_ref().map(|c| c.name.as_str())
    }

    fn api(client: kube::Client, _obj: &Self) -> Api<Self> {
        Api::all(client)
    }

    fn validate(&self) -> Vec<FieldError> {
        api::validation::object_errors(self, &self.spec)
    }

    async fn apply(&self, ctx: &Context, status: &mut Self::Status) -> Result<Progress> {
        let owner = owner_of(self, ctx);
        let observed = observe(ctx, &self.spec, status).await?;
        if observed.is_none() && status.domain_id.is_some() {
            publish(
                ctx,
                self,
                EventType::Warning,
                "Recreating",
                "Create",
                format!(
                    "domain {} ({}) was deleted outside the operator; creating it again",
                    self.spec.name,
                    status.domain_id.as_deref().unwrap_or_default()
                ),
            )
            .await;
            status.domain_id = None;
        }
        match plan(
            &self.spec,
            observed.as_ref(),
            &owner,
            ctx.config.adopt_legacy,
        )? {
            DomainPlan::Create(req) => {
                let d = ctx.cloud.identity.create_domain(&req).await?;
                status.domain_id = Some(d.id.clone());
                status.adopted = Some(false);
                publish(
                    ctx,
                    self,
                    EventType::Normal,
                    "Created",
                    "Create",
                    format!("created Keystone domain {} ({})", d.name, d.id),
                )
                .await;
                Ok(Progress::ready(
                    "Created",
                    format!("domain {} created", d.id),
                ))
            }
            DomainPlan::Update {
                id,
                update,
                tags,
                adopt,
            } => {
                status.domain_id = Some(id.clone());
                if adopt {
                    status.adopted = Some(true);
                    publish(
                        ctx,
                        self,
                        EventType::Normal,
                        "Adopted",
                        "Adopt",
                        format!(
                            "took over existing Keystone domain {} ({id})",
                            self.spec.name
                        ),
                    )
                    .await;
                }
                if let Some(tags) = tags {
                    ctx.cloud.identity.set_domain_tags(&id, &tags).await?;
                }
                if update != DomainUpdate::default() {
                    ctx.cloud.identity.update_domain(&id, &update).await?;
                    publish(
                        ctx,
                        self,
                        EventType::Normal,
                        "Updated",
                        "Update",
                        format!("updated Keystone domain {id}: {update:?}"),
                    )
                    .await;
                    return Ok(Progress::ready("Updated", "domain updated"));
                }
                Ok(Progress::ready("InSync", "domain matches the spec"))
            }
        }
    }

    async fn cleanup(&self, ctx: &Context, status: &mut Self::Status) -> Result<()> {
        let owner = owner_of(self, ctx);
        let identity = &ctx.cloud.identity;
        let found = match &status.domain_id {
            Some(id) => identity.get_domain(id).await.optional()?,
            // Created but the ID never reached status: find it by name and our mark.
            None => identity
                .find_domain(&self.spec.name)
                .await?
                .filter(|d| owner.classify_tags(&d.tags) == Ownership::Ours),
        };
        let Some(d) = found else { return Ok(()) };
        if owner.classify_tags(&d.tags) != Ownership::Ours {
            return Ok(());
        }
        if should_delete(self.spec.deletion_policy, status.adopted.unwrap_or(false)) {
            if d.enabled {
                // Keystone refuses to delete an enabled domain.
                identity
                    .update_domain(
                        &d.id,
                        &DomainUpdate {
                            enabled: Some(false),
                            ..Default::default()
                        },
                    )
                    .await?;
            }
            identity.delete_domain(&d.id).await.optional()?;
            publish(
                ctx,
                self,
                EventType::Normal,
                "Deleted",
                "Delete",
                format!("deleted Keystone domain {} ({})", d.name, d.id),
            )
            .await;
        } else {
            identity
                .set_domain_tags(&d.id, &strip_marks(&d.tags))
                .await?;
            publish(
                ctx,
                self,
                EventType::Normal,
                "Released",
                "Delete",
                format!("left Keystone domain {} ({}) in place", d.name, d.id),
            )
            .await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(adopt: bool) -> OpenstackDomainSpec {
        OpenstackDomainSpec {
            cloud_ref: None,
            name: "d".into(),
            description: "x".into(),
            enabled: true,
            adopt,
            deletion_policy: None,
        }
    }

    fn owner() -> Owner {
        Owner {
            cluster: "c".into(),
            uid: "u".into(),
        }
    }

    fn domain(tags: Vec<String>) -> Domain {
        Domain {
            id: "id1".into(),
            name: "d".into(),
            description: "old".into(),
            enabled: true,
            tags,
        }
    }

    #[test]
    fn creates_with_marks_when_absent() {
        let DomainPlan::Create(req) = plan(&spec(false), None, &owner(), false).unwrap() else {
            panic!()
        };
        assert_eq!(req.tags, owner().tags());
        assert_eq!(req.description, "x");
    }

    #[test]
    fn foreign_domain_is_not_adopted_without_asking() {
        let err = plan(&spec(false), Some(&domain(vec![])), &owner(), false).unwrap_err();
        assert!(matches!(err, ReconcileError::NotOwned(_)), "{err}");
    }

    #[test]
    fn foreign_domain_adopted_when_asked() {
        let p = plan(
            &spec(true),
            Some(&domain(vec!["keep".into()])),
            &owner(),
            false,
        )
        .unwrap();
        let DomainPlan::Update {
            update,
            tags,
            adopt,
            ..
        } = p
        else {
            panic!()
        };
        assert!(adopt);
        assert_eq!(update.description.as_deref(), Some("x"));
        let tags = tags.unwrap();
        assert!(tags.contains(&"keep".to_string()));
        assert!(owner().tags().iter().all(|t| tags.contains(t)));
    }

    #[test]
    fn own_domain_in_sync_plans_nothing() {
        let mut d = domain(owner().tags());
        d.description = "x".into();
        let p = plan(&spec(false), Some(&d), &owner(), false).unwrap();
        assert_eq!(
            p,
            DomainPlan::Update {
                id: "id1".into(),
                update: DomainUpdate::default(),
                tags: None,
                adopt: false
            }
        );
    }
}
