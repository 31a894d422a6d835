//! The bench's world: the e2e target (Kubernetes API and OpenStack cloud), a namespace and a
//! run id, operator processes, and the cleanup that removes everything the run created.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use e2e::k8s::{self, Managed};
use e2e::metrics::{Metrics, RECONCILES};
use e2e::wait::{Check, wait_for};
use e2e::{Operator, OperatorOptions, Target};
use futures::StreamExt as _;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt as _};
use openstack::adapter::{ClientOptions, CloudSelector, Core, Request, Service};
use openstack::model::{
    DomainUpdate, NetworkFilter, ProjectFilter, RouterFilter, SecurityGroupFilter, SubnetFilter,
};
use openstack::{Cloud, OptionalExt as _};
use serde_json::{Value, json};

use crate::manifests::{self, RUN_LABEL};

/// Field manager of the bench's writes.
pub const FIELD_MANAGER: &str = "openstack-operator-bench";

/// The operator's limits, passed as flags (they enter the floor).
#[derive(Clone, Debug, serde::Serialize)]
pub struct OperatorLimits {
    /// `--max-concurrent-calls`: OpenStack requests in flight.
    pub max_concurrent_calls: usize,
    /// `--requests-per-second` (0 = unlimited).
    pub requests_per_second: u32,
    /// `--concurrency`: objects of one kind reconciled at once.
    pub concurrency: u16,
}

/// One bench run's world.
pub struct Bench {
    /// Cluster and cloud.
    pub target: Target,
    /// Kubernetes client.
    pub client: Client,
    /// OpenStack ports (admin), unlimited rate.
    pub cloud: Cloud,
    core: Core,
    /// Eight hex digits naming everything of this run.
    pub run: String,
    /// Namespace of the projects.
    pub namespace: String,
    /// The operator binary.
    pub binary: PathBuf,
    /// Flags for the operator.
    pub limits: OperatorLimits,
    /// Keystone IDs of the run's projects, so what OpenStack keeps of a deleted project can be
    /// found afterwards.
    project_ids: Mutex<BTreeSet<String>>,
}

/// What OpenStack kept of the run's deleted projects (and the bench then removed).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Residue {
    /// Neutron's `default` security groups: Neutron creates one whenever security groups are
    /// listed for a project (the operator does so in every pass); the operator does not own
    /// it, so it does not delete it.
    pub default_security_groups: usize,
    /// Any other security group: the operator should have deleted it.
    pub other_security_groups: Vec<String>,
}

impl Bench {
    /// Connects to the target (CRDs installed), makes the namespace. `run` reuses an earlier
    /// run's id (to sweep what it left), else a new one is drawn.
    pub async fn start(
        binary: PathBuf,
        limits: OperatorLimits,
        run: Option<String>,
    ) -> anyhow::Result<Self> {
        let target = Target::from_env().await?;
        target
            .install_crds(Duration::from_secs(60))
            .await
            .context("installing the CRDs")?;
        let client = target.client().await?;
        let c = target.cloud_env();
        let selector = CloudSelector::File {
            path: c.config_file.clone(),
            cloud: c.os_cloud.clone(),
        };
        let opts = ClientOptions {
            requests_per_second: 0,
            timeout: Duration::from_secs(60),
            ..ClientOptions::default()
        };
        let core = Core::connect(&selector, opts)
            .await
            .with_context(|| format!("connecting to OpenStack cloud {}", c.os_cloud))?;
        let cloud = Cloud::from_core(core.clone());
        let run = run.unwrap_or_else(e2e::names::random_suffix);
        let namespace = format!("bench-{run}");
        k8s::ensure_namespace(&client, &namespace).await?;
        Ok(Bench {
            target,
            client,
            cloud,
            core,
            run,
            namespace,
            binary,
            limits,
            project_ids: Mutex::new(BTreeSet::new()),
        })
    }

