//! A whole OpenStack cloud booted from the control-plane operator's rendered configuration only:
//! Keystone (bootstrapped with its admin), Placement, Glance (file store, web-download import),
//! Neutron (ML2/OVN against the harness's OVN), Nova (API, conductor, scheduler and a compute
//! node with the fake driver) and Cinder (API and scheduler), on fresh databases of the
//! harness's MariaDB (TLS), its RabbitMQ (AMQPS) and memcached, the processes from the test
//! cloud's venv on free ports. Nothing of the shared test cloud is used but its venv and its
//! image server (web-download's source): the resource operator runs against this cloud's
//! Keystone, so the two halves of the product prove each other.
//!
//! Names carry `cloudex` (databases `cloudex_*`, RabbitMQ exchanges `cloudex_*_<suffix>`);
//! dropping the [`RenderedCloud`] stops the processes and removes the databases, the exchanges
//! and whatever of its networks is still in the shared OVN northbound database.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use controlplane_api::KeystoneSpec;
use controlplane_api::common::{ExternalServiceRef, ServiceTemplate};
use controlplane_api::keystone::{DatabaseSpec, TokenSettings};
use controlplane_render::authtoken::KeystoneAuth;
use controlplane_render::database::Database;
use controlplane_render::secrets::password;
use controlplane_render::service_user::ServiceEntry;
use controlplane_render::{KeyRepository, cinder, glance, keystone, neutron, nova, placement};

use crate::{
    MariaDbAdmin, Proc, external_services_env, free_port, log_tails, rss_kib, run, spawn_logged,
    test_cloud_dir, venv_bin, wait_http,
};

/// The region of every catalog entry.
pub const REGION: &str = "RegionOne";

/// What the cloud needs from outside the renderers.
#[derive(Clone, Debug)]
pub struct CloudOptions {
    /// Prefix of the databases (`<prefix>_keystone`, ...), e.g. `cloudex`.
    pub prefix: String,
    /// Hosts, ports and schemes Glance's web-download may fetch from (the images a test imports).
    pub web_download: glance::WebDownload,
}

/// A booted cloud; dropping it stops everything and cleans up.
pub struct RenderedCloud {
    // Dropped first: the processes stop before their databases go.
    procs: Vec<Proc>,
    _cleanup: Cleanup,
    /// Keystone's `/v3` URL.
    pub keystone_url: String,
    /// Keystone's admin password (user `admin`, project `admin`, domain `Default`).
    pub admin_password: String,
    /// Each API's base URL by service (`placement`, `glance`, `neutron`, `nova`, `cinder`).
    pub endpoints: BTreeMap<&'static str, String>,
    /// How long each phase of the boot took.
    pub timings: Vec<(&'static str, Duration)>,
    root: tempfile::TempDir,
}

impl std::fmt::Debug for RenderedCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RenderedCloud")
            .field("keystone_url", &self.keystone_url)
            .field("endpoints", &self.endpoints)
            .finish()
    }
}

const LOGS: [&str; 12] = [
    "keystone.log",
    "keystone-uwsgi.log",
    "placement.log",
    "glance.log",
    "neutron.log",
    "nova-api.log",
    "nova-conductor.log",
    "nova-scheduler.log",
    "nova-compute.log",
    "cinder-api.log",
    "cinder-scheduler.log",
    "cinder-uwsgi.log",
];

/// The cloud's directory, for the logs a failure shows.
static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// The tails of the booted services' logs (warnings and errors are what a failure needs).
pub fn logs() -> String {
    match ROOT.get() {
        Some(root) => log_tails(root, &LOGS, 20),
        None => String::new(),
    }
}

/// Writes a key repository as the kubelet updates a Secret volume: each file written under a
/// temporary name and renamed, files no longer in the repository removed.
pub fn write_key_repository(dir: &Path, repo: &KeyRepository) {
    std::fs::create_dir_all(dir).expect("key dir");
    let files = repo.files();
    for entry in std::fs::read_dir(dir).expect("read key dir").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !files.contains_key(&name) {
            std::fs::remove_file(entry.path()).expect("remove dropped key");
        }
    }
    for (name, key) in files {
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, key).expect("write key");
        std::fs::rename(&tmp, dir.join(&name)).expect("rename key");
    }
}

