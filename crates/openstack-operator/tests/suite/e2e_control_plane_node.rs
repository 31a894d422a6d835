//! The README's `scripts/demo control-plane` as the end-to-end test of the control plane on
//! real pods: the demo, run as a newcomer runs it (in a state directory of its own), applies
//! `examples/control-plane/` with only its Secrets and endpoints changed, reconciled by
//! `openstack-operator control-plane` against the Kubernetes API emulator, its Deployments and
//! Jobs run by the test node (`crates/test-tools/test-node`, docs/test-node.md) as containers of
//! the images `scripts/build-images` makes, on the test cloud's Docker engine; the external
//! services (`scripts/external-services`, the control plane's memcached one of its own) reached
//! at the node's gateway (10.244.0.1, which their certificate names) through the node's relays.
//! The demo exits 0 only when the cluster and its seven services are Ready.
//!
//! One run serves as both the README's main job and this test, so CI deploys the cluster once
//! (about 11 minutes on two cores) and the demo's own adaptation of the examples is the one
//! proven. Then, against the demo's cluster: each service's time from apply to Ready (from its
//! Ready condition) is printed; Nova says which compute hosts have not registered; a client
//! pod (`cp_node/client.py`, from the Horizon image) makes one authenticated request to each
//! API through the catalog's internal endpoints, i.e. the Service names: a token; resource
//! providers; an image uploaded and downloaded; a network created; the compute services;
//! volume types; Horizon's login reaching the dashboard. `scripts/demo stop` ends it.
//!
//! Needs `scripts/test-cloud up`, `scripts/external-services up`, the images
//! (`scripts/build-images`) in the engine and the workspace's binaries built (`cargo build
//! --workspace --bins`); no other `scripts/demo control-plane` running (the node's relays and
//! name are the demo's). It drops and recreates the example's databases on the external
//! MariaDB (a new install reaches every schema head).

use crate::cp_common::*;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use controlplane_api::condition_types as ct;
use e2e::{Check, wait_for};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use test_node::docker::{Docker, socket_path};

const NS: &str = "openstack";
const CLUSTER: &str = "cloud";
/// The demo's test node.
const NODE: &str = "demo-node";
const TC: &str = "/var/cache/openstack-operator/test-cloud/run";
/// The children of the example cluster: (kind, plural, name).
const CHILDREN: [(&str, &str, &str); 7] = [
    ("Keystone", "keystones", "cloud-keystone"),
    ("Placement", "placements", "cloud-placement"),
    ("Glance", "glances", "cloud-glance"),
    ("Neutron", "neutrons", "cloud-neutron"),
    ("Nova", "novas", "cloud-nova"),
    ("Cinder", "cinders", "cloud-cinder"),
    ("Horizon", "horizons", "cloud-horizon"),
];
/// The databases of the example's services on the external MariaDB.
const DATABASES: [&str; 8] = [
    "keystone",
    "placement",
    "glance",
    "neutron",
    "nova",
    "nova_api",
    "nova_cell0",
    "cinder",
];
const CLIENT_PY: &str = include_str!("cp_node/client.py");

/// The repository's root (scripts/, examples/).
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `scripts/demo ARG` with the test's state directory and emulator address, its output
/// appended to `out`; its exit status.
fn demo(
    dir: &Path,
    emulator: &str,
    arg: &str,
    out: &Path,
) -> anyhow::Result<std::process::ExitStatus> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(out)?;
    Command::new(repo().join("scripts/demo"))
        .arg(arg)
        .env("DEMO_DIR", dir)
        .env("DEMO_EMULATOR_ADDR", emulator)
        // The binaries this test binary was built with (`cargo build` inside `cargo test`
        // would wait on cargo's lock).
        .env("DEMO_PREBUILT", "1")
        .env("CARGO_TARGET_DIR", target_dir()?)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .status()
        .with_context(|| format!("running scripts/demo {arg}"))
}

/// The target directory of the binaries under test (`<dir>/debug/openstack-operator`).
fn target_dir() -> anyhow::Result<PathBuf> {
    Path::new(BIN)
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .context("the operator binary's target directory")
}

