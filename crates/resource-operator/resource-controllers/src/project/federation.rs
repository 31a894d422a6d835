//! Federation: the identity provider, the mapping `<idp>_oidc_mapping` shared by all projects
//! using that IdP, and the protocol `openid` pointing at it. Each project owns one rule per
//! role bound to users (the seed's JSON shape, so existing mappings keep working): the users
//! of `member` map into the project group, the users of another role into that role's group,
//! so every federated user gets exactly the roles of their bindings. A rule is identified by
//! its group name AND domain (seed W12: the name alone let `a.b` and `a_b` clobber each other).
//! An identity provider the operator created (marked in its description) is created in the
//! `sso-domain` (so Keystone makes no domain of its own for it) and removed with the mapping
//! when the last rule goes; one it found is never removed.
//!
//! The mapping is read-modified-written under a per-IdP lock, by a group commit: the passes
//! of all projects that need the IdP's mapping while one batch of it is under way queue their
//! edits, and the next holder of the lock takes every queued edit and runs them as one batch:
//! one read of the mapping (and of the IdP and protocol when needed), each project's
//! [`merge_rules`] in queue order on the rules as folded so far ([`RuleFold`], pure), one
//! write of the result (or the mapping's removal when no rule is left), and each project's
//! outcome (its errors with its own context, whether it wrote) handed back to it. So N
//! projects arriving together cost 2 to 4 requests instead of N times that, one after the
//! other. A failed shared read or write fails every project of the batch, and each retries as
//! it would alone; a lost write response is safe because the next batch reads the rules back
//! and finds them in (the merge is idempotent). The mapping is written only when the rules
//! change.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use api::naming::{FEDERATION_PROTOCOL, GROUP_DESCRIPTION_PREFIX, mapping_name};
use api::project::FederationRuleStatus;
use openstack::OptionalExt;
use openstack::model::{
    FederationProtocol, IdentityProvider, IdentityProviderCreate, IdentityProviderUpdate,
    MappingRules,
};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::oneshot;

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
    Write(MappingRules),
    /// Our rule was the last one and Keystone refuses an empty rule list: delete the mapping
    /// (and the protocol pointing at it).
    Delete,
}

/// Puts this project's rules into the shared rules, keeping every other project's rules and
/// their order. `mine` names every group whose rules are this project's (its current groups
/// and retired ones: the names before a rename, roles no longer bound); `rules` are the rules
/// wanted now, placed where the first of ours was.
pub fn merge_rules(
    existing: Option<&MappingRules>,
    mine: &[&str],
    domain: &str,
    rules: &[Value],
) -> Result<MappingChange, String> {
    // The shared rules hold one rule per tenant and a batch merges into them once per
    // project: they stay text ([`MappingRules`]), only each rule's group is read, and the
    // result is compared with what is there before anything is copied, so an edit that
    // changes nothing copies no rule and a change copies the texts once.
    let current: &[Box<RawValue>] = existing.map(MappingRules::as_slice).unwrap_or_default();
    let ours: Vec<bool> = current
        .iter()
        .map(|r| is_rule_of_any(r, mine, domain))
        .collect();
    let at = ours.iter().position(|o| *o).unwrap_or(current.len());
    let count = ours.iter().filter(|o| **o).count();
    let in_place = count == rules.len()
        && ours[at..at + count].iter().all(|o| *o)
        && current[at..at + count]
            .iter()
            .zip(rules)
            .all(|(have, want)| {
                serde_json::from_str::<Value>(have.get()).is_ok_and(|h| h == *want)
            });
    if in_place {
        return Ok(MappingChange::Unchanged);
    }
    let wanted = MappingRules::from_values(rules)
        .map_err(|e| format!("cannot encode the project's rules: {e}"))?;
    let mut next = Vec::with_capacity(current.len() - count + rules.len());
    next.extend_from_slice(&current[..at]);
    next.extend(wanted.into_vec());
    next.extend(
        current[at..]
            .iter()
            .zip(&ours[at..])
            .filter(|(_, o)| !**o)
            .map(|(r, _)| r.clone()),
    );
    Ok(if !next.is_empty() {
        MappingChange::Write(MappingRules::from(next))
    } else if existing.is_some() {
        MappingChange::Delete
    } else {
        MappingChange::Unchanged
    })
}

