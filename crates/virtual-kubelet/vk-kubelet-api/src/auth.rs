//! Authentication and authorisation as the kubelet does them: a client
//! certificate verified against the client CA (user = CN, groups = O), else
//! a bearer token checked with a TokenReview; then a SubjectAccessReview on
//! `nodes/<subresource>` of this node. Anonymous requests are refused (the
//! kubelet with `--anonymous-auth=false`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

use crate::attrs::Attributes;

/// An authenticated user.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct User {
    /// User name.
    pub name: String,
    /// UID, if any.
    pub uid: Option<String>,
    /// Groups.
    pub groups: Vec<String>,
    /// Extra attributes.
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The identity in a verified client certificate (CN and O), DER-encoded.
pub fn user_from_certificate(der: &[u8]) -> Option<User> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())?
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    Some(User {
        name,
        groups,
        ..Default::default()
    })
}

/// The cluster's answers: who a token is, and whether a user may do something.
#[async_trait]
pub trait Reviewer: Send + Sync + 'static {
    /// The user behind `token`, `None` if it is not valid.
    async fn review_token(&self, token: &str) -> Result<Option<User>, String>;
    /// Whether `user` may `attrs` on node `node`; `Err(reason)` when denied.
    async fn authorize(&self, user: &User, node: &str, attrs: &Attributes) -> Result<bool, String>;
}

/// TokenReview and SubjectAccessReview on the API server.
pub struct KubeReviewer {
    client: kube::Client,
}

impl KubeReviewer {
    /// Reviews through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

#[async_trait]
impl Reviewer for KubeReviewer {
    async fn review_token(&self, token: &str) -> Result<Option<User>, String> {
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                audiences: None,
            },
            ..Default::default()
        };
        let r = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| format!("TokenReview failed: {e}"))?;
        let Some(status) = r.status else {
            return Ok(None);
        };
        if status.authenticated != Some(true) {
            return Ok(None);
        }
        let Some(u) = status.user else {
            return Ok(None);
        };
        Ok(Some(User {
            name: u.username.unwrap_or_default(),
            uid: u.uid,
            groups: u.groups.unwrap_or_default(),
            extra: u.extra.unwrap_or_default(),
        }))
    }

    async fn authorize(&self, user: &User, node: &str, attrs: &Attributes) -> Result<bool, String> {
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let sar = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: user.uid.clone(),
                groups: Some(user.groups.clone()),
                extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(attrs.verb.clone()),
                    group: Some(String::new()),
                    version: Some("v1".into()),
                    resource: Some("nodes".into()),
                    subresource: Some(attrs.subresource.into()),
                    name: Some(node.into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let r = api
            .create(&PostParams::default(), &sar)
            .await
            .map_err(|e| format!("SubjectAccessReview failed: {e}"))?;
        Ok(r.status.is_some_and(|s| s.allowed))
    }
}

/// (user, verb, subresource).
type DecisionKey = (User, String, String);

/// Caches answers as the kubelet's webhook authenticator (2 min) and
/// authoriser (5 min allowed, 30 s denied) do.
pub struct CachedReviewer<R> {
    inner: R,
    tokens: Mutex<HashMap<String, (Instant, Option<User>)>>,
    decisions: Mutex<HashMap<DecisionKey, (Instant, bool)>>,
}

impl<R: Reviewer> CachedReviewer<R> {
    /// A cache in front of `inner`.
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            tokens: Mutex::new(HashMap::new()),
            decisions: Mutex::new(HashMap::new()),
        }
    }
}

const TOKEN_TTL: Duration = Duration::from_secs(120);
const ALLOWED_TTL: Duration = Duration::from_secs(300);
const DENIED_TTL: Duration = Duration::from_secs(30);

#[async_trait]
impl<R: Reviewer> Reviewer for CachedReviewer<R> {
    async fn review_token(&self, token: &str) -> Result<Option<User>, String> {
        let now = Instant::now();
        if let Some((at, u)) = self
            .tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(token)
            && now.duration_since(*at) < TOKEN_TTL
        {
            return Ok(u.clone());
        }
        let u = self.inner.review_token(token).await?;
        let mut m = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        m.retain(|_, (at, _)| now.duration_since(*at) < TOKEN_TTL);
        m.insert(token.to_string(), (now, u.clone()));
        Ok(u)
    }

    async fn authorize(&self, user: &User, node: &str, attrs: &Attributes) -> Result<bool, String> {
        let now = Instant::now();
        let key = (
            user.clone(),
            attrs.verb.clone(),
            attrs.subresource.to_string(),
        );
        if let Some((at, ok)) = self
            .decisions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            && now.duration_since(*at) < if *ok { ALLOWED_TTL } else { DENIED_TTL }
        {
            return Ok(*ok);
        }
        let ok = self.inner.authorize(user, node, attrs).await?;
        let mut m = self.decisions.lock().unwrap_or_else(|p| p.into_inner());
        m.retain(|_, (at, ok)| {
            now.duration_since(*at) < if *ok { ALLOWED_TTL } else { DENIED_TTL }
        });
        m.insert(key, (now, ok));
        Ok(ok)
    }
}

/// The kubelet's 403 text.
pub fn forbidden_message(user: &User, attrs: &Attributes) -> String {
    format!(
        "Forbidden (user={}, verb={}, resource=nodes, subresource={})",
        user.name, attrs.verb, attrs.subresource
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificate_identity_is_cn_and_o() {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kube-apiserver-kubelet-client");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "kubeadm:cluster-admins");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let u = user_from_certificate(cert.der()).unwrap();
        assert_eq!(u.name, "kube-apiserver-kubelet-client");
        assert_eq!(u.groups, vec!["kubeadm:cluster-admins"]);
        assert!(user_from_certificate(b"not a certificate").is_none());
    }

    #[test]
    fn forbidden_text_as_the_kubelet() {
        let u = User {
            name: "alice".into(),
            ..Default::default()
        };
        let a = crate::attrs::attributes("POST", "/exec/ns/p/c");
        assert_eq!(
            forbidden_message(&u, &a),
            "Forbidden (user=alice, verb=create, resource=nodes, subresource=proxy)"
        );
    }
}
