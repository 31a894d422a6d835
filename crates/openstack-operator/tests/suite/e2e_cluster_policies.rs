//! End to end: ownership (W8: never take over what is not ours unless asked), bad input
//! (refused at admission or InvalidSpec, never an OpenStack write), failures OpenStack
//! reports, and the steady-state cost of a resync (reads only, zero writes).

use std::time::Duration;

use anyhow::Context as _;
use api::{OpenstackDomain, OpenstackFlavor, OpenstackImage, OpenstackNetwork};
use e2e::env::CLUSTER_TAG_PREFIX;
use e2e::k8s::{condition, is_ready, names_field, phase};
use e2e::metrics::{Metrics, delta, is_read_operation};
use e2e::wait::{Check, wait_for};
use e2e::{EnvOptions, TestEnv};
use futures::FutureExt as _;
use openstack::OptionalExt as _;
use openstack::model::{Domain, DomainCreate, DomainUpdate, NetworkFilter};

const BIN: &str = env!("CARGO_BIN_EXE_openstack-operator");
const READY: Duration = Duration::from_secs(90);
const IMPORT: Duration = Duration::from_secs(180);

async fn env(test: &str) -> anyhow::Result<TestEnv> {
    TestEnv::start(
        test,
        EnvOptions::new(BIN, &format!("cluster_policies-{test}")),
    )
    .await
}

// ------------------------------------------------------------------------------ ownership

const HAND_TAG: &str = "e2e-hand-made";

/// A domain made by hand (no ownership marks), deleted after the test.
async fn hand_made_domain(env: &TestEnv, name: &str) -> anyhow::Result<Domain> {
    let req = DomainCreate {
        name: name.into(),
        description: "made by hand".into(),
        enabled: true,
        tags: vec![HAND_TAG.into()],
    };
    let d = env.cloud.identity.create_domain(&req).await?;
    let id = d.id.clone();
    env.defer(&format!("hand-made domain {name} ({id})"), move |cloud| {
        async move {
            if cloud.identity.get_domain(&id).await.optional()?.is_some() {
                cloud
                    .identity
                    .update_domain(
                        &id,
                        &DomainUpdate {
                            enabled: Some(false),
                            ..Default::default()
                        },
                    )
                    .await?;
                cloud.identity.delete_domain(&id).await.optional()?;
            }
            Ok(())
        }
        .boxed()
    });
    Ok(d)
}

