//! The kubelet's HTTPS paths on axum: authentication and authorisation in
//! front of everything, then logs, exec/attach over WebSocket
//! (`v5.channel.k8s.io`, `v4.channel.k8s.io`, terminal resizes) or SPDY/3.1
//! ([`spdy_stream`]), port-forward over WebSocket ([`port_forward`]) or SPDY,
//! health, stats and metrics.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use serde_json::json;
use tracing::{debug, warn};

use crate::attrs;
use crate::auth::{Reviewer, forbidden_message};
use crate::backend::{Backend, ExecResult, KubeletError, Pods, Session};
use crate::channel::terminal_size;
use crate::query::{LogQuery, StreamQuery, trim_logs};
use crate::summary::{self, CpuRates};
use crate::tls::PeerIdentity;

/// The streaming protocols this node speaks, preferred first.
pub const PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

/// Labels of the request counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    path: String,
    code: String,
}

/// Everything the server needs.
pub struct KubeletApi {
    /// This node's name (the SubjectAccessReview's `name`).
    pub node_name: String,
    /// The pods bound to this node.
    pub pods: Arc<dyn Pods>,
    /// The backend.
    pub backend: Arc<dyn Backend>,
    /// TokenReview and SubjectAccessReview.
    pub reviewer: Arc<dyn Reviewer>,
    /// The process's metrics (served on `/metrics`).
    pub registry: Arc<Registry>,
    /// How often `follow` asks the backend for new lines.
    pub follow_interval: Duration,
    node_start: jiff::Timestamp,
    rates: Mutex<CpuRates>,
    requests: Family<RequestLabels, Counter>,
}

impl KubeletApi {
    /// A server; registers `vk_kubelet_api_requests_total` in `registry`.
    pub fn new(
        node_name: String,
        pods: Arc<dyn Pods>,
        backend: Arc<dyn Backend>,
        reviewer: Arc<dyn Reviewer>,
        mut registry: Registry,
    ) -> Self {
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "vk_kubelet_api_requests",
            "Requests to the kubelet API by path kind and HTTP status",
            requests.clone(),
        );
        Self {
            node_name,
            pods,
            backend,
            reviewer,
            registry: Arc::new(registry),
            follow_interval: Duration::from_secs(1),
            node_start: jiff::Timestamp::now(),
            rates: Mutex::new(CpuRates::default()),
            requests,
        }
    }

    /// The router (serve it with [`crate::tls::serve`]).
    pub fn router(self: Arc<Self>) -> Router {
        Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .route("/containerLogs/{ns}/{pod}/{container}", get(container_logs))
            .route("/exec/{ns}/{pod}/{container}", any(exec))
            .route("/exec/{ns}/{pod}/{uid}/{container}", any(exec_uid))
            .route("/attach/{ns}/{pod}/{container}", any(attach))
            .route("/attach/{ns}/{pod}/{uid}/{container}", any(attach_uid))
            .route("/portForward/{ns}/{pod}", any(port_forward::port_forward))
            .route(
                "/portForward/{ns}/{pod}/{uid}",
                any(port_forward::port_forward_uid),
            )
            .route("/run/{ns}/{pod}/{container}", any(run_refused))
            .route("/run/{ns}/{pod}/{uid}/{container}", any(run_refused))
            .route("/stats/summary", get(stats_summary))
            .route("/metrics/resource", get(metrics_resource))
            .route("/metrics", get(metrics))
            .route("/pods", get(pods_list))
            .fallback(|| async { error(KubeletError::not_found("404 page not found")) })
            .layer(middleware::from_fn_with_state(self.clone(), authenticate))
            .with_state(self)
    }
}

/// A plain-text error as the kubelet writes them.
fn error(e: KubeletError) -> Response {
    let code = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        code,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{}\n", e.message),
    )
        .into_response()
}

fn path_kind(path: &str) -> String {
    let first = path.trim_start_matches('/').split('/').next().unwrap_or("");
    match first {
        "containerLogs" | "exec" | "attach" | "portForward" | "run" | "healthz" | "pods" => {
            first.into()
        }
        "stats" | "metrics" => path.to_string(),
        _ => "other".into(),
    }
}

