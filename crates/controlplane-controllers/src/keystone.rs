//! `Keystone`: dependencies → validate → render → Secrets → Jobs (database, db_sync,
//! bootstrap; keyed by the hash of their inputs, retried with bounded backoff) → Deployment and
//! Service → token probe → status. Fernet keys rotate on schedule in their Secret (pods see the
//! new files without a restart); credential keys rotate only after `credential_migrate`
//! (see the `credential_keys` module).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use controlplane_api::common::SecretKeyRef;
use controlplane_api::external::ServiceKind;
use controlplane_api::status::KeyRotationStatus;
use controlplane_api::validation::{Validate, parse_endpoint};
use controlplane_api::{JobRecord, Keystone, OpenStackExternalService, ServiceName, ServiceStatus};
use controlplane_render::keystone::{self as render, Database, KeystoneInputs, Paths};
use controlplane_render::objects::{self, ApiParams, JobParams, Owner};
use controlplane_render::{InputHash, KeyRepository, secrets};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Secret, Service, Volume, VolumeMount};
use kube::api::{DeleteParams, ListParams, PostParams, PropagationPolicy};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use tracing::info;

use crate::runtime::{self, Ctx, Error, State};

mod credential_keys;
pub use credential_keys::{
    MIGRATE_STEP, REGENERATE_CREDENTIAL_KEYS_ANNOTATION, ROTATE_CREDENTIAL_KEYS_ANNOTATION,
};

/// Annotation on the fernet key Secret: when the keys were last rotated (RFC 3339).
pub const LAST_ROTATION_ANNOTATION: &str = "controlplane.sunet.se/last-rotation";
/// Annotation on a Keystone: set it to a new value to rotate the fernet keys now.
pub const ROTATE_NOW_ANNOTATION: &str = "controlplane.sunet.se/rotate-fernet-keys";
/// Annotation on the fernet key Secret: the last value of [`ROTATE_NOW_ANNOTATION`] served.
pub const ROTATED_FOR_ANNOTATION: &str = "controlplane.sunet.se/rotated-for";

/// The Job steps, in order.
pub const STEPS: [&str; 3] = ["db-init", "db-sync", "bootstrap"];

/// Names of the objects of one Keystone.
pub struct Names {
    /// CR name.
    pub base: String,
}

impl Names {
    fn n(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.base)
    }
    /// Generated admin password Secret.
    pub fn admin(&self) -> String {
        self.n("keystone-admin")
    }
    /// Generated database password Secret.
    pub fn db(&self) -> String {
        self.n("keystone-db")
    }
    /// Rendered configuration Secret.
    pub fn config(&self) -> String {
        self.n("keystone-config")
    }
    /// Fernet key Secret.
    pub fn fernet(&self) -> String {
        self.n("fernet-keys")
    }
    /// Credential key Secret.
    pub fn credential(&self) -> String {
        self.n("credential-keys")
    }
    /// Deployment and Service.
    pub fn api(&self) -> String {
        self.n("api")
    }
    /// A Job of one step, hash and attempt (at most 63 characters).
    pub fn job(&self, step: &str, hash: &str, attempt: u32) -> String {
        let base: String = self.base.chars().take(30).collect();
        format!("{base}-{step}-{hash}-{attempt}")
    }
}

/// When the next attempt of a step that failed `attempts` times may start (pure).
pub fn retry_delay(base: Duration, max: Duration, attempts: u32) -> Duration {
    base.saturating_mul(2u32.saturating_pow(attempts.saturating_sub(1).min(16)))
        .min(max)
}

/// Whether the fernet keys rotate now (pure): on schedule (`interval` since `last`), or on
/// request (the Keystone's rotate annotation has a value not served yet). Returns (due, asked).
pub fn rotation_due(
    now: jiff::Timestamp,
    last: jiff::Timestamp,
    interval: Duration,
    requested: Option<&str>,
    served: Option<&str>,
) -> (bool, bool) {
    let due =
        now.duration_since(last).as_secs() >= i64::try_from(interval.as_secs()).unwrap_or(i64::MAX);
    let asked = requested.is_some() && requested != served;
    (due, asked)
}

