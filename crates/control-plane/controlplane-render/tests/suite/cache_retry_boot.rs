//! Proof that the rendered cache retry options keep Keystone answering when its memcached
//! connections are cut: the real Keystone of the test cloud's venv, booted from the operator's
//! rendering, caches in a memcached of the proof's own through a relay that closes every open
//! connection on demand (as a memcached restart, a load balancer or a network reset does).
//! After each cut, token requests and validations all succeed: oslo.cache's retrying client
//! (`enable_retry_client`) makes the call again on a fresh connection. The same Keystone with
//! the retry options taken out of its `[cache]` answers 500 after a cut
//! (`pymemcache.exceptions.MemcacheUnexpectedCloseError`), which is what Keystones on real pods
//! did before the options were rendered.
//!
//! Needs: `scripts/test-cloud up` (MariaDB on 127.0.0.1:13306, the venv) and
//! `scripts/control-plane-deps` (memcached, pymemcache in the venv). Its own database
//! (`cpproof_cacheretry`), removed again.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::support;
use support::{
    Proc, free_port, init_database_twice, log_tails, memcached_items, run, spawn_logged,
    start_memcached, test_cloud_dir, venv_bin, wait_http,
};

use controlplane_api::KeystoneSpec;
use controlplane_api::common::{ExternalServiceRef, ServiceTemplate};
use controlplane_api::keystone::{DatabaseSpec, TokenSettings};
use controlplane_render::KeyRepository;
use controlplane_render::cache::{Cache, PYMEMCACHE_OPTIONS};
use controlplane_render::keystone;
use controlplane_render::secrets::password;
use tokio::net::{TcpListener, TcpStream};

const KS_DB: &str = "cpproof_cacheretry";

static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

fn logs() -> String {
    match ROOT.get() {
        Some(r) => log_tails(
            r,
            &[
                "retry/keystone.log",
                "retry/uwsgi.log",
                "no-retry/keystone.log",
                "no-retry/uwsgi.log",
            ],
            30,
        ),
        None => String::new(),
    }
}

