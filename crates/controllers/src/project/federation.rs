//! Federation: the identity provider, the mapping `<idp>_oidc_mapping` shared by all projects
//! using that IdP, and the protocol `openid` pointing at it. Each project owns one rule in the
//! shared mapping (the seed's JSON shape, so existing mappings keep working), identified by
//! its group name AND domain (seed W12: the name alone let `a.b` and `a_b` clobber each other).
//! The mapping is read-modified-written under a per-IdP lock, and written only when the rules
//! change.

use api::naming::{FEDERATION_PROTOCOL, mapping_name};
use api::project::FederationRuleStatus;
use openstack::OptionalExt;
use openstack::model::{IdentityProvider, IdentityProviderCreate, IdentityProviderUpdate};
use serde_json::{Value, json};

use super::{AreaOutcome, Env, FederationSettings, os};
use crate::error::ReconcileError;

/// A project's rule: federated users named in `users` (OIDC `sub`) become ephemeral users in
/// `sso_domain` and members of `group` there.
pub fn project_rule(group: &str, sso_domain: &str, users: &[String]) -> Value {
    json!({
        "local": [
            {"user": {"name": "{0}", "domain": {"name": sso_domain}, "type": "ephemeral"}},
            {"group": {"name": group, "domain": {"name": sso_domain}}}
        ],
        "remote": [
            {"type": "HTTP_OIDC_SUB"},
            {"type": "HTTP_OIDC_SUB", "any_one_of": users}
        ]
    })
}

/// Whether `rule` is the rule of the project whose group is `group` in `domain`.
pub fn is_project_rule(rule: &Value, group: &str, domain: &str) -> bool {
    rule.get("local")
        .and_then(Value::as_array)
        .is_some_and(|locals| {
            locals.iter().any(|l| {
                let g = &l["group"];
                g["name"].as_str() == Some(group) && g["domain"]["name"].as_str() == Some(domain)
            })
        })
}

/// What to do with the shared mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MappingChange {
    /// Nothing to write.
    Unchanged,
    /// Write these rules (create the mapping if it does not exist).
    Write(Value),
    /// Our rule was the last one and Keystone refuses an empty rule list: delete the mapping
    /// (and the protocol pointing at it).
    Delete,
}

/// Puts this project's rule (or, with `rule = None`, no rule) into the shared rules, keeping
/// every other project's rules and their order. `retired` names groups whose rules must go
/// too (the group's name before a project rename). Our rule keeps its position.
pub fn merge_rules(
    existing: Option<&Value>,
    group: &str,
    domain: &str,
    retired: &[&str],
    rule: Option<Value>,
) -> Result<MappingChange, String> {
    let current: Vec<Value> = match existing {
        None => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(other) => {
            return Err(format!(
                "the mapping's rules are not a JSON array ({}); refusing to overwrite them",
                truncate(&other.to_string())
            ));
        }
    };
    let mine = |r: &Value| {
        is_project_rule(r, group, domain) || retired.iter().any(|g| is_project_rule(r, g, domain))
    };
    let mut next = Vec::with_capacity(current.len() + 1);
    let mut placed = false;
    for r in &current {
        if mine(r) {
            if !placed && let Some(new) = &rule {
                next.push(new.clone());
                placed = true;
            }
        } else {
            next.push(r.clone());
        }
    }
    if !placed && let Some(new) = rule {
        next.push(new);
    }
    Ok(if next == current {
        MappingChange::Unchanged
    } else if next.is_empty() {
        if existing.is_some() {
            MappingChange::Delete
        } else {
            MappingChange::Unchanged
        }
    } else {
        MappingChange::Write(Value::Array(next))
    })
}

fn truncate(s: &str) -> String {
    s.chars().take(80).collect()
}

/// What to do about the identity provider.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IdpStep {
    /// It is as wanted.
    None,
    /// Create it, enabled, with the remote ID.
    Create(IdentityProviderCreate),
    /// Correct its remote IDs (seed W13: never corrected).
    Update(IdentityProviderUpdate),
}

