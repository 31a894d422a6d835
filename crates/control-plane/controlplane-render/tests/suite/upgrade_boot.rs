//! Proof of the upgrade from 2025.2 to 2026.1: the real Keystone 28 and Placement 14 (their own
//! venv, `scripts/control-plane-deps`, pinned by scripts/test-cloud.d/constraints-2025.2.txt)
//! boot from the operator's rendering on the test cloud's real MariaDB; a project, tokens and a
//! resource provider are created; then the operator's pure upgrade machine
//! (`controlplane_api::upgrade::decide`) drives the real commands of each step with the 2026.1
//! code (Keystone 29.1, Placement 15.0 from the test cloud's venv): the backup hook
//! (`mariadb-dump`), the 2026.1 rendering, `keystone-manage db_sync --expand`/`--migrate` and
//! `placement-manage db sync` while the old services serve, the roll (Keystone first, then
//! Placement, restarted from the new venv), `db_sync --contract` and Placement's online data
//! migrations, and the verification. The operator is "killed" twice (its in-memory state and
//! the step outcomes dropped, the machine rebuilt from the persisted status): once with the
//! expand migration run but not recorded (it runs again: idempotent), once between the two
//! rolls (Keystone's roll is not redone: its process stays). A backup that fails first stops
//! the upgrade before any migration, and a retry continues it. Afterwards the data is there,
//! the token issued by 2025.2 still validates, and both APIs run the 2026.1 code.
//!
//! Needs: `scripts/test-cloud up` (MariaDB on 127.0.0.1:13306, the 2026.1 venv) and
//! `scripts/control-plane-deps` (memcached, the 2025.2 venv). Own databases
//! `cpupgrade_keystone` and `cpupgrade_placement`; its own Keystone, so the test cloud's is
//! untouched.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support;
use support::{
    Proc, api_call, free_port, init_database_twice, log_tails, proof_database, run,
    start_memcached, test_cloud_dir, until,
};

use controlplane_api::KeystoneSpec;
use controlplane_api::ServiceName;
use controlplane_api::common::{ExternalServiceRef, ServiceTemplate};
use controlplane_api::keystone::{DatabaseSpec, TokenSettings};
use controlplane_api::upgrade::{self, Action, Facts, Outcome, Step, StepKind, UpgradeStatus};
use controlplane_render::KeyRepository;
use controlplane_render::authtoken::KeystoneAuth;
use controlplane_render::database::Database;
use controlplane_render::secrets::password;
use controlplane_render::{keystone, placement, service_user};
use reqwest::Method;

const KS_DB: &str = "cpupgrade_keystone";
const PL_DB: &str = "cpupgrade_placement";
const OLD: &str = "2025.2";
const NEW: &str = "2026.1";

static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

fn logs() -> String {
    ROOT.get().map_or_else(String::new, |r| {
        log_tails(
            r,
            &[
                "keystone-uwsgi.log",
                "keystone.log",
                "placement-uwsgi.log",
                "placement.log",
            ],
            30,
        )
    })
}

/// A release's venv: 2025.2 from scripts/control-plane-deps, 2026.1 the test cloud's.
fn venv(release: &str) -> PathBuf {
    let dir = match release {
        OLD => test_cloud_dir().join("upgrade-2025.2-venv"),
        _ => test_cloud_dir().join("venv"),
    };
    assert!(
        dir.join("bin/uwsgi").exists(),
        "{} is missing: run scripts/control-plane-deps (2025.2) and scripts/test-cloud up (2026.1)",
        dir.display()
    );
    dir
}

/// Runs a command; its outcome as the upgrade machine sees it.
fn outcome(cmd: &mut Command, what: &str) -> Outcome {
    match cmd.output() {
        Ok(o) if o.status.success() => Outcome::Succeeded,
        Ok(o) => Outcome::Failed(format!(
            "{what}: {}: {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .rev()
                .take(3)
                .collect::<Vec<_>>()
                .join(" | ")
        )),
        Err(e) => Outcome::Failed(format!("{what}: cannot start: {e}")),
    }
}

fn version_of(release: &str, program: &str) -> String {
    run(
        Command::new(venv(release).join("bin").join(program)).arg("--version"),
        program,
    )
    .trim()
    .to_string()
}