fn domain_yaml(name: &str, description: &str, adopt: bool) -> String {
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
  adopt: {adopt}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_domain_is_not_taken_without_adopt() -> anyhow::Result<()> {
    env("not_owned")
        .await?
        .run(async |env| {
            let name = env.unique("hand");
            let hand = hand_made_domain(env, &name).await?;
            env.apply(&domain_yaml(&name, "from the resource", false))
                .await?;
            let d: OpenstackDomain = env
                .wait_condition(&name, "Ready", false, "NotOwned", READY)
                .await?;
            let c = condition(&d, "DomainReady").context("DomainReady condition")?;
            assert_eq!(
                (c.is_true(), c.reason.as_deref()),
                (false, Some("NotOwned")),
                "DomainReady: {c:?}"
            );
            let message = condition(&d, "Ready")
                .and_then(|c| c.message)
                .unwrap_or_default();
            assert!(
                message.contains("adopt"),
                "the message tells how to take it over: {message}"
            );
            assert!(
                d.status
                    .as_ref()
                    .and_then(|s| s.domain_id.as_ref())
                    .is_none(),
                "no domainId is recorded for a foreign domain: {:?}",
                d.status
            );
            let now = env.cloud.identity.get_domain(&hand.id).await?;
            assert_eq!(now, hand, "the hand-made domain is untouched");

            env.delete_and_wait::<OpenstackDomain>(&name, READY).await?;
            let now = env
                .cloud
                .identity
                .get_domain(&hand.id)
                .await
                .context("the hand-made domain survives the resource's deletion")?;
            assert_eq!(
                now, hand,
                "the hand-made domain is untouched after the deletion"
            );
            Ok(())
        })
        .await
}

fn flavor_yaml(name: &str, adopt: bool) -> String {
    format!(
        r#"
apiVersion: sunet.se/v1alpha1
kind: OpenstackFlavor
metadata:
  name: {name}
spec:
  name: {name}
  vcpus: 1
  ram: 128
  disk: 1
  adopt: {adopt}
"#
    )
}

/// A flavor someone made by hand with the spec's name: refused (`NotOwned`, naming how to take
/// it over) and untouched, also by the resource's deletion; adopted when asked, and kept when
/// the adopting resource is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_flavor_is_refused_then_adopted_when_asked() -> anyhow::Result<()> {
    env("flavor_not_owned")
        .await?
        .run(async |env| {
            let name = env.unique("hand");
            let hand = env.hand_made_flavor(&name, None).await?;
            env.apply(&flavor_yaml(&name, false)).await?;
            let f: OpenstackFlavor = env
                .wait_condition(&name, "Ready", false, "NotOwned", READY)
                .await?;
            let message = condition(&f, "Ready")
                .and_then(|c| c.message)
                .unwrap_or_default();
            anyhow::ensure!(
                message.contains("adopt") && message.contains(&hand.id),
                "the message names the flavor and how to take it over: {message}"
            );
            anyhow::ensure!(
                env.cloud.compute.get_flavor(&hand.id).await? == hand,
                "the hand-made flavor is untouched"
            );
            env.delete_and_wait::<OpenstackFlavor>(&name, READY).await?;
            anyhow::ensure!(
                env.cloud.compute.get_flavor(&hand.id).await? == hand,
                "the hand-made flavor survives the resource's deletion"
            );

            env.apply(&flavor_yaml(&name, true)).await?;
            let f: OpenstackFlavor = env.wait_ready(&name, READY).await?;
            let status = f.status.context("status")?;
            anyhow::ensure!(
                status.flavor_id.as_ref() == Some(&hand.id) && status.adopted == Some(true),
                "adopted: {status:?}"
            );
            env.delete_and_wait::<OpenstackFlavor>(&name, READY).await?;
            let kept = env.cloud.compute.get_flavor(&hand.id).await?;
            anyhow::ensure!(
                kept.extra_specs.is_empty(),
                "an adopted flavor is kept, without our mark: {kept:?}"
            );
            Ok(())
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_domain_is_adopted_when_asked_and_kept_on_delete() -> anyhow::Result<()> {
    env("adopt")
        .await?
        .run(async |env| {
            let name = env.unique("hand");
            let hand = hand_made_domain(env, &name).await?;
            env.apply(&domain_yaml(&name, "adopted by the operator", true))
                .await?;
            let d: OpenstackDomain = env.wait_ready(&name, READY).await?;
            let st = d.status.clone().context("status")?;
            assert_eq!(st.adopted, Some(true), "status.adopted");
            assert_eq!(
                st.domain_id.as_deref(),
                Some(hand.id.as_str()),
                "the hand-made domain is the one adopted"
            );
            let now = env.cloud.identity.get_domain(&hand.id).await?;
            assert_eq!(
                now.description, "adopted by the operator",
                "the spec is applied to the adopted domain"
            );
            assert!(
                now.tags.contains(&HAND_TAG.to_string()),
                "foreign tags are kept: {:?}",
                now.tags
            );
            let mark = format!("{CLUSTER_TAG_PREFIX}{}", env.operator.cluster_id());
            assert!(
                now.tags.contains(&mark),
                "the adopted domain carries our mark: {:?}",
                now.tags
            );
            env.wait_event::<OpenstackDomain>(&name, "Adopted", READY)
                .await?;

            env.delete_and_wait::<OpenstackDomain>(&name, READY).await?;
            let kept = env
                .cloud
                .identity
                .get_domain(&hand.id)
                .await
                .context("an adopted domain is kept when the resource is deleted")?;
            assert!(kept.enabled, "still enabled");
            assert!(
                kept.tags.contains(&HAND_TAG.to_string()),
                "foreign tags are kept: {:?}",
                kept.tags
            );
            assert!(
                !kept.tags.iter().any(|t| t.starts_with(CLUSTER_TAG_PREFIX)),
                "our marks are removed on release: {:?}",
                kept.tags
            );
            Ok(())
        })
        .await
}

// ------------------------------------------------------------------------------ bad input

/// Reads a bad-input manifest, its `# expect:` text, and gives it unique names.
fn bad_input(file: &str, name: &str) -> anyhow::Result<(String, String)> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/bad-input")
        .join(file);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let expect = text
        .lines()
        .find_map(|l| l.strip_prefix("# expect:"))
        .map(|e| e.trim().to_string())
        .with_context(|| format!("{file} has no '# expect:' line"))?;
    let mut doc = api::manifest::documents(&text)?
        .into_iter()
        .next()
        .context("no document")?;
    doc["metadata"]["name"] = name.into();
    doc["spec"]["name"] = name.into();
    Ok((serde_json::to_string(&doc)?, expect))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_network_manifests_are_refused_without_openstack_writes() -> anyhow::Result<()> {
    env("bad_network")
        .await?
        .run(async |env| {
            for file in [
                "network-invalid-cidr.yaml",
                "network-gateway-outside-cidr.yaml",
                "network-duplicate-subnet-names.yaml",
            ] {
                let name = env.unique("bad");
                let (manifest, expect) = bad_input(file, &name)?;
                match env.try_apply(&manifest).await {
                    Err(e) => {
                        let status = e
                            .status()
                            .with_context(|| format!("{file}: not an API refusal: {e}"))?;
                        // 422 Invalid, or (a real server, duplicate list-map keys in an
                        // apply) the 500 of a patch that does not fit the schema
                        assert!(e.refusal().is_some(), "{file}: {}", e.describe());
                        assert!(
                            names_field(&e.describe(), &expect),
                            "{file}: the refusal names {expect:?}: {}",
                            e.describe()
                        );
                        eprintln!("{file}: refused at admission: {}", status.message);
                    }
                    Ok(_) => {
                        let n: OpenstackNetwork = env
                            .wait_condition(&name, "Ready", false, "InvalidSpec", READY)
                            .await?;
                        let message = condition(&n, "Ready")
                            .and_then(|c| c.message)
                            .unwrap_or_default();
                        assert!(
                            names_field(&message, &expect),
                            "{file}: InvalidSpec names {expect:?}: {message}"
                        );
                        let c = condition(&n, "NetworkReady").context("NetworkReady")?;
                        assert_eq!(
                            (c.is_true(), c.reason.as_deref()),
                            (false, Some("InvalidSpec")),
                            "{file}: {c:?}"
                        );
                        eprintln!("{file}: accepted by the API server, InvalidSpec: {message}");
                    }
                }
                let found = env
                    .cloud
                    .network
                    .list_networks(&NetworkFilter {
                        name: Some(name.clone()),
                        ..Default::default()
                    })
                    .await?;
                assert!(
                    found.is_empty(),
                    "{file}: no Neutron network named {name} may exist: {found:?}"
                );
            }
            Ok(())
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_with_unreachable_url_fails_with_import_failed() -> anyhow::Result<()> {
    env("image_unreachable")
        .await?
        .run(async |env| {
            let name = env.unique("img");
            let url = env.image_url("does-not-exist.qcow2")?;
            env.apply(&format!(
                r#"
apiVersion: sunet.se/v1alpha1
kind: OpenstackImage
metadata:
  name: {name}
spec:
  name: {name}
  visibility: private
  content:
    diskFormat: qcow2
    containerFormat: bare
    source:
      url: {url}
"#
            ))
            .await?;
            let failed = |i: &OpenstackImage| {
                ["ImageReady", "Ready"].iter().all(|t| {
                    condition(i, t).is_some_and(|c| {
                        !c.is_true()
                            && c.reason.as_deref() == Some("ImportFailed")
                            && c.message.as_deref().is_some_and(|m| m.contains(&url))
                    })
                })
            };
            let i: OpenstackImage = env
                .wait_object(
                    &name,
                    IMPORT,
                    "ImageReady and Ready False, reason ImportFailed, naming the URL",
                    failed,
                )
                .await?;
            eprintln!("phase {:?}; Ready: {:?}", phase(&i), condition(&i, "Ready"));
            env.delete_and_wait::<OpenstackImage>(&name, READY).await?;
            assert!(
                env.cloud.image.list_images_by_name(&name).await?.is_empty(),
                "the failed image is deleted with the resource"
            );
            Ok(())
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vlan_on_unknown_physical_network_fails_with_neutrons_message() -> anyhow::Result<()> {
    env("unknown_physnet")
        .await?
        .run(async |env| {
            let name = env.unique("net");
            let physnet = format!("e2e-no-such-{}", e2e::names::random_suffix());
            env.apply(&format!(
                r#"
apiVersion: sunet.se/v1alpha1
kind: OpenstackNetwork
metadata:
  name: {name}
spec:
  name: {name}
  providerNetworkType: vlan
  providerPhysicalNetwork: {physnet}
  providerSegmentationId: 150
  subnets:
    - name: {name}-v4
      cidr: 10.150.0.0/24
"#
            ))
            .await?;
            let n: OpenstackNetwork = env
                .wait_object(
                    &name,
                    READY,
                    "Ready False naming the physical network",
                    |n: &OpenstackNetwork| {
                        condition(n, "Ready").is_some_and(|c| {
                            !c.is_true()
                                && c.message.as_deref().is_some_and(|m| m.contains(&physnet))
                        })
                    },
                )
                .await?;
            let ready = condition(&n, "Ready").context("Ready")?;
            eprintln!("Ready: {ready:?}");
            assert_eq!(
                ready.reason.as_deref(),
                Some("OpenStackError"),
                "a refusal by Neutron is not transient: {ready:?}"
            );
            assert_eq!(phase(&n).as_deref(), Some("Error"));
            assert!(
                n.status
                    .as_ref()
                    .and_then(|s| s.network_id.as_ref())
                    .is_none(),
                "no networkId: {:?}",
                n.status
            );
            let found = env
                .cloud
                .network
                .list_networks(&NetworkFilter {
                    name: Some(name.clone()),
                    ..Default::default()
                })
                .await?;
            assert!(found.is_empty(), "nothing is created: {found:?}");
            Ok(())
        })
        .await
}

// ------------------------------------------------------------------------------ steady state

/// Scrapes until two scrapes a second apart agree on API calls and reconciles (nothing in
/// flight), and returns that scrape.
async fn settled(env: &TestEnv) -> anyhow::Result<Metrics> {
    let mut previous: Option<Metrics> = None;
    wait_for(
        Duration::from_secs(60),
        Duration::from_secs(1),
        "the operator's counters to settle",
        async || {
            let m = env.operator.metrics().await?;
            let same = previous.as_ref().is_some_and(|p| {
                p.api_calls() == m.api_calls()
                    && p.by_label(e2e::metrics::RECONCILES, "resource")
                        == m.by_label(e2e::metrics::RECONCILES, "resource")
            });
            if same {
                return Ok(Check::Done(m));
            }
            let seen = format!("calls {:?}", m.api_calls());
            previous = Some(m);
            Ok(Check::Pending(seen))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_state_resync_makes_only_reads() -> anyhow::Result<()> {
    let mut opts = EnvOptions::new(BIN, "cluster_policies-steady_state");
    // No periodic resync during the test: only the forced one is measured.
    opts.operator.resync_seconds = 3600;
    TestEnv::start("steady_state", opts).await?.run(async |env| {
        let (domain, flavor, network) = (env.unique("dom"), env.unique("flv"), env.unique("net"));
        env.apply(&format!(
            r#"
apiVersion: sunet.se/v1alpha1
kind: OpenstackDomain
metadata:
  name: {domain}
spec:
  name: {domain}
  description: steady state
---
apiVersion: sunet.se/v1alpha1
kind: OpenstackFlavor
metadata:
  name: {flavor}
spec:
  name: {flavor}
  vcpus: 1
  ram: 256
  extraSpecs:
    "hw:cpu_policy": shared
---
apiVersion: sunet.se/v1alpha1
kind: OpenstackNetwork
metadata:
  name: {network}
spec:
  name: {network}
  shared: true
  providerNetworkType: vlan
  providerPhysicalNetwork: physnet1
  subnets:
    - name: {network}-v4
      cidr: 10.120.0.0/24
      gatewayIp: 10.120.0.1
      enableDhcp: false
      dnsNameservers: ["10.120.0.2"]
      allocationPools:
        - start: 10.120.0.10
          end: 10.120.0.100
"#
        ))
        .await?;
        env.wait_ready::<OpenstackDomain>(&domain, READY).await?;
        env.wait_ready::<OpenstackFlavor>(&flavor, READY).await?;
        env.wait_ready::<OpenstackNetwork>(&network, READY).await?;

        let before = settled(env).await?;
        env.request_reconcile::<OpenstackDomain>(&domain).await?;
        env.request_reconcile::<OpenstackFlavor>(&flavor).await?;
        env.request_reconcile::<OpenstackNetwork>(&network).await?;
        let kinds = ["OpenstackDomain", "OpenstackFlavor", "OpenstackNetwork"];
        wait_for(Duration::from_secs(60), Duration::from_millis(250), "one more reconcile of each kind", async || {
            let m = env.operator.metrics().await?;
            let missing: Vec<&str> = kinds.iter().copied().filter(|k| m.reconciles(k) < before.reconciles(k) + 1.0).collect();
            Ok(if missing.is_empty() { Check::Done(()) } else { Check::Pending(format!("not reconciled yet: {missing:?}")) })
        })
        .await?;
        let after = settled(env).await?;
        for k in kinds {
            assert_eq!(after.reconciles(k) - before.reconciles(k), 1.0, "exactly one reconcile of {k}");
        }

        let calls = delta(&before.api_calls(), &after.api_calls());
        let writes: Vec<(&String, &f64)> = calls.iter().filter(|(op, _)| !is_read_operation(op)).collect();
        let reads: f64 = calls.iter().filter(|(op, _)| is_read_operation(op)).map(|(_, n)| n).sum();
        eprintln!("steady-state resync of a domain, a flavor and a network: {reads} read calls, {} writes: {calls:?}", writes.len());
        assert!(writes.is_empty(), "a resync of unchanged objects must not write to OpenStack: {writes:?} (all calls: {calls:?})");
        assert!(reads > 0.0, "the resync compared with OpenStack (reads: {calls:?})");

        // Each pass found nothing to do and said so.
        let d: OpenstackDomain = env.get(&domain).await?;
        let f: OpenstackFlavor = env.get(&flavor).await?;
        let n: OpenstackNetwork = env.get(&network).await?;
        for (what, ready, reason) in [
            ("domain", is_ready(&d), condition(&d, "Ready").and_then(|c| c.reason)),
            ("flavor", is_ready(&f), condition(&f, "Ready").and_then(|c| c.reason)),
            ("network", is_ready(&n), condition(&n, "Ready").and_then(|c| c.reason)),
        ] {
            assert!(ready, "the {what} is still Ready");
            assert_eq!(reason.as_deref(), Some("InSync"), "the {what}'s resync found nothing to change");
        }
        Ok(())
    })
    .await
}
