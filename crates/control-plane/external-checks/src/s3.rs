//! S3: SigV4-signed `ListBuckets` (and `HeadBucket` of a named bucket) over HTTP/1.1.
//!
//! Two requests on one connection need no HTTP client library: the request is a few header
//! lines, and the answer is read by its own framing (Content-Length or chunked).

use std::time::{SystemTime, UNIX_EPOCH};

use aws_lc_rs::{digest, hmac};
use secrecy::ExposeSecret;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::endpoint::Endpoint;
use crate::net::{Io, io_failure};
use crate::steps::{Failure, Stage, Steps};
use crate::{Target, reason};

const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// Reachable when the server answers HTTP; Authenticated when the signed request is accepted.
pub(crate) async fn probe(
    mut s: Box<dyn Io>,
    ep: &Endpoint,
    target: &Target,
    steps: &mut Steps,
    reopen: impl AsyncFnOnce() -> Result<Box<dyn Io>, Failure>,
) -> Result<(), Failure> {
    let (Some(key_id), Some(secret)) = (
        target.username.as_deref().filter(|u| !u.is_empty()),
        target.password.as_ref(),
    ) else {
        return Err(Failure::new(
            Stage::Auth,
            reason::CREDENTIALS_REQUIRED,
            "no S3 access key id and secret key given",
        ));
    };
    let region = target
        .extra
        .get("region")
        .map(String::as_str)
        .unwrap_or("us-east-1");
    let bucket = target.extra.get("bucket").filter(|b| !b.is_empty());
    let host = if (ep.tls_scheme == Some(true) && ep.port == 443)
        || (ep.tls_scheme == Some(false) && ep.port == 80)
    {
        if ep.host.contains(':') {
            format!("[{}]", ep.host)
        } else {
            ep.host.clone()
        }
    } else {
        ep.authority()
    };
    let signer = Signer {
        key_id,
        secret: secret.expose_secret(),
        region,
        host: &host,
        now: SystemTime::now(),
    };

    let list_path = format!("{}/", ep.path);
    let r = send(&mut s, &signer, "GET", &list_path, Stage::Reachable).await?;
    let server = r
        .header("server")
        .map(|v| format!(" ({v})"))
        .unwrap_or_default();
    steps.pass(Stage::Reachable, format!("HTTP server answered{server}"));
    let (code, message) = r.s3_error();
    match (r.status, code.as_str()) {
        (200, _) => {
            let n = r.body.matches("<Bucket>").count();
            if bucket.is_none() {
                steps.pass(
                    Stage::Auth,
                    format!("access key {key_id} accepted (ListBuckets: {n} buckets)"),
                );
                return Ok(());
            }
        }
        // Refused credentials, not a policy: name the key.
        (
            400 | 403,
            "InvalidAccessKeyId"
            | "SignatureDoesNotMatch"
            | "InvalidToken"
            | "ExpiredToken"
            | "RequestTimeTooSkewed",
        ) => {
            let hint = match code.as_str() {
                "InvalidAccessKeyId" => " (the server does not know this access key)",
                "SignatureDoesNotMatch" => " (wrong secret key)",
                "RequestTimeTooSkewed" => " (this machine's clock differs from the server's)",
                _ => "",
            };
            return Err(Failure::new(
                Stage::Auth,
                reason::ACCESS_DENIED,
                format!(
                    "access key {key_id} refused: {}{hint}",
                    with_message(&code, &message)
                ),
            ));
        }
        // A policy may forbid listing buckets but allow the one named: ask for that one.
        (403, _) if bucket.is_some() => {}
        (403, _) => {
            return Err(Failure::new(
                Stage::Auth,
                reason::ACCESS_DENIED,
                format!(
                    "access key {key_id} refused: {}",
                    with_message(if code.is_empty() { "HTTP 403" } else { &code }, &message)
                ),
            ));
        }
        (status, _) => {
            return Err(Failure::new(
                Stage::Reachable,
                reason::PROTOCOL_ERROR,
                format!(
                    "ListBuckets answered HTTP {status} {code} {message} (is this an S3 endpoint?)"
                ),
            ));
        }
    }
    let Some(bucket) = bucket else {
        return Ok(());
    };
    if r.header("connection")
        .is_some_and(|v| v.eq_ignore_ascii_case("close"))
    {
        s = reopen().await?;
    }
    let path = format!("{}/{}", ep.path, uri_encode(bucket, true));
    let r = send(&mut s, &signer, "HEAD", &path, Stage::Auth).await?;
    match r.status {
        200 => {
            steps.pass(
                Stage::Auth,
                format!("access key {key_id} accepted, bucket {bucket} accessible"),
            );
            Ok(())
        }
        403 => Err(Failure::new(
            Stage::Auth,
            reason::NOT_PERMITTED,
            format!("access key {key_id} may not access bucket {bucket} (HTTP 403)"),
        )),
        404 => Err(Failure::new(
            Stage::Auth,
            reason::NOT_FOUND,
            format!("bucket {bucket} does not exist (HTTP 404)"),
        )),
        301 => Err(Failure::new(
            Stage::Auth,
            reason::NOT_FOUND,
            format!("bucket {bucket} is in another region than {region} (HTTP 301)"),
        )),
        status => Err(Failure::new(
            Stage::Auth,
            reason::PROTOCOL_ERROR,
            format!("HeadBucket {bucket} answered HTTP {status}"),
        )),
    }
}