    /// Name of the run's OpenstackDomain (and its Keystone domain).
    pub fn domain_name(&self) -> String {
        format!("bench-{}", self.run)
    }

    /// Names of the two Keystone users the projects bind `member` to.
    pub fn user_names(&self) -> Vec<String> {
        vec![
            format!("bench-{}-user", self.run),
            format!("bench-{}-user2", self.run),
        ]
    }

    /// The run's federation identity provider (created by the operator from the bench's
    /// federation ConfigMap).
    pub fn idp_name(&self) -> String {
        format!("bench-{}", self.run)
    }

    /// Prefix of every object name of this run.
    pub fn prefix(&self) -> String {
        format!("bench-{}-", self.run)
    }

    /// Starts an operator with the bench's limits, no periodic resync during the run (forced
    /// reconciles only), no garbage collection (its sweeps would add calls to the counters),
    /// and with `log_filter` (e.g. the adapter at debug level).
    pub async fn start_operator(&self, phase: &str, log_filter: &str) -> anyhow::Result<Operator> {
        let mut opts = OperatorOptions::new(&self.binary, &format!("bench-{}-{phase}", self.run));
        opts.resync_seconds = 3600;
        opts.image_poll_seconds = 3;
        opts.extra_args = [
            "--max-concurrent-calls",
            &self.limits.max_concurrent_calls.to_string(),
            "--requests-per-second",
            &self.limits.requests_per_second.to_string(),
            "--concurrency",
            &self.limits.concurrency.to_string(),
            "--gc-mode",
            "off",
            // The bench's federation ConfigMap may create the run's identity provider.
            "--federation-namespaces",
            &self.namespace,
            "--log-level",
            log_filter,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let op = Operator::start(&self.target, opts)?;
        if let Err(e) = op.wait_ready(Duration::from_secs(120)).await {
            op.print_log_tail();
            return Err(e.context("starting the operator"));
        }
        Ok(op)
    }

    /// The API of a kind (the run's namespace for namespaced kinds).
    pub fn api<K: Managed>(&self) -> Api<K> {
        K::api(self.client.clone(), &self.namespace)
    }

    /// Server-side applies one manifest of kind `K`.
    pub async fn apply<K: Managed>(&self, manifest: &Value) -> anyhow::Result<K> {
        let name = manifest["metadata"]["name"]
            .as_str()
            .context("a manifest without metadata.name")?;
        self.api::<K>()
            .patch(
                name,
                &PatchParams::apply(FIELD_MANAGER),
                &Patch::Apply(manifest),
            )
            .await
            .with_context(|| format!("applying {} {name}", K::kind(&())))
    }

    /// Server-side applies one full `OpenstackProject` per name (`manifests::project`), one
    /// after another, in domain `domain` with role bindings of `users`.
    pub async fn apply_projects(
        &self,
        names: &[String],
        domain: &str,
        users: &[String],
        description: &str,
    ) -> anyhow::Result<()> {
        for name in names {
            let m =
                manifests::project(name, &self.namespace, &self.run, domain, users, description);
            self.apply::<api::OpenstackProject>(&m).await?;
        }
        Ok(())
    }

    /// The run's objects of kind `K`.
    pub async fn list<K: Managed>(&self) -> anyhow::Result<Vec<K>> {
        let lp = ListParams::default().labels(&format!("{RUN_LABEL}={}", self.run));
        Ok(self
            .api::<K>()
            .list(&lp)
            .await
            .with_context(|| format!("listing {}s", K::kind(&())))?
            .items)
    }

    /// Waits until `n` of the run's objects of kind `K` are Ready (fully reconciled at their
    /// generation); returns, per object, the time from `since` until it was first seen
    /// Ready (polled every `poll`).
    pub async fn wait_all_ready<K: Managed>(
        &self,
        operator: &impl Watched,
        n: usize,
        since: Instant,
        poll: Duration,
        timeout: Duration,
    ) -> anyhow::Result<BTreeMap<String, Duration>> {
        let mut ready: BTreeMap<String, Duration> = BTreeMap::new();
        let what = format!("{n} {}s to be Ready", K::kind(&()));
        wait_for(timeout, poll, &what, async || {
            if let Some(e) = operator.gone() {
                return Ok(Check::Fail(e));
            }
            let items = self.list::<K>().await?;
            let now = since.elapsed();
            for o in items.iter().filter(|o| k8s::is_ready(*o)) {
                ready.entry(o.name_any()).or_insert(now);
            }
            let not_ready: Vec<&K> = items.iter().filter(|o| !k8s::is_ready(*o)).collect();
            if ready.len() >= n && not_ready.is_empty() {
                return Ok(Check::Done(()));
            }
            let sample = not_ready
                .first()
                .map(|o| format!("; e.g. {}: {}", o.name_any(), k8s::summary(*o)))
                .unwrap_or_default();
            Ok(Check::Pending(format!(
                "{} of {} listed are Ready{sample}",
                items.len() - not_ready.len(),
                items.len()
            )))
        })
        .await?;
        Ok(ready)
    }

    /// Deletes the run's objects of kind `K`, then waits until none is left (failing at once
    /// if the operator, which must process the finalizers, exits).
    pub async fn delete_all<K: Managed>(
        &self,
        operator: &impl Watched,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let api = self.api::<K>();
        let names: Vec<String> = self
            .list::<K>()
            .await?
            .iter()
            .map(|o| o.name_any())
            .collect();
        // A handful of deletes in flight keeps a large run from taking minutes just to ask.
        let results: Vec<anyhow::Result<()>> = futures::stream::iter(names)
            .map(|name| {
                let api = api.clone();
                async move {
                    match api.delete(&name, &DeleteParams::default()).await {
                        Ok(_) => Ok(()),
                        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                        Err(e) => Err(anyhow::Error::new(e)
                            .context(format!("deleting {} {name}", K::kind(&())))),
                    }
                }
            })
            .buffer_unordered(8)
            .collect()
            .await;
        results.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
        self.wait_none::<K>(operator, timeout).await
    }

    /// Waits until the run has no object of kind `K`.
    pub async fn wait_none<K: Managed>(
        &self,
        operator: &impl Watched,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let what = format!("every {} of the run to be gone", K::kind(&()));
        wait_for(timeout, Duration::from_millis(250), &what, async || {
            if let Some(e) = operator.gone() {
                return Ok(Check::Fail(e));
            }
            let items = self.list::<K>().await?;
            Ok(match items.first() {
                None => Check::Done(()),
                Some(o) => Check::Pending(format!(
                    "{} left; e.g. {}: {}",
                    items.len(),
                    o.name_any(),
                    k8s::summary(o)
                )),
            })
        })
        .await
    }

    /// Creates the run's OpenstackDomain (through the operator) and a Keystone user in it for
    /// the role bindings ([`Bench::user_name`]).
    pub async fn create_domain_and_user(&self, timeout: Duration) -> anyhow::Result<()> {
        let domain = self.domain_name();
        self.apply::<api::OpenstackDomain>(&manifests::domain(&domain, &self.run))
            .await?;
        let d: api::OpenstackDomain =
            k8s::wait_ready(&self.api::<api::OpenstackDomain>(), &domain, timeout).await?;
        let domain_id = d
            .status
            .and_then(|s| s.domain_id)
            .context("status.domainId of the Ready bench domain")?;
        for name in self.user_names() {
            let body = json!({"user": {
                "name": name,
                "domain_id": domain_id,
                "enabled": true,
                "password": format!("{}{}", e2e::names::random_suffix(), e2e::names::random_suffix()),
            }});
            let req = Request::post(Service::Identity, "create_user", "users").json(&body)?;
            self.core
                .send(&req)
                .await
                .with_context(|| format!("creating Keystone user {name}"))?;
        }
        self.apply_federation_config_map(&self.idp_name()).await
    }

    /// Server-side applies the run's federation ConfigMap naming identity provider `idp`.
    pub async fn apply_federation_config_map(&self, idp: &str) -> anyhow::Result<()> {
        let cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(
            manifests::federation_config_map(&self.namespace, &self.run, idp),
        )?;
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(
            self.client.clone(),
            &self.namespace,
        )
        .patch(
            manifests::FEDERATION_CONFIG_MAP,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&cm),
        )
        .await
        .context("applying the federation ConfigMap")?;
        Ok(())
    }

