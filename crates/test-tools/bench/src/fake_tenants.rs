//! `--only tenants`: memory of the operator's controllers at N full tenants (issue 15: ≤ 60
//! MiB at 1,000), on the in-memory OpenStack (`--fake-cloud-operator`, see
//! [`crate::fake_cloud`]), since the test cloud cannot hold 1,000 tenants (241 external
//! addresses for 2,000 router gateways; ~10 requests/s would take hours).
//!
//! Zero CRs (5 s after ready), N projects applied and all Ready, one forced reconcile of all,
//! all deleted: VmRSS at each point, VmHWM, and the fake's calls per tenant. Nothing is
//! created in the real OpenStack.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use api::{OpenstackDomain, OpenstackProject};
use e2e::k8s;
use e2e::metrics::{Metrics, delta};
use e2e::wait::{Check, wait_for};
use kube::ResourceExt as _;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::fake_cloud;
use crate::machine::Memory;
use crate::manifests;
use crate::report::Steady;
use crate::scenarios::{self, SETTLE, split};
use crate::stats;
use crate::world::{Bench, Watched, settled};

/// What the JSON and the table say about where the figures come from.
pub const NOTE: &str = "the bench binary's --fake-cloud-operator mode: the operator's five \
     controllers (controllers::framework::run / controllers::project::run_controller, as \
     `openstack-operator run` starts them, --concurrency 20, no GC, resync 3600 s) on \
     openstack::fake::FakeCloud instead of the HTTP client: no HTTP, no token, no limiter, so \
     the times measure the operator and the Kubernetes API, not OpenStack; the fake's own \
     state (every tenant's Keystone, Nova, Cinder and Neutron objects) is in the process's \
     RSS, so the memory figures are an upper bound of the operator's; no log output";

/// Added to [`NOTE`] when the fake is paced (`--paced-from`).
pub const PACED_NOTE: &str = "paced (--paced-from): every fake call first takes, per HTTP \
     request the real client would send for it, a permit of the client's own limiter \
     (openstack::adapter::ratelimit, at the run's --max-concurrent-calls and \
     --requests-per-second, burst 5) and holds it for that request's service time measured \
     on the real cloud (the report's first size, its queue left out); the server side has no \
     limit, so this is a cloud with spare capacity and the limiter the only throttle; no \
     token requests";

/// Convergence on the paced fake, against the floor of issue 15.
#[derive(Debug, Default, Serialize)]
pub struct Paced {
    /// The JSON report the service times come from.
    pub source: String,
    /// The size of that report's run they were measured at.
    pub source_projects: u32,
    /// Operations with a measured time (others take one request of `default_ms`).
    pub operations: usize,
    /// The median measured request time, for operations the report lacks, in ms.
    pub default_ms: f64,
    /// HTTP requests modelled while converging (permits taken).
    pub requests: f64,
    /// `requests / tenants`.
    pub requests_per_tenant: f64,
    /// `requests / converge_s`.
    pub achieved_rps: f64,
    /// `requests / --requests-per-second`: the least time at the allowed rate (0 when
    /// unlimited), in seconds.
    pub floor_s: f64,
    /// `converge_s / floor_s`: 1.0 = the whole allowed rate used from start to end.
    pub ratio: f64,
    /// Σ service time / converge_s: requests in flight on average.
    pub mean_in_flight: f64,
    /// Σ of the waits for a limiter permit while converging, in seconds.
    pub limiter_wait_s: f64,
}

