//! The kubelet API's [`Backend`] on Zun: each pod container is a plain Zun
//! container (named by [`labels::zun_name`], labelled with the pod's uid and
//! container name), so logs, exec, stats and top are Zun's own endpoints;
//! exec with stdin and attach go through zun-wsproxy's WebSocket (their
//! terminal resized through Zun's `execute_resize` and `resize`; exec's
//! command under the wrapper of [`exec_session`], which gives it its
//! end-of-input and the node its exit code), and port-forward is a relay in
//! the container ([`port_forward`]).

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use futures::{Sink, SinkExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use openstack::container::{Container, LogOptions, ZunContainer};
use tokio_tungstenite::tungstenite::{self, Message};
use vk_kubelet_api::backend::{
    Backend, ExecResult, ExitCode, KubeletError, Resizer, Session, SessionInput, SessionOutput,
};
use vk_kubelet_api::query::LogQuery;
use vk_kubelet_api::summary::{ContainerSample, PodSample};

use crate::exec_session::{self, ExitReader, Mode, Preamble, StdinEncoder, WrapperError};
use crate::labels;
use crate::port_forward;

/// Zun behind the kubelet API of node `node`.
pub struct ZunKubelet {
    zun: Arc<dyn Container>,
    node: String,
}

impl ZunKubelet {
    /// The backend of node `node` on `zun`.
    pub fn new(zun: Arc<dyn Container>, node: String) -> Self {
        Self { zun, node }
    }

    fn pod_labels(&self, pod: &Pod) -> BTreeMap<String, String> {
        let mut l = labels::ours(&self.node);
        l.insert(
            labels::POD_UID.into(),
            pod.metadata.uid.clone().unwrap_or_default(),
        );
        l
    }

    /// Starts `command` in the Zun container `uuid` under the wrapper of
    /// `mode` ([`exec_session`]): the session once the wrapper is ready (its
    /// output the command's, its exit code and, for [`Mode::NoStdin`], its
    /// stderr set when that ends), or why the wrapper did not start the command.
    async fn wrapped(
        &self,
        uuid: &str,
        container: &str,
        command: &[String],
        mode: Mode,
    ) -> Result<Result<(Session, Stderr), WrapperError>, KubeletError> {
        let nonce = exec_session::nonce();
        let argv = exec_session::wrapper_command(command, mode, &nonce);
        let t0 = std::time::Instant::now();
        let s = self
            .zun
            .exec_interactive(uuid, &argv)
            .await
            .map_err(|e| refused("exec", container, e))?;
        tracing::debug!(container, ?mode, elapsed = ?t0.elapsed(), "exec: Zun's interactive execute answered");
        let resize = self.exec_resizer(uuid, s.exec_id.clone());
        let (tx, mut output) = open(&s.url, container).await?;
        tracing::debug!(container, elapsed = ?t0.elapsed(), "exec: zun-wsproxy connected");
        let mut preamble = Preamble::default();
        let first = loop {
            let next = tokio::time::timeout(WRAPPER_START, output.next())
                .await
                .map_err(|_| {
                    KubeletError::internal(format!(
                        "exec in container {container:?}: the command did not start within {}s",
                        WRAPPER_START.as_secs()
                    ))
                })?;
            match next {
                None => return Ok(Err(preamble.finish())),
                Some(chunk) => match preamble.feed(&chunk?) {
                    Ok(Some(rest)) => break rest,
                    Ok(None) => {}
                    Err(e) => return Ok(Err(e)),
                },
            }
        };
        tracing::debug!(container, elapsed = ?t0.elapsed(), "exec: the wrapper is ready");
        let exit_code = ExitCode::default();
        let stderr = Stderr::default();
        let ended = (exit_code.clone(), stderr.clone());
        let session = Session {
            output: exit_stream(first, output, ExitReader::new(&nonce), ended),
            input: input_task(tx, StdinEncoder::new(mode), OnClose::Eof),
            tty: mode == Mode::Tty,
            resize,
            exit_code: Some(exit_code),
        };
        Ok(Ok((session, stderr)))
    }

    /// Resizes the TTY of the interactive exec `exec_id` in `uuid`.
    fn exec_resizer(&self, uuid: &str, exec_id: Option<String>) -> Option<Resizer> {
        exec_id.map(|exec_id| {
            let (zun, uuid) = (self.zun.clone(), uuid.to_string());
            resizer(move |w, h| {
                let (zun, uuid, exec_id) = (zun.clone(), uuid.clone(), exec_id.clone());
                async move { zun.exec_resize(&uuid, &exec_id, w, h).await }
            })
        })
    }

    /// The pod container's Zun container: the one the pod's status names when it is still that
    /// container's, else the newest with its labels (a re-create may leave two).
    async fn find(&self, pod: &Pod, container: &str) -> Result<ZunContainer, KubeletError> {
        let mut l = self.pod_labels(pod);
        l.insert(labels::CONTAINER.into(), container.into());
        // One GET instead of a list of the node's containers: `kubectl cp` gives the exec that
        // starts it 30 s, and under load every Zun call counts.
        if let Some(id) = status_container_id(pod, container) {
            match self.zun.get_container(&id).await {
                Ok(c) if l.iter().all(|(k, v)| c.labels.get(k) == Some(v)) => return Ok(c),
                Ok(_) | Err(openstack::Error::NotFound { .. }) => {}
                Err(e) => {
                    return Err(KubeletError::unavailable(format!(
                        "reading Zun container {id}: {e}"
                    )));
                }
            }
        }
        let mut found = self
            .zun
            .list_containers(&l, None)
            .await
            .map_err(|e| KubeletError::unavailable(format!("listing Zun containers: {e}")))?;
        found.sort_by(|a, b| a.created_at.cmp(&b.created_at));
        found
            .pop()
            .ok_or_else(|| KubeletError::not_found(format!("container not found ({container:?})")))
    }
}

/// The Zun container id the pod's status gives `container` (`zun://ID`), init containers too.
fn status_container_id(pod: &Pod, container: &str) -> Option<String> {
    let s = pod.status.as_ref()?;
    s.container_statuses
        .iter()
        .flatten()
        .chain(s.init_container_statuses.iter().flatten())
        .find(|c| c.name == container)?
        .container_id
        .as_deref()?
        .strip_prefix(crate::status::ID_SCHEME)
        .filter(|id| !id.is_empty())
        .map(String::from)
}

/// A Zun refusal as the kubelet's user sees it.
fn refused(what: &str, container: &str, e: openstack::Error) -> KubeletError {
    match e {
        openstack::Error::NotFound { .. } => {
            KubeletError::not_found(format!("container not found ({container:?})"))
        }
        openstack::Error::Conflict { message } | openstack::Error::BadRequest { message } => {
            KubeletError::bad_request(format!(
                "Zun refused {what} in container {container:?}: {message}"
            ))
        }
        other => KubeletError::internal(format!("{what} in container {container:?}: {other}")),
    }
}

/// Sum of the `TIME` column of `ps -o pid,times` (cumulative CPU seconds).
pub fn cpu_seconds(top: &openstack::container::ZunTop) -> Option<f64> {
    let col = top.titles.iter().position(|t| t == "TIME")?;
    let mut sum = 0.0;
    for row in &top.processes {
        sum += row.get(col)?.trim().parse::<f64>().ok()?;
    }
    Some(sum)
}

fn parse_zun_time(s: &str) -> Option<jiff::Timestamp> {
    s.parse::<jiff::Timestamp>().ok().or_else(|| {
        s.parse::<jiff::civil::DateTime>()
            .ok()
            .and_then(|d| d.to_zoned(jiff::tz::TimeZone::UTC).ok())
            .map(|z| z.timestamp())
    })
}

#[async_trait]
impl Backend for ZunKubelet {
    async fn logs(&self, pod: &Pod, container: &str, q: &LogQuery) -> Result<String, KubeletError> {
        let c = self.find(pod, container).await?;
        let since = q.since_unix(jiff::Timestamp::now());
        // After a restart by this node, the current run's lines only: Docker's log of the
        // container holds every run ([`crate::run_logs`]).
        if let Some(start) = crate::run_logs::global().run_start(&c.uuid) {
            let opts = LogOptions {
                tail: q.tail_lines.and_then(|t| u64::try_from(t).ok()),
                timestamps: true,
                since: Some(since.unwrap_or(0).max(start.as_second())),
            };
            let text = self
                .zun
                .container_logs(&c.uuid, &opts)
                .await
                .map_err(|e| refused("logs", container, e))?;
            return Ok(crate::run_logs::render(
                &text,
                Some(start),
                None,
                q.timestamps,
            ));
        }
        let opts = LogOptions {
            tail: q.tail_lines.and_then(|t| u64::try_from(t).ok()),
            timestamps: q.timestamps,
            since,
        };
        self.zun
            .container_logs(&c.uuid, &opts)
            .await
            .map_err(|e| refused("logs", container, e))
    }

    async fn previous_logs(
        &self,
        pod: &Pod,
        container: &str,
        q: &LogQuery,
    ) -> Result<Option<String>, KubeletError> {
        let c = self.find(pod, container).await?;
        let store = crate::run_logs::global();
        let since = q
            .since_unix(jiff::Timestamp::now())
            .and_then(|s| jiff::Timestamp::from_second(s).ok());
        let tail = q.tail_lines;
        let waiting = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|l| l.iter().find(|s| s.name == container))
            .and_then(|s| s.state.as_ref())
            .is_some_and(|s| s.waiting.is_some());
        if c.status == openstack::container::status::STOPPED && waiting {
            // Stopped and not started again yet (e.g. CrashLoopBackOff): the run that
            // ended is the one Docker's log ends with.
            let start = store.run_start(&c.uuid);
            let opts = LogOptions {
                tail: Some(crate::run_logs::MAX_LINES),
                timestamps: true,
                since: start.map(|t| t.as_second()),
            };
            let text = self
                .zun
                .container_logs(&c.uuid, &opts)
                .await
                .map_err(|e| refused("logs", container, e))?;
            let run = crate::run_logs::run_of(&text, start);
            return Ok(Some(crate::run_logs::render(
                &run,
                since,
                tail,
                q.timestamps,
            )));
        }
        Ok(store
            .previous(&c.uuid)
            .map(|run| crate::run_logs::render(&run, since, tail, q.timestamps)))
    }

    async fn exec(
        &self,
        pod: &Pod,
        container: &str,
        command: &[String],
    ) -> Result<ExecResult, KubeletError> {
        let c = self.find(pod, container).await?;
        // Through the wrapper when it can run: the output byte for byte and no
        // time limit; else Zun's execute (text, 5 s by default).
        match self
            .wrapped(&c.uuid, container, command, Mode::NoStdin)
            .await
        {
            Ok(Ok((s, stderr))) => {
                let Session {
                    mut output,
                    input,
                    exit_code,
                    ..
                } = s;
                drop(input);
                let mut stdout = Vec::new();
                while let Some(chunk) = output.next().await {
                    stdout.extend_from_slice(&chunk?);
                }
                return Ok(ExecResult {
                    stdout,
                    stderr: stderr.get().cloned().unwrap_or_default(),
                    exit_code: exit_code.and_then(|c| c.get().copied()),
                });
            }
            Ok(Err(e)) => {
                tracing::debug!(container, error = %e, "exec wrapper did not start; Zun's execute");
            }
            Err(e) => {
                tracing::debug!(container, error = %e, "exec wrapper not reached; Zun's execute");
            }
        }
        let out = self
            .zun
            .exec(&c.uuid, command)
            .await
            .map_err(|e| refused("exec", container, e))?;
        // Zun returns stdout and stderr interleaved in one string.
        Ok(ExecResult {
            stdout: out.output.into_bytes(),
            stderr: Vec::new(),
            exit_code: out.exit_code,
        })
    }

    async fn exec_interactive(
        &self,
        pod: &Pod,
        container: &str,
        command: &[String],
        tty: bool,
    ) -> Result<Session, KubeletError> {
        let c = self.find(pod, container).await?;
        let mode = if tty { Mode::Tty } else { Mode::Pipe };
        match self.wrapped(&c.uuid, container, command, mode).await? {
            Ok((s, _)) => Ok(s),
            // An image without `sh` still gets a terminal session, as before
            // the wrapper (no exit code then).
            Err(e) if e.no_shell() && mode == Mode::Tty => {
                tracing::debug!(container, "no sh in the image: exec -t without the wrapper");
                let s = self
                    .zun
                    .exec_interactive(&c.uuid, command)
                    .await
                    .map_err(|e| refused("exec", container, e))?;
                let resize = self.exec_resizer(&c.uuid, s.exec_id.clone());
                let (tx, output) = open(&s.url, container).await?;
                Ok(Session {
                    output,
                    input: input_task(tx, StdinEncoder::new(Mode::Tty), OnClose::Eof),
                    tty: true,
                    resize,
                    exit_code: None,
                })
            }
            Err(e) => Err(KubeletError::bad_request(format!(
                "exec in container {container:?}: {e}"
            ))),
        }
    }

    async fn attach(&self, pod: &Pod, container: &str) -> Result<Session, KubeletError> {
        let c = self.find(pod, container).await?;
        let s = self
            .zun
            .attach(&c.uuid)
            .await
            .map_err(|e| refused("attach", container, e))?;
        // Only a container created with a TTY (the pod's `tty: true`, which
        // the node maps to Zun's) has one to resize.
        let tty = pod
            .spec
            .as_ref()
            .and_then(|s| s.containers.iter().find(|x| x.name == container))
            .and_then(|x| x.tty)
            .unwrap_or(false);
        let resize = tty.then(|| {
            let (zun, uuid) = (self.zun.clone(), c.uuid.clone());
            resizer(move |w, h| {
                let (zun, uuid) = (zun.clone(), uuid.clone());
                async move { zun.resize_tty(&uuid, w, h).await }
            })
        });
        let (tx, output) = open(&s.url, container).await?;
        // The end of stdin on a TTY is a Ctrl-D; Docker's attach has no other
        // way to close a container's stdin than to end the attach.
        let on_close = if tty { OnClose::Eof } else { OnClose::Close };
        Ok(Session {
            output,
            input: input_task(tx, StdinEncoder::new(Mode::Tty), on_close),
            tty,
            resize,
            exit_code: None,
        })
    }

    async fn stats(&self, pods: &[Pod]) -> Result<Vec<PodSample>, KubeletError> {
        let all = self
            .zun
            .list_containers(&labels::ours(&self.node), None)
            .await
            .map_err(|e| KubeletError::unavailable(format!("listing Zun containers: {e}")))?;
        let mut out = Vec::new();
        for pod in pods {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let mut sample = PodSample {
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                name: pod.metadata.name.clone().unwrap_or_default(),
                uid: uid.clone(),
                start_time: pod
                    .status
                    .as_ref()
                    .and_then(|s| s.start_time.as_ref())
                    .map(|t| t.0),
                containers: Vec::new(),
            };
            for c in all.iter().filter(|c| {
                c.labels.get(labels::POD_UID) == Some(&uid)
                    && c.status == openstack::container::status::RUNNING
            }) {
                let Some(name) = c.labels.get(labels::CONTAINER) else {
                    continue;
                };
                let stats = match self.zun.container_stats(&c.uuid).await {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::debug!(zun = %c.uuid, error = %e, "no stats");
                        continue;
                    }
                };
                let cpu = match self.zun.container_top(&c.uuid, "-o pid,times").await {
                    Ok(t) => cpu_seconds(&t),
                    Err(e) => {
                        tracing::debug!(zun = %c.uuid, error = %e, "no top");
                        None
                    }
                };
                let started = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .and_then(|l| l.iter().find(|s| &s.name == name))
                    .and_then(|s| s.state.as_ref())
                    .and_then(|s| s.running.as_ref())
                    .and_then(|r| r.started_at.as_ref())
                    .map(|t| t.0)
                    .or_else(|| c.created_at.as_deref().and_then(parse_zun_time));
                sample.containers.push(ContainerSample {
                    name: name.clone(),
                    start_time: started,
                    at: jiff::Timestamp::now(),
                    cpu_seconds: cpu,
                    memory_working_set_bytes: Some(
                        (stats.memory_usage_mib * 1024.0 * 1024.0).round() as u64,
                    ),
                    memory_limit_bytes: Some(
                        (stats.memory_limit_mib * 1024.0 * 1024.0).round() as u64
                    ),
                });
            }
            out.push(sample);
        }
        Ok(out)
    }

    async fn port_forward(&self, pod: &Pod, port: u16) -> Result<Session, KubeletError> {
        let container = port_forward::container_for_port(pod, port)
            .ok_or_else(|| KubeletError::not_found("the pod has no containers"))?;
        let c = self.find(pod, &container).await?;
        let s = self
            .zun
            .exec_interactive(&c.uuid, &port_forward::relay_command(port))
            .await
            .map_err(|e| refused("port-forward", &container, e))?;
        let session = connect(&s.url, &container, None).await?;
        port_forward::relay(session, port).await
    }
}

