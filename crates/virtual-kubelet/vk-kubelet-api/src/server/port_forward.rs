//! `/portForward/{ns}/{pod}` over WebSocket, as the kubelet serves it
//! (framing: [`crate::channel`]): one backend connection per requested port,
//! made after the upgrade; a port whose connection cannot be made gets the
//! kubelet's error text on its error channel. The socket is closed once
//! every port's connection has ended, or when the client goes.

use std::sync::Arc;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Request, State};
use axum::http::header;
use axum::response::Response;
use bytes::Bytes;
use futures::channel::mpsc;
use futures::{SinkExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use tracing::debug;

use super::{KubeletApi, error, pod_of, spdy_stream};
use crate::backend::KubeletError;
use crate::channel::{
    PORT_FORWARD_PROTOCOLS, data_channel, error_channel, forward_error, forward_ports, frame,
    port_of_data_channel, port_prefix,
};

type Upgrade = Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>;

/// `/portForward/{ns}/{pod}`.
pub(super) async fn port_forward(
    State(api): State<Arc<KubeletApi>>,
    Path((ns, pod)): Path<(String, String)>,
    ws: Upgrade,
    req: Request,
) -> Response {
    serve(api, ns, pod, ws, req).await
}

/// `/portForward/{ns}/{pod}/{uid}`.
pub(super) async fn port_forward_uid(
    State(api): State<Arc<KubeletApi>>,
    Path((ns, pod, _uid)): Path<(String, String, String)>,
    ws: Upgrade,
    req: Request,
) -> Response {
    serve(api, ns, pod, ws, req).await
}

async fn serve(
    api: Arc<KubeletApi>,
    ns: String,
    name: String,
    ws: Upgrade,
    mut req: Request,
) -> Response {
    if spdy_stream::is_spdy_upgrade(req.headers()) {
        if let Err(m) = spdy_stream::negotiate(req.headers(), &[spdy_stream::PORT_FORWARD_PROTOCOL])
        {
            return spdy_stream::refuse(m);
        }
        let pod = match pod_of(&api, &ns, &name).await {
            Ok(p) => p,
            Err(e) => return error(e),
        };
        let Some(on_upgrade) = req.extensions_mut().remove::<hyper::upgrade::OnUpgrade>() else {
            return error(KubeletError::bad_request(
                "the connection cannot be upgraded",
            ));
        };
        return spdy_stream::port_forward(api, pod, on_upgrade);
    }
    let Ok(ws) = ws else {
        return error(KubeletError::bad_request(
            "port forwarding needs a WebSocket (protocol v4.channel.k8s.io) or SPDY/3.1 (portforward.k8s.io) upgrade",
        ));
    };
    let ports = match forward_ports(req.uri().query().unwrap_or("")) {
        Ok(p) => p,
        Err(e) => return error(KubeletError::bad_request(e.message)),
    };
    if ports.len() > 128 {
        return error(KubeletError::bad_request(
            "port: at most 128 ports per request (two channels each)",
        ));
    }
    let offered: Vec<String> = req
        .headers()
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|s| s.trim().to_string()))
        .filter(|s| !s.is_empty())
        .collect();
    // As the kubelet's wsstream: no protocol offered means the binary
    // framing; protocols offered of which none is known is an error.
    if !offered.is_empty()
        && !PORT_FORWARD_PROTOCOLS
            .iter()
            .any(|p| offered.iter().any(|o| o == p))
    {
        return error(KubeletError::bad_request(format!(
            "unable to upgrade: unable to negotiate protocol: client supports {offered:?}, server supports {PORT_FORWARD_PROTOCOLS:?}"
        )));
    }
    let pod = match pod_of(&api, &ns, &name).await {
        Ok(p) => p,
        Err(e) => return error(e),
    };
    ws.protocols(PORT_FORWARD_PROTOCOLS)
        .on_upgrade(move |socket| forward(api, pod, ports, socket))
}

/// What the kubelet calls the pod in errors (`name_namespace`) and its uid.
pub(super) fn pod_names(pod: &Pod) -> (String, String) {
    (
        format!(
            "{}_{}",
            pod.metadata.name.as_deref().unwrap_or_default(),
            pod.metadata.namespace.as_deref().unwrap_or_default()
        ),
        pod.metadata.uid.clone().unwrap_or_default(),
    )
}

