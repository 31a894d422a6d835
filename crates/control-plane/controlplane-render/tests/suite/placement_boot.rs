//! Proof that the rendered Placement configuration works: the operator's own rendering
//! (`placement.conf`, the uwsgi configuration, the shared database script, the db sync command
//! and the shared service-user/catalog script) drives the real Placement of the test cloud's
//! virtualenv against the test cloud's real MariaDB and real Keystone, with a real memcached as
//! keystonemiddleware's token cache.
//!
//! Needs: `scripts/test-cloud up` (MariaDB on 127.0.0.1:13306, Keystone on 127.0.0.1:5000, the
//! venv) and `scripts/control-plane-deps` (memcached, python-memcached in the venv). It uses its
//! own database and user (`cpproof_placement`), its own service user (`cpproof_placement`) and
//! its own region (`CpProofPlacement`) for the catalog endpoints, and removes them again, so
//! the test cloud's Placement and its catalog in `RegionOne` are untouched.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support;
use support::{
    KeystoneCleanup, Proc, admin_password, free_port, init_database_twice, mariadb_admin,
    memcached_items, proof_database, proof_keystone_auth, register_service_twice, rss_kib, run,
    service_token, start_memcached, test_cloud_dir, venv_bin,
};

use controlplane_api::common::ServiceTemplate;
use controlplane_render::placement::{self, Paths, PlacementInputs};
use controlplane_render::secrets::password;

const REGION: &str = "CpProofPlacement";
const USER: &str = "cpproof_placement";
const DB: &str = "cpproof_placement";

async fn get(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    mv: &str,
) -> reqwest::Response {
    let mut r = client
        .get(url)
        .header("OpenStack-API-Version", format!("placement {mv}"));
    if let Some(t) = token {
        r = r.header("X-Auth-Token", t);
    }
    match r.send().await {
        Ok(r) => r,
        Err(e) => panic!("GET {url}: {e:?}; {}", read_logs()),
    }
}

/// The proof's temporary directory, for the logs a failure shows.
static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

