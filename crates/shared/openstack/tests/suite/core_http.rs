//! Edge cases of the client core against a tiny local HTTP server that plays
//! Keystone (token + catalog) and one service whose endpoints misbehave on
//! purpose: 503/429 with Retry-After, 500 on GET and POST, 409 "in
//! progress", 400, slow responses, 401 with re-authentication, concurrency.
//! These need no cloud and always run.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Method, Request as HttpRequest, StatusCode};
use axum::response::{IntoResponse, Response};
use openstack::Error;
use openstack::adapter::{ClientOptions, CloudSelector, Core, Metrics, Request, Service};
use serde_json::json;

#[derive(Default)]
struct Mock {
    port: std::sync::OnceLock<u16>,
    hits: std::sync::Mutex<HashMap<String, usize>>,
    tokens_issued: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

impl Mock {
    fn hit(&self, key: &str) -> usize {
        let mut h = self.hits.lock().unwrap();
        let n = h.entry(key.to_string()).or_default();
        *n += 1;
        *n
    }
    fn hits(&self, key: &str) -> usize {
        self.hits.lock().unwrap().get(key).copied().unwrap_or(0)
    }
}

fn neutron_error(status: StatusCode, msg: &str) -> Response {
    (
        status,
        [
            ("content-type", "application/json"),
            ("x-openstack-request-id", "req-mock"),
        ],
        json!({"NeutronError": {"type": "X", "message": msg, "detail": ""}}).to_string(),
    )
        .into_response()
}

async fn handler(State(m): State<Arc<Mock>>, req: HttpRequest<Body>) -> Response {
    let port = m.port.get().copied().unwrap_or(0);
    let base = format!("http://127.0.0.1:{port}");
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    if path == "/v3" || path == "/v3/" {
        return axum::Json(json!({"version": {"id": "v3.14", "status": "stable",
            "links": [{"rel": "self", "href": format!("{base}/v3/")}]}}))
        .into_response();
    }
    if path == "/v3/auth/tokens" && method == Method::POST {
        let n = m.tokens_issued.fetch_add(1, Ordering::SeqCst) + 1;
        let now = jiff::Timestamp::now();
        let body = json!({"token": {
            "methods": ["password"],
            "issued_at": now.to_string(),
            "expires_at": (now + jiff::SignedDuration::from_hours(1)).to_string(),
            "user": {"id": "u1", "name": "admin", "domain": {"id": "default", "name": "Default"}},
            "project": {"id": "p1", "name": "admin", "domain": {"id": "default", "name": "Default"}},
            "catalog": [
                {"type": "identity", "name": "keystone", "endpoints": [
                    {"id": "e1", "interface": "public", "region": "RegionOne", "region_id": "RegionOne", "url": format!("{base}/v3")}]},
                {"type": "network", "name": "neutron", "endpoints": [
                    {"id": "e2", "interface": "public", "region": "RegionOne", "region_id": "RegionOne", "url": format!("{base}/net/v2.0")}]}
            ]
        }});
        return (
            StatusCode::CREATED,
            [
                ("x-subject-token", format!("tok-{n}")),
                ("content-type", "application/json".to_string()),
            ],
            body.to_string(),
        )
            .into_response();
    }
    let Some(name) = path.strip_prefix("/net/v2.0/") else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let n = m.hit(&format!("{method} {name}"));
    match name {
        "retry-503" if n <= 2 => (
            StatusCode::SERVICE_UNAVAILABLE,
            [("retry-after", "0")],
            "service unavailable",
        )
            .into_response(),
        "retry-429" if n == 1 => (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", "1")],
            "slow down",
        )
            .into_response(),
        "always-500" => neutron_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Request Failed: internal server error",
        ),
        "bad" => neutron_error(
            StatusCode::BAD_REQUEST,
            "Invalid input for cidr. Reason: 'x' is not a valid IP subnet.",
        ),
        "busy" if n == 1 => neutron_error(
            StatusCode::CONFLICT,
            "Operation is in progress, please try again later",
        ),
        "dup" => neutron_error(
            StatusCode::CONFLICT,
            "Security group rule already exists. Rule id is 1.",
        ),
        "slow" => {
            tokio::time::sleep(Duration::from_secs(2)).await;
            axum::Json(json!({"ok": true})).into_response()
        }
        "expired" if n == 1 => neutron_error(StatusCode::UNAUTHORIZED, "Authentication required"),
        // Still 401 right after re-authentication (Keystone's revocation is
        // second-granular), fine a moment later.
        "revoked" if n <= 2 => neutron_error(StatusCode::UNAUTHORIZED, "Authentication required"),
        "never-authorized" => neutron_error(StatusCode::UNAUTHORIZED, "Authentication required"),
        "concurrent" => {
            let now = m.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            m.max_in_flight.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(50)).await;
            m.in_flight.fetch_sub(1, Ordering::SeqCst);
            axum::Json(json!({"ok": true})).into_response()
        }
        _ => axum::Json(json!({"ok": true, "n": n})).into_response(),
    }
}

