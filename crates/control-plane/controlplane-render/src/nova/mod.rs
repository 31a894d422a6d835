//! Nova 2026.1's control plane: `nova.conf` for the API, the metadata API, the conductor, the
//! scheduler and the noVNC proxy, the two uwsgi configurations, the compute-facing
//! configuration of a compute node, the database and cell Jobs' commands and input hashes, and
//! the catalog entry of its service-user step.
//!
//! How 2026.1 runs it: the compute API and the metadata API are WSGI applications
//! (`nova.wsgi.osapi_compute` / `nova.wsgi.metadata`) under uwsgi, reading `api-paste.ini`
//! (the image's own) and `nova.conf` named by `OS_NOVA_CONFIG_FILES`; `nova-conductor`,
//! `nova-scheduler` and `nova-novncproxy` are processes of their own. One cell (`cell1`) plus
//! cell0; the conductor is both the super conductor and the cell's conductor. The scheduler
//! maps new compute hosts into the cell by its periodic task (`discover_hosts_in_cells_interval`),
//! so adding a compute node needs no Job.
//!
//! Peers (Placement, Glance, Neutron) are reached at `endpoint_override` when the operator
//! knows the in-cluster URL of the one it deployed, and through the catalog's internal
//! endpoint otherwise: see [`Peers`].

pub mod cells;
pub mod zones;

use std::collections::BTreeMap;

use controlplane_api::common::ServiceTemplate;

use crate::authtoken::{self, KeystoneAuth};
use crate::database::Database;
use crate::hash::InputHash;
use crate::ini::Ini;
use crate::service_user::ServiceEntry;
use crate::uwsgi::Uwsgi;

pub use crate::messaging::{Messaging, MessagingError};
pub use cells::CellsError;

/// Port of the compute API (pod and Service).
pub const API_PORT: u16 = 8774;
/// Port of the metadata API (Neutron's metadata agents call it).
pub const METADATA_PORT: u16 = 8775;
/// Port of the noVNC proxy.
pub const NOVNCPROXY_PORT: u16 = 6080;
/// Catalog service type of Nova.
pub const SERVICE_TYPE: &str = "compute";
/// Catalog service name of Nova.
pub const SERVICE_NAME: &str = "nova";
/// Where the rendered files are mounted in pods (a directory of its own, so the image's
/// `/etc/nova` with `api-paste.ini` and the rootwrap filters stays visible).
pub const POD_CONFIG_DIR: &str = "/etc/nova/rendered";
/// Where the image holds Nova's own `api-paste.ini`: the service's `data_files`, installed
/// under the venv's prefix (`/opt/openstack`).
pub const IMAGE_CONFIG_DIR: &str = "/opt/openstack/etc/nova";
/// Nova's `state_path` in pods: a writable emptyDir (lock files live below it).
pub const POD_STATE_DIR: &str = "/var/lib/nova";
/// The rendered file every control-plane process reads.
pub const NOVA_CONF: &str = "nova.conf";
/// uwsgi configuration of the compute API.
pub const API_UWSGI: &str = "api-uwsgi.ini";
/// uwsgi configuration of the metadata API.
pub const METADATA_UWSGI: &str = "metadata-uwsgi.ini";
/// Seconds a stopping conductor, scheduler or compute waits for in-flight work: below the
/// pods' `terminationGracePeriodSeconds` (30 by default).
pub const GRACEFUL_SHUTDOWN_SECONDS: u32 = 15;
/// The compute node's file (no database, no token validation).
pub const COMPUTE_CONF: &str = "nova-compute.conf";

/// The oslo.config namespaces of Nova's own sample generator
/// (`etc/nova/nova-config-generator.conf`): what `oslo-config-validator` checks the rendered
/// files against.
pub const OPTION_NAMESPACES: &[&str] = &[
    "nova.conf",
    "oslo.log",
    "oslo.messaging",
    "oslo.policy",
    "oslo.privsep",
    "oslo.service.periodic_task",
    "oslo.service.service",
    "oslo.middleware",
    "oslo.concurrency",
    "keystonemiddleware.auth_token",
    "osprofiler",
];

/// What cannot be rendered into a working configuration.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NovaError {
    /// The message queue.
    #[error(transparent)]
    Messaging(#[from] MessagingError),
    /// The cell databases.
    #[error(transparent)]
    Cells(#[from] CellsError),
}

/// Nova's three databases: the API database (cell mappings, flavors, host mappings), cell0
/// (instances that failed to schedule) and the one cell's database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Databases {
    /// `[api_database]`.
    pub api: Database,
    /// cell0 (same server and user as `cell1`; only its name differs).
    pub cell0: Database,
    /// `[database]`: cell1's.
    pub cell1: Database,
}

