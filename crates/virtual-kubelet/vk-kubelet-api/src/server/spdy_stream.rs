//! Exec, attach and port-forward over SPDY/3.1 (framing: [`crate::spdy`]),
//! as the kubelet serves them through `httpstream/spdy`: what API servers
//! send their kubelets (1.30+ translate their clients' WebSockets into SPDY;
//! older ones pass the client's SPDY through).
//!
//! After the 101 the client opens streams (SYN_STREAM, answered with an
//! empty SYN_REPLY), named by their `streamtype` header. Exec/attach: `error`,
//! then `stdin`, `stdout`, `stderr` and `resize` as asked; the node writes the
//! output, then the status on `error`, ends its streams (FIN) and the session
//! (GOAWAY). Port-forward: per `requestid` an `error` and a `data` stream for
//! a `port`; the data stream is relayed to the backend's connection, and a
//! failure is the kubelet's text on the error stream.

use std::collections::HashMap;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures::{SinkExt, StreamExt};
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, oneshot};
use tracing::debug;

use super::{KubeletApi, Started, error, exit_status, internal_status};
use crate::backend::{ExecResult, KubeletError, Session};
use crate::channel::{forward_error, terminal_size};
use crate::query::StreamQuery;
use crate::spdy::{Decoder, Encoder, FLAG_FIN, Frame, RST_REFUSED_STREAM, header as hval};

/// The exec/attach protocols over SPDY, preferred first (`v5` is `v4` on
/// SPDY; clients that offer it offer `v4` too).
pub const EXEC_PROTOCOLS: [&str; 4] = [
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
];
/// The port-forward protocol over SPDY.
pub const PORT_FORWARD_PROTOCOL: &str = "portforward.k8s.io";
const PROTOCOL_HEADER: &str = "x-stream-protocol-version";
/// How long the client has to open the streams it asked for (the kubelet's
/// `streamCreationTimeout` default).
const STREAM_CREATION: Duration = Duration::from_secs(30);
/// Data frames the node writes stay below this size.
const CHUNK: usize = 32 * 1024;

/// Whether the request asks for a SPDY/3.1 upgrade.
pub fn is_spdy_upgrade(h: &HeaderMap) -> bool {
    let has = |name: header::HeaderName, want: &str| {
        h.get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|v| v.trim().eq_ignore_ascii_case(want))
    };
    has(header::CONNECTION, "upgrade") && has(header::UPGRADE, "spdy/3.1")
}

/// The protocol to speak: the first of `server`'s that the client offers
/// (`X-Stream-Protocol-Version`, repeated or comma-separated), or the
/// kubelet's refusal.
pub fn negotiate(h: &HeaderMap, server: &[&'static str]) -> Result<&'static str, String> {
    let offered: Vec<String> = h
        .get_all(PROTOCOL_HEADER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    if offered.is_empty() {
        return Err("unable to upgrade: X-Stream-Protocol-Version is required".into());
    }
    server
        .iter()
        .find(|p| offered.iter().any(|o| o == *p))
        .copied()
        .ok_or_else(|| {
            format!(
                "unable to upgrade: unable to negotiate protocol: client supports {offered:?}, server accepts {server:?}"
            )
        })
}

/// Refusal of a SPDY upgrade whose protocol cannot be agreed (403, as the
/// kubelet's `httpstream.Handshake`).
pub(super) fn refuse(message: String) -> Response {
    error(KubeletError {
        status: 403,
        message,
    })
}

fn switching(protocol: &str, then: impl FnOnce() -> Response) -> Response {
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, "SPDY/3.1")
        .header(PROTOCOL_HEADER, protocol)
        .body(Body::empty())
        .unwrap_or_else(|_| then())
}

/// The frames read from the client.
struct Incoming {
    rd: ReadHalf<TokioIo<Upgraded>>,
    buf: BytesMut,
    dec: Decoder,
}

impl Incoming {
    async fn next(&mut self) -> std::io::Result<Option<Frame>> {
        loop {
            if let Some(f) = self
                .dec
                .decode(&mut self.buf)
                .map_err(std::io::Error::other)?
            {
                return Ok(Some(f));
            }
            if self.rd.read_buf(&mut self.buf).await? == 0 {
                return Ok(None);
            }
        }
    }
}

/// Writes what it is sent in order (one compression context); a GOAWAY is
/// the last frame, after which the connection's write side is shut.
async fn writer(mut wr: WriteHalf<TokioIo<Upgraded>>, mut rx: mpsc::Receiver<Frame>) {
    let mut enc = Encoder::default();
    let mut out = BytesMut::new();
    while let Some(f) = rx.recv().await {
        let last = matches!(f, Frame::GoAway { .. });
        out.clear();
        if let Err(e) = enc.encode(&f, &mut out) {
            debug!(error = %e, "SPDY frame not encoded");
            break;
        }
        if wr.write_all(&out).await.is_err() || wr.flush().await.is_err() {
            return;
        }
        if last {
            break;
        }
    }
    let _ = wr.shutdown().await;
}

fn start(upgraded: Upgraded) -> (Incoming, mpsc::Sender<Frame>, tokio::task::JoinHandle<()>) {
    let (rd, wr) = tokio::io::split(TokioIo::new(upgraded));
    let (tx, rx) = mpsc::channel(64);
    let w = tokio::spawn(writer(wr, rx));
    (
        Incoming {
            rd,
            buf: BytesMut::new(),
            dec: Decoder::default(),
        },
        tx,
        w,
    )
}

/// Sends `data` on `stream` in frames of at most [`CHUNK`] bytes.
async fn send_data(out: &mpsc::Sender<Frame>, stream: u32, data: &[u8]) -> Result<(), ()> {
    for c in data.chunks(CHUNK) {
        out.send(Frame::Data {
            stream,
            flags: 0,
            data: Bytes::copy_from_slice(c),
        })
        .await
        .map_err(|_| ())?;
    }
    Ok(())
}

async fn fin(out: &mpsc::Sender<Frame>, stream: u32) {
    let _ = out
        .send(Frame::Data {
            stream,
            flags: FLAG_FIN,
            data: Bytes::new(),
        })
        .await;
}

/// Exec or attach over SPDY: `started` is the backend's side, made before
/// the upgrade so refusals are HTTP errors.
pub(super) fn exec(
    api: Arc<KubeletApi>,
    pod: Pod,
    container: String,
    q: StreamQuery,
    started: Started,
    protocol: &'static str,
    on_upgrade: OnUpgrade,
) -> Response {
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(u) => exec_session(u, api, pod, container, q, started, protocol).await,
            Err(e) => debug!(error = %e, "SPDY upgrade failed"),
        }
    });
    switching(protocol, || {
        error(KubeletError::internal("cannot build the response"))
    })
}

