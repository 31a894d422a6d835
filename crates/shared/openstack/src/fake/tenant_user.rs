//! Fake tenant credential users and their application credentials (Keystone's rules: a user
//! is unique by name in its domain, only a session of the user creates its credentials,
//! deleting the user deletes them).

use std::sync::Arc;

use async_trait::async_trait;
use secrecy::ExposeSecret as _;

use super::{FakeCloud, new_hex_id};
use crate::adapter::CloudEndpoint;
use crate::app_credential::{
    ApplicationCredential, ApplicationCredentialCreate, ApplicationCredentials,
    CreatedApplicationCredential,
};
use crate::error::{Error, Result};
use crate::model::User;
use crate::tenant_user::{DescribedUser, TenantUserCreate, TenantUsers};

/// [`TenantUsers`] on a [`FakeCloud`] (see [`FakeCloud::enable_tenant_users`]); every call is
/// counted as the fake's others are (`identity.create_tenant_user`, ...).
#[derive(Clone, Debug)]
pub struct FakeTenantUsers {
    fake: FakeCloud,
}

impl FakeTenantUsers {
    /// The tenant users of `fake`.
    pub fn new(fake: FakeCloud) -> Self {
        Self { fake }
    }
}

fn not_found(user_id: &str) -> Error {
    Error::not_found(format!("keystone: Could not find user: {user_id}."))
}

#[async_trait]
impl TenantUsers for FakeTenantUsers {
    async fn find_user(&self, domain_id: &str, name: &str) -> Result<Option<DescribedUser>> {
        self.fake
            .run("identity.find_tenant_user", |st| {
                Ok(st
                    .users
                    .values()
                    .find(|u| u.domain_id == domain_id && u.name == name)
                    .map(|u| DescribedUser {
                        id: u.id.clone(),
                        name: u.name.clone(),
                        description: st
                            .tenant_user_meta
                            .get(&u.id)
                            .map(|m| m.0.clone())
                            .unwrap_or_default(),
                    }))
            })
            .await
    }

    async fn create_user(&self, req: &TenantUserCreate) -> Result<DescribedUser> {
        self.fake
            .run("identity.create_tenant_user", |st| {
                if st
                    .users
                    .values()
                    .any(|u| u.domain_id == req.domain_id && u.name == req.name)
                {
                    return Err(Error::conflict(format!(
                        "keystone: Duplicate entry found with name {}.",
                        req.name
                    )));
                }
                let u = User {
                    id: new_hex_id(),
                    name: req.name.clone(),
                    domain_id: req.domain_id.clone(),
                    enabled: true,
                };
                st.users.insert(u.id.clone(), u.clone());
                st.tenant_user_meta
                    .insert(u.id.clone(), (req.description.clone(), None));
                Ok(DescribedUser {
                    id: u.id,
                    name: u.name,
                    description: req.description.clone(),
                })
            })
            .await
    }

    async fn set_password(&self, user_id: &str, password: &secrecy::SecretString) -> Result<()> {
        self.fake
            .run("identity.set_user_password", |st| {
                if !st.users.contains_key(user_id) {
                    return Err(not_found(user_id));
                }
                st.tenant_user_meta
                    .entry(user_id.to_string())
                    .or_default()
                    .1 = Some(password.expose_secret().to_string());
                Ok(())
            })
            .await
    }

    async fn delete_user(&self, user_id: &str) -> Result<()> {
        self.fake
            .run("identity.delete_tenant_user", |st| {
                st.users.remove(user_id).ok_or_else(|| not_found(user_id))?;
                st.tenant_user_meta.remove(user_id);
                st.app_credentials.remove(user_id);
                st.assignments
                    .retain(|(_, a, _)| *a != crate::model::Actor::User(user_id.to_string()));
                Ok(())
            })
            .await
    }

    fn admin_credentials(&self) -> Arc<dyn ApplicationCredentials> {
        Arc::new(FakeCredentials {
            fake: self.fake.clone(),
            session_of: None,
        })
    }

    async fn login(
        &self,
        user_id: &str,
        password: &secrecy::SecretString,
        _project_id: &str,
    ) -> Result<Arc<dyn ApplicationCredentials>> {
        self.fake
            .run("identity.login_tenant_user", |st| {
                let set = st
                    .tenant_user_meta
                    .get(user_id)
                    .and_then(|m| m.1.as_deref());
                if set != Some(password.expose_secret()) {
                    return Err(Error::Unauthorized {
                        message: format!("keystone: the password of user {user_id} is wrong"),
                    });
                }
                Ok(())
            })
            .await?;
        Ok(Arc::new(FakeCredentials {
            fake: self.fake.clone(),
            session_of: Some(user_id.to_string()),
        }))
    }

    fn endpoint(&self) -> CloudEndpoint {
        CloudEndpoint {
            auth_url: "http://keystone.fake:5000/v3".into(),
            region_name: Some("RegionOne".into()),
            ..Default::default()
        }
    }
}

/// A user's application credentials, seen by the admin (`session_of: None`: list and delete)
/// or by a session of the user (which alone may create them).
struct FakeCredentials {
    fake: FakeCloud,
    session_of: Option<String>,
}

#[async_trait]
impl ApplicationCredentials for FakeCredentials {
    async fn list_application_credentials(
        &self,
        user_id: &str,
    ) -> Result<Vec<ApplicationCredential>> {
        self.fake
            .run("identity.list_application_credentials", |st| {
                if !st.users.contains_key(user_id) {
                    return Err(not_found(user_id));
                }
                Ok(st.app_credentials.get(user_id).cloned().unwrap_or_default())
            })
            .await
    }

    async fn create_application_credential(
        &self,
        user_id: &str,
        req: &ApplicationCredentialCreate,
    ) -> Result<CreatedApplicationCredential> {
        self.fake
            .run("identity.create_application_credential", |st| {
                if self.session_of.as_deref() != Some(user_id) {
                    return Err(Error::forbidden(
                        "keystone: only the user may create its application credentials",
                    ));
                }
                let creds = st.app_credentials.entry(user_id.to_string()).or_default();
                if creds.iter().any(|c| c.name == req.name) {
                    return Err(Error::conflict(format!(
                        "keystone: Duplicate entry found with name {}.",
                        req.name
                    )));
                }
                let c = ApplicationCredential {
                    id: new_hex_id(),
                    name: req.name.clone(),
                    expires_at: req.expires_at,
                    unrestricted: req.unrestricted,
                    role_ids: req.role_ids.clone(),
                };
                creds.push(c.clone());
                Ok(CreatedApplicationCredential {
                    credential: c,
                    secret: new_hex_id().into(),
                })
            })
            .await
    }

    async fn delete_application_credential(&self, user_id: &str, id: &str) -> Result<()> {
        self.fake
            .run("identity.delete_application_credential", |st| {
                let creds = st.app_credentials.entry(user_id.to_string()).or_default();
                let before = creds.len();
                creds.retain(|c| c.id != id);
                if creds.len() == before {
                    return Err(Error::not_found(format!(
                        "keystone: Could not find Application Credential: {id}."
                    )));
                }
                Ok(())
            })
            .await
    }
}
