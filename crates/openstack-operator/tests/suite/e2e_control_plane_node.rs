//! The whole control plane as real pods: `examples/control-plane/` with only its Secrets and
//! endpoints changed, reconciled by `openstack-operator control-plane` (the binary) against the
//! Kubernetes API emulator, its Deployments and Jobs run by the test node
//! (`crates/test-tools/test-node`, docs/test-node.md) as containers of the images `scripts/build-images`
//! makes, on the test cloud's Docker engine. The external services (`scripts/external-services`)
//! are reached by the pods, and by the operator, at the node's gateway (10.244.0.1, which
//! their certificate names) through the node's relays: to the host's 127.0.0.1, and for Ceph
//! (Cinder's RBD backend: the harness's monitor and its pool `checks`) to the same gateway
//! address on the host, where Ceph listens because its maps hand clients that address.
//!
//! The operator runs where an in-cluster operator would: in the engine's network namespace,
//! with the node's hosts file (every Service by its full names) as its `/etc/hosts`, so it
//! reaches each service's API through its Service name, and the emulator through a relay.
//!
//! Once the cluster is Ready (each service's time from apply to Ready is printed), a client pod
//! (`cp_node/client.py`, from the Horizon image) makes one authenticated request to each API
//! through the catalog's internal endpoints, i.e. the Service names: a token; resource
//! providers; an image uploaded and downloaded; a network created; the compute services;
//! volume types; Horizon's login reaching the dashboard.
//!
//! Needs `scripts/test-cloud up`, `scripts/external-services up` and the images
//! (`scripts/build-images`) in the engine; it drops and recreates the example's databases on
//! the external MariaDB (a new install reaches every schema head).

use crate::cp_common::*;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use controlplane_api::condition_types as ct;
use e2e::{Check, wait_for};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use kube_emulator::{Emulator, EmulatorOptions};
use serde_json::{Value, json};
use test_node::docker::{Docker, socket_path};
use test_node::netns::NetNs;
use test_node::{DockerProvider, Settings};
use tokio_util::sync::CancellationToken;
use vk_runtime::node::Identity;
use vk_runtime::{NodeConfig, OnShutdown};

const NS: &str = "openstack";
const CLUSTER: &str = "cloud";
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
/// The cluster's time to Ready on a loaded two-core machine (images already in the engine):
/// about 1,000 s for six services, Nova's serial Jobs and API start the rest.
const CONVERGE: Duration = Duration::from_secs(2400);
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

/// The documents of `examples/control-plane/<file>`.
fn example(file: &str) -> anyhow::Result<Vec<Value>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/control-plane")
        .join(file);
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    Ok(api::manifest::documents(&text)?)
}

/// `127.0.0.1:P` of the harness → `<pod host>:P` (pure): where pods reach the service.
fn for_pods(v: &str, pod_host: &str) -> String {
    v.replace("127.0.0.1", pod_host)
}

/// The harness port of an endpoint (`ssl:h:p`, `http://h:p`, `h:p`).
fn port_of(v: &str) -> Option<u16> {
    v.rsplit(':').next()?.trim_end_matches('/').parse().ok()
}

fn secret_value(env: &BTreeMap<String, String>, secret: &str, key: &str) -> Option<String> {
    let var = |k: &str| env.get(k).cloned();
    match (secret, key) {
        ("db-admin", "username") => var("EXTSVC_DB_ADMIN_USER"),
        ("db-admin", "password") => var("EXTSVC_DB_ADMIN_PASSWORD"),
        ("rabbitmq", "username") => var("EXTSVC_AMQP_USER"),
        ("rabbitmq", "password") => var("EXTSVC_AMQP_PASSWORD"),
        ("s3", "accessKey") => var("EXTSVC_S3_ACCESS_KEY"),
        ("s3", "secretKey") => var("EXTSVC_S3_SECRET_KEY"),
        ("internal-ca", "ca.crt") => var("EXTSVC_CA").and_then(|p| std::fs::read_to_string(p).ok()),
        _ => None,
    }
}

