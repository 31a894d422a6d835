//! keystonemiddleware's `[keystone_authtoken]`: how an API service validates tokens and whom it
//! authenticates as. Every API service but Keystone renders the same block, so it is written
//! once here.

use crate::ini::Ini;

/// How a service validates tokens and whom it authenticates as (`[keystone_authtoken]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeystoneAuth {
    /// Keystone URL the middleware talks to, e.g. `http://keystone-api.os.svc:5000/v3`.
    pub auth_url: String,
    /// Keystone URL clients are sent to in `WWW-Authenticate` (the public identity endpoint).
    pub www_authenticate_uri: String,
    /// Region of the deployed Keystone's identity endpoints: the middleware finds Keystone's
    /// internal endpoint in the catalog there.
    pub region: String,
    /// Service user the service authenticates as.
    pub username: String,
    /// That user's password (generated).
    pub password: String,
    /// Project of the service users.
    pub project: String,
}

/// The options of `[keystone_authtoken]` every service owns (refused as overrides).
pub use controlplane_api::validation::AUTHTOKEN_OWNED_OPTIONS as OWNED_OPTIONS;

/// Sets `[keystone_authtoken]`; `cache` is the middleware's token cache (with its TLS and
/// SASL), none without servers.
pub fn set(ini: &mut Ini, k: &KeystoneAuth, cache: &crate::cache::Cache) {
    ini.set("keystone_authtoken", "auth_type", "password")
        .set("keystone_authtoken", "auth_url", k.auth_url.clone())
        .set(
            "keystone_authtoken",
            "www_authenticate_uri",
            k.www_authenticate_uri.clone(),
        )
        .set("keystone_authtoken", "region_name", k.region.clone())
        .set("keystone_authtoken", "username", k.username.clone())
        .set("keystone_authtoken", "password", k.password.clone())
        .set("keystone_authtoken", "project_name", k.project.clone())
        .set("keystone_authtoken", "user_domain_name", "Default")
        .set("keystone_authtoken", "project_domain_name", "Default")
        // Service tokens (Nova's, sent with a user's) count only from users with `service`.
        .set("keystone_authtoken", "service_token_roles_required", "true");
    crate::cache::set_authtoken(ini, cache);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_owned_option_is_rendered() {
        let k = KeystoneAuth {
            auth_url: "http://keystone:5000/v3".into(),
            www_authenticate_uri: "https://keystone.example.org/v3".into(),
            region: "RegionOne".into(),
            username: "svc".into(),
            password: "pw".into(),
            project: "service".into(),
        };
        let mut ini = Ini::default();
        set(&mut ini, &k, &crate::cache::full());
        for key in OWNED_OPTIONS {
            assert!(
                ini.get("keystone_authtoken", key).is_some(),
                "[keystone_authtoken] {key} is owned but not rendered"
            );
        }
    }
}