/// What a Job step looks like now.
#[derive(Debug, PartialEq, Eq)]
pub enum StepState {
    /// Succeeded for the current inputs.
    Done,
    /// A Job is running.
    Running(String),
    /// The last attempt failed; the next one starts after the backoff.
    Failed(String),
}

/// The Job's outcome from its conditions: Some(Ok) complete, Some(Err(reason)) failed.
pub fn job_outcome(job: &Job) -> Option<Result<(), String>> {
    let conds = job.status.as_ref()?.conditions.as_ref()?;
    if conds
        .iter()
        .any(|c| c.type_ == "Complete" && c.status == "True")
    {
        return Some(Ok(()));
    }
    conds
        .iter()
        .find(|c| c.type_ == "Failed" && c.status == "True")
        .map(|c| {
            Err(format!(
                "{}: {}",
                c.reason.clone().unwrap_or_else(|| "Failed".into()),
                c.message.clone().unwrap_or_default()
            ))
        })
}

fn secret_str(s: &Secret, key: &str) -> Option<String> {
    s.data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
}

struct Pass<'a> {
    ctx: &'a Ctx,
    obj: &'a Keystone,
    ns: String,
    owner: Owner,
    names: Names,
    status: ServiceStatus,
    requeue: Duration,
}

impl Pass<'_> {
    fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.ctx.client.clone(), &self.ns)
    }

    fn jobs(&self) -> Api<Job> {
        Api::namespaced(self.ctx.client.clone(), &self.ns)
    }

    fn soon(&mut self, d: Duration) {
        self.requeue = self.requeue.min(d);
    }

    /// A Secret we generate once and never overwrite (passwords, keys).
    async fn ensure_generated(
        &self,
        name: &str,
        component: &str,
        make: impl FnOnce() -> BTreeMap<String, String>,
    ) -> Result<Secret, Error> {
        let api = self.secrets();
        if let Some(s) = api.get_opt(name).await? {
            return Ok(s);
        }
        let s = objects::secret(&self.owner, name, component, make());
        match api.create(&PostParams::default(), &s).await {
            Ok(s) => Ok(s),
            // Created by a concurrent pass: use that one.
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(api.get(name).await?),
            Err(e) => Err(e.into()),
        }
    }

    async fn external(
        &self,
        name: &str,
        want: ServiceKind,
    ) -> Result<Result<OpenStackExternalService, State>, Error> {
        let api: Api<OpenStackExternalService> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        let Some(svc) = api.get_opt(name).await? else {
            return Ok(Err(State::Blocked {
                reason: "ExternalServiceMissing".into(),
                message: format!("external service {name} ({want}) not found"),
            }));
        };
        if svc.spec.type_ != want {
            return Ok(Err(State::Blocked {
                reason: "ExternalServiceWrongType".into(),
                message: format!(
                    "external service {name} is of type {}, not {want}",
                    svc.spec.type_
                ),
            }));
        }
        if let Some(why) = crate::external::not_ready_reason(&svc) {
            return Ok(Err(State::Blocked {
                reason: "ExternalServiceNotReady".into(),
                message: format!("external service {name} ({want}) {why}"),
            }));
        }
        Ok(Ok(svc))
    }

    /// Rotates (on schedule or on request) and returns the fernet key repository.
    async fn fernet(&mut self) -> Result<Result<(), State>, Error> {
        let max = self.obj.spec.tokens.max_active_keys();
        let interval = Duration::from_secs(
            u64::try_from(self.obj.spec.tokens.fernet_rotation_interval_seconds)
                .unwrap_or(86_400)
                .max(60),
        );
        let api = self.secrets();
        let name = self.names.fernet();
        let now = jiff::Timestamp::now();
        let requested = self.obj.annotations().get(ROTATE_NOW_ANNOTATION).cloned();
        let existing = api.get_opt(&name).await?;
        let (repo, last, served) = match &existing {
            None => (KeyRepository::generate(), now, requested.clone()),
            Some(s) => {
                let files: Vec<(String, Vec<u8>)> = s
                    .data
                    .clone()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect();
                let repo = match KeyRepository::from_files(
                    files.iter().map(|(k, v)| (k, v.as_slice())),
                ) {
                    Ok(r) => r,
                    Err(e) => {
                        return Ok(Err(State::Degraded {
                            reason: "KeyMaterialInvalid".into(),
                            message: format!(
                                "Secret {name}: {e}; delete it to generate new keys (live tokens are then invalid)"
                            ),
                        }));
                    }
                };
                let ann = s.annotations();
                let last = ann
                    .get(LAST_ROTATION_ANNOTATION)
                    .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                    .unwrap_or(now);
                let served = ann.get(ROTATED_FOR_ANNOTATION).cloned();
                let (due, asked) =
                    rotation_due(now, last, interval, requested.as_deref(), served.as_deref());
                if due || asked {
                    let rotated = repo.rotate(max);
                    info!(
                        primary = rotated.primary_index(),
                        max_active_keys = max,
                        "rotating fernet keys"
                    );
                    (rotated, now, requested.clone())
                } else if repo.0.len() > usize::try_from(max).unwrap_or(usize::MAX) {
                    (repo.trimmed(max), last, served)
                } else {
                    (repo, last, served)
                }
            }
        };
        let mut secret = objects::secret(&self.owner, &name, "fernet-keys", repo.files());
        let mut ann = BTreeMap::from([(LAST_ROTATION_ANNOTATION.to_string(), last.to_string())]);
        if let Some(s) = served {
            ann.insert(ROTATED_FOR_ANNOTATION.into(), s);
        }
        secret.metadata.annotations = Some(ann);
        let unchanged = existing.as_ref().is_some_and(|e| {
            e.data == secret.data
                && e.annotations().get(LAST_ROTATION_ANNOTATION)
                    == secret.annotations().get(LAST_ROTATION_ANNOTATION)
                && e.annotations().get(ROTATED_FOR_ANNOTATION)
                    == secret.annotations().get(ROTATED_FOR_ANNOTATION)
        });
        if !unchanged {
            runtime::apply(&api, &secret).await?;
        }
        let next = interval.saturating_sub(Duration::from_secs(
            u64::try_from(now.duration_since(last).as_secs()).unwrap_or(0),
        ));
        self.soon(next.max(Duration::from_secs(1)));
        self.status.fernet = Some(KeyRotationStatus {
            max_active_keys: max,
            primary_index: repo.primary_index(),
            last_rotation: Some(last.to_string()),
        });
        Ok(Ok(()))
    }

    /// Drives one Job step for `hash`; retries failed Jobs under a new name after a backoff.
    async fn step(
        &mut self,
        step: &str,
        hash: &str,
        make: impl Fn(String) -> Job,
    ) -> Result<StepState, Error> {
        let idx = match self.status.jobs.iter().position(|r| r.step == step) {
            Some(i) => i,
            None => {
                self.status.jobs.push(JobRecord {
                    step: step.into(),
                    ..JobRecord::default()
                });
                self.status.jobs.len() - 1
            }
        };
        if self.status.jobs[idx].hash != hash {
            self.status.jobs[idx] = JobRecord {
                step: step.into(),
                hash: hash.into(),
                ..JobRecord::default()
            };
        }
        if self.status.jobs[idx].succeeded {
            return Ok(StepState::Done);
        }
        let jobs = self.jobs();
        let rec = self.status.jobs[idx].clone();
        let now = jiff::Timestamp::now();
        if let Some(name) = &rec.job_name
            && let Some(job) = jobs.get_opt(name).await?
        {
            match job_outcome(&job) {
                Some(Ok(())) => {
                    let r = &mut self.status.jobs[idx];
                    r.succeeded = true;
                    r.last_failure = None;
                    r.next_attempt_after = None;
                    self.cleanup_jobs(step, name).await?;
                    if step == "bootstrap" {
                        self.ctx.event(self.obj, EventType::Normal, "BootstrapComplete", format!("keystone-manage bootstrap succeeded (Job {name}): admin user, identity service and endpoints in place")).await;
                    }
                    return Ok(StepState::Done);
                }
                Some(Err(why)) => {
                    let r = &mut self.status.jobs[idx];
                    if r.next_attempt_after.is_none() {
                        let delay = retry_delay(
                            self.ctx.config.job_retry_base,
                            self.ctx.config.job_retry_max,
                            r.attempts,
                        );
                        r.next_attempt_after = Some(
                            now.checked_add(
                                jiff::SignedDuration::try_from(delay).unwrap_or_default(),
                            )
                            .unwrap_or(now)
                            .to_string(),
                        );
                        r.last_failure = Some(format!("Job {name} failed: {why}"));
                    }
                    let after = r
                        .next_attempt_after
                        .as_deref()
                        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                        .unwrap_or(now);
                    let wait = after.duration_since(now);
                    let msg = format!(
                        "{step} attempt {} failed (Job {name}): {why}; retrying in {}s",
                        r.attempts,
                        wait.as_secs().max(0)
                    );
                    if wait.as_secs() > 0 || wait.subsec_nanos() > 0 {
                        self.soon(Duration::from_secs(
                            u64::try_from(wait.as_secs()).unwrap_or(0) + 1,
                        ));
                        return Ok(StepState::Failed(msg));
                    }
                    // Backoff over: fall through to a new attempt.
                }
                None => {
                    self.soon(Duration::from_secs(5));
                    return Ok(StepState::Running(format!(
                        "waiting for Job {name} ({step})"
                    )));
                }
            }
        }
        let r = &mut self.status.jobs[idx];
        r.attempts += 1;
        r.next_attempt_after = None;
        let name = self.names.job(step, hash, r.attempts);
        r.job_name = Some(name.clone());
        let job = make(name.clone());
        match jobs.create(&PostParams::default(), &job).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        info!(job = %name, step, "started Job");
        self.soon(Duration::from_secs(5));
        Ok(StepState::Running(format!(
            "waiting for Job {name} ({step})"
        )))
    }

    /// Deletes the other Jobs of a step once it succeeded (their pods go with them).
    async fn cleanup_jobs(&self, step: &str, keep: &str) -> Result<(), Error> {
        let jobs = self.jobs();
        let sel = format!(
            "{}={},{}={step}",
            objects::INSTANCE_LABEL,
            self.names.base,
            objects::STEP_LABEL
        );
        for j in jobs.list(&ListParams::default().labels(&sel)).await?.items {
            let n = j.name_any();
            let ours = j
                .owner_references()
                .iter()
                .any(|o| Some(&o.uid) == self.obj.meta().uid.as_ref());
            if n != keep && ours {
                let dp = DeleteParams {
                    propagation_policy: Some(PropagationPolicy::Background),
                    ..DeleteParams::default()
                };
                match jobs.delete(&n, &dp).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(())
    }
}

fn db_target(svc: &OpenStackExternalService) -> Result<(String, u16), String> {
    let ep = svc.spec.endpoints.first().ok_or("has no endpoints")?;
    let (host, port) = parse_endpoint(ep)?;
    Ok((host, port.unwrap_or(3306)))
}

/// The token probe: asks the deployed API for a token as the bootstrap admin.
pub async fn token_probe(url: &str, password: &str, timeout: Duration) -> Result<(), String> {
    let body = serde_json::json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": "admin", "domain": {"id": "default"}, "password": password}}},
        "scope": {"project": {"name": "admin", "domain": {"id": "default"}}}}});
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .map_err(|e| e.to_string())?;
    let resp = client
        .post(format!("{}/auth/tokens", url.trim_end_matches('/')))
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("token request to {url} failed: {e}"))?;
    if resp.status().as_u16() == 201 && resp.headers().contains_key("x-subject-token") {
        Ok(())
    } else {
        Err(format!("token request to {url} answered {}", resp.status()))
    }
}

