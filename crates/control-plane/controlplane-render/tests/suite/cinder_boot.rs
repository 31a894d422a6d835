//! Proof that the rendered Cinder configuration works: the operator's own rendering
//! (`cinder.conf` with an RBD backend, the backend's Ceph client file, the uwsgi configuration,
//! the shared database script, the db sync and online-migration commands and the shared
//! service-user/catalog script) drives the real Cinder 2026.1 of the test cloud's virtualenv
//! (API under uwsgi, `cinder-scheduler`, `cinder-volume` with the RBD driver) against the test
//! cloud's MariaDB and Keystone, the harness's RabbitMQ over TLS and the harness's real Ceph
//! cluster: a volume type bound to the backend, its pool in the scheduler's stats, a volume
//! that becomes an RBD image in Ceph and goes away again.
//!
//! Needs: `scripts/test-cloud up`, `scripts/external-services up` (RabbitMQ, Ceph) and
//! `scripts/control-plane-deps` (memcached; the rados/rbd modules in the venv). Everything it
//! creates has a name of its own and is removed again: database and user `cinder_proof`,
//! service user `cpproof_cinder`, region `CpProofCinder`, RabbitMQ vhost `cinder_proof`, Ceph
//! pool and client `cinder_proof`.
//!
//! The harness's Ceph runs no manager daemon, so the monitor has no pool statistics: the RBD
//! driver's capacity query fails (`osd pool get-quota`: "no stats for pool") and it reports its
//! capacity as `unknown`, which the scheduler's capacity filter accepts. Everything else is the
//! unmodified driver against the real cluster.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::support;
use support::{
    KeystoneCleanup, Proc, admin_password, api_call, ceph, external_services_dir,
    external_services_env, free_port, init_database_twice, log_tails, mariadb_admin,
    memcached_items, proof_database, proof_keystone_auth, rabbitmqctl, register_service_twice,
    rss_kib, run, service_token, start_memcached, test_cloud_dir, until, venv_bin,
};

use controlplane_api::common::ServiceTemplate;
use controlplane_render::cinder::services::VolumeServices;
use controlplane_render::cinder::{
    self, Backend, BackendKind, CinderInputs, Messaging, MessagingTls, Nfs, Paths, Rbd,
};
use controlplane_render::secrets::password;
use serde_json::{Value, json};

const REGION: &str = "CpProofCinder";
const USER: &str = "cpproof_cinder";
const DB: &str = "cinder_proof";
const POOL: &str = "cinder_proof";
const CEPH_CLIENT: &str = "cinder_proof";
const VHOST: &str = "cinder_proof";
const BACKEND: &str = "ceph_proof";
const VOLUME_HOST: &str = "cpproof-cinder-volume";

/// Every `[nova]` option is one of Cinder's `[nova]` group or of the auth plugin its
/// `auth_type` names (what oslo-config-validator cannot see: plugin options are registered when
/// the plugin loads).
const NOVA_OPTIONS_CHECK: &str = r#"import configparser, sys
from keystoneauth1 import loading
from cinder import opts
c = configparser.RawConfigParser()
c.read(sys.argv[1])
known = {o.dest for g, group_opts in opts.list_opts() if getattr(g, "name", g) == "nova"
         for o in group_opts}
known |= {o.dest for o in loading.get_auth_plugin_conf_options(c["nova"]["auth_type"])}
unknown = sorted(set(c["nova"]) - known - set(c.defaults()))
sys.exit("unknown [nova] options: %s" % unknown if unknown else 0)
"#;

/// Removes the proof's Ceph pool and client and its RabbitMQ vhost (the Keystone entries and
/// the database are [`KeystoneCleanup`]'s).
struct CephAndQueueCleanup;

