//! Port-forward on Zun: a relay inside the pod's container.
//!
//! The kubelet connects to `localhost:<port>` inside the pod's network
//! namespace. Zun has no such call, and this node does not in general reach
//! the tenant network; a connection to the pod's IP would also miss servers
//! bound to `127.0.0.1`. So each forwarded connection is an interactive Zun
//! exec (through zun-wsproxy, as `kubectl exec -it`) of a relay:
//! [`relay_command`] puts the exec's TTY in raw mode (no echo, no line
//! editing, no CR/LF translation: bytes pass unchanged), prints a marker,
//! and runs `nc 127.0.0.1 <port>`. The image needs `sh`, `stty` and `nc`
//! (busybox has them). What the relay prints is read by [`Relay`] (pure):
//! nothing is sent to the relay before its marker (bytes typed before
//! `stty` would be echoed), and a connection `nc` cannot make is an error.

use bytes::Bytes;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use vk_kubelet_api::backend::{KubeletError, Session};

/// Printed by the relay once its TTY is raw, before it connects.
pub const READY: &[u8] = b"\x01vk-port-forward-ready\x02";
/// Printed instead when the image has no `nc`.
pub const NO_NC: &[u8] = b"\x01vk-port-forward-no-nc\x02";
/// Printed when `nc` fails (nothing listening, most often).
pub const FAILED: &[u8] = b"\x01vk-port-forward-failed\x02";
/// How much the relay may print before its marker.
const MAX_PREAMBLE: usize = 64 * 1024;

/// The relay's argv (run by Zun's interactive exec).
pub fn relay_command(port: u16) -> Vec<String> {
    let script = format!(
        "stty raw -echo 2>/dev/null; \
         command -v nc >/dev/null 2>&1 || {{ printf '\\001vk-port-forward-no-nc\\002'; exit 0; }}; \
         printf '\\001vk-port-forward-ready\\002'; \
         nc 127.0.0.1 {port} 2>/dev/null || printf '\\001vk-port-forward-failed\\002'"
    );
    vec!["sh".into(), "-c".into(), script]
}

/// The container whose network the port is reached in: the one declaring
/// it as a `containerPort`, else the first regular container (it holds the
/// pod's own Neutron port). Pod containers do not share localhost on Zun.
pub fn container_for_port(pod: &Pod, port: u16) -> Option<String> {
    let containers = &pod.spec.as_ref()?.containers;
    containers
        .iter()
        .find(|c| {
            c.ports
                .iter()
                .flatten()
                .any(|p| i64::from(p.container_port) == i64::from(port))
        })
        .or_else(|| containers.first())
        .map(|c| c.name.clone())
}

/// Why a relay did not give a connection.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RelayError {
    /// The image has no `nc`.
    #[error(
        "the container's image has no `nc`: port-forward on this node runs `sh`, `stty` and `nc` in the container (busybox has them)"
    )]
    NoNc,
    /// `nc` could not connect.
    #[error("nothing accepted the connection to 127.0.0.1:{0} in the container")]
    Refused(u16),
    /// The relay printed something else before its marker, or ended.
    #[error("the relay in the container did not start: {0:?}")]
    NotStarted(String),
}

/// What the relay printed, read chunk by chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Relay {
    /// Before the ready marker: what was printed so far.
    Starting(Vec<u8>),
    /// Connected (as far as the relay knows); whether data has flowed.
    Open {
        /// Bytes have been passed on.
        forwarded: bool,
    },
}

/// The result of one chunk.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fed {
    /// Bytes from the pod's connection to pass on.
    pub data: Vec<u8>,
    /// The relay reached its ready marker with this chunk.
    pub ready: bool,
    /// The connection has ended (what follows is not data).
    pub ended: bool,
}

impl Relay {
    /// A relay that has printed nothing yet.
    pub fn new() -> Self {
        Relay::Starting(Vec::new())
    }

