//! Shared by the fault suites (`e2e_faults_kube`, `e2e_faults_crash`): a full tenant manifest,
//! the inventory it should produce, checks of status IDs against the inventory, a Keystone
//! user for role bindings, waits over many objects, and a seedable random source.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Context as _;
use api::OpenstackProject;
use e2e::TestEnv;
use e2e::inventory::{self, Inventory};
use e2e::k8s::{is_ready, summary};
use e2e::wait::{Check, wait_for};
use futures::FutureExt as _;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Resource as _, ResourceExt as _};
use openstack::OptionalExt as _;
use openstack::adapter::{ClientOptions, CloudSelector, Core, Request, Service};
use serde_json::json;

/// The external network of the test cloud.
pub const EXTERNAL: &str = "external";
/// Rules in the manifest's security group.
pub const SPEC_RULES: usize = 3;
/// Rules Neutron gives every new security group (egress IPv4 and IPv6), which the operator
/// keeps.
pub const DEFAULT_EGRESS_RULES: usize = 2;

/// A full tenant: project, group, quotas, one network with a router on [`EXTERNAL`], one
/// security group with [`SPEC_RULES`] rules, one role binding of `user` (Default domain).
pub fn project_manifest(cr: &str, domain: &str, cidr: &str, user: &str) -> String {
    format!(
        r#"
apiVersion: sunet.se/v1alpha1
kind: OpenstackProject
metadata:
  name: {cr}
spec:
  name: {cr}.example.com
  description: fault suite tenant
  domain: {domain}
  enabled: true
  quotas:
    compute:
      instances: 10
      cores: 20
    storage:
      volumes: 5
    network:
      floatingIps: 2
  networks:
    - name: internal
      cidr: {cidr}
      enableDhcp: true
      router:
        externalNetwork: {EXTERNAL}
        enableSnat: true
  securityGroups:
    - name: web
      description: ssh, https, ping
      rules:
        - direction: ingress
          protocol: tcp
          portRangeMin: 22
          portRangeMax: 22
          remoteIpPrefix: 198.51.100.0/24
        - direction: ingress
          protocol: tcp
          portRangeMin: 443
          portRangeMax: 443
          remoteIpPrefix: 0.0.0.0/0
        - direction: ingress
          protocol: icmp
  roleBindings:
    - role: member
      users: ["{user}"]
      userDomain: Default
"#
    )
}

/// Per-kind counts the inventory holds for `n` tenants of [`project_manifest`] (Neutron's own
/// `default` security group of each project, with its four rules, included: Neutron creates it
/// in every project the operator builds security groups in).
pub fn tenant_counts(n: usize) -> Vec<(&'static str, usize)> {
    vec![
        (inventory::PROJECT, n),
        (inventory::GROUP, n),
        // The project group's `member` (the seed's); the binding's user holds it as a member
        // of that group.
        (inventory::ROLE_ASSIGNMENT, n),
        (inventory::NETWORK, n),
        (inventory::SUBNET, n),
        (inventory::ROUTER, n),
        (inventory::ROUTER_INTERFACE, n),
        (inventory::SECURITY_GROUP, n),
        (
            inventory::SECURITY_GROUP_RULE,
            n * (SPEC_RULES + DEFAULT_EGRESS_RULES),
        ),
    ]
}

/// The marked inventory without Neutron's `default` security groups of our projects (and
/// their rules), which Neutron creates on its own; everything else unmarked stays in.
pub fn without_neutron_defaults(inv: &Inventory) -> Inventory {
    let defaults: BTreeSet<String> = inv
        .of_kind(inventory::SECURITY_GROUP)
        .filter(|g| g.name == "default" && !g.marked)
        .map(|g| g.id.clone())
        .collect();
    Inventory::from_items(
        &inv.cluster_id,
        inv.items
            .iter()
            .filter(|i| !defaults.contains(&i.id) && !defaults.contains(&i.parent))
            .cloned()
            .collect(),
    )
}

