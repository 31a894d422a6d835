//! MariaDB/MySQL: the client/server handshake, TLS through `SSLRequest`, and authentication.
//!
//! Written against the protocol documentation rather than pulling a full SQL driver: the check
//! needs only the handshake, and a driver would cost minutes of build for a few hundred bytes on
//! the wire.

use std::sync::Arc;

use aws_lc_rs::digest;
use rustls::ClientConfig;
use secrecy::ExposeSecret;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::net::{self, io_failure};
use crate::steps::{Failure, Stage, Steps};
use crate::{Target, reason};

const CLIENT_LONG_PASSWORD: u32 = 1;
const CLIENT_CONNECT_WITH_DB: u32 = 8;
const CLIENT_PROTOCOL_41: u32 = 0x200;
const CLIENT_SSL: u32 = 0x800;
const CLIENT_TRANSACTIONS: u32 = 0x2000;
const CLIENT_SECURE_CONNECTION: u32 = 0x8000;
const CLIENT_PLUGIN_AUTH: u32 = 0x8_0000;
const MAX_PACKET: u32 = 16 * 1024 * 1024;
/// utf8mb4_general_ci
const CHARSET: u8 = 45;

/// The server's first packet.
struct Greeting {
    version: String,
    capabilities: u32,
    scramble: Vec<u8>,
    plugin: String,
}

