//! Bad specs: each one is refused by a CEL rule (as the apiserver would at admission) or by
//! the pure validation the controllers run first (InvalidSpec naming the field).

use api::validation::cel_errors_value;
use controlplane_api::validation::Validate;
use controlplane_api::{Keystone, OpenStackCluster, OpenStackExternalService, Placement};
use kube::CustomResourceExt;
use serde_json::{Value, json};

fn schema<K: CustomResourceExt>() -> Value {
    let crd = K::crd();
    serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .expect("schema"),
    )
    .expect("json")
}

fn cluster(spec: Value) -> Value {
    json!({"apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "OpenStackCluster",
           "metadata": {"name": "c", "namespace": "n"}, "spec": spec})
}

fn keystone(spec: Value) -> Value {
    json!({"apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "Keystone",
           "metadata": {"name": "k", "namespace": "n"}, "spec": spec})
}

fn cel_rejects<K: CustomResourceExt>(obj: Value, needle: &str) {
    let errs = cel_errors_value(&schema::<K>(), &obj);
    assert!(
        errs.iter().any(|e| e.message.contains(needle)),
        "expected a CEL error mentioning {needle:?}, got {errs:?}"
    );
}

fn cel_accepts<K: CustomResourceExt>(obj: Value) {
    let errs = cel_errors_value(&schema::<K>(), &obj);
    assert!(errs.is_empty(), "unexpected CEL errors {errs:?}");
}

fn paths<S: Validate>(spec: &S) -> Vec<String> {
    spec.validate().into_iter().map(|e| e.path).collect()
}