/// Whether [`is_project_rule`] holds for the rule's text and one of `groups`, the rule decoded
/// once: only the groups of its `local` part (the whole rule only when they have an
/// unexpected shape).
pub fn is_rule_of_any(rule: &RawValue, groups: &[&str], domain: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Rule {
        local: Vec<Local>,
    }
    #[derive(serde::Deserialize)]
    struct Local {
        group: Option<GroupRef>,
    }
    #[derive(serde::Deserialize)]
    struct GroupRef {
        name: Option<String>,
        domain: Option<DomainRef>,
    }
    #[derive(serde::Deserialize)]
    struct DomainRef {
        name: Option<String>,
    }
    match serde_json::from_str::<Rule>(rule.get()) {
        Ok(r) => r.local.iter().any(|l| {
            l.group.as_ref().is_some_and(|g| {
                g.name.as_deref().is_some_and(|n| groups.contains(&n))
                    && g.domain.as_ref().and_then(|d| d.name.as_deref()) == Some(domain)
            })
        }),
        Err(_) => serde_json::from_str::<Value>(rule.get())
            .is_ok_and(|r| groups.iter().any(|g| is_project_rule(&r, g, domain))),
    }
}

/// Several projects' edits of the shared rules folded, in order, into one write (the group
/// commit, see [`apply`]): each edit is [`merge_rules`] on the rules as the edits before it
/// left them, exactly as if the projects had run one after another, and [`RuleFold::into_net`] is
/// the one change that takes Keystone from what was read to the end result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleFold {
    /// The rules read from Keystone (`None`: no mapping).
    observed: Option<MappingRules>,
    /// The rules after the edits committed so far (`None`: the mapping is to be absent), or
    /// `None` while no edit has changed anything: the rules are not copied until one does.
    current: Option<Option<MappingRules>>,
}

impl RuleFold {
    /// Starts from the rules read (`None`: no mapping).
    pub fn new(observed: Option<MappingRules>) -> Self {
        RuleFold {
            observed,
            current: None,
        }
    }

    /// The rules as folded so far.
    fn current(&self) -> Option<&MappingRules> {
        match &self.current {
            Some(c) => c.as_ref(),
            None => self.observed.as_ref(),
        }
    }

    /// What one project's edit (see [`merge_rules`]) changes in the rules folded so far,
    /// without committing it: its IdP step may still fail, and then its rules stay out.
    pub fn merge(
        &self,
        mine: &[&str],
        domain: &str,
        rules: &[Value],
    ) -> Result<MappingChange, String> {
        merge_rules(self.current(), mine, domain, rules)
    }

    /// Whether the mapping exists once `change` (from [`RuleFold::merge`]) is committed.
    pub fn exists_after(&self, change: &MappingChange) -> bool {
        match change {
            MappingChange::Delete => false,
            MappingChange::Write(_) => true,
            MappingChange::Unchanged => self.current().is_some(),
        }
    }

    /// Commits `change` (from [`RuleFold::merge`] on the current state).
    pub fn commit(&mut self, change: MappingChange) {
        match change {
            MappingChange::Unchanged => {}
            MappingChange::Write(rules) => self.current = Some(Some(rules)),
            MappingChange::Delete => self.current = Some(None),
        }
    }

    /// Whether the mapping was there when read.
    pub fn existed(&self) -> bool {
        self.observed.is_some()
    }

    /// Whether the mapping is there once the net change is made.
    pub fn exists(&self) -> bool {
        self.current().is_some()
    }

