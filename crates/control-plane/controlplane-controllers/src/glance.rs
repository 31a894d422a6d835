//! `Glance` on the shared pipeline: Keystone, the database and the stores' dependencies Ready
//! → passwords → the images PVC (file store) and the S3 credentials (S3 store) → config →
//! `db-init`, `db-sync`, `service-user` Jobs → API Deployment and Service → a token from
//! Keystone accepted by the deployed API (`GET /v2/images`).

use std::future::Future;
use std::sync::Arc;

use controlplane_api::external::{
    OpenStackExternalService, ServiceKind as ExternalKind, VerifyMode,
};
use controlplane_api::glance::{GlanceSpec, StoreKind};
use controlplane_api::validation::Validate;
use controlplane_api::{Glance, ServiceName, ServiceStatus};
use controlplane_render::authtoken::KeystoneAuth;
use controlplane_render::glance::pod::{self, PodStorage};
use controlplane_render::glance::{
    self as render, Backend, GlanceInputs, POD_IMAGES_DIR, Paths, S3Store, WebDownload,
};
use controlplane_render::objects;
use controlplane_render::tls;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::PostParams;
use kube::{Api, ResourceExt};

use crate::runtime::{self, Ctx, Error, State};
use crate::service::{Pass, ServiceKind, Watched, or_state, secret_str};
use controlplane_render::cache::CacheClient;

/// The Job steps, in order.
pub const STEPS: [&str; 3] = ["db-init", "db-sync", "service-user"];
/// The path the probe GETs with a token: the image list answers only an authenticated user.
pub const PROBE_PATH: &str = "/v2/images";

impl ServiceKind for Glance {
    const SERVICE: &'static str = "glance";

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
        v.extend(
            self.spec
                .storage
                .s3
                .as_ref()
                .map(|s| s.object_storage.name.as_str()),
        );
        v
    }

    fn keystone_name(&self) -> Option<&str> {
        Some(&self.spec.keystone.name)
    }

    fn step_event(step: &str, job: &str) -> Option<(&'static str, String)> {
        (step == "service-user").then(|| {
            (
                "ServiceRegistered",
                format!("service user, image service and endpoints in place (Job {job})"),
            )
        })
    }

    fn pass(p: &mut Pass<'_, Self>) -> impl Future<Output = Result<State, Error>> + Send {
        pass(p)
    }
}

/// Name of the file store's PVC of Glance `name`.
pub fn images_claim_name(name: &str) -> String {
    format!("{name}-images")
}

/// The S3 endpoint URL of an `objectStorage` external service's first endpoint: a URL as
/// is, a bare `host:port` with `https://` when the service has a TLS block (pure).
pub fn s3_endpoint(svc: &OpenStackExternalService) -> Option<String> {
    let ep = svc.spec.endpoints.first()?;
    Some(if ep.contains("://") {
        ep.clone()
    } else if svc.spec.tls.is_some() {
        format!("https://{ep}")
    } else {
        format!("http://{ep}")
    })
}

/// The bucket of Glance `name`: the spec's, the external service's `extra.bucket`, else
/// `glance-<name>` (pure).
pub fn bucket(spec: &GlanceSpec, name: &str, svc: &OpenStackExternalService) -> String {
    spec.storage
        .s3
        .as_ref()
        .and_then(|s| s.bucket.clone())
        .or_else(|| svc.spec.extra.get("bucket").cloned())
        .unwrap_or_else(|| format!("glance-{name}"))
}

/// The stores in `enabled_backends` order: the default store first (pure).
pub fn backends(spec: &GlanceSpec, s3: Option<S3Store>) -> Vec<Backend> {
    let file = spec.storage.file.as_ref().map(|_| Backend::File {
        dir: POD_IMAGES_DIR.into(),
    });
    let s3 = s3.map(Backend::S3);
    let (first, second) = match spec.storage.default_kind() {
        StoreKind::File => (file, s3),
        StoreKind::S3 => (s3, file),
    };
    first.into_iter().chain(second).collect()
}