/// A [`Resizer`] calling Zun (its errors as the kubelet's).
fn resizer<F, Fut>(f: F) -> Resizer
where
    F: Fn(u16, u16) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), openstack::Error>> + Send + 'static,
{
    Arc::new(move |w, h| {
        let fut = f(w, h);
        let resized: futures::future::BoxFuture<'static, Result<(), KubeletError>> =
            Box::pin(async move {
                fut.await
                    .map_err(|e| KubeletError::internal(format!("terminal resize: {e}")))
            });
        resized
    })
}

/// A zun-wsproxy session that broke. zun-wsproxy accepts the WebSocket and
/// only then starts the exec on the Docker endpoint zun-compute recorded for
/// it (`[docker] docker_remote_api_url`, `tcp://<my_ip>:2375` by default;
/// zun 18 `compute/manager.py` `container_exec`,
/// `websocket/websocketproxy.py` `_new_exec_client`); when that fails it
/// drops the connection without a close frame, before any output.
pub fn session_error(cause: &str, seen_output: bool) -> KubeletError {
    if seen_output {
        KubeletError::internal(format!("zun-wsproxy: {cause}"))
    } else {
        KubeletError::internal(format!(
            "zun-wsproxy dropped the session before any output ({cause}): it could not start \
             the command; its log says why (often: zun-compute's [docker] docker_remote_api_url \
             is not a Docker endpoint zun-wsproxy can reach)"
        ))
    }
}

