//! Neutron with ML2/OVN: `neutron.conf`, `ml2_conf.ini`, the OVN metadata agent's
//! `neutron_ovn_metadata_agent.ini`, the uwsgi configuration of the API, the commands of the db
//! sync Jobs and of the OVN maintenance worker, and the catalog entry of its service-user step.
//!
//! How 2026.1 runs it: there is no `neutron-server` console script any more. The API is the WSGI
//! application `neutron.wsgi.api:application` under uwsgi (`start-time = %t` is required: the
//! OVN hash ring keys its registrations by uwsgi's start time and worker id), and the OVN
//! maintenance worker (`neutron-ovn-maintenance-worker`: the OVN DB sync check and the
//! maintenance periodics) is a process of its own. ML2/OVN has no RPC agents, so
//! `rpc_workers = 0` (the ML2 plugin then starts no RPC notifiers), no `neutron-rpc-server`
//! runs and no `transport_url` is rendered: Neutron with ML2/OVN needs no message queue.

use std::collections::BTreeMap;

use controlplane_api::common::ServiceTemplate;

use crate::database::Database;
use crate::hash::InputHash;
use crate::ini::Ini;
use crate::placement::KeystoneAuth;
use crate::service_user::ServiceEntry;
use crate::uwsgi::Uwsgi;

/// Port the Neutron API listens on inside the pod and on its Service.
pub const PORT: u16 = 9696;
/// Catalog service type of Neutron.
pub const SERVICE_TYPE: &str = "network";
/// Catalog service name of Neutron.
pub const SERVICE_NAME: &str = "neutron";
/// Where the rendered files are mounted in pods (a directory of its own, so the image's
/// `/etc/neutron` with `api-paste.ini` and the rootwrap filters stays visible).
pub const POD_CONFIG_DIR: &str = "/etc/neutron/rendered";
/// Where the image holds Neutron's own `api-paste.ini`: the service's `data_files`, installed
/// under the venv's prefix (`/opt/openstack`).
pub const IMAGE_CONFIG_DIR: &str = "/opt/openstack/etc/neutron";
/// The rendered files the server processes read, in the order they are read.
pub const SERVER_CONFIG_FILES: [&str; 2] = ["neutron.conf", "ml2_conf.ini"];
/// The metadata agent's file (read together with `neutron.conf`'s `[DEFAULT]` by the agent).
pub const METADATA_AGENT_FILE: &str = "neutron_ovn_metadata_agent.ini";
/// OVN refuses Geneve encapsulation headers smaller than this (Neutron's own default, 30, makes
/// the OVN driver exit at start).
pub const GENEVE_MAX_HEADER_SIZE: u32 = 38;

/// The oslo.config namespaces (entry points of the `oslo.config.opts` group) whose options each
/// rendered file may set: what `oslo-config-validator` checks the files against.
pub const OPTION_NAMESPACES: [(&str, &[&str]); 3] = [
    (
        "neutron.conf",
        &[
            "neutron",
            "neutron.agent",
            "neutron.db",
            "neutron.extensions",
            "nova.auth",
            "placement.auth",
            "oslo.log",
            "oslo.db",
            "oslo.policy",
            "oslo.concurrency",
            "oslo.messaging",
            "oslo.middleware",
            "oslo.service.wsgi",
            "keystonemiddleware.auth_token",
        ],
    ),
    ("ml2_conf.ini", &["neutron.ml2", "neutron.ml2.ovn"]),
    (
        METADATA_AGENT_FILE,
        &["neutron", "neutron.ovn.metadata.agent", "neutron.ml2.ovn"],
    ),
];

/// What cannot be rendered into a working configuration.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NeutronError {
    /// No endpoint serves one of the two OVN databases.
    #[error("the ovn external service names no {0} endpoint")]
    NoEndpoint(&'static str),
    /// An `ssl:` endpoint without the client certificate OVSDB's mutual TLS needs.
    #[error(
        "the ovn external service's {0} endpoint {1} is ssl: but no client certificate and CA are given (ovsdb-server's ssl remotes require both)"
    )]
    SslWithoutTls(&'static str, String),
    /// An endpoint Neutron's OVSDB client cannot parse.
    #[error("ovn endpoint {0:?} is neither tcp:HOST:PORT, ssl:HOST:PORT nor HOST:PORT")]
    BadEndpoint(String),
}

