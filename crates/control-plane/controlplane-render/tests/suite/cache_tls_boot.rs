//! Proof that the rendered memcached TLS and SASL options work: the real Keystone (oslo.cache)
//! and the real Placement (keystonemiddleware's token cache) of the test cloud's venv, booted
//! from the operator's rendering with the harness's TLS memcached (`memcached-tls`, verified
//! fully against the harness CA), cache into it: the token Placement validated is stored under
//! keystonemiddleware's key, and Keystone's items appear, read back over TLS. A Placement whose
//! cache is `memcached-wrong-name` (a certificate for another host name) refuses that server
//! (no item lands there, its TLS handshakes fail) while its API keeps answering. With
//! `memcached-sasl` both cache through SASL (oslo.cache's pool, keystonemiddleware's). Horizon's
//! rendered settings, run by its venv's Django, round-trip a value through `memcached-tls`,
//! fail on `memcached-wrong-name` with `Full` and pass with `CaOnly`.
//!
//! The proof takes 60-80 s (two Keystones, three Placements, one after another; Django).
//!
//! Needs: `scripts/test-cloud up` (MariaDB on :13306, Keystone on :5000, the venv),
//! `scripts/control-plane-deps` (python-binary-memcached in the venv) and
//! `scripts/external-services up` (the memcached servers; `EXTERNAL_SERVICES_ENV` or its
//! default). Its own databases (`cpproof_cachetls*`), service user and region, removed again.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support;
use support::{
    KeystoneCleanup, Proc, admin_password, external_services_env, free_port, init_database_twice,
    log_tails, mariadb_admin, proof_database, proof_keystone_auth, register_service_twice, run,
    service_token, spawn_logged, test_cloud_dir, venv_bin, wait_http,
};

use controlplane_api::KeystoneSpec;
use controlplane_api::common::{ExternalServiceRef, ServiceTemplate};
use controlplane_api::external::VerifyMode;
use controlplane_api::keystone::{DatabaseSpec, TokenSettings};
use controlplane_render::KeyRepository;
use controlplane_render::cache::{Cache, CacheSasl, CacheTls};
use controlplane_render::secrets::password;
use controlplane_render::{horizon, keystone, placement};

const REGION: &str = "CpProofCacheTls";
const USER: &str = "cpproof_cachetls";
const DB: &str = "cpproof_cachetls";
const KS_DB: &str = "cpproof_cachetls_ks";

static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

fn logs() -> String {
    match ROOT.get() {
        Some(r) => log_tails(
            r,
            &[
                "ks-tls/keystone.log",
                "ks-tls/uwsgi.log",
                "ks-sasl/keystone.log",
                "pl-tls/placement.log",
                "pl-tls/uwsgi.log",
                "pl-wrong/placement.log",
                "pl-sasl/placement.log",
            ],
            25,
        ),
        None => String::new(),
    }
}

/// How the proof's own client reaches one memcached.
#[derive(Clone)]
struct Server {
    addr: String,
    /// CA bundle; the host name is checked unless `ca_only`.
    ca: Option<String>,
    ca_only: bool,
    sasl: Option<(String, String)>,
}