/// Where Nova finds the services it calls. `Some(url)`: `endpoint_override` at that URL (the
/// in-cluster Service of a peer the operator deployed: no catalog lookup, and no dependence on
/// what the catalog's internal endpoint points at, which a user may have set to a public
/// address); `None`: the catalog's internal endpoint in Keystone's region (a peer deployed
/// elsewhere).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Peers {
    /// Placement.
    pub placement: Option<String>,
    /// Glance.
    pub glance: Option<String>,
    /// Neutron.
    pub neutron: Option<String>,
}

/// The noVNC proxy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vnc {
    /// The URL users' browsers open (`.../vnc_lite.html`); compute nodes hand it out.
    pub base_url: String,
    /// Address the proxy listens on.
    pub proxy_host: String,
    /// Port the proxy listens on.
    pub proxy_port: u16,
}

/// Where the rendered files are found by the processes that read them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paths {
    /// Directory holding the rendered files.
    pub config_dir: String,
    /// Nova's `api-paste.ini` (the image's own).
    pub api_paste_config: String,
    /// `state_path` (lock files live below it).
    pub state_path: String,
    /// The noVNC web files the proxy serves.
    pub novnc_web: String,
    /// uwsgi `home` (a virtualenv), when not the image's system Python.
    pub python_home: Option<String>,
}

impl Paths {
    /// The layout inside Nova pods.
    pub fn pod() -> Self {
        Paths {
            config_dir: POD_CONFIG_DIR.into(),
            api_paste_config: format!("{IMAGE_CONFIG_DIR}/api-paste.ini"),
            state_path: POD_STATE_DIR.into(),
            novnc_web: "/usr/share/novnc".into(),
            python_home: None,
        }
    }

    /// Path of `nova.conf`.
    pub fn nova_conf(&self) -> String {
        format!("{}/{NOVA_CONF}", self.config_dir)
    }
}

/// Everything Nova's control-plane configuration is rendered from.
#[derive(Clone, Debug)]
pub struct NovaInputs<'a> {
    /// Replicas, image, resources and the user's config overrides (sections of `nova.conf`).
    pub template: &'a ServiceTemplate,
    /// The three databases.
    pub databases: Databases,
    /// The `messaging` external service.
    pub messaging: Messaging,
    /// The deployed Keystone and Nova's service user.
    pub keystone: KeystoneAuth,
    /// The `cache` external service (memcached: servers, TLS, SASL) (token cache and oslo.cache), empty without a cache.
    pub cache: crate::cache::Cache,
    /// Placement, Glance, Neutron.
    pub peers: Peers,
    /// The secret Neutron's metadata agents sign instance ids with.
    pub metadata_secret: String,
    /// The noVNC proxy.
    pub vnc: Vnc,
    /// Seconds between the scheduler's host discoveries (`-1`: never; new compute nodes then
    /// need `nova-manage cell_v2 discover_hosts`).
    pub discover_hosts_interval: i32,
    /// `[DEFAULT] host` of the control-plane processes: one stable name, so restarted pods
    /// reuse their service records instead of leaving one per pod name behind.
    pub host: String,
    /// File locations.
    pub paths: Paths,
    /// Address the compute API's uwsgi listens on, e.g. `0.0.0.0:8774`.
    pub api_listen: String,
    /// Address the metadata API's uwsgi listens on, e.g. `0.0.0.0:8775`.
    pub metadata_listen: String,
    /// uwsgi workers of each API, and `workers` of the conductor and the scheduler (Nova's
    /// default is one per CPU of the node, whatever the pod's limit).
    pub workers: u32,
}

/// The keystoneauth password-plugin options of a section (Nova's service user).
fn service_auth(ini: &mut Ini, section: &str, k: &KeystoneAuth) {
    ini.set(section, "auth_type", "password")
        .set(section, "auth_url", k.auth_url.clone())
        .set(section, "username", k.username.clone())
        .set(section, "password", k.password.clone())
        .set(section, "project_name", k.project.clone())
        .set(section, "user_domain_name", "Default")
        .set(section, "project_domain_name", "Default");
}

