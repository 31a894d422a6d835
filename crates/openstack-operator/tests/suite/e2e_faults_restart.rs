//! End to end: OpenStack restarts under the operator. Keystone and Neutron of the local test
//! cloud are stopped and started again (`scripts/test-cloud restart keystone neutron`) while the
//! operator converges a project, and once more after it converged; then a spec edit. The
//! operator must converge each time with exactly the expected objects in the cloud (no
//! duplicates, nothing unmarked), and deletion must leave nothing.
//!
//! Its own test binary with one test, so nothing else of this suite runs while the cloud
//! restarts (other users of the cloud see a short outage). The cloud is brought up again at the
//! end whatever happened. Needs the local test cloud (`TEST_CLOUD_DIR`, set by
//! `eval "$(scripts/test-cloud env)"`); `E2E_RESTART_CLOUD=skip` skips it explicitly (e.g.
//! against a cloud this suite may not restart).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use api::{OpenstackDomain, OpenstackProject};
use e2e::inventory::{
    DOMAIN, GROUP, Inventory, NETWORK, PROJECT, ROLE_ASSIGNMENT, ROUTER, ROUTER_INTERFACE,
    SECURITY_GROUP, SECURITY_GROUP_RULE, SUBNET, Scope,
};
use e2e::wait::{Check, wait_for};
use e2e::{EnvOptions, TestEnv};
use futures::FutureExt as _;
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_openstack-operator");
/// Time to converge after an outage (the operator backs off after failed passes).
const READY: Duration = Duration::from_secs(300);

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-cloud")
}

/// Runs `scripts/test-cloud <args>` to the end; fails with its output when it fails.
async fn test_cloud(args: &[&str]) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let out = tokio::process::Command::new(script())
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .with_context(|| format!("running scripts/test-cloud {}", args.join(" ")))?;
    anyhow::ensure!(
        out.status.success(),
        "scripts/test-cloud {} failed ({}):\n{}\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(started.elapsed())
}

/// Brings the cloud up when dropped during a panic (the normal path does it itself, awaited).
struct UpOnPanic;

impl Drop for UpOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let status = std::process::Command::new(script())
                .arg("up")
                .stdin(std::process::Stdio::null())
                .status();
            eprintln!("scripts/test-cloud up after a panic: {status:?}");
        }
    }
}

fn project_json(cr: &str, name: &str, domain: &str, networks: usize) -> Value {
    let networks: Vec<Value> = (0..networks)
        .map(|i| {
            json!({
                "name": format!("net{i}"),
                "cidr": format!("10.78.{i}.0/24"),
                "enableDhcp": true,
                "router": {"externalNetwork": "external", "enableSnat": true},
            })
        })
        .collect();
    json!({
        "apiVersion": "sunet.se/v1alpha1",
        "kind": "OpenstackProject",
        "metadata": {"name": cr},
        "spec": {
            "name": name,
            "description": "restart scenario",
            "domain": domain,
            "quotas": {"compute": {"instances": 3}, "network": {"floatingIps": 1}},
            "networks": networks,
            "securityGroups": [{
                "name": "allow-ssh",
                "rules": [{"direction": "ingress", "protocol": "tcp", "portRangeMin": 22,
                           "portRangeMax": 22, "remoteIpPrefix": "0.0.0.0/0"}],
            }],
            "roleBindings": [{"role": "member", "users": ["nobody-yet@example.com"]}],
        },
    })
}

fn expected(networks: usize) -> Vec<(&'static str, usize)> {
    vec![
        (DOMAIN, 1),
        (PROJECT, 1),
        (GROUP, 1),
        (ROLE_ASSIGNMENT, 1),
        (NETWORK, networks),
        (SUBNET, networks),
        (ROUTER, networks),
        (ROUTER_INTERFACE, networks),
        (SECURITY_GROUP, 1),
        (SECURITY_GROUP_RULE, 3),
    ]
}

/// The cluster's objects plus what the names find, without Neutron's own unmarked `default`
/// security group of the project (Neutron's, kept after the project is gone).
async fn inventory(
    env: &TestEnv,
    project_ids: &[String],
    project_name: &str,
    domain: &str,
) -> anyhow::Result<Inventory> {
    let scope = Scope::new()
        .project_ids(project_ids)
        .project_names([project_name])
        .domain_names([domain]);
    let inv = Inventory::collect_scoped(&env.cloud, env.operator.cluster_id(), &scope).await?;
    let neutron_default: Vec<String> = inv
        .of_kind(SECURITY_GROUP)
        .filter(|g| g.name == "default" && !g.marked)
        .map(|g| g.id.clone())
        .collect();
    let items = inv
        .items
        .into_iter()
        .filter(|i| {
            !(neutron_default.contains(&i.id)
                || (i.kind == SECURITY_GROUP_RULE && neutron_default.contains(&i.parent)))
        })
        .collect();
    Ok(Inventory::from_items(env.operator.cluster_id(), items))
}

