//! `openstack-operator-bench`: measures the operator binary against the same targets as the
//! end-to-end tests (the in-process Kubernetes API emulator unless `E2E_KUBECONFIG` names a
//! cluster; the cloud of `OS_CLOUD` / `OS_CLIENT_CONFIG_FILE`) and prints figures: convergence
//! time of N full projects against a floor, OpenStack calls per forced resync, reaction time,
//! and memory; with `--only vk`, the Zun virtual kubelet under N pods; with `--only tenants`,
//! the controllers' memory at N full tenants on the in-memory OpenStack. It asserts nothing.
//! `scripts/bench` builds and runs it; see `docs/performance.md`.

mod fake_cloud;
mod fake_node;
mod fake_tenants;
mod floor;
mod machine;
mod manifests;
mod oplog;
mod report;
mod scenarios;
mod stats;
mod vk;
mod vk_report;
mod vk_tenants;
mod world;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{Parser, ValueEnum};
use e2e::Operator;
use tokio_util::sync::CancellationToken;

use crate::report::Report;
use crate::world::{Bench, OperatorLimits};

/// A group of measurements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Scenario {
    /// Convergence, steady state and deletion of N projects, for each N of --sizes.
    Convergence,
    /// Spec change → first OpenStack call.
    Reaction,
    /// RSS with zero CRs and with --flavors flavors.
    Memory,
    /// The Zun virtual kubelet: --pods real pods (start, steady state, deletion, reaction,
    /// memory), then --fake-pods on the in-memory Zun (memory). Not part of the default set.
    Vk,
    /// The operator's controllers at --fake-tenants full projects on the in-memory OpenStack
    /// (memory of issue 15; nothing in the real cloud). Not part of the default set.
    Tenants,
}