/// Where a peer is: pinned, or the catalog's internal endpoint in Keystone's region.
fn locate(ini: &mut Ini, section: &str, k: &KeystoneAuth, endpoint: Option<&str>) {
    ini.set(section, "region_name", k.region.clone());
    match endpoint {
        Some(url) => ini.set(section, "endpoint_override", url.trim_end_matches('/')),
        None => ini.set(section, "valid_interfaces", "internal"),
    };
}

/// A section through which Nova calls a peer as its service user.
fn peer(ini: &mut Ini, section: &str, k: &KeystoneAuth, endpoint: Option<&str>) {
    service_auth(ini, section, k);
    locate(ini, section, k, endpoint);
}

/// What the control plane and the compute nodes share: logging, the message queue, the peers,
/// the service token, locks.
fn common(i: &NovaInputs<'_>, host: &str) -> Result<Ini, NovaError> {
    let k = &i.keystone;
    let mut ini = Ini::default();
    ini.set("DEFAULT", "debug", "false")
        .set("DEFAULT", "use_stderr", "true")
        .set("DEFAULT", "host", host)
        .set("DEFAULT", "state_path", i.paths.state_path.clone())
        // oslo.service waits up to this long for in-flight work on SIGTERM; its default 60 s
        // is past a pod's 30 s grace period (the boot proof saw conductor, scheduler and
        // compute still running 15 s after SIGTERM with it), so they would be killed instead.
        .set(
            "DEFAULT",
            "graceful_shutdown_timeout",
            GRACEFUL_SHUTDOWN_SECONDS.to_string(),
        )
        .set(
            "oslo_concurrency",
            "lock_path",
            format!("{}/lock", i.paths.state_path),
        )
        .set("oslo_messaging_notifications", "driver", "noop");
    i.messaging.set(&mut ini)?;
    peer(&mut ini, "placement", k, i.peers.placement.as_deref());
    peer(&mut ini, "neutron", k, i.peers.neutron.as_deref());
    // Glance is called with the user's token only: its section has no auth options.
    locate(&mut ini, "glance", k, i.peers.glance.as_deref());
    // The service token sent with the user's: Cinder and Neutron require it for the calls
    // Nova makes on a user's behalf (CVE-2023-2088).
    service_auth(&mut ini, "service_user", k);
    ini.set("service_user", "send_service_user_token", "true");
    Ok(ini)
}

fn nova_ini(i: &NovaInputs<'_>) -> Result<Ini, NovaError> {
    let d = &i.databases;
    // Checked here so a bad cell0 is refused at rendering, not in the cell Job.
    cells::cell0_database_template(&d.cell0, &d.cell1)?;
    let mut ini = common(i, &i.host)?;
    let workers = i.workers.max(1).to_string();
    // 2026.1's paste pipeline always validates tokens (the `auth_strategy` option is gone).
    ini.set("api_database", "connection", d.api.url())
        .set("api_database", "max_retries", "-1")
        .set("api_database", "connection_recycle_time", "600")
        .set("database", "connection", d.cell1.url())
        .set("database", "max_retries", "-1")
        .set("database", "connection_recycle_time", "600")
        .set("conductor", "workers", workers.clone())
        .set("scheduler", "workers", workers)
        .set(
            "scheduler",
            "discover_hosts_in_cells_interval",
            i.discover_hosts_interval.to_string(),
        )
        .set("neutron", "service_metadata_proxy", "true")
        .set(
            "neutron",
            "metadata_proxy_shared_secret",
            i.metadata_secret.clone(),
        )
        .set("vnc", "enabled", "true")
        .set("vnc", "novncproxy_host", i.vnc.proxy_host.clone())
        .set("vnc", "novncproxy_port", i.vnc.proxy_port.to_string())
        .set("vnc", "novncproxy_base_url", i.vnc.base_url.clone())
        // The proxy's web root (a [DEFAULT] option of nova-novncproxy).
        .set("DEFAULT", "web", i.paths.novnc_web.clone())
        .set("oslo_middleware", "enable_proxy_headers_parsing", "true");
    authtoken::set(&mut ini, &i.keystone, &i.cache);
    // oslo.cache: the metadata API's cache and the API's instance-name lookups.
    crate::cache::set_oslo_cache(&mut ini, &i.cache);
    ini.merge(&i.template.config_overrides);
    Ok(ini)
}

/// `nova.conf` of the control plane: the operator's settings with the user's overrides merged
/// over them.
pub fn nova_conf(i: &NovaInputs<'_>) -> Result<String, NovaError> {
    Ok(nova_ini(i)?.render())
}

