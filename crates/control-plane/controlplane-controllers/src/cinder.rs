//! `Cinder` on the shared pipeline: Keystone and the external services (database, messaging,
//! cache) Ready → passwords → `cinder.conf` with the spec's backends and their files → Jobs:
//! database, `db sync`, the service user with both catalog entries (`block-storage`,
//! `volumev3`) → the API, scheduler and volume Deployments (+ the API's Service) →
//! `online_data_migrations` → a token from Keystone accepted by the deployed API
//! (`GET /v3/types`).

use std::future::Future;
use std::sync::Arc;

use controlplane_api::cinder::CinderBackend;
use controlplane_api::validation::Validate;
use controlplane_api::{Cinder, ServiceName, ServiceStatus};
use controlplane_render::authtoken::KeystoneAuth;
use controlplane_render::cinder::services::{self, VolumeServices};
use controlplane_render::cinder::{
    self as render, Backend, BackendKind, CinderInputs, Nfs, Paths, Rbd,
};
use controlplane_render::objects::{self, Check, ComponentParams};
use controlplane_render::tls;
use k8s_openapi::api::core::v1::{Volume, VolumeMount};
use kube::{Api, Resource, ResourceExt};

use crate::runtime::{self, Ctx, Error, State};
use crate::service::{Pass, ServiceKind, Watched, or_state};
use controlplane_render::cache::CacheClient;

/// The Job steps, in order (`online-data-migrations` runs once the Deployments rolled).
pub const STEPS: [&str; 5] = [
    "db-init",
    "db-sync",
    "service-user",
    "service-user-volumev3",
    "online-data-migrations",
];
/// The path the probe GETs with a token (the project comes from the token).
pub const PROBE_PATH: &str = "/v3/types";
/// Where backend `<name>`'s keyring Secret is mounted: `<dir>/<name>/<key>`.
pub const KEYRING_DIR: &str = "/etc/cinder/keyrings";

/// The spec's backends as the renderer takes them, with where each keyring is mounted (pure).
pub fn backends(spec: &[CinderBackend]) -> Vec<Backend> {
    spec.iter()
        .filter_map(|b| {
            let kind = match (&b.rbd, &b.nfs) {
                (Some(r), None) => BackendKind::Rbd(Rbd {
                    pool: r.pool.clone(),
                    user: r.user.clone(),
                    cluster_conf: r.ceph_conf.clone(),
                    keyring: format!("{KEYRING_DIR}/{}/{}", b.name, r.keyring_secret.key),
                    secret_uuid: r.secret_uuid.clone(),
                }),
                (None, Some(n)) => BackendKind::Nfs(Nfs {
                    shares: n.shares.clone(),
                    mount_options: n.mount_options.clone(),
                }),
                // Refused by validation before rendering.
                _ => return None,
            };
            Some(Backend {
                name: b.name.clone(),
                kind,
            })
        })
        .collect()
}

/// Each backend's name and zone (pure).
pub fn backend_zones(spec: &[CinderBackend]) -> Vec<(String, Option<String>)> {
    spec.iter()
        .map(|b| (b.name.clone(), b.availability_zone.clone()))
        .collect()
}

/// The keyring volumes of the RBD backends (one Secret mount per backend).
pub fn keyring_volumes(spec: &[CinderBackend]) -> Vec<(Volume, VolumeMount)> {
    spec.iter()
        .enumerate()
        .filter_map(|(i, b)| {
            b.rbd.as_ref().map(|r| {
                objects::secret_volume(
                    &format!("keyring-{i}"),
                    &r.keyring_secret.name,
                    &format!("{KEYRING_DIR}/{}", b.name),
                )
            })
        })
        .collect()
}

impl ServiceKind for Cinder {
    const SERVICE: &'static str = "cinder";

    fn api_tls(&self) -> Option<&controlplane_api::common::ApiTls> {
        self.spec.template.tls.as_ref()
    }

    fn spec_validate(&self) -> Vec<api::FieldError> {
        let mut errors = self.spec.validate();
        // The drivers' settings (pool and client names, UUIDs, shares) by the renderer's
        // rules, once every backend is exactly one kind.
        let shaped =
            controlplane_api::validation::cinder_backends("spec.backends", &self.spec.backends);
        if shaped.is_empty() {
            for e in render::backend::validate("spec.backends", &backends(&self.spec.backends)) {
                if !errors.iter().any(|x| x.path == e.path) {
                    errors.push(e);
                }
            }
        }
        errors
    }

