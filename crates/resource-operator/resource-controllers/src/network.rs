//! OpenstackNetwork: a Neutron provider network with inline subnets. Subnets are reconciled
//! in place by name; provider attributes are immutable in Neutron, so changing them replaces
//! a network we created (never one we adopted).

use api::network::{PendingCreate, ProviderSubnet};
use api::{FieldError, OpenstackNetwork, OpenstackNetworkSpec, OpenstackNetworkStatus};
use async_trait::async_trait;
use kube::Api;
use kube::runtime::events::EventType;
use openstack::OptionalExt;
use openstack::model::{
    AllocationPool, GatewayIp, Network, NetworkCreate, NetworkFilter, NetworkUpdate, Subnet,
    SubnetCreate, SubnetFilter, SubnetUpdate, TaggedResource,
};

use crate::context::Context;
use crate::error::{ReconcileError, Result};
use crate::framework::{Managed, Progress, now, owner_of, publish, save_status};
use crate::ownership::{Owner, Ownership, may_take_over, merge_marks, should_delete, strip_marks};

/// One subnet step (pure plan).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubnetStep {
    /// Create the subnet.
    Create(SubnetCreate),
    /// Change attributes in place.
    Update(String, SubnetUpdate),
    /// Delete (an extra subnet of ours, or one whose CIDR changed).
    Delete(String, String),
    /// Mark as ours an unmarked subnet with a spec name and CIDR on a network we created:
    /// a pass interrupted between the subnet's create and its tags left it so (only the
    /// network's owner or an admin can add subnets to it).
    Claim(String, Vec<String>),
}

fn create_network_request(spec: &OpenstackNetworkSpec, owner: &Owner) -> NetworkCreate {
    NetworkCreate {
        name: spec.name.clone(),
        description: (!spec.description.is_empty()).then(|| spec.description.clone()),
        shared: Some(spec.shared),
        external: Some(spec.external),
        provider_network_type: Some(spec.network_type().as_str().into()),
        provider_physical_network: spec
            .provider_physical_network
            .clone()
            .filter(|p| !p.is_empty()),
        provider_segmentation_id: spec.provider_segmentation_id,
        tags: owner.tags(),
        ..Default::default()
    }
}

/// Provider attributes that differ (immutable in Neutron).
pub fn provider_changes(spec: &OpenstackNetworkSpec, n: &Network) -> Vec<&'static str> {
    let mut changed = Vec::new();
    if n.provider_network_type.as_deref() != Some(spec.network_type().as_str()) {
        changed.push("providerNetworkType");
    }
    let physnet = spec
        .provider_physical_network
        .as_deref()
        .filter(|p| !p.is_empty());
    if n.provider_physical_network.as_deref() != physnet {
        changed.push("providerPhysicalNetwork");
    }
    if spec.provider_segmentation_id.is_some()
        && n.provider_segmentation_id != spec.provider_segmentation_id
    {
        changed.push("providerSegmentationId");
    }
    changed
}

/// Mutable network attributes that differ.
pub fn network_update(spec: &OpenstackNetworkSpec, n: &Network) -> NetworkUpdate {
    NetworkUpdate {
        description: (n.description != spec.description).then(|| spec.description.clone()),
        external: (n.external != spec.external).then_some(spec.external),
        shared: (n.shared != spec.shared).then_some(spec.shared),
        ..Default::default()
    }
}

fn pools(s: &ProviderSubnet) -> Option<Vec<AllocationPool>> {
    s.allocation_pools.as_ref().map(|p| {
        p.iter()
            .map(|p| AllocationPool {
                start: p.start.clone(),
                end: p.end.clone(),
            })
            .collect()
    })
}

fn create_subnet_request(network_id: &str, s: &ProviderSubnet, owner: &Owner) -> SubnetCreate {
    SubnetCreate {
        network_id: network_id.into(),
        name: s.name.clone(),
        ip_version: 4,
        cidr: s.cidr.clone(),
        gateway: s
            .effective_gateway()
            .map(|g| GatewayIp::Address(g.into()))
            .unwrap_or_default(),
        enable_dhcp: Some(s.enable_dhcp),
        dns_nameservers: s.dns_nameservers.clone().unwrap_or_default(),
        allocation_pools: pools(s).unwrap_or_default(),
        tags: owner.tags(),
        ..Default::default()
    }
}

