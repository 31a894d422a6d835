//! Proof that the rendered Keystone configuration works: the operator's own rendering
//! (`keystone.conf`, the uwsgi configuration, the database script, the bootstrap arguments
//! and the fernet key repository with its rotation) drives the real Keystone of the test
//! cloud's virtualenv against the test cloud's real MariaDB and a real memcached.
//!
//! The credential keys go through the operator's whole cycle too: a stored credential stays
//! readable across three rotations by the operator's code, each after the real
//! `keystone-manage credential_migrate` run by the operator's Job script; rotating twice
//! without migrating makes it unreadable, which is why the operator waits for the migration.
//!
//! Needs: `scripts/test-cloud up` (MariaDB on 127.0.0.1:13306, the venv) and
//! `scripts/control-plane-deps` (memcached, pymemcache in the venv). It uses its own database
//! (`cpproof_keystone`) and user, so the test cloud's Keystone is untouched.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support;
use support::{
    Proc, free_port, init_database_twice, memcached_items, run, start_memcached, test_cloud_dir,
    venv_bin,
};

use controlplane_api::KeystoneSpec;
use controlplane_api::common::{ExternalServiceRef, ServiceTemplate};
use controlplane_api::keystone::{DatabaseSpec, TokenSettings};
use controlplane_render::KeyRepository;
use controlplane_render::credential_keys::{MAX_ACTIVE_KEYS, MIGRATE_SCRIPT, migrate_env};
use controlplane_render::keystone::{self, Database, KeystoneInputs, Paths};
use controlplane_render::secrets::password;

fn mariadb_admin(sql: &str) {
    run(
        Command::new("mariadb").args(["-h", "127.0.0.1", "-P", "13306", "-u", "root", "-e", sql]),
        "mariadb (test cloud root)",
    );
}

/// The kubelet's atomic Secret-volume update, shared with the booted cloud.
fn write_repo(dir: &Path, repo: &KeyRepository) {
    support::cloud::write_key_repository(dir, repo);
}

/// Empties memcached, so the next validation decrypts the token with the key repository
/// instead of answering from Keystone's token cache.
fn memcached_flush(port: u16) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("memcached");
    s.write_all(b"flush_all\r\nquit\r\n").expect("flush_all");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert!(out.starts_with("OK"), "flush_all answered {out:?}");
}

async fn token(client: &reqwest::Client, base: &str, password: &str) -> String {
    let body = serde_json::json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": "admin", "domain": {"id": "default"}, "password": password}}},
        "scope": {"project": {"name": "admin", "domain": {"id": "default"}}}}});
    let resp = client
        .post(format!("{base}/auth/tokens"))
        .json(&body)
        .send()
        .await
        .expect("token request");
    assert_eq!(
        resp.status(),
        201,
        "token request answered {}",
        resp.status()
    );
    resp.headers()
        .get("x-subject-token")
        .and_then(|v| v.to_str().ok())
        .expect("X-Subject-Token")
        .to_string()
}

