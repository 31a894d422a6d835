//! Proof that the rendered Neutron configuration works: the operator's own rendering
//! (`neutron.conf`, `ml2_conf.ini`, the uwsgi configuration, the shared database script, the db
//! sync command and the shared service-user/catalog script) drives the real Neutron 2026.1 API
//! of the test cloud's virtualenv, with the in-tree ML2/OVN driver, against the test cloud's real
//! MariaDB and Keystone and the real OVN northbound/southbound ovsdb-servers of
//! `scripts/external-services`, over mutual TLS with the harness's CA and client certificate.
//!
//! Needs: `scripts/test-cloud up` (MariaDB on 127.0.0.1:13306, Keystone on 127.0.0.1:5000, the
//! venv), `scripts/external-services up` (OVN NB/SB; `EXTERNAL_SERVICES_ENV` or its default
//! path) and `scripts/control-plane-deps` (memcached). It uses its own database and user
//! (`cpproof_neutron`), its own service user (`cpproof_neutron`) and its own region
//! (`CpProofNeutron`) for the catalog endpoints, and removes them again. The OVN databases are
//! shared with other tests: the proof looks only at the rows of the objects it created (named
//! by their Neutron ids) and removes them, through Neutron and, should the test fail half-way,
//! directly in the northbound database.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support;
use support::{
    Proc, admin_password, api_call, external_services_env, free_port, init_database_twice,
    log_tails, mariadb_admin, memcached_items, proof_database, proof_keystone_auth,
    register_service_twice, rss_kib, run, service_token, test_cloud_dir, venv_bin,
};

use controlplane_api::common::ServiceTemplate;
use controlplane_render::neutron::{self, Metadata, Networks, NeutronInputs, Ovn, OvnTls, Paths};
use controlplane_render::secrets::password;
use serde_json::{Value, json};

const REGION: &str = "CpProofNeutron";
const USER: &str = "cpproof_neutron";
const DB: &str = "cpproof_neutron";

/// `ovn-nbctl` against the harness's northbound database over ssl with its client certificate.
#[derive(Clone)]
struct Nb {
    db: String,
    tls: OvnTls,
}

impl Nb {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("ovn-nbctl");
        c.arg(format!("--db={}", self.db))
            .args(["-p", &self.tls.private_key])
            .args(["-c", &self.tls.certificate])
            .args(["-C", &self.tls.ca_cert])
            .arg("--timeout=10")
            .args(args);
        c
    }

    fn ctl(&self, args: &[&str]) -> String {
        run(
            &mut self.cmd(args),
            &format!("ovn-nbctl {}", args.join(" ")),
        )
    }

    /// One column of the rows of `table` whose name is `name` (empty: no such row).
    fn names(&self, table: &str, name: &str) -> Vec<String> {
        self.ctl(&[
            "--bare",
            "--columns=name",
            "find",
            table,
            &format!("name={name}"),
        ])
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_string())
        .collect()
    }
}

