//! End to end for the whole control plane as the repository ships it: the files of
//! `examples/control-plane/` (its Secrets, its five external services and the `OpenStackCluster`
//! of all seven services) applied to the suite's Kubernetes API, `openstack-operator
//! control-plane` (the binary) reconciling them, the test playing kubelet and controller
//! manager (see `cp_common::play_controller_manager`).
//!
//! What the test adapts, because the examples name a production site: the namespace, the
//! Secrets' `REPLACE-ME` values (the harness's credentials and CA), the external services'
//! endpoints (the harness's MariaDB over TLS, RabbitMQ and its vhost, memcached, radosgw and
//! its bucket, OVN over SSL on ports that need naming), and the Secrets the examples reference
//! but leave to the site (the OVN client certificate, the Keystone admin password: the test
//! cloud's, so every probe gets real tokens). Every service's API is reached through
//! `--api-url` at the test cloud's real one; Ready means it answered a request authenticated
//! with a token the real Keystone issued. The test cloud runs no Horizon, so the test boots one:
//! the real Horizon of the test cloud's venv, from the settings Secret the operator rendered
//! for the cluster's Horizon and the commands of its Deployment (as a kubelet would run the
//! pod), with the in-cluster Keystone URL resolved to the test cloud's Keystone. Then Horizon
//! is stopped: the cluster's roll-up names it, and only it; it is started again and the
//! cluster is Ready again.
//!
//! The cluster is first applied at the release before the example's (2025.2) and, once Ready,
//! upgraded to the example's own (2026.1): the operator's upgrade runs every step of the plan
//! for all seven services, the migration Jobs in dependency order with the target release's
//! images and each child's own command lines, the children rolled one by one; the operator is
//! killed and started again twice on the way (once in the migration phase, once mid-roll) and
//! resumes from `status.upgrade`. (The real commands are proved by controlplane-render's
//! `upgrade_boot` test, for Keystone, Placement and Glance.)

use crate::cp_common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use controlplane_api::condition_types as ct;
use controlplane_api::upgrade;
use controlplane_render::horizon as hz_render;
use cp_common::*;
use e2e::{Check, Target, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, Namespace, Secret};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// The example cluster's name and the children it creates, in the roll-up's order.
const CLUSTER: &str = "cloud";
const CHILDREN: [(&str, &str, &str); 7] = [
    ("Keystone", "keystones", "cloud-keystone"),
    ("Glance", "glances", "cloud-glance"),
    ("Placement", "placements", "cloud-placement"),
    ("Nova", "novas", "cloud-nova"),
    ("Neutron", "neutrons", "cloud-neutron"),
    ("Cinder", "cinders", "cloud-cinder"),
    ("Horizon", "horizons", "cloud-horizon"),
];
/// Time for the cluster to converge, Horizon's static files being collected meanwhile.
const CONVERGE: Duration = Duration::from_secs(240);
/// Time for the upgrade of the seven services (39 steps, the operator restarted twice).
const UPGRADE: Duration = Duration::from_secs(420);

/// The documents of `examples/control-plane/<file>`.
fn example(file: &str) -> anyhow::Result<Vec<Value>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/control-plane")
        .join(file);
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    Ok(api::manifest::documents(&text)?)
}

/// The harness's value for key `key` of the example Secret `secret` (pure); `None` for a key
/// the test does not know, which fails the test: a new example Secret needs a value here.
fn secret_value(env: &BTreeMap<String, String>, secret: &str, key: &str) -> Option<String> {
    let var = |k: &str| env.get(k).cloned();
    match (secret, key) {
        ("db-admin", "username") => var("EXTSVC_DB_ADMIN_USER"),
        ("db-admin", "password") => var("EXTSVC_DB_ADMIN_PASSWORD"),
        ("rabbitmq", "username") => var("EXTSVC_AMQP_USER"),
        ("rabbitmq", "password") => var("EXTSVC_AMQP_PASSWORD"),
        ("s3", "accessKey") => var("EXTSVC_S3_ACCESS_KEY"),
        ("s3", "secretKey") => var("EXTSVC_S3_SECRET_KEY"),
        ("internal-ca", "ca.crt") => var("EXTSVC_CA").and_then(|p| std::fs::read_to_string(p).ok()),
        _ => None,
    }
}