/// Measures the openstack-operator binary: convergence, steady-state calls, reaction time,
/// memory. Needs OS_CLOUD and OS_CLIENT_CONFIG_FILE (eval "$(scripts/test-cloud env)");
/// uses the cluster of E2E_KUBECONFIG, else an in-process Kubernetes API emulator.
#[derive(Debug, Parser)]
#[command(name = "openstack-operator-bench", version)]
struct Args {
    /// The operator binary [default: openstack-operator beside this binary].
    #[arg(long)]
    operator: Option<PathBuf>,
    /// Project counts to converge, one after another (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "10,50,100")]
    sizes: Vec<u32>,
    /// Flavors for the memory measurement.
    #[arg(long, default_value_t = 1000)]
    flavors: u32,
    /// Spec changes for the reaction measurement.
    #[arg(long, default_value_t = 50)]
    reaction_samples: usize,
    /// Short run: N = 10 only, 200 flavors, 20 reaction samples (overrides those flags).
    #[arg(long)]
    quick: bool,
    /// Measurements to run (comma-separated) [default: all].
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Scenario>,
    /// Where to write the JSON report [default: <target dir>/bench/<timestamp>.json].
    #[arg(long)]
    json: Option<PathBuf>,
    /// The operator's --max-concurrent-calls (OpenStack requests in flight).
    #[arg(long, default_value_t = 10)]
    max_concurrent_calls: usize,
    /// The operator's --requests-per-second (0 = unlimited).
    #[arg(long, default_value_t = 20)]
    requests_per_second: u32,
    /// The operator's --concurrency (objects of one kind reconciled at once).
    #[arg(long, default_value_t = 20)]
    concurrency: u16,
    /// Do not measure: delete from OpenStack what the run with this id left (its Keystone
    /// domain bench-<RUN> with everything in it, flavors named bench-<RUN>-*), e.g. after a
    /// second Ctrl-C.
    #[arg(long, value_name = "RUN")]
    sweep: Option<String>,
    /// Time allowed per project (on top of two minutes) before a convergence or deletion wait
    /// gives up.
    #[arg(long, default_value_t = 20)]
    seconds_per_project: u64,
    /// The drift-check phase of each size: the operator restarted with this
    /// `--resync-seconds`, one period between two checks measured (0: skip the phase).
    #[arg(long, default_value_t = 20)]
    drift_seconds: u64,
    /// vk: pods on the real Zun of the test cloud (0: skip the real run).
    #[arg(long, default_value_t = 100)]
    pods: u32,
    /// vk: pods on the in-memory Zun, for memory (0: skip).
    #[arg(long, default_value_t = 1000)]
    fake_pods: u32,
    /// vk: pods created one at a time for the reaction time.
    #[arg(long, default_value_t = 10)]
    vk_reaction_samples: usize,
    /// vk: seconds the pods run untouched to count steady-state calls.
    #[arg(long, default_value_t = 60)]
    steady_seconds: u64,
    /// vk: time allowed per pod (on top of two minutes) to start them all, or delete them.
    #[arg(long, default_value_t = 10)]
    seconds_per_pod: u64,
    /// vk: the node's --poll-interval-seconds (its default is 5).
    #[arg(long, default_value_t = 5)]
    vk_poll_interval_seconds: u64,
    /// vk: run the virtual kubelet in --tenants mode with this many ZunTenants (the test
    /// cloud offers 2), pods spread over them, instead of one single-tenant node (0).
    #[arg(long, default_value_t = 0)]
    vk_tenants: usize,
    /// tenants: full projects on the in-memory OpenStack (0: skip).
    #[arg(long, default_value_t = 1000)]
    fake_tenants: u32,
    /// tenants: pace the in-memory OpenStack like a cloud with spare capacity, from the
    /// service times a convergence run measured on a real cloud (a JSON report of this
    /// bench; its first size), behind the client-side limiter at --max-concurrent-calls and
    /// --requests-per-second: convergence time against the floor (requests ÷ allowed rate)
    /// where the cloud is not the bound.
    #[arg(long, value_name = "REPORT.json")]
    paced_from: Option<PathBuf>,
    /// Internal: with --fake-cloud-operator, the paced fake's service times (JSON written by
    /// the tenants measurement from --paced-from).
    #[arg(long, value_name = "FILE", hide = true)]
    fake_cloud_service_times: Option<PathBuf>,
    /// Internal: run the operator's controllers on the in-memory OpenStack, serving /readyz,
    /// /metrics and /seed-users on ADDR (the tenants measurement starts this executable so).
    #[arg(long, value_name = "ADDR", hide = true)]
    fake_cloud_operator: Option<std::net::SocketAddr>,
    /// Internal: fill an in-memory OpenStack alone with N tenants and print its RSS growth
    /// (the tenants measurement's estimate of the fake's share).
    #[arg(long, value_name = "N", hide = true)]
    fake_cloud_state: Option<u32>,
    /// Internal: with --fake-cloud-operator, the namespace trusted for federation ConfigMaps.
    #[arg(long, value_name = "NAMESPACE", hide = true, default_value = "")]
    fake_cloud_namespace: String,
    /// Internal: run the virtual kubelet on the in-memory Zun as node NODE (the vk
    /// measurement starts this executable so).
    #[arg(long, value_name = "NODE", hide = true)]
    fake_zun_node: Option<String>,
    /// Internal: run one node per NODE=NAMESPACE pair (comma-separated) on in-memory Zun and
    /// Neutron, as `virtual-kubelet --tenants` does (the vk measurement with --vk-tenants).
    #[arg(long, value_name = "NODE=NAMESPACE,...", hide = true)]
    fake_zun_tenants: Option<String>,
}

impl Args {
    fn normalize(&mut self) {
        if self.quick {
            self.sizes = vec![10];
            self.flavors = 200;
            self.reaction_samples = 20;
        }
        if self.only.is_empty() {
            self.only = vec![Scenario::Convergence, Scenario::Reaction, Scenario::Memory];
        }
        self.sizes.retain(|n| *n > 0);
    }

    fn wants(&self, s: Scenario) -> bool {
        self.only.contains(&s)
    }
}

/// `openstack-operator` beside this executable.
fn default_operator() -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe().context("locating this executable")?;
    let dir = me.parent().context("this executable has no directory")?;
    Ok(dir.join("openstack-operator"))
}

/// `release` / `debug` from the binary's directory name.
fn profile_of(binary: &Path) -> String {
    binary
        .parent()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "unknown".into())
}

/// `$CARGO_TARGET_DIR/bench`, else `bench` beside the binary's profile directory.
fn report_dir(binary: &Path) -> PathBuf {
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR").filter(|t| !t.is_empty()) {
        return PathBuf::from(t).join("bench");
    }
    match binary.parent().and_then(Path::parent) {
        Some(target) => target.join("bench"),
        None => PathBuf::from("target/bench"),
    }
}