/// Removes what the proof registered in the test cloud's Keystone (its endpoints, region and
/// user; never the shared `network` service, which the proof only reuses), its database, and
/// whatever of its own objects is still in the northbound database.
struct Cleanup {
    admin_pw: String,
    nb: Nb,
    /// `ovn-nbctl` argument lists that remove the proof's objects, recorded as they are created
    /// (all `--if-exists`: after a passing run, Neutron has removed them already).
    ovn: Arc<Mutex<Vec<Vec<String>>>>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Ok(cmds) = self.ovn.lock() {
            for args in cmds.iter() {
                let a: Vec<&str> = args.iter().map(String::as_str).collect();
                match self.nb.cmd(&a).output() {
                    Ok(o) if o.status.success() => {}
                    Ok(o) => eprintln!(
                        "clean-up ovn-nbctl {}: {}",
                        a.join(" "),
                        String::from_utf8_lossy(&o.stderr)
                    ),
                    Err(e) => eprintln!("clean-up ovn-nbctl {}: {e}", a.join(" ")),
                }
            }
        }
        let script = r#"import os
from keystoneauth1 import session
from keystoneauth1.identity import v3
U = "http://127.0.0.1:5000/v3"
s = session.Session(auth=v3.Password(auth_url=U, username="admin", password=os.environ["PW"],
    project_name="admin", user_domain_id="default", project_domain_id="default"))
for e in s.get(U + "/endpoints", params={"region_id": os.environ["REGION"]}).json()["endpoints"]:
    if e.get("region_id") == os.environ["REGION"]:
        s.delete(U + "/endpoints/" + e["id"])
if any(r["id"] == os.environ["REGION"] for r in s.get(U + "/regions").json()["regions"]):
    s.delete(U + "/regions/" + os.environ["REGION"])
for u in s.get(U + "/users", params={"name": os.environ["USER_NAME"]}).json()["users"]:
    s.delete(U + "/users/" + u["id"])
"#;
        let out = Command::new(venv_bin("python3"))
            .arg("-c")
            .arg(script)
            .env("PW", &self.admin_pw)
            .env("REGION", REGION)
            .env("USER_NAME", USER)
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!(
                "cleanup of the proof's Keystone entries failed: {}",
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => eprintln!("cleanup of the proof's Keystone entries: {e}"),
        }
        let _ = Command::new("mariadb")
            .args(["-h", "127.0.0.1", "-P", "13306", "-u", "root", "-e"])
            .arg(format!(
                "DROP DATABASE IF EXISTS {DB}; DROP USER IF EXISTS '{DB}'@'%'"
            ))
            .output();
    }
}

/// The proof's temporary directory, for the logs a failure shows.
static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

fn logs() -> String {
    ROOT.get()
        .map(|root| {
            log_tails(
                root,
                &[
                    "uwsgi.log",
                    "neutron.log",
                    "maintenance.log",
                    "maintenance.err",
                ],
                60,
            )
        })
        .unwrap_or_default()
}

/// One Neutron API call, with a token when given.
async fn call(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let headers: Vec<(&str, &str)> = token.map(|t| ("X-Auth-Token", t)).into_iter().collect();
    api_call(client, method, url, &headers, body, logs).await
}

