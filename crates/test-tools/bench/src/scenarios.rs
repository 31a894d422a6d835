//! The measurements. Each takes a running operator and leaves the cluster as it found it on
//! success (cleanup after failures is the caller's).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use api::{OpenstackFlavor, OpenstackProject};
use e2e::Operator;
use e2e::k8s;
use e2e::metrics::{Metrics, delta, is_read_operation};
use e2e::wait::{Check, wait_for};
use kube::ResourceExt as _;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::floor;
use crate::machine::Memory;
use crate::manifests;
use crate::oplog::{self, LogCursor};
use crate::report::{Drift, MemoryRun, Reaction, SizeRun, Steady, Trouble};
use crate::stats;
use crate::world::{Bench, Watched, settled};

/// Seconds the OpenStack requests spent waiting for the client-side limiter (sum).
const RATE_WAIT_SUM: &str = "openstack_operator_rate_limit_wait_seconds_sum";
/// Request duration histogram (seconds): its sum and count by operation.
const DURATION_SUM: &str = "openstack_operator_openstack_api_duration_seconds_sum";
const DURATION_COUNT: &str = "openstack_operator_openstack_api_duration_seconds_count";

/// Mean request duration (ms) by operation between two scrapes, from the histogram.
fn mean_latency_ms(before: &Metrics, after: &Metrics) -> BTreeMap<String, f64> {
    let sums = delta(
        &before.by_label(DURATION_SUM, "operation"),
        &after.by_label(DURATION_SUM, "operation"),
    );
    let counts = delta(
        &before.by_label(DURATION_COUNT, "operation"),
        &after.by_label(DURATION_COUNT, "operation"),
    );
    sums.iter()
        .filter_map(|(op, s)| {
            counts
                .get(op)
                .filter(|c| **c > 0.0)
                .map(|c| (op.clone(), s / c * 1000.0))
        })
        .collect()
}

/// Retried requests (transport errors, 5xx, 429, ...), by operation.
const RETRIES: &str = "openstack_operator_openstack_api_retries_total";

/// HTTP responses by status code (every attempt).
const RESPONSES: &str = "openstack_operator_openstack_api_responses_total";

/// What went wrong between two scrapes: retried requests and calls that failed after their
/// retries. A disturbed cloud (restarts, overload) shows here, so the figures can be judged.
/// A 404 is not trouble: it is how a lookup finds nothing (e.g. a flavor's derived ID before
/// its create), and a 404 is never retried, so each one is one call ending in `error`.
fn trouble(before: &Metrics, after: &Metrics) -> Trouble {
    let failed = |m: &Metrics| {
        m.sum(e2e::metrics::API_CALLS, &[("status", "error")])
            - m.sum(RESPONSES, &[("code", "404")])
    };
    Trouble {
        retried_requests: after.sum(RETRIES, &[]) - before.sum(RETRIES, &[]),
        failed_calls: failed(after) - failed(before),
    }
}

/// How long counters may take to settle.
pub(crate) const SETTLE: Duration = Duration::from_secs(300);

/// Reads and writes among the calls.
pub(crate) fn split(calls: &BTreeMap<String, f64>) -> (f64, f64) {
    let (mut reads, mut writes) = (0.0, 0.0);
    for (op, n) in calls {
        if is_read_operation(op) {
            reads += n;
        } else {
            writes += n;
        }
    }
    (reads, writes)
}

/// Per-size timeout: generous, since a busy machine is slow, but bounded so a stuck run ends.
pub fn size_timeout(n: u32, per_project: Duration) -> Duration {
    Duration::from_secs(120) + per_project * n
}

