//! Keystone application credentials of the session's own user: what credential rotation needs.
//!
//! Kept apart from [`crate::Identity`] (the resource operator's domains, projects, users and
//! roles) because only rotation uses it and it acts on the caller's own user: Keystone lets a
//! user (or an *unrestricted* application credential of that user) manage that user's
//! application credentials, and nobody else's.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use crate::adapter::{Core, Request, Service, seg};
use crate::error::{Error, Result};

const S: Service = Service::Identity;

/// An application credential as Keystone lists it (never its secret).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplicationCredential {
    /// Keystone's id.
    pub id: String,
    /// Its name (unique per user).
    pub name: String,
    /// When it stops working; `None`: never.
    pub expires_at: Option<jiff::Timestamp>,
    /// Whether it may create and delete application credentials (and trusts).
    pub unrestricted: bool,
    /// The ids of its roles.
    pub role_ids: Vec<String>,
}

/// A credential just created: the only time Keystone tells its secret.
#[derive(Clone, Debug)]
pub struct CreatedApplicationCredential {
    /// What Keystone stored.
    pub credential: ApplicationCredential,
    /// Its secret.
    pub secret: secrecy::SecretString,
}

/// An application credential to create for the caller's user, on the token's project.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplicationCredentialCreate {
    /// Name (unique per user).
    pub name: String,
    /// Free text.
    pub description: String,
    /// Expiry; `None`: never.
    pub expires_at: Option<jiff::Timestamp>,
    /// Whether the new credential may itself create application credentials.
    pub unrestricted: bool,
    /// Role ids (a subset of the token's); empty: all of the token's roles.
    pub role_ids: Vec<String>,
}

/// The application credentials of one user.
#[async_trait]
pub trait ApplicationCredentials: Send + Sync {
    /// The user's application credentials.
    async fn list_application_credentials(
        &self,
        user_id: &str,
    ) -> Result<Vec<ApplicationCredential>>;
    /// Create one (a POST: never repeated after an ambiguous failure; find it by name).
    async fn create_application_credential(
        &self,
        user_id: &str,
        req: &ApplicationCredentialCreate,
    ) -> Result<CreatedApplicationCredential>;
    /// Delete one (NotFound when it is gone already). Keystone stops accepting it, and the
    /// tokens issued from it, at once.
    async fn delete_application_credential(&self, user_id: &str, id: &str) -> Result<()>;
}

#[derive(Deserialize)]
struct WireRole {
    id: String,
}

#[derive(Deserialize)]
struct WireCredential {
    id: String,
    name: String,
    #[serde(default)]
    expires_at: Option<String>,
    #[serde(default)]
    unrestricted: Option<bool>,
    #[serde(default)]
    roles: Vec<WireRole>,
    #[serde(default)]
    secret: Option<String>,
}

/// Keystone's time stamps: `2026-12-06T17:00:00.000000` (UTC, no zone), or with a zone.
pub fn parse_keystone_time(s: &str) -> Result<jiff::Timestamp> {
    if let Ok(t) = s.parse::<jiff::Timestamp>() {
        return Ok(t);
    }
    s.parse::<jiff::civil::DateTime>()
        .and_then(|d| d.to_zoned(jiff::tz::TimeZone::UTC))
        .map(|z| z.timestamp())
        .map_err(|e| Error::config(format!("keystone: unreadable time {s:?}: {e}")))
}

