//! The tenant credentials' I/O, run in each pass of an `OpenstackProject` (after the project
//! areas, once the Keystone project exists) and at its deletion; [`watch`] asks for a pass
//! when the next step is due, since a converged project is otherwise not requeued.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use api::common::set_condition;
use api::project::{TenantCredential, TenantCredentialStatus};
use api::{Condition, OpenstackProject, OpenstackProjectStatus};
use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, PostParams};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use openstack::OptionalExt as _;
use openstack::app_credential::ApplicationCredentialCreate;
use openstack::model::Actor;
use openstack::tenant_user::{TenantUserCreate, TenantUsers, random_password};
use secrecy::ExposeSecret as _;
use tracing::info;

use super::{CONDITION, KEY, clouds_yaml, labels, name_prefix, owns_user, secret_is_ours};
use super::{user_description, user_name};
use crate::context::Context;
use crate::error::{ReconcileError, Result};
use crate::project::os;
use crate::rotation::run::{finish, pending};
use crate::rotation::{
    Credential, Observed, PREVIOUS_ANNOTATION, Policy, SWITCHED_AT_ANNOTATION, Step, credential_id,
    decide,
};

/// Steps one pass takes at most (a switch takes three: clean up, create, delete after drain).
const MAX_STEPS: usize = 6;
const FIELD: &str = "spec.applicationCredential";

/// One pass of the tenant credential of `obj`: delivers, rotates, or (spec removed) revokes.
/// Sets the `TenantCredential` condition and `status.applicationCredential`.
pub async fn apply(
    ctx: &Context,
    obj: &OpenstackProject,
    status: &mut OpenstackProjectStatus,
) -> Result<()> {
    let Some(spec) = &obj.spec.application_credential else {
        if status.application_credential.is_some() {
            revoke(ctx, obj, status, true).await?;
        }
        status.conditions.retain(|c| c.type_ != CONDITION);
        return Ok(());
    };
    let Some(project_id) = status.project_id.clone() else {
        return Ok(()); // the project areas report why it does not exist yet
    };
    let outcome = deliver(ctx, obj, spec, &project_id, status).await;
    let mut cond = match &outcome {
        Ok(s) => Condition::new(
            CONDITION,
            true,
            "Current",
            format!(
                "{} delivered in Secret {} (expires {})",
                s.current.as_deref().unwrap_or_default(),
                s.secret_name.as_deref().unwrap_or_default(),
                s.expires_at.as_deref().unwrap_or("never"),
            ),
        ),
        Err(e) => Condition::new(CONDITION, false, e.reason(), e.to_string()),
    };
    cond.observed_generation = obj.metadata.generation;
    set_condition(&mut status.conditions, cond, &crate::framework::now());
    outcome.map(|_| ())
}

/// At the project's deletion: the credentials and the user go (the Secret goes with its
/// owner). Keystone having lost the user already is fine.
pub async fn cleanup(
    ctx: &Context,
    obj: &OpenstackProject,
    status: &mut OpenstackProjectStatus,
) -> Result<()> {
    if obj.spec.application_credential.is_none() && status.application_credential.is_none() {
        return Ok(());
    }
    revoke(ctx, obj, status, false).await
}

fn users(ctx: &Context) -> Result<Arc<dyn TenantUsers>> {
    ctx.cloud.identity.tenant_users().ok_or_else(|| {
        ReconcileError::invalid(
            FIELD,
            "this cloud port cannot make application credentials for tenants",
        )
    })
}

fn uid(obj: &OpenstackProject) -> String {
    obj.metadata.uid.clone().unwrap_or_default()
}

/// The operator's user of the project: from the status, else by name in the project's domain.
async fn find_user(
    ctx: &Context,
    users: &dyn TenantUsers,
    obj: &OpenstackProject,
    status: &OpenstackProjectStatus,
) -> Result<Option<String>> {
    if let Some(id) = status
        .application_credential
        .as_ref()
        .and_then(|s| s.user_id.clone())
    {
        return Ok(Some(id));
    }
    let Some(domain) =
        crate::project::resolve_domain(ctx.cloud.identity.as_ref(), &obj.spec.domain)
            .await
            .map_err(|e| os("spec.domain", e))?
    else {
        return Ok(None);
    };
    let name = user_name(&obj.spec.name);
    let found = users
        .find_user(&domain.id, &name)
        .await
        .map_err(|e| os(format!("{FIELD}: finding user {name}"), e))?;
    Ok(found
        .filter(|u| owns_user(&u.description, &uid(obj)))
        .map(|u| u.id))
}

