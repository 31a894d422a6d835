//! Faults on the Kubernetes side, through the kube-emulator's fault hooks: 409 Conflict, 500
//! and 429 on the operator's finalizer and status patches, failed lists and watches, watch
//! connections dropped, watch history compacted (410 Gone on resume) and added latency, while
//! a full tenant (project, group, quotas, network with router, security group with rules,
//! role binding), its domain and a flavor converge, are edited, and are deleted.
//!
//! After each phase: everything Ready at the current generation with the finalizer, every
//! injected fault consumed (the operator really met it), and the cloud's inventory of this
//! cluster exactly what the resources describe, without duplicates; after deletion, empty.
//!
//! The hooks exist only in the emulator: with `E2E_KUBECONFIG` naming a real cluster the
//! test is skipped (it says so).

use crate::faults_common;

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use api::{OpenstackDomain, OpenstackFlavor, OpenstackProject};
use e2e::inventory::{self, Inventory, Scope};
use e2e::k8s::is_ready;
use e2e::wait::{Check, wait_for};
use e2e::{EmulatorHandle as Handle, EnvOptions, FailRule, FaultRequest, TestEnv};
use faults_common::*;
use kube::ResourceExt as _;
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_openstack-operator");
/// Time for a phase to converge under faults.
const CONVERGE: Duration = Duration::from_secs(300);
/// How often watches are dropped while a phase runs (every third time after compacting the
/// history, so the resume gets 410 Gone and the operator must relist).
const CHAOS_EVERY: Duration = Duration::from_secs(3);
/// Latency added to every API response.
const LATENCY: Duration = Duration::from_millis(150);

fn domain_yaml(name: &str, description: &str) -> String {
    format!(
        r#"
apiVersion: sunet.se/v1alpha1
kind: OpenstackDomain
metadata:
  name: {name}
spec:
  name: {name}
  description: "{description}"
  enabled: true
"#
    )
}

fn flavor_yaml(name: &str, description: &str) -> String {
    format!(
        r#"
apiVersion: sunet.se/v1alpha1
kind: OpenstackFlavor
metadata:
  name: {name}
spec:
  name: {name}
  description: "{description}"
  vcpus: 1
  ram: 256
  disk: 1
  ephemeral: 0
  swap: 0
  isPublic: true
  extraSpecs:
    "hw:cpu_policy": "shared"
"#
    )
}

fn elapsed(t: Instant) -> String {
    format!("{:.1}s", t.elapsed().as_secs_f64())
}

/// A fail rule for the operator's PATCHes whose path contains `path`.
fn patch_rule(count: u32, status: u16, path: &str) -> FailRule {
    FailRule::new(count, status)
        .verb("patch")
        .path_contains(path)
}

