//! Proof of the upgrade steps of Glance and Cinder from 2025.2 to 2026.1, as the operator's
//! upgrade Jobs run them: the command lines of the plan's steps (`glance-manage db expand`,
//! `db migrate`, `db contract`; `cinder-manage db sync`, `db online_data_migrations`), each with
//! `--config-file` on the operator's rendering, against the test cloud's real MariaDB.
//!
//! The databases start with the 2025.2 schema, made by the 2025.2 code (Glance 31, Cinder 27,
//! `scripts/control-plane-deps` installs them in a venv of their own) running the children's
//! own first-deployment sync commands; data is created by the 2025.2 code (an image with a
//! property; a volume type). Then the 2026.1 code (Glance 32, Cinder 28, the test cloud's venv)
//! runs the steps in the plan's order. The 2025.2 code still reads the image after expand and
//! migrate (the old release serves until the roll); after contract the real Glance 2026.1 API,
//! booted from the rendering with a token from the real Keystone, serves the image with its
//! property, and the 2026.1 code reads the volume type. Both schemas end at the 2026.1 code's
//! head. (Neither project adds a migration between these two releases: the steps must then
//! find nothing to do and succeed, which is what an upgrade of a cloud meets.)
//!
//! Needs: `scripts/test-cloud up` (MariaDB on 127.0.0.1:13306, Keystone, the 2026.1 venv) and
//! `scripts/control-plane-deps` (the 2025.2 venv). Own databases `cpupgrade_glance` and
//! `cpupgrade_cinder`, own service user and region.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support;
use support::{
    KeystoneCleanup, Proc, admin_password, init_database_twice, log_tails, mariadb_admin,
    proof_database, proof_keystone_auth, register_service_twice, run, service_token,
    test_cloud_dir, venv_bin,
};

use controlplane_api::ServiceName;
use controlplane_api::common::ServiceTemplate;
use controlplane_api::upgrade::{self, Phase, Step};
use controlplane_render::cinder::{self, Backend, BackendKind, CinderInputs, Messaging, Nfs};
use controlplane_render::glance::{self, GlanceInputs};

const REGION: &str = "CpUpgradeGlance";
const USER: &str = "cpupgrade_glance";
const GLANCE_DB: &str = "cpupgrade_glance";
const CINDER_DB: &str = "cpupgrade_cinder";
const IMAGE_ID: &str = "6f1e2c3a-9b8d-4e7f-a1b2-c3d4e5f60718";

static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

fn logs() -> String {
    ROOT.get()
        .map(|r| log_tails(r, &["uwsgi.log", "glance.log"], 40))
        .unwrap_or_default()
}

/// The 2025.2 venv of Glance and Cinder (scripts/control-plane-deps).
fn old_venv() -> PathBuf {
    let v = test_cloud_dir().join("upgrade-2025.2-gc-venv");
    assert!(
        v.join("bin/glance-manage").exists() && v.join("bin/cinder-manage").exists(),
        "{} is missing: run scripts/control-plane-deps",
        v.display()
    );
    v
}

/// Writes the files into `dir`.
fn write(dir: &Path, files: impl IntoIterator<Item = (String, String)>) {
    std::fs::create_dir_all(dir).expect("etc dir");
    for (name, text) in files {
        std::fs::write(dir.join(name), text).expect("config file");
    }
}

/// The command line of an upgrade step as the operator's Job runs it, its pod's configuration
/// directory replaced by `dir` and the program taken from `bin`.
fn job_command(step: &Step, pod_dir: &str, file: &str, dir: &Path, bin: &Path) -> Command {
    let (program, args) = step.manage_command().expect("a migration step");
    let pod_line = format!(
        "{program} --config-file {pod_dir}/{file} {}",
        args.join(" ")
    );
    let mut c = Command::new(bin.join(program));
    c.arg("--config-file").arg(dir.join(file)).args(args);
    eprintln!("{}: {pod_line}", step.name());
    c
}

/// Runs Python in a venv with the arguments.
fn python(venv: &Path, script: &str, args: &[&str], what: &str) -> String {
    run(
        Command::new(venv.join("bin/python3"))
            .arg("-c")
            .arg(script)
            .args(args),
        what,
    )
}

