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
use controlplane_api::{Cinder, CinderSpec, Nova, NovaSpec};
use controlplane_api::{Glance, GlanceSpec, Horizon, HorizonSpec, Neutron, NeutronSpec};
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

/// The Nova spec a cluster asks for (pure): the cluster's Keystone and Placement, its
/// Glance and Neutron when it runs them (the catalog otherwise), its external services.
pub fn nova_spec(c: &OpenStackCluster) -> NovaSpec {
    let s = &c.spec;
    let peer = |svc: ServiceName| {
        s.services
            .contains(&svc)
            .then(|| controlplane_api::nova::ServiceRef {
                name: child_name(&c.name_any(), svc),
            })
    };
    NovaSpec {
        release: s.release.clone(),
        template: s.templates.get("nova").cloned().unwrap_or_default(),
        database: DatabaseRef {
            service: s.external_services.database.clone(),
            database_name: None,
            username: None,
        },
        // Validation refuses a cluster running Nova without a messaging service.
        messaging: s.external_services.messaging.clone().unwrap_or_default(),
        keystone: KeystoneRef {
            name: keystone_name(&c.name_any()),
        },
        placement: controlplane_api::nova::ServiceRef {
            name: child_name(&c.name_any(), ServiceName::Placement),
        },
        glance: peer(ServiceName::Glance),
        neutron: peer(ServiceName::Neutron),
        cache: s.external_services.cache.clone(),
        public_endpoint: public_url(c, ServiceName::Nova),
        vnc_proxy_public_endpoint: s
            .public_hostname_pattern
            .as_ref()
            .map(|p| format!("https://{}", p.replace("{service}", "novncproxy"))),
        discover_hosts_interval_seconds: controlplane_api::nova::DEFAULT_DISCOVER_HOSTS_INTERVAL,
        compute_driver: "libvirt.LibvirtDriver".into(),
        availability_zones: s.availability_zones.clone(),
    }
}

/// The Cinder spec a cluster asks for (pure).
pub fn cinder_spec(c: &OpenStackCluster) -> CinderSpec {
    let s = &c.spec;
    CinderSpec {
        release: s.release.clone(),
        template: s.templates.get("cinder").cloned().unwrap_or_default(),
        database: DatabaseRef {
            service: s.external_services.database.clone(),
            database_name: None,
            username: None,
        },
        // Validation refuses a cluster running Cinder without a messaging service.
        messaging: s.external_services.messaging.clone().unwrap_or_default(),
        keystone: KeystoneRef {
            name: keystone_name(&c.name_any()),
        },
        cache: s.external_services.cache.clone(),
        backends: s.cinder_backends.clone(),
        public_endpoint: public_url(c, ServiceName::Cinder),
        availability_zones: s.availability_zones.clone(),
    }
}

/// The Glance spec a cluster asks for (pure): images in the `objectStorage` external
/// service when the cluster has one, else on a 10Gi file-store PVC; web-download disabled (an
/// allow-list is a decision the cluster does not make: create a Glance to enable it).
pub fn glance_spec(c: &OpenStackCluster) -> GlanceSpec {
    use controlplane_api::glance::{FileStore, GlanceStorage, S3StoreSpec};
    let s = &c.spec;
    let s3 = s
        .external_services
        .object_storage
        .clone()
        .map(|o| S3StoreSpec {
            object_storage: o,
            bucket: None,
            region: None,
            create_bucket: true,
        });
    GlanceSpec {
        release: s.release.clone(),
        template: s.templates.get("glance").cloned().unwrap_or_default(),
        database: DatabaseRef {
            service: s.external_services.database.clone(),
            database_name: None,
            username: None,
        },
        keystone: KeystoneRef {
            name: keystone_name(&c.name_any()),
        },
        cache: s.external_services.cache.clone(),
        storage: GlanceStorage {
            file: s3.is_none().then(FileStore::default),
            s3,
            default_store: None,
        },
        web_download: None,
        public_endpoint: public_url(c, ServiceName::Glance),
    }
}

