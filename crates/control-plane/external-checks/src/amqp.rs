//! RabbitMQ: an AMQP 0-9-1 connection with PLAIN authentication, opening the vhost.

use secrecy::ExposeSecret;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::net::{Io, io_failure};
use crate::steps::{Failure, Stage, Steps};
use crate::{Target, reason};

const FRAME_METHOD: u8 = 1;
const FRAME_HEARTBEAT: u8 = 8;
const FRAME_END: u8 = 0xce;
const CONNECTION: u16 = 10;
const START: u16 = 10;
const START_OK: u16 = 11;
const TUNE: u16 = 30;
const TUNE_OK: u16 = 31;
const OPEN: u16 = 40;
const OPEN_OK: u16 = 41;
const CLOSE: u16 = 50;
const CLOSE_OK: u16 = 51;

/// Reachable when the broker sends Connection.Start; Authenticated when the vhost opens.
pub(crate) async fn probe(
    mut s: Box<dyn Io>,
    target: &Target,
    steps: &mut Steps,
) -> Result<(), Failure> {
    let vhost = target.extra.get("vhost").map(String::as_str).unwrap_or("/");
    s.write_all(b"AMQP\x00\x00\x09\x01")
        .await
        .map_err(|e| io_failure(Stage::Reachable, "sending the AMQP protocol header", &e))?;
    let doing = "waiting for Connection.Start";
    let (class, method, args) = read_method(&mut s, Stage::Reachable, doing).await?;
    if (class, method) != (CONNECTION, START) {
        return Err(Failure::new(
            Stage::Reachable,
            reason::PROTOCOL_ERROR,
            format!("expected Connection.Start, got method {class}.{method}"),
        ));
    }
    let start = parse_start(&args).ok_or_else(|| {
        Failure::new(
            Stage::Reachable,
            reason::PROTOCOL_ERROR,
            "malformed Connection.Start",
        )
    })?;
    steps.pass(
        Stage::Reachable,
        format!("{} {} answered AMQP 0-9-1", start.product, start.version),
    );

    let Some(user) = target.username.as_deref().filter(|u| !u.is_empty()) else {
        return Err(Failure::new(
            Stage::Auth,
            reason::CREDENTIALS_REQUIRED,
            "no messaging user given",
        ));
    };
    if !start.mechanisms.split(' ').any(|m| m == "PLAIN") {
        return Err(Failure::new(
            Stage::Auth,
            reason::UNSUPPORTED_AUTH,
            format!(
                "the broker does not offer PLAIN authentication (offers: {})",
                start.mechanisms
            ),
        ));
    }
    let password = target
        .password
        .as_ref()
        .map(|p| p.expose_secret())
        .unwrap_or("");

    // Start-Ok: client properties asking for a Close (not a dropped socket) on refused login.
    let mut props = Vec::new();
    field_str(&mut props, "product", "openstack-operator external-checks");
    let mut caps = Vec::new();
    shortstr(&mut caps, "authentication_failure_close");
    caps.extend_from_slice(b"t\x01");
    shortstr(&mut props, "capabilities");
    props.push(b'F');
    longbytes(&mut props, &caps);
    let mut a = Vec::new();
    longbytes(&mut a, &props);
    shortstr(&mut a, "PLAIN");
    let mut response = Vec::with_capacity(user.len() + password.len() + 2);
    response.push(0);
    response.extend_from_slice(user.as_bytes());
    response.push(0);
    response.extend_from_slice(password.as_bytes());
    longbytes(&mut a, &response);
    shortstr(&mut a, "en_US");
    let doing = "logging in";
    write_method(&mut s, START_OK, &a, Stage::Auth, doing).await?;

    let (class, method, args) = match read_method(&mut s, Stage::Auth, doing).await {
        Ok(m) => m,
        Err(f) if f.reason == reason::PROTOCOL_ERROR && f.stage == Stage::Auth => {
            // Brokers that ignore authentication_failure_close just drop the socket.
            return Err(Failure::new(
                Stage::Auth,
                reason::ACCESS_DENIED,
                format!(
                    "user {user}: the broker closed the connection after the login ({})",
                    f.message
                ),
            ));
        }
        Err(f) => return Err(f),
    };
    match (class, method) {
        (CONNECTION, TUNE) => {}
        (CONNECTION, CLOSE) => {
            let (code, text) = parse_close(&args);
            let r = if code == 403 {
                reason::ACCESS_DENIED
            } else {
                reason::PROTOCOL_ERROR
            };
            return Err(Failure::new(
                Stage::Auth,
                r,
                format!("user {user}: {text} ({code})"),
            ));
        }
        _ => {
            return Err(Failure::new(
                Stage::Auth,
                reason::PROTOCOL_ERROR,
                format!("expected Connection.Tune, got method {class}.{method}"),
            ));
        }
    }
    let channel_max = u16::from_be_bytes([
        args.first().copied().unwrap_or(0),
        args.get(1).copied().unwrap_or(0),
    ]);
    let frame_max = args
        .get(2..6)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .unwrap_or(0);
    let frame_max = if frame_max == 0 {
        131_072
    } else {
        frame_max.min(131_072)
    };
    let mut t = Vec::new();
    t.extend_from_slice(&channel_max.to_be_bytes());
    t.extend_from_slice(&frame_max.to_be_bytes());
    t.extend_from_slice(&0u16.to_be_bytes()); // no heartbeats for a short check
    write_method(&mut s, TUNE_OK, &t, Stage::Auth, doing).await?;
    let mut o = Vec::new();
    shortstr(&mut o, vhost);
    shortstr(&mut o, "");
    o.push(0);
    let doing = "opening the vhost";
    write_method(&mut s, OPEN, &o, Stage::Auth, doing).await?;
    let (class, method, args) = read_method(&mut s, Stage::Auth, doing).await?;
    match (class, method) {
        (CONNECTION, OPEN_OK) => {}
        (CONNECTION, CLOSE) => {
            let (code, text) = parse_close(&args);
            let r = match code {
                530 if text.contains("not found") => reason::NOT_FOUND,
                530 => reason::NOT_PERMITTED,
                403 => reason::ACCESS_DENIED,
                _ => reason::PROTOCOL_ERROR,
            };
            return Err(Failure::new(
                Stage::Auth,
                r,
                format!("user {user} cannot open vhost {vhost}: {text} ({code})"),
            ));
        }
        _ => {
            return Err(Failure::new(
                Stage::Auth,
                reason::PROTOCOL_ERROR,
                format!("expected Connection.Open-Ok, got method {class}.{method}"),
            ));
        }
    }
    steps.pass(
        Stage::Auth,
        format!("user {user} logged in and opened vhost {vhost}"),
    );
    // A polite close; the check has passed whatever the broker answers.
    let mut c = Vec::new();
    c.extend_from_slice(&200u16.to_be_bytes());
    shortstr(&mut c, "check done");
    c.extend_from_slice(&[0, 0, 0, 0]);
    if write_method(&mut s, CLOSE, &c, Stage::Auth, "closing")
        .await
        .is_ok()
    {
        let _ = read_method(&mut s, Stage::Auth, "closing")
            .await
            .map(|(_, m, _)| m == CLOSE_OK);
    }
    Ok(())
}

