//! The proxy against small local upstreams (axum servers in the test): forwarding and
//! rewriting, every action, schedules, the log, the admin API and the clouds.yaml.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{any, delete, get, post};
use fault_proxy::{Action, FaultProxy, ProxyConfig, Rule};
use serde_json::{Value, json};

/// What an upstream saw.
#[derive(Clone, Default)]
struct Seen {
    requests: Arc<Mutex<Vec<(String, String, HeaderMap)>>>,
}

impl Seen {
    fn count(&self, method: &str, path: &str) -> usize {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|(m, p, _)| m == method && p == path)
            .count()
    }

    fn headers_of(&self, method: &str, path: &str) -> Vec<HeaderMap> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|(m, p, _)| m == method && p == path)
            .map(|(_, _, h)| h.clone())
            .collect()
    }
}

struct Upstream {
    origin: String,
    seen: Seen,
}

async fn record(State(seen): State<(Seen, String)>, req: Request) -> impl IntoResponse {
    let (seen, origin) = seen;
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or_default().to_string();
    seen.requests.lock().unwrap().push((
        req.method().to_string(),
        path.clone(),
        req.headers().clone(),
    ));
    let body = json!({
        "path": path,
        "query": query,
        "self": format!("{origin}{path}"),
        "links": [{"href": format!("{origin}/v2/"), "rel": "self"}],
    });
    let mut h = HeaderMap::new();
    h.insert("location", format!("{origin}/created/1").parse().unwrap());
    h.insert("x-upstream", "yes".parse().unwrap());
    (StatusCode::CREATED, h, body.to_string())
}

async fn upstream() -> Upstream {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    let seen = Seen::default();
    let app = Router::new()
        .route("/", get(record))
        .route("/v2/things", post(record).get(record))
        .route("/v3/auth/tokens", delete(record).post(record))
        .route("/{*rest}", any(record))
        .with_state((seen.clone(), origin.clone()));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Upstream { origin, seen }
}

/// A proxy with a fake Keystone (`identity`) and a fake Neutron (`network`).
async fn setup() -> (FaultProxy, Upstream, Upstream, reqwest::Client) {
    let (ks, net) = (upstream().await, upstream().await);
    let config = ProxyConfig::default()
        .upstream("keystone", &format!("{}/v3", ks.origin))
        .unwrap()
        .upstream("neutron", &net.origin)
        .unwrap();
    let proxy = FaultProxy::start(config).await.unwrap();
    let client = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    (proxy, ks, net, client)
}

fn url(proxy: &FaultProxy, service: &str, path: &str) -> String {
    format!("{}{path}", proxy.proxy_origin(service).unwrap())
}

#[tokio::test]
async fn forwards_and_rewrites_origins() {
    let (proxy, ks, net, client) = setup().await;
    let resp = client
        .get(url(&proxy, "network", "/v2/things?name=a"))
        .header("x-auth-token", "tok-1")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let np = proxy.proxy_origin("network").unwrap().to_string();
    assert_eq!(
        resp.headers()["location"].to_str().unwrap(),
        format!("{np}/created/1"),
        "Location points at the proxy"
    );
    assert_eq!(resp.headers()["x-upstream"], "yes");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["query"], "name=a");
    assert_eq!(body["self"], format!("{np}/v2/things"));
    assert_eq!(body["links"][0]["href"], format!("{np}/v2/"));
    let h = net.seen.headers_of("GET", "/v2/things");
    assert_eq!(h.len(), 1);
    assert_eq!(h[0]["x-auth-token"], "tok-1", "headers reach the upstream");
    assert_eq!(ks.seen.count("GET", "/v2/things"), 0);

    let log = proxy.requests();
    assert_eq!(log.len(), 1);
    let r = &log[0];
    assert_eq!(
        (
            r.service.as_str(),
            r.method.as_str(),
            r.path.as_str(),
            r.query.as_deref()
        ),
        ("network", "GET", "/v2/things", Some("name=a"))
    );
    assert_eq!((r.status, r.upstream_status), (Some(201), Some(201)));
    assert!(r.faults.is_empty() && !r.faulted());
}

