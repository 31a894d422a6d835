//! A service's database: its connection URL, and the database Job that creates the database
//! and the service's user with the admin credentials of the `database` external service. Every
//! service (Keystone, Placement, ...) uses the same Job, so it is written once here.

use std::collections::BTreeMap;

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
}

impl Database {
    /// The SQLAlchemy URL (`mysql+pymysql://...`).
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
            url.push_str("&ssl_ca=");
            url.push_str(ca);
        }
        url
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
ssl = {"ca": env["DB_CA_FILE"]} if env.get("DB_CA_FILE") else None
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
        .short()
}
