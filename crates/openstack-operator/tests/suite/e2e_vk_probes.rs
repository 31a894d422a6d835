//! End to end: probes and lifecycle hooks of `openstack-operator virtual-kubelet` (a
//! process) on pods running in the test cloud's real Zun (stock Zun runs no probes: the node
//! runs them through Zun exec). A failing liveness probe restarts the container, counted,
//! and `logs?previous=true` through the kubelet port shows the old run; a readiness probe
//! (httpGet, with a tcpSocket liveness probe beside it) flips the pod's `Ready`; a `preStop`
//! hook runs before the container gets SIGTERM. The kubelet port is reached with a token the
//! emulator's TokenReview knows (a real cluster, `E2E_KUBECONFIG`, has no such rules to set:
//! the test needing it says so and does nothing).

use crate::vk_common;

use anyhow::Context;
use e2e::wait::{Check, wait_for};
use k8s_openapi::api::core::v1::{Event, PodStatus};
use kube::api::{Api, DeleteParams, LogParams};
use kube::core::kubelet_debug::KubeletDebugParams;
use kube::{Client, ResourceExt};
use kube_emulator::review::{AllowRule, AuthConfig, ReviewUser};
use openstack::container::{Container, LogOptions};
use serde_json::json;
use vk_common::{Case, LONG, POLL, Vk, case, main_state, phase};

const TOKEN: &str = "vk-probes-apiserver";

/// A kube-rs client of the node's kubelet port with a token the emulator allows everything
/// on this node; `None` (and a message) on a real cluster.
fn kubelet_client(c: &Case, vk: &Vk) -> anyhow::Result<Option<Client>> {
    let Some(emu) = c.target.emulator() else {
        eprintln!(
            "SKIPPED: the kubelet port needs TokenReview rules, which only the emulator takes"
        );
        return Ok(None);
    };
    emu.set_auth(AuthConfig {
        tokens: [(
            TOKEN.to_string(),
            ReviewUser {
                username: "apiserver".into(),
                ..Default::default()
            },
        )]
        .into_iter()
        .collect(),
        rules: vec![AllowRule {
            subject: "apiserver".into(),
            verbs: vec!["*".into()],
            resource: "nodes".into(),
            subresource: "*".into(),
            name: c.node.clone(),
        }],
    });
    let mut cfg = kube::Config::new(format!("https://127.0.0.1:{}", vk.kubelet_port).parse()?);
    // The node serves a self-signed certificate without --tls-cert-file.
    cfg.accept_invalid_certs = true;
    cfg.headers.push((
        http::header::AUTHORIZATION,
        format!("Bearer {TOKEN}").parse()?,
    ));
    Ok(Some(Client::try_from(cfg)?))
}

/// Logs through the kubelet port.
async fn logs(client: &Client, c: &Case, pod: &str, previous: bool) -> anyhow::Result<String> {
    let at = KubeletDebugParams {
        name: pod,
        namespace: &c.ns,
        pod_uid: None,
    };
    let lp = LogParams {
        previous,
        ..Default::default()
    };
    let mut r = client.kubelet_node_logs(&at, "c", &lp).await?;
    let mut out = String::new();
    futures::AsyncReadExt::read_to_string(&mut r, &mut out).await?;
    Ok(out)
}

/// The pod's Events with `reason`, as "reason: message".
async fn events(c: &Case, pod: &str, reason: &str) -> anyhow::Result<Vec<String>> {
    let all = Api::<Event>::namespaced(c.client.clone(), &c.ns)
        .list(&Default::default())
        .await?;
    Ok(all
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(pod))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| format!("{reason}: {}", e.message.unwrap_or_default()))
        .collect())
}

fn ready(s: &PodStatus) -> Option<&str> {
    s.conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.as_str())
}

#[tokio::test]
async fn failing_liveness_restarts_the_container_and_previous_logs_show_the_old_run()
-> anyhow::Result<()> {
    let Some(c) = case("vkp-live").await? else {
        return Ok(());
    };
    c.guarded(liveness_body(&c)).await
}