/// How long the exec wrapper has to print its ready marker.
const WRAPPER_START: std::time::Duration = std::time::Duration::from_secs(30);

/// The write half of a zun-wsproxy connection.
type WsSink = Pin<Box<dyn Sink<Message, Error = tungstenite::Error> + Send>>;

/// A zun-wsproxy connection: its write half and the bytes it brings.
async fn open(url: &str, container: &str) -> Result<(WsSink, SessionOutput), KubeletError> {
    let (ws, _) = tokio_tungstenite::connect_async(url).await.map_err(|e| {
        KubeletError::internal(format!(
            "connecting to zun-wsproxy for container {container:?}: {e}"
        ))
    })?;
    let (tx, rx) = ws.split();
    let seen_output = Arc::new(AtomicBool::new(false));
    let output = rx.filter_map(move |m| {
        let seen_output = seen_output.clone();
        async move {
            match m {
                Ok(Message::Binary(b)) => {
                    seen_output.store(true, Ordering::Relaxed);
                    Some(Ok(b))
                }
                Ok(Message::Text(t)) => {
                    seen_output.store(true, Ordering::Relaxed);
                    Some(Ok(Bytes::copy_from_slice(t.as_bytes())))
                }
                Ok(_) => None,
                Err(e) => Some(Err(session_error(
                    &e.to_string(),
                    seen_output.load(Ordering::Relaxed),
                ))),
            }
        }
    });
    Ok((Box::pin(tx), Box::pin(output)))
}

