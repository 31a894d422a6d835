//! The virtual kubelet's figures (`--only vk`): what is recorded and how it is printed.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::machine::{Memory, mib};

/// Both runs of the virtual kubelet measurement.
#[derive(Debug, Default, Serialize)]
pub struct VkRun {
    /// The binary against the real Zun of the test cloud.
    pub real: Option<RealRun>,
    /// The provider with the in-memory Zun, for the pod count real Zun cannot hold here.
    pub fake: Option<FakeRun>,
    /// The binary in `--tenants` mode against real Zun and Neutron (`--vk-tenants`).
    pub tenants: Option<TenantsRun>,
    /// Several tenant nodes in one process on in-memory Zun and Neutron (`--vk-tenants`).
    pub fake_tenants: Option<FakeTenantsRun>,
}

/// N pods spread over the tenants of one `--tenants` process, against real Zun and Neutron.
#[derive(Debug, Default, Serialize)]
pub struct TenantsRun {
    /// The tenants' nodes (one per `ZunTenant`).
    pub nodes: Vec<String>,
    /// The clouds.yaml entries the tenants' application credentials came from.
    pub clouds: Vec<String>,
    /// Pods, spread evenly.
    pub pods: u32,
    /// The process's `--poll-interval-seconds`.
    pub poll_interval_s: u64,
    /// The process's memory: its nodes Ready with no pod, 5 s after.
    pub memory_idle: Memory,
    /// From sending the first pod until the bench saw the last Running, in seconds.
    pub start_s: f64,
    /// `pods / start_s × 60`.
    pub start_pods_per_minute: f64,
    /// Median of the per-pod seconds from sending it until seen Running.
    pub running_median_s: f64,
    /// 99th percentile (nearest rank) of the same.
    pub running_p99_s: f64,
    /// OpenStack requests from the first pod sent until the last seen Running.
    pub start_calls: Calls,
    /// With the pods Running, 5 s after the last.
    pub memory_running: Memory,
    /// OpenStack requests while the pods ran untouched.
    pub steady_calls: Calls,
    /// From the delete requests until the last pod object was gone, in seconds.
    pub delete_s: f64,
    /// `pods / delete_s × 60`.
    pub delete_pods_per_minute: f64,
    /// OpenStack requests while deleting.
    pub delete_calls: Calls,
    /// After the pods were deleted.
    pub memory_after_delete: Memory,
    /// Pods that ended `Failed`, with their reason.
    pub failed_pods: Vec<String>,
}

/// Tenant nodes in one process on the in-memory Zun and Neutron.
#[derive(Debug, Default, Serialize)]
pub struct FakeTenantsRun {
    /// The tenants' nodes.
    pub nodes: Vec<String>,
    /// Pods, spread evenly.
    pub pods: u32,
    /// What ran.
    pub note: String,
    /// Nodes Ready with no pod, 5 s after.
    pub memory_idle: Memory,
    /// The pods Running, 5 s after the last.
    pub memory_running: Memory,
    /// After they were deleted.
    pub memory_after_delete: Memory,
    /// From the first pod sent until all seen Running, in seconds.
    pub start_s: f64,
    /// From the delete requests until all were gone, in seconds.
    pub delete_s: f64,
    /// The fakes' call counters at exit (all tenants), by operation.
    pub calls: BTreeMap<String, u64>,
}

/// Zun calls over a window, from the node's own counters.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Calls {
    /// Length of the window, in seconds.
    pub seconds: f64,
    /// Zun calls by operation (`openstack_operator_openstack_api_calls_total{service="container"}`
    /// deltas, or the request log when the metrics cannot be read: see `RealRun::counted_from`).
    pub by_operation: BTreeMap<String, f64>,
    /// Σ of `by_operation`.
    pub total: f64,
    /// HTTP requests to OpenStack by `"<operation> <METHOD>"` (every attempt), from the log.
    pub http_requests: BTreeMap<String, u64>,
    /// HTTP requests to OpenStack by service (`container` = Zun, `network` = Neutron, ...),
    /// every attempt, from the log.
    pub by_service: BTreeMap<String, u64>,
    /// Requests the client retried in the window (from the log: attempts beyond calls).
    pub retried_requests: u64,
}

