//! `Neutron` on the shared pipeline: Keystone, the database and the `ovn` external service
//! Ready → passwords → config → `db-init`, `db-expand`, `service-user` Jobs → the API and OVN
//! maintenance worker Deployments → `db-contract` once every server runs the new
//! configuration → a token from Keystone accepted by the deployed API (`GET /v2.0/networks`)
//! → the metadata agent's settings once the referenced Nova's shared secret exists.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use controlplane_api::common::ServiceTemplate;
use controlplane_api::external::{OpenStackExternalService, ServiceKind as ExternalKind};
use controlplane_api::validation::{Validate, parse_endpoint};
use controlplane_api::{Neutron, Nova, ServiceName, ServiceStatus};
use controlplane_render::authtoken::KeystoneAuth;
use controlplane_render::neutron::{
    self as render, Metadata, Networks, NeutronInputs, Ovn, OvnTls, Paths,
};
use controlplane_render::objects::{self, ApiParams, Owner};
use controlplane_render::tls;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, Volume, VolumeMount};
use kube::{Api, ResourceExt};

use crate::runtime::{self, Ctx, Error, State};
use crate::service::{Pass, ServiceKind, Watched, or_state, secret_str};
use controlplane_render::cache::CacheClient;

/// The Job steps, in order.
pub const STEPS: [&str; 4] = ["db-init", "db-expand", "service-user", "db-contract"];
/// The path the probe GETs with a token: the network list answers only an authenticated user.
pub const PROBE_PATH: &str = "/v2.0/networks";
/// Port of Nova's metadata API (its Service `<nova>-metadata`).
pub const NOVA_METADATA_PORT: u16 = 8775;
/// Where the OVN CA bundle is mounted in Neutron pods.
pub const POD_OVN_CA_DIR: &str = "/etc/neutron/ovn-ca";
/// Where the OVN client certificate (`tls.crt`, `tls.key`) is mounted in Neutron pods.
pub const POD_OVN_CLIENT_DIR: &str = "/etc/neutron/ovn-client";

impl ServiceKind for Neutron {
    const SERVICE: &'static str = "neutron";

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
            self.spec.ovn.name.as_str(),
        ];
        v.extend(self.spec.cache.as_ref().map(|c| c.name.as_str()));
        v
    }

    fn keystone_name(&self) -> Option<&str> {
        Some(&self.spec.keystone.name)
    }

    fn step_event(step: &str, job: &str) -> Option<(&'static str, String)> {
        match step {
            "service-user" => Some((
                "ServiceRegistered",
                format!("service user, network service and endpoints in place (Job {job})"),
            )),
            "db-contract" => Some((
                "DatabaseContracted",
                format!("contract migrations applied (Job {job})"),
            )),
            _ => None,
        }
    }

    fn pass(p: &mut Pass<'_, Self>) -> impl Future<Output = Result<State, Error>> + Send {
        pass(p)
    }
}

/// Secret Nova generates the metadata proxy's shared secret in (key `secret`).
pub fn metadata_secret_name(nova: &str) -> String {
    format!("{nova}-metadata-proxy")
}

/// Secret the metadata agent's settings are rendered into for the data plane.
pub fn metadata_agent_secret_name(neutron: &str) -> String {
    format!("{neutron}-neutron-metadata-agent")
}

/// Which endpoints of the `ovn` external service serve the northbound and which the
/// southbound database (pure): `extra.northbound` / `extra.southbound` (comma-separated), else
/// the endpoints on OVN's standard ports 6641 and 6642.
pub fn ovn_endpoints(svc: &OpenStackExternalService) -> Result<(Vec<String>, Vec<String>), String> {
    let listed = |k: &str| -> Option<Vec<String>> {
        svc.spec.extra.get(k).map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        })
    };
    let by_port = |port: u16| -> Vec<String> {
        svc.spec
            .endpoints
            .iter()
            .filter(|e| matches!(parse_endpoint(e), Ok((_, Some(p))) if p == port))
            .cloned()
            .collect()
    };
    let nb = listed("northbound").unwrap_or_else(|| by_port(6641));
    let sb = listed("southbound").unwrap_or_else(|| by_port(6642));
    let name = svc.name_any();
    if nb.is_empty() || sb.is_empty() {
        return Err(format!(
            "external service {name} (ovn): cannot tell which endpoints serve the {} database; set extra.northbound and extra.southbound (comma-separated endpoints) or use ports 6641/6642",
            if nb.is_empty() {
                "northbound"
            } else {
                "southbound"
            }
        ));
    }
    Ok((nb, sb))
}