/// Files of the OVN client certificate, as mounted for the processes (Neutron's OVSDB client
/// always verifies the server's chain against `ca_cert` and never the host name, so the
/// external service's `Full` and `CaOnly` verify modes behave the same here).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OvnTls {
    /// The client's private key (PEM).
    pub private_key: String,
    /// The client's certificate (PEM).
    pub certificate: String,
    /// The CA bundle that signs the ovsdb-servers' certificates (PEM).
    pub ca_cert: String,
}

/// The `ovn` external service, resolved: the endpoints of each database (several for a
/// clustered database; the external-service check learns which endpoint serves which) and the
/// TLS files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ovn {
    /// Endpoints serving `OVN_Northbound`.
    pub nb: Vec<String>,
    /// Endpoints serving `OVN_Southbound`.
    pub sb: Vec<String>,
    /// Client certificate and CA; required when any endpoint is `ssl:`.
    pub tls: Option<OvnTls>,
}

/// The OVSDB connection string of one endpoint: `tcp:`/`ssl:` kept, a bare `host:port` gets
/// `ssl:` when TLS is configured and `tcp:` otherwise.
pub fn ovsdb_connection(endpoint: &str, tls: bool) -> Result<String, NeutronError> {
    let bad = || NeutronError::BadEndpoint(endpoint.to_string());
    let (scheme, rest) = match endpoint.split_once(':') {
        Some((s @ ("tcp" | "ssl"), rest)) => (s, rest),
        _ => (if tls { "ssl" } else { "tcp" }, endpoint),
    };
    let (host, port) = rest.rsplit_once(':').ok_or_else(bad)?;
    if host.is_empty() || host.contains(['/', ' ']) || port.parse::<u16>().is_err() {
        return Err(bad());
    }
    Ok(format!("{scheme}:{rest}"))
}

impl Ovn {
    fn connection(&self, which: &'static str) -> Result<String, NeutronError> {
        let eps = if which == "northbound" {
            &self.nb
        } else {
            &self.sb
        };
        if eps.is_empty() {
            return Err(NeutronError::NoEndpoint(which));
        }
        let mut out = Vec::with_capacity(eps.len());
        for ep in eps {
            let c = ovsdb_connection(ep, self.tls.is_some())?;
            if c.starts_with("ssl:") && self.tls.is_none() {
                return Err(NeutronError::SslWithoutTls(which, ep.clone()));
            }
            out.push(c);
        }
        // Neutron's OVSDB client takes a comma-separated list (a clustered database).
        Ok(out.join(","))
    }

    /// `ovn_nb_connection`.
    pub fn nb_connection(&self) -> Result<String, NeutronError> {
        self.connection("northbound")
    }

    /// `ovn_sb_connection`.
    pub fn sb_connection(&self) -> Result<String, NeutronError> {
        self.connection("southbound")
    }

    /// Sets the `[ovn]` connection options (and the TLS files of both databases) in `ini`.
    fn render_into(&self, ini: &mut Ini, nb: bool) -> Result<(), NeutronError> {
        let sb = self.sb_connection()?;
        ini.set("ovn", "ovn_sb_connection", sb);
        if let Some(t) = &self.tls {
            ini.set("ovn", "ovn_sb_private_key", t.private_key.clone())
                .set("ovn", "ovn_sb_certificate", t.certificate.clone())
                .set("ovn", "ovn_sb_ca_cert", t.ca_cert.clone());
        }
        if nb {
            let nbc = self.nb_connection()?;
            ini.set("ovn", "ovn_nb_connection", nbc);
            if let Some(t) = &self.tls {
                ini.set("ovn", "ovn_nb_private_key", t.private_key.clone())
                    .set("ovn", "ovn_nb_certificate", t.certificate.clone())
                    .set("ovn", "ovn_nb_ca_cert", t.ca_cert.clone());
            }
        }
        Ok(())
    }
}

/// Nova's metadata API as the OVN metadata agent reaches it, and the secret both sign with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metadata {
    /// Host of Nova's metadata API (its Service).
    pub nova_host: String,
    /// Its port (Nova's default 8775).
    pub nova_port: u16,
    /// `http` or `https`.
    pub nova_protocol: String,
    /// The generated secret shared with Nova's `[neutron] metadata_proxy_shared_secret`.
    pub shared_secret: String,
    /// With `https`: the CA file the agent verifies Nova's certificate with (`auth_ca_cert`);
    /// `None` leaves the agent on the system's trust store.
    pub ca_file: Option<String>,
}