/// Glance's database API: creates (`create`) or reads the proof's image.
const GLANCE_DB_SCRIPT: &str = r#"import sys, json
from glance.common import config
from glance import context
from glance.db.sqlalchemy import api as db_api
config.parse_args(['--config-file', sys.argv[1]])
ctx = context.get_admin_context()
if sys.argv[2] == 'create':
    db_api.image_create(ctx, {'id': sys.argv[3], 'name': 'cpupgrade-kept', 'status': 'queued',
        'visibility': 'public', 'disk_format': 'raw', 'container_format': 'bare',
        'owner': 'cpupgrade', 'min_disk': 0, 'min_ram': 0, 'protected': False,
        'os_hidden': False, 'properties': {'proof': 'created-by-2025.2'}})
img = db_api.image_get(ctx, sys.argv[3])
print(json.dumps({'name': img['name'], 'properties': {p['name']: p['value'] for p in img['properties']}}))
"#;

/// Cinder's database API: creates (`create`) or reads the proof's volume type.
const CINDER_DB_SCRIPT: &str = r#"import sys
from oslo_config import cfg
from cinder import objects
objects.register_all()
from cinder.common import config  # noqa: every option registered before parsing
from cinder import context
from cinder.db import api as db_api
cfg.CONF(['--config-file', sys.argv[1]], project='cinder')
ctx = context.get_admin_context()
if sys.argv[2] == 'create':
    db_api.volume_type_create(ctx, {'name': 'cpupgrade-kept', 'description': 'created by 2025.2'})
print(db_api.volume_type_get_by_name(ctx, 'cpupgrade-kept')['description'])
"#;