/// Creates `n` projects, waits for all to be Ready; forces one reconcile of all; deletes
/// them and waits until they are gone.
pub async fn convergence(
    bench: &Bench,
    op: &Operator,
    n: u32,
    users: &[String],
    per_project: Duration,
    drift_seconds: u64,
) -> anyhow::Result<SizeRun> {
    let timeout = size_timeout(n, per_project);
    let before = settled(op, SETTLE).await?;
    let mut cursor = LogCursor::at_end(op.log_path())?;
    let names: Vec<String> = (0..n)
        .map(|i| format!("{}n{n}-{i:03}", bench.prefix()))
        .collect();
    eprintln!("bench: creating {n} projects");
    let started = Instant::now();
    bench
        .apply_projects(
            &names,
            &bench.domain_name(),
            users,
            "openstack-operator bench project",
        )
        .await?;
    let ready = bench
        .wait_all_ready::<OpenstackProject>(
            op,
            names.len(),
            started,
            Duration::from_millis(250),
            timeout,
        )
        .await?;
    let converge_s = started.elapsed().as_secs_f64();
    let times: Vec<f64> = ready.values().map(Duration::as_secs_f64).collect();
    eprintln!("bench: {n} projects Ready in {converge_s:.1} s");
    let after = settled(op, SETTLE).await?;
    let calls = delta(&before.api_calls(), &after.api_calls());
    let (reads, writes) = split(&calls);
    let requests = oplog::parse(&cursor.read_new()?);
    let workload = check_workload(bench).await?;
    let busy_s = requests.iter().map(|r| r.duration_ms as f64).sum::<f64>() / 1000.0;
    let durations = oplog::durations_by_request(&requests);
    let latency_median_ms = durations
        .iter()
        .filter_map(|(k, v)| stats::median(v).map(|m| (k.clone(), m)))
        .collect();
    let requests_made: u64 = oplog::count_by_request(&requests).values().sum();
    let made_floor_s = if bench.limits.requests_per_second == 0 {
        0.0
    } else {
        requests_made as f64 / f64::from(bench.limits.requests_per_second)
    };
    let floor = floor::floor(
        n,
        &durations,
        &oplog::count_by_request(&requests),
        bench.limits.max_concurrent_calls,
        bench.limits.requests_per_second,
    );

    eprintln!("bench: forcing a reconcile of the {n} unchanged projects");
    let steady = steady_state(bench, op, &names, timeout).await?;
    let drift = if drift_seconds == 0 {
        None
    } else {
        eprintln!(
            "bench: one drift-check period ({drift_seconds} s) of the {n} converged projects"
        );
        Some(drift_period(op, n, drift_seconds, timeout).await?)
    };

    eprintln!("bench: deleting {n} projects");
    bench.remember_projects().await?;
    let before_delete = settled(op, SETTLE).await?;
    let started = Instant::now();
    bench.delete_all::<OpenstackProject>(op, timeout).await?;
    let delete_s = started.elapsed().as_secs_f64();
    eprintln!("bench: {n} projects gone in {delete_s:.1} s");
    let after_delete = settled(op, SETTLE).await?;
    let keystone_projects_left = bench.projects_in_domain().await?;
    let residue = bench.sweep_residue().await?;
    Ok(SizeRun {
        projects: n,
        http_requests: oplog::count_by_request(&requests),
        latency_median_ms,
        converge_s,
        first_ready_s: stats::min(&times).unwrap_or(converge_s),
        median_ready_s: stats::median(&times).unwrap_or(converge_s),
        calls,
        reads,
        writes,
        requests_made,
        achieved_rps: requests_made as f64 / converge_s.max(f64::EPSILON),
        made_floor_s,
        made_ratio: if made_floor_s > 0.0 {
            converge_s / made_floor_s
        } else {
            0.0
        },
        ratio: if floor.floor_s > 0.0 {
            converge_s / floor.floor_s
        } else {
            0.0
        },
        floor,
        request_time_s: busy_s,
        rate_limit_wait_s: after.sum(RATE_WAIT_SUM, &[]) - before.sum(RATE_WAIT_SUM, &[]),
        trouble: trouble(&before, &after),
        delete_trouble: trouble(&before_delete, &after_delete),
        mean_in_flight: busy_s / converge_s,
        busy_by_service_s: oplog::busy_by_service(&requests),
        service_times: oplog::service_times(&requests, serial_service),
        steady,
        drift,
        delete_s,
        delete_calls: delta(&before_delete.api_calls(), &after_delete.api_calls()),
        keystone_projects_left,
        residue,
        workload,
    })
}