/// The web-download filter of the spec (pure).
pub fn web_download(spec: &GlanceSpec) -> Option<WebDownload> {
    spec.web_download.as_ref().map(|w| WebDownload {
        allowed_schemes: w.allowed_schemes.clone(),
        allowed_hosts: w.allowed_hosts.clone(),
        allowed_ports: w.allowed_ports.clone(),
    })
}

/// The S3 store from its Ready `objectStorage` external service: endpoint, the credentials
/// from its Secret, bucket and region, and the CA Secret pods mount.
async fn s3_store(
    p: &Pass<'_, Glance>,
    name: &str,
) -> Result<Result<(S3Store, Option<(String, String)>), State>, Error> {
    let spec = &p.obj.spec;
    let svc = match p.external(name, ExternalKind::ObjectStorage).await? {
        Ok(s) => s,
        Err(state) => return Ok(Err(state)),
    };
    let blocked = |reason: &str, message: String| {
        Ok(Err(State::Blocked {
            reason: reason.into(),
            message,
        }))
    };
    let Some(endpoint) = s3_endpoint(&svc) else {
        return blocked(
            "ExternalServiceIncomplete",
            format!("external service {name} (objectStorage) has no endpoint"),
        );
    };
    let Some(creds) = svc.spec.credentials.clone() else {
        return blocked(
            "ExternalServiceIncomplete",
            format!("external service {name} (objectStorage) has no credentials"),
        );
    };
    let secret = p.secrets().get_opt(&creds.secret_name).await?;
    let key = |k: &str| secret.as_ref().and_then(|s| secret_str(s, k));
    let (Some(access_key), Some(secret_key)) = (key(&creds.username_key), key(&creds.password_key))
    else {
        return blocked(
            "SecretMissing",
            format!(
                "Secret {} of external service {name} lacks key {} or {}",
                creds.secret_name, creds.username_key, creds.password_key
            ),
        );
    };
    let mut ca = None;
    if let Some(tls) = &svc.spec.tls {
        // glance_store (botocore) verifies chain and host name or nothing: it has no
        // CA-only mode and we refuse to render verification off.
        if tls.verify != VerifyMode::Full {
            return blocked(
                "ExternalServiceUnsupported",
                format!(
                    "external service {name} (objectStorage) asks for verify {:?}; Glance's S3 store can only verify fully (chain and host name)",
                    tls.verify
                ),
            );
        }
        ca = Some((tls.ca_secret.name.clone(), tls.ca_secret.key.clone()));
    }
    let s3spec = spec.storage.s3.clone().unwrap_or_default();
    let storage = PodStorage {
        images_claim: None,
        s3_ca_secret: ca.clone(),
    };
    Ok(Ok((
        S3Store {
            endpoint,
            access_key: access_key.trim().to_string(),
            secret_key: secret_key.trim().to_string(),
            bucket: bucket(spec, &p.obj.name_any(), &svc),
            region: s3spec
                .region
                .or_else(|| svc.spec.extra.get("region").cloned()),
            create_bucket: s3spec.create_bucket,
            ca_file: storage.s3_ca_file(),
        },
        ca,
    )))
}