const DB_CA_DIR: &str = "/etc/ssl/db-ca";

async fn pass(p: &mut Pass<'_>) -> Result<State, Error> {
    let obj = p.obj;
    let spec = &obj.spec;
    let mut errors = api::validation::cel_errors(obj);
    for e in spec.validate() {
        if !errors.iter().any(|x| x.path == e.path) {
            errors.push(e);
        }
    }
    if !errors.is_empty() {
        return Ok(State::InvalidSpec(api::validation::summarize(&errors)));
    }
    // Gate: nothing is created before the external services are Ready.
    let db_svc = match p
        .external(&spec.database.service.name, ServiceKind::Database)
        .await?
    {
        Ok(s) => s,
        Err(state) => return Ok(state),
    };
    let cache_svc = match &spec.cache {
        None => None,
        Some(c) => match p.external(&c.name, ServiceKind::Cache).await? {
            Ok(s) => Some(s),
            Err(state) => return Ok(state),
        },
    };
    let Some(db_creds) = db_svc.spec.credentials.clone() else {
        return Ok(State::Blocked {
            reason: "ExternalServiceIncomplete".into(),
            message: format!(
                "external service {} (database) has no credentials to create the database with",
                db_svc.name_any()
            ),
        });
    };
    let (db_host, db_port) = match db_target(&db_svc) {
        Ok(t) => t,
        Err(e) => {
            return Ok(State::Blocked {
                reason: "ExternalServiceIncomplete".into(),
                message: format!(
                    "external service {} (database) endpoint {e}",
                    db_svc.name_any()
                ),
            });
        }
    };
    // The admin password: the user's Secret, or one we generate.
    let admin_ref = match &spec.admin_password_secret {
        Some(r) => r.clone(),
        None => {
            p.ensure_generated(&p.names.admin(), "credentials", || {
                BTreeMap::from([("password".to_string(), secrets::password(32))])
            })
            .await?;
            SecretKeyRef {
                name: p.names.admin(),
                key: "password".into(),
            }
        }
    };
    let Some(admin_password) = p
        .secrets()
        .get_opt(&admin_ref.name)
        .await?
        .and_then(|s| secret_str(&s, &admin_ref.key))
    else {
        return Ok(State::Blocked {
            reason: "SecretMissing".into(),
            message: format!(
                "spec.adminPasswordSecret: Secret {} has no key {}",
                admin_ref.name, admin_ref.key
            ),
        });
    };
    let db_secret = p
        .ensure_generated(&p.names.db(), "credentials", || {
            BTreeMap::from([("password".to_string(), secrets::password(32))])
        })
        .await?;
    let Some(db_password) = secret_str(&db_secret, "password") else {
        return Ok(State::Degraded {
            reason: "SecretInvalid".into(),
            message: format!("Secret {} has no key password", p.names.db()),
        });
    };
    let credential_keys = match p.credential_secret().await? {
        Ok(k) => k,
        Err(state) => return Ok(state),
    };
    if let Err(state) = p.fernet().await? {
        return Ok(state);
    }

    // Render.
    let image = spec
        .template
        .image
        .clone()
        .unwrap_or_else(|| ServiceName::Keystone.default_image(&spec.release));
    let db_ca = db_svc
        .spec
        .tls
        .as_ref()
        .map(|t| (t.ca_secret.name.clone(), t.ca_secret.key.clone()));
    let database = Database {
        host: db_host,
        port: db_port,
        name: spec.database.database_name.clone(),
        user: spec.database.username.clone(),
        password: db_password,
        ca_file: db_ca.as_ref().map(|(_, k)| format!("{DB_CA_DIR}/{k}")),
    };
    let inputs = KeystoneInputs {
        spec,
        database: database.clone(),
        memcache_servers: cache_svc
            .map(|c| c.spec.endpoints.clone())
            .unwrap_or_default(),
        paths: Paths::pod(),
        listen: format!("0.0.0.0:{}", render::PORT),
        workers: 2,
    };
    let conf = render::keystone_conf(&inputs);
    let uwsgi = render::uwsgi_ini(&inputs);
    let config_hash = InputHash::new()
        .add("keystone.conf", &conf)
        .add("uwsgi.ini", &uwsgi)
        .add("image", &image)
        .short();
    let config_secret = objects::secret(
        &p.owner,
        &p.names.config(),
        "config",
        BTreeMap::from([
            ("keystone.conf".to_string(), conf.clone()),
            ("uwsgi.ini".to_string(), uwsgi),
        ]),
    );
    runtime::apply(&p.secrets(), &config_secret).await?;
    p.status.config_hash = Some(config_hash.clone());

    let internal = render::internal_url(&obj.name_any(), &p.ns);
    let public = spec
        .public_endpoint
        .clone()
        .map(|u| format!("{}/v3", u.trim_end_matches('/').trim_end_matches("/v3")))
        .unwrap_or_else(|| internal.clone());
    p.status.endpoint = Some(internal.clone());

    let mut volumes: Vec<(Volume, VolumeMount)> = vec![objects::secret_volume(
        "config",
        &p.names.config(),
        "/etc/keystone",
    )];
    if let Some((ca_secret, _)) = &db_ca {
        volumes.push(objects::secret_volume("db-ca", ca_secret, DB_CA_DIR));
    }
    let keys = [
        objects::secret_volume("fernet-keys", &p.names.fernet(), &Paths::pod().fernet_keys),
        objects::secret_volume(
            "credential-keys",
            &p.names.credential(),
            &Paths::pod().credential_keys,
        ),
    ];

    // Jobs, in order; each waits for the one before.
    let owner = p.owner.clone();
    let db_hash = render::db_init_hash(&database, &db_creds.secret_name);
    let mut env: Vec<_> = render::db_init_env(&database)
        .into_iter()
        .map(|(k, v)| objects::env(&k, v))
        .collect();
    env.push(objects::env_from_secret(
        "DB_ADMIN_USER",
        &db_creds.secret_name,
        &db_creds.username_key,
    ));
    env.push(objects::env_from_secret(
        "DB_ADMIN_PASSWORD",
        &db_creds.secret_name,
        &db_creds.password_key,
    ));
    env.push(objects::env_from_secret(
        "DB_PASSWORD",
        &p.names.db(),
        "password",
    ));
    let db_volumes: Vec<_> = volumes
        .iter()
        .filter(|(v, _)| v.name == "db-ca")
        .cloned()
        .collect();
    let (img, dh) = (image.clone(), db_hash.clone());
    let state = p
        .step("db-init", &db_hash, |name| {
            objects::job(
                &owner,
                JobParams {
                    name,
                    step: "db-init".into(),
                    hash: dh.clone(),
                    image: img.clone(),
                    command: vec!["python3".into(), "-c".into(), render::DB_INIT_SCRIPT.into()],
                    env: env.clone(),
                    volumes: db_volumes.clone(),
                },
            )
        })
        .await?;
    if let Some(s) = step_state(state) {
        return Ok(s);
    }
    let sync_hash = render::db_sync_hash(&image, &conf);
    let (img, sh, vols) = (image.clone(), sync_hash.clone(), volumes.clone());
    let state = p
        .step("db-sync", &sync_hash, |name| {
            objects::job(
                &owner,
                JobParams {
                    name,
                    step: "db-sync".into(),
                    hash: sh.clone(),
                    image: img.clone(),
                    command: vec![
                        "keystone-manage".into(),
                        "--config-file".into(),
                        "/etc/keystone/keystone.conf".into(),
                        "db_sync".into(),
                    ],
                    env: vec![],
                    volumes: vols.clone(),
                },
            )
        })
        .await?;
    if let Some(s) = step_state(state) {
        return Ok(s);
    }
    let args = render::bootstrap_args(spec, &internal, &public);
    let boot_hash = render::bootstrap_hash(&image, &args, &admin_password, &sync_hash);
    let mut boot_cmd = vec![
        "keystone-manage".to_string(),
        "--config-file".into(),
        "/etc/keystone/keystone.conf".into(),
    ];
    boot_cmd.extend(args);
    let mut vols = volumes.clone();
    vols.extend(keys.iter().cloned());
    let (img, bh, bv) = (image.clone(), boot_hash.clone(), vols.clone());
    let admin_env =
        objects::env_from_secret("OS_BOOTSTRAP_PASSWORD", &admin_ref.name, &admin_ref.key);
    let state = p
        .step("bootstrap", &boot_hash, |name| {
            objects::job(
                &owner,
                JobParams {
                    name,
                    step: "bootstrap".into(),
                    hash: bh.clone(),
                    image: img.clone(),
                    command: boot_cmd.clone(),
                    env: vec![admin_env.clone()],
                    volumes: bv.clone(),
                },
            )
        })
        .await?;
    if let Some(s) = step_state(state) {
        return Ok(s);
    }

    // The API.
    let deployments: Api<Deployment> = Api::namespaced(p.ctx.client.clone(), &p.ns);
    let services: Api<Service> = Api::namespaced(p.ctx.client.clone(), &p.ns);
    runtime::apply(
        &services,
        &objects::api_service(&p.owner, &p.names.api(), render::PORT),
    )
    .await?;
    let dep = objects::api_deployment(
        &p.owner,
        &spec.template,
        ApiParams {
            name: p.names.api(),
            image: image.clone(),
            command: vec![
                "uwsgi".into(),
                "--ini".into(),
                "/etc/keystone/uwsgi.ini".into(),
            ],
            port: render::PORT,
            probe_path: "/v3".into(),
            config_hash,
            volumes: vols,
        },
    );
    let applied = runtime::apply(&deployments, &dep).await?;
    // The credential key cycle runs beside the API: a failing migration blocks the next
    // rotation, never a rollout.
    let cycle = p
        .credential_cycle(
            credential_keys,
            credential_keys::MigrateJob {
                image: &image,
                conf: &conf,
                volumes: volumes.clone(),
                key_volume: keys[1].clone(),
                key_dir: &Paths::pod().credential_keys,
            },
        )
        .await?;
    let want = spec.template.replicas.unwrap_or(1);
    let st = applied.status.clone().unwrap_or_default();
    let available = st.available_replicas.unwrap_or(0);
    p.status.available_replicas = Some(available);
    let rolled = st.observed_generation >= applied.metadata.generation
        && st.updated_replicas.unwrap_or(0) >= want;
    if want == 0 {
        return Ok(State::Ready(
            "scaled to 0 replicas; database and keys kept".into(),
        ));
    }
    if !rolled || available < want {
        p.soon(Duration::from_secs(5));
        return Ok(State::Reconciling {
            reason: "RollingOut".into(),
            message: format!(
                "Deployment {}: {available}/{want} pods available with the current configuration",
                p.names.api()
            ),
        });
    }
    if let Some(state) = cycle {
        return Ok(state);
    }
    let key = format!("{}/{}", p.ns, obj.name_any());
    let url = p
        .ctx
        .config
        .keystone_url_overrides
        .get(&key)
        .cloned()
        .unwrap_or(internal);
    match token_probe(&url, &admin_password, p.ctx.config.check_timeout).await {
        Ok(()) => Ok(State::Ready(format!(
            "{available}/{want} pods; {url} issued a token"
        ))),
        Err(e) => {
            p.soon(Duration::from_secs(15));
            Ok(State::Degraded {
                reason: "TokenProbeFailed".into(),
                message: e,
            })
        }
    }
}

