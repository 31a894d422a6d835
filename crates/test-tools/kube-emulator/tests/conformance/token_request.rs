//! TokenRequest (`POST .../serviceaccounts/{name}/token`) as documented: the
//! TokenRequest reference ("expirationSeconds ... defaults to 1 hour and must be at
//! least 10 minutes"; audiences default to the API server's) and the bound service
//! account tokens design (a token bound to a Pod names it; the bound object must
//! exist with that uid; a Pod must run as the ServiceAccount). The token the
//! emulator issues is accepted by its TokenReview as the ServiceAccount.

use base64::Engine as _;
use k8s_openapi::api::authentication::v1::{
    BoundObjectReference, TokenRequest, TokenRequestSpec, TokenReview, TokenReviewSpec,
};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::common::start;

fn request(seconds: Option<i64>, pod: Option<(&str, &str)>) -> TokenRequest {
    TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: seconds,
            bound_object_ref: pod.map(|(name, uid)| BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(name.into()),
                uid: Some(uid.into()),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn code(e: &kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.message.clone()),
        other => panic!("not an API error: {other:?}"),
    }
}

#[tokio::test]
async fn token_request_issues_a_bound_token_the_token_review_accepts() {
    let env = start().await;
    let pp = PostParams::default();
    let sas: Api<ServiceAccount> = Api::namespaced(env.client.clone(), "default");
    sas.create(
        &pp,
        &serde_json::from_value(json!({"metadata": {"name": "app"}})).unwrap(),
    )
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let pod = pods
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {
                "serviceAccountName": "app",
                "containers": [{"name": "c", "image": "busybox"}]}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let uid = pod.metadata.uid.clone().unwrap();
    let before = jiff::Timestamp::now();
    let t = sas
        .create_token_request("app", &pp, &request(None, Some(("p", &uid))))
        .await
        .unwrap();
    let after = jiff::Timestamp::now();
    let st = t.status.unwrap();
    // Default lifetime: one hour from issue.
    let exp = st.expiration_timestamp.unwrap().0.as_second();
    let token = st.token.unwrap();
    assert!(
        exp >= before.as_second() + 3600 && exp <= after.as_second() + 3600,
        "{exp}"
    );
    // JWT-shaped, with the documented claims.
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3);
    let claims: serde_json::Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(parts[1])
            .unwrap(),
    )
    .unwrap();
    assert_eq!(claims["sub"], "system:serviceaccount:default:app");
    assert_eq!(claims["kubernetes.io"]["pod"]["uid"], uid.as_str());
    assert_eq!(
        claims["aud"][0],
        "https://kubernetes.default.svc.cluster.local"
    );
    // TokenReview authenticates it as the ServiceAccount.
    let tr: Api<TokenReview> = Api::all(env.client.clone());
    let review = tr
        .create(
            &pp,
            &TokenReview {
                spec: TokenReviewSpec {
                    token: token.clone(),
                    audiences: None,
                },
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(review.authenticated, Some(true));
    let user = review.user.unwrap();
    assert_eq!(
        user.username.as_deref(),
        Some("system:serviceaccount:default:app")
    );
    assert!(
        user.groups
            .unwrap()
            .contains(&"system:serviceaccounts:default".to_string())
    );

    // Refusals.
    let e = sas
        .create_token_request("app", &pp, &request(Some(599), None))
        .await
        .unwrap_err();
    let (c, m) = code(&e);
    assert_eq!(c, 422);
    assert!(
        m.contains("spec.expirationSeconds") && m.contains("less than 10 minutes"),
        "{m}"
    );
    let e = sas
        .create_token_request("nobody", &pp, &request(None, None))
        .await
        .unwrap_err();
    assert_eq!(code(&e).0, 404);
    let e = sas
        .create_token_request("app", &pp, &request(None, Some(("p", "other-uid"))))
        .await
        .unwrap_err();
    assert_eq!(code(&e).0, 409);
    let e = sas
        .create_token_request("app", &pp, &request(None, Some(("gone", ""))))
        .await
        .unwrap_err();
    assert_eq!(code(&e).0, 404);
    sas.create(
        &pp,
        &serde_json::from_value(json!({"metadata": {"name": "other"}})).unwrap(),
    )
    .await
    .unwrap();
    let e = sas
        .create_token_request("other", &pp, &request(None, Some(("p", &uid))))
        .await
        .unwrap_err();
    let (c, m) = code(&e);
    assert_eq!(c, 400);
    assert!(m.contains("different serviceaccount"), "{m}");
}
