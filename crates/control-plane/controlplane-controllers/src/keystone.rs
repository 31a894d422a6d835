//! `Keystone`: dependencies → validate → render → Secrets → Jobs (database, db_sync,
//! bootstrap; keyed by the hash of their inputs, retried with bounded backoff) → Deployment and
//! Service → token probe → status. Fernet keys rotate on schedule in their Secret (pods see the
//! new files without a restart); credential keys rotate only after `credential_migrate`
//! (see the `credential_keys` module).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use controlplane_api::common::SecretKeyRef;
use controlplane_api::status::KeyRotationStatus;
use controlplane_api::validation::Validate;
use controlplane_api::{Keystone, KeystoneSpec, ServiceName};
use controlplane_render::keystone::{self as render, KeystoneInputs, Paths};
use controlplane_render::objects::{self, ApiParams};
use controlplane_render::tls as tls_render;
use controlplane_render::{InputHash, KeyRepository};
use kube::{Api, ResourceExt};
use tracing::info;

use crate::runtime::{self, Ctx, Error, State};
use crate::service::{Pass, ServiceKind, Watched, issue_token_verified, or_state, secret_str};
pub use crate::service::{StepState, job_outcome, retry_delay, token_probe};
use controlplane_render::cache::CacheClient;

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

/// The fernet key Secret of Keystone `base`.
fn fernet_name(base: &str) -> String {
    format!("{base}-fernet-keys")
}

/// The credential key Secret of Keystone `base`.
fn credential_name(base: &str) -> String {
    format!("{base}-credential-keys")
}

/// The Secret key holding a Keystone's admin password: the user's, or the generated
/// `<name>-keystone-admin`.
pub fn admin_secret(ks: &Keystone) -> SecretKeyRef {
    ks.spec
        .admin_password_secret
        .clone()
        .unwrap_or_else(|| SecretKeyRef {
            name: format!("{}-keystone-admin", ks.name_any()),
            key: "password".into(),
        })
}

/// The public identity URL (`.../v3`) of a Keystone whose in-cluster one is `internal` (pure).
pub fn public_url(spec: &KeystoneSpec, internal: &str) -> String {
    spec.public_endpoint
        .clone()
        .map(|u| format!("{}/v3", u.trim_end_matches('/').trim_end_matches("/v3")))
        .unwrap_or_else(|| internal.to_string())
}