async fn validates(client: &reqwest::Client, base: &str, auth: &str, subject: &str) -> u16 {
    client
        .get(format!("{base}/auth/tokens"))
        .header("X-Auth-Token", auth)
        .header("X-Subject-Token", subject)
        .send()
        .await
        .expect("validate request")
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rendered_keystone_boots_issues_tokens_and_survives_rotation() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let (ks_port, mc_port) = (free_port(), free_port());

    let _memcached = start_memcached(mc_port);

    let spec = KeystoneSpec {
        release: "2026.1".into(),
        template: ServiceTemplate::default(),
        database: DatabaseSpec {
            service: ExternalServiceRef { name: "db".into() },
            database_name: "cpproof_keystone".into(),
            username: "cpproof_keystone".into(),
        },
        cache: Some(ExternalServiceRef {
            name: "cache".into(),
        }),
        region: "RegionOne".into(),
        public_endpoint: None,
        admin_password_secret: None,
        // 600 s tokens, no allow-expired window, rotation every 300 s: 4 keys.
        tokens: TokenSettings {
            expiration_seconds: 600,
            allow_expired_window_seconds: 0,
            fernet_rotation_interval_seconds: 300,
        },
        credential_keys: Default::default(),
    };
    spec.template
        .config_overrides
        .is_empty()
        .then_some(())
        .expect("no overrides");
    let mut spec = spec;
    // A user override, as a cluster would set one: cheap hashing keeps the test fast.
    spec.template.config_overrides.insert(
        "identity".into(),
        [("password_hash_rounds".to_string(), "4".to_string())].into(),
    );
    let max_keys = spec.tokens.max_active_keys();
    assert_eq!(max_keys, 4);

    let db = Database {
        host: "127.0.0.1".into(),
        port: 13306,
        name: spec.database.database_name.clone(),
        user: spec.database.username.clone(),
        password: password(32),
        ca_file: None,
        verify: Default::default(),
        server_name: None,
    };
    let paths = Paths {
        config_dir: root.join("etc").display().to_string(),
        fernet_keys: root.join("fernet-keys").display().to_string(),
        credential_keys: root.join("credential-keys").display().to_string(),
        log_file: Some(root.join("keystone.log").display().to_string()),
        python_home: Some(test_cloud_dir().join("venv").display().to_string()),
    };
    let inputs = KeystoneInputs {
        spec: &spec,
        database: db.clone(),
        cache: controlplane_render::cache::Cache::plain(vec![format!("127.0.0.1:{mc_port}")]),
        paths: paths.clone(),
        listen: format!("127.0.0.1:{ks_port}"),
        workers: 2,
    };

    // A fresh database each run; the operator's database script creates it and the user.
    // Twice: the Job is retried and re-run on input change, so it must be idempotent.
    init_database_twice(&db);

    std::fs::create_dir_all(&paths.config_dir).expect("etc");
    let conf = PathBuf::from(&paths.config_dir).join("keystone.conf");
    std::fs::write(&conf, keystone::keystone_conf(&inputs)).expect("keystone.conf");
    std::fs::write(
        PathBuf::from(&paths.config_dir).join("uwsgi.ini"),
        keystone::uwsgi_ini(&inputs),
    )
    .expect("uwsgi.ini");
    let mut fernet = KeyRepository::generate();
    write_repo(Path::new(&paths.fernet_keys), &fernet);
    let credential_keys = KeyRepository::generate();
    write_repo(Path::new(&paths.credential_keys), &credential_keys);

    let km = venv_bin("keystone-manage");
    run(
        Command::new(&km)
            .arg("--config-file")
            .arg(&conf)
            .arg("db_sync"),
        "keystone-manage db_sync",
    );
    let admin_password = password(32);
    let base = format!("http://127.0.0.1:{ks_port}/v3");
    run(
        Command::new(&km)
            .arg("--config-file")
            .arg(&conf)
            .args(keystone::bootstrap_args(&spec, &base, &base))
            .env("OS_BOOTSTRAP_PASSWORD", &admin_password),
        "keystone-manage bootstrap",
    );

    let uwsgi = Command::new(venv_bin("uwsgi"))
        .arg("--ini")
        .arg(PathBuf::from(&paths.config_dir).join("uwsgi.ini"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(root.join("uwsgi.log")).expect("uwsgi log"))
        .spawn()
        .expect("start uwsgi");
    let _uwsgi = Proc(uwsgi, "uwsgi");

    let client = reqwest::Client::new();
    // Wait for the API to load (a bounded wait, not an assertion on speed).
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(r) = client.get(&base).send().await
            && r.status().is_success()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Keystone did not answer on {base}; uwsgi log:\n{}",
            std::fs::read_to_string(root.join("uwsgi.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    let before = token(&client, &base, &admin_password).await;
    assert_eq!(validates(&client, &base, &before, &before).await, 200);

    // The catalog has the identity endpoints the bootstrap arguments asked for.
    let catalog: serde_json::Value = client
        .get(format!("{base}/auth/catalog"))
        .header("X-Auth-Token", &before)
        .send()
        .await
        .expect("catalog")
        .json()
        .await
        .expect("catalog JSON");
    let identity = catalog["catalog"]
        .as_array()
        .and_then(|c| c.iter().find(|s| s["type"] == "identity"))
        .expect("identity service in the catalog");
    assert_eq!(identity["endpoints"].as_array().map(Vec::len), Some(3));

    // Keystone cached through the memcached the configuration names.
    assert!(memcached_items(mc_port) > 0, "memcached stored nothing");

    // One rotation by the operator's code, written as a Secret update reaches a pod's volume:
    // the token issued before it still validates, without restarting Keystone.
    fernet = fernet.rotate(max_keys);
    write_repo(Path::new(&paths.fernet_keys), &fernet);
    let after = token(&client, &base, &admin_password).await;
    memcached_flush(mc_port);
    assert_eq!(validates(&client, &base, &after, &before).await, 200);
    assert_eq!(validates(&client, &base, &before, &after).await, 200);

    // Validations are cached in memcached, so each check above and below empties it first:
    // the answer comes from the key repository. The derived key count keeps a signing key for max_active_keys - 2 rotations in all;
    // one rotation more drops it, and Keystone then refuses the old token: the count matters.
    for _ in 0..(max_keys - 3) {
        fernet = fernet.rotate(max_keys);
        write_repo(Path::new(&paths.fernet_keys), &fernet);
        let fresh = token(&client, &base, &admin_password).await;
        memcached_flush(mc_port);
        assert_eq!(validates(&client, &base, &fresh, &before).await, 200);
    }
    fernet = fernet.rotate(max_keys);
    write_repo(Path::new(&paths.fernet_keys), &fernet);
    let fresh = token(&client, &base, &admin_password).await;
    memcached_flush(mc_port);
    assert_eq!(validates(&client, &base, &fresh, &before).await, 404);

    credentials_survive_the_operators_rotation(
        &base,
        &fresh,
        mc_port,
        &conf,
        Path::new(&paths.credential_keys),
        credential_keys,
        root,
    )
    .await;

    drop(_uwsgi);
    mariadb_admin(
        "DROP DATABASE IF EXISTS cpproof_keystone; DROP USER IF EXISTS 'cpproof_keystone'@'%'",
    );
}

fn mariadb_query(sql: &str) -> String {
    run(
        Command::new("mariadb").args([
            "-h",
            "127.0.0.1",
            "-P",
            "13306",
            "-u",
            "root",
            "-N",
            "-B",
            "-e",
            sql,
        ]),
        "mariadb query (test cloud root)",
    )
    .trim()
    .to_string()
}

/// Keystone's `primary_key_hash`: SHA-1 of the primary key file's contents.
fn sha1(text: &str) -> String {
    use std::io::Write as _;
    let mut child = Command::new("sha1sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sha1sum");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("sha1sum output");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Runs the operator's `credential-migrate` Job script (the real `keystone-manage
/// credential_migrate` with the rendered configuration) for the key set `expected`.
fn migrate(conf: &Path, key_dir: &Path, expected: &str) -> std::process::Output {
    let mut cmd = Command::new(venv_bin("python3"));
    cmd.arg("-c").arg(MIGRATE_SCRIPT);
    for (k, v) in migrate_env(
        &key_dir.display().to_string(),
        &conf.display().to_string(),
        expected,
    ) {
        cmd.env(k, v);
    }
    cmd.env("KEYSTONE_MANAGE", venv_bin("keystone-manage"))
        .output()
        .expect("run the credential-migrate script")
}

/// GET /v3/credentials/{id} with memcached emptied first, so the row is decrypted with the key
/// repository as it is now: (status, blob).
async fn read_credential(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    id: &str,
    mc_port: u16,
) -> (u16, String) {
    memcached_flush(mc_port);
    let resp = match client
        .get(format!("{base}/credentials/{id}"))
        .header("X-Auth-Token", token)
        .send()
        .await
    {
        Ok(r) => r,
        Err(e) => return (0, format!("no answer: {e}")),
    };
    let status = resp.status().as_u16();
    let body: serde_json::Value = resp.json().await.unwrap_or_default();
    let blob = body["credential"]["blob"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| body.to_string());
    (status, blob)
}

async fn credentials_survive_the_operators_rotation(
    base: &str,
    token: &str,
    mc_port: u16,
    conf: &Path,
    key_dir: &Path,
    mut keys: KeyRepository,
    logs: &Path,
) {
    let tail = || {
        let mut out = String::new();
        for f in ["keystone.log", "uwsgi.log"] {
            let text = std::fs::read_to_string(logs.join(f)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            out.push_str(&format!(
                "--- {f}\n{}\n",
                lines[lines.len().saturating_sub(15)..].join("\n")
            ));
        }
        out
    };
    // A connection per request: uwsgi closes idle connections while keystone-manage runs,
    // and a pooled one would fail the next read with a connection error instead of an answer.
    let fresh = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("HTTP client");
    let client = &fresh;
    let who: serde_json::Value = client
        .get(format!("{base}/auth/tokens"))
        .header("X-Auth-Token", token)
        .header("X-Subject-Token", token)
        .send()
        .await
        .expect("token body")
        .json()
        .await
        .expect("token JSON");
    let (user, project) = (
        who["token"]["user"]["id"].as_str().expect("user id"),
        who["token"]["project"]["id"].as_str().expect("project id"),
    );
    let blob = serde_json::json!({"access": password(20), "secret": password(40)}).to_string();
    let resp = client
        .post(format!("{base}/credentials"))
        .header("X-Auth-Token", token)
        .json(
            &serde_json::json!({"credential": {"type": "ec2", "user_id": user,
            "project_id": project, "blob": blob}}),
        )
        .send()
        .await
        .expect("create credential");
    assert_eq!(resp.status(), 201, "create credential");
    let created: serde_json::Value = resp.json().await.expect("credential JSON");
    let id = created["credential"]["id"]
        .as_str()
        .expect("credential id")
        .to_string();
    let key_hash = || {
        mariadb_query(&format!(
            "SELECT key_hash FROM cpproof_keystone.credential WHERE id = '{id}'"
        ))
    };
    let primary = |k: &KeyRepository| sha1(&k.0[&k.primary_index()]);
    assert_eq!(key_hash(), primary(&keys), "encrypted with the primary key");
    assert_eq!(
        read_credential(client, base, token, &id, mc_port).await,
        (200, blob.clone()),
        "{}",
        tail()
    );

    // The Job's guard: a pod that still sees another key set migrates nothing.
    let out = migrate(conf, key_dir, &keys.rotate(MAX_ACTIVE_KEYS).set_hash());
    assert!(
        !out.status.success(),
        "a migration to the wrong key set must fail"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not migrating"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The operator's cycle, three times: migrate the current keys, then rotate. Each
    // rotation drops the oldest key; the credential was re-encrypted before it went.
    for round in 1..=3 {
        let out = migrate(conf, key_dir, &keys.set_hash());
        assert!(
            out.status.success(),
            "credential_migrate (round {round}) failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            key_hash(),
            primary(&keys),
            "round {round}: credential_migrate re-encrypted with the primary"
        );
        let old_primary = keys.primary_index();
        keys = keys.rotate(MAX_ACTIVE_KEYS);
        write_repo(key_dir, &keys);
        assert_eq!(keys.0.len(), 3, "round {round}: {:?}", keys.0.keys());
        assert!(!keys.0.contains_key(&(old_primary - 1)) || old_primary == 1);
        assert_eq!(
            read_credential(client, base, token, &id, mc_port).await,
            (200, blob.clone()),
            "round {round}: the credential reads back after the rotation\n{}",
            tail()
        );
    }
    assert_eq!(keys.primary_index(), 4, "three rotations from primary 1");

    // Without the migration, the next rotation drops the key the credential is encrypted
    // with (a scratch repository: restored afterwards).
    let scratch = keys.rotate(MAX_ACTIVE_KEYS);
    write_repo(key_dir, &scratch);
    let undecryptable = || {
        std::fs::read_to_string(logs.join("keystone.log"))
            .unwrap_or_default()
            .matches("CredentialEncryptionError: Credential could not be decrypted")
            .count()
    };
    let errors_before = undecryptable();
    let (status, body) = read_credential(client, base, token, &id, mc_port).await;
    // Keystone raises CredentialEncryptionError, which this uwsgi answers by closing the
    // connection (status 0 here); a 500 would do as well. Keystone's log says why.
    assert!(
        status == 0 || status == 500,
        "unreadable after two rotations unmigrated: {status} {body}"
    );
    assert!(
        undecryptable() > errors_before,
        "Keystone logged that it could not decrypt the credential:\n{}",
        tail()
    );
    let out = migrate(conf, key_dir, &scratch.set_hash());
    assert!(
        !out.status.success(),
        "credential_migrate cannot recover it either"
    );
    write_repo(key_dir, &keys);
    assert_eq!(
        read_credential(client, base, token, &id, mc_port).await,
        (200, blob),
        "with the migrated chain's keys back it reads again"
    );
}