/// Plans the identity provider. Its enabled flag is left alone once it exists: disabling an
/// IdP is an administrator's kill switch, not drift.
pub fn plan_idp(observed: Option<&IdentityProvider>, idp: &str, remote_id: &str) -> IdpStep {
    let wanted: Vec<String> = if remote_id.is_empty() {
        Vec::new()
    } else {
        vec![remote_id.to_string()]
    };
    match observed {
        None => IdpStep::Create(IdentityProviderCreate {
            id: idp.to_string(),
            remote_ids: wanted,
            enabled: true,
            domain_id: None,
            description: None,
        }),
        Some(i) => {
            let mut have = i.remote_ids.clone();
            have.sort();
            if remote_id.is_empty() || have == wanted {
                IdpStep::None
            } else {
                IdpStep::Update(IdentityProviderUpdate {
                    remote_ids: Some(wanted),
                    ..Default::default()
                })
            }
        }
    }
}

/// Whether an IdP step may be taken on behalf of a ConfigMap outside the operator's
/// federation namespaces: such a ConfigMap is written by the tenant, so it may use an existing
/// identity provider as it is, but never create one or change its remote IDs (seed W7: a
/// tenant could otherwise point the shared IdP at an issuer they control).
pub fn idp_step_allowed(
    step: &IdpStep,
    settings: &FederationSettings,
) -> Result<(), ReconcileError> {
    let idp = &settings.idp;
    let cm = &settings.config_map;
    match step {
        IdpStep::None => Ok(()),
        IdpStep::Create(_) => Err(ReconcileError::DependencyMissing(format!(
            "identity provider {idp:?} (idp-name in ConfigMap {cm}); an administrator creates it, or lists the ConfigMap's namespace in --federation-namespaces so the operator may create it"
        ))),
        IdpStep::Update(_) => Err(ReconcileError::PolicyViolation(format!(
            "idp-remote-id in ConfigMap {cm}: {:?} is not a remote ID of identity provider {idp:?}; only a ConfigMap in the operator's federation namespaces (--federation-namespaces) may change it",
            settings.remote_id
        ))),
    }
}