/// A TCP relay to `upstream` whose open connections [`Relay::cut`] closes.
struct Relay {
    addr: String,
    cut: tokio::sync::watch::Sender<u64>,
    /// Connections closed by a cut so far.
    closed: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start(upstream: String) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("relay bind");
        let addr = listener.local_addr().expect("relay addr").to_string();
        let (cut, _) = tokio::sync::watch::channel(0u64);
        let closed = Arc::new(AtomicUsize::new(0));
        let (tx, c) = (cut.clone(), closed.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut down, _)) = listener.accept().await {
                let Ok(mut up) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let mut rx = tx.subscribe();
                rx.borrow_and_update();
                let c = c.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut down, &mut up) => {}
                        // Both sockets drop: the client sees its connection closed.
                        _ = rx.changed() => { c.fetch_add(1, Ordering::SeqCst); }
                    }
                });
            }
        });
        Relay {
            addr,
            cut,
            closed,
            task,
        }
    }

    /// Closes every open connection; how many were closed so far in all.
    async fn cut(&self) -> usize {
        self.cut.send_modify(|g| *g += 1);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        self.closed.load(Ordering::SeqCst)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Drops the proof's database when the proof ends.
struct DropDb;
impl Drop for DropDb {
    fn drop(&mut self) {
        let _ = Command::new("mariadb")
            .args(["-h", "127.0.0.1", "-P", "13306", "-u", "root", "-e"])
            .arg(format!(
                "DROP DATABASE IF EXISTS {KS_DB}; DROP USER IF EXISTS '{KS_DB}'@'%'"
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

/// Keystone's rendered files under `root/<tag>` (keys in `root`), caching in `cache`; with
/// `strip`, the lines of these `[cache]` options taken out. Its config file and base URL.
fn keystone_files(
    root: &Path,
    tag: &str,
    db: &keystone::Database,
    cache: Cache,
    strip: &[&str],
) -> (PathBuf, String) {
    let dir = root.join(tag);
    let spec = keystone_spec();
    let paths = keystone::Paths {
        config_dir: dir.display().to_string(),
        fernet_keys: root.join("fernet-keys").display().to_string(),
        credential_keys: root.join("credential-keys").display().to_string(),
        log_file: Some(dir.join("keystone.log").display().to_string()),
        python_home: Some(test_cloud_dir().join("venv").display().to_string()),
    };
    let port = free_port();
    let inputs = keystone::KeystoneInputs {
        spec: &spec,
        database: db.clone(),
        cache,
        paths,
        listen: format!("127.0.0.1:{port}"),
        workers: 1,
    };
    let conf: String = keystone::keystone_conf(&inputs)
        .lines()
        .filter(|l| !strip.iter().any(|k| l.starts_with(&format!("{k} = "))))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::create_dir_all(&dir).expect("keystone dir");
    std::fs::write(dir.join("keystone.conf"), conf).expect("conf");
    std::fs::write(dir.join("uwsgi.ini"), keystone::uwsgi_ini(&inputs)).expect("uwsgi.ini");
    (
        dir.join("keystone.conf"),
        format!("http://127.0.0.1:{port}/v3"),
    )
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

/// A token request and a validation of the token: their statuses (0: no answer).
async fn token_and_validation(client: &reqwest::Client, base: &str, pw: &str) -> (u16, u16) {
    let body = serde_json::json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": "admin", "domain": {"id": "default"}, "password": pw}}},
        "scope": {"project": {"name": "admin", "domain": {"id": "default"}}}}});
    let Ok(resp) = client
        .post(format!("{base}/auth/tokens"))
        .json(&body)
        .send()
        .await
    else {
        return (0, 0);
    };
    let issued = resp.status().as_u16();
    let Some(token) = resp
        .headers()
        .get("x-subject-token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
    else {
        return (issued, 0);
    };
    let validated = client
        .get(format!("{base}/auth/tokens"))
        .header("X-Auth-Token", &token)
        .header("X-Subject-Token", &token)
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0);
    (issued, validated)
}

/// `rounds` cuts of the relay, each followed by `per_round` token requests and validations:
/// the answers that were not 201/200, and the connections cut.
async fn cut_and_ask(
    relay: &Relay,
    client: &reqwest::Client,
    base: &str,
    pw: &str,
    rounds: usize,
    per_round: usize,
) -> (Vec<(u16, u16)>, usize) {
    let before = relay.closed.load(Ordering::SeqCst);
    let mut bad = Vec::new();
    for _ in 0..rounds {
        relay.cut().await;
        for _ in 0..per_round {
            let got = token_and_validation(client, base, pw).await;
            if got != (201, 200) {
                bad.push(got);
            }
        }
    }
    (bad, relay.closed.load(Ordering::SeqCst) - before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keystone_answers_through_cut_memcached_connections() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let _ = ROOT.set(root.to_path_buf());
    let mc_port = free_port();
    let _mc = start_memcached(mc_port);
    let relay = Relay::start(format!("127.0.0.1:{mc_port}")).await;
    let cache = Cache::plain(vec![relay.addr.clone()]);

    let _db = DropDb;
    let db = keystone::Database {
        host: "127.0.0.1".into(),
        port: 13306,
        name: KS_DB.into(),
        user: KS_DB.into(),
        password: password(32),
        ca_file: None,
        verify: Default::default(),
        server_name: None,
    };
    init_database_twice(&db);
    support::cloud::write_key_repository(&root.join("fernet-keys"), &KeyRepository::generate());
    support::cloud::write_key_repository(&root.join("credential-keys"), &KeyRepository::generate());
    let (conf, base) = keystone_files(root, "retry", &db, cache.clone(), &[]);
    let rendered = std::fs::read_to_string(&conf).expect("conf");
    for (k, v) in PYMEMCACHE_OPTIONS {
        assert!(
            rendered.contains(&format!("{k} = {v}\n")),
            "{k} not rendered:\n{rendered}"
        );
    }
    let km = venv_bin("keystone-manage");
    run(
        Command::new(&km)
            .arg("--config-file")
            .arg(&conf)
            .arg("db_sync"),
        "keystone-manage db_sync",
    );
    let admin = password(32);
    run(
        Command::new(&km)
            .arg("--config-file")
            .arg(&conf)
            .args(keystone::bootstrap_args(&keystone_spec(), &base, &base))
            .env("OS_BOOTSTRAP_PASSWORD", &admin),
        "keystone-manage bootstrap",
    );
    let client = reqwest::Client::new();

    // The rendered configuration: every request after every cut answers.
    {
        let _ks = uwsgi(&root.join("retry"), "keystone (rendered cache)");
        wait_http(&base, 120, logs).await;
        for _ in 0..3 {
            assert_eq!(
                token_and_validation(&client, &base, &admin).await,
                (201, 200),
                "{}",
                logs()
            );
        }
        assert!(
            memcached_items(mc_port) > 0,
            "Keystone cached nothing; {}",
            logs()
        );
        let (bad, cut) = cut_and_ask(&relay, &client, &base, &admin, 5, 4).await;
        assert!(cut >= 5, "only {cut} connections were cut; {}", logs());
        assert!(
            bad.is_empty(),
            "after {cut} cut connections, answers {bad:?}; {}",
            logs()
        );
        eprintln!(
            "rendered cache: 5 cuts ({cut} connections), 20 tokens and validations, all answered"
        );
    }

    // The control: the same Keystone without the retry options fails after a cut.
    let keys: Vec<&str> = PYMEMCACHE_OPTIONS.iter().map(|(k, _)| *k).collect();
    let (_, base) = keystone_files(root, "no-retry", &db, cache, &keys);
    let _ks = uwsgi(&root.join("no-retry"), "keystone (no retry options)");
    wait_http(&base, 120, logs).await;
    for _ in 0..3 {
        assert_eq!(
            token_and_validation(&client, &base, &admin).await,
            (201, 200),
            "{}",
            logs()
        );
    }
    let (bad, cut) = cut_and_ask(&relay, &client, &base, &admin, 5, 4).await;
    eprintln!("without the retry options: {cut} connections cut, failed answers {bad:?}");
    assert!(
        !bad.is_empty(),
        "the control answered through {cut} cut connections: the proof shows nothing"
    );
    let log = std::fs::read_to_string(root.join("no-retry/keystone.log")).unwrap_or_default();
    assert!(
        log.contains("MemcacheUnexpectedCloseError") || log.contains("Connection reset"),
        "the control failed for another reason; {}",
        logs()
    );
}
