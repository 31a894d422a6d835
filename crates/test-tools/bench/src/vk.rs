//! `--only vk`: the Zun virtual kubelet (`openstack-operator virtual-kubelet`) under load.
//!
//! Real run: the binary as the test cloud's Zun tenant; reaction time (pods one at a time on
//! an idle node), then N busybox `sleep` pods created, Running, left alone for a steady-state
//! window, and deleted. Zun calls are the node's own counters
//! (`openstack_operator_openstack_api_calls_total{service="container"}` on its kubelet API's
//! `/metrics`; the emulator is told to authenticate the bench's token), else its request log;
//! memory is `/proc/<pid>/status`. Fake run: the same runtime and provider on the in-memory
//! Zun (`--fake-zun-node`), for 1,000 pods.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use e2e::metrics::{API_CALLS, Metrics};
use e2e::wait::{Check, wait_for};
use e2e::{VirtualKubelet, ZunTenant};
use futures::StreamExt as _;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt as _};
use openstack::container::Container as _;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::machine::Memory;
use crate::manifests::RUN_LABEL;
use crate::oplog::{self, LogCursor, OsRequest};
use crate::stats;
use crate::vk_report::{Calls, FakeRun, RealRun, VkReaction};
use crate::world::Bench;

/// Options of the measurement.
#[derive(Clone, Debug)]
pub struct VkOptions {
    /// Pods of the real run (0 skips it).
    pub pods: u32,
    /// Pods of the fake run (0 skips it).
    pub fake_pods: u32,
    /// Reaction samples (pods created one at a time).
    pub reaction_samples: usize,
    /// Length of the steady-state window.
    pub steady: Duration,
    /// Time allowed per pod (on top of two minutes) to start or delete them all.
    pub per_pod: Duration,
    /// The node's `--poll-interval-seconds`.
    pub poll_interval_s: u64,
}

/// The ownership label every Zun container of a node carries.
const NODE_LABEL: &str = "virtual-kubelet.sunet.se/node";
const POD_NAME_LABEL: &str = "virtual-kubelet.sunet.se/pod-name";
/// The Zun service's label in the client metrics.
const ZUN_SERVICE: &str = "container";

fn pod_manifest(run: &str, ns: &str, node: &str, name: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "labels": {RUN_LABEL: run}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 10,
            "tolerations": [{"key": "virtual-kubelet.io/provider", "operator": "Equal",
                             "value": "openstack", "effect": "NoSchedule"}],
            "containers": [{
                "name": "sleep", "image": "busybox",
                // `sleep` as PID 1 ignores SIGTERM; the trap makes a graceful stop prompt.
                "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
                "resources": {"limits": {"cpu": "100m", "memory": "32Mi"}}
            }]
        }
    }))?)
}

fn ms_since(t0: Timestamp, t: Timestamp) -> f64 {
    (t - t0).total(jiff::Unit::Millisecond).unwrap_or(f64::NAN)
}

/// Where the node's Zun calls are read.
pub(crate) enum Counter {
    /// `/metrics` of its kubelet API, with a bearer token the emulator accepts.
    Metrics {
        http: reqwest::Client,
        url: String,
        token: String,
    },
    /// The request log lines (every attempt; a retried call counts more than once).
    Log,
}

impl Counter {
    fn name(&self) -> &'static str {
        match self {
            Counter::Metrics { .. } => "metrics (/metrics of its kubelet API)",
            Counter::Log => "request log (no token for /metrics on this cluster)",
        }
    }

    async fn scrape(&self) -> anyhow::Result<Option<BTreeMap<String, f64>>> {
        let Counter::Metrics { http, url, token } = self else {
            return Ok(None);
        };
        let text = http
            .get(url)
            .bearer_auth(token)
            .send()
            .await
            .with_context(|| format!("GET {url}"))?
            .error_for_status()
            .with_context(|| format!("GET {url}"))?
            .text()
            .await?;
        let m = Metrics::parse(&text);
        let mut out = BTreeMap::new();
        for s in m.samples.iter().filter(|s| s.name == API_CALLS) {
            if s.labels.get("service").map(String::as_str) == Some(ZUN_SERVICE) {
                let op = s.labels.get("operation").cloned().unwrap_or_default();
                *out.entry(op).or_insert(0.0) += s.value;
            }
        }
        Ok(Some(out))
    }
}