/// Creates the file store's PVC once (its spec is immutable in practice; a resize is the
/// storage admin's). Without an owner reference: deleting the Glance keeps the images.
async fn ensure_claim(p: &Pass<'_, Glance>) -> Result<String, Error> {
    let name = images_claim_name(&p.obj.name_any());
    let api: Api<PersistentVolumeClaim> = Api::namespaced(p.ctx.client.clone(), &p.ns);
    if api.get_opt(&name).await?.is_none() {
        let f = p.obj.spec.storage.file.clone().unwrap_or_default();
        let claim = pod::images_claim(
            &p.owner,
            &name,
            &f.size,
            f.storage_class.as_deref(),
            &f.access_mode,
        );
        match api.create(&PostParams::default(), &claim).await {
            Ok(_) => {
                p.ctx
                    .event(
                        p.obj,
                        kube::runtime::events::EventType::Normal,
                        "ImagesClaimCreated",
                        format!(
                            "PersistentVolumeClaim {name} ({}) for the file store",
                            f.size
                        ),
                    )
                    .await;
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(name)
}

async fn pass(p: &mut Pass<'_, Glance>) -> Result<State, Error> {
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
            spec.database.database_name_or(Glance::SERVICE),
            spec.database.username_or(Glance::SERVICE),
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
    let (s3, s3_ca) = match &spec.storage.s3 {
        Some(s) => {
            let (store, ca) = or_state!(s3_store(p, &s.object_storage.name).await?);
            (Some(store), ca)
        }
        None => (None, None),
    };
    let user_secret = p.names.service_user();
    let service_password = or_state!(p.generated_password(&user_secret).await?);
    let images_claim = match spec.storage.file {
        Some(_) => Some(ensure_claim(p).await?),
        None => None,
    };
    let storage = PodStorage {
        images_claim,
        s3_ca_secret: s3_ca,
    };

    // Render.
    let image = spec
        .template
        .image
        .clone()
        .unwrap_or_else(|| ServiceName::Glance.default_image(&spec.release));
    let auth = KeystoneAuth {
        auth_url: ks.internal_url.clone(),
        www_authenticate_uri: ks.public_url.clone(),
        region: ks.region.clone(),
        username: Glance::SERVICE.into(),
        password: service_password.clone(),
        project: "service".into(),
    };
    // TLS: the API serves its certificate; keystonemiddleware verifies Keystone with its CA.
    let serving = or_state!(
        p.serving_tls(spec.template.tls.as_ref(), spec.public_endpoint.as_deref())
            .await?
    );
    let mut internal = render::internal_url(&obj.name_any(), &p.ns);
    if serving.is_some() {
        internal = tls::https_url(&internal);
    }
    let public = spec
        .public_endpoint
        .clone()
        .unwrap_or_else(|| internal.clone());
    let inputs = GlanceInputs {
        template: &spec.template,
        database: db.database.clone(),
        keystone: auth.clone(),
        cache: cache.cache.clone(),
        backends: backends(spec, s3),
        web_download: web_download(spec),
        public_url: Some(public.clone()),
        paths: Paths::pod(),
        listen: format!("0.0.0.0:{}", render::PORT),
        workers: 2,
    };
    let mut files = match render::config_files(&inputs) {
        Ok(f) => f,
        Err(e) => {
            return Ok(State::Blocked {
                reason: "StoreUnusable".into(),
                message: e.to_string(),
            });
        }
    };
    let mut config_hash = render::config_hash(&image, &files);
    tls::edit_files(
        &mut files,
        render::POD_CONFIG_DIR,
        &["glance-api.conf"],
        &["uwsgi.ini"],
        ks.ca.as_deref(),
        serving.as_ref().map(|_| tls::POD_TLS_DIR),
    );
    if ks.ca.is_some() || serving.is_some() {
        config_hash = tls::config_hash(
            &render::config_hash(&image, &files),
            serving.as_ref().map(|s| s.cert.as_str()),
            ks.ca.as_deref(),
        );
    }
    let conf = files.get("glance-api.conf").cloned().unwrap_or_default();
    runtime::apply(
        &p.secrets(),
        &objects::secret(&p.owner, &p.names.config(), "config", files),
    )
    .await?;
    config_hash = cache.config_hash(&config_hash);
    p.status.config_hash = Some(config_hash.clone());
    p.status.endpoint = Some(internal.clone());

    let mut job_volumes = vec![objects::secret_volume(
        "config",
        &p.names.config(),
        render::POD_CONFIG_DIR,
    )];
    job_volumes.extend(db.ca_volume.iter().cloned());
    job_volumes.extend(cache.volumes.iter().cloned());

    // Jobs, in order; each waits for the one before.
    if let Some(s) = p.db_init(&image, &db, &db_secret).await? {
        return Ok(s);
    }
    let sync = render::db_sync_command("glance-manage", render::POD_CONFIG_DIR);
    let sync_hash = render::db_sync_hash(&image, &conf);
    if let Some(s) = p
        .job_step("db-sync", &sync_hash, &image, sync, vec![], job_volumes)
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
    let mut params = pod::api_params(
        &obj.name_any(),
        &image,
        &p.names.config(),
        &config_hash,
        &storage,
    );
    params.volumes.extend(db.ca_volume.iter().cloned());
    params.volumes.extend(cache.volumes.iter().cloned());
    let mut dep = objects::api_deployment(&p.owner, &spec.template, params);
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
    api: Api<Glance>,
    watched: Watched,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    crate::service::run(ctx, api, watched, shutdown).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glance(storage: serde_json::Value) -> GlanceSpec {
        serde_json::from_value(serde_json::json!({
            "database": {"service": {"name": "db"}}, "keystone": {"name": "ks"},
            "storage": storage}))
        .expect("spec")
    }

    fn s3svc(endpoint: &str, tls: bool) -> OpenStackExternalService {
        let mut spec = serde_json::json!({"type": "objectStorage", "endpoints": [endpoint],
            "credentials": {"secretName": "s3"}, "extra": {"bucket": "shared"}});
        if tls {
            spec["tls"] = serde_json::json!({"caSecret": {"name": "ca"}});
        }
        OpenStackExternalService::new("s3", serde_json::from_value(spec).expect("svc"))
    }

    fn s3() -> S3Store {
        S3Store {
            endpoint: "https://s3:443".into(),
            access_key: "a".into(),
            secret_key: "b".into(),
            bucket: "x".into(),
            region: None,
            create_bucket: true,
            ca_file: None,
        }
    }

    #[test]
    fn the_default_store_comes_first() {
        let both = glance(serde_json::json!({"file": {}, "s3": {"objectStorage": {"name": "s3"}}}));
        let ids: Vec<_> = backends(&both, Some(s3()))
            .iter()
            .map(Backend::id)
            .collect();
        assert_eq!(ids, ["s3", "file"]);
        let file_first = glance(
            serde_json::json!({"file": {}, "s3": {"objectStorage": {"name": "s3"}},
            "defaultStore": "file"}),
        );
        let ids: Vec<_> = backends(&file_first, Some(s3()))
            .iter()
            .map(Backend::id)
            .collect();
        assert_eq!(ids, ["file", "s3"]);
        let file = glance(serde_json::json!({"file": {"size": "1Gi"}}));
        assert_eq!(
            backends(&file, None),
            [Backend::File {
                dir: POD_IMAGES_DIR.into()
            }]
        );
    }

    #[test]
    fn s3_endpoint_bucket_and_defaults_come_from_the_external_service() {
        assert_eq!(
            s3_endpoint(&s3svc("rgw:7480", false)).as_deref(),
            Some("http://rgw:7480")
        );
        assert_eq!(
            s3_endpoint(&s3svc("rgw:7443", true)).as_deref(),
            Some("https://rgw:7443")
        );
        assert_eq!(
            s3_endpoint(&s3svc("https://rgw.example.org", false)).as_deref(),
            Some("https://rgw.example.org")
        );
        let spec = glance(serde_json::json!({"s3": {"objectStorage": {"name": "s3"}}}));
        assert_eq!(bucket(&spec, "g", &s3svc("rgw:1", false)), "shared");
        let mut svc = s3svc("rgw:1", false);
        svc.spec.extra.clear();
        assert_eq!(bucket(&spec, "g", &svc), "glance-g");
        let named =
            glance(serde_json::json!({"s3": {"objectStorage": {"name": "s3"}, "bucket": "imgs"}}));
        assert_eq!(bucket(&named, "g", &svc), "imgs");
        assert_eq!(images_claim_name("cloud-glance"), "cloud-glance-images");
    }

    #[test]
    fn web_download_takes_the_spec_allow_list_with_defaults() {
        let mut spec = glance(serde_json::json!({"file": {}}));
        assert_eq!(web_download(&spec), None);
        spec = serde_json::from_value(serde_json::json!({
            "database": {"service": {"name": "db"}}, "keystone": {"name": "ks"},
            "storage": {"file": {}}, "webDownload": {"allowedHosts": ["images.example.org"]}}))
        .expect("spec");
        assert_eq!(
            web_download(&spec),
            Some(WebDownload {
                allowed_schemes: vec!["http".into(), "https".into()],
                allowed_hosts: vec!["images.example.org".into()],
                allowed_ports: vec![80, 443],
            })
        );
    }
}