async fn authenticate(State(api): State<Arc<KubeletApi>>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    let kind = path_kind(&path);
    let rsp = check(&api, req, next).await;
    api.requests
        .get_or_create(&RequestLabels {
            path: kind,
            code: rsp.status().as_u16().to_string(),
        })
        .inc();
    rsp
}

async fn check(api: &KubeletApi, req: Request, next: Next) -> Response {
    let attrs = attrs::attributes(req.method().as_str(), req.uri().path());
    let from_cert = req
        .extensions()
        .get::<PeerIdentity>()
        .and_then(|p| p.0.clone());
    let user = match from_cert {
        Some(u) => u,
        None => {
            let token = bearer(req.headers());
            let Some(token) = token else {
                return (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response();
            };
            match api.reviewer.review_token(&token).await {
                Ok(Some(u)) => u,
                Ok(None) => return (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response(),
                Err(e) => {
                    warn!(error = %e, "token review failed");
                    return (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response();
                }
            }
        }
    };
    match api.reviewer.authorize(&user, &api.node_name, &attrs).await {
        Ok(true) => next.run(req).await,
        Ok(false) => {
            debug!(user = %user.name, verb = %attrs.verb, subresource = attrs.subresource, "kubelet API request forbidden");
            (
                StatusCode::FORBIDDEN,
                format!("{}\n", forbidden_message(&user, &attrs)),
            )
                .into_response()
        }
        Err(e) => {
            warn!(error = %e, "subject access review failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!(
                    "Authorization error (user={}, verb={}, resource=nodes, subresource={})\n",
                    user.name, attrs.verb, attrs.subresource
                ),
            )
                .into_response()
        }
    }
}

fn bearer(h: &HeaderMap) -> Option<String> {
    let v = h.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty())
        .then(|| token.trim().to_string())
}

/// Where a pod's container stands, from the pod object alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ContainerState {
    /// Not a container of the pod.
    NotInSpec,
    /// Not started yet (reason, e.g. `ContainerCreating`).
    Waiting(String),
    /// Running.
    Running,
    /// Exited.
    Terminated,
}

/// The state of `name` in `pod` (containers, init containers).
pub fn container_state(pod: &Pod, name: &str) -> ContainerState {
    let spec = pod.spec.as_ref();
    let in_spec = spec.is_some_and(|s| {
        s.containers.iter().any(|c| c.name == name)
            || s.init_containers.iter().flatten().any(|c| c.name == name)
    });
    if !in_spec {
        return ContainerState::NotInSpec;
    }
    let st = pod.status.as_ref().and_then(|s| {
        s.container_statuses
            .iter()
            .flatten()
            .chain(s.init_container_statuses.iter().flatten())
            .find(|c| c.name == name)
    });
    let Some(state) = st.and_then(|c| c.state.as_ref()) else {
        return ContainerState::Waiting("ContainerCreating".into());
    };
    if state.running.is_some() {
        ContainerState::Running
    } else if state.terminated.is_some() {
        ContainerState::Terminated
    } else {
        ContainerState::Waiting(
            state
                .waiting
                .as_ref()
                .and_then(|w| w.reason.clone())
                .unwrap_or_else(|| "ContainerCreating".into()),
        )
    }
}

async fn pod_of(api: &KubeletApi, ns: &str, name: &str) -> Result<Pod, KubeletError> {
    api.pods
        .get(ns, name)
        .await?
        .ok_or_else(|| KubeletError::not_found(format!("pod {name:?} does not exist")))
}

async fn container_logs(
    State(api): State<Arc<KubeletApi>>,
    Path((ns, pod, container)): Path<(String, String, String)>,
    req: Request,
) -> Response {
    match logs_response(api, ns, pod, container, req.uri().query().unwrap_or("")).await {
        Ok(r) => r,
        Err(e) => error(e),
    }
}

