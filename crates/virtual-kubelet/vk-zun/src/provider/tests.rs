use super::*;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use openstack::container::{ZunContainerCreate, status as zs};
use openstack::fake::FakeZun;
use serde_json::json;

#[derive(Default)]
struct NoObjects {
    config_maps: BTreeMap<String, ConfigMap>,
    /// Custom objects by (plural, name).
    custom: Mutex<BTreeMap<(String, String), serde_json::Value>>,
}

#[async_trait]
impl Objects for NoObjects {
    async fn config_map(&self, _ns: &str, name: &str) -> Result<Option<ConfigMap>, String> {
        Ok(self.config_maps.get(name).cloned())
    }
    async fn secret(&self, _ns: &str, _name: &str) -> Result<Option<Secret>, String> {
        Ok(None)
    }
    async fn custom_object(
        &self,
        kind: &ApiResource,
        _ns: &str,
        name: &str,
    ) -> Result<Option<serde_json::Value>, String> {
        let c = self.custom.lock().unwrap();
        Ok(c.get(&(kind.plural.clone(), name.to_string())).cloned())
    }
}

/// A provider without exit checks (their GETs are counted in their own tests).
fn provider(z: &FakeZun) -> ZunProvider {
    ZunProvider::new(
        Arc::new(z.clone()),
        Config {
            node_name: "vk".into(),
            ..Default::default()
        },
        Some("project".into()),
        UnlimitedCapacity::default(),
    )
    .with_exit_check(None)
}

fn pod(name: &str, uid: &str, spec: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": uid},
        "spec": spec,
        "status": {"phase": "Pending"}
    }))
    .unwrap()
}

fn seed_pod() -> Pod {
    pod(
        "myapp-pod",
        "uid-1",
        json!({"nodeName": "vk", "containers": [{"name": "myapp-container", "image": "busybox",
            "command": ["sh", "-c", "echo Hello Kubernetes! && sleep 3600"]}]}),
    )
}

/// One sync; statuses are stored back on the pods as the runtime does.
async fn sync(p: &ZunProvider, pods: &mut [Pod], objects: &dyn Objects) -> Vec<PodUpdate> {
    let u = p.sync(pods, objects, true).await.unwrap();
    for up in &u {
        if let Some(s) = &up.status
            && let Some(pod) = pods
                .iter_mut()
                .find(|x| x.metadata.uid.as_deref() == Some(&up.uid))
        {
            pod.status = Some(s.clone());
        }
    }
    u
}

#[tokio::test]
async fn seed_pod_runs_with_one_list_per_pass() {
    let z = FakeZun::new();
    let p = provider(&z);
    let mut pods = vec![seed_pod()];
    let o = NoObjects::default();
    let u = sync(&p, &mut pods, &o).await;
    assert_eq!(z.calls("create_container"), 1);
    assert_eq!(u[0].events[0].reason, "Created");
    let made = &z.containers()[0];
    assert_eq!(
        made.command.as_ref().unwrap()[1],
        "echo Hello Kubernetes! && sleep 3600"
    );
    let u = sync(&p, &mut pods, &o).await;
    let s = u[0].status.as_ref().unwrap();
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert!(s.pod_ip.is_some());
    for _ in 0..3 {
        sync(&p, &mut pods, &o).await;
    }
    assert_eq!(z.calls("list_containers"), 5, "one list per pass");
    assert_eq!(z.calls("get_container"), 0, "never a GET per pod");
    assert_eq!(z.calls("create_container"), 1);
}

#[tokio::test]
async fn a_stop_the_list_shows_without_exit_code_costs_one_get() {
    let z = FakeZun::new();
    let p = provider(&z);
    let mut pods = vec![seed_pod()];
    if let Some(spec) = pods[0].spec.as_mut() {
        spec.restart_policy = Some("Never".into());
    }
    let o = NoObjects::default();
    sync(&p, &mut pods, &o).await;
    sync(&p, &mut pods, &o).await;
    let id = z.containers()[0].uuid.clone();
    z.exit(&id, 3);
    // zun-api's list after its periodic sync: Stopped, detail still `Created`.
    z.stale_list_detail(&id, "Created");
    let u = sync(&p, &mut pods, &o).await;
    let s = u[0].status.as_ref().unwrap();
    let t = s.container_statuses.as_ref().unwrap()[0]
        .state
        .as_ref()
        .unwrap()
        .terminated
        .clone()
        .unwrap();
    assert_eq!(t.exit_code, 3, "the exit code comes from the GET");
    assert_eq!(t.reason.as_deref(), Some("Error"));
    for _ in 0..3 {
        sync(&p, &mut pods, &o).await;
    }
    assert_eq!(
        z.calls("get_container"),
        1,
        "one GET for the stop, not one per pass"
    );
}