/// Keystone of the local test cloud (`scripts/test-cloud` uses fixed ports).
const KEYSTONE: &str = "127.0.0.1:5000";

/// The operator's OpenStack attempts that ended without an answer or with a 5xx.
async fn outage_answers(env: &TestEnv) -> anyhow::Result<f64> {
    let m = env.operator.metrics().await?;
    Ok(m.by_label(e2e::proxy::API_RESPONSES, "code")
        .into_iter()
        .filter(|(code, _)| code == "transport" || code == "timeout" || code.starts_with('5'))
        .map(|(_, n)| n)
        .sum())
}

async fn ready_project(
    env: &TestEnv,
    cr: &str,
    generation: i64,
) -> anyhow::Result<OpenstackProject> {
    env.wait_object(
        cr,
        READY,
        &format!("Ready at generation {generation}"),
        |p: &OpenstackProject| p.metadata.generation == Some(generation) && e2e::k8s::is_ready(p),
    )
    .await
}

async fn scenario(env: &TestEnv) -> anyhow::Result<()> {
    let domain = env.unique("dom");
    env.apply(&format!(
        "apiVersion: sunet.se/v1alpha1\nkind: OpenstackDomain\nmetadata:\n  name: {domain}\nspec:\n  name: {domain}\n  enabled: true\n"
    ))
    .await?;
    env.wait_ready::<OpenstackDomain>(&domain, READY).await?;

    // The project is applied once Keystone is down, so its first pass meets the outage.
    let cr = env.unique("prj");
    let name = format!("{cr}.example.com");
    let before = outage_answers(env).await?;
    let restart = tokio::spawn(test_cloud(&["restart", "keystone", "neutron"]));
    wait_for(
        Duration::from_secs(60),
        Duration::from_millis(100),
        "Keystone to stop answering",
        async || {
            Ok(match tokio::net::TcpStream::connect(KEYSTONE).await {
                Err(_) => Check::Done(()),
                Ok(_) => Check::Pending("Keystone still accepts connections".into()),
            })
        },
    )
    .await?;
    env.apply(&project_json(&cr, &name, &domain, 2).to_string())
        .await?;
    let p = ready_project(env, &cr, 1).await?;
    let took = restart.await.context("the restart task")??;
    eprintln!("restart of keystone and neutron during convergence took {took:?}");
    let during = outage_answers(env).await? - before;
    anyhow::ensure!(
        during > 0.0,
        "the operator met the outage (failed attempts: transport errors, timeouts, 5xx)"
    );
    eprintln!("attempts that met the outage: {during}");
    let pid = p
        .status
        .and_then(|s| s.project_id)
        .context("status.projectId")?;
    let mut project_ids = vec![pid.clone()];
    let inv = inventory(env, &project_ids, &name, &domain).await?;
    eprintln!("{inv}");
    inv.check_counts(&expected(2))?;

    // Restart after convergence, then a spec edit converges too.
    let took = test_cloud(&["restart", "keystone", "neutron"]).await?;
    eprintln!("restart of keystone and neutron after convergence took {took:?}");
    env.apply(&project_json(&cr, &name, &domain, 3).to_string())
        .await?;
    let p = ready_project(env, &cr, 2).await?;
    if let Some(id) = p.status.and_then(|s| s.project_id)
        && id != pid
    {
        project_ids.push(id);
    }
    let inv = inventory(env, &project_ids, &name, &domain).await?;
    eprintln!("{inv}");
    inv.check_counts(&expected(3))?;

    env.delete_and_wait::<OpenstackProject>(&cr, READY).await?;
    env.delete_and_wait::<OpenstackDomain>(&domain, READY)
        .await?;
    inventory(env, &project_ids, &name, &domain)
        .await?
        .check_empty()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_converges_across_openstack_restarts() -> anyhow::Result<()> {
    if std::env::var("E2E_RESTART_CLOUD").as_deref() == Ok("skip") {
        eprintln!("E2E_RESTART_CLOUD=skip: not restarting the cloud");
        return Ok(());
    }
    anyhow::ensure!(
        std::env::var_os("TEST_CLOUD_DIR").is_some(),
        "this test restarts the local test cloud: eval \"$(scripts/test-cloud env)\" first \
         (or E2E_RESTART_CLOUD=skip against another cloud)"
    );
    let _guard = UpOnPanic;
    test_cloud(&["up"]).await?;
    let mut opts = EnvOptions::new(BIN, "faults_restart");
    opts.cleanup_timeout = READY;
    let env = TestEnv::start("restart", opts).await?;
    env.run(async |env| {
        let outcome = std::panic::AssertUnwindSafe(scenario(env))
            .catch_unwind()
            .await;
        // Up again before the cleanup (which needs the cloud), whatever happened.
        let up = test_cloud(&["up"]).await;
        match outcome {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(r) => r.and(up.map(|_| ())),
        }
    })
    .await
}
