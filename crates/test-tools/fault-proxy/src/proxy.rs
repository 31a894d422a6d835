//! The listeners, the forwarding and the fault actions.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::{debug, warn};

use crate::cloud::{ProxyConfig, origin_of, rewrite_clouds_yaml};
use crate::record::RequestRecord;
use crate::rule::{Action, ActiveRule, Rule, RuleId, RuleStatus};
use crate::{Error, canonical_service};

/// One listener: the service, its upstream origin and the proxy's origin for it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Route {
    /// Service name.
    pub service: String,
    /// `http://host:port` of the real service.
    pub upstream: String,
    /// `http://host:port` of the proxy's listener for it.
    pub proxy: String,
}

/// The running proxy. Cheap to clone; the listeners stop when the last clone is dropped (or
/// on [`FaultProxy::shutdown`]).
#[derive(Clone)]
pub struct FaultProxy {
    shared: Arc<Shared>,
    _stop: Arc<DropGuard>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("routes", &self.shared.routes)
            .finish_non_exhaustive()
    }
}

struct State {
    rules: Vec<ActiveRule>,
    next_rule: RuleId,
    log: Vec<RequestRecord>,
    seq: u64,
}

struct Shared {
    routes: Vec<Route>,
    keystone_url: Option<String>,
    client: reqwest::Client,
    state: Mutex<State>,
    started: Instant,
    cancel: CancellationToken,
    /// (upstream origin, proxy origin) pairs, longest first.
    rewrites: Vec<(String, String)>,
}

/// The service future failed on purpose: hyper closes the connection without an answer.
#[derive(Debug)]
struct Dropped;

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection dropped by fault-proxy")
    }
}

impl std::error::Error for Dropped {}

type Reply = Result<Response<Full<Bytes>>, Dropped>;

impl FaultProxy {
    /// Binds one listener per upstream (a free port each) and starts serving.
    pub async fn start(config: ProxyConfig) -> Result<Self, Error> {
        if config.upstreams.is_empty() {
            return Err(Error::config("no upstreams to proxy"));
        }
        let mut listeners = Vec::new();
        let mut routes = Vec::new();
        for u in &config.upstreams {
            let l = TcpListener::bind(SocketAddr::new(config.bind, 0))
                .await
                .map_err(|e| Error::io(format!("binding a listener for {}", u.service), e))?;
            let addr = l
                .local_addr()
                .map_err(|e| Error::io("reading a listener's address", e))?;
            routes.push(Route {
                service: u.service.clone(),
                upstream: u.origin.clone(),
                proxy: format!("http://{addr}"),
            });
            listeners.push(l);
        }
        let keystone_url = match &config.keystone_url {
            Some(k) => Some(k.trim_end_matches('/').to_string()),
            None => routes
                .iter()
                .find(|r| r.service == "identity")
                .map(|r| format!("{}/v3", r.upstream)),
        };
        let client = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(config.upstream_timeout)
            .build()
            .map_err(|e| Error::Upstream {
                context: "building the forwarding HTTP client".into(),
                message: e.to_string(),
            })?;
        let mut rewrites: Vec<(String, String)> = routes
            .iter()
            .map(|r| (r.upstream.clone(), r.proxy.clone()))
            .collect();
        rewrites.sort_by_key(|(u, _)| std::cmp::Reverse(u.len()));
        let cancel = CancellationToken::new();
        let shared = Arc::new(Shared {
            routes,
            keystone_url,
            client,
            state: Mutex::new(State {
                rules: Vec::new(),
                next_rule: 1,
                log: Vec::new(),
                seq: 0,
            }),
            started: Instant::now(),
            cancel: cancel.clone(),
            rewrites,
        });
        for (idx, l) in listeners.into_iter().enumerate() {
            tokio::spawn(accept_loop(shared.clone(), idx, l));
        }
        Ok(FaultProxy {
            shared,
            _stop: Arc::new(cancel.drop_guard()),
        })
    }

    /// The listeners.
    pub fn routes(&self) -> &[Route] {
        &self.shared.routes
    }

    /// The proxy's origin for a service (aliases accepted), if it proxies it.
    pub fn proxy_origin(&self, service: &str) -> Option<&str> {
        let s = canonical_service(service);
        self.shared
            .routes
            .iter()
            .find(|r| r.service == s)
            .map(|r| r.proxy.as_str())
    }

    /// A URL with its upstream origin replaced by the proxy's (`None` when it is not proxied).
    pub fn proxied_url(&self, url: &str) -> Option<String> {
        let origin = origin_of(url).ok()?;
        let route = self.shared.routes.iter().find(|r| r.upstream == origin)?;
        Some(format!("{}{}", route.proxy, &url[origin.len()..]))
    }