/// The OVN client TLS files and the volumes that put them there (pure): only with both a CA
/// and a client certificate (ovsdb-server's ssl remotes require a client certificate).
pub fn ovn_tls(svc: &OpenStackExternalService) -> Option<(OvnTls, Vec<(Volume, VolumeMount)>)> {
    let tls = svc.spec.tls.as_ref()?;
    let client = tls.client_cert_secret.as_ref()?;
    Some((
        OvnTls {
            private_key: format!("{POD_OVN_CLIENT_DIR}/tls.key"),
            certificate: format!("{POD_OVN_CLIENT_DIR}/tls.crt"),
            ca_cert: format!("{POD_OVN_CA_DIR}/{}", tls.ca_secret.key),
        },
        vec![
            objects::secret_volume("ovn-ca", &tls.ca_secret.name, POD_OVN_CA_DIR),
            objects::secret_volume("ovn-client", &client.name, POD_OVN_CLIENT_DIR),
        ],
    ))
}

/// ML2's network settings from the spec (pure).
pub fn networks(spec: &controlplane_api::NeutronSpec) -> Networks {
    let n = &spec.networks;
    Networks {
        geneve_vni_ranges: n.geneve_vni_ranges.clone(),
        flat_networks: n.flat_networks.clone(),
        vlan_ranges: n.vlan_ranges.clone(),
        physnet_mtu: n.physnet_mtu,
    }
}

/// Where a node is to place Nova's CA (key [`METADATA_AGENT_CA_KEY`] of the agents' Secret,
/// present when Nova serves TLS): the agent's `auth_ca_cert` names this path.
pub const METADATA_AGENT_CA_FILE: &str = "/etc/neutron/nova-metadata-ca.crt";
/// Key of Nova's CA in Secret `<name>-neutron-metadata-agent`.
pub const METADATA_AGENT_CA_KEY: &str = "nova-metadata-ca.crt";

/// Nova's metadata API as the agents reach it (pure): Service `<nova>-metadata`, port 8775,
/// over https verified with [`METADATA_AGENT_CA_FILE`] when Nova serves TLS (`nova_tls`).
pub fn nova_metadata(
    nova: &str,
    namespace: &str,
    shared_secret: String,
    nova_tls: bool,
) -> Metadata {
    Metadata {
        nova_host: format!("{nova}-metadata.{namespace}.svc"),
        nova_port: NOVA_METADATA_PORT,
        nova_protocol: if nova_tls { "https" } else { "http" }.into(),
        shared_secret,
        ca_file: nova_tls.then(|| METADATA_AGENT_CA_FILE.to_string()),
    }
}

/// The OVN maintenance worker's Deployment (pure): the API's pod template (image, config,
/// volumes, resources, node selector, config-hash annotation) with its own name and labels,
/// one replica (more take turns through the hash ring) or none when the API is scaled to 0,
/// and no port or HTTP probes (it serves nothing).
pub fn maintenance_deployment(owner: &Owner, t: &ServiceTemplate, api: ApiParams) -> Deployment {
    let name = format!("{}-ovn-maintenance", owner.instance);
    let mut t = t.clone();
    t.replicas = Some(if t.replicas == Some(0) { 0 } else { 1 });
    let mut dep = objects::api_deployment(owner, &t, api);
    let labels = owner.labels("ovn-maintenance");
    dep.metadata.name = Some(name);
    dep.metadata.labels = Some(labels.clone());
    dep.spec.selector.match_labels = Some(labels.clone());
    if let Some(m) = dep.spec.template.metadata.as_mut() {
        m.labels = Some(labels.clone());
    }
    if let Some(pod) = dep.spec.template.spec.as_mut() {
        pod.affinity = None;
        for c in &mut pod.containers {
            c.name = "ovn-maintenance".into();
            c.ports = None;
            c.startup_probe = None;
            c.readiness_probe = None;
            c.liveness_probe = None;
        }
    }
    dep
}

