//! The test node against the Kubernetes API emulator and the test cloud's real Docker engine
//! (`scripts/test-cloud up`; its socket and network namespace, or `DOCKER_HOST` and
//! `TEST_NODE_NETNS`): pods bound to the node run as real containers from a local image
//! (`TEST_NODE_IMAGE`, default `busybox`, which the test cloud's registry mirror holds).
//!
//! One node, four pods at once:
//! - a Job-like pod: an init container writes into an emptyDir the main container reads;
//!   a Secret volume (mode 0440) readable through `fsGroup` by a non-root user; exit code and
//!   termination message in the status;
//! - a Deployment-like pod whose readiness probe (httpGet) makes it Ready only once its
//!   server answers;
//! - a crash-looping container whose restarts follow the kubelet's back-off;
//! - a pod reaching another through a Service name (port → named targetPort), and servers on
//!   the host's 127.0.0.1 and on another host address (127.0.0.2, as Ceph on the pods'
//!   address) through the node's relays at the network's gateway.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use e2e::wait::{Check, wait_for};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus, Secret, Service};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube_emulator::{Emulator, EmulatorOptions};
use serde_json::json;
use test_node::docker::{Docker, socket_path};
use test_node::netns::NetNs;
use test_node::{DockerProvider, Settings};
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;
use vk_runtime::node::Identity;
use vk_runtime::{NodeConfig, OnShutdown};

const TC: &str = "/var/cache/openstack-operator/test-cloud/run";
const POLL: Duration = Duration::from_millis(250);

fn engine() -> (PathBuf, NetNs) {
    let socket = match std::env::var("DOCKER_HOST") {
        Ok(h) => socket_path(&h).unwrap(),
        Err(_) => PathBuf::from(TC).join("docker.sock"),
    };
    assert!(
        socket.exists(),
        "no Docker engine at {} (scripts/test-cloud up starts one; or set DOCKER_HOST)",
        socket.display()
    );
    let ns = match std::env::var("TEST_NODE_NETNS") {
        Ok(p) if p.is_empty() => NetNs::host(),
        Ok(p) => NetNs::open(std::path::Path::new(&p)).unwrap(),
        Err(_) if socket == PathBuf::from(TC).join("docker.sock") => {
            NetNs::open(&PathBuf::from(TC).join("netns")).unwrap()
        }
        Err(_) => NetNs::host(),
    };
    (socket, ns)
}

fn node_config(name: &str) -> NodeConfig {
    NodeConfig {
        identity: Identity {
            name: name.into(),
            labels: BTreeMap::new(),
            taints: vec![],
            kubelet_port: 10250,
            version: "v1.36.0-test-node".into(),
            os: "linux".into(),
            arch: "amd64".into(),
            internal_ip: "10.244.0.1".into(),
            hostname: None,
        },
        lease_duration_s: 40,
        lease_renew: Duration::from_secs(1),
        status_interval: Duration::from_secs(1),
        status_max_age: Duration::from_secs(60),
        poll_interval: Duration::from_millis(500),
        on_shutdown: OnShutdown::Delete,
    }
}

fn pod(v: serde_json::Value) -> Pod {
    serde_json::from_value(v).unwrap()
}

fn main_status(p: &Pod, name: &str) -> Option<ContainerStatus> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == name)
        .cloned()
}

fn condition(st: &PodStatus, ty: &str) -> Option<String> {
    st.conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == ty)
        .map(|c| c.status.clone())
}

