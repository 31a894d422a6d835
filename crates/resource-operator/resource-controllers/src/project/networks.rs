//! Tenant networks: per spec entry a network `<name>`, a subnet `<name>-subnet` and, when
//! asked, a router `<name>-router` with its external gateway and an interface on the subnet.
//! Changes are made in place (DHCP, DNS, gateway, SNAT; seed W4, W21); a CIDR change, which
//! Neutron cannot make, replaces the subnet. Objects of ours that the spec no longer names are
//! swept: interfaces, routers, subnets, networks, in that order.

use std::collections::{BTreeMap, BTreeSet};

use api::naming::{router_name, subnet_name};
use api::project::{NetworkStatus, ProjectNetwork};
use api::validation::parse_ipv4_cidr;
use api::{OpenstackProjectSpec, OpenstackProjectStatus};
use openstack::OptionalExt;
use openstack::model::{
    ExternalGateway, ExternalGatewayRequest, GatewayIp, Network, NetworkCreate, NetworkFilter,
    Router, RouterCreate, RouterFilter, RouterPort, RouterUpdate, Subnet, SubnetCreate,
    SubnetFilter, SubnetUpdate, TaggedResource,
};

use super::{AreaOutcome, Env, Problem, os};
use crate::error::ReconcileError;
use crate::ownership::merge_marks;
use crate::ownership::{Owner, Ownership, may_take_over};

/// What exists in the project (one list per kind) plus the external networks.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// The project's networks.
    pub networks: Vec<Network>,
    /// The project's subnets.
    pub subnets: Vec<Subnet>,
    /// The project's routers.
    pub routers: Vec<Router>,
    /// Interface ports by router ID, for the routers we may touch.
    pub interfaces: BTreeMap<String, Vec<RouterPort>>,
    /// Networks with `router:external` (listed only when a gateway is asked for).
    pub external: Vec<Network>,
}

/// Our marks and what we may take over.
#[derive(Clone, Copy, Debug)]
pub struct Marks<'a> {
    /// Who we are.
    pub owner: &'a Owner,
    /// `spec.adopt`: unmarked objects with the spec's names may be taken over.
    pub adopt: bool,
    /// Objects with only the seed's tag may be taken over.
    pub adopt_legacy: bool,
    /// The Keystone project was created by this resource (not adopted). An object in it with
    /// no tags at all and a name the spec gives is ours: Neutron takes no tags at creation,
    /// so a crash between the create call and the tag call leaves exactly that behind.
    pub own_project: bool,
}

impl Marks<'_> {
    /// Whether an object carries this resource's marks.
    pub fn ours(&self, tags: &[String]) -> bool {
        self.owner.classify_tags(tags) == Ownership::Ours
    }

    /// May an existing object be used? `Ok(Some(tags))` = take it over by setting these tags.
    pub fn claim(
        &self,
        tags: &[String],
        path: &str,
        what: &str,
    ) -> Result<Option<Vec<String>>, Problem> {
        if self.own_project && tags.is_empty() {
            return Ok(Some(self.owner.tags()));
        }
        let ownership = self.owner.classify_tags(tags);
        match may_take_over(&ownership, self.adopt, self.adopt_legacy, what) {
            Ok(false) => Ok(None),
            Ok(true) => Ok(Some(merge_marks(tags, self.owner))),
            Err(m) => Err(Problem::NotOwned(format!("{path}: {m}"))),
        }
    }
}

/// Of the candidates with the wanted name, ours first, else the first one.
fn pick<'o, T>(
    items: impl Iterator<Item = &'o T>,
    tags: impl Fn(&T) -> &[String],
    marks: &Marks<'_>,
) -> Option<&'o T> {
    let all: Vec<&T> = items.collect();
    all.iter()
        .find(|x| marks.ours(tags(x)))
        .or_else(|| all.first())
        .copied()
}

/// Use an existing object (setting our marks when taken over) or create one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Obj<C> {
    /// Use it.
    Use {
        /// Its ID.
        id: String,
        /// Tags to set when taking it over.
        retag: Option<Vec<String>>,
    },
    /// Create it.
    Create(C),
}

/// What to do about an entry's subnet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubnetStep {
    /// Use it, updating DHCP/DNS when they differ.
    Use {
        /// Subnet ID.
        id: String,
        /// Tags to set when taking it over.
        retag: Option<Vec<String>>,
        /// Changes, if any.
        update: Option<SubnetUpdate>,
    },
    /// Create it (`network_id` is filled in once the network exists).
    Create(SubnetCreate),
    /// The CIDR changed: detach it from these routers, delete it, create the new one.
    Replace {
        /// The subnet to delete.
        old: String,
        /// Routers with an interface on it.
        detach: Vec<String>,
        /// The new subnet.
        create: SubnetCreate,
    },
}

/// What to do about an entry's router.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouterStep {
    /// No router is asked for (an existing one of ours is swept).
    Absent,
    /// Asked for but blocked (external network missing, not ours): leave it as it is.
    Hold(Option<String>),
    /// Use it, updating the gateway when it differs.
    Use {
        /// Router ID.
        id: String,
        /// Tags to set when taking it over.
        retag: Option<Vec<String>>,
        /// Gateway change, if any.
        update: Option<RouterUpdate>,
    },
    /// Create it.
    Create(RouterCreate),
}

/// The plan of one `spec.networks[i]` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryPlan {
    /// Index in `spec.networks`.
    pub index: usize,
    /// Network name.
    pub name: String,
    /// The network; `None` = blocked (see `errors`).
    pub network: Option<Obj<NetworkCreate>>,
    /// The subnet; `None` = blocked.
    pub subnet: Option<SubnetStep>,
    /// The router.
    pub router: RouterStep,
    /// Attach the subnet to the router.
    pub attach: bool,
    /// Problems of this entry (the other entries go on).
    pub errors: Vec<Problem>,
}

/// The CIDR Neutron stores for a spec CIDR (host bits cleared).
pub fn normalize_cidr(cidr: &str) -> String {
    parse_ipv4_cidr(cidr).map_or_else(|| cidr.to_string(), |n| n.trunc().to_string())
}

fn on_subnet(port: &RouterPort, subnet_id: &str) -> bool {
    port.fixed_ips
        .iter()
        .any(|f| f.subnet_id.as_deref() == Some(subnet_id))
}

