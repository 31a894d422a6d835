//! End-to-end tests of the project reconcile on the in-memory OpenStack (no Kubernetes).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use api::common::find_condition;
use api::naming::MANAGED_TAG;
use api::{OpenstackProject, OpenstackProjectStatus};
use openstack::fake::FakeCloud;
use openstack::model::*;
use openstack::{Cloud, OptionalExt};

use super::identity::ADOPTED_TAG;
use super::*;
use crate::framework::{Managed, Progress};

const SEED_README: &str = include_str!("../../../../../examples/seed-readme/project.yaml");

const BIG: &str = r#"
apiVersion: sunet.se/v1alpha1
kind: OpenstackProject
metadata:
  name: big
spec:
  name: big.example.com
  description: Big tenant
  domain: sso-users
  quotas:
    compute: {instances: 20, cores: 40, ramMB: 81920, serverGroups: 10, serverGroupMembers: 10}
    storage: {volumes: 20, volumesGB: 1000, snapshots: 10, backups: 10, backupsGB: 500}
    network: {floatingIps: 10, networks: 10, subnets: 10, routers: 5, ports: 200, securityGroups: 20, securityGroupRules: 200}
  networks:
    - {name: front, cidr: 10.10.0.0/24, dnsNameservers: ["192.0.2.53"], router: {externalNetwork: external}}
    - {name: back, cidr: 10.20.0.0/24, enableDhcp: false, router: {externalNetwork: external, enableSnat: false}}
    - {name: mgmt, cidr: 10.30.0.0/24, router: {externalNetwork: external}}
  securityGroups:
    - name: web
      description: HTTP(S) from anywhere
      rules:
        - {direction: ingress, protocol: tcp, portRangeMin: 80, portRangeMax: 80, remoteIpPrefix: "0.0.0.0/0"}
        - {direction: ingress, protocol: tcp, portRangeMin: 443, portRangeMax: 443, remoteIpPrefix: "0.0.0.0/0"}
        - {direction: ingress, protocol: tcp, portRangeMin: 443, portRangeMax: 443, remoteIpPrefix: "::/0", ethertype: IPv6}
        - {direction: ingress, protocol: icmp, portRangeMin: 8, portRangeMax: 0, remoteIpPrefix: "0.0.0.0/0"}
    - name: bastion
      rules:
        - {direction: ingress, protocol: tcp, portRangeMin: 22, portRangeMax: 22, remoteIpPrefix: "198.51.100.0/24"}
        - {direction: ingress, protocol: icmp}
        - {direction: egress, protocol: tcp, portRangeMin: 22, portRangeMax: 22, remoteGroupName: internal}
    - name: internal
      rules:
        - {direction: ingress, protocol: any, remoteGroupName: bastion}
        - {direction: ingress, protocol: udp, portRangeMin: 5000, portRangeMax: 5100, remoteGroupName: web}
        - {direction: ingress, protocol: tcp, portRangeMin: 1, portRangeMax: 65535, remoteGroupName: internal}
  roleBindings:
    - {role: member, users: [alice@example.com, bob@example.com], userDomain: sso-users}
    - {role: reader, users: [carol@example.com], groups: [auditors]}
  federationRef:
    configMapName: federation-config
"#;

/// A cloud like the test cloud: domain `sso-users` with three users and a group, an external
/// network `external` with a subnet.
struct World {
    fake: FakeCloud,
    cloud: Cloud,
    config: Config,
    locks: LocalLocks,
    sso: Domain,
}