#[tokio::test]
async fn unsupported_field_fails_the_pod_without_touching_zun() {
    let z = FakeZun::new();
    let p = provider(&z);
    let mut pods = vec![pod(
        "bad",
        "uid-2",
        json!({"nodeName": "vk", "hostNetwork": true, "containers": [{"name": "c", "image": "busybox"}]}),
    )];
    let o = NoObjects::default();
    let u = sync(&p, &mut pods, &o).await;
    let s = u[0].status.as_ref().unwrap();
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    assert_eq!(s.reason.as_deref(), Some("ProviderFailed"));
    assert!(s.message.as_deref().unwrap().contains("spec.hostNetwork"));
    assert_eq!(u[0].events[0].reason, "ProviderFailed");
    let u = sync(&p, &mut pods, &o).await;
    assert!(u[0].events.is_empty(), "the Event is recorded once");
    assert_eq!(z.calls("create_container"), 0);
}

#[tokio::test]
async fn missing_configmap_waits_and_is_retried() {
    let z = FakeZun::new();
    let p = provider(&z);
    let mut pods = vec![pod(
        "cfg",
        "uid-3",
        json!({"nodeName": "vk", "containers": [{"name": "c", "image": "busybox",
            "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "later", "key": "k"}}}]}]}),
    )];
    let mut o = NoObjects::default();
    let u = sync(&p, &mut pods, &o).await;
    let cs = &u[0]
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0];
    assert_eq!(
        cs.state
            .as_ref()
            .unwrap()
            .waiting
            .as_ref()
            .unwrap()
            .reason
            .as_deref(),
        Some("CreateContainerConfigError")
    );
    assert_eq!(z.calls("create_container"), 0);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "later"}, "data": {"k": "v"}})).unwrap();
    o.config_maps.insert("later".into(), cm);
    sync(&p, &mut pods, &o).await;
    assert_eq!(z.calls("create_container"), 1);
    assert_eq!(z.containers()[0].environment["X"], "v");
}

#[tokio::test]
async fn a_stop_zun_has_not_acted_on_yet_is_not_sent_again() {
    let z = FakeZun::new();
    let p = provider(&z);
    let mut pods = vec![seed_pod()];
    let o = NoObjects::default();
    sync(&p, &mut pods, &o).await;
    sync(&p, &mut pods, &o).await;
    z.defer_stops();
    pods[0].metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
    pods[0].metadata.deletion_grace_period_seconds = Some(5);
    for _ in 0..3 {
        sync(&p, &mut pods, &o).await;
    }
    assert_eq!(
        z.calls("stop_container"),
        1,
        "the container still lists as running"
    );
}

#[test]
fn a_stop_window_ends() {
    let mut stops = HashMap::new();
    let t0 = std::time::Instant::now();
    assert!(stop_due(&mut stops, "c1", t0));
    stops.insert("c1".to_string(), t0 + std::time::Duration::from_secs(35));
    assert!(!stop_due(
        &mut stops,
        "c1",
        t0 + std::time::Duration::from_secs(1)
    ));
    assert!(stop_due(&mut stops, "c2", t0));
    assert!(stop_due(
        &mut stops,
        "c1",
        t0 + std::time::Duration::from_secs(36)
    ));
    assert!(stops.is_empty(), "ended windows are forgotten");
}

#[tokio::test]
async fn graceful_deletion_stops_deletes_then_releases_the_pod() {
    let z = FakeZun::new();
    let p = provider(&z);
    let mut pods = vec![seed_pod()];
    let o = NoObjects::default();
    sync(&p, &mut pods, &o).await;
    sync(&p, &mut pods, &o).await;
    pods[0].metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
    pods[0].metadata.deletion_grace_period_seconds = Some(5);
    let u = sync(&p, &mut pods, &o).await;
    assert_eq!(z.calls("stop_container"), 1);
    assert!(!u[0].deleted);
    assert_eq!(u[0].events[0].reason, "Killing");
    let u = sync(&p, &mut pods, &o).await;
    assert_eq!(z.calls("delete_container"), 1);
    assert!(
        !u[0].deleted,
        "Zun deletes asynchronously: wait until a list confirms it"
    );
    assert!(z.containers().is_empty());
    let u = sync(&p, &mut pods, &o).await;
    assert!(u[0].deleted, "nothing left: the runtime may remove the pod");
    assert_eq!(z.calls("delete_container"), 1);
}

#[tokio::test]
async fn deleted_behind_our_back_fails_the_pod() {
    let z = FakeZun::new();
    let p = provider(&z);
    let mut pods = vec![seed_pod()];
    let o = NoObjects::default();
    sync(&p, &mut pods, &o).await;
    sync(&p, &mut pods, &o).await;
    let id = z.containers()[0].uuid.clone();
    z.remove(&id);
    let u = sync(&p, &mut pods, &o).await;
    let s = u[0].status.as_ref().unwrap();
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    assert!(s.message.as_deref().unwrap().contains(&id));
    assert_eq!(z.calls("create_container"), 1, "not silently re-created");
}

