//! `Horizon` on the shared pipeline, without database or Jobs: Keystone and the cache Ready →
//! the generated Django `SECRET_KEY` → `local_settings.py` and uwsgi's configuration → a
//! Deployment whose init containers collect and compress the static files, and its Service →
//! Ready when the login page answers 200. Horizon has no API a token authenticates against:
//! the login page rendering (Django, the settings, the static manifest) is what is probed.
//! With `tls` the dashboard serves HTTPS itself (uwsgi `https-socket`, the `<name>-api-tls`
//! certificate, `Secure` session and CSRF cookies, HTTPS probes), as the other APIs do.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use controlplane_api::validation::Validate;
use controlplane_api::{Horizon, ServiceName, ServiceStatus};
use controlplane_render::horizon::{self as render, HorizonInputs};
use controlplane_render::objects::{self, ApiParams, Owner};
use controlplane_render::tls;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, HTTPHeader, KeyToPath, SecretVolumeSource, Volume, VolumeMount,
};
use kube::{Api, ResourceExt};

use crate::runtime::{Ctx, Error, State};
use crate::service::{Pass, ServiceKind, Watched, or_state};
use controlplane_render::cache::CacheClient;

/// The page the kubelet and the operator probe: it renders only with working settings and
/// the compressed static manifest.
pub const LOGIN_PATH: &str = "/auth/login/";

impl ServiceKind for Horizon {
    const SERVICE: &'static str = "horizon";

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
        self.spec
            .cache
            .as_ref()
            .map(|c| c.name.as_str())
            .into_iter()
            .collect()
    }

    fn keystone_name(&self) -> Option<&str> {
        Some(&self.spec.keystone.name)
    }

    fn pass(p: &mut Pass<'_, Self>) -> impl Future<Output = Result<State, Error>> + Send {
        pass(p)
    }
}

/// The in-cluster host of Horizon `name`'s Service.
pub fn internal_host(name: &str, namespace: &str) -> String {
    format!("{name}-api.{namespace}.svc")
}

/// Django's `ALLOWED_HOSTS` (pure): the Service's names and the public endpoint's host. The
/// kubelet's and the operator's probes send the Service's host name, so no wildcard is needed.
pub fn allowed_hosts(name: &str, namespace: &str, public: Option<&str>) -> Vec<String> {
    let svc = format!("{name}-api");
    let mut v = vec![
        svc.clone(),
        format!("{svc}.{namespace}"),
        internal_host(name, namespace),
        format!("{}.cluster.local", internal_host(name, namespace)),
    ];
    if let Some(host) = public
        .and_then(|u| u.split_once("://"))
        .map(|(_, rest)| rest.split(['/', '?', '#']).next().unwrap_or(""))
        .map(|hp| match hp.rsplit_once(':') {
            Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => h,
            _ => hp,
        })
        .filter(|h| !h.is_empty())
    {
        v.push(host.to_string());
    }
    v
}

/// A rendered file's key in the config Secret: Secret keys cannot hold `/`, so
/// `local/local_settings.py` is stored as `local_local_settings.py` and mapped back by the
/// volume's items (pure).
pub fn secret_key(path: &str) -> String {
    path.replace('/', "_")
}

/// The config Secret's volume: each key mounted at its path under the configuration
/// directory (pure).
pub fn config_volume(secret: &str, files: &BTreeMap<String, String>) -> (Volume, VolumeMount) {
    (
        Volume {
            name: "config".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.into()),
                default_mode: Some(0o440),
                items: Some(
                    files
                        .keys()
                        .map(|path| KeyToPath {
                            key: secret_key(path),
                            path: path.clone(),
                            ..KeyToPath::default()
                        })
                        .collect(),
                ),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        },
        VolumeMount {
            name: "config".into(),
            mount_path: render::POD_CONFIG_DIR.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        },
    )
}

