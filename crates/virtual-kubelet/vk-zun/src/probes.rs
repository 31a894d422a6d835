//! Probes and lifecycle hooks as pure logic: what a container's probes and
//! `preStop` hook ask for, the command that runs each check inside the
//! container (through Zun exec), and the kubelet's probe state machine
//! (initial delay, period, success and failure thresholds, startup gating
//! liveness and readiness) driven by the caller's clock.
//!
//! Why in the container: the node process does not, in general, reach the
//! tenant network the pod's port is on (the test cloud's OVN networks are
//! not routed to the host), while Zun's exec reaches every plain container.
//! So `httpGet` and `tcpSocket` run as a small shell script in the
//! container against the container's own address, which needs `sh` and
//! `wget` or `curl` (httpGet), `nc` or bash's `/dev/tcp` (tcpSocket) in the
//! image; busybox and most distribution images have them.
//!
//! The I/O (running the checks, killing and restarting) is [`crate::prober`].

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, HTTPGetAction, LifecycleHandler, Probe,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Which probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `startupProbe`: gates the other two until it succeeds once.
    Startup,
    /// `livenessProbe`: the container is killed (and restarted per `restartPolicy`) when it fails.
    Liveness,
    /// `readinessProbe`: the container's `ready`.
    Readiness,
}

impl Kind {
    /// As Events name it (`Liveness probe failed: ...`).
    pub fn title(self) -> &'static str {
        match self {
            Kind::Startup => "Startup",
            Kind::Liveness => "Liveness",
            Kind::Readiness => "Readiness",
        }
    }
}

/// What a probe or hook does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Handler {
    /// Run this argv in the container.
    Exec(Vec<String>),
    /// An HTTP GET: success is a status in 200..400.
    Http {
        /// `http` or `https`.
        scheme: String,
        /// The host (`None`: the container's own address).
        host: Option<String>,
        /// TCP port.
        port: u16,
        /// Path (with query), starting with `/`.
        path: String,
        /// Extra request headers.
        headers: Vec<(String, String)>,
    },
    /// A TCP connect.
    Tcp {
        /// The host (`None`: the container's own address).
        host: Option<String>,
        /// TCP port.
        port: u16,
    },
    /// `preStop.sleep`: wait this long (seconds) before stopping.
    Sleep(u64),
}

/// One probe with its timings (Kubernetes' defaults filled in).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeSpec {
    /// Which probe.
    pub kind: Kind,
    /// What it runs.
    pub handler: Handler,
    /// `initialDelaySeconds` (0).
    pub initial_delay_s: i64,
    /// `periodSeconds` (10, at least 1).
    pub period_s: i64,
    /// `timeoutSeconds` (1, at least 1).
    pub timeout_s: i64,
    /// `successThreshold` (1; always 1 for liveness and startup).
    pub success_threshold: i32,
    /// `failureThreshold` (3).
    pub failure_threshold: i32,
    /// The probe's own `terminationGracePeriodSeconds`, if set (liveness and startup).
    pub grace_s: Option<i64>,
}

/// A probe or hook field the node cannot honour: the field (relative to the
/// container) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// `livenessProbe.grpc`, `lifecycle.postStart`, ...
    pub field: String,
    /// Why.
    pub reason: String,
}

fn refused(field: impl Into<String>, reason: &str) -> Refused {
    Refused {
        field: field.into(),
        reason: reason.into(),
    }
}

fn port_of(ports: &[ContainerPort], p: &IntOrString, field: &str) -> Result<u16, Refused> {
    match p {
        IntOrString::Int(n) => u16::try_from(*n)
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| refused(format!("{field}.port"), "not a TCP port number")),
        IntOrString::String(name) => ports
            .iter()
            .find(|cp| cp.name.as_deref() == Some(name.as_str()))
            .and_then(|cp| u16::try_from(cp.container_port).ok())
            .ok_or_else(|| {
                refused(
                    format!("{field}.port"),
                    "names no port of the container's ports[]",
                )
            }),
    }
}

fn http(ports: &[ContainerPort], h: &HTTPGetAction, field: &str) -> Result<Handler, Refused> {
    let path = h.path.clone().unwrap_or_default();
    Ok(Handler::Http {
        scheme: h.scheme.as_deref().unwrap_or("HTTP").to_ascii_lowercase(),
        host: h.host.clone().filter(|s| !s.is_empty()),
        port: port_of(ports, &h.port, &format!("{field}.httpGet"))?,
        path: if path.starts_with('/') {
            path
        } else {
            format!("/{path}")
        },
        headers: h
            .http_headers
            .iter()
            .flatten()
            .map(|x| (x.name.clone(), x.value.clone()))
            .collect(),
    })
}

