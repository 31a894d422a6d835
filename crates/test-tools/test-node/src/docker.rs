//! A small client of the Docker Engine API on its unix socket: the calls the node makes
//! (containers, exec, networks, images), JSON in and out.
//!
//! Why not `bollard`: the node needs a dozen endpoints, and the workspace already has hyper 1;
//! one HTTP/1.1 connection per call over the unix socket keeps the client a page long and
//! adds no dependency tree to a workspace built on two shared cores.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

/// API version asked for (Docker 20.10 and later serve it).
const API: &str = "/v1.41";

/// A Docker API failure.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    /// The socket could not be reached or the connection broke.
    #[error("docker engine at {socket}: {what}")]
    Io {
        /// The socket.
        socket: String,
        /// What failed.
        what: String,
    },
    /// The engine answered with an error status.
    #[error("docker {method} {path}: {status}: {message}")]
    Status {
        /// HTTP method.
        method: String,
        /// Path (no query).
        path: String,
        /// HTTP status.
        status: u16,
        /// The engine's message.
        message: String,
    },
}

impl DockerError {
    /// The HTTP status, if the engine answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            DockerError::Status { status, .. } => Some(*status),
            DockerError::Io { .. } => None,
        }
    }
}

/// A Docker engine on a unix socket.
#[derive(Clone, Debug)]
pub struct Docker {
    socket: PathBuf,
}

/// `DOCKER_HOST` (`unix:///path`) or a bare path → the socket path.
pub fn socket_path(host: &str) -> Result<PathBuf, String> {
    match host.strip_prefix("unix://") {
        Some(p) if !p.is_empty() => Ok(PathBuf::from(p)),
        Some(_) => Err(format!("DOCKER_HOST {host:?} names no socket path")),
        None if host.starts_with('/') => Ok(PathBuf::from(host)),
        None => Err(format!(
            "DOCKER_HOST {host:?}: only unix sockets are supported (unix:///path/docker.sock)"
        )),
    }
}

fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Docker {
    /// The engine listening on `socket`.
    pub fn new(socket: impl AsRef<Path>) -> Self {
        Self {
            socket: socket.as_ref().to_path_buf(),
        }
    }

    fn io(&self, what: impl std::fmt::Display) -> DockerError {
        DockerError::Io {
            socket: self.socket.display().to_string(),
            what: what.to_string(),
        }
    }

    /// One call: `(status, body)`; error statuses become [`DockerError::Status`].
    async fn call(
        &self,
        method: &str,
        path_q: &str,
        body: Option<(&str, Vec<u8>)>,
        timeout: Duration,
    ) -> Result<Bytes, DockerError> {
        let fut = async {
            let stream = tokio::net::UnixStream::connect(&self.socket)
                .await
                .map_err(|e| self.io(format!("connecting: {e}")))?;
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| self.io(format!("handshake: {e}")))?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            let mut req = http::Request::builder()
                .method(method)
                .uri(format!("{API}{path_q}"))
                .header("host", "docker");
            let payload = match body {
                Some((ct, b)) => {
                    req = req.header("content-type", ct);
                    b
                }
                None => Vec::new(),
            };
            let req = req
                .body(Full::new(Bytes::from(payload)))
                .map_err(|e| self.io(format!("request: {e}")))?;
            let resp = sender
                .send_request(req)
                .await
                .map_err(|e| self.io(format!("{method} {path_q}: {e}")))?;
            let status = resp.status().as_u16();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| self.io(format!("{method} {path_q}: reading the answer: {e}")))?
                .to_bytes();
            if status >= 300 && status != 304 {
                let message = serde_json::from_slice::<Value>(&bytes)
                    .ok()
                    .and_then(|v| v["message"].as_str().map(str::to_string))
                    .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned());
                return Err(DockerError::Status {
                    method: method.into(),
                    path: path_q.split('?').next().unwrap_or(path_q).into(),
                    status,
                    message,
                });
            }
            Ok(bytes)
        };
        tokio::time::timeout(timeout, fut)
            .await
            .map_err(|_| self.io(format!("{method} {path_q}: no answer within {timeout:?}")))?
    }

    async fn json(
        &self,
        method: &str,
        path_q: &str,
        body: Option<&Value>,
    ) -> Result<Value, DockerError> {
        let b = body.map(|v| ("application/json", v.to_string().into_bytes()));
        let bytes = self
            .call(method, path_q, b, Duration::from_secs(60))
            .await?;
        if bytes.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| self.io(format!("{method} {path_q}: the answer is not JSON: {e}")))
    }

    /// `GET /_ping`.
    pub async fn ping(&self) -> Result<(), DockerError> {
        self.call("GET", "/_ping", None, Duration::from_secs(10))
            .await
            .map(|_| ())
    }

    /// `GET /info`.
    pub async fn info(&self) -> Result<Value, DockerError> {
        self.json("GET", "/info", None).await
    }

    /// `GET /images/{name}/json`; `None` if the image is not present.
    pub async fn image(&self, name: &str) -> Result<Option<Value>, DockerError> {
        match self
            .json("GET", &format!("/images/{}/json", enc(name)), None)
            .await
        {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.status() == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `POST /images/create` (a pull), waiting for it to end.
    pub async fn pull(&self, name: &str) -> Result<(), DockerError> {
        let (repo, tag) = match name.rsplit_once(':').filter(|(_, t)| !t.contains('/')) {
            Some((r, t)) => (r, t),
            None => (name, "latest"),
        };
        let bytes = self
            .call(
                "POST",
                &format!("/images/create?fromImage={}&tag={}", enc(repo), enc(tag)),
                None,
                Duration::from_secs(600),
            )
            .await?;
        // The answer is a stream of JSON progress lines; a failure is one with `error`.
        for line in bytes.split(|b| *b == b'\n') {
            if let Ok(v) = serde_json::from_slice::<Value>(line)
                && let Some(e) = v["error"].as_str()
            {
                return Err(DockerError::Status {
                    method: "POST".into(),
                    path: "/images/create".into(),
                    status: 500,
                    message: e.to_string(),
                });
            }
        }
        Ok(())
    }

    /// `GET /containers/json?all=1` with a label filter (`key=value`).
    pub async fn list(&self, label: &str) -> Result<Vec<Value>, DockerError> {
        let filters = json!({ "label": [label] }).to_string();
        let v = self
            .json(
                "GET",
                &format!("/containers/json?all=1&filters={}", enc(&filters)),
                None,
            )
            .await?;
        Ok(v.as_array().cloned().unwrap_or_default())
    }

    /// `GET /containers/{id}/json`; `None` if it is gone.
    pub async fn inspect(&self, id: &str) -> Result<Option<Value>, DockerError> {
        match self
            .json("GET", &format!("/containers/{}/json", enc(id)), None)
            .await
        {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.status() == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `POST /containers/create?name=`: the new container's id.
    pub async fn create(&self, name: &str, body: &Value) -> Result<String, DockerError> {
        let v = self
            .json(
                "POST",
                &format!("/containers/create?name={}", enc(name)),
                Some(body),
            )
            .await?;
        v["Id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| self.io(format!("create {name}: no Id in the answer")))
    }

    /// `POST /containers/{id}/start` (a started container is fine).
    pub async fn start(&self, id: &str) -> Result<(), DockerError> {
        self.json("POST", &format!("/containers/{}/start", enc(id)), None)
            .await
            .map(|_| ())
    }

    /// `POST /containers/{id}/stop?t=`: SIGTERM, SIGKILL after `grace_s`.
    pub async fn stop(&self, id: &str, grace_s: u64) -> Result<(), DockerError> {
        let b = self
            .call(
                "POST",
                &format!("/containers/{}/stop?t={grace_s}", enc(id)),
                None,
                Duration::from_secs(grace_s + 30),
            )
            .await;
        match b {
            Ok(_) => Ok(()),
            Err(e) if e.status() == Some(404) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `DELETE /containers/{id}?force=1&v=1` (a missing container is fine).
    pub async fn remove(&self, id: &str) -> Result<(), DockerError> {
        match self
            .json(
                "DELETE",
                &format!("/containers/{}?force=1&v=1", enc(id)),
                None,
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.status() == Some(404) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The last `tail` lines of a container's output (stdout and stderr, demultiplexed).
    pub async fn logs_tail(&self, id: &str, tail: usize) -> Result<String, DockerError> {
        let b = self
            .call(
                "GET",
                &format!("/containers/{}/logs?stdout=1&stderr=1&tail={tail}", enc(id)),
                None,
                Duration::from_secs(30),
            )
            .await?;
        Ok(String::from_utf8_lossy(&demux(&b)).into_owned())
    }

    /// Runs `argv` in a running container; `(exit code, output)`, or an error when it does
    /// not end within `timeout`.
    pub async fn exec(
        &self,
        id: &str,
        argv: &[String],
        timeout: Duration,
    ) -> Result<(i64, String), DockerError> {
        let v = self
            .json(
                "POST",
                &format!("/containers/{}/exec", enc(id)),
                Some(&json!({ "Cmd": argv, "AttachStdout": true, "AttachStderr": true })),
            )
            .await?;
        let exec_id = v["Id"]
            .as_str()
            .ok_or_else(|| self.io("exec: no Id in the answer"))?
            .to_string();
        let out = self
            .call(
                "POST",
                &format!("/exec/{}/start", enc(&exec_id)),
                Some((
                    "application/json",
                    json!({"Detach": false, "Tty": false})
                        .to_string()
                        .into_bytes(),
                )),
                timeout,
            )
            .await?;
        let st = self
            .json("GET", &format!("/exec/{}/json", enc(&exec_id)), None)
            .await?;
        let code = st["ExitCode"].as_i64().unwrap_or(-1);
        Ok((code, String::from_utf8_lossy(&demux(&out)).into_owned()))
    }

    /// `GET /networks/{name}`; `None` if it does not exist.
    pub async fn network(&self, name: &str) -> Result<Option<Value>, DockerError> {
        match self
            .json("GET", &format!("/networks/{}", enc(name)), None)
            .await
        {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.status() == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `POST /networks/create`.
    pub async fn create_network(&self, body: &Value) -> Result<(), DockerError> {
        self.json("POST", "/networks/create", Some(body))
            .await
            .map(|_| ())
    }
}

/// Docker's multiplexed stream (8-byte frame headers) → the bytes; a raw stream (a TTY) is
/// returned as it is.
pub fn demux(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i + 8 <= b.len() {
        if !matches!(b[i], 0..=2) || b[i + 1..i + 4] != [0, 0, 0] {
            return b.to_vec();
        }
        let n = u32::from_be_bytes([b[i + 4], b[i + 5], b[i + 6], b[i + 7]]) as usize;
        let end = (i + 8 + n).min(b.len());
        out.extend_from_slice(&b[i + 8..end]);
        i = end;
    }
    if i < b.len() && out.is_empty() {
        return b.to_vec();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_paths() {
        assert_eq!(
            socket_path("unix:///run/d.sock").unwrap(),
            PathBuf::from("/run/d.sock")
        );
        assert_eq!(socket_path("/x.sock").unwrap(), PathBuf::from("/x.sock"));
        assert!(socket_path("tcp://127.0.0.1:2375").is_err());
        assert!(socket_path("unix://").is_err());
    }

    #[test]
    fn demultiplexes_frames() {
        let mut b = vec![1, 0, 0, 0, 0, 0, 0, 3];
        b.extend_from_slice(b"abc");
        b.extend_from_slice(&[2, 0, 0, 0, 0, 0, 0, 2]);
        b.extend_from_slice(b"de");
        assert_eq!(demux(&b), b"abcde");
        assert_eq!(demux(b"plain text"), b"plain text");
    }

    #[test]
    fn encodes_query_values() {
        assert_eq!(enc("a b/c:d"), "a%20b%2Fc%3Ad");
    }
}