/// Ctrl-C / SIGTERM: the first cancels the measurements (cleanup still runs), the second
/// exits at once.
fn watch_signals(token: CancellationToken, run: String) {
    tokio::spawn(async move {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => Some(s),
                Err(e) => {
                    eprintln!("bench: cannot listen for SIGTERM: {e}");
                    None
                }
            };
        loop {
            let terminated = async {
                match term.as_mut() {
                    Some(t) => {
                        t.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                r = tokio::signal::ctrl_c() => {
                    if r.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
                _ = terminated => {}
            }
            if token.is_cancelled() {
                eprintln!(
                    "bench: interrupted again; exiting without cleanup. Objects of run {run} \
                     may be left in OpenStack: remove them with scripts/bench --sweep {run}"
                );
                std::process::exit(130);
            }
            eprintln!("bench: interrupted; cleaning up (interrupt again to exit at once)");
            token.cancel();
        }
    });
}

/// Runs `body` with a fresh operator, then cleans up with that operator (the run's objects
/// are owned by its cluster id) whatever happened, and stops it. `None` when the body failed
/// or was interrupted; the reasons go into `problems`.
async fn phase<T>(
    bench: &Bench,
    name: &str,
    log_filter: &str,
    cleanup_timeout: Duration,
    token: &CancellationToken,
    problems: &mut Vec<String>,
    body: impl AsyncFnOnce(&Operator) -> anyhow::Result<T>,
) -> Option<T> {
    if token.is_cancelled() {
        return None;
    }
    let op = match bench.start_operator(name, log_filter).await {
        Ok(op) => op,
        Err(e) => {
            problems.push(format!("{name}: {e:#}"));
            return None;
        }
    };
    eprintln!(
        "bench: {name}: operator pid {} (log {})",
        op.pid().unwrap_or_default(),
        op.log_path().display()
    );
    let outcome = tokio::select! {
        r = body(&op) => Some(r),
        _ = token.cancelled() => None,
    };
    let interrupted = outcome.is_none();
    let result = match outcome {
        Some(Ok(v)) => Some(v),
        Some(Err(e)) => {
            op.print_log_tail();
            problems.push(format!("{name}: {e:#}"));
            None
        }
        None => {
            problems.push(format!("{name}: interrupted"));
            None
        }
    };
    eprintln!("bench: {name}: cleaning up");
    for p in bench.cleanup(&op, interrupted, cleanup_timeout).await {
        problems.push(format!("{name} cleanup: {p}"));
    }
    match op.stop(Duration::from_secs(30)).await {
        Ok(status) if status.success() => {}
        Ok(status) => problems.push(format!("{name}: the operator exited with {status}")),
        Err(e) => problems.push(format!("{name}: stopping the operator: {e:#}")),
    }
    result
}

/// Writes the report as pretty JSON (to a temporary file renamed over the target, so a reader
/// never sees half a report).
fn save(report: &Report, path: &Path) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(report).context("serializing the report")?;
    let tmp = path.with_extension("json.partial");
    std::fs::write(&tmp, text + "\n").with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming {}", tmp.display()))
}

/// The report as it grows, saved after every measurement, so a run that is killed still
/// leaves the figures it had.
struct Journal {
    report: Mutex<Report>,
    path: PathBuf,
}

impl Journal {
    fn update(&self, f: impl FnOnce(&mut Report)) {
        let mut r = self.report.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut r);
        if let Err(e) = save(&r, &self.path) {
            eprintln!("bench: cannot save the report so far: {e:#}");
        }
    }
}