/// The example's external service pointed at the harness's, as pods reach it (pure).
fn adapt_external(
    doc: &mut Value,
    env: &BTreeMap<String, String>,
    pod_host: &str,
) -> anyhow::Result<()> {
    let var = |k: &str| {
        env.get(k)
            .map(|v| for_pods(v, pod_host))
            .with_context(|| format!("{k} missing from the external-services env"))
    };
    let name = doc["metadata"]["name"].as_str().unwrap_or("").to_string();
    let spec = &mut doc["spec"];
    match name.as_str() {
        "db" => spec["endpoints"] = json!([var("EXTSVC_DB")?]),
        "mq" => {
            spec["endpoints"] = json!([var("EXTSVC_AMQP")?]);
            spec["extra"]["vhost"] = json!(var("EXTSVC_AMQP_VHOST")?);
        }
        // A memcached of its own: on the harness's, beside the tests' Keystones, the cluster's
        // Keystone read their cached users and projects (oslo.cache keys name no deployment)
        // and its bootstrap Job failed.
        "cache" => spec["endpoints"] = json!([var("EXTSVC_MEMCACHED_PODS")?]),
        "objects" => {
            spec["endpoints"] = json!([var("EXTSVC_S3")?]);
            spec["extra"]["bucket"] = json!(var("EXTSVC_S3_BUCKET")?);
        }
        "ovn" => {
            let (nb, sb) = (var("EXTSVC_OVN_NB_SSL")?, var("EXTSVC_OVN_SB_SSL")?);
            spec["endpoints"] = json!([nb, sb]);
            spec["extra"] = json!({"northbound": nb, "southbound": sb});
        }
        other => anyhow::bail!("example external service {other:?}: no harness for it"),
    }
    Ok(())
}

/// The example's cluster with its Cinder RBD backend on the harness's Ceph (pure): the
/// monitor and the pool; the harness's cluster needs no key (`auth … = none`), so the
/// example's keyring Secret stays a placeholder.
fn adapt_cluster(doc: &mut Value, env: &BTreeMap<String, String>) -> anyhow::Result<()> {
    let var = |k: &str| {
        env.get(k).cloned().with_context(|| {
            format!("{k} missing from the external-services env (scripts/external-services up)")
        })
    };
    let backends = doc["spec"]["cinderBackends"]
        .as_array_mut()
        .context("30-cluster.yaml has no cinderBackends")?;
    for b in backends {
        if let Some(rbd) = b.get_mut("rbd") {
            rbd["cephConf"] = json!(format!(
                "[global]\nmon host = {}\n",
                var("EXTSVC_CEPH_MON")?
            ));
            rbd["pool"] = json!(var("EXTSVC_CEPH_POOL")?);
        }
    }
    Ok(())
}

/// The relays' host addresses: every harness endpoint the adapted examples name, on
/// 127.0.0.1; Ceph's monitor and OSD ports on the address Ceph listens on.
fn relays(env: &BTreeMap<String, String>) -> anyhow::Result<Vec<SocketAddr>> {
    let mut out: Vec<SocketAddr> = [
        "EXTSVC_DB",
        "EXTSVC_AMQP",
        "EXTSVC_MEMCACHED_PODS",
        "EXTSVC_S3",
        "EXTSVC_OVN_NB_SSL",
        "EXTSVC_OVN_SB_SSL",
    ]
    .iter()
    .filter_map(|k| port_of(env.get(*k)?))
    .map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
    .collect();
    let get = |k: &str| {
        env.get(k).with_context(|| {
            format!("{k} missing from the external-services env (scripts/external-services up)")
        })
    };
    let mon = get("EXTSVC_CEPH_MON")?;
    let mon: SocketAddr = mon
        .trim_start_matches("v2:")
        .parse()
        .with_context(|| format!("EXTSVC_CEPH_MON={mon}"))?;
    out.push(mon);
    out.extend(
        test_node::services::relay_targets(&format!(
            "{}:{}",
            mon.ip(),
            get("EXTSVC_CEPH_OSD_PORTS")?
        ))
        .map_err(anyhow::Error::msg)?,
    );
    Ok(out)
}