/// The time as Keystone takes it in a create (UTC, seconds).
pub fn keystone_time(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

impl TryFrom<WireCredential> for ApplicationCredential {
    type Error = Error;
    fn try_from(w: WireCredential) -> Result<Self> {
        Ok(Self {
            id: w.id,
            name: w.name,
            expires_at: w
                .expires_at
                .as_deref()
                .map(parse_keystone_time)
                .transpose()?,
            unrestricted: w.unrestricted.unwrap_or(false),
            role_ids: w.roles.into_iter().map(|r| r.id).collect(),
        })
    }
}

/// The create body: roles only when given (else Keystone takes all of the token's).
pub(crate) fn create_body(req: &ApplicationCredentialCreate) -> serde_json::Value {
    let mut c = json!({
        "name": req.name,
        "description": req.description,
        "unrestricted": req.unrestricted,
        "expires_at": req.expires_at.map(keystone_time),
    });
    if !req.role_ids.is_empty() {
        c["roles"] = req.role_ids.iter().map(|id| json!({ "id": id })).collect();
    }
    json!({ "application_credential": c })
}

/// The application credentials on the shared client core.
#[derive(Clone, Debug)]
pub struct ApplicationCredentialAdapter {
    core: Core,
}

impl ApplicationCredentialAdapter {
    /// Keystone on `core`.
    pub fn new(core: Core) -> Self {
        Self { core }
    }
}

#[async_trait]
impl ApplicationCredentials for ApplicationCredentialAdapter {
    async fn list_application_credentials(
        &self,
        user_id: &str,
    ) -> Result<Vec<ApplicationCredential>> {
        let r = Request::get(
            S,
            "list_application_credentials",
            format!("users/{}/application_credentials", seg(user_id)),
        );
        let v: Vec<WireCredential> = self.core.list_all(r, "application_credentials").await?;
        v.into_iter().map(TryInto::try_into).collect()
    }

    async fn create_application_credential(
        &self,
        user_id: &str,
        req: &ApplicationCredentialCreate,
    ) -> Result<CreatedApplicationCredential> {
        let r = Request::post(
            S,
            "create_application_credential",
            format!("users/{}/application_credentials", seg(user_id)),
        )
        .json(&create_body(req))?
        .non_idempotent();
        let mut w: WireCredential = self
            .core
            .send(&r)
            .await?
            .json_at("application_credential")?;
        let secret = w.secret.take().ok_or_else(|| Error::Transient {
            message: format!(
                "keystone: the new application credential {:?} came without its secret",
                w.name
            ),
        })?;
        Ok(CreatedApplicationCredential {
            credential: w.try_into()?,
            secret: secret.into(),
        })
    }

    async fn delete_application_credential(&self, user_id: &str, id: &str) -> Result<()> {
        let r = Request::delete(
            S,
            "delete_application_credential",
            format!("users/{}/application_credentials/{}", seg(user_id), seg(id)),
        );
        self.core.send(&r).await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keystone_times_without_a_zone_are_utc() {
        let t = parse_keystone_time("2026-12-06T17:00:00.000000").unwrap();
        assert_eq!(
            t,
            "2026-12-06T17:00:00Z".parse::<jiff::Timestamp>().unwrap()
        );
        assert_eq!(
            parse_keystone_time("2026-12-06T17:00:00Z").unwrap(),
            t,
            "a zone is read too"
        );
        assert_eq!(keystone_time(t), "2026-12-06T17:00:00Z");
        assert!(parse_keystone_time("tomorrow").is_err());
    }

    #[test]
    fn create_body_sends_roles_only_when_given() {
        let mut req = ApplicationCredentialCreate {
            name: "n".into(),
            description: "d".into(),
            expires_at: None,
            unrestricted: true,
            role_ids: vec![],
        };
        assert_eq!(
            create_body(&req),
            json!({"application_credential": {
                "name": "n", "description": "d", "unrestricted": true, "expires_at": null}})
        );
        req.role_ids = vec!["r1".into()];
        req.expires_at = Some("2026-12-06T17:00:00Z".parse().unwrap());
        let b = create_body(&req);
        assert_eq!(b["application_credential"]["roles"], json!([{"id": "r1"}]));
        assert_eq!(
            b["application_credential"]["expires_at"],
            json!("2026-12-06T17:00:00Z")
        );
    }

    #[test]
    fn parses_a_listed_credential() {
        let w: WireCredential = serde_json::from_value(json!({
            "id": "a", "name": "oo-east-1", "expires_at": null, "unrestricted": true,
            "project_id": "p", "roles": [{"id": "r", "name": "admin"}]
        }))
        .unwrap();
        let c: ApplicationCredential = w.try_into().unwrap();
        assert_eq!(
            (c.expires_at, c.unrestricted, c.role_ids),
            (None, true, vec!["r".to_string()])
        );
    }
}