/// An example external service pointed at the harness's (pure): only endpoints and the
/// settings that name the site change; the kind, credentials and TLS stay the example's.
fn adapt_external(doc: &mut Value, env: &BTreeMap<String, String>) -> anyhow::Result<()> {
    let var = |k: &str| {
        env.get(k)
            .cloned()
            .with_context(|| format!("{k} missing from the external-services env"))
    };
    let name = doc["metadata"]["name"].as_str().unwrap_or("").to_string();
    let spec = &mut doc["spec"];
    match name.as_str() {
        "db" => spec["endpoints"] = json!([var("EXTSVC_DB")?]),
        "mq" => {
            spec["endpoints"] = json!([var("EXTSVC_AMQP")?]);
            spec["extra"]["vhost"] = json!(var("EXTSVC_AMQP_VHOST")?);
        }
        "cache" => spec["endpoints"] = json!([var("EXTSVC_MEMCACHED")?]),
        "objects" => {
            spec["endpoints"] = json!([var("EXTSVC_S3")?]);
            // The check heads the named bucket: the harness's exists.
            spec["extra"]["bucket"] = json!(var("EXTSVC_S3_BUCKET")?);
        }
        "ovn" => {
            let (nb, sb) = (var("EXTSVC_OVN_NB_SSL")?, var("EXTSVC_OVN_SB_SSL")?);
            spec["endpoints"] = json!([nb, sb]);
            // Not the standard ports 6641/6642: say which database each serves.
            spec["extra"] = json!({"northbound": nb, "southbound": sb});
        }
        other => {
            anyhow::bail!("example external service {other:?}: the test has no harness for it")
        }
    }
    Ok(())
}

