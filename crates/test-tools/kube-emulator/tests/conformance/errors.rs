//! Error statuses for protocol-level mistakes.

use serde_json::{Value, json};

use crate::common::*;

async fn status(resp: reqwest::Response) -> (u16, Value) {
    let code = resp.status().as_u16();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["kind"], "Status");
    assert_eq!(body["apiVersion"], "v1");
    assert_eq!(body["status"], "Failure");
    assert_eq!(body["code"], code);
    (code, body)
}

#[tokio::test]
async fn protocol_errors_are_statuses() {
    let env = start().await.with_widgets().await;
    let base = env.handle.url();
    let http = reqwest::Client::new();

    // 404 for unknown resources and paths
    let (c, b) = status(
        http.get(format!(
            "{base}/apis/sunet.se/v1alpha1/namespaces/default/nothings"
        ))
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!((c, b["reason"].as_str()), (404, Some("NotFound")));

    // 405 for a verb the path does not support
    let (c, b) = status(
        http.post(format!(
            "{base}/apis/sunet.se/v1alpha1/namespaces/default/widgets/w"
        ))
        .json(&json!({}))
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!((c, b["reason"].as_str()), (405, Some("MethodNotAllowed")));

    // 415 for a body format we do not speak
    let (c, b) = status(
        http.post(format!("{base}/api/v1/namespaces/default/configmaps"))
            .header("content-type", "application/vnd.kubernetes.protobuf")
            .body(vec![0u8, 1, 2])
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (c, b["reason"].as_str()),
        (415, Some("UnsupportedMediaType"))
    );
    let (c, _) = status(
        http.patch(format!("{base}/api/v1/namespaces/default/configmaps/x"))
            .header("content-type", "text/plain")
            .body("x")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(c, 415);

    // 400 for malformed input
    let (c, b) = status(
        http.get(format!("{base}/api/v1/configmaps?labelSelector=a%20in%20b"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((c, b["reason"].as_str()), (400, Some("BadRequest")));
    let (c, _) = status(
        http.post(format!("{base}/api/v1/namespaces/default/configmaps"))
            .header("content-type", "application/json")
            .body("{not json")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(c, 400);
    let (c, b) = status(
        http.post(format!("{base}/api/v1/namespaces/default/configmaps"))
            .json(&json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(c, 400, "{b}");

    // 422 for an invalid name
    let (c, b) = status(
        http.post(format!("{base}/api/v1/namespaces/default/configmaps"))
            .json(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Not_Valid"}}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((c, b["reason"].as_str()), (422, Some("Invalid")));
    assert_eq!(b["details"]["causes"][0]["field"], "metadata.name");
}

#[tokio::test]
async fn dry_run_does_not_persist() {
    let env = start().await.with_widgets().await;
    let api = env.widgets("default");
    let pp = kube::api::PostParams {
        dry_run: true,
        ..Default::default()
    };
    let w = api.create(&pp, &widget("w", "w")).await.unwrap();
    assert_eq!(w.spec.size, Some(3), "defaults applied in dry run");
    assert!(api.get_opt("w").await.unwrap().is_none());
}