#[test]
fn cluster_rules() {
    let ok = json!({"services": ["keystone"], "externalServices": {"database": {"name": "db"}},
                    "publicHostnamePattern": "{service}.cloud.example.org"});
    cel_accepts::<OpenStackCluster>(cluster(ok.clone()));
    let mut dup = ok.clone();
    dup["services"] = json!(["keystone", "keystone"]);
    cel_rejects::<OpenStackCluster>(cluster(dup), "must not repeat");
    let mut pat = ok.clone();
    pat["publicHostnamePattern"] = json!("keystone.example.org");
    cel_rejects::<OpenStackCluster>(cluster(pat.clone()), "{service}");

    let spec: controlplane_api::OpenStackClusterSpec = serde_json::from_value(pat).expect("parses");
    assert_eq!(paths(&spec), vec!["spec.publicHostnamePattern"]);
    let mut t = ok.clone();
    t["templates"] = json!({"glance": {"replicas": 1}, "keystone": {"replicas": -1,
        "configOverrides": {"database": {"connection": "sqlite://"}}}});
    let spec: controlplane_api::OpenStackClusterSpec = serde_json::from_value(t).expect("parses");
    assert_eq!(
        paths(&spec),
        vec![
            "spec.templates.glance",
            "spec.templates.keystone.replicas",
            "spec.templates.keystone.configOverrides.database.connection"
        ]
    );
    // Placement's operator-owned options are refused too; its other options pass.
    let mut pl = ok.clone();
    pl["services"] = json!(["keystone", "placement"]);
    pl["templates"] = json!({"placement": {"configOverrides": {
        "api": {"auth_strategy": "noauth2"},
        "placement": {"max_allocation_candidates": "500"},
        "keystone_authtoken": {"memcached_servers": "evil:11211"}}}});
    let spec: controlplane_api::OpenStackClusterSpec = serde_json::from_value(pl).expect("parses");
    assert_eq!(
        paths(&spec),
        vec![
            "spec.templates.placement.configOverrides.api.auth_strategy",
            "spec.templates.placement.configOverrides.keystone_authtoken.memcached_servers"
        ]
    );
    // Glance's too: the web-download allow-list and the stores are the operator's.
    let mut gl = ok.clone();
    gl["services"] = json!(["keystone", "glance"]);
    gl["templates"] = json!({"glance": {"configOverrides": {
        "DEFAULT": {"image_size_cap": "1073741824"},
        "import_filtering_opts": {"allowed_hosts": "[]"},
        "s3": {"s3_store_secret_key": "x"}}}});
    let spec: controlplane_api::OpenStackClusterSpec = serde_json::from_value(gl).expect("parses");
    assert_eq!(
        paths(&spec),
        vec![
            "spec.templates.glance.configOverrides.import_filtering_opts.allowed_hosts",
            "spec.templates.glance.configOverrides.s3.s3_store_secret_key"
        ]
    );
    // Neutron's too (the OVN wiring, the core plugin, the service user); its others pass.
    let mut ne = ok.clone();
    ne["services"] = json!(["keystone", "neutron"]);
    ne["externalServices"]["ovn"] = json!({"name": "ovn"});
    ne["templates"] = json!({"neutron": {"configOverrides": {
        "ovn": {"ovn_nb_connection": "tcp:evil:6641", "ovn_l3_scheduler": "chance"},
        "DEFAULT": {"core_plugin": "openvswitch", "debug": "true"},
        "ml2_type_geneve": {"vni_ranges": "1:1000"}}}});
    let spec: controlplane_api::OpenStackClusterSpec = serde_json::from_value(ne).expect("parses");
    assert_eq!(
        paths(&spec),
        vec![
            "spec.templates.neutron.configOverrides.DEFAULT.core_plugin",
            "spec.templates.neutron.configOverrides.ovn.ovn_nb_connection"
        ]
    );
    // Every override is checked against the options the service really defines (generated
    // from the installed services): unknown sections, unknown options and wrong types are
    // refused with the key named; real options of the right type pass.
    // Nova needs the cluster's Placement and, like Cinder, a messaging service; Cinder needs
    // backends, each exactly one kind.
    let mut nc = ok.clone();
    nc["services"] = json!(["keystone", "nova", "cinder"]);
    nc["cinderBackends"] = json!([{"name": "b", "rbd": {"pool": "p", "user": "u", "cephConf": "x",
        "keyringSecret": {"name": "k", "key": "keyring"}, "secretUuid": "u"}, "nfs": {"shares": ["h:/e"]}}]);
    let spec: controlplane_api::OpenStackClusterSpec = serde_json::from_value(nc).expect("parses");
    assert_eq!(
        paths(&spec),
        vec![
            "spec.services",
            "spec.externalServices.messaging",
            "spec.externalServices.messaging",
            "spec.cinderBackends[0]",
        ]
    );
    let mut ov = ok.clone();
    ov["services"] = json!(["keystone", "placement", "nova", "cinder"]);
    ov["externalServices"]["messaging"] = json!({"name": "mq"});
    ov["cinderBackends"] = json!([{"name": "ceph", "nfs": {"shares": ["nfs:/export"]}}]);
    ov["templates"] = json!({
        "nova": {"configOverrides": {
            "DEFAULT": {"debug": "true", "cpu_allocation_ratio": "4.0"},
            "scheduler": {"discover_hosts_in_cells_interval": "often"},
            "schedular": {"workers": "2"}}},
        "cinder": {"configOverrides": {"DEFAULT": {"osapi_volume_workers": "2",
                                                   "volume_clear": "shred-it"}}},
        "keystone": {"configOverrides": {"token": {"expiraton": "3600"}}}});
    let spec: controlplane_api::OpenStackClusterSpec = serde_json::from_value(ov).expect("parses");
    let errs = spec.validate();
    let got: Vec<(&str, &str)> = errs
        .iter()
        .map(|e| (e.path.as_str(), e.message.as_str()))
        .collect();
    assert_eq!(
        got.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
        vec![
            "spec.templates.cinder.configOverrides.DEFAULT.volume_clear",
            "spec.templates.keystone.configOverrides.token.expiraton",
            "spec.templates.nova.configOverrides.schedular.workers",
            "spec.templates.nova.configOverrides.scheduler.discover_hosts_in_cells_interval",
        ],
        "{errs:?}"
    );
    assert!(got[0].1.contains("not one of none, zero"), "{}", got[0].1);
    assert!(
        got[1].1.contains("did you mean expiration?"),
        "{}",
        got[1].1
    );
    assert!(
        got[2].1.contains("did you mean [scheduler]?"),
        "{}",
        got[2].1
    );
    assert!(
        got[3].1.contains("\"often\" is not an integer"),
        "{}",
        got[3].1
    );
    let mut r = ok;
    r["release"] = json!("2023.1");
    let spec: controlplane_api::OpenStackClusterSpec = serde_json::from_value(r).expect("parses");
    assert_eq!(paths(&spec), vec!["spec.release"]);
}