impl World {
    async fn new() -> Self {
        let fake = FakeCloud::new();
        let cloud = fake.cloud();
        let sso = cloud
            .identity
            .create_domain(&DomainCreate {
                name: "sso-users".into(),
                description: String::new(),
                enabled: true,
                tags: vec![],
            })
            .await
            .unwrap();
        for u in ["alice@example.com", "bob@example.com", "carol@example.com"] {
            fake.add_user(&sso.id, u);
        }
        cloud
            .identity
            .create_group(&GroupCreate {
                name: "auditors".into(),
                domain_id: sso.id.clone(),
                description: "made by hand".into(),
            })
            .await
            .unwrap();
        let ext = cloud
            .network
            .create_network(&NetworkCreate {
                name: "external".into(),
                external: Some(true),
                provider_network_type: Some("flat".into()),
                provider_physical_network: Some("physnet1".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        cloud
            .network
            .create_subnet(&SubnetCreate {
                network_id: ext.id,
                name: "external-subnet".into(),
                ip_version: 4,
                cidr: "172.24.4.0/24".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        fake.reset_calls();
        World {
            fake,
            cloud,
            config: Config::default(),
            locks: LocalLocks::default(),
            sso,
        }
    }

    fn env(&self, obj: &OpenstackProject) -> Env<'_> {
        Env {
            cloud: &self.cloud,
            config: &self.config,
            owner: Owner {
                cluster: self.config.cluster_id.clone(),
                uid: obj.metadata.uid.clone().unwrap_or_default(),
            },
            locks: &self.locks,
        }
    }

    async fn pass(
        &self,
        obj: &OpenstackProject,
        status: &mut OpenstackProjectStatus,
        fed: FederationInput,
    ) -> Result<Progress> {
        reconcile_project(&self.env(obj), obj, status, fed)
            .await
            .result
    }

    async fn delete(
        &self,
        obj: &OpenstackProject,
        status: &mut OpenstackProjectStatus,
        fed: FederationInput,
    ) -> Result<()> {
        cleanup_project(&self.env(obj), obj, status, fed)
            .await
            .result
    }

    /// Passes until one succeeds (at most `n`); the last result.
    async fn converge(
        &self,
        obj: &OpenstackProject,
        status: &mut OpenstackProjectStatus,
        n: usize,
    ) -> Result<Progress> {
        let mut last = self.pass(obj, status, fed(obj)).await;
        for _ in 1..n {
            if last.is_ok() {
                break;
            }
            last = self.pass(obj, status, fed(obj)).await;
        }
        last
    }

    async fn project(&self, id: &str) -> Option<Project> {
        self.cloud
            .identity
            .get_project(id)
            .await
            .optional()
            .unwrap()
    }

    /// (actor, role name) assignments on a project.
    async fn grants(&self, project_id: &str) -> BTreeSet<(Actor, String)> {
        self.cloud
            .identity
            .list_project_role_assignments(project_id)
            .await
            .unwrap()
            .into_iter()
            .map(|a| (a.actor, a.role_name.unwrap_or_default()))
            .collect()
    }

    async fn user(&self, name: &str) -> Actor {
        Actor::User(
            self.cloud
                .identity
                .find_user(&self.sso.id, name)
                .await
                .unwrap()
                .unwrap()
                .id,
        )
    }

    async fn group(&self, name: &str) -> Option<Group> {
        self.cloud
            .identity
            .find_group(&self.sso.id, name)
            .await
            .unwrap()
    }

    async fn networks(&self, project_id: &str) -> (Vec<Network>, Vec<Subnet>, Vec<Router>) {
        let n = &self.cloud.network;
        let nets = n
            .list_networks(&NetworkFilter {
                project_id: Some(project_id.into()),
                ..Default::default()
            })
            .await
            .unwrap();
        let subnets = n
            .list_subnets(&SubnetFilter {
                project_id: Some(project_id.into()),
                ..Default::default()
            })
            .await
            .unwrap();
        let routers = n
            .list_routers(&RouterFilter {
                project_id: Some(project_id.into()),
                ..Default::default()
            })
            .await
            .unwrap();
        (nets, subnets, routers)
    }

    async fn groups_of(&self, project_id: &str) -> BTreeMap<String, SecurityGroup> {
        self.cloud
            .network
            .list_security_groups(&SecurityGroupFilter {
                project_id: Some(project_id.into()),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_iter()
            .map(|g| (g.name.clone(), g))
            .collect()
    }

    async fn mapping(&self) -> Option<Mapping> {
        self.cloud
            .identity
            .get_mapping("satosa_oidc_mapping")
            .await
            .optional()
            .unwrap()
    }
}

fn from_yaml(text: &str, uid: &str) -> OpenstackProject {
    let doc = api::manifest::documents(text).unwrap().remove(0);
    let mut obj: OpenstackProject = serde_json::from_value(doc).unwrap();
    obj.metadata.uid = Some(uid.into());
    obj.metadata.namespace = Some("demo".into());
    obj.metadata.generation = Some(1);
    let errors = obj.validate();
    assert!(errors.is_empty(), "test object must be valid: {errors:?}");
    obj
}

fn fed(obj: &OpenstackProject) -> FederationInput {
    if obj.spec.federation_ref.is_none() {
        return FederationInput::NotRequested;
    }
    FederationInput::Settings(FederationSettings {
        config_map: "demo/federation-config".into(),
        idp: "satosa".into(),
        remote_id: "https://idp.example.com".into(),
        sso_domain: Some("sso-users".into()),
        may_manage_idp: true,
    })
}

/// Settings from a ConfigMap the tenant controls (its own namespace, not trusted).
fn tenant_fed(remote_id: &str, sso_domain: &str) -> FederationInput {
    FederationInput::Settings(FederationSettings {
        config_map: "demo/federation-config".into(),
        idp: "satosa".into(),
        remote_id: remote_id.into(),
        sso_domain: Some(sso_domain.into()),
        may_manage_idp: false,
    })
}

fn cond<'a>(status: &'a OpenstackProjectStatus, t: &str) -> &'a api::Condition {
    find_condition(&status.conditions, t).unwrap_or_else(|| panic!("no {t} condition"))
}

fn assert_all_true(status: &OpenstackProjectStatus) {
    for c in &status.conditions {
        assert!(c.is_true(), "{c:?}");
    }
}

#[tokio::test]
async fn seed_readme_project_converges() {
    let w = World::new().await;
    let obj = from_yaml(SEED_README, "uid-readme");
    let mut st = OpenstackProjectStatus::default();
    let p = w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    assert!(
        matches!(p, Progress::Ready { ref reason, .. } if reason == "Created"),
        "{p:?}"
    );
    let types: Vec<&str> = st.conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(
        types,
        vec![
            PROJECT_READY,
            QUOTAS_READY,
            NETWORKS_READY,
            SECURITY_GROUPS_READY,
            ROLE_BINDINGS_READY,
            FEDERATION_READY
        ]
    );
    assert_all_true(&st);

    let pid = st.project_id.clone().unwrap();
    let project = w.project(&pid).await.unwrap();
    assert_eq!(project.name, "my-project.example.com");
    assert_eq!(project.description, "My OpenStack project");
    assert!(project.tags.contains(&MANAGED_TAG.to_string()));
    let group = w.group("my-project-example-com-users").await.unwrap();
    assert_eq!(st.group_id.as_deref(), Some(group.id.as_str()));
    assert_eq!(
        group.description,
        "[managed-by-openstack-operator] Users for my-project.example.com"
    );
    // `member` users are in the project group (as with the seed), which holds `member`.
    let grants = w.grants(&pid).await;
    assert!(grants.contains(&(Actor::Group(group.id.clone()), "member".into())));
    assert_eq!(grants.len(), 1, "{grants:?}");
    let members: BTreeSet<Actor> = w
        .cloud
        .identity
        .list_group_users(&group.id)
        .await
        .unwrap()
        .into_iter()
        .map(|u| Actor::User(u.id))
        .collect();
    assert_eq!(
        members,
        [
            w.user("alice@example.com").await,
            w.user("bob@example.com").await
        ]
        .into()
    );

    let q = w.cloud.compute.get_compute_quota(&pid).await.unwrap();
    assert_eq!(
        (q["instances"].limit, q["cores"].limit, q["ram"].limit),
        (20, 40, 81920)
    );
    let v = w.cloud.block_storage.get_volume_quota(&pid).await.unwrap();
    assert_eq!((v["volumes"].limit, v["gigabytes"].limit), (20, 1000));
    assert_eq!(
        w.cloud.network.get_network_quota(&pid).await.unwrap()["floatingip"].limit,
        10
    );
    assert_eq!(st.quota_usage.len(), 6);
    assert_eq!(st.quota_usage["compute.ramMB"].limit, 81920);
    assert_eq!(st.quota_usage["storage.volumesGB"].limit, 1000);

    let (nets, subnets, routers) = w.networks(&pid).await;
    assert_eq!(nets.len(), 1);
    assert_eq!(subnets[0].name, "internal-subnet");
    assert_eq!(subnets[0].cidr, "192.168.100.0/24");
    assert_eq!(routers[0].name, "internal-router");
    assert_eq!(
        routers[0].external_gateway.as_ref().unwrap().enable_snat,
        Some(true)
    );
    let ports = w
        .cloud
        .network
        .list_router_interfaces(&routers[0].id)
        .await
        .unwrap();
    assert_eq!(
        ports[0].fixed_ips[0].subnet_id.as_deref(),
        Some(subnets[0].id.as_str())
    );
    assert_eq!(
        st.networks,
        vec![api::project::NetworkStatus {
            name: "internal".into(),
            network_id: Some(nets[0].id.clone()),
            subnet_id: Some(subnets[0].id.clone()),
            router_id: Some(routers[0].id.clone()),
        }]
    );

    let sgs = w.groups_of(&pid).await;
    let ssh = &sgs["allow-ssh"];
    assert_eq!(st.security_groups[0].id.as_deref(), Some(ssh.id.as_str()));
    // Neutron's two default egress rules plus the spec's rule.
    assert_eq!(ssh.rules.len(), 3);

    let rules = w.mapping().await.unwrap().rules.to_value().unwrap();
    assert_eq!(
        rules,
        serde_json::json!([federation::project_rule(
            "my-project-example-com-users",
            "sso-users",
            &["alice@example.com".into(), "bob@example.com".into()]
        )])
    );
    let idp = w
        .cloud
        .identity
        .get_identity_provider("satosa")
        .await
        .unwrap();
    assert_eq!(idp.remote_ids, vec!["https://idp.example.com".to_string()]);
    // Created in sso-domain (Keystone generates no domain for it) with our mark.
    assert_eq!(idp.domain_id.as_deref(), Some(w.sso.id.as_str()));
    assert_eq!(idp.description, federation::idp_mark(&w.config.cluster_id));
    let proto = w
        .cloud
        .identity
        .get_federation_protocol("satosa", "openid")
        .await
        .unwrap();
    assert_eq!(proto.mapping_id, "satosa_oidc_mapping");

    // A resync changes nothing.
    w.fake.reset_calls();
    let p = w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    assert!(
        matches!(p, Progress::Ready { ref reason, .. } if reason == "InSync"),
        "{p:?}"
    );
    assert_eq!(w.fake.writes(), 0, "{:?}", w.fake.write_calls());
}

#[tokio::test]
async fn large_project_converges_and_resync_makes_no_writes() {
    let w = World::new().await;
    let obj = from_yaml(BIG, "uid-big");
    let mut st = OpenstackProjectStatus::default();
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    assert_all_true(&st);
    let pid = st.project_id.clone().unwrap();
    let (nets, subnets, routers) = w.networks(&pid).await;
    assert_eq!((nets.len(), subnets.len(), routers.len()), (3, 3, 3));
    let back = routers.iter().find(|r| r.name == "back-router").unwrap();
    assert_eq!(
        back.external_gateway.as_ref().unwrap().enable_snat,
        Some(false)
    );
    let sgs = w.groups_of(&pid).await;
    // 10 spec rules + 2 default egress rules per group (one spec rule of `web` is IPv6 any
    // egress? no: all spec rules are distinct from the defaults).
    let total: usize = ["web", "bastion", "internal"]
        .iter()
        .map(|n| sgs[*n].rules.len())
        .sum();
    assert_eq!(total, 10 + 6);
    let internal = &sgs["internal"];
    assert!(
        internal
            .rules
            .iter()
            .any(|r| r.remote_group_id.as_deref() == Some(sgs["bastion"].id.as_str()))
    );
    assert_eq!(st.quota_usage.len(), 17);
    let grants = w.grants(&pid).await;
    let auditors = w.group("auditors").await.unwrap();
    assert!(grants.contains(&(w.user("carol@example.com").await, "reader".into())));
    assert!(!grants.contains(&(w.user("carol@example.com").await, "member".into())));
    assert!(grants.contains(&(Actor::Group(auditors.id), "reader".into())));

    w.fake.reset_calls();
    let p = w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    assert!(matches!(p, Progress::Ready { ref reason, .. } if reason == "InSync"));
    assert_eq!(w.fake.writes(), 0, "{:?}", w.fake.write_calls());
    let reads = w.fake.reads();
    eprintln!(
        "steady-state resync of the large project: {reads} read calls: {:?}",
        w.fake.calls()
    );
    // project, group, 1 group, the reader role group (2 gets), the project group's members,
    // assignments, 3 quota sets, networks/subnets/routers, 3 router interface lists, security
    // groups, mapping, IdP, protocol. The domain, the roles, the 3 users and the external
    // networks come from the lookup cache the converging pass filled.
    assert_eq!(reads, 19);

    w.locks.lookups().clear();
    w.fake.reset_calls();
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    assert_eq!(w.fake.writes(), 0, "{:?}", w.fake.write_calls());
    assert_eq!(
        w.fake.reads(),
        25,
        "a cold cache: + domain, roles, 3 users, external networks"
    );
}

#[tokio::test]
async fn a_stale_cached_user_fails_one_pass_and_the_retry_reads_afresh() {
    let w = World::new().await;
    let obj = from_yaml(BIG, "uid-stale");
    let mut st = OpenstackProjectStatus::default();
    // As if alice had been deleted and made again under the same name after a lookup.
    w.locks
        .lookups()
        .put_user(&w.sso.id, "alice@example.com", "a-deleted-user-id");
    let first = w.pass(&obj, &mut st, fed(&obj)).await;
    assert!(first.is_err(), "{first:?}");
    assert_eq!(
        w.locks.lookups().user(&w.sso.id, "alice@example.com"),
        None,
        "a failed pass empties the cache"
    );
    let p = w.converge(&obj, &mut st, 3).await.unwrap();
    assert!(matches!(p, Progress::Ready { .. }), "{p:?}");
    let alice = w.user("alice@example.com").await;
    let Actor::User(alice) = alice else {
        panic!("not a user: {alice:?}")
    };
    let members = w
        .cloud
        .identity
        .list_group_users(st.group_id.as_deref().unwrap())
        .await
        .unwrap();
    assert!(members.iter().any(|u| u.id == alice), "{members:?}");
}

#[tokio::test]
async fn edits_converge_in_place() {
    let w = World::new().await;
    let mut obj = from_yaml(BIG, "uid-edit");
    let mut st = OpenstackProjectStatus::default();
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    let pid = st.project_id.clone().unwrap();
    let (_, before_subnets, before_routers) = w.networks(&pid).await;
    let back_net = st.networks[1].network_id.clone();
    let sgs_before = w.groups_of(&pid).await;

    let s = &mut obj.spec;
    s.description = "changed".into();
    s.enabled = false;
    {
        let nets = s.networks.as_mut().unwrap();
        nets[0].cidr = "10.11.0.0/24".into(); // replace front's subnet
        nets[0].router = None; // and drop its router
        nets[1].enable_dhcp = true; // back: DHCP/DNS/SNAT in place
        nets[1].dns_nameservers = Some(vec!["192.0.2.1".into()]);
        nets[1].router.as_mut().unwrap().enable_snat = true;
        nets.remove(2); // mgmt goes
        nets.push(api::project::ProjectNetwork {
            name: "extra".into(),
            cidr: "10.40.0.0/24".into(),
            enable_dhcp: true,
            dns_nameservers: None,
            router: None,
        });
    }
    {
        let groups = s.security_groups.as_mut().unwrap();
        groups[0].rules.as_mut().unwrap().remove(0); // web: no port 80
        groups[0].description = "HTTPS only".into();
        let bastion = groups[1].rules.as_mut().unwrap();
        bastion.pop(); // the rule referring to `internal`
        bastion.push(api::project::SecurityGroupRule {
            direction: api::project::Direction::Ingress,
            protocol: Some(api::project::Protocol::Tcp),
            port_range_min: Some(2222),
            port_range_max: Some(2222),
            remote_ip_prefix: Some("198.51.100.0/24".into()),
            remote_group_name: None,
            ethertype: api::project::Ethertype::IPv4,
        });
        groups.remove(2); // internal goes
    }
    {
        let rb = s.role_bindings.as_mut().unwrap();
        rb[0].users = Some(vec!["alice@example.com".into(), "dave@example.com".into()]);
        rb[1].groups = None;
    }
    {
        let c = s.quotas.as_mut().unwrap().compute.as_mut().unwrap();
        c.cores = Some(50);
        c.instances = None; // set by us before: back to Nova's default
    }
    obj.metadata.generation = Some(2);

    let p = w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    assert!(
        matches!(p, Progress::Ready { ref reason, .. } if reason == "Updated"),
        "{p:?}"
    );
    assert_eq!(st.pending_users, vec!["dave@example.com".to_string()]);
    assert_eq!(
        cond(&st, ROLE_BINDINGS_READY).reason.as_deref(),
        Some("UsersPending")
    );
    assert_eq!(cond(&st, ROLE_BINDINGS_READY).observed_generation, Some(2));

    let project = w.project(&pid).await.unwrap();
    assert_eq!(
        (project.description.as_str(), project.enabled),
        ("changed", false)
    );

    let (nets, subnets, routers) = w.networks(&pid).await;
    let names: BTreeSet<&str> = nets.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["back", "extra", "front"].into());
    assert_eq!(routers.len(), 1);
    assert_eq!(routers[0].name, "back-router");
    assert_eq!(
        routers[0].external_gateway.as_ref().unwrap().enable_snat,
        Some(true)
    );
    assert!(
        before_routers.iter().any(|r| r.id == routers[0].id),
        "updated, not replaced"
    );
    let front = subnets.iter().find(|s| s.name == "front-subnet").unwrap();
    assert_eq!(front.cidr, "10.11.0.0/24");
    assert!(before_subnets.iter().all(|s| s.id != front.id));
    let back = subnets.iter().find(|s| s.name == "back-subnet").unwrap();
    assert!(back.enable_dhcp);
    assert_eq!(back.dns_nameservers, vec!["192.0.2.1".to_string()]);
    assert!(before_subnets.iter().any(|s| s.id == back.id));
    assert_eq!(st.networks[1].network_id, back_net);
    assert_eq!(st.networks.len(), 3);
    assert_eq!(st.networks[0].router_id, None);

    let sgs = w.groups_of(&pid).await;
    assert!(!sgs.contains_key("internal"));
    assert_eq!(sgs["web"].id, sgs_before["web"].id);
    assert_eq!(sgs["web"].description, "HTTPS only");
    assert!(
        !sgs["web"]
            .rules
            .iter()
            .any(|r| r.port_range_min == Some(80))
    );
    assert!(
        sgs["bastion"]
            .rules
            .iter()
            .any(|r| r.port_range_min == Some(2222))
    );
    assert_eq!(sgs["bastion"].rules.len(), 2 + 3);
    assert_eq!(st.security_groups.len(), 2);

    let grants = w.grants(&pid).await;
    let bob = w.user("bob@example.com").await;
    assert!(!grants.iter().any(|(a, _)| *a == bob));
    let auditors = w.group("auditors").await.unwrap();
    assert!(
        !grants
            .iter()
            .any(|(a, _)| *a == Actor::Group(auditors.id.clone()))
    );
    // Members follow the member binding: bob is out of the project group.
    let pg = st.group_id.clone().unwrap();
    let members: Vec<String> = w
        .cloud
        .identity
        .list_group_users(&pg)
        .await
        .unwrap()
        .into_iter()
        .map(|u| u.id)
        .collect();
    assert_eq!(
        members
            .iter()
            .map(|m| Actor::User(m.clone()))
            .collect::<Vec<_>>(),
        vec![w.user("alice@example.com").await]
    );
    // One rule per role: members into the project group, the reader into the reader group,
    // which holds `reader` alone.
    let rules = w.mapping().await.unwrap().rules.to_value().unwrap();
    assert_eq!(
        rules[0]["remote"][1]["any_one_of"],
        serde_json::json!(["alice@example.com", "dave@example.com"]),
    );
    assert_eq!(
        rules[0]["local"][1]["group"]["name"],
        "big-example-com-users"
    );
    assert_eq!(
        rules[1]["remote"][1]["any_one_of"],
        serde_json::json!(["carol@example.com"])
    );
    assert_eq!(
        rules[1]["local"][1]["group"]["name"],
        "big-example-com-users-reader"
    );
    let reader_group = st.role_groups["reader"].clone();
    let grants = w.grants(&pid).await;
    let of_reader_group: Vec<&String> = grants
        .iter()
        .filter(|(a, _)| *a == Actor::Group(reader_group.clone()))
        .map(|(_, r)| r)
        .collect();
    assert_eq!(of_reader_group, vec!["reader"]);

    // instances was set by us and removed from the spec: back to Nova's default.
    let q = w.cloud.compute.get_compute_quota(&pid).await.unwrap();
    assert_eq!((q["cores"].limit, q["instances"].limit), (50, 10));
    assert!(!st.quota_usage.contains_key("compute.instances"));
    assert!(!st.quota_keys_set.contains(&"compute.instances".to_string()));
    assert!(st.quota_keys_set.contains(&"compute.cores".to_string()));

    // Converged: a resync writes nothing.
    w.fake.reset_calls();
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    assert_eq!(w.fake.writes(), 0, "{:?}", w.fake.write_calls());

    // The pending user logs in for the first time: in the project group on the next pass.
    w.fake.add_user(&w.sso.id, "dave@example.com");
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    assert!(st.pending_users.is_empty());
    let dave = w.user("dave@example.com").await;
    assert!(
        w.cloud
            .identity
            .list_group_users(&pg)
            .await
            .unwrap()
            .iter()
            .any(|u| Actor::User(u.id.clone()) == dave)
    );
    assert_eq!(
        cond(&st, ROLE_BINDINGS_READY).reason.as_deref(),
        Some("Updated")
    );

    // Removing whole sections removes what they made.
    obj.spec.networks = None;
    obj.spec.security_groups = None;
    obj.spec.quotas = None;
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    let (nets, subnets, routers) = w.networks(&pid).await;
    assert!(nets.is_empty() && subnets.is_empty() && routers.is_empty());
    assert_eq!(
        w.groups_of(&pid).await.keys().collect::<Vec<_>>(),
        vec!["default"]
    );
    assert!(st.networks.is_empty() && st.security_groups.is_empty() && st.quota_usage.is_empty());
    for t in [NETWORKS_READY, SECURITY_GROUPS_READY, QUOTAS_READY] {
        assert!(find_condition(&st.conditions, t).is_none());
    }
    w.fake.reset_calls();
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    assert_eq!(w.fake.writes(), 0);
}

#[tokio::test]
async fn deletion_leaves_nothing_of_ours() {
    let w = World::new().await;
    let obj = from_yaml(BIG, "uid-del");
    let mut st = OpenstackProjectStatus::default();
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    let pid = st.project_id.clone().unwrap();
    w.delete(&obj, &mut st, fed(&obj)).await.unwrap();

    assert!(w.project(&pid).await.is_none());
    let projects = w
        .cloud
        .identity
        .list_projects(&ProjectFilter::default())
        .await
        .unwrap();
    assert_eq!(
        projects.len(),
        1,
        "only the bootstrap admin project: {projects:?}"
    );
    let groups = w.cloud.identity.list_groups(None).await.unwrap();
    assert_eq!(
        groups.iter().map(|g| g.name.as_str()).collect::<Vec<_>>(),
        vec!["auditors"]
    );
    let all_nets = w
        .cloud
        .network
        .list_networks(&NetworkFilter::default())
        .await
        .unwrap();
    assert_eq!(
        all_nets.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
        vec!["external"]
    );
    assert_eq!(
        w.cloud
            .network
            .list_subnets(&SubnetFilter::default())
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        w.cloud
            .network
            .list_routers(&RouterFilter::default())
            .await
            .unwrap()
            .is_empty()
    );
    let sgs = w
        .cloud
        .network
        .list_security_groups(&SecurityGroupFilter::default())
        .await
        .unwrap();
    assert!(sgs.iter().all(|g| g.name == "default"), "{sgs:?}");
    assert!(w.mapping().await.is_none());
    assert!(
        w.cloud
            .identity
            .get_federation_protocol("satosa", "openid")
            .await
            .optional()
            .unwrap()
            .is_none()
    );
    // The IdP was created by the operator (in sso-domain, so no domain of its own) and the
    // last project using it is gone: it goes too, and no stray domain is left.
    assert!(
        w.cloud
            .identity
            .get_identity_provider("satosa")
            .await
            .optional()
            .unwrap()
            .is_none()
    );
    let domains = w.cloud.identity.list_domains().await.unwrap();
    assert!(
        domains.iter().all(|d| d.name != "satosa"),
        "no domain generated for the IdP: {domains:?}"
    );
    assert!(st.role_groups.is_empty());

    // Deleting again finds nothing and is fine.
    w.fake.reset_calls();
    w.delete(&obj, &mut st, fed(&obj)).await.unwrap();
    assert_eq!(w.fake.writes(), 0);
}

#[tokio::test]
async fn deletion_after_a_crash_finds_the_project_by_name_and_marks() {
    let w = World::new().await;
    let obj = from_yaml(SEED_README, "uid-crash");
    let mut st = OpenstackProjectStatus::default();
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    let pid = st.project_id.clone().unwrap();
    // The status write was lost.
    let mut empty = OpenstackProjectStatus::default();
    w.delete(&obj, &mut empty, fed(&obj)).await.unwrap();
    assert!(w.project(&pid).await.is_none());
    let (n, s, r) = w.networks(&pid).await;
    assert!(n.is_empty() && s.is_empty() && r.is_empty());
    assert!(w.group("my-project-example-com-users").await.is_none());

    // Another resource's project of the same name is never touched.
    let obj2 = from_yaml(SEED_README, "uid-owner");
    let mut st2 = OpenstackProjectStatus::default();
    w.pass(&obj2, &mut st2, fed(&obj2)).await.unwrap();
    let mut empty = OpenstackProjectStatus::default();
    w.fake.reset_calls();
    w.delete(&obj, &mut empty, fed(&obj)).await.unwrap();
    assert!(
        w.project(st2.project_id.as_deref().unwrap())
            .await
            .is_some()
    );
    assert!(w.group("my-project-example-com-users").await.is_some());
    assert_eq!(w.mapping().await.unwrap().rules.len(), 1);
    assert_eq!(w.fake.writes(), 0, "{:?}", w.fake.write_calls());
}

#[tokio::test]
async fn failed_deletion_keeps_the_finalizer_until_everything_is_gone() {
    let w = World::new().await;
    let obj = from_yaml(SEED_README, "uid-keep");
    let mut st = OpenstackProjectStatus::default();
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    let pid = st.project_id.clone().unwrap();
    w.fake.fail_next(
        "network.delete_router",
        1,
        openstack::Error::transient("neutron: 503"),
    );
    let e = w.delete(&obj, &mut st, fed(&obj)).await.unwrap_err();
    assert!(e.is_transient(), "{e}");
    assert!(e.to_string().contains("neutron: 503"), "{e}");
    // Project and group stay while something inside is left.
    assert!(w.project(&pid).await.is_some());
    assert!(w.group("my-project-example-com-users").await.is_some());
    w.delete(&obj, &mut st, fed(&obj)).await.unwrap();
    assert!(w.project(&pid).await.is_none());

    // An unreadable federation ConfigMap also keeps it: the rule must go.
    let obj = from_yaml(SEED_README, "uid-keep2");
    let mut st = OpenstackProjectStatus::default();
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    // The rule is recorded in status, so a ConfigMap gone at deletion (namespace deletion)
    // does not block: the rule is removed from where it is.
    assert!(st.federation_rule.is_some());
    let before = st.clone();
    w.delete(&obj, &mut st, missing()).await.unwrap();
    assert!(
        w.mapping().await.is_none(),
        "the last rule took the mapping"
    );

    // Without the record (written by an older version), the rule must still go: the
    // finalizer stays until the ConfigMap is back or federationRef is removed.
    let obj = from_yaml(SEED_README, "uid-keep3");
    let mut st = OpenstackProjectStatus::default();
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    st.federation_rule = None;
    let e = w.delete(&obj, &mut st, missing()).await.unwrap_err();
    assert!(e.to_string().contains("remove spec.federationRef"), "{e}");
    assert!(w.mapping().await.is_some());
    w.delete(&obj, &mut st, fed(&obj)).await.unwrap();
    assert!(w.mapping().await.is_none());
    assert_eq!(
        before.federation_rule.map(|r| r.mapping).as_deref(),
        Some("satosa_oidc_mapping")
    );
}

fn missing() -> FederationInput {
    FederationInput::Unavailable(ReconcileError::DependencyMissing(
        "ConfigMap demo/federation-config (spec.federationRef.configMapName)".into(),
    ))
}

#[tokio::test]
async fn a_tenant_config_map_cannot_create_or_repoint_the_identity_provider() {
    let w = World::new().await;
    let obj = from_yaml(SEED_README, "uid-tenant-idp");
    let mut st = OpenstackProjectStatus::default();

    // No IdP: waiting for an administrator, nothing created in Keystone's federation API.
    let e = w
        .pass(
            &obj,
            &mut st,
            tenant_fed("https://evil.example.com", "sso-users"),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, ReconcileError::DependencyMissing(_)), "{e}");
    let f = cond(&st, FEDERATION_READY);
    let msg = f.message.clone().unwrap_or_default();
    assert!(
        msg.contains("identity provider \"satosa\"") && msg.contains("demo/federation-config"),
        "{msg}"
    );
    assert!(msg.contains("--federation-namespaces"), "{msg}");
    assert!(
        w.cloud
            .identity
            .get_identity_provider("satosa")
            .await
            .optional()
            .unwrap()
            .is_none()
    );
    assert!(w.mapping().await.is_none());
    // The rest of the tenant converges regardless.
    assert!(cond(&st, PROJECT_READY).is_true());
    assert!(cond(&st, NETWORKS_READY).is_true());

    // An administrator creates it for another issuer: the tenant cannot repoint it.
    w.cloud
        .identity
        .create_identity_provider(&IdentityProviderCreate {
            id: "satosa".into(),
            remote_ids: vec!["https://idp.example.com".into()],
            enabled: true,
            domain_id: None,
            description: None,
        })
        .await
        .unwrap();
    w.fake.reset_calls();
    let e = w
        .pass(
            &obj,
            &mut st,
            tenant_fed("https://evil.example.com", "sso-users"),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, ReconcileError::PolicyViolation(_)), "{e}");
    assert!(
        e.to_string()
            .contains("idp-remote-id in ConfigMap demo/federation-config"),
        "{e}"
    );
    let idp = w
        .cloud
        .identity
        .get_identity_provider("satosa")
        .await
        .unwrap();
    assert_eq!(idp.remote_ids, vec!["https://idp.example.com".to_string()]);
    let fed_writes: Vec<String> = w
        .fake
        .write_calls()
        .into_keys()
        .filter(|k| {
            k.contains("identity_provider") || k.contains("mapping") || k.contains("federation")
        })
        .collect();
    assert!(fed_writes.is_empty(), "{fed_writes:?}");

    // Nor map users into a group of another domain.
    let e = w
        .pass(
            &obj,
            &mut st,
            tenant_fed("https://idp.example.com", "other-domain"),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, ReconcileError::PolicyViolation(_)), "{e}");
    assert!(
        e.to_string()
            .contains("sso-domain in ConfigMap demo/federation-config"),
        "{e}"
    );
    assert!(w.mapping().await.is_none());