    /// Deletes the run's Keystone users, if they exist.
    async fn delete_user(&self) -> anyhow::Result<()> {
        let Some(d) = self.cloud.identity.find_domain(&self.domain_name()).await? else {
            return Ok(());
        };
        for name in self.user_names() {
            if let Some(u) = self.cloud.identity.find_user(&d.id, &name).await? {
                let req =
                    Request::delete(Service::Identity, "delete_user", format!("users/{}", u.id));
                self.core
                    .send(&req)
                    .await
                    .optional()
                    .with_context(|| format!("deleting Keystone user {}", u.name))?;
            }
        }
        Ok(())
    }

    /// Deletes the run's identity provider with its protocol and mapping (the operator
    /// removes only its projects' rules; the last one takes the mapping and protocol along).
    /// Returns what it deleted.
    async fn delete_federation(&self) -> anyhow::Result<Vec<String>> {
        let id = &self.cloud.identity;
        let idp = self.idp_name();
        let mapping = format!("{idp}_oidc_mapping");
        let mut found = Vec::new();
        if id
            .delete_federation_protocol(&idp, "openid")
            .await
            .optional()?
            .is_some()
        {
            found.push(format!("swept federation protocol openid of {idp}"));
        }
        if id.delete_mapping(&mapping).await.optional()?.is_some() {
            found.push(format!("swept mapping {mapping}"));
        }
        if id
            .delete_identity_provider(&idp)
            .await
            .optional()?
            .is_some()
        {
            found.push(format!("deleted the run's identity provider {idp}"));
        }
        Ok(found)
    }