/// Deletes the user's credentials and the user, and (`delete_secret`) our Secret.
async fn revoke(
    ctx: &Context,
    obj: &OpenstackProject,
    status: &mut OpenstackProjectStatus,
    delete_secret: bool,
) -> Result<()> {
    let users = users(ctx)?;
    if let Some(user_id) = find_user(ctx, users.as_ref(), obj, status).await? {
        let admin = users.admin_credentials();
        let listed = admin
            .list_application_credentials(&user_id)
            .await
            .optional()
            .map_err(|e| os(format!("{FIELD}: listing the credentials"), e))?
            .unwrap_or_default();
        for c in listed {
            admin
                .delete_application_credential(&user_id, &c.id)
                .await
                .optional()
                .map_err(|e| os(format!("{FIELD}: revoking {}", c.name), e))?;
        }
        users
            .delete_user(&user_id)
            .await
            .optional()
            .map_err(|e| os(format!("{FIELD}: deleting the user {user_id}"), e))?;
        info!(project = %obj.name_any(), user = %user_id, "revoked the tenant's application credentials");
    }
    if delete_secret
        && let Some(name) = status
            .application_credential
            .as_ref()
            .and_then(|s| s.secret_name.clone())
    {
        let secrets = secrets(ctx, obj);
        if let Some(s) = secrets.get_opt(&name).await?
            && secret_is_ours(&s, &uid(obj))
        {
            secrets.delete(&name, &DeleteParams::default()).await?;
        }
    }
    status.application_credential = None;
    Ok(())
}

fn secrets(ctx: &Context, obj: &OpenstackProject) -> Api<Secret> {
    Api::namespaced(ctx.client.clone(), &obj.namespace().unwrap_or_default())
}

/// Makes sure the user exists (ours) with its roles on the project; returns its id.
async fn ensure_user(
    ctx: &Context,
    users: &dyn TenantUsers,
    obj: &OpenstackProject,
    project_id: &str,
    status: &OpenstackProjectStatus,
) -> Result<String> {
    if let Some(id) = find_user(ctx, users, obj, status).await? {
        return Ok(id);
    }
    let project = ctx
        .cloud
        .identity
        .get_project(project_id)
        .await
        .map_err(|e| os("status.projectId", e))?;
    let name = user_name(&obj.spec.name);
    if let Some(u) = users
        .find_user(&project.domain_id, &name)
        .await
        .map_err(|e| os(format!("{FIELD}: finding user {name}"), e))?
    {
        // Found by name but not marked for this object (find_user filtered it).
        return Err(ReconcileError::NotOwned(format!(
            "{FIELD}: Keystone user {name:?} ({}) exists and was not made by the operator for this OpenstackProject; rename the project or remove that user",
            u.id
        )));
    }
    let made = users
        .create_user(&TenantUserCreate {
            domain_id: project.domain_id.clone(),
            name: name.clone(),
            description: user_description(
                &obj.namespace().unwrap_or_default(),
                &obj.name_any(),
                &uid(obj),
            ),
            default_project_id: project_id.to_string(),
        })
        .await
        .map_err(|e| os(format!("{FIELD}: creating user {name}"), e))?;
    info!(project = %obj.name_any(), user = %made.id, "created the tenant credentials' user");
    Ok(made.id)
}

/// Grants the credential's roles to the user on the project (idempotent).
async fn grant_roles(
    ctx: &Context,
    spec: &TenantCredential,
    user_id: &str,
    project_id: &str,
) -> Result<Vec<String>> {
    let mut ids = Vec::new();
    for (i, role) in spec.roles().iter().enumerate() {
        let field = format!("{FIELD}.roles[{i}]");
        let r = ctx
            .cloud
            .identity
            .find_role(role)
            .await
            .map_err(|e| os(&field, e))?
            .ok_or_else(|| ReconcileError::DependencyMissing(format!("role {role:?} ({field})")))?;
        ctx.cloud
            .identity
            .grant_project_role(project_id, &Actor::User(user_id.to_string()), &r.id)
            .await
            .map_err(|e| os(&field, e))?;
        ids.push(r.id);
    }
    Ok(ids)
}

