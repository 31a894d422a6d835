//! `Placement` on the shared pipeline: Keystone and the database Ready → passwords → config →
//! `db-init`, `db-sync`, `service-user` Jobs → API Deployment and Service → a token from
//! Keystone accepted by the deployed API (`GET /resource_providers`).

use std::future::Future;
use std::sync::Arc;

use controlplane_api::validation::Validate;
use controlplane_api::{Placement, ServiceName, ServiceStatus};
use controlplane_render::authtoken::KeystoneAuth;
use controlplane_render::objects::{self, ApiParams};
use controlplane_render::placement::{self as render, Paths, PlacementInputs};
use controlplane_render::tls;
use kube::{Api, ResourceExt};

use crate::runtime::{self, Ctx, Error, State};
use crate::service::{Pass, ServiceKind, Watched, or_state};
use controlplane_render::cache::CacheClient;

/// The Job steps, in order.
pub const STEPS: [&str; 3] = ["db-init", "db-sync", "service-user"];
/// The path the probe GETs with a token: it answers 200 only to an authenticated admin.
pub const PROBE_PATH: &str = "/resource_providers";

impl ServiceKind for Placement {
    const SERVICE: &'static str = "placement";

    fn api_tls(&self) -> Option<&controlplane_api::common::ApiTls> {
        self.spec.template.tls.as_ref()
    }

    fn spec_validate(&self) -> Vec<api::FieldError> {
        self.spec.validate()
    }

    fn service_status(&self) -> Option<&ServiceStatus> {
        self.status.as_ref()
    }

    fn external_services(&self) -> Vec<&str> {
        let mut v = vec![self.spec.database.service.name.as_str()];
        v.extend(self.spec.cache.as_ref().map(|c| c.name.as_str()));
        v
    }

    fn keystone_name(&self) -> Option<&str> {
        Some(&self.spec.keystone.name)
    }

    fn step_event(step: &str, job: &str) -> Option<(&'static str, String)> {
        (step == "service-user").then(|| {
            (
                "ServiceRegistered",
                format!("service user, placement service and endpoints in place (Job {job})"),
            )
        })
    }

    fn pass(p: &mut Pass<'_, Self>) -> impl Future<Output = Result<State, Error>> + Send {
        pass(p)
    }
}

async fn pass(p: &mut Pass<'_, Placement>) -> Result<State, Error> {
    let obj = p.obj;
    let spec = &obj.spec;
    if let Some(state) = p.invalid_spec() {
        return Ok(state);
    }
    // Gate: Keystone and the external services Ready before anything is created.
    let ks = or_state!(p.keystone(&spec.keystone.name).await?);
    let db_secret = p.names.db();
    let db = or_state!(
        p.database(
            &spec.database.service.name,
            spec.database.database_name_or(Placement::SERVICE),
            spec.database.username_or(Placement::SERVICE),
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
    let user_secret = p.names.service_user();
    let service_password = or_state!(p.generated_password(&user_secret).await?);

    // Render.
    let image = spec
        .template
        .image
        .clone()
        .unwrap_or_else(|| ServiceName::Placement.default_image(&spec.release));
    let auth = KeystoneAuth {
        auth_url: ks.internal_url.clone(),
        www_authenticate_uri: ks.public_url.clone(),
        region: ks.region.clone(),
        username: Placement::SERVICE.into(),
        password: service_password.clone(),
        project: "service".into(),
    };
    let inputs = PlacementInputs {
        template: &spec.template,
        database: db.database.clone(),
        keystone: auth.clone(),
        cache: cache.cache.clone(),
        paths: Paths::pod(),
        listen: format!("0.0.0.0:{}", render::PORT),
        workers: 2,
    };
    let mut files = render::config_files(&inputs);
    let mut conf = files.get("placement.conf").cloned().unwrap_or_default();
    let mut uwsgi = files.get("uwsgi.ini").cloned().unwrap_or_default();
    let mut config_hash = render::config_hash(&image, &conf, &uwsgi);
    // TLS: keystonemiddleware verifies Keystone with its CA; the API serves its certificate.
    if let Some(ca) = &ks.ca {
        conf = tls::set_client_ca(
            &conf,
            &tls::CLIENT_SECTIONS,
            &format!("{}/{}", render::POD_CONFIG_DIR, tls::CLIENT_CA_FILE),
        );
        files.insert("placement.conf".into(), conf.clone());
        files.insert(tls::CLIENT_CA_FILE.into(), ca.clone());
    }
    let serving = or_state!(
        p.serving_tls(spec.template.tls.as_ref(), spec.public_endpoint.as_deref())
            .await?
    );
    if serving.is_some() {
        let (crt, key) = tls::pod_files(tls::POD_TLS_DIR);
        uwsgi = tls::uwsgi_https(&uwsgi, &crt, &key);
        files.insert("uwsgi.ini".into(), uwsgi.clone());
    }
    if ks.ca.is_some() || serving.is_some() {
        config_hash = tls::config_hash(
            &render::config_hash(&image, &conf, &uwsgi),
            serving.as_ref().map(|s| s.cert.as_str()),
            ks.ca.as_deref(),
        );
    }
    runtime::apply(
        &p.secrets(),
        &objects::secret(&p.owner, &p.names.config(), "config", files),
    )
    .await?;
    config_hash = cache.config_hash(&config_hash);
    p.status.config_hash = Some(config_hash.clone());
    let mut internal = render::internal_url(&obj.name_any(), &p.ns);
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

    // Jobs, in order; each waits for the one before.
    if let Some(s) = p.db_init(&image, &db, &db_secret).await? {
        return Ok(s);
    }
    let sync = render::db_sync_command("placement-manage", render::POD_CONFIG_DIR);
    let sync_hash = render::db_sync_hash(&image, &conf);
    if let Some(s) = p
        .job_step("db-sync", &sync_hash, &image, sync, vec![], volumes.clone())
        .await?
    {
        return Ok(s);
    }
    let entry = render::service_entry(&auth, &ks.region, &public, &internal);
    if let Some(s) = p
        .service_user(&image, &entry, &ks, &user_secret, &service_password)
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
            image,
            command: vec![
                "uwsgi".into(),
                "--ini".into(),
                format!("{}/uwsgi.ini", render::POD_CONFIG_DIR),
            ],
            port: render::PORT,
            // The version document answers without a token: what the kubelet can probe.
            probe_path: "/".into(),
            config_hash,
            volumes,
        },
    );
    if let Some(s) = &serving {
        tls::serve_tls(&mut dep, &s.secret);
    }
    let applied = p.apply_api(&dep, render::PORT).await?;
    let want = spec.template.replicas.unwrap_or(1);
    let available = or_state!(p.rollout(&applied, want).await?);
    let url = p.operator_url(&internal);
    Ok(p.authenticated_probe(&ks, &url, PROBE_PATH, available)
        .await)
}

/// Runs the controller until `shutdown` resolves.
pub async fn run(
    ctx: Arc<Ctx>,
    api: Api<Placement>,
    watched: Watched,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    crate::service::run(ctx, api, watched, shutdown).await;
}