    fn service_status(&self) -> Option<&ServiceStatus> {
        self.status.as_ref()
    }

    fn external_services(&self) -> Vec<&str> {
        let mut v = vec![
            self.spec.database.service.name.as_str(),
            self.spec.messaging.name.as_str(),
        ];
        v.extend(self.spec.cache.as_ref().map(|c| c.name.as_str()));
        v
    }

    fn keystone_name(&self) -> Option<&str> {
        Some(&self.spec.keystone.name)
    }

    fn step_event(step: &str, job: &str) -> Option<(&'static str, String)> {
        (step == "service-user-volumev3").then(|| {
            (
                "ServiceRegistered",
                format!(
                    "service user, block-storage and volumev3 services and endpoints in place (Job {job})"
                ),
            )
        })
    }

    fn pass(p: &mut Pass<'_, Self>) -> impl Future<Output = Result<State, Error>> + Send {
        pass(p)
    }
}

async fn pass(p: &mut Pass<'_, Cinder>) -> Result<State, Error> {
    let obj = p.obj;
    let spec = &obj.spec;
    let name = obj.name_any();
    if let Some(state) = p.invalid_spec() {
        return Ok(state);
    }
    // Gate: Keystone and the external services Ready before anything is created.
    let ks = or_state!(p.keystone(&spec.keystone.name).await?);
    let db_secret = p.names.db();
    let db = or_state!(
        p.database(
            &spec.database.service.name,
            spec.database.database_name_or(Cinder::SERVICE),
            spec.database.username_or(Cinder::SERVICE),
            &db_secret,
        )
        .await?
    );
    let mq = or_state!(p.messaging(&spec.messaging.name).await?);
    let cache = or_state!(
        p.cache(
            spec.cache.as_ref().map(|c| c.name.as_str()),
            CacheClient::Oslo
        )
        .await?
    );
    let user_secret = p.names.service_user();
    let service_password = or_state!(p.generated_password(&user_secret).await?);

    // Render.
    let image = spec
        .template
        .image
        .clone()
        .unwrap_or_else(|| ServiceName::Cinder.default_image(&spec.release));
    let auth = KeystoneAuth {
        auth_url: ks.internal_url.clone(),
        www_authenticate_uri: ks.public_url.clone(),
        region: ks.region.clone(),
        username: Cinder::SERVICE.into(),
        password: service_password.clone(),
        project: "service".into(),
    };
    let inputs = CinderInputs {
        template: &spec.template,
        database: db.database.clone(),
        messaging: mq.cinder(),
        keystone: auth.clone(),
        cache: cache.cache.clone(),
        backends: backends(&spec.backends),
        // Volumes belong to this stable host, whatever pod runs cinder-volume.
        volume_host: name.clone(),
        paths: Paths::pod(),
        listen: format!("0.0.0.0:{}", render::PORT),
        workers: 2,
    };
    let mut files = render::config_files(&inputs);
    // Availability zones: the first is the API's and scheduler's default; each zone's volume
    // service reads its own file after cinder.conf.
    let zones = &spec.availability_zones;
    let zone_volumes = render::zones::volumes(&name, zones, &backend_zones(&spec.backends));
    if let Some(c) = files.get_mut("cinder.conf") {
        *c = render::zones::with_default_zone(c, zones);
    }
    for z in &zone_volumes {
        files.insert(z.file_name(), z.conf());
    }
    let backend_names: Vec<String> = inputs.backends.iter().map(|b| b.name.clone()).collect();
    let volume_hosts = services::volume_hosts(&name, &backend_names, &zone_volumes);
    // TLS: the API serves its certificate; Cinder's clients (keystonemiddleware, [nova], the
    // Glance client) verify Keystone and the peers they find in the catalog with one bundle:
    // Keystone's CA and the namespace CA every certificate the operator issues chains to.
    let serving = or_state!(
        p.serving_tls(spec.template.tls.as_ref(), spec.public_endpoint.as_deref())
            .await?
    );
    let client_ca = tls::ca_bundle([
        ks.ca.as_deref(),
        crate::tls::namespace_ca_cert(&p.ctx.client, &p.ns)
            .await?
            .as_deref(),
    ]);
    let mut config_hash = render::config_hash(&image, &files);
    tls::edit_files(
        &mut files,
        render::POD_CONFIG_DIR,
        &["cinder.conf"],
        &["uwsgi.ini"],
        client_ca.as_deref(),
        serving.as_ref().map(|_| tls::POD_TLS_DIR),
    );
    if client_ca.is_some()
        && let Some(c) = files.get_mut("cinder.conf")
    {
        *c = render::with_glance_ca(
            c,
            &format!("{}/{}", render::POD_CONFIG_DIR, tls::CLIENT_CA_FILE),
        );
    }
    if client_ca.is_some() || serving.is_some() {
        config_hash = tls::config_hash(
            &render::config_hash(&image, &files),
            serving.as_ref().map(|s| s.cert.as_str()),
            client_ca.as_deref(),
        );
    }
    let conf = files.get("cinder.conf").cloned().unwrap_or_default();
    runtime::apply(
        &p.secrets(),
        &objects::secret(&p.owner, &p.names.config(), "config", files),
    )
    .await?;
    config_hash = cache.config_hash(&config_hash);
    p.status.config_hash = Some(config_hash.clone());
    let mut internal = render::internal_url(&name, &p.ns);
    if serving.is_some() {
        internal = tls::https_url(&internal);
    }
    p.status.endpoint = Some(internal.clone());
    let public = spec
        .public_endpoint
        .clone()
        .unwrap_or_else(|| internal.clone());

    let mut volumes = vec![objects::secret_volume(
        "config",
        &p.names.config(),
        render::POD_CONFIG_DIR,
    )];
    volumes.extend(db.ca_volume.iter().cloned());
    volumes.extend(cache.volumes.iter().cloned());
    volumes.extend(mq.volumes.iter().cloned());
    // state_path (locks, tooz's file coordination, NFS mount points) must be writable.
    volumes.push(render::state_volume());
    let paths = Paths::pod();

    // Jobs, in order; each waits for the one before.
    if let Some(s) = p.db_init(&image, &db, &db_secret).await? {
        return Ok(s);
    }
    if let Some(s) = p
        .job_step(
            "db-sync",
            &render::db_sync_hash(&image, &conf),
            &image,
            render::db_sync_command("cinder-manage", &paths),
            vec![],
            volumes.clone(),
        )
        .await?
    {
        return Ok(s);
    }
    let [current, legacy] = render::service_entries(&auth, &ks.region, &public, &internal);
    for (step, entry) in [("service-user", current), ("service-user-volumev3", legacy)] {
        if let Some(s) = p
            .service_user_as(step, &image, &entry, &ks, &user_secret, &service_password)
            .await?
        {
            return Ok(s);
        }
    }

    // The Deployments: API (+ Service), scheduler, volume service.
    let want = spec.template.replicas.unwrap_or(1);
    let mut volume_mounts = volumes.clone();
    volume_mounts.extend(keyring_volumes(&spec.backends));
    let nfs = spec.backends.iter().any(|b| b.nfs.is_some());
    let mut components = vec![
        (
            "api",
            vec![
                "uwsgi".into(),
                "--ini".into(),
                format!("{}/uwsgi.ini", render::POD_CONFIG_DIR),
            ],
            Check::Http {
                port: render::PORT,
                // The version document answers without a token.
                path: "/".into(),
            },
            want,
            volumes.clone(),
            None,
        ),
        (
            "scheduler",
            render::scheduler_command("cinder-scheduler", &paths),
            Check::None,
            want,
            volumes.clone(),
            None,
        ),
        (
            // One replica: every backend belongs to one `backend_host`, and two volume
            // services managing the same volumes need a coordination backend this operator
            // does not deploy.
            "volume",
            render::volume_command("cinder-volume", &paths),
            Check::None,
            want.min(1),
            volume_mounts.clone(),
            None,
        ),
    ];
    if !zone_volumes.is_empty() {
        // One volume service per zone (one replica each, for the same reason) in place of the
        // zone-less one.
        components.pop();
        for z in &zone_volumes {
            components.push((
                "volume",
                z.command("cinder-volume", &paths),
                Check::None,
                want.min(1),
                volume_mounts.clone(),
                Some(z.zone.clone()),
            ));
        }
    }
    let mut rolled = Vec::new();
    let mut volume_deployments = Vec::new();
    for (base, command, check, replicas, vols, zone) in components {
        let component = match &zone {
            Some(z) => format!("{base}-{}", z.name),
            None => base.to_string(),
        };
        let dep_name = p.names.n(&component);
        if base == "volume" {
            volume_deployments.push(dep_name.clone());
        }
        let service = matches!(check, Check::Http { .. })
            .then(|| objects::component_service(&p.owner, &dep_name, &component, render::PORT));
        let mut dep = objects::component_deployment(
            &p.owner,
            &spec.template,
            ComponentParams {
                name: dep_name,
                component: component.clone(),
                image: image.clone(),
                command,
                check,
                config_hash: config_hash.clone(),
                volumes: vols,
                replicas,
                // Mounting NFS shares needs the mount syscall.
                privileged: base == "volume" && nfs,
            },
        );
        if let (Some(s), "api") = (&serving, base) {
            tls::serve_tls(&mut dep, &s.secret);
        }
        match &zone {
            Some(z) => controlplane_render::zones::pin(&mut dep, z),
            // Zone-wide components spread over the zones (and nodes) when there are zones.
            None if !zones.is_empty() => controlplane_render::zones::spread(&mut dep),
            None => {}
        }
        let applied = p.apply_component(&dep, service.as_ref()).await?;
        rolled.push((applied, replicas));
    }
    // The volume services of zones no longer listed (or the zone-less one zones replaced).
    crate::zones::prune(
        &p.deployments(),
        &p.names.base,
        obj.meta().uid.as_deref(),
        &p.names.n("volume"),
        &volume_deployments,
    )
    .await?;
    let mut available = i32::MAX;
    for (dep, replicas) in &rolled {
        available = available.min(or_state!(
            p.rollout_all(std::slice::from_ref(dep), *replicas).await?
        ));
    }

    if let Some(s) = p
        .job_step(
            "online-data-migrations",
            &render::online_migrations_hash(&image, &conf),
            &image,
            render::online_data_migrations_command("cinder-manage", &paths),
            vec![],
            volumes.clone(),
        )
        .await?
    {
        return Ok(s);
    }
    let url = p.operator_url(&internal);
    let mut outcome = p.probe_outcome(&ks, &url, PROBE_PATH, available).await;
    if let Ok(ready) = &outcome {
        outcome = volume_services_outcome(p, &ks, &url, &volume_hosts, ready).await;
    }
    Ok(p.probed(
        outcome,
        &format!("{available} pods; the probe of {url}{PROBE_PATH} or of its volume services"),
    ))
}

