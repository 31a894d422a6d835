//! End to end: a Keystone whose `cache` external service is the harness's TLS memcached
//! (`memcached-tls`, checked for real by the operator). The rendered `[cache]` carries the TLS
//! options with the CA's path in the pod, the Deployment and the Jobs reading the configuration
//! mount the CA Secret, a new CA rolls the Deployment (its bytes are in the config hash), and
//! `verify: CaOnly` (which oslo.cache cannot do) is `InvalidSpec` naming the field instead of
//! being rendered as full verification. The test plays kubelet and controller manager (see
//! `e2e_control_plane.rs`); the rendered options themselves are booted for real by
//! controlplane-render's `cache_tls_boot`.

use crate::cp_common;

use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use controlplane_api::condition_types as ct;
use cp_common::*;
use e2e::{Check, Target, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// The volumes of a pod spec naming Secret `secret`, as (volume name, mount paths).
fn mounts_of(
    spec: &k8s_openapi::api::core::v1::PodSpec,
    secret: &str,
) -> Vec<(String, Vec<String>)> {
    spec.volumes
        .iter()
        .flatten()
        .filter(|v| v.secret.as_ref().and_then(|s| s.secret_name.as_deref()) == Some(secret))
        .map(|v| {
            let paths = spec
                .containers
                .iter()
                .flat_map(|c| c.volume_mounts.iter().flatten())
                .filter(|m| m.name == v.name)
                .map(|m| m.mount_path.clone())
                .collect();
            (v.name.clone(), paths)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cache_is_mounted_hashed_and_refused_when_it_cannot_be_honoured() -> anyhow::Result<()>
{
    let env = harness_env()?;
    let mc_tls = env
        .get("EXTSVC_MEMCACHED_TLS")
        .context("EXTSVC_MEMCACHED_TLS: run scripts/external-services up")?
        .clone();
    let ca = std::fs::read_to_string(env.get("EXTSVC_CA").context("EXTSVC_CA")?)?;
    let target = Target::from_env().await?;
    let client = target.client().await?;
    install_crds(&client).await?;
    let ns = create_namespace(&client).await?;
    let (admin_user, admin_pw) = db_admin_user()?;

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let ks_name = "ks";
    for s in [
        secret(
            "db-admin",
            &[("username", &admin_user), ("password", &admin_pw)],
        ),
        secret("mc-ca", &[("ca.crt", &ca)]),
        // The admin password Secret the operator would generate, with the password of the
        // Keystone standing in for the pods (the token probe reaches it).
        secret(
            &format!("{ks_name}-keystone-admin"),
            &[("password", &test_cloud_keystone()?.0)],
        ),
    ] {
        secrets.create(&PostParams::default(), &s).await?;
    }
    let ext = dyn_api(
        &client,
        &ns,
        "OpenStackExternalService",
        "openstackexternalservices",
    );
    let pp = PatchParams::apply("e2e").force();
    let apply = async |api: &Api<kube::api::DynamicObject>, v: Value| -> anyhow::Result<()> {
        let name = v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        api.patch(&name, &pp, &Patch::Apply(&v)).await?;
        Ok(())
    };
    let cache = |verify: &str| {
        json!({"apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "OpenStackExternalService", "metadata": {"name": "cache"},
            "spec": {"type": "cache", "endpoints": [mc_tls], "tls": {"caSecret": {"name": "mc-ca"}, "verify": verify}}})
    };
    apply(&ext, json!({"apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "OpenStackExternalService", "metadata": {"name": "db"},
        "spec": {"type": "database", "endpoints": ["127.0.0.1:13306"], "credentials": {"secretName": "db-admin"}}})).await?;
    apply(&ext, cache("Full")).await?;
    let keystones = dyn_api(&client, &ns, "Keystone", "keystones");
    apply(&keystones, json!({"apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "Keystone", "metadata": {"name": ks_name},
        "spec": {"database": {"service": {"name": "db"}},
                 "cache": {"name": "cache"}}})).await?;

    let (_op, log_path, _) = start_operator(
        &target,
        &ns,
        &[
            "--keystone-url".into(),
            format!("{ns}/{ks_name}={}", test_cloud_keystone()?.1),
        ],
    )?;
    eprintln!("operator log: {}", log_path.display());
    let kubelet = Arc::new(Mutex::new(Kubelet::default()));
    let _cm = tokio::spawn(play_controller_manager(
        client.clone(),
        ns.clone(),
        kubelet.clone(),
    ));
    let deps: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);

    // Ready with the TLS options rendered and the CA mounted.
    wait_cond(&keystones, ks_name, ct::READY, WAIT).await?;
    let conf = secret_text(
        &secrets.get(&format!("{ks_name}-keystone-config")).await?,
        "keystone.conf",
    );
    for line in [
        format!("memcache_servers = {mc_tls}"),
        "backend = dogpile.cache.pymemcache".to_string(),
        "tls_enabled = true".to_string(),
        "tls_cafile = /etc/ssl/cache-ca/ca.crt".to_string(),
    ] {
        assert!(
            conf.contains(&format!("{line}\n")),
            "{line} not in:\n{conf}"
        );
    }
    let dep = deps.get(&format!("{ks_name}-api")).await?;
    let pod = dep.spec.template.spec.clone().context("pod spec")?;
    assert_eq!(
        mounts_of(&pod, "mc-ca"),
        [(
            "cache-ca".to_string(),
            vec!["/etc/ssl/cache-ca".to_string()]
        )]
    );
    let sync = jobs
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .find(|j| {
            j.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.contains("db-sync"))
        })
        .context("a db-sync Job")?;
    let sync_pod = sync.spec.and_then(|s| s.template.spec).context("job pod")?;
    assert_eq!(
        mounts_of(&sync_pod, "mc-ca").len(),
        1,
        "db-sync reads keystone.conf too"
    );
    let hash1 = config_hash(&dep);

    // A new CA bundle (the same CA twice: still valid, other bytes) rolls the pods.
    secrets
        .replace("mc-ca", &PostParams::default(), &{
            let mut s = secrets.get("mc-ca").await?;
            s.data = secret("x", &[("ca.crt", &format!("{ca}{ca}"))]).data;
            s
        })
        .await?;
    let hash2 = wait_for(WAIT, POLL, "a new CA to roll the Deployment", async || {
        let h = config_hash(&deps.get(&format!("{ks_name}-api")).await?);
        Ok(if h != hash1 {
            Check::Done(h)
        } else {
            Check::Pending(h)
        })
    })
    .await?;
    assert_ne!(hash1, hash2);

    // CaOnly cannot be honoured by oslo.cache: InvalidSpec naming the field, no new rollout.
    apply(&ext, cache("CaOnly")).await?;
    let (_, msg) = wait_cond(&keystones, ks_name, ct::INVALID_SPEC, WAIT).await?;
    assert!(
        msg.contains("spec.cache: external service cache (cache) spec.tls.verify CaOnly"),
        "{msg}"
    );
    assert_eq!(
        config_hash(&deps.get(&format!("{ks_name}-api")).await?),
        hash2,
        "nothing rendered for a cache the service cannot honour"
    );
    let _ = mariadb(&format!("DROP USER IF EXISTS '{admin_user}'@'127.0.0.1'"));
    Ok(())
}