/// What the `db-expand` step runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpandPhase {
    /// A new database: every migration to `heads` (expand and contract). The servers of a new
    /// install need the contract's columns too, and no old server is running to protect.
    Heads,
    /// An upgrade: the additive migrations only; the contract runs once every server runs the
    /// new release.
    Expand,
}

/// The `db-expand` step's hash and phase for `sync_hash` (pure). Until a contract has
/// succeeded on this database it is a new install (`Heads`, under a hash of its own, so an
/// install that ran only `--expand` before this rule existed gets its `heads` run); the choice
/// sticks while the step's record is of that hash.
pub fn expand_phase(
    jobs: &[controlplane_api::JobRecord],
    sync_hash: &str,
) -> (String, ExpandPhase) {
    let heads_hash = controlplane_render::InputHash::new()
        .add("sync", sync_hash)
        .add("phase", "heads")
        .short();
    let record = |step: &str| jobs.iter().find(|r| r.step == step);
    if record("db-expand").is_some_and(|r| r.hash == heads_hash) {
        return (heads_hash, ExpandPhase::Heads);
    }
    if record("db-contract").is_some_and(|r| r.succeeded) {
        return (sync_hash.to_string(), ExpandPhase::Expand);
    }
    (heads_hash, ExpandPhase::Heads)
}

fn state_volume() -> (Volume, VolumeMount) {
    (
        Volume {
            name: "state".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        },
        VolumeMount {
            name: "state".into(),
            mount_path: Paths::pod().state_path,
            ..VolumeMount::default()
        },
    )
}

