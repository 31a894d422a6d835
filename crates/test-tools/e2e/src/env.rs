//! One test's world: a target, a namespace, an OpenStack connection and a running operator,
//! plus the bookkeeping that cleans up after the test even when it fails.

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use futures::FutureExt as _;
use futures::future::BoxFuture;
use kube::{Api, Client};
use openstack::Cloud;
use openstack::OptionalExt as _;
use openstack::model::{DomainUpdate, Flavor, FlavorCreate, NetworkFilter, SubnetFilter};
use serde_json::Value;

use crate::k8s::{self, Applied, ApplyError, Managed};
use crate::operator::{Operator, OperatorOptions};
use crate::target::Target;

/// Tag prefix of the ownership mark naming the operator's cluster id.
pub const CLUSTER_TAG_PREFIX: &str = "openstack-operator.cluster=";
/// Flavor extra spec carrying the ownership mark `<cluster>/<uid>`.
pub const FLAVOR_OWNER_SPEC: &str = "openstack-operator:owner";

/// Against a shared, real cluster the operators of parallel tests would all reconcile every
/// cluster-scoped object (and fight over them), so tests of one binary take turns there.
static SHARED_CLUSTER: LazyLock<Arc<tokio::sync::Mutex<()>>> =
    LazyLock::new(|| Arc::new(tokio::sync::Mutex::new(())));

type Deferred = (
    String,
    Box<dyn FnOnce(Cloud) -> BoxFuture<'static, anyhow::Result<()>> + Send>,
);

/// How to set up a [`TestEnv`].
#[derive(Clone, Debug)]
pub struct EnvOptions {
    /// The operator to start.
    pub operator: OperatorOptions,
    /// How long to wait for the operator's readiness.
    pub ready_timeout: Duration,
    /// How long cleanup waits for each deleted object to disappear.
    pub cleanup_timeout: Duration,
}

impl EnvOptions {
    /// Defaults: see [`OperatorOptions::new`]; 120 s for readiness and for each cleanup wait.
    pub fn new(binary: impl Into<PathBuf>, test_name: &str) -> Self {
        EnvOptions {
            operator: OperatorOptions::new(binary, test_name),
            ready_timeout: Duration::from_secs(120),
            cleanup_timeout: Duration::from_secs(120),
        }
    }
}

/// A test's world. Create with [`TestEnv::start`], run the test with [`TestEnv::run`].
pub struct TestEnv {
    /// The test's name (log file, namespace).
    pub name: String,
    /// Cluster and cloud.
    pub target: Target,
    /// Kubernetes client of the test.
    pub client: Client,
    /// OpenStack ports, to check what the operator did (and to act behind its back).
    pub cloud: Cloud,
    /// The operator under test.
    pub operator: Operator,
    /// A namespace of this test's own.
    pub namespace: String,
    cleanup_timeout: Duration,
    applied: Mutex<Vec<Applied>>,
    deferred: Mutex<Vec<Deferred>>,
    _turn: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl std::fmt::Debug for TestEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestEnv")
            .field("name", &self.name)
            .field("namespace", &self.namespace)
            .field("operator", &self.operator)
            .finish()
    }
}

impl TestEnv {
    /// Target from the environment, CRDs installed, a namespace, an OpenStack connection and
    /// a ready operator.
    pub async fn start(name: &str, opts: EnvOptions) -> anyhow::Result<Self> {
        Self::start_on(Target::from_env().await?, name, opts).await
    }

    /// Like [`TestEnv::start`] on a given target (e.g. [`Target::with_cloud`]).
    pub async fn start_on(target: Target, name: &str, opts: EnvOptions) -> anyhow::Result<Self> {
        let turn = if target.is_emulated() {
            None
        } else {
            Some(SHARED_CLUSTER.clone().lock_owned().await)
        };
        let client = target.client().await?;
        target
            .install_crds(Duration::from_secs(60))
            .await
            .context("installing the CRDs")?;
        let namespace =
            crate::names::unique(&name.replace('_', "-").chars().take(30).collect::<String>());
        k8s::ensure_namespace(&client, &namespace).await?;
        let cloud = target.cloud_env().connect().await?;
        let operator = Operator::start(&target, opts.operator)?;
        if let Err(e) = operator.wait_ready(opts.ready_timeout).await {
            operator.print_log_tail();
            return Err(e.context("starting the operator"));
        }
        Ok(TestEnv {
            name: name.to_string(),
            target,
            client,
            cloud,
            operator,
            namespace,
            cleanup_timeout: opts.cleanup_timeout,
            applied: Mutex::new(Vec::new()),
            deferred: Mutex::new(Vec::new()),
            _turn: turn,
        })
    }