/// What closing a session's stdin does to its zun-wsproxy connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OnClose {
    /// Send the end of stdin (Ctrl-D) and keep the connection: closing it
    /// would end the exec and lose the output still to come.
    Eof,
    /// Close the connection (there is no other end of stdin).
    Close,
}

/// Raw stdin bytes sent to the wrapper in one batch at most.
const STDIN_BATCH: usize = 1 << 20;
/// How long the next piece of the client's stdin may take to come and still
/// join the batch (batched encodings only): clients write in small pieces
/// (kube-rs 1 KiB, kubectl 32 KiB) and each batch costs the wrapper two
/// processes; typed input waits no longer than this.
const STDIN_GATHER: std::time::Duration = std::time::Duration::from_millis(20);

/// The session's stdin: what the client sends, encoded for the wrapper, in
/// order; its end as `on_close` says. For a batched encoding, what comes
/// while a batch gathers ([`STDIN_GATHER`] between pieces, up to
/// [`STDIN_BATCH`]) is sent as one batch.
fn input_task(mut tx: WsSink, enc: StdinEncoder, on_close: OnClose) -> SessionInput {
    let (in_tx, mut in_rx) = futures::channel::mpsc::channel::<Bytes>(8);
    tokio::spawn(async move {
        let mut sent = 0usize;
        let mut ended = false;
        while !ended && let Some(first) = in_rx.next().await {
            let mut b = bytes::BytesMut::from(&first[..]);
            while enc.batched() && b.len() < STDIN_BATCH {
                match tokio::time::timeout(STDIN_GATHER, in_rx.next()).await {
                    Ok(Some(more)) => b.extend_from_slice(&more),
                    Ok(None) => {
                        ended = true;
                        break;
                    }
                    Err(_) => break,
                }
            }
            let data = enc.encode(&b);
            if data.is_empty() {
                continue;
            }
            if let Err(e) = tx.send(Message::Binary(data.into())).await {
                tracing::debug!(error = %e, sent, "exec stdin: zun-wsproxy refused it");
                return;
            }
            sent += b.len();
        }
        match on_close {
            OnClose::Eof => {
                let r = tx
                    .send(Message::Binary(Bytes::from_static(enc.eof())))
                    .await;
                tracing::debug!(sent, ok = r.is_ok(), "exec stdin: ended, end-of-input sent");
            }
            OnClose::Close => {
                let _ = tx.close().await;
            }
        }
    });
    Box::pin(in_tx.sink_map_err(|e| KubeletError::internal(format!("stdin: {e}"))))
}

