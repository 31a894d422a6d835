//! Ownership-safe garbage collection of orphans, and the seed's registry ConfigMap.
//!
//! An OpenStack object is an orphan only if it carries our mark with THIS cluster's id and
//! the resource named by its owner mark no longer exists. The sweep lists OpenStack first and
//! the custom resources second, so an object created during the sweep always has its owner in
//! the list (a resource exists before anything is created for it). Safety valves: an orphan
//! must stay orphaned for a grace period across sweeps, at most `max_deletions` are deleted
//! per run, `report` mode deletes nothing, and a failed list (or a missing CRD) aborts the
//! sweep instead of being read as "nothing exists" (seed weaknesses W9, W10, W11, W16).
//!
//! The registry ConfigMap (`openstack-operator-managed-resources`, `<type>.json`, the seed's
//! layout) is rewritten by each sweep from what the cloud's marks say, with a resourceVersion
//! precondition; the sweep is its only writer, so concurrent handlers cannot lose entries.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use api::naming::{GROUP_DESCRIPTION_PREFIX, project_group_name};
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::api::{ListParams, PostParams};
use kube::runtime::events::{Event, EventType};
use kube::{Api, ResourceExt};
use openstack::OptionalExt;
use openstack::model::{
    NetworkFilter, ProjectFilter, RouterFilter, SecurityGroupFilter, SubnetFilter,
};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tracing::{info, warn};

use crate::context::Context;
use crate::error::ReconcileError;
use crate::ownership::{CLUSTER_TAG_PREFIX, FLAVOR_OWNER_SPEC, OWNER_TAG_PREFIX};

/// Name of the registry ConfigMap (the seed's).
pub const REGISTRY_NAME: &str = "openstack-operator-managed-resources";

/// What the sweeper does with orphans.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum GcMode {
    /// No sweeping.
    Off,
    /// Find and report orphans (log, Event, metric); delete nothing.
    Report,
    /// Delete orphans, within the safety valves.
    #[default]
    Delete,
}

/// Sweeper settings.
#[derive(Clone, Debug)]
pub struct GcConfig {
    /// Mode.
    pub mode: GcMode,
    /// Time between sweeps.
    pub interval: Duration,
    /// How long an object must stay orphaned before it is deleted.
    pub grace: Duration,
    /// Most deletions per sweep; the rest wait and an Event says so.
    pub max_deletions: usize,
    /// Namespace of the registry ConfigMap.
    pub registry_namespace: String,
}

impl Default for GcConfig {
    fn default() -> Self {
        GcConfig {
            mode: GcMode::Delete,
            interval: Duration::from_secs(600),
            grace: Duration::from_secs(300),
            max_deletions: 20,
            registry_namespace: "openstack-operator".into(),
        }
    }
}

/// Kinds of OpenStack objects the sweeper handles (registry keys are the seed's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceType {
    /// Keystone domain.
    Domain,
    /// Nova flavor.
    Flavor,
    /// Glance image.
    Image,
    /// Neutron provider network.
    ProviderNetwork,
    /// Keystone project (with its Neutron objects and user group).
    Project,
}

impl ResourceType {
    /// Label and registry key stem (`domains.json`, ...).
    pub fn label(self) -> &'static str {
        match self {
            ResourceType::Domain => "domain",
            ResourceType::Flavor => "flavor",
            ResourceType::Image => "image",
            ResourceType::ProviderNetwork => "provider_network",
            ResourceType::Project => "project",
        }
    }

    fn registry_key(self) -> &'static str {
        match self {
            ResourceType::Domain => "domains.json",
            ResourceType::Flavor => "flavors.json",
            ResourceType::Image => "images.json",
            ResourceType::ProviderNetwork => "provider_networks.json",
            ResourceType::Project => "projects.json",
        }
    }
}

/// An OpenStack object carrying this cluster's mark.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Marked {
    /// Kind.
    pub kind: ResourceType,
    /// OpenStack ID.
    pub id: String,
    /// OpenStack name.
    pub name: String,
    /// UID of the owning custom resource.
    pub owner_uid: String,
    /// Keystone domain (projects only, to find their group).
    pub domain_id: Option<String>,
}

