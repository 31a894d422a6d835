use super::*;
use crate::objects::{self, JobParams, Owner};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

fn template() -> ServiceTemplate {
    let mut t = ServiceTemplate::default();
    t.config_overrides.insert(
        "DEFAULT".into(),
        BTreeMap::from([("cpu_allocation_ratio".into(), "4.0".into())]),
    );
    t.config_overrides.insert(
        "filter_scheduler".into(),
        BTreeMap::from([("host_subset_size".into(), "2".into())]),
    );
    t
}

fn db(name: &str) -> Database {
    Database {
        host: "db.example.org".into(),
        port: 3306,
        name: name.into(),
        user: "nova".into(),
        password: "dbsecret".into(),
        ca_file: Some("/etc/nova/db-ca/ca.crt".into()),
        verify: Default::default(),
        server_name: None,
    }
}

fn inputs(t: &ServiceTemplate) -> NovaInputs<'_> {
    NovaInputs {
        template: t,
        databases: Databases {
            api: db("nova_api"),
            cell0: db("nova_cell0"),
            cell1: db("nova"),
        },
        messaging: Messaging {
            hosts: vec!["rabbit.example.org:5671".into()],
            user: "nova".into(),
            password: "mqsecret".into(),
            vhost: "openstack".into(),
            ca_file: Some("/etc/nova/mq-ca/ca.crt".into()),
        },
        keystone: KeystoneAuth {
            auth_url: "http://keystone-api.os.svc:5000/v3".into(),
            www_authenticate_uri: "https://keystone.example.org/v3".into(),
            region: "RegionOne".into(),
            username: "nova".into(),
            password: "kssecret".into(),
            project: "service".into(),
        },
        cache: crate::cache::Cache::plain(vec!["mc-0:11211".into()]),
        peers: Peers {
            placement: Some("http://placement-api.os.svc:8778".into()),
            glance: Some("http://glance-api.os.svc:9292/".into()),
            neutron: None,
        },
        metadata_secret: "mdsecret".into(),
        vnc: Vnc {
            base_url: "https://vnc.example.org/vnc_lite.html".into(),
            proxy_host: "0.0.0.0".into(),
            proxy_port: NOVNCPROXY_PORT,
        },
        discover_hosts_interval: 300,
        host: "nova".into(),
        paths: Paths::pod(),
        api_listen: format!("0.0.0.0:{API_PORT}"),
        metadata_listen: format!("0.0.0.0:{METADATA_PORT}"),
        workers: 2,
    }
}

fn node() -> ComputeNode {
    ComputeNode {
        host: "compute-0".into(),
        compute_driver: "libvirt.LibvirtDriver".into(),
        my_ip: "10.0.0.5".into(),
    }
}

#[test]
fn nova_snapshots() {
    let t = template();
    let i = inputs(&t);
    insta::assert_snapshot!("nova_conf", nova_conf(&i).unwrap());
    insta::assert_snapshot!("compute_conf", compute_conf(&i, &node()).unwrap());
    insta::assert_snapshot!("api_uwsgi", api_uwsgi_ini(&i));
    insta::assert_snapshot!("metadata_uwsgi", metadata_uwsgi_ini(&i));
}

#[test]
fn the_options_validation_refuses_are_the_ones_rendered() {
    let t = ServiceTemplate::default();
    let mut i = inputs(&t);
    i.cache = crate::cache::full();
    let ini = Ini::parse(&nova_conf(&i).unwrap());
    for (section, key) in controlplane_api::validation::NOVA_OWNED_OPTIONS {
        assert!(
            ini.get(section, key).is_some(),
            "[{section}] {key} is owned but not rendered"
        );
    }
}

#[test]
fn peers_are_pinned_or_found_in_the_catalog() {
    let t = template();
    let ini = Ini::parse(&nova_conf(&inputs(&t)).unwrap());
    assert_eq!(
        ini.get("placement", "endpoint_override"),
        Some("http://placement-api.os.svc:8778")
    );
    assert_eq!(
        ini.get("glance", "endpoint_override"),
        Some("http://glance-api.os.svc:9292")
    );
    assert_eq!(ini.get("neutron", "endpoint_override"), None);
    assert_eq!(ini.get("neutron", "valid_interfaces"), Some("internal"));
    assert_eq!(ini.get("neutron", "region_name"), Some("RegionOne"));
    assert_eq!(ini.get("service_user", "valid_interfaces"), None);
}

