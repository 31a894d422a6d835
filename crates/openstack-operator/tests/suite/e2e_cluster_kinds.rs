//! End to end: the cluster-scoped kinds (OpenstackDomain, OpenstackFlavor, OpenstackImage,
//! OpenstackNetwork) against the real binary, a Kubernetes API and an OpenStack cloud:
//! create → Ready, OpenStack checked field by field, spec edits, drift, deletion.

use std::time::Duration;

use anyhow::Context as _;
use api::naming::MANAGED_TAG;
use api::{OpenstackDomain, OpenstackFlavor, OpenstackImage, OpenstackNetwork};
use e2e::env::{CLUSTER_TAG_PREFIX, FLAVOR_OWNER_SPEC};
use e2e::{EnvOptions, TestEnv};
use openstack::model::{AllocationPool, DomainUpdate, ImageStatus, SubnetFilter};

const BIN: &str = env!("CARGO_BIN_EXE_openstack-operator");
/// Time for a reconcile that creates or changes OpenStack objects.
const READY: Duration = Duration::from_secs(90);
/// Time for an image import (download + Glance processing).
const IMPORT: Duration = Duration::from_secs(180);

async fn env(test: &str) -> anyhow::Result<TestEnv> {
    TestEnv::start(test, EnvOptions::new(BIN, &format!("cluster_kinds-{test}"))).await
}

fn assert_marked(tags: &[String], env: &TestEnv, what: &str) {
    assert!(
        tags.iter().any(|t| t == MANAGED_TAG),
        "{what} carries {MANAGED_TAG}: {tags:?}"
    );
    let cluster = format!("{CLUSTER_TAG_PREFIX}{}", env.operator.cluster_id());
    assert!(
        tags.contains(&cluster),
        "{what} carries {cluster}: {tags:?}"
    );
}

