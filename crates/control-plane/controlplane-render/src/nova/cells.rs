//! Nova's cells v2 set-up: cell0 (where instances that could not be scheduled live) and one
//! cell, `cell1`, whose database and message queue the conductor, scheduler and API share.
//!
//! The cell mappings in the API database store URL *templates*, not URLs: Nova fills
//! `{username}`, `{password}`, `{hostname}`, `{port}`, `{path}` and `{query}` from the reading
//! process's own `[database] connection` / `[DEFAULT] transport_url`. So no password is copied
//! into the API database, and a rotated database or RabbitMQ password reaches the cell
//! mappings without running anything.

use crate::database::Database;
use crate::hash::InputHash;

/// Name of the one cell of instances.
pub const CELL1: &str = "cell1";
/// cell0's fixed uuid (Nova's `CellMapping.CELL0_UUID`).
pub const CELL0_UUID: &str = "00000000-0000-0000-0000-000000000000";

/// The cell set-up Job's script (POSIX sh). `nova-manage cell_v2 create_cell` is not
/// idempotent (a second run exits 2 because the URLs are taken), and `map_cell0` leaves an
/// existing mapping as it is, so the script looks the cells up by name and updates the ones
/// that exist: a re-run converges on the rendered templates instead of failing. `list_cells`
/// without `--verbose` prints masked URLs only, so no credential reaches the Job's log.
pub const CELL_SETUP_SCRIPT: &str = r#"set -eu
m() { "$NOVA_MANAGE" --config-file "$NOVA_CONF" "$@"; }
uuid_of() {
  printf '%s\n' "$cells" | awk -F'|' -v n="$1" '{ gsub(/ /, "", $2); gsub(/ /, "", $3) } $2 == n { print $3 }'
}
cells=$(m cell_v2 list_cells)
if [ -z "$(uuid_of cell0)" ]; then
  m cell_v2 map_cell0 --database_connection "$CELL0_DATABASE"
else
  m cell_v2 update_cell --cell_uuid 00000000-0000-0000-0000-000000000000 \
    --database_connection "$CELL0_DATABASE" --transport-url none:///
fi
uuid=$(uuid_of "$CELL_NAME")
if [ -z "$uuid" ]; then
  m cell_v2 create_cell --name "$CELL_NAME" --database_connection "$CELL_DATABASE" \
    --transport-url "$CELL_TRANSPORT"
else
  m cell_v2 update_cell --cell_uuid "$uuid" --database_connection "$CELL_DATABASE" \
    --transport-url "$CELL_TRANSPORT"
fi
"#;

/// What cannot be set up as cells.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CellsError {
    /// cell0 and cell1 must share server, user, password and TLS: cell0's template borrows
    /// them from the cell1 connection of whoever reads it.
    #[error(
        "the cell0 database {cell0} must be on the same server, with the same user, password and TLS, as the cell database {cell1}"
    )]
    CellDatabasesDiffer {
        /// cell0's database name.
        cell0: String,
        /// cell1's database name.
        cell1: String,
    },
    /// A database name with characters that would change the template's structure.
    #[error("database name {0:?} may hold only letters, digits and _")]
    BadName(String),
}

fn plain_name(name: &str) -> Result<&str, CellsError> {
    if !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        Ok(name)
    } else {
        Err(CellsError::BadName(name.to_string()))
    }
}

/// Every rendered connection has a query (`charset`, and `ssl_ca` under TLS).
const QUERY: &str = "?{query}";

/// cell0's database connection template (cell0's database name, everything else from the
/// reader's `[database] connection`, which is cell1's).
pub fn cell0_database_template(cell0: &Database, cell1: &Database) -> Result<String, CellsError> {
    let same = cell0.host == cell1.host
        && cell0.port == cell1.port
        && cell0.user == cell1.user
        && cell0.password == cell1.password
        && cell0.ca_file == cell1.ca_file;
    if !same {
        return Err(CellsError::CellDatabasesDiffer {
            cell0: cell0.name.clone(),
            cell1: cell1.name.clone(),
        });
    }
    Ok(format!(
        "{{scheme}}://{{username}}:{{password}}@{{hostname}}:{{port}}/{}{}",
        plain_name(&cell0.name)?,
        QUERY
    ))
}

/// cell1's database connection template: exactly the reader's `[database] connection`.
pub fn cell_database_template() -> String {
    format!("{{scheme}}://{{username}}:{{password}}@{{hostname}}:{{port}}/{{path}}{QUERY}")
}

/// Environment of the cell set-up Job (no secrets: the templates carry none).
pub fn env(
    nova_manage: &str,
    nova_conf: &str,
    cell0_database: &str,
    cell_database: &str,
    cell_transport: &str,
) -> Vec<(String, String)> {
    vec![
        ("NOVA_MANAGE".into(), nova_manage.into()),
        ("NOVA_CONF".into(), nova_conf.into()),
        ("CELL_NAME".into(), CELL1.into()),
        ("CELL0_DATABASE".into(), cell0_database.into()),
        ("CELL_DATABASE".into(), cell_database.into()),
        ("CELL_TRANSPORT".into(), cell_transport.into()),
    ]
}

/// The Job's command: the script through `sh -c`.
pub fn command() -> Vec<String> {
    vec!["sh".into(), "-c".into(), CELL_SETUP_SCRIPT.into()]
}

/// Hash of the cell set-up step's inputs: the image, the script, where the mappings are stored
/// (`[api_database]`) and the templates. Credentials are not inputs: the templates resolve
/// them when read.
pub fn hash(image: &str, api_database: &str, env: &[(String, String)]) -> String {
    let mut h = InputHash::new()
        .add("image", image)
        .add("script", CELL_SETUP_SCRIPT)
        .add("api_database", api_database);
    for (k, v) in env {
        h = h.add(k, v);
    }
    h.short()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db(name: &str) -> Database {
        Database {
            host: "db".into(),
            port: 3306,
            name: name.into(),
            user: "nova".into(),
            password: "pw".into(),
            ca_file: Some("/ca.crt".into()),
            verify: Default::default(),
            server_name: None,
        }
    }

    #[test]
    fn templates_hold_no_credentials() {
        let t = cell0_database_template(&db("nova_cell0"), &db("nova")).unwrap();
        assert_eq!(
            t,
            "{scheme}://{username}:{password}@{hostname}:{port}/nova_cell0?{query}"
        );
        assert!(!cell_database_template().contains("pw"));
    }

    #[test]
    fn cell0_elsewhere_or_oddly_named_is_refused() {
        let mut other = db("nova_cell0");
        other.user = "someone".into();
        assert!(matches!(
            cell0_database_template(&other, &db("nova")),
            Err(CellsError::CellDatabasesDiffer { .. })
        ));
        assert_eq!(
            cell0_database_template(&db("nova/x"), &db("nova")),
            Err(CellsError::BadName("nova/x".into()))
        );
    }

    #[test]
    fn the_hash_follows_templates_but_not_passwords() {
        let e = env("nova-manage", "/etc/nova/nova.conf", "a", "b", "c");
        let h = hash("img", "[api_database]\nconnection = x\n", &e);
        assert_eq!(h, hash("img", "[api_database]\nconnection = x\n", &e));
        let e2 = env("nova-manage", "/etc/nova/nova.conf", "a2", "b", "c");
        assert_ne!(h, hash("img", "[api_database]\nconnection = x\n", &e2));
        assert_ne!(h, hash("img2", "[api_database]\nconnection = x\n", &e));
    }
}
