//! The credential key cycle of a Keystone (see `controlplane_render::credential_keys`): the
//! `<name>-credential-keys` Secret is written, reaches every pod (mounted as a directory, so
//! no restart), `credential-migrate` re-encrypts every credential with its primary, and only
//! then may the keys rotate again, on schedule or on request. Status records the key set, when
//! it was written and whether it is migrated, so a restarted operator resumes where it was.

use std::collections::BTreeMap;
use std::time::Duration;

use controlplane_api::status::CredentialKeyStatus;
use controlplane_render::KeyRepository;
use controlplane_render::credential_keys::{self as ck, MAX_ACTIVE_KEYS, Next, Observed};
use controlplane_render::objects::{self, JobParams, Owner};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Secret, Volume, VolumeMount};
use kube::ResourceExt;
use kube::api::PostParams;
use kube::runtime::events::EventType;
use tracing::info;

use super::{LAST_ROTATION_ANNOTATION, Pass, ROTATED_FOR_ANNOTATION, StepState, credential_name};
use crate::runtime::{Error, State};
use controlplane_api::Keystone;

/// Annotation on a Keystone: set it to a new value to rotate the credential keys (after the
/// current keys are migrated).
pub const ROTATE_CREDENTIAL_KEYS_ANNOTATION: &str = "controlplane.sunet.se/rotate-credential-keys";
/// Annotation on a Keystone whose credential key Secret is gone: set to the lost key set's
/// hash (`status.credentialKeys.keySetHash`) to start over with new keys, knowingly making
/// every stored credential unreadable.
pub const REGENERATE_CREDENTIAL_KEYS_ANNOTATION: &str =
    "controlplane.sunet.se/regenerate-credential-keys";
/// The Job step that runs `keystone-manage credential_migrate`.
pub const MIGRATE_STEP: &str = "credential-migrate";

/// The credential key Secret as read at the start of a pass.
pub(super) struct CredentialKeys {
    secret: Secret,
    repo: KeyRepository,
    written_at: jiff::Timestamp,
    served: Option<String>,
}

/// What the `credential-migrate` Job needs besides the key set.
pub(super) struct MigrateJob<'a> {
    pub image: &'a str,
    pub conf: &'a str,
    /// The configuration (and database CA) volumes; the key Secrets' are added here.
    pub volumes: Vec<(Volume, VolumeMount)>,
    pub key_volume: (Volume, VolumeMount),
    /// The fernet key repository: keystone-manage loads the token provider, which exits
    /// when its key repository is missing, even for credential_migrate.
    pub fernet_volume: (Volume, VolumeMount),
    pub key_dir: &'a str,
}

/// The `credential-migrate` Job of key set `set` (pure): the configuration, the credential
/// keys it checks and the fernet keys keystone-manage insists on.
pub(super) fn migrate_job(
    owner: &Owner,
    name: String,
    hash: &str,
    job: &MigrateJob<'_>,
    set: &str,
) -> Job {
    let mut env: Vec<_> = ck::migrate_env(job.key_dir, "/etc/keystone/keystone.conf", set)
        .into_iter()
        .map(|(k, v)| objects::env(&k, v))
        .collect();
    env.sort_by(|a, b| a.name.cmp(&b.name));
    let mut volumes = job.volumes.clone();
    volumes.push(job.key_volume.clone());
    volumes.push(job.fernet_volume.clone());
    objects::job(
        owner,
        JobParams {
            name,
            step: MIGRATE_STEP.into(),
            hash: hash.into(),
            image: job.image.into(),
            command: vec!["python3".into(), "-c".into(), ck::MIGRATE_SCRIPT.into()],
            env,
            volumes,
        },
    )
}

