//! End to end: an `OpenstackProject` with `spec.applicationCredential` and a short lifetime,
//! against the local test cloud's Keystone.
//!
//! Proven: the operator delivers a `clouds.yaml` Secret (owned by the project) whose
//! application credential logs in on the project and lists its networks; it makes the next one
//! within the lead time of each expiry, switches the Secret to it, and deletes the old one
//! after the drain, after which Keystone refuses it; three rotations after the first delivery;
//! a Secret of that name the operator does not own is left alone and the project says why,
//! naming `spec.applicationCredential.secretName`; a lead time not below the lifetime is
//! refused at admission; removing the field revokes the credential and deletes the user and
//! the Secret; deleting the project deletes the credentials and the Keystone user, and
//! completes when Keystone lost the user already.

use std::time::Duration;

use anyhow::Context as _;
use api::OpenstackProject;
use controllers::rotation::PREVIOUS_ANNOTATION;
use e2e::{EnvOptions, TestEnv};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use openstack::adapter::{ClientOptions, CloudSelector, Core};
use openstack::model::NetworkFilter;
use serde_json::json;

use crate::clouds_common::secret_clouds_entry;

const BIN: &str = env!("CARGO_BIN_EXE_openstack-operator");
const READY: Duration = Duration::from_secs(180);
/// Rotations to watch after the first delivery.
const ROTATIONS: usize = 3;

/// The delivered credential, and whether the Secret is in a switch (the old one draining).
struct Delivered {
    id: String,
    secret: String,
    auth_url: String,
    rotating: bool,
}

async fn delivered(env: &TestEnv, secret: &str, entry: &str) -> anyhow::Result<Delivered> {
    let (e, annotations) = secret_clouds_entry(env, secret, entry).await?;
    anyhow::ensure!(
        e["auth_type"] == "v3applicationcredential",
        "entry {entry}: {e}"
    );
    let s_ = |v: &serde_json::Value| v.as_str().map(String::from).context("a string");
    Ok(Delivered {
        id: s_(&e["auth"]["application_credential_id"])?,
        secret: s_(&e["auth"]["application_credential_secret"])?,
        auth_url: s_(&e["auth"]["auth_url"])?,
        rotating: annotations.contains_key(PREVIOUS_ANNOTATION),
    })
}

/// Logs in with the credential the way a tenant's client would, and lists the project's
/// networks; returns the project the token is scoped to.
async fn use_credential(d: &Delivered) -> Result<String, openstack::Error> {
    let core = Core::connect(
        &CloudSelector::ApplicationCredential {
            auth_url: d.auth_url.clone(),
            id: d.id.clone(),
            secret: d.secret.clone().into(),
            region: Some("RegionOne".into()),
        },
        ClientOptions::default(),
    )
    .await?;
    let project = core.current_project_id().unwrap_or_default();
    openstack::Cloud::from_core(core)
        .network
        .list_networks(&NetworkFilter::default())
        .await?;
    Ok(project)
}

