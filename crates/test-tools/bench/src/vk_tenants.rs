//! `--only vk --vk-tenants K`: the Zun virtual kubelet in `--tenants` mode, one process serving
//! K `ZunTenant`s, each a node of its own in its own OpenStack project and network.
//!
//! Real run: the test cloud's tenant clouds (`ZUN_TENANT_CLOUD`, `ZUN_TENANT2_CLOUD`, with
//! their `<cloud>-appcred` application credentials from clouds.yaml) become ZunTenants bound
//! to a namespace each; N pods are spread over them, Running, left alone, then deleted.
//! Calls are counted from the process's request log by service: the Zun calls and the Neutron
//! calls (each pod's port is created before its container, item 3 of issue 22). Fake run: the
//! bench's `--fake-zun-tenants` mode, K nodes in one process on in-memory Zun and Neutron.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use api::tenant::{KEY_APP_CRED_ID, KEY_APP_CRED_SECRET, KEY_AUTH_URL, TENANT_LABEL, ZunTenant};
use e2e::wait::{Check, wait_for};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, CustomResourceExt as _};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::machine::Memory;
use crate::manifests::RUN_LABEL;
use crate::oplog;
use crate::stats;
use crate::vk::{self, Counter, VkOptions, Window};
use crate::vk_report::{FakeTenantsRun, TenantsRun};
use crate::world::Bench;

/// One tenant of the run: its ZunTenant (= node) name, namespace and Neutron network.
#[derive(Clone, Debug)]
pub struct BenchTenant {
    /// ZunTenant and node name.
    pub name: String,
    /// The namespace bound to it.
    pub namespace: String,
    /// Its pods' network (name or ID in its project).
    pub network: String,
    /// The clouds.yaml entry it was made from.
    pub cloud: String,
}

/// The tenant clouds the test cloud offers, in order (`ZUN_TENANT_CLOUD`, `ZUN_TENANT2_CLOUD`).
fn tenant_clouds() -> Vec<(String, String)> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    [
        ("ZUN_TENANT_CLOUD", "ZUN_NETWORK"),
        ("ZUN_TENANT2_CLOUD", "ZUN_NETWORK2"),
    ]
    .iter()
    .filter_map(|(c, n)| Some((var(c)?, var(n)?)))
    .collect()
}

/// `auth_url`, application credential ID and secret of clouds.yaml entry `<cloud>-appcred`.
fn app_credential(file: &Path, cloud: &str) -> anyhow::Result<(String, String, String)> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let doc: serde_json::Value =
        serde_saphyr::from_str(&text).with_context(|| format!("parsing {}", file.display()))?;
    let entry = format!("{cloud}-appcred");
    let auth = &doc["clouds"][&entry]["auth"];
    let get = |k: &str| {
        auth[k]
            .as_str()
            .map(str::to_string)
            .with_context(|| format!("{}: clouds.{entry}.auth.{k} is missing", file.display()))
    };
    Ok((
        get("auth_url")?,
        get("application_credential_id")?,
        get("application_credential_secret")?,
    ))
}

fn pod_manifest(run: &str, t: &BenchTenant, name: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": t.namespace, "labels": {RUN_LABEL: run}},
        "spec": {
            "nodeName": t.name,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 10,
            "tolerations": [
                {"key": "virtual-kubelet.io/provider", "operator": "Equal",
                 "value": "openstack", "effect": "NoSchedule"},
                {"key": TENANT_LABEL, "operator": "Equal", "value": t.name,
                 "effect": "NoSchedule"}],
            "containers": [{
                "name": "sleep", "image": "busybox",
                "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
                "resources": {"limits": {"cpu": "100m", "memory": "32Mi"}}
            }]
        }
    }))?)
}

/// The `--tenants` process, killed on drop if not stopped.
struct Process {
    child: Option<Child>,
    log: PathBuf,
}

