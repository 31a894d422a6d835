//! `openstack-operator-bench --fake-cloud-operator <ADDR>`: the operator's five controllers
//! (the code `openstack-operator run` runs, from a `controllers::Context`) on the in-memory
//! OpenStack (`openstack::fake::FakeCloud`), as a process of its own so its memory can be
//! read from `/proc`, for tenant counts the test cloud cannot hold. Kubernetes from
//! `KUBECONFIG`. Differences from the binary: the cloud is the fake (no HTTP client, no
//! token, no limiter, no client metrics), no garbage collector, no leader election, no log
//! subscriber, and the executable is the bench's (larger code; only touched pages count).
//! The fake's own state lives in this process, so its RSS is an upper bound of the
//! operator's.
//!
//! It serves on ADDR: `/readyz` (every controller's cache synced), `/metrics` (the
//! controllers' counters, and the fake's call counters as
//! `openstack_operator_openstack_api_calls_total`, so the bench's settle and delta helpers
//! work unchanged) and `POST /seed-users?domain=D&users=a,b` (creates Keystone users in the
//! domain named D once the operator made it, as the real bench does through Keystone). On
//! SIGTERM it prints the fake's call counters as one JSON line on stdout.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use controllers::framework;
use controllers::{Config, Context};
use kube::Api;
use openstack::fake::{FakeCloud, Pacing, PacingTotals, ServiceTimes};
use openstack::model::{NetworkCreate, NetworkFilter, ProjectFilter, RouterFilter, SubnetCreate};
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::manifests::EXTERNAL_NETWORK;

/// Controllers started (domain, flavor, image, network, project): `/readyz` waits for all.
const CONTROLLERS: usize = 5;
/// Cluster id in the ownership marks (the fake is this process's alone).
const CLUSTER_ID: &str = "bench-fake";

/// What the HTTP handlers share.
struct Shared {
    fake: FakeCloud,
    registry: Registry,
    synced: AtomicUsize,
}

/// Seeds what a real cloud has before any tenant: the external network the manifests'
/// routers use for their gateway, with a subnet for the gateway addresses. (The domain
/// `default`, the roles and the admin project come with `FakeCloud::new`.)
async fn seed(fake: &FakeCloud) -> anyhow::Result<()> {
    let cloud = fake.cloud();
    let ext = cloud
        .network
        .create_network(&NetworkCreate {
            name: EXTERNAL_NETWORK.into(),
            external: Some(true),
            shared: Some(false),
            provider_network_type: Some("flat".into()),
            provider_physical_network: Some("physnet1".into()),
            ..Default::default()
        })
        .await
        .context("seeding the external network")?;
    cloud
        .network
        .create_subnet(&SubnetCreate {
            network_id: ext.id,
            name: format!("{EXTERNAL_NETWORK}-subnet"),
            ip_version: 4,
            cidr: "172.24.0.0/16".into(),
            enable_dhcp: Some(false),
            ..Default::default()
        })
        .await
        .context("seeding the external subnet")?;
    Ok(())
}

/// `service.operation` counters as the adapter's call counter, so a scrape reads like the
/// binary's.
fn render_calls(calls: &BTreeMap<String, u64>, out: &mut String) {
    let _ = writeln!(out, "# TYPE {} counter", e2e::metrics::API_CALLS);
    for (op, n) in calls {
        let (service, operation) = op.split_once('.').unwrap_or(("unknown", op));
        let _ = writeln!(
            out,
            "{}{{service=\"{service}\",operation=\"{operation}\",status=\"success\"}} {n}",
            e2e::metrics::API_CALLS
        );
    }
}

/// Paced fake: HTTP requests modelled.
pub const PACED_REQUESTS: &str = "openstack_operator_bench_paced_requests_total";
/// Paced fake: Σ of the service times slept, in seconds.
pub const PACED_REQUEST_SECONDS: &str = "openstack_operator_bench_paced_request_seconds_total";
/// Paced fake: Σ of the waits for the client-side limiter, in seconds.
pub const PACED_LIMITER_WAIT_SECONDS: &str =
    "openstack_operator_bench_paced_limiter_wait_seconds_total";

