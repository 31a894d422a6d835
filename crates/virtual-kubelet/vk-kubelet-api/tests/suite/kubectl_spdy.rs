//! The real kubectl (`/usr/bin/kubectl`, SPDY forced with
//! `KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false` and
//! `KUBECTL_PORT_FORWARD_WEBSOCKETS=false`) against the kubelet API, through a
//! proxy playing the API server's pass-through: API requests go to the
//! emulator, `pods/{pod}/exec` and `pods/{pod}/portforward` are rewritten to
//! the kubelet's paths with a token the kubelet accepts and the upgrade is
//! passed through. The backend runs commands as local processes and forwards
//! ports to local listeners, so what kubectl shows is what SPDY carried.
//! Without kubectl the test says so and does nothing.

use std::process::Stdio;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStatus, Pod, PodSpec, PodStatus,
};
use kube::api::{Api, PostParams};
use kube_emulator::review::{AllowRule, AuthConfig, ReviewUser};
use kube_emulator::{Emulator, EmulatorOptions};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use vk_kubelet_api::auth::KubeReviewer;
use vk_kubelet_api::backend::{Backend, ExecResult, KubeletError, Pods, Session};
use vk_kubelet_api::query::LogQuery;
use vk_kubelet_api::summary::PodSample;
use vk_kubelet_api::{KubeletApi, tls};

const KUBECTL: &str = "/usr/bin/kubectl";
const TOKEN: &str = "t-apiserver";

fn pod() -> Pod {
    Pod {
        metadata: kube::api::ObjectMeta {
            name: Some("p".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                image: Some("busybox".into()),
                ..Default::default()
            }],
            node_name: Some("vk".into()),
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![ContainerStatus {
                name: "c".into(),
                ready: true,
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning::default()),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

struct OnePod;

#[async_trait]
impl Pods for OnePod {
    async fn get(&self, ns: &str, name: &str) -> Result<Option<Pod>, KubeletError> {
        Ok((ns == "default" && name == "p").then(pod))
    }
    async fn list(&self) -> Result<Vec<Pod>, KubeletError> {
        Ok(vec![pod()])
    }
}

fn read_stream(
    r: impl AsyncRead + Send + Unpin + 'static,
) -> vk_kubelet_api::backend::SessionOutput {
    Box::pin(futures::stream::unfold(r, |mut r| async move {
        let mut buf = vec![0u8; 16 * 1024];
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(Bytes::from(buf)), r))
            }
        }
    }))
}

fn write_sink(
    w: impl tokio::io::AsyncWrite + Send + Unpin + 'static,
) -> vk_kubelet_api::backend::SessionInput {
    Box::pin(futures::sink::unfold(w, |mut w, b: Bytes| async move {
        w.write_all(&b)
            .await
            .map_err(|e| KubeletError::internal(e.to_string()))?;
        w.flush()
            .await
            .map_err(|e| KubeletError::internal(e.to_string()))?;
        Ok(w)
    }))
}

/// Commands run here; ports are this host's.
struct Local;

#[async_trait]
impl Backend for Local {
    async fn logs(&self, _: &Pod, _: &str, _: &LogQuery) -> Result<String, KubeletError> {
        Ok(String::new())
    }
    async fn exec(&self, _: &Pod, _: &str, cmd: &[String]) -> Result<ExecResult, KubeletError> {
        let out = tokio::process::Command::new(&cmd[0])
            .args(&cmd[1..])
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|e| KubeletError::internal(e.to_string()))?;
        Ok(ExecResult {
            stdout: out.stdout,
            stderr: out.stderr,
            exit_code: out.status.code(),
        })
    }
    async fn exec_interactive(
        &self,
        _: &Pod,
        _: &str,
        cmd: &[String],
        tty: bool,
    ) -> Result<Session, KubeletError> {
        let mut child = tokio::process::Command::new(&cmd[0])
            .args(&cmd[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| KubeletError::internal(e.to_string()))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(KubeletError::internal("no pipes"));
        };
        // The output ends once the child has exited and its code is set.
        let code = vk_kubelet_api::backend::ExitCode::default();
        let set = code.clone();
        let reaped = futures::stream::once(async move {
            if let Ok(Some(c)) = child.wait().await.map(|s| s.code()) {
                let _ = set.set(c);
            }
        })
        .filter_map(|()| async { None });
        Ok(Session {
            output: Box::pin(read_stream(stdout).chain(reaped)),
            input: write_sink(stdin),
            tty,
            resize: None,
            exit_code: Some(code),
        })
    }
    async fn attach(&self, _: &Pod, _: &str) -> Result<Session, KubeletError> {
        Err(KubeletError::bad_request("no attach here"))
    }
    async fn stats(&self, _: &[Pod]) -> Result<Vec<PodSample>, KubeletError> {
        Ok(Vec::new())
    }
    async fn port_forward(&self, _: &Pod, port: u16) -> Result<Session, KubeletError> {
        let s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| KubeletError::internal(format!("dial tcp 127.0.0.1:{port}: {e}")))?;
        let (r, w) = s.into_split();
        Ok(Session {
            output: read_stream(r),
            input: write_sink(w),
            tty: false,
            resize: None,
            exit_code: None,
        })
    }
}