impl Process {
    fn start(bench: &Bench, extra: &[&str]) -> anyhow::Result<Self> {
        let dir = e2e::operator::log_dir(&bench.binary);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let log = dir.join(format!("bench-{}-tenants.log", bench.run));
        let f =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = Command::new(&bench.binary)
            .args([
                "virtual-kubelet",
                "--tenants",
                "--no-kubelet-api",
                "--internal-ip",
                "127.0.0.1",
                "--log-format",
                "json",
                "--log-level",
                oplog::DEBUG_ADAPTER_FILTER,
            ])
            .args(extra)
            .env("KUBECONFIG", bench.target.kubeconfig())
            .env_remove("OS_CLOUD")
            .env_remove("OS_CLIENT_CONFIG_FILE")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::from(f.try_clone()?))
            .stderr(Stdio::from(f))
            .spawn()
            .context("starting openstack-operator virtual-kubelet --tenants")?;
        Ok(Self {
            child: Some(child),
            log,
        })
    }

    fn pid(&self) -> anyhow::Result<u32> {
        self.child
            .as_ref()
            .map(Child::id)
            .context("the --tenants process is not running")
    }

    fn tail(&self, n: usize) -> String {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    async fn stop(&mut self) -> anyhow::Result<()> {
        match self.child.take() {
            Some(mut c) => vk::stop_child(&mut c).await,
            None => Ok(()),
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Makes the run's tenants: a namespace, a credentials Secret and a `ZunTenant` each.
async fn make_tenants(bench: &Bench, count: usize) -> anyhow::Result<Vec<BenchTenant>> {
    let clouds = tenant_clouds();
    anyhow::ensure!(
        clouds.len() >= count,
        "--vk-tenants {count}: the test cloud offers {} tenant clouds (ZUN_TENANT_CLOUD, ZUN_TENANT2_CLOUD with ZUN_NETWORK, ZUN_NETWORK2)",
        clouds.len()
    );
    let file = std::env::var("OS_CLIENT_CONFIG_FILE")
        .context("OS_CLIENT_CONFIG_FILE is unset: eval \"$(scripts/test-cloud env)\"")?;
    install_tenant_crd(bench).await?;
    let secrets: Api<Secret> = Api::namespaced(bench.client.clone(), &bench.namespace);
    let tenants: Api<ZunTenant> = Api::all(bench.client.clone());
    let mut out = Vec::new();
    for (i, (cloud, network)) in clouds.into_iter().take(count).enumerate() {
        let t = BenchTenant {
            name: format!("bench-{}-t{i}", bench.run),
            namespace: format!("bench-{}-t{i}", bench.run),
            network,
            cloud,
        };
        e2e::k8s::ensure_namespace(&bench.client, &t.namespace).await?;
        let (auth_url, id, secret) = app_credential(Path::new(&file), &t.cloud)?;
        let s: Secret = serde_json::from_value(json!({
            "metadata": {"name": t.name},
            "stringData": {KEY_AUTH_URL: auth_url, KEY_APP_CRED_ID: id, KEY_APP_CRED_SECRET: secret}
        }))?;
        secrets
            .create(&PostParams::default(), &s)
            .await
            .with_context(|| format!("creating Secret {}", t.name))?;
        let zt: ZunTenant = serde_json::from_value(json!({
            "apiVersion": "virtual-kubelet.sunet.se/v1alpha1", "kind": "ZunTenant",
            "metadata": {"name": t.name, "labels": {RUN_LABEL: bench.run}},
            "spec": {"credentials": {"secretRef": {"namespace": bench.namespace, "name": t.name}},
                     "networks": [{"name": "pods", "network": t.network}],
                     "namespaces": [t.namespace]}
        }))?;
        tenants
            .create(&PostParams::default(), &zt)
            .await
            .with_context(|| format!("creating ZunTenant {}", t.name))?;
        out.push(t);
    }
    Ok(out)
}

async fn install_tenant_crd(bench: &Bench) -> anyhow::Result<()> {
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(bench.client.clone());
    let crd = ZunTenant::crd();
    let name = crd.metadata.name.clone().unwrap_or_default();
    crds.patch(
        &name,
        &PatchParams::apply("bench").force(),
        &Patch::Apply(&crd),
    )
    .await
    .with_context(|| format!("applying CRD {name}"))?;
    wait_for(
        Duration::from_secs(60),
        Duration::from_millis(200),
        &format!("CRD {name} to be Established"),
        async || {
            let ok = crds
                .get(&name)
                .await?
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            Ok(if ok {
                Check::Done(())
            } else {
                Check::Pending("not Established".into())
            })
        },
    )
    .await
}

/// Removes the run's tenants, their namespaces (with any pod left) and nodes.
async fn remove_tenants(bench: &Bench, tenants: &[BenchTenant]) {
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    for t in tenants {
        let pods: Api<Pod> = Api::namespaced(bench.client.clone(), &t.namespace);
        let _ = pods.delete_collection(&now, &ListParams::default()).await;
        let _ = Api::<ZunTenant>::all(bench.client.clone())
            .delete(&t.name, &DeleteParams::default())
            .await;
        let _ = Api::<Node>::all(bench.client.clone())
            .delete(&t.name, &DeleteParams::default())
            .await;
        let _ = Api::<Namespace>::all(bench.client.clone())
            .delete(&t.namespace, &DeleteParams::default())
            .await;
    }
}

/// Pods of the run in every tenant namespace, created 8 at a time; when each was sent.
async fn create_spread(
    bench: &Bench,
    tenants: &[BenchTenant],
    count: u32,
    prefix: &str,
) -> anyhow::Result<BTreeMap<String, Instant>> {
    let mut sent = BTreeMap::new();
    for (i, t) in tenants.iter().enumerate() {
        let share: Vec<Pod> = (0..count)
            .filter(|n| *n as usize % tenants.len() == i)
            .map(|n| pod_manifest(&bench.run, t, &format!("{prefix}-{n:04}")))
            .collect::<anyhow::Result<_>>()?;
        let pods: Api<Pod> = Api::namespaced(bench.client.clone(), &t.namespace);
        sent.extend(vk::create_pods(&pods, share).await?);
    }
    Ok(sent)
}

/// Waits until every pod of `sent` runs, across the tenants' namespaces.
async fn wait_spread(
    bench: &Bench,
    sent: &BTreeMap<String, Instant>,
    timeout: Duration,
    poll: Duration,
) -> anyhow::Result<(BTreeMap<String, f64>, Vec<String>)> {
    let all: Api<Pod> = Api::all(bench.client.clone());
    vk::wait_running(&all, &bench.run, sent, timeout, poll).await
}

/// Deletes the run's pods in every tenant namespace and waits until none is left.
async fn delete_spread(
    bench: &Bench,
    tenants: &[BenchTenant],
    timeout: Duration,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    let lp = ListParams::default().labels(&format!("{RUN_LABEL}={}", bench.run));
    for t in tenants {
        let pods: Api<Pod> = Api::namespaced(bench.client.clone(), &t.namespace);
        pods.delete_collection(&DeleteParams::default(), &lp)
            .await
            .with_context(|| format!("deleting the pods of {}", t.namespace))?;
    }
    let all: Api<Pod> = Api::all(bench.client.clone());
    vk::wait_gone(&all, &bench.run, timeout).await?;
    Ok(started.elapsed().as_secs_f64())
}

async fn real_body(
    bench: &Bench,
    process: &Process,
    tenants: &[BenchTenant],
    opts: &VkOptions,
    r: &mut TenantsRun,
) -> anyhow::Result<()> {
    let pid = process.pid()?;
    for t in tenants {
        vk::node_ready(bench, &t.name, Duration::from_secs(120))
            .await
            .with_context(|| process.tail(30))?;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    r.memory_idle = Memory::of(pid)?;
    let timeout = Duration::from_secs(120) + opts.per_pod * opts.pods;
    let counter = Counter::Log;

    eprintln!(
        "bench: vk tenants: creating {} pods over {} tenants",
        opts.pods,
        tenants.len()
    );
    let window = Window::open(&counter, &process.log).await?;
    let started = Instant::now();
    let sent = create_spread(bench, tenants, opts.pods, "pod").await?;
    let (running, failed) = wait_spread(bench, &sent, timeout, Duration::from_millis(500)).await?;
    r.start_s = started.elapsed().as_secs_f64();
    r.start_calls = window.close(&counter).await?;
    r.failed_pods = failed;
    let running_s: Vec<f64> = running.values().copied().collect();
    r.running_median_s = stats::median(&running_s).unwrap_or(f64::NAN);
    r.running_p99_s = stats::percentile(&running_s, 99.0).unwrap_or(f64::NAN);
    r.start_pods_per_minute = running.len() as f64 / r.start_s * 60.0;
    eprintln!(
        "bench: vk tenants: {} Running in {:.1} s; steady state for {} s",
        running.len(),
        r.start_s,
        opts.steady.as_secs()
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    r.memory_running = Memory::of(pid)?;

    let window = Window::open(&counter, &process.log).await?;
    tokio::time::sleep(opts.steady).await;
    r.steady_calls = window.close(&counter).await?;

    eprintln!("bench: vk tenants: deleting the pods");
    let window = Window::open(&counter, &process.log).await?;
    r.delete_s = delete_spread(bench, tenants, timeout).await?;
    r.delete_calls = window.close(&counter).await?;
    r.delete_pods_per_minute = f64::from(opts.pods) / r.delete_s * 60.0;
    tokio::time::sleep(Duration::from_secs(5)).await;
    r.memory_after_delete = Memory::of(pid)?;
    Ok(())
}

/// The binary in `--tenants` mode against real Zun and Neutron. `None` (and problems) when it
/// could not run.
pub async fn real(
    bench: &Bench,
    opts: &VkOptions,
    count: usize,
    token: &CancellationToken,
    problems: &mut Vec<String>,
) -> Option<TenantsRun> {
    let tenants = match make_tenants(bench, count).await {
        Ok(t) => t,
        Err(e) => {
            problems.push(format!("vk tenants: {e:#}"));
            return None;
        }
    };
    let poll = opts.poll_interval_s.to_string();
    let mut process = match Process::start(bench, &["--poll-interval-seconds", &poll]) {
        Ok(p) => p,
        Err(e) => {
            problems.push(format!("vk tenants: {e:#}"));
            remove_tenants(bench, &tenants).await;
            return None;
        }
    };
    eprintln!(
        "bench: vk tenants: {} nodes in pid {} (log {})",
        tenants.len(),
        process.pid().unwrap_or_default(),
        process.log.display()
    );
    let mut r = TenantsRun {
        nodes: tenants.iter().map(|t| t.name.clone()).collect(),
        clouds: tenants.iter().map(|t| t.cloud.clone()).collect(),
        pods: opts.pods,
        poll_interval_s: opts.poll_interval_s,
        ..Default::default()
    };
    let ok = vk::settle(
        "vk tenants",
        real_body(bench, &process, &tenants, opts, &mut r),
        token,
        problems,
        || Some(process.tail(20)),
    )
    .await;
    if !ok {
        remove_tenants(bench, &tenants).await;
    }
    if let Err(e) = process.stop().await {
        problems.push(format!("vk tenants: {e:#}"));
    }
    remove_tenants(bench, &tenants).await;
    for t in &tenants {
        let Some(z) = e2e::ZunTenant::from_env().map(|mut z| {
            z.cloud = t.cloud.clone();
            z
        }) else {
            continue;
        };
        problems.extend(vk::sweep_containers(&z, &t.name, ok).await);
    }
    ok.then_some(r)
}

/// The in-memory run: this executable with `--fake-zun-tenants`.
pub async fn fake(
    bench: &Bench,
    opts: &VkOptions,
    count: usize,
    token: &CancellationToken,
    problems: &mut Vec<String>,
) -> Option<FakeTenantsRun> {
    let tenants: Vec<BenchTenant> = (0..count)
        .map(|i| BenchTenant {
            name: format!("bench-{}-ft{i}", bench.run),
            namespace: format!("bench-{}-ft{i}", bench.run),
            network: "fake-net".into(),
            cloud: "fake".into(),
        })
        .collect();
    for t in &tenants {
        if let Err(e) = e2e::k8s::ensure_namespace(&bench.client, &t.namespace).await {
            problems.push(format!("vk fake tenants: {e:#}"));
            return None;
        }
    }
    let dir = e2e::operator::log_dir(&bench.binary);
    let out_path = dir.join(format!("bench-{}-fake-tenants.out", bench.run));
    let spec = tenants
        .iter()
        .map(|t| format!("{}={}", t.name, t.namespace))
        .collect::<Vec<_>>()
        .join(",");
    let child = vk::spawn_fake(
        bench,
        &["--fake-zun-tenants", &spec],
        &dir,
        &out_path,
        opts.poll_interval_s,
    );
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            problems.push(format!("vk fake tenants: {e:#}"));
            remove_tenants(bench, &tenants).await;
            return None;
        }
    };
    let mut f = FakeTenantsRun {
        nodes: tenants.iter().map(|t| t.name.clone()).collect(),
        pods: opts.fake_pods,
        note: "the bench binary's --fake-zun-tenants mode: one vk_runtime node per tenant, each \
               with its own vk_zun::ZunProvider (tenant admission, a Neutron port per pod) on \
               openstack::fake::FakeZun and FakePorts, in one process; no kubelet API, no log output"
            .into(),
        ..Default::default()
    };
    let body = async {
        let pid = child.id();
        for t in &tenants {
            vk::node_ready(bench, &t.name, Duration::from_secs(120)).await?;
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        f.memory_idle = Memory::of(pid)?;
        let timeout = Duration::from_secs(120) + Duration::from_millis(200) * opts.fake_pods;
        let started = Instant::now();
        let sent = create_spread(bench, &tenants, opts.fake_pods, "fake").await?;
        let (_, failed) = wait_spread(bench, &sent, timeout, Duration::from_secs(1)).await?;
        anyhow::ensure!(failed.is_empty(), "pods failed: {}", failed.join("; "));
        f.start_s = started.elapsed().as_secs_f64();
        tokio::time::sleep(Duration::from_secs(5)).await;
        f.memory_running = Memory::of(pid)?;
        f.delete_s = delete_spread(bench, &tenants, timeout).await?;
        tokio::time::sleep(Duration::from_secs(5)).await;
        f.memory_after_delete = Memory::of(pid)?;
        anyhow::Ok(())
    };
    let ok = vk::settle("vk fake tenants", body, token, problems, || None).await;
    if let Err(e) = vk::stop_child(&mut child).await {
        problems.push(format!("vk fake tenants: {e:#}"));
    }
    remove_tenants(bench, &tenants).await;
    match vk::read_fake_calls(&out_path) {
        Ok(calls) => f.calls = calls,
        Err(e) => problems.push(format!("vk fake tenants: {e:#}")),
    }
    ok.then_some(f)
}
