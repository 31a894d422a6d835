//! The results of a run: JSON (everything) and a readable table (the headline figures).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::floor::Floor;
use crate::machine::{Machine, Memory, mib};
use crate::world::{OperatorLimits, Residue};

/// A whole run.
#[derive(Debug, Serialize)]
pub struct Report {
    /// When the run started (UTC).
    pub date: String,
    /// False while the run goes on (the report is saved after every measurement), and in the
    /// report of a run that was killed.
    pub complete: bool,
    /// `git describe --always --dirty` of the working tree.
    pub git_commit: String,
    /// The operator binary measured.
    pub operator_binary: String,
    /// Build profile of the operator binary (`release`/`debug`, from its directory).
    pub operator_profile: String,
    /// Build profile of this bench binary, which hosts the in-process Kubernetes emulator.
    pub bench_profile: String,
    /// The machine.
    pub machine: Machine,
    /// Load averages when the run ended.
    pub load_at_end: [f64; 3],
    /// The Kubernetes API used.
    pub kubernetes: String,
    /// `OS_CLOUD` of the cloud used.
    pub openstack_cloud: String,
    /// The operator's flags that bound its speed.
    pub limits: OperatorLimits,
    /// `--quick`.
    pub quick: bool,
    /// One entry per project count.
    pub convergence: Vec<SizeRun>,
    /// Change → first OpenStack call.
    pub reaction: Option<Reaction>,
    /// Memory with many flavors.
    pub memory: Option<MemoryRun>,
    /// The Zun virtual kubelet (`--only vk`).
    pub virtual_kubelet: Option<crate::vk_report::VkRun>,
    /// The controllers at N tenants on the in-memory OpenStack (`--only tenants`).
    pub fake_tenants: Option<crate::fake_tenants::FakeTenantsRun>,
    /// Everything that went wrong (failed scenarios, cleanup problems); empty for a clean run.
    pub problems: Vec<String>,
    /// Wall time of the whole run, in seconds.
    pub wall_time_s: f64,
}

/// Signs of a disturbed cloud during a measurement (from the operator's counters).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Trouble {
    /// Requests the adapter retried (transport errors, 5xx, 429, 409 in progress).
    pub retried_requests: f64,
    /// Calls that still failed after their retries (the reconcile was retried later); lookups
    /// answered 404 are not counted.
    pub failed_calls: f64,
}

/// Convergence, steady state and deletion of N projects.
#[derive(Debug, Serialize)]
pub struct SizeRun {
    /// N.
    pub projects: u32,
    /// From the first apply until all N were seen Ready, in seconds.
    pub converge_s: f64,
    /// When the first project was seen Ready, in seconds from the first apply.
    pub first_ready_s: f64,
    /// When half of them were, in seconds.
    pub median_ready_s: f64,
    /// OpenStack calls by operation during convergence (call counter deltas).
    pub calls: BTreeMap<String, f64>,
    /// HTTP requests during convergence by `"<operation> <METHOD>"` (every attempt), from
    /// the operator's log.
    pub http_requests: BTreeMap<String, u64>,
    /// Median latency of the successful requests of each kind, in ms.
    pub latency_median_ms: BTreeMap<String, f64>,
    /// Read calls (`get_*`, `list_*`, `find_*`).
    pub reads: f64,
    /// Every other call.
    pub writes: f64,
    /// The floor and the latencies behind it.
    pub floor: Floor,
    /// `converge_s / floor.floor_s`.
    pub ratio: f64,
    /// Every HTTP request sent while converging (all attempts, reads and writes).
    pub requests_made: u64,
    /// `requests_made / converge_s`: the request rate achieved.
    pub achieved_rps: f64,
    /// `requests_made` ÷ `--requests-per-second`: the least time these requests could take at
    /// the allowed rate (0 when the rate is unlimited), in seconds.
    pub made_floor_s: f64,
    /// `converge_s / made_floor_s`: 1.0 = the operator used all of the rate it is allowed.
    pub made_ratio: f64,
    /// Σ of the durations of every OpenStack request during convergence (reads included), in
    /// seconds.
    pub request_time_s: f64,
    /// `request_time_s / converge_s`: OpenStack requests in flight on average.
    pub mean_in_flight: f64,
    /// Seconds with at least one request of the service in flight while converging, by
    /// service (see `oplog::busy_by_service`).
    pub busy_by_service_s: BTreeMap<String, f64>,
    /// Σ of the time requests waited for the client-side limiter (concurrency and rate), in
    /// seconds.
    pub rate_limit_wait_s: f64,
    /// How long the cloud worked on each kind of request while converging, its queue left
    /// out (see `oplog::service_times`): what `--paced-from` models a cloud with spare
    /// capacity from.
    pub service_times: BTreeMap<String, BTreeMap<String, crate::oplog::ServiceTime>>,
    /// Retries and failures while converging.
    pub trouble: Trouble,
    /// Retries and failures while deleting.
    pub delete_trouble: Trouble,
    /// A forced reconcile of the N unchanged projects.
    pub steady: Steady,
    /// One period of the drift check over the N converged projects (`None`: not measured,
    /// `--drift-seconds 0`).
    pub drift: Option<Drift>,
    /// From the delete requests until the last project was gone, in seconds.
    pub delete_s: f64,
    /// OpenStack calls by operation during deletion.
    pub delete_calls: BTreeMap<String, f64>,
    /// Keystone projects left in the bench domain after deletion (should be 0).
    pub keystone_projects_left: usize,
    /// What OpenStack kept of the deleted projects (removed by the bench afterwards).
    pub residue: Residue,
    /// Where the converged projects differed from the intended workload (should be empty).
    pub workload: Vec<String>,
}

