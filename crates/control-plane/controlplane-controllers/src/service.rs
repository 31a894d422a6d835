//! The pipeline every OpenStack service kind runs on: dependencies (external services, the
//! Keystone a service registers in) → validate → render → Secrets (generated passwords kept
//! across passes) → Jobs keyed by the hash of their inputs, retried with bounded backoff and
//! the reason in status → Deployment and Service rolled on config change → an authenticated
//! probe of the deployed API → status, Events, metrics. A kind implements [`ServiceKind`]: its
//! pass strings these steps together; [`run`] drives it.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use controlplane_api::common::SecretKeyRef;
use controlplane_api::condition_types as ct;
use controlplane_api::external::{CredentialsRef, ServiceKind as ExternalKind};
use controlplane_api::status::Conditioned;
use controlplane_api::validation::parse_endpoint;
use controlplane_api::{JobRecord, Keystone, OpenStackExternalService, ServiceStatus};
use controlplane_render::InputHash;
use controlplane_render::cache::{Cache, CacheClient, CacheSasl, CacheTls};
use controlplane_render::database::{self, DB_INIT_SCRIPT, Database};
use controlplane_render::objects::{self, JobParams, Owner};
use controlplane_render::secrets;
use controlplane_render::service_user::{self, ServiceEntry};
use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret, Service, Volume, VolumeMount};
use kube::api::{DeleteParams, ListParams, PostParams, PropagationPolicy};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::info;

use crate::runtime::{self, Ctx, Error, State};

/// Where a database's CA bundle is mounted in Jobs and pods.
pub const DB_CA_DIR: &str = "/etc/ssl/db-ca";
/// Where the cache's (memcached's) CA bundle is mounted in pods.
pub const CACHE_CA_DIR: &str = "/etc/ssl/cache-ca";
/// Where the cache's client certificate Secret (`tls.crt`, `tls.key`) is mounted in pods.
pub const CACHE_CLIENT_DIR: &str = "/etc/ssl/cache-client";

/// The `cache` external service as a service's pods use it.
#[derive(Clone, Debug, Default)]
pub struct ResolvedCache {
    /// What the renderers read (no servers: no cache).
    pub cache: Cache,
    /// The CA bundle's and client certificate's volumes, for every pod given the options.
    pub volumes: Vec<(Volume, VolumeMount)>,
    /// Hash of the CA bundle and client certificate bytes, with TLS.
    pub tls_hash: Option<String>,
}

impl ResolvedCache {
    /// `config_hash` extended with the TLS material's hash: a new CA or client certificate
    /// rolls the pods (they read the files at start). Unchanged without TLS.
    pub fn config_hash(&self, config_hash: &str) -> String {
        match &self.tls_hash {
            None => config_hash.to_string(),
            Some(h) => InputHash::new()
                .add("config", config_hash)
                .add("cache-tls", h)
                .short(),
        }
    }
}

/// Unwraps a `Result<T, State>` in a pass: the state ends the pass.
macro_rules! or_state {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(state) => return Ok(state),
        }
    };
}
pub(crate) use or_state;

