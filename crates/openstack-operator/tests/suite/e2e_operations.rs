//! End to end: running the operator. Garbage collection of orphans (report mode, grace
//! period, deletion cap, never touching what is not this cluster's), leader election between
//! two processes, the metrics, and secrets never reaching the log.
//!
//! Besides the harness's operator these tests start further operator processes of their own
//! ([`Proc`]): with other flags but the same `--cluster-id` (a restart with a new GC mode),
//! or two at once (leader election). The harness's operator is stopped while they run and
//! started again before cleanup.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use api::{OpenstackDomain, OpenstackFlavor, OpenstackProject};
use e2e::env::FLAVOR_OWNER_SPEC;
use e2e::metrics::Metrics;
use e2e::operator::{free_local_addr, log_dir};
use e2e::wait::{Check, wait_for};
use e2e::{EnvOptions, TestEnv};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt as _};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_openstack-operator");
const READY: Duration = Duration::from_secs(120);
/// The sweeper's registry ConfigMap.
const REGISTRY: &str = "openstack-operator-managed-resources";

async fn env(test: &str, opts: impl FnOnce(&mut EnvOptions)) -> anyhow::Result<TestEnv> {
    let mut o = EnvOptions::new(BIN, &format!("operations-{test}"));
    opts(&mut o);
    TestEnv::start(test, o).await
}

// ----------------------------------------------------------------------------- processes

/// An operator process started by the test itself, with the harness operator's cluster id
/// (so it owns the same objects) and flags of the test's choosing. Killed when dropped.
struct Proc {
    name: String,
    child: Mutex<Option<Child>>,
    health: SocketAddr,
    metrics: SocketAddr,
    log: PathBuf,
}