/// The API answered (`ready`): whether Cinder lists the volume services of `hosts` up. Down is
/// Degraded naming them; a host Cinder has no record of yet (the service registers when it
/// starts; one that cannot start crash-loops, which the rollout reports) is named in the
/// Ready message and looked at again soon.
async fn volume_services_outcome(
    p: &mut Pass<'_, Cinder>,
    ks: &crate::service::KeystoneAccess,
    url: &str,
    hosts: &[String],
    ready: &str,
) -> Result<String, State> {
    if hosts.is_empty() {
        return Ok(ready.to_string());
    }
    let answer = p
        .admin_get_json(ks, url, |project| {
            format!("/v3/{project}/os-services?binary=cinder-volume")
        })
        .await
        .and_then(|body| VolumeServices::read(hosts, &body));
    let v = match answer {
        Ok(v) => v,
        Err(message) => {
            return Err(State::Degraded {
                reason: "VolumeServicesUnknown".into(),
                message,
            });
        }
    };
    if let Some(message) = v.down_message() {
        return Err(State::Degraded {
            reason: "VolumeServiceDown".into(),
            message,
        });
    }
    let mut msg = ready.to_string();
    if !v.up.is_empty() {
        msg.push_str(&format!("; cinder-volume up: {}", v.up.join(", ")));
    }
    if !v.missing.is_empty() {
        p.soon(std::time::Duration::from_secs(15));
        msg.push_str(&format!(
            "; cinder-volume not registered yet: {}",
            v.missing.join(", ")
        ));
    }
    Ok(msg)
}

/// Runs the controller until `shutdown` resolves.
pub async fn run(
    ctx: Arc<Ctx>,
    api: Api<Cinder>,
    watched: Watched,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    crate::service::run(ctx, api, watched, shutdown).await;
}
