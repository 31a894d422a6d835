//! `OpenStackCluster`: creates one CR per service (owned by the cluster) and rolls their status
//! up, naming the failing child and why.

use std::sync::Arc;
use std::time::Instant;

use controlplane_api::cluster::{OpenStackClusterStatus, ServiceSummary};
use controlplane_api::common::{DatabaseRef, KeystoneRef};
use controlplane_api::condition_types as ct;
use controlplane_api::keystone::{DatabaseSpec, TokenSettings};
use controlplane_api::status::Conditioned;
use controlplane_api::validation::Validate;
use controlplane_api::{
    Keystone, KeystoneSpec, OpenStackCluster, Placement, PlacementSpec, ServiceName, ServiceStatus,
};
use futures::StreamExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};

use crate::runtime::{self, Ctx, Error, State};

/// Name of the Keystone CR of a cluster.
pub fn keystone_name(cluster: &str) -> String {
    child_name(cluster, ServiceName::Keystone)
}

/// Name of the CR of service `svc` of a cluster.
pub fn child_name(cluster: &str, svc: ServiceName) -> String {
    format!("{cluster}-{}", svc.as_str())
}

/// The public URL of service `svc` from the cluster's host-name pattern, if it has one.
fn public_url(c: &OpenStackCluster, svc: ServiceName) -> Option<String> {
    c.spec
        .public_hostname_pattern
        .as_ref()
        .map(|p| format!("https://{}", p.replace("{service}", svc.as_str())))
}

/// The Placement spec a cluster asks for (pure).
pub fn placement_spec(c: &OpenStackCluster) -> PlacementSpec {
    let s = &c.spec;
    PlacementSpec {
        release: s.release.clone(),
        template: s.templates.get("placement").cloned().unwrap_or_default(),
        database: DatabaseRef {
            service: s.external_services.database.clone(),
            database_name: None,
            username: None,
        },
        keystone: KeystoneRef {
            name: keystone_name(&c.name_any()),
        },
        cache: s.external_services.cache.clone(),
        public_endpoint: public_url(c, ServiceName::Placement),
    }
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
        public_endpoint: public_url(c, ServiceName::Keystone),
        admin_password_secret: None,
        tokens: TokenSettings::default(),
        credential_keys: Default::default(),
    }
}

/// The roll-up of the children's states (pure): the first child not Ready names the cluster's
/// state, e.g. `Keystone blocked: external service db (database) not Authenticated: ...`.
pub fn roll_up(
    cluster: &str,
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
            object: format!("{kind}/{}", child_name(cluster, *svc)),
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
    let before: OpenStackClusterStatus = obj.status.clone().unwrap_or_default();
    let mut status = before.clone();
    let mut errors = api::validation::cel_errors(&*obj);
    for e in obj.spec.validate() {
        if !errors.iter().any(|x| x.path == e.path) {
            errors.push(e);
        }
    }
    // The upgrade machine: which release each child runs, and the state while it works.
    let gate = match errors.is_empty() {
        true => Some(crate::upgrade::drive(&ctx, &obj, &mut status).await?),
        false => None,
    };
    let release = |svc| {
        gate.as_ref().map_or(obj.spec.release.clone(), |g| {
            g.release(svc, &obj.spec.release)
        })
    };
    let state = if !errors.is_empty() {
        State::InvalidSpec(api::validation::summarize(&errors))
    } else if let Some(refused @ State::InvalidSpec(_)) =
        gate.as_ref().and_then(|g| g.state.clone())
    {
        refused
    } else {
        let owner = obj
            .controller_owner_ref(&())
            .ok_or(Error::Incomplete("uid"))?;
        let mut held: Vec<(ServiceName, Option<ServiceStatus>, Option<i64>)> = Vec::new();
        for svc in &obj.spec.services {
            let name = child_name(&obj.name_any(), *svc);
            let meta = |m: &mut kube::api::ObjectMeta| {
                m.namespace = Some(ns.clone());
                m.owner_references = Some(vec![owner.clone()]);
            };
            let child = match svc {
                ServiceName::Keystone => {
                    let spec = KeystoneSpec {
                        release: release(*svc),
                        ..keystone_spec(&obj)
                    };
                    let mut ks = Keystone::new(&name, spec);
                    meta(&mut ks.metadata);
                    let api: Api<Keystone> = Api::namespaced(ctx.client.clone(), &ns);
                    let k = runtime::apply(&api, &ks).await?;
                    (k.status, k.metadata.generation)
                }
                ServiceName::Placement => {
                    let spec = PlacementSpec {
                        release: release(*svc),
                        ..placement_spec(&obj)
                    };
                    let mut pl = Placement::new(&name, spec);
                    meta(&mut pl.metadata);
                    let api: Api<Placement> = Api::namespaced(ctx.client.clone(), &ns);
                    let p = runtime::apply(&api, &pl).await?;
                    (p.status, p.metadata.generation)
                }
                _ => (None, None),
            };
            held.push((*svc, child.0, child.1));
        }
        let mut all: Vec<(ServiceName, Option<&ServiceStatus>, Option<i64>)> = held
            .iter()
            .map(|(s, st, g)| (*s, st.as_ref(), *g))
            .collect();
        all.sort_by_key(|(s, _, _)| *s);
        let (summaries, state) = roll_up(&obj.name_any(), &all);
        status.services = summaries;
        crate::upgrade::combine(gate.and_then(|g| g.state), state)
    };
    runtime::set_state(&mut status, &state, obj.metadata.generation);
    runtime::after_pass(&ctx, &*obj, &before, &status).await;
    runtime::write_status(&api, &obj, &before, &status).await?;
    runtime::observe(&ctx, "OpenStackCluster", true, started);
    Ok(match state {
        State::InvalidSpec(_) => Action::await_change(),
        // An upgrade step's Job does not wake the cluster: look again soon.
        State::Reconciling { reason, .. } if reason == "Upgrading" => {
            Action::requeue(ctx.config.resync.min(std::time::Duration::from_secs(10)))
        }
        _ => Action::requeue(ctx.config.resync),
    })
}

