//! End to end for Glance, Neutron and Horizon: `openstack-operator control-plane` (the binary)
//! on the suite's Kubernetes API, the test playing kubelet and controller manager (Jobs
//! complete, Deployments roll out), with real external services behind the checks (the test
//! cloud's MariaDB, the harness's OVN northbound/southbound ovsdb-servers and its S3 over TLS
//! with the harness CA, memcached) and the authenticated probes pointed by `--api-url` at the
//! test cloud's real Glance (9292) and Neutron (9696) with a token from its real Keystone. The
//! test cloud runs no Horizon: Horizon is driven to its login-page probe, which must fail
//! there (nothing answers), and is reported Degraded naming the page. Each kind is created on
//! its own and through an `OpenStackCluster`; a bad spec per kind is InvalidSpec naming the
//! key with nothing created.

use crate::cp_common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use controlplane_api::condition_types as ct;
use cp_common::*;
use e2e::{Check, Target, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn extsvc_env() -> anyhow::Result<BTreeMap<String, String>> {
    let path = std::env::var("EXTERNAL_SERVICES_ENV")
        .unwrap_or_else(|_| "/var/cache/openstack-operator/external-services/env".into());
    let text = std::fs::read_to_string(&path)
        .map_err(|e| anyhow::anyhow!("{path}: {e}: scripts/external-services up"))?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect())
}

async fn wait_cond(
    api: &Api<kube::api::DynamicObject>,
    name: &str,
    type_: &str,
) -> anyhow::Result<(String, String)> {
    wait_for(
        std::time::Duration::from_secs(180),
        POLL,
        &format!("{name} {type_}"),
        async || {
            let o = get(api, name).await?;
            Ok(match cond(&o, type_) {
                Some((true, r, m))
                    if o["status"]["observedGeneration"] == o["metadata"]["generation"] =>
                {
                    Check::Done((r, m))
                }
                _ => Check::Pending(format!("{}", o["status"]["conditions"])),
            })
        },
    )
    .await
}

