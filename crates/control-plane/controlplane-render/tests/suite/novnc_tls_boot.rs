//! Proof that the noVNC proxy serves TLS from the operator's rendering: Nova's rendered
//! `nova.conf` with the operator's TLS edits (`nova::novncproxy_tls`: `ssl_only`, `cert`,
//! `key`), a certificate issued by `controlplane_render::tls`, and the real `nova-novncproxy`
//! of the test cloud's venv. A client verifying with the operator's CA gets the proxy's web page
//! over https; a client without the CA is refused (a certificate error); plain HTTP gets no
//! page (`ssl_only`).
//!
//! Needs: `scripts/test-cloud up` (the venv). The proxy connects to no database or queue until a
//! console is opened, so nothing of the shared cloud is touched.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::support;
use support::{free_port, log_tails, proof_database, proof_keystone_auth, spawn_logged, venv_bin};

use controlplane_api::common::ServiceTemplate;
use controlplane_render::nova::{self, Databases, Messaging, NovaInputs, Paths, Peers, Vnc};
use controlplane_render::tls;

static ROOT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

fn logs() -> String {
    ROOT.get()
        .map(|r| log_tails(r, &["novncproxy.log"], 30))
        .unwrap_or_default()
}

fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(&format!(": {s}"));
        src = s.source();
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_novnc_proxy_serves_https_with_the_operators_certificate() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().to_path_buf();
    let _ = ROOT.set(root.clone());
    let port = free_port();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;

    // The operator's CA and the Nova certificate (the proxy's Service among its names).
    let ca = tls::generate_ca("openstack-operator novnc CA", now).expect("CA");
    let mut names = tls::service_dns_names("nova-novncproxy", "os");
    names.push("127.0.0.1".into());
    let cert = tls::issue_serving(&ca, &names, now).expect("certificate");
    let tls_dir = root.join("tls");
    std::fs::create_dir_all(&tls_dir).expect("tls dir");
    for (k, v) in tls::secret_data(&cert, &ca.cert) {
        std::fs::write(tls_dir.join(k), v).expect("tls file");
    }
    let web = root.join("novnc");
    std::fs::create_dir_all(&web).expect("web dir");
    let page = "<html>noVNC over TLS</html>\n";
    std::fs::write(web.join("vnc_lite.html"), page).expect("page");

    let t = ServiceTemplate::default();
    // Never connected to (the proxy opens no database until a console is used); cell0 shares
    // cell1's server and user, as rendering requires.
    let base = proof_database("cpnovnc");
    let db = |n: &str| controlplane_render::database::Database {
        name: n.into(),
        ..base.clone()
    };
    let inputs = NovaInputs {
        template: &t,
        databases: Databases {
            api: db("cpnovnc_api"),
            cell0: db("cpnovnc_cell0"),
            cell1: db("cpnovnc"),
        },
        messaging: Messaging {
            hosts: vec!["127.0.0.1:1".into()],
            user: "u".into(),
            password: "p".into(),
            vhost: "v".into(),
            ca_file: None,
        },
        keystone: proof_keystone_auth("cpnovnc"),
        cache: controlplane_render::cache::Cache::plain(vec![]),
        peers: Peers::default(),
        metadata_secret: "s".into(),
        vnc: Vnc {
            base_url: format!("https://127.0.0.1:{port}/vnc_lite.html"),
            proxy_host: "127.0.0.1".into(),
            proxy_port: port,
        },
        discover_hosts_interval: -1,
        host: "cpnovnc".into(),
        paths: Paths {
            config_dir: root.join("nova").display().to_string(),
            api_paste_config: "/nonexistent/api-paste.ini".into(),
            state_path: root.join("state").display().to_string(),
            novnc_web: web.display().to_string(),
            python_home: None,
        },
        api_listen: "127.0.0.1:0".into(),
        metadata_listen: "127.0.0.1:0".into(),
        workers: 1,
    };
    // The operator's edits, as the controller applies them with `tls` set.
    let mut files: BTreeMap<String, String> = nova::config_files(&inputs).expect("renders");
    let tls_dir_s = tls_dir.display().to_string();
    tls::edit_files(
        &mut files,
        &inputs.paths.config_dir,
        &[nova::NOVA_CONF],
        &nova::UWSGI_FILES,
        None,
        Some(&tls_dir_s),
    );
    let (crt, key) = tls::pod_files(&tls_dir_s);
    let conf = nova::novncproxy_tls(&files[nova::NOVA_CONF], &crt, &key);
    let conf_dir = root.join("nova");
    std::fs::create_dir_all(&conf_dir).expect("conf dir");
    std::fs::create_dir_all(root.join("state")).expect("state dir");
    let conf_file = conf_dir.join(nova::NOVA_CONF);
    std::fs::write(&conf_file, conf).expect("nova.conf");

    let _proxy = spawn_logged(
        &root,
        "novncproxy.log",
        "nova-novncproxy",
        &nova::service_command(
            &venv_bin("nova-novncproxy").display().to_string(),
            &inputs.paths,
        ),
    );
    let url = format!("https://127.0.0.1:{port}/vnc_lite.html");
    let with_ca = support::https_client(Some(&ca.cert));
    let body = support::until("the proxy answers over https", 120, logs, || async {
        let r = with_ca.get(&url).send().await.ok()?;
        (r.status().as_u16() == 200).then_some(())?;
        r.text().await.ok()
    })
    .await;
    assert_eq!(body, page);

    // Without the operator's CA: a certificate error, not a page.
    let err = reqwest::Client::new()
        .get(&url)
        .send()
        .await
        .expect_err("a client without the CA is refused");
    let why = chain(&err);
    assert!(
        why.to_lowercase().contains("certificate"),
        "not a certificate error: {why}"
    );
    // Plain HTTP gets no page: the proxy accepts TLS only.
    let plain = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/vnc_lite.html"))
        .send()
        .await;
    assert!(
        !matches!(&plain, Ok(r) if r.status().is_success()),
        "plain HTTP got a page: {plain:?}; {}",
        logs()
    );
}
