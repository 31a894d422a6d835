//! The rotation's I/O: one task (on the leader) passing over every `OpenstackCloud` with
//! `spec.rotation`, reading its Secret and Keystone's list of the user's application
//! credentials, and carrying out the step [`super::decide`] chose.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use api::Condition;
use api::cloud::OpenstackCloud;
use api::common::set_condition;
use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use openstack::OptionalExt as _;
use openstack::adapter::{ClientOptions, CloudSelector, Core};
use openstack::app_credential::{
    ApplicationCredentialAdapter, ApplicationCredentialCreate, ApplicationCredentials as _,
};
use secrecy::ExposeSecret as _;
use tokio::sync::Mutex;
use tracing::{info, warn};

use super::{
    Credential, PREVIOUS_ANNOTATION, Pending, Policy, SWITCHED_AT_ANNOTATION, Step, credential_id,
    decide, name_prefix, with_credential,
};
use crate::clouds::{CloudRegistry, clouds_yaml, fingerprint, options_for};

/// The condition type the rotation reports on the `OpenstackCloud`.
pub const CONDITION: &str = "CredentialRotation";
/// Longest sleep between passes (a Secret changed by hand is seen within it).
const MAX_WAIT: Duration = Duration::from_secs(30);
/// Pause after a failed pass.
const RETRY: Duration = Duration::from_secs(10);
/// Steps one pass takes at most (a normal switch takes two: clean up, create).
const MAX_STEPS: usize = 6;

/// How a pass over one cloud ended.
#[derive(Debug)]
enum Outcome {
    /// Nothing to do before this time; the current credential's name and expiry.
    Waiting {
        until: Timestamp,
        current: String,
        expires_at: Option<Timestamp>,
        switched: Option<Timestamp>,
    },
    /// The current credential cannot rotate (the message names the field).
    Blocked(String),
}

/// Rotates the application credentials of the `OpenstackCloud`s that ask for it.
pub struct Rotator {
    base: ClientOptions,
    /// One Keystone session per cloud, made from its Secret's current credential, with the
    /// fingerprint (cloud generation, Secret version) it was made from.
    sessions: Mutex<HashMap<String, (String, Core)>>,
}