/// Runs `op` (`stats`, `flush` or `has:<key>`) against `s` with python-binary-memcached (the
/// client the services use over TLS and SASL) and returns its JSON answer.
fn probe(s: &Server, op: &str) -> serde_json::Value {
    const SCRIPT: &str = r#"import json, os, ssl, bmemcached
ctx = None
if os.environ.get("CA"):
    ctx = ssl.create_default_context(cafile=os.environ["CA"])
    if os.environ.get("CA_ONLY"):
        ctx.check_hostname = False
c = bmemcached.Client([os.environ["ADDR"]], os.environ.get("MC_USER"), os.environ.get("MC_PASSWORD"),
                      tls_context=ctx, socket_timeout=5)
op = os.environ["OP"]
if op == "handshake":
    import socket
    host, port = os.environ["ADDR"].rsplit(":", 1)
    try:
        ctx.wrap_socket(socket.create_connection((host, int(port)), 5), server_hostname=host).close()
        print(json.dumps("ok"))
    except ssl.SSLError as e:
        print(json.dumps(str(e)))
elif op == "flush":
    print(json.dumps(bool(c.flush_all())))
elif op == "stats":
    st = list(c.stats().values())
    if not st:
        raise SystemExit("no stats from " + os.environ["ADDR"])
    print(json.dumps({k: v.decode() for k, v in st[0].items()}))
else:
    print(json.dumps(c.get(op[4:]) is not None))
"#;
    let mut cmd = Command::new(venv_bin("python3"));
    cmd.arg("-c").arg(SCRIPT).env("ADDR", &s.addr).env("OP", op);
    if let Some(ca) = &s.ca {
        cmd.env("CA", ca);
    }
    if s.ca_only {
        cmd.env("CA_ONLY", "1");
    }
    if let Some((u, p)) = &s.sasl {
        cmd.env("MC_USER", u).env("MC_PASSWORD", p);
    }
    let out = run(&mut cmd, "memcached probe");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("probe {op}: {e}: {out}"))
}

fn stat(s: &Server, name: &str) -> u64 {
    probe(s, "stats")[name]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no stat {name} from {}", s.addr))
}

/// The wrong-name server's connections, commands (get + set) and items so far.
fn wrong_counts(s: &Server) -> (u64, u64, u64) {
    let st = probe(s, "stats");
    let n = |k: &str| {
        st[k]
            .as_str()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no stat {k} from {}", s.addr))
    };
    (
        n("total_connections"),
        n("cmd_get") + n("cmd_set"),
        n("total_items"),
    )
}

/// keystonemiddleware's cache key of `token` (`tokens/<sha256>`, no security strategy).
fn authtoken_key(token: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(token.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("tokens/{hex}")
}

/// Drops the proof's Keystone database when the proof ends.
struct DropDb(&'static str);
impl Drop for DropDb {
    fn drop(&mut self) {
        let db = self.0;
        let _ = Command::new("mariadb")
            .args(["-h", "127.0.0.1", "-P", "13306", "-u", "root", "-e"])
            .arg(format!(
                "DROP DATABASE IF EXISTS {db}; DROP USER IF EXISTS '{db}'@'%'"
            ))
            .output();
    }
}

fn keystone_spec() -> KeystoneSpec {
    let mut template = ServiceTemplate::default();
    // Cheap hashing keeps the proof fast.
    template.config_overrides.insert(
        "identity".into(),
        [("password_hash_rounds".to_string(), "4".to_string())].into(),
    );
    KeystoneSpec {
        release: "2026.1".into(),
        template,
        database: DatabaseSpec {
            service: ExternalServiceRef { name: "db".into() },
            database_name: KS_DB.into(),
            username: KS_DB.into(),
        },
        cache: Some(ExternalServiceRef {
            name: "cache".into(),
        }),
        region: "RegionOne".into(),
        public_endpoint: None,
        admin_password_secret: None,
        tokens: TokenSettings {
            expiration_seconds: 600,
            allow_expired_window_seconds: 0,
            fernet_rotation_interval_seconds: 300,
        },
        credential_keys: Default::default(),
    }
}

/// Writes Keystone's rendered files for `cache` under `root/<tag>` (keys in `root`).
fn keystone_files(
    root: &Path,
    tag: &str,
    spec: &KeystoneSpec,
    db: &keystone::Database,
    cache: Cache,
) -> (keystone::Paths, String) {
    let dir = root.join(tag);
    let paths = keystone::Paths {
        config_dir: dir.display().to_string(),
        fernet_keys: root.join("fernet-keys").display().to_string(),
        credential_keys: root.join("credential-keys").display().to_string(),
        log_file: Some(dir.join("keystone.log").display().to_string()),
        python_home: Some(test_cloud_dir().join("venv").display().to_string()),
    };
    let port = free_port();
    let inputs = keystone::KeystoneInputs {
        spec,
        database: db.clone(),
        cache,
        paths: paths.clone(),
        listen: format!("127.0.0.1:{port}"),
        workers: 1,
    };
    std::fs::create_dir_all(&dir).expect("keystone dir");
    std::fs::write(dir.join("keystone.conf"), keystone::keystone_conf(&inputs)).expect("conf");
    std::fs::write(dir.join("uwsgi.ini"), keystone::uwsgi_ini(&inputs)).expect("uwsgi.ini");
    (paths, format!("http://127.0.0.1:{port}/v3"))
}

fn uwsgi(dir: &Path, what: &'static str) -> Proc {
    spawn_logged(
        dir,
        "uwsgi.log",
        what,
        &[
            venv_bin("uwsgi").display().to_string(),
            "--ini".into(),
            dir.join("uwsgi.ini").display().to_string(),
        ],
    )
}

async fn admin_token(client: &reqwest::Client, base: &str, pw: &str) -> String {
    let body = serde_json::json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": "admin", "domain": {"id": "default"}, "password": pw}}},
        "scope": {"project": {"name": "admin", "domain": {"id": "default"}}}}});
    let resp = client
        .post(format!("{base}/auth/tokens"))
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("token request: {e}; {}", logs()));
    assert_eq!(resp.status(), 201, "token request; {}", logs());
    resp.headers()
        .get("x-subject-token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no X-Subject-Token"))
}

