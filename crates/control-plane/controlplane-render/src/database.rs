//! A service's database: its connection URL, and the database Job that creates the database
//! and the service's user with the admin credentials of the `database` external service. Every
//! service (Keystone, Placement, ...) uses the same Job, so it is written once here.

use std::collections::BTreeMap;

use controlplane_api::external::VerifyMode;

use crate::hash::InputHash;

/// A service's database connection, resolved from the `database` external service and the
/// generated credentials.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Database {
    /// Host name or address.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Database name.
    pub name: String,
    /// User the service connects as.
    pub user: String,
    /// That user's password (generated).
    pub password: String,
    /// Path of the CA bundle when the database is reached over TLS.
    pub ca_file: Option<String>,
    /// How the server's certificate is verified (the external service's `tls.verify`).
    pub verify: VerifyMode,
    /// The name the server's certificate must carry (`tls.serverName`), when not the host.
    pub server_name: Option<String>,
}

impl Database {
    /// The SQLAlchemy URL (`mysql+pymysql://...`). With TLS, SQLAlchemy hands `ssl_ca` and
    /// `ssl_check_hostname` to PyMySQL as its `ssl` dict: `Full` verifies chain and host name;
    /// `CaOnly` the chain only; `Insecure` gives no CA, so PyMySQL verifies nothing. PyMySQL
    /// always checks the name it connects to and has no option for another, so a `serverName`
    /// makes oslo.db verify the chain only (the operator's checks and the db-init Job verify the
    /// name).
    pub fn url(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let mut url = format!(
            "mysql+pymysql://{}:{}@{}:{}/{}?charset=utf8mb4",
            self.user, self.password, host, self.port, self.name
        );
        if let Some(ca) = &self.ca_file {
            if self.verify != VerifyMode::Insecure {
                url.push_str("&ssl_ca=");
                url.push_str(ca);
            }
            if !self.checks_host_name() {
                url.push_str("&ssl_check_hostname=false");
            }
        }
        url
    }

    /// Whether a client that can only check the host it connects to should check it.
    fn checks_host_name(&self) -> bool {
        self.verify == VerifyMode::Full && self.server_name.is_none()
    }
}

/// The Python script of the database Job: creates the database and the service user (or
/// resets its password) with the admin credentials of the `database` external service. It runs
/// with the service image's own PyMySQL, so no extra image is needed. Every value comes from
/// the environment; names were validated to `[A-Za-z0-9_]` before they get here.
pub const DB_INIT_SCRIPT: &str = r#"import os, sys
import pymysql
env = os.environ
name, user, pw = env["DB_NAME"], env["DB_USER"], env["DB_PASSWORD"]
for v in (name, user):
    if not v.replace("_", "").isalnum():
        sys.exit("refusing database or user name %r" % v)
ssl = None
if env.get("DB_CA_FILE"):
    import ssl as tls
    # The external service's tls.verify and tls.serverName, as the operator's own check
    # applies them: Full checks chain and name (serverName when given), CaOnly the chain only,
    # Insecure nothing.
    verify, server_name = env.get("DB_TLS_VERIFY", "Full"), env.get("DB_TLS_SERVER_NAME")

    class Context(tls.SSLContext):
        def wrap_socket(self, sock, *args, **kwargs):
            if server_name:
                kwargs["server_hostname"] = server_name
            return super().wrap_socket(sock, *args, **kwargs)

    ssl = Context(tls.PROTOCOL_TLS_CLIENT)
    ssl.verify_flags &= ~tls.VERIFY_X509_STRICT  # as PyMySQL's own context
    if verify == "Insecure":
        ssl.check_hostname = False
        ssl.verify_mode = tls.CERT_NONE
    else:
        ssl.load_verify_locations(cafile=env["DB_CA_FILE"])
        ssl.check_hostname = verify == "Full"
conn = pymysql.connect(host=env["DB_HOST"], port=int(env["DB_PORT"]),
                       user=env["DB_ADMIN_USER"], password=env["DB_ADMIN_PASSWORD"],
                       ssl=ssl, autocommit=True, connect_timeout=10)
with conn.cursor() as cur:
    cur.execute("CREATE DATABASE IF NOT EXISTS `" + name + "` CHARACTER SET utf8mb4")
    cur.execute("CREATE USER IF NOT EXISTS %s@'%%' IDENTIFIED BY %s", (user, pw))
    cur.execute("ALTER USER %s@'%%' IDENTIFIED BY %s", (user, pw))
    cur.execute("GRANT ALL PRIVILEGES ON `" + name + "`.* TO %s@'%%'", (user,))
print("database %s and user %s ready" % (name, user))
"#;

