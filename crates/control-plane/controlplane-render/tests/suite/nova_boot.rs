//! Proof that the rendered Nova configuration works: the operator's own rendering (`nova.conf`,
//! the compute node's file, the two uwsgi configurations, the shared database script, the
//! `nova-manage` steps and the cell set-up script, the shared service-user/catalog script)
//! drives the real Nova 2026.1 of the test cloud's virtualenv: the compute API and the metadata
//! API under uwsgi, `nova-conductor`, `nova-scheduler`, `nova-novncproxy` and a `nova-compute`
//! with the fake virt driver, against the external services' MariaDB (TLS) and RabbitMQ
//! (AMQPS, the harness CA) and memcached, a Placement booted from its own rendering, the test
//! cloud's Keystone, Glance and Neutron. A server boots to ACTIVE through the API.
//!
//! Needs: `scripts/test-cloud up` (Keystone on 127.0.0.1:5000, Glance :9292, Neutron :9696, the
//! venv), `scripts/external-services up` and `scripts/control-plane-deps`. It uses its own
//! databases (`nova_proof_*`, user `nova_proof`), service users (`nova_proof`,
//! `nova_proof_placement`), region (`NovaProof`) and RabbitMQ exchange, and removes them; the
//! test cloud's own Nova and Placement (databases `nova*`, `placement`) are not touched.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support;
use support::{
    KeystoneCleanup, MariaDbAdmin, Proc, admin_password, api_call, external_services_env,
    free_port, memcached_items, proof_keystone_auth, register_service_twice, rss_kib, run,
    service_token, test_cloud_dir, until, venv_bin,
};

use controlplane_api::common::ServiceTemplate;
use controlplane_render::authtoken::KeystoneAuth;
use controlplane_render::database::Database;
use controlplane_render::nova::{
    self, ComputeNode, Databases, Messaging, NovaInputs, Paths, Peers, Vnc,
};
use controlplane_render::placement::{self, PlacementInputs};
use controlplane_render::secrets::password;
use serde_json::{Value, json};

const REGION: &str = "NovaProof";
const USER: &str = "nova_proof";
const PLACEMENT_USER: &str = "nova_proof_placement";
const DBS: [&str; 4] = [
    "nova_proof_api",
    "nova_proof_cell0",
    "nova_proof_cell1",
    "nova_proof_placement",
];

/// The proof's temporary directory, for the logs a failure shows.
static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

const LOGS: [&str; 7] = [
    "api.log",
    "metadata.log",
    "conductor.log",
    "scheduler.log",
    "compute.log",
    "novncproxy.log",
    "placement-uwsgi.log",
];

fn logs() -> String {
    let Some(root) = ROOT.get() else {
        return String::new();
    };
    let mut out = String::new();
    for f in LOGS {
        let t = std::fs::read_to_string(root.join(f)).unwrap_or_default();
        let lines: Vec<&str> = t
            .lines()
            .filter(|l| !l.contains(" DEBUG ") && !l.contains(" INFO "))
            .collect();
        out.push_str(&format!(
            "\n--- {f} (warnings and errors, tail) ---\n{}",
            lines[lines.len().saturating_sub(25)..].join("\n")
        ));
    }
    out
}

/// Drops the proof's databases and user on the external MariaDB.
struct DbCleanup(MariaDbAdmin);

