//! The two halves of the product prove each other: a whole cloud booted purely from the
//! control-plane operator's rendered configuration (Keystone, Placement, Glance, Neutron with
//! ML2/OVN, Nova with a fake-driver compute node, Cinder; see `service_boot::cloud`), and the
//! resource operator's own `examples/*.yaml`, applied unchanged through the binary on the
//! Kubernetes API emulator, reaching Ready against that cloud's Keystone, then deleted with
//! nothing left behind in OpenStack.
//!
//! What the test supplies that is not in the examples, because the examples assume it of the
//! cloud (the shared test cloud provides the same): the operator's `clouds.yaml` entry for this
//! cloud's admin, `--federation-namespaces openstack-federation` (as `scripts/demo` runs it),
//! the flat provider network `external` with a subnet that `30-project-full.yaml` routes to,
//! and Glance's web-download allow-list for the test cloud's image server that
//! `10-image.yaml` imports from.
//!
//! Needs: `scripts/test-cloud up` (the venv and its image server on 127.0.0.1:18000),
//! `scripts/external-services up` and `scripts/control-plane-deps`. Its databases are
//! `cloudex_*` on the harness's MariaDB; its RabbitMQ exchanges `cloudex_*_<random>`.

use std::time::{Duration, Instant};

use e2e::k8s::Applied;
use e2e::wait::{Check, wait_for};
use e2e::{CloudEnv, EnvOptions, Target, TestEnv};
use kube::api::{Api, DynamicObject};
use openstack::model::{NetworkFilter, ProjectFilter};
use serde_json::{Value, json};
use service_boot::cloud::{CloudOptions, RenderedCloud, logs};

const BIN: &str = env!("CARGO_BIN_EXE_openstack-operator");
/// The image server `examples/10-image.yaml` imports from.
const IMAGE_SERVER_PORT: u16 = 18000;
/// Time for every example to reach Ready (the project's router and quotas are the slow part).
const READY: Duration = Duration::from_secs(300);

/// The repository's `examples/*.yaml`, in file-name order (the order `kubectl apply -f` takes).
fn examples() -> Vec<(String, String)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("examples/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("example file");
            (
                p.file_name().unwrap_or_default().to_string_lossy().into(),
                text,
            )
        })
        .collect()
}

/// An admin token of the booted cloud.
async fn admin_token(client: &reqwest::Client, cloud: &RenderedCloud) -> String {
    let body = json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": "admin", "domain": {"id": "default"}, "password": cloud.admin_password}}},
        "scope": {"project": {"name": "admin", "domain": {"id": "default"}}}}});
    let resp = client
        .post(format!("{}/auth/tokens", cloud.keystone_url))
        .json(&body)
        .send()
        .await
        .expect("token request");
    assert_eq!(resp.status(), 201, "admin token; {}", logs());
    resp.headers()
        .get("x-subject-token")
        .and_then(|v| v.to_str().ok())
        .expect("X-Subject-Token")
        .to_string()
}

/// POST to Neutron as the admin; the created object.
async fn neutron_post(
    client: &reqwest::Client,
    cloud: &RenderedCloud,
    token: &str,
    path: &str,
    body: Value,
) -> Value {
    let url = format!("{}/v2.0/{path}", cloud.endpoints["neutron"]);
    let resp = client
        .post(&url)
        .header("X-Auth-Token", token)
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e}; {}", logs()));
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    assert_eq!(status, 201, "POST {url}: {text}; {}", logs());
    serde_json::from_str(&text).expect("Neutron JSON")
}