fn same_cidr(a: &str, b: &str) -> bool {
    match (
        api::validation::parse_ipv4_cidr(a),
        api::validation::parse_ipv4_cidr(b),
    ) {
        (Some(x), Some(y)) => x.trunc() == y.trunc(),
        _ => a == b,
    }
}

/// Plans the subnets of a network: spec subnets by name against what exists.
pub fn plan_subnets(
    network_id: &str,
    spec: &[ProviderSubnet],
    observed: &[Subnet],
    owner: &Owner,
    adopted: bool,
) -> Result<Vec<SubnetStep>> {
    let mut steps = Vec::new();
    for (i, s) in spec.iter().enumerate() {
        let Some(o) = observed.iter().find(|o| o.name == s.name) else {
            steps.push(SubnetStep::Create(create_subnet_request(
                network_id, s, owner,
            )));
            continue;
        };
        let ownership = owner.classify_tags(&o.tags);
        if ownership == Ownership::Foreign && !adopted && same_cidr(&o.cidr, &s.cidr) {
            steps.push(SubnetStep::Claim(o.id.clone(), merge_marks(&o.tags, owner)));
        } else if ownership != Ownership::Ours && !adopted {
            return Err(ReconcileError::NotOwned(format!(
                "spec.subnets[{i}]: subnet {:?} ({}) exists on the network but was not created by this operator",
                o.name, o.id
            )));
        }
        if !same_cidr(&o.cidr, &s.cidr) {
            steps.push(SubnetStep::Delete(
                o.id.clone(),
                format!("its CIDR changed from {} to {}", o.cidr, s.cidr),
            ));
            steps.push(SubnetStep::Create(create_subnet_request(
                network_id, s, owner,
            )));
            continue;
        }
        let mut u = SubnetUpdate::default();
        if let Some(g) = s.effective_gateway()
            && o.gateway_ip.as_deref() != Some(g)
        {
            u.gateway = Some(GatewayIp::Address(g.into()));
        }
        if o.enable_dhcp != s.enable_dhcp {
            u.enable_dhcp = Some(s.enable_dhcp);
        }
        let dns = s.dns_nameservers.clone().unwrap_or_default();
        if o.dns_nameservers != dns {
            u.dns_nameservers = Some(dns);
        }
        if let Some(p) = pools(s)
            && o.allocation_pools != p
        {
            u.allocation_pools = Some(p);
        }
        if u != SubnetUpdate::default() {
            steps.push(SubnetStep::Update(o.id.clone(), u));
        }
    }
    for o in observed {
        if !spec.iter().any(|s| s.name == o.name) && owner.classify_tags(&o.tags) == Ownership::Ours
        {
            steps.push(SubnetStep::Delete(
                o.id.clone(),
                "it is no longer in spec.subnets".into(),
            ));
        }
    }
    Ok(steps)
}

/// How an existing network found by [`find_network`] becomes this object's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Take {
    /// Already ours.
    No,
    /// Adopt it (`spec.adopt`, or the seed's tag with legacy adoption on).
    Adopt,
    /// Our own create whose pass was interrupted before the tags: mark it.
    Recover,
}

/// The one unmarked network that an interrupted create of ours can have left: same name and
/// provider attributes, no marks at all, and a create of that name recorded as pending. Two
/// or more such networks are not guessed between.
fn interrupted_create<'a>(
    spec: &OpenstackNetworkSpec,
    pending: Option<&PendingCreate>,
    same_name: &'a [Network],
    owner: &Owner,
) -> Option<&'a Network> {
    if pending?.name != spec.name {
        return None;
    }
    let mut unmarked = same_name.iter().filter(|n| {
        owner.classify_tags(&n.tags) == Ownership::Foreign && provider_changes(spec, n).is_empty()
    });
    let first = unmarked.next()?;
    unmarked.next().is_none().then_some(first)
}

/// Among the networks named like the spec: ours by its marks, else the one an interrupted
/// create of ours left unmarked (to be marked).
fn ours_by_name<'a>(
    spec: &OpenstackNetworkSpec,
    pending: Option<&PendingCreate>,
    same_name: &'a [Network],
    owner: &Owner,
) -> Option<(&'a Network, Take)> {
    same_name
        .iter()
        .find(|n| owner.classify_tags(&n.tags) == Ownership::Ours)
        .map(|n| (n, Take::No))
        .or_else(|| interrupted_create(spec, pending, same_name, owner).map(|n| (n, Take::Recover)))
}