/// The stream ids of an exec session, by the `streamtype` the client gave.
#[derive(Clone, Copy, Default, Debug)]
struct ExecStreams {
    error: Option<u32>,
    stdin: Option<u32>,
    stdout: Option<u32>,
    stderr: Option<u32>,
    resize: Option<u32>,
}

async fn exec_session(
    upgraded: Upgraded,
    api: Arc<KubeletApi>,
    pod: Pod,
    container: String,
    q: StreamQuery,
    started: Started,
    protocol: &'static str,
) {
    let (mut incoming, out, writer) = start(upgraded);
    let json_status = protocol == EXEC_PROTOCOLS[0];
    let resize_stream = q.tty && protocol != EXEC_PROTOCOLS[2] && protocol != EXEC_PROTOCOLS[3];
    let complete = |s: &ExecStreams| {
        s.error.is_some()
            && (!q.stdin || s.stdin.is_some())
            && (!q.stdout || s.stdout.is_some())
            && (!q.stderr || q.tty || s.stderr.is_some())
            && (!resize_stream || s.resize.is_some())
    };
    let (session, run) = match started {
        Started::Session(s) => (Some(s), false),
        Started::Run => (None, true),
    };
    let (input, output, resizer, exit_code) = match session {
        Some(Session {
            output,
            input,
            resize,
            exit_code,
            ..
        }) => (Some(input), Some(output), resize, exit_code),
        None => (None, None, None, None),
    };
    let (ready_tx, ready_rx) = oneshot::channel::<ExecStreams>();
    // The client's frames: stream openings, stdin, resizes and pings.
    let reader = {
        let out = out.clone();
        async move {
            let mut streams = ExecStreams::default();
            let mut ready = Some(ready_tx);
            let mut input = input;
            let mut resize_buf: Vec<u8> = Vec::new();
            loop {
                let frame = match incoming.next().await {
                    Ok(Some(f)) => f,
                    Ok(None) => break,
                    Err(e) => {
                        debug!(error = %e, "SPDY session read failed");
                        break;
                    }
                };
                match frame {
                    Frame::SynStream {
                        stream, headers, ..
                    } => {
                        let kind = hval(&headers, "streamtype").unwrap_or_default();
                        let slot = match kind {
                            "error" => &mut streams.error,
                            "stdin" => &mut streams.stdin,
                            "stdout" => &mut streams.stdout,
                            "stderr" => &mut streams.stderr,
                            "resize" => &mut streams.resize,
                            _ => {
                                let _ = out
                                    .send(Frame::RstStream {
                                        stream,
                                        status: RST_REFUSED_STREAM,
                                    })
                                    .await;
                                continue;
                            }
                        };
                        *slot = Some(stream);
                        let _ = out
                            .send(Frame::SynReply {
                                stream,
                                flags: 0,
                                headers: Vec::new(),
                            })
                            .await;
                        if complete(&streams)
                            && let Some(tx) = ready.take()
                        {
                            let _ = tx.send(streams);
                        }
                    }
                    Frame::Data {
                        stream,
                        flags,
                        data,
                    } => {
                        if Some(stream) == streams.stdin {
                            if let Some(i) = input.as_mut() {
                                if !data.is_empty() && i.send(data).await.is_err() {
                                    input = None;
                                } else if flags & FLAG_FIN != 0 {
                                    // End of stdin (the client's half-close): the backend
                                    // makes the process see it; its output still comes.
                                    let _ = i.close().await;
                                    input = None;
                                }
                            }
                        } else if Some(stream) == streams.resize {
                            resize_buf.extend_from_slice(&data);
                            // Terminal sizes are consecutive JSON objects.
                            while let Some(end) = resize_buf.iter().position(|&b| b == b'}') {
                                let one: Vec<u8> = resize_buf.drain(..=end).collect();
                                if let (Some(r), Some((w, h))) =
                                    (resizer.as_ref(), terminal_size(&one))
                                    && let Err(e) = r(w, h).await
                                {
                                    debug!(error = %e, width = w, height = h, "terminal resize failed");
                                }
                            }
                        }
                    }
                    Frame::Ping { id } => {
                        let _ = out.send(Frame::Ping { id }).await;
                    }
                    Frame::GoAway { .. } => break,
                    _ => {}
                }
            }
        }
    };
    let main = {
        let out = out.clone();
        async move {
            let Ok(Ok(s)) = tokio::time::timeout(STREAM_CREATION, ready_rx).await else {
                debug!("SPDY exec: the client did not open its streams");
                let _ = out
                    .send(Frame::GoAway {
                        last_good: 0,
                        status: 0,
                    })
                    .await;
                return;
            };
            let Some(error_id) = s.error else { return };
            let status = if run {
                match api.backend.exec(&pod, &container, &q.command).await {
                    Ok(ExecResult {
                        stdout,
                        stderr,
                        exit_code,
                    }) => {
                        if let Some(id) = s.stdout {
                            let _ = send_data(&out, id, &stdout).await;
                        }
                        if let Some(id) = s.stderr.or(s.stdout) {
                            let _ = send_data(&out, id, &stderr).await;
                        }
                        exit_status(exit_code, &q.command)
                    }
                    Err(e) => internal_status(&format!(
                        "error executing command in container: {}",
                        e.message
                    )),
                }
            } else {
                let mut status = None;
                if let Some(mut output) = output {
                    let target = s.stdout.or(s.stderr);
                    while let Some(chunk) = output.next().await {
                        match chunk {
                            Ok(b) => {
                                if let Some(id) = target
                                    && send_data(&out, id, &b).await.is_err()
                                {
                                    return;
                                }
                            }
                            Err(e) => {
                                status = Some(internal_status(&e.message));
                                break;
                            }
                        }
                    }
                }
                status.unwrap_or_else(|| {
                    let code = exit_code.as_ref().and_then(|c| c.get().copied());
                    exit_status(code, &q.command)
                })
            };
            // v4 writes the Status as JSON; older protocols only a
            // failure's message as text.
            let text = if json_status {
                Some(status.to_string())
            } else if status["status"] != "Success" {
                status["message"].as_str().map(str::to_string)
            } else {
                None
            };
            if let Some(t) = text {
                let _ = send_data(&out, error_id, t.as_bytes()).await;
            }
            for id in [s.stdout, s.stderr, Some(error_id)].into_iter().flatten() {
                fin(&out, id).await;
            }
            let last = [s.error, s.stdin, s.stdout, s.stderr, s.resize]
                .into_iter()
                .flatten()
                .max()
                .unwrap_or(0);
            let _ = out
                .send(Frame::GoAway {
                    last_good: last,
                    status: 0,
                })
                .await;
        }
    };
    drop(out);
    tokio::select! {
        _ = main => {
            // The writer sends the GOAWAY and shuts the write side; the
            // client then closes.
            let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
        }
        _ = reader => {}
    }
}