/// The stderr an exec wrapper sent in its exit marker.
type Stderr = Arc<std::sync::OnceLock<Vec<u8>>>;

/// The command's output after the wrapper's ready marker (`first`, then
/// `rest`), without the exit marker, which sets the exit code and stderr of
/// `ended` and ends it.
fn exit_stream(
    first: Vec<u8>,
    rest: SessionOutput,
    reader: ExitReader,
    ended: (ExitCode, Stderr),
) -> SessionOutput {
    let head = futures::stream::iter([Ok(Bytes::from(first))]);
    let all = head.chain(rest);
    let s = futures::stream::unfold(
        (all, reader, ended, false),
        |(mut all, mut reader, code, ended)| async move {
            if ended {
                return None;
            }
            loop {
                match all.next().await {
                    Some(Ok(chunk)) => {
                        let data = reader.feed(&chunk);
                        if let Some(c) = reader.code() {
                            tracing::debug!(code = c, "exec: the command's exit marker read");
                            let _ = code.0.set(c);
                            let _ = code.1.set(reader.stderr().to_vec());
                            return Some((Ok(Bytes::from(data)), (all, reader, code, true)));
                        }
                        if !data.is_empty() {
                            return Some((Ok(Bytes::from(data)), (all, reader, code, false)));
                        }
                    }
                    Some(Err(e)) => {
                        tracing::debug!(error = %e.message, "exec: the session broke");
                        return Some((Err(e), (all, reader, code, true)));
                    }
                    None => {
                        tracing::debug!("exec: the session ended without an exit marker");
                        let held = reader.finish();
                        return (!held.is_empty())
                            .then(|| (Ok(Bytes::from(held)), (all, reader, code, true)));
                    }
                }
            }
        },
    );
    Box::pin(s.filter(|r| futures::future::ready(!matches!(r, Ok(b) if b.is_empty()))))
}

