//! Proof that the rendered Glance configuration works: the operator's own rendering
//! (`glance-api.conf`, the paste pipeline, the uwsgi configuration, the shared database script,
//! the db sync command and the shared service-user/catalog script) drives the real Glance
//! 2026.1 of the test cloud's virtualenv against the test cloud's MariaDB and Keystone, with
//! images in a directory (the `file` store) and then in the Ceph RADOS Gateway of
//! `scripts/external-services` over TLS with the harness's CA (the `s3` store), and
//! `web-download` imports from a local HTTP server on the allow-list and refused elsewhere.
//!
//! Needs: `scripts/test-cloud up` (MariaDB on 127.0.0.1:13306, Keystone on 127.0.0.1:5000, the
//! venv with glance, glance_store and boto3) and `scripts/external-services up` (RGW on
//! 127.0.0.1:17443). It uses its own database and user (`cpproof_glance`), its own service
//! user (`cpproof_glance`), its own region (`CpProofGlance`) for the catalog endpoints and its
//! own bucket, and removes them again, so the test cloud's Glance and its catalog in
//! `RegionOne` are untouched.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support;
use support::{
    KeystoneCleanup, Proc, admin_password, external_services_env, free_port, init_database_twice,
    log_tails, mariadb_admin, proof_database, proof_keystone_auth, register_service_twice, rss_kib,
    run, service_token, test_cloud_dir, venv_bin,
};

use controlplane_api::common::ServiceTemplate;
use controlplane_render::glance::{self, Backend, GlanceInputs, Paths, S3Store, WebDownload};
use controlplane_render::secrets::password;

const REGION: &str = "CpProofGlance";
const USER: &str = "cpproof_glance";
const DB: &str = "cpproof_glance";

/// S3 calls with the venv's boto3 (the library glance_store uses), trusting the harness CA:
/// reads what Glance stored and removes the proof's bucket.
const S3_SCRIPT: &str = r#"import os, sys, boto3
from botocore.config import Config
e = os.environ
c = boto3.client("s3", endpoint_url=e["S3_ENDPOINT"], aws_access_key_id=e["S3_AK"],
                 aws_secret_access_key=e["S3_SK"], verify=e["S3_CA"],
                 config=Config(s3={"addressing_style": "path"}))
b = e["S3_BUCKET"]
def exists():
    try:
        c.head_bucket(Bucket=b)
        return True
    except c.exceptions.ClientError:
        return False
if sys.argv[1] == "exists":
    print("yes" if exists() else "no")
elif sys.argv[1] == "list":
    for o in c.list_objects_v2(Bucket=b).get("Contents", []):
        print(o["Key"], o["Size"])
elif sys.argv[1] == "get":
    sys.stdout.buffer.write(c.get_object(Bucket=b, Key=sys.argv[2])["Body"].read())
elif sys.argv[1] == "delete-bucket" and exists():
    for o in c.list_objects_v2(Bucket=b).get("Contents", []):
        c.delete_object(Bucket=b, Key=o["Key"])
    c.delete_bucket(Bucket=b)
"#;

/// The proof's bucket on the RGW.
struct Bucket {
    endpoint: String,
    access_key: String,
    secret_key: String,
    ca: String,
    name: String,
}

