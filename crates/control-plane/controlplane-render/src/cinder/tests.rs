use super::*;
use crate::cinder::backend::tests::{nfs, rbd};
use crate::objects::{self, JobParams, Owner};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

fn template() -> ServiceTemplate {
    let mut t = ServiceTemplate::default();
    t.config_overrides.insert(
        "DEFAULT".into(),
        BTreeMap::from([("default_volume_type".into(), "ceph".into())]),
    );
    t.config_overrides.insert(
        "ceph".into(),
        BTreeMap::from([("rbd_store_chunk_size".into(), "8".into())]),
    );
    t
}

fn inputs(t: &ServiceTemplate) -> CinderInputs<'_> {
    CinderInputs {
        template: t,
        database: Database {
            host: "db.example.org".into(),
            port: 3306,
            name: "cinder".into(),
            user: "cinder".into(),
            password: "dbsecret".into(),
            ca_file: None,
            verify: Default::default(),
            server_name: None,
        },
        messaging: Messaging {
            hosts: vec!["rabbitmq.example.org:5671".into()],
            user: "cinder".into(),
            password: "mqsecret".into(),
            vhost: "openstack".into(),
            tls: Some(MessagingTls {
                ca_file: Some("/etc/cinder/rabbitmq-ca/ca.crt".into()),
                client_cert: Some((
                    "/etc/cinder/rabbitmq-client/tls.crt".into(),
                    "/etc/cinder/rabbitmq-client/tls.key".into(),
                )),
            }),
        },
        keystone: KeystoneAuth {
            auth_url: "http://keystone-api.os.svc:5000/v3".into(),
            www_authenticate_uri: "https://keystone.example.org/v3".into(),
            region: "RegionOne".into(),
            username: "cinder".into(),
            password: "kssecret".into(),
            project: "service".into(),
        },
        cache: crate::cache::Cache::plain(vec!["mc-0:11211".into()]),
        backends: vec![rbd("ceph"), nfs("nfs")],
        volume_host: "cinder-volume".into(),
        paths: Paths::pod(),
        listen: format!("0.0.0.0:{PORT}"),
        workers: 2,
    }
}

#[test]
fn cinder_snapshots() {
    let t = template();
    let i = inputs(&t);
    insta::assert_snapshot!("cinder_conf", cinder_conf(&i));
    insta::assert_snapshot!("uwsgi", uwsgi_ini(&i));
}

#[test]
fn backends_are_enabled_and_each_has_its_section_and_file() {
    let t = template();
    let i = inputs(&t);
    let conf = cinder_conf(&i);
    assert!(conf.contains("enabled_backends = ceph,nfs\n"), "{conf}");
    assert!(
        conf.contains("[ceph]\nbackend_host = cinder-volume\n"),
        "{conf}"
    );
    // The user's override reached the backend's own section.
    assert!(conf.contains("rbd_store_chunk_size = 8\n"), "{conf}");
    let files = config_files(&i);
    assert_eq!(
        files.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "ceph-ceph.conf",
            "cinder.conf",
            "nfs-shares-nfs",
            "uwsgi.ini"
        ]
    );
    assert!(files["ceph-ceph.conf"].contains("[client.cinder]\nkeyring = "));
}

#[test]
fn messaging_is_rendered_with_tls() {
    let t = template();
    let conf = cinder_conf(&inputs(&t));
    assert!(conf.contains(
        "transport_url = rabbit://cinder:mqsecret@rabbitmq.example.org:5671/openstack\n"
    ));
    assert!(
        conf.contains(
            "[oslo_messaging_rabbit]\nssl = true\nssl_ca_file = /etc/cinder/rabbitmq-ca/ca.crt\n"
        ),
        "{conf}"
    );
}

#[test]
fn the_options_validation_refuses_are_the_ones_rendered() {
    let t = ServiceTemplate::default();
    let i = inputs(&t);
    let rendered = Ini::parse(&cinder_conf(&i));
    for (section, key) in controlplane_api::validation::CINDER_OWNED_OPTIONS {
        assert!(
            rendered.get(section, key).is_some(),
            "[{section}] {key} is owned but not rendered"
        );
    }
}

#[test]
fn validation_view_moves_only_backend_sections() {
    let t = template();
    let i = inputs(&t);
    let view = validation_view(&cinder_conf(&i), &i.backends);
    assert_eq!(view.matches("[backend_defaults]").count(), 2, "{view}");
    assert!(!view.contains("[ceph]") && !view.contains("[nfs]"));
    assert!(view.contains("[nova]\n") && view.contains("[database]\n"));
    assert!(!view.contains("backend_host"), "{view}");
    assert!(view.contains("rbd_pool = volumes\n"), "{view}");
}

#[test]
fn commands_read_the_rendered_file() {
    let p = Paths::pod();
    let conf = "/etc/cinder/rendered/cinder.conf";
    assert_eq!(
        db_sync_command("cinder-manage", &p),
        ["cinder-manage", "--config-file", conf, "db", "sync"]
    );
    assert_eq!(
        online_data_migrations_command("cinder-manage", &p),
        [
            "cinder-manage",
            "--config-file",
            conf,
            "db",
            "online_data_migrations"
        ]
    );
    assert_eq!(
        volume_command("cinder-volume", &p),
        ["cinder-volume", "--config-file", conf]
    );
    assert_eq!(
        scheduler_command("cinder-scheduler", &p),
        ["cinder-scheduler", "--config-file", conf]
    );
}