async fn logs_response(
    api: Arc<KubeletApi>,
    ns: String,
    name: String,
    container: String,
    query: &str,
) -> Result<Response, KubeletError> {
    let q = LogQuery::parse(query).map_err(|e| KubeletError::bad_request(e.to_string()))?;
    let pod = pod_of(&api, &ns, &name).await?;
    let state = container_state(&pod, &container);
    // A previous run is asked for while the container waits to start again
    // (CrashLoopBackOff) too, as on a kubelet.
    if q.previous && state != ContainerState::NotInSpec {
        return match api.backend.previous_logs(&pod, &container, &q).await? {
            Some(text) => {
                let text = trim_logs(&text, None, q.limit_bytes);
                Ok(([(header::CONTENT_TYPE, "text/plain")], text).into_response())
            }
            None => Err(KubeletError::bad_request(format!(
                "previous terminated container {container:?} in pod {name:?} not found"
            ))),
        };
    }
    match state {
        ContainerState::NotInSpec => {
            return Err(KubeletError::not_found(format!(
                "container {container:?} not found in pod {name:?}"
            )));
        }
        ContainerState::Waiting(reason) => {
            return Err(KubeletError::bad_request(format!(
                "container {container:?} in pod {name:?} is waiting to start: {reason}"
            )));
        }
        _ => {}
    }
    if !q.follow {
        let text = api.backend.logs(&pod, &container, &q).await?;
        let text = trim_logs(&text, None, q.limit_bytes);
        return Ok(([(header::CONTENT_TYPE, "text/plain")], text).into_response());
    }
    // Follow: always ask with timestamps so that lines already sent can be
    // told apart from new ones when the backend's `since` is in seconds.
    let mut first = q.clone();
    first.timestamps = true;
    let text = api.backend.logs(&pod, &container, &first).await?;
    let (tx, rx) = futures::channel::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    tokio::spawn(follow(api.clone(), pod, container, q, text, tx));
    Ok(Response::builder()
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from_stream(rx))
        .unwrap_or_else(|_| error(KubeletError::internal("cannot build the response"))))
}

/// Lines after `cursor` (the last timestamp sent and how many lines carried
/// it): Docker's RFC 3339 stamps trim trailing zeros, so they are compared
/// as times, not strings. Lines without a stamp are always new.
pub fn new_lines<'a>(text: &'a str, cursor: &mut Option<(jiff::Timestamp, usize)>) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut seen_at_cursor = 0usize;
    for line in text.split_inclusive('\n') {
        let Some(ts) = line
            .split_once(' ')
            .and_then(|(t, _)| t.parse::<jiff::Timestamp>().ok())
        else {
            out.push(line);
            continue;
        };
        match cursor {
            Some((last, _)) if ts < *last => continue,
            Some((last, n)) if ts == *last => {
                seen_at_cursor += 1;
                if seen_at_cursor <= *n {
                    continue;
                }
                *n += 1;
                out.push(line);
            }
            _ => {
                *cursor = Some((ts, 1));
                seen_at_cursor = 1;
                out.push(line);
            }
        }
    }
    out
}

