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
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
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
        // The child is reaped when it exits (its output ends first).
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        Ok(Session {
            output: read_stream(stdout),
            input: write_sink(stdin),
            tty,
            resize: None,
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
        })
    }
}

/// The proxy's state: the emulator's client and where the kubelet is.
#[derive(Clone)]
struct Proxy {
    kube: kube::Client,
    kubelet: std::net::SocketAddr,
    tls: tokio_rustls::TlsConnector,
}

/// The kubelet path of an API server streaming path, if it is one.
fn kubelet_path(path: &str, query: &str) -> Option<String> {
    let rest = path.strip_prefix("/api/v1/namespaces/")?;
    let parts: Vec<&str> = rest.split('/').collect();
    let [ns, "pods", pod, sub] = parts[..] else {
        return None;
    };
    match sub {
        "exec" | "attach" => {
            let container = url::form_urlencoded::parse(query.as_bytes())
                .find(|(k, _)| k == "container")
                .map(|(_, v)| v.into_owned())?;
            Some(format!("/{sub}/{ns}/{pod}/{container}?{query}"))
        }
        "portforward" => Some(format!("/portForward/{ns}/{pod}?{query}")),
        _ => None,
    }
}

async fn proxy(State(p): State<Proxy>, req: Request) -> Response {
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    match kubelet_path(&path, &query) {
        Some(target) => upgrade(p, req, target).await.unwrap_or_else(|e| {
            (axum::http::StatusCode::BAD_GATEWAY, e.to_string()).into_response()
        }),
        None => forward(p, req).await.unwrap_or_else(|e| {
            (axum::http::StatusCode::BAD_GATEWAY, e.to_string()).into_response()
        }),
    }
}

async fn forward(p: Proxy, req: Request) -> anyhow::Result<Response> {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, 16 << 20).await?;
    let mut out = http::Request::builder().method(parts.method).uri(
        parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/"),
    );
    for (k, v) in &parts.headers {
        if k != http::header::HOST && k != http::header::ACCEPT_ENCODING {
            out = out.header(k, v);
        }
    }
    let resp = p
        .kube
        .send(out.body(kube::client::Body::from(body.to_vec()))?)
        .await?;
    let (parts, body) = resp.into_parts();
    Ok(Response::from_parts(parts, Body::new(body)))
}

/// The API server's pass-through of an upgrade: the request to the kubelet,
/// its answer back, then bytes both ways.
async fn upgrade(p: Proxy, mut req: Request, target: String) -> anyhow::Result<Response> {
    let tcp = tokio::net::TcpStream::connect(p.kubelet).await?;
    let mut tls = p
        .tls
        .connect(rustls::pki_types::ServerName::try_from("127.0.0.1")?, tcp)
        .await?;
    let mut head = format!(
        "{} {target} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 0\r\n",
        req.method(),
        p.kubelet
    );
    for (k, v) in req.headers() {
        let k = k.as_str();
        if matches!(k, "connection" | "upgrade" | "x-stream-protocol-version") {
            head.push_str(&format!("{k}: {}\r\n", v.to_str()?));
        }
    }
    head.push_str("\r\n");
    tls.write_all(head.as_bytes()).await?;
    let mut buf = Vec::new();
    let end = loop {
        let mut chunk = [0u8; 4096];
        let n = tls.read(&mut chunk).await?;
        anyhow::ensure!(n > 0, "the kubelet closed before answering");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let text = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = text.split("\r\n");
    let code: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(502);
    let mut resp = Response::builder().status(code);
    for l in lines.filter(|l| !l.is_empty()) {
        if let Some((k, v)) = l.split_once(':') {
            resp = resp.header(k.trim(), v.trim());
        }
    }
    let rest = buf[end..].to_vec();
    if code != 101 {
        // The refusal's body (the kubelet closes after it or gives its length).
        let mut body = rest;
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(2),
            tls.read_to_end(&mut body),
        )
        .await;
        return Ok(resp.body(Body::from(body))?);
    }
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(up) = on_upgrade.await else { return };
        let mut client = hyper_util::rt::TokioIo::new(up);
        if !rest.is_empty() && client.write_all(&rest).await.is_err() {
            return;
        }
        let _ = tokio::io::copy_bidirectional(&mut client, &mut tls).await;
    });
    Ok(resp.body(Body::empty())?)
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
    let mut roots = rustls::RootCertStore::empty();
    roots.add(serving.chain[0].clone()).unwrap();
    let cfg = tls::server_config(serving, None).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let kubelet = listener.local_addr().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(tls::serve(listener, cfg, api.router(), stop.clone()));
    // The API server.
    let client_cfg = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let state = Proxy {
        kube: client,
        kubelet,
        tls: tokio_rustls::TlsConnector::from(Arc::new(client_cfg)),
    };
    let app = axum::Router::new().fallback(proxy).with_state(state);
    let plistener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let paddr = plistener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(plistener, app).await });
    let dir = tempfile_dir();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: p\n  cluster:\n    server: http://{paddr}\ncontexts:\n- name: p\n  context:\n    cluster: p\n    user: u\n    namespace: default\nusers:\n- name: u\n  user: {{}}\ncurrent-context: p\n"
        ),
    )
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
            "while read l; do echo got:$l; done; echo bye",
        ],
        b"one\ntwo\n",
    )
    .await;
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(so, "got:one\ngot:two\nbye\n", "stderr: {se}");
    assert_eq!(out.status.code(), Some(0), "{se}");

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