    /// A clouds.yaml with only `cloud` of `clouds_yaml_text`, its `auth_url` through the proxy.
    pub fn clouds_yaml(&self, clouds_yaml_text: &str, cloud: &str) -> Result<String, Error> {
        rewrite_clouds_yaml(clouds_yaml_text, cloud, |u| self.proxied_url(u))
    }

    /// Reads `source`, writes [`FaultProxy::clouds_yaml`] of it to `dest`.
    pub fn write_clouds_yaml(
        &self,
        source: impl AsRef<Path>,
        cloud: &str,
        dest: impl AsRef<Path>,
    ) -> Result<(), Error> {
        let (source, dest) = (source.as_ref(), dest.as_ref());
        let text = std::fs::read_to_string(source)
            .map_err(|e| Error::io(format!("reading {}", source.display()), e))?;
        let out = self.clouds_yaml(&text, cloud)?;
        std::fs::write(dest, out).map_err(|e| Error::io(format!("writing {}", dest.display()), e))
    }

    /// Adds a rule after the existing ones.
    pub fn add_rule(&self, rule: Rule) -> Result<RuleId, Error> {
        let mut st = self.shared.lock();
        let id = st.next_rule;
        st.rules.push(ActiveRule::compile(id, rule)?);
        st.next_rule += 1;
        Ok(id)
    }

    /// Removes a rule; whether it existed.
    pub fn remove_rule(&self, id: RuleId) -> bool {
        let mut st = self.shared.lock();
        let before = st.rules.len();
        st.rules.retain(|r| r.id != id);
        st.rules.len() != before
    }

    /// Removes every rule.
    pub fn clear_rules(&self) {
        self.shared.lock().rules.clear();
    }

    /// The rules with their counters.
    pub fn rules(&self) -> Vec<RuleStatus> {
        self.shared
            .lock()
            .rules
            .iter()
            .map(ActiveRule::status)
            .collect()
    }

    /// How often a rule has fired (0 for an unknown or removed rule).
    pub fn fired(&self, id: RuleId) -> u64 {
        self.shared
            .lock()
            .rules
            .iter()
            .find(|r| r.id == id)
            .map_or(0, |r| r.fired)
    }

    /// The request log, in completion order.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.lock().log.clone()
    }

    /// Empties the request log.
    pub fn clear_requests(&self) {
        self.shared.lock().log.clear();
    }

    /// Stops the listeners and open connections (also done when the last clone is dropped).
    pub fn shutdown(&self) {
        self.shared.cancel.cancel();
    }
}