/// Every ID the project's status records exists in the inventory, as the kind it should be,
/// in the place it should be (subnet on the recorded network, router interface on the
/// recorded subnet, security group in the recorded project).
pub fn check_status_ids(p: &OpenstackProject, inv: &Inventory) -> anyhow::Result<()> {
    let name = p.name_any();
    let s = p
        .status
        .as_ref()
        .with_context(|| format!("{name} has a status"))?;
    let need = |kind: &str, id: &Option<String>, what: &str| -> anyhow::Result<String> {
        let id = id
            .clone()
            .with_context(|| format!("{name}: status records {what}"))?;
        anyhow::ensure!(
            inv.get(kind, &id).is_some(),
            "{name}: status.{what} = {id} is no {kind} of the inventory:\n{inv}"
        );
        Ok(id)
    };
    let pid = need(inventory::PROJECT, &s.project_id, "projectId")?;
    need(inventory::GROUP, &s.group_id, "groupId")?;
    anyhow::ensure!(
        s.networks.len() == 1,
        "{name}: one network in status: {:?}",
        s.networks
    );
    let n = &s.networks[0];
    let nid = need(inventory::NETWORK, &n.network_id, "networks[0].networkId")?;
    anyhow::ensure!(
        inv.get(inventory::NETWORK, &nid).map(|x| x.parent.as_str()) == Some(pid.as_str()),
        "{name}: network {nid} is in project {pid}"
    );
    let sid = need(inventory::SUBNET, &n.subnet_id, "networks[0].subnetId")?;
    anyhow::ensure!(
        inv.get(inventory::SUBNET, &sid).map(|x| x.parent.as_str()) == Some(nid.as_str()),
        "{name}: subnet {sid} is on network {nid}"
    );
    let rid = need(inventory::ROUTER, &n.router_id, "networks[0].routerId")?;
    let subnet_name = inv
        .get(inventory::SUBNET, &sid)
        .map(|x| x.name.clone())
        .unwrap_or_default();
    let interfaces: Vec<&inventory::Item> = inv
        .of_kind(inventory::ROUTER_INTERFACE)
        .filter(|i| i.parent == rid)
        .collect();
    anyhow::ensure!(
        interfaces.len() == 1 && interfaces[0].name == subnet_name,
        "{name}: router {rid} has one interface, on {subnet_name}: {interfaces:?}"
    );
    anyhow::ensure!(
        s.security_groups.len() == 1,
        "{name}: one security group in status: {:?}",
        s.security_groups
    );
    let gid = need(
        inventory::SECURITY_GROUP,
        &s.security_groups[0].id,
        "securityGroups[0].id",
    )?;
    anyhow::ensure!(
        inv.get(inventory::SECURITY_GROUP, &gid)
            .map(|x| x.parent.as_str())
            == Some(pid.as_str()),
        "{name}: security group {gid} is in project {pid}"
    );
    Ok(())
}

/// Ready (phase, conditions and observedGeneration at the current generation), no pending
/// user, and carrying the finalizer.
pub fn check_converged(p: &OpenstackProject) -> anyhow::Result<()> {
    let name = p.name_any();
    anyhow::ensure!(is_ready(p), "{name} is Ready: {}", summary(p));
    anyhow::ensure!(
        p.status.as_ref().and_then(|s| s.observed_generation) == p.meta().generation,
        "{name}: status.observedGeneration equals metadata.generation: {}",
        summary(p)
    );
    let pending = p
        .status
        .as_ref()
        .map(|s| s.pending_users.clone())
        .unwrap_or_default();
    anyhow::ensure!(
        pending.is_empty(),
        "{name}: every bound user is granted (status.pendingUsers {pending:?})"
    );
    anyhow::ensure!(
        p.finalizers().iter().any(|f| f == api::FINALIZER),
        "{name} carries the finalizer {}: {:?}",
        api::FINALIZER,
        p.finalizers()
    );
    Ok(())
}

