//! The operator's JSON log as a source of timings: the adapter logs one `openstack request`
//! line (debug level, target `openstack::adapter::core`) per HTTP attempt, written when the
//! response arrived, with `operation`, `status` and `duration_ms`, inside the reconcile span
//! that names the object.

use std::collections::BTreeMap;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use jiff::{SignedDuration, Timestamp};
use serde::Serialize;
use serde_json::Value;

/// The log filter that makes the adapter log every request (and keeps the rest at info).
pub const DEBUG_ADAPTER_FILTER: &str = "info,openstack_sdk=warn,openstack::adapter::core=debug";

/// One `openstack request` line.
#[derive(Clone, Debug, PartialEq)]
pub struct OsRequest {
    /// When the line was written: the response had arrived.
    pub logged_at: Timestamp,
    /// The OpenStack service (`identity`, `network`, `container`, ...), as in the call
    /// counter's `service` label.
    pub service: String,
    /// The port method (`create_project`, ...), as in the call counter's `operation` label.
    pub operation: String,
    /// HTTP method (one port method may send several requests: Neutron creates are a POST
    /// and a PUT of the tags).
    pub method: String,
    /// HTTP status, or `timeout` / `transport`.
    pub status: String,
    /// Time from sending the request to its response, in milliseconds.
    pub duration_ms: u64,
    /// `metadata.name` of the object whose reconcile made the call, if any.
    pub object: Option<String>,
}

impl OsRequest {
    /// When the request was sent (after any wait for the client-side rate limiter).
    pub fn sent_at(&self) -> Timestamp {
        let back = SignedDuration::from_millis(i64::try_from(self.duration_ms).unwrap_or(i64::MAX));
        self.logged_at.checked_sub(back).unwrap_or(self.logged_at)
    }

    /// Whether OpenStack answered 2xx.
    pub fn succeeded(&self) -> bool {
        self.status.len() == 3 && self.status.starts_with('2')
    }
}

/// Parses one log line; `None` for anything but an `openstack request` line.
pub fn parse_line(line: &str) -> Option<OsRequest> {
    if !line.contains("openstack request") {
        return None;
    }
    let v: Value = serde_json::from_str(line).ok()?;
    if v["message"].as_str() != Some("openstack request") {
        return None;
    }
    let text = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    Some(OsRequest {
        logged_at: v["timestamp"].as_str()?.parse().ok()?,
        service: v["service"].as_str().unwrap_or_default().to_string(),
        operation: v["operation"].as_str()?.to_string(),
        method: v["method"].as_str().unwrap_or_default().to_string(),
        status: text(&v["status"]).unwrap_or_default(),
        duration_ms: v["duration_ms"].as_u64()?,
        object: v["span"]["object"]
            .as_str()
            .filter(|o| !o.is_empty())
            .map(str::to_string),
    })
}

/// `(checked, drifted)` of a `drift check done` line (the periodic drift check's summary).
pub fn drift_check(line: &str) -> Option<(u64, u64)> {
    if !line.contains("drift check done") {
        return None;
    }
    let v: Value = serde_json::from_str(line).ok()?;
    if v["message"].as_str() != Some("drift check done") {
        return None;
    }
    Some((v["checked"].as_u64()?, v["drifted"].as_u64()?))
}

/// Every `openstack request` line of a piece of log.
pub fn parse(text: &str) -> Vec<OsRequest> {
    text.lines().filter_map(parse_line).collect()
}

/// `"<operation> <METHOD>"`: the key of one kind of HTTP request.
pub fn request_key(operation: &str, method: &str) -> String {
    format!("{operation} {method}")
}

/// Durations (ms) of the successful requests, by [`request_key`].
pub fn durations_by_request(reqs: &[OsRequest]) -> BTreeMap<String, Vec<f64>> {
    let mut out: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for r in reqs.iter().filter(|r| r.succeeded()) {
        out.entry(request_key(&r.operation, &r.method))
            .or_default()
            .push(r.duration_ms as f64);
    }
    out
}

/// HTTP requests (every attempt, whatever its outcome), by [`request_key`].
pub fn count_by_request(reqs: &[OsRequest]) -> BTreeMap<String, u64> {
    let mut out: BTreeMap<String, u64> = BTreeMap::new();
    for r in reqs {
        *out.entry(request_key(&r.operation, &r.method)).or_default() += 1;
    }
    out
}

