use super::*;
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, PodCondition, PodSpec, PodStatus, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn pod(name: &str, ip: &str, ready: bool, app: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            labels: Some([("app".to_string(), app.to_string())].into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                ports: Some(vec![ContainerPort {
                    name: Some("http".into()),
                    container_port: 8080,
                    ..Default::default()
                }]),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: Some(PodStatus {
            pod_ip: Some(ip.into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

fn svc(ports: Vec<ServicePort>) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("ns".into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            selector: Some([("app".to_string(), "web".to_string())].into()),
            ports: Some(ports),
            ..Default::default()
        }),
        status: None,
    }
}

#[test]
fn endpoints_are_the_ready_selected_pods_at_their_target_ports() {
    let pods = vec![
        pod("a", "10.244.0.2", true, "web"),
        pod("b", "10.244.0.3", false, "web"),
        pod("c", "10.244.0.4", true, "other"),
    ];
    let views = pod_views(&pods);
    let s = svc(vec![
        ServicePort {
            port: 80,
            target_port: Some(IntOrString::String("http".into())),
            ..Default::default()
        },
        ServicePort {
            port: 9000,
            target_port: Some(IntOrString::Int(9001)),
            ..Default::default()
        },
        ServicePort {
            port: 5353,
            protocol: Some("UDP".into()),
            ..Default::default()
        },
        ServicePort {
            port: 7000,
            ..Default::default()
        },
    ]);
    let b = backends(&s, &views);
    assert_eq!(
        b[&80],
        vec!["10.244.0.2:8080".parse::<SocketAddr>().unwrap()]
    );
    assert_eq!(
        b[&9000],
        vec!["10.244.0.2:9001".parse::<SocketAddr>().unwrap()]
    );
    assert_eq!(
        b[&7000],
        vec!["10.244.0.2:7000".parse::<SocketAddr>().unwrap()]
    );
    assert!(!b.contains_key(&5353), "UDP is not forwarded");
}

#[test]
fn service_addresses_are_stable_and_distinct() {
    let mut v = Vips::new(Ipv4Addr::new(10, 245, 0, 0), 3);
    let a = v.get("ns", "a").unwrap();
    let b = v.get("ns", "b").unwrap();
    assert_eq!(a, Ipv4Addr::new(10, 245, 0, 1));
    assert_eq!(b, Ipv4Addr::new(10, 245, 0, 2));
    assert_eq!(v.get("ns", "a"), Some(a));
    assert_eq!(
        v.get("other", "c"),
        None,
        "range of 3 used up (.0 is not handed out)"
    );
}

#[test]
fn hosts_files_name_services_as_cluster_dns_would() {
    let svcs = vec![
        HostEntry {
            ip: Ipv4Addr::new(10, 245, 0, 1),
            namespace: "ns".into(),
            name: "keystone".into(),
        },
        HostEntry {
            ip: Ipv4Addr::new(10, 245, 0, 2),
            namespace: "other".into(),
            name: "db".into(),
        },
    ];
    let h = hosts_file(
        "ns",
        "web-1",
        Some("10.244.0.9"),
        &svcs,
        &["10.244.0.1 ext".into()],
    );
    assert!(h.contains("10.244.0.9\tweb-1\n"));
    assert!(h.contains(
        "10.245.0.1\tkeystone.ns.svc.cluster.local keystone.ns.svc keystone.ns keystone\n"
    ));
    // Another namespace's Service: qualified names only.
    assert!(h.contains("10.245.0.2\tdb.other.svc.cluster.local db.other.svc db.other\n"));
    assert!(h.ends_with("10.244.0.1 ext\n"));
}

#[test]
fn relay_items_name_one_port_or_a_range_on_loopback_or_an_address() {
    let a = |s: &str| s.parse::<SocketAddr>().unwrap();
    assert_eq!(relay_targets("13307").unwrap(), [a("127.0.0.1:13307")]);
    assert_eq!(
        relay_targets("10.244.0.1:16789").unwrap(),
        [a("10.244.0.1:16789")]
    );
    assert_eq!(
        relay_targets("10.244.0.1:16800-16802").unwrap(),
        [
            a("10.244.0.1:16800"),
            a("10.244.0.1:16801"),
            a("10.244.0.1:16802")
        ]
    );
    assert_eq!(relay_targets(" 5-5").unwrap(), [a("127.0.0.1:5")]);
    for (bad, says) in [
        ("", "is not a port"),
        ("0", "is not a port"),
        ("70000", "is not a port"),
        ("db:3306", "address \"db\""),
        ("16900-16800", "is empty"),
        ("1-x", "\"x\" is not a port"),
    ] {
        let e = relay_targets(bad).unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
    }
}
