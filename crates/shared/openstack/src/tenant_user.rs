//! Keystone users the operator makes to hold a tenant's application credentials.
//!
//! Keystone lets only a user make that user's application credentials, with a token scoped to
//! the credential's project; an admin may list and delete them, not create them. So the
//! operator makes one user per `OpenstackProject` that asks for a credential, and each time it
//! needs a new credential it sets a fresh random password on that user (as admin), logs in as
//! the user on the project and creates the credential with that session. The password is
//! never stored.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use crate::adapter::{ClientOptions, CloudEndpoint, CloudSelector, Core, Request, Service, seg};
use crate::app_credential::{ApplicationCredentialAdapter, ApplicationCredentials};
use crate::error::Result;

const S: Service = Service::Identity;

/// A user as Keystone shows it, with the description that marks the operator's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescribedUser {
    /// Keystone id.
    pub id: String,
    /// Name (unique in its domain).
    pub name: String,
    /// Free text.
    pub description: String,
}

/// A user to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantUserCreate {
    /// Its domain.
    pub domain_id: String,
    /// Its name.
    pub name: String,
    /// Free text (carries the operator's mark).
    pub description: String,
    /// Its default project.
    pub default_project_id: String,
}

/// The admin side of tenant credentials (users, passwords) and the user's own side (its
/// application credentials, through a session logged in as it).
#[async_trait]
pub trait TenantUsers: Send + Sync {
    /// The user named `name` in `domain_id`, if any.
    async fn find_user(&self, domain_id: &str, name: &str) -> Result<Option<DescribedUser>>;
    /// Creates a user (enabled, without a password: it cannot log in until one is set).
    async fn create_user(&self, req: &TenantUserCreate) -> Result<DescribedUser>;
    /// Sets the user's password.
    async fn set_password(&self, user_id: &str, password: &secrecy::SecretString) -> Result<()>;
    /// Deletes the user (NotFound when gone); Keystone deletes its application credentials
    /// with it.
    async fn delete_user(&self, user_id: &str) -> Result<()>;
    /// The user's application credentials, as the admin sees them (list and delete only).
    fn admin_credentials(&self) -> Arc<dyn ApplicationCredentials>;
    /// A session of the user with `password`, scoped to `project_id`: the only way to create
    /// the user's application credentials.
    async fn login(
        &self,
        user_id: &str,
        password: &secrecy::SecretString,
        project_id: &str,
    ) -> Result<Arc<dyn ApplicationCredentials>>;
    /// How the cloud is reached, for the delivered `clouds.yaml`.
    fn endpoint(&self) -> CloudEndpoint;
}

/// A random password Keystone accepts (48 alphanumerics, about 285 bits).
pub fn random_password() -> secrecy::SecretString {
    use rand::Rng as _;
    use rand::distr::Alphanumeric;
    rand::rng()
        .sample_iter(&Alphanumeric)
        .take(48)
        .map(char::from)
        .collect::<String>()
        .into()
}

#[derive(Deserialize)]
struct WireUser {
    id: String,
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    domain_id: Option<String>,
}

impl From<WireUser> for DescribedUser {
    fn from(w: WireUser) -> Self {
        DescribedUser {
            id: w.id,
            name: w.name,
            description: w.description.unwrap_or_default(),
        }
    }
}

/// The `clouds.yaml` document (as JSON, which is YAML) logging `user_id` in on `project_id`.
fn login_document(
    e: &CloudEndpoint,
    user_id: &str,
    password: &secrecy::SecretString,
    project_id: &str,
) -> String {
    use secrecy::ExposeSecret as _;
    let mut entry = json!({
        "auth_type": "password",
        "auth": {
            "auth_url": e.auth_url,
            "user_id": user_id,
            "password": password.expose_secret(),
            "project_id": project_id,
        },
    });
    if let Some(r) = &e.region_name {
        entry["region_name"] = r.as_str().into();
    }
    if let Some(i) = &e.interface {
        entry["interface"] = i.as_str().into();
    }
    if let Some(c) = &e.cacert {
        entry["cacert"] = c.as_str().into();
    }
    if let Some(v) = e.verify {
        entry["verify"] = v.into();
    }
    json!({ "clouds": { "tenant": entry } }).to_string()
}