/// A service kind on the pipeline.
pub trait ServiceKind:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + kube::CustomResourceExt
    + Clone
    + DeserializeOwned
    + Serialize
    + Debug
    + Send
    + Sync
    + 'static
{
    /// Service name: the `app.kubernetes.io/name` label and the infix of generated names.
    const SERVICE: &'static str;
    /// The spec, validated before anything else.
    fn spec_validate(&self) -> Vec<api::FieldError>;
    /// `status`.
    fn service_status(&self) -> Option<&ServiceStatus>;
    /// The external services the spec names (a change of one reconciles this object).
    fn external_services(&self) -> Vec<&str>;
    /// The Keystone the service registers in (a change of it reconciles this object).
    fn keystone_name(&self) -> Option<&str> {
        None
    }
    /// The API's TLS settings (`spec.template.tls`): a change of the user's certificate Secret
    /// it names reconciles this object.
    fn api_tls(&self) -> Option<&controlplane_api::common::ApiTls> {
        None
    }
    /// An Event (reason, note) worth publishing when `step` succeeds with Job `job`.
    fn step_event(_step: &str, _job: &str) -> Option<(&'static str, String)> {
        None
    }
    /// One pass of the pipeline for this kind.
    fn pass(p: &mut Pass<'_, Self>) -> impl Future<Output = Result<State, Error>> + Send;
}

/// Names of the objects of one service CR.
pub struct Names {
    /// CR name.
    pub base: String,
    /// Service name (`keystone`, `placement`).
    pub service: &'static str,
}

impl Names {
    /// `<base>-<suffix>`.
    pub fn n(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.base)
    }
    /// Generated admin password Secret (Keystone).
    pub fn admin(&self) -> String {
        self.n(&format!("{}-admin", self.service))
    }
    /// Generated database password Secret.
    pub fn db(&self) -> String {
        self.n(&format!("{}-db", self.service))
    }
    /// Generated service-user password Secret.
    pub fn service_user(&self) -> String {
        self.n(&format!("{}-service-user", self.service))
    }
    /// Rendered configuration Secret.
    pub fn config(&self) -> String {
        self.n(&format!("{}-config", self.service))
    }
    /// Deployment and Service of the API.
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

/// Whether Deployment `d` runs its current pod template on at least `want` available pods
/// (pure): the controller observed its generation and updated and available pods suffice.
pub fn rolled_out(d: &Deployment, want: i32) -> bool {
    let Some(st) = d.status.as_ref() else {
        return false;
    };
    st.observed_generation >= d.metadata.generation
        && st.updated_replicas.unwrap_or(0) >= want
        && st.available_replicas.unwrap_or(0) >= want
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

impl StepState {
    /// The pass's state while the step is not done; `None` once it is.
    pub fn blocking(self) -> Option<State> {
        match self {
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
}

/// A failed step during its backoff at `now` (pure): the Degraded message and how long until
/// the next attempt; `None` once the backoff is over. The message names the next attempt's
/// absolute time, never a countdown: every pass during the backoff then writes the same
/// condition, so the status is not rewritten and the Warning Event is sent once (a countdown
/// sent it again from the pass the status write itself triggered).
pub fn backoff(
    step: &str,
    rec: &JobRecord,
    job: &str,
    why: &str,
    now: jiff::Timestamp,
) -> Option<(String, Duration)> {
    let after = rec
        .next_attempt_after
        .as_deref()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .unwrap_or(now);
    let wait = Duration::try_from(after.duration_since(now)).ok()?;
    if wait.is_zero() {
        return None;
    }
    Some((
        format!(
            "{step} attempt {} failed (Job {job}): {why}; next attempt at {}",
            rec.attempts,
            after.round(jiff::Unit::Second).unwrap_or(after)
        ),
        wait,
    ))
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

/// A key of a Secret's data as text.
pub fn secret_str(s: &Secret, key: &str) -> Option<String> {
    s.data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
}

fn db_target(svc: &OpenStackExternalService) -> Result<(String, u16), String> {
    let ep = svc.spec.endpoints.first().ok_or("has no endpoints")?;
    let (host, port) = parse_endpoint(ep)?;
    Ok((host, port.unwrap_or(3306)))
}

/// A service's database resolved from its external service and the generated password.
#[derive(Clone, Debug)]
pub struct ResolvedDatabase {
    /// Connection settings as the pods see them.
    pub database: Database,
    /// The external service's admin credentials (the database Job creates the database).
    pub admin: CredentialsRef,
    /// The CA bundle's volume and mount when the database is reached over TLS.
    pub ca_volume: Option<(Volume, VolumeMount)>,
}

/// A Ready Keystone as a dependent service uses it.
#[derive(Clone, Debug)]
pub struct KeystoneAccess {
    /// In-cluster identity URL (`.../v3`): what pods use.
    pub internal_url: String,
    /// Public identity URL (`.../v3`): what clients are sent to.
    pub public_url: String,
    /// Identity URL the operator itself reaches (the in-cluster one unless overridden).
    pub operator_url: String,
    /// Region of the identity endpoints (services register theirs there).
    pub region: String,
    /// The admin password's Secret key.
    pub admin_secret: SecretKeyRef,
    /// The admin password (for the probe; Jobs read it from the Secret).
    pub admin_password: String,
    /// The CA bundle (PEM) Keystone's certificate verifies with, when it serves TLS.
    pub ca: Option<String>,
}

/// The state of one pass over one service CR.
pub struct Pass<'a, K: ServiceKind> {
    /// Shared controller state.
    pub ctx: &'a Ctx,
    /// The CR, read fresh at the start of the pass.
    pub obj: &'a K,
    /// Its namespace.
    pub ns: String,
    /// Owner reference and labels of what it creates.
    pub owner: Owner,
    /// Names of what it creates.
    pub names: Names,
    /// The status being built.
    pub status: ServiceStatus,
    /// When to look again at the latest.
    pub requeue: Duration,
    /// The CA (PEM) the API's own certificate verifies with, when it serves TLS (the
    /// operator's probe verifies it).
    pub api_ca: Option<String>,
    /// The certificate the API is to serve (set by [`Pass::serving_tls`]): the `TLSReady`
    /// condition names it once the pass ends Ready.
    pub served: Option<Served>,
    /// Set by [`Pass::serving_tls`] when the API serves plain HTTP: a `TLSReady` condition of
    /// an earlier TLS configuration is dropped.
    pub plain_http: bool,
}

/// The certificate an API serves, as the `TLSReady` condition reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Served {
    /// The `kubernetes.io/tls` Secret.
    pub secret: String,
    /// Its certificate's `notAfter` (Unix seconds), when it parses.
    pub not_after: Option<i64>,
}

/// The `TLSReady` condition for an API serving `served` (pure): True once the pass is Ready
/// (the Deployment runs the certificate's pod template and the probe verified it), else False
/// naming what is not served yet.
pub fn tls_condition(served: &Served, ready: bool) -> api::Condition {
    let until = served
        .not_after
        .and_then(|t| jiff::Timestamp::from_second(t).ok())
        .map_or_else(|| "unknown".to_string(), |t| t.to_string());
    if ready {
        api::Condition::new(
            ct::TLS_READY,
            true,
            "CertificateServed",
            format!(
                "serving the certificate of Secret {} (notAfter {until})",
                served.secret
            ),
        )
    } else {
        api::Condition::new(
            ct::TLS_READY,
            false,
            "CertificateNotServedYet",
            format!(
                "the certificate of Secret {} (notAfter {until}) is not served by every pod yet",
                served.secret
            ),
        )
    }
}

impl<K: ServiceKind> Pass<'_, K> {
    /// Secrets of the namespace.
    pub fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.ctx.client.clone(), &self.ns)
    }

    /// Jobs of the namespace.
    pub fn jobs(&self) -> Api<Job> {
        Api::namespaced(self.ctx.client.clone(), &self.ns)
    }

    /// Deployments of the namespace.
    pub fn deployments(&self) -> Api<Deployment> {
        Api::namespaced(self.ctx.client.clone(), &self.ns)
    }

    /// Looks again within `d` at the latest.
    pub fn soon(&mut self, d: Duration) {
        self.requeue = self.requeue.min(d);
    }

    /// The InvalidSpec state when the spec fails the schema's CEL rules or validation.
    pub fn invalid_spec(&self) -> Option<State> {
        let mut errors = api::validation::cel_errors(self.obj);
        for e in self.obj.spec_validate() {
            if !errors.iter().any(|x| x.path == e.path) {
                errors.push(e);
            }
        }
        (!errors.is_empty()).then(|| State::InvalidSpec(api::validation::summarize(&errors)))
    }

    /// A Secret we generate once and never overwrite (passwords, keys).
    pub async fn ensure_generated(
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

    /// A generated password in Secret `name` (key `password`), created the first time and kept
    /// across passes.
    pub async fn generated_password(&self, name: &str) -> Result<Result<String, State>, Error> {
        let s = self
            .ensure_generated(name, "credentials", || {
                BTreeMap::from([("password".to_string(), secrets::password(32))])
            })
            .await?;
        Ok(secret_str(&s, "password").ok_or_else(|| State::Degraded {
            reason: "SecretInvalid".into(),
            message: format!("Secret {name} has no key password; delete it to generate one"),
        }))
    }

    /// An external service of type `want` that is Ready, or the Blocked state naming it.
    pub async fn external(
        &self,
        name: &str,
        want: ExternalKind,
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

    /// The optional `cache` external service (memcached) as `client` uses it: its endpoints,
    /// TLS (CA bundle and client certificate mounted from their Secrets) and SASL credentials
    /// (read from its Secret, rendered into the config Secret only). A cache `client` cannot
    /// honour fully (see [`Cache::unsupported`]) is refused as InvalidSpec naming the field,
    /// never rendered weaker than asked.
    pub async fn cache(
        &self,
        name: Option<&str>,
        client: CacheClient,
    ) -> Result<Result<ResolvedCache, State>, Error> {
        let Some(name) = name else {
            return Ok(Ok(ResolvedCache::default()));
        };
        let svc = match self.external(name, ExternalKind::Cache).await? {
            Ok(s) => s,
            Err(state) => return Ok(Err(state)),
        };
        let secrets = self.secrets();
        let missing = |message: String| {
            Ok(Err(State::Blocked {
                reason: "SecretMissing".into(),
                message,
            }))
        };
        let mut sasl = None;
        if let Some(creds) = &svc.spec.credentials {
            let secret = secrets.get_opt(&creds.secret_name).await?;
            let get = |k: &str| secret.as_ref().and_then(|s| secret_str(s, k));
            let (Some(username), Some(password)) =
                (get(&creds.username_key), get(&creds.password_key))
            else {
                return missing(format!(
                    "external service {name} (cache): Secret {} lacks key {} or {}",
                    creds.secret_name, creds.username_key, creds.password_key
                ));
            };
            sasl = Some(CacheSasl {
                username: username.trim().to_string(),
                password: password.trim_end_matches(['\r', '\n']).to_string(),
            });
        }
        let mut tls = None;
        let mut volumes = Vec::new();
        let mut tls_hash = None;
        if let Some(t) = &svc.spec.tls {
            let ca = secrets
                .get_opt(&t.ca_secret.name)
                .await?
                .and_then(|s| secret_str(&s, &t.ca_secret.key));
            let Some(ca) = ca else {
                return missing(format!(
                    "external service {name} (cache): CA Secret {} lacks key {}",
                    t.ca_secret.name, t.ca_secret.key
                ));
            };
            let mut hash = InputHash::new().add("ca", &ca);
            volumes.push(objects::secret_volume(
                "cache-ca",
                &t.ca_secret.name,
                CACHE_CA_DIR,
            ));
            let mut client_cert = None;
            if let Some(c) = &t.client_cert_secret {
                let s = secrets.get_opt(&c.name).await?;
                let (Some(crt), Some(key)) = (
                    s.as_ref().and_then(|s| secret_str(s, "tls.crt")),
                    s.as_ref().and_then(|s| secret_str(s, "tls.key")),
                ) else {
                    return missing(format!(
                        "external service {name} (cache): client certificate Secret {} lacks tls.crt or tls.key",
                        c.name
                    ));
                };
                hash = hash.add("tls.crt", crt).add("tls.key", key);
                volumes.push(objects::secret_volume(
                    "cache-client",
                    &c.name,
                    CACHE_CLIENT_DIR,
                ));
                client_cert = Some((
                    format!("{CACHE_CLIENT_DIR}/tls.crt"),
                    format!("{CACHE_CLIENT_DIR}/tls.key"),
                ));
            }
            tls_hash = Some(hash.short());
            tls = Some(CacheTls {
                ca_file: format!("{CACHE_CA_DIR}/{}", t.ca_secret.key),
                client_cert,
                verify: t.verify,
            });
        }
        let cache = Cache {
            servers: svc.spec.endpoints.clone(),
            tls,
            sasl,
        };
        if let Some(why) = cache.unsupported(client) {
            return Ok(Err(State::InvalidSpec(format!(
                "spec.cache: external service {name} (cache) {why}"
            ))));
        }
        Ok(Ok(ResolvedCache {
            cache,
            volumes,
            tls_hash,
        }))
    }

    /// The `database` external service `service` (Ready, with admin credentials and a valid
    /// endpoint) and the service's database on it; the user's password is generated into
    /// Secret `password_secret` once the service is Ready.
    pub async fn database(
        &self,
        service: &str,
        name: String,
        user: String,
        password_secret: &str,
    ) -> Result<Result<ResolvedDatabase, State>, Error> {
        let svc = match self.external(service, ExternalKind::Database).await? {
            Ok(s) => s,
            Err(state) => return Ok(Err(state)),
        };
        let Some(admin) = svc.spec.credentials.clone() else {
            return Ok(Err(State::Blocked {
                reason: "ExternalServiceIncomplete".into(),
                message: format!(
                    "external service {service} (database) has no credentials to create the database with"
                ),
            }));
        };
        let (host, port) = match db_target(&svc) {
            Ok(t) => t,
            Err(e) => {
                return Ok(Err(State::Blocked {
                    reason: "ExternalServiceIncomplete".into(),
                    message: format!("external service {service} (database) endpoint {e}"),
                }));
            }
        };
        let password = match self.generated_password(password_secret).await? {
            Ok(p) => p,
            Err(state) => return Ok(Err(state)),
        };
        let ca = svc.spec.tls.as_ref().map(|t| t.ca_secret.clone());
        Ok(Ok(ResolvedDatabase {
            database: Database {
                host,
                port,
                name,
                user,
                password,
                ca_file: ca.as_ref().map(|c| format!("{DB_CA_DIR}/{}", c.key)),
                verify: svc.spec.tls.as_ref().map(|t| t.verify).unwrap_or_default(),
                server_name: svc.spec.tls.as_ref().and_then(|t| t.server_name.clone()),
            },
            admin,
            ca_volume: ca.map(|c| objects::secret_volume("db-ca", &c.name, DB_CA_DIR)),
        }))
    }

    /// A Keystone that is Ready at its current generation, and how to reach it.
    pub async fn keystone(&mut self, name: &str) -> Result<Result<KeystoneAccess, State>, Error> {
        let api: Api<Keystone> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        let Some(ks) = api.get_opt(name).await? else {
            return Ok(Err(State::Blocked {
                reason: "KeystoneMissing".into(),
                message: format!("Keystone {name} not found"),
            }));
        };
        let st = ks.status.clone().unwrap_or_default();
        let ready = st.observed_generation == ks.metadata.generation
            && st.condition(ct::READY).is_some_and(|c| c.is_true());
        if !ready && !self.in_grace("Keystone", name) {
            let why = st
                .condition(ct::READY)
                .and_then(|c| c.message.clone())
                .unwrap_or_else(|| "no status yet".into());
            return Ok(Err(State::Blocked {
                reason: "KeystoneNotReady".into(),
                message: format!("Keystone {name} is not Ready: {why}"),
            }));
        }
        let internal = st
            .endpoint
            .clone()
            .unwrap_or_else(|| controlplane_render::keystone::internal_url(name, &self.ns));
        let admin_secret = crate::keystone::admin_secret(&ks);
        let Some(admin_password) = self
            .secrets()
            .get_opt(&admin_secret.name)
            .await?
            .and_then(|s| secret_str(&s, &admin_secret.key))
        else {
            return Ok(Err(State::Blocked {
                reason: "SecretMissing".into(),
                message: format!(
                    "Keystone {name}: Secret {} has no key {}",
                    admin_secret.name, admin_secret.key
                ),
            }));
        };
        let ca = crate::tls::keystone_ca(&self.ctx.client, &ks).await?;
        if ks.spec.template.tls.is_some() && ca.is_none() {
            return Ok(Err(State::Blocked {
                reason: "KeystoneCaMissing".into(),
                message: format!("Keystone {name} serves TLS but its CA is not readable yet"),
            }));
        }
        Ok(Ok(KeystoneAccess {
            ca,
            public_url: crate::keystone::public_url(&ks.spec, &internal),
            operator_url: crate::keystone::operator_url(self.ctx, &self.ns, name, &internal),
            internal_url: internal,
            region: ks.spec.region.clone(),
            admin_secret,
            admin_password,
        }))
    }

    /// The API's serving certificate when `tls` is set (the user's Secret, or `<name>-api-tls`
    /// issued from the namespace CA for the Service's names and the public endpoint's host):
    /// the operator's probe then verifies the API with its CA, and the `TLSReady` condition
    /// names it. `Ok(None)` for plain HTTP.
    pub async fn serving_tls(
        &mut self,
        tls: Option<&controlplane_api::common::ApiTls>,
        public_endpoint: Option<&str>,
    ) -> Result<Result<Option<crate::tls::Serving>, State>, Error> {
        let extra: Vec<String> = public_endpoint
            .and_then(controlplane_render::tls::url_host)
            .into_iter()
            .collect();
        self.serving_tls_names(tls, &extra).await
    }

    /// [`Pass::serving_tls`] with the certificate's names beyond the API Service's given
    /// whole: `extra` (public hosts, other Services of the same certificate).
    pub async fn serving_tls_names(
        &mut self,
        tls: Option<&controlplane_api::common::ApiTls>,
        extra: &[String],
    ) -> Result<Result<Option<crate::tls::Serving>, State>, Error> {
        self.plain_http = tls.is_none();
        let Some(t) = tls else {
            return Ok(Ok(None));
        };
        let s = match crate::tls::serving(
            &self.ctx.client,
            &self.ns,
            &self.owner,
            &self.names.api(),
            t,
            extra,
        )
        .await?
        {
            Ok(s) => s,
            Err(state) => return Ok(Err(state)),
        };
        self.api_ca = Some(s.ca.clone());
        self.served = Some(Served {
            secret: s.secret.clone(),
            not_after: controlplane_render::tls::not_after(&s.cert),
        });
        Ok(Ok(Some(s)))
    }

    /// Drives one Job step for `hash`; retries failed Jobs under a new name after a backoff.
    pub async fn step(
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
                    if let Some((reason, note)) = K::step_event(step, name) {
                        self.ctx
                            .event(self.obj, EventType::Normal, reason, note)
                            .await;
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
                    if let Some((msg, wait)) = backoff(step, r, name, &why, now) {
                        self.soon(wait + Duration::from_secs(1));
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

    /// Runs one Job of `image` with `command`: a step of the pipeline, keyed by `hash`.
    pub async fn job_step(
        &mut self,
        step: &str,
        hash: &str,
        image: &str,
        command: Vec<String>,
        env: Vec<k8s_openapi::api::core::v1::EnvVar>,
        volumes: Vec<(Volume, VolumeMount)>,
    ) -> Result<Option<State>, Error> {
        let state = self
            .job_step_state(step, hash, image, command, env, volumes)
            .await?;
        Ok(state.blocking())
    }

    /// [`Pass::job_step`] for a step that does not end the pass: where it is.
    pub async fn job_step_state(
        &mut self,
        step: &str,
        hash: &str,
        image: &str,
        command: Vec<String>,
        env: Vec<k8s_openapi::api::core::v1::EnvVar>,
        volumes: Vec<(Volume, VolumeMount)>,
    ) -> Result<StepState, Error> {
        let owner = self.owner.clone();
        self.step(step, hash, |name| {
            objects::job(
                &owner,
                JobParams {
                    name,
                    step: step.into(),
                    hash: hash.into(),
                    image: image.into(),
                    command: command.clone(),
                    env: env.clone(),
                    volumes: volumes.clone(),
                },
            )
        })
        .await
    }

    /// The `db-init` step: creates the database and the service's user (password from Secret
    /// `password_secret`, key `password`) with the external service's admin credentials.
    pub async fn db_init(
        &mut self,
        image: &str,
        db: &ResolvedDatabase,
        password_secret: &str,
    ) -> Result<Option<State>, Error> {
        self.db_init_as("db-init", image, db, password_secret).await
    }

    /// [`Pass::db_init`] under step name `step`, for a service with several databases.
    pub async fn db_init_as(
        &mut self,
        step: &str,
        image: &str,
        db: &ResolvedDatabase,
        password_secret: &str,
    ) -> Result<Option<State>, Error> {
        let hash = database::db_init_hash(&db.database, &db.admin.secret_name);
        let mut env: Vec<_> = database::db_init_env(&db.database)
            .into_iter()
            .map(|(k, v)| objects::env(&k, v))
            .collect();
        env.push(objects::env_from_secret(
            "DB_ADMIN_USER",
            &db.admin.secret_name,
            &db.admin.username_key,
        ));
        env.push(objects::env_from_secret(
            "DB_ADMIN_PASSWORD",
            &db.admin.secret_name,
            &db.admin.password_key,
        ));
        env.push(objects::env_from_secret(
            "DB_PASSWORD",
            password_secret,
            "password",
        ));
        self.job_step(
            step,
            &hash,
            image,
            vec!["python3".into(), "-c".into(), DB_INIT_SCRIPT.into()],
            env,
            db.ca_volume.iter().cloned().collect(),
        )
        .await
    }

    /// The `service-user` step: the service's user (password from Secret `password_secret`),
    /// its catalog service and endpoints, registered with Keystone's admin credentials.
    pub async fn service_user(
        &mut self,
        image: &str,
        entry: &ServiceEntry,
        ks: &KeystoneAccess,
        password_secret: &str,
        service_password: &str,
    ) -> Result<Option<State>, Error> {
        self.service_user_as(
            "service-user",
            image,
            entry,
            ks,
            password_secret,
            service_password,
        )
        .await
    }

    /// [`Pass::service_user`] under step name `step`, for a service with several catalog
    /// entries (each its own Job; the user is the same).
    pub async fn service_user_as(
        &mut self,
        step: &str,
        image: &str,
        entry: &ServiceEntry,
        ks: &KeystoneAccess,
        password_secret: &str,
        service_password: &str,
    ) -> Result<Option<State>, Error> {
        let hash = service_user::hash(
            image,
            entry,
            &ks.internal_url,
            &ks.admin_password,
            service_password,
        );
        let mut env: Vec<_> = service_user::env(entry, &ks.internal_url)
            .into_iter()
            .map(|(k, v)| objects::env(&k, v))
            .collect();
        env.push(objects::env_from_secret(
            "OS_PASSWORD",
            &ks.admin_secret.name,
            &ks.admin_secret.key,
        ));
        env.push(objects::env_from_secret(
            "SERVICE_PASSWORD",
            password_secret,
            "password",
        ));
        // Keystone over TLS: the script verifies it with the CA handed over in the environment.
        let script = match &ks.ca {
            Some(ca) => {
                env.push(objects::env(controlplane_render::tls::CA_ENV, ca.clone()));
                controlplane_render::tls::with_env_ca(service_user::SCRIPT)
            }
            None => service_user::SCRIPT.to_string(),
        };
        self.job_step(
            step,
            &hash,
            image,
            vec!["python3".into(), "-c".into(), script],
            env,
            vec![],
        )
        .await
    }

    /// Applies the API Service and Deployment; returns the Deployment as applied.
    pub async fn apply_api(&self, dep: &Deployment, port: u16) -> Result<Deployment, Error> {
        let services: Api<Service> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        runtime::apply(
            &services,
            &objects::api_service(&self.owner, &self.names.api(), port),
        )
        .await?;
        let deployments: Api<Deployment> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        Ok(runtime::apply(&deployments, dep).await?)
    }

    /// Whether the applied Deployment runs the current pod template on `want` available pods:
    /// Ok(available) when it does, else the state to report (Ready when scaled to 0; Degraded
    /// naming the container when its pods cannot start, see [`crate::rollout`]).
    pub async fn rollout(
        &mut self,
        applied: &Deployment,
        want: i32,
    ) -> Result<Result<i32, State>, Error> {
        let st = applied.status.clone().unwrap_or_default();
        let available = st.available_replicas.unwrap_or(0);
        self.status.available_replicas = Some(available);
        if want == 0 {
            return Ok(Err(State::Ready(
                "scaled to 0 replicas; database and Secrets kept".into(),
            )));
        }
        if rolled_out(applied, want) {
            return Ok(Ok(available));
        }
        Ok(Err(self.not_rolled_out(applied, want).await?))
    }

    /// The state of a Deployment that does not run its current template on `want` available
    /// pods yet: Degraded when its pods cannot start or its progress deadline passed (read from
    /// the pods' container statuses), else Reconciling.
    pub async fn not_rolled_out(&mut self, dep: &Deployment, want: i32) -> Result<State, Error> {
        let pods = self.pods_of(dep).await?;
        if let Some(state) = crate::rollout::diagnose(dep, &pods) {
            // Pods are not watched: look again for the recovery.
            self.soon(Duration::from_secs(15));
            return Ok(state);
        }
        let available = dep
            .status
            .as_ref()
            .and_then(|s| s.available_replicas)
            .unwrap_or(0);
        self.soon(Duration::from_secs(5));
        Ok(State::Reconciling {
            reason: "RollingOut".into(),
            message: format!(
                "Deployment {}: {available}/{want} pods available with the current configuration",
                dep.name_any()
            ),
        })
    }

    /// The pods Deployment `dep` selects (by its `matchLabels`).
    async fn pods_of(&self, dep: &Deployment) -> Result<Vec<Pod>, Error> {
        let Some(labels) = dep
            .spec
            .selector
            .match_labels
            .as_ref()
            .filter(|l| !l.is_empty())
        else {
            return Ok(Vec::new());
        };
        let sel = labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        let pods: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        Ok(pods.list(&ListParams::default().labels(&sel)).await?.items)
    }

    /// Applies a component's Deployment and, when it listens, its Service; returns the
    /// Deployment as applied.
    pub async fn apply_component(
        &self,
        dep: &Deployment,
        service: Option<&Service>,
    ) -> Result<Deployment, Error> {
        if let Some(svc) = service {
            let services: Api<Service> = Api::namespaced(self.ctx.client.clone(), &self.ns);
            runtime::apply(&services, svc).await?;
        }
        let deployments: Api<Deployment> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        Ok(runtime::apply(&deployments, dep).await?)
    }

    /// [`Pass::rollout`] over several Deployments (a service of several components): Ok(the
    /// fewest available pods) once every one runs its current template on `want` pods, else
    /// the state naming the first that does not.
    pub async fn rollout_all(
        &mut self,
        applied: &[Deployment],
        want: i32,
    ) -> Result<Result<i32, State>, Error> {
        if want == 0 {
            self.status.available_replicas = Some(0);
            return Ok(Err(State::Ready(
                "scaled to 0 replicas; database and Secrets kept".into(),
            )));
        }
        let mut fewest = i32::MAX;
        for d in applied {
            let available = d
                .status
                .as_ref()
                .and_then(|s| s.available_replicas)
                .unwrap_or(0);
            if !rolled_out(d, want) {
                self.status.available_replicas = Some(available.min(fewest));
                return Ok(Err(self.not_rolled_out(d, want).await?));
            }
            fewest = fewest.min(available);
        }
        self.status.available_replicas = Some(fewest);
        Ok(Ok(fewest))
    }

    /// A service CR of kind `T` (same namespace) that is Ready at its current generation, or
    /// the Blocked state naming it.
    pub async fn ready_peer<T: ServiceKind>(
        &mut self,
        name: &str,
    ) -> Result<Result<T, State>, Error> {
        let kind = T::kind(&()).to_string();
        let api: Api<T> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        let Some(peer) = api.get_opt(name).await? else {
            return Ok(Err(State::Blocked {
                reason: format!("{kind}Missing"),
                message: format!("{kind} {name} not found"),
            }));
        };
        let st = peer.service_status().cloned().unwrap_or_default();
        let ready = st.observed_generation == peer.meta().generation
            && st.condition(ct::READY).is_some_and(|c| c.is_true());
        if !ready && !self.in_grace(&kind, name) {
            let why = st
                .condition(ct::READY)
                .and_then(|c| c.message.clone())
                .unwrap_or_else(|| "no status yet".into());
            return Ok(Err(State::Blocked {
                reason: format!("{kind}NotReady"),
                message: format!("{kind} {name} is not Ready: {why}"),
            }));
        }
        Ok(Ok(peer))
    }

    /// Whether dependency `kind` `name` (same namespace), whose status is not Ready, is within
    /// the grace after it left Ready (see [`crate::hysteresis`]): the pass then goes on and
    /// looks again before the grace ends.
    pub fn in_grace(&mut self, kind: &str, name: &str) -> bool {
        let key = crate::hysteresis::key(kind, &self.ns, name);
        let grace = self.ctx.config.tolerance.grace;
        match self.ctx.memory.gate(&key, Instant::now(), grace) {
            crate::hysteresis::Gate::Grace(left) => {
                info!(dependency = %key, left_s = left.as_secs(), "dependency not Ready: within its grace");
                self.soon(left.min(Duration::from_secs(15)) + Duration::from_millis(100));
                true
            }
            crate::hysteresis::Gate::Blocked => false,
        }
    }

    /// The state after this service's probe: `ready` when it answered; when it failed,
    /// still Ready (with `ready` extended by the failure) while the failures are within the
    /// tolerance of a service that answered before, else `failed`.
    pub fn probed(&mut self, outcome: Result<String, State>, what: &str) -> State {
        let key = crate::hysteresis::key(&K::kind(&()), &self.ns, &self.obj.name_any());
        let t = self.ctx.config.tolerance;
        let verdict = self
            .ctx
            .memory
            .probe(&key, outcome.is_ok(), Instant::now(), &t);
        match (outcome, verdict) {
            (Ok(ready), _) => State::Ready(ready),
            (Err(failed), crate::hysteresis::ProbeVerdict::Tolerated { failures }) => {
                self.soon(Duration::from_secs(15));
                let (_, why) = failed.summary();
                State::Ready(format!(
                    "{what} failed {failures} time(s) in a row, tolerated below {} failures or {} s: {why}",
                    t.failures,
                    t.window.as_secs()
                ))
            }
            (Err(failed), _) => {
                self.soon(Duration::from_secs(15));
                failed
            }
        }
    }

    /// The URL the operator reaches this service's API at: the in-cluster one unless
    /// `--api-url <service>/<namespace>/<name>=URL` overrides it.
    pub fn operator_url(&self, internal: &str) -> String {
        let key = format!("{}/{}/{}", K::SERVICE, self.ns, self.obj.name_any());
        self.ctx
            .config
            .api_url_overrides
            .get(&key)
            .cloned()
            .unwrap_or_else(|| internal.to_string())
    }

    /// The authenticated probe: a token from Keystone (as its admin), then GET `path` on the
    /// deployed API with it; Ready only on a 2xx answer (with the probe hysteresis).
    pub async fn authenticated_probe(
        &mut self,
        ks: &KeystoneAccess,
        url: &str,
        path: &str,
        available: i32,
    ) -> State {
        let outcome = self.probe_outcome(ks, url, path, available).await;
        self.probed(
            outcome,
            &format!("{available} pods; the probe of {url}{path}"),
        )
    }

    /// [`Pass::authenticated_probe`]'s outcome before the hysteresis: the Ready message, or
    /// the Degraded state.
    pub async fn probe_outcome(
        &self,
        ks: &KeystoneAccess,
        url: &str,
        path: &str,
        available: i32,
    ) -> Result<String, State> {
        let timeout = self.ctx.config.check_timeout;
        match authenticated_get(ks, url, path, timeout, self.api_ca.as_deref()).await {
            Ok(()) => Ok(format!(
                "{available} pods; {url}{path} answered an authenticated request"
            )),
            Err(e) => Err(State::Degraded {
                reason: "ProbeFailed".into(),
                message: e,
            }),
        }
    }

    /// GET `path(project_id)` on the deployed API at `url` with an admin token from Keystone:
    /// the JSON answer of a 2xx.
    pub async fn admin_get_json(
        &self,
        ks: &KeystoneAccess,
        url: &str,
        path: impl Fn(&str) -> String,
    ) -> Result<serde_json::Value, String> {
        let timeout = self.ctx.config.check_timeout;
        let (token, project) = issue_token_with_project(
            &ks.operator_url,
            &ks.admin_password,
            timeout,
            ks.ca.as_deref(),
        )
        .await?;
        let client = crate::tls::client(timeout, self.api_ca.as_deref().or(ks.ca.as_deref()))?;
        let target = format!("{}{}", url.trim_end_matches('/'), path(&project));
        let resp = client
            .get(&target)
            .header("X-Auth-Token", token)
            .send()
            .await
            .map_err(|e| format!("GET {target} failed: {e}"))?;
        if !resp.status().is_success() {
            return Err(format!(
                "GET {target} with an admin token answered {}",
                resp.status()
            ));
        }
        resp.json()
            .await
            .map_err(|e| format!("GET {target}: the answer is not JSON: {e}"))
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

/// Asks Keystone at `url` for a project-scoped token as `admin`; returns the token.
pub async fn issue_token(url: &str, password: &str, timeout: Duration) -> Result<String, String> {
    issue_token_verified(url, password, timeout, None).await
}

/// [`issue_token`] from a Keystone whose certificate verifies with `ca` (PEM), if given.
pub async fn issue_token_verified(
    url: &str,
    password: &str,
    timeout: Duration,
    ca: Option<&str>,
) -> Result<String, String> {
    let body = serde_json::json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": "admin", "domain": {"id": "default"}, "password": password}}},
        "scope": {"project": {"name": "admin", "domain": {"id": "default"}}}}});
    let client = crate::tls::client(timeout, ca)?;
    let resp = client
        .post(format!("{}/auth/tokens", url.trim_end_matches('/')))
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("token request to {url} failed: {e}"))?;
    let token = resp
        .headers()
        .get("x-subject-token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    match token {
        Some(t) if resp.status().as_u16() == 201 => Ok(t),
        _ => Err(format!("token request to {url} answered {}", resp.status())),
    }
}

/// [`issue_token_verified`] with the id of the project the token is scoped to (the admin
/// project): for APIs that carry it in their paths (Cinder's `/v3/{project_id}/...`).
pub async fn issue_token_with_project(
    url: &str,
    password: &str,
    timeout: Duration,
    ca: Option<&str>,
) -> Result<(String, String), String> {
    let body = serde_json::json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": "admin", "domain": {"id": "default"}, "password": password}}},
        "scope": {"project": {"name": "admin", "domain": {"id": "default"}}}}});
    let client = crate::tls::client(timeout, ca)?;
    let resp = client
        .post(format!("{}/auth/tokens", url.trim_end_matches('/')))
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("token request to {url} failed: {e}"))?;
    let status = resp.status();
    let token = resp
        .headers()
        .get("x-subject-token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let answer: serde_json::Value = resp.json().await.unwrap_or_default();
    match (token, answer["token"]["project"]["id"].as_str()) {
        (Some(t), Some(project)) if status.as_u16() == 201 => Ok((t, project.to_string())),
        _ => Err(format!(
            "token request to {url} answered {status} without a project-scoped token"
        )),
    }
}