#[tokio::test]
async fn status_and_drop_do_not_reach_the_upstream() {
    let (proxy, _ks, net, client) = setup().await;
    let unavailable = proxy
        .add_rule(
            Rule::new(Action::Status {
                code: 503,
                retry_after: Some(2),
                body: None,
            })
            .service("network")
            .method("POST")
            .first(1),
        )
        .unwrap();
    let drop = proxy
        .add_rule(
            Rule::new(Action::Drop)
                .service("network")
                .method("POST")
                .first(1),
        )
        .unwrap();
    let post = || client.post(url(&proxy, "network", "/v2/things")).send();

    let r = post().await.unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "2");
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("fault-proxy")
    );
    // The first rule is spent; the second sees its first matching request (it did not see
    // the first request: the earlier rule ended the evaluation).
    let e = post().await.unwrap_err();
    assert!(
        !e.is_status(),
        "a dropped connection is not an HTTP answer: {e:?}"
    );
    // Both spent: forwarded.
    assert_eq!(post().await.unwrap().status(), 201);
    assert_eq!(
        net.seen.count("POST", "/v2/things"),
        1,
        "only the last got through"
    );
    assert_eq!((proxy.fired(unavailable), proxy.fired(drop)), (1, 1));
    let statuses: Vec<Option<u16>> = proxy.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [Some(503), None, Some(201)]);
    let rules = proxy.rules();
    assert_eq!(
        rules
            .iter()
            .map(|r| (r.matched, r.fired))
            .collect::<Vec<_>>(),
        [(3, 1), (2, 1)],
        "(matched, fired): the second rule never saw the request the first one answered"
    );
}

#[tokio::test]
async fn lost_responses_reach_the_upstream() {
    let (proxy, _ks, net, client) = setup().await;
    let lose502 = proxy
        .add_rule(
            Rule::new(Action::lose_response_502())
                .path_regex("^/v2/things$")
                .method("POST")
                .first(1),
        )
        .unwrap();
    let lose_drop = proxy
        .add_rule(
            Rule::new(Action::lose_response_drop())
                .path_contains("/v2/things")
                .method("POST")
                .first(1),
        )
        .unwrap();
    // An empty query (as the OpenStack SDK sends) does not hide the path from a regex.
    let post = || client.post(url(&proxy, "network", "/v2/things?")).send();
    assert_eq!(post().await.unwrap().status(), 502);
    assert!(post().await.is_err(), "the second answer is dropped");
    assert_eq!(post().await.unwrap().status(), 201);
    assert_eq!(
        net.seen.count("POST", "/v2/things"),
        3,
        "the upstream did all three"
    );
    assert_eq!((proxy.fired(lose502), proxy.fired(lose_drop)), (1, 1));
    let log = proxy.requests();
    let seen: Vec<(Option<u16>, Option<u16>)> =
        log.iter().map(|r| (r.status, r.upstream_status)).collect();
    assert_eq!(
        seen,
        [
            (Some(502), Some(201)),
            (None, Some(201)),
            (Some(201), Some(201))
        ]
    );
    assert!(log[0].reached_upstream() && log[0].faulted());
}

#[tokio::test]
async fn delays_add_up_and_do_not_stop_other_rules() {
    let (proxy, _ks, net, client) = setup().await;
    proxy
        .add_rule(Rule::new(Action::delay(Duration::from_millis(300))).service("network"))
        .unwrap();
    proxy
        .add_rule(Rule::new(Action::status(500)).service("network").every(2))
        .unwrap();
    let started = Instant::now();
    let a = client
        .get(url(&proxy, "network", "/v2/things"))
        .send()
        .await
        .unwrap();
    let b = client
        .get(url(&proxy, "network", "/v2/things"))
        .send()
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "two delayed requests take at least 2 x 300 ms"
    );
    assert_eq!((a.status().as_u16(), b.status().as_u16()), (201, 500));
    assert_eq!(net.seen.count("GET", "/v2/things"), 1);
    let faults: Vec<Vec<String>> = proxy.requests().into_iter().map(|r| r.faults).collect();
    assert_eq!(
        faults,
        [
            vec!["delay 300ms".to_string()],
            vec!["delay 300ms".to_string(), "status 500".to_string()]
        ]
    );
    // Another service is not delayed.
    client
        .get(url(&proxy, "identity", "/v3/projects"))
        .send()
        .await
        .unwrap();
    assert!(proxy.requests()[2].faults.is_empty());
}

#[tokio::test]
async fn revoke_token_calls_keystone_then_forwards() {
    let (proxy, ks, net, client) = setup().await;
    let id = proxy
        .add_rule(Rule::new(Action::RevokeToken).service("network").first(1))
        .unwrap();
    let r = client
        .get(url(&proxy, "network", "/v2/things"))
        .header("x-auth-token", "tok-7")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "forwarded after the revocation");
    let revocations = ks.seen.headers_of("DELETE", "/v3/auth/tokens");
    assert_eq!(revocations.len(), 1, "one revocation sent to Keystone");
    assert_eq!(revocations[0]["x-subject-token"], "tok-7");
    assert_eq!(revocations[0]["x-auth-token"], "tok-7");
    assert_eq!(net.seen.count("GET", "/v2/things"), 1);
    assert_eq!(proxy.fired(id), 1);
    let log = proxy.requests();
    assert_eq!(
        log.len(),
        1,
        "the revocation itself is not a proxied request"
    );
    assert_eq!(log[0].faults, ["revoke token: Keystone answered 201"]);
}

