//! `Nova` on the shared pipeline: Keystone, Placement and the external services (database,
//! messaging, cache) Ready → passwords and the metadata proxy secret → `nova.conf`, the
//! compute nodes' configuration → Jobs: the three databases, `api_db sync`, the cell mappings,
//! `db sync`, the service user → the API, metadata API, conductor, scheduler and noVNC proxy
//! Deployments (+ Services) → `online_data_migrations` → a token from Keystone accepted by the
//! deployed API (`GET /v2.1/servers`).
//!
//! Host discovery is the scheduler's periodic task (`discover_hosts_in_cells_interval`, the
//! spec's `discoverHostsIntervalSeconds`): a new compute node is mapped into cell1 within one
//! period, with no Job or CronJob to run.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use controlplane_api::condition_types as ct;
use controlplane_api::status::Conditioned;
use controlplane_api::validation::Validate;
use controlplane_api::{Glance, Neutron, Nova, NovaSpec, Placement, ServiceName, ServiceStatus};
use controlplane_render::authtoken::KeystoneAuth;
use controlplane_render::ini::Ini;
use controlplane_render::nova::zones::AggregateStep;
use controlplane_render::nova::{
    self as render, ComputeNode, Databases, NovaError, NovaInputs, Paths, Peers, Vnc,
};
use controlplane_render::objects::{self, Check, ComponentParams};
use controlplane_render::secrets;
use controlplane_render::tls;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};

use crate::runtime::{self, Ctx, Error, State};
use crate::service::{Pass, ServiceKind, StepState, Watched, or_state, secret_str};
use controlplane_render::cache::CacheClient;

/// The Job steps, in order (`online-data-migrations` runs once the Deployments rolled).
pub const STEPS: [&str; 8] = [
    "db-init-api",
    "db-init-cell0",
    "db-init",
    "api-db-sync",
    "cell-setup",
    "db-sync",
    "service-user",
    "online-data-migrations",
];
/// The path (below `/v2.1`) the probe GETs with a token: it answers 200 only when
/// authenticated.
pub const PROBE_PATH: &str = "/servers";
/// `nova-manage` in the image's PATH.
pub const NOVA_MANAGE: &str = "nova-manage";
/// Key of the metadata proxy secret in Secret `<name>-metadata-proxy` (Neutron's metadata
/// agents read it from there).
pub const METADATA_SECRET_KEY: &str = "secret";
/// Where a compute node is to place the CA bundle (key `api-ca.crt` of its configuration
/// Secret, present when an API it calls serves TLS): its `nova-compute.conf` names this path
/// in the client sections' `cafile`.
pub const COMPUTE_CA_FILE: &str = "/etc/nova/api-ca.crt";
/// Key of the compute nodes' file in Secret `<name>-compute-config`.
pub const COMPUTE_CONFIG_KEY: &str = render::COMPUTE_CONF;

/// Secret holding the metadata proxy shared secret of Nova CR `name`.
pub fn metadata_secret_name(name: &str) -> String {
    format!("{name}-metadata-proxy")
}

/// Secret holding the compute nodes' `nova-compute.conf` of Nova CR `name`.
pub fn compute_config_secret_name(name: &str) -> String {
    format!("{name}-compute-config")
}

/// The step of the zones' host aggregates (only with availability zones; after
/// `online-data-migrations`).
pub const ZONE_STEP: &str = "aggregates";
/// The compute services the aggregate step looks for its hosts in (below `/v2.1`).
pub const COMPUTE_SERVICES_PATH: &str = "/os-services?binary=nova-compute";
/// Key of the zone's name in Secret `<name>-compute-config-<zone>`.
pub const ZONE_KEY: &str = "availability-zone";

/// Secret holding the compute configuration of zone `zone`'s nodes of Nova CR `name`.
pub fn zone_compute_config_secret_name(name: &str, zone: &str) -> String {
    format!("{name}-compute-config-{zone}")
}