fn remove_pool_and_client() {
    if ceph(&["osd", "pool", "ls"]).is_ok_and(|l| l.lines().any(|p| p == POOL)) {
        // Pool deletion is off by default; allow it for this one deletion and put the
        // monitor's setting back as it was.
        let before = ceph(&["config", "get", "mon", "mon_allow_pool_delete"]).unwrap_or_default();
        let _ = ceph(&["config", "set", "mon", "mon_allow_pool_delete", "true"]);
        if let Err(e) = ceph(&[
            "osd",
            "pool",
            "delete",
            POOL,
            POOL,
            "--yes-i-really-really-mean-it",
        ]) {
            eprintln!("clean-up: {e}");
        }
        if before.trim() == "true" {
            let _ = ceph(&["config", "set", "mon", "mon_allow_pool_delete", "true"]);
        } else {
            let _ = ceph(&["config", "rm", "mon", "mon_allow_pool_delete"]);
        }
    }
    let _ = ceph(&["auth", "del", &format!("client.{CEPH_CLIENT}")]);
}

impl Drop for CephAndQueueCleanup {
    fn drop(&mut self) {
        remove_pool_and_client();
        if rabbitmqctl(&["list_vhosts"]).is_ok_and(|l| l.lines().any(|v| v.trim() == VHOST))
            && let Err(e) = rabbitmqctl(&["delete_vhost", VHOST])
        {
            eprintln!("clean-up: {e}");
        }
    }
}

/// The proof's temporary directory, for the logs a failure shows.
static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

fn logs() -> String {
    ROOT.get()
        .map(|root| {
            log_tails(
                root,
                &["uwsgi.log", "cinder-api.log", "scheduler.log", "volume.log"],
                40,
            )
        })
        .unwrap_or_default()
}

/// One Cinder API call at the microversion the proof speaks.
async fn call(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut headers = vec![("OpenStack-API-Version", "volume 3.70")];
    if let Some(t) = token {
        headers.push(("X-Auth-Token", t));
    }
    api_call(client, method, url, &headers, body, logs).await
}

fn spawn(cmd: &[String], extra: &[&str], log: &Path, name: &'static str) -> Proc {
    let child = Command::new(&cmd[0])
        .args(&cmd[1..])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log.with_extension("err")).expect("stderr file"))
        .spawn()
        .unwrap_or_else(|e| panic!("start {name}: {e}"));
    Proc(child, name)
}