fn brief(p: &Pod) -> String {
    serde_json::to_string(&p.status).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pods_run_as_real_containers() {
    let (socket, ns) = engine();
    let image = std::env::var("TEST_NODE_IMAGE").unwrap_or_else(|_| "busybox".into());
    let emu = Emulator::start(EmulatorOptions::default()).await.unwrap();
    let client = emu.client().await.unwrap();
    let node = e2e::unique("e2e-test-node");
    let state = tempfile::tempdir().unwrap();
    // A server on the host's loopback, as the external services are, reached through the
    // node's relay at the gateway.
    let host_srv = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host_port = host_srv.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = host_srv.accept().await {
            let _ = s.write_all(b"hello-from-host\n").await;
        }
    });
    // One on another host address (as Ceph on the pods' address), relayed there, not to
    // 127.0.0.1 (where nothing listens on that port).
    let other_srv = tokio::net::TcpListener::bind("127.0.0.2:0").await.unwrap();
    let other = other_srv.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = other_srv.accept().await {
            let _ = s.write_all(b"hello-from-other-address\n").await;
        }
    });
    // Service addresses of their own, so that tests of other nodes in the same engine
    // namespace do not collide.
    let base: u32 =
        u32::from(std::net::Ipv4Addr::new(10, 245, 0, 0)) + (u32::from(host_port) % 200 + 1) * 256;
    let provider = DockerProvider::new(
        Docker::new(&socket),
        ns,
        client.clone(),
        Settings {
            node: node.clone(),
            state_dir: state.path().to_path_buf(),
            network: "test-node".into(),
            subnet: "10.244.0.0/16".into(),
            gateway: "10.244.0.1".parse().unwrap(),
            service_base: base.into(),
            sandbox_image: Some(image.clone()),
            extra_hosts: vec![],
            relays: vec![
                std::net::SocketAddr::from(([127, 0, 0, 1], host_port)),
                other,
            ],
        },
    )
    .await
    .unwrap();
    let shutdown = CancellationToken::new();
    let runner = tokio::spawn(vk_runtime::run(
        client.clone(),
        node_config(&node),
        provider as Arc<_>,
        shutdown.clone(),
    ));
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let result = scenarios(&client, &pods, &node, &image, host_port, other.port()).await;

    // Cleanup, whatever happened: every pod deleted through the node, then nothing of the
    // node left in Docker.
    let list = pods.list(&ListParams::default()).await.unwrap();
    for p in list.items {
        let _ = pods
            .delete(
                p.metadata.name.as_deref().unwrap(),
                &DeleteParams::default(),
            )
            .await;
    }
    let gone = wait_for(Duration::from_secs(90), POLL, "pods deleted", async || {
        let left = pods.list(&ListParams::default()).await?.items.len();
        Ok(if left == 0 {
            Check::Done(())
        } else {
            Check::Pending(format!("{left} pods left"))
        })
    })
    .await;
    let docker = Docker::new(&socket);
    let left = docker
        .list(&format!("test-node.openstack-operator/node={node}"))
        .await
        .unwrap();
    for c in &left {
        let _ = docker.remove(c["Id"].as_str().unwrap()).await;
    }
    shutdown.cancel();
    let _ = runner.await;
    result.unwrap();
    gone.unwrap();
    assert!(
        left.is_empty(),
        "containers left after their pods were deleted: {left:?}"
    );
}