/// The data of a zone's compute configuration Secret (pure): the nodes' `nova-compute.conf`
/// (Nova has no compute-side option naming the zone: a host's zone is its aggregate, which the
/// aggregate step maintains) and the zone's name, for what sets the zone's nodes up.
pub fn zone_compute_config(compute_conf: &str, zone: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (COMPUTE_CONFIG_KEY.to_string(), compute_conf.to_string()),
        (ZONE_KEY.to_string(), zone.to_string()),
    ])
}

/// The Deployments (and the port of the Service of those that listen), by component.
pub const COMPONENTS: [(&str, Option<u16>); 5] = [
    ("api", Some(render::API_PORT)),
    ("metadata", Some(render::METADATA_PORT)),
    ("conductor", None),
    ("scheduler", None),
    ("novncproxy", Some(render::NOVNCPROXY_PORT)),
];

/// The components that serve the certificate with `tls`: both uwsgi APIs and the noVNC
/// proxy. The conductor and the scheduler serve nothing.
pub const TLS_COMPONENTS: [&str; 3] = ["api", "metadata", "novncproxy"];

/// The serving certificate's names beyond the API Service's (pure): the metadata API's and the
/// noVNC proxy's Services (one certificate for the three listeners) and the public hosts of
/// `publicEndpoint` and `vncProxyPublicEndpoint`.
pub fn tls_extra_names(spec: &NovaSpec, name: &str, ns: &str) -> Vec<String> {
    let mut names = Vec::new();
    for component in ["metadata", "novncproxy"] {
        names.extend(tls::service_dns_names(&format!("{name}-{component}"), ns));
    }
    for url in [&spec.public_endpoint, &spec.vnc_proxy_public_endpoint]
        .into_iter()
        .flatten()
    {
        if let Some(h) = tls::url_host(url)
            && !names.contains(&h)
        {
            names.push(h);
        }
    }
    names
}

/// A component's Deployment (pure): with `tls_secret`, the components of [`TLS_COMPONENTS`]
/// mount the certificate (and their HTTP probes become HTTPS; the proxy's is TCP).
pub fn component_deployment(
    owner: &objects::Owner,
    t: &controlplane_api::common::ServiceTemplate,
    params: ComponentParams,
    tls_secret: Option<&str>,
) -> k8s_openapi::api::apps::v1::Deployment {
    let serves = TLS_COMPONENTS.contains(&params.component.as_str());
    let mut dep = objects::component_deployment(owner, t, params);
    if let (Some(secret), true) = (tls_secret, serves) {
        tls::serve_tls(&mut dep, secret);
    }
    dep
}

/// The API database's and cell0's names beside cell1's `base` (`nova` → `nova_api`,
/// `nova_cell0`): Nova's own convention.
pub fn database_names(base: &str) -> (String, String) {
    (format!("{base}_api"), format!("{base}_cell0"))
}

/// The compute nodes' configuration: what every compute node shares, without the node's own
/// `host` and `my_ip` (oslo.config's defaults, the node's host name and address, apply; the
/// VNC listener follows `$my_ip`). A node may set them in a file read after this one.
pub fn compute_node_conf(i: &NovaInputs<'_>, driver: &str) -> Result<String, NovaError> {
    let text = render::compute_conf(
        i,
        &ComputeNode {
            host: String::new(),
            compute_driver: driver.into(),
            my_ip: "$my_ip".into(),
        },
    )?;
    let mut ini = Ini::parse(&text);
    if let Some(d) = ini.0.get_mut("DEFAULT") {
        d.remove("host");
        d.remove("my_ip");
    }
    Ok(ini.render())
}

impl ServiceKind for Nova {
    const SERVICE: &'static str = "nova";

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
        match step {
            "cell-setup" => Some((
                "CellsMapped",
                format!("cell0 and cell1 mapped in the API database (Job {job})"),
            )),
            "service-user" => Some((
                "ServiceRegistered",
                format!("service user, compute service and endpoints in place (Job {job})"),
            )),
            _ => None,
        }
    }

    fn pass(p: &mut Pass<'_, Self>) -> impl Future<Output = Result<State, Error>> + Send {
        pass(p)
    }
}