/// [`TenantUsers`] on the operator's own (admin) session.
#[derive(Clone, Debug)]
pub struct TenantUserAdapter {
    core: Core,
}

impl TenantUserAdapter {
    /// Keystone on `core` (an admin session).
    pub fn new(core: Core) -> Self {
        Self { core }
    }
}

#[async_trait]
impl TenantUsers for TenantUserAdapter {
    async fn find_user(&self, domain_id: &str, name: &str) -> Result<Option<DescribedUser>> {
        let r = Request::get(S, "find_user", "users")
            .query("domain_id", domain_id)
            .query("name", name);
        let v: Vec<WireUser> = self.core.send(&r).await?.json_at("users")?;
        Ok(v.into_iter()
            .find(|u| u.name == name && u.domain_id.as_deref() == Some(domain_id))
            .map(Into::into))
    }

    async fn create_user(&self, req: &TenantUserCreate) -> Result<DescribedUser> {
        let r = Request::post(S, "create_user", "users")
            .json(&json!({"user": {
                "domain_id": req.domain_id,
                "name": req.name,
                "description": req.description,
                "default_project_id": req.default_project_id,
                "enabled": true,
            }}))?
            .non_idempotent();
        let w: WireUser = self.core.send(&r).await?.json_at("user")?;
        Ok(w.into())
    }

    async fn set_password(&self, user_id: &str, password: &secrecy::SecretString) -> Result<()> {
        use secrecy::ExposeSecret as _;
        let r = Request::patch(S, "set_user_password", format!("users/{}", seg(user_id)))
            .json(&json!({"user": {"password": password.expose_secret()}}))?;
        self.core.send(&r).await.map(|_| ())
    }

    async fn delete_user(&self, user_id: &str) -> Result<()> {
        let r = Request::delete(S, "delete_user", format!("users/{}", seg(user_id)));
        self.core.send(&r).await.map(|_| ())
    }

    fn admin_credentials(&self) -> Arc<dyn ApplicationCredentials> {
        Arc::new(ApplicationCredentialAdapter::new(self.core.clone()))
    }

    async fn login(
        &self,
        user_id: &str,
        password: &secrecy::SecretString,
        project_id: &str,
    ) -> Result<Arc<dyn ApplicationCredentials>> {
        let selector = CloudSelector::Yaml {
            yaml: login_document(self.core.cloud_endpoint(), user_id, password, project_id).into(),
            cloud: "tenant".into(),
            region: None,
            origin: format!("the login of tenant credential user {user_id}"),
        };
        // Its own metrics (a label of its own would make one series per tenant).
        let core = Core::connect(&selector, ClientOptions::default()).await?;
        Ok(Arc::new(ApplicationCredentialAdapter::new(core)))
    }

    fn endpoint(&self) -> CloudEndpoint {
        self.core.cloud_endpoint().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret as _;

    #[test]
    fn passwords_are_long_random_and_alphanumeric() {
        let (a, b) = (random_password(), random_password());
        assert_eq!(a.expose_secret().len(), 48);
        assert!(a.expose_secret().bytes().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a.expose_secret(), b.expose_secret());
    }

    #[test]
    fn the_login_is_by_user_id_on_the_project_with_the_cloud_settings() {
        let e = CloudEndpoint {
            auth_url: "http://k:5000/v3".into(),
            region_name: Some("R".into()),
            interface: Some("public".into()),
            ..Default::default()
        };
        let doc: serde_json::Value =
            serde_json::from_str(&login_document(&e, "u", &"pw".to_string().into(), "p")).unwrap();
        let t = &doc["clouds"]["tenant"];
        assert_eq!(t["auth"]["user_id"], "u");
        assert_eq!(t["auth"]["project_id"], "p");
        assert_eq!(t["auth"]["password"], "pw");
        assert_eq!(t["region_name"], "R");
        assert!(t.get("cacert").is_none());
    }
}