/// Packet framing over any stream, with the sequence number the protocol wants.
struct Packets<S> {
    s: S,
    seq: u8,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Packets<S> {
    async fn read(&mut self, stage: Stage, doing: &str) -> Result<Vec<u8>, Failure> {
        let mut head = [0u8; 4];
        self.s
            .read_exact(&mut head)
            .await
            .map_err(|e| io_failure(stage, doing, &e))?;
        let len = u32::from_le_bytes([head[0], head[1], head[2], 0]) as usize;
        self.seq = head[3].wrapping_add(1);
        let mut body = vec![0u8; len];
        self.s
            .read_exact(&mut body)
            .await
            .map_err(|e| io_failure(stage, doing, &e))?;
        Ok(body)
    }

    async fn write(&mut self, stage: Stage, doing: &str, body: &[u8]) -> Result<(), Failure> {
        let len = (body.len() as u32).to_le_bytes();
        let mut p = Vec::with_capacity(body.len() + 4);
        p.extend_from_slice(&[len[0], len[1], len[2], self.seq]);
        p.extend_from_slice(body);
        self.seq = self.seq.wrapping_add(1);
        self.s
            .write_all(&p)
            .await
            .map_err(|e| io_failure(stage, doing, &e))?;
        self.s
            .flush()
            .await
            .map_err(|e| io_failure(stage, doing, &e))
    }
}

/// Reachable when the server greets us; TLS when configured; Authenticated when it accepts the
/// user (and opens the database, if one is named).
pub(crate) async fn probe(
    tcp: TcpStream,
    host: &str,
    target: &Target,
    tls: Option<&Result<Arc<ClientConfig>, String>>,
    steps: &mut Steps,
) -> Result<(), Failure> {
    let mut p = Packets { s: tcp, seq: 0 };
    let first = p
        .read(Stage::Reachable, "waiting for the server greeting")
        .await?;
    if first.first() == Some(&0xff) {
        let (code, msg) = parse_err(&first);
        return Err(Failure::new(
            Stage::Reachable,
            reason::PROTOCOL_ERROR,
            format!("the server refused the connection before the handshake: {msg} (error {code})"),
        ));
    }
    let g = parse_greeting(&first).ok_or_else(|| {
        Failure::new(
            Stage::Reachable,
            reason::PROTOCOL_ERROR,
            "the server did not send a MySQL protocol 10 greeting (is this a MariaDB/MySQL port?)",
        )
    })?;
    let version = g
        .version
        .strip_prefix("5.5.5-")
        .unwrap_or(&g.version)
        .to_string();
    steps.pass(Stage::Reachable, format!("server {version} answered"));

    let db = target.extra.get("database").filter(|d| !d.is_empty());
    let mut caps = CLIENT_LONG_PASSWORD
        | CLIENT_PROTOCOL_41
        | CLIENT_TRANSACTIONS
        | CLIENT_SECURE_CONNECTION
        | CLIENT_PLUGIN_AUTH;
    if db.is_some() {
        caps |= CLIENT_CONNECT_WITH_DB;
    }
    let Some(user) = target.username.as_deref().filter(|u| !u.is_empty()) else {
        return Err(Failure::new(
            Stage::Auth,
            reason::CREDENTIALS_REQUIRED,
            "no database user given",
        ));
    };
    let password = target
        .password
        .as_ref()
        .map(|p| p.expose_secret().as_bytes().to_vec())
        .unwrap_or_default();

    match tls {
        None => {
            let io = Packets { s: p.s, seq: p.seq };
            authenticate(io, &g, caps, user, &password, db, false, steps).await
        }
        Some(config) => {
            let config = config
                .as_ref()
                .map_err(|m| Failure::new(Stage::Tls, reason::INVALID_TARGET, m.clone()))?;
            if g.capabilities & CLIENT_SSL == 0 {
                return Err(Failure::new(
                    Stage::Tls,
                    reason::TLS_NOT_OFFERED,
                    "TLS is configured but the server does not offer it (no ssl in its capabilities)",
                ));
            }
            caps |= CLIENT_SSL;
            let mut req = Vec::with_capacity(32);
            req.extend_from_slice(&caps.to_le_bytes());
            req.extend_from_slice(&MAX_PACKET.to_le_bytes());
            req.push(CHARSET);
            req.extend_from_slice(&[0u8; 23]);
            p.write(Stage::Tls, "sending the TLS request", &req).await?;
            let seq = p.seq;
            let s = net::handshake(p.s, config.clone(), host).await?;
            steps.pass(Stage::Tls, net::describe(&s, target.tls.as_ref()));
            let io = Packets { s, seq };
            authenticate(io, &g, caps, user, &password, db, true, steps).await
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn authenticate<S: AsyncRead + AsyncWrite + Unpin>(
    mut p: Packets<S>,
    g: &Greeting,
    caps: u32,
    user: &str,
    password: &[u8],
    db: Option<&String>,
    secure: bool,
    steps: &mut Steps,
) -> Result<(), Failure> {
    let mut plugin = g.plugin.clone();
    let response = scramble_for(&plugin, password, &g.scramble, secure).unwrap_or_default();
    let mut msg = Vec::new();
    msg.extend_from_slice(&caps.to_le_bytes());
    msg.extend_from_slice(&MAX_PACKET.to_le_bytes());
    msg.push(CHARSET);
    msg.extend_from_slice(&[0u8; 23]);
    msg.extend_from_slice(user.as_bytes());
    msg.push(0);
    msg.push(response.len() as u8);
    msg.extend_from_slice(&response);
    if let Some(db) = db {
        msg.extend_from_slice(db.as_bytes());
        msg.push(0);
    }
    msg.extend_from_slice(plugin.as_bytes());
    msg.push(0);
    let doing = "logging in";
    p.write(Stage::Auth, doing, &msg).await?;
    // OK, ERR, an auth switch, or caching_sha2's fast/full-auth markers.
    for _ in 0..4 {
        let r = p.read(Stage::Auth, doing).await?;
        match r.first() {
            Some(0x00) => {
                // COM_QUIT; the answer does not matter.
                p.seq = 0;
                let _ = p.write(Stage::Auth, "quitting", &[0x01]).await;
                let on = db
                    .map(|d| format!(", database {d} opened"))
                    .unwrap_or_default();
                steps.pass(Stage::Auth, format!("user {user} logged in{on}"));
                return Ok(());
            }
            Some(0xff) => return Err(login_error(&r, user, db)),
            Some(0xfe) => {
                let rest = &r[1..];
                let nul = rest.iter().position(|b| *b == 0).unwrap_or(rest.len());
                plugin = String::from_utf8_lossy(&rest[..nul]).into_owned();
                let data = rest.get(nul + 1..).unwrap_or_default();
                let data = data.strip_suffix(&[0]).unwrap_or(data);
                let Some(resp) = scramble_for(&plugin, password, data, secure) else {
                    return Err(unsupported(&plugin, secure));
                };
                p.write(Stage::Auth, doing, &resp).await?;
            }
            Some(0x01) if plugin == "caching_sha2_password" => match r.get(1) {
                Some(3) => {} // fast auth succeeded; the OK packet follows
                Some(4) if secure => {
                    let mut clear = password.to_vec();
                    clear.push(0);
                    p.write(Stage::Auth, doing, &clear).await?;
                }
                _ => return Err(unsupported(&plugin, secure)),
            },
            _ => {
                return Err(Failure::new(
                    Stage::Auth,
                    reason::PROTOCOL_ERROR,
                    "unexpected answer to the login packet",
                ));
            }
        }
    }
    Err(Failure::new(
        Stage::Auth,
        reason::PROTOCOL_ERROR,
        "the login did not finish after several authentication exchanges",
    ))
}

fn unsupported(plugin: &str, secure: bool) -> Failure {
    let hint = if secure {
        String::new()
    } else {
        " over a plain connection (configure TLS)".to_string()
    };
    Failure::new(
        Stage::Auth,
        reason::UNSUPPORTED_AUTH,
        format!(
            "the server asks for authentication plugin {plugin}, which this check cannot answer{hint}"
        ),
    )
}

/// The auth response for `plugin`; `None` when this check cannot (or must not) answer it.
fn scramble_for(plugin: &str, password: &[u8], nonce: &[u8], secure: bool) -> Option<Vec<u8>> {
    if password.is_empty() {
        return Some(Vec::new());
    }
    match plugin {
        "mysql_native_password" => {
            let nonce = nonce.get(..20).unwrap_or(nonce);
            // SHA1(password) XOR SHA1(nonce + SHA1(SHA1(password)))
            let h1 = digest::digest(&digest::SHA1_FOR_LEGACY_USE_ONLY, password);
            let h2 = digest::digest(&digest::SHA1_FOR_LEGACY_USE_ONLY, h1.as_ref());
            let mut ctx = digest::Context::new(&digest::SHA1_FOR_LEGACY_USE_ONLY);
            ctx.update(nonce);
            ctx.update(h2.as_ref());
            let h3 = ctx.finish();
            Some(
                h1.as_ref()
                    .iter()
                    .zip(h3.as_ref())
                    .map(|(a, b)| a ^ b)
                    .collect(),
            )
        }
        "caching_sha2_password" => {
            let nonce = nonce.get(..20).unwrap_or(nonce);
            // SHA256(password) XOR SHA256(SHA256(SHA256(password)) + nonce)
            let h1 = digest::digest(&digest::SHA256, password);
            let h2 = digest::digest(&digest::SHA256, h1.as_ref());
            let mut ctx = digest::Context::new(&digest::SHA256);
            ctx.update(h2.as_ref());
            ctx.update(nonce);
            let h3 = ctx.finish();
            Some(
                h1.as_ref()
                    .iter()
                    .zip(h3.as_ref())
                    .map(|(a, b)| a ^ b)
                    .collect(),
            )
        }
        // Never send a clear password over plain TCP.
        "mysql_clear_password" if secure => {
            let mut v = password.to_vec();
            v.push(0);
            Some(v)
        }
        _ => None,
    }
}

fn parse_greeting(b: &[u8]) -> Option<Greeting> {
    if *b.first()? != 10 {
        return None;
    }
    let mut i = 1;
    let nul = b[i..].iter().position(|c| *c == 0)?;
    let version = String::from_utf8_lossy(&b[i..i + nul]).into_owned();
    i += nul + 1 + 4; // connection id
    let mut scramble = b.get(i..i + 8)?.to_vec();
    i += 8 + 1; // filler
    let cap_lo = u16::from_le_bytes([*b.get(i)?, *b.get(i + 1)?]) as u32;
    i += 2;
    let mut capabilities = cap_lo;
    let mut plugin = "mysql_native_password".to_string();
    if i < b.len() {
        i += 1 + 2; // charset, status
        let cap_hi = u16::from_le_bytes([*b.get(i)?, *b.get(i + 1)?]) as u32;
        capabilities |= cap_hi << 16;
        i += 2;
        let auth_len = *b.get(i)? as usize;
        i += 1 + 10; // reserved (MariaDB's extended capabilities live here)
        if capabilities & CLIENT_SECURE_CONNECTION != 0 {
            let n = auth_len.saturating_sub(8).max(13);
            let part = b.get(i..i + n)?;
            let part = part.strip_suffix(&[0]).unwrap_or(part);
            scramble.extend_from_slice(part);
            i += n;
        }
        if capabilities & CLIENT_PLUGIN_AUTH != 0 && i < b.len() {
            let rest = &b[i..];
            let end = rest.iter().position(|c| *c == 0).unwrap_or(rest.len());
            plugin = String::from_utf8_lossy(&rest[..end]).into_owned();
        }
    }
    Some(Greeting {
        version,
        capabilities,
        scramble,
        plugin,
    })
}

/// (error code, message) of an ERR packet.
fn parse_err(b: &[u8]) -> (u16, String) {
    let code = u16::from_le_bytes([
        b.get(1).copied().unwrap_or(0),
        b.get(2).copied().unwrap_or(0),
    ]);
    let mut msg = b.get(3..).unwrap_or_default();
    if msg.first() == Some(&b'#') {
        msg = msg.get(6..).unwrap_or_default();
    }
    (code, String::from_utf8_lossy(msg).into_owned())
}

fn login_error(b: &[u8], user: &str, db: Option<&String>) -> Failure {
    let (code, msg) = parse_err(b);
    // 1045 ER_ACCESS_DENIED_ERROR, 1698 ER_ACCESS_DENIED_NO_PASSWORD_ERROR, 1044
    // ER_DBACCESS_DENIED_ERROR, 1049 ER_BAD_DB_ERROR; the server's text names the user, never the
    // password.
    let r = match code {
        1045 | 1698 | 1251 => reason::ACCESS_DENIED,
        1044 => reason::NOT_PERMITTED,
        1049 => reason::NOT_FOUND,
        _ => reason::ACCESS_DENIED,
    };
    let what = match (code, db) {
        (1044 | 1049, Some(d)) => format!("user {user} cannot open database {d}"),
        _ => format!("login as user {user} refused"),
    };
    Failure::new(Stage::Auth, r, format!("{what}: {msg} (error {code})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_password_scramble_matches_the_documented_formula() {
        // The server checks SHA1(resp XOR SHA1(nonce + stored)) == stored, stored = SHA1(SHA1(pw)).
        let nonce = b"abcdefghijklmnopqrst";
        let resp = scramble_for("mysql_native_password", b"secret", nonce, false).unwrap();
        let stored = digest::digest(
            &digest::SHA1_FOR_LEGACY_USE_ONLY,
            digest::digest(&digest::SHA1_FOR_LEGACY_USE_ONLY, b"secret").as_ref(),
        );
        let mut ctx = digest::Context::new(&digest::SHA1_FOR_LEGACY_USE_ONLY);
        ctx.update(nonce);
        ctx.update(stored.as_ref());
        let mask = ctx.finish();
        let h1: Vec<u8> = resp.iter().zip(mask.as_ref()).map(|(a, b)| a ^ b).collect();
        assert_eq!(
            digest::digest(&digest::SHA1_FOR_LEGACY_USE_ONLY, &h1).as_ref(),
            stored.as_ref()
        );
    }

    #[test]
    fn clear_password_only_over_tls() {
        assert!(scramble_for("mysql_clear_password", b"pw", b"", false).is_none());
        assert_eq!(
            scramble_for("mysql_clear_password", b"pw", b"", true),
            Some(b"pw\0".to_vec())
        );
        assert!(scramble_for("client_ed25519", b"pw", b"", true).is_none());
    }

    #[test]
    fn error_packets_name_the_user_and_map_codes() {
        let mut pkt = vec![0xff, 0x15, 0x04, b'#'];
        pkt.extend_from_slice(
            b"28000Access denied for user 'ks'@'localhost' (using password: YES)",
        );
        let f = login_error(&pkt, "ks", None);
        assert_eq!(f.reason, reason::ACCESS_DENIED);
        assert!(
            f.message
                .starts_with("login as user ks refused: Access denied for user 'ks'")
        );
        assert!(f.message.ends_with("(error 1045)"));
        let mut pkt = vec![0xff, 0x19, 0x04, b'#'];
        pkt.extend_from_slice(b"42000Unknown database 'nope'");
        let f = login_error(&pkt, "ks", Some(&"nope".to_string()));
        assert_eq!(f.reason, reason::NOT_FOUND);
    }
}