fn head(venv: &Path, program: &str, conf: &Path) -> String {
    run(
        Command::new(venv.join("bin").join(program))
            .arg("--config-file")
            .arg(conf)
            .args(["db", "version"]),
        program,
    )
    .lines()
    .last()
    .unwrap_or_default()
    .trim()
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn glance_and_cinder_migrate_from_2025_2_to_2026_1_with_the_upgrade_jobs_commands() {
    let started = Instant::now();
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let _ = ROOT.set(root.to_path_buf());
    let old = old_venv();
    let new = test_cloud_dir().join("venv");
    let admin_pw = admin_password();
    let _cleanup = KeystoneCleanup {
        admin_password: admin_pw.clone(),
        region: REGION,
        user: USER,
        database: GLANCE_DB,
    };
    let template = ServiceTemplate::default();
    let port = support::free_port();
    let base = format!("http://127.0.0.1:{port}");

    // ---- Glance: the rendering of each release (only the venv differs). ----
    let gdb = proof_database(GLANCE_DB);
    let keystone = proof_keystone_auth(USER);
    let g_inputs = |release_venv: &Path, dir: &Path| GlanceInputs {
        template: &template,
        database: gdb.clone(),
        keystone: keystone.clone(),
        cache: controlplane_render::cache::Cache::plain(vec![]),
        backends: vec![glance::Backend::File {
            dir: root.join("images").display().to_string(),
        }],
        web_download: None,
        public_url: Some(base.clone()),
        paths: glance::Paths {
            config_dir: dir.display().to_string(),
            state_dir: root.join("state").display().to_string(),
            log_file: Some(root.join("glance.log").display().to_string()),
            python_home: Some(release_venv.display().to_string()),
        },
        listen: format!("127.0.0.1:{port}"),
        workers: 1,
    };
    let (g_old_dir, g_new_dir) = (root.join("glance-2025.2"), root.join("glance-2026.1"));
    write(
        &g_old_dir,
        glance::config_files(&g_inputs(&old, &g_old_dir)).expect("renders"),
    );
    write(
        &g_new_dir,
        glance::config_files(&g_inputs(&new, &g_new_dir)).expect("renders"),
    );
    init_database_twice(&gdb);
    // The 2025.2 child's own first sync, then an image made by the 2025.2 code.
    let sync = glance::db_sync_command(
        &old.join("bin/glance-manage").display().to_string(),
        &g_old_dir.display().to_string(),
    );
    run(
        Command::new(&sync[0]).args(&sync[1..]),
        "glance-manage 2025.2 db_sync",
    );
    let g_old_conf = g_old_dir.join("glance-api.conf");
    let g_new_conf = g_new_dir.join("glance-api.conf");
    let old_head = head(&old, "glance-manage", &g_old_conf);
    let made = python(
        &old,
        GLANCE_DB_SCRIPT,
        &[&g_old_conf.display().to_string(), "create", IMAGE_ID],
        "2025.2 creates an image",
    );
    assert!(made.contains("created-by-2025.2"), "{made}");

    // ---- Cinder: the 2026.1 rendering (the one the Jobs mount), a 2025.2 schema and row. ----
    let cdb = proof_database(CINDER_DB);
    let c_inputs = |release_venv: &Path, dir: &Path| CinderInputs {
        template: &template,
        database: cdb.clone(),
        messaging: Messaging {
            hosts: vec!["127.0.0.1:5672".into()],
            user: "cpupgrade".into(),
            password: "unused".into(),
            vhost: "/".into(),
            tls: None,
        },
        keystone: proof_keystone_auth("cpupgrade_cinder"),
        cache: controlplane_render::cache::Cache::plain(vec![]),
        backends: vec![Backend {
            name: "nfs_upgrade".into(),
            kind: BackendKind::Nfs(Nfs {
                shares: vec!["127.0.0.1:/export/cinder".into()],
                mount_options: None,
            }),
        }],
        volume_host: "cpupgrade".into(),
        paths: cinder::Paths {
            config_dir: dir.display().to_string(),
            api_paste_config: release_venv
                .join("etc/cinder/api-paste.ini")
                .display()
                .to_string(),
            resource_filters: release_venv
                .join("etc/cinder/resource_filters.json")
                .display()
                .to_string(),
            state_path: root.join("cinder-state").display().to_string(),
            log_file: None,
            python_home: Some(release_venv.display().to_string()),
        },
        listen: "127.0.0.1:0".into(),
        workers: 1,
    };
    let (c_old_dir, c_new_dir) = (root.join("cinder-2025.2"), root.join("cinder-2026.1"));
    write(
        &c_old_dir,
        cinder::config_files(&c_inputs(&old, &c_old_dir)),
    );
    write(
        &c_new_dir,
        cinder::config_files(&c_inputs(&new, &c_new_dir)),
    );
    init_database_twice(&cdb);
    let c_old_conf = cinder::Paths {
        config_dir: c_old_dir.display().to_string(),
        ..cinder::Paths::pod()
    };
    let sync = cinder::db_sync_command(
        &old.join("bin/cinder-manage").display().to_string(),
        &c_old_conf,
    );
    run(
        Command::new(&sync[0]).args(&sync[1..]),
        "cinder-manage 2025.2 db sync",
    );
    let c_old_conf = c_old_dir.join("cinder.conf");
    let c_new_conf = c_new_dir.join("cinder.conf");
    let made = python(
        &old,
        CINDER_DB_SCRIPT,
        &[&c_old_conf.display().to_string(), "create"],
        "2025.2 creates a volume type",
    );
    assert_eq!(made.trim(), "created by 2025.2");

    // ---- The plan's migration steps for the two services, in order, with the 2026.1 code. ----
    let services = [ServiceName::Glance, ServiceName::Cinder];
    let steps: Vec<Step> = upgrade::plan(&services, false)
        .into_iter()
        .filter(|s| s.manage_command().is_some())
        .collect();
    assert_eq!(
        steps.iter().map(Step::name).collect::<Vec<_>>(),
        [
            "Migrate/glance/expand",
            "Migrate/glance/migrate",
            "Migrate/cinder/db-sync",
            "PostMigrate/glance/contract",
            "PostMigrate/cinder/online-data-migrations",
        ]
    );
    let new_bin = new.join("bin");
    let mut durations = Vec::new();
    let mut glance_proc: Option<Proc> = None;
    for step in &steps {
        if step.phase == Phase::PostMigrate && glance_proc.is_none() {
            // The roll: Glance 2026.1 serves from here on.
            glance_proc = Some(boot_glance(&g_new_dir, root, &base, &keystone, &admin_pw).await);
        }
        let mut cmd = match step.service {
            Some(ServiceName::Glance) => job_command(
                step,
                glance::POD_CONFIG_DIR,
                "glance-api.conf",
                &g_new_dir,
                &new_bin,
            ),
            _ => job_command(
                step,
                cinder::POD_CONFIG_DIR,
                "cinder.conf",
                &c_new_dir,
                &new_bin,
            ),
        };
        let t = Instant::now();
        run(&mut cmd, &step.name());
        durations.push(format!("{} {:.1}s", step.name(), t.elapsed().as_secs_f64()));
        // Again, as a Job retried after its pod was lost: idempotent.
        run(&mut cmd, &format!("{} (again)", step.name()));
        if step.phase == Phase::Migrate && step.service == Some(ServiceName::Glance) {
            // The old release still reads the image while it serves.
            let read = python(
                &old,
                GLANCE_DB_SCRIPT,
                &[&g_old_conf.display().to_string(), "read", IMAGE_ID],
                "2025.2 reads the image",
            );
            assert!(read.contains("created-by-2025.2"), "{read}");
        }
    }
    eprintln!("steps: {durations:?}");

    // ---- After: the 2026.1 API serves the image; the 2026.1 code reads the volume type. ----
    let client = reqwest::Client::new();
    let (token, _) = service_token(&client, USER, &keystone.password).await;
    let r = client
        .get(format!("{base}/v2/images/{IMAGE_ID}"))
        .header("X-Auth-Token", &token)
        .send()
        .await
        .expect("GET image");
    assert_eq!(r.status(), 200, "{}", logs());
    let img: serde_json::Value = r.json().await.expect("image JSON");
    assert_eq!(img["name"], "cpupgrade-kept", "{img}");
    assert_eq!(img["proof"], "created-by-2025.2", "{img}");
    let read = python(
        &new,
        CINDER_DB_SCRIPT,
        &[&c_new_conf.display().to_string(), "read"],
        "2026.1 reads the volume type",
    );
    assert_eq!(read.trim(), "created by 2025.2");
    // The schemas are at the 2026.1 code's heads (the same as 2025.2's: no new migration).
    let g_head = head(&new, "glance-manage", &g_new_conf);
    assert!(!g_head.is_empty());
    eprintln!("glance schema {old_head} -> {g_head}");
    let c_head = head(&new, "cinder-manage", &c_new_conf);
    assert_eq!(c_head, head(&old, "cinder-manage", &c_old_conf));
    let glance_version = run(
        Command::new(new_bin.join("glance-manage")).arg("--version"),
        "glance-manage --version",
    );
    assert!(glance_version.trim().starts_with("32."), "{glance_version}");
    drop(glance_proc);
    mariadb_admin(&format!("DROP DATABASE IF EXISTS {CINDER_DB}"));
    mariadb_admin(&format!("DROP USER IF EXISTS '{CINDER_DB}'@'%'"));
    eprintln!("whole proof {:.1} s", started.elapsed().as_secs_f64());
}

/// Registers the proof's service user and boots Glance 2026.1's uwsgi on the rendering.
async fn boot_glance(
    dir: &Path,
    root: &Path,
    base: &str,
    keystone: &controlplane_render::authtoken::KeystoneAuth,
    admin_pw: &str,
) -> Proc {
    let entry = glance::service_entry(keystone, REGION, base, base);
    register_service_twice(&entry, admin_pw, &keystone.password);
    let uwsgi = Command::new(venv_bin("uwsgi"))
        .arg("--ini")
        .arg(dir.join("uwsgi.ini"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(root.join("uwsgi.log")).expect("uwsgi log"))
        .spawn()
        .expect("start uwsgi");
    let proc = Proc(uwsgi, "uwsgi (glance-api 2026.1)");
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(r) = client.get(format!("{base}/healthcheck")).send().await
            && r.status().is_success()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Glance did not answer; {}",
            logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    proc
}