    // Using the administrator's IdP as it is works (no remote ID, or the same one).
    for remote in ["", "https://idp.example.com"] {
        w.pass(&obj, &mut st, tenant_fed(remote, "sso-users"))
            .await
            .unwrap();
        assert!(cond(&st, FEDERATION_READY).is_true());
    }
    assert_eq!(Some(w.mapping().await.unwrap().rules.len()), Some(1));
    let proto = w
        .cloud
        .identity
        .get_federation_protocol("satosa", "openid")
        .await
        .unwrap();
    assert_eq!(proto.mapping_id, "satosa_oidc_mapping");

    // The administrator points the protocol at a mapping of their own: the tenant leaves it.
    w.cloud
        .identity
        .create_mapping(
            "admin_mapping",
            &MappingRules::from_values(&[serde_json::json!({"local": [], "remote": []})]).unwrap(),
        )
        .await
        .unwrap();
    w.cloud
        .identity
        .update_federation_protocol("satosa", "openid", "admin_mapping")
        .await
        .unwrap();
    let e = w
        .pass(&obj, &mut st, tenant_fed("", "sso-users"))
        .await
        .unwrap_err();
    assert!(matches!(e, ReconcileError::PolicyViolation(_)), "{e}");
    let proto = w
        .cloud
        .identity
        .get_federation_protocol("satosa", "openid")
        .await
        .unwrap();
    assert_eq!(proto.mapping_id, "admin_mapping");