/// A compute node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComputeNode {
    /// `[DEFAULT] host`: the name the node registers under (and Placement's provider name).
    pub host: String,
    /// The virt driver, e.g. `libvirt.LibvirtDriver`.
    pub compute_driver: String,
    /// The node's address (VNC servers listen on it; the proxy connects to it).
    pub my_ip: String,
}

/// The compute node's configuration: the shared part (message queue, peers, service token)
/// and the node's own settings, without databases (compute nodes reach them only through the
/// conductor) and without token validation (they serve no API). The user's overrides of the
/// sections a compute node reads are merged over it.
pub fn compute_conf(i: &NovaInputs<'_>, node: &ComputeNode) -> Result<String, NovaError> {
    let mut ini = common(i, &node.host)?;
    ini.set("DEFAULT", "compute_driver", node.compute_driver.clone())
        .set("DEFAULT", "my_ip", node.my_ip.clone())
        .set(
            "DEFAULT",
            "instances_path",
            format!("{}/instances", i.paths.state_path),
        )
        .set("vnc", "enabled", "true")
        .set("vnc", "server_listen", node.my_ip.clone())
        .set("vnc", "server_proxyclient_address", node.my_ip.clone())
        .set("vnc", "novncproxy_base_url", i.vnc.base_url.clone());
    let overrides = i
        .template
        .config_overrides
        .iter()
        .filter(|(s, _)| {
            !matches!(
                s.as_str(),
                "api_database" | "database" | "keystone_authtoken"
            )
        })
        .map(|(s, o)| (s.clone(), o.clone()))
        .collect();
    ini.merge(&overrides);
    Ok(ini.render())
}

fn uwsgi(i: &NovaInputs<'_>, listen: &str, module: &str) -> String {
    let mut s = Uwsgi {
        listen,
        python_home: i.paths.python_home.as_deref(),
        workers: i.workers,
        module,
        config_dir_env: ("OS_NOVA_CONFIG_DIR", &i.paths.config_dir),
    }
    .render();
    // Nova joins each name with the directory; the absolute paste path stays as it is, so the
    // image's api-paste.ini is read beside the rendered nova.conf.
    s.push_str(&format!(
        "env = OS_NOVA_CONFIG_FILES={};{NOVA_CONF}\n",
        i.paths.api_paste_config
    ));
    s
}

/// uwsgi's configuration for the compute API.
pub fn api_uwsgi_ini(i: &NovaInputs<'_>) -> String {
    uwsgi(i, &i.api_listen, "nova.wsgi.osapi_compute:application")
}

/// uwsgi's configuration for the metadata API.
pub fn metadata_uwsgi_ini(i: &NovaInputs<'_>) -> String {
    uwsgi(i, &i.metadata_listen, "nova.wsgi.metadata:application")
}

/// The uwsgi files that serve an API: with TLS both become `https-socket` listeners.
pub const UWSGI_FILES: [&str; 2] = [API_UWSGI, METADATA_UWSGI];

/// `nova.conf` with the noVNC proxy serving TLS only (pure): `[DEFAULT] ssl_only`, `cert` and
/// `key` (nova-novncproxy's own options, handed to websockify; no other process reads them).
/// Plain `ws://` connections are refused, so browsers need the `https` base URL.
pub fn novncproxy_tls(nova_conf: &str, cert_file: &str, key_file: &str) -> String {
    let mut ini = Ini::parse(nova_conf);
    ini.set("DEFAULT", "ssl_only", "true")
        .set("DEFAULT", "cert", cert_file)
        .set("DEFAULT", "key", key_file);
    ini.render()
}

/// The files of the control plane's config Secret.
pub fn config_files(i: &NovaInputs<'_>) -> Result<BTreeMap<String, String>, NovaError> {
    Ok(BTreeMap::from([
        (NOVA_CONF.to_string(), nova_conf(i)?),
        (API_UWSGI.to_string(), api_uwsgi_ini(i)),
        (METADATA_UWSGI.to_string(), metadata_uwsgi_ini(i)),
    ]))
}

fn manage(nova_manage: &str, paths: &Paths, rest: &[&str]) -> Vec<String> {
    let mut v = vec![
        nova_manage.to_string(),
        "--config-file".into(),
        paths.nova_conf(),
    ];
    v.extend(rest.iter().map(|s| s.to_string()));
    v
}

/// `nova-manage api_db sync` (first of the steps).
pub fn api_db_sync_command(nova_manage: &str, paths: &Paths) -> Vec<String> {
    manage(nova_manage, paths, &["api_db", "sync"])
}