/// Waits until every OpenstackProject of the namespace named in `names` is Ready (one list per
/// poll); returns them in `names` order.
pub async fn wait_all_ready(
    env: &TestEnv,
    names: &[String],
    timeout: Duration,
) -> anyhow::Result<Vec<OpenstackProject>> {
    let api: Api<OpenstackProject> = env.api();
    let what = format!("{} OpenstackProjects to be Ready", names.len());
    wait_for(timeout, Duration::from_secs(2), &what, async || {
        let list = api.list(&ListParams::default()).await?;
        let mut ready = Vec::new();
        let mut pending = Vec::new();
        for n in names {
            match list.items.iter().find(|p| &p.name_any() == n) {
                Some(p) if is_ready(p) => ready.push(p.clone()),
                Some(p) => pending.push(format!("{n}: {}", summary(p))),
                None => pending.push(format!("{n}: missing")),
            }
        }
        Ok(if pending.is_empty() {
            Check::Done(ready)
        } else {
            Check::Pending(format!(
                "{} of {} Ready; not yet: {}",
                ready.len(),
                names.len(),
                pending.join("; ")
            ))
        })
    })
    .await
}

/// Deletes the named OpenstackProjects (without waiting).
pub async fn delete_all(env: &TestEnv, names: &[String]) -> anyhow::Result<()> {
    let api: Api<OpenstackProject> = env.api();
    for n in names {
        match api.delete(n, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e).with_context(|| format!("deleting OpenstackProject {n}")),
        }
    }
    Ok(())
}

/// Waits until none of the named OpenstackProjects exists.
pub async fn wait_all_gone(
    env: &TestEnv,
    names: &[String],
    timeout: Duration,
) -> anyhow::Result<()> {
    let api: Api<OpenstackProject> = env.api();
    let what = format!("{} OpenstackProjects to be gone", names.len());
    wait_for(timeout, Duration::from_secs(2), &what, async || {
        let list = api.list(&ListParams::default()).await?;
        let left: Vec<String> = list
            .items
            .iter()
            .filter(|p| names.contains(&p.name_any()))
            .map(|p| format!("{}: {}", p.name_any(), summary(p)))
            .collect();
        Ok(if left.is_empty() {
            Check::Done(())
        } else {
            Check::Pending(format!("{} left: {}", left.len(), left.join("; ")))
        })
    })
    .await
}

/// Creates a Keystone user named `name` in the Default domain for role bindings (bindings name
/// users by name); returns its ID. Deleted after the test.
pub async fn create_user(env: &TestEnv, name: &str) -> anyhow::Result<String> {
    let c = env.target.cloud_env();
    let selector = CloudSelector::File {
        path: c.config_file.clone(),
        cloud: c.os_cloud.clone(),
    };
    let opts = ClientOptions {
        requests_per_second: 0,
        ..ClientOptions::default()
    };
    let core = Core::connect(&selector, opts)
        .await
        .context("connecting to Keystone")?;
    let body = json!({"user": {
        "name": name,
        "domain_id": "default",
        "enabled": true,
        "password": e2e::names::random_suffix() + &e2e::names::random_suffix(),
    }});
    let req = Request::post(Service::Identity, "create_user", "users").json(&body)?;
    let user: serde_json::Value = core
        .send(&req)
        .await
        .with_context(|| format!("creating user {name}"))?
        .json_at("user")?;
    let id = user["id"]
        .as_str()
        .context("the created user has an id")?
        .to_string();
    let uid = id.clone();
    env.defer(&format!("user {name} ({id})"), move |_| {
        async move {
            let req = Request::delete(Service::Identity, "delete_user", format!("users/{uid}"));
            core.send(&req).await.optional()?;
            Ok(())
        }
        .boxed()
    });
    Ok(id)
}

/// SplitMix64: a tiny deterministic random source, so a failing run replays from its seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// From a seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The seed from `var` if set (replay), else from the clock; printed either way.
    pub fn from_env(var: &str) -> anyhow::Result<(Self, u64)> {
        let seed = match std::env::var(var) {
            Ok(v) if !v.trim().is_empty() => v
                .trim()
                .parse::<u64>()
                .with_context(|| format!("{var}={v} is not a u64"))?,
            _ => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0),
        };
        eprintln!("RANDOM SEED: {seed} (replay with {var}={seed})");
        Ok((Rng::new(seed), seed))
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A duration uniformly in `[lo, hi]` (millisecond resolution).
    pub fn duration(&mut self, lo: Duration, hi: Duration) -> Duration {
        let (a, b) = (lo.as_millis() as u64, hi.as_millis() as u64);
        let span = b.saturating_sub(a) + 1;
        Duration::from_millis(a + self.next_u64() % span)
    }
}