/// Port-forward over SPDY (`portforward.k8s.io`).
pub(super) fn port_forward(api: Arc<KubeletApi>, pod: Pod, on_upgrade: OnUpgrade) -> Response {
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(u) => forward_session(u, api, pod).await,
            Err(e) => debug!(error = %e, "SPDY upgrade failed"),
        }
    });
    switching(PORT_FORWARD_PROTOCOL, || {
        error(KubeletError::internal("cannot build the response"))
    })
}

/// A port-forward request's two streams as they arrive.
#[derive(Default)]
struct Pair {
    port: Option<u16>,
    error: Option<u32>,
    data: Option<u32>,
}

async fn forward_session(upgraded: Upgraded, api: Arc<KubeletApi>, pod: Pod) {
    let (mut incoming, out, _writer) = start(upgraded);
    let mut pairs: HashMap<String, Pair> = HashMap::new();
    // The data stream's id to its connection's input.
    let mut inputs: HashMap<u32, mpsc::Sender<Bytes>> = HashMap::new();
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let frame = match incoming.next().await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                debug!(error = %e, "SPDY port-forward read failed");
                break;
            }
        };
        match frame {
            Frame::SynStream {
                stream, headers, ..
            } => {
                let kind = hval(&headers, "streamtype").unwrap_or_default();
                let port = hval(&headers, "port").and_then(|p| p.parse::<u16>().ok());
                let request = hval(&headers, "requestid").unwrap_or_default().to_string();
                if port.is_none() || !matches!(kind, "data" | "error") {
                    let _ = out
                        .send(Frame::RstStream {
                            stream,
                            status: RST_REFUSED_STREAM,
                        })
                        .await;
                    continue;
                }
                let _ = out
                    .send(Frame::SynReply {
                        stream,
                        flags: 0,
                        headers: Vec::new(),
                    })
                    .await;
                let pair = pairs.entry(request.clone()).or_default();
                pair.port = port;
                if kind == "data" {
                    pair.data = Some(stream);
                } else {
                    pair.error = Some(stream);
                }
                if let (Some(port), Some(err), Some(data)) = (pair.port, pair.error, pair.data) {
                    pairs.remove(&request);
                    let (tx, rx) = mpsc::channel(16);
                    inputs.insert(data, tx);
                    conns.spawn(connection(
                        api.clone(),
                        pod.clone(),
                        port,
                        (data, err),
                        rx,
                        out.clone(),
                    ));
                }
            }
            Frame::Data { stream, data, .. } => {
                if let Some(tx) = inputs.get(&stream)
                    && !data.is_empty()
                    && tx.send(data).await.is_err()
                {
                    inputs.remove(&stream);
                }
            }
            Frame::RstStream { stream, .. } => {
                inputs.remove(&stream);
            }
            Frame::Ping { id } => {
                let _ = out.send(Frame::Ping { id }).await;
            }
            Frame::GoAway { .. } => break,
            _ => {}
        }
    }
    // The client has gone: its connections end with it.
    conns.abort_all();
}

