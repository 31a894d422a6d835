//! Proof that the operator's Horizon rendering works: the real Horizon 26.0.0 (Django 5.2, in
//! the venv `scripts/control-plane-deps` installs from pinned versions) collects and compresses
//! its static files with the rendered settings, runs under uwsgi from the rendered `uwsgi.ini`,
//! serves the login page and its compressed CSS, refuses a wrong password with Keystone's
//! answer, logs the test cloud's admin in against the real Keystone, keeps the session in the
//! memcached the settings name (nothing else stores sessions) and shows the project overview.
//!
//! Over TLS: the rendered Horizon with the operator's TLS edit (uwsgi `https-socket`, a
//! certificate issued by `controlplane_render::tls`) serves its login page over https with
//! `Secure` cookies and logs the admin in (form POST with CSRF) against Keystone served over
//! https with a certificate of the same CA, verified through `OPENSTACK_SSL_CACERT`; the same
//! dashboard without the CA cannot log in (certificate error), and a client without the CA is
//! refused by the dashboard.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::{
    Proc, admin_password, free_port, memcached_items, run, spawn_logged, start_memcached,
    test_cloud_dir,
};

use controlplane_api::common::ServiceTemplate;
use controlplane_render::horizon::{self, HorizonInputs, OVERRIDES_SECTION};
use controlplane_render::secrets::password;
use controlplane_render::tls;

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
    log_tail(root, "uwsgi.log")
}

fn log_tail(root: &Path, file: &str) -> String {
    std::fs::read_to_string(root.join(file))
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
        cache: controlplane_render::cache::Cache::plain(vec![format!("127.0.0.1:{mc_port}")]),
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
    // Its answer is awaited: a request sent before memcached has flushed loads the session, and
    // when the flush lands before Horizon saves it, Django answers 400 (SessionInterrupted), as
    // this test saw under load.
    {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", mc_port)).expect("memcached");
        s.write_all(b"flush_all\r\nquit\r\n").expect("flush");
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        assert_eq!(answer.trim(), "OK", "memcached's answer to flush_all");
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

/// The whole error chain of a failed request (reqwest's Display hides the TLS cause).
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// Writes the rendered files into `inputs.config_dir`, `extra` files beside them, and serves
/// HTTPS from `tls_files` (certificate, key) as the operator's edit does.
fn write_config(inputs: &HorizonInputs<'_>, extra: &[(&str, &str)], tls_files: (&str, &str)) {
    let dir = Path::new(&inputs.config_dir);
    let mut files = horizon::config_files(inputs);
    if let Some(u) = files.get_mut("uwsgi.ini") {
        *u = tls::uwsgi_https(u, tls_files.0, tls_files.1);
    }
    files.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    for (path, text) in files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("config dir");
        std::fs::write(&p, text).expect("write config");
    }
}

/// The `Set-Cookie` header setting cookie `name` in `r`.
fn set_cookie(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name} cookie set"))
        .to_string()
}