#[test]
fn the_message_queue_and_its_tls_reach_both_files() {
    let t = template();
    let i = inputs(&t);
    for text in [nova_conf(&i).unwrap(), compute_conf(&i, &node()).unwrap()] {
        let ini = Ini::parse(&text);
        assert_eq!(
            ini.get("DEFAULT", "transport_url"),
            Some("rabbit://nova:mqsecret@rabbit.example.org:5671/openstack")
        );
        assert_eq!(ini.get("oslo_messaging_rabbit", "ssl"), Some("true"));
        assert_eq!(
            ini.get("oslo_messaging_rabbit", "ssl_ca_file"),
            Some("/etc/nova/mq-ca/ca.crt")
        );
    }
    let mut i = inputs(&t);
    i.messaging.ca_file = None;
    let ini = Ini::parse(&nova_conf(&i).unwrap());
    assert_eq!(ini.get("oslo_messaging_rabbit", "ssl"), None);
    i.messaging.hosts.clear();
    assert_eq!(
        nova_conf(&i),
        Err(NovaError::Messaging(MessagingError::NoEndpoint))
    );
}

#[test]
fn compute_nodes_get_no_database_and_no_token_validation() {
    let t = template();
    let mut t2 = template();
    t2.config_overrides.insert(
        "database".into(),
        BTreeMap::from([("max_pool_size".into(), "50".into())]),
    );
    for t in [t, t2] {
        let text = compute_conf(&inputs(&t), &node()).unwrap();
        let ini = Ini::parse(&text);
        for section in ["database", "api_database", "keystone_authtoken"] {
            assert!(!ini.0.contains_key(section), "[{section}] in {text}");
        }
        assert!(!text.contains("dbsecret"), "{text}");
        assert_eq!(ini.get("DEFAULT", "host"), Some("compute-0"));
        assert_eq!(ini.get("DEFAULT", "cpu_allocation_ratio"), Some("4.0"));
        assert_eq!(ini.get("vnc", "server_listen"), Some("10.0.0.5"));
    }
}

#[test]
fn the_cell_databases_must_share_a_server() {
    let t = template();
    let mut i = inputs(&t);
    i.databases.cell0.host = "elsewhere".into();
    assert!(matches!(
        nova_conf(&i),
        Err(NovaError::Cells(CellsError::CellDatabasesDiffer { .. }))
    ));
}

#[test]
fn commands_read_the_rendered_file() {
    let p = Paths::pod();
    let conf = "/etc/nova/rendered/nova.conf";
    assert_eq!(
        api_db_sync_command("nova-manage", &p),
        ["nova-manage", "--config-file", conf, "api_db", "sync"]
    );
    assert_eq!(
        db_sync_command("nova-manage", &p),
        ["nova-manage", "--config-file", conf, "db", "sync"]
    );
    assert_eq!(
        online_data_migrations_command("nova-manage", &p),
        [
            "nova-manage",
            "--config-file",
            conf,
            "db",
            "online_data_migrations"
        ]
    );
    assert_eq!(
        service_command("nova-conductor", &p),
        ["nova-conductor", "--config-file", conf]
    );
    let t = template();
    let uwsgi = api_uwsgi_ini(&inputs(&t));
    // The image's own api-paste.ini: nova's data_files under the venv's prefix.
    assert!(
        uwsgi.contains(
            "env = OS_NOVA_CONFIG_FILES=/opt/openstack/etc/nova/api-paste.ini;nova.conf\n"
        )
    );
    assert!(uwsgi.contains("module = nova.wsgi.osapi_compute:application\n"));
}