impl Rotator {
    /// A rotator whose sessions start from `base` (each cloud's own limits and metric label
    /// are applied as for its resources' client).
    pub fn new(base: ClientOptions) -> Self {
        Rotator {
            base,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// Passes over the rotating clouds until `shutdown`. `ctx`'s cloud registry says which
    /// old clients passes still hold.
    pub async fn run(
        &self,
        ctx: std::sync::Arc<crate::Context>,
        shutdown: tokio_util::sync::CancellationToken,
    ) {
        loop {
            let wait = self.pass_all(&ctx.client, &ctx.clouds).await;
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// One pass over every rotating cloud; returns how long to sleep.
    async fn pass_all(&self, client: &kube::Client, registry: &CloudRegistry) -> Duration {
        let clouds = match Api::<OpenstackCloud>::all(client.clone())
            .list(&ListParams::default())
            .await
        {
            Ok(l) => l.items,
            // No OpenstackCloud CRD installed: nothing can ask for rotation.
            Err(kube::Error::Api(e)) if e.code == 404 => return MAX_WAIT,
            Err(e) => {
                warn!(error = %e, "credential rotation: cannot list the OpenstackClouds");
                return RETRY;
            }
        };
        let mut wait = MAX_WAIT;
        for cloud in clouds {
            let Some(rotation) = cloud.spec.rotation.clone() else {
                self.sessions.lock().await.remove(&cloud.name_any());
                continue;
            };
            if !cloud.spec.validate().is_empty() {
                continue; // its resources are already Blocked with the reason
            }
            let policy = Policy::from(&rotation);
            let outcome = self.rotate(client, registry, &cloud, &policy).await;
            let next = match &outcome {
                Ok(Outcome::Waiting { until, .. }) => {
                    let left = until.duration_since(Timestamp::now());
                    Duration::try_from(left).unwrap_or(Duration::ZERO)
                }
                Ok(Outcome::Blocked(_)) => MAX_WAIT,
                Err(_) => RETRY,
            };
            wait = wait.min(next.max(Duration::from_secs(1)));
            record(client, &cloud, &outcome).await;
        }
        wait
    }

    /// The Keystone session of `cloud` with the credential in `secret`.
    async fn session(
        &self,
        cloud: &OpenstackCloud,
        secret: &Secret,
        yaml: &str,
    ) -> Result<Core, String> {
        let name = cloud.name_any();
        let print = fingerprint(cloud, secret);
        let mut sessions = self.sessions.lock().await;
        if let Some((p, core)) = sessions.get(&name)
            && *p == print
        {
            return Ok(core.clone());
        }
        let core = self.connect(cloud, yaml).await?;
        sessions.insert(name, (print, core.clone()));
        Ok(core)
    }

    async fn connect(&self, cloud: &OpenstackCloud, yaml: &str) -> Result<Core, String> {
        let sref = &cloud.spec.secret_ref;
        let selector = CloudSelector::Yaml {
            yaml: yaml.to_string().into(),
            cloud: cloud.spec.cloud.clone(),
            region: cloud.spec.region.clone(),
            origin: format!("Secret {}/{}", sref.namespace, sref.name),
        };
        Core::connect(
            &selector,
            options_for(&self.base, &cloud.name_any(), &cloud.spec),
        )
        .await
        .map_err(|e| e.to_string())
    }

    /// Takes the steps due for one cloud.
    async fn rotate(
        &self,
        client: &kube::Client,
        registry: &CloudRegistry,
        cloud: &OpenstackCloud,
        policy: &Policy,
    ) -> Result<Outcome, String> {
        let name = cloud.name_any();
        let sref = &cloud.spec.secret_ref;
        let secrets = Api::<Secret>::namespaced(client.clone(), &sref.namespace);
        let prefix = name_prefix(&name, cloud.metadata.uid.as_deref().unwrap_or_default());
        for _ in 0..MAX_STEPS {
            let secret = secrets
                .get(&sref.name)
                .await
                .map_err(|e| format!("cannot read Secret {}/{}: {e}", sref.namespace, sref.name))?;
            let yaml = clouds_yaml(&secret, &sref.key)?;
            let current_id = credential_id(&yaml, &cloud.spec.cloud).map_err(|e| e.to_string())?;
            let core = self.session(cloud, &secret, &yaml).await?;
            let subject = core
                .token_subject()
                .ok_or("the Keystone session has no token")?;
            let keystone = ApplicationCredentialAdapter::new(core.clone());
            let listed = keystone
                .list_application_credentials(&subject.user_id)
                .await
                .map_err(|e| format!("listing the user's application credentials: {e}"))?;
            let creds: Vec<Credential> = listed.iter().map(Credential::from).collect();
            let current = creds
                .iter()
                .find(|c| c.id == current_id)
                .cloned()
                .ok_or_else(|| {
                    format!(
                        "the application credential {current_id} of the Secret is not one of its user's"
                    )
                })?;
            let pending = pending(&secret);
            let now = Timestamp::now();
            let step = decide(
                &super::Observed {
                    now,
                    prefix: &prefix,
                    current: Some(&current),
                    listed: &creds,
                    pending: pending.as_ref(),
                    old_clients_in_use: registry
                        .passes_on_other_versions(&name, &fingerprint(cloud, &secret)),
                },
                policy,
            );
            match step {
                Step::Blocked(m) => return Ok(Outcome::Blocked(m)),
                Step::Wait(until) => {
                    return Ok(Outcome::Waiting {
                        until,
                        current: current.name,
                        expires_at: current.expires_at,
                        switched: pending.map(|p| p.switched_at),
                    });
                }
                Step::Delete { ids, finish_switch } => {
                    for id in &ids {
                        keystone
                            .delete_application_credential(&subject.user_id, id)
                            .await
                            .optional()
                            .map_err(|e| format!("deleting application credential {id}: {e}"))?;
                        info!(cloud = %name, credential = %id, "deleted an old application credential");
                    }
                    if finish_switch {
                        finish(&secrets, &secret).await.map_err(|e| {
                            format!("ending the switch on Secret {}: {e}", secret.name_any())
                        })?;
                    }
                }
                Step::Create {
                    name: new_name,
                    expires_at: _,
                } => {
                    let role_ids = listed
                        .iter()
                        .find(|c| c.id == current_id)
                        .map(|c| c.role_ids.clone())
                        .unwrap_or_default();
                    let made = keystone
                        .create_application_credential(
                            &subject.user_id,
                            &ApplicationCredentialCreate {
                                name: new_name.clone(),
                                description: format!(
                                    "OpenstackCloud {name}: made by openstack-operator's credential rotation"
                                ),
                                // From now, not from the pass's start (a slow pass would
                                // ask for an expiry already past: Keystone's 400).
                                expires_at: Some(Timestamp::now() + policy.lifetime),
                                unrestricted: true,
                                role_ids,
                            },
                        )
                        .await
                        .map_err(|e| format!("creating application credential {new_name}: {e}"))?;
                    let new_yaml = with_credential(
                        &yaml,
                        &cloud.spec.cloud,
                        &made.credential.id,
                        made.secret.expose_secret(),
                    )
                    .map_err(|e| e.to_string())?;
                    // Proven before the switch: the old one stays in the Secret when the new
                    // one does not authenticate (it is a leftover, deleted by the next pass).
                    let checked = self.connect(cloud, &new_yaml).await.map_err(|e| {
                        format!(
                            "the new application credential {new_name} does not authenticate: {e}"
                        )
                    })?;
                    let written =
                        switch(&secrets, &secret, &sref.key, &new_yaml, &current_id, now).await?;
                    self.sessions
                        .lock()
                        .await
                        .insert(name.clone(), (fingerprint(cloud, &written), checked));
                    info!(cloud = %name, credential = %new_name, "switched to a new application credential");
                    bump_rotations(client, &name).await;
                }
            }
        }
        Err(format!(
            "rotation took more than {MAX_STEPS} steps in one pass"
        ))
    }
}

/// The switch in progress, from the Secret's annotations (the cloud's and a tenant's).
pub(super) fn pending(secret: &Secret) -> Option<Pending> {
    let a = secret.metadata.annotations.as_ref()?;
    Some(Pending {
        previous_id: a.get(PREVIOUS_ANNOTATION)?.clone(),
        switched_at: a
            .get(SWITCHED_AT_ANNOTATION)
            .and_then(|t| t.parse().ok())
            .unwrap_or(Timestamp::UNIX_EPOCH),
    })
}

/// Writes the new `clouds.yaml` and the old credential's id in one update, only over the
/// version read (a Secret changed meanwhile is read again by the next pass). Only the
/// `clouds.yaml` key and the rotation's annotations change.
async fn switch(
    secrets: &Api<Secret>,
    read: &Secret,
    key: &str,
    yaml: &str,
    previous: &str,
    now: Timestamp,
) -> Result<Secret, String> {
    let mut s = read.clone();
    s.data
        .get_or_insert_with(BTreeMap::new)
        .insert(key.to_string(), ByteString(yaml.as_bytes().to_vec()));
    if let Some(sd) = s.string_data.as_mut() {
        sd.remove(key);
    }
    let a = s.metadata.annotations.get_or_insert_with(BTreeMap::new);
    a.insert(PREVIOUS_ANNOTATION.into(), previous.into());
    a.insert(SWITCHED_AT_ANNOTATION.into(), now.to_string());
    secrets
        .replace(&read.name_any(), &PostParams::default(), &s)
        .await
        .map_err(|e| {
            format!(
                "writing the new application credential to Secret {}/{}: {e}",
                read.namespace().unwrap_or_default(),
                read.name_any()
            )
        })
}

/// Removes the rotation's annotations (over the version read; the cloud's and a tenant's).
pub(super) async fn finish(secrets: &Api<Secret>, read: &Secret) -> Result<(), kube::Error> {
    let patch = serde_json::json!({"metadata": {
        "resourceVersion": read.metadata.resource_version,
        "annotations": {PREVIOUS_ANNOTATION: null, SWITCHED_AT_ANNOTATION: null},
    }});
    secrets
        .patch(
            &read.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map(|_| ())
}

async fn bump_rotations(client: &kube::Client, name: &str) {
    let api = Api::<OpenstackCloud>::all(client.clone());
    let Ok(cloud) = api.get(name).await else {
        return;
    };
    let mut status = cloud.status.clone().unwrap_or_default();
    let mut r = status.rotation.clone().unwrap_or_default();
    r.rotations += 1;
    r.last_rotation = Some(Timestamp::now().to_string());
    status.rotation = Some(r);
    crate::clouds::apply_cloud_status(client, &cloud, &status, "rotation").await;
}

/// The cloud's status after a pass (pure): the rotation's state and its condition.
fn rotation_status(
    before: &api::cloud::OpenstackCloudStatus,
    outcome: &Result<Outcome, String>,
    generation: Option<i64>,
) -> api::cloud::OpenstackCloudStatus {
    let mut s = before.clone();
    let mut r = s.rotation.clone().unwrap_or_default();
    let mut cond = match outcome {
        Ok(Outcome::Waiting {
            current,
            expires_at,
            switched,
            ..
        }) => {
            r.current = Some(current.clone());
            r.expires_at = expires_at.map(|t| t.to_string());
            let msg = match switched {
                Some(_) => format!(
                    "switched to {current}; the old credential is deleted after the drain period"
                ),
                None => format!("using {current}"),
            };
            Condition::new(CONDITION, true, "Current", msg)
        }
        Ok(Outcome::Blocked(m)) => Condition::new(CONDITION, false, "Blocked", m.clone()),
        Err(e) => Condition::new(CONDITION, false, "RotationFailed", e.clone()),
    };
    cond.observed_generation = generation;
    set_condition(&mut s.conditions, cond, &crate::framework::now());
    s.rotation = Some(r);
    s
}

/// Writes the cloud's status when the pass changed it.
async fn record(client: &kube::Client, cloud: &OpenstackCloud, outcome: &Result<Outcome, String>) {
    if let Err(e) = outcome {
        warn!(cloud = %cloud.name_any(), error = %e, "credential rotation failed; retrying");
    }
    // Read again: a switch in this pass bumped the counters.
    let Ok(fresh) = Api::<OpenstackCloud>::all(client.clone())
        .get(&cloud.name_any())
        .await
    else {
        return;
    };
    let before = fresh.status.clone().unwrap_or_default();
    let status = rotation_status(&before, outcome, fresh.metadata.generation);
    if status != before {
        crate::clouds::apply_cloud_status(client, &fresh, &status, "rotation").await;
    }
}
