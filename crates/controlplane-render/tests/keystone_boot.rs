//! Proof that the rendered Keystone configuration works: the operator's own rendering
//! (`keystone.conf`, the uwsgi configuration, the database script, the bootstrap arguments
//! and the fernet key repository with its rotation) drives the real Keystone of the test
//! cloud's virtualenv against the test cloud's real MariaDB and a real memcached.
//!
//! Needs: `scripts/test-cloud up` (MariaDB on 127.0.0.1:13306, the venv) and
//! `scripts/control-plane-deps` (memcached, pymemcache in the venv). It uses its own database
//! (`cpproof_keystone`) and user, so the test cloud's Keystone is untouched.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::{Proc, free_port, memcached_items, run, test_cloud_dir, venv_bin};

use controlplane_api::KeystoneSpec;
use controlplane_api::common::{ExternalServiceRef, ServiceTemplate};
use controlplane_api::keystone::{DatabaseSpec, TokenSettings};
use controlplane_render::KeyRepository;
use controlplane_render::keystone::{self, Database, KeystoneInputs, Paths};
use controlplane_render::secrets::password;

fn mariadb_admin(sql: &str) {
    run(
        Command::new("mariadb").args(["-h", "127.0.0.1", "-P", "13306", "-u", "root", "-e", sql]),
        "mariadb (test cloud root)",
    );
}

fn write_repo(dir: &Path, repo: &KeyRepository) {
    std::fs::create_dir_all(dir).expect("key dir");
    let files = repo.files();
    for entry in std::fs::read_dir(dir).expect("read key dir").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !files.contains_key(&name) {
            std::fs::remove_file(entry.path()).expect("remove dropped key");
        }
    }
    // Written under a temporary name and renamed, as the kubelet swaps a Secret volume's
    // files atomically: a reader never sees half a key.
    for (name, key) in files {
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, key).expect("write key");
        std::fs::rename(&tmp, dir.join(&name)).expect("rename key");
    }
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

    let memcached = Command::new("memcached")
        .args([
            "-l",
            "127.0.0.1",
            "-p",
            &mc_port.to_string(),
            "-U",
            "0",
            "-u",
            "nobody",
            "-m",
            "32",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start memcached ({e}): run scripts/control-plane-deps"));
    let _memcached = Proc(memcached, "memcached");

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
        memcache_servers: vec![format!("127.0.0.1:{mc_port}")],
        paths: paths.clone(),
        listen: format!("127.0.0.1:{ks_port}"),
        workers: 2,
    };

    // A fresh database each run; the operator's database script creates it and the user.
    mariadb_admin("DROP DATABASE IF EXISTS cpproof_keystone");
    let mut init = Command::new(venv_bin("python3"));
    init.arg("-c").arg(keystone::DB_INIT_SCRIPT);
    for (k, v) in keystone::db_init_env(&db) {
        init.env(k, v);
    }
    init.env("DB_ADMIN_USER", "root")
        .env("DB_ADMIN_PASSWORD", "")
        .env("DB_PASSWORD", &db.password);
    run(&mut init, "database script");
    // Run twice: the Job is retried and re-run on input change, so it must be idempotent.
    run(&mut init, "database script (again)");

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
    write_repo(
        Path::new(&paths.credential_keys),
        &KeyRepository::generate(),
    );

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

    drop(_uwsgi);
    mariadb_admin(
        "DROP DATABASE IF EXISTS cpproof_keystone; DROP USER IF EXISTS 'cpproof_keystone'@'%'",
    );
}