#[test]
fn each_job_reruns_exactly_when_its_inputs_change() {
    let t = template();
    let base = job_hashes(&inputs(&t), "img", "nova-manage").unwrap();
    assert_eq!(base, job_hashes(&inputs(&t), "img", "nova-manage").unwrap());
    // A scheduler option is no database step's input.
    let mut t2 = template();
    t2.config_overrides.insert(
        "scheduler".into(),
        BTreeMap::from([("max_attempts".into(), "5".into())]),
    );
    assert_eq!(
        base,
        job_hashes(&inputs(&t2), "img", "nova-manage").unwrap()
    );
    // The cell database's password: db sync again; the cell templates do not change.
    let mut i = inputs(&t);
    i.databases.cell1.password = "rotated".into();
    i.databases.cell0.password = "rotated".into();
    let h = job_hashes(&i, "img", "nova-manage").unwrap();
    assert_eq!(h.api_db_sync, base.api_db_sync);
    assert_eq!(h.cell_setup, base.cell_setup);
    assert_ne!(h.db_sync, base.db_sync);
    assert_ne!(h.online_data_migrations, base.online_data_migrations);
    assert_ne!(h.db_sync, h.online_data_migrations);
    // The API database moves: everything runs again.
    let mut i = inputs(&t);
    i.databases.api.host = "db2.example.org".into();
    let h = job_hashes(&i, "img", "nova-manage").unwrap();
    assert_ne!(h.api_db_sync, base.api_db_sync);
    assert_ne!(h.cell_setup, base.cell_setup);
    // A new image: every step.
    let h = job_hashes(&inputs(&t), "img2", "nova-manage").unwrap();
    assert!(
        h.api_db_sync != base.api_db_sync
            && h.cell_setup != base.cell_setup
            && h.db_sync != base.db_sync
    );
}

#[test]
fn config_hash_follows_the_files() {
    let t = template();
    let a = nova_conf(&inputs(&t)).unwrap();
    let mut t2 = template();
    t2.config_overrides.insert(
        "DEFAULT".into(),
        BTreeMap::from([("debug".into(), "true".into())]),
    );
    let b = nova_conf(&inputs(&t2)).unwrap();
    assert_ne!(config_hash("img", &a, None), config_hash("img", &b, None));
    assert_ne!(
        config_hash("img", &a, Some("x")),
        config_hash("img", &a, Some("y"))
    );
    assert_eq!(config_hash("img", &a, None), config_hash("img", &a, None));
}

#[test]
fn cell_setup_job_snapshot() {
    let t = template();
    let i = inputs(&t);
    let owner = Owner {
        reference: OwnerReference {
            api_version: "controlplane.sunet.se/v1alpha1".into(),
            kind: "Nova".into(),
            name: "nova".into(),
            uid: "0000-3333".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        },
        namespace: "os".into(),
        instance: "nova".into(),
        service: "nova".into(),
    };
    let image = "quay.io/openstack/nova:2026.1";
    let hashes = job_hashes(&i, image, "nova-manage").unwrap();
    let env = cell_setup_env(&i, "nova-manage").unwrap();
    assert!(env.iter().all(|(_, v)| !v.contains("secret")), "{env:?}");
    let job = objects::job(
        &owner,
        JobParams {
            name: format!("nova-cell-setup-{}-0", hashes.cell_setup),
            step: "cell-setup".into(),
            hash: hashes.cell_setup.clone(),
            image: image.into(),
            command: cells::command(),
            env: env.into_iter().map(|(k, v)| objects::env(&k, v)).collect(),
            volumes: vec![objects::secret_volume(
                "config",
                "nova-config",
                POD_CONFIG_DIR,
            )],
        },
    );
    insta::assert_yaml_snapshot!(job);
}

#[test]
fn catalog_entry_is_the_compute_service() {
    let t = template();
    let e = service_entry(
        &inputs(&t).keystone,
        "RegionOne",
        "https://nova.example.org/v2.1/",
        &internal_url("nova", "os"),
    );
    assert_eq!(
        (e.service_type.as_str(), e.service_name.as_str()),
        ("compute", "nova")
    );
    assert_eq!(e.public_url, "https://nova.example.org/v2.1");
    assert_eq!(e.internal_url, "http://nova-api.os.svc:8774/v2.1");
}

#[test]
fn every_rendered_option_is_one_nova_defines() {
    let t = template();
    let i = inputs(&t);
    let service = controlplane_api::ServiceName::Nova;
    crate::ini::assert_options_known(service, &nova_conf(&i).unwrap(), &[]);
    crate::ini::assert_options_known(service, &compute_conf(&i, &node()).unwrap(), &[]);
    // The TLS edits: `cafile` in every client section Nova renders is a Nova option.
    let ca = |t: String| crate::tls::set_client_ca(&t, &crate::tls::CLIENT_SECTIONS, "/x/ca.crt");
    let conf = ca(nova_conf(&i).unwrap());
    for section in [
        "keystone_authtoken",
        "placement",
        "neutron",
        "glance",
        "service_user",
    ] {
        assert!(
            crate::ini::Ini::parse(&conf)
                .get(section, "cafile")
                .is_some(),
            "[{section}] has no cafile"
        );
    }
    crate::ini::assert_options_known(service, &conf, &[]);
    crate::ini::assert_options_known(service, &ca(compute_conf(&i, &node()).unwrap()), &[]);
}

