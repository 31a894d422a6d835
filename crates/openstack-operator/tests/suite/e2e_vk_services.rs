//! End to end: a Service of type LoadBalancer over two pods of `openstack-operator
//! virtual-kubelet --load-balancers` (a process) running in the test cloud's real Zun, with the
//! load balancer in the test cloud's real Octavia (amphora provider on noop drivers: the API
//! objects and their provisioning states are real, no traffic flows). The load balancer
//! reaches ACTIVE with the ready pods as members, a pod whose readiness probe starts failing
//! leaves the pool, `status.loadBalancer.ingress` shows the VIP, and deleting the Service
//! deletes the load balancer before the Service goes (its finalizer).

use crate::vk_common;

use std::collections::BTreeSet;

use anyhow::Context;
use e2e::wait::{Check, wait_for};
use k8s_openapi::api::core::v1::{Pod, PodStatus, Service};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use openstack::adapter::{ClientOptions, CloudSelector, Core};
use openstack::loadbalancer::{LoadBalancerAdapter, LoadBalancers};
use serde_json::json;
use vk_common::{Case, LONG, POLL, Vk, case};

fn ready(s: &PodStatus) -> Option<&str> {
    s.conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.as_str())
}

/// Octavia as the Zun tenant, or `None` (and a message) when the cloud has no Octavia.
async fn octavia(c: &Case) -> anyhow::Result<Option<LoadBalancerAdapter>> {
    if std::env::var_os("OCTAVIA_API_URL").is_none() {
        eprintln!(
            "SKIPPED: no Octavia in this cloud (OCTAVIA_API_URL unset; `eval \"$(scripts/test-cloud env)\"` sets it)"
        );
        return Ok(None);
    }
    let core = Core::connect(
        &CloudSelector::File {
            path: c.z.file.clone().into(),
            cloud: c.z.cloud.clone(),
        },
        ClientOptions {
            requests_per_second: 0,
            ..ClientOptions::default()
        },
    )
    .await
    .context("connecting to Octavia as the Zun tenant")?;
    Ok(Some(LoadBalancerAdapter::new(core)))
}

/// A web pod labelled `app=web` whose readiness is the file /www/ready.html (there at start).
async fn web_pod(c: &Case, name: &str) -> anyhow::Result<()> {
    let mut p: Pod = c.pod(
        name,
        json!({"terminationGracePeriodSeconds": 2,
               "containers": [{"name": "c", "image": "busybox",
                "command": ["sh", "-c",
                    "mkdir -p /www; echo ok > /www/ready.html; exec httpd -f -p 8080 -h /www"],
                "ports": [{"name": "web", "containerPort": 8080}],
                "readinessProbe": {"httpGet": {"port": "web", "path": "/ready.html"},
                    "periodSeconds": 1, "failureThreshold": 1}}]}),
    )?;
    p.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
    c.pods().create(&PostParams::default(), &p).await?;
    Ok(())
}

/// The pool members (address:port) of the Service's load balancer once it is ACTIVE.
async fn members(lbs: &LoadBalancerAdapter, uid: &str) -> anyhow::Result<Option<BTreeSet<String>>> {
    let found = lbs
        .list_load_balancers(&vk_zun::services::lb_name(uid))
        .await?;
    let Some(lb) = found.first() else {
        return Ok(None);
    };
    if lb.provisioning_status != "ACTIVE" {
        return Ok(None);
    }
    let tree = lbs.status_tree(&lb.id).await?;
    Ok(Some(
        tree.listeners
            .iter()
            .flat_map(|l| l.pools.iter())
            .flat_map(|p| p.members.iter())
            .map(|m| format!("{}:{}", m.address, m.protocol_port))
            .collect(),
    ))
}

#[tokio::test]
async fn load_balancer_members_follow_pod_readiness_and_go_with_the_service() -> anyhow::Result<()>
{
    let Some(c) = case("vks-lb").await? else {
        return Ok(());
    };
    let Some(lbs) = octavia(&c).await? else {
        c.cleanup().await;
        return Ok(());
    };
    let mut uid = String::new();
    let r = c.guarded(body(&c, &lbs, &mut uid)).await;
    // What a failed run left in the shared Octavia.
    if !uid.is_empty() {
        for lb in lbs
            .list_load_balancers(&vk_zun::services::lb_name(&uid))
            .await
            .unwrap_or_default()
        {
            let _ = lbs.delete_load_balancer(&lb.id).await;
        }
    }
    r
}