/// Tenant and provider network settings of ML2.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Networks {
    /// Geneve VNI ranges for tenant networks, e.g. `1:65536`.
    pub geneve_vni_ranges: Vec<String>,
    /// Physical networks flat provider networks may use (`*`: any).
    pub flat_networks: Vec<String>,
    /// `physnet` or `physnet:min:max` entries of `network_vlan_ranges`.
    pub vlan_ranges: Vec<String>,
    /// MTU of the physical networks (`global_physnet_mtu`); Geneve networks get it minus the
    /// encapsulation overhead.
    pub physnet_mtu: u32,
}

impl Default for Networks {
    /// Geneve tenant networks over the full 16-bit VNI range OVN allocates from, one provider
    /// physical network `physnet1` for flat networks and VLANs 100-4000, an MTU of 1500.
    fn default() -> Self {
        Networks {
            geneve_vni_ranges: vec!["1:65536".into()],
            flat_networks: vec!["physnet1".into()],
            vlan_ranges: vec!["physnet1:100:4000".into()],
            physnet_mtu: 1500,
        }
    }
}

/// Where the rendered files are found by the processes that read them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paths {
    /// Directory holding the rendered files.
    pub config_dir: String,
    /// Neutron's `api-paste.ini` (the image's own).
    pub api_paste_config: String,
    /// `state_path` (lock files live below it).
    pub state_path: String,
    /// A log file; `None` logs to stderr (pods).
    pub log_file: Option<String>,
    /// uwsgi `home` (a virtualenv), when not the image's system Python.
    pub python_home: Option<String>,
}

impl Paths {
    /// The layout inside Neutron pods.
    pub fn pod() -> Self {
        Paths {
            config_dir: POD_CONFIG_DIR.into(),
            api_paste_config: format!("{IMAGE_CONFIG_DIR}/api-paste.ini"),
            state_path: "/var/lib/neutron".into(),
            log_file: None,
            python_home: None,
        }
    }

    /// Paths of the server's configuration files, in the order they are read.
    pub fn server_config_files(&self) -> Vec<String> {
        SERVER_CONFIG_FILES
            .iter()
            .map(|f| format!("{}/{f}", self.config_dir))
            .collect()
    }
}

/// Everything Neutron's configuration is rendered from.
#[derive(Clone, Debug)]
pub struct NeutronInputs<'a> {
    /// Replicas, image, resources and the user's config overrides (sections of
    /// `neutron.conf`, and `ml2`, `ml2_type_*` and `ovn` of `ml2_conf.ini`).
    pub template: &'a ServiceTemplate,
    /// Resolved database (`[database]`).
    pub database: Database,
    /// The deployed Keystone and Neutron's service user (`[keystone_authtoken]`, and `[nova]`
    /// for the port events Neutron sends to Nova).
    pub keystone: KeystoneAuth,
    /// The `cache` external service (memcached: servers, TLS, SASL) (keystonemiddleware's token cache), empty without a cache.
    pub cache: crate::cache::Cache,
    /// The OVN databases.
    pub ovn: Ovn,
    /// Nova's metadata API and the shared secret.
    pub metadata: Metadata,
    /// ML2 network types and ranges.
    pub networks: Networks,
    /// File locations.
    pub paths: Paths,
    /// Address uwsgi listens on, e.g. `0.0.0.0:9696`.
    pub listen: String,
    /// uwsgi worker processes.
    pub workers: u32,
}

/// Sections of the user's overrides that belong to `ml2_conf.ini`; all others go to
/// `neutron.conf` (the metadata agent's file takes none: it lives on the compute nodes).
fn is_ml2_section(section: &str) -> bool {
    section == "ml2" || section.starts_with("ml2_type_") || section == "ovn"
}

fn overrides(t: &ServiceTemplate, ml2: bool) -> BTreeMap<String, BTreeMap<String, String>> {
    t.config_overrides
        .iter()
        .filter(|(s, _)| is_ml2_section(s) == ml2)
        .map(|(s, o)| (s.clone(), o.clone()))
        .collect()
}

fn keystone_auth(ini: &mut Ini, section: &str, k: &KeystoneAuth) {
    ini.set(section, "auth_type", "password")
        .set(section, "auth_url", k.auth_url.clone())
        .set(section, "region_name", k.region.clone())
        .set(section, "username", k.username.clone())
        .set(section, "password", k.password.clone())
        .set(section, "project_name", k.project.clone())
        .set(section, "user_domain_name", "Default")
        .set(section, "project_domain_name", "Default");
}