/// Whether a resource is fully reconciled: phase Ready and a true Ready condition, both at the
/// current generation; otherwise a summary of where it is.
fn ready(o: &DynamicObject) -> Result<(), String> {
    let gen_ = o.metadata.generation;
    let status = &o.data["status"];
    let cond = status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or(Value::Null);
    if status["phase"] == "Ready"
        && status["observedGeneration"].as_i64() == gen_
        && cond["status"] == "True"
        && cond["observedGeneration"].as_i64() == gen_
    {
        Ok(())
    } else {
        Err(format!(
            "phase {}, Ready {} {}: {}",
            status["phase"], cond["status"], cond["reason"], cond["message"]
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn examples_reach_ready_on_a_cloud_booted_from_rendered_configuration() {
    let started = Instant::now();
    let cloud = RenderedCloud::boot(CloudOptions {
        prefix: "cloudex".into(),
        web_download: controlplane_render::glance::WebDownload {
            allowed_schemes: vec!["http".into()],
            allowed_hosts: vec!["127.0.0.1".into()],
            allowed_ports: vec![IMAGE_SERVER_PORT],
        },
        tls: false,
    })
    .await;
    let boot_time = started.elapsed();
    for (phase, d) in &cloud.timings {
        eprintln!("cloud boot: {phase}: {:.1} s", d.as_secs_f64());
    }

    // The provider network the full project's router uses, as the test cloud has one.
    let http = reqwest::Client::new();
    let token = admin_token(&http, &cloud).await;
    let external = neutron_post(
        &http,
        &cloud,
        &token,
        "networks",
        json!({"network": {"name": "external", "router:external": true, "shared": false,
            "provider:network_type": "flat", "provider:physical_network": "physnet1"}}),
    )
    .await;
    let external_id = external["network"]["id"]
        .as_str()
        .expect("network id")
        .to_string();
    neutron_post(
        &http,
        &cloud,
        &token,
        "subnets",
        json!({"subnet": {"name": "external-v4", "network_id": external_id, "ip_version": 4,
            "cidr": "203.0.113.0/24", "enable_dhcp": false}}),
    )
    .await;

    let clouds_yaml = cloud.write_clouds_yaml("cloudex");
    let target = Target::with_cloud(CloudEnv {
        os_cloud: "cloudex".into(),
        config_file: clouds_yaml,
        image_url_base: None,
    })
    .await
    .expect("the Kubernetes API");
    let mut opts = EnvOptions::new(BIN, "examples-on-rendered-cloud");
    opts.operator.extra_args = vec![
        "--federation-namespaces".into(),
        "openstack-federation".into(),
    ];
    opts.cleanup_timeout = READY;
    let env = TestEnv::start_on(target, "examples-on-rendered-cloud", opts)
        .await
        .expect("the operator against the rendered cloud");

    let mut ready_time = Duration::ZERO;
    let outcome = env
        .run(async |env| {
            let applying = Instant::now();
            let mut applied: Vec<Applied> = Vec::new();
            for (file, text) in examples() {
                let objs = env
                    .apply(&text)
                    .await
                    .map_err(|e| e.context(format!("applying examples/{file}")))?;
                applied.extend(objs);
            }
            let resources: Vec<&Applied> = applied
                .iter()
                .filter(|a| a.resource.group == "sunet.se")
                .collect();
            anyhow::ensure!(
                resources.len() == 5,
                "the examples hold five resources: {:?}",
                resources.iter().map(|a| &a.name).collect::<Vec<_>>()
            );
            for a in &resources {
                let api: Api<DynamicObject> = match &a.namespace {
                    Some(ns) => Api::namespaced_with(env.client.clone(), ns, &a.resource),
                    None => Api::all_with(env.client.clone(), &a.resource),
                };
                wait_for(
                    READY,
                    Duration::from_millis(500),
                    &format!("{} {} to be Ready", a.kind, a.name),
                    async || {
                        Ok(match api.get_opt(&a.name).await? {
                            Some(o) => match ready(&o) {
                                Ok(()) => Check::Done(()),
                                Err(s) => Check::Pending(s),
                            },
                            None => Check::Pending("gone".into()),
                        })
                    },
                )
                .await
                .map_err(|e| anyhow::anyhow!("{e:#}; {}", logs()))?;
                eprintln!(
                    "{} {} Ready after {:.1} s",
                    a.kind,
                    a.name,
                    applying.elapsed().as_secs_f64()
                );
            }
            ready_time = applying.elapsed();

            // The objects are in this cloud.
            let c = &env.cloud;
            let domain = c
                .identity
                .find_domain("sso-users")
                .await?
                .ok_or_else(|| anyhow::anyhow!("domain sso-users is not in Keystone"))?;
            let project = c
                .identity
                .find_project(&domain.id, "research-lab.example.com")
                .await?
                .ok_or_else(|| anyhow::anyhow!("the project is not in Keystone"))?;
            anyhow::ensure!(c.compute.find_flavor("b2.c2r4").await?.is_some());
            let images = c.image.list_images_by_name("cirros-demo").await?;
            anyhow::ensure!(
                images.len() == 1 && images[0].status == openstack::model::ImageStatus::Active,
                "image: {images:?}"
            );
            let named = |n: &str| NetworkFilter {
                name: Some(n.into()),
                ..Default::default()
            };
            anyhow::ensure!(
                c.network
                    .list_networks(&named("provider-vlan-100"))
                    .await?
                    .len()
                    == 1
            );

            // Deleting every example (resources first, as `kubectl delete -f` would in reverse
            // order) removes what the operator made.
            for a in applied.iter().rev() {
                let api: Api<DynamicObject> = match &a.namespace {
                    Some(ns) => Api::namespaced_with(env.client.clone(), ns, &a.resource),
                    None => Api::all_with(env.client.clone(), &a.resource),
                };
                e2e::k8s::delete_dynamic_and_wait(&api, &a.name, READY)
                    .await
                    .map_err(|e| anyhow::anyhow!("deleting {} {}: {e:#}", a.kind, a.name))?;
            }
            anyhow::ensure!(
                c.identity.find_domain("sso-users").await?.is_none(),
                "domain sso-users left behind"
            );
            let projects = c
                .identity
                .list_projects(&ProjectFilter {
                    name: Some("research-lab.example.com".into()),
                    ..Default::default()
                })
                .await?;
            anyhow::ensure!(projects.is_empty(), "project left behind: {projects:?}");
            anyhow::ensure!(
                c.compute.find_flavor("b2.c2r4").await?.is_none(),
                "flavor left behind"
            );
            anyhow::ensure!(
                c.image.list_images_by_name("cirros-demo").await?.is_empty(),
                "image left behind"
            );
            for n in ["provider-vlan-100", "internal", "storage"] {
                let left = c.network.list_networks(&named(n)).await?;
                anyhow::ensure!(left.is_empty(), "network {n} left behind: {left:?}");
            }
            let _ = project;
            Ok(())
        })
        .await;
    let rss = cloud.rss_mib();
    eprintln!(
        "booted services' RSS (MiB): {} = {} MiB in all",
        rss.iter()
            .map(|(n, m)| format!("{n} {m}"))
            .collect::<Vec<_>>()
            .join(", "),
        rss.iter().map(|(_, m)| m).sum::<u64>()
    );
    eprintln!(
        "boot {:.1} s, examples Ready {:.1} s, whole test {:.1} s",
        boot_time.as_secs_f64(),
        ready_time.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    if let Err(e) = outcome {
        panic!("{e:#}\n{}", logs());
    }
    // The provider network goes last, through Neutron (its OVN switch with it).
    let url = format!("{}/v2.0/networks/{external_id}", cloud.endpoints["neutron"]);
    let resp = http
        .delete(&url)
        .header("X-Auth-Token", &token)
        .send()
        .await
        .expect("DELETE external network");
    assert_eq!(resp.status(), 204, "DELETE {url}; {}", logs());
}