#[tokio::test]
async fn probability_is_repeatable() {
    let run = async |seed| {
        let (proxy, _ks, _net, client) = setup().await;
        proxy
            .add_rule(Rule::new(Action::status(500)).probability(0.5, seed))
            .unwrap();
        let mut out = Vec::new();
        for _ in 0..20 {
            let r = client
                .get(url(&proxy, "network", "/v2/things"))
                .send()
                .await
                .unwrap();
            out.push(r.status().as_u16());
        }
        out
    };
    let a = run(11).await;
    assert_eq!(a, run(11).await, "same seed, same faults");
    let failed = a.iter().filter(|s| **s == 500).count();
    assert!((1..20).contains(&failed), "some but not all fail: {a:?}");
}

#[tokio::test]
async fn unreachable_upstream_is_a_502() {
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = dead.local_addr().unwrap();
    drop(dead);
    let proxy = FaultProxy::start(
        ProxyConfig::default()
            .upstream("network", &format!("http://{addr}"))
            .unwrap(),
    )
    .await
    .unwrap();
    let r = reqwest::Client::new()
        .get(url(&proxy, "network", "/v2.0/networks"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    let log = proxy.requests();
    assert_eq!(log[0].status, Some(502));
    assert!(log[0].upstream_error.is_some(), "{log:?}");
    assert!(!log[0].reached_upstream());
}

#[tokio::test]
async fn admin_api() {
    let (proxy, _ks, _net, client) = setup().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = format!("http://{}", listener.local_addr().unwrap());
    let app = fault_proxy::admin::router(proxy.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let r = client
        .post(format!("{admin}/rules"))
        .json(&json!({"service": "neutron", "first": 1, "action": {"type": "status", "code": 418}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let id = r.json::<Value>().await.unwrap()["id"].as_u64().unwrap();
    let bad = client
        .post(format!("{admin}/rules"))
        .json(&json!({"path_regex": "(", "action": {"type": "drop"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    assert!(bad.text().await.unwrap().contains("path_regex"));

    let got = client
        .get(url(&proxy, "network", "/v2/things"))
        .send()
        .await
        .unwrap();
    assert_eq!(got.status(), 418);

    let rules: Value = client
        .get(format!("{admin}/rules"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(rules[0]["id"], id);
    assert_eq!(rules[0]["fired"], 1);
    let log: Value = client
        .get(format!("{admin}/requests"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(log[0]["status"], 418);
    assert_eq!(log[0]["service"], "network");
    let routes: Value = client
        .get(format!("{admin}/routes"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(routes.as_array().unwrap().len(), 2);

    let del = |p: String| client.delete(p).send();
    assert_eq!(
        del(format!("{admin}/rules/{id}")).await.unwrap().status(),
        204
    );
    assert_eq!(
        del(format!("{admin}/rules/{id}")).await.unwrap().status(),
        404
    );
    assert_eq!(
        del(format!("{admin}/requests")).await.unwrap().status(),
        204
    );
    assert!(proxy.requests().is_empty());
    proxy.add_rule(Rule::new(Action::Drop)).unwrap();
    assert_eq!(del(format!("{admin}/rules")).await.unwrap().status(), 204);
    assert!(proxy.rules().is_empty());
}

#[tokio::test]
async fn clouds_yaml_points_at_the_proxy() {
    let (proxy, ks, _net, _client) = setup().await;
    let text = format!(
        "clouds:\n  c:\n    auth_type: password\n    auth:\n      auth_url: {}/v3\n      username: u\n      password: p\n    region_name: R\n",
        ks.origin
    );
    let out = proxy.clouds_yaml(&text, "c").unwrap();
    let ksp = proxy.proxy_origin("identity").unwrap();
    assert!(out.contains(&format!("{ksp}/v3")), "{out}");
    assert!(!out.contains(&ks.origin), "{out}");
    assert!(proxy.clouds_yaml(&text, "nope").is_err());
    let dir = tempfile::tempdir().unwrap();
    let (src, dest) = (dir.path().join("in.yaml"), dir.path().join("out.yaml"));
    std::fs::write(&src, &text).unwrap();
    proxy.write_clouds_yaml(&src, "c", &dest).unwrap();
    assert_eq!(std::fs::read_to_string(&dest).unwrap(), out);
}

#[tokio::test]
async fn shutdown_stops_listening() {
    let (proxy, _ks, _net, client) = setup().await;
    let u = url(&proxy, "network", "/v2/things");
    assert!(client.get(&u).send().await.is_ok());
    proxy.shutdown();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let fresh = reqwest::Client::builder().no_proxy().build().unwrap();
    assert!(
        fresh.get(&u).send().await.is_err(),
        "nothing listens after shutdown"
    );
}