/// The Neutron spec a cluster asks for (pure): the cluster's `ovn` external service, and its
/// Nova's metadata API when the cluster runs Nova.
pub fn neutron_spec(c: &OpenStackCluster) -> NeutronSpec {
    let s = &c.spec;
    NeutronSpec {
        release: s.release.clone(),
        template: s.templates.get("neutron").cloned().unwrap_or_default(),
        database: DatabaseRef {
            service: s.external_services.database.clone(),
            database_name: None,
            username: None,
        },
        keystone: KeystoneRef {
            name: keystone_name(&c.name_any()),
        },
        cache: s.external_services.cache.clone(),
        ovn: s.external_services.ovn.clone().unwrap_or_default(),
        nova: s
            .services
            .contains(&ServiceName::Nova)
            .then(|| controlplane_api::neutron::NovaRef {
                name: child_name(&c.name_any(), ServiceName::Nova),
            }),
        networks: Default::default(),
        public_endpoint: public_url(c, ServiceName::Neutron),
    }
}

/// The Horizon spec a cluster asks for (pure): the cluster's Keystone, sessions in its cache.
pub fn horizon_spec(c: &OpenStackCluster) -> HorizonSpec {
    let s = &c.spec;
    HorizonSpec {
        release: s.release.clone(),
        template: s.templates.get("horizon").cloned().unwrap_or_default(),
        keystone: KeystoneRef {
            name: keystone_name(&c.name_any()),
        },
        cache: s.external_services.cache.clone(),
        public_endpoint: public_url(c, ServiceName::Horizon),
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
                ServiceName::Nova => {
                    let spec = NovaSpec {
                        release: release(*svc),
                        ..nova_spec(&obj)
                    };
                    let mut nv = Nova::new(&name, spec);
                    meta(&mut nv.metadata);
                    let api: Api<Nova> = Api::namespaced(ctx.client.clone(), &ns);
                    let n = runtime::apply(&api, &nv).await?;
                    (n.status, n.metadata.generation)
                }
                ServiceName::Cinder => {
                    let spec = CinderSpec {
                        release: release(*svc),
                        ..cinder_spec(&obj)
                    };
                    let mut cn = Cinder::new(&name, spec);
                    meta(&mut cn.metadata);
                    let api: Api<Cinder> = Api::namespaced(ctx.client.clone(), &ns);
                    let c = runtime::apply(&api, &cn).await?;
                    (c.status, c.metadata.generation)
                }
                ServiceName::Glance => {
                    let spec = GlanceSpec {
                        release: release(*svc),
                        ..glance_spec(&obj)
                    };
                    let mut g = Glance::new(&name, spec);
                    meta(&mut g.metadata);
                    let api: Api<Glance> = Api::namespaced(ctx.client.clone(), &ns);
                    let g = runtime::apply(&api, &g).await?;
                    (g.status, g.metadata.generation)
                }
                ServiceName::Neutron => {
                    let spec = NeutronSpec {
                        release: release(*svc),
                        ..neutron_spec(&obj)
                    };
                    let mut n = Neutron::new(&name, spec);
                    meta(&mut n.metadata);
                    let api: Api<Neutron> = Api::namespaced(ctx.client.clone(), &ns);
                    let n = runtime::apply(&api, &n).await?;
                    (n.status, n.metadata.generation)
                }
                ServiceName::Horizon => {
                    let spec = HorizonSpec {
                        release: release(*svc),
                        ..horizon_spec(&obj)
                    };
                    let mut h = Horizon::new(&name, spec);
                    meta(&mut h.metadata);
                    let api: Api<Horizon> = Api::namespaced(ctx.client.clone(), &ns);
                    let h = runtime::apply(&api, &h).await?;
                    (h.status, h.metadata.generation)
                }
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

/// The compute and block-storage kinds a cluster owns (watched: a change of one, its status
/// included, reconciles its cluster).
pub struct ComputeKinds {
    /// Novas.
    pub novas: Api<Nova>,
    /// Cinders.
    pub cinders: Api<Cinder>,
}

/// The Glance, Neutron and Horizon CRs the cluster controller owns and watches.
pub struct NetworkImageApis {
    /// Glances.
    pub glances: Api<Glance>,
    /// Neutrons.
    pub neutrons: Api<Neutron>,
    /// Horizons.
    pub horizons: Api<Horizon>,
}

/// Runs the controller until `shutdown` resolves; a change of an owned service CR (its status
/// included) reconciles its cluster.
pub async fn run(
    ctx: Arc<Ctx>,
    api: Api<OpenStackCluster>,
    keystones: Api<Keystone>,
    placements: Api<Placement>,
    compute: ComputeKinds,
    network_image: NetworkImageApis,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    Controller::new(api, watcher::Config::default())
        .owns(keystones, watcher::Config::default())
        .owns(placements, watcher::Config::default())
        .owns(compute.novas, watcher::Config::default())
        .owns(compute.cinders, watcher::Config::default())
        .owns(network_image.glances, watcher::Config::default())
        .owns(network_image.neutrons, watcher::Config::default())
        .owns(network_image.horizons, watcher::Config::default())
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
        assert_eq!(state.summary().1, "Glance has no status yet");
    }

    fn cluster(spec: serde_json::Value) -> OpenStackCluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "OpenStackCluster",
            "metadata": {"name": "cloud", "namespace": "os"}, "spec": spec}))
        .expect("cluster")
    }

    #[test]
    fn the_glance_of_a_cluster_stores_in_object_storage_else_on_a_claim() {
        let c = cluster(serde_json::json!({"services": ["keystone", "glance"],
            "externalServices": {"database": {"name": "db"}, "cache": {"name": "mc"},
                                 "objectStorage": {"name": "rgw"}},
            "publicHostnamePattern": "{service}.example.org",
            "templates": {"glance": {"replicas": 2}}}));
        let g = glance_spec(&c);
        assert_eq!(g.keystone.name, "cloud-keystone");
        assert_eq!(g.database.service.name, "db");
        assert_eq!(g.cache.as_ref().map(|c| c.name.as_str()), Some("mc"));
        assert_eq!(
            g.storage
                .s3
                .as_ref()
                .map(|s| s.object_storage.name.as_str()),
            Some("rgw")
        );
        assert!(g.storage.file.is_none());
        assert!(g.web_download.is_none());
        assert_eq!(g.template.replicas, Some(2));
        assert_eq!(
            g.public_endpoint.as_deref(),
            Some("https://glance.example.org")
        );
        assert!(g.validate().is_empty(), "{:?}", g.validate());
        let c = cluster(serde_json::json!({"services": ["keystone", "glance"],
            "externalServices": {"database": {"name": "db"}}}));
        let g = glance_spec(&c);
        assert!(g.storage.s3.is_none());
        assert_eq!(g.storage.file.map(|f| f.size).as_deref(), Some("10Gi"));
    }

    #[test]
    fn the_neutron_of_a_cluster_uses_its_ovn_and_its_nova_when_it_runs_one() {
        let c = cluster(
            serde_json::json!({"services": ["keystone", "neutron", "nova"],
            "externalServices": {"database": {"name": "db"}, "ovn": {"name": "ovn"}}}),
        );
        let n = neutron_spec(&c);
        assert_eq!(n.ovn.name, "ovn");
        assert_eq!(n.nova.map(|n| n.name).as_deref(), Some("cloud-nova"));
        assert_eq!(n.keystone.name, "cloud-keystone");
        let c = cluster(serde_json::json!({"services": ["keystone", "neutron"],
            "externalServices": {"database": {"name": "db"}, "ovn": {"name": "ovn"}}}));
        assert!(neutron_spec(&c).nova.is_none());
    }

    #[test]
    fn the_horizon_of_a_cluster_keeps_sessions_in_its_cache() {
        let c = cluster(serde_json::json!({"services": ["keystone", "horizon"],
            "externalServices": {"database": {"name": "db"}, "cache": {"name": "mc"}},
            "templates": {"horizon": {"configOverrides": {"local_settings": {"SESSION_TIMEOUT": "600"}}}}}));
        let h = horizon_spec(&c);
        assert_eq!(h.keystone.name, "cloud-keystone");
        assert_eq!(h.cache.map(|c| c.name).as_deref(), Some("mc"));
        assert_eq!(
            h.template.config_overrides["local_settings"]["SESSION_TIMEOUT"],
            "600"
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
    fn nova_and_cinder_of_a_cluster_use_its_peers_and_external_services() {
        let c: OpenStackCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "OpenStackCluster",
            "metadata": {"name": "cloud", "namespace": "os"},
            "spec": {"services": ["keystone", "placement", "nova", "neutron", "cinder"],
                     "externalServices": {"database": {"name": "db"}, "messaging": {"name": "mq"}},
                     "publicHostnamePattern": "{service}.example.org",
                     "cinderBackends": [{"name": "ceph", "rbd": {"pool": "volumes", "user": "cinder",
                        "cephConf": "[global]\nmon host = 10.0.0.1\n",
                        "keyringSecret": {"name": "ceph-keyring", "key": "keyring"},
                        "secretUuid": "457eb676-33da-42ec-9a8c-9293d545c337"}}],
                     "templates": {"nova": {"replicas": 2}}}}))
        .expect("cluster");
        let n = nova_spec(&c);
        assert_eq!(n.keystone.name, "cloud-keystone");
        assert_eq!(n.placement.name, "cloud-placement");
        assert_eq!(n.messaging.name, "mq");
        assert_eq!(n.neutron.map(|r| r.name).as_deref(), Some("cloud-neutron"));
        assert_eq!(
            n.glance, None,
            "no Glance in the cluster: the catalog finds one"
        );
        assert_eq!(n.template.replicas, Some(2));
        assert_eq!(
            n.vnc_proxy_public_endpoint.as_deref(),
            Some("https://novncproxy.example.org")
        );
        let cn = cinder_spec(&c);
        assert_eq!(cn.messaging.name, "mq");
        assert_eq!(cn.backends.len(), 1);
        assert_eq!(cn.backends[0].name, "ceph");
        assert_eq!(
            cn.public_endpoint.as_deref(),
            Some("https://cinder.example.org")
        );
    }

    #[test]
    fn nova_and_cinder_get_the_cluster_zones() {
        use controlplane_api::validation::Validate;
        let zones = serde_json::json!([
            {"name": "az1", "computeHosts": ["c1"]},
            {"name": "az2", "topologyValue": "dc-b"},
            {"name": "az3", "nodeSelector": {"rack": "r3"}}]);
        let c = cluster(
            serde_json::json!({"services": ["keystone", "placement", "nova", "cinder"],
            "externalServices": {"database": {"name": "db"}, "messaging": {"name": "mq"}},
            "availabilityZones": zones,
            "cinderBackends": [{"name": "nfs", "availabilityZone": "az3",
                                "nfs": {"shares": ["nfs:/v"]}}]}),
        );
        assert!(c.spec.validate().is_empty(), "{:?}", c.spec.validate());
        let n = nova_spec(&c);
        let cn = cinder_spec(&c);
        assert_eq!(n.availability_zones, c.spec.availability_zones);
        assert_eq!(cn.availability_zones, c.spec.availability_zones);
        assert_eq!(cn.backends[0].availability_zone.as_deref(), Some("az3"));
        let names: Vec<_> = n
            .availability_zones
            .iter()
            .map(|z| z.name.as_str())
            .collect();
        assert_eq!(names, ["az1", "az2", "az3"]);
        assert_eq!(n.availability_zones[0].compute_hosts, ["c1"]);
        // A backend in a zone the cluster does not list is refused, naming the field, on the
        // cluster and on the Cinder it would make.
        let bad = cluster(serde_json::json!({"services": ["keystone", "cinder"],
            "externalServices": {"database": {"name": "db"}, "messaging": {"name": "mq"}},
            "availabilityZones": [{"name": "az1"}, {"name": "az1"}],
            "cinderBackends": [{"name": "nfs", "availabilityZone": "az9",
                                "nfs": {"shares": ["nfs:/v"]}}]}));
        let paths = |e: Vec<api::FieldError>| e.into_iter().map(|e| e.path).collect::<Vec<_>>();
        assert_eq!(
            paths(bad.spec.validate()),
            [
                "spec.availabilityZones[1].name",
                "spec.cinderBackends[0].availabilityZone"
            ]
        );
        assert_eq!(
            paths(cinder_spec(&bad).validate()),
            [
                "spec.availabilityZones[1].name",
                "spec.backends[0].availabilityZone"
            ]
        );
    }

    #[test]
    fn a_failing_nova_is_named_after_a_ready_placement() {
        let mut ready = controlplane_api::ServiceStatus::default();
        set_state(&mut ready, &State::Ready("ok".into()), Some(1));
        let mut nova = controlplane_api::ServiceStatus::default();
        set_state(
            &mut nova,
            &State::Blocked {
                reason: "PlacementNotReady".into(),
                message: "Placement cloud-placement is not Ready: no status yet".into(),
            },
            Some(1),
        );
        let (sums, state) = roll_up(
            "cloud",
            &[
                (ServiceName::Keystone, Some(&ready), Some(1)),
                (ServiceName::Placement, Some(&ready), Some(1)),
                (ServiceName::Nova, Some(&nova), Some(1)),
                (ServiceName::Cinder, Some(&ready), Some(1)),
            ],
        );
        assert_eq!(
            state.summary().1,
            "Nova blocked: Placement cloud-placement is not Ready: no status yet"
        );
        assert_eq!(sums[2].object, "Nova/cloud-nova");
        assert!(sums[3].ready);
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