    /// Removes everything of the run through `operator` (restarted if `restart` or if it is
    /// not running: after Ctrl-C it got the signal too): projects, flavors, the user, the
    /// domain. What the operator cannot delete in time is unblocked (finalizers stripped) and
    /// removed from OpenStack directly. Returns the problems met (empty = clean).
    pub async fn cleanup(
        &self,
        operator: &Operator,
        restart: bool,
        timeout: Duration,
    ) -> Vec<String> {
        let mut problems = Vec::new();
        if restart || !operator.is_running() {
            eprintln!("bench: restarting the operator to clean up");
            let started = match operator.restart(Duration::from_secs(20)).await {
                Ok(()) => operator.wait_ready(Duration::from_secs(120)).await,
                Err(e) => Err(e),
            };
            if let Err(e) = started {
                problems.push(format!("restarting the operator for cleanup: {e:#}"));
            }
        }
        if let Err(e) = self.remember_projects().await {
            problems.push(format!("{e:#}"));
        }
        let mut stuck = false;
        if let Err(e) = self
            .delete_all::<api::OpenstackProject>(operator, timeout)
            .await
        {
            problems.push(format!("{e:#}"));
            stuck = true;
        }
        if let Err(e) = self
            .delete_all::<api::OpenstackFlavor>(operator, timeout)
            .await
        {
            problems.push(format!("{e:#}"));
            stuck = true;
        }
        if let Err(e) = self.delete_user().await {
            problems.push(format!("{e:#}"));
        }
        // The identity provider is the bench's (the operator never deletes one); a mapping or
        // protocol still there means the operator left its projects' rules behind.
        match self.delete_federation().await {
            Ok(done) => {
                for d in done {
                    if d.starts_with("swept") {
                        problems.push(format!("{d} (left after the projects were deleted)"));
                    }
                }
            }
            Err(e) => problems.push(format!("deleting the run's identity provider: {e:#}")),
        }
        if let Err(e) = self
            .delete_all::<api::OpenstackDomain>(operator, timeout)
            .await
        {
            problems.push(format!("{e:#}"));
            stuck = true;
        }
        if stuck {
            problems.extend(self.force_cleanup().await);
        }
        match self.sweep_residue().await {
            Ok(r) => problems.extend(
                r.other_security_groups
                    .into_iter()
                    .map(|g| format!("security group {g} was left by the operator")),
            ),
            Err(e) => problems.push(format!("removing what deleted projects left: {e:#}")),
        }
        match self.leftovers().await {
            Ok(left) => problems.extend(left),
            Err(e) => problems.push(format!("checking OpenStack for leftovers: {e:#}")),
        }
        problems
    }