fn read_logs() -> String {
    let Some(root) = ROOT.get() else {
        return String::new();
    };
    format!(
        "uwsgi log:\n{}\nplacement log:\n{}",
        std::fs::read_to_string(root.join("uwsgi.log")).unwrap_or_default(),
        std::fs::read_to_string(root.join("placement.log")).unwrap_or_default()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rendered_placement_boots_and_serves_resource_providers() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let _ = ROOT.set(root.to_path_buf());
    let (api_port, mc_port) = (free_port(), free_port());
    let admin_pw = admin_password();
    let _cleanup = KeystoneCleanup {
        admin_password: admin_pw.clone(),
        region: REGION,
        user: USER,
        database: DB,
    };

    let _memcached = start_memcached(mc_port);

    let mut template = ServiceTemplate::default();
    // A user override, as a cluster would set one; Placement must still start with it.
    template.config_overrides.insert(
        "placement".into(),
        [("max_allocation_candidates".to_string(), "500".to_string())].into(),
    );
    let db = proof_database(DB);
    let keystone = proof_keystone_auth(USER);
    let paths = Paths {
        config_dir: root.join("etc").display().to_string(),
        log_file: Some(root.join("placement.log").display().to_string()),
        python_home: Some(test_cloud_dir().join("venv").display().to_string()),
    };
    let inputs = PlacementInputs {
        template: &template,
        database: db.clone(),
        keystone: keystone.clone(),
        cache: controlplane_render::cache::Cache::plain(vec![format!("127.0.0.1:{mc_port}")]),
        paths: paths.clone(),
        listen: format!("127.0.0.1:{api_port}"),
        workers: 1,
    };
    let base = format!("http://127.0.0.1:{api_port}");

    // The database Job's script (shared with Keystone), twice: Jobs are retried.
    init_database_twice(&db);

    // The service-user step against the real Keystone, twice: the second run converges on
    // what the first created instead of failing or duplicating.
    let entry = placement::service_entry(&keystone, REGION, &base, &base);
    register_service_twice(&entry, &admin_pw, &keystone.password);

    std::fs::create_dir_all(&paths.config_dir).expect("etc");
    for (name, text) in placement::config_files(&inputs) {
        std::fs::write(PathBuf::from(&paths.config_dir).join(name), text).expect("config file");
    }
    let manage = venv_bin("placement-manage").display().to_string();
    let sync = placement::db_sync_command(&manage, &paths.config_dir);
    run(
        Command::new(&sync[0]).args(&sync[1..]),
        "placement-manage db sync",
    );
    // The schema landed in the rendered database, not elsewhere.
    let tables = mariadb_admin(&format!(
        "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = '{DB}' AND table_name = 'resource_providers'"
    ));
    assert_eq!(
        tables.trim(),
        "1",
        "db sync did not create {DB}.resource_providers"
    );

    let uwsgi = Command::new(venv_bin("uwsgi"))
        .arg("--ini")
        .arg(PathBuf::from(&paths.config_dir).join("uwsgi.ini"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(root.join("uwsgi.log")).expect("uwsgi log"))
        .spawn()
        .expect("start uwsgi");
    let _uwsgi = Proc(uwsgi, "uwsgi");
    let logs = read_logs;

    let client = reqwest::Client::new();
    // The version document answers without a token once the app is loaded (a bounded wait).
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(r) = client.get(&base).send().await
            && r.status().is_success()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Placement did not answer on {base}; {}",
            logs()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // auth_strategy = keystone: no token and a forged token are refused.
    let rps = format!("{base}/resource_providers");
    assert_eq!(
        get(&client, &rps, None, "1.14").await.status(),
        401,
        "{}",
        logs()
    );
    assert_eq!(
        get(&client, &rps, Some("gAAAAABforged"), "1.14")
            .await
            .status(),
        401
    );

    // The service user the step created authenticates, and the catalog it set up is there.
    let (token, body) = service_token(&client, USER, &keystone.password).await;
    let svc = body["token"]["catalog"]
        .as_array()
        .and_then(|c| c.iter().find(|s| s["type"] == placement::SERVICE_TYPE))
        .expect("placement in the catalog");
    let ours: Vec<_> = svc["endpoints"]
        .as_array()
        .map(|e| e.iter().filter(|e| e["region_id"] == REGION).collect())
        .unwrap_or_default();
    assert_eq!(
        ours.len(),
        3,
        "public/internal/admin endpoints in {REGION}: {svc}"
    );
    assert!(ours.iter().all(|e| e["url"] == base.as_str()), "{svc}");

    let resp = get(&client, &rps, Some(&token), "1.14").await;
    assert_eq!(resp.status(), 200, "{}", logs());
    let listed: serde_json::Value = resp.json().await.expect("list JSON");
    assert_eq!(
        listed["resource_providers"].as_array().map(Vec::len),
        Some(0)
    );

    // Create one (1.20 answers with the provider) and read it back.
    let name = format!("cpproof-rp-{}", password(8));
    let resp = client
        .post(&rps)
        .header("OpenStack-API-Version", "placement 1.20")
        .header("X-Auth-Token", &token)
        .json(&serde_json::json!({"name": name}))
        .send()
        .await
        .expect("create provider");
    assert_eq!(resp.status(), 200, "{}", logs());
    let created: serde_json::Value = resp.json().await.expect("provider JSON");
    let uuid = created["uuid"].as_str().expect("provider uuid").to_string();
    let resp = get(&client, &format!("{rps}/{uuid}"), Some(&token), "1.14").await;
    assert_eq!(resp.status(), 200);
    let read: serde_json::Value = resp.json().await.expect("provider JSON");
    assert_eq!(read["name"], name.as_str());
    let listed: serde_json::Value = get(&client, &rps, Some(&token), "1.14")
        .await
        .json()
        .await
        .expect("list JSON");
    assert_eq!(listed["resource_providers"][0]["uuid"], uuid.as_str());
    // ... and it is stored in the rendered database.
    let stored = mariadb_admin(&format!(
        "SELECT name FROM {DB}.resource_providers WHERE uuid = '{uuid}'"
    ));
    assert_eq!(stored.trim(), name);

    eprintln!(
        "placement-api (uwsgi master + 1 worker) RSS after serving: {} MiB",
        rss_kib(_uwsgi.0.id()) / 1024
    );

    // keystonemiddleware cached the validated token in the memcached the config names.
    assert!(
        memcached_items(mc_port) > 0,
        "memcached stored nothing; {}",
        logs()
    );
}