    /// Reads the next chunk the relay printed, for `port`.
    pub fn feed(&mut self, chunk: &[u8], port: u16) -> Result<Fed, RelayError> {
        match self {
            Relay::Starting(buf) => {
                buf.extend_from_slice(chunk);
                if find(buf, NO_NC).is_some() {
                    return Err(RelayError::NoNc);
                }
                let Some(at) = find(buf, READY) else {
                    if buf.len() > MAX_PREAMBLE {
                        return Err(RelayError::NotStarted(preview(buf)));
                    }
                    return Ok(Fed::default());
                };
                let rest = buf.split_off(at + READY.len());
                *self = Relay::Open { forwarded: false };
                let mut fed = self.feed(&rest, port)?;
                fed.ready = true;
                Ok(fed)
            }
            Relay::Open { forwarded } => {
                // The failure marker is one `printf`: it ends the chunk it is in.
                if let Some(data) = chunk.strip_suffix(FAILED) {
                    if !*forwarded && data.is_empty() {
                        return Err(RelayError::Refused(port));
                    }
                    *forwarded |= !data.is_empty();
                    return Ok(Fed {
                        data: data.to_vec(),
                        ready: false,
                        ended: true,
                    });
                }
                *forwarded |= !chunk.is_empty();
                Ok(Fed {
                    data: chunk.to_vec(),
                    ready: false,
                    ended: false,
                })
            }
        }
    }

    /// The relay's output ended: an error if it never became ready.
    pub fn finish(&self) -> Result<(), RelayError> {
        match self {
            Relay::Starting(buf) => Err(RelayError::NotStarted(preview(buf))),
            Relay::Open { .. } => Ok(()),
        }
    }
}