/// Issues and validates tokens and reads the catalog: what Keystone caches.
async fn exercise_keystone(client: &reqwest::Client, base: &str, pw: &str) {
    let t = admin_token(client, base, pw).await;
    for _ in 0..3 {
        let r = client
            .get(format!("{base}/auth/tokens"))
            .header("X-Auth-Token", &t)
            .header("X-Subject-Token", &t)
            .send()
            .await
            .unwrap_or_else(|e| panic!("validate: {e}; {}", logs()));
        assert_eq!(r.status(), 200, "validate; {}", logs());
        let r = client
            .get(format!("{base}/auth/catalog"))
            .header("X-Auth-Token", &t)
            .send()
            .await
            .unwrap_or_else(|e| panic!("catalog: {e}; {}", logs()));
        assert_eq!(r.status(), 200, "catalog; {}", logs());
    }
}

/// Horizon's rendered `local_settings.py` for `cache`, executed by the Horizon venv's Python:
/// Django's cache (the sessions' store) sets and reads back a value; stdout is `ok`, or the
/// error Django raised.
fn django_cache_roundtrip(root: &Path, tag: &str, cache: Cache) -> String {
    const SCRIPT: &str = r#"import os, runpy, sys
from django.conf import settings
ns = runpy.run_path(sys.argv[1])
settings.configure(CACHES=ns["CACHES"])
from django.core.cache import cache
try:
    cache.set("cpproof-cache-tls", "here")
    got = cache.get("cpproof-cache-tls")
    print("ok" if got == "here" else "read back %r" % (got,))
except Exception as e:
    print("%s: %s" % (type(e).__name__, e))
"#;
    let template = ServiceTemplate::default();
    let inputs = horizon::HorizonInputs {
        template: &template,
        keystone_url: "http://127.0.0.1:5000/v3".into(),
        region: "RegionOne".into(),
        allowed_hosts: vec!["127.0.0.1".into()],
        secret_key: password(32),
        cache,
        keystone_ca_file: None,
        https: false,
        config_dir: root.join(tag).display().to_string(),
        static_root: root.join(tag).join("static").display().to_string(),
        python_home: None,
        listen: "127.0.0.1:1".into(),
        workers: 1,
    };
    let file = root.join(format!("{tag}-local_settings.py"));
    std::fs::write(&file, horizon::local_settings(&inputs)).expect("local_settings.py");
    let python = test_cloud_dir().join("horizon-venv/bin/python3");
    assert!(
        python.exists(),
        "{} missing: run scripts/control-plane-deps",
        python.display()
    );
    run(
        Command::new(python).arg("-c").arg(SCRIPT).arg(&file),
        "Django cache round trip",
    )
    .trim()
    .to_string()
}

