//! End to end: TLS of our own APIs through `openstack-operator control-plane` (the binary) on
//! the suite's Kubernetes API, the test playing kubelet and controller manager
//! (`cp_common::play_controller_manager`), the test cloud's MariaDB and Keystone real.
//!
//! A Keystone and a Placement with `tls: {}`: the namespace CA Secret is generated, each API
//! gets a serving certificate from it naming its Service, the Deployments mount it and probe
//! HTTPS, the configs serve `https-socket` and verify Keystone with the CA, the endpoints are
//! `https`. A serving certificate that no longer comes from the CA is re-issued and rolls the
//! Deployment; a user's own Secret replaces the operator's, and its renewal rolls the
//! Deployment too. (The configurations themselves are booted over TLS for real by
//! controlplane-render's `tls_boot` test.)

use crate::cp_common;

use std::sync::{Arc, Mutex};

use controlplane_api::condition_types as ct;
use controlplane_render::tls;
use cp_common::*;
use e2e::{Check, Target, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn tls_volume_secret(d: &Deployment) -> Option<String> {
    d.spec
        .template
        .spec
        .as_ref()?
        .volumes
        .as_ref()?
        .iter()
        .find(|v| v.name == "api-tls")?
        .secret
        .as_ref()?
        .secret_name
        .clone()
}

fn probe_scheme(d: &Deployment) -> Option<String> {
    d.spec.template.spec.as_ref()?.containers[0]
        .readiness_probe
        .as_ref()?
        .http_get
        .as_ref()?
        .scheme
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_plane_tls_end_to_end() -> anyhow::Result<()> {
    let target = Target::from_env().await?;
    let client = target.client().await?;
    install_crds(&client).await?;
    let ns = create_namespace(&client).await?;
    let (admin_user, admin_pw) = db_admin_user()?;
    let (ks_admin_pw, ks_url) = test_cloud_keystone()?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    secrets
        .create(
            &PostParams::default(),
            &secret(
                "db-admin",
                &[("username", &admin_user), ("password", &admin_pw)],
            ),
        )
        .await?;
    // The real Keystone's admin password, so the operator's token probe (through
    // `--keystone-url`) passes.
    secrets
        .create(
            &PostParams::default(),
            &secret("ks-keystone-admin", &[("password", &ks_admin_pw)]),
        )
        .await?;
    let pp = PatchParams::apply("e2e").force();
    let apply = async |api: &Api<kube::api::DynamicObject>, v: Value| -> anyhow::Result<()> {
        let name = v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        api.patch(&name, &pp, &Patch::Apply(&v)).await?;
        Ok(())
    };
    let ext = dyn_api(
        &client,
        &ns,
        "OpenStackExternalService",
        "openstackexternalservices",
    );
    apply(&ext, json!({"apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "OpenStackExternalService", "metadata": {"name": "db"},
        "spec": {"type": "database", "endpoints": ["127.0.0.1:13306"], "credentials": {"secretName": "db-admin"}}})).await?;
    let ks_api = dyn_api(&client, &ns, "Keystone", "keystones");
    apply(&ks_api, json!({"apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "Keystone", "metadata": {"name": "ks"},
        "spec": {"database": {"service": {"name": "db"}}, "tls": {}}})).await?;
    let pl_api = dyn_api(&client, &ns, "Placement", "placements");
    apply(&pl_api, json!({"apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "Placement", "metadata": {"name": "pl"},
        "spec": {"database": {"service": {"name": "db"}}, "keystone": {"name": "ks"}, "tls": {}}})).await?;
    let gl_api = dyn_api(&client, &ns, "Glance", "glances");
    apply(&gl_api, json!({"apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "Glance", "metadata": {"name": "gl"},
        "spec": {"database": {"service": {"name": "db"}}, "keystone": {"name": "ks"}, "tls": {},
            "storage": {"file": {"size": "1Gi"}}}})).await?;

    let (_op, log_path, _) = start_operator(
        &target,
        &ns,
        &[
            "--controllers".into(),
            "external-service,keystone,placement,glance".into(),
            "--keystone-url".into(),
            format!("{ns}/ks={ks_url}"),
            "--api-url".into(),
            format!("placement/{ns}/pl=http://127.0.0.1:8778"),
            "--api-url".into(),
            format!("glance/{ns}/gl=http://127.0.0.1:9292"),
        ],
    )?;
    eprintln!("operator log: {}", log_path.display());
    let kubelet = Arc::new(Mutex::new(Kubelet::default()));
    let cm = tokio::spawn(play_controller_manager(
        client.clone(),
        ns.clone(),
        kubelet.clone(),
    ));
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let deps: Api<Deployment> = Api::namespaced(client.clone(), &ns);

    wait_for(WAIT, POLL, "Placement to be Ready", async || {
        let pl = get(&pl_api, "pl").await?;
        Ok(match cond(&pl, ct::READY) {
            Some((true, _, m)) => Check::Done(m),
            other => Check::Pending(format!("{other:?}")),
        })
    })
    .await?;

    wait_for(WAIT, POLL, "Glance to be Ready", async || {
        let gl = get(&gl_api, "gl").await?;
        Ok(match cond(&gl, ct::READY) {
            Some((true, _, m)) => Check::Done(m),
            other => Check::Pending(format!("{other:?}")),
        })
    })
    .await?;

    // 1. The namespace CA, generated once, in a cert-manager-compatible Secret.
    let ca_secret = secrets.get(tls::CA_SECRET).await?;
    assert_eq!(ca_secret.type_.as_deref(), Some(tls::SECRET_TYPE));
    let ca = secret_text(&ca_secret, tls::TLS_CRT);
    assert!(ca.contains("BEGIN CERTIFICATE"), "{ca}");
    assert_eq!(secret_text(&ca_secret, tls::CA_CRT), ca);
    assert!(secret_text(&ca_secret, tls::TLS_KEY).contains("PRIVATE KEY"));

    // 2. Each API's serving certificate from it, naming its Service; mounted, probed over HTTPS.
    for (svc, conf_secret, conf_file) in [
        ("ks-api", "ks-keystone-config", "uwsgi.ini"),
        ("pl-api", "pl-placement-config", "uwsgi.ini"),
        ("gl-api", "gl-glance-config", "uwsgi.ini"),
    ] {
        let s = secrets.get(&format!("{svc}-tls")).await?;
        assert_eq!(s.type_.as_deref(), Some(tls::SECRET_TYPE), "{svc}");
        let cert = secret_text(&s, tls::TLS_CRT);
        assert_eq!(secret_text(&s, tls::CA_CRT), ca, "{svc}");
        assert_eq!(
            tls::reissue_reason(&cert, &ca, &tls::service_dns_names(svc, &ns), now()),
            None,
            "{svc}"
        );
        let d = deps.get(svc).await?;
        assert_eq!(tls_volume_secret(&d), Some(format!("{svc}-tls")));
        assert_eq!(probe_scheme(&d).as_deref(), Some("HTTPS"), "{svc}");
        let uwsgi = secret_text(&secrets.get(conf_secret).await?, conf_file);
        assert!(
            uwsgi.contains("https-socket = 0.0.0.0:")
                && uwsgi.contains("/etc/openstack-tls/tls.crt,/etc/openstack-tls/tls.key"),
            "{uwsgi}"
        );
    }

    // 3. https endpoints; Placement verifies Keystone with the CA; the service-user Job too.
    let ks = get(&ks_api, "ks").await?;
    assert_eq!(
        ks["status"]["endpoint"].as_str(),
        Some(format!("https://ks-api.{ns}.svc:5000/v3").as_str())
    );
    let pl = get(&pl_api, "pl").await?;
    assert_eq!(
        pl["status"]["endpoint"].as_str(),
        Some(format!("https://pl-api.{ns}.svc:8778").as_str())
    );
    let config = secrets.get("pl-placement-config").await?;
    let conf = secret_text(&config, "placement.conf");
    assert!(
        conf.contains(&format!("auth_url = https://ks-api.{ns}.svc:5000/v3")),
        "{conf}"
    );
    assert!(
        conf.contains(&format!("cafile = /etc/placement/{}", tls::CLIENT_CA_FILE)),
        "{conf}"
    );
    assert_eq!(secret_text(&config, tls::CLIENT_CA_FILE), ca);
    // Glance the same way: its endpoint https, keystonemiddleware verifying Keystone.
    let gl = get(&gl_api, "gl").await?;
    assert_eq!(
        gl["status"]["endpoint"].as_str(),
        Some(format!("https://gl-api.{ns}.svc:9292").as_str())
    );
    let gl_config = secrets.get("gl-glance-config").await?;
    let gl_conf = secret_text(&gl_config, "glance-api.conf");
    assert!(
        gl_conf.contains(&format!("cafile = /etc/glance/{}", tls::CLIENT_CA_FILE)),
        "{gl_conf}"
    );
    assert_eq!(secret_text(&gl_config, tls::CLIENT_CA_FILE), ca);
    // TLSReady names the Secret served and its expiry.
    for (api, name) in [(&pl_api, "pl"), (&gl_api, "gl"), (&ks_api, "ks")] {
        let obj = get(api, name).await?;
        let (ok, reason, message) = cond(&obj, ct::TLS_READY).expect("TLSReady");
        assert!(ok, "{name}: {reason} {message}");
        assert!(
            message.contains(&format!("Secret {name}-api-tls")) && message.contains("notAfter 20"),
            "{name}: {message}"
        );
    }
    let su = jobs
        .list(&kube::api::ListParams::default().labels("app.kubernetes.io/name=placement"))
        .await?
        .items
        .into_iter()
        .find(|j| job_env(j, "SERVICE_TYPE").is_some())
        .expect("the service-user Job");
    assert_eq!(job_env(&su, tls::CA_ENV).as_deref(), Some(ca.as_str()));
    assert_eq!(
        job_env(&su, "ENDPOINT_INTERNAL"),
        Some(format!("https://pl-api.{ns}.svc:8778"))
    );

    // 4. A serving certificate not from the CA (tampered, or left from an old CA) is re-issued,
    //    and the new certificate rolls the Deployment.
    let hash1 = config_hash(&deps.get("pl-api").await?);
    let other_ca = tls::generate_ca("not the namespace CA", now())?;
    let stray = tls::issue_serving(&other_ca, &tls::service_dns_names("pl-api", &ns), now())?;
    let mut s = secrets.get("pl-api-tls").await?;
    s.data = secret(
        "x",
        &[
            (tls::TLS_CRT, stray.cert.as_str()),
            (tls::TLS_KEY, stray.key.as_str()),
            (tls::CA_CRT, other_ca.cert.as_str()),
        ],
    )
    .data;
    secrets
        .replace("pl-api-tls", &PostParams::default(), &s)
        .await?;
    let hash2 = wait_for(
        WAIT,
        POLL,
        "the re-issued certificate to roll pl-api",
        async || {
            let s = secrets.get("pl-api-tls").await?;
            let cert = secret_text(&s, tls::TLS_CRT);
            let h = config_hash(&deps.get("pl-api").await?);
            Ok(
                if cert != stray.cert
                    && tls::reissue_reason(
                        &cert,
                        &ca,
                        &tls::service_dns_names("pl-api", &ns),
                        now(),
                    )
                    .is_none()
                    && h != hash1
                {
                    Check::Done(h)
                } else {
                    Check::Pending(format!("hash {h}"))
                },
            )
        },
    )
    .await?;

    // 5. A user's Secret (as cert-manager keeps one): mounted instead; its renewal rolls again.
    let user_ca = tls::generate_ca("user CA", now())?;
    let write_user = async |cert: &tls::CertAndKey| -> anyhow::Result<()> {
        let data = tls::secret_data(cert, &user_ca.cert);
        let mut s = secret(
            "pl-user-tls",
            &data
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect::<Vec<_>>(),
        );
        s.type_ = Some(tls::SECRET_TYPE.into());
        secrets
            .patch(
                "pl-user-tls",
                &PatchParams::apply("e2e").force(),
                &Patch::Apply(&{
                    s.metadata.namespace = Some(ns.clone());
                    let mut v = serde_json::to_value(&s)?;
                    v["apiVersion"] = json!("v1");
                    v["kind"] = json!("Secret");
                    v
                }),
            )
            .await?;
        Ok(())
    };
    let names = tls::service_dns_names("pl-api", &ns);
    write_user(&tls::issue_serving(&user_ca, &names, now())?).await?;
    apply(&pl_api, json!({"apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "Placement", "metadata": {"name": "pl"},
        "spec": {"database": {"service": {"name": "db"}}, "keystone": {"name": "ks"}, "tls": {"secretName": "pl-user-tls"}}})).await?;
    let hash3 = wait_for(
        WAIT,
        POLL,
        "pl-api to mount the user's Secret",
        async || {
            let d = deps.get("pl-api").await?;
            let h = config_hash(&d);
            Ok(
                if tls_volume_secret(&d).as_deref() == Some("pl-user-tls") && h != hash2 {
                    Check::Done(h)
                } else {
                    Check::Pending(format!("{:?} {h}", tls_volume_secret(&d)))
                },
            )
        },
    )
    .await?;
    // Renewed (a new certificate in the same Secret): the Deployment rolls, keeping capacity.
    write_user(&tls::issue_serving(&user_ca, &names, now())?).await?;
    wait_for(
        WAIT,
        POLL,
        "the renewed user certificate to roll pl-api",
        async || {
            let d = deps.get("pl-api").await?;
            let h = config_hash(&d);
            Ok(if h != hash3 {
                Check::Done(h)
            } else {
                Check::Pending(h)
            })
        },
    )
    .await?;
    // Once rolled and probed, TLSReady names the user's Secret.
    wait_for(
        WAIT,
        POLL,
        "TLSReady to name the user's Secret",
        async || {
            let pl = get(&pl_api, "pl").await?;
            Ok(match cond(&pl, ct::TLS_READY) {
                Some((true, _, m)) if m.contains("Secret pl-user-tls") => Check::Done(m),
                other => Check::Pending(format!("{other:?}")),
            })
        },
    )
    .await?;
    let d = deps.get("pl-api").await?;
    let ru = d
        .spec
        .strategy
        .as_ref()
        .and_then(|s| s.rolling_update.as_ref())
        .expect("rolling update");
    assert_eq!(
        ru.max_unavailable,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(0))
    );
    cm.abort();
    Ok(())
}