fn render_pacing(t: &PacingTotals, out: &mut String) {
    for (name, v) in [
        (PACED_REQUESTS, t.requests as f64),
        (PACED_REQUEST_SECONDS, t.request_time_s),
        (PACED_LIMITER_WAIT_SECONDS, t.limiter_wait_s),
    ] {
        let _ = writeln!(out, "# TYPE {name} counter\n{name} {v}");
    }
}

/// The time of one request of an operation a paced table does not name: the table's median
/// request time (the upper one of an even count), in ms; 0 for an empty table.
pub fn default_ms(table: &BTreeMap<String, Vec<f64>>) -> f64 {
    let mut all: Vec<f64> = table.values().flatten().copied().collect();
    all.sort_by(f64::total_cmp);
    all.get(all.len() / 2).copied().unwrap_or(0.0)
}

/// Pacing from a `--fake-cloud-service-times` file (JSON: `"service.operation"` → the
/// service time in ms of each HTTP request one call sends), at the client's limits;
/// operations the file does not name take one request of the median listed time.
pub fn pacing_from(
    path: &std::path::Path,
    max_concurrent_calls: usize,
    requests_per_second: u32,
) -> anyhow::Result<Pacing> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let ms: BTreeMap<String, Vec<f64>> =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let default = default_ms(&ms);
    let to = |v: f64| Duration::from_secs_f64(v.max(0.0) / 1000.0);
    let times: ServiceTimes = ms
        .into_iter()
        .map(|(op, v)| (op, v.into_iter().map(to).collect()))
        .collect();
    // The HTTP client's default burst (`ClientOptions::default().burst`).
    let burst = openstack::adapter::ClientOptions::default().burst;
    Ok(Pacing::new(
        max_concurrent_calls,
        requests_per_second,
        burst,
        times,
        to(default),
    ))
}

async fn metrics(State(s): State<Arc<Shared>>) -> (StatusCode, String) {
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &s.registry) {
        return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
    }
    // The registry's text ends with `# EOF`; the parser skips comments wherever they are.
    render_calls(&s.fake.calls(), &mut out);
    if let Some(t) = s.fake.pacing_totals() {
        render_pacing(&t, &mut out);
    }
    (StatusCode::OK, out)
}

