//! Proof that the operator's Horizon rendering works: the real Horizon 26.0.0 (Django 5.2, in
//! the venv `scripts/control-plane-deps` installs from pinned versions) collects and compresses
//! its static files with the rendered settings, runs under uwsgi from the rendered `uwsgi.ini`,
//! serves the login page and its compressed CSS, refuses a wrong password with Keystone's
//! answer, logs the test cloud's admin in against the real Keystone, keeps the session in the
//! memcached the settings name (nothing else stores sessions) and shows the project overview.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{
    Proc, admin_password, free_port, memcached_items, run, start_memcached, test_cloud_dir,
};

use controlplane_api::common::ServiceTemplate;
use controlplane_render::horizon::{self, HorizonInputs, OVERRIDES_SECTION};
use controlplane_render::secrets::password;

const KEYSTONE: &str = "http://127.0.0.1:5000/v3";

fn horizon_venv() -> PathBuf {
    let v = test_cloud_dir().join("horizon-venv");
    assert!(
        v.join("bin/uwsgi").exists(),
        "{} has no Horizon: run scripts/control-plane-deps",
        v.display()
    );
    v
}

/// Cookies as a browser keeps them for one host.
#[derive(Default)]
struct Jar(BTreeMap<String, String>);

impl Jar {
    fn take(&mut self, r: &reqwest::Response) {
        for v in r.headers().get_all(reqwest::header::SET_COOKIE) {
            if let Some((name, rest)) = v.to_str().unwrap_or("").split_once('=') {
                let value = rest.split(';').next().unwrap_or("");
                self.0.insert(name.trim().to_string(), value.to_string());
            }
        }
    }

    /// GET `url` with these cookies, as a browser would.
    async fn get(&self, client: &reqwest::Client, url: String) -> reqwest::Response {
        client
            .get(&url)
            .header("Cookie", self.header())
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {url}: {e}"))
    }