/// The router update that brings `observed` to `desired`: `Some(None)` clears the gateway.
/// SNAT is compared only when Neutron shows it (it is admin-visible).
pub fn gateway_change(
    observed: Option<&ExternalGateway>,
    desired: Option<&ExternalGatewayRequest>,
) -> Option<Option<ExternalGatewayRequest>> {
    match (observed, desired) {
        (None, None) => None,
        (Some(_), None) => Some(None),
        (None, Some(d)) => Some(Some(d.clone())),
        (Some(o), Some(d)) => {
            let snat_differs = o.enable_snat.is_some() && o.enable_snat != d.enable_snat;
            (o.network_id != d.network_id || snat_differs).then(|| Some(d.clone()))
        }
    }
}

/// Plans one entry against what exists.
pub fn plan_entry(
    index: usize,
    spec: &ProjectNetwork,
    project_id: &str,
    obs: &Observed,
    marks: &Marks<'_>,
) -> EntryPlan {
    let path = format!("spec.networks[{index}]");
    let mut plan = EntryPlan {
        index,
        name: spec.name.clone(),
        network: None,
        subnet: None,
        router: RouterStep::Absent,
        attach: false,
        errors: Vec::new(),
    };

    let found = pick(
        obs.networks.iter().filter(|n| n.name == spec.name),
        |n| &n.tags,
        marks,
    );
    let net_id = match found {
        None => {
            plan.network = Some(Obj::Create(NetworkCreate {
                name: spec.name.clone(),
                project_id: Some(project_id.to_string()),
                tags: marks.owner.tags(),
                ..Default::default()
            }));
            None
        }
        Some(n) => {
            match marks.claim(
                &n.tags,
                &format!("{path}.name"),
                &format!("network {:?} ({})", n.name, n.id),
            ) {
                Ok(retag) => {
                    plan.network = Some(Obj::Use {
                        id: n.id.clone(),
                        retag,
                    });
                    Some(n.id.as_str())
                }
                Err(e) => {
                    plan.errors.push(e);
                    return plan;
                }
            }
        }
    };

    let sname = subnet_name(&spec.name);
    let dns = spec.dns_nameservers.clone().unwrap_or_default();
    let create = SubnetCreate {
        network_id: net_id.unwrap_or_default().to_string(),
        name: sname.clone(),
        ip_version: 4,
        cidr: normalize_cidr(&spec.cidr),
        gateway: GatewayIp::Default,
        enable_dhcp: Some(spec.enable_dhcp),
        dns_nameservers: dns.clone(),
        project_id: Some(project_id.to_string()),
        tags: marks.owner.tags(),
        ..Default::default()
    };
    let found = net_id.and_then(|nid| {
        pick(
            obs.subnets
                .iter()
                .filter(|s| s.network_id == nid && s.name == sname),
            |s| &s.tags,
            marks,
        )
    });
    // `None` = the subnet will be new (created or replaced).
    let existing_subnet: Option<&str> = match found {
        None => {
            plan.subnet = Some(SubnetStep::Create(create));
            None
        }
        Some(s) => {
            let retag = match marks.claim(
                &s.tags,
                &format!("{path}.name"),
                &format!("subnet {:?} ({})", s.name, s.id),
            ) {
                Ok(r) => r,
                Err(e) => {
                    plan.errors.push(e);
                    return plan;
                }
            };
            if normalize_cidr(&s.cidr) != normalize_cidr(&spec.cidr) {
                // Neutron cannot change a subnet's CIDR.
                plan.subnet = Some(SubnetStep::Replace {
                    old: s.id.clone(),
                    detach: obs
                        .interfaces
                        .iter()
                        .filter(|(_, ports)| ports.iter().any(|p| on_subnet(p, &s.id)))
                        .map(|(r, _)| r.clone())
                        .collect(),
                    create,
                });
                None
            } else {
                let update = SubnetUpdate {
                    enable_dhcp: (s.enable_dhcp != spec.enable_dhcp).then_some(spec.enable_dhcp),
                    dns_nameservers: (s.dns_nameservers != dns).then(|| dns.clone()),
                    ..Default::default()
                };
                plan.subnet = Some(SubnetStep::Use {
                    id: s.id.clone(),
                    retag,
                    update: (update != SubnetUpdate::default()).then_some(update),
                });
                Some(s.id.as_str())
            }
        }
    };

    let Some(want) = &spec.router else {
        return plan;
    };
    let rname = router_name(&spec.name);
    let found = pick(
        obs.routers.iter().filter(|r| r.name == rname),
        |r| &r.tags,
        marks,
    );
    let gateway = match &want.external_network {
        None => None,
        Some(ext) => match obs.external.iter().find(|n| &n.name == ext) {
            Some(n) => Some(ExternalGatewayRequest {
                network_id: n.id.clone(),
                enable_snat: Some(want.enable_snat),
                external_fixed_ips: Vec::new(),
            }),
            None => {
                plan.errors.push(Problem::Missing(format!(
                    "external network {ext:?} ({path}.router.externalNetwork)"
                )));
                // Leave an existing router alone until the network shows up.
                plan.router =
                    RouterStep::Hold(found.filter(|r| marks.ours(&r.tags)).map(|r| r.id.clone()));
                return plan;
            }
        },
    };
    match found {
        None => {
            plan.router = RouterStep::Create(RouterCreate {
                name: rname,
                description: None,
                project_id: Some(project_id.to_string()),
                external_gateway: gateway,
                tags: marks.owner.tags(),
            });
            plan.attach = true;
        }
        Some(r) => match marks.claim(
            &r.tags,
            &format!("{path}.router"),
            &format!("router {:?} ({})", r.name, r.id),
        ) {
            Ok(retag) => {
                let update =
                    gateway_change(r.external_gateway.as_ref(), gateway.as_ref()).map(|g| {
                        RouterUpdate {
                            external_gateway: Some(g),
                            ..Default::default()
                        }
                    });
                plan.attach = existing_subnet.is_none_or(|sid| {
                    !obs.interfaces
                        .get(&r.id)
                        .is_some_and(|ports| ports.iter().any(|p| on_subnet(p, sid)))
                });
                plan.router = RouterStep::Use {
                    id: r.id.clone(),
                    retag,
                    update,
                };
            }
            Err(e) => {
                plan.errors.push(e);
                plan.router = RouterStep::Hold(None);
            }
        },
    }
    plan
}