/// The last `n` lines of a file (for a failure).
fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Seconds from `from` to `to`, both RFC 3339 (pure).
fn seconds_between(from: &str, to: &str) -> Option<i64> {
    let a: jiff::Timestamp = from.parse().ok()?;
    let b: jiff::Timestamp = to.parse().ok()?;
    Some(b.as_second() - a.as_second())
}

/// Runs SQL as the harness's admin on the external MariaDB (over TLS).
fn external_mariadb(env: &BTreeMap<String, String>, sql: &str) -> anyhow::Result<()> {
    let get = |k: &str| env.get(k).cloned().with_context(|| format!("{k} missing"));
    let db = get("EXTSVC_DB")?;
    let (host, port) = db.rsplit_once(':').context("EXTSVC_DB")?;
    let out = Command::new("mariadb")
        .args(["-h", host, "-P", port, "-u", &get("EXTSVC_DB_ADMIN_USER")?])
        .arg(format!("-p{}", get("EXTSVC_DB_ADMIN_PASSWORD")?))
        .arg(format!("--ssl-ca={}", get("EXTSVC_CA")?))
        .args(["-e", sql])
        .output()
        .context("running mariadb")?;
    anyhow::ensure!(
        out.status.success(),
        "mariadb: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// A one-line view of what is not Ready yet: the cluster's message and the pods not Ready.
async fn progress(client: &Client) -> String {
    let cl = dyn_api(client, NS, "OpenStackCluster", "openstackclusters");
    let c = get(&cl, CLUSTER).await.unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut waiting = Vec::new();
    for p in pods
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        let st = p.status.clone().unwrap_or_default();
        let ready = st
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let phase = st.phase.clone().unwrap_or_default();
        if !ready && phase != "Succeeded" {
            let why = st
                .container_statuses
                .iter()
                .chain(st.init_container_statuses.iter())
                .flatten()
                .filter_map(|c| {
                    let s = c.state.as_ref()?;
                    s.waiting
                        .as_ref()
                        .and_then(|w| w.reason.clone())
                        .or_else(|| s.terminated.as_ref().and_then(|t| t.reason.clone()))
                        .map(|r| format!("{}={r}/{}", c.name, c.restart_count))
                })
                .collect::<Vec<_>>()
                .join(",");
            waiting.push(format!(
                "{}:{phase}{}",
                p.metadata.name.unwrap_or_default(),
                if why.is_empty() {
                    String::new()
                } else {
                    format!("({why})")
                }
            ));
        }
    }
    format!(
        "cluster {:?}; pods not Ready: {}",
        cond(&c, ct::READY),
        waiting.join(" ")
    )
}

/// The last lines of every container of the node that exited or restarted (for a failure).
async fn failed_container_logs(docker: &Docker, node: &str) -> String {
    let mut out = String::new();
    for c in docker
        .list(&format!("{}={node}", test_node::spec::labels::NODE))
        .await
        .unwrap_or_default()
    {
        let state = c["State"].as_str().unwrap_or("");
        let labels = &c["Labels"];
        let attempt: u32 = labels[test_node::spec::labels::ATTEMPT]
            .as_str()
            .and_then(|a| a.parse().ok())
            .unwrap_or(0);
        let code = c["Status"].as_str().unwrap_or("");
        let sandbox = labels[test_node::spec::labels::ROLE].as_str() == Some("sandbox");
        if !sandbox && (state == "exited" && !code.contains("(0)") || attempt > 0) {
            let id = c["Id"].as_str().unwrap_or("");
            out.push_str(&format!(
                "\n--- {} {} ({code}):\n{}",
                labels[test_node::spec::labels::POD].as_str().unwrap_or(""),
                labels[test_node::spec::labels::CONTAINER]
                    .as_str()
                    .unwrap_or(""),
                docker.logs_tail(id, 15).await.unwrap_or_default()
            ));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn control_plane_example_runs_as_pods_on_the_test_node() -> anyhow::Result<()> {
    let env = harness_env()?;
    let socket = match std::env::var("DOCKER_HOST") {
        Ok(h) => socket_path(&h).map_err(anyhow::Error::msg)?,
        Err(_) => PathBuf::from(TC).join("docker.sock"),
    };
    anyhow::ensure!(
        socket.exists(),
        "no test cloud Docker engine (scripts/test-cloud up)"
    );
    let docker = Docker::new(&socket);
    let sql: String = DATABASES
        .iter()
        .map(|d| format!("DROP DATABASE IF EXISTS `{d}`;"))
        .collect();
    external_mariadb(&env, &sql)?;

    let dir = tempfile::Builder::new().prefix("cp-demo-").tempdir()?;
    let out = dir.path().join("demo-output.log");
    let emulator = e2e::operator::free_local_addr()?.to_string();
    eprintln!(
        "scripts/demo control-plane: state {}, output {}",
        dir.path().display(),
        out.display()
    );
    let (d, e, o) = (dir.path().to_path_buf(), emulator.clone(), out.clone());
    let status = tokio::task::spawn_blocking(move || demo(&d, &e, "control-plane", &o)).await??;
    let result = if status.success() {
        let kubeconfig = kube::config::Kubeconfig::read_from(dir.path().join("kubeconfig"))?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        let client = Client::try_from(config)?;
        let r = after_ready(&client).await;
        if r.is_err() {
            eprintln!("{}", progress(&client).await);
        }
        r
    } else {
        Err(anyhow::anyhow!(
            "scripts/demo control-plane exited with {status}"
        ))
    };
    if result.is_err() {
        eprintln!(
            "--- scripts/demo control-plane (last lines):\n{}",
            tail(&out, 80)
        );
        eprintln!(
            "--- its operator's log (last lines):\n{}",
            tail(&dir.path().join("cp-operator.log"), 40)
        );
        eprintln!("{}", failed_container_logs(&docker, NODE).await);
    }
    let (d, e, o) = (dir.path().to_path_buf(), emulator, out);
    let stopped = tokio::task::spawn_blocking(move || demo(&d, &e, "stop", &o)).await??;
    result?;
    anyhow::ensure!(stopped.success(), "scripts/demo stop: {stopped}");
    Ok(())
}

/// What the demo does not check: each service's time to Ready, Nova's compute hosts, and
/// every API from another pod.
async fn after_ready(client: &Client) -> anyhow::Result<()> {
    let cluster = get(
        &dyn_api(client, NS, "OpenStackCluster", "openstackclusters"),
        CLUSTER,
    )
    .await?;
    let applied = cluster["metadata"]["creationTimestamp"]
        .as_str()
        .context("the cluster has no creationTimestamp")?
        .to_string();
    eprintln!("apply → Ready on the test node (s, from each Ready condition):");
    for (kind, plural, name) in CHILDREN {
        let o = get(&dyn_api(client, NS, kind, plural), name).await?;
        let ready = o["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == ct::READY)
            .with_context(|| format!("{kind} has no Ready condition"))?;
        anyhow::ensure!(ready["status"] == "True", "{kind} is not Ready: {ready}");
        let at = ready["lastTransitionTime"].as_str().unwrap_or_default();
        eprintln!(
            "  {kind:<10} {:>6}",
            seconds_between(&applied, at).map_or("?".into(), |s| s.to_string())
        );
    }
    // No hypervisor runs here: Nova is Ready all the same, and says which hosts have not
    // registered yet, once its aggregates Job (which may still run when Nova turns Ready)
    // has looked.
    let nova_api = dyn_api(client, NS, "Nova", "novas");
    let (complete, reason, message) = wait_for(
        Duration::from_secs(600),
        Duration::from_secs(5),
        "Nova's aggregates Job to end",
        async || {
            let nova = get(&nova_api, "cloud-nova").await?;
            let c =
                cond(&nova, ct::ZONES_COMPLETE).context("Nova has no ZonesComplete condition")?;
            Ok(if c.1 == "AggregatesPending" {
                Check::Pending(format!("ZonesComplete {}: {}", c.1, c.2))
            } else {
                Check::Done(c)
            })
        },
    )
    .await?;
    eprintln!("Nova ZonesComplete={complete} {reason}: {message}");
    anyhow::ensure!(
        !complete && reason == "ComputeHostsMissing" && message.contains("compute-a1"),
        "ZonesComplete: {complete} {reason}: {message}"
    );

    // The client pod: every API through its Service name.
    let ks = get(
        &dyn_api(client, NS, "Keystone", "keystones"),
        "cloud-keystone",
    )
    .await?;
    let auth_url = ks["status"]["endpoint"]
        .as_str()
        .context("the Keystone has no endpoint in status")?
        .to_string();
    let hz = get(&dyn_api(client, NS, "Horizon", "horizons"), "cloud-horizon").await?;
    let horizon_url = hz["status"]["endpoint"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| "http://cloud-horizon-api:8080".into());
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "e2e-client"},
            "data": {"client.py": CLIENT_PY}
        }))?,
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let admin_secret = format!("{}-keystone-admin", "cloud-keystone");
    let node = node_of(client).await?;
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "e2e-client"},
            "spec": {
                "nodeName": node, "restartPolicy": "Never",
                "volumes": [{"name": "client", "configMap": {"name": "e2e-client"}}],
                "containers": [{
                    "name": "client", "image": "localhost/openstack-horizon:2026.1",
                    "command": ["python3", "/client/client.py"],
                    "env": [
                        {"name": "OS_AUTH_URL", "value": auth_url},
                        {"name": "HORIZON_URL", "value": horizon_url},
                        {"name": "OS_PASSWORD", "valueFrom": {"secretKeyRef": {"name": admin_secret, "key": "password"}}}
                    ],
                    "volumeMounts": [{"name": "client", "mountPath": "/client"}]
                }]
            }
        }))?,
    )
    .await?;
    let checked = Instant::now();
    let done = wait_for(
        Duration::from_secs(300),
        Duration::from_secs(1),
        "the client pod",
        async || {
            let p = pods.get("e2e-client").await?;
            let st = p.status.clone().unwrap_or_default();
            Ok(match st.phase.as_deref() {
                Some("Succeeded") | Some("Failed") => Check::Done(p),
                other => Check::Pending(format!("{other:?}")),
            })
        },
    )
    .await?;
    let st = done.status.clone().unwrap_or_default();
    let term = st
        .container_statuses
        .iter()
        .flatten()
        .find_map(|c| c.state.as_ref()?.terminated.clone())
        .context("the client pod has no terminated state")?;
    let message = term.message.clone().unwrap_or_default();
    eprintln!(
        "client pod ({:.0} s): {message}",
        checked.elapsed().as_secs_f64()
    );
    let results: BTreeMap<String, (bool, String)> = serde_json::from_str(&message)
        .with_context(|| format!("the client's termination message: {message:?}"))?;
    for check in [
        "token",
        "placement",
        "image",
        "network",
        "compute_services",
        "volume_types",
        "horizon_login",
    ] {
        let (ok, detail) = results
            .get(check)
            .with_context(|| format!("no result for {check}: {message}"))?;
        anyhow::ensure!(*ok, "{check} failed from the client pod: {detail}");
    }
    assert_eq!(term.exit_code, 0, "{message}");
    Ok(())
}

/// The test node's name (the only Node).
async fn node_of(client: &Client) -> anyhow::Result<String> {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    nodes
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .find_map(|n| n.metadata.name)
        .context("no Node")
}

#[cfg(test)]
mod pure {
    use super::*;

    #[test]
    fn seconds_between_rfc3339_times() {
        assert_eq!(
            seconds_between("2026-12-06T20:00:00Z", "2026-12-06T20:10:42Z"),
            Some(642)
        );
        assert_eq!(seconds_between("2026-12-06T20:00:00Z", "never"), None);
    }
}
