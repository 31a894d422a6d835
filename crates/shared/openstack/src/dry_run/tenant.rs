//! The dry run of tenant credentials ([`TenantUsers`] and the [`ApplicationCredentials`] it
//! hands out): the users and credentials `OpenstackProject` `spec.applicationCredential`
//! would make, recorded as intents and kept in the plan's overlay like any other object.
//!
//! Reads go to the wrapped cloud (never with a placeholder id: the cloud has nothing of a
//! user this plan would create); writes are recorded and never sent, and the login a new
//! credential needs is not made at all (no password was really set). A credential this plan
//! would create carries a placeholder id and a placeholder secret, never a real one.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{FieldChange, IDENTITY, Intent, Journal, Op, is_new_id};
use crate::adapter::CloudEndpoint;
use crate::app_credential::{
    ApplicationCredential, ApplicationCredentialCreate, ApplicationCredentials,
    CreatedApplicationCredential, keystone_time,
};
use crate::error::{Error, Result};
use crate::tenant_user::{DescribedUser, TenantUserCreate, TenantUsers};
use crate::traits::Identity;

const USER: &str = "user";
const CREDENTIAL: &str = "application credential";
/// What a planned credential's secret reads as (it is never known to a plan).
const PLACEHOLDER_SECRET: &str = "known-after-apply-application-credential-secret";

/// A user in the overlay: what [`crate::model::User`] reads, and the marks a tenant
/// credential user carries.
#[derive(Default, Serialize, Deserialize)]
struct PlannedUser {
    id: String,
    name: String,
    domain_id: String,
    enabled: bool,
    description: String,
    default_project_id: String,
}

/// The dry run of the wrapped cloud's tenant users.
pub(super) struct DryRunTenantUsers {
    inner: Arc<dyn TenantUsers>,
    identity: Arc<dyn Identity>,
    j: Arc<Journal>,
}

impl DryRunTenantUsers {
    pub(super) fn new(
        inner: Arc<dyn TenantUsers>,
        identity: Arc<dyn Identity>,
        j: Arc<Journal>,
    ) -> Self {
        Self { inner, identity, j }
    }

    fn credentials(&self, session: bool) -> Arc<dyn ApplicationCredentials> {
        Arc::new(DryRunCredentials {
            // The admin's list, also behind a planned session: the user's own would need
            // the login a plan does not make, and lists the same credentials.
            inner: self.inner.admin_credentials(),
            j: self.j.clone(),
            session,
        })
    }
}

fn described(v: &Value) -> Option<DescribedUser> {
    Some(DescribedUser {
        id: v.get("id")?.as_str()?.to_string(),
        name: v.get("name")?.as_str()?.to_string(),
        description: v
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
    })
}

#[async_trait]
impl TenantUsers for DryRunTenantUsers {
    async fn find_user(&self, domain_id: &str, name: &str) -> Result<Option<DescribedUser>> {
        if !is_new_id(domain_id)
            && let Some(u) = self.inner.find_user(domain_id, name).await?
            && !self.j.is_deleted(USER, &u.id)
        {
            self.j.remember_as(
                USER,
                &u.id,
                &json!({"id": u.id, "name": u.name, "domain_id": domain_id,
                        "description": u.description}),
            );
            return Ok(Some(u));
        }
        let planned: Vec<Value> = self.j.overlay(USER);
        Ok(planned
            .iter()
            .filter(|o| o.get("name").and_then(Value::as_str) == Some(name))
            .find(|o| o.get("domain_id").and_then(Value::as_str) == Some(domain_id))
            .and_then(described))
    }

    async fn create_user(&self, req: &TenantUserCreate) -> Result<DescribedUser> {
        let made: PlannedUser = self.j.create(
            IDENTITY,
            USER,
            &json!({
                "domain_id": req.domain_id,
                "name": req.name,
                "description": req.description,
                "default_project_id": req.default_project_id,
                "enabled": true,
            }),
        )?;
        Ok(DescribedUser {
            id: made.id,
            name: made.name,
            description: made.description,
        })
    }