impl Bucket {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(venv_bin("python3"));
        c.arg("-c")
            .arg(S3_SCRIPT)
            .args(args)
            .env("S3_ENDPOINT", &self.endpoint)
            .env("S3_AK", &self.access_key)
            .env("S3_SK", &self.secret_key)
            .env("S3_CA", &self.ca)
            .env("S3_BUCKET", &self.name);
        c
    }
    fn s3(&self, args: &[&str]) -> String {
        run(&mut self.cmd(args), &format!("S3 {args:?}"))
    }
    fn get(&self, key: &str) -> Vec<u8> {
        let out = self.cmd(&["get", key]).output().expect("S3 get");
        assert!(
            out.status.success(),
            "S3 get {key}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }
}

impl Drop for Bucket {
    fn drop(&mut self) {
        match self.cmd(&["delete-bucket"]).output() {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!(
                "removing bucket {} failed: {}",
                self.name,
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => eprintln!("removing bucket {}: {e}", self.name),
        }
    }
}

/// A tiny HTTP server for web-download: `/image.raw` serves the bytes, `/redirect` redirects
/// to the URL given; every request line goes to the log, so the proof sees what Glance fetched.
const WEB_SERVER: &str = r#"import http.server, sys
port, data, target, log = int(sys.argv[1]), open(sys.argv[2], "rb").read(), sys.argv[3], sys.argv[4]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open(log, "a") as f:
            f.write("%s %s\n" % (self.headers.get("Host"), self.path))
        if self.path.startswith("/image.raw"):
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        elif self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self.send_error(404)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
"#;

/// The proof's temporary directory, for the logs a failure shows.
static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

fn logs() -> String {
    ROOT.get()
        .map(|root| log_tails(root, &["uwsgi.log", "glance.log"], 60))
        .unwrap_or_default()
}

/// Writes the rendered files, starts uwsgi on them and waits until Glance answers; returns the
/// process and how long the boot took.
async fn boot(i: &GlanceInputs<'_>, root: &Path, base: &str) -> (Proc, Duration) {
    let dir = PathBuf::from(&i.paths.config_dir);
    std::fs::create_dir_all(&dir).expect("etc");
    for (name, text) in glance::config_files(i).expect("renders") {
        std::fs::write(dir.join(name), text).expect("config file");
    }
    let started = Instant::now();
    let uwsgi = Command::new(venv_bin("uwsgi"))
        .arg("--ini")
        .arg(dir.join("uwsgi.ini"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(root.join("uwsgi.log")).expect("uwsgi log"))
        .spawn()
        .expect("start uwsgi");
    let proc = Proc(uwsgi, "uwsgi (glance-api)");
    let client = reqwest::Client::new();
    let deadline = started + Duration::from_secs(120);
    loop {
        if let Ok(r) = client.get(format!("{base}/healthcheck")).send().await
            && r.status().is_success()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Glance did not answer on {base}; {}",
            logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (proc, started.elapsed())
}

/// The image API as the proof's service user.
struct Api {
    client: reqwest::Client,
    base: String,
    token: String,
}

impl Api {
    async fn create(&self, name: &str) -> String {
        let r = self
            .client
            .post(format!("{}/v2/images", self.base))
            .header("X-Auth-Token", &self.token)
            .json(&serde_json::json!({"name": name, "disk_format": "raw", "container_format": "bare"}))
            .send()
            .await
            .expect("create image");
        assert_eq!(r.status(), 201, "{}", logs());
        let v: serde_json::Value = r.json().await.expect("image JSON");
        v["id"].as_str().expect("image id").to_string()
    }

    async fn image(&self, id: &str) -> serde_json::Value {
        let r = self
            .client
            .get(format!("{}/v2/images/{id}", self.base))
            .header("X-Auth-Token", &self.token)
            .send()
            .await
            .expect("show image");
        assert_eq!(r.status(), 200, "{}", logs());
        r.json().await.expect("image JSON")
    }

    /// Uploads with a Content-Length; returns the status.
    async fn upload(&self, id: &str, data: &[u8]) -> u16 {
        self.client
            .put(format!("{}/v2/images/{id}/file", self.base))
            .header("X-Auth-Token", &self.token)
            .header("Content-Type", "application/octet-stream")
            .body(data.to_vec())
            .send()
            .await
            .expect("upload")
            .status()
            .as_u16()
    }

    /// Uploads with `Transfer-Encoding: chunked`, as the OpenStack clients send files (curl; the
    /// token goes through a header file, not the command line).
    fn upload_chunked(&self, id: &str, file: &Path, root: &Path) -> String {
        let headers = root.join("curl-headers");
        std::fs::write(
            &headers,
            format!(
                "X-Auth-Token: {}\nContent-Type: application/octet-stream\nTransfer-Encoding: chunked\n",
                self.token
            ),
        )
        .expect("header file");
        run(
            Command::new("curl")
                .args([
                    "-sS",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    "-X",
                    "PUT",
                    "-H",
                ])
                .arg(format!("@{}", headers.display()))
                .arg("--data-binary")
                .arg(format!("@{}", file.display()))
                .arg(format!("{}/v2/images/{id}/file", self.base)),
            "curl chunked upload",
        )
    }

    async fn download(&self, id: &str) -> Vec<u8> {
        let r = self
            .client
            .get(format!("{}/v2/images/{id}/file", self.base))
            .header("X-Auth-Token", &self.token)
            .send()
            .await
            .expect("download");
        assert_eq!(r.status(), 200, "{}", logs());
        r.bytes().await.expect("image bytes").to_vec()
    }

    async fn import(&self, id: &str, uri: &str) -> (u16, String) {
        let r = self
            .client
            .post(format!("{}/v2/images/{id}/import", self.base))
            .header("X-Auth-Token", &self.token)
            .json(&serde_json::json!({"method": {"name": "web-download", "uri": uri}}))
            .send()
            .await
            .expect("import");
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    }

    /// The image's import tasks (image API 2.12).
    async fn tasks(&self, id: &str) -> Vec<serde_json::Value> {
        let r = self
            .client
            .get(format!("{}/v2/images/{id}/tasks", self.base))
            .header("X-Auth-Token", &self.token)
            .send()
            .await
            .expect("image tasks");
        assert_eq!(r.status(), 200, "{}", logs());
        let v: serde_json::Value = r.json().await.expect("tasks JSON");
        v["tasks"].as_array().cloned().unwrap_or_default()
    }

    /// Waits (bounded) until `done` holds for the image or its tasks.
    async fn wait<F>(&self, id: &str, what: &str, done: F) -> serde_json::Value
    where
        F: Fn(&serde_json::Value, &[serde_json::Value]) -> bool,
    {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let image = self.image(id).await;
            let tasks = self.tasks(id).await;
            if done(&image, &tasks) {
                return image;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: image {image}, tasks {tasks:?}; {}",
                logs()
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

/// Bytes that are not all alike, so a truncated or reordered copy differs.
fn payload(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|n| (n as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0] ^ seed)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rendered_glance_stores_images_in_files_and_s3_and_imports_from_the_allow_list() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let _ = ROOT.set(root.to_path_buf());
    let (api_port, web_port, closed_port) = (free_port(), free_port(), free_port());
    let admin_pw = admin_password();
    let _cleanup = KeystoneCleanup {
        admin_password: admin_pw.clone(),
        region: REGION,
        user: USER,
        database: DB,
    };
    let ext = external_services_env();
    let var = |k: &str| {
        ext.get(k)
            .cloned()
            .unwrap_or_else(|| panic!("{k} missing: rerun `scripts/external-services up`"))
    };
    let bucket = Bucket {
        endpoint: var("EXTSVC_S3_TLS"),
        access_key: var("EXTSVC_S3_ACCESS_KEY"),
        secret_key: var("EXTSVC_S3_SECRET_KEY"),
        ca: var("EXTSVC_CA"),
        name: format!("cpproof-glance-{}", password(10).to_lowercase()),
    };

    let template = ServiceTemplate::default();
    let db = proof_database(DB);
    let keystone = proof_keystone_auth(USER);
    let paths = Paths {
        config_dir: root.join("etc").display().to_string(),
        state_dir: root.join("state").display().to_string(),
        log_file: Some(root.join("glance.log").display().to_string()),
        python_home: Some(test_cloud_dir().join("venv").display().to_string()),
    };
    let images_dir = root.join("images");
    let base = format!("http://127.0.0.1:{api_port}");
    let file_inputs = GlanceInputs {
        template: &template,
        database: db.clone(),
        keystone: keystone.clone(),
        cache: controlplane_render::cache::Cache::plain(vec![]),
        backends: vec![Backend::File {
            dir: images_dir.display().to_string(),
        }],
        web_download: Some(WebDownload {
            allowed_schemes: vec!["http".into()],
            allowed_hosts: vec!["127.0.0.1".into()],
            allowed_ports: vec![web_port],
        }),
        public_url: Some(base.clone()),
        paths: paths.clone(),
        listen: format!("127.0.0.1:{api_port}"),
        workers: 1,
    };

    // The database Job's script (shared with Keystone and Placement), twice: Jobs are retried.
    init_database_twice(&db);

    // The service-user step against the real Keystone, twice.
    let entry = glance::service_entry(&keystone, REGION, &base, &base);
    register_service_twice(&entry, &admin_pw, &keystone.password);

    // db sync with the rendered configuration; the schema lands in the rendered database.
    std::fs::create_dir_all(&paths.config_dir).expect("etc");
    for (name, text) in glance::config_files(&file_inputs).expect("renders") {
        std::fs::write(PathBuf::from(&paths.config_dir).join(name), text).expect("config");
    }
    let manage = venv_bin("glance-manage").display().to_string();
    let sync = glance::db_sync_command(&manage, &paths.config_dir);
    let synced = Instant::now();
    run(
        Command::new(&sync[0]).args(&sync[1..]),
        "glance-manage db_sync",
    );
    let sync_time = synced.elapsed();
    let tables = mariadb_admin(&format!(
        "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = '{DB}' AND table_name IN ('images', 'image_locations', 'tasks')"
    ));
    assert_eq!(tables.trim(), "3", "db_sync did not create {DB}'s tables");

    // ---- the file store ----
    let (glance_proc, boot_file) = boot(&file_inputs, root, &base).await;
    let client = reqwest::Client::new();
    let images = format!("{base}/v2/images");
    let status = |r: reqwest::Result<reqwest::Response>| r.expect("request").status().as_u16();
    assert_eq!(status(client.get(&images).send().await), 401, "{}", logs());
    assert_eq!(
        status(
            client
                .get(&images)
                .header("X-Auth-Token", "gAAAAABforged")
                .send()
                .await
        ),
        401
    );

    // The service user the step created authenticates; the catalog it set up is there.
    let (token, body) = service_token(&client, USER, &keystone.password).await;
    let svc = body["token"]["catalog"]
        .as_array()
        .and_then(|c| c.iter().find(|s| s["type"] == glance::SERVICE_TYPE))
        .expect("image service in the catalog");
    let ours: Vec<_> = svc["endpoints"]
        .as_array()
        .map(|e| e.iter().filter(|e| e["region_id"] == REGION).collect())
        .unwrap_or_default();
    assert_eq!(ours.len(), 3, "endpoints in {REGION}: {svc}");
    assert!(ours.iter().all(|e| e["url"] == base.as_str()), "{svc}");
    let api = Api {
        client: client.clone(),
        base: base.clone(),
        token,
    };

    let data_file = payload(300_000, 1);
    let file_image = api.create("cpproof-file").await;
    assert_eq!(api.upload(&file_image, &data_file).await, 204, "{}", logs());
    let shown = api.image(&file_image).await;
    assert_eq!(shown["status"], "active");
    assert_eq!(shown["stores"], glance::FILE_BACKEND);
    assert_eq!(shown["size"], data_file.len());
    assert_eq!(api.download(&file_image).await, data_file);
    // ... stored as a file named by the image id in the rendered directory.
    assert_eq!(
        std::fs::read(images_dir.join(&file_image)).expect("image file"),
        data_file
    );
    // A chunked upload (how the OpenStack clients send files) through uwsgi's chunked reader.
    let chunked = payload(1_500_000, 2);
    let chunked_path = root.join("chunked.raw");
    std::fs::write(&chunked_path, &chunked).expect("chunked payload");
    let chunked_image = api.create("cpproof-chunked").await;
    assert_eq!(
        api.upload_chunked(&chunked_image, &chunked_path, root),
        "204",
        "{}",
        logs()
    );
    assert_eq!(api.download(&chunked_image).await, chunked);
    let rss_file = rss_kib(glance_proc.0.id());
    drop(glance_proc);

    // ---- the S3 store (default) with the file store kept: TLS with the harness CA ----
    assert_eq!(bucket.s3(&["exists"]).trim(), "no");
    let s3 = S3Store {
        endpoint: bucket.endpoint.clone(),
        access_key: bucket.access_key.clone(),
        secret_key: bucket.secret_key.clone(),
        bucket: bucket.name.clone(),
        region: None,
        create_bucket: true,
        ca_file: Some(bucket.ca.clone()),
    };
    let mut s3_inputs = file_inputs.clone();
    s3_inputs.backends = vec![Backend::S3(s3.clone()), file_inputs.backends[0].clone()];
    let (glance_proc, boot_s3) = boot(&s3_inputs, root, &base).await;

    let data_s3 = payload(700_000, 3);
    let s3_image = api.create("cpproof-s3").await;
    assert_eq!(api.upload(&s3_image, &data_s3).await, 204, "{}", logs());
    let shown = api.image(&s3_image).await;
    assert_eq!(shown["status"], "active", "{shown}");
    assert_eq!(shown["stores"], glance::S3_BACKEND);
    assert_eq!(api.download(&s3_image).await, data_s3);
    // Glance created the bucket and the object is in it, byte for byte.
    let listed = bucket.s3(&["list"]);
    assert_eq!(
        listed.trim(),
        format!("{s3_image} {}", data_s3.len()),
        "bucket {}",
        bucket.name
    );
    assert_eq!(bucket.get(&s3_image), data_s3);
    // Its location in Glance's database is an `s3+https` URL (glance_store talks TLS) into the
    // proof's bucket; not printed: glance_store puts the S3 keys into it.
    let location = mariadb_admin(&format!(
        "SELECT value FROM {DB}.image_locations WHERE image_id = '{s3_image}' AND deleted = 0"
    ));
    assert!(
        location.trim().starts_with("s3+https://")
            && location
                .trim()
                .ends_with(&format!("/{}/{s3_image}", bucket.name)),
        "the S3 image's location is not an s3+https URL into {}",
        bucket.name
    );
    // The image stored in files before the switch is still served from there.
    assert_eq!(api.download(&file_image).await, data_file);

    // ---- web-download: the allow-list ----
    let web_data = payload(400_000, 4);
    let web_file = root.join("web.raw");
    std::fs::write(&web_file, &web_data).expect("web payload");
    let web_log = root.join("web.log");
    std::fs::write(&web_log, "").expect("web log");
    let server = Command::new(venv_bin("python3"))
        .arg("-c")
        .arg(WEB_SERVER)
        .arg(web_port.to_string())
        .arg(&web_file)
        .arg(format!(
            "http://localhost:{web_port}/image.raw?via=redirect"
        ))
        .arg(&web_log)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the web server");
    let _server = Proc(server, "web server");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", web_port)).is_err() {
        assert!(Instant::now() < deadline, "the web server did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let fetched = || std::fs::read_to_string(&web_log).unwrap_or_default();

    // Allowed scheme, host and port: imported, active, the same bytes, in the default store.
    let imported = api.create("cpproof-web").await;
    let (code, text) = api
        .import(
            &imported,
            &format!("http://127.0.0.1:{web_port}/image.raw?via=allowed"),
        )
        .await;
    assert_eq!(code, 202, "{text}; {}", logs());
    let shown = api
        .wait(&imported, "web-download import", |i, _| {
            i["status"] == "active"
        })
        .await;
    assert_eq!(shown["stores"], glance::S3_BACKEND, "{shown}");
    assert_eq!(shown["size"], web_data.len());
    assert_eq!(api.download(&imported).await, web_data);
    assert_eq!(bucket.get(&imported), web_data);
    assert!(
        fetched().contains("/image.raw?via=allowed"),
        "{}",
        fetched()
    );

    // A host off the list (the same server, named `localhost`) and a port off the list: refused
    // before anything is fetched.
    let refused = api.create("cpproof-web-refused").await;
    for uri in [
        format!("http://localhost:{web_port}/image.raw?via=localhost"),
        format!("http://127.0.0.1:{closed_port}/image.raw?via=port"),
        format!("https://127.0.0.1:{web_port}/image.raw?via=scheme"),
    ] {
        let (code, text) = api.import(&refused, &uri).await;
        assert_eq!(code, 400, "{uri}: {text}");
        assert!(text.contains("does not pass filtering"), "{uri}: {text}");
    }
    assert_eq!(api.image(&refused).await["status"], "queued");
    assert!(!fetched().contains("via=localhost"), "{}", fetched());

    // An allowed URL redirecting off the list: the import task fails with Glance's reason, the
    // redirect target is never fetched, the image stays without data.
    let redirected = api.create("cpproof-web-redirect").await;
    let (code, text) = api
        .import(
            &redirected,
            &format!("http://127.0.0.1:{web_port}/redirect"),
        )
        .await;
    assert_eq!(code, 202, "{text}");
    api.wait(&redirected, "the redirected import's failure", |_, t| {
        t.iter().any(|t| t["status"] == "failure")
    })
    .await;
    let tasks = api.tasks(&redirected).await;
    let message = tasks
        .iter()
        .find(|t| t["status"] == "failure")
        .and_then(|t| t["message"].as_str())
        .unwrap_or_default()
        .to_string();
    // Glance tells the user only that the task failed; the reason is in its log.
    assert!(
        message.contains("Task failed"),
        "task message {message:?}; {}",
        logs()
    );
    let reason =
        format!("Redirect to disallowed URL: http://localhost:{web_port}/image.raw?via=redirect");
    assert!(
        std::fs::read_to_string(root.join("glance.log"))
            .unwrap_or_default()
            .contains(&reason),
        "{reason:?} not logged; {}",
        logs()
    );
    let shown = api.image(&redirected).await;
    assert_ne!(shown["status"], "active", "{shown}");
    assert!(fetched().contains("/redirect"), "{}", fetched());
    assert!(!fetched().contains("via=redirect"), "{}", fetched());
    let rss_s3 = rss_kib(glance_proc.0.id());
    drop(glance_proc);

    // ---- TLS is verified: without the CA bundle the same store refuses the RGW ----
    let mut untrusted = s3_inputs.clone();
    let mut no_ca = s3.clone();
    no_ca.ca_file = None;
    untrusted.backends[0] = Backend::S3(no_ca);
    let (_glance_proc, _) = boot(&untrusted, root, &base).await;
    let rejected = api.create("cpproof-s3-untrusted").await;
    let refusing = Instant::now();
    let code = api.upload(&rejected, &payload(1000, 5)).await;
    let refused_after = refusing.elapsed();
    assert!(code >= 400, "upload without the CA answered {code}");
    assert_ne!(api.image(&rejected).await["status"], "active");
    let glance_log = std::fs::read_to_string(root.join("glance.log")).unwrap_or_default();
    assert!(
        glance_log.contains("CERTIFICATE_VERIFY_FAILED"),
        "no certificate failure logged; {}",
        logs()
    );
    assert!(
        !bucket.s3(&["list"]).contains(&rejected),
        "the untrusted upload reached the bucket"
    );

    eprintln!(
        "glance-api (uwsgi master + 1 worker): boot to /healthcheck {:.1} s (file store), {:.1} s (S3 + file); \
         RSS after serving {} MiB (file), {} MiB (S3 + web-download); glance-manage db_sync {:.1} s; \
         upload without the CA refused after {:.1} s",
        boot_file.as_secs_f64(),
        boot_s3.as_secs_f64(),
        rss_file / 1024,
        rss_s3 / 1024,
        sync_time.as_secs_f64(),
        refused_after.as_secs_f64()
    );
}