    /// Strips the finalizers of what is left in Kubernetes and deletes the run's objects from
    /// OpenStack directly. Returns a description of everything it had to do.
    async fn force_cleanup(&self) -> Vec<String> {
        let mut notes = Vec::new();
        for (kind, res) in [
            (
                "OpenstackProject",
                self.strip::<api::OpenstackProject>().await,
            ),
            (
                "OpenstackFlavor",
                self.strip::<api::OpenstackFlavor>().await,
            ),
            (
                "OpenstackDomain",
                self.strip::<api::OpenstackDomain>().await,
            ),
        ] {
            match res {
                Ok(0) => {}
                Ok(n) => notes.push(format!("removed the finalizers of {n} {kind}s")),
                Err(e) => notes.push(format!("{kind}s: {e:#}")),
            }
        }
        match self.sweep().await {
            Ok(found) => notes.extend(found),
            Err(e) => notes.push(format!("sweeping OpenStack: {e:#}")),
        }
        notes
    }

    /// Removes the finalizers of the run's objects of kind `K` and deletes them (for objects
    /// no operator will process any more); returns how many there were.
    pub(crate) async fn strip<K: Managed>(&self) -> anyhow::Result<usize> {
        let api = self.api::<K>();
        let items = self.list::<K>().await?;
        let patch = json!({"metadata": {"finalizers": null}});
        for o in &items {
            match api
                .patch(
                    &o.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    return Err(e).context(format!("removing finalizers of {}", o.name_any()));
                }
            }
            let _ = api.delete(&o.name_any(), &DeleteParams::default()).await;
        }
        Ok(items.len())
    }

    /// Deletes the run's OpenStack objects directly: projects of the run's domain with their
    /// Neutron objects and quotas, its groups, the user, the domain, and flavors named after
    /// the run. Returns a description of each thing deleted.
    pub async fn sweep(&self) -> anyhow::Result<Vec<String>> {
        let mut found = Vec::new();
        let id = &self.cloud.identity;
        if let Some(d) = id.find_domain(&self.domain_name()).await? {
            let filter = ProjectFilter {
                domain_id: Some(d.id.clone()),
                ..Default::default()
            };
            for p in id.list_projects(&filter).await? {
                self.sweep_neutron(&p.id).await?;
                id.delete_project(&p.id).await.optional()?;
                self.reset_quotas(&p.id).await?;
                found.push(format!("swept Keystone project {} ({})", p.name, p.id));
            }
            for g in id.list_groups(Some(&d.id)).await? {
                id.delete_group(&g.id).await.optional()?;
                found.push(format!("swept Keystone group {} ({})", g.name, g.id));
            }
            self.delete_user().await?;
            found.extend(self.delete_federation().await?);
            let off = DomainUpdate {
                enabled: Some(false),
                ..Default::default()
            };
            id.update_domain(&d.id, &off).await.optional()?;
            id.delete_domain(&d.id).await.optional()?;
            found.push(format!("swept Keystone domain {} ({})", d.name, d.id));
        }
        let prefix = self.prefix();
        for f in self.cloud.compute.list_flavors().await? {
            if f.name.starts_with(&prefix) {
                self.cloud.compute.delete_flavor(&f.id).await.optional()?;
                found.push(format!("swept Nova flavor {} ({})", f.name, f.id));
            }
        }
        Ok(found)
    }

    async fn sweep_neutron(&self, project_id: &str) -> anyhow::Result<()> {
        let net = &self.cloud.network;
        let pid = Some(project_id.to_string());
        for r in net
            .list_routers(&RouterFilter {
                project_id: pid.clone(),
                ..Default::default()
            })
            .await?
        {
            for port in net.list_router_interfaces(&r.id).await? {
                for ip in &port.fixed_ips {
                    if let Some(s) = &ip.subnet_id {
                        net.remove_router_interface(&r.id, s).await.optional()?;
                    }
                }
            }
            net.delete_router(&r.id).await.optional()?;
        }
        for s in net
            .list_subnets(&SubnetFilter {
                project_id: pid.clone(),
                ..Default::default()
            })
            .await?
        {
            net.delete_subnet(&s.id).await.optional()?;
        }
        for n in net
            .list_networks(&NetworkFilter {
                project_id: pid.clone(),
                ..Default::default()
            })
            .await?
        {
            net.delete_network(&n.id).await.optional()?;
        }
        for g in self.all_security_groups().await? {
            if g.project_id == project_id {
                net.delete_security_group(&g.id).await.optional()?;
            }
        }
        Ok(())
    }

    /// What of the run is still in OpenStack: the domain (with its projects) and flavors
    /// named after the run.
    pub async fn leftovers(&self) -> anyhow::Result<Vec<String>> {
        let mut left = Vec::new();
        if let Some(d) = self.cloud.identity.find_domain(&self.domain_name()).await? {
            let projects = self
                .cloud
                .identity
                .list_projects(&ProjectFilter {
                    domain_id: Some(d.id.clone()),
                    ..Default::default()
                })
                .await?;
            left.push(format!(
                "Keystone domain {} ({}) is still there with {} project(s)",
                d.name,
                d.id,
                projects.len()
            ));
        }
        let prefix = self.prefix();
        let flavors = self
            .cloud
            .compute
            .list_flavors()
            .await?
            .into_iter()
            .filter(|f| f.name.starts_with(&prefix))
            .count();
        if flavors > 0 {
            left.push(format!(
                "{flavors} Nova flavor(s) named {prefix}* are still there"
            ));
        }
        Ok(left)
    }

    /// Keystone projects of the run's domain (to check deletion left none).
    pub async fn projects_in_domain(&self) -> anyhow::Result<usize> {
        let Some(d) = self.cloud.identity.find_domain(&self.domain_name()).await? else {
            return Ok(0);
        };
        Ok(self
            .cloud
            .identity
            .list_projects(&ProjectFilter {
                domain_id: Some(d.id),
                ..Default::default()
            })
            .await?
            .len())
    }

    /// Remembers the Keystone IDs of the run's current projects.
    pub async fn remember_projects(&self) -> anyhow::Result<()> {
        let ids: Vec<String> = self
            .list::<api::OpenstackProject>()
            .await?
            .into_iter()
            .filter_map(|p| p.status.and_then(|s| s.project_id))
            .collect();
        self.project_ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(ids);
        Ok(())
    }

    /// Removes what OpenStack keeps of the run's deleted projects: their security groups
    /// (Neutron's `default` one) and their quota records in Nova, Cinder and Neutron.
    pub async fn sweep_residue(&self) -> anyhow::Result<Residue> {
        let ids: Vec<String> = self
            .project_ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect();
        let mut residue = Residue::default();
        if ids.is_empty() {
            return Ok(residue);
        }
        // One unfiltered list: Neutron creates a project's `default` group whenever security
        // groups are listed for that project, even a deleted one.
        let groups = self.all_security_groups().await?;
        for pid in ids {
            if self
                .cloud
                .identity
                .get_project(&pid)
                .await
                .optional()?
                .is_some()
            {
                continue;
            }
            for g in groups.iter().filter(|g| g.project_id == pid) {
                if g.name == "default" {
                    residue.default_security_groups += 1;
                } else {
                    residue
                        .other_security_groups
                        .push(format!("{} ({}) of deleted project {pid}", g.name, g.id));
                }
                self.cloud
                    .network
                    .delete_security_group(&g.id)
                    .await
                    .optional()?;
            }
            self.reset_quotas(&pid).await?;
            self.project_ids
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&pid);
        }
        Ok(residue)
    }

    /// Every security group of the cloud (listing by project would create the project's
    /// `default` group).
    async fn all_security_groups(&self) -> anyhow::Result<Vec<openstack::model::SecurityGroup>> {
        Ok(self
            .cloud
            .network
            .list_security_groups(&SecurityGroupFilter::default())
            .await?)
    }

    /// Deletes a project's quota records in Nova, Cinder and Neutron (back to the defaults).
    async fn reset_quotas(&self, pid: &str) -> anyhow::Result<()> {
        for (service, op, path) in [
            (
                Service::Compute,
                "delete_compute_quota",
                format!("os-quota-sets/{pid}"),
            ),
            (
                Service::BlockStorage,
                "delete_volume_quota",
                format!("os-quota-sets/{pid}"),
            ),
            (
                Service::Network,
                "delete_network_quota",
                format!("quotas/{pid}"),
            ),
        ] {
            self.core
                .send(&Request::delete(service, op, path))
                .await
                .optional()
                .with_context(|| format!("resetting the quotas of project {pid}"))?;
        }
        Ok(())
    }

    /// Removes the namespace.
    pub async fn delete_namespace(&self) -> anyhow::Result<()> {
        let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client.clone());
        match api.delete(&self.namespace, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e).with_context(|| format!("deleting namespace {}", self.namespace)),
        }
    }
}