/// IDs of existing objects the plans use (everything else of ours is swept).
pub fn kept(plans: &[EntryPlan]) -> BTreeSet<String> {
    let mut keep = BTreeSet::new();
    for p in plans {
        if let Some(Obj::Use { id, .. }) = &p.network {
            keep.insert(id.clone());
        }
        match &p.subnet {
            Some(SubnetStep::Use { id, .. }) => {
                keep.insert(id.clone());
            }
            // The entry deletes it itself, after detaching.
            Some(SubnetStep::Replace { old, .. }) => {
                keep.insert(old.clone());
            }
            _ => {}
        }
        match &p.router {
            RouterStep::Use { id, .. } | RouterStep::Hold(Some(id)) => {
                keep.insert(id.clone());
            }
            _ => {}
        }
    }
    keep
}

/// Deletions of our objects that no entry uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sweep {
    /// (router, subnet) interfaces to remove.
    pub detach: Vec<(String, String)>,
    /// Routers to delete.
    pub routers: Vec<String>,
    /// Subnets to delete.
    pub subnets: Vec<String>,
    /// Networks to delete.
    pub networks: Vec<String>,
    /// Objects left in place and why.
    pub errors: Vec<Problem>,
}

/// Plans the sweep: only objects carrying this resource's marks; a network of ours that
/// carries someone else's subnet stays (deleting it would delete their subnet).
pub fn plan_sweep(obs: &Observed, keep: &BTreeSet<String>, owner: &Owner) -> Sweep {
    sweep_where(obs, keep, |tags, _| {
        owner.classify_tags(tags) == Ownership::Ours
    })
}

/// Plans the removal of everything of ours in a project that goes away; `strays` are names
/// (network, subnet, router) from the spec whose objects without any tag count as ours too:
/// left untagged by a crash between their create and tag calls, see [`Marks::own_project`].
pub fn plan_removal(obs: &Observed, owner: &Owner, strays: &BTreeSet<String>) -> Sweep {
    sweep_where(obs, &BTreeSet::new(), |tags, name| {
        owner.classify_tags(tags) == Ownership::Ours || (tags.is_empty() && strays.contains(name))
    })
}

/// The names of a spec's networks, subnets and routers.
pub fn spec_names(spec: &OpenstackProjectSpec) -> BTreeSet<String> {
    spec.networks
        .iter()
        .flatten()
        .flat_map(|n| [n.name.clone(), subnet_name(&n.name), router_name(&n.name)])
        .collect()
}

fn sweep_where(
    obs: &Observed,
    keep: &BTreeSet<String>,
    ours: impl Fn(&[String], &str) -> bool,
) -> Sweep {
    let mut sweep = Sweep::default();
    for r in obs
        .routers
        .iter()
        .filter(|r| ours(&r.tags, &r.name) && !keep.contains(&r.id))
    {
        for port in obs.interfaces.get(&r.id).into_iter().flatten() {
            for sid in port.fixed_ips.iter().filter_map(|f| f.subnet_id.as_ref()) {
                let pair = (r.id.clone(), sid.clone());
                if !sweep.detach.contains(&pair) {
                    sweep.detach.push(pair);
                }
            }
        }
        sweep.routers.push(r.id.clone());
    }
    for s in obs
        .subnets
        .iter()
        .filter(|s| ours(&s.tags, &s.name) && !keep.contains(&s.id))
    {
        for (rid, ports) in &obs.interfaces {
            let pair = (rid.clone(), s.id.clone());
            if ports.iter().any(|p| on_subnet(p, &s.id)) && !sweep.detach.contains(&pair) {
                sweep.detach.push(pair);
            }
        }
        sweep.subnets.push(s.id.clone());
    }
    for n in obs
        .networks
        .iter()
        .filter(|n| ours(&n.tags, &n.name) && !keep.contains(&n.id))
    {
        let foreign: Vec<&str> = obs
            .subnets
            .iter()
            .filter(|s| s.network_id == n.id && !ours(&s.tags, &s.name))
            .map(|s| s.name.as_str())
            .collect();
        if foreign.is_empty() {
            sweep.networks.push(n.id.clone());
        } else {
            sweep.errors.push(Problem::NotOwned(format!(
                "network {:?} ({}) is no longer in spec.networks but carries subnets this resource does not own ({}); left in place",
                n.name,
                n.id,
                foreign.join(", ")
            )));
        }
    }
    sweep
}

// ---------------------------------------------------------------------------------------
// Executors
// ---------------------------------------------------------------------------------------

/// Lists what the project has: one call per kind, plus the interfaces of the routers we may
/// touch (ours, or named like a spec router) and, when a gateway is asked for, the external
/// networks.
async fn observe(
    env: &Env<'_>,
    project_id: &str,
    entries: &[ProjectNetwork],
    fresh: bool,
) -> Result<Observed, ReconcileError> {
    let net = &env.cloud.network;
    let need_external = entries.iter().any(|n| {
        n.router
            .as_ref()
            .is_some_and(|r| r.external_network.is_some())
    });
    // The four lists are independent reads: sent at the same time.
    let (networks, subnets, routers, external) = futures::try_join!(
        async {
            if fresh {
                return Ok(Vec::new());
            }
            net.list_networks(&NetworkFilter {
                project_id: Some(project_id.to_string()),
                ..Default::default()
            })
            .await
            .map_err(|e| os("listing the project's networks", e))
        },
        async {
            if fresh {
                return Ok(Vec::new());
            }
            net.list_subnets(&SubnetFilter {
                project_id: Some(project_id.to_string()),
                ..Default::default()
            })
            .await
            .map_err(|e| os("listing the project's subnets", e))
        },
        async {
            if fresh {
                return Ok(Vec::new());
            }
            net.list_routers(&RouterFilter {
                project_id: Some(project_id.to_string()),
                ..Default::default()
            })
            .await
            .map_err(|e| os("listing the project's routers", e))
        },
        async {
            if !need_external {
                return Ok(Vec::new());
            }
            let cache = env.locks.lookups();
            let lock = env.locks.lock_for("lookup/external-networks");
            let _one = lock.lock().await;
            if let Some(ext) = cache.external_networks() {
                return Ok(ext);
            }
            let ext = net
                .list_networks(&NetworkFilter {
                    external: Some(true),
                    ..Default::default()
                })
                .await
                .map_err(|e| os("listing external networks", e))?;
            cache.put_external_networks(&ext);
            Ok(ext)
        },
    )?;
    let wanted: BTreeSet<String> = entries
        .iter()
        .filter(|n| n.router.is_some())
        .map(|n| router_name(&n.name))
        .collect();
    let ours: Vec<&Router> = routers
        .iter()
        .filter(|r| env.owner.classify_tags(&r.tags) == Ownership::Ours || wanted.contains(&r.name))
        .collect();
    let listed = futures::future::try_join_all(ours.iter().map(|r| async move {
        net.list_router_interfaces(&r.id)
            .await
            .map(|ports| (r.id.clone(), ports))
            .map_err(|e| os(format!("listing interfaces of router {}", r.id), e))
    }))
    .await?;
    let interfaces: BTreeMap<String, Vec<RouterPort>> = listed.into_iter().collect();
    Ok(Observed {
        networks,
        subnets,
        routers,
        interfaces,
        external,
    })
}