#[tokio::test]
async fn restart_adopts_and_cleans_only_our_orphans() {
    let z = FakeZun::new();
    // A create whose answer was lost before the pod status recorded it.
    let first = provider(&z);
    let mut pods = vec![seed_pod()];
    let o = NoObjects::default();
    first.sync(&pods, &o, true).await.unwrap();
    assert_eq!(z.calls("create_container"), 1);
    // A container of a pod that is gone, one of another node, one made by hand.
    let mk = |labels: BTreeMap<String, String>, name: &str| ZunContainerCreate {
        name: name.into(),
        image: "busybox".into(),
        labels,
        run: true,
        ..Default::default()
    };
    z.create_container(&mk(
        crate::labels::for_container("vk", "ns", "gone", "uid-gone", "c", Role::Main),
        "gone",
    ))
    .await
    .unwrap();
    z.create_container(&mk(
        crate::labels::for_container("other-node", "ns", "x", "uid-x", "c", Role::Main),
        "other",
    ))
    .await
    .unwrap();
    z.create_container(&mk(BTreeMap::new(), "by-hand"))
        .await
        .unwrap();
    let restarted = provider(&z);
    // Until the watch has listed everything, nothing is deleted.
    restarted.sync(&pods, &o, false).await.unwrap();
    assert_eq!(z.containers().len(), 4);
    sync(&restarted, &mut pods, &o).await;
    let names: Vec<String> = z.containers().into_iter().filter_map(|c| c.name).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    assert!(!names.iter().any(|n| n == "gone"));
    assert!(names.iter().any(|n| n == "other") && names.iter().any(|n| n == "by-hand"));
    assert_eq!(
        z.calls("create_container"),
        4,
        "the pod's container was adopted, not made again"
    );
    assert_eq!(
        pods[0].status.as_ref().unwrap().phase.as_deref(),
        Some("Running")
    );
}

#[tokio::test]
async fn exits_follow_the_restart_policy() {
    let z = FakeZun::new();
    let p = provider(&z);
    let mut pods = vec![pod(
        "job",
        "uid-j",
        json!({"nodeName": "vk", "restartPolicy": "OnFailure", "containers": [{"name": "c", "image": "busybox"}]}),
    )];
    let o = NoObjects::default();
    sync(&p, &mut pods, &o).await;
    sync(&p, &mut pods, &o).await;
    let id = z.containers()[0].uuid.clone();
    z.exit(&id, 3);
    let u = sync(&p, &mut pods, &o).await;
    let cs = &u[0]
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0];
    assert_eq!(cs.restart_count, 1);
    assert_eq!(z.calls("start_container"), 1);
    assert_eq!(z.containers()[0].status, zs::RUNNING);
    z.exit(&id, 0);
    let u = sync(&p, &mut pods, &o).await;
    let s = u[0].status.as_ref().unwrap();
    assert_eq!(s.phase.as_deref(), Some("Succeeded"));
    assert_eq!(z.calls("start_container"), 1);
}

#[tokio::test]
async fn capacity_comes_from_the_quota_minus_what_others_use() {
    let z = FakeZun::new();
    z.set_quota_limits(10, 4, 4096);
    let p = provider(&z);
    // Someone else's container in the project: 1 CPU, 1024 MiB.
    z.create_container(&ZunContainerCreate {
        name: "other".into(),
        image: "busybox".into(),
        cpu: Some(1.0),
        memory: Some(1024),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut pods = vec![seed_pod()];
    let o = NoObjects::default();
    sync(&p, &mut pods, &o).await;
    sync(&p, &mut pods, &o).await;
    let st = p.node_state().await;
    assert_eq!(st.capacity["cpu"].0, "4");
    assert_eq!(st.capacity["memory"].0, "4096Mi");
    assert_eq!(st.capacity["pods"].0, "10");
    assert_eq!(st.allocatable["cpu"].0, "3");
    assert_eq!(st.allocatable["memory"].0, "3072Mi");
    assert_eq!(st.allocatable["pods"].0, "9");
    assert_eq!(st.zone.as_deref(), Some("nova"));
    let ready = st.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(ready.status, "True");
    z.fail_next("get_quota", openstack::Error::transient("zun-api down"));
    let st = p.node_state().await;
    let ready = st.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(ready.status, "False");
    assert!(ready.message.contains("zun-api down"));
}

#[tokio::test]
async fn a_refused_create_backs_off() {
    let z = FakeZun::new();
    let p = provider(&z);
    let mut pods = vec![seed_pod()];
    let o = NoObjects::default();
    z.fail_next(
        "create_container",
        openstack::Error::transient("container create_container: HTTP 500"),
    );
    let u = sync(&p, &mut pods, &o).await;
    let cs = &u[0]
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0];
    let w = cs.state.as_ref().unwrap().waiting.as_ref().unwrap();
    assert_eq!(w.reason.as_deref(), Some("CreateContainerError"));
    assert!(w.message.as_deref().unwrap().contains("HTTP 500"));
    // Within the back-off the create is not repeated and the error stays shown.
    let u = sync(&p, &mut pods, &o).await;
    assert_eq!(z.calls("create_container"), 1);
    let cs = &u[0]
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0];
    assert_eq!(
        cs.state
            .as_ref()
            .unwrap()
            .waiting
            .as_ref()
            .unwrap()
            .reason
            .as_deref(),
        Some("CreateContainerError")
    );
}