/// Environment of the database Job except the admin credentials (which come from the external
/// service's Secret) and the service password (from the generated Secret).
pub fn db_init_env(db: &Database) -> BTreeMap<String, String> {
    let mut env = BTreeMap::from([
        ("DB_HOST".to_string(), db.host.clone()),
        ("DB_PORT".to_string(), db.port.to_string()),
        ("DB_NAME".to_string(), db.name.clone()),
        ("DB_USER".to_string(), db.user.clone()),
    ]);
    if let Some(ca) = &db.ca_file {
        env.insert("DB_CA_FILE".into(), ca.clone());
        env.insert("DB_TLS_VERIFY".into(), format!("{:?}", db.verify));
        if let Some(name) = &db.server_name {
            env.insert("DB_TLS_SERVER_NAME".into(), name.clone());
        }
    }
    env
}

/// Hash of the database step's inputs.
pub fn db_init_hash(db: &Database, admin_secret: &str) -> String {
    InputHash::new()
        .add("script", DB_INIT_SCRIPT)
        .add("host", &db.host)
        .add("port", db.port.to_string())
        .add("name", &db.name)
        .add("user", &db.user)
        .add("password", &db.password)
        .add("admin-secret", admin_secret)
        // The TLS settings: a change re-runs the Job at once instead of waiting out the
        // backoff of an attempt that failed with the old ones.
        .add("ca-file", db.ca_file.as_deref().unwrap_or(""))
        .add("verify", format!("{:?}", db.verify))
        .add("server-name", db.server_name.as_deref().unwrap_or(""))
        .short()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> Database {
        Database {
            host: "10.244.0.1".into(),
            port: 3306,
            name: "keystone".into(),
            user: "keystone".into(),
            password: "pw".into(),
            ca_file: Some("/etc/ssl/db-ca/ca.crt".into()),
            verify: VerifyMode::Full,
            server_name: None,
        }
    }

    #[test]
    fn connection_urls_honour_the_verify_mode_and_server_name() {
        let base = "mysql+pymysql://keystone:pw@10.244.0.1:3306/keystone?charset=utf8mb4";
        let mut d = db();
        assert_eq!(d.url(), format!("{base}&ssl_ca=/etc/ssl/db-ca/ca.crt"));
        // CaOnly: the chain, not the host name (PyMySQL's check_hostname, through SQLAlchemy).
        d.verify = VerifyMode::CaOnly;
        assert_eq!(
            d.url(),
            format!("{base}&ssl_ca=/etc/ssl/db-ca/ca.crt&ssl_check_hostname=false")
        );
        // A server name PyMySQL cannot check: the chain only.
        d.verify = VerifyMode::Full;
        d.server_name = Some("db.example.org".into());
        assert_eq!(
            d.url(),
            format!("{base}&ssl_ca=/etc/ssl/db-ca/ca.crt&ssl_check_hostname=false")
        );
        // Insecure: TLS without a CA, which PyMySQL verifies not at all.
        d.server_name = None;
        d.verify = VerifyMode::Insecure;
        assert_eq!(d.url(), format!("{base}&ssl_check_hostname=false"));
        // Plain: no TLS options at all.
        d.ca_file = None;
        assert_eq!(d.url(), base);
    }

    #[test]
    fn the_db_init_job_gets_the_tls_settings_and_rehashes_on_their_change() {
        let mut d = db();
        let env = db_init_env(&d);
        assert_eq!(env.get("DB_TLS_VERIFY").map(String::as_str), Some("Full"));
        assert!(!env.contains_key("DB_TLS_SERVER_NAME"));
        let full = db_init_hash(&d, "admin");
        d.verify = VerifyMode::CaOnly;
        let env = db_init_env(&d);
        assert_eq!(env.get("DB_TLS_VERIFY").map(String::as_str), Some("CaOnly"));
        let ca_only = db_init_hash(&d, "admin");
        assert_ne!(
            full, ca_only,
            "a verify change must run the Job again at once"
        );
        d.verify = VerifyMode::Full;
        d.server_name = Some("db.example.org".into());
        let env = db_init_env(&d);
        assert_eq!(
            env.get("DB_TLS_SERVER_NAME").map(String::as_str),
            Some("db.example.org")
        );
        let named = db_init_hash(&d, "admin");
        assert!(named != full && named != ca_only);
        d.server_name = None;
        d.ca_file = Some("/etc/ssl/db-ca/bundle.pem".into());
        assert_ne!(db_init_hash(&d, "admin"), full, "another CA key");
        // The script reads what the environment says.
        for needle in [
            "DB_TLS_VERIFY",
            "DB_TLS_SERVER_NAME",
            "check_hostname",
            "server_hostname",
        ] {
            assert!(DB_INIT_SCRIPT.contains(needle), "{needle}");
        }
    }
}