async fn accept_loop(shared: Arc<Shared>, idx: usize, listener: TcpListener) {
    loop {
        let accepted = tokio::select! {
            _ = shared.cancel.cancelled() => return,
            a = listener.accept() => a,
        };
        let stream = match accepted {
            Ok((s, _)) => s,
            Err(e) => {
                warn!(error = %e, "fault-proxy: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let conn_shared = shared.clone();
        tokio::spawn(async move {
            let cancel = conn_shared.cancel.clone();
            let svc = service_fn(move |req: Request<Incoming>| {
                let shared = conn_shared.clone();
                async move {
                    // Own task: a client that gives up (timeout) does not cancel a request
                    // already on its way upstream, and it is still logged.
                    match tokio::spawn(async move { shared.handle(idx, req).await }).await {
                        Ok(reply) => reply,
                        Err(_) => Err(Dropped),
                    }
                }
            });
            let conn = http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), svc);
            tokio::select! {
                r = conn => if let Err(e) = r { debug!(error = %e, "fault-proxy: connection ended") },
                _ = cancel.cancelled() => {}
            }
        });
    }
}

/// Request headers not passed on (hop-by-hop, or set by the forwarding client).
fn skip_request_header(name: &HeaderName) -> bool {
    hop_by_hop(name) || name == header::HOST || name == header::ACCEPT_ENCODING
}

fn hop_by_hop(name: &HeaderName) -> bool {
    [
        header::CONNECTION,
        header::PROXY_AUTHENTICATE,
        header::PROXY_AUTHORIZATION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        header::CONTENT_LENGTH,
    ]
    .contains(name)
        || name.as_str() == "keep-alive"
}

fn error_body(code: u16, message: &str) -> Bytes {
    let title = StatusCode::from_u16(code)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Error");
    Bytes::from(
        serde_json::json!({"error": {"code": code, "title": title, "message": message}})
            .to_string(),
    )
}

fn json_response(code: u16, body: Bytes, retry_after: Option<u64>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(s) = retry_after {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    r
}

/// Replaces every `from` origin by its `to` where the next byte does not continue the port
/// (so `:5000` does not rewrite `:50001`).
pub(crate) fn rewrite_origins(body: &[u8], rewrites: &[(String, String)]) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    let mut i = 0;
    let mut last = 0;
    while i < body.len() {
        let hit = rewrites.iter().find(|(from, _)| {
            let f = from.as_bytes();
            body[i..].starts_with(f) && !body.get(i + f.len()).is_some_and(u8::is_ascii_digit)
        });
        match hit {
            Some((from, to)) => {
                let o = out.get_or_insert_with(|| Vec::with_capacity(body.len()));
                o.extend_from_slice(&body[last..i]);
                o.extend_from_slice(to.as_bytes());
                i += from.len();
                last = i;
            }
            None => i += 1,
        }
    }
    if let Some(o) = out.as_mut() {
        o.extend_from_slice(&body[last..]);
    }
    out
}

/// What finally happens to a request.
enum Terminal {
    Forward,
    Status {
        code: u16,
        retry_after: Option<u64>,
        body: Option<String>,
    },
    Drop,
    Lose(Option<u16>),
    Revoke,
}

struct Upstream {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The rules that fire, in order, up to and including the first terminal one.
    fn decide(&self, service: &str, method: &str, path_and_query: &str) -> Vec<(RuleId, Action)> {
        let mut st = self.lock();
        let mut fired = Vec::new();
        for r in st.rules.iter_mut() {
            if r.consider(service, method, path_and_query) {
                fired.push((r.id, r.rule.action.clone()));
                if r.rule.action.is_terminal() {
                    break;
                }
            }
        }
        fired
    }

    fn log(&self, mut rec: RequestRecord, arrived: Instant) {
        rec.duration_ms = u64::try_from(arrived.elapsed().as_millis()).unwrap_or(u64::MAX);
        debug!(
            service = %rec.service, method = %rec.method, path = %rec.path,
            status = ?rec.status, faults = ?rec.faults, "fault-proxy request"
        );
        self.lock().log.push(rec);
    }

    async fn handle(self: Arc<Self>, idx: usize, req: Request<Incoming>) -> Reply {
        let arrived = Instant::now();
        let route = &self.routes[idx];
        let (parts, body) = req.into_parts();
        let seq = {
            let mut st = self.lock();
            st.seq += 1;
            st.seq
        };
        let path = parts.uri.path().to_string();
        // Clients send `/networks?` for an empty query; rules see `/networks`.
        let query = parts
            .uri
            .query()
            .filter(|q| !q.is_empty())
            .map(str::to_string);
        let path_and_query = match &query {
            Some(q) => format!("{path}?{q}"),
            None => path.clone(),
        };
        let mut rec = RequestRecord {
            seq,
            time: jiff::Timestamp::now().to_string(),
            offset_ms: u64::try_from(arrived.duration_since(self.started).as_millis())
                .unwrap_or(u64::MAX),
            duration_ms: 0,
            service: route.service.clone(),
            method: parts.method.as_str().to_string(),
            path,
            query,
            status: None,
            upstream_status: None,
            faults: Vec::new(),
            rules: Vec::new(),
            upstream_error: None,
        };
        let body = match body.collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => {
                rec.upstream_error = Some(format!("reading the request body: {e}"));
                self.log(rec, arrived);
                return Err(Dropped);
            }
        };

        let fired = self.decide(&route.service, parts.method.as_str(), &path_and_query);
        let mut terminal = Terminal::Forward;
        for (id, action) in fired {
            rec.rules.push(id);
            rec.faults.push(action.describe());
            terminal = match action {
                Action::Delay { ms } => {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    continue;
                }
                Action::Status {
                    code,
                    retry_after,
                    body,
                } => Terminal::Status {
                    code,
                    retry_after,
                    body,
                },
                Action::Drop => Terminal::Drop,
                Action::LoseResponse { status } => Terminal::Lose(status),
                Action::RevokeToken => Terminal::Revoke,
            };
        }

        match terminal {
            Terminal::Forward => {
                let reply = self
                    .forward(route, &parts.method, &path_and_query, &parts.headers, body)
                    .await;
                self.reply(rec, arrived, reply)
            }
            Terminal::Status {
                code,
                retry_after,
                body,
            } => {
                rec.status = Some(code);
                self.log(rec, arrived);
                let body = body.map(Bytes::from).unwrap_or_else(|| {
                    error_body(
                        code,
                        "injected by fault-proxy (the request was not forwarded)",
                    )
                });
                Ok(json_response(code, body, retry_after))
            }
            Terminal::Drop => {
                self.log(rec, arrived);
                Err(Dropped)
            }
            Terminal::Lose(status) => {
                match self
                    .forward(route, &parts.method, &path_and_query, &parts.headers, body)
                    .await
                {
                    Ok(up) => rec.upstream_status = Some(up.status.as_u16()),
                    Err(e) => rec.upstream_error = Some(e),
                }
                rec.status = status;
                self.log(rec, arrived);
                match status {
                    Some(code) => Ok(json_response(
                        code,
                        error_body(
                            code,
                            "injected by fault-proxy (the upstream answered; the answer was lost)",
                        ),
                        None,
                    )),
                    None => Err(Dropped),
                }
            }
            Terminal::Revoke => {
                let outcome = self.revoke(&parts.headers).await;
                if let Some(last) = rec.faults.last_mut() {
                    *last = format!("{last}: {outcome}");
                }
                let reply = self
                    .forward(route, &parts.method, &path_and_query, &parts.headers, body)
                    .await;
                self.reply(rec, arrived, reply)
            }
        }
    }

    /// Logs and answers a forwarded request (502 when forwarding failed).
    fn reply(
        &self,
        mut rec: RequestRecord,
        arrived: Instant,
        up: Result<Upstream, String>,
    ) -> Reply {
        match up {
            Ok(up) => {
                rec.status = Some(up.status.as_u16());
                rec.upstream_status = Some(up.status.as_u16());
                self.log(rec, arrived);
                let mut r = Response::new(Full::new(up.body));
                *r.status_mut() = up.status;
                *r.headers_mut() = up.headers;
                Ok(r)
            }
            Err(e) => {
                let body = error_body(502, &format!("fault-proxy: {e}"));
                rec.status = Some(502);
                rec.upstream_error = Some(e);
                self.log(rec, arrived);
                Ok(json_response(502, body, None))
            }
        }
    }

    async fn forward(
        &self,
        route: &Route,
        method: &Method,
        path_and_query: &str,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Result<Upstream, String> {
        let url = format!("{}{path_and_query}", route.upstream);
        let mut rb = self.client.request(method.clone(), &url);
        for (name, value) in headers {
            if !skip_request_header(name) {
                rb = rb.header(name, value);
            }
        }
        let resp = rb
            .body(body)
            .send()
            .await
            .map_err(|e| format!("{method} {url}: {}", error_chain(&e)))?;
        let status = resp.status();
        let mut out = HeaderMap::new();
        for (name, value) in resp.headers() {
            if hop_by_hop(name) {
                continue;
            }
            let value = if name == header::LOCATION || name == header::CONTENT_LOCATION {
                match rewrite_origins(value.as_bytes(), &self.rewrites)
                    .and_then(|v| HeaderValue::from_bytes(&v).ok())
                {
                    Some(v) => v,
                    None => value.clone(),
                }
            } else {
                value.clone()
            };
            out.append(name.clone(), value);
        }
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| format!("reading the body of {method} {url}: {}", error_chain(&e)))?;
        let body = match rewrite_origins(&bytes, &self.rewrites) {
            Some(b) => Bytes::from(b),
            None => bytes,
        };
        Ok(Upstream {
            status,
            headers: out,
            body,
        })
    }

    /// Revokes the request's token in Keystone with the token itself; says what happened.
    async fn revoke(&self, headers: &HeaderMap) -> String {
        let Some(token) = headers.get("x-auth-token") else {
            return "no X-Auth-Token to revoke".into();
        };
        let Some(keystone) = &self.keystone_url else {
            return "no Keystone upstream to revoke the token in".into();
        };
        let url = format!("{keystone}/auth/tokens");
        match self
            .client
            .delete(&url)
            .header("x-auth-token", token)
            .header("x-subject-token", token)
            .send()
            .await
        {
            Ok(r) => format!("Keystone answered {}", r.status().as_u16()),
            Err(e) => format!("DELETE {url} failed: {}", error_chain(&e)),
        }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(cause) = src {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        src = cause.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_rewritten_at_boundaries() {
        let rw = vec![
            (
                "http://127.0.0.1:5000".to_string(),
                "http://127.0.0.1:41001".to_string(),
            ),
            (
                "http://127.0.0.1:9696".to_string(),
                "http://127.0.0.1:41002".to_string(),
            ),
        ];
        let body = br#"{"a": "http://127.0.0.1:5000/v3", "b": "http://127.0.0.1:50001/", "c": "http://127.0.0.1:9696"}"#;
        let out = rewrite_origins(body, &rw).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"a": "http://127.0.0.1:41001/v3", "b": "http://127.0.0.1:50001/", "c": "http://127.0.0.1:41002"}"#
        );
        assert_eq!(rewrite_origins(b"nothing here", &rw), None);
    }
}