async fn find_network(
    ctx: &Context,
    obj: &OpenstackNetwork,
    owner: &Owner,
    status: &OpenstackNetworkStatus,
) -> Result<(Option<Network>, Take)> {
    let neutron = &ctx.cloud.network;
    if let Some(id) = &status.network_id
        && let Some(n) = neutron.get_network(id).await.optional()?
    {
        return Ok((Some(n), Take::No));
    }
    let same_name = neutron
        .list_networks(&NetworkFilter {
            name: Some(obj.spec.name.clone()),
            ..Default::default()
        })
        .await?;
    if let Some((n, take)) =
        ours_by_name(&obj.spec, status.pending_create.as_ref(), &same_name, owner)
    {
        return Ok((Some(n.clone()), take));
    }
    // W20: only a provider network of the same kind can be this object; a tenant network that
    // happens to share the name is ignored.
    let candidate = same_name
        .into_iter()
        .find(|n| provider_changes(&obj.spec, n).is_empty());
    let Some(n) = candidate else {
        return Ok((None, Take::No));
    };
    let take = may_take_over(
        &owner.classify_tags(&n.tags),
        obj.spec.adopt,
        ctx.config.adopt_legacy,
        &format!("Neutron network {:?} ({})", n.name, n.id),
    )
    .map_err(ReconcileError::NotOwned)?;
    Ok((Some(n), if take { Take::Adopt } else { Take::No }))
}

/// Creates the network, recording the intent in the status first (written before the call),
/// so that an interrupted pass recognises the network later; see [`interrupted_create`].
async fn create_recorded(
    ctx: &Context,
    obj: &OpenstackNetwork,
    owner: &Owner,
    status: &mut OpenstackNetworkStatus,
) -> Result<Network> {
    if status.pending_create.as_ref().map(|p| &p.name) != Some(&obj.spec.name) {
        status.pending_create = Some(PendingCreate {
            name: obj.spec.name.clone(),
            since: now(),
        });
        save_status(ctx, obj, status).await?;
    }
    let n = match ctx
        .cloud
        .network
        .create_network(&create_network_request(&obj.spec, owner))
        .await
    {
        Ok(n) => n,
        Err(e) => {
            if e.is_rejection() {
                // Nothing was made: forget the intent, so that a network of that name made
                // later by someone else is never taken for ours.
                status.pending_create = None;
                save_status(ctx, obj, status).await?;
            }
            return Err(e.into());
        }
    };
    status.network_id = Some(n.id.clone());
    status.pending_create = None;
    Ok(n)
}

async fn delete_our_subnets(ctx: &Context, network_id: &str, owner: &Owner) -> Result<()> {
    let subnets = ctx
        .cloud
        .network
        .list_subnets(&SubnetFilter {
            network_id: Some(network_id.into()),
            ..Default::default()
        })
        .await?;
    for s in subnets
        .iter()
        .filter(|s| owner.classify_tags(&s.tags) == Ownership::Ours)
    {
        ctx.cloud.network.delete_subnet(&s.id).await.optional()?;
    }
    Ok(())
}

/// The Ready condition after a pass: `Created` when this pass created the network (as its
/// Event says), `Updated` when it changed an existing one, `InSync` otherwise.
fn ready(network_id: &str, created: bool, changed: bool) -> Progress {
    if created {
        Progress::ready("Created", format!("network {network_id} created"))
    } else if changed {
        Progress::ready("Updated", format!("network {network_id} reconciled"))
    } else {
        Progress::ready("InSync", "network matches the spec")
    }
}

#[async_trait]
impl Managed for OpenstackNetwork {
    type Status = OpenstackNetworkStatus;
    const READY_CONDITION: &'static str = "NetworkReady";

    fn status(&self) -> Option<&Self::Status> {
        self.status.as_ref()
    }
    fn cloud_ref(&self) -> Option<&str> {
        self.spec.cloud_ref.as_ref().map(|c| c.name.as_str())
    }