struct Start {
    product: String,
    version: String,
    mechanisms: String,
}

fn parse_start(a: &[u8]) -> Option<Start> {
    let mut r = Reader { b: a, i: 2 }; // version-major, version-minor
    let props = r.longstr()?;
    let mut product = "AMQP broker".to_string();
    let mut version = String::new();
    let mut t = Reader { b: props, i: 0 };
    while t.i < t.b.len() {
        let name = String::from_utf8_lossy(t.shortstr()?).into_owned();
        let kind = t.u8()?;
        if kind == b'S' {
            let v = String::from_utf8_lossy(t.longstr()?).into_owned();
            match name.as_str() {
                "product" => product = v,
                "version" => version = v,
                _ => {}
            }
        } else {
            t.skip_value(kind)?;
        }
    }
    let mechanisms = String::from_utf8_lossy(r.longstr()?).into_owned();
    Some(Start {
        product,
        version,
        mechanisms,
    })
}

fn parse_close(a: &[u8]) -> (u16, String) {
    let mut r = Reader { b: a, i: 0 };
    let code = r.u16().unwrap_or(0);
    let text = r
        .shortstr()
        .map(|t| String::from_utf8_lossy(t).into_owned())
        .unwrap_or_default();
    (code, text)
}

struct Reader<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.i..self.i.checked_add(n)?)?;
        self.i += n;
        Some(s)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn shortstr(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()? as usize;
        self.take(n)
    }
    fn longstr(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    /// Skips one field value of type `kind` (RabbitMQ's field-table types).
    fn skip_value(&mut self, kind: u8) -> Option<()> {
        let n = match kind {
            b't' | b'b' | b'B' => 1,
            b's' | b'u' => 2,
            b'I' | b'i' | b'f' => 4,
            b'l' | b'd' | b'T' => 8,
            b'D' => 5,
            b'V' => 0,
            b'S' | b'x' | b'F' | b'A' => {
                self.longstr()?;
                return Some(());
            }
            _ => return None,
        };
        self.take(n).map(|_| ())
    }
}