async fn kubectl(
    kubeconfig: &std::path::Path,
    args: &[&str],
    stdin: &[u8],
) -> std::process::Output {
    let mut child = tokio::process::Command::new(KUBECTL)
        .env("KUBECONFIG", kubeconfig)
        .env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false")
        .env("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl");
    let mut i = child.stdin.take().expect("stdin");
    i.write_all(stdin).await.expect("write stdin");
    drop(i);
    tokio::time::timeout(std::time::Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("kubectl to finish")
        .expect("kubectl's output")
}

#[tokio::test]
async fn real_kubectl_exec_and_port_forward_over_spdy() {
    if !std::path::Path::new(KUBECTL).exists() {
        eprintln!("SKIPPED: no {KUBECTL}");
        return;
    }
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let emu = Emulator::start(EmulatorOptions::default()).await.unwrap();
    emu.set_auth(AuthConfig {
        tokens: [(
            TOKEN.to_string(),
            ReviewUser {
                username: "kube-apiserver-kubelet-client".into(),
                ..Default::default()
            },
        )]
        .into_iter()
        .collect(),
        rules: vec![AllowRule {
            subject: "kube-apiserver-kubelet-client".into(),
            verbs: vec!["*".into()],
            resource: "nodes".into(),
            subresource: "*".into(),
            name: "vk".into(),
        }],
    });
    let client = emu.client().await.unwrap();
    let pods = Api::<Pod>::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod()).await.unwrap();
    // kubectl port-forward checks that the pod runs.
    pods.patch_status(
        "p",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({"status": pod().status})),
    )
    .await
    .unwrap();
    // The kubelet API.
    let api = Arc::new(KubeletApi::new(
        "vk".into(),
        Arc::new(OnePod),
        Arc::new(Local),
        Arc::new(KubeReviewer::new(client.clone())),
        prometheus_client::registry::Registry::default(),
    ));
    let serving = tls::self_signed("vk", &["127.0.0.1".into()]).unwrap();
    let serving_ca = serving.chain[0].clone();
    let cfg = tls::server_config(serving, None).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let kubelet = listener.local_addr().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(tls::serve(listener, cfg, api.router(), stop.clone()));
    // The API server's pass-through to the kubelet.
    let dir = tempfile_dir();
    let kubeconfig =
        kube_emulator::kubelet_proxy::start(client, kubelet, serving_ca.to_vec(), TOKEN, &dir)
            .await
            .unwrap();

    // Both streams and the exit code (the v4 error stream's Status).
    let started = std::time::Instant::now();
    let out = kubectl(
        &kubeconfig,
        &[
            "exec",
            "p",
            "-c",
            "c",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ],
        b"",
    )
    .await;
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    eprintln!("kubectl exec: {:?}", started.elapsed());
    assert_eq!(so, "out\n", "stderr: {se}");
    assert!(se.starts_with("err\n"), "{se}");
    assert_eq!(out.status.code(), Some(3), "stdout {so:?} stderr {se:?}");

    // stdin (`-i`): read, answered, then the end of stdin ends the command.
    let out = kubectl(
        &kubeconfig,
        &[
            "exec",
            "-i",
            "p",
            "-c",
            "c",
            "--",
            "sh",
            "-c",
            "while read l; do echo got:$l; done; echo bye; exit 4",
        ],
        b"one\ntwo\n",
    )
    .await;
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(so, "got:one\ngot:two\nbye\n", "stderr: {se}");
    // The backend's exit code of a session reaches the error stream's Status.
    assert_eq!(out.status.code(), Some(4), "{se}");

    // Port-forward to an HTTP server, fetched with curl.
    let web = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let web_port = web.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = web.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 15\r\n\r\nhello-from-pod\n")
                    .await;
            });
        }
    });
    let mut pf = tokio::process::Command::new(KUBECTL)
        .env("KUBECONFIG", &kubeconfig)
        .env("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false")
        .args(["port-forward", "p", &format!(":{web_port}")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(pf.stdout.take().unwrap());
    let mut line = String::new();
    tokio::time::timeout(std::time::Duration::from_secs(30), async {
        use tokio::io::AsyncBufReadExt;
        while !line.contains("Forwarding from 127.0.0.1:") {
            line.clear();
            if lines.read_line(&mut line).await.unwrap() == 0 {
                break;
            }
        }
    })
    .await
    .expect("kubectl port-forward to listen");
    let local: u16 = line
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| {
            let mut err = String::new();
            if let Some(mut e) = pf.stderr.take() {
                let _ = futures::executor::block_on(e.read_to_string(&mut err));
            }
            panic!("no port in {line:?}; kubectl said {err}")
        });
    for _ in 0..2 {
        let out = tokio::process::Command::new("curl")
            .args([
                "-sS",
                "--max-time",
                "20",
                &format!("http://127.0.0.1:{local}/"),
            ])
            .output()
            .await
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "hello-from-pod\n",
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    eprintln!(
        "kubectl exec and port-forward over SPDY: {:?}",
        started.elapsed()
    );
    let _ = pf.kill().await;
    stop.cancel();
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("kubectl-spdy-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