/// Horizon's Deployment (pure): the shared API Deployment on port 8080 with the config and a
/// static-files emptyDir, init containers running the setup commands (collectstatic, then
/// compress) into it, and HTTP probes of the login page sent with the Service's host name
/// (Django refuses hosts outside `ALLOWED_HOSTS`, the pod IP among them). With `tls_secret`
/// the certificate Secret is mounted and the probes use HTTPS; `extra_volumes` (memcached's
/// CA and client certificate) are mounted too.
#[allow(clippy::too_many_arguments)]
pub fn deployment(
    owner: &Owner,
    spec: &controlplane_api::HorizonSpec,
    image: &str,
    config_hash: &str,
    files: &BTreeMap<String, String>,
    config_secret: &str,
    tls_secret: Option<&str>,
    extra_volumes: &[(Volume, VolumeMount)],
) -> Deployment {
    let (name, namespace) = (owner.instance.as_str(), owner.namespace.as_str());
    let static_files = (
        Volume {
            name: "static".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        },
        VolumeMount {
            name: "static".into(),
            mount_path: render::POD_STATIC_ROOT.into(),
            ..VolumeMount::default()
        },
    );
    let mut volumes = vec![config_volume(config_secret, files), static_files];
    volumes.extend(extra_volumes.iter().cloned());
    let mut dep = objects::api_deployment(
        owner,
        &spec.template,
        ApiParams {
            name: format!("{name}-api"),
            image: image.into(),
            command: vec![
                "uwsgi".into(),
                "--ini".into(),
                format!("{}/uwsgi.ini", render::POD_CONFIG_DIR),
            ],
            port: render::PORT,
            probe_path: LOGIN_PATH.into(),
            config_hash: config_hash.into(),
            volumes: volumes.clone(),
        },
    );
    let host = HTTPHeader {
        name: "Host".into(),
        value: internal_host(name, namespace),
    };
    if let Some(pod) = dep.spec.template.spec.as_mut() {
        let mounts: Vec<VolumeMount> = volumes.iter().map(|(_, m)| m.clone()).collect();
        let env: Vec<_> = render::setup_env(render::POD_CONFIG_DIR)
            .into_iter()
            .map(|(k, v)| objects::env(&k, v))
            .collect();
        pod.init_containers = Some(
            render::setup_commands("python3")
                .into_iter()
                .zip(["collectstatic", "compress"])
                .map(|(command, step)| Container {
                    name: step.into(),
                    image: Some(image.into()),
                    command: Some(command),
                    env: Some(env.clone()),
                    volume_mounts: Some(mounts.clone()),
                    ..Container::default()
                })
                .collect(),
        );
        for c in &mut pod.containers {
            for probe in [
                c.startup_probe.as_mut(),
                c.readiness_probe.as_mut(),
                c.liveness_probe.as_mut(),
            ]
            .into_iter()
            .flatten()
            {
                if let Some(get) = probe.http_get.as_mut() {
                    get.http_headers = Some(vec![host.clone()]);
                }
            }
        }
    }
    if let Some(secret) = tls_secret {
        tls::serve_tls(&mut dep, secret);
    }
    dep
}

/// GET the login page at `url` as the Service's host, verifying its certificate with `ca`
/// when it serves TLS; Ok on 200.
async fn login_page(
    url: &str,
    host: &str,
    timeout: Duration,
    ca: Option<&str>,
) -> Result<(), String> {
    let mut builder = reqwest::Client::builder()
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none());
    if let Some(ca) = ca {
        for c in reqwest::Certificate::from_pem_bundle(ca.as_bytes())
            .map_err(|e| format!("the dashboard's CA bundle: {e}"))?
        {
            builder = builder.add_root_certificate(c);
        }
    }
    let client = builder.build().map_err(|e| e.to_string())?;
    let target = format!("{}{LOGIN_PATH}", url.trim_end_matches('/'));
    let resp = client
        .get(&target)
        .header("Host", host)
        .send()
        .await
        .map_err(|e| format!("GET {target} failed: {e}"))?;
    if resp.status().as_u16() == 200 {
        Ok(())
    } else {
        Err(format!(
            "GET {target} (Host {host}) answered {}",
            resp.status()
        ))
    }
}