async fn run(args: Args) -> anyhow::Result<(Report, PathBuf)> {
    let wall = Instant::now();
    let date = jiff::Timestamp::now();
    let date_text = date.round(jiff::Unit::Second).unwrap_or(date).to_string();
    let operator = match &args.operator {
        Some(p) => p.clone(),
        None => default_operator()?,
    };
    let json_path = match &args.json {
        Some(p) => p.clone(),
        None => report_dir(&operator).join(format!("{}.json", date_text.replace(':', "-"))),
    };
    anyhow::ensure!(
        operator.is_file(),
        "{} does not exist: build it (cargo build --release -p openstack-operator) or pass --operator",
        operator.display()
    );
    if std::env::var_os("RUST_LOG").is_some() {
        eprintln!(
            "bench: warning: RUST_LOG is set and overrides the operator's log filter; the \
             latency and reaction figures need `{}`",
            oplog::DEBUG_ADAPTER_FILTER
        );
    }
    let limits = OperatorLimits {
        max_concurrent_calls: args.max_concurrent_calls,
        requests_per_second: args.requests_per_second,
        concurrency: args.concurrency,
    };
    let machine = machine::Machine::detect();
    let bench = Bench::start(operator.clone(), limits.clone(), None).await?;
    let token = CancellationToken::new();
    watch_signals(token.clone(), bench.run.clone());
    eprintln!(
        "bench: run {} (namespace {}, Keystone domain {})",
        bench.run,
        bench.namespace,
        bench.domain_name()
    );
    let per_project = Duration::from_secs(args.seconds_per_project);
    let largest = args.sizes.iter().copied().max().unwrap_or(1);
    // Deletion goes as fast as creation at most; flavors are about ten times cheaper.
    let projects_timeout = scenarios::size_timeout(largest, per_project);
    let flavors_timeout = scenarios::size_timeout(args.flavors / 10, per_project);
    let kubernetes = if bench.target.is_emulated() {
        "in-process kube-emulator".to_string()
    } else {
        bench.target.kubeconfig().display().to_string()
    };
    let journal = Journal {
        report: Mutex::new(Report {
            date: date_text,
            complete: false,
            git_commit: machine::git_commit(Path::new(".")),
            operator_profile: profile_of(&operator),
            operator_binary: operator.display().to_string(),
            bench_profile: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
            .into(),
            machine,
            load_at_end: [0.0; 3],
            kubernetes,
            openstack_cloud: bench.target.cloud_env().os_cloud.clone(),
            limits,
            quick: args.quick,
            convergence: Vec::new(),
            reaction: None,
            memory: None,
            virtual_kubelet: None,
            fake_tenants: None,
            problems: Vec::new(),
            wall_time_s: 0.0,
        }),
        path: json_path.clone(),
    };
    journal.update(|_| {});
    eprintln!("bench: report: {}", json_path.display());
    let mut problems = Vec::new();

    if args.wants(Scenario::Convergence) || args.wants(Scenario::Reaction) {
        let errors = phase(
            &bench,
            "projects",
            oplog::DEBUG_ADAPTER_FILTER,
            projects_timeout,
            &token,
            &mut problems,
            async |op| {
                bench
                    .create_domain_and_user(Duration::from_secs(120))
                    .await?;
                let users = bench.user_names();
                let mut errors = Vec::new();
                if args.wants(Scenario::Convergence) {
                    for n in &args.sizes {
                        match scenarios::convergence(
                            &bench,
                            op,
                            *n,
                            &users,
                            per_project,
                            args.drift_seconds,
                        )
                        .await
                        {
                            Ok(r) => {
                                errors.extend(r.workload.iter().map(|w| format!("N={n}: {w}")));
                                errors.extend(r.residue.other_security_groups.iter().map(|g| {
                                    format!("N={n}: security group {g} was left by the operator")
                                }));
                                if r.keystone_projects_left > 0 {
                                    errors.push(format!(
                                        "N={n}: {} Keystone projects left after deletion",
                                        r.keystone_projects_left
                                    ));
                                }
                                journal.update(|rep| rep.convergence.push(r));
                            }
                            Err(e) => {
                                errors.push(format!("convergence of {n} projects: {e:#}"));
                                break;
                            }
                        }
                    }
                }
                if args.wants(Scenario::Reaction) && errors.is_empty() {
                    match scenarios::reaction(
                        &bench,
                        op,
                        args.reaction_samples,
                        &users,
                        scenarios::size_timeout(1, per_project),
                    )
                    .await
                    {
                        Ok(r) => journal.update(|rep| rep.reaction = Some(r)),
                        Err(e) => errors.push(format!("reaction: {e:#}")),
                    }
                }
                Ok(errors)
            },
        )
        .await;
        problems.extend(errors.into_iter().flatten());
    }

    if args.wants(Scenario::Memory) && args.flavors > 0 {
        // A fresh operator at the default log level, so VmHWM is this measurement's own peak.
        let memory = phase(
            &bench,
            "memory",
            "info,openstack_sdk=warn",
            flavors_timeout,
            &token,
            &mut problems,
            async |op| scenarios::memory(&bench, op, args.flavors, flavors_timeout).await,
        )
        .await;
        journal.update(|rep| rep.memory = memory);
    }
    if args.wants(Scenario::Vk) {
        let opts = vk::VkOptions {
            pods: args.pods,
            fake_pods: args.fake_pods,
            reaction_samples: args.vk_reaction_samples,
            steady: Duration::from_secs(args.steady_seconds),
            per_pod: Duration::from_secs(args.seconds_per_pod),
            poll_interval_s: args.vk_poll_interval_seconds,
        };
        journal.update(|rep| rep.virtual_kubelet = Some(Default::default()));
        if args.vk_tenants > 0 {
            if args.pods > 0 {
                let real =
                    vk_tenants::real(&bench, &opts, args.vk_tenants, &token, &mut problems).await;
                journal.update(|rep| {
                    if let Some(v) = rep.virtual_kubelet.as_mut() {
                        v.tenants = real;
                    }
                });
            }
            if args.fake_pods > 0 {
                let fake =
                    vk_tenants::fake(&bench, &opts, args.vk_tenants, &token, &mut problems).await;
                journal.update(|rep| {
                    if let Some(v) = rep.virtual_kubelet.as_mut() {
                        v.fake_tenants = fake;
                    }
                });
            }
        } else {
            if args.pods > 0 {
                let real = vk::real(&bench, &operator, &opts, &token, &mut problems).await;
                journal.update(|rep| {
                    if let Some(v) = rep.virtual_kubelet.as_mut() {
                        v.real = real;
                    }
                });
            }
            if args.fake_pods > 0 {
                let fake = vk::fake(&bench, &opts, &token, &mut problems).await;
                journal.update(|rep| {
                    if let Some(v) = rep.virtual_kubelet.as_mut() {
                        v.fake = fake;
                    }
                });
            }
        }
    }
    if args.wants(Scenario::Tenants) && args.fake_tenants > 0 {
        let run = fake_tenants::run(
            &bench,
            args.fake_tenants,
            args.paced_from.as_deref(),
            &token,
            &mut problems,
        )
        .await;
        journal.update(|rep| rep.fake_tenants = run);
    }
    if let Err(e) = bench.delete_namespace().await {
        problems.push(format!("{e:#}"));
    }
    journal.update(|rep| {
        rep.problems = problems;
        rep.load_at_end = machine::load_average();
        rep.wall_time_s = wall.elapsed().as_secs_f64();
        rep.complete = true;
    });
    let report = journal
        .report
        .into_inner()
        .unwrap_or_else(|p| p.into_inner());
    Ok((report, json_path))
}