/// Ensures IdP, mapping rule and protocol for a project (see module docs). `previous_group`
/// is the group's name before a rename in this pass; its rule is replaced.
pub(crate) async fn apply(
    env: &Env<'_>,
    settings: &FederationSettings,
    project_domain: &str,
    group: &str,
    previous_group: Option<&str>,
    users: &[String],
) -> AreaOutcome {
    let mut out = AreaOutcome::default();
    let identity = &env.cloud.identity;
    let idp = settings.idp.as_str();
    let domain = settings.sso_domain.as_deref().unwrap_or(project_domain);
    let mapping = mapping_name(idp);
    let ctx = format!("spec.federationRef (ConfigMap {})", settings.config_map);
    // Keystone looks for the rule's group in sso-domain, but the group lives in the project's
    // domain (seed W13 note): logins fail unless they coincide. The rule keeps the seed's
    // shape; the condition says what is wrong.
    let mismatch = (domain != project_domain).then(|| {
        format!(
            "; warning: sso-domain {domain:?} in ConfigMap {} differs from the project's domain {project_domain:?}, so Keystone will not find group {group:?} at login",
            settings.config_map
        )
    });
    // Tenancy boundary (seed W7): whoever can write a ConfigMap in their own namespace must
    // not be able to map users into a group of another domain, where a group of the same name
    // may belong to someone else's project.
    if !settings.may_manage_idp && domain != project_domain {
        out.errors.push(ReconcileError::PolicyViolation(format!(
            "sso-domain in ConfigMap {}: {domain:?} differs from the project's domain {project_domain:?}; a ConfigMap outside the operator's federation namespaces (--federation-namespaces) may only map users into the project's own domain",
            settings.config_map
        )));
        return out;
    }
    // Users in no binding: no rule (an empty any_one_of would match nobody anyway).
    let rule = (!users.is_empty()).then(|| project_rule(group, domain, users));

    let lock = env.locks.lock_for(&format!("mapping/{idp}"));
    let _guard = lock.lock().await;

    let observed = match identity.get_mapping(&mapping).await.optional() {
        Ok(m) => m,
        Err(e) => {
            out.errors
                .push(os(format!("{ctx}: reading mapping {mapping}"), e));
            return out;
        }
    };
    let retired: Vec<&str> = previous_group.into_iter().collect();
    let change = match merge_rules(
        observed.as_ref().map(|m| &m.rules),
        group,
        domain,
        &retired,
        rule.clone(),
    ) {
        Ok(c) => c,
        Err(m) => {
            out.errors
                .push(ReconcileError::OpenStack(openstack::Error::unexpected(
                    format!("{ctx}: mapping {mapping}: {m}"),
                )));
            return out;
        }
    };
    let mapping_exists = match &change {
        MappingChange::Delete => false,
        MappingChange::Write(_) => true,
        MappingChange::Unchanged => observed.is_some(),
    };

    // The IdP first: the protocol needs it.
    if mapping_exists {
        let current = match identity.get_identity_provider(idp).await.optional() {
            Ok(i) => i,
            Err(e) => {
                out.errors
                    .push(os(format!("{ctx}: reading identity provider {idp}"), e));
                return out;
            }
        };
        let step = plan_idp(current.as_ref(), idp, &settings.remote_id);
        if !settings.may_manage_idp
            && let Err(e) = idp_step_allowed(&step, settings)
        {
            out.errors.push(e);
            return out;
        }
        let res = match &step {
            IdpStep::None => Ok(()),
            IdpStep::Create(req) => identity.create_identity_provider(req).await.map(|_| ()),
            IdpStep::Update(req) => identity
                .update_identity_provider(idp, req)
                .await
                .map(|_| ()),
        };
        match res {
            Ok(()) if step != IdpStep::None => out.changed = true,
            Ok(()) => {}
            Err(e) => {
                out.errors
                    .push(os(format!("{ctx}: identity provider {idp}"), e));
                return out;
            }
        }
    }

    match change {
        MappingChange::Unchanged => {}
        MappingChange::Write(rules) => {
            let res = if observed.is_some() {
                identity.update_mapping(&mapping, &rules).await
            } else {
                identity.create_mapping(&mapping, &rules).await
            };
            if let Err(e) = res {
                out.errors
                    .push(os(format!("{ctx}: writing mapping {mapping}"), e));
                return out;
            }
            out.changed = true;
        }
        MappingChange::Delete => {
            delete_mapping(env, idp, &mapping, &ctx, &mut out).await;
            out.detail = Some(format!(
                "no users in spec.roleBindings; this project's rule was the last in {mapping}, which was removed"
            ));
            return out;
        }
    }

    if mapping_exists {
        match identity
            .get_federation_protocol(idp, FEDERATION_PROTOCOL)
            .await
            .optional()
        {
            Ok(None) => match identity
                .create_federation_protocol(idp, FEDERATION_PROTOCOL, &mapping)
                .await
            {
                Ok(_) => out.changed = true,
                Err(e) => out.errors.push(os(
                    format!("{ctx}: creating protocol {FEDERATION_PROTOCOL} of {idp}"),
                    e,
                )),
            },
            Ok(Some(p)) if p.mapping_id != mapping && !settings.may_manage_idp => {
                out.errors.push(ReconcileError::PolicyViolation(format!(
                    "{ctx}: protocol {FEDERATION_PROTOCOL} of identity provider {idp} uses mapping {:?}, not {mapping}; only a ConfigMap in the operator's federation namespaces (--federation-namespaces) may repoint it",
                    p.mapping_id
                )))
            }
            Ok(Some(p)) if p.mapping_id != mapping => match identity
                .update_federation_protocol(idp, FEDERATION_PROTOCOL, &mapping)
                .await
            {
                Ok(_) => out.changed = true,
                Err(e) => out.errors.push(os(
                    format!("{ctx}: pointing protocol {FEDERATION_PROTOCOL} of {idp} at {mapping}"),
                    e,
                )),
            },
            Ok(Some(_)) => {}
            Err(e) => out.errors.push(os(
                format!("{ctx}: reading protocol {FEDERATION_PROTOCOL} of {idp}"),
                e,
            )),
        }
    }
    let summary = match &rule {
        Some(_) => format!(
            "{} user(s) map to group {group} in domain {domain} through {idp}/{FEDERATION_PROTOCOL} ({mapping})",
            users.len()
        ),
        None => format!("no users in spec.roleBindings; no rule for group {group} in {mapping}"),
    };
    out.detail = Some(summary + mismatch.as_deref().unwrap_or_default());
    out
}