async fn pass(p: &mut Pass<'_, Neutron>) -> Result<State, Error> {
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
            spec.database.database_name_or(Neutron::SERVICE),
            spec.database.username_or(Neutron::SERVICE),
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
    let ovn_svc = or_state!(p.external(&spec.ovn.name, ExternalKind::Ovn).await?);
    let (nb, sb) = match ovn_endpoints(&ovn_svc) {
        Ok(e) => e,
        Err(message) => {
            return Ok(State::Blocked {
                reason: "ExternalServiceIncomplete".into(),
                message,
            });
        }
    };
    let (tls, tls_volumes) = match ovn_tls(&ovn_svc) {
        Some((t, v)) => (Some(t), v),
        None => (None, vec![]),
    };
    let ovn = Ovn { nb, sb, tls };
    let user_secret = p.names.service_user();
    let service_password = or_state!(p.generated_password(&user_secret).await?);

    // Render the server's files (the metadata agent's come last, from Nova's secret).
    let image = spec
        .template
        .image
        .clone()
        .unwrap_or_else(|| ServiceName::Neutron.default_image(&spec.release));
    let auth = KeystoneAuth {
        auth_url: ks.internal_url.clone(),
        www_authenticate_uri: ks.public_url.clone(),
        region: ks.region.clone(),
        username: Neutron::SERVICE.into(),
        password: service_password.clone(),
        project: "service".into(),
    };
    let mut inputs = NeutronInputs {
        template: &spec.template,
        database: db.database.clone(),
        keystone: auth.clone(),
        cache: cache.cache.clone(),
        ovn,
        // Not read by the server's files; replaced below when Nova's secret exists.
        metadata: nova_metadata("", &p.ns, String::new(), false),
        networks: networks(spec),
        paths: Paths::pod(),
        listen: format!("0.0.0.0:{}", render::PORT),
        workers: 2,
    };
    let neutron_conf = render::neutron_conf(&inputs);
    let ml2_conf = match render::ml2_conf(&inputs) {
        Ok(c) => c,
        Err(e) => {
            return Ok(State::Blocked {
                reason: "ExternalServiceIncomplete".into(),
                message: e.to_string(),
            });
        }
    };
    let mut files = BTreeMap::from([
        ("neutron.conf".to_string(), neutron_conf.clone()),
        ("ml2_conf.ini".to_string(), ml2_conf.clone()),
        ("uwsgi.ini".to_string(), render::uwsgi_ini(&inputs)),
    ]);
    let mut config_hash = render::config_hash(&image, &files);
    // TLS: the API serves its certificate; keystonemiddleware and the [nova] client verify
    // Keystone and Nova (the one the spec names) with one CA bundle.
    let serving = or_state!(
        p.serving_tls(spec.template.tls.as_ref(), spec.public_endpoint.as_deref())
            .await?
    );
    let nova_ca = match &spec.nova {
        Some(n) => {
            let novas: Api<Nova> = Api::namespaced(p.ctx.client.clone(), &p.ns);
            match novas.get_opt(&n.name).await? {
                Some(nova) => {
                    crate::tls::api_ca(&p.ctx.client, &p.ns, nova.spec.template.tls.as_ref())
                        .await?
                }
                None => None,
            }
        }
        None => None,
    };
    let client_ca = tls::ca_bundle([ks.ca.as_deref(), nova_ca.as_deref()]);
    tls::edit_files(
        &mut files,
        render::POD_CONFIG_DIR,
        &["neutron.conf"],
        &["uwsgi.ini"],
        client_ca.as_deref(),
        serving.as_ref().map(|_| tls::POD_TLS_DIR),
    );
    if client_ca.is_some() || serving.is_some() {
        config_hash = tls::config_hash(
            &render::config_hash(&image, &files),
            serving.as_ref().map(|s| s.cert.as_str()),
            client_ca.as_deref(),
        );
    }
    let neutron_conf = files.get("neutron.conf").cloned().unwrap_or_default();
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

    let mut volumes = vec![
        objects::secret_volume("config", &p.names.config(), render::POD_CONFIG_DIR),
        state_volume(),
    ];
    volumes.extend(db.ca_volume.iter().cloned());
    volumes.extend(cache.volumes.iter().cloned());
    volumes.extend(tls_volumes);

    // Jobs before the servers: the database, the additive (expand) migrations, the catalog.
    if let Some(s) = p.db_init(&image, &db, &db_secret).await? {
        return Ok(s);
    }
    let paths = Paths::pod();
    let sync_hash = render::db_sync_hash(&image, &neutron_conf, &ml2_conf);
    let (expand_hash, phase) = expand_phase(&p.status.jobs, &sync_hash);
    let expand = match phase {
        ExpandPhase::Heads => render::db_sync_command("neutron-db-manage", &paths),
        ExpandPhase::Expand => render::db_expand_command("neutron-db-manage", &paths),
    };
    if let Some(s) = p
        .job_step(
            "db-expand",
            &expand_hash,
            &image,
            expand,
            vec![],
            volumes.clone(),
        )
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

    // The API and the OVN maintenance worker.
    let api_params = ApiParams {
        name: p.names.api(),
        image: image.clone(),
        command: vec![
            "uwsgi".into(),
            "--ini".into(),
            format!("{}/uwsgi.ini", render::POD_CONFIG_DIR),
        ],
        port: render::PORT,
        // The version document answers without a token: what the kubelet can probe.
        probe_path: "/".into(),
        config_hash: config_hash.clone(),
        volumes: volumes.clone(),
    };
    let mut worker_params = api_params.clone();
    worker_params.command =
        render::maintenance_worker_command("neutron-ovn-maintenance-worker", &paths);
    let mut dep = objects::api_deployment(&p.owner, &spec.template, api_params);
    if let Some(s) = &serving {
        tls::serve_tls(&mut dep, &s.secret);
    }
    let applied = p.apply_api(&dep, render::PORT).await?;
    let deployments: Api<Deployment> = Api::namespaced(p.ctx.client.clone(), &p.ns);
    let worker = maintenance_deployment(&p.owner, &spec.template, worker_params);
    let worker = runtime::apply(&deployments, &worker).await?;
    let want = spec.template.replicas.unwrap_or(1);
    let available = or_state!(p.rollout(&applied, want).await?);
    if !crate::service::rolled_out(&worker, 1) {
        return p.not_rolled_out(&worker, 1).await;
    }

    // Every server runs the current configuration: the contract migrations may drop what
    // the old release still used.
    let contract = render::db_contract_command("neutron-db-manage", &paths);
    if let Some(s) = p
        .job_step("db-contract", &sync_hash, &image, contract, vec![], volumes)
        .await?
    {
        return Ok(s);
    }

    let url = p.operator_url(&internal);
    let probed = p
        .authenticated_probe(&ks, &url, PROBE_PATH, available)
        .await;
    if !matches!(probed, State::Ready(_)) {
        return Ok(probed);
    }

    // The metadata agents' settings, once Nova's shared secret exists.
    let Some(nova) = &spec.nova else {
        return Ok(probed);
    };
    let secret_name = metadata_secret_name(&nova.name);
    let shared = p
        .secrets()
        .get_opt(&secret_name)
        .await?
        .and_then(|s| secret_str(&s, "secret"));
    let Some(shared) = shared else {
        return Ok(State::Blocked {
            reason: "MetadataSecretMissing".into(),
            message: format!(
                "the API answers, but Secret {secret_name} (key secret, generated by Nova {}) does not exist yet: the metadata agents' settings wait for it",
                nova.name
            ),
        });
    };
    inputs.metadata = nova_metadata(&nova.name, &p.ns, shared, nova_ca.is_some());
    let agent = match render::metadata_agent_ini(&inputs) {
        Ok(a) => a,
        Err(e) => {
            return Ok(State::Blocked {
                reason: "ExternalServiceIncomplete".into(),
                message: e.to_string(),
            });
        }
    };
    runtime::apply(
        &p.secrets(),
        &objects::secret(
            &p.owner,
            &metadata_agent_secret_name(&obj.name_any()),
            "metadata-agent",
            {
                let mut data = BTreeMap::from([(render::METADATA_AGENT_FILE.to_string(), agent)]);
                // Nova's CA, for the node setup to place at METADATA_AGENT_CA_FILE.
                if let Some(ca) = &nova_ca {
                    data.insert(METADATA_AGENT_CA_KEY.to_string(), ca.clone());
                }
                data
            },
        ),
    )
    .await?;
    match probed {
        State::Ready(m) => Ok(State::Ready(format!(
            "{m}; metadata agent settings in Secret {}",
            metadata_agent_secret_name(&obj.name_any())
        ))),
        other => Ok(other),
    }
}