/// `--sweep RUN`: removes what an interrupted run left in OpenStack.
async fn sweep(run: String) -> anyhow::Result<()> {
    anyhow::ensure!(
        run.len() == 8
            && run
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
        "--sweep takes a run id: eight lower-case hex digits, as printed by the run"
    );
    let limits = OperatorLimits {
        max_concurrent_calls: 10,
        requests_per_second: 0,
        concurrency: 1,
    };
    let bench = Bench::start(PathBuf::new(), limits, Some(run)).await?;
    let found = bench.sweep().await?;
    for f in &found {
        println!("{f}");
    }
    println!("{} object(s) of run {} removed", found.len(), bench.run);
    bench.delete_namespace().await
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = Args::parse();
    if let Some(n) = args.fake_cloud_state.take() {
        return fake_cloud::state_only(n).await;
    }
    if let Some(addr) = args.fake_cloud_operator.take() {
        let pacing = match &args.fake_cloud_service_times {
            Some(path) => Some(fake_cloud::pacing_from(
                path,
                args.max_concurrent_calls,
                args.requests_per_second,
            )?),
            None => None,
        };
        return fake_cloud::run(
            addr,
            std::mem::take(&mut args.fake_cloud_namespace),
            args.concurrency,
            pacing,
        )
        .await;
    }
    if let Some(node) = args.fake_zun_node.take() {
        return fake_node::run(node, args.vk_poll_interval_seconds).await;
    }
    if let Some(spec) = args.fake_zun_tenants.take() {
        return fake_node::run_tenants(&spec, args.vk_poll_interval_seconds).await;
    }
    if let Some(run) = args.sweep.take() {
        return sweep(run).await;
    }
    args.normalize();
    let (report, path) = run(args).await?;
    print!("{}", report::render(&report));
    println!("JSON report: {}", path.display());
    anyhow::ensure!(
        report.problems.is_empty(),
        "the run had {} problem(s) (listed above)",
        report.problems.len()
    );
    Ok(())
}
