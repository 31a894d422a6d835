//! Runs the probes of the node's running containers (the I/O around
//! [`vk_zun::probes::ContainerProbes`], the kubelet's probe state machine).
//!
//! `httpGet` (plain HTTP) and `tcpSocket` are made from the node, as the kubelet makes them,
//! to the pod's IP through the engine's network namespace; `exec`, and `httpGet` over HTTPS
//! (the kubelet does not verify its certificate; the check runs `curl -k`/`wget` in the
//! container, [`vk_zun::probes::command`]), through Docker exec. A liveness or startup
//! failure stops the container (its grace period), and the provider's next pass restarts it
//! per `restartPolicy` with the back-off.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing::{debug, info};
use vk_runtime::provider::{EventType, PodEvent};
use vk_zun::probes::{ContainerProbes, Handler, Kind, Outcome, ProbeSpec, Verdict};

use crate::docker::Docker;
use crate::netns::NetNs;

/// How often due probes are looked for.
pub const TICK: Duration = Duration::from_millis(250);

struct Entry {
    uid: String,
    name: String,
    ip: Option<IpAddr>,
    grace_s: u64,
    probes: ContainerProbes,
}

/// The node's prober.
pub struct Prober {
    docker: Docker,
    ns: NetNs,
    entries: Mutex<BTreeMap<String, Entry>>,
    events: Mutex<BTreeMap<String, Vec<PodEvent>>>,
}

/// What a running container is, for its probes.
pub struct Watch<'a> {
    /// Docker id.
    pub id: &'a str,
    /// Pod uid.
    pub uid: &'a str,
    /// Container name.
    pub name: &'a str,
    /// The pod's IP.
    pub ip: Option<IpAddr>,
    /// The probes.
    pub specs: &'a [ProbeSpec],
    /// When the run started.
    pub started_at: jiff::Timestamp,
    /// The pod's grace period (a probe's own wins).
    pub grace_s: u64,
}

/// The probe's request (pure): the kubelet's defaults (`Host` the target, `User-Agent`,
/// `Accept`), each replaced by a probe header of the same name (case-insensitive), as the
/// kubelet does: a `Host` header in `httpHeaders` is how a probe names a virtual host.
pub fn probe_request(addr: SocketAddr, path: &str, headers: &[(String, String)]) -> String {
    let given = |name: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
    let mut req = format!("GET {path} HTTP/1.1\r\n");
    for (k, v) in [
        ("Host", addr.to_string()),
        ("User-Agent", "kube-probe/1.36".to_string()),
        ("Accept", "*/*".to_string()),
    ] {
        if !given(k) {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("Connection: close\r\n\r\n");
    req
}

/// A plain HTTP GET; success is a status in 200..400.
async fn http_get(
    ns: &NetNs,
    addr: SocketAddr,
    path: &str,
    headers: &[(String, String)],
) -> Result<(), String> {
    let mut s = ns
        .connect(addr)
        .await
        .map_err(|e| format!("Get \"http://{addr}{path}\": {e}"))?;
    let req = probe_request(addr, path, headers);
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| format!("Get \"http://{addr}{path}\": {e}"))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 512];
    while !buf.contains(&b'\n') && buf.len() < 4096 {
        let n = s
            .read(&mut chunk)
            .await
            .map_err(|e| format!("Get \"http://{addr}{path}\": {e}"))?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let line = String::from_utf8_lossy(&buf);
    let code: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("Get \"http://{addr}{path}\": no HTTP status in the answer"))?;
    if (200..400).contains(&code) {
        Ok(())
    } else {
        Err(format!("HTTP probe failed with statuscode: {code}"))
    }
}

impl Prober {
    /// A prober; run [`Prober::run`] in a task.
    pub fn new(docker: Docker, ns: NetNs) -> Self {
        Self {
            docker,
            ns,
            entries: Mutex::new(BTreeMap::new()),
            events: Mutex::new(BTreeMap::new()),
        }
    }

    /// Starts watching a running container (once per run).
    pub fn observe(&self, w: Watch) {
        if w.specs.is_empty() {
            return;
        }
        if let Ok(mut m) = self.entries.lock() {
            m.entry(w.id.to_string()).or_insert_with(|| Entry {
                uid: w.uid.to_string(),
                name: w.name.to_string(),
                ip: w.ip,
                grace_s: w.grace_s,
                probes: ContainerProbes::new(w.specs, w.started_at),
            });
        }
    }

    /// Forgets containers not in `live`.
    pub fn retain(&self, live: &BTreeSet<String>) {
        if let Ok(mut m) = self.entries.lock() {
            m.retain(|id, _| live.contains(id));
        }
    }

    /// `(started, ready)` of a watched container.
    pub fn view(&self, id: &str) -> Option<(bool, bool)> {
        let m = self.entries.lock().ok()?;
        m.get(id).map(|e| (e.probes.started(), e.probes.ready()))
    }

    /// The Events recorded for a pod since the last call.
    pub fn take_events(&self, uid: &str) -> Vec<PodEvent> {
        self.events
            .lock()
            .ok()
            .and_then(|mut m| m.remove(uid))
            .unwrap_or_default()
    }

    fn event(&self, uid: &str, type_: EventType, reason: &str, message: String) {
        if let Ok(mut m) = self.events.lock() {
            m.entry(uid.to_string()).or_default().push(PodEvent {
                type_,
                reason: reason.into(),
                message,
            });
        }
    }

