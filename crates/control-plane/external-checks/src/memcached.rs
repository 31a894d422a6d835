//! Memcached: `version` over the text protocol; with credentials, SASL PLAIN over the binary
//! protocol (what memcached's `-S` and oslo.cache's SASL mode speak) and then a binary `version`.

use secrecy::ExposeSecret;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::net::{Io, io_failure};
use crate::steps::{Failure, Stage, Steps};
use crate::{Target, reason};

const OP_VERSION: u8 = 0x0b;
const OP_SASL_AUTH: u8 = 0x21;
const STATUS_OK: u16 = 0;
const STATUS_AUTH_ERROR: u16 = 0x20;

/// Reachable when the server answers `version`; Authenticated by SASL when a user is given.
pub(crate) async fn probe(
    mut s: Box<dyn Io>,
    target: &Target,
    steps: &mut Steps,
) -> Result<(), Failure> {
    match target.username.as_deref().filter(|u| !u.is_empty()) {
        None => {
            let doing = "asking for the version";
            // Padded to a binary header's 24 bytes: a binary-only (SASL) server then reads a
            // whole header, sees a bad magic byte and closes at once instead of waiting for
            // more; a text-protocol server answers VERSION and, for the blank line, ERROR.
            s.write_all(b"version\r\n             \r\n")
                .await
                .map_err(|e| io_failure(Stage::Reachable, doing, &e))?;
            s.flush()
                .await
                .map_err(|e| io_failure(Stage::Reachable, doing, &e))?;
            let mut buf = Vec::with_capacity(64);
            while !buf.ends_with(b"\r\n") && buf.len() < 512 {
                let mut b = [0u8; 64];
                let n = s
                    .read(&mut b)
                    .await
                    .map_err(|e| io_failure(Stage::Reachable, doing, &e))?;
                if n == 0 {
                    // A SASL-only server closes text-protocol connections.
                    return Err(if buf.is_empty() {
                        Failure::new(
                            Stage::Auth,
                            reason::CREDENTIALS_REQUIRED,
                            "the server closed the connection at the first text command (SASL required? give a user and password)",
                        )
                    } else {
                        Failure::new(
                            Stage::Reachable,
                            reason::PROTOCOL_ERROR,
                            "the server closed the connection mid-answer",
                        )
                    });
                }
                buf.extend_from_slice(&b[..n]);
            }
            // Only the first line: the padding's blank line may already have its ERROR in the
            // buffer, and a status message must not carry a line break.
            let text = String::from_utf8_lossy(&buf);
            let line = text.lines().next().unwrap_or_default().trim().to_string();
            if let Some(v) = line.strip_prefix("VERSION ") {
                steps.pass(Stage::Reachable, format!("memcached {v} answered"));
                steps.pass(
                    Stage::Auth,
                    "no credentials configured; the server answers without them",
                );
                Ok(())
            } else if line.contains("unauthenticated") || line.contains("authentication") {
                steps.pass(Stage::Reachable, "memcached answered");
                Err(Failure::new(
                    Stage::Auth,
                    reason::CREDENTIALS_REQUIRED,
                    format!("the server wants authentication and no user is given ({line})"),
                ))
            } else {
                Err(Failure::new(
                    Stage::Reachable,
                    reason::PROTOCOL_ERROR,
                    format!(
                        "unexpected answer to `version` (is this a memcached port?): {}",
                        truncate(&line)
                    ),
                ))
            }
        }
        Some(user) => {
            let password = target
                .password
                .as_ref()
                .map(|p| p.expose_secret())
                .unwrap_or("");
            let mut value = Vec::with_capacity(user.len() + password.len() + 2);
            value.push(0);
            value.extend_from_slice(user.as_bytes());
            value.push(0);
            value.extend_from_slice(password.as_bytes());
            let doing = "authenticating (SASL PLAIN)";
            let (status, body) = request(
                &mut s,
                OP_SASL_AUTH,
                b"PLAIN",
                &value,
                Stage::Reachable,
                doing,
            )
            .await?;
            steps.pass(Stage::Reachable, "memcached answered the binary protocol");
            match status {
                STATUS_OK => {}
                STATUS_AUTH_ERROR => {
                    return Err(Failure::new(
                        Stage::Auth,
                        reason::ACCESS_DENIED,
                        format!(
                            "user {user}: SASL authentication failed ({})",
                            truncate(&body)
                        ),
                    ));
                }
                // 0x81 unknown command: a server without SASL.
                0x81 | 0x83 => {
                    return Err(Failure::new(
                        Stage::Auth,
                        reason::UNSUPPORTED_AUTH,
                        "credentials are given but the server does not support SASL (started without -S?)",
                    ));
                }
                other => {
                    return Err(Failure::new(
                        Stage::Auth,
                        reason::PROTOCOL_ERROR,
                        format!(
                            "SASL authentication answered status 0x{other:04x}: {}",
                            truncate(&body)
                        ),
                    ));
                }
            }
            let (status, body) = request(
                &mut s,
                OP_VERSION,
                b"",
                b"",
                Stage::Auth,
                "asking for the version",
            )
            .await?;
            if status != STATUS_OK {
                return Err(Failure::new(
                    Stage::Auth,
                    reason::ACCESS_DENIED,
                    format!(
                        "user {user}: authenticated but `version` answered status 0x{status:04x}"
                    ),
                ));
            }
            steps.pass(Stage::Reachable, format!("memcached {body} answered"));
            steps.pass(
                Stage::Auth,
                format!("user {user} authenticated (SASL PLAIN)"),
            );
            Ok(())
        }
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(120).collect()
}

/// One binary-protocol request; returns (status, value as text).
async fn request(
    s: &mut Box<dyn Io>,
    opcode: u8,
    key: &[u8],
    value: &[u8],
    stage: Stage,
    doing: &str,
) -> Result<(u16, String), Failure> {
    let mut p = Vec::with_capacity(24 + key.len() + value.len());
    p.extend_from_slice(&[0x80, opcode]);
    p.extend_from_slice(&(key.len() as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 0]); // extras length, data type, vbucket
    p.extend_from_slice(&((key.len() + value.len()) as u32).to_be_bytes());
    p.extend_from_slice(&[0u8; 12]); // opaque, cas
    p.extend_from_slice(key);
    p.extend_from_slice(value);
    s.write_all(&p)
        .await
        .map_err(|e| io_failure(stage, doing, &e))?;
    s.flush().await.map_err(|e| io_failure(stage, doing, &e))?;
    let mut head = [0u8; 24];
    s.read_exact(&mut head)
        .await
        .map_err(|e| io_failure(stage, doing, &e))?;
    if head[0] != 0x81 {
        return Err(Failure::new(
            stage,
            reason::PROTOCOL_ERROR,
            "the server did not answer in the memcached binary protocol (is this a memcached port?)",
        ));
    }
    let status = u16::from_be_bytes([head[6], head[7]]);
    let len = u32::from_be_bytes([head[8], head[9], head[10], head[11]]) as usize;
    if len > 1 << 20 {
        return Err(Failure::new(
            stage,
            reason::PROTOCOL_ERROR,
            "implausible memcached answer length",
        ));
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body)
        .await
        .map_err(|e| io_failure(stage, doing, &e))?;
    let skip = head[4] as usize + u16::from_be_bytes([head[2], head[3]]) as usize;
    Ok((
        status,
        String::from_utf8_lossy(body.get(skip..).unwrap_or_default()).into_owned(),
    ))
}