/// Runs the controller until `shutdown` resolves.
pub async fn run(
    ctx: Arc<Ctx>,
    api: Api<Neutron>,
    watched: Watched,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    crate::service::run(ctx, api, watched, shutdown).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use controlplane_api::JobRecord;

    fn rec(step: &str, hash: &str, succeeded: bool) -> JobRecord {
        JobRecord {
            step: step.into(),
            hash: hash.into(),
            succeeded,
            ..JobRecord::default()
        }
    }

    #[test]
    fn a_new_database_reaches_heads_and_upgrades_keep_expand_then_contract() {
        // New install: nothing ran yet.
        let (h, phase) = expand_phase(&[], "s1");
        assert_eq!(phase, ExpandPhase::Heads);
        assert_ne!(h, "s1");
        // The heads Job ran; while the inputs stay, the step keeps its hash (no second Job),
        // also after the contract step succeeded.
        let jobs = vec![rec("db-expand", &h, true), rec("db-contract", "s1", true)];
        assert_eq!(expand_phase(&jobs, "s1"), (h.clone(), ExpandPhase::Heads));
        // An upgrade (new image or configuration): expand only, under the sync hash.
        assert_eq!(
            expand_phase(&jobs, "s2"),
            ("s2".to_string(), ExpandPhase::Expand)
        );
        // An install whose first expand ran (the old rule) but whose contract never
        // succeeded: heads, under a new hash, so it runs now.
        let stuck = vec![
            rec("db-expand", "s1", true),
            rec("db-contract", "s1", false),
        ];
        let (h2, phase) = expand_phase(&stuck, "s1");
        assert_eq!(phase, ExpandPhase::Heads);
        assert_ne!(h2, "s1");
        // The command of each phase.
        let p = Paths::pod();
        assert!(
            render::db_sync_command("neutron-db-manage", &p)
                .ends_with(&["upgrade".to_string(), "heads".to_string()])
        );
    }
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn ovn(
        endpoints: &[&str],
        extra: &[(&str, &str)],
        tls: Option<serde_json::Value>,
    ) -> OpenStackExternalService {
        let mut spec = serde_json::json!({"type": "ovn", "endpoints": endpoints,
            "extra": extra.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>()});
        if let Some(t) = tls {
            spec["tls"] = t;
        }
        OpenStackExternalService::new("ovn", serde_json::from_value(spec).expect("svc"))
    }

    #[test]
    fn northbound_and_southbound_by_extra_or_standard_port() {
        let svc = ovn(
            &[
                "tcp:10.0.0.1:6641",
                "tcp:10.0.0.1:6642",
                "tcp:10.0.0.2:6641",
            ],
            &[],
            None,
        );
        assert_eq!(
            ovn_endpoints(&svc),
            Ok((
                vec!["tcp:10.0.0.1:6641".into(), "tcp:10.0.0.2:6641".into()],
                vec!["tcp:10.0.0.1:6642".into()]
            ))
        );
        let svc = ovn(
            &["tcp:127.0.0.1:16641", "tcp:127.0.0.1:16642"],
            &[
                ("northbound", "tcp:127.0.0.1:16641"),
                ("southbound", " tcp:127.0.0.1:16642 "),
            ],
            None,
        );
        assert_eq!(
            ovn_endpoints(&svc),
            Ok((
                vec!["tcp:127.0.0.1:16641".into()],
                vec!["tcp:127.0.0.1:16642".into()]
            ))
        );
        let svc = ovn(&["tcp:127.0.0.1:16641", "tcp:127.0.0.1:16642"], &[], None);
        let e = ovn_endpoints(&svc).expect_err("non-standard ports");
        assert!(e.contains("extra.northbound"), "{e}");
    }

    #[test]
    fn tls_needs_a_client_certificate_and_mounts_where_the_files_are_named() {
        assert!(
            ovn_tls(&ovn(
                &["ssl:a:6641"],
                &[],
                Some(serde_json::json!({"caSecret": {"name": "ca"}}))
            ))
            .is_none()
        );
        let (t, v) = ovn_tls(&ovn(
            &["ssl:a:6641"],
            &[],
            Some(serde_json::json!({"caSecret": {"name": "ca", "key": "bundle.pem"}, "clientCertSecret": {"name": "client"}})),
        ))
        .expect("tls");
        assert_eq!(t.ca_cert, "/etc/neutron/ovn-ca/bundle.pem");
        for f in [&t.ca_cert, &t.certificate, &t.private_key] {
            assert!(
                v.iter()
                    .any(|(_, m)| f.starts_with(&format!("{}/", m.mount_path))),
                "{f} not mounted"
            );
        }
    }

    #[test]
    fn nova_metadata_is_its_service_on_8775() {
        let m = nova_metadata("cloud-nova", "os", "s".into(), false);
        assert_eq!(m.nova_host, "cloud-nova-metadata.os.svc");
        assert_eq!(m.nova_port, 8775);
        assert_eq!((m.nova_protocol.as_str(), m.ca_file), ("http", None));
        let tls = nova_metadata("cloud-nova", "os", "s".into(), true);
        assert_eq!(tls.nova_protocol, "https");
        assert_eq!(tls.ca_file.as_deref(), Some(METADATA_AGENT_CA_FILE));
        assert_eq!(
            metadata_secret_name("cloud-nova"),
            "cloud-nova-metadata-proxy"
        );
    }

    #[test]
    fn the_maintenance_worker_is_one_unexposed_replica_of_its_own() {
        let owner = Owner {
            reference: OwnerReference {
                api_version: "controlplane.sunet.se/v1alpha1".into(),
                kind: "Neutron".into(),
                name: "n".into(),
                uid: "u".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            },
            namespace: "os".into(),
            instance: "n".into(),
            service: "neutron".into(),
        };
        let t = ServiceTemplate {
            replicas: Some(3),
            ..ServiceTemplate::default()
        };
        let params = ApiParams {
            name: "n-api".into(),
            image: "img".into(),
            command: vec!["neutron-ovn-maintenance-worker".into()],
            port: 9696,
            probe_path: "/".into(),
            config_hash: "h".into(),
            volumes: vec![],
        };
        let api = objects::api_deployment(&owner, &t, params.clone());
        let d = maintenance_deployment(&owner, &t, params.clone());
        assert_eq!(d.metadata.name.as_deref(), Some("n-ovn-maintenance"));
        assert_eq!(d.spec.replicas, Some(1));
        assert_ne!(d.spec.selector.match_labels, api.spec.selector.match_labels);
        let c = &d.spec.template.spec.as_ref().expect("pod").containers[0];
        assert!(c.ports.is_none() && c.readiness_probe.is_none() && c.startup_probe.is_none());
        let zero = ServiceTemplate {
            replicas: Some(0),
            ..ServiceTemplate::default()
        };
        assert_eq!(
            maintenance_deployment(&owner, &zero, params).spec.replicas,
            Some(0)
        );
    }
}