#[test]
fn backend_changes_reach_the_hashes() {
    let t = template();
    let a = config_files(&inputs(&t));
    let mut i = inputs(&t);
    if let BackendKind::Nfs(f) = &mut i.backends[1].kind {
        f.shares.push("other.example.org:/more".into());
    }
    let b = config_files(&i);
    // Only the shares file changed: the services roll, the schema does not depend on it.
    assert_eq!(a["cinder.conf"], b["cinder.conf"]);
    assert_ne!(config_hash("img", &a), config_hash("img", &b));
    assert_eq!(config_hash("img", &a), config_hash("img", &a));
    let mut t2 = template();
    t2.config_overrides.insert(
        "DEFAULT".into(),
        BTreeMap::from([("debug".into(), "true".into())]),
    );
    let c = cinder_conf(&inputs(&t2));
    assert_ne!(
        db_sync_hash("img", &a["cinder.conf"]),
        db_sync_hash("img", &c)
    );
    assert_ne!(
        db_sync_hash("img", &c),
        online_migrations_hash("img", &c),
        "the two steps' Jobs need distinct names"
    );
}

#[test]
fn db_sync_job_snapshot() {
    let t = template();
    let i = inputs(&t);
    let owner = Owner {
        reference: OwnerReference {
            api_version: "controlplane.sunet.se/v1alpha1".into(),
            kind: "Cinder".into(),
            name: "cinder".into(),
            uid: "0000-3333".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        },
        namespace: "os".into(),
        instance: "cinder".into(),
        service: "cinder".into(),
    };
    let image = "quay.io/openstack/cinder:2026.1";
    let hash = db_sync_hash(image, &cinder_conf(&i));
    let job = objects::job(
        &owner,
        JobParams {
            name: format!("cinder-db-sync-{hash}-0"),
            step: "db-sync".into(),
            hash: hash.clone(),
            image: image.into(),
            command: db_sync_command("cinder-manage", &i.paths),
            env: vec![],
            volumes: vec![objects::secret_volume(
                "config",
                "cinder-config",
                POD_CONFIG_DIR,
            )],
        },
    );
    insta::assert_yaml_snapshot!(job);
}

#[test]
fn catalog_entries_are_block_storage_and_volumev3() {
    let t = template();
    let [bs, v3] = service_entries(
        &inputs(&t).keystone,
        "RegionOne",
        "https://cinder.example.org/",
        &internal_url("cinder", "os"),
    );
    assert_eq!(
        (bs.service_type.as_str(), bs.service_name.as_str()),
        ("block-storage", "cinder")
    );
    assert_eq!(
        (v3.service_type.as_str(), v3.service_name.as_str()),
        ("volumev3", "cinderv3")
    );
    assert_eq!(bs.public_url, "https://cinder.example.org/v3");
    assert_eq!(v3.internal_url, "http://cinder-api.os.svc:8776/v3");
    assert_eq!(bs.user, "cinder");
}

#[test]
fn every_rendered_option_is_one_cinder_defines() {
    let t = template();
    let i = inputs(&t);
    // Backend sections take the options cinder registers under [backend_defaults].
    let dynamic: Vec<(&str, &str)> = i
        .backends
        .iter()
        .map(|b| (b.name.as_str(), "backend_defaults"))
        .collect();
    crate::ini::assert_options_known(
        controlplane_api::ServiceName::Cinder,
        &cinder_conf(&i),
        &dynamic,
    );
    // The TLS edits (client sections' `cafile`, the Glance client's CA) are Cinder options too.
    let with_ca = with_glance_ca(
        &crate::tls::set_client_ca(&cinder_conf(&i), &crate::tls::CLIENT_SECTIONS, "/x/ca.crt"),
        "/x/ca.crt",
    );
    assert!(
        with_ca.contains("glance_ca_certificates_file = /x/ca.crt"),
        "{with_ca}"
    );
    crate::ini::assert_options_known(controlplane_api::ServiceName::Cinder, &with_ca, &dynamic);
}

#[test]
fn pod_paths_are_where_the_image_and_the_pod_have_them() {
    // pip installs cinder's data_files under the venv's prefix, /opt/openstack in
    // deploy/images; /etc/cinder holds nothing of them in the image.
    let p = Paths::pod();
    assert_eq!(
        p.api_paste_config,
        "/opt/openstack/etc/cinder/api-paste.ini"
    );
    assert_eq!(
        p.resource_filters,
        "/opt/openstack/etc/cinder/resource_filters.json"
    );
    let t = ServiceTemplate::default();
    let mut i = inputs(&t);
    i.paths = p.clone();
    let conf = Ini::parse(&cinder_conf(&i));
    assert_eq!(
        conf.get("DEFAULT", "api_paste_config"),
        Some(p.api_paste_config.as_str())
    );
    // state_path and the lock path below it lie in the writable emptyDir every pod mounts
    // (tooz's file coordination failed with "Permission denied: '/var/lib/cinder'").
    let (vol, mount) = state_volume();
    assert!(vol.empty_dir.is_some());
    assert_ne!(mount.read_only, Some(true));
    let state = conf.get("DEFAULT", "state_path").expect("state_path");
    assert_eq!(state, mount.mount_path);
    let lock = conf
        .get("oslo_concurrency", "lock_path")
        .expect("lock_path");
    assert!(lock.starts_with(&format!("{state}/")), "{lock}");
}

#[test]
fn every_process_registers_under_the_stable_host() {
    // The API and scheduler records would otherwise carry the pod name, and every rollout
    // would leave "down" services behind.
    let t = ServiceTemplate::default();
    let i = inputs(&t);
    let conf = Ini::parse(&cinder_conf(&i));
    assert_eq!(conf.get("DEFAULT", "host"), Some(i.volume_host.as_str()));
}