/// Deletes the protocol (it points at the mapping) and then the mapping; gone is fine.
async fn delete_mapping(env: &Env<'_>, idp: &str, mapping: &str, ctx: &str, out: &mut AreaOutcome) {
    let identity = &env.cloud.identity;
    match identity
        .get_federation_protocol(idp, FEDERATION_PROTOCOL)
        .await
        .optional()
    {
        Ok(Some(p)) if p.mapping_id == mapping => {
            if let Err(e) = identity
                .delete_federation_protocol(idp, FEDERATION_PROTOCOL)
                .await
                .optional()
            {
                out.errors.push(os(
                    format!("{ctx}: deleting protocol {FEDERATION_PROTOCOL} of {idp}"),
                    e,
                ));
                return;
            }
            out.changed = true;
        }
        Ok(_) => {}
        Err(e) => {
            out.errors.push(os(
                format!("{ctx}: reading protocol {FEDERATION_PROTOCOL} of {idp}"),
                e,
            ));
            return;
        }
    }
    match identity.delete_mapping(mapping).await.optional() {
        Ok(_) => out.changed = true,
        Err(e) => out
            .errors
            .push(os(format!("{ctx}: deleting mapping {mapping}"), e)),
    }
}

/// Removes this project's rule (deletion). The IdP stays: other projects and users share it.
pub(crate) async fn remove(
    env: &Env<'_>,
    settings: &FederationSettings,
    project_domain: &str,
    group: &str,
) -> AreaOutcome {
    let domain = settings.sso_domain.as_deref().unwrap_or(project_domain);
    let ctx = format!("spec.federationRef (ConfigMap {})", settings.config_map);
    remove_rule(env, &settings.idp, domain, group, &ctx).await
}

/// Removes the rule recorded in `status.federationRule`: after `spec.federationRef` was
/// removed, its IdP changed, or when its ConfigMap is gone at deletion.
pub(crate) async fn remove_recorded(env: &Env<'_>, rule: &FederationRuleStatus) -> AreaOutcome {
    let ctx = format!(
        "status.federationRule (rule for group {} in mapping {})",
        rule.group, rule.mapping
    );
    remove_rule(
        env,
        &rule.identity_provider,
        &rule.domain,
        &rule.group,
        &ctx,
    )
    .await
}

/// The record of a rule written for `group` in `domain` through `idp`.
pub fn record(idp: &str, domain: &str, group: &str) -> FederationRuleStatus {
    FederationRuleStatus {
        identity_provider: idp.to_string(),
        mapping: mapping_name(idp),
        domain: domain.to_string(),
        group: group.to_string(),
    }
}

