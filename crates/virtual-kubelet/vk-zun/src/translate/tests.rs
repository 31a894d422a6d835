use super::*;
use k8s_openapi::ByteString;
use serde_json::json;

fn pod(v: serde_json::Value) -> Pod {
    let mut base = json!({
        "metadata": {"name": "myapp-pod", "namespace": "team-a", "uid": "0a1b2c3d-0000-4000-8000-000000000001",
                     "labels": {"app": "myapp"}, "annotations": {"note": "hi"}},
        "spec": {"nodeName": "virtual-kubelet", "serviceAccountName": "default", "containers": []}
    });
    merge(&mut base, v);
    serde_json::from_value(base).unwrap()
}

fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
    match (a, b) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

fn cfg() -> Config {
    Config {
        network: Some("pods-net".into()),
        host_ip: "192.0.2.10".into(),
        ..Default::default()
    }
}

fn one(p: &Pod, refs: &Referenced) -> ZunContainerCreate {
    let t = translate(p, refs, &cfg()).unwrap();
    assert_eq!(t.main.len(), 1);
    t.main[0].create.clone()
}

#[test]
fn seed_example_pod() {
    let p = pod(json!({"spec": {
        "tolerations": [{"key": "virtual-kubelet.io/provider", "operator": "Equal", "value": "openstack", "effect": "NoSchedule"}],
        "containers": [{"name": "myapp-container", "image": "busybox",
                        "command": ["sh", "-c", "echo Hello Kubernetes! && sleep 3600"]}]}}));
    let c = one(&p, &Referenced::default());
    assert_eq!(c.image, "busybox");
    // No args: split so that Zun does not append the image's CMD.
    assert_eq!(c.entrypoint, Some(vec!["sh".into()]));
    assert_eq!(
        c.command,
        Some(vec![
            "-c".into(),
            "echo Hello Kubernetes! && sleep 3600".into()
        ])
    );
    assert_eq!(c.cpu, Some(0.5));
    assert_eq!(c.memory, Some(512));
    assert_eq!(c.nets[0].network.as_deref(), Some("pods-net"));
    assert_eq!(c.restart_policy.as_ref().unwrap().name, "no");
    assert!(c.run);
    assert_eq!(c.labels[labels::NAMESPACE], "team-a");
    assert_eq!(c.labels[labels::POD], "myapp-pod");
    assert_eq!(
        c.labels[labels::POD_UID],
        "0a1b2c3d-0000-4000-8000-000000000001"
    );
    assert_eq!(c.labels[labels::NODE], "virtual-kubelet");
    assert_eq!(c.labels[labels::CONTAINER], "myapp-container");
    assert_eq!(c.name, "team-a-myapp-pod-myapp-container-0a1b2c3d");
    assert_eq!(c.hostname.as_deref(), Some("myapp-pod"));
    assert_eq!(
        c.image_pull_policy, None,
        "admin-only in Zun: not sent unless asked"
    );
}

#[test]
fn command_and_args_semantics() {
    let env = BTreeMap::from([("WHO".to_string(), "world".to_string())]);
    let c = |v: serde_json::Value| -> Container { serde_json::from_value(v).unwrap() };
    // args only: the image's ENTRYPOINT stays, CMD is replaced.
    let (ep, cmd) = command_and_args(&c(json!({"name": "a", "args": ["hello", "$(WHO)"]})), &env);
    assert_eq!(ep, None);
    assert_eq!(cmd, Some(vec!["hello".into(), "world".into()]));
    // both: both replaced.
    let (ep, cmd) = command_and_args(
        &c(json!({"name": "a", "command": ["/bin/echo"], "args": ["$$(WHO)", "$(NOPE)"]})),
        &env,
    );
    assert_eq!(ep, Some(vec!["/bin/echo".into()]));
    assert_eq!(cmd, Some(vec!["$(WHO)".into(), "$(NOPE)".into()]));
    // command only: exactly that argv (Zun would append the image's CMD to
    // an entrypoint alone), a one-word command cannot be split.
    let (ep, cmd) = command_and_args(
        &c(json!({"name": "a", "command": ["sleep", "$(WHO)"]})),
        &env,
    );
    assert_eq!(ep, Some(vec!["sleep".into()]));
    assert_eq!(cmd, Some(vec!["world".into()]));
    let (ep, cmd) = command_and_args(&c(json!({"name": "a", "command": ["/app"]})), &env);
    assert_eq!(ep, Some(vec!["/app".into()]));
    assert_eq!(cmd, None);
    // neither: the image decides.
    assert_eq!(
        command_and_args(&c(json!({"name": "a"})), &env),
        (None, None)
    );
}

