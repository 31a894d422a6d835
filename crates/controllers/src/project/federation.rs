//! Federation: the identity provider, the mapping `<idp>_oidc_mapping` shared by all projects
//! using that IdP, and the protocol `openid` pointing at it. Each project owns one rule per
//! role bound to users (the seed's JSON shape, so existing mappings keep working): the users
//! of `member` map into the project group, the users of another role into that role's group,
//! so every federated user gets exactly the roles of their bindings. A rule is identified by
//! its group name AND domain (seed W12: the name alone let `a.b` and `a_b` clobber each other).
//! The mapping is read-modified-written under a per-IdP lock, and written only when the rules
//! change. An identity provider the operator created (marked in its description) is created
//! in the `sso-domain` (so Keystone makes no domain of its own for it) and removed with the
//! mapping when the last rule goes; one it found is never removed.

use api::naming::{FEDERATION_PROTOCOL, GROUP_DESCRIPTION_PREFIX, mapping_name};
use api::project::FederationRuleStatus;
use openstack::OptionalExt;
use openstack::model::{IdentityProvider, IdentityProviderCreate, IdentityProviderUpdate};
use serde_json::{Value, json};

use super::{AreaOutcome, Env, FederationSettings, os, resolve_domain};
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

/// Puts this project's rules into the shared rules, keeping every other project's rules and
/// their order. `mine` names every group whose rules are this project's (its current groups
/// and retired ones: the names before a rename, roles no longer bound); `rules` are the rules
/// wanted now, placed where the first of ours was.
pub fn merge_rules(
    existing: Option<&Value>,
    mine: &[&str],
    domain: &str,
    rules: &[Value],
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
    let ours = |r: &Value| mine.iter().any(|g| is_project_rule(r, g, domain));
    let mut next = Vec::with_capacity(current.len() + rules.len());
    let mut placed = false;
    for r in &current {
        if ours(r) {
            if !placed {
                next.extend(rules.iter().cloned());
                placed = true;
            }
        } else {
            next.push(r.clone());
        }
    }
    if !placed {
        next.extend(rules.iter().cloned());
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

/// The description that marks an identity provider as created by this operator in `cluster`
/// (identity providers have no tags).
pub fn idp_mark(cluster: &str) -> String {
    format!(
        "{GROUP_DESCRIPTION_PREFIX}identity provider for OpenstackProject federation (cluster {cluster})"
    )
}

/// Whether the operator of `cluster` created this identity provider.
pub fn idp_is_ours(idp: &IdentityProvider, cluster: &str) -> bool {
    idp.description == idp_mark(cluster)
}

/// Plans the identity provider. Its enabled flag is left alone once it exists: disabling an
/// IdP is an administrator's kill switch, not drift. A new one is created in `domain_id` (the
/// `sso-domain`; Keystone would otherwise generate a domain for it) with our mark.
pub fn plan_idp(
    observed: Option<&IdentityProvider>,
    idp: &str,
    remote_id: &str,
    domain_id: Option<&str>,
    cluster: &str,
) -> IdpStep {
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
            domain_id: domain_id.map(str::to_string),
            description: Some(idp_mark(cluster)),
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

/// Ensures IdP, mapping rules and protocol for a project (see module docs). `groups` are
/// (group name, its users), the project group first; `retired` names groups whose rules must
/// go (names before a rename, roles no longer bound).
pub(crate) async fn apply(
    env: &Env<'_>,
    settings: &FederationSettings,
    project_domain: &str,
    groups: &[(String, Vec<String>)],
    retired: &[String],
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
            "; warning: sso-domain {domain:?} in ConfigMap {} differs from the project's domain {project_domain:?}, so Keystone will not find the project's groups at login",
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
    // A group without users gets no rule (an empty any_one_of would match nobody anyway).
    let rules: Vec<Value> = groups
        .iter()
        .filter(|(_, users)| !users.is_empty())
        .map(|(g, users)| project_rule(g, domain, users))
        .collect();
    let mine: Vec<&str> = groups
        .iter()
        .map(|(g, _)| g.as_str())
        .chain(retired.iter().map(String::as_str))
        .collect();

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
    let change = match merge_rules(observed.as_ref().map(|m| &m.rules), &mine, domain, &rules) {
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
        // Only a new IdP needs the domain's ID.
        let domain_id = match &current {
            Some(_) => None,
            None => match resolve_domain(identity.as_ref(), domain).await {
                Ok(Some(d)) => Some(d.id),
                Ok(None) => {
                    out.errors.push(ReconcileError::DependencyMissing(format!(
                        "domain {domain:?} (sso-domain in ConfigMap {}), to create identity provider {idp:?} in",
                        settings.config_map
                    )));
                    return out;
                }
                Err(e) => {
                    out.errors
                        .push(os(format!("{ctx}: looking up domain {domain:?}"), e));
                    return out;
                }
            },
        };
        let step = plan_idp(
            current.as_ref(),
            idp,
            &settings.remote_id,
            domain_id.as_deref(),
            &env.owner.cluster,
        );
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
    let mapped: Vec<String> = groups
        .iter()
        .filter(|(_, users)| !users.is_empty())
        .map(|(g, users)| format!("{} user(s) to group {g}", users.len()))
        .collect();
    let summary = if mapped.is_empty() {
        format!("no users in spec.roleBindings; no rule for this project in {mapping}")
    } else {
        format!(
            "{} in domain {domain} through {idp}/{FEDERATION_PROTOCOL} ({mapping})",
            mapped.join(", ")
        )
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
        Err(e) => {
            out.errors
                .push(os(format!("{ctx}: deleting mapping {mapping}"), e));
            return;
        }
    }
    // No project uses the IdP any more: one we created goes too (one we found stays).
    match identity.get_identity_provider(idp).await.optional() {
        Ok(Some(i)) if idp_is_ours(&i, &env.owner.cluster) => {
            match identity.delete_identity_provider(idp).await.optional() {
                Ok(_) => out.changed = true,
                Err(e) => out
                    .errors
                    .push(os(format!("{ctx}: deleting identity provider {idp}"), e)),
            }
        }
        Ok(_) => {}
        Err(e) => out
            .errors
            .push(os(format!("{ctx}: reading identity provider {idp}"), e)),
    }
}

/// Removes this project's rules for `groups` (deletion). The IdP stays while other projects
/// have rules; the last rule takes the mapping, protocol and an IdP we created with it.
pub(crate) async fn remove(
    env: &Env<'_>,
    settings: &FederationSettings,
    project_domain: &str,
    groups: &[String],
) -> AreaOutcome {
    let domain = settings.sso_domain.as_deref().unwrap_or(project_domain);
    let ctx = format!("spec.federationRef (ConfigMap {})", settings.config_map);
    remove_rule(env, &settings.idp, domain, groups, &ctx).await
}

/// Removes the rule recorded in `status.federationRule`: after `spec.federationRef` was
/// removed, its IdP changed, or when its ConfigMap is gone at deletion.
pub(crate) async fn remove_recorded(env: &Env<'_>, rule: &FederationRuleStatus) -> AreaOutcome {
    let ctx = format!(
        "status.federationRule (rules for group {} in mapping {})",
        rule.group, rule.mapping
    );
    remove_rule(
        env,
        &rule.identity_provider,
        &rule.domain,
        &recorded_groups(rule),
        &ctx,
    )
    .await
}

/// Every group with a rule recorded in `rule`.
pub fn recorded_groups(rule: &FederationRuleStatus) -> Vec<String> {
    std::iter::once(rule.group.clone())
        .chain(rule.role_groups.iter().cloned())
        .collect()
}

/// The record of the rules written for the project group `group` and `role_groups` in
/// `domain` through `idp`.
pub fn record(
    idp: &str,
    domain: &str,
    group: &str,
    role_groups: Vec<String>,
) -> FederationRuleStatus {
    FederationRuleStatus {
        identity_provider: idp.to_string(),
        mapping: mapping_name(idp),
        domain: domain.to_string(),
        group: group.to_string(),
        role_groups,
    }
}

async fn remove_rule(
    env: &Env<'_>,
    idp: &str,
    domain: &str,
    groups: &[String],
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
    let mine: Vec<&str> = groups.iter().map(String::as_str).collect();
    match merge_rules(observed.as_ref().map(|m| &m.rules), &mine, domain, &[]) {
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
            merge_rules(
                Some(&existing),
                &["a-users"],
                "sso",
                std::slice::from_ref(&a)
            ),
            Ok(MappingChange::Unchanged)
        );
        // Changed users: replaced in place.
        let a2 = project_rule("a-users", "sso", &users(&["x", "z"]));
        assert_eq!(
            merge_rules(
                Some(&existing),
                &["a-users"],
                "sso",
                std::slice::from_ref(&a2)
            ),
            Ok(MappingChange::Write(json!([a2, b.clone()])))
        );
        // A new project appends.
        let c = project_rule("c-users", "sso", &users(&["w"]));
        assert_eq!(
            merge_rules(
                Some(&existing),
                &["c-users"],
                "sso",
                std::slice::from_ref(&c)
            ),
            Ok(MappingChange::Write(json!([a.clone(), b.clone(), c])))
        );
        // Same group name in another domain is another project's rule.
        let a_other = project_rule("a-users", "other", &users(&["q"]));
        assert!(matches!(
            merge_rules(Some(&existing), &["a-users"], "other", &[a_other]),
            Ok(MappingChange::Write(v)) if v.as_array().is_some_and(|a| a.len() == 3)
        ));
        // Removing: only ours goes; the last one deletes the mapping.
        assert_eq!(
            merge_rules(Some(&existing), &["a-users"], "sso", &[]),
            Ok(MappingChange::Write(json!([b.clone()])))
        );
        assert_eq!(
            merge_rules(Some(&json!([b])), &["b-users"], "sso", &[]),
            Ok(MappingChange::Delete)
        );
        assert_eq!(
            merge_rules(None, &["b-users"], "sso", &[]),
            Ok(MappingChange::Unchanged)
        );
        assert!(merge_rules(Some(&json!({"x": 1})), &["a"], "sso", &[]).is_err());
    }

    #[test]
    fn a_project_has_one_rule_per_role_kept_together() {
        let other = project_rule("b-users", "sso", &users(&["y"]));
        let member = project_rule("a-users", "sso", &users(&["x", "z"]));
        let reader = project_rule("a-users-reader", "sso", &users(&["r"]));
        let mine = ["a-users", "a-users-reader"];
        // Added after the other project's rule, together.
        assert_eq!(
            merge_rules(
                Some(&json!([other.clone()])),
                &mine,
                "sso",
                &[member.clone(), reader.clone()]
            ),
            Ok(MappingChange::Write(json!([
                other.clone(),
                member.clone(),
                reader.clone()
            ])))
        );
        // The reader binding goes: its rule (retired group) goes, the member rule stays.
        assert_eq!(
            merge_rules(
                Some(&json!([member.clone(), reader, other.clone()])),
                &mine,
                "sso",
                std::slice::from_ref(&member)
            ),
            Ok(MappingChange::Write(json!([member, other])))
        );
    }

    #[test]
    fn rename_retires_the_old_rule() {
        let old = project_rule("old-users", "sso", &users(&["x"]));
        let other = project_rule("b-users", "sso", &users(&["y"]));
        let new = project_rule("new-users", "sso", &users(&["x"]));
        assert_eq!(
            merge_rules(
                Some(&json!([old, other.clone()])),
                &["new-users", "old-users"],
                "sso",
                std::slice::from_ref(&new)
            ),
            Ok(MappingChange::Write(json!([new, other])))
        );
    }

    #[test]
    fn idp_remote_ids_are_corrected_but_not_its_enabled_flag() {
        assert!(
            matches!(plan_idp(None, "sso", "https://i", Some("d1"), "c"), IdpStep::Create(c) if c.enabled && c.remote_ids == vec!["https://i".to_string()])
        );
        let mut i = IdentityProvider {
            id: "sso".into(),
            enabled: false,
            remote_ids: vec!["https://i".into()],
            ..Default::default()
        };
        assert_eq!(
            plan_idp(Some(&i), "sso", "https://i", None, "c"),
            IdpStep::None
        );
        i.remote_ids = vec!["https://old".into()];
        assert!(
            matches!(plan_idp(Some(&i), "sso", "https://i", None, "c"), IdpStep::Update(u) if u.remote_ids == Some(vec!["https://i".to_string()]))
        );
        assert_eq!(plan_idp(Some(&i), "sso", "", None, "c"), IdpStep::None);
    }
}