/// Placement's rendered files for `cache` under `root/<tag>`; its base URL.
fn placement_files(
    root: &Path,
    tag: &str,
    template: &ServiceTemplate,
    db: &controlplane_render::database::Database,
    auth: &controlplane_render::authtoken::KeystoneAuth,
    cache: Cache,
) -> String {
    let dir = root.join(tag);
    let port = free_port();
    let inputs = placement::PlacementInputs {
        template,
        database: db.clone(),
        keystone: auth.clone(),
        cache,
        paths: placement::Paths {
            config_dir: dir.display().to_string(),
            log_file: Some(dir.join("placement.log").display().to_string()),
            python_home: Some(test_cloud_dir().join("venv").display().to_string()),
        },
        listen: format!("127.0.0.1:{port}"),
        workers: 1,
    };
    std::fs::create_dir_all(&dir).expect("placement dir");
    for (name, text) in placement::config_files(&inputs) {
        std::fs::write(dir.join(name), text).expect("placement file");
    }
    format!("http://127.0.0.1:{port}")
}

/// GET /resource_providers with `token`: the status.
async fn list_providers(client: &reqwest::Client, base: &str, token: &str) -> u16 {
    client
        .get(format!("{base}/resource_providers"))
        .header("OpenStack-API-Version", "placement 1.14")
        .header("X-Auth-Token", token)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {base}/resource_providers: {e}; {}", logs()))
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_cache_in_memcached_over_tls_and_sasl() {
    let started = std::time::Instant::now();
    let env = external_services_env();
    let get = |k: &str| -> String {
        env.get(k)
            .cloned()
            .unwrap_or_else(|| panic!("{k} missing: run scripts/external-services up"))
    };
    let ca = get("EXTSVC_CA");
    let tls_server = Server {
        addr: get("EXTSVC_MEMCACHED_TLS"),
        ca: Some(ca.clone()),
        ca_only: false,
        sasl: None,
    };
    // Read with host-name checking off: the proof's window into the server the services refuse.
    let wrong_server = Server {
        addr: get("EXTSVC_MEMCACHED_WRONG_NAME"),
        ca: Some(ca.clone()),
        ca_only: true,
        sasl: None,
    };
    let sasl_server = Server {
        addr: get("EXTSVC_MEMCACHED_SASL"),
        ca: None,
        ca_only: false,
        sasl: Some((
            get("EXTSVC_MEMCACHED_USER"),
            get("EXTSVC_MEMCACHED_PASSWORD"),
        )),
    };
    let tls = |addr: &str| Cache {
        servers: vec![addr.to_string()],
        tls: Some(CacheTls {
            ca_file: ca.clone(),
            client_cert: None,
            verify: VerifyMode::Full,
        }),
        sasl: None,
    };
    let sasl = Cache {
        servers: vec![sasl_server.addr.clone()],
        tls: None,
        sasl: sasl_server
            .sasl
            .clone()
            .map(|(username, password)| CacheSasl { username, password }),
    };

    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let _ = ROOT.set(root.to_path_buf());
    let client = reqwest::Client::new();

    // Keystone: fresh database, keys, bootstrap; then served with each cache in turn.
    let spec = keystone_spec();
    let _ks_db = DropDb(KS_DB);
    let ks_db = keystone::Database {
        host: "127.0.0.1".into(),
        port: 13306,
        name: KS_DB.into(),
        user: KS_DB.into(),
        password: password(32),
        ca_file: None,
        verify: Default::default(),
        server_name: None,
    };
    init_database_twice(&ks_db);

    support::cloud::write_key_repository(&root.join("fernet-keys"), &KeyRepository::generate());
    support::cloud::write_key_repository(&root.join("credential-keys"), &KeyRepository::generate());
    let (ks_paths, ks_base) = keystone_files(root, "ks-tls", &spec, &ks_db, tls(&tls_server.addr));
    let conf = PathBuf::from(&ks_paths.config_dir).join("keystone.conf");
    let km = venv_bin("keystone-manage");
    run(
        Command::new(&km)
            .arg("--config-file")
            .arg(&conf)
            .arg("db_sync"),
        "keystone-manage db_sync",
    );
    let ks_admin = password(32);
    run(
        Command::new(&km)
            .arg("--config-file")
            .arg(&conf)
            .args(keystone::bootstrap_args(&spec, &ks_base, &ks_base))
            .env("OS_BOOTSTRAP_PASSWORD", &ks_admin),
        "keystone-manage bootstrap",
    );

    // Keystone's cache keys carry no deployment identity: start from an empty TLS memcached so
    // entries of an earlier run cannot answer for this database.
    assert_eq!(probe(&tls_server, "flush"), serde_json::json!(true));
    let items_before = stat(&tls_server, "total_items");
    {
        let _ks = uwsgi(Path::new(&ks_paths.config_dir), "keystone (TLS cache)");
        wait_http(&ks_base, 120, logs).await;
        exercise_keystone(&client, &ks_base, &ks_admin).await;
    }
    let ks_items = stat(&tls_server, "total_items") - items_before;
    assert!(
        ks_items > 0 && stat(&tls_server, "curr_items") > 0,
        "Keystone stored nothing in the TLS memcached; {}",
        logs()
    );
    eprintln!("Keystone stored {ks_items} items over TLS");

    // Keystone with SASL (oslo.cache's memcache_pool through python-binary-memcached).
    assert_eq!(probe(&sasl_server, "flush"), serde_json::json!(true));
    let sasl_before = stat(&sasl_server, "total_items");
    let (ks_sasl_paths, ks_sasl_base) =
        keystone_files(root, "ks-sasl", &spec, &ks_db, sasl.clone());
    {
        let _ks = uwsgi(
            Path::new(&ks_sasl_paths.config_dir),
            "keystone (SASL cache)",
        );
        wait_http(&ks_sasl_base, 120, logs).await;
        exercise_keystone(&client, &ks_sasl_base, &ks_admin).await;
    }
    assert!(
        stat(&sasl_server, "total_items") > sasl_before,
        "Keystone stored nothing in the SASL memcached; {}",
        logs()
    );

    // Placement against the test cloud's Keystone, its token cache in each memcached.
    let admin_pw = admin_password();
    let _cleanup = KeystoneCleanup {
        admin_password: admin_pw.clone(),
        region: REGION,
        user: USER,
        database: DB,
    };
    let template = ServiceTemplate::default();
    let db = proof_database(DB);
    let auth = proof_keystone_auth(USER);
    init_database_twice(&db);
    let pl_tls = placement_files(root, "pl-tls", &template, &db, &auth, tls(&tls_server.addr));
    let entry = placement::service_entry(&auth, REGION, &pl_tls, &pl_tls);
    register_service_twice(&entry, &admin_pw, &auth.password);
    let sync = placement::db_sync_command(
        &venv_bin("placement-manage").display().to_string(),
        &root.join("pl-tls").display().to_string(),
    );
    run(
        Command::new(&sync[0]).args(&sync[1..]),
        "placement-manage db sync",
    );
    let tables = mariadb_admin(&format!(
        "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = '{DB}' AND table_name = 'resource_providers'"
    ));
    assert_eq!(tables.trim(), "1");

    let (token, _) = service_token(&client, USER, &auth.password).await;
    let key = authtoken_key(&token);
    {
        let _pl = uwsgi(&root.join("pl-tls"), "placement (TLS cache)");
        wait_http(&pl_tls, 120, logs).await;
        assert_eq!(
            list_providers(&client, &pl_tls, &token).await,
            200,
            "{}",
            logs()
        );
        assert_eq!(
            list_providers(&client, &pl_tls, &token).await,
            200,
            "{}",
            logs()
        );
    }
    assert_eq!(
        probe(&tls_server, &format!("has:{key}")),
        serde_json::json!(true),
        "keystonemiddleware did not cache the token in the TLS memcached; {}",
        logs()
    );

    // The wrong-name server: full verification refuses it (python-binary-memcached reports
    // the failed handshake as a cache miss, logging nothing); the API still answers.
    let wrong_before = wrong_counts(&wrong_server);
    let pl_wrong = placement_files(
        root,
        "pl-wrong",
        &template,
        &db,
        &auth,
        tls(&wrong_server.addr),
    );
    {
        let _pl = uwsgi(&root.join("pl-wrong"), "placement (wrong-name cache)");
        wait_http(&pl_wrong, 120, logs).await;
        for _ in 0..2 {
            assert_eq!(
                list_providers(&client, &pl_wrong, &token).await,
                200,
                "{}",
                logs()
            );
        }
    }
    let wrong_after = wrong_counts(&wrong_server);
    eprintln!(
        "wrong-name server (connections, commands, items): {wrong_before:?} -> {wrong_after:?}"
    );
    // The services' TLS context (full verification) fails on the server's certificate.
    let full = Server {
        ca_only: false,
        ..wrong_server.clone()
    };
    let why = probe(&full, "handshake");
    assert!(
        why.as_str()
            .is_some_and(|w| w.contains("CERTIFICATE_VERIFY_FAILED")),
        "{why}"
    );
    assert_eq!(probe(&tls_server, "handshake"), serde_json::json!("ok"));
    // Our probe's own stats connection is one of the new connections; Placement's make more.
    assert!(
        wrong_after.0 >= wrong_before.0 + 2,
        "Placement never tried the wrong-name server; {}",
        logs()
    );
    assert_eq!(
        (wrong_after.1, wrong_after.2),
        (wrong_before.1, wrong_before.2),
        "a command reached the wrong-name server past the failed verification"
    );

    // SASL: keystonemiddleware authenticates to memcached-sasl.
    assert_eq!(probe(&sasl_server, "flush"), serde_json::json!(true));
    let pl_sasl = placement_files(root, "pl-sasl", &template, &db, &auth, sasl.clone());
    {
        let _pl = uwsgi(&root.join("pl-sasl"), "placement (SASL cache)");
        wait_http(&pl_sasl, 120, logs).await;
        assert_eq!(
            list_providers(&client, &pl_sasl, &token).await,
            200,
            "{}",
            logs()
        );
    }
    assert_eq!(
        probe(&sasl_server, &format!("has:{key}")),
        serde_json::json!(true),
        "keystonemiddleware did not cache the token in the SASL memcached; {}",
        logs()
    );
    // Horizon: Django's pymemcache client with the rendered TLS context reaches the TLS
    // memcached, and refuses the wrong-name one (full verification).
    assert_eq!(
        django_cache_roundtrip(root, "hz-tls", tls(&tls_server.addr)),
        "ok"
    );
    let refused = django_cache_roundtrip(root, "hz-wrong", tls(&wrong_server.addr));
    assert!(refused.contains("CERTIFICATE_VERIFY_FAILED"), "{refused}");
    let mut ca_only = tls(&wrong_server.addr);
    if let Some(t) = ca_only.tls.as_mut() {
        t.verify = VerifyMode::CaOnly;
    }
    assert_eq!(django_cache_roundtrip(root, "hz-ca-only", ca_only), "ok");
    eprintln!("cache TLS/SASL proof took {:?}", started.elapsed());
}