/// A session on zun-wsproxy whose stdin goes straight to it (port-forward's
/// relay: always a TTY, Zun starts interactive execs with `tty=True`).
async fn connect(
    url: &str,
    container: &str,
    resize: Option<Resizer>,
) -> Result<Session, KubeletError> {
    let (tx, output) = open(url, container).await?;
    let input = tx
        .sink_map_err(|e| KubeletError::internal(format!("zun-wsproxy: {e}")))
        .with(|b: Bytes| async move { Ok::<_, KubeletError>(Message::Binary(b)) });
    Ok(Session {
        output,
        input: Box::pin(input),
        tty: true,
        resize,
        exit_code: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use openstack::container::ZunTop;

    #[test]
    fn cpu_from_ps_times() {
        let top = ZunTop {
            titles: vec!["PID".into(), "TIME".into()],
            processes: vec![vec!["10".into(), "3".into()], vec!["11".into(), "2".into()]],
        };
        assert_eq!(cpu_seconds(&top), Some(5.0));
        let bad = ZunTop {
            titles: vec!["PID".into()],
            processes: vec![],
        };
        assert_eq!(cpu_seconds(&bad), None);
    }

    #[test]
    fn a_session_dropped_before_output_names_the_likely_cause() {
        let e = session_error("Connection reset by peer", false);
        assert_eq!(e.status, 500);
        assert!(
            e.message.contains("before any output") && e.message.contains("docker_remote_api_url"),
            "{}",
            e.message
        );
        let later = session_error("Connection reset by peer", true);
        assert_eq!(later.message, "zun-wsproxy: Connection reset by peer");
    }

    #[tokio::test]
    async fn piped_stdin_written_in_small_pieces_goes_in_few_batches() {
        use base64::Engine as _;
        // What zun-wsproxy would get.
        let (ws_tx, ws_rx) = futures::channel::mpsc::unbounded::<Message>();
        let sink: WsSink = Box::pin(ws_tx.sink_map_err(|_| tungstenite::Error::ConnectionClosed));
        let mut input = input_task(sink, StdinEncoder::new(Mode::Pipe), OnClose::Eof);
        // kube-rs writes stdin in 1 KiB messages.
        let data: Vec<u8> = (0..1000 * 1024).map(|i| (i % 251) as u8).collect();
        for piece in data.chunks(1024) {
            input.send(Bytes::copy_from_slice(piece)).await.unwrap();
        }
        input.close().await.unwrap();
        let sent: Vec<Vec<u8>> = ws_rx
            .map(|m| m.into_data().to_vec())
            .collect::<Vec<_>>()
            .await;
        assert_eq!(
            sent.last().map(Vec::as_slice),
            Some(&b"\x04"[..]),
            "the end"
        );
        let batches = &sent[..sent.len() - 1];
        // Each batch costs the wrapper two processes: one per piece made
        // 1000 of them (before: as many batches as the channel was found
        // empty). Pieces pushed back to back gather into one; a stall of
        // the test process longer than the gathering window splits it.
        assert!(batches.len() <= 10, "{} batches", batches.len());
        let engine = base64::engine::general_purpose::STANDARD;
        let mut got = Vec::new();
        for b in batches {
            let mut lines = b.split(|&c| c == b'\n').filter(|l| !l.is_empty());
            let n: usize = std::str::from_utf8(lines.next().unwrap())
                .unwrap()
                .parse()
                .unwrap();
            let rest: Vec<&[u8]> = lines.collect();
            assert_eq!(rest.len(), n, "the count says the batch's lines");
            for l in rest {
                got.extend(engine.decode(l).unwrap());
            }
        }
        assert!(got == data, "byte for byte, in order");
    }

    #[tokio::test]
    async fn the_status_container_id_spares_the_list_unless_it_names_another_container() {
        use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus};
        use openstack::container::ZunContainerCreate;
        use openstack::fake::FakeZun;
        let zun = Arc::new(FakeZun::new());
        let k = ZunKubelet::new(zun.clone(), "n1".into());
        let create = |uid: &str, name: &str| {
            let mut labels = labels::ours("n1");
            labels.insert(labels::POD_UID.into(), uid.into());
            labels.insert(labels::CONTAINER.into(), "c".into());
            let zun = zun.clone();
            let req = ZunContainerCreate {
                name: name.into(),
                image: "busybox".into(),
                labels,
                ..Default::default()
            };
            async move { zun.create_container(&req).await.unwrap().uuid }
        };
        let mine = create("u1", "p1-c").await;
        let theirs = create("u2", "p2-c").await;
        let pod = |id: &str| Pod {
            metadata: kube::api::ObjectMeta {
                uid: Some("u1".into()),
                ..Default::default()
            },
            status: Some(PodStatus {
                container_statuses: Some(vec![ContainerStatus {
                    name: "c".into(),
                    container_id: Some(format!("zun://{id}")),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(k.find(&pod(&mine), "c").await.unwrap().uuid, mine);
        assert_eq!(zun.calls("list_containers"), 0, "one GET, no list");
        // A status naming another pod's container (stale, or written by someone else) is not
        // trusted, nor one naming a container that is gone: the labels decide.
        assert_eq!(k.find(&pod(&theirs), "c").await.unwrap().uuid, mine);
        assert_eq!(k.find(&pod("gone"), "c").await.unwrap().uuid, mine);
        assert_eq!(zun.calls("list_containers"), 2);
    }

    #[test]
    fn zun_times_parse() {
        assert!(parse_zun_time("2026-12-01T05:00:00.000000").is_some());
        assert!(parse_zun_time("2026-12-01T05:00:00+00:00").is_some());
    }
}