#[test]
fn expansion_edge_cases() {
    let env = BTreeMap::from([("A".to_string(), "1".to_string())]);
    assert_eq!(expand("x$(A)y", &env), "x1y");
    assert_eq!(expand("$$", &env), "$");
    assert_eq!(expand("$(A", &env), "$(A");
    assert_eq!(expand("cost $5", &env), "cost $5");
    assert_eq!(expand("$", &env), "$");
}

fn refs() -> Referenced {
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "app-config"}, "data": {"GREETING": "hello", "COLOR": "blue"}}))
    .unwrap();
    let mut s = Secret::default();
    s.metadata.name = Some("app-secret".into());
    s.data = Some(BTreeMap::from([
        ("PASSWORD".to_string(), ByteString(b"s3cret".to_vec())),
        ("TOKEN".to_string(), ByteString(b"t0k".to_vec())),
    ]));
    Referenced {
        config_maps: BTreeMap::from([("app-config".to_string(), cm)]),
        secrets: BTreeMap::from([("app-secret".to_string(), s)]),
        ..Default::default()
    }
}

#[test]
fn env_sources_resolved_at_create_time() {
    let p = pod(json!({"spec": {"containers": [{
    "name": "c", "image": "busybox", "workingDir": "/tmp",
    "resources": {"limits": {"cpu": "250m", "memory": "64Mi"}, "requests": {"cpu": "100m", "memory": "32Mi"}},
    "envFrom": [{"configMapRef": {"name": "app-config"}, "prefix": "CFG_"}, {"secretRef": {"name": "app-secret"}}],
    "env": [
        {"name": "PLAIN", "value": "v-$(CFG_COLOR)"},
        {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"name": "app-config", "key": "GREETING"}}},
        {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "app-secret", "key": "PASSWORD"}}},
        {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "x", "optional": true}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        {"name": "CPU_M", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}}},
        {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
        {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
        {"name": "TOKEN", "value": "explicit wins"}
    ]}]}}));
    let c = one(&p, &refs());
    let e = &c.environment;
    assert_eq!(e["CFG_GREETING"], "hello");
    assert_eq!(e["PASSWORD"], "s3cret");
    assert_eq!(e["TOKEN"], "explicit wins");
    assert_eq!(e["PLAIN"], "v-blue");
    assert_eq!(e["FROM_CM"], "hello");
    assert_eq!(e["FROM_SECRET"], "s3cret");
    assert!(!e.contains_key("OPT"));
    assert_eq!(e["POD_NAME"], "myapp-pod");
    assert_eq!(e["POD_NS"], "team-a");
    assert_eq!(e["POD_UID"], "0a1b2c3d-0000-4000-8000-000000000001");
    assert_eq!(e["NODE"], "virtual-kubelet");
    assert_eq!(e["HOST_IP"], "192.0.2.10");
    assert_eq!(e["APP"], "myapp");
    assert_eq!(e["CPU_M"], "250");
    assert_eq!(e["CPU"], "1", "cores round up as the kubelet does");
    assert_eq!(e["MEM_MI"], "64");
    assert_eq!(c.workdir.as_deref(), Some("/tmp"));
    assert_eq!(c.cpu, Some(0.25), "limits win over requests");
    assert_eq!(c.memory, Some(64));
}