/// One forced reconcile of every converged project.
#[derive(Debug, Serialize)]
pub struct Steady {
    /// Reconciles counted (≥ N).
    pub reconciles: f64,
    /// From the first annotation until N more reconciles were counted, in seconds.
    pub seconds: f64,
    /// Read calls.
    pub reads: f64,
    /// Write calls (0 expected).
    pub writes: f64,
    /// Calls by operation.
    pub calls: BTreeMap<String, f64>,
}

/// One period of the periodic drift check, with every project converged and unchanged: what
/// an idle operator costs between two checks (at the default `--resync-seconds 300`, per 5
/// minutes).
#[derive(Debug, Serialize)]
pub struct Drift {
    /// `--resync-seconds` the operator ran with for this phase.
    pub period_s: u64,
    /// Projects the measured check compared (`checked` in its log line).
    pub checked: u64,
    /// Projects it found different (0 expected).
    pub drifted: u64,
    /// Reconciles in the window (0 expected: the check repairs only what differs).
    pub reconciles: f64,
    /// Read calls in the window.
    pub reads: f64,
    /// Write calls in the window (0 expected).
    pub writes: f64,
    /// Calls by operation.
    pub calls: BTreeMap<String, f64>,
}

/// Reaction time: a spec change until the operator's first OpenStack call for the object.
#[derive(Debug, Serialize)]
pub struct Reaction {
    /// Changes measured.
    pub samples: usize,
    /// Per change, ms from sending the patch to sending the first OpenStack request logged
    /// under the object's reconcile span.
    pub first_call_ms: Vec<f64>,
    /// Median of `first_call_ms`.
    pub first_call_median_ms: f64,
    /// 99th percentile (nearest rank) of `first_call_ms`.
    pub first_call_p99_ms: f64,
    /// Per change, ms from sending the patch until the object was seen Ready at its new
    /// generation (polled every 50 ms).
    pub ready_ms: Vec<f64>,
    /// Median of `ready_ms`.
    pub ready_median_ms: f64,
    /// 99th percentile of `ready_ms`.
    pub ready_p99_ms: f64,
    /// Which operation came first, and how often.
    pub first_operations: BTreeMap<String, usize>,
}

/// Memory of a fresh operator with zero, then many flavors.
#[derive(Debug, Serialize)]
pub struct MemoryRun {
    /// Flavors created.
    pub flavors: u32,
    /// Ready, zero CRs, 5 s after readiness.
    pub baseline: Memory,
    /// Highest VmRSS sampled (every 200 ms) while the flavors were created and deleted.
    pub sampled_peak_rss_kib: u64,
    /// VmHWM (lifetime peak) after the flavors were created and deleted.
    pub peak_hwm_kib: u64,
    /// Once converged and the counters settled, 5 s later.
    pub idle: Memory,
    /// After deleting all flavors.
    pub after_delete: Memory,
    /// From the first apply until all were Ready, in seconds.
    pub converge_s: f64,
    /// Until all were gone, in seconds.
    pub delete_s: f64,
    /// OpenStack calls by operation while converging.
    pub calls: BTreeMap<String, f64>,
    /// Mean request duration by operation while converging (the operator's histogram), in ms.
    pub mean_latency_ms: BTreeMap<String, f64>,
    /// Σ of the time requests waited for the client-side limiter while converging, in s.
    pub rate_limit_wait_s: f64,
    /// Retries and failures while converging.
    pub trouble: Trouble,
}