/// The services and everything the steps act on: survives the operator's "kills".
struct World {
    root: PathBuf,
    ks_port: u16,
    pl_port: u16,
    mc_port: u16,
    ks_db: Database,
    pl_db: Database,
    spec: KeystoneSpec,
    auth: KeystoneAuth,
    keystone: Option<(Proc, &'static str)>,
    placement: Option<(Proc, &'static str)>,
    /// What the backup hook dumps (a wrong name makes it fail).
    backup_databases: Vec<String>,
    /// Every step executed, in order (across kills).
    executed: Vec<String>,
}

impl World {
    fn ks_base(&self) -> String {
        format!("http://127.0.0.1:{}/v3", self.ks_port)
    }

    fn pl_base(&self) -> String {
        format!("http://127.0.0.1:{}", self.pl_port)
    }

    fn etc(&self, svc: &str, release: &str) -> PathBuf {
        self.root.join(format!("etc-{svc}-{release}"))
    }

    /// Renders a service's configuration for `release` (its python home is that release's
    /// venv) into its own directory; the files by name.
    fn render(&self, svc: ServiceName, release: &str) -> BTreeMap<String, String> {
        let python_home = Some(venv(release).display().to_string());
        let dir = self.etc(svc.as_str(), release);
        let files = match svc {
            ServiceName::Keystone => {
                let mut spec = self.spec.clone();
                spec.release = release.into();
                let inputs = keystone::KeystoneInputs {
                    spec: &spec,
                    database: self.ks_db.clone(),
                    cache: controlplane_render::cache::Cache::plain(vec![format!(
                        "127.0.0.1:{}",
                        self.mc_port
                    )]),
                    paths: keystone::Paths {
                        config_dir: dir.display().to_string(),
                        fernet_keys: self.root.join("fernet-keys").display().to_string(),
                        credential_keys: self.root.join("credential-keys").display().to_string(),
                        log_file: Some(self.root.join("keystone.log").display().to_string()),
                        python_home,
                    },
                    listen: format!("127.0.0.1:{}", self.ks_port),
                    workers: 1,
                };
                BTreeMap::from([
                    ("keystone.conf".into(), keystone::keystone_conf(&inputs)),
                    ("uwsgi.ini".into(), keystone::uwsgi_ini(&inputs)),
                ])
            }
            ServiceName::Placement => {
                let template = ServiceTemplate::default();
                placement::config_files(&placement::PlacementInputs {
                    template: &template,
                    database: self.pl_db.clone(),
                    keystone: self.auth.clone(),
                    cache: controlplane_render::cache::Cache::plain(vec![format!(
                        "127.0.0.1:{}",
                        self.mc_port
                    )]),
                    paths: placement::Paths {
                        config_dir: dir.display().to_string(),
                        log_file: Some(self.root.join("placement.log").display().to_string()),
                        python_home,
                    },
                    listen: format!("127.0.0.1:{}", self.pl_port),
                    workers: 1,
                })
            }
            s => panic!("{s:?} is not part of this proof"),
        };
        std::fs::create_dir_all(&dir).expect("etc dir");
        for (name, text) in &files {
            std::fs::write(dir.join(name), text).expect("config file");
        }
        files
    }

    fn conf(&self, svc: ServiceName, release: &str) -> PathBuf {
        self.etc(svc.as_str(), release)
            .join(format!("{}.conf", svc.as_str()))
    }

    /// A manage command of `release` with its rendered configuration.
    fn manage(&self, svc: ServiceName, release: &str, program: &str, args: &[&str]) -> Command {
        let mut c = Command::new(venv(release).join("bin").join(program));
        c.arg("--config-file")
            .arg(self.conf(svc, release))
            .args(args);
        c
    }

    /// Starts a service's uwsgi from `release`'s venv and rendering (stopping what runs).
    async fn start(&mut self, svc: ServiceName, release: &'static str) {
        // The old process stops first: both listen on the service's one port.
        match svc {
            ServiceName::Keystone => drop(self.keystone.take()),
            _ => drop(self.placement.take()),
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.root.join(format!("{}-uwsgi.log", svc.as_str())))
            .expect("uwsgi log");
        let child = Command::new(venv(release).join("bin/uwsgi"))
            .arg("--ini")
            .arg(self.etc(svc.as_str(), release).join("uwsgi.ini"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start uwsgi");
        let running = Some((Proc(child, "uwsgi"), release));
        let url = match svc {
            ServiceName::Keystone => {
                self.keystone = running;
                self.ks_base()
            }
            _ => {
                self.placement = running;
                self.pl_base()
            }
        };
        until(
            &format!("{svc:?} {release} answers on {url}"),
            120,
            logs,
            || async {
                let r = reqwest::get(&url).await.ok()?;
                r.status().is_success().then_some(())
            },
        )
        .await;
    }

    fn pid(&self, svc: ServiceName) -> Option<u32> {
        match svc {
            ServiceName::Keystone => self.keystone.as_ref(),
            _ => self.placement.as_ref(),
        }
        .map(|(p, _)| p.0.id())
    }

    /// What the machine is told: external services and services observed for real.
    async fn facts(&self, outcomes: BTreeMap<String, Outcome>, retry: Option<String>) -> Facts {
        let mut external_not_ready = Vec::new();
        if Command::new("mariadb")
            .args([
                "-h",
                "127.0.0.1",
                "-P",
                "13306",
                "-u",
                "root",
                "-e",
                "SELECT 1",
            ])
            .output()
            .map_or(true, |o| !o.status.success())
        {
            external_not_ready.push("database: MariaDB does not answer".into());
        }
        if std::net::TcpStream::connect(("127.0.0.1", self.mc_port)).is_err() {
            external_not_ready.push("cache: memcached does not answer".into());
        }
        let mut services_not_ready = Vec::new();
        for (name, url) in [("Keystone", self.ks_base()), ("Placement", self.pl_base())] {
            if !reqwest::get(&url)
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                services_not_ready.push(format!("{name}: {url} does not answer"));
            }
        }
        Facts {
            desired: NEW.into(),
            services: vec![ServiceName::Keystone, ServiceName::Placement],
            external_not_ready,
            services_not_ready,
            backup_configured: true,
            outcomes,
            retry,
            now: format!("{:?}", std::time::SystemTime::now()),
        }
    }

    /// Runs one step for real.
    async fn execute(&mut self, step: &Step) -> Outcome {
        self.executed.push(step.name());
        let svc = step.service;
        match (step.kind, svc) {
            (StepKind::Backup, _) => {
                let out = self.root.join("backup.sql");
                let file = std::fs::File::create(&out).expect("backup file");
                outcome(
                    Command::new("mariadb-dump")
                        .args([
                            "-h",
                            "127.0.0.1",
                            "-P",
                            "13306",
                            "-u",
                            "root",
                            "--databases",
                        ])
                        .args(&self.backup_databases)
                        .stdout(file),
                    "backup hook (mariadb-dump)",
                )
            }
            (StepKind::RenderConfig, Some(s)) => {
                let old = self.render(s, OLD);
                let new = self.render(s, NEW);
                // The rendering differs only in the venv and directory it points at: 2025.2 and 2026.1 take
                // the same options for what the operator renders.
                let strip = |m: &BTreeMap<String, String>| -> Vec<String> {
                    m.values()
                        .flat_map(|t| t.lines())
                        .filter(|l| !l.contains("venv"))
                        // The test's own directories are named after the release.
                        .map(|l| l.replace(OLD, "RELEASE").replace(NEW, "RELEASE"))
                        .collect()
                };
                assert_eq!(strip(&old), strip(&new), "{s:?} renders differently");
                Outcome::Succeeded
            }
            (StepKind::Roll, Some(s)) => {
                self.start(s, NEW).await;
                Outcome::Succeeded
            }
            (StepKind::VerifyApi, Some(s)) => self.verify(s).await,
            (_, Some(s)) => {
                let (program, args) = step.manage_command().expect("a migration command");
                let o = outcome(&mut self.manage(s, NEW, program, args), program);
                // Expand and migrate run while the old release serves: it still does.
                if step.phase == upgrade::Phase::Migrate {
                    self.old_still_serves(s).await;
                }
                o
            }
            (k, None) => panic!("{k:?} has no executor here"),
        }
    }

    async fn old_still_serves(&self, s: ServiceName) {
        let running = match s {
            ServiceName::Keystone => self.keystone.as_ref(),
            _ => self.placement.as_ref(),
        };
        assert_eq!(running.map(|r| r.1), Some(OLD), "{s:?} runs 2025.2 here");
        let (tok, _) = admin_token(&self.ks_base(), &self.spec_admin_password()).await;
        if s == ServiceName::Placement {
            let (st, body) = api_call(
                &reqwest::Client::new(),
                Method::GET,
                &format!("{}/resource_providers", self.pl_base()),
                &[
                    ("X-Auth-Token", &tok),
                    ("OpenStack-API-Version", "placement 1.14"),
                ],
                None,
                logs,
            )
            .await;
            assert_eq!(st, 200, "old Placement after db sync: {body}");
        }
    }

    fn spec_admin_password(&self) -> String {
        std::fs::read_to_string(self.root.join("admin-password")).expect("admin password")
    }

    async fn verify(&self, s: ServiceName) -> Outcome {
        let (program, want) = match s {
            ServiceName::Keystone => ("keystone-manage", "29."),
            _ => ("placement-manage", "15."),
        };
        let running = match s {
            ServiceName::Keystone => self.keystone.as_ref(),
            _ => self.placement.as_ref(),
        };
        if running.map(|r| r.1) != Some(NEW) {
            return Outcome::Failed(format!("{s:?} does not run {NEW}"));
        }
        // The serving process is the new venv's uwsgi.
        let exe =
            running.and_then(|r| std::fs::read_link(format!("/proc/{}/exe", r.0.0.id())).ok());
        let venv_dir = venv(NEW).canonicalize().unwrap_or_else(|_| venv(NEW));
        if !exe
            .as_ref()
            .is_some_and(|e| e.starts_with(&venv_dir) || e.starts_with(venv(NEW)))
        {
            return Outcome::Failed(format!("{s:?} runs {exe:?}, not {}", venv_dir.display()));
        }
        let version = version_of(NEW, program);
        if !version.starts_with(want) {
            return Outcome::Failed(format!("{program} --version is {version}"));
        }
        let url = match s {
            ServiceName::Keystone => self.ks_base(),
            _ => self.pl_base(),
        };
        match reqwest::get(&url).await {
            Ok(r) if r.status().is_success() => Outcome::Succeeded,
            Ok(r) => Outcome::Failed(format!("{url} answered {}", r.status())),
            Err(e) => Outcome::Failed(format!("{url}: {e}")),
        }
    }
}

async fn admin_token(base: &str, pw: &str) -> (String, serde_json::Value) {
    let body = serde_json::json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": "admin", "domain": {"id": "default"}, "password": pw}}},
        "scope": {"project": {"name": "admin", "domain": {"id": "default"}}}}});
    let resp = reqwest::Client::new()
        .post(format!("{base}/auth/tokens"))
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("token request: {e}; {}", logs()));
    assert_eq!(resp.status(), 201, "token request; {}", logs());
    let tok = resp
        .headers()
        .get("x-subject-token")
        .and_then(|v| v.to_str().ok())
        .expect("X-Subject-Token")
        .to_string();
    (tok, resp.json().await.expect("token JSON"))
}

