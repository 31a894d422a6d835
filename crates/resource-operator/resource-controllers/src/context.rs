//! What every reconcile needs: clients, configuration, Events, metrics.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, Recorder, Reporter};
use std::sync::Arc;

use openstack::Cloud;
use openstack::adapter::ClientOptions;

use crate::clouds::{CloudRegistry, ConnectedCloud};
use crate::metrics::Metrics;
use crate::project::cache::LookupCache;
use crate::project::federation::MappingQueue;

/// Operator configuration the controllers act on (set by flags).
#[derive(Clone, Debug)]
pub struct Config {
    /// Identifies this cluster in ownership marks, so clusters sharing a cloud never claim
    /// each other's objects.
    pub cluster_id: String,
    /// How often an unchanged object is compared with OpenStack (drift detection).
    pub resync: Duration,
    /// Roles an OpenstackProject may grant; anything else is a policy violation.
    pub allowed_roles: BTreeSet<String>,
    /// Whether an OpenstackProject may adopt an existing Keystone project it did not create
    /// (with `spec.adopt: true`).
    pub allow_project_adoption: bool,
    /// Whether objects carrying only the seed operator's tag are taken over without
    /// `spec.adopt` (migration from the seed).
    pub adopt_legacy: bool,
    /// Namespaces whose ConfigMaps any OpenstackProject may name in `federationRef`, besides
    /// its own namespace.
    pub federation_namespaces: BTreeSet<String>,
    /// How often an image import in progress is polled.
    pub image_poll: Duration,
    /// First retry of a pass waiting for a missing dependency. Dependencies that are other
    /// resources of ours (a project's OpenstackDomain) trigger the waiting pass when they
    /// change, so this only matters for what is made outside Kubernetes.
    pub dependency_retry: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            cluster_id: "default".into(),
            resync: Duration::from_secs(300),
            allowed_roles: ["member", "reader"].into_iter().map(String::from).collect(),
            allow_project_adoption: false,
            adopt_legacy: false,
            federation_namespaces: BTreeSet::new(),
            image_poll: Duration::from_secs(3),
            dependency_retry: Duration::from_secs(15),
        }
    }
}

/// What every pass shares, whatever cloud it works in.
pub struct Shared {
    /// Kubernetes client.
    pub client: kube::Client,
    /// Configuration.
    pub config: Config,
    /// Who publishes the Events (see [`Shared::publish_event`]).
    reporter: Reporter,
    /// Reconcile metrics.
    pub metrics: Metrics,
    /// Consecutive failures per object (for backoff of transient errors).
    failures: Mutex<HashMap<String, u32>>,
    /// Per-key async locks (e.g. one per federation mapping) serialising read-modify-write.
    locks: Mutex<HashMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>>,
    /// Kinds whose converged objects a periodic drift check watches (no per-object resync).
    drift_checked: Mutex<BTreeSet<String>>,
    /// The federation mapping batches' queues, by cloud and IdP.
    mapping_queues: Mutex<HashMap<String, std::sync::Arc<MappingQueue>>>,
    /// The clouds named by `OpenstackCloud`s, connected on first use.
    pub clouds: CloudRegistry,
}

/// The state of one pass: the cloud it works in (the operator's own, or the `OpenstackCloud`
/// its object names) and everything shared ([`Shared`], reached through `Deref`). Cheap to
/// clone.
#[derive(Clone)]
pub struct Context {
    /// The OpenStack port of this pass's cloud.
    pub cloud: Cloud,
    /// The `OpenstackCloud` this pass works in; None: the operator's own cloud.
    pub cloud_name: Option<String>,
    /// Lookups every project pass repeats in this cloud (roles, domains, users, external
    /// networks); one cache per cloud, since the same name means another object elsewhere.
    pub lookups: Arc<LookupCache>,
    shared: Arc<Shared>,
}

impl std::ops::Deref for Context {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.shared
    }
}