impl Default for Relay {
    fn default() -> Self {
        Self::new()
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn preview(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    s.chars().take(200).collect()
}

/// Waits for the relay of `session` (a zun-wsproxy session running
/// [`relay_command`]) to be ready, then gives the connection: its output is
/// the pod's bytes and ends with the connection.
pub async fn relay(mut session: Session, port: u16) -> Result<Session, KubeletError> {
    let mut relay = Relay::new();
    let (first, ended) = loop {
        let Some(chunk) = session.output.next().await else {
            relay
                .finish()
                .map_err(|e| KubeletError::internal(e.to_string()))?;
            break (Vec::new(), true);
        };
        let fed = relay
            .feed(&chunk?, port)
            .map_err(|e| KubeletError::internal(e.to_string()))?;
        if fed.ready {
            break (fed.data, fed.ended);
        }
    };
    let head = futures::stream::iter((!first.is_empty()).then(|| Ok(Bytes::from(first))));
    let rest = if ended {
        futures::stream::empty().boxed()
    } else {
        futures::stream::unfold(
            (session.output, relay, false),
            move |(mut out, mut relay, done)| async move {
                if done {
                    return None;
                }
                let chunk = match out.next().await? {
                    Ok(c) => c,
                    Err(e) => return Some((Err(e), (out, relay, true))),
                };
                match relay.feed(&chunk, port) {
                    Ok(fed) => Some((Ok(Bytes::from(fed.data)), (out, relay, fed.ended))),
                    Err(e) => Some((
                        Err(KubeletError::internal(e.to_string())),
                        (out, relay, true),
                    )),
                }
            },
        )
        .boxed()
    };
    Ok(Session {
        output: Box::pin(head.chain(rest)),
        input: session.input,
        tty: false,
        resize: None,
        exit_code: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::SinkExt;
    use k8s_openapi::api::core::v1::{Container, ContainerPort, PodSpec};

    #[test]
    fn the_relay_command_prints_the_markers_it_is_read_by() {
        let argv = relay_command(8080);
        assert_eq!(argv[..2], ["sh".to_string(), "-c".to_string()]);
        let script = &argv[2];
        assert!(script.contains("nc 127.0.0.1 8080"), "{script}");
        assert!(script.starts_with("stty raw -echo"), "{script}");
        // printf's octal escapes are the markers' control bytes.
        for m in [READY, NO_NC, FAILED] {
            let text = String::from_utf8_lossy(m)
                .replace('\u{1}', "\\001")
                .replace('\u{2}', "\\002");
            assert!(script.contains(&text), "{text} in {script}");
        }
    }

    #[test]
    fn nothing_is_data_before_the_marker_and_everything_after() {
        let mut r = Relay::new();
        assert_eq!(r.feed(b"junk \x01vk-port-", 80), Ok(Fed::default()));
        let fed = r.feed(b"forward-ready\x02HTTP/1.0 200", 80).unwrap();
        assert_eq!(
            fed,
            Fed {
                data: b"HTTP/1.0 200".to_vec(),
                ready: true,
                ended: false
            }
        );
        // Control bytes and the like pass unchanged once open.
        let bin = [0u8, 1, 2, 255, b'\r', b'\n', 4];
        assert_eq!(r.feed(&bin, 80).unwrap().data, bin.to_vec());
        assert_eq!(r.finish(), Ok(()));
    }

    #[test]
    fn a_refused_connection_and_a_missing_nc_are_errors() {
        let mut r = Relay::new();
        r.feed(READY, 80).unwrap();
        assert_eq!(r.feed(FAILED, 80), Err(RelayError::Refused(80)));
        let mut split = Relay::new();
        let mut all = READY.to_vec();
        all.extend_from_slice(FAILED);
        assert_eq!(split.feed(&all, 81), Err(RelayError::Refused(81)));
        assert_eq!(Relay::new().feed(NO_NC, 80), Err(RelayError::NoNc));
        let mut silent = Relay::new();
        silent.feed(b"sh: not found", 80).unwrap();
        assert_eq!(
            silent.finish(),
            Err(RelayError::NotStarted("sh: not found".into()))
        );
        let mut chatty = Relay::new();
        assert!(matches!(
            chatty.feed(&vec![b'x'; MAX_PREAMBLE + 1], 80),
            Err(RelayError::NotStarted(_))
        ));
    }

    #[test]
    fn a_failure_after_data_ends_the_stream_without_the_marker() {
        let mut r = Relay::new();
        r.feed(READY, 80).unwrap();
        r.feed(b"partial", 80).unwrap();
        let mut tail = b"more".to_vec();
        tail.extend_from_slice(FAILED);
        assert_eq!(
            r.feed(&tail, 80),
            Ok(Fed {
                data: b"more".to_vec(),
                ready: false,
                ended: true
            })
        );
    }

    fn pod(containers: Vec<(&str, Vec<i32>)>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers: containers
                    .into_iter()
                    .map(|(n, ports)| Container {
                        name: n.into(),
                        ports: Some(
                            ports
                                .into_iter()
                                .map(|p| ContainerPort {
                                    container_port: p,
                                    ..Default::default()
                                })
                                .collect(),
                        ),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_port_is_reached_in_the_container_declaring_it() {
        let p = pod(vec![("app", vec![8080]), ("side", vec![9090])]);
        assert_eq!(container_for_port(&p, 9090).as_deref(), Some("side"));
        assert_eq!(container_for_port(&p, 8080).as_deref(), Some("app"));
        assert_eq!(container_for_port(&p, 1234).as_deref(), Some("app"));
        assert_eq!(container_for_port(&Pod::default(), 80), None);
    }

    #[tokio::test]
    async fn the_session_waits_for_the_marker_and_ends_with_the_connection() {
        let chunks: Vec<Result<Bytes, KubeletError>> = vec![
            Ok(Bytes::from_static(b"\x01vk-port-forward-re")),
            Ok(Bytes::from_static(b"ady\x02hello")),
            Ok(Bytes::from_static(b" world")),
        ];
        let sink =
            futures::sink::drain::<Bytes>().sink_map_err(|_| KubeletError::internal("drain"));
        let s = Session {
            output: Box::pin(futures::stream::iter(chunks)),
            input: Box::pin(sink),
            tty: true,
            resize: None,
            exit_code: None,
        };
        let s = relay(s, 80).await.unwrap();
        assert!(!s.tty);
        let got: Vec<_> = s.output.collect().await;
        let got: Vec<u8> = got.into_iter().flat_map(|b| b.unwrap().to_vec()).collect();
        assert_eq!(got, b"hello world");

        let refused: Vec<Result<Bytes, KubeletError>> = vec![
            Ok(Bytes::from_static(READY)),
            Ok(Bytes::from_static(FAILED)),
        ];
        let s = Session {
            output: Box::pin(futures::stream::iter(refused)),
            input: Box::pin(
                futures::sink::drain::<Bytes>().sink_map_err(|_| KubeletError::internal("d")),
            ),
            tty: true,
            resize: None,
            exit_code: None,
        };
        let s = relay(s, 80).await.unwrap();
        let got: Vec<_> = s.output.collect().await;
        assert_eq!(got.len(), 1);
        let e = got[0].clone().unwrap_err();
        assert!(e.message.contains("127.0.0.1:80"), "{}", e.message);
    }
}
