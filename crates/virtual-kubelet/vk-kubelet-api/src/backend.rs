//! What the kubelet API needs from the node's backend (provider-agnostic):
//! the pods bound to this node, and per container logs, exec, attach and
//! resource samples.

use std::pin::Pin;

use async_trait::async_trait;
use bytes::Bytes;
use futures::{Sink, Stream};
use k8s_openapi::api::core::v1::Pod;

use crate::query::LogQuery;
use crate::summary::PodSample;

/// An error with the HTTP status and message the kubelet would give.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct KubeletError {
    /// HTTP status.
    pub status: u16,
    /// Message shown to the user (kubectl prints it after "Error from server").
    pub message: String,
}

impl KubeletError {
    /// 400.
    pub fn bad_request(m: impl Into<String>) -> Self {
        Self {
            status: 400,
            message: m.into(),
        }
    }
    /// 404.
    pub fn not_found(m: impl Into<String>) -> Self {
        Self {
            status: 404,
            message: m.into(),
        }
    }
    /// 500.
    pub fn internal(m: impl Into<String>) -> Self {
        Self {
            status: 500,
            message: m.into(),
        }
    }
    /// 503 (the backend cannot be reached).
    pub fn unavailable(m: impl Into<String>) -> Self {
        Self {
            status: 503,
            message: m.into(),
        }
    }
}

/// The pods bound to this node.
#[async_trait]
pub trait Pods: Send + Sync + 'static {
    /// The pod, if it exists and is bound to this node.
    async fn get(&self, namespace: &str, name: &str) -> Result<Option<Pod>, KubeletError>;
    /// All pods bound to this node.
    async fn list(&self) -> Result<Vec<Pod>, KubeletError>;
}

/// The result of a command run to completion.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecResult {
    /// What it wrote on stdout (and stderr, when the backend merges them).
    pub stdout: Vec<u8>,
    /// What it wrote on stderr, if the backend separates it.
    pub stderr: Vec<u8>,
    /// Its exit code, if known.
    pub exit_code: Option<i32>,
}

/// Bytes from a live session (a TTY: stdout and stderr are one stream).
pub type SessionOutput = Pin<Box<dyn Stream<Item = Result<Bytes, KubeletError>> + Send>>;
/// Bytes to a live session's stdin. Closing it is the end of stdin: the
/// backend makes the process see it (a pipe closed, a TTY's Ctrl-D) without
/// ending the session, whose output still comes.
pub type SessionInput = Pin<Box<dyn Sink<Bytes, Error = KubeletError> + Send>>;

/// A session's exit code, set by the backend before its output ends (left
/// unset when the backend cannot know it).
pub type ExitCode = std::sync::Arc<std::sync::OnceLock<i32>>;

/// Resizes a session's terminal to `(width, height)` (the kubelet's
/// `TerminalSize`); answers once the backend has applied it.
pub type Resizer = std::sync::Arc<
    dyn Fn(u16, u16) -> futures::future::BoxFuture<'static, Result<(), KubeletError>> + Send + Sync,
>;

/// An interactive session (exec with stdin, attach, or a forwarded port's
/// connection).
pub struct Session {
    /// The process's output.
    pub output: SessionOutput,
    /// Its stdin.
    pub input: SessionInput,
    /// Whether the session is a TTY (stdout and stderr are one stream).
    pub tty: bool,
    /// How to resize its terminal, if it has one the backend can resize.
    pub resize: Option<Resizer>,
    /// The process's exit code, once its output has ended.
    pub exit_code: Option<ExitCode>,
}

/// Per-container operations of the backend. `pod` is bound to this node and
/// `container` is one of its spec's containers (the server checks both).
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// The container's logs as text (one line per `\n`), with `tailLines`,
    /// `timestamps` and `since` applied where the backend can; the server
    /// applies `limitBytes`.
    async fn logs(&self, pod: &Pod, container: &str, q: &LogQuery) -> Result<String, KubeletError>;
    /// Run a command to completion.
    async fn exec(
        &self,
        pod: &Pod,
        container: &str,
        command: &[String],
    ) -> Result<ExecResult, KubeletError>;
    /// Start an interactive command.
    async fn exec_interactive(
        &self,
        pod: &Pod,
        container: &str,
        command: &[String],
        tty: bool,
    ) -> Result<Session, KubeletError>;
    /// Attach to the container's main process.
    async fn attach(&self, pod: &Pod, container: &str) -> Result<Session, KubeletError>;
    /// Resource samples of the running containers of `pods`.
    async fn stats(&self, pods: &[Pod]) -> Result<Vec<PodSample>, KubeletError>;
    /// The logs of the container's previous run (`previous=true`), as
    /// [`Backend::logs`] gives them; `None` when no earlier run is kept.
    async fn previous_logs(
        &self,
        pod: &Pod,
        container: &str,
        q: &LogQuery,
    ) -> Result<Option<String>, KubeletError> {
        let _ = (pod, container, q);
        Ok(None)
    }

    /// A TCP connection to `port` on the pod's localhost, as the kubelet's
    /// port-forward makes it inside the pod's network namespace: `output` is
    /// what the pod sends and ends when it closes the connection, `input`
    /// is what the client sends. Backends without one refuse with 501.
    async fn port_forward(&self, pod: &Pod, port: u16) -> Result<Session, KubeletError> {
        let _ = (pod, port);
        Err(KubeletError {
            status: 501,
            message: "port forwarding is not supported by this node".into(),
        })
    }
}