/// `nova-manage db sync`: cell1's schema and, once mapped, cell0's (after the cell set-up).
pub fn db_sync_command(nova_manage: &str, paths: &Paths) -> Vec<String> {
    manage(nova_manage, paths, &["db", "sync"])
}

/// `nova-manage db online_data_migrations` (after the services of a new release run; exit 0
/// when done, 1 while more batches remain, 2 on errors).
pub fn online_data_migrations_command(nova_manage: &str, paths: &Paths) -> Vec<String> {
    manage(nova_manage, paths, &["db", "online_data_migrations"])
}

/// A long-running process (`nova-conductor`, `nova-scheduler`, `nova-novncproxy`) on
/// `nova.conf`.
pub fn service_command(program: &str, paths: &Paths) -> Vec<String> {
    vec![
        program.to_string(),
        "--config-file".into(),
        paths.nova_conf(),
    ]
}

/// The cell set-up Job's environment (see [`cells::CELL_SETUP_SCRIPT`]).
pub fn cell_setup_env(
    i: &NovaInputs<'_>,
    nova_manage: &str,
) -> Result<Vec<(String, String)>, NovaError> {
    let d = &i.databases;
    Ok(cells::env(
        nova_manage,
        &i.paths.nova_conf(),
        &cells::cell0_database_template(&d.cell0, &d.cell1)?,
        &cells::cell_database_template(),
        &i.messaging.cell_template()?,
    ))
}

fn sections(ini: &Ini, names: &[&str]) -> String {
    let mut out = Ini::default();
    for n in names {
        if let Some(opts) = ini.0.get(*n) {
            out.0.insert((*n).to_string(), opts.clone());
        }
    }
    out.render()
}

/// The input hashes of the database Jobs: each names only what its step reads, so e.g. a
/// changed `[scheduler]` option runs no migration again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobHashes {
    /// `api_db sync`: the image and `[api_database]`.
    pub api_db_sync: String,
    /// The cell set-up: the image, the script, `[api_database]` and the templates.
    pub cell_setup: String,
    /// `db sync`: the image, `[api_database]` (where cell0 is found), `[database]`.
    pub db_sync: String,
    /// `db online_data_migrations`: the same inputs as `db sync`, a step of its own.
    pub online_data_migrations: String,
}

/// The input hashes of the four database Jobs.
pub fn job_hashes(
    i: &NovaInputs<'_>,
    image: &str,
    nova_manage: &str,
) -> Result<JobHashes, NovaError> {
    let ini = nova_ini(i)?;
    let api = sections(&ini, &["api_database"]);
    let dbs = sections(&ini, &["api_database", "database"]);
    let step = |name: &str, conf: &str| {
        InputHash::new()
            .add("step", name)
            .add("image", image)
            .add("conf", conf)
            .short()
    };
    Ok(JobHashes {
        api_db_sync: step("api-db-sync", &api),
        cell_setup: cells::hash(image, &api, &cell_setup_env(i, nova_manage)?),
        db_sync: step("db-sync", &dbs),
        online_data_migrations: step("online-data-migrations", &dbs),
    })
}

/// Hash of one Deployment's configuration (its pod-template annotation): the image, `nova.conf`
/// and the process's own file, if any.
pub fn config_hash(image: &str, nova_conf: &str, own_file: Option<&str>) -> String {
    let mut h = InputHash::new()
        .add("image", image)
        .add(NOVA_CONF, nova_conf);
    if let Some(f) = own_file {
        h = h.add("own", f);
    }
    h.short()
}

/// The in-cluster URL of the compute API's Service (`<name>-api`), with the `/v2.1` root.
pub fn internal_url(name: &str, namespace: &str) -> String {
    format!(
        "{}/v2.1",
        crate::service_user::internal_url(name, namespace, API_PORT)
    )
}

/// The catalog entry the service-user step registers: user `username` in `project`, service
/// `nova` of type `compute`, endpoints at `public_url` and `internal_url` (both ending in
/// `/v2.1`) in `region`.
pub fn service_entry(
    keystone: &KeystoneAuth,
    region: &str,
    public_url: &str,
    internal_url: &str,
) -> ServiceEntry {
    ServiceEntry::for_service(
        keystone,
        SERVICE_NAME,
        SERVICE_TYPE,
        "OpenStack Compute",
        region,
        public_url,
        internal_url,
    )
}

#[cfg(test)]
mod tests;
