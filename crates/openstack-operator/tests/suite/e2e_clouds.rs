//! End to end: one operator, two clouds. The operator runs with the test cloud's admin
//! credentials (its own cloud); a second cloud is the same Keystone seen through another user,
//! an administrator of a project of the test's own, given as an `OpenstackCloud` whose Secret
//! holds that user's `clouds.yaml`. A provider network takes its Neutron project from the
//! credentials that create it, so where each network landed is read from OpenStack itself.
//!
//! Proven: resources naming the second cloud land there and the others in the operator's own;
//! the per-cloud metric families count each cloud's calls under its name; a namespace not in a
//! cloud's allow-list and a cloud that does not exist are refused with `Blocked` conditions and
//! Events naming the field, the cloud (and the namespace), and nothing is created; breaking the
//! second cloud's credentials (its Secret) blocks its resources and leaves the others Ready; the
//! repaired Secret is picked up without a restart.

use std::time::Duration;

use anyhow::Context as _;
use api::{OpenstackCloud, OpenstackFlavor, OpenstackNetwork, OpenstackProject};
use e2e::{EnvOptions, TestEnv};
use futures::FutureExt as _;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams};
use openstack::OptionalExt as _;
use openstack::model::{Actor, ProjectCreate};
use serde_json::json;

use crate::clouds_common::admin_and_auth_url;
use crate::e2e_project::create_user_with_password;

const BIN: &str = env!("CARGO_BIN_EXE_openstack-operator");
const READY: Duration = Duration::from_secs(180);
/// The clouds.yaml entry of the second cloud inside its Secret.
const ENTRY: &str = "site-b";

/// `openstack_operator_cloud_api_calls_total` summed over one cloud (optionally one
/// operation).
fn cloud_calls(metrics: &str, cloud: &str, operation: Option<&str>) -> u64 {
    let prefix = format!("openstack_operator_cloud_api_calls_total{{cloud=\"{cloud}\",");
    metrics
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter(|l| operation.is_none_or(|op| l.contains(&format!("operation=\"{op}\""))))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// The second cloud's `clouds.yaml`: the test cloud's Keystone, another user and project.
fn clouds_yaml(auth_url: &str, user: &str, password: &str, project: &str) -> String {
    json!({"clouds": {ENTRY: {
        "auth_type": "password",
        "auth": {
            "auth_url": auth_url,
            "username": user,
            "password": password,
            "project_name": project,
            "user_domain_name": "Default",
            "project_domain_name": "Default",
        },
        "region_name": "RegionOne",
        "interface": "public",
    }}})
    .to_string()
}

fn provider_network(name: &str, cloud: Option<&str>) -> String {
    let mut d = json!({
        "apiVersion": "sunet.se/v1alpha1",
        "kind": "OpenstackNetwork",
        "metadata": {"name": name},
        "spec": {
            "name": name,
            "providerNetworkType": "vlan",
            "providerPhysicalNetwork": "physnet1",
        },
    });
    if let Some(c) = cloud {
        d["spec"]["cloudRef"] = json!({"name": c});
    }
    d.to_string()
}

fn cloud_object(name: &str, secret: &str, namespace: &str, allowed: &[&str]) -> String {
    json!({
        "apiVersion": "sunet.se/v1alpha1",
        "kind": "OpenstackCloud",
        "metadata": {"name": name},
        "spec": {
            "secretRef": {"name": secret, "namespace": namespace},
            "cloud": ENTRY,
            "allowedNamespaces": allowed,
            "requestsPerSecond": 10,
        },
    })
    .to_string()
}

async fn set_secret(env: &TestEnv, name: &str, yaml: &str) -> anyhow::Result<()> {
    Api::<Secret>::namespaced(env.client.clone(), &env.namespace)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"clouds.yaml": yaml}})),
        )
        .await
        .context("changing the second cloud's Secret")?;
    Ok(())
}

fn ready_message<K: serde::Serialize>(obj: &K) -> String {
    e2e::k8s::condition(obj, "Ready")
        .and_then(|c| c.message)
        .unwrap_or_default()
}