/// The probe `field` of container `c` as the node runs it.
pub fn probe_spec(c: &Container, kind: Kind, p: &Probe, field: &str) -> Result<ProbeSpec, Refused> {
    let ports = c.ports.as_deref().unwrap_or(&[]);
    let handler = if let Some(e) = &p.exec {
        Handler::Exec(e.command.clone().unwrap_or_default())
    } else if let Some(h) = &p.http_get {
        http(ports, h, field)?
    } else if let Some(t) = &p.tcp_socket {
        Handler::Tcp {
            host: t.host.clone().filter(|s| !s.is_empty()),
            port: port_of(ports, &t.port, &format!("{field}.tcpSocket"))?,
        }
    } else if p.grpc.is_some() {
        return Err(refused(
            format!("{field}.grpc"),
            "gRPC probes are not implemented by this node (use exec with grpc_health_probe)",
        ));
    } else {
        return Err(refused(field, "the probe has no handler"));
    };
    let one = kind != Kind::Readiness;
    Ok(ProbeSpec {
        kind,
        handler,
        initial_delay_s: i64::from(p.initial_delay_seconds.unwrap_or(0).max(0)),
        period_s: i64::from(p.period_seconds.unwrap_or(10).max(1)),
        timeout_s: i64::from(p.timeout_seconds.unwrap_or(1).max(1)),
        success_threshold: if one {
            1
        } else {
            p.success_threshold.unwrap_or(1).max(1)
        },
        failure_threshold: p.failure_threshold.unwrap_or(3).max(1),
        grace_s: p.termination_grace_period_seconds.filter(|_| one),
    })
}

/// The container's probes, startup first.
pub fn probes_of(c: &Container) -> Result<Vec<ProbeSpec>, Refused> {
    let mut out = Vec::new();
    for (kind, field, p) in [
        (Kind::Startup, "startupProbe", &c.startup_probe),
        (Kind::Liveness, "livenessProbe", &c.liveness_probe),
        (Kind::Readiness, "readinessProbe", &c.readiness_probe),
    ] {
        if let Some(p) = p {
            out.push(probe_spec(c, kind, p, field)?);
        }
    }
    Ok(out)
}

fn hook(c: &Container, h: &LifecycleHandler, field: &str) -> Result<Handler, Refused> {
    let ports = c.ports.as_deref().unwrap_or(&[]);
    if let Some(e) = &h.exec {
        Ok(Handler::Exec(e.command.clone().unwrap_or_default()))
    } else if let Some(g) = &h.http_get {
        http(ports, g, field)
    } else if let Some(s) = &h.sleep {
        Ok(Handler::Sleep(s.seconds.max(0) as u64))
    } else if let Some(t) = &h.tcp_socket {
        // Deprecated in Kubernetes and, as there, a connect that is not waited on.
        Ok(Handler::Tcp {
            host: t.host.clone().filter(|s| !s.is_empty()),
            port: port_of(ports, &t.port, &format!("{field}.tcpSocket"))?,
        })
    } else {
        Err(refused(field, "the hook has no handler"))
    }
}

/// The container's `preStop` hook, if any.
pub fn pre_stop(c: &Container) -> Result<Option<Handler>, Refused> {
    let Some(l) = &c.lifecycle else {
        return Ok(None);
    };
    if l.post_start.is_some() {
        return Err(refused(
            "lifecycle.postStart",
            "postStart hooks are not implemented by this node",
        ));
    }
    if l.stop_signal.is_some() {
        return Err(refused(
            "lifecycle.stopSignal",
            "Zun stops containers with SIGTERM only",
        ));
    }
    l.pre_stop
        .as_ref()
        .map(|h| hook(c, h, "lifecycle.preStop"))
        .transpose()
}

/// Everything the node would refuse in the container's probes and lifecycle.
pub fn validate(c: &Container) -> Result<(), Refused> {
    probes_of(c)?;
    pre_stop(c)?;
    Ok(())
}