fn shortstr(out: &mut Vec<u8>, s: &str) {
    let b = &s.as_bytes()[..s.len().min(255)];
    out.push(b.len() as u8);
    out.extend_from_slice(b);
}

fn longbytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_be_bytes());
    out.extend_from_slice(b);
}

fn field_str(out: &mut Vec<u8>, name: &str, value: &str) {
    shortstr(out, name);
    out.push(b'S');
    longbytes(out, value.as_bytes());
}

async fn write_method(
    s: &mut Box<dyn Io>,
    method: u16,
    args: &[u8],
    stage: Stage,
    doing: &str,
) -> Result<(), Failure> {
    let mut payload = Vec::with_capacity(args.len() + 4);
    payload.extend_from_slice(&CONNECTION.to_be_bytes());
    payload.extend_from_slice(&method.to_be_bytes());
    payload.extend_from_slice(args);
    let mut f = Vec::with_capacity(payload.len() + 8);
    f.push(FRAME_METHOD);
    f.extend_from_slice(&0u16.to_be_bytes());
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    f.extend_from_slice(&payload);
    f.push(FRAME_END);
    s.write_all(&f)
        .await
        .map_err(|e| io_failure(stage, doing, &e))?;
    s.flush().await.map_err(|e| io_failure(stage, doing, &e))
}

/// The next method frame on channel 0 as (class, method, arguments); heartbeats are skipped.
async fn read_method(
    s: &mut Box<dyn Io>,
    stage: Stage,
    doing: &str,
) -> Result<(u16, u16, Vec<u8>), Failure> {
    loop {
        let mut head = [0u8; 7];
        s.read_exact(&mut head)
            .await
            .map_err(|e| io_failure(stage, doing, &e))?;
        if &head == b"AMQP\x00\x00\x09" || head.starts_with(b"AMQP") {
            return Err(Failure::new(
                stage,
                reason::PROTOCOL_ERROR,
                "the broker refused our AMQP protocol version (0-9-1)",
            ));
        }
        let size = u32::from_be_bytes([head[3], head[4], head[5], head[6]]) as usize;
        if size > 1 << 20 {
            return Err(Failure::new(
                stage,
                reason::PROTOCOL_ERROR,
                "the server does not speak AMQP 0-9-1 (implausible frame size)",
            ));
        }
        let mut body = vec![0u8; size + 1];
        s.read_exact(&mut body)
            .await
            .map_err(|e| io_failure(stage, doing, &e))?;
        if body[size] != FRAME_END {
            return Err(Failure::new(
                stage,
                reason::PROTOCOL_ERROR,
                "malformed AMQP frame",
            ));
        }
        body.truncate(size);
        match head[0] {
            FRAME_HEARTBEAT => continue,
            FRAME_METHOD if body.len() >= 4 => {
                let class = u16::from_be_bytes([body[0], body[1]]);
                let method = u16::from_be_bytes([body[2], body[3]]);
                return Ok((class, method, body.split_off(4)));
            }
            t => {
                return Err(Failure::new(
                    stage,
                    reason::PROTOCOL_ERROR,
                    format!("unexpected AMQP frame type {t}"),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_start_yields_product_version_and_mechanisms() {
        let mut props = Vec::new();
        shortstr(&mut props, "capabilities");
        props.push(b'F');
        let mut caps = Vec::new();
        shortstr(&mut caps, "publisher_confirms");
        caps.extend_from_slice(b"t\x01");
        longbytes(&mut props, &caps);
        field_str(&mut props, "product", "RabbitMQ");
        field_str(&mut props, "version", "3.10.8");
        let mut a = vec![0, 9];
        longbytes(&mut a, &props);
        longbytes(&mut a, b"AMQPLAIN PLAIN");
        longbytes(&mut a, b"en_US");
        let s = parse_start(&a).unwrap();
        assert_eq!(
            (s.product.as_str(), s.version.as_str()),
            ("RabbitMQ", "3.10.8")
        );
        assert_eq!(s.mechanisms, "AMQPLAIN PLAIN");
        assert!(parse_start(&a[..a.len() - 12]).is_none());
    }

    #[test]
    fn close_carries_code_and_text() {
        let mut a = 403u16.to_be_bytes().to_vec();
        shortstr(&mut a, "ACCESS_REFUSED - Login was refused");
        a.extend_from_slice(&[0, 10, 0, 11]);
        assert_eq!(
            parse_close(&a),
            (403, "ACCESS_REFUSED - Login was refused".to_string())
        );
    }
}