#[test]
fn keystone_rules() {
    let ok = json!({"database": {"service": {"name": "db"}}});
    cel_accepts::<Keystone>(keystone(ok.clone()));
    let mut t = ok.clone();
    t["tokens"] = json!({"expirationSeconds": 86400, "allowExpiredWindowSeconds": 172800,
                         "fernetRotationIntervalSeconds": 60});
    cel_rejects::<Keystone>(keystone(t.clone()), "rotate less often");
    let spec: controlplane_api::KeystoneSpec = serde_json::from_value(t).expect("parses");
    assert_eq!(paths(&spec), vec!["spec.tokens"]);
    // Credential keys: 0 (on request only) or at least an hour between rotations.
    for good in [0, 3600, 2_592_000] {
        let mut c = ok.clone();
        c["credentialKeys"] = json!({"rotationIntervalSeconds": good});
        cel_accepts::<Keystone>(keystone(c.clone()));
        let spec: controlplane_api::KeystoneSpec = serde_json::from_value(c).expect("parses");
        assert!(paths(&spec).is_empty(), "{good}");
    }
    let mut c = ok.clone();
    c["credentialKeys"] = json!({"rotationIntervalSeconds": 60});
    cel_rejects::<Keystone>(
        keystone(c.clone()),
        "credentialKeys.rotationIntervalSeconds",
    );
    let spec: controlplane_api::KeystoneSpec = serde_json::from_value(c).expect("parses");
    assert_eq!(
        paths(&spec),
        vec!["spec.credentialKeys.rotationIntervalSeconds"]
    );
    let defaulted: controlplane_api::KeystoneSpec =
        serde_json::from_value(ok.clone()).expect("parses");
    assert_eq!(
        defaulted.credential_keys.interval(),
        Some(std::time::Duration::from_secs(30 * 86_400))
    );
    let mut u = ok;
    u["publicEndpoint"] = json!("keystone.example.org");
    cel_rejects::<Keystone>(keystone(u.clone()), "publicEndpoint");
    let spec: controlplane_api::KeystoneSpec = serde_json::from_value(u).expect("parses");
    assert_eq!(paths(&spec), vec!["spec.publicEndpoint"]);
}