    /// Runs the test body, then cleans up (deletes what was applied, checks OpenStack for
    /// leftovers of this operator, runs deferred cleanups, removes the namespace, stops the
    /// operator) whether the body passed, failed or panicked. On failure the operator log's
    /// tail is printed; a panic is resumed after cleanup.
    pub async fn run(
        self,
        body: impl AsyncFnOnce(&TestEnv) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let outcome = AssertUnwindSafe(body(&self)).catch_unwind().await;
        let failed = !matches!(outcome, Ok(Ok(())));
        if failed {
            self.operator.print_log_tail();
        }
        let cleanup = self.cleanup().await;
        if let Err(e) = &cleanup {
            if !failed {
                self.operator.print_log_tail();
            }
            eprintln!("e2e {}: cleanup failed: {e:#}", self.name);
        }
        match outcome {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(Err(e)) => Err(e),
            Ok(Ok(())) => cleanup,
        }
    }

    /// A unique name `e2e-<prefix>-<random>` (DNS-1123 label when `prefix` is one).
    pub fn unique(&self, prefix: &str) -> String {
        crate::names::unique(prefix)
    }

    /// Server-side applies a manifest (field manager `e2e`) and remembers the objects for
    /// cleanup.
    pub async fn apply(&self, yaml: &str) -> anyhow::Result<Vec<Applied>> {
        self.try_apply(yaml)
            .await
            .map_err(|e| anyhow::anyhow!("{e}: {}", e.describe()))
    }

    /// Like [`TestEnv::apply`], but hands the server's refusal back for inspection.
    pub async fn try_apply(&self, yaml: &str) -> Result<Vec<Applied>, ApplyError> {
        let applied = k8s::apply_yaml(&self.client, &self.namespace, yaml).await?;
        let mut list = self.applied.lock().unwrap_or_else(|p| p.into_inner());
        for a in &applied {
            if !list
                .iter()
                .any(|b| b.kind == a.kind && b.name == a.name && b.namespace == a.namespace)
            {
                list.push(a.clone());
            }
        }
        Ok(applied)
    }

    /// The API of a managed kind (in this test's namespace for namespaced kinds).
    pub fn api<K: Managed>(&self) -> Api<K> {
        K::api(self.client.clone(), &self.namespace)
    }

    /// Reads an object.
    pub async fn get<K: Managed>(&self, name: &str) -> anyhow::Result<K> {
        self.api::<K>()
            .get(name)
            .await
            .with_context(|| format!("reading {} {name}", K::kind(&())))
    }

    /// Waits until the object is fully reconciled (see [`k8s::is_ready`]).
    pub async fn wait_ready<K: Managed>(&self, name: &str, timeout: Duration) -> anyhow::Result<K> {
        k8s::wait_ready(&self.api::<K>(), name, timeout).await
    }

    /// Waits until `pred` holds for the object.
    pub async fn wait_object<K: Managed>(
        &self,
        name: &str,
        timeout: Duration,
        what: &str,
        pred: impl Fn(&K) -> bool,
    ) -> anyhow::Result<K> {
        k8s::wait_object(&self.api::<K>(), name, timeout, what, pred).await
    }

    /// Waits for a condition with status and reason at the current generation.
    pub async fn wait_condition<K: Managed>(
        &self,
        name: &str,
        type_: &str,
        status: bool,
        reason: &str,
        timeout: Duration,
    ) -> anyhow::Result<K> {
        k8s::wait_condition(&self.api::<K>(), name, type_, status, reason, timeout).await
    }

    /// Forces a reconcile of the object (reconcile annotation set to now).
    pub async fn request_reconcile<K: Managed>(&self, name: &str) -> anyhow::Result<String> {
        k8s::request_reconcile(&self.api::<K>(), name).await
    }