/// `neutron.conf`: the operator's settings with the user's overrides merged over them.
pub fn neutron_conf(i: &NeutronInputs<'_>) -> String {
    let k = &i.keystone;
    let mut ini = Ini::default();
    ini.set("DEFAULT", "debug", "false");
    match &i.paths.log_file {
        Some(f) => ini.set("DEFAULT", "log_file", f.clone()),
        None => ini.set("DEFAULT", "use_stderr", "true"),
    };
    ini.set("DEFAULT", "core_plugin", "ml2")
        .set("DEFAULT", "service_plugins", "ovn-router")
        .set("DEFAULT", "auth_strategy", "keystone")
        .set(
            "DEFAULT",
            "api_paste_config",
            i.paths.api_paste_config.clone(),
        )
        .set("DEFAULT", "state_path", i.paths.state_path.clone())
        .set(
            "DEFAULT",
            "global_physnet_mtu",
            i.networks.physnet_mtu.to_string(),
        )
        // ML2/OVN has no RPC agents: no RPC workers, hence no notifiers and no message queue.
        .set("DEFAULT", "rpc_workers", "0")
        .set("DEFAULT", "rpc_state_report_workers", "0")
        // OVN serves DHCP itself; there is no DHCP agent to notify.
        .set("DEFAULT", "enable_traditional_dhcp", "false")
        .set("DEFAULT", "dhcp_agent_notification", "false")
        .set("DEFAULT", "notify_nova_on_port_status_changes", "true")
        .set("DEFAULT", "notify_nova_on_port_data_changes", "true")
        .set("database", "connection", i.database.url())
        .set("database", "max_retries", "-1")
        .set("database", "connection_recycle_time", "600")
        .set("keystone_authtoken", "auth_type", "password")
        .set("keystone_authtoken", "auth_url", k.auth_url.clone())
        .set(
            "keystone_authtoken",
            "www_authenticate_uri",
            k.www_authenticate_uri.clone(),
        )
        .set("keystone_authtoken", "region_name", k.region.clone())
        .set("keystone_authtoken", "username", k.username.clone())
        .set("keystone_authtoken", "password", k.password.clone())
        .set("keystone_authtoken", "project_name", k.project.clone())
        .set("keystone_authtoken", "user_domain_name", "Default")
        .set("keystone_authtoken", "project_domain_name", "Default")
        .set("keystone_authtoken", "service_token_roles_required", "true")
        .set(
            "oslo_concurrency",
            "lock_path",
            format!("{}/lock", i.paths.state_path),
        )
        .set("oslo_messaging_notifications", "driver", "noop")
        .set("oslo_middleware", "enable_proxy_headers_parsing", "true");
    keystone_auth(&mut ini, "nova", k);
    ini.set("nova", "endpoint_type", "internal");
    crate::cache::set_authtoken(&mut ini, &i.cache);
    ini.merge(&overrides(i.template, false));
    ini.render()
}

/// `ml2_conf.ini`: ML2 with the OVN mechanism driver and its `[ovn]` section.
pub fn ml2_conf(i: &NeutronInputs<'_>) -> Result<String, NeutronError> {
    let n = &i.networks;
    let mut ini = Ini::default();
    ini.set("ml2", "mechanism_drivers", "ovn")
        .set("ml2", "type_drivers", "geneve,flat,vlan")
        .set("ml2", "project_network_types", "geneve")
        .set("ml2", "extension_drivers", "port_security,qos")
        .set("ml2", "overlay_ip_version", "4")
        .set(
            "ml2_type_geneve",
            "vni_ranges",
            n.geneve_vni_ranges.join(","),
        )
        .set(
            "ml2_type_geneve",
            "max_header_size",
            GENEVE_MAX_HEADER_SIZE.to_string(),
        )
        .set("ml2_type_flat", "flat_networks", n.flat_networks.join(","))
        .set(
            "ml2_type_vlan",
            "network_vlan_ranges",
            n.vlan_ranges.join(","),
        )
        .set("securitygroup", "enable_security_group", "true");
    i.ovn.render_into(&mut ini, true)?;
    ini.set("ovn", "ovn_l3_scheduler", "leastloaded")
        .set("ovn", "ovn_metadata_enabled", "true")
        // Report, never repair: the maintenance worker must not rewrite what it did not create.
        .set("ovn", "neutron_sync_mode", "log");
    ini.merge(&overrides(i.template, true));
    Ok(ini.render())
}

