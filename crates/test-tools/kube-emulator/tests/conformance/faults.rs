//! Fault hooks: injected errors, latency, admin endpoints.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use kube_emulator::FailRule;
use serde_json::{Value, json};

use crate::common::*;

#[tokio::test]
async fn fail_next_requests_then_recover() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    env.handle.fail_next(
        FailRule::new(2, 500)
            .verb("list")
            .path_contains("configmaps"),
    );
    // other verbs/paths are unaffected
    assert!(api.get_opt("x").await.unwrap().is_none());
    for _ in 0..2 {
        let err = api_err(api.list(&ListParams::default()).await);
        assert_eq!((err.code, err.reason.as_str()), (500, "InternalError"));
    }
    api.list(&ListParams::default()).await.unwrap();
}

#[tokio::test]
async fn too_many_requests_carries_retry_after() {
    let env = start().await;
    let mut rule = FailRule::new(1, 429);
    rule.retry_after_seconds = Some(7);
    env.handle.fail_next(rule);
    let resp = reqwest::get(format!("{}/api/v1/namespaces", env.handle.url()))
        .await
        .unwrap();
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "7");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["reason"], "TooManyRequests");
    assert_eq!(
        reqwest::get(format!("{}/api/v1/namespaces", env.handle.url()))
            .await
            .unwrap()
            .status(),
        200
    );
}

#[tokio::test]
async fn latency_and_admin_http_endpoints() {
    let env = start().await;
    let base = env.handle.url();
    let http = reqwest::Client::new();
    assert_eq!(
        http.get(format!("{base}/_emulator/healthz"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "ok"
    );

    let r: Value = http
        .post(format!("{base}/_emulator/faults"))
        .json(&json!({"latencyMs": 300, "fail": {"count": 1, "status": 503, "verb": "GET", "pathContains": "/api/v1/namespaces"}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["config"]["latencyMs"], 300);
    let t = Instant::now();
    let resp = http
        .get(format!("{base}/api/v1/namespaces"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    assert!(t.elapsed() >= Duration::from_millis(300));
    // admin endpoints are never delayed or failed
    let t = Instant::now();
    http.get(format!("{base}/_emulator/faults"))
        .send()
        .await
        .unwrap();
    assert!(t.elapsed() < Duration::from_millis(300));

    let r: Value = http
        .delete(format!("{base}/_emulator/faults"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["config"], json!({"latencyMs": 0, "rules": []}));
    let t = Instant::now();
    assert_eq!(
        http.get(format!("{base}/api/v1/namespaces"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert!(t.elapsed() < Duration::from_millis(300));

    env.handle.set_latency(Duration::from_millis(150));
    let t = Instant::now();
    http.get(format!("{base}/api/v1/namespaces"))
        .send()
        .await
        .unwrap();
    assert!(t.elapsed() >= Duration::from_millis(150));
    env.handle.reset_faults();
}