/// `Code: Message`, or just the code when the server sent no message.
fn with_message(code: &str, message: &str) -> String {
    if message.is_empty() {
        code.to_string()
    } else {
        format!("{code}: {message}")
    }
}

struct Signer<'a> {
    key_id: &'a str,
    secret: &'a str,
    region: &'a str,
    host: &'a str,
    now: SystemTime,
}

impl Signer<'_> {
    /// The request head of an empty-bodied request, signed with AWS Signature Version 4.
    fn request(&self, method: &str, path: &str, query: &[(&str, &str)]) -> String {
        let (date, stamp) = amz_time(self.now);
        let mut q: Vec<String> = query
            .iter()
            .map(|(k, v)| format!("{}={}", uri_encode(k, true), uri_encode(v, true)))
            .collect();
        q.sort();
        let q = q.join("&");
        let target = if q.is_empty() {
            uri_encode(path, false)
        } else {
            format!("{}?{q}", uri_encode(path, false))
        };
        let canonical = format!(
            "{method}\n{}\n{q}\nhost:{}\nx-amz-content-sha256:{EMPTY_SHA256}\nx-amz-date:{stamp}\n\nhost;x-amz-content-sha256;x-amz-date\n{EMPTY_SHA256}",
            uri_encode(path, false),
            self.host
        );
        let scope = format!("{date}/{}/s3/aws4_request", self.region);
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{}",
            hex(digest::digest(&digest::SHA256, canonical.as_bytes()).as_ref())
        );
        let mut key = format!("AWS4{}", self.secret).into_bytes();
        for part in [date.as_str(), self.region, "s3", "aws4_request"] {
            key = hmac_sha256(&key, part.as_bytes());
        }
        let signature = hex(&hmac_sha256(&key, to_sign.as_bytes()));
        format!(
            "{method} {target} HTTP/1.1\r\nHost: {}\r\nx-amz-content-sha256: {EMPTY_SHA256}\r\nx-amz-date: {stamp}\r\n\
             Authorization: AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature={signature}\r\n\
             User-Agent: openstack-operator-external-checks\r\nContent-Length: 0\r\n\r\n",
            self.host, self.key_id
        )
    }
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data)
        .as_ref()
        .to_vec()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Percent-encodes all but the unreserved characters (and `/` unless `slash`).