    async fn set_password(&self, user_id: &str, _password: &secrecy::SecretString) -> Result<()> {
        self.j.record(Intent {
            op: Op::Update,
            service: IDENTITY,
            kind: "user password",
            label: self.j.name_of(USER, user_id),
            id: (!is_new_id(user_id)).then(|| user_id.to_string()),
            changes: vec![FieldChange {
                field: "password".into(),
                old: None,
                new: Some(json!("(random, not shown)")),
            }],
        });
        Ok(())
    }

    async fn delete_user(&self, user_id: &str) -> Result<()> {
        // A user known by its recorded id only is read once, so the plan names it.
        if !is_new_id(user_id)
            && self.j.seen(USER, user_id).is_none()
            && let Ok(u) = self.identity.get_user(user_id).await
        {
            self.j.remember(USER, &u);
        }
        self.j.delete(IDENTITY, USER, user_id)
    }

    fn admin_credentials(&self) -> Arc<dyn ApplicationCredentials> {
        self.credentials(false)
    }

    async fn login(
        &self,
        _user_id: &str,
        _password: &secrecy::SecretString,
        _project_id: &str,
    ) -> Result<Arc<dyn ApplicationCredentials>> {
        Ok(self.credentials(true))
    }

    fn endpoint(&self) -> CloudEndpoint {
        self.inner.endpoint()
    }
}

/// A user's application credentials in a plan: the cloud's, less those the plan deletes,
/// plus those it creates. `session`: a (planned) session of the user, the only one that may
/// create them, as in Keystone.
struct DryRunCredentials {
    inner: Arc<dyn ApplicationCredentials>,
    j: Arc<Journal>,
    session: bool,
}

fn credential_value(user_id: &str, c: &ApplicationCredential) -> Value {
    json!({
        "id": c.id,
        "name": c.name,
        "user_id": user_id,
        "expires_at": c.expires_at.map(|t| t.to_string()),
        "unrestricted": c.unrestricted,
        "role_ids": c.role_ids,
    })
}

fn credential_of(v: &Value) -> Option<ApplicationCredential> {
    Some(ApplicationCredential {
        id: v.get("id")?.as_str()?.to_string(),
        name: v.get("name")?.as_str()?.to_string(),
        expires_at: match v.get("expires_at").and_then(Value::as_str) {
            Some(t) => Some(t.parse().ok()?),
            None => None,
        },
        unrestricted: v.get("unrestricted")?.as_bool()?,
        role_ids: serde_json::from_value(v.get("role_ids")?.clone()).ok()?,
    })
}

#[async_trait]
impl ApplicationCredentials for DryRunCredentials {
    async fn list_application_credentials(
        &self,
        user_id: &str,
    ) -> Result<Vec<ApplicationCredential>> {
        let mut out = Vec::new();
        if !is_new_id(user_id) {
            for c in self.inner.list_application_credentials(user_id).await? {
                if self.j.is_deleted(CREDENTIAL, &c.id) {
                    continue;
                }
                self.j
                    .remember_as(CREDENTIAL, &c.id, &credential_value(user_id, &c));
                out.push(c);
            }
        }
        let planned: Vec<Value> = self.j.overlay(CREDENTIAL);
        out.extend(
            planned
                .iter()
                .filter(|v| v.get("user_id").and_then(Value::as_str) == Some(user_id))
                .filter_map(credential_of),
        );
        Ok(out)
    }

    async fn create_application_credential(
        &self,
        user_id: &str,
        req: &ApplicationCredentialCreate,
    ) -> Result<CreatedApplicationCredential> {
        if !self.session {
            // Keystone's rule, kept so a plan fails where the pass would.
            return Err(Error::forbidden(format!(
                "keystone: only user {user_id} may create its application credentials (dry run)"
            )));
        }
        let credential = ApplicationCredential {
            id: self.j.new_id(CREDENTIAL),
            name: req.name.clone(),
            expires_at: req.expires_at,
            unrestricted: req.unrestricted,
            role_ids: req.role_ids.clone(),
        };
        let roles: Vec<String> = req
            .role_ids
            .iter()
            .map(|r| self.j.name_of("role", r))
            .collect();
        let field = |name: &str, v: Value| FieldChange {
            field: name.into(),
            old: None,
            new: Some(v),
        };
        let mut changes = vec![
            field("name", json!(req.name)),
            field(
                "expires_at",
                req.expires_at
                    .map_or(json!("never"), |t| json!(keystone_time(t))),
            ),
        ];
        if !roles.is_empty() {
            changes.push(field("roles", json!(roles)));
        }
        changes.push(field("unrestricted", json!(req.unrestricted)));
        self.j.record(Intent {
            op: Op::Create,
            service: IDENTITY,
            kind: CREDENTIAL,
            label: req.name.clone(),
            id: None,
            changes,
        });
        self.j
            .overlay_put(CREDENTIAL, credential_value(user_id, &credential));
        Ok(CreatedApplicationCredential {
            credential,
            secret: PLACEHOLDER_SECRET.to_string().into(),
        })
    }