/// The measurement's figures.
#[derive(Debug, Default, Serialize)]
pub struct FakeTenantsRun {
    /// Where the figures come from (in-memory cloud).
    pub note: String,
    /// Tenants (full OpenstackProjects, [`manifests::project`]).
    pub tenants: u32,
    /// Ready, zero CRs, 5 s after readiness.
    pub baseline: Memory,
    /// All Ready, counters settled, 5 s later.
    pub converged: Memory,
    /// After one forced reconcile of all, settled, 5 s later.
    pub after_reconcile: Memory,
    /// After deleting all, settled, 5 s later.
    pub after_delete: Memory,
    /// Highest VmRSS sampled (every 200 ms) from the first apply to the end of deletion.
    pub sampled_peak_rss_kib: u64,
    /// VmHWM (lifetime peak) at the end.
    pub peak_hwm_kib: u64,
    /// (converged − baseline) VmRSS / tenants, in KiB.
    pub kib_per_tenant: f64,
    /// From the first apply until all were Ready, in seconds.
    pub converge_s: f64,
    /// Of which applying the N manifests, one after another, in seconds (the operator works
    /// on the first ones meanwhile).
    pub apply_s: f64,
    /// First and median time to Ready of a tenant, in seconds (polled every second).
    pub first_ready_s: f64,
    /// Median time to Ready.
    pub median_ready_s: f64,
    /// Until all were gone, in seconds.
    pub delete_s: f64,
    /// Fake calls by operation while converging.
    pub calls: BTreeMap<String, f64>,
    /// Read calls while converging.
    pub reads: f64,
    /// Write calls while converging.
    pub writes: f64,
    /// One forced reconcile of every converged tenant.
    pub steady: Option<Steady>,
    /// Fake calls by operation while deleting.
    pub delete_calls: BTreeMap<String, f64>,
    /// Every call of the process's life by `service.operation` (from its exit line).
    pub lifetime_calls: BTreeMap<String, u64>,
    /// VmRSS growth of a process holding only the in-memory cloud filled with the same
    /// number of tenants by direct calls (`--fake-cloud-state`): the fake's share, in KiB.
    pub fake_state_kib: Option<u64>,
    /// `converged` VmRSS minus `fake_state_kib`: the operator's estimated share, in KiB.
    pub operator_estimate_kib: Option<u64>,
    /// Convergence against the floor when the fake was paced (`--paced-from`).
    pub paced: Option<Paced>,
    /// What the fake still held at exit (projects, networks, routers, groups; the seeded
    /// external network and admin project not counted).
    pub left: BTreeMap<String, usize>,
}

/// The `--fake-cloud-operator` child process.
struct FakeOperator {
    /// `None` once stopped.
    child: Mutex<Option<Child>>,
    pid: u32,
    addr: SocketAddr,
    http: reqwest::Client,
    out_path: PathBuf,
    err_path: PathBuf,
}