async fn readyz(State(s): State<Arc<Shared>>) -> (StatusCode, &'static str) {
    if s.synced.load(Ordering::SeqCst) >= CONTROLLERS {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

/// Query of `/seed-users`.
#[derive(serde::Deserialize)]
struct SeedUsers {
    domain: String,
    /// Comma-separated user names.
    users: String,
}

async fn seed_users(
    State(s): State<Arc<Shared>>,
    Query(q): Query<SeedUsers>,
) -> (StatusCode, String) {
    let cloud = s.fake.cloud();
    let domain = match cloud.identity.find_domain(&q.domain).await {
        Ok(Some(d)) => d,
        Ok(None) => return (StatusCode::NOT_FOUND, format!("no domain {}", q.domain)),
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    for name in q.users.split(',').filter(|n| !n.is_empty()) {
        s.fake.add_user(&domain.id, name);
    }
    (StatusCode::OK, domain.id)
}

/// Counts of what the fake still holds (after the tenants were deleted: what the operator
/// left), beside what [`seed`] and `FakeCloud::new` put there.
async fn left(fake: &FakeCloud) -> anyhow::Result<BTreeMap<&'static str, usize>> {
    let cloud = fake.cloud();
    let projects = cloud
        .identity
        .list_projects(&ProjectFilter::default())
        .await?
        .into_iter()
        .filter(|p| p.name != "admin")
        .count();
    let networks = cloud
        .network
        .list_networks(&NetworkFilter::default())
        .await?
        .into_iter()
        .filter(|n| n.name != EXTERNAL_NETWORK)
        .count();
    let routers = cloud
        .network
        .list_routers(&RouterFilter::default())
        .await?
        .len();
    let groups = cloud.identity.list_groups(None).await?.len();
    Ok(BTreeMap::from([
        ("projects", projects),
        ("networks", networks),
        ("routers", routers),
        ("groups", groups),
    ]))
}

/// Runs the controllers on a fresh fake until SIGTERM/SIGINT. `federation_namespace` is
/// trusted for federation ConfigMaps (the bench's namespace, as `--federation-namespaces`).
/// `concurrency` is the operator's `--concurrency`; with `pacing` the fake answers like a
/// remote cloud behind the client's limiter ([`Pacing`]).
pub async fn run(
    addr: SocketAddr,
    federation_namespace: String,
    concurrency: u16,
    pacing: Option<Pacing>,
) -> anyhow::Result<()> {
    let fake = match pacing {
        Some(p) => FakeCloud::paced(Arc::new(p)),
        None => FakeCloud::new(),
    };
    seed(&fake).await?;
    let client = kube::Client::try_default()
        .await
        .context("connecting to Kubernetes (KUBECONFIG)")?;
    let mut registry = Registry::default();
    let ctl_metrics = controllers::metrics::Metrics::default();
    ctl_metrics.register(&mut registry);
    // The binary's defaults, but the bench's long resync (forced reconciles only) and its
    // namespace trusted for federation, as `Bench::start_operator` passes them.
    let config = Config {
        cluster_id: CLUSTER_ID.into(),
        resync: Duration::from_secs(3600),
        federation_namespaces: BTreeSet::from([federation_namespace]),
        ..Config::default()
    };
    let ctx = Arc::new(Context::new(
        client.clone(),
        fake.cloud(),
        config,
        ctl_metrics,
        Some("openstack-operator-bench-fake".into()),
    ));
    let shared = Arc::new(Shared {
        fake: fake.clone(),
        registry,
        synced: AtomicUsize::new(0),
    });
    let token = CancellationToken::new();
    crate::fake_node::stop_on_signal(token.clone());
    let app = Router::new()
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/seed-users", post(seed_users))
        .with_state(shared.clone());
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let server = {
        let stopped = token.clone().cancelled_owned();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(stopped)
                .await
        })
    };

    let mut tasks = tokio::task::JoinSet::new();
    let ready = || {
        let s = shared.clone();
        move || {
            s.synced.fetch_add(1, Ordering::SeqCst);
        }
    };
    let stop = || token.clone().cancelled_owned();
    let c = &client;
    tasks.spawn(framework::run::<api::OpenstackDomain>(
        ctx.clone(),
        Api::all(c.clone()),
        concurrency,
        stop(),
        ready(),
    ));
    tasks.spawn(framework::run::<api::OpenstackFlavor>(
        ctx.clone(),
        Api::all(c.clone()),
        concurrency,
        stop(),
        ready(),
    ));
    tasks.spawn(framework::run::<api::OpenstackImage>(
        ctx.clone(),
        Api::all(c.clone()),
        concurrency,
        stop(),
        ready(),
    ));
    tasks.spawn(framework::run::<api::OpenstackNetwork>(
        ctx.clone(),
        Api::all(c.clone()),
        concurrency,
        stop(),
        ready(),
    ));
    tasks.spawn(controllers::project::run_controller(
        ctx.clone(),
        Api::all(c.clone()),
        concurrency,
        stop(),
        ready(),
        true,
    ));
    let mut failed = None;
    while let Some(done) = tasks.join_next().await {
        if let Err(e) = done {
            failed.get_or_insert_with(|| format!("a controller task failed: {e}"));
        }
        // A controller stops only on shutdown; make sure everything else stops too.
        token.cancel();
    }
    match server.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("fake-cloud operator: server: {e}"),
        Err(e) => eprintln!("fake-cloud operator: server task: {e}"),
    }
    let calls = fake.calls();
    let left = left(&fake).await?;
    println!("{}", serde_json::json!({"calls": calls, "left": left}));
    match failed {
        Some(f) => anyhow::bail!(f),
        None => Ok(()),
    }
}