    fn api(client: kube::Client, _obj: &Self) -> Api<Self> {
        Api::all(client)
    }

    fn validate(&self) -> Vec<FieldError> {
        api::validation::object_errors(self, &self.spec)
    }

    async fn apply(&self, ctx: &Context, status: &mut Self::Status) -> Result<Progress> {
        let owner = owner_of(self, ctx);
        let neutron = &ctx.cloud.network;
        let (found, take) = find_network(ctx, self, &owner, status).await?;
        let mut changed = false;
        let mut created = false;
        let net = match found {
            None => {
                let n = create_recorded(ctx, self, &owner, status).await?;
                created = true;
                status.adopted = Some(false);
                status.subnets.clear();
                publish(
                    ctx,
                    self,
                    EventType::Normal,
                    "Created",
                    "Create",
                    format!("created Neutron network {} ({})", n.name, n.id),
                )
                .await;
                changed = true;
                n
            }
            Some(n) => {
                status.pending_create = None;
                let what = format!("{} ({})", n.name, n.id);
                let marking = match take {
                    Take::No => None,
                    Take::Recover => Some((
                        false,
                        "Recovered",
                        "Create",
                        format!(
                            "marked Neutron network {what} as ours: an earlier pass created it and was interrupted before tagging it"
                        ),
                    )),
                    Take::Adopt => Some((
                        true,
                        "Adopted",
                        "Adopt",
                        format!("took over existing Neutron network {what}"),
                    )),
                };
                if let Some((adopted, reason, action, note)) = marking {
                    status.adopted = Some(adopted);
                    neutron
                        .set_tags(
                            TaggedResource::Network,
                            &n.id,
                            &merge_marks(&n.tags, &owner),
                        )
                        .await?;
                    publish(ctx, self, EventType::Normal, reason, action, note).await;
                    changed |= !adopted;
                }
                let provider = provider_changes(&self.spec, &n);
                if !provider.is_empty() {
                    if status.adopted.unwrap_or(false) {
                        return Err(ReconcileError::invalid(
                            "spec",
                            format!(
                                "{} of the adopted network {} differ from Neutron's and cannot be changed",
                                provider.join(", "),
                                n.id
                            ),
                        ));
                    }
                    delete_our_subnets(ctx, &n.id, &owner).await?;
                    neutron.delete_network(&n.id).await.optional()?;
                    status.network_id = None;
                    status.subnets.clear();
                    let created = create_recorded(ctx, self, &owner, status).await?;
                    publish(ctx, self, EventType::Normal, "Recreated", "Update", format!("provider attributes are immutable in Neutron: replaced network {} by {} because {} changed", n.id, created.id, provider.join(", "))).await;
                    changed = true;
                    created
                } else {
                    status.network_id = Some(n.id.clone());
                    let update = network_update(&self.spec, &n);
                    if update != NetworkUpdate::default() {
                        changed = true;
                        neutron.update_network(&n.id, &update).await?
                    } else {
                        n
                    }
                }
            }
        };
        let observed = neutron
            .list_subnets(&SubnetFilter {
                network_id: Some(net.id.clone()),
                ..Default::default()
            })
            .await?;
        let spec_subnets = self.spec.subnets.as_deref().unwrap_or_default();
        let steps = plan_subnets(
            &net.id,
            spec_subnets,
            &observed,
            &owner,
            status.adopted.unwrap_or(false),
        )?;
        let mut ids: std::collections::BTreeMap<String, String> = observed
            .iter()
            .map(|s| (s.name.clone(), s.id.clone()))
            .collect();
        for step in steps {
            changed = true;
            match step {
                SubnetStep::Create(req) => {
                    let s = neutron.create_subnet(&req).await?;
                    ids.insert(s.name.clone(), s.id.clone());
                }
                SubnetStep::Update(id, u) => {
                    neutron.update_subnet(&id, &u).await?;
                }
                SubnetStep::Claim(id, tags) => {
                    neutron.set_tags(TaggedResource::Subnet, &id, &tags).await?;
                    publish(
                        ctx,
                        self,
                        EventType::Normal,
                        "Recovered",
                        "Create",
                        format!("marked subnet {id} as ours: an earlier pass created it and was interrupted before tagging it"),
                    )
                    .await;
                }
                SubnetStep::Delete(id, why) => {
                    neutron.delete_subnet(&id).await.optional()?;
                    ids.retain(|_, v| *v != id);
                    publish(
                        ctx,
                        self,
                        EventType::Normal,
                        "SubnetDeleted",
                        "Update",
                        format!("deleted subnet {id}: {why}"),
                    )
                    .await;
                }
            }
        }
        status.subnets = spec_subnets
            .iter()
            .map(|s| api::network::SubnetStatus {
                name: s.name.clone(),
                subnet_id: ids.get(&s.name).cloned(),
            })
            .collect();
        Ok(ready(&net.id, created, changed))
    }

