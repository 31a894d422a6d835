//! End to end: availability zones through `openstack-operator control-plane` (the binary) on
//! the suite's Kubernetes API, the test playing kubelet and controller manager (see
//! `cp_common::play_controller_manager`), with the real external services of
//! `e2e_control_plane_compute` (the test cloud's MariaDB, the harness's RabbitMQ; Ready means
//! the test cloud's real Nova and Cinder answered a token of its real Keystone). A Nova and a
//! Cinder with three zones get one volume Deployment per zone pinned to the zone's nodes, one
//! compute configuration Secret per zone, the aggregate Job with the three zones and their
//! hosts, and zone spread constraints on the zone-wide Deployments; a zone removed from the
//! list takes its objects with it and runs the aggregate Job again. The listed hosts, which the
//! test cloud does not run, are named by `ZonesComplete=False` (`ComputeHostsMissing`) while
//! Nova is Ready.

use crate::cp_common;

use std::sync::{Arc, Mutex};

use controlplane_api::condition_types as ct;
use cp_common::*;
use e2e::{Check, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{DynamicObject, ListParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

const ZONE_LABEL: &str = "controlplane.sunet.se/availability-zone";

async fn wait_ready(api: &Api<DynamicObject>, name: &str, what: &str) -> anyhow::Result<String> {
    wait_for(WAIT, POLL, what, async || {
        let o = get(api, name).await?;
        let current = o["status"]["observedGeneration"] == o["metadata"]["generation"];
        Ok(match cond(&o, ct::READY) {
            Some((true, _, m)) if current => Check::Done(m),
            other => Check::Pending(format!("{other:?}")),
        })
    })
    .await
}

fn spread_keys(d: &Deployment) -> Vec<(String, String)> {
    d.spec
        .template
        .spec
        .as_ref()
        .and_then(|p| p.topology_spread_constraints.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.topology_key, c.when_unsatisfiable))
        .collect()
}

/// The `ZONES` of the newest aggregate Job of Nova `nv`.
async fn aggregate_zones(jobs: &Api<Job>) -> anyhow::Result<Vec<Value>> {
    let mut list = jobs
        .list(&ListParams::default().labels("controlplane.sunet.se/step=aggregates"))
        .await?
        .items;
    list.sort_by_key(|j| j.metadata.creation_timestamp.clone());
    let z = list
        .last()
        .and_then(|j| job_env(j, "ZONES"))
        .ok_or_else(|| anyhow::anyhow!("no aggregate Job"))?;
    Ok(serde_json::from_str::<Vec<Value>>(&z)?)
}

/// Three zones on a Nova and a Cinder: per-zone Deployments, Secrets and the aggregate Job;
/// two zones afterwards: the third's objects are removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_plane_three_availability_zones() -> anyhow::Result<()> {
    let ComputeStage {
        target,
        client,
        ns,
        ks_url,
        admin_user,
    } = compute_stage().await?;
    let pl_api = dyn_api(&client, &ns, "Placement", "placements");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let zones = json!([
        {"name": "az1", "computeHosts": ["compute-a1", "compute-a2"]},
        {"name": "az2", "topologyValue": "dc-b", "computeHosts": ["compute-b1"]},
        {"name": "az3", "nodeSelector": {"rack": "r3"}, "computeHosts": ["compute-c1"]}]);
    let nv_api = dyn_api(&client, &ns, "Nova", "novas");
    let mut nova = json!({"apiVersion": API, "kind": "Nova", "metadata": {"name": "nv"},
        "spec": {"database": {"service": {"name": "db"}}, "keystone": {"name": "ks"},
                 "messaging": {"name": "mq"}, "placement": {"name": "pl"},
                 "replicas": 3, "availabilityZones": zones}});
    apply(&nv_api, &nova).await?;
    let cn_api = dyn_api(&client, &ns, "Cinder", "cinders");
    let mut cinder = json!({"apiVersion": API, "kind": "Cinder", "metadata": {"name": "cn"},
        "spec": {"database": {"service": {"name": "db"}}, "keystone": {"name": "ks"},
                 "messaging": {"name": "mq"}, "availabilityZones": zones,
                 "backends": [
                    {"name": "ceph", "rbd": {"pool": "volumes", "user": "cinder",
                     "cephConf": "[global]\nmon host = 127.0.0.1:16789\n",
                     "keyringSecret": {"name": "ceph-keyring", "key": "keyring"},
                     "secretUuid": "457eb676-33da-42ec-9a8c-9293d545c337"}},
                    {"name": "local", "availabilityZone": "az3",
                     "nfs": {"shares": ["127.0.0.1:/export"]}}]}});
    apply(&cn_api, &cinder).await?;
    // A backend in a zone not listed: InvalidSpec naming the field.
    let mut bad = cinder.clone();
    bad["metadata"]["name"] = json!("cn-bad");
    bad["spec"]["backends"][1]["availabilityZone"] = json!("az9");
    apply(&cn_api, &bad).await?;

    let (_op, log_path, _) = start_operator(
        &target,
        &ns,
        &[
            "--controllers".into(),
            "external-service,keystone,placement,nova,cinder".into(),
            "--keystone-url".into(),
            format!("{ns}/ks={ks_url}"),
            "--api-url".into(),
            format!("placement/{ns}/pl=http://127.0.0.1:8778"),
            "--api-url".into(),
            format!("nova/{ns}/nv=http://127.0.0.1:8774/v2.1"),
            "--api-url".into(),
            format!("cinder/{ns}/cn=http://127.0.0.1:8776"),
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

    let m = wait_for(WAIT, POLL, "InvalidSpec", async || {
        let o = get(&cn_api, "cn-bad").await?;
        Ok(match cond(&o, ct::INVALID_SPEC) {
            Some((true, _, m)) => Check::Done(m),
            other => Check::Pending(format!("{other:?}")),
        })
    })
    .await?;
    assert!(
        m.contains("spec.backends[1].availabilityZone") && m.contains("az9"),
        "{m}"
    );

    wait_ready(&pl_api, "pl", "Placement Ready").await?;
    wait_ready(&nv_api, "nv", "Nova Ready").await?;
    wait_ready(&cn_api, "cn", "Cinder Ready").await?;

    // Cinder: one volume Deployment per zone, pinned; none without a zone.
    assert!(deps.get_opt("cn-volume").await?.is_none());
    for (zone, key, value, backends) in [
        ("az1", "topology.kubernetes.io/zone", "az1", "ceph"),
        ("az2", "topology.kubernetes.io/zone", "dc-b", "ceph"),
        ("az3", "rack", "r3", "ceph,local"),
    ] {
        let d = deps.get(&format!("cn-volume-{zone}")).await?;
        assert_eq!(d.labels()[ZONE_LABEL], zone);
        let pod = d.spec.template.spec.clone().unwrap_or_default();
        assert_eq!(pod.node_selector.unwrap_or_default()[key], value, "{zone}");
        assert_eq!(d.spec.replicas, Some(1));
        let args = pod.containers[0].command.clone().unwrap_or_default();
        assert_eq!(
            args.last().map(String::as_str),
            Some(format!("/etc/cinder/rendered/volume-{zone}.conf").as_str())
        );
        let file = secret_text(
            &secrets.get("cn-cinder-config").await?,
            &format!("volume-{zone}.conf"),
        );
        assert!(
            file.contains(&format!("storage_availability_zone = {zone}\n"))
                && file.contains(&format!("enabled_backends = {backends}\n"))
                && file.contains(&format!("backend_host = cn-{zone}\n")),
            "{file}"
        );
    }
    let conf = secret_text(&secrets.get("cn-cinder-config").await?, "cinder.conf");
    assert!(conf.contains("default_availability_zone = az1\n"), "{conf}");
    // Zone-wide Deployments spread over zones, then nodes, as a preference.
    let spread = vec![
        (
            "topology.kubernetes.io/zone".to_string(),
            "ScheduleAnyway".to_string(),
        ),
        (
            "kubernetes.io/hostname".to_string(),
            "ScheduleAnyway".to_string(),
        ),
    ];
    for d in [
        "cn-api",
        "cn-scheduler",
        "nv-api",
        "nv-metadata",
        "nv-conductor",
        "nv-scheduler",
        "nv-novncproxy",
    ] {
        assert_eq!(spread_keys(&deps.get(d).await?), spread, "{d}");
    }
    assert!(spread_keys(&deps.get("cn-volume-az1").await?).is_empty());

    // Nova: a compute configuration per zone and the aggregates of the three zones.
    let shared = secret_text(
        &secrets.get("nv-compute-config").await?,
        "nova-compute.conf",
    );
    for zone in ["az1", "az2", "az3"] {
        let s = secrets.get(&format!("nv-compute-config-{zone}")).await?;
        assert_eq!(secret_text(&s, "availability-zone"), zone);
        assert_eq!(secret_text(&s, "nova-compute.conf"), shared);
        assert_eq!(s.labels()[ZONE_LABEL], zone);
    }
    let nconf = secret_text(&secrets.get("nv-nova-config").await?, "nova.conf");
    assert!(
        nconf.contains("default_availability_zone = az1\n"),
        "{nconf}"
    );
    let z = aggregate_zones(&jobs).await?;
    assert_eq!(
        z,
        vec![
            json!({"name": "az1", "hosts": ["compute-a1", "compute-a2"]}),
            json!({"name": "az2", "hosts": ["compute-b1"]}),
            json!({"name": "az3", "hosts": ["compute-c1"]}),
        ]
    );
    let steps: Vec<String> = get(&nv_api, "nv").await?["status"]["jobs"]
        .as_array()
        .map(|j| {
            j.iter()
                .filter_map(|r| r["step"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        steps.last().map(String::as_str),
        Some("aggregates"),
        "{steps:?}"
    );
    // The test cloud's Nova runs none of the listed hosts: Nova is Ready, and its zones name
    // them as not registered yet (the aggregate Job succeeded without them).
    let (complete, reason, message) = wait_for(WAIT, POLL, "ZonesComplete", async || {
        Ok(match cond(&get(&nv_api, "nv").await?, ct::ZONES_COMPLETE) {
            Some(c) if c.1 != "AggregatesPending" => Check::Done(c),
            other => Check::Pending(format!("{other:?}")),
        })
    })
    .await?;
    assert!(!complete, "{reason}: {message}");
    assert_eq!(reason, "ComputeHostsMissing", "{message}");
    assert!(
        message.starts_with(
            "compute hosts not registered yet: compute-a1 (az1), compute-a2 (az1), \
             compute-b1 (az2), compute-c1 (az3);"
        ),
        "{message}"
    );

    // Two zones: az3's volume Deployment and compute Secret go, the aggregate Job runs again.
    let two = json!([zones[0], zones[1]]);
    nova["spec"]["availabilityZones"] = two.clone();
    cinder["spec"]["availabilityZones"] = two;
    if let Some(b) = cinder["spec"]["backends"].as_array_mut() {
        b.truncate(1);
    }
    apply(&nv_api, &nova).await?;
    apply(&cn_api, &cinder).await?;
    wait_for(WAIT, POLL, "az3's objects removed", async || {
        let dep = deps.get_opt("cn-volume-az3").await?;
        let sec = secrets.get_opt("nv-compute-config-az3").await?;
        let zones = aggregate_zones(&jobs).await?;
        Ok(if dep.is_none() && sec.is_none() && zones.len() == 2 {
            Check::Done(())
        } else {
            Check::Pending(format!(
                "Deployment {}, Secret {}, aggregate zones {}",
                dep.is_some(),
                sec.is_some(),
                zones.len()
            ))
        })
    })
    .await?;
    wait_ready(&nv_api, "nv", "Nova Ready with two zones").await?;
    wait_ready(&cn_api, "cn", "Cinder Ready with two zones").await?;
    for zone in ["az1", "az2"] {
        assert!(deps.get_opt(&format!("cn-volume-{zone}")).await?.is_some());
        assert!(
            secrets
                .get_opt(&format!("nv-compute-config-{zone}"))
                .await?
                .is_some()
        );
    }
    assert!(secrets.get_opt("nv-compute-config").await?.is_some());

    cm.abort();
    let nss: Api<Namespace> = Api::all(client.clone());
    let _ = nss.delete(&ns, &Default::default()).await;
    mariadb(&format!("DROP USER IF EXISTS '{admin_user}'@'127.0.0.1'"))?;
    Ok(())
}