fn step_state(s: StepState) -> Option<State> {
    match s {
        StepState::Done => None,
        StepState::Running(m) => Some(State::Reconciling {
            reason: "JobRunning".into(),
            message: m,
        }),
        StepState::Failed(m) => Some(State::Degraded {
            reason: "JobFailed".into(),
            message: m,
        }),
    }
}

async fn reconcile(cached: Arc<Keystone>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let started = Instant::now();
    let ns = cached.namespace().ok_or(Error::Incomplete("namespace"))?;
    // The Job records in status drive what is created next; the watch cache can lag behind
    // our own last status write, so read the object fresh (one GET per pass).
    let Some(obj) = Api::<Keystone>::namespaced(ctx.client.clone(), &ns)
        .get_opt(&cached.name_any())
        .await?
    else {
        return Ok(Action::await_change());
    };
    let obj = Arc::new(obj);
    let reference = obj
        .controller_owner_ref(&())
        .ok_or(Error::Incomplete("uid"))?;
    let before = obj.status.clone().unwrap_or_default();
    let mut p = Pass {
        ctx: &ctx,
        obj: &obj,
        ns: ns.clone(),
        owner: Owner {
            reference,
            namespace: ns.clone(),
            instance: obj.name_any(),
            service: "keystone".into(),
        },
        names: Names {
            base: obj.name_any(),
        },
        status: before.clone(),
        requeue: ctx.config.resync,
    };
    let result = pass(&mut p).await;
    let state = match result {
        Ok(s) => s,
        Err(e) => {
            runtime::observe(&ctx, "Keystone", false, started);
            return Err(e);
        }
    };
    let mut status = p.status;
    runtime::set_state(&mut status, &state, obj.metadata.generation);
    runtime::after_pass(&ctx, &*obj, &before, &status).await;
    let api: Api<Keystone> = Api::namespaced(ctx.client.clone(), &ns);
    runtime::write_status(&api, &obj, &before, &status).await?;
    runtime::observe(&ctx, "Keystone", true, started);
    info!(name = %obj.name_any(), namespace = %ns, state = ?state.summary(), "keystone reconciled");
    Ok(match state {
        State::InvalidSpec(_) => Action::await_change(),
        State::Blocked { .. } => Action::requeue(ctx.config.check_interval.min(p.requeue)),
        _ => Action::requeue(p.requeue),
    })
}