fn not_found<T: std::fmt::Debug>(r: Result<T, openstack::Error>, what: &str) {
    match r {
        Err(e) if e.is_not_found() => {}
        other => panic!("{what} should be gone (NotFound), got {other:?}"),
    }
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn domain_create_edit_drift_delete() -> anyhow::Result<()> {
    env("domain")
        .await?
        .run(async |env| {
            let name = env.unique("dom");
            env.apply(&domain_yaml(&name, "Domain for SSO-authenticated users"))
                .await?;
            let d: OpenstackDomain = env.wait_ready(&name, READY).await?;
            let id = d
                .status
                .as_ref()
                .and_then(|s| s.domain_id.clone())
                .context("status.domainId after Ready")?;
            assert_eq!(
                d.status.as_ref().and_then(|s| s.adopted),
                Some(false),
                "status.adopted of a created domain"
            );
            let os = env.cloud.identity.get_domain(&id).await?;
            assert_eq!(os.name, name);
            assert_eq!(os.description, "Domain for SSO-authenticated users");
            assert!(os.enabled, "domain enabled");
            assert_marked(&os.tags, env, "the domain");
            env.wait_event::<OpenstackDomain>(&name, "Created", READY)
                .await?;

            // A spec edit reaches Keystone.
            env.apply(&domain_yaml(&name, "edited description")).await?;
            let d: OpenstackDomain = env.wait_ready(&name, READY).await?;
            assert_eq!(d.metadata.generation, Some(2));
            assert_eq!(
                d.status
                    .as_ref()
                    .and_then(|s| s.domain_id.clone())
                    .as_deref(),
                Some(id.as_str()),
                "same domain after an edit"
            );
            assert_eq!(
                env.cloud.identity.get_domain(&id).await?.description,
                "edited description"
            );

            // Drift: the domain is deleted behind the operator's back; a forced reconcile recreates it.
            env.cloud
                .identity
                .update_domain(
                    &id,
                    &DomainUpdate {
                        enabled: Some(false),
                        ..Default::default()
                    },
                )
                .await?;
            env.cloud.identity.delete_domain(&id).await?;
            env.request_reconcile::<OpenstackDomain>(&name).await?;
            let d: OpenstackDomain = env
                .wait_object(
                    &name,
                    READY,
                    "a new status.domainId, Ready",
                    |d: &OpenstackDomain| {
                        e2e::k8s::is_ready(d)
                            && d.status
                                .as_ref()
                                .and_then(|s| s.domain_id.as_deref())
                                .is_some_and(|n| n != id)
                    },
                )
                .await?;
            let new_id = d
                .status
                .as_ref()
                .and_then(|s| s.domain_id.clone())
                .context("status.domainId")?;
            let os = env.cloud.identity.get_domain(&new_id).await?;
            assert_eq!(
                (os.name.as_str(), os.description.as_str(), os.enabled),
                (name.as_str(), "edited description", true)
            );
            assert_marked(&os.tags, env, "the recreated domain");
            env.wait_event::<OpenstackDomain>(&name, "Recreating", READY)
                .await?;

            // Deleting the resource deletes the domain, then the finalizer goes.
            env.delete_and_wait::<OpenstackDomain>(&name, READY).await?;
            not_found(env.cloud.identity.get_domain(&new_id).await, "the domain");
            assert!(
                env.cloud.identity.find_domain(&name).await?.is_none(),
                "no domain named {name} is left"
            );
            Ok(())
        })
        .await
}

fn flavor_yaml(name: &str, ram: u32, extra_specs: &[(&str, &str)]) -> String {
    let specs: String = extra_specs
        .iter()
        .map(|(k, v)| format!("    \"{k}\": \"{v}\"\n"))
        .collect();
    format!(
        r#"
apiVersion: sunet.se/v1alpha1
kind: OpenstackFlavor
metadata:
  name: {name}
spec:
  name: {name}
  vcpus: 2
  ram: {ram}
  disk: 1
  ephemeral: 0
  swap: 0
  isPublic: true
  extraSpecs:
{specs}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flavor_create_edit_recreate_delete() -> anyhow::Result<()> {
    env("flavor")
        .await?
        .run(async |env| {
            let name = env.unique("flv");
            env.apply(&flavor_yaml(
                &name,
                512,
                &[("hw:cpu_policy", "shared"), ("hw:mem_page_size", "small")],
            ))
            .await?;
            let f: OpenstackFlavor = env.wait_ready(&name, READY).await?;
            let id = f
                .status
                .as_ref()
                .and_then(|s| s.flavor_id.clone())
                .context("status.flavorId after Ready")?;
            let os = env.cloud.compute.get_flavor(&id).await?;
            assert_eq!(os.name, name);
            assert_eq!(
                (os.vcpus, os.ram_mb, os.disk_gb, os.ephemeral_gb, os.swap_mb),
                (2, 512, 1, 0, 0),
                "vcpus, ram, disk, ephemeral, swap"
            );
            assert!(os.is_public, "isPublic");
            let specs = env.cloud.compute.get_flavor_extra_specs(&id).await?;
            assert_eq!(
                specs.get("hw:cpu_policy").map(String::as_str),
                Some("shared"),
                "extra specs {specs:?}"
            );
            assert_eq!(
                specs.get("hw:mem_page_size").map(String::as_str),
                Some("small"),
                "extra specs {specs:?}"
            );
            let mark = specs
                .get(FLAVOR_OWNER_SPEC)
                .context("ownership extra spec")?;
            assert!(
                mark.starts_with(&format!("{}/", env.operator.cluster_id())),
                "owner mark {mark}"
            );
            assert_eq!(
                specs.len(),
                3,
                "only the spec's extra specs and the mark: {specs:?}"
            );

            // Extra specs are a set: one value changes, one key goes away.
            env.apply(&flavor_yaml(&name, 512, &[("hw:cpu_policy", "dedicated")]))
                .await?;
            let f: OpenstackFlavor = env.wait_ready(&name, READY).await?;
            assert_eq!(f.metadata.generation, Some(2));
            assert_eq!(
                f.status
                    .as_ref()
                    .and_then(|s| s.flavor_id.clone())
                    .as_deref(),
                Some(id.as_str()),
                "extra specs change in place"
            );
            let specs = env.cloud.compute.get_flavor_extra_specs(&id).await?;
            assert_eq!(
                specs.get("hw:cpu_policy").map(String::as_str),
                Some("dedicated"),
                "extra specs {specs:?}"
            );
            assert!(
                !specs.contains_key("hw:mem_page_size"),
                "removed key is gone: {specs:?}"
            );
            assert!(
                specs.contains_key(FLAVOR_OWNER_SPEC),
                "mark kept: {specs:?}"
            );

            // Sizes are immutable in Nova: a RAM change replaces the flavor (new ID).
            env.apply(&flavor_yaml(&name, 1024, &[("hw:cpu_policy", "dedicated")]))
                .await?;
            let f: OpenstackFlavor = env
                .wait_object(
                    &name,
                    READY,
                    "Ready with a new status.flavorId",
                    |f: &OpenstackFlavor| {
                        e2e::k8s::is_ready(f)
                            && f.status
                                .as_ref()
                                .and_then(|s| s.flavor_id.as_deref())
                                .is_some_and(|n| n != id)
                    },
                )
                .await?;
            let new_id = f
                .status
                .as_ref()
                .and_then(|s| s.flavor_id.clone())
                .context("status.flavorId")?;
            not_found(
                env.cloud.compute.get_flavor(&id).await,
                "the replaced flavor",
            );
            let os = env.cloud.compute.get_flavor(&new_id).await?;
            assert_eq!(
                (os.name.as_str(), os.vcpus, os.ram_mb, os.disk_gb),
                (name.as_str(), 2, 1024, 1)
            );
            let specs = env.cloud.compute.get_flavor_extra_specs(&new_id).await?;
            assert_eq!(
                specs.get("hw:cpu_policy").map(String::as_str),
                Some("dedicated"),
                "extra specs of the new flavor {specs:?}"
            );
            assert!(
                specs.contains_key(FLAVOR_OWNER_SPEC),
                "new flavor marked: {specs:?}"
            );
            env.wait_event::<OpenstackFlavor>(&name, "Recreated", READY)
                .await?;

            env.delete_and_wait::<OpenstackFlavor>(&name, READY).await?;
            not_found(env.cloud.compute.get_flavor(&new_id).await, "the flavor");
            assert!(
                env.cloud.compute.find_flavor(&name).await?.is_none(),
                "no flavor named {name} is left"
            );
            Ok(())
        })
        .await
}

fn image_yaml(name: &str, url: &str, properties: &[(&str, &str)]) -> String {
    let props: String = properties
        .iter()
        .map(|(k, v)| format!("    {k}: \"{v}\"\n"))
        .collect();
    format!(
        r#"
apiVersion: sunet.se/v1alpha1
kind: OpenstackImage
metadata:
  name: {name}
spec:
  name: "{name}"
  visibility: public
  protected: false
  tags:
    - demo
    - e2e
  properties:
{props}  content:
    diskFormat: qcow2
    containerFormat: bare
    source:
      url: {url}
"#
    )
}

/// The md5 of a file of the test cloud's image server, from its `MD5SUMS`.
async fn served_md5(env: &TestEnv, file: &str) -> anyhow::Result<String> {
    let sums = String::from_utf8(e2e::http_get(&env.image_url("MD5SUMS")?).await?)?;
    sums.lines()
        .find_map(|l| {
            l.split_once(char::is_whitespace)
                .filter(|(_, f)| f.trim().trim_start_matches('*') == file)
                .map(|(h, _)| h.to_string())
        })
        .with_context(|| format!("{file} is not listed in MD5SUMS:\n{sums}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_import_edit_delete() -> anyhow::Result<()> {
    env("image")
        .await?
        .run(async |env| {
            let name = env.unique("img");
            let url = env.image_url("tiny.qcow2")?;
            let size = e2e::http_get(&url).await?.len();
            let md5 = served_md5(env, "tiny.qcow2").await?;
            env.apply(&image_yaml(
                &name,
                &url,
                &[("os_distro", "cirros"), ("e2e_note", "remove-me")],
            ))
            .await?;
            let i: OpenstackImage = env.wait_ready(&name, IMPORT).await?;
            let st = i.status.clone().context("status")?;
            let id = st.image_id.clone().context("status.imageId after Ready")?;
            assert_eq!(
                serde_json::to_value(st.upload_status)?,
                "active",
                "status.uploadStatus"
            );
            assert_eq!(
                st.checksum.as_deref(),
                Some(md5.as_str()),
                "status.checksum is the md5 of the served file"
            );
            assert_eq!(
                st.size_bytes,
                Some(i64::try_from(size)?),
                "status.sizeBytes is the served file's size"
            );
            assert_eq!(
                st.imported_from.as_deref(),
                Some(url.as_str()),
                "status.importedFrom"
            );
            let os = env.cloud.image.get_image(&id).await?;
            assert_eq!(os.name, name);
            assert_eq!(os.status, ImageStatus::Active);
            assert_eq!(os.visibility, "public");
            assert!(!os.protected, "not protected");
            assert_eq!(
                (os.disk_format.as_deref(), os.container_format.as_deref()),
                (Some("qcow2"), Some("bare"))
            );
            assert!(
                os.tags.contains(&"demo".to_string()) && os.tags.contains(&"e2e".to_string()),
                "spec tags: {:?}",
                os.tags
            );
            assert_marked(&os.tags, env, "the image");
            assert_eq!(
                os.properties.get("os_distro").map(String::as_str),
                Some("cirros"),
                "properties {:?}",
                os.properties
            );
            assert_eq!(
                os.properties.get("e2e_note").map(String::as_str),
                Some("remove-me"),
                "properties {:?}",
                os.properties
            );
            assert_eq!(
                os.checksum.as_deref(),
                Some(md5.as_str()),
                "Glance's checksum"
            );
            assert_eq!(os.size, Some(u64::try_from(size)?), "Glance's size");
            env.wait_event::<OpenstackImage>(&name, "ImportStarted", READY)
                .await?;

            // Properties are a set: removing one from the spec removes it from Glance.
            env.apply(&image_yaml(&name, &url, &[("os_distro", "cirros")]))
                .await?;
            let i: OpenstackImage = env.wait_ready(&name, READY).await?;
            assert_eq!(i.metadata.generation, Some(2));
            let os = env.cloud.image.get_image(&id).await?;
            assert!(
                !os.properties.contains_key("e2e_note"),
                "removed property is gone: {:?}",
                os.properties
            );
            assert_eq!(
                os.properties.get("os_distro").map(String::as_str),
                Some("cirros")
            );
            assert_eq!(os.status, ImageStatus::Active, "the data is untouched");

            env.delete_and_wait::<OpenstackImage>(&name, READY).await?;
            match env.cloud.image.get_image(&id).await {
                Err(e) if e.is_not_found() => {}
                Ok(i) if matches!(i.status, ImageStatus::Deleted | ImageStatus::PendingDelete) => {}
                other => panic!("the image should be gone, got {other:?}"),
            }
            assert!(
                env.cloud.image.list_images_by_name(&name).await?.is_empty(),
                "no image named {name} is left"
            );
            Ok(())
        })
        .await
}

fn network_yaml(name: &str, extra_subnet: bool) -> String {
    let extra = if extra_subnet {
        format!(
            r#"    - name: {name}-extra
      cidr: 10.101.0.0/24
      enableDhcp: false
"#
        )
    } else {
        String::new()
    };
    format!(
        r#"
apiVersion: sunet.se/v1alpha1
kind: OpenstackNetwork
metadata:
  name: {name}
spec:
  name: {name}
  description: e2e provider network
  external: true
  shared: true
  providerNetworkType: vlan
  providerPhysicalNetwork: physnet1
  subnets:
    - name: {name}-v4
      cidr: 10.100.0.0/24
      gatewayIp: 10.100.0.1
      enableDhcp: false
      dnsNameservers: ["10.100.0.2"]
      allocationPools:
        - start: 10.100.0.10
          end: 10.100.0.200
{extra}"#
    )
}

fn subnet_id(n: &OpenstackNetwork, subnet: &str) -> Option<String> {
    n.status
        .as_ref()?
        .subnets
        .iter()
        .find(|s| s.name == subnet)?
        .subnet_id
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_create_subnets_edit_delete() -> anyhow::Result<()> {
    env("network")
        .await?
        .run(async |env| {
            let name = env.unique("net");
            env.apply(&network_yaml(&name, false)).await?;
            let n: OpenstackNetwork = env.wait_ready(&name, READY).await?;
            let id = n
                .status
                .as_ref()
                .and_then(|s| s.network_id.clone())
                .context("status.networkId after Ready")?;
            let os = env.cloud.network.get_network(&id).await?;
            assert_eq!(os.name, name);
            assert_eq!(os.description, "e2e provider network");
            assert!(os.external, "router:external");
            assert!(os.shared, "shared");
            assert_eq!(os.provider_network_type.as_deref(), Some("vlan"));
            assert_eq!(os.provider_physical_network.as_deref(), Some("physnet1"));
            assert!(
                os.provider_segmentation_id
                    .is_some_and(|v| (1..=4094).contains(&v)),
                "a VLAN id was allocated: {:?}",
                os.provider_segmentation_id
            );
            assert_marked(&os.tags, env, "the network");
            let main = format!("{name}-v4");
            let sid = subnet_id(&n, &main).context("status.subnets[].subnetId")?;
            let s = env.cloud.network.get_subnet(&sid).await?;
            assert_eq!(
                (
                    s.name.as_str(),
                    s.network_id.as_str(),
                    s.cidr.as_str(),
                    s.ip_version
                ),
                (main.as_str(), id.as_str(), "10.100.0.0/24", 4)
            );
            assert_eq!(s.gateway_ip.as_deref(), Some("10.100.0.1"), "gateway");
            assert!(!s.enable_dhcp, "DHCP off");
            assert_eq!(s.dns_nameservers, vec!["10.100.0.2".to_string()]);
            assert_eq!(
                s.allocation_pools,
                vec![AllocationPool {
                    start: "10.100.0.10".into(),
                    end: "10.100.0.200".into()
                }]
            );
            assert_marked(&s.tags, env, "the subnet");

            // A subnet is added...
            env.apply(&network_yaml(&name, true)).await?;
            let n: OpenstackNetwork = env
                .wait_object(
                    &name,
                    READY,
                    "Ready at generation 2 with both subnets in status",
                    |n: &OpenstackNetwork| {
                        e2e::k8s::is_ready(n)
                            && n.metadata.generation == Some(2)
                            && subnet_id(n, &format!("{name}-extra")).is_some()
                    },
                )
                .await?;
            let extra_id =
                subnet_id(&n, &format!("{name}-extra")).context("the extra subnet's id")?;
            assert_eq!(
                subnet_id(&n, &main).as_deref(),
                Some(sid.as_str()),
                "the first subnet is untouched"
            );
            let extra = env.cloud.network.get_subnet(&extra_id).await?;
            assert_eq!(
                (
                    extra.cidr.as_str(),
                    extra.network_id.as_str(),
                    extra.enable_dhcp
                ),
                ("10.101.0.0/24", id.as_str(), false)
            );
            assert_eq!(
                extra.gateway_ip.as_deref(),
                Some("10.101.0.1"),
                "Neutron's default gateway"
            );
            let on_net = env
                .cloud
                .network
                .list_subnets(&SubnetFilter {
                    network_id: Some(id.clone()),
                    ..Default::default()
                })
                .await?;
            assert_eq!(on_net.len(), 2, "two subnets on the network: {on_net:?}");

            // ... and removed again.
            env.apply(&network_yaml(&name, false)).await?;
            let n: OpenstackNetwork = env
                .wait_object(
                    &name,
                    READY,
                    "Ready at generation 3",
                    |n: &OpenstackNetwork| {
                        e2e::k8s::is_ready(n) && n.metadata.generation == Some(3)
                    },
                )
                .await?;
            assert!(
                subnet_id(&n, &format!("{name}-extra")).is_none(),
                "status lists only the spec's subnets: {:?}",
                n.status
            );
            not_found(
                env.cloud.network.get_subnet(&extra_id).await,
                "the removed subnet",
            );
            env.cloud
                .network
                .get_subnet(&sid)
                .await
                .context("the first subnet stays")?;
            env.wait_event::<OpenstackNetwork>(&name, "SubnetDeleted", READY)
                .await?;

            env.delete_and_wait::<OpenstackNetwork>(&name, READY)
                .await?;
            not_found(env.cloud.network.get_network(&id).await, "the network");
            not_found(env.cloud.network.get_subnet(&sid).await, "the subnet");
            Ok(())
        })
        .await
}