    fn header(&self) -> String {
        self.0
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// The value a form field carries in `page` (hidden inputs: the CSRF token, the region), as
/// a browser would submit it.
fn form_value(page: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\"");
    let at = page
        .find(&marker)
        .unwrap_or_else(|| panic!("the login form has no field {name}"));
    let tag_start = page[..at].rfind('<').expect("tag start");
    let tag = &page[tag_start..at + page[at..].find('>').expect("tag end")];
    tag.split("value=\"")
        .nth(1)
        .and_then(|v| v.split('"').next())
        .unwrap_or_else(|| panic!("field {name} has no value: {tag}"))
        .to_string()
}

fn logs(root: &Path) -> String {
    std::fs::read_to_string(root.join("uwsgi.log"))
        .map(|s| {
            let tail: Vec<&str> = s.lines().rev().take(40).collect();
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        })
        .unwrap_or_default()
}

async fn login(client: &reqwest::Client, base: &str, jar: &mut Jar, pw: &str) -> reqwest::Response {
    let page = jar.get(client, format!("{base}/auth/login/")).await;
    jar.take(&page);
    let page = page.text().await.expect("login page body");
    let (token, region) = (
        form_value(&page, "csrfmiddlewaretoken"),
        form_value(&page, "region"),
    );
    let r = client
        .post(format!("{base}/auth/login/"))
        .header("Cookie", jar.header())
        .header("Referer", format!("{base}/auth/login/"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(
            url::form_urlencoded::Serializer::new(String::new())
                .extend_pairs([
                    ("csrfmiddlewaretoken", token.as_str()),
                    ("region", region.as_str()),
                    ("domain", "Default"),
                    ("username", "admin"),
                    ("password", pw),
                ])
                .finish(),
        )
        .send()
        .await
        .expect("login POST");
    jar.take(&r);
    r
}

#[tokio::test]
async fn rendered_horizon_logs_in_against_keystone_with_sessions_in_memcached() {
    let venv = horizon_venv();
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let (port, mc_port) = (free_port(), free_port());
    let _memcached = start_memcached(mc_port);

    let mut template = ServiceTemplate::default();
    // A user override, as a cluster would set one: it must reach Django.
    template.config_overrides.insert(
        OVERRIDES_SECTION.into(),
        BTreeMap::from([("SITE_BRANDING".into(), "CpProof Cloud".into())]),
    );
    assert!(horizon::override_errors(&template).is_empty());
    let config_dir = root.join("conf");
    let static_root = root.join("static");
    let inputs = HorizonInputs {
        template: &template,
        keystone_url: KEYSTONE.into(),
        region: "RegionOne".into(),
        allowed_hosts: vec!["127.0.0.1".into()],
        secret_key: password(50),
        memcache_servers: vec![format!("127.0.0.1:{mc_port}")],
        keystone_ca_file: None,
        https: false,
        config_dir: config_dir.display().to_string(),
        static_root: static_root.display().to_string(),
        python_home: Some(venv.display().to_string()),
        listen: format!("127.0.0.1:{port}"),
        workers: 1,
    };
    for (path, text) in horizon::config_files(&inputs) {
        let p = config_dir.join(path);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("config dir");
        std::fs::write(&p, text).expect("write config");
    }

    // The init container's work: collect and compress the static files.
    let started = Instant::now();
    for cmd in horizon::setup_commands(&venv.join("bin/python3").display().to_string()) {
        let mut c = Command::new(&cmd[0]);
        c.args(&cmd[1..]);
        for (k, v) in horizon::setup_env(&inputs.config_dir) {
            c.env(k, v);
        }
        run(&mut c, &cmd[3..].join(" "));
    }
    eprintln!(
        "collectstatic + compress: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        static_root.join("dashboard/css").is_dir(),
        "compress wrote no dashboard CSS"
    );

    let uwsgi = Command::new(venv.join("bin/uwsgi"))
        .arg("--ini")
        .arg(config_dir.join("uwsgi.ini"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(root.join("uwsgi.log")).expect("uwsgi log"))
        .spawn()
        .expect("start uwsgi");
    let _uwsgi = Proc(uwsgi, "uwsgi");
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");

    let deadline = Instant::now() + Duration::from_secs(120);
    let page = loop {
        if let Ok(r) = client.get(format!("{base}/auth/login/")).send().await
            && r.status() == 200
        {
            break r.text().await.expect("login page");
        }
        assert!(
            Instant::now() < deadline,
            "Horizon did not serve its login page; {}",
            logs(root)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    eprintln!(
        "Horizon answered after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // The override reached Django; the page links the offline-compressed CSS, which uwsgi serves.
    assert!(page.contains("CpProof Cloud"), "branding override missing");
    let css = page
        .split('"')
        .find(|s| s.starts_with("/static/dashboard/css/") && s.ends_with(".css"))
        .unwrap_or_else(|| panic!("no compressed CSS linked from the login page"));
    let r = client
        .get(format!("{base}{css}"))
        .send()
        .await
        .expect("css");
    assert_eq!(r.status(), 200, "{css}");
    assert!(r.text().await.expect("css body").len() > 1000);

    // A request for a host not in ALLOWED_HOSTS is refused by Django.
    let r = client
        .get(format!("{base}/auth/login/"))
        .header("Host", "evil.example")
        .send()
        .await
        .expect("bad host");
    assert_eq!(r.status(), 400);

    // A wrong password: Keystone refuses it and Horizon says so; no session is made.
    let items_before = memcached_items(mc_port);
    let mut jar = Jar::default();
    let r = login(&client, &base, &mut jar, "not-the-password").await;
    assert_eq!(r.status(), 200, "{}", logs(root));
    let body = r.text().await.expect("body");
    assert!(body.contains("Invalid credentials."), "{}", logs(root));

    // The real admin logs in: a redirect, a session cookie, the session in memcached.
    let pw = admin_password();
    let mut jar = Jar::default();
    let r = login(&client, &base, &mut jar, &pw).await;
    assert_eq!(r.status(), 302, "login did not redirect; {}", logs(root));
    assert!(jar.0.contains_key("sessionid"), "no session cookie");
    assert!(
        memcached_items(mc_port) > items_before,
        "the session was not stored in memcached"
    );
    let r = jar.get(&client, format!("{base}/identity/")).await;
    assert_eq!(r.status(), 200, "{}", logs(root));
    let page = r.text().await.expect("page");
    // The projects table is Keystone's answer to the logged-in admin.
    assert!(page.contains("admin"), "no project list");
    assert!(page.contains("Sign Out"), "not logged in");

    // Sessions live only in memcached: flushing it logs the user out.
    {
        use std::io::Write;
        let mut s = std::net::TcpStream::connect(("127.0.0.1", mc_port)).expect("memcached");
        s.write_all(b"flush_all\r\nquit\r\n").expect("flush");
    }
    let r = jar.get(&client, format!("{base}/identity/")).await;
    assert_eq!(
        r.status(),
        302,
        "still logged in after the cache was flushed"
    );
    assert!(
        r.headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|l| l.contains("/auth/login/")),
        "not sent to the login page"
    );
}