async fn retag(
    env: &Env<'_>,
    kind: TaggedResource,
    id: &str,
    tags: Option<Vec<String>>,
    path: &str,
    out: &mut AreaOutcome,
) {
    if let Some(tags) = tags {
        match env.cloud.network.set_tags(kind, id, &tags).await {
            Ok(()) => out.changed = true,
            Err(e) => out
                .errors
                .push(os(format!("{path}: marking {} {id}", kind.collection()), e)),
        }
    }
}

/// Runs one entry's plan; stops each of its chains (the network and its subnet; the router)
/// at its first failure, and attaches only when both stand.
async fn run_entry(env: &Env<'_>, plan: EntryPlan, out: &mut AreaOutcome) -> NetworkStatus {
    let path = format!("spec.networks[{}]", plan.index);
    let mut st = NetworkStatus {
        name: plan.name.clone(),
        ..Default::default()
    };
    out.errors
        .extend(plan.errors.into_iter().map(ReconcileError::from));
    // The router needs neither the network nor the subnet (only the external network), so
    // it is made at the same time as they are, unless a subnet is being replaced: then its
    // interfaces are detached first, and the router is left alone until that is done.
    let independent = plan.network.is_some()
        && matches!(
            plan.subnet,
            Some(SubnetStep::Create(_) | SubnetStep::Use { .. })
        );
    let (subnet, router) = if independent {
        let mut own = AreaOutcome::default();
        let (subnet, router) = futures::join!(
            network_and_subnet(env, plan.network, plan.subnet, &path, &mut st, out),
            router_step(env, plan.router, &path, &mut own),
        );
        out.changed |= own.changed;
        out.errors.extend(own.errors);
        (subnet, router)
    } else {
        match network_and_subnet(env, plan.network, plan.subnet, &path, &mut st, out).await {
            Some(subnet) => {
                let router = router_step(env, plan.router, &path, out).await;
                (Some(subnet), router)
            }
            None => return st,
        }
    };
    let Some(router) = router else {
        return st;
    };
    st.router_id = router.id.clone();
    if plan.attach
        && router.attach
        && let (Some(subnet_id), Some(router_id)) = (subnet, router.id)
    {
        match env
            .cloud
            .network
            .add_router_interface(&router_id, &subnet_id)
            .await
        {
            Ok(_) => out.changed = true,
            Err(e) => out.errors.push(os(
                format!("{path}.router: attaching subnet {subnet_id} to router {router_id}"),
                e,
            )),
        }
    }
    st
}

/// The router of an entry as [`router_step`] left it.
struct RouterDone {
    /// Its ID, if it exists.
    id: Option<String>,
    /// Whether it may get the subnet's interface (not held).
    attach: bool,
}

/// The network and subnet steps of an entry; records their IDs in `st` and returns the
/// subnet's ID, `None` when either is blocked or failed.
async fn network_and_subnet(
    env: &Env<'_>,
    network: Option<Obj<NetworkCreate>>,
    subnet: Option<SubnetStep>,
    path: &str,
    st: &mut NetworkStatus,
    out: &mut AreaOutcome,
) -> Option<String> {
    let net = &env.cloud.network;
    let network_id = match network {
        None => return None,
        Some(Obj::Use { id, retag: tags }) => {
            retag(env, TaggedResource::Network, &id, tags, path, out).await;
            id
        }
        Some(Obj::Create(req)) => match net.create_network(&req).await {
            Ok(n) => {
                out.changed = true;
                n.id
            }
            Err(e) => {
                out.errors
                    .push(os(format!("{path}: creating network {:?}", req.name), e));
                return None;
            }
        },
    };
    st.network_id = Some(network_id.clone());

    let subnet_id = match subnet {
        None => return None,
        Some(SubnetStep::Use {
            id,
            retag: tags,
            update,
        }) => {
            retag(env, TaggedResource::Subnet, &id, tags, path, out).await;
            if let Some(u) = update {
                match net.update_subnet(&id, &u).await {
                    Ok(_) => out.changed = true,
                    Err(e) => out
                        .errors
                        .push(os(format!("{path}: updating subnet {id} (DHCP/DNS)"), e)),
                }
            }
            id
        }
        Some(SubnetStep::Create(mut req)) => {
            req.network_id = network_id.clone();
            match net.create_subnet(&req).await {
                Ok(s) => {
                    out.changed = true;
                    s.id
                }
                Err(e) => {
                    out.errors.push(os(
                        format!("{path}.cidr: creating subnet {:?}", req.name),
                        e,
                    ));
                    return None;
                }
            }
        }
        Some(SubnetStep::Replace {
            old,
            detach,
            mut create,
        }) => {
            for r in &detach {
                if let Err(e) = net.remove_router_interface(r, &old).await.optional() {
                    out.errors.push(os(
                        format!(
                            "{path}.cidr: detaching subnet {old} from router {r} to replace it"
                        ),
                        e,
                    ));
                    st.subnet_id = Some(old);
                    return None;
                }
                out.changed = true;
            }
            if let Err(e) = net.delete_subnet(&old).await.optional() {
                out.errors.push(os(
                    format!(
                        "{path}.cidr: deleting subnet {old} to replace it with {}",
                        create.cidr
                    ),
                    e,
                ));
                st.subnet_id = Some(old);
                return None;
            }
            out.changed = true;
            create.network_id = network_id.clone();
            match net.create_subnet(&create).await {
                Ok(s) => s.id,
                Err(e) => {
                    out.errors.push(os(
                        format!("{path}.cidr: creating subnet {:?}", create.name),
                        e,
                    ));
                    return None;
                }
            }
        }
    };
    st.subnet_id = Some(subnet_id.clone());
    Some(subnet_id)
}