fn node_config(name: &str, gateway: &str) -> NodeConfig {
    NodeConfig {
        identity: Identity {
            name: name.into(),
            labels: BTreeMap::from([("kubernetes.io/hostname".to_string(), name.to_string())]),
            taints: vec![],
            kubelet_port: 10250,
            version: "v1.36.0-test-node".into(),
            os: "linux".into(),
            arch: "amd64".into(),
            internal_ip: gateway.into(),
            hostname: None,
        },
        lease_duration_s: 40,
        lease_renew: Duration::from_secs(5),
        status_interval: Duration::from_secs(5),
        status_max_age: Duration::from_secs(60),
        poll_interval: Duration::from_millis(1000),
        on_shutdown: OnShutdown::Delete,
    }
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
    let pod_host = env
        .get("EXTSVC_POD_HOST")
        .cloned()
        .unwrap_or_else(|| "10.244.0.1".into());
    let socket = match std::env::var("DOCKER_HOST") {
        Ok(h) => socket_path(&h).map_err(anyhow::Error::msg)?,
        Err(_) => PathBuf::from(TC).join("docker.sock"),
    };
    let netns_path = PathBuf::from(TC).join("netns");
    anyhow::ensure!(
        socket.exists() && netns_path.exists(),
        "no test cloud Docker engine (scripts/test-cloud up)"
    );
    let docker = Docker::new(&socket);
    for s in [
        "keystone",
        "placement",
        "glance",
        "neutron",
        "nova",
        "cinder",
        "horizon",
    ] {
        let image = format!("localhost/openstack-{s}:2026.1");
        anyhow::ensure!(
            docker.image(&image).await?.is_some(),
            "image {image} is not in the engine: run scripts/build-images"
        );
    }
    let sql: String = DATABASES
        .iter()
        .map(|d| format!("DROP DATABASE IF EXISTS `{d}`;"))
        .collect();
    external_mariadb(&env, &sql)?;

    let emu = Emulator::start(EmulatorOptions::default()).await?;
    let client = emu.client().await?;
    let emu_port = emu.addr().port();
    install_crds(&client).await?;
    let node = e2e::unique("cp-node");
    let state = tempfile::Builder::new().prefix("cp-node-").tempdir()?;
    let mut relays = relays(&env)?;
    relays.push(SocketAddr::from(([127, 0, 0, 1], emu_port)));
    let service_base: u32 =
        u32::from(std::net::Ipv4Addr::new(10, 245, 0, 0)) + (u32::from(emu_port) % 50 + 200) * 256;
    let provider = DockerProvider::new(
        docker.clone(),
        NetNs::open(&netns_path)?,
        client.clone(),
        Settings {
            node: node.clone(),
            state_dir: state.path().to_path_buf(),
            network: "test-node".into(),
            subnet: "10.244.0.0/16".into(),
            gateway: pod_host.parse()?,
            service_base: service_base.into(),
            sandbox_image: None,
            extra_hosts: vec![],
            relays,
        },
    )
    .await
    .map_err(anyhow::Error::msg)?;
    let stop = CancellationToken::new();
    let runner = tokio::spawn(vk_runtime::run(
        client.clone(),
        node_config(&node, &pod_host),
        provider as Arc<_>,
        stop.clone(),
    ));
    tokio::spawn(test_node::workloads::run(
        client.clone(),
        node.clone(),
        Duration::from_secs(1),
        stop.clone(),
    ));

    let result = scenario(
        &client,
        &env,
        &state.path().join("hosts"),
        emu_port,
        &pod_host,
    )
    .await;
    if result.is_err() {
        eprintln!("{}", progress(&client).await);
        eprintln!("{}", failed_container_logs(&docker, &node).await);
    }
    // Cleanup: the node's containers removed directly (deleting ~40 pods gracefully through
    // the node would take minutes), then the node stopped.
    stop.cancel();
    let _ = runner.await;
    for c in docker
        .list(&format!("{}={node}", test_node::spec::labels::NODE))
        .await
        .unwrap_or_default()
    {
        let _ = docker.remove(c["Id"].as_str().unwrap_or("")).await;
    }
    result
}