fn write_files(dir: &Path, files: &BTreeMap<String, String>) {
    std::fs::create_dir_all(dir).expect("config dir");
    for (name, text) in files {
        std::fs::write(dir.join(name), text).expect("config file");
    }
}

fn cmd(argv: &[String]) -> Command {
    let mut c = Command::new(&argv[0]);
    c.args(&argv[1..]);
    c
}

fn bin(name: &str) -> String {
    venv_bin(name).display().to_string()
}

/// Removes the cloud's databases, RabbitMQ exchanges and leftover OVN rows.
struct Cleanup {
    admin: MariaDbAdmin,
    databases: Vec<String>,
    users: Vec<String>,
    amqp_url: String,
    ca: String,
    exchanges: Vec<String>,
    queues: Vec<String>,
    nb: Vec<String>,
    neutron_db: String,
    drop_pg: bool,
}

const MQ_CLEANUP: &str = r#"import os, ssl, sys, kombu
c = kombu.Connection(os.environ["URL"], ssl={"ca_certs": os.environ["CA"], "cert_reqs": ssl.CERT_REQUIRED})
c.connect()
for arg in sys.argv[1:]:
    kind, name = arg.split("=", 1)
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

impl Drop for Cleanup {
    fn drop(&mut self) {
        // OVN rows of whatever this cloud's Neutron still holds (a test that failed half-way):
        // Neutron names them after its ids.
        let rows = |sql: &str| -> Vec<String> {
            let out = Command::new("mariadb")
                .args(["-h", &self.admin.host, "-P", &self.admin.port.to_string()])
                .args(["-u", &self.admin.user])
                .arg(format!("--ssl-ca={}", self.admin.ca_file))
                .args(["-N", "-B", "-e", sql])
                .env("MYSQL_PWD", &self.admin.password)
                .output();
            match out {
                Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .map(|l| l.trim().to_string())
                    .filter(|l| !l.is_empty())
                    .collect(),
                _ => Vec::new(),
            }
        };
        let db = &self.neutron_db;
        let mut nb: Vec<Vec<String>> = Vec::new();
        for id in rows(&format!("SELECT id FROM {db}.networks")) {
            nb.push(vec![
                "--if-exists".into(),
                "ls-del".into(),
                format!("neutron-{id}"),
            ]);
        }
        for id in rows(&format!("SELECT id FROM {db}.routers")) {
            nb.push(vec![
                "--if-exists".into(),
                "lr-del".into(),
                format!("neutron-{id}"),
            ]);
        }
        for id in rows(&format!("SELECT id FROM {db}.securitygroups")) {
            nb.push(vec![
                "--if-exists".into(),
                "destroy".into(),
                "Port_Group".into(),
                format!("pg_{}", id.replace('-', "_")),
            ]);
        }
        if self.drop_pg {
            nb.push(vec![
                "--if-exists".into(),
                "destroy".into(),
                "Port_Group".into(),
                "neutron_pg_drop".into(),
            ]);
        }
        for args in nb {
            let out = Command::new("ovn-nbctl")
                .args(&self.nb)
                .args(&args)
                .output();
            if let Ok(o) = out
                && !o.status.success()
            {
                eprintln!(
                    "clean-up ovn-nbctl {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&o.stderr)
                );
            }
        }
        let mut sql = String::new();
        for d in &self.databases {
            sql.push_str(&format!("DROP DATABASE IF EXISTS {d}; "));
        }
        for u in &self.users {
            sql.push_str(&format!("DROP USER IF EXISTS '{u}'@'%'; "));
        }
        if let Err(e) = std::panic::catch_unwind(|| self.admin.sql(&sql)) {
            eprintln!("dropping the cloud's databases: {e:?}");
        }
        let args: Vec<String> = self
            .queues
            .iter()
            .map(|q| format!("queue={q}"))
            .chain(self.exchanges.iter().map(|e| format!("exchange={e}")))
            .collect();
        match Command::new(venv_bin("python3"))
            .arg("-c")
            .arg(MQ_CLEANUP)
            .args(&args)
            .env("URL", &self.amqp_url)
            .env("CA", &self.ca)
            .output()
        {
            Ok(o) if o.status.success() && o.stderr.is_empty() => {}
            Ok(o) => eprintln!(
                "removing the cloud's RabbitMQ exchanges and queues: {}",
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => eprintln!("removing the cloud's RabbitMQ exchanges and queues: {e}"),
        }
    }
}

impl RenderedCloud {
    /// Renders, migrates and boots the cloud, and waits until every API answers.
    pub async fn boot(opts: CloudOptions) -> RenderedCloud {
        let started = Instant::now();
        let mut timings = Vec::new();
        let tmp = tempfile::Builder::new()
            .prefix(&format!("{}-", opts.prefix))
            .tempdir()
            .expect("tempdir");
        let root = tmp.path().to_path_buf();
        let _ = ROOT.set(root.clone());
        let env = external_services_env();
        let var = |k: &str| {
            env.get(k)
                .cloned()
                .unwrap_or_else(|| panic!("{k} missing from the external-services env file"))
        };
        let ca = var("EXTSVC_CA");
        let admin = MariaDbAdmin::external();
        let venv = test_cloud_dir().join("venv");
        let python_home = Some(venv.display().to_string());
        let suffix = password(8).to_lowercase();
        let p = &opts.prefix;
        let mc = vec![var("EXTSVC_MEMCACHED")];
        let [
            ks_port,
            pl_port,
            gl_port,
            ne_port,
            no_port,
            md_port,
            vnc_port,
            ci_port,
        ] = [
            free_port(),
            free_port(),
            free_port(),
            free_port(),
            free_port(),
            free_port(),
            free_port(),
            free_port(),
        ];
        let url = |port: u16| format!("http://127.0.0.1:{port}");
        let keystone_url = format!("{}/v3", url(ks_port));
        let db = |name: &str| {
            let (host, port) = var("EXTSVC_DB")
                .rsplit_once(':')
                .map(|(h, p)| (h.to_string(), p.parse().expect("EXTSVC_DB port")))
                .expect("EXTSVC_DB is host:port");
            Database {
                host,
                port,
                name: format!("{p}_{name}"),
                user: format!("{p}_{name}"),
                password: password(32),
                ca_file: Some(ca.clone()),
            }
        };
        let service_auth = |user: &str| KeystoneAuth {
            auth_url: keystone_url.clone(),
            www_authenticate_uri: keystone_url.clone(),
            region: REGION.into(),
            username: format!("{p}_{user}"),
            password: password(32),
            project: "service".into(),
        };
        let nova_exchange = format!("{p}_nova_{suffix}");
        let cinder_exchange = format!("{p}_cinder_{suffix}");
        let nova_host = format!("{p}-nova-{suffix}");
        let compute_host = format!("{p}-compute-{suffix}");
        let cinder_host = format!("{p}-cinder-{suffix}");
        let nb_args = vec![
            format!("--db={}", var("EXTSVC_OVN_NB_SSL")),
            "-p".into(),
            var("EXTSVC_CLIENT_KEY"),
            "-c".into(),
            var("EXTSVC_CLIENT_CERT"),
            "-C".into(),
            ca.clone(),
            "--timeout=10".into(),
        ];
        let pg_drop_exists = !run(
            Command::new("ovn-nbctl").args(&nb_args).args([
                "--bare",
                "--columns=name",
                "find",
                "Port_Group",
                "name=neutron_pg_drop",
            ]),
            "ovn-nbctl find Port_Group",
        )
        .trim()
        .is_empty();
        let names = ["keystone", "placement", "glance", "neutron", "cinder"];
        let nova_names = ["nova_api", "nova_cell0", "nova_cell1"];
        let nova_messaging = controlplane_render::messaging::Messaging {
            hosts: vec![var("EXTSVC_AMQPS")],
            user: var("EXTSVC_AMQP_USER"),
            password: var("EXTSVC_AMQP_PASSWORD"),
            vhost: var("EXTSVC_AMQP_VHOST"),
            ca_file: Some(ca.clone()),
        };
        let cleanup = Cleanup {
            admin: admin.clone(),
            databases: names
                .iter()
                .chain(nova_names.iter())
                .map(|n| format!("{p}_{n}"))
                .collect(),
            users: names
                .iter()
                .chain(["nova"].iter())
                .map(|n| format!("{p}_{n}"))
                .collect(),
            // kombu names the scheme amqp.
            amqp_url: nova_messaging
                .transport_url()
                .expect("transport url")
                .replacen("rabbit://", "amqp://", 1),
            ca: ca.clone(),
            exchanges: vec![nova_exchange.clone(), cinder_exchange.clone()],
            queues: vec![
                format!("compute.{compute_host}"),
                format!("conductor.{nova_host}"),
                format!("scheduler.{nova_host}"),
                format!("cinder-scheduler.{cinder_host}"),
            ],
            nb: nb_args.clone(),
            neutron_db: format!("{p}_neutron"),
            drop_pg: !pg_drop_exists,
        };

        // --- Rendering ---------------------------------------------------------------------
        let phase = Instant::now();
        // Keystone.
        let mut ks_template = ServiceTemplate::default();
        // Cheap password hashing keeps the bootstrap and every token request fast here.
        ks_template.config_overrides.insert(
            "identity".into(),
            [("password_hash_rounds".to_string(), "4".to_string())].into(),
        );
        let ks_db = db("keystone");
        let ks_spec = KeystoneSpec {
            release: "2026.1".into(),
            template: ks_template,
            database: DatabaseSpec {
                service: ExternalServiceRef { name: "db".into() },
                database_name: ks_db.name.clone(),
                username: ks_db.user.clone(),
            },
            cache: Some(ExternalServiceRef {
                name: "cache".into(),
            }),
            region: REGION.into(),
            public_endpoint: None,
            admin_password_secret: None,
            tokens: TokenSettings::default(),
            credential_keys: Default::default(),
        };
        let ks_paths = keystone::Paths {
            config_dir: root.join("keystone").display().to_string(),
            fernet_keys: root.join("fernet-keys").display().to_string(),
            credential_keys: root.join("credential-keys").display().to_string(),
            log_file: Some(root.join("keystone.log").display().to_string()),
            python_home: python_home.clone(),
        };
        let ks_inputs = keystone::KeystoneInputs {
            spec: &ks_spec,
            database: ks_db.clone(),
            memcache_servers: mc.clone(),
            paths: ks_paths.clone(),
            listen: format!("127.0.0.1:{ks_port}"),
            workers: 2,
        };
        let ks_dir = PathBuf::from(&ks_paths.config_dir);
        write_files(
            &ks_dir,
            &BTreeMap::from([
                (
                    "keystone.conf".to_string(),
                    keystone::keystone_conf(&ks_inputs),
                ),
                ("uwsgi.ini".to_string(), keystone::uwsgi_ini(&ks_inputs)),
            ]),
        );
        write_key_repository(Path::new(&ks_paths.fernet_keys), &KeyRepository::generate());
        write_key_repository(
            Path::new(&ks_paths.credential_keys),
            &KeyRepository::generate(),
        );

        // Placement.
        let default_template = ServiceTemplate::default();
        let pl_db = db("placement");
        let pl_auth = service_auth("placement");
        let pl_paths = placement::Paths {
            config_dir: root.join("placement").display().to_string(),
            log_file: Some(root.join("placement.log").display().to_string()),
            python_home: python_home.clone(),
        };
        let pl_inputs = placement::PlacementInputs {
            template: &default_template,
            database: pl_db.clone(),
            keystone: pl_auth.clone(),
            memcache_servers: mc.clone(),
            paths: pl_paths.clone(),
            listen: format!("127.0.0.1:{pl_port}"),
            workers: 1,
        };
        write_files(
            Path::new(&pl_paths.config_dir),
            &placement::config_files(&pl_inputs),
        );

        // Glance: the file store, web-download from the allowed hosts.
        let gl_db = db("glance");
        let gl_auth = service_auth("glance");
        let gl_paths = glance::Paths {
            config_dir: root.join("glance").display().to_string(),
            state_dir: root.join("glance-state").display().to_string(),
            log_file: Some(root.join("glance.log").display().to_string()),
            python_home: python_home.clone(),
        };
        let gl_inputs = glance::GlanceInputs {
            template: &default_template,
            database: gl_db.clone(),
            keystone: gl_auth.clone(),
            memcache_servers: mc.clone(),
            backends: vec![glance::Backend::File {
                dir: root.join("images").display().to_string(),
            }],
            web_download: Some(opts.web_download.clone()),
            public_url: Some(url(gl_port)),
            paths: gl_paths.clone(),
            listen: format!("127.0.0.1:{gl_port}"),
            workers: 1,
        };
        write_files(
            Path::new(&gl_paths.config_dir),
            &glance::config_files(&gl_inputs).expect("Glance renders"),
        );

        // Neutron: ML2/OVN on the harness's OVN over mutual TLS.
        let ne_db = db("neutron");
        let ne_auth = service_auth("neutron");
        let metadata_secret = password(32);
        let ne_paths = neutron::Paths {
            config_dir: root.join("neutron").display().to_string(),
            api_paste_config: venv.join("etc/neutron/api-paste.ini").display().to_string(),
            state_path: root.join("neutron-state").display().to_string(),
            log_file: Some(root.join("neutron.log").display().to_string()),
            python_home: python_home.clone(),
        };
        let ne_inputs = neutron::NeutronInputs {
            template: &default_template,
            database: ne_db.clone(),
            keystone: ne_auth.clone(),
            memcache_servers: mc.clone(),
            ovn: neutron::Ovn {
                nb: vec![var("EXTSVC_OVN_NB_SSL")],
                sb: vec![var("EXTSVC_OVN_SB_SSL")],
                tls: Some(neutron::OvnTls {
                    private_key: var("EXTSVC_CLIENT_KEY"),
                    certificate: var("EXTSVC_CLIENT_CERT"),
                    ca_cert: ca.clone(),
                }),
            },
            metadata: neutron::Metadata {
                nova_host: "127.0.0.1".into(),
                nova_port: md_port,
                nova_protocol: "http".into(),
                shared_secret: metadata_secret.clone(),
            },
            networks: neutron::Networks::default(),
            paths: ne_paths.clone(),
            listen: format!("127.0.0.1:{ne_port}"),
            workers: 1,
        };
        std::fs::create_dir_all(&ne_paths.state_path).expect("neutron state");
        write_files(
            Path::new(&ne_paths.config_dir),
            &neutron::config_files(&ne_inputs).expect("Neutron renders"),
        );

        // Nova: an exchange of its own on the shared vhost (the harness user may not create
        // vhosts) and no random delay before the scheduler's first host discovery.
        let mut no_template = ServiceTemplate::default();
        no_template.config_overrides.insert(
            "DEFAULT".into(),
            BTreeMap::from([
                ("control_exchange".to_string(), nova_exchange.clone()),
                ("periodic_fuzzy_delay".to_string(), "0".to_string()),
            ]),
        );
        let no_pw = password(32);
        let no_db = |name: &str| Database {
            user: format!("{p}_nova"),
            password: no_pw.clone(),
            ..db(name)
        };
        let no_auth = service_auth("nova");
        let web = root.join("novnc");
        std::fs::create_dir_all(&web).expect("novnc dir");
        let no_paths = nova::Paths {
            config_dir: root.join("nova").display().to_string(),
            api_paste_config: venv.join("etc/nova/api-paste.ini").display().to_string(),
            state_path: root.join("nova-state").display().to_string(),
            novnc_web: web.display().to_string(),
            python_home: python_home.clone(),
        };
        let no_inputs = nova::NovaInputs {
            template: &no_template,
            databases: nova::Databases {
                api: no_db("nova_api"),
                cell0: no_db("nova_cell0"),
                cell1: no_db("nova_cell1"),
            },
            messaging: nova_messaging.clone(),
            keystone: no_auth.clone(),
            memcache_servers: mc.clone(),
            peers: nova::Peers {
                placement: Some(url(pl_port)),
                glance: Some(url(gl_port)),
                neutron: Some(url(ne_port)),
            },
            metadata_secret,
            vnc: nova::Vnc {
                base_url: format!("http://127.0.0.1:{vnc_port}/vnc_lite.html"),
                proxy_host: "127.0.0.1".into(),
                proxy_port: vnc_port,
            },
            discover_hosts_interval: 5,
            host: nova_host.clone(),
            paths: no_paths.clone(),
            api_listen: format!("127.0.0.1:{no_port}"),
            metadata_listen: format!("127.0.0.1:{md_port}"),
            workers: 1,
        };
        std::fs::create_dir_all(&no_paths.state_path).expect("nova state");
        let no_dir = PathBuf::from(&no_paths.config_dir);
        write_files(
            &no_dir,
            &nova::config_files(&no_inputs).expect("Nova renders"),
        );
        let compute_conf = no_dir.join(nova::COMPUTE_CONF);
        std::fs::write(
            &compute_conf,
            nova::compute_conf(
                &no_inputs,
                &nova::ComputeNode {
                    host: compute_host.clone(),
                    compute_driver: "fake.SmallFakeDriver".into(),
                    my_ip: "127.0.0.1".into(),
                },
            )
            .expect("the compute node renders"),
        )
        .expect("compute conf");

        // Cinder: API and scheduler (no volume backend: the examples use quotas only).
        let mut ci_template = ServiceTemplate::default();
        ci_template.config_overrides.insert(
            "DEFAULT".into(),
            BTreeMap::from([("control_exchange".to_string(), cinder_exchange.clone())]),
        );
        let ci_db = db("cinder");
        let ci_auth = service_auth("cinder");
        let ci_paths = cinder::Paths {
            config_dir: root.join("cinder").display().to_string(),
            api_paste_config: venv.join("etc/cinder/api-paste.ini").display().to_string(),
            resource_filters: venv
                .join("etc/cinder/resource_filters.json")
                .display()
                .to_string(),
            state_path: root.join("cinder-state").display().to_string(),
            log_file: Some(root.join("cinder-api.log").display().to_string()),
            python_home: python_home.clone(),
        };
        let ci_inputs = cinder::CinderInputs {
            template: &ci_template,
            database: ci_db.clone(),
            messaging: cinder::Messaging {
                hosts: vec![var("EXTSVC_AMQPS")],
                user: var("EXTSVC_AMQP_USER"),
                password: var("EXTSVC_AMQP_PASSWORD"),
                vhost: var("EXTSVC_AMQP_VHOST"),
                tls: Some(cinder::MessagingTls {
                    ca_file: Some(ca.clone()),
                    client_cert: None,
                }),
            },
            keystone: ci_auth.clone(),
            memcache_servers: mc.clone(),
            backends: vec![],
            volume_host: cinder_host.clone(),
            paths: ci_paths.clone(),
            listen: format!("127.0.0.1:{ci_port}"),
            workers: 1,
        };
        std::fs::create_dir_all(&ci_paths.state_path).expect("cinder state");
        write_files(
            Path::new(&ci_paths.config_dir),
            &cinder::config_files(&ci_inputs),
        );
        timings.push(("render", phase.elapsed()));

        // --- Databases (the operator's database Job script) ----------------------------------
        let phase = Instant::now();
        let nova_dbs = [
            no_inputs.databases.api.clone(),
            no_inputs.databases.cell0.clone(),
            no_inputs.databases.cell1.clone(),
        ];
        std::thread::scope(|s| {
            for d in [&ks_db, &pl_db, &gl_db, &ne_db, &ci_db]
                .into_iter()
                .chain(nova_dbs.iter())
            {
                let admin = &admin;
                s.spawn(move || admin.init_database(d));
            }
        });
        timings.push(("databases", phase.elapsed()));

        // --- Keystone: db sync, bootstrap, boot ---------------------------------------------
        let phase = Instant::now();
        let ks_conf = ks_dir.join("keystone.conf");
        run(
            Command::new(venv_bin("keystone-manage"))
                .arg("--config-file")
                .arg(&ks_conf)
                .arg("db_sync"),
            "keystone-manage db_sync",
        );
        let admin_password = password(32);
        run(
            Command::new(venv_bin("keystone-manage"))
                .arg("--config-file")
                .arg(&ks_conf)
                .args(keystone::bootstrap_args(
                    &ks_spec,
                    &keystone_url,
                    &keystone_url,
                ))
                .env("OS_BOOTSTRAP_PASSWORD", &admin_password),
            "keystone-manage bootstrap",
        );
        let mut procs = vec![spawn_logged(
            &root,
            "keystone-uwsgi.log",
            "uwsgi (keystone)",
            &[
                bin("uwsgi"),
                "--ini".into(),
                ks_dir.join("uwsgi.ini").display().to_string(),
            ],
        )];
        timings.push(("keystone db sync and bootstrap", phase.elapsed()));

        // --- The other services' database Jobs, side by side with Keystone's start ----------
        let phase = Instant::now();
        let manage_nova = bin("nova-manage");
        std::thread::scope(|s| {
            s.spawn(|| {
                run(
                    &mut cmd(&placement::db_sync_command(
                        &bin("placement-manage"),
                        &pl_paths.config_dir,
                    )),
                    "placement-manage db sync",
                )
            });
            s.spawn(|| {
                run(
                    &mut cmd(&glance::db_sync_command(
                        &bin("glance-manage"),
                        &gl_paths.config_dir,
                    )),
                    "glance-manage db_sync",
                )
            });
            s.spawn(|| {
                run(
                    &mut cmd(&neutron::db_sync_command(
                        &bin("neutron-db-manage"),
                        &ne_paths,
                    )),
                    "neutron-db-manage upgrade heads",
                )
            });
            s.spawn(|| {
                run(
                    &mut cmd(&cinder::db_sync_command(&bin("cinder-manage"), &ci_paths)),
                    "cinder-manage db sync",
                )
            });
            s.spawn(|| {
                run(
                    &mut cmd(&nova::api_db_sync_command(&manage_nova, &no_paths)),
                    "nova-manage api_db sync",
                );
                let mut cells = cmd(&nova::cells::command());
                for (k, v) in nova::cell_setup_env(&no_inputs, &manage_nova).expect("cell env") {
                    cells.env(k, v);
                }
                run(&mut cells, "the cell set-up script");
                run(
                    &mut cmd(&nova::db_sync_command(&manage_nova, &no_paths)),
                    "nova-manage db sync",
                );
            });
        });
        timings.push(("db syncs and cell mapping", phase.elapsed()));

        // --- Service users and catalog (the operator's service-user step) ---------------------
        let phase = Instant::now();
        wait_http(&keystone_url, 120, logs).await;
        let mut entries: Vec<(ServiceEntry, String)> = vec![
            (
                placement::service_entry(&pl_auth, REGION, &url(pl_port), &url(pl_port)),
                pl_auth.password.clone(),
            ),
            (
                glance::service_entry(&gl_auth, REGION, &url(gl_port), &url(gl_port)),
                gl_auth.password.clone(),
            ),
            (
                neutron::service_entry(&ne_auth, REGION, &url(ne_port), &url(ne_port)),
                ne_auth.password.clone(),
            ),
        ];
        let nova_base = format!("{}/v2.1", url(no_port));
        entries.push((
            nova::service_entry(&no_auth, REGION, &nova_base, &nova_base),
            no_auth.password.clone(),
        ));
        for e in cinder::service_entries(&ci_auth, REGION, &url(ci_port), &url(ci_port)) {
            entries.push((e, ci_auth.password.clone()));
        }
        // One after another: the step creates the shared `service` project on its first run.
        for (entry, pw) in &entries {
            register_service_at(&keystone_url, entry, &admin_password, pw);
        }
        timings.push(("service users and catalog", phase.elapsed()));

        // --- The processes ------------------------------------------------------------------
        let phase = Instant::now();
        let uwsgi = |dir: &Path, file: &str| {
            vec![
                bin("uwsgi"),
                "--ini".into(),
                dir.join(file).display().to_string(),
            ]
        };
        let conf = |program: &str| nova::service_command(&bin(program), &no_paths);
        let with_log = |mut argv: Vec<String>, log: &str| {
            argv.push("--log-file".into());
            argv.push(root.join(log).display().to_string());
            argv
        };
        procs.push(spawn_logged(
            &root,
            "placement-uwsgi.log",
            "uwsgi (placement)",
            &uwsgi(Path::new(&pl_paths.config_dir), "uwsgi.ini"),
        ));
        procs.push(spawn_logged(
            &root,
            "glance-uwsgi.log",
            "uwsgi (glance)",
            &uwsgi(Path::new(&gl_paths.config_dir), "uwsgi.ini"),
        ));
        procs.push(spawn_logged(
            &root,
            "neutron-uwsgi.log",
            "uwsgi (neutron)",
            &uwsgi(Path::new(&ne_paths.config_dir), "uwsgi.ini"),
        ));
        procs.push(spawn_logged(
            &root,
            "nova-api.log",
            "uwsgi (nova-api)",
            &uwsgi(&no_dir, nova::API_UWSGI),
        ));
        procs.push(spawn_logged(
            &root,
            "nova-conductor.log",
            "nova-conductor",
            &conf("nova-conductor"),
        ));
        procs.push(spawn_logged(
            &root,
            "nova-scheduler.log",
            "nova-scheduler",
            &conf("nova-scheduler"),
        ));
        procs.push(spawn_logged(
            &root,
            "nova-compute.log",
            "nova-compute",
            &[
                bin("nova-compute"),
                "--config-file".into(),
                compute_conf.display().to_string(),
            ],
        ));
        procs.push(spawn_logged(
            &root,
            "cinder-uwsgi.log",
            "uwsgi (cinder-api)",
            &uwsgi(Path::new(&ci_paths.config_dir), "uwsgi.ini"),
        ));
        procs.push(spawn_logged(
            &root,
            "cinder-scheduler.stderr",
            "cinder-scheduler",
            &with_log(
                cinder::scheduler_command(&bin("cinder-scheduler"), &ci_paths),
                "cinder-scheduler.log",
            ),
        ));
        for base in [
            url(pl_port),
            format!("{}/healthcheck", url(gl_port)),
            url(ne_port),
            url(no_port),
            url(ci_port),
        ] {
            wait_http(&base, 240, logs).await;
        }
        // An API answering on its port is not proof enough that it is ours: a service that
        // could not bind its port exits, and another process may be answering there.
        let mut exited = Vec::new();
        for p in &mut procs {
            if !matches!(p.0.try_wait(), Ok(None)) {
                exited.push(p.1);
            }
        }
        assert!(
            exited.is_empty(),
            "exited after start: {exited:?}; {}",
            logs()
        );
        timings.push(("processes up", phase.elapsed()));
        timings.push(("boot in all", started.elapsed()));

        RenderedCloud {
            procs,
            _cleanup: cleanup,
            keystone_url,
            admin_password,
            endpoints: BTreeMap::from([
                ("placement", url(pl_port)),
                ("glance", url(gl_port)),
                ("neutron", url(ne_port)),
                ("nova", nova_base),
                ("cinder", url(ci_port)),
            ]),
            timings,
            root: tmp,
        }
    }

