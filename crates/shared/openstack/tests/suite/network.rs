//! Every Network (Neutron) operation against the real test cloud.
//!
//! Needs `OS_CLIENT_CONFIG_FILE`/`OS_CLOUD` (`eval "$(scripts/test-cloud
//! env)"`); fails without them unless `OPENSTACK_TESTS=skip`. The test cloud
//! provides the flat external network `external` and VLAN ranges
//! `physnet1:100:200`, `physnet2:100:200`.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{DEFAULT_DOMAIN, cloud, skipped, unique};
use openstack::model::*;
use openstack::{Cloud, Error, OptionalExt};

const MARK: &str = "managed-by-openstack-operator";

/// Something a test created in Neutron or Keystone.
#[derive(Clone, Debug)]
enum Res {
    Project(String),
    Network(String),
    Subnet(String),
    Router(String),
    Interface {
        router: String,
        subnet: String,
    },
    SecurityGroup(String),
    Quota {
        project: String,
        restore: QuotaUpdate,
    },
}

/// Deletes what a test created (newest first) after the body ran, whether
/// it passed or panicked, then re-raises the panic.
#[derive(Clone, Default)]
struct Cleanup(Arc<Mutex<Vec<Res>>>);

impl Cleanup {
    fn track(&self, r: Res) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(r);
    }

    async fn run<F: std::future::Future<Output = ()>>(&self, cloud: &Cloud, body: F) {
        use futures::FutureExt;
        let result = std::panic::AssertUnwindSafe(body).catch_unwind().await;
        let items = std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()));
        let n = &cloud.network;
        for item in items.into_iter().rev() {
            let r = match &item {
                Res::Project(id) => {
                    // Neutron gives every project that gets a network (or
                    // lists its groups) a `default` security group, and
                    // keeps it after the Keystone project is gone.
                    let filter = SecurityGroupFilter {
                        project_id: Some(id.clone()),
                        ..Default::default()
                    };
                    for g in n.list_security_groups(&filter).await.unwrap_or_default() {
                        if let Err(e) = n.delete_security_group(&g.id).await
                            && !e.is_not_found()
                        {
                            eprintln!("cleanup of security group {} failed: {e}", g.id);
                        }
                    }
                    cloud.identity.delete_project(id).await
                }
                Res::Network(id) => n.delete_network(id).await,
                Res::Subnet(id) => n.delete_subnet(id).await,
                Res::Router(id) => n.delete_router(id).await,
                Res::Interface { router, subnet } => {
                    n.remove_router_interface(router, subnet).await
                }
                Res::SecurityGroup(id) => n.delete_security_group(id).await,
                Res::Quota { project, restore } => n.update_network_quota(project, restore).await,
            };
            if let Err(e) = r
                && !e.is_not_found()
            {
                eprintln!("cleanup of {item:?} failed: {e}");
            }
        }
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    }
}

/// A fresh Keystone project for objects owned by "another" project.
async fn project(cloud: &Cloud, c: &Cleanup) -> Project {
    let p = cloud
        .identity
        .create_project(&ProjectCreate {
            name: unique("netproj"),
            domain_id: DEFAULT_DOMAIN.into(),
            description: "network integration tests".into(),
            enabled: true,
            tags: vec![],
        })
        .await
        .unwrap();
    c.track(Res::Project(p.id.clone()));
    p
}

async fn external_network(cloud: &Cloud) -> openstack::model::Network {
    let nets = cloud
        .network
        .list_networks(&NetworkFilter {
            name: Some("external".into()),
            external: Some(true),
            ..Default::default()
        })
        .await
        .unwrap();
    nets.into_iter()
        .next()
        .expect("the test cloud has an external network named `external`")
}

fn tags(t: &[&str]) -> Vec<String> {
    t.iter().map(|s| s.to_string()).collect()
}

/// A random-ish number in `lo..=hi` (no rand dependency in tests needed:
/// the uuid in `unique` is random already).
fn pick(lo: i64, hi: i64) -> i64 {
    let n = uuid::Uuid::new_v4().as_u128();
    lo + (n % ((hi - lo + 1) as u128)) as i64
}

async fn plain_network(
    cloud: &Cloud,
    c: &Cleanup,
    tag_list: Vec<String>,
) -> openstack::model::Network {
    let net = cloud
        .network
        .create_network(&NetworkCreate {
            name: unique("net"),
            tags: tag_list,
            ..Default::default()
        })
        .await
        .unwrap();
    c.track(Res::Network(net.id.clone()));
    net
}