/// Fills `fake` with `n` tenants' objects by direct calls, in the shape the operator makes
/// for [`crate::manifests::project`]: a project and its group with the two users, the group's
/// `member` grant, the three services' quotas, two networks each with a subnet and a router
/// (gateway on the external network) holding an interface, two security groups with three
/// rules each, and one federation mapping rule per tenant. Names, tags and descriptions are
/// of similar length, not the same: this estimates the fake's share of the memory.
async fn fill(fake: &FakeCloud, n: u32) -> anyhow::Result<()> {
    use openstack::model::{
        Actor, DomainCreate, ExternalGatewayRequest, GroupCreate, ProjectCreate, RouterCreate,
        SecurityGroupCreate, SecurityGroupRuleCreate,
    };
    let cloud = fake.cloud();
    let (id, net) = (&cloud.identity, &cloud.network);
    let domain = id
        .create_domain(&DomainCreate {
            name: "bench-00000000-fake".into(),
            description: "openstack-operator bench (deleted at the end of the run)".into(),
            enabled: true,
            tags: vec![],
        })
        .await?;
    let users = [
        fake.add_user(&domain.id, "bench-00000000-user"),
        fake.add_user(&domain.id, "bench-00000000-user2"),
    ];
    let user_names: Vec<String> = users.iter().map(|u| u.name.clone()).collect();
    let member = id.find_role("member").await?.context("no member role")?;
    let external = net
        .list_networks(&NetworkFilter {
            external: Some(true),
            ..Default::default()
        })
        .await?
        .into_iter()
        .next()
        .context("no external network (seed first)")?;
    let tag = |kind: &str, i: u32| format!("openstack-operator.sunet.se:bench-fake:{kind}:t{i:04}");
    let mut rules = Vec::new();
    for i in 0..n {
        let name = format!("bench-00000000-t{i:04}.bench.example.com");
        let project = id
            .create_project(&ProjectCreate {
                name: name.clone(),
                domain_id: domain.id.clone(),
                description: "openstack-operator bench tenant (in-memory cloud)".into(),
                enabled: true,
                tags: vec![tag("project", i)],
            })
            .await?;
        let pid = Some(project.id.clone());
        let group = id
            .create_group(&GroupCreate {
                name: format!("{name}-users"),
                domain_id: domain.id.clone(),
                description: format!("Members of project {name} (openstack-operator)"),
            })
            .await?;
        for u in &users {
            id.add_user_to_group(&group.id, &u.id).await?;
        }
        id.grant_project_role(&project.id, &Actor::Group(group.id.clone()), &member.id)
            .await?;
        let quota = cloud
            .compute
            .get_compute_quota_defaults(&project.id)
            .await?;
        cloud
            .compute
            .update_compute_quota(&project.id, &quota)
            .await?;
        let quota = cloud
            .block_storage
            .get_volume_quota_defaults(&project.id)
            .await?;
        cloud
            .block_storage
            .update_volume_quota(&project.id, &quota)
            .await?;
        let quota = net.get_network_quota_defaults(&project.id).await?;
        net.update_network_quota(&project.id, &quota).await?;
        for (k, (nname, cidr)) in crate::manifests::NETWORKS.iter().enumerate() {
            let network = net
                .create_network(&NetworkCreate {
                    name: (*nname).into(),
                    project_id: pid.clone(),
                    tags: vec![tag("network", i)],
                    ..Default::default()
                })
                .await?;
            let subnet = net
                .create_subnet(&SubnetCreate {
                    network_id: network.id,
                    name: format!("{nname}-subnet"),
                    ip_version: 4,
                    cidr: (*cidr).into(),
                    enable_dhcp: Some(true),
                    project_id: pid.clone(),
                    tags: vec![tag("subnet", i)],
                    ..Default::default()
                })
                .await?;
            let router = net
                .create_router(&RouterCreate {
                    name: format!("{nname}-router-{k}"),
                    description: None,
                    project_id: pid.clone(),
                    external_gateway: Some(ExternalGatewayRequest {
                        network_id: external.id.clone(),
                        enable_snat: Some(true),
                        external_fixed_ips: vec![],
                    }),
                    tags: vec![tag("router", i)],
                })
                .await?;
            net.add_router_interface(&router.id, &subnet.id).await?;
        }
        for (gname, description) in crate::manifests::SECURITY_GROUPS {
            let group = net
                .create_security_group(&SecurityGroupCreate {
                    name: gname.into(),
                    description: Some(description.into()),
                    project_id: pid.clone(),
                    tags: vec![tag("security-group", i)],
                })
                .await?;
            let reqs: Vec<SecurityGroupRuleCreate> = crate::manifests::RULES
                .iter()
                .map(|(direction, protocol, port)| SecurityGroupRuleCreate {
                    security_group_id: group.id.clone(),
                    direction: (*direction).into(),
                    ethertype: "IPv4".into(),
                    protocol: Some((*protocol).into()),
                    port_range_min: port.map(i32::from),
                    port_range_max: port.map(i32::from),
                    remote_ip_prefix: Some("0.0.0.0/0".into()),
                    project_id: pid.clone(),
                    ..Default::default()
                })
                .collect();
            net.create_security_group_rules(&reqs).await?;
        }
        rules.push(controllers::project::federation::project_rule(
            &group.name,
            &domain.name,
            &user_names,
        ));
    }
    id.create_mapping(
        "bench-00000000-fake_oidc_mapping",
        &openstack::model::MappingRules::from_values(&rules)?,
    )
    .await?;
    Ok(())
}