/// The sweep's decisions (pure).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepPlan {
    /// Orphans to delete now.
    pub delete: Vec<Marked>,
    /// Orphans still inside their grace period.
    pub waiting: Vec<Marked>,
    /// Orphans beyond the deletion cap.
    pub capped: Vec<Marked>,
    /// Orphans reported but not deleted (report mode).
    pub reported: Vec<Marked>,
}

/// Decides what to delete. `first_seen` remembers when each orphan was first seen and is
/// pruned of objects that are no longer orphans.
pub fn plan_sweep(
    marked: &[Marked],
    live_uids: &HashSet<String>,
    first_seen: &mut HashMap<String, Instant>,
    now: Instant,
    cfg: &GcConfig,
) -> SweepPlan {
    let mut plan = SweepPlan::default();
    let orphans: Vec<&Marked> = marked
        .iter()
        .filter(|m| !live_uids.contains(&m.owner_uid))
        .collect();
    let keys: HashSet<String> = orphans.iter().map(|m| m.id.clone()).collect();
    first_seen.retain(|k, _| keys.contains(k));
    for m in orphans {
        let since = *first_seen.entry(m.id.clone()).or_insert(now);
        if cfg.mode == GcMode::Report {
            plan.reported.push(m.clone());
        } else if now.duration_since(since) < cfg.grace {
            plan.waiting.push(m.clone());
        } else if plan.delete.len() >= cfg.max_deletions {
            plan.capped.push(m.clone());
        } else {
            plan.delete.push(m.clone());
        }
    }
    // Delete dependants before what they live in: projects and networks before domains.
    plan.delete.sort_by_key(|m| match m.kind {
        ResourceType::Project => 0,
        ResourceType::ProviderNetwork => 1,
        ResourceType::Image => 2,
        ResourceType::Flavor => 3,
        ResourceType::Domain => 4,
    });
    plan
}

fn tag_value(tags: &[String], prefix: &str) -> Option<String> {
    tags.iter()
        .find_map(|t| t.strip_prefix(prefix).map(str::to_string))
}

fn ours(tags: &[String], cluster: &str) -> Option<String> {
    (tag_value(tags, CLUSTER_TAG_PREFIX).as_deref() == Some(cluster))
        .then(|| tag_value(tags, OWNER_TAG_PREFIX))
        .flatten()
}

/// GC metrics (the seed's names).
#[derive(Clone)]
pub struct GcMetrics {
    runs: Family<StatusLabel, Counter>,
    deleted: Family<TypeLabel, Counter>,
    duration: Histogram,
    orphans: Family<TypeLabel, Gauge>,
    skipped: Family<ReasonLabel, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TypeLabel {
    resource_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

impl Default for GcMetrics {
    fn default() -> Self {
        GcMetrics {
            runs: Family::default(),
            deleted: Family::default(),
            duration: Histogram::new([1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0]),
            orphans: Family::default(),
            skipped: Family::default(),
        }
    }
}

impl GcMetrics {
    /// Registers the GC metrics.
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "openstack_operator_cluster_gc_runs",
            "Garbage-collection sweeps by outcome",
            self.runs.clone(),
        );
        r.register(
            "openstack_operator_cluster_gc_deleted_resources",
            "Orphans deleted by type",
            self.deleted.clone(),
        );
        r.register(
            "openstack_operator_cluster_gc_duration_seconds",
            "Duration of sweeps",
            self.duration.clone(),
        );
        r.register(
            "openstack_operator_gc_orphans",
            "Orphans found by the last sweep, by type",
            self.orphans.clone(),
        );
        r.register(
            "openstack_operator_gc_skipped",
            "Orphans not deleted, by reason (grace, cap, report)",
            self.skipped.clone(),
        );
    }
}

/// The sweeper's state across runs.
pub struct Sweeper {
    cfg: GcConfig,
    metrics: GcMetrics,
    first_seen: Mutex<HashMap<String, Instant>>,
}

impl Sweeper {
    /// A sweeper.
    pub fn new(cfg: GcConfig, metrics: GcMetrics) -> Self {
        Sweeper {
            cfg,
            metrics,
            first_seen: Mutex::new(HashMap::new()),
        }
    }