/// Single-quotes `s` for `sh`.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The argv that runs `h` inside the container (through Zun exec), `addr`
/// being the container's own address (used when the handler names no host),
/// `timeout_s` the time the check may take. `None` for [`Handler::Sleep`],
/// which the node waits out itself.
pub fn command(h: &Handler, addr: &str, timeout_s: i64) -> Option<Vec<String>> {
    let t = timeout_s.max(1);
    let script = match h {
        Handler::Exec(argv) => return Some(argv.clone()),
        Handler::Sleep(_) => return None,
        Handler::Http {
            scheme,
            host,
            port,
            path,
            headers,
        } => {
            let host = host.as_deref().unwrap_or(addr);
            // IPv6 literals in URLs need brackets.
            let h = if host.contains(':') {
                format!("[{host}]")
            } else {
                host.to_string()
            };
            let url = sh_quote(&format!("{scheme}://{h}:{port}{path}"));
            let curl_h: String = headers
                .iter()
                .map(|(k, v)| format!(" -H {}", sh_quote(&format!("{k}: {v}"))))
                .collect();
            let wget_h: String = headers
                .iter()
                .map(|(k, v)| format!(" --header {}", sh_quote(&format!("{k}: {v}"))))
                .collect();
            // The request for nc: one argument per line of `printf '%s\r\n'`.
            let mut lines = vec![format!("GET {path} HTTP/1.0"), format!("Host: {h}:{port}")];
            lines.extend(headers.iter().map(|(k, v)| format!("{k}: {v}")));
            lines.push(String::new());
            let req: Vec<String> = lines.iter().map(|l| sh_quote(l)).collect();
            let req = req.join(" ");
            let nc_host = sh_quote(host);
            // curl first; then, for plain HTTP, nc with the status line read here (busybox's
            // wget crashes in some images, its nc does not); wget last. A status in 200..400
            // succeeds, as the kubelet counts it; the kubelet does not verify HTTPS certificates,
            // neither do these.
            format!(
                "if command -v curl >/dev/null 2>&1; then exec curl -fsS -k -o /dev/null -m {t}{curl_h} {url}; \
                 elif [ {scheme} = http ] && command -v nc >/dev/null 2>&1; then \
                 code=$(printf '%s\\r\\n' {req} | nc -w {t} {nc_host} {port} | head -n 1 | cut -d ' ' -f 2); \
                 if [ \"$code\" -ge 200 ] 2>/dev/null && [ \"$code\" -lt 400 ]; then exit 0; fi; \
                 echo \"HTTP status: ${{code:-none}}\" >&2; exit 1; \
                 elif command -v wget >/dev/null 2>&1; then exec wget -q -O /dev/null -T {t} --no-check-certificate{wget_h} {url}; \
                 else echo 'httpGet needs curl, nc or wget in the image' >&2; exit 127; fi"
            )
        }
        Handler::Tcp { host, port } => {
            let host = sh_quote(host.as_deref().unwrap_or(addr));
            format!(
                "if command -v nc >/dev/null 2>&1; then \
                 if nc --help 2>&1 | grep -q -- ' -z'; then exec nc -z -w {t} {host} {port}; fi; \
                 exec nc -w {t} {host} {port} </dev/null >/dev/null; \
                 elif command -v bash >/dev/null 2>&1; then exec bash -c \"exec 3<>/dev/tcp/\"{host}\"/{port}\"; \
                 else echo 'tcpSocket needs nc or bash in the image' >&2; exit 127; fi"
            )
        }
    };
    Some(vec!["/bin/sh".into(), "-c".into(), script])
}

/// The outcome of one check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It passed.
    Success,
    /// It failed (the message: the command's output, a timeout).
    Failure(String),
    /// It could not be run: Zun refused the exec or did not answer in time although the check
    /// bounds itself inside the container. The kubelet throws an errored probe's result away
    /// (`worker.doProbe`: "Prober error, throw away the result"), so it counts neither way: a
    /// slow control plane must not kill or unready a healthy container.
    Errored(String),
}

/// What a probe result changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing to act on.
    None,
    /// The startup probe succeeded: liveness and readiness begin.
    Started,
    /// Readiness changed to this.
    Ready(bool),
    /// Liveness or startup failed `failureThreshold` times: kill the container
    /// (grace period, seconds, when the probe sets its own).
    Kill {
        /// Which probe.
        kind: Kind,
        /// The probe's own grace period, if any.
        grace_s: Option<i64>,
    },
}

#[derive(Clone, Debug)]
struct State {
    spec: ProbeSpec,
    next_at: jiff::Timestamp,
    in_flight: bool,
    successes: i32,
    failures: i32,
}