/// Runs the controller until `shutdown` resolves: Keystones, the Jobs, Deployments and Secrets
/// they own, and the external services they name.
pub async fn run(
    ctx: Arc<Ctx>,
    api: Api<Keystone>,
    externals: Api<OpenStackExternalService>,
    jobs: Api<Job>,
    deployments: Api<Deployment>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let controller = Controller::new(api, watcher::Config::default());
    let store = controller.store();
    controller
        .owns(jobs, watcher::Config::default())
        .owns(deployments, watcher::Config::default())
        .watches(
            externals,
            watcher::Config::default(),
            move |svc: OpenStackExternalService| {
                let ns = svc.namespace();
                let name = svc.name_any();
                store
                    .state()
                    .into_iter()
                    .filter(|k| {
                        k.namespace() == ns
                            && (k.spec.database.service.name == name
                                || k.spec.cache.as_ref().is_some_and(|c| c.name == name))
                    })
                    .map(|k| ObjectRef::from_obj(&*k))
                    .collect::<Vec<_>>()
            },
        )
        .graceful_shutdown_on(shutdown)
        .run(reconcile, runtime::error_policy, ctx)
        .for_each(|_| futures::future::ready(()))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped() {
        let (b, m) = (Duration::from_secs(30), Duration::from_secs(600));
        assert_eq!(retry_delay(b, m, 1), Duration::from_secs(30));
        assert_eq!(retry_delay(b, m, 2), Duration::from_secs(60));
        assert_eq!(retry_delay(b, m, 3), Duration::from_secs(120));
        assert_eq!(retry_delay(b, m, 10), m);
        assert_eq!(retry_delay(b, m, u32::MAX), m);
    }

    #[test]
    fn rotation_runs_on_schedule_or_once_per_request() {
        let t0: jiff::Timestamp = "2026-12-01T00:00:00Z".parse().expect("time");
        let day = Duration::from_secs(86_400);
        let later = |s: i64| {
            t0.checked_add(jiff::SignedDuration::from_secs(s))
                .expect("time")
        };
        assert_eq!(
            rotation_due(later(86_399), t0, day, None, None),
            (false, false)
        );
        assert_eq!(
            rotation_due(later(86_400), t0, day, None, None),
            (true, false)
        );
        assert_eq!(
            rotation_due(later(10), t0, day, Some("a"), None),
            (false, true)
        );
        assert_eq!(
            rotation_due(later(10), t0, day, Some("a"), Some("a")),
            (false, false),
            "a request is served once"
        );
        assert_eq!(
            rotation_due(later(10), t0, day, Some("b"), Some("a")),
            (false, true)
        );
    }

    #[test]
    fn job_names_fit_and_carry_hash_and_attempt() {
        let n = Names {
            base: "a-very-long-keystone-name-that-goes-on-and-on".into(),
        };
        let j = n.job("bootstrap", "0123456789", 12);
        assert!(j.len() <= 63, "{j}");
        assert!(j.ends_with("-bootstrap-0123456789-12"));
    }
}