async fn forward(api: Arc<KubeletApi>, pod: Pod, ports: Vec<u16>, socket: WebSocket) {
    let (mut ws_tx, mut ws_rx) = socket.split();
    let (out_tx, mut out_rx) = mpsc::channel::<Message>(32);
    let mut inputs = Vec::with_capacity(ports.len());
    let mut conns = Vec::with_capacity(ports.len());
    for (i, &port) in ports.iter().enumerate() {
        // The port count is checked (<= 128) before the upgrade.
        let (Some(data), Some(err)) = (data_channel(i), error_channel(i)) else {
            return;
        };
        let (in_tx, in_rx) = mpsc::channel::<Bytes>(16);
        inputs.push(in_tx);
        conns.push(connection(
            api.clone(),
            &pod,
            port,
            (data, err),
            in_rx,
            out_tx.clone(),
        ));
    }
    // The port prefixes go first, before any connection's data.
    for (i, &port) in ports.iter().enumerate() {
        for ch in [data_channel(i), error_channel(i)].into_iter().flatten() {
            if ws_tx
                .send(Message::Binary(port_prefix(ch, port).into()))
                .await
                .is_err()
            {
                return;
            }
        }
    }
    let done = {
        let mut out_tx = out_tx;
        async move {
            futures::future::join_all(conns).await;
            let _ = out_tx.send(super::normal_close()).await;
        }
    };
    let writer = async move {
        while let Some(m) = out_rx.next().await {
            let close = matches!(m, Message::Close(_));
            if ws_tx.send(m).await.is_err() || close {
                break;
            }
        }
    };
    let reader = async move {
        while let Some(Ok(m)) = ws_rx.next().await {
            let b = match m {
                Message::Binary(b) => b,
                Message::Close(_) => break,
                _ => continue,
            };
            let Some((&ch, data)) = b.split_first() else {
                continue;
            };
            let Some(i) = port_of_data_channel(ch, inputs.len()) else {
                continue;
            };
            if data.is_empty() {
                continue;
            }
            // A port whose connection ended drops what is still sent to it.
            let _ = inputs[i].send(Bytes::copy_from_slice(data)).await;
        }
    };
    // The client going away ends every connection (their sessions dropped).
    // After the node's Close, the client's Close completes the handshake.
    let mut reader = std::pin::pin!(reader);
    tokio::select! {
        _ = futures::future::join(done, writer) => {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), &mut reader).await;
        }
        _ = &mut reader => {}
    }
}

/// One port's connection: made through the backend, then copied both ways
/// until the pod's side ends.
async fn connection(
    api: Arc<KubeletApi>,
    pod: &Pod,
    port: u16,
    (data, err): (u8, u8),
    mut input: mpsc::Receiver<Bytes>,
    mut out: mpsc::Sender<Message>,
) {
    let (pod_name, uid) = pod_names(pod);
    let session = match api.backend.port_forward(pod, port).await {
        Ok(s) => s,
        Err(e) => {
            debug!(port, pod = %pod_name, error = %e, "port-forward refused");
            let text = forward_error(port, &pod_name, &uid, &e.message);
            let _ = out
                .send(Message::Binary(frame(err, text.as_bytes()).into()))
                .await;
            return;
        }
    };
    let mut output = session.output;
    let mut sink = session.input;
    let to_pod = async {
        while let Some(b) = input.next().await {
            if sink.send(b).await.is_err() {
                break;
            }
        }
        // The client sends nothing more; the pod's side may still answer.
        std::future::pending::<()>().await;
    };
    let from_pod = async {
        while let Some(chunk) = output.next().await {
            match chunk {
                Ok(b) if b.is_empty() => {}
                Ok(b) => {
                    if out
                        .send(Message::Binary(frame(data, &b).into()))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                Err(e) => {
                    let text = forward_error(port, &pod_name, &uid, &e.message);
                    let _ = out
                        .send(Message::Binary(frame(err, text.as_bytes()).into()))
                        .await;
                    return;
                }
            }
        }
    };
    tokio::select! {
        _ = from_pod => {}
        _ = to_pod => {}
    }
}