async fn pass(p: &mut Pass<'_, Horizon>) -> Result<State, Error> {
    let obj = p.obj;
    let spec = &obj.spec;
    if let Some(state) = p.invalid_spec() {
        return Ok(state);
    }
    let ks = or_state!(p.keystone(&spec.keystone.name).await?);
    let cache = or_state!(
        p.cache(
            spec.cache.as_ref().map(|c| c.name.as_str()),
            CacheClient::Django
        )
        .await?
    );
    let secret_key_secret = p.names.n("horizon-secret-key");
    let django_secret = or_state!(p.generated_password(&secret_key_secret).await?);
    let serving = or_state!(
        p.serving_tls(spec.template.tls.as_ref(), spec.public_endpoint.as_deref())
            .await?
    );

    let name = obj.name_any();
    let image = spec
        .template
        .image
        .clone()
        .unwrap_or_else(|| ServiceName::Horizon.default_image(&spec.release));
    let inputs = HorizonInputs {
        template: &spec.template,
        keystone_url: ks.internal_url.clone(),
        region: ks.region.clone(),
        allowed_hosts: allowed_hosts(&name, &p.ns, spec.public_endpoint.as_deref()),
        secret_key: django_secret,
        cache: cache.cache.clone(),
        // Keystone over TLS: Django's keystoneauth session verifies it with its CA, mounted
        // beside the settings.
        keystone_ca_file: ks
            .ca
            .as_ref()
            .map(|_| format!("{}/{}", render::POD_CONFIG_DIR, tls::CLIENT_CA_FILE)),
        https: secure_cookies(serving.is_some()),
        config_dir: render::POD_CONFIG_DIR.into(),
        static_root: render::POD_STATIC_ROOT.into(),
        python_home: None,
        listen: format!("0.0.0.0:{}", render::PORT),
        workers: 2,
    };
    let mut files = render::config_files(&inputs);
    if let Some(ca) = &ks.ca {
        files.insert(tls::CLIENT_CA_FILE.into(), ca.clone());
    }
    if serving.is_some()
        && let Some(u) = files.get_mut("uwsgi.ini")
    {
        let (crt, key) = tls::pod_files(tls::POD_TLS_DIR);
        *u = tls::uwsgi_https(u, &crt, &key);
    }
    let mut config_hash = render::config_hash(&image, &files);
    // A renewed certificate rolls the pods (uwsgi reads it once); Keystone's CA is already
    // one of the files, so a plain-HTTP dashboard's hash is unchanged.
    if let Some(s) = &serving {
        config_hash = tls::config_hash(&config_hash, Some(&s.cert), None);
    }
    // A new memcached CA or client certificate rolls them too (read when the cache connects).
    config_hash = cache.config_hash(&config_hash);
    let data = files
        .iter()
        .map(|(k, v)| (secret_key(k), v.clone()))
        .collect();
    crate::runtime::apply(
        &p.secrets(),
        &objects::secret(&p.owner, &p.names.config(), "config", data),
    )
    .await?;
    p.status.config_hash = Some(config_hash.clone());
    let mut internal = format!("http://{}:{}", internal_host(&name, &p.ns), render::PORT);
    if serving.is_some() {
        internal = tls::https_url(&internal);
    }
    p.status.endpoint = Some(internal.clone());

    let dep = deployment(
        &p.owner,
        spec,
        &image,
        &config_hash,
        &files,
        &p.names.config(),
        serving.as_ref().map(|s| s.secret.as_str()),
        &cache.volumes,
    );
    let applied = p.apply_api(&dep, render::PORT).await?;
    let want = spec.template.replicas.unwrap_or(1);
    let available = or_state!(p.rollout(&applied, want).await?);
    let url = p.operator_url(&internal);
    let outcome = match login_page(
        &url,
        &internal_host(&name, &p.ns),
        p.ctx.config.check_timeout,
        p.api_ca.as_deref(),
    )
    .await
    {
        Ok(()) => Ok(format!(
            "{available} pods; {url}{LOGIN_PATH} answered 200 (Horizon has no token API: the login page is probed)"
        )),
        Err(message) => Err(State::Degraded {
            reason: "ProbeFailed".into(),
            message,
        }),
    };
    Ok(p.probed(
        outcome,
        &format!("{available} pods; the login page probe of {url}{LOGIN_PATH}"),
    ))
}

/// Whether the session and CSRF cookies are `Secure` (pure): when the dashboard serves TLS
/// itself. A browser drops a `Secure` cookie set over plain HTTP, so a dashboard reached over
/// http (its Service; a public https:// endpoint with no ingress in front) could never log in.
/// TLS ended at an ingress: set both to `true` in `configOverrides.local_settings`.
pub fn secure_cookies(serves_tls: bool) -> bool {
    serves_tls
}