impl Proc {
    /// Starts `openstack-operator run` against the test's cluster and cloud (`os_cloud`
    /// overrides the cloud entry), JSON logs into `<log dir>/<log_name>.log`.
    fn start(
        env: &TestEnv,
        log_name: &str,
        os_cloud: Option<&str>,
        extra_env: &[(&str, &str)],
        extra_args: &[&str],
    ) -> anyhow::Result<Self> {
        let dir = log_dir(Path::new(BIN));
        std::fs::create_dir_all(&dir)?;
        let log = dir.join(format!("{log_name}.log"));
        let file =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let (health, metrics) = (free_local_addr()?, free_local_addr()?);
        let cloud = env.target.cloud_env();
        let mut args: Vec<String> = [
            "run",
            "--health-addr",
            &health.to_string(),
            "--metrics-addr",
            &metrics.to_string(),
            "--cluster-id",
            env.operator.cluster_id(),
            "--resync-seconds",
            "60",
            "--log-format",
            "json",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra_args.iter().map(|s| s.to_string()));
        let mut cmd = Command::new(BIN);
        cmd.args(&args)
            .env("KUBECONFIG", env.target.kubeconfig())
            .env("OS_CLOUD", os_cloud.unwrap_or(&cloud.os_cloud))
            .env("OS_CLIENT_CONFIG_FILE", &cloud.config_file)
            .stdin(Stdio::null())
            .stdout(Stdio::from(file.try_clone()?))
            .stderr(Stdio::from(file));
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {BIN} {}", args.join(" ")))?;
        Ok(Proc {
            name: log_name.to_string(),
            child: Mutex::new(Some(child)),
            health,
            metrics,
            log,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn pid(&self) -> Option<u32> {
        self.lock().as_ref().map(Child::id)
    }

    fn exited(&self) -> Option<ExitStatus> {
        self.lock()
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    fn log_text(&self) -> String {
        std::fs::read(&self.log)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    fn log_tail(&self, n: usize) -> String {
        let t = self.log_text();
        let lines: Vec<&str> = t.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    async fn ready(&self) -> bool {
        e2e::http_get(&format!("http://{}/readyz", self.health))
            .await
            .is_ok()
    }

    async fn wait_ready(&self, timeout: Duration) -> anyhow::Result<()> {
        wait_for(
            timeout,
            Duration::from_millis(200),
            &format!("operator {} to be ready", self.name),
            async || {
                if let Some(s) = self.exited() {
                    return Ok(Check::Fail(anyhow::anyhow!(
                        "operator {} exited ({s}):\n{}",
                        self.name,
                        self.log_tail(40)
                    )));
                }
                Ok(if self.ready().await {
                    Check::Done(())
                } else {
                    Check::Pending("/readyz not 200".into())
                })
            },
        )
        .await
    }

    async fn metrics(&self) -> anyhow::Result<Metrics> {
        let body = e2e::http_get(&format!("http://{}/metrics", self.metrics)).await?;
        Ok(Metrics::parse(&String::from_utf8_lossy(&body)))
    }

    /// SIGTERM and wait for the exit.
    async fn stop(&self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        if let Some(s) = self.exited() {
            return Ok(s);
        }
        let pid = self.pid().context("never started")?;
        let st = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()?;
        anyhow::ensure!(st.success(), "kill -TERM {pid} failed");
        wait_for(
            timeout,
            Duration::from_millis(50),
            &format!("operator {} to exit", self.name),
            async || {
                Ok(match self.exited() {
                    Some(s) => Check::Done(s),
                    None => Check::Pending("running".into()),
                })
            },
        )
        .await
    }

    /// SIGKILL (no shutdown at all) and reap.
    fn kill(&self) {
        if let Some(c) = self.lock().as_mut()
            && matches!(c.try_wait(), Ok(None))
        {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "----- last 100 lines of {} ({}) -----\n{}\n-----",
                self.name,
                self.log.display(),
                self.log_tail(100)
            );
        }
        self.kill();
    }
}

/// Brings the harness's operator back (cleanup deletes through it).
async fn restart_harness_operator(env: &TestEnv) -> anyhow::Result<()> {
    if !env.operator.is_running() {
        env.operator.restart(Duration::from_secs(20)).await?;
    }
    env.operator.wait_ready(READY).await
}

// ----------------------------------------------------------------------------- helpers

fn flavor_yaml(name: &str) -> String {
    format!(
        r#"
apiVersion: sunet.se/v1alpha1
kind: OpenstackFlavor
metadata:
  name: {name}
spec:
  name: {name}
  vcpus: 1
  ram: 128
  disk: 1
  isPublic: true
"#
    )
}

async fn flavor_id(env: &TestEnv, name: &str) -> anyhow::Result<String> {
    let f: OpenstackFlavor = env.get(name).await?;
    f.status
        .and_then(|s| s.flavor_id)
        .with_context(|| format!("status.flavorId of {name}"))
}

/// Deletes a flavor resource without the operator: finalizers removed, object gone.
async fn delete_behind_the_operators_back(env: &TestEnv, name: &str) -> anyhow::Result<()> {
    let api = env.api::<OpenstackFlavor>();
    api.delete(name, &DeleteParams::default()).await?;
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
    )
    .await
    .optional_404()?;
    e2e::k8s::wait_gone(&api, name, Duration::from_secs(30)).await
}

trait Optional404<T> {
    fn optional_404(self) -> Result<Option<T>, kube::Error>;
}

impl<T> Optional404<T> for Result<T, kube::Error> {
    fn optional_404(self) -> Result<Option<T>, kube::Error> {
        match self {
            Ok(v) => Ok(Some(v)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Events about the registry ConfigMap in `namespace`: (type, reason, message).
async fn registry_events(
    env: &TestEnv,
    namespace: &str,
) -> anyhow::Result<Vec<(String, String, String)>> {
    let api: Api<Event> = Api::namespaced(env.client.clone(), namespace);
    let lp = ListParams::default().fields(&format!("involvedObject.name={REGISTRY}"));
    Ok(api
        .list(&lp)
        .await?
        .items
        .into_iter()
        .filter(|e| e.involved_object.kind.as_deref() == Some("ConfigMap"))
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
            )
        })
        .collect())
}

/// `flavors.json` of the registry ConfigMap, parsed.
async fn registry_flavors(env: &TestEnv) -> anyhow::Result<Option<BTreeMap<String, Value>>> {
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let Some(cm) = api.get_opt(REGISTRY).await? else {
        return Ok(None);
    };
    let raw = cm
        .data
        .unwrap_or_default()
        .get("flavors.json")
        .cloned()
        .unwrap_or_default();
    Ok(Some(
        serde_json::from_str(&raw).with_context(|| format!("flavors.json: {raw}"))?,
    ))
}

// ----------------------------------------------------------------------------- GC

/// A resource deleted while the operator is stopped leaves orphans; report mode finds and
/// reports them and deletes nothing; delete mode waits for the grace period, deletes at most
/// the cap per sweep, and never touches flavors without our mark or with another cluster's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_removes_only_our_orphans_after_grace_within_the_cap() -> anyhow::Result<()> {
    env("gc", |_| {}).await?.run(async |env| {
        let base = env.unique("gc");
        let names: Vec<String> = (1..=3).map(|i| format!("{base}-{i}")).collect();
        for n in &names {
            env.apply(&flavor_yaml(n)).await?;
        }
        let mut ids = BTreeMap::new();
        for n in &names {
            env.wait_ready::<OpenstackFlavor>(n, READY).await?;
            ids.insert(n.clone(), flavor_id(env, n).await?);
        }
        let uids: BTreeMap<String, String> = {
            let mut m = BTreeMap::new();
            for n in &names {
                let f: OpenstackFlavor = env.get(n).await?;
                m.insert(n.clone(), f.uid().context("uid")?);
            }
            m
        };
        // Made by hand: a similar name without any mark, and one marked by another cluster.
        let hand_name = format!("{base}-hand");
        let other_name = format!("{base}-other");
        let hand = env.hand_made_flavor(&hand_name, None).await?.id;
        let other = env
            .hand_made_flavor(&other_name, Some("othercluster/some-uid"))
            .await?
            .id;

        // The operator stops; the resources are deleted without it (finalizers removed).
        let status = env.operator.stop(Duration::from_secs(20)).await?;
        assert!(status.success(), "SIGTERM exit: {status}");
        for n in &names {
            delete_behind_the_operators_back(env, n).await?;
        }
        for (n, id) in &ids {
            env.cloud.compute.get_flavor(id).await.with_context(|| format!("the orphan {n} still exists"))?;
        }

        // Report mode: sweeps find the three orphans, report them, delete nothing.
        let report = Proc::start(
            env,
            "operations-gc-report",
            None,
            &[],
            &["--gc-mode", "report", "--gc-interval-seconds", "2", "--gc-grace-seconds", "0",
              "--registry-namespace", &env.namespace],
        )?;
        report.wait_ready(READY).await?;
        let m = wait_for(READY, Duration::from_millis(250), "three report-mode sweeps", async || {
            let m = report.metrics().await?;
            let runs = m.sum("openstack_operator_cluster_gc_runs_total", &[("status", "success")]);
            Ok(if runs >= 3.0 { Check::Done(m) } else { Check::Pending(format!("{runs} successful sweeps; errors: {}", m.sum("openstack_operator_cluster_gc_runs_total", &[("status", "error")]))) })
        })
        .await?;
        assert_eq!(
            m.sum("openstack_operator_gc_orphans", &[("resource_type", "flavor")]),
            3.0,
            "openstack_operator_gc_orphans reports the three flavors"
        );
        assert_eq!(m.sum("openstack_operator_gc_orphans", &[]), 3.0, "and nothing else");
        assert!(
            m.sum("openstack_operator_gc_skipped_total", &[("reason", "report")]) >= 9.0,
            "each sweep skipped the three for report mode"
        );
        assert_eq!(m.sum("openstack_operator_cluster_gc_deleted_resources_total", &[]), 0.0, "report mode deletes nothing");
        for (n, id) in ids.iter().chain([(&hand_name, &hand), (&other_name, &other)]) {
            env.cloud.compute.get_flavor(id).await.with_context(|| format!("{n} survives report mode"))?;
        }
        let events = wait_for(Duration::from_secs(30), Duration::from_millis(250), "a Warning OrphansFound Event", async || {
            let ev = registry_events(env, &env.namespace).await?;
            Ok(if ev.iter().any(|(_, r, _)| r == "OrphansFound") { Check::Done(ev) } else { Check::Pending(format!("{ev:?}")) })
        })
        .await?;
        let (t, _, message) = events.iter().find(|(_, r, _)| r == "OrphansFound").context("OrphansFound")?;
        assert_eq!(t, "Warning");
        for (n, id) in &ids {
            assert!(message.contains(n.as_str()) && message.contains(id.as_str()), "the report names {n} ({id}): {message}");
        }
        assert!(!message.contains(&hand_name) && !message.contains(&other_name), "the report names only our orphans: {message}");
        // The registry lists what carries our mark.
        let reg = registry_flavors(env).await?.context("the registry ConfigMap exists")?;
        assert_eq!(reg.keys().cloned().collect::<BTreeSet<_>>(), names.iter().cloned().collect(), "flavors.json: {reg:?}");
        for n in &names {
            let e = &reg[n];
            assert_eq!(e["id"].as_str(), Some(ids[n].as_str()), "{n}: {e}");
            assert_eq!(e["cr_uid"].as_str(), Some(uids[n].as_str()), "{n}: {e}");
            assert_eq!(e["cluster"].as_str(), Some(env.operator.cluster_id()), "{n}: {e}");
        }
        let log = report.log_text();
        assert!(!log.contains("\"deleted orphan\""), "report mode logged a deletion");
        report.stop(Duration::from_secs(20)).await?;

        // Delete mode: grace first, then at most two per sweep.
        let delete = Proc::start(
            env,
            "operations-gc-delete",
            None,
            &[],
            &["--gc-mode", "delete", "--gc-interval-seconds", "2", "--gc-grace-seconds", "4",
              "--gc-max-deletions", "2", "--registry-namespace", &env.namespace],
        )?;
        delete.wait_ready(READY).await?;
        // Deletions seen while exactly one sweep had completed (the poll is much faster than
        // the sweeps, so this is normally observed).
        let mut after_first_sweep: Option<f64> = None;
        let m = wait_for(Duration::from_secs(90), Duration::from_millis(100), "the three orphans to be deleted", async || {
            let m = delete.metrics().await?;
            let deleted = m.sum("openstack_operator_cluster_gc_deleted_resources_total", &[("resource_type", "flavor")]);
            let runs = m.sum("openstack_operator_cluster_gc_runs_total", &[]);
            if runs == 1.0 && after_first_sweep.is_none() {
                after_first_sweep = Some(deleted);
            }
            Ok(if deleted >= 3.0 { Check::Done(m) } else { Check::Pending(format!("{deleted} deleted after {runs} sweeps")) })
        })
        .await?;
        if let Some(d) = after_first_sweep {
            assert_eq!(d, 0.0, "the first sweep deletes nothing (grace period)");
        }
        let grace = m.sum("openstack_operator_gc_skipped_total", &[("reason", "grace")]);
        assert!(grace >= 3.0 && grace % 3.0 == 0.0, "at least one sweep kept all three for the grace period (skipped for grace: {grace})");
        assert_eq!(m.sum("openstack_operator_gc_skipped_total", &[("reason", "cap")]), 1.0, "one sweep deleted two and left one for the cap");
        assert_eq!(m.sum("openstack_operator_cluster_gc_deleted_resources_total", &[]), 3.0, "exactly the three orphans were deleted");
        eprintln!(
            "GC: deletions observed after exactly one delete-mode sweep: {:?}",
            after_first_sweep.map(f64::abs)
        );
        for (n, id) in &ids {
            match env.cloud.compute.get_flavor(id).await {
                Err(e) if e.is_not_found() => {}
                other => panic!("orphan {n} should be deleted, got {other:?}"),
            }
        }
        let h = env.cloud.compute.get_flavor(&hand).await.context("the unmarked flavor survives")?;
        assert!(!h.extra_specs.contains_key(FLAVOR_OWNER_SPEC), "{h:?}");
        let o = env.cloud.compute.get_flavor(&other).await.context("the other cluster's flavor survives")?;
        let specs = env.cloud.compute.get_flavor_extra_specs(&o.id).await?;
        assert_eq!(specs.get(FLAVOR_OWNER_SPEC).map(String::as_str), Some("othercluster/some-uid"));
        let events = wait_for(Duration::from_secs(30), Duration::from_millis(250), "DeletionCapReached and three OrphanDeleted Events", async || {
            let ev = registry_events(env, &env.namespace).await?;
            let deleted = ev.iter().filter(|(_, r, _)| r == "OrphanDeleted").count();
            Ok(if deleted >= 3 && ev.iter().any(|(_, r, _)| r == "DeletionCapReached") { Check::Done(ev) } else { Check::Pending(format!("{ev:?}")) })
        })
        .await?;
        let cap = events.iter().find(|(_, r, _)| r == "DeletionCapReached").context("cap event")?;
        assert_eq!(cap.0, "Warning", "{cap:?}");
        assert!(cap.2.contains("at most 2"), "{cap:?}");
        let deleted_msgs: Vec<&String> = events.iter().filter(|(_, r, _)| r == "OrphanDeleted").map(|(_, _, m)| m).collect();
        for n in &names {
            assert!(deleted_msgs.iter().any(|m| m.contains(n.as_str())), "an OrphanDeleted Event names {n}: {deleted_msgs:?}");
        }
        assert!(!deleted_msgs.iter().any(|m| m.contains(&hand_name) || m.contains(&other_name)), "{deleted_msgs:?}");
        // The registry no longer lists them.
        wait_for(Duration::from_secs(30), Duration::from_millis(250), "the registry to drop the deleted flavors", async || {
            let reg = registry_flavors(env).await?.unwrap_or_default();
            Ok(if reg.is_empty() { Check::Done(()) } else { Check::Pending(format!("{reg:?}")) })
        })
        .await?;
        delete.stop(Duration::from_secs(20)).await?;
        restart_harness_operator(env).await
    })
    .await
}

// ----------------------------------------------------------------------------- leader election

fn lease_holder(l: &Lease) -> Option<String> {
    l.spec.as_ref().and_then(|s| s.holder_identity.clone())
}

/// Two processes with `--leader-election` on one Lease: exactly one reconciles; when it is
/// killed (no release), the other takes over after the lease expires and reconciles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_one_active_and_takeover_after_kill() -> anyhow::Result<()> {
    env("leader", |_| {}).await?.run(async |env| {
        // The harness's operator runs without leader election; it must not reconcile here.
        let st = env.operator.stop(Duration::from_secs(20)).await?;
        assert!(st.success(), "{st}");
        let lease = env.unique("lease");
        let args = ["--leader-election", "--lease-name", &lease, "--lease-namespace", &env.namespace,
                    "--lease-duration-seconds", "5", "--gc-mode", "off"];
        let a = Proc::start(env, "operations-leader-a", None, &[("POD_NAME", "e2e-op-a")], &args)?;
        let b = Proc::start(env, "operations-leader-b", None, &[("POD_NAME", "e2e-op-b")], &args)?;
        a.wait_ready(READY).await?;
        b.wait_ready(READY).await?;
        let leases: Api<Lease> = Api::namespaced(env.client.clone(), &env.namespace);
        let holder = wait_for(READY, Duration::from_millis(200), "a holder of the Lease", async || {
            Ok(match leases.get_opt(&lease).await?.as_ref().and_then(lease_holder) {
                Some(h) => Check::Done(h),
                None => Check::Pending("no holder".into()),
            })
        })
        .await?;
        let (leader, follower, pod) = if holder.starts_with("e2e-op-a-") { (&a, &b, "e2e-op-a") } else { (&b, &a, "e2e-op-b") };
        assert_eq!(holder, format!("{pod}-{}", leader.pid().unwrap_or_default()), "the Lease holder is <pod>-<pid> of one process");
        eprintln!("leader: {} (Lease holder {holder})", leader.name);

        let first = env.unique("le1");
        env.apply(&flavor_yaml(&first)).await?;
        env.wait_ready::<OpenstackFlavor>(&first, READY).await?;
        assert!(leader.ready().await && follower.ready().await, "both answer /readyz");
        let (lm, fm) = (leader.metrics().await?, follower.metrics().await?);
        assert!(lm.reconciles("OpenstackFlavor") >= 1.0, "the leader reconciled the flavor");
        assert_eq!(fm.reconciles("OpenstackFlavor"), 0.0, "the follower reconciled nothing");
        assert_eq!(fm.sum(e2e::metrics::API_CALLS, &[("operation", "create_flavor")]), 0.0, "the follower wrote nothing");
        assert!(follower.log_text().contains("waiting for leadership"), "the follower waits:\n{}", follower.log_tail(20));
        assert!(!follower.log_text().contains("acquired leadership"), "the follower is not leading");

        // The leader dies without releasing the Lease.
        leader.kill();
        let killed = Instant::now();
        let new_holder = wait_for(Duration::from_secs(60), Duration::from_millis(200), "the follower to take the Lease", async || {
            let h = leases.get_opt(&lease).await?.as_ref().and_then(lease_holder);
            Ok(match h {
                Some(h) if h != holder => Check::Done(h),
                other => Check::Pending(format!("holder {other:?}")),
            })
        })
        .await?;
        let took = killed.elapsed();
        assert!(new_holder.ends_with(&format!("-{}", follower.pid().unwrap_or_default())), "the follower holds the Lease: {new_holder}");
        let second = env.unique("le2");
        env.apply(&flavor_yaml(&second)).await?;
        let f: OpenstackFlavor = env.wait_ready(&second, READY).await?;
        eprintln!("LEADER ELECTION: the follower took the Lease {:.1}s after the leader was killed (lease 5s); second flavor Ready {:.1}s after the kill", took.as_secs_f64(), killed.elapsed().as_secs_f64());
        let fm = follower.metrics().await?;
        assert!(fm.reconciles("OpenstackFlavor") >= 1.0, "the new leader reconciles");
        let os = env.cloud.compute.get_flavor(f.status.as_ref().and_then(|s| s.flavor_id.as_deref()).context("flavorId")?).await?;
        assert!(os.extra_specs.get(FLAVOR_OWNER_SPEC).is_some_and(|m| m.starts_with(&format!("{}/", env.operator.cluster_id()))), "{os:?}");
        // The first flavor is still fine under the new leader.
        env.request_reconcile::<OpenstackFlavor>(&first).await?;
        let before = fm.reconciles("OpenstackFlavor");
        wait_for(READY, Duration::from_millis(250), "the new leader to reconcile the first flavor", async || {
            let n = follower.metrics().await?.reconciles("OpenstackFlavor");
            Ok(if n > before { Check::Done(()) } else { Check::Pending(format!("{n}")) })
        })
        .await?;
        let f1: OpenstackFlavor = env.wait_ready(&first, READY).await?;
        assert_eq!(e2e::k8s::condition(&f1, "Ready").and_then(|c| c.reason).as_deref(), Some("InSync"), "{:?}", f1.status);

        let st = follower.stop(Duration::from_secs(20)).await?;
        assert!(st.success(), "the new leader stops cleanly on SIGTERM: {st}\n{}", follower.log_tail(20));
        assert!(a.exited().is_some() && b.exited().is_some(), "no operator process is left");
        restart_harness_operator(env).await
    })
    .await
}

// ----------------------------------------------------------------------------- metrics

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_after_a_reconcile() -> anyhow::Result<()> {
    env("metrics", |_| {})
        .await?
        .run(async |env| {
            let name = env.unique("met");
            env.apply(&flavor_yaml(&name)).await?;
            env.wait_ready::<OpenstackFlavor>(&name, READY).await?;
            let text = env.operator.metrics_text().await?;
            let m = e2e::metrics::Metrics::parse(&text);
            let kind = [("resource", "OpenstackFlavor")];
            let checks: Vec<(&str, f64)> = vec![
                (
                    "openstack_operator_reconcile_total",
                    m.sum(
                        "openstack_operator_reconcile_total",
                        &[
                            ("resource", "OpenstackFlavor"),
                            ("operation", "create"),
                            ("status", "success"),
                        ],
                    ),
                ),
                (
                    "openstack_operator_reconcile_duration_seconds_count",
                    m.sum("openstack_operator_reconcile_duration_seconds_count", &kind),
                ),
                (
                    "openstack_operator_reconcile_duration_seconds_sum",
                    m.sum("openstack_operator_reconcile_duration_seconds_sum", &kind),
                ),
                (
                    "openstack_operator_openstack_api_calls_total",
                    m.sum(
                        "openstack_operator_openstack_api_calls_total",
                        &[
                            ("service", "compute"),
                            ("operation", "create_flavor"),
                            ("status", "success"),
                        ],
                    ),
                ),
                (
                    "openstack_operator_openstack_api_duration_seconds_count",
                    m.sum(
                        "openstack_operator_openstack_api_duration_seconds_count",
                        &[("service", "compute"), ("operation", "create_flavor")],
                    ),
                ),
                (
                    "openstack_operator_openstack_api_duration_seconds_sum",
                    m.sum(
                        "openstack_operator_openstack_api_duration_seconds_sum",
                        &[("service", "compute")],
                    ),
                ),
                (
                    "openstack_operator_managed_resources",
                    m.sum(
                        "openstack_operator_managed_resources",
                        &[("resource", "OpenstackFlavor"), ("phase", "Ready")],
                    ),
                ),
                (
                    "openstack_operator_info",
                    m.sum(
                        "openstack_operator_info",
                        &[
                            ("version", env!("CARGO_PKG_VERSION")),
                            ("cloud", env.target.cloud_env().os_cloud.as_str()),
                        ],
                    ),
                ),
            ];
            let zero: Vec<&str> = checks
                .iter()
                .filter(|(_, v)| *v <= 0.0)
                .map(|(n, _)| *n)
                .collect();
            assert!(
                zero.is_empty(),
                "non-zero after a reconcile: {zero:?}\n{text}"
            );
            assert_eq!(
                m.sum(
                    "openstack_operator_managed_resources",
                    &[("resource", "OpenstackFlavor"), ("phase", "Ready")]
                ),
                1.0,
                "one Ready flavor"
            );
            for family in [
                "openstack_operator_reconcile",
                "openstack_operator_reconcile_duration_seconds",
                "openstack_operator_openstack_api_calls",
                "openstack_operator_openstack_api_duration_seconds",
                "openstack_operator_managed_resources",
            ] {
                assert!(
                    text.contains(&format!("# HELP {family} ")),
                    "HELP of {family}"
                );
                assert!(
                    text.contains(&format!("# TYPE {family} ")),
                    "TYPE of {family}"
                );
            }
            Ok(())
        })
        .await
}

// ----------------------------------------------------------------------------- secrets

/// Values of `keys` anywhere in a JSON tree.
fn values_of(v: &Value, keys: &[&str], out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if keys.contains(&k.as_str())
                    && let Some(s) = x.as_str()
                    && !s.is_empty()
                {
                    out.push(s.to_string());
                }
                values_of(x, keys, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| values_of(x, keys, out)),
        _ => {}
    }
}

/// A JSON value parsed strictly: an object with a key twice is an error (serde_json keeps
/// the last one silently, and so do most log pipelines, losing the first value).
struct Strict(Value);

impl<'de> serde::Deserialize<'de> for Strict {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> serde::de::Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value without duplicate keys")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(json!(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(json!(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(json!(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some((k, Strict(v))) = map.next_entry::<String, Strict>()? {
            if out.contains_key(&k) {
                return Err(serde::de::Error::custom(format!("duplicate key {k:?}")));
            }
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

/// JSON log lines (the harness's header lines skipped), each an object with unique keys.
fn json_lines(log: &str) -> Vec<Value> {
    log.lines()
        .filter(|l| !l.starts_with("=== e2e:") && !l.trim().is_empty())
        .map(|l| match serde_json::from_str::<Strict>(l) {
            Ok(Strict(v)) => v,
            Err(e) => panic!("not a JSON log line with unique keys ({e}): {l}"),
        })
        .collect()
}

/// The `reconcile` span of a line (its current span or one of its parents), if any.
fn reconcile_span(line: &Value) -> Option<&Value> {
    if line["span"]["name"] == "reconcile" {
        return Some(&line["span"]);
    }
    line["spans"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == "reconcile")
}

/// Checks a log for secrets and reconcile context (every line about a pass carries the kind,
/// namespace and name of one of `objects`); returns (lines, lines inside a reconcile span).
fn check_log(
    log: &str,
    secrets: &[String],
    objects: &BTreeSet<String>,
    what: &str,
) -> (usize, usize) {
    for s in secrets {
        assert!(
            !log.contains(s.as_str()),
            "{what}: a secret from clouds.yaml ({} chars) appears in the log",
            s.len()
        );
    }
    if let Some(i) = log.find("gAAAAA") {
        panic!(
            "{what}: a Keystone (fernet) token appears in the log: …{}…",
            &log[i.saturating_sub(80)..(i + 20).min(log.len())]
        );
    }
    let lines = json_lines(log);
    let mut in_reconcile = 0;
    for l in &lines {
        let target = l["target"].as_str().unwrap_or_default();
        let message = l["message"].as_str().unwrap_or_default();
        // Lines about one object's pass: the framework's and the kinds' controllers (not the
        // sweeper, the wiring or the runtime).
        let about_a_pass = matches!(message, "reconciled" | "reconcile failed")
            || (target.starts_with("controllers::") && !target.starts_with("controllers::gc"));
        let span = reconcile_span(l);
        if about_a_pass {
            let s = span.unwrap_or_else(|| {
                panic!("{what}: a reconcile line without the reconcile span: {l}")
            });
            let kind = s["kind"].as_str().unwrap_or_default();
            assert!(
                kind.starts_with("Openstack"),
                "{what}: the reconcile span carries the kind: {l}"
            );
            let namespace = s["namespace"].as_str();
            assert!(
                namespace.is_some_and(|n| (kind == "OpenstackProject") != n.is_empty()),
                "{what}: the reconcile span carries the namespace (empty for cluster-scoped kinds): {l}"
            );
            // The object's name, under a key of its own (`name` is the span's name in JSON).
            assert!(
                s["object"].as_str().is_some_and(|o| objects.contains(o)),
                "{what}: the reconcile span carries the object's name (one of {objects:?}) as `object`: {l}"
            );
        }
        if span.is_some() {
            in_reconcile += 1;
        }
    }
    (lines.len(), in_reconcile)
}

/// A domain, a flavor and a project at debug level (JSON logs): no password, no
/// application-credential secret, no token in the log; every reconcile line names its object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_never_reach_the_log() -> anyhow::Result<()> {
    env("secrets", |o| {
        o.operator.extra_args = vec!["--log-level".into(), "debug".into()];
    })
    .await?
    .run(async |env| {
        let clouds_file = env.target.cloud_env().config_file.clone();
        let clouds: Value = api::manifest::documents(&std::fs::read_to_string(&clouds_file)?)?
            .into_iter()
            .next()
            .context("clouds.yaml")?;
        let mut secrets = Vec::new();
        values_of(&clouds, &["password", "application_credential_secret"], &mut secrets);
        let mut pw = Vec::new();
        values_of(&clouds, &["password"], &mut pw);
        assert!(!pw.is_empty(), "clouds.yaml has a password to look for");
        let appcred_cloud = clouds["clouds"]
            .as_object()
            .and_then(|m| m.iter().find(|(_, c)| c["auth"]["application_credential_secret"].is_string()).map(|(k, _)| k.clone()));
        eprintln!("looking for {} secret(s) from {}; application-credential cloud: {appcred_cloud:?}", secrets.len(), clouds_file.display());

        let domain = env.unique("sec");
        let flavor = env.unique("sec");
        let project = env.unique("sec");
        env.apply(&format!(
            r#"
apiVersion: sunet.se/v1alpha1
kind: OpenstackDomain
metadata:
  name: {domain}
spec:
  name: {domain}
  description: secrets test
---
{flavor_doc}
---
apiVersion: sunet.se/v1alpha1
kind: OpenstackProject
metadata:
  name: {project}
spec:
  name: {project}
  description: secrets test
  domain: {domain}
  quotas:
    compute: {{cores: 8}}
  networks:
    - name: internal
      cidr: 10.77.0.0/24
  securityGroups:
    - name: ssh
      rules:
        - {{direction: ingress, protocol: tcp, portRangeMin: 22, portRangeMax: 22, remoteIpPrefix: "0.0.0.0/0"}}
  roleBindings:
    - role: member
      users: ["nobody@example.com"]
"#,
            flavor_doc = flavor_yaml(&flavor)
        ))
        .await?;
        env.wait_ready::<OpenstackDomain>(&domain, READY).await?;
        env.wait_ready::<OpenstackFlavor>(&flavor, READY).await?;
        env.wait_ready::<OpenstackProject>(&project, READY).await?;
        env.request_reconcile::<OpenstackProject>(&project).await?;
        env.delete_and_wait::<OpenstackProject>(&project, READY).await?;

        let log = env.operator.log_text()?;
        let objects: BTreeSet<String> = [&domain, &flavor, &project].into_iter().cloned().collect();
        let (n, in_reconcile) = check_log(&log, &secrets, &objects, "password operator");
        eprintln!("password-auth operator: {n} JSON lines, {in_reconcile} inside a reconcile span");
        assert!(in_reconcile > 0, "some lines come from reconciles");
        assert!(log.contains("\"level\":\"DEBUG\""), "the log is at debug level");

        // The same with application-credential auth (a second process, same cluster id).
        if let Some(cloud) = appcred_cloud {
            let st = env.operator.stop(Duration::from_secs(20)).await?;
            assert!(st.success(), "{st}");
            let p = Proc::start(env, "operations-secrets-appcred", Some(&cloud), &[], &["--log-level", "debug", "--gc-mode", "off"])?;
            p.wait_ready(READY).await?;
            let second = env.unique("sec2");
            env.apply(&flavor_yaml(&second)).await?;
            env.wait_ready::<OpenstackFlavor>(&second, READY).await?;
            env.request_reconcile::<OpenstackFlavor>(&flavor).await?;
            env.delete_and_wait::<OpenstackFlavor>(&second, READY).await?;
            p.stop(Duration::from_secs(20)).await?;
            let log = p.log_text();
            let mut objects = objects.clone();
            objects.insert(second.clone());
            let (n, in_reconcile) = check_log(&log, &secrets, &objects, "application-credential operator");
            eprintln!("application-credential operator: {n} JSON lines, {in_reconcile} inside a reconcile span");
            assert!(in_reconcile > 0, "some lines come from reconciles");
            restart_harness_operator(env).await?;
        } else {
            eprintln!("NOTE: no application-credential cloud in clouds.yaml; only password auth checked");
        }
        Ok(())
    })
    .await
}