async fn remove_rule(
    env: &Env<'_>,
    idp: &str,
    domain: &str,
    group: &str,
    ctx: &str,
) -> AreaOutcome {
    let mut out = AreaOutcome::default();
    let identity = &env.cloud.identity;
    let mapping = mapping_name(idp);
    let lock = env.locks.lock_for(&format!("mapping/{idp}"));
    let _guard = lock.lock().await;
    let observed = match identity.get_mapping(&mapping).await.optional() {
        Ok(m) => m,
        Err(e) => {
            out.errors
                .push(os(format!("{ctx}: reading mapping {mapping}"), e));
            return out;
        }
    };
    match merge_rules(
        observed.as_ref().map(|m| &m.rules),
        group,
        domain,
        &[],
        None,
    ) {
        Ok(MappingChange::Unchanged) => {}
        Ok(MappingChange::Write(rules)) => match identity.update_mapping(&mapping, &rules).await {
            Ok(_) => out.changed = true,
            Err(e) => out
                .errors
                .push(os(format!("{ctx}: writing mapping {mapping}"), e)),
        },
        Ok(MappingChange::Delete) => delete_mapping(env, idp, &mapping, ctx, &mut out).await,
        Err(m) => out
            .errors
            .push(ReconcileError::OpenStack(openstack::Error::unexpected(
                format!("{ctx}: mapping {mapping}: {m}"),
            ))),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users(u: &[&str]) -> Vec<String> {
        u.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn rule_has_the_seeds_shape() {
        let r = project_rule("p-users", "sso", &users(&["alice"]));
        assert_eq!(
            r,
            json!({
                "local": [
                    {"user": {"name": "{0}", "domain": {"name": "sso"}, "type": "ephemeral"}},
                    {"group": {"name": "p-users", "domain": {"name": "sso"}}}
                ],
                "remote": [
                    {"type": "HTTP_OIDC_SUB"},
                    {"type": "HTTP_OIDC_SUB", "any_one_of": ["alice"]}
                ]
            })
        );
        assert!(is_project_rule(&r, "p-users", "sso"));
        assert!(!is_project_rule(&r, "p-users", "other"));
    }

    #[test]
    fn merge_keeps_other_projects_rules_in_place() {
        let a = project_rule("a-users", "sso", &users(&["x"]));
        let b = project_rule("b-users", "sso", &users(&["y"]));
        let existing = json!([a.clone(), b.clone()]);
        // Same rule: nothing to write.
        assert_eq!(
            merge_rules(Some(&existing), "a-users", "sso", &[], Some(a.clone())),
            Ok(MappingChange::Unchanged)
        );
        // Changed users: replaced in place.
        let a2 = project_rule("a-users", "sso", &users(&["x", "z"]));
        assert_eq!(
            merge_rules(Some(&existing), "a-users", "sso", &[], Some(a2.clone())),
            Ok(MappingChange::Write(json!([a2, b.clone()])))
        );
        // A new project appends.
        let c = project_rule("c-users", "sso", &users(&["w"]));
        assert_eq!(
            merge_rules(Some(&existing), "c-users", "sso", &[], Some(c.clone())),
            Ok(MappingChange::Write(json!([a.clone(), b.clone(), c])))
        );
        // Same group name in another domain is another project's rule.
        let a_other = project_rule("a-users", "other", &users(&["q"]));
        assert!(matches!(
            merge_rules(Some(&existing), "a-users", "other", &[], Some(a_other)),
            Ok(MappingChange::Write(v)) if v.as_array().is_some_and(|a| a.len() == 3)
        ));
        // Removing: only ours goes; the last one deletes the mapping.
        assert_eq!(
            merge_rules(Some(&existing), "a-users", "sso", &[], None),
            Ok(MappingChange::Write(json!([b.clone()])))
        );
        assert_eq!(
            merge_rules(Some(&json!([b])), "b-users", "sso", &[], None),
            Ok(MappingChange::Delete)
        );
        assert_eq!(
            merge_rules(None, "b-users", "sso", &[], None),
            Ok(MappingChange::Unchanged)
        );
        assert!(merge_rules(Some(&json!({"x": 1})), "a", "sso", &[], None).is_err());
    }

    #[test]
    fn rename_retires_the_old_rule() {
        let old = project_rule("old-users", "sso", &users(&["x"]));
        let other = project_rule("b-users", "sso", &users(&["y"]));
        let new = project_rule("new-users", "sso", &users(&["x"]));
        assert_eq!(
            merge_rules(
                Some(&json!([old, other.clone()])),
                "new-users",
                "sso",
                &["old-users"],
                Some(new.clone())
            ),
            Ok(MappingChange::Write(json!([new, other])))
        );
    }

    #[test]
    fn idp_remote_ids_are_corrected_but_not_its_enabled_flag() {
        assert!(
            matches!(plan_idp(None, "sso", "https://i"), IdpStep::Create(c) if c.enabled && c.remote_ids == vec!["https://i".to_string()])
        );
        let mut i = IdentityProvider {
            id: "sso".into(),
            enabled: false,
            remote_ids: vec!["https://i".into()],
            ..Default::default()
        };
        assert_eq!(plan_idp(Some(&i), "sso", "https://i"), IdpStep::None);
        i.remote_ids = vec!["https://old".into()];
        assert!(
            matches!(plan_idp(Some(&i), "sso", "https://i"), IdpStep::Update(u) if u.remote_ids == Some(vec!["https://i".to_string()]))
        );
        assert_eq!(plan_idp(Some(&i), "sso", ""), IdpStep::None);
    }
}