/// Runs the controller until `shutdown` resolves.
pub async fn run(
    ctx: Arc<Ctx>,
    api: Api<Horizon>,
    watched: Watched,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    crate::service::run(ctx, api, watched, shutdown).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_secure_only_when_the_dashboard_serves_tls() {
        // A cluster's public endpoint is https:// (its host-name pattern) whether or not an
        // ingress terminates TLS; the dashboard served over plain HTTP must still log in.
        assert!(!secure_cookies(false));
        assert!(secure_cookies(true));
    }
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    #[test]
    fn allowed_hosts_are_the_service_names_and_the_public_host() {
        let h = allowed_hosts("dash", "os", Some("https://dash.example.org:8443/x"));
        assert_eq!(
            h,
            [
                "dash-api",
                "dash-api.os",
                "dash-api.os.svc",
                "dash-api.os.svc.cluster.local",
                "dash.example.org"
            ]
        );
        assert_eq!(allowed_hosts("dash", "os", None).len(), 4);
    }

    #[test]
    fn the_deployment_collects_static_files_first_and_probes_as_the_service() {
        let spec: controlplane_api::HorizonSpec =
            serde_json::from_value(serde_json::json!({"keystone": {"name": "ks"}})).expect("spec");
        let owner = Owner {
            reference: OwnerReference {
                api_version: "controlplane.sunet.se/v1alpha1".into(),
                kind: "Horizon".into(),
                name: "dash".into(),
                uid: "u".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            },
            namespace: "os".into(),
            instance: "dash".into(),
            service: "horizon".into(),
        };
        let files = BTreeMap::from([
            ("local/__init__.py".to_string(), String::new()),
            (
                "local/local_settings.py".to_string(),
                "DEBUG = False\n".to_string(),
            ),
            ("uwsgi.ini".to_string(), "[uwsgi]\n".to_string()),
        ]);
        let d = deployment(
            &owner,
            &spec,
            "img",
            "h",
            &files,
            "dash-horizon-config",
            None,
            &[],
        );
        let pod = d.spec.template.spec.expect("pod");
        let init: Vec<_> = pod
            .init_containers
            .expect("init")
            .iter()
            .map(|c| c.command.clone().expect("command")[3].clone())
            .collect();
        assert_eq!(init, ["collectstatic", "compress"]);
        let c = &pod.containers[0];
        let get = c
            .readiness_probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .expect("probe");
        assert_eq!(get.path.as_deref(), Some(LOGIN_PATH));
        assert_eq!(
            get.http_headers.as_ref().expect("headers")[0].value,
            "dash-api.os.svc"
        );
        let items = pod.volumes.expect("volumes")[0]
            .secret
            .as_ref()
            .and_then(|s| s.items.clone())
            .expect("items");
        assert!(
            items
                .iter()
                .any(|i| i.key == "local_local_settings.py" && i.path == "local/local_settings.py")
        );
        assert!(items.iter().all(|i| !i.key.contains('/')));
        assert_eq!(get.scheme, None);

        // Serving TLS: the certificate is mounted and the probes (still as the Service's host)
        // use HTTPS.
        let d = deployment(
            &owner,
            &spec,
            "img",
            "h",
            &files,
            "dash-horizon-config",
            Some("dash-api-tls"),
            &[objects::secret_volume(
                "cache-ca",
                "mc-ca",
                crate::service::CACHE_CA_DIR,
            )],
        );
        let pod = d.spec.template.spec.expect("pod");
        let c = &pod.containers[0];
        for probe in [&c.startup_probe, &c.readiness_probe, &c.liveness_probe] {
            let get = probe
                .as_ref()
                .and_then(|p| p.http_get.as_ref())
                .expect("probe");
            assert_eq!(get.scheme.as_deref(), Some("HTTPS"));
            assert_eq!(
                get.http_headers.as_ref().expect("headers")[0].value,
                "dash-api.os.svc"
            );
        }
        assert!(
            c.volume_mounts
                .iter()
                .flatten()
                .any(|m| m.mount_path == tls::POD_TLS_DIR)
        );
        assert!(pod.volumes.iter().flatten().any(|v| {
            v.secret.as_ref().and_then(|s| s.secret_name.as_deref()) == Some("dash-api-tls")
        }));
        // The init containers need no certificate.
        assert!(pod.init_containers.iter().flatten().all(|i| {
            i.volume_mounts
                .iter()
                .flatten()
                .all(|m| m.mount_path != tls::POD_TLS_DIR)
        }));
        // memcached's CA reaches the serving container.
        assert!(
            c.volume_mounts
                .iter()
                .flatten()
                .any(|m| m.mount_path == crate::service::CACHE_CA_DIR)
        );
    }
}