    async fn check(&self, id: &str, ip: Option<IpAddr>, spec: &ProbeSpec) -> Outcome {
        let timeout = Duration::from_secs(spec.timeout_s.max(1) as u64);
        let target = |host: &Option<String>, port: u16| -> Result<SocketAddr, String> {
            let ip = match host {
                Some(h) => h
                    .parse::<IpAddr>()
                    .map_err(|_| format!("probe host {h:?} is not an IP address"))?,
                None => ip.ok_or("the pod has no IP yet")?,
            };
            Ok(SocketAddr::new(ip, port))
        };
        let result: Result<(), String> = match &spec.handler {
            Handler::Http {
                scheme,
                host,
                port,
                path,
                headers,
            } if scheme == "http" => match target(host, *port) {
                Ok(a) => tokio::time::timeout(timeout, http_get(&self.ns, a, path, headers))
                    .await
                    .unwrap_or_else(|_| {
                        Err(format!(
                            "Get \"http://{a}{path}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
                        ))
                    }),
                Err(e) => Err(e),
            },
            Handler::Tcp { host, port } => match target(host, *port) {
                Ok(a) => match tokio::time::timeout(timeout, self.ns.connect(a)).await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) => Err(format!("dial tcp {a}: {e}")),
                    Err(_) => Err(format!("dial tcp {a}: i/o timeout")),
                },
                Err(e) => Err(e),
            },
            Handler::Sleep(_) => Ok(()),
            other => {
                let addr = ip.map(|i| i.to_string()).unwrap_or("127.0.0.1".into());
                match vk_zun::probes::command(other, &addr, spec.timeout_s) {
                    Some(argv) => match self.docker.exec(id, &argv, timeout).await {
                        Ok((0, _)) => Ok(()),
                        Ok((code, out)) => Err(if out.trim().is_empty() {
                            format!("command exited with {code}")
                        } else {
                            out.trim().chars().take(1024).collect()
                        }),
                        Err(e) => Err(format!("exec: {e}")),
                    },
                    None => Ok(()),
                }
            }
        };
        match result {
            Ok(()) => Outcome::Success,
            Err(m) => Outcome::Failure(m),
        }
    }

    /// The probe loop (runs until the task is aborted).
    pub async fn run(self: Arc<Self>) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let now = jiff::Timestamp::now();
            let due: Vec<(String, Option<IpAddr>, ProbeSpec)> = match self.entries.lock() {
                Ok(mut m) => m
                    .iter_mut()
                    .flat_map(|(id, e)| {
                        let ip = e.ip;
                        e.probes
                            .start_due(now)
                            .into_iter()
                            .map(move |s| (id.clone(), ip, s))
                            .collect::<Vec<_>>()
                    })
                    .collect(),
                Err(_) => return,
            };
            for (id, ip, spec) in due {
                let me = self.clone();
                tokio::spawn(async move {
                    let outcome = me.check(&id, ip, &spec).await;
                    me.finish(&id, &spec, outcome).await;
                });
            }
        }
    }

    async fn finish(&self, id: &str, spec: &ProbeSpec, outcome: Outcome) {
        let (verdict, uid, name, grace) = {
            let Ok(mut m) = self.entries.lock() else {
                return;
            };
            let Some(e) = m.get_mut(id) else {
                return;
            };
            (
                e.probes.finish(spec.kind, &outcome),
                e.uid.clone(),
                e.name.clone(),
                e.grace_s,
            )
        };
        if let Outcome::Failure(msg) = &outcome {
            debug!(container = %name, kind = spec.kind.title(), %msg, "probe failed");
            self.event(
                &uid,
                EventType::Warning,
                "Unhealthy",
                format!("{} probe failed: {msg}", spec.kind.title()),
            );
        }
        if let Verdict::Kill { kind, grace_s } = verdict {
            let why = match kind {
                Kind::Startup => "failed startup probe",
                _ => "failed liveness probe",
            };
            info!(container = %name, "{why}; killing it");
            self.event(
                &uid,
                EventType::Normal,
                "Killing",
                format!("Container {name} {why}, will be restarted"),
            );
            let g = grace_s.map(|g| g.max(0) as u64).unwrap_or(grace);
            if let Err(e) = self.docker.stop(id, g).await {
                self.event(
                    &uid,
                    EventType::Warning,
                    "FailedKillPod",
                    format!("stopping container {name}: {e}"),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_probe_header_replaces_the_target_as_the_host() {
        let addr: SocketAddr = "10.244.0.7:8080".parse().unwrap();
        let req = probe_request(
            addr,
            "/auth/login/",
            &[
                ("Host".into(), "dash.os.svc".into()),
                ("X-A".into(), "b".into()),
            ],
        );
        assert_eq!(req.matches("Host:").count(), 1, "{req}");
        assert!(req.contains("Host: dash.os.svc\r\n"), "{req}");
        assert!(req.contains("X-A: b\r\n") && req.contains("User-Agent: kube-probe/1.36\r\n"));
        let plain = probe_request(addr, "/", &[]);
        assert!(
            plain.starts_with("GET / HTTP/1.1\r\nHost: 10.244.0.7:8080\r\n"),
            "{plain}"
        );
        assert!(plain.ends_with("Connection: close\r\n\r\n"));
    }
}
