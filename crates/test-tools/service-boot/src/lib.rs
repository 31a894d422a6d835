//! Booting real OpenStack services from the control-plane operator's rendered configuration,
//! for tests: the test cloud's paths, child processes, commands, its MariaDB and Keystone admin,
//! the harness's external services, and the cleanup of what a test registered there (what the
//! boot proofs of `controlplane-render` share), and [`cloud::RenderedCloud`], a whole cloud
//! booted from the rendered configuration only (the resource operator's examples run on it).
//!
//! Everything here is test code: a failure panics with what went wrong and the logs to read.

pub mod cloud;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// The test cloud's directory (`TEST_CLOUD_DIR`, else the default cache path).
pub fn test_cloud_dir() -> PathBuf {
    PathBuf::from(
        std::env::var("TEST_CLOUD_DIR")
            .unwrap_or_else(|_| "/var/cache/openstack-operator/test-cloud".into()),
    )
}

/// A program of the test cloud's venv; fails clearly when the cloud is not installed.
pub fn venv_bin(name: &str) -> PathBuf {
    let p = test_cloud_dir().join("venv/bin").join(name);
    assert!(
        p.exists(),
        "{} is missing: run scripts/test-cloud up (it installs the services into its venv)",
        p.display()
    );
    p
}

/// A free loopback port, never one this process handed out before: the port is released
/// before the service binds it, and the kernel may offer a just-released port again, so two
/// services of one cloud could otherwise be given the same port (a booted cloud once had its
/// Cinder API's port answered by its own Keystone).
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free loopback port");
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// Kills a child process and what it started (and waits for it) when dropped.
pub struct Proc(pub Child, pub &'static str);

/// The pids of `pid`'s descendants, children before grandchildren (Linux's
/// `/proc/PID/task/TID/children`; none where there is no such file).
fn descendants(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
                out.push(child);
                todo.push(child);
            }
        }
    }
    out
}

fn signal(pid: u32, sig: libc::c_int) {
    if let Ok(pid) = i32::try_from(pid) {
        // SAFETY: kill(2) has no memory effects; a pid that is gone yields ESRCH.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // A uwsgi master killed before its workers leaves them running, holding database
        // connections and metadata locks a later DROP DATABASE waits on: the whole tree goes.
        let kids = descendants(self.0.id());
        signal(self.0.id(), libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut stopped = false;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                stopped = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if !stopped {
            let _ = self.0.kill();
            let _ = self.0.wait();
            eprintln!("{} did not stop on SIGTERM; killed", self.1);
        }
        for kid in kids {
            signal(kid, libc::SIGKILL);
        }
    }
}

/// Runs `cmd` to success and returns its stdout; panics with its output otherwise.
pub fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Items memcached has stored since it started.
pub fn memcached_items(port: u16) -> u64 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("memcached");
    s.write_all(b"stats\r\nquit\r\n").expect("stats");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.lines()
        .find_map(|l| l.strip_prefix("STAT total_items "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// The Keystone of the test cloud the proofs register their service users and endpoints in.
pub const KEYSTONE: &str = "http://127.0.0.1:5000/v3";

/// Runs SQL as the test cloud's MariaDB root and returns the rows (tab-separated).
pub fn mariadb_admin(sql: &str) -> String {
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
        "mariadb (test cloud root)",
    )
}

/// The test cloud's Keystone admin password, from the clouds.yaml it wrote.
pub fn admin_password() -> String {
    let clouds = test_cloud_dir().join("clouds.yaml");
    run(
        Command::new(venv_bin("python3")).arg("-c").arg(
            "import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))['clouds']['local-admin']['auth']['password'])",
        ).arg(&clouds),
        "reading the admin password from clouds.yaml",
    )
    .trim()
    .to_string()
}

/// Removes what a proof registered in the test cloud's Keystone (the endpoints in its own
/// region, the region and its service user; never the shared catalog service, which the proof
/// only reuses) and its database, when dropped.
pub struct KeystoneCleanup {
    /// Keystone's admin password.
    pub admin_password: String,
    /// The proof's own region.
    pub region: &'static str,
    /// The proof's service user.
    pub user: &'static str,
    /// The proof's database (and database user).
    pub database: &'static str,
}

impl Drop for KeystoneCleanup {
    fn drop(&mut self) {
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
            .env("PW", &self.admin_password)
            .env("REGION", self.region)
            .env("USER_NAME", self.user)
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!(
                "cleanup of the proof's Keystone entries failed: {}",
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => eprintln!("cleanup of the proof's Keystone entries: {e}"),
        }
        let db = self.database;
        let _ = Command::new("mariadb")
            .args(["-h", "127.0.0.1", "-P", "13306", "-u", "root", "-e"])
            .arg(format!(
                "DROP DATABASE IF EXISTS {db}; DROP USER IF EXISTS '{db}'@'%'"
            ))
            .output();
    }
}

/// Resident memory in KiB of a process and its children (uwsgi's master and workers), read from
/// /proc; reported, not asserted.
pub fn rss_kib(pid: u32) -> u64 {
    let own = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0);
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    own + children
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .map(rss_kib)
        .sum::<u64>()
}

/// A token of a service user, scoped to `service`, and its catalog.
pub async fn service_token(
    client: &reqwest::Client,
    user: &str,
    pw: &str,
) -> (String, serde_json::Value) {
    service_token_at(client, KEYSTONE, user, pw).await
}

/// [`service_token`] from the Keystone at `keystone` (its `/v3` URL).
pub async fn service_token_at(
    client: &reqwest::Client,
    keystone: &str,
    user: &str,
    pw: &str,
) -> (String, serde_json::Value) {
    let body = serde_json::json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": user, "domain": {"id": "default"}, "password": pw}}},
        "scope": {"project": {"name": "service", "domain": {"id": "default"}}}}});
    let resp = client
        .post(format!("{keystone}/auth/tokens"))
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
    let token = resp
        .headers()
        .get("x-subject-token")
        .and_then(|v| v.to_str().ok())
        .expect("X-Subject-Token")
        .to_string();
    (token, resp.json().await.expect("token JSON"))
}