#[tokio::test]
async fn two_clouds_objects_land_where_they_name_refusals_touch_nothing_one_broken_cloud_blocks_only_its_own()
 {
    let env = TestEnv::start("clouds", EnvOptions::new(BIN, "clouds"))
        .await
        .expect("test env");
    env.run(async |env| {
        let (admin, auth_url) = admin_and_auth_url(env).await?;

        // The second cloud's identity: a project and an administrator of it.
        let project_b = env.unique("site-b");
        let pb = env
            .cloud
            .identity
            .create_project(&ProjectCreate {
                name: project_b.clone(),
                domain_id: "default".into(),
                description: "e2e_clouds: the second cloud's project".into(),
                enabled: true,
                tags: vec![],
            })
            .await?;
        env.defer(&format!("project {project_b}"), {
            let id = pb.id.clone();
            move |cloud| {
                async move {
                    cloud.identity.delete_project(&id).await.optional()?;
                    Ok(())
                }
                .boxed()
            }
        });
        let user_b = env.unique("site-b-admin");
        let password = e2e::names::random_suffix() + &e2e::names::random_suffix();
        let uid = create_user_with_password(env, &admin, "default", &user_b, &password).await?;
        let admin_role = env
            .cloud
            .identity
            .find_role("admin")
            .await?
            .context("the admin role")?;
        env.cloud
            .identity
            .grant_project_role(&pb.id, &Actor::User(uid), &admin_role.id)
            .await?;
        let good = clouds_yaml(&auth_url, &user_b, &password, &project_b);

        // The Secret and the clouds first: cleanup deletes in reverse, so they outlive the
        // resources that need them to be deleted.
        let secret = env.unique("site-b-creds");
        env.apply(
            &json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": secret, "namespace": env.namespace},
                "stringData": {"clouds.yaml": good},
            })
            .to_string(),
        )
        .await?;
        let cloud_b = env.unique("cloud-b");
        env.apply(&cloud_object(
            &cloud_b,
            &secret,
            &env.namespace,
            &[&env.namespace],
        ))
        .await?;
        // The same credentials, but no namespace of this test may use them.
        let cloud_c = env.unique("cloud-c");
        env.apply(&cloud_object(
            &cloud_c,
            &secret,
            &env.namespace,
            &["e2e-nobody"],
        ))
        .await?;

        // One provider network in each cloud, a tenant project in the second.
        let net_a = env.unique("net-a");
        let net_b = env.unique("net-b");
        env.apply(&provider_network(&net_a, None)).await?;
        env.apply(&provider_network(&net_b, Some(&cloud_b))).await?;
        let proj_b = env.unique("proj-b");
        env.apply(
            &json!({
                "apiVersion": "sunet.se/v1alpha1",
                "kind": "OpenstackProject",
                "metadata": {"name": proj_b, "namespace": env.namespace},
                "spec": {"name": format!("{proj_b}.example.com"), "domain": "Default",
                         "cloudRef": {"name": cloud_b}},
            })
            .to_string(),
        )
        .await?;
        // Refused: a cloud that does not allow this namespace, a cloud that does not exist.
        let proj_denied = env.unique("proj-denied");
        env.apply(
            &json!({
                "apiVersion": "sunet.se/v1alpha1",
                "kind": "OpenstackProject",
                "metadata": {"name": proj_denied, "namespace": env.namespace},
                "spec": {"name": format!("{proj_denied}.example.com"), "domain": "Default",
                         "cloudRef": {"name": cloud_c}},
            })
            .to_string(),
        )
        .await?;
        let missing = env.unique("no-such-cloud");
        let flavor = env.unique("flavor-missing");
        env.apply(
            &json!({
                "apiVersion": "sunet.se/v1alpha1",
                "kind": "OpenstackFlavor",
                "metadata": {"name": flavor},
                "spec": {"name": flavor, "vcpus": 1, "ram": 128, "disk": 1,
                         "cloudRef": {"name": missing}},
            })
            .to_string(),
        )
        .await?;

        // Each network landed in the cloud it names: Neutron gives a network the project of
        // the credentials that created it.
        let a: OpenstackNetwork = env.wait_ready(&net_a, READY).await?;
        let b: OpenstackNetwork = env.wait_ready(&net_b, READY).await?;
        let m = ready_message(&b);
        assert!(m.ends_with(&format!("(OpenstackCloud {cloud_b})")), "{m}");
        assert!(!ready_message(&a).contains("OpenstackCloud"), "{a:?}");
        let a_id = a.status.and_then(|s| s.network_id).context("net-a id")?;
        let b_id = b.status.and_then(|s| s.network_id).context("net-b id")?;
        let a_net = env.cloud.network.get_network(&a_id).await?;
        let b_net = env.cloud.network.get_network(&b_id).await?;
        assert_eq!(
            b_net.project_id, pb.id,
            "the network naming {cloud_b} was created with that cloud's credentials"
        );
        assert_ne!(
            a_net.project_id, pb.id,
            "the network naming no cloud was created with the operator's own credentials"
        );
        let p: OpenstackProject = env.wait_ready(&proj_b, READY).await?;
        let pid = p.status.and_then(|s| s.project_id).context("project id")?;
        assert!(env.cloud.identity.get_project(&pid).await.is_ok());
        let c: OpenstackCloud = Api::all(env.client.clone()).get(&cloud_b).await?;
        let cs = c.status.context("the cloud's status")?;
        assert_eq!(cs.phase, Some(api::Phase::Ready), "{cs:?}");

        // Each cloud's calls are counted under its name.
        let metrics = env.operator.metrics_text().await?;
        assert!(
            cloud_calls(&metrics, &cloud_b, Some("create_network")) >= 1,
            "create_network counted for {cloud_b}:\n{metrics}"
        );
        assert!(
            cloud_calls(&metrics, "(default)", Some("create_network")) >= 1,
            "create_network counted for the operator's own cloud"
        );
        // The refused namespace's project wrote nothing through the cloud it named (the GC
        // sweep may have read that cloud meanwhile: reads only).
        assert_eq!(
            cloud_calls(&metrics, &cloud_c, Some("create_project")),
            0,
            "no create through {cloud_c}"
        );

        // Refusals name the field, the cloud (and the namespace), and touch nothing.
        let denied: OpenstackProject = env
            .wait_condition(&proj_denied, "Ready", false, "Blocked", READY)
            .await?;
        let m = ready_message(&denied);
        assert!(
            m.contains("spec.cloudRef.name")
                && m.contains(&cloud_c)
                && m.contains(&env.namespace)
                && m.contains("allowedNamespaces"),
            "{m}"
        );
        let ev = env
            .wait_event::<OpenstackProject>(&proj_denied, "Blocked", READY)
            .await?;
        assert!(ev.message.contains(&cloud_c), "{ev:?}");
        assert!(
            env.cloud
                .identity
                .find_project("default", &format!("{proj_denied}.example.com"))
                .await?
                .is_none(),
            "a refused project created nothing"
        );
        let f: OpenstackFlavor = env
            .wait_condition(&flavor, "Ready", false, "Blocked", READY)
            .await?;
        let m = ready_message(&f);
        assert!(
            m.contains("spec.cloudRef.name")
                && m.contains(&missing)
                && m.contains("does not exist"),
            "{m}"
        );
        env.wait_event::<OpenstackFlavor>(&flavor, "Blocked", READY)
            .await?;
        assert!(
            env.cloud.compute.find_flavor(&flavor).await?.is_none(),
            "a flavor naming a missing cloud created nothing"
        );

        // Broken credentials block that cloud's resources only.
        let broken = clouds_yaml(&auth_url, &user_b, "not-the-password", &project_b);
        set_secret(env, &secret, &broken).await?;
        env.request_reconcile::<OpenstackNetwork>(&net_b).await?;
        env.request_reconcile::<OpenstackProject>(&proj_b).await?;
        let nb: OpenstackNetwork = env
            .wait_condition(&net_b, "Ready", false, "Blocked", READY)
            .await?;
        let m = ready_message(&nb);
        assert!(m.contains(&cloud_b) && m.contains("cannot connect"), "{m}");
        assert!(
            !m.contains("not-the-password"),
            "no credentials in conditions: {m}"
        );
        env.wait_condition::<OpenstackProject>(&proj_b, "Ready", false, "Blocked", READY)
            .await?;
        let before = cloud_calls(&env.operator.metrics_text().await?, "(default)", None);
        env.request_reconcile::<OpenstackNetwork>(&net_a).await?;
        e2e::wait::wait_for(
            READY,
            Duration::from_millis(250),
            "a pass of the default cloud's network after the break",
            async || {
                let now = cloud_calls(&env.operator.metrics_text().await?, "(default)", None);
                Ok(if now > before {
                    e2e::wait::Check::Done(())
                } else {
                    e2e::wait::Check::Pending(format!("{now} calls"))
                })
            },
        )
        .await?;
        let a: OpenstackNetwork = env.get(&net_a).await?;
        assert!(e2e::k8s::is_ready(&a), "{}", e2e::k8s::summary(&a));
        let c: OpenstackCloud = Api::all(env.client.clone()).get(&cloud_b).await?;
        let cs = c.status.context("the cloud's status")?;
        assert_eq!(cs.phase, Some(api::Phase::Error), "{cs:?}");

        // Repaired credentials are picked up from the Secret, without a restart.
        set_secret(env, &secret, &good).await?;
        env.request_reconcile::<OpenstackNetwork>(&net_b).await?;
        env.request_reconcile::<OpenstackProject>(&proj_b).await?;
        env.wait_ready::<OpenstackNetwork>(&net_b, READY).await?;
        env.wait_ready::<OpenstackProject>(&proj_b, READY).await?;
        Ok(())
    })
    .await
    .expect("two clouds");
}