/// Whether the converged projects are the intended workload (every user bound, OpenStack
/// holding what the spec asks for on a sample project); each finding is a problem of the run,
/// since the figures would then describe less work than the bench claims.
async fn check_workload(bench: &Bench) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    let projects = bench.list::<OpenstackProject>().await?;
    for p in &projects {
        let pending = p
            .status
            .as_ref()
            .map(|s| s.pending_users.clone())
            .unwrap_or_default();
        if !pending.is_empty() {
            found.push(format!(
                "project {}: users not bound (status.pendingUsers {pending:?})",
                p.name_any()
            ));
        }
    }
    let Some(sample) = projects.first() else {
        return Ok(found);
    };
    let status = sample.status.clone().unwrap_or_default();
    let pid = status.project_id.clone().unwrap_or_default();
    let cloud = &bench.cloud;
    let grants = cloud.identity.list_project_role_assignments(&pid).await?;
    // A user is bound by a grant of its own or by membership in the project's group.
    let mut bound: BTreeSet<String> = grants
        .iter()
        .filter_map(|a| match &a.actor {
            openstack::model::Actor::User(u) => Some(u.clone()),
            _ => None,
        })
        .collect();
    if let Some(gid) = &status.group_id {
        bound.extend(
            cloud
                .identity
                .list_group_users(gid)
                .await?
                .into_iter()
                .map(|u| u.id),
        );
    }
    let wanted = bench.user_names().len();
    if bound.len() != wanted {
        found.push(format!(
            "project {}: {} users bound in Keystone (grants or group membership), {wanted} expected: {grants:?}",
            sample.name_any(),
            bound.len()
        ));
    }
    if status.security_groups.len() != manifests::SECURITY_GROUPS.len() {
        found.push(format!(
            "project {}: {} security groups in status, {} expected",
            sample.name_any(),
            status.security_groups.len(),
            manifests::SECURITY_GROUPS.len()
        ));
    }
    for g in &status.security_groups {
        let sg = g.id.clone().unwrap_or_default();
        let rules = cloud
            .network
            .get_security_group(&sg)
            .await?
            .rules
            .iter()
            .filter(|r| r.direction == "ingress")
            .count();
        if rules != manifests::RULES.len() {
            found.push(format!(
                "project {}: security group {} has {rules} ingress rules, {} expected",
                sample.name_any(),
                g.name,
                manifests::RULES.len()
            ));
        }
    }
    let routers = status
        .networks
        .iter()
        .filter(|n| n.router_id.is_some())
        .count();
    if routers != manifests::NETWORKS.len() {
        found.push(format!(
            "project {}: {routers} routers in status, {} expected",
            sample.name_any(),
            manifests::NETWORKS.len()
        ));
    }
    if status.federation_rule.is_none() {
        found.push(format!(
            "project {}: no federation rule in status",
            sample.name_any()
        ));
    }
    Ok(found)
}

/// Sets the reconcile annotation on every project and counts the calls of the reconciles it
/// causes.
pub(crate) async fn steady_state(
    bench: &Bench,
    op: &impl Watched,
    names: &[String],
    timeout: Duration,
) -> anyhow::Result<Steady> {
    let api = bench.api::<OpenstackProject>();
    let before = settled(op, SETTLE).await?;
    let base = before.reconciles("OpenstackProject");
    let want = base + names.len() as f64;
    let started = Instant::now();
    for name in names {
        k8s::request_reconcile(&api, name).await?;
    }
    wait_for(
        timeout,
        Duration::from_millis(100),
        "the forced reconciles",
        async || {
            let now = op.metrics().await?.reconciles("OpenstackProject");
            Ok(if now >= want {
                Check::Done(())
            } else {
                Check::Pending(format!("{} of {} reconciles", now - base, names.len()))
            })
        },
    )
    .await?;
    let seconds = started.elapsed().as_secs_f64();
    let after = settled(op, SETTLE).await?;
    let calls = delta(&before.api_calls(), &after.api_calls());
    let (reads, writes) = split(&calls);
    Ok(Steady {
        reconciles: after.reconciles("OpenstackProject") - base,
        seconds,
        reads,
        writes,
        calls,
    })
}