/// The token probe of Keystone itself: the deployed API issues a token to its admin.
pub async fn token_probe(url: &str, password: &str, timeout: Duration) -> Result<(), String> {
    issue_token(url, password, timeout).await.map(|_| ())
}

async fn authenticated_get(
    ks: &KeystoneAccess,
    url: &str,
    path: &str,
    timeout: Duration,
    ca: Option<&str>,
) -> Result<(), String> {
    let token = issue_token_verified(
        &ks.operator_url,
        &ks.admin_password,
        timeout,
        ks.ca.as_deref(),
    )
    .await?;
    // The API is verified with the CA of its own certificate (set by its pass), or Keystone's.
    let client = crate::tls::client(timeout, ca.or(ks.ca.as_deref()))?;
    let target = format!("{}{path}", url.trim_end_matches('/'));
    let resp = client
        .get(&target)
        .header("X-Auth-Token", token)
        .send()
        .await
        .map_err(|e| format!("GET {target} failed: {e}"))?;
    if resp.status().is_success() {
        Ok(())
    } else {
        Err(format!(
            "GET {target} with a token from Keystone answered {}",
            resp.status()
        ))
    }
}

/// One reconcile of a service CR: read it fresh, run its pass, write conditions, Events,
/// metrics and status.
pub async fn reconcile<K: ServiceKind>(cached: Arc<K>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let started = Instant::now();
    let kind = K::kind(&()).to_string();
    let ns = cached.namespace().ok_or(Error::Incomplete("namespace"))?;
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &ns);
    // The Job records in status drive what is created next; the watch cache can lag behind
    // our own last status write, so read the object fresh (one GET per pass).
    let Some(obj) = api.get_opt(&cached.name_any()).await? else {
        return Ok(Action::await_change());
    };
    let reference = obj
        .controller_owner_ref(&())
        .ok_or(Error::Incomplete("uid"))?;
    let before = obj.service_status().cloned().unwrap_or_default();
    let mut p = Pass {
        ctx: &ctx,
        obj: &obj,
        ns: ns.clone(),
        owner: Owner {
            reference,
            namespace: ns.clone(),
            instance: obj.name_any(),
            service: K::SERVICE.into(),
        },
        names: Names {
            base: obj.name_any(),
            service: K::SERVICE,
        },
        status: before.clone(),
        requeue: ctx.config.resync,
        api_ca: None,
        served: None,
        plain_http: false,
    };
    let state = match K::pass(&mut p).await {
        Ok(s) => s,
        Err(e) => {
            runtime::observe(&ctx, &kind, false, started);
            return Err(e);
        }
    };
    let (mut status, requeue, served, plain) = (p.status, p.requeue, p.served, p.plain_http);
    ctx.memory.passed(
        &crate::hysteresis::key(&kind, &ns, &obj.name_any()),
        matches!(state, State::Ready(_)),
        Instant::now(),
    );
    runtime::set_state(&mut status, &state, obj.meta().generation);
    match served {
        Some(s) => runtime::set(
            &mut status,
            tls_condition(&s, matches!(state, State::Ready(_))),
            obj.meta().generation,
            &jiff::Timestamp::now().to_string(),
        ),
        // Plain HTTP (or a pass that ended before TLS was looked at): no TLS condition.
        None if plain => status.conditions.retain(|c| c.type_ != ct::TLS_READY),
        None => {}
    }
    runtime::after_pass(&ctx, &obj, &before, &status).await;
    runtime::write_status(&api, &obj, &before, &status).await?;
    runtime::observe(&ctx, &kind, true, started);
    info!(kind = %kind, name = %obj.name_any(), namespace = %ns, state = ?state.summary(), "service reconciled");
    Ok(match state {
        State::InvalidSpec(_) => Action::await_change(),
        State::Blocked { .. } => Action::requeue(ctx.config.check_interval.min(requeue)),
        _ => Action::requeue(requeue),
    })
}