#[tokio::test]
async fn network_lifecycle_tags_filters_and_errors() {
    if skipped() {
        return;
    }
    let (cloud, _core) = cloud().await;
    let c = Cleanup::default();
    c.run(&cloud, async {
        let n = &cloud.network;
        let proj = project(&cloud, &c).await;
        let name = unique("net");
        let uid_tag = unique("uid");
        let net = n
            .create_network(&NetworkCreate {
                name: name.clone(),
                description: Some("integration".into()),
                project_id: Some(proj.id.clone()),
                shared: Some(false),
                tags: vec![MARK.into(), uid_tag.clone()],
                ..Default::default()
            })
            .await
            .unwrap();
        c.track(Res::Network(net.id.clone()));
        assert_eq!(net.name, name);
        assert_eq!(net.project_id, proj.id);
        assert_eq!(net.tags, vec![MARK.to_string(), uid_tag.clone()]);
        // Creating a network for a project gives that project its `default`
        // security group (seen in an unfiltered list, which has no side
        // effects).
        let all_groups = n
            .list_security_groups(&SecurityGroupFilter::default())
            .await
            .unwrap();
        assert!(
            all_groups
                .iter()
                .any(|g| g.project_id == proj.id && g.name == "default"),
            "no default group for {}",
            proj.id
        );

        // Tagged by the time create returns, as seen by a fresh read.
        let got = n.get_network(&net.id).await.unwrap();
        let mut got_tags = got.tags.clone();
        got_tags.sort();
        let mut want = vec![MARK.to_string(), uid_tag.clone()];
        want.sort();
        assert_eq!(got_tags, want);
        assert_eq!(got.description, "integration");
        assert!(!got.shared && !got.external);
        assert!(got.admin_state_up);
        assert!(got.subnet_ids.is_empty());
        // Admin sees the tenant network's segment (the default type is vxlan
        // or geneve depending on ML2 config; it is always set).
        assert!(got.provider_network_type.is_some(), "{got:?}");

        // Filters: every combination the controllers use finds exactly it.
        for filter in [
            NetworkFilter {
                name: Some(name.clone()),
                ..Default::default()
            },
            NetworkFilter {
                project_id: Some(proj.id.clone()),
                ..Default::default()
            },
            NetworkFilter {
                tags: vec![MARK.into(), uid_tag.clone()],
                ..Default::default()
            },
            NetworkFilter {
                name: Some(name.clone()),
                external: Some(false),
                shared: Some(false),
                project_id: Some(proj.id.clone()),
                tags: vec![uid_tag.clone()],
            },
        ] {
            let found = n.list_networks(&filter).await.unwrap();
            assert_eq!(
                found.iter().map(|x| x.id.as_str()).collect::<Vec<_>>(),
                vec![net.id.as_str()],
                "{filter:?}"
            );
        }
        for filter in [
            NetworkFilter {
                name: Some(name.clone()),
                external: Some(true),
                ..Default::default()
            },
            NetworkFilter {
                name: Some(name.clone()),
                shared: Some(true),
                ..Default::default()
            },
            NetworkFilter {
                tags: vec![uid_tag.clone(), "not-there".into()],
                ..Default::default()
            },
        ] {
            assert!(
                n.list_networks(&filter).await.unwrap().is_empty(),
                "{filter:?}"
            );
        }

        // Update sends only what is set.
        let upd = n
            .update_network(
                &net.id,
                &NetworkUpdate {
                    name: Some(format!("{name}-2")),
                    description: Some("changed".into()),
                    mtu: Some(1400),
                    admin_state_up: Some(false),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(upd.name, format!("{name}-2"));
        assert_eq!(upd.description, "changed");
        assert_eq!(upd.mtu, Some(1400));
        assert!(!upd.admin_state_up);
        assert_eq!(upd.project_id, proj.id);

        // Tag replacement.
        n.set_tags(TaggedResource::Network, &net.id, &tags(&["x", "y"]))
            .await
            .unwrap();
        let mut t = n.get_network(&net.id).await.unwrap().tags;
        t.sort();
        assert_eq!(t, tags(&["x", "y"]));
        n.set_tags(TaggedResource::Network, &net.id, &[])
            .await
            .unwrap();
        assert!(n.get_network(&net.id).await.unwrap().tags.is_empty());

        // Not found, with Neutron's own message kept.
        let missing = "00000000-0000-4000-8000-000000000000";
        let e = n.get_network(missing).await.unwrap_err();
        assert!(e.is_not_found(), "{e}");
        assert!(e.message().contains("network get_network: HTTP 404"), "{e}");
        assert!(e.message().contains("could not be found"), "{e}");
        let e = n
            .update_network(missing, &NetworkUpdate::default())
            .await
            .unwrap_err();
        assert!(e.is_not_found(), "{e}");
        let e = n
            .set_tags(TaggedResource::Network, missing, &tags(&["a"]))
            .await
            .unwrap_err();
        assert!(e.is_not_found(), "{e}");

        n.delete_network(&net.id).await.unwrap();
        assert!(n.get_network(&net.id).await.optional().unwrap().is_none());
        let e = n.delete_network(&net.id).await.unwrap_err();
        assert!(e.is_not_found(), "{e}");
    })
    .await;
}

#[tokio::test]
async fn create_rolls_back_when_tagging_fails() {
    if skipped() {
        return;
    }
    let (cloud, _core) = cloud().await;
    let c = Cleanup::default();
    c.run(&cloud, async {
        let n = &cloud.network;
        // Neutron limits tags to 255 characters; the POST itself succeeds,
        // the PUT of the tags fails, and the adapter must not leave an
        // untagged network behind.
        let name = unique("rollback");
        let e = n
            .create_network(&NetworkCreate {
                name: name.clone(),
                tags: vec!["x".repeat(300)],
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(matches!(e, Error::BadRequest { .. }), "{e}");
        assert!(
            e.message().contains("network create_network: HTTP 400"),
            "{e}"
        );
        assert!(e.message().contains("was deleted again"), "{e}");
        let left = n
            .list_networks(&NetworkFilter {
                name: Some(name),
                ..Default::default()
            })
            .await
            .unwrap();
        for l in &left {
            c.track(Res::Network(l.id.clone()));
        }
        assert!(left.is_empty(), "untagged network left behind: {left:?}");
    })
    .await;
}

#[tokio::test]
async fn provider_networks_and_their_errors() {
    if skipped() {
        return;
    }
    let (cloud, _core) = cloud().await;
    let c = Cleanup::default();
    c.run(&cloud, async {
        let n = &cloud.network;

        // VLAN on a configured physnet; pick a free segment (other tests and
        // the smoke test use the same small range).
        let mut vlan = None;
        for _ in 0..20 {
            let seg = pick(100, 200);
            match n
                .create_network(&NetworkCreate {
                    name: unique("vlan"),
                    provider_network_type: Some("vlan".into()),
                    provider_physical_network: Some("physnet2".into()),
                    provider_segmentation_id: Some(seg),
                    tags: vec![MARK.into()],
                    ..Default::default()
                })
                .await
            {
                Ok(net) => {
                    c.track(Res::Network(net.id.clone()));
                    vlan = Some(net);
                    break;
                }
                Err(e) if e.is_conflict() => continue,
                Err(e) => panic!("vlan create: {e}"),
            }
        }
        let vlan = vlan.expect("a free VLAN on physnet2 within 20 tries");
        let got = n.get_network(&vlan.id).await.unwrap();
        assert_eq!(got.provider_network_type.as_deref(), Some("vlan"));
        assert_eq!(got.provider_physical_network.as_deref(), Some("physnet2"));
        assert_eq!(got.provider_segmentation_id, vlan.provider_segmentation_id);
        assert!(got.provider_segmentation_id.is_some());

        // The same VLAN again: 409 from Neutron, kept verbatim.
        let e = n
            .create_network(&NetworkCreate {
                name: unique("vlan-dup"),
                provider_network_type: Some("vlan".into()),
                provider_physical_network: Some("physnet2".into()),
                provider_segmentation_id: got.provider_segmentation_id,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(e.is_conflict(), "{e}");
        assert!(e.message().contains("HTTP 409"), "{e}");

        // Unknown physical network: 400 with Neutron's reason.
        let e = n
            .create_network(&NetworkCreate {
                name: unique("vlan-bad"),
                provider_network_type: Some("vlan".into()),
                provider_physical_network: Some("no-such-physnet".into()),
                provider_segmentation_id: Some(150),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(matches!(e, Error::BadRequest { .. }), "{e}");
        assert!(
            e.message()
                .contains("physical_network 'no-such-physnet' unknown for VLAN provider network"),
            "{e}"
        );

        // Unknown network type: 400.
        let e = n
            .create_network(&NetworkCreate {
                name: unique("bad-type"),
                provider_network_type: Some("carrier-pigeon".into()),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(matches!(e, Error::BadRequest { .. }), "{e}");

        // A flat external network on its own physnet (flat_networks = *).
        let physnet = unique("pn");
        let ext = n
            .create_network(&NetworkCreate {
                name: unique("ext"),
                provider_network_type: Some("flat".into()),
                provider_physical_network: Some(physnet.clone()),
                external: Some(true),
                shared: Some(true),
                tags: vec![MARK.into()],
                ..Default::default()
            })
            .await
            .unwrap();
        c.track(Res::Network(ext.id.clone()));
        assert!(ext.external && ext.shared);
        assert_eq!(ext.provider_network_type.as_deref(), Some("flat"));
        let found = n
            .list_networks(&NetworkFilter {
                external: Some(true),
                shared: Some(true),
                tags: vec![MARK.into()],
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(found.iter().any(|x| x.id == ext.id));
        // A second flat network on the same physnet: 409 FlatNetworkInUse.
        let e = n
            .create_network(&NetworkCreate {
                name: unique("flat-dup"),
                provider_network_type: Some("flat".into()),
                provider_physical_network: Some(physnet),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(e.is_conflict(), "{e}");
        assert!(e.message().contains("in use"), "{e}");

        // Flip router:external and shared off again.
        let upd = n
            .update_network(
                &ext.id,
                &NetworkUpdate {
                    external: Some(false),
                    shared: Some(false),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert!(!upd.external && !upd.shared);
    })
    .await;
}

#[tokio::test]
async fn subnet_lifecycle_and_errors() {
    if skipped() {
        return;
    }
    let (cloud, _core) = cloud().await;
    let c = Cleanup::default();
    c.run(&cloud, async {
        let n = &cloud.network;
        let proj = project(&cloud, &c).await;
        let net = n
            .create_network(&NetworkCreate {
                name: unique("subnet-net"),
                project_id: Some(proj.id.clone()),
                ..Default::default()
            })
            .await
            .unwrap();
        c.track(Res::Network(net.id.clone()));

        let name = unique("sub4");
        let uid_tag = unique("uid");
        let s4 = n
            .create_subnet(&SubnetCreate {
                network_id: net.id.clone(),
                name: name.clone(),
                description: Some("v4".into()),
                ip_version: 4,
                cidr: "10.20.0.0/24".into(),
                gateway: GatewayIp::Address("10.20.0.254".into()),
                enable_dhcp: Some(false),
                dns_nameservers: vec!["192.0.2.53".into(), "192.0.2.54".into()],
                allocation_pools: vec![AllocationPool {
                    start: "10.20.0.10".into(),
                    end: "10.20.0.99".into(),
                }],
                project_id: Some(proj.id.clone()),
                tags: vec![MARK.into(), uid_tag.clone()],
                ..Default::default()
            })
            .await
            .unwrap();
        c.track(Res::Subnet(s4.id.clone()));
        let got = n.get_subnet(&s4.id).await.unwrap();
        assert_eq!(got.name, name);
        assert_eq!(got.network_id, net.id);
        assert_eq!(got.project_id, proj.id);
        assert_eq!(got.ip_version, 4);
        assert_eq!(got.cidr, "10.20.0.0/24");
        assert_eq!(got.gateway_ip.as_deref(), Some("10.20.0.254"));
        assert!(!got.enable_dhcp);
        assert_eq!(got.dns_nameservers, tags(&["192.0.2.53", "192.0.2.54"]));
        assert_eq!(
            got.allocation_pools,
            vec![AllocationPool {
                start: "10.20.0.10".into(),
                end: "10.20.0.99".into()
            }]
        );
        assert_eq!(got.description, "v4");
        assert_eq!(got.tags.len(), 2);
        assert!(
            n.get_network(&net.id)
                .await
                .unwrap()
                .subnet_ids
                .contains(&s4.id)
        );

        // IPv6 with SLAAC and no gateway.
        let s6 = n
            .create_subnet(&SubnetCreate {
                network_id: net.id.clone(),
                name: unique("sub6"),
                ip_version: 6,
                cidr: "fd00:20::/64".into(),
                gateway: GatewayIp::Disabled,
                ipv6_ra_mode: Some("slaac".into()),
                ipv6_address_mode: Some("slaac".into()),
                project_id: Some(proj.id.clone()),
                tags: vec![MARK.into()],
                ..Default::default()
            })
            .await
            .unwrap();
        c.track(Res::Subnet(s6.id.clone()));
        assert_eq!(s6.ip_version, 6);
        assert_eq!(s6.gateway_ip, None);
        assert_eq!(s6.ipv6_ra_mode.as_deref(), Some("slaac"));
        assert!(s6.enable_dhcp, "Neutron's default is DHCP on");

        // Default gateway: the first address.
        let sd = n
            .create_subnet(&SubnetCreate {
                network_id: net.id.clone(),
                name: unique("subd"),
                ip_version: 4,
                cidr: "10.21.0.0/24".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        c.track(Res::Subnet(sd.id.clone()));
        assert_eq!(sd.gateway_ip.as_deref(), Some("10.21.0.1"));
        assert!(sd.tags.is_empty());

        // Lists by network, name, project and tags.
        let by_net = n
            .list_subnets(&SubnetFilter {
                network_id: Some(net.id.clone()),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(by_net.len(), 3);
        for filter in [
            SubnetFilter {
                name: Some(name.clone()),
                ..Default::default()
            },
            SubnetFilter {
                tags: vec![uid_tag.clone()],
                ..Default::default()
            },
            SubnetFilter {
                network_id: Some(net.id.clone()),
                project_id: Some(proj.id.clone()),
                name: Some(name.clone()),
                tags: vec![MARK.into()],
            },
        ] {
            let found = n.list_subnets(&filter).await.unwrap();
            assert_eq!(
                found.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
                vec![s4.id.as_str()],
                "{filter:?}"
            );
        }
        let by_proj = n
            .list_subnets(&SubnetFilter {
                project_id: Some(proj.id.clone()),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(by_proj.len(), 2, "the default-gateway subnet is admin's");

        // Update: gateway off, DNS and pools replaced, name and DHCP.
        let upd = n
            .update_subnet(
                &s4.id,
                &SubnetUpdate {
                    name: Some(format!("{name}-2")),
                    gateway: Some(GatewayIp::Disabled),
                    enable_dhcp: Some(true),
                    dns_nameservers: Some(vec![]),
                    allocation_pools: Some(vec![AllocationPool {
                        start: "10.20.0.100".into(),
                        end: "10.20.0.200".into(),
                    }]),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(upd.name, format!("{name}-2"));
        assert_eq!(upd.gateway_ip, None);
        assert!(upd.enable_dhcp);
        assert!(upd.dns_nameservers.is_empty());
        assert_eq!(upd.allocation_pools[0].start, "10.20.0.100");
        let upd = n
            .update_subnet(
                &s4.id,
                &SubnetUpdate {
                    gateway: Some(GatewayIp::Address("10.20.0.1".into())),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(upd.gateway_ip.as_deref(), Some("10.20.0.1"));

        // Errors. Overlapping CIDR on the same network: 400.
        let e = n
            .create_subnet(&SubnetCreate {
                network_id: net.id.clone(),
                name: unique("overlap"),
                ip_version: 4,
                cidr: "10.20.0.128/25".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(matches!(e, Error::BadRequest { .. }), "{e}");
        assert!(e.message().contains("overlaps with another subnet"), "{e}");
        // Gateway inside an allocation pool: Neutron answers 409.
        let e = n
            .create_subnet(&SubnetCreate {
                network_id: net.id.clone(),
                name: unique("gw-in-pool"),
                ip_version: 4,
                cidr: "10.22.0.0/24".into(),
                gateway: GatewayIp::Address("10.22.0.50".into()),
                allocation_pools: vec![AllocationPool {
                    start: "10.22.0.10".into(),
                    end: "10.22.0.99".into(),
                }],
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(e.is_conflict(), "{e}");
        assert!(
            e.message().contains("conflicts with allocation pool"),
            "{e}"
        );
        // Invalid CIDR and wrong IP version: 400.
        for (cidr, v) in [("10.23.0.0/33", 4), ("10.23.0.0/24", 6)] {
            let e = n
                .create_subnet(&SubnetCreate {
                    network_id: net.id.clone(),
                    name: unique("bad"),
                    ip_version: v,
                    cidr: cidr.into(),
                    ..Default::default()
                })
                .await
                .unwrap_err();
            assert!(matches!(e, Error::BadRequest { .. }), "{cidr} v{v}: {e}");
        }
        // Unknown network: 404.
        let e = n
            .create_subnet(&SubnetCreate {
                network_id: "00000000-0000-4000-8000-000000000000".into(),
                name: unique("orphan"),
                ip_version: 4,
                cidr: "10.24.0.0/24".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(e.is_not_found(), "{e}");

        // Deleting the network while it has subnets works (Neutron deletes
        // subnets without ports along with it): delete the subnets first
        // anyway, as the controllers do.
        n.delete_subnet(&s6.id).await.unwrap();
        let e = n.get_subnet(&s6.id).await.unwrap_err();
        assert!(e.is_not_found(), "{e}");
        let e = n.delete_subnet(&s6.id).await.unwrap_err();
        assert!(e.is_not_found(), "{e}");
    })
    .await;
}

#[tokio::test]
async fn gateway_outside_cidr_is_accepted_but_cannot_be_routed() {
    if skipped() {
        return;
    }
    let (cloud, _core) = cloud().await;
    let c = Cleanup::default();
    c.run(&cloud, async {
        let n = &cloud.network;
        let net = plain_network(&cloud, &c, vec![]).await;
        // Neutron 2026.1 accepts a gateway outside the CIDR (the old
        // force_gateway_on_subnet check is gone) ...
        let s = n
            .create_subnet(&SubnetCreate {
                network_id: net.id.clone(),
                name: unique("gw-out"),
                ip_version: 4,
                cidr: "10.30.0.0/24".into(),
                gateway: GatewayIp::Address("10.31.0.1".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        c.track(Res::Subnet(s.id.clone()));
        assert_eq!(s.gateway_ip.as_deref(), Some("10.31.0.1"));
        // ... but a router cannot take that address: 400.
        let r = n
            .create_router(&RouterCreate {
                name: unique("gw-out-r"),
                ..Default::default()
            })
            .await
            .unwrap();
        c.track(Res::Router(r.id.clone()));
        let e = n.add_router_interface(&r.id, &s.id).await.unwrap_err();
        assert!(matches!(e, Error::BadRequest { .. }), "{e}");
        assert!(
            e.message()
                .contains("is not a valid IP for the specified subnet"),
            "{e}"
        );
        // A subnet without a gateway cannot be attached either.
        let s2 = n
            .create_subnet(&SubnetCreate {
                network_id: net.id.clone(),
                name: unique("no-gw"),
                ip_version: 4,
                cidr: "10.32.0.0/24".into(),
                gateway: GatewayIp::Disabled,
                ..Default::default()
            })
            .await
            .unwrap();
        c.track(Res::Subnet(s2.id.clone()));
        let e = n.add_router_interface(&r.id, &s2.id).await.unwrap_err();
        assert!(matches!(e, Error::BadRequest { .. }), "{e}");
    })
    .await;
}

#[tokio::test]
async fn router_lifecycle_gateway_interfaces_and_errors() {
    if skipped() {
        return;
    }
    let (cloud, _core) = cloud().await;
    let c = Cleanup::default();
    c.run(&cloud, async {
        let n = &cloud.network;
        let ext = external_network(&cloud).await;
        let proj = project(&cloud, &c).await;
        let name = unique("router");
        let uid_tag = unique("uid");
        let r = n
            .create_router(&RouterCreate {
                name: name.clone(),
                description: Some("integration".into()),
                project_id: Some(proj.id.clone()),
                external_gateway: Some(ExternalGatewayRequest {
                    network_id: ext.id.clone(),
                    enable_snat: Some(false),
                    external_fixed_ips: vec![],
                }),
                tags: vec![MARK.into(), uid_tag.clone()],
            })
            .await
            .unwrap();
        c.track(Res::Router(r.id.clone()));
        assert_eq!(r.project_id, proj.id);
        assert_eq!(r.tags.len(), 2);
        let gw = r.external_gateway.clone().expect("gateway set at creation");
        assert_eq!(gw.network_id, ext.id);
        assert_eq!(gw.enable_snat, Some(false));
        assert_eq!(gw.external_fixed_ips.len(), 1, "{gw:?}");

        let got = n.get_router(&r.id).await.unwrap();
        assert_eq!(got.name, name);
        assert_eq!(got.description, "integration");
        assert_eq!(got.status, "ACTIVE");
        assert_eq!(got.tags.len(), 2);

        for filter in [
            RouterFilter {
                name: Some(name.clone()),
                ..Default::default()
            },
            RouterFilter {
                project_id: Some(proj.id.clone()),
                ..Default::default()
            },
            RouterFilter {
                name: Some(name.clone()),
                project_id: Some(proj.id.clone()),
                tags: vec![MARK.into(), uid_tag.clone()],
            },
        ] {
            let found = n.list_routers(&filter).await.unwrap();
            assert_eq!(
                found.iter().map(|x| x.id.as_str()).collect::<Vec<_>>(),
                vec![r.id.as_str()],
                "{filter:?}"
            );
        }

        // SNAT on, keeping the gateway.
        let upd = n
            .update_router(
                &r.id,
                &RouterUpdate {
                    external_gateway: Some(Some(ExternalGatewayRequest {
                        network_id: ext.id.clone(),
                        enable_snat: Some(true),
                        external_fixed_ips: vec![],
                    })),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let gw2 = upd.external_gateway.clone().unwrap();
        assert_eq!(gw2.enable_snat, Some(true));
        assert_eq!(
            gw2.external_fixed_ips, gw.external_fixed_ips,
            "changing SNAT keeps the address"
        );
        // Name only: the gateway is untouched.
        let upd = n
            .update_router(
                &r.id,
                &RouterUpdate {
                    name: Some(format!("{name}-2")),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(upd.name, format!("{name}-2"));
        assert!(upd.external_gateway.is_some());
        // Clear the gateway, then set it with a fixed address.
        let upd = n
            .update_router(
                &r.id,
                &RouterUpdate {
                    external_gateway: Some(None),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert!(upd.external_gateway.is_none());
        let ext_subnet = ext.subnet_ids.first().cloned().expect("external subnet");
        let fixed = format!("203.0.113.{}", pick(200, 250));
        let upd = n
            .update_router(
                &r.id,
                &RouterUpdate {
                    external_gateway: Some(Some(ExternalGatewayRequest {
                        network_id: ext.id.clone(),
                        enable_snat: Some(false),
                        external_fixed_ips: vec![FixedIp {
                            subnet_id: Some(ext_subnet.clone()),
                            ip_address: Some(fixed.clone()),
                        }],
                    })),
                    ..Default::default()
                },
            )
            .await;
        match upd {
            Ok(upd) => {
                let g = upd.external_gateway.unwrap();
                assert_eq!(
                    g.external_fixed_ips[0].ip_address.as_deref(),
                    Some(fixed.as_str())
                );
            }
            // Another test may hold that address right now.
            Err(e) => assert!(e.is_conflict(), "{e}"),
        }

        // Interfaces.
        let net = n
            .create_network(&NetworkCreate {
                name: unique("rnet"),
                project_id: Some(proj.id.clone()),
                ..Default::default()
            })
            .await
            .unwrap();
        c.track(Res::Network(net.id.clone()));
        let sub = n
            .create_subnet(&SubnetCreate {
                network_id: net.id.clone(),
                name: unique("rsub"),
                ip_version: 4,
                cidr: "10.40.0.0/24".into(),
                project_id: Some(proj.id.clone()),
                ..Default::default()
            })
            .await
            .unwrap();
        c.track(Res::Subnet(sub.id.clone()));
        assert!(n.list_router_interfaces(&r.id).await.unwrap().is_empty());
        let itf = n.add_router_interface(&r.id, &sub.id).await.unwrap();
        c.track(Res::Interface {
            router: r.id.clone(),
            subnet: sub.id.clone(),
        });
        assert_eq!(itf.router_id, r.id);
        assert_eq!(itf.subnet_id, sub.id);
        assert!(!itf.port_id.is_empty());

        let ports = n.list_router_interfaces(&r.id).await.unwrap();
        assert_eq!(ports.len(), 1, "gateway port must not be listed: {ports:?}");
        // The one-request listing of several routers' interfaces (the drift check's) sees
        // the same port, keeps to the routers asked about and leaves out gateway ports.
        let all = n
            .list_routers_interfaces(&[r.id.clone(), "no-such-router".into()])
            .await
            .unwrap();
        assert_eq!(all.len(), 1, "{all:?}");
        assert_eq!(all.get(&r.id), Some(&ports));
        assert_eq!(ports[0].port_id, itf.port_id);
        assert_eq!(ports[0].network_id, net.id);
        assert_eq!(ports[0].device_owner, "network:router_interface");
        assert_eq!(
            ports[0].fixed_ips[0].subnet_id.as_deref(),
            Some(sub.id.as_str())
        );
        assert_eq!(
            ports[0].fixed_ips[0].ip_address.as_deref(),
            Some("10.40.0.1")
        );

        // Twice: 400 with Neutron's text.
        let e = n.add_router_interface(&r.id, &sub.id).await.unwrap_err();
        assert!(matches!(e, Error::BadRequest { .. }), "{e}");
        assert!(e.message().contains("already has a port on subnet"), "{e}");
        // In use: subnet and router cannot go.
        let e = n.delete_subnet(&sub.id).await.unwrap_err();
        assert!(e.is_conflict(), "{e}");
        let e = n.delete_router(&r.id).await.unwrap_err();
        assert!(e.is_conflict(), "{e}");
        assert!(e.message().contains("still attached"), "{e}");
        let e = n.delete_network(&net.id).await.unwrap_err();
        assert!(e.is_conflict(), "{e}");

        n.remove_router_interface(&r.id, &sub.id).await.unwrap();
        assert!(n.list_router_interfaces(&r.id).await.unwrap().is_empty());
        let e = n.remove_router_interface(&r.id, &sub.id).await.unwrap_err();
        assert!(e.is_not_found(), "{e}");
        // Unknown router / subnet.
        let missing = "00000000-0000-4000-8000-000000000000";
        let e = n.add_router_interface(missing, &sub.id).await.unwrap_err();
        assert!(e.is_not_found(), "{e}");
        let e = n.add_router_interface(&r.id, missing).await.unwrap_err();
        assert!(e.is_not_found(), "{e}");
        let e = n.get_router(missing).await.unwrap_err();
        assert!(e.is_not_found(), "{e}");
        assert!(n.list_router_interfaces(missing).await.unwrap().is_empty());

        // A gateway on a non-external network: 400.
        let e = n
            .update_router(
                &r.id,
                &RouterUpdate {
                    external_gateway: Some(Some(ExternalGatewayRequest {
                        network_id: net.id.clone(),
                        ..Default::default()
                    })),
                    ..Default::default()
                },
            )
            .await
            .unwrap_err();
        assert!(matches!(e, Error::BadRequest { .. }), "{e}");

        n.delete_router(&r.id).await.unwrap();
        let e = n.get_router(&r.id).await.unwrap_err();
        assert!(e.is_not_found(), "{e}");
        let e = n.delete_router(&r.id).await.unwrap_err();
        assert!(e.is_not_found(), "{e}");
    })
    .await;
}

#[tokio::test]
async fn security_groups_and_rules() {
    if skipped() {
        return;
    }
    let (cloud, _core) = cloud().await;
    let c = Cleanup::default();
    c.run(&cloud, async {
        let n = &cloud.network;
        let proj = project(&cloud, &c).await;
        let name = unique("sg");
        let uid_tag = unique("uid");
        let sg = n
            .create_security_group(&SecurityGroupCreate {
                name: name.clone(),
                description: Some("integration".into()),
                project_id: Some(proj.id.clone()),
                tags: vec![MARK.into(), uid_tag.clone()],
            })
            .await
            .unwrap();
        c.track(Res::SecurityGroup(sg.id.clone()));
        assert_eq!(sg.project_id, proj.id);
        assert_eq!(sg.description, "integration");
        assert_eq!(sg.tags.len(), 2);
        // Neutron adds one egress rule per ethertype, any protocol.
        let mut defaults: Vec<(String, String, Option<String>)> = sg
            .rules
            .iter()
            .map(|r| (r.direction.clone(), r.ethertype.clone(), r.protocol.clone()))
            .collect();
        defaults.sort();
        assert_eq!(
            defaults,
            vec![
                ("egress".into(), "IPv4".into(), None),
                ("egress".into(), "IPv6".into(), None)
            ]
        );
        assert!(sg.rules.iter().all(|r| r.remote_ip_prefix.is_none()
            && r.port_range_min.is_none()
            && r.project_id == proj.id));

        let got = n.get_security_group(&sg.id).await.unwrap();
        assert_eq!(got.name, name);
        assert_eq!(got.rules.len(), 2);
        assert_eq!(got.tags.len(), 2);

        for filter in [
            SecurityGroupFilter {
                name: Some(name.clone()),
                ..Default::default()
            },
            SecurityGroupFilter {
                tags: vec![uid_tag.clone()],
                ..Default::default()
            },
            SecurityGroupFilter {
                name: Some(name.clone()),
                project_id: Some(proj.id.clone()),
                tags: vec![MARK.into()],
            },
        ] {
            let found = n.list_security_groups(&filter).await.unwrap();
            assert_eq!(
                found.iter().map(|x| x.id.as_str()).collect::<Vec<_>>(),
                vec![sg.id.as_str()],
                "{filter:?}"
            );
        }
        // By project: ours plus the `default` group Neutron creates for the
        // project (listing by project creates it if it does not exist yet).
        let by_proj = n
            .list_security_groups(&SecurityGroupFilter {
                project_id: Some(proj.id.clone()),
                ..Default::default()
            })
            .await
            .unwrap();
        let mut names: Vec<&str> = by_proj.iter().map(|g| g.name.as_str()).collect();
        names.sort();
        assert!(names.contains(&name.as_str()), "{names:?}");
        for g in by_proj.iter().filter(|g| g.name == "default") {
            c.track(Res::SecurityGroup(g.id.clone()));
        }

        let upd = n
            .update_security_group(
                &sg.id,
                &SecurityGroupUpdate {
                    name: Some(format!("{name}-2")),
                    description: Some("changed".into()),
                },
            )
            .await
            .unwrap();
        assert_eq!(upd.name, format!("{name}-2"));
        assert_eq!(upd.description, "changed");
        n.set_tags(TaggedResource::SecurityGroup, &sg.id, &tags(&["only"]))
            .await
            .unwrap();
        assert_eq!(
            n.get_security_group(&sg.id).await.unwrap().tags,
            tags(&["only"])
        );

        // Rules.
        let ssh = n
            .create_security_group_rule(&SecurityGroupRuleCreate {
                security_group_id: sg.id.clone(),
                direction: "ingress".into(),
                ethertype: "IPv4".into(),
                protocol: Some("tcp".into()),
                port_range_min: Some(22),
                port_range_max: Some(22),
                remote_ip_prefix: Some("10.0.0.0/8".into()),
                description: Some("ssh".into()),
                project_id: Some(proj.id.clone()),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(ssh.security_group_id, sg.id);
        assert_eq!(ssh.protocol.as_deref(), Some("tcp"));
        assert_eq!(
            (ssh.port_range_min, ssh.port_range_max),
            (Some(22), Some(22))
        );
        assert_eq!(ssh.remote_ip_prefix.as_deref(), Some("10.0.0.0/8"));
        assert_eq!(ssh.description, "ssh");
        assert_eq!(ssh.project_id, proj.id);

        let from_group = n
            .create_security_group_rule(&SecurityGroupRuleCreate {
                security_group_id: sg.id.clone(),
                direction: "ingress".into(),
                ethertype: "IPv6".into(),
                protocol: Some("udp".into()),
                port_range_min: Some(5000),
                port_range_max: Some(5100),
                remote_group_id: Some(sg.id.clone()),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(from_group.remote_group_id.as_deref(), Some(sg.id.as_str()));
        // Without project_id a rule belongs to the caller's project, not to
        // the group's.
        assert_ne!(from_group.project_id, proj.id);
        assert_eq!(from_group.remote_ip_prefix, None);

        let icmp = n
            .create_security_group_rule(&SecurityGroupRuleCreate {
                security_group_id: sg.id.clone(),
                direction: "ingress".into(),
                ethertype: "IPv4".into(),
                protocol: Some("icmp".into()),
                port_range_min: Some(8),
                port_range_max: Some(0),
                remote_ip_prefix: Some("0.0.0.0/0".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(icmp.protocol.as_deref(), Some("icmp"));

        let rules = n.list_security_group_rules(&sg.id).await.unwrap();
        assert_eq!(rules.len(), 5, "{rules:?}");
        assert!(rules.iter().all(|r| r.security_group_id == sg.id));

        // Errors: duplicate rule 409 naming the existing rule; duplicate of
        // a default egress rule too; bad port range 400; bad protocol 400;
        // unknown group 404.
        let e = n
            .create_security_group_rule(&SecurityGroupRuleCreate {
                security_group_id: sg.id.clone(),
                direction: "ingress".into(),
                ethertype: "IPv4".into(),
                protocol: Some("tcp".into()),
                port_range_min: Some(22),
                port_range_max: Some(22),
                remote_ip_prefix: Some("10.0.0.0/8".into()),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(e.is_conflict(), "{e}");
        assert!(e.message().contains(&ssh.id), "{e}");
        let e = n
            .create_security_group_rule(&SecurityGroupRuleCreate {
                security_group_id: sg.id.clone(),
                direction: "egress".into(),
                ethertype: "IPv4".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(e.is_conflict(), "{e}");
        let e = n
            .create_security_group_rule(&SecurityGroupRuleCreate {
                security_group_id: sg.id.clone(),
                direction: "ingress".into(),
                ethertype: "IPv4".into(),
                protocol: Some("tcp".into()),
                port_range_min: Some(30),
                port_range_max: Some(22),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(matches!(e, Error::BadRequest { .. }), "{e}");
        assert!(
            e.message()
                .contains("port_range_min must be <= port_range_max"),
            "{e}"
        );
        let e = n
            .create_security_group_rule(&SecurityGroupRuleCreate {
                security_group_id: sg.id.clone(),
                direction: "sideways".into(),
                ethertype: "IPv4".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(matches!(e, Error::BadRequest { .. }), "{e}");
        let missing = "00000000-0000-4000-8000-000000000000";
        let e = n
            .create_security_group_rule(&SecurityGroupRuleCreate {
                security_group_id: missing.into(),
                direction: "ingress".into(),
                ethertype: "IPv4".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(e.is_not_found(), "{e}");

        // Neutron's own `default` group of the project: a second group for a mixed bulk.
        let other_group = by_proj
            .iter()
            .find(|g| g.name == "default")
            .map(|g| g.id.clone())
            .expect("Neutron's default group of the project");
        // Bulk create: several rules in one request, all or none. A batch holding a
        // duplicate of an existing rule is refused as a whole and creates nothing.
        let bulk_rule = |port: i32| SecurityGroupRuleCreate {
            security_group_id: sg.id.clone(),
            direction: "ingress".into(),
            ethertype: "IPv4".into(),
            protocol: Some("tcp".into()),
            port_range_min: Some(port),
            port_range_max: Some(port),
            remote_ip_prefix: Some("192.0.2.0/24".into()),
            project_id: Some(proj.id.clone()),
            ..Default::default()
        };
        let refused = n
            .create_security_group_rules(&[
                bulk_rule(8080),
                SecurityGroupRuleCreate {
                    remote_ip_prefix: Some("10.0.0.0/8".into()),
                    ..bulk_rule(22)
                },
            ])
            .await
            .unwrap_err();
        assert!(refused.is_conflict(), "{refused}");
        assert_eq!(n.list_security_group_rules(&sg.id).await.unwrap().len(), 5);
        let made = n
            .create_security_group_rules(&[bulk_rule(8080), bulk_rule(8443)])
            .await
            .unwrap();
        assert_eq!(
            made.iter().map(|r| r.port_range_min).collect::<Vec<_>>(),
            vec![Some(8080), Some(8443)]
        );
        assert!(
            made.iter()
                .all(|r| r.security_group_id == sg.id && r.project_id == proj.id)
        );
        assert_eq!(n.list_security_group_rules(&sg.id).await.unwrap().len(), 7);
        let e = n
            .create_security_group_rules(&[bulk_rule(8080)])
            .await
            .unwrap_err();
        assert!(e.is_conflict(), "{e}");
        // One group per bulk request: Neutron refuses rules of two groups together.
        let e = n
            .create_security_group_rules(&[
                bulk_rule(9000),
                SecurityGroupRuleCreate {
                    security_group_id: other_group.clone(),
                    ..bulk_rule(9001)
                },
            ])
            .await
            .unwrap_err();
        assert!(matches!(e, Error::BadRequest { .. }), "{e}");
        assert!(
            e.message().contains("one security profile at a time"),
            "{e}"
        );
        assert!(n.create_security_group_rules(&[]).await.unwrap().is_empty());
        for r in &made {
            n.delete_security_group_rule(&r.id).await.unwrap();
        }

        n.delete_security_group_rule(&ssh.id).await.unwrap();
        let e = n.delete_security_group_rule(&ssh.id).await.unwrap_err();
        assert!(e.is_not_found(), "{e}");
        assert_eq!(n.list_security_group_rules(&sg.id).await.unwrap().len(), 4);
        assert!(
            n.list_security_group_rules(missing)
                .await
                .unwrap()
                .is_empty()
        );

        n.delete_security_group(&sg.id).await.unwrap();
        let e = n.get_security_group(&sg.id).await.unwrap_err();
        assert!(e.is_not_found(), "{e}");
        let e = n.delete_security_group(&sg.id).await.unwrap_err();
        assert!(e.is_not_found(), "{e}");
        let e = n
            .update_security_group(missing, &SecurityGroupUpdate::default())
            .await
            .unwrap_err();
        assert!(e.is_not_found(), "{e}");
    })
    .await;
}

#[tokio::test]
async fn quotas_with_usage_and_partial_updates() {
    if skipped() {
        return;
    }
    let (cloud, _core) = cloud().await;
    let c = Cleanup::default();
    c.run(&cloud, async {
        let n = &cloud.network;
        let proj = project(&cloud, &c).await;
        let before = n.get_network_quota(&proj.id).await.unwrap();
        for key in [
            "network",
            "subnet",
            "port",
            "router",
            "security_group",
            "security_group_rule",
        ] {
            assert!(before.contains_key(key), "{key} missing in {before:?}");
        }
        assert_eq!(before["network"].in_use, 0);
        c.track(Res::Quota {
            project: proj.id.clone(),
            restore: before.iter().map(|(k, v)| (k.clone(), v.limit)).collect(),
        });

        // Usage follows objects of the project.
        let net = n
            .create_network(&NetworkCreate {
                name: unique("qnet"),
                project_id: Some(proj.id.clone()),
                ..Default::default()
            })
            .await
            .unwrap();
        c.track(Res::Network(net.id.clone()));
        let q = n.get_network_quota(&proj.id).await.unwrap();
        assert_eq!(q["network"].in_use, 1);

        // Only the given keys change.
        let limits = QuotaUpdate::from([("router".to_string(), 3), ("network".to_string(), 7)]);
        n.update_network_quota(&proj.id, &limits).await.unwrap();
        let after = n.get_network_quota(&proj.id).await.unwrap();
        assert_eq!(after["router"].limit, 3);
        assert_eq!(after["network"].limit, 7);
        assert_eq!(after["network"].in_use, 1);
        let defaults = n.get_network_quota_defaults(&proj.id).await.unwrap();
        // The one-request listing (the drift check's): this project's own limits, the
        // defaults for a project without limits of its own.
        let other = project(&cloud, &c).await;
        let listed = n
            .list_network_quota_limits(&[proj.id.clone(), other.id.clone()])
            .await
            .unwrap();
        assert_eq!(listed[&proj.id]["router"], 3, "{listed:?}");
        assert_eq!(listed[&proj.id]["network"], 7, "{listed:?}");
        assert_eq!(listed[&other.id], defaults, "{listed:?}");
        assert_eq!(defaults["router"], before["router"].limit);
        assert_eq!(defaults["network"], before["network"].limit);
        for (k, v) in &before {
            if k != "router" && k != "network" {
                assert_eq!(after[k].limit, v.limit, "{k} must be untouched");
            }
        }
        // Unlimited.
        n.update_network_quota(&proj.id, &QuotaUpdate::from([("router".to_string(), -1)]))
            .await
            .unwrap();
        assert_eq!(
            n.get_network_quota(&proj.id).await.unwrap()["router"].limit,
            -1
        );
        // Nothing to set: no call, no change.
        n.update_network_quota(&proj.id, &QuotaUpdate::new())
            .await
            .unwrap();

        // Errors keep Neutron's text.
        let e = n
            .update_network_quota(&proj.id, &QuotaUpdate::from([("bogus".to_string(), 1)]))
            .await
            .unwrap_err();
        assert!(matches!(e, Error::BadRequest { .. }), "{e}");
        assert!(
            e.message().contains("Unrecognized attribute(s) 'bogus'"),
            "{e}"
        );
        let e = n
            .update_network_quota(&proj.id, &QuotaUpdate::from([("router".to_string(), -5)]))
            .await
            .unwrap_err();
        assert!(matches!(e, Error::BadRequest { .. }), "{e}");
    })
    .await;
}

/// Time one expression and record it under `label`.
macro_rules! timed {
    ($samples:ident, $label:expr, $e:expr) => {{
        let t = Instant::now();
        let v = $e;
        $samples.push(($label, t.elapsed()));
        v
    }};
}

/// Per-call latency of the common calls (printed; run with --nocapture).
#[tokio::test]
async fn latency_of_common_calls() {
    if skipped() {
        return;
    }
    let started = Instant::now();
    let (cloud, _core) = cloud().await;
    let connect = started.elapsed();
    let c = Cleanup::default();
    c.run(&cloud, async {
        let n = &cloud.network;
        let mut samples: Vec<(&str, Duration)> = vec![("connect (auth + discovery)", connect)];
        let net = timed!(
            samples,
            "create_network (POST + PUT tags)",
            n.create_network(&NetworkCreate {
                name: unique("lat"),
                tags: vec![MARK.into()],
                ..Default::default()
            })
            .await
            .unwrap()
        );
        c.track(Res::Network(net.id.clone()));
        for _ in 0..3 {
            timed!(
                samples,
                "get_network",
                n.get_network(&net.id).await.unwrap()
            );
        }
        timed!(
            samples,
            "list_networks (by tag)",
            n.list_networks(&NetworkFilter {
                tags: vec![MARK.into()],
                ..Default::default()
            })
            .await
            .unwrap()
        );
        timed!(
            samples,
            "get_network_quota",
            n.get_network_quota(&net.project_id).await.unwrap()
        );
        timed!(
            samples,
            "delete_network",
            n.delete_network(&net.id).await.unwrap()
        );
        for (label, d) in &samples {
            eprintln!("latency {label}: {} ms", d.as_millis());
        }
        assert!(samples.iter().all(|(_, d)| *d < Duration::from_secs(30)));
    })
    .await;
}