/// What the bench waits on: the operator binary, or the bench's own in-memory-cloud operator
/// process (`--fake-cloud-operator`). Both expose the operator's counters.
pub(crate) trait Watched {
    /// `Some(error)` once the process has exited (waiting for it cannot help).
    fn gone(&self) -> Option<anyhow::Error>;
    /// One scrape of its `/metrics`.
    async fn metrics(&self) -> anyhow::Result<Metrics>;
}

impl Watched for Operator {
    fn gone(&self) -> Option<anyhow::Error> {
        match self.exited() {
            Ok(Some(status)) => Some(anyhow::anyhow!(
                "the operator exited ({status}); last log lines:\n{}",
                self.log_tail(20)
            )),
            Ok(None) => None,
            Err(e) => Some(e),
        }
    }

    async fn metrics(&self) -> anyhow::Result<Metrics> {
        Operator::metrics(self).await
    }
}

/// Scrapes until two scrapes a second apart agree on the API call and reconcile counters
/// (nothing in flight), and returns that scrape.
pub async fn settled(operator: &impl Watched, timeout: Duration) -> anyhow::Result<Metrics> {
    let mut previous: Option<Metrics> = None;
    wait_for(
        timeout,
        Duration::from_secs(1),
        "the operator's counters to settle",
        async || {
            let m = operator.metrics().await?;
            let same = previous.as_ref().is_some_and(|p| {
                p.api_calls() == m.api_calls()
                    && p.by_label(RECONCILES, "resource") == m.by_label(RECONCILES, "resource")
            });
            if same {
                return Ok(Check::Done(m));
            }
            previous = Some(m);
            Ok(Check::Pending("counters still moving".into()))
        },
    )
    .await
}