fn rbd_images(conf: &Path) -> Vec<String> {
    run(
        Command::new("timeout")
            .arg("30")
            .arg("rbd")
            .arg("-c")
            .arg(conf)
            .args(["--id", CEPH_CLIENT, "ls", "-p", POOL]),
        "rbd ls",
    )
    .lines()
    .map(String::from)
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rendered_cinder_creates_rbd_volumes_in_real_ceph() {
    let t0 = Instant::now();
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let _ = ROOT.set(root.to_path_buf());
    let env = external_services_env();
    let var = |k: &str| {
        env.get(k)
            .cloned()
            .unwrap_or_else(|| panic!("{k} missing from the external-services env file"))
    };
    let (api_port, mc_port) = (free_port(), free_port());
    let admin_pw = admin_password();
    let _cleanup = KeystoneCleanup {
        admin_password: admin_pw.clone(),
        region: REGION,
        user: USER,
        database: DB,
    };
    let _ceph_cleanup = CephAndQueueCleanup;
    let _memcached = start_memcached(mc_port);

    // Ceph: a pool of the proof's own for RBD and a client with the RBD profile on it (a
    // leftover of an interrupted run goes first).
    let started = Instant::now();
    remove_pool_and_client();
    ceph(&["osd", "pool", "create", POOL, "8"]).expect("create pool");
    ceph(&["osd", "pool", "application", "enable", POOL, "rbd"]).expect("enable rbd");
    let keyring = ceph(&[
        "auth",
        "get-or-create",
        &format!("client.{CEPH_CLIENT}"),
        "mon",
        "profile rbd",
        "osd",
        &format!("profile rbd pool={POOL}"),
    ])
    .expect("create the client");
    let keyring_path = root.join("keyring");
    std::fs::write(&keyring_path, keyring).expect("keyring");
    let cluster_conf = std::fs::read_to_string(external_services_dir().join("etc/ceph/ceph.conf"))
        .expect("the harness's ceph.conf");
    // RabbitMQ: a vhost of the proof's own for the harness's user.
    if !rabbitmqctl(&["list_vhosts"])
        .expect("list vhosts")
        .lines()
        .any(|v| v.trim() == VHOST)
    {
        rabbitmqctl(&["add_vhost", VHOST]).expect("add vhost");
    }
    let mq_user = var("EXTSVC_AMQP_USER");
    rabbitmqctl(&["set_permissions", "-p", VHOST, &mq_user, ".*", ".*", ".*"])
        .expect("vhost permissions");
    let setup_time = started.elapsed();

    let venv = test_cloud_dir().join("venv");
    let etc = root.join("etc");
    let paths = Paths {
        config_dir: etc.display().to_string(),
        api_paste_config: venv.join("etc/cinder/api-paste.ini").display().to_string(),
        resource_filters: venv
            .join("etc/cinder/resource_filters.json")
            .display()
            .to_string(),
        state_path: root.join("state").display().to_string(),
        log_file: Some(root.join("cinder-api.log").display().to_string()),
        python_home: Some(venv.display().to_string()),
    };
    let rbd_backend = Backend {
        name: BACKEND.into(),
        kind: BackendKind::Rbd(Rbd {
            pool: POOL.into(),
            user: CEPH_CLIENT.into(),
            cluster_conf,
            keyring: keyring_path.display().to_string(),
            secret_uuid: "3c1a9f4e-2b7d-4e55-9a0b-6f1d2c3e4f50".into(),
        }),
    };
    let nfs_backend = Backend {
        name: "nfs_proof".into(),
        kind: BackendKind::Nfs(Nfs {
            shares: vec!["127.0.0.1:/export/cinder".into()],
            mount_options: Some("vers=4.1,nconnect=2".into()),
        }),
    };
    let mut template = ServiceTemplate::default();
    // A user override in the backend's section, as a cluster would set one: RBD objects of
    // 8 MiB instead of 4 (checked on the image below).
    template.config_overrides.insert(
        BACKEND.into(),
        [("rbd_store_chunk_size".to_string(), "8".to_string())].into(),
    );
    // Heartbeats every 2 s, down after 10 s without one (defaults 10 s and 60 s): the proof
    // sees a stopped cinder-volume reported down without waiting a minute.
    template.config_overrides.insert(
        "DEFAULT".into(),
        [
            ("report_interval".to_string(), "2".to_string()),
            ("service_down_time".to_string(), "10".to_string()),
        ]
        .into(),
    );
    let db = proof_database(DB);
    let keystone = proof_keystone_auth(USER);
    let inputs = CinderInputs {
        template: &template,
        database: db.clone(),
        messaging: Messaging {
            hosts: vec![var("EXTSVC_AMQPS")],
            user: mq_user.clone(),
            password: var("EXTSVC_AMQP_PASSWORD"),
            vhost: VHOST.into(),
            tls: Some(MessagingTls {
                ca_file: Some(var("EXTSVC_CA")),
                client_cert: None,
            }),
        },
        keystone: keystone.clone(),
        cache: controlplane_render::cache::Cache::plain(vec![format!("127.0.0.1:{mc_port}")]),
        backends: vec![rbd_backend.clone()],
        volume_host: VOLUME_HOST.into(),
        paths: paths.clone(),
        listen: format!("127.0.0.1:{api_port}"),
        workers: 1,
    };
    assert_eq!(
        cinder::backend::validate("spec.backends", &[rbd_backend.clone(), nfs_backend.clone()]),
        vec![]
    );
    let base = format!("http://127.0.0.1:{api_port}");

    init_database_twice(&db);
    let started = Instant::now();
    for entry in cinder::service_entries(&keystone, REGION, &base, &base) {
        register_service_twice(&entry, &admin_pw, &keystone.password);
    }
    let register_time = started.elapsed();

    std::fs::create_dir_all(&etc).expect("etc");
    std::fs::create_dir_all(&paths.state_path).expect("state");
    let files = cinder::config_files(&inputs);
    for (name, text) in &files {
        std::fs::write(etc.join(name), text).expect("config file");
    }

    // Every option is one the installed Cinder and its libraries define: the booted file, and
    // a rendering with both backends (the NFS one is validated, not booted: see the docs).
    // Backend sections are checked as [backend_defaults], where Cinder registers every
    // driver's options.
    let mut both = inputs.clone();
    both.backends = vec![rbd_backend.clone(), nfs_backend.clone()];
    let both_conf = cinder::cinder_conf(&both);
    assert!(both_conf.contains("enabled_backends = ceph_proof,nfs_proof\n"));
    let started = Instant::now();
    // The two validator runs and the [nova] check side by side (each loads all of Cinder).
    let nova_check = Command::new(venv_bin("python3"))
        .arg("-c")
        .arg(NOVA_OPTIONS_CHECK)
        .arg(etc.join("cinder.conf"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the [nova] check");
    let validators: Vec<_> = [
        (
            "validate-booted.conf",
            cinder::validation_view(&files["cinder.conf"], &inputs.backends),
        ),
        (
            "validate-both.conf",
            cinder::validation_view(&both_conf, &both.backends),
        ),
    ]
    .into_iter()
    .map(|(file, text)| {
        std::fs::write(root.join(file), text).expect("validation copy");
        let mut c = Command::new(venv_bin("oslo-config-validator"));
        for ns in cinder::OPTION_NAMESPACES {
            c.args(["--namespace", ns]);
        }
        // [nova]'s auth-plugin options exist only once its auth_type is loaded: checked apart.
        c.args(["--exclude-group", "nova", "--input-file"])
            .arg(root.join(file))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        (file, c.spawn().expect("start oslo-config-validator"))
    })
    .collect();
    for (file, child) in validators {
        let out = child.wait_with_output().expect("oslo-config-validator");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let errors: Vec<_> = stderr
            .lines()
            // The validator's own findings (stevedore's warnings about namespaces without a
            // defaults hook are not about the file).
            .filter(|l| l.starts_with("ERROR") || l.starts_with("WARNING:root"))
            .collect();
        assert!(
            out.status.success() && errors.is_empty(),
            "{file} fails validation against the installed option definitions: {errors:#?}\n{stderr}"
        );
    }
    let out = nova_check.wait_with_output().expect("[nova] check");
    assert!(
        out.status.success(),
        "[nova] options check: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let validate_time = started.elapsed();

    // db sync twice (a retried Job), then the online data migrations.
    let manage = venv_bin("cinder-manage").display().to_string();
    let sync = cinder::db_sync_command(&manage, &paths);
    let started = Instant::now();
    run(
        Command::new(&sync[0]).args(&sync[1..]),
        "cinder-manage db sync",
    );
    let sync_time = started.elapsed();
    run(
        Command::new(&sync[0]).args(&sync[1..]),
        "cinder-manage db sync (again)",
    );
    let odm = cinder::online_data_migrations_command(&manage, &paths);
    run(
        Command::new(&odm[0]).args(&odm[1..]),
        "cinder-manage db online_data_migrations",
    );
    let tables = mariadb_admin(&format!(
        "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = '{DB}' AND table_name IN ('volumes', 'volume_types', 'services')"
    ));
    assert_eq!(tables.trim(), "3", "db sync did not create {DB}'s tables");

    // The three services, from the same files.
    let started = Instant::now();
    let uwsgi = Command::new(venv_bin("uwsgi"))
        .arg("--ini")
        .arg(etc.join("uwsgi.ini"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(root.join("uwsgi.log")).expect("uwsgi log"))
        .spawn()
        .expect("start uwsgi");
    let uwsgi = Proc(uwsgi, "uwsgi (cinder-api)");
    let scheduler = spawn(
        &cinder::scheduler_command(&venv_bin("cinder-scheduler").display().to_string(), &paths),
        &[
            "--log-file",
            &root.join("scheduler.log").display().to_string(),
        ],
        &root.join("scheduler.log"),
        "cinder-scheduler",
    );
    let volume = spawn(
        &cinder::volume_command(&venv_bin("cinder-volume").display().to_string(), &paths),
        &["--log-file", &root.join("volume.log").display().to_string()],
        &root.join("volume.log"),
        "cinder-volume",
    );
    let client = reqwest::Client::new();
    until("the API answers its version document", 120, logs, || {
        let client = client.clone();
        let base = base.clone();
        async move {
            match client.get(&base).send().await {
                Ok(r) if r.status().as_u16() < 500 => Some(()),
                _ => None,
            }
        }
    })
    .await;
    let api_time = started.elapsed();

    let (status, _) = call(
        &client,
        reqwest::Method::GET,
        &format!("{base}/v3/volumes"),
        None,
        None,
    )
    .await;
    assert_eq!(status, 401, "no token; {}", logs());
    let (token, body) = service_token(&client, USER, &keystone.password).await;
    let project = body["token"]["project"]["id"]
        .as_str()
        .expect("project id")
        .to_string();
    for kind in [cinder::SERVICE_TYPE, cinder::LEGACY_SERVICE_TYPE] {
        let svc = body["token"]["catalog"]
            .as_array()
            .and_then(|c| c.iter().find(|s| s["type"] == kind))
            .unwrap_or_else(|| panic!("{kind} in the catalog"));
        let ours: Vec<_> = svc["endpoints"]
            .as_array()
            .map(|e| e.iter().filter(|e| e["region_id"] == REGION).collect())
            .unwrap_or_default();
        assert_eq!(ours.len(), 3, "{kind} endpoints in {REGION}: {svc}");
        assert!(
            ours.iter()
                .all(|e| e["url"] == format!("{base}/v3").as_str()),
            "{svc}"
        );
    }
    let v3 = format!("{base}/v3/{project}");
    let t = Some(token.as_str());

    // The scheduler and the volume service reported over RabbitMQ, and the backend's pool is
    // in the scheduler's stats.
    let pool_name = format!("{VOLUME_HOST}@{BACKEND}#{BACKEND}");
    let pool = until(
        "the backend's pool in the scheduler's stats",
        120,
        logs,
        || {
            let (client, url) = (
                client.clone(),
                format!("{v3}/scheduler-stats/get_pools?detail=true"),
            );
            let token = token.clone();
            let pool_name = pool_name.clone();
            async move {
                let (status, body) =
                    call(&client, reqwest::Method::GET, &url, Some(&token), None).await;
                if status != 200 {
                    return None;
                }
                body["pools"]
                    .as_array()?
                    .iter()
                    .find(|p| p["name"] == pool_name.as_str())
                    .cloned()
            }
        },
    )
    .await;
    let services_time = started.elapsed();
    assert_eq!(
        pool["capabilities"]["volume_backend_name"], BACKEND,
        "{pool}"
    );
    assert_eq!(pool["capabilities"]["storage_protocol"], "ceph", "{pool}");
    eprintln!(
        "scheduler stats of {pool_name}: total_capacity_gb {}, free_capacity_gb {}",
        pool["capabilities"]["total_capacity_gb"], pool["capabilities"]["free_capacity_gb"]
    );
    let location = pool["capabilities"]["location_info"]
        .as_str()
        .unwrap_or_default();
    // ceph:<conf>:<fsid>:<user>:<pool>: the driver connected and read the cluster's fsid.
    let fsid = ceph(&["fsid"]).expect("fsid");
    assert!(
        location.contains(fsid.trim()) && location.ends_with(&format!(":{CEPH_CLIENT}:{POOL}")),
        "{pool}"
    );
    let (_, services) = call(
        &client,
        reqwest::Method::GET,
        &format!("{v3}/os-services"),
        t,
        None,
    )
    .await;
    let up: Vec<(String, String)> = services["services"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|s| s["state"] == "up")
                .map(|s| {
                    (
                        s["binary"].as_str().unwrap_or_default().to_string(),
                        s["host"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert!(
        up.iter().any(|(b, _)| b == "cinder-scheduler")
            && up
                .iter()
                .any(|(b, h)| b == "cinder-volume" && *h == format!("{VOLUME_HOST}@{BACKEND}")),
        "services up: {up:?}"
    );
    // What the operator's Ready reads: every rendered volume host listed up.
    let hosts = cinder::services::volume_hosts(VOLUME_HOST, &[BACKEND.to_string()], &[]);
    let (status, listed) = call(
        &client,
        reqwest::Method::GET,
        &format!("{v3}/os-services?binary=cinder-volume"),
        t,
        None,
    )
    .await;
    assert_eq!(status, 200, "os-services?binary=cinder-volume: {listed}");
    let v = VolumeServices::read(&hosts, &listed).expect("os-services");
    assert_eq!(v.up, hosts, "{listed}");
    assert_eq!(v.down_message(), None);
    // The RPC connections run over TLS in the proof's vhost.
    let conns = rabbitmqctl(&["list_connections", "vhost", "ssl"]).expect("list connections");
    let ours: Vec<&str> = conns.lines().filter(|l| l.starts_with(VHOST)).collect();
    assert!(
        !ours.is_empty()
            && ours
                .iter()
                .all(|l| l.split_whitespace().nth(1) == Some("true")),
        "connections in {VHOST}: {conns}"
    );

    // A volume type bound to the backend, and a volume of that type.
    let suffix = password(8).to_lowercase();
    let (status, vt) = call(
        &client,
        reqwest::Method::POST,
        &format!("{v3}/types"),
        t,
        Some(
            json!({"volume_type": {"name": format!("cpproof-rbd-{suffix}"),
                   "extra_specs": {"volume_backend_name": BACKEND}}}),
        ),
    )
    .await;
    assert_eq!(status, 200, "create volume type: {vt}; {}", logs());
    let vt_id = vt["volume_type"]["id"]
        .as_str()
        .expect("type id")
        .to_string();
    let started = Instant::now();
    let (status, vol) = call(
        &client,
        reqwest::Method::POST,
        &format!("{v3}/volumes"),
        t,
        Some(json!({"volume": {"size": 1, "volume_type": vt_id, "name": format!("cpproof-vol-{suffix}")}})),
    )
    .await;
    assert_eq!(status, 202, "create volume: {vol}; {}", logs());
    let vol_id = vol["volume"]["id"].as_str().expect("volume id").to_string();
    let vol_url = format!("{v3}/volumes/{vol_id}");
    let vol = until("the volume becomes available", 120, logs, || {
        let (client, url, token) = (client.clone(), vol_url.clone(), token.clone());
        async move {
            let (_, v) = call(&client, reqwest::Method::GET, &url, Some(&token), None).await;
            match v["volume"]["status"].as_str() {
                Some("available") => Some(v),
                Some("error") => panic!("volume went to error: {v}; {}", logs()),
                _ => None,
            }
        }
    })
    .await;
    let create_time = started.elapsed();
    assert_eq!(
        vol["volume"]["os-vol-host-attr:host"],
        pool_name.as_str(),
        "{vol}"
    );
    // ... and it is an RBD image of 1 GiB in the pool, read with the rendered client file.
    let ceph_conf = etc.join(rbd_backend.file_name());
    let image = format!("volume-{vol_id}");
    assert!(
        rbd_images(&ceph_conf).contains(&image),
        "{image} not in {POOL}"
    );
    let info: Value = serde_json::from_str(&run(
        Command::new("timeout")
            .arg("30")
            .arg("rbd")
            .arg("-c")
            .arg(&ceph_conf)
            .args([
                "--id",
                CEPH_CLIENT,
                "info",
                "--format",
                "json",
                &format!("{POOL}/{image}"),
            ]),
        "rbd info",
    ))
    .expect("rbd info JSON");
    assert_eq!(info["size"], 1u64 << 30, "{info}");
    // 8 MiB objects: the override reached the driver.
    assert_eq!(info["order"], 23, "{info}");

    // The type's backend name is what places volumes: a type naming no enabled backend gets
    // no host, and nothing reaches Ceph.
    let (status, other) = call(
        &client,
        reqwest::Method::POST,
        &format!("{v3}/types"),
        t,
        Some(
            json!({"volume_type": {"name": format!("cpproof-none-{suffix}"),
                   "extra_specs": {"volume_backend_name": "no_such_backend"}}}),
        ),
    )
    .await;
    assert_eq!(status, 200, "create volume type: {other}");
    let other_id = other["volume_type"]["id"]
        .as_str()
        .expect("type id")
        .to_string();
    let (status, stray) = call(
        &client,
        reqwest::Method::POST,
        &format!("{v3}/volumes"),
        t,
        Some(json!({"volume": {"size": 1, "volume_type": other_id}})),
    )
    .await;
    assert_eq!(status, 202, "create volume: {stray}");
    let stray_url = format!(
        "{v3}/volumes/{}",
        stray["volume"]["id"].as_str().expect("volume id")
    );
    let stray = until("the unplaceable volume goes to error", 60, logs, || {
        let (client, url, token) = (client.clone(), stray_url.clone(), token.clone());
        async move {
            let (_, v) = call(&client, reqwest::Method::GET, &url, Some(&token), None).await;
            match v["volume"]["status"].as_str() {
                Some("error") => Some(v),
                Some("available") => panic!("a volume of a type naming no backend was placed: {v}"),
                _ => None,
            }
        }
    })
    .await;
    assert!(
        stray["volume"]["os-vol-host-attr:host"].is_null(),
        "{stray}"
    );
    assert_eq!(
        rbd_images(&ceph_conf),
        std::slice::from_ref(&image),
        "only the first volume is in {POOL}"
    );
    let (status, _) = call(&client, reqwest::Method::DELETE, &stray_url, t, None).await;
    assert_eq!(status, 202, "delete the error volume; {}", logs());

    let rss_api = rss_kib(uwsgi.0.id());
    let rss_scheduler = rss_kib(scheduler.0.id());
    let rss_volume = rss_kib(volume.0.id());

    // Deleting the volume removes the image.
    let started = Instant::now();
    let (status, _) = call(&client, reqwest::Method::DELETE, &vol_url, t, None).await;
    assert_eq!(status, 202, "delete volume; {}", logs());
    until("the volume is gone", 120, logs, || {
        let (client, url, token) = (client.clone(), vol_url.clone(), token.clone());
        async move {
            let (status, v) = call(&client, reqwest::Method::GET, &url, Some(&token), None).await;
            if v["volume"]["status"] == "error_deleting" {
                panic!("volume went to error_deleting: {v}; {}", logs());
            }
            (status == 404).then_some(())
        }
    })
    .await;
    let delete_time = started.elapsed();
    assert!(
        !rbd_images(&ceph_conf).contains(&image),
        "{image} still in {POOL} after the delete"
    );
    let (status, _) = call(
        &client,
        reqwest::Method::DELETE,
        &format!("{v3}/types/{vt_id}"),
        t,
        None,
    )
    .await;
    assert_eq!(status, 202, "delete volume type; {}", logs());

    assert!(
        memcached_items(mc_port) > 0,
        "memcached stored nothing; {}",
        logs()
    );
    // cinder-volume stops: Cinder reports it down, which the operator's Ready reads as
    // Degraded naming the host.
    let started = Instant::now();
    drop(volume);
    let down = until("Cinder reports cinder-volume down", 60, logs, || {
        let (client, token, hosts) = (client.clone(), token.clone(), hosts.clone());
        let url = format!("{v3}/os-services?binary=cinder-volume");
        async move {
            let (_, body) = call(&client, reqwest::Method::GET, &url, Some(&token), None).await;
            VolumeServices::read(&hosts, &body).ok()?.down_message()
        }
    })
    .await;
    let down_time = started.elapsed();
    // What Ready checked before: the API still answers with a token.
    let (status, _) = call(
        &client,
        reqwest::Method::GET,
        &format!("{v3}/types"),
        t,
        None,
    )
    .await;
    assert_eq!(status, 200, "the API without cinder-volume; {}", logs());
    assert!(
        down.starts_with(&format!(
            "Cinder reports cinder-volume down: {VOLUME_HOST}@{BACKEND} (last heartbeat "
        )),
        "{down}"
    );
    eprintln!(
        "cinder-volume stopped: reported down after {:.1} s: {down}",
        down_time.as_secs_f64()
    );
    drop((uwsgi, scheduler));
    eprintln!(
        "cinder proof: ceph pool/client and vhost {:.1} s; service user and catalog (x2 each, \
         two entries) {:.1} s; oslo-config-validator x2 {:.1} s; db sync {:.1} s; API up after \
         {:.1} s; pool in scheduler stats after {:.1} s; volume available after {:.1} s; \
         deleted after {:.1} s; total {:.1} s",
        setup_time.as_secs_f64(),
        register_time.as_secs_f64(),
        validate_time.as_secs_f64(),
        sync_time.as_secs_f64(),
        api_time.as_secs_f64(),
        services_time.as_secs_f64(),
        create_time.as_secs_f64(),
        delete_time.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
    eprintln!(
        "cinder RSS: API (uwsgi master + 1 worker) {} MiB, cinder-scheduler {} MiB, \
         cinder-volume (parent + 1 backend process) {} MiB",
        rss_api / 1024,
        rss_scheduler / 1024,
        rss_volume / 1024
    );
}