/// A memcached of the test's own on `port` (loopback, no UDP), stopped when dropped.
pub fn start_memcached(port: u16) -> Proc {
    let child = Command::new("memcached")
        .args([
            "-l",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            "0",
            "-u",
            "nobody",
            "-m",
            "32",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start memcached ({e}): run scripts/control-plane-deps"));
    Proc(child, "memcached")
}

/// The operator's database Job script (shared by every service) for `db`, run twice as a
/// retried Job would be, on a fresh database: the second run must converge, not fail.
pub fn init_database_twice(db: &controlplane_render::database::Database) {
    use controlplane_render::database;
    mariadb_admin(&format!("DROP DATABASE IF EXISTS {}", db.name));
    let mut init = Command::new(venv_bin("python3"));
    init.arg("-c").arg(database::DB_INIT_SCRIPT);
    for (k, v) in database::db_init_env(db) {
        init.env(k, v);
    }
    init.env("DB_ADMIN_USER", "root")
        .env("DB_ADMIN_PASSWORD", "")
        .env("DB_PASSWORD", &db.password);
    run(&mut init, "database script");
    run(&mut init, "database script (again)");
}

/// The operator's service-user step for `entry` against the test cloud's Keystone, twice: the
/// second run converges on what the first created instead of failing or duplicating.
pub fn register_service_twice(
    entry: &controlplane_render::service_user::ServiceEntry,
    admin_password: &str,
    service_password: &str,
) {
    register_service_twice_at(KEYSTONE, entry, admin_password, service_password);
}

/// [`register_service_twice`] against the Keystone at `keystone` (its `/v3` URL).
pub fn register_service_twice_at(
    keystone: &str,
    entry: &controlplane_render::service_user::ServiceEntry,
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
    run(&mut su, "service-user script");
    run(&mut su, "service-user script (again)");
}

/// The harness's external-services directory (beside its env file).
pub fn external_services_dir() -> PathBuf {
    std::env::var("EXTERNAL_SERVICES_ENV")
        .ok()
        .and_then(|p| PathBuf::from(p).parent().map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/var/cache/openstack-operator/external-services"))
}

/// The harness's external-services environment file (`KEY=VALUE` lines), as a map.
pub fn external_services_env() -> std::collections::BTreeMap<String, String> {
    let path = external_services_dir().join("env");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}: run scripts/external-services up", path.display()));
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The `ceph` CLI against the harness's cluster (its ceph.conf), bounded in time; the output,
/// or the error with the command's stderr.
pub fn ceph(args: &[&str]) -> Result<String, String> {
    let conf = external_services_dir().join("etc/ceph/ceph.conf");
    let out = Command::new("timeout")
        .arg("30")
        .arg("ceph")
        .arg("--conf")
        .arg(&conf)
        .args(["--connect-timeout", "10"])
        .args(args)
        .output()
        .map_err(|e| format!("ceph {}: cannot start: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "ceph {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// `rabbitmqctl` against the harness's RabbitMQ node (its environment as
/// `scripts/external-services` sets it: node `extsvc@localhost`, epmd on :14369).
pub fn rabbitmqctl(args: &[&str]) -> Result<String, String> {
    let dir = external_services_dir();
    let out = Command::new("timeout")
        .arg("60")
        .arg("/usr/lib/rabbitmq/bin/rabbitmqctl")
        .args(["-q", "-n", "extsvc@localhost"])
        .args(args)
        .env("HOME", dir.join("data/rabbitmq"))
        .env("ERL_EPMD_ADDRESS", "127.0.0.1")
        .env("ERL_EPMD_PORT", "14369")
        .env(
            "RABBITMQ_CONF_ENV_FILE",
            dir.join("etc/rabbitmq/rabbitmq-env.conf"),
        )
        .output()
        .map_err(|e| format!("rabbitmqctl {}: cannot start: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "rabbitmqctl {} failed ({}): {}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A MariaDB server reached as its admin over TLS (the external services' one): SQL for the
/// proofs' set-up and clean-up, and the shared database script run against it.
#[derive(Clone, Debug)]
pub struct MariaDbAdmin {
    /// Host.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Admin user.
    pub user: String,
    /// Admin password.
    pub password: String,
    /// CA bundle of the server's certificate.
    pub ca_file: String,
}

impl MariaDbAdmin {
    /// The external services' MariaDB (`EXTSVC_DB`, its admin, the harness CA).
    pub fn external() -> Self {
        let env = external_services_env();
        let var = |k: &str| {
            env.get(k)
                .cloned()
                .unwrap_or_else(|| panic!("{k} missing from the external-services env file"))
        };
        let db = var("EXTSVC_DB");
        let (host, port) = db.rsplit_once(':').expect("EXTSVC_DB is host:port");
        MariaDbAdmin {
            host: host.into(),
            port: port.parse().expect("EXTSVC_DB port"),
            user: var("EXTSVC_DB_ADMIN_USER"),
            password: var("EXTSVC_DB_ADMIN_PASSWORD"),
            ca_file: var("EXTSVC_CA"),
        }
    }

    /// Runs SQL as the admin (over TLS) and returns the rows (tab-separated).
    pub fn sql(&self, sql: &str) -> String {
        run(
            Command::new("mariadb")
                .args([
                    "-h",
                    &self.host,
                    "-P",
                    &self.port.to_string(),
                    "-u",
                    &self.user,
                ])
                .arg(format!("--ssl-ca={}", self.ca_file))
                .args(["-N", "-B", "-e", sql])
                .env("MYSQL_PWD", &self.password),
            "mariadb (external services admin)",
        )
    }

    /// The operator's database Job script for `db` on this server, twice as a retried Job
    /// would run it, on a fresh database.
    pub fn init_database_twice(&self, db: &controlplane_render::database::Database) {
        self.init_database_runs(db, 2);
    }

    /// The operator's database Job script for `db` on this server, once, on a fresh database.
    pub fn init_database(&self, db: &controlplane_render::database::Database) {
        self.init_database_runs(db, 1);
    }

    fn init_database_runs(&self, db: &controlplane_render::database::Database, runs: usize) {
        use controlplane_render::database;
        self.sql(&format!("DROP DATABASE IF EXISTS {}", db.name));
        let mut init = Command::new(venv_bin("python3"));
        init.arg("-c").arg(database::DB_INIT_SCRIPT);
        for (k, v) in database::db_init_env(db) {
            init.env(k, v);
        }
        init.env("DB_ADMIN_USER", &self.user)
            .env("DB_ADMIN_PASSWORD", &self.password)
            .env("DB_PASSWORD", &db.password);
        for n in 0..runs {
            run(
                &mut init,
                &format!("database script for {} (run {})", db.name, n + 1),
            );
        }
    }
}

/// A proof's own database on the test cloud's MariaDB (127.0.0.1:13306, no TLS): user and
/// schema both `name`, a fresh random password.
pub fn proof_database(name: &str) -> controlplane_render::database::Database {
    controlplane_render::database::Database {
        host: "127.0.0.1".into(),
        port: 13306,
        name: name.into(),
        user: name.into(),
        password: controlplane_render::secrets::password(32),
        ca_file: None,
        verify: Default::default(),
        server_name: None,
    }
}

/// A proof's service user in the test cloud's Keystone (`service` project, the identity
/// endpoints' region `RegionOne`), a fresh random password.
pub fn proof_keystone_auth(user: &str) -> controlplane_render::authtoken::KeystoneAuth {
    controlplane_render::authtoken::KeystoneAuth {
        auth_url: KEYSTONE.into(),
        www_authenticate_uri: KEYSTONE.into(),
        region: "RegionOne".into(),
        username: user.into(),
        password: controlplane_render::secrets::password(32),
        project: "service".into(),
    }
}

/// One HTTP call of a proof: the status and the JSON body (`null` when empty). A transport
/// error fails the proof with `logs()` (the booted services' log tails).
pub async fn api_call(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<serde_json::Value>,
    logs: fn() -> String,
) -> (u16, serde_json::Value) {
    let mut r = client.request(method.clone(), url);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    if let Some(b) = body {
        r = r.json(&b);
    }
    let resp = match r.send().await {
        Ok(r) => r,
        Err(e) => panic!("{method} {url}: {e:?}; {}", logs()),
    };
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
    )
}

/// Polls `f` every 300 ms until it returns `Some`, for at most `secs`; then fails the proof
/// with `logs()`.
pub async fn until<T, F, Fut>(what: &str, secs: u64, logs: fn() -> String, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}; {}", logs());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The last `lines` lines of each of a proof's log files under `root`, headed by its name: what
/// a failing proof prints.
pub fn log_tails(root: &std::path::Path, files: &[&str], lines: usize) -> String {
    let mut out = String::new();
    for f in files {
        let text = std::fs::read_to_string(root.join(f)).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        out.push_str(&format!(
            "\n--- {f} (tail) ---\n{}",
            all[all.len().saturating_sub(lines)..].join("\n")
        ));
    }
    out
}

/// Starts `cmd` (program and arguments) in `dir` with its stderr (where the services log
/// without a log file) into `dir/<log>`, killed when the handle drops.
pub fn spawn_logged(dir: &std::path::Path, log: &str, what: &'static str, cmd: &[String]) -> Proc {
    let log_file = std::fs::File::create(dir.join(log))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join(log).display()));
    let child = Command::new(&cmd[0])
        .args(&cmd[1..])
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(log_file)
        .spawn()
        .unwrap_or_else(|e| panic!("start {what}: {e}"));
    Proc(child, what)
}

/// Polls `url` until it answers below 500 (an API that has loaded its application), for at
/// most `secs`; then fails with `logs()`.
pub async fn wait_http(url: &str, secs: u64, logs: impl Fn() -> String) {
    wait_http_ca(url, None, secs, logs).await;
}

/// [`wait_http`] verifying the server with `ca` (PEM) when given.
pub async fn wait_http_ca(url: &str, ca: Option<&str>, secs: u64, logs: impl Fn() -> String) {
    let client = https_client(ca);
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Ok(r) = client.get(url).send().await
            && r.status().as_u16() < 500
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{url} did not answer within {secs} s; {}",
            logs()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// A reqwest client trusting only `ca` (PEM) when given, else the default one.
pub fn https_client(ca: Option<&str>) -> reqwest::Client {
    match ca {
        Some(ca) => reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(ca.as_bytes()).expect("CA PEM")])
            .build()
            .expect("client"),
        None => reqwest::Client::new(),
    }
}
