//! End to end: an `OpenstackCloud` whose Secret holds an application credential, with
//! `spec.rotation` and a short lifetime, against the local test cloud's Keystone.
//!
//! Proven: the operator takes over the user's never-expiring credential at once, then makes
//! the next one within the lead time of each expiry, writes it to the Secret (keeping the
//! Secret's other keys) and deletes the old one after the drain period; Keystone refuses each
//! old credential after its switch and accepts the Secret's new one; a project in that cloud,
//! made to reconcile every second the whole time, stays Ready and none of the cloud's
//! OpenStack calls fails or meets a 401 (counted from the operator's per-cloud metrics); a
//! restricted credential is refused with a condition naming `spec.rotation`; a lead time not
//! below the lifetime is refused at admission.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use api::{OpenstackCloud, OpenstackProject};
use controllers::rotation::{PREVIOUS_ANNOTATION, name_prefix};
use e2e::{EnvOptions, TestEnv};
use futures::FutureExt as _;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use openstack::OptionalExt as _;
use openstack::adapter::{ClientOptions, CloudSelector, Core};
use openstack::app_credential::{
    ApplicationCredentialAdapter, ApplicationCredentialCreate, ApplicationCredentials as _,
};
use openstack::model::{Actor, ProjectCreate};
use secrecy::ExposeSecret as _;
use serde_json::json;

use crate::clouds_common::{admin_and_auth_url, secret_clouds_entry};
use crate::e2e_project::create_user_with_password;

const BIN: &str = env!("CARGO_BIN_EXE_openstack-operator");
const READY: Duration = Duration::from_secs(180);
/// The clouds.yaml entry inside the Secret.
const ENTRY: &str = "rotating";
/// Switches to watch: the takeover of the user's credential, then three made because the
/// current one was about to expire.
const SWITCHES: usize = 4;

fn app_cred_yaml(auth_url: &str, id: &str, secret: &str) -> String {
    json!({"clouds": {ENTRY: {
        "auth_type": "v3applicationcredential",
        "auth": {
            "auth_url": auth_url,
            "application_credential_id": id,
            "application_credential_secret": secret,
        },
        "region_name": "RegionOne",
        "interface": "public",
    }}})
    .to_string()
}