async fn follow(
    api: Arc<KubeletApi>,
    pod: Pod,
    container: String,
    q: LogQuery,
    first: String,
    mut tx: futures::channel::mpsc::Sender<Result<Bytes, std::io::Error>>,
) {
    let mut cursor: Option<(jiff::Timestamp, usize)> = None;
    let mut budget = q
        .limit_bytes
        .map(|l| usize::try_from(l).unwrap_or(usize::MAX));
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let mut text = first;
    let mut last_pass = false;
    loop {
        for line in new_lines(&text, &mut cursor) {
            let out = if q.timestamps {
                line
            } else {
                line.split_once(' ').map(|(_, rest)| rest).unwrap_or(line)
            };
            let mut bytes = out.as_bytes().to_vec();
            if let Some(b) = budget.as_mut() {
                if bytes.len() >= *b {
                    bytes.truncate(*b);
                    let _ = tx.send(Ok(Bytes::from(bytes))).await;
                    return;
                }
                *b -= bytes.len();
            }
            if tx.send(Ok(Bytes::from(bytes))).await.is_err() {
                return;
            }
        }
        if last_pass {
            return;
        }
        tokio::time::sleep(api.follow_interval).await;
        if tx.is_closed() {
            return;
        }
        // The container stopping (or the pod going) ends the stream after
        // one last read, as the kubelet ends `-f` when the container exits.
        match api.pods.get(&ns, &name).await {
            Ok(Some(p)) if container_state(&p, &container) == ContainerState::Running => {}
            Ok(_) => last_pass = true,
            Err(_) => {}
        }
        let mut next = q.clone();
        next.timestamps = true;
        next.tail_lines = None;
        next.since_seconds = None;
        next.since_time = cursor.as_ref().map(|(t, _)| *t);
        text = match api.backend.logs(&pod, &container, &next).await {
            Ok(t) => t,
            Err(e) => {
                debug!(error = %e, "follow: reading logs failed; retrying");
                String::new()
            }
        };
    }
}

fn offered_protocol(headers: &HeaderMap) -> Option<&'static str> {
    let offered: Vec<String> = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|s| s.trim().to_string()))
        .collect();
    PROTOCOLS
        .into_iter()
        .find(|p| offered.iter().any(|o| o == p))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Exec,
    Attach,
}

async fn exec(
    State(api): State<Arc<KubeletApi>>,
    Path((ns, pod, container)): Path<(String, String, String)>,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
    req: Request,
) -> Response {
    stream(api, ns, pod, container, ws, req, Kind::Exec).await
}

async fn exec_uid(
    State(api): State<Arc<KubeletApi>>,
    Path((ns, pod, _uid, container)): Path<(String, String, String, String)>,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
    req: Request,
) -> Response {
    stream(api, ns, pod, container, ws, req, Kind::Exec).await
}

async fn attach(
    State(api): State<Arc<KubeletApi>>,
    Path((ns, pod, container)): Path<(String, String, String)>,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
    req: Request,
) -> Response {
    stream(api, ns, pod, container, ws, req, Kind::Attach).await
}

async fn attach_uid(
    State(api): State<Arc<KubeletApi>>,
    Path((ns, pod, _uid, container)): Path<(String, String, String, String)>,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
    req: Request,
) -> Response {
    stream(api, ns, pod, container, ws, req, Kind::Attach).await
}