struct Fixture {
    mock: Arc<Mock>,
    core: Core,
    metrics: Metrics,
    _dir: TempDir,
}

struct TempDir(std::path::PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn fixture(tweak: impl FnOnce(&mut ClientOptions)) -> Fixture {
    let mock = Arc::new(Mock::default());
    let app = Router::new()
        .fallback(handler)
        .with_state(Arc::clone(&mock));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    mock.port.set(port).unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let dir = std::env::temp_dir().join(format!("os-mock-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("clouds.yaml");
    std::fs::write(
        &path,
        format!(
            "clouds:\n  mock:\n    auth_type: password\n    region_name: RegionOne\n    auth:\n      auth_url: http://127.0.0.1:{port}/v3\n      username: admin\n      password: not-a-real-secret\n      user_domain_name: Default\n      project_name: admin\n      project_domain_name: Default\n"
        ),
    )
    .unwrap();
    let metrics = Metrics::new();
    let mut opts = ClientOptions {
        requests_per_second: 0,
        min_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
        metrics: metrics.clone(),
        ..ClientOptions::default()
    };
    tweak(&mut opts);
    let core = Core::connect(
        &CloudSelector::File {
            path,
            cloud: "mock".into(),
        },
        opts,
    )
    .await
    .unwrap();
    Fixture {
        mock,
        core,
        metrics,
        _dir: TempDir(dir),
    }
}

fn get(name: &str) -> Request {
    Request::get(Service::Network, "test_get", name)
}

fn post(name: &str) -> Request {
    Request::post(Service::Network, "test_post", name)
}

fn exposition(m: &Metrics) -> String {
    let mut reg = prometheus_client::registry::Registry::default();
    m.register(&mut reg);
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &reg).unwrap();
    out
}

#[tokio::test]
async fn retries_503_honouring_retry_after() {
    let f = fixture(|_| {}).await;
    let rsp = f.core.send(&get("retry-503")).await.unwrap();
    assert_eq!(rsp.status, 200);
    assert_eq!(f.mock.hits("GET retry-503"), 3);
    let text = exposition(&f.metrics);
    assert!(text.contains("openstack_operator_openstack_api_retries_total{service=\"network\",operation=\"test_get\"} 2"), "{text}");
    assert!(text.contains("openstack_operator_openstack_api_calls_total{service=\"network\",operation=\"test_get\",status=\"success\"} 1"), "{text}");
    assert!(text.contains("code=\"503\""), "{text}");
}

#[tokio::test]
async fn waits_for_retry_after_on_429() {
    let f = fixture(|_| {}).await;
    let t = Instant::now();
    f.core.send(&post("retry-429")).await.unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(950),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(f.mock.hits("POST retry-429"), 2);
}

#[tokio::test]
async fn does_not_retry_400_and_keeps_the_message() {
    let f = fixture(|_| {}).await;
    let e = f.core.send(&get("bad")).await.unwrap_err();
    assert_eq!(f.mock.hits("GET bad"), 1);
    assert!(matches!(e, Error::BadRequest { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "bad request: network test_get: HTTP 400: Invalid input for cidr. Reason: 'x' is not a valid IP subnet. (request id req-mock)"
    );
    let text = exposition(&f.metrics);
    assert!(text.contains("status=\"error\"} 1"), "{text}");
}

#[tokio::test]
async fn retries_500_only_for_idempotent_requests() {
    let f = fixture(|o| o.max_retries = 3).await;
    let e = f.core.send(&get("always-500")).await.unwrap_err();
    assert!(e.is_transient(), "{e}");
    assert!(
        e.to_string()
            .contains("Request Failed: internal server error"),
        "{e}"
    );
    assert_eq!(f.mock.hits("GET always-500"), 4);
    let e = f.core.send(&post("always-500")).await.unwrap_err();
    assert!(e.is_transient(), "{e}");
    assert_eq!(f.mock.hits("POST always-500"), 1);
}

#[tokio::test]
async fn retries_in_progress_409_but_not_real_conflicts() {
    let f = fixture(|_| {}).await;
    f.core.send(&post("busy")).await.unwrap();
    assert_eq!(f.mock.hits("POST busy"), 2);
    let e = f.core.send(&post("dup")).await.unwrap_err();
    assert!(e.is_conflict(), "{e}");
    assert_eq!(f.mock.hits("POST dup"), 1);
}

#[tokio::test]
async fn times_out_per_request() {
    let f = fixture(|o| {
        o.timeout = Duration::from_millis(300);
        o.max_retries = 1;
    })
    .await;
    let t = Instant::now();
    let e = f.core.send(&get("slow")).await.unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert!(e.is_transient());
    assert_eq!(f.mock.hits("GET slow"), 2);
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
    let e = f.core.send(&post("slow")).await.unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert_eq!(f.mock.hits("POST slow"), 1);
    assert!(exposition(&f.metrics).contains("code=\"timeout\""));
}

#[tokio::test]
async fn reauthenticates_on_401() {
    let f = fixture(|_| {}).await;
    assert_eq!(f.mock.tokens_issued.load(Ordering::SeqCst), 1);
    f.core.send(&get("expired")).await.unwrap();
    assert_eq!(f.mock.hits("GET expired"), 2);
    assert_eq!(f.mock.tokens_issued.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn retries_a_401_that_survives_reauthentication_once() {
    let f = fixture(|_| {}).await;
    let t = Instant::now();
    f.core.send(&get("revoked")).await.unwrap();
    assert_eq!(f.mock.hits("GET revoked"), 3);
    assert!(t.elapsed() >= Duration::from_secs(1), "{:?}", t.elapsed());
    let e = f.core.send(&get("never-authorized")).await.unwrap_err();
    assert!(matches!(e, Error::Unauthorized { .. }), "{e}");
    // One SDK re-auth per attempt, two attempts: then give up.
    assert_eq!(f.mock.hits("GET never-authorized"), 4);
}

#[tokio::test]
async fn concurrency_is_capped_and_never_deadlocks() {
    let f = fixture(|o| o.max_concurrent = 3).await;
    let core = f.core.clone();
    let tasks: Vec<_> = (0..30)
        .map(|_| {
            let core = core.clone();
            tokio::spawn(async move { core.send(&get("concurrent")).await.map(|_| ()) })
        })
        .collect();
    let results = tokio::time::timeout(Duration::from_secs(20), futures::future::join_all(tasks))
        .await
        .unwrap();
    assert!(results.into_iter().all(|r| matches!(r, Ok(Ok(())))));
    assert_eq!(f.mock.hits("GET concurrent"), 30);
    assert!(f.mock.max_in_flight.load(Ordering::SeqCst) <= 3);
    assert!(f.mock.max_in_flight.load(Ordering::SeqCst) >= 2);
}

#[tokio::test]
async fn rate_limit_spaces_requests() {
    let f = fixture(|o| {
        o.requests_per_second = 10;
        o.burst = 1;
    })
    .await;
    let t = Instant::now();
    for _ in 0..4 {
        f.core.send(&get("ok")).await.unwrap();
    }
    // 10/s without burst: the 2nd..4th wait ~100 ms each.
    assert!(
        t.elapsed() >= Duration::from_millis(280),
        "{:?}",
        t.elapsed()
    );
    assert!(exposition(&f.metrics).contains("openstack_operator_rate_limit_wait_seconds_count"));
}

#[tokio::test]
async fn connect_errors_are_classified_without_secrets() {
    let e = Core::connect(
        &CloudSelector::File {
            path: "/nonexistent/clouds.yaml".into(),
            cloud: "x".into(),
        },
        ClientOptions::default(),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, Error::Config { .. }), "{e}");

    let dir = std::env::temp_dir().join(format!("os-mock-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let _guard = TempDir(dir.clone());
    let path = dir.join("clouds.yaml");
    // Bind and drop a listener to get a port nothing listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    std::fs::write(
        &path,
        format!("clouds:\n  dead:\n    auth_type: password\n    auth:\n      auth_url: http://127.0.0.1:{port}/v3\n      username: a\n      password: very-secret-pw\n"),
    )
    .unwrap();
    let e = Core::connect(
        &CloudSelector::File {
            path,
            cloud: "dead".into(),
        },
        ClientOptions::default(),
    )
    .await
    .unwrap_err();
    eprintln!("refused: {e}");
    assert!(e.is_transient(), "{e}");
    assert!(!e.to_string().contains("very-secret-pw"), "{e}");
}