async fn scenario(
    client: &Client,
    env: &BTreeMap<String, String>,
    hosts: &Path,
    emu_port: u16,
    pod_host: &str,
) -> anyhow::Result<()> {
    let pp = PatchParams::apply("e2e").force();
    for doc in example("00-namespace.yaml")? {
        let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        nss.patch(NS, &pp, &Patch::Apply(&doc)).await?;
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    for doc in example("10-secrets.yaml")? {
        let name = doc["metadata"]["name"].as_str().unwrap_or("").to_string();
        let mut data = Vec::new();
        for (key, _) in doc["stringData"].as_object().into_iter().flatten() {
            let v = secret_value(env, &name, key)
                .with_context(|| format!("no harness value for Secret {name} key {key}"))?;
            data.push((key.clone(), v));
        }
        let data: Vec<(&str, &str)> = data.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        secrets
            .create(&PostParams::default(), &secret(&name, &data))
            .await?;
    }
    let read = |k: &str| -> anyhow::Result<String> {
        let p = env.get(k).with_context(|| format!("{k} missing"))?;
        Ok(std::fs::read_to_string(p)?)
    };
    // The Secrets the examples name but leave to the site.
    for s in [
        secret(
            "ovn-client-tls",
            &[
                ("tls.crt", &read("EXTSVC_CLIENT_CERT")?),
                ("tls.key", &read("EXTSVC_CLIENT_KEY")?),
            ],
        ),
        secret(
            "ceph-keyring",
            &[(
                "keyring",
                "[client.cinder]\n\tkey = AQBzuS1pAAAAABAAk8b2Zm9vYmFyYmF6cXV4cXV1eA==\n",
            )],
        ),
    ] {
        secrets.create(&PostParams::default(), &s).await?;
    }
    let ext = dyn_api(
        client,
        NS,
        "OpenStackExternalService",
        "openstackexternalservices",
    );
    for mut doc in example("20-external-services.yaml")? {
        adapt_external(&mut doc, env, pod_host)?;
        let name = doc["metadata"]["name"].as_str().unwrap_or("").to_string();
        ext.patch(&name, &pp, &Patch::Apply(&doc)).await?;
    }
    let cl_api = dyn_api(client, NS, "OpenStackCluster", "openstackclusters");
    let mut cluster = example("30-cluster.yaml")?
        .into_iter()
        .next()
        .context("30-cluster.yaml is empty")?;
    adapt_cluster(&mut cluster, env)?;

    // The operator in the engine's network namespace, the node's hosts file as /etc/hosts.
    if !hosts.exists() {
        std::fs::write(hosts, "127.0.0.1\tlocalhost\n")?;
    }
    let kubeconfig = hosts.with_file_name("operator-kubeconfig");
    std::fs::write(
        &kubeconfig,
        kube_emulator::kubeconfig_yaml(&format!("http://{pod_host}:{emu_port}")),
    )?;
    let log_path = std::env::temp_dir().join("e2e_control_plane_node-operator.log");
    let log = std::fs::File::create(&log_path)?;
    eprintln!("operator log: {}", log_path.display());
    let _op = Proc(
        Command::new("nsenter")
            .arg(format!("--net={TC}/netns"))
            .args(["--", "unshare", "--mount", "--", "sh", "-c"])
            .arg(r#"mount --bind "$0" /etc/hosts && exec "$@""#)
            .arg(hosts)
            .args([
                BIN,
                "control-plane",
                "--health-addr",
                "127.0.0.1:0",
                "--metrics-addr",
                "127.0.0.1:0",
                "--watch-namespace",
                NS,
                "--check-interval-seconds",
                "10",
                // A token costs Keystone a bcrypt of 2^12 rounds (the example's
                // password_hash_rounds); on two loaded cores with seven services probing,
                // 10 s was not always enough.
                "--check-timeout-seconds",
                "30",
                "--job-retry-base-seconds",
                "5",
                "--job-retry-max-seconds",
                "30",
                "--resync-seconds",
                "20",
                // The node writes a Secret's new version into the pods' volumes within a
                // second, not the kubelet's minute.
                "--secret-propagation-seconds",
                "10",
            ])
            .env("KUBECONFIG", &kubeconfig)
            .env("NO_COLOR", "1")
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()
            .context("starting the operator under nsenter/unshare (needs root)")?,
    );

    let applied = Instant::now();
    cl_api.patch(CLUSTER, &pp, &Patch::Apply(&cluster)).await?;
    let mut ready_after: BTreeMap<&str, f64> = BTreeMap::new();
    let mut last_report = Instant::now();
    wait_for(
        CONVERGE,
        Duration::from_secs(2),
        "the cluster Ready",
        async || {
            for (kind, plural, name) in CHILDREN {
                if ready_after.contains_key(kind) {
                    continue;
                }
                if let Ok(o) = get(&dyn_api(client, NS, kind, plural), name).await
                    && cond(&o, ct::READY).is_some_and(|c| c.0)
                {
                    let s = applied.elapsed().as_secs_f64();
                    eprintln!("[{s:6.0} s] {kind} Ready");
                    ready_after.insert(kind, s);
                }
            }
            let c = get(&cl_api, CLUSTER).await?;
            if cond(&c, ct::READY).is_some_and(|c| c.0)
                && c["status"]["observedGeneration"] == c["metadata"]["generation"]
            {
                return Ok(Check::Done(()));
            }
            let p = progress(client).await;
            if last_report.elapsed() > Duration::from_secs(60) {
                eprintln!("[{:6.0} s] {p}", applied.elapsed().as_secs_f64());
                last_report = Instant::now();
            }
            Ok(Check::Pending(p))
        },
    )
    .await?;
    let total = applied.elapsed().as_secs_f64();
    eprintln!("apply → Ready on the test node (s):");
    for (kind, _, _) in CHILDREN {
        eprintln!(
            "  {kind:<10} {:6.0}",
            ready_after.get(kind).copied().unwrap_or(total)
        );
    }
    eprintln!("  {:<10} {total:6.0}", "cluster");
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
    fn harness_endpoints_become_the_pods_gateway_and_their_ports_are_relayed() {
        let env: BTreeMap<String, String> = [
            ("EXTSVC_DB", "127.0.0.1:13307"),
            ("EXTSVC_AMQP", "127.0.0.1:15682"),
            ("EXTSVC_MEMCACHED", "127.0.0.1:11311"),
            ("EXTSVC_MEMCACHED_PODS", "127.0.0.1:11315"),
            ("EXTSVC_S3", "http://127.0.0.1:17480"),
            ("EXTSVC_OVN_NB_SSL", "ssl:127.0.0.1:16643"),
            ("EXTSVC_OVN_SB_SSL", "ssl:127.0.0.1:16644"),
            ("EXTSVC_AMQP_VHOST", "openstack"),
            ("EXTSVC_S3_BUCKET", "checks"),
            ("EXTSVC_CEPH_MON", "v2:10.244.0.1:16789"),
            ("EXTSVC_CEPH_OSD_PORTS", "16800-16899"),
            ("EXTSVC_CEPH_POOL", "checks"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let r = relays(&env).unwrap();
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(
            r[..7],
            [
                a("127.0.0.1:13307"),
                a("127.0.0.1:15682"),
                a("127.0.0.1:11315"),
                a("127.0.0.1:17480"),
                a("127.0.0.1:16643"),
                a("127.0.0.1:16644"),
                a("10.244.0.1:16789"),
            ]
        );
        assert_eq!(r.len(), 7 + 100);
        assert_eq!(r[7], a("10.244.0.1:16800"));
        assert_eq!(r[106], a("10.244.0.1:16899"));
        let mut doc = json!({"metadata": {"name": "ovn"}, "spec": {}});
        adapt_external(&mut doc, &env, "10.244.0.1").unwrap();
        assert_eq!(doc["spec"]["endpoints"][0], "ssl:10.244.0.1:16643");
        let mut doc = json!({"metadata": {"name": "objects"}, "spec": {"extra": {}}});
        adapt_external(&mut doc, &env, "10.244.0.1").unwrap();
        assert_eq!(doc["spec"]["endpoints"][0], "http://10.244.0.1:17480");
        // The cluster's cache is the memcached no test's Keystone uses.
        let mut doc = json!({"metadata": {"name": "cache"}, "spec": {}});
        adapt_external(&mut doc, &env, "10.244.0.1").unwrap();
        assert_eq!(doc["spec"]["endpoints"][0], "10.244.0.1:11315");
    }

    #[test]
    fn the_examples_rbd_backend_uses_the_harness_monitor_and_pool() {
        let env: BTreeMap<String, String> = [
            ("EXTSVC_CEPH_MON", "v2:10.244.0.1:16789"),
            ("EXTSVC_CEPH_POOL", "checks"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let mut cluster = example("30-cluster.yaml").unwrap().remove(0);
        adapt_cluster(&mut cluster, &env).unwrap();
        let rbd = &cluster["spec"]["cinderBackends"][0]["rbd"];
        assert_eq!(
            rbd["cephConf"],
            "[global]\nmon host = v2:10.244.0.1:16789\n"
        );
        assert_eq!(rbd["pool"], "checks");
        assert_eq!(rbd["keyringSecret"]["name"], "ceph-keyring");
        let e = adapt_cluster(&mut cluster, &BTreeMap::new()).unwrap_err();
        assert!(e.to_string().contains("EXTSVC_CEPH_MON"), "{e}");
    }
}