async fn liveness_body(c: &Case) -> anyhow::Result<()> {
    let vk = Vk::start(&c.target, &c.z, &c.node)?;
    let Some(kubelet) = kubelet_client(c, &vk)? else {
        return Ok(());
    };
    // The container's filesystem outlives a restart (stock Zun starts the same Docker
    // container again): the run counter goes on, and only the first run breaks its health.
    let script = "n=$(cat /tmp/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /tmp/n; \
                  echo run-$n; touch /tmp/healthy; \
                  if [ $n = 1 ]; then sleep 4; echo breaking-run-1; rm /tmp/healthy; fi; \
                  exec sleep 3600";
    c.create(
        "live",
        json!({"terminationGracePeriodSeconds": 2,
               "containers": [{"name": "c", "image": "busybox",
                "command": ["sh", "-c", script],
                "livenessProbe": {"exec": {"command": ["cat", "/tmp/healthy"]},
                    "initialDelaySeconds": 1, "periodSeconds": 1, "failureThreshold": 2}}]}),
    )
    .await?;
    let s = c
        .wait_pod("live", "a restart after the liveness failure", &vk, |s| {
            let m = main_state(s);
            m.restart_count >= 1 && m.state.as_ref().is_some_and(|st| st.running.is_some())
        })
        .await?;
    let m = main_state(&s);
    assert_eq!(m.restart_count, 1, "{s:?}");
    assert!(
        m.last_state
            .as_ref()
            .and_then(|l| l.terminated.as_ref())
            .is_some(),
        "the killed run is the last state: {s:?}"
    );
    let killing = events(c, "live", "Killing").await?;
    assert!(
        killing
            .iter()
            .any(|e| e.contains("failed liveness probe, will be restarted")),
        "{killing:?}"
    );
    let unhealthy = events(c, "live", "Unhealthy").await?;
    assert!(
        unhealthy
            .iter()
            .any(|e| e.contains("Liveness probe failed")),
        "{unhealthy:?}"
    );
    // The current run's log, then the previous one's.
    let now = wait_for(LONG, POLL, "the second run's log", async || {
        let t = logs(&kubelet, c, "live", false).await?;
        Ok(if t.contains("run-2") {
            Check::Done(t)
        } else {
            Check::Pending(t)
        })
    })
    .await
    .with_context(|| vk.log_tail())?;
    assert_eq!(now.trim(), "run-2", "only the current run: {now:?}");
    let before = logs(&kubelet, c, "live", true)
        .await
        .with_context(|| vk.log_tail())?;
    assert_eq!(before, "run-1\nbreaking-run-1\n", "the previous run only");
    // The second run stays healthy: no second restart while it is probed.
    let s = c
        .wait_pod("live", "the pod Ready again", &vk, |s| {
            ready(s) == Some("True")
        })
        .await?;
    assert_eq!(main_state(&s).restart_count, 1);
    Ok(())
}

#[tokio::test]
async fn liveness_kills_restart_with_the_kubelets_back_off() -> anyhow::Result<()> {
    let Some(c) = case("vkp-backoff").await? else {
        return Ok(());
    };
    c.guarded(backoff_body(&c)).await
}

/// What the test saw of the container at one moment.
#[derive(Debug)]
struct Seen {
    restarts: i32,
    /// `running`, `waiting:<reason>:<message>` or `terminated`.
    state: String,
    ready: bool,
    pod_ready: Option<String>,
    started_at: Option<jiff::Timestamp>,
    last_finished: Option<jiff::Timestamp>,
}

fn seen(s: &PodStatus) -> Seen {
    let m = main_state(s);
    let st = m.state.clone().unwrap_or_default();
    let state = if st.running.is_some() {
        "running".to_string()
    } else if let Some(w) = &st.waiting {
        format!(
            "waiting:{}:{}",
            w.reason.clone().unwrap_or_default(),
            w.message.clone().unwrap_or_default()
        )
    } else {
        "terminated".to_string()
    };
    Seen {
        restarts: m.restart_count,
        state,
        ready: m.ready,
        pod_ready: ready(s).map(str::to_string),
        started_at: st
            .running
            .as_ref()
            .and_then(|r| r.started_at.as_ref())
            .map(|t| t.0),
        last_finished: m
            .last_state
            .as_ref()
            .and_then(|l| l.terminated.as_ref())
            .and_then(|t| t.finished_at.as_ref())
            .map(|t| t.0),
    }
}