/// A metric family summed over one cloud, for the lines containing `filter`.
fn cloud_sum(metrics: &str, family: &str, cloud: &str, filter: &str) -> u64 {
    let prefix = format!("{family}{{cloud=\"{cloud}\",");
    metrics
        .lines()
        .filter(|l| l.starts_with(&prefix) && l.contains(filter))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// The application credential (id, secret) of the Secret's entry, and its annotations.
async fn secret_credential(
    env: &TestEnv,
    name: &str,
) -> anyhow::Result<(String, String, BTreeMap<String, String>)> {
    let (entry, annotations) = secret_clouds_entry(env, name, ENTRY).await?;
    let auth = &entry["auth"];
    Ok((
        auth["application_credential_id"]
            .as_str()
            .context("id")?
            .into(),
        auth["application_credential_secret"]
            .as_str()
            .context("secret")?
            .into(),
        annotations,
    ))
}

async fn connects(auth_url: &str, id: &str, secret: &str) -> Result<Core, openstack::Error> {
    Core::connect(
        &CloudSelector::ApplicationCredential {
            auth_url: auth_url.into(),
            id: id.into(),
            secret: secret.to_string().into(),
            region: Some("RegionOne".into()),
        },
        ClientOptions::default(),
    )
    .await
}

#[tokio::test]
async fn three_rotations_with_no_failed_request_and_every_old_credential_refused() {
    let env = TestEnv::start("rotation", EnvOptions::new(BIN, "rotation"))
        .await
        .expect("test env");
    env.run(async |env| {
        let (admin, auth_url) = admin_and_auth_url(env).await?;

        // The cloud's identity: a user administering a project of the test's own.
        let project = env.unique("rotation");
        let p = env
            .cloud
            .identity
            .create_project(&ProjectCreate {
                name: project.clone(),
                domain_id: "default".into(),
                description: "e2e_rotation: the rotating cloud's project".into(),
                enabled: true,
                tags: vec![],
            })
            .await?;
        env.defer(&format!("project {project}"), {
            let id = p.id.clone();
            move |cloud| {
                async move {
                    cloud.identity.delete_project(&id).await.optional()?;
                    Ok(())
                }
                .boxed()
            }
        });
        let user = env.unique("rotation-admin");
        let password = e2e::names::random_suffix() + &e2e::names::random_suffix();
        // Deleting the user (deferred) deletes whatever application credentials are left.
        let uid = create_user_with_password(env, &admin, "default", &user, &password).await?;
        let admin_role = env
            .cloud
            .identity
            .find_role("admin")
            .await?
            .context("the admin role")?;
        env.cloud
            .identity
            .grant_project_role(&p.id, &Actor::User(uid.clone()), &admin_role.id)
            .await?;
        let as_user = Core::connect(
            &CloudSelector::Yaml {
                yaml: json!({"clouds": {"u": {"auth": {
                    "auth_url": auth_url, "username": user, "password": password,
                    "project_name": project, "user_domain_name": "Default",
                    "project_domain_name": "Default"}, "region_name": "RegionOne"}}})
                .to_string()
                .into(),
                cloud: "u".into(),
                region: None,
                origin: "e2e_rotation".into(),
            },
            ClientOptions::default(),
        )
        .await?;
        let creds = ApplicationCredentialAdapter::new(as_user);
        let make = |name: String, unrestricted: bool| ApplicationCredentialCreate {
            name,
            description: "e2e_rotation (deleted with its user)".into(),
            expires_at: None,
            unrestricted,
            role_ids: vec![],
        };
        let first = creds
            .create_application_credential(&uid, &make(env.unique("first"), true))
            .await?;
        let restricted = creds
            .create_application_credential(&uid, &make(env.unique("restricted"), false))
            .await?;

        // The Secret (with a key the operator does not own) and the clouds.
        let secret = env.unique("rotating-creds");
        env.apply(
            &json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": secret, "namespace": env.namespace},
                "stringData": {
                    "clouds.yaml": app_cred_yaml(&auth_url, &first.credential.id, first.secret.expose_secret()),
                    "note": "not the operator's",
                },
            })
            .to_string(),
        )
        .await?;
        let cloud = env.unique("rotating");
        let rotation = json!({"lifetimeSeconds": 75, "leadTimeSeconds": 55, "drainSeconds": 10});
        env.apply(
            &json!({
                "apiVersion": "sunet.se/v1alpha1",
                "kind": "OpenstackCloud",
                "metadata": {"name": cloud},
                "spec": {
                    "secretRef": {"name": secret, "namespace": env.namespace},
                    "cloud": ENTRY,
                    "allowedNamespaces": [env.namespace],
                    "rotation": rotation,
                },
            })
            .to_string(),
        )
        .await?;
        let blocked_secret = env.unique("restricted-creds");
        env.apply(
            &json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": blocked_secret, "namespace": env.namespace},
                "stringData": {"clouds.yaml": app_cred_yaml(
                    &auth_url, &restricted.credential.id, restricted.secret.expose_secret())},
            })
            .to_string(),
        )
        .await?;
        let blocked = env.unique("restricted");
        env.apply(
            &json!({
                "apiVersion": "sunet.se/v1alpha1",
                "kind": "OpenstackCloud",
                "metadata": {"name": blocked},
                "spec": {
                    "secretRef": {"name": blocked_secret, "namespace": env.namespace},
                    "cloud": ENTRY,
                    "rotation": rotation,
                },
            })
            .to_string(),
        )
        .await?;

        // A lead time not below the lifetime is refused at admission (CEL), naming the field.
        let e = env
            .apply(
                &json!({
                    "apiVersion": "sunet.se/v1alpha1",
                    "kind": "OpenstackCloud",
                    "metadata": {"name": env.unique("bad-rotation")},
                    "spec": {
                        "secretRef": {"name": secret, "namespace": env.namespace},
                        "cloud": ENTRY,
                        "rotation": {"lifetimeSeconds": 60, "leadTimeSeconds": 60},
                    },
                })
                .to_string(),
            )
            .await
            .err()
            .context("an OpenstackCloud whose lead time equals its lifetime was admitted")?;
        assert!(
            format!("{e:#}").contains("spec.rotation.leadTimeSeconds must be less than"),
            "{e:#}"
        );

        // A project in the rotating cloud, kept busy for the whole test.
        let proj = env.unique("proj");
        env.apply(
            &json!({
                "apiVersion": "sunet.se/v1alpha1",
                "kind": "OpenstackProject",
                "metadata": {"name": proj, "namespace": env.namespace},
                "spec": {"name": format!("{proj}.example.com"), "domain": "Default",
                         "cloudRef": {"name": cloud}},
            })
            .to_string(),
        )
        .await?;
        env.wait_ready::<OpenstackProject>(&proj, READY).await?;

        // Follow the switches.
        let clouds: Api<OpenstackCloud> = Api::all(env.client.clone());
        let uid_of_cloud = clouds
            .get(&cloud)
            .await?
            .metadata
            .uid
            .context("the cloud's uid")?;
        let prefix = name_prefix(&cloud, &uid_of_cloud);
        let mut old = (
            first.credential.id.clone(),
            first.secret.expose_secret().to_string(),
        );
        let started = std::time::Instant::now();
        for n in 1..=SWITCHES {
            let deadline = started + Duration::from_secs(60 + 40 * n as u64);
            // The switch: a new credential in the Secret.
            let (new_id, new_secret) = loop {
                anyhow::ensure!(
                    std::time::Instant::now() < deadline,
                    "switch {n} did not happen in time"
                );
                env.request_reconcile::<OpenstackProject>(&proj).await?;
                let (id, s, _) = secret_credential(env, &secret).await?;
                if id != old.0 {
                    break (id, s);
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            };
            let listed = user_list(&creds, &uid).await?;
            let name = listed
                .iter()
                .find(|(id, _)| *id == new_id)
                .map(|(_, n)| n.clone())
                .context("the new credential is the user's")?;
            assert_eq!(name, format!("{prefix}-{n}"), "switch {n}");
            // The old one is deleted after the drain period, and Keystone refuses it.
            loop {
                anyhow::ensure!(
                    std::time::Instant::now() < deadline,
                    "the credential replaced by switch {n} was not deleted in time"
                );
                env.request_reconcile::<OpenstackProject>(&proj).await?;
                let (_, _, annotations) = secret_credential(env, &secret).await?;
                if !annotations.contains_key(PREVIOUS_ANNOTATION) {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            let e = connects(&auth_url, &old.0, &old.1)
                .await
                .err()
                .with_context(|| format!("the credential replaced by switch {n} still works"))?;
            assert!(
                matches!(e, openstack::Error::Unauthorized { .. }),
                "switch {n}: {e}"
            );
            assert!(
                !user_list(&creds, &uid).await?.iter().any(|(id, _)| *id == old.0),
                "switch {n}: the old credential is gone from Keystone"
            );
            connects(&auth_url, &new_id, &new_secret)
                .await
                .with_context(|| format!("the credential of switch {n} authenticates"))?;
            // Ours, and only ours, in the Secret.
            let s: Secret = Api::namespaced(env.client.clone(), &env.namespace)
                .get(&secret)
                .await?;
            let note = s.data.as_ref().and_then(|d| d.get("note")).map(|v| v.0.clone());
            assert_eq!(note.as_deref(), Some(&b"not the operator's"[..]));
            old = (new_id, new_secret);
        }

        // No request of the rotating cloud failed, none met a 401, and the project is Ready.
        let metrics = env.operator.metrics_text().await?;
        let calls = "openstack_operator_cloud_api_calls_total";
        let ok = cloud_sum(&metrics, calls, &cloud, "status=\"success\"");
        let failed = cloud_sum(&metrics, calls, &cloud, "status=\"error\"");
        let refused = cloud_sum(
            &metrics,
            "openstack_operator_cloud_api_responses_total",
            &cloud,
            "code=\"401\"",
        );
        eprintln!("rotating cloud: {ok} successful calls, {failed} failed, {refused} answered 401");
        assert!(ok > 0, "the rotating cloud's calls are counted:\n{metrics}");
        assert_eq!((failed, refused), (0, 0), "{metrics}");
        let p: OpenstackProject = env.get(&proj).await?;
        assert!(e2e::k8s::is_ready(&p), "{}", e2e::k8s::summary(&p));
        let c = clouds.get(&cloud).await?;
        let st = c.status.clone().context("status")?;
        let r = st.rotation.clone().context("status.rotation")?;
        assert!(r.rotations as usize >= SWITCHES, "{st:?}");
        let cond = e2e::k8s::condition(&c, "CredentialRotation").context("condition")?;
        assert_eq!(cond.reason.as_deref(), Some("Current"), "{cond:?}");

        // A restricted credential cannot make its successor: refused, naming the field.
        let b = clouds.get(&blocked).await?;
        let cond = e2e::k8s::condition(&b, "CredentialRotation").context("blocked condition")?;
        let m = cond.message.clone().unwrap_or_default();
        assert_eq!(cond.reason.as_deref(), Some("Blocked"), "{cond:?}");
        assert!(m.starts_with("spec.rotation:") && m.contains("unrestricted"), "{m}");
        let (id, _, _) = secret_credential(env, &blocked_secret).await?;
        assert_eq!(id, restricted.credential.id, "a refused rotation touched nothing");
        Ok(())
    })
    .await
    .expect("rotation");
}

/// The user's application credentials (id, name), as the user sees them (Keystone's policy
/// lets a user list their own).
async fn user_list(
    creds: &ApplicationCredentialAdapter,
    uid: &str,
) -> anyhow::Result<Vec<(String, String)>> {
    Ok(creds
        .list_application_credentials(uid)
        .await?
        .into_iter()
        .map(|c| (c.id, c.name))
        .collect())
}