impl FakeOperator {
    /// `service_times`: the paced fake's table (see [`paced_table`]).
    fn spawn(bench: &Bench, service_times: Option<&Path>) -> anyhow::Result<Self> {
        let dir = e2e::operator::log_dir(&bench.binary);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let out_path = dir.join(format!("bench-{}-fake-cloud.out", bench.run));
        let err_path = dir.join(format!("bench-{}-fake-cloud.log", bench.run));
        let out = std::fs::File::create(&out_path)
            .with_context(|| format!("creating {}", out_path.display()))?;
        let err = std::fs::File::create(&err_path)
            .with_context(|| format!("creating {}", err_path.display()))?;
        let addr = e2e::operator::free_local_addr()?;
        let me = std::env::current_exe().context("locating this executable")?;
        let mut cmd = Command::new(me);
        cmd.args(["--fake-cloud-operator", &addr.to_string()])
            .args(["--fake-cloud-namespace", &bench.namespace])
            .args(["--concurrency", &bench.limits.concurrency.to_string()]);
        if let Some(path) = service_times {
            cmd.arg("--fake-cloud-service-times")
                .arg(path)
                .args([
                    "--max-concurrent-calls",
                    &bench.limits.max_concurrent_calls.to_string(),
                ])
                .args([
                    "--requests-per-second",
                    &bench.limits.requests_per_second.to_string(),
                ]);
        }
        let child = cmd
            .env("KUBECONFIG", bench.target.kubeconfig())
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .context("starting the fake-cloud operator")?;
        Ok(FakeOperator {
            pid: child.id(),
            child: Mutex::new(Some(child)),
            addr,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .no_proxy()
                .build()
                .context("building an HTTP client")?,
            out_path,
            err_path,
        })
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    async fn wait_ready(&self, timeout: Duration) -> anyhow::Result<()> {
        wait_for(
            timeout,
            Duration::from_millis(200),
            "the fake-cloud operator to be ready",
            async || {
                if let Some(e) = self.gone() {
                    return Ok(Check::Fail(e));
                }
                Ok(match self.http.get(self.url("/readyz")).send().await {
                    Ok(r) if r.status().is_success() => Check::Done(()),
                    Ok(r) => Check::Pending(format!("/readyz: {}", r.status())),
                    Err(e) => Check::Pending(format!("/readyz: {e}")),
                })
            },
        )
        .await
    }

    /// Creates `users` in the fake's Keystone domain `domain` (which the operator made).
    async fn seed_users(&self, domain: &str, users: &[String]) -> anyhow::Result<()> {
        let url = reqwest::Url::parse_with_params(
            &self.url("/seed-users"),
            &[("domain", domain), ("users", &users.join(","))],
        )
        .context("the seed URL")?;
        let resp = self
            .http
            .post(url)
            .send()
            .await
            .context("seeding the users in the fake")?;
        let status = resp.status();
        let body = resp.text().await.unwrap_or_default();
        anyhow::ensure!(
            status.is_success(),
            "seeding the users in the fake: {status}: {body}"
        );
        Ok(())
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.err_path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// SIGTERM, wait for the exit, read the exit line.
    async fn stop(&self) -> anyhow::Result<(BTreeMap<String, u64>, BTreeMap<String, usize>)> {
        // Taken out, so no lock is held across the wait.
        let taken = self.child.lock().unwrap_or_else(|p| p.into_inner()).take();
        let mut child = taken.context("the fake-cloud operator was already stopped")?;
        crate::vk::stop_child(&mut child).await?;
        let text = std::fs::read_to_string(&self.out_path)
            .with_context(|| format!("reading {}", self.out_path.display()))?;
        let line = text
            .lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .with_context(|| format!("{} has no exit line", self.out_path.display()))?;
        let v: serde_json::Value = serde_json::from_str(line)?;
        Ok((
            serde_json::from_value(v["calls"].clone())?,
            serde_json::from_value(v["left"].clone())?,
        ))
    }
}

impl Watched for FakeOperator {
    fn gone(&self) -> Option<anyhow::Error> {
        let mut guard = self.child.lock().unwrap_or_else(|p| p.into_inner());
        let Some(child) = guard.as_mut() else {
            return Some(anyhow::anyhow!("the fake-cloud operator was stopped"));
        };
        match child.try_wait() {
            Ok(Some(status)) => Some(anyhow::anyhow!(
                "the fake-cloud operator exited ({status}); last lines of {}:\n{}",
                self.err_path.display(),
                self.log_tail()
            )),
            Ok(None) => None,
            Err(e) => Some(e.into()),
        }
    }

    async fn metrics(&self) -> anyhow::Result<Metrics> {
        let text = self
            .http
            .get(self.url("/metrics"))
            .send()
            .await
            .context("scraping the fake-cloud operator")?
            .error_for_status()?
            .text()
            .await?;
        Ok(Metrics::parse(&text))
    }
}

/// The paced fake's table from a bench report: for each `"service.operation"` the first
/// size measured, the service time in ms of each HTTP request one call sends (a method's
/// successful requests ÷ the operation's calls, rounded, at least one); with that size and
/// the median time.
pub fn paced_table(
    report: &serde_json::Value,
) -> anyhow::Result<(BTreeMap<String, Vec<f64>>, u32)> {
    let size = report["convergence"]
        .as_array()
        .and_then(|sizes| {
            sizes.iter().find(|s| {
                s["service_times"]
                    .as_object()
                    .is_some_and(|o| !o.is_empty())
            })
        })
        .context(
            "the report has no convergence run with service_times (a bench run with \
                  --only convergence and the operator's debug log makes one)",
        )?;
    let times: BTreeMap<String, BTreeMap<String, ServiceTimeIn>> =
        serde_json::from_value(size["service_times"].clone())
            .context("reading the report's service_times")?;
    let calls: BTreeMap<String, f64> =
        serde_json::from_value(size["calls"].clone()).context("reading the report's calls")?;
    let mut table = BTreeMap::new();
    for (op, methods) in times {
        let operation = op.split_once('.').map_or(op.as_str(), |(_, o)| o);
        let n_calls = calls.get(operation).copied().unwrap_or(0.0);
        let mut per_call = Vec::new();
        for t in methods.values() {
            let n = if n_calls > 0.0 {
                (f64::from(t.requests) / n_calls).round().max(1.0)
            } else {
                1.0
            };
            for _ in 0..n as u32 {
                per_call.push(t.mean_ms);
            }
        }
        table.insert(op, per_call);
    }
    let projects = size["projects"].as_u64().unwrap_or(0);
    Ok((table, u32::try_from(projects).unwrap_or(u32::MAX)))
}

/// `oplog::ServiceTime` as the report holds it.
#[derive(serde::Deserialize)]
struct ServiceTimeIn {
    mean_ms: f64,
    requests: u32,
}

/// Writes the paced fake's table beside the run's logs; the path and the [`Paced`] skeleton.
fn prepare_paced(bench: &Bench, source: &Path) -> anyhow::Result<(PathBuf, Paced)> {
    let text =
        std::fs::read_to_string(source).with_context(|| format!("reading {}", source.display()))?;
    let report: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", source.display()))?;
    let (table, source_projects) =
        paced_table(&report).with_context(|| format!("{}", source.display()))?;
    let dir = e2e::operator::log_dir(&bench.binary);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("bench-{}-service-times.json", bench.run));
    std::fs::write(&path, serde_json::to_vec_pretty(&table)?)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok((
        path,
        Paced {
            source: source.display().to_string(),
            source_projects,
            operations: table.len(),
            default_ms: fake_cloud::default_ms(&table),
            ..Default::default()
        },
    ))
}

/// Runs the measurement (paced from the report `paced_from` if given); `None` (and
/// problems) when it failed.
pub async fn run(
    bench: &Bench,
    tenants: u32,
    paced_from: Option<&Path>,
    token: &CancellationToken,
    problems: &mut Vec<String>,
) -> Option<FakeTenantsRun> {
    let (service_times, paced) = match paced_from.map(|p| prepare_paced(bench, p)).transpose() {
        Ok(Some((path, paced))) => (Some(path), Some(paced)),
        Ok(None) => (None, None),
        Err(e) => {
            problems.push(format!("tenants: --paced-from: {e:#}"));
            return None;
        }
    };
    let op = match FakeOperator::spawn(bench, service_times.as_deref()) {
        Ok(op) => op,
        Err(e) => {
            problems.push(format!("tenants: {e:#}"));
            return None;
        }
    };
    eprintln!(
        "bench: tenants: fake-cloud operator pid {} (stderr {})",
        op.pid,
        op.err_path.display()
    );
    let mut f = FakeTenantsRun {
        note: match &paced {
            Some(_) => format!("{NOTE}; {PACED_NOTE}"),
            None => NOTE.into(),
        },
        tenants,
        paced,
        ..Default::default()
    };
    let timeout = per_tenant_timeout(tenants, &f, bench);
    let ok = crate::vk::settle(
        "tenants",
        body(bench, &op, &mut f, timeout),
        token,
        problems,
        || Some(op.log_tail()),
    )
    .await;
    // Whatever happened, the CRs go while the process still handles their finalizers.
    for (kind, r) in [
        (
            "OpenstackProjects",
            bench.delete_all::<OpenstackProject>(&op, timeout).await,
        ),
        (
            "OpenstackDomains",
            bench.delete_all::<OpenstackDomain>(&op, timeout).await,
        ),
    ] {
        if let Err(e) = r {
            problems.push(format!("tenants cleanup of {kind}: {e:#}"));
        }
    }
    for (kind, r) in [
        ("OpenstackProjects", bench.strip::<OpenstackProject>().await),
        ("OpenstackDomains", bench.strip::<OpenstackDomain>().await),
    ] {
        match r {
            Ok(0) => {}
            Ok(n) => problems.push(format!("tenants cleanup: {n} {kind} stripped")),
            Err(e) => problems.push(format!("tenants cleanup of {kind}: {e:#}")),
        }
    }
    match op.stop().await {
        Ok((calls, left)) => {
            f.lifetime_calls = calls;
            f.left = left;
        }
        Err(e) => problems.push(format!("tenants: {e:#}")),
    }
    if ok {
        match fake_state(f.tenants).await {
            Ok(kib) => {
                f.fake_state_kib = Some(kib);
                f.operator_estimate_kib = Some(f.converged.rss_kib.saturating_sub(kib));
            }
            Err(e) => problems.push(format!("tenants: the fake's share: {e:#}")),
        }
    }
    ok.then_some(f)
}

/// Runs this executable with `--fake-cloud-state N` and returns the RSS growth it printed.
async fn fake_state(n: u32) -> anyhow::Result<u64> {
    let me = std::env::current_exe().context("locating this executable")?;
    let out = tokio::process::Command::new(me)
        .args(["--fake-cloud-state", &n.to_string()])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .await
        .context("running --fake-cloud-state")?;
    anyhow::ensure!(
        out.status.success(),
        "--fake-cloud-state exited with {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .context("--fake-cloud-state printed no JSON line")?;
    let v: serde_json::Value = serde_json::from_str(line)?;
    let before: Memory = serde_json::from_value(v["before"].clone())?;
    let after: Memory = serde_json::from_value(v["after"].clone())?;
    Ok(after.rss_kib.saturating_sub(before.rss_kib))
}

/// Tells whether every project's status shows the whole workload (users bound, both
/// security groups and routers, the federation rule): the figures would otherwise describe
/// less work than claimed.
fn check_workload(projects: &[OpenstackProject]) -> Vec<String> {
    let mut found = Vec::new();
    for p in projects {
        let s = p.status.clone().unwrap_or_default();
        let routers = s.networks.iter().filter(|n| n.router_id.is_some()).count();
        if !s.pending_users.is_empty()
            || s.security_groups.len() != manifests::SECURITY_GROUPS.len()
            || routers != manifests::NETWORKS.len()
            || s.federation_rule.is_none()
        {
            found.push(format!(
                "{}: pendingUsers {:?}, {} security groups, {routers} routers, federation rule {}",
                p.name_any(),
                s.pending_users,
                s.security_groups.len(),
                s.federation_rule.is_some()
            ));
        }
    }
    found
}

/// Time allowed to converge or delete all: the unpaced fake answers at once, so a second
/// per tenant is ample on a busy machine; paced, three times what 40 requests per tenant
/// take at the allowed rate.
fn per_tenant_timeout(tenants: u32, f: &FakeTenantsRun, bench: &Bench) -> Duration {
    let rps = bench.limits.requests_per_second;
    let per = if f.paced.is_some() && rps > 0 {
        Duration::from_secs_f64((3.0 * 40.0 / f64::from(rps)).max(1.0))
    } else {
        Duration::from_secs(1)
    };
    scenarios::size_timeout(tenants, per)
}

async fn body(
    bench: &Bench,
    op: &FakeOperator,
    f: &mut FakeTenantsRun,
    timeout: Duration,
) -> anyhow::Result<()> {
    let n = f.tenants;
    op.wait_ready(Duration::from_secs(120)).await?;
    // Caches sync and the first allocations happen right after readiness.
    tokio::time::sleep(Duration::from_secs(5)).await;
    f.baseline = Memory::of(op.pid)?;

    // The world a tenant needs: its OpenstackDomain (made by the operator in the fake), the
    // two users the role bindings name, the federation ConfigMap. Names of their own, so they
    // never meet the real cloud's objects of the other measurements.
    let domain = format!("{}fake", bench.prefix());
    bench
        .apply::<OpenstackDomain>(&manifests::domain(&domain, &bench.run))
        .await?;
    k8s::wait_ready(
        &bench.api::<OpenstackDomain>(),
        &domain,
        Duration::from_secs(60),
    )
    .await?;
    let users = bench.user_names();
    op.seed_users(&domain, &users).await?;
    bench
        .apply_federation_config_map(&format!("{}fake", bench.prefix()))
        .await?;

    let stop = CancellationToken::new();
    let (peak, sampler) = scenarios::sample_rss(op.pid, stop.clone());
    let before = settled(op, SETTLE).await?;
    let names: Vec<String> = (0..n)
        .map(|i| format!("{}t{i:04}", bench.prefix()))
        .collect();
    eprintln!("bench: tenants: creating {n} projects on the in-memory cloud");
    let started = Instant::now();
    bench
        .apply_projects(
            &names,
            &domain,
            &users,
            "openstack-operator bench tenant (in-memory cloud)",
        )
        .await?;
    f.apply_s = started.elapsed().as_secs_f64();
    let ready = bench
        .wait_all_ready::<OpenstackProject>(
            op,
            names.len(),
            started,
            Duration::from_secs(1),
            timeout,
        )
        .await?;
    f.converge_s = started.elapsed().as_secs_f64();
    let times: Vec<f64> = ready.values().map(Duration::as_secs_f64).collect();
    f.first_ready_s = stats::min(&times).unwrap_or(f.converge_s);
    f.median_ready_s = stats::median(&times).unwrap_or(f.converge_s);
    eprintln!("bench: tenants: {n} Ready in {:.1} s", f.converge_s);
    let after = settled(op, SETTLE).await?;
    f.calls = delta(&before.api_calls(), &after.api_calls());
    (f.reads, f.writes) = split(&f.calls);
    if let Some(p) = f.paced.as_mut() {
        let d = |name: &str| after.sum(name, &[]) - before.sum(name, &[]);
        p.requests = d(fake_cloud::PACED_REQUESTS);
        p.requests_per_tenant = p.requests / f64::from(n.max(1));
        p.achieved_rps = p.requests / f.converge_s.max(f64::EPSILON);
        let rps = bench.limits.requests_per_second;
        p.floor_s = if rps == 0 {
            0.0
        } else {
            p.requests / f64::from(rps)
        };
        p.ratio = if p.floor_s > 0.0 {
            f.converge_s / p.floor_s
        } else {
            0.0
        };
        p.mean_in_flight = d(fake_cloud::PACED_REQUEST_SECONDS) / f.converge_s.max(f64::EPSILON);
        p.limiter_wait_s = d(fake_cloud::PACED_LIMITER_WAIT_SECONDS);
    }
    let workload = check_workload(&bench.list::<OpenstackProject>().await?);
    anyhow::ensure!(
        workload.is_empty(),
        "{} tenants lack part of the workload, e.g. {}",
        workload.len(),
        workload.first().map(String::as_str).unwrap_or_default()
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    f.converged = Memory::of(op.pid)?;
    f.kib_per_tenant = (f.converged.rss_kib as f64 - f.baseline.rss_kib as f64) / f64::from(n);

    eprintln!("bench: tenants: forcing a reconcile of the {n} unchanged projects");
    f.steady = Some(scenarios::steady_state(bench, op, &names, timeout).await?);
    tokio::time::sleep(Duration::from_secs(5)).await;
    f.after_reconcile = Memory::of(op.pid)?;

    eprintln!("bench: tenants: deleting {n} projects");
    let before_delete = settled(op, SETTLE).await?;
    let started = Instant::now();
    bench.delete_all::<OpenstackProject>(op, timeout).await?;
    f.delete_s = started.elapsed().as_secs_f64();
    eprintln!("bench: tenants: {n} gone in {:.1} s", f.delete_s);
    let after_delete = settled(op, SETTLE).await?;
    f.delete_calls = delta(&before_delete.api_calls(), &after_delete.api_calls());
    tokio::time::sleep(Duration::from_secs(5)).await;
    f.after_delete = Memory::of(op.pid)?;
    stop.cancel();
    let _ = sampler.await;
    f.sampled_peak_rss_kib = peak.load(std::sync::atomic::Ordering::Relaxed);
    f.peak_hwm_kib = f.after_delete.hwm_kib;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paced_table_sends_each_method_per_call_as_measured() -> anyhow::Result<()> {
        // 10 network creates: 10 POSTs and 10 tag PUTs; 20 list_ports GETs in 10 calls (two
        // pages); a read the call counter never saw (one request); the first size lacking
        // service times is skipped.
        let report = serde_json::json!({"convergence": [
            {"projects": 5, "service_times": {}, "calls": {}},
            {"projects": 10,
             "calls": {"create_network": 10.0, "list_ports": 10.0},
             "service_times": {
                "network.create_network": {
                    "POST": {"mean_ms": 120.0, "requests": 10},
                    "PUT": {"mean_ms": 30.0, "requests": 10}},
                "network.list_ports": {"GET": {"mean_ms": 8.0, "requests": 20}},
                "identity.list_roles": {"GET": {"mean_ms": 5.0, "requests": 3}}}}
        ]});
        let (table, size) = paced_table(&report)?;
        assert_eq!(size, 10);
        assert_eq!(table["network.create_network"], vec![120.0, 30.0]);
        assert_eq!(table["network.list_ports"], vec![8.0, 8.0]);
        assert_eq!(table["identity.list_roles"], vec![5.0]);
        assert!(paced_table(&serde_json::json!({"convergence": []})).is_err());
        Ok(())
    }
}