#[test]
fn with_tls_both_apis_and_the_novnc_proxy_serve_the_certificate() {
    let t = template();
    let i = inputs(&t);
    let mut files = config_files(&i).unwrap();
    crate::tls::edit_files(
        &mut files,
        POD_CONFIG_DIR,
        &[NOVA_CONF],
        &UWSGI_FILES,
        None,
        Some(crate::tls::POD_TLS_DIR),
    );
    for f in [API_UWSGI, METADATA_UWSGI] {
        assert!(
            files[f].contains("https-socket = 0.0.0.0:")
                && files[f].contains(",/etc/openstack-tls/tls.crt,/etc/openstack-tls/tls.key")
                && !files[f].contains("http-socket"),
            "{f}: {}",
            files[f]
        );
    }
    assert!(files[METADATA_UWSGI].contains("https-socket = 0.0.0.0:8775,"));
    let (crt, key) = crate::tls::pod_files(crate::tls::POD_TLS_DIR);
    let conf = novncproxy_tls(&files[NOVA_CONF], &crt, &key);
    let ini = crate::ini::Ini::parse(&conf);
    assert_eq!(ini.get("DEFAULT", "ssl_only"), Some("true"));
    assert_eq!(
        ini.get("DEFAULT", "cert"),
        Some("/etc/openstack-tls/tls.crt")
    );
    assert_eq!(
        ini.get("DEFAULT", "key"),
        Some("/etc/openstack-tls/tls.key")
    );
    // The rest of the file is kept, and the options are Nova's own.
    assert_eq!(ini.get("DEFAULT", "cpu_allocation_ratio"), Some("4.0"));
    crate::ini::assert_options_known(controlplane_api::ServiceName::Nova, &conf, &[]);
}

#[test]
fn a_tls_cache_reaches_the_token_cache_and_oslo_cache() {
    let t = template();
    let mut i = inputs(&t);
    i.cache.tls = Some(crate::cache::CacheTls {
        ca_file: "/etc/ssl/cache-ca/ca.crt".into(),
        client_cert: None,
        verify: controlplane_api::external::VerifyMode::Full,
    });
    i.cache.sasl = Some(crate::cache::CacheSasl {
        username: "nova-cache".into(),
        password: "pw".into(),
    });
    let text = nova_conf(&i).unwrap();
    let ini = Ini::parse(&text);
    for (s, k, v) in [
        ("keystone_authtoken", "memcache_tls_enabled", "true"),
        (
            "keystone_authtoken",
            "memcache_tls_cafile",
            "/etc/ssl/cache-ca/ca.crt",
        ),
        ("keystone_authtoken", "memcache_sasl_enabled", "true"),
        ("keystone_authtoken", "memcache_username", "nova-cache"),
        ("cache", "tls_enabled", "true"),
        ("cache", "tls_cafile", "/etc/ssl/cache-ca/ca.crt"),
        ("cache", "backend", "oslo_cache.memcache_pool"),
        ("cache", "memcache_sasl_enabled", "true"),
    ] {
        assert_eq!(ini.get(s, k), Some(v), "[{s}] {k}");
    }
    crate::ini::assert_options_known(controlplane_api::ServiceName::Nova, &text, &[]);
    let plain = Ini::parse(&nova_conf(&inputs(&t)).unwrap());
    assert_eq!(plain.get("cache", "tls_enabled"), None);
    assert_eq!(
        plain.get("keystone_authtoken", "memcache_tls_enabled"),
        None
    );
}

#[test]
fn pod_paths_are_where_the_image_and_the_pod_have_them() {
    // pip installs nova's data_files (api-paste.ini) under the venv's prefix, /opt/openstack
    // in deploy/images; /etc/nova/api-paste.ini does not exist in the image.
    let p = Paths::pod();
    assert_eq!(p.api_paste_config, "/opt/openstack/etc/nova/api-paste.ini");
    assert!(p.api_paste_config.starts_with(IMAGE_CONFIG_DIR));
    // state_path (lock files) is the emptyDir the controller mounts.
    assert_eq!(p.state_path, POD_STATE_DIR);
}