fn uri_encode(s: &str, slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            b'/' if !slash => out.push('/'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// (`YYYYMMDD`, `YYYYMMDDTHHMMSSZ`) in UTC.
fn amz_time(t: SystemTime) -> (String, String) {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let date = format!("{y:04}{m:02}{d:02}");
    let stamp = format!(
        "{date}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    );
    (date, stamp)
}

struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// (Code, Message) of an S3 error document; empty when there is none.
    fn s3_error(&self) -> (String, String) {
        let tag = |t: &str| {
            let open = format!("<{t}>");
            let close = format!("</{t}>");
            self.body
                .find(&open)
                .and_then(|i| {
                    let rest = &self.body[i + open.len()..];
                    rest.find(&close)
                        .map(|j| rest[..j].chars().take(200).collect::<String>())
                })
                .unwrap_or_default()
        };
        (tag("Code"), tag("Message"))
    }
}

async fn send(
    s: &mut Box<dyn Io>,
    signer: &Signer<'_>,
    method: &str,
    path: &str,
    stage: Stage,
) -> Result<Response, Failure> {
    let doing = format!("sending {method} {path}");
    s.write_all(signer.request(method, path, &[]).as_bytes())
        .await
        .map_err(|e| io_failure(stage, &doing, &e))?;
    s.flush().await.map_err(|e| io_failure(stage, &doing, &e))?;
    read_response(
        s,
        method == "HEAD",
        stage,
        &format!("reading the answer to {method} {path}"),
    )
    .await
}

async fn read_response(
    s: &mut Box<dyn Io>,
    head_only: bool,
    stage: Stage,
    doing: &str,
) -> Result<Response, Failure> {
    const LIMIT: usize = 1 << 20;
    let bad = |m: &str| Failure::new(stage, reason::PROTOCOL_ERROR, format!("{doing}: {m}"));
    let mut buf = Vec::new();
    let mut eof = false;
    let mut fill = async |buf: &mut Vec<u8>, eof: &mut bool| -> Result<(), Failure> {
        let mut b = [0u8; 8192];
        match s.read(&mut b).await {
            Ok(0) => *eof = true,
            Ok(n) => buf.extend_from_slice(&b[..n]),
            // A TLS peer that closes without close_notify: what arrived is all there is.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => *eof = true,
            Err(e) => return Err(io_failure(stage, doing, &e)),
        }
        Ok(())
    };
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if eof || buf.len() > LIMIT {
            return Err(bad(if buf.is_empty() {
                "the server closed the connection without answering"
            } else {
                "not an HTTP answer (is this an S3 endpoint?)"
            }));
        }
        fill(&mut buf, &mut eof).await?;
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .strip_prefix("HTTP/1.")
        .and_then(|r| r.get(2..5))
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| bad("not an HTTP answer (is this an S3 endpoint?)"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| {
            l.split_once(':')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        })
        .collect();
    let get = |n: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.clone())
    };
    let mut rest = buf.split_off(head_end + 4);
    let body = if head_only || status == 204 || status == 304 || (100..200).contains(&status) {
        Vec::new()
    } else if get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        let mut out = Vec::new();
        loop {
            let Some(i) = rest.windows(2).position(|w| w == b"\r\n") else {
                if eof || rest.len() > LIMIT {
                    return Err(bad("truncated chunked body"));
                }
                fill(&mut rest, &mut eof).await?;
                continue;
            };
            let size_line = String::from_utf8_lossy(&rest[..i]).into_owned();
            let size = usize::from_str_radix(size_line.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| bad("malformed chunk size"))?;
            if size == 0 {
                break out;
            }
            while rest.len() < i + 2 + size + 2 {
                if eof || rest.len() > LIMIT {
                    return Err(bad("truncated chunked body"));
                }
                fill(&mut rest, &mut eof).await?;
            }
            out.extend_from_slice(&rest[i + 2..i + 2 + size]);
            rest.drain(..i + 2 + size + 2);
        }
    } else if let Some(len) = get("content-length").and_then(|v| v.parse::<usize>().ok()) {
        if len > LIMIT {
            return Err(bad("answer body too large"));
        }
        while rest.len() < len {
            if eof {
                return Err(bad("truncated body"));
            }
            fill(&mut rest, &mut eof).await?;
        }
        rest.truncate(len);
        rest
    } else {
        while !eof && rest.len() <= LIMIT {
            fill(&mut rest, &mut eof).await?;
        }
        rest
    };
    Ok(Response {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn amz_time_formats_utc() {
        let t = UNIX_EPOCH + Duration::from_secs(1_369_353_600); // 2013-05-24T00:00:00Z
        assert_eq!(amz_time(t), ("20130524".into(), "20130524T000000Z".into()));
        let t = UNIX_EPOCH + Duration::from_secs(951_825_599); // 2000-02-29T11:59:59Z
        assert_eq!(amz_time(t).1, "20000229T115959Z");
    }

    #[test]
    fn signing_key_matches_aws_documentation() {
        // From the SigV4 documentation: secret wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY,
        // 20120215, us-east-1, iam.
        let mut key = b"AWS4wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".to_vec();
        for part in ["20120215", "us-east-1", "iam", "aws4_request"] {
            key = hmac_sha256(&key, part.as_bytes());
        }
        assert_eq!(
            hex(&key),
            "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d"
        );
    }

    #[test]
    fn request_signature_matches_aws_documentation() {
        // The S3 SigV4 documentation's "GET Bucket Lifecycle" example: the same three signed
        // headers and empty payload as ListBuckets.
        let signer = Signer {
            key_id: "AKIAIOSFODNN7EXAMPLE",
            secret: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            region: "us-east-1",
            host: "examplebucket.s3.amazonaws.com",
            now: UNIX_EPOCH + Duration::from_secs(1_369_353_600),
        };
        let req = signer.request("GET", "/", &[("lifecycle", "")]);
        assert!(
            req.starts_with(
                "GET /?lifecycle= HTTP/1.1\r\nHost: examplebucket.s3.amazonaws.com\r\n"
            )
        );
        assert!(req.contains(
            "Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
             SignedHeaders=host;x-amz-content-sha256;x-amz-date, \
             Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"
        ));
        assert!(
            !req.contains("wJalrXUtnFEMI"),
            "the secret never goes on the wire"
        );
    }

    #[test]
    fn uri_encoding_keeps_unreserved_and_slashes() {
        assert_eq!(uri_encode("/a b/c~d", false), "/a%20b/c~d");
        assert_eq!(uri_encode("a/b", true), "a%2Fb");
    }
}