    async fn cleanup(&self, ctx: &Context, status: &mut Self::Status) -> Result<()> {
        let owner = owner_of(self, ctx);
        let neutron = &ctx.cloud.network;
        let found = match &status.network_id {
            Some(id) => neutron
                .get_network(id)
                .await
                .optional()?
                .filter(|n| owner.classify_tags(&n.tags) == Ownership::Ours),
            None => {
                let same_name = neutron
                    .list_networks(&NetworkFilter {
                        name: Some(self.spec.name.clone()),
                        ..Default::default()
                    })
                    .await?;
                // An interrupted create leaves an unmarked network that is ours all the same.
                ours_by_name(
                    &self.spec,
                    status.pending_create.as_ref(),
                    &same_name,
                    &owner,
                )
                .map(|(n, _)| n.clone())
            }
        };
        let Some(n) = found else { return Ok(()) };
        if should_delete(self.spec.deletion_policy, status.adopted.unwrap_or(false)) {
            delete_our_subnets(ctx, &n.id, &owner).await?;
            neutron.delete_network(&n.id).await.optional()?;
            publish(
                ctx,
                self,
                EventType::Normal,
                "Deleted",
                "Delete",
                format!(
                    "deleted Neutron network {} ({}) and its subnets",
                    n.name, n.id
                ),
            )
            .await;
        } else {
            neutron
                .set_tags(TaggedResource::Network, &n.id, &strip_marks(&n.tags))
                .await?;
            publish(
                ctx,
                self,
                EventType::Normal,
                "Released",
                "Delete",
                format!("left Neutron network {} ({}) in place", n.name, n.id),
            )
            .await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(p: &Progress) -> &str {
        match p {
            Progress::Ready { reason, .. } => reason,
            other => panic!("not Ready: {other:?}"),
        }
    }

    #[test]
    fn a_network_created_in_this_pass_is_ready_as_created_like_its_event() {
        // The creating pass also creates subnets, so `changed` is set as well.
        assert_eq!(reason(&ready("n1", true, true)), "Created");
        assert_eq!(reason(&ready("n1", false, true)), "Updated");
        assert_eq!(reason(&ready("n1", false, false)), "InSync");
    }

    fn owner() -> Owner {
        Owner {
            cluster: "c".into(),
            uid: "u".into(),
        }
    }

    fn subnet(name: &str, cidr: &str, tags: Vec<String>) -> Subnet {
        Subnet {
            id: format!("id-{name}"),
            name: name.into(),
            network_id: "n".into(),
            ip_version: 4,
            cidr: cidr.into(),
            gateway_ip: Some("10.0.0.1".into()),
            enable_dhcp: true,
            tags,
            ..Default::default()
        }
    }

    fn spec_subnets(v: serde_json::Value) -> Vec<ProviderSubnet> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn subnets_are_added_updated_replaced_and_removed() {
        let o = owner();
        let observed = vec![
            subnet("keep", "10.0.0.0/24", o.tags()),
            subnet("move", "10.0.1.0/24", o.tags()),
            subnet("gone", "10.0.2.0/24", o.tags()),
            subnet("foreign", "10.0.3.0/24", vec![]),
        ];
        let spec = spec_subnets(serde_json::json!([
            {"name": "keep", "cidr": "10.0.0.0/24", "enableDhcp": false},
            {"name": "move", "cidr": "10.0.5.0/24"},
            {"name": "new", "cidr": "10.0.6.0/24"}
        ]));
        let steps = plan_subnets("n", &spec, &observed, &o, false).unwrap();
        assert!(
            matches!(&steps[0], SubnetStep::Update(id, u) if id == "id-keep" && u.enable_dhcp == Some(false))
        );
        assert!(matches!(&steps[1], SubnetStep::Delete(id, _) if id == "id-move"));
        assert!(
            matches!(&steps[2], SubnetStep::Create(c) if c.name == "move" && c.cidr == "10.0.5.0/24")
        );
        assert!(
            matches!(&steps[3], SubnetStep::Create(c) if c.name == "new" && c.tags == o.tags())
        );
        assert!(matches!(&steps[4], SubnetStep::Delete(id, _) if id == "id-gone"));
        // The foreign subnet is never deleted.
        assert_eq!(steps.len(), 5);
    }

    #[test]
    fn in_sync_subnet_plans_nothing() {
        let o = owner();
        let observed = vec![subnet("s", "10.0.0.0/24", o.tags())];
        let spec = spec_subnets(
            serde_json::json!([{"name": "s", "cidr": "10.0.0.0/24", "gatewayIp": "10.0.0.1"}]),
        );
        assert!(
            plan_subnets("n", &spec, &observed, &o, false)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn foreign_subnet_with_spec_name_is_refused() {
        let spec = spec_subnets(serde_json::json!([{"name": "s", "cidr": "10.0.0.0/24"}]));
        // Unmarked but with another CIDR: claiming it would mean replacing someone's subnet.
        let other_cidr = vec![subnet("s", "10.0.9.0/24", vec![])];
        assert!(matches!(
            plan_subnets("n", &spec, &other_cidr, &owner(), false),
            Err(ReconcileError::NotOwned(_))
        ));
        // Marked by another resource: never claimed.
        let other = Owner {
            cluster: "c".into(),
            uid: "someone-else".into(),
        };
        let theirs = vec![subnet("s", "10.0.0.0/24", other.tags())];
        assert!(matches!(
            plan_subnets("n", &spec, &theirs, &owner(), false),
            Err(ReconcileError::NotOwned(_))
        ));
    }

    #[test]
    fn an_unmarked_subnet_left_by_an_interrupted_create_is_claimed() {
        let o = owner();
        let spec = spec_subnets(serde_json::json!([{"name": "s", "cidr": "10.0.0.0/24"}]));
        let observed = vec![subnet("s", "10.0.0.0/24", vec!["keep-me".into()])];
        let steps = plan_subnets("n", &spec, &observed, &o, false).unwrap();
        let mut want = vec!["keep-me".to_string()];
        want.extend(o.tags());
        assert_eq!(steps, vec![SubnetStep::Claim("id-s".into(), want)]);
    }

    fn network(id: &str, tags: Vec<String>) -> Network {
        Network {
            id: id.into(),
            name: "provider".into(),
            provider_network_type: Some("flat".into()),
            provider_physical_network: Some("physnet1".into()),
            tags,
            ..Default::default()
        }
    }

    #[test]
    fn only_a_single_unmarked_network_is_taken_for_a_pending_create() {
        let spec: OpenstackNetworkSpec = serde_json::from_value(serde_json::json!({
            "name": "provider",
            "providerNetworkType": "flat",
            "providerPhysicalNetwork": "physnet1"
        }))
        .unwrap();
        let o = owner();
        let pending = PendingCreate {
            name: "provider".into(),
            since: "2026-11-30T00:00:00Z".into(),
        };
        let other = Owner {
            cluster: "c".into(),
            uid: "someone-else".into(),
        };
        let mut vlan = network("vlan", vec![]);
        vlan.provider_network_type = Some("vlan".into());
        let found = vec![
            network("theirs", other.tags()),
            vlan,
            network("left", vec![]),
        ];
        let got = interrupted_create(&spec, Some(&pending), &found, &o);
        assert_eq!(got.map(|n| n.id.as_str()), Some("left"));
        // No pending create, or one for another name: nothing is taken.
        assert!(interrupted_create(&spec, None, &found, &o).is_none());
        let renamed = PendingCreate {
            name: "old".into(),
            ..pending.clone()
        };
        assert!(interrupted_create(&spec, Some(&renamed), &found, &o).is_none());
        // Two candidates: no guess.
        let mut two = found.clone();
        two.push(network("another", vec![]));
        assert!(interrupted_create(&spec, Some(&pending), &two, &o).is_none());
    }
}