/// A container whose first three runs break their health after 3 s: killed by its liveness
/// probe three times, it is restarted at once the first time, then after 10 s, then after
/// 20 s of `CrashLoopBackOff` (the kubelet's `doBackOff`); the fourth run stays healthy.
/// The pod is read every 200 ms throughout and each moment is checked against those rules.
async fn backoff_body(c: &Case) -> anyhow::Result<()> {
    let vk = Vk::start(&c.target, &c.z, &c.node)?;
    let script = "n=$(cat /tmp/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /tmp/n; \
                  echo run-$n; touch /tmp/healthy; \
                  if [ $n -le 3 ]; then sleep 3; rm /tmp/healthy; fi; exec sleep 3600";
    c.create(
        "crash",
        json!({"terminationGracePeriodSeconds": 1,
               "containers": [{"name": "c", "image": "busybox",
                "command": ["sh", "-c", script],
                "livenessProbe": {"exec": {"command": ["cat", "/tmp/healthy"]},
                    "initialDelaySeconds": 1, "periodSeconds": 1, "failureThreshold": 1}}]}),
    )
    .await?;
    let mut log: Vec<Seen> = Vec::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(240);
    loop {
        if let Some(s) = c.pods().get("crash").await?.status {
            let now = seen(&s);
            let done = now.restarts == 3
                && now.state == "running"
                && now.pod_ready.as_deref() == Some("True");
            log.push(now);
            if done {
                break;
            }
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "no third restart within 240 s; seen: {:?}\n{}",
            log.iter().rev().take(20).collect::<Vec<_>>(),
            vk.log_tail()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let ctx = || format!("{log:#?}\n{}", vk.log_tail());
    // Never a back-off before the first restart, never a restart count going back.
    assert!(
        log.windows(2).all(|w| w[0].restarts <= w[1].restarts),
        "{}",
        ctx()
    );
    assert!(
        !log.iter()
            .any(|s| s.restarts == 0 && s.state.contains("CrashLoopBackOff")),
        "the first restart waits for nothing: {}",
        ctx()
    );
    for n in 1..=3 {
        let first = log.iter().position(|s| s.restarts == n).with_context(ctx)?;
        let s = &log[first];
        // At once after each restart: running, the killed run the last state; the first
        // restart also ready and the pod Ready (no readiness probe), as on a kubelet.
        assert_eq!(s.state, "running", "restart {n}: {}", ctx());
        let (started, finished) = (
            s.started_at.with_context(ctx)?,
            s.last_finished.with_context(ctx)?,
        );
        let waited = started.duration_since(finished).as_secs();
        let (lo, hi) = match n {
            1 => (0, 10),
            2 => (10, 20),
            _ => (20, 40),
        };
        assert!(
            waited >= lo && waited < hi,
            "restart {n} came {waited} s after the run ended, the kubelet's rule is [{lo}, {hi}): {}",
            ctx()
        );
        if n == 1 {
            assert!(
                s.ready && s.pod_ready.as_deref() == Some("True"),
                "{}",
                ctx()
            );
            // Until the second run is killed (it lives 3 s and more), it shows running and
            // Ready: the asynchronous start in Zun never reads as a new crash.
            let soon: Vec<&Seen> = log[first..]
                .iter()
                .take_while(|x| x.restarts == 1)
                .take(8)
                .collect();
            assert!(
                soon.iter()
                    .all(|x| x.state == "running" && x.pod_ready.as_deref() == Some("True")),
                "the first 1.6 s after the first restart: {soon:#?}"
            );
        }
        // Between restart n-1 and n (n ≥ 2): the back-off is shown with the kubelet's delay,
        // the container not ready and the pod not Ready.
        if n >= 2 {
            let delay = if n == 2 { 10 } else { 20 };
            let waiting: Vec<&Seen> = log
                .iter()
                .filter(|x| x.restarts == n - 1 && x.state.starts_with("waiting"))
                .collect();
            assert!(
                !waiting.is_empty(),
                "no back-off seen before restart {n}: {}",
                ctx()
            );
            for w in &waiting {
                assert!(
                    w.state.starts_with(&format!(
                        "waiting:CrashLoopBackOff:back-off {delay}s restarting failed container=c pod=crash_"
                    )),
                    "{w:?}"
                );
                assert!(!w.ready && w.pod_ready.as_deref() == Some("False"), "{w:?}");
                assert!(w.last_finished.is_some(), "{w:?}");
            }
        }
    }
    Ok(())
}

#[tokio::test]
async fn readiness_probe_flips_the_pods_ready_condition() -> anyhow::Result<()> {
    let Some(c) = case("vkp-ready").await? else {
        return Ok(());
    };
    c.guarded(readiness_body(&c)).await
}

async fn readiness_body(c: &Case) -> anyhow::Result<()> {
    let vk = Vk::start(&c.target, &c.z, &c.node)?;
    // busybox's httpd answers 404 until /www/ready.html exists; the tcpSocket liveness
    // probe passes as long as httpd listens (a failing one would restart the container).
    c.create(
        "ready",
        json!({"terminationGracePeriodSeconds": 2,
               "containers": [{"name": "c", "image": "busybox",
                "command": ["sh", "-c", "mkdir -p /www; exec httpd -f -p 8080 -h /www"],
                "ports": [{"name": "web", "containerPort": 8080}],
                "readinessProbe": {"httpGet": {"port": "web", "path": "/ready.html"},
                    "periodSeconds": 1, "failureThreshold": 1},
                "livenessProbe": {"tcpSocket": {"port": 8080}, "initialDelaySeconds": 2,
                    "periodSeconds": 1, "failureThreshold": 1}}]}),
    )
    .await?;
    let s = c
        .wait_pod("ready", "the pod Running and not Ready", &vk, |s| {
            phase(s) == "Running" && main_state(s).state.is_some_and(|st| st.running.is_some())
        })
        .await?;
    assert_eq!(ready(&s), Some("False"), "{s:?}");
    assert!(!main_state(&s).ready, "{s:?}");
    let uid = c.pods().get("ready").await?.uid().context("uid")?;
    let zun = c.containers_of(&uid).await?;
    let id = &zun.first().context("the pod's Zun container")?.uuid;
    let sh = |cmd: &str| vec!["sh".to_string(), "-c".to_string(), cmd.to_string()];
    c.zun.exec(id, &sh("echo ok > /www/ready.html")).await?;
    let s = c
        .wait_pod("ready", "the pod Ready", &vk, |s| ready(s) == Some("True"))
        .await?;
    assert!(main_state(&s).ready && main_state(&s).started == Some(true));
    c.zun.exec(id, &sh("rm /www/ready.html")).await?;
    let s = c
        .wait_pod("ready", "the pod not Ready again", &vk, |s| {
            ready(s) == Some("False")
        })
        .await?;
    assert_eq!(
        main_state(&s).restart_count,
        0,
        "the tcpSocket probe held: {s:?}"
    );
    assert_eq!(phase(&s), "Running");
    Ok(())
}

#[tokio::test]
async fn pre_stop_runs_before_sigterm_within_the_grace_period() -> anyhow::Result<()> {
    let Some(c) = case("vkp-stop").await? else {
        return Ok(());
    };
    c.guarded(pre_stop_body(&c)).await
}

async fn pre_stop_body(c: &Case) -> anyhow::Result<()> {
    let vk = Vk::start(&c.target, &c.z, &c.node)?;
    // The hook writes to the main process's stdout, so it shows in the container's log
    // between the app's lines; the app says when SIGTERM came.
    let app = "trap 'echo got-term; exit 0' TERM; echo started; while true; do sleep 1; done";
    c.create(
        "stop",
        json!({"terminationGracePeriodSeconds": 30,
               "containers": [{"name": "c", "image": "busybox",
                "command": ["sh", "-c", app],
                "lifecycle": {"preStop": {"exec": {"command":
                    ["sh", "-c", "echo prestop-begin > /proc/1/fd/1; sleep 3; echo prestop-end > /proc/1/fd/1"]}}}}]}),
    )
    .await?;
    c.wait_pod("stop", "the pod to run", &vk, |s| phase(s) == "Running")
        .await?;
    let uid = c.pods().get("stop").await?.uid().context("uid")?;
    let id = c
        .containers_of(&uid)
        .await?
        .first()
        .context("the pod's Zun container")?
        .uuid
        .clone();
    c.pods().delete("stop", &DeleteParams::default()).await?;
    let opts = LogOptions {
        timestamps: true,
        ..Default::default()
    };
    let log = wait_for(LONG, POLL, "the hook's and SIGTERM's lines", async || {
        let t = c.zun.container_logs(&id, &opts).await.unwrap_or_default();
        Ok(if t.contains("got-term") {
            Check::Done(t)
        } else {
            Check::Pending(t)
        })
    })
    .await
    .with_context(|| vk.log_tail())?;
    let at = |what: &str| -> anyhow::Result<jiff::Timestamp> {
        let line = log
            .lines()
            .find(|l| l.ends_with(what))
            .with_context(|| format!("{what} in {log:?}"))?;
        vk_zun::run_logs::split_stamp(line)
            .map(|(t, _)| t)
            .with_context(|| format!("a timestamp on {line:?}"))
    };
    let (begin, end, term) = (at("prestop-begin")?, at("prestop-end")?, at("got-term")?);
    // The order is the proof: SIGTERM only after the hook returned (3 s of sleep).
    assert!(begin < end && end <= term, "{log}");
    assert!(term.duration_since(begin).as_secs() >= 3, "{log}");
    // The app exited on SIGTERM (0), not killed at once; then the pod is gone.
    let pods = c.pods();
    wait_for(LONG, POLL, "the pod deleted", async || {
        Ok(match pods.get_opt("stop").await? {
            None => Check::Done(()),
            Some(p) => Check::Pending(format!("{:?}", p.status)),
        })
    })
    .await
    .with_context(|| vk.log_tail())?;
    Ok(())
}