#[tokio::test]
async fn a_tenant_s_clouds_yaml_works_after_each_of_three_rotations_and_is_revoked_with_the_project()
 {
    let env = TestEnv::start(
        "tenant-credentials",
        EnvOptions::new(BIN, "tenant-credentials"),
    )
    .await
    .expect("test env");
    env.run(async |env| {
        // Refused at admission, naming the field.
        let e = env
            .apply(
                &json!({
                    "apiVersion": "sunet.se/v1alpha1",
                    "kind": "OpenstackProject",
                    "metadata": {"name": env.unique("bad"), "namespace": env.namespace},
                    "spec": {"name": env.unique("bad"), "domain": "Default",
                             "applicationCredential": {"lifetimeSeconds": 60, "leadTimeSeconds": 60}},
                })
                .to_string(),
            )
            .await
            .err()
            .context("a lead time equal to the lifetime was admitted")?;
        assert!(
            format!("{e:#}").contains("spec.applicationCredential.leadTimeSeconds must be less than"),
            "{e:#}"
        );

        // A Secret of the chosen name that is not the operator's is left alone.
        let taken = env.unique("taken");
        env.apply(
            &json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": taken, "namespace": env.namespace},
                    "stringData": {"clouds.yaml": "mine"}})
            .to_string(),
        )
        .await?;
        let squatter = env.unique("squatter");
        env.apply(
            &json!({
                "apiVersion": "sunet.se/v1alpha1",
                "kind": "OpenstackProject",
                "metadata": {"name": squatter, "namespace": env.namespace},
                "spec": {"name": format!("{squatter}.example.com"), "domain": "Default",
                         "applicationCredential": {"secretName": taken,
                             "lifetimeSeconds": 600, "leadTimeSeconds": 60}},
            })
            .to_string(),
        )
        .await?;

        // The tenant.
        let proj = env.unique("tenant");
        env.apply(
            &json!({
                "apiVersion": "sunet.se/v1alpha1",
                "kind": "OpenstackProject",
                "metadata": {"name": proj, "namespace": env.namespace},
                "spec": {"name": format!("{proj}.example.com"), "domain": "Default",
                         "applicationCredential": {
                             "lifetimeSeconds": 40, "leadTimeSeconds": 25, "drainSeconds": 5}},
            })
            .to_string(),
        )
        .await?;
        // Two more, whose credentials do not rotate during the test: one whose field is
        // removed, one whose user Keystone loses before the project is deleted.
        let (removed, lost) = (env.unique("removed"), env.unique("lost"));
        for name in [&removed, &lost] {
            env.apply(
                &json!({
                    "apiVersion": "sunet.se/v1alpha1",
                    "kind": "OpenstackProject",
                    "metadata": {"name": name, "namespace": env.namespace},
                    "spec": {"name": format!("{name}.example.com"), "domain": "Default",
                             "applicationCredential": {
                                 "lifetimeSeconds": 600, "leadTimeSeconds": 60}},
                })
                .to_string(),
            )
            .await?;
        }
        let p: OpenstackProject = env.wait_ready(&proj, READY).await?;
        let status = p.status.clone().context("status")?;
        let project_id = status.project_id.clone().context("status.projectId")?;
        let record = status
            .application_credential
            .clone()
            .context("status.applicationCredential")?;
        let secret = record.secret_name.clone().context("secretName")?;
        assert_eq!(secret, format!("{proj}-clouds"));
        let user_id = record.user_id.clone().context("userId")?;

        let s: Secret = Api::namespaced(env.client.clone(), &env.namespace)
            .get(&secret)
            .await?;
        let owners = s.metadata.owner_references.clone().unwrap_or_default();
        assert!(
            owners.iter().any(|o| o.kind == "OpenstackProject" && o.name == proj),
            "{owners:?}"
        );
        let mut old = delivered(env, &secret, &proj).await?;
        let scoped = use_credential(&old)
            .await
            .context("the first delivered clouds.yaml")?;
        assert_eq!(scoped, project_id, "the credential is scoped to the project");
        // Restricted, with the default role (and the roles Keystone infers from it), never
        // the operator's own admin.
        let role = |name: &'static str| async move {
            env.cloud
                .identity
                .find_role(name)
                .await?
                .with_context(|| format!("the {name} role"))
        };
        let (member, reader, admin) = (role("member").await?, role("reader").await?, role("admin").await?);
        let listed = env
            .cloud
            .identity
            .tenant_users()
            .context("the real port makes tenant users")?
            .admin_credentials()
            .list_application_credentials(&user_id)
            .await?;
        let first = listed
            .iter()
            .find(|c| c.id == old.id)
            .context("the delivered credential is the user's")?;
        assert!(!first.unrestricted, "{first:?}");
        assert!(first.role_ids.contains(&member.id), "{first:?}");
        assert!(
            first
                .role_ids
                .iter()
                .all(|r| *r == member.id || *r == reader.id),
            "{first:?}"
        );
        assert!(!first.role_ids.contains(&admin.id), "{first:?}");

        let started = std::time::Instant::now();
        for n in 1..=ROTATIONS {
            let deadline = started + Duration::from_secs(40 + 30 * n as u64);
            let new = loop {
                anyhow::ensure!(
                    std::time::Instant::now() < deadline,
                    "rotation {n} did not happen in time"
                );
                let d = delivered(env, &secret, &proj).await?;
                if d.id != old.id {
                    break d;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            };
            let scoped = use_credential(&new)
                .await
                .with_context(|| format!("the clouds.yaml of rotation {n}"))?;
            assert_eq!(scoped, project_id, "rotation {n}");
            // The old one is deleted after the drain, and Keystone refuses it.
            let mut refused = None;
            while refused.is_none() {
                anyhow::ensure!(
                    std::time::Instant::now() < deadline,
                    "the credential replaced by rotation {n} still works"
                );
                if !delivered(env, &secret, &proj).await?.rotating {
                    refused = use_credential(&old).await.err();
                }
                if refused.is_none() {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
            let e = refused.context("refused")?;
            assert!(
                matches!(
                    e,
                    openstack::Error::Unauthorized { .. } | openstack::Error::NotFound { .. }
                ),
                "rotation {n}: {e}"
            );
            eprintln!("rotation {n}: the new clouds.yaml works, the old credential is refused ({e})");
            old = new;
        }
        // The status is written at the end of the pass that wrote the Secret: wait for it.
        let p = e2e::wait_for(READY, Duration::from_secs(1), "the rotations in status", async || {
            let p: OpenstackProject = env.get(&proj).await?;
            let record = p
                .status
                .as_ref()
                .and_then(|s| s.application_credential.clone())
                .context("status.applicationCredential")?;
            Ok(if record.rotations as usize > ROTATIONS {
                e2e::Check::Done(p)
            } else {
                e2e::Check::Pending(format!("{record:?}"))
            })
        })
        .await?;
        let cond = e2e::k8s::condition(&p, "TenantCredential").context("condition")?;
        assert_eq!(cond.reason.as_deref(), Some("Current"), "{cond:?}");

        // The squatted Secret: untouched, and the project says why.
        let sq = env
            .wait_condition::<OpenstackProject>(&squatter, "TenantCredential", false, "InvalidSpec", READY)
            .await?;
        let cond = e2e::k8s::condition(&sq, "TenantCredential").context("condition")?;
        let m = cond.message.clone().unwrap_or_default();
        assert!(m.contains("spec.applicationCredential.secretName"), "{m}");
        let ev = env
            .wait_event::<OpenstackProject>(&squatter, "InvalidSpec", READY)
            .await?;
        assert!(
            ev.type_ == "Warning" && ev.message.contains("spec.applicationCredential.secretName"),
            "{ev:?}"
        );
        let t: Secret = Api::namespaced(env.client.clone(), &env.namespace)
            .get(&taken)
            .await?;
        assert_eq!(
            t.data.as_ref().and_then(|d| d.get("clouds.yaml")).map(|v| v.0.clone()),
            Some(b"mine".to_vec())
        );

        // Removing spec.applicationCredential revokes the credential, deletes the user and
        // the Secret.
        let r: OpenstackProject = env.wait_ready(&removed, READY).await?;
        let r_user = r
            .status
            .as_ref()
            .and_then(|s| s.application_credential.as_ref())
            .and_then(|a| a.user_id.clone())
            .context("the removed project's user")?;
        let r_cred = delivered(env, &format!("{removed}-clouds"), &removed).await?;
        use_credential(&r_cred)
            .await
            .context("the removed project's clouds.yaml before the removal")?;
        env.merge_spec::<OpenstackProject>(&removed, json!({"applicationCredential": null}))
            .await?;
        env.wait_object::<OpenstackProject>(&removed, READY, "the credential's status gone", |p| {
            p.status.as_ref().is_some_and(|s| {
                s.application_credential.is_none()
                    && e2e::k8s::condition(p, "TenantCredential").is_none()
            })
        })
        .await?;
        let gone = Api::<Secret>::namespaced(env.client.clone(), &env.namespace)
            .get_opt(&format!("{removed}-clouds"))
            .await?;
        assert!(gone.is_none(), "the removed project's Secret is deleted");
        let e = env.cloud.identity.get_user(&r_user).await.err();
        assert!(
            matches!(e, Some(openstack::Error::NotFound { .. })),
            "the removed project's user: {e:?}"
        );
        assert!(
            use_credential(&r_cred).await.is_err(),
            "the removed project's credential is refused"
        );

        // A project whose user Keystone lost is still deleted.
        let l: OpenstackProject = env.wait_ready(&lost, READY).await?;
        let l_user = l
            .status
            .as_ref()
            .and_then(|s| s.application_credential.as_ref())
            .and_then(|a| a.user_id.clone())
            .context("the lost project's user")?;
        env.cloud
            .identity
            .tenant_users()
            .context("the real port makes tenant users")?
            .delete_user(&l_user)
            .await?;
        env.delete_and_wait::<OpenstackProject>(&lost, READY).await?;

        // Deleting the project revokes the credentials and deletes the user.
        env.delete_and_wait::<OpenstackProject>(&proj, READY).await?;
        let e = env
            .cloud
            .identity
            .get_user(&user_id)
            .await
            .err()
            .context("the tenant credentials' user outlived the project")?;
        assert!(matches!(e, openstack::Error::NotFound { .. }), "{e}");
        let e = use_credential(&old)
            .await
            .err()
            .context("the last credential outlived the project")?;
        assert!(
            matches!(
                e,
                openstack::Error::Unauthorized { .. } | openstack::Error::NotFound { .. }
            ),
            "{e}"
        );
        Ok(())
    })
    .await
    .expect("tenant credentials");
}