/// Delivers and rotates; returns the new `status.applicationCredential`.
async fn deliver(
    ctx: &Context,
    obj: &OpenstackProject,
    spec: &TenantCredential,
    project_id: &str,
    status: &mut OpenstackProjectStatus,
) -> Result<TenantCredentialStatus> {
    let users = users(ctx)?;
    let name = obj.name_any();
    let uid = uid(obj);
    let secret_name = spec.secret_name(&name);
    let secrets = secrets(ctx, obj);
    let mut record = status.application_credential.clone().unwrap_or_default();
    // A renamed Secret: ours under the old name goes.
    if let Some(old) = record.secret_name.clone().filter(|o| *o != secret_name)
        && let Some(s) = secrets.get_opt(&old).await?
        && secret_is_ours(&s, &uid)
    {
        secrets.delete(&old, &DeleteParams::default()).await?;
    }
    record.secret_name = Some(secret_name.clone());
    // Before anything is made in Keystone: a Secret we may not write stops the pass.
    check_secret(
        secrets.get_opt(&secret_name).await?.as_ref(),
        &secret_name,
        &uid,
    )?;
    let known = record.user_id.is_some();
    let user_id = ensure_user(ctx, users.as_ref(), obj, project_id, status).await?;
    if !known {
        // Recorded now: until then the project's role bindings did not know the user's grants
        // as ours and may have revoked them (a pass that stopped before its status write).
        grant_roles(ctx, spec, &user_id, project_id).await?;
    }
    record.user_id = Some(user_id.clone());
    status.application_credential = Some(record.clone());
    let admin = users.admin_credentials();
    let prefix = name_prefix(&name, &uid);
    let policy = Policy::from(spec);
    for _ in 0..MAX_STEPS {
        let secret = secrets.get_opt(&secret_name).await?;
        check_secret(secret.as_ref(), &secret_name, &uid)?;
        let current_id = secret
            .as_ref()
            .and_then(|s| crate::clouds::clouds_yaml(s, KEY).ok())
            .and_then(|y| credential_id(&y, &name).ok());
        let listed = match admin.list_application_credentials(&user_id).await {
            Ok(l) => l,
            Err(openstack::Error::NotFound { .. }) => {
                // The user is gone (deleted by hand): made again by the next pass.
                record.user_id = None;
                status.application_credential = Some(record.clone());
                return Err(ReconcileError::DependencyMissing(format!(
                    "the tenant credentials' user {user_id} was deleted; it is made again ({FIELD})"
                )));
            }
            Err(e) => return Err(os(format!("{FIELD}: listing the credentials"), e)),
        };
        let creds: Vec<Credential> = listed.iter().map(Credential::from).collect();
        let current = current_id
            .as_ref()
            .and_then(|id| creds.iter().find(|c| c.id == *id));
        let pending = secret.as_ref().and_then(pending);
        let now = Timestamp::now();
        let step = decide(
            &Observed {
                now,
                prefix: &prefix,
                current,
                listed: &creds,
                pending: pending.as_ref(),
                old_clients_in_use: 0,
            },
            &policy,
        );
        match step {
            Step::Blocked(m) => return Err(ReconcileError::invalid(FIELD, m)),
            Step::Wait(until) => {
                record.current = current.map(|c| c.name.clone());
                record.expires_at = current.and_then(|c| c.expires_at).map(|t| t.to_string());
                record.next_step_at = Some(until.to_string());
                status.application_credential = Some(record.clone());
                return Ok(record);
            }
            Step::Delete { ids, finish_switch } => {
                for id in &ids {
                    admin
                        .delete_application_credential(&user_id, id)
                        .await
                        .optional()
                        .map_err(|e| os(format!("{FIELD}: deleting credential {id}"), e))?;
                }
                if finish_switch && let Some(s) = &secret {
                    finish(&secrets, s).await?;
                }
            }
            Step::Create {
                name: new_name,
                expires_at: _,
            } => {
                let role_ids = grant_roles(ctx, spec, &user_id, project_id).await?;
                let password = random_password();
                users
                    .set_password(&user_id, &password)
                    .await
                    .map_err(|e| os(format!("{FIELD}: setting the user's password"), e))?;
                // Keystone revokes the user's tokens at a password change, by a revocation
                // event of one-second resolution: a token issued in the same second would be
                // refused at its first use.
                tokio::time::sleep(Duration::from_secs(1)).await;
                let own = users
                    .login(&user_id, &password, project_id)
                    .await
                    .map_err(|e| {
                        os(
                            format!("{FIELD}: logging in as the tenant credentials' user"),
                            e,
                        )
                    })?;
                let made = own
                    .create_application_credential(
                        &user_id,
                        &ApplicationCredentialCreate {
                            name: new_name.clone(),
                            description: format!(
                                "OpenstackProject {}/{name}: delivered in Secret {secret_name} by openstack-operator",
                                obj.namespace().unwrap_or_default()
                            ),
                            // From now, not from the pass's start: a pass took over 40 s
                            // under load in CI, and Keystone refused (400) an expiry
                            // already past.
                            expires_at: Some(Timestamp::now() + policy.lifetime),
                            unrestricted: false,
                            // Exactly the spec's roles, whatever else the user still holds
                            // from an earlier spec.
                            role_ids,
                        },
                    )
                    .await
                    .map_err(|e| os(format!("{FIELD}: creating credential {new_name}"), e))?;
                let yaml = clouds_yaml(
                    &name,
                    &users.endpoint(),
                    &made.credential.id,
                    made.secret.expose_secret(),
                );
                write(
                    &secrets,
                    obj,
                    &secret_name,
                    secret.as_ref(),
                    &yaml,
                    current_id.as_deref().filter(|_| current.is_some()),
                    now,
                )
                .await?;
                record.rotations += 1;
                record.last_rotation = Some(now.to_string());
                status.application_credential = Some(record.clone());
                info!(project = %name, credential = %new_name, "delivered a new tenant application credential");
            }
        }
    }
    Err(ReconcileError::OpenStack(openstack::Error::Transient {
        message: format!("{FIELD}: the rotation took more than {MAX_STEPS} steps in one pass"),
    }))
}

