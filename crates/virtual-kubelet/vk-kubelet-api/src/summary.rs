//! Container samples → the kubelet's `/stats/summary` JSON
//! (`stats/v1alpha1` `Summary`) and `/metrics/resource` text (pure).
//!
//! metrics-server scrapes `/metrics/resource` and needs, per container,
//! both `container_cpu_usage_seconds_total` (a cumulative counter; it
//! computes rates itself) and `container_memory_working_set_bytes`; a
//! container missing either is dropped by it, so a sample without CPU is
//! left out of the text rather than shown with a made-up figure.

use std::collections::HashMap;
use std::fmt::Write;

use serde_json::{Value, json};

/// One container's resource sample.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerSample {
    /// The pod container's name.
    pub name: String,
    /// When it started.
    pub start_time: Option<jiff::Timestamp>,
    /// When the sample was taken.
    pub at: jiff::Timestamp,
    /// Cumulative CPU time, core-seconds.
    pub cpu_seconds: Option<f64>,
    /// Working set (usage minus inactive file cache), bytes.
    pub memory_working_set_bytes: Option<u64>,
    /// Memory limit, bytes.
    pub memory_limit_bytes: Option<u64>,
}

/// One pod's samples.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodSample {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// The pod's start time.
    pub start_time: Option<jiff::Timestamp>,
    /// Its running containers.
    pub containers: Vec<ContainerSample>,
}

/// The previous cumulative CPU sample per (pod uid, container), to turn
/// counters into `usageNanoCores` as the kubelet does between two scrapes.
#[derive(Debug, Default)]
pub struct CpuRates {
    last: HashMap<(String, String), (jiff::Timestamp, f64)>,
}

impl CpuRates {
    /// Record `s` and return its rate in nanocores since the previous
    /// sample, if there was one strictly before it.
    pub fn observe(&mut self, uid: &str, s: &ContainerSample) -> Option<u64> {
        let cpu = s.cpu_seconds?;
        let key = (uid.to_string(), s.name.clone());
        let prev = self.last.insert(key, (s.at, cpu));
        let (t0, c0) = prev?;
        let dt = s.at.duration_since(t0).as_secs_f64();
        if dt <= 0.0 || cpu < c0 {
            return None;
        }
        Some(((cpu - c0) / dt * 1e9).round() as u64)
    }

    /// Forget containers not in `pods`.
    pub fn retain(&mut self, pods: &[PodSample]) {
        let live: std::collections::HashSet<(String, String)> = pods
            .iter()
            .flat_map(|p| p.containers.iter().map(|c| (p.uid.clone(), c.name.clone())))
            .collect();
        self.last.retain(|k, _| live.contains(k));
    }
}