/// What the render step reports as a state.
fn render_state(e: NovaError) -> State {
    match e {
        NovaError::Messaging(m) => State::Blocked {
            reason: "ExternalServiceIncomplete".into(),
            message: format!("messaging external service: {m}"),
        },
        NovaError::Cells(c) => State::InvalidSpec(format!("spec.database: {c}")),
    }
}

/// The noVNC proxy's base URL users open (pure): `https` for the in-cluster Service when the
/// spec asks for TLS (the proxy then accepts TLS only).
pub fn vnc_base_url(spec: &NovaSpec, name: &str, ns: &str) -> String {
    let scheme = if spec.template.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let root = spec.vnc_proxy_public_endpoint.clone().unwrap_or_else(|| {
        format!(
            "{scheme}://{name}-novncproxy.{ns}.svc:{}",
            render::NOVNCPROXY_PORT
        )
    });
    format!("{}/vnc_lite.html", root.trim_end_matches('/'))
}

async fn pass(p: &mut Pass<'_, Nova>) -> Result<State, Error> {
    let obj = p.obj;
    let spec = &obj.spec;
    let name = obj.name_any();
    if let Some(state) = p.invalid_spec() {
        return Ok(state);
    }
    // Gate: Keystone, Placement and the external services Ready before anything is created.
    let ks = or_state!(p.keystone(&spec.keystone.name).await?);
    let placement: Placement = or_state!(p.ready_peer::<Placement>(&spec.placement.name).await?);
    let placement_url = placement
        .status
        .as_ref()
        .and_then(|s| s.endpoint.clone())
        .unwrap_or_else(|| {
            controlplane_render::placement::internal_url(&spec.placement.name, &p.ns)
        });
    // The peers over TLS: their URLs are https and their CAs join Keystone's in the bundle
    // Nova's clients verify with.
    let placement_ca =
        crate::tls::api_ca(&p.ctx.client, &p.ns, placement.spec.template.tls.as_ref()).await?;
    let glance_tls = match &spec.glance {
        Some(g) => Api::<Glance>::namespaced(p.ctx.client.clone(), &p.ns)
            .get_opt(&g.name)
            .await?
            .and_then(|g| g.spec.template.tls),
        None => None,
    };
    let neutron_tls = match &spec.neutron {
        Some(n) => Api::<Neutron>::namespaced(p.ctx.client.clone(), &p.ns)
            .get_opt(&n.name)
            .await?
            .and_then(|n| n.spec.template.tls),
        None => None,
    };
    let glance_ca = crate::tls::api_ca(&p.ctx.client, &p.ns, glance_tls.as_ref()).await?;
    let neutron_ca = crate::tls::api_ca(&p.ctx.client, &p.ns, neutron_tls.as_ref()).await?;
    let client_ca = tls::ca_bundle([
        ks.ca.as_deref(),
        placement_ca.as_deref(),
        glance_ca.as_deref(),
        neutron_ca.as_deref(),
    ]);
    let scheme = |url: String, tls: bool| if tls { tls::https_url(&url) } else { url };
    let db_secret = p.names.db();
    let cell1_name = spec.database.database_name_or(Nova::SERVICE);
    let (api_name, cell0_name) = database_names(&cell1_name);
    let user = spec.database.username_or(Nova::SERVICE);
    let svc = spec.database.service.name.clone();
    let cell1 = or_state!(
        p.database(&svc, cell1_name, user.clone(), &db_secret)
            .await?
    );
    let api_db = or_state!(p.database(&svc, api_name, user.clone(), &db_secret).await?);
    let cell0 = or_state!(p.database(&svc, cell0_name, user, &db_secret).await?);
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
    // The secret Neutron's metadata agents sign instance ids with: generated once, kept.
    let md_name = metadata_secret_name(&name);
    let md = p
        .ensure_generated(&md_name, "metadata-proxy", || {
            BTreeMap::from([(METADATA_SECRET_KEY.to_string(), secrets::password(32))])
        })
        .await?;
    let Some(metadata_secret) = secret_str(&md, METADATA_SECRET_KEY) else {
        return Ok(State::Degraded {
            reason: "SecretInvalid".into(),
            message: format!(
                "Secret {md_name} has no key {METADATA_SECRET_KEY}; delete it to generate one"
            ),
        });
    };

    // Render.
    let image = spec
        .template
        .image
        .clone()
        .unwrap_or_else(|| ServiceName::Nova.default_image(&spec.release));
    let auth = KeystoneAuth {
        auth_url: ks.internal_url.clone(),
        www_authenticate_uri: ks.public_url.clone(),
        region: ks.region.clone(),
        username: Nova::SERVICE.into(),
        password: service_password.clone(),
        project: "service".into(),
    };
    let inputs = NovaInputs {
        template: &spec.template,
        databases: Databases {
            api: api_db.database.clone(),
            cell0: cell0.database.clone(),
            cell1: cell1.database.clone(),
        },
        messaging: mq.nova(),
        keystone: auth.clone(),
        cache: cache.cache.clone(),
        peers: Peers {
            placement: Some(placement_url),
            glance: spec.glance.as_ref().map(|g| {
                scheme(
                    controlplane_render::glance::internal_url(&g.name, &p.ns),
                    glance_tls.is_some(),
                )
            }),
            neutron: spec.neutron.as_ref().map(|n| {
                scheme(
                    controlplane_render::neutron::internal_url(&n.name, &p.ns),
                    neutron_tls.is_some(),
                )
            }),
        },
        metadata_secret,
        vnc: Vnc {
            base_url: vnc_base_url(spec, &name, &p.ns),
            proxy_host: "0.0.0.0".into(),
            proxy_port: render::NOVNCPROXY_PORT,
        },
        discover_hosts_interval: spec.discover_hosts_interval_seconds,
        host: name.clone(),
        paths: Paths::pod(),
        api_listen: format!("0.0.0.0:{}", render::API_PORT),
        metadata_listen: format!("0.0.0.0:{}", render::METADATA_PORT),
        workers: 2,
    };
    let mut files = match render::config_files(&inputs) {
        Ok(f) => f,
        Err(e) => return Ok(render_state(e)),
    };
    // Hosts in no zone's aggregate are in the first zone.
    let zones = &spec.availability_zones;
    if let Some(c) = files.get_mut(render::NOVA_CONF) {
        *c = render::zones::with_default_zone(c, zones);
    }
    // TLS: the compute API, the metadata API and the noVNC proxy serve one certificate (it
    // names the three Services); every client section verifies with the bundle.
    let serving = or_state!(
        p.serving_tls_names(
            spec.template.tls.as_ref(),
            &tls_extra_names(spec, &name, &p.ns)
        )
        .await?
    );
    tls::edit_files(
        &mut files,
        render::POD_CONFIG_DIR,
        &[render::NOVA_CONF],
        &render::UWSGI_FILES,
        client_ca.as_deref(),
        serving.as_ref().map(|_| tls::POD_TLS_DIR),
    );
    if serving.is_some()
        && let Some(c) = files.get_mut(render::NOVA_CONF)
    {
        let (crt, key) = tls::pod_files(tls::POD_TLS_DIR);
        *c = render::novncproxy_tls(c, &crt, &key);
    }
    let mut compute = match compute_node_conf(&inputs, &spec.compute_driver) {
        Ok(c) => c,
        Err(e) => return Ok(render_state(e)),
    };
    let mut compute_files = BTreeMap::new();
    if let Some(ca) = &client_ca {
        // Compute nodes call Placement, Neutron and Glance too: the bundle travels in their
        // Secret, to be placed at COMPUTE_CA_FILE.
        compute = tls::set_client_ca(&compute, &tls::CLIENT_SECTIONS, COMPUTE_CA_FILE);
        compute_files.insert(tls::CLIENT_CA_FILE.to_string(), ca.clone());
    }
    let hashes = match render::job_hashes(&inputs, &image, NOVA_MANAGE) {
        Ok(h) => h,
        Err(e) => return Ok(render_state(e)),
    };
    let cell_env = match render::cell_setup_env(&inputs, NOVA_MANAGE) {
        Ok(e) => e,
        Err(e) => return Ok(render_state(e)),
    };
    let conf = files.get(render::NOVA_CONF).cloned().unwrap_or_default();
    let own = |f: &str| files.get(f).cloned();
    runtime::apply(
        &p.secrets(),
        &objects::secret(&p.owner, &p.names.config(), "config", files.clone()),
    )
    .await?;
    runtime::apply(
        &p.secrets(),
        &objects::secret(
            &p.owner,
            &compute_config_secret_name(&name),
            "compute-config",
            {
                let mut data = compute_files.clone();
                data.insert(COMPUTE_CONFIG_KEY.to_string(), compute.clone());
                data
            },
        ),
    )
    .await?;
    // One compute configuration per zone, labelled with it, for the zone's nodes.
    let mut compute_secrets = vec![compute_config_secret_name(&name)];
    for z in zones {
        let secret_name = zone_compute_config_secret_name(&name, &z.name);
        let mut secret = objects::secret(&p.owner, &secret_name, "compute-config", {
            let mut data = compute_files.clone();
            data.extend(zone_compute_config(&compute, &z.name));
            data
        });
        secret.metadata.labels.get_or_insert_default().insert(
            controlplane_render::zones::ZONE_LABEL.into(),
            z.name.clone(),
        );
        runtime::apply(&p.secrets(), &secret).await?;
        compute_secrets.push(secret_name);
    }
    crate::zones::prune(
        &p.secrets(),
        &p.names.base,
        obj.meta().uid.as_deref(),
        &compute_config_secret_name(&name),
        &compute_secrets,
    )
    .await?;
    // A renewed certificate or a new CA rolls every component (they all read the bundle).
    // So does a new memcached CA or client certificate (the API and metadata pods read it).
    let with_tls = |h: String| {
        let h = if client_ca.is_some() || serving.is_some() {
            tls::config_hash(
                &h,
                serving.as_ref().map(|s| s.cert.as_str()),
                client_ca.as_deref(),
            )
        } else {
            h
        };
        cache.config_hash(&h)
    };
    let api_hash = with_tls(render::config_hash(
        &image,
        &conf,
        own(render::API_UWSGI).as_deref(),
    ));
    p.status.config_hash = Some(api_hash.clone());
    let mut internal = render::internal_url(&name, &p.ns);
    if serving.is_some() {
        internal = tls::https_url(&internal);
    }
    p.status.endpoint = Some(internal.clone());
    let public = spec
        .public_endpoint
        .as_ref()
        .map(|u| format!("{}/v2.1", u.trim_end_matches('/')))
        .unwrap_or_else(|| internal.clone());

    let mut volumes = vec![objects::secret_volume(
        "config",
        &p.names.config(),
        render::POD_CONFIG_DIR,
    )];
    volumes.extend(cell1.ca_volume.iter().cloned());
    volumes.extend(cache.volumes.iter().cloned());
    volumes.extend(mq.volumes.iter().cloned());
    // state_path (lock files) must be writable: the image has no /var/lib/nova.
    volumes.push(objects::empty_dir_volume("state", render::POD_STATE_DIR));

    // Jobs, in order; each waits for the one before.
    for (step, db) in [
        ("db-init-api", &api_db),
        ("db-init-cell0", &cell0),
        ("db-init", &cell1),
    ] {
        if let Some(s) = p.db_init_as(step, &image, db, &db_secret).await? {
            return Ok(s);
        }
    }
    let paths = Paths::pod();
    let env = |pairs: Vec<(String, String)>| {
        pairs
            .into_iter()
            .map(|(k, v)| objects::env(&k, v))
            .collect::<Vec<_>>()
    };
    let manage_steps = [
        (
            "api-db-sync",
            &hashes.api_db_sync,
            render::api_db_sync_command(NOVA_MANAGE, &paths),
            vec![],
        ),
        (
            "cell-setup",
            &hashes.cell_setup,
            controlplane_render::nova::cells::command(),
            env(cell_env),
        ),
        (
            "db-sync",
            &hashes.db_sync,
            render::db_sync_command(NOVA_MANAGE, &paths),
            vec![],
        ),
    ];
    for (step, hash, command, env) in manage_steps {
        if let Some(s) = p
            .job_step(step, hash, &image, command, env, volumes.clone())
            .await?
        {
            return Ok(s);
        }
    }
    let entry = render::service_entry(&auth, &ks.region, &public, &internal);
    if let Some(s) = p
        .service_user(&image, &entry, &ks, &user_secret, &service_password)
        .await?
    {
        return Ok(s);
    }

    // The Deployments and the Services of those that listen.
    let want = spec.template.replicas.unwrap_or(1);
    let mut applied = Vec::new();
    for (component, port) in COMPONENTS {
        let (command, own_file, check) = match component {
            "api" => (
                uwsgi(render::API_UWSGI),
                own(render::API_UWSGI),
                Check::Http {
                    port: render::API_PORT,
                    // The version document answers without a token: what the kubelet can
                    // probe.
                    path: "/".into(),
                },
            ),
            "metadata" => (
                uwsgi(render::METADATA_UWSGI),
                own(render::METADATA_UWSGI),
                Check::Http {
                    port: render::METADATA_PORT,
                    path: "/".into(),
                },
            ),
            "novncproxy" => (
                render::service_command("nova-novncproxy", &paths),
                None,
                Check::Tcp {
                    port: render::NOVNCPROXY_PORT,
                },
            ),
            other => (
                render::service_command(&format!("nova-{other}"), &paths),
                None,
                Check::None,
            ),
        };
        let dep_name = p.names.n(component);
        let mut dep = component_deployment(
            &p.owner,
            &spec.template,
            ComponentParams {
                name: dep_name.clone(),
                component: component.into(),
                image: image.clone(),
                command,
                check,
                config_hash: with_tls(render::config_hash(&image, &conf, own_file.as_deref())),
                volumes: volumes.clone(),
                replicas: want,
                privileged: false,
            },
            serving.as_ref().map(|s| s.secret.as_str()),
        );
        if !zones.is_empty() {
            // Every component serves all zones: spread it over them (and the nodes).
            controlplane_render::zones::spread(&mut dep);
        }
        let service =
            port.map(|port| objects::component_service(&p.owner, &dep_name, component, port));
        applied.push(p.apply_component(&dep, service.as_ref()).await?);
    }
    let available = or_state!(p.rollout_all(&applied, want).await?);

    // Online data migrations once every service runs the current release.
    if let Some(s) = p
        .job_step(
            "online-data-migrations",
            &hashes.online_data_migrations,
            &image,
            render::online_data_migrations_command(NOVA_MANAGE, &paths),
            vec![],
            volumes.clone(),
        )
        .await?
    {
        return Ok(s);
    }
    // The zones' host aggregates, through the deployed API as Nova's service user; what is
    // missing goes to `ZonesComplete`, not to `Ready` (hypervisors join after the control plane).
    let url = p.operator_url(&internal);
    if zones.is_empty() {
        p.status
            .conditions
            .retain(|c| c.type_ != ct::ZONES_COMPLETE);
    } else {
        let (condition, failed) = zones_pass(
            p,
            &ks,
            &url,
            &internal,
            &image,
            &service_password,
            &user_secret,
        )
        .await?;
        let before = obj
            .status
            .as_ref()
            .and_then(|s| s.condition(ct::ZONES_COMPLETE));
        if let Some((reason, note)) = render::zones::zones_event(before, &condition) {
            p.ctx.event(obj, EventType::Normal, &reason, note).await;
        }
        runtime::set(
            &mut p.status,
            condition,
            obj.meta().generation,
            &jiff::Timestamp::now().to_string(),
        );
        if let Some(s) = failed {
            return Ok(s);
        }
    }
    Ok(p.authenticated_probe(&ks, &url, PROBE_PATH, available)
        .await)
}