/// Runs the controller until `shutdown` resolves; a change of an owned service CR (its status
/// included) reconciles its cluster.
pub async fn run(
    ctx: Arc<Ctx>,
    api: Api<OpenStackCluster>,
    keystones: Api<Keystone>,
    placements: Api<Placement>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    Controller::new(api, watcher::Config::default())
        .owns(keystones, watcher::Config::default())
        .owns(placements, watcher::Config::default())
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
        let (sums, state) = roll_up("cloud", &[(ServiceName::Keystone, Some(&ks), Some(1))]);
        assert_eq!(
            state.summary().1,
            "Keystone blocked: external service db (database) not Authenticated: access denied for user keystone"
        );
        assert!(!sums[0].ready);
        set_state(&mut ks, &State::Ready("ok".into()), Some(1));
        let (_, state) = roll_up("cloud", &[(ServiceName::Keystone, Some(&ks), Some(1))]);
        assert!(matches!(state, State::Ready(_)));
        let (_, state) = roll_up("cloud", &[(ServiceName::Keystone, Some(&ks), Some(2))]);
        assert!(
            matches!(state, State::Reconciling { .. }),
            "a stale generation is not Ready"
        );
        let (_, state) = roll_up(
            "cloud",
            &[
                (ServiceName::Keystone, Some(&ks), Some(1)),
                (ServiceName::Glance, None, None),
            ],
        );
        assert_eq!(
            state.summary().1,
            "Glance is not deployed by this operator version yet"
        );
    }

    #[test]
    fn a_failing_placement_is_named_after_a_ready_keystone() {
        let mut ks = controlplane_api::ServiceStatus::default();
        set_state(&mut ks, &State::Ready("ok".into()), Some(1));
        let mut pl = controlplane_api::ServiceStatus::default();
        set_state(
            &mut pl,
            &State::Degraded {
                reason: "JobFailed".into(),
                message: "db-sync attempt 2 failed".into(),
            },
            Some(4),
        );
        let (sums, state) = roll_up(
            "cloud",
            &[
                (ServiceName::Keystone, Some(&ks), Some(1)),
                (ServiceName::Placement, Some(&pl), Some(4)),
            ],
        );
        assert_eq!(
            state.summary().1,
            "Placement degraded: db-sync attempt 2 failed"
        );
        assert_eq!(
            sums.iter()
                .map(|s| (s.object.as_str(), s.ready))
                .collect::<Vec<_>>(),
            [
                ("Keystone/cloud-keystone", true),
                ("Placement/cloud-placement", false)
            ]
        );
    }

    #[test]
    fn the_placement_of_a_cluster_uses_its_keystone_and_external_services() {
        let c: OpenStackCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "OpenStackCluster",
            "metadata": {"name": "cloud", "namespace": "os"},
            "spec": {"services": ["keystone", "placement"],
                     "externalServices": {"database": {"name": "db"}, "cache": {"name": "mc"}},
                     "publicHostnamePattern": "{service}.example.org",
                     "templates": {"placement": {"replicas": 3}}}}))
        .expect("cluster");
        let p = placement_spec(&c);
        assert_eq!(p.keystone.name, "cloud-keystone");
        assert_eq!(p.database.service.name, "db");
        assert_eq!(p.cache.map(|c| c.name).as_deref(), Some("mc"));
        assert_eq!(
            p.public_endpoint.as_deref(),
            Some("https://placement.example.org")
        );
        assert_eq!(p.template.replicas, Some(3));
        assert_eq!(
            child_name("cloud", ServiceName::Placement),
            "cloud-placement"
        );
    }
}