impl Drop for DbCleanup {
    fn drop(&mut self) {
        let mut sql = String::new();
        for db in DBS {
            sql.push_str(&format!("DROP DATABASE IF EXISTS {db}; "));
        }
        sql.push_str(&format!(
            "DROP USER IF EXISTS '{USER}'@'%'; DROP USER IF EXISTS '{PLACEMENT_USER}'@'%'"
        ));
        let a = &self.0;
        let out = Command::new("mariadb")
            .args(["-h", &a.host, "-P", &a.port.to_string(), "-u", &a.user])
            .arg(format!("--ssl-ca={}", a.ca_file))
            .args(["-e", &sql])
            .env("MYSQL_PWD", &a.password)
            .output();
        if let Ok(o) = out
            && !o.status.success()
        {
            eprintln!(
                "dropping the proof's databases: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
}

/// Removes what the proof's Nova declared on its vhost: its exchange and the queues
/// named after its hosts (the topic queues `conductor`, `scheduler`, `compute` are Nova's
/// generic names, shared by any later Nova proof, and lose their bindings with the exchange;
/// fanout and reply queues delete themselves).
struct MqCleanup {
    url: String,
    ca: String,
    exchange: String,
    queues: Vec<String>,
}

const MQ_CLEANUP: &str = r#"import os, ssl, sys, kombu
c = kombu.Connection(os.environ["URL"], ssl={"ca_certs": os.environ["CA"], "cert_reqs": ssl.CERT_REQUIRED})
c.connect()
for kind, name in [("queue", q) for q in sys.argv[2:]] + [("exchange", sys.argv[1])]:
    ch = c.channel()
    try:
        ch.queue_delete(name) if kind == "queue" else ch.exchange_delete(name)
    except Exception as e:
        print("%s %s: %s" % (kind, name, e), file=sys.stderr)
    finally:
        try:
            ch.close()
        except Exception:
            pass
c.release()
"#;

impl Drop for MqCleanup {
    fn drop(&mut self) {
        let out = Command::new(venv_bin("python3"))
            .arg("-c")
            .arg(MQ_CLEANUP)
            .arg(&self.exchange)
            .args(&self.queues)
            .env("URL", &self.url)
            .env("CA", &self.ca)
            .output();
        match out {
            Ok(o) if o.status.success() && o.stderr.is_empty() => {}
            Ok(o) => eprintln!(
                "removing the proof's RabbitMQ exchange and queues: {}",
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => eprintln!("removing the proof's RabbitMQ exchange and queues: {e}"),
        }
    }
}

/// One API call with a token and the given headers.
async fn call(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    token: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (u16, Value) {
    let mut all = vec![("X-Auth-Token", token)];
    all.extend_from_slice(headers);
    api_call(client, method, url, &all, body, logs).await
}

fn spawn(root: &Path, log: &str, what: &'static str, cmd: &[String]) -> Proc {
    support::spawn_logged(root, log, what, cmd)
}

/// Runs a command twice (a retried Job), both to success; returns the second run's stdout.
fn twice(cmd: &[String], env: &[(String, String)], what: &str) -> String {
    let mut c = Command::new(&cmd[0]);
    c.args(&cmd[1..]);
    for (k, v) in env {
        c.env(k, v);
    }
    run(&mut c, what);
    run(&mut c, &format!("{what} (again)"))
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rendered_nova_boots_a_server() {
    let started_all = Instant::now();
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let _ = ROOT.set(root.to_path_buf());
    let env = external_services_env();
    let var = |k: &str| {
        env.get(k)
            .cloned()
            .unwrap_or_else(|| panic!("{k} missing from the external-services env file"))
    };
    let ca = var("EXTSVC_CA");
    let admin = MariaDbAdmin::external();
    let admin_pw = admin_password();
    let _db_cleanup = DbCleanup(admin.clone());
    let _nova_cleanup = KeystoneCleanup {
        admin_password: admin_pw.clone(),
        region: REGION,
        user: USER,
        // Lives on the external MariaDB (DbCleanup); nothing of that name on the test cloud's.
        database: "nova_proof_api",
    };
    let _placement_cleanup = KeystoneCleanup {
        admin_password: admin_pw.clone(),
        region: REGION,
        user: PLACEMENT_USER,
        database: "nova_proof_placement",
    };
    let [api_port, md_port, vnc_port, placement_port] =
        [free_port(), free_port(), free_port(), free_port()];
    let suffix = password(8).to_lowercase();
    let venv = test_cloud_dir().join("venv");
    let mc = var("EXTSVC_MEMCACHED");
    let mc_port: u16 = mc
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .expect("memcached port");
    let mc_items_before = memcached_items(mc_port);

    // --- Rendering -----------------------------------------------------------------------
    let phase = Instant::now();
    let db_password = password(32);
    let db = |name: &str, user: &str, pw: &str| {
        let (host, port) = var("EXTSVC_DB")
            .rsplit_once(':')
            .map(|(h, p)| (h.to_string(), p.parse().expect("port")))
            .expect("EXTSVC_DB");
        Database {
            host,
            port,
            name: name.into(),
            user: user.into(),
            password: pw.into(),
            ca_file: Some(ca.clone()),
            verify: Default::default(),
            server_name: None,
        }
    };
    let databases = Databases {
        api: db(DBS[0], USER, &db_password),
        cell0: db(DBS[1], USER, &db_password),
        cell1: db(DBS[2], USER, &db_password),
    };
    let keystone = proof_keystone_auth(USER);
    let placement_base = format!("http://127.0.0.1:{placement_port}");
    let mut template = ServiceTemplate::default();
    // User overrides as a cluster would set them: an exchange of the proof's own (its vhost is
    // the harness's, kept for Nova proofs), and no random delay (up to 60 s, meant to stagger
    // many nodes) before the scheduler's first periodic host discovery.
    template.config_overrides.insert(
        "DEFAULT".into(),
        BTreeMap::from([
            (
                "control_exchange".to_string(),
                format!("nova_proof_{suffix}"),
            ),
            ("periodic_fuzzy_delay".to_string(), "0".to_string()),
        ]),
    );
    let web = root.join("novnc");
    std::fs::create_dir_all(&web).expect("novnc dir");
    std::fs::write(web.join("vnc_lite.html"), "<html>nova proof noVNC</html>\n").expect("html");
    let paths = Paths {
        config_dir: root.join("etc").display().to_string(),
        api_paste_config: venv.join("etc/nova/api-paste.ini").display().to_string(),
        state_path: root.join("state").display().to_string(),
        novnc_web: web.display().to_string(),
        python_home: Some(venv.display().to_string()),
    };
    let vnc_base = format!("http://127.0.0.1:{vnc_port}/vnc_lite.html");
    let inputs = NovaInputs {
        template: &template,
        databases: databases.clone(),
        messaging: Messaging {
            hosts: vec![var("EXTSVC_AMQPS")],
            user: var("EXTSVC_AMQP_USER"),
            password: var("EXTSVC_AMQP_PASSWORD"),
            // A vhost of its own: Nova's topic queues (conductor, scheduler, compute) are
            // named alike whatever the exchange, and the whole-cloud proofs' Nova runs beside
            // this one on the shared vhost (its compute once registered with this conductor).
            vhost: var("EXTSVC_AMQP_NOVA_PROOF_VHOST"),
            ca_file: Some(ca.clone()),
        },
        keystone: keystone.clone(),
        cache: controlplane_render::cache::Cache::plain(vec![mc.clone()]),
        peers: Peers {
            placement: Some(placement_base.clone()),
            glance: Some("http://127.0.0.1:9292".into()),
            neutron: Some("http://127.0.0.1:9696".into()),
        },
        metadata_secret: password(32),
        vnc: Vnc {
            base_url: vnc_base.clone(),
            proxy_host: "127.0.0.1".into(),
            proxy_port: vnc_port,
        },
        // Short, so the proof sees the scheduler map the compute host soon.
        discover_hosts_interval: 3,
        host: format!("nova-proof-ctl-{suffix}"),
        paths: paths.clone(),
        api_listen: format!("127.0.0.1:{api_port}"),
        metadata_listen: format!("127.0.0.1:{md_port}"),
        workers: 1,
    };
    let compute_host = format!("nova-proof-compute-{suffix}");
    let _mq_cleanup = MqCleanup {
        // kombu names the scheme amqp.
        url: inputs
            .messaging
            .transport_url()
            .expect("transport url")
            .replacen("rabbit://", "amqp://", 1),
        ca: ca.clone(),
        exchange: format!("nova_proof_{suffix}"),
        queues: vec![
            format!("compute.{compute_host}"),
            format!("conductor.{}", inputs.host),
            format!("scheduler.{}", inputs.host),
        ],
    };
    let node = ComputeNode {
        host: compute_host.clone(),
        compute_driver: "fake.SmallFakeDriver".into(),
        my_ip: "127.0.0.1".into(),
    };
    let etc = PathBuf::from(&paths.config_dir);
    std::fs::create_dir_all(&etc).expect("etc");
    std::fs::create_dir_all(&paths.state_path).expect("state");
    for (name, text) in nova::config_files(&inputs).expect("renders") {
        std::fs::write(etc.join(name), text).expect("config file");
    }
    let compute_conf = etc.join(nova::COMPUTE_CONF);
    std::fs::write(
        &compute_conf,
        nova::compute_conf(&inputs, &node).expect("renders"),
    )
    .expect("compute conf");

    // Placement, from its own rendering, for Nova to report to and schedule with.
    let placement_keystone = KeystoneAuth {
        username: PLACEMENT_USER.into(),
        password: password(32),
        ..keystone.clone()
    };
    let placement_db = db(DBS[3], PLACEMENT_USER, &password(32));
    let placement_paths = placement::Paths {
        config_dir: root.join("placement").display().to_string(),
        log_file: Some(root.join("placement.log").display().to_string()),
        python_home: Some(venv.display().to_string()),
    };
    let placement_template = ServiceTemplate::default();
    let placement_inputs = PlacementInputs {
        template: &placement_template,
        database: placement_db.clone(),
        keystone: placement_keystone.clone(),
        cache: controlplane_render::cache::Cache::plain(vec![mc.clone()]),
        paths: placement_paths.clone(),
        listen: format!("127.0.0.1:{placement_port}"),
        workers: 1,
    };
    std::fs::create_dir_all(&placement_paths.config_dir).expect("placement etc");
    for (name, text) in placement::config_files(&placement_inputs) {
        std::fs::write(PathBuf::from(&placement_paths.config_dir).join(name), text)
            .expect("placement config");
    }
    let render_time = phase.elapsed();

    // --- Databases, Keystone, validation --------------------------------------------------
    let phase = Instant::now();
    // Every option is one the installed Nova and its libraries define (oslo.config ignores
    // unknown options silently), checked while the databases are set up.
    let validator = |file: &Path| {
        let mut c = Command::new(venv_bin("oslo-config-validator"));
        for ns in nova::OPTION_NAMESPACES {
            c.args(["--namespace", ns]);
        }
        c.arg("--input-file")
            .arg(file)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start oslo-config-validator")
    };
    let validators = [
        (nova::NOVA_CONF, validator(&etc.join(nova::NOVA_CONF))),
        (nova::COMPUTE_CONF, validator(&compute_conf)),
    ];
    for d in [
        &databases.api,
        &databases.cell0,
        &databases.cell1,
        &placement_db,
    ] {
        admin.init_database_twice(d);
    }
    let nova_base = format!("http://127.0.0.1:{api_port}/v2.1");
    register_service_twice(
        &nova::service_entry(&keystone, REGION, &nova_base, &nova_base),
        &admin_pw,
        &keystone.password,
    );
    register_service_twice(
        &placement::service_entry(
            &placement_keystone,
            REGION,
            &placement_base,
            &placement_base,
        ),
        &admin_pw,
        &placement_keystone.password,
    );
    for (file, child) in validators {
        let out = child.wait_with_output().expect("oslo-config-validator");
        let errors: Vec<_> = String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter(|l| l.starts_with("ERROR") || l.starts_with("WARNING"))
            .map(String::from)
            .collect();
        assert!(
            out.status.success() && errors.is_empty(),
            "{file} fails validation against the installed option definitions: {errors:#?}"
        );
    }
    let setup_time = phase.elapsed();

    // --- The database Jobs, each twice ----------------------------------------------------
    let phase = Instant::now();
    let placement_sync = placement::db_sync_command(
        &venv_bin("placement-manage").display().to_string(),
        &placement_paths.config_dir,
    );
    let placement_sync = Command::new(&placement_sync[0])
        .args(&placement_sync[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("placement-manage db sync");
    let manage = venv_bin("nova-manage").display().to_string();
    twice(
        &nova::api_db_sync_command(&manage, &paths),
        &[],
        "nova-manage api_db sync",
    );
    let cell_env = nova::cell_setup_env(&inputs, &manage).expect("cell env");
    twice(&nova::cells::command(), &cell_env, "cell set-up script");
    let cells = run(
        Command::new(&manage).args(["--config-file", &paths.nova_conf(), "cell_v2", "list_cells"]),
        "nova-manage cell_v2 list_cells",
    );
    // The second run found both cells and updated them instead of creating duplicates.
    let mapped: Vec<&str> = cells
        .lines()
        .filter(|l| l.starts_with('|') && !l.contains("UUID"))
        .collect();
    assert_eq!(mapped.len(), 2, "cells after two runs:\n{cells}");
    assert!(
        mapped.iter().any(|l| l.contains(" cell0 "))
            && mapped.iter().any(|l| l.contains(" cell1 ")),
        "{cells}"
    );
    // The mappings hold templates, no credentials.
    let stored = admin.sql("SELECT name, database_connection, transport_url FROM nova_proof_api.cell_mappings ORDER BY id");
    assert!(
        !stored.contains(&db_password) && !stored.contains(&var("EXTSVC_AMQP_PASSWORD")),
        "credentials stored in cell_mappings"
    );
    assert!(stored.contains("{password}"), "{stored}");
    twice(
        &nova::db_sync_command(&manage, &paths),
        &[],
        "nova-manage db sync",
    );
    twice(
        &nova::online_data_migrations_command(&manage, &paths),
        &[],
        "nova-manage db online_data_migrations",
    );
    let out = placement_sync.wait_with_output().expect("placement sync");
    assert!(
        out.status.success(),
        "placement-manage db sync: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // db sync reached cell0 through its mapping and cell1 through [database].
    for db in [DBS[1], DBS[2]] {
        let n = admin.sql(&format!(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = '{db}' AND table_name = 'instances'"
        ));
        assert_eq!(n.trim(), "1", "no instances table in {db}");
    }
    let migrate_time = phase.elapsed();

    // --- The processes --------------------------------------------------------------------
    let phase = Instant::now();
    let uwsgi = venv_bin("uwsgi").display().to_string();
    let ini = |f: &str| etc.join(f).display().to_string();
    let placement_proc = spawn(
        root,
        "placement-uwsgi.log",
        "uwsgi (placement)",
        &[
            uwsgi.clone(),
            "--ini".into(),
            PathBuf::from(&placement_paths.config_dir)
                .join("uwsgi.ini")
                .display()
                .to_string(),
        ],
    );
    let conf_arg =
        |program: &str| nova::service_command(&venv_bin(program).display().to_string(), &paths);
    let conductor = spawn(
        root,
        "conductor.log",
        "nova-conductor",
        &conf_arg("nova-conductor"),
    );
    let scheduler = spawn(
        root,
        "scheduler.log",
        "nova-scheduler",
        &conf_arg("nova-scheduler"),
    );
    let compute = spawn(
        root,
        "compute.log",
        "nova-compute",
        &[
            venv_bin("nova-compute").display().to_string(),
            "--config-file".into(),
            compute_conf.display().to_string(),
        ],
    );
    let api = spawn(
        root,
        "api.log",
        "uwsgi (nova-api)",
        &[uwsgi.clone(), "--ini".into(), ini(nova::API_UWSGI)],
    );
    let metadata = spawn(
        root,
        "metadata.log",
        "uwsgi (nova-metadata)",
        &[uwsgi.clone(), "--ini".into(), ini(nova::METADATA_UWSGI)],
    );
    let novnc = spawn(
        root,
        "novncproxy.log",
        "nova-novncproxy",
        &conf_arg("nova-novncproxy"),
    );

    let client = reqwest::Client::new();
    // The API validates tokens: a request without one is refused once the API is up.
    until(
        "the compute API refusing a request without token",
        120,
        logs,
        || async {
            let r = client
                .get(format!("{nova_base}/servers"))
                .send()
                .await
                .ok()?;
            (r.status() == 401).then_some(())
        },
    )
    .await;
    let (s, _) = call(
        &client,
        reqwest::Method::GET,
        &format!("{nova_base}/servers"),
        "gAAAAABforged",
        &[],
        None,
    )
    .await;
    assert_eq!(s, 401, "a forged token; {}", logs());
    let (token, _) = service_token(&client, USER, &keystone.password).await;
    let t = token.as_str();
    let mv = |v: &'static str| [("OpenStack-API-Version", v)];
    // Every service reports up through the API: conductor and scheduler over the message
    // queue and the cell database, the compute node through the conductor.
    let services = until("conductor, scheduler and compute up", 180, logs, || async {
        let (s, body) = call(
            &client,
            reqwest::Method::GET,
            &format!("{nova_base}/os-services"),
            t,
            &mv("compute 2.53"),
            None,
        )
        .await;
        let list = body["services"].as_array().cloned().unwrap_or_default();
        let up = |binary: &str| {
            list.iter()
                .any(|x| x["binary"] == binary && x["state"] == "up")
        };
        (s == 200 && up("nova-conductor") && up("nova-scheduler") && up("nova-compute"))
            .then_some(list)
    })
    .await;
    assert!(
        services
            .iter()
            .any(|x| x["binary"] == "nova-compute" && x["host"] == compute_host.as_str()),
        "{services:?}"
    );
    let processes_time = phase.elapsed();

    // --- Host discovery by the scheduler's periodic task ----------------------------------
    let phase = Instant::now();
    until(
        "the scheduler mapped the compute host",
        120,
        logs,
        || async {
            let n = admin.sql(&format!(
                "SELECT COUNT(*) FROM nova_proof_api.host_mappings WHERE host = '{compute_host}'"
            ));
            (n.trim() == "1").then_some(())
        },
    )
    .await;
    let mapping_time = phase.elapsed();
    // The compute node is a resource provider in the rendered Placement, with its inventory:
    // the resource tracker makes the provider and reports the inventory in two calls, and a
    // boot between them found no host with VCPU (NoValidHost; one CI run's first attempt).
    let rp = until(
        "the compute node's resource provider and its inventory",
        120,
        logs,
        || async {
            let placement = [("OpenStack-API-Version", "placement 1.14")];
            let (s, body) = call(
                &client,
                reqwest::Method::GET,
                &format!("{placement_base}/resource_providers?name={compute_host}"),
                t,
                &placement,
                None,
            )
            .await;
            let uuid = (s == 200)
                .then(|| {
                    body["resource_providers"][0]["uuid"]
                        .as_str()
                        .map(String::from)
                })
                .flatten()?;
            let (s, body) = call(
                &client,
                reqwest::Method::GET,
                &format!("{placement_base}/resource_providers/{uuid}/inventories"),
                t,
                &placement,
                None,
            )
            .await;
            (s == 200
                && ["VCPU", "MEMORY_MB"]
                    .iter()
                    .all(|rc| body["inventories"].get(rc).is_some()))
            .then_some(uuid)
        },
    )
    .await;
    let (_, hyp) = call(
        &client,
        reqwest::Method::GET,
        &format!("{nova_base}/os-hypervisors/detail"),
        t,
        &mv("compute 2.53"),
        None,
    )
    .await;
    assert!(
        hyp["hypervisors"].as_array().is_some_and(|h| h
            .iter()
            .any(|h| h["hypervisor_hostname"] == compute_host.as_str() && h["id"] == rp.as_str())),
        "hypervisor {compute_host} with the provider's uuid: {hyp}"
    );
    let discovery_time = phase.elapsed();

    // --- A server ---------------------------------------------------------------------------
    let phase = Instant::now();
    // An image of the proof's own in the test cloud's Glance (the fake driver reads no bytes).
    let glance = "http://127.0.0.1:9292/v2/images";
    let (s, image) = call(
        &client,
        reqwest::Method::POST,
        glance,
        t,
        &[],
        Some(
            json!({"name": format!("nova-proof-{suffix}"), "disk_format": "raw",
                    "container_format": "bare"}),
        ),
    )
    .await;
    assert_eq!(s, 201, "create image: {image}");
    let image_id = image["id"].as_str().expect("image id").to_string();
    let _image_cleanup = ImageCleanup(image_id.clone(), token.clone());
    let resp = client
        .put(format!("{glance}/{image_id}/file"))
        .header("X-Auth-Token", t)
        .header("Content-Type", "application/octet-stream")
        .body(vec![0u8; 4096])
        .send()
        .await
        .expect("upload");
    assert_eq!(resp.status(), 204, "upload image data");
    let (s, flavor) = call(
        &client,
        reqwest::Method::POST,
        &format!("{nova_base}/flavors"),
        t,
        &[],
        Some(
            json!({"flavor": {"name": format!("nova-proof-{suffix}"), "ram": 64,
                               "vcpus": 1, "disk": 0}}),
        ),
    )
    .await;
    assert_eq!(s, 200, "create flavor: {flavor}; {}", logs());
    let flavor_id = flavor["flavor"]["id"]
        .as_str()
        .expect("flavor id")
        .to_string();
    let (s, server) = call(
        &client,
        reqwest::Method::POST,
        &format!("{nova_base}/servers"),
        t,
        &mv("compute 2.37"),
        Some(
            json!({"server": {"name": format!("nova-proof-{suffix}"), "imageRef": image_id,
                               "flavorRef": flavor_id, "networks": "none"}}),
        ),
    )
    .await;
    assert_eq!(s, 202, "create server: {server}; {}", logs());
    let server_id = server["server"]["id"]
        .as_str()
        .expect("server id")
        .to_string();
    let server_url = format!("{nova_base}/servers/{server_id}");
    let active = until("the server ACTIVE", 120, logs, || async {
        let (_, body) = call(
            &client,
            reqwest::Method::GET,
            &server_url,
            t,
            &mv("compute 2.53"),
            None,
        )
        .await;
        let status = body["server"]["status"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert_ne!(status, "ERROR", "server in ERROR: {body}; {}", logs());
        (status == "ACTIVE").then_some(body)
    })
    .await;
    assert_eq!(
        active["server"]["OS-EXT-SRV-ATTR:host"],
        compute_host.as_str(),
        "{active}"
    );
    let boot_time = phase.elapsed();
    // Its allocation is against the compute node's provider in Placement.
    let (s, alloc) = call(
        &client,
        reqwest::Method::GET,
        &format!("{placement_base}/allocations/{server_id}"),
        t,
        &[("OpenStack-API-Version", "placement 1.28")],
        None,
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(
        alloc["allocations"][&rp]["resources"],
        json!({"VCPU": 1, "MEMORY_MB": 64}),
        "{alloc}"
    );

    // The metadata API: the version list, and the server's metadata as Neutron's metadata
    // agent asks for it (instance id signed with the shared secret).
    let md = format!("http://127.0.0.1:{md_port}");
    let versions = client
        .get(format!("{md}/"))
        .send()
        .await
        .expect("metadata API")
        .text()
        .await
        .unwrap_or_default();
    assert!(versions.contains("latest"), "metadata versions: {versions}");
    let signature = run(
        Command::new(venv_bin("python3"))
            .arg("-c")
            .arg("import hmac, hashlib, sys; print(hmac.new(sys.argv[1].encode(), sys.argv[2].encode(), hashlib.sha256).hexdigest())")
            .arg(&inputs.metadata_secret)
            .arg(&server_id),
        "signing the instance id",
    );
    let project_id = active["server"]["tenant_id"]
        .as_str()
        .expect("project")
        .to_string();
    let resp = client
        .get(format!("{md}/openstack/latest/meta_data.json"))
        .header("X-Instance-ID", &server_id)
        .header("X-Tenant-ID", &project_id)
        .header("X-Instance-ID-Signature", signature.trim())
        .header("X-Forwarded-For", "10.0.0.9")
        .send()
        .await
        .expect("metadata");
    assert_eq!(resp.status(), 200, "meta_data.json; {}", logs());
    let meta: Value = resp.json().await.expect("metadata JSON");
    assert_eq!(meta["uuid"], server_id.as_str(), "{meta}");
    let resp = client
        .get(format!("{md}/openstack/latest/meta_data.json"))
        .header("X-Instance-ID", &server_id)
        .header("X-Tenant-ID", &project_id)
        .header("X-Instance-ID-Signature", "0".repeat(64))
        .header("X-Forwarded-For", "10.0.0.9")
        .send()
        .await
        .expect("metadata");
    assert_eq!(resp.status(), 403, "a wrong signature is refused");

    // The noVNC proxy serves its web root, and the API hands out console URLs at its base URL.
    let page = client
        .get(&vnc_base)
        .send()
        .await
        .expect("novncproxy")
        .text()
        .await
        .unwrap_or_default();
    assert!(
        page.contains("nova proof noVNC"),
        "novncproxy answered {page}"
    );
    let (s, console) = call(
        &client,
        reqwest::Method::POST,
        &format!("{server_url}/remote-consoles"),
        t,
        &mv("compute 2.6"),
        Some(json!({"remote_console": {"protocol": "vnc", "type": "novnc"}})),
    )
    .await;
    assert_eq!(s, 200, "console: {console}; {}", logs());
    assert!(
        console["remote_console"]["url"]
            .as_str()
            .is_some_and(|u| u.starts_with(&format!("{vnc_base}?path=%3Ftoken%3D"))),
        "{console}"
    );

    let rss: Vec<(&str, u64)> = [
        ("nova-api (uwsgi master + 1 worker)", api.0.id()),
        ("nova-metadata (uwsgi master + 1 worker)", metadata.0.id()),
        ("nova-conductor (1 worker)", conductor.0.id()),
        ("nova-scheduler (1 worker)", scheduler.0.id()),
        ("nova-novncproxy", novnc.0.id()),
        ("nova-compute (fake driver)", compute.0.id()),
        (
            "placement-api (uwsgi master + 1 worker)",
            placement_proc.0.id(),
        ),
    ]
    .into_iter()
    .map(|(n, pid)| (n, rss_kib(pid)))
    .collect();

    // --- Clean-up through the API ---------------------------------------------------------
    let phase = Instant::now();
    let (s, _) = call(&client, reqwest::Method::DELETE, &server_url, t, &[], None).await;
    assert_eq!(s, 204, "delete server");
    until("the server gone", 60, logs, || async {
        let (s, _) = call(&client, reqwest::Method::GET, &server_url, t, &[], None).await;
        (s == 404).then_some(())
    })
    .await;
    let (s, _) = call(
        &client,
        reqwest::Method::DELETE,
        &format!("{nova_base}/flavors/{flavor_id}"),
        t,
        &[],
        None,
    )
    .await;
    assert_eq!(s, 202, "delete flavor");
    // Its allocation went with it.
    let (_, alloc) = call(
        &client,
        reqwest::Method::GET,
        &format!("{placement_base}/allocations/{server_id}"),
        t,
        &[("OpenStack-API-Version", "placement 1.28")],
        None,
    )
    .await;
    assert_eq!(alloc["allocations"], json!({}), "{alloc}");
    let cleanup_time = phase.elapsed();

    // keystonemiddleware and oslo.cache wrote to the memcached the configuration names (the
    // harness's, shared: a growing item count is the evidence).
    assert!(
        memcached_items(mc_port) > mc_items_before,
        "memcached stored nothing; {}",
        logs()
    );
    // Reported, not asserted: under load the shared Keystone can answer a token validation
    // late, and the compute node's periodic report then fails once and retries.
    for f in LOGS {
        let text = std::fs::read_to_string(root.join(f)).unwrap_or_default();
        if let Some(first) = text.lines().find(|l| l.contains(" ERROR ")) {
            eprintln!("{f} logged errors; the first: {first}");
        }
    }

    eprintln!(
        "nova proof phases: render {}, databases+keystone+validation {}, nova-manage steps (each \
         twice) {}, processes up {}, host mapped by the scheduler {} (provider in Placement {}), server ACTIVE {}, clean-up {}; \
         total {}",
        secs(render_time),
        secs(setup_time),
        secs(migrate_time),
        secs(processes_time),
        secs(mapping_time),
        secs(discovery_time),
        secs(boot_time),
        secs(cleanup_time),
        secs(started_all.elapsed())
    );
    for (name, kib) in rss {
        eprintln!("RSS {name}: {} MiB", kib / 1024);
    }

    // How the processes take SIGTERM (a pod's stop): all signalled at once; whatever is still
    // running after the rendered graceful-shutdown timeout (and some slack) is reported, and
    // killed when dropped.
    let mut procs = [
        (api, "api.log"),
        (metadata, "metadata.log"),
        (conductor, "conductor.log"),
        (scheduler, "scheduler.log"),
        (novnc, "novncproxy.log"),
        (compute, "compute.log"),
    ];
    let stopping = Instant::now();
    for (p, _) in &procs {
        if let Ok(pid) = i32::try_from(p.0.id()) {
            // SAFETY: signalling a child this test started and has not reaped.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
    }
    let mut stopped = Vec::new();
    let patience = Duration::from_secs(u64::from(nova::GRACEFUL_SHUTDOWN_SECONDS) + 5);
    while stopping.elapsed() < patience && stopped.len() < procs.len() {
        for (p, _) in procs.iter_mut() {
            if !stopped.contains(&p.1) && matches!(p.0.try_wait(), Ok(Some(_))) {
                stopped.push(p.1);
                eprintln!("{} stopped {} after SIGTERM", p.1, secs(stopping.elapsed()));
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for (p, log) in &procs {
        if !stopped.contains(&p.1) {
            let text = std::fs::read_to_string(root.join(log)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            eprintln!(
                "{} still running {} after SIGTERM; its log ends:\n{}",
                p.1,
                secs(patience),
                lines[lines.len().saturating_sub(8)..].join("\n")
            );
        }
    }
}

/// Deletes the proof's image from the test cloud's Glance.
struct ImageCleanup(String, String);

impl Drop for ImageCleanup {
    fn drop(&mut self) {
        let out = Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "-X",
                "DELETE",
            ])
            .arg(format!("http://127.0.0.1:9292/v2/images/{}", self.0))
            .args(["-H", &format!("X-Auth-Token: {}", self.1)])
            .output();
        if let Ok(o) = out
            && o.stdout != b"204"
        {
            eprintln!(
                "deleting image {}: HTTP {}",
                self.0,
                String::from_utf8_lossy(&o.stdout)
            );
        }
    }
}