/// A window over the node's calls: a scrape and a log position at its start.
pub(crate) struct Window {
    started: Instant,
    before: Option<BTreeMap<String, f64>>,
    cursor: LogCursor,
}

impl Window {
    pub(crate) async fn open(counter: &Counter, log: &Path) -> anyhow::Result<Self> {
        Ok(Window {
            cursor: LogCursor::at_end(log)?,
            before: counter.scrape().await?,
            started: Instant::now(),
        })
    }

    pub(crate) async fn close(mut self, counter: &Counter) -> anyhow::Result<Calls> {
        let seconds = self.started.elapsed().as_secs_f64();
        let after = counter.scrape().await?;
        let reqs = oplog::parse(&self.cursor.read_new()?);
        let http_requests = oplog::count_by_request(&reqs);
        let mut by_service: BTreeMap<String, u64> = BTreeMap::new();
        for r in &reqs {
            *by_service.entry(r.service.clone()).or_default() += 1;
        }
        let mut attempts: BTreeMap<String, f64> = BTreeMap::new();
        for r in &reqs {
            *attempts.entry(r.operation.clone()).or_default() += 1.0;
        }
        let by_operation = match (self.before, after) {
            (Some(b), Some(a)) => e2e::metrics::delta(&b, &a),
            _ => attempts.clone(),
        };
        let total = by_operation.values().sum();
        let retried = attempts.values().sum::<f64>() - total;
        Ok(Calls {
            seconds,
            by_operation,
            total,
            http_requests,
            by_service,
            retried_requests: retried.max(0.0) as u64,
        })
    }
}

