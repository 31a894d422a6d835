//! Faults: the operator killed with SIGKILL at random points while 20 full tenants converge,
//! ten times over, then left alone. Everything must converge without duplicates or leaks, and
//! deleting the tenants (with one more kill in the middle) must leave nothing behind.
//!
//! The kill delays come from a seeded random source; the seed is printed and
//! `E2E_CRASH_SEED=<seed>` replays the same delays.
//!
//! Also: the operator killed exactly between Neutron's create of a provider network (and of
//! its subnet) and the ownership tags that follow it.

use crate::faults_common;

use std::time::{Duration, Instant};

use anyhow::Context as _;
use api::naming::project_group_name;
use api::{ConditionStatus, OpenstackNetwork};
use e2e::env::CLUSTER_TAG_PREFIX;
use e2e::inventory::{Inventory, Scope};
use e2e::k8s::condition;
use e2e::metrics::is_read_operation;
use e2e::proxy::{Action, CloudProxy, Rule, RuleId, rules_table, run_proxied};
use e2e::{EnvOptions, TestEnv};
use faults_common::*;
use openstack::model::{NetworkFilter, SubnetFilter};

const BIN: &str = env!("CARGO_BIN_EXE_openstack-operator");
/// Tenants applied at once.
const TENANTS: usize = 20;
/// Kills while they converge.
const KILLS: usize = 10;
/// Kill delay after each start.
const KILL_AFTER: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(8));
/// The operator's gauge of reconciles running now.
const IN_PROGRESS: &str = "openstack_operator_reconcile_in_progress";
/// Time for everything to converge after the last restart, and for deletions.
const CONVERGE: Duration = Duration::from_secs(420);

fn elapsed(t: Instant) -> String {
    format!("{:.1}s", t.elapsed().as_secs_f64())
}