/// The router step of an entry; `None`: no router is asked for, or making it failed.
async fn router_step(
    env: &Env<'_>,
    router: RouterStep,
    path: &str,
    out: &mut AreaOutcome,
) -> Option<RouterDone> {
    let net = &env.cloud.network;
    let id = match router {
        RouterStep::Absent => return None,
        RouterStep::Hold(id) => return Some(RouterDone { id, attach: false }),
        RouterStep::Use {
            id,
            retag: tags,
            update,
        } => {
            retag(env, TaggedResource::Router, &id, tags, path, out).await;
            if let Some(u) = update {
                match net.update_router(&id, &u).await {
                    Ok(_) => out.changed = true,
                    Err(e) => out.errors.push(os(
                        format!("{path}.router: updating the gateway of router {id}"),
                        e,
                    )),
                }
            }
            id
        }
        RouterStep::Create(req) => match net.create_router(&req).await {
            Ok(r) => {
                out.changed = true;
                r.id
            }
            Err(e) => {
                out.errors.push(os(
                    format!("{path}.router: creating router {:?}", req.name),
                    e,
                ));
                return None;
            }
        },
    };
    Some(RouterDone {
        id: Some(id),
        attach: true,
    })
}

/// Runs a sweep; everything already gone is fine.
async fn run_sweep(env: &Env<'_>, sweep: Sweep, out: &mut AreaOutcome) {
    let net = &env.cloud.network;
    out.errors
        .extend(sweep.errors.into_iter().map(ReconcileError::from));
    for (r, s) in &sweep.detach {
        match net.remove_router_interface(r, s).await.optional() {
            Ok(_) => out.changed = true,
            Err(e) => out.errors.push(os(
                format!("removing the interface of router {r} on subnet {s} (no longer in spec.networks)"),
                e,
            )),
        }
    }
    for r in &sweep.routers {
        match net.delete_router(r).await.optional() {
            Ok(_) => out.changed = true,
            Err(e) => out.errors.push(os(
                format!("deleting router {r} (no longer in spec.networks)"),
                e,
            )),
        }
    }
    for s in &sweep.subnets {
        match net.delete_subnet(s).await.optional() {
            Ok(_) => out.changed = true,
            Err(e) => out.errors.push(os(
                format!("deleting subnet {s} (no longer in spec.networks)"),
                e,
            )),
        }
    }
    for n in &sweep.networks {
        match net.delete_network(n).await.optional() {
            Ok(_) => out.changed = true,
            Err(e) => out.errors.push(os(
                format!("deleting network {n} (no longer in spec.networks)"),
                e,
            )),
        }
    }
}

/// Makes the project's networks match `spec.networks`; writes `status.networks` (one entry per
/// spec network, IDs as far as they exist).
/// `fresh`: the project was created in this pass, so it has no Neutron object yet and its
/// lists are not read (see [`super::identity::Tenant::created`]).
pub(crate) async fn apply(
    env: &Env<'_>,
    spec: &OpenstackProjectSpec,
    project_id: &str,
    status: &mut OpenstackProjectStatus,
    fresh: bool,
) -> AreaOutcome {
    let mut out = AreaOutcome::default();
    let entries = spec.networks.as_deref().unwrap_or_default();
    let obs = match observe(env, project_id, entries, fresh).await {
        Ok(o) => o,
        Err(e) => {
            out.errors.push(e);
            return out;
        }
    };
    let marks = Marks {
        owner: &env.owner,
        adopt: spec.adopt,
        adopt_legacy: env.config.adopt_legacy,
        own_project: status.adopted == Some(false),
    };
    let plans: Vec<EntryPlan> = entries
        .iter()
        .enumerate()
        .map(|(i, n)| plan_entry(i, n, project_id, &obs, &marks))
        .collect();
    let sweep = plan_sweep(&obs, &kept(&plans), &env.owner);
    // Entries are independent of one another (each its own network, subnet and router):
    // they run at the same time, each with its own outcome, merged in spec order.
    let ran = futures::future::join_all(plans.into_iter().map(|plan| async {
        let mut own = AreaOutcome::default();
        let st = run_entry(env, plan, &mut own).await;
        (st, own)
    }))
    .await;
    let mut statuses = Vec::with_capacity(ran.len());
    for (st, own) in ran {
        out.changed |= own.changed;
        out.errors.extend(own.errors);
        statuses.push(st);
    }
    status.networks = statuses;
    run_sweep(env, sweep, &mut out).await;
    out
}