/// Pod bound → the node's first Zun request for it.
#[derive(Debug, Default, Serialize)]
pub struct VkReaction {
    /// Pods measured (one at a time, the node otherwise idle).
    pub samples: usize,
    /// Per pod, ms from sending the pod (created with `spec.nodeName`) to sending the
    /// `create_container` request for it (the request log line under the pod's span: its
    /// timestamp minus its duration).
    pub first_create_ms: Vec<f64>,
    /// Median of `first_create_ms`.
    pub first_create_median_ms: f64,
    /// 99th percentile (nearest rank) of `first_create_ms`.
    pub first_create_p99_ms: f64,
    /// Per pod, ms from sending the pod to the first Zun request sent after it, whatever it
    /// is (normally the list that opens the pass the pod's event woke).
    pub first_request_ms: Vec<f64>,
    /// Median of `first_request_ms`.
    pub first_request_median_ms: f64,
    /// Per pod, ms from sending it until the bench (polling every 250 ms) saw it Running.
    pub running_ms: Vec<f64>,
    /// Median of `running_ms`.
    pub running_median_ms: f64,
    /// Per pod, ms from the bench first seeing Zun list the pod's container `Running` (its
    /// list polled every 100 ms) until it saw the pod `Running` (polled every 100 ms): the
    /// node's own share of the start, Zun's excluded.
    pub running_after_zun_ms: Vec<f64>,
    /// Median of `running_after_zun_ms`.
    pub running_after_zun_median_ms: f64,
    /// 99th percentile (nearest rank) of `running_after_zun_ms`.
    pub running_after_zun_p99_ms: f64,
}

/// N pods created, Running, then deleted, against real Zun.
#[derive(Debug, Default, Serialize)]
pub struct RealRun {
    /// The node's name.
    pub node: String,
    /// Pods.
    pub pods: u32,
    /// The node's `--poll-interval-seconds` (one Zun list per pass).
    pub poll_interval_s: u64,
    /// `metrics` (the node's `/metrics` on its kubelet API) or `log` (its request log lines).
    pub counted_from: String,
    /// The node's memory: Ready with no pod, 5 s after Ready.
    pub memory_idle: Memory,
    /// Reaction time, measured before the N pods.
    pub reaction: VkReaction,
    /// From sending the first pod until the bench saw the last Running, in seconds.
    pub start_s: f64,
    /// `pods / start_s × 60`.
    pub start_pods_per_minute: f64,
    /// Per pod, seconds from sending it until seen Running (polled every 500 ms).
    pub running_s: Vec<f64>,
    /// Median of `running_s`.
    pub running_median_s: f64,
    /// 99th percentile (nearest rank) of `running_s`.
    pub running_p99_s: f64,
    /// Zun calls from the first pod sent until the last seen Running.
    pub start_calls: Calls,
    /// The node's memory with the N pods Running, 5 s after the last.
    pub memory_running: Memory,
    /// Zun calls while the N pods ran untouched.
    pub steady_calls: Calls,
    /// `steady_calls.total / pods / minutes`.
    pub steady_per_pod_per_minute: f64,
    /// `steady_calls.total / minutes` (independent of N when the pass is one list).
    pub steady_per_minute: f64,
    /// From the delete requests until the last pod object was gone, in seconds.
    pub delete_s: f64,
    /// `pods / delete_s × 60`.
    pub delete_pods_per_minute: f64,
    /// Zun calls while deleting.
    pub delete_calls: Calls,
    /// The node's memory after the pods were deleted.
    pub memory_after_delete: Memory,
    /// Pods that ended `Failed` instead of Running, with their reason.
    pub failed_pods: Vec<String>,
}

/// The same provider and runtime with the in-memory Zun, in a process of its own.
#[derive(Debug, Default, Serialize)]
pub struct FakeRun {
    /// The node's name.
    pub node: String,
    /// Pods.
    pub pods: u32,
    /// What ran: the bench binary's `--fake-zun-node` mode.
    pub note: String,
    /// Ready with no pod, 5 s after Ready.
    pub memory_idle: Memory,
    /// The pods Running, 5 s after the last.
    pub memory_running: Memory,
    /// After they were deleted (VmHWM is the peak of the whole run).
    pub memory_after_delete: Memory,
    /// From the first pod sent until all seen Running, in seconds.
    pub start_s: f64,
    /// From the delete requests until all were gone, in seconds.
    pub delete_s: f64,
    /// The fake's call counters at exit, by operation.
    pub zun_calls: BTreeMap<String, u64>,
}

