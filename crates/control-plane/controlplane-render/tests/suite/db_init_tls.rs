//! The db-init Job's script honours the external service's `tls.verify` and `tls.serverName`
//! against the real MariaDB of the external services (TLS, a certificate naming 127.0.0.1 and
//! localhost, signed by the harness CA), run with the test cloud's venv Python and PyMySQL as
//! the Job runs it with the image's. Issue 39: `verify: CaOnly` was ignored ("IP address
//! mismatch") and no name to verify could be given.

use std::process::Command;

use controlplane_api::external::VerifyMode;
use controlplane_render::database::{DB_INIT_SCRIPT, Database, db_init_env};
use service_boot::{MariaDbAdmin, external_services_env, venv_bin};

/// Runs the script for `db`; Ok(stdout) or Err(stderr).
fn run(admin: &MariaDbAdmin, db: &Database) -> Result<String, String> {
    let mut cmd = Command::new(venv_bin("python3"));
    cmd.arg("-c").arg(DB_INIT_SCRIPT);
    for (k, v) in db_init_env(db) {
        cmd.env(k, v);
    }
    let out = cmd
        .env("DB_ADMIN_USER", &admin.user)
        .env("DB_ADMIN_PASSWORD", &admin.password)
        .env("DB_PASSWORD", &db.password)
        .output()
        .expect("python3");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn db_init_verifies_as_the_external_service_says() {
    let admin = MariaDbAdmin::external();
    let untrusted = external_services_env()
        .get("EXTSVC_UNTRUSTED_CA")
        .cloned()
        .expect("EXTSVC_UNTRUSTED_CA");
    let base = Database {
        host: admin.host.clone(),
        port: admin.port,
        name: "cp_dbinit_tls".into(),
        user: "cp_dbinit_tls".into(),
        password: controlplane_render::secrets::password(32),
        ca_file: Some(admin.ca_file.clone()),
        verify: VerifyMode::Full,
        server_name: None,
    };
    let with = |verify: VerifyMode, name: Option<&str>, ca: &str| Database {
        verify,
        server_name: name.map(String::from),
        ca_file: Some(ca.to_string()),
        ..base.clone()
    };
    let ca = admin.ca_file.as_str();
    // Full: chain and the host connected to (the certificate names 127.0.0.1).
    run(&admin, &base).expect("Full against a name the certificate carries");
    // Full with a server name: that name is checked instead of the host.
    run(&admin, &with(VerifyMode::Full, Some("localhost"), ca))
        .expect("Full with a server name the certificate carries");
    let e = run(&admin, &with(VerifyMode::Full, Some("db.example.org"), ca))
        .expect_err("a server name the certificate does not carry");
    assert!(e.contains("CERTIFICATE_VERIFY_FAILED"), "{e}");
    // CaOnly: the chain only (the name does not matter), but the chain does.
    run(
        &admin,
        &with(VerifyMode::CaOnly, Some("db.example.org"), ca),
    )
    .expect("CaOnly ignores the name");
    let e = run(&admin, &with(VerifyMode::CaOnly, None, &untrusted))
        .expect_err("CaOnly still verifies the chain");
    assert!(e.contains("CERTIFICATE_VERIFY_FAILED"), "{e}");
    // Insecure: nothing verified.
    run(&admin, &with(VerifyMode::Insecure, None, &untrusted)).expect("Insecure");
    admin.sql("DROP DATABASE IF EXISTS cp_dbinit_tls");
    admin.sql("DROP USER IF EXISTS 'cp_dbinit_tls'@'%'");
}