/// The APIs a service controller watches besides its own kind.
pub struct Watched {
    /// External services (a change reconciles the CRs naming them).
    pub externals: Api<OpenStackExternalService>,
    /// Keystones (a change reconciles the CRs depending on them).
    pub keystones: Api<Keystone>,
    /// Jobs (owned).
    pub jobs: Api<Job>,
    /// Deployments (owned).
    pub deployments: Api<Deployment>,
    /// Secrets: only `kubernetes.io/tls` ones are watched (a renewed certificate, e.g. by
    /// cert-manager, reconciles the CRs serving it at once instead of at the next resync).
    pub secrets: Api<Secret>,
}

/// The CRs a change of `kubernetes.io/tls` Secret `secret` in `ns` concerns (pure): those
/// serving it, and every one in the namespace when it is the namespace CA (re-issued
/// certificates, and the bundles clients verify with).
pub fn tls_secret_targets<K: ServiceKind>(
    objs: &[Arc<K>],
    ns: Option<&str>,
    secret: &str,
) -> Vec<ObjectRef<K>> {
    objs.iter()
        .filter(|k| k.namespace().as_deref() == ns)
        .filter(|k| {
            secret == controlplane_render::tls::CA_SECRET
                || k.api_tls().and_then(|t| t.secret_name.as_deref()) == Some(secret)
        })
        .map(|k| ObjectRef::from_obj(&**k))
        .collect()
}