/// `--fake-cloud-state N`: the in-memory cloud alone, filled with N tenants by [`fill`]; prints
/// VmRSS before and after as one JSON line, so the tenants run can tell the fake's share of
/// its RSS. (Memory freed by the allocator is not always returned, so RSS is what counts.)
pub async fn state_only(n: u32) -> anyhow::Result<()> {
    let fake = FakeCloud::new();
    seed(&fake).await?;
    let pid = std::process::id();
    let before = crate::machine::Memory::of(pid)?;
    fill(&fake, n).await?;
    let after = crate::machine::Memory::of(pid)?;
    // Keep the state alive until after the reading.
    let held = fake.calls().len();
    println!(
        "{}",
        serde_json::json!({"tenants": n, "before": before, "after": after, "operations": held})
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_calls_read_back_as_api_calls() {
        let calls = BTreeMap::from([
            ("network.create_subnet".to_string(), 3),
            ("identity.find_domain".to_string(), 2),
        ]);
        let mut text = String::new();
        render_calls(&calls, &mut text);
        let m = e2e::metrics::Metrics::parse(&text);
        assert_eq!(
            m.api_calls(),
            BTreeMap::from([
                ("create_subnet".to_string(), 3.0),
                ("find_domain".to_string(), 2.0)
            ])
        );
        assert_eq!(
            m.sum(e2e::metrics::API_CALLS, &[("service", "network")]),
            3.0
        );
    }

    #[tokio::test]
    async fn the_seed_has_an_external_network_with_a_subnet() -> anyhow::Result<()> {
        let fake = FakeCloud::new();
        seed(&fake).await?;
        let nets = fake
            .cloud()
            .network
            .list_networks(&NetworkFilter {
                external: Some(true),
                ..Default::default()
            })
            .await?;
        assert_eq!(nets.len(), 1);
        assert_eq!(nets[0].name, EXTERNAL_NETWORK);
        assert_eq!(nets[0].subnet_ids.len(), 1);
        let left = left(&fake).await?;
        assert_eq!(left.get("networks"), Some(&0));
        assert_eq!(left.get("projects"), Some(&0));
        Ok(())
    }

    #[tokio::test]
    async fn fill_makes_the_tenants_shape() -> anyhow::Result<()> {
        let fake = FakeCloud::new();
        seed(&fake).await?;
        fill(&fake, 3).await?;
        let left = left(&fake).await?;
        assert_eq!(left.get("projects"), Some(&3));
        assert_eq!(left.get("networks"), Some(&6));
        assert_eq!(left.get("routers"), Some(&6));
        assert_eq!(left.get("groups"), Some(&3));
        let mapping = fake
            .cloud()
            .identity
            .get_mapping("bench-00000000-fake_oidc_mapping")
            .await?;
        assert_eq!(mapping.rules.len(), 3);
        Ok(())
    }
}