/// SIGKILL, then start again (not waiting for readiness: the next kill may come first).
/// Returns whether project reconciles were in flight at the kill, from a scrape just before
/// (`false` when the process did not serve metrics yet).
async fn kill_and_restart(env: &TestEnv, what: &str, started: Instant) -> anyhow::Result<bool> {
    let scrape = tokio::time::timeout(Duration::from_secs(2), env.operator.metrics()).await;
    env.operator.kill().context("killing the operator")?;
    let (in_flight, seen) = match scrape {
        Ok(Ok(m)) => {
            let n = m.sum(IN_PROGRESS, &[("resource", "OpenstackProject")]);
            let writes: f64 = m
                .api_calls()
                .iter()
                .filter(|(op, _)| !is_read_operation(op))
                .fold(0.0, |sum, (_, n)| sum + n);
            (
                n > 0.0,
                format!("{n} project reconciles in flight, {writes} OpenStack writes so far"),
            )
        }
        _ => (false, "no metrics yet".to_string()),
    };
    eprintln!("[{}] SIGKILL: {what} ({seen})", elapsed(started));
    env.operator
        .restart(Duration::from_secs(20))
        .await
        .context("restarting the operator")?;
    Ok(in_flight)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_loop_converges_without_duplicates_or_leaks() -> anyhow::Result<()> {
    let (mut rng, seed) = Rng::from_env("E2E_CRASH_SEED")?;
    let mut opts = EnvOptions::new(BIN, "faults-crash-sigkill-loop");
    // No periodic resync: with 20 tenants on a slow cloud, resync passes would compete with
    // the convergence under test (every pass of a tenant reads ~20 times).
    opts.operator.resync_seconds = 3600;
    opts.cleanup_timeout = CONVERGE;
    let env = TestEnv::start("faults_crash", opts).await?;
    env.run(async |env| {
        let started = Instant::now();
        let user = format!("{}@example.com", env.unique("crash"));
        create_user(env, &user).await?;
        let prefix = env.unique("crash");
        let names: Vec<String> = (0..TENANTS).map(|i| format!("{prefix}-{i:02}")).collect();
        let manifests: Vec<String> = names
            .iter()
            .enumerate()
            .map(|(i, cr)| project_manifest(cr, "Default", &format!("10.77.{i}.0/24"), &user))
            .collect();
        env.apply(&manifests.join("\n---\n")).await?;
        eprintln!(
            "[{}] applied {TENANTS} OpenstackProjects (seed {seed}, bound user {user})",
            elapsed(started)
        );

        let mut mid_reconcile = 0;
        for k in 1..=KILLS {
            let delay = rng.duration(KILL_AFTER.0, KILL_AFTER.1);
            tokio::time::sleep(delay).await;
            let what = format!("kill {k}/{KILLS}, {delay:?} after start");
            if kill_and_restart(env, &what, started).await? {
                mid_reconcile += 1;
            }
        }
        // Otherwise the loop proved nothing (say, an operator too slow to start here).
        anyhow::ensure!(
            mid_reconcile > 0,
            "no kill hit a project reconcile in flight (seed {seed}): the loop tested nothing"
        );
        env.operator.wait_ready(Duration::from_secs(120)).await?;
        let projects = wait_all_ready(env, &names, CONVERGE).await?;
        eprintln!(
            "[{}] all {TENANTS} Ready ({mid_reconcile} of {KILLS} kills hit reconciles in flight)",
            elapsed(started)
        );

        let cluster = env.operator.cluster_id().to_string();
        let project_ids: Vec<String> = projects
            .iter()
            .filter_map(|p| p.status.as_ref().and_then(|s| s.project_id.clone()))
            .collect();
        let spec_names: Vec<String> = projects.iter().map(|p| p.spec.name.clone()).collect();
        let scope = Scope::new()
            .project_ids(&project_ids)
            .project_names(&spec_names);
        let inv = Inventory::collect_scoped(&env.cloud, &cluster, &scope).await?;
        eprintln!("[{}] {inv}", elapsed(started));
        inv.check_no_duplicates()?;
        without_neutron_defaults(&inv).check_counts(&tenant_counts(TENANTS))?;
        let mut groups = inv.names(e2e::inventory::GROUP);
        groups.sort();
        let mut want: Vec<String> = spec_names.iter().map(|n| project_group_name(n)).collect();
        want.sort();
        assert_eq!(groups, want, "one group per project, named after it");
        for p in &projects {
            check_converged(p)?;
            check_status_ids(p, &inv)?;
        }

        // Deletion, with one more kill while it runs.
        delete_all(env, &names).await?;
        let delay = rng.duration(KILL_AFTER.0, KILL_AFTER.1);
        tokio::time::sleep(delay).await;
        let what = format!("during deletion, {delay:?} after it began");
        kill_and_restart(env, &what, started).await?;
        wait_all_gone(env, &names, CONVERGE).await?;
        eprintln!("[{}] all {TENANTS} deleted", elapsed(started));
        let after = Inventory::collect_scoped(&env.cloud, &cluster, &scope).await?;
        eprintln!("[{}] after deletion: {after}", elapsed(started));
        after.check_empty()?;
        Ok(())
    })
    .await
}

/// Waits until the proxy has held back a request matching `rule` (it is being delayed now).
async fn wait_fired(proxy: &CloudProxy, rule: RuleId, what: &str) -> anyhow::Result<()> {
    e2e::wait::wait_for(
        Duration::from_secs(120),
        Duration::from_millis(50),
        what,
        async || {
            Ok(if proxy.fired(rule) > 0 {
                e2e::wait::Check::Done(())
            } else {
                e2e::wait::Check::Pending(rules_table(&proxy.rules()))
            })
        },
    )
    .await
}

/// The operator killed between Neutron's create and the ownership tags, once for the provider
/// network and once for its subnet (the proxy holds the tag request back until the kill): the
/// restarted operator recognises both as its own (the network from the create intent recorded
/// in its status before the call), marks them, converges to one network and one subnet, and
/// deletes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_between_create_and_tags_of_a_provider_network() -> anyhow::Result<()> {
    let mut xo = EnvOptions::new(BIN, "faults-crash-network-tags");
    xo.operator.extra_args = vec![
        "--log-level".into(),
        "info,kube=trace,tower_http=trace,hyper=info".into(),
    ];
    let (env, proxy) = CloudProxy::start_env("faults-crash-network-tags", xo).await?;
    run_proxied(env, &proxy, async |env| {
        let name = env.unique("crashnet");
        let subnet = format!("{name}-v4");
        let manifest = format!(
            r#"
apiVersion: sunet.se/v1alpha1
kind: OpenstackNetwork
metadata:
  name: {name}
spec:
  name: {name}
  providerNetworkType: vlan
  providerPhysicalNetwork: physnet1
  subnets:
    - name: {subnet}
      cidr: 10.102.0.0/24
      enableDhcp: false
"#
        );
        let hold = |what: &str, collection: &str| {
            Rule::new(Action::delay(Duration::from_secs(600)))
                .name(format!("hold the {what} tags"))
                .service("network")
                .method("PUT")
                .path_regex(format!("^/v2.0/{collection}/[^/]+/tags$"))
                .first(1)
        };
        // A create Neutron refuses leaves no intent behind (nothing was made).
        let reject = proxy.add_rule(
            Rule::new(Action::status(400))
                .name("refuse the network create")
                .service("network")
                .method("POST")
                .path_regex("^/v2.0/networks$")
                .first(1),
        )?;
        let rule = proxy.add_rule(hold("network", "networks"))?;
        env.apply(&manifest).await?;
        env.wait_object::<OpenstackNetwork>(
            &name,
            Duration::from_secs(60),
            "the refused create reported, its intent forgotten",
            |n| {
                let refused =
                    condition(n, "Ready").is_some_and(|c| c.status == ConditionStatus::False);
                refused
                    && n.status
                        .as_ref()
                        .is_some_and(|s| s.pending_create.is_none())
            },
        )
        .await?;
        anyhow::ensure!(proxy.fired(reject) == 1, "{}", rules_table(&proxy.rules()));
        env.request_reconcile::<OpenstackNetwork>(&name).await?;
        wait_fired(&proxy, rule, "the network's tag request held back").await?;
        env.operator.kill()?;
        let pending = env
            .get::<OpenstackNetwork>(&name)
            .await?
            .status
            .and_then(|s| s.pending_create);
        anyhow::ensure!(
            pending.as_ref().is_some_and(|p| p.name == name),
            "the create intent is in the status before the create: {pending:?}"
        );
        let filter = NetworkFilter {
            name: Some(name.clone()),
            ..Default::default()
        };
        let left = env.cloud.network.list_networks(&filter).await?;
        anyhow::ensure!(
            left.len() == 1 && left[0].tags.is_empty(),
            "the kill left one untagged network: {left:?}"
        );

        // The subnet's turn: the restarted operator marks the network, then is killed while
        // its subnet's tags are held back.
        proxy.remove_rule(rule);
        let rule = proxy.add_rule(hold("subnet", "subnets"))?;
        env.operator.restart(Duration::from_secs(20)).await?;
        wait_fired(&proxy, rule, "the subnet's tag request held back").await?;
        env.operator.kill()?;
        proxy.remove_rule(rule);
        env.operator.restart(Duration::from_secs(20)).await?;

        let n: OpenstackNetwork = env.wait_ready(&name, Duration::from_secs(180)).await?;
        let status = n.status.context("status")?;
        anyhow::ensure!(status.pending_create.is_none(), "the intent is cleared");
        let nets = env.cloud.network.list_networks(&filter).await?;
        anyhow::ensure!(
            nets.len() == 1 && Some(&nets[0].id) == status.network_id.as_ref(),
            "one network, the recorded one: {nets:?} vs {:?}",
            status.network_id
        );
        let cluster = format!("{CLUSTER_TAG_PREFIX}{}", env.operator.cluster_id());
        anyhow::ensure!(
            nets[0].tags.contains(&cluster),
            "the network is marked: {:?}",
            nets[0].tags
        );
        let subnets = env
            .cloud
            .network
            .list_subnets(&SubnetFilter {
                network_id: Some(nets[0].id.clone()),
                ..Default::default()
            })
            .await?;
        anyhow::ensure!(
            subnets.len() == 1 && subnets[0].name == subnet && subnets[0].tags.contains(&cluster),
            "one marked subnet: {subnets:?}"
        );
        let recorded = status.subnets.first().and_then(|s| s.subnet_id.clone());
        anyhow::ensure!(
            recorded.as_ref() == Some(&subnets[0].id),
            "the subnet is recorded: {:?}",
            status.subnets
        );
        env.wait_event::<OpenstackNetwork>(&name, "Recovered", Duration::from_secs(10))
            .await?;

        env.delete_and_wait::<OpenstackNetwork>(&name, Duration::from_secs(120))
            .await?;
        let after = env.cloud.network.list_networks(&filter).await?;
        anyhow::ensure!(after.is_empty(), "the network is deleted: {after:?}");
        Ok(())
    })
    .await
}
