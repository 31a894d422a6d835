//! TokenReview (authentication.k8s.io/v1) and SubjectAccessReview
//! (authorization.k8s.io/v1) as documented: "Authenticating" (webhook token
//! authentication: the reviewer fills `status.authenticated` and
//! `status.user`) and "Authorization Overview" (checking API access: a
//! SubjectAccessReview's `status.allowed`); the emulator's answers come from
//! rules the test registers.

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use kube_emulator::review::{AllowRule, AuthConfig, ReviewUser};

use crate::common::start;

fn sar(user: &str, groups: &[&str], verb: &str, sub: &str) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.into()),
            groups: Some(groups.iter().map(|g| g.to_string()).collect()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                resource: Some("nodes".into()),
                subresource: Some(sub.into()),
                name: Some("vk".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test]
async fn token_and_access_reviews_follow_the_registered_rules() {
    let env = start().await;
    env.handle.set_auth(AuthConfig {
        tokens: [(
            "t-alice".to_string(),
            ReviewUser {
                username: "alice".into(),
                uid: "1".into(),
                groups: vec!["devs".into()],
            },
        )]
        .into_iter()
        .collect(),
        rules: vec![AllowRule {
            subject: "group:devs".into(),
            verbs: vec!["get".into()],
            resource: "nodes".into(),
            subresource: "stats".into(),
            name: String::new(),
        }],
    });
    let tr: Api<TokenReview> = Api::all(env.client.clone());
    let review = |t: &str| TokenReview {
        spec: TokenReviewSpec {
            token: t.into(),
            audiences: None,
        },
        ..Default::default()
    };
    let ok = tr
        .create(&PostParams::default(), &review("t-alice"))
        .await
        .unwrap();
    let st = ok.status.unwrap();
    assert_eq!(st.authenticated, Some(true));
    assert_eq!(st.user.unwrap().username.as_deref(), Some("alice"));
    let bad = tr
        .create(&PostParams::default(), &review("nope"))
        .await
        .unwrap();
    assert_eq!(bad.status.unwrap().authenticated, Some(false));
    // No token: 400 as the real TokenReview REST storage answers.
    let e = tr
        .create(&PostParams::default(), &review(""))
        .await
        .unwrap_err();
    assert!(
        matches!(e, kube::Error::Api(ref s) if s.code == 400),
        "{e:?}"
    );

    let sars: Api<SubjectAccessReview> = Api::all(env.client.clone());
    let sars = &sars;
    let allowed = |s: SubjectAccessReview| async move {
        sars.create(&PostParams::default(), &s)
            .await
            .unwrap()
            .status
            .unwrap()
            .allowed
    };
    assert!(allowed(sar("alice", &["devs"], "get", "stats")).await);
    assert!(!allowed(sar("alice", &["devs"], "create", "proxy")).await);
    assert!(!allowed(sar("bob", &[], "get", "stats")).await);
    assert!(allowed(sar("admin", &["system:masters"], "create", "proxy")).await);
    // Neither user nor group, or no attributes: 422 naming the field.
    let mut empty = sar("", &[], "get", "stats");
    let e = sars
        .create(&PostParams::default(), &empty)
        .await
        .unwrap_err();
    assert!(
        matches!(e, kube::Error::Api(ref s) if s.code == 422 && s.message.contains("spec.user")),
        "{e:?}"
    );
    empty.spec.user = Some("x".into());
    empty.spec.resource_attributes = None;
    let e = sars
        .create(&PostParams::default(), &empty)
        .await
        .unwrap_err();
    assert!(
        matches!(e, kube::Error::Api(ref s) if s.code == 422 && s.message.contains("resourceAttributes")),
        "{e:?}"
    );
    env.handle.shutdown().await;
}