/// The OVN metadata agent's file (it runs on every compute node next to ovn-controller and
/// reads the southbound database only).
pub fn metadata_agent_ini(i: &NeutronInputs<'_>) -> Result<String, NeutronError> {
    let m = &i.metadata;
    let mut ini = Ini::default();
    ini.set("DEFAULT", "nova_metadata_host", m.nova_host.clone())
        .set("DEFAULT", "nova_metadata_port", m.nova_port.to_string())
        .set("DEFAULT", "nova_metadata_protocol", m.nova_protocol.clone())
        .set(
            "DEFAULT",
            "metadata_proxy_shared_secret",
            m.shared_secret.clone(),
        )
        .set("DEFAULT", "metadata_workers", "2")
        .set("DEFAULT", "state_path", i.paths.state_path.clone())
        // The node's own Open_vSwitch database, which ovn-controller uses too.
        .set("ovs", "ovsdb_connection", "unix:/run/openvswitch/db.sock");
    if let (Some(ca), "https") = (&m.ca_file, m.nova_protocol.as_str()) {
        // The agent verifies Nova's certificate with this CA (never `nova_metadata_insecure`).
        ini.set("DEFAULT", "auth_ca_cert", ca.clone()).set(
            "DEFAULT",
            "nova_metadata_insecure",
            "false",
        );
    }
    i.ovn.render_into(&mut ini, false)?;
    Ok(ini.render())
}

/// uwsgi's configuration for the Neutron API.
pub fn uwsgi_ini(i: &NeutronInputs<'_>) -> String {
    let mut s = Uwsgi {
        listen: &i.listen,
        python_home: i.paths.python_home.as_deref(),
        workers: i.workers,
        module: "neutron.wsgi.api:application",
        config_dir_env: ("OS_NEUTRON_CONFIG_DIR", &i.paths.config_dir),
    }
    .render();
    s.push_str(&format!(
        "env = OS_NEUTRON_CONFIG_FILES={}\n",
        SERVER_CONFIG_FILES.join(";")
    ));
    // The OVN hash ring records each worker with uwsgi's start time; without it the driver
    // falls back to the import time and warns.
    s.push_str("start-time = %t\n");
    s
}

fn with_config_files(program: &str, paths: &Paths, rest: &[&str]) -> Vec<String> {
    let mut v = vec![program.to_string()];
    for f in paths.server_config_files() {
        v.push("--config-file".into());
        v.push(f);
    }
    v.extend(rest.iter().map(|s| s.to_string()));
    v
}

/// The first install's db sync command: `neutron-db-manage upgrade heads`.
pub fn db_sync_command(neutron_db_manage: &str, paths: &Paths) -> Vec<String> {
    with_config_files(neutron_db_manage, paths, &["upgrade", "heads"])
}

/// The expand phase of an upgrade (additive; runs while the old servers still serve).
pub fn db_expand_command(neutron_db_manage: &str, paths: &Paths) -> Vec<String> {
    with_config_files(neutron_db_manage, paths, &["upgrade", "--expand"])
}

/// The contract phase of an upgrade (after every server runs the new release).
pub fn db_contract_command(neutron_db_manage: &str, paths: &Paths) -> Vec<String> {
    with_config_files(neutron_db_manage, paths, &["upgrade", "--contract"])
}

/// The OVN maintenance worker (one replica per cluster is enough; more take turns through the
/// hash ring's lock).
pub fn maintenance_worker_command(program: &str, paths: &Paths) -> Vec<String> {
    with_config_files(program, paths, &[])
}

/// Hash of the db sync step's inputs: the image and everything the server reads.
pub fn db_sync_hash(image: &str, neutron_conf: &str, ml2_conf: &str) -> String {
    InputHash::new()
        .add("image", image)
        .add("neutron.conf", neutron_conf)
        .add("ml2_conf.ini", ml2_conf)
        .short()
}

/// Hash of the server's configuration (the Deployments' pod-template annotation).
pub fn config_hash(image: &str, files: &BTreeMap<String, String>) -> String {
    let mut h = InputHash::new().add("image", image);
    for (name, text) in files {
        h = h.add(name, text);
    }
    h.short()
}