/// Deletes every network object of the project that carries our marks; with `own` (the
/// spec of a project this resource created, which goes too) also the untagged ones with the
/// spec's names that a crash left behind.
pub(crate) async fn remove_all(
    env: &Env<'_>,
    project_id: &str,
    own: Option<&OpenstackProjectSpec>,
) -> AreaOutcome {
    let mut out = AreaOutcome::default();
    match observe(env, project_id, &[], false).await {
        Ok(obs) => {
            let strays = own.map(spec_names).unwrap_or_default();
            let sweep = plan_removal(&obs, &env.owner, &strays);
            run_sweep(env, sweep, &mut out).await;
        }
        Err(e) => out.errors.push(e),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::project::ProjectRouter;
    use openstack::model::FixedIp;

    fn owner() -> Owner {
        Owner {
            cluster: "c".into(),
            uid: "u".into(),
        }
    }

    fn marks(o: &Owner) -> Marks<'_> {
        Marks {
            owner: o,
            adopt: false,
            adopt_legacy: false,
            own_project: false,
        }
    }

    fn entry(router: bool) -> ProjectNetwork {
        ProjectNetwork {
            name: "internal".into(),
            cidr: "10.0.0.0/24".into(),
            enable_dhcp: true,
            dns_nameservers: Some(vec!["192.0.2.53".into()]),
            router: router.then(|| ProjectRouter {
                external_network: Some("public".into()),
                enable_snat: true,
            }),
        }
    }

    /// What a converged entry looks like in Neutron.
    fn converged(o: &Owner) -> Observed {
        Observed {
            networks: vec![Network {
                id: "n1".into(),
                name: "internal".into(),
                project_id: "p".into(),
                tags: o.tags(),
                ..Default::default()
            }],
            subnets: vec![Subnet {
                id: "s1".into(),
                name: "internal-subnet".into(),
                network_id: "n1".into(),
                project_id: "p".into(),
                ip_version: 4,
                cidr: "10.0.0.0/24".into(),
                enable_dhcp: true,
                dns_nameservers: vec!["192.0.2.53".into()],
                tags: o.tags(),
                ..Default::default()
            }],
            routers: vec![Router {
                id: "r1".into(),
                name: "internal-router".into(),
                project_id: "p".into(),
                external_gateway: Some(ExternalGateway {
                    network_id: "ext".into(),
                    enable_snat: Some(true),
                    external_fixed_ips: vec![],
                }),
                tags: o.tags(),
                ..Default::default()
            }],
            interfaces: [(
                "r1".to_string(),
                vec![RouterPort {
                    port_id: "port".into(),
                    network_id: "n1".into(),
                    fixed_ips: vec![FixedIp {
                        subnet_id: Some("s1".into()),
                        ip_address: Some("10.0.0.1".into()),
                    }],
                    device_owner: "network:router_interface".into(),
                }],
            )]
            .into(),
            external: vec![Network {
                id: "ext".into(),
                name: "public".into(),
                external: true,
                ..Default::default()
            }],
        }
    }

    #[test]
    fn empty_project_creates_everything() {
        let o = owner();
        let mut obs = converged(&o);
        obs.networks.clear();
        obs.subnets.clear();
        obs.routers.clear();
        obs.interfaces.clear();
        let p = plan_entry(0, &entry(true), "p", &obs, &marks(&o));
        assert!(p.errors.is_empty());
        assert!(matches!(p.network, Some(Obj::Create(ref r)) if r.tags == o.tags()));
        let Some(SubnetStep::Create(s)) = &p.subnet else {
            panic!("{p:?}")
        };
        assert_eq!(
            (s.ip_version, s.cidr.as_str(), s.enable_dhcp),
            (4, "10.0.0.0/24", Some(true))
        );
        let RouterStep::Create(r) = &p.router else {
            panic!()
        };
        assert_eq!(r.external_gateway.as_ref().unwrap().network_id, "ext");
        assert_eq!(r.external_gateway.as_ref().unwrap().enable_snat, Some(true));
        assert!(p.attach);
    }

    #[test]
    fn converged_entry_plans_nothing() {
        let o = owner();
        let obs = converged(&o);
        let p = plan_entry(0, &entry(true), "p", &obs, &marks(&o));
        assert_eq!(
            p,
            EntryPlan {
                index: 0,
                name: "internal".into(),
                network: Some(Obj::Use {
                    id: "n1".into(),
                    retag: None
                }),
                subnet: Some(SubnetStep::Use {
                    id: "s1".into(),
                    retag: None,
                    update: None
                }),
                router: RouterStep::Use {
                    id: "r1".into(),
                    retag: None,
                    update: None
                },
                attach: false,
                errors: vec![],
            }
        );
        assert_eq!(plan_sweep(&obs, &kept(&[p]), &o), Sweep::default());
    }

    #[test]
    fn dhcp_dns_snat_change_in_place_and_cidr_replaces() {
        let o = owner();
        let obs = converged(&o);
        let mut e = entry(true);
        e.enable_dhcp = false;
        e.dns_nameservers = None;
        e.router.as_mut().unwrap().enable_snat = false;
        let p = plan_entry(0, &e, "p", &obs, &marks(&o));
        let Some(SubnetStep::Use {
            update: Some(u), ..
        }) = &p.subnet
        else {
            panic!("{p:?}")
        };
        assert_eq!(u.enable_dhcp, Some(false));
        assert_eq!(u.dns_nameservers, Some(vec![]));
        let RouterStep::Use {
            update: Some(ru), ..
        } = &p.router
        else {
            panic!()
        };
        assert_eq!(
            ru.external_gateway
                .as_ref()
                .unwrap()
                .as_ref()
                .unwrap()
                .enable_snat,
            Some(false)
        );

        let mut e = entry(true);
        e.cidr = "10.1.0.0/24".into();
        let p = plan_entry(0, &e, "p", &obs, &marks(&o));
        let Some(SubnetStep::Replace {
            old,
            detach,
            create,
        }) = &p.subnet
        else {
            panic!("{p:?}")
        };
        assert_eq!(
            (old.as_str(), detach.as_slice()),
            ("s1", &["r1".to_string()][..])
        );
        assert_eq!(create.cidr, "10.1.0.0/24");
        assert!(p.attach);
        // Host bits in the spec are not a change.
        let mut e = entry(true);
        e.cidr = "10.0.0.7/24".into();
        assert!(matches!(
            plan_entry(0, &e, "p", &obs, &marks(&o)).subnet,
            Some(SubnetStep::Use { update: None, .. })
        ));
    }

    #[test]
    fn missing_external_network_holds_the_router() {
        let o = owner();
        let mut obs = converged(&o);
        obs.external.clear();
        let p = plan_entry(2, &entry(true), "p", &obs, &marks(&o));
        assert_eq!(p.router, RouterStep::Hold(Some("r1".into())));
        assert!(
            p.errors[0]
                .to_string()
                .contains("spec.networks[2].router.externalNetwork")
        );
        // The held router is not swept.
        assert!(plan_sweep(&obs, &kept(&[p]), &o).routers.is_empty());
    }

    #[test]
    fn removed_router_and_entries_are_swept_in_order() {
        let o = owner();
        let obs = converged(&o);
        let p = plan_entry(0, &entry(false), "p", &obs, &marks(&o));
        assert_eq!(p.router, RouterStep::Absent);
        let s = plan_sweep(&obs, &kept(&[p]), &o);
        assert_eq!(s.detach, vec![("r1".to_string(), "s1".to_string())]);
        assert_eq!(s.routers, vec!["r1".to_string()]);
        assert!(s.subnets.is_empty() && s.networks.is_empty());
        let all = plan_sweep(&obs, &BTreeSet::new(), &o);
        assert_eq!(all.subnets, vec!["s1".to_string()]);
        assert_eq!(all.networks, vec!["n1".to_string()]);
    }

    #[test]
    fn foreign_objects_are_neither_used_nor_swept() {
        let o = owner();
        let mut obs = converged(&o);
        obs.networks[0].tags = vec!["someone-else".into()];
        let p = plan_entry(0, &entry(true), "p", &obs, &marks(&o));
        assert!(p.network.is_none());
        assert!(matches!(p.errors[0], Problem::NotOwned(_)));
        assert!(p.errors[0].to_string().contains("spec.networks[0].name"));
        let s = plan_sweep(&obs, &BTreeSet::new(), &o);
        assert!(s.networks.is_empty());
        // Our network with a foreign subnet stays.
        let mut obs = converged(&o);
        obs.subnets[0].tags.clear();
        let s = plan_sweep(&obs, &BTreeSet::new(), &o);
        assert!(s.networks.is_empty() && s.subnets.is_empty());
        assert_eq!(s.errors.len(), 1);
        // With spec.adopt a foreign network is taken over and marked.
        let mut obs = converged(&o);
        obs.networks[0].tags = vec!["keep".into()];
        let m = Marks {
            adopt: true,
            ..marks(&o)
        };
        let p = plan_entry(0, &entry(true), "p", &obs, &m);
        let Some(Obj::Use {
            retag: Some(tags), ..
        }) = &p.network
        else {
            panic!()
        };
        assert!(tags.contains(&"keep".to_string()) && o.tags().iter().all(|t| tags.contains(t)));
    }

    #[test]
    fn gateway_changes() {
        let gw = |n: &str, snat: Option<bool>| ExternalGateway {
            network_id: n.into(),
            enable_snat: snat,
            external_fixed_ips: vec![],
        };
        let req = |n: &str, snat: bool| ExternalGatewayRequest {
            network_id: n.into(),
            enable_snat: Some(snat),
            external_fixed_ips: vec![],
        };
        assert_eq!(gateway_change(None, None), None);
        assert_eq!(gateway_change(Some(&gw("a", Some(true))), None), Some(None));
        assert_eq!(
            gateway_change(Some(&gw("a", Some(true))), Some(&req("a", true))),
            None
        );
        // SNAT not visible: not a difference.
        assert_eq!(
            gateway_change(Some(&gw("a", None)), Some(&req("a", false))),
            None
        );
        assert!(gateway_change(Some(&gw("a", Some(true))), Some(&req("b", true))).is_some());
    }

    #[test]
    fn untagged_objects_in_our_own_project_are_claimed() {
        let o = owner();
        let mut obs = converged(&o);
        obs.networks[0].tags.clear();
        obs.subnets[0].tags.clear();
        obs.routers[0].tags.clear();
        let own = Marks {
            own_project: true,
            ..marks(&o)
        };
        let p = plan_entry(0, &entry(true), "p", &obs, &own);
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        assert!(
            matches!(&p.network, Some(Obj::Use { id, retag: Some(t) }) if id == "n1" && *t == o.tags()),
            "{p:?}"
        );
        assert!(
            matches!(&p.subnet, Some(SubnetStep::Use { id, retag: Some(t), .. }) if id == "s1" && *t == o.tags()),
            "{p:?}"
        );
        assert!(
            matches!(&p.router, RouterStep::Use { id, retag: Some(t), .. } if id == "r1" && *t == o.tags()),
            "{p:?}"
        );
        assert!(!p.attach, "the interface exists already");

        // In an adopted project an untagged object may be someone else's: refused.
        let p = plan_entry(0, &entry(true), "p", &obs, &marks(&o));
        assert!(matches!(p.errors[..], [Problem::NotOwned(_)]), "{p:?}");
        // A tagged object of someone else's stays refused in our own project too.
        obs.networks[0].tags = vec!["someone-else".into()];
        let p = plan_entry(0, &entry(true), "p", &obs, &own);
        assert!(matches!(p.errors[..], [Problem::NotOwned(_)]), "{p:?}");
    }

    /// A fake cloud with an external network `public`, and the project of [`CRASHED`] after a
    /// first pass that created the Keystone project but whose Neutron creates all ended in a
    /// crash right after the create call: untagged objects with the spec's names.
    struct Crashed {
        fake: openstack::fake::FakeCloud,
        cloud: openstack::Cloud,
        config: crate::context::Config,
        locks: crate::project::LocalLocks,
        obj: api::OpenstackProject,
        status: OpenstackProjectStatus,
        pid: String,
        network_id: String,
    }

    const CRASHED: &str = r#"
apiVersion: sunet.se/v1alpha1
kind: OpenstackProject
metadata: {name: p, namespace: demo, uid: uid-crash}
spec:
  name: p.example.com
  domain: default
  enabled: true
  networks:
    - {name: internal, cidr: 10.0.0.0/24, router: {externalNetwork: public}}
  securityGroups:
    - name: web
      rules:
        - {direction: ingress, protocol: tcp, portRangeMin: 22, portRangeMax: 22}
"#;

    impl Crashed {
        fn env(&self) -> crate::project::Env<'_> {
            crate::project::Env {
                cloud: &self.cloud,
                config: &self.config,
                owner: Owner {
                    cluster: self.config.cluster_id.clone(),
                    uid: "uid-crash".into(),
                },
                locks: &self.locks,
            }
        }

        async fn new() -> Self {
            use crate::project::{FederationInput, reconcile_project};
            let fake = openstack::fake::FakeCloud::new();
            let cloud = fake.cloud();
            let ext = cloud
                .network
                .create_network(&NetworkCreate {
                    name: "public".into(),
                    external: Some(true),
                    ..Default::default()
                })
                .await
                .expect("external network");
            cloud
                .network
                .create_subnet(&SubnetCreate {
                    network_id: ext.id,
                    name: "public-subnet".into(),
                    ip_version: 4,
                    cidr: "172.24.4.0/24".into(),
                    ..Default::default()
                })
                .await
                .expect("external subnet");
            let doc = api::manifest::documents(CRASHED)
                .expect("a manifest")
                .remove(0);
            let mut obj: api::OpenstackProject = serde_json::from_value(doc).expect("a project");
            obj.metadata.generation = Some(1);
            let mut w = Crashed {
                fake,
                cloud,
                config: crate::context::Config::default(),
                locks: crate::project::LocalLocks::default(),
                obj,
                status: OpenstackProjectStatus::default(),
                pid: String::new(),
                network_id: String::new(),
            };
            // First pass: the project is made, Neutron is not reachable.
            let down = || openstack::Error::transient("neutron: 503");
            w.fake.fail_next("network.create_network", 1, down());
            // The router is made beside the network, not after it.
            w.fake.fail_next("network.create_router", 1, down());
            w.fake.fail_next("network.create_security_group", 1, down());
            let mut status = OpenstackProjectStatus::default();
            let first =
                reconcile_project(&w.env(), &w.obj, &mut status, FederationInput::NotRequested)
                    .await
                    .result;
            assert!(first.is_err(), "{first:?}");
            let pid = status.project_id.clone().expect("the project exists");
            // What a crash right after each create call leaves: objects without tags.
            let net = &w.cloud.network;
            let n = net
                .create_network(&NetworkCreate {
                    name: "internal".into(),
                    project_id: Some(pid.clone()),
                    ..Default::default()
                })
                .await
                .expect("network");
            net.create_subnet(&SubnetCreate {
                network_id: n.id.clone(),
                name: "internal-subnet".into(),
                ip_version: 4,
                cidr: "10.0.0.0/24".into(),
                project_id: Some(pid.clone()),
                ..Default::default()
            })
            .await
            .expect("subnet");
            net.create_router(&RouterCreate {
                name: "internal-router".into(),
                project_id: Some(pid.clone()),
                ..Default::default()
            })
            .await
            .expect("router");
            net.create_security_group(&openstack::model::SecurityGroupCreate {
                name: "web".into(),
                project_id: Some(pid.clone()),
                ..Default::default()
            })
            .await
            .expect("security group");
            w.status = status;
            w.pid = pid;
            w.network_id = n.id;
            w
        }
    }

    /// A crash between a create call and its tag call (Neutron takes no tags at creation)
    /// leaves an untagged network, subnet, router and security group with the spec's names in
    /// the project the operator created. The next pass takes them as its own and converges,
    /// without a second copy; before, it refused them forever ("not created by this
    /// operator"), as the SIGKILL loop showed with routers.
    #[tokio::test]
    async fn objects_left_untagged_by_a_crash_are_taken_as_ours() {
        use crate::project::{FederationInput, reconcile_project};
        let w = Crashed::new().await;
        let env = w.env();
        let (pid, net) = (w.pid.clone(), &w.cloud.network);
        let mut status = w.status.clone();
        reconcile_project(&env, &w.obj, &mut status, FederationInput::NotRequested)
            .await
            .result
            .expect("the next pass converges");
        let ours = |tags: &[String]| env.owner.classify_tags(tags) == Ownership::Ours;
        let filter = NetworkFilter {
            project_id: Some(pid.clone()),
            ..Default::default()
        };
        let nets = net.list_networks(&filter).await.expect("networks");
        assert!(
            nets.len() == 1 && ours(&nets[0].tags) && nets[0].id == w.network_id,
            "{nets:?}"
        );
        let subnets = net
            .list_subnets(&SubnetFilter {
                project_id: Some(pid.clone()),
                ..Default::default()
            })
            .await
            .expect("subnets");
        assert!(subnets.len() == 1 && ours(&subnets[0].tags), "{subnets:?}");
        let routers = net
            .list_routers(&RouterFilter {
                project_id: Some(pid.clone()),
                ..Default::default()
            })
            .await
            .expect("routers");
        assert!(routers.len() == 1 && ours(&routers[0].tags), "{routers:?}");
        let ports = net
            .list_router_interfaces(&routers[0].id)
            .await
            .expect("interfaces");
        assert_eq!(ports.len(), 1, "attached once: {ports:?}");
        let groups: Vec<_> = net
            .list_security_groups(&openstack::model::SecurityGroupFilter {
                project_id: Some(pid.clone()),
                ..Default::default()
            })
            .await
            .expect("groups")
            .into_iter()
            .filter(|g| g.name == "web")
            .collect();
        assert!(groups.len() == 1 && ours(&groups[0].tags), "{groups:?}");
    }

    /// Deleted before any pass claimed them, the objects a crash left untagged in the project
    /// go with it (before, the project was deleted and they stayed in Neutron for good).
    #[tokio::test]
    async fn deletion_removes_objects_left_untagged_by_a_crash() {
        use crate::project::{FederationInput, cleanup_project};
        let w = Crashed::new().await;
        let mut status = w.status.clone();
        cleanup_project(&w.env(), &w.obj, &mut status, FederationInput::NotRequested)
            .await
            .result
            .expect("deletion succeeds");
        let net = &w.cloud.network;
        let left_nets: Vec<String> = net
            .list_networks(&NetworkFilter::default())
            .await
            .expect("networks")
            .into_iter()
            .filter(|n| n.project_id == w.pid)
            .map(|n| n.name)
            .collect();
        let left_subnets: Vec<String> = net
            .list_subnets(&SubnetFilter::default())
            .await
            .expect("subnets")
            .into_iter()
            .filter(|s| s.project_id == w.pid)
            .map(|s| s.name)
            .collect();
        let left_routers: Vec<String> = net
            .list_routers(&RouterFilter::default())
            .await
            .expect("routers")
            .into_iter()
            .filter(|r| r.project_id == w.pid)
            .map(|r| r.name)
            .collect();
        let left_groups: Vec<String> = net
            .list_security_groups(&openstack::model::SecurityGroupFilter::default())
            .await
            .expect("groups")
            .into_iter()
            .filter(|g| g.project_id == w.pid)
            .map(|g| g.name)
            .collect();
        assert_eq!(
            (left_nets, left_subnets, left_routers, left_groups),
            (vec![], vec![], vec![], vec![]),
            "nothing of the deleted project is left in Neutron"
        );
    }
}