fn ts(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn cpu_json(at: jiff::Timestamp, seconds: Option<f64>, nano_cores: Option<u64>) -> Option<Value> {
    let seconds = seconds?;
    let mut v = json!({"time": ts(at), "usageCoreNanoSeconds": (seconds * 1e9).round() as u64});
    if let Some(n) = nano_cores {
        v["usageNanoCores"] = json!(n);
    }
    Some(v)
}

fn memory_json(at: jiff::Timestamp, ws: Option<u64>, limit: Option<u64>) -> Option<Value> {
    let ws = ws?;
    let mut v = json!({"time": ts(at), "workingSetBytes": ws, "usageBytes": ws});
    if let Some(l) = limit
        && l >= ws
    {
        v["availableBytes"] = json!(l - ws);
    }
    Some(v)
}

/// The `/stats/summary` document; `rates` gives `usageNanoCores`.
pub fn summary(
    node_name: &str,
    node_start: jiff::Timestamp,
    now: jiff::Timestamp,
    pods: &[PodSample],
    rates: &mut CpuRates,
) -> Value {
    let mut node_cpu = 0.0;
    let mut node_cpu_known = false;
    let mut node_nano = 0u64;
    let mut node_mem = 0u64;
    let mut pods_json = Vec::new();
    for p in pods {
        let mut containers = Vec::new();
        let (mut pod_cpu, mut pod_nano, mut pod_mem) = (0.0, 0u64, 0u64);
        let mut cpu_known = false;
        for c in &p.containers {
            let nano = rates.observe(&p.uid, c);
            let mut cj = json!({
                "name": c.name,
                "startTime": ts(c.start_time.or(p.start_time).unwrap_or(node_start)),
            });
            if let Some(cpu) = cpu_json(c.at, c.cpu_seconds, nano) {
                cj["cpu"] = cpu;
                cpu_known = true;
                pod_cpu += c.cpu_seconds.unwrap_or(0.0);
                pod_nano += nano.unwrap_or(0);
            }
            if let Some(m) = memory_json(c.at, c.memory_working_set_bytes, c.memory_limit_bytes) {
                cj["memory"] = m;
                pod_mem += c.memory_working_set_bytes.unwrap_or(0);
            }
            containers.push(cj);
        }
        let mut pj = json!({
            "podRef": {"name": p.name, "namespace": p.namespace, "uid": p.uid},
            "startTime": ts(p.start_time.unwrap_or(node_start)),
            "containers": containers,
            "memory": {"time": ts(now), "workingSetBytes": pod_mem, "usageBytes": pod_mem},
        });
        if cpu_known {
            pj["cpu"] = json!({"time": ts(now), "usageCoreNanoSeconds": (pod_cpu * 1e9).round() as u64,
                               "usageNanoCores": pod_nano});
            node_cpu += pod_cpu;
            node_nano += pod_nano;
            node_cpu_known = true;
        }
        node_mem += pod_mem;
        pods_json.push(pj);
    }
    rates.retain(pods);
    let mut node = json!({
        "nodeName": node_name,
        "startTime": ts(node_start),
        "memory": {"time": ts(now), "workingSetBytes": node_mem, "usageBytes": node_mem},
    });
    if node_cpu_known {
        node["cpu"] = json!({"time": ts(now), "usageCoreNanoSeconds": (node_cpu * 1e9).round() as u64,
                             "usageNanoCores": node_nano});
    }
    json!({"node": node, "pods": pods_json})
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The `/metrics/resource` text (Prometheus exposition, as the kubelet's
/// resource metrics endpoint: same names, labels and millisecond stamps).
pub fn resource_metrics(now: jiff::Timestamp, pods: &[PodSample]) -> String {
    let mut cpu = String::new();
    let mut mem = String::new();
    let mut start = String::new();
    let mut pod_cpu = String::new();
    let mut pod_mem = String::new();
    let (mut node_cpu, mut node_mem) = (0.0, 0u64);
    for p in pods {
        let (ns, name) = (esc(&p.namespace), esc(&p.name));
        let (mut pc, mut pm, mut all_cpu) = (0.0, 0u64, !p.containers.is_empty());
        for c in &p.containers {
            let (Some(s), Some(ws)) = (c.cpu_seconds, c.memory_working_set_bytes) else {
                all_cpu = false;
                continue;
            };
            let labels = format!(
                "container=\"{}\",namespace=\"{ns}\",pod=\"{name}\"",
                esc(&c.name)
            );
            let ms = c.at.as_millisecond();
            let _ = writeln!(
                cpu,
                "container_cpu_usage_seconds_total{{{labels}}} {s} {ms}"
            );
            let _ = writeln!(
                mem,
                "container_memory_working_set_bytes{{{labels}}} {ws} {ms}"
            );
            if let Some(st) = c.start_time {
                let _ = writeln!(
                    start,
                    "container_start_time_seconds{{{labels}}} {} {ms}",
                    st.as_second()
                );
            }
            pc += s;
            pm += ws;
        }
        if all_cpu {
            let ms = now.as_millisecond();
            let labels = format!("namespace=\"{ns}\",pod=\"{name}\"");
            let _ = writeln!(pod_cpu, "pod_cpu_usage_seconds_total{{{labels}}} {pc} {ms}");
            let _ = writeln!(
                pod_mem,
                "pod_memory_working_set_bytes{{{labels}}} {pm} {ms}"
            );
        }
        node_cpu += pc;
        node_mem += pm;
    }
    let ms = now.as_millisecond();
    let mut out = String::new();
    out.push_str("# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds\n# TYPE container_cpu_usage_seconds_total counter\n");
    out.push_str(&cpu);
    out.push_str("# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes\n# TYPE container_memory_working_set_bytes gauge\n");
    out.push_str(&mem);
    out.push_str("# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds\n# TYPE container_start_time_seconds gauge\n");
    out.push_str(&start);
    out.push_str("# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds\n# TYPE node_cpu_usage_seconds_total counter\n");
    let _ = writeln!(out, "node_cpu_usage_seconds_total {node_cpu} {ms}");
    out.push_str("# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes\n# TYPE node_memory_working_set_bytes gauge\n");
    let _ = writeln!(out, "node_memory_working_set_bytes {node_mem} {ms}");
    out.push_str("# HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds\n# TYPE pod_cpu_usage_seconds_total counter\n");
    out.push_str(&pod_cpu);
    out.push_str("# HELP pod_memory_working_set_bytes [STABLE] Current working set of the pod in bytes\n# TYPE pod_memory_working_set_bytes gauge\n");
    out.push_str(&pod_mem);
    out.push_str("# HELP scrape_error [ALPHA] 1 if there was an error while getting container metrics, 0 otherwise\n# TYPE scrape_error gauge\nscrape_error 0\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }

    fn pod(cpu: Option<f64>, at: &str) -> PodSample {
        PodSample {
            namespace: "default".into(),
            name: "myapp-pod".into(),
            uid: "u1".into(),
            start_time: Some(t("2026-12-01T05:00:00Z")),
            containers: vec![ContainerSample {
                name: "myapp-container".into(),
                start_time: Some(t("2026-12-01T05:00:01Z")),
                at: t(at),
                cpu_seconds: cpu,
                memory_working_set_bytes: Some(5 * 1024 * 1024),
                memory_limit_bytes: Some(64 * 1024 * 1024),
            }],
        }
    }

    #[test]
    fn summary_has_memory_and_cpu_rates_from_two_samples() {
        let mut rates = CpuRates::default();
        let start = t("2026-12-01T04:00:00Z");
        let first = summary(
            "vk",
            start,
            t("2026-12-01T06:00:00Z"),
            &[pod(Some(2.0), "2026-12-01T06:00:00Z")],
            &mut rates,
        );
        let c = &first["pods"][0]["containers"][0];
        assert_eq!(c["memory"]["workingSetBytes"], 5 * 1024 * 1024);
        assert_eq!(c["memory"]["availableBytes"], 59 * 1024 * 1024);
        assert_eq!(c["cpu"]["usageCoreNanoSeconds"], 2_000_000_000u64);
        assert!(c["cpu"].get("usageNanoCores").is_none());
        assert_eq!(first["pods"][0]["podRef"]["name"], "myapp-pod");
        assert_eq!(first["node"]["nodeName"], "vk");
        assert_eq!(first["node"]["memory"]["workingSetBytes"], 5 * 1024 * 1024);
        let second = summary(
            "vk",
            start,
            t("2026-12-01T06:00:10Z"),
            &[pod(Some(3.0), "2026-12-01T06:00:10Z")],
            &mut rates,
        );
        // One core-second over ten seconds: 0.1 core.
        assert_eq!(
            second["pods"][0]["containers"][0]["cpu"]["usageNanoCores"],
            100_000_000u64
        );
        assert_eq!(second["node"]["cpu"]["usageNanoCores"], 100_000_000u64);
    }

    #[test]
    fn summary_without_cpu_leaves_it_out() {
        let mut rates = CpuRates::default();
        let s = summary(
            "vk",
            t("2026-12-01T04:00:00Z"),
            t("2026-12-01T06:00:00Z"),
            &[pod(None, "2026-12-01T06:00:00Z")],
            &mut rates,
        );
        assert!(s["pods"][0]["containers"][0].get("cpu").is_none());
        assert!(s["pods"][0].get("cpu").is_none());
        assert!(s["node"].get("cpu").is_none());
    }

    #[test]
    fn resource_metrics_text() {
        let text = resource_metrics(
            t("2026-12-01T06:00:00Z"),
            &[pod(Some(1.5), "2026-12-01T06:00:00Z")],
        );
        assert!(text.contains("container_cpu_usage_seconds_total{container=\"myapp-container\",namespace=\"default\",pod=\"myapp-pod\"} 1.5 1796104800000\n"), "{text}");
        assert!(text.contains("container_memory_working_set_bytes{container=\"myapp-container\",namespace=\"default\",pod=\"myapp-pod\"} 5242880 1796104800000\n"));
        assert!(text.contains(
            "pod_memory_working_set_bytes{namespace=\"default\",pod=\"myapp-pod\"} 5242880"
        ));
        assert!(text.contains("node_memory_working_set_bytes 5242880"));
        let none = resource_metrics(
            t("2026-12-01T06:00:00Z"),
            &[pod(None, "2026-12-01T06:00:00Z")],
        );
        assert!(!none.contains("myapp-container"));
    }
}