/// A Secret of that name the operator does not own is never written.
fn check_secret(secret: Option<&Secret>, name: &str, uid: &str) -> Result<()> {
    match secret {
        Some(s) if !secret_is_ours(s, uid) => Err(ReconcileError::invalid(
            &format!("{FIELD}.secretName"),
            format!(
                "Secret {name:?} exists and is not the operator's for this OpenstackProject; it is left alone: choose another name"
            ),
        )),
        _ => Ok(()),
    }
}

/// Creates the Secret, or replaces it over the version read; with the previous credential
/// (if any) in the annotation, so it is deleted after the drain.
async fn write(
    secrets: &Api<Secret>,
    obj: &OpenstackProject,
    name: &str,
    read: Option<&Secret>,
    yaml: &str,
    previous: Option<&str>,
    now: Timestamp,
) -> Result<()> {
    let mut annotations = read
        .and_then(|s| s.metadata.annotations.clone())
        .unwrap_or_default();
    annotations.remove(PREVIOUS_ANNOTATION);
    annotations.remove(SWITCHED_AT_ANNOTATION);
    if let Some(p) = previous {
        annotations.insert(PREVIOUS_ANNOTATION.into(), p.into());
        annotations.insert(SWITCHED_AT_ANNOTATION.into(), now.to_string());
    }
    let owner = OwnerReference {
        api_version: OpenstackProject::api_version(&()).into_owned(),
        kind: OpenstackProject::kind(&()).into_owned(),
        name: obj.name_any(),
        uid: uid(obj),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let s = Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: obj.namespace(),
            labels: Some(labels()),
            annotations: Some(annotations),
            owner_references: Some(vec![owner]),
            resource_version: read.and_then(|s| s.metadata.resource_version.clone()),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(
            KEY.to_string(),
            ByteString(yaml.as_bytes().to_vec()),
        )])),
        ..Default::default()
    };
    match read {
        Some(_) => secrets.replace(name, &PostParams::default(), &s).await?,
        None => secrets.create(&PostParams::default(), &s).await?,
    };
    Ok(())
}

/// How often the projects' due times are looked at.
const TICK: Duration = Duration::from_secs(1);
/// A project asked for is not asked for again sooner (its pass may be under way).
const ASK_AGAIN: Duration = Duration::from_secs(5);

/// The projects whose tenant credential step is due at `now` (pure).
pub fn due(projects: &[Arc<OpenstackProject>], now: Timestamp) -> Vec<ObjectRef<OpenstackProject>> {
    projects
        .iter()
        .filter(|p| {
            p.spec.application_credential.is_some() && p.metadata.deletion_timestamp.is_none()
        })
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.application_credential.as_ref())
                .and_then(|a| a.next_step_at.as_deref())
                .and_then(|t| t.parse::<Timestamp>().ok())
                .is_some_and(|t| t <= now)
        })
        .map(|p| ObjectRef::from_obj(p.as_ref()))
        .collect()
}

/// Adds to the project Controller a pass for each project whose tenant credential step is due
/// (a converged project is not requeued otherwise).
pub fn watch() -> impl FnOnce(Controller<OpenstackProject>) -> Controller<OpenstackProject> {
    move |controller| {
        let store = controller.store();
        let (tx, rx) = futures::channel::mpsc::unbounded();
        tokio::spawn(async move {
            let mut asked: HashMap<ObjectRef<OpenstackProject>, std::time::Instant> =
                HashMap::new();
            loop {
                tokio::time::sleep(TICK).await;
                if tx.is_closed() {
                    return;
                }
                asked.retain(|_, at| at.elapsed() < ASK_AGAIN);
                for r in due(&store.state(), Timestamp::now()) {
                    if asked.contains_key(&r) {
                        continue;
                    }
                    asked.insert(r.clone(), std::time::Instant::now());
                    if tx.unbounded_send(r).is_err() {
                        return;
                    }
                }
            }
        });
        controller.reconcile_on(rx)
    }
}