/// The probes of one run of one container (a restart makes a new one).
#[derive(Clone, Debug)]
pub struct ContainerProbes {
    probes: Vec<State>,
    started: bool,
    ready: bool,
    killed: bool,
}

impl ContainerProbes {
    /// The probes of a run that started at `started_at`.
    pub fn new(specs: &[ProbeSpec], started_at: jiff::Timestamp) -> Self {
        let has = |k| specs.iter().any(|s| s.kind == k);
        Self {
            probes: specs
                .iter()
                .map(|s| State {
                    spec: s.clone(),
                    next_at: started_at + jiff::SignedDuration::from_secs(s.initial_delay_s),
                    in_flight: false,
                    successes: 0,
                    failures: 0,
                })
                .collect(),
            // As the kubelet: without a startup probe the container is started when it
            // runs; without a readiness probe it is ready once started.
            started: !has(Kind::Startup),
            ready: !has(Kind::Readiness),
            killed: false,
        }
    }

    /// `containerStatuses[].started`.
    pub fn started(&self) -> bool {
        self.started
    }

    /// `containerStatuses[].ready` (once started, and not killed).
    pub fn ready(&self) -> bool {
        self.started && self.ready && !self.killed
    }

    /// Whether a probe asked for the container's kill (no probe runs after).
    pub fn killed(&self) -> bool {
        self.killed
    }

    fn active(&self, k: Kind) -> bool {
        !self.killed
            && match k {
                Kind::Startup => !self.started,
                Kind::Liveness | Kind::Readiness => self.started,
            }
    }

    /// The probes due at `now` (not running already), marked running: the
    /// caller runs each and reports it with [`ContainerProbes::finish`].
    pub fn start_due(&mut self, now: jiff::Timestamp) -> Vec<ProbeSpec> {
        let mut out = Vec::new();
        for i in 0..self.probes.len() {
            let k = self.probes[i].spec.kind;
            let active = self.active(k);
            let p = &mut self.probes[i];
            if active && !p.in_flight && p.next_at <= now {
                p.in_flight = true;
                // The period counts from the start of a check, as the kubelet's ticker.
                p.next_at = now + jiff::SignedDuration::from_secs(p.spec.period_s);
                out.push(p.spec.clone());
            }
        }
        out
    }

    /// The earliest time a probe is due (for the driver's sleep), if any is active.
    pub fn next_due(&self) -> Option<jiff::Timestamp> {
        self.probes
            .iter()
            .filter(|p| self.active(p.spec.kind) && !p.in_flight)
            .map(|p| p.next_at)
            .min()
    }

    /// Report the outcome of the `kind` check started by [`ContainerProbes::start_due`].
    pub fn finish(&mut self, kind: Kind, outcome: &Outcome) -> Verdict {
        let Some(i) = self.probes.iter().position(|p| p.spec.kind == kind) else {
            return Verdict::None;
        };
        let was_active = self.active(kind);
        let p = &mut self.probes[i];
        p.in_flight = false;
        if !was_active {
            // The run was killed, or startup finished, while this check ran.
            return Verdict::None;
        }
        match outcome {
            Outcome::Success => {
                p.successes = p.successes.saturating_add(1);
                p.failures = 0;
            }
            Outcome::Failure(_) => {
                p.failures = p.failures.saturating_add(1);
                p.successes = 0;
            }
            Outcome::Errored(_) => return Verdict::None,
        }
        let (s, f, spec) = (p.successes, p.failures, p.spec.clone());
        match kind {
            Kind::Startup if s >= 1 => {
                self.started = true;
                Verdict::Started
            }
            Kind::Startup | Kind::Liveness if f >= spec.failure_threshold => {
                self.killed = true;
                Verdict::Kill {
                    kind,
                    grace_s: spec.grace_s,
                }
            }
            Kind::Readiness if !self.ready && s >= spec.success_threshold => {
                self.ready = true;
                Verdict::Ready(true)
            }
            Kind::Readiness if self.ready && f >= spec.failure_threshold => {
                self.ready = false;
                Verdict::Ready(false)
            }
            _ => Verdict::None,
        }
    }
}

/// The grace period left for the stop after a `preStop` hook that ran
/// `spent_s` seconds of `grace_s`: the kubelet gives the container at least
/// 2 s after its hook.
pub fn remaining_grace(grace_s: u64, spent_s: u64) -> u64 {
    grace_s.saturating_sub(spent_s).max(2)
}

#[cfg(test)]
mod tests;