    // A trusted ConfigMap (an admin namespace) may correct the remote IDs.
    let mut trusted = fed(&obj);
    if let FederationInput::Settings(s) = &mut trusted {
        s.remote_id = "https://new-issuer.example.com".into();
    }
    w.pass(&obj, &mut st, trusted).await.unwrap();
    let idp = w
        .cloud
        .identity
        .get_identity_provider("satosa")
        .await
        .unwrap();
    assert_eq!(
        idp.remote_ids,
        vec!["https://new-issuer.example.com".to_string()]
    );
}

#[tokio::test]
async fn removing_federation_ref_removes_the_rule() {
    let w = World::new().await;
    let mut obj = from_yaml(SEED_README, "uid-unfed");
    let mut st = OpenstackProjectStatus::default();
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    assert_eq!(
        st.federation_rule,
        Some(api::project::FederationRuleStatus {
            identity_provider: "satosa".into(),
            mapping: "satosa_oidc_mapping".into(),
            domain: "sso-users".into(),
            group: "my-project-example-com-users".into(),
            role_groups: vec![],
        })
    );
    // Another project's rule in the same mapping stays.
    let other = from_yaml(
        &SEED_README.replace("my-project.example.com", "other.example.com"),
        "uid-other",
    );
    let mut other_st = OpenstackProjectStatus::default();
    w.pass(&other, &mut other_st, fed(&other)).await.unwrap();
    assert_eq!(Some(w.mapping().await.unwrap().rules.len()), Some(2));

    obj.spec.federation_ref = None;
    w.pass(&obj, &mut st, FederationInput::NotRequested)
        .await
        .unwrap();
    assert!(st.federation_rule.is_none());
    assert!(find_condition(&st.conditions, FEDERATION_READY).is_none());
    let rules = w.mapping().await.unwrap().rules.to_value().unwrap();
    assert_eq!(rules.as_array().map(Vec::len), Some(1));
    assert!(federation::is_project_rule(
        &rules[0],
        "other-example-com-users",
        "sso-users"
    ));

    // The other project moves to another IdP: its rule moves with it.
    let mut moved = fed(&other);
    if let FederationInput::Settings(s) = &mut moved {
        s.idp = "keycloak".into();
        s.remote_id = "https://keycloak.example.com".into();
    }
    w.pass(&other, &mut other_st, moved).await.unwrap();
    assert!(
        w.mapping().await.is_none(),
        "the rule left satosa's mapping, its last"
    );
    let k = w
        .cloud
        .identity
        .get_mapping("keycloak_oidc_mapping")
        .await
        .unwrap();
    assert!(federation::is_project_rule(
        &k.rules.to_value().unwrap()[0],
        "other-example-com-users",
        "sso-users"
    ));
    assert_eq!(
        other_st
            .federation_rule
            .as_ref()
            .map(|r| r.identity_provider.as_str()),
        Some("keycloak")
    );
}

#[tokio::test]
async fn foreign_project_is_not_adopted_unless_allowed() {
    let mut w = World::new().await;
    let foreign = w
        .cloud
        .identity
        .create_project(&ProjectCreate {
            name: "my-project.example.com".into(),
            domain_id: w.sso.id.clone(),
            description: "pre-existing".into(),
            enabled: true,
            tags: vec!["keep-me".into()],
        })
        .await
        .unwrap();
    w.fake.reset_calls();
    let mut obj = from_yaml(SEED_README, "uid-adopt");
    let mut st = OpenstackProjectStatus::default();
    let e = w.pass(&obj, &mut st, fed(&obj)).await.unwrap_err();
    assert!(matches!(e, ReconcileError::NotOwned(_)), "{e}");
    assert!(e.to_string().contains("spec.adopt"), "{e}");
    assert_eq!(w.fake.writes(), 0);
    assert!(!cond(&st, PROJECT_READY).is_true());

    obj.spec.adopt = true;
    let e = w.pass(&obj, &mut st, fed(&obj)).await.unwrap_err();
    assert!(matches!(e, ReconcileError::PolicyViolation(_)), "{e}");
    assert!(e.to_string().contains("spec.adopt"), "{e}");
    assert_eq!(w.fake.writes(), 0);

    w.config.allow_project_adoption = true;
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    assert_eq!(st.project_id.as_deref(), Some(foreign.id.as_str()));
    assert_eq!(st.adopted, Some(true));
    let p = w.project(&foreign.id).await.unwrap();
    assert!(p.tags.contains(&"keep-me".to_string()) && p.tags.contains(&ADOPTED_TAG.to_string()));

    // Deleting the resource leaves the adopted project, without our marks or grants.
    w.delete(&obj, &mut st, fed(&obj)).await.unwrap();
    let p = w.project(&foreign.id).await.unwrap();
    assert_eq!(p.tags, vec!["keep-me".to_string()]);
    assert!(w.grants(&foreign.id).await.is_empty());
    let (n, s, r) = w.networks(&foreign.id).await;
    assert!(n.is_empty() && s.is_empty() && r.is_empty());
}

#[tokio::test]
async fn role_outside_the_allow_list_touches_nothing() {
    let w = World::new().await;
    let mut obj = from_yaml(SEED_README, "uid-admin");
    obj.spec.role_bindings.as_mut().unwrap()[0].role = "admin".into();
    let mut st = OpenstackProjectStatus::default();
    let e = w.pass(&obj, &mut st, fed(&obj)).await.unwrap_err();
    assert!(matches!(e, ReconcileError::PolicyViolation(_)), "{e}");
    assert!(e.to_string().contains("spec.roleBindings[0].role"), "{e}");
    assert_eq!(w.fake.writes(), 0);
    assert_eq!(w.fake.reads(), 0);
    assert!(st.project_id.is_none());
}

#[tokio::test]
async fn federation_config_map_in_another_namespace_needs_permission() {
    let mut w = World::new().await;
    let mut obj = from_yaml(SEED_README, "uid-ns");
    obj.spec
        .federation_ref
        .as_mut()
        .unwrap()
        .config_map_namespace = Some("other".into());
    let mut st = OpenstackProjectStatus::default();
    let e = w.pass(&obj, &mut st, fed(&obj)).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("spec.federationRef.configMapNamespace"),
        "{e}"
    );
    assert_eq!(w.fake.writes() + w.fake.reads(), 0);
    w.config.federation_namespaces.insert("other".into());
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    // Its own namespace is always fine.
    obj.spec
        .federation_ref
        .as_mut()
        .unwrap()
        .config_map_namespace = Some("demo".into());
    assert!(check_policy(&obj.spec, "demo", &Config::default()).is_ok());
}

#[tokio::test]
async fn failing_router_does_not_stop_security_groups() {
    let w = World::new().await;
    let obj = from_yaml(SEED_README, "uid-router");
    let mut st = OpenstackProjectStatus::default();
    w.fake.fail_next(
        "network.create_router",
        1,
        openstack::Error::bad_request("neutron create_router: quota exceeded for router"),
    );
    let e = w.pass(&obj, &mut st, fed(&obj)).await.unwrap_err();
    assert!(e.to_string().contains("spec.networks[0].router"), "{e}");
    assert!(e.to_string().contains("quota exceeded for router"), "{e}");
    let n = cond(&st, NETWORKS_READY);
    assert!(!n.is_true());
    assert_eq!(n.reason.as_deref(), Some("OpenStackError"));
    for t in [
        SECURITY_GROUPS_READY,
        FEDERATION_READY,
        QUOTAS_READY,
        PROJECT_READY,
    ] {
        assert!(cond(&st, t).is_true(), "{t}");
    }
    let pid = st.project_id.clone().unwrap();
    assert!(w.groups_of(&pid).await.contains_key("allow-ssh"));
    assert_eq!(st.networks[0].router_id, None);
    assert!(st.networks[0].subnet_id.is_some());
    // The next pass finishes the job.
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    assert!(st.networks[0].router_id.is_some());
    assert_all_true(&st);
}

/// The router needs only the external network, so it does not wait for the network and
/// subnet: when they fail, the router is made and recorded all the same, and the next pass
/// attaches the subnet to it once.
#[tokio::test]
async fn failing_network_does_not_stop_its_router() {
    let w = World::new().await;
    let obj = from_yaml(SEED_README, "uid-net");
    let mut st = OpenstackProjectStatus::default();
    w.fake.fail_next(
        "network.create_network",
        1,
        openstack::Error::bad_request("neutron create_network: quota exceeded for network"),
    );
    let e = w.pass(&obj, &mut st, fed(&obj)).await.unwrap_err();
    assert!(e.to_string().contains("spec.networks[0]"), "{e}");
    let entry = &st.networks[0];
    assert_eq!(
        (entry.network_id.as_ref(), entry.subnet_id.as_ref()),
        (None, None)
    );
    let router = entry
        .router_id
        .clone()
        .expect("the router is made beside the network");
    assert_eq!(w.fake.call_count("network.add_router_interface"), 0);
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    assert_eq!(
        st.networks[0].router_id.as_ref(),
        Some(&router),
        "the same router"
    );
    assert_eq!(w.fake.call_count("network.create_router"), 1);
    assert_eq!(w.fake.call_count("network.add_router_interface"), 1);
    assert_all_true(&st);
}

#[tokio::test]
async fn missing_external_network_fails_only_its_entry() {
    let w = World::new().await;
    let mut obj = from_yaml(BIG, "uid-ext");
    obj.spec.networks.as_mut().unwrap()[1]
        .router
        .as_mut()
        .unwrap()
        .external_network = Some("nowhere".into());
    let mut st = OpenstackProjectStatus::default();
    let e = w.pass(&obj, &mut st, fed(&obj)).await.unwrap_err();
    assert!(matches!(e, ReconcileError::DependencyMissing(_)), "{e}");
    let n = cond(&st, NETWORKS_READY);
    assert_eq!(n.reason.as_deref(), Some("DependencyMissing"));
    assert!(
        n.message
            .as_deref()
            .unwrap()
            .contains("spec.networks[1].router.externalNetwork"),
        "{n:?}"
    );
    let pid = st.project_id.clone().unwrap();
    let (nets, _, routers) = w.networks(&pid).await;
    assert_eq!(nets.len(), 3);
    let names: BTreeSet<&str> = routers.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["front-router", "mgmt-router"].into());
    assert!(st.networks[1].subnet_id.is_some() && st.networks[1].router_id.is_none());
    assert!(cond(&st, SECURITY_GROUPS_READY).is_true());
}