/// Names of the objects labelled with instance `name`.
async fn owned(client: &kube::Client, ns: &str, name: &str) -> anyhow::Result<usize> {
    let lp = ListParams::default().labels(&format!("app.kubernetes.io/instance={name}"));
    let s: Api<Secret> = Api::namespaced(client.clone(), ns);
    let j: Api<Job> = Api::namespaced(client.clone(), ns);
    let d: Api<Deployment> = Api::namespaced(client.clone(), ns);
    Ok(s.list(&lp).await?.items.len()
        + j.list(&lp).await?.items.len()
        + d.list(&lp).await?.items.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_plane_glance_neutron_horizon_end_to_end() -> anyhow::Result<()> {
    let env = extsvc_env()?;
    let var = |k: &str| {
        env.get(k)
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("{k} missing"))
    };
    let target = Target::from_env().await?;
    let client = target.client().await?;
    install_crds(&client).await?;
    let ns = create_namespace(&client).await?;
    let (admin_user, admin_pw) = db_admin_user()?;
    let (ks_admin_pw, ks_url) = test_cloud_keystone()?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let create = async |s: Secret| secrets.create(&PostParams::default(), &s).await;
    create(secret(
        "db-admin",
        &[("username", &admin_user), ("password", &admin_pw)],
    ))
    .await?;
    create(secret(
        "s3-creds",
        &[
            ("username", &var("EXTSVC_S3_ACCESS_KEY")?),
            ("password", &var("EXTSVC_S3_SECRET_KEY")?),
        ],
    ))
    .await?;
    let ca = std::fs::read_to_string(var("EXTSVC_CA")?)?;
    create(secret("harness-ca", &[("ca.crt", &ca)])).await?;
    // The Keystones' admin passwords are the test cloud's (their probes reach that Keystone).
    for ks in ["ks", "cloud-keystone"] {
        create(secret(
            &format!("{ks}-keystone-admin"),
            &[("password", &ks_admin_pw)],
        ))
        .await?;
    }
    let pp = PatchParams::apply("e2e").force();
    let apply = async |api: &Api<kube::api::DynamicObject>, v: Value| -> anyhow::Result<()> {
        let name = v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        api.patch(&name, &pp, &Patch::Apply(&v)).await?;
        Ok(())
    };
    let obj = |kind: &str, name: &str, spec: Value| json!({"apiVersion": "controlplane.sunet.se/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec});
    let ext = dyn_api(
        &client,
        &ns,
        "OpenStackExternalService",
        "openstackexternalservices",
    );
    apply(&ext, obj("OpenStackExternalService", "db", json!({"type": "database", "endpoints": ["127.0.0.1:13306"], "credentials": {"secretName": "db-admin"}}))).await?;
    apply(
        &ext,
        obj(
            "OpenStackExternalService",
            "mc",
            json!({"type": "cache", "endpoints": [var("EXTSVC_MEMCACHED")?]}),
        ),
    )
    .await?;
    let (nb, sb) = (var("EXTSVC_OVN_NB")?, var("EXTSVC_OVN_SB")?);
    apply(
        &ext,
        obj(
            "OpenStackExternalService",
            "ovn",
            json!({"type": "ovn", "endpoints": [nb, sb],
        "extra": {"northbound": nb, "southbound": sb}}),
        ),
    )
    .await?;
    apply(
        &ext,
        obj(
            "OpenStackExternalService",
            "s3",
            json!({"type": "objectStorage", "endpoints": [var("EXTSVC_S3_TLS")?],
        "credentials": {"secretName": "s3-creds"}, "tls": {"caSecret": {"name": "harness-ca"}}}),
        ),
    )
    .await?;

    let ks_api = dyn_api(&client, &ns, "Keystone", "keystones");
    apply(
        &ks_api,
        obj(
            "Keystone",
            "ks",
            json!({"database": {"service": {"name": "db"}}}),
        ),
    )
    .await?;
    let gl_api = dyn_api(&client, &ns, "Glance", "glances");
    let ne_api = dyn_api(&client, &ns, "Neutron", "neutrons");
    let hz_api = dyn_api(&client, &ns, "Horizon", "horizons");
    let refs = json!({"database": {"service": {"name": "db"}}, "keystone": {"name": "ks"}, "cache": {"name": "mc"}});
    let with = |extra: Value| {
        let mut v = refs.clone();
        if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        v
    };
    apply(&gl_api, obj("Glance", "gl", with(json!({"storage": {"file": {"size": "2Gi"}, "s3": {"objectStorage": {"name": "s3"}, "bucket": format!("kinds-a-{ns}")}},
        "webDownload": {"allowedHosts": ["127.0.0.1"], "allowedPorts": [18000]}})))).await?;
    apply(
        &ne_api,
        obj(
            "Neutron",
            "ne",
            with(json!({"ovn": {"name": "ovn"}, "nova": {"name": "nv"}})),
        ),
    )
    .await?;
    apply(
        &hz_api,
        obj(
            "Horizon",
            "hz",
            json!({"keystone": {"name": "ks"}, "cache": {"name": "mc"}}),
        ),
    )
    .await?;
    // Bad input, one per kind: InvalidSpec naming the key, nothing created.
    apply(&gl_api, obj("Glance", "gl-bad", with(json!({"storage": {"file": {}}, "configOverrides": {"DEFAULT": {"no_such_option": "1"}}})))).await?;
    apply(
        &ne_api,
        obj(
            "Neutron",
            "ne-bad",
            with(json!({"ovn": {"name": "ovn"}, "networks": {"geneveVniRanges": ["9:1"]}})),
        ),
    )
    .await?;
    apply(&hz_api, obj("Horizon", "hz-bad", json!({"keystone": {"name": "ks"}, "configOverrides": {"local_settings": {"SECRET_KEY": "x"}}}))).await?;
    // The composition: a cluster with all three (and its own Keystone).
    let cl_api = dyn_api(&client, &ns, "OpenStackCluster", "openstackclusters");
    apply(&cl_api, obj("OpenStackCluster", "cloud", json!({"services": ["keystone", "glance", "neutron", "horizon"],
        "externalServices": {"database": {"name": "db"}, "cache": {"name": "mc"}, "objectStorage": {"name": "s3"}, "ovn": {"name": "ovn"}}}))).await?;

    let api_urls = [
        format!("glance/{ns}/gl=http://127.0.0.1:9292"),
        format!("neutron/{ns}/ne=http://127.0.0.1:9696"),
        format!("glance/{ns}/cloud-glance=http://127.0.0.1:9292"),
        format!("neutron/{ns}/cloud-neutron=http://127.0.0.1:9696"),
        // Nothing answers here: the test cloud runs no Horizon.
        format!("horizon/{ns}/hz=http://127.0.0.1:{}", free_port()),
    ];
    let mut args = vec![
        "--keystone-url".to_string(),
        format!("{ns}/ks={ks_url},{ns}/cloud-keystone={ks_url}"),
    ];
    for u in api_urls {
        args.push("--api-url".into());
        args.push(u);
    }
    let started = std::time::Instant::now();
    let (_op, log_path, _) = start_operator(&target, &ns, &args)?;
    eprintln!("operator log: {}", log_path.display());
    let kubelet = Arc::new(Mutex::new(Kubelet::default()));
    let _cm = tokio::spawn(play_controller_manager(
        client.clone(),
        ns.clone(),
        kubelet.clone(),
    ));

    // Bad input first: refused by name, nothing created.
    for (api, name, key) in [
        (
            &gl_api,
            "gl-bad",
            "spec.configOverrides.DEFAULT.no_such_option",
        ),
        (&ne_api, "ne-bad", "spec.networks.geneveVniRanges[0]"),
        (
            &hz_api,
            "hz-bad",
            "spec.configOverrides.local_settings.SECRET_KEY",
        ),
    ] {
        let (_, m) = wait_cond(api, name, ct::INVALID_SPEC).await?;
        assert!(m.contains(key), "{name}: {m}");
        assert_eq!(
            owned(&client, &ns, name).await?,
            0,
            "{name} created objects"
        );
    }

    // Glance: both stores, Ready on a real authenticated GET /v2/images.
    let (_, m) = wait_cond(&gl_api, "gl", ct::READY).await?;
    assert!(
        m.contains("http://127.0.0.1:9292/v2/images answered an authenticated request"),
        "{m}"
    );
    let conf = String::from_utf8(
        secrets
            .get("gl-glance-config")
            .await?
            .data
            .unwrap_or_default()["glance-api.conf"]
            .0
            .clone(),
    )?;
    assert!(
        conf.contains("enabled_backends = s3:s3,file:file"),
        "{conf}"
    );
    assert!(
        conf.contains(&format!("s3_store_host = {}", var("EXTSVC_S3_TLS")?)),
        "{conf}"
    );
    assert!(
        conf.contains("s3_store_cacert = /etc/glance-s3-ca/ca.crt"),
        "{conf}"
    );
    assert!(
        conf.contains("allowed_hosts = [127.0.0.1]") && conf.contains("allowed_ports = [18000]"),
        "{conf}"
    );
    assert!(conf.contains("web-download"), "{conf}");
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let pvc = pvcs.get("gl-images").await?;
    assert!(
        pvc.metadata.owner_references.is_none(),
        "the images outlive the Glance"
    );
    let deps: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let gd = deps.get("gl-api").await?;
    let vols: Vec<String> = gd
        .spec
        .template
        .spec
        .map(|p| {
            p.volumes
                .unwrap_or_default()
                .into_iter()
                .map(|v| v.name)
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(vols, ["config", "state", "images", "s3-ca"]);
    let gl = get(&gl_api, "gl").await?;
    let steps: Vec<&str> = gl["status"]["jobs"]
        .as_array()
        .map(|j| j.iter().filter_map(|r| r["step"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(steps, ["db-init", "db-sync", "service-user"]);

    // Neutron: the server and maintenance worker rolled out, expand before and contract after,
    // Ready on a real GET /v2.0/networks but Blocked until Nova's metadata secret exists.
    let (r, m) = wait_cond(&ne_api, "ne", ct::BLOCKED).await?;
    assert_eq!(r, "MetadataSecretMissing", "{m}");
    assert!(m.contains("nv-metadata-proxy"), "{m}");
    let ne = get(&ne_api, "ne").await?;
    let steps: Vec<&str> = ne["status"]["jobs"]
        .as_array()
        .map(|j| j.iter().filter_map(|r| r["step"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        steps,
        ["db-init", "db-expand", "service-user", "db-contract"]
    );
    assert_eq!(deps.get("ne-ovn-maintenance").await?.spec.replicas, Some(1));
    let ml2 = String::from_utf8(
        secrets
            .get("ne-neutron-config")
            .await?
            .data
            .unwrap_or_default()["ml2_conf.ini"]
            .0
            .clone(),
    )?;
    assert!(
        ml2.contains(&format!("ovn_nb_connection = {nb}"))
            && ml2.contains(&format!("ovn_sb_connection = {sb}")),
        "{ml2}"
    );
    assert!(
        secrets
            .get_opt("ne-neutron-metadata-agent")
            .await?
            .is_none()
    );
    // Nova's side of the contract (the Nova helper's kind generates it).
    create(secret(
        "nv-metadata-proxy",
        &[("secret", "shared-metadata-secret")],
    ))
    .await?;
    let (_, m) = wait_cond(&ne_api, "ne", ct::READY).await?;
    assert!(
        m.contains("http://127.0.0.1:9696/v2.0/networks answered an authenticated request"),
        "{m}"
    );
    let agent = String::from_utf8(
        secrets
            .get("ne-neutron-metadata-agent")
            .await?
            .data
            .unwrap_or_default()["neutron_ovn_metadata_agent.ini"]
            .0
            .clone(),
    )?;
    assert!(
        agent.contains("metadata_proxy_shared_secret = shared-metadata-secret"),
        "{agent}"
    );
    assert!(
        agent.contains(&format!("nova_metadata_host = nv-metadata.{ns}.svc"))
            && agent.contains("nova_metadata_port = 8775"),
        "{agent}"
    );

    // Horizon: rolled out with its settings, then its login-page probe names the page.
    let (r, m) = wait_cond(&hz_api, "hz", ct::DEGRADED).await?;
    assert_eq!(r, "ProbeFailed", "{m}");
    assert!(m.contains("/auth/login/"), "{m}");
    let settings = String::from_utf8(
        secrets
            .get("hz-horizon-config")
            .await?
            .data
            .unwrap_or_default()["local_local_settings.py"]
            .0
            .clone(),
    )?;
    assert!(
        settings.contains(&format!(
            "OPENSTACK_KEYSTONE_URL = \"http://ks-api.{ns}.svc:5000/v3\""
        )),
        "{settings}"
    );
    assert!(
        settings.contains(&format!("\"LOCATION\": [\"{}\"]", var("EXTSVC_MEMCACHED")?)),
        "{settings}"
    );
    let hd = deps.get("hz-api").await?;
    let pod = hd.spec.template.spec.expect("pod");
    assert_eq!(pod.init_containers.map(|c| c.len()), Some(2));

    // The cluster: its Glance (S3 from objectStorage) and Neutron Ready; its roll-up names
    // the Horizon, whose probe has nothing to reach here.
    let (_, m) = wait_cond(&gl_api, "cloud-glance", ct::READY).await?;
    assert!(m.contains("/v2/images"), "{m}");
    let (_, m) = wait_cond(&ne_api, "cloud-neutron", ct::READY).await?;
    assert!(m.contains("/v2.0/networks"), "{m}");
    let (_, m) = wait_cond(&cl_api, "cloud", ct::DEGRADED).await?;
    assert!(m.starts_with("Horizon degraded:"), "{m}");
    let cl = get(&cl_api, "cloud").await?;
    let ready: Vec<(String, bool)> = cl["status"]["services"]
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
        .unwrap_or_default();
    assert_eq!(
        ready,
        [
            ("Keystone/cloud-keystone".to_string(), true),
            ("Glance/cloud-glance".to_string(), true),
            ("Neutron/cloud-neutron".to_string(), true),
            ("Horizon/cloud-horizon".to_string(), false),
        ]
    );
    eprintln!("everything converged in {:?}", started.elapsed());
    Ok(())
}