/// The aggregate step: lists the compute services (the listed hosts registered are an input of
/// the step's hash, so a hypervisor that registers runs it again), runs the Job, and returns
/// the `ZonesComplete` condition, with the Degraded state of a failed Job. While hosts are
/// missing, the next pass comes after the check interval rather than the resync.
async fn zones_pass(
    p: &mut Pass<'_, Nova>,
    ks: &crate::service::KeystoneAccess,
    url: &str,
    internal: &str,
    image: &str,
    service_password: &str,
    user_secret: &str,
) -> Result<(api::Condition, Option<State>), Error> {
    let obj = p.obj;
    let zones = &obj.spec.availability_zones;
    let recheck = p.ctx.config.check_interval;
    let listed = p
        .admin_get_json(ks, url, |_| COMPUTE_SERVICES_PATH.to_string())
        .await
        .and_then(|body| render::zones::ComputeHosts::read(zones, &body));
    let hosts = match listed {
        Ok(h) => h,
        Err(why) => {
            // Nothing known to run the step for: look again soon, Ready stays the probe's.
            p.soon(recheck);
            return Ok((render::zones::services_unknown(&why), None));
        }
    };
    let env =
        render::zones::aggregate_env(&ks.internal_url, Nova::SERVICE, "service", internal, zones);
    let hash = render::zones::aggregate_hash(image, &env, service_password, &hosts.registered);
    let mut env: Vec<_> = env.into_iter().map(|(k, v)| objects::env(&k, v)).collect();
    env.push(objects::env_from_secret(
        "OS_PASSWORD",
        user_secret,
        "password",
    ));
    let step = p
        .job_step_state(
            ZONE_STEP,
            &hash,
            image,
            render::zones::aggregate_command("python3"),
            env,
            vec![],
        )
        .await?;
    if !hosts.missing.is_empty() {
        p.soon(recheck);
    }
    let (step, failed) = match step {
        StepState::Done => (AggregateStep::Done, None),
        StepState::Running(m) => (AggregateStep::Running(m), None),
        StepState::Failed(m) => (
            AggregateStep::Failed(m.clone()),
            StepState::Failed(m).blocking(),
        ),
    };
    Ok((
        render::zones::zones_condition(zones, &hosts, &step, recheck),
        failed,
    ))
}