#[allow(clippy::too_many_arguments)]
async fn stream(
    api: Arc<KubeletApi>,
    ns: String,
    name: String,
    container: String,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
    mut req: Request,
    kind: Kind,
) -> Response {
    let q = match StreamQuery::parse(req.uri().query().unwrap_or(""), kind == Kind::Exec) {
        Ok(q) => q,
        Err(e) => return error(KubeletError::bad_request(e.to_string())),
    };
    let pod = match pod_of(&api, &ns, &name).await {
        Ok(p) => p,
        Err(e) => return error(e),
    };
    match container_state(&pod, &container) {
        ContainerState::NotInSpec => {
            return error(KubeletError::not_found(format!(
                "container {container:?} not found in pod {name:?}"
            )));
        }
        ContainerState::Running => {}
        // The kubelet finds only running containers for exec/attach.
        _ => {
            return error(KubeletError::not_found(format!(
                "container not found ({container:?})"
            )));
        }
    }
    // SPDY/3.1 (what API servers send kubelets) or WebSocket.
    let spdy = if spdy_stream::is_spdy_upgrade(req.headers()) {
        match spdy_stream::negotiate(req.headers(), &spdy_stream::EXEC_PROTOCOLS) {
            Ok(p) => Some(p),
            Err(m) => return spdy_stream::refuse(m),
        }
    } else {
        None
    };
    let ws = match (spdy, ws) {
        (Some(_), _) => None,
        (None, Ok(ws)) => Some(ws),
        (None, Err(_)) => {
            return error(KubeletError::bad_request(
                "exec and attach need a WebSocket (v5.channel.k8s.io or v4.channel.k8s.io) or SPDY/3.1 (v4.channel.k8s.io) upgrade",
            ));
        }
    };
    let Some(protocol) = spdy.or_else(|| offered_protocol(req.headers())) else {
        return error(KubeletError::bad_request(
            "no supported streaming protocol offered; this node speaks v5.channel.k8s.io and v4.channel.k8s.io",
        ));
    };
    // Start the backend side before upgrading, so refusals are HTTP errors
    // the client shows as such.
    let started = if kind == Kind::Attach {
        api.backend
            .attach(&pod, &container)
            .await
            .map(Started::Session)
    } else if q.stdin {
        api.backend
            .exec_interactive(&pod, &container, &q.command, q.tty)
            .await
            .map(Started::Session)
    } else {
        Ok(Started::Run)
    };
    let started = match started {
        Ok(s) => s,
        Err(e) => return error(e),
    };
    let Some(ws) = ws else {
        let Some(on_upgrade) = req.extensions_mut().remove::<hyper::upgrade::OnUpgrade>() else {
            return error(KubeletError::bad_request(
                "the connection cannot be upgraded",
            ));
        };
        return spdy_stream::exec(api, pod, container, q, started, protocol, on_upgrade);
    };
    let v5 = protocol == PROTOCOLS[0];
    ws.protocols([protocol])
        .on_upgrade(move |socket| async move {
            let r = match started {
                Started::Run => run_to_completion(api, pod, container, q, socket).await,
                Started::Session(s) => pump(s, q, v5, socket).await,
            };
            if let Err(e) = r {
                debug!(error = %e, "stream ended with an error");
            }
        })
}

enum Started {
    Run,
    Session(Session),
}

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = crate::channel::RESIZE_CHANNEL;
const CLOSE: u8 = 255;

/// The end of a stream, with the status the kubelet's WebSocket sends
/// (1000, normal): kubectl's v5 client takes a close without a status (1005)
/// as an error of its error stream and exits 1 whatever the command's code.
pub(crate) fn normal_close() -> Message {
    Message::Close(Some(axum::extract::ws::CloseFrame {
        code: axum::extract::ws::close_code::NORMAL,
        reason: "".into(),
    }))
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut v = Vec::with_capacity(data.len() + 1);
    v.push(channel);
    v.extend_from_slice(data);
    Message::Binary(v.into())
}

/// The error channel's `metav1.Status` for an exit code, as the kubelet's
/// `ServeExec` writes it.
pub fn exit_status(code: Option<i32>, command: &[String]) -> serde_json::Value {
    match code {
        Some(0) | None => json!({"metadata": {}, "status": "Success"}),
        Some(c) => json!({
            "metadata": {},
            "status": "Failure",
            "message": format!("command terminated with non-zero exit code: error executing command {command:?}, exit code {c}"),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": c.to_string()}]},
        }),
    }
}

fn internal_status(message: &str) -> serde_json::Value {
    json!({"metadata": {}, "status": "Failure", "message": message, "reason": "InternalError", "code": 500})
}

async fn run_to_completion(
    api: Arc<KubeletApi>,
    pod: Pod,
    container: String,
    q: StreamQuery,
    mut socket: WebSocket,
) -> Result<(), axum::Error> {
    let status = match api.backend.exec(&pod, &container, &q.command).await {
        Ok(ExecResult {
            stdout,
            stderr,
            exit_code,
        }) => {
            if q.stdout && !stdout.is_empty() {
                socket.send(frame(STDOUT, &stdout)).await?;
            }
            if !stderr.is_empty() {
                let ch = if q.stderr { STDERR } else { STDOUT };
                if q.stderr || q.stdout {
                    socket.send(frame(ch, &stderr)).await?;
                }
            }
            exit_status(exit_code, &q.command)
        }
        Err(e) => internal_status(&format!(
            "error executing command in container: {}",
            e.message
        )),
    };
    socket
        .send(frame(ERROR, status.to_string().as_bytes()))
        .await?;
    socket.send(normal_close()).await?;
    Ok(())
}