    /// Changes the object's spec by a JSON merge patch.
    pub async fn merge_spec<K: Managed>(&self, name: &str, spec_patch: Value) -> anyhow::Result<K> {
        k8s::merge_spec(&self.api::<K>(), name, spec_patch).await
    }

    /// Deletes the object and waits until it is gone (finalizer processed).
    pub async fn delete_and_wait<K: Managed>(
        &self,
        name: &str,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        k8s::delete_and_wait(&self.api::<K>(), name, timeout).await
    }

    /// Waits for an Event with this reason about the object; returns it.
    pub async fn wait_event<K: Managed>(
        &self,
        name: &str,
        reason: &str,
        timeout: Duration,
    ) -> anyhow::Result<k8s::EventInfo> {
        let kind = K::kind(&()).to_string();
        let what = format!("an Event with reason {reason} about {kind} {name}");
        crate::wait::wait_for(timeout, Duration::from_millis(250), &what, async || {
            let events = k8s::events_for(&self.client, &kind, name).await?;
            Ok(match events.iter().find(|e| e.reason == reason) {
                Some(e) => crate::wait::Check::Done(e.clone()),
                None => crate::wait::Check::Pending(format!("events: {events:?}")),
            })
        })
        .await
    }

    /// Registers an OpenStack cleanup to run after the test (last registered runs first),
    /// for objects the test made behind the operator's back.
    pub fn defer(
        &self,
        what: &str,
        f: impl FnOnce(Cloud) -> BoxFuture<'static, anyhow::Result<()>> + Send + 'static,
    ) {
        self.deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((what.to_string(), Box::new(f)));
    }

    /// A flavor made by hand in OpenStack (1 vCPU, 128 MiB, 1 GiB, public), optionally carrying
    /// an ownership mark (`<cluster>/<uid>`), deleted after the test.
    pub async fn hand_made_flavor(&self, name: &str, mark: Option<&str>) -> anyhow::Result<Flavor> {
        let compute = &self.cloud.compute;
        let f = compute
            .create_flavor(&FlavorCreate {
                name: name.into(),
                vcpus: 1,
                ram_mb: 128,
                disk_gb: 1,
                is_public: true,
                ..Default::default()
            })
            .await?;
        let id = f.id.clone();
        self.defer(&format!("hand-made flavor {name} ({id})"), {
            let id = id.clone();
            move |cloud| {
                async move {
                    cloud
                        .compute
                        .delete_flavor(&id)
                        .await
                        .optional()
                        .map(|_| ())
                        .map_err(Into::into)
                }
                .boxed()
            }
        });
        let Some(m) = mark else { return Ok(f) };
        let specs = [(FLAVOR_OWNER_SPEC.to_string(), m.to_string())].into();
        compute.set_flavor_extra_specs(&id, &specs).await?;
        Ok(compute.get_flavor(&id).await?)
    }

    /// The URL of a file served to Glance by the test cloud.
    pub fn image_url(&self, file: &str) -> anyhow::Result<String> {
        self.target.cloud_env().image_url(file)
    }

    async fn cleanup(&self) -> anyhow::Result<()> {
        let mut problems: Vec<String> = Vec::new();
        let applied: Vec<Applied> =
            std::mem::take(&mut *self.applied.lock().unwrap_or_else(|p| p.into_inner()));
        let operator_alive = self.operator.is_running();
        for a in applied.iter().rev() {
            let api = a.api(self.client.clone());
            let res = if operator_alive {
                k8s::delete_dynamic_and_wait(&api, &a.name, self.cleanup_timeout).await
            } else {
                Err(anyhow::anyhow!("the operator is not running"))
            };
            if let Err(e) = res {
                problems.push(format!(
                    "{} {} was not deleted cleanly: {e:#}",
                    a.kind, a.name
                ));
                if let Err(e) = k8s::strip_finalizers(&api, &a.name).await {
                    problems.push(format!("{e:#}"));
                }
                if let Err(e) =
                    k8s::delete_dynamic_and_wait(&api, &a.name, Duration::from_secs(30)).await
                {
                    problems.push(format!("{e:#}"));
                }
            }
        }
        for a in &applied {
            match self.sweep(a).await {
                Ok(found) => problems.extend(found),
                Err(e) => problems.push(format!(
                    "checking OpenStack for leftovers of {} {}: {e:#}",
                    a.kind, a.name
                )),
            }
        }
        let deferred: Vec<Deferred> =
            std::mem::take(&mut *self.deferred.lock().unwrap_or_else(|p| p.into_inner()));
        for (what, f) in deferred.into_iter().rev() {
            if let Err(e) = f(self.cloud.clone()).await {
                problems.push(format!("deferred cleanup {what}: {e:#}"));
            }
        }
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client.clone());
        if let Err(e) = namespaces
            .delete(&self.namespace, &Default::default())
            .await
        {
            problems.push(format!("deleting namespace {}: {e}", self.namespace));
        }
        if self.operator.is_running() {
            match self.operator.stop(Duration::from_secs(20)).await {
                Ok(status) if status.success() => {}
                Ok(status) => {
                    problems.push(format!("the operator exited with {status} on SIGTERM"))
                }
                Err(e) => problems.push(format!("stopping the operator: {e:#}")),
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            anyhow::bail!("cleanup of {}:\n  {}", self.name, problems.join("\n  "))
        }
    }