/// The identity URL the operator reaches Keystone `name` at: `internal` unless
/// `--keystone-url` overrides it.
pub fn operator_url(ctx: &Ctx, ns: &str, name: &str, internal: &str) -> String {
    ctx.config
        .keystone_url_overrides
        .get(&format!("{ns}/{name}"))
        .cloned()
        .unwrap_or_else(|| internal.to_string())
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

impl Pass<'_, Keystone> {
    /// Rotates (on schedule or on request) and returns the fernet key repository.
    async fn fernet(&mut self) -> Result<Result<(), State>, Error> {
        let max = self.obj.spec.tokens.max_active_keys();
        let interval = Duration::from_secs(
            u64::try_from(self.obj.spec.tokens.fernet_rotation_interval_seconds)
                .unwrap_or(86_400)
                .max(60),
        );
        let api = self.secrets();
        let name = fernet_name(&self.names.base);
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
}

impl ServiceKind for Keystone {
    const SERVICE: &'static str = "keystone";

    fn api_tls(&self) -> Option<&controlplane_api::common::ApiTls> {
        self.spec.template.tls.as_ref()
    }

    fn spec_validate(&self) -> Vec<api::FieldError> {
        self.spec.validate()
    }

    fn service_status(&self) -> Option<&controlplane_api::ServiceStatus> {
        self.status.as_ref()
    }

    fn external_services(&self) -> Vec<&str> {
        let mut v = vec![self.spec.database.service.name.as_str()];
        v.extend(self.spec.cache.as_ref().map(|c| c.name.as_str()));
        v
    }

    fn step_event(step: &str, job: &str) -> Option<(&'static str, String)> {
        (step == "bootstrap").then(|| {
            (
                "BootstrapComplete",
                format!(
                    "keystone-manage bootstrap succeeded (Job {job}): admin user, identity service and endpoints in place"
                ),
            )
        })
    }

    fn pass(p: &mut Pass<'_, Self>) -> impl Future<Output = Result<State, Error>> + Send {
        pass(p)
    }
}

async fn pass(p: &mut Pass<'_, Keystone>) -> Result<State, Error> {
    let obj = p.obj;
    let spec = &obj.spec;
    if let Some(state) = p.invalid_spec() {
        return Ok(state);
    }
    // Gate: nothing is created before the external services are Ready.
    let db_secret = p.names.db();
    let db = or_state!(
        p.database(
            &spec.database.service.name,
            spec.database.database_name.clone(),
            spec.database.username.clone(),
            &db_secret,
        )
        .await?
    );
    let cache = or_state!(
        p.cache(
            spec.cache.as_ref().map(|c| c.name.as_str()),
            CacheClient::Oslo
        )
        .await?
    );
    // The admin password: the user's Secret, or one we generate.
    let admin_ref = admin_secret(obj);
    if spec.admin_password_secret.is_none() {
        or_state!(p.generated_password(&p.names.admin()).await?);
    }
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
    let credential_keys = or_state!(p.credential_secret().await?);
    if let Err(state) = p.fernet().await? {
        return Ok(state);
    }

    // Render.
    let image = spec
        .template
        .image
        .clone()
        .unwrap_or_else(|| ServiceName::Keystone.default_image(&spec.release));
    let inputs = KeystoneInputs {
        spec,
        database: db.database.clone(),
        cache: cache.cache.clone(),
        paths: Paths::pod(),
        listen: format!("0.0.0.0:{}", render::PORT),
        workers: 2,
    };
    let conf = render::keystone_conf(&inputs);
    let mut uwsgi = render::uwsgi_ini(&inputs);
    let mut config_hash = InputHash::new()
        .add("keystone.conf", &conf)
        .add("uwsgi.ini", &uwsgi)
        .add("image", &image)
        .short();
    // TLS: uwsgi serves the certificate; its bytes roll the pods when it is renewed.
    let serving = or_state!(
        p.serving_tls(spec.template.tls.as_ref(), spec.public_endpoint.as_deref())
            .await?
    );
    if let Some(s) = &serving {
        let (crt, key) = tls_render::pod_files(tls_render::POD_TLS_DIR);
        uwsgi = tls_render::uwsgi_https(&uwsgi, &crt, &key);
        config_hash = tls_render::config_hash(&config_hash, Some(&s.cert), Some(&s.ca));
    }
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
    config_hash = cache.config_hash(&config_hash);
    p.status.config_hash = Some(config_hash.clone());

    let mut internal = render::internal_url(&obj.name_any(), &p.ns);
    if serving.is_some() {
        internal = tls_render::https_url(&internal);
    }
    let public = public_url(spec, &internal);
    p.status.endpoint = Some(internal.clone());

    let mut volumes = vec![objects::secret_volume(
        "config",
        &p.names.config(),
        "/etc/keystone",
    )];
    volumes.extend(db.ca_volume.iter().cloned());
    volumes.extend(cache.volumes.iter().cloned());
    let keys = [
        objects::secret_volume(
            "fernet-keys",
            &fernet_name(&p.names.base),
            &Paths::pod().fernet_keys,
        ),
        objects::secret_volume(
            "credential-keys",
            &credential_name(&p.names.base),
            &Paths::pod().credential_keys,
        ),
    ];

    // Jobs, in order; each waits for the one before.
    if let Some(s) = p.db_init(&image, &db, &db_secret).await? {
        return Ok(s);
    }
    let sync_hash = render::db_sync_hash(&image, &conf);
    let sync_cmd = vec![
        "keystone-manage".into(),
        "--config-file".into(),
        "/etc/keystone/keystone.conf".into(),
        "db_sync".into(),
    ];
    if let Some(s) = p
        .job_step(
            "db-sync",
            &sync_hash,
            &image,
            sync_cmd,
            vec![],
            volumes.clone(),
        )
        .await?
    {
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
    let admin_env =
        objects::env_from_secret("OS_BOOTSTRAP_PASSWORD", &admin_ref.name, &admin_ref.key);
    if let Some(s) = p
        .job_step(
            "bootstrap",
            &boot_hash,
            &image,
            boot_cmd,
            vec![admin_env],
            vols.clone(),
        )
        .await?
    {
        return Ok(s);
    }

    // The API.
    let mut dep = objects::api_deployment(
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
    if let Some(s) = &serving {
        tls_render::serve_tls(&mut dep, &s.secret);
    }
    let applied = p.apply_api(&dep, render::PORT).await?;
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
                fernet_volume: keys[0].clone(),
                key_dir: &Paths::pod().credential_keys,
            },
        )
        .await?;
    let want = spec.template.replicas.unwrap_or(1);
    let available = or_state!(p.rollout(&applied, want).await?);
    if let Some(state) = cycle {
        return Ok(state);
    }
    let url = operator_url(p.ctx, &p.ns, &obj.name_any(), &internal);
    let timeout = p.ctx.config.check_timeout;
    let probe = issue_token_verified(&url, &admin_password, timeout, p.api_ca.as_deref()).await;
    let outcome = match probe {
        Ok(_) => Ok(format!("{available}/{want} pods; {url} issued a token")),
        Err(e) => Err(State::Degraded {
            reason: "TokenProbeFailed".into(),
            message: e,
        }),
    };
    Ok(p.probed(
        outcome,
        &format!("{available}/{want} pods; the token probe of {url}"),
    ))
}

/// Runs the controller until `shutdown` resolves: Keystones, the Jobs, Deployments and Secrets
/// they own, and the external services they name.
pub async fn run(
    ctx: Arc<Ctx>,
    api: Api<Keystone>,
    watched: Watched,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    crate::service::run(ctx, api, watched, shutdown).await;
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