    async fn delete_application_credential(&self, _user_id: &str, id: &str) -> Result<()> {
        self.j.delete(IDENTITY, CREDENTIAL, id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dry_run::NEW_ID_PREFIX;
    use crate::fake::FakeCloud;
    use crate::tenant_user::random_password;

    /// A fake that can make tenant credentials, with one project, and its dry run.
    async fn setup() -> (FakeCloud, String, Arc<dyn TenantUsers>, Arc<Journal>) {
        let fake = FakeCloud::new();
        fake.enable_tenant_users();
        let p = crate::dry_run::tests::real_project(&fake, "default").await;
        let (cloud, journal) = super::super::dry_run(fake.cloud());
        let users = cloud.identity.tenant_users().expect("the fake's wrapped");
        fake.reset_calls();
        (fake, p.id, users, journal)
    }

    fn user_req(project_id: &str) -> TenantUserCreate {
        TenantUserCreate {
            domain_id: "default".into(),
            name: "p-tenant".into(),
            description: "ours".into(),
            default_project_id: project_id.into(),
        }
    }

    fn create(name: &str) -> ApplicationCredentialCreate {
        ApplicationCredentialCreate {
            name: name.into(),
            description: "d".into(),
            expires_at: Some("2030-01-01T00:00:00Z".parse().unwrap()),
            unrestricted: false,
            role_ids: vec![],
        }
    }

    #[tokio::test]
    async fn a_new_users_credential_is_planned_and_nothing_is_sent() {
        let (fake, pid, users, journal) = setup().await;
        assert_eq!(users.find_user("default", "p-tenant").await.unwrap(), None);
        let u = users.create_user(&user_req(&pid)).await.unwrap();
        assert!(is_new_id(&u.id), "{}", u.id);
        // A later read of the same plan finds the planned user.
        let found = users.find_user("default", "p-tenant").await.unwrap();
        assert_eq!(found, Some(u.clone()));
        let password = random_password();
        users.set_password(&u.id, &password).await.unwrap();
        let admin = users.admin_credentials();
        assert!(
            admin
                .create_application_credential(&u.id, &create("c-1"))
                .await
                .is_err(),
            "the admin may not create a user's credential, in a plan neither"
        );
        let own = users.login(&u.id, &password, &pid).await.unwrap();
        let made = own
            .create_application_credential(&u.id, &create("c-1"))
            .await
            .unwrap();
        assert!(is_new_id(&made.credential.id));
        {
            use secrecy::ExposeSecret as _;
            assert!(made.secret.expose_secret().starts_with(NEW_ID_PREFIX));
        }
        // The planned credential is listed, without asking the cloud about a placeholder.
        let listed = admin.list_application_credentials(&u.id).await.unwrap();
        assert_eq!(listed, vec![made.credential.clone()]);
        admin
            .delete_application_credential(&u.id, &made.credential.id)
            .await
            .unwrap();
        assert!(
            admin
                .list_application_credentials(&u.id)
                .await
                .unwrap()
                .is_empty()
        );
        users.delete_user(&u.id).await.unwrap();

        let intents = journal.take();
        let ops: Vec<(Op, &str, &str)> = intents
            .iter()
            .map(|i| (i.op, i.kind, i.label.as_str()))
            .collect();
        assert_eq!(
            ops,
            [
                (Op::Create, "user", "p-tenant"),
                (Op::Update, "user password", "p-tenant"),
                (Op::Create, "application credential", "c-1"),
                (Op::Delete, "application credential", "c-1"),
                (Op::Delete, "user", "p-tenant"),
            ]
        );
        let fields =
            |i: &Intent| -> Vec<String> { i.changes.iter().map(|c| c.field.clone()).collect() };
        assert_eq!(
            fields(&intents[0]),
            [
                "default_project_id",
                "description",
                "domain_id",
                "enabled",
                "name"
            ]
        );
        assert_eq!(
            intents[1].changes[0].new,
            Some(json!("(random, not shown)"))
        );
        assert_eq!(fields(&intents[2]), ["name", "expires_at", "unrestricted"]);
        // No secret reaches the journal.
        {
            use secrecy::ExposeSecret as _;
            let all = serde_json::to_string(&intents).unwrap();
            assert!(!all.contains(password.expose_secret()));
        }
        assert_eq!(fake.writes(), 0, "{:?}", fake.write_calls());
        assert!(fake.reads() > 0, "the user was looked for in the cloud");
        assert!(fake.state().users.values().all(|u| u.name != "p-tenant"));
    }

    #[tokio::test]
    async fn an_existing_users_credentials_are_read_and_their_deletes_recorded() {
        let (fake, pid, users, journal) = setup().await;
        // Made for real, on the fake itself.
        let real = crate::fake::FakeTenantUsers::new(fake.clone());
        let u = real.create_user(&user_req(&pid)).await.unwrap();
        let pw = random_password();
        real.set_password(&u.id, &pw).await.unwrap();
        let old = real
            .login(&u.id, &pw, &pid)
            .await
            .unwrap()
            .create_application_credential(&u.id, &create("c-1"))
            .await
            .unwrap();
        fake.reset_calls();

        assert_eq!(
            users.find_user("default", "p-tenant").await.unwrap(),
            Some(u.clone())
        );
        let admin = users.admin_credentials();
        let own = users.login(&u.id, &random_password(), &pid).await.unwrap();
        let new = own
            .create_application_credential(&u.id, &create("c-2"))
            .await
            .unwrap();
        let names = |l: Vec<ApplicationCredential>| -> Vec<String> {
            l.into_iter().map(|c| c.name).collect()
        };
        assert_eq!(
            names(admin.list_application_credentials(&u.id).await.unwrap()),
            ["c-1", "c-2"],
            "the cloud's and the planned one"
        );
        admin
            .delete_application_credential(&u.id, &old.credential.id)
            .await
            .unwrap();
        assert_eq!(
            names(admin.list_application_credentials(&u.id).await.unwrap()),
            ["c-2"],
            "a credential the plan deletes is gone from later reads"
        );
        users.set_password(&u.id, &random_password()).await.unwrap();
        users.delete_user(&u.id).await.unwrap();
        assert_eq!(users.find_user("default", "p-tenant").await.unwrap(), None);

        let intents = journal.take();
        let ops: Vec<(Op, &str, &str, Option<&str>)> = intents
            .iter()
            .map(|i| (i.op, i.kind, i.label.as_str(), i.id.as_deref()))
            .collect();
        assert_eq!(
            ops,
            [
                (Op::Create, "application credential", "c-2", None),
                (
                    Op::Delete,
                    "application credential",
                    "c-1",
                    Some(old.credential.id.as_str())
                ),
                (Op::Update, "user password", "p-tenant", Some(u.id.as_str())),
                (Op::Delete, "user", "p-tenant", Some(u.id.as_str())),
            ]
        );
        assert!(!new.credential.id.is_empty());
        assert_eq!(fake.writes(), 0, "{:?}", fake.write_calls());
        assert_eq!(
            fake.state().app_credentials.get(&u.id).map(Vec::len),
            Some(1),
            "the real credential is still there"
        );
    }

    #[tokio::test]
    async fn a_cloud_without_tenant_users_has_none_in_a_plan_either() {
        let (cloud, _) = super::super::dry_run(FakeCloud::new().cloud());
        assert!(cloud.identity.tenant_users().is_none());
    }
}
