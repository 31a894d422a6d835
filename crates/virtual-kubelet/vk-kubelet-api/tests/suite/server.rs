//! The server over real TLS with the emulator's TokenReview and
//! SubjectAccessReview and a fake backend: 401 without credentials, 403
//! without `nodes/proxy`, logs, the kubelet's 404s and the stats summary.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStatus, Pod, PodSpec, PodStatus,
};
use kube_emulator::review::{AllowRule, AuthConfig, ReviewUser};
use kube_emulator::{Emulator, EmulatorOptions};
use vk_kubelet_api::auth::KubeReviewer;
use vk_kubelet_api::backend::{Backend, ExecResult, KubeletError, Pods, Session};
use vk_kubelet_api::query::LogQuery;
use vk_kubelet_api::summary::{ContainerSample, PodSample};
use vk_kubelet_api::{KubeletApi, tls};

struct OnePod;

fn pod() -> Pod {
    Pod {
        metadata: kube::api::ObjectMeta {
            name: Some("myapp-pod".into()),
            namespace: Some("default".into()),
            uid: Some("u1".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "myapp-container".into(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: Some(PodStatus {
            container_statuses: Some(vec![ContainerStatus {
                name: "myapp-container".into(),
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

#[async_trait]
impl Pods for OnePod {
    async fn get(&self, ns: &str, name: &str) -> Result<Option<Pod>, KubeletError> {
        Ok((ns == "default" && name == "myapp-pod").then(pod))
    }
    async fn list(&self) -> Result<Vec<Pod>, KubeletError> {
        Ok(vec![pod()])
    }
}

struct Fake;

#[async_trait]
impl Backend for Fake {
    async fn logs(&self, _: &Pod, _: &str, q: &LogQuery) -> Result<String, KubeletError> {
        let all = "Hello Kubernetes!\nsecond\n";
        Ok(vk_kubelet_api::query::trim_logs(all, q.tail_lines, None))
    }
    async fn exec(&self, _: &Pod, _: &str, cmd: &[String]) -> Result<ExecResult, KubeletError> {
        Ok(ExecResult {
            stdout: format!("ran {}\n", cmd.join(" ")).into_bytes(),
            stderr: Vec::new(),
            exit_code: Some(if cmd.last().map(String::as_str) == Some("fail") {
                3
            } else {
                0
            }),
        })
    }
    async fn exec_interactive(
        &self,
        _: &Pod,
        _: &str,
        _: &[String],
        _: bool,
    ) -> Result<Session, KubeletError> {
        Err(KubeletError::bad_request("no"))
    }
    async fn attach(&self, _: &Pod, _: &str) -> Result<Session, KubeletError> {
        Err(KubeletError::bad_request("no"))
    }
    /// Port 7 echoes what it gets, upper-cased, and closes after a `.`; others refuse.
    async fn port_forward(&self, _: &Pod, port: u16) -> Result<Session, KubeletError> {
        use futures::{SinkExt, StreamExt};
        if port != 7 {
            return Err(KubeletError::internal("connection refused"));
        }
        let (tx, rx) = futures::channel::mpsc::channel::<bytes::Bytes>(4);
        let output = rx
            .take_while(|b| futures::future::ready(b.as_ref() != b"."))
            .map(|b| Ok(bytes::Bytes::from(b.to_ascii_uppercase())));
        Ok(Session {
            output: Box::pin(output),
            input: Box::pin(tx.sink_map_err(|e| KubeletError::internal(e.to_string()))),
            tty: false,
            resize: None,
            exit_code: None,
        })
    }
    async fn stats(&self, pods: &[Pod]) -> Result<Vec<PodSample>, KubeletError> {
        Ok(pods
            .iter()
            .map(|p| PodSample {
                namespace: "default".into(),
                name: p.metadata.name.clone().unwrap_or_default(),
                uid: "u1".into(),
                start_time: None,
                containers: vec![ContainerSample {
                    name: "myapp-container".into(),
                    at: jiff::Timestamp::now(),
                    cpu_seconds: Some(1.0),
                    memory_working_set_bytes: Some(4096),
                    ..Default::default()
                }],
            })
            .collect())
    }
}

#[tokio::test]
async fn auth_logs_errors_and_stats_over_tls() {
    let emu = Emulator::start(EmulatorOptions::default()).await.unwrap();
    emu.set_auth(AuthConfig {
        tokens: [
            (
                "t-admin".to_string(),
                ReviewUser {
                    username: "admin".into(),
                    ..Default::default()
                },
            ),
            (
                "t-viewer".to_string(),
                ReviewUser {
                    username: "viewer".into(),
                    ..Default::default()
                },
            ),
        ]
        .into_iter()
        .collect(),
        rules: vec![
            AllowRule {
                subject: "admin".into(),
                verbs: vec!["*".into()],
                resource: "nodes".into(),
                subresource: "*".into(),
                name: "vk".into(),
            },
            AllowRule {
                subject: "viewer".into(),
                verbs: vec!["get".into()],
                resource: "nodes".into(),
                subresource: "stats".into(),
                name: String::new(),
            },
        ],
    });
    let client = emu.client().await.unwrap();
    let api = Arc::new(KubeletApi::new(
        "vk".into(),
        Arc::new(OnePod),
        Arc::new(Fake),
        Arc::new(KubeReviewer::new(client)),
        prometheus_client::registry::Registry::default(),
    ));
    let cfg =
        tls::server_config(tls::self_signed("vk", &["127.0.0.1".into()]).unwrap(), None).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("https://{}", listener.local_addr().unwrap());
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(tls::serve(listener, cfg, api.router(), stop.clone()));
    let http = reqwest::Client::builder()
        .tls_danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    let get = |path: &str, token: Option<&str>| {
        let mut r = http.get(format!("{base}{path}"));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send()
    };
    let logs = "/containerLogs/default/myapp-pod/myapp-container";
    assert_eq!(get(logs, None).await.unwrap().status(), 401);
    assert_eq!(get(logs, Some("wrong")).await.unwrap().status(), 401);
    let r = get(logs, Some("t-viewer")).await.unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(
        r.text().await.unwrap(),
        "Forbidden (user=viewer, verb=get, resource=nodes, subresource=proxy)\n"
    );
    let r = get(logs, Some("t-admin")).await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("Hello Kubernetes!"));
    let r = get(&format!("{logs}?tailLines=1"), Some("t-admin"))
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "second\n");
    let r = get(&format!("{logs}?tailLines=-1"), Some("t-admin"))
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("tailLines"));
    let r = get("/containerLogs/default/other/c", Some("t-admin"))
        .await
        .unwrap();
    assert_eq!(
        (r.status().as_u16(), r.text().await.unwrap()),
        (404, "pod \"other\" does not exist\n".to_string())
    );
    let r = get("/containerLogs/default/myapp-pod/nope", Some("t-admin"))
        .await
        .unwrap();
    assert_eq!(
        (r.status().as_u16(), r.text().await.unwrap()),
        (
            404,
            "container \"nope\" not found in pod \"myapp-pod\"\n".to_string()
        )
    );
    let r = http
        .post(format!("{base}/portForward/default/myapp-pod"))
        .bearer_auth("t-admin")
        .send()
        .await
        .unwrap();
    // Port-forward needs an upgrade (WebSocket or SPDY/3.1).
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("WebSocket"));
    // The viewer may read stats (nodes/stats) but not exec.
    let r = get("/stats/summary", Some("t-viewer")).await.unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        v["pods"][0]["containers"][0]["memory"]["workingSetBytes"],
        4096
    );
    let r = get("/metrics/resource", Some("t-admin")).await.unwrap();
    assert!(r.text().await.unwrap().contains("container_memory_working_set_bytes{container=\"myapp-container\",namespace=\"default\",pod=\"myapp-pod\"} 4096"));
    let r = get("/metrics", Some("t-admin")).await.unwrap();
    assert!(
        r.text()
            .await
            .unwrap()
            .contains("vk_kubelet_api_requests_total")
    );
    exec_with_kube_rs(&base).await;
    port_forward_with_kube_rs(&base).await;
    stop.cancel();
    emu.shutdown().await;
}

/// kube-rs's `kubelet_node_portforward` (its `Portforwarder`: port prefixes,
/// data and error channels) against the kubelet port.
async fn port_forward_with_kube_rs(base: &str) {
    use kube::core::kubelet_debug::KubeletDebugParams;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut cfg = kube::Config::new(base.parse().unwrap());
    cfg.accept_invalid_certs = true;
    cfg.headers.push((
        http::header::AUTHORIZATION,
        "Bearer t-admin".parse().unwrap(),
    ));
    let client = kube::Client::try_from(cfg).unwrap();
    let at = KubeletDebugParams {
        name: "myapp-pod",
        namespace: "default",
        pod_uid: None,
    };
    let mut pf = client.kubelet_node_portforward(&at, &[7, 9]).await.unwrap();
    let mut s = pf.take_stream(7).unwrap();
    s.write_all(b"hello").await.unwrap();
    let mut buf = [0u8; 5];
    s.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"HELLO");
    let err = pf.take_error(9).unwrap().await.unwrap();
    assert_eq!(
        err,
        "error forwarding port 9 to pod myapp-pod_default, uid u1: connection refused"
    );
    // The pod's side closing ends the connection, and with it the WebSocket.
    s.write_all(b".").await.unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "{rest:?}");
    // kube-rs's forwarder ends once its local streams are gone. It answers the node's Close
    // with its own Close after the socket is closed (`SendAfterClosing`), as it does against
    // a kubelet, which also closes first once every forward has ended: not an error here.
    drop(s);
    let _ = pf.join().await;
}

/// kube-rs's kubelet client (`Client::kubelet_node_exec`, its
/// `AttachedProcess` and WebSocket code) against the kubelet port, with the
/// kubelet's own query names (`output=1`, ...) as the API server sends them.
async fn exec_with_kube_rs(base: &str) {
    use kube::api::AttachParams;
    use kube::core::kubelet_debug::KubeletDebugParams;
    use tokio::io::AsyncReadExt;
    let mut cfg = kube::Config::new(base.parse().unwrap());
    cfg.accept_invalid_certs = true;
    cfg.headers.push((
        http::header::AUTHORIZATION,
        "Bearer t-admin".parse().unwrap(),
    ));
    let client = kube::Client::try_from(cfg).unwrap();
    let at = KubeletDebugParams {
        name: "myapp-pod",
        namespace: "default",
        pod_uid: None,
    };
    let ap = AttachParams::default().stderr(false);
    let mut ok = client
        .kubelet_node_exec(&at, "myapp-container", ["echo", "hi"], &ap)
        .await
        .unwrap();
    let mut out = String::new();
    ok.stdout().unwrap().read_to_string(&mut out).await.unwrap();
    let status = ok.take_status().unwrap().await.unwrap();
    assert_eq!(out, "ran echo hi\n");
    assert_eq!(status.status.as_deref(), Some("Success"));
    let mut bad = client
        .kubelet_node_exec(&at, "myapp-container", ["sh", "fail"], &ap)
        .await
        .unwrap();
    let status = bad.take_status().unwrap().await.unwrap();
    assert_eq!(status.status.as_deref(), Some("Failure"));
    assert_eq!(status.reason.as_deref(), Some("NonZeroExitCode"));
    let code = status
        .details
        .and_then(|d| d.causes)
        .and_then(|c| c.into_iter().next())
        .and_then(|c| c.message);
    assert_eq!(code.as_deref(), Some("3"));
}