#[test]
fn requests_used_when_no_limits() {
    let p = pod(
        json!({"spec": {"containers": [{"name": "c", "image": "busybox",
        "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}]}}),
    );
    let c = one(&p, &Referenced::default());
    assert_eq!((c.cpu, c.memory), (Some(2.0), Some(1024)));
}

#[test]
fn missing_references_wait_instead_of_failing() {
    let p = pod(
        json!({"spec": {"containers": [{"name": "c", "image": "busybox",
        "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "app-config", "key": "NOPE"}}}]}]}}),
    );
    let e = translate(&p, &refs(), &cfg()).unwrap_err();
    assert!(
        matches!(&e, TranslateError::MissingReference(m) if m.contains("NOPE") && m.contains("spec.containers[0].env[0]")),
        "{e}"
    );
    let p = pod(
        json!({"spec": {"containers": [{"name": "c", "image": "busybox",
        "envFrom": [{"secretRef": {"name": "absent"}}]}]}}),
    );
    assert!(matches!(
        translate(&p, &refs(), &cfg()),
        Err(TranslateError::MissingReference(_))
    ));
    assert_eq!(references(&p), vec![Reference::Secret("absent".into())]);
}

#[test]
fn init_containers_ports_and_pull_policy() {
    let p = pod(json!({
        "metadata": {"annotations": {NETWORK_ANNOTATION: "other-net"}},
        "spec": {
        "initContainers": [{"name": "setup", "image": "busybox", "command": ["true"]}],
        "containers": [{"name": "web", "image": "nginx", "imagePullPolicy": "IfNotPresent",
                        "ports": [{"containerPort": 80}, {"containerPort": 53, "protocol": "UDP"}]}]}}));
    let mut c = cfg();
    c.send_pull_policy = true;
    c.image_driver = Some("glance".into());
    let t = translate(&p, &Referenced::default(), &c).unwrap();
    assert_eq!(t.init.len(), 1);
    assert_eq!(t.init[0].role, Role::Init);
    assert_eq!(t.init[0].create.labels[labels::ROLE], "init");
    let w = &t.main[0].create;
    assert_eq!(w.image_pull_policy.as_deref(), Some("ifnotpresent"));
    assert_eq!(w.image_driver.as_deref(), Some("glance"));
    assert_eq!(w.nets[0].network.as_deref(), Some("other-net"));
    assert_eq!(
        w.exposed_ports.keys().cloned().collect::<Vec<_>>(),
        vec!["53/udp".to_string(), "80/tcp".to_string()]
    );
}

fn refused(v: serde_json::Value) -> String {
    let p = pod(v);
    match validate(&p) {
        Err(TranslateError::Unsupported { field, .. }) => field,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn unsupported_fields_are_named() {
    let c = json!([{"name": "c", "image": "busybox"}]);
    assert_eq!(
        refused(json!({"spec": {"hostNetwork": true, "containers": c}})),
        "spec.hostNetwork"
    );
    assert_eq!(
        refused(
            json!({"spec": {"containers": c, "volumes": [{"name": "data", "hostPath": {"path": "/etc"}}]}})
        ),
        "spec.volumes[0].hostPath"
    );
    assert_eq!(
        refused(
            json!({"spec": {"containers": [{"name": "c", "image": "busybox", "securityContext": {"privileged": true}}]}})
        ),
        "spec.containers[0].securityContext.privileged"
    );
    assert_eq!(
        refused(
            json!({"spec": {"containers": [{"name": "c", "image": "busybox",
            "livenessProbe": {"grpc": {"port": 9000}}}]}})
        ),
        "spec.containers[0].livenessProbe.grpc"
    );
    assert_eq!(
        refused(
            json!({"spec": {"containers": [{"name": "c", "image": "busybox", "ports": [{"containerPort": 80, "hostPort": 8080}]}]}})
        ),
        "spec.containers[0].ports[0].hostPort"
    );
    assert_eq!(
        refused(
            json!({"spec": {"containers": [{"name": "c", "image": "busybox",
            "env": [{"name": "P", "valueFrom": {"fieldRef": {"fieldPath": "status.phase"}}}]}]}})
        ),
        "spec.containers[0].env[0].valueFrom.fieldRef.fieldPath"
    );
    assert_eq!(
        refused(
            json!({"spec": {"containers": [{"name": "c", "image": "busybox",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
        ),
        "spec.containers[0].resources.limits[nvidia.com/gpu]"
    );
    assert_eq!(
        refused(
            json!({"metadata": {"annotations": {MODE_ANNOTATION: "capsule"}}, "spec": {"containers": c}})
        ),
        format!("metadata.annotations[{MODE_ANNOTATION}]")
    );
    assert_eq!(
        refused(
            json!({"spec": {"initContainers": [{"name": "i", "image": "busybox", "restartPolicy": "Always"}], "containers": c}})
        ),
        "spec.initContainers[0].restartPolicy"
    );
    assert_eq!(
        refused(json!({"spec": {"containers": c, "resources": {"limits": {"cpu": "1"}}}})),
        "spec.resources"
    );
    assert_eq!(
        refused(
            json!({"spec": {"containers": [{"name": "c", "image": "busybox",
            "restartPolicyRules": [{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]}]}})
        ),
        "spec.containers[0].restartPolicyRules"
    );
}

#[test]
fn service_account_token_volume_is_accepted() {
    let p = pod(json!({"spec": {
        "volumes": [{"name": "kube-api-access-abcde", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}],
        "containers": [{"name": "c", "image": "busybox",
            "volumeMounts": [{"name": "kube-api-access-abcde", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}]}}));
    assert!(validate(&p).is_ok());
}

#[test]
fn project_network_annotation_is_a_reference_resolved_to_the_network_id() {
    let p = pod(json!({
        "metadata": {"annotations": {PROJECT_NETWORK_ANNOTATION: "tenant/pods"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }));
    assert!(references(&p).contains(&Reference::OpenstackProject("tenant".into())));
    match translate(&p, &Referenced::default(), &cfg()) {
        Err(TranslateError::MissingReference(m)) => {
            assert!(m.contains(PROJECT_NETWORK_ANNOTATION), "{m}")
        }
        other => panic!("{other:?}"),
    }
    let project: api::OpenstackProject = serde_json::from_value(json!({
        "apiVersion": "sunet.se/v1alpha1", "kind": "OpenstackProject",
        "metadata": {"name": "tenant", "namespace": "team-a"},
        "spec": {"name": "tenant", "domain": "default", "networks": [{"name": "pods", "cidr": "10.9.0.0/24"}]},
        "status": {"networks": [{"name": "pods", "networkId": "net-id-1"}]}
    }))
    .unwrap();
    let refs = Referenced {
        projects: BTreeMap::from([("tenant".to_string(), project)]),
        ..Default::default()
    };
    let c = one(&p, &refs);
    assert_eq!(c.nets.len(), 1);
    assert_eq!(
        c.nets[0].network.as_deref(),
        Some("net-id-1"),
        "not the flag's pods-net"
    );
    // A malformed annotation fails validation: nothing is created.
    let bad = pod(json!({
        "metadata": {"annotations": {PROJECT_NETWORK_ANNOTATION: "tenant"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }));
    assert!(matches!(
        validate(&bad),
        Err(TranslateError::Unsupported { .. })
    ));
}

#[test]
fn the_pods_port_goes_to_the_first_regular_container_and_its_ip_to_env() {
    let env = json!([
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "POD_IPS", "valueFrom": {"fieldRef": {"fieldPath": "status.podIPs"}}},
        {"name": "CPU_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}
    ]);
    let p = pod(json!({"spec": {
        "initContainers": [{"name": "i", "image": "busybox", "env": env}],
        "containers": [{"name": "a", "image": "busybox", "env": env, "ports": [{"containerPort": 80}]},
                       {"name": "b", "image": "busybox", "ports": [{"containerPort": 81}]}]}}));
    let refs = Referenced {
        port: Some(PodPort {
            id: "port-1".into(),
            ips: vec!["10.1.2.3".into()],
        }),
        node_cpu: Some(8.0),
        ..Default::default()
    };
    let t = translate(&p, &refs, &cfg()).unwrap();
    let a = &t.main[0].create;
    assert_eq!(a.nets.len(), 1);
    assert_eq!(a.nets[0].port.as_deref(), Some("port-1"));
    assert_eq!(a.nets[0].network, None);
    assert_eq!(a.environment["POD_IP"], "10.1.2.3");
    assert_eq!(a.environment["POD_IPS"], "10.1.2.3");
    assert_eq!(
        a.environment["CPU_LIMIT"], "8",
        "no CPU limit: the node's CPUs"
    );
    // Every container of the pod sees the pod's IP, init containers included; only one
    // container can hold the port.
    let i = &t.init[0].create;
    assert_eq!(i.environment["POD_IP"], "10.1.2.3");
    assert_eq!(i.nets[0].network.as_deref(), Some("pods-net"));
    assert_eq!(
        t.main[1].create.nets[0].network.as_deref(),
        Some("pods-net")
    );
    // Zun's exposed-ports group would not reach a port it did not make: the pod's own group
    // does (pod_port); other containers keep Zun's.
    assert!(a.exposed_ports.is_empty());
    assert!(t.main[1].create.exposed_ports.contains_key("81/tcp"));
}

#[test]
fn pod_ip_without_a_known_network_is_refused_at_create() {
    let p = pod(
        json!({"spec": {"containers": [{"name": "c", "image": "busybox",
        "env": [{"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}]}}),
    );
    assert!(validate(&p).is_ok());
    match translate(&p, &Referenced::default(), &Config::default()) {
        Err(TranslateError::Unsupported { field, .. }) => {
            assert_eq!(
                field,
                "spec.containers[0].env[0].valueFrom.fieldRef.fieldPath"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn hostname_override_wins_over_hostname() {
    let p = pod(
        json!({"spec": {"hostname": "h", "hostnameOverride": "override-name",
        "containers": [{"name": "c", "image": "busybox"}]}}),
    );
    assert_eq!(
        one(&p, &Referenced::default()).hostname.as_deref(),
        Some("override-name")
    );
}