fn uwsgi(file: &str) -> Vec<String> {
    vec![
        "uwsgi".into(),
        "--ini".into(),
        format!("{}/{file}", render::POD_CONFIG_DIR),
    ]
}

/// Runs the controller until `shutdown` resolves.
pub async fn run(
    ctx: Arc<Ctx>,
    api: Api<Nova>,
    watched: Watched,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    crate::service::run(ctx, api, watched, shutdown).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn owner() -> objects::Owner {
        objects::Owner {
            reference: OwnerReference {
                api_version: "controlplane.sunet.se/v1alpha1".into(),
                kind: "Nova".into(),
                name: "nova".into(),
                uid: "u".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            },
            namespace: "os".into(),
            instance: "nova".into(),
            service: "nova".into(),
        }
    }

    fn params(component: &str, check: Check) -> ComponentParams {
        ComponentParams {
            name: format!("nova-{component}"),
            component: component.into(),
            image: "img".into(),
            command: vec!["x".into()],
            check,
            config_hash: "h".into(),
            volumes: vec![objects::secret_volume(
                "config",
                "nova-config",
                render::POD_CONFIG_DIR,
            )],
            replicas: 1,
            privileged: false,
        }
    }

    fn mounts_tls(d: &k8s_openapi::api::apps::v1::Deployment) -> bool {
        let pod = d.spec.template.spec.as_ref();
        let Some(pod) = pod else { return false };
        let volume = pod.volumes.iter().flatten().any(|v| {
            v.secret.as_ref().and_then(|s| s.secret_name.as_deref()) == Some("nova-api-tls")
        });
        let mount = pod.containers[0]
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.mount_path == tls::POD_TLS_DIR);
        volume && mount
    }

    #[test]
    fn the_metadata_api_and_the_novnc_proxy_mount_the_certificate_with_tls() {
        let t = controlplane_api::common::ServiceTemplate::default();
        let metadata = || {
            params(
                "metadata",
                Check::Http {
                    port: render::METADATA_PORT,
                    path: "/".into(),
                },
            )
        };
        let novnc = || {
            params(
                "novncproxy",
                Check::Tcp {
                    port: render::NOVNCPROXY_PORT,
                },
            )
        };
        let md = component_deployment(&owner(), &t, metadata(), Some("nova-api-tls"));
        assert!(mounts_tls(&md));
        let c = &md.spec.template.spec.as_ref().expect("pod").containers[0];
        let scheme = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
            p.as_ref()
                .and_then(|p| p.http_get.as_ref())
                .and_then(|g| g.scheme.clone())
        };
        assert_eq!(scheme(&c.startup_probe).as_deref(), Some("HTTPS"));
        assert_eq!(scheme(&c.readiness_probe).as_deref(), Some("HTTPS"));
        assert_eq!(scheme(&c.liveness_probe).as_deref(), Some("HTTPS"));
        assert!(mounts_tls(&component_deployment(
            &owner(),
            &t,
            novnc(),
            Some("nova-api-tls")
        )));
        // Plain HTTP: no certificate; the conductor never mounts it.
        assert!(!mounts_tls(&component_deployment(
            &owner(),
            &t,
            metadata(),
            None
        )));
        assert!(!mounts_tls(&component_deployment(
            &owner(),
            &t,
            novnc(),
            None
        )));
        assert!(!mounts_tls(&component_deployment(
            &owner(),
            &t,
            params("conductor", Check::None),
            Some("nova-api-tls")
        )));
    }

    fn spec(extra: serde_json::Value) -> NovaSpec {
        let mut v = serde_json::json!({
            "keystone": {"name": "keystone"},
            "placement": {"name": "placement"},
            "database": {"service": {"name": "db"}},
            "messaging": {"name": "mq"},
        });
        if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        serde_json::from_value(v).expect("spec")
    }

    #[test]
    fn the_certificate_names_the_metadata_and_novnc_services_and_public_hosts() {
        let s = spec(serde_json::json!({
            "tls": {},
            "publicEndpoint": "https://nova.example.org",
            "vncProxyPublicEndpoint": "https://vnc.example.org:6080",
        }));
        let names = tls_extra_names(&s, "nova", "os");
        for n in [
            "nova-metadata.os.svc",
            "nova-metadata",
            "nova-novncproxy.os.svc",
            "nova-novncproxy.os.svc.cluster.local",
            "nova.example.org",
            "vnc.example.org",
        ] {
            assert!(names.iter().any(|x| x == n), "{n} missing from {names:?}");
        }
        let ca = tls::generate_ca("ca", 1_800_000_000).expect("ca");
        let mut all = tls::service_dns_names("nova-api", "os");
        all.extend(names);
        let leaf = tls::issue_serving(&ca, &all, 1_800_000_000).expect("leaf");
        assert_eq!(
            tls::reissue_reason(&leaf.cert, &ca.cert, &all, 1_800_000_000),
            None
        );
        // A certificate of the API's names only (before this change) is re-issued.
        let old = tls::issue_serving(
            &ca,
            &tls::service_dns_names("nova-api", "os"),
            1_800_000_000,
        )
        .expect("old");
        assert!(tls::reissue_reason(&old.cert, &ca.cert, &all, 1_800_000_000).is_some());
        // The in-cluster noVNC URL is https with TLS, http without.
        assert_eq!(
            vnc_base_url(&spec(serde_json::json!({"tls": {}})), "nova", "os"),
            "https://nova-novncproxy.os.svc:6080/vnc_lite.html"
        );
        assert_eq!(
            vnc_base_url(&spec(serde_json::json!({})), "nova", "os"),
            "http://nova-novncproxy.os.svc:6080/vnc_lite.html"
        );
    }
}