async fn pump(
    session: Session,
    q: StreamQuery,
    v5: bool,
    socket: WebSocket,
) -> Result<(), axum::Error> {
    let Session {
        mut output,
        mut input,
        resize,
        exit_code,
        ..
    } = session;
    let (mut ws_tx, mut ws_rx) = socket.split();
    let out_channel = STDOUT;
    let reader = async {
        while let Some(m) = ws_rx.next().await {
            let Message::Binary(b) = m? else { continue };
            match b.first() {
                Some(&STDIN)
                    if q.stdin && input.send(Bytes::copy_from_slice(&b[1..])).await.is_err() =>
                {
                    break;
                }
                // End of stdin (v5's close signal): the backend makes the
                // process see it; the session goes on until its output ends.
                Some(&CLOSE) if v5 && b.get(1) == Some(&STDIN) => {
                    let _ = input.close().await;
                }
                // Applied before the stdin that follows it, so what the
                // client types after a resize sees the new size.
                Some(&RESIZE) => {
                    if let (Some(r), Some((w, h))) = (resize.as_ref(), terminal_size(&b[1..]))
                        && let Err(e) = r(w, h).await
                    {
                        debug!(error = %e, width = w, height = h, "terminal resize failed");
                    }
                }
                _ => {}
            }
        }
        Ok::<(), axum::Error>(())
    };
    let writer = async {
        while let Some(chunk) = output.next().await {
            match chunk {
                Ok(b) => {
                    if q.stdout || q.stderr {
                        ws_tx.send(frame(out_channel, &b)).await?;
                    }
                }
                Err(e) => {
                    ws_tx
                        .send(frame(
                            ERROR,
                            internal_status(&e.message).to_string().as_bytes(),
                        ))
                        .await?;
                    let _ = ws_tx.send(normal_close()).await;
                    return Ok(());
                }
            }
        }
        let code = exit_code.as_ref().and_then(|c| c.get().copied());
        ws_tx
            .send(frame(
                ERROR,
                exit_status(code, &q.command).to_string().as_bytes(),
            ))
            .await?;
        let _ = ws_tx.send(normal_close()).await;
        Ok::<(), axum::Error>(())
    };
    tokio::select! {
        r = writer => r,
        r = reader => r,
    }
}

async fn run_refused() -> Response {
    error(KubeletError {
        status: 501,
        message: "the /run endpoint is not supported by this node; use exec".into(),
    })
}

async fn samples(api: &KubeletApi) -> Result<Vec<summary::PodSample>, KubeletError> {
    let pods = api.pods.list().await?;
    let running: Vec<Pod> = pods
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    api.backend.stats(&running).await
}

async fn stats_summary(State(api): State<Arc<KubeletApi>>) -> Response {
    match samples(&api).await {
        Ok(s) => {
            let now = jiff::Timestamp::now();
            let mut rates = api.rates.lock().unwrap_or_else(|p| p.into_inner());
            axum::Json(summary::summary(
                &api.node_name,
                api.node_start,
                now,
                &s,
                &mut rates,
            ))
            .into_response()
        }
        Err(e) => error(e),
    }
}

async fn metrics_resource(State(api): State<Arc<KubeletApi>>) -> Response {
    match samples(&api).await {
        Ok(s) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            summary::resource_metrics(jiff::Timestamp::now(), &s),
        )
            .into_response(),
        Err(e) => error(e),
    }
}

async fn metrics(State(api): State<Arc<KubeletApi>>) -> Response {
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &api.registry) {
        return error(KubeletError::internal(format!("encoding metrics: {e}")));
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        out,
    )
        .into_response()
}

async fn pods_list(State(api): State<Arc<KubeletApi>>) -> Response {
    match api.pods.list().await {
        Ok(items) => axum::Json(
            json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}),
        )
        .into_response(),
        Err(e) => error(e),
    }
}

mod port_forward;
mod spdy_stream;
#[cfg(test)]
mod tests;