/// One forwarded connection: made through the backend, then relayed until
/// the pod's side ends; both streams are then ended (FIN).
async fn connection(
    api: Arc<KubeletApi>,
    pod: Pod,
    port: u16,
    (data, err): (u32, u32),
    mut input: mpsc::Receiver<Bytes>,
    out: mpsc::Sender<Frame>,
) {
    let (pod_name, uid) = super::port_forward::pod_names(&pod);
    match api.backend.port_forward(&pod, port).await {
        Err(e) => {
            let text = forward_error(port, &pod_name, &uid, &e.message);
            let _ = send_data(&out, err, text.as_bytes()).await;
        }
        Ok(session) => {
            let mut output = session.output;
            let mut sink = session.input;
            let to_pod = async {
                while let Some(b) = input.recv().await {
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
                        Ok(b) => {
                            if send_data(&out, data, &b).await.is_err() {
                                return;
                            }
                        }
                        Err(e) => {
                            let text = forward_error(port, &pod_name, &uid, &e.message);
                            let _ = send_data(&out, err, text.as_bytes()).await;
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
    }
    fin(&out, data).await;
    fin(&out, err).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spdy_upgrades_and_protocols() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, "Upgrade".parse().unwrap());
        h.insert(header::UPGRADE, "SPDY/3.1".parse().unwrap());
        assert!(is_spdy_upgrade(&h));
        assert_eq!(
            negotiate(&h, &EXEC_PROTOCOLS),
            Err("unable to upgrade: X-Stream-Protocol-Version is required".into())
        );
        // kubectl 1.32 offers v5 first, one header each.
        for p in [
            "v5.channel.k8s.io",
            "v4.channel.k8s.io",
            "v3.channel.k8s.io",
        ] {
            h.append(PROTOCOL_HEADER, p.parse().unwrap());
        }
        assert_eq!(negotiate(&h, &EXEC_PROTOCOLS), Ok("v4.channel.k8s.io"));
        let mut old = HeaderMap::new();
        old.insert(
            PROTOCOL_HEADER,
            "v2.channel.k8s.io, channel.k8s.io".parse().unwrap(),
        );
        assert_eq!(negotiate(&old, &EXEC_PROTOCOLS), Ok("v2.channel.k8s.io"));
        assert!(
            negotiate(&old, &[PORT_FORWARD_PROTOCOL])
                .unwrap_err()
                .contains("unable to negotiate protocol")
        );
        h.insert(header::UPGRADE, "websocket".parse().unwrap());
        assert!(!is_spdy_upgrade(&h));
    }
}