/// Restarts the operator with `--resync-seconds period`, waits until its start-up passes are
/// done and a drift check has compared all `n` projects, then measures the calls from that
/// check's end to the next one's: one period of an idle operator. Restarts it with the long
/// period again afterwards, start-up passes done, so deletion is measured as before.
async fn drift_period(
    op: &Operator,
    n: u32,
    period: u64,
    timeout: Duration,
) -> anyhow::Result<Drift> {
    let original = op.resync_seconds();
    let mut cursor = LogCursor::at_end(op.log_path())?;
    op.restart_with_resync(Duration::from_secs(30), period)
        .await?;
    op.wait_ready(Duration::from_secs(120)).await?;
    startup_passes(op, n, timeout).await?;
    // The first check that compared all n ends the start-up; the next one ends the window.
    let first = next_drift_check(&mut cursor, n, timeout).await?;
    let before = op.metrics().await?;
    let second = next_drift_check(&mut cursor, n, Duration::from_secs(period * 3 + 60)).await?;
    let after = settled(op, SETTLE).await?;
    let calls = delta(&before.api_calls(), &after.api_calls());
    let (reads, writes) = split(&calls);
    let reconciles = after.reconciles("OpenstackProject") - before.reconciles("OpenstackProject");
    anyhow::ensure!(
        first.1 == 0,
        "the drift check before the window found {} of {n} projects different",
        first.1
    );
    op.restart_with_resync(Duration::from_secs(30), original)
        .await?;
    op.wait_ready(Duration::from_secs(120)).await?;
    startup_passes(op, n, timeout).await?;
    settled(op, SETTLE).await?;
    Ok(Drift {
        period_s: period,
        checked: second.0,
        drifted: second.1,
        reconciles,
        reads,
        writes,
        calls,
    })
}

/// Waits until a freshly started operator has reconciled the `n` projects once (the
/// controller's initial list) and its counters settled.
async fn startup_passes(op: &Operator, n: u32, timeout: Duration) -> anyhow::Result<()> {
    wait_for(
        timeout,
        Duration::from_millis(250),
        "the start-up passes",
        async || {
            let done = op.metrics().await?.reconciles("OpenstackProject");
            Ok(if done >= f64::from(n) {
                Check::Done(())
            } else {
                Check::Pending(format!("{done} of {n} reconciles"))
            })
        },
    )
    .await?;
    settled(op, SETTLE).await?;
    Ok(())
}

/// The next `drift check done` log line that compared `n` projects: (checked, drifted).
async fn next_drift_check(
    cursor: &mut LogCursor,
    n: u32,
    timeout: Duration,
) -> anyhow::Result<(u64, u64)> {
    wait_for(
        timeout,
        Duration::from_millis(100),
        "a drift check of every project",
        async || {
            for line in cursor.read_new()?.lines() {
                if let Some((checked, drifted)) = oplog::drift_check(line)
                    && checked >= u64::from(n)
                {
                    return Ok(Check::Done((checked, drifted)));
                }
            }
            Ok(Check::Pending("no drift check of every project yet".into()))
        },
    )
    .await
}