/// The fail rules not consumed yet, as the emulator reports them.
fn pending_rules(h: &Handle) -> Vec<Value> {
    h.apply_faults(&FaultRequest::default())["config"]["rules"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Runs `fut` while dropping every watch each [`CHAOS_EVERY`] (compacting the history first
/// every third time); returns its result and how many watch connections were dropped.
async fn with_chaos<T>(
    h: &Handle,
    fut: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<(T, usize)> {
    let mut fut = std::pin::pin!(fut);
    let (mut ticks, mut dropped) = (0u32, 0usize);
    loop {
        tokio::select! {
            r = &mut fut => return r.map(|v| (v, dropped)),
            _ = tokio::time::sleep(CHAOS_EVERY) => {
                ticks += 1;
                if ticks % 3 == 0 {
                    h.compact_history();
                }
                dropped += h.drop_watches();
            }
        }
    }
}

/// Waits until every injected fail rule has been consumed.
async fn wait_consumed(h: &Handle) -> anyhow::Result<()> {
    wait_for(
        CONVERGE,
        Duration::from_millis(500),
        "every injected fault to be met by the operator",
        async || {
            let left = pending_rules(h);
            Ok(if left.is_empty() {
                Check::Done(())
            } else {
                Check::Pending(format!("rules left: {left:?}"))
            })
        },
    )
    .await
}

/// Phase end: the three resources Ready at `generation` with the finalizer, the faults
/// consumed; returns the project.
async fn converged(
    env: &TestEnv,
    h: &Handle,
    names: (&str, &str, &str),
    generation: i64,
) -> anyhow::Result<(OpenstackProject, usize)> {
    let (domain, flavor, project) = names;
    let at_generation = |ready: bool, g: Option<i64>| ready && g == Some(generation);
    let what = format!("Ready at generation {generation}");
    let ((p, d, f), dropped) = with_chaos(h, async {
        wait_consumed(h).await?;
        let d: OpenstackDomain = env
            .wait_object(domain, CONVERGE, &what, |o: &OpenstackDomain| {
                at_generation(is_ready(o), o.metadata.generation)
            })
            .await?;
        let f: OpenstackFlavor = env
            .wait_object(flavor, CONVERGE, &what, |o: &OpenstackFlavor| {
                at_generation(is_ready(o), o.metadata.generation)
            })
            .await?;
        let p: OpenstackProject = env
            .wait_object(project, CONVERGE, &what, |o: &OpenstackProject| {
                at_generation(is_ready(o), o.metadata.generation)
            })
            .await?;
        Ok((p, d, f))
    })
    .await?;
    check_converged(&p)?;
    for (kind, finalizers, observed, gen_) in [
        (
            "OpenstackDomain",
            d.finalizers().to_vec(),
            d.status.as_ref().and_then(|s| s.observed_generation),
            d.metadata.generation,
        ),
        (
            "OpenstackFlavor",
            f.finalizers().to_vec(),
            f.status.as_ref().and_then(|s| s.observed_generation),
            f.metadata.generation,
        ),
    ] {
        anyhow::ensure!(
            finalizers.iter().any(|x| x == api::FINALIZER),
            "{kind} carries the finalizer: {finalizers:?}"
        );
        anyhow::ensure!(
            observed == gen_,
            "{kind}: observedGeneration {observed:?} = generation {gen_:?}"
        );
    }
    Ok((p, dropped))
}

/// The inventory must be exactly one tenant, one domain and one flavor, with `rules` spec
/// rules in the security group, no duplicates, and the status IDs pointing at it.
async fn check_inventory(
    env: &TestEnv,
    p: &OpenstackProject,
    spec_rules: usize,
) -> anyhow::Result<Inventory> {
    let inv = Inventory::collect(&env.cloud, env.operator.cluster_id()).await?;
    inv.check_no_duplicates()?;
    let mut want = tenant_counts(1);
    for (k, n) in &mut want {
        if *k == inventory::SECURITY_GROUP_RULE {
            *n = spec_rules + DEFAULT_EGRESS_RULES;
        }
    }
    want.push((inventory::DOMAIN, 1));
    want.push((inventory::FLAVOR, 1));
    without_neutron_defaults(&inv).check_counts(&want)?;
    check_status_ids(p, &inv)?;
    Ok(inv)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_api_faults_converge_without_duplicates_and_delete_cleanly() -> anyhow::Result<()> {
    if std::env::var_os("E2E_KUBECONFIG").is_some_and(|v| !v.is_empty()) {
        eprintln!(
            "SKIPPED: E2E_KUBECONFIG names a real cluster; the Kubernetes fault hooks exist only in the kube-emulator"
        );
        return Ok(());
    }
    let mut opts = EnvOptions::new(BIN, "faults-kube");
    opts.cleanup_timeout = CONVERGE;
    let env = TestEnv::start("faults_kube", opts).await?;
    env.run(async |env| {
        let started = Instant::now();
        let h = env
            .target
            .emulator()
            .context("the in-process kube-emulator")?;
        let user = format!("{}@example.com", env.unique("kf"));
        create_user(env, &user).await?;
        let (domain, flavor, project) = (env.unique("kfd"), env.unique("kff"), env.unique("kfp"));
        let names = (domain.as_str(), flavor.as_str(), project.as_str());
        let ns = env.namespace.clone();

        // Phase 1: everything is created while the operator's first writes fail. The
        // operator is stopped while the objects are applied, so its first patch of each is
        // the finalizer (the rules on the main path meet it) and its next ones are status.
        env.operator.stop(Duration::from_secs(20)).await?;
        env.apply(&domain_yaml(&domain, "before")).await?;
        env.apply(&flavor_yaml(&flavor, "before")).await?;
        env.apply(&project_manifest(&project, &domain, "10.78.1.0/24", &user))
            .await?;
        let p_path = format!("namespaces/{ns}/openstackprojects/{project}");
        let d_path = format!("openstackdomains/{domain}");
        let f_path = format!("openstackflavors/{flavor}");
        // Rules match in order: the status ones first, so main-path rules meet only the
        // finalizer patch.
        h.fail_next(patch_rule(2, 500, &format!("{p_path}/status")));
        h.fail_next(patch_rule(1, 429, &format!("{p_path}/status")));
        h.fail_next(patch_rule(2, 409, &format!("{f_path}/status")));
        h.fail_next(patch_rule(2, 409, &p_path));
        h.fail_next(patch_rule(1, 500, &d_path));
        h.fail_next(patch_rule(1, 429, &f_path));
        h.fail_next(
            FailRule::new(2, 500)
                .verb("watch")
                .path_contains("openstackprojects"),
        );
        h.fail_next(
            FailRule::new(1, 500)
                .verb("list")
                .path_contains("openstackflavors"),
        );
        h.fail_next(
            FailRule::new(1, 429)
                .verb("list")
                .path_contains("openstackdomains"),
        );
        h.set_latency(LATENCY);
        env.operator.restart(Duration::from_secs(20)).await?;
        let (p, dropped) = converged(env, h, names, 1).await?;
        eprintln!(
            "[{}] phase 1: created under faults; {dropped} watch connections dropped",
            elapsed(started)
        );
        let inv = check_inventory(env, &p, SPEC_RULES).await?;
        eprintln!("{inv}");

        // Phase 2: edits while status writes fail and watches drop right after them (the
        // resume from before the edit meets 410 Gone: only a relist shows the edit).
        h.fail_next(patch_rule(2, 409, &format!("{p_path}/status")));
        h.fail_next(patch_rule(1, 500, &format!("{d_path}/status")));
        h.fail_next(patch_rule(1, 500, &format!("{f_path}/status")));
        let spec = p.spec.clone();
        let mut groups = serde_json::to_value(&spec.security_groups)?;
        groups[0]["rules"]
            .as_array_mut()
            .context("the rules of the manifest's group")?
            .push(
                json!({"direction": "ingress", "protocol": "tcp", "portRangeMin": 80,
                         "portRangeMax": 80, "remoteIpPrefix": "0.0.0.0/0"}),
            );
        env.merge_spec::<OpenstackProject>(
            &project,
            json!({"securityGroups": groups, "quotas": {"compute": {"cores": 24}}}),
        )
        .await?;
        env.merge_spec::<OpenstackDomain>(&domain, json!({"description": "after"}))
            .await?;
        env.merge_spec::<OpenstackFlavor>(&flavor, json!({"description": "after"}))
            .await?;
        h.compact_history();
        h.drop_watches();
        let (p, dropped) = converged(env, h, names, 2).await?;
        eprintln!(
            "[{}] phase 2: edits applied under faults; {dropped} watch connections dropped",
            elapsed(started)
        );
        let inv = check_inventory(env, &p, SPEC_RULES + 1).await?;
        let pid = p
            .status
            .as_ref()
            .and_then(|s| s.project_id.clone())
            .context("status.projectId")?;
        let cores = env.cloud.compute.get_compute_quota(&pid).await?;
        assert_eq!(
            cores.get("cores").map(|q| q.limit),
            Some(24),
            "the quota edit reached Nova"
        );
        assert!(
            inv.names(inventory::SECURITY_GROUP_RULE)
                .iter()
                .any(|r| r.starts_with("ingress IPv4 tcp 80-80")),
            "the added rule exists:\n{inv}"
        );
        let d: OpenstackDomain = env.get(&domain).await?;
        let did = d
            .status
            .and_then(|s| s.domain_id)
            .context("status.domainId")?;
        assert_eq!(
            env.cloud.identity.get_domain(&did).await?.description,
            "after",
            "the domain edit reached Keystone"
        );
        let fl = env
            .cloud
            .compute
            .find_flavor(&flavor)
            .await?
            .context("the flavor")?;
        assert_eq!(
            fl.description.as_deref(),
            Some("after"),
            "the flavor edit reached Nova"
        );

        // Phase 3: deletion while the finalizer removals fail once or twice.
        h.fail_next(patch_rule(1, 500, &p_path));
        h.fail_next(patch_rule(1, 409, &p_path));
        h.fail_next(patch_rule(1, 409, &d_path));
        h.fail_next(patch_rule(1, 500, &f_path));
        let spec_name = p.spec.name.clone();
        let ((), dropped) = with_chaos(h, async {
            env.delete_and_wait::<OpenstackProject>(&project, CONVERGE)
                .await?;
            env.delete_and_wait::<OpenstackFlavor>(&flavor, CONVERGE)
                .await?;
            env.delete_and_wait::<OpenstackDomain>(&domain, CONVERGE)
                .await?;
            wait_consumed(h).await
        })
        .await?;
        h.reset_faults();
        eprintln!(
            "[{}] phase 3: deleted under faults; {dropped} watch connections dropped",
            elapsed(started)
        );
        let scope = Scope::new()
            .project_ids([&pid])
            .project_names([&spec_name])
            .domain_names([&domain])
            .flavor_names([&flavor]);
        let after =
            Inventory::collect_scoped(&env.cloud, env.operator.cluster_id(), &scope).await?;
        after.check_empty()?;
        Ok(())
    })
    .await
}