/// Runs the controller of kind `K` until `shutdown` resolves: the CRs, the Jobs and
/// Deployments they own, the external services and Keystones they name.
pub async fn run<K: ServiceKind>(
    ctx: Arc<Ctx>,
    api: Api<K>,
    watched: Watched,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let controller = Controller::new(api, watcher::Config::default());
    let store = controller.store();
    let ks_store = store.clone();
    let tls_store = store.clone();
    controller
        .owns(watched.jobs, watcher::Config::default())
        .owns(watched.deployments, watcher::Config::default())
        .watches(
            watched.externals,
            watcher::Config::default(),
            move |svc: OpenStackExternalService| {
                let ns = svc.namespace();
                let name = svc.name_any();
                store
                    .state()
                    .into_iter()
                    .filter(|k| {
                        k.namespace() == ns && k.external_services().contains(&name.as_str())
                    })
                    .map(|k| ObjectRef::from_obj(&*k))
                    .collect::<Vec<_>>()
            },
        )
        .watches(
            watched.keystones,
            watcher::Config::default(),
            move |ks: Keystone| {
                let ns = ks.namespace();
                let name = ks.name_any();
                ks_store
                    .state()
                    .into_iter()
                    .filter(|k| k.namespace() == ns && k.keystone_name() == Some(name.as_str()))
                    .map(|k| ObjectRef::from_obj(&*k))
                    .collect::<Vec<_>>()
            },
        )
        .watches(
            watched.secrets,
            watcher::Config::default().fields("type=kubernetes.io/tls"),
            move |s: Secret| {
                tls_secret_targets(&tls_store.state(), s.namespace().as_deref(), &s.name_any())
            },
        )
        .graceful_shutdown_on(shutdown)
        .run(reconcile::<K>, runtime::error_policy, ctx)
        .for_each(|_| futures::future::ready(()))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_step_reports_the_same_message_on_every_pass_of_its_backoff() {
        let t0: jiff::Timestamp = "2026-12-06T06:00:00Z".parse().expect("time");
        let at = |s: i64| {
            t0.checked_add(jiff::SignedDuration::from_secs(s))
                .expect("time")
        };
        let rec = JobRecord {
            step: "db-init".into(),
            attempts: 1,
            next_attempt_after: Some(at(30).to_string()),
            ..JobRecord::default()
        };
        let why = "BackoffLimitExceeded: Job has reached the specified backoff limit";
        let (first, wait1) =
            backoff("db-init", &rec, "ks-db-init-h-1", why, at(0)).expect("waiting");
        // The pass the status write triggers, seconds later on a busy node.
        let (second, wait2) =
            backoff("db-init", &rec, "ks-db-init-h-1", why, at(7)).expect("waiting");
        assert_eq!(
            first, second,
            "the condition (and its Warning) must not change"
        );
        assert!(first.contains("2026-12-06T06:00:30Z"), "{first}");
        assert!(first.contains(why), "{first}");
        assert_eq!((wait1.as_secs(), wait2.as_secs()), (30, 23));
        // The backoff is over: a new attempt.
        assert!(backoff("db-init", &rec, "ks-db-init-h-1", why, at(30)).is_none());
        assert!(backoff("db-init", &rec, "ks-db-init-h-1", why, at(31)).is_none());
    }

    fn placement(
        ns: &str,
        name: &str,
        tls: Option<serde_json::Value>,
    ) -> Arc<controlplane_api::Placement> {
        let mut spec = serde_json::json!({
            "database": {"service": {"name": "db"}}, "keystone": {"name": "ks"}});
        if let Some(t) = tls {
            spec["tls"] = t;
        }
        let mut p: controlplane_api::Placement = serde_json::from_value(serde_json::json!({
            "apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "Placement",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}))
        .expect("placement");
        p.metadata.namespace = Some(ns.into());
        Arc::new(p)
    }

    #[test]
    fn a_tls_secret_reconciles_the_crs_serving_it_and_the_ca_every_one() {
        let objs = vec![
            placement(
                "os",
                "user",
                Some(serde_json::json!({"secretName": "pl-cert"})),
            ),
            placement("os", "generated", Some(serde_json::json!({}))),
            placement("os", "plain", None),
            placement(
                "other",
                "user2",
                Some(serde_json::json!({"secretName": "pl-cert"})),
            ),
        ];
        let names = |v: Vec<ObjectRef<controlplane_api::Placement>>| {
            let mut n: Vec<String> = v.into_iter().map(|r| r.name).collect();
            n.sort();
            n
        };
        assert_eq!(
            names(tls_secret_targets(&objs, Some("os"), "pl-cert")),
            ["user"]
        );
        assert!(tls_secret_targets(&objs, Some("os"), "unrelated").is_empty());
        assert_eq!(
            names(tls_secret_targets(
                &objs,
                Some("os"),
                controlplane_render::tls::CA_SECRET
            )),
            ["generated", "plain", "user"]
        );
    }

    #[test]
    fn the_tls_condition_names_the_secret_and_its_expiry() {
        let s = Served {
            secret: "placement-api-tls".into(),
            not_after: Some(1_800_000_000),
        };
        let c = tls_condition(&s, true);
        assert!(c.is_true());
        let m = c.message.clone().unwrap_or_default();
        assert!(
            m.contains("placement-api-tls") && m.contains("2027-01-15T08:00:00Z"),
            "{m}"
        );
        let c = tls_condition(&s, false);
        assert!(!c.is_true());
        assert_eq!(c.reason.as_deref(), Some("CertificateNotServedYet"));
    }

    #[test]
    fn a_cache_ca_change_changes_the_config_hash_and_no_tls_keeps_it() {
        let plain = ResolvedCache::default();
        assert_eq!(plain.config_hash("abc"), "abc");
        let with = |ca: &str| ResolvedCache {
            tls_hash: Some(InputHash::new().add("ca", ca).short()),
            ..ResolvedCache::default()
        };
        assert_ne!(with("ca-1").config_hash("abc"), "abc");
        assert_ne!(
            with("ca-1").config_hash("abc"),
            with("ca-2").config_hash("abc")
        );
        assert_eq!(
            with("ca-1").config_hash("abc"),
            with("ca-1").config_hash("abc")
        );
    }

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
    fn job_names_fit_and_carry_hash_and_attempt() {
        let n = Names {
            base: "a-very-long-keystone-name-that-goes-on-and-on".into(),
            service: "keystone",
        };
        let j = n.job("bootstrap", "0123456789", 12);
        assert!(j.len() <= 63, "{j}");
        assert!(j.ends_with("-bootstrap-0123456789-12"));
    }

    #[test]
    fn names_carry_the_service() {
        let n = Names {
            base: "cloud-placement".into(),
            service: "placement",
        };
        assert_eq!(n.db(), "cloud-placement-placement-db");
        assert_eq!(n.config(), "cloud-placement-placement-config");
        assert_eq!(n.api(), "cloud-placement-api");
    }
}