impl Context {
    /// Builds the context of the operator's own cloud.
    pub fn new(
        client: kube::Client,
        cloud: Cloud,
        config: Config,
        metrics: Metrics,
        instance: Option<String>,
    ) -> Self {
        let reporter = Reporter {
            controller: "openstack-operator".into(),
            instance,
        };
        Context {
            cloud,
            cloud_name: None,
            lookups: Default::default(),
            shared: Arc::new(Shared {
                reporter,
                client,
                config,
                metrics,
                failures: Mutex::new(HashMap::new()),
                locks: Mutex::new(HashMap::new()),
                drift_checked: Mutex::new(BTreeSet::new()),
                mapping_queues: Mutex::new(HashMap::new()),
                clouds: CloudRegistry::new(ClientOptions::default()),
            }),
        }
    }

    /// The same context whose `OpenstackCloud` connections use `options` (rate limits,
    /// timeouts, metric handles); called once, before the context is shared.
    pub fn with_cloud_options(mut self, options: ClientOptions) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.clouds = CloudRegistry::new(options);
        }
        self
    }

    /// The context of a pass in `cloud` (None: the operator's own cloud, i.e. `self`).
    pub fn in_cloud(&self, cloud: Option<ConnectedCloud>) -> Context {
        match cloud {
            None => self.clone(),
            Some(c) => Context {
                cloud: c.cloud,
                cloud_name: Some(c.name),
                lookups: c.lookups,
                shared: self.shared.clone(),
            },
        }
    }

    /// The context for a pass over `obj`: its `spec.cloudRef`'s cloud, connected (or
    /// reconnected after its Secret changed), once the object's namespace is allowed to use
    /// it. A refusal names the field and the cloud and nothing is touched.
    pub async fn for_object(
        &self,
        cloud_ref: Option<&str>,
        namespace: Option<&str>,
    ) -> Result<Context, api::cloud::CloudRefError> {
        match cloud_ref {
            None => Ok(self.clone()),
            Some(name) => {
                let c = self.clouds.resolve(&self.client, name, namespace).await?;
                Ok(self.in_cloud(Some(c)))
            }
        }
    }

    /// The async lock for `key` in this pass's cloud.
    pub fn lock_for(&self, key: &str) -> std::sync::Arc<tokio::sync::Mutex<()>> {
        self.locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(self.cloud_key(key))
            .or_default()
            .clone()
    }

    /// The queue of `idp`'s next federation mapping batch in this pass's cloud.
    pub fn mapping_queue(&self, idp: &str) -> std::sync::Arc<MappingQueue> {
        self.mapping_queues
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(self.cloud_key(idp))
            .or_default()
            .clone()
    }

    /// `key` in this pass's cloud: the same federation mapping name in two clouds is two
    /// mappings, each with its own lock and queue.
    fn cloud_key(&self, key: &str) -> String {
        match &self.cloud_name {
            None => key.to_string(),
            // `/` cannot occur in an object name, so no key of one cloud equals another's.
            Some(c) => format!("cloud/{c}/{key}"),
        }
    }
}

impl Shared {
    /// Publishes an Event about `reference`, always as an Event of its own. kube's
    /// [`Recorder`] folds every Event with the same type, reason and action about one object
    /// into one series that keeps the FIRST note, so a later, different message (a new
    /// failure, the next deleted orphan) would never be seen; hence a fresh recorder (an
    /// empty cache) per Event. Callers already limit repeats (one Warning per distinct
    /// failure, GC Events once per sweep).
    pub async fn publish_event(
        &self,
        ev: &Event,
        reference: &ObjectReference,
    ) -> Result<(), kube::Error> {
        Recorder::new(self.client.clone(), self.reporter.clone())
            .publish(ev, reference)
            .await
    }

    /// Records a failure of `key` and returns how many in a row there were.
    pub(crate) fn note_failure(&self, key: &str) -> u32 {
        let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let n = f.entry(key.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    }

    /// Forgets failures of `key` after a success.
    pub(crate) fn note_success(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }

    /// Records that a drift check watches the converged objects of `kind`: the framework
    /// then leaves them alone until the check (or a change) asks for a pass.
    pub fn mark_drift_checked(&self, kind: &str) {
        self.drift_checked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(kind.to_string());
    }

    /// Whether a drift check watches the converged objects of `kind`.
    pub fn is_drift_checked(&self, kind: &str) -> bool {
        self.drift_checked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(kind)
    }
}