#[tokio::test]
async fn lost_responses_do_not_duplicate() {
    let w = World::new().await;
    let obj = from_yaml(SEED_README, "uid-lost");
    for op in [
        "identity.create_project",
        "identity.create_group",
        "identity.grant_project_role",
        "compute.update_compute_quota",
        "network.create_network",
        "network.create_subnet",
        "network.create_router",
        "network.add_router_interface",
        "network.create_security_group",
        "network.create_security_group_rule",
        "identity.create_identity_provider",
        "identity.create_mapping",
        "identity.create_federation_protocol",
    ] {
        w.fake.lose_next_response(op, 1);
    }
    let mut st = OpenstackProjectStatus::default();
    let res = w.converge(&obj, &mut st, 12).await;
    assert!(res.is_ok(), "{res:?}");
    // Every create ran exactly once: the next pass found its effect by name and marks.
    for op in [
        "identity.create_project",
        "identity.create_group",
        "compute.update_compute_quota",
        "network.create_network",
        "network.create_subnet",
        "network.create_router",
        "network.add_router_interface",
        "network.create_security_group",
        "network.create_security_group_rule",
        "identity.create_identity_provider",
        "identity.create_mapping",
        "identity.create_federation_protocol",
    ] {
        assert_eq!(w.fake.call_count(op), 1, "{op}");
    }
    // The project group's `member`; alice and bob are members of that group.
    assert_eq!(w.fake.call_count("identity.grant_project_role"), 1);
    assert!(
        w.fake.call_count("identity.find_project") >= 2,
        "the lost create was looked up"
    );
    assert_all_true(&st);
    let projects = w
        .cloud
        .identity
        .list_projects(&ProjectFilter {
            name: Some("my-project.example.com".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(projects.len(), 1);
    let pid = projects[0].id.clone();
    assert_eq!(st.project_id.as_deref(), Some(pid.as_str()));
    let groups = w.cloud.identity.list_groups(Some(&w.sso.id)).await.unwrap();
    assert_eq!(groups.len(), 2, "auditors + the project group: {groups:?}");
    let (n, s, r) = w.networks(&pid).await;
    assert_eq!((n.len(), s.len(), r.len()), (1, 1, 1));
    let sgs = w.groups_of(&pid).await;
    assert_eq!(sgs.len(), 2, "default + allow-ssh");
    assert_eq!(sgs["allow-ssh"].rules.len(), 3);
    assert_eq!(w.mapping().await.unwrap().rules.len(), 1);
    w.fake.reset_calls();
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    assert_eq!(w.fake.writes(), 0);
}

#[tokio::test]
async fn missing_domain_and_domain_change() {
    let w = World::new().await;
    let mut obj = from_yaml(SEED_README, "uid-dom");
    obj.spec.domain = "nowhere".into();
    let mut st = OpenstackProjectStatus::default();
    let e = w.pass(&obj, &mut st, fed(&obj)).await.unwrap_err();
    assert!(
        matches!(e, ReconcileError::DependencyMissing(ref m) if m.contains("domain \"nowhere\"")),
        "{e}"
    );
    assert_eq!(w.fake.writes(), 0);
    assert_eq!(
        cond(&st, PROJECT_READY).reason.as_deref(),
        Some("DependencyMissing")
    );

    // spec.domain by ID works like by name.
    obj.spec.domain = w.sso.id.clone();
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    obj.spec.domain = "Default".into();
    let e = w.pass(&obj, &mut st, fed(&obj)).await.unwrap_err();
    assert!(matches!(e, ReconcileError::InvalidSpec(_)), "{e}");
    assert!(e.to_string().contains("spec.domain"), "{e}");
    assert!(e.to_string().contains("not supported"), "{e}");
}

#[tokio::test]
async fn rename_moves_project_group_and_rule() {
    let w = World::new().await;
    let mut obj = from_yaml(SEED_README, "uid-rename");
    let mut st = OpenstackProjectStatus::default();
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    let pid = st.project_id.clone().unwrap();
    let gid = st.group_id.clone().unwrap();
    obj.spec.name = "renamed.example.com".into();
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    assert_eq!(st.project_id.as_deref(), Some(pid.as_str()));
    assert_eq!(w.project(&pid).await.unwrap().name, "renamed.example.com");
    let g = w.group("renamed-example-com-users").await.unwrap();
    assert_eq!(g.id, gid);
    let rules = w.mapping().await.unwrap().rules.to_value().unwrap();
    assert_eq!(rules.as_array().unwrap().len(), 1);
    assert!(federation::is_project_rule(
        &rules[0],
        "renamed-example-com-users",
        "sso-users"
    ));
}

#[tokio::test]
async fn federation_rules_of_projects_coexist() {
    let w = World::new().await;
    let a = from_yaml(SEED_README, "uid-a");
    let mut b = from_yaml(SEED_README, "uid-b");
    b.spec.name = "other.example.com".into();
    let (mut sa, mut sb) = Default::default();
    w.pass(&a, &mut sa, fed(&a)).await.unwrap();
    w.pass(&b, &mut sb, fed(&b)).await.unwrap();
    assert_eq!(w.mapping().await.unwrap().rules.len(), 2);
    w.delete(&a, &mut sa, fed(&a)).await.unwrap();
    let rules = w.mapping().await.unwrap().rules.to_value().unwrap();
    assert_eq!(rules.as_array().unwrap().len(), 1);
    assert!(federation::is_project_rule(
        &rules[0],
        "other-example-com-users",
        "sso-users"
    ));
    w.delete(&b, &mut sb, fed(&b)).await.unwrap();
    assert!(w.mapping().await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_projects_never_lose_each_others_rules() {
    let w = Arc::new(World::new().await);
    let mut tasks = Vec::new();
    for i in 0..8 {
        let w = w.clone();
        tasks.push(tokio::spawn(async move {
            let mut obj = from_yaml(SEED_README, &format!("uid-c{i}"));
            obj.spec.name = format!("p{i}.example.com");
            obj.spec.networks = None;
            let mut st = OpenstackProjectStatus::default();
            w.pass(&obj, &mut st, fed(&obj)).await.map(|_| ())
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(w.mapping().await.unwrap().rules.len(), 8);
}

#[tokio::test]
async fn missing_federation_settings_are_reported_not_skipped() {
    let w = World::new().await;
    let obj = from_yaml(SEED_README, "uid-fed");
    let mut st = OpenstackProjectStatus::default();
    let input = federation_from_data("demo", "federation-config", None, false);
    let e = w.pass(&obj, &mut st, input).await.unwrap_err();
    assert!(matches!(e, ReconcileError::DependencyMissing(_)), "{e}");
    let f = cond(&st, FEDERATION_READY);
    assert!(!f.is_true());
    assert!(
        f.message
            .as_deref()
            .unwrap()
            .contains("demo/federation-config"),
        "{f:?}"
    );
    for t in [
        PROJECT_READY,
        NETWORKS_READY,
        SECURITY_GROUPS_READY,
        ROLE_BINDINGS_READY,
    ] {
        assert!(cond(&st, t).is_true(), "{t}");
    }
    assert!(w.mapping().await.is_none());
}

#[test]
fn federation_settings_from_config_map_data() {
    let data: BTreeMap<String, String> = [
        ("idp-name".to_string(), "satosa".to_string()),
        ("idp-remote-id".to_string(), "https://idp".to_string()),
    ]
    .into();
    let FederationInput::Settings(s) = federation_from_data("ns", "cm", Some(&data), true) else {
        panic!()
    };
    assert_eq!(
        (
            s.idp.as_str(),
            s.remote_id.as_str(),
            s.sso_domain,
            s.may_manage_idp
        ),
        ("satosa", "https://idp", None, true)
    );
    let empty: BTreeMap<String, String> = [("idp-name".to_string(), " ".to_string())].into();
    assert!(matches!(
        federation_from_data("ns", "cm", Some(&empty), false),
        FederationInput::Unavailable(ReconcileError::DependencyMissing(m)) if m.contains("ns/cm")
    ));
}

#[test]
fn several_failures_in_one_area_keep_every_message_once() {
    let mut out = AreaOutcome::default();
    out.errors
        .push(ReconcileError::OpenStack(openstack::Error::bad_request(
            "neutron: a",
        )));
    out.errors.push(ReconcileError::DependencyMissing(
        "external network \"x\"".into(),
    ));
    let e = out.error().unwrap();
    assert!(matches!(e, ReconcileError::DependencyMissing(_)));
    assert_eq!(
        e.to_string(),
        "waiting for external network \"x\"; OpenStack: bad request: neutron: a"
    );
}

#[test]
fn combined_errors_report_the_most_urgent_first() {
    let e = combine(vec![
        (
            NETWORKS_READY,
            ReconcileError::DependencyMissing("external network".into()),
        ),
        (
            SECURITY_GROUPS_READY,
            ReconcileError::OpenStack(openstack::Error::transient("neutron: 503")),
        ),
        (
            QUOTAS_READY,
            ReconcileError::OpenStack(openstack::Error::bad_request("nova: no")),
        ),
    ])
    .unwrap();
    assert!(e.is_transient());
    assert!(e.to_string().contains("neutron: 503"));
    assert!(
        e.to_string()
            .contains("also failing: NetworksReady, QuotasReady"),
        "{e}"
    );
    assert!(combine(vec![]).is_none());
    let single = combine(vec![(QUOTAS_READY, ReconcileError::NotOwned("x".into()))]).unwrap();
    assert_eq!(single.to_string(), "x");
}

#[tokio::test]
async fn cidr_change_replaces_the_subnet_behind_the_same_router() {
    let w = World::new().await;
    let mut obj = from_yaml(SEED_README, "uid-cidr");
    let mut st = OpenstackProjectStatus::default();
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    let old_subnet = st.networks[0].subnet_id.clone().unwrap();
    let router = st.networks[0].router_id.clone().unwrap();
    obj.spec.networks.as_mut().unwrap()[0].cidr = "192.168.101.0/24".into();
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    let new_subnet = st.networks[0].subnet_id.clone().unwrap();
    assert_ne!(new_subnet, old_subnet);
    assert_eq!(st.networks[0].router_id.as_deref(), Some(router.as_str()));
    let ports = w
        .cloud
        .network
        .list_router_interfaces(&router)
        .await
        .unwrap();
    assert_eq!(ports.len(), 1);
    assert_eq!(
        ports[0].fixed_ips[0].subnet_id.as_deref(),
        Some(new_subnet.as_str())
    );
    assert!(
        w.cloud
            .network
            .get_subnet(&old_subnet)
            .await
            .optional()
            .unwrap()
            .is_none()
    );
    w.fake.reset_calls();
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    assert_eq!(w.fake.writes(), 0);
}

#[tokio::test]
async fn seed_created_project_is_taken_over_through_its_recorded_id() {
    let mut w = World::new().await;
    // What the seed left: project and network with only its tag, the group with its
    // description, and the IDs in the object's status.
    let seed_tag = vec![MANAGED_TAG.to_string()];
    let p = w
        .cloud
        .identity
        .create_project(&ProjectCreate {
            name: "my-project.example.com".into(),
            domain_id: w.sso.id.clone(),
            description: "My OpenStack project".into(),
            enabled: true,
            tags: seed_tag.clone(),
        })
        .await
        .unwrap();
    let g = w
        .cloud
        .identity
        .create_group(&GroupCreate {
            name: "my-project-example-com-users".into(),
            domain_id: w.sso.id.clone(),
            description: api::naming::project_group_description("my-project.example.com"),
        })
        .await
        .unwrap();
    let n = w
        .cloud
        .network
        .create_network(&NetworkCreate {
            name: "internal".into(),
            project_id: Some(p.id.clone()),
            tags: seed_tag.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let obj = from_yaml(SEED_README, "uid-seed");
    let mut st = OpenstackProjectStatus {
        project_id: Some(p.id.clone()),
        // Legacy objects may hold the group's name.
        group_id: Some(g.name.clone()),
        ..Default::default()
    };
    // Without --adopt-legacy nothing of the seed's is taken over.
    w.fake.reset_calls();
    let e = w.pass(&obj, &mut st, fed(&obj)).await.unwrap_err();
    assert!(matches!(e, ReconcileError::NotOwned(_)), "{e}");
    assert!(e.to_string().contains("--adopt-legacy"), "{e}");
    assert_eq!(w.fake.writes(), 0);
    // Deleting the object now leaves the seed's project, group and network alone.
    w.delete(&obj, &mut st.clone(), fed(&obj)).await.unwrap();
    assert_eq!(w.fake.writes(), 0, "{:?}", w.fake.write_calls());
    assert!(w.group("my-project-example-com-users").await.is_some());
    w.config.adopt_legacy = true;
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    assert_eq!(st.project_id.as_deref(), Some(p.id.as_str()));
    assert_eq!(st.group_id.as_deref(), Some(g.id.as_str()));
    assert_eq!(st.adopted, Some(false));
    assert_eq!(st.networks[0].network_id.as_deref(), Some(n.id.as_str()));
    let owner = w.env(&obj).owner;
    assert_eq!(
        owner.classify_tags(&w.project(&p.id).await.unwrap().tags),
        crate::ownership::Ownership::Ours
    );
    // Created by the seed for this object: deleting the object deletes it, as the seed did.
    w.delete(&obj, &mut st, fed(&obj)).await.unwrap();
    assert!(w.project(&p.id).await.is_none());
    assert!(w.group("my-project-example-com-users").await.is_none());
}

#[tokio::test]
async fn network_quota_usage_counts_what_the_pass_built() {
    // Quotas are read before the pass builds networks and security groups; the usage in
    // status must still include them once the pass is done.
    let w = World::new().await;
    let obj = from_yaml(BIG, "uid-usage");
    let mut st = OpenstackProjectStatus::default();
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    let pid = st.project_id.clone().unwrap();
    let q = w.cloud.network.get_network_quota(&pid).await.unwrap();
    for (key, os) in [
        ("network.networks", "network"),
        ("network.subnets", "subnet"),
        ("network.routers", "router"),
        ("network.securityGroups", "security_group"),
        ("network.securityGroupRules", "security_group_rule"),
    ] {
        assert!(q[os].in_use > 0, "{os} is used: {q:?}");
        assert_eq!(st.quota_usage[key].in_use, q[os].in_use, "{key}");
    }
    // A pass that builds nothing reads the quotas once, as before.
    w.fake.reset_calls();
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    assert_eq!(w.fake.writes(), 0, "{:?}", w.fake.write_calls());
}

/// The rules of all of a project's groups; (group name, rule key) pairs with repeats kept.
async fn rule_keys(
    w: &World,
    st: &OpenstackProjectStatus,
) -> Vec<(String, security_groups::RuleKey)> {
    let mut out = Vec::new();
    for g in &st.security_groups {
        let id = g.id.clone().unwrap();
        for r in w
            .cloud
            .network
            .list_security_group_rules(&id)
            .await
            .unwrap()
        {
            out.push((g.name.clone(), security_groups::RuleKey::observed(&r)));
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn rules_of_each_group_are_created_in_one_bulk_request() {
    let w = World::new().await;
    let obj = from_yaml(BIG, "uid-bulk");
    let mut st = OpenstackProjectStatus::default();
    let res = w.pass(&obj, &mut st, fed(&obj)).await;
    assert!(res.is_ok(), "{res:?}");
    // One request per group (Neutron refuses a bulk spanning groups).
    assert_eq!(w.fake.call_count("network.create_security_group_rules"), 3);
    assert_eq!(w.fake.call_count("network.create_security_group_rule"), 0);
    // 10 spec rules plus Neutron's two default egress rules of each of the three groups.
    let keys = rule_keys(&w, &st).await;
    assert_eq!(keys.len(), 10 + 3 * 2, "{keys:?}");
    assert_all_true(&st);
}

#[tokio::test]
async fn a_lost_bulk_rule_response_creates_nothing_twice() {
    let w = World::new().await;
    let obj = from_yaml(BIG, "uid-bulk-lost");
    w.fake
        .lose_next_response("network.create_security_group_rules", 1);
    let mut st = OpenstackProjectStatus::default();
    let first = w.pass(&obj, &mut st, fed(&obj)).await;
    assert!(
        first.is_err(),
        "the lost response fails the pass: {first:?}"
    );
    let res = w.converge(&obj, &mut st, 3).await;
    assert!(res.is_ok(), "{res:?}");
    // The next pass found the rules the lost request made: no second create of any kind.
    assert_eq!(w.fake.call_count("network.create_security_group_rules"), 3);
    assert_eq!(w.fake.call_count("network.create_security_group_rule"), 0);
    let keys = rule_keys(&w, &st).await;
    let unique: BTreeSet<_> = keys.iter().cloned().collect();
    assert_eq!(keys.len(), unique.len(), "no duplicate rule: {keys:?}");
    assert_eq!(keys.len(), 16);
    assert_all_true(&st);
}

#[tokio::test]
async fn a_refused_bulk_falls_back_to_single_creates() {
    let w = World::new().await;
    let obj = from_yaml(BIG, "uid-bulk-conflict");
    // As if another writer created one of the rules between our list and our create.
    w.fake.fail_next(
        "network.create_security_group_rules",
        1,
        openstack::Error::conflict("Security group rule already exists."),
    );
    let mut st = OpenstackProjectStatus::default();
    let res = w.pass(&obj, &mut st, fed(&obj)).await;
    assert!(res.is_ok(), "{res:?}");
    // The refused group's rules (web: 4, or 3 for another group) were created one by one.
    let singles = w.fake.call_count("network.create_security_group_rule");
    assert!((3..=4).contains(&singles), "{singles}");
    assert_eq!(w.fake.call_count("network.create_security_group_rules"), 3);
    assert_eq!(rule_keys(&w, &st).await.len(), 16);
    assert_all_true(&st);
}

/// What the periodic drift check finds for `obj` with `status` (one snapshot of the cloud).
async fn drift_of(
    w: &World,
    obj: &OpenstackProject,
    status: &OpenstackProjectStatus,
) -> Vec<String> {
    let mut obj = obj.clone();
    obj.status = Some(status.clone());
    let obj = Arc::new(obj);
    let inv = drift::snapshot(&w.cloud, &w.config.cluster_id, std::slice::from_ref(&obj))
        .await
        .unwrap();
    drift::drift(&obj, &inv, &w.env(&obj).owner, &w.config)
}

#[tokio::test]
async fn a_rule_a_subnet_and_a_role_assignment_removed_by_hand_come_back() {
    let w = World::new().await;
    let obj = from_yaml(BIG, "uid-drift");
    let mut st = OpenstackProjectStatus::default();
    let res = w.converge(&obj, &mut st, 3).await;
    assert!(res.is_ok(), "{res:?}");
    let pid = st.project_id.clone().unwrap();
    let rules_before = rule_keys(&w, &st).await;
    let grants_before = w.grants(&pid).await;
    let (_, subnets_before, _) = w.networks(&pid).await;
    assert_eq!(
        drift_of(&w, &obj, &st).await,
        Vec::<String>::new(),
        "converged: no drift"
    );

    // By hand: a rule of the first group, the first network's subnet (detached from its
    // router first, as Neutron requires), the project group's role assignment.
    let net = &w.cloud.network;
    let gid = st.security_groups[0].id.clone().unwrap();
    let rule = net
        .list_security_group_rules(&gid)
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.direction == "ingress")
        .unwrap();
    net.delete_security_group_rule(&rule.id).await.unwrap();
    let entry = st.networks[0].clone();
    let (router, subnet) = (entry.router_id.unwrap(), entry.subnet_id.unwrap());
    net.remove_router_interface(&router, &subnet).await.unwrap();
    net.delete_subnet(&subnet).await.unwrap();
    let group = Actor::Group(st.group_id.clone().unwrap());
    let role = w
        .cloud
        .identity
        .list_project_role_assignments(&pid)
        .await
        .unwrap()
        .into_iter()
        .find(|a| a.actor == group)
        .unwrap();
    w.cloud
        .identity
        .revoke_project_role(&pid, &group, &role.role_id)
        .await
        .unwrap();
    assert_ne!(rule_keys(&w, &st).await, rules_before);
    assert_ne!(w.grants(&pid).await, grants_before);

    // The drift check sees all three, each on its own.
    let found = drift_of(&w, &obj, &st).await;
    assert!(
        found
            .iter()
            .any(|r| r.contains("security group \"web\": 1 rule(s) missing")),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|r| r.contains("network \"front\": subnet missing")),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|r| r.contains("role assignment") && r.contains("is missing")),
        "{found:?}"
    );

    // The next (resync) pass puts all three back.
    let res = w.pass(&obj, &mut st, fed(&obj)).await;
    assert!(res.is_ok(), "{res:?}");
    assert_eq!(rule_keys(&w, &st).await, rules_before);
    assert_eq!(w.grants(&pid).await, grants_before);
    let (_, subnets_after, routers) = w.networks(&pid).await;
    assert_eq!(subnets_after.len(), subnets_before.len());
    let new_subnet = st.networks[0].subnet_id.clone().unwrap();
    assert_ne!(new_subnet, subnet);
    assert!(subnets_after.iter().any(|s| s.id == new_subnet));
    let attached = net
        .list_router_interfaces(&router)
        .await
        .unwrap()
        .iter()
        .any(|p| {
            p.fixed_ips
                .iter()
                .any(|ip| ip.subnet_id.as_deref() == Some(new_subnet.as_str()))
        });
    assert!(
        attached,
        "the new subnet is on the router again: {routers:?}"
    );
    assert_all_true(&st);
    assert_eq!(
        drift_of(&w, &obj, &st).await,
        Vec::<String>::new(),
        "repaired: no drift"
    );
}

#[tokio::test]
async fn the_drift_check_finds_each_kind_of_change_by_hand() {
    let w = World::new().await;
    let obj = from_yaml(BIG, "uid-drift-kinds");
    let mut st = OpenstackProjectStatus::default();
    let res = w.converge(&obj, &mut st, 3).await;
    assert!(res.is_ok(), "{res:?}");
    let pid = st.project_id.clone().unwrap();
    let (id, net) = (&w.cloud.identity, &w.cloud.network);
    assert!(drift_of(&w, &obj, &st).await.is_empty());

    // An extra rule in a group of ours.
    let gid = st.security_groups[1].id.clone().unwrap();
    let extra = net
        .create_security_group_rule(&SecurityGroupRuleCreate {
            security_group_id: gid,
            direction: "ingress".into(),
            ethertype: "IPv4".into(),
            protocol: Some("tcp".into()),
            port_range_min: Some(3306),
            port_range_max: Some(3306),
            ..Default::default()
        })
        .await
        .unwrap();
    let found = drift_of(&w, &obj, &st).await;
    assert!(
        found
            .iter()
            .any(|r| r.contains("\"bastion\": 0 rule(s) missing, 1 extra")),
        "{found:?}"
    );
    net.delete_security_group_rule(&extra.id).await.unwrap();
    assert!(drift_of(&w, &obj, &st).await.is_empty());

    // A quota changed by hand (Nova, read per project; Neutron, from the one list).
    w.cloud
        .compute
        .update_compute_quota(&pid, &[("cores".to_string(), 1)].into_iter().collect())
        .await
        .unwrap();
    w.cloud
        .network
        .update_network_quota(&pid, &[("router".to_string(), 1)].into_iter().collect())
        .await
        .unwrap();
    let found = drift_of(&w, &obj, &st).await;
    assert!(
        found
            .iter()
            .any(|r| r.contains("compute quota keys differ: [\"cores\"]")),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|r| r.contains("network quota keys differ: [\"router\"]")),
        "{found:?}"
    );
    assert!(w.pass(&obj, &mut st, fed(&obj)).await.is_ok());
    assert!(drift_of(&w, &obj, &st).await.is_empty());

    // The project's description, a grant added by hand, the router's interface.
    id.update_project(
        &pid,
        &ProjectUpdate {
            description: Some("changed by hand".into()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let reader = id.find_role("reader").await.unwrap().unwrap().id;
    let alice = w.user("alice@example.com").await;
    id.grant_project_role(&pid, &alice, &reader).await.unwrap();
    let entry = st.networks[2].clone();
    net.remove_router_interface(
        entry.router_id.as_deref().unwrap(),
        entry.subnet_id.as_deref().unwrap(),
    )
    .await
    .unwrap();
    let found = drift_of(&w, &obj, &st).await;
    assert!(
        found
            .iter()
            .any(|r| r.contains("Keystone project") && r.contains("differs")),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|r| r.contains("assignment(s) of managed roles")),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|r| r.contains("network \"mgmt\": router interface missing")),
        "{found:?}"
    );
    assert!(w.pass(&obj, &mut st, fed(&obj)).await.is_ok());
    assert!(drift_of(&w, &obj, &st).await.is_empty());

    // Gone altogether: the project group, a network of ours.
    id.delete_group(st.group_id.as_deref().unwrap())
        .await
        .unwrap();
    let found = drift_of(&w, &obj, &st).await;
    assert!(
        found.iter().any(|r| r.contains("project group")),
        "{found:?}"
    );
}

#[tokio::test]
async fn the_drift_check_reads_per_cluster_not_per_tenant() {
    let w = World::new().await;
    let mut objs = Vec::new();
    for i in 0..3 {
        let mut obj = from_yaml(BIG, &format!("uid-scale-{i}"));
        obj.spec.name = format!("big{i}.example.com");
        obj.spec.federation_ref = None;
        let mut st = OpenstackProjectStatus::default();
        let res = w.converge(&obj, &mut st, 3).await;
        assert!(res.is_ok(), "{res:?}");
        obj.status = Some(st);
        objs.push(Arc::new(obj));
    }
    let mut calls = Vec::new();
    for n in [1, 3] {
        w.fake.reset_calls();
        let inv = drift::snapshot(&w.cloud, &w.config.cluster_id, &objs[..n])
            .await
            .unwrap();
        for o in &objs[..n] {
            assert!(drift::drift(o, &inv, &w.env(o).owner, &w.config).is_empty());
        }
        assert_eq!(w.fake.writes(), 0);
        calls.push(w.fake.calls());
    }
    // Every call but Nova's and Cinder's quota reads is made once, whatever the number of
    // projects; those two are made once per project (the APIs have no list).
    let per_tenant = [
        "compute.get_compute_quota",
        "block_storage.get_volume_quota",
    ];
    for (op, n) in &calls[1] {
        if per_tenant.contains(&op.as_str()) {
            assert_eq!(*n, 3, "{op}: {calls:?}");
            assert_eq!(calls[0].get(op), Some(&1), "{op}: {calls:?}");
        } else {
            assert_eq!(
                calls[0].get(op),
                Some(n),
                "{op} is made once per check: {calls:?}"
            );
        }
    }
    assert_eq!(calls[0].len(), calls[1].len(), "{calls:?}");
}

#[test]
fn a_ready_domain_unblocks_only_its_waiting_projects() {
    let mut waiting = from_yaml(SEED_README, "uid-wait");
    waiting.status = Some(OpenstackProjectStatus {
        phase: Some(api::Phase::Pending),
        conditions: vec![api::Condition::new(
            "Ready",
            false,
            "WaitingForDependency",
            "domain sso-users not found",
        )],
        ..Default::default()
    });
    let waiting = Arc::new(waiting);
    // Its first pass is under way or queued: a domain event adds nothing.
    let mut creating = from_yaml(SEED_README, "uid-new");
    creating.metadata.name = Some("new".into());
    let mut provisioning = from_yaml(SEED_README, "uid-prov");
    provisioning.metadata.name = Some("provisioning".into());
    provisioning.status = Some(OpenstackProjectStatus {
        phase: Some(api::Phase::Provisioning),
        ..Default::default()
    });
    let mut ready = from_yaml(SEED_README, "uid-ready");
    ready.metadata.name = Some("ready".into());
    ready.status = Some(OpenstackProjectStatus {
        conditions: vec![api::Condition::new("Ready", true, "InSync", "ok")],
        ..Default::default()
    });
    let mut elsewhere = from_yaml(SEED_README, "uid-else");
    elsewhere.metadata.name = Some("elsewhere".into());
    elsewhere.spec.domain = "other".into();
    let projects = vec![
        waiting.clone(),
        Arc::new(creating),
        Arc::new(provisioning),
        Arc::new(ready),
        Arc::new(elsewhere),
    ];
    let mut domain: api::OpenstackDomain = serde_json::from_value(serde_json::json!({
        "apiVersion": "sunet.se/v1alpha1",
        "kind": "OpenstackDomain",
        "metadata": {"name": "sso"},
        "spec": {"name": "sso-users", "description": "", "enabled": true}
    }))
    .unwrap();
    // Not Ready yet: nothing to do for anyone.
    assert!(projects_waiting_for(&domain, &projects).is_empty());
    domain.status = Some(api::domain::OpenstackDomainStatus {
        domain_id: Some("d1".into()),
        conditions: vec![api::Condition::new("Ready", true, "Created", "ok")],
        ..Default::default()
    });
    let refs = projects_waiting_for(&domain, &projects);
    assert_eq!(
        refs,
        vec![kube::runtime::reflector::ObjectRef::from_obj(
            waiting.as_ref()
        )]
    );
}

#[tokio::test]
async fn the_pass_that_creates_the_project_skips_the_reads_nothing_can_answer() {
    let w = World::new().await;
    let obj = from_yaml(BIG, "uid-fresh");
    let mut st = OpenstackProjectStatus::default();
    let res = w.pass(&obj, &mut st, fed(&obj)).await;
    assert!(res.is_ok(), "{res:?}");
    assert_all_true(&st);
    // Nothing can exist yet in a project made in this very pass.
    let skipped = [
        "identity.list_project_role_assignments",
        "identity.list_group_users",
        "network.list_subnets",
        "network.list_routers",
        "network.list_security_groups",
        "compute.get_compute_quota",
        "block_storage.get_volume_quota",
    ];
    for op in skipped {
        assert_eq!(w.fake.call_count(op), 0, "{op}: {:?}", w.fake.calls());
    }
    // The project group is not looked up by name (the bound group `auditors` and the role
    // group of `reader` are: those may outlive a project deleted by hand).
    assert_eq!(
        w.fake.call_count("identity.find_group"),
        2,
        "{:?}",
        w.fake.calls()
    );
    // The next pass reads everything and writes nothing.
    w.fake.reset_calls();
    let res = w.pass(&obj, &mut st, fed(&obj)).await;
    assert!(res.is_ok(), "{res:?}");
    assert_eq!(w.fake.writes(), 0, "{:?}", w.fake.calls());
    for op in skipped {
        assert!(w.fake.call_count(op) >= 1, "{op}: {:?}", w.fake.calls());
    }
}

/// A small federated project `p{i}.example.com` (no networks).
fn federated(i: usize) -> OpenstackProject {
    let mut obj = from_yaml(SEED_README, &format!("uid-batch{i}"));
    obj.spec.name = format!("p{i}.example.com");
    obj.spec.networks = None;
    obj
}

/// A pass (`delete` false) or a deletion of one project, with its federation input.
struct Job {
    obj: OpenstackProject,
    status: OpenstackProjectStatus,
    fed: FederationInput,
    delete: bool,
}

impl Job {
    fn pass(obj: OpenstackProject, status: OpenstackProjectStatus) -> Self {
        let fed = fed(&obj);
        Job {
            obj,
            status,
            fed,
            delete: false,
        }
    }
}

/// Runs `jobs` so that their federation steps form one batch of satosa's mapping, queued in
/// the order given: the mapping lock is held until every job waits for it (the jobs' other
/// areas run first), each job started once the one before it waits. The calls are counted
/// from the moment all wait, so they are the batch's alone. Each job's result and status, in
/// order.
async fn in_one_batch(w: &Arc<World>, jobs: Vec<Job>) -> Vec<(Result<()>, OpenstackProjectStatus)> {
    let probe = federated(0);
    let lock = w.locks.lock_for("mapping/satosa");
    let guard = lock.lock().await;
    let mut tasks = Vec::new();
    for (i, mut j) in jobs.into_iter().enumerate() {
        let w2 = w.clone();
        tasks.push(tokio::spawn(async move {
            let res = if j.delete {
                w2.delete(&j.obj, &mut j.status, j.fed).await
            } else {
                w2.pass(&j.obj, &mut j.status, j.fed).await.map(|_| ())
            };
            (res, j.status)
        }));
        // Not a timer: the pass runs whenever this task yields; the bound makes a pass that
        // never reaches the mapping fail the test instead of hanging it.
        let mut spins = 0;
        while federation::pending(&w.env(&probe), "satosa") <= i {
            spins += 1;
            assert!(spins < 100_000, "pass {i} never queued for the mapping");
            tokio::task::yield_now().await;
        }
    }
    w.fake.reset_calls();
    drop(guard);
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test]
async fn projects_arriving_together_read_and_write_the_mapping_once() {
    let w = Arc::new(World::new().await);
    let jobs = (1..=5)
        .map(|i| Job::pass(federated(i), Default::default()))
        .collect();
    let done = in_one_batch(&w, jobs).await;
    // The first batch of a new IdP: every shared object read once and made once.
    for (op, n) in [
        ("identity.get_mapping", 1),
        ("identity.create_mapping", 1),
        ("identity.update_mapping", 0),
        ("identity.get_identity_provider", 1),
        ("identity.create_identity_provider", 1),
        ("identity.get_federation_protocol", 1),
        ("identity.create_federation_protocol", 1),
    ] {
        assert_eq!(w.fake.call_count(op), n, "{op}: {:?}", w.fake.calls());
    }
    assert_eq!(w.fake.writes(), 3, "{:?}", w.fake.write_calls());
    // Each project got its own outcome: ready, its own rule recorded.
    for (i, (res, st)) in done.iter().enumerate() {
        assert!(res.is_ok(), "{res:?}");
        assert!(cond(st, FEDERATION_READY).is_true(), "{st:?}");
        let group = format!("p{}-example-com-users", i + 1);
        assert_eq!(
            st.federation_rule.as_ref().map(|r| r.group.as_str()),
            Some(group.as_str())
        );
        assert!(
            cond(st, FEDERATION_READY)
                .message
                .as_deref()
                .is_some_and(|m| m.contains(&group)),
            "{st:?}"
        );
    }
    let rules = w.mapping().await.unwrap().rules.to_value().unwrap();
    assert_eq!(rules.as_array().map(Vec::len), Some(5));
    for (i, rule) in rules.as_array().into_iter().flatten().enumerate() {
        let group = format!("p{}-example-com-users", i + 1);
        assert!(
            federation::is_project_rule(rule, &group, "sso-users"),
            "{rule}"
        );
    }

    // A second batch onto the existing mapping: one read, one update; the IdP and protocol
    // are read once and left alone.
    let jobs = (6..=9)
        .map(|i| Job::pass(federated(i), Default::default()))
        .collect();
    for (res, _) in in_one_batch(&w, jobs).await {
        assert!(res.is_ok(), "{res:?}");
    }
    for (op, n) in [
        ("identity.get_mapping", 1),
        ("identity.update_mapping", 1),
        ("identity.get_identity_provider", 1),
        ("identity.get_federation_protocol", 1),
    ] {
        assert_eq!(w.fake.call_count(op), n, "{op}: {:?}", w.fake.calls());
    }
    assert_eq!(w.fake.writes(), 1, "{:?}", w.fake.write_calls());
    assert_eq!(Some(w.mapping().await.unwrap().rules.len()), Some(9));
}

#[tokio::test]
async fn a_deletion_and_an_addition_in_one_batch_both_land() {
    let w = Arc::new(World::new().await);
    let old = federated(1);
    let mut old_st = OpenstackProjectStatus::default();
    w.pass(&old, &mut old_st, fed(&old)).await.unwrap();
    assert!(old_st.federation_rule.is_some());
    let gone = Job {
        fed: fed(&old),
        obj: old,
        status: old_st,
        delete: true,
    };
    let done = in_one_batch(&w, vec![gone, Job::pass(federated(2), Default::default())]).await;
    for (res, _) in &done {
        assert!(res.is_ok(), "{res:?}");
    }
    assert!(done[0].1.federation_rule.is_none(), "{:?}", done[0].1);
    assert!(done[1].1.federation_rule.is_some(), "{:?}", done[1].1);
    // One write: the deleted project's rule out, the new one's in; the mapping stays.
    assert_eq!(w.fake.call_count("identity.get_mapping"), 1);
    assert_eq!(w.fake.call_count("identity.update_mapping"), 1);
    assert_eq!(w.fake.call_count("identity.delete_mapping"), 0);
    let rules = w.mapping().await.unwrap().rules.to_value().unwrap();
    assert_eq!(rules.as_array().map(Vec::len), Some(1));
    assert!(federation::is_project_rule(
        &rules[0],
        "p2-example-com-users",
        "sso-users"
    ));

    // Deleting the last project and one that never had a rule: the mapping goes, and with it
    // the protocol and the IdP we created.
    let last = federated(2);
    let jobs = vec![
        Job {
            fed: fed(&last),
            obj: last,
            status: done[1].1.clone(),
            delete: true,
        },
        Job {
            fed: fed(&federated(3)),
            obj: federated(3),
            status: Default::default(),
            delete: true,
        },
    ];
    for (res, _) in in_one_batch(&w, jobs).await {
        assert!(res.is_ok(), "{res:?}");
    }
    assert_eq!(w.fake.call_count("identity.get_mapping"), 1);
    assert_eq!(w.fake.call_count("identity.delete_mapping"), 1);
    assert!(w.mapping().await.is_none());
    assert!(
        w.cloud
            .identity
            .get_identity_provider("satosa")
            .await
            .optional()
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn projects_of_another_idp_never_wait_for_a_batch() {
    let w = Arc::new(World::new().await);
    let probe = federated(0);
    let lock = w.locks.lock_for("mapping/satosa");
    let guard = lock.lock().await;
    // satosa's batch cannot run (its lock is held): a keycloak project still converges.
    let obj = federated(1);
    let mut st = OpenstackProjectStatus::default();
    let mut input = fed(&obj);
    if let FederationInput::Settings(s) = &mut input {
        s.idp = "keycloak".into();
    }
    w.pass(&obj, &mut st, input).await.unwrap();
    assert_eq!(federation::pending(&w.env(&probe), "satosa"), 0);
    assert_eq!(federation::pending(&w.env(&probe), "keycloak"), 0);
    drop(guard);
    let k = w
        .cloud
        .identity
        .get_mapping("keycloak_oidc_mapping")
        .await
        .unwrap();
    assert_eq!(k.rules.len(), 1);
    assert!(w.mapping().await.is_none());
}

#[tokio::test]
async fn a_failed_read_or_lost_write_fails_the_whole_batch_and_the_next_converges() {
    let w = Arc::new(World::new().await);
    let n = 3;
    let jobs = |sts: Vec<OpenstackProjectStatus>| -> Vec<Job> {
        sts.into_iter()
            .enumerate()
            .map(|(i, st)| Job::pass(federated(i + 1), st))
            .collect()
    };
    // The mapping cannot be read: every project of the batch fails, each naming its own
    // ConfigMap and the mapping, and nothing is written.
    w.fake.fail_next(
        "identity.get_mapping",
        1,
        openstack::Error::Transient {
            message: "injected".into(),
        },
    );
    let done = in_one_batch(&w, jobs(vec![Default::default(); n])).await;
    for (res, st) in &done {
        assert!(res.is_err(), "{res:?}");
        let m = cond(st, FEDERATION_READY)
            .message
            .clone()
            .unwrap_or_default();
        assert!(
            m.contains("spec.federationRef (ConfigMap demo/federation-config): reading mapping satosa_oidc_mapping"),
            "{m}"
        );
    }
    assert_eq!(w.fake.writes(), 0, "{:?}", w.fake.write_calls());
    // The write lands but its response is lost: every project fails and retries.
    w.fake.lose_next_response("identity.create_mapping", 1);
    let done = in_one_batch(&w, jobs(done.into_iter().map(|(_, st)| st).collect())).await;
    for (res, st) in &done {
        assert!(res.is_err(), "{res:?}");
        assert!(!cond(st, FEDERATION_READY).is_true(), "{st:?}");
    }
    assert_eq!(w.fake.call_count("identity.create_mapping"), 1);
    assert_eq!(Some(w.mapping().await.unwrap().rules.len()), Some(n));
    // The next batch reads the rules back and finds them in: no second write of the
    // mapping; the protocol the failed batch never reached is made once.
    let done = in_one_batch(&w, jobs(done.into_iter().map(|(_, st)| st).collect())).await;
    for (res, st) in &done {
        assert!(res.is_ok(), "{res:?}");
        assert!(cond(st, FEDERATION_READY).is_true(), "{st:?}");
    }
    for (op, count) in [
        ("identity.create_mapping", 0),
        ("identity.update_mapping", 0),
        ("identity.create_identity_provider", 0),
        ("identity.create_federation_protocol", 1),
    ] {
        assert_eq!(w.fake.call_count(op), count, "{op}: {:?}", w.fake.calls());
    }
    assert_eq!(Some(w.mapping().await.unwrap().rules.len()), Some(n));
}

#[tokio::test]
async fn a_project_whose_idp_step_fails_keeps_its_rule_out_of_the_batch() {
    let w = Arc::new(World::new().await);
    // A tenant's own ConfigMap may not create the IdP: that project waits for an
    // administrator, while a trusted project of the same batch creates it and is mapped.
    let tenant = federated(1);
    let tenant_input = tenant_fed("https://idp.example.com", "sso-users");
    let jobs = vec![
        Job {
            obj: tenant,
            status: Default::default(),
            fed: tenant_input,
            delete: false,
        },
        Job::pass(federated(2), Default::default()),
    ];
    let done = in_one_batch(&w, jobs).await;
    let (res, st) = &done[0];
    assert!(
        matches!(res, Err(ReconcileError::DependencyMissing(m)) if m.contains("identity provider \"satosa\"")),
        "{res:?}"
    );
    assert!(!cond(st, FEDERATION_READY).is_true());
    assert!(done[1].0.is_ok(), "{:?}", done[1].0);
    let rules = w.mapping().await.unwrap().rules.to_value().unwrap();
    assert_eq!(rules.as_array().map(Vec::len), Some(1));
    assert!(federation::is_project_rule(
        &rules[0],
        "p2-example-com-users",
        "sso-users"
    ));
}

/// The plan's port on the project reconcile itself: a pass on the dry-run view of a cloud
/// lists the writes a real pass makes and sends none; once converged it lists none; an edit
/// lists exactly the edit, and a real pass then makes what it listed.
#[tokio::test]
async fn a_dry_run_pass_lists_the_writes_of_a_real_one_and_sends_none() {
    use openstack::dry_run::{Op, dry_run};
    let w = World::new().await;
    let obj = from_yaml(BIG, "uid-plan");
    let (plan_cloud, journal) = dry_run(w.cloud.clone());
    let plan_env = |obj: &OpenstackProject| Env {
        cloud: &plan_cloud,
        config: &w.config,
        owner: Owner {
            cluster: w.config.cluster_id.clone(),
            uid: obj.metadata.uid.clone().unwrap_or_default(),
        },
        locks: &w.locks,
    };

    // An empty cloud: everything is to create, nothing is written.
    let mut planned = OpenstackProjectStatus::default();
    let out = reconcile_project(&plan_env(&obj), &obj, &mut planned, fed(&obj)).await;
    assert!(out.result.is_ok(), "{:?}", out.result);
    let intents = journal.take();
    assert_eq!(w.fake.writes(), 0, "{:?}", w.fake.write_calls());
    let kinds = |op: Op| -> Vec<&str> {
        intents
            .iter()
            .filter(|i| i.op == op)
            .map(|i| i.kind)
            .collect()
    };
    let creates = kinds(Op::Create);
    for k in [
        "project",
        "group",
        "network",
        "subnet",
        "router",
        "security group",
    ] {
        assert!(creates.contains(&k), "no {k} in {creates:?}");
    }
    assert_eq!(creates.iter().filter(|k| **k == "network").count(), 3);
    assert_eq!(
        creates.iter().filter(|k| **k == "security group").count(),
        3
    );
    assert!(kinds(Op::Delete).is_empty(), "{intents:?}");

    // A real pass makes (at least) what the plan listed.
    let mut st = OpenstackProjectStatus::default();
    w.pass(&obj, &mut st, fed(&obj)).await.unwrap();
    let real_writes = w.fake.writes();
    assert!(real_writes as usize >= intents.len() / 2, "{real_writes}");
    w.fake.reset_calls();

    // Converged: the plan is empty.
    let mut again = st.clone();
    reconcile_project(&plan_env(&obj), &obj, &mut again, fed(&obj))
        .await
        .result
        .unwrap();
    assert_eq!(journal.take(), vec![], "a converged project plans no write");

    // An edit: one rule fewer, a quota changed, bob out of the binding.
    let edited = BIG
        .replace(
            "        - {direction: ingress, protocol: tcp, portRangeMin: 80, portRangeMax: 80, remoteIpPrefix: \"0.0.0.0/0\"}\n",
            "",
        )
        .replace("cores: 40", "cores: 24")
        .replace("users: [alice@example.com, bob@example.com]", "users: [alice@example.com]");
    let obj2 = from_yaml(&edited, "uid-plan");
    let mut planned = st.clone();
    reconcile_project(&plan_env(&obj2), &obj2, &mut planned, fed(&obj2))
        .await
        .result
        .unwrap();
    let intents = journal.take();
    assert_eq!(w.fake.writes(), 0, "{:?}", w.fake.write_calls());
    let summary: Vec<(Op, &str, String)> = intents
        .iter()
        .map(|i| (i.op, i.kind, i.label.clone()))
        .collect();
    assert!(
        summary.contains(&(
            Op::Delete,
            "security group rule",
            "ingress IPv4 tcp port 80 from 0.0.0.0/0".to_string()
        )),
        "{summary:?}"
    );
    let quota = intents
        .iter()
        .find(|i| i.kind == "compute quota")
        .expect("a compute quota change");
    assert_eq!(quota.op, Op::Update);
    assert_eq!(
        quota
            .changes
            .iter()
            .map(|c| (c.field.as_str(), c.old.clone(), c.new.clone()))
            .collect::<Vec<_>>(),
        vec![(
            "cores",
            Some(serde_json::json!(40)),
            Some(serde_json::json!(24))
        )]
    );
    assert!(
        intents
            .iter()
            .any(|i| i.op == Op::Delete && i.label.contains("bob@example.com")),
        "{summary:?}"
    );
    // Applying makes exactly the listed writes converge: the next plan is empty.
    w.pass(&obj2, &mut st, fed(&obj2)).await.unwrap();
    let mut after = st.clone();
    reconcile_project(&plan_env(&obj2), &obj2, &mut after, fed(&obj2))
        .await
        .result
        .unwrap();
    assert_eq!(journal.take(), vec![]);
}

#[tokio::test]
async fn the_tenant_credentials_user_keeps_its_role_and_is_no_drift() {
    let w = World::new().await;
    let obj = from_yaml(BIG, "uid-tenant-credential-user");
    let mut st = OpenstackProjectStatus::default();
    let res = w.converge(&obj, &mut st, 3).await;
    assert!(res.is_ok(), "{res:?}");
    let pid = st.project_id.clone().unwrap();
    let id = &w.cloud.identity;
    // The user the tenant credential area made and granted (a user of the fake stands in).
    let user = w.user("alice@example.com").await;
    let Actor::User(uid) = user.clone() else {
        unreachable!()
    };
    let member = id.find_role("member").await.unwrap().unwrap().id;
    id.grant_project_role(&pid, &user, &member).await.unwrap();
    // Unrecorded, it is a grant by hand: drift, revoked by the next pass.
    assert!(!drift_of(&w, &obj, &st).await.is_empty());
    st.application_credential = Some(api::project::TenantCredentialStatus {
        user_id: Some(uid),
        ..Default::default()
    });
    assert!(drift_of(&w, &obj, &st).await.is_empty());
    assert!(w.pass(&obj, &mut st, fed(&obj)).await.is_ok());
    assert!(
        w.grants(&pid)
            .await
            .contains(&(user.clone(), "member".to_string())),
        "the bindings revoked the tenant credentials' role"
    );
}