#[tokio::test]
async fn project_network_waits_for_the_project_then_uses_its_network_id() {
    let z = FakeZun::new();
    let p = provider(&z);
    let mut pods = vec![pod(
        "on-tenant-net",
        "uid-pn",
        json!({"nodeName": "vk", "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "60"]}]}),
    )];
    pods[0].metadata.annotations = Some(BTreeMap::from([(
        crate::network::PROJECT_NETWORK_ANNOTATION.to_string(),
        "tenant/pods".to_string(),
    )]));
    let o = NoObjects::default();
    // No OpenstackProject yet: the container waits naming the annotation; nothing reaches Zun.
    let u = sync(&p, &mut pods, &o).await;
    let s = u[0].status.as_ref().unwrap();
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    let w = s.container_statuses.as_ref().unwrap()[0]
        .state
        .as_ref()
        .unwrap()
        .waiting
        .clone()
        .unwrap();
    assert_eq!(w.reason.as_deref(), Some("CreateContainerConfigError"));
    assert!(
        w.message
            .as_deref()
            .unwrap()
            .contains("virtual-kubelet.sunet.se/project-network"),
        "{w:?}"
    );
    assert_eq!(z.calls("create_container"), 0);
    // The project appears with its network created: the next pass creates on that network.
    o.custom.lock().unwrap().insert(
        ("openstackprojects".into(), "tenant".into()),
        json!({"apiVersion": "sunet.se/v1alpha1", "kind": "OpenstackProject",
               "metadata": {"name": "tenant", "namespace": "ns"},
               "spec": {"name": "tenant", "domain": "default", "networks": [{"name": "pods", "cidr": "10.9.0.0/24"}]},
               "status": {"phase": "Ready", "networks": [{"name": "pods", "networkId": "net-of-tenant"}]}}),
    );
    sync(&p, &mut pods, &o).await;
    assert_eq!(z.calls("create_container"), 1);
    let made = &z.containers()[0];
    assert!(
        made.addresses.contains_key("net-of-tenant"),
        "{:?}",
        made.addresses
    );
}

fn provider_with_ports(z: &FakeZun, ports: &openstack::port::FakePorts) -> ZunProvider {
    provider_with_neutron(z, ports, &openstack::fake::FakeCloud::new())
}

fn provider_with_neutron(
    z: &FakeZun,
    ports: &openstack::port::FakePorts,
    neutron: &openstack::fake::FakeCloud,
) -> ZunProvider {
    ports.add_network("pods-net", "net-id-1");
    ZunProvider::new(
        Arc::new(z.clone()),
        Config {
            node_name: "vk".into(),
            network: Some("pods-net".into()),
            ..Default::default()
        },
        Some("project".into()),
        UnlimitedCapacity::default(),
    )
    .with_ports(Arc::new(ports.clone()), Arc::new(neutron.clone()))
}

fn ip_pod() -> Pod {
    pod(
        "ip-pod",
        "uid-ip",
        json!({"nodeName": "vk", "containers": [{"name": "c", "image": "busybox",
            "resources": {"limits": {"memory": "64Mi"}},
            "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}}]}]}),
    )
}

#[tokio::test]
async fn the_pods_port_is_made_first_used_for_its_ip_and_deleted_with_it() {
    let z = FakeZun::new();
    let ports = openstack::port::FakePorts::new();
    let p = provider_with_ports(&z, &ports);
    let mut pods = vec![ip_pod()];
    let o = NoObjects::default();
    let u = sync(&p, &mut pods, &o).await;
    let made = ports.ports();
    assert_eq!(made.len(), 1);
    assert_eq!(made[0].name, "vk_vk_uid-ip");
    assert_eq!(
        made[0].network_id, "net-id-1",
        "the network's name resolved"
    );
    let ip = made[0].fixed_ips[0].clone();
    let c = &z.containers()[0];
    assert_eq!(c.environment["POD_IP"], ip);
    assert_eq!(c.environment["MEM"], "64");
    assert_eq!(
        u[0].status.as_ref().unwrap().pod_ip.as_deref(),
        Some(ip.as_str())
    );
    for _ in 0..3 {
        sync(&p, &mut pods, &o).await;
    }
    let creates = ports
        .calls()
        .iter()
        .filter(|c| c.starts_with("create_port"))
        .count();
    assert_eq!(creates, 1, "one port per pod");

    pods[0].metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
    pods[0].metadata.deletion_grace_period_seconds = Some(0);
    let mut released = false;
    for _ in 0..5 {
        let u = sync(&p, &mut pods, &o).await;
        if u[0].deleted {
            released = true;
            break;
        }
        assert_eq!(ports.ports().len(), 1, "the port outlives the containers");
    }
    assert!(released);
    assert!(ports.ports().is_empty(), "deleted with the pod");
    let deletes = ports
        .calls()
        .iter()
        .filter(|c| c.starts_with("delete_port"))
        .count();
    assert_eq!(deletes, 1, "deleted once");
}

#[tokio::test]
async fn after_a_crash_the_port_is_found_not_made_again_and_leaks_are_swept() {
    let z = FakeZun::new();
    let ports = openstack::port::FakePorts::new();
    // What a process that crashed after the port's create left: this pod's port, and the
    // port of a pod that was deleted meanwhile, and somebody else's port.
    ports.insert(openstack::port::Port {
        id: "mine".into(),
        name: pod_port::name("vk", "uid-ip"),
        network_id: "net-id-1".into(),
        project_id: "project".into(),
        fixed_ips: vec!["10.9.9.9".into()],
        ..Default::default()
    });
    ports.insert(openstack::port::Port {
        id: "leaked".into(),
        name: pod_port::name("vk", "uid-gone"),
        project_id: "project".into(),
        ..Default::default()
    });
    ports.insert(openstack::port::Port {
        id: "other-node".into(),
        name: pod_port::name("vk2", "uid-gone"),
        project_id: "project".into(),
        ..Default::default()
    });
    let p = provider_with_ports(&z, &ports);
    let mut pods = vec![ip_pod()];
    let o = NoObjects::default();
    sync(&p, &mut pods, &o).await;
    let left: Vec<String> = ports.ports().into_iter().map(|p| p.id).collect();
    assert_eq!(left, vec!["mine".to_string(), "other-node".to_string()]);
    assert_eq!(z.containers()[0].environment["POD_IP"], "10.9.9.9");
    assert!(
        !ports.calls().iter().any(|c| c.starts_with("create_port")),
        "found by name"
    );
}

#[tokio::test]
async fn a_port_that_cannot_be_made_waits_with_the_reason() {
    let z = FakeZun::new();
    let ports = openstack::port::FakePorts::new();
    ports.fail_next_creates(1);
    let p = provider_with_ports(&z, &ports);
    let mut pods = vec![ip_pod()];
    let o = NoObjects::default();
    let u = sync(&p, &mut pods, &o).await;
    assert_eq!(
        z.calls("create_container"),
        0,
        "no container without its port"
    );
    let st = u[0].status.as_ref().unwrap();
    let w = st.container_statuses.as_ref().unwrap()[0]
        .state
        .as_ref()
        .unwrap()
        .waiting
        .clone()
        .unwrap();
    assert_eq!(w.reason.as_deref(), Some("CreateContainerError"));
    assert!(
        w.message.as_deref().unwrap().contains("Neutron port"),
        "{w:?}"
    );
    assert_eq!(u[0].events[0].reason, "Failed");
}

/// A pod whose container declares port 80 (so it gets its own security group).
fn web_pod() -> Pod {
    pod(
        "web",
        "uid-web",
        json!({"nodeName": "vk", "containers": [{"name": "c", "image": "nginx",
            "ports": [{"containerPort": 80}]}]}),
    )
}

#[tokio::test]
async fn declared_ports_get_the_pods_own_security_group_on_its_port() {
    use openstack::Network as _;
    let z = FakeZun::new();
    let ports = openstack::port::FakePorts::new();
    let neutron = openstack::fake::FakeCloud::new();
    let p = provider_with_neutron(&z, &ports, &neutron);
    let mut pods = vec![web_pod()];
    let o = NoObjects::default();
    sync(&p, &mut pods, &o).await;
    let groups = |name: &str| {
        let neutron = neutron.clone();
        let name = name.to_string();
        async move {
            neutron
                .list_security_groups(&openstack::model::SecurityGroupFilter {
                    name: Some(name),
                    ..Default::default()
                })
                .await
                .unwrap()
        }
    };
    let g = groups("vk_vk_uid-web").await;
    assert_eq!(g.len(), 1);
    let mut ingress: Vec<_> = g[0]
        .rules
        .iter()
        .filter(|r| r.direction == "ingress")
        .map(|r| (r.ethertype.as_str(), r.port_range_min))
        .collect();
    ingress.sort();
    assert_eq!(ingress, vec![("IPv4", Some(80)), ("IPv6", Some(80))]);
    assert_eq!(ports.ports()[0].security_groups, vec![g[0].id.clone()]);
    pods[0].metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
    pods[0].metadata.deletion_grace_period_seconds = Some(0);
    for _ in 0..5 {
        if sync(&p, &mut pods, &o).await[0].deleted {
            break;
        }
    }
    assert!(ports.ports().is_empty());
    assert!(
        groups("vk_vk_uid-web").await.is_empty(),
        "deleted with the pod"
    );
}

#[tokio::test]
async fn release_deletes_the_nodes_containers_ports_and_groups_and_nothing_else() {
    use openstack::Network as _;
    let z = FakeZun::new();
    let ports = openstack::port::FakePorts::new();
    let neutron = openstack::fake::FakeCloud::new();
    let p = provider_with_neutron(&z, &ports, &neutron);
    let mut pods = vec![web_pod()];
    let o = NoObjects::default();
    sync(&p, &mut pods, &o).await;
    z.create_container(&ZunContainerCreate {
        name: "other".into(),
        image: "busybox".into(),
        labels: crate::labels::for_container("other-node", "ns", "x", "uid-x", "c", Role::Main),
        run: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let by_hand = neutron
        .create_security_group(&openstack::model::SecurityGroupCreate {
            name: "made-by-hand".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!((z.containers().len(), ports.ports().len()), (2, 1));
    let left = p.release(std::time::Duration::from_secs(10)).await.unwrap();
    assert_eq!(left, 0);
    let names: Vec<String> = z.containers().into_iter().filter_map(|c| c.name).collect();
    assert_eq!(
        names,
        vec!["other".to_string()],
        "only the node's containers go"
    );
    assert!(ports.ports().is_empty(), "the pod's port goes");
    let groups: Vec<(String, String)> = neutron
        .list_security_groups(&openstack::model::SecurityGroupFilter::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|g| g.name != "default")
        .map(|g| (g.name, g.id))
        .collect();
    assert_eq!(
        groups,
        vec![("made-by-hand".to_string(), by_hand.id)],
        "the pod's group goes, no other"
    );
}

fn tenant_provider(
    z: &FakeZun,
    ports: &openstack::port::FakePorts,
    neutron: &openstack::fake::FakeCloud,
) -> ZunProvider {
    ports.add_network("pods-net", "net-id-1");
    ports.add_network("db-net", "net-id-2");
    let spec: api::ZunTenantSpec = serde_json::from_value(json!({
        "credentials": {"secretRef": {"namespace": "vk", "name": "a"}},
        "networks": [{"name": "pods", "network": "pods-net"},
                     {"name": "db", "network": "db-net", "securityGroups": ["db-clients"]}],
        "namespaces": ["ns"]
    }))
    .unwrap();
    ZunProvider::new(
        Arc::new(z.clone()),
        Config {
            node_name: "vk".into(),
            tenant: Some(crate::tenant::Tenant::from_spec("tenant-a", &spec)),
            ..Default::default()
        },
        Some("project".into()),
        UnlimitedCapacity::default(),
    )
    .with_ports(Arc::new(ports.clone()), Arc::new(neutron.clone()))
}

#[tokio::test]
async fn a_pod_of_an_unbound_namespace_fails_without_reaching_openstack() {
    let z = FakeZun::new();
    let ports = openstack::port::FakePorts::new();
    let neutron = openstack::fake::FakeCloud::new();
    let p = tenant_provider(&z, &ports, &neutron);
    let mut stray = seed_pod();
    stray.metadata.namespace = Some("team-b".into());
    let mut pods = vec![stray];
    let o = NoObjects::default();
    let u = sync(&p, &mut pods, &o).await;
    let s = u[0].status.as_ref().unwrap();
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    assert_eq!(s.reason.as_deref(), Some(crate::tenant::NOT_BOUND));
    let m = s.message.as_deref().unwrap();
    assert!(
        m.contains("\"team-b\"") && m.contains("ZunTenant \"tenant-a\""),
        "{m}"
    );
    assert_eq!(u[0].events[0].reason, crate::tenant::NOT_BOUND);
    sync(&p, &mut pods, &o).await;
    assert_eq!(z.calls("create_container"), 0, "never created in Zun");
    assert!(ports.ports().is_empty(), "no port made for it");
}

#[tokio::test]
async fn a_tenant_pod_gets_the_picked_network_and_its_security_groups() {
    let z = FakeZun::new();
    let ports = openstack::port::FakePorts::new();
    let neutron = openstack::fake::FakeCloud::new();
    let group = openstack::Network::create_security_group(
        &neutron,
        &openstack::model::SecurityGroupCreate {
            name: "db-clients".into(),
            project_id: Some("project".into()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let p = tenant_provider(&z, &ports, &neutron);
    let mut plain = seed_pod();
    let mut db = pod(
        "db-pod",
        "uid-db",
        json!({"nodeName": "vk", "containers": [{"name": "c", "image": "busybox"}]}),
    );
    db.metadata.annotations = Some(BTreeMap::from([(
        crate::network::NETWORK_ANNOTATION.to_string(),
        "db".to_string(),
    )]));
    let mut wrong = pod(
        "wrong",
        "uid-wrong",
        json!({"nodeName": "vk", "containers": [{"name": "c", "image": "busybox"}]}),
    );
    // A Neutron network name that exists but is not one of the tenant's names.
    wrong.metadata.annotations = Some(BTreeMap::from([(
        crate::network::NETWORK_ANNOTATION.to_string(),
        "db-net".to_string(),
    )]));
    plain.metadata.namespace = Some("ns".into());
    let mut pods = vec![plain, db, wrong];
    let o = NoObjects::default();
    let u = sync(&p, &mut pods, &o).await;
    let by_name = |n: &str| ports.ports().into_iter().find(|p| p.name.ends_with(n));
    let plain_port = by_name("_uid-1").expect("the plain pod's port");
    assert_eq!(plain_port.network_id, "net-id-1", "the default network");
    assert!(
        plain_port.security_groups.is_empty(),
        "the project's default"
    );
    let db_port = by_name("_uid-db").expect("the db pod's port");
    assert_eq!(db_port.network_id, "net-id-2", "picked by the annotation");
    assert_eq!(db_port.security_groups, vec![group.id.clone()]);
    assert!(by_name("_uid-wrong").is_none());
    let w = u.iter().find(|u| u.name == "wrong").unwrap();
    let s = w.status.as_ref().unwrap();
    assert_eq!(s.reason.as_deref(), Some("ProviderFailed"));
    assert!(
        s.message.as_deref().unwrap().contains("it has: pods, db"),
        "{s:?}"
    );
    assert_eq!(z.calls("create_container"), 2);
}

#[tokio::test]
async fn a_container_zun_put_in_error_is_made_again_after_the_back_off() {
    let z = FakeZun::new();
    let p = provider(&z);
    let mut pods = vec![seed_pod()];
    let o = NoObjects::default();
    sync(&p, &mut pods, &o).await;
    let first = z.containers()[0].uuid.clone();
    // What stock Zun does to the loser of the race for a new host's Docker network.
    z.fail(&first, "A network with UUID x already exists.");
    let u = sync(&p, &mut pods, &o).await;
    assert_eq!(z.calls("delete_container"), 1);
    assert!(
        u[0].events
            .iter()
            .any(|e| e.reason == "Failed" && e.message.contains("creating it again")),
        "{:?}",
        u[0].events
    );
    let s = u[0].status.as_ref().unwrap();
    assert_eq!(s.phase.as_deref(), Some("Pending"), "{s:?}");
    let cs = &s.container_statuses.as_ref().unwrap()[0];
    assert_eq!(cs.container_id, None);
    let w = cs.state.as_ref().unwrap().waiting.as_ref().unwrap();
    assert_eq!(w.reason.as_deref(), Some("CreateContainerError"));
    assert!(w.message.as_deref().unwrap().contains("already exists"));
    // Gone, but within the back-off: not made again yet, the error still shown.
    let u = sync(&p, &mut pods, &o).await;
    assert_eq!(z.calls("create_container"), 1);
    assert!(z.containers().is_empty());
    let s = u[0].status.as_ref().unwrap();
    assert_eq!(s.phase.as_deref(), Some("Pending"), "{s:?}");
    // The back-off over: made again, running, the pod never failed.
    for f in p.mem().create_failures.values_mut() {
        f.1 -= jiff::SignedDuration::from_hours(1);
    }
    sync(&p, &mut pods, &o).await;
    let u = sync(&p, &mut pods, &o).await;
    assert_eq!(z.calls("create_container"), 2);
    let s = u[0].status.as_ref().unwrap();
    assert_eq!(s.phase.as_deref(), Some("Running"), "{s:?}");
    let cs = &s.container_statuses.as_ref().unwrap()[0];
    assert_ne!(cs.container_id.as_deref(), Some(&*format!("zun://{first}")));
    assert!(cs.container_id.is_some());
}

fn never_restarted(name: &str, uid: &str) -> Pod {
    pod(
        name,
        uid,
        json!({"nodeName": "vk", "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}),
    )
}

#[tokio::test]
async fn an_exit_zuns_list_does_not_show_yet_is_seen_by_the_exit_check() {
    let z = FakeZun::new();
    let o = NoObjects::default();
    // Without exit checks the pod shows Running for as long as Zun's list lags behind Docker
    // (until zun-compute's periodic state sync, 60 s by default).
    let p = provider(&z);
    let mut pods = vec![never_restarted("a", "uid-a")];
    sync(&p, &mut pods, &o).await;
    sync(&p, &mut pods, &o).await;
    let id = z.containers()[0].uuid.clone();
    z.exit_unsynced(&id, 3);
    for _ in 0..3 {
        let u = sync(&p, &mut pods, &o).await;
        assert_eq!(
            u[0].status.as_ref().unwrap().phase.as_deref(),
            Some("Running")
        );
    }
    z.sync_states();

    // With them, a GET finds the exit the next pass.
    let z = FakeZun::new();
    let p = provider(&z).with_exit_check(Some(std::time::Duration::from_secs(3600)));
    let mut pods = vec![never_restarted("a", "uid-a")];
    sync(&p, &mut pods, &o).await;
    sync(&p, &mut pods, &o).await;
    assert_eq!(
        z.calls("get_container"),
        1,
        "checked when first seen running"
    );
    let id = z.containers()[0].uuid.clone();
    z.exit_unsynced(&id, 3);
    let u = sync(&p, &mut pods, &o).await;
    // Checked an hour ago at most: not again yet.
    assert_eq!(
        u[0].status.as_ref().unwrap().phase.as_deref(),
        Some("Running")
    );
    assert_eq!(z.calls("get_container"), 1);

    let p = provider(&z).with_exit_check(Some(std::time::Duration::ZERO));
    let u = sync(&p, &mut pods, &o).await;
    let s = u[0].status.as_ref().unwrap();
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    let t = s.container_statuses.as_ref().unwrap()[0]
        .state
        .as_ref()
        .unwrap()
        .terminated
        .clone()
        .unwrap();
    assert_eq!(t.exit_code, 3);
}

#[tokio::test]
async fn exit_checks_cost_a_few_gets_per_pass_oldest_first() {
    let z = FakeZun::new();
    let o = NoObjects::default();
    let p = provider(&z).with_exit_check(Some(std::time::Duration::ZERO));
    let mut pods: Vec<Pod> = (0..5)
        .map(|i| never_restarted(&format!("p{i}"), &format!("uid-{i}")))
        .collect();
    sync(&p, &mut pods, &o).await;
    assert_eq!(z.calls("get_container"), 0, "nothing running yet");
    let mut seen = BTreeSet::new();
    for pass in 1..=3 {
        let before = z.calls("get_container");
        sync(&p, &mut pods, &o).await;
        assert_eq!(
            z.calls("get_container") - before,
            EXIT_CHECKS_PER_PASS as u64,
            "pass {pass}"
        );
        seen.extend(p.mem().exit_checked.keys().cloned());
    }
    // Round robin: the five containers were all asked about within three passes.
    assert_eq!(seen.len(), 5);
}

/// Updates handed over by [`Provider::sync_each`], as they come.
fn collector() -> (
    impl Fn(PodUpdate) + Send + Sync,
    tokio::sync::mpsc::UnboundedReceiver<PodUpdate>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    (
        move |u: PodUpdate| {
            let _ = tx.send(u);
        },
        rx,
    )
}

#[tokio::test]
async fn one_pod_waiting_on_zun_holds_back_no_other_pod() {
    let z = FakeZun::new();
    z.hang_creates_labelled(labels::POD_UID, "uid-stuck");
    let o = NoObjects::default();
    let p = provider(&z);
    let pods = vec![never_restarted("stuck", "uid-stuck"), seed_pod()];
    let (emit, mut rx) = collector();
    let first = p.sync_each(&pods, &o, true, &emit);
    tokio::pin!(first);
    // The other pod's update comes out while the stuck pod's create has no answer.
    let u = tokio::select! {
        _ = &mut first => panic!("the pass ended though a create never answers"),
        u = tokio::time::timeout(std::time::Duration::from_secs(20), rx.recv()) => {
            u.expect("no update while one pod's create hangs").unwrap()
        }
    };
    assert_eq!(u.uid, "uid-1");
    assert_eq!(u.events[0].reason, "Created");
    // A pass meanwhile goes on with the other pod and leaves the held one to its pass.
    let mut later = pods.clone();
    later[1].status = u.status.clone();
    let u = p.sync(&later, &o, true).await.unwrap();
    let uids: Vec<&str> = u.iter().map(|u| u.uid.as_str()).collect();
    assert_eq!(uids, ["uid-1"]);
    assert_eq!(
        u[0].status.as_ref().unwrap().phase.as_deref(),
        Some("Running")
    );
    assert_eq!(
        z.calls("create_container"),
        2,
        "the held pod's create is not sent again"
    );
}

#[tokio::test]
async fn a_zun_call_without_an_answer_ends_at_its_deadline() {
    let z = FakeZun::new();
    z.hang_creates_labelled(labels::POD_UID, "uid-stuck");
    let o = NoObjects::default();
    let metrics = crate::timed::CallMetrics::default();
    let p = provider(&z).with_zun_calls(std::time::Duration::from_millis(300), metrics.clone());
    let mut pods = vec![never_restarted("stuck", "uid-stuck"), seed_pod()];
    let u = sync(&p, &mut pods, &o).await;
    let stuck = u.iter().find(|u| u.uid == "uid-stuck").unwrap();
    let waiting = stuck
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .state
        .as_ref()
        .unwrap()
        .waiting
        .clone()
        .unwrap();
    assert_eq!(waiting.reason.as_deref(), Some("CreateContainerError"));
    assert!(
        waiting
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("no answer within 0.3s"),
        "{waiting:?}"
    );
    assert_eq!(metrics.count("create_container", "timeout"), 1);
    // The next pass is not held either: the other pod runs.
    let u = sync(&p, &mut pods, &o).await;
    let ok = u.iter().find(|u| u.uid == "uid-1").unwrap();
    assert_eq!(
        ok.status.as_ref().unwrap().phase.as_deref(),
        Some("Running")
    );
}

#[tokio::test]
async fn while_zun_queues_the_transition_pass_leaves_its_pods_to_the_full_passes() {
    let z = FakeZun::new();
    let o = NoObjects::default();
    let p = provider(&z);
    let mut pods = vec![seed_pod()];
    sync(&p, &mut pods, &o).await;
    // Created, not yet seen running: in transition, read with a GET.
    assert_eq!(p.sync_transitions(&pods, &o).await.unwrap().len(), 1);
    assert_eq!(z.calls("get_container"), 1);
    // The last list was slow: no GET (zun-api would queue it behind everything else).
    p.mem().zun_slow = true;
    assert!(p.sync_transitions(&pods, &o).await.unwrap().is_empty());
    assert_eq!(z.calls("get_container"), 1);
}