/// Changes one converged project's spec `samples` times, one change at a time, and measures
/// the time from sending each patch to the first OpenStack request of its reconcile (from the
/// adapter's debug log) and until the object is Ready again.
pub async fn reaction(
    bench: &Bench,
    op: &Operator,
    samples: usize,
    users: &[String],
    timeout: Duration,
) -> anyhow::Result<Reaction> {
    let api = bench.api::<OpenstackProject>();
    let name = format!("{}reaction", bench.prefix());
    let m = manifests::project(
        &name,
        &bench.namespace,
        &bench.run,
        &bench.domain_name(),
        users,
        "reaction sample 0",
    );
    bench.apply::<OpenstackProject>(&m).await?;
    k8s::wait_ready(&api, &name, timeout).await?;
    settled(op, SETTLE).await?;
    let mut first_call_ms = Vec::new();
    let mut ready_ms = Vec::new();
    let mut first_operations: BTreeMap<String, usize> = BTreeMap::new();
    eprintln!("bench: measuring the reaction to {samples} spec changes");
    for i in 1..=samples {
        let mut cursor = LogCursor::at_end(op.log_path())?;
        let sent = jiff::Timestamp::now();
        let started = Instant::now();
        k8s::merge_spec(
            &api,
            &name,
            json!({"description": format!("reaction sample {i}")}),
        )
        .await?;
        let first = wait_for(
            timeout,
            Duration::from_millis(10),
            "the first OpenStack request for the change",
            async || {
                let reqs = oplog::parse(&cursor.read_new()?);
                Ok(
                    match reqs
                        .into_iter()
                        .find(|r| r.object.as_deref() == Some(&name))
                    {
                        Some(r) => Check::Done(r),
                        None => Check::Pending("no request logged for the object yet".into()),
                    },
                )
            },
        )
        .await?;
        let gap = first.sent_at().duration_since(sent);
        first_call_ms.push(gap.as_secs_f64() * 1000.0);
        *first_operations.entry(first.operation.clone()).or_default() += 1;
        wait_for(
            timeout,
            Duration::from_millis(50),
            "the changed project to be Ready",
            async || {
                let p = api.get(&name).await?;
                Ok(if k8s::is_ready(&p) {
                    Check::Done(())
                } else {
                    Check::Pending(k8s::summary(&p))
                })
            },
        )
        .await?;
        ready_ms.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    // Let the last pass finish writing before the caller deletes the project.
    settled(op, SETTLE).await?;
    Ok(Reaction {
        samples,
        first_call_median_ms: stats::median(&first_call_ms).unwrap_or_default(),
        first_call_p99_ms: stats::percentile(&first_call_ms, 99.0).unwrap_or_default(),
        ready_median_ms: stats::median(&ready_ms).unwrap_or_default(),
        ready_p99_ms: stats::percentile(&ready_ms, 99.0).unwrap_or_default(),
        first_call_ms,
        ready_ms,
        first_operations,
    })
}

/// Samples a process's VmRSS every 200 ms until cancelled; returns the highest value seen.
pub(crate) fn sample_rss(
    pid: u32,
    stop: CancellationToken,
) -> (Arc<AtomicU64>, tokio::task::JoinHandle<()>) {
    let peak = Arc::new(AtomicU64::new(0));
    let p = peak.clone();
    let task = tokio::spawn(async move {
        loop {
            if let Ok(m) = Memory::of(pid) {
                p.fetch_max(m.rss_kib, Ordering::Relaxed);
            }
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
    });
    (peak, task)
}

/// Memory of a fresh operator: with zero CRs, while `flavors` flavors converge, idle after,
/// and after deleting them.
pub async fn memory(
    bench: &Bench,
    op: &Operator,
    flavors: u32,
    timeout: Duration,
) -> anyhow::Result<MemoryRun> {
    let pid = op.pid().context("the operator is not running")?;
    // Caches sync and the first allocations happen right after readiness.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let baseline = Memory::of(pid)?;
    let stop = CancellationToken::new();
    let (peak, sampler) = sample_rss(pid, stop.clone());
    let before = settled(op, SETTLE).await?;
    eprintln!("bench: creating {flavors} flavors");
    let started = Instant::now();
    for i in 0..flavors {
        let name = format!("{}f{i:04}", bench.prefix());
        bench
            .apply::<OpenstackFlavor>(&manifests::flavor(&name, &bench.run))
            .await?;
    }
    bench
        .wait_all_ready::<OpenstackFlavor>(
            op,
            flavors as usize,
            started,
            Duration::from_secs(1),
            timeout,
        )
        .await?;
    let converge_s = started.elapsed().as_secs_f64();
    eprintln!("bench: {flavors} flavors Ready in {converge_s:.1} s");
    let after = settled(op, SETTLE).await?;
    let calls = delta(&before.api_calls(), &after.api_calls());
    let mean_latency_ms = mean_latency_ms(&before, &after);
    let rate_limit_wait_s = after.sum(RATE_WAIT_SUM, &[]) - before.sum(RATE_WAIT_SUM, &[]);
    let trouble = trouble(&before, &after);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let idle = Memory::of(pid)?;
    eprintln!("bench: deleting {flavors} flavors");
    let started = Instant::now();
    bench.delete_all::<OpenstackFlavor>(op, timeout).await?;
    let delete_s = started.elapsed().as_secs_f64();
    settled(op, SETTLE).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after_delete = Memory::of(pid)?;
    stop.cancel();
    let _ = sampler.await;
    Ok(MemoryRun {
        flavors,
        baseline,
        sampled_peak_rss_kib: peak.load(Ordering::Relaxed),
        peak_hwm_kib: after_delete.hwm_kib,
        idle,
        after_delete,
        converge_s,
        delete_s,
        calls,
        mean_latency_ms,
        rate_limit_wait_s,
        trouble,
    })
}

/// Whether the test cloud's `service` answers one request at a time: `scripts/test-cloud`
/// runs each API as one uwsgi process with one thread (`TEST_CLOUD_API_WORKERS`), Keystone
/// with two (`TEST_CLOUD_KEYSTONE_WORKERS`).
fn serial_service(service: &str) -> bool {
    let (var, default) = if service == "identity" {
        ("TEST_CLOUD_KEYSTONE_WORKERS", 2)
    } else {
        ("TEST_CLOUD_API_WORKERS", 1)
    };
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(default)
        == 1
}