    /// Deletes OpenStack objects still carrying this operator's cluster mark under the spec
    /// name of an applied object; returns a description of each (a leak, hence a problem).
    async fn sweep(&self, a: &Applied) -> anyhow::Result<Vec<String>> {
        // OpenStack holds no object with a blank name (and Keystone answers 400 to a search
        // for one), so a bad-input object with such a name cannot have left anything.
        let Some(spec_name) = a.object.data["spec"]["name"]
            .as_str()
            .filter(|n| !n.trim().is_empty())
            .map(str::to_string)
        else {
            return Ok(Vec::new());
        };
        let mark = format!("{CLUSTER_TAG_PREFIX}{}", self.operator.cluster_id());
        let ours = |tags: &[String]| tags.contains(&mark);
        let mut found = Vec::new();
        match a.kind.as_str() {
            "OpenstackDomain" => {
                if let Some(d) = self.cloud.identity.find_domain(&spec_name).await?
                    && ours(&d.tags)
                {
                    found.push(format!(
                        "leftover Keystone domain {} ({}) deleted by the sweep",
                        d.name, d.id
                    ));
                    let off = DomainUpdate {
                        enabled: Some(false),
                        ..Default::default()
                    };
                    self.cloud.identity.update_domain(&d.id, &off).await?;
                    self.cloud.identity.delete_domain(&d.id).await?;
                }
            }
            "OpenstackFlavor" => {
                let prefix = format!("{}/", self.operator.cluster_id());
                if let Some(f) = self.cloud.compute.find_flavor(&spec_name).await?
                    && f.extra_specs
                        .get(FLAVOR_OWNER_SPEC)
                        .is_some_and(|m| m.starts_with(&prefix))
                {
                    found.push(format!(
                        "leftover Nova flavor {} ({}) deleted by the sweep",
                        f.name, f.id
                    ));
                    self.cloud.compute.delete_flavor(&f.id).await?;
                }
            }
            "OpenstackImage" => {
                for i in self.cloud.image.list_images_by_name(&spec_name).await? {
                    if ours(&i.tags) {
                        found.push(format!(
                            "leftover Glance image {} ({}) deleted by the sweep",
                            i.name, i.id
                        ));
                        if i.protected {
                            self.cloud
                                .image
                                .update_image(
                                    &i.id,
                                    &[openstack::model::ImagePatchOp::set_protected(false)],
                                )
                                .await?;
                        }
                        self.cloud.image.delete_image(&i.id).await?;
                    }
                }
            }
            "OpenstackNetwork" => {
                let filter = NetworkFilter {
                    name: Some(spec_name.clone()),
                    ..Default::default()
                };
                for n in self.cloud.network.list_networks(&filter).await? {
                    if ours(&n.tags) {
                        found.push(format!(
                            "leftover Neutron network {} ({}) deleted by the sweep",
                            n.name, n.id
                        ));
                        let subnets = SubnetFilter {
                            network_id: Some(n.id.clone()),
                            ..Default::default()
                        };
                        for s in self.cloud.network.list_subnets(&subnets).await? {
                            self.cloud.network.delete_subnet(&s.id).await?;
                        }
                        self.cloud.network.delete_network(&n.id).await?;
                    }
                }
            }
            _ => {}
        }
        Ok(found)
    }
}
