//! `OpenStackCluster`: creates one CR per service (owned by the cluster) and rolls their status
//! up, naming the failing child and why.

use std::sync::Arc;
use std::time::Instant;

use controlplane_api::cluster::{OpenStackClusterStatus, ServiceSummary};
use controlplane_api::condition_types as ct;
use controlplane_api::keystone::{DatabaseSpec, TokenSettings};
use controlplane_api::status::Conditioned;
use controlplane_api::validation::Validate;
use controlplane_api::{Keystone, KeystoneSpec, OpenStackCluster, ServiceName};
use futures::StreamExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};

use crate::runtime::{self, Ctx, Error, State};

/// Name of the Keystone CR of a cluster.
pub fn keystone_name(cluster: &str) -> String {
    format!("{cluster}-keystone")
}

/// The Keystone spec a cluster asks for (pure).
pub fn keystone_spec(c: &OpenStackCluster) -> KeystoneSpec {
    let s = &c.spec;
    KeystoneSpec {
        release: s.release.clone(),
        template: s.templates.get("keystone").cloned().unwrap_or_default(),
        database: DatabaseSpec {
            service: s.external_services.database.clone(),
            database_name: "keystone".into(),
            username: "keystone".into(),
        },
        cache: s.external_services.cache.clone(),
        region: "RegionOne".into(),
        public_endpoint: s
            .public_hostname_pattern
            .as_ref()
            .map(|p| format!("https://{}", p.replace("{service}", "keystone"))),
        admin_password_secret: None,
        tokens: TokenSettings::default(),
        credential_keys: Default::default(),
    }
}

/// The roll-up of the children's states (pure): the first child not Ready names the cluster's
/// state, e.g. `Keystone blocked: external service db (database) not Authenticated: ...`.
pub fn roll_up(
    children: &[(
        ServiceName,
        Option<&controlplane_api::ServiceStatus>,
        Option<i64>,
    )],
) -> (Vec<ServiceSummary>, State) {
    let mut summaries = Vec::new();
    let mut first: Option<State> = None;
    for (svc, status, generation) in children {
        let kind = svc.kind();
        let (ready, state) = match status {
            _ if !svc.implemented() => (
                false,
                State::Blocked {
                    reason: "ServiceNotImplemented".into(),
                    message: format!("{kind} is not deployed by this operator version yet"),
                },
            ),
            None => (
                false,
                State::Reconciling {
                    reason: "ServiceCreated".into(),
                    message: format!("{kind} has no status yet"),
                },
            ),
            Some(st) if st.observed_generation != *generation => (
                false,
                State::Reconciling {
                    reason: "ServiceReconciling".into(),
                    message: format!("{kind} has not observed its current spec yet"),
                },
            ),
            Some(st) => {
                let is = |t: &str| {
                    st.condition(t)
                        .filter(|c| c.is_true())
                        .map(|c| c.message.clone().unwrap_or_default())
                };
                if let Some(m) = is(ct::READY) {
                    (true, State::Ready(m))
                } else if let Some(m) = is(ct::INVALID_SPEC) {
                    (
                        false,
                        State::Blocked {
                            reason: "ServiceInvalidSpec".into(),
                            message: format!("{kind} invalid spec: {m}"),
                        },
                    )
                } else if let Some(m) = is(ct::BLOCKED) {
                    (
                        false,
                        State::Blocked {
                            reason: "ServiceBlocked".into(),
                            message: format!("{kind} blocked: {m}"),
                        },
                    )
                } else if let Some(m) = is(ct::DEGRADED) {
                    (
                        false,
                        State::Degraded {
                            reason: "ServiceDegraded".into(),
                            message: format!("{kind} degraded: {m}"),
                        },
                    )
                } else {
                    let m = is(ct::RECONCILING)
                        .or_else(|| st.condition(ct::READY).and_then(|c| c.message.clone()))
                        .unwrap_or_default();
                    (
                        false,
                        State::Reconciling {
                            reason: "ServiceReconciling".into(),
                            message: format!("{kind} reconciling: {m}"),
                        },
                    )
                }
            }
        };
        summaries.push(ServiceSummary {
            name: svc.as_str().into(),
            object: format!("{kind}/{}", svc.as_str()),
            ready,
            message: Some(state.summary().1.to_string()),
        });
        if !ready && first.is_none() {
            first = Some(state);
        }
    }
    let state =
        first.unwrap_or_else(|| State::Ready(format!("{} services Ready", summaries.len())));
    (summaries, state)
}