/// The files of the config Secret.
pub fn config_files(i: &NeutronInputs<'_>) -> Result<BTreeMap<String, String>, NeutronError> {
    Ok(BTreeMap::from([
        ("neutron.conf".to_string(), neutron_conf(i)),
        ("ml2_conf.ini".to_string(), ml2_conf(i)?),
        (METADATA_AGENT_FILE.to_string(), metadata_agent_ini(i)?),
        ("uwsgi.ini".to_string(), uwsgi_ini(i)),
    ]))
}

/// The in-cluster URL of a Neutron's Service (`<name>-api`).
pub fn internal_url(name: &str, namespace: &str) -> String {
    crate::service_user::internal_url(name, namespace, PORT)
}

/// The catalog entry the service-user step registers: user `username` in `project`, service
/// `neutron` of type `network`, endpoints at `public_url` and `internal_url` in `region`.
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
        "OpenStack Networking",
        region,
        public_url,
        internal_url,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::{self, JobParams, Owner};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    #[test]
    fn pod_paths_are_where_the_image_has_them() {
        // pip installs neutron's data_files (api-paste.ini) under the venv's prefix,
        // /opt/openstack in deploy/images: "Could not find config at
        // /etc/neutron/api-paste.ini" otherwise.
        let p = Paths::pod();
        assert_eq!(
            p.api_paste_config,
            "/opt/openstack/etc/neutron/api-paste.ini"
        );
        assert!(p.api_paste_config.starts_with(IMAGE_CONFIG_DIR));
    }

    fn template() -> ServiceTemplate {
        let mut t = ServiceTemplate::default();
        t.config_overrides.insert(
            "ml2_type_geneve".into(),
            BTreeMap::from([("vni_ranges".into(), "1:4000".into())]),
        );
        t.config_overrides.insert(
            "DEFAULT".into(),
            BTreeMap::from([("max_allowed_address_pair".into(), "20".into())]),
        );
        t
    }

    fn tls() -> OvnTls {
        OvnTls {
            private_key: "/etc/neutron/ovn/tls.key".into(),
            certificate: "/etc/neutron/ovn/tls.crt".into(),
            ca_cert: "/etc/neutron/ovn/ca.crt".into(),
        }
    }

    fn inputs(t: &ServiceTemplate) -> NeutronInputs<'_> {
        NeutronInputs {
            template: t,
            database: Database {
                host: "db.example.org".into(),
                port: 3306,
                name: "neutron".into(),
                user: "neutron".into(),
                password: "dbsecret".into(),
                ca_file: None,
                verify: Default::default(),
                server_name: None,
            },
            keystone: KeystoneAuth {
                auth_url: "http://keystone-api.os.svc:5000/v3".into(),
                www_authenticate_uri: "https://keystone.example.org/v3".into(),
                region: "RegionOne".into(),
                username: "neutron".into(),
                password: "kssecret".into(),
                project: "service".into(),
            },
            cache: crate::cache::Cache::plain(vec!["mc-0:11211".into()]),
            ovn: Ovn {
                nb: vec!["ssl:ovn-nb-0:6641".into(), "ovn-nb-1:6641".into()],
                sb: vec!["ssl:ovn-sb-0:6642".into()],
                tls: Some(tls()),
            },
            metadata: Metadata {
                nova_host: "nova-metadata.os.svc".into(),
                nova_port: 8775,
                nova_protocol: "http".into(),
                shared_secret: "mdsecret".into(),
                ca_file: None,
            },
            networks: Networks::default(),
            paths: Paths::pod(),
            listen: format!("0.0.0.0:{PORT}"),
            workers: 2,
        }
    }

    #[test]
    fn neutron_snapshots() {
        let t = template();
        let i = inputs(&t);
        insta::assert_snapshot!("neutron_conf", neutron_conf(&i));
        insta::assert_snapshot!("ml2_conf", ml2_conf(&i).unwrap());
        insta::assert_snapshot!("metadata_agent", metadata_agent_ini(&i).unwrap());
        insta::assert_snapshot!("uwsgi", uwsgi_ini(&i));
    }

    #[test]
    fn connections_follow_the_endpoints_and_tls() {
        let t = ServiceTemplate::default();
        let mut i = inputs(&t);
        // A bare host:port with TLS configured is ssl:, like the explicit ones.
        assert_eq!(
            i.ovn.nb_connection().unwrap(),
            "ssl:ovn-nb-0:6641,ssl:ovn-nb-1:6641"
        );
        i.ovn = Ovn {
            nb: vec!["tcp:127.0.0.1:6641".into()],
            sb: vec!["127.0.0.1:6642".into()],
            tls: None,
        };
        let ml2 = ml2_conf(&i).unwrap();
        assert!(ml2.contains("ovn_nb_connection = tcp:127.0.0.1:6641\n"));
        assert!(ml2.contains("ovn_sb_connection = tcp:127.0.0.1:6642\n"));
        assert!(!ml2.contains("private_key"), "{ml2}");
        let agent = metadata_agent_ini(&i).unwrap();
        assert!(agent.contains("ovn_sb_connection = tcp:127.0.0.1:6642\n"));
        assert!(!agent.contains("ovn_nb_connection"), "{agent}");
        assert!(agent.contains("metadata_proxy_shared_secret = mdsecret\n"));
    }

    #[test]
    fn unusable_ovn_inputs_are_refused_by_name() {
        let t = ServiceTemplate::default();
        let mut i = inputs(&t);
        i.ovn.tls = None;
        assert_eq!(
            ml2_conf(&i),
            Err(NeutronError::SslWithoutTls(
                "southbound",
                "ssl:ovn-sb-0:6642".into()
            ))
        );
        i.ovn.sb.clear();
        assert_eq!(
            metadata_agent_ini(&i),
            Err(NeutronError::NoEndpoint("southbound"))
        );
        for bad in [
            "ovn-nb",
            "tcp:ovn-nb",
            "unix:/run/ovn.sock",
            "ssl:h:99999",
            ":6641",
        ] {
            assert_eq!(
                ovsdb_connection(bad, false),
                Err(NeutronError::BadEndpoint(bad.into())),
                "{bad}"
            );
        }
    }

    #[test]
    fn overrides_land_in_the_file_that_reads_them() {
        let t = template();
        let i = inputs(&t);
        let conf = neutron_conf(&i);
        let ml2 = ml2_conf(&i).unwrap();
        assert!(conf.contains("max_allowed_address_pair = 20\n"));
        assert!(!conf.contains("ml2_type_geneve"), "{conf}");
        assert!(ml2.contains("[ml2_type_geneve]\nmax_header_size = 38\nvni_ranges = 1:4000\n"));
        assert!(!ml2.contains("max_allowed_address_pair"));
    }

    #[test]
    fn no_message_queue_is_rendered() {
        let t = template();
        let conf = neutron_conf(&inputs(&t));
        assert!(!conf.contains("transport_url"), "{conf}");
        assert!(conf.contains("rpc_workers = 0\n"));
        assert!(conf.contains("[oslo_messaging_notifications]\ndriver = noop\n"));
    }

    #[test]
    fn the_options_validation_refuses_are_the_ones_rendered() {
        let t = ServiceTemplate::default();
        let i = inputs(&t);
        let mut rendered = Ini::parse(&neutron_conf(&i));
        rendered.merge(&Ini::parse(&ml2_conf(&i).unwrap()).0);
        for (section, key) in controlplane_api::validation::NEUTRON_OWNED_OPTIONS {
            if (*section, *key) == ("DEFAULT", "transport_url") {
                assert_eq!(rendered.get(section, key), None);
                continue;
            }
            assert!(
                rendered.get(section, key).is_some(),
                "[{section}] {key} is owned but not rendered"
            );
        }
    }

    #[test]
    fn commands_read_both_server_files() {
        let p = Paths::pod();
        let expect = |rest: &[&str]| {
            let mut v: Vec<String> = vec![
                "neutron-db-manage".into(),
                "--config-file".into(),
                "/etc/neutron/rendered/neutron.conf".into(),
                "--config-file".into(),
                "/etc/neutron/rendered/ml2_conf.ini".into(),
            ];
            v.extend(rest.iter().map(|s| s.to_string()));
            v
        };
        assert_eq!(
            db_sync_command("neutron-db-manage", &p),
            expect(&["upgrade", "heads"])
        );
        assert_eq!(
            db_expand_command("neutron-db-manage", &p),
            expect(&["upgrade", "--expand"])
        );
        assert_eq!(
            db_contract_command("neutron-db-manage", &p),
            expect(&["upgrade", "--contract"])
        );
    }

    #[test]
    fn ml2_changes_reach_the_sync_hash_and_the_config_hash() {
        let t = template();
        let a = config_files(&inputs(&t)).unwrap();
        let mut t2 = template();
        t2.config_overrides.insert(
            "ml2".into(),
            BTreeMap::from([("path_mtu".into(), "9000".into())]),
        );
        let b = config_files(&inputs(&t2)).unwrap();
        assert_eq!(a["neutron.conf"], b["neutron.conf"]);
        assert_ne!(
            db_sync_hash("img", &a["neutron.conf"], &a["ml2_conf.ini"]),
            db_sync_hash("img", &b["neutron.conf"], &b["ml2_conf.ini"])
        );
        assert_ne!(config_hash("img", &a), config_hash("img", &b));
        assert_eq!(config_hash("img", &a), config_hash("img", &a));
    }

    #[test]
    fn db_sync_job_snapshot() {
        let t = template();
        let i = inputs(&t);
        let owner = Owner {
            reference: OwnerReference {
                api_version: "controlplane.sunet.se/v1alpha1".into(),
                kind: "Neutron".into(),
                name: "neutron".into(),
                uid: "0000-2222".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            },
            namespace: "os".into(),
            instance: "neutron".into(),
            service: "neutron".into(),
        };
        let image = "quay.io/openstack/neutron:2026.1";
        let hash = db_sync_hash(image, &neutron_conf(&i), &ml2_conf(&i).unwrap());
        let job = objects::job(
            &owner,
            JobParams {
                name: format!("neutron-db-sync-{hash}-0"),
                step: "db-sync".into(),
                hash: hash.clone(),
                image: image.into(),
                command: db_sync_command("neutron-db-manage", &i.paths),
                env: vec![],
                volumes: vec![objects::secret_volume(
                    "config",
                    "neutron-config",
                    POD_CONFIG_DIR,
                )],
            },
        );
        insta::assert_yaml_snapshot!(job);
    }

    #[test]
    fn catalog_entry_is_the_network_service() {
        let t = template();
        let e = service_entry(
            &inputs(&t).keystone,
            "RegionOne",
            "https://neutron.example.org/",
            &internal_url("neutron", "os"),
        );
        assert_eq!(
            (e.service_type.as_str(), e.service_name.as_str()),
            ("network", "neutron")
        );
        assert_eq!(e.public_url, "https://neutron.example.org");
        assert_eq!(e.internal_url, "http://neutron-api.os.svc:9696");
    }

    #[test]
    fn every_rendered_option_is_one_neutron_defines() {
        let t = template();
        let i = inputs(&t);
        crate::ini::assert_options_known(
            controlplane_api::ServiceName::Neutron,
            &neutron_conf(&i),
            &[],
        );
        // The TLS edits: `cafile` of keystonemiddleware and of the [nova] client.
        let with_ca =
            crate::tls::set_client_ca(&neutron_conf(&i), &crate::tls::CLIENT_SECTIONS, "/x/ca");
        assert_eq!(Ini::parse(&with_ca).get("nova", "cafile"), Some("/x/ca"));
        crate::ini::assert_options_known(controlplane_api::ServiceName::Neutron, &with_ca, &[]);
        crate::ini::assert_options_known(
            controlplane_api::ServiceName::Neutron,
            &ml2_conf(&i).unwrap(),
            &[],
        );
        crate::ini::assert_options_known(
            controlplane_api::ServiceName::Neutron,
            &metadata_agent_ini(&i).unwrap(),
            &[],
        );
    }

    #[test]
    fn the_agent_calls_nova_metadata_over_https_verifying_with_the_ca() {
        let t = ServiceTemplate::default();
        let mut i = inputs(&t);
        let plain = Ini::parse(&metadata_agent_ini(&i).unwrap());
        assert_eq!(plain.get("DEFAULT", "nova_metadata_protocol"), Some("http"));
        assert_eq!(plain.get("DEFAULT", "auth_ca_cert"), None);
        i.metadata.nova_protocol = "https".into();
        i.metadata.ca_file = Some("/etc/neutron/nova-metadata-ca.crt".into());
        let text = metadata_agent_ini(&i).unwrap();
        let tls = Ini::parse(&text);
        assert_eq!(tls.get("DEFAULT", "nova_metadata_protocol"), Some("https"));
        assert_eq!(
            tls.get("DEFAULT", "auth_ca_cert"),
            Some("/etc/neutron/nova-metadata-ca.crt")
        );
        assert_eq!(tls.get("DEFAULT", "nova_metadata_insecure"), Some("false"));
        crate::ini::assert_options_known(controlplane_api::ServiceName::Neutron, &text, &[]);
    }
}