/// Seconds during which at least one request of a service was in flight (the union of its
/// requests' send-to-response intervals), by service: a service busy for nearly the whole
/// run was the bound, whatever the client-side limits allowed.
pub fn busy_by_service(reqs: &[OsRequest]) -> BTreeMap<String, f64> {
    let mut spans: BTreeMap<&str, Vec<(Timestamp, Timestamp)>> = BTreeMap::new();
    for r in reqs {
        spans
            .entry(r.service.as_str())
            .or_default()
            .push((r.sent_at(), r.logged_at));
    }
    spans
        .into_iter()
        .map(|(service, mut v)| {
            v.sort();
            let mut busy = 0.0;
            let mut current: Option<(Timestamp, Timestamp)> = None;
            for (start, end) in v {
                current = match current {
                    Some((s, e)) if start <= e => Some((s, e.max(end))),
                    Some((s, e)) => {
                        busy += e.duration_since(s).as_secs_f64();
                        Some((start, end))
                    }
                    None => Some((start, end)),
                };
            }
            if let Some((s, e)) = current {
                busy += e.duration_since(s).as_secs_f64();
            }
            (service.to_string(), busy)
        })
        .collect()
}

/// How long a server worked on one kind of request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct ServiceTime {
    /// Mean, over the successful requests, in ms.
    pub mean_ms: f64,
    /// Successful requests of the kind.
    pub requests: u32,
}

/// Service time of each kind of successful request, by `"service.operation"` and HTTP
/// method: how long the server worked on it, without the time it queued there.
/// For a service that `serial` says answers one request at a time (the test cloud's APIs
/// run one uwsgi process with one thread, Keystone excepted), a request's service time is
/// its response time less the later of its send time and the service's previous response,
/// which is exact for such a server; for any other service it is the request's duration.
pub fn service_times(
    reqs: &[OsRequest],
    serial: impl Fn(&str) -> bool,
) -> BTreeMap<String, BTreeMap<String, ServiceTime>> {
    let mut by_service: BTreeMap<&str, Vec<&OsRequest>> = BTreeMap::new();
    for r in reqs {
        by_service.entry(r.service.as_str()).or_default().push(r);
    }
    let mut sums: BTreeMap<String, BTreeMap<String, (f64, u32)>> = BTreeMap::new();
    for (service, mut v) in by_service {
        v.sort_by_key(|r| r.logged_at);
        let serial = serial(service);
        let mut previous: Option<Timestamp> = None;
        for r in v {
            let start = match previous {
                Some(p) if serial && p > r.sent_at() => p,
                _ => r.sent_at(),
            };
            previous = Some(r.logged_at);
            if !r.succeeded() {
                continue;
            }
            let ms = r.logged_at.duration_since(start).as_secs_f64() * 1000.0;
            let e = sums
                .entry(format!("{service}.{}", r.operation))
                .or_default()
                .entry(r.method.clone())
                .or_default();
            e.0 += ms.max(0.0);
            e.1 += 1;
        }
    }
    sums.into_iter()
        .map(|(op, methods)| {
            let means = methods
                .into_iter()
                .map(|(m, (sum, n))| {
                    let t = ServiceTime {
                        mean_ms: sum / f64::from(n.max(1)),
                        requests: n,
                    };
                    (m, t)
                })
                .collect();
            (op, means)
        })
        .collect()
}

/// Reads a growing log file from a position on, complete lines only.
#[derive(Clone, Debug)]
pub struct LogCursor {
    path: PathBuf,
    offset: u64,
}

impl LogCursor {
    /// A cursor at the current end of the file (what is written from now on).
    pub fn at_end(path: &Path) -> anyhow::Result<Self> {
        let len = std::fs::metadata(path)
            .with_context(|| format!("reading the size of {}", path.display()))?
            .len();
        Ok(LogCursor {
            path: path.to_path_buf(),
            offset: len,
        })
    }

    /// The complete lines written since the last read (a line still being written is left
    /// for the next read).
    pub fn read_new(&mut self) -> anyhow::Result<String> {
        let mut f = std::fs::File::open(&self.path)
            .with_context(|| format!("opening {}", self.path.display()))?;
        f.seek(SeekFrom::Start(self.offset))
            .with_context(|| format!("seeking in {}", self.path.display()))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)
            .with_context(|| format!("reading {}", self.path.display()))?;
        let complete = buf.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        buf.truncate(complete);
        self.offset += complete as u64;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"{"timestamp":"2026-11-30T05:19:46.017885Z","level":"DEBUG","message":"openstack request","service":"identity","operation":"create_project","method":"POST","path":"/v3/projects","status":"201","duration_ms":42,"request_id":"req-1","attempt":1,"target":"openstack::adapter::core","span":{"kind":"OpenstackProject","namespace":"ns","object":"p1","name":"reconcile"},"spans":[]}"#;