async fn reconcile(obj: Arc<OpenStackCluster>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let started = Instant::now();
    let ns = obj.namespace().ok_or(Error::Incomplete("namespace"))?;
    let api: Api<OpenStackCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let keystones: Api<Keystone> = Api::namespaced(ctx.client.clone(), &ns);
    let before: OpenStackClusterStatus = obj.status.clone().unwrap_or_default();
    let mut status = before.clone();
    let mut errors = api::validation::cel_errors(&*obj);
    for e in obj.spec.validate() {
        if !errors.iter().any(|x| x.path == e.path) {
            errors.push(e);
        }
    }
    let state = if !errors.is_empty() {
        State::InvalidSpec(api::validation::summarize(&errors))
    } else {
        let owner = obj
            .controller_owner_ref(&())
            .ok_or(Error::Incomplete("uid"))?;
        let mut children = Vec::new();
        let mut held = Vec::new();
        for svc in &obj.spec.services {
            if *svc == ServiceName::Keystone {
                let name = keystone_name(&obj.name_any());
                let mut ks = Keystone::new(&name, keystone_spec(&obj));
                ks.metadata.namespace = Some(ns.clone());
                ks.metadata.owner_references = Some(vec![owner.clone()]);
                let applied = runtime::apply(&keystones, &ks).await?;
                held.push((*svc, applied));
            } else {
                children.push((*svc, None, None));
            }
        }
        let mut all: Vec<(
            ServiceName,
            Option<&controlplane_api::ServiceStatus>,
            Option<i64>,
        )> = held
            .iter()
            .map(|(s, k)| (*s, k.status.as_ref(), k.metadata.generation))
            .collect();
        all.extend(children);
        all.sort_by_key(|(s, _, _)| *s);
        let (summaries, state) = roll_up(&all);
        status.services = summaries;
        state
    };
    runtime::set_state(&mut status, &state, obj.metadata.generation);
    runtime::after_pass(&ctx, &*obj, &before, &status).await;
    runtime::write_status(&api, &obj, &before, &status).await?;
    runtime::observe(&ctx, "OpenStackCluster", true, started);
    Ok(match state {
        State::InvalidSpec(_) => Action::await_change(),
        _ => Action::requeue(ctx.config.resync),
    })
}

/// Runs the controller until `shutdown` resolves; a change of an owned Keystone (its status
/// included) reconciles its cluster.
pub async fn run(
    ctx: Arc<Ctx>,
    api: Api<OpenStackCluster>,
    keystones: Api<Keystone>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    Controller::new(api, watcher::Config::default())
        .owns(keystones, watcher::Config::default())
        .graceful_shutdown_on(shutdown)
        .run(reconcile, runtime::error_policy, ctx)
        .for_each(|_| futures::future::ready(()))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::set_state;

    #[test]
    fn roll_up_names_the_failing_child_and_why() {
        let mut ks = controlplane_api::ServiceStatus::default();
        set_state(&mut ks, &State::Blocked { reason: "ExternalServiceNotReady".into(), message: "external service db (database) not Authenticated: access denied for user keystone".into() }, Some(1));
        let (sums, state) = roll_up(&[(ServiceName::Keystone, Some(&ks), Some(1))]);
        assert_eq!(
            state.summary().1,
            "Keystone blocked: external service db (database) not Authenticated: access denied for user keystone"
        );
        assert!(!sums[0].ready);
        set_state(&mut ks, &State::Ready("ok".into()), Some(1));
        let (_, state) = roll_up(&[(ServiceName::Keystone, Some(&ks), Some(1))]);
        assert!(matches!(state, State::Ready(_)));
        let (_, state) = roll_up(&[(ServiceName::Keystone, Some(&ks), Some(2))]);
        assert!(
            matches!(state, State::Reconciling { .. }),
            "a stale generation is not Ready"
        );
        let (_, state) = roll_up(&[
            (ServiceName::Keystone, Some(&ks), Some(1)),
            (ServiceName::Glance, None, None),
        ]);
        assert_eq!(
            state.summary().1,
            "Glance is not deployed by this operator version yet"
        );
    }
}