fn per(n: f64, d: u32) -> f64 {
    n / f64::from(d.max(1))
}

fn ops(c: &Calls, divisor: f64) -> String {
    let parts: Vec<String> = c
        .by_operation
        .iter()
        .map(|(op, n)| format!("{op} {:.2}", n / divisor))
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

fn mem(m: &Memory) -> String {
    format!("{:.1} MiB", mib(m.rss_kib))
}

/// The memory line of an in-memory run: idle, running and after deletion.
fn fake_memory(o: &mut String, [idle, running, after]: [&Memory; 3], pods: u32) {
    let _ = writeln!(
        o,
        "  memory (RSS): no pod {}, {} pods Running {}, after deleting them {}; peak (VmHWM) {:.1} MiB; {:.1} KiB per pod",
        mem(idle),
        pods,
        mem(running),
        mem(after),
        mib(after.hwm_kib),
        per(running.rss_kib as f64 - idle.rss_kib as f64, pods)
    );
}

/// `op n, ...` of the counters that are not zero.
fn nonzero(calls: &BTreeMap<String, u64>) -> String {
    calls
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(op, n)| format!("{op} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The readable section.
pub fn render(o: &mut String, v: &VkRun) {
    if let Some(r) = &v.real {
        let _ = writeln!(
            o,
            "\nZun virtual kubelet, real Zun: {} pods (busybox sleep), node {}, --poll-interval-seconds {}; Zun calls from the node's {}",
            r.pods, r.node, r.poll_interval_s, r.counted_from
        );
        let n = f64::from(r.pods.max(1));
        let _ = writeln!(
            o,
            "  start:  {} pods Running in {:.1} s = {:.1} pods/min; per pod Running after {:.1} s median, {:.1} s p99",
            r.pods, r.start_s, r.start_pods_per_minute, r.running_median_s, r.running_p99_s
        );
        let _ = writeln!(
            o,
            "          Zun calls per pod to start: {:.2} ({})",
            r.start_calls.total / n,
            ops(&r.start_calls, n)
        );
        let minutes = (r.steady_calls.seconds / 60.0).max(f64::MIN_POSITIVE);
        let _ = writeln!(
            o,
            "  steady: {:.0} s with {} pods Running: {:.3} Zun calls per pod per minute ({:.1} per minute for the node: {})",
            r.steady_calls.seconds,
            r.pods,
            r.steady_per_pod_per_minute,
            r.steady_per_minute,
            ops(&r.steady_calls, minutes)
        );
        let _ = writeln!(
            o,
            "  delete: {} pods gone in {:.1} s = {:.1} pods/min; Zun calls per pod: {:.2} ({})",
            r.pods,
            r.delete_s,
            r.delete_pods_per_minute,
            r.delete_calls.total / n,
            ops(&r.delete_calls, n)
        );
        let retried = r.start_calls.retried_requests
            + r.steady_calls.retried_requests
            + r.delete_calls.retried_requests;
        let _ = writeln!(
            o,
            "  requests retried by the client: {retried} (start {}, steady {}, delete {})",
            r.start_calls.retried_requests,
            r.steady_calls.retried_requests,
            r.delete_calls.retried_requests
        );
        let _ = writeln!(
            o,
            "  memory (RSS of the node process): no pod {}, {} pods Running {}, after deleting them {}; peak (VmHWM) {:.1} MiB",
            mem(&r.memory_idle),
            r.pods,
            mem(&r.memory_running),
            mem(&r.memory_after_delete),
            mib(r.memory_after_delete.hwm_kib)
        );
        let x = &r.reaction;
        let _ = writeln!(
            o,
            "  reaction ({} pods, one at a time, node otherwise idle): pod sent → its create_container sent {:.0} ms median, {:.0} ms p99; → first Zun request of the pass {:.0} ms median; → seen Running {:.0} ms median; Zun lists it Running → pod seen Running {:.0} ms median, {:.0} ms p99",
            x.samples,
            x.first_create_median_ms,
            x.first_create_p99_ms,
            x.first_request_median_ms,
            x.running_median_ms,
            x.running_after_zun_median_ms,
            x.running_after_zun_p99_ms
        );
        if !r.failed_pods.is_empty() {
            let _ = writeln!(o, "  pods that failed: {}", r.failed_pods.join("; "));
        }
    }
    if let Some(t) = &v.tenants {
        render_tenants(o, t);
    }
    if let Some(f) = &v.fake_tenants {
        let _ = writeln!(
            o,
            "\nZun virtual kubelet --tenants, in-memory Zun and Neutron: {} pods over {} tenant nodes ({})",
            f.pods,
            f.nodes.len(),
            f.note
        );
        fake_memory(
            o,
            [&f.memory_idle, &f.memory_running, &f.memory_after_delete],
            f.pods,
        );
        let _ = writeln!(
            o,
            "  {} pods Running in {:.1} s = {:.0} pods/min, deleted in {:.1} s; fake calls: {}",
            f.pods,
            f.start_s,
            f64::from(f.pods) / f.start_s.max(f64::MIN_POSITIVE) * 60.0,
            f.delete_s,
            nonzero(&f.calls)
        );
    }
    if let Some(f) = &v.fake {
        let _ = writeln!(
            o,
            "\nZun virtual kubelet, in-memory Zun: {} pods, node {} ({})",
            f.pods, f.node, f.note
        );
        fake_memory(
            o,
            [&f.memory_idle, &f.memory_running, &f.memory_after_delete],
            f.pods,
        );
        let _ = writeln!(
            o,
            "  {} pods Running in {:.1} s, deleted in {:.1} s; fake Zun calls: {}",
            f.pods,
            f.start_s,
            f.delete_s,
            nonzero(&f.zun_calls)
        );
    }
}

/// Requests per pod by service: `Zun 4.00, Neutron 3.00, identity 0.02`.
fn services(c: &Calls, pods: f64) -> String {
    let name = |s: &str| match s {
        "container" => "Zun".to_string(),
        "network" => "Neutron".to_string(),
        other => other.to_string(),
    };
    let parts: Vec<String> = c
        .by_service
        .iter()
        .map(|(s, n)| format!("{} {:.2}", name(s), *n as f64 / pods))
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

fn render_tenants(o: &mut String, t: &TenantsRun) {
    let n = f64::from(t.pods.max(1));
    let _ = writeln!(
        o,
        "\nZun virtual kubelet --tenants, real Zun and Neutron: {} pods (busybox sleep) over {} tenants ({}; nodes {}), --poll-interval-seconds {}; requests from the process's log",
        t.pods,
        t.nodes.len(),
        t.clouds.join(", "),
        t.nodes.join(", "),
        t.poll_interval_s
    );
    let _ = writeln!(
        o,
        "  start:  {} pods Running in {:.1} s = {:.1} pods/min; per pod Running after {:.1} s median, {:.1} s p99",
        t.pods, t.start_s, t.start_pods_per_minute, t.running_median_s, t.running_p99_s
    );
    let _ = writeln!(
        o,
        "          requests per pod to start: {} ({})",
        services(&t.start_calls, n),
        ops(&t.start_calls, n)
    );
    let minutes = (t.steady_calls.seconds / 60.0).max(f64::MIN_POSITIVE);
    let _ = writeln!(
        o,
        "  steady: {:.0} s with {} pods Running: requests per pod per minute {}",
        t.steady_calls.seconds,
        t.pods,
        services(&t.steady_calls, n * minutes)
    );
    let _ = writeln!(
        o,
        "  delete: {} pods gone in {:.1} s = {:.1} pods/min; requests per pod {}",
        t.pods,
        t.delete_s,
        t.delete_pods_per_minute,
        services(&t.delete_calls, n)
    );
    let _ = writeln!(
        o,
        "  memory (RSS of the process): no pod {}, {} pods Running {}, after deleting them {}; peak (VmHWM) {:.1} MiB",
        mem(&t.memory_idle),
        t.pods,
        mem(&t.memory_running),
        mem(&t.memory_after_delete),
        mib(t.memory_after_delete.hwm_kib)
    );
    if !t.failed_pods.is_empty() {
        let _ = writeln!(o, "  pods that failed: {}", t.failed_pods.join("; "));
    }
}