/// Polls `url` with `client` until it answers 200; the body.
async fn wait_page(client: &reqwest::Client, url: &str, root: &Path, log: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(r) = client.get(url).send().await
            && r.status() == 200
        {
            return r.text().await.expect("page");
        }
        assert!(
            Instant::now() < deadline,
            "{url} did not answer; {}",
            log_tail(root, log)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test]
async fn rendered_horizon_serves_https_and_logs_in_against_https_keystone() {
    let venv = horizon_venv();
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let (port, noca_port, ks_port, mc_port) = (free_port(), free_port(), free_port(), free_port());
    let _memcached = start_memcached(mc_port);
    let started = Instant::now();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;

    // The operator's CA and serving certificates (the Service names and the loopback address
    // the proof reaches them at), written as the kubelet mounts the Secrets.
    let ca = tls::generate_ca("openstack-operator cphzntls CA", now).expect("CA");
    let mount = |svc: &str| {
        let mut names = tls::service_dns_names(svc, "cphzntls");
        names.push("127.0.0.1".into());
        let cert = tls::issue_serving(&ca, &names, now).expect("certificate");
        let dir = root.join("tls").join(svc);
        std::fs::create_dir_all(&dir).expect("tls dir");
        for (k, v) in tls::secret_data(&cert, &ca.cert) {
            std::fs::write(dir.join(k), v).expect("tls file");
        }
        tls::pod_files(&dir.display().to_string())
    };
    let ks_files = mount("keystone-api");
    let hz_files = mount("horizon-api");

    // Keystone over https: the test cloud's Keystone (its database, keys and admin) served by
    // a second uwsgi with the operator's `https-socket` edit, so no bootstrap is needed.
    let ini = std::fs::read_to_string(test_cloud_dir().join("etc/uwsgi/keystone.ini"))
        .expect("the test cloud's keystone.ini");
    let listen = ini
        .lines()
        .find(|l| l.starts_with("http-socket = "))
        .expect("keystone's http-socket")
        .to_string();
    let ini = tls::uwsgi_https(
        &ini.replace(&listen, &format!("http-socket = 127.0.0.1:{ks_port}")),
        &ks_files.0,
        &ks_files.1,
    );
    assert!(
        ini.contains(&format!("https-socket = 127.0.0.1:{ks_port},")),
        "{ini}"
    );
    std::fs::write(root.join("keystone-uwsgi.ini"), ini).expect("keystone ini");
    let uwsgi_bin = venv.join("bin/uwsgi").display().to_string();
    let _keystone = spawn_logged(
        root,
        "keystone-uwsgi.log",
        "keystone",
        &[
            uwsgi_bin.clone(),
            "--ini".into(),
            root.join("keystone-uwsgi.ini").display().to_string(),
        ],
    );
    let keystone_url = format!("https://127.0.0.1:{ks_port}/v3");
    let with_ca = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(ca.cert.as_bytes()).expect("CA PEM")])
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");

    // The dashboard, rendered as the operator renders it for `tls` and a TLS Keystone; a user
    // override sends openstack_auth's log (where a failed Keystone call is told) to uwsgi's.
    let mut template = ServiceTemplate::default();
    template.config_overrides.insert(
        OVERRIDES_SECTION.into(),
        BTreeMap::from([(
            "LOGGING".into(),
            serde_json::json!({
                "version": 1,
                "disable_existing_loggers": false,
                "handlers": {"console": {"class": "logging.StreamHandler"}},
                "loggers": {"openstack_auth": {"handlers": ["console"], "level": "DEBUG"}},
            })
            .to_string(),
        )]),
    );
    assert!(horizon::override_errors(&template).is_empty());
    let static_root = root.join("static");
    let inputs = HorizonInputs {
        template: &template,
        keystone_url: keystone_url.clone(),
        region: "RegionOne".into(),
        allowed_hosts: vec!["127.0.0.1".into()],
        secret_key: password(50),
        cache: controlplane_render::cache::Cache::plain(vec![format!("127.0.0.1:{mc_port}")]),
        keystone_ca_file: Some(
            root.join("conf")
                .join(tls::CLIENT_CA_FILE)
                .display()
                .to_string(),
        ),
        https: true,
        config_dir: root.join("conf").display().to_string(),
        static_root: static_root.display().to_string(),
        python_home: Some(venv.display().to_string()),
        listen: format!("127.0.0.1:{port}"),
        workers: 1,
    };
    let settings = horizon::local_settings(&inputs);
    assert!(
        settings.contains("CSRF_COOKIE_SECURE = True\n"),
        "{settings}"
    );
    assert!(settings.contains("OPENSTACK_SSL_CACERT = "), "{settings}");
    write_config(
        &inputs,
        &[(tls::CLIENT_CA_FILE, &ca.cert)],
        (&hz_files.0, &hz_files.1),
    );
    // The same dashboard without Keystone's CA (system trust only), on its own port; the static
    // files collected once serve both.
    let noca = HorizonInputs {
        keystone_ca_file: None,
        config_dir: root.join("conf-noca").display().to_string(),
        listen: format!("127.0.0.1:{noca_port}"),
        ..inputs.clone()
    };
    assert!(!horizon::local_settings(&noca).contains("OPENSTACK_SSL_CACERT"));
    write_config(&noca, &[], (&hz_files.0, &hz_files.1));
    for cmd in horizon::setup_commands(&venv.join("bin/python3").display().to_string()) {
        let mut c = Command::new(&cmd[0]);
        c.args(&cmd[1..]);
        for (k, v) in horizon::setup_env(&inputs.config_dir) {
            c.env(k, v);
        }
        run(&mut c, &cmd[3..].join(" "));
    }
    let dashboards: Vec<Proc> = [(&inputs, "uwsgi.log"), (&noca, "uwsgi-noca.log")]
        .into_iter()
        .map(|(i, log)| {
            spawn_logged(
                root,
                log,
                "horizon",
                &[
                    uwsgi_bin.clone(),
                    "--ini".into(),
                    format!("{}/uwsgi.ini", i.config_dir),
                ],
            )
        })
        .collect();

    wait_page(&with_ca, &keystone_url, root, "keystone-uwsgi.log").await;
    let base = format!("https://127.0.0.1:{port}");
    let noca_base = format!("https://127.0.0.1:{noca_port}");
    wait_page(&with_ca, &format!("{base}/auth/login/"), root, "uwsgi.log").await;
    wait_page(
        &with_ca,
        &format!("{noca_base}/auth/login/"),
        root,
        "uwsgi-noca.log",
    )
    .await;
    eprintln!(
        "Keystone and two dashboards over https after {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // A browser without the operator's CA is refused by the dashboard's certificate.
    let err = reqwest::Client::new()
        .get(format!("{base}/auth/login/"))
        .send()
        .await
        .expect_err("a client without the CA must not connect");
    let why = chain(&err);
    assert!(
        why.to_lowercase().contains("certificate"),
        "refused for another reason: {why}"
    );

    // The CSRF cookie is `Secure`; the admin logs in through https Keystone, verified with
    // OPENSTACK_SSL_CACERT: a redirect, a `Secure` session cookie, the identity panel.
    let page = with_ca
        .get(format!("{base}/auth/login/"))
        .send()
        .await
        .expect("login page");
    assert!(
        set_cookie(&page, "csrftoken").contains("Secure"),
        "CSRF cookie not Secure"
    );
    let pw = admin_password();
    let mut jar = Jar::default();
    let r = login(&with_ca, &base, &mut jar, &pw).await;
    assert_eq!(
        r.status(),
        302,
        "login did not redirect; {}",
        log_tail(root, "uwsgi.log")
    );
    assert!(
        set_cookie(&r, "sessionid").contains("Secure"),
        "session cookie not Secure"
    );
    let r = jar.get(&with_ca, format!("{base}/identity/")).await;
    assert_eq!(r.status(), 200, "{}", log_tail(root, "uwsgi.log"));
    assert!(
        r.text().await.expect("page").contains("Sign Out"),
        "not logged in"
    );

    // Without the CA the dashboard cannot reach Keystone: the certificate does not verify.
    let mut jar = Jar::default();
    let r = login(&with_ca, &noca_base, &mut jar, &pw).await;
    assert_eq!(r.status(), 200, "{}", log_tail(root, "uwsgi-noca.log"));
    // (Django keeps an anonymous session for the form's messages: no redirect is what shows
    // the login failed.)
    let body = r.text().await.expect("body");
    // (A failed version discovery is told as a generic error, a failed token request as a
    // connection error: either way the log says why.)
    assert!(
        body.contains("Unable to establish connection to keystone endpoint.")
            || body.contains("An error occurred authenticating."),
        "{}",
        log_tail(root, "uwsgi-noca.log")
    );
    let log = log_tail(root, "uwsgi-noca.log");
    assert!(log.contains("CERTIFICATE_VERIFY_FAILED"), "{log}");
    drop(dashboards);
    eprintln!("TLS proof: {:.1} s", started.elapsed().as_secs_f64());
}