    #[test]
    fn parses_request_lines_only() {
        let other = r#"{"timestamp":"2026-11-30T05:19:46.017885Z","level":"INFO","message":"reconciled","elapsed_ms":812}"#;
        let text = format!("{LINE}\n{other}\nnot json openstack request\n");
        let reqs = parse(&text);
        assert_eq!(reqs.len(), 1);
        let r = &reqs[0];
        assert_eq!(r.operation, "create_project");
        assert_eq!(r.method, "POST");
        assert_eq!(r.status, "201");
        assert!(r.succeeded());
        assert_eq!(r.duration_ms, 42);
        assert_eq!(r.object.as_deref(), Some("p1"));
        assert_eq!(
            r.sent_at().to_string(),
            "2026-11-30T05:19:45.975885Z",
            "sent = logged - duration"
        );
    }

    #[test]
    fn failed_attempts_do_not_count_as_latency_samples() {
        let failed = LINE.replace(r#""status":"201""#, r#""status":"503""#);
        let timeout = LINE.replace(r#""status":"201""#, r#""status":"timeout""#);
        let reqs = parse(&format!("{LINE}\n{failed}\n{timeout}\n"));
        assert_eq!(reqs.len(), 3);
        let d = durations_by_request(&reqs);
        assert_eq!(d["create_project POST"], vec![42.0]);
        assert_eq!(count_by_request(&reqs)["create_project POST"], 3);
    }

    #[test]
    fn busy_time_is_the_union_of_a_services_requests() {
        // identity: 0–100 ms and 50–150 ms overlap (150 ms busy), then 300–340 ms; network
        // 0–20 ms on its own.
        let at = |ms: u64, dur: u64, svc: &str| {
            LINE.replace("05:19:46.017885Z", &format!("05:19:46.{:03}000Z", ms + dur))
                .replace(r#""duration_ms":42"#, &format!(r#""duration_ms":{dur}"#))
                .replace(r#""service":"identity""#, &format!(r#""service":"{svc}""#))
        };
        let text = [
            at(0, 100, "identity"),
            at(50, 100, "identity"),
            at(300, 40, "identity"),
            at(0, 20, "network"),
        ]
        .join("\n");
        let busy = busy_by_service(&parse(&text));
        assert!((busy["identity"] - 0.19).abs() < 1e-9, "{busy:?}");
        assert!((busy["network"] - 0.02).abs() < 1e-9, "{busy:?}");
    }

    #[test]
    fn service_time_of_a_serial_server_leaves_out_its_queue() {
        // network (serial): sent 0 and 10 ms, answered 100 and 150 ms: the second queued
        // until 100 and was served 50 ms; identity (not serial): its durations.
        let at = |end: u64, dur: u64, svc: &str, op: &str| {
            LINE.replace("05:19:46.017885Z", &format!("05:19:46.{end:03}000Z"))
                .replace(r#""duration_ms":42"#, &format!(r#""duration_ms":{dur}"#))
                .replace(r#""service":"identity""#, &format!(r#""service":"{svc}""#))
                .replace("create_project", op)
        };
        let failed = at(400, 100, "network", "create_router")
            .replace(r#""status":"201""#, r#""status":"500""#);
        let text = [
            at(100, 100, "network", "create_router"),
            at(150, 140, "network", "create_router"),
            at(200, 150, "identity", "create_project"),
            at(210, 150, "identity", "create_project"),
            at(320, 100, "network", "add_router_interface"),
            failed,
            at(450, 60, "network", "add_router_interface"),
        ]
        .join("\n");
        let t = service_times(&parse(&text), |s| s == "network");
        let ms = |op: &str| t[op]["POST"].mean_ms;
        assert!((ms("network.create_router") - 75.0).abs() < 1e-6, "{t:?}");
        assert!(
            (ms("identity.create_project") - 150.0).abs() < 1e-6,
            "{t:?}"
        );
        // 220–320 alone; the failed one held the server until 400, so 400–450.
        assert!(
            (ms("network.add_router_interface") - 75.0).abs() < 1e-6,
            "{t:?}"
        );
    }

    #[test]
    fn cursor_returns_complete_lines_once() -> anyhow::Result<()> {
        let dir = std::env::temp_dir().join(format!("bench-oplog-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("log");
        std::fs::write(&path, "old\n")?;
        let mut c = LogCursor::at_end(&path)?;
        assert_eq!(c.read_new()?, "");
        std::fs::write(&path, "old\nnew\npart")?;
        assert_eq!(c.read_new()?, "new\n");
        std::fs::write(&path, "old\nnew\npartial\n")?;
        assert_eq!(c.read_new()?, "partial\n");
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }
}