    /// Runs sweeps every interval until `shutdown`.
    pub async fn run(&self, ctx: &Context, shutdown: tokio_util::sync::CancellationToken) {
        if self.cfg.mode == GcMode::Off {
            return;
        }
        // First sweep soon after start, then on the interval; sweeps never block reconciles
        // (they run on their own task and share only the rate-limited OpenStack client).
        let mut wait = Duration::from_secs(10).min(self.cfg.interval);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
            wait = self.cfg.interval;
            let started = Instant::now();
            let status = match self.sweep_all(ctx).await {
                Ok(()) => "success",
                Err(e) => {
                    warn!(error = %e, "garbage-collection sweep aborted; nothing was deleted after the failure");
                    "error"
                }
            };
            self.metrics
                .runs
                .get_or_create(&StatusLabel {
                    status: status.into(),
                })
                .inc();
            self.metrics
                .duration
                .observe(started.elapsed().as_secs_f64());
        }
    }

    /// Finds every object carrying this cluster's mark.
    async fn inventory(&self, ctx: &Context) -> Result<Vec<Marked>, ReconcileError> {
        let cluster = &ctx.config.cluster_id;
        let cloud = &ctx.cloud;
        let cluster_tag = format!("{CLUSTER_TAG_PREFIX}{cluster}");
        let mut out = Vec::new();
        for d in cloud.identity.list_domains().await? {
            if let Some(uid) = ours(&d.tags, cluster) {
                out.push(Marked {
                    kind: ResourceType::Domain,
                    id: d.id,
                    name: d.name,
                    owner_uid: uid,
                    domain_id: None,
                });
            }
        }
        for f in cloud.compute.list_flavors().await? {
            let mark = f
                .extra_specs
                .get(FLAVOR_OWNER_SPEC)
                .and_then(|m| m.split_once('/'))
                .map(|(c, u)| (c.to_string(), u.to_string()));
            if let Some((c, uid)) = mark
                && c == *cluster
            {
                out.push(Marked {
                    kind: ResourceType::Flavor,
                    id: f.id,
                    name: f.name,
                    owner_uid: uid,
                    domain_id: None,
                });
            }
        }
        for p in cloud
            .identity
            .list_projects(&ProjectFilter {
                tags: vec![cluster_tag.clone()],
                ..Default::default()
            })
            .await?
        {
            if let Some(uid) = ours(&p.tags, cluster) {
                out.push(Marked {
                    kind: ResourceType::Project,
                    id: p.id,
                    name: p.name,
                    owner_uid: uid,
                    domain_id: Some(p.domain_id),
                });
            }
        }
        let project_owners: HashSet<String> = out
            .iter()
            .filter(|m| m.kind == ResourceType::Project)
            .map(|m| m.owner_uid.clone())
            .collect();
        for n in cloud
            .network
            .list_networks(&NetworkFilter {
                tags: vec![cluster_tag.clone()],
                ..Default::default()
            })
            .await?
        {
            // Tenant networks belong to a project and go with it.
            if let Some(uid) = ours(&n.tags, cluster)
                && !project_owners.contains(&uid)
            {
                out.push(Marked {
                    kind: ResourceType::ProviderNetwork,
                    id: n.id,
                    name: n.name,
                    owner_uid: uid,
                    domain_id: None,
                });
            }
        }
        // Glance has no tag filter in our port: images are found through the registry.
        for (name, id) in self.registry_ids(ctx, ResourceType::Image).await? {
            if let Some(img) = cloud.image.get_image(&id).await.optional()?
                && let Some(uid) = ours(&img.tags, cluster)
            {
                out.push(Marked {
                    kind: ResourceType::Image,
                    id,
                    name,
                    owner_uid: uid,
                    domain_id: None,
                });
            }
        }
        Ok(out)
    }

    async fn registry_ids(
        &self,
        ctx: &Context,
        kind: ResourceType,
    ) -> Result<Vec<(String, String)>, ReconcileError> {
        let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &self.cfg.registry_namespace);
        let Some(cm) = api.get_opt(REGISTRY_NAME).await? else {
            return Ok(Vec::new());
        };
        let raw = cm
            .data
            .unwrap_or_default()
            .get(kind.registry_key())
            .cloned()
            .unwrap_or_default();
        let parsed: BTreeMap<String, serde_json::Value> =
            serde_json::from_str(&raw).unwrap_or_default();
        Ok(parsed
            .into_iter()
            .filter_map(|(name, v)| {
                v.get("id")
                    .and_then(|i| i.as_str())
                    .map(|id| (name, id.to_string()))
            })
            .collect())
    }

    /// UIDs (and names) of every custom resource of every kind; any failure aborts the sweep.
    async fn live_resources(ctx: &Context) -> Result<HashMap<String, String>, ReconcileError> {
        let mut out = HashMap::new();
        let lp = ListParams::default();
        macro_rules! collect {
            ($t:ty) => {
                for o in Api::<$t>::all(ctx.client.clone()).list(&lp).await? {
                    if let Some(uid) = o.metadata.uid.clone() {
                        out.insert(uid, o.name_any());
                    }
                }
            };
        }
        collect!(api::OpenstackDomain);
        collect!(api::OpenstackFlavor);
        collect!(api::OpenstackImage);
        collect!(api::OpenstackNetwork);
        collect!(api::OpenstackProject);
        Ok(out)
    }

    /// One sweep of the operator's own cloud, then one of each `OpenstackCloud`. Every sweep
    /// takes the owners from every resource of every cloud, so nothing a resource of another
    /// cloud owns is ever an orphan (two `OpenstackCloud`s may well be one OpenStack seen
    /// with two credentials). A cloud that cannot be reached is left for the next sweep.
    async fn sweep_all(&self, ctx: &Context) -> Result<(), ReconcileError> {
        let own = self.sweep(ctx, true).await;
        let clouds = match Api::<api::OpenstackCloud>::all(ctx.client.clone())
            .list(&ListParams::default())
            .await
        {
            Ok(l) => l.items,
            Err(e) => {
                warn!(error = %e, "cannot list OpenstackClouds; only the operator's own cloud was swept");
                Vec::new()
            }
        };
        for c in clouds {
            let name = c.name_any();
            match ctx.clouds.connect_by_name(&ctx.client, &name).await {
                Ok(cc) => {
                    if let Err(e) = self.sweep(&ctx.in_cloud(Some(cc)), false).await {
                        warn!(cloud = %name, error = %e, "garbage-collection sweep of an OpenstackCloud aborted; nothing was deleted after the failure");
                    }
                }
                Err(e) => {
                    info!(cloud = %name, error = %e, "OpenstackCloud not swept: not connectable")
                }
            }
        }
        own
    }

    /// One sweep of `ctx`'s cloud. Only the operator's own cloud (`primary`) keeps the seed's
    /// registry ConfigMap and the orphan gauges.
    async fn sweep(&self, ctx: &Context, primary: bool) -> Result<(), ReconcileError> {
        let marked = self.inventory(ctx).await?;
        let live = Self::live_resources(ctx).await?;
        let uids: HashSet<String> = live.keys().cloned().collect();
        let plan = {
            let mut seen = self.first_seen.lock().unwrap_or_else(|p| p.into_inner());
            plan_sweep(&marked, &uids, &mut seen, Instant::now(), &self.cfg)
        };
        for t in [
            ResourceType::Domain,
            ResourceType::Flavor,
            ResourceType::Image,
            ResourceType::ProviderNetwork,
            ResourceType::Project,
        ] {
            if !primary {
                break;
            }
            let n = marked
                .iter()
                .filter(|m| m.kind == t && !uids.contains(&m.owner_uid))
                .count();
            self.metrics
                .orphans
                .get_or_create(&TypeLabel {
                    resource_type: t.label().into(),
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        let skip = |reason: &str, n: usize| {
            self.metrics
                .skipped
                .get_or_create(&ReasonLabel {
                    reason: reason.into(),
                })
                .inc_by(n as u64);
        };
        skip("grace", plan.waiting.len());
        skip("cap", plan.capped.len());
        skip("report", plan.reported.len());
        for m in &plan.reported {
            info!(kind = m.kind.label(), id = %m.id, name = %m.name, owner = %m.owner_uid, "orphan (report mode: not deleted)");
        }
        if !plan.reported.is_empty() {
            let list: Vec<String> = plan
                .reported
                .iter()
                .map(|m| format!("{} {} ({})", m.kind.label(), m.name, m.id))
                .collect();
            self.event(
                ctx,
                EventType::Warning,
                "OrphansFound",
                format!("report mode, nothing deleted: {}", list.join(", ")),
            )
            .await;
        }
        if !plan.capped.is_empty() {
            self.event(
                ctx,
                EventType::Warning,
                "DeletionCapReached",
                format!(
                    "{} orphan(s) left for later sweeps: at most {} deletions per sweep",
                    plan.capped.len(),
                    self.cfg.max_deletions
                ),
            )
            .await;
        }
        let mut deleted = HashSet::new();
        for m in &plan.delete {
            match self.delete(ctx, m).await {
                Ok(()) => {
                    deleted.insert(m.id.clone());
                    self.metrics
                        .deleted
                        .get_or_create(&TypeLabel {
                            resource_type: m.kind.label().into(),
                        })
                        .inc();
                    info!(kind = m.kind.label(), id = %m.id, name = %m.name, owner = %m.owner_uid, "deleted orphan");
                    self.event(
                        ctx,
                        EventType::Normal,
                        "OrphanDeleted",
                        format!(
                            "deleted orphaned {} {} ({}) of resource uid {}",
                            m.kind.label(),
                            m.name,
                            m.id,
                            m.owner_uid
                        ),
                    )
                    .await;
                }
                Err(e) => {
                    warn!(kind = m.kind.label(), id = %m.id, error = %e, "could not delete orphan; will retry next sweep")
                }
            }
        }
        if primary {
            let remaining: Vec<&Marked> =
                marked.iter().filter(|m| !deleted.contains(&m.id)).collect();
            self.write_registry(ctx, &remaining, &live).await?;
        }
        Ok(())
    }

    async fn delete(&self, ctx: &Context, m: &Marked) -> Result<(), ReconcileError> {
        let cloud = &ctx.cloud;
        match m.kind {
            ResourceType::Domain => {
                let upd = openstack::model::DomainUpdate {
                    enabled: Some(false),
                    ..Default::default()
                };
                if cloud
                    .identity
                    .update_domain(&m.id, &upd)
                    .await
                    .optional()?
                    .is_some()
                {
                    cloud.identity.delete_domain(&m.id).await.optional()?;
                }
            }
            ResourceType::Flavor => {
                cloud.compute.delete_flavor(&m.id).await.optional()?;
            }
            ResourceType::Image => {
                if let Some(img) = cloud.image.get_image(&m.id).await.optional()? {
                    if img.protected {
                        cloud
                            .image
                            .update_image(
                                &m.id,
                                &[openstack::model::ImagePatchOp::set_protected(false)],
                            )
                            .await?;
                    }
                    cloud.image.delete_image(&m.id).await.optional()?;
                }
            }
            ResourceType::ProviderNetwork => {
                let subnets = cloud
                    .network
                    .list_subnets(&SubnetFilter {
                        network_id: Some(m.id.clone()),
                        ..Default::default()
                    })
                    .await?;
                for s in subnets.iter().filter(|s| {
                    ours(&s.tags, &ctx.config.cluster_id).as_deref() == Some(m.owner_uid.as_str())
                }) {
                    cloud.network.delete_subnet(&s.id).await.optional()?;
                }
                cloud.network.delete_network(&m.id).await.optional()?;
            }
            ResourceType::Project => self.delete_project(ctx, m).await?,
        }
        Ok(())
    }

    /// Tears down an orphaned project: its marked Neutron objects, then its group, then the
    /// project. Only objects with the same owner mark are touched.
    async fn delete_project(&self, ctx: &Context, m: &Marked) -> Result<(), ReconcileError> {
        let net = &ctx.cloud.network;
        let cluster = &ctx.config.cluster_id;
        let mine = |tags: &[String]| ours(tags, cluster).as_deref() == Some(m.owner_uid.as_str());
        let pid = Some(m.id.clone());
        let subnets = net
            .list_subnets(&SubnetFilter {
                project_id: pid.clone(),
                ..Default::default()
            })
            .await?;
        for r in net
            .list_routers(&RouterFilter {
                project_id: pid.clone(),
                ..Default::default()
            })
            .await?
        {
            if !mine(&r.tags) {
                continue;
            }
            for s in &subnets {
                if net.list_router_interfaces(&r.id).await?.iter().any(|p| {
                    p.fixed_ips
                        .iter()
                        .any(|ip| ip.subnet_id.as_deref() == Some(s.id.as_str()))
                }) {
                    net.remove_router_interface(&r.id, &s.id).await.optional()?;
                }
            }
            net.delete_router(&r.id).await.optional()?;
        }
        for s in subnets.iter().filter(|s| mine(&s.tags)) {
            net.delete_subnet(&s.id).await.optional()?;
        }
        for n in net
            .list_networks(&NetworkFilter {
                project_id: pid.clone(),
                ..Default::default()
            })
            .await?
        {
            if mine(&n.tags) {
                net.delete_network(&n.id).await.optional()?;
            }
        }
        for g in net
            .list_security_groups(&SecurityGroupFilter {
                project_id: pid.clone(),
                ..Default::default()
            })
            .await?
        {
            if mine(&g.tags) {
                net.delete_security_group(&g.id).await.optional()?;
            }
        }
        if let Some(domain) = &m.domain_id
            && let Some(g) = ctx
                .cloud
                .identity
                .find_group(domain, &project_group_name(&m.name))
                .await?
            && g.description.starts_with(GROUP_DESCRIPTION_PREFIX)
        {
            ctx.cloud.identity.delete_group(&g.id).await.optional()?;
        }
        ctx.cloud.identity.delete_project(&m.id).await.optional()?;
        Ok(())
    }

    /// Rewrites the registry from the marks (seed layout), with a resourceVersion precondition.
    async fn write_registry(
        &self,
        ctx: &Context,
        marked: &[&Marked],
        live: &HashMap<String, String>,
    ) -> Result<(), ReconcileError> {
        let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &self.cfg.registry_namespace);
        let mut data: BTreeMap<String, String> = BTreeMap::new();
        for t in [
            ResourceType::Domain,
            ResourceType::Flavor,
            ResourceType::Image,
            ResourceType::ProviderNetwork,
            ResourceType::Project,
        ] {
            let entries: BTreeMap<String, serde_json::Value> = marked
                .iter()
                .filter(|m| m.kind == t)
                .map(|m| {
                    (
                        m.name.clone(),
                        serde_json::json!({
                            "id": m.id,
                            "cr_name": live.get(&m.owner_uid).cloned().unwrap_or_default(),
                            "cr_uid": m.owner_uid,
                            "cluster": ctx.config.cluster_id,
                        }),
                    )
                })
                .collect();
            data.insert(
                t.registry_key().into(),
                serde_json::to_string(&entries).unwrap_or_else(|_| "{}".into()),
            );
        }
        for _ in 0..3 {
            let existing = match api.get_opt(REGISTRY_NAME).await {
                Ok(cm) => cm,
                // No namespace for the registry: say so once per sweep, do not fail GC.
                Err(kube::Error::Api(e)) if e.code == 403 || e.code == 404 => {
                    warn!(namespace = %self.cfg.registry_namespace, error = %e.message, "cannot read the registry ConfigMap");
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            };
            let result = match existing {
                Some(mut cm) => {
                    let mut merged = cm.data.clone().unwrap_or_default();
                    // Keep types we do not manage (e.g. the seed's federation_mappings.json).
                    merged.extend(data.clone());
                    if cm.data.as_ref() == Some(&merged) {
                        return Ok(());
                    }
                    cm.data = Some(merged);
                    api.replace(REGISTRY_NAME, &PostParams::default(), &cm)
                        .await
                        .map(|_| ())
                }
                None => {
                    let cm = ConfigMap {
                        metadata: kube::api::ObjectMeta {
                            name: Some(REGISTRY_NAME.into()),
                            ..Default::default()
                        },
                        data: Some(data.clone()),
                        ..Default::default()
                    };
                    api.create(&PostParams::default(), &cm).await.map(|_| ())
                }
            };
            match result {
                Ok(()) => return Ok(()),
                Err(kube::Error::Api(e)) if e.code == 409 => continue,
                Err(kube::Error::Api(e)) if e.code == 403 || e.code == 404 => {
                    warn!(namespace = %self.cfg.registry_namespace, error = %e.message, "cannot write the registry ConfigMap (does the namespace exist?)");
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    async fn event(&self, ctx: &Context, type_: EventType, reason: &str, note: String) {
        let note = match &ctx.cloud_name {
            Some(c) => format!("OpenstackCloud {c}: {note}"),
            None => note,
        };
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
            name: Some(REGISTRY_NAME.into()),
            namespace: Some(self.cfg.registry_namespace.clone()),
            ..Default::default()
        };
        let note = if note.len() > 1000 {
            format!(
                "{}…",
                &note[..note
                    .char_indices()
                    .take_while(|(i, _)| *i < 990)
                    .last()
                    .map(|(i, _)| i)
                    .unwrap_or(0)]
            )
        } else {
            note
        };
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "GarbageCollect".into(),
            secondary: None,
        };
        if let Err(e) = ctx.publish_event(&ev, &reference).await {
            warn!(error = %e, reason, "could not publish a GC Event");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marked(id: &str, owner: &str) -> Marked {
        Marked {
            kind: ResourceType::Flavor,
            id: id.into(),
            name: id.into(),
            owner_uid: owner.into(),
            domain_id: None,
        }
    }

    fn cfg(mode: GcMode, grace: u64, cap: usize) -> GcConfig {
        GcConfig {
            mode,
            grace: Duration::from_secs(grace),
            max_deletions: cap,
            ..Default::default()
        }
    }

    #[test]
    fn live_owner_is_never_an_orphan() {
        let live: HashSet<String> = ["u1".to_string()].into();
        let mut seen = HashMap::new();
        let p = plan_sweep(
            &[marked("a", "u1")],
            &live,
            &mut seen,
            Instant::now(),
            &cfg(GcMode::Delete, 0, 10),
        );
        assert_eq!(p, SweepPlan::default());
    }

    #[test]
    fn orphan_waits_for_the_grace_period() {
        let live = HashSet::new();
        let mut seen = HashMap::new();
        let t0 = Instant::now();
        let c = cfg(GcMode::Delete, 60, 10);
        let p = plan_sweep(&[marked("a", "gone")], &live, &mut seen, t0, &c);
        assert_eq!(p.waiting.len(), 1);
        assert!(p.delete.is_empty());
        let p = plan_sweep(
            &[marked("a", "gone")],
            &live,
            &mut seen,
            t0 + Duration::from_secs(61),
            &c,
        );
        assert_eq!(p.delete.len(), 1);
    }

    #[test]
    fn an_orphan_that_gets_an_owner_again_is_forgotten() {
        let mut seen = HashMap::new();
        let t0 = Instant::now();
        let c = cfg(GcMode::Delete, 60, 10);
        plan_sweep(&[marked("a", "u")], &HashSet::new(), &mut seen, t0, &c);
        let live: HashSet<String> = ["u".to_string()].into();
        plan_sweep(
            &[marked("a", "u")],
            &live,
            &mut seen,
            t0 + Duration::from_secs(30),
            &c,
        );
        assert!(seen.is_empty());
    }

    #[test]
    fn cap_and_report_mode() {
        let live = HashSet::new();
        let objs: Vec<Marked> = (0..5).map(|i| marked(&format!("o{i}"), "gone")).collect();
        let mut seen = HashMap::new();
        let p = plan_sweep(
            &objs,
            &live,
            &mut seen,
            Instant::now(),
            &cfg(GcMode::Delete, 0, 2),
        );
        assert_eq!((p.delete.len(), p.capped.len()), (2, 3));
        let mut seen = HashMap::new();
        let p = plan_sweep(
            &objs,
            &live,
            &mut seen,
            Instant::now(),
            &cfg(GcMode::Report, 0, 2),
        );
        assert_eq!((p.delete.len(), p.reported.len()), (0, 5));
    }

    #[test]
    fn marks_of_other_clusters_are_not_ours() {
        let tags = vec![
            format!("{CLUSTER_TAG_PREFIX}other"),
            format!("{OWNER_TAG_PREFIX}u"),
        ];
        assert_eq!(ours(&tags, "mine"), None);
        assert_eq!(ours(&tags, "other").as_deref(), Some("u"));
        assert_eq!(
            ours(&["managed-by-openstack-operator".to_string()], "mine"),
            None
        );
    }
}