async fn scenarios(
    client: &kube::Client,
    pods: &Api<Pod>,
    node: &str,
    image: &str,
    host_port: u16,
    other_port: u16,
) -> anyhow::Result<()> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "creds"},
                "data": {"pw": "czNjcmV0"}
            }))?,
        )
        .await?;
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "web"},
                "spec": {"selector": {"app": "web"},
                         "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}
            }))?,
        )
        .await?;
    // The Job: init writes, main reads; the Secret file (0440, root-owned) is readable by
    // uid 1000 only through the fsGroup; exit 3 with a termination message.
    pods.create(&PostParams::default(), &pod(json!({
        "metadata": {"name": "job"},
        "spec": {
            "nodeName": node, "restartPolicy": "Never",
            "securityContext": {"runAsUser": 1000, "fsGroup": 2000},
            "volumes": [
                {"name": "creds", "secret": {"secretName": "creds", "defaultMode": 0o440}},
                {"name": "shared", "emptyDir": {}}
            ],
            "initContainers": [{"name": "writer", "image": image,
                "command": ["sh", "-c", "echo from-init:$(id -u) > /shared/msg"],
                "volumeMounts": [{"name": "shared", "mountPath": "/shared"}]}],
            "containers": [{"name": "reader", "image": image,
                "env": [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "pw"}}},
                        {"name": "ME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "command": ["sh", "-c",
                    "echo \"$(cat /shared/msg) file=$(cat /etc/creds/pw) env=$PW me=$ME mode=$(stat -L -c %a:%g /etc/creds/pw) groups=$(id -G)\" > /dev/termination-log; exit 3"],
                "volumeMounts": [{"name": "creds", "mountPath": "/etc/creds"},
                                 {"name": "shared", "mountPath": "/shared"}]}]
        }
    }))).await?;
    // The Deployment-like pod behind the Service: its server starts after 15 s, so the pod
    // is first Running and not Ready. (3 s was too short a window under CI's load: the
    // node's status pass, busy starting the other pods, first wrote web-1 already Ready.)
    pods.create(&PostParams::default(), &pod(json!({
        "metadata": {"name": "web-1", "labels": {"app": "web"}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "web", "image": image,
                "ports": [{"name": "http", "containerPort": 8080}],
                "command": ["sh", "-c", "mkdir -p /www && echo hello-from-web > /www/index.html && sleep 15 && exec httpd -f -p 8080 -h /www"],
                "readinessProbe": {"httpGet": {"path": "/index.html", "port": "http"},
                                   "periodSeconds": 1, "failureThreshold": 1}}]
        }
    }))).await?;
    pods.create(&PostParams::default(), &pod(json!({
        "metadata": {"name": "crasher"},
        "spec": {"nodeName": node,
                 "containers": [{"name": "crash", "image": image, "command": ["sh", "-c", "exit 1"]}]}
    }))).await?;
    // The client: through the Service's short and full names, and the host relay; retried
    // (OnFailure) until the Service has a ready endpoint.
    pods.create(&PostParams::default(), &pod(json!({
        "metadata": {"name": "client"},
        "spec": {"nodeName": node, "restartPolicy": "OnFailure",
                 "containers": [{"name": "client", "image": image, "command": ["sh", "-c",
                    format!("set -e; get() {{ printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | nc -w 3 $1 80 | tail -n 1; }}; a=$(get web); b=$(get web.default.svc.cluster.local); c=$(nc -w 3 10.244.0.1 {host_port} </dev/null); d=$(nc -w 3 10.244.0.1 {other_port} </dev/null); test -n \"$a\"; test -n \"$c\"; test -n \"$d\"; echo \"$a $b $c $d\" > /dev/termination-log")]}]}
    }))).await?;

    // Job.
    let job = wait_for(
        Duration::from_secs(120),
        POLL,
        "the job pod to fail with exit 3",
        async || {
            let p = pods.get("job").await?;
            let phase = p
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default();
            Ok(if phase == "Failed" {
                Check::Done(p)
            } else {
                Check::Pending(brief(&p))
            })
        },
    )
    .await?;
    let st = job.status.clone().unwrap_or_default();
    let init = &st.init_container_statuses.clone().unwrap_or_default()[0];
    let it = init
        .state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .unwrap_or_else(|| panic!("init not terminated: {}", brief(&job)));
    anyhow::ensure!(
        (it.exit_code, it.reason.as_deref()) == (0, Some("Completed")),
        "{:?} != {:?}",
        (it.exit_code, it.reason.as_deref()),
        (0, Some("Completed"))
    );
    let t = main_status(&job, "reader")
        .and_then(|c| c.state?.terminated)
        .expect("reader terminated");
    anyhow::ensure!(t.exit_code == 3, "{}", brief(&job));
    anyhow::ensure!(
        t.reason.as_deref() == Some("Error"),
        "{:?} != {:?}",
        t.reason.as_deref(),
        Some("Error")
    );
    let msg = t.message.unwrap_or_default();
    anyhow::ensure!(
        msg.contains("from-init:1000 file=s3cret env=s3cret me=job mode=440:2000"),
        "termination message: {msg:?}"
    );
    anyhow::ensure!(msg.contains("2000"), "fsGroup among the groups: {msg:?}");
    anyhow::ensure!(
        st.pod_ip
            .as_deref()
            .is_some_and(|ip| ip.starts_with("10.244."))
    );
    anyhow::ensure!(
        st.host_ip.as_deref() == Some("10.244.0.1"),
        "{:?} != {:?}",
        st.host_ip.as_deref(),
        Some("10.244.0.1")
    );

    // Readiness: Running and not Ready first, then Ready.
    let seen_unready = wait_for(
        Duration::from_secs(60),
        POLL,
        "web-1 running, not ready",
        async || {
            let p = pods.get("web-1").await?;
            let st = p.status.clone().unwrap_or_default();
            let running = main_status(&p, "web")
                .is_some_and(|c| c.state.is_some_and(|s| s.running.is_some()));
            Ok(
                if running && condition(&st, "Ready").as_deref() == Some("False") {
                    Check::Done(())
                } else if condition(&st, "Ready").as_deref() == Some("True") {
                    Check::Fail(anyhow::anyhow!(
                        "Ready before its server could answer: {}",
                        brief(&p)
                    ))
                } else {
                    Check::Pending(brief(&p))
                },
            )
        },
    )
    .await;
    seen_unready?;
    wait_for(Duration::from_secs(60), POLL, "web-1 Ready", async || {
        let p = pods.get("web-1").await?;
        let st = p.status.clone().unwrap_or_default();
        let c = main_status(&p, "web");
        Ok(
            if condition(&st, "Ready").as_deref() == Some("True")
                && condition(&st, "ContainersReady").as_deref() == Some("True")
                && c.is_some_and(|c| c.ready && c.started == Some(true))
            {
                Check::Done(())
            } else {
                Check::Pending(brief(&p))
            },
        )
    })
    .await?;

    // Service: the client got the page twice and the host's greeting.
    let cl = wait_for(
        Duration::from_secs(120),
        POLL,
        "the client pod to succeed",
        async || {
            let p = pods.get("client").await?;
            let phase = p
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default();
            Ok(if phase == "Succeeded" {
                Check::Done(p)
            } else {
                Check::Pending(brief(&p))
            })
        },
    )
    .await?;
    let m = main_status(&cl, "client")
        .and_then(|c| c.state?.terminated?.message)
        .unwrap_or_default();
    anyhow::ensure!(
        m.trim() == "hello-from-web hello-from-web hello-from-host hello-from-other-address",
        "{:?} != {:?}",
        m.trim(),
        "hello-from-web hello-from-web hello-from-host hello-from-other-address"
    );

    // Crash loop: each run shows as lastState (by its container id) while the pod waits in
    // CrashLoopBackOff; run 1 ended → run 2 started only after the kubelet's 10 s, run 2 →
    // run 3 after 20 s.
    let mut runs: BTreeMap<String, (jiff::Timestamp, jiff::Timestamp, i32)> = BTreeMap::new();
    let mut back_off_seen = false;
    let p = wait_for(
        Duration::from_secs(150),
        POLL,
        "the crasher's runs 1 to 3",
        async || {
            let p = pods.get("crasher").await?;
            let c = main_status(&p, "crash");
            back_off_seen |= c
                .as_ref()
                .and_then(|c| c.state.clone()?.waiting?.reason)
                .as_deref()
                == Some("CrashLoopBackOff");
            if let Some(t) = c.as_ref().and_then(|c| c.last_state.clone()?.terminated)
                && let (Some(id), Some(s), Some(f)) = (t.container_id, t.started_at, t.finished_at)
            {
                runs.insert(id, (s.0, f.0, t.exit_code));
            }
            Ok(if runs.len() >= 3 {
                Check::Done(p)
            } else {
                Check::Pending(format!("runs seen: {runs:?}; {}", brief(&p)))
            })
        },
    )
    .await?;
    anyhow::ensure!(
        back_off_seen,
        "never shown in CrashLoopBackOff: {}",
        brief(&p)
    );
    let mut seq: Vec<_> = runs.values().cloned().collect();
    seq.sort();
    anyhow::ensure!(seq.iter().all(|r| r.2 == 1), "exit codes: {seq:?}");
    // The last three runs seen: the gaps between them double (10 s, then 20 s at least).
    let n = seq.len();
    let gap = |a: usize, b: usize| seq[b].0.duration_since(seq[a].1);
    let (g1, g2) = (gap(n - 3, n - 2), gap(n - 2, n - 1));
    anyhow::ensure!(
        g1 >= jiff::SignedDuration::from_secs(9) && g2 >= g1 + jiff::SignedDuration::from_secs(9),
        "gaps between runs {g1:?}, {g2:?}: the kubelet's back-off doubles from 10 s; runs {seq:?}"
    );
    let c = main_status(&p, "crash").expect("crash status");
    anyhow::ensure!(c.restart_count >= 3, "restartCount {}", c.restart_count);
    Ok(())
}