    /// A `clouds.yaml` with one entry, `name`, for this cloud's admin; written into the
    /// cloud's directory, its path returned.
    pub fn write_clouds_yaml(&self, name: &str) -> PathBuf {
        let path = self.root.path().join("clouds.yaml");
        let text = format!(
            "clouds:\n  {name}:\n    auth_type: password\n    auth:\n      auth_url: \"{}\"\n      username: admin\n      password: \"{}\"\n      project_name: admin\n      user_domain_name: Default\n      project_domain_name: Default\n    region_name: {REGION}\n    identity_api_version: 3\n    interface: public\n",
            self.keystone_url, self.admin_password
        );
        std::fs::write(&path, text).expect("clouds.yaml");
        path
    }

    /// Resident memory of each booted process (with its uwsgi workers) in MiB, by name.
    pub fn rss_mib(&self) -> Vec<(&'static str, u64)> {
        self.procs
            .iter()
            .map(|p| (p.1, rss_kib(p.0.id()) / 1024))
            .collect()
    }

    /// The booted processes that are no longer running (empty while the cloud is healthy).
    pub fn crashed(&mut self) -> Vec<&'static str> {
        let mut out = Vec::new();
        for p in &mut self.procs {
            if !matches!(p.0.try_wait(), Ok(None)) {
                out.push(p.1);
            }
        }
        out
    }
}

/// The operator's service-user step once against the Keystone at `keystone`.
pub fn register_service_at(
    keystone: &str,
    entry: &ServiceEntry,
    admin_password: &str,
    service_password: &str,
) {
    use controlplane_render::service_user;
    let mut su = Command::new(venv_bin("python3"));
    su.arg("-c").arg(service_user::SCRIPT);
    for (k, v) in service_user::env(entry, keystone) {
        su.env(k, v);
    }
    su.env("OS_PASSWORD", admin_password)
        .env("SERVICE_PASSWORD", service_password);
    run(&mut su, &format!("service-user step for {}", entry.user));
}