/// The value of the cluster's `status.services`: (object, ready).
fn services_ready(cluster: &Value) -> Vec<(String, bool)> {
    cluster["status"]["services"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| {
                    (
                        s["object"].as_str().unwrap_or("").to_string(),
                        s["ready"].as_bool().unwrap_or(false),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The cluster's Horizon pod, played by the test: the operator's config Secret written where
/// the Deployment mounts it (under a directory of the test's), its init containers run, its
/// uwsgi started. Paths and the listen address are the pod's with the test's directory and a
/// loopback port; the in-cluster Keystone URL is resolved to the test cloud's, as cluster
/// DNS would resolve it to the Keystone's Service.
struct HorizonPod {
    dir: tempfile::TempDir,
    venv: PathBuf,
    rewrites: Vec<(String, String)>,
    main: Vec<String>,
    uwsgi: Option<service_boot::Proc>,
}

impl HorizonPod {
    fn rewrite(&self, s: &str) -> String {
        self.rewrites
            .iter()
            .fold(s.to_string(), |acc, (from, to)| acc.replace(from, to))
    }

    fn program(&self, cmd: &[String]) -> Vec<String> {
        let mut c: Vec<String> = cmd.iter().map(|a| self.rewrite(a)).collect();
        if let Some(p) = c.first_mut() {
            // The image's programs are the venv's.
            *p = self.venv.join("bin").join(&*p).display().to_string();
        }
        c
    }

    /// Mounts the config Secret as the Deployment's volume says and runs its init containers.
    fn prepare(
        dep: &Deployment,
        config: &Secret,
        port: u16,
        keystone: (&str, &str),
    ) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("cp-full-horizon-")
            .tempdir()?;
        let venv = service_boot::test_cloud_dir().join("horizon-venv");
        anyhow::ensure!(
            venv.join("bin/uwsgi").exists(),
            "{} has no Horizon: run scripts/control-plane-deps",
            venv.display()
        );
        let conf = dir.path().join("conf");
        let rewrites = vec![
            (
                hz_render::POD_CONFIG_DIR.to_string(),
                conf.display().to_string(),
            ),
            (
                hz_render::POD_STATIC_ROOT.to_string(),
                dir.path().join("static").display().to_string(),
            ),
            (
                format!("http-socket = 0.0.0.0:{}", hz_render::PORT),
                format!("http-socket = 127.0.0.1:{port}\nhome = {}", venv.display()),
            ),
            (keystone.0.to_string(), keystone.1.to_string()),
        ];
        let pod = dep
            .spec
            .template
            .spec
            .clone()
            .context("Horizon's Deployment has no pod spec")?;
        let items = pod
            .volumes
            .unwrap_or_default()
            .into_iter()
            .find(|v| v.name == "config")
            .and_then(|v| v.secret)
            .and_then(|s| s.items)
            .context("Horizon's Deployment mounts no config Secret items")?;
        let mut me = HorizonPod {
            dir,
            venv,
            rewrites,
            main: Vec::new(),
            uwsgi: None,
        };
        for item in items {
            let text = secret_text(config, &item.key);
            let path = conf.join(&item.path);
            std::fs::create_dir_all(path.parent().unwrap_or(&conf))?;
            std::fs::write(&path, me.rewrite(&text))?;
        }
        let run = |c: &Container| -> Vec<String> {
            c.command
                .clone()
                .unwrap_or_default()
                .into_iter()
                .chain(c.args.clone().unwrap_or_default())
                .collect()
        };
        for init in pod.init_containers.unwrap_or_default() {
            let cmd = me.program(&run(&init));
            let mut c = Command::new(&cmd[0]);
            c.args(&cmd[1..]);
            for e in init.env.unwrap_or_default() {
                c.env(&e.name, me.rewrite(&e.value.unwrap_or_default()));
            }
            let out = c.output().with_context(|| format!("running {cmd:?}"))?;
            anyhow::ensure!(
                out.status.success(),
                "init container {}: {}",
                init.name,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        me.main = me.program(&run(pod.containers.first().context("no container")?));
        Ok(me)
    }

    fn start(&mut self) -> anyhow::Result<()> {
        let log = std::fs::File::create(self.dir.path().join("uwsgi.log"))?;
        let child = Command::new(&self.main[0])
            .args(&self.main[1..])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {:?}", self.main))?;
        self.uwsgi = Some(service_boot::Proc(child, "horizon uwsgi"));
        Ok(())
    }

    fn stop(&mut self) {
        self.uwsgi = None;
    }

    fn log_tail(&self) -> String {
        service_boot::log_tails(self.dir.path(), &["uwsgi.log"], 30)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_plane_full_example_cluster_end_to_end() -> anyhow::Result<()> {
    let env = harness_env()?;
    let target = Target::from_env().await?;
    let client = target.client().await?;
    install_crds(&client).await?;
    let ns = create_namespace(&client).await?;
    let (ks_admin_pw, ks_url) = test_cloud_keystone()?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);

    // 10-secrets.yaml: every Secret of the example, its keys given the harness's values.
    for doc in example("10-secrets.yaml")? {
        let name = doc["metadata"]["name"].as_str().unwrap_or("").to_string();
        let mut data = Vec::new();
        for (key, example_value) in doc["stringData"].as_object().into_iter().flatten() {
            let v = secret_value(&env, &name, key)
                .with_context(|| format!("no harness value for Secret {name} key {key}"))?;
            assert_ne!(Some(v.as_str()), example_value.as_str(), "{name}/{key}");
            data.push((key.clone(), v));
        }
        let data: Vec<(&str, &str)> = data.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        secrets
            .create(&PostParams::default(), &secret(&name, &data))
            .await?;
    }
    // What the examples reference and leave to the site: the OVN client certificate (a
    // cert-manager Certificate's Secret there) and the Keystone's admin password, the test
    // cloud's so that the probes get real tokens.
    let read = |k: &str| -> anyhow::Result<String> {
        let p = env.get(k).with_context(|| format!("{k} missing"))?;
        Ok(std::fs::read_to_string(p)?)
    };
    for s in [
        secret(
            "ovn-client-tls",
            &[
                ("tls.crt", &read("EXTSVC_CLIENT_CERT")?),
                ("tls.key", &read("EXTSVC_CLIENT_KEY")?),
            ],
        ),
        secret(
            "cloud-keystone-keystone-admin",
            &[("password", &ks_admin_pw)],
        ),
    ] {
        secrets.create(&PostParams::default(), &s).await?;
    }
    let pp = PatchParams::apply("e2e").force();
    let ext = dyn_api(
        &client,
        &ns,
        "OpenStackExternalService",
        "openstackexternalservices",
    );
    let mut ext_names = Vec::new();
    for mut doc in example("20-external-services.yaml")? {
        doc["metadata"]["namespace"] = json!(ns);
        adapt_external(&mut doc, &env)?;
        let name = doc["metadata"]["name"].as_str().unwrap_or("").to_string();
        ext.patch(&name, &pp, &Patch::Apply(&doc)).await?;
        ext_names.push(name);
    }
    let cl_api = dyn_api(&client, &ns, "OpenStackCluster", "openstackclusters");
    let mut cluster = example("30-cluster.yaml")?
        .into_iter()
        .next()
        .context("30-cluster.yaml is empty")?;
    anyhow::ensure!(cluster["metadata"]["name"] == CLUSTER, "{cluster}");
    let services: Vec<&str> = cluster["spec"]["services"]
        .as_array()
        .map(|a| a.iter().filter_map(|s| s.as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        services.len(),
        7,
        "the example runs all seven services: {services:?}"
    );
    cluster["metadata"]["namespace"] = json!(ns);
    // The release before the example's, for the upgrade at the end.
    let example_release = cluster["spec"]["release"].clone();
    assert_eq!(example_release, upgrade::UPGRADE_EDGES[0].1);
    cluster["spec"]["release"] = json!(upgrade::UPGRADE_EDGES[0].0);
    cl_api.patch(CLUSTER, &pp, &Patch::Apply(&cluster)).await?;

    // Every API at the test cloud's; Horizon at the one this test boots.
    let horizon_port = service_boot::free_port();
    let mut args = vec![
        "--keystone-url".to_string(),
        format!("{ns}/cloud-keystone={ks_url}"),
    ];
    for (svc, url) in [
        ("placement", "http://127.0.0.1:8778".to_string()),
        ("glance", "http://127.0.0.1:9292".into()),
        ("neutron", "http://127.0.0.1:9696".into()),
        ("nova", "http://127.0.0.1:8774/v2.1".into()),
        ("cinder", "http://127.0.0.1:8776".into()),
        ("horizon", format!("http://127.0.0.1:{horizon_port}")),
    ] {
        args.push("--api-url".into());
        args.push(format!("{svc}/{ns}/cloud-{svc}={url}"));
    }
    let started = Instant::now();
    let (mut op, log_path, _) = start_operator(&target, &ns, &args)?;
    eprintln!("operator log: {}", log_path.display());
    let kubelet = Arc::new(Mutex::new(Kubelet::default()));
    let cm = tokio::spawn(play_controller_manager(
        client.clone(),
        ns.clone(),
        kubelet.clone(),
    ));

    // The external services, checked for real against the harness.
    for name in &ext_names {
        wait_cond(&ext, name, ct::READY, WAIT).await?;
    }

    // Horizon's pod: once the operator has rendered its settings and Deployment.
    let deps: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let ks_api = dyn_api(&client, &ns, "Keystone", "keystones");
    let dep = wait_for(WAIT, POLL, "Horizon's Deployment", async || {
        Ok(match deps.get_opt("cloud-horizon-api").await? {
            Some(d) => Check::Done(d),
            None => Check::Pending("not yet".into()),
        })
    })
    .await?;
    let config = secrets.get("cloud-horizon-horizon-config").await?;
    let ks_internal = get(&ks_api, "cloud-keystone").await?["status"]["endpoint"]
        .as_str()
        .context("the Keystone has no endpoint in status")?
        .to_string();
    let settings = secret_text(&config, "local_local_settings.py");
    assert!(
        settings.contains(&format!("OPENSTACK_KEYSTONE_URL = \"{ks_internal}\"")),
        "{settings}"
    );
    assert!(
        settings.contains("SESSION_TIMEOUT = 7200"),
        "the example's override: {settings}"
    );
    let boot = Instant::now();
    let ks_origin = ks_url.clone();
    let mut horizon = tokio::task::spawn_blocking(move || {
        HorizonPod::prepare(&dep, &config, horizon_port, (&ks_internal, &ks_origin))
    })
    .await??;
    horizon.start()?;
    eprintln!(
        "Horizon's init containers ran in {:.1} s",
        boot.elapsed().as_secs_f64()
    );

    // The cluster and every child Ready, each on its real probe.
    let ready = wait_for(CONVERGE, POLL, "the cluster Ready", async || {
        let o = get(&cl_api, CLUSTER).await?;
        Ok(match cond(&o, ct::READY) {
            Some((true, _, m))
                if o["status"]["observedGeneration"] == o["metadata"]["generation"] =>
            {
                Check::Done(m)
            }
            other => Check::Pending(format!("{other:?}; Horizon: {}", horizon.log_tail())),
        })
    })
    .await?;
    eprintln!(
        "the cluster was Ready {:.1} s after the operator started",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(ready, "7 services Ready");
    let expected: Vec<(String, bool)> = CHILDREN
        .iter()
        .map(|(kind, _, name)| (format!("{kind}/{name}"), true))
        .collect();
    assert_eq!(services_ready(&get(&cl_api, CLUSTER).await?), expected);
    for (kind, plural, name) in CHILDREN {
        let (_, m) = wait_cond(&dyn_api(&client, &ns, kind, plural), name, ct::READY, WAIT).await?;
        let probe = match kind {
            "Keystone" => format!("{ks_url} issued a token"),
            "Placement" => {
                "http://127.0.0.1:8778/resource_providers answered an authenticated request".into()
            }
            "Glance" => "http://127.0.0.1:9292/v2/images answered an authenticated request".into(),
            "Neutron" => {
                "http://127.0.0.1:9696/v2.0/networks answered an authenticated request".into()
            }
            "Nova" => "http://127.0.0.1:8774/v2.1/servers answered an authenticated request".into(),
            "Cinder" => "http://127.0.0.1:8776/v3/types answered an authenticated request".into(),
            _ => format!("http://127.0.0.1:{horizon_port}/auth/login/ answered 200"),
        };
        assert!(m.contains(&probe), "{kind}: {m}");
    }
    // The example's templates reached the children.
    assert_eq!(deps.get("cloud-keystone-api").await?.spec.replicas, Some(3));
    assert_eq!(deps.get("cloud-horizon-api").await?.spec.replicas, Some(2));

    // Horizon stops: the roll-up names it, and no other child.
    horizon.stop();
    let (reason, m) = wait_cond(&cl_api, CLUSTER, ct::DEGRADED, WAIT).await?;
    assert_eq!(reason, "ServiceDegraded", "{m}");
    assert!(
        m.starts_with("Horizon degraded: ")
            && m.contains(&format!("http://127.0.0.1:{horizon_port}/auth/login/")),
        "{m}"
    );
    let failing: Vec<(String, bool)> = expected
        .iter()
        .map(|(o, _)| (o.clone(), o != "Horizon/cloud-horizon"))
        .collect();
    assert_eq!(services_ready(&get(&cl_api, CLUSTER).await?), failing);

    // Horizon again: Ready again.
    horizon.start()?;
    let (_, m) = wait_cond(&cl_api, CLUSTER, ct::READY, WAIT).await?;
    assert_eq!(m, "7 services Ready");
    assert_eq!(services_ready(&get(&cl_api, CLUSTER).await?), expected);

    // The upgrade to the example's release.
    let upgrade_started = Instant::now();
    cluster["spec"]["release"] = example_release.clone();
    cl_api.patch(CLUSTER, &pp, &Patch::Apply(&cluster)).await?;
    let mut kills: Vec<String> = Vec::new();
    let mut rolled: Vec<Vec<String>> = Vec::new();
    let releases = async || -> anyhow::Result<Vec<String>> {
        let mut out = Vec::new();
        for (kind, plural, name) in CHILDREN {
            let o = get(&dyn_api(&client, &ns, kind, plural), name).await?;
            out.push(o["spec"]["release"].as_str().unwrap_or("").to_string());
        }
        Ok(out)
    };
    let done = wait_for(UPGRADE, POLL, "the upgrade to complete", async || {
        let c = get(&cl_api, CLUSTER).await?;
        let u = &c["status"]["upgrade"];
        let phase = u["phase"].as_str().unwrap_or("").to_string();
        let r = releases().await?;
        if rolled.last() != Some(&r) {
            rolled.push(r);
        }
        // Killed at the first migration step and mid-roll (after Neutron's roll, before Nova's
        // is done), each time started again: the new operator resumes from the status.
        let done_step = |n: &str| {
            u["completedSteps"]
                .as_array()
                .is_some_and(|s| s.iter().any(|x| x == n))
        };
        let kill_at = match kills.len() {
            0 => done_step("Migrate/keystone/expand"),
            1 => done_step("RollControlPlane/neutron/roll"),
            _ => false,
        };
        if kill_at {
            kills.push(u["step"].as_str().unwrap_or("").to_string());
            drop(std::mem::replace(
                &mut op,
                start_operator(&target, &ns, &args)?.0,
            ));
        }
        Ok(
            if c["status"]["currentRelease"] == example_release
                && phase == "Complete"
                && cond(&c, ct::READY).is_some_and(|r| r.0)
            {
                Check::Done(c)
            } else {
                Check::Pending(format!("{} {:?}", u["step"], cond(&c, ct::READY)))
            },
        )
    })
    .await?;
    eprintln!(
        "the upgrade took {:.1} s; the operator was restarted at {kills:?}",
        upgrade_started.elapsed().as_secs_f64()
    );
    assert_eq!(kills.len(), 2, "{kills:?}");
    let plan: Vec<String> = upgrade::plan(&upgrade::ROLL_ORDER, false)
        .iter()
        .map(upgrade::Step::name)
        .collect();
    assert_eq!(
        done["status"]["upgrade"]["completedSteps"],
        json!(plan),
        "every step once, in the plan's order"
    );
    // The children moved to the new release one at a time, in the dependency order (the
    // roll-up's order is Keystone, Glance, Placement, Nova, Neutron, Cinder, Horizon).
    let old = upgrade::UPGRADE_EDGES[0].0.to_string();
    let new = upgrade::UPGRADE_EDGES[0].1.to_string();
    let order = [
        "Keystone",
        "Placement",
        "Glance",
        "Neutron",
        "Nova",
        "Cinder",
        "Horizon",
    ];
    // Each observation: a child once on the new release stays there; the children that moved
    // between two observations (one, unless the poll missed a roll) in dependency order.
    assert_eq!(rolled.first(), Some(&vec![old.clone(); 7]), "{rolled:?}");
    assert_eq!(rolled.last(), Some(&vec![new.clone(); 7]), "{rolled:?}");
    let mut moved: Vec<&str> = Vec::new();
    for pair in rolled.windows(2) {
        let mut now: Vec<&str> = Vec::new();
        for (i, (kind, _, _)) in CHILDREN.iter().enumerate() {
            assert!(
                pair[0][i] != new || pair[1][i] == new,
                "{kind} went back: {rolled:?}"
            );
            if pair[0][i] == old && pair[1][i] == new {
                now.push(kind);
            }
        }
        now.sort_by_key(|k| order.iter().position(|o| o == k));
        moved.extend(now);
    }
    assert_eq!(
        moved, order,
        "the children's releases as the upgrade went: {rolled:?}"
    );
    // The migration Jobs, in the order the test completed them: the plan's order, each the
    // target release's image running its service's management program.
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), &ns);
    let all = jobs
        .list(&kube::api::ListParams::default().labels("controlplane.sunet.se/step=upgrade"))
        .await?
        .items;
    let completed = kubelet
        .lock()
        .map(|k| k.completed.clone())
        .unwrap_or_default();
    let ran: Vec<(String, String, String)> = completed
        .iter()
        .filter_map(|n| {
            all.iter()
                .find(|j| &j.metadata.name.clone().unwrap_or_default() == n)
        })
        .map(|j| {
            let ctr = j
                .spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .and_then(|p| p.containers.first())
                .cloned()
                .unwrap_or_default();
            (
                j.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("controlplane.sunet.se/input-hash"))
                    .cloned()
                    .unwrap_or_default(),
                ctr.image.unwrap_or_default(),
                ctr.command.unwrap_or_default().join(" "),
            )
        })
        .collect();
    let migrations: Vec<String> = upgrade::plan(&upgrade::ROLL_ORDER, false)
        .iter()
        .filter(|s| s.manage_command().is_some())
        .map(upgrade::Step::name)
        .collect();
    assert_eq!(
        ran.iter().map(|r| r.0.clone()).collect::<Vec<_>>(),
        migrations,
        "one Job per migration step, in dependency order, none run twice"
    );
    for (step, image, command) in &ran {
        let svc = step.split('/').nth(1).unwrap_or_default();
        assert_eq!(image, &format!("localhost/openstack-{svc}:{new}"), "{step}");
        let (program, args) = upgrade::plan(&upgrade::ROLL_ORDER, false)
            .into_iter()
            .find(|s| &s.name() == step)
            .and_then(|s| s.manage_command())
            .context("a migration step")?;
        assert!(
            command.starts_with(&format!("{program} --config-file "))
                && command.ends_with(&args.join(" ")),
            "{step}: {command}"
        );
    }
    let (_, m) = wait_cond(&cl_api, CLUSTER, ct::READY, WAIT).await?;
    assert_eq!(m, "7 services Ready");
    eprintln!("whole test {:.1} s", started.elapsed().as_secs_f64());

    cm.abort();
    horizon.stop();
    let nss: Api<Namespace> = Api::all(client.clone());
    let _ = nss.delete(&ns, &Default::default()).await;
    Ok(())
}