/// Polls `f` until it holds (Neutron writes to OVN within the API request, but the proof does
/// not rely on the exact moment).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "{what}; {}", logs());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The errors in a maintenance worker's log but those of losing OVN's database lock: the
/// worker runs its tasks only while it holds the northbound lock, and the other proofs' Neutrons
/// on the same OVN (the TLS and whole-cloud proofs run beside this one) take it from it, as a
/// second Neutron server in production would. Records are grouped by time stamp and pid, so an
/// error's traceback goes with the message that names the lock.
fn unexpected_errors(log: &str) -> Vec<String> {
    let mut records: Vec<(String, String)> = Vec::new();
    for line in log.lines() {
        let mut fields = line.splitn(4, ' ');
        let (date, time, pid) = (fields.next(), fields.next(), fields.next());
        let stamped = matches!((date, time, pid), (Some(d), Some(t), Some(p))
            if d.len() == 10 && d.as_bytes()[4] == b'-' && t.contains(':')
                && !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        match records.last_mut() {
            Some((_, text)) if !stamped => {
                text.push('\n');
                text.push_str(line);
            }
            _ => {
                let key = line.split(' ').take(3).collect::<Vec<_>>().join(" ");
                records.push((key, line.to_string()));
            }
        }
    }
    let mut groups: Vec<(String, String)> = Vec::new();
    for (key, text) in records {
        match groups.last_mut() {
            Some((k, t)) if *k == key => {
                t.push('\n');
                t.push_str(&text);
            }
            _ => groups.push((key, text)),
        }
    }
    groups
        .into_iter()
        .map(|(_, text)| text)
        .filter(|t| t.contains(" ERROR ") || t.contains("Traceback"))
        .filter(|t| !t.contains("database lock"))
        .collect()
}

#[test]
fn only_losing_the_ovn_lock_is_an_expected_error() {
    let lost = "2026-12-06 15:10:16.737 16097 ERROR ovsdbapp.backend.ovs_idl.transaction [None req-5c] Traceback (most recent call last):
  File \"x.py\", line 1, in commit
    raise RuntimeError(msg)
RuntimeError: OVSDB Error: The transaction failed because the IDL has been configured to require a database lock but didn't get it yet or has already lost it
2026-12-06 15:10:16.738 16097 ERROR neutron.maintenance [None req-5c] OVN maintenance task check_fdb_aging_settings failed after 0.070 seconds: RuntimeError: OVSDB Error: The transaction failed because the IDL has been configured to require a database lock but didn't get it yet or has already lost it
2026-12-06 15:10:16.738 16097 ERROR neutron.maintenance Traceback (most recent call last):
2026-12-06 15:10:16.738 16097 ERROR neutron.maintenance   File \"m.py\", line 110, in wrapper
2026-12-06 15:10:17.001 16097 INFO neutron.maintenance [-] Maintenance task thread has started";
    assert_eq!(unexpected_errors(lost), Vec::<String>::new());
    let other = format!(
        "{lost}\n2026-12-06 15:10:18.000 16097 ERROR neutron.db [-] Traceback (most recent call last):\nKeyError: 'x'"
    );
    assert_eq!(unexpected_errors(&other).len(), 1, "{other}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rendered_neutron_boots_and_drives_real_ovn() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let _ = ROOT.set(root.to_path_buf());
    let env = external_services_env();
    let var = |k: &str| {
        env.get(k)
            .cloned()
            .unwrap_or_else(|| panic!("{k} missing from the external-services env file"))
    };
    let tls = OvnTls {
        private_key: var("EXTSVC_CLIENT_KEY"),
        certificate: var("EXTSVC_CLIENT_CERT"),
        ca_cert: var("EXTSVC_CA"),
    };
    let nb = Nb {
        db: var("EXTSVC_OVN_NB_SSL"),
        tls: tls.clone(),
    };
    let (api_port, mc_port) = (free_port(), free_port());
    let admin_pw = admin_password();
    let ovn_cleanup = Arc::new(Mutex::new(Vec::<Vec<String>>::new()));
    let _cleanup = Cleanup {
        admin_pw: admin_pw.clone(),
        nb: nb.clone(),
        ovn: ovn_cleanup.clone(),
    };
    let remove_at_end = |args: &[&str]| {
        if let Ok(mut v) = ovn_cleanup.lock() {
            v.push(args.iter().map(|s| s.to_string()).collect());
        }
    };

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

    let mut template = ServiceTemplate::default();
    // A user override, as a cluster would set one (it lands in ml2_conf.ini).
    template.config_overrides.insert(
        "ml2_type_geneve".into(),
        [("vni_ranges".to_string(), "1000:2000".to_string())].into(),
    );
    let db = proof_database(DB);
    let keystone = proof_keystone_auth(USER);
    let venv = test_cloud_dir().join("venv");
    let paths = Paths {
        config_dir: root.join("etc").display().to_string(),
        api_paste_config: venv.join("etc/neutron/api-paste.ini").display().to_string(),
        state_path: root.join("state").display().to_string(),
        log_file: Some(root.join("neutron.log").display().to_string()),
        python_home: Some(venv.display().to_string()),
    };
    let inputs = NeutronInputs {
        template: &template,
        database: db.clone(),
        keystone: keystone.clone(),
        cache: controlplane_render::cache::Cache::plain(vec![format!("127.0.0.1:{mc_port}")]),
        ovn: Ovn {
            nb: vec![var("EXTSVC_OVN_NB_SSL")],
            sb: vec![var("EXTSVC_OVN_SB_SSL")],
            tls: Some(tls.clone()),
        },
        metadata: Metadata {
            nova_host: "127.0.0.1".into(),
            nova_port: 8775,
            nova_protocol: "http".into(),
            ca_file: None,
            shared_secret: password(32),
        },
        networks: Networks::default(),
        paths: paths.clone(),
        listen: format!("127.0.0.1:{api_port}"),
        workers: 1,
    };
    let base = format!("http://127.0.0.1:{api_port}");

    // The shared database script, twice: Jobs are retried.
    init_database_twice(&db);

    // The shared service-user step against the real Keystone, twice.
    let entry = neutron::service_entry(&keystone, REGION, &base, &base);
    register_service_twice(&entry, &admin_pw, &keystone.password);

    std::fs::create_dir_all(&paths.config_dir).expect("etc");
    std::fs::create_dir_all(&paths.state_path).expect("state");
    let files = neutron::config_files(&inputs).expect("renders");
    for (name, text) in &files {
        std::fs::write(PathBuf::from(&paths.config_dir).join(name), text).expect("config file");
    }
    // Every option of the three files is one the installed Neutron and its libraries define
    // (oslo.config itself ignores unknown options silently; the metadata agent's file is not
    // booted here, see below). Dynamic auth-plugin options are reported as unverifiable, not
    // as errors.
    let validators: Vec<_> = neutron::OPTION_NAMESPACES
        .iter()
        .map(|(file, namespaces)| {
            let mut c = Command::new(venv_bin("oslo-config-validator"));
            for ns in *namespaces {
                c.args(["--namespace", ns]);
            }
            c.arg("--input-file")
                .arg(PathBuf::from(&paths.config_dir).join(file))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            (*file, c.spawn().expect("start oslo-config-validator"))
        })
        .collect();
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
    let manage = venv_bin("neutron-db-manage").display().to_string();
    let sync = neutron::db_sync_command(&manage, &paths);
    let started = Instant::now();
    run(
        Command::new(&sync[0]).args(&sync[1..]),
        "neutron-db-manage upgrade heads",
    );
    let sync_time = started.elapsed();
    // The upgrade pair on the synced schema: both branches are at their heads, so each phase
    // must succeed and change nothing; a wrong flag or branch fails here.
    for (cmd, what) in [
        (
            neutron::db_expand_command(&manage, &paths),
            "upgrade --expand",
        ),
        (
            neutron::db_contract_command(&manage, &paths),
            "upgrade --contract",
        ),
    ] {
        run(Command::new(&cmd[0]).args(&cmd[1..]), what);
    }
    let current = run(
        Command::new(&manage)
            .args(
                paths
                    .server_config_files()
                    .iter()
                    .flat_map(|f| ["--config-file", f]),
            )
            .arg("current"),
        "neutron-db-manage current",
    );
    assert!(
        current.contains("(head)") && !current.contains("FAILED"),
        "after expand and contract: {current}"
    );
    // The schema, with ML2/OVN's own tables, landed in the rendered database.
    let tables = mariadb_admin(&format!(
        "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = '{DB}' AND table_name IN ('networks', 'ovn_revision_numbers', 'ovn_hash_ring')"
    ));
    assert_eq!(tables.trim(), "3", "db sync did not create {DB}'s tables");

    // The API creates OVN's drop port group before it serves; it is Neutron's shared object,
    // so it goes at the end only if this proof's Neutron was the one that made it.
    if nb.names("Port_Group", "neutron_pg_drop").is_empty() {
        remove_at_end(&["--if-exists", "destroy", "Port_Group", "neutron_pg_drop"]);
    }
    let started = Instant::now();
    let uwsgi = Command::new(venv_bin("uwsgi"))
        .arg("--ini")
        .arg(PathBuf::from(&paths.config_dir).join("uwsgi.ini"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(root.join("uwsgi.log")).expect("uwsgi log"))
        .spawn()
        .expect("start uwsgi");
    let uwsgi = Proc(uwsgi, "uwsgi");

    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        if let Ok(r) = client.get(&base).send().await
            && r.status().is_success()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Neutron did not answer on {base}; {}",
            logs()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let boot_time = started.elapsed();

    // The OVN maintenance worker, the second process of a 2026.1 ML2/OVN Neutron, from the same
    // files. Its one-time tasks write OVN's global options (NB_Global), which belong to nobody
    // in particular here: put them back as they were at the end.
    let options = nb.ctl(&["get", "NB_Global", ".", "options"]);
    let options = options.trim();
    if options == "{}" {
        remove_at_end(&["clear", "NB_Global", ".", "options"]);
    } else {
        remove_at_end(&["set", "NB_Global", ".", &format!("options={options}")]);
    }
    let program = venv_bin("neutron-ovn-maintenance-worker")
        .display()
        .to_string();
    let cmd = neutron::maintenance_worker_command(&program, &paths);
    let maintenance_log = root.join("maintenance.log");
    let started = Instant::now();
    let worker = Command::new(&cmd[0])
        .args(&cmd[1..])
        .arg("--log-file")
        .arg(&maintenance_log)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(root.join("maintenance.err")).expect("stderr file"))
        .spawn()
        .expect("start the maintenance worker");
    let worker = Proc(worker, "neutron-ovn-maintenance-worker");
    let read_maintenance = || std::fs::read_to_string(&maintenance_log).unwrap_or_default();
    eventually("the maintenance worker's start", || {
        read_maintenance().contains("Maintenance task thread has started")
    });
    let worker_time = started.elapsed();
    let text = read_maintenance();
    assert!(
        text.contains("MaintenanceWorker process has finished the post initialization")
            && text.contains("ssl:"),
        "{text}"
    );
    assert!(
        unexpected_errors(&text).is_empty(),
        "maintenance worker:\n{text}"
    );

    let nets = format!("{base}/v2.0/networks");
    let (status, _) = call(&client, reqwest::Method::GET, &nets, None, None).await;
    assert_eq!(status, 401, "no token; {}", logs());
    let (status, _) = call(
        &client,
        reqwest::Method::GET,
        &nets,
        Some("gAAAAABforged"),
        None,
    )
    .await;
    assert_eq!(status, 401, "forged token");

    let (token, body) = service_token(&client, USER, &keystone.password).await;
    let svc = body["token"]["catalog"]
        .as_array()
        .and_then(|c| c.iter().find(|s| s["type"] == neutron::SERVICE_TYPE))
        .expect("network in the catalog");
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
    let t = Some(token.as_str());

    // The ML2/OVN driver is the one loaded: the agent list answers from OVN's southbound
    // database (Neutron's own agents table has no OVN agents), and the pre-fork step created the
    // drop port group every port-security port joins.
    let (status, _) = call(
        &client,
        reqwest::Method::GET,
        &format!("{base}/v2.0/agents"),
        t,
        None,
    )
    .await;
    assert_eq!(status, 200, "{}", logs());
    assert_eq!(
        nb.names("Port_Group", "neutron_pg_drop"),
        ["neutron_pg_drop"]
    );

    // A network: its logical switch appears in the northbound database.
    let suffix = password(8).to_lowercase();
    let net_name = format!("cpproof-net-{suffix}");
    let (status, net) = call(
        &client,
        reqwest::Method::POST,
        &nets,
        t,
        Some(json!({"network": {"name": net_name}})),
    )
    .await;
    assert_eq!(status, 201, "create network: {net}; {}", logs());
    let net_id = net["network"]["id"]
        .as_str()
        .expect("network id")
        .to_string();
    let ls = format!("neutron-{net_id}");
    remove_at_end(&["--if-exists", "ls-del", &ls]);
    assert_eq!(net["network"]["provider:network_type"], "geneve", "{net}");
    let vni = net["network"]["provider:segmentation_id"]
        .as_u64()
        .expect("VNI");
    assert!(
        (1000..=2000).contains(&vni),
        "VNI {vni} outside the overridden range"
    );
    eventually(&format!("logical switch {ls} in NB"), || {
        nb.names("Logical_Switch", &ls) == [ls.clone()]
    });
    let ext = nb.ctl(&[
        "get",
        "Logical_Switch",
        &ls,
        "external_ids:\"neutron:network_name\"",
    ]);
    assert_eq!(ext.trim().trim_matches('"'), net_name);

    // A subnet: OVN's native DHCP options for it, and (ovn_metadata_enabled) the metadata
    // localport of the network.
    let (status, sub) = call(
        &client,
        reqwest::Method::POST,
        &format!("{base}/v2.0/subnets"),
        t,
        Some(json!({"subnet": {"network_id": net_id, "ip_version": 4,
                               "cidr": "10.251.7.0/24", "name": format!("cpproof-sub-{suffix}")}})),
    )
    .await;
    assert_eq!(status, 201, "create subnet: {sub}; {}", logs());
    let sub_id = sub["subnet"]["id"].as_str().expect("subnet id").to_string();
    eventually("DHCP options of the subnet in NB", || {
        !nb.ctl(&[
            "--bare",
            "--columns=_uuid",
            "find",
            "DHCP_Options",
            &format!("external_ids:subnet_id={sub_id}"),
        ])
        .trim()
        .is_empty()
    });
    let dhcp = nb.ctl(&[
        "--bare",
        "--columns=_uuid,cidr",
        "find",
        "DHCP_Options",
        &format!("external_ids:subnet_id={sub_id}"),
    ]);
    let dhcp: Vec<&str> = dhcp
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(dhcp.get(1), Some(&"10.251.7.0/24"), "{dhcp:?}");
    remove_at_end(&["--if-exists", "destroy", "DHCP_Options", dhcp[0]]);
    let (_, ports) = call(
        &client,
        reqwest::Method::GET,
        &format!("{base}/v2.0/ports?network_id={net_id}&device_owner=network:distributed"),
        t,
        None,
    )
    .await;
    let md_port = ports["ports"][0]["id"]
        .as_str()
        .expect("metadata port")
        .to_string();
    eventually("metadata localport in NB", || {
        nb.ctl(&["lsp-get-type", &md_port]).trim() == "localport"
    });

    // A router with an interface on the subnet: logical router and router port in NB.
    let (status, router) = call(
        &client,
        reqwest::Method::POST,
        &format!("{base}/v2.0/routers"),
        t,
        Some(json!({"router": {"name": format!("cpproof-router-{suffix}")}})),
    )
    .await;
    assert_eq!(status, 201, "create router: {router}; {}", logs());
    let router_id = router["router"]["id"]
        .as_str()
        .expect("router id")
        .to_string();
    let lr = format!("neutron-{router_id}");
    remove_at_end(&["--if-exists", "lr-del", &lr]);
    eventually(&format!("logical router {lr} in NB"), || {
        nb.names("Logical_Router", &lr) == [lr.clone()]
    });
    let (status, iface) = call(
        &client,
        reqwest::Method::PUT,
        &format!("{base}/v2.0/routers/{router_id}/add_router_interface"),
        t,
        Some(json!({"subnet_id": sub_id})),
    )
    .await;
    assert_eq!(status, 200, "add interface: {iface}; {}", logs());
    let rport = iface["port_id"]
        .as_str()
        .expect("interface port")
        .to_string();
    let lrp = format!("lrp-{rport}");
    eventually(&format!("router port {lrp} in {lr}"), || {
        nb.ctl(&["lrp-list", &lr]).contains(&lrp)
    });
    let networks = nb.ctl(&["get", "Logical_Router_Port", &lrp, "networks"]);
    assert!(
        networks.contains("10.251.7.1/24"),
        "{lrp} networks: {networks}"
    );
    // ... and the switch side of it, a router-type port pointing at it.
    assert_eq!(nb.ctl(&["lsp-get-type", &rport]).trim(), "router");

    // The default security group Neutron made for the project on the interface port: its port
    // group is in NB too; remember it for the clean-up.
    let (_, sgs) = call(
        &client,
        reqwest::Method::GET,
        &format!("{base}/v2.0/security-groups?name=default"),
        t,
        None,
    )
    .await;
    let sg_ids: Vec<String> = sgs["security_groups"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s["id"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    for sg in &sg_ids {
        let pg = format!("pg_{}", sg.replace('-', "_"));
        remove_at_end(&["--if-exists", "destroy", "Port_Group", &pg]);
        assert_eq!(nb.names("Port_Group", &pg), [pg.as_str()]);
    }

    let rss = rss_kib(uwsgi.0.id());
    let worker_rss = rss_kib(worker.0.id());
    // Still running, and nothing went wrong while the API changed OVN under it.
    let text = read_maintenance();
    assert!(
        unexpected_errors(&text).is_empty(),
        "maintenance worker:\n{text}"
    );

    // Tear down through Neutron and watch OVN follow.
    let (status, _) = call(
        &client,
        reqwest::Method::PUT,
        &format!("{base}/v2.0/routers/{router_id}/remove_router_interface"),
        t,
        Some(json!({"subnet_id": sub_id})),
    )
    .await;
    assert_eq!(status, 200, "remove interface; {}", logs());
    eventually(&format!("{lrp} gone"), || {
        !nb.ctl(&["lrp-list", &lr]).contains(&lrp)
    });
    let (status, _) = call(
        &client,
        reqwest::Method::DELETE,
        &format!("{base}/v2.0/routers/{router_id}"),
        t,
        None,
    )
    .await;
    assert_eq!(status, 204, "delete router; {}", logs());
    eventually(&format!("{lr} gone"), || {
        nb.names("Logical_Router", &lr).is_empty()
    });
    let (status, _) = call(
        &client,
        reqwest::Method::DELETE,
        &format!("{nets}/{net_id}"),
        t,
        None,
    )
    .await;
    assert_eq!(status, 204, "delete network; {}", logs());
    eventually(&format!("{ls} gone"), || {
        nb.names("Logical_Switch", &ls).is_empty()
    });
    eventually("the subnet's DHCP options gone", || {
        nb.ctl(&[
            "--bare",
            "--columns=_uuid",
            "find",
            "DHCP_Options",
            &format!("external_ids:subnet_id={sub_id}"),
        ])
        .trim()
        .is_empty()
    });
    for sg in &sg_ids {
        let (status, _) = call(
            &client,
            reqwest::Method::DELETE,
            &format!("{base}/v2.0/security-groups/{sg}"),
            t,
            None,
        )
        .await;
        assert_eq!(
            status,
            204,
            "delete default security group {sg}; {}",
            logs()
        );
        let pg = format!("pg_{}", sg.replace('-', "_"));
        eventually(&format!("{pg} gone"), || {
            nb.names("Port_Group", &pg).is_empty()
        });
    }

    // keystonemiddleware cached the validated token in the memcached the config names.
    assert!(
        memcached_items(mc_port) > 0,
        "memcached stored nothing; {}",
        logs()
    );

    eprintln!(
        "neutron-db-manage upgrade heads: {:.1} s; API up after {:.1} s; maintenance worker \
         started in {:.1} s; RSS: uwsgi master + 1 API worker {} MiB, maintenance worker {} MiB",
        sync_time.as_secs_f64(),
        boot_time.as_secs_f64(),
        worker_time.as_secs_f64(),
        rss / 1024,
        worker_rss / 1024
    );
}