fn secs(s: f64) -> String {
    if s >= 100.0 {
        format!("{s:.0} s")
    } else {
        format!("{s:.1} s")
    }
}

/// The readable summary.
pub fn render(r: &Report) -> String {
    let mut o = String::new();
    let m = &r.machine;
    let _ = writeln!(
        o,
        "openstack-operator bench, {} (commit {})",
        r.date, r.git_commit
    );
    let _ = writeln!(
        o,
        "machine: {} cores ({}), {} MiB RAM, load {:.2}/{:.2}/{:.2} at start, {:.2}/{:.2}/{:.2} at end",
        m.cores,
        if m.cpu_model.is_empty() {
            "?"
        } else {
            &m.cpu_model
        },
        m.ram_mib,
        m.load_at_start[0],
        m.load_at_start[1],
        m.load_at_start[2],
        r.load_at_end[0],
        r.load_at_end[1],
        r.load_at_end[2]
    );
    let _ = writeln!(
        o,
        "operator: {} build ({}); bench/emulator: {} build; Kubernetes: {}; cloud: {}",
        r.operator_profile, r.operator_binary, r.bench_profile, r.kubernetes, r.openstack_cloud
    );
    let _ = writeln!(
        o,
        "limits: --max-concurrent-calls {} --requests-per-second {} --concurrency {}",
        r.limits.max_concurrent_calls, r.limits.requests_per_second, r.limits.concurrency
    );
    if !r.convergence.is_empty() {
        let _ = writeln!(o, "\nConvergence of N full projects (create → all Ready)");
        let _ = writeln!(
            o,
            "{:>5} {:>9} {:>9} {:>7} {:>7} {:>8} {:>10} {:>10} {:>7} {:>9} {:>9}",
            "N",
            "converge",
            "median",
            "reads",
            "writes",
            "w/proj",
            "floor(lat)",
            "floor(rate)",
            "ratio",
            "in flight",
            "delete"
        );
        for s in &r.convergence {
            let _ = writeln!(
                o,
                "{:>5} {:>9} {:>9} {:>7} {:>7} {:>8.1} {:>10} {:>10} {:>7.2} {:>9.1} {:>9}",
                s.projects,
                secs(s.converge_s),
                secs(s.median_ready_s),
                s.reads,
                s.writes,
                s.writes / f64::from(s.projects.max(1)),
                secs(s.floor.latency_floor_s),
                secs(s.floor.rate_floor_s),
                s.ratio,
                s.mean_in_flight,
                secs(s.delete_s)
            );
        }
        let _ = writeln!(
            o,
            "floor(lat) = Σ mandatory writes × their mean latency ÷ --max-concurrent-calls \
             (with the median instead, the definition before 2026-12-02: {}); \
             floor(rate) = mandatory writes ÷ --requests-per-second; ratio = converge ÷ the larger; \
             in flight = Σ request durations ÷ converge (OpenStack requests in flight on average)",
            r.convergence
                .iter()
                .map(|s| format!(
                    "N = {}: {}, ratio {:.2}",
                    s.projects,
                    secs(s.floor.latency_floor_median_s),
                    if s.floor.latency_floor_median_s > 0.0 {
                        s.converge_s / s.floor.latency_floor_median_s.max(s.floor.rate_floor_s)
                    } else {
                        0.0
                    }
                ))
                .collect::<Vec<_>>()
                .join("; ")
        );
        let _ = writeln!(
            o,
            "\nUse of the allowed rate ({} requests/s)",
            r.limits.requests_per_second
        );
        let _ = writeln!(
            o,
            "{:>5} {:>9} {:>9} {:>10} {:>11} {:>7} {:>13}",
            "N", "requests", "req/proj", "achieved", "floor(made)", "ratio", "steady/proj"
        );
        for s in &r.convergence {
            let per = f64::from(s.projects.max(1));
            let _ = writeln!(
                o,
                "{:>5} {:>9} {:>9.1} {:>8.1}/s {:>11} {:>7.2} {:>13.1}",
                s.projects,
                s.requests_made,
                s.requests_made as f64 / per,
                s.achieved_rps,
                secs(s.made_floor_s),
                s.made_ratio,
                (s.steady.reads + s.steady.writes) / per
            );
        }
        let _ = writeln!(
            o,
            "requests = every HTTP request while converging (log); achieved = requests ÷ converge; \
             floor(made) = requests ÷ --requests-per-second; ratio = converge ÷ floor(made); \
             steady/proj = calls of one forced pass per project (= per project per 5 min at the \
             default --resync-seconds 300)"
        );
        for s in &r.convergence {
            let mut busy: Vec<(&String, &f64)> = s.busy_by_service_s.iter().collect();
            busy.sort_by(|a, b| b.1.total_cmp(a.1));
            let _ = writeln!(
                o,
                "N = {}: OpenStack services busy (at least one request in flight) while \
                 converging: {}",
                s.projects,
                busy.iter()
                    .map(|(svc, b)| format!(
                        "{svc} {} ({:.0} %)",
                        secs(**b),
                        100.0 * **b / s.converge_s.max(f64::EPSILON)
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            let _ = writeln!(
                o,
                "N = {}: requests waited {} in all for the client-side limiter; {} requests \
                 retried and {} calls failed while converging, {} and {} while deleting",
                s.projects,
                secs(s.rate_limit_wait_s),
                s.trouble.retried_requests,
                s.trouble.failed_calls,
                s.delete_trouble.retried_requests,
                s.delete_trouble.failed_calls
            );
        }
        let kept: usize = r
            .convergence
            .iter()
            .map(|s| s.residue.default_security_groups)
            .sum();
        if kept > 0 {
            let _ = writeln!(
                o,
                "after deletion Neutron still held {kept} `default` security group(s) of deleted \
                 projects (not the operator's; the bench removed them and reset their quotas)"
            );
        }
        if let Some(s) = r.convergence.last() {
            let _ = writeln!(
                o,
                "\nOpenStack calls per project (N = {}): the call counter by operation, the HTTP \
                 requests behind each call (from the log), the mandatory ones, median latency",
                s.projects
            );
            let _ = writeln!(
                o,
                "  {:<30} {:>7} {:>7} {:>8} {:>9} {:>9}",
                "operation", "calls", "method", "requests", "mandatory", "median"
            );
            let n = f64::from(s.projects.max(1));
            let mut ops: Vec<&String> = s.calls.keys().collect();
            for k in s.http_requests.keys() {
                if let Some((op, _)) = k.split_once(' ')
                    && !ops.iter().any(|o| o.as_str() == op)
                {
                    ops.push(s.calls.get_key_value(op).map_or(k, |(k, _)| k));
                }
            }
            for op in ops {
                let calls = s.calls.get(op).copied().unwrap_or(0.0);
                let prefix = format!("{op} ");
                let mut first = true;
                for (key, count) in s
                    .http_requests
                    .iter()
                    .filter(|(k, _)| k.starts_with(&prefix))
                {
                    let method = &key[prefix.len()..];
                    let mandatory = s
                        .floor
                        .operations
                        .iter()
                        .find(|m| &m.operation == op && m.method == method)
                        .map(|m| m.per_project.to_string())
                        .unwrap_or_else(|| "-".into());
                    let median = s
                        .latency_median_ms
                        .get(key)
                        .map(|ms| format!("{ms:.0} ms"))
                        .unwrap_or_default();
                    let head = if first {
                        format!("  {op:<30} {:>7.2}", calls / n)
                    } else {
                        format!("  {:<30} {:>7}", "", "")
                    };
                    first = false;
                    let _ = writeln!(
                        o,
                        "{head} {method:>7} {:>8.2} {mandatory:>9} {median:>9}",
                        *count as f64 / n
                    );
                }
                if first {
                    let _ = writeln!(o, "  {op:<30} {:>7.2}", calls / n);
                }
            }
            if !s.floor.missing.is_empty() {
                let _ = writeln!(
                    o,
                    "  (no latency sample for: {}; the floor is too low)",
                    s.floor.missing.join(", ")
                );
            }
        }
        let _ = writeln!(
            o,
            "\nSteady state: one forced reconcile of N unchanged projects"
        );
        let _ = writeln!(
            o,
            "{:>5} {:>9} {:>7} {:>7} {:>11}",
            "N", "time", "reads", "writes", "reads/proj"
        );
        for s in &r.convergence {
            let _ = writeln!(
                o,
                "{:>5} {:>9} {:>7} {:>7} {:>11.1}",
                s.projects,
                secs(s.steady.seconds),
                s.steady.reads,
                s.steady.writes,
                s.steady.reads / f64::from(s.projects.max(1))
            );
        }
        let _ = writeln!(
            o,
            "\nSteady state with the drift check: one period, N converged projects left alone"
        );
        let _ = writeln!(
            o,
            "{:>5} {:>7} {:>8} {:>8} {:>7} {:>7} {:>11} {:>12}",
            "N", "period", "checked", "drifted", "reads", "writes", "reads/proj", "passes"
        );
        for s in &r.convergence {
            let Some(d) = &s.drift else { continue };
            let _ = writeln!(
                o,
                "{:>5} {:>7} {:>8} {:>8} {:>7} {:>7} {:>11.2} {:>12}",
                s.projects,
                format!("{} s", d.period_s),
                d.checked,
                d.drifted,
                d.reads,
                d.writes,
                d.reads / f64::from(s.projects.max(1)),
                d.reconciles
            );
        }
        let _ = writeln!(
            o,
            "reads/proj = reads of one period ÷ N (= per project per 5 min at the default \
             --resync-seconds 300); calls: {}",
            r.convergence
                .iter()
                .filter_map(|s| s
                    .drift
                    .as_ref()
                    .map(|d| format!("N = {}: {:?}", s.projects, d.calls)))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    if let Some(x) = &r.reaction {
        let _ = writeln!(
            o,
            "\nReaction: spec patch → first OpenStack request ({} changes)",
            x.samples
        );
        let _ = writeln!(
            o,
            "  first call: median {:.0} ms, p99 {:.0} ms;  until Ready: median {:.0} ms, p99 {:.0} ms",
            x.first_call_median_ms, x.first_call_p99_ms, x.ready_median_ms, x.ready_p99_ms
        );
    }
    if let Some(x) = &r.memory {
        let _ = writeln!(o, "\nMemory (a fresh operator, RSS)");
        let _ = writeln!(
            o,
            "  zero CRs: {:.1} MiB (VmHWM {:.1} MiB)",
            mib(x.baseline.rss_kib),
            mib(x.baseline.hwm_kib)
        );
        let _ = writeln!(
            o,
            "  {} flavors: peak {:.1} MiB (VmHWM; sampled {:.1} MiB), idle after convergence {:.1} MiB, after deleting them {:.1} MiB",
            x.flavors,
            mib(x.peak_hwm_kib),
            mib(x.sampled_peak_rss_kib),
            mib(x.idle.rss_kib),
            mib(x.after_delete.rss_kib)
        );
        let _ = writeln!(
            o,
            "  {} flavors Ready in {}, deleted in {}; requests waited {} for the limiter in all; \
             {} requests retried, {} calls failed",
            x.flavors,
            secs(x.converge_s),
            secs(x.delete_s),
            secs(x.rate_limit_wait_s),
            x.trouble.retried_requests,
            x.trouble.failed_calls
        );
        let per: Vec<String> = x
            .calls
            .iter()
            .map(|(op, n)| {
                let ms = x
                    .mean_latency_ms
                    .get(op)
                    .map(|ms| format!(", mean {ms:.0} ms"))
                    .unwrap_or_default();
                format!("{op} {:.2}/flavor{ms}", n / f64::from(x.flavors.max(1)))
            })
            .collect();
        let _ = writeln!(o, "  calls: {}", per.join("; "));
    }
    if let Some(v) = &r.virtual_kubelet {
        crate::vk_report::render(&mut o, v);
    }
    if let Some(t) = &r.fake_tenants {
        render_fake_tenants(&mut o, t);
    }
    if !r.problems.is_empty() {
        let _ = writeln!(o, "\nPROBLEMS:");
        for p in &r.problems {
            let _ = writeln!(o, "  - {p}");
        }
    }
    let _ = writeln!(o, "\nwall time {}", secs(r.wall_time_s));
    o
}

/// Calls per tenant, `op n` pairs, largest first.
fn per_tenant(calls: &BTreeMap<String, f64>, n: u32) -> String {
    let mut v: Vec<(&String, f64)> = calls
        .iter()
        .map(|(op, c)| (op, c / f64::from(n.max(1))))
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    v.iter()
        .map(|(op, c)| format!("{op} {c:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `--only tenants` section.
fn render_fake_tenants(o: &mut String, t: &crate::fake_tenants::FakeTenantsRun) {
    let n = t.tenants;
    let per = |x: f64| x / f64::from(n.max(1));
    let cloud = if t.paced.is_some() {
        "paced: each call holds the client's limiter per HTTP request for the service time \
         the real cloud took, the server side unlimited (a cloud with spare capacity)"
    } else {
        "no HTTP client, no limiter, so the times are the operator's and the Kubernetes API's"
    };
    let _ = writeln!(
        o,
        "\nTenants on the in-memory OpenStack ({n} full projects; the cloud is in-process, \
         {cloud}; the fake's own state is in the RSS, so the memory is an upper bound of the \
         operator's)"
    );
    let _ = writeln!(
        o,
        "  RSS: zero CRs {:.1} MiB; {n} Ready {:.1} MiB; after a forced reconcile of all {:.1} MiB; \
         after deleting all {:.1} MiB; peak {:.1} MiB (VmHWM; sampled {:.1} MiB); {:.1} KiB per tenant",
        mib(t.baseline.rss_kib),
        mib(t.converged.rss_kib),
        mib(t.after_reconcile.rss_kib),
        mib(t.after_delete.rss_kib),
        mib(t.peak_hwm_kib),
        mib(t.sampled_peak_rss_kib),
        t.kib_per_tenant
    );
    if let (Some(fake), Some(op)) = (t.fake_state_kib, t.operator_estimate_kib) {
        let _ = writeln!(
            o,
            "  of which the fake's state ~{:.1} MiB (the in-memory cloud alone filled with {n} tenants: \
             {:.1} KiB per tenant); the operator's share at {n} Ready ~{:.1} MiB",
            mib(fake),
            fake as f64 / f64::from(n.max(1)),
            mib(op)
        );
    }
    let _ = writeln!(
        o,
        "  {n} Ready in {} (applied in {}; first Ready {}, median {}), deleted in {}",
        secs(t.converge_s),
        secs(t.apply_s),
        secs(t.first_ready_s),
        secs(t.median_ready_s),
        secs(t.delete_s)
    );
    if let Some(p) = &t.paced {
        let _ = writeln!(
            o,
            "  paced from {} (N = {}; {} operations, others {:.0} ms): {:.0} requests ({:.1} per \
             tenant) at {:.1}/s; floor (requests ÷ allowed rate) {}, ratio {:.2}; {:.1} in flight \
             on average; limiter wait {}",
            p.source,
            p.source_projects,
            p.operations,
            p.default_ms,
            p.requests,
            p.requests_per_tenant,
            p.achieved_rps,
            secs(p.floor_s),
            p.ratio,
            p.mean_in_flight,
            secs(p.limiter_wait_s)
        );
    }
    let _ = writeln!(
        o,
        "  calls per tenant to converge: {:.1} ({:.1} reads, {:.1} writes): {}",
        per(t.reads + t.writes),
        per(t.reads),
        per(t.writes),
        per_tenant(&t.calls, n)
    );
    if let Some(s) = &t.steady {
        let _ = writeln!(
            o,
            "  forced reconcile of all: {} reconciles in {}, per tenant {:.1} reads, {:.1} writes: {}",
            s.reconciles,
            secs(s.seconds),
            per(s.reads),
            per(s.writes),
            per_tenant(&s.calls, n)
        );
    }
    let (dr, dw) = crate::scenarios::split(&t.delete_calls);
    let _ = writeln!(
        o,
        "  calls per tenant to delete: {:.1} reads, {:.1} writes: {}",
        per(dr),
        per(dw),
        per_tenant(&t.delete_calls, n)
    );
    if t.left.values().any(|v| *v > 0) {
        let _ = writeln!(o, "  left in the fake after deletion: {:?}", t.left);
    }
}