#[test]
fn external_service_rules() {
    let parse = |v: Value| -> controlplane_api::OpenStackExternalServiceSpec {
        serde_json::from_value(v).expect("parses")
    };
    let ok = parse(json!({"type": "database", "endpoints": ["127.0.0.1:13306"],
                          "credentials": {"secretName": "db-admin"}}));
    assert!(ok.validate().is_empty());
    assert_eq!(
        ok.credentials.as_ref().map(|c| c.password_key.as_str()),
        Some("password")
    );
    let bad = parse(json!({"type": "database", "endpoints": ["127.0.0.1"]}));
    assert_eq!(paths(&bad), vec!["spec.endpoints[0]", "spec.credentials"]);
    let cache = parse(json!({"type": "cache", "endpoints": ["mc:99999"]}));
    assert_eq!(paths(&cache), vec!["spec.endpoints[0]"]);
    // A TLS block without a CA does not even parse: the schema requires caSecret.
    assert!(
        serde_json::from_value::<controlplane_api::OpenStackExternalServiceSpec>(json!({
            "type": "cache", "endpoints": ["mc:11211"], "tls": {"verify": "Full"}}))
        .is_err()
    );
    let crd = serde_json::to_string(&OpenStackExternalService::crd()).expect("json");
    assert!(
        crd.contains(r#""required":["caSecret"]"#),
        "caSecret is required in the schema"
    );
}

#[test]
fn placement_rules() {
    let obj = |spec: Value| {
        json!({"apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "Placement",
               "metadata": {"name": "p", "namespace": "n"}, "spec": spec})
    };
    let ok = json!({"database": {"service": {"name": "db"}}, "keystone": {"name": "ks"},
                    "publicEndpoint": "https://placement.cloud.example.org"});
    cel_accepts::<Placement>(obj(ok.clone()));
    let mut bad = ok.clone();
    bad["publicEndpoint"] = json!("placement.cloud.example.org");
    cel_rejects::<Placement>(obj(bad.clone()), "publicEndpoint must be an absolute");

    let spec =
        |v: Value| -> controlplane_api::PlacementSpec { serde_json::from_value(v).expect("spec") };
    let good = spec(ok.clone());
    assert!(paths(&good).is_empty(), "{:?}", good.validate());
    assert_eq!(good.database.database_name_or("placement"), "placement");
    assert_eq!(paths(&spec(bad)), ["spec.publicEndpoint"]);
    let mut owned = ok.clone();
    owned["configOverrides"] = json!({"placement_database": {"connection": "sqlite://"},
                                      "keystone_authtoken": {"password": "x"},
                                      "placement": {"max_allocation_candidates": "100"}});
    let errs = spec(owned).validate();
    assert_eq!(
        errs.iter().map(|e| e.path.as_str()).collect::<Vec<_>>(),
        [
            "spec.configOverrides.keystone_authtoken.password",
            "spec.configOverrides.placement_database.connection"
        ],
        "{errs:?}"
    );
    assert!(errs[0].message.contains("set by the operator"), "{errs:?}");
    let mut refs = ok.clone();
    refs["keystone"]["name"] = json!("");
    refs["database"]["service"]["name"] = json!("");
    refs["release"] = json!("1999.1");
    assert_eq!(
        paths(&spec(refs)),
        [
            "spec.release",
            "spec.database.service.name",
            "spec.keystone.name"
        ]
    );
}

#[test]
fn a_cluster_service_needs_the_cluster_keystone() {
    let spec: controlplane_api::OpenStackClusterSpec = serde_json::from_value(
        json!({"services": ["placement"], "externalServices": {"database": {"name": "db"}}}),
    )
    .expect("spec");
    let errs = spec.validate();
    assert_eq!(paths(&spec), ["spec.services"], "{errs:?}");
    assert!(
        errs[0]
            .message
            .contains("placement registers in the cluster's Keystone")
    );
    let ok: controlplane_api::OpenStackClusterSpec = serde_json::from_value(
        json!({"services": ["keystone", "placement"], "externalServices": {"database": {"name": "db"}}}),
    )
    .expect("spec");
    assert!(paths(&ok).is_empty());
}

fn glance_spec(extra: Value) -> controlplane_api::GlanceSpec {
    let mut spec = json!({"database": {"service": {"name": "db"}}, "keystone": {"name": "ks"},
                          "storage": {"file": {}}});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(spec).expect("glance spec")
}

#[test]
fn glance_refuses_what_cannot_be_rendered_naming_the_field() {
    assert!(paths(&glance_spec(json!({}))).is_empty());
    assert_eq!(
        paths(&glance_spec(json!({"storage": {}}))),
        ["spec.storage"]
    );
    assert_eq!(
        paths(&glance_spec(
            json!({"storage": {"file": {}, "defaultStore": "s3"}})
        )),
        ["spec.storage.defaultStore"]
    );
    assert_eq!(
        paths(&glance_spec(json!({"storage": {"file": {"size": "lots"}}}))),
        ["spec.storage.file.size"]
    );
    assert_eq!(
        paths(&glance_spec(json!({"webDownload": {"allowedHosts": []}}))),
        ["spec.webDownload.allowedHosts"]
    );
    assert_eq!(
        paths(&glance_spec(
            json!({"webDownload": {"allowedHosts": ["a.example,b.example"], "allowedPorts": [0]}})
        )),
        [
            "spec.webDownload.allowedHosts[0]",
            "spec.webDownload.allowedPorts[0]"
        ]
    );
    // Overrides are checked against Glance's option schema and its owned options.
    assert_eq!(
        paths(&glance_spec(
            json!({"configOverrides": {"DEFAULT": {"no_such_option": "1"}}})
        )),
        ["spec.configOverrides.DEFAULT.no_such_option"]
    );
    assert_eq!(
        paths(&glance_spec(
            json!({"configOverrides": {"import_filtering_opts": {"allowed_hosts": "[]"}}})
        )),
        ["spec.configOverrides.import_filtering_opts.allowed_hosts"]
    );
    assert!(
        paths(&glance_spec(
            json!({"configOverrides": {"DEFAULT": {"image_size_cap": "1000"}}})
        ))
        .is_empty()
    );
    let mut g = glance_spec(json!({}));
    g.storage.file = None;
    cel_rejects::<controlplane_api::Glance>(
        json!({"apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "Glance",
               "metadata": {"name": "g", "namespace": "n"}, "spec": g}),
        "file or an s3 store",
    );
}

fn neutron_spec(extra: Value) -> controlplane_api::NeutronSpec {
    let mut spec = json!({"database": {"service": {"name": "db"}}, "keystone": {"name": "ks"},
                          "ovn": {"name": "ovn"}});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(spec).expect("neutron spec")
}

#[test]
fn neutron_refuses_bad_ranges_refs_and_overrides_naming_the_field() {
    assert!(paths(&neutron_spec(json!({"nova": {"name": "nova"}}))).is_empty());
    assert_eq!(
        paths(&neutron_spec(json!({"ovn": {"name": ""}}))),
        ["spec.ovn.name"]
    );
    assert_eq!(
        paths(&neutron_spec(
            json!({"networks": {"geneveVniRanges": ["9:1"],
            "vlanRanges": ["physnet1:1:5000"], "flatNetworks": ["a,b"]}})
        )),
        [
            "spec.networks.geneveVniRanges[0]",
            "spec.networks.vlanRanges[0]",
            "spec.networks.flatNetworks[0]"
        ]
    );
    assert_eq!(
        paths(&neutron_spec(
            json!({"configOverrides": {"ovn": {"ovn_nb_connection": "tcp:x:1"}}})
        )),
        ["spec.configOverrides.ovn.ovn_nb_connection"]
    );
    assert_eq!(
        paths(&neutron_spec(
            json!({"configOverrides": {"DEFAULT": {"max_allowed_address_pair": "many"}}})
        )),
        ["spec.configOverrides.DEFAULT.max_allowed_address_pair"]
    );
    assert!(
        paths(&neutron_spec(
            json!({"configOverrides": {"ml2_type_geneve": {"vni_ranges": "1:4000"}}})
        ))
        .is_empty()
    );
}

#[test]
fn horizon_overrides_are_django_settings_not_owned_by_the_operator() {
    let h = |overrides: Value| -> controlplane_api::HorizonSpec {
        serde_json::from_value(json!({"keystone": {"name": "ks"}, "configOverrides": overrides}))
            .expect("horizon spec")
    };
    assert!(
        paths(&h(json!({"local_settings": {"SESSION_TIMEOUT": "7200",
        "OPENSTACK_NEUTRON_NETWORK": "{\"enable_router\": false}"}})))
        .is_empty()
    );
    assert_eq!(
        paths(&h(json!({"DEFAULT": {"debug": "true"}}))),
        ["spec.configOverrides.DEFAULT"]
    );
    assert_eq!(
        paths(&h(json!({"local_settings": {"SECRET_KEY": "x"}}))),
        ["spec.configOverrides.local_settings.SECRET_KEY"]
    );
    assert_eq!(
        paths(&h(json!({"local_settings": {"session_timeout": "1"}}))),
        ["spec.configOverrides.local_settings.session_timeout"]
    );
    assert_eq!(
        paths(&h(
            json!({"local_settings": {"OPENSTACK_NEUTRON_NETWORK": "{broken"}})
        )),
        ["spec.configOverrides.local_settings.OPENSTACK_NEUTRON_NETWORK"]
    );
}

#[test]
fn a_cluster_with_neutron_needs_ovn() {
    let c: controlplane_api::OpenStackClusterSpec = serde_json::from_value(json!({
        "services": ["keystone", "neutron", "glance", "horizon"],
        "externalServices": {"database": {"name": "db"}}}))
    .expect("cluster spec");
    assert_eq!(paths(&c), ["spec.externalServices.ovn"]);
}