/// Waits until node `name` is Ready.
pub(crate) async fn node_ready(bench: &Bench, name: &str, timeout: Duration) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(bench.client.clone());
    wait_for(
        timeout,
        Duration::from_millis(250),
        &format!("node {name} to be Ready"),
        async || {
            let n = nodes.get_opt(name).await?;
            let ready = n
                .as_ref()
                .and_then(|n| n.status.as_ref()?.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                .map(|c| c.status == "True")
                .unwrap_or(false);
            Ok(if ready {
                Check::Done(())
            } else {
                Check::Pending("not Ready".into())
            })
        },
    )
    .await
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// Creates the pods (8 at a time) and returns when each was sent.
pub(crate) async fn create_pods(
    pods: &Api<Pod>,
    manifests: Vec<Pod>,
) -> anyhow::Result<BTreeMap<String, Instant>> {
    let sent: Vec<anyhow::Result<(String, Instant)>> = futures::stream::iter(manifests)
        .map(|p| async move {
            let name = p.name_any();
            let at = Instant::now();
            pods.create(&PostParams::default(), &p)
                .await
                .with_context(|| format!("creating pod {name}"))?;
            Ok((name, at))
        })
        .buffer_unordered(8)
        .collect()
        .await;
    sent.into_iter().collect()
}

/// Polls until every pod of `sent` is Running (or Failed); returns, per pod, seconds from its
/// send until seen Running, and the failed ones with their reason.
pub(crate) async fn wait_running(
    pods: &Api<Pod>,
    run: &str,
    sent: &BTreeMap<String, Instant>,
    timeout: Duration,
    poll: Duration,
) -> anyhow::Result<(BTreeMap<String, f64>, Vec<String>)> {
    let mut seen: BTreeMap<String, f64> = BTreeMap::new();
    let mut failed: BTreeMap<String, String> = BTreeMap::new();
    let lp = ListParams::default().labels(&format!("{RUN_LABEL}={run}"));
    wait_for(timeout, poll, "the pods to be Running", async || {
        let now = Instant::now();
        for p in pods.list(&lp).await?.items {
            let name = p.name_any();
            let Some(at) = sent.get(&name) else { continue };
            match phase(&p) {
                "Running" => {
                    seen.entry(name)
                        .or_insert_with(|| now.duration_since(*at).as_secs_f64());
                }
                "Failed" | "Succeeded" => {
                    let s = p.status.clone().unwrap_or_default();
                    failed.entry(name).or_insert_with(|| {
                        format!(
                            "{}: {}",
                            s.reason.unwrap_or_default(),
                            s.message.unwrap_or_default()
                        )
                    });
                }
                _ => {}
            }
        }
        let done = seen.len() + failed.len();
        Ok(if done >= sent.len() {
            Check::Done(())
        } else {
            Check::Pending(format!(
                "{} of {} Running, {} failed",
                seen.len(),
                sent.len(),
                failed.len()
            ))
        })
    })
    .await?;
    Ok((
        seen,
        failed
            .into_iter()
            .map(|(n, why)| format!("{n}: {why}"))
            .collect(),
    ))
}

/// Deletes the run's pods (graceful) and waits until none is left; returns the seconds.
async fn delete_pods(pods: &Api<Pod>, run: &str, timeout: Duration) -> anyhow::Result<f64> {
    let started = Instant::now();
    let lp = ListParams::default().labels(&format!("{RUN_LABEL}={run}"));
    pods.delete_collection(&DeleteParams::default(), &lp)
        .await
        .context("deleting the pods")?;
    wait_gone(pods, run, timeout).await?;
    Ok(started.elapsed().as_secs_f64())
}

/// Waits until `pods` (a namespace's, or all) holds no pod of the run.
pub(crate) async fn wait_gone(pods: &Api<Pod>, run: &str, timeout: Duration) -> anyhow::Result<()> {
    let lp = ListParams::default().labels(&format!("{RUN_LABEL}={run}"));
    wait_for(
        timeout,
        Duration::from_millis(500),
        "the pods to be gone",
        async || {
            let left = pods.list(&lp).await?.items.len();
            Ok(if left == 0 {
                Check::Done(())
            } else {
                Check::Pending(format!("{left} left"))
            })
        },
    )
    .await
}

/// Removes the run's pods at once (no node involved) and the node object.
async fn force_cleanup(bench: &Bench, node: &str) {
    let pods: Api<Pod> = Api::namespaced(bench.client.clone(), &bench.namespace);
    let lp = ListParams::default().labels(&format!("{RUN_LABEL}={}", bench.run));
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    let _ = pods.delete_collection(&now, &lp).await;
    let _ = Api::<Node>::all(bench.client.clone())
        .delete(node, &DeleteParams::default())
        .await;
}

/// The first request sent at or after `t0` matching `pick`, reading the log as it grows.
async fn first_request(
    cursor: &mut LogCursor,
    seen: &mut Vec<OsRequest>,
    t0: Timestamp,
    what: &str,
    pick: impl Fn(&OsRequest) -> bool,
) -> anyhow::Result<OsRequest> {
    wait_for(
        Duration::from_secs(120),
        Duration::from_millis(50),
        what,
        async || {
            seen.extend(oplog::parse(&cursor.read_new()?));
            Ok(
                match seen
                    .iter()
                    .filter(|r| r.sent_at() >= t0 && pick(r))
                    .min_by_key(|r| r.sent_at())
                {
                    Some(r) => Check::Done(r.clone()),
                    None => Check::Pending(format!("{} request lines so far", seen.len())),
                },
            )
        },
    )
    .await
}

async fn reaction(
    bench: &Bench,
    vk: &VirtualKubelet,
    zun: &dyn openstack::container::Container,
    node: &str,
    samples: usize,
) -> anyhow::Result<VkReaction> {
    let pods: Api<Pod> = Api::namespaced(bench.client.clone(), &bench.namespace);
    let mut out = VkReaction {
        samples,
        ..Default::default()
    };
    for i in 0..samples {
        let name = format!("react-{i:03}");
        let manifest = pod_manifest(&bench.run, &bench.namespace, node, &name)?;
        let mut cursor = LogCursor::at_end(vk.log_path())?;
        let mut seen = Vec::new();
        let t0 = Timestamp::now();
        let sent = Instant::now();
        pods.create(&PostParams::default(), &manifest)
            .await
            .with_context(|| format!("creating pod {name}"))?;
        let create = first_request(
            &mut cursor,
            &mut seen,
            t0,
            &format!("the create_container request of pod {name} in the node's log"),
            |r| r.operation == "create_container" && r.object.as_deref() == Some(name.as_str()),
        )
        .await?;
        let first = seen
            .iter()
            .filter(|r| r.sent_at() >= t0)
            .map(OsRequest::sent_at)
            .min()
            .unwrap_or(create.sent_at());
        out.first_create_ms.push(ms_since(t0, create.sent_at()));
        out.first_request_ms.push(ms_since(t0, first));
        // When Zun first lists the container Running, and when the pod is seen Running.
        let (zun_at, pod_at) = zun_then_pod_running(&pods, zun, node, &name)
            .await
            .with_context(|| vk.log_tail(20))?;
        out.running_after_zun_ms
            .push(pod_at.saturating_duration_since(zun_at).as_secs_f64() * 1000.0);
        // Running before the next pod, so each pod finds the node idle.
        let one = BTreeMap::from([(name.clone(), sent)]);
        let (running, failed) = wait_running(
            &pods,
            &bench.run,
            &one,
            Duration::from_secs(180),
            Duration::from_millis(250),
        )
        .await?;
        anyhow::ensure!(
            failed.is_empty(),
            "reaction pod failed: {}",
            failed.join("; ")
        );
        if let Some(s) = running.get(&name) {
            out.running_ms.push(s * 1000.0);
        }
    }
    out.first_create_median_ms = stats::median(&out.first_create_ms).unwrap_or(f64::NAN);
    out.first_create_p99_ms = stats::percentile(&out.first_create_ms, 99.0).unwrap_or(f64::NAN);
    out.first_request_median_ms = stats::median(&out.first_request_ms).unwrap_or(f64::NAN);
    out.running_median_ms = stats::median(&out.running_ms).unwrap_or(f64::NAN);
    out.running_after_zun_median_ms = stats::median(&out.running_after_zun_ms).unwrap_or(f64::NAN);
    out.running_after_zun_p99_ms =
        stats::percentile(&out.running_after_zun_ms, 99.0).unwrap_or(f64::NAN);
    Ok(out)
}

/// Polls Zun's list (the pod's container by its node and pod-name labels) and the pod, every
/// 100 ms each, until both show it running: when Zun first listed it `Running`, and when the
/// pod was first seen `Running` (at or after that).
async fn zun_then_pod_running(
    pods: &Api<Pod>,
    zun: &dyn openstack::container::Container,
    node: &str,
    name: &str,
) -> anyhow::Result<(Instant, Instant)> {
    let labels = BTreeMap::from([
        (NODE_LABEL.to_string(), node.to_string()),
        (POD_NAME_LABEL.to_string(), name.to_string()),
    ]);
    let deadline = Instant::now() + Duration::from_secs(180);
    let (mut zun_at, mut pod_at) = (None, None);
    while Instant::now() < deadline {
        let (listed, pod) = tokio::join!(zun.list_containers(&labels, None), pods.get(name));
        let now = Instant::now();
        if zun_at.is_none()
            && listed
                .context("listing the pod's Zun container")?
                .iter()
                .any(|c| c.status == openstack::container::status::RUNNING)
        {
            zun_at = Some(now);
        }
        if pod_at.is_none()
            && phase(&pod.with_context(|| format!("reading pod {name}"))?) == "Running"
        {
            pod_at = Some(now);
        }
        if let (Some(z), Some(p)) = (zun_at, pod_at) {
            // Seen in the same poll: the pod was no later than Zun's list.
            return Ok((z, p.max(z)));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("pod {name}: Zun Running {zun_at:?}, pod Running {pod_at:?} after 180 s")
}

/// The real run; its figures are written into `r` as they are measured.
async fn real_body(
    bench: &Bench,
    vk: &VirtualKubelet,
    tenant: &ZunTenant,
    counter: &Counter,
    opts: &VkOptions,
    r: &mut RealRun,
) -> anyhow::Result<()> {
    let pid = vk.pid().context("the node is not running")?;
    node_ready(bench, &r.node, Duration::from_secs(120))
        .await
        .with_context(|| vk.log_tail(30))?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    r.memory_idle = Memory::of(pid)?;
    let pods: Api<Pod> = Api::namespaced(bench.client.clone(), &bench.namespace);
    let timeout = Duration::from_secs(120) + opts.per_pod * opts.pods;

    if opts.reaction_samples > 0 {
        eprintln!(
            "bench: vk: reaction, {} pods one at a time",
            opts.reaction_samples
        );
        let zun = tenant
            .client()
            .await
            .context("a Zun client for the bench")?;
        r.reaction = reaction(bench, vk, &zun, &r.node, opts.reaction_samples).await?;
        delete_pods(&pods, &bench.run, timeout).await?;
    }

    eprintln!("bench: vk: creating {} pods", opts.pods);
    let manifests = (0..opts.pods)
        .map(|i| {
            pod_manifest(
                &bench.run,
                &bench.namespace,
                &r.node,
                &format!("pod-{i:04}"),
            )
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let window = Window::open(counter, vk.log_path()).await?;
    let started = Instant::now();
    let sent = create_pods(&pods, manifests).await?;
    let (running, failed) = wait_running(
        &pods,
        &bench.run,
        &sent,
        timeout,
        Duration::from_millis(500),
    )
    .await?;
    r.start_s = started.elapsed().as_secs_f64();
    r.start_calls = window.close(counter).await?;
    r.failed_pods = failed;
    r.running_s = running.values().copied().collect();
    r.running_median_s = stats::median(&r.running_s).unwrap_or(f64::NAN);
    r.running_p99_s = stats::percentile(&r.running_s, 99.0).unwrap_or(f64::NAN);
    r.start_pods_per_minute = running.len() as f64 / r.start_s * 60.0;
    eprintln!(
        "bench: vk: {} Running in {:.1} s; steady state for {} s",
        running.len(),
        r.start_s,
        opts.steady.as_secs()
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    r.memory_running = Memory::of(pid)?;

    let window = Window::open(counter, vk.log_path()).await?;
    tokio::time::sleep(opts.steady).await;
    r.steady_calls = window.close(counter).await?;
    let minutes = r.steady_calls.seconds / 60.0;
    r.steady_per_minute = r.steady_calls.total / minutes;
    r.steady_per_pod_per_minute = r.steady_per_minute / f64::from(opts.pods.max(1));

    eprintln!("bench: vk: deleting the pods");
    let window = Window::open(counter, vk.log_path()).await?;
    r.delete_s = delete_pods(&pods, &bench.run, timeout).await?;
    r.delete_calls = window.close(counter).await?;
    r.delete_pods_per_minute = f64::from(opts.pods) / r.delete_s * 60.0;
    tokio::time::sleep(Duration::from_secs(5)).await;
    r.memory_after_delete = Memory::of(pid)?;
    Ok(())
}

/// Runs a measurement's body until it ends or `token` is cancelled; `true` when it succeeded,
/// else its error (with `tail`, e.g. the node's log, when there is one) or the interruption
/// goes into `problems` under `what`.
pub(crate) async fn settle(
    what: &str,
    body: impl std::future::Future<Output = anyhow::Result<()>>,
    token: &CancellationToken,
    problems: &mut Vec<String>,
    tail: impl FnOnce() -> Option<String>,
) -> bool {
    let outcome = tokio::select! {
        o = body => Some(o),
        _ = token.cancelled() => None,
    };
    match outcome {
        Some(Ok(())) => true,
        Some(Err(e)) => {
            problems.push(match tail() {
                Some(t) => format!("{what}: {e:#}\nlog tail:\n{t}"),
                None => format!("{what}: {e:#}"),
            });
            false
        }
        None => {
            problems.push(format!("{what}: interrupted"));
            false
        }
    }
}

/// The binary against real Zun. `None` (and problems) when it could not run.
pub async fn real(
    bench: &Bench,
    binary: &Path,
    opts: &VkOptions,
    token: &CancellationToken,
    problems: &mut Vec<String>,
) -> Option<RealRun> {
    let Some(tenant) = ZunTenant::from_env() else {
        problems.push(
            "vk: no Zun in this cloud (ZUN_TENANT_CLOUD unset: eval \"$(scripts/test-cloud env)\")"
                .into(),
        );
        return None;
    };
    let node = format!("bench-{}-vk", bench.run);
    let poll = opts.poll_interval_s.to_string();
    let started = VirtualKubelet::start(
        binary,
        &bench.target,
        &tenant,
        &node,
        &format!("bench-{}-vk", bench.run),
        &[
            "--poll-interval-seconds",
            &poll,
            "--log-format",
            "json",
            "--log-level",
            oplog::DEBUG_ADAPTER_FILTER,
        ],
    );
    let mut vk = match started {
        Ok(v) => v,
        Err(e) => {
            problems.push(format!("vk: {e:#}"));
            return None;
        }
    };
    eprintln!(
        "bench: vk: node {node} pid {} (log {})",
        vk.pid().unwrap_or_default(),
        vk.log_path().display()
    );
    let counter = match metrics_counter(bench, vk.kubelet_port()) {
        Ok(c) => c,
        Err(e) => {
            problems.push(format!("vk: {e:#}"));
            Counter::Log
        }
    };
    let mut r = RealRun {
        node: node.clone(),
        pods: opts.pods,
        poll_interval_s: opts.poll_interval_s,
        counted_from: counter.name().into(),
        ..Default::default()
    };
    let ok = settle(
        "vk",
        real_body(bench, &vk, &tenant, &counter, opts, &mut r),
        token,
        problems,
        || Some(vk.log_tail(20)),
    )
    .await;
    if !ok {
        force_cleanup(bench, &node).await;
    }
    match vk.terminate(Duration::from_secs(60)).await {
        Ok(s) if s.success() => {}
        Ok(s) => problems.push(format!("vk: the node exited with {s}")),
        Err(e) => problems.push(format!("vk: stopping the node: {e:#}")),
    }
    let _ = Api::<Node>::all(bench.client.clone())
        .delete(&node, &DeleteParams::default())
        .await;
    problems.extend(sweep_containers(&tenant, &node, ok).await);
    ok.then_some(r)
}

/// Deletes Zun containers the node left (after a clean run there are none: each is reported).
pub(crate) async fn sweep_containers(tenant: &ZunTenant, node: &str, clean: bool) -> Vec<String> {
    let mut problems = Vec::new();
    let zun = match tenant.client().await {
        Ok(z) => z,
        Err(e) => return vec![format!("vk: checking Zun for leftovers: {e:#}")],
    };
    let ours = BTreeMap::from([(NODE_LABEL.to_string(), node.to_string())]);
    match zun.list_containers(&ours, None).await {
        Ok(left) => {
            let live: Vec<_> = left
                .iter()
                .filter(|c| c.status != openstack::container::status::DELETING)
                .collect();
            if clean && !live.is_empty() {
                problems.push(format!(
                    "vk: {} Zun container(s) of node {node} left after its pods were deleted",
                    live.len()
                ));
            }
            for c in live {
                if let Err(e) = zun.delete_container(&c.uuid, true, true).await {
                    problems.push(format!("vk: deleting Zun container {}: {e}", c.uuid));
                }
            }
        }
        Err(e) => problems.push(format!("vk: listing Zun containers of node {node}: {e}")),
    }
    problems
}

/// Tells the emulator to authenticate a token of the bench's as a cluster admin, so the
/// node's `/metrics` (behind TokenReview and SubjectAccessReview) can be read; on a real
/// cluster the calls are counted from the log instead.
fn metrics_counter(bench: &Bench, port: u16) -> anyhow::Result<Counter> {
    let Some(emu) = bench.target.emulator() else {
        return Ok(Counter::Log);
    };
    let token = format!("bench-{}-metrics", bench.run);
    emu.set_auth(kube_emulator::review::AuthConfig {
        tokens: BTreeMap::from([(
            token.clone(),
            kube_emulator::review::ReviewUser {
                username: "openstack-operator-bench".into(),
                uid: String::new(),
                groups: vec!["system:masters".into()],
            },
        )]),
        rules: Vec::new(),
    });
    let http = reqwest::Client::builder()
        // The node's self-signed serving certificate (no --tls-cert-file).
        .tls_danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(30))
        .build()
        .context("building the metrics client")?;
    Ok(Counter::Metrics {
        http,
        url: format!("https://127.0.0.1:{port}/metrics"),
        token,
    })
}

/// The in-memory Zun run: this executable with `--fake-zun-node`.
pub async fn fake(
    bench: &Bench,
    opts: &VkOptions,
    token: &CancellationToken,
    problems: &mut Vec<String>,
) -> Option<FakeRun> {
    let node = format!("bench-{}-fake", bench.run);
    let dir = e2e::operator::log_dir(&bench.binary);
    let out_path = dir.join(format!("bench-{}-fake.out", bench.run));
    let child = spawn_fake(
        bench,
        &["--fake-zun-node", &node],
        &dir,
        &out_path,
        opts.poll_interval_s,
    );
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            problems.push(format!("vk fake: {e:#}"));
            return None;
        }
    };
    let mut f = FakeRun {
        node: node.clone(),
        pods: opts.fake_pods,
        note: "the bench binary's --fake-zun-node mode: vk_runtime + vk_zun::ZunProvider as the \
               binary runs them, on openstack::fake::FakeZun instead of the HTTP client; no kubelet API, no log output"
            .into(),
        ..Default::default()
    };
    eprintln!(
        "bench: vk fake: node {node} pid {}, {} pods",
        child.id(),
        opts.fake_pods
    );
    let ok = settle(
        "vk fake",
        fake_body(bench, child.id(), opts, &mut f),
        token,
        problems,
        || None,
    )
    .await;
    if !ok {
        force_cleanup(bench, &node).await;
    }
    if let Err(e) = stop_child(&mut child).await {
        problems.push(format!("vk fake: {e:#}"));
    }
    match read_fake_calls(&out_path) {
        Ok(calls) => f.zun_calls = calls,
        Err(e) => problems.push(format!("vk fake: {e:#}")),
    }
    ok.then_some(f)
}

pub(crate) fn spawn_fake(
    bench: &Bench,
    mode: &[&str],
    dir: &Path,
    out_path: &Path,
    poll_interval_s: u64,
) -> anyhow::Result<std::process::Child> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let out = std::fs::File::create(out_path)
        .with_context(|| format!("creating {}", out_path.display()))?;
    let me = std::env::current_exe().context("locating this executable")?;
    std::process::Command::new(me)
        .args(mode)
        .args(["--vk-poll-interval-seconds", &poll_interval_s.to_string()])
        .env("KUBECONFIG", bench.target.kubeconfig())
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .spawn()
        .context("starting the fake-Zun node")
}

pub(crate) async fn stop_child(child: &mut std::process::Child) -> anyhow::Result<()> {
    let pid = libc::pid_t::try_from(child.id()).context("process id out of range")?;
    // SAFETY: signalling our own child, not yet reaped.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(st) = child.try_wait()? {
            anyhow::ensure!(st.success(), "the fake-Zun node exited with {st}");
            return Ok(());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("the fake-Zun node did not exit within 60 s of SIGTERM");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) fn read_fake_calls(path: &Path) -> anyhow::Result<BTreeMap<String, u64>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .with_context(|| format!("{} has no call counters", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(line)?;
    let calls = serde_json::from_value(v["calls"].clone())?;
    Ok(calls)
}

async fn fake_body(
    bench: &Bench,
    pid: u32,
    opts: &VkOptions,
    f: &mut FakeRun,
) -> anyhow::Result<()> {
    node_ready(bench, &f.node, Duration::from_secs(120)).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    f.memory_idle = Memory::of(pid)?;
    let pods: Api<Pod> = Api::namespaced(bench.client.clone(), &bench.namespace);
    let manifests = (0..opts.fake_pods)
        .map(|i| {
            pod_manifest(
                &bench.run,
                &bench.namespace,
                &f.node,
                &format!("fake-{i:04}"),
            )
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    // The in-memory Zun answers at once: the time is the node's and the API server's.
    let timeout = Duration::from_secs(120) + Duration::from_millis(200) * opts.fake_pods;
    let started = Instant::now();
    let sent = create_pods(&pods, manifests).await?;
    let (_, failed) =
        wait_running(&pods, &bench.run, &sent, timeout, Duration::from_secs(1)).await?;
    anyhow::ensure!(failed.is_empty(), "pods failed: {}", failed.join("; "));
    f.start_s = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(5)).await;
    f.memory_running = Memory::of(pid)?;
    f.delete_s = delete_pods(&pods, &bench.run, timeout).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    f.memory_after_delete = Memory::of(pid)?;
    Ok(())
}