    /// The one change that takes the mapping from what was read to the folded rules.
    pub fn into_net(self) -> MappingChange {
        match (self.observed, self.current) {
            (_, None) => MappingChange::Unchanged,
            (a, Some(b)) if a == b => MappingChange::Unchanged,
            (_, Some(Some(rules))) => MappingChange::Write(rules),
            (_, Some(None)) => MappingChange::Delete,
        }
    }
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
///
/// The shared objects are written by a group commit ([`commit`]): every project whose pass
/// needs the IdP's mapping while another batch of it is under way joins the next batch, which
/// reads the mapping, IdP and protocol once, folds the projects' rules in order and writes the
/// mapping once. The outcome is this project's own: its errors (with its own context), whether
/// a write of its happened, and whether its change removed the mapping.
pub(crate) async fn apply(
    env: &Env<'_>,
    settings: &FederationSettings,
    project_domain: &str,
    groups: &[(String, Vec<String>)],
    retired: &[String],
) -> AreaOutcome {
    let mut out = AreaOutcome::default();
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
    let mine: Vec<String> = groups
        .iter()
        .map(|(g, _)| g.clone())
        .chain(retired.iter().cloned())
        .collect();
    let done = commit(
        env,
        idp,
        Request {
            ctx,
            mine,
            domain: domain.to_string(),
            rules,
            uses: Some(settings.clone()),
        },
    )
    .await;
    out.errors = done.errors;
    out.changed = done.changed;
    if done.took_last {
        out.detail = Some(format!(
            "no users in spec.roleBindings; this project's rule was the last in {mapping}, which was removed"
        ));
        return out;
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
    remove_rule(env, &settings.idp, domain, groups, ctx).await
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
        ctx,
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
    ctx: String,
) -> AreaOutcome {
    let done = commit(
        env,
        idp,
        Request {
            ctx,
            mine: groups.to_vec(),
            domain: domain.to_string(),
            rules: Vec::new(),
            uses: None,
        },
    )
    .await;
    AreaOutcome {
        errors: done.errors,
        changed: done.changed,
        detail: None,
    }
}

/// One project's part of a batch.
struct Request {
    /// What its errors are about (its spec field or record), so each names its own object.
    ctx: String,
    /// The groups whose rules are this project's (see [`merge_rules`]).
    mine: Vec<String>,
    /// The domain named in its rules.
    domain: String,
    /// Its rules wanted now; none for a removal.
    rules: Vec<Value>,
    /// The settings of a project using the IdP, whose IdP and protocol must be in place while
    /// its rules are; `None` for a removal, which only takes rules out.
    uses: Option<FederationSettings>,
}

/// A project's outcome of a batch: what it would have got alone.
#[derive(Debug, Default)]
struct Committed {
    /// Its failures.
    errors: Vec<ReconcileError>,
    /// Whether a write of its (rules, IdP, protocol, removal) happened.
    changed: bool,
    /// Its change left the mapping empty, and the mapping (with protocol and our IdP) was
    /// removed.
    took_last: bool,
}

/// A request waiting for the next batch, and where its outcome goes.
struct Pending {
    request: Request,
    answer: oneshot::Sender<Committed>,
}

/// The requests queued for one IdP's next batch. Held by the
/// [`LockProvider`](super::LockProvider) beside the IdP's mapping lock, so two IdPs, or two
/// providers such as two tests' fake clouds, never share a batch.
#[derive(Default)]
pub struct MappingQueue(Mutex<Vec<Pending>>);

impl MappingQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Pending>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn mapping_lock(env: &Env<'_>, idp: &str) -> Arc<tokio::sync::Mutex<()>> {
    env.locks.lock_for(&format!("mapping/{idp}"))
}

/// How many requests wait for `idp`'s next batch (tests: to know a batch has formed).
#[cfg(test)]
pub(crate) fn pending(env: &Env<'_>, idp: &str) -> usize {
    env.locks.mapping_queue(idp).lock().len()
}

/// The group commit: queues `request` for `idp`'s next batch and waits for its outcome. The
/// holder of the IdP's mapping lock is the leader: it takes every request queued while it
/// waited (the queue is empty after each batch), runs them as one batch ([`run_batch`]) and
/// answers each. A request answered by an earlier leader returns at once.
async fn commit(env: &Env<'_>, idp: &str, request: Request) -> Committed {
    let cancelled = abandoned(&request.ctx, idp);
    let lock = mapping_lock(env, idp);
    let queue = env.locks.mapping_queue(idp);
    let (answer, mut outcome) = oneshot::channel();
    queue.lock().push(Pending { request, answer });
    let guard = tokio::select! {
        biased;
        done = &mut outcome => return done.unwrap_or(cancelled),
        guard = lock.lock() => guard,
    };
    // Answered by the leader that held the lock just before us, or that leader was cancelled
    // after taking our request (nothing is known of its writes: the project retries).
    match outcome.try_recv() {
        Ok(done) => return done,
        Err(oneshot::error::TryRecvError::Closed) => return cancelled,
        Err(oneshot::error::TryRecvError::Empty) => {}
    }
    // Not answered, so still queued (a leader takes requests only while holding the lock and
    // answers them all before releasing it): we lead. Requests whose pass was cancelled meanwhile
    // are dropped.
    let (requests, answers): (Vec<Request>, Vec<oneshot::Sender<Committed>>) =
        std::mem::take(&mut *queue.lock())
            .into_iter()
            .filter(|p| !p.answer.is_closed())
            .map(|p| (p.request, p.answer))
            .unzip();
    let outcomes = run_batch(env, idp, &requests).await;
    for (answer, done) in answers.into_iter().zip(outcomes) {
        // Err: that pass was cancelled since; nobody is waiting for its outcome.
        let _ = answer.send(done);
    }
    drop(guard);
    outcome.await.unwrap_or(cancelled)
}

fn abandoned(ctx: &str, idp: &str) -> Committed {
    Committed {
        errors: vec![ReconcileError::OpenStack(openstack::Error::Transient {
            message: format!(
                "{ctx}: the batch writing mapping {} was cancelled before it answered",
                mapping_name(idp)
            ),
        })],
        ..Default::default()
    }
}

/// Gives every project of the batch still without an error the failure `e` of `what`, each
/// with its own context: a failed shared read or write fails the whole batch, and each project
/// retries as it would alone (a lost write response is safe: the next batch reads the rules
/// back and finds them in).
fn fail_all(
    requests: &[Request],
    outs: &mut [Committed],
    only: impl Fn(usize) -> bool,
    what: &str,
    e: &openstack::Error,
) {
    for (i, (r, o)) in requests.iter().zip(outs.iter_mut()).enumerate() {
        if only(i) && o.errors.is_empty() {
            o.errors.push(os(format!("{}: {what}", r.ctx), e.clone()));
        }
    }
}

/// The shared objects as this batch knows them; `None`: not read yet, or to be read again
/// after a write of ours failed (its response may have been lost after it landed).
#[derive(Default)]
struct Seen {
    idp: Option<Option<IdentityProvider>>,
    protocol: Option<Option<FederationProtocol>>,
    /// Domain name → ID (or its absence), for creating the IdP.
    domains: HashMap<String, Option<String>>,
}

/// Runs one batch of `idp`'s mapping (see [`commit`]): one read of the mapping; each request
/// in order merged into the rules folded so far ([`RuleFold`]), after its IdP step when its
/// rules keep the mapping (a project whose IdP step fails keeps its rules out, as it would
/// alone); one write of the result (or its removal with the protocol and our IdP); then the
/// protocol step of every project using the mapping. The IdP and protocol are read once and
/// written only by the first project that needs it. One outcome per request, in order.
async fn run_batch(env: &Env<'_>, idp: &str, requests: &[Request]) -> Vec<Committed> {
    let identity = &env.cloud.identity;
    let mapping = mapping_name(idp);
    let mut outs: Vec<Committed> = requests.iter().map(|_| Committed::default()).collect();
    let everyone = |_: usize| true;
    let observed = match identity.get_mapping(&mapping).await.optional() {
        Ok(m) => m.map(|m| m.rules),
        Err(e) => {
            fail_all(
                requests,
                &mut outs,
                everyone,
                &format!("reading mapping {mapping}"),
                &e,
            );
            return outs;
        }
    };
    let mut fold = RuleFold::new(observed);
    let mut seen = Seen::default();
    // Requests whose rules changed the folded rules, and which need the protocol.
    let mut wrote = vec![false; requests.len()];
    let mut uses = vec![false; requests.len()];
    // The request whose change last emptied the rules.
    let mut emptied = None;
    for (i, r) in requests.iter().enumerate() {
        let mine: Vec<&str> = r.mine.iter().map(String::as_str).collect();
        let change = match fold.merge(&mine, &r.domain, &r.rules) {
            Ok(c) => c,
            Err(m) => {
                outs[i]
                    .errors
                    .push(ReconcileError::OpenStack(openstack::Error::unexpected(
                        format!("{}: mapping {mapping}: {m}", r.ctx),
                    )));
                continue;
            }
        };
        // The IdP first: the protocol needs it.
        if let Some(settings) = &r.uses
            && fold.exists_after(&change)
        {
            match ensure_idp(env, &mut seen, settings, &r.domain, &r.ctx).await {
                Ok(changed) => outs[i].changed |= changed,
                Err(IdpFailure::Read(e)) => {
                    fail_all(
                        requests,
                        &mut outs,
                        everyone,
                        &format!("reading identity provider {idp}"),
                        &e,
                    );
                    return outs;
                }
                Err(IdpFailure::Project(e)) => {
                    outs[i].errors.push(e);
                    continue;
                }
            }
            uses[i] = true;
        }
        match &change {
            MappingChange::Unchanged => {}
            MappingChange::Write(_) => {
                wrote[i] = true;
                emptied = None;
            }
            MappingChange::Delete => {
                wrote[i] = true;
                emptied = Some(i);
            }
        }
        fold.commit(change);
    }

    let (existed, exists) = (fold.existed(), fold.exists());
    let written = match fold.into_net() {
        MappingChange::Unchanged => Ok(()),
        MappingChange::Write(rules) => {
            let res = if existed {
                identity.update_mapping(&mapping, &rules).await
            } else {
                identity.create_mapping(&mapping, &rules).await
            };
            res.map(|_| ())
                .map_err(|e| (format!("writing mapping {mapping}"), e))
        }
        MappingChange::Delete => delete_mapping(env, &mut seen, idp, &mapping).await,
    };
    if let Err((what, e)) = written {
        fail_all(requests, &mut outs, everyone, &what, &e);
        return outs;
    }
    for (o, w) in outs.iter_mut().zip(&wrote) {
        o.changed |= *w && o.errors.is_empty();
    }
    if !exists {
        if let Some(i) = emptied
            && existed
        {
            outs[i].took_last = true;
        }
        return outs;
    }

    for (i, r) in requests.iter().enumerate() {
        let Some(settings) = r
            .uses
            .as_ref()
            .filter(|_| uses[i] && outs[i].errors.is_empty())
        else {
            continue;
        };
        match ensure_protocol(env, &mut seen, settings, idp, &mapping, &r.ctx).await {
            Ok(changed) => outs[i].changed |= changed,
            Err(IdpFailure::Read(e)) => {
                // Only the projects using the protocol depend on it.
                let users = |j: usize| uses[j];
                fail_all(
                    requests,
                    &mut outs,
                    users,
                    &format!("reading protocol {FEDERATION_PROTOCOL} of {idp}"),
                    &e,
                );
                return outs;
            }
            Err(IdpFailure::Project(e)) => outs[i].errors.push(e),
        }
    }
    outs
}

/// Why an IdP or protocol step failed.
enum IdpFailure {
    /// Reading the shared object failed: the whole batch fails.
    Read(openstack::Error),
    /// This project's step failed (its settings, its domain, its write).
    Project(ReconcileError),
}

/// The IdP step of one project (see [`plan_idp`]): whether it wrote.
async fn ensure_idp(
    env: &Env<'_>,
    seen: &mut Seen,
    settings: &FederationSettings,
    domain: &str,
    ctx: &str,
) -> Result<bool, IdpFailure> {
    let identity = &env.cloud.identity;
    let idp = settings.idp.as_str();
    let current = match &seen.idp {
        Some(i) => i.clone(),
        None => {
            let i = identity
                .get_identity_provider(idp)
                .await
                .optional()
                .map_err(IdpFailure::Read)?;
            seen.idp = Some(i.clone());
            i
        }
    };
    // Only a new IdP needs the domain's ID.
    let domain_id = match &current {
        Some(_) => None,
        None => {
            let id = match seen.domains.get(domain) {
                Some(id) => id.clone(),
                None => {
                    let id = resolve_domain(identity.as_ref(), domain)
                        .await
                        .map_err(|e| {
                            IdpFailure::Project(os(
                                format!("{ctx}: looking up domain {domain:?}"),
                                e,
                            ))
                        })?
                        .map(|d| d.id);
                    seen.domains.insert(domain.to_string(), id.clone());
                    id
                }
            };
            let Some(id) = id else {
                return Err(IdpFailure::Project(ReconcileError::DependencyMissing(
                    format!(
                        "domain {domain:?} (sso-domain in ConfigMap {}), to create identity provider {idp:?} in",
                        settings.config_map
                    ),
                )));
            };
            Some(id)
        }
    };
    let step = plan_idp(
        current.as_ref(),
        idp,
        &settings.remote_id,
        domain_id.as_deref(),
        &env.owner.cluster,
    );
    if !settings.may_manage_idp {
        idp_step_allowed(&step, settings).map_err(IdpFailure::Project)?;
    }
    let res = match &step {
        IdpStep::None => return Ok(false),
        IdpStep::Create(req) => identity.create_identity_provider(req).await,
        IdpStep::Update(req) => identity.update_identity_provider(idp, req).await,
    };
    match res {
        Ok(i) => {
            seen.idp = Some(Some(i));
            Ok(true)
        }
        Err(e) => {
            // Its response may have been lost after it landed: the next project reads again.
            seen.idp = None;
            Err(IdpFailure::Project(os(
                format!("{ctx}: identity provider {idp}"),
                e,
            )))
        }
    }
}

/// The protocol step of one project whose rules are in the mapping: the protocol points at
/// the mapping (only a trusted ConfigMap may repoint it). Whether it wrote.
async fn ensure_protocol(
    env: &Env<'_>,
    seen: &mut Seen,
    settings: &FederationSettings,
    idp: &str,
    mapping: &str,
    ctx: &str,
) -> Result<bool, IdpFailure> {
    let identity = &env.cloud.identity;
    let current = match &seen.protocol {
        Some(p) => p.clone(),
        None => {
            let p = identity
                .get_federation_protocol(idp, FEDERATION_PROTOCOL)
                .await
                .optional()
                .map_err(IdpFailure::Read)?;
            seen.protocol = Some(p.clone());
            p
        }
    };
    let (res, what) = match current {
        Some(p) if p.mapping_id == mapping => return Ok(false),
        Some(p) if !settings.may_manage_idp => {
            return Err(IdpFailure::Project(ReconcileError::PolicyViolation(
                format!(
                    "{ctx}: protocol {FEDERATION_PROTOCOL} of identity provider {idp} uses mapping {:?}, not {mapping}; only a ConfigMap in the operator's federation namespaces (--federation-namespaces) may repoint it",
                    p.mapping_id
                ),
            )));
        }
        Some(_) => (
            identity
                .update_federation_protocol(idp, FEDERATION_PROTOCOL, mapping)
                .await,
            format!("pointing protocol {FEDERATION_PROTOCOL} of {idp} at {mapping}"),
        ),
        None => (
            identity
                .create_federation_protocol(idp, FEDERATION_PROTOCOL, mapping)
                .await,
            format!("creating protocol {FEDERATION_PROTOCOL} of {idp}"),
        ),
    };
    match res {
        Ok(p) => {
            seen.protocol = Some(Some(p));
            Ok(true)
        }
        Err(e) => {
            // Its response may have been lost after it landed: the next project reads again.
            seen.protocol = None;
            Err(IdpFailure::Project(os(format!("{ctx}: {what}"), e)))
        }
    }
}

/// Deletes the protocol (it points at the mapping), then the mapping, then an IdP we created
/// (no project uses it any more; one we found stays); gone is fine. The failed step and its
/// error.
async fn delete_mapping(
    env: &Env<'_>,
    seen: &mut Seen,
    idp: &str,
    mapping: &str,
) -> Result<(), (String, openstack::Error)> {
    let identity = &env.cloud.identity;
    let protocol = identity
        .get_federation_protocol(idp, FEDERATION_PROTOCOL)
        .await
        .optional()
        .map_err(|e| {
            (
                format!("reading protocol {FEDERATION_PROTOCOL} of {idp}"),
                e,
            )
        })?;
    if protocol.is_some_and(|p| p.mapping_id == mapping) {
        identity
            .delete_federation_protocol(idp, FEDERATION_PROTOCOL)
            .await
            .optional()
            .map_err(|e| {
                (
                    format!("deleting protocol {FEDERATION_PROTOCOL} of {idp}"),
                    e,
                )
            })?;
    }
    identity
        .delete_mapping(mapping)
        .await
        .optional()
        .map_err(|e| (format!("deleting mapping {mapping}"), e))?;
    let current = match seen.idp.take() {
        Some(i) => i,
        None => identity
            .get_identity_provider(idp)
            .await
            .optional()
            .map_err(|e| (format!("reading identity provider {idp}"), e))?,
    };
    if current.is_some_and(|i| idp_is_ours(&i, &env.owner.cluster)) {
        identity
            .delete_identity_provider(idp)
            .await
            .optional()
            .map_err(|e| (format!("deleting identity provider {idp}"), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rules as the compact text a merge writes.
    fn text(v: Value) -> MappingRules {
        MappingRules::from_values(v.as_array().unwrap_or_else(|| panic!("not a list: {v}")))
            .unwrap_or_else(|e| panic!("{e}"))
    }

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

    /// Rules as Keystone returns them: its own JSON formatting, not ours.
    fn keystone_text(rules: &[Value]) -> MappingRules {
        let texts: Vec<Box<RawValue>> = rules
            .iter()
            .map(|r| {
                let pretty = serde_json::to_string_pretty(r).unwrap_or_else(|e| panic!("{e}"));
                RawValue::from_string(pretty).unwrap_or_else(|e| panic!("{e}"))
            })
            .collect();
        MappingRules::from(texts)
    }

    #[test]
    fn rules_held_as_keystone_text_are_compared_as_json_and_passed_through_verbatim() {
        let a = project_rule("a-users", "sso", &users(&["x"]));
        let b = project_rule("b-users", "sso", &users(&["y"]));
        // Another tool's rule with a local part of another shape: not ours, kept.
        let odd = json!({"local": ["x", {"group": {"id": "g1"}}], "remote": [{"type": "t"}]});
        let held = keystone_text(&[odd.clone(), a.clone(), b.clone()]);
        // Our rule, formatted differently, is the same rule: nothing to write.
        assert_eq!(
            merge_rules(Some(&held), &["a-users"], "sso", std::slice::from_ref(&a)),
            Ok(MappingChange::Unchanged)
        );
        // A change rewrites ours only: the others' text is what Keystone gave.
        let a2 = project_rule("a-users", "sso", &users(&["x", "z"]));
        let Ok(MappingChange::Write(next)) =
            merge_rules(Some(&held), &["a-users"], "sso", std::slice::from_ref(&a2))
        else {
            panic!("a write expected")
        };
        let texts: Vec<&str> = next.as_slice().iter().map(|r| r.get()).collect();
        let held_texts: Vec<&str> = held.as_slice().iter().map(|r| r.get()).collect();
        assert_eq!(texts[0], held_texts[0]);
        assert_eq!(texts[2], held_texts[2]);
        assert_eq!(next.to_value().unwrap(), json!([odd, a2, b]));
        // A rule of ours whose local part has an unexpected shape is still recognised.
        let mut odd_ours = a.clone();
        odd_ours["local"]
            .as_array_mut()
            .unwrap_or_else(|| panic!("local"))
            .push(json!("extra"));
        let held = keystone_text(&[odd_ours, b.clone()]);
        assert!(is_rule_of_any(&held.as_slice()[0], &["a-users"], "sso"));
        assert!(!is_rule_of_any(&held.as_slice()[0], &["b-users"], "sso"));
        assert_eq!(
            merge_rules(Some(&held), &["a-users"], "sso", &[]),
            Ok(MappingChange::Write(keystone_text(std::slice::from_ref(
                &b
            ))))
        );
    }

    #[test]
    fn merge_keeps_other_projects_rules_in_place() {
        let a = project_rule("a-users", "sso", &users(&["x"]));
        let b = project_rule("b-users", "sso", &users(&["y"]));
        let existing = text(json!([a.clone(), b.clone()]));
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
            Ok(MappingChange::Write(text(json!([a2, b.clone()]))))
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
            Ok(MappingChange::Write(text(json!([a.clone(), b.clone(), c]))))
        );
        // Same group name in another domain is another project's rule.
        let a_other = project_rule("a-users", "other", &users(&["q"]));
        assert!(matches!(
            merge_rules(Some(&existing), &["a-users"], "other", &[a_other]),
            Ok(MappingChange::Write(v)) if v.len() == 3
        ));
        // Removing: only ours goes; the last one deletes the mapping.
        assert_eq!(
            merge_rules(Some(&existing), &["a-users"], "sso", &[]),
            Ok(MappingChange::Write(text(json!([b.clone()]))))
        );
        assert_eq!(
            merge_rules(Some(&text(json!([b]))), &["b-users"], "sso", &[]),
            Ok(MappingChange::Delete)
        );
        assert_eq!(
            merge_rules(None, &["b-users"], "sso", &[]),
            Ok(MappingChange::Unchanged)
        );
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
                Some(&text(json!([other.clone()]))),
                &mine,
                "sso",
                &[member.clone(), reader.clone()]
            ),
            Ok(MappingChange::Write(text(json!([
                other.clone(),
                member.clone(),
                reader.clone()
            ]))))
        );
        // The reader binding goes: its rule (retired group) goes, the member rule stays.
        assert_eq!(
            merge_rules(
                Some(&text(json!([member.clone(), reader, other.clone()]))),
                &mine,
                "sso",
                std::slice::from_ref(&member)
            ),
            Ok(MappingChange::Write(text(json!([member, other]))))
        );
    }

    #[test]
    fn rename_retires_the_old_rule() {
        let old = project_rule("old-users", "sso", &users(&["x"]));
        let other = project_rule("b-users", "sso", &users(&["y"]));
        let new = project_rule("new-users", "sso", &users(&["x"]));
        assert_eq!(
            merge_rules(
                Some(&text(json!([old, other.clone()]))),
                &["new-users", "old-users"],
                "sso",
                std::slice::from_ref(&new)
            ),
            Ok(MappingChange::Write(text(json!([new, other]))))
        );
    }

    /// Folds `edits` ((groups, rules) of each project, in order) as a batch does, each
    /// committed; every edit's own change and the batch's net change.
    fn fold_all(
        observed: Option<MappingRules>,
        edits: &[(&[&str], Vec<Value>)],
    ) -> (Vec<Result<MappingChange, String>>, MappingChange) {
        let mut fold = RuleFold::new(observed);
        let each = edits
            .iter()
            .map(|(mine, rules)| {
                let c = fold.merge(mine, "sso", rules)?;
                fold.commit(c.clone());
                Ok(c)
            })
            .collect();
        (each, fold.into_net())
    }

    #[test]
    fn a_batch_folds_every_projects_edit_into_one_write() {
        let x = project_rule("x-users", "sso", &users(&["1"]));
        let a = project_rule("a-users", "sso", &users(&["2"]));
        let b = project_rule("b-users", "sso", &users(&["3"]));
        // a is added, x's project was deleted, b is added: one write of the end result.
        let edits: [(&[&str], Vec<Value>); 3] = [
            (&["a-users"], vec![a.clone()]),
            (&["x-users"], vec![]),
            (&["b-users"], vec![b.clone()]),
        ];
        let (each, net) = fold_all(Some(text(json!([x.clone()]))), &edits);
        assert_eq!(
            each,
            vec![
                Ok(MappingChange::Write(text(json!([x, a.clone()])))),
                Ok(MappingChange::Write(text(json!([a.clone()])))),
                Ok(MappingChange::Write(text(json!([a.clone(), b.clone()])))),
            ]
        );
        assert_eq!(
            net,
            MappingChange::Write(text(json!([a.clone(), b.clone()])))
        );
        // The write's response was lost: the next batch reads the result back and finds
        // every edit in (merge is idempotent).
        let (each, net) = fold_all(Some(text(json!([a.clone(), b.clone()]))), &edits);
        assert!(
            each.iter().all(|c| c == &Ok(MappingChange::Unchanged)),
            "{each:?}"
        );
        assert_eq!(net, MappingChange::Unchanged);
        // The first project of a new mapping: one write creates it with every rule.
        let (_, net) = fold_all(None, &edits);
        assert_eq!(net, MappingChange::Write(text(json!([a, b]))));
    }

    #[test]
    fn a_batch_deletes_the_mapping_only_when_its_end_result_is_empty() {
        let a = project_rule("a-users", "sso", &users(&["2"]));
        let b = project_rule("b-users", "sso", &users(&["3"]));
        let c = project_rule("c-users", "sso", &users(&["4"]));
        let both = text(json!([a.clone(), b.clone()]));
        let (each, net) = fold_all(
            Some(both.clone()),
            &[(&["a-users"], vec![]), (&["b-users"], vec![])],
        );
        assert_eq!(each[1], Ok(MappingChange::Delete));
        assert_eq!(net, MappingChange::Delete);
        // Emptied, then a new project's rule: one write, no delete and create.
        let (each, net) = fold_all(
            Some(both.clone()),
            &[
                (&["a-users"], vec![]),
                (&["b-users"], vec![]),
                (&["c-users"], vec![c.clone()]),
            ],
        );
        assert_eq!(each[2], Ok(MappingChange::Write(text(json!([c.clone()])))));
        assert_eq!(net, MappingChange::Write(text(json!([c]))));
        // Removals from a mapping that is not there change nothing.
        assert_eq!(
            fold_all(None, &[(&["a-users"], vec![])]).1,
            MappingChange::Unchanged
        );
    }

    #[test]
    fn an_edit_left_uncommitted_stays_out_of_the_batch() {
        // A project whose IdP step failed: merged (to know whether it needs the IdP), not
        // committed; the others' rules are written without its rule.
        let a = project_rule("a-users", "sso", &users(&["2"]));
        let b = project_rule("b-users", "sso", &users(&["3"]));
        let mut fold = RuleFold::new(None);
        let ca = fold
            .merge(&["a-users"], "sso", std::slice::from_ref(&a))
            .unwrap();
        assert!(fold.exists_after(&ca));
        let cb = fold
            .merge(&["b-users"], "sso", std::slice::from_ref(&b))
            .unwrap();
        fold.commit(cb);
        assert!(fold.exists() && !fold.existed());
        assert_eq!(fold.into_net(), MappingChange::Write(text(json!([b]))));
        // No rule and no mapping: nothing needs the IdP.
        let fold = RuleFold::new(None);
        let c = fold.merge(&["a-users"], "sso", &[]).unwrap();
        assert!(!fold.exists_after(&c));
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