/// Where the operator process "dies".
#[derive(Clone, Copy, PartialEq)]
enum Kill<'a> {
    /// After running this step, before recording its outcome.
    AfterRunning(&'a str),
    /// Before running this step.
    BeforeRunning(&'a str),
    /// Lives until the machine stops.
    Never,
}

/// The persisted status (what `status.currentRelease` and `status.upgrade` hold).
fn load(root: &Path) -> (Option<String>, Option<UpgradeStatus>) {
    let text = std::fs::read_to_string(root.join("status.json")).expect("status.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("status JSON");
    (
        v["currentRelease"].as_str().map(str::to_string),
        serde_json::from_value(v["upgrade"].clone()).ok(),
    )
}

fn save(root: &Path, current: Option<&str>, u: Option<&UpgradeStatus>) {
    let v = serde_json::json!({"currentRelease": current, "upgrade": u});
    std::fs::write(root.join("status.json"), v.to_string()).expect("status.json");
}

/// One life of the operator: everything in memory starts empty and is rebuilt from the
/// persisted status; runs until the upgrade completes (`Action::Completed`), stops elsewhere
/// (the action), or is killed (`None`).
async fn operator(w: &mut World, kill: Kill<'_>, retry: Option<&str>) -> Option<Action> {
    let mut outcomes = BTreeMap::new();
    loop {
        let (current, u) = load(&w.root);
        let facts = w.facts(outcomes.clone(), retry.map(str::to_string)).await;
        let d = upgrade::decide(current.as_deref(), u.as_ref(), &facts);
        save(&w.root, d.current_release.as_deref(), d.upgrade.as_ref());
        let step = match d.action {
            Action::Run(step) => step,
            a => return Some(a),
        };
        if kill == Kill::BeforeRunning(&step.name()) {
            return None;
        }
        let o = w.execute(&step).await;
        if kill == Kill::AfterRunning(&step.name()) {
            return None;
        }
        outcomes.insert(step.name(), o);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keystone_and_placement_upgrade_from_2025_2_to_2026_1_with_kills() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().to_path_buf();
    let _ = ROOT.set(root.clone());
    let (ks_port, pl_port, mc_port) = (free_port(), free_port(), free_port());
    let _memcached = start_memcached(mc_port);
    let _cleanup = DropDbs;
    assert!(
        version_of(OLD, "keystone-manage").starts_with("28."),
        "the 2025.2 venv has Keystone 28"
    );

    let spec = KeystoneSpec {
        release: OLD.into(),
        template: ServiceTemplate::default(),
        database: DatabaseSpec {
            service: ExternalServiceRef { name: "db".into() },
            database_name: KS_DB.into(),
            username: KS_DB.into(),
        },
        cache: Some(ExternalServiceRef { name: "mc".into() }),
        region: "RegionOne".into(),
        public_endpoint: None,
        admin_password_secret: None,
        tokens: TokenSettings::default(),
        credential_keys: Default::default(),
    };
    let mut spec = spec;
    spec.template.config_overrides.insert(
        "identity".into(),
        [("password_hash_rounds".to_string(), "4".to_string())].into(),
    );
    let ks_base = format!("http://127.0.0.1:{ks_port}/v3");
    let auth = KeystoneAuth {
        auth_url: ks_base.clone(),
        www_authenticate_uri: ks_base.clone(),
        region: "RegionOne".into(),
        username: "cpupgrade_placement".into(),
        password: password(32),
        project: "service".into(),
    };
    let mut w = World {
        root: root.clone(),
        ks_port,
        pl_port,
        mc_port,
        ks_db: proof_database(KS_DB),
        pl_db: proof_database(PL_DB),
        spec,
        auth,
        keystone: None,
        placement: None,
        backup_databases: vec![KS_DB.into(), "cpupgrade_missing".into()],
        executed: Vec::new(),
    };

    // ---- 2025.2 deployed from the operator's rendering
    init_database_twice(&w.ks_db);
    init_database_twice(&w.pl_db);
    for (dir, repo) in [
        ("fernet-keys", KeyRepository::generate()),
        ("credential-keys", KeyRepository::generate()),
    ] {
        std::fs::create_dir_all(root.join(dir)).expect("key dir");
        for (name, key) in repo.files() {
            std::fs::write(root.join(dir).join(name), key).expect("key");
        }
    }
    w.render(ServiceName::Keystone, OLD);
    w.render(ServiceName::Placement, OLD);
    run(
        &mut w.manage(ServiceName::Keystone, OLD, "keystone-manage", &["db_sync"]),
        "keystone-manage db_sync (2025.2)",
    );
    let admin_pw = password(32);
    std::fs::write(root.join("admin-password"), &admin_pw).expect("admin password");
    run(
        w.manage(ServiceName::Keystone, OLD, "keystone-manage", &[])
            .args(keystone::bootstrap_args(&w.spec, &ks_base, &ks_base))
            .env("OS_BOOTSTRAP_PASSWORD", &admin_pw),
        "keystone-manage bootstrap (2025.2)",
    );
    w.start(ServiceName::Keystone, OLD).await;
    let pl_base = w.pl_base();
    let entry = placement::service_entry(&w.auth, "RegionOne", &pl_base, &pl_base);
    let mut su = Command::new(venv(OLD).join("bin/python3"));
    su.arg("-c").arg(service_user::SCRIPT);
    for (k, v) in service_user::env(&entry, &ks_base) {
        su.env(k, v);
    }
    su.env("OS_PASSWORD", &admin_pw)
        .env("SERVICE_PASSWORD", &w.auth.password);
    run(&mut su, "service-user script");
    let sync = placement::db_sync_command(
        &venv(OLD).join("bin/placement-manage").display().to_string(),
        &w.etc("placement", OLD).display().to_string(),
    );
    run(
        Command::new(&sync[0]).args(&sync[1..]),
        "placement-manage db sync (2025.2)",
    );
    w.start(ServiceName::Placement, OLD).await;

    // ---- data on 2025.2: a project, a token, a resource provider
    let client = reqwest::Client::new();
    let (old_token, _) = admin_token(&ks_base, &admin_pw).await;
    let project = format!("cpupgrade-{}", password(6).to_lowercase());
    let (st, body) = api_call(
        &client,
        Method::POST,
        &format!("{ks_base}/projects"),
        &[("X-Auth-Token", &old_token)],
        Some(serde_json::json!({"project": {"name": project, "domain_id": "default"}})),
        logs,
    )
    .await;
    assert_eq!(st, 201, "create project: {body}");
    let rp = format!("cpupgrade-rp-{}", password(6).to_lowercase());
    let (st, body) = api_call(
        &client,
        Method::POST,
        &format!("{pl_base}/resource_providers"),
        &[
            ("X-Auth-Token", &old_token),
            ("OpenStack-API-Version", "placement 1.20"),
        ],
        Some(serde_json::json!({"name": rp})),
        logs,
    )
    .await;
    assert_eq!(st, 200, "create resource provider: {body}; {}", logs());
    let rp_uuid = body["uuid"].as_str().expect("provider uuid").to_string();
    // The cluster was deployed at 2025.2: the machine adopts it.
    save(&root, None, None);
    let mut f = w.facts(BTreeMap::new(), None).await;
    f.desired = OLD.into();
    let d = upgrade::decide(None, None, &f);
    assert_eq!(d.action, Action::Steady);
    save(&root, d.current_release.as_deref(), None);
    // A downgrade or skip would be refused before anything runs; 2026.1 is allowed.
    assert!(upgrade::check_transition(OLD, "2027.1").is_err());

    // ---- the upgrade. Life 1: the backup hook fails (a database that does not exist):
    // Degraded at the backup, nothing migrated.
    let action = operator(&mut w, Kill::Never, None).await;
    match &action {
        Some(Action::Degraded(m)) => {
            assert!(
                m.contains("Preflight/backup") && m.contains("mariadb-dump"),
                "{m}"
            )
        }
        a => panic!("a failing backup stops the upgrade: {a:?}"),
    }
    assert_eq!(w.executed, ["Preflight/backup"]);
    let (cur, u) = load(&root);
    assert_eq!(cur.as_deref(), Some(OLD));
    let u = u.expect("upgrade status");
    assert_eq!(u.failed_step.as_deref(), Some("Preflight/backup"));
    assert!(
        u.last_error
            .as_deref()
            .is_some_and(|e| e.contains("mariadb-dump"))
    );
    // Still Degraded on the next pass, without a retry.
    assert!(matches!(
        operator(&mut w, Kill::Never, None).await,
        Some(Action::Degraded(_))
    ));
    assert_eq!(w.executed.len(), 1, "nothing ran after the failed step");

    // Life 2: fixed, retried; killed after the expand migration ran but before its outcome
    // was recorded.
    w.backup_databases = vec![KS_DB.into(), PL_DB.into()];
    let kill1 = "Migrate/keystone/expand";
    assert_eq!(
        operator(&mut w, Kill::AfterRunning(kill1), Some("1")).await,
        None
    );
    let dump = std::fs::read_to_string(root.join("backup.sql")).expect("backup.sql");
    assert!(
        dump.contains("CREATE TABLE `project`")
            && dump.contains("CREATE TABLE `resource_providers`")
    );
    let (_, u) = load(&root);
    let u = u.expect("upgrade status");
    assert_eq!(u.phase, Some(upgrade::Phase::Migrate));
    assert_eq!(u.step.as_deref(), Some(kill1));
    assert!(!u.completed_steps.iter().any(|s| s == kill1));

    // Life 3: resumes, runs the expand again (idempotent), goes on; killed between the
    // rolls of Keystone and Placement.
    let kill2 = "RollControlPlane/placement/roll";
    assert_eq!(
        operator(&mut w, Kill::BeforeRunning(kill2), Some("1")).await,
        None
    );
    let (_, u) = load(&root);
    let u = u.expect("upgrade status");
    assert_eq!(u.phase, Some(upgrade::Phase::RollControlPlane));
    assert_eq!(u.release_of(ServiceName::Keystone), NEW);
    assert_eq!(u.release_of(ServiceName::Placement), OLD);
    assert_eq!(w.placement.as_ref().map(|p| p.1), Some(OLD));
    let keystone_pid = w.pid(ServiceName::Keystone);

    // The 2025.2 token validates on the 2026.1 Keystone (same key repository) while the old
    // Placement still serves with it.
    let (fresh, _) = admin_token(&ks_base, &admin_pw).await;
    let (st, _) = api_call(
        &client,
        Method::GET,
        &format!("{ks_base}/auth/tokens"),
        &[("X-Auth-Token", &fresh), ("X-Subject-Token", &old_token)],
        None,
        logs,
    )
    .await;
    assert_eq!(st, 200, "the 2025.2 token on the 2026.1 Keystone");

    // Life 4: resumes at Placement's roll and completes.
    assert_eq!(
        operator(&mut w, Kill::Never, Some("1")).await,
        Some(Action::Completed)
    );
    assert_eq!(
        w.pid(ServiceName::Keystone),
        keystone_pid,
        "Keystone's roll did not run again"
    );
    let (cur, u) = load(&root);
    assert_eq!(cur.as_deref(), Some(NEW));
    let u = u.expect("upgrade status");
    assert!(u.complete() && u.completed_at.is_some());

    // Every step ran once, in plan order, except the backup that failed once and the expand
    // the first kill interrupted.
    let plan: Vec<String> = upgrade::plan(&[ServiceName::Keystone, ServiceName::Placement], true)
        .iter()
        .filter(|s| !s.kind.checked_from_facts())
        .map(Step::name)
        .collect();
    let mut expected = vec!["Preflight/backup".to_string()];
    for s in &plan {
        expected.push(s.clone());
        if s == kill1 {
            expected.push(s.clone());
        }
    }
    assert_eq!(w.executed, expected);
    assert_eq!(
        u.completed_steps.len(),
        upgrade::plan(&[ServiceName::Keystone, ServiceName::Placement], true).len()
    );

    // ---- after: the new release serves, the schema is at 2026.1, the data survived
    assert_eq!(w.keystone.as_ref().map(|p| p.1), Some(NEW));
    assert_eq!(w.placement.as_ref().map(|p| p.1), Some(NEW));
    run(
        &mut w.manage(
            ServiceName::Keystone,
            NEW,
            "keystone-manage",
            &["db_sync", "--check"],
        ),
        "keystone-manage db_sync --check (2026.1: nothing left to migrate)",
    );
    let (new_token, _) = admin_token(&ks_base, &admin_pw).await;
    let (st, body) = api_call(
        &client,
        Method::GET,
        &format!("{ks_base}/projects?name={project}"),
        &[("X-Auth-Token", &new_token)],
        None,
        logs,
    )
    .await;
    assert_eq!(st, 200);
    assert_eq!(body["projects"][0]["name"], project.as_str(), "{body}");
    let (st, _) = api_call(
        &client,
        Method::GET,
        &format!("{ks_base}/auth/tokens"),
        &[
            ("X-Auth-Token", &new_token),
            ("X-Subject-Token", &old_token),
        ],
        None,
        logs,
    )
    .await;
    assert_eq!(st, 200, "the token issued by 2025.2 still validates");
    let (st, body) = api_call(
        &client,
        Method::GET,
        &format!("{pl_base}/resource_providers/{rp_uuid}"),
        &[
            ("X-Auth-Token", &new_token),
            ("OpenStack-API-Version", "placement 1.14"),
        ],
        None,
        logs,
    )
    .await;
    assert_eq!(st, 200, "resource provider after the upgrade: {body}");
    assert_eq!(body["name"], rp.as_str());
    let (st, body) = api_call(&client, Method::GET, &pl_base, &[], None, logs).await;
    assert_eq!(st, 200);
    eprintln!(
        "upgraded: {} / {}; Placement versions {}",
        version_of(NEW, "keystone-manage"),
        version_of(NEW, "placement-manage"),
        body["versions"][0]
    );
    drop(w);
}

/// Drops the proof's databases and users at the end.
struct DropDbs;

impl Drop for DropDbs {
    fn drop(&mut self) {
        for db in [KS_DB, PL_DB] {
            let _ = Command::new("mariadb")
                .args(["-h", "127.0.0.1", "-P", "13306", "-u", "root", "-e"])
                .arg(format!(
                    "DROP DATABASE IF EXISTS {db}; DROP USER IF EXISTS '{db}'@'%'"
                ))
                .output();
        }
    }
}