async fn body(c: &Case, lbs: &LoadBalancerAdapter, uid_out: &mut String) -> anyhow::Result<()> {
    let t0 = std::time::Instant::now();
    let vk = Vk::start_with(&c.target, &c.z, &c.node, &["--load-balancers".to_string()])?;
    web_pod(c, "a").await?;
    web_pod(c, "b").await?;
    let mut ips = Vec::new();
    for name in ["a", "b"] {
        let s = c
            .wait_pod(name, "the pod Ready", &vk, |s| ready(s) == Some("True"))
            .await?;
        ips.push(s.pod_ip.context("podIP")?);
    }
    eprintln!("pods ready after {:?}", t0.elapsed());
    let svcs: Api<Service> = Api::namespaced(c.client.clone(), &c.ns);
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"type": "LoadBalancer", "selector": {"app": "web"},
                 "ports": [{"name": "http", "port": 80, "targetPort": "web"}]}
    }))?;
    let svc = svcs.create(&PostParams::default(), &svc).await?;
    let uid = svc.uid().context("service uid")?;
    *uid_out = uid.clone();
    let both: BTreeSet<String> = ips.iter().map(|ip| format!("{ip}:8080")).collect();
    wait_for(
        LONG,
        POLL,
        "the load balancer ACTIVE with both pods",
        async || {
            let m = members(lbs, &uid).await?;
            Ok(if m.as_ref() == Some(&both) {
                Check::Done(())
            } else {
                Check::Pending(format!("{m:?}"))
            })
        },
    )
    .await
    .with_context(|| format!("virtual kubelet log tail:\n{}", vk.log_tail()))?;
    eprintln!(
        "load balancer ACTIVE with 2 members after {:?}",
        t0.elapsed()
    );
    let lb = lbs
        .list_load_balancers(&vk_zun::services::lb_name(&uid))
        .await?;
    assert_eq!(lb.len(), 1, "one load balancer per Service: {lb:?}");
    let vip = lb[0].vip_address.clone().context("vip")?;
    wait_for(
        LONG,
        POLL,
        "status.loadBalancer.ingress = the VIP",
        async || {
            let s = svcs.get("web").await?;
            let ip = s
                .status
                .and_then(|s| s.load_balancer)
                .and_then(|l| l.ingress)
                .and_then(|i| i.into_iter().next())
                .and_then(|i| i.ip);
            Ok(if ip.as_deref() == Some(vip.as_str()) {
                Check::Done(())
            } else {
                Check::Pending(format!("{ip:?}"))
            })
        },
    )
    .await?;

    // Pod a's readiness probe starts failing: it leaves the pool.
    let a_uid = c.pods().get("a").await?.uid().context("uid")?;
    let zun = c.containers_of(&a_uid).await?;
    let id = &zun.first().context("pod a's Zun container")?.uuid;
    use openstack::container::Container as _;
    c.zun
        .exec(id, &["rm".to_string(), "/www/ready.html".to_string()])
        .await?;
    c.wait_pod("a", "pod a not Ready", &vk, |s| ready(s) == Some("False"))
        .await?;
    let only_b: BTreeSet<String> = [format!("{}:8080", ips[1])].into();
    wait_for(LONG, POLL, "pod a's member gone, b's kept", async || {
        let m = members(lbs, &uid).await?;
        Ok(if m.as_ref() == Some(&only_b) {
            Check::Done(())
        } else {
            Check::Pending(format!("{m:?}"))
        })
    })
    .await
    .with_context(|| format!("virtual kubelet log tail:\n{}", vk.log_tail()))?;
    eprintln!("unready pod left the pool after {:?}", t0.elapsed());

    // Deleting the Service deletes the load balancer, then the Service goes.
    svcs.delete("web", &DeleteParams::default()).await?;
    wait_for(
        LONG,
        POLL,
        "the load balancer and the Service gone",
        async || {
            let left = lbs
                .list_load_balancers(&vk_zun::services::lb_name(&uid))
                .await?;
            let svc = svcs.get_opt("web").await?;
            Ok(if left.is_empty() && svc.is_none() {
                Check::Done(())
            } else {
                Check::Pending(format!(
                    "load balancers {:?}, service finalizers {:?}",
                    left.iter()
                        .map(|l| (&l.id, &l.provisioning_status))
                        .collect::<Vec<_>>(),
                    svc.map(|s| s.finalizers().to_vec())
                ))
            })
        },
    )
    .await
    .with_context(|| format!("virtual kubelet log tail:\n{}", vk.log_tail()))?;
    eprintln!("Service and load balancer deleted after {:?}", t0.elapsed());
    Ok(())
}