impl Pass<'_, Keystone> {
    /// Reads the credential key Secret, creating it (staged + primary) the first time. The
    /// keys are never regenerated: losing them makes every stored credential unreadable.
    pub(super) async fn credential_secret(
        &mut self,
    ) -> Result<Result<CredentialKeys, State>, Error> {
        let api = self.secrets();
        let name = credential_name(&self.names.base);
        let now = jiff::Timestamp::now();
        let secret = match api.get_opt(&name).await? {
            Some(s) => s,
            None => {
                // Keys existed (status knows their set): new ones would make every stored
                // credential unreadable, so that takes an explicit request naming the set.
                if let Some(lost) = self
                    .status
                    .credential_keys
                    .as_ref()
                    .map(|c| &c.key_set_hash)
                    && self
                        .obj
                        .annotations()
                        .get(REGENERATE_CREDENTIAL_KEYS_ANNOTATION)
                        != Some(lost)
                {
                    return Ok(Err(State::Degraded {
                        reason: "CredentialKeysMissing".into(),
                        message: format!(
                            "Secret {name} with the credential keys (key set {lost}) is gone: restore it, every stored credential is encrypted with those keys; to start over with new keys, which makes them unreadable, annotate this Keystone {REGENERATE_CREDENTIAL_KEYS_ANNOTATION}={lost}"
                        ),
                    }));
                }
                let mut s = objects::secret(
                    &self.owner,
                    &name,
                    "credential-keys",
                    KeyRepository::generate().files(),
                );
                s.metadata.annotations = Some(BTreeMap::from([(
                    LAST_ROTATION_ANNOTATION.to_string(),
                    now.to_string(),
                )]));
                match api.create(&PostParams::default(), &s).await {
                    Ok(s) => s,
                    // Created by a concurrent pass: use that one.
                    Err(kube::Error::Api(e)) if e.code == 409 => api.get(&name).await?,
                    Err(e) => return Err(e.into()),
                }
            }
        };
        let files: Vec<(String, Vec<u8>)> = secret
            .data
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        let repo = match KeyRepository::from_files(files.iter().map(|(k, v)| (k, v.as_slice()))) {
            Ok(r) => r,
            Err(e) => {
                return Ok(Err(State::Degraded {
                    reason: "KeyMaterialInvalid".into(),
                    message: format!(
                        "Secret {name}: {e}; restore it from a backup (deleting it makes every stored credential unreadable)"
                    ),
                }));
            }
        };
        let ann = secret.annotations();
        // A Secret written before the annotation existed: its creation is when its keys began.
        let written_at = ann
            .get(LAST_ROTATION_ANNOTATION)
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .or_else(|| {
                secret
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .and_then(|t| t.0.to_string().parse().ok())
            })
            .unwrap_or(now);
        // A Secret restored from a backup may lack the annotation: status remembers too.
        let served = ann.get(ROTATED_FOR_ANNOTATION).cloned().or_else(|| {
            self.status
                .credential_keys
                .as_ref()
                .and_then(|c| c.rotated_for.clone())
        });
        Ok(Ok(CredentialKeys {
            secret,
            repo,
            written_at,
            served,
        }))
    }

    /// One turn of the cycle: rotate, wait for propagation, or drive the migrate Job. Returns
    /// `Degraded` while the migrate Job fails (rotation waits for it).
    pub(super) async fn credential_cycle(
        &mut self,
        keys: CredentialKeys,
        job: MigrateJob<'_>,
    ) -> Result<Option<State>, Error> {
        let now = jiff::Timestamp::now();
        let set = keys.repo.set_hash();
        let hash = ck::migrate_hash(job.image, job.conf, &set);
        let migrated = self
            .status
            .jobs
            .iter()
            .any(|r| r.step == MIGRATE_STEP && r.hash == hash && r.succeeded);
        let requested = self
            .obj
            .annotations()
            .get(ROTATE_CREDENTIAL_KEYS_ANNOTATION)
            .cloned();
        let asked = requested.is_some() && requested != keys.served;
        let age = Duration::from_secs(
            u64::try_from(now.duration_since(keys.written_at).as_secs()).unwrap_or(0),
        );
        let propagation = self.ctx.config.secret_propagation;
        let decision = ck::next(&Observed {
            age,
            migrated,
            interval: self.obj.spec.credential_keys.interval(),
            requested: asked,
            propagation,
        });
        let primary = keys.repo.primary_index();
        let mut record = CredentialKeyStatus {
            key_set_hash: set.clone(),
            primary_index: primary,
            last_rotation: Some(keys.written_at.to_string()),
            migrated,
            rotated_for: keys.served.clone(),
            message: None,
        };
        let waiting = |w: bool| {
            if w {
                "; a rotation is due and waits for it"
            } else {
                ""
            }
        };
        let mut outcome = None;
        match decision {
            Next::Rotate => {
                let rotated = keys.repo.rotate(MAX_ACTIVE_KEYS);
                let mut secret = keys.secret;
                secret.data = Some(
                    rotated
                        .files()
                        .into_iter()
                        .map(|(k, v)| (k, k8s_openapi::ByteString(v.into_bytes())))
                        .collect(),
                );
                let ann = secret.metadata.annotations.get_or_insert_default();
                ann.insert(LAST_ROTATION_ANNOTATION.into(), now.to_string());
                let served = requested.clone().or(keys.served);
                if let Some(r) = &served {
                    ann.insert(ROTATED_FOR_ANNOTATION.into(), r.clone());
                }
                // A replace carrying the resourceVersion read: key material is never
                // overwritten from a stale read (a conflict fails the pass, which retries).
                self.secrets()
                    .replace(
                        &credential_name(&self.names.base),
                        &PostParams::default(),
                        &secret,
                    )
                    .await?;
                info!(
                    primary = rotated.primary_index(),
                    "rotated the credential keys"
                );
                let note = format!(
                    "credential keys rotated: primary key {}; credential-migrate runs in {}s, once every pod has the new keys",
                    rotated.primary_index(),
                    propagation.as_secs()
                );
                self.ctx
                    .event(
                        self.obj,
                        EventType::Normal,
                        "CredentialKeysRotated",
                        note.clone(),
                    )
                    .await;
                record = CredentialKeyStatus {
                    key_set_hash: rotated.set_hash(),
                    primary_index: rotated.primary_index(),
                    last_rotation: Some(now.to_string()),
                    migrated: false,
                    rotated_for: served,
                    message: Some(note),
                };
                self.soon(propagation.max(Duration::from_secs(1)));
            }
            Next::AwaitPropagation {
                remaining,
                rotation_waiting,
            } => {
                // An absolute time, so the status does not change (and is not rewritten) on
                // every pass while waiting.
                let at = keys
                    .written_at
                    .checked_add(jiff::SignedDuration::try_from(propagation).unwrap_or_default())
                    .unwrap_or(now);
                record.message = Some(format!(
                    "key set {set} (primary key {primary}) may not have reached every pod yet: credential-migrate starts at {at}{}",
                    waiting(rotation_waiting)
                ));
                self.soon(remaining.max(Duration::from_secs(1)));
            }
            Next::Migrate { rotation_waiting } => {
                let owner = self.owner.clone();
                let state = self
                    .step(MIGRATE_STEP, &hash, |name| {
                        migrate_job(&owner, name, &hash, &job, &set)
                    })
                    .await?;
                match state {
                    StepState::Done => {
                        record.migrated = true;
                        record.message = Some(format!(
                            "every credential is encrypted with primary key {primary}{}",
                            if rotation_waiting {
                                "; rotating next"
                            } else {
                                ""
                            }
                        ));
                        self.soon(Duration::from_secs(1));
                    }
                    StepState::Running(m) => {
                        record.message = Some(format!("{m}{}", waiting(rotation_waiting)));
                    }
                    StepState::Failed(m) => {
                        let message =
                            format!("{m}; the credential keys do not rotate until it succeeds");
                        record.message = Some(message.clone());
                        outcome = Some(State::Degraded {
                            reason: "CredentialMigrateFailed".into(),
                            message,
                        });
                    }
                }
            }
            Next::Idle { until_due } => {
                record.message = Some(match until_due {
                    Some(d) => {
                        self.soon(d.max(Duration::from_secs(1)));
                        let interval = self.obj.spec.credential_keys.interval().unwrap_or(d);
                        let at = keys
                            .written_at
                            .checked_add(
                                jiff::SignedDuration::try_from(interval).unwrap_or_default(),
                            )
                            .unwrap_or(now);
                        format!(
                            "every credential is encrypted with primary key {primary}; next rotation at {at}"
                        )
                    }
                    None => format!(
                        "every credential is encrypted with primary key {primary}; rotation on request ({ROTATE_CREDENTIAL_KEYS_ANNOTATION})"
                    ),
                });
            }
        }
        self.status.credential_keys = Some(record);
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use controlplane_render::keystone::Paths;

    #[test]
    fn migrate_job_mounts_the_fernet_keys_keystone_manage_loads() {
        let owner = Owner {
            reference: Default::default(),
            namespace: "ns".into(),
            instance: "ks".into(),
            service: "keystone".into(),
        };
        let paths = Paths::pod();
        let job = MigrateJob {
            image: "img",
            conf: "[DEFAULT]\n",
            volumes: vec![objects::secret_volume(
                "config",
                "ks-keystone-config",
                "/etc/keystone",
            )],
            key_volume: objects::secret_volume(
                "credential-keys",
                "ks-credential-keys",
                &paths.credential_keys,
            ),
            fernet_volume: objects::secret_volume(
                "fernet-keys",
                "ks-fernet-keys",
                &paths.fernet_keys,
            ),
            key_dir: &paths.credential_keys,
        };
        let j = migrate_job(&owner, "ks-credential-migrate-h-1".into(), "h", &job, "set");
        let pod = j.spec.and_then(|s| s.template.spec).expect("pod");
        let mounts: Vec<_> = pod.containers[0]
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| m.mount_path.clone())
            .collect();
        for want in ["/etc/keystone", &paths.credential_keys, &paths.fernet_keys] {
            assert!(mounts.iter().any(|m| m == want), "{want} not in {mounts:?}");
        }
        let secrets: Vec<_> = pod
            .volumes
            .iter()
            .flatten()
            .filter_map(|v| v.secret.as_ref()?.secret_name.clone())
            .collect();
        assert!(
            secrets.contains(&"ks-fernet-keys".to_string()),
            "{secrets:?}"
        );
    }
}
