//! A stand-in for kube-apiserver's pass-through proxy to kubelets, for kubectl: API requests
//! go to the test's Kubernetes API (the emulator), `pods/{pod}/exec|attach|portforward` are
//! rewritten to the kubelet's paths (`/exec/{ns}/{pod}/{container}?…`, `/portForward/{ns}/{pod}`)
//! with a bearer token the kubelet accepts, and the upgrade (SPDY or WebSocket) is passed
//! through (bytes both ways after the 101), as an API server that does not translate streams does. Tests run the real
//! kubectl through it against a kubelet API.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Starts the proxy on 127.0.0.1 and writes a kubeconfig for it into `dir`.
pub async fn start(
    kube: kube::Client,
    kubelet: std::net::SocketAddr,
    kubelet_ca_der: Vec<u8>,
    token: &str,
    dir: &Path,
) -> anyhow::Result<PathBuf> {
    // kube's TLS may have installed it already.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls::pki_types::CertificateDer::from(kubelet_ca_der))?;
    let cfg = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let state = Proxy {
        kube,
        kubelet,
        tls: tokio_rustls::TlsConnector::from(Arc::new(cfg)),
        token: token.to_string(),
    };
    let app = axum::Router::new().fallback(proxy).with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    std::fs::create_dir_all(dir)?;
    let kubeconfig = dir.join("kubeconfig-apiserver-proxy");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: p\n  cluster:\n    server: http://{addr}\ncontexts:\n- name: p\n  context:\n    cluster: p\n    user: u\ncurrent-context: p\nusers:\n- name: u\n  user: {{}}\n"
        ),
    )?;
    Ok(kubeconfig)
}

/// The proxy's state: the emulator's client and where the kubelet is.
#[derive(Clone)]
struct Proxy {
    kube: kube::Client,
    kubelet: std::net::SocketAddr,
    tls: tokio_rustls::TlsConnector,
    token: String,
}

/// The kubelet path of an API server streaming path, if it is one.
fn kubelet_path(path: &str, query: &str) -> Option<String> {
    let rest = path.strip_prefix("/api/v1/namespaces/")?;
    let parts: Vec<&str> = rest.split('/').collect();
    let [ns, "pods", pod, sub] = parts[..] else {
        return None;
    };
    match sub {
        "exec" | "attach" => {
            let container = url::form_urlencoded::parse(query.as_bytes())
                .find(|(k, _)| k == "container")
                .map(|(_, v)| v.into_owned())?;
            Some(format!("/{sub}/{ns}/{pod}/{container}?{query}"))
        }
        "portforward" => Some(format!("/portForward/{ns}/{pod}?{query}")),
        _ => None,
    }
}

async fn proxy(State(p): State<Proxy>, req: Request) -> Response {
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    match kubelet_path(&path, &query) {
        Some(target) => upgrade(p, req, target).await.unwrap_or_else(|e| {
            (axum::http::StatusCode::BAD_GATEWAY, e.to_string()).into_response()
        }),
        None => forward(p, req).await.unwrap_or_else(|e| {
            (axum::http::StatusCode::BAD_GATEWAY, e.to_string()).into_response()
        }),
    }
}

async fn forward(p: Proxy, req: Request) -> anyhow::Result<Response> {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, 16 << 20).await?;
    let mut out = http::Request::builder().method(parts.method).uri(
        parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/"),
    );
    for (k, v) in &parts.headers {
        if k != http::header::HOST && k != http::header::ACCEPT_ENCODING {
            out = out.header(k, v);
        }
    }
    let resp = p
        .kube
        .send(out.body(kube::client::Body::from(body.to_vec()))?)
        .await?;
    let (parts, body) = resp.into_parts();
    Ok(Response::from_parts(parts, Body::new(body)))
}

/// The API server's pass-through of an upgrade: the request to the kubelet,
/// its answer back, then bytes both ways.
async fn upgrade(p: Proxy, mut req: Request, target: String) -> anyhow::Result<Response> {
    let tcp = tokio::net::TcpStream::connect(p.kubelet).await?;
    let mut tls = p
        .tls
        .connect(rustls::pki_types::ServerName::try_from("127.0.0.1")?, tcp)
        .await?;
    let mut head = format!(
        "{} {target} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Length: 0\r\n",
        req.method(),
        p.kubelet,
        p.token
    );
    for (k, v) in req.headers() {
        let k = k.as_str();
        // SPDY's and the WebSocket handshake's headers (a client's
        // `v5.channel.k8s.io` WebSocket is passed through as it is).
        if matches!(k, "connection" | "upgrade" | "x-stream-protocol-version")
            || k.starts_with("sec-websocket-")
        {
            head.push_str(&format!("{k}: {}\r\n", v.to_str()?));
        }
    }
    head.push_str("\r\n");
    tls.write_all(head.as_bytes()).await?;
    let mut buf = Vec::new();
    let end = loop {
        let mut chunk = [0u8; 4096];
        let n = tls.read(&mut chunk).await?;
        anyhow::ensure!(n > 0, "the kubelet closed before answering");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let text = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = text.split("\r\n");
    let code: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(502);
    let mut resp = Response::builder().status(code);
    for l in lines.filter(|l| !l.is_empty()) {
        if let Some((k, v)) = l.split_once(':') {
            resp = resp.header(k.trim(), v.trim());
        }
    }
    let rest = buf[end..].to_vec();
    if code != 101 {
        // The refusal's body (the kubelet closes after it or gives its length).
        let mut body = rest;
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(2),
            tls.read_to_end(&mut body),
        )
        .await;
        return Ok(resp.body(Body::from(body))?);
    }
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(up) = on_upgrade.await else { return };
        let mut client = hyper_util::rt::TokioIo::new(up);
        if !rest.is_empty() && client.write_all(&rest).await.is_err() {
            return;
        }
        let _ = tokio::io::copy_bidirectional(&mut client, &mut tls).await;
    });
    Ok(resp.body(Body::empty())?)
}
